//! The systemd floor of the start scenario (issue 16): the same instances fleet starts, done by systemd alone on
//! the same cluster in the same run, so every fleet figure can be read as a ratio to it. On each machine, in
//! parallel, for that machine's share of the N instances (`f@<i>.service`, the bench template's text): write the
//! unit files into `/run/systemd/system`, one `daemon-reload`, `systemctl start --no-block` of all, until systemd
//! shows them all running; later `systemctl stop --no-block` of all until none is active, remove the files, one
//! `daemon-reload`, until systemd lists none of them. Each step is timed inside the machine (bash
//! `$EPOCHREALTIME`); the floor itself is the host's wall time of the slowest machine (it includes `docker exec`,
//! as fleet's figures include starting fleetctl).

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::cpu::{self, CpuSplit};
use super::ctx::Ctx;
use super::stats::secs;
use super::units;

/// Instance prefix of the floor's units (fleet's are `t@`).
pub const PREFIX: &str = "f";

/// Polling interval of the wait loops inside the machines, in seconds (the destroy's wait for systemd is the same).
const POLL_S: &str = "0.05";

/// One machine's share, each step in seconds since the script began.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MachineFloor {
    pub machine: String,
    pub units: usize,
    /// Seconds since the script began at which each step ended (`written`, `reloaded`, `start_returned`,
    /// `running` for the start; `stop_returned`, `stopped`, `removed`, `reloaded`, `unloaded` for the stop).
    pub steps: BTreeMap<String, f64>,
    /// Host wall time of the whole `docker exec`.
    pub wall_s: f64,
}

/// The floor of one N.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Floor {
    /// Host wall time until every machine ran its share (slowest machine).
    pub start_s: Option<f64>,
    /// Host wall time until every machine stopped and unloaded its share.
    pub stop_s: Option<f64>,
    pub start_machines: Vec<MachineFloor>,
    pub stop_machines: Vec<MachineFloor>,
    /// Whose CPU seconds the start and the stop took.
    pub start_cpu: Option<CpuSplit>,
    pub stop_cpu: Option<CpuSplit>,
    pub errors: Vec<String>,
}

/// Splits instances `1..=n` over `machines` machines as evenly as fleet's scheduler would (33–34 of 100 on 3).
pub fn shares(n: usize, machines: usize) -> Vec<(usize, usize)> {
    if machines == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(machines);
    let mut next = 1;
    for m in 0..machines {
        let count = n / machines + usize::from(m < n % machines);
        out.push((next, next + count - 1));
        next += count;
    }
    out.into_iter().filter(|(a, b)| b >= a).collect()
}

/// bash without forks: `step <name>` prints the microseconds since the script began.
const CLOCK: &str = r#"t0=${EPOCHREALTIME//[.,]/}
step() { echo "$1 $(( ${EPOCHREALTIME//[.,]/} - t0 ))"; }"#;

/// The start script for instances `a..=b`: prints `step microseconds` lines.
pub fn start_script(a: usize, b: usize, unit_text: &str) -> String {
    let count = b + 1 - a;
    format!(
        r#"set -e
{CLOCK}
cd /run/systemd/system
text='{text}'
for i in $(seq {a} {b}); do printf '%s' "$text" > {p}@$i.service; done
step written
systemctl daemon-reload
step reloaded
systemctl start --no-block {p}@{{{a}..{b}}}.service
step start_returned
until [ "$(systemctl list-units '{p}@*' --state=running --no-legend --plain | wc -l)" -ge {count} ]; do sleep {POLL_S}; done
step running
"#,
        text = unit_text.replace('\'', r"'\''"),
        p = PREFIX,
    )
}

/// The stop-and-unload script for instances `a..=b`.
pub fn stop_script(a: usize, b: usize) -> String {
    format!(
        r#"set -e
{CLOCK}
systemctl stop --no-block {p}@{{{a}..{b}}}.service
step stop_returned
until [ "$(systemctl list-units '{p}@*' --state=active,activating,deactivating,reloading --no-legend --plain | wc -l)" -eq 0 ]; do sleep {POLL_S}; done
step stopped
rm -f /run/systemd/system/{p}@*.service
step removed
systemctl daemon-reload
step reloaded
until [ "$(systemctl list-units '{p}@*' --all --no-legend --plain | wc -l)" -eq 0 ]; do sleep {POLL_S}; done
step unloaded
"#,
        p = PREFIX,
    )
}

/// Parses the `step microseconds` lines of a script.
pub fn parse_steps(stdout: &str) -> Result<BTreeMap<String, f64>, String> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (k, v) = l.split_once(' ').ok_or_else(|| format!("floor step line without a time: {l:?}"))?;
            let us: u64 =
                v.trim().parse().map_err(|_| format!("floor step {k}: not a number of microseconds: {v:?}"))?;
            Ok((k.to_string(), (us as f64 / 1e3).round() / 1e3))
        })
        .collect()
}

/// Runs one script per machine (its share), in parallel; the host wall time of the slowest, or the errors.
async fn on_each(
    ctx: &Ctx,
    n: usize,
    script: impl Fn(usize, usize) -> String,
) -> (Option<f64>, Vec<MachineFloor>, Vec<String>) {
    let machines = ctx.cluster.machines();
    let t0 = Instant::now();
    let runs = machines.iter().zip(shares(n, machines.len())).map(|(m, (a, b))| {
        let script = script(a, b);
        async move {
            let out = m.exec(&["bash", "-c", &script]).await.map_err(|e| format!("{}: {e}", m.container_name()))?;
            let wall_s = secs(t0.elapsed());
            if !out.success() {
                return Err(format!("{}: floor script failed: {}", m.container_name(), out.describe()));
            }
            let steps = parse_steps(&out.stdout).map_err(|e| format!("{}: {e}", m.container_name()))?;
            Ok(MachineFloor { machine: m.container_name().to_string(), units: b + 1 - a, steps, wall_s })
        }
    });
    let results = futures::future::join_all(runs).await;
    let mut done = Vec::new();
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(m) => done.push(m),
            Err(e) => errors.push(e),
        }
    }
    let slowest = errors.is_empty().then(|| done.iter().map(|m| m.wall_s).fold(0.0, f64::max));
    (slowest, done, errors)
}

/// Measures the floor for `n` instances: start, then stop and unload.
pub async fn measure(ctx: &Ctx, n: usize) -> Floor {
    let text = units::template("floor");
    let machines = ctx.cluster.machines().len();
    let cpu0 = cpu::sample(ctx).await;
    let (start_s, start_machines, mut errors) = on_each(ctx, n, |a, b| start_script(a, b, &text)).await;
    let cpu1 = cpu::sample(ctx).await;
    let (stop_s, stop_machines, stop_errors) = on_each(ctx, n, stop_script).await;
    let cpu2 = cpu::sample(ctx).await;
    errors.extend(stop_errors);
    Floor {
        start_s,
        stop_s,
        start_machines,
        stop_machines,
        start_cpu: Some(cpu::split(&cpu0, &cpu1, machines)),
        stop_cpu: Some(cpu::split(&cpu1, &cpu2, machines)),
        errors,
    }
}

/// `fleet / floor` as `1.23×`, or `—` when either is missing.
pub fn ratio(fleet: Option<f64>, floor: Option<f64>) -> Option<f64> {
    match (fleet, floor) {
        (Some(a), Some(b)) if b > 0.0 => Some((a / b * 100.0).round() / 100.0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_split_evenly_and_cover_all() {
        assert_eq!(shares(100, 3), vec![(1, 34), (35, 67), (68, 100)]);
        assert_eq!(shares(1000, 3), vec![(1, 334), (335, 667), (668, 1000)]);
        assert_eq!(shares(2, 3), vec![(1, 1), (2, 2)]);
        assert!(shares(5, 0).is_empty());
    }

    #[test]
    fn steps_parse_and_bad_lines_are_named() {
        let s = parse_steps("written 12345\nrunning 1500000\n").unwrap();
        assert_eq!((s["written"], s["running"]), (0.012, 1.5));
        let e = parse_steps("running soon\n").unwrap_err();
        assert!(e.contains("running") && e.contains("soon"), "{e}");
    }

    #[test]
    fn start_script_quotes_the_unit_text_and_names_the_range() {
        let s = start_script(3, 7, "ExecStart=/bin/bash -c 'x'\n");
        assert!(s.contains(r"ExecStart=/bin/bash -c '\''x'\''"), "{s}");
        assert!(s.contains("systemctl start --no-block f@{3..7}.service"), "{s}");
        assert!(s.contains("-ge 5 ]"), "{s}");
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), None), None);
    }
}

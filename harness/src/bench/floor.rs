//! The systemd floor of the start scenario (issue 16): the same instances fleet starts, done by systemd alone on
//! the same cluster in the same run, so every fleet figure can be read as a ratio to it. On each machine, in
//! parallel, for that machine's share of the N instances (`f@<i>.service`, the bench template's text): write the
//! unit files into `/run/systemd/system`, one `daemon-reload`, `systemctl start --no-block` of all, until systemd
//! shows them all running; later `systemctl stop --no-block` of all until none is active, remove the files, one
//! `daemon-reload`, until systemd lists none of them. Each step is timed inside the machine (bash
//! `$EPOCHREALTIME`); the floor itself is the host's wall time of the slowest machine (it includes `docker exec`,
//! as fleet's figures include starting fleetctl).
//!
//! It is measured twice per N (issue 35): first with fleetd running in the machines ([`measure`]; fleetd is
//! subscribed to systemd's D-Bus signals, which slows systemd itself), then with fleetd stopped in every machine
//! ([`measure_without_fleetd`]: `systemctl stop fleet.service`, the floor, `systemctl start fleet.service`, and a
//! wait until fleet lists every machine again, an engine leader has taken office and every API answers). The one
//! with fleetd stopped is the floor fleet's ratios are read against.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cpu::{self, CpuSplit};
use super::ctx::Ctx;
use super::procs;
use super::stats::secs;
use super::units;
use crate::wait::{self, Check, WaitOptions};

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

/// Whether fleetd ran in the machines while a floor was measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fleetd {
    /// `systemctl stop fleet.service` in every machine before, started again after: systemd alone.
    #[default]
    Stopped,
    /// fleetd running, idle, subscribed to systemd's signals.
    Running,
}

/// The floor of one N.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Floor {
    /// Whether fleetd ran in the machines meanwhile.
    pub fleetd: Fleetd,
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

/// Measures the floor for `n` instances with fleetd running: start, then stop and unload.
pub async fn measure(ctx: &Ctx, n: usize) -> Floor {
    measure_as(ctx, n, Fleetd::Running).await
}

/// Start, then stop and unload, recorded as measured with `fleetd` (which this does not change).
async fn measure_as(ctx: &Ctx, n: usize, fleetd: Fleetd) -> Floor {
    let text = units::template("floor");
    let machines = ctx.cluster.machines().len();
    let cpu0 = cpu::sample(ctx).await;
    let (start_s, start_machines, mut errors) = on_each(ctx, n, |a, b| start_script(a, b, &text)).await;
    let cpu1 = cpu::sample(ctx).await;
    let (stop_s, stop_machines, stop_errors) = on_each(ctx, n, stop_script).await;
    let cpu2 = cpu::sample(ctx).await;
    errors.extend(stop_errors);
    Floor {
        fleetd,
        start_s,
        stop_s,
        start_machines,
        stop_machines,
        start_cpu: Some(cpu::split(&cpu0, &cpu1, machines)),
        stop_cpu: Some(cpu::split(&cpu1, &cpu2, machines)),
        errors,
    }
}

/// fleetd's unit in the machines ([`crate::config::fleet_units`]).
const FLEETD_UNIT: &str = "fleet.service";

/// Longest wait for fleet to be back after the floor without it (every machine listed, a leader, every API).
const BACK_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the pause of fleetd around the floor without it took.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pause {
    /// Host wall time of `systemctl stop fleet.service` in every machine (the slowest).
    pub stop_s: Option<f64>,
    /// From `systemctl start fleet.service` in every machine until fleet listed every machine, an engine leader had
    /// taken office and every machine's API answered.
    pub back_s: Option<f64>,
    /// Why fleet is not back (then the fleet part of the scenario cannot run).
    pub error: Option<String>,
}

/// Stops fleetd (a stop, not a restart: it purges its machine, which holds no fleet unit yet), then prints its
/// state.
pub fn stop_fleetd_script() -> String {
    format!("systemctl stop {FLEETD_UNIT}; systemctl is-active {FLEETD_UNIT} || true")
}

/// Prints fleetd's state.
pub fn fleetd_state_script() -> String {
    format!("systemctl is-active {FLEETD_UNIT} || true")
}

/// Starts fleetd again.
pub fn start_fleetd_script() -> String {
    format!("systemctl start {FLEETD_UNIT}")
}

/// The machines whose fleetd is not stopped, one error each, from each machine's `systemctl is-active` output
/// (`inactive`, or `failed` when it exited with an error on the stop: either way it does not run).
pub fn not_stopped(states: &[(String, String)]) -> Vec<String> {
    states
        .iter()
        .filter(|(_, state)| !matches!(state.trim(), "inactive" | "failed"))
        .map(|(machine, state)| format!("{machine}: fleetd is {:?}, not stopped", state.trim()))
        .collect()
}

/// Whether fleet is back after the floor without it: `listed` of `machines` in `list-machines`, and the engine
/// leader (its slot, and whether that machine's fleetd says it took office since its restart: the key of a
/// leader that could not resign outlives it until its lease expires).
pub fn back(listed: usize, machines: usize, leader: Option<(usize, bool)>) -> Result<(), String> {
    let leader = match leader {
        None => Some("no engine leader".to_string()),
        Some((slot, false)) => Some(format!("the leader key names m{slot}, whose fleetd has not taken office")),
        Some((_, true)) => None,
    };
    match (listed == machines, leader) {
        (true, None) => Ok(()),
        (true, Some(l)) => Err(format!("{listed} of {machines} machines listed, {l}")),
        (false, l) => {
            Err(format!("{listed} of {machines} machines listed{}", l.map(|l| format!(", {l}")).unwrap_or_default()))
        }
    }
}

/// Runs `script` in every machine (in parallel): each machine's name and stdout, or an error naming it.
async fn on_every_machine(ctx: &Ctx, script: &str) -> Vec<(String, Result<String, String>)> {
    let runs = ctx.cluster.machines().iter().map(|m| async move {
        let name = m.container_name().to_string();
        let out = match m.exec(&["sh", "-c", script]).await {
            Ok(out) if out.success() => Ok(out.stdout),
            Ok(out) => Err(format!("{name}: `{script}`: {}", out.describe())),
            Err(e) => Err(format!("{name}: {e}")),
        };
        (name, out)
    });
    futures::future::join_all(runs).await
}

/// fleetd's state in every machine; errors for the machines where it is not stopped or cannot be read.
async fn check_stopped(ctx: &Ctx, script: &str) -> Vec<String> {
    let mut states = Vec::new();
    let mut errors = Vec::new();
    for (name, out) in on_every_machine(ctx, script).await {
        match out {
            Ok(state) => states.push((name, state)),
            Err(e) => errors.push(e),
        }
    }
    errors.extend(not_stopped(&states));
    errors
}

/// Measures the floor for `n` instances with fleetd stopped in every machine, and starts fleetd again. The floor's
/// errors say whether fleetd did not stop, or was started meanwhile (a connection to its socket would start it);
/// the pause's error, why fleet is not back.
pub async fn measure_without_fleetd(ctx: &Ctx, n: usize) -> (Floor, Pause) {
    let mut pause = Pause::default();
    let t0 = Instant::now();
    let mut errors = check_stopped(ctx, &stop_fleetd_script()).await;
    pause.stop_s = Some(secs(t0.elapsed()));
    let mut floor = measure_as(ctx, n, Fleetd::Stopped).await;
    errors
        .extend(check_stopped(ctx, &fleetd_state_script()).await.into_iter().map(|e| format!("after the floor: {e}")));
    errors.append(&mut floor.errors);
    floor.errors = errors;
    let t1 = Instant::now();
    let started: Vec<String> =
        on_every_machine(ctx, &start_fleetd_script()).await.into_iter().filter_map(|(_, r)| r.err()).collect();
    let back = if started.is_empty() {
        wait_back(ctx).await
    } else {
        Err(format!("starting fleetd again after the floor: {}", started.join("; ")))
    };
    match back {
        Ok(()) => pause.back_s = Some(secs(t1.elapsed())),
        Err(e) => pause.error = Some(e),
    }
    (floor, pause)
}

/// Waits until fleet lists every machine, an engine leader took office, and the API the bench talks to (machine 1's)
/// answers a unit list. Not the other machines' APIs: a unit list makes a fleetd without a full view list one and
/// hold it for a minute (`api::view::IDLE`), which then sat in every fleetd's idle memory sample after the start.
async fn wait_back(ctx: &Ctx) -> Result<(), String> {
    let machines = ctx.cluster.machines().len();
    let opts = WaitOptions { timeout: wait::scaled(BACK_TIMEOUT), poll: Duration::from_millis(100) };
    let args = ["list-machines", "--no-legend", "--full", "--fields", "machine"];
    let what = "fleet back after the floor: every machine listed, an engine leader in office";
    wait::wait_for(opts, what, || async {
        let listed = match ctx.fleetctl_ok(&args).await {
            Ok((out, _)) => wait::parse_machines(&out.stdout).len(),
            Err(e) => return Check::NotYet(e),
        };
        let leader = match ctx.cluster.engine_leader().await {
            Ok(Some(slot)) => match ctx.cluster.machine(slot) {
                Ok(m) => Some((slot, procs::is_leader(m.container_name()).await)),
                Err(e) => return Check::NotYet(e.to_string()),
            },
            Ok(None) => None,
            Err(e) => return Check::NotYet(format!("engine leader: {e}")),
        };
        match back(listed, machines, leader) {
            Ok(()) => Check::Ready(()),
            Err(seen) => Check::NotYet(seen),
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    ctx.cluster.machine(1).map_err(|e| e.to_string())?.wait_api(opts).await.map_err(|e| e.to_string())
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
    fn fleetd_counts_as_stopped_only_when_inactive_or_failed() {
        let states: Vec<(String, String)> = [("m1", "inactive\n"), ("m2", "active\n"), ("m3", "failed"), ("m4", "")]
            .into_iter()
            .map(|(m, s)| (m.to_string(), s.to_string()))
            .collect();
        assert_eq!(
            not_stopped(&states),
            vec!["m2: fleetd is \"active\", not stopped".to_string(), "m4: fleetd is \"\", not stopped".to_string()]
        );
        assert!(stop_fleetd_script().starts_with("systemctl stop fleet.service;"), "{}", stop_fleetd_script());
        assert!(fleetd_state_script().contains("systemctl is-active fleet.service"));
        assert_eq!(start_fleetd_script(), "systemctl start fleet.service");
    }

    #[test]
    fn fleet_is_back_with_every_machine_listed_and_a_leader_in_office() {
        assert_eq!(back(3, 3, Some((2, true))), Ok(()));
        assert_eq!(back(2, 3, Some((1, true))), Err("2 of 3 machines listed".into()));
        assert_eq!(back(3, 3, None), Err("3 of 3 machines listed, no engine leader".into()));
        assert_eq!(
            back(3, 3, Some((2, false))),
            Err("3 of 3 machines listed, the leader key names m2, whose fleetd has not taken office".into())
        );
        assert_eq!(back(0, 3, None), Err("0 of 3 machines listed, no engine leader".into()));
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

//! The start scenario for one N, on a fresh cluster: idle baseline, the systemd floor with fleetd running and then
//! with fleetd stopped ([`floor`]; fleet is back in every machine before it goes on), `start --no-block`
//! of N instances until the registry shows all active/running ([`RegistryWatch`], event-driven; list-units
//! confirms once at the end), the CPU split during the start ([`cpu`]), an idle window, list latencies, destroy
//! until nothing runs, and (for small N) the blocking `start`.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::cpu::{self, CpuSplit};
use super::ctx::{Ctx, instances};
use super::floor::{self, Floor};
use super::idle::{self, Idle, Usage};
use super::metrics::{self, EtcdRates};
use super::options::Options;
use super::poll::{self, Progress};
use super::registry_watch::{RegistryWatch, Seen, StartStages};
use super::stats::{Latency, secs};
use super::units;

/// Instance prefix of fleet's units in the start scenario (the floor's are [`floor::PREFIX`]).
const PREFIX: &str = "t@";

/// A start of N instances.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StartTiming {
    /// Wall time of the fleetctl command itself.
    pub command_s: f64,
    pub command_error: Option<String>,
    /// When the registry first showed each stage (seconds since the command began).
    pub stages: StartStages,
    /// When `fleetctl list-units` (read after the registry showed all active) first listed all N active/running.
    pub list_units_agrees_s: Option<f64>,
    /// Registry events the watch saw.
    pub events: usize,
    /// Why the wait ended without all active, naming the last counts seen.
    pub wait_error: Option<String>,
}

/// A destroy of N instances.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DestroyTiming {
    pub command_s: f64,
    pub command_error: Option<String>,
    /// No instance active (nor activating, deactivating, reloading) in systemd on any machine: the last machine's
    /// own wait loop (the floor's stop loop) ended.
    pub machines_clear_s: Option<f64>,
    /// The registry holds no unit object and no published state of them (list-units lists none).
    pub registry_clear_s: Option<f64>,
    /// Both.
    pub done_s: Option<f64>,
    /// Rows of them list-units still showed, read once at the end.
    pub list_units_left: Option<usize>,
    pub errors: Vec<String>,
}

/// Everything measured for one N.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StartReport {
    pub units: usize,
    pub baseline: Option<Idle>,
    /// systemd alone doing the same on the same cluster, with fleetd stopped in every machine
    /// ([`floor::measure_without_fleetd`]): what fleet's ratios are read against.
    pub floor: Option<Floor>,
    /// The same with fleetd running in the machines (subscribed to systemd's signals), measured just before.
    pub floor_fleetd_running: Option<Floor>,
    /// Stopping fleetd for the floor, and having fleet back after it.
    pub fleetd_pause: Option<floor::Pause>,
    pub start: Option<StartTiming>,
    /// `daemon-reload`s systemd did on each machine from the start command until all were active.
    pub start_reloads: Option<Vec<usize>>,
    /// CPU used and peak memory from the start command until all were active.
    pub start_usage: Option<Usage>,
    /// Whose CPU seconds the start took, and the destroy.
    pub start_cpu: Option<CpuSplit>,
    pub destroy_cpu: Option<CpuSplit>,
    /// etcd's activity over the same span.
    pub start_etcd: Option<EtcdRates>,
    pub idle: Option<Idle>,
    pub list_units: Option<Latency>,
    pub list_unit_files: Option<Latency>,
    pub destroy: Option<DestroyTiming>,
    pub blocking_start: Option<StartTiming>,
    pub errors: Vec<String>,
}

/// Runs the scenario for `n` instances; failures land in `errors`.
pub async fn run(opts: &Options, n: usize) -> StartReport {
    let mut r = StartReport { units: n, ..Default::default() };
    let ctx = match Ctx::new(opts).await {
        Ok(ctx) => ctx,
        Err(e) => {
            r.errors.push(e);
            return r;
        }
    };
    if let Err(e) = scenario(&ctx, opts, n, &mut r).await {
        r.errors.push(e);
    }
    ctx.finish().await;
    r
}

async fn scenario(ctx: &Ctx, opts: &Options, n: usize, r: &mut StartReport) -> Result<(), String> {
    units::write(ctx.dir.path(), &[(units::TEMPLATE.into(), units::template("v1"))]).map_err(|e| e.to_string())?;
    if opts.baseline {
        r.baseline = Some(idle::measure(ctx, opts.idle).await);
    }
    let running = floor::measure(ctx, n).await;
    r.errors.extend(running.errors.iter().map(|e| format!("floor (fleetd running): {e}")));
    r.floor_fleetd_running = Some(running);
    let (stopped, pause) = floor::measure_without_fleetd(ctx, n).await;
    r.errors.extend(stopped.errors.iter().map(|e| format!("floor (fleetd stopped): {e}")));
    r.floor = Some(stopped);
    let back = pause.error.clone();
    r.fleetd_pause = Some(pause);
    if let Some(e) = back {
        return Err(format!("fleet not back after the floor: {e}"));
    }
    let names = instances("t", n);
    let addr = ctx.etcd_addr().await?;
    let (m0, before, reloads0, cpu0) =
        tokio::join!(metrics::scrape(&addr), idle::snapshot(ctx), ctx.daemon_reloads(), cpu::sample(ctx));
    let started = start(ctx, opts, &names, false).await;
    let (m1, after, reloads1, cpu1) =
        tokio::join!(metrics::scrape(&addr), idle::snapshot(ctx), ctx.daemon_reloads(), cpu::sample(ctx));
    r.start_cpu = Some(cpu::split(&cpu0, &cpu1, opts.machines));
    r.start_reloads = Some(reloads1?.iter().zip(reloads0?).map(|(b, a)| b.saturating_sub(a)).collect());
    r.start_etcd = Some(metrics::rates(&m0?, &m1?));
    if let Some(e) = &started.wait_error {
        r.errors.push(format!("start: not all {n} active/running: {e}"));
    }
    r.start = Some(started);
    r.start_usage = Some(idle::usage(&before, &after, &idle::leaders(ctx).await));
    tokio::time::sleep(opts.settle).await;
    r.idle = Some(idle::measure(ctx, opts.idle).await);
    r.list_units = Some(latency(ctx, "list-units", opts.list_runs).await?);
    r.list_unit_files = Some(latency(ctx, "list-unit-files", opts.list_runs).await?);
    let cpu0 = cpu::sample(ctx).await;
    let destroyed = destroy(ctx, opts, &names).await;
    r.destroy_cpu = Some(cpu::split(&cpu0, &cpu::sample(ctx).await, opts.machines));
    let clean = destroyed.done_s.is_some();
    r.errors.extend(destroyed.errors.iter().map(|e| format!("destroy: {e}")));
    r.destroy = Some(destroyed);
    if clean && n <= opts.blocking_max {
        let blocking = start(ctx, opts, &names, true).await;
        if let Some(e) = &blocking.wait_error {
            r.errors.push(format!("blocking start: not all {n} active/running: {e}"));
        }
        r.blocking_start = Some(blocking);
    }
    Ok(())
}

/// One `fleetctl start [--no-block] <names>`, followed in the registry until all are active/running, then
/// confirmed with list-units.
async fn start(ctx: &Ctx, opts: &Options, names: &[String], blocking: bool) -> StartTiming {
    let mut args: Vec<&str> = vec!["start"];
    if !blocking {
        args.push("--no-block");
    }
    args.extend(names.iter().map(String::as_str));
    let n = names.len();
    let mut timing = StartTiming::default();
    let mut watch = match RegistryWatch::start(ctx, PREFIX).await {
        Ok(w) => w,
        Err(e) => {
            timing.wait_error = Some(e);
            return timing;
        }
    };
    let t0 = Instant::now();
    let command = async {
        let res = ctx.fleetctl_ok(&args).await;
        (secs(t0.elapsed()), res.err())
    };
    let mut stages = StartStages::default();
    let mut events = 0;
    let followed = watch.until(
        t0,
        opts.timeout,
        |at_s, seen: &Seen| {
            stages.see(at_s, n, &seen.counts);
            events = seen.events;
        },
        |c| c.running >= n,
    );
    let ((command_s, command_error), followed) = tokio::join!(command, followed);
    timing.command_s = command_s;
    timing.command_error = command_error;
    timing.stages = stages;
    timing.events = events;
    match followed {
        Ok(_) => {
            let listed = poll::until(t0, Duration::from_millis(50), opts.timeout, n, || async move {
                let rows = ctx.list_units().await?;
                let running = rows.iter().filter(|r| r.unit.starts_with(PREFIX) && r.running()).count();
                Ok(Progress { count: running, done: running >= n })
            })
            .await;
            timing.list_units_agrees_s = listed.done_s;
            if listed.done_s.is_none() {
                timing.wait_error = Some(format!(
                    "the registry shows all active, list-units does not: {} of {n} active/running after {:?}{}",
                    listed.last_count,
                    opts.timeout,
                    listed.last_error.map(|e| format!(" ({e})")).unwrap_or_default()
                ));
            }
        }
        Err(e) => timing.wait_error = Some(e),
    }
    timing
}

/// `runs` runs of `fleetctl <command>` (default table output), one after the other.
async fn latency(ctx: &Ctx, command: &str, runs: usize) -> Result<Latency, String> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        samples.push(ctx.fleetctl_ok(&[command]).await?.1);
    }
    Ok(Latency::of(&samples))
}

/// One `fleetctl destroy <names>`, followed until systemd runs none of them on any machine (a wait loop inside
/// each machine, as the floor's stop) and the registry holds none of them; list-units confirms once at the end.
async fn destroy(ctx: &Ctx, opts: &Options, names: &[String]) -> DestroyTiming {
    let mut args: Vec<&str> = vec!["destroy"];
    args.extend(names.iter().map(String::as_str));
    let mut timing = DestroyTiming::default();
    let mut watch = match RegistryWatch::start(ctx, PREFIX).await {
        Ok(w) => w,
        Err(e) => {
            timing.errors.push(e);
            return timing;
        }
    };
    let t0 = Instant::now();
    let command = async {
        let res = ctx.fleetctl_ok(&args).await;
        (secs(t0.elapsed()), res.err())
    };
    let machines_clear = async {
        let waits = ctx.cluster.machines().iter().map(|m| async move {
            let out = m.exec(&["sh", "-c", &clear_script(opts.destroy_timeout)]).await.map_err(|e| e.to_string())?;
            if out.success() {
                Ok(secs(t0.elapsed()))
            } else {
                Err(format!(
                    "{}: still running after {:?}: {}",
                    m.container_name(),
                    opts.destroy_timeout,
                    out.describe()
                ))
            }
        });
        let times: Result<Vec<f64>, String> = futures::future::join_all(waits).await.into_iter().collect();
        times.map(|t| t.into_iter().fold(0.0, f64::max))
    };
    // The registry starts full: every instance has an object and a state (the start before saw them).
    let registry_clear = watch.until(t0, opts.destroy_timeout, |_, _| {}, |c| c.objects == 0 && c.with_state == 0);
    let ((command_s, command_error), machines, registry) = tokio::join!(command, machines_clear, registry_clear);
    timing.command_s = command_s;
    timing.command_error = command_error;
    match machines {
        Ok(at) => timing.machines_clear_s = Some(at),
        Err(e) => timing.errors.push(e),
    }
    match registry {
        Ok(at) => timing.registry_clear_s = Some(at),
        Err(e) => timing.errors.push(format!("registry: {e}")),
    }
    timing.done_s = timing.machines_clear_s.zip(timing.registry_clear_s).map(|(a, b)| a.max(b));
    match ctx.list_units().await {
        Ok(rows) => {
            let left = rows.iter().filter(|r| r.unit.starts_with(PREFIX)).count();
            timing.list_units_left = Some(left);
            if left > 0 {
                timing.errors.push(format!("list-units still shows {left} of them after the registry was clear"));
            }
        }
        Err(e) => timing.errors.push(format!("list-units: {e}")),
    }
    timing
}

/// Waits inside a machine until systemd shows no bench instance active, activating, deactivating or reloading
/// (polled every 50 ms, as the floor's stop loop); fails after `limit`.
fn clear_script(limit: Duration) -> String {
    format!(
        r#"end=$(( $(date +%s) + {limit} ))
until [ "$(systemctl list-units '{PREFIX}*' --state=active,activating,deactivating,reloading --no-legend --plain | wc -l)" -eq 0 ]; do
  [ "$(date +%s)" -lt "$end" ] || {{ systemctl list-units '{PREFIX}*' --state=active,activating,deactivating,reloading --no-legend --plain | head -n 5; exit 1; }}
  sleep 0.05
done"#,
        limit = limit.as_secs().max(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clear_script_names_the_instances_and_its_limit() {
        let s = clear_script(Duration::from_secs(600));
        assert!(s.contains("systemctl list-units 't@*' --state=active,activating,deactivating,reloading"), "{s}");
        assert!(s.contains("+ 600 ))"), "{s}");
        assert!(s.contains("exit 1"), "{s}");
    }
}

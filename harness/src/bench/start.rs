//! The start scenario for one N, on a fresh cluster: idle baseline, the systemd floor ([`floor`]), `start --no-block` of N instances until all
//! are active/running, CPU during the start, an idle window, list latencies, destroy until nothing runs, and (for
//! small N) the blocking `start`.

use std::cell::Cell;
use std::time::Instant;

use serde::Serialize;

use super::ctx::{Ctx, instances};
use super::floor::{self, Floor};
use super::idle::{self, Idle, Usage};
use super::metrics::{self, EtcdRates};
use super::poll::{self, Polled, Progress};
use super::stats::{Latency, secs};
use super::{Options, units};

/// A start of N instances.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StartTiming {
    /// Wall time of the fleetctl command itself.
    pub command_s: f64,
    pub command_error: Option<String>,
    /// `done_s`: all N `active/running` in list-units, counted from the command's start.
    #[serde(flatten)]
    pub polled: Polled,
    /// The stages before "active", from the same polls: every instance listed on a machine (scheduled), and the
    /// first / half / all with systemd load state `loaded` reported.
    pub stages: Stages,
}

/// Per-stage timeline of a start (seconds since the command's start; None: never seen).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stages {
    pub all_scheduled_s: Option<f64>,
    pub first_loaded_s: Option<f64>,
    pub half_loaded_s: Option<f64>,
    pub all_loaded_s: Option<f64>,
}

/// A destroy of N instances.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DestroyTiming {
    pub command_s: f64,
    pub command_error: Option<String>,
    /// No instance active (nor activating/deactivating) in systemd on any machine.
    pub machines_clear_s: Option<f64>,
    /// list-units shows none of them.
    pub list_empty_s: Option<f64>,
    /// Both.
    pub done_s: Option<f64>,
    pub polls: usize,
    pub poll_interval_ms: f64,
    /// What the last poll saw: instances still running in systemd, still listed.
    pub still_running: usize,
    pub still_listed: usize,
}

/// Everything measured for one N.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StartReport {
    pub units: usize,
    pub baseline: Option<Idle>,
    /// systemd alone doing the same on the same cluster ([`floor`]).
    pub floor: Option<Floor>,
    pub start: Option<StartTiming>,
    /// `daemon-reload`s systemd did on each machine from the start command until all were active.
    pub start_reloads: Option<Vec<usize>>,
    /// CPU used and peak memory from the start command until all were active.
    pub start_usage: Option<Usage>,
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
    let measured = floor::measure(ctx, n).await;
    r.errors.extend(measured.errors.iter().map(|e| format!("floor: {e}")));
    r.floor = Some(measured);
    let names = instances("t", n);
    let addr = ctx.etcd_addr().await?;
    let (m0, before, reloads0) = tokio::join!(metrics::scrape(&addr), idle::snapshot(ctx), ctx.daemon_reloads());
    let started = start(ctx, opts, &names, false).await;
    let (m1, after, reloads1) = tokio::join!(metrics::scrape(&addr), idle::snapshot(ctx), ctx.daemon_reloads());
    r.start_reloads = Some(reloads1?.iter().zip(reloads0?).map(|(b, a)| b.saturating_sub(a)).collect());
    r.start_etcd = Some(metrics::rates(&m0?, &m1?));
    let all_up = started.polled.done_s.is_some();
    if !all_up {
        r.errors.push(format!("start: not all {n} active/running within {:?}", opts.timeout));
    }
    r.start = Some(started);
    r.start_usage = Some(idle::usage(&before, &after, &idle::leaders(ctx).await));
    tokio::time::sleep(opts.settle).await;
    r.idle = Some(idle::measure(ctx, opts.idle).await);
    r.list_units = Some(latency(ctx, "list-units", opts.list_runs).await?);
    r.list_unit_files = Some(latency(ctx, "list-unit-files", opts.list_runs).await?);
    let destroyed = destroy(ctx, opts, &names).await;
    let clean = destroyed.done_s.is_some();
    if !clean {
        r.errors.push(format!("destroy: not done within {:?}", opts.destroy_timeout));
    }
    r.destroy = Some(destroyed);
    if clean && n <= opts.blocking_max {
        let blocking = start(ctx, opts, &names, true).await;
        if blocking.polled.done_s.is_none() {
            r.errors.push(format!("blocking start: not all {n} active/running within {:?}", opts.timeout));
        }
        r.blocking_start = Some(blocking);
    }
    Ok(())
}

/// One `fleetctl start [--no-block] <names>`, polled until all are active/running.
async fn start(ctx: &Ctx, opts: &Options, names: &[String], blocking: bool) -> StartTiming {
    let mut args: Vec<&str> = vec!["start"];
    if !blocking {
        args.push("--no-block");
    }
    args.extend(names.iter().map(String::as_str));
    let n = names.len();
    let t0 = Instant::now();
    let command = async {
        let res = ctx.fleetctl_ok(&args).await;
        (secs(t0.elapsed()), res.err())
    };
    let stages = Cell::new(Stages::default());
    let stages_ref = &stages;
    let polled = poll::until(t0, opts.poll, opts.timeout, n, || async move {
        let rows = ctx.list_units().await?;
        let ours: Vec<_> = rows.iter().filter(|r| r.unit.starts_with("t@")).collect();
        let scheduled = ours.iter().filter(|r| !r.machine.is_empty() && r.machine != "-").count();
        let loaded = ours.iter().filter(|r| r.load == "loaded").count();
        let mut s = stages_ref.take();
        s.see(secs(t0.elapsed()), n, scheduled, loaded);
        stages_ref.set(s);
        let count = ours.iter().filter(|r| r.running()).count();
        Ok(Progress { count, done: count == n })
    });
    let ((command_s, command_error), polled) = tokio::join!(command, polled);
    StartTiming { command_s, command_error, polled, stages: stages.take() }
}

impl Stages {
    /// Records what one poll at `at` saw: `scheduled` and `loaded` of `n` instances.
    pub fn see(&mut self, at: f64, n: usize, scheduled: usize, loaded: usize) {
        let first = |slot: &mut Option<f64>, reached: bool| {
            if reached && slot.is_none() {
                *slot = Some(at);
            }
        };
        first(&mut self.all_scheduled_s, scheduled == n);
        first(&mut self.first_loaded_s, loaded > 0);
        first(&mut self.half_loaded_s, loaded * 2 >= n);
        first(&mut self.all_loaded_s, loaded == n);
    }
}

/// `runs` runs of `fleetctl <command>` (default table output), one after the other.
async fn latency(ctx: &Ctx, command: &str, runs: usize) -> Result<Latency, String> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        samples.push(ctx.fleetctl_ok(&[command]).await?.1);
    }
    Ok(Latency::of(&samples))
}

/// One `fleetctl destroy <names>`, polled until systemd runs none of them on any machine and list-units shows none.
async fn destroy(ctx: &Ctx, opts: &Options, names: &[String]) -> DestroyTiming {
    let mut args: Vec<&str> = vec!["destroy"];
    args.extend(names.iter().map(String::as_str));
    let (machines_clear, list_empty) = (Cell::new(None), Cell::new(None));
    let (running, listed) = (Cell::new(names.len()), Cell::new(names.len()));
    let (machines_clear, list_empty, running, listed) = (&machines_clear, &list_empty, &running, &listed);
    let t0 = Instant::now();
    let command = async {
        let res = ctx.fleetctl_ok(&args).await;
        (secs(t0.elapsed()), res.err())
    };
    let polled = poll::until(t0, opts.poll, opts.destroy_timeout, names.len(), || async move {
        let (rows, counts) = tokio::join!(ctx.list_units(), ctx.systemd_running("t@*"));
        let (rows, counts) = (rows?, counts?);
        let at = secs(t0.elapsed());
        running.set(counts.iter().sum());
        listed.set(rows.iter().filter(|r| r.unit.starts_with("t@")).count());
        if running.get() == 0 && machines_clear.get().is_none() {
            machines_clear.set(Some(at));
        }
        if listed.get() == 0 && list_empty.get().is_none() {
            list_empty.set(Some(at));
        }
        let left = running.get() + listed.get();
        Ok(Progress { count: left, done: left == 0 })
    });
    let ((command_s, command_error), polled) = tokio::join!(command, polled);
    DestroyTiming {
        command_s,
        command_error,
        machines_clear_s: machines_clear.get(),
        list_empty_s: list_empty.get(),
        done_s: polled.done_s,
        polls: polled.polls,
        poll_interval_ms: polled.poll_interval_ms,
        still_running: running.get(),
        still_listed: listed.get(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_keep_the_first_poll_that_reached_each() {
        let mut s = Stages::default();
        s.see(0.1, 4, 2, 0);
        s.see(0.2, 4, 4, 1);
        s.see(0.3, 4, 4, 2);
        s.see(0.4, 4, 4, 4);
        s.see(0.5, 4, 4, 4);
        assert_eq!(
            (s.all_scheduled_s, s.first_loaded_s, s.half_loaded_s, s.all_loaded_s),
            (Some(0.2), Some(0.2), Some(0.3), Some(0.4))
        );
    }
}

//! Resource use over a window: fleetd RSS and CPU per machine (engine leader marked), etcd's process and its
//! write/lease rates.

use std::time::Duration;

use serde::Serialize;

use super::ctx::Ctx;
use super::metrics::{self, EtcdRates};
use super::procs::{self, ProcReport, ProcSample};

/// Processes sampled at one moment: one fleetd per machine, then etcd.
pub struct Snapshot {
    pub fleetd: Vec<(String, Result<ProcSample, String>)>,
    pub etcd: Result<ProcSample, String>,
}

/// Samples every fleetd and etcd (concurrently).
pub async fn snapshot(ctx: &Ctx) -> Snapshot {
    let names = ctx.machine_names();
    let fleetd = futures::future::join_all(names.iter().map(|n| procs::sample_fleetd(n)));
    let (fleetd, etcd) = tokio::join!(fleetd, procs::sample_etcd(ctx.cluster.etcd().name()));
    Snapshot { fleetd: names.into_iter().zip(fleetd).collect(), etcd }
}

/// What every process did between two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    pub fleetd: Vec<ProcReport>,
    pub etcd_proc: Option<ProcReport>,
    pub errors: Vec<String>,
}

/// Compares two snapshots; `leaders` names the machines that lead the engine.
pub fn usage(a: &Snapshot, b: &Snapshot, leaders: &[String]) -> Usage {
    let mut u = Usage::default();
    for ((name, x), (_, y)) in a.fleetd.iter().zip(&b.fleetd) {
        match (x, y) {
            (Ok(x), Ok(y)) => u.fleetd.push(procs::report(name, leaders.contains(name), x, y)),
            (Err(e), _) | (_, Err(e)) => u.errors.push(e.clone()),
        }
    }
    match (&a.etcd, &b.etcd) {
        (Ok(x), Ok(y)) => u.etcd_proc = Some(procs::report("etcd", false, x, y)),
        (Err(e), _) | (_, Err(e)) => u.errors.push(e.clone()),
    }
    u
}

/// The machines whose fleetd says it leads the engine.
pub async fn leaders(ctx: &Ctx) -> Vec<String> {
    let names = ctx.machine_names();
    let flags = futures::future::join_all(names.iter().map(|n| procs::is_leader(n))).await;
    names.into_iter().zip(flags).filter(|(_, l)| *l).map(|(n, _)| n).collect()
}

/// An idle window: processes and etcd rates.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Idle {
    pub window_s: f64,
    #[serde(flatten)]
    pub usage: Usage,
    pub etcd: Option<EtcdRates>,
}

/// Measures `window` of (supposed) idleness.
pub async fn measure(ctx: &Ctx, window: Duration) -> Idle {
    let mut errors = Vec::new();
    let addr = ctx.etcd_addr().await;
    let scrape = |addr: &Result<String, String>| {
        let addr = addr.clone();
        async move { metrics::scrape(&addr?).await }
    };
    let (m0, p0) = tokio::join!(scrape(&addr), snapshot(ctx));
    tokio::time::sleep(window).await;
    let (m1, p1) = tokio::join!(scrape(&addr), snapshot(ctx));
    let etcd = match (m0, m1) {
        (Ok(a), Ok(b)) => Some(metrics::rates(&a, &b)),
        (Err(e), _) | (_, Err(e)) => {
            errors.push(format!("etcd metrics: {e}"));
            None
        }
    };
    let mut usage = usage(&p0, &p1, &leaders(ctx).await);
    usage.errors.extend(errors);
    Idle { window_s: (window.as_secs_f64() * 10.0).round() / 10.0, usage, etcd }
}

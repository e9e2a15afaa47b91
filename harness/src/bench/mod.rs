//! `fleet-harness bench`: the performance measurements of the core and replace issues on a harness cluster —
//! starting N template instances, list latency, destroy, fleetd memory and CPU, etcd writes while idle, and
//! `start --replace`, rolling replace/restart (issue 12, [`rolling`]), simulated machines at scale (issue 16
//! item 3, [`scale`]), and emptying a machine with `fleetctl drain` against by hand (issue 38, [`drain`]). Each
//! measured N (and the replace scenario, each machine count of the rolling one, each operation of the drain one)
//! gets a fresh cluster, removed at the end (also on error: [`crate::Cluster`]'s drop).
//!
//! This file runs the scenarios [`Options`] names, in turn ([`run`]); what a run is asked to do is [`options`]'s,
//! which every scenario shares.

pub mod availability;
mod columns;
pub mod cpu;
pub mod ctx;
pub mod drain;
pub mod floor;
pub mod idle;
pub mod metrics;
pub mod options;
pub mod poll;
pub mod procs;
pub mod registry_watch;
pub mod replace;
pub mod report;
pub mod rolling;
pub mod scale;
pub mod scale_report;
pub mod scale_sim;
pub mod start;
pub mod stats;
pub mod units;

pub use ctx::Ctx;
pub use options::{Options, Scenario};
pub use report::{BenchReport, Context, RunReport};

/// Runs the bench; a scenario that fails is reported in its section (`error`) and the others still run.
pub async fn run(opts: &Options) -> BenchReport {
    let mut report = BenchReport::new(opts, Context::now().await);
    for run in 1..=opts.runs {
        let mut r = RunReport { run, ..RunReport::default() };
        if opts.scenario.start() {
            for &n in &opts.units {
                tracing::info!(run, units = n, "start scenario");
                r.start.push(start::run(opts, n).await);
            }
        }
        if opts.scenario.replace() {
            tracing::info!(run, "replace scenario");
            r.replace = Some(replace::run(opts).await);
        }
        if opts.scenario.rolling() {
            let largest = opts.rolling_machines.iter().copied().max().unwrap_or(0);
            for &machines in &opts.rolling_machines {
                tracing::info!(run, machines, "rolling scenario");
                r.rolling.push(rolling::run(opts, machines, machines == largest).await);
            }
        }
        if opts.scenario.scale() {
            for &units in &opts.sim_units {
                for &machines in &opts.sim_machines {
                    if opts.sim_skip.contains(&(machines, units)) {
                        r.scale.push(scale::ScaleCell::skipped(machines, units));
                        continue;
                    }
                    tracing::info!(run, machines, units, "scale scenario");
                    r.scale.push(scale::run(opts, machines, units).await);
                }
            }
        }
        if opts.scenario.availability() {
            for &machines in &opts.availability_machines {
                tracing::info!(run, machines, "availability scenario");
                r.availability.push(availability::run(opts, machines).await);
            }
        }
        if opts.scenario.drain() {
            tracing::info!(run, units = opts.drain_units, "drain scenario");
            r.drain = Some(drain::run(opts, opts.drain_units).await);
        }
        report.runs.push(r);
    }
    report.context_after = Some(Context::now().await);
    report
}

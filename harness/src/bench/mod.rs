//! `fleet-harness bench`: the performance measurements of the core and replace issues on a harness cluster —
//! starting N template instances, list latency, destroy, fleetd memory and CPU, etcd writes while idle, and
//! `start --replace`, rolling replace/restart (issue 12, [`rolling`]), and simulated machines at scale (issue 16
//! item 3, [`scale`]). Each measured N (and the replace
//! scenario, and each machine count of the rolling one) gets a fresh cluster, removed at the end (also on error:
//! [`crate::Cluster`]'s drop).

pub mod availability;
mod columns;
pub mod cpu;
pub mod ctx;
pub mod floor;
pub mod idle;
pub mod metrics;
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

use std::time::Duration;

pub use ctx::Ctx;
pub use report::{BenchReport, Context, RunReport};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Start,
    Replace,
    Rolling,
    /// Simulated machines at scale ([`scale`]); not part of `All`.
    Scale,
    /// Machines serving during rollouts ([`availability`]); not part of `All`.
    Availability,
    All,
}

impl Scenario {
    pub fn start(self) -> bool {
        matches!(self, Scenario::Start | Scenario::All)
    }

    pub fn replace(self) -> bool {
        matches!(self, Scenario::Replace | Scenario::All)
    }

    pub fn rolling(self) -> bool {
        matches!(self, Scenario::Rolling | Scenario::All)
    }

    pub fn scale(self) -> bool {
        self == Scenario::Scale
    }

    pub fn availability(self) -> bool {
        self == Scenario::Availability
    }
}

/// Parameters of a bench run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Instance counts of the start scenario.
    pub units: Vec<usize>,
    pub machines: usize,
    pub scenario: Scenario,
    /// Repetitions of everything (each on fresh clusters).
    pub runs: usize,
    /// fleet.conf `agent_ttl` (fleet's own default is 30s; the test clusters use 3s).
    pub agent_ttl: String,
    /// fleet.conf `verbosity` of the bench clusters (0: fleet's default).
    pub verbosity: u8,
    /// Interval between list-units polls.
    pub poll: Duration,
    /// Length of the idle windows (CPU, etcd rates).
    pub idle: Duration,
    /// Pause between "all active" and the idle window.
    pub settle: Duration,
    /// Runs of each list command.
    pub list_runs: usize,
    /// Longest wait for starts and replacements.
    pub timeout: Duration,
    /// Longest wait for a destroy to leave nothing running.
    pub destroy_timeout: Duration,
    /// The blocking `fleetctl start` is measured for N up to this.
    pub blocking_max: usize,
    /// Measure an idle window before any unit exists as well.
    pub baseline: bool,
    /// Machine counts of the rolling scenario (the largest also runs the rolling restart of 10 instances).
    pub rolling_machines: Vec<usize>,
    /// Run the clusters with TLS (etcd and the API, client certificates; [`crate::ClusterBuilder::tls`]).
    pub tls: bool,
    /// Simulated machine counts of the scale scenario.
    pub sim_machines: Vec<usize>,
    /// Unit counts of the scale scenario.
    pub sim_units: Vec<usize>,
    /// `fleet-sim` processes the simulated machines are spread over (the last one leaves in the leave test).
    pub sim_procs: usize,
    /// Cells of the scale matrix skipped (machines, units): too long on this host, said in the report.
    pub sim_skip: Vec<(usize, usize)>,
    /// Machine counts of the availability scenario.
    pub availability_machines: Vec<usize>,
    /// The availability scenario's unit has its health check (without: what the check is worth).
    pub availability_check: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            units: vec![100, 1000],
            machines: 3,
            scenario: Scenario::All,
            runs: 1,
            agent_ttl: "30s".into(),
            verbosity: 0,
            poll: Duration::from_millis(50),
            idle: Duration::from_secs(10),
            settle: Duration::from_secs(3),
            list_runs: 20,
            timeout: Duration::from_secs(300),
            destroy_timeout: Duration::from_secs(600),
            blocking_max: 100,
            baseline: true,
            rolling_machines: vec![3, 10],
            tls: false,
            sim_machines: vec![100, 300, 1000],
            sim_units: vec![1000, 10000],
            sim_procs: 10,
            sim_skip: Vec::new(),
            availability_machines: vec![3, 5],
            availability_check: true,
        }
    }
}

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
        report.runs.push(r);
    }
    report.context_after = Some(Context::now().await);
    report
}

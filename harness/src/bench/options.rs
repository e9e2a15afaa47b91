//! What a bench run is asked to do: the scenarios ([`Scenario`]) and every parameter of them ([`Options`]), with
//! the defaults the `fleet-harness bench` command starts from. It imports nothing else of the bench, so every
//! scenario can use it while the bench's own file runs the scenarios.

use std::time::Duration;

/// What to run.
/// What `fleet-harness bench --scenario` runs (its values are this enum's, kebab-case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Start,
    Replace,
    Rolling,
    /// Simulated machines at scale ([`super::scale`]); not part of `All`.
    Scale,
    /// Machines serving during rollouts ([`super::availability`]); not part of `All`.
    Availability,
    /// Emptying a machine: `fleetctl drain` against doing it by hand ([`super::drain`]); not part of `All`.
    Drain,
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

    pub fn drain(self) -> bool {
        self == Scenario::Drain
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
    /// Units on the machine the drain scenario empties.
    pub drain_units: usize,
    /// The drain scenario's `--max-unavailable` values (a fresh cluster each).
    pub drain_max_unavailable: Vec<usize>,
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
            drain_units: 100,
            drain_max_unavailable: vec![1, 10],
        }
    }
}

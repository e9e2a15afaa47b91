//! The scale simulation's host process (issue 16 item 3, binary `fleet-sim`): many simulated machines in one
//! process, each a real fleetd agent and registry client — its own etcd connection, machine ID, presence lease,
//! machine record, reflector (one range read + one watch) and state publishing — with the simulated unit manager
//! ([`unit_manager::SimSystemd`]) in place of systemd. Optionally the first machine of the process also runs
//! the real engine. Production fleetd does not use this module.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`SimOptions`] (pure parsing of the command line, clear errors), [`machine_id`], [`run`]: register the machines (a bounded number at once), run them until SIGTERM/SIGINT, then revoke their leases |
//! | `unit_manager.rs` | [`unit_manager::SimSystemd`]: a simulated unit manager behind the same `fleet_systemd::SystemdOps` (in memory, answers as systemd does) |
//! | `report.rs` | pure: the lines the process prints for the bench (`registered`, `pass`, `lost`, `stopped`) |
//!
//! What a simulated machine leaves out of a real fleetd: the HTTP API, the monitor's restart after a lost lease
//! (a lost machine is reported and stays down), reloads and the purge (a stop revokes the lease, like a crash
//! without TTL wait).

pub mod report;
pub mod unit_manager;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use fleet_core::model::MachineState;
use fleet_registry::{AgentSession, EtcdConfig, LeaseKeeper, Reflector, Registry};
use fleetd::agent::{Agent, AgentConfig};
use fleetd::engine::{Engine, EngineConfig};
use report::Line;
use unit_manager::{SimConfig, SimSystemd};

/// Registrations in flight at once in one process (a thousand connects at once only queue up in etcd).
const REGISTERING: usize = 16;

pub const USAGE: &str =
    "fleet-sim: simulated fleet machines (real agents on a simulated unit manager) for the scale bench

Usage: fleet-sim --etcd URL[,URL...] --machines N [options]

Options:
  --etcd URLS          etcd client URLs (comma-separated)
  --machines N         simulated machines in this process
  --first K            index of the first machine (machine IDs are derived from indexes; default 0)
  --prefix P           etcd key prefix (default fleet's, /_coreos.com/fleet/)
  --dir D              where the machines' units directories go (default a fresh directory under /tmp)
  --ttl SECS           presence lease TTL (agent_ttl; default 10)
  --engine             the first machine of this process also runs the engine
  --metadata K=V,...   metadata of every machine
  --job-latency-ms MS  modelled duration of each start/stop job (default 0)
";

/// What one `fleet-sim` process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimOptions {
    pub etcd: Vec<String>,
    pub prefix: String,
    pub machines: usize,
    pub first: usize,
    pub dir: Option<PathBuf>,
    pub ttl: Duration,
    pub engine: bool,
    pub metadata: BTreeMap<String, String>,
    pub job_latency: Duration,
}

/// A command line `fleet-sim` cannot act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimArgsError {
    #[error("unknown option {0}")]
    Unknown(String),
    #[error("option {0} needs a value")]
    MissingValue(String),
    #[error("option {flag}: {value:?} is not {what}")]
    BadValue { flag: String, value: String, what: &'static str },
    #[error("--etcd and --machines are required")]
    Missing,
}

/// Parses `args` (without argv0).
pub fn parse_args(args: &[String]) -> Result<SimOptions, SimArgsError> {
    let mut o = SimOptions {
        etcd: Vec::new(),
        prefix: "/_coreos.com/fleet/".into(),
        machines: 0,
        first: 0,
        dir: None,
        ttl: Duration::from_secs(10),
        engine: false,
        metadata: BTreeMap::new(),
        job_latency: Duration::ZERO,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--engine" {
            o.engine = true;
            continue;
        }
        let mut value = || it.next().cloned().ok_or_else(|| SimArgsError::MissingValue(flag.clone()));
        let bad = |value: &str, what| SimArgsError::BadValue { flag: flag.clone(), value: value.to_string(), what };
        match flag.as_str() {
            "--etcd" => o.etcd = value()?.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect(),
            "--prefix" => o.prefix = value()?,
            "--machines" => {
                let v = value()?;
                o.machines = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| bad(&v, "a positive count"))?;
            }
            "--first" => {
                let v = value()?;
                o.first = v.parse().map_err(|_| bad(&v, "an index"))?;
            }
            "--dir" => o.dir = Some(PathBuf::from(value()?)),
            "--ttl" => {
                let v = value()?;
                let secs: u64 = v.parse().ok().filter(|s| *s > 0).ok_or_else(|| bad(&v, "a number of seconds"))?;
                o.ttl = Duration::from_secs(secs);
            }
            "--metadata" => {
                let v = value()?;
                for pair in v.split(',').filter(|p| !p.is_empty()) {
                    let (k, val) = pair.split_once('=').ok_or_else(|| bad(&v, "K=V pairs"))?;
                    o.metadata.insert(k.to_string(), val.to_string());
                }
            }
            "--job-latency-ms" => {
                let v = value()?;
                o.job_latency = Duration::from_millis(v.parse().map_err(|_| bad(&v, "milliseconds"))?);
            }
            other => return Err(SimArgsError::Unknown(other.to_string())),
        }
    }
    if o.etcd.is_empty() || o.machines == 0 {
        return Err(SimArgsError::Missing);
    }
    Ok(o)
}

/// The machine ID of simulated machine `index`: 32 hex digits, `5151` then the index (never a real machine's).
pub fn machine_id(index: usize) -> String {
    format!("5151{index:028x}")
}

/// A simulated machine's public IP (unique per index; nothing listens there).
fn public_ip(index: usize) -> String {
    format!("10.{}.{}.{}", 100 + (index >> 16) % 100, (index >> 8) & 0xff, index & 0xff)
}

/// Runs the simulated machines until SIGTERM or SIGINT; every event is a line on stdout ([`report::Line`]).
/// The machines run as local tasks of the calling thread (the agent's future is not `Send`); a bench spreads
/// them over a few processes.
pub async fn run(options: SimOptions) -> Result<(), String> {
    tokio::task::LocalSet::new().run_until(run_local(options)).await
}

async fn run_local(options: SimOptions) -> Result<(), String> {
    let root = match &options.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("fleet-sim-{}", std::process::id())),
    };
    let stop = CancellationToken::new();
    let (lines, mut printed) = mpsc::unbounded_channel::<Line>();
    let printer = tokio::spawn(async move {
        while let Some(line) = printed.recv().await {
            println!("{}", line.render());
        }
    });
    let gate = Arc::new(Semaphore::new(REGISTERING));
    let (registered_tx, mut registered_rx) = mpsc::unbounded_channel::<()>();
    let mut machines = Vec::new();
    for index in options.first..options.first + options.machines {
        let machine = SimMachine {
            index,
            options: options.clone(),
            units_dir: root.join(machine_id(index)).join("units"),
            engine: options.engine && index == options.first,
        };
        let (stop, lines, gate, registered) = (stop.clone(), lines.clone(), gate.clone(), registered_tx.clone());
        machines.push(tokio::task::spawn_local(async move {
            let id = machine_id(index);
            if let Err(err) = machine.run(&gate, &registered, &lines, stop).await {
                let _ = lines.send(Line::Lost { machine: id, reason: err });
            }
        }));
    }
    drop(registered_tx);
    let signals = async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return;
        };
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    };
    tokio::pin!(signals);
    let mut count = 0;
    loop {
        tokio::select! {
            got = registered_rx.recv() => match got {
                Some(()) => {
                    count += 1;
                    if count == options.machines {
                        let _ = lines.send(Line::Registered { machines: count });
                    }
                }
                None => break,
            },
            () = &mut signals => break,
        }
    }
    stop.cancel();
    for machine in machines {
        let _ = machine.await;
    }
    let _ = lines.send(Line::Stopped);
    drop(lines);
    let _ = printer.await;
    if options.dir.is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    Ok(())
}

/// One simulated machine.
struct SimMachine {
    index: usize,
    options: SimOptions,
    units_dir: PathBuf,
    engine: bool,
}

impl SimMachine {
    async fn run(
        self,
        gate: &Semaphore,
        registered: &mpsc::UnboundedSender<()>,
        lines: &mpsc::UnboundedSender<Line>,
        stop: CancellationToken,
    ) -> Result<(), String> {
        let id = machine_id(self.index);
        let etcd = EtcdConfig {
            endpoints: self.options.etcd.clone(),
            prefix: self.options.prefix.clone(),
            request_timeout: Duration::from_secs(5),
            ..EtcdConfig::default()
        };
        let (registry, presence, layout) = {
            let _permit = gate.acquire().await.map_err(|e| e.to_string())?;
            let registry = Registry::connect(&etcd).await.map_err(|e| format!("connecting: {e}"))?;
            let layout = registry.ensure_layout_version().await.map_err(|e| format!("layout: {e}"))?;
            let presence = LeaseKeeper::grant(&registry, self.options.ttl).await.map_err(|e| format!("lease: {e}"))?;
            let state = MachineState {
                id: id.clone(),
                public_ip: public_ip(self.index),
                metadata: self.options.metadata.clone(),
                version: fleet_core::version::VERSION.to_string(),
                disable_engine: !self.engine,
                cordoned: false,
                load_fault: None,
            };
            registry
                .register_machine_running(&state, presence.id(), &fleet_core::layout::RUNS)
                .await
                .map_err(|e| format!("registering: {e}"))?;
            (registry, presence, layout)
        };
        let systemd = SimSystemd::new(SimConfig { job_latency: self.options.job_latency });
        let config = AgentConfig { machine_id: id.clone(), units_dir: self.units_dir.clone(), ttl: self.options.ttl };
        let mut agent = Agent::new(config, systemd).await.map_err(|e| format!("agent: {e}"))?;
        // As a fleetd without `full_view`: the agent's view is scoped to its machine once the cluster is at layout 2,
        // and the engine keeps views of its own (a full one only while it leads); before the switch the agent needs
        // the full view.
        let mut scoped = fleetd::agent::view::scoped_view(&registry, &id, presence.id(), layout);
        let mut full = scoped.is_none().then(|| Reflector::start(&registry));
        let engine = self.engine.then(|| {
            let config = EngineConfig {
                machine_id: id.clone(),
                reconcile_interval: Duration::from_secs(2),
                disable_engine: false,
                rebalance: false,
            };
            let engine = Engine::with_own_views(fleet_registry::SharedFullView::new(&registry), config)
                .with_agent_ttl(self.options.ttl);
            let mut status = engine.status();
            let lines = lines.clone();
            tokio::spawn(async move {
                let mut seen = 0;
                while status.changed().await.is_ok() {
                    let s = status.borrow_and_update().clone();
                    if s.passes > seen {
                        seen = s.passes;
                        if let Some(pass) = s.last_pass {
                            let _ = lines.send(Line::pass(&pass));
                        }
                    }
                }
            });
            engine.spawn(stop.child_token())
        });
        let _ = registered.send(());
        let session = AgentSession::new(registry.clone(), &id, presence.id()).map_err(|e| e.to_string())?;
        let result = loop {
            let (snapshots, own_writes, switched) = match (&scoped, &full) {
                (Some(view), _) => (view.subscribe(), view.own_writes(), None),
                (None, Some(full)) => (full.subscribe(), None, Some(full.subscribe())),
                (None, None) => break Err("no registry view".to_string()),
            };
            let agent_stop = stop.child_token();
            let session = session.clone().with_own_writes(own_writes);
            let run_layout = if scoped.is_some() { fleet_core::layout::LAYOUT_2 } else { layout };
            let run = agent.run(session, snapshots, presence.alive_until(), run_layout, agent_stop.clone());
            tokio::pin!(run);
            let switch = async {
                match switched {
                    Some(full) => fleetd::agent::view::layout_2_reached(full).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                result = &mut run => break result.map_err(|e| format!("agent stopped: {e}")),
                reason = presence.lost() => break Err(format!("presence lease lost: {reason}")),
                () = switch => {}
            }
            agent_stop.cancel();
            if let Err(e) = run.await {
                break Err(format!("agent stopped while moving to its scoped view: {e}"));
            }
            scoped = fleetd::agent::view::scoped_view(&registry, &id, presence.id(), fleet_core::layout::LAYOUT_2);
            // This machine's events are now its own.
            full = None;
        };
        if let Some(engine) = engine {
            let _ = tokio::time::timeout(Duration::from_secs(3), engine).await;
        }
        // Leaving: the lease takes the machine record, its states and launched markers with it.
        let _ = tokio::time::timeout(Duration::from_secs(3), presence.revoke()).await;
        let _ = std::fs::remove_dir_all(self.units_dir.parent().unwrap_or(&self.units_dir));
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<SimOptions, SimArgsError> {
        parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_a_command_line() {
        let o = args(&[
            "--etcd",
            "http://10.0.0.2:2379",
            "--machines",
            "100",
            "--first",
            "200",
            "--ttl",
            "5",
            "--engine",
            "--metadata",
            "sim=true,rack=1",
            "--job-latency-ms",
            "3",
        ])
        .unwrap();
        assert_eq!((o.machines, o.first, o.ttl, o.engine), (100, 200, Duration::from_secs(5), true));
        assert_eq!(o.etcd, ["http://10.0.0.2:2379"]);
        assert_eq!(o.metadata.get("rack").map(String::as_str), Some("1"));
        assert_eq!(o.job_latency, Duration::from_millis(3));
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let msg = |a: &[&str]| args(a).unwrap_err().to_string();
        assert_eq!(msg(&["--machines", "0", "--etcd", "x"]), "option --machines: \"0\" is not a positive count");
        assert_eq!(msg(&["--machines"]), "option --machines needs a value");
        assert_eq!(msg(&["--bogus"]), "unknown option --bogus");
        assert_eq!(msg(&["--machines", "3"]), "--etcd and --machines are required");
        assert_eq!(
            msg(&["--etcd", "x", "--machines", "1", "--metadata", "a"]),
            "option --metadata: \"a\" is not K=V pairs"
        );
    }

    #[test]
    fn machine_ids_are_32_hex_digits_and_distinct() {
        assert_eq!(machine_id(0), "51510000000000000000000000000000");
        assert_eq!(machine_id(1000).len(), 32);
        assert_ne!(machine_id(1), machine_id(16));
        assert_ne!(public_ip(1), public_ip(257));
    }
}

//! `fleet-harness`: a long-lived local fleet cluster (`up`, `status`, `down`), cleanup of leftovers (`reap`) and
//! the performance bench (`bench`).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use fleet_harness::bench;
use fleet_harness::reap::{self, Scope};
use fleet_harness::state::ClusterState;
use fleet_harness::{Cluster, Fleet, container, labels};

#[derive(Parser)]
#[command(
    name = "fleet-harness",
    version,
    about = "Local fleet clusters in Docker: etcd plus systemd machines",
    after_help = "Binaries: FLEETD_BIN and FLEETCTL_BIN (a relative path is resolved against the current directory), else this workspace's build."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the bench's variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Start a long-lived cluster and print how to point fleetctl at it. Returns once every machine's fleet API
    /// answers a unit list.
    Up {
        /// Number of machines.
        #[arg(long, default_value_t = 3)]
        machines: usize,
        /// Extra fleet metadata, `[SLOT:]k=v[,k=v...]`; without SLOT for every machine. Repeatable.
        #[arg(long)]
        metadata: Vec<String>,
        /// fleet.conf overrides, `key=value`. Repeatable.
        #[arg(long = "config")]
        config: Vec<String>,
        /// Boot machines without fleet (systemd only).
        #[arg(long, conflicts_with = "stand_in")]
        no_fleet: bool,
        /// Run a stand-in script instead of fleetd.
        #[arg(long)]
        stand_in: bool,
        /// Cluster name (several can be up at once).
        #[arg(long, default_value = "local")]
        name: String,
        /// A secure cluster: a throwaway CA, etcd and the fleet API over TLS with client certificates required;
        /// prints the fleetctl environment (admin role; the read-only role's files too).
        #[arg(long)]
        tls: bool,
        /// etcd members (3 for a cluster that survives the loss of any one member, the leader included).
        #[arg(long, default_value_t = 1)]
        etcd_members: usize,
    },
    /// Show the machines of a cluster started by `up` and etcd's health.
    Status {
        #[arg(long, default_value = "local")]
        name: String,
    },
    /// Run a cluster for a while, injecting faults drawn from a seed (machine kill, fleetd kill -9, engine leader
    /// churn, partitions shorter and longer than the TTL, etcd member and leader kill, slow etcd), and check fleet's
    /// invariants on what systemd shows in every machine. Prints the faults, violations with timelines and
    /// convergence times; exits 1 on a violation. The cluster is removed at the end.
    Nemesis {
        /// Seed of the fault schedule (printed; the same seed replays the same faults). Default: random.
        #[arg(long)]
        seed: Option<u64>,
        /// How long faults are injected: seconds, or with a unit (`90s`, `15m`).
        #[arg(long, default_value = "180s", value_parser = parse_duration)]
        duration: Duration,
        #[arg(long, default_value_t = 3)]
        machines: usize,
        /// Units launched (at-least-once, plus the at-most-once ones among them).
        #[arg(long, default_value_t = 12)]
        units: usize,
        /// How many of the units declare `[X-Fleet] AtMostOnce=true`.
        #[arg(long, default_value_t = 3)]
        at_most_once: usize,
        #[arg(long, default_value_t = 3)]
        etcd_members: usize,
        /// fleet.conf agent_ttl, seconds. With at-most-once units, at least 10 (below it they are stopped by every
        /// etcd election: docs/at-most-once.md, "Limits"); the nemesis refuses less.
        #[arg(long, default_value_t = fleet_harness::nemesis::AT_MOST_ONCE_MIN_TTL_SECS)]
        agent_ttl: u64,
        /// Longest convergence wait after a fault, seconds.
        #[arg(long, default_value_t = 90)]
        converge_timeout: u64,
        /// `rolling`: alongside the faults, rolling replaces, restarts, rollbacks and aborts of a global unit and an
        /// instance set, with the rollout invariants checked (docs/faults.md); `none`: plain units only.
        #[arg(long, default_value = "rolling")]
        changes: fleet_harness::nemesis::changes::Mode,
        /// Fail the machines' resources too: a full units directory (each machine's its own tmpfs, filled), and a
        /// fleetd whose wall clock is an hour ahead or behind (libfaketime).
        #[arg(long)]
        resource_faults: bool,
        /// Write every unit's whole sampled timeline here at the end (for explaining a long run afterwards).
        #[arg(long)]
        timelines: Option<std::path::PathBuf>,
        /// Write each machine's fleetd journal and each etcd member's log into this directory at the end
        /// (`<machine>.journal`, `<etcd member>.journal`).
        #[arg(long)]
        journals: Option<std::path::PathBuf>,
    },
    /// Remove a cluster started by `up`: containers, network, files.
    Down {
        #[arg(long, default_value = "local")]
        name: String,
    },
    /// Measure fleet's performance on fresh clusters (start/list/destroy of N template instances, memory, CPU,
    /// etcd writes while idle; `start --replace`; rolling replace and restart). Clusters are removed at the end.
    Bench {
        /// Instance counts of the start scenario, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        units: Vec<usize>,
        #[arg(long, default_value_t = 3)]
        machines: usize,
        #[arg(long, value_enum, default_value_t = bench::Scenario::All)]
        scenario: bench::Scenario,
        /// Repetitions (each on fresh clusters).
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// fleet.conf agent_ttl (fleet's default 30s; the test clusters use 3s).
        #[arg(long, default_value = "30s")]
        agent_ttl: String,
        /// fleet.conf verbosity (0 = info, fleet's default; the test clusters log at debug, 1). Debug logging costs
        /// fleetd and journald CPU on every unit.
        #[arg(long, default_value_t = 0)]
        verbosity: u8,
        /// list-units poll interval while waiting, in ms.
        #[arg(long, default_value_t = 50)]
        poll_ms: u64,
        /// Length of the idle windows, in seconds.
        #[arg(long, default_value_t = 10)]
        idle_secs: u64,
        /// Runs of each list command.
        #[arg(long, default_value_t = 20)]
        list_runs: usize,
        /// Longest wait for starts and replacements, in seconds.
        #[arg(long, default_value_t = 300)]
        timeout_secs: u64,
        /// Longest wait for a destroy, in seconds.
        #[arg(long, default_value_t = 600)]
        destroy_timeout_secs: u64,
        /// Skip the idle window before any unit exists.
        #[arg(long)]
        no_baseline: bool,
        /// Machine counts of the rolling scenario, comma-separated (the largest also restarts 10 instances).
        #[arg(long, value_delimiter = ',', default_value = "3,10")]
        rolling_machines: Vec<usize>,
        /// Print JSON on stdout (the table goes to stderr).
        #[arg(long)]
        json: bool,
        /// Clusters with TLS: etcd and the fleet API over TLS, client certificates required (the cost of TLS).
        #[arg(long)]
        tls: bool,
        /// Scale scenario: simulated machine counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "100,300,1000")]
        sim_machines: Vec<usize>,
        /// Scale scenario: unit counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        sim_units: Vec<usize>,
        /// Scale scenario: fleet-sim processes the machines are spread over (the last one leaves at the end).
        #[arg(long, default_value_t = 10)]
        sim_procs: usize,
        /// Scale scenario: cells to skip, as MACHINESxUNITS, comma-separated (e.g. 1000x10000).
        #[arg(long, value_delimiter = ',')]
        sim_skip: Vec<String>,
        /// Scale scenario: write its SVG charts (drawn from the report's JSON) into this directory.
        #[arg(long)]
        svg_dir: Option<std::path::PathBuf>,
        /// Availability scenario: machine counts, comma-separated (a fresh cluster each).
        #[arg(long, value_delimiter = ',', default_value = "3,5")]
        availability_machines: Vec<usize>,
        /// Availability scenario: the unit without its health check (what the check is worth).
        #[arg(long)]
        availability_no_check: bool,
        /// Drain scenario: units on the machine it empties.
        #[arg(long, default_value_t = 100)]
        drain_units: usize,
        /// Drain scenario: `fleetctl drain --max-unavailable` values, comma-separated (a fresh cluster each).
        #[arg(long, value_delimiter = ',', default_value = "1,10")]
        drain_max_unavailable: Vec<usize>,
    },
    /// Draw the scale scenario's table and SVG charts again from a saved `bench --json` report.
    ScalePlot {
        /// The JSON report.
        json: std::path::PathBuf,
        /// Directory for the SVG files.
        #[arg(long)]
        svg_dir: std::path::PathBuf,
    },
    /// Remove leftovers of harness runs whose process is gone (`--all`: every harness object).
    Reap {
        #[arg(long)]
        all: bool,
    },
}

type Error = Box<dyn std::error::Error>;

/// `90`, `90s`, `15m`, `1h`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (digits, unit) = s.trim().split_at(s.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(s.trim().len()));
    let n: u64 = digits.parse().map_err(|_| format!("{s:?}: expected seconds, or a number with s, m or h"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        other => Err(format!("{s:?}: unknown unit {other:?} (use s, m or h)")),
    }
}

async fn nemesis_cmd(
    opts: &fleet_harness::nemesis::Options,
    timelines: Option<&std::path::Path>,
    journals: Option<&std::path::Path>,
) -> Result<(), Error> {
    println!("nemesis: seed {} (replay: {})", opts.seed, opts.replay_command());
    // Ctrl-C drops the run, and with it the cluster (removed by its drop): nothing is left behind.
    let report = tokio::select! {
        r = fleet_harness::nemesis::run(opts) => r?,
        _ = tokio::signal::ctrl_c() => return Err("interrupted; the nemesis's cluster was removed".into()),
    };
    print!("{}", report.render());
    if let Some(dir) = journals {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (machine, text) in &report.journals {
            let path = dir.join(format!("{machine}.journal"));
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    if let Some(path) = timelines {
        std::fs::write(path, report.timelines()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if report.violation_count() == 0 {
        Ok(())
    } else {
        Err(format!("{} invariant violation(s); replay with --seed {}", report.violation_count(), opts.seed).into())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "fleet_harness=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up { machines, metadata, config, no_fleet, stand_in, name, tls, etcd_members } => {
            up(machines, &metadata, &config, no_fleet, stand_in, &name, tls, etcd_members).await
        }
        Command::Status { name } => status(&name).await,
        Command::Nemesis {
            seed,
            duration,
            machines,
            units,
            at_most_once,
            etcd_members,
            agent_ttl,
            converge_timeout,
            changes,
            resource_faults,
            timelines,
            journals,
        } => {
            let opts = fleet_harness::nemesis::Options {
                seed: seed.unwrap_or_else(rand::random),
                duration,
                machines,
                units,
                at_most_once,
                etcd_members,
                agent_ttl_secs: agent_ttl,
                converge_timeout: Duration::from_secs(converge_timeout),
                changes,
                resource_faults,
            };
            nemesis_cmd(&opts, timelines.as_deref(), journals.as_deref()).await
        }
        Command::Down { name } => down(&name),
        Command::Reap { all } => reap_cmd(all),
        Command::Bench {
            units,
            machines,
            scenario,
            runs,
            agent_ttl,
            verbosity,
            poll_ms,
            idle_secs,
            list_runs,
            timeout_secs,
            destroy_timeout_secs,
            no_baseline,
            rolling_machines,
            json,
            tls,
            sim_machines,
            sim_units,
            sim_procs,
            sim_skip,
            svg_dir,
            availability_machines,
            availability_no_check,
            drain_units,
            drain_max_unavailable,
        } => {
            let sim_skip = match sim_skip.iter().map(|c| parse_cell(c)).collect::<Result<Vec<_>, _>>() {
                Ok(cells) => cells,
                Err(e) => {
                    eprintln!("fleet-harness: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let opts = bench::Options {
                units,
                machines,
                scenario,
                runs,
                agent_ttl,
                verbosity,
                poll: Duration::from_millis(poll_ms),
                idle: Duration::from_secs(idle_secs),
                list_runs,
                timeout: Duration::from_secs(timeout_secs),
                destroy_timeout: Duration::from_secs(destroy_timeout_secs),
                baseline: !no_baseline,
                rolling_machines,
                tls,
                sim_machines,
                sim_units,
                sim_procs,
                sim_skip,
                availability_machines,
                availability_check: !availability_no_check,
                drain_units,
                drain_max_unavailable,
                ..bench::Options::default()
            };
            bench_cmd(&opts, json, svg_dir.as_deref()).await
        }
        Command::ScalePlot { json, svg_dir } => scale_plot(&json, &svg_dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet-harness: {e}");
            ExitCode::FAILURE
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn up(
    machines: usize,
    metadata: &[String],
    config: &[String],
    no_fleet: bool,
    stand_in: bool,
    name: &str,
    tls: bool,
    etcd_members: usize,
) -> Result<(), Error> {
    if let Ok(state) = ClusterState::load(name) {
        if !reap::remaining(&state.run)?.is_empty() {
            return Err(
                format!("cluster `{name}` is already up (run {}); `fleet-harness down` first", state.run).into()
            );
        }
        ClusterState::forget(name)?;
    }
    let t0 = Instant::now();
    let mut b = Cluster::builder().machines(machines).keep(true).tls(tls).etcd_members(etcd_members);
    for m in metadata {
        match m.split_once(':').and_then(|(slot, md)| Some((slot.parse::<usize>().ok()?, md))) {
            Some((slot, md)) => b = b.metadata(slot, md),
            None => {
                for slot in 1..=machines {
                    b = b.metadata(slot, m);
                }
            }
        }
    }
    for kv in config {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("--config {kv:?}: expected key=value"))?;
        b = b.config(k, v);
    }
    b = b.fleet(if no_fleet {
        Fleet::Off
    } else if stand_in {
        Fleet::StandIn
    } else {
        Fleet::Default
    });
    let cluster = b.start().await?;
    let took = t0.elapsed();
    let api_ready = cluster.machines().iter().filter_map(|m| m.api_ready_after()).max();
    let etcd_urls: Vec<String> = cluster.etcd_members().iter().map(|e| e.url()).collect();
    let state = cluster.detach();
    let path = state.save(name)?;
    println!("cluster `{name}` up in {took:.1?} (run {}, state {})", state.run, path.display());
    if let Some(slowest) = api_ready {
        println!(
            "every machine's fleet API answers (a unit list, 200); the slowest answered {slowest:.1?} after fleet started"
        );
    }
    println!("etcd: {} ({} inside the cluster network)", state.etcd, etcd_urls.join(","));
    for m in &state.machines {
        println!("  {}  {}  {}  {}", m.name, m.id, m.ip, m.endpoint);
    }
    for line in state.env_lines() {
        println!("{line}");
    }
    Ok(())
}

async fn status(name: &str) -> Result<(), Error> {
    let state = ClusterState::load(name)?;
    println!("cluster `{name}` (run {}, network {})", state.run, state.network);
    let health = container::exec(
        &state.etcd,
        &["/usr/bin/etcdctl", "--endpoints=http://127.0.0.1:2379", "--command-timeout=2s", "endpoint", "health"],
    )
    .await;
    let etcd = match health {
        Ok(out) if out.success() => "healthy".to_string(),
        Ok(out) => format!("unhealthy: {}", out.describe()),
        Err(e) => format!("unreachable: {e}"),
    };
    println!("etcd {}: {etcd}", state.etcd);
    println!("MACHINE\tMACHINE-ID\t\t\t\tIP\t\tSYSTEMD\t\tFLEET");
    for m in &state.machines {
        let systemd = match container::exec(&m.container, &["systemctl", "is-system-running"]).await {
            Ok(out) if !out.stdout.trim().is_empty() => out.stdout.trim().to_string(),
            Ok(_) => "offline".to_string(),
            Err(_) => "stopped".to_string(),
        };
        let fleet = match container::exec(&m.container, &["systemctl", "is-active", "fleet.service"]).await {
            Ok(out) => out.stdout.trim().to_string(),
            Err(_) => "-".to_string(),
        };
        println!("{}\t{}\t{}\t{systemd}\t\t{fleet}", m.name, m.id, m.ip);
    }
    for line in state.env_lines() {
        println!("{line}");
    }
    Ok(())
}

fn down(name: &str) -> Result<(), Error> {
    let state = match ClusterState::load(name) {
        Ok(s) => s,
        Err(e @ fleet_harness::state::StateError::NotUp { .. }) => {
            println!("{e}; nothing to do");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let r = reap::reap(&Scope::Run(state.run.clone()))?;
    if let Some(pid) = state.ssh_agent_pid {
        fleet_harness::ssh::stop_detached(pid);
    }
    if let Some(tmp) = &state.tmp {
        let _ = std::fs::remove_dir_all(tmp);
    }
    ClusterState::forget(name)?;
    println!("cluster `{name}` down: removed {} container(s), {} network(s)", r.containers, r.networks);
    Ok(())
}

/// `MACHINESxUNITS` of `--sim-skip`.
fn parse_cell(text: &str) -> Result<(usize, usize), String> {
    text.split_once('x')
        .and_then(|(m, u)| Some((m.parse().ok()?, u.parse().ok()?)))
        .ok_or_else(|| format!("--sim-skip: {text:?} is not MACHINESxUNITS like 1000x10000"))
}

/// Writes the charts of scale `cells` into `dir`.
fn write_charts(cells: &[bench::scale::ScaleCell], dir: &std::path::Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir)?;
    for (name, svg) in bench::scale_report::charts(cells) {
        std::fs::write(dir.join(&name), svg)?;
        eprintln!("wrote {}", dir.join(&name).display());
    }
    Ok(())
}

fn scale_plot(json: &std::path::Path, dir: &std::path::Path) -> Result<(), Error> {
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let cells = bench::scale_report::cells_from_json(&text)?;
    write_charts(&cells, dir)?;
    print!("{}", bench::scale_report::table(&cells));
    Ok(())
}

async fn bench_cmd(opts: &bench::Options, json: bool, svg_dir: Option<&std::path::Path>) -> Result<(), Error> {
    // Ctrl-C drops the bench future, and with it the cluster in use (removed by its drop).
    let report = tokio::select! {
        r = bench::run(opts) => r,
        _ = tokio::signal::ctrl_c() => return Err("interrupted; the cluster in use was removed".into()),
    };
    if let Some(dir) = svg_dir {
        let cells: Vec<_> = report.runs.iter().flat_map(|r| r.scale.iter().cloned()).collect();
        write_charts(&cells, dir)?;
    }
    if json {
        // The table still goes to stderr, for whoever watches.
        eprint!("{}", report.table());
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    if report.has_errors() { Err("some measurements failed (see above)".into()) } else { Ok(()) }
}

fn reap_cmd(all: bool) -> Result<(), Error> {
    let r = reap::reap(if all { &Scope::All } else { &Scope::Leftovers })?;
    println!("removed {} container(s), {} network(s) labelled {}", r.containers, r.networks, labels::RUN);
    Ok(())
}

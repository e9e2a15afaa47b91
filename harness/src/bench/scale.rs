//! The scale scenario (issue 16 item 3): M simulated machines ([`super::scale_sim`]: real agents and registry
//! clients on a simulated unit manager, in a few `fleet-sim` processes on the host) against the real etcd of a
//! harness cluster of one real machine. The real machine serves the API fleetctl talks to and runs no engine
//! (`disable_engine=true`); the engine runs on the first machine of each `fleet-sim` process (one of them leads,
//! another takes over when the leader's machine is lost, as in a cluster of fleetds), so its pass times are
//! reported. Units carry `MachineMetadata=sim=true`, so they land on simulated machines only.
//!
//! Per cell (M machines, U units): register the machines; `start --no-block` of U template instances until every
//! one is listed active (first / half / all), the engine's passes meanwhile, etcd's requests, writes and watch
//! events delivered over that time, and the spread of units over the machines; then an idle window (CPU of the
//! simulator processes and etcd, etcd rates) and memory; then 10 % of the machines (the last process) killed at
//! once: time until every unit is active again on the others (it includes the lease TTL).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::ctx::{Ctx, Row, instances};
use super::metrics::{self, Scrape};
use super::options::Options;
use super::poll::{self, Progress};
use super::procs;
use super::scale_sim::{SimProcs, clk_tck, host_proc, machine_id};
use super::stats::secs;
use super::units;

/// The template of the scale scenario.
pub const TEMPLATE: &str = "s@.service";
/// `etcd_request_timeout` of the real machine's fleetd (serving the API), in seconds.
pub const API_ETCD_TIMEOUT_S: u64 = 10;
/// fleetctl's request timeout in this scenario, in seconds, instead of its default 3 s: the start's one
/// `units-batch` request writes every unit and waits until the API's view shows them, which with 1,000 machines
/// watching the same etcd took longer than 3 s (`1000x10000` failed at the start command: git history of docs/scale.md at 58f0c3f, run 14).
/// As long as the API may wait for etcd on each of its steps, with room to spare.
pub const FLEETCTL_REQUEST_TIMEOUT_S: u64 = 6 * API_ETCD_TIMEOUT_S;
/// Distinct reasons a cell keeps of its lost machines.
pub const LOST_REASONS_KEPT: usize = 5;

/// The distinct reasons of `lost` (machine, reason) with their counts, most frequent first.
fn lost_reasons(lost: &[(String, String)]) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for (_, reason) in lost {
        *counts.entry(reason.as_str()).or_default() += 1;
    }
    let mut reasons: Vec<(String, usize)> = counts.into_iter().map(|(r, n)| (r.to_string(), n)).collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    reasons.truncate(LOST_REASONS_KEPT);
    reasons
}

/// Metadata of every simulated machine, required by the template.
pub const SIM_METADATA: &str = "sim=true";

/// `s@.service`: the bench's looping service, placed on simulated machines only.
pub fn template() -> String {
    format!("{}\n[X-Fleet]\nMachineMetadata={SIM_METADATA}\n", units::template("scale"))
}

/// etcd's activity over a window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EtcdWindow {
    pub window_s: f64,
    /// gRPC messages received per second (every unary request and every stream message: watches, keep-alives).
    pub requests_per_s: f64,
    /// put + delete + txn per second.
    pub writes_per_s: f64,
    /// put + delete + txn over the window.
    pub writes: f64,
    /// Watch events sent per write (each write reaches every watcher of its key: the fan-out issue 35 is about).
    pub events_per_write: f64,
    /// Keys put and deleted over the window (etcd's `put_total` + `delete_total`: what a watch event is about; the
    /// writes above also count transactions, read-only ones with several ranges included).
    pub keys_written: f64,
    /// Watch events sent per key put or deleted: what each key change costs in deliveries.
    pub events_per_key: f64,
    /// Watch events sent to watchers (`etcd_debugging_mvcc_events_total`), in total and per second.
    pub watch_events: f64,
    pub watch_events_per_s: f64,
    pub lease_keepalives_per_s: f64,
    /// etcd's CPU over the window, in percent of one core.
    pub cpu_pct: f64,
}

/// Memory at the end of the start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Memory {
    /// All simulator processes together (every machine's agent, registry client and view), and per machine.
    pub sim_rss_mib: f64,
    pub sim_rss_kib_per_machine: f64,
    pub sim_peak_rss_mib: f64,
    pub etcd_rss_mib: f64,
    /// The real fleetd on the one real machine (its API, its registry view of every unit, state and machine;
    /// no engine, no units of its own), settled after the idle window.
    pub fleetd_rss_mib: f64,
}

/// The engine's passes during the start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnginePasses {
    pub passes: usize,
    pub mean_ms: f64,
    pub max_ms: f64,
    pub total_ms: f64,
    pub applied: usize,
}

/// 10 % of the machines leaving at once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Leave {
    pub machines_left: usize,
    pub units_moved: usize,
    /// Seconds from the kill until every unit is active on the remaining machines (None: timed out).
    pub all_active_again_s: Option<f64>,
    /// The presence lease TTL the machines had (part of the time above).
    pub ttl_s: u64,
}

/// One cell of the matrix.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScaleCell {
    pub machines: usize,
    pub units: usize,
    pub procs: usize,
    /// Until every simulated machine was registered and listed.
    pub register_s: f64,
    /// `fleetctl start --no-block` of all units.
    pub command_s: f64,
    pub first_active_s: Option<f64>,
    pub half_active_s: Option<f64>,
    /// From the start command until every unit is listed active (None: timed out).
    pub all_active_s: Option<f64>,
    pub last_active: usize,
    pub polls: usize,
    pub engine: EnginePasses,
    pub start_etcd: EtcdWindow,
    /// etcd writes during the start per unit started (puts, deletes and transactions).
    pub writes_per_unit: f64,
    /// Keys put or deleted during the start per unit started (issue 35: at most 3 is the goal).
    pub keys_per_unit: f64,
    /// Simulator processes' CPU during the start (percent of one core, all processes).
    pub start_sim_cpu_pct: f64,
    /// Units per simulated machine: fewest and most.
    pub placement_min: usize,
    pub placement_max: usize,
    /// Units listed on a simulated machine when all were active (the rest ran elsewhere: a placement error).
    pub on_sim_machines: usize,
    /// Simulated machines that stopped on their own before the leave (lease lost, agent failed).
    pub machines_lost: usize,
    /// Why they stopped: each distinct reason (machine-specific parts as reported) with how many gave it, most
    /// frequent first, at most [`LOST_REASONS_KEPT`].
    #[serde(default)]
    pub lost_reasons: Vec<(String, usize)>,
    pub idle_etcd: EtcdWindow,
    pub idle_sim_cpu_pct: f64,
    pub memory: Memory,
    pub leave: Option<Leave>,
    pub error: Option<String>,
}

impl ScaleCell {
    /// The error of a cell skipped with `--sim-skip`: said in the report, not a failure.
    pub const SKIPPED: &str = "skipped (--sim-skip)";

    /// A cell skipped with `--sim-skip`.
    pub fn skipped(machines: usize, units: usize) -> ScaleCell {
        ScaleCell { machines, units, error: Some(Self::SKIPPED.into()), ..ScaleCell::default() }
    }

    /// Whether the cell failed (a skipped cell did not).
    pub fn failed(&self) -> bool {
        self.error.as_deref().is_some_and(|e| e != Self::SKIPPED)
    }
}

/// Pure: the fewest and most units per machine of `rows` over `machines` (full IDs, as `list-units --full`
/// shows them; machines without units count 0).
pub fn spread(rows: &[Row], machines: &[String]) -> (usize, usize) {
    let mut per: BTreeMap<&str, usize> = machines.iter().map(|m| (m.as_str(), 0)).collect();
    for r in rows {
        if let Some(n) = per.get_mut(r.machine.as_str()) {
            *n += 1;
        }
    }
    (per.values().copied().min().unwrap_or(0), per.values().copied().max().unwrap_or(0))
}

/// Pure: whole seconds of a Go-style duration of whole seconds (`10s`); the scale scenario needs a whole TTL.
pub fn ttl_secs(text: &str) -> Result<u64, String> {
    text.strip_suffix('s')
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("agent TTL {text:?} is not a whole number of seconds like 10s"))
}

/// Measures one cell on a fresh cluster, removed at the end.
pub async fn run(opts: &Options, machines: usize, units: usize) -> ScaleCell {
    let mut cell = ScaleCell { machines, units, ..ScaleCell::default() };
    if let Err(e) = measure(opts, &mut cell).await {
        tracing::warn!(machines, units, error = %e, "scale cell failed");
        cell.error = Some(e);
    }
    cell
}

/// etcd's metrics and process, and the simulator processes, at one moment.
struct Sample {
    scrape: Scrape,
    etcd: procs::ProcSample,
    /// CPU ticks of all simulator processes, and their RSS / peak RSS in KiB.
    sim: (u64, u64, u64),
}

async fn sample(etcd_addr: &str, etcd_name: &str, pids: &[u32]) -> Result<Sample, String> {
    let (scrape, etcd) = (metrics::scrape(etcd_addr).await?, procs::sample_etcd(etcd_name).await?);
    let sim = pids
        .iter()
        .filter_map(|p| host_proc(*p))
        .fold((0, 0, 0), |(t, r, h), s| (t + s.ticks, r + s.rss_kib, h + s.hwm_kib));
    Ok(Sample { scrape, etcd, sim })
}

fn etcd_window(a: &Sample, b: &Sample) -> EtcdWindow {
    let (sa, sb) = (&a.scrape, &b.scrape);
    let r = metrics::rates(sa, sb);
    let round = |x: f64| (x * 100.0).round() / 100.0;
    let writes = r.writes_per_s * r.window_s;
    let keys = (r.puts_per_s + r.deletes_per_s) * r.window_s;
    let events = metrics::delta(sa, sb, "etcd_debugging_mvcc_events_total", &[]);
    EtcdWindow {
        window_s: r.window_s,
        requests_per_s: round(metrics::per_s(sa, sb, "grpc_server_msg_received_total", &[])),
        writes_per_s: r.writes_per_s,
        writes: round(writes),
        events_per_write: if writes > 0.0 { round(events / writes) } else { 0.0 },
        keys_written: round(keys),
        events_per_key: if keys > 0.0 { round(events / keys) } else { 0.0 },
        watch_events: events,
        watch_events_per_s: round(metrics::per_s(sa, sb, "etcd_debugging_mvcc_events_total", &[])),
        lease_keepalives_per_s: r.lease_keepalives_per_s,
        cpu_pct: procs::report("etcd", false, &a.etcd, &b.etcd).cpu_pct,
    }
}

/// The simulator processes' CPU between two samples `window` apart, in percent of one core.
fn sim_cpu_pct(a: &Sample, b: &Sample, window: Duration) -> f64 {
    (procs::cpu_pct(b.sim.0.saturating_sub(a.sim.0), clk_tck(), window) * 10.0).round() / 10.0
}

/// Running `s@` instances of `rows` (none on `gone`).
fn running(rows: &[Row], gone: &[String]) -> usize {
    rows.iter().filter(|r| r.unit.starts_with("s@") && r.running() && !gone.contains(&r.machine)).count()
}

async fn measure(opts: &Options, cell: &mut ScaleCell) -> Result<(), String> {
    if opts.tls {
        return Err("the scale scenario runs without TLS (fleet-sim speaks plain HTTP to etcd)".into());
    }
    let ttl = ttl_secs(&opts.agent_ttl)?;
    let (machines, units) = (cell.machines, cell.units);
    let single = Options { machines: 1, ..opts.clone() };
    // The API's etcd requests get 10 s instead of fleet's 1 s: with hundreds of watchers on one etcd on this
    // 2-core host, a create took over a second and fleetctl failed with a 500 (measured at 100 machines).
    let ctx = Ctx::new_with(&single, |b| {
        b.config("disable_engine", "true").config("etcd_request_timeout", &API_ETCD_TIMEOUT_S.to_string())
    })
    .await?;
    let etcd_addr = ctx.etcd_addr().await?;
    let etcd_name = ctx.cluster.etcd().name().to_string();
    cell.procs = opts.sim_procs.clamp(1, machines);

    let request_timeout = FLEETCTL_REQUEST_TIMEOUT_S.to_string();
    let t_reg = Instant::now();
    let mut sims = SimProcs::start(
        &format!("http://{etcd_addr}"),
        &ctx.cluster.key_prefix(),
        machines,
        cell.procs,
        ttl,
        SIM_METADATA,
    )?;
    sims.wait_registered(machines, opts.timeout).await?;
    let listed = poll::until(t_reg, opts.poll.max(Duration::from_millis(200)), opts.timeout, machines + 1, || async {
        let args =
            ["--request-timeout", &request_timeout, "list-machines", "--no-legend", "--full", "--fields", "machine"];
        let (out, _) = ctx.fleetctl_ok(&args).await?;
        let n = out.stdout.lines().filter(|l| !l.trim().is_empty()).count();
        Ok(Progress { count: n, done: n > machines })
    })
    .await;
    if listed.done_s.is_none() {
        return Err(format!("{} of {} machines listed", listed.last_count, machines + 1));
    }
    cell.register_s = secs(t_reg.elapsed());

    units::write(ctx.dir.path(), &[(TEMPLATE.to_string(), template())]).map_err(|e| e.to_string())?;
    let names = instances("s", units);
    let mut args: Vec<&str> = vec!["--request-timeout", &request_timeout, "start", "--no-block"];
    args.extend(names.iter().map(String::as_str));

    let pids = sims.pids();
    let a = sample(&etcd_addr, &etcd_name, &pids).await?;
    let t0 = Instant::now();
    let (_, took) = ctx.fleetctl_ok(&args).await?;
    cell.command_s = secs(took);
    let last = std::cell::RefCell::new(Vec::new());
    let exited = std::cell::RefCell::new(Vec::new());
    let polled = poll::until(t0, opts.poll, opts.timeout, units, || {
        let (ctx, last) = (&ctx, &last);
        // A simulator that ended takes its machines with it: say so at once, and stop waiting for what cannot come.
        let ended = sims.reap_exited();
        exited.borrow_mut().extend(ended.iter().cloned());
        async move {
            if !ended.is_empty() {
                return Ok(Progress { count: 0, done: true });
            }
            let rows = ctx.list_units().await?;
            let n = running(&rows, &[]);
            *last.borrow_mut() = rows;
            Ok(Progress { count: n, done: n == units })
        }
    })
    .await;
    let exited = exited.into_inner();
    let polled = if exited.is_empty() { polled } else { poll::Polled { done_s: None, ..polled } };
    let last_rows = last.into_inner();
    let start_window = t0.elapsed();
    let b = sample(&etcd_addr, &etcd_name, &pids).await?;
    cell.first_active_s = polled.first_s;
    cell.half_active_s = polled.half_s;
    cell.all_active_s = polled.done_s;
    cell.last_active = polled.last_count;
    cell.polls = polled.polls;
    cell.start_etcd = etcd_window(&a, &b);
    cell.writes_per_unit = (cell.start_etcd.writes / units.max(1) as f64 * 100.0).round() / 100.0;
    cell.keys_per_unit = (cell.start_etcd.keys_written / units.max(1) as f64 * 100.0).round() / 100.0;
    cell.start_sim_cpu_pct = sim_cpu_pct(&a, &b, start_window);
    {
        let events = sims.events();
        let during: Vec<_> = events.passes.iter().filter(|(at, _)| *at >= t0).map(|(_, p)| p).collect();
        let total: f64 = during.iter().map(|p| p.duration_ms).sum();
        cell.engine = EnginePasses {
            passes: during.len(),
            mean_ms: if during.is_empty() { 0.0 } else { (total / during.len() as f64 * 100.0).round() / 100.0 },
            max_ms: during.iter().map(|p| p.duration_ms).fold(0.0, f64::max),
            total_ms: (total * 100.0).round() / 100.0,
            applied: during.iter().map(|p| p.applied).sum(),
        };
    }
    let ids: Vec<String> = (0..machines).map(machine_id).collect();
    (cell.placement_min, cell.placement_max) = spread(&last_rows, &ids);
    cell.on_sim_machines = last_rows.iter().filter(|r| ids.contains(&r.machine)).count();
    cell.memory = Memory {
        sim_rss_mib: (b.sim.1 as f64 / 1024.0 * 10.0).round() / 10.0,
        sim_rss_kib_per_machine: (b.sim.1 as f64 / machines as f64).round(),
        sim_peak_rss_mib: (b.sim.2 as f64 / 1024.0 * 10.0).round() / 10.0,
        etcd_rss_mib: (b.etcd.rss_kib as f64 / 1024.0 * 10.0).round() / 10.0,
        fleetd_rss_mib: 0.0,
    };
    if cell.all_active_s.is_none() {
        sims.reap_exited();
        let lost = lost_reasons(&sims.events().lost);
        ctx.finish().await;
        sims.stop().await;
        let why = if exited.is_empty() {
            format!("after {:?}", opts.timeout)
        } else {
            format!("when a simulator ended ({})", exited.join("; "))
        };
        return Err(format!("{} of {units} units active {why}; machines lost: {lost:?}", polled.last_count));
    }

    tokio::time::sleep(opts.settle).await;
    let a = sample(&etcd_addr, &etcd_name, &pids).await?;
    let t_idle = Instant::now();
    tokio::time::sleep(opts.idle).await;
    let b = sample(&etcd_addr, &etcd_name, &pids).await?;
    cell.idle_etcd = etcd_window(&a, &b);
    cell.idle_sim_cpu_pct = sim_cpu_pct(&a, &b, t_idle.elapsed());
    if let Some(real) = ctx.machine_names().first() {
        let fleetd = procs::sample_fleetd(real).await?;
        cell.memory.fleetd_rss_mib = (fleetd.rss_kib as f64 / 1024.0 * 10.0).round() / 10.0;
    }

    sims.reap_exited();
    cell.machines_lost = sims.events().lost.len();
    cell.lost_reasons = lost_reasons(&sims.events().lost);
    if cell.procs >= 2 {
        let gone = sims.kill_last().await?;
        let t1 = Instant::now();
        let moved = last_rows.iter().filter(|r| gone.contains(&r.machine)).count();
        let again = poll::until(t1, opts.poll, opts.timeout + Duration::from_secs(ttl), units, || async {
            let rows = ctx.list_units().await?;
            let n = running(&rows, &gone);
            Ok(Progress { count: n, done: n == units })
        })
        .await;
        cell.leave =
            Some(Leave { machines_left: gone.len(), units_moved: moved, all_active_again_s: again.done_s, ttl_s: ttl });
    }
    sims.stop().await;
    ctx.finish().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(unit: &str, machine: &str) -> Row {
        Row {
            unit: unit.into(),
            active: "active".into(),
            sub: "running".into(),
            hash: "h".into(),
            machine: machine.into(),
            load: "loaded".into(),
        }
    }

    #[test]
    fn spread_counts_machines_without_units_as_zero() {
        let rows = [row("s@1.service", "a"), row("s@2.service", "a"), row("s@3.service", "b"), row("x", "z")];
        assert_eq!(spread(&rows, &["a".into(), "b".into()]), (1, 2));
        assert_eq!(spread(&rows, &["a".into(), "b".into(), "c".into()]), (0, 2));
        assert_eq!(running(&rows, &["b".into()]), 2);
    }

    #[test]
    fn the_template_targets_simulated_machines() {
        assert!(template().ends_with("[X-Fleet]\nMachineMetadata=sim=true\n"), "{}", template());
        assert_eq!(ttl_secs("10s"), Ok(10));
        assert_eq!(ttl_secs("1m").unwrap_err(), "agent TTL \"1m\" is not a whole number of seconds like 10s");
    }

    #[test]
    fn lost_reasons_are_counted_most_frequent_first() {
        let lost: Vec<(String, String)> = [("m1", "lease lost"), ("m2", "agent failed"), ("m3", "lease lost")]
            .into_iter()
            .map(|(m, r)| (m.to_string(), r.to_string()))
            .collect();
        assert_eq!(lost_reasons(&lost), vec![("lease lost".to_string(), 2), ("agent failed".to_string(), 1)]);
        assert!(lost_reasons(&[]).is_empty());
    }
}

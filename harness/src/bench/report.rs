//! The bench's result: JSON (serde) and a readable table per run.

use std::fmt::Write;

use serde::Serialize;

use super::cpu::CpuSplit;
use super::floor::Floor;
use super::idle::Idle;
use super::options::Options;
use super::procs::ProcReport;
use super::registry_watch::StartStages;
use super::replace::{ReplaceReport, ReplaceTiming};
use super::rolling::{RollingReport, RollingTiming};
use super::start::{StartReport, StartTiming};
use super::stats::Latency;
use crate::{config, docker, labels};

/// What else the host was doing.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Context {
    pub cores: usize,
    /// `/proc/loadavg`'s first three fields.
    pub loadavg: String,
    /// Harness containers and runs present (other engineers' clusters; ours while one is up).
    pub harness_containers: usize,
    pub harness_runs: usize,
}

impl Context {
    pub async fn now() -> Context {
        let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let filter = format!("label={}", labels::RUN);
        let format = format!("{{{{.Label \"{}\"}}}}", labels::RUN);
        let runs = docker::run(&["ps", "--filter", &filter, "--format", &format]).await.unwrap_or_default();
        let mut distinct: Vec<&str> = runs.lines().filter(|l| !l.is_empty()).collect();
        let harness_containers = distinct.len();
        distinct.sort_unstable();
        distinct.dedup();
        Context {
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            loadavg: loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
            harness_containers,
            harness_runs: distinct.len(),
        }
    }
}

/// One repetition of the selected scenarios.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunReport {
    pub run: usize,
    pub start: Vec<StartReport>,
    pub replace: Option<ReplaceReport>,
    pub rolling: Vec<RollingReport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scale: Vec<super::scale::ScaleCell>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub availability: Vec<super::availability::AvailabilityReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<super::drain::DrainReport>,
}

/// Everything measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BenchReport {
    pub machines: usize,
    pub agent_ttl: String,
    pub verbosity: u8,
    pub poll_ms: u64,
    pub idle_window_s: f64,
    pub fleetd: String,
    pub fleetctl: String,
    pub context_before: Context,
    pub context_after: Option<Context>,
    pub runs: Vec<RunReport>,
}

impl BenchReport {
    pub fn new(opts: &Options, context: Context) -> Self {
        let bin = |name, env| config::locate(name, env).map(|p| p.display().to_string()).unwrap_or_default();
        BenchReport {
            machines: opts.machines,
            agent_ttl: opts.agent_ttl.clone(),
            verbosity: opts.verbosity,
            poll_ms: opts.poll.as_millis() as u64,
            idle_window_s: opts.idle.as_secs_f64(),
            fleetd: bin("fleetd", config::FLEETD_ENV),
            fleetctl: bin("fleetctl", config::FLEETCTL_ENV),
            context_before: context,
            context_after: None,
            runs: Vec::new(),
        }
    }

    /// Whether any scenario reported an error.
    pub fn has_errors(&self) -> bool {
        self.runs.iter().any(|r| {
            r.start.iter().any(|s| !s.errors.is_empty())
                || r.replace.as_ref().is_some_and(|x| !x.errors.is_empty())
                || r.rolling.iter().any(|x| !x.errors.is_empty())
                || r.scale.iter().any(|x| x.failed())
                || r.availability.iter().any(|x| x.failed())
                || r.drain.as_ref().is_some_and(|x| x.failed())
        })
    }

    /// The readable form.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "fleet bench: {} machines, agent_ttl {}, verbosity {}, replace scenarios poll list-units every {} ms, idle windows {} s",
            self.machines, self.agent_ttl, self.verbosity, self.poll_ms, self.idle_window_s
        );
        let _ = writeln!(s, "fleetd {}\nfleetctl {}", self.fleetd, self.fleetctl);
        let ctx = |c: &Context| {
            format!(
                "{} cores, load {}, {} harness container(s) in {} run(s)",
                c.cores, c.loadavg, c.harness_containers, c.harness_runs
            )
        };
        let _ = writeln!(s, "host before: {}", ctx(&self.context_before));
        if let Some(c) = &self.context_after {
            let _ = writeln!(s, "host after:  {}", ctx(c));
        }
        for run in &self.runs {
            if !run.start.is_empty() {
                let _ = writeln!(s, "\nrun {} — start scenario", run.run);
                s.push_str(&start_table(&run.start));
            }
            if let Some(r) = &run.replace {
                let _ = writeln!(s, "\nrun {} — replace scenario", run.run);
                s.push_str(&replace_table(r));
            }
            if !run.rolling.is_empty() {
                let _ = writeln!(s, "\nrun {} — rolling scenario", run.run);
                s.push_str(&rolling_table(&run.rolling));
            }
            if !run.scale.is_empty() {
                let _ = writeln!(s, "\nrun {} — scale scenario (simulated machines)", run.run);
                s.push_str(&super::scale_report::table(&run.scale));
            }
            if !run.availability.is_empty() {
                let _ = writeln!(s, "\nrun {} — availability scenario (machines serving during rollouts)", run.run);
                s.push_str(&super::availability::table(&run.availability));
            }
            if let Some(d) = &run.drain {
                let _ = writeln!(s, "\nrun {} — drain scenario (emptying m1: fleetctl drain against by hand)", run.run);
                s.push_str(&super::drain::table(d));
            }
        }
        s
    }
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.3} s"))
}

fn timing(t: &Option<StartTiming>, f: impl Fn(&StartTiming) -> String) -> String {
    t.as_ref().map_or("—".into(), f)
}

fn lat(l: &Option<Latency>) -> String {
    l.as_ref().map_or("—".into(), |l| format!("{:.0} / {:.0} ms", l.median_ms, l.p90_ms))
}

/// `a/b/c` of one figure per fleetd, the leader starred.
fn per_fleetd(procs: &[ProcReport], prec: usize, f: impl Fn(&ProcReport) -> f64) -> String {
    if procs.is_empty() {
        return "—".into();
    }
    procs.iter().map(|p| format!("{}{:.prec$}", if p.leader { "*" } else { "" }, f(p))).collect::<Vec<_>>().join(" / ")
}

fn idle_row(i: &Option<Idle>, f: impl Fn(&Idle) -> String) -> String {
    i.as_ref().map_or("—".into(), f)
}

fn etcd_row(i: &Option<Idle>, f: impl Fn(&super::metrics::EtcdRates) -> String) -> String {
    i.as_ref().and_then(|i| i.etcd.as_ref()).map_or("—".into(), f)
}

fn start_table(reports: &[StartReport]) -> String {
    let mut rows: Vec<(&str, Vec<String>, &str)> = Vec::new();
    let col = |f: &dyn Fn(&StartReport) -> String| reports.iter().map(f).collect::<Vec<_>>();
    rows.push(("N", col(&|r| r.units.to_string()), "target (original)"));
    let floor_start = |r: &StartReport| r.floor.as_ref().and_then(|f| f.start_s);
    let floor_stop = |r: &StartReport| r.floor.as_ref().and_then(|f| f.stop_s);
    rows.push(("floor, fleetd stopped: start → all running", col(&|r| opt_s(floor_start(r))), "systemd alone"));
    rows.push(("  stop + unload → none loaded", col(&|r| opt_s(floor_stop(r))), ""));
    rows.push((
        "  slowest machine: written / reloaded / started",
        col(&|r| floor_steps(r, &["written", "reloaded", "start_returned"], |f| &f.start_machines)),
        "",
    ));
    let running = |r: &StartReport, f: &dyn Fn(&Floor) -> Option<f64>| r.floor_fleetd_running.as_ref().and_then(f);
    rows.push((
        "floor, fleetd running: start (× stopped)",
        col(&|r| with_ratio(running(r, &|f| f.start_s), floor_start(r))),
        "fleetd idle, subscribed",
    ));
    rows.push(("  stop + unload (× stopped)", col(&|r| with_ratio(running(r, &|f| f.stop_s), floor_stop(r))), ""));
    rows.push((
        "fleetd stopped in / back in",
        col(&|r| {
            r.fleetd_pause.as_ref().map_or("—".into(), |p| format!("{} / {}", opt_s(p.stop_s), opt_s(p.back_s)))
        }),
        "back: all listed, leader, m1's API",
    ));
    rows.push((
        "start --no-block: command",
        col(&|r| timing(&r.start, |t| format!("{:.3} s", t.command_s))),
        "< 0.5 s @1000",
    ));
    let stage = |r: &StartReport, f: &dyn Fn(&StartStages) -> Option<f64>| timing(&r.start, |t| opt_s(f(&t.stages)));
    rows.push((
        "  all scheduled (registry)",
        col(&|r| timing(&r.start, |t| with_ratio(t.stages.all_scheduled_s, floor_start(r)))),
        "",
    ));
    rows.push((
        "  first / half / all loaded",
        col(&|r| {
            format!(
                "{} / {} / {}",
                stage(r, &|s| s.first_loaded_s),
                stage(r, &|s| s.half_loaded_s),
                stage(r, &|s| s.all_loaded_s)
            )
        }),
        "",
    ));
    rows.push((
        "  first / half active",
        col(&|r| format!("{} / {}", stage(r, &|s| s.first_active_s), stage(r, &|s| s.half_active_s))),
        "",
    ));
    rows.push((
        "  all active/running (× floor)",
        col(&|r| timing(&r.start, |t| with_ratio(t.stages.all_active_s, floor_start(r)))),
        "≤ 1.25× floor",
    ));
    rows.push(("  list-units shows all active", col(&|r| timing(&r.start, |t| opt_s(t.list_units_agrees_s))), ""));
    rows.push(("  registry events seen", col(&|r| timing(&r.start, |t| t.events.to_string())), ""));
    rows.push((
        "start (blocking): command",
        col(&|r| timing(&r.blocking_start, |t| format!("{:.3} s", t.command_s))),
        "",
    ));
    rows.push(("  all active/running", col(&|r| timing(&r.blocking_start, |t| opt_s(t.stages.all_active_s))), ""));
    rows.push((
        "daemon-reloads per machine during start",
        col(&|r| {
            r.start_reloads
                .as_ref()
                .map_or("—".into(), |v| v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" / "))
        }),
        "floor: 1",
    ));
    rows.push((
        "fleetd CPU s during start",
        col(&|r| r.start_usage.as_ref().map_or("—".into(), |u| per_fleetd(&u.fleetd, 2, |p| p.cpu_s))),
        "",
    ));
    rows.push((
        "etcd CPU s during start",
        col(&|r| {
            r.start_usage
                .as_ref()
                .and_then(|u| u.etcd_proc.as_ref())
                .map_or("—".into(), |p| format!("{:.2}", p.cpu_s))
        }),
        "",
    ));
    cpu_rows(&mut rows, reports);
    rows.push((
        "etcd during start: revisions, writes",
        col(&|r| {
            r.start_etcd
                .as_ref()
                .map_or("—".into(), |e| format!("{:.0}, {:.0}", e.revisions_per_s * e.window_s, e.writes))
        }),
        "",
    ));
    rows.push((
        "  WAL fsyncs × mean",
        col(&|r| {
            r.start_etcd.as_ref().map_or("—".into(), |e| format!("{:.0} × {:.1} ms", e.wal_fsyncs, e.wal_fsync_ms))
        }),
        "",
    ));
    rows.push(("list-units median / p90", col(&|r| lat(&r.list_units)), "< 20 ms @1000 (22 ms @100, 182 ms @1000)"));
    rows.push(("list-unit-files median / p90", col(&|r| lat(&r.list_unit_files)), "< 20 ms @1000 (674 ms @1000)"));
    let d =
        |r: &StartReport, f: &dyn Fn(&super::start::DestroyTiming) -> String| r.destroy.as_ref().map_or("—".into(), f);
    rows.push(("destroy: command", col(&|r| d(r, &|t| format!("{:.3} s", t.command_s))), ""));
    rows.push(("  nothing running (systemd)", col(&|r| d(r, &|t| opt_s(t.machines_clear_s))), ""));
    rows.push(("  registry clear", col(&|r| d(r, &|t| opt_s(t.registry_clear_s))), ""));
    rows.push((
        "  both (× floor stop + unload)",
        col(&|r| d(r, &|t| with_ratio(t.done_s, floor_stop(r)))),
        "≤ 1.5× floor @1000",
    ));
    rows.push((
        "  list-units rows left after",
        col(&|r| d(r, &|t| t.list_units_left.map_or("—".into(), |n| n.to_string()))),
        "",
    ));
    rows.push((
        "fleetd RSS MiB, idle (*leader)",
        col(&|r| idle_row(&r.idle, |i| per_fleetd(&i.usage.fleetd, 1, |p| p.rss_mib))),
        "< 10 (~20)",
    ));
    rows.push((
        "fleetd peak RSS MiB",
        col(&|r| idle_row(&r.idle, |i| per_fleetd(&i.usage.fleetd, 1, |p| p.peak_rss_mib))),
        "",
    ));
    rows.push((
        "fleetd CPU % idle",
        col(&|r| idle_row(&r.idle, |i| per_fleetd(&i.usage.fleetd, 2, |p| p.cpu_pct))),
        "~0 (leader 29 % @1000)",
    ));
    rows.push((
        "etcd writes/s idle (put+del+txn)",
        col(&|r| etcd_row(&r.idle, |e| format!("{:.1}", e.writes_per_s))),
        "~0 (~150 @1000)",
    ));
    rows.push((
        "  revisions/s, proposals/s",
        col(&|r| etcd_row(&r.idle, |e| format!("{:.1}, {:.1}", e.revisions_per_s, e.proposals_per_s))),
        "",
    ));
    rows.push((
        "  lease keepalives/s, ranges/s",
        col(&|r| etcd_row(&r.idle, |e| format!("{:.1}, {:.1}", e.lease_keepalives_per_s, e.ranges_per_s))),
        "",
    ));
    rows.push((
        "  keys, watch streams",
        col(&|r| etcd_row(&r.idle, |e| format!("{}, {}", e.keys, e.watch_streams))),
        "",
    ));
    rows.push((
        "etcd CPU %, RSS MiB idle",
        col(&|r| {
            idle_row(&r.idle, |i| {
                i.usage.etcd_proc.as_ref().map_or("—".into(), |p| format!("{:.2} %, {:.0}", p.cpu_pct, p.rss_mib))
            })
        }),
        "",
    ));
    rows.push((
        "baseline 0 units: fleetd CPU %",
        col(&|r| idle_row(&r.baseline, |i| per_fleetd(&i.usage.fleetd, 2, |p| p.cpu_pct))),
        "",
    ));
    rows.push(("  etcd writes/s", col(&|r| etcd_row(&r.baseline, |e| format!("{:.1}", e.writes_per_s))), ""));
    rows.push((
        "  fleetd RSS MiB",
        col(&|r| idle_row(&r.baseline, |i| per_fleetd(&i.usage.fleetd, 1, |p| p.rss_mib))),
        "",
    ));
    let mut out = super::columns::render(&rows);
    // Too wide for a column: one line per N and window, under the table.
    for r in reports {
        let floor = r.floor.as_ref().and_then(|f| f.start_cpu.as_ref());
        let running = r.floor_fleetd_running.as_ref().and_then(|f| f.start_cpu.as_ref());
        let splits =
            [("floor start, fleetd running", running), ("floor start", floor), ("fleet start", r.start_cpu.as_ref())];
        for (what, split) in splits {
            if let Some(c) = split {
                let _ = writeln!(out, "  CPU s by host process, {what} (N={}): {}", r.units, top(&c.by_process, 8));
            }
        }
    }
    for r in reports {
        for e in &r.errors {
            let _ = writeln!(out, "  error (N={}): {e}", r.units);
        }
        let idle_errors = [&r.baseline, &r.idle].into_iter().flatten().flat_map(|i| i.usage.errors.iter());
        let floor_cpu = r.floor.iter().chain(&r.floor_fleetd_running).flat_map(|f| [&f.start_cpu, &f.stop_cpu]);
        let cpu_errors = floor_cpu.chain([&r.start_cpu, &r.destroy_cpu]).flatten().flat_map(|c| c.errors.iter());
        for e in idle_errors.chain(cpu_errors) {
            let _ = writeln!(out, "  measurement error (N={}): {e}", r.units);
        }
    }
    out
}

/// `1.234 s (1.10×)`: a fleet figure and its ratio to the floor.
fn with_ratio(fleet: Option<f64>, floor: Option<f64>) -> String {
    match super::floor::ratio(fleet, floor) {
        Some(x) => format!("{} ({x:.2}×)", opt_s(fleet)),
        None => opt_s(fleet),
    }
}

/// The floor's in-machine step times of its slowest machine (largest last step), `a / b / c` seconds.
fn floor_steps(
    r: &StartReport,
    steps: &[&str],
    machines: impl Fn(&super::floor::Floor) -> &Vec<super::floor::MachineFloor>,
) -> String {
    let Some(f) = &r.floor else { return "—".into() };
    let slowest = machines(f).iter().max_by(|a, b| a.wall_s.total_cmp(&b.wall_s));
    slowest.map_or("—".into(), |m| {
        steps.iter().map(|k| m.steps.get(*k).map_or("—".into(), |v| format!("{v:.3}"))).collect::<Vec<_>>().join(" / ")
    })
}

/// CPU seconds during the floor's and fleet's start and stop, by whom: `floor / fleet` per row.
fn cpu_rows(rows: &mut Vec<(&str, Vec<String>, &str)>, reports: &[StartReport]) {
    let pair = |a: Option<&CpuSplit>, b: Option<&CpuSplit>, f: &dyn Fn(&CpuSplit) -> f64| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2} / {:.2}", f(a), f(b)),
        _ => "—".into(),
    };
    type Figure = (&'static str, fn(&CpuSplit) -> f64);
    let figures: [Figure; 8] = [
        ("  host busy", |c| c.host_s),
        ("  machines: PID 1", |c| c.machines.get("pid1").copied().unwrap_or(0.0)),
        ("    dbus-daemon", |c| c.machines.get("dbus-daemon").copied().unwrap_or(0.0)),
        ("    fleetd", |c| c.machines.get("fleetd").copied().unwrap_or(0.0)),
        ("    journald", |c| c.machines.get("journald").copied().unwrap_or(0.0)),
        ("    units, commands run in them", |c| c.machines.get("other").copied().unwrap_or(0.0)),
        ("  etcd", |c| c.etcd_s),
        ("  host outside containers (bench, docker)", |c| c.outside_s),
    ];
    let col = |f: &dyn Fn(&StartReport) -> String| reports.iter().map(f).collect::<Vec<_>>();
    type Windows = fn(&StartReport) -> (Option<&CpuSplit>, Option<&CpuSplit>);
    let windows: [(&str, Windows); 2] = [
        ("CPU s, start: floor (fleetd stopped) / fleet", |r| {
            (r.floor.as_ref().and_then(|f| f.start_cpu.as_ref()), r.start_cpu.as_ref())
        }),
        ("CPU s, stop: floor (fleetd stopped) / fleet destroy", |r| {
            (r.floor.as_ref().and_then(|f| f.stop_cpu.as_ref()), r.destroy_cpu.as_ref())
        }),
    ];
    for (title, window) in windows {
        let both = |f: &dyn Fn(&CpuSplit) -> f64| {
            col(&|r| {
                let (floor, fleet) = window(r);
                pair(floor, fleet, f)
            })
        };
        rows.push((title, both(&|c| c.window_s), "(window s)"));
        for (label, f) in figures {
            rows.push((label, both(&f), ""));
        }
        rows.push(("  steal", both(&|c| c.steal_s), ""));
    }
}

/// `name s, name s, …` of the first `n` processes, then `irq` and `exited`.
fn top(by_process: &[(String, f64)], n: usize) -> String {
    let rest = |name: &str| name == "irq" || name == "exited";
    let named = by_process.iter().filter(|(name, _)| !rest(name)).take(n);
    let tail = by_process.iter().filter(|(name, _)| rest(name));
    named.chain(tail).map(|(name, s)| format!("{name} {s:.2}")).collect::<Vec<_>>().join(", ")
}

fn polls(p: &super::poll::Polled) -> String {
    format!("{}, {:.0} ms", p.polls, p.poll_interval_ms)
}

fn replace_table(r: &ReplaceReport) -> String {
    let one = |f: &dyn Fn(&ReplaceTiming) -> String| {
        vec![r.one.as_ref().map_or("—".into(), f), r.ten.as_ref().map_or("—".into(), f)]
    };
    let rows: Vec<(&str, Vec<String>, &str)> = vec![
        ("units replaced in one command", one(&|t| t.units.to_string()), "target (original)"),
        ("start --replace: command", one(&|t| format!("{:.3} s", t.command_s)), ""),
        ("  new version active/running", one(&|t| opt_s(t.polled.done_s)), "< 1 s one, < 3 s ten (4.8 s, 44 s)"),
        ("  polls, mean interval", one(&|t| polls(&t.polled)), ""),
        ("  moved to another machine", one(&|t| t.moved.len().to_string()), ""),
    ];
    let mut out = super::columns::render(&rows);
    let _ = writeln!(out, "  (version 1 of the 11 units active/running after {})", opt_s(r.setup_s));
    for t in [&r.one, &r.ten].into_iter().flatten() {
        if let Some(e) = &t.command_error {
            let _ = writeln!(out, "  command error ({} units): {e}", t.units);
        }
    }
    for e in &r.errors {
        let _ = writeln!(out, "  error: {e}");
    }
    out
}

fn rolling_table(reports: &[RollingReport]) -> String {
    let col = |f: &dyn Fn(&RollingReport) -> String| reports.iter().map(f).collect::<Vec<_>>();
    let replace = |f: &dyn Fn(&RollingTiming) -> String| col(&|r| r.replace.as_ref().map_or("—".into(), f));
    let restart = |f: &dyn Fn(&RollingTiming) -> String| col(&|r| r.restart.as_ref().map_or("—".into(), f));
    let checked = |f: &dyn Fn(&RollingTiming) -> String| col(&|r| r.checked.as_ref().map_or("—".into(), f));
    let ms = |x: Option<f64>| x.map_or("—".into(), |s| format!("{:+.0} ms", s * 1000.0));
    let checked_label = format!("same, HealthCheck=true every {}", super::rolling::CHECK_INTERVAL);
    let rows: Vec<(&str, Vec<String>, &str)> = vec![
        ("machines", col(&|r| r.machines.to_string()), "target"),
        ("floor: systemctl stop + start, one machine", col(&|r| opt_s(r.floor_s)), "(median of 5)"),
        ("start --replace --rolling --min-healthy=0s", replace(&|t| format!("{:.3} s", t.command_s)), ""),
        ("  per machine", replace(&|t| format!("{:.3} s", t.per_step_s)), ""),
        ("  per machine / floor", col(&|r| r.ratio.map_or("—".into(), |x| format!("{x:.1}×"))), "≤ 1.5×"),
        ("  rollout itself (engine: created → last healthy)", replace(&|t| opt_s(t.rollout_s)), ""),
        ("    per machine", replace(&|t| opt_s(t.rollout_per_step_s)), ""),
        ("    per machine / floor", col(&|r| r.rollout_ratio.map_or("—".into(), |x| format!("{x:.1}×"))), "≤ 1.5×"),
        (checked_label.as_str(), checked(&|t| format!("{:.3} s", t.command_s)), ""),
        ("  per machine", checked(&|t| format!("{:.3} s", t.per_step_s)), ""),
        ("  rollout itself, per machine", checked(&|t| opt_s(t.rollout_per_step_s)), ""),
        ("  the check's cost per step (with − without)", col(&|r| ms(r.check_cost_per_step_s)), "command"),
        ("    by the engine's timeline", col(&|r| ms(r.check_cost_rollout_per_step_s)), "rollout itself"),
        ("restart --rolling, 10 instances, max-unavailable=2", restart(&|t| format!("{:.3} s", t.command_s)), ""),
        ("  per instance", restart(&|t| format!("{:.3} s", t.per_step_s)), ""),
        ("  rollout itself (engine: created → last healthy)", restart(&|t| opt_s(t.rollout_s)), ""),
    ];
    let mut out = super::columns::render(&rows);
    for r in reports {
        for (what, t) in [("replace", &r.replace), ("replace with check", &r.checked), ("restart", &r.restart)] {
            let Some(t) = t else { continue };
            if !t.timeline.is_empty() {
                let steps: Vec<String> = t
                    .timeline
                    .iter()
                    .map(|s| format!("{} +{}→{} ms", s.machine, s.released_ms, s.healthy_ms))
                    .collect();
                let _ = writeln!(
                    out,
                    "  timeline {what} ({} machines; released→healthy after creation): {}",
                    r.machines,
                    steps.join(", ")
                );
            }
            if let Some(e) = &t.command_error {
                let _ = writeln!(out, "  command error ({what}, {} machines): {e}", r.machines);
            }
        }
        for e in &r.errors {
            let _ = writeln!(out, "  error ({} machines): {e}", r.machines);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_reports_render() {
        let r = BenchReport {
            runs: vec![RunReport {
                run: 1,
                start: vec![StartReport { units: 100, ..Default::default() }],
                replace: Some(ReplaceReport::default()),
                rolling: vec![RollingReport { machines: 3, ..Default::default() }],
                scale: Vec::new(),
                availability: Vec::new(),
                drain: None,
            }],
            ..Default::default()
        };
        let t = r.table();
        assert!(t.contains("run 1 — start scenario"), "{t}");
        assert!(t.contains("  N "), "{t}");
        assert!(t.contains("run 1 — rolling scenario"), "{t}");
        assert!(!r.has_errors());
        serde_json::to_string(&r).unwrap();
    }

    #[test]
    fn ratios_are_read_against_the_floor_with_fleetd_stopped() {
        let floor = |fleetd, start_s, stop_s| Floor {
            fleetd,
            start_s: Some(start_s),
            stop_s: Some(stop_s),
            ..Floor::default()
        };
        let mut start = StartTiming::default();
        start.stages.all_active_s = Some(2.5);
        let r = StartReport {
            units: 1000,
            floor: Some(floor(super::super::floor::Fleetd::Stopped, 2.0, 1.0)),
            floor_fleetd_running: Some(floor(super::super::floor::Fleetd::Running, 3.0, 1.5)),
            fleetd_pause: Some(super::super::floor::Pause { stop_s: Some(0.25), back_s: Some(1.75), error: None }),
            start: Some(start),
            destroy: Some(super::super::start::DestroyTiming { done_s: Some(1.2), ..Default::default() }),
            ..Default::default()
        };
        let t = start_table(&[r]);
        let row = |label: &str| t.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_default().to_string();
        assert!(row("floor, fleetd stopped: start").contains("2.000 s"), "{t}");
        assert!(row("all active/running (× floor)").contains("2.500 s (1.25×)"), "{t}");
        assert!(row("both (× floor stop + unload)").contains("(1.20×)"), "{t}");
        assert!(row("floor, fleetd running: start (× stopped)").contains("3.000 s (1.50×)"), "{t}");
        assert!(row("stop + unload (× stopped)").contains("1.500 s (1.50×)"), "{t}");
        assert!(row("fleetd stopped in / back in").contains("0.250 s / 1.750 s"), "{t}");
    }

    #[test]
    fn the_cpu_split_shows_floor_and_fleet_side_by_side() {
        let split = |pid1: f64, host: f64| CpuSplit {
            window_s: 1.0,
            host_s: host,
            machines: [("pid1".to_string(), pid1)].into(),
            by_process: vec![("systemd".into(), pid1), ("irq".into(), 0.1), ("exited".into(), 0.5)],
            ..CpuSplit::default()
        };
        let floor = super::super::floor::Floor { start_cpu: Some(split(4.5, 14.0)), ..Default::default() };
        let r =
            StartReport { units: 1000, floor: Some(floor), start_cpu: Some(split(5.25, 19.5)), ..Default::default() };
        let t = start_table(&[r]);
        let row = t.lines().find(|l| l.contains("machines: PID 1")).unwrap_or_default();
        assert!(row.contains("4.50 / 5.25"), "{t}");
        assert!(t.lines().any(|l| l.contains("host busy") && l.contains("14.00 / 19.50")), "{t}");
        assert!(t.contains("CPU s by host process, fleet start (N=1000): systemd 5.25, irq 0.10, exited 0.50"), "{t}");
    }
}

//! The drain scenario (issue 38): how long emptying a machine of N units takes with `fleetctl drain` against doing
//! it by hand, and how many units are down at once meanwhile. Each operation gets a fresh 3-machine cluster, set up
//! the same way ([`setup`]): m2 and m3 cordoned, N instances of [`TEMPLATE`] started (so all run on m1), all
//! active/running, m2 and m3 uncordoned. Then, timed from the first command:
//! * **by hand** (what an operator does without drain): `fleetctl cordon m1`, `fleetctl unload` of the N units,
//!   `fleetctl start` of them again (they land on m2/m3, m1 being cordoned);
//! * **drain**: `fleetctl drain --max-unavailable=K m1` (blocking; exit 0 when done), per K of
//!   [`Options::drain_max_unavailable`].
//!
//! Both are followed by list-units polls ([`poll::until`], as the other scenarios wait) from the first command until
//! the command(s) returned **and** all N are active/running on other machines than m1. Every poll is also a sample
//! of how many units are active nowhere ([`Count`], [`Downs`]). A move leaves its unit down for only some 10–50 ms
//! (the old copy stopped, the new one starting), less than a poll, so the samples miss most of them: the most
//! units down at once is also read from every change of the units' states in the registry ([`RegistryWatch`], one
//! etcd watch, as the start scenario follows a start), which sees each state an agent publishes.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::future::Future;
use std::time::Instant;

use serde::Serialize;

use super::ctx::{Ctx, Row, instances};
use super::options::Options;
use super::poll::{self, Progress};
use super::registry_watch::RegistryWatch;
use super::stats::secs;
use super::units;

/// The template of the scenario's instances: a unit that does nothing, cheaply.
pub const TEMPLATE: &str = "d@.service";
/// The instances' names start with this (`d@1.service` …).
const INSTANCE_PREFIX: &str = "d@";
const TEMPLATE_TEXT: &str = "[Unit]\nDescription=drain bench %i\n\n[Service]\nExecStart=/bin/sleep infinity\n";
/// Machines of every cluster of the scenario: the drained one and two to take its units.
const MACHINES: usize = 3;
/// Units named in an error, at most.
const NAMED: usize = 5;

/// Where the awaited units are, in one list-units sample.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    /// Active/running on the machine being emptied.
    pub on_old: usize,
    /// Active/running on another machine.
    pub moved: usize,
    /// Active/running nowhere (not listed, not yet placed, starting, stopping, failed).
    pub down: usize,
    /// The first few of those down, each with what list-units showed for it.
    pub down_units: Vec<String>,
}

/// Counts the units of `names` in list-units `rows`: running on machine `old`, running elsewhere, or down.
pub fn count(rows: &[Row], names: &BTreeSet<String>, old: &str) -> Count {
    let mut c = Count::default();
    let mut running: BTreeMap<&str, &Row> = BTreeMap::new();
    let mut seen: BTreeMap<&str, &Row> = BTreeMap::new();
    for row in rows.iter().filter(|r| names.contains(&r.unit)) {
        seen.insert(&row.unit, row);
        if row.running() {
            // A unit listed twice (its old copy stopping, the new one running) counts once, where it runs.
            running
                .entry(&row.unit)
                .and_modify(|r| {
                    if row.machine != old {
                        *r = row
                    }
                })
                .or_insert(row);
        }
    }
    for name in names {
        match running.get(name.as_str()) {
            Some(row) if row.machine == old => c.on_old += 1,
            Some(_) => c.moved += 1,
            None => {
                c.down += 1;
                if c.down_units.len() < NAMED {
                    let shown = seen
                        .get(name.as_str())
                        .map_or("not listed".to_string(), |r| format!("{}/{} on {}", r.active, r.sub, r.machine));
                    c.down_units.push(format!("{name} {shown}"));
                }
            }
        }
    }
    c
}

/// The most units down at once over a series of samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Downs {
    pub samples: usize,
    pub max_down: usize,
    /// Seconds after the first command of the first sample that saw `max_down` (none: no sample).
    pub max_down_at_s: Option<f64>,
}

impl Downs {
    /// One sample taken `at_s` after the first command, with `down` units active nowhere.
    pub fn see(&mut self, at_s: f64, down: usize) {
        self.samples += 1;
        if self.max_down_at_s.is_none() || down > self.max_down {
            self.max_down = down;
            self.max_down_at_s = Some(at_s);
        }
    }
}

/// One emptying of m1: by hand (`max_unavailable` none) or a drain.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Move {
    /// The drain's `--max-unavailable`; none for the by-hand baseline.
    pub max_unavailable: Option<usize>,
    /// Setup: from `start --no-block` until all N were active/running on m1.
    pub setup_s: Option<f64>,
    /// When the command (by hand: the last of the three) returned, since the first command.
    pub command_s: Option<f64>,
    /// The drain's exit code (0: done).
    pub exit_code: Option<i32>,
    pub command_error: Option<String>,
    /// Since the first command: the command(s) returned and list-units showed all N active/running off m1.
    pub all_moved_s: Option<f64>,
    /// `all_moved_s` over the by-hand baseline's of the same run (drains only).
    pub ratio_to_by_hand: Option<f64>,
    /// The most units down at once in the list-units samples (a unit down for less than a poll can be missed).
    pub sampled: Downs,
    /// The same over every change of the units' published states in the registry (down: active/running on no
    /// machine); none when the watch failed (said in `errors`).
    pub registry: Option<Downs>,
    /// Mean time between the starts of successive list-units samples, ms.
    pub poll_interval_ms: f64,
    /// Where the units ran at the end: machine (`m2`, `m3`) → units.
    pub moved_to: BTreeMap<String, usize>,
    pub errors: Vec<String>,
}

impl Move {
    fn new(max_unavailable: Option<usize>) -> Move {
        Move { max_unavailable, ..Move::default() }
    }

    /// `by hand` or `drain K=…`.
    pub fn label(&self) -> String {
        self.max_unavailable.map_or("by hand".into(), |k| format!("drain K={k}"))
    }
}

/// The scenario's figures for one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DrainReport {
    pub units: usize,
    pub by_hand: Option<Move>,
    pub drains: Vec<Move>,
}

impl DrainReport {
    pub fn failed(&self) -> bool {
        self.moves().any(|m| !m.errors.is_empty() || m.command_error.is_some())
    }

    fn moves(&self) -> impl Iterator<Item = &Move> {
        self.by_hand.iter().chain(&self.drains)
    }
}

/// Runs the scenario with `n` units: the baseline by hand, then a drain per `--max-unavailable`, each on a fresh
/// cluster; failures land in each [`Move`]'s `errors`.
pub async fn run(opts: &Options, n: usize) -> DrainReport {
    let opts = Options { machines: MACHINES, ..opts.clone() };
    let mut r = DrainReport { units: n, ..Default::default() };
    r.by_hand = Some(on_fresh_cluster(&opts, n, None).await);
    for &k in &opts.drain_max_unavailable {
        tracing::info!(units = n, max_unavailable = k, "drain");
        r.drains.push(on_fresh_cluster(&opts, n, Some(k)).await);
    }
    let base = r.by_hand.as_ref().and_then(|m| m.all_moved_s);
    for d in &mut r.drains {
        d.ratio_to_by_hand = super::floor::ratio(d.all_moved_s, base);
    }
    r
}

async fn on_fresh_cluster(opts: &Options, n: usize, max_unavailable: Option<usize>) -> Move {
    let mut m = Move::new(max_unavailable);
    match Ctx::new(opts).await {
        Ok(ctx) => {
            if let Err(e) = scenario(&ctx, opts, n, &mut m).await {
                m.errors.push(e);
            }
            ctx.finish().await;
        }
        Err(e) => m.errors.push(e),
    }
    m
}

async fn scenario(ctx: &Ctx, opts: &Options, n: usize, m: &mut Move) -> Result<(), String> {
    let names = instances(INSTANCE_PREFIX.trim_end_matches('@'), n);
    let ids: Vec<String> = ctx.cluster.machines().iter().map(|m| m.id().to_string()).collect();
    let [old, others @ ..] = ids.as_slice() else { return Err("the cluster has no machine".into()) };
    m.setup_s = Some(setup(ctx, opts, &names, old, others).await?);
    let flag;
    let op: Vec<Vec<&str>> = match m.max_unavailable {
        None => {
            let cmd = |verb| std::iter::once(verb).chain(names.iter().map(String::as_str)).collect::<Vec<_>>();
            vec![vec!["cordon", old.as_str()], cmd("unload"), cmd("start")]
        }
        Some(k) => {
            flag = format!("--max-unavailable={k}");
            vec![vec!["drain", flag.as_str(), old.as_str()]]
        }
    };
    let exit_code = Cell::new(None);
    let run = async {
        for args in &op {
            let (out, _) = ctx.fleetctl_in(None, args).await?;
            if args[0] == "drain" {
                exit_code.set(Some(out.status));
            }
            if !out.success() {
                return Err(super::ctx::short(&format!("fleetctl {}: {}", args[0], out.describe())));
            }
        }
        Ok(())
    };
    let slots: BTreeMap<&str, String> =
        ctx.cluster.machines().iter().map(|x| (x.id(), format!("m{}", x.slot()))).collect();
    let end = follow(ctx, opts, &names, old, run, m).await;
    m.exit_code = exit_code.get();
    for (machine, units) in end {
        *m.moved_to.entry(slots.get(machine.as_str()).cloned().unwrap_or(machine)).or_default() += units;
    }
    Ok(())
}

/// m2.. cordoned, N instances started (all on m1), all active/running, m2.. uncordoned; the setup's seconds.
async fn setup(ctx: &Ctx, opts: &Options, names: &[String], old: &str, others: &[String]) -> Result<f64, String> {
    for id in others {
        ctx.fleetctl_ok(&["cordon", id]).await?;
    }
    let io = |e: std::io::Error| e.to_string();
    units::write(ctx.dir.path(), &[(TEMPLATE.into(), TEMPLATE_TEXT.into())]).map_err(io)?;
    let mut args = vec!["start", "--no-block"];
    args.extend(names.iter().map(String::as_str));
    let t0 = Instant::now();
    ctx.fleetctl_ok(&args).await?;
    let set: BTreeSet<String> = names.iter().cloned().collect();
    let (set, last) = (&set, &RefCell::new(Count::default()));
    let up = poll::until(t0, opts.poll, opts.timeout, names.len(), || async move {
        let c = count(&ctx.list_units().await?, set, old);
        let progress = Progress { count: c.on_old, done: c.on_old == set.len() };
        *last.borrow_mut() = c;
        Ok(progress)
    })
    .await;
    let Some(at) = up.done_s else {
        return Err(format!(
            "setup: not all {} units active/running on m1 within {:?}: {}{}",
            names.len(),
            opts.timeout,
            describe(&last.borrow()),
            up.last_error.map(|e| format!(" (last list-units error: {e})")).unwrap_or_default()
        ));
    };
    for id in others {
        ctx.fleetctl_ok(&["uncordon", id]).await?;
    }
    Ok(at)
}

/// `97 moved, 1 still on m1, 2 down (d@3.service inactive/dead on …, …)`.
fn describe(c: &Count) -> String {
    let mut s = format!("{} on other machines, {} still on m1, {} down", c.moved, c.on_old, c.down);
    if !c.down_units.is_empty() {
        let _ = write!(s, " ({}{})", c.down_units.join(", "), if c.down > c.down_units.len() { ", …" } else { "" });
    }
    s
}

/// Runs `op` (the commands) while list-units is sampled, until `op` has ended and (unless it failed) all `names`
/// are active/running off `old`; fills `m`'s timings and samples. Returns where the units ran at the end (machine
/// ID → units).
async fn follow(
    ctx: &Ctx,
    opts: &Options,
    names: &[String],
    old: &str,
    op: impl Future<Output = Result<(), String>>,
    m: &mut Move,
) -> BTreeMap<String, usize> {
    let set: BTreeSet<String> = names.iter().cloned().collect();
    let n = names.len();
    let mut watch = RegistryWatch::start(ctx, INSTANCE_PREFIX).await.map_err(|e| m.errors.push(e)).ok();
    let registry = RefCell::new(Downs::default());
    let ended = Cell::new(false);
    let failed = Cell::new(false);
    let downs = RefCell::new(Downs::default());
    let last = RefCell::new((Count::default(), Vec::<Row>::new()));
    let t0 = Instant::now();
    let command = async {
        let res = op.await;
        failed.set(res.is_err());
        ended.set(true);
        (secs(t0.elapsed()), res.err())
    };
    let (set, ended_ref, failed_ref, downs_ref, last_ref) = (&set, &ended, &failed, &downs, &last);
    let polled = poll::until(t0, opts.poll, opts.timeout, names.len(), || async move {
        // Read before the sample: a sample that follows the command's end may end the wait.
        let after_command = ended_ref.get();
        let rows = ctx.list_units().await?;
        let c = count(&rows, set, old);
        downs_ref.borrow_mut().see(secs(t0.elapsed()), c.down);
        let done = after_command && (failed_ref.get() || c.moved == set.len());
        let progress = Progress { count: c.moved, done };
        *last_ref.borrow_mut() = (c, rows);
        Ok(progress)
    });
    // Every state the watch delivers, until the command and the polls are done (it has no end of its own).
    let (((command_s, command_error), polled), watch_error) = {
        let watched = async {
            let Some(w) = watch.as_mut() else { return std::future::pending().await };
            let see = |at_s, seen: &super::registry_watch::Seen| {
                registry.borrow_mut().see(at_s, n - seen.counts.running.min(n));
            };
            w.until(t0, opts.timeout.max(ctx.command_timeout), see, |_| false).await.err()
        };
        let main = async { tokio::join!(command, polled) };
        tokio::pin!(main);
        tokio::select! {
            out = &mut main => (out, None),
            err = watched => (main.await, err),
        }
    };
    m.command_s = Some(command_s);
    m.command_error = command_error;
    m.sampled = downs.into_inner();
    match watch_error {
        Some(e) => m.errors.push(format!("registry watch ended early, the units down at once are unknown: {e}")),
        None if watch.is_some() => m.registry = Some(registry.into_inner()),
        None => {}
    }
    m.poll_interval_ms = polled.poll_interval_ms;
    let (c, rows) = last.into_inner();
    if m.command_error.is_none() {
        if polled.done_s.is_some() {
            m.all_moved_s = polled.done_s;
        } else {
            m.errors.push(format!(
                "not all {} units active/running off m1 within {:?} of the first command: last seen {}{}",
                names.len(),
                opts.timeout,
                describe(&c),
                polled.last_error.map(|e| format!(" (last list-units error: {e})")).unwrap_or_default()
            ));
        }
    } else {
        m.errors.push(format!("after the command failed, list-units showed {}", describe(&c)));
    }
    let mut on = BTreeMap::new();
    for row in rows.iter().filter(|r| set.contains(&r.unit) && r.running()) {
        *on.entry(row.machine.clone()).or_default() += 1;
    }
    on
}

/// The scenario's table: by hand and each drain side by side, one run.
pub fn table(r: &DrainReport) -> String {
    let moves: Vec<&Move> = r.moves().collect();
    let col = |f: &dyn Fn(&Move) -> String| moves.iter().map(|m| f(m)).collect::<Vec<_>>();
    let s = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.3} s"));
    let commands = format!("{} units off m1", r.units);
    let rows: Vec<(&str, Vec<String>, &str)> = vec![
        (commands.as_str(), col(&|m| m.label()), ""),
        ("setup: all on m1 active/running", col(&|m| s(m.setup_s)), "start --no-block, m2/m3 cordoned"),
        ("command(s) returned", col(&|m| s(m.command_s)), "by hand: cordon, unload, start"),
        ("  drain's exit code", col(&|m| m.exit_code.map_or("—".into(), |c| c.to_string())), "0: done"),
        ("all active/running on m2/m3", col(&|m| s(m.all_moved_s)), "list-units, after the command(s)"),
        ("  ÷ by hand", col(&|m| m.ratio_to_by_hand.map_or("—".into(), |x| format!("{x:.2}×"))), ""),
        (
            "most units down at once (registry)",
            col(&|m| m.registry.as_ref().map_or("—".into(), |d| d.max_down.to_string())),
            "drain: ≤ K; every published state",
        ),
        ("  first seen at", col(&|m| s(m.registry.as_ref().and_then(|d| d.max_down_at_s))), ""),
        ("  states seen", col(&|m| m.registry.as_ref().map_or("—".into(), |d| d.samples.to_string())), ""),
        ("most units down at once (list-units)", col(&|m| m.sampled.max_down.to_string()), "sampled"),
        ("  first seen at", col(&|m| s(m.sampled.max_down_at_s)), ""),
        (
            "  list-units samples, mean interval",
            col(&|m| format!("{}, {:.0} ms", m.sampled.samples, m.poll_interval_ms)),
            "",
        ),
        (
            "units at the end on",
            col(&|m| {
                let on: Vec<String> = m.moved_to.iter().map(|(k, v)| format!("{k} {v}")).collect();
                if on.is_empty() { "—".into() } else { on.join(", ") }
            }),
            "",
        ),
    ];
    let mut out = super::columns::render(&rows);
    for m in &moves {
        if let Some(e) = &m.command_error {
            let _ = writeln!(out, "  command error ({}): {e}", m.label());
        }
        for e in &m.errors {
            let _ = writeln!(out, "  error ({}): {e}", m.label());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(unit: &str, active: &str, sub: &str, machine: &str) -> Row {
        Row {
            unit: unit.into(),
            active: active.into(),
            sub: sub.into(),
            hash: "h".into(),
            machine: machine.into(),
            load: "loaded".into(),
        }
    }

    #[test]
    fn a_unit_is_on_the_old_machine_moved_or_down() {
        let names: BTreeSet<String> = instances("d", 5).into_iter().collect();
        let rows = [
            row("d@1.service", "active", "running", "m1id"),
            row("d@2.service", "active", "running", "m2id"),
            row("d@3.service", "deactivating", "stop-sigterm", "m1id"),
            row("d@4.service", "activating", "start", "m3id"),
            // The old copy stopping and the new one running: moved.
            row("d@2.service", "inactive", "dead", "m1id"),
            row("other.service", "inactive", "dead", "m1id"),
        ];
        let c = count(&rows, &names, "m1id");
        assert_eq!((c.on_old, c.moved, c.down), (1, 1, 3));
        assert_eq!(
            c.down_units,
            [
                "d@3.service deactivating/stop-sigterm on m1id",
                "d@4.service activating/start on m3id",
                "d@5.service not listed"
            ]
        );
        assert_eq!(describe(&c), format!("1 on other machines, 1 still on m1, 3 down ({})", c.down_units.join(", ")));
        // Running on both (the old copy not yet seen stopped): counted where it runs anew.
        let both = [row("d@1.service", "active", "running", "m1id"), row("d@1.service", "active", "running", "m2id")];
        let one: BTreeSet<String> = ["d@1.service".to_string()].into();
        assert_eq!(count(&both, &one, "m1id").moved, 1);
    }

    #[test]
    fn the_most_down_at_once_is_the_first_sample_of_the_maximum() {
        let mut d = Downs::default();
        assert_eq!((d.samples, d.max_down, d.max_down_at_s), (0, 0, None));
        for (at, down) in [(0.0, 0), (0.5, 1), (1.0, 3), (1.5, 3), (2.0, 1), (2.5, 0)] {
            d.see(at, down);
        }
        assert_eq!((d.samples, d.max_down, d.max_down_at_s), (6, 3, Some(1.0)));
        // No unit ever down: the maximum is 0, seen at the first sample.
        let mut none = Downs::default();
        none.see(0.2, 0);
        none.see(0.4, 0);
        assert_eq!((none.max_down, none.max_down_at_s), (0, Some(0.2)));
    }

    #[test]
    fn the_table_puts_by_hand_and_each_drain_side_by_side() {
        let mv = |k: Option<usize>, all: f64, down: usize| Move {
            max_unavailable: k,
            all_moved_s: Some(all),
            ratio_to_by_hand: k.map(|_| all / 10.0),
            sampled: Downs { samples: 40, max_down: down, max_down_at_s: Some(1.0) },
            registry: Some(Downs { samples: 400, max_down: down, max_down_at_s: Some(0.9) }),
            moved_to: [("m2".to_string(), 50), ("m3".to_string(), 50)].into(),
            ..Move::default()
        };
        let r = DrainReport {
            units: 100,
            by_hand: Some(mv(None, 10.0, 100)),
            drains: vec![mv(Some(1), 60.0, 1), Move { errors: vec!["boom".into()], ..mv(Some(10), 8.0, 10) }],
        };
        let t = table(&r);
        let head = t.lines().next().unwrap_or_default();
        let at = |c: &str| head.find(c).unwrap_or(usize::MAX);
        assert!(at("by hand") < at("drain K=1 ") && at("drain K=1 ") < at("drain K=10"), "{t}");
        assert!(t.lines().any(|l| l.contains("÷ by hand") && l.contains("6.00×") && l.contains("0.80×")), "{t}");
        let registry = t.lines().find(|l| l.contains("down at once (registry)")).unwrap_or_default();
        assert!(registry.contains("100") && registry.contains("drain: ≤ K"), "{t}");
        assert!(t.contains("m2 50, m3 50") && t.contains("error (drain K=10): boom"), "{t}");
        assert!(r.failed());
    }
}

//! The nemesis (`fleet-harness nemesis`): runs a cluster for a given time while injecting faults drawn from a seed,
//! one at a time, and checks fleet's promises on what **systemd in every machine** shows, not on fleet's view.
//!
//! * `schedule` (pure): the faults, in order, from the seed and the cluster's shape; a printed seed replays them.
//! * `check` (pure): the invariants on a timeline of sampled rounds and the faults' windows.
//! * `sample`: one round — `systemctl show` of the nemesis's units in every machine (a machine that cannot be read
//!   is down).
//! * `inject`: doing and undoing each fault against the [`Cluster`].
//! * `resources`: the machines' resources as the faults fail them (`--resource-faults`): a full units directory, a
//!   fleetd wall clock an hour off.
//! * `changes` (pure): the change driver's plan from the seed — rolling replaces, restarts, rollbacks and aborts of
//!   a global unit and an instance set, and the unit file of every version.
//! * `driver`: making those changes with fleetctl while the faults go on, and following every rollout it made.
//! * `rollcheck` (pure): the rollout invariants on the driver's units as systemd showed them.
//! * this module: the run — cluster up, units launched, a sampler every [`SAMPLE_EVERY`], each fault injected,
//!   undone, and followed by a convergence wait (every unit active on exactly one machine, every machine listed by
//!   fleetctl) whose length is the fault's convergence time, the change driver alongside, the wait for every
//!   rollout to end after the faults stop — and the report.

pub mod changes;
pub mod check;
pub mod driver;
mod inject;
pub mod resources;
pub mod rollcheck;
pub mod sample;
pub mod schedule;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use changes::Target;
use check::{FaultWindow, Limits, Round, UnitSpec, Violation};
use rollcheck::{Checked, RollInvariant, RollLimits, RollRound};
use schedule::{Fault, Shape};

use crate::cluster::{Cluster, ClusterError};

/// How often every machine's systemd is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// What a nemesis run does.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    /// No fault starts after this much time; the run ends after the last one converged (or timed out).
    pub duration: Duration,
    pub machines: usize,
    pub units: usize,
    /// How many of the units declare `[X-Fleet] AtMostOnce=true`.
    pub at_most_once: usize,
    pub etcd_members: usize,
    /// fleet.conf `agent_ttl` in seconds.
    pub agent_ttl_secs: u64,
    /// How long a fault's convergence may take before the run moves on (and reports it as not converged).
    pub converge_timeout: Duration,
    /// Whether the change driver makes rollouts of its global unit and instance set alongside the faults.
    pub changes: changes::Mode,
    /// Whether the machines' resources fail too (a full units directory, a fleetd clock an hour off; `resources`).
    pub resource_faults: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            duration: Duration::from_secs(180),
            machines: 3,
            units: 12,
            at_most_once: 3,
            etcd_members: 3,
            agent_ttl_secs: AT_MOST_ONCE_MIN_TTL_SECS,
            converge_timeout: Duration::from_secs(90),
            changes: changes::Mode::Rolling,
            resource_faults: false,
        }
    }
}

/// The smallest `agent_ttl` with which at-most-once units ride through the loss of an etcd member or of its leader
/// (docs/at-most-once.md, "Limits"; docs/faults.md, "Why 10 s and not 3 s"): below it the fence stops them during an
/// etcd election, which the nemesis would report as restarts no fault on their machine explains.
pub const AT_MOST_ONCE_MIN_TTL_SECS: u64 = 10;

impl Options {
    /// Why these options are refused, if they are: at-most-once units with an etcd that faults (more than one
    /// member, so members and leaders are killed) below [`AT_MOST_ONCE_MIN_TTL_SECS`], a TTL fleet does not promise
    /// them to survive.
    pub fn refused(&self) -> Option<String> {
        (self.at_most_once > 0 && self.agent_ttl_secs < AT_MOST_ONCE_MIN_TTL_SECS).then(|| {
            format!(
                "--agent-ttl {} with {} at-most-once unit(s): at-most-once units ride through etcd faults only with \
                 agent_ttl of {AT_MOST_ONCE_MIN_TTL_SECS} s or more (docs/at-most-once.md, \"Limits\"); use \
                 --agent-ttl {AT_MOST_ONCE_MIN_TTL_SECS} or --at-most-once 0",
                self.agent_ttl_secs, self.at_most_once
            )
        })
    }

    /// The command line that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "fleet-harness nemesis --seed {} --duration {} --machines {} --units {} --at-most-once {} --etcd-members {} --agent-ttl {} --converge-timeout {} --changes {}",
            self.seed,
            self.duration.as_secs(),
            self.machines,
            self.units,
            self.at_most_once,
            self.etcd_members,
            self.agent_ttl_secs,
            self.converge_timeout.as_secs(),
            self.changes
        ) + if self.resource_faults { " --resource-faults" } else { "" }
    }

    /// Duplicates of an at-least-once unit may outlive the fault that made them by up to two TTLs: the healed
    /// machine re-registers and its agent stops the copy the engine no longer places there (docs/faults.md).
    pub fn limits(&self) -> Limits {
        Limits {
            duplicate_window_ms: 2 * self.agent_ttl_secs * 1000 + 5_000,
            settle_grace_ms: 2_000,
            host_stall_ms: self.agent_ttl_secs * 1000,
        }
    }

    /// The rollout invariants' bounds (fleet hears of a dead machine about a TTL after it died).
    pub fn roll_limits(&self) -> RollLimits {
        RollLimits::for_ttl(self.agent_ttl_secs * 1000)
    }
}

/// The nemesis could not run (a violation is not an error: it is in the [`Report`]).
#[derive(Debug, thiserror::Error)]
pub enum NemesisError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("nemesis: {0}")]
    Setup(String),
    #[error("injecting `{fault}`: {cause}")]
    Inject { fault: String, cause: String },
}

/// What a run saw.
#[derive(Debug, Clone)]
pub struct Report {
    pub options: Options,
    pub units: Vec<UnitSpec>,
    pub faults: Vec<FaultWindow>,
    pub violations: Vec<Violation>,
    pub rounds: Vec<Round>,
    /// How long the units took to be active once each at the start.
    pub launched_ms: u64,
    /// The change driver's units as sampled (empty without changes).
    pub roll_rounds: Vec<RollRound>,
    /// What the change driver asked for, made and saw.
    pub driven: driver::Driven,
    /// When the last fault's convergence wait ended.
    pub faults_end_ms: u64,
    /// The rollout invariants' findings.
    pub rollouts: Checked,
    /// Each machine's fleetd journal at the end of the run: (machine name, text).
    pub journals: Vec<(String, String)>,
}

impl Report {
    /// Every broken invariant, plain units' and rollouts' alike.
    pub fn violation_count(&self) -> usize {
        self.violations.len() + self.rollouts.violations.len()
    }

    /// Every unit's whole timeline, one line per change (plain units by process, the change driver's units by
    /// version, process, invocation and check): what a violation's excerpt in [`Self::render`] is cut from, kept
    /// to explain a long run afterwards (`nemesis --timelines FILE`).
    pub fn timelines(&self) -> String {
        fn units<'a, T: 'a>(
            machines: impl Iterator<Item = &'a BTreeMap<String, Option<BTreeMap<String, T>>>>,
        ) -> BTreeSet<&'a String> {
            machines.flat_map(|m| m.values().flatten().flat_map(|u| u.keys())).collect()
        }
        let mut s = String::new();
        let mut section = |unit: &str, lines: Vec<String>| {
            s += &format!("{unit}:\n");
            for line in lines {
                s += &format!("  {line}\n");
            }
        };
        for unit in units(self.rounds.iter().map(|r| &r.machines)) {
            section(unit, sample::timeline(&self.rounds, unit, 0, u64::MAX));
        }
        for unit in units(self.roll_rounds.iter().map(|r| &r.machines)) {
            section(unit, sample::roll_timeline(&self.roll_rounds, unit, 0, u64::MAX));
        }
        s
    }

    /// The printed report: the faults injected (a timeline), violations with each unit's timeline around it, and
    /// the convergence time of every fault and per fault kind.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let o = &self.options;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "nemesis: seed {}, {} machines, {} etcd member(s), {} units ({} at-most-once), agent_ttl {}s, {} rounds sampled",
            o.seed,
            o.machines,
            o.etcd_members,
            o.units,
            o.at_most_once,
            o.agent_ttl_secs,
            self.rounds.len()
        );
        let _ = writeln!(s, "replay: {}", o.replay_command());
        let _ = writeln!(s, "units launched and active once each after {}", check::secs(self.launched_ms));
        let _ = writeln!(s, "faults ({}):", self.faults.len());
        let next_start = |i: usize| self.faults.get(i + 1).map(|n| n.start_ms);
        let disruptions: Vec<_> = self
            .faults
            .iter()
            .enumerate()
            .map(|(i, f)| check::disruption(&self.rounds, &self.units, f, next_start(i)))
            .collect();
        for (f, disruption) in self.faults.iter().zip(&disruptions) {
            let disrupted = match *disruption {
                None => "units undisturbed".to_string(),
                Some((from, Some(to))) => {
                    format!("units disturbed {} ({} to {})", check::secs(to - from), check::secs(from), check::secs(to))
                }
                Some((from, None)) => format!("units disturbed from {} and never whole again", check::secs(from)),
            };
            let conv = match f.converged_ms {
                Some(c) => format!("converged {:>7} (+{} after undone)", check::secs(c), check::secs(c - f.undone_ms)),
                None => "NOT CONVERGED".to_string(),
            };
            let _ = writeln!(
                s,
                "  {:>7}  undone {:>7}  {conv}  {}; {disrupted}",
                check::secs(f.start_ms),
                check::secs(f.undone_ms),
                f.label
            );
        }
        let _ = writeln!(s, "by fault kind: convergence after undone (n, median, max); units disturbed (n, max):");
        let mut disturbed: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for (i, (f, disruption)) in self.faults.iter().zip(&disruptions).enumerate() {
            if let Some((from, to)) = *disruption {
                let end = to.or(next_start(i)).unwrap_or_else(|| self.rounds.last().map_or(from, |r| r.t_ms));
                disturbed.entry(f.kind).or_default().push(end - from);
            }
        }
        let mut by_kind: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        let mut missed: BTreeMap<&str, usize> = BTreeMap::new();
        for f in &self.faults {
            match f.converged_ms {
                Some(c) => by_kind.entry(f.kind).or_default().push(c - f.undone_ms),
                None => *missed.entry(f.kind).or_default() += 1,
            }
        }
        for (kind, mut times) in by_kind {
            times.sort_unstable();
            let median = times[times.len() / 2];
            let max = *times.last().unwrap_or(&0);
            let hurt = disturbed.get(&kind).map_or_else(
                || "units never disturbed".to_string(),
                |d| format!("units disturbed {}×, max {}", d.len(), check::secs(d.iter().copied().max().unwrap_or(0))),
            );
            let _ = writeln!(
                s,
                "  {kind:<22} n={:<3} median {:>6}  max {:>6}{};  {hurt}",
                times.len(),
                check::secs(median),
                check::secs(max),
                missed.get(&kind).map(|n| format!("  ({n} not converged)")).unwrap_or_default()
            );
        }
        if o.changes != changes::Mode::None {
            self.render_changes(&mut s);
        }
        for (from, to) in check::host_stalls(&self.rounds, o.limits()) {
            let _ = writeln!(
                s,
                "note: host stall: no round sampled from {} to {} (longer than the TTL); restarts seen within the \
                 duplicate window after it are excused",
                check::secs(from),
                check::secs(to)
            );
        }
        if self.violation_count() == 0 {
            let _ = writeln!(s, "invariants: all held");
        } else if self.violations.is_empty() {
            let _ = writeln!(s, "plain units' invariants: all held");
        } else {
            let _ = writeln!(s, "invariant violations ({}):", self.violations.len());
            for v in &self.violations {
                let _ = writeln!(s, "  {v}");
                for line in sample::timeline(&self.rounds, &v.unit, v.from_ms.saturating_sub(2_000), v.to_ms + 2_000) {
                    let _ = writeln!(s, "      {line}");
                }
            }
        }
        if !self.rollouts.violations.is_empty() {
            let _ = writeln!(s, "rollout invariant violations ({}):", self.rollouts.violations.len());
            for v in &self.rollouts.violations {
                let _ = writeln!(s, "  {v}");
                let (from, to) = (v.since_ms.saturating_sub(3_000), v.at_ms + 2_000);
                for unit in std::iter::once(&v.unit).chain(&v.related) {
                    let _ = writeln!(s, "    {unit}:");
                    for line in sample::roll_timeline(&self.roll_rounds, unit, from, to) {
                        let _ = writeln!(s, "      {line}");
                    }
                }
            }
        }
        s
    }

    /// The changes made and their outcomes, every rollout's observed states, and each rollout invariant's result.
    fn render_changes(&self, s: &mut String) {
        use std::fmt::Write;
        let d = &self.driven;
        let _ = writeln!(s, "changes ({} commands and actions):", d.log.len());
        for l in &d.log {
            let _ = writeln!(s, "  {:>7}  {:<12}  {}", check::secs(l.t_ms), l.target.label(), l.text);
        }
        let _ = writeln!(s, "rollouts ({}), as fleet showed them:", d.rollouts.len());
        for r in &d.rollouts {
            let states: Vec<String> = r
                .observed
                .iter()
                .map(|o| {
                    let mut t = format!("{} {}", check::secs(o.t_ms), o.state);
                    if !o.reason.is_empty() {
                        t.push_str(&format!(" ({})", o.reason));
                    }
                    if !o.settled {
                        t.push_str(" [action on its way]");
                    }
                    t
                })
                .collect();
            let _ = writeln!(s, "  {} at {}: {}", r.id, check::secs(r.created_ms), r.what);
            let _ = writeln!(s, "      {}", states.join(" -> "));
            if !r.steps.is_empty() {
                let _ = writeln!(s, "      steps: {}", r.steps.join("; "));
            }
            for (t, unit, machine) in &r.waived {
                let _ = writeln!(s, "      waived at {}: {unit} on {machine}", check::secs(*t));
            }
        }
        let mut asked: BTreeMap<Target, Vec<&str>> = BTreeMap::new();
        for a in &d.asked {
            asked.entry(a.target).or_default().push(&a.version);
        }
        for (target, versions) in asked {
            let _ = writeln!(s, "versions asked for, {}: {}", target.label(), versions.join(", "));
        }
        let _ = writeln!(s, "faults stopped at {}", check::secs(self.faults_end_ms));
        for note in &self.rollouts.notes {
            let _ = writeln!(s, "note: {note}");
        }
        for inv in RollInvariant::ALL {
            let n = self.rollouts.violations.iter().filter(|v| v.invariant == inv).count();
            let verdict = if n == 0 { "held".to_string() } else { format!("{n} violation(s)") };
            let _ = writeln!(s, "rollout invariant \"{inv}\": {verdict}");
        }
    }
}

/// The unit files the nemesis launches: `nem-once-<i>.service` (at-most-once) then `nem-<i>.service`.
pub fn unit_files(units: usize, at_most_once: usize) -> Vec<(UnitSpec, String)> {
    (1..=units)
        .map(|i| {
            let once = i <= at_most_once;
            let name = if once { format!("nem-once-{i}.service") } else { format!("nem-{i}.service") };
            let mut text = format!(
                "[Unit]\nDescription=nemesis unit {i}\n\n[Service]\nExecStart=/bin/sh -c 'while :; do sleep 1; done'\n"
            );
            if once {
                text.push_str("\n[X-Fleet]\nAtMostOnce=true\n");
            }
            (UnitSpec { name, at_most_once: once }, text)
        })
        .collect()
}

/// Shared between the run and its sampler.
#[derive(Default)]
struct Timeline {
    rounds: Vec<Round>,
    roll_rounds: Vec<RollRound>,
}

/// Runs the nemesis: starts a cluster, launches the units, injects faults until `duration`, and returns what it saw.
/// The cluster is removed when this returns (also on error).
pub async fn run(opts: &Options) -> Result<Report, NemesisError> {
    if let Some(why) = opts.refused() {
        return Err(NemesisError::Setup(why));
    }
    if opts.at_most_once > opts.units || opts.units == 0 || opts.machines < 2 {
        return Err(NemesisError::Setup(format!(
            "need at least 2 machines and 1 unit, and at most --units at-most-once units (got {} machines, {} units, {} at-most-once)",
            opts.machines, opts.units, opts.at_most_once
        )));
    }
    let ttl = format!("{}s", opts.agent_ttl_secs);
    let cluster =
        Cluster::builder().machines(opts.machines).etcd_members(opts.etcd_members).agent_ttl(&ttl).start().await?;
    let t0 = Instant::now();
    let ms = move || t0.elapsed().as_millis() as u64;
    cluster.wait_for_n_machines(1, opts.machines).await?;
    if opts.resource_faults {
        resources::prepare(&cluster).await.map_err(NemesisError::Setup)?;
        cluster.wait_for_n_machines(1, opts.machines).await?;
    }

    let files = unit_files(opts.units, opts.at_most_once);
    let dir = tempfile::tempdir().map_err(|e| NemesisError::Setup(format!("temporary directory: {e}")))?;
    let mut paths = Vec::new();
    for (spec, text) in &files {
        let path = dir.path().join(&spec.name);
        std::fs::write(&path, text).map_err(|e| NemesisError::Setup(format!("{}: {e}", path.display())))?;
        paths.push(path.display().to_string());
    }
    let units: Vec<UnitSpec> = files.into_iter().map(|(spec, _)| spec).collect();
    let names: Vec<String> = units.iter().map(|u| u.name.clone()).collect();

    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let machines: Vec<(String, String)> =
        cluster.machines().iter().map(|m| (m.name().to_string(), m.container_name().to_string())).collect();
    let rolling = opts.changes != changes::Mode::None;
    let sampler = {
        let timeline = timeline.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let t_ms = ms();
                let (round, mut roll) = sample::round(&machines, t_ms, rolling).await;
                // What the driver's units showed happened by the time the last machine answered.
                roll.t_ms = ms();
                let mut timeline = timeline.lock().expect("timeline lock");
                timeline.rounds.push(round);
                timeline.roll_rounds.push(roll);
            }
        })
    };
    let faulted = Arc::new(Mutex::new(BTreeSet::new()));
    let changer = driver::Driver::new(&cluster, dir.path().to_path_buf(), faulted.clone(), t0);
    let outcome = drive(opts, &cluster, &units, &names, &paths, &timeline, &changer, &faulted, ms).await;
    sampler.abort();
    let (faults, launched_ms, faults_end_ms) = outcome?;
    let driven = changer.take();
    let (rounds, roll_rounds) = {
        let mut t = timeline.lock().expect("timeline lock");
        (std::mem::take(&mut t.rounds), std::mem::take(&mut t.roll_rounds))
    };
    let violations = check::check(&units, &rounds, &faults, opts.limits());
    let rollouts = if rolling {
        rollcheck::check(&roll_rounds, &driven.rollouts, &driven.asked, &faults, faults_end_ms, opts.roll_limits())
    } else {
        Checked::default()
    };
    // fleetd's own account of the run, for explaining a violation afterwards (`nemesis --journals DIR`): what each
    // machine's journal still holds (a volatile journal starts over when its machine is killed).
    let mut journals = Vec::new();
    for m in cluster.machines() {
        let text = match m.exec(&["journalctl", "-u", "fleet.service", "-o", "short-precise", "--no-pager"]).await {
            Ok(out) => out.stdout,
            Err(e) => format!("(journal not read: {e})\n"),
        };
        journals.push((m.name().to_string(), text));
    }
    // etcd's own account too: when its members elected a leader, and when it expired leases.
    for member in cluster.etcd_members() {
        let text = member.logs().await.unwrap_or_else(|e| format!("(etcd log not read: {e})\n"));
        journals.push((member.name().to_string(), text));
    }
    cluster.destroy().await;
    Ok(Report {
        journals,
        options: opts.clone(),
        units,
        faults,
        violations,
        rounds,
        launched_ms,
        roll_rounds,
        driven,
        faults_end_ms,
        rollouts,
    })
}

/// Launches the units, then injects and undoes each fault and waits for convergence, until `duration`, while the
/// change driver makes its changes; then waits for every rollout to end. Returns the faults, how long the launch
/// took, and when the faults stopped.
#[allow(clippy::too_many_arguments)]
async fn drive(
    opts: &Options,
    cluster: &Cluster,
    units: &[UnitSpec],
    names: &[String],
    paths: &[String],
    timeline: &Arc<Mutex<Timeline>>,
    changer: &driver::Driver<'_>,
    faulted: &Arc<Mutex<BTreeSet<usize>>>,
    ms: impl Fn() -> u64,
) -> Result<(Vec<FaultWindow>, u64, u64), NemesisError> {
    let mut args = vec!["start", "--no-block"];
    args.extend(paths.iter().map(String::as_str));
    let out = cluster.fleetctl(1, &args).await?;
    if !out.success() {
        return Err(NemesisError::Setup(format!("fleetctl start: {}", out.describe())));
    }
    let rolling = opts.changes != changes::Mode::None;
    if rolling {
        changer.launch().await.map_err(NemesisError::Setup)?;
    }
    let launch_started = ms();
    let launched = converge(cluster, opts, names, timeline, launch_started).await;
    let launched = match launched {
        Some(t) if rolling => wait_launched(opts, timeline, t).await,
        other => other,
    };
    let launched_ms = launched.ok_or_else(|| {
        NemesisError::Setup(format!(
            "the {} units were not active once each within {:?}",
            units.len(),
            opts.converge_timeout
        ))
    })? - launch_started;
    tracing::info!(after_ms = launched_ms, "units launched");

    let plans: Vec<Vec<changes::Change>> = match opts.changes {
        changes::Mode::None => Vec::new(),
        changes::Mode::Rolling => {
            Target::ALL.iter().map(|t| changes::plan(opts.seed, *t, 1_000, opts.machines)).collect()
        }
    };
    let stop = Duration::from_millis(ms()) + opts.duration;
    let change_runs = async {
        futures::future::join_all(plans.iter().map(|plan| changer.run(plan, stop))).await;
    };
    // The faults stop when the last one's convergence wait ended (the driver starts nothing after `duration`).
    let ((faults, faults_end_ms), ()) =
        tokio::join!(async { (inject_faults(opts, cluster, names, timeline, faulted, &ms).await, ms()) }, change_runs);
    let faults = faults?;
    if rolling {
        changer.finish(faults_end_ms, Duration::from_millis(opts.roll_limits().default_deadline_ms)).await;
    }
    Ok((faults, launched_ms, faults_end_ms))
}

/// Waits (after the plain units converged at `since_ms`) until the change driver's units run: the global unit
/// serving on every machine, each instance somewhere.
async fn wait_launched(opts: &Options, timeline: &Arc<Mutex<Timeline>>, since_ms: u64) -> Option<u64> {
    let deadline = Instant::now() + opts.converge_timeout;
    loop {
        let last = timeline.lock().expect("timeline lock").roll_rounds.last().cloned();
        if let Some(round) = last.filter(|r| r.t_ms >= since_ms)
            && rollcheck::launched(&round, opts.machines)
        {
            return Some(round.t_ms);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(SAMPLE_EVERY / 2).await;
    }
}

/// Injects and undoes each fault of the schedule and waits for convergence, until `duration`; the machine a fault
/// touches is in `faulted` meanwhile (the change driver sends nothing through it).
async fn inject_faults(
    opts: &Options,
    cluster: &Cluster,
    names: &[String],
    timeline: &Arc<Mutex<Timeline>>,
    faulted: &Arc<Mutex<BTreeSet<usize>>>,
    ms: &impl Fn() -> u64,
) -> Result<Vec<FaultWindow>, NemesisError> {
    let shape = Shape {
        machines: opts.machines,
        etcd_members: opts.etcd_members,
        ttl: Duration::from_secs(opts.agent_ttl_secs),
        resource_faults: opts.resource_faults,
    };
    // More than can fit: the run stops drawing once `duration` has passed.
    let planned = schedule::schedule(opts.seed, 10_000, shape);
    let run_started = ms();
    let mut faults = Vec::new();
    for fault in planned {
        if ms() - run_started >= opts.duration.as_millis() as u64 {
            break;
        }
        let label = fault.to_string();
        tracing::info!(fault = %label, "injecting");
        let start_ms = ms();
        let slot = match &fault {
            Fault::MachineKill { slot, .. }
            | Fault::FleetdKill { slot }
            | Fault::Partition { slot, .. }
            | Fault::DiskFull { slot, .. }
            | Fault::ClockJump { slot, .. } => Some(*slot),
            _ => None,
        };
        faulted.lock().expect("faulted lock").extend(slot);
        let touched = inject::apply(cluster, &fault).await;
        if let Some(slot) = slot {
            faulted.lock().expect("faulted lock").remove(&slot);
        }
        let touched = touched.map_err(|cause| NemesisError::Inject { fault: label.clone(), cause })?;
        let undone_ms = ms();
        let converged_ms = converge(cluster, opts, names, timeline, undone_ms).await;
        match converged_ms {
            Some(c) => tracing::info!(fault = %label, after_ms = c - undone_ms, "converged"),
            None => tracing::warn!(fault = %label, timeout = ?opts.converge_timeout, "did not converge"),
        }
        let label = match (&fault, &touched) {
            (Fault::EngineLeaderChurn | Fault::EtcdLeaderKill { .. } | Fault::SlowEtcd { .. }, Some(who)) => {
                format!("{label} [{who}]")
            }
            _ => label,
        };
        let touches: BTreeSet<String> = match &fault {
            f if f.is_etcd() => BTreeSet::new(),
            _ => touched.into_iter().collect(),
        };
        faults.push(FaultWindow { label, kind: fault.kind(), start_ms, undone_ms, converged_ms, touches });
    }
    Ok(faults)
}

/// Waits until a round sampled after `since_ms` shows every unit active on exactly one machine and fleetctl (via
/// any machine that answers) lists every machine; returns when that was seen, `None` after the timeout.
async fn converge(
    cluster: &Cluster,
    opts: &Options,
    names: &[String],
    timeline: &Arc<Mutex<Timeline>>,
    since_ms: u64,
) -> Option<u64> {
    let deadline = Instant::now() + opts.converge_timeout;
    loop {
        let last = timeline.lock().expect("timeline lock").rounds.last().cloned();
        if let Some(round) = last.filter(|r| r.t_ms > since_ms)
            && check::each_once(&round, names)
            && machines_listed(cluster, opts.machines).await
        {
            return Some(round.t_ms);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(SAMPLE_EVERY / 2).await;
    }
}

/// Whether fleetctl, via the first machine whose API answers, lists `n` machines.
async fn machines_listed(cluster: &Cluster, n: usize) -> bool {
    for m in cluster.machines() {
        if let Ok(out) =
            cluster.fleetctl(m.slot(), &["list-machines", "--no-legend", "--full", "--fields", "machine"]).await
            && out.success()
        {
            return crate::wait::parse_machines(&out.stdout).len() == n;
        }
    }
    false
}

#[cfg(test)]
mod options_tests {
    use super::*;

    /// At-most-once units need agent_ttl >= 10 s through etcd faults: the nemesis refuses less, naming why, and
    /// runs any TTL without them.
    #[test]
    fn a_ttl_at_most_once_units_cannot_ride_through_is_refused() {
        let short = Options { agent_ttl_secs: 5, ..Options::default() };
        let why = short.refused().expect("refused");
        assert!(
            why.contains("--agent-ttl 5 with 3 at-most-once unit(s)") && why.contains("docs/at-most-once.md"),
            "{why}"
        );
        assert_eq!(Options { at_most_once: 0, ..short }.refused(), None);
        assert_eq!(Options::default().refused(), None, "the default TTL is enough");
    }
}

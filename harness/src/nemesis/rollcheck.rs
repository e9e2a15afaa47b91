//! The rollout invariants (issue 37), checked on what **systemd in every machine** showed of the change driver's
//! units (`nemr-*`), the rollouts the driver made (and what fleet answered about them), and the faults' windows.
//! Pure, so a violating timeline can be written by hand in a test.
//!
//! A *slot* is what a rollout's budget counts: for the global unit a machine (the unit should run on each), for
//! the instance set an instance (it should run somewhere). A slot is *available* in a round when a copy there is
//! active with a MainPID and passes its version's health check (a version without a check: active is enough).
//!
//! * **budget**: a rollout never takes a slot down while the slots it covers without an available copy already
//!   number its `maxUnavailable`. A *down* is a slot available in one round and not in the next (or whose copy was
//!   replaced between two rounds). It is the rollout's when its copy was stopped or restarted on a machine that
//!   answered, while the rollout was live, and no fault excuses the machine ([`excusing_fault`]); a machine that
//!   stops answering is the fault's, a copy that is still the same process but fails its check is the unit's own.
//!   What counts as already unavailable is what fleet could know: slots this rollout took down, and any other slot
//!   once it has been unavailable for [`RollLimits::notice_health_ms`] (a failing check, a stopped unit: one check
//!   interval, one state write, one engine pass) or, for a machine the faults took away, for
//!   [`RollLimits::notice_fault_ms`] (the engine hears of a dead machine only when its presence lease expires:
//!   about the TTL). Downs that exceed the budget only by counting slots fleet could not yet know of are listed as
//!   notes, not violations.
//! * **versions**: every active copy runs a version the driver asked for (by then) on that copy's target — the
//!   original, every version it submitted; a rollback's target is one of those.
//! * **endings**: every rollout ends — `done`, `paused`, `rolled_back` or `aborted`, with no user action still on
//!   its way, and with a reason unless `done` — within its progress deadline (5 minutes when it has none) after the
//!   faults stop.
//! * **restarts**: no machine restarts a unit twice for one step of a rollout: per rollout, machine and unit, the
//!   restarts seen (a new InvocationID where another ran before) number at most one for the step, one more when the
//!   rollout undid that machine, and one more per resume (which releases failed steps again). A restart while no
//!   rollout of the unit is live counts against zero steps. Excused: restarts on a machine within the window of a
//!   machine kill or a partition longer than the TTL that touched it ([`excusing_fault`]); the first start after a
//!   machine could not be read (it rebooted) is no restart; a unit absent from a machine for
//!   [`RollLimits::forget_absent_ms`] (it moved away) starts there afresh. Not excused: fleetd kills, engine
//!   churn, short partitions and etcd faults — fleet promises that none of them restarts a unit.
//!
//! Sampling every 500 ms can miss a copy that lived less than a round: a restart or a down it hides is not
//! counted, so these checks can miss a violation but do not invent one from a missed round.

use std::collections::{BTreeMap, BTreeSet};

use super::changes::{GLOBAL, Target};
use super::check::{FaultWindow, secs};

/// Fault kinds whose windows excuse what happens to the units of the machine they touched.
pub const EXCUSING_KINDS: [&str; 2] = ["machine kill", "partition > TTL"];

/// A version's health check as the sampler ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The version has no check.
    NoCheck,
    Pass,
    Fail,
    /// The version could not be read (the process ended while it was looked at).
    Unknown,
}

/// One copy of a unit on one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    pub active_state: String,
    pub sub_state: String,
    pub pid: u32,
    /// systemd's InvocationID: a new one for every start.
    pub invocation: String,
    /// `NEM_VERSION` of its main process.
    pub version: Option<String>,
    pub health: Health,
    /// Its version's check flaps (`NEM_CHECK=flap`): it fails in the known windows of the host's clock.
    pub flaps: bool,
}

impl Copy {
    pub fn active(&self) -> bool {
        self.active_state == "active" && self.pid != 0
    }

    pub fn serving(&self) -> bool {
        self.active() && matches!(self.health, Health::NoCheck | Health::Pass)
    }
}

impl std::fmt::Display for Copy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.active() {
            return write!(f, "{}/{}", self.active_state, self.sub_state);
        }
        let health = match self.health {
            Health::NoCheck => "",
            Health::Pass => " ok",
            Health::Fail => " unhealthy",
            Health::Unknown => " ?",
        };
        let inv: String = self.invocation.chars().take(4).collect();
        write!(f, "{} pid {} inv {inv}{health}", self.version.as_deref().unwrap_or("?"), self.pid)
    }
}

/// One look at the change driver's units in every machine.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RollRound {
    /// When every machine had answered (a round can take a second or two on a loaded host; what it shows happened
    /// by then, which is what "asked for by then" and "live then" need).
    pub t_ms: u64,
    /// The host's wall clock then (Unix ms; 0 when unknown): where the flap windows of a flapping check lie.
    pub epoch_ms: u64,
    /// machine → its loaded `nemr-*` units, or `None` when it could not be read.
    pub machines: BTreeMap<String, Option<BTreeMap<String, Copy>>>,
}

/// What the driver read of a rollout at one time (kept on change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub t_ms: u64,
    pub state: String,
    pub reason: String,
    /// No user action is on its way (no abort not yet taken up, no resume not yet taken up) and no key of the
    /// rollout failed to decode.
    pub settled: bool,
}

impl Observation {
    /// Whether the rollout has ended as the invariant means it.
    pub fn ended(&self) -> bool {
        self.settled && matches!(self.state.as_str(), "done" | "paused" | "rolled_back" | "aborted")
    }

    fn is_final(&self) -> bool {
        matches!(self.state.as_str(), "done" | "rolled_back" | "aborted")
    }
}

/// A rollout the driver made, with what fleet said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutRecord {
    pub id: String,
    pub target: Target,
    /// What the change was (`rolling replace to g3 (...)`).
    pub what: String,
    pub units: Vec<String>,
    pub budget: u32,
    /// When the driver sent the request that made it.
    pub created_ms: u64,
    /// `--progress-deadline` / `UpdateProgressDeadline=`.
    pub deadline_ms: Option<u64>,
    pub observed: Vec<Observation>,
    /// (unit, machine) pairs its undo returned to the old version.
    pub undo: BTreeSet<(String, String)>,
    /// Resumes the engine took up.
    pub resumes: u32,
    /// (when, unit, machine) of steps a `rollout-resume --skip-failed` waived: from then on they no longer count
    /// against its budget, as fleet documents (the user gave them up).
    pub waived: Vec<(u64, String, String)>,
    /// Its steps and undo steps as last shown (for the report).
    pub steps: Vec<String>,
    /// When the driver last read it (`observed` keeps changes only).
    pub last_seen_ms: u64,
    /// The machines its (forward) steps name, as last shown: the machines fleet took it up on. Empty when never
    /// shown with steps.
    pub machines: BTreeSet<String>,
}

impl RolloutRecord {
    /// When it was first seen done, rolled back or aborted.
    pub fn final_ms(&self) -> Option<u64> {
        self.observed.iter().find(|o| o.is_final()).map(|o| o.t_ms)
    }

    /// When it entered the ended state it was last seen in (`None`: last seen not ended).
    pub fn ended_ms(&self) -> Option<u64> {
        let last_not_ended = self.observed.iter().rposition(|o| !o.ended());
        let first_of_run = last_not_ended.map_or(0, |i| i + 1);
        self.observed.get(first_of_run).map(|o| o.t_ms)
    }

    /// The state it was last seen in, with its reason.
    pub fn last(&self) -> Option<&Observation> {
        self.observed.last()
    }

    fn covers(&self, unit: &str) -> bool {
        self.units.iter().any(|u| u == unit)
    }

    /// Whether `slot`'s step was waived by `t`.
    fn waived(&self, slot: &Slot, t: u64) -> bool {
        self.waived.iter().any(|(at, unit, machine)| {
            *at <= t
                && match slot {
                    Slot::Machine(m) => unit == GLOBAL && machine == m,
                    Slot::Instance(u) => unit == u,
                }
        })
    }
}

/// A version the driver asked for: from `t_ms` on, a machine may run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub t_ms: u64,
    pub target: Target,
    pub version: String,
}

/// The bounds these invariants allow (docs/faults.md, "Rollouts in the nemesis").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollLimits {
    /// How long a slot must have been unavailable before a rollout must count it (fleet had time to hear of it).
    pub notice_health_ms: u64,
    /// Likewise for a machine that cannot be read (killed): fleet hears of it when its presence lease expires.
    pub notice_fault_ms: u64,
    /// How long after an excusing fault converged its machine's units may still be stopped and restarted.
    pub excuse_grace_ms: u64,
    /// How long after a rollout was seen ended a restart may still be its own (a step released just before).
    pub end_grace_ms: u64,
    /// The deadline of a rollout without a progress deadline, after the faults stop.
    pub default_deadline_ms: u64,
    /// A unit absent from a machine this long has left it: its next start there is no restart.
    pub forget_absent_ms: u64,
}

impl RollLimits {
    /// The bounds for a cluster whose `agent_ttl` is `ttl_ms`.
    pub fn for_ttl(ttl_ms: u64) -> RollLimits {
        RollLimits {
            notice_health_ms: 3_000,
            notice_fault_ms: ttl_ms + 3_000,
            excuse_grace_ms: 5_000,
            end_grace_ms: 3_000,
            default_deadline_ms: 300_000,
            forget_absent_ms: 2_000,
        }
    }
}

/// Which invariant a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RollInvariant {
    Budget,
    UnaskedVersion,
    NotEnded,
    RestartedTwice,
}

impl RollInvariant {
    pub const ALL: [RollInvariant; 4] =
        [RollInvariant::Budget, RollInvariant::UnaskedVersion, RollInvariant::NotEnded, RollInvariant::RestartedTwice];
}

impl std::fmt::Display for RollInvariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RollInvariant::Budget => "rollout took a copy down over its budget",
            RollInvariant::UnaskedVersion => "a machine ran a version nobody asked for",
            RollInvariant::NotEnded => "rollout did not end within its deadline after the faults stopped",
            RollInvariant::RestartedTwice => "a machine restarted a unit more than once for one rollout step",
        })
    }
}

/// A broken rollout invariant: which rollout, unit and machine, when, and the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollViolation {
    pub invariant: RollInvariant,
    pub rollout: Option<String>,
    pub unit: String,
    /// Other units the evidence names (the slots already unavailable), for the report's timelines.
    pub related: Vec<String>,
    pub machine: Option<String>,
    pub at_ms: u64,
    /// Where the evidence begins, for the report's timelines (at or before `at_ms`).
    pub since_ms: u64,
    pub detail: String,
}

impl std::fmt::Display for RollViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.invariant)?;
        if let Some(r) = &self.rollout {
            write!(f, "rollout {r}, ")?;
        }
        write!(f, "{}", self.unit)?;
        if let Some(m) = &self.machine {
            write!(f, " on {m}")?;
        }
        write!(f, " at {}: {}", secs(self.at_ms), self.detail)
    }
}

/// What the check found: violations, and notes (what the invariants let pass, and why).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    pub violations: Vec<RollViolation>,
    pub notes: Vec<String>,
}

/// Whether `round` shows the change driver's units launched on a cluster of `machines`: the global unit serving on
/// every machine, and each instance serving somewhere.
pub fn launched(round: &RollRound, machines: usize) -> bool {
    let global =
        round.machines.values().filter(|seen| seen.as_ref().and_then(|u| u.get(GLOBAL)).is_some_and(Copy::serving));
    global.count() == machines && Target::Set.units().iter().all(|u| !serving_on(round, u).is_empty())
}

/// Checks every rollout invariant. `faults` in time order; `faults_end_ms` is when the last fault's convergence
/// wait ended (the driver made no change after it).
pub fn check(
    rounds: &[RollRound],
    rollouts: &[RolloutRecord],
    asked: &[Asked],
    faults: &[FaultWindow],
    faults_end_ms: u64,
    limits: RollLimits,
) -> Checked {
    let mut out = Checked::default();
    budget(rounds, rollouts, faults, limits, &mut out);
    versions(rounds, asked, &mut out);
    endings(rollouts, faults_end_ms, limits, &mut out);
    restarts(rounds, rollouts, faults, limits, &mut out);
    out.violations.sort_by_key(|v| (v.at_ms, v.invariant, v.unit.clone()));
    out
}

/// The fault that excuses what happens to `machine`'s units at `t`: a machine kill or a partition longer than the
/// TTL that touched it, from its start until `excuse_grace_ms` after it converged (or until the next fault when it
/// never did).
pub fn excusing_fault<'a>(
    faults: &'a [FaultWindow],
    machine: &str,
    t: u64,
    limits: RollLimits,
) -> Option<&'a FaultWindow> {
    faults.iter().enumerate().find_map(|(i, f)| {
        let end = match f.converged_ms {
            Some(c) => c.max(f.undone_ms) + limits.excuse_grace_ms,
            None => faults.get(i + 1).map_or(u64::MAX, |n| n.start_ms),
        };
        (EXCUSING_KINDS.contains(&f.kind) && f.touches.contains(machine) && f.start_ms <= t && t <= end).then_some(f)
    })
}

/// The rollout of `unit` live at `t`: the newest created at or before `t`, until `grace` after it was seen final.
fn live_rollout<'a>(rollouts: &'a [RolloutRecord], unit: &str, t: u64, grace: u64) -> Option<&'a RolloutRecord> {
    let r = rollouts.iter().filter(|r| r.covers(unit) && r.created_ms <= t).max_by_key(|r| r.created_ms)?;
    let until = r.final_ms().map_or(u64::MAX, |f| f + grace);
    (t <= until).then_some(r)
}

/// The rollouts of `unit` live at some moment of `(from, to]`, oldest first: any of them may have made a change
/// the sampler saw at `to` and had not seen at `from`.
fn live_between<'a>(
    rollouts: &'a [RolloutRecord],
    unit: &str,
    from: u64,
    to: u64,
    grace: u64,
) -> Vec<&'a RolloutRecord> {
    let mut live: Vec<&RolloutRecord> = rollouts
        .iter()
        .filter(|r| r.covers(unit) && r.created_ms <= to)
        .filter(|r| r.final_ms().is_none_or(|f| f + grace > from))
        .collect();
    live.sort_by_key(|r| r.created_ms);
    live
}

/// What a budget counts: a machine (for the global unit) or an instance.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Machine(String),
    Instance(String),
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Machine(m) => write!(f, "{GLOBAL} on {m}"),
            Slot::Instance(u) => f.write_str(u),
        }
    }
}

/// Why a slot went down.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cause {
    /// The rollout with this ID stopped or restarted its copy.
    Rollout(String),
    /// Its machine could not be read, or a fault excuses what happened to it.
    Fault,
    /// Its copy still runs (same invocation) but fails its check.
    Health,
    /// Stopped or restarted while no rollout of it was live, no fault excusing it; or unavailable from the start.
    Other,
}

impl Cause {
    fn rank(&self) -> u8 {
        match self {
            Cause::Rollout(_) => 3,
            Cause::Other => 2,
            Cause::Health => 1,
            Cause::Fault => 0,
        }
    }
}

fn copy<'a>(round: &'a RollRound, machine: &str, unit: &str) -> Option<&'a Copy> {
    round.machines.get(machine)?.as_ref()?.get(unit)
}

fn readable(round: &RollRound, machine: &str) -> bool {
    round.machines.get(machine).is_some_and(Option::is_some)
}

/// Machines where `unit` serves in `round`.
fn serving_on<'a>(round: &'a RollRound, unit: &str) -> Vec<&'a String> {
    round
        .machines
        .iter()
        .filter(|(_, seen)| seen.as_ref().and_then(|u| u.get(unit)).is_some_and(Copy::serving))
        .map(|(m, _)| m)
        .collect()
}

/// Whether `slot` has an active copy in `round` whose version and check the sampler could not read (its process
/// went away between the reads): it may have been serving, so it does not count as known to be unavailable.
fn unreadable_copy(round: &RollRound, slot: &Slot) -> bool {
    let unread = |c: &Copy| c.active() && c.health == Health::Unknown;
    match slot {
        Slot::Machine(m) => copy(round, m, GLOBAL).is_some_and(unread),
        Slot::Instance(u) => round.machines.values().flatten().filter_map(|units| units.get(u)).any(unread),
    }
}

fn available(round: &RollRound, slot: &Slot) -> bool {
    match slot {
        Slot::Machine(m) => copy(round, m, GLOBAL).is_some_and(Copy::serving),
        Slot::Instance(u) => !serving_on(round, u).is_empty(),
    }
}

/// Why `unit`'s copy that served on `machine` in `prev` does not serve (or is another process) in `cur`.
fn cause_on(
    prev: &RollRound,
    cur: &RollRound,
    machine: &str,
    unit: &str,
    rollouts: &[RolloutRecord],
    faults: &[FaultWindow],
    limits: RollLimits,
) -> Cause {
    if !readable(cur, machine) {
        return Cause::Fault;
    }
    let before = copy(prev, machine, unit);
    let now = copy(cur, machine, unit);
    if let (Some(b), Some(n)) = (before, now)
        && b.invocation == n.invocation
        && n.active()
    {
        return Cause::Health;
    }
    if excusing_fault(faults, machine, cur.t_ms, limits).is_some() {
        return Cause::Fault;
    }
    match live_rollout(rollouts, unit, cur.t_ms, limits.end_grace_ms) {
        Some(r) => Cause::Rollout(r.id.clone()),
        None => Cause::Other,
    }
}

/// A slot's down between `prev` and `cur` (available before; unavailable now, or available now by another
/// process): its cause and the machine it happened on.
fn down(
    prev: &RollRound,
    cur: &RollRound,
    slot: &Slot,
    rollouts: &[RolloutRecord],
    faults: &[FaultWindow],
    limits: RollLimits,
) -> Option<(Cause, String)> {
    if !available(prev, slot) {
        return None;
    }
    let (unit, machines): (&str, Vec<String>) = match slot {
        Slot::Machine(m) => (GLOBAL, vec![m.clone()]),
        Slot::Instance(u) => (u.as_str(), serving_on(prev, u).into_iter().cloned().collect()),
    };
    // A copy whose check flaps was failing it, by the host's clock, somewhere between the two looks: the sampler
    // saw it serve, but fleet may have seen it fail (and taken it first, as a machine already down) in between.
    if machines.iter().any(|m| copy(prev, m, unit).is_some_and(|c| c.flaps)) && flap_window_between(prev, cur) {
        return None;
    }
    if available(cur, slot) {
        // Still served: a down only when no serving copy went on as the same process (a quick restart).
        let same = |m: &String| match (copy(prev, m, unit), copy(cur, m, unit)) {
            (Some(b), Some(n)) => n.serving() && b.invocation == n.invocation,
            _ => false,
        };
        let served_through = match slot {
            Slot::Machine(m) => same(m),
            Slot::Instance(u) => serving_on(cur, u).iter().any(|m| same(m)),
        };
        let restarted = machines.iter().find(|m| {
            copy(cur, m, unit).is_some_and(|n| copy(prev, m, unit).is_some_and(|b| b.invocation != n.invocation))
        });
        if served_through {
            return None;
        }
        let m = restarted?;
        return Some((cause_on(prev, cur, m, unit, rollouts, faults, limits), m.clone()));
    }
    machines
        .iter()
        .map(|m| (cause_on(prev, cur, m, unit, rollouts, faults, limits), m.clone()))
        .max_by_key(|(c, _)| c.rank())
}

/// Whether a flap window (a second `s` with `s % FLAP_PERIOD_SECS < FLAP_DOWN_SECS`, the host's clock) lies between
/// two rounds, both ends included. Unknown clocks (0) say no.
fn flap_window_between(prev: &RollRound, cur: &RollRound) -> bool {
    use super::changes::{FLAP_DOWN_SECS, FLAP_PERIOD_SECS};
    if prev.epoch_ms == 0 || cur.epoch_ms < prev.epoch_ms {
        return false;
    }
    (prev.epoch_ms / 1000..=cur.epoch_ms / 1000).any(|s| s % FLAP_PERIOD_SECS < FLAP_DOWN_SECS)
}

/// How long an unavailable slot has been so, and why.
#[derive(Debug, Clone)]
struct Streak {
    since: u64,
    cause: Cause,
}

fn budget(
    rounds: &[RollRound],
    rollouts: &[RolloutRecord],
    faults: &[FaultWindow],
    limits: RollLimits,
    out: &mut Checked,
) {
    let machines: BTreeSet<String> = rounds.iter().flat_map(|r| r.machines.keys().cloned()).collect();
    let instances: BTreeSet<String> = rounds
        .iter()
        .flat_map(|r| r.machines.values().flatten().flat_map(|u| u.keys()))
        .filter(|u| Target::of_unit(u) == Some(Target::Set))
        .chain(rollouts.iter().filter(|r| r.target == Target::Set).flat_map(|r| r.units.iter()))
        .cloned()
        .collect();
    let slots: Vec<Slot> =
        machines.into_iter().map(Slot::Machine).chain(instances.into_iter().map(Slot::Instance)).collect();
    let Some(first) = rounds.first() else { return };
    let mut streaks: BTreeMap<&Slot, Streak> = slots
        .iter()
        .filter(|s| !available(first, s))
        .map(|s| (s, Streak { since: first.t_ms, cause: Cause::Other }))
        .collect();
    let mut unknowable = Vec::new();
    let mut unexplained = Vec::new();
    // Violations that count, besides the rollout's own downs, only machines it has no step for.
    let mut outside_only = 0usize;
    for pair in rounds.windows(2) {
        let (prev, cur) = (&pair[0], &pair[1]);
        let t = cur.t_ms;
        // This round's downs, then the budget of each rollout that took one.
        let downs: Vec<(&Slot, Cause, String)> =
            slots.iter().filter_map(|s| down(prev, cur, s, rollouts, faults, limits).map(|(c, m)| (s, c, m))).collect();
        let mut taken: BTreeMap<String, Vec<&Slot>> = BTreeMap::new();
        for (slot, cause, machine) in &downs {
            let id = match cause {
                Cause::Rollout(id) => id,
                Cause::Other => {
                    unexplained.push(format!("{slot} at {} (machine {machine})", secs(t)));
                    continue;
                }
                Cause::Fault | Cause::Health => continue,
            };
            let Some(r) = rollouts.iter().find(|r| &r.id == id) else { continue };
            let covered = |s: &Slot| match s {
                Slot::Machine(_) => r.covers(GLOBAL),
                Slot::Instance(u) => r.covers(u),
            };
            // Already unavailable: what was so in both rounds (a slot that came back by this round may have come
            // back before this down, as the rounds do not order what happened between them).
            let mut known = Vec::new();
            let mut strict = Vec::new();
            let mut inside = 0usize;
            let throughout = |s: &Slot| !available(prev, s) && !available(cur, s);
            let mut related = Vec::new();
            for s in slots.iter().filter(|s| *s != *slot && covered(s) && throughout(s) && !r.waived(s, t)) {
                let Some(streak) = streaks.get(s) else { continue };
                let notice =
                    if streak.cause == Cause::Fault { limits.notice_fault_ms } else { limits.notice_health_ms };
                let own = streak.cause == Cause::Rollout(id.clone());
                // A machine the rollout has no step for (fleet took it up without it: the machine was gone from
                // the cluster then) still counts here, as the invariant says; the report says which ones.
                let outside = match s {
                    Slot::Machine(m) => !r.machines.is_empty() && !r.machines.contains(m),
                    Slot::Instance(_) => false,
                };
                let what = format!(
                    "{s} since {}{}",
                    secs(streak.since),
                    if outside { " (not one of the rollout's machines)" } else { "" }
                );
                if own || t.saturating_sub(streak.since) >= notice {
                    inside += usize::from(!outside);
                    known.push(what.clone());
                    if let Slot::Instance(u) = s {
                        related.push(u.clone());
                    }
                }
                strict.push(what);
            }
            // Other slots this rollout took down between the same two rounds and that are still down: they are down
            // together now. A copy that went down and came back in between (a quick restart) overlapped with
            // nothing we can show.
            let transient = available(cur, slot);
            let same_round = if transient { 0 } else { taken.get(id).map_or(0, Vec::len) };
            let already = known.len() + same_round;
            if already >= r.budget as usize {
                if inside + same_round < r.budget as usize {
                    outside_only += 1;
                }
                let mut all = known.clone();
                if !transient {
                    all.extend(
                        taken.get(id).into_iter().flatten().map(|s| format!("{s} taken down in the same round")),
                    );
                }
                out.violations.push(RollViolation {
                    invariant: RollInvariant::Budget,
                    rollout: Some(id.clone()),
                    unit: match slot {
                        Slot::Machine(_) => GLOBAL.to_string(),
                        Slot::Instance(u) => u.clone(),
                    },
                    related,
                    machine: Some(machine.clone()),
                    at_ms: t,
                    since_ms: t,
                    detail: format!(
                        "{} ({}, max-unavailable {}) took it down while {already} already had no active healthy copy: {}",
                        r.what,
                        r.id,
                        r.budget,
                        all.join("; ")
                    ),
                });
            } else if strict.len() + same_round >= r.budget as usize {
                unknowable.push(format!(
                    "rollout {id} took {slot} down at {} with {} unavailable, counting slots fleet could not know of yet: {}",
                    secs(t),
                    strict.len() + same_round,
                    strict.join("; ")
                ));
            }
            if !transient {
                taken.entry(id.clone()).or_default().push(slot);
            }
        }
        // A round that read no machine at all is the host stalled (seen: 5 minutes of a host out of memory), not a
        // fault of the cluster's: fleet stalled with it, and learns where each copy stands only after it. So a copy
        // still unavailable after the stall counts from the first round that reads it again, with its notice.
        // Likewise a copy whose version could not be read may have served then, as fleet may have seen it.
        let stalled = !cur.machines.is_empty() && cur.machines.values().all(Option::is_none);
        for slot in &slots {
            if available(cur, slot) || stalled || unreadable_copy(cur, slot) {
                streaks.remove(slot);
            } else if !streaks.contains_key(slot) {
                let cause = downs.iter().find(|(s, _, _)| *s == slot).map_or(Cause::Other, |(_, c, _)| c.clone());
                streaks.insert(slot, Streak { since: t, cause });
            }
        }
    }
    if !unknowable.is_empty() {
        out.notes.push(format!(
            "budget: {} down(s) over the budget only by counting copies unavailable for less than the notice \
             ({} ms; {} ms for a machine that cannot be read), which fleet could not yet know of: {}",
            unknowable.len(),
            limits.notice_health_ms,
            limits.notice_fault_ms,
            unknowable.join(" | ")
        ));
    }
    if outside_only > 0 {
        out.notes.push(format!(
            "budget: {outside_only} of the budget violations are over the budget only by counting machines the \
             rollout has no step for (fleet took it up without them: they were gone from the cluster, their presence \
             lease expired, when it began); see docs/faults.md, \"What the change driver found\""
        ));
    }
    if !unexplained.is_empty() {
        out.notes.push(format!(
            "budget: {} copy down(s) with no rollout live and no fault excusing the machine (not a budget matter; \
             see the restarts invariant): {}",
            unexplained.len(),
            unexplained.join("; ")
        ));
    }
}

fn versions(rounds: &[RollRound], asked: &[Asked], out: &mut Checked) {
    // (machine, unit, version) → (first, last) round seen.
    let mut episodes: BTreeMap<(String, String, String), (u64, u64)> = BTreeMap::new();
    for round in rounds {
        for (machine, seen) in &round.machines {
            for (unit, c) in seen.iter().flatten() {
                let (Some(target), Some(version)) = (Target::of_unit(unit), &c.version) else { continue };
                if !c.active() {
                    continue;
                }
                let ok = asked.iter().any(|a| a.target == target && &a.version == version && a.t_ms <= round.t_ms);
                if !ok {
                    let e = episodes.entry((machine.clone(), unit.clone(), version.clone())).or_insert((round.t_ms, 0));
                    e.1 = round.t_ms;
                }
            }
        }
    }
    for ((machine, unit, version), (from, to)) in episodes {
        let target = Target::of_unit(&unit).expect("only units of a target are kept");
        let mut known: Vec<&str> =
            asked.iter().filter(|a| a.target == target && a.t_ms <= to).map(|a| a.version.as_str()).collect();
        known.dedup();
        out.violations.push(RollViolation {
            invariant: RollInvariant::UnaskedVersion,
            rollout: None,
            unit,
            related: Vec::new(),
            machine: Some(machine),
            at_ms: from,
            since_ms: from,
            detail: format!(
                "ran version {version} from {} to {}; asked for by then: {}",
                secs(from),
                secs(to),
                known.join(", ")
            ),
        });
    }
}

fn endings(rollouts: &[RolloutRecord], faults_end_ms: u64, limits: RollLimits, out: &mut Checked) {
    for r in rollouts {
        let deadline = r.deadline_ms.unwrap_or(limits.default_deadline_ms);
        let until = faults_end_ms + deadline;
        let which = match r.deadline_ms {
            Some(d) => {
                format!("its progress deadline of {} s, after the faults stopped at {}", d / 1000, secs(faults_end_ms))
            }
            None => format!(
                "the {} minutes allowed without a progress deadline, after the faults stopped at {}",
                limits.default_deadline_ms / 60_000,
                secs(faults_end_ms)
            ),
        };
        let unit = r.units.first().cloned().unwrap_or_default();
        let violation = |at_ms: u64, detail: String| RollViolation {
            invariant: RollInvariant::NotEnded,
            rollout: Some(r.id.clone()),
            unit: unit.clone(),
            related: Vec::new(),
            machine: None,
            at_ms,
            since_ms: at_ms,
            detail: format!("{} ({}): {detail}", r.what, r.id),
        };
        let Some(last) = r.last() else {
            out.violations.push(violation(r.created_ms, "fleet never showed it".into()));
            continue;
        };
        match r.ended_ms() {
            None => out.violations.push(violation(
                last.t_ms,
                format!(
                    "not ended by {} ({which}): last seen {}{}{} at {} (so since {})",
                    secs(until),
                    last.state,
                    if last.reason.is_empty() { String::new() } else { format!(" ({})", last.reason) },
                    if last.settled { "" } else { " with an action not yet taken up" },
                    secs(r.last_seen_ms.max(last.t_ms)),
                    secs(last.t_ms)
                ),
            )),
            Some(ended) if ended > until => out.violations.push(violation(
                ended,
                format!("ended {} only at {}, after {} ({which})", last.state, secs(ended), secs(until)),
            )),
            Some(ended) if last.state != "done" && last.reason.trim().is_empty() => {
                out.violations.push(violation(ended, format!("ended {} without a reason", last.state)));
            }
            Some(_) => {}
        }
    }
}

fn restarts(
    rounds: &[RollRound],
    rollouts: &[RolloutRecord],
    faults: &[FaultWindow],
    limits: RollLimits,
    out: &mut Checked,
) {
    // (machine, unit) → (last invocation, since when it has been absent from the machine, if it is).
    let mut last: BTreeMap<(String, String), (String, Option<u64>)> = BTreeMap::new();
    // (rollout, machine, unit) → restart times.
    let mut per_step: BTreeMap<(String, String, String), Vec<u64>> = BTreeMap::new();
    // Restarts seen in a round whose window (since the machine was last read) spans more than one rollout of the
    // unit (one ending, the next beginning): (candidates, machine, unit, when), given out after the others.
    let mut ambiguous: Vec<(Vec<&RolloutRecord>, String, String, u64)> = Vec::new();
    // Machine → when it was last read.
    let mut read_at: BTreeMap<String, u64> = BTreeMap::new();
    let mut excused = 0usize;
    for round in rounds {
        let t = round.t_ms;
        for (machine, seen) in &round.machines {
            let since = read_at.get(machine).copied().unwrap_or(t);
            if seen.is_some() {
                read_at.insert(machine.clone(), t);
            }
            let Some(units) = seen else {
                // It rebooted (or could not be read): the next start there is a start, not a restart.
                last.retain(|(m, _), _| m != machine);
                continue;
            };
            for ((m, u), (_, absent)) in last.iter_mut() {
                if m == machine && !units.contains_key(u) && absent.is_none() {
                    *absent = Some(t);
                }
            }
            for (unit, c) in units {
                if Target::of_unit(unit).is_none() || c.invocation.is_empty() {
                    continue;
                }
                let key = (machine.clone(), unit.clone());
                let before = last.insert(key, (c.invocation.clone(), None));
                let restarted = match before {
                    // Gone from the machine long enough to have left it: a start there afresh.
                    Some((_, Some(since))) if t.saturating_sub(since) >= limits.forget_absent_ms => false,
                    Some((inv, _)) => inv != c.invocation,
                    None => false,
                };
                if !restarted {
                    continue;
                }
                if excusing_fault(faults, machine, t, limits).is_some() {
                    excused += 1;
                    continue;
                }
                let candidates = live_between(rollouts, unit, since, t, limits.end_grace_ms);
                if candidates.len() > 1 {
                    ambiguous.push((candidates, machine.clone(), unit.clone(), t));
                    continue;
                }
                match live_rollout(rollouts, unit, t, limits.end_grace_ms) {
                    Some(r) => per_step.entry((r.id.clone(), machine.clone(), unit.clone())).or_default().push(t),
                    None => out.violations.push(RollViolation {
                        invariant: RollInvariant::RestartedTwice,
                        rollout: None,
                        unit: unit.clone(),
                        related: Vec::new(),
                        machine: Some(machine.clone()),
                        at_ms: t,
                        since_ms: t,
                        detail: "restarted while no rollout of it was live and no machine kill or long partition \
                                 excused the machine (0 steps allow 0 restarts)"
                            .into(),
                    }),
                }
            }
        }
    }
    let allowed_for = |r: &RolloutRecord, unit: &str, machine: &str| {
        1 + usize::from(r.undo.contains(&(unit.to_string(), machine.to_string()))) + r.resumes as usize
    };
    // An ambiguous restart goes to the oldest candidate whose step has room for it (one ending may have undone the
    // machine just before the next began), else to the newest, where it counts as one too many.
    for (candidates, machine, unit, t) in ambiguous {
        let key = |r: &RolloutRecord| (r.id.clone(), machine.clone(), unit.clone());
        let room = candidates
            .iter()
            .find(|r| per_step.get(&key(r)).map_or(0, Vec::len) < allowed_for(r, &unit, &machine))
            .or(candidates.last())
            .expect("at least two candidates");
        let times = per_step.entry(key(room)).or_default();
        times.push(t);
        times.sort_unstable();
    }
    for ((id, machine, unit), times) in per_step {
        let Some(r) = rollouts.iter().find(|r| r.id == id) else { continue };
        let undone = r.undo.contains(&(unit.clone(), machine.clone()));
        let allowed = allowed_for(r, &unit, &machine);
        if times.len() > allowed {
            let at: Vec<String> = times.iter().map(|t| secs(*t)).collect();
            out.violations.push(RollViolation {
                invariant: RollInvariant::RestartedTwice,
                rollout: Some(id.clone()),
                unit,
                related: Vec::new(),
                machine: Some(machine),
                at_ms: times[allowed],
                since_ms: times[0],
                detail: format!(
                    "{} ({id}) restarted it {} times (at {}); its steps allow {allowed} (1 for the step{}{})",
                    r.what,
                    times.len(),
                    at.join(", "),
                    if undone { ", 1 for its undo" } else { "" },
                    if r.resumes > 0 { format!(", {} for resumes", r.resumes) } else { String::new() }
                ),
            });
        }
    }
    if excused > 0 {
        out.notes.push(format!(
            "restarts: {excused} restart(s) excused by a machine kill or a partition longer than the TTL on their machine"
        ));
    }
}

#[cfg(test)]
mod tests;

//! Rollouts: changing a unit machine by machine (issue 12). Pure: the stored shapes of a rollout and the decisions
//! over them, shared by the registry (which stores them), the engine leader (which drives them with [`advance`]),
//! the agents (which ask [`pinned_hash`] and [`restart_token`] what to run) and the API (which shows them).
//!
//! A rollout is three records, each with one writer:
//! * the **spec** (API, written once): which units, from which version to which, and how fast;
//! * the **control** (API): `run`, `pause` or `abort`, what a user asked for;
//! * the **progress** (engine leader): one step per (unit, machine) in a stable order, each `pending` →
//!   `updating` → `healthy` (the new version active, held for `minHealthyMs`) → `done`, or `failed`/`skipped`.
//!
//! The engine releases at most `maxUnavailable` steps at a time. An agent runs the old version of a unit (the
//! spec's `from`) on its machine while its step is still `pending` (a *replace* rollout), and restarts the unit
//! once when its step is `updating` (a *restart* rollout); everything else follows the unit's stored version as
//! usual, so a machine that joins during a rollout gets the new version at once. A unit is in at most one rollout
//! that is not final (the API refuses a second), and a replace that ends otherwise than `done` (rolled back or
//! aborted) returns the unit to its old version everywhere, so a unit always ends as one version. Times are the engine's wall clock
//! in Unix milliseconds, so a new leader continues where the old one stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// What a rollout changes on each machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutKind {
    /// A new version of the unit replaces the old one, machine by machine (old stop hooks before new start hooks).
    Replace,
    /// The same version is restarted, machine by machine.
    Restart,
    /// Units move between machines towards an even spread (issue 14 item 4, docs/rebalance.md): the spec names
    /// no units; the engine leader plans the moves when it first takes the rollout up (its first progress), one
    /// step per move (`machine` the destination, `fromMachine` the source).
    Rebalance,
}

/// What a failed step does to the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Stop releasing machines; the failed machine keeps the new version.
    #[default]
    Pause,
    /// Return every unit to its old version (replace rollouts; a restart rollout pauses).
    Rollback,
}

/// One unit of a rollout: the version it leaves and the one it reaches (equal for a restart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutUnit {
    pub name: String,
    pub from: String,
    pub to: String,
}

/// `P/rollouts/<id>/spec`: what to roll out and how fast. Written once by the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutSpec {
    pub id: String,
    pub kind: RolloutKind,
    pub units: Vec<RolloutUnit>,
    /// Machines (steps) being changed at once, at least 1.
    #[serde(rename = "maxUnavailable")]
    pub max_unavailable: u32,
    /// How long the new version must stay active before its step is done.
    #[serde(rename = "minHealthyMs")]
    pub min_healthy_ms: u64,
    /// How long a step may take from its release until it is done before it fails.
    #[serde(rename = "healthTimeoutMs")]
    pub health_timeout_ms: u64,
    #[serde(rename = "onFailure", default)]
    pub on_failure: OnFailure,
    /// When the API stored it (Unix ms).
    #[serde(rename = "createdMs", default)]
    pub created_ms: u64,
}

impl RolloutSpec {
    pub fn unit(&self, name: &str) -> Option<&RolloutUnit> {
        self.units.iter().find(|u| u.name == name)
    }
}

/// What a user asked of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    #[default]
    Run,
    Pause,
    Abort,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Run => "run",
            Action::Pause => "pause",
            Action::Abort => "abort",
        }
    }
}

/// `P/rollouts/<id>/control`: the user's action, and how many times they resumed (each resume releases the
/// failed steps again once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Control {
    pub action: Action,
    #[serde(default)]
    pub resumes: u32,
}

/// Where a rollout as a whole stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutState {
    #[default]
    Running,
    /// No machine is released; `reason` says why (a failed step, or a user's pause).
    Paused,
    /// Every step is done or skipped.
    Done,
    /// A user aborted it: a replace returned every unit to its old version (as a rollback does); a restart
    /// restarts no further machine.
    Aborted,
    /// A step failed with `onFailure=rollback`: every unit is back on its old version.
    RolledBack,
}

impl RolloutState {
    /// Whether the rollout still decides what machines run (its pending machines keep the old version).
    pub fn holds_machines(self) -> bool {
        matches!(self, RolloutState::Running | RolloutState::Paused)
    }

    /// Whether nothing will change it any more.
    pub fn is_final(self) -> bool {
        matches!(self, RolloutState::Done | RolloutState::Aborted | RolloutState::RolledBack)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Running => "running",
            RolloutState::Paused => "paused",
            RolloutState::Done => "done",
            RolloutState::Aborted => "aborted",
            RolloutState::RolledBack => "rolled_back",
        }
    }
}

impl fmt::Display for RolloutState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one (unit, machine) step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Not released: the machine runs the old version.
    Pending,
    /// Released: the machine is changing to the new version (replace) or restarting (restart).
    Updating,
    /// The new version is active; it must stay so for `minHealthyMs`.
    Healthy,
    Done,
    Failed,
    /// The machine left the cluster (or stopped holding the unit) before its step was done.
    Skipped,
}

impl Phase {
    fn in_flight(self) -> bool {
        matches!(self, Phase::Updating | Phase::Healthy)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Updating => "updating",
            Phase::Healthy => "healthy",
            Phase::Done => "done",
            Phase::Failed => "failed",
            Phase::Skipped => "skipped",
        }
    }
}

/// One step of the progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub unit: String,
    pub machine: String,
    pub phase: Phase,
    /// When the step was released (Unix ms; 0 while pending).
    #[serde(rename = "releasedMs", default)]
    pub released_ms: u64,
    /// Since when the new version has been seen active (Unix ms; 0 before).
    #[serde(rename = "healthySinceMs", default)]
    pub healthy_since_ms: u64,
    /// Why it failed or was skipped.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// systemd's restart counter (`NRestarts`) of the unit on the machine when the step became healthy, if the
    /// machine publishes it: a step whose counter moves before `minHealthyMs` is over fails.
    #[serde(rename = "restartsAtHealthy", default, skip_serializing_if = "Option::is_none")]
    pub restarts_at_healthy: Option<u32>,
    /// When a healthy step first saw its unit `failed` or `inactive` (0: not now); see [`DOWN_SETTLE_MS`].
    #[serde(rename = "downSinceMs", default, skip_serializing_if = "is_zero")]
    pub down_since_ms: u64,
    /// A rebalance step: the machine the unit moves away from (`machine` is where it goes). Empty otherwise.
    #[serde(rename = "fromMachine", default, skip_serializing_if = "String::is_empty")]
    pub from_machine: String,
}

/// One move of a rebalance: `unit` leaves machine `from` for machine `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub unit: String,
    pub from: String,
    pub to: String,
}

impl Move {
    /// The pending step that carries this move.
    pub fn step(&self) -> Step {
        Step {
            unit: self.unit.clone(),
            machine: self.to.clone(),
            phase: Phase::Pending,
            released_ms: 0,
            healthy_since_ms: 0,
            detail: String::new(),
            restarts_at_healthy: None,
            down_since_ms: 0,
            from_machine: self.from.clone(),
        }
    }
}

/// The moves a rebalance progress releases between `before` and `after` (steps that went from pending to
/// updating): the engine writes each unit's new target in the same transaction as `after`.
pub fn released_moves(before: Option<&RolloutProgress>, after: &RolloutProgress) -> Vec<Move> {
    after
        .steps
        .iter()
        .filter(|s| s.phase == Phase::Updating && !s.from_machine.is_empty())
        .filter(|s| before.is_none_or(|b| b.step(&s.unit, &s.machine).is_none_or(|old| old.phase == Phase::Pending)))
        .map(|s| Move { unit: s.unit.clone(), from: s.from_machine.clone(), to: s.machine.clone() })
        .collect()
}

/// `P/rollouts/<id>/progress`: written by the engine leader only.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RolloutProgress {
    pub state: RolloutState,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default)]
    pub steps: Vec<Step>,
    /// The control's `resumes` this progress has honoured.
    #[serde(default)]
    pub resumes: u32,
}

impl RolloutProgress {
    pub fn step(&self, unit: &str, machine: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.unit == unit && s.machine == machine)
    }
}

/// A stored rollout: its spec, the user's control and the engine's progress (absent until the engine first saw it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    pub spec: RolloutSpec,
    pub control: Control,
    pub progress: Option<RolloutProgress>,
}

impl Rollout {
    /// The rollout's state (`running` until the engine wrote progress).
    pub fn state(&self) -> RolloutState {
        self.progress.as_ref().map_or(RolloutState::Running, |p| p.state)
    }
}

/// What the engine sees of one unit on one machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The machine is present in the cluster.
    pub present: bool,
    /// Hash of the unit file the machine publishes (its state record), if any.
    pub hash: Option<String>,
    /// Hash of the version the machine last started (its launched marker), if any.
    pub running: Option<String>,
    /// systemd's ActiveState and SubState as published.
    pub active_state: String,
    pub sub_state: String,
    /// systemd's restart counter (`NRestarts`) as published (services that are active or activating, from agents
    /// that publish it).
    pub restarts: Option<u32>,
    /// The rollout the machine last restarted the unit for (its restarted marker), if any.
    pub restarted_for: Option<String>,
}

/// What [`advance`] needs of the cluster: observations per (unit, machine), and which machines hold each unit now
/// (for the first progress).
pub trait Cluster {
    fn observe(&self, unit: &str, machine: &str) -> Observed;
    /// Machines that should change when the rollout starts: for a global unit every present machine that holds it,
    /// for another unit its scheduled machine.
    fn holders(&self, unit: &str) -> Vec<String>;
    /// Whether the unit still exists (a destroyed unit ends its part of the rollout).
    fn exists(&self, unit: &str) -> bool;
}

/// The outcome of one [`advance`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advanced {
    pub progress: RolloutProgress,
    /// The units to return to their old version (a rollback): unit → `from` hash.
    pub roll_back: Vec<RolloutUnit>,
    /// When to look again even if nothing changes in the cluster (Unix ms): the next `minHealthyMs` or timeout.
    pub wake_at_ms: Option<u64>,
}

/// The engine's decision for one rollout at `now_ms`: the progress it should store (equal to the stored one when
/// nothing changes), any rollback, and when to look again.
pub fn advance(rollout: &Rollout, cluster: &impl Cluster, now_ms: u64) -> Advanced {
    let spec = &rollout.spec;
    let mut progress = rollout.progress.clone().unwrap_or_else(|| first_progress(spec, cluster));
    let mut roll_back = Vec::new();
    if progress.state.is_final() {
        return Advanced { progress, roll_back, wake_at_ms: None };
    }
    if rollout.control.action == Action::Abort {
        progress.state = RolloutState::Aborted;
        if spec.kind == RolloutKind::Replace {
            // Machines that were not reached keep running the old version; the others return to it, so the unit
            // is one version everywhere again.
            progress.reason = "aborted by request: every machine returns to the old version".into();
            roll_back = spec.units.clone();
        } else {
            progress.reason = "aborted by request".into();
        }
        return Advanced { progress, roll_back, wake_at_ms: None };
    }
    if rollout.control.resumes > progress.resumes {
        // A resume: the failed steps are released again.
        progress.resumes = rollout.control.resumes;
        for step in progress.steps.iter_mut().filter(|s| s.phase == Phase::Failed) {
            step.phase = Phase::Pending;
            step.detail.clear();
        }
    }
    if spec.kind != RolloutKind::Rebalance && !spec.units.iter().any(|u| cluster.exists(&u.name)) {
        progress.state = RolloutState::Aborted;
        progress.reason = "its units were destroyed".into();
        return Advanced { progress, roll_back, wake_at_ms: None };
    }
    let mut wake: Option<u64> = None;
    let mut soonest = |t: u64| wake = Some(wake.map_or(t, |w: u64| w.min(t)));
    for step in progress.steps.iter_mut().filter(|s| s.phase.in_flight()) {
        let seen = cluster.observe(&step.unit, &step.machine);
        if !cluster.exists(&step.unit) {
            step.phase = Phase::Skipped;
            step.detail = "the unit was destroyed".into();
            continue;
        }
        if !seen.present {
            step.phase = Phase::Skipped;
            step.detail = "the machine left the cluster".into();
            continue;
        }
        let arrived = match spec.kind {
            RolloutKind::Replace => {
                let unit = spec.unit(&step.unit).expect("replace steps are made from the spec's units");
                seen.hash.as_deref() == Some(&unit.to) && seen.running.as_deref() == Some(&unit.to)
            }
            RolloutKind::Restart => seen.restarted_for.as_deref() == Some(&spec.id),
            // The destination started it (its launched marker) and runs the version it publishes.
            RolloutKind::Rebalance => seen.running.is_some() && seen.running == seen.hash,
        };
        let active = seen.active_state == "active";
        let down = matches!(seen.active_state.as_str(), "failed" | "inactive");
        if !down {
            step.down_since_ms = 0;
        }
        let mut restarting = false;
        if step.phase == Phase::Updating && arrived && active {
            step.phase = Phase::Healthy;
            step.healthy_since_ms = now_ms;
            step.restarts_at_healthy = seen.restarts;
        } else if let Some(moved) = restart_counter_moved(step, &seen) {
            step.phase = Phase::Failed;
            step.detail = format!(
                "systemd restarted it {} s after it became healthy: the restart counter moved from {} to {} \
                 (activeState={} subState={})",
                now_ms.saturating_sub(step.healthy_since_ms) / 1000,
                moved.0,
                moved.1,
                seen.active_state,
                seen.sub_state
            );
            continue;
        } else if step.phase == Phase::Healthy && step.restarts_at_healthy.is_some() && settling(&seen.active_state) {
            // Between states, e.g. the process exited and systemd runs its stop hooks, then restarts it
            // (`Restart=`, which moves the restart counter): the step fails once the unit settles, naming the
            // counter or the state it settled in. Not done meanwhile; the health deadline still applies.
            restarting = true;
        } else if step.phase == Phase::Healthy
            && step.restarts_at_healthy.is_some()
            && down
            && now_ms < down_since(step, now_ms) + DOWN_SETTLE_MS
        {
            // systemd restarts a unit with `Restart=` through `failed` (on its way to `auto-restart`) and
            // `inactive` (when the restart job stops it before starting it again), and the agent may publish
            // either, milliseconds before the next state: down counts as settled only once it lasted.
            restarting = true;
            soonest(step.down_since_ms + DOWN_SETTLE_MS);
        } else if step.phase == Phase::Healthy && !(arrived && active) {
            step.phase = Phase::Failed;
            step.detail = format!(
                "the new version stopped being active after {} s: activeState={} subState={}",
                now_ms.saturating_sub(step.healthy_since_ms) / 1000,
                seen.active_state,
                seen.sub_state
            );
            continue;
        }
        if step.phase == Phase::Healthy && !restarting && now_ms >= step.healthy_since_ms + spec.min_healthy_ms {
            step.phase = Phase::Done;
            continue;
        }
        let deadline = step.released_ms + spec.health_timeout_ms;
        if now_ms >= deadline {
            step.phase = Phase::Failed;
            step.detail = format!(
                "not healthy within {} s of its release: activeState={} subState={}",
                spec.health_timeout_ms / 1000,
                if seen.active_state.is_empty() { "-" } else { &seen.active_state },
                if seen.sub_state.is_empty() { "-" } else { &seen.sub_state },
            );
            continue;
        }
        soonest(deadline);
        if step.phase == Phase::Healthy && !restarting {
            soonest(step.healthy_since_ms + spec.min_healthy_ms);
        }
    }
    if let Some(failed) = progress.steps.iter().find(|s| s.phase == Phase::Failed) {
        let reason = format!("{} on {}: {}", failed.unit, short(&failed.machine), failed.detail);
        if spec.on_failure == OnFailure::Rollback && spec.kind == RolloutKind::Replace {
            progress.state = RolloutState::RolledBack;
            progress.reason = format!("rolled back: {reason}");
            roll_back = spec.units.clone();
            return Advanced { progress, roll_back, wake_at_ms: None };
        }
        progress.state = RolloutState::Paused;
        progress.reason = format!("paused: {reason}");
    } else if rollout.control.action == Action::Pause {
        progress.state = RolloutState::Paused;
        progress.reason = "paused by request".into();
    } else {
        progress.state = RolloutState::Running;
        progress.reason.clear();
    }
    if progress.state == RolloutState::Running {
        let mut in_flight = progress.steps.iter().filter(|s| s.phase.in_flight()).count();
        for step in progress.steps.iter_mut().filter(|s| s.phase == Phase::Pending) {
            if in_flight >= spec.max_unavailable.max(1) as usize {
                break;
            }
            let gone = if !cluster.exists(&step.unit) {
                Some("the unit was destroyed")
            } else if !cluster.observe(&step.unit, &step.machine).present {
                Some("the machine left the cluster")
            } else {
                None
            };
            if let Some(why) = gone {
                step.phase = Phase::Skipped;
                step.detail = why.into();
                continue;
            }
            step.phase = Phase::Updating;
            step.released_ms = now_ms;
            soonest(now_ms + spec.health_timeout_ms);
            in_flight += 1;
        }
        if progress.steps.iter().all(|s| matches!(s.phase, Phase::Done | Phase::Skipped)) {
            progress.state = RolloutState::Done;
            wake = None;
        }
    }
    Advanced { progress, roll_back, wake_at_ms: wake }
}

/// How long a healthy step's unit may show `failed` or `inactive` before that counts as where it settled:
/// systemd (252) restarting a unit with `Restart=` passes through both for milliseconds, and the agent may
/// publish them (seen under load: the rollout paused on `failed`, or on `inactive`, instead of naming the restart
/// counter).
pub const DOWN_SETTLE_MS: u64 = 1_000;

/// When `step` first saw its unit down, noting `now_ms` if this is the first time.
fn down_since(step: &mut Step, now_ms: u64) -> u64 {
    if step.down_since_ms == 0 {
        step.down_since_ms = now_ms;
    }
    step.down_since_ms
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Whether systemd is moving the unit between states (it settles `active`, `inactive` or `failed`).
fn settling(active_state: &str) -> bool {
    matches!(active_state, "activating" | "deactivating" | "reloading")
}

/// A healthy step's restart counter as recorded when it became healthy and as published now, when they differ
/// (systemd restarted the unit meanwhile, however briefly it was down). `None` when either is unknown.
fn restart_counter_moved(step: &Step, seen: &Observed) -> Option<(u32, u32)> {
    if step.phase != Phase::Healthy {
        return None;
    }
    match (step.restarts_at_healthy, seen.restarts) {
        (Some(then), Some(now)) if then != now => Some((then, now)),
        _ => None,
    }
}

/// The steps of a new rollout: each unit in the spec's order, its holders in machine-ID order.
fn first_progress(spec: &RolloutSpec, cluster: &impl Cluster) -> RolloutProgress {
    let mut steps = Vec::new();
    for unit in &spec.units {
        let machines: BTreeSet<String> = cluster.holders(&unit.name).into_iter().collect();
        steps.extend(machines.into_iter().map(|machine| Step {
            unit: unit.name.clone(),
            machine,
            phase: Phase::Pending,
            released_ms: 0,
            healthy_since_ms: 0,
            detail: String::new(),
            restarts_at_healthy: None,
            down_since_ms: 0,
            from_machine: String::new(),
        }));
    }
    RolloutProgress { state: RolloutState::Running, reason: String::new(), steps, resumes: 0 }
}

/// The version `machine` must keep running of `unit` because a replace rollout has not reached it yet: the old
/// hash while its step is pending (or before the engine has written any progress), `None` otherwise.
pub fn pinned_hash<'a>(rollouts: impl IntoIterator<Item = &'a Rollout>, unit: &str, machine: &str) -> Option<&'a str> {
    rollouts.into_iter().find_map(|r| {
        if r.spec.kind != RolloutKind::Replace || !r.state().holds_machines() {
            return None;
        }
        let u = r.spec.unit(unit)?;
        let pending = match &r.progress {
            None => true,
            Some(p) => p.step(unit, machine).is_some_and(|s| s.phase == Phase::Pending),
        };
        pending.then_some(u.from.as_str())
    })
}

/// The restart a restart rollout asks of `unit` on `machine` now: the rollout's ID while its step is `updating`.
pub fn restart_token<'a>(
    rollouts: impl IntoIterator<Item = &'a Rollout>,
    unit: &str,
    machine: &str,
) -> Option<&'a str> {
    rollouts.into_iter().find_map(|r| {
        let updating = r.spec.kind == RolloutKind::Restart
            && r.state() == RolloutState::Running
            && r.progress.as_ref()?.step(unit, machine)?.phase == Phase::Updating;
        updating.then_some(r.spec.id.as_str())
    })
}

/// Hashes that rollouts still need (their units' old and new versions): body garbage collection keeps them.
pub fn needed_hashes<'a>(rollouts: impl IntoIterator<Item = &'a Rollout>) -> BTreeSet<&'a str> {
    rollouts
        .into_iter()
        .filter(|r| r.state().holds_machines())
        .flat_map(|r| r.spec.units.iter().flat_map(|u| [u.from.as_str(), u.to.as_str()]))
        .collect()
}

/// How many finished rollouts (done, aborted, rolled back) of each unit the registry keeps: older ones are deleted
/// by the engine leader ([`expired`]).
pub const KEEP_FINISHED_PER_UNIT: usize = 5;

/// The finished rollouts to delete: a finished rollout goes once every unit it names has at least `keep` newer
/// finished rollouts (newer: later `createdMs`, ties by ID). A rollout that is not final is never expired, nor
/// one that is among the last `keep` of any of its units, so `rollout-status` of a unit still shows its recent
/// rollouts. Sorted by ID.
pub fn expired<'a>(rollouts: impl IntoIterator<Item = &'a Rollout>, keep: usize) -> Vec<&'a str> {
    let mut finished: Vec<&Rollout> = rollouts.into_iter().filter(|r| r.state().is_final()).collect();
    finished.sort_by(|a, b| (b.spec.created_ms, &b.spec.id).cmp(&(a.spec.created_ms, &a.spec.id)));
    let mut seen_per_unit: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for r in finished {
        let mut kept_for_some_unit = r.spec.units.is_empty() && keep > 0;
        for u in &r.spec.units {
            let newer = seen_per_unit.entry(u.name.as_str()).or_insert(0);
            kept_for_some_unit |= *newer < keep;
            *newer += 1;
        }
        if !kept_for_some_unit {
            out.push(r.spec.id.as_str());
        }
    }
    out.sort_unstable();
    out
}

/// The rollout of `unit` that is not final, if any (at most one: the API refuses a second).
pub fn active_for<'a>(rollouts: impl IntoIterator<Item = &'a Rollout>, unit: &str) -> Option<&'a Rollout> {
    rollouts.into_iter().find(|r| !r.state().is_final() && r.spec.unit(unit).is_some())
}

fn short(machine: &str) -> &str {
    machine.get(..8).unwrap_or(machine)
}

/// Counts of steps by phase, for summaries.
pub fn phase_counts(progress: &RolloutProgress) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for s in &progress.steps {
        *counts.entry(s.phase.as_str()).or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests;

//! Rollouts: changing a unit machine by machine (issue 12). Pure: the stored shapes of a rollout and the decisions
//! over them, shared by the registry (which stores them), the engine leader (which drives them with [`advance`]),
//! the agents (which ask [`hash_on`] and [`restart_token`] what to run) and the API (which shows them).
//!
//! A rollout is three records, each with one writer:
//! * the **spec** (API, written once): which units, from which version to which, and how fast;
//! * the **control** (API): `run`, `pause` or `abort` (and promotions, resumes), what a user asked for;
//! * the **progress** (engine leader): one step per (unit, machine) in a stable order, each `pending` →
//!   `updating` → `healthy` (the new version active, held for `minHealthyMs`) → `done`, or `failed`/`skipped`.
//!
//! The engine releases steps within a budget: at most `maxUnavailable` machines of the rollout may be without an
//! active, healthy copy at once, counting machines that were down before the rollout reached them. Healthy means
//! active (systemd's readiness) with the restart counter unchanged and, for a unit with `[X-Fleet] HealthCheck=`,
//! passing that check, continuously for `minHealthyMs`. An agent runs the old version of a unit (the spec's `from`)
//! on its machine while its step is still `pending` (a *replace* rollout), and restarts the unit once when its step
//! is `updating` (a *restart* rollout); everything else follows the unit's stored version as usual, so a machine
//! that joins during a rollout gets the new version at once. A unit is in at most one rollout that is not final
//! (the API refuses a second). A replace that fails with `onFailure=rollback`, or is aborted, is *undone*: the unit
//! object goes back to the old version and every machine the rollout changed returns to it step by step, under
//! the same budget and health gate (the machines already down first), so a unit always ends as one version.
//! Canaries (`canary`) stop the rollout after its first steps until it is promoted; `order` puts chosen machines
//! first or last; a progress deadline fails a rollout that takes too long. The unit's own `[X-Fleet]` update
//! policy and health check are read in [`policy`], which also holds the settings a spec shares with them
//! ([`OnFailure`], the budget, the machine order). Times are the engine's wall clock in Unix milliseconds, so a new
//! leader continues where the old one stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

pub mod policy;

// Defined in `policy` (a unit's `UpdateOnFailure=` reads it), so that `policy` needs nothing from this hub.
pub use policy::OnFailure;

/// What a rollout changes on each machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutKind {
    /// A new version of the unit replaces the old one, machine by machine (old stop hooks before new start hooks).
    #[default]
    Replace,
    /// The same version is restarted, machine by machine.
    Restart,
    /// Units move between machines towards an even spread (issue 14 item 4, docs/rebalance.md): the spec names
    /// no units; the engine leader plans the moves when it first takes the rollout up (its first progress), one
    /// step per move (`machine` the destination, `fromMachine` the source).
    Rebalance,
    /// A machine is emptied for maintenance (issue 38, docs/drain.md): the spec names the machine (`machine`), not
    /// units; the engine leader plans the steps when it first takes the drain up. A *move* step carries a unit to
    /// another machine (`machine` the destination, `fromMachine` the drained machine), as a rebalance's; a *stop*
    /// step (`machine` the drained machine, no `fromMachine`) stops a unit that cannot leave it (a global unit, one
    /// pinned there by `MachineID=`, or one following such a unit with `MachineOf=`), after every move.
    Drain,
}

impl RolloutKind {
    /// Whether the engine leader plans the steps (a rebalance, a drain): the spec names no units, and a step's
    /// success is its unit running on its destination, not a version.
    pub fn plans_steps(self) -> bool {
        matches!(self, RolloutKind::Rebalance | RolloutKind::Drain)
    }
}

/// One unit of a rollout: the version it leaves and the one it reaches (equal for a restart), and whether each has a
/// health check (`[X-Fleet] HealthCheck=`), which then gates its steps.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RolloutUnit {
    pub name: String,
    pub from: String,
    pub to: String,
    /// The version `to` has a health check: a step is healthy only while it passes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub checked: bool,
    /// The version `from` has a health check (gates the steps of an undo).
    #[serde(rename = "fromChecked", default, skip_serializing_if = "is_false")]
    pub from_checked: bool,
}

impl RolloutUnit {
    /// Whether the version `hash` of this unit has a health check (`false` for a version the rollout does not name).
    pub fn checked_version(&self, hash: &str) -> bool {
        (hash == self.to && self.checked) || (hash == self.from && self.from_checked)
    }
}

/// `P/rollouts/<id>/spec`: what to roll out and how fast. Written once by the API.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
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
    /// `maxUnavailable` as a share of the rollout's steps, in percent (0: `maxUnavailable` is the count).
    #[serde(rename = "maxUnavailablePercent", default, skip_serializing_if = "is_zero32")]
    pub max_unavailable_percent: u32,
    /// Canaries: the first this many steps change, then the rollout awaits promotion (0: none).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub canary: u32,
    /// Promote on its own once the canaries stayed healthy this long after the last was done (0: wait for
    /// `rollout-promote`).
    #[serde(rename = "canaryHoldMs", default, skip_serializing_if = "is_zero")]
    pub canary_hold_ms: u64,
    /// Machines to change first or last (`policy::parse_order`); machine-ID order otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub order: String,
    /// A rollout not done this long after it started (or was last resumed) fails (0: no deadline).
    #[serde(rename = "progressDeadlineMs", default, skip_serializing_if = "is_zero")]
    pub progress_deadline_ms: u64,
    /// Where the pace came from: `unit` when the unit's `UpdatePolicy=` set it (shown, decides nothing).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// A drain: the machine it empties (its full ID). Empty for other kinds.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine: String,
    /// A drain: the `sinceMs` of the machine's cordon it was made under (the cordon it wrote, or the one already
    /// there). The units it stopped stay stopped while that cordon stands ([`drained_units`]).
    #[serde(rename = "cordonSinceMs", default, skip_serializing_if = "is_zero")]
    pub cordon_since_ms: u64,
}

impl RolloutSpec {
    pub fn unit(&self, name: &str) -> Option<&RolloutUnit> {
        self.units.iter().find(|u| u.name == name)
    }

    /// How many of `steps` steps may be unavailable at once: `maxUnavailable`, or its percentage of the steps.
    pub fn budget(&self, steps: usize) -> usize {
        let limit = if self.max_unavailable_percent > 0 {
            policy::MaxUnavailable::Percent(self.max_unavailable_percent).of(steps)
        } else {
            self.max_unavailable
        };
        limit.max(1) as usize
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
    /// Release the rest after the canaries (`rollout-promote`); leaves the stored action as it was.
    Promote,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Run => "run",
            Action::Pause => "pause",
            Action::Abort => "abort",
            Action::Promote => "promote",
        }
    }
}

/// `P/rollouts/<id>/control`: the user's action, how many times they resumed (each resume releases the failed
/// steps again once, or with `skipFailed` leaves them as they are and goes on), and whether they promoted the
/// canaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Control {
    pub action: Action,
    #[serde(default)]
    pub resumes: u32,
    /// The last resume skips the failed steps instead of trying them again.
    #[serde(rename = "skipFailed", default, skip_serializing_if = "is_false")]
    pub skip_failed: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub promoted: bool,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Not released: the machine runs the old version.
    #[default]
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
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
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
    /// Skipped by request (`rollout-resume --skip-failed`): its machine no longer counts against the budget, however
    /// it is doing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub waived: bool,
}

impl Step {
    /// `unit`'s step on `machine`, not released yet.
    pub fn pending(unit: &str, machine: &str) -> Step {
        Step { unit: unit.to_string(), machine: machine.to_string(), phase: Phase::Pending, ..Step::default() }
    }

    /// Whether this step of a drain stops its unit on the drained machine (`machine`) rather than moving it.
    pub fn is_stop(&self, kind: RolloutKind) -> bool {
        kind == RolloutKind::Drain && self.from_machine.is_empty()
    }
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
        Step { from_machine: self.from.clone(), ..Step::pending(&self.unit, &self.to) }
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
    /// When the engine took the rollout up, or it was last resumed (Unix ms): the progress deadline counts from it.
    #[serde(rename = "startedMs", default, skip_serializing_if = "is_zero")]
    pub started_ms: u64,
    /// The undo of a replace (after a failure with `onFailure=rollback`, or an abort): one step per machine the
    /// rollout changed, each returning it to the old version under the same budget. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undo: Vec<Step>,
    /// While undoing: the state the rollout ends in once every undo step is done (`rolled_back` or `aborted`).
    #[serde(rename = "undoEnd", default, skip_serializing_if = "Option::is_none")]
    pub undo_end: Option<RolloutState>,
    /// Why the rollout is being undone (the failure, the deadline, or the abort).
    #[serde(rename = "undoReason", default, skip_serializing_if = "String::is_empty")]
    pub undo_reason: String,
    /// The canaries are done and the rollout waits for `rollout-promote` (state `paused`).
    #[serde(rename = "awaitingPromotion", default, skip_serializing_if = "is_false")]
    pub awaiting_promotion: bool,
    /// When the last canary step was done (Unix ms; 0 before): a canary hold counts from it.
    #[serde(rename = "canariesDoneMs", default, skip_serializing_if = "is_zero")]
    pub canaries_done_ms: u64,
}

impl RolloutProgress {
    pub fn step(&self, unit: &str, machine: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.unit == unit && s.machine == machine)
    }

    /// The undo step of (`unit`, `machine`), if the rollout is undoing and changed that machine.
    pub fn undo_step(&self, unit: &str, machine: &str) -> Option<&Step> {
        self.undo.iter().find(|s| s.unit == unit && s.machine == machine)
    }

    /// Whether the rollout is returning machines to the old version.
    pub fn undoing(&self) -> bool {
        self.undo_end.is_some()
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
    /// The unit's health check on the machine as published (units with a check, from agents that run them).
    pub health: Option<crate::model::Health>,
}

impl Observed {
    /// Whether the machine serves the unit: active, and passing its check when the version it runs has one. A
    /// machine that publishes no health at all for a checked version (a fleetd that does not run checks) is judged
    /// by systemd alone here; its steps still wait for a passing check.
    fn serving(&self, unit: &RolloutUnit) -> bool {
        self.present
            && self.active_state == "active"
            && (!self.checked(unit) || self.health.is_none() || self.healthy())
    }

    fn checked(&self, unit: &RolloutUnit) -> bool {
        self.hash.as_deref().is_some_and(|h| unit.checked_version(h))
    }

    fn healthy(&self) -> bool {
        self.health.as_ref().is_some_and(|h| h.status == crate::model::HealthStatus::Healthy)
    }

    fn unhealthy(&self) -> bool {
        self.health.as_ref().is_some_and(|h| h.status == crate::model::HealthStatus::Unhealthy)
    }

    /// Why the machine does not serve the unit, for reasons and details.
    fn why_not_serving(&self, unit: &RolloutUnit) -> String {
        if !self.present {
            return "left the cluster".into();
        }
        if self.hash.is_none() {
            return "not running it".into();
        }
        if self.active_state != "active" {
            return format!("{}/{}", dash(&self.active_state), dash(&self.sub_state));
        }
        match &self.health {
            Some(h) if self.checked(unit) && !h.output.is_empty() => format!("{}: {}", h.status, h.output),
            Some(h) if self.checked(unit) => h.status.to_string(),
            _ if self.checked(unit) => "no health published: does its fleetd run health checks?".into(),
            _ => "serving".into(),
        }
    }
}

fn dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
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
    /// Whether a drain stopped `unit` on `machine` and holds it stopped ([`drained_units`]): a replace or restart
    /// step there is skipped, as for a machine that left (its machine still counts against the budget). None by
    /// default.
    fn drained(&self, _unit: &str, _machine: &str) -> bool {
        false
    }
    /// Whether `unit` is scheduled to a machine other than `machine` (a unit that is not global moved away, e.g.
    /// rescheduled off a machine that left): its step there is over, and its new machine takes a step of its own.
    /// Never by default.
    fn moved(&self, _unit: &str, _machine: &str) -> bool {
        false
    }
    /// Whether `machine` cannot take `unit` on: it cannot write unit files (a load fault) and does not hold it. Its
    /// step is skipped, and it counts against the budget as a machine that left does. Never by default.
    fn cannot_load(&self, _unit: &str, _machine: &str) -> bool {
        false
    }
    /// A machine's metadata (for `order` rules); none by default.
    fn metadata(&self, _machine: &str) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
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
/// nothing changes), any units to write back to their old version, and when to look again.
///
/// A pass, in order: a user's abort or resume; the progress deadline; each released step (forward, or undo while
/// undoing) checked against what its machine publishes; a done step whose check fails while the rollout runs;
/// then, with nothing failed or paused, the next steps released within the budget — `maxUnavailable` counts every
/// machine of the rollout that does not serve the unit (not active, or not passing its check, or gone), not only
/// the steps in flight, and a machine already down is released first since changing it costs nothing more.
pub fn advance(rollout: &Rollout, cluster: &impl Cluster, now_ms: u64) -> Advanced {
    let spec = &rollout.spec;
    let mut progress = rollout.progress.clone().unwrap_or_else(|| first_progress(spec, cluster, now_ms));
    let mut roll_back = Vec::new();
    if progress.state.is_final() {
        return Advanced { progress, roll_back, wake_at_ms: None };
    }
    let replace = spec.kind == RolloutKind::Replace;
    if rollout.control.action == Action::Abort && !progress.undoing() {
        if replace && progress.steps.iter().any(needs_undo) {
            // Machines that were not reached keep the old version; the others return to it step by step.
            roll_back = start_undo(spec, &mut progress, RolloutState::Aborted);
            progress.undo_reason = "aborted by request".into();
        } else {
            progress.state = RolloutState::Aborted;
            progress.awaiting_promotion = false;
            progress.reason = "aborted by request".into();
            if replace {
                // No machine runs the new version: the unit object alone goes back.
                roll_back = spec.units.clone();
            }
            return Advanced { progress, roll_back, wake_at_ms: None };
        }
    }
    if rollout.control.resumes > progress.resumes {
        progress.resumes = rollout.control.resumes;
        progress.started_ms = now_ms;
        let skip = rollout.control.skip_failed;
        let undoing_now = progress.undoing();
        let steps = if progress.undoing() { &mut progress.undo } else { &mut progress.steps };
        for step in steps.iter_mut().filter(|s| matches!(s.phase, Phase::Failed | Phase::Skipped)) {
            if skip {
                // The user gives these machines up: a failed one is left as it is, and neither it nor one that left
                // the cluster holds the rest back any more.
                if step.phase == Phase::Failed {
                    step.detail = format!("skipped by request after it failed: {}", step.detail);
                }
                step.phase = Phase::Skipped;
                step.waived = true;
            } else if step.phase == Phase::Skipped {
                continue;
            } else if replace && serves_its_version(spec, step, cluster, undoing_now) {
                // It still runs the version its step brought, active: its check failed, or its restart counter
                // moved. It is judged again where it stands; back to pending, its machine would first return to
                // the other version, a restart more for one retry.
                step.phase = Phase::Updating;
                step.released_ms = now_ms;
                step.healthy_since_ms = 0;
                step.restarts_at_healthy = None;
                step.detail.clear();
            } else {
                step.phase = Phase::Pending;
                step.detail.clear();
            }
            step.down_since_ms = 0;
        }
    }
    if !spec.kind.plans_steps() && !spec.units.iter().any(|u| cluster.exists(&u.name)) {
        progress.state = RolloutState::Aborted;
        progress.reason = "its units were destroyed".into();
        return Advanced { progress, roll_back, wake_at_ms: None };
    }
    if replace {
        take_up(spec, &mut progress, cluster, now_ms);
    }
    let mut wake = Wake::default();
    let undoing = progress.undoing();
    {
        let steps = if undoing { &mut progress.undo } else { &mut progress.steps };
        for step in steps.iter_mut().filter(|s| s.phase.in_flight()) {
            check_released(spec, step, cluster, now_ms, undoing, &mut wake);
        }
    }
    if !undoing && rollout.control.action != Action::Abort {
        for step in progress.steps.iter_mut().filter(|s| s.phase == Phase::Done) {
            check_done(spec, step, cluster, now_ms);
        }
    }
    let deadline_passed = !undoing
        && spec.progress_deadline_ms > 0
        && progress.started_ms > 0
        && now_ms >= progress.started_ms.saturating_add(spec.progress_deadline_ms);
    let list = if undoing { &progress.undo } else { &progress.steps };
    let failure = list
        .iter()
        .find(|s| s.phase == Phase::Failed)
        .map(|f| format!("{} on {}: {}", f.unit, short(&f.machine), f.detail))
        .or_else(|| {
            let unfinished = list.iter().any(|s| !matches!(s.phase, Phase::Done | Phase::Skipped));
            (deadline_passed && unfinished && rollout.control.action == Action::Run && !progress.awaiting_promotion)
                .then(|| format!("not done within its progress deadline of {} s", spec.progress_deadline_ms / 1000))
        });
    progress.state = RolloutState::Running;
    progress.reason.clear();
    if let Some(reason) = failure {
        if undoing {
            progress.state = RolloutState::Paused;
            progress.reason = format!("paused while rolling back: {reason}");
        } else if spec.on_failure == OnFailure::Rollback && replace {
            roll_back = start_undo(spec, &mut progress, RolloutState::RolledBack);
            progress.undo_reason = reason;
            progress.reason = format!("rolling back: {}", progress.undo_reason);
        } else {
            progress.state = RolloutState::Paused;
            progress.reason = format!("paused: {reason}");
        }
    } else if rollout.control.action == Action::Pause {
        progress.state = RolloutState::Paused;
        progress.reason = if undoing { "paused by request while rolling back" } else { "paused by request" }.into();
    } else if progress.undoing() {
        progress.reason = match progress.undo_end {
            Some(RolloutState::Aborted) => {
                "aborted by request: returning the changed machines to the old version".to_string()
            }
            _ => format!("rolling back: {}", progress.undo_reason),
        };
    }
    let mut canaries_only = None;
    if progress.state == RolloutState::Running && !progress.undoing() && spec.canary > 0 {
        canaries_only = canary_gate(spec, &rollout.control, &mut progress, now_ms, &mut wake);
    }
    if progress.state == RolloutState::Running {
        release(spec, &mut progress, cluster, now_ms, canaries_only, &mut wake);
        let undoing = progress.undoing();
        let list = if undoing { &progress.undo } else { &progress.steps };
        if list.iter().all(|s| matches!(s.phase, Phase::Done | Phase::Skipped)) {
            progress.state = progress.undo_end.unwrap_or(RolloutState::Done);
            progress.reason = match progress.state {
                RolloutState::Done => String::new(),
                RolloutState::Aborted => "aborted by request: every changed machine is back on the old version".into(),
                _ => format!("rolled back: {}", progress.undo_reason),
            };
            return Advanced { progress, roll_back, wake_at_ms: None };
        }
    }
    if !undoing && spec.progress_deadline_ms > 0 && progress.started_ms > 0 && progress.state == RolloutState::Running {
        wake.at(progress.started_ms.saturating_add(spec.progress_deadline_ms));
    }
    Advanced { progress, roll_back, wake_at_ms: wake.0 }
}

/// A progress as a leader that took the lead at `since_ms` (its clock) sees it at `now_ms`: every time of a step in
/// flight (released, healthy since, down since) and of the rollout (started, canaries done) is brought into
/// `[since_ms, now_ms]`. Times were written by earlier leaders, whose clocks may be hours off this one's: without
/// this, a leader an hour ahead would fail every step in flight at once, and one an hour behind would wait an hour
/// longer. The price: a step in flight when the lead changes gets its timers (health timeout, `minHealthyMs`)
/// restarted at the takeover, so it may take up to twice as long once.
pub fn rebase(progress: &mut RolloutProgress, since_ms: u64, now_ms: u64) {
    let since_ms = since_ms.min(now_ms);
    let clamp = |t: &mut u64| {
        if *t != 0 {
            *t = (*t).clamp(since_ms, now_ms);
        }
    };
    for step in progress.steps.iter_mut().chain(progress.undo.iter_mut()).filter(|s| s.phase.in_flight()) {
        clamp(&mut step.released_ms);
        clamp(&mut step.healthy_since_ms);
        clamp(&mut step.down_since_ms);
    }
    clamp(&mut progress.started_ms);
    clamp(&mut progress.canaries_done_ms);
}

/// The soonest time a rollout must be looked at again without a change in the cluster.
#[derive(Default)]
struct Wake(Option<u64>);

impl Wake {
    fn at(&mut self, t: u64) {
        self.0 = Some(self.0.map_or(t, |w| w.min(t)));
    }
}

/// Whether a forward step in `phase` has changed its machine (or is changing it): an undo returns it.
fn changed_machine(phase: Phase) -> bool {
    matches!(phase, Phase::Updating | Phase::Healthy | Phase::Done | Phase::Failed)
}

/// Whether an undo must return forward `step`'s machine: it changed it, or was released before it was skipped —
/// its machine left (it may come back on the new version; its undo step waits for it, see [`take_up`]), or the user
/// gave it up with `--skip-failed` (it may still run the new version, serving: without an undo step it would follow
/// the unit object back at once, outside the budget).
fn needs_undo(step: &Step) -> bool {
    changed_machine(step.phase) || (step.phase == Phase::Skipped && step.released_ms > 0)
}

/// A step skipped because its machine left (or its unit moved away) before it was released, and not given up by
/// the user: while it is away, and when it comes back until its step is taken up again, the machine keeps the
/// version it had.
fn left_unreleased(step: &Step) -> bool {
    step.phase == Phase::Skipped && step.released_ms == 0 && !step.waived
}

/// Whether failed `step`'s machine still runs, active, the version the step brought.
fn serves_its_version(spec: &RolloutSpec, step: &Step, cluster: &impl Cluster, undoing: bool) -> bool {
    let seen = cluster.observe(&step.unit, &step.machine);
    seen.present && seen.active_state == "active" && arrived(spec, step, &seen, undoing)
}

/// Why a step of `unit` on `machine` is over without being carried out, if it is: the unit was destroyed or the
/// machine left; for a replace or a restart also the unit moved away, cannot be loaded there, or is held stopped by
/// a drain (a rebalance or drain step's machine is where its unit goes, so it is scheduled elsewhere until it moves).
/// The one answer for a step in flight ([`check_released`]), a step about to be released ([`release`]) and a machine
/// that holds the unit again ([`take_up`]).
fn skip_reason(
    spec: &RolloutSpec,
    unit: &str,
    machine: &str,
    cluster: &impl Cluster,
    seen: &Observed,
) -> Option<&'static str> {
    if !cluster.exists(unit) {
        Some("the unit was destroyed")
    } else if !seen.present {
        Some("the machine left the cluster")
    } else if spec.kind.plans_steps() {
        None
    } else if cluster.moved(unit, machine) {
        Some(MOVED)
    } else if cluster.cannot_load(unit, machine) {
        Some(CANNOT_LOAD)
    } else if cluster.drained(unit, machine) {
        Some(DRAINED)
    } else {
        None
    }
}

/// Keeps a replace rollout's machines complete while it runs: every machine that holds one of its units is in it.
/// A machine that came back after its step was skipped takes that step up again: pending if it was never released
/// (it kept the old version, [`pinned_hash`]), released again if it was (it follows the new version; its check is
/// waited for anew). A machine that holds a unit and has no step (it joined, or an instance was rescheduled onto
/// it: it had no copy) runs the new version at once, which takes nothing down, and gets a step at the end, released
/// now: its health is waited for, the rollout is not done before it, and an undo returns it within the budget.
/// While undoing, the undo steps are taken up the same way; a machine without a forward step follows the unit
/// object, the old version, already. Without this, such machines were outside the rollout: no health gate, and an
/// undo restarted them at once, whatever the budget.
fn take_up(spec: &RolloutSpec, progress: &mut RolloutProgress, cluster: &impl Cluster, now_ms: u64) {
    let undoing = progress.undoing();
    for unit in spec.units.iter().filter(|u| cluster.exists(&u.name)) {
        // Asked once per unit: a global unit's holders are every machine, and each is looked up below.
        let holders: BTreeSet<String> = cluster.holders(&unit.name).into_iter().collect();
        let holds_again = |machine: &str| {
            holders.contains(machine)
                && skip_reason(spec, &unit.name, machine, cluster, &cluster.observe(&unit.name, machine)).is_none()
        };
        let list = if undoing { &mut progress.undo } else { &mut progress.steps };
        for step in list.iter_mut().filter(|s| s.unit == unit.name && s.phase == Phase::Skipped && !s.waived) {
            if !holds_again(&step.machine) {
                continue;
            }
            step.detail.clear();
            step.down_since_ms = 0;
            if step.released_ms == 0 {
                step.phase = Phase::Pending;
            } else {
                step.phase = Phase::Updating;
                step.released_ms = now_ms;
                step.healthy_since_ms = 0;
                step.restarts_at_healthy = None;
            }
        }
        if undoing {
            continue;
        }
        let stepped: BTreeSet<String> =
            progress.steps.iter().filter(|s| s.unit == unit.name).map(|s| s.machine.clone()).collect();
        for machine in holders.iter().filter(|m| !stepped.contains(*m)) {
            if holds_again(machine) {
                progress.steps.push(Step {
                    phase: Phase::Updating,
                    released_ms: now_ms,
                    ..Step::pending(&unit.name, machine)
                });
            }
        }
    }
}

/// Turns a replace into its undo, ending in `end`: one undo step per machine the rollout changed, each pending (it
/// keeps the new version until its undo step is released), the failed ones first, then those in the middle of their
/// change, then the others; `release` lets them go within the budget. Returns the units whose object goes back to
/// `from` in the same write (machines that join meanwhile get the old version).
fn start_undo(spec: &RolloutSpec, progress: &mut RolloutProgress, end: RolloutState) -> Vec<RolloutUnit> {
    let mut undo: Vec<(u8, Step)> = progress
        .steps
        .iter()
        .filter(|s| needs_undo(s))
        .map(|s| {
            // A failed one goes first: while it does not serve, its undo costs nothing more (`release` takes the
            // machines that are down first). It is released by `release` like any other undo step, within the cap on
            // machines changing at once: a step that failed because its check failed may serve again by now (a check
            // that flapped), and several failed at once must not all restart at the same moment. One in the middle
            // of its change goes next, but only once that change settled (`changing_forward`): what it publishes
            // meanwhile may still be the old version, which would pass for an undo already done. A healthy or done
            // one serves the new version until its undo step's turn.
            let order = match s.phase {
                Phase::Failed => 0,
                Phase::Updating => 1,
                _ => 2,
            };
            (order, Step::pending(&s.unit, &s.machine))
        })
        .collect();
    undo.sort_by_key(|(order, _)| *order);
    progress.undo = undo.into_iter().map(|(_, s)| s).collect();
    progress.undo_end = Some(end);
    progress.awaiting_promotion = false;
    progress.state = RolloutState::Running;
    spec.units.clone()
}

/// Whether the machine of forward replace `step` is still moving to the new version: it neither runs it (file and
/// start) settled in a state, nor settled down (`failed` or `inactive`) with it.
fn changing_forward(spec: &RolloutSpec, step: &Step, seen: &Observed) -> bool {
    let Some(unit) = spec.unit(&step.unit) else { return false };
    if !seen.present {
        return false;
    }
    let holds_new = seen.hash.as_deref() == Some(unit.to.as_str());
    let runs_new = holds_new && seen.running.as_deref() == Some(unit.to.as_str());
    let settled = seen.active_state == "active" || crate::model::is_stopped(&seen.active_state);
    !(settled && (runs_new || (holds_new && seen.active_state != "active")))
}

/// What a released step waits for on its machine, and the version whose check gates it.
fn arrived(spec: &RolloutSpec, step: &Step, seen: &Observed, undoing: bool) -> bool {
    match spec.kind {
        RolloutKind::Replace => {
            let Some(unit) = spec.unit(&step.unit) else { return false };
            let version = if undoing { &unit.from } else { &unit.to };
            seen.hash.as_deref() == Some(version) && seen.running.as_deref() == Some(version)
        }
        RolloutKind::Restart => seen.restarted_for.as_deref() == Some(&spec.id),
        // The destination started it (its launched marker) and runs the version it publishes.
        RolloutKind::Rebalance => seen.running.is_some() && seen.running == seen.hash,
        // A stop: the drained machine no longer runs the unit; a move: as a rebalance's.
        RolloutKind::Drain if step.is_stop(spec.kind) => stopped(seen),
        RolloutKind::Drain => seen.running.is_some() && seen.running == seen.hash,
    }
}

/// Whether the machine holds the version a released step brings (its file, for a replace; its restart for a
/// restart), so that a `failed` state there is the new version's.
fn holds_new_version(spec: &RolloutSpec, step: &Step, seen: &Observed, undoing: bool) -> bool {
    match spec.kind {
        RolloutKind::Replace => spec.unit(&step.unit).is_some_and(|u| {
            let version = if undoing { &u.from } else { &u.to };
            seen.hash.as_deref() == Some(version)
        }),
        _ => arrived(spec, step, seen, undoing),
    }
}

/// A released (`updating` or `healthy`) step against what its machine publishes.
fn check_released(
    spec: &RolloutSpec,
    step: &mut Step,
    cluster: &impl Cluster,
    now_ms: u64,
    undoing: bool,
    wake: &mut Wake,
) {
    let seen = cluster.observe(&step.unit, &step.machine);
    if let Some(why) = skip_reason(spec, &step.unit, &step.machine, cluster, &seen) {
        step.phase = Phase::Skipped;
        step.detail = why.into();
        return;
    }
    let unit = spec.unit(&step.unit).cloned().unwrap_or_default();
    let arrived = arrived(spec, step, &seen, undoing);
    if step.is_stop(spec.kind) {
        check_stop(spec, step, &seen, arrived, now_ms, wake);
        return;
    }
    let active = seen.active_state == "active";
    let checked = match spec.kind {
        RolloutKind::Rebalance => false,
        // A drain's unit carries its own check wherever it goes: the destination publishes it when it has one.
        RolloutKind::Drain => seen.health.is_some(),
        RolloutKind::Replace | RolloutKind::Restart => seen.checked(&unit),
    };
    let passing = active && (!checked || seen.healthy());
    let down = crate::model::is_stopped(&seen.active_state);
    if !down {
        step.down_since_ms = 0;
    }
    let version = if spec.kind == RolloutKind::Restart { "the restarted unit" } else { "the new version" };
    let version = if undoing { "the old version" } else { version };
    let mut restarting = false;
    if step.phase == Phase::Updating {
        if arrived && passing {
            step.phase = Phase::Healthy;
            step.healthy_since_ms = now_ms;
            step.restarts_at_healthy = seen.restarts;
            step.detail.clear();
        } else if down && holds_new_version(spec, step, &seen, undoing) && (seen.active_state == "failed" || arrived) {
            // Fail fast: the version settled down without an automatic restart pending (systemd shows that as
            // `activating`/`auto-restart`). Settled: it stayed so for DOWN_SETTLE_MS, past the states a `Restart=`
            // passes through.
            let since = down_since(step, now_ms);
            if now_ms >= since.saturating_add(DOWN_SETTLE_MS) {
                step.phase = Phase::Failed;
                step.detail = format!(
                    "{version} did not start: activeState={} subState={}",
                    seen.active_state,
                    dash(&seen.sub_state)
                );
                return;
            }
            wake.at(since.saturating_add(DOWN_SETTLE_MS));
        } else {
            let waiting = if arrived && active && checked {
                format!("waiting for its health check ({})", health_text(&seen, &unit))
            } else {
                String::new()
            };
            step.detail = waiting;
        }
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
        return;
    } else if checked && active && arrived && seen.unhealthy() {
        step.phase = Phase::Failed;
        step.detail = format!(
            "its health check failed {} s after it first passed: {}",
            now_ms.saturating_sub(step.healthy_since_ms) / 1000,
            health_text(&seen, &unit)
        );
        return;
    } else if step.restarts_at_healthy.is_some() && settling(&seen.active_state) {
        // Between states, e.g. the process exited and systemd runs its stop hooks, then restarts it
        // (`Restart=`, which moves the restart counter): the step fails once the unit settles, naming the
        // counter or the state it settled in. Not done meanwhile; the health deadline still applies.
        restarting = true;
    } else if step.restarts_at_healthy.is_some()
        && down
        && now_ms < down_since(step, now_ms).saturating_add(DOWN_SETTLE_MS)
    {
        // systemd restarts a unit with `Restart=` through `failed` (on its way to `auto-restart`) and
        // `inactive` (when the restart job stops it before starting it again), and the agent may publish
        // either, milliseconds before the next state: down counts as settled only once it lasted.
        restarting = true;
        wake.at(step.down_since_ms.saturating_add(DOWN_SETTLE_MS));
    } else if !(arrived && passing) {
        step.phase = Phase::Failed;
        step.detail = format!(
            "{version} stopped being active after {} s: activeState={} subState={}",
            now_ms.saturating_sub(step.healthy_since_ms) / 1000,
            seen.active_state,
            seen.sub_state
        );
        return;
    }
    if step.phase == Phase::Healthy
        && !restarting
        && now_ms >= step.healthy_since_ms.saturating_add(spec.min_healthy_ms)
    {
        step.phase = Phase::Done;
        return;
    }
    let deadline = step.released_ms.saturating_add(spec.health_timeout_ms);
    if now_ms >= deadline {
        step.phase = Phase::Failed;
        step.detail = format!(
            "not healthy within {} s of its release: {}",
            spec.health_timeout_ms / 1000,
            if arrived && active && checked {
                health_text(&seen, &unit)
            } else {
                format!("activeState={} subState={}", dash(&seen.active_state), dash(&seen.sub_state))
            }
        );
        return;
    }
    wake.at(deadline);
    if step.phase == Phase::Healthy && !restarting {
        wake.at(step.healthy_since_ms.saturating_add(spec.min_healthy_ms));
    }
}

/// Whether the machine no longer runs the unit: no state published (unloaded) or settled down.
fn stopped(seen: &Observed) -> bool {
    seen.hash.is_none() || crate::model::is_stopped(&seen.active_state)
}

/// The health check as `seen` publishes it, for details: `status: output`.
fn health_text(seen: &Observed, unit: &RolloutUnit) -> String {
    match &seen.health {
        Some(h) if !h.output.is_empty() => format!("{}: {}", h.status, h.output),
        Some(h) => h.status.to_string(),
        None => seen.why_not_serving(unit),
    }
}

/// A released stop step of a drain: done once the drained machine no longer runs the unit, failed when it still
/// does after `healthTimeoutMs`.
fn check_stop(spec: &RolloutSpec, step: &mut Step, seen: &Observed, stopped: bool, now_ms: u64, wake: &mut Wake) {
    if stopped {
        step.phase = Phase::Done;
        step.detail.clear();
        return;
    }
    let deadline = step.released_ms.saturating_add(spec.health_timeout_ms);
    if now_ms >= deadline {
        step.phase = Phase::Failed;
        step.detail = format!(
            "still running {} s after its stop was released: activeState={} subState={}",
            spec.health_timeout_ms / 1000,
            dash(&seen.active_state),
            dash(&seen.sub_state)
        );
        return;
    }
    step.detail = "stopping".into();
    wake.at(deadline);
}

/// A done forward step while the rollout runs: its machine must keep passing the check of the new version.
fn check_done(spec: &RolloutSpec, step: &mut Step, cluster: &impl Cluster, now_ms: u64) {
    if spec.kind.plans_steps() {
        return;
    }
    let Some(unit) = spec.unit(&step.unit) else { return };
    let seen = cluster.observe(&step.unit, &step.machine);
    if seen.present && seen.checked(unit) && seen.active_state == "active" && seen.unhealthy() {
        step.phase = Phase::Failed;
        step.detail = format!(
            "its health check failed {} s after its step was done: {}",
            now_ms.saturating_sub(step.healthy_since_ms) / 1000,
            seen.why_not_serving(unit)
        );
    }
}

/// Canaries: once the first `canary` forward steps are done the rollout waits for a promotion (paused), or, with
/// a hold, for the hold to pass with the canaries still healthy. Until then only they change: `Some(canaries)`,
/// the number of first steps [`release`] may release (whatever the budget).
fn canary_gate(
    spec: &RolloutSpec,
    control: &Control,
    progress: &mut RolloutProgress,
    now_ms: u64,
    wake: &mut Wake,
) -> Option<usize> {
    let canaries = (spec.canary as usize).min(progress.steps.len());
    if control.promoted || canaries == progress.steps.len() {
        progress.awaiting_promotion = false;
        return None;
    }
    // Promoted by the hold in an earlier pass: read from the stored times, not from the other steps' phases (a
    // machine that leaves is skipped, one that joins is released at once: neither is a promotion).
    let hold_over = spec.canary_hold_ms > 0
        && progress.canaries_done_ms > 0
        && now_ms >= progress.canaries_done_ms.saturating_add(spec.canary_hold_ms);
    if hold_over {
        progress.awaiting_promotion = false;
        return None;
    }
    let first = &progress.steps[..canaries];
    if !first.iter().all(|s| matches!(s.phase, Phase::Done | Phase::Skipped)) {
        return Some(canaries);
    }
    if progress.canaries_done_ms == 0 {
        progress.canaries_done_ms = now_ms;
    }
    if spec.canary_hold_ms > 0 {
        let at = progress.canaries_done_ms.saturating_add(spec.canary_hold_ms);
        if now_ms >= at {
            progress.awaiting_promotion = false;
            return None;
        }
        wake.at(at);
        progress.reason = format!(
            "canary: {canaries} machine(s) on the new version; promoting in {} s if they stay healthy",
            (at - now_ms).div_ceil(1000)
        );
        progress.state = RolloutState::Running;
        progress.awaiting_promotion = true;
        return None;
    }
    progress.state = RolloutState::Paused;
    progress.awaiting_promotion = true;
    progress.reason = format!(
        "awaiting promotion: {canaries} canary machine(s) on the new version; release the rest with fleetctl \
         rollout-promote {}",
        spec.id
    );
    None
}

/// Releases pending steps (undo steps while undoing) within the budget: machines of the rollout that do not serve
/// the unit count against `maxUnavailable` with the released steps, and a pending step whose machine is already
/// down is released first, at no cost. When the budget holds a step back because of machines the rollout did not
/// take down, the reason says which. With `canaries_only`, only that many first steps may be released.
fn release(
    spec: &RolloutSpec,
    progress: &mut RolloutProgress,
    cluster: &impl Cluster,
    now_ms: u64,
    canaries_only: Option<usize>,
    wake: &mut Wake,
) {
    if progress.awaiting_promotion && spec.canary_hold_ms > 0 {
        return;
    }
    let undoing = progress.undoing();
    let limit = spec.budget(progress.steps.len());
    let counts_down = !spec.kind.plans_steps();
    // A drain stops the units that cannot leave only once every move is over (done, or skipped).
    let moves_open = spec.kind == RolloutKind::Drain
        && progress.steps.iter().any(|s| !s.is_stop(spec.kind) && !matches!(s.phase, Phase::Done | Phase::Skipped));
    // Before the canaries are done (or promoted), the other steps wait, even a machine already down.
    let after_canaries: BTreeSet<(String, String)> = canaries_only
        .map(|n| progress.steps.iter().skip(n).map(|s| (s.unit.clone(), s.machine.clone())).collect())
        .unwrap_or_default();
    let held = |step: &Step| {
        (moves_open && step.is_stop(spec.kind)) || after_canaries.contains(&(step.unit.clone(), step.machine.clone()))
    };
    // Machines of the rollout that do not serve the unit, outside the released steps.
    let in_flight: BTreeSet<(String, String)> = {
        let list = if undoing { &progress.undo } else { &progress.steps };
        list.iter().filter(|s| s.phase.in_flight()).map(|s| (s.unit.clone(), s.machine.clone())).collect()
    };
    let mut down: Vec<(String, String, String)> = Vec::new();
    if counts_down {
        for step in &progress.steps {
            let key = (step.unit.clone(), step.machine.clone());
            // A machine the user gave up (`rollout-resume --skip-failed`), forward or while undoing, holds
            // nothing back any more.
            let waived =
                step.waived || (undoing && progress.undo_step(&step.unit, &step.machine).is_some_and(|u| u.waived));
            if in_flight.contains(&key) || waived {
                continue;
            }
            if let Some(why) = not_serving(spec, progress, step, cluster) {
                down.push((key.0, key.1, why));
            }
        }
    }
    let mut unavailable = in_flight.len() + down.len();
    // Never more steps changing at once than the budget, even among machines already down: a check that fails
    // everywhere (or a wrong one) must not restart every machine at the same moment.
    let mut changing = in_flight.len();
    // While undoing, a machine whose forward step was still changing it when the undo began is left to settle
    // first (it keeps the new version meanwhile); bounded by that step's health timeout.
    let settling_forward: BTreeSet<(String, String)> = if undoing {
        progress
            .steps
            .iter()
            .filter(|s| s.phase == Phase::Updating && now_ms < s.released_ms.saturating_add(spec.health_timeout_ms))
            .filter(|s| changing_forward(spec, s, &cluster.observe(&s.unit, &s.machine)))
            .map(|s| (s.unit.clone(), s.machine.clone()))
            .collect()
    } else {
        BTreeSet::new()
    };
    let list = if undoing { &mut progress.undo } else { &mut progress.steps };
    let gone = |step: &mut Step| -> bool {
        let seen = cluster.observe(&step.unit, &step.machine);
        let Some(why) = skip_reason(spec, &step.unit, &step.machine, cluster, &seen) else { return false };
        step.phase = Phase::Skipped;
        step.detail = why.into();
        true
    };
    let released = |step: &mut Step, wake: &mut Wake| {
        step.phase = Phase::Updating;
        step.released_ms = now_ms;
        step.detail.clear();
        wake.at(now_ms.saturating_add(spec.health_timeout_ms));
    };
    // A pending step whose machine left, or whose unit moved away or was destroyed, is over whatever the budget:
    // skipping it takes nothing down. Judged before the budget, or a full budget would keep it pending, and its
    // rollout running, for good (seen in the nemesis: an undo step of an instance rescheduled elsewhere).
    // Held or settling makes no difference: a step that is over holds no canary back and no slot of the budget.
    for step in list.iter_mut().filter(|s| s.phase == Phase::Pending) {
        gone(step);
    }
    // First the pending steps whose machine is down already: changing it takes nothing more away.
    let mut held_back = false;
    let settling = |step: &Step| settling_forward.contains(&(step.unit.clone(), step.machine.clone()));
    for step in list.iter_mut().filter(|s| s.phase == Phase::Pending && !settling(s) && !held(s)) {
        let is_down = down.iter().any(|(u, m, _)| *u == step.unit && *m == step.machine);
        if !is_down {
            continue;
        }
        if changing >= limit {
            held_back = true;
            break;
        }
        released(step, wake);
        changing += 1;
        down.retain(|(u, m, _)| !(*u == step.unit && *m == step.machine));
    }
    for step in list.iter_mut().filter(|s| s.phase == Phase::Pending && !held(s)) {
        if settling(step) {
            // Its change is in flight: it holds a slot of the budget as a released step does.
            changing += 1;
            continue;
        }
        if unavailable >= limit || changing >= limit {
            held_back = true;
            break;
        }
        released(step, wake);
        unavailable += 1;
        changing += 1;
    }
    if held_back && !down.is_empty() && progress.reason.is_empty() {
        let names: Vec<String> = down.iter().map(|(u, m, why)| format!("{u} on {} ({why})", short(m))).collect();
        progress.reason = format!(
            "waiting: {} of at most {limit} unavailable already: {}",
            unavailable.min(in_flight.len() + names.len()),
            names.join(", ")
        );
    }
}

/// Why the machine of forward `step` does not serve its unit now (`None` when it does): not active, not passing
/// the check of the version it runs, or gone. A unit that is not global and now runs on a machine the rollout does
/// not name counts as served there.
fn not_serving(spec: &RolloutSpec, progress: &RolloutProgress, step: &Step, cluster: &impl Cluster) -> Option<String> {
    if !cluster.exists(&step.unit) {
        return None;
    }
    let unit = spec.unit(&step.unit)?;
    if cluster.moved(&step.unit, &step.machine) {
        // Its unit runs elsewhere now, and counts there: by that machine's own step when the rollout has one (one
        // taken up while it ran forward), else here, by whether it serves there yet (rescheduled during an undo).
        let elsewhere: Vec<String> = cluster.holders(&step.unit).into_iter().filter(|m| *m != step.machine).collect();
        if elsewhere.iter().any(|m| progress.step(&step.unit, m).is_some())
            || elsewhere.iter().any(|m| cluster.observe(&step.unit, m).serving(unit))
        {
            return None;
        }
        return Some("moved to another machine, not serving there yet".into());
    }
    let seen = cluster.observe(&step.unit, &step.machine);
    if seen.serving(unit) {
        return None;
    }
    if seen.present && seen.hash.is_none() && !cluster.holders(&step.unit).contains(&step.machine) {
        // Present, and the unit is not for it now (a global unit whose metadata it no longer matches): there is
        // nothing to serve there. Counting it would hold the rollout at its budget for good.
        return None;
    }
    if !seen.present || seen.hash.is_none() {
        // Gone from this machine: served if it runs on a machine of its own outside the rollout (rescheduled).
        let named: BTreeSet<&str> =
            progress.steps.iter().filter(|s| s.unit == step.unit).map(|s| s.machine.as_str()).collect();
        let elsewhere = cluster
            .holders(&step.unit)
            .into_iter()
            .filter(|m| !named.contains(m.as_str()))
            .any(|m| cluster.observe(&step.unit, &m).serving(unit));
        if elsewhere {
            return None;
        }
    }
    Some(seen.why_not_serving(unit))
}

/// How long etcd remembers the global units of a machine after it left (the TTL of the lease its
/// `P/machines/<id>/global-units` record is bound to, kept alive by its fleetd): a rollout begun within that time
/// counts the machine against its budget, as it counts a machine that leaves while it runs. Timed by etcd, so no
/// machine's clock decides it. A machine gone for good stops counting for new rollouts after this.
pub const REMEMBER_DEPARTED: std::time::Duration = std::time::Duration::from_secs(600);

/// The detail of a step skipped because its machine cannot write unit files (its load fault) and does not hold the
/// unit: it still counts against the budget, and takes its step up again once it holds the unit.
pub const CANNOT_LOAD: &str = "the machine cannot write unit files (its load fault)";

/// The detail of a step skipped because its unit (not a global one) is scheduled to another machine now.
pub const MOVED: &str = "the unit moved to another machine";

/// The detail of a step skipped because a drain stopped its unit on its machine.
pub const DRAINED: &str = "a drain stopped the unit on this machine (it stays stopped until uncordon)";

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

fn is_zero32(v: &u32) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
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

/// The steps of a new rollout: each unit in the spec's order, its holders in the spec's `order` (machine-ID order
/// where no rule places them).
fn first_progress(spec: &RolloutSpec, cluster: &impl Cluster, now_ms: u64) -> RolloutProgress {
    // Validated when the rollout was stored; a malformed order from another writer orders nothing.
    let rules = policy::parse_order(&spec.order).unwrap_or_default();
    let mut steps = Vec::new();
    for unit in &spec.units {
        let machines: BTreeSet<String> = cluster.holders(&unit.name).into_iter().collect();
        let machines = policy::order_machines(machines.into_iter().collect(), &rules, |m| cluster.metadata(m));
        steps.extend(machines.iter().map(|machine| Step::pending(&unit.name, machine)));
    }
    RolloutProgress { state: RolloutState::Running, steps, started_ms: now_ms, ..RolloutProgress::default() }
}

/// Which version of `unit` `machine` should run now: the unit object's (`stored`), unless a replace rollout keeps
/// the machine on another ([`pinned_hash`]). The one answer to "which version runs where": agents run it
/// (`Snapshot::unit_on`), the cluster page compares each machine with it, and fleetctl's fake follows it.
pub fn hash_on<'a>(
    rollouts: impl IntoIterator<Item = &'a Rollout>,
    unit: &str,
    stored: &'a str,
    machine: &str,
) -> &'a str {
    pinned_hash(rollouts, unit, machine).unwrap_or(stored)
}

/// The version `machine` must keep running of `unit` because a replace rollout has not reached it yet: the old
/// hash while its step is pending (or before the engine has written any progress), or when its step was skipped
/// before its release because it left (it comes back with the old version); while the rollout is undone, the new
/// hash while its undo step is pending or was skipped so (the unit object is back on the old version by then).
/// `None` otherwise: the machine follows the unit object — so a machine that had no copy when the rollout began
/// (it joined, or an instance was rescheduled onto it) starts the new version at once, taking nothing down, and
/// [`take_up`] makes that a released step.
pub(crate) fn pinned_hash<'a>(
    rollouts: impl IntoIterator<Item = &'a Rollout>,
    unit: &str,
    machine: &str,
) -> Option<&'a str> {
    rollouts.into_iter().find_map(|r| {
        if r.spec.kind != RolloutKind::Replace || !r.state().holds_machines() {
            return None;
        }
        let u = r.spec.unit(unit)?;
        match &r.progress {
            None => Some(u.from.as_str()),
            Some(p) if p.undoing() => p
                .undo_step(unit, machine)
                .is_some_and(|s| s.phase == Phase::Pending || left_unreleased(s))
                .then_some(u.to.as_str()),
            Some(p) => p
                .step(unit, machine)
                .is_some_and(|s| s.phase == Phase::Pending || left_unreleased(s))
                .then_some(u.from.as_str()),
        }
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

/// The units drains stopped on `machine` (their released stop steps): the machine keeps them stopped while the cordon
/// those drains were made under stands (`cordon_since_ms`: the machine's cordon's `sinceMs`, `None` when it is not
/// cordoned). An uncordon ends the hold, and so does a later cordon (another `sinceMs`): the units start again as
/// the machine's own units. A drain that was paused or aborted after a stop keeps that unit stopped the same way.
pub fn drained_units<'a>(
    rollouts: impl IntoIterator<Item = &'a Rollout>,
    machine: &str,
    cordon_since_ms: Option<u64>,
) -> BTreeSet<&'a str> {
    let Some(since) = cordon_since_ms else { return BTreeSet::new() };
    rollouts
        .into_iter()
        .filter_map(|r| Some((&r.spec, r.progress.as_ref()?)))
        .flat_map(|(spec, progress)| stopped_by(spec, progress, machine, since))
        .collect()
}

/// The units drain `spec` (with `progress`) stopped on `machine` under the cordon of `cordon_since_ms`: none when it
/// is not such a drain. The one rule behind [`drained_units`] and [`Cluster::drained`].
pub fn stopped_by<'a, 'm>(
    spec: &RolloutSpec,
    progress: &'a RolloutProgress,
    machine: &'m str,
    cordon_since_ms: u64,
) -> impl Iterator<Item = &'a str> + use<'a, 'm> {
    let applies = spec.kind == RolloutKind::Drain && spec.machine == machine && spec.cordon_since_ms == cordon_since_ms;
    progress
        .steps
        .iter()
        .filter(move |s| applies && s.is_stop(RolloutKind::Drain) && s.machine == machine && s.phase != Phase::Pending)
        .map(|s| s.unit.as_str())
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
/// rollouts. Rollouts that name no unit count as one group: rebalances together, drains per machine. Sorted by
/// ID.
pub fn expired<'a>(rollouts: impl IntoIterator<Item = &'a Rollout>, keep: usize) -> Vec<&'a str> {
    let mut finished: Vec<&Rollout> = rollouts.into_iter().filter(|r| r.state().is_final()).collect();
    finished.sort_by(|a, b| (b.spec.created_ms, &b.spec.id).cmp(&(a.spec.created_ms, &a.spec.id)));
    let mut seen_per_unit: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for r in finished {
        let group = match r.spec.kind {
            RolloutKind::Drain => format!("drain {}", r.spec.machine),
            _ => "rebalance".to_string(),
        };
        let names: Vec<&str> = if r.spec.units.is_empty() {
            vec![group.as_str()]
        } else {
            r.spec.units.iter().map(|u| u.name.as_str()).collect()
        };
        let mut kept_for_some_unit = false;
        for name in names {
            let newer = seen_per_unit.entry(name.to_string()).or_insert(0);
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
#[cfg(test)]
mod tests_mutants;

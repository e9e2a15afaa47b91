//! The engine leader's side of rollouts: on every view change (unit states included) and when a rollout's next
//! deadline comes, each rollout that is not final is advanced by the pure [`rollout::advance`] over what the view
//! shows, and a changed progress is stored (compare-and-swap on its revision, fenced to this engine's leader key
//! and lease, with a rollback's unit objects in the same transaction). A failed compare is not an error: the next view
//! carries whatever won, and the decision is made again from it. Finished rollouts beyond the last
//! [`rollout::KEEP_FINISHED_PER_UNIT`] of every unit are deleted ([`rollout::expired`]), fenced the same way.
//!
//! A rebalance rollout (docs/rebalance.md) gets its steps here, when the engine first takes it up: the moves of
//! [`rebalance::plan`] on the scheduler's input. Each move the advance releases is checked again
//! ([`rebalance::check`]) on the cluster as it is then (a refused one is skipped, with the reason), and its target
//! is rewritten in the transaction that stores the progress.
//!
//! A drain (issue 38, docs/drain.md) gets its steps the same way, from [`drain::plan`]: a move per unit scheduled to
//! the machine, then a stop per unit that cannot leave it (and per global unit it runs). Each move the advance
//! releases goes where [`drain::place`] says on the cluster as it is then (its planned destination if that still
//! takes it); one that no machine takes fails (the drain pauses, naming why), one whose unit is in another rollout
//! waits for it.

use std::collections::BTreeSet;

use fleet_core::model::JobState;
use fleet_core::rollout::{self, Phase, Rollout, RolloutKind, RolloutProgress, RolloutState};
use fleet_core::scheduler::catalog::UnitCatalog;
use fleet_core::scheduler::entries::{EntryChanges, entry_changes_of_units};
use fleet_core::scheduler::{ScheduleInput, drain, rebalance};
use fleet_registry::{LeaderSession, RegistryError, Snapshot, SnapshotCluster};

/// Most moves one rebalance plans (its progress is one etcd value, and its moves one transaction at most).
pub const MAX_REBALANCE_MOVES: usize = 48;

/// What one [`drive`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Driven {
    /// When to look again (Unix ms), if a rollout waits for a time rather than for the cluster.
    pub wake_at_ms: Option<u64>,
    /// The registry revision of the last progress this drive stored, if any: a view older than it would decide
    /// again what was just decided (and fail its compare-and-swap).
    pub written_revision: Option<i64>,
}

/// The clock rollouts are driven by while this engine leads: its wall clock when it took the lead, advanced by its
/// monotonic clock since, so that a jump of the wall clock meanwhile moves no deadline; times earlier leaders
/// stored are brought into this lead by [`rollout::rebase`].
#[derive(Debug, Clone, Copy)]
pub struct LeaderClock {
    since_ms: u64,
    since: std::time::Instant,
}

impl LeaderClock {
    /// The clock of a lead taken now.
    pub fn start() -> LeaderClock {
        LeaderClock { since_ms: fleet_core::model::now_ms(), since: std::time::Instant::now() }
    }

    pub fn now_ms(&self) -> u64 {
        self.since_ms.saturating_add(u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX))
    }
}

/// Advances every rollout of `view` that is not final and stores what changed. `catalog`: the engine's parse
/// cache, for rebalance plans and checks; `clock`: this lead's ([`LeaderClock`]).
pub async fn drive(registry: &LeaderSession, view: &Snapshot, catalog: &mut UnitCatalog, clock: LeaderClock) -> Driven {
    let now = clock.now_ms();
    let cluster = SnapshotCluster(view);
    let mut wake: Option<u64> = None;
    let mut written_revision: Option<i64> = None;
    // Layout 2: every rollout once, for the entries each progress changes.
    let all = (view.layout_version() == Some(fleet_core::layout::LAYOUT_2)).then(|| view.rollouts());
    for (id, record) in view.rollout_records() {
        let Some(stored) = record.rollout() else { continue };
        if stored.state().is_final() {
            continue;
        }
        let mut current = stored.clone();
        if let Some(progress) = current.progress.as_mut() {
            rollout::rebase(progress, clock.since_ms, now);
        }
        if current.progress.is_none() {
            match current.spec.kind {
                RolloutKind::Rebalance => current.progress = Some(rebalance_steps(view, catalog)),
                RolloutKind::Drain => current.progress = Some(drain_steps(view, catalog, &current.spec.machine)),
                RolloutKind::Replace | RolloutKind::Restart => {}
            }
        }
        let mut advanced = rollout::advance(&current, &cluster, now);
        let moves = match current.spec.kind {
            RolloutKind::Rebalance => checked_moves(view, catalog, stored.progress.as_ref(), &mut advanced.progress),
            RolloutKind::Drain => {
                drain_moves(view, catalog, current.progress.as_ref(), &current.spec.machine, &mut advanced.progress)
            }
            RolloutKind::Replace | RolloutKind::Restart => Vec::new(),
        };
        if let Some(at) = advanced.wake_at_ms {
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        if stored.progress.as_ref() == Some(&advanced.progress) {
            continue;
        }
        let progress = &advanced.progress;
        let entries =
            all.as_deref().map_or_else(EntryChanges::default, |all| entries_with(view, all, &current, &advanced));
        match registry
            .write_rollout_progress_with_entries(view, id, progress, &advanced.roll_back, &moves, &entries)
            .await
        {
            Ok(Some(revision)) => {
                written_revision = Some(written_revision.map_or(revision, |r| r.max(revision)));
                let counts = rollout::phase_counts(progress);
                tracing::info!(rollout = %id, state = %progress.state, reason = %progress.reason, steps = ?counts,
                    "rollout progressed");
                if !advanced.roll_back.is_empty() {
                    tracing::warn!(rollout = %id, units = advanced.roll_back.len(), "rollout rolled back");
                }
            }
            Ok(None) => tracing::debug!(rollout = %id, "rollout progress changed meanwhile"),
            Err(e @ RegistryError::NotLeader { .. }) => {
                tracing::info!(rollout = %id, error = %e, "not storing rollout progress: leadership moved");
                return Driven { wake_at_ms: None, written_revision };
            }
            Err(e) => {
                tracing::warn!(rollout = %id, error = %e, "cannot store rollout progress; retrying on the next change")
            }
        }
    }
    collect_finished(registry, view).await;
    Driven { wake_at_ms: wake, written_revision }
}

/// Layout 2 (`all`: the view's rollouts): the schedule entries that `advanced` changes for the units of a replace or restart (a released step's
/// version, a restart token), to store with its progress. Units it rolls back are left to the engine's pass (their
/// objects change in the same transaction); a rebalance's or drain's moves carry their entries themselves.
fn entries_with(view: &Snapshot, all: &[Rollout], current: &Rollout, advanced: &rollout::Advanced) -> EntryChanges {
    if !matches!(current.spec.kind, RolloutKind::Replace | RolloutKind::Restart) {
        return EntryChanges::default();
    }
    let mut after = all.to_vec();
    if let Some(r) = after.iter_mut().find(|r| r.spec.id == current.spec.id) {
        r.progress = Some(advanced.progress.clone());
    }
    let rolled: BTreeSet<&str> = advanced.roll_back.iter().map(|u| u.name.as_str()).collect();
    let units: BTreeSet<&str> =
        current.spec.units.iter().map(|u| u.name.as_str()).filter(|u| !rolled.contains(u)).collect();
    entry_changes_of_units(view, &after, &units)
}

/// Units in a rollout that is not final, other than a rebalance or drain: a rebalance leaves them where they are, a
/// drain waits for that rollout to end before it moves them.
fn busy_units(rollouts: &[Rollout]) -> BTreeSet<&str> {
    rollouts
        .iter()
        .filter(|r| !r.state().is_final() && !r.spec.kind.plans_steps())
        .flat_map(|r| r.spec.units.iter().map(|u| u.name.as_str()))
        .collect()
}

/// The first progress of a rebalance: one pending step per planned move (none when the spread is already even).
fn rebalance_steps(view: &Snapshot, catalog: &mut UnitCatalog) -> RolloutProgress {
    let mut progress = RolloutProgress::default();
    match catalog.snapshot(view) {
        Ok(input) => {
            let rollouts = view.rollouts();
            let moves = rebalance::plan(&input, MAX_REBALANCE_MOVES, &busy_units(&rollouts));
            tracing::info!(moves = moves.len(), loads = ?rebalance::loads(&input), "rebalance planned");
            progress.steps = moves.iter().map(rollout::Move::step).collect();
            if moves.is_empty() {
                progress.reason = NOTHING_TO_MOVE.into();
            }
        }
        Err(e) => {
            progress.state = RolloutState::Paused;
            progress.reason = format!("paused: cannot read the cluster to plan the moves: {e}");
        }
    }
    progress
}

/// The first progress of a drain of `machine`: a move per unit scheduled there (to its planned destination, or
/// to `machine` itself where no machine takes it now: the step fails when released unless one does by then), then
/// a stop per unit that cannot leave and per global unit the machine runs (name order).
fn drain_steps(view: &Snapshot, catalog: &mut UnitCatalog, machine: &str) -> RolloutProgress {
    let mut progress = RolloutProgress::default();
    let input = match catalog.snapshot(view) {
        Ok(input) => input,
        Err(e) => {
            progress.state = RolloutState::Paused;
            progress.reason = format!("paused: cannot read the cluster to plan the drain: {e}");
            return progress;
        }
    };
    let plan = match drain::plan(&input, machine) {
        Ok(plan) => plan,
        Err(e) => {
            // The machine left: the engine reschedules its units as for any lost machine.
            progress.state = RolloutState::Done;
            progress.reason = format!("nothing to drain: {e}");
            return progress;
        }
    };
    tracing::info!(%machine, moves = plan.moves.len(), unplaced = plan.unplaced.len(), stays = plan.stays.len(),
        "drain planned");
    progress.steps = plan.moves.iter().map(rollout::Move::step).collect();
    for (unit, why) in &plan.unplaced {
        let stuck = rollout::Move { unit: unit.clone(), from: machine.to_string(), to: machine.to_string() };
        progress.steps.push(rollout::Step { detail: why.clone(), ..stuck.step() });
    }
    let mut stops: BTreeSet<&str> = plan.stays.iter().map(|(unit, _)| unit.as_str()).collect();
    stops.extend(
        input
            .units()
            .filter(|u| u.constraints.global && view.state_record(&u.name, machine).is_some())
            .map(|u| u.name.as_str()),
    );
    progress.steps.extend(stops.into_iter().map(|unit| rollout::Step::pending(unit, machine)));
    if progress.steps.is_empty() {
        progress.reason = "nothing to drain: the machine runs no unit".into();
    }
    progress
}

/// The moves of a drain of `machine` that `progress` releases now (steps that were pending in `before`, by
/// position: a step's destination may change here), each placed on the cluster as `view` shows it
/// ([`drain::place`]). A unit in another rollout goes back to pending until that rollout ends; a unit no machine
/// takes fails its step; one the scheduler moved meanwhile is followed to its new machine; one gone, or no longer
/// scheduled, is skipped; one that is not launched is done once its target moved (nothing to start).
fn drain_moves(
    view: &Snapshot,
    catalog: &mut UnitCatalog,
    before: Option<&RolloutProgress>,
    machine: &str,
    progress: &mut RolloutProgress,
) -> Vec<rollout::Move> {
    if progress.steps.is_empty() && progress.state == RolloutState::Done && progress.reason.is_empty() {
        progress.reason = "nothing to drain: the machine runs no unit".into();
    }
    let was_pending = |i: usize| before.and_then(|b| b.steps.get(i)).is_none_or(|s| s.phase == Phase::Pending);
    let released: Vec<usize> = (0..progress.steps.len())
        .filter(|&i| {
            let s = &progress.steps[i];
            s.phase == Phase::Updating && !s.is_stop(RolloutKind::Drain) && was_pending(i)
        })
        .collect();
    if released.is_empty() {
        return Vec::new();
    }
    let mut input: ScheduleInput = match catalog.snapshot(view) {
        Ok(input) => input,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the cluster to place drain moves; not releasing them");
            for &i in &released {
                progress.steps[i].phase = Phase::Pending;
            }
            return Vec::new();
        }
    };
    let rollouts = view.rollouts();
    let busy = |unit: &str| rollout::active_for(&rollouts, unit).filter(|r| !r.spec.kind.plans_steps());
    let mut accepted = Vec::new();
    for i in released {
        let step = &mut progress.steps[i];
        if let Some(other) = busy(&step.unit) {
            step.phase = Phase::Pending;
            step.released_ms = 0;
            step.detail = format!("waiting: the unit is in rollout {} ({})", other.spec.id, other.state());
            continue;
        }
        match drain::place(&input, &step.unit, machine, &step.machine) {
            Ok(to) => {
                let planned = rollout::Move { unit: step.unit.clone(), from: machine.to_string(), to: to.clone() };
                step.machine = to;
                if input.unit(&planned.unit).is_some_and(|u| u.desired != JobState::Launched) {
                    step.phase = Phase::Done;
                    step.detail = "moved; it is not launched, so nothing starts".into();
                }
                input = rebalance::moved(&input, &planned);
                accepted.push(planned);
            }
            Err(why) => match input.unit(&step.unit).map(|u| u.target.as_deref()) {
                // The scheduler moved it already (it follows a unit that moved, `MachineOf=`): the step follows it
                // there and is done once it runs there.
                Some(Some(elsewhere)) if elsewhere != machine => {
                    step.machine = elsewhere.to_string();
                    step.detail = "the engine scheduled it here meanwhile".into();
                }
                Some(Some(_)) => {
                    tracing::info!(unit = %step.unit, %machine, reason = %why, "drain move not made");
                    step.phase = Phase::Failed;
                    step.detail = why;
                }
                _ => {
                    step.phase = Phase::Skipped;
                    step.detail = why;
                }
            },
        }
    }
    accepted
}

/// Why a rebalance ended without a move.
pub const NOTHING_TO_MOVE: &str =
    "nothing to move: machine loads differ by at most 1, or no unit may move where it would help";

/// The moves `progress` releases now (steps that were pending in `before`), each checked on the cluster as `view`
/// shows it; a move refused there is skipped with the reason (it frees its slot for the next drive).
fn checked_moves(
    view: &Snapshot,
    catalog: &mut UnitCatalog,
    before: Option<&RolloutProgress>,
    progress: &mut RolloutProgress,
) -> Vec<rollout::Move> {
    if progress.steps.is_empty() && progress.state == RolloutState::Done && progress.reason.is_empty() {
        progress.reason = NOTHING_TO_MOVE.into();
    }
    let released = rollout::released_moves(before, progress);
    if released.is_empty() {
        return released;
    }
    let mut input = match catalog.snapshot(view) {
        Ok(input) => input,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the cluster to check rebalance moves; not releasing them");
            return Vec::new();
        }
    };
    let rollouts = view.rollouts();
    let busy = busy_units(&rollouts);
    let mut accepted = Vec::new();
    for m in released {
        match rebalance::check(&input, &m, &busy) {
            Ok(()) => {
                // The next move is checked on the cluster as this one leaves it.
                input = rebalance::moved(&input, &m);
                accepted.push(m);
            }
            Err(why) => {
                tracing::info!(unit = %m.unit, from = %m.from, to = %m.to, reason = %why, "rebalance move skipped");
                if let Some(step) = progress.steps.iter_mut().find(|s| s.unit == m.unit && s.machine == m.to) {
                    step.phase = Phase::Skipped;
                    step.detail = why;
                }
            }
        }
    }
    accepted
}

/// Whether `view` shows a rebalance that is not final.
pub fn rebalance_in_progress(view: &Snapshot) -> bool {
    view.rollouts().iter().any(|r| r.spec.kind == RolloutKind::Rebalance && !r.state().is_final())
}

/// The rebalance the engine stores on its own (`engine_rebalance`) at `now_ms`: two moves at a time, each healthy
/// as soon as the unit is active on its new machine, five minutes for a move, pause on a failure.
pub fn rebalance_spec(now_ms: u64) -> rollout::RolloutSpec {
    rollout::RolloutSpec {
        id: format!("rebalance-{now_ms}"),
        kind: RolloutKind::Rebalance,
        units: Vec::new(),
        max_unavailable: 2,
        min_healthy_ms: 0,
        health_timeout_ms: 300_000,
        on_failure: rollout::OnFailure::Pause,
        created_ms: now_ms,
        ..rollout::RolloutSpec::default()
    }
}

/// Whether `view` shows a rollout that is not final (one [`drive`] may advance).
pub fn any_running(view: &Snapshot) -> bool {
    view.rollout_records().values().any(|r| r.rollout().is_some_and(|r| !r.state().is_final()))
}

/// Deletes the finished rollouts beyond the last [`rollout::KEEP_FINISHED_PER_UNIT`] of every unit. A failure is
/// logged; the next view change tries again.
async fn collect_finished(registry: &LeaderSession, view: &Snapshot) {
    let rollouts = view.rollouts();
    let expired = rollout::expired(&rollouts, rollout::KEEP_FINISHED_PER_UNIT);
    if expired.is_empty() {
        return;
    }
    match registry.delete_rollouts(view, &expired).await {
        Ok(deleted) => tracing::info!(deleted, expired = expired.len(), "deleted finished rollouts"),
        Err(e) => tracing::warn!(error = %e, "cannot delete finished rollouts; retrying on the next change"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_core::rollout::Cluster as _;
    use fleet_registry::{Change, Keys};

    #[test]
    fn observations_and_holders_come_from_states_markers_and_presence() {
        let keys = Keys::new("/p");
        let kv = [
            (keys.machine_object("m1"), r#"{"id":"m1"}"#.to_string()),
            (keys.machine_object("m2"), r#"{"id":"m2"}"#.to_string()),
            (keys.unit_object("db.service"), r#"{"name":"db.service","hash":"h2"}"#.to_string()),
            (
                keys.state("db.service", "m1"),
                r#"{"hash":"h2","loadState":"loaded","activeState":"active","subState":"running","nRestarts":4}"#
                    .to_string(),
            ),
            (
                keys.state("db.service", "m2"),
                r#"{"hash":"h1","loadState":"loaded","activeState":"active","subState":"running"}"#.to_string(),
            ),
            (
                keys.state("db.service", "gone"),
                r#"{"hash":"h1","loadState":"loaded","activeState":"active","subState":"running"}"#.to_string(),
            ),
            (keys.unit_launched("db.service", "m1"), "h2".to_string()),
            (keys.unit_restarted("db.service", "m1"), "r1".to_string()),
        ];
        let changes =
            kv.iter().map(|(k, v)| (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 3, lease: 1 }));
        let snapshot = Snapshot::from_kvs(&keys, 3, changes);
        let c = SnapshotCluster(&snapshot);
        assert_eq!(c.holders("db.service"), ["m1", "m2"], "the machine that left is not a holder");
        let m1 = c.observe("db.service", "m1");
        assert_eq!(
            (
                m1.present,
                m1.hash.as_deref(),
                m1.running.as_deref(),
                m1.active_state.as_str(),
                m1.restarted_for.as_deref()
            ),
            (true, Some("h2"), Some("h2"), "active", Some("r1"))
        );
        let gone = c.observe("db.service", "gone");
        assert_eq!(m1.restarts, Some(4), "the published restart counter");
        assert!(!gone.present);
        assert_eq!(c.observe("db.service", "m2").restarts, None, "a state without a counter");
        assert_eq!(c.observe("db.service", "m2").running, None);
    }
}

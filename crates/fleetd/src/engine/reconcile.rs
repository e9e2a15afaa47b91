//! One leader reconcile pass against the registry (spec §6.4): registry view → [`UnitCatalog`] → engine snapshot
//! → [`plan_with_report`] → decisions applied in order as compare-and-swap writes → body garbage collection.
//! Consecutive decisions for distinct units share one all-or-nothing transaction (a pass placing 1,000 units
//! costs a handful of commits, not 1,000); when one of its compares fails, that group is applied one decision at
//! a time, which finds the conflicting decision and keeps the order.
//!
//! A decision whose compare fails (the registry changed since the view was taken) ends the pass: the rest of the
//! plan was computed from the same stale view, so the runner re-plans once the view has caught up. Every write
//! returns its revision; the runner waits for the view to reach the last one before planning again, so a pass
//! never decides from a view that lacks the previous pass's own decisions.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use tokio::time::{Instant, timeout_at};

use fleet_core::at_most_once::Absences;
use fleet_core::layout::{LAYOUT_2, moves_to_layout_2, ready_for_layout_2};
use fleet_core::scheduler::catalog::UnitCatalog;
use fleet_core::scheduler::entries::{Placed, entry_changes_placing};
use fleet_core::scheduler::schedule::{Decision, plan_with_report};
use fleet_core::scheduler::schedule_input::ScheduleInput;
use fleet_registry::{LeaderSession, MAX_PLACEMENTS_PER_TXN, PlacementWrite, RegistryError};

/// How a pass ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassOutcome {
    /// Every decision was applied (and garbage collected, if there was any).
    Complete,
    /// A decision's compare failed: the registry changed under the plan.
    Conflict { decision: String },
    /// The registry failed; the pass is retried on the next event or resync.
    Failed { error: String },
    /// The pass ran longer than its limit (the engine lease TTL) and was abandoned.
    TimedOut { limit: Duration },
    /// Leadership was lost or the engine is stopping.
    Interrupted,
}

impl fmt::Display for PassOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassOutcome::Complete => f.write_str("complete"),
            PassOutcome::Conflict { decision } => write!(f, "registry changed under the plan at: {decision}"),
            PassOutcome::Failed { error } => write!(f, "registry error: {error}"),
            PassOutcome::TimedOut { limit } => write!(f, "aborted after running longer than {limit:?}"),
            PassOutcome::Interrupted => f.write_str("interrupted"),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassReport {
    pub outcome: PassOutcome,
    /// Decisions planned.
    pub planned: usize,
    /// Decisions written.
    pub applied: usize,
    /// Units needing a machine that got none.
    pub unplaced: usize,
    /// Bodies deleted by garbage collection.
    pub collected: usize,
    /// Revision of the last write of this pass, to wait for before the next plan.
    pub last_write: Option<i64>,
    pub duration: Duration,
    /// When the engine's wait for a lost machine's at-most-once units ends next: run a pass then.
    pub at_most_once_wait_ends: Option<Instant>,
}

/// State kept by the leader across passes.
#[derive(Debug, Default)]
pub struct Reconciler {
    catalog: UnitCatalog,
    /// Bodies (hash, mod revision) this engine already deleted; skipped until the view stops showing them, so a
    /// lagging view does not cause repeated failing deletes.
    collected: HashSet<(String, i64)>,
    /// When the machines that at-most-once units are scheduled to were first seen absent.
    absences: Absences,
    /// How long after that those units wait before they are placed elsewhere (`fleet_core::at_most_once::margin`).
    at_most_once_margin: Duration,
}

impl Reconciler {
    pub fn new() -> Reconciler {
        Reconciler::default()
    }

    /// Forgets when machines were seen absent: a view that was not followed (not leading, disconnected) may have
    /// missed a machine coming back and going again, so the wait starts over from the next pass.
    pub fn forget_absences(&mut self) {
        self.absences = Absences::default();
    }

    /// The margin the engine waits after a machine's presence expired before it places the machine's
    /// at-most-once units elsewhere.
    pub fn with_at_most_once_margin(mut self, margin: Duration) -> Reconciler {
        self.at_most_once_margin = margin;
        self
    }

    /// Runs one pass on `view`. Every write goes through `registry`, the leader session (fenced to this engine's leader key and lease), so a pass of an
    /// engine deposed meanwhile writes nothing. `deadline` bounds the whole pass; `keep_going` is checked before
    /// every write (leadership still held, engine not stopping).
    pub async fn pass(
        &mut self,
        registry: &LeaderSession,
        view: &fleet_registry::Snapshot,
        deadline: Instant,
        keep_going: impl Fn() -> bool,
    ) -> PassReport {
        let started = Instant::now();
        let mut report = PassReport {
            outcome: PassOutcome::Complete,
            planned: 0,
            applied: 0,
            unplaced: 0,
            collected: 0,
            last_write: None,
            duration: Duration::ZERO,
            at_most_once_wait_ends: None,
        };
        let snapshot = match self.catalog.snapshot(view) {
            Ok(s) => s,
            Err(e) => {
                // Cannot happen with a registry view (names and IDs are map keys); reported rather than panicking.
                report.outcome = PassOutcome::Failed { error: e.to_string() };
                return report;
            }
        };
        let now = Instant::now();
        let targets = snapshot.units().filter(|u| u.constraints.at_most_once).filter_map(|u| u.target.as_deref());
        self.absences.observe(targets, |m| snapshot.machine_idx(m).is_some(), now);
        let snapshot = snapshot.with_waiting(self.absences.waiting(now, self.at_most_once_margin));
        report.at_most_once_wait_ends = self.absences.next_wake(now, self.at_most_once_margin);
        let plan = plan_with_report(&snapshot);
        report.planned = plan.decisions.len();
        report.unplaced = plan.unplaced.len();
        for u in &plan.unplaced {
            tracing::debug!(unit = %u.unit, reason = %u.reason, "Unable to schedule Job({}): {}", u.unit, u.reason);
        }
        let limit = deadline.saturating_duration_since(started);
        if view.layout_version() == Some(LAYOUT_2) {
            self.write_entries(registry, view, &snapshot, &plan.decisions, deadline, &keep_going, &mut report).await;
            if report.outcome == PassOutcome::Complete && keep_going() {
                match timeout_at(deadline, write_drained(registry, view)).await {
                    Ok(Ok(Some(revision))) => report.last_write = Some(revision),
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the units drains keep stopped"),
                    Err(_) => {
                        report.outcome = PassOutcome::TimedOut { limit: deadline.saturating_duration_since(started) }
                    }
                }
            }
        }
        let layout_1_decisions: &[Decision] =
            if view.layout_version() == Some(LAYOUT_2) { &[] } else { &plan.decisions };
        let mut chunks =
            fleet_registry::txn_batches(layout_1_decisions, MAX_PLACEMENTS_PER_TXN, Decision::unit).into_iter();
        while report.outcome == PassOutcome::Complete {
            let Some(chunk) = chunks.next() else { break };
            if !keep_going() {
                report.outcome = PassOutcome::Interrupted;
                break;
            }
            // The whole chunk in one transaction (one commit for many decisions); if any compare fails, nothing
            // was written and the decisions are applied one by one to find the one that conflicts.
            if chunk.len() > 1 {
                let changes: Vec<PlacementWrite<'_>> = chunk.iter().map(|d| placement(d, &snapshot)).collect();
                match timeout_at(deadline, registry.placements(&changes)).await {
                    Err(_) => {
                        report.outcome = PassOutcome::TimedOut { limit };
                        break;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(decisions = chunk.len(), error = %e, "cannot apply scheduling decisions");
                        report.outcome = PassOutcome::Failed { error: e.to_string() };
                        break;
                    }
                    Ok(Ok(Some(revision))) => {
                        report.applied += chunk.len();
                        report.last_write = Some(revision);
                        chunk.iter().for_each(|d| log_applied(d, revision));
                        continue;
                    }
                    Ok(Ok(None)) => {}
                }
            }
            for decision in chunk {
                if !keep_going() {
                    report.outcome = PassOutcome::Interrupted;
                    break;
                }
                let written = match timeout_at(deadline, registry.placement(&placement(decision, &snapshot))).await {
                    Ok(result) => result,
                    Err(_) => {
                        report.outcome = PassOutcome::TimedOut { limit };
                        break;
                    }
                };
                match written {
                    Ok(Some(revision)) => {
                        report.applied += 1;
                        report.last_write = Some(revision);
                        log_applied(decision, revision);
                    }
                    Ok(None) => {
                        tracing::info!(
                            unit = %decision.unit(),
                            machine = %decision.machine(),
                            "registry changed before `{decision}` could be applied; re-planning on the next change"
                        );
                        report.outcome = PassOutcome::Conflict { decision: decision.to_string() };
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(unit = %decision.unit(), machine = %decision.machine(), error = %e,
                            "cannot apply scheduling decision");
                        report.outcome = PassOutcome::Failed { error: e.to_string() };
                        break;
                    }
                }
            }
        }
        if report.outcome == PassOutcome::Complete && keep_going() {
            match timeout_at(deadline, self.collect_garbage(registry, view)).await {
                Ok(Ok(n)) => report.collected = n,
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot garbage-collect unit bodies"),
                Err(_) => report.outcome = PassOutcome::TimedOut { limit },
            }
        }
        if report.outcome == PassOutcome::Complete && keep_going() {
            match timeout_at(deadline, self.move_to_layout_2(registry, view, &snapshot)).await {
                Ok(Ok(Some(revision))) => report.last_write = Some(revision),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot move the registry to layout 2"),
                Err(_) => report.outcome = PassOutcome::TimedOut { limit },
            }
        }
        report.duration = started.elapsed();
        report
    }

    /// Layout 2: this pass's decisions and every other entry change (`entries::entry_changes_placing`: versions,
    /// desired states, restart tokens, global units on every machine, leftovers) in one set of fenced writes.
    /// Units whose object changed since the view are not written and end the pass as a conflict: the view that
    /// shows their change brings the next pass.
    #[allow(clippy::too_many_arguments)]
    async fn write_entries(
        &self,
        registry: &LeaderSession,
        view: &fleet_registry::Snapshot,
        input: &ScheduleInput,
        decisions: &[Decision],
        deadline: Instant,
        keep_going: &impl Fn() -> bool,
        report: &mut PassReport,
    ) {
        let placed = Placed::from_decisions(decisions, input);
        let rollouts = view.rollouts();
        let changes = entry_changes_placing(view, &rollouts, |u| is_global(input, u.name), &placed);
        if changes.is_empty() {
            return;
        }
        if !keep_going() {
            report.outcome = PassOutcome::Interrupted;
            return;
        }
        let limit = deadline.saturating_duration_since(Instant::now());
        match timeout_at(deadline, registry.write_entries(&changes)).await {
            Err(_) => report.outcome = PassOutcome::TimedOut { limit },
            Ok(Err(e)) => {
                tracing::warn!(changes = changes.put.len() + changes.delete.len(), error = %e,
                    "cannot write schedule entries");
                report.outcome = PassOutcome::Failed { error: e.to_string() };
            }
            Ok(Ok(written)) => {
                report.last_write = written.revision;
                // Decisions count as applied once their units' entries are written.
                report.applied = decisions.iter().filter(|d| !written.conflicts.iter().any(|u| u == d.unit())).count();
                for decision in decisions.iter().filter(|d| !written.conflicts.iter().any(|u| u == d.unit())) {
                    log_applied(decision, written.revision.unwrap_or(0));
                }
                if let Some(unit) = written.conflicts.first() {
                    tracing::info!(units = ?written.conflicts,
                        "registry changed before the schedule entries of {unit} could be written; re-planning on the next change");
                    report.outcome = PassOutcome::Conflict { decision: format!("schedule entries of {unit}") };
                }
            }
        }
    }

    /// The switch to layout 2 (docs/lab/scoped-views.md), once every present machine's fleetd runs it
    /// (`layout::ready_for_layout_2`): every unit still in layout 1 moved, one fenced transaction each, then
    /// `P/version` raised to 2. In layout 2, units a layout-1 writer left behind during the switch are moved the
    /// same way. Stops at the first unit that changed under it (the next pass decides it again). The revision of
    /// the last write, if any.
    async fn move_to_layout_2(
        &self,
        registry: &LeaderSession,
        view: &fleet_registry::Snapshot,
        input: &ScheduleInput,
    ) -> Result<Option<i64>, RegistryError> {
        let layout = view.layout_version();
        if layout.is_none() {
            // `P/version` deleted or overwritten by another client: without it the API and this engine would write
            // layout 1, which agents on scoped views never see. The switch is one way, and a cluster can be at
            // layout 2 only when every machine runs it, so that is what goes back.
            let to = if ready_for_layout_2(view).is_ok() { LAYOUT_2 } else { 1 };
            let repaired = registry.repair_layout(to).await?;
            if repaired.is_some() {
                tracing::warn!(layout = to, "the registry's layout version was missing or unreadable; put back");
            }
            return Ok(repaired);
        }
        if layout == Some(LAYOUT_2) {
            // Only what a layout-1 writer left behind during the switch.
        } else if layout != Some(1) || ready_for_layout_2(view).is_err() {
            return Ok(None);
        }
        let rollouts = view.rollouts();
        let moves = moves_to_layout_2(view, &rollouts, |u| is_global(input, u.name));
        let (mut moved, mut last) = (0, None);
        for unit in &moves {
            let Some(revision) = registry.move_unit(unit).await? else {
                tracing::info!(unit = %unit.unit, moved, "unit changed while moving to layout 2; moving it on the next pass");
                return Ok(last);
            };
            (moved, last) = (moved + 1, Some(revision));
        }
        if moved > 0 {
            tracing::info!(units = moved, "units moved to registry layout 2");
        }
        if layout == Some(LAYOUT_2) {
            return Ok(last);
        }
        let Some(revision) = registry.switch_layout(1, LAYOUT_2).await? else {
            tracing::info!("the layout version changed under the switch; deciding again on the next pass");
            return Ok(last);
        };
        tracing::info!(machines = view.machines().count(), "registry switched to layout 2");
        Ok(Some(revision))
    }

    /// Deletes bodies no unit refers to in `view` (spec L9), skipping those this engine already deleted.
    async fn collect_garbage(
        &mut self,
        registry: &LeaderSession,
        view: &fleet_registry::Snapshot,
    ) -> Result<usize, RegistryError> {
        self.collected.retain(|(hash, rev)| view.bodies().get(hash.as_str()).is_some_and(|b| b.mod_revision == *rev));
        let candidates: Vec<(String, i64)> =
            view.unreferenced_bodies().into_iter().filter(|c| !self.collected.contains(c)).collect();
        if candidates.is_empty() {
            return Ok(0);
        }
        let deleted = registry.delete_bodies(&candidates).await?;
        tracing::info!(deleted, candidates = candidates.len(), "garbage-collected unreferenced unit bodies");
        // Those not deleted were re-put meanwhile: their mod revision changed, so they are new candidates anyway.
        self.collected.extend(candidates);
        Ok(deleted)
    }
}

/// Whether a unit is global, as its parsed body says (`None`: it does not parse, so it is not in the input).
/// Layout 2: each machine's `drained` key made to name what drains keep stopped there
/// (`entries::drained_changes`): the only place its scoped agent learns it. The revision of the last write.
async fn write_drained(
    registry: &LeaderSession,
    view: &fleet_registry::Snapshot,
) -> Result<Option<i64>, RegistryError> {
    let mut last = None;
    for (machine, units) in fleet_core::scheduler::entries::drained_changes(view, &view.rollouts()) {
        if let Some(revision) = registry.write_drained(&machine, units.as_ref()).await? {
            tracing::info!(%machine, units = ?units.as_ref().map(|u| &u.units), "drained units written");
            last = Some(revision);
        }
    }
    Ok(last)
}

fn is_global(input: &ScheduleInput, unit: &str) -> Option<bool> {
    input.unit(unit).map(|u| u.constraints.global)
}

/// A decision as a registry write (layout 1). An at-most-once unit leaves a machine that went away only while that
/// machine is still absent ([`Decision::leaves_absent_machine`]).
fn placement<'d>(decision: &'d Decision, input: &ScheduleInput) -> PlacementWrite<'d> {
    match decision {
        Decision::Unschedule { unit, machine, .. } if decision.leaves_absent_machine(input) => {
            PlacementWrite::UnscheduleFromAbsent { unit, machine }
        }
        Decision::Unschedule { unit, machine, .. } => PlacementWrite::Unschedule { unit, machine },
        Decision::Schedule { unit, machine, .. } => PlacementWrite::Schedule { unit, machine },
    }
}

fn log_applied(decision: &Decision, revision: i64) {
    match decision {
        Decision::Unschedule { unit, machine, reason } => {
            tracing::info!(unit = %unit, machine = %machine, reason = %reason, revision, "unscheduled unit");
        }
        Decision::Schedule { unit, machine, reason } => {
            tracing::info!(unit = %unit, machine = %machine, reason = %reason, revision, "scheduled unit");
        }
    }
}

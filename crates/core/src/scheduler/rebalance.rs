//! Rebalancing (issue 14 item 4, docs/rebalance.md), pure: which units to move so that machines carry an even
//! number of units, without breaking a constraint and without touching a unit that asked to stay.
//!
//! * [`plan`]: the moves, one at a time, each from a most-loaded machine to a least-loaded one whose loads differ
//!   by at least 2, the unit checked with the scheduler's own [`ClusterView::fit`] on the cluster as the earlier
//!   moves leave it (only [`Fit::Ok`]: a move never displaces). Loads are the scheduler's (units counted present,
//!   globals included), so every move lowers the sum of squared loads by at least 2: the spread never gets worse
//!   and the plan ends.
//! * [`check`]: the same decision for one planned move at the moment the engine releases it (the cluster may have
//!   changed since the plan).
//! * [`stays`]: why a unit is never moved: `Global=`, `MachineID=`, `MachineOf=` (either side), `Replaces=`, a
//!   conflict with a global unit (moving it could change where globals run), `[X-Fleet] Rebalance=false`, or a
//!   rollout in progress.

use std::collections::BTreeSet;
use std::fmt;

use super::fit::Fit;
use super::placement::{ClusterView, MachineIdx, UnitIdx};
use super::schedule_input::ScheduleInput;
use crate::rollout::Move;

/// Why rebalancing leaves a unit where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stay {
    Global,
    MachineId,
    MachineOf,
    Followed,
    Replaces,
    ConflictsWithGlobal,
    AskedToStay,
    InRollout,
}

impl fmt::Display for Stay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stay::Global => "it is global",
            Stay::MachineId => "it is pinned by MachineID=",
            Stay::MachineOf => "it follows a peer (MachineOf=)",
            Stay::Followed => "another unit follows it (MachineOf=)",
            Stay::Replaces => "it replaces units (Replaces=)",
            Stay::ConflictsWithGlobal => "it conflicts with a global unit",
            Stay::AskedToStay => "it asked to stay (Rebalance=false)",
            Stay::InRollout => "it is in a rollout in progress",
        })
    }
}

/// Why unit `u` never moves, if it does not.
fn stay_reason(input: &ScheduleInput, view: &ClusterView<'_>, u: UnitIdx, busy: &BTreeSet<&str>) -> Option<Stay> {
    let unit = &input.units[u];
    let c = &unit.spec.constraints;
    if c.global {
        Some(Stay::Global)
    } else if c.machine_id.is_some() {
        Some(Stay::MachineId)
    } else if !c.machine_of.is_empty() {
        Some(Stay::MachineOf)
    } else if view.is_followed(u) {
        Some(Stay::Followed)
    } else if !c.replaces.is_empty() {
        Some(Stay::Replaces)
    } else if view.touches_globals(u) {
        Some(Stay::ConflictsWithGlobal)
    } else if c.stays {
        Some(Stay::AskedToStay)
    } else if busy.contains(unit.spec.name.as_str()) {
        Some(Stay::InRollout)
    } else {
        None
    }
}

/// Why rebalancing never moves `unit` (`None`: it may move). `busy`: units in a rollout that is not final.
pub fn stays(input: &ScheduleInput, unit: &str, busy: &BTreeSet<&str>) -> Option<Stay> {
    let &u = input.unit_index.get(unit)?;
    stay_reason(input, &ClusterView::new(input), u, busy)
}

/// Up to `max_moves` moves towards an even spread, in the order to make them; empty when the loads already differ
/// by at most 1 or nothing movable fits where it would help. Units in `busy` (in a rollout) stay, as do those
/// [`stays`] names; a unit moves at most once.
pub fn plan(input: &ScheduleInput, max_moves: usize, busy: &BTreeSet<&str>) -> Vec<Move> {
    let mut view = ClusterView::new(input);
    let mut moved: BTreeSet<UnitIdx> = BTreeSet::new();
    let mut moves = Vec::new();
    while moves.len() < max_moves {
        let Some((u, from, to)) = next_move(input, &view, &moved, busy) else { break };
        view.remove(u);
        view.place(u, to);
        moved.insert(u);
        moves.push(Move {
            unit: view.unit_name(u).to_string(),
            from: view.machine_id(from).to_string(),
            to: view.machine_id(to).to_string(),
        });
    }
    moves
}

/// The first movable unit (in name order) on the most-loaded machine that fits the least-loaded machine at least
/// 2 below it; machines tried from the most loaded down and from the least loaded up (ties by machine ID).
fn next_move(
    input: &ScheduleInput,
    view: &ClusterView<'_>,
    moved: &BTreeSet<UnitIdx>,
    busy: &BTreeSet<&str>,
) -> Option<(UnitIdx, MachineIdx, MachineIdx)> {
    let loads: Vec<(usize, MachineIdx)> = view.machines_by_load().collect();
    for &(high, from) in loads.iter().rev() {
        for &(low, to) in &loads {
            if high < low + 2 {
                break;
            }
            let found = view
                .placed_on(from)
                .filter(|u| !moved.contains(u))
                .filter(|&u| stay_reason(input, view, u, busy).is_none())
                .find(|&u| view.fit(u, to) == Fit::Ok);
            if let Some(u) = found {
                return Some((u, from, to));
            }
        }
    }
    None
}

/// Whether `planned` may be made now, on `input` (the cluster as it is when the engine releases the move): the
/// unit is still scheduled on `from`, may move, fits `to` without displacing anything, and `from` carries at
/// least 2 units more than `to` (so the move still evens the spread). The error says why not.
pub fn check(input: &ScheduleInput, planned: &Move, busy: &BTreeSet<&str>) -> Result<(), String> {
    let &u = input.unit_index.get(&planned.unit).ok_or("the unit is gone")?;
    let view = ClusterView::new(input);
    let from = input.machine_idx(&planned.from).ok_or("the machine it was on left")?;
    let to = input.machine_idx(&planned.to).ok_or("the destination left the cluster")?;
    if view.placement(u) != Some(from) {
        return Err("the unit is no longer scheduled on its machine".into());
    }
    if let Some(reason) = stay_reason(input, &view, u, busy) {
        return Err(format!("not moved: {reason}"));
    }
    match view.fit(u, to) {
        Fit::Ok => {}
        other => return Err(format!("the destination refuses it: {other}")),
    }
    let (high, low) = (view.load(from), view.load(to));
    if high < low + 2 {
        return Err(format!("no longer evens the spread: {high} units on its machine, {low} on the destination"));
    }
    Ok(())
}

/// `input` with `planned` made: the unit's target is its destination.
pub fn moved(input: &ScheduleInput, planned: &Move) -> ScheduleInput {
    let units = input.units().cloned().map(|mut u| {
        if u.name == planned.unit {
            u.target = Some(planned.to.clone());
        }
        u
    });
    ScheduleInput::new(units, input.machines().iter().cloned())
        .expect("the same units and machines, one target changed")
}

/// Units counted present per machine (machine-ID order), the loads a plan evens.
pub fn loads(input: &ScheduleInput) -> Vec<(String, usize)> {
    let view = ClusterView::new(input);
    (0..input.machines.len()).map(|m| (view.machine_id(m).to_string(), view.load(m))).collect()
}

#[cfg(test)]
mod tests;

//! Draining a machine (issue 38, docs/drain.md), pure: where each unit scheduled to the machine goes, and which
//! units cannot leave it. The engine leader stores the [`plan`] as a drain rollout's steps and checks each move
//! again with [`place`] when it releases it; `fleetctl plan drain` and the cluster page show the same plan.
//!
//! * A unit **moves** to the least-loaded other machine that takes it with the scheduler's own
//!   [`ClusterView::fit`] (only [`Fit::Ok`]: a move never displaces a unit), on the cluster as the earlier moves
//!   leave it. So `Conflicts=`, `MachineMetadata=` and cordons hold, and a unit that follows another with
//!   `MachineOf=` is planned after it, to the machine it went to.
//! * A unit **stays** (and the drain stops it there, after every move) when no other machine can ever take it:
//!   `MachineID=` names the machine, or it follows such a unit with `MachineOf=`. Global units are not the
//!   scheduler's: the engine adds a stop for each global unit the machine runs.
//! * A unit that could leave but that no machine takes now is **unplaced**, with each machine's verdict: its step
//!   fails when released, which pauses the drain until it is resumed (tried again) or the unit is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::fit::Fit;
use super::placement::{ClusterView, MachineIdx, UnitIdx};
use super::schedule_input::ScheduleInput;
use crate::rollout::Move;

/// Why a unit cannot leave the drained machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stay {
    /// `MachineID=` names the machine.
    Pinned,
    /// It follows (`MachineOf=`) a unit that stays.
    Follows(String),
}

impl fmt::Display for Stay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stay::Pinned => f.write_str("pinned to the machine by MachineID="),
            Stay::Follows(peer) => write!(f, "follows {peer} (MachineOf=), which stays"),
        }
    }
}

/// What draining a machine does with the units scheduled to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    /// In the order to make them (a `MachineOf=` peer before its followers).
    pub moves: Vec<Move>,
    /// Units no other machine takes now, each with why (every machine's verdict).
    pub unplaced: Vec<(String, String)>,
    /// Units that cannot leave the machine: the drain stops them there, last.
    pub stays: Vec<(String, Stay)>,
}

/// The drain of `machine` on `input`: every non-global unit scheduled there (counted present: desired state not
/// `inactive`) is moved, unplaced or stays. `Err` when the machine is not in `input`.
pub fn plan(input: &ScheduleInput, machine: &str) -> Result<DrainPlan, String> {
    let from = input.machine_idx(machine).ok_or_else(|| format!("machine {machine} is not in the cluster"))?;
    let mut view = ClusterView::new(input);
    let on: Vec<UnitIdx> = view.placed_on(from).collect();
    let mut plan = DrainPlan::default();
    let stays = staying(input, &on);
    let mut done: BTreeSet<UnitIdx> = stays.keys().copied().collect();
    let mut left: Vec<UnitIdx> = on.iter().copied().filter(|u| !done.contains(u)).collect();
    while !left.is_empty() {
        // Next: the first unit (name order) whose peers on this machine are planned already; in a `MachineOf=`
        // cycle none is, and the first one goes.
        let ready = |u: &UnitIdx| peers_on(input, &on, *u).iter().all(|p| done.contains(p));
        let pick = left.iter().position(ready).unwrap_or(0);
        let u = left.remove(pick);
        done.insert(u);
        view.remove(u);
        match destination(&view, u, from) {
            Ok(to) => {
                view.place(u, to);
                plan.moves.push(Move {
                    unit: view.unit_name(u).to_string(),
                    from: machine.to_string(),
                    to: view.machine_id(to).to_string(),
                });
            }
            Err(why) => {
                view.place(u, from);
                plan.unplaced.push((view.unit_name(u).to_string(), why));
            }
        }
    }
    plan.stays = stays.into_iter().map(|(u, why)| (input.units[u].spec.name.clone(), why)).collect();
    plan.stays.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(plan)
}

/// Where `unit`, scheduled to machine `from`, goes now: `planned` if it still takes it, else the least-loaded other
/// machine that does. The error says why no machine does (or that the unit is no longer on `from`).
pub fn place(input: &ScheduleInput, unit: &str, from: &str, planned: &str) -> Result<String, String> {
    let &u = input.unit_index.get(unit).ok_or("the unit is gone")?;
    let from_idx = input.machine_idx(from).ok_or("the drained machine left the cluster")?;
    let mut view = ClusterView::new(input);
    if view.placement(u) != Some(from_idx) {
        return Err("the unit is no longer scheduled on the drained machine".into());
    }
    view.remove(u);
    if let Some(to) = input.machine_idx(planned).filter(|&to| to != from_idx && view.fit(u, to) == Fit::Ok) {
        return Ok(view.machine_id(to).to_string());
    }
    destination(&view, u, from_idx).map(|to| view.machine_id(to).to_string())
}

/// The least-loaded machine other than `from` that takes `u` without displacing anything (ties by machine ID), or
/// every machine's verdict.
fn destination(view: &ClusterView<'_>, u: UnitIdx, from: MachineIdx) -> Result<MachineIdx, String> {
    let mut verdicts = Vec::new();
    for (_, m) in view.machines_by_load() {
        if m == from {
            continue;
        }
        match view.fit(u, m) {
            Fit::Ok => return Ok(m),
            other => verdicts.push(format!("{}: {other}", short(view.machine_id(m)))),
        }
    }
    if verdicts.is_empty() {
        return Err("no other machine in the cluster".into());
    }
    Err(format!("no other machine takes it: {}", verdicts.join("; ")))
}

/// The units among `on` that cannot leave: pinned ones, and (transitively) those following one that stays.
fn staying(input: &ScheduleInput, on: &[UnitIdx]) -> BTreeMap<UnitIdx, Stay> {
    let mut stays: BTreeMap<UnitIdx, Stay> = on
        .iter()
        .copied()
        .filter(|&u| input.units[u].spec.constraints.machine_id.is_some())
        .map(|u| (u, Stay::Pinned))
        .collect();
    loop {
        let follower = on
            .iter()
            .copied()
            .filter(|u| !stays.contains_key(u))
            .find_map(|u| peers_on(input, on, u).into_iter().find(|p| stays.contains_key(p)).map(|p| (u, p)));
        let Some((u, peer)) = follower else { return stays };
        stays.insert(u, Stay::Follows(input.units[peer].spec.name.clone()));
    }
}

/// The `MachineOf=` peers of `u` among `on`.
fn peers_on(input: &ScheduleInput, on: &[UnitIdx], u: UnitIdx) -> Vec<UnitIdx> {
    input.units[u]
        .spec
        .constraints
        .machine_of
        .iter()
        .filter_map(|peer| input.unit_index.get(peer).copied())
        .filter(|p| on.contains(p) && *p != u)
        .collect()
}

fn short(machine: &str) -> &str {
    machine.get(..8).unwrap_or(machine)
}

#[cfg(test)]
mod tests;

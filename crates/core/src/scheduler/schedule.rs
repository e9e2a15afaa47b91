//! One reconcile pass of the engine as a pure function (spec §6.4): snapshot in, ordered decisions out.
//!
//! Pass 1 walks the scheduled units in name order and unschedules those that must leave their machine (desired
//! `inactive`, machine gone, no longer able to run there). Pass 2 places every unscheduled unit whose desired
//! state is not `inactive`, in name order, on the least-loaded able machine (ties by
//! machine ID). Deliberate refinements of the original, each following the spec's Rec:
//! * `Replaces=` (B1): the replaced unit always moves and the replacer stays; the replaced unit's new machine
//!   passes the normal fit check. A replacer placed next to units it replaces displaces them in the same pass.
//! * Circular `Replaces=` (B2): a unit whose circular partner is scheduled anywhere is unschedulable.
//! * Longer `Replaces=` cycles, also through `MachineOf=` followers (issue 14 item 3): inside a cycle nobody
//!   displaces ([`super::fit::Rejection::ReplaceCycle`]), so the schedule settles instead of displacing around
//!   the cycle on every pass.
//! * Order (B17): units, globals and machines are always taken in name/ID order, so a pass is deterministic.
//! * `MachineOf=` followers move with their peer in the same pass, whatever their names.
//! * At-most-once units (`AtMostOnce=true`) of a machine that went away keep their target while the input says
//!   the engine is still waiting the margin out for that machine (`ScheduleInput::with_waiting`), and afterwards
//!   for as long as no present machine is able to run them; then they move.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use super::fit::{Fit, Rejection, UnitList};
use super::placement::{ClusterView, MachineIdx, Placement, UnitIdx};
use super::schedule_input::ScheduleInput;
use crate::model::JobState;

/// One change to the schedule, to be applied in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Remove the unit's `target` (it was `machine`).
    Unschedule { unit: String, machine: String, reason: UnscheduleReason },
    /// Set the unit's `target` to `machine` (it had none).
    Schedule { unit: String, machine: String, reason: ScheduleReason },
}

impl Decision {
    pub fn unit(&self) -> &str {
        match self {
            Decision::Unschedule { unit, .. } | Decision::Schedule { unit, .. } => unit,
        }
    }

    pub fn machine(&self) -> &str {
        match self {
            Decision::Unschedule { machine, .. } | Decision::Schedule { machine, .. } => machine,
        }
    }

    /// An at-most-once unit leaving a machine that went away: written only while that machine is still absent
    /// (had it come back meanwhile, its agent may be running the unit again). The one rule for both layouts.
    pub fn leaves_absent_machine(&self, input: &ScheduleInput) -> bool {
        matches!(self, Decision::Unschedule { unit, reason: UnscheduleReason::MachineWentAway { .. }, .. }
            if input.unit(unit).is_some_and(|u| u.constraints.at_most_once))
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Unschedule { unit, machine, reason } => {
                write!(f, "unschedule Unit({unit}) from Machine({machine}): {reason}")
            }
            Decision::Schedule { unit, machine, reason } => {
                write!(f, "schedule Unit({unit}) to Machine({machine}): {reason}")
            }
        }
    }
}

/// Why a unit leaves its machine. Texts follow the original engine's task reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnscheduleReason {
    /// Desired state is `inactive`.
    TargetStateInactive,
    /// The machine is no longer present.
    MachineWentAway { machine: String },
    /// The machine can no longer run the unit.
    UnableToRun { machine: String, rejection: Rejection },
    /// A unit that replaces this one was just placed on the machine.
    Displaced { machine: String, replacer: String },
}

impl fmt::Display for UnscheduleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnscheduleReason::TargetStateInactive => f.write_str("target state inactive"),
            UnscheduleReason::MachineWentAway { machine } => write!(f, "target Machine({machine}) went away"),
            UnscheduleReason::UnableToRun { machine, rejection } => {
                write!(f, "target Machine({machine}) unable to run unit: {rejection}")
            }
            UnscheduleReason::Displaced { machine, replacer } => {
                write!(f, "target Machine({machine}) is taken by Unit({replacer}), which replaces this unit")
            }
        }
    }
}

/// Why and how a unit was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleReason {
    pub desired: JobState,
    pub placement: Placement,
    /// Units on the machine that this one replaces; they are unscheduled just before.
    pub replacing: Vec<String>,
}

impl fmt::Display for ScheduleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "target state {} and unit not scheduled", self.desired)?;
        match self.placement {
            Placement::LeastLoaded { load } => write!(f, "; least-loaded able machine ({load} units)")?,
        }
        if !self.replacing.is_empty() {
            write!(f, "; replacing {}", UnitList(&self.replacing))?;
        }
        Ok(())
    }
}

/// A unit that needs a machine and got none in this pass; it is retried next pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unplaced {
    pub unit: String,
    pub reason: UnplacedReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnplacedReason {
    /// The cluster has no machine at all.
    NoMachines,
    /// No machine is able to run the unit (see `explain` for each machine's reason).
    NoMachineAbleToRun,
}

impl fmt::Display for UnplacedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UnplacedReason::NoMachines => "zero agents available",
            UnplacedReason::NoMachineAbleToRun => "no agents able to run job",
        })
    }
}

/// The outcome of one pass: decisions in execution order, and the units left waiting (name order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub decisions: Vec<Decision>,
    pub unplaced: Vec<Unplaced>,
}

/// The decisions of one reconcile pass, in execution order.
pub fn plan(snapshot: &ScheduleInput) -> Vec<Decision> {
    plan_with_report(snapshot).decisions
}

/// [`plan`], also reporting the units that need a machine and got none.
pub fn plan_with_report(snapshot: &ScheduleInput) -> Plan {
    let mut pass = Pass { view: ClusterView::new(snapshot), snapshot, decisions: Vec::new(), pending: BTreeSet::new() };
    pass.unschedule_misplaced();
    let unplaced = pass.place_pending();
    let unplaced = unplaced
        .into_iter()
        .map(|u| Unplaced {
            unit: pass.view.unit_name(u).to_string(),
            reason: if snapshot.machines.is_empty() {
                UnplacedReason::NoMachines
            } else {
                UnplacedReason::NoMachineAbleToRun
            },
        })
        .collect();
    Plan { decisions: pass.decisions, unplaced }
}

struct Pass<'s> {
    snapshot: &'s ScheduleInput,
    view: ClusterView<'s>,
    decisions: Vec<Decision>,
    /// Units to place in pass 2, taken in name order.
    pending: BTreeSet<UnitIdx>,
}

impl Pass<'_> {
    /// Pass 1: scheduled units that must leave their machine.
    fn unschedule_misplaced(&mut self) {
        let snapshot = self.snapshot;
        for (u, unit) in snapshot.units.iter().enumerate() {
            let spec = &unit.spec;
            if spec.constraints.global {
                continue;
            }
            let wants_machine = spec.desired != JobState::Inactive;
            let Some(target) = &spec.target else {
                if wants_machine {
                    self.pending.insert(u);
                }
                continue;
            };
            if !wants_machine {
                self.push_unschedule(u, target, UnscheduleReason::TargetStateInactive);
                continue;
            }
            let Some(m) = snapshot.machine_idx(target) else {
                if spec.constraints.at_most_once
                    && (snapshot.at_most_once_waits_for(target)
                        || !(0..snapshot.machines.len()).any(|m| !matches!(self.view.fit(u, m), Fit::Rejected(_))))
                {
                    // The lost machine may still be stopping it, or no machine could take it: it stays scheduled
                    // there, shown in doubt, and resumes there if the machine comes back first (docs/at-most-once.md).
                    continue;
                }
                self.push_unschedule(u, target, UnscheduleReason::MachineWentAway { machine: target.clone() });
                self.pending.insert(u);
                continue;
            };
            if self.view.placement(u) != Some(m) {
                continue; // already moved off by a peer leaving earlier in this pass
            }
            if let Fit::Rejected(rejection) = self.view.fit(u, m) {
                self.unschedule(u, m, UnscheduleReason::UnableToRun { machine: target.clone(), rejection });
            }
        }
    }

    /// Pass 2: place pending units in name order; returns the units left without a machine.
    fn place_pending(&mut self) -> BTreeSet<UnitIdx> {
        let mut displaced: BTreeSet<UnitIdx> = BTreeSet::new();
        let mut waiting_for_peer: HashMap<UnitIdx, Vec<UnitIdx>> = HashMap::new();
        let mut unplaced = BTreeSet::new();
        while let Some(u) = self.pending.pop_first() {
            let Some(choice) = self.view.choose(u, !displaced.contains(&u)) else {
                unplaced.insert(u);
                for peer in &self.snapshot.units[u].spec.constraints.machine_of {
                    if let Some(&p) = self.snapshot.unit_index.get(peer) {
                        waiting_for_peer.entry(p).or_default().push(u);
                    }
                }
                continue;
            };
            unplaced.remove(&u);
            let m = choice.machine;
            let replacing = match choice.fit {
                Fit::Displaces(names) => names,
                _ => Vec::new(),
            };
            for name in &replacing {
                let d = self.snapshot.unit_index[name];
                if self.view.placement(d) != Some(m) {
                    continue; // already left as a `MachineOf=` follower of a unit displaced just before
                }
                let reason = UnscheduleReason::Displaced {
                    machine: self.view.machine_id(m).to_string(),
                    replacer: self.view.unit_name(u).to_string(),
                };
                self.unschedule(d, m, reason);
                displaced.insert(d);
            }
            let desired = self.snapshot.units[u].spec.desired;
            self.decisions.push(Decision::Schedule {
                unit: self.view.unit_name(u).to_string(),
                machine: self.view.machine_id(m).to_string(),
                reason: ScheduleReason { desired, placement: choice.placement, replacing },
            });
            self.view.place(u, m);
            self.pending.extend(waiting_for_peer.remove(&u).unwrap_or_default());
        }
        unplaced
    }

    /// Unschedules `u` from `m`, queues it for placement, and does the same for its `MachineOf=` followers there,
    /// which lose their peer.
    fn unschedule(&mut self, u: UnitIdx, m: MachineIdx, reason: UnscheduleReason) {
        let machine = self.view.machine_id(m);
        self.push_unschedule(u, machine, reason);
        self.view.remove(u);
        self.pending.insert(u);
        let mut orphans: Vec<UnitIdx> = self.view.followers_on(u, m);
        while let Some(f) = orphans.pop() {
            if self.view.placement(f) != Some(m) {
                continue;
            }
            if let Fit::Rejected(rejection) = self.view.fit(f, m) {
                let reason = UnscheduleReason::UnableToRun { machine: machine.to_string(), rejection };
                self.push_unschedule(f, machine, reason);
                self.view.remove(f);
                self.pending.insert(f);
                orphans.extend(self.view.followers_on(f, m));
            }
        }
    }

    fn push_unschedule(&mut self, u: UnitIdx, machine: &str, reason: UnscheduleReason) {
        let unit = self.view.unit_name(u).to_string();
        self.decisions.push(Decision::Unschedule { unit, machine: machine.to_string(), reason });
    }
}

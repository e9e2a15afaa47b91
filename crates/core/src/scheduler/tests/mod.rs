//! Table tests of the scheduling core: the original's functional scenarios (§11.3), one table per rule, a
//! property test and a scale check. `Sim` is a tiny in-memory cluster that applies plans like the engine shell.

mod cordon;
mod load_fault;
mod property;
mod rules;
mod scale;
mod scenarios;

use std::collections::{BTreeMap, BTreeSet};

use super::{Constraints, Decision, Plan, ScheduleInput, UnitSpec, plan_with_report};
use crate::model::{JobState, MachineState};

pub(super) fn machine(id: &str) -> MachineState {
    MachineState { id: id.into(), ..Default::default() }
}

pub(super) fn machine_with(id: &str, metadata: &[(&str, &str)]) -> MachineState {
    MachineState {
        id: id.into(),
        metadata: metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    }
}

pub(super) fn launched(name: &str) -> UnitSpec {
    UnitSpec::new(name, JobState::Launched)
}

pub(super) fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

pub(super) fn conflicts(patterns: &[&str]) -> Constraints {
    Constraints { conflicts: strings(patterns), ..Default::default() }
}

pub(super) fn replaces(patterns: &[&str]) -> Constraints {
    Constraints { replaces: strings(patterns), ..Default::default() }
}

pub(super) fn machine_of(peers: &[&str]) -> Constraints {
    Constraints { machine_of: strings(peers), ..Default::default() }
}

pub(super) fn machine_id(id: &str) -> Constraints {
    Constraints { machine_id: Some(id.into()), ..Default::default() }
}

pub(super) fn metadata(pairs: &[(&str, &[&str])]) -> Constraints {
    Constraints {
        machine_metadata: pairs.iter().map(|(k, vs)| (k.to_string(), strings(vs))).collect(),
        ..Default::default()
    }
}

pub(super) fn global() -> Constraints {
    Constraints { global: true, ..Default::default() }
}

/// Decisions in a compact form: `-unit@machine` (unschedule), `+unit@machine` (schedule).
pub(super) fn brief(decisions: &[Decision]) -> Vec<String> {
    decisions
        .iter()
        .map(|d| match d {
            Decision::Unschedule { unit, machine, .. } => format!("-{unit}@{machine}"),
            Decision::Schedule { unit, machine, .. } => format!("+{unit}@{machine}"),
        })
        .collect()
}

/// An in-memory cluster: units and machines, with plans applied the way the engine shell applies them.
#[derive(Debug, Clone, Default)]
pub(super) struct Sim {
    pub units: BTreeMap<String, UnitSpec>,
    pub machines: Vec<MachineState>,
}

impl Sim {
    pub fn new(machines: &[&str]) -> Sim {
        Sim { units: BTreeMap::new(), machines: machines.iter().map(|id| machine(id)).collect() }
    }

    pub fn with_machines(machines: Vec<MachineState>) -> Sim {
        Sim { units: BTreeMap::new(), machines }
    }

    pub fn add(&mut self, unit: UnitSpec) -> &mut Sim {
        self.units.insert(unit.name.clone(), unit);
        self
    }

    pub fn snapshot(&self) -> ScheduleInput {
        ScheduleInput::new(self.units.values().cloned(), self.machines.iter().cloned()).unwrap()
    }

    /// One reconcile pass, applied.
    pub fn pass(&mut self) -> Plan {
        let plan = plan_with_report(&self.snapshot());
        apply(&mut self.units, &plan.decisions);
        plan
    }

    /// Passes until one decides nothing; returns every pass's decisions. Panics if that takes more than 10.
    pub fn converge(&mut self) -> Vec<Vec<String>> {
        let mut passes = Vec::new();
        for _ in 0..10 {
            let plan = self.pass();
            if plan.decisions.is_empty() {
                return passes;
            }
            passes.push(brief(&plan.decisions));
        }
        panic!("no fixed point after 10 passes: {passes:#?}");
    }

    /// Adds the units as one batch (like `fleetctl start a b c`) and converges.
    pub fn start(&mut self, units: impl IntoIterator<Item = UnitSpec>) -> Vec<Vec<String>> {
        for unit in units {
            self.add(unit);
        }
        self.converge()
    }

    pub fn target(&self, unit: &str) -> Option<&str> {
        self.units[unit].target.as_deref()
    }

    /// unit → machine for every scheduled unit.
    pub fn placements(&self) -> BTreeMap<String, String> {
        self.units.iter().filter_map(|(n, u)| Some((n.clone(), u.target.clone()?))).collect()
    }

    pub fn scheduled(&self) -> BTreeSet<String> {
        self.placements().into_keys().collect()
    }

    pub fn remove_machine(&mut self, id: &str) {
        self.machines.retain(|m| m.id != id);
    }
}

/// Applies decisions to the unit list of a snapshot, as the engine shell would to the registry. Panics when a
/// decision does not fit the state (scheduling a scheduled unit, unscheduling from another machine): that would
/// be a scheduler bug.
fn apply(units: &mut BTreeMap<String, UnitSpec>, decisions: &[Decision]) {
    for decision in decisions {
        let unit = units.get_mut(decision.unit()).unwrap_or_else(|| panic!("unknown unit in {decision}"));
        match decision {
            Decision::Unschedule { machine, .. } => {
                assert_eq!(unit.target.as_deref(), Some(machine.as_str()), "{decision}");
                unit.target = None;
            }
            Decision::Schedule { machine, .. } => {
                assert_eq!(unit.target, None, "{decision}: unit already scheduled");
                unit.target = Some(machine.clone());
            }
        }
    }
}

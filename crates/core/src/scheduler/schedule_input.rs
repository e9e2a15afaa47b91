//! The scheduler's input (spec §6.1): every visible unit with its desired state, current target and constraints,
//! and every present machine. Built once per reconcile pass by the engine shell; patterns are compiled here once.
//!
//! Units are kept in name order and machines in ID order: both orders are part of the scheduling contract
//! (deterministic passes, machine-ID tie-break).

use std::collections::{BTreeSet, HashMap};

use super::constraints::{Constraints, PatternSet};
use crate::model::{JobState, MachineState};

/// One unit as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSpec {
    pub name: String,
    /// Desired (target) state.
    pub desired: JobState,
    /// The machine the unit is currently scheduled to (`target`), if any. Always `None` for global units.
    pub target: Option<String>,
    pub constraints: Constraints,
}

impl UnitSpec {
    /// An unconstrained, unscheduled unit; adjust fields with struct update syntax or the builder methods.
    pub fn new(name: impl Into<String>, desired: JobState) -> UnitSpec {
        UnitSpec { name: name.into(), desired, target: None, constraints: Constraints::default() }
    }

    pub fn on(mut self, machine: impl Into<String>) -> UnitSpec {
        self.target = Some(machine.into());
        self
    }

    pub fn with(mut self, constraints: Constraints) -> UnitSpec {
        self.constraints = constraints;
        self
    }
}

/// Why a snapshot could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleInputError {
    #[error("unit {0:?} appears twice in the snapshot")]
    DuplicateUnit(String),
    #[error("machine {0:?} appears twice in the snapshot")]
    DuplicateMachine(String),
}

/// A unit with its patterns compiled.
#[derive(Debug, Clone)]
pub struct SnapshotUnit {
    pub spec: UnitSpec,
    pub conflicts: PatternSet,
    pub replaces: PatternSet,
}

/// The cluster as read at the start of one reconcile pass.
#[derive(Debug, Clone)]
pub struct ScheduleInput {
    /// Sorted by name; a unit's index is its rank in name order.
    pub units: Vec<SnapshotUnit>,
    pub unit_index: HashMap<String, usize>,
    /// Sorted by ID; a machine's index is its rank in ID order.
    pub machines: Vec<MachineState>,
    machine_index: HashMap<String, usize>,
    short_id_index: HashMap<String, Vec<usize>>,
    /// Absent machines whose at-most-once units must keep their target for now: the engine has not yet waited
    /// the margin out since it saw them go (`crate::at_most_once::Absences`).
    pub waiting: BTreeSet<String>,
}

impl ScheduleInput {
    pub fn new(
        units: impl IntoIterator<Item = UnitSpec>,
        machines: impl IntoIterator<Item = MachineState>,
    ) -> Result<ScheduleInput, ScheduleInputError> {
        let mut units: Vec<SnapshotUnit> = units
            .into_iter()
            .map(|spec| SnapshotUnit {
                conflicts: PatternSet::compile(&spec.constraints.conflicts),
                replaces: PatternSet::compile(&spec.constraints.replaces),
                spec,
            })
            .collect();
        units.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        if let Some(pair) = units.windows(2).find(|w| w[0].spec.name == w[1].spec.name) {
            return Err(ScheduleInputError::DuplicateUnit(pair[0].spec.name.clone()));
        }
        let mut machines: Vec<MachineState> = machines.into_iter().collect();
        machines.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(pair) = machines.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(ScheduleInputError::DuplicateMachine(pair[0].id.clone()));
        }
        let unit_index = units.iter().enumerate().map(|(i, u)| (u.spec.name.clone(), i)).collect();
        let machine_index = machines.iter().enumerate().map(|(i, m)| (m.id.clone(), i)).collect();
        let mut short_id_index: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, m) in machines.iter().enumerate() {
            short_id_index.entry(m.short_id().to_string()).or_default().push(i);
        }
        Ok(ScheduleInput { units, unit_index, machines, machine_index, short_id_index, waiting: BTreeSet::new() })
    }

    /// The same input, with `machines` (absent) holding on to their at-most-once units for now.
    pub fn with_waiting(mut self, machines: BTreeSet<String>) -> ScheduleInput {
        self.waiting = machines;
        self
    }

    /// Whether an at-most-once unit scheduled to absent `machine` keeps its target for now.
    pub fn at_most_once_waits_for(&self, machine: &str) -> bool {
        self.waiting.contains(machine)
    }

    /// Units in name order.
    pub fn units(&self) -> impl Iterator<Item = &UnitSpec> {
        self.units.iter().map(|u| &u.spec)
    }

    /// Machines in ID order.
    pub fn machines(&self) -> &[MachineState] {
        &self.machines
    }

    pub fn unit(&self, name: &str) -> Option<&UnitSpec> {
        self.unit_index.get(name).map(|&i| &self.units[i].spec)
    }

    pub fn machine_idx(&self, id: &str) -> Option<usize> {
        self.machine_index.get(id).copied()
    }

    /// Indexes (ascending) of the machines whose full or short ID is `wanted`.
    pub fn machines_matching_id(&self, wanted: &str) -> Vec<usize> {
        let mut found: Vec<usize> = self.machine_idx(wanted).into_iter().collect();
        found.extend(self.short_id_index.get(wanted).into_iter().flatten().copied());
        found.sort_unstable();
        found.dedup();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(id: &str) -> MachineState {
        MachineState { id: id.into(), ..Default::default() }
    }

    #[test]
    fn units_and_machines_are_ordered() {
        let snap = ScheduleInput::new(
            [UnitSpec::new("b.service", JobState::Launched), UnitSpec::new("a.service", JobState::Loaded)],
            [machine("m2"), machine("m1")],
        )
        .unwrap();
        assert_eq!(snap.units().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["a.service", "b.service"]);
        assert_eq!(snap.machines().iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["m1", "m2"]);
        assert_eq!(snap.unit("b.service").unwrap().desired, JobState::Launched);
    }

    #[test]
    fn duplicates_are_rejected() {
        let dup_unit = ScheduleInput::new(
            [UnitSpec::new("a.service", JobState::Launched), UnitSpec::new("a.service", JobState::Loaded)],
            [],
        );
        assert_eq!(dup_unit.unwrap_err().to_string(), "unit \"a.service\" appears twice in the snapshot");
        let dup_machine = ScheduleInput::new([], [machine("m1"), machine("m1")]);
        assert_eq!(dup_machine.unwrap_err(), ScheduleInputError::DuplicateMachine("m1".into()));
    }

    #[test]
    fn machine_id_lookup_by_full_or_short_id() {
        let snap = ScheduleInput::new(
            [],
            [machine("8363165e6276f500b71169eca9b3f76b"), machine("8363165e00000000"), machine("8606e1a2")],
        )
        .unwrap();
        assert_eq!(snap.machines_matching_id("8363165e"), [0, 1]);
        assert_eq!(snap.machines_matching_id("8363165e6276f500b71169eca9b3f76b"), [1]);
        assert_eq!(snap.machines_matching_id("8606e1a2"), [2]);
        assert!(snap.machines_matching_id("nope").is_empty());
    }
}

//! Synthetic clusters for scale checks and benchmarks ("scale by simulation"): a deterministic mix of
//! constrained and unconstrained units over many machines, some machines gone, half the units already placed.

use std::collections::BTreeMap;

use super::constraints::Constraints;
use super::schedule_input::{ScheduleInput, UnitSpec};
use crate::model::{JobState, MachineState};

/// A deterministic cluster of `machines` machines and `units` units (seeded, no I/O). Mix per 100 units: 80
/// unconstrained, 10 with `MachineMetadata`, 5 in `Conflicts` groups of five, 3 `MachineOf` an earlier unit,
/// 2 `MachineID`; half start scheduled, on machines of which 1 in 20 has gone away.
pub fn synthetic_snapshot(machines: usize, units: usize, seed: u64) -> ScheduleInput {
    let mut rng = XorShift(seed.max(1));
    let machine_ids: Vec<String> =
        (0..machines).map(|i| format!("{:032x}", (i as u128 + 1) * 0x9e37_79b9_7f4a_7c15)).collect();
    let present: Vec<MachineState> = machine_ids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 20 != 7)
        .map(|(i, id)| MachineState {
            id: id.clone(),
            metadata: BTreeMap::from([("role".to_string(), ["web", "db", "cache"][i % 3].to_string())]),
            ..Default::default()
        })
        .collect();
    let specs = (0..units).map(|i| {
        let name = format!("svc-{i:05}.service");
        let constraints = match i % 100 {
            0..80 => Constraints::default(),
            80..90 => Constraints {
                machine_metadata: BTreeMap::from([("role".to_string(), vec!["db".to_string()])]),
                ..Default::default()
            },
            90..95 => Constraints { conflicts: vec![format!("svc-{:04}?.service", i / 10)], ..Default::default() },
            95..98 => Constraints { machine_of: vec![format!("svc-{:05}.service", i / 2)], ..Default::default() },
            _ => Constraints {
                machine_id: Some(machine_ids[rng.below(machines)][..8].to_string()),
                ..Default::default()
            },
        };
        let target = (machines > 0 && rng.below(2) == 0).then(|| machine_ids[rng.below(machines)].clone());
        UnitSpec { name, desired: JobState::Launched, target, constraints }
    });
    ScheduleInput::new(specs.collect::<Vec<_>>(), present).expect("synthetic names are unique")
}

struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

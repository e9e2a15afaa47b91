//! The API's request bodies decoded with serde_json as the handlers decode them (`schema::Unit`, `UnitBatch`,
//! `RolloutRequest`, `RolloutControl`, metadata operations), then the pure decisions that follow (`decide_put`,
//! `decide_rollout` on an empty registry view, `validate_ops`, the batch's name check). Never a panic; a PUT the
//! decision accepts has a valid name and, when it stores a unit file, options that make one.
#![no_main]

use fleetd::api::route::{NO_UNIT, NameUse, check_unit_name};
use fleetd::api::validate_ops;
use fleet_registry::Snapshot;
use fleet_core::schema::{MachineMetadataOp, RolloutControl, RolloutRequest, Unit, UnitBatch};
use fleet_core::unit::{UnitFile, validate_name};
use fleet_core::api_rules::{PutAction, decide_put, decide_rollout};
use libfuzzer_sys::fuzz_target;

const STORED: &str = "0123456789abcdef0123456789abcdef01234567";

fn check_put(unit: &Unit) {
    for stored in [None, Some(STORED)] {
        let Ok(action) = decide_put(unit, stored) else { continue };
        assert!(validate_name(&unit.name).is_ok(), "accepted a unit named {:?}", unit.name);
        if matches!(action, PutAction::Create(_) | PutAction::Replace(_)) {
            assert!(unit.options.iter().all(|o| !o.section.is_empty() && !o.name.is_empty()));
            let file = UnitFile::from_options(unit.options.clone());
            assert!(file.as_stored().is_ok(), "accepted options that are no unit file: {:?}", file.canonical());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(unit) = serde_json::from_slice::<Unit>(data) {
        check_put(&unit);
        let again: Unit = serde_json::from_slice(&serde_json::to_vec(&unit).unwrap()).unwrap();
        assert_eq!(again, unit, "a decoded unit encodes and decodes to itself");
    }
    if let Ok(batch) = serde_json::from_slice::<UnitBatch>(data) {
        batch.put.iter().for_each(check_put);
        for name in &batch.destroy {
            if let Err(refused) = check_unit_name(name, NameUse::Finds, NO_UNIT) {
                assert!(!refused.message.is_empty());
            }
        }
    }
    if let Ok(request) = serde_json::from_slice::<RolloutRequest>(data) {
        let _ = decide_rollout("fuzz", &request, &Snapshot::default(), 0);
    }
    let _ = serde_json::from_slice::<RolloutControl>(data);
    if let Ok(ops) = serde_json::from_slice::<Vec<MachineMetadataOp>>(data) {
        let _ = validate_ops(&ops);
    }
});

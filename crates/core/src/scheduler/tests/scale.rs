//! 1,000 machines × 10,000 units in one pass: what the pass decides, in every build (CI runs it in debug). How
//! fast the pass is belongs to the bench, not to a test on a shared machine: `cargo bench -p fleet-core --features simulate`
//! (`ci/bench` runs it).

use crate::scheduler::simulate::synthetic_snapshot;
use crate::scheduler::{Decision, plan_with_report};

#[test]
fn scale_1000_machines_10000_units_places_the_unscheduled_units() {
    let snapshot = synthetic_snapshot(1_000, 10_000, 42);
    let plan = plan_with_report(&snapshot);
    let placed: Vec<&str> =
        plan.decisions.iter().filter(|d| matches!(d, Decision::Schedule { .. })).map(Decision::unit).collect();
    assert!(placed.len() > 5_000, "most unscheduled units get a machine, placed {}", placed.len());
    let distinct: std::collections::BTreeSet<&str> = placed.iter().copied().collect();
    assert_eq!(distinct.len(), placed.len(), "a unit is scheduled at most once per pass");
}

#[test]
fn scale_simulation_is_deterministic() {
    let a = plan_with_report(&synthetic_snapshot(50, 500, 7));
    let b = plan_with_report(&synthetic_snapshot(50, 500, 7));
    assert_eq!(a, b);
    assert!(!a.decisions.is_empty());
}

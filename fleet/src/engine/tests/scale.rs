//! 1,000 machines × 10,000 units in one pass. Slow in debug builds, so ignored there; run it with
//! `cargo test -p fleet --release --lib engine -- --ignored scale`.

use std::time::{Duration, Instant};

use crate::engine::simulate::synthetic_snapshot;
use crate::engine::{Decision, plan_with_report};

#[test]
#[cfg_attr(debug_assertions, ignore = "timing is only meaningful in release builds")]
fn scale_1000_machines_10000_units_plans_in_well_under_a_second() {
    let snapshot = synthetic_snapshot(1_000, 10_000, 42);
    let started = Instant::now();
    let plan = plan_with_report(&snapshot);
    let took = started.elapsed();
    let placed = plan.decisions.iter().filter(|d| matches!(d, Decision::Schedule { .. })).count();
    assert!(placed > 5_000, "most unscheduled units get a machine, placed {placed}");
    assert!(took < Duration::from_millis(500), "one pass took {took:?}");
}

#[test]
fn scale_simulation_is_deterministic() {
    let a = plan_with_report(&synthetic_snapshot(50, 500, 7));
    let b = plan_with_report(&synthetic_snapshot(50, 500, 7));
    assert_eq!(a, b);
    assert!(!a.decisions.is_empty());
}

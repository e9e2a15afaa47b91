//! The nemesis's short seeded run (issue 14 item 6, issue 37), part of CI: a real cluster with a 3-member etcd,
//! faults drawn from a fixed seed for 90 s while the change driver rolls a global unit and an instance set (rolling
//! replaces, restarts, rollbacks, aborts; health-gated, flapping and failing versions), and every invariant checked
//! on what systemd showed in every machine. A failure prints the whole report (faults, changes, rollouts,
//! violations with each unit's timeline) and the command that replays it.

use std::time::Duration;

use fleet_harness::nemesis::changes::{Mode, Target};
use fleet_harness::nemesis::{self, Options};

/// The seed CI replays: within 90 s its faults are a slow etcd, a fleetd kill, an etcd leader kill, engine leader
/// churn, a machine kill, an etcd member kill and a partition longer than the TTL; its changes are rolling replaces
/// (health-gated, flapping, failing on one machine or everywhere, some with their policy in the unit), rolling
/// restarts, a rollback, replaces aborted mid-way and a paused rollout resumed, of both the global unit and the
/// instance set. Chosen among seeds 1–6000 for that coverage (seed 1, used before the change driver, had no machine
/// kill and no partition longer than the TTL in 90 s). Seed 2918, which covers every kind of fault, broke the budget
/// through a gap fixed since (docs/faults.md, "Rollouts in the nemesis": findings).
const CI_SEED: u64 = 3516;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_seeded_run_breaks_no_invariant() {
    let opts = Options {
        seed: CI_SEED,
        duration: Duration::from_secs(90),
        machines: 3,
        units: 8,
        at_most_once: 2,
        etcd_members: 3,
        // At-most-once units are stopped once renewals have failed for TTL - margin - (TTL/3 keep-alive period); with
        // 3 s that is about 1 s, less than an etcd leader election, so etcd faults that touch no machine would stop
        // them (docs/at-most-once.md). 10 s rides through a member or leader loss, as the issue asks.
        agent_ttl_secs: 10,
        converge_timeout: Duration::from_secs(60),
        changes: Mode::Rolling,
        // The full units directory and the clock jump have specs of their own (full_disk.rs, clock_jump.rs).
        resource_faults: false,
    };
    let report = nemesis::run(&opts).await.unwrap_or_else(|e| panic!("the nemesis could not run: {e}"));
    let text = report.render();
    println!("{text}");
    assert!(report.faults.len() >= 5, "only {} faults injected in 90 s:\n{text}", report.faults.len());
    for target in Target::ALL {
        let made = report.driven.rollouts.iter().filter(|r| r.target == target).count();
        assert!(made >= 2, "only {made} rollout(s) of the {} in 90 s:\n{text}", target.label());
    }
    assert!(report.violation_count() == 0, "invariant violations (replay: {}):\n{text}", opts.replay_command());
}

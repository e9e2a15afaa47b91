//! Parts of the rollout commands on their own: the status table, rollout IDs, when a wait ends, exit codes and
//! times. The commands as a whole, against the fake cluster, are tested in `cli/tests/rollout.rs`.

use super::*;

#[test]
fn the_status_table_shows_machines_like_list_units() {
    let machines = [Machine {
        id: "8363165e6276f500b71169eca9b3f76b".into(),
        primary_ip: "172.17.0.2".into(),
        ..Default::default()
    }];
    let step = |machine: &str, phase, detail: &str| fleet_core::rollout::Step {
        unit: "db.service".into(),
        machine: machine.into(),
        phase,
        released_ms: 0,
        healthy_since_ms: 0,
        detail: detail.into(),
        restarts_at_healthy: None,
        down_since_ms: 0,
        from_machine: String::new(),
        ..fleet_core::rollout::Step::default()
    };
    let rollout = Rollout {
        id: "db-1".into(),
        kind: RolloutKind::Replace,
        units: Vec::new(),
        max_unavailable: 1,
        min_healthy_ms: 0,
        health_timeout_ms: 1,
        on_failure: OnFailure::Pause,
        created_ms: 0,
        action: Action::Run,
        resumes: 0,
        resumes_taken: 0,
        state: RolloutState::Paused,
        reason: "paused: db.service on 8363165e: boom".into(),
        steps: vec![
            step("8363165e6276f500b71169eca9b3f76b", fleet_core::rollout::Phase::Failed, "boom"),
            step("d91d98fca203da3cb89fb5c100ed0823", fleet_core::rollout::Phase::Pending, ""),
        ],
        revision: 0,
        ..Rollout::default()
    };
    assert_eq!(
        render_status(&rollout, &machines, false, true),
        "Rollout db-1 replace paused: paused: db.service on 8363165e: boom\n\
         MACHINE\t\t\tUNIT\t\tPHASE\tDETAIL\n\
         8363165e.../172.17.0.2\tdb.service\tfailed\tboom\n\
         d91d98fc...\t\tdb.service\tpending\t-\n"
    );
    assert_eq!(
        render_status(&rollout, &machines, true, false),
        "Rollout db-1 replace paused: paused: db.service on 8363165e: boom\n\
         8363165e6276f500b71169eca9b3f76b/172.17.0.2\tdb.service\tfailed\tboom\n\
         d91d98fca203da3cb89fb5c100ed0823\t\tdb.service\tpending\t-\n"
    );
}

#[test]
fn rollout_ids_are_the_first_unit_and_the_time_in_the_registry_alphabet() {
    assert_eq!(rollout_id("db.service", 1_700_000_000_000), "db-1700000000000");
    assert_eq!(rollout_id("hello@1.service", 5), "hello_1-5");
    assert_eq!(rollout_id(r"esc@a\x2db:c.service", 5), "esc_a_x2db_c-5");
    assert_eq!(rollout_id(".service", 5), "rollout-5");
    let long = rollout_id(&format!("{}.service", "a".repeat(80)), 1_700_000_000_000);
    assert_eq!(long.len(), 64);
    assert!(long.ends_with("a-1700000000000"), "{long}");
    let taken = ["db-7".to_string(), "db-8".to_string()];
    assert_eq!(unused_rollout_id("db.service", 7, &taken), "db-9");
    assert_eq!(unused_rollout_id("db.service", 6, &taken), "db-6");
    for id in [long, rollout_id("x y/z.service", 1)] {
        fleet_registry::check_component(fleet_registry::Component::RolloutId, &id).unwrap();
    }
}

#[test]
fn a_wait_goes_on_while_the_engine_has_not_taken_up_a_resume_or_an_abort() {
    use fleet_core::rollout::Phase;
    let step = |phase| fleet_core::rollout::Step {
        unit: "db.service".into(),
        machine: "m1".into(),
        phase,
        released_ms: 0,
        healthy_since_ms: 0,
        detail: String::new(),
        restarts_at_healthy: None,
        down_since_ms: 0,
        from_machine: String::new(),
        ..fleet_core::rollout::Step::default()
    };
    let shown = |state, action, phases: &[Phase], resumed: (u32, u32)| Rollout {
        id: "db-1".into(),
        kind: RolloutKind::Replace,
        units: Vec::new(),
        max_unavailable: 1,
        min_healthy_ms: 0,
        health_timeout_ms: 1,
        on_failure: OnFailure::Pause,
        created_ms: 0,
        action,
        resumes: resumed.0,
        resumes_taken: resumed.1,
        state,
        reason: String::new(),
        steps: phases.iter().map(|p| step(*p)).collect(),
        revision: 0,
        ..Rollout::default()
    };
    use Action::{Abort, Pause, Run};
    use Phase::{Failed, Pending, Updating};
    /// (state, action, phases, (resumes, resumes taken), exit code)
    type Row = (RolloutState, Action, &'static [Phase], (u32, u32), Option<i32>);
    let table: [Row; 10] = [
        (RolloutState::Running, Run, &[Updating, Pending], (0, 0), None),
        (RolloutState::Running, Pause, &[Updating, Pending], (0, 0), None),
        (RolloutState::Paused, Pause, &[Phase::Done, Pending], (0, 0), Some(EXIT_PAUSED)),
        (RolloutState::Paused, Run, &[Phase::Done, Pending], (1, 0), None),
        (RolloutState::Paused, Abort, &[Failed, Pending], (0, 0), None),
        // Failed, and resumed: paused again once the engine took the resume up, still waiting before.
        (RolloutState::Paused, Run, &[Failed, Pending], (1, 1), Some(EXIT_PAUSED)),
        (RolloutState::Paused, Run, &[Failed, Pending], (2, 1), None),
        (RolloutState::Done, Run, &[Phase::Done], (0, 0), Some(EXIT_DONE)),
        (RolloutState::Aborted, Abort, &[Phase::Done, Pending], (0, 0), Some(EXIT_ABORTED)),
        (RolloutState::RolledBack, Run, &[Failed, Pending], (0, 0), Some(EXIT_ROLLED_BACK)),
    ];
    for (state, action, phases, resumed, want) in table {
        assert_eq!(
            wait_outcome(&shown(state, action, phases, resumed)),
            want,
            "{state} {action:?} {phases:?} {resumed:?}"
        );
    }
}

/// Issue 36: a rollout with a key that does not decode is shown with the error, and ends a wait at once with exit 1
/// (no engine drives it: waiting would wait forever).
#[test]
fn an_unreadable_rollout_shows_its_error_and_ends_a_wait_with_1() {
    let rollout = Rollout {
        id: "db-1".into(),
        kind: RolloutKind::Restart,
        state: RolloutState::Running,
        error: "/p/rollouts/db-1/progress: cannot decode rollout progress: invalid type (value \"nope\")".into(),
        ..Rollout::default()
    };
    assert_eq!(
        render_status(&rollout, &[], false, false),
        "Rollout db-1 restart running\n\
         Cannot read this rollout (no engine drives it): /p/rollouts/db-1/progress: cannot decode rollout progress: \
         invalid type (value \"nope\")\n"
    );
    assert_eq!(wait_outcome(&rollout), Some(EXIT_ERROR));
    assert_eq!(snapshot_exit_code(&rollout), EXIT_ERROR);
    assert_eq!(snapshot_exit_code(&Rollout { error: String::new(), ..rollout }), EXIT_DONE, "running, readable");
}

#[test]
fn exit_codes_say_how_a_rollout_ended() {
    assert_eq!(exit_code(RolloutState::Running), None);
    assert_eq!(exit_code(RolloutState::Done), Some(0));
    assert_eq!(exit_code(RolloutState::Paused), Some(2));
    assert_eq!(exit_code(RolloutState::RolledBack), Some(3));
    assert_eq!(exit_code(RolloutState::Aborted), Some(4));
}

#[test]
fn utc_formats_unix_milliseconds() {
    assert_eq!(utc(0), "-");
    assert_eq!(utc(1), "1970-01-01 00:00:00");
    assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
    assert_eq!(utc(1_796_090_342_609), "2026-12-01 01:59:02", "as `date -u -d @1796090342` prints it");
}

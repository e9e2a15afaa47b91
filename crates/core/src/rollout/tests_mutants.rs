//! Behaviour that cargo-mutants found untested (issue 39): each test names what a user relies on; the mutants it
//! kills are listed in conformance/README.md.

use std::collections::BTreeSet;

use super::tests::{
    NEW, OLD, Table, checked_spec, drain_of_m1, drained_cluster, phases, rollout, spec, step, stored, undo_phases,
};
use super::*;
use crate::model::HealthStatus::*;

impl Table {
    /// `db.service` on `machine` as published: its file `hash`, the version it last started (`running`) and its
    /// active state.
    fn publish(&mut self, machine: &str, hash: Option<&str>, running: Option<&str>, active: &str) {
        let seen = Observed {
            present: true,
            hash: hash.map(str::to_string),
            running: running.map(str::to_string),
            active_state: active.into(),
            sub_state: if active == "active" { "running".into() } else { "dead".into() },
            restarts: Some(0),
            ..Observed::default()
        };
        self.0.insert(("db.service".into(), machine.into()), seen);
    }
}

fn reason(r: &Rollout) -> &str {
    &r.progress.as_ref().unwrap().reason
}

/// Every optional field a spec, control or progress sets is stored, and reads back as it was written.
#[test]
fn stored_shapes_keep_every_field_that_is_set() {
    let mut s = checked_spec(1, 10_000, OnFailure::Rollback);
    s.max_unavailable_percent = 25;
    s.canary = 2;
    s.canary_hold_ms = 30_000;
    s.order = "first:m1".into();
    s.progress_deadline_ms = 600_000;
    s.policy = "unit".into();
    s.machine = "m1".into();
    s.cordon_since_ms = 5;
    let control = Control { action: Action::Run, resumes: 2, skip_failed: true, promoted: true };
    let step = Step {
        phase: Phase::Skipped,
        released_ms: 7,
        healthy_since_ms: 8,
        detail: "skipped by request".into(),
        restarts_at_healthy: Some(3),
        down_since_ms: 9,
        from_machine: "m2".into(),
        waived: true,
        ..Step::pending("db.service", "m1")
    };
    let progress = RolloutProgress {
        state: RolloutState::Paused,
        reason: "awaiting promotion".into(),
        steps: vec![step.clone()],
        resumes: 2,
        started_ms: 11,
        undo: vec![step],
        undo_end: Some(RolloutState::RolledBack),
        undo_reason: "failed".into(),
        awaiting_promotion: true,
        canaries_done_ms: 12,
    };
    let json = serde_json::to_string(&s).unwrap();
    for key in [
        r#""checked":true"#,
        r#""fromChecked":true"#,
        r#""maxUnavailablePercent":25"#,
        r#""canary":2"#,
        r#""canaryHoldMs":30000"#,
        r#""progressDeadlineMs":600000"#,
        r#""cordonSinceMs":5"#,
    ] {
        assert!(json.contains(key), "spec stored without {key}: {json}");
    }
    assert_eq!(serde_json::from_str::<RolloutSpec>(&json).unwrap(), s, "{json}");
    let json = serde_json::to_string(&control).unwrap();
    assert_eq!(json, r#"{"action":"run","resumes":2,"skipFailed":true,"promoted":true}"#);
    let json = serde_json::to_string(&progress).unwrap();
    for key in [
        r#""startedMs":11"#,
        r#""awaitingPromotion":true"#,
        r#""canariesDoneMs":12"#,
        r#""downSinceMs":9"#,
        r#""waived":true"#,
    ] {
        assert!(json.contains(key), "progress stored without {key}: {json}");
    }
    assert_eq!(serde_json::from_str::<RolloutProgress>(&json).unwrap(), progress, "{json}");
}

/// The agents, the cluster page and garbage collection read rollouts through `hash_on`, `needed_hashes` and
/// `active_for`: a rollout that holds machines pins their version and keeps its bodies; a finished one does neither.
#[test]
fn a_finished_rollout_pins_no_machine_keeps_no_body_and_is_no_units_active_rollout() {
    const NEWER: &str = "3333333333333333333333333333333333333333";
    let c = Table::with(&["m1", "m2"], OLD);
    let running = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    assert_eq!(hash_on([&running], "db.service", NEW, "m1"), OLD, "before the engine's first progress");
    assert_eq!(hash_on([&running], "web.service", NEW, "m1"), NEW, "a unit of no rollout runs its stored version");
    assert_eq!(hash_on([], "db.service", NEW, "m1"), NEW);
    // Aborted before m2 was reached: m2's step stays pending in the stored progress.
    let mut aborted = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    aborted.control.action = Action::Abort;
    step(&mut aborted, &c, 0);
    assert_eq!(aborted.state(), RolloutState::Aborted);
    assert_eq!(phases(&aborted), [("m1", "pending"), ("m2", "pending")]);
    assert_eq!(
        hash_on([&aborted], "db.service", NEWER, "m2"),
        NEWER,
        "a finished rollout pins nothing: the machine follows a later version"
    );

    // Bodies: a rollout still holding machines needs both versions; a finished one neither.
    let mut done = stored("old", &["db.service"], 1, RolloutState::Done);
    done.spec.units[0].from = NEWER.into();
    done.spec.units[0].to = NEWER.into();
    assert_eq!(needed_hashes([&running]), BTreeSet::from([OLD, NEW]));
    assert_eq!(needed_hashes([&done, &running]), BTreeSet::from([OLD, NEW]), "not the finished rollout's {NEWER}");
    assert!(needed_hashes([&done]).is_empty());

    // The one active rollout of a unit (the API refuses a second while it runs).
    let web = stored("web", &["web.service"], 2, RolloutState::Running);
    let all = [done.clone(), web.clone(), running.clone()];
    assert_eq!(active_for(&all, "db.service").map(|r| r.spec.id.as_str()), Some("r1"), "not the finished one");
    assert_eq!(active_for(&all, "web.service").map(|r| r.spec.id.as_str()), Some("web"));
    assert_eq!(active_for(&all, "cache.service").map(|r| r.spec.id.as_str()), None, "a unit of no rollout");
}

/// `rollout-status`'s summary: how many steps are in each phase.
#[test]
fn phase_counts_count_the_steps_in_each_phase() {
    let mut p = RolloutProgress::default();
    for (machine, phase) in [("m1", Phase::Done), ("m2", Phase::Done), ("m3", Phase::Updating), ("m4", Phase::Pending)]
    {
        p.steps.push(Step { phase, ..Step::pending("db.service", machine) });
    }
    assert_eq!(phase_counts(&p), BTreeMap::from([("done", 2), ("pending", 1), ("updating", 1)]));
    assert!(phase_counts(&RolloutProgress::default()).is_empty());
}

/// The engine writes each moved unit's new target in the transaction that releases its step: exactly the moves that
/// went from pending to updating in this pass — not the ones still pending, not the ones released before, and not a
/// drain's stops (no unit moves).
#[test]
fn released_moves_are_the_move_steps_released_in_this_pass() {
    let mut c = drained_cluster();
    let mut r = drain_of_m1(1);
    let before = r.progress.clone();
    step(&mut r, &c, 1_000);
    let mv = |unit: &str, to: &str| Move { unit: unit.into(), from: "m1".into(), to: to.into() };
    assert_eq!(released_moves(before.as_ref(), r.progress.as_ref().unwrap()), [mv("a.service", "m2")]);
    let before = r.progress.clone();
    step(&mut r, &c, 1_500);
    assert_eq!(released_moves(before.as_ref(), r.progress.as_ref().unwrap()), [], "a.service's move is not new");
    c.unit("a.service", "m2", Some(OLD), "active");
    let before = r.progress.clone();
    step(&mut r, &c, 2_000);
    assert_eq!(released_moves(before.as_ref(), r.progress.as_ref().unwrap()), [mv("b.service", "m3")]);
    c.unit("b.service", "m3", Some(OLD), "active");
    let before = r.progress.clone();
    step(&mut r, &c, 3_000);
    assert_eq!(phases(&r)[2], ("m1", "updating"), "the stop is released");
    assert_eq!(released_moves(before.as_ref(), r.progress.as_ref().unwrap()), [], "a stop moves no unit");
    // Without an earlier progress every released move is new.
    let mut first = drain_of_m1(3);
    step(&mut first, &drained_cluster(), 1_000);
    let released = released_moves(None, first.progress.as_ref().unwrap());
    assert_eq!(released, [mv("a.service", "m2"), mv("b.service", "m3")]);
}

/// A rebalance's or a drain's move is done when the destination started the unit and runs the version it
/// publishes; a destination that started another version than its file is still moving.
#[test]
fn a_move_is_done_when_its_destination_runs_the_version_it_publishes() {
    let rebalance = || {
        let spec = RolloutSpec {
            id: "rebalance-1".into(),
            kind: RolloutKind::Rebalance,
            max_unavailable: 1,
            health_timeout_ms: 60_000,
            ..RolloutSpec::default()
        };
        let steps = vec![Move { unit: "a.service".into(), from: "m1".into(), to: "m2".into() }.step()];
        Rollout { spec, control: Control::default(), progress: Some(RolloutProgress { steps, ..Default::default() }) }
    };
    let mut c = drained_cluster();
    let mixed = Observed {
        present: true,
        hash: Some(NEW.into()),
        running: Some(OLD.into()),
        active_state: "active".into(),
        ..Observed::default()
    };
    for mut r in [rebalance(), drain_of_m1(1)] {
        let kind = r.spec.kind;
        c.0.insert(("a.service".into(), "m2".into()), mixed.clone());
        step(&mut r, &c, 1_000);
        step(&mut r, &c, 2_000);
        assert_eq!(phases(&r)[0], ("m2", "updating"), "{kind:?}: m2 started {OLD:.4}… but its file is {NEW:.4}…");
        c.unit("a.service", "m2", Some(OLD), "active");
        step(&mut r, &c, 3_000);
        assert_eq!(phases(&r)[0], ("m2", "done"), "{kind:?}: m2 runs the unit it publishes");
    }
}

/// A replace step arrives only when its machine both has the new file and started it: a machine that loaded the new
/// file but still runs the old version is not judged healthy.
#[test]
fn a_machine_with_the_new_file_still_running_the_old_version_has_not_arrived() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.publish("m1", Some(NEW), Some(OLD), "active");
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending")]);
    c.publish("m1", Some(NEW), Some(NEW), "active");
    step(&mut r, &c, 3_000);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating")]);
}

/// Fail fast names a new version that settled down: one that failed to start (its file loaded, never launched), or
/// one started that then went inactive. A machine still on the old file, or with the new file loaded and not
/// started yet (inactive), is not the new version failing: it waits for the health timeout.
#[test]
fn only_the_new_version_settling_down_fails_a_step_before_its_health_timeout() {
    let settled = 1_000 + DOWN_SETTLE_MS;
    // Loaded, its start failed: never launched.
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.publish("m1", Some(NEW), Some(OLD), "failed");
    step(&mut r, &c, 1_000);
    step(&mut r, &c, settled);
    assert_eq!(phases(&r)[0], ("m1", "failed"), "{}", reason(&r));
    assert_eq!(reason(&r), "paused: db.service on m1: the new version did not start: activeState=failed subState=dead");
    // Still the old file, failed before the rollout came: no fail fast.
    let mut c = Table::with(&["m1", "m2"], OLD);
    c.set("m1", OLD, "failed");
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    step(&mut r, &c, 1_000);
    let a = step(&mut r, &c, settled);
    assert_eq!(phases(&r)[0], ("m1", "updating"), "{}", a.progress.reason);
    assert_eq!(a.wake_at_ms, Some(60_000), "the health timeout");
    // The new file loaded, not started yet: inactive on its way.
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.publish("m1", Some(NEW), Some(OLD), "inactive");
    step(&mut r, &c, 1_000);
    step(&mut r, &c, settled);
    assert_eq!(phases(&r)[0], ("m1", "updating"), "{}", reason(&r));
}

/// The detail "waiting for its health check" appears only once the new version is active and only its check is
/// missing; a step whose unit is still activating waits without it.
#[test]
fn a_step_still_activating_does_not_claim_to_wait_for_its_health_check() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    for unit_checked in [true, false] {
        let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
        s.units[0].checked = unit_checked;
        let mut r = rollout(s);
        c.set("m1", OLD, "active");
        step(&mut r, &c, 0);
        c.set("m1", NEW, "activating");
        step(&mut r, &c, 1_000);
        let detail = &r.progress.as_ref().unwrap().steps[0].detail;
        assert_eq!(detail, "", "checked {unit_checked}: activating");
    }
}

/// A checked step that keeps passing stays healthy until `minHealthyMs` is over, and a restart in progress (between
/// states, its check failing meanwhile) is waited out rather than failed on the check.
#[test]
fn a_healthy_checked_step_is_judged_by_its_check_only_while_active() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    for m in ["m1", "m2"] {
        c.health(m, Healthy, "");
    }
    let mut r = rollout(checked_spec(1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    c.health("m1", Healthy, "");
    step(&mut r, &c, 1_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"));
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"), "still passing: {}", reason(&r));
    c.systemd("m1", "deactivating", "stop-post", Some(0));
    c.health("m1", Unhealthy, "connection refused");
    step(&mut r, &c, 3_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"), "restarting: {}", reason(&r));
    c.systemd("m1", "active", "running", Some(0));
    c.health("m1", Healthy, "");
    step(&mut r, &c, 11_000);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating")]);
}

/// For the budget a machine serves the unit when it is active and passes its check; one that publishes no health at
/// all counts by systemd alone. A machine failing its check is down: it changes first.
#[test]
fn a_machine_serves_by_its_check_or_by_systemd_when_it_publishes_none() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    c.health("m1", Healthy, "");
    c.health("m2", Unhealthy, "");
    let mut r = rollout(checked_spec(1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    assert_eq!(phases(&r), [("m1", "pending"), ("m2", "updating"), ("m3", "pending")], "{}", reason(&r));
    assert_eq!(reason(&r), "", "m1 and m3 serve: nothing else is down");
}

/// Machines already down change first, never more at once than the budget; the reason names the down machines it
/// holds back, with why each does not serve.
#[test]
fn down_machines_change_first_within_the_budget_and_the_reason_names_those_held_back() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    c.health("m1", Unhealthy, "");
    c.health("m2", Unhealthy, "");
    c.health("m3", Healthy, "");
    let mut r = rollout(checked_spec(1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending"), ("m3", "pending")]);
    assert_eq!(reason(&r), "waiting: 1 of at most 1 unavailable already: db.service on m2 (unhealthy)");
}

/// A rollout held back only by its own step in flight has nothing to explain: no reason.
#[test]
fn a_rollout_held_back_only_by_its_own_steps_gives_no_reason() {
    let c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending")]);
    assert_eq!(reason(&r), "");
}

/// What `rollout-status` says while an abort returns machines and once it is over; a finished rollout says nothing.
#[test]
fn an_aborted_replace_says_it_returns_the_machines_and_a_done_one_says_nothing() {
    let mut c = Table::with(&["m1"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1);
    assert_eq!(r.state(), RolloutState::Done);
    assert_eq!(reason(&r), "");

    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    r.control.action = Action::Pause;
    step(&mut r, &c, 1);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "pending")]);
    r.control.action = Action::Abort;
    step(&mut r, &c, 2);
    assert_eq!(undo_phases(&r), [("m1", "updating")]);
    assert_eq!(reason(&r), "aborted by request: returning the changed machines to the old version");
    c.set("m1", OLD, "active");
    step(&mut r, &c, 3);
    assert_eq!(r.state(), RolloutState::Aborted);
    assert_eq!(reason(&r), "aborted by request: every changed machine is back on the old version");
}

/// An abort of a restart restarts no further machine and has no version to return to: it ends at once.
#[test]
fn an_aborted_restart_ends_at_once_and_writes_no_unit_back() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Restart, 1, 0, OnFailure::Rollback));
    step(&mut r, &c, 0);
    c.restarted("m1", "r1");
    step(&mut r, &c, 1);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating"), ("m3", "pending")]);
    r.control.action = Action::Abort;
    let a = step(&mut r, &c, 2);
    assert_eq!(r.state(), RolloutState::Aborted);
    assert_eq!(reason(&r), "aborted by request");
    assert!(a.roll_back.is_empty(), "{:?}", a.roll_back);
    assert!(undo_phases(&r).is_empty(), "{:?}", undo_phases(&r));
    assert_eq!(restart_token([&r], "db.service", "m3"), None);
}

/// While a rollback returns machines, the forward steps are its record: a done machine whose check fails meanwhile
/// keeps its step done (its undo step is what changes it).
#[test]
fn during_a_rollback_a_done_machine_keeps_its_forward_step() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    for m in ["m1", "m2", "m3"] {
        c.health(m, Healthy, "");
    }
    let mut r = rollout(checked_spec(1, 0, OnFailure::Rollback));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    c.health("m1", Healthy, "");
    step(&mut r, &c, 1);
    c.set("m2", NEW, "failed");
    step(&mut r, &c, 2);
    step(&mut r, &c, 2 + DOWN_SETTLE_MS);
    assert_eq!(undo_phases(&r), [("m2", "updating"), ("m1", "pending")], "{}", reason(&r));
    c.health("m1", Unhealthy, "flap");
    step(&mut r, &c, 3 + DOWN_SETTLE_MS);
    assert_eq!(phases(&r)[0], ("m1", "done"), "{:?}", r.progress.as_ref().unwrap().steps[0]);
}

/// A progress stored without a start time (`startedMs` absent, as an older leader wrote it) has no progress
/// deadline: it neither fails on it nor wakes for it.
#[test]
fn a_progress_without_a_start_time_has_no_progress_deadline() {
    let c = Table::with(&["m1", "m2"], OLD);
    let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
    s.progress_deadline_ms = 10_000;
    let progress: RolloutProgress = serde_json::from_str(
        r#"{"state":"running","steps":[
            {"unit":"db.service","machine":"m1","phase":"updating","releasedMs":15000},
            {"unit":"db.service","machine":"m2","phase":"pending"}]}"#,
    )
    .unwrap();
    assert_eq!(progress.started_ms, 0);
    let r = Rollout { spec: s, control: Control::default(), progress: Some(progress) };
    let a = advance(&r, &c, 20_000);
    assert_eq!(a.progress.state, RolloutState::Running, "{}", a.progress.reason);
    assert_eq!(a.wake_at_ms, Some(75_000), "m1's health timeout only");
}

/// An abort while a machine is still changing to the new version (its new file loaded, not started yet) lets that
/// change settle before its undo step, holding the budget's slot meanwhile — at most for that step's health timeout.
#[test]
fn an_undo_waits_for_a_change_in_flight_to_settle_within_its_health_timeout() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating")]);
    c.publish("m2", Some(NEW), Some(OLD), "active");
    r.control.action = Action::Abort;
    step(&mut r, &c, 3_000);
    assert_eq!(undo_phases(&r), [("m2", "pending"), ("m1", "pending")], "m2 settles first, holding the one slot");
    assert_eq!(pinned_hash([&r], "db.service", "m2"), Some(NEW));
    step(&mut r, &c, 61_999);
    assert_eq!(undo_phases(&r), [("m2", "pending"), ("m1", "pending")]);
    step(&mut r, &c, 62_000);
    assert_eq!(undo_phases(&r), [("m2", "updating"), ("m1", "pending")], "m2's health timeout is over");

    // With a budget of 2: the settling machine and one undo step, not two.
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 2, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "active");
    c.set("m2", NEW, "active");
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "done"), ("m3", "updating")]);
    c.publish("m3", Some(NEW), Some(OLD), "active");
    r.control.action = Action::Abort;
    step(&mut r, &c, 3_000);
    assert_eq!(undo_phases(&r), [("m3", "pending"), ("m1", "updating"), ("m2", "pending")]);
}

/// A unit that no longer runs on a machine of the rollout counts as served when a machine the rollout does not name
/// serves it; one that failed where it is counts as down even so.
#[test]
fn a_unit_gone_from_its_machine_counts_as_served_by_a_machine_outside_the_rollout() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Restart, 1, 0, OnFailure::Pause));
    r.control.action = Action::Pause;
    step(&mut r, &c, 0);
    let paused = r.clone();
    c.set("m9", OLD, "active");
    c.0.insert(("db.service".into(), "m2".into()), Observed { present: true, ..Observed::default() });
    r.control.action = Action::Run;
    step(&mut r, &c, 1);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending")], "m2's unit runs on m9: {}", reason(&r));

    let mut r = paused;
    c.set("m2", OLD, "failed");
    r.control.action = Action::Run;
    step(&mut r, &c, 1);
    assert_eq!(phases(&r), [("m1", "pending"), ("m2", "updating")], "m2 is down: it goes first");
}

/// Order rules on metadata pick no machine of a cluster that tells no metadata; the machine rules still order.
#[test]
fn metadata_order_rules_pick_nothing_in_a_cluster_that_tells_no_metadata() {
    let mut t = Table::default();
    for m in ["a1", "b2", "c3"] {
        t.set(m, OLD, "active");
    }
    for rule in ["role=db", "xyzzy=xyzzy"] {
        let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
        s.order = format!("last:{rule},first:b2");
        let mut r = rollout(s);
        r.control.action = Action::Pause;
        step(&mut r, &t, 0);
        let order: Vec<&str> = phases(&r).into_iter().map(|(m, _)| m).collect();
        assert_eq!(order, ["b2", "a1", "c3"], "{rule} picks nothing");
    }
}

/// A canary that failed after the canaries were done, then resumed, is changed again (it is still a canary): the
/// wait for a promotion does not hold it back.
#[test]
fn a_resumed_canary_is_released_again_while_the_rest_await_promotion() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    for m in ["m1", "m2", "m3"] {
        c.health(m, Healthy, "");
    }
    let mut s = checked_spec(1, 0, OnFailure::Pause);
    s.canary = 1;
    let mut r = rollout(s);
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    c.health("m1", Healthy, "");
    step(&mut r, &c, 1);
    assert!(r.progress.as_ref().unwrap().awaiting_promotion);
    c.health("m1", Unhealthy, "flap");
    step(&mut r, &c, 2);
    assert_eq!(phases(&r)[0], ("m1", "failed"), "{}", reason(&r));
    c.set("m1", NEW, "failed");
    r.control.resumes = 1;
    step(&mut r, &c, 3);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending"), ("m3", "pending")], "{}", reason(&r));
}

/// `--canary=N`: the first N machines change, then the rollout awaits promotion — whatever the budget, and even when
/// another machine is down already (it changes after the promotion, first).
#[test]
fn canaries_change_alone_whatever_the_budget() {
    let mut c = Table::with(&["m1", "m2", "m3", "m4"], OLD);
    c.set("m4", OLD, "failed");
    let mut s = spec(RolloutKind::Replace, 2, 0, OnFailure::Pause);
    s.canary = 1;
    let mut r = rollout(s);
    step(&mut r, &c, 0);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending"), ("m3", "pending"), ("m4", "pending")]);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1);
    assert_eq!(r.state(), RolloutState::Paused, "{}", reason(&r));
    assert!(reason(&r).starts_with("awaiting promotion: 1 canary machine(s)"), "{}", reason(&r));
    r.control.promoted = true;
    step(&mut r, &c, 2);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating"), ("m3", "pending"), ("m4", "updating")]);

    // The down machine still counts against the budget: with max-unavailable 1 the canary waits for it to serve
    // again, and the reason says so; a promotion lets the down machine change first.
    let mut c = Table::with(&["m1", "m2", "m3", "m4"], OLD);
    c.set("m4", OLD, "failed");
    let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
    s.canary = 1;
    let mut r = rollout(s);
    step(&mut r, &c, 0);
    assert_eq!(phases(&r), [("m1", "pending"), ("m2", "pending"), ("m3", "pending"), ("m4", "pending")]);
    assert_eq!(reason(&r), "waiting: 1 of at most 1 unavailable already: db.service on m4 (failed/dead)");
    r.control.promoted = true;
    step(&mut r, &c, 1);
    assert_eq!(phases(&r), [("m1", "pending"), ("m2", "pending"), ("m3", "pending"), ("m4", "updating")]);
}

/// A drain's move is gated by the unit's own check wherever it goes, and a failure names that check: one that
/// failed after it passed, or one that never passed within the health timeout.
#[test]
fn a_drain_move_that_fails_its_check_names_the_check() {
    let h = |status| crate::model::Health { status, since_ms: 0, output: "wsrep not synced".into() };
    let mut c = drained_cluster();
    let mut r = drain_of_m1(3);
    r.spec.min_healthy_ms = 10_000;
    step(&mut r, &c, 1_000);
    c.unit("a.service", "m2", Some(OLD), "active");
    c.0.get_mut(&("a.service".into(), "m2".into())).unwrap().health = Some(h(Healthy));
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r)[0], ("m2", "healthy"));
    c.0.get_mut(&("a.service".into(), "m2".into())).unwrap().health = Some(h(Unhealthy));
    step(&mut r, &c, 3_000);
    assert_eq!(
        reason(&r),
        "paused: a.service on m2: its health check failed 1 s after it first passed: unhealthy: wsrep not synced"
    );
    let mut r = drain_of_m1(3);
    step(&mut r, &c, 1_000);
    step(&mut r, &c, 61_000);
    assert_eq!(
        reason(&r),
        "paused: a.service on m2: not healthy within 60 s of its release: unhealthy: wsrep not synced"
    );
}

/// Promotion by the hold is kept: once the canaries held for `--canary-hold`, the rest are no longer held back, even
/// when a canary's step is taken up again later (its machine left before its step was done, and came back).
#[test]
fn a_promotion_by_the_hold_survives_a_canary_taken_up_again() {
    let mut c = Table::with(&["m1", "m2", "m3", "m4"], OLD);
    let mut s = spec(RolloutKind::Replace, 2, 0, OnFailure::Pause);
    s.canary = 1;
    s.canary_hold_ms = 10_000;
    let mut r = rollout(s);
    step(&mut r, &c, 100_000);
    assert_eq!(phases(&r)[..2], [("m1", "updating"), ("m2", "pending")], "the canary alone until its hold is over");
    // The canary's machine leaves before its step is done: skipped, which ends the canary phase; then the hold.
    c.leave("m1");
    step(&mut r, &c, 100_001);
    assert_eq!(phases(&r)[0], ("m1", "skipped"));
    step(&mut r, &c, 110_001);
    assert_eq!(phases(&r)[1], ("m2", "updating"), "promoted by the hold: {}", reason(&r));
    // The canary's machine comes back: its step is taken up again (released anew) while the others go on.
    c.back("m1");
    c.set("m1", NEW, "activating");
    c.set("m2", NEW, "active");
    step(&mut r, &c, 110_002);
    step(&mut r, &c, 110_003);
    assert_eq!(phases(&r)[0], ("m1", "updating"), "taken up again");
    c.set("m3", NEW, "active");
    step(&mut r, &c, 110_004);
    step(&mut r, &c, 110_005);
    assert!(
        phases(&r)[3] != ("m4", "pending"),
        "still promoted: m4 is not held back behind the canary taken up again: {:?} ({})",
        phases(&r),
        reason(&r)
    );
}

/// A resume sends a failed step whose machine does not serve the step's version back to pending (its machine keeps
/// the old version until the step's turn); only one still serving it is judged where it stands. And a resumed
/// restart's failed steps are released again within the budget, not all at once.
#[test]
fn a_resume_sends_failed_steps_that_do_not_serve_back_to_pending_within_the_budget() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 2, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "failed");
    c.set("m2", NEW, "activating");
    step(&mut r, &c, 1_001);
    step(&mut r, &c, 1_001 + DOWN_SETTLE_MS);
    assert_eq!(phases(&r), [("m1", "failed"), ("m2", "updating")]);
    // Resumed with room for one change only, taken by m2: m1, which does not serve its version, waits its turn.
    r.spec.max_unavailable = 1;
    r.control.resumes = 1;
    let resumed = advance(&r, &c, 5_000).progress;
    assert_eq!(
        resumed.steps[0].phase,
        Phase::Pending,
        "a machine that does not serve its version is not judged where it stands: {resumed:?}"
    );
    // A restart: two failed steps, max-unavailable 1.
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Restart, 2, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    for m in ["m1", "m2"] {
        c.restarted(m, "r1");
        c.set(m, OLD, "failed");
        c.restarted(m, "r1");
    }
    step(&mut r, &c, 1_001);
    step(&mut r, &c, 1_001 + DOWN_SETTLE_MS);
    assert_eq!(phases(&r), [("m1", "failed"), ("m2", "failed")]);
    r.spec.max_unavailable = 1;
    r.control.resumes = 1;
    let resumed = advance(&r, &c, 5_000).progress;
    let phases: Vec<Phase> = resumed.steps.iter().map(|s| s.phase).collect();
    assert_eq!(phases, [Phase::Updating, Phase::Pending], "one restart at a time on resume: {resumed:?}");
}

/// A skipped step whose machine is still listed for the unit but whose unit moved away is not taken up again.
#[test]
fn a_machine_whose_unit_moved_away_does_not_take_its_step_up_again() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 2, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.moved_off("m2");
    step(&mut r, &c, 1_001);
    assert_eq!(phases(&r)[1], ("m2", "skipped"));
    step(&mut r, &c, 1_002);
    assert_eq!(phases(&r)[1], ("m2", "skipped"), "its unit is scheduled elsewhere: {:?}", r.progress);
}

/// A joining machine's step is released when it joins: its health timeout runs from then, not from the epoch.
#[test]
fn a_joining_machines_step_is_released_at_its_arrival() {
    let mut c = Table::with(&["m1"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000_000);
    c.set("m2", NEW, "activating");
    step(&mut r, &c, 1_000_001);
    let p = r.progress.as_ref().unwrap();
    assert_eq!(p.step("db.service", "m2").map(|s| s.released_ms), Some(1_000_001));
    step(&mut r, &c, 1_000_002);
    assert_eq!(phases(&r)[1], ("m2", "updating"), "still within its health timeout: {}", reason(&r));
}

/// A cluster that tells only what every cluster must (observations, existence, holders) gets the defaults of the
/// rest: no unit moved, none that cannot load, none drained, no metadata. Its replace goes machine by machine.
#[test]
fn a_cluster_telling_only_the_essentials_moves_and_skips_nothing() {
    struct Plain(Table);
    impl Cluster for Plain {
        fn observe(&self, unit: &str, machine: &str) -> Observed {
            self.0.observe(unit, machine)
        }
        fn exists(&self, unit: &str) -> bool {
            self.0.exists(unit)
        }
        fn holders(&self, unit: &str) -> Vec<String> {
            self.0.holders(unit)
        }
    }
    let mut c = Plain(Table::with(&["m1", "m2"], OLD));
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    let a = advance(&r, &c, 1_000);
    r.progress = Some(a.progress);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending")], "{:?}", r.progress);
    c.0.set("m1", NEW, "active");
    let a = advance(&r, &c, 1_001);
    r.progress = Some(a.progress);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating")], "{:?}", r.progress);
}

/// A machine that left during a replace and came back no longer holding the unit (a global unit whose metadata it
/// no longer matches: present, but the unit is not for it) does not take its skipped step up again, and does not
/// count against the budget: there is nothing there to change or to serve. Either would keep the rollout from
/// ending (it held a max-unavailable 1 rollout "waiting" for good before).
#[test]
fn a_machine_back_without_the_unit_keeps_its_step_skipped() {
    /// The table, except that `away` is present but holds nothing (not a holder, no state of the unit).
    struct Unheld {
        table: Table,
        away: Option<&'static str>,
    }
    impl Cluster for Unheld {
        fn observe(&self, unit: &str, machine: &str) -> Observed {
            match self.away {
                Some(m) if m == machine => Observed { present: true, ..Observed::default() },
                _ => self.table.observe(unit, machine),
            }
        }
        fn exists(&self, unit: &str) -> bool {
            self.table.exists(unit)
        }
        fn holders(&self, unit: &str) -> Vec<String> {
            self.table.holders(unit).into_iter().filter(|m| Some(m.as_str()) != self.away).collect()
        }
    }
    let mut c = Unheld { table: Table::with(&["m1", "m2", "m3"], OLD), away: None };
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    let go = |r: &mut Rollout, c: &Unheld, now: u64| {
        let a = advance(r, c, now);
        r.progress = Some(a.progress);
    };
    c.table.leave("m1");
    go(&mut r, &c, 1_000);
    assert_eq!(phases(&r), [("m1", "skipped"), ("m2", "pending"), ("m3", "pending")], "{}", reason(&r));
    c.table.back("m1");
    c.away = Some("m1");
    go(&mut r, &c, 1_001);
    assert_eq!(phases(&r), [("m1", "skipped"), ("m2", "updating"), ("m3", "pending")], "{}", reason(&r));
    c.table.set("m2", NEW, "active");
    go(&mut r, &c, 1_002);
    c.table.set("m3", NEW, "active");
    go(&mut r, &c, 1_003);
    assert_eq!(phases(&r), [("m1", "skipped"), ("m2", "done"), ("m3", "done")], "{}", reason(&r));
    assert_eq!(r.state(), RolloutState::Done, "{}", reason(&r));
}

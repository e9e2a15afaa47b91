use std::collections::BTreeMap;

use super::*;

pub(super) const OLD: &str = "1111111111111111111111111111111111111111";
pub(super) const NEW: &str = "2222222222222222222222222222222222222222";

/// A cluster as a table: (unit, machine) → observation; holders are the machines listed for a unit. The second
/// field: (unit, machine) pairs whose unit is scheduled elsewhere now ([`Cluster::moved`]).
#[derive(Default)]
pub(super) struct Table(
    pub(super) BTreeMap<(String, String), Observed>,
    pub(super) std::collections::BTreeSet<(String, String)>,
);

impl Table {
    pub(super) fn with(machines: &[&str], hash: &str) -> Table {
        let mut t = Table::default();
        for m in machines {
            t.set(m, hash, "active");
        }
        t
    }
    pub(super) fn set(&mut self, machine: &str, hash: &str, active: &str) {
        self.0.insert(
            ("db.service".into(), machine.into()),
            Observed {
                present: true,
                hash: Some(hash.into()),
                running: Some(hash.into()),
                active_state: active.into(),
                sub_state: if active == "active" { "running".into() } else { "dead".into() },
                restarts: Some(0),
                restarted_for: None,
                health: None,
            },
        );
    }
    pub(super) fn restarted(&mut self, machine: &str, id: &str) {
        self.0.get_mut(&("db.service".into(), machine.into())).unwrap().restarted_for = Some(id.into());
    }
    /// systemd's view of `machine` as published: sub state and restart counter.
    pub(super) fn systemd(&mut self, machine: &str, active: &str, sub: &str, restarts: Option<u32>) {
        let seen = self.0.get_mut(&("db.service".into(), machine.into())).unwrap();
        seen.active_state = active.into();
        seen.sub_state = sub.into();
        seen.restarts = restarts;
    }
    pub(super) fn leave(&mut self, machine: &str) {
        self.0.get_mut(&("db.service".into(), machine.into())).unwrap().present = false;
    }
    pub(super) fn back(&mut self, machine: &str) {
        self.0.get_mut(&("db.service".into(), machine.into())).unwrap().present = true;
    }
    /// The unit is no longer on `machine`: rescheduled elsewhere (it stops publishing there).
    pub(super) fn moved_off(&mut self, machine: &str) {
        self.0.insert(("db.service".into(), machine.into()), Observed { present: true, ..Observed::default() });
        self.1.insert(("db.service".into(), machine.into()));
    }
}

impl Cluster for Table {
    fn observe(&self, unit: &str, machine: &str) -> Observed {
        self.0.get(&(unit.to_string(), machine.to_string())).cloned().unwrap_or_default()
    }
    fn exists(&self, unit: &str) -> bool {
        self.0.keys().any(|(u, _)| u == unit)
    }
    fn holders(&self, unit: &str) -> Vec<String> {
        // Reversed on purpose: steps must come out in machine-ID order whatever the cluster's order.
        self.0.keys().filter(|(u, _)| u == unit).map(|(_, m)| m.clone()).rev().collect()
    }
    fn moved(&self, unit: &str, machine: &str) -> bool {
        self.1.contains(&(unit.to_string(), machine.to_string()))
    }
}

pub(super) fn spec(kind: RolloutKind, max_unavailable: u32, min_healthy_ms: u64, on_failure: OnFailure) -> RolloutSpec {
    let to = if kind == RolloutKind::Replace { NEW } else { OLD };
    RolloutSpec {
        id: "r1".into(),
        kind,
        units: vec![RolloutUnit {
            name: "db.service".into(),
            from: OLD.into(),
            to: to.into(),
            ..RolloutUnit::default()
        }],
        max_unavailable,
        min_healthy_ms,
        health_timeout_ms: 60_000,
        on_failure,
        created_ms: 0,
        ..RolloutSpec::default()
    }
}

pub(super) fn rollout(spec: RolloutSpec) -> Rollout {
    Rollout { spec, control: Control::default(), progress: None }
}

pub(super) fn phases(r: &Rollout) -> Vec<(&str, &str)> {
    r.progress.as_ref().unwrap().steps.iter().map(|s| (s.machine.as_str(), s.phase.as_str())).collect()
}

/// Applies `advance` at `now` and stores its progress, as the engine does.
pub(super) fn step(r: &mut Rollout, cluster: &Table, now: u64) -> Advanced {
    let a = advance(r, cluster, now);
    r.progress = Some(a.progress.clone());
    a
}

#[test]
fn a_replace_goes_machine_by_machine_in_id_order_waiting_for_min_healthy() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    let a = step(&mut r, &c, 1_000);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending"), ("m3", "pending")]);
    assert_eq!(a.wake_at_ms, Some(61_000), "the release's health deadline");
    // Pending machines keep the old version; the released one follows the unit's (new) version.
    assert_eq!(pinned_hash([&r], "db.service", "m1"), None);
    assert_eq!(pinned_hash([&r], "db.service", "m2"), Some(OLD));
    // Nothing changes until m1 runs the new version and is active.
    c.set("m1", NEW, "activating");
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r)[0], ("m1", "updating"));
    c.set("m1", NEW, "active");
    let a = step(&mut r, &c, 3_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"));
    assert_eq!(a.wake_at_ms, Some(13_000), "min healthy ends before the timeout");
    step(&mut r, &c, 12_999);
    assert_eq!(phases(&r)[..2], [("m1", "healthy"), ("m2", "pending")]);
    step(&mut r, &c, 13_000);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating"), ("m3", "pending")]);
    for (m, t) in [("m2", 20_000), ("m3", 40_000)] {
        c.set(m, NEW, "active");
        step(&mut r, &c, t);
        step(&mut r, &c, t + 10_000);
    }
    assert_eq!(r.state(), RolloutState::Done);
    assert_eq!(pinned_hash([&r], "db.service", "m3"), None, "a finished rollout pins nothing");
}

#[test]
fn max_unavailable_bounds_the_machines_in_flight() {
    let c = Table::with(&["m1", "m2", "m3", "m4", "m5"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 2, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    let in_flight = |r: &Rollout| phases(r).iter().filter(|(_, p)| *p == "updating").count();
    assert_eq!(in_flight(&r), 2);
    step(&mut r, &c, 1);
    assert_eq!(in_flight(&r), 2, "nothing arrived, nothing more released");
}

#[test]
fn a_failed_health_check_pauses_and_keeps_the_others_on_the_old_version() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "failed");
    step(&mut r, &c, 3_000);
    assert_eq!(r.state(), RolloutState::Running, "failed for an instant may be systemd restarting it");
    let a = step(&mut r, &c, 3_000 + DOWN_SETTLE_MS);
    assert_eq!(r.state(), RolloutState::Paused);
    assert!(
        a.progress.reason.contains("db.service on m1: the new version stopped being active after 3 s"),
        "{}",
        a.progress.reason
    );
    assert!(a.progress.reason.contains("activeState=failed"), "{}", a.progress.reason);
    assert!(a.roll_back.is_empty());
    assert_eq!(pinned_hash([&r], "db.service", "m2"), Some(OLD));
    // Still paused later; a resume releases the failed machine again.
    step(&mut r, &c, 100_000);
    assert_eq!(phases(&r), [("m1", "failed"), ("m2", "pending"), ("m3", "pending")]);
    r.control.resumes = 1;
    step(&mut r, &c, 101_000);
    assert_eq!(r.state(), RolloutState::Running);
    assert_eq!(phases(&r)[0], ("m1", "updating"));
}

#[test]
fn a_failure_with_rollback_returns_every_changed_machine_to_its_old_version() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Rollback));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "activating");
    let a = step(&mut r, &c, 61_000);
    assert_eq!(r.state(), RolloutState::Running, "undoing");
    assert!(
        a.progress.reason.starts_with("rolling back: db.service on m1: not healthy within 60 s"),
        "{}",
        a.progress.reason
    );
    assert_eq!(a.roll_back, r.spec.units);
    assert_eq!(pinned_hash([&r], "db.service", "m2"), None, "the unit's own version (the old one again) applies");
    c.set("m1", OLD, "active");
    let a = step(&mut r, &c, 61_001);
    assert_eq!(r.state(), RolloutState::RolledBack);
    assert!(a.progress.reason.starts_with("rolled back: db.service on m1: not healthy"), "{}", a.progress.reason);
}

#[test]
fn a_restart_asks_each_machine_once_and_waits_for_its_marker() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Restart, 1, 0, OnFailure::Rollback));
    step(&mut r, &c, 0);
    assert_eq!(restart_token([&r], "db.service", "m1"), Some("r1"));
    assert_eq!(restart_token([&r], "db.service", "m2"), None);
    assert_eq!(pinned_hash([&r], "db.service", "m2"), None, "a restart pins no version");
    step(&mut r, &c, 1);
    assert_eq!(phases(&r)[0], ("m1", "updating"), "same hash is not enough: the restart marker is");
    c.restarted("m1", "r1");
    step(&mut r, &c, 2);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating")]);
    assert_eq!(restart_token([&r], "db.service", "m1"), None, "done: no second restart");
    c.set("m2", OLD, "failed");
    c.restarted("m2", "r1");
    let a = step(&mut r, &c, 61_000);
    assert_eq!(r.state(), RolloutState::Paused, "a restart has no old version to roll back to");
    assert!(a.roll_back.is_empty());
}

#[test]
fn machines_that_leave_are_skipped_count_against_the_budget_and_abort_undoes() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.leave("m1");
    let a = step(&mut r, &c, 1);
    assert_eq!(phases(&r), [("m1", "skipped"), ("m2", "pending"), ("m3", "pending")]);
    assert_eq!(r.state(), RolloutState::Running);
    assert_eq!(a.progress.reason, "waiting: 1 of at most 1 unavailable already: db.service on m1 (left the cluster)");
    r.spec.max_unavailable = 2;
    step(&mut r, &c, 2);
    assert_eq!(phases(&r), [("m1", "skipped"), ("m2", "updating"), ("m3", "pending")]);
    c.set("m2", NEW, "activating");
    r.control.action = Action::Abort;
    let a = step(&mut r, &c, 3);
    assert_eq!(r.state(), RolloutState::Running, "undoing");
    assert_eq!(a.roll_back, r.spec.units, "the unit object goes back to the old version at once");
    assert_eq!(undo_phases(&r), [("m2", "pending")], "m2's change is still in flight: it settles first");
    assert_eq!(pinned_hash([&r], "db.service", "m3"), None, "never changed: follows the unit (the old version again)");
    assert_eq!(pinned_hash([&r], "db.service", "m2"), Some(NEW), "finishes its change to the new version first");
    c.set("m2", NEW, "active");
    step(&mut r, &c, 4);
    assert_eq!(undo_phases(&r), [("m2", "updating")], "settled: its undo is released");
    assert_eq!(pinned_hash([&r], "db.service", "m2"), None, "its undo is released: the old version");
    c.set("m2", OLD, "active");
    let a = step(&mut r, &c, 5);
    assert_eq!(r.state(), RolloutState::Aborted);
    assert!(a.roll_back.is_empty(), "written once, when the undo started");
    r.control.action = Action::Run;
    step(&mut r, &c, 6);
    assert_eq!(r.state(), RolloutState::Aborted, "final");
}

#[test]
fn a_rollout_whose_units_were_destroyed_ends() {
    let c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    let a = step(&mut r, &Table::default(), 1);
    assert_eq!(r.state(), RolloutState::Aborted);
    assert_eq!(a.progress.reason, "its units were destroyed");
    assert!(a.roll_back.is_empty());
}

#[test]
fn pause_by_request_stops_releasing_and_run_continues() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    r.control.action = Action::Pause;
    step(&mut r, &c, 0);
    assert_eq!(r.state(), RolloutState::Paused);
    assert_eq!(phases(&r), [("m1", "pending"), ("m2", "pending")]);
    r.control.action = Action::Run;
    step(&mut r, &c, 1);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 2);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating")]);
}

#[test]
fn stored_shapes_are_stable() {
    let s = spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause);
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(
        json,
        format!(
            r#"{{"id":"r1","kind":"replace","units":[{{"name":"db.service","from":"{OLD}","to":"{NEW}"}}],"maxUnavailable":1,"minHealthyMs":10000,"healthTimeoutMs":60000,"onFailure":"pause","createdMs":0}}"#
        )
    );
    assert_eq!(serde_json::to_string(&Control::default()).unwrap(), r#"{"action":"run","resumes":0}"#);
}

#[test]
fn a_restart_by_systemd_within_min_healthy_fails_the_step_naming_the_restart_counter() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"));
    assert_eq!(r.progress.as_ref().unwrap().steps[0].restarts_at_healthy, Some(0));
    // systemd restarted the crashed process before the agent published anything else: only the counter shows it.
    c.systemd("m1", "active", "running", Some(1));
    step(&mut r, &c, 3_000);
    assert_eq!(phases(&r), [("m1", "failed"), ("m2", "pending")], "the next machine is not released");
    assert_eq!(r.state(), RolloutState::Paused);
    let reason = &r.progress.as_ref().unwrap().reason;
    assert!(
        reason
            .contains("on m1: systemd restarted it 2 s after it became healthy: the restart counter moved from 0 to 1"),
        "{reason}"
    );
}

#[test]
fn a_healthy_step_whose_unit_is_between_states_waits_until_it_settles() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1_000);
    // The process exited: systemd runs the stop hooks, then restarts it (Restart=always).
    c.systemd("m1", "deactivating", "stop-post", Some(0));
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"));
    c.systemd("m1", "activating", "auto-restart", Some(0));
    let a = step(&mut r, &c, 11_000);
    assert_eq!(phases(&r), [("m1", "healthy"), ("m2", "pending")], "not done while systemd restarts it");
    assert_eq!(a.wake_at_ms, Some(60_000), "only the health deadline is left to wait for");
    c.systemd("m1", "active", "running", Some(1));
    step(&mut r, &c, 12_000);
    assert_eq!(phases(&r)[0], ("m1", "failed"));
    assert!(r.progress.as_ref().unwrap().reason.contains("the restart counter moved from 0 to 1"));

    // Without Restart= it settles failed: the step fails on that.
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1_000);
    c.systemd("m1", "deactivating", "stop-post", Some(0));
    step(&mut r, &c, 2_000);
    c.systemd("m1", "failed", "failed", None);
    let a = step(&mut r, &c, 3_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"), "failed only for an instant is not settled yet");
    assert_eq!(a.wake_at_ms, Some(3_000 + DOWN_SETTLE_MS), "woken when failed has lasted");
    step(&mut r, &c, 3_000 + DOWN_SETTLE_MS);
    assert_eq!(phases(&r)[0], ("m1", "failed"));
    let reason = &r.progress.as_ref().unwrap().reason;
    assert!(reason.contains("stopped being active after 3 s: activeState=failed"), "{reason}");
}

/// systemd (252) restarts a unit with `Restart=` through `failed` and `inactive`, and the agent may publish either:
/// the step waits for the restart and then names the counter, not the passing state.
#[test]
fn a_unit_failed_on_its_way_to_auto_restart_is_named_by_its_restart_counter() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1_000);
    c.systemd("m1", "failed", "failed", Some(0));
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"), "failed for an instant: not settled");
    c.systemd("m1", "activating", "auto-restart", Some(0));
    step(&mut r, &c, 2_010);
    assert_eq!(phases(&r)[0], ("m1", "healthy"));
    // The restart job stops it before it starts it again: inactive for an instant.
    c.systemd("m1", "inactive", "dead", None);
    step(&mut r, &c, 2_100);
    assert_eq!(phases(&r)[0], ("m1", "healthy"), "inactive for an instant: not settled");
    c.systemd("m1", "active", "running", Some(1));
    step(&mut r, &c, 2_200);
    assert_eq!(phases(&r)[0], ("m1", "failed"));
    let reason = &r.progress.as_ref().unwrap().reason;
    assert!(reason.contains("the restart counter moved from 0 to 1"), "{reason}");
    // A second spell of failed is timed from its own start.
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    c.set("m1", NEW, "active");
    c.systemd("m1", "active", "running", Some(0));
    step(&mut r, &c, 0);
    step(&mut r, &c, 1_000);
    c.systemd("m1", "failed", "failed", Some(0));
    step(&mut r, &c, 2_000);
    c.systemd("m1", "activating", "start-pre", Some(0));
    step(&mut r, &c, 2_500);
    c.systemd("m1", "failed", "failed", Some(0));
    step(&mut r, &c, 5_000);
    assert_eq!(phases(&r)[0], ("m1", "healthy"), "the earlier failed spell does not count");
}

#[test]
fn without_a_published_counter_a_step_fails_on_what_the_states_show() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    c.systemd("m1", "active", "running", None);
    step(&mut r, &c, 1_000);
    c.systemd("m1", "activating", "auto-restart", None);
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r)[0], ("m1", "failed"));
    assert!(r.progress.as_ref().unwrap().reason.contains("stopped being active after 1 s"));
    // A counter appearing later (an upgraded agent) is not a restart.
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    c.set("m1", NEW, "active");
    c.systemd("m1", "active", "running", None);
    step(&mut r, &c, 0);
    step(&mut r, &c, 1_000);
    c.systemd("m1", "active", "running", Some(5));
    step(&mut r, &c, 11_000);
    assert_eq!(phases(&r)[0], ("m1", "done"));
}

/// A finished (or running) rollout of `units` created at `created_ms`.
pub(super) fn stored(id: &str, units: &[&str], created_ms: u64, state: RolloutState) -> Rollout {
    let mut spec = spec(RolloutKind::Restart, 1, 0, OnFailure::Pause);
    spec.id = id.into();
    spec.created_ms = created_ms;
    spec.units = units
        .iter()
        .map(|u| RolloutUnit { name: (*u).into(), from: OLD.into(), to: OLD.into(), ..RolloutUnit::default() })
        .collect();
    Rollout { spec, control: Control::default(), progress: Some(RolloutProgress { state, ..Default::default() }) }
}

#[test]
fn only_finished_rollouts_beyond_the_last_few_of_every_unit_expire() {
    use RolloutState::*;
    let all = [
        stored("a1", &["a.service"], 1, Done),
        stored("a2", &["a.service"], 2, Aborted),
        stored("ab3", &["a.service", "b.service"], 3, RolledBack),
        stored("a4", &["a.service"], 4, Done),
        stored("a5", &["a.service"], 5, Done),
        stored("a0-running", &["a.service"], 0, Running),
        stored("a0-paused", &["a.service"], 0, Paused),
    ];
    assert_eq!(expired(&all, 2), ["a1", "a2"], "ab3 is among the last 2 of b.service; running ones never expire");
    assert_eq!(expired(&all, 1), ["a1", "a2", "a4"]);
    assert_eq!(expired(&all, 5), Vec::<&str>::new());
    assert_eq!(expired(&all, 0), ["a1", "a2", "a4", "a5", "ab3"]);
}

#[test]
fn equal_creation_times_are_ordered_by_id() {
    let all =
        [stored("r1", &["a.service"], 7, RolloutState::Done), stored("r2", &["a.service"], 7, RolloutState::Done)];
    assert_eq!(expired(&all, 1), ["r1"], "r2 counts as the newer one");
}

// Issue 34: health checks, fail fast, the budget, undo within it, canaries, order, deadline, skip-failed.

impl Table {
    /// `machine` publishes its check's status (the unit has a check).
    pub(super) fn health(&mut self, machine: &str, status: crate::model::HealthStatus, output: &str) {
        let seen = self.0.get_mut(&("db.service".into(), machine.into())).unwrap();
        seen.health = Some(crate::model::Health { status, since_ms: 0, output: output.into() });
    }
}

/// A replace of a unit whose versions both have a health check.
pub(super) fn checked_spec(max_unavailable: u32, min_healthy_ms: u64, on_failure: OnFailure) -> RolloutSpec {
    let mut s = spec(RolloutKind::Replace, max_unavailable, min_healthy_ms, on_failure);
    s.units[0].checked = true;
    s.units[0].from_checked = true;
    s
}

pub(super) fn undo_phases(r: &Rollout) -> Vec<(&str, &str)> {
    r.progress.as_ref().unwrap().undo.iter().map(|s| (s.machine.as_str(), s.phase.as_str())).collect()
}

pub(super) fn in_flight(r: &Rollout) -> usize {
    let p = r.progress.as_ref().unwrap();
    let list = if p.undoing() { &p.undo } else { &p.steps };
    list.iter().filter(|s| matches!(s.phase, Phase::Updating | Phase::Healthy)).count()
}

#[test]
fn a_checked_step_waits_for_its_check_and_fails_when_it_fails_within_min_healthy() {
    use crate::model::HealthStatus::*;
    let mut c = Table::with(&["m1", "m2"], OLD);
    for m in ["m1", "m2"] {
        c.health(m, Healthy, "");
    }
    let mut r = rollout(checked_spec(1, 5_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    c.health("m1", Unknown, "");
    let a = step(&mut r, &c, 100);
    assert_eq!(phases(&r)[0], ("m1", "updating"), "active is not enough while the check has not passed");
    assert_eq!(a.progress.steps[0].detail, "waiting for its health check (unknown)");
    c.health("m1", Unhealthy, "syncing: 40%");
    let a = step(&mut r, &c, 200);
    assert_eq!(a.progress.steps[0].detail, "waiting for its health check (unhealthy: syncing: 40%)");
    c.health("m1", Healthy, "synced");
    step(&mut r, &c, 300);
    assert_eq!(phases(&r)[0], ("m1", "healthy"));
    c.health("m1", Unhealthy, "lost quorum");
    let a = step(&mut r, &c, 2_300);
    assert_eq!(r.state(), RolloutState::Paused);
    assert_eq!(
        a.progress.reason,
        "paused: db.service on m1: its health check failed 2 s after it first passed: unhealthy: lost quorum"
    );
    assert_eq!(phases(&r)[1], ("m2", "pending"));
}

#[test]
fn a_done_machine_that_turns_unhealthy_fails_the_running_rollout() {
    use crate::model::HealthStatus::*;
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    for m in ["m1", "m2", "m3"] {
        c.health(m, Healthy, "");
    }
    let mut r = rollout(checked_spec(1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    c.health("m1", Healthy, "");
    step(&mut r, &c, 1);
    assert_eq!(phases(&r)[..2], [("m1", "done"), ("m2", "updating")]);
    c.health("m1", Unhealthy, "behind by 300 s");
    let a = step(&mut r, &c, 2);
    assert_eq!(phases(&r)[0], ("m1", "failed"));
    assert!(
        a.progress.reason.starts_with("paused: db.service on m1: its health check failed"),
        "{}",
        a.progress.reason
    );
}

#[test]
fn a_version_that_settles_failed_fails_its_step_within_seconds_not_at_the_health_timeout() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "failed");
    let a = step(&mut r, &c, 500);
    assert_eq!(phases(&r)[0], ("m1", "updating"), "failed for less than DOWN_SETTLE_MS: maybe a restart");
    assert_eq!(a.wake_at_ms, Some(500 + DOWN_SETTLE_MS), "looked at again when it has settled");
    let a = step(&mut r, &c, 500 + DOWN_SETTLE_MS);
    assert_eq!(phases(&r)[0], ("m1", "failed"));
    assert_eq!(
        a.progress.reason,
        "paused: db.service on m1: the new version did not start: activeState=failed subState=dead"
    );
    // A machine still failed with the OLD version (the file not swapped yet) is not the new version failing.
    let mut c = Table::with(&["m1"], OLD);
    c.set("m1", OLD, "failed");
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    step(&mut r, &c, 5_000);
    assert_eq!(phases(&r)[0], ("m1", "updating"));
}

#[test]
fn machines_already_down_count_against_the_budget_and_go_first() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    c.set("m2", OLD, "failed");
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    assert_eq!(
        phases(&r),
        [("m1", "pending"), ("m2", "updating"), ("m3", "pending")],
        "the machine already down changes first, and no other goes down meanwhile"
    );
    c.set("m2", NEW, "active");
    step(&mut r, &c, 1);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "done"), ("m3", "pending")]);
    // A machine that goes down on its own while the rollout runs holds the next step back, and the reason says so.
    c.set("m1", NEW, "active");
    c.set("m3", OLD, "inactive");
    step(&mut r, &c, 2);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "done"), ("m3", "updating")], "m3 down and pending: it goes");
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    c.set("m2", NEW, "active");
    step(&mut r, &c, 1);
    c.set("m1", NEW, "inactive");
    let a = step(&mut r, &c, 2);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "done"), ("m3", "pending")]);
    assert_eq!(a.progress.reason, "waiting: 1 of at most 1 unavailable already: db.service on m1 (inactive/dead)");
}

#[test]
fn a_rollback_returns_the_changed_machines_one_step_at_a_time_the_failed_one_first() {
    let mut c = Table::with(&["m1", "m2", "m3", "m4"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Rollback));
    step(&mut r, &c, 0);
    for (t, m) in [(1, "m1"), (2, "m2")] {
        c.set(m, NEW, "active");
        step(&mut r, &c, t);
    }
    assert_eq!(phases(&r)[..3], [("m1", "done"), ("m2", "done"), ("m3", "updating")]);
    c.set("m3", NEW, "failed");
    step(&mut r, &c, 10);
    let a = step(&mut r, &c, 10 + DOWN_SETTLE_MS);
    assert_eq!(a.roll_back, r.spec.units, "the unit object goes back once, when the undo starts");
    assert_eq!(undo_phases(&r), [("m3", "updating"), ("m1", "pending"), ("m2", "pending")]);
    assert_eq!(pinned_hash([&r], "db.service", "m1"), Some(NEW), "keeps the new version until its undo step");
    assert_eq!(pinned_hash([&r], "db.service", "m3"), None, "released: the old version");
    assert_eq!(pinned_hash([&r], "db.service", "m4"), None, "never changed: the old version");
    let mut t = 2_000;
    for m in ["m3", "m1", "m2"] {
        assert!(in_flight(&r) <= 1, "never two machines changing at once: {:?}", undo_phases(&r));
        c.set(m, OLD, "active");
        t += 1;
        step(&mut r, &c, t);
    }
    assert_eq!(r.state(), RolloutState::RolledBack);
    assert!(
        r.progress.as_ref().unwrap().reason.starts_with("rolled back: db.service on m3: the new version did not start"),
        "{}",
        r.progress.as_ref().unwrap().reason
    );
}

#[test]
fn an_undo_step_that_fails_pauses_and_resume_tries_it_again() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1);
    c.set("m2", NEW, "deactivating");
    r.control.action = Action::Abort;
    step(&mut r, &c, 2);
    // m2 was changing: it settles first (holding the one slot), then its undo goes first, then m1's.
    assert_eq!(undo_phases(&r), [("m2", "pending"), ("m1", "pending")]);
    c.set("m2", NEW, "active");
    step(&mut r, &c, 3);
    assert_eq!(undo_phases(&r), [("m2", "updating"), ("m1", "pending")]);
    c.set("m2", OLD, "active");
    step(&mut r, &c, 4);
    assert_eq!(undo_phases(&r), [("m2", "done"), ("m1", "updating")]);
    c.set("m1", OLD, "failed");
    let mut t = 10;
    for _ in 0..3 {
        t += DOWN_SETTLE_MS;
        step(&mut r, &c, t);
    }
    assert_eq!(r.state(), RolloutState::Paused, "{:?}", r.progress);
    assert!(r.progress.as_ref().unwrap().reason.starts_with("paused while rolling back: db.service on m1"));
    r.control.resumes += 1;
    c.set("m1", OLD, "active");
    step(&mut r, &c, t + 1);
    step(&mut r, &c, t + 2);
    assert_eq!(r.state(), RolloutState::Aborted);
}

#[test]
fn canaries_pause_for_a_promotion_or_promote_after_their_hold() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
    s.canary = 1;
    let mut r = rollout(s.clone());
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    let a = step(&mut r, &c, 1);
    assert_eq!(r.state(), RolloutState::Paused);
    assert!(a.progress.awaiting_promotion);
    assert!(a.progress.reason.starts_with("awaiting promotion: 1 canary machine(s)"), "{}", a.progress.reason);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "pending"), ("m3", "pending")]);
    assert_eq!(pinned_hash([&r], "db.service", "m2"), Some(OLD));
    r.control.promoted = true;
    let a = step(&mut r, &c, 2);
    assert!(!a.progress.awaiting_promotion);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating"), ("m3", "pending")]);

    s.canary_hold_ms = 5_000;
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(s);
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    let a = step(&mut r, &c, 1_000);
    assert_eq!((r.state(), a.wake_at_ms), (RolloutState::Running, Some(6_000)), "{}", a.progress.reason);
    assert_eq!(phases(&r)[1], ("m2", "pending"));
    step(&mut r, &c, 6_000);
    assert_eq!(phases(&r)[1], ("m2", "updating"), "promoted by the hold");
}

#[test]
fn an_order_puts_chosen_machines_first_or_last_and_a_percentage_sizes_the_budget() {
    let c = Table::with(&["m1", "m2", "m3", "m4", "m5"], OLD);
    let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
    s.order = "last:a1,first:c3".into();
    let mut t = Table::default();
    for m in ["a1", "b2", "c3"] {
        t.set(m, OLD, "active");
    }
    let mut r = rollout(s);
    step(&mut r, &t, 0);
    assert_eq!(phases(&r), [("c3", "updating"), ("b2", "pending"), ("a1", "pending")]);
    let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
    s.max_unavailable_percent = 40;
    let mut r = rollout(s);
    step(&mut r, &c, 0);
    assert_eq!(in_flight(&r), 2, "40% of 5 machines");
}

#[test]
fn the_progress_deadline_fails_a_rollout_that_takes_too_long_and_skip_failed_goes_on() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
    s.progress_deadline_ms = 10_000;
    let mut r = rollout(s);
    let a = step(&mut r, &c, 1_000);
    assert_eq!(a.wake_at_ms, Some(11_000));
    c.set("m1", NEW, "activating");
    step(&mut r, &c, 10_999);
    assert_eq!(r.state(), RolloutState::Running);
    let a = step(&mut r, &c, 11_000);
    assert_eq!(r.state(), RolloutState::Paused);
    assert_eq!(a.progress.reason, "paused: not done within its progress deadline of 10 s");
    // Resumed: a new deadline from the resume.
    r.control.resumes += 1;
    c.set("m1", NEW, "failed");
    step(&mut r, &c, 11_000);
    step(&mut r, &c, 11_000 + DOWN_SETTLE_MS);
    assert_eq!(phases(&r)[0], ("m1", "failed"));
    r.control.resumes += 1;
    r.control.skip_failed = true;
    step(&mut r, &c, 13_000);
    assert_eq!(phases(&r)[0].1, "skipped");
    assert!(r.progress.as_ref().unwrap().steps[0].detail.starts_with("skipped by request after it failed"));
    assert!(r.progress.as_ref().unwrap().steps[0].waived);
    assert_eq!(phases(&r)[1], ("m2", "updating"), "m1 is still down, but given up: it no longer holds the rest back");
}

#[test]
fn a_check_failing_everywhere_still_changes_one_machine_at_a_time() {
    use crate::model::HealthStatus::*;
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    for m in ["m1", "m2", "m3"] {
        c.health(m, Unhealthy, "check script missing");
    }
    let mut r = rollout(checked_spec(1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    assert_eq!(
        phases(&r),
        [("m1", "updating"), ("m2", "pending"), ("m3", "pending")],
        "down machines go first, but never more at once than the budget"
    );
    // A machine that publishes no health at all (a fleetd without checks) counts by systemd alone for the budget,
    // and its step waits for a check, saying why.
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(checked_spec(1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    let a = step(&mut r, &c, 1);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending")]);
    assert_eq!(
        a.progress.steps[0].detail,
        "waiting for its health check (no health published: does its fleetd run health checks?)"
    );
}

/// A spec and progress read back from etcd may hold any number (issue 36): times at `u64::MAX` (a spec or progress
/// written by a hostile client) make no sum overflow — a panic in a debug build, a wrap to the past in the shipped
/// one. The decision reads them as "never": no deadline passes, no step is done by its hold, nothing is woken early.
#[test]
fn times_at_u64_max_never_overflow_and_mean_never() {
    let max = u64::MAX;
    let mut s = spec(RolloutKind::Replace, u32::MAX, max, OnFailure::Pause);
    s.health_timeout_ms = max;
    s.progress_deadline_ms = max;
    s.canary = u32::MAX;
    s.canary_hold_ms = max;
    s.created_ms = max;
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(s.clone());
    r.control.resumes = u32::MAX;
    for now in [0, 1, max - 1] {
        let a = advance(&r, &c, now);
        assert_eq!(a.progress.state, RolloutState::Running, "at {now}: {}", a.progress.reason);
    }
    step(&mut r, &c, 5);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "updating")], "a budget of u32::MAX");
    c.set("m1", NEW, "active");
    c.set("m2", NEW, "failed");
    let a = step(&mut r, &c, 10);
    assert_eq!(phases(&r)[0], ("m1", "healthy"));
    assert_eq!(a.wake_at_ms, Some(10 + DOWN_SETTLE_MS), "m2 settling down; the hold of u64::MAX wakes nothing");
    let a = step(&mut r, &c, max - 1);
    assert_eq!(phases(&r), [("m1", "healthy"), ("m2", "failed")], "{}", a.progress.reason);

    // Stored progress with times at the end of time: a step released, healthy or down "then".
    let mut p = r.progress.clone().unwrap();
    for step in &mut p.steps {
        step.phase = Phase::Healthy;
        (step.released_ms, step.healthy_since_ms, step.down_since_ms) = (max, max, max);
        step.restarts_at_healthy = Some(0);
    }
    (p.started_ms, p.canaries_done_ms, p.state) = (max, max, RolloutState::Running);
    c.systemd("m2", "activating", "auto-restart", Some(0));
    for now in [0, max - 1] {
        let stored = Rollout { progress: Some(p.clone()), ..r.clone() };
        let a = advance(&stored, &c, now);
        assert!(a.progress.steps.iter().all(|s| s.phase == Phase::Healthy), "at {now}: {:?}", a.progress.steps);
    }
    // An undo over them, started by an abort.
    let aborted = Rollout {
        progress: Some(p.clone()),
        control: Control { action: Action::Abort, ..Control::default() },
        ..r.clone()
    };
    let a = advance(&aborted, &c, max - 1);
    assert_eq!(a.progress.undo_end, Some(RolloutState::Aborted));
    assert_eq!(a.roll_back.len(), 1);
}

// Issue 38: drains.

impl Table {
    /// `unit` as `machine` publishes it: `hash` (none: not there) and its active state; the machine is present.
    pub(super) fn unit(&mut self, unit: &str, machine: &str, hash: Option<&str>, active: &str) {
        let seen = Observed {
            present: true,
            hash: hash.map(str::to_string),
            running: hash.map(str::to_string),
            active_state: active.into(),
            ..Observed::default()
        };
        self.0.insert((unit.into(), machine.into()), seen);
    }
}

/// A drain of m1 as the engine plans it: a.service to m2, b.service to m3, then the stop of global g.service.
pub(super) fn drain_of_m1(max_unavailable: u32) -> Rollout {
    let spec = RolloutSpec {
        id: "drain-m1".into(),
        kind: RolloutKind::Drain,
        machine: "m1".into(),
        cordon_since_ms: 5,
        max_unavailable,
        health_timeout_ms: 60_000,
        ..RolloutSpec::default()
    };
    let mv = |unit: &str, to: &str| Move { unit: unit.into(), from: "m1".into(), to: to.into() }.step();
    let steps = vec![mv("a.service", "m2"), mv("b.service", "m3"), Step::pending("g.service", "m1")];
    let progress = RolloutProgress { steps, started_ms: 1, ..RolloutProgress::default() };
    Rollout { spec, control: Control::default(), progress: Some(progress) }
}

/// m1 runs a, b and global g; m2 and m3 are present and run nothing of them yet.
pub(super) fn drained_cluster() -> Table {
    let mut c = Table::default();
    for unit in ["a.service", "b.service", "g.service"] {
        c.unit(unit, "m1", Some(OLD), "active");
    }
    c.unit("a.service", "m2", None, "");
    c.unit("b.service", "m3", None, "");
    c
}

#[test]
fn a_drain_moves_within_its_budget_then_stops_what_cannot_leave() {
    let mut c = drained_cluster();
    let mut r = drain_of_m1(1);
    step(&mut r, &c, 1_000);
    assert_eq!(phases(&r), [("m2", "updating"), ("m3", "pending"), ("m1", "pending")], "one move at a time");
    assert!(drained_units([&r], "m1", Some(5)).is_empty(), "nothing is stopped before the moves are over");
    c.unit("a.service", "m2", Some(OLD), "active");
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r), [("m2", "done"), ("m3", "updating"), ("m1", "pending")]);
    c.unit("b.service", "m3", Some(OLD), "active");
    step(&mut r, &c, 3_000);
    assert_eq!(phases(&r), [("m2", "done"), ("m3", "done"), ("m1", "updating")], "the stop comes last");
    assert_eq!(drained_units([&r], "m1", Some(5)), BTreeSet::from(["g.service"]), "the agent of m1 stops it");
    assert!(drained_units([&r], "m1", None).is_empty(), "an uncordon ends the hold");
    assert!(drained_units([&r], "m1", Some(9)).is_empty(), "so does a later cordon");
    assert!(drained_units([&r], "m2", Some(5)).is_empty(), "only the drained machine");
    step(&mut r, &c, 4_000);
    assert_eq!(r.progress.as_ref().unwrap().steps[2].detail, "stopping");
    c.unit("g.service", "m1", None, "");
    step(&mut r, &c, 5_000);
    assert_eq!(r.state(), RolloutState::Done, "{:?}", r.progress);
}

#[test]
fn a_drain_move_waits_for_the_units_health_check_and_a_stop_that_never_happens_fails() {
    let mut c = drained_cluster();
    let mut r = drain_of_m1(3);
    step(&mut r, &c, 1_000);
    assert_eq!(
        phases(&r),
        [("m2", "updating"), ("m3", "updating"), ("m1", "pending")],
        "a budget of 3 releases both moves, and the stop only after them"
    );
    c.unit("a.service", "m2", Some(OLD), "active");
    c.unit("b.service", "m3", Some(OLD), "active");
    let failing = crate::model::Health {
        status: crate::model::HealthStatus::Unhealthy,
        since_ms: 0,
        output: "wsrep not synced".into(),
    };
    c.0.get_mut(&("a.service".into(), "m2".into())).unwrap().health = Some(failing.clone());
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r)[..2], [("m2", "updating"), ("m3", "done")], "a is active but not passing its check");
    let detail = &r.progress.as_ref().unwrap().steps[0].detail;
    assert!(detail.contains("waiting for its health check (unhealthy: wsrep not synced)"), "{detail}");
    let passing = crate::model::Health { status: crate::model::HealthStatus::Healthy, ..failing };
    c.0.get_mut(&("a.service".into(), "m2".into())).unwrap().health = Some(passing);
    step(&mut r, &c, 3_000);
    assert_eq!(phases(&r), [("m2", "done"), ("m3", "done"), ("m1", "updating")]);
    step(&mut r, &c, 63_000);
    assert_eq!(r.state(), RolloutState::Paused, "a stop not done within the health timeout pauses the drain");
    let reason = &r.progress.as_ref().unwrap().reason;
    assert!(reason.contains("g.service on m1: still running 60 s after its stop was released"), "{reason}");
}

#[test]
fn drains_expire_per_machine_and_rebalances_together() {
    let drain = |id: &str, machine: &str, created_ms: u64| {
        let mut r = stored(id, &[], created_ms, RolloutState::Done);
        r.spec.kind = RolloutKind::Drain;
        r.spec.machine = machine.into();
        r
    };
    let rebalance = |id: &str, created_ms: u64| {
        let mut r = stored(id, &[], created_ms, RolloutState::Done);
        r.spec.kind = RolloutKind::Rebalance;
        r
    };
    let all = [
        drain("d1", "m1", 1),
        drain("d2", "m1", 2),
        drain("d3", "m1", 3),
        drain("e1", "m2", 1),
        rebalance("r1", 1),
        rebalance("r2", 2),
        rebalance("r3", 3),
    ];
    assert_eq!(expired(&all, 2), ["d1", "r1"], "the last 2 drains of each machine and the last 2 rebalances stay");
}

/// Issue 37: a new leader whose clock is an hour ahead (or behind) of the one that released the steps neither fails
/// them at once nor waits an hour longer: their times are brought into its lead.
#[test]
fn a_leader_with_another_clock_rebases_the_times_of_steps_in_flight() {
    const HOUR: u64 = 3_600_000;
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r), [("m1", "healthy"), ("m2", "pending")]);
    // The lead moves to a machine an hour ahead, at its 1 h + 3 s.
    let ahead = HOUR + 3_000;
    let mut taken = r.clone();
    rebase(taken.progress.as_mut().unwrap(), ahead, ahead);
    let a = advance(&taken, &c, ahead);
    assert_eq!(a.progress.steps[0].phase, Phase::Healthy, "not failed by the health timeout: {:?}", a.progress);
    assert_eq!(a.wake_at_ms, Some(ahead + 10_000), "min healthy counted from the takeover");
    // The steps were written by a leader an hour ahead of the new one, which takes over at its 4 s: nothing waits
    // an hour.
    let behind = 4_000;
    let mut back = r.clone();
    let p = back.progress.as_mut().unwrap();
    p.steps[0].healthy_since_ms += HOUR;
    p.steps[0].released_ms += HOUR;
    rebase(p, behind, behind);
    assert_eq!((p.steps[0].released_ms, p.steps[0].healthy_since_ms), (behind, behind));
    let b = advance(&back, &c, behind + 10_000);
    assert_eq!(b.progress.steps[0].phase, Phase::Done, "min healthy ends 10 s after the takeover, not an hour later");
    // Pending and done steps keep their times; a leader with the same clock changes nothing.
    let mut same = r.clone();
    let before = same.progress.clone();
    rebase(same.progress.as_mut().unwrap(), 0, 2_000);
    assert_eq!(same.progress, before);
}

/// A version has a health check only as the rollout says, for the version it names: `to` by `checked`, `from` by
/// `fromChecked`, any other version never.
#[test]
fn checked_version_names_each_side_by_its_own_flag() {
    let unit = |checked, from_checked| RolloutUnit {
        name: "db.service".into(),
        from: "old".into(),
        to: "new".into(),
        checked,
        from_checked,
    };
    let table = [
        (unit(true, false), [true, false, false]),
        (unit(false, true), [false, true, false]),
        (unit(true, true), [true, true, false]),
        (unit(false, false), [false, false, false]),
    ];
    for (u, want) in table {
        let got = ["new", "old", "other"].map(|h| u.checked_version(h));
        assert_eq!(got, want, "checked {} fromChecked {}", u.checked, u.from_checked);
    }
}

/// A checked replace on m1–m3 (max-unavailable 1) with m1 and m2 done, then both failing one flap of their check:
/// paused, m1 and m2 failed, m3 released.
fn two_done_then_a_flap() -> (Table, Rollout) {
    two_done_then_a_flap_from(0)
}

/// [`two_done_then_a_flap`] with its first step at `t0` (the last at `t0 + 3`).
fn two_done_then_a_flap_from(t0: u64) -> (Table, Rollout) {
    use crate::model::HealthStatus::*;
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    for m in ["m1", "m2", "m3"] {
        c.health(m, Healthy, "");
    }
    let mut r = rollout(checked_spec(1, 0, OnFailure::Pause));
    step(&mut r, &c, t0);
    for (t, m) in [(t0 + 1, "m1"), (t0 + 2, "m2")] {
        c.set(m, NEW, "active");
        c.health(m, Healthy, "");
        step(&mut r, &c, t);
    }
    assert_eq!(phases(&r)[..2], [("m1", "done"), ("m2", "done")]);
    c.health("m1", Unhealthy, "flap");
    c.health("m2", Unhealthy, "flap");
    step(&mut r, &c, t0 + 3);
    assert_eq!(phases(&r), [("m1", "failed"), ("m2", "failed"), ("m3", "updating")]);
    assert_eq!(r.state(), RolloutState::Paused);
    (c, r)
}

/// Found by the nemesis (issue 37): steps that failed because their check failed after they were done (a check that
/// flaps, failing on every machine at once) may serve again when the rollout is aborted; the undo must still take
/// them back one at a time within the budget, not all at once.
#[test]
fn an_undo_takes_failed_steps_back_within_the_budget_even_when_they_serve_again() {
    use crate::model::HealthStatus::*;
    let (mut c, mut r) = two_done_then_a_flap();
    c.health("m1", Healthy, "");
    c.health("m2", Healthy, "");
    r.control.action = Action::Abort;
    step(&mut r, &c, 4);
    assert_eq!(in_flight(&r), 1, "one machine changing at once with max-unavailable 1: {:?}", undo_phases(&r));
    assert_eq!(undo_phases(&r)[0], ("m1", "updating"), "the failed ones first: {:?}", undo_phases(&r));
    // And failed machines that do not serve: still first, still one at a time.
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Rollback));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1);
    c.set("m2", NEW, "failed");
    step(&mut r, &c, 10);
    step(&mut r, &c, 10 + DOWN_SETTLE_MS);
    assert_eq!(undo_phases(&r), [("m2", "updating"), ("m1", "pending")], "the failed one at once, the other waits");
}

/// Found by the nemesis (issue 37): a machine with no step followed the unit object, outside the rollout: no health
/// gate, and an undo restarted it at once. One that joins while a replace runs (it has no copy) runs the new version
/// at once, which takes nothing down, as a released step at the end: the rollout waits for its health, and an undo
/// takes it back within the budget.
#[test]
fn a_machine_that_joins_during_a_replace_runs_the_new_version_as_a_released_step() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending")]);
    assert_eq!(pinned_hash([&r], "db.service", "m3"), None, "no copy, no step: the new version at once");
    c.set("m3", NEW, "activating");
    step(&mut r, &c, 1_001);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "pending"), ("m3", "updating")], "taken up, released");
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1_002);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "pending"), ("m3", "updating")], "m3 holds the one slot");
    // The undo takes m1 and m3 back one at a time.
    r.control.action = Action::Abort;
    c.set("m3", NEW, "active");
    step(&mut r, &c, 1_003);
    assert_eq!(undo_phases(&r).iter().filter(|(_, p)| *p == "updating").count(), 1, "{:?}", undo_phases(&r));
    assert_eq!(undo_phases(&r).len(), 2, "m1 and m3: {:?}", undo_phases(&r));
    assert_eq!(pinned_hash([&r], "db.service", "m2"), None, "never changed: the old version");

    // Without an abort: not done before the machine that joined is.
    let mut c = Table::with(&["m1"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "active");
    c.set("m2", NEW, "activating");
    step(&mut r, &c, 1_001);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating")]);
    assert_eq!(r.state(), RolloutState::Running, "not done before the machine that joined");
    c.set("m2", NEW, "active");
    step(&mut r, &c, 1_002);
    assert_eq!(r.state(), RolloutState::Done);
}

/// A machine whose step was skipped because it left comes back into the rollout: on the old version when it had
/// not been released (pending again), judged anew when it had (released again); and an abort returns the second.
#[test]
fn a_machine_that_comes_back_takes_its_skipped_step_up_again() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 2, 0, OnFailure::Pause));
    // Real times are Unix ms: a released step's release time is never 0.
    step(&mut r, &c, 1_000);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "updating"), ("m3", "pending")]);
    c.leave("m2");
    c.leave("m3");
    step(&mut r, &c, 1_001);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "skipped"), ("m3", "skipped")]);
    assert_eq!(pinned_hash([&r], "db.service", "m3"), Some(OLD), "skipped before its release: the old version");
    assert_eq!(pinned_hash([&r], "db.service", "m2"), None, "released before it left: the new version");
    c.back("m2");
    c.back("m3");
    c.set("m2", NEW, "activating");
    step(&mut r, &c, 5_000);
    assert_eq!(phases(&r), [("m1", "updating"), ("m2", "updating"), ("m3", "pending")]);
    assert_eq!(r.progress.as_ref().unwrap().steps[1].released_ms, 5_000, "its health timeout runs from its return");
    c.set("m1", NEW, "active");
    r.control.action = Action::Abort;
    let a = step(&mut r, &c, 5_001);
    assert_eq!(a.roll_back, r.spec.units);
    assert_eq!(undo_phases(&r).len(), 2, "m1 and m2 go back, m3 never changed: {:?}", undo_phases(&r));
    assert_eq!(pinned_hash([&r], "db.service", "m3"), None, "never changed: follows the unit (the old version)");

    // Left after its release, away when the undo begins, back later: its undo step waits for it, in the budget.
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "activating");
    c.leave("m1");
    step(&mut r, &c, 1_001);
    assert_eq!(phases(&r), [("m1", "skipped"), ("m2", "pending")]);
    r.control.action = Action::Abort;
    step(&mut r, &c, 1_002);
    assert_eq!(undo_phases(&r), [("m1", "skipped")], "an undo step for the machine that may come back on it");
    assert_eq!(r.state(), RolloutState::Aborted, "nothing left to undo while it is away");
}

/// Found by the nemesis (issue 37): an instance rescheduled in the middle of a rollout (its machine died) ran the
/// new version at once on its new machine, and an undo step on the machine it left waited out its health timeout.
#[test]
fn an_instance_rescheduled_during_a_rollout_moves_its_step_with_it() {
    let mut c = Table::with(&["m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    r.control.action = Action::Pause;
    step(&mut r, &c, 1_000);
    assert_eq!(phases(&r), [("m2", "pending")]);
    c.moved_off("m2");
    assert_eq!(pinned_hash([&r], "db.service", "m1"), None, "its new machine has no copy: the new version");
    c.set("m1", NEW, "activating");
    step(&mut r, &c, 1_001);
    assert_eq!(phases(&r), [("m2", "pending"), ("m1", "updating")], "{:?}", r.progress);
    r.control.action = Action::Run;
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1_002);
    assert_eq!(phases(&r), [("m2", "skipped"), ("m1", "done")], "{:?}", r.progress);
    assert_eq!(r.progress.as_ref().unwrap().steps[0].detail, MOVED, "over, not waited for on m2");
    assert_eq!(r.state(), RolloutState::Done);

    // Undoing: the instance leaves m1 (done, on the new version) for m3; its undo step there is over at once.
    let mut c = Table::with(&["m1"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 10_000, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1);
    r.control.action = Action::Abort;
    step(&mut r, &c, 2);
    assert_eq!(undo_phases(&r), [("m1", "updating")]);
    c.moved_off("m1");
    c.set("m3", OLD, "active");
    let a = step(&mut r, &c, 3);
    assert_eq!(r.state(), RolloutState::Aborted, "not waiting 60 s for a unit m1 no longer has: {:?}", a.progress);
    assert_eq!(undo_phases(&r), [("m1", "skipped")]);
}

/// Found by the nemesis (issue 37): a plain resume sent failed steps back to pending, so a machine that still served
/// the new version (its check had flapped) returned to the old one first, then to the new one: two restarts for one
/// retry.
#[test]
fn a_resume_judges_failed_machines_still_serving_the_new_version_where_they_stand() {
    use crate::model::HealthStatus::*;
    let (mut c, mut r) = two_done_then_a_flap();
    c.health("m1", Healthy, "");
    c.health("m2", Healthy, "");
    r.control.resumes = 1;
    step(&mut r, &c, 4);
    assert_eq!(phases(&r)[..2], [("m1", "done"), ("m2", "done")], "judged again where they stand, not sent back");
    for m in ["m1", "m2"] {
        assert_eq!(pinned_hash([&r], "db.service", m), None, "{m} keeps the new version");
    }
    c.set("m3", NEW, "active");
    c.health("m3", Healthy, "");
    step(&mut r, &c, 5);
    assert_eq!(r.state(), RolloutState::Done, "{:?}", phases(&r));
}

/// A machine that leaves during the canary phase is skipped, and one that joins is released at once (it has no
/// copy): neither promotes the rollout, which still waits for the user's promotion.
#[test]
fn a_machine_leaving_or_joining_during_the_canary_phase_promotes_nothing() {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
    s.canary = 1;
    let mut r = rollout(s);
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1_001);
    assert!(r.progress.as_ref().unwrap().awaiting_promotion);
    c.leave("m3");
    c.set("m4", NEW, "activating");
    step(&mut r, &c, 1_002);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "pending"), ("m3", "pending"), ("m4", "updating")]);
    let p = r.progress.as_ref().unwrap();
    assert!(p.awaiting_promotion && r.state() == RolloutState::Paused, "{p:?}");
    assert!(p.reason.starts_with("awaiting promotion"), "{}", p.reason);
}

/// Found by the nemesis (issue 37): an instance rescheduled while its rollout is undone (its machine died after the
/// abort) is not served anywhere until its new machine starts it, and the undo must count it: it may not take
/// another instance down meanwhile (max-unavailable 1).
#[test]
fn an_instance_rescheduled_during_an_undo_counts_until_it_serves_on_its_new_machine() {
    let mut c = Table::default();
    let unit =
        |name: &str| RolloutUnit { name: name.into(), from: OLD.into(), to: NEW.into(), ..RolloutUnit::default() };
    let mut s = spec(RolloutKind::Replace, 1, 0, OnFailure::Pause);
    s.units = vec![unit("a.service"), unit("b.service")];
    let mut r = rollout(s);
    let put = |c: &mut Table, u: &str, m: &str, hash: &str, active: &str| {
        c.set(m, hash, active);
        let seen = c.0.remove(&("db.service".to_string(), m.to_string())).unwrap();
        c.0.insert((u.to_string(), m.to_string()), seen);
    };
    put(&mut c, "a.service", "m1", OLD, "active");
    put(&mut c, "b.service", "m2", OLD, "active");
    step(&mut r, &c, 1_000);
    put(&mut c, "a.service", "m1", NEW, "active");
    step(&mut r, &c, 1_001);
    put(&mut c, "b.service", "m2", NEW, "failed");
    step(&mut r, &c, 1_002);
    step(&mut r, &c, 1_002 + DOWN_SETTLE_MS);
    assert_eq!(r.state(), RolloutState::Paused, "{:?}", r.progress);
    r.control.action = Action::Abort;
    // b's machine dies; b is rescheduled to m3, which is still starting it.
    c.0.remove(&("b.service".to_string(), "m2".to_string()));
    c.1.insert(("b.service".to_string(), "m2".to_string()));
    put(&mut c, "b.service", "m3", OLD, "activating");
    let a = step(&mut r, &c, 3_000);
    let undo: Vec<(&str, &str, &str)> =
        a.progress.undo.iter().map(|s| (s.unit.as_str(), s.machine.as_str(), s.phase.as_str())).collect();
    assert!(
        !undo.contains(&("a.service", "m1", "updating")),
        "a on m1 taken down while b serves nowhere: {undo:?} ({})",
        a.progress.reason
    );
    // Once b serves on m3, a's undo goes.
    put(&mut c, "b.service", "m3", OLD, "active");
    let a = step(&mut r, &c, 3_001);
    let undo: Vec<(&str, &str, &str)> =
        a.progress.undo.iter().map(|s| (s.unit.as_str(), s.machine.as_str(), s.phase.as_str())).collect();
    assert!(undo.contains(&("a.service", "m1", "updating")), "{undo:?}");
}

/// A rebalance's step names where its unit goes: until the move is released the unit is scheduled to the machine it
/// leaves, which is no sign that it "moved" away from the step's machine (seen broken once: every rebalance step was
/// skipped as `the unit moved to another machine`, and nothing was rebalanced).
#[test]
fn a_rebalance_step_is_released_though_its_unit_is_still_scheduled_where_it_comes_from() {
    let mut c = Table::with(&["m1"], OLD);
    c.1.insert(("db.service".into(), "m2".into()));
    c.set("m2", OLD, "inactive");
    let mut s = spec(RolloutKind::Rebalance, 1, 0, OnFailure::Pause);
    s.units.clear();
    let mut r = rollout(s);
    let first = Move { unit: "db.service".into(), from: "m1".into(), to: "m2".into() }.step();
    r.progress = Some(RolloutProgress { steps: vec![first], started_ms: 1_000, ..RolloutProgress::default() });
    step(&mut r, &c, 1_001);
    assert_eq!(phases(&r), [("m2", "updating")], "{:?}", r.progress);
}

/// Found by the nemesis (issue 37): an undo whose budget another machine held (down, not changing) kept a pending
/// step whose unit had moved away, so the rollout never ended. A step that is over (its unit moved away, its machine
/// left) is skipped whatever the budget: skipping it takes nothing down.
/// A replace with max-unavailable 1 over m1, m2, m3, paused with m1 and m2 done and m3 not reached (at time 2).
fn paused_before_m3() -> (Table, Rollout) {
    let mut c = Table::with(&["m1", "m2", "m3"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 0);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 1);
    r.control.action = Action::Pause;
    c.set("m2", NEW, "active");
    step(&mut r, &c, 2);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "done"), ("m3", "pending")]);
    (c, r)
}

#[test]
fn a_step_whose_unit_moved_away_is_skipped_while_the_budget_is_full() {
    let (mut c, mut r) = paused_before_m3();
    // m3, not reached, fails on the old version: it stays down, outside the undo.
    c.set("m3", OLD, "failed");
    r.control.action = Action::Abort;
    step(&mut r, &c, 3);
    assert_eq!(undo_phases(&r), [("m1", "pending"), ("m2", "pending")], "m3 holds the budget: {:?}", r.progress);
    c.moved_off("m2");
    step(&mut r, &c, 4);
    assert_eq!(
        undo_phases(&r),
        [("m1", "pending"), ("m2", "skipped")],
        "over, not held by the budget: {:?}",
        r.progress
    );
    assert_eq!(r.progress.as_ref().unwrap().undo[1].detail, MOVED);
    c.set("m3", OLD, "active");
    step(&mut r, &c, 5);
    c.set("m1", OLD, "active");
    step(&mut r, &c, 6);
    assert_eq!(undo_phases(&r), [("m1", "done"), ("m2", "skipped")]);
    assert_eq!(r.state(), RolloutState::Aborted, "{:?}", r.progress);
}

/// Found with the one above: `rollout-resume --skip-failed` while undoing waives the failed undo steps, but their
/// machines went on counting against the budget, so an undo with max-unavailable 1 never released another step.
#[test]
fn an_undo_step_given_up_by_skip_failed_holds_the_rest_back_no_longer() {
    let (mut c, mut r) = paused_before_m3();
    r.control.action = Action::Abort;
    step(&mut r, &c, 3);
    assert_eq!(undo_phases(&r), [("m1", "updating"), ("m2", "pending")]);
    c.set("m1", OLD, "failed");
    let mut t = 10;
    for _ in 0..3 {
        t += DOWN_SETTLE_MS;
        step(&mut r, &c, t);
    }
    assert_eq!(r.state(), RolloutState::Paused, "{:?}", r.progress);
    r.control.resumes += 1;
    r.control.skip_failed = true;
    step(&mut r, &c, t + 1);
    assert_eq!(undo_phases(&r), [("m1", "skipped"), ("m2", "updating")], "m1 was given up: {:?}", r.progress);
    c.set("m2", OLD, "active");
    step(&mut r, &c, t + 2);
    assert_eq!(r.state(), RolloutState::Aborted, "{:?}", r.progress);
}

/// Found with the two above (cargo-mutants over `release`): an undo step whose machine is still settling its forward
/// change holds a slot of the budget; once its unit moved away there is nothing left to settle or undo there, so it
/// is skipped at once and the slot goes to the next step, not held until the health timeout.
#[test]
fn a_settling_machine_whose_unit_moved_away_frees_its_slot_at_once() {
    let mut c = Table::with(&["m1", "m2"], OLD);
    let mut r = rollout(spec(RolloutKind::Replace, 1, 0, OnFailure::Pause));
    step(&mut r, &c, 1_000);
    c.set("m1", NEW, "active");
    step(&mut r, &c, 2_000);
    assert_eq!(phases(&r), [("m1", "done"), ("m2", "updating")]);
    // m2 is changing (the new file, the old process): it settles first, holding the one slot.
    c.set("m2", NEW, "activating");
    r.control.action = Action::Abort;
    step(&mut r, &c, 3_000);
    assert_eq!(undo_phases(&r), [("m2", "pending"), ("m1", "pending")]);
    c.moved_off("m2");
    step(&mut r, &c, 4_000);
    assert_eq!(undo_phases(&r), [("m2", "skipped"), ("m1", "updating")], "{:?}", r.progress);
    // A step already over stays as it ended: a machine that leaves after its step is done keeps "done".
    c.set("m1", OLD, "active");
    step(&mut r, &c, 5_000);
    c.leave("m1");
    step(&mut r, &c, 6_000);
    assert_eq!(undo_phases(&r), [("m2", "skipped"), ("m1", "done")]);
    assert_eq!(r.state(), RolloutState::Aborted);
}

/// Found by the 60-minute nemesis (stop 47, seed 4052, `nemr-global-1796488856426` at 249.4 s): a machine given up
/// by `rollout-resume --skip-failed` after its check flapped still ran the new version, serving. The abort's undo
/// had no step for it, so it followed the unit object back to the old version at once, while another machine's undo
/// was changing: two down with max-unavailable 1. Every machine the rollout changed is returned within the budget.
#[test]
fn an_abort_returns_machines_given_up_by_skip_failed_within_the_budget() {
    use crate::model::HealthStatus::*;
    // At times a clock gives: a step released at 0 reads as never released.
    let (mut c, mut r) = two_done_then_a_flap_from(1_000);
    c.health("m1", Healthy, "");
    c.health("m2", Healthy, "");
    r.control.resumes += 1;
    r.control.skip_failed = true;
    step(&mut r, &c, 1_004);
    assert_eq!(phases(&r)[..2], [("m1", "skipped"), ("m2", "skipped")], "{:?}", r.progress);
    c.set("m3", NEW, "failed");
    let mut t = 1_010;
    for _ in 0..3 {
        t += DOWN_SETTLE_MS;
        step(&mut r, &c, t);
    }
    assert_eq!(r.state(), RolloutState::Paused, "{:?}", r.progress);
    r.control.action = Action::Abort;
    step(&mut r, &c, t + 1);
    let undo: Vec<(&str, &str)> = undo_phases(&r);
    assert_eq!(undo.len(), 3, "m1 and m2 were changed too: {undo:?}");
    assert_eq!(undo[0], ("m3", "updating"), "the machine already down goes first");
    assert_eq!(pinned_hash([&r], "db.service", "m1"), Some(NEW), "m1 keeps the new version until its turn");
    assert_eq!(pinned_hash([&r], "db.service", "m2"), Some(NEW));
    for (t, m) in (t + 2..).zip(["m3", "m1", "m2"]) {
        assert!(in_flight(&r) <= 1, "never two machines changing at once: {:?}", undo_phases(&r));
        c.set(m, OLD, "active");
        c.health(m, Healthy, "");
        step(&mut r, &c, t);
    }
    assert_eq!(r.state(), RolloutState::Aborted, "{:?}", r.progress);
}

use super::*;
use crate::model::{Health, HealthStatus};
use crate::rollout::{RolloutUnit, Step};

const M1: &str = "11111111aaaaaaaa11111111aaaaaaaa";
const M2: &str = "22222222bbbbbbbb22222222bbbbbbbb";
const M3: &str = "33333333cccccccc33333333cccccccc";

const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 1000\n\n[X-Fleet]\nGlobal=true\n";
const V1: &str = "[Service]\nExecStart=/bin/sleep 1000\n";
const V2: &str = "[Service]\nExecStart=/bin/sleep 2000\n";

fn hash(text: &str) -> String {
    UnitFile::parse(text).unwrap().hash().to_hex()
}

fn unit(name: &str, text: &str, desired: &str, machine: &str) -> Unit {
    Unit {
        name: name.into(),
        options: UnitFile::parse(text).unwrap().into_options(),
        desired_state: desired.into(),
        machine_id: machine.into(),
        ..Default::default()
    }
}

fn state(name: &str, machine: &str, text: &str, active: &str) -> UnitState {
    UnitState {
        name: name.into(),
        machine_id: machine.into(),
        hash: hash(text),
        systemd_active_state: active.into(),
        systemd_sub_state: "running".into(),
        ..Default::default()
    }
}

fn machine(id: &str, cordoned: bool) -> Machine {
    Machine { id: id.into(), cordoned, ..Default::default() }
}

/// A global unit on M1 and M2 (M3 joined without it, cordoned), and web.service on M1.
fn view() -> ClusterView {
    ClusterView {
        units: vec![unit("g.service", GLOBAL, "launched", ""), unit("web.service", V1, "launched", M1)],
        states: vec![
            state("g.service", M1, GLOBAL, "active"),
            state("g.service", M2, GLOBAL, "active"),
            state("web.service", M1, V1, "active"),
        ],
        machines: vec![machine(M1, false), machine(M2, false), machine(M3, true)],
        ..Default::default()
    }
}

fn lines(changes: &[Change]) -> Vec<(String, &str, &str)> {
    changes.iter().map(|c| (c.unit.clone(), short(&c.machine), c.action.as_str())).collect()
}

#[test]
fn cordoning_a_machine_moves_nothing_and_writes_the_cordon_with_put() {
    let p = preview(&view(), &Intent::parse("cordon", "11111111").unwrap(), 0).unwrap();
    assert_eq!(p.changes, [], "its units stay");
    assert_eq!(p.write, Write { method: "PUT", path: format!("/fleet/v1/machines/{M1}/cordon"), body: None });
    assert!(p.summary[0].contains("the 2 unit(s) it holds stay"), "{:?}", p.summary);
    assert_eq!(p.summary[1], "no unit starts, stops or moves now");
}

#[test]
fn uncordoning_a_machine_starts_the_global_units_it_was_kept_from() {
    let p = preview(&view(), &Intent::parse("uncordon", M3).unwrap(), 0).unwrap();
    assert_eq!(lines(&p.changes), [("g.service".to_string(), "33333333", "start")]);
    assert_eq!(p.write.method, "DELETE");
    assert_eq!(p.title, format!("uncordon machine {M3}"));
}

#[test]
fn an_unknown_or_ambiguous_machine_is_refused_by_name() {
    let err = preview(&view(), &Intent::Cordon("9".into()), 0).unwrap_err();
    assert!(err.contains("no machine \"9\""), "{err}");
    let mut v = view();
    v.machines.push(machine("11111111ffff", false));
    let err = preview(&v, &Intent::Cordon("1111".into()), 0).unwrap_err();
    assert!(err.contains("names 2 machines"), "{err}");
}

/// A replace rollout of the global db.service (M1, M2, M3 hold it) one machine at a time: M1 done, M2 updating, M3 pending.
fn rolling(state: RolloutState, m2: Phase) -> ClusterView {
    let mut v = view();
    let global_v2 = format!("{GLOBAL}# v2\n");
    v.units.push(unit("db.service", &global_v2, "launched", ""));
    v.machines[2].cordoned = false;
    for (m, text) in [(M1, global_v2.as_str()), (M2, GLOBAL), (M3, GLOBAL)] {
        v.states.push(state_of("db.service", m, text));
    }
    let step = |m: &str, phase| Step { phase, released_ms: 1, ..Step::pending("db.service", m) };
    v.rollouts.push(schema::Rollout {
        id: "db-1".into(),
        kind: RolloutKind::Replace,
        units: vec![RolloutUnit {
            name: "db.service".into(),
            from: hash(GLOBAL),
            to: hash(&global_v2),
            ..Default::default()
        }],
        max_unavailable: 1,
        health_timeout_ms: 60_000,
        state,
        reason: if state == RolloutState::Paused { "paused by request".into() } else { String::new() },
        action: if state == RolloutState::Paused { rollout::Action::Pause } else { rollout::Action::Run },
        steps: vec![step(M1, Phase::Done), step(M2, m2), step(M3, Phase::Pending)],
        started_ms: 1,
        ..Default::default()
    });
    v
}

fn state_of(name: &str, machine: &str, text: &str) -> UnitState {
    state(name, machine, text, "active")
}

#[test]
fn pausing_a_running_rollout_holds_the_step_the_engine_would_release_next() {
    // M1 and M2 are done and run v2, so the engine's next pass would release M3.
    let mut v = rolling(RolloutState::Running, Phase::Done);
    v.states.retain(|s| !(s.name == "db.service" && s.machine_id == M2));
    v.states.push(state_of("db.service", M2, &format!("{GLOBAL}# v2\n")));
    let p = preview(&v, &Intent::parse("rollout-pause", "db-1").unwrap(), 10).unwrap();
    assert_eq!(lines(&p.changes), [("db.service".to_string(), "33333333", "hold")], "{p:?}");
    assert_eq!(p.summary[0], "the rollout goes from running to paused (paused by request)");
    assert!(p.summary[1].starts_with("1 machine step(s) wait"), "{:?}", p.summary);
    let body = serde_json::json!({ "action": "pause" });
    assert_eq!(p.write, Write { method: "PATCH", path: "/fleet/v1/rollouts/db-1".into(), body: Some(body) });
    // The same rollout named by its unit.
    let by_unit = preview(&v, &Intent::parse("pause", "db.service").unwrap(), 10).unwrap();
    assert_eq!(by_unit, p);
}

#[test]
fn resuming_a_paused_rollout_releases_its_next_step_within_the_budget() {
    let mut v = rolling(RolloutState::Paused, Phase::Done);
    v.states.retain(|s| !(s.name == "db.service" && s.machine_id == M2));
    v.states.push(state_of("db.service", M2, &format!("{GLOBAL}# v2\n")));
    let p = preview(&v, &Intent::parse("resume", "db-1").unwrap(), 10).unwrap();
    assert_eq!(lines(&p.changes), [("db.service".to_string(), "33333333", "restart")], "{p:?}");
    assert!(p.changes[0].detail.ends_with("step released"), "{:?}", p.changes);
    assert!(p.summary[0].starts_with("the rollout goes from paused (paused by request) to running"), "{:?}", p.summary);
    assert_eq!(p.write.body, Some(serde_json::json!({ "action": "run" })));
}

#[test]
fn aborting_a_replace_returns_every_changed_machine_to_the_old_version() {
    let v = rolling(RolloutState::Running, Phase::Updating);
    let p = preview(&v, &Intent::parse("abort", "db-1").unwrap(), 10).unwrap();
    let undo: Vec<_> = p.changes.iter().filter(|c| c.detail.contains("undo")).map(|c| short(&c.machine)).collect();
    assert!(undo.contains(&"11111111"), "M1 ran the new version and goes back: {p:?}");
    assert!(p.summary.iter().any(|s| s.contains("unit object(s) db.service go back")), "{:?}", p.summary);
}

#[test]
fn an_action_the_api_would_refuse_is_refused_with_its_message() {
    let mut v = rolling(RolloutState::Running, Phase::Done);
    v.rollouts[0].state = RolloutState::Done;
    let err = preview(&v, &Intent::parse("pause", "db-1").unwrap(), 10).unwrap_err();
    assert_eq!(err, "rollout \"db-1\" is done: nothing to pause");
    let err = preview(&rolling(RolloutState::Running, Phase::Done), &Intent::parse("promote", "db-1").unwrap(), 0);
    assert!(err.unwrap_err().contains("has no canaries"));
    assert!(Intent::parse("reboot", "x").unwrap_err().contains("unknown action \"reboot\""));
}

#[test]
fn a_health_checked_step_that_fails_its_check_is_not_released_by_a_resume() {
    // Health goes into the engine's judgement through the view: an unhealthy M1 takes the one unavailable slot.
    let mut v = rolling(RolloutState::Paused, Phase::Done);
    v.rollouts[0].units[0].checked = true;
    for s in v.states.iter_mut().filter(|s| s.name == "db.service") {
        let status = if s.machine_id == M1 { HealthStatus::Unhealthy } else { HealthStatus::Healthy };
        s.health = Some(Health { status, since_ms: 1, output: String::new() });
    }
    let p = preview(&v, &Intent::parse("resume", "db-1").unwrap(), 10).unwrap();
    assert!(
        !p.changes.iter().any(|c| c.machine == M3 && c.action == Action::Restart && c.detail.ends_with("released")),
        "M3 must wait while M1 is unhealthy: {p:?}"
    );
}

#[test]
fn rollback_of_a_launched_unit_is_a_replace_rollout_to_the_earlier_version_at_once() {
    let mut v = view();
    v.units[1] = unit("web.service", V2, "launched", M1);
    v.states[2] = state("web.service", M1, V2, "active");
    let version = |text: &str, current| UnitVersion {
        current,
        hash: hash(text),
        options: UnitFile::parse(text).unwrap().into_options(),
        stored_ms: 1,
        by: None,
    };
    v.histories.insert("web.service".into(), UnitHistory { versions: vec![version(V2, true), version(V1, false)] });
    let p = preview(&v, &Intent::parse("rollback", "web.service").unwrap(), 1_700_000_000_000).unwrap();
    assert_eq!(lines(&p.changes), [("web.service".to_string(), "11111111", "restart")]);
    assert_eq!(p.write.method, "PUT");
    assert_eq!(p.write.path, "/fleet/v1/rollouts/web-1700000000000");
    let body = p.write.body.as_ref().unwrap();
    assert_eq!(body["kind"], "replace");
    assert_eq!(body["maxUnavailablePercent"], 100);
    assert_eq!(body["units"][0]["name"], "web.service");
    assert!(p.summary[0].contains(&format!("to version {}, every machine at once", short_hash(&hash(V1)))), "{p:?}");
    // Without an earlier version there is nothing to return to.
    v.histories.insert("web.service".into(), UnitHistory { versions: vec![version(V2, true)] });
    let err = preview(&v, &Intent::Rollback("web.service".into()), 0).unwrap_err();
    assert_eq!(err, "the unit has no earlier version in its history");
}

/// Issue 38: a drain's preview is the engine's plan of it: web.service moves to M2 (M3 is cordoned), the global
/// unit stops on M1 last; a unit no machine takes is blocked with each machine's verdict; the write is the drain.
#[test]
fn a_drain_shows_the_engines_moves_then_the_stops_and_writes_the_drain() {
    let mut v = view();
    v.units.push(unit("pinned.service", &format!("{V1}\n[X-Fleet]\nMachineID={M1}\n"), "launched", M1));
    let p = preview(&v, &Intent::parse("drain", "11111111").unwrap(), 1_700_000_000_000).unwrap();
    assert_eq!(
        lines(&p.changes),
        [
            ("web.service".to_string(), "22222222", "move"),
            ("g.service".to_string(), "11111111", "stop"),
            ("pinned.service".to_string(), "11111111", "stop"),
        ]
    );
    assert!(p.changes[2].detail.contains("pinned to the machine by MachineID="), "{:?}", p.changes[2]);
    assert_eq!(
        p.summary[0],
        "machine 11111111 is cordoned and its units move off one at a time: 1 move(s), then 2 stop(s)"
    );
    let body = serde_json::json!({"kind": "drain", "machine": M1});
    assert_eq!(
        p.write,
        Write { method: "PUT", path: "/fleet/v1/rollouts/drain-11111111-1700000000000".into(), body: Some(body) }
    );
    v.machines[1].cordoned = true;
    let blocked = preview(&v, &Intent::Drain(M1.into()), 0).unwrap();
    assert_eq!(lines(&blocked.changes)[0], ("web.service".to_string(), "", "blocked"));
    assert!(blocked.changes[0].detail.contains("22222222: unable to run unit: machine is cordoned"), "{blocked:?}");
    assert_eq!(blocked.summary[1], "1 unit(s) no other machine takes: the drain pauses at them");
}

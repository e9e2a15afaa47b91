use super::*;
use fleet_core::schema::{Unit, UnitState};
use fleet_core::unit::UnitFile;

const M1: &str = "11111111aaaaaaaa11111111aaaaaaaa";
const M2: &str = "22222222bbbbbbbb22222222bbbbbbbb";
const M3: &str = "33333333cccccccc33333333cccccccc";

const DB_V1: &str = "[Service]\nExecStart=/bin/sleep 1000\n\n[X-Fleet]\nGlobal=true\n";
const DB_V2: &str = "[Service]\nExecStart=/bin/sleep 2000\n\n[X-Fleet]\nGlobal=true\n";
const DB_V2_RELOAD: &str = "[Service]\nExecStart=/bin/sleep 2000\nExecReload=/bin/true\n\n[X-Fleet]\nGlobal=true\n";
const ONE_V1: &str = "[Service]\nExecStart=/bin/sleep 1000\n";

fn file(text: &str) -> UnitFile {
    UnitFile::parse(text).unwrap()
}

fn hash(text: &str) -> String {
    file(text).hash().to_hex()
}

fn unit(name: &str, text: &str, desired: &str, machine: &str) -> Unit {
    Unit {
        name: name.into(),
        options: file(text).into_options(),
        desired_state: desired.into(),
        machine_id: machine.into(),
        ..Default::default()
    }
}

fn state(name: &str, machine: &str, text: &str) -> UnitState {
    UnitState {
        name: name.into(),
        machine_id: machine.into(),
        hash: hash(text),
        systemd_active_state: "active".into(),
        ..Default::default()
    }
}

fn machines() -> Vec<Machine> {
    [M1, M2, M3].map(|id| Machine { id: id.into(), ..Default::default() }).into()
}

/// A global db.service running v1 on every machine, and one.service running on M1.
fn view() -> ClusterView {
    let mut states: Vec<UnitState> = [M1, M2, M3].iter().map(|m| state("db.service", m, DB_V1)).collect();
    states.push(state("one.service", M1, ONE_V1));
    ClusterView {
        units: vec![unit("db.service", DB_V1, "launched", ""), unit("one.service", ONE_V1, "launched", M1)],
        states,
        machines: machines(),
        ..ClusterView::default()
    }
}

/// What `start --replace` with `mode` would store for `name`.
fn replaced(name: &str, text: &str, mode: ReplacementMode) -> Intended {
    Intended {
        name: name.into(),
        created: false,
        unit: Some(Unit {
            name: name.into(),
            options: file(text).into_options(),
            no_restart: matches!(mode, ReplacementMode::NoRestart(_)),
            reschedule: matches!(mode, ReplacementMode::Rescheduled(_)),
            ..Default::default()
        }),
        mode: Some(mode),
    }
}

fn summary(changes: &[Change]) -> Vec<(&str, &str, &str)> {
    changes.iter().map(|c| (c.unit.as_str(), c.machine.get(..8).unwrap_or(&c.machine), c.action.as_str())).collect()
}

#[test]
fn a_replaced_global_unit_restarts_on_every_machine() {
    let intended = [replaced("db.service", DB_V2, ReplacementMode::Rescheduled(JobState::Launched))];
    let changes = predict(&view(), &intended, Some(JobState::Launched)).unwrap();
    assert_eq!(
        summary(&changes),
        [
            ("db.service", "11111111", "restart"),
            ("db.service", "22222222", "restart"),
            ("db.service", "33333333", "restart")
        ]
    );
    let v1_to_v2 = format!("{} → {}", &hash(DB_V1)[..7], &hash(DB_V2)[..7]);
    assert!(changes[0].detail.starts_with(&v1_to_v2), "{}", changes[0].detail);
}

#[test]
fn no_restart_reloads_where_exec_reload_is_defined_and_else_updates_the_file_only() {
    let reload = [replaced("db.service", DB_V2_RELOAD, ReplacementMode::NoRestart(JobState::Launched))];
    let changes = predict(&view(), &reload, Some(JobState::Launched)).unwrap();
    assert!(changes.iter().all(|c| c.action == Action::Reload) && changes.len() == 3, "{changes:?}");
    let update = [replaced("db.service", DB_V2, ReplacementMode::NoRestart(JobState::Launched))];
    let changes = predict(&view(), &update, Some(JobState::Launched)).unwrap();
    assert!(changes.iter().all(|c| c.action == Action::Update) && changes.len() == 3, "{changes:?}");
}

#[test]
fn a_version_constrained_to_another_machine_moves_with_the_schedulers_reason() {
    let v2 = format!("{ONE_V1}\n[X-Fleet]\nMachineID={M2}\n");
    let intended = [replaced("one.service", &v2, ReplacementMode::Rescheduled(JobState::Launched))];
    let changes = predict(&view(), &intended, Some(JobState::Launched)).unwrap();
    assert_eq!(summary(&changes), [("one.service", "22222222", "move")]);
    assert!(
        changes[0].detail.starts_with("11111111 → 22222222: target state launched and unit not scheduled"),
        "{}",
        changes[0].detail
    );
    // With --keep-machine the unit is only moved because its machine cannot run it any more: the engine unschedules
    // it first, then places it.
    let kept = [replaced("one.service", &v2, ReplacementMode::InPlace(JobState::Launched))];
    let changes = predict(&view(), &kept, Some(JobState::Launched)).unwrap();
    assert_eq!(summary(&changes), [("one.service", "22222222", "move")]);
}

#[test]
fn a_version_no_machine_can_run_is_blocked_with_each_machines_verdict_and_stops_where_it_ran() {
    let v2 = format!("{ONE_V1}\n[X-Fleet]\nMachineMetadata=role=db\n");
    let intended = [replaced("one.service", &v2, ReplacementMode::Rescheduled(JobState::Launched))];
    let changes = predict(&view(), &intended, Some(JobState::Launched)).unwrap();
    assert_eq!(summary(&changes), [("one.service", "", "blocked"), ("one.service", "11111111", "stop")]);
    assert!(
        changes[0].detail.starts_with("no agents able to run job (11111111: unable to run unit"),
        "{}",
        changes[0].detail
    );
}

#[test]
fn nothing_changes_when_the_content_is_the_same_or_the_unit_is_kept() {
    let kept = [Intended { name: "db.service".into(), created: false, unit: None, mode: None }];
    assert_eq!(predict(&view(), &kept, Some(JobState::Launched)).unwrap(), []);
    assert_eq!(predict(&view(), &kept, None).unwrap(), []);
}

#[test]
fn a_new_unit_is_placed_and_started_and_a_submitted_one_does_nothing() {
    let created = |text: &str| Intended {
        name: "new.service".into(),
        created: true,
        unit: Some(Unit { name: "new.service".into(), options: file(text).into_options(), ..Default::default() }),
        mode: None,
    };
    let changes = predict(&view(), &[created(ONE_V1)], Some(JobState::Launched)).unwrap();
    assert_eq!(summary(&changes), [("new.service", "22222222", "start")], "least loaded, ties by machine ID");
    assert!(changes[0].detail.contains("least-loaded able machine"), "{}", changes[0].detail);
    assert_eq!(predict(&view(), &[created(ONE_V1)], None).unwrap(), [], "submit stores it inactive");
    let loaded = predict(&view(), &[created(ONE_V1)], Some(JobState::Loaded)).unwrap();
    assert_eq!(summary(&loaded), [("new.service", "22222222", "load")]);
}

#[test]
fn stopping_by_load_of_a_launched_unit_is_a_stop() {
    let kept = [Intended { name: "one.service".into(), created: false, unit: None, mode: None }];
    let changes = predict(&view(), &kept, Some(JobState::Loaded)).unwrap();
    assert_eq!(summary(&changes), [("one.service", "11111111", "stop")]);
}

#[test]
fn a_unit_with_an_unreadable_desired_state_is_an_error_not_a_guess() {
    let mut v = view();
    v.units[0].desired_state = "running".into();
    let err = predict(&v, &[], None).unwrap_err();
    assert!(err.contains("unit db.service: desired state \"running\""), "{err}");
}

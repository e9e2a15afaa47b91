//! The simulated unit manager against the expectations the agent has of systemd: the real executor runs its plans
//! on it, and what it answers afterwards is what systemd answers after the same calls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use fleet_core::machine_plan::plan::{Desired, Update};
use fleet_core::model::JobState;
use fleet_systemd::UnitChange;
use fleetd::agent::executor::{Executor, ExecutorConfig, Outcome};
use fleetd::agent::units_dir::UnitsDir;

const V1: &str = "[Service]\nExecStart=/bin/sleep 100\n";
const V2: &str = "[Service]\nExecStart=/bin/sleep 200\n";
const FAILS: &str = "[Service]\nExecStart=/bin/false\n";
const INSTALL: &str = "[Service]\nExecStart=/bin/sleep 1\n\n[Install]\nWantedBy=multi-user.target\n";

struct Setup {
    sim: SimSystemd,
    exec: Executor<SimSystemd>,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimSystemd::default();
    let config = ExecutorConfig { start_wait: Duration::from_secs(5), stop_wait: Duration::from_secs(5) };
    let exec = Executor::new(sim.clone(), UnitsDir::open(dir.path().join("units")).unwrap(), config);
    Setup { sim, exec, _dir: dir }
}

fn desired(units: &[(&str, JobState, &str)]) -> BTreeMap<String, Desired> {
    units
        .iter()
        .map(|(n, state, text)| {
            let d = Desired {
                state: *state,
                hash: fleet_core::unit::UnitHash::of(text).to_hex(),
                text: Arc::from(*text),
                install: text.contains("[Install]"),
                update: Update::Restart,
                restart: None,
            };
            (n.to_string(), d)
        })
        .collect()
}

/// `name load/active/sub` of every unit the manager knows.
fn known(sim: &SimSystemd) -> Vec<String> {
    sim.all_states().iter().map(|s| format!("{} {}/{}/{}", s.name, s.load_state, s.active_state, s.sub_state)).collect()
}

async fn state(sim: &SimSystemd, name: &str) -> String {
    let s = sim.states(&[name.to_string()]).await.unwrap().remove(0);
    format!("{}/{}/{}", s.load_state, s.active_state, s.sub_state)
}

#[test]
fn jobs_move_units_through_systemds_states() {
    let t = |now, job, runs| transition(now, job, runs).map(|t| (t.via, t.end, t.result));
    use super::Active::{Activating, Active, Deactivating, Failed, Inactive};
    assert_eq!(t(Inactive, Job::Start, true), Ok((Some(Activating), Active, JobResult::Done)));
    assert_eq!(t(Inactive, Job::Start, false), Ok((Some(Activating), Failed, JobResult::Failed)));
    assert_eq!(t(Failed, Job::Start, true), Ok((Some(Activating), Active, JobResult::Done)), "a failed unit starts");
    assert_eq!(t(Active, Job::Start, true), Ok((None, Active, JobResult::Done)), "starting a running unit: no-op");
    assert_eq!(t(Active, Job::Stop, true), Ok((Some(Deactivating), Inactive, JobResult::Done)));
    assert_eq!(t(Inactive, Job::Stop, true), Ok((None, Inactive, JobResult::Done)));
    assert_eq!(
        t(Failed, Job::Stop, true),
        Ok((None, Failed, JobResult::Done)),
        "stop keeps failed (reset-failed clears)"
    );
    assert_eq!(t(Active, Job::Reload, true), Ok((None, Active, JobResult::Done)));
    assert!(t(Inactive, Job::Reload, true).is_err(), "reload of an inactive unit is refused");
    assert!(exec_start_runs(V1) && !exec_start_runs(FAILS));
}

#[tokio::test]
async fn a_launch_leaves_units_loaded_and_running_as_systemd_does() {
    let mut s = setup();
    let d = desired(&[("a.service", JobState::Launched, V1), ("b.service", JobState::Loaded, V2)]);
    let reports = s.exec.reconcile(&d).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{reports:?}");
    // b is linked, not loaded: nothing has asked systemd for it yet (asking what it holds loads nothing).
    assert_eq!(known(&s.sim), ["a.service loaded/active/running", "b.service not-found/inactive/dead"]);
    assert_eq!(state(&s.sim, "b.service").await, "loaded/inactive/dead", "a read by name loads it");
    assert_eq!(state(&s.sim, "nope.service").await, "not-found/inactive/dead");
    assert_eq!(s.sim.daemon_reloads(), 0, "new files are read fresh when first loaded: no daemon-reload");
    assert!(s.exec.reconcile(&d).await.is_empty(), "converged: the agent sees what it asked for");
    let states = s.exec.current_states("m1").await.unwrap();
    assert_eq!(
        (states["a.service"].active_state.as_str(), states["b.service"].active_state.as_str()),
        ("active", "inactive")
    );
}

#[tokio::test]
async fn a_replace_stops_reads_the_new_file_and_starts_it() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1)])).await;
    let reports = s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V2)])).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{reports:?}");
    assert!(reports.iter().any(|r| matches!(r.outcome, Ok(Outcome::Started(JobResult::Done)))));
    assert_eq!(known(&s.sim), ["a.service loaded/active/running"]);
    assert_eq!(
        s.sim.definitions(&["a.service".to_string()]).await.unwrap()[0].1,
        Definition::Loaded { stale: false },
        "systemd runs the new file"
    );
}

#[tokio::test]
async fn an_unload_leaves_nothing_behind() {
    let mut s = setup();
    s.exec
        .reconcile(&desired(&[("a.service", JobState::Launched, V1), ("i.service", JobState::Launched, INSTALL)]))
        .await;
    assert_eq!(known(&s.sim), ["a.service loaded/active/running", "i.service loaded/active/running"]);
    let reports = s.exec.reconcile(&BTreeMap::new()).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{reports:?}");
    assert!(known(&s.sim).is_empty(), "unlinked inactive units are forgotten: {:?}", known(&s.sim));
    assert_eq!(state(&s.sim, "a.service").await, "not-found/inactive/dead");
}

#[tokio::test]
async fn a_start_and_an_unload_of_plain_units_take_no_daemon_reload() {
    let mut s = setup();
    let names: Vec<String> = (0..20).map(|i| format!("u{i}.service")).collect();
    let d: Vec<(&str, JobState, &str)> = names.iter().map(|n| (n.as_str(), JobState::Launched, V1)).collect();
    let reports = s.exec.reconcile(&desired(&d)).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{reports:?}");
    assert_eq!(known(&s.sim).len(), 20);
    let reports = s.exec.reconcile(&BTreeMap::new()).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{reports:?}");
    assert!(known(&s.sim).is_empty(), "stopped, unlinked units are forgotten: {:?}", known(&s.sim));
    assert_eq!(s.sim.daemon_reloads(), 0, "systemd matched the disk after the start and after the unload");
}

#[tokio::test]
async fn a_unit_whose_exec_start_fails_ends_failed_until_reset() {
    let mut s = setup();
    let reports = s.exec.reconcile(&desired(&[("f.service", JobState::Launched, FAILS)])).await;
    assert!(reports.iter().any(|r| matches!(r.outcome, Ok(Outcome::Started(JobResult::Failed)))), "{reports:?}");
    assert_eq!(state(&s.sim, "f.service").await, "loaded/failed/failed");
    s.sim.reset_failed("f.service").await.unwrap();
    assert_eq!(state(&s.sim, "f.service").await, "loaded/inactive/dead");
}

#[tokio::test]
async fn a_changed_file_of_a_loaded_unit_needs_a_daemon_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.service");
    std::fs::write(&path, V1).unwrap();
    let sim = SimSystemd::default();
    assert_eq!(sim.link_runtime(&path).await.unwrap().len(), 1);
    assert!(sim.link_runtime(&path).await.unwrap().is_empty(), "an existing link is no change");
    assert_eq!(known(&sim), ["a.service not-found/inactive/dead"], "linking loads nothing");
    assert_eq!(sim.definitions(&["a.service".to_string()]).await.unwrap()[0].1, Definition::NotLoaded);
    assert_eq!(known(&sim), ["a.service not-found/inactive/dead"], "asking what systemd holds loads nothing");
    // ListUnitsByNames loads what it is asked about: a linked unit reads as loaded/inactive.
    assert_eq!(state(&sim, "a.service").await, "loaded/inactive/dead");
    sim.start("a.service").await.unwrap();
    assert_eq!(sim.definitions(&["a.service".to_string()]).await.unwrap()[0].1, Definition::Loaded { stale: false });
    std::fs::write(&path, V2).unwrap();
    assert_eq!(
        sim.definitions(&["a.service".to_string()]).await.unwrap()[0].1,
        Definition::Loaded { stale: true },
        "systemd still holds V1"
    );
    sim.daemon_reload().await.unwrap();
    assert_eq!(sim.definitions(&["a.service".to_string()]).await.unwrap()[0].1, Definition::Loaded { stale: false });
    // A running unit whose file and link vanish keeps running, not found.
    sim.disable_runtime("a.service").await.unwrap();
    sim.daemon_reload().await.unwrap();
    assert_eq!(state(&sim, "a.service").await, "not-found/active/running");
}

#[tokio::test]
async fn jobs_on_units_without_a_file_fail_as_not_loaded() {
    let sim = SimSystemd::default();
    for err in [sim.start("x.service").await.unwrap_err(), sim.stop("x.service").await.unwrap_err()] {
        assert!(err.is_not_loaded(), "{err}");
    }
    sim.reset_failed("x.service").await.expect("reset-failed of an unknown unit is fine");
    assert_eq!(sim.wait_inactive("x.service").await.unwrap(), "inactive");
}

#[tokio::test]
async fn every_state_change_is_announced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.service");
    std::fs::write(&path, V1).unwrap();
    let sim = SimSystemd::new(SimConfig { job_latency: Duration::from_millis(1) });
    let mut changes = sim.changes();
    sim.link_runtime(&path).await.unwrap();
    sim.start("a.service").await.unwrap();
    sim.stop("a.service").await.unwrap();
    let mut seen = Vec::new();
    while let Some(Some(change)) = futures::FutureExt::now_or_never(changes.recv()) {
        seen.push(change);
    }
    // Taken only after the stop: the four changes (activating, active, deactivating, inactive) wait as one, with
    // the newest values of both signals.
    let reported = Reported { active: Some(("inactive".into(), "dead".into())), restarts: Some(0), entered: None };
    assert_eq!(seen, vec![UnitChange::Unit { name: "a.service".into(), reported }]);
}

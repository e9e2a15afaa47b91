//! Executor tests against a fake systemd that records every call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::agent::fake::Fake;
use fleet_core::machine_plan::plan::Reason;
use fleet_systemd::NO_SUCH_UNIT;

fn hash(text: &str) -> String {
    fleet_core::unit::UnitHash::of(text).to_hex()
}

const V1: &str = "[Service]\nExecStart=/bin/sleep 100\n";
const V2: &str = "[Service]\nExecStart=/bin/sleep 200\n";

struct Setup {
    fake: Arc<Fake>,
    exec: Executor<Arc<Fake>>,
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    // Nested: the executor keeps its record next to the units directory.
    let path = dir.path().join("units");
    let fake = Arc::new(Fake::default());
    let config = ExecutorConfig { start_wait: Duration::from_millis(100), stop_wait: Duration::from_secs(5) };
    let exec = Executor::new(Arc::clone(&fake), UnitsDir::open(&path).unwrap(), config);
    Setup { fake, exec, _dir: dir, dir: path }
}

fn desired(units: &[(&str, JobState, &str, bool)]) -> BTreeMap<String, Desired> {
    units
        .iter()
        .map(|(n, s, text, install)| {
            let d = Desired {
                state: *s,
                hash: fleet_core::unit::UnitHash::of(text).to_hex(),
                text: Arc::from(*text),
                install: *install,
                update: fleet_core::machine_plan::plan::Update::Restart,
                restart: None,
            };
            (n.to_string(), d)
        })
        .collect()
}

fn outcomes(reports: &[TaskReport]) -> Vec<String> {
    reports
        .iter()
        .map(|r| match &r.outcome {
            Ok(o) => format!("{} {} {o:?}", r.planned.task.kind(), r.planned.task.unit().unwrap_or("-")),
            Err(e) => format!("{} {} ERR {e}", r.planned.task.kind(), r.planned.task.unit().unwrap_or("-")),
        })
        .collect()
}

#[tokio::test]
async fn fresh_launch_loads_reloads_once_and_starts() {
    let mut s = setup();
    let d = desired(&[("a.service", JobState::Launched, V1, false), ("b.service", JobState::Loaded, V2, false)]);
    let reports = s.exec.reconcile(&d).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    assert_eq!(s.fake.calls(), ["link a.service", "link b.service", "reload ", "start a.service"]);
    assert_eq!(std::fs::read_to_string(s.dir.join("a.service")).unwrap(), V1);
    assert_eq!(s.exec.launched(), ["a.service"]);
    let hash = hash(V1);
    assert_eq!(markers(&reports, s.exec.loaded()), [Marker::Launched { unit: "a.service".into(), hash }]);
    // Converged: the next reconcile does nothing.
    assert!(s.exec.reconcile(&d).await.is_empty());
    assert!(s.fake.calls().is_empty());
}

#[tokio::test]
async fn replacing_a_launched_unit_stops_and_waits_before_deleting_and_starting() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.fake.calls();
    let reports = s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V2, false)])).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    assert_eq!(s.fake.calls(), ["stop a.service", "unlink a.service", "link a.service", "reload ", "start a.service",]);
    assert_eq!(std::fs::read_to_string(s.dir.join("a.service")).unwrap(), V2);
    assert_eq!(
        markers(&reports, s.exec.loaded()),
        [
            Marker::NotLaunched("a.service".into()),
            Marker::NotLaunched("a.service".into()),
            Marker::Launched { unit: "a.service".into(), hash: hash(V2) }
        ]
    );
}

#[tokio::test]
async fn replace_without_restart_rewrites_the_file_reloads_and_keeps_the_running_version() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.fake.calls();
    let mut d = desired(&[("a.service", JobState::Launched, V2, false)]);
    d.get_mut("a.service").unwrap().update = fleet_core::machine_plan::plan::Update::InPlace { reload: true };
    let reports = s.exec.reconcile(&d).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    assert_eq!(s.fake.calls(), ["reload ", "reload_unit a.service"], "no stop, no start");
    assert_eq!(std::fs::read_to_string(s.dir.join("a.service")).unwrap(), V2);
    assert_eq!(s.exec.loaded().get("a.service"), Some(&hash(V2)), "the file on disk is the new version");
    assert_eq!(
        s.exec.launched_hashes().get("a.service"),
        Some(&hash(V1)),
        "the process still runs the version it was started with"
    );
    assert!(markers(&reports, s.exec.loaded()).is_empty(), "the launched marker keeps the running version");
    // Converged, and a later stop and start brings the running version level.
    assert!(s.exec.reconcile(&d).await.is_empty());
    s.exec.reconcile(&desired(&[("a.service", JobState::Loaded, V2, false)])).await;
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V2, false)])).await;
    assert_eq!(s.exec.launched_hashes().get("a.service"), Some(&hash(V2)));
}

/// The new hash of a unit updated in place is published only once systemd runs the new definition and its
/// `ExecReload=` has finished: a client waiting for the new hash must not find the unit still reloading.
#[tokio::test]
async fn in_place_update_publishes_the_new_hash_after_the_unit_reload() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.fake.calls();
    let published = s.exec.watch_loaded();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (rx, record) = (published.clone(), Arc::clone(&seen));
    *s.fake.on_reload_unit.lock().unwrap() =
        Some(Box::new(move |name| record.lock().unwrap().push(rx.borrow().hashes.get(name).cloned())));
    let mut d = desired(&[("a.service", JobState::Launched, V2, false)]);
    d.get_mut("a.service").unwrap().update = fleet_core::machine_plan::plan::Update::InPlace { reload: true };
    let reports = s.exec.reconcile(&d).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    assert_eq!(
        *seen.lock().unwrap(),
        [Some(hash(V1))],
        "while the unit reloads, the published hash must still be the previous file's"
    );
    assert_eq!(published.borrow().hashes.get("a.service"), Some(&hash(V2)), "published once the reload finished");
}

/// Layout 2 folds the launched marker into the state: a unit the run loads to start it is fresh until its start
/// job ended (its `inactive` state is not shown meanwhile), and carries its launched hash from its load on, so its
/// first shown state is a started one with the hash. A unit only loaded stays fresh, without a launched hash,
/// until the agent publishes after the run.
#[tokio::test]
async fn a_unit_loaded_and_started_in_one_run_carries_its_launched_hash_from_its_load() {
    let mut s = setup();
    let published = s.exec.watch_loaded();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (rx, record) = (published.clone(), Arc::clone(&seen));
    *s.fake.on_start.lock().unwrap() = Some(Box::new(move |name| {
        let l = rx.borrow();
        record.lock().unwrap().push((l.fresh.contains_key(name), l.launched.get(name).cloned()));
    }));
    let d = desired(&[("a.service", JobState::Launched, V1, false), ("b.service", JobState::Loaded, V1, false)]);
    let reports = s.exec.reconcile(&d).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    assert_eq!(*seen.lock().unwrap(), [(true, Some(hash(V1)))], "while a.service starts: fresh, with its hash");
    {
        let l = published.borrow();
        assert!(!l.fresh.contains_key("a.service"), "a.service's start ended");
        assert_eq!(l.launched.get("a.service"), Some(&hash(V1)), "with the hash it was started with");
        assert!(l.fresh.contains_key("b.service"), "b.service stays fresh until the agent publishes after the run");
        assert_eq!(l.launched.get("b.service"), None, "b.service was not started");
    }
    s.exec.publish_launched();
    assert!(published.borrow().fresh.is_empty());
}

/// A fresh unit whose start fails has no launched hash once the start ended.
#[tokio::test]
async fn a_fresh_unit_whose_start_fails_loses_its_launched_hash() {
    let mut s = setup();
    let published = s.exec.watch_loaded();
    s.fake.fail("start a.service", "a.service", "no such thing");
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    assert_eq!(published.borrow().launched.get("a.service"), None);
    assert!(!published.borrow().fresh.contains_key("a.service"), "its start ended");
}

/// A start of a unit already shown (here after a stop) changes its launched hash only when the agent publishes
/// after the run (once the health the start resets is published); a stop, likewise.
#[tokio::test]
async fn a_start_of_a_shown_unit_is_published_after_the_run() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Loaded, V1, false)])).await;
    s.exec.publish_launched();
    let published = s.exec.watch_loaded();
    assert!(published.borrow().hashes.contains_key("a.service") && published.borrow().fresh.is_empty());
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    assert_eq!(s.exec.launched_hashes().get("a.service"), Some(&hash(V1)), "started");
    assert_eq!(published.borrow().launched.get("a.service"), None, "not shown before the agent publishes");
    s.exec.publish_launched();
    assert_eq!(published.borrow().launched.get("a.service"), Some(&hash(V1)));
    s.exec.reconcile(&desired(&[("a.service", JobState::Loaded, V1, false)])).await;
    assert_eq!(published.borrow().launched.get("a.service"), Some(&hash(V1)), "stopped, not published yet");
    s.exec.publish_launched();
    assert_eq!(published.borrow().launched.get("a.service"), None, "stopped: no launched hash");
}

/// A new unit with a health check gets its launched hash only when the agent publishes after the run: its health is
/// reset before its launched hash is shown.
#[tokio::test]
async fn a_new_checked_unit_is_shown_after_the_run() {
    let mut s = setup();
    let checked = "[Service]\nExecStart=/bin/sleep 100\n[X-Fleet]\nHealthCheck=/bin/true\n";
    let published = s.exec.watch_loaded();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, checked, false)])).await;
    assert!(!published.borrow().fresh.contains_key("a.service"), "its start ended");
    assert_eq!(published.borrow().launched.get("a.service"), None, "its launched hash waits for the health reset");
    s.exec.publish_launched();
    assert_eq!(published.borrow().launched.get("a.service"), Some(&hash(checked)));
}

/// An in-place update whose daemon-reload is deferred keeps publishing the previous hash until a later run did it.
#[tokio::test]
async fn in_place_update_with_a_deferred_daemon_reload_keeps_the_previous_hash() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    let published = s.exec.watch_loaded();
    s.fake.fail("reload ", "", "systemd is busy");
    let mut d = desired(&[("a.service", JobState::Launched, V2, false)]);
    d.get_mut("a.service").unwrap().update = fleet_core::machine_plan::plan::Update::InPlace { reload: false };
    s.exec.reconcile(&d).await;
    assert_eq!(std::fs::read_to_string(s.dir.join("a.service")).unwrap(), V2, "the file is written");
    assert_eq!(published.borrow().hashes.get("a.service"), Some(&hash(V1)), "systemd does not run v2 yet");
    s.fake.fail.lock().unwrap().clear();
    assert!(s.exec.reload_pending());
    // The runner plans the due daemon-reload on its next round.
    s.exec.run(vec![Planned { task: Task::Reload, reason: Reason::UnitFilesChanged }], &d).await;
    assert_eq!(published.borrow().hashes.get("a.service"), Some(&hash(V2)), "published after the daemon-reload");
}

#[tokio::test]
async fn a_failed_task_skips_only_the_rest_of_its_own_unit() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.fake.calls();
    s.fake.fail("stop a.service", "org.freedesktop.DBus.Error.AccessDenied", "denied");
    let d = desired(&[("a.service", JobState::Launched, V2, false), ("b.service", JobState::Launched, V1, false)]);
    let reports = s.exec.reconcile(&d).await;
    assert_eq!(
        outcomes(&reports),
        [
            "StopUnit a.service ERR X(t) failed: org.freedesktop.DBus.Error.AccessDenied: denied",
            "UnloadUnit a.service Skipped(\"an earlier task of this unit failed\")",
            "LoadUnit a.service Skipped(\"an earlier task of this unit failed\")",
            "LoadUnit b.service Loaded { changed: true }",
            "ReloadUnitFiles - Done",
            "StartUnit a.service Skipped(\"an earlier task of this unit failed\")",
            "StartUnit b.service Started(Done)",
        ]
    );
    // The old version is untouched and still believed launched; the next reconcile retries.
    assert_eq!(std::fs::read_to_string(s.dir.join("a.service")).unwrap(), V1);
    assert_eq!(s.exec.launched(), ["a.service", "b.service"]);
}

#[tokio::test]
async fn failed_enable_removes_the_file_with_the_spec_message() {
    let mut s = setup();
    s.fake.fail("enable a.service", "org.freedesktop.systemd1.BadUnitSetting", "bad WantedBy");
    let text = "[Service]\nExecStart=/bin/true\n\n[Install]\nWantedBy=hello.service\n";
    let reports = s.exec.reconcile(&desired(&[("a.service", JobState::Loaded, text, true)])).await;
    let err = reports[0].outcome.as_ref().unwrap_err().to_string();
    assert_eq!(
        err,
        "Failed to enable systemd unit a.service: X(t) failed: org.freedesktop.systemd1.BadUnitSetting: bad WantedBy"
    );
    assert!(!s.dir.join("a.service").exists());
    assert!(s.exec.actual().is_empty());
}

#[tokio::test]
async fn install_section_enables_the_unit() {
    let mut s = setup();
    let text = "[Service]\nExecStart=/bin/true\n\n[Install]\nWantedBy=hello.service\n";
    s.exec.reconcile(&desired(&[("a.service", JobState::Loaded, text, true)])).await;
    assert_eq!(s.fake.calls(), ["link a.service", "enable a.service", "reload "]);
}

#[tokio::test]
async fn unload_tolerates_a_unit_that_is_not_loaded() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.fake.calls();
    s.fake.fail("stop a.service", NO_SUCH_UNIT, "Unit a.service not loaded.");
    s.fake.fail("reset_failed a.service", NO_SUCH_UNIT, "Unit a.service not loaded.");
    s.fake.not_linked.lock().unwrap().insert("a.service".into());
    s.fake.fail("disable a.service", NO_SUCH_UNIT, "Unit file a.service does not exist.");
    let reports = s.exec.reconcile(&BTreeMap::new()).await;
    assert_eq!(outcomes(&reports), ["UnloadUnit a.service Done", "ReloadUnitFiles - Done"]);
    assert!(!s.dir.join("a.service").exists());
    assert_eq!(markers(&reports, s.exec.loaded()), [Marker::NotLaunched("a.service".into())]);
}

#[tokio::test]
async fn unload_fails_and_keeps_the_file_when_disable_fails() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.fake.not_linked.lock().unwrap().insert("a.service".into());
    s.fake.fail("disable a.service", "org.freedesktop.DBus.Error.AccessDenied", "denied");
    let reports = s.exec.reconcile(&BTreeMap::new()).await;
    assert!(reports[0].outcome.is_err());
    assert!(s.dir.join("a.service").exists(), "retried next reconcile");
}

/// An unload removes a plain unit's runtime link on disk (DisableUnitFiles scans every runtime link); a unit with
/// `[Install]` (it may be enabled) or without a link of ours goes through systemd.
#[tokio::test]
async fn unload_unlinks_plain_units_and_disables_installed_or_unlinked_ones() {
    let mut s = setup();
    let installed = "[Service]\nExecStart=/bin/sleep 1\n\n[Install]\nWantedBy=multi-user.target\n";
    let d = desired(&[
        ("a.service", JobState::Loaded, V1, false),
        ("b.service", JobState::Loaded, installed, true),
        ("c.service", JobState::Loaded, V2, false),
    ]);
    s.exec.reconcile(&d).await;
    s.fake.calls();
    s.fake.not_linked.lock().unwrap().insert("c.service".into());
    let reports = s.exec.reconcile(&BTreeMap::new()).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    let calls: Vec<String> =
        s.fake.calls().into_iter().filter(|c| c.starts_with("unlink") || c.starts_with("disable")).collect();
    assert_eq!(calls, ["unlink a.service", "disable b.service", "unlink c.service", "disable c.service"]);
}

/// A stop job that is not done (replaced by another job, say) leaves the unit's state unknown: it is waited for. A
/// done one is not, and only units systemd shows failed are reset.
#[tokio::test]
async fn unload_waits_after_an_unfinished_stop_and_resets_only_failed_units() {
    let mut s = setup();
    let d = desired(&[("a.service", JobState::Launched, V1, false), ("b.service", JobState::Launched, V2, false)]);
    s.exec.reconcile(&d).await;
    s.fake.calls();
    s.fake.stop_results.lock().unwrap().insert("a.service".into(), JobResult::Canceled);
    s.fake.active.lock().unwrap().insert("b.service".into(), "failed".into());
    let reports = s.exec.reconcile(&BTreeMap::new()).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    let calls = s.fake.calls();
    assert!(calls.contains(&"wait_inactive a.service".to_string()), "{calls:?}");
    assert!(!calls.contains(&"wait_inactive b.service".to_string()), "{calls:?}");
    let resets: Vec<&String> = calls.iter().filter(|c| c.starts_with("reset_failed")).collect();
    assert_eq!(resets, ["reset_failed b.service"]);
}

#[tokio::test]
async fn current_states_join_systemd_with_recorded_hashes() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    let states = s.exec.current_states("m1").await.unwrap();
    assert_eq!(states["a.service"].hash, hash(V1));
    assert_eq!(states["a.service"].machine_id, "m1");
    assert_eq!(states["a.service"].active_state, "active");
}

#[tokio::test]
async fn restart_of_fleetd_readopts_identical_files_without_reload_or_stop() {
    let mut s = setup();
    std::fs::write(s.dir.join("a.service"), V1).unwrap();
    let units = UnitsDir::open(&s.dir).unwrap();
    let mut exec = Executor::new(Arc::clone(&s.fake), units, ExecutorConfig::default());
    let reports = exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()));
    // The link already existed in a real systemd; the fake always reports a change, so a reload precedes start.
    assert_eq!(s.fake.calls(), ["link a.service", "reload ", "start a.service"]);
    s.exec = exec;
}

#[tokio::test]
async fn a_new_process_adopts_what_the_last_one_launched_without_touching_systemd() {
    let mut s = setup();
    let d = desired(&[("a.service", JobState::Launched, V1, false), ("b.service", JobState::Loaded, V2, false)]);
    s.exec.reconcile(&d).await;
    s.fake.calls();
    // The next fleetd process opens the same units directory (the old process's caches are gone).
    let mut next = Executor::new(Arc::clone(&s.fake), UnitsDir::open(&s.dir).unwrap(), ExecutorConfig::default());
    assert_eq!(next.launched(), ["a.service"]);
    assert_eq!(next.launched_hashes(), BTreeMap::from([("a.service".to_string(), hash(V1))]));
    let reports = next.reconcile(&d).await;
    assert!(reports.is_empty(), "the adopting process planned {:?}", outcomes(&reports));
    assert!(s.fake.calls().is_empty(), "the adopting process called systemd");
}

#[tokio::test]
async fn a_purged_machine_leaves_nothing_to_adopt() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.exec.purge(Duration::from_secs(5)).await;
    let next = Executor::new(Arc::clone(&s.fake), UnitsDir::open(&s.dir).unwrap(), ExecutorConfig::default());
    assert!(next.believed().is_empty(), "adopted after a purge: {:?}", next.believed());
}

#[tokio::test]
async fn long_start_job_is_tracked_and_defers_the_next_reload() {
    let mut s = setup();
    *s.fake.start_delay.lock().unwrap() = Some(Duration::from_millis(500));
    s.fake.active.lock().unwrap().insert("slow.service".into(), "activating".into());
    let reports = s.exec.reconcile(&desired(&[("slow.service", JobState::Launched, V1, false)])).await;
    assert_eq!(outcomes(&reports).last().unwrap(), "StartUnit slow.service StartPending");
    assert_eq!(s.exec.launched(), ["slow.service"]);
    *s.fake.start_delay.lock().unwrap() = None;
    s.fake.calls();

    // A new unit arrives while the slow start job still runs: loaded, but no reload and no start yet.
    let d = desired(&[("slow.service", JobState::Launched, V1, false), ("b.service", JobState::Launched, V2, false)]);
    let reports = s.exec.reconcile(&d).await;
    assert_eq!(
        outcomes(&reports),
        [
            "LoadUnit b.service Loaded { changed: true }",
            "ReloadUnitFiles - Deferred(\"own start jobs still running\")",
            "StartUnit b.service Deferred(\"daemon-reload pending\")",
        ]
    );
    assert_eq!(s.fake.calls(), ["link b.service"]);

    // The slow job finished: the next reconcile reloads, then starts.
    s.fake.active.lock().unwrap().insert("slow.service".into(), "active".into());
    let reports = s.exec.reconcile(&d).await;
    assert_eq!(outcomes(&reports), ["StartUnit b.service Started(Done)"]);
    assert_eq!(s.fake.calls(), ["reload ", "start b.service"]);
}

#[tokio::test]
async fn stop_of_a_launched_unit_keeps_its_file() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.fake.calls();
    let reports = s.exec.reconcile(&desired(&[("a.service", JobState::Loaded, V1, false)])).await;
    assert_eq!(outcomes(&reports), ["StopUnit a.service Stopped(Done)"]);
    assert!(s.dir.join("a.service").exists());
    assert!(s.exec.launched().is_empty());
    assert_eq!(s.exec.actual()["a.service"].believed, JobState::Loaded);
}

/// seed 4052's hour: a stop whose answer was lost (it ran) is a stop; a refused one leaves the unit launched.
#[tokio::test]
async fn a_stop_whose_answer_was_lost_counts_when_systemd_shows_the_unit_stopped() {
    let mut s = setup();
    let both = |state| desired(&[("a.service", state, V1, false), ("b.service", state, V2, false)]);
    s.exec.reconcile(&both(JobState::Launched)).await;
    s.fake.stop_answer_lost.lock().unwrap().insert("a.service".into());
    s.fake.fail("stop b.service", "org.freedesktop.DBus.Error.Failed", "refused");
    s.exec.reconcile(&both(JobState::Loaded)).await;
    assert_eq!(s.exec.launched(), ["b.service"], "a stopped (its answer lost); b's stop was refused");
    assert_eq!(s.exec.actual()["a.service"].believed, JobState::Loaded);
}

#[tokio::test]
async fn purge_unloads_every_unit_file() {
    let mut s = setup();
    let d = desired(&[("a.service", JobState::Launched, V1, false), ("b.timer", JobState::Loaded, V2, false)]);
    s.exec.reconcile(&d).await;
    std::fs::write(s.dir.join("stray.service"), "x").unwrap();
    s.fake.calls();
    let reports = s.exec.purge(Duration::from_secs(5)).await;
    assert_eq!(
        outcomes(&reports),
        [
            "UnloadUnit a.service Done",
            "UnloadUnit b.timer Done",
            "UnloadUnit stray.service Done",
            "ReloadUnitFiles - Done"
        ]
    );
    assert!(s.exec.units().hashes().is_empty());
    assert!(reports.iter().all(|r| r.planned.reason == Reason::NotScheduledHere || r.planned.task == Task::Reload));
}

#[test]
fn marker_diff_repairs_missing_stale_and_extra_markers() {
    let m = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    };
    let want = m(&[("a.service", "h1"), ("b.service", "h2"), ("c.service", "h3")]);
    let have = m(&[("a.service", "h1"), ("b.service", "old"), ("d.service", "h4")]);
    assert_eq!(
        marker_diff(&want, &have),
        [
            Marker::Launched { unit: "b.service".into(), hash: "h2".into() },
            Marker::Launched { unit: "c.service".into(), hash: "h3".into() },
            Marker::NotLaunched("d.service".into()),
        ]
    );
    assert!(marker_diff(&want, &want).is_empty());
}

#[tokio::test]
async fn a_replace_skips_the_daemon_reload_when_systemd_reads_the_new_file_already() {
    let mut s = setup();
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, false)])).await;
    s.fake.calls();
    // systemd dropped the stopped unit, so loading it reads the new file.
    s.fake.current_files.lock().unwrap().insert("a.service".into());
    let reports = s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V2, false)])).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    let calls = s.fake.calls();
    assert!(!calls.contains(&"reload ".to_string()), "no daemon-reload: {calls:?}");
    assert_eq!(calls.last().map(String::as_str), Some("start a.service"));
    assert!(!s.exec.reload_pending());
    assert!(outcomes(&reports).iter().any(|o| o.starts_with("ReloadUnitFiles - Skipped")), "{:?}", outcomes(&reports));
}

/// A replace reads no unit states between its stop and its start when the stop's signals told that it left the
/// unit inactive; an unload reads (and resets when failed) only the units whose stop did not tell that.
#[tokio::test]
async fn only_units_a_stop_did_not_leave_inactive_are_read_before_their_unload() {
    let mut s = setup();
    let d = desired(&[
        ("a.service", JobState::Launched, V1, false),
        ("b.service", JobState::Launched, V1, false),
        ("c.service", JobState::Launched, V1, false),
    ]);
    s.exec.reconcile(&d).await;
    s.fake.calls();
    s.fake.state_reads.lock().unwrap().clear();
    let d2 = desired(&[
        ("a.service", JobState::Launched, V2, false),
        ("b.service", JobState::Launched, V1, false),
        ("c.service", JobState::Launched, V1, false),
    ]);
    let reports = s.exec.reconcile(&d2).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    assert_eq!(s.fake.calls().last().map(String::as_str), Some("start a.service"));
    assert_eq!(*s.fake.state_reads.lock().unwrap(), Vec::<Vec<String>>::new(), "the replace read no states");

    // b's stop leaves it failed, c's stop tells nothing (its signals were lost): both are read, b is reset.
    s.fake.active.lock().unwrap().insert("b.service".into(), "failed".into());
    s.fake.stop_reports_nothing.lock().unwrap().insert("c.service".into());
    let reports = s.exec.reconcile(&BTreeMap::new()).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    assert_eq!(*s.fake.state_reads.lock().unwrap(), [["b.service", "c.service"]], "a's stop left it inactive");
    let resets: Vec<String> = s.fake.calls().into_iter().filter(|c| c.starts_with("reset_failed")).collect();
    assert_eq!(resets, ["reset_failed b.service"]);
}

#[tokio::test]
async fn an_install_unit_or_a_removed_file_systemd_still_holds_takes_a_daemon_reload() {
    let mut s = setup();
    s.fake.current_files.lock().unwrap().insert("a.service".into());
    s.exec.reconcile(&desired(&[("a.service", JobState::Launched, V1, true)])).await;
    assert!(s.fake.calls().contains(&"reload ".to_string()), "an enabled [Install] unit needs the reload");
    s.exec.reconcile(&desired(&[])).await;
    assert!(
        s.fake.calls().contains(&"reload ".to_string()),
        "a removed unit file systemd still holds needs the reload"
    );
}

#[tokio::test]
async fn new_and_unloaded_units_systemd_matches_take_no_daemon_reload() {
    let mut s = setup();
    let names = ["a.service", "b.service", "c.service"];
    s.fake.current_files.lock().unwrap().extend(names.iter().map(|n| n.to_string()));
    let units: Vec<(&str, JobState, &str, bool)> = names.iter().map(|n| (*n, JobState::Launched, V1, false)).collect();
    let reports = s.exec.reconcile(&desired(&units)).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    let calls = s.fake.calls();
    assert!(!calls.contains(&"reload ".to_string()), "new units systemd loads fresh: {calls:?}");
    assert!(calls.contains(&"start c.service".to_string()), "{calls:?}");
    assert!(!s.exec.reload_pending());

    // Unloaded, and systemd has garbage-collected all three: nothing left for a reload to drop.
    s.fake.forgotten.lock().unwrap().extend(names.iter().map(|n| n.to_string()));
    let reports = s.exec.reconcile(&desired(&[])).await;
    assert!(reports.iter().all(|r| r.outcome.is_ok()), "{:?}", outcomes(&reports));
    let calls = s.fake.calls();
    assert!(!calls.contains(&"reload ".to_string()), "unloaded units systemd forgot: {calls:?}");
    assert!(!s.exec.reload_pending());

    // One of three still held (in an older version) is enough for the reload.
    s.fake.forgotten.lock().unwrap().remove("b.service");
    s.fake.current_files.lock().unwrap().remove("b.service");
    s.exec.reconcile(&desired(&units)).await;
    assert!(s.fake.calls().contains(&"reload ".to_string()), "b is held in an older version");
}

#[test]
fn a_definition_matches_the_disk_only_when_a_reload_would_change_nothing() {
    use fleet_systemd::Definition;
    assert!(Definition::Loaded { stale: false }.matches_disk(true), "loaded from the file as it is");
    assert!(!Definition::Loaded { stale: true }.matches_disk(true), "loaded in an older version");
    assert!(!Definition::Loaded { stale: false }.matches_disk(false), "held although its file is gone");
    assert!(!Definition::NotFound.matches_disk(true), "systemd does not see the new file yet");
    assert!(Definition::NotFound.matches_disk(false), "gone from disk and from systemd");
    assert!(Definition::NotLoaded.matches_disk(true), "systemd reads the file when it first loads the unit");
    assert!(Definition::NotLoaded.matches_disk(false), "nothing held, nothing on disk");
    assert!(!Definition::Other("bad-setting".into()).matches_disk(true));
    assert!(!Definition::Other("masked".into()).matches_disk(false));
    assert_eq!(Definition::from_properties("loaded", true), Definition::Loaded { stale: true });
    assert_eq!(Definition::from_properties("not-found", false), Definition::NotFound);
    assert_eq!(Definition::from_properties("error", false), Definition::Other("error".into()));
}

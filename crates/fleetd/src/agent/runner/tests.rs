//! Reconcile tests against a fake systemd and hand-built snapshots.

use std::sync::Arc;

use super::*;
use crate::agent::executor::Outcome;
use crate::agent::fake::Fake;
use fleet_core::machine_plan::plan::{Reason, Task};
use fleet_core::unit::UnitHash;
use fleet_registry::{Change, Keys};

const ME: &str = "aaaaaaaa11111111aaaaaaaa11111111";
const OTHER: &str = "bbbbbbbb22222222bbbbbbbb22222222";
const V1: &str = "[Service]\nExecStart=/bin/sleep 100\n";
const V2: &str = "[Service]\nExecStart=/bin/sleep 200\n";
const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 100\n\n[X-Fleet]\nGlobal=true\n";

fn hash(text: &str) -> String {
    UnitHash::of(text).to_hex()
}

/// A registry snapshot built key by key.
struct Snap {
    keys: Keys,
    kvs: Vec<(String, String)>,
}

impl Snap {
    fn new() -> Snap {
        Snap { keys: Keys::new("/p"), kvs: Vec::new() }
    }
    fn put(mut self, key: String, value: &str) -> Snap {
        self.kvs.push((key, value.to_string()));
        self
    }
    fn machine(self, id: &str) -> Snap {
        let k = self.keys.machine_object(id);
        self.put(k, &format!(r#"{{"id":"{id}"}}"#))
    }
    fn unit(self, name: &str, text: &str, desired: &str, target: Option<&str>) -> Snap {
        let h = hash(text);
        let (body, object, want) = (self.keys.body(&h), self.keys.unit_object(name), self.keys.unit_desired(name));
        let mut s =
            self.put(body, text).put(object, &format!(r#"{{"name":"{name}","hash":"{h}"}}"#)).put(want, desired);
        if let Some(t) = target {
            let k = s.keys.unit_target(name);
            s = s.put(k, t);
        }
        s
    }
    fn state(self, name: &str, machine: &str, text: &str, active: &str) -> Snap {
        let k = self.keys.state(name, machine);
        let h = hash(text);
        self.put(k, &format!(r#"{{"hash":"{h}","loadState":"loaded","activeState":"{active}","subState":"x"}}"#))
    }
    fn launched(self, name: &str, machine: &str, text: &str) -> Snap {
        let k = self.keys.unit_launched(name, machine);
        self.put(k, &hash(text))
    }
    fn done(&self) -> Snapshot {
        let changes = self
            .kvs
            .iter()
            .map(|(k, v)| (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 2, lease: 1 }));
        Snapshot::from_kvs(&self.keys, 2, changes)
    }
}

struct Setup {
    fake: Arc<Fake>,
    exec: Executor<Arc<Fake>>,
    cache: UnitCache,
    dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(Fake::default());
    let config = ExecutorConfig { start_wait: Duration::from_millis(100), stop_wait: Duration::from_secs(5) };
    let exec = Executor::new(Arc::clone(&fake), UnitsDir::open(dir.path().join("units")).unwrap(), config);
    Setup { fake, exec, cache: UnitCache::new(), dir }
}

impl Setup {
    async fn reconcile(&mut self, snap: &Snapshot) -> Result<Reconciled, Skip> {
        let snap = Arc::new(snap.clone());
        reconcile_once(&mut self.exec, &mut self.cache, &move || Arc::clone(&snap), ME).await
    }
}

fn tasks(done: &Reconciled) -> Vec<String> {
    done.reports.iter().map(|r| format!("{} {}", r.planned.task.kind(), r.planned.task.unit().unwrap_or("-"))).collect()
}

/// A marker this agent wrote that its view does not show yet (the view learns of it later) is not written again by
/// the next reconcile; once neither says so, the repair writes it.
#[tokio::test]
async fn a_marker_written_but_not_yet_in_the_view_is_not_written_again() {
    let mut s = setup();
    let snap = Snap::new().machine(ME).unit("a.service", V1, "launched", Some(ME)).done();
    let done = s.reconcile(&snap).await.unwrap();
    assert_eq!(done.markers, [Marker::Launched { unit: "a.service".into(), hash: hash(V1) }]);
    let latest = {
        let snap = Arc::new(snap.clone());
        move || Arc::clone(&snap)
    };
    let written = BTreeMap::from([("a.service".to_string(), Some(hash(V1)))]);
    let done =
        reconcile_fenced(&mut s.exec, &mut s.cache, &latest, ME, &|| false, None, &written, false).await.unwrap();
    assert!(done.markers.is_empty(), "written, not shown yet: {:?}", done.markers);
    let done = reconcile_fenced(&mut s.exec, &mut s.cache, &latest, ME, &|| false, None, &BTreeMap::new(), false)
        .await
        .unwrap();
    assert_eq!(done.markers, [Marker::Launched { unit: "a.service".into(), hash: hash(V1) }], "the repair");
}

#[tokio::test]
async fn a_unit_targeted_here_is_loaded_started_and_marked() {
    let mut s = setup();
    let snap = Snap::new().machine(ME).unit("a.service", V1, "launched", Some(ME)).done();
    let done = s.reconcile(&snap).await.unwrap();
    assert_eq!(tasks(&done), ["LoadUnit a.service", "ReloadUnitFiles -", "StartUnit a.service"]);
    assert_eq!(done.markers, [Marker::Launched { unit: "a.service".into(), hash: hash(V1) }]);
    assert!(done.held.is_empty());
    // Converged: the marker is in the registry now; nothing to do.
    let snap = Snap::new().machine(ME).unit("a.service", V1, "launched", Some(ME)).launched("a.service", ME, V1).done();
    s.fake.calls();
    let done = s.reconcile(&snap).await.unwrap();
    assert!(done.reports.is_empty() && done.markers.is_empty(), "{:?}", tasks(&done));
    assert!(s.fake.calls().is_empty());
}

#[tokio::test]
async fn nothing_happens_while_disconnected_or_without_own_record() {
    let mut s = setup();
    s.reconcile(&Snap::new().machine(ME).unit("a.service", V1, "launched", Some(ME)).done()).await.unwrap();
    s.fake.calls();
    // etcd unreachable: the last snapshot is marked disconnected.
    let mut stale = Snap::new().machine(ME).done();
    stale.set_connected(false);
    assert_eq!(s.reconcile(&stale).await.unwrap_err(), Skip::Disconnected);
    // B14: own presence missing (only dynamic metadata left) would look like "nothing scheduled here".
    let k = Keys::new("/p").machine_metadata(ME, "role");
    let no_me = Snap::new().put(k, "web").unit("a.service", V1, "launched", Some(ME)).done();
    assert_eq!(s.reconcile(&no_me).await.unwrap_err(), Skip::OwnMachineMissing);
    assert!(s.fake.calls().is_empty(), "no unit was touched");
    assert!(s.dir.path().join("units").join("a.service").exists());
}

#[tokio::test]
async fn a_unit_moving_here_is_loaded_but_started_only_after_the_old_copy_stopped() {
    let mut s = setup();
    let base = || Snap::new().machine(ME).machine(OTHER).unit("a.service", V2, "launched", Some(ME));
    // The old version still runs (then stops) on the other machine.
    for active in ["active", "deactivating"] {
        let snap = base().state("a.service", OTHER, V1, active).launched("a.service", OTHER, V1).done();
        let done = s.reconcile(&snap).await.unwrap();
        assert_eq!(done.held.len(), 1, "{active}");
        assert_eq!(done.held[0].1.to_string(), format!("unit still {active} on machine {OTHER}"));
        assert!(done.markers.is_empty());
    }
    assert_eq!(s.fake.calls(), ["link a.service", "reload "], "loaded, not started");
    assert_eq!(std::fs::read_to_string(s.dir.path().join("units").join("a.service")).unwrap(), V2);
    // Its stop completed: the state shows inactive (or is gone) → the start goes ahead.
    let snap = base().state("a.service", OTHER, V1, "inactive").done();
    let done = s.reconcile(&snap).await.unwrap();
    assert_eq!(tasks(&done), ["StartUnit a.service"]);
    assert!(done.held.is_empty());
    assert_eq!(done.markers, [Marker::Launched { unit: "a.service".into(), hash: hash(V2) }]);
}

#[tokio::test]
async fn a_dead_machine_or_a_global_unit_never_holds_a_start() {
    let mut s = setup();
    // The other machine's presence is gone (its lease expired): its leftovers do not count.
    let snap = Snap::new()
        .machine(ME)
        .unit("a.service", V1, "launched", Some(ME))
        .state("a.service", OTHER, V1, "active")
        .unit("g.service", GLOBAL, "launched", None)
        .done();
    let done = s.reconcile(&snap).await.unwrap();
    assert!(done.held.is_empty());
    // A global unit runs everywhere at once.
    let snap = Snap::new()
        .machine(ME)
        .machine(OTHER)
        .unit("g.service", GLOBAL, "launched", None)
        .state("g.service", OTHER, GLOBAL, "active")
        .done();
    let mut s = setup();
    let done = s.reconcile(&snap).await.unwrap();
    assert_eq!(tasks(&done), ["LoadUnit g.service", "ReloadUnitFiles -", "StartUnit g.service"]);
    assert!(done.held.is_empty());
}

#[tokio::test]
async fn a_unit_moving_away_is_unloaded_and_unmarked() {
    let mut s = setup();
    s.reconcile(&Snap::new().machine(ME).unit("a.service", V1, "launched", Some(ME)).done()).await.unwrap();
    let snap = Snap::new()
        .machine(ME)
        .machine(OTHER)
        .unit("a.service", V2, "launched", Some(OTHER))
        .launched("a.service", ME, V1)
        .done();
    let done = s.reconcile(&snap).await.unwrap();
    assert_eq!(tasks(&done), ["UnloadUnit a.service", "ReloadUnitFiles -"]);
    assert_eq!(done.markers, [Marker::NotLaunched("a.service".into())]);
    assert!(!s.dir.path().join("units").join("a.service").exists());
}

#[tokio::test]
async fn a_changed_unit_on_this_machine_is_replaced_in_one_pass() {
    let mut s = setup();
    s.reconcile(&Snap::new().machine(ME).unit("a.service", V1, "launched", Some(ME)).done()).await.unwrap();
    s.fake.calls();
    let snap = Snap::new().machine(ME).unit("a.service", V2, "launched", Some(ME)).launched("a.service", ME, V1).done();
    let done = s.reconcile(&snap).await.unwrap();
    assert_eq!(
        tasks(&done),
        [
            "StopUnit a.service",
            "UnloadUnit a.service",
            "LoadUnit a.service",
            "ReloadUnitFiles -",
            "StartUnit a.service"
        ]
    );
    let calls = s.fake.calls();
    let stop_done = calls.iter().position(|c| c == "stop a.service").unwrap();
    let start = calls.iter().position(|c| c == "start a.service").unwrap();
    assert!(stop_done < start, "{calls:?}");
    assert_eq!(done.markers, [Marker::Launched { unit: "a.service".into(), hash: hash(V2) }]);
}

#[test]
fn marker_plan_keeps_the_last_marker_per_unit_and_repairs_untouched_units() {
    let report = |task: Task, outcome: Outcome| TaskReport {
        planned: Planned { task, reason: Reason::HashDiffers },
        outcome: Ok(outcome),
    };
    let reports = [
        report(Task::Stop("a.service".into()), Outcome::Stopped(fleet_systemd::JobResult::Done)),
        report(Task::Start("a.service".into()), Outcome::Started(fleet_systemd::JobResult::Done)),
    ];
    let m = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    };
    let loaded = m(&[("a.service", "h2"), ("b.service", "h1")]);
    let launched = m(&[("a.service", "h2"), ("b.service", "h1")]);
    // b's marker vanished from the registry; c's is a leftover; a's is being rewritten by the run anyway.
    let have = m(&[("a.service", "h1"), ("c.service", "h0")]);
    assert_eq!(
        marker_plan(&reports, &loaded, &launched, &have),
        [
            Marker::Launched { unit: "a.service".into(), hash: "h2".into() },
            Marker::Launched { unit: "b.service".into(), hash: "h1".into() },
            Marker::NotLaunched("c.service".into()),
        ]
    );
}

/// Layout 2: a marker left from layout 1 goes once the unit no longer runs, or once the state carries what it runs
/// (a marker wins over the state for readers); never before.
#[test]
fn markers_are_retired_once_the_state_tells_the_same() {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(u, h)| (u.to_string(), h.to_string())).collect()
    };
    let have = map(&[("gone.service", "h1"), ("told.service", "h1"), ("untold.service", "h1"), ("new.service", "h1")]);
    let launched = map(&[("told.service", "h1"), ("untold.service", "h1"), ("new.service", "h2")]);
    let in_states = map(&[("told.service", "h1"), ("new.service", "h1")]);
    let retired: Vec<String> = markers_to_retire(&have, &launched, &in_states)
        .into_iter()
        .map(|m| match m {
            Marker::NotLaunched(unit) => unit,
            other => panic!("only removals, got {other:?}"),
        })
        .collect();
    assert_eq!(retired, ["gone.service", "told.service"], "untold and new (state still at h1) keep their markers");
}

#[test]
fn skip_reasons_read_well() {
    assert_eq!(Skip::Disconnected.to_string(), "registry unreachable");
    assert_eq!(Skip::OwnMachineMissing.to_string(), "this machine's record is missing from the registry");
}

#[tokio::test]
async fn starts_are_planned_from_the_snapshot_seen_after_the_stops() {
    // While the old version stops (a long ExecStopPost), the unit moves to another machine: the new version must
    // not be started here from the plan made before the stop.
    let mut s = setup();
    s.reconcile(&Snap::new().machine(ME).unit("a.service", V1, "launched", Some(ME)).done()).await.unwrap();
    s.fake.calls();
    let before = Arc::new(Snap::new().machine(ME).unit("a.service", V2, "launched", Some(ME)).done());
    let after = Arc::new(Snap::new().machine(ME).machine(OTHER).unit("a.service", V2, "launched", Some(OTHER)).done());
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let latest = move || {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Arc::clone(if n == 0 { &before } else { &after })
    };
    let done = reconcile_once(&mut s.exec, &mut s.cache, &latest, ME).await.unwrap();
    assert_eq!(tasks(&done), ["StopUnit a.service", "UnloadUnit a.service", "ReloadUnitFiles -"]);
    assert!(!s.fake.calls().iter().any(|c| c.starts_with("start") || c.starts_with("link")));
    assert_eq!(done.markers, [Marker::NotLaunched("a.service".into())]);
}

#[tokio::test]
async fn a_reload_left_pending_is_done_before_the_next_starts() {
    let mut s = setup();
    *s.fake.start_delay.lock().unwrap() = Some(Duration::from_millis(300));
    s.fake.active.lock().unwrap().insert("slow.service".into(), "activating".into());
    let snap = Snap::new().machine(ME).unit("slow.service", V1, "launched", Some(ME));
    s.reconcile(&snap.done()).await.unwrap();
    *s.fake.start_delay.lock().unwrap() = None;
    // A new unit while the slow start runs: loaded, reload deferred.
    let snap = snap.unit("b.service", V2, "launched", Some(ME));
    let done = s.reconcile(&snap.done()).await.unwrap();
    assert_eq!(tasks(&done), ["LoadUnit b.service", "ReloadUnitFiles -", "StartUnit b.service"]);
    assert!(s.exec.reload_pending());
    s.fake.active.lock().unwrap().insert("slow.service".into(), "active".into());
    s.fake.calls();
    let done = s.reconcile(&snap.done()).await.unwrap();
    assert_eq!(tasks(&done), ["ReloadUnitFiles -", "StartUnit b.service"]);
    assert_eq!(s.fake.calls(), ["reload ", "start b.service"]);
}

const AT_MOST_ONCE: &str = "[Service]\nExecStart=/bin/sleep 100\n\n[X-Fleet]\nAtMostOnce=true\n";

#[tokio::test]
async fn in_doubt_at_most_once_units_are_stopped_and_not_started_and_resume_after() {
    let mut s = setup();
    let snap = Arc::new(
        Snap::new()
            .machine(ME)
            .unit("amo.service", AT_MOST_ONCE, "launched", Some(ME))
            .unit("plain.service", V1, "launched", Some(ME))
            .done(),
    );
    let latest = move || Arc::clone(&snap);
    // In doubt from the start: the at-most-once unit is loaded, never started; the plain unit starts.
    let done = reconcile_fenced(&mut s.exec, &mut s.cache, &latest, ME, &|| true, None, &BTreeMap::new(), false)
        .await
        .unwrap();
    assert!(!tasks(&done).contains(&"StartUnit amo.service".to_string()), "{:?}", tasks(&done));
    assert!(tasks(&done).contains(&"StartUnit plain.service".to_string()), "{:?}", tasks(&done));
    // The doubt ends: it starts.
    let done = reconcile_fenced(&mut s.exec, &mut s.cache, &latest, ME, &|| false, None, &BTreeMap::new(), false)
        .await
        .unwrap();
    assert_eq!(tasks(&done), ["StartUnit amo.service"]);
    // Doubt again: the plan stops it (the fence loop stops it too, on its own); the plain unit keeps running.
    let done = reconcile_fenced(&mut s.exec, &mut s.cache, &latest, ME, &|| true, None, &BTreeMap::new(), false)
        .await
        .unwrap();
    assert_eq!(tasks(&done), ["StopUnit amo.service"]);
    assert!(done.markers.contains(&Marker::NotLaunched("amo.service".into())), "{:?}", done.markers);
    // Stopped by the fence while the executor believed it launched: once told, the next plan starts it again.
    reconcile_fenced(&mut s.exec, &mut s.cache, &latest, ME, &|| false, None, &BTreeMap::new(), false).await.unwrap();
    s.exec.note_stopped(&["amo.service".to_string()].into());
    let done = reconcile_fenced(&mut s.exec, &mut s.cache, &latest, ME, &|| false, None, &BTreeMap::new(), false)
        .await
        .unwrap();
    assert_eq!(tasks(&done), ["StartUnit amo.service"]);
}

/// Issue 38: a cordoned machine keeps (and updates) the global unit it holds, starts no global unit it does not hold,
/// and keeps its scheduled unit; uncordoned, it takes the new global unit.
#[tokio::test]
async fn a_cordoned_machine_keeps_its_global_units_and_takes_no_new_one() {
    const NEW: &str = "[Service]\nExecStart=/bin/sleep 300\n\n[X-Fleet]\nGlobal=true\n";
    let mut s = setup();
    let base = || {
        Snap::new().machine(ME).unit("a.service", V1, "launched", Some(ME)).unit("g.service", GLOBAL, "launched", None)
    };
    s.reconcile(&base().done()).await.unwrap();
    s.fake.calls();
    let cordon = Keys::new("/p").machine_cordon(ME);
    let cordoned = || base().put(cordon.clone(), r#"{"sinceMs":1}"#).unit("new.service", NEW, "launched", None);
    let done = s.reconcile(&cordoned().done()).await.unwrap();
    assert!(done.reports.is_empty(), "nothing new starts, nothing stops: {:?}", tasks(&done));
    assert!(s.fake.calls().is_empty());
    assert!(!s.dir.path().join("units").join("new.service").exists());
    // A cordon that does not decode is no cordon: the machine takes the new global unit.
    let bad = base().put(cordon.clone(), "yes").unit("new.service", NEW, "launched", None).done();
    let mut t = setup();
    t.reconcile(&base().done()).await.unwrap();
    let done = t.reconcile(&bad).await.unwrap();
    assert_eq!(tasks(&done), ["LoadUnit new.service", "ReloadUnitFiles -", "StartUnit new.service"]);
    // Uncordoned: the new global unit starts here too.
    let done = s.reconcile(&base().unit("new.service", NEW, "launched", None).done()).await.unwrap();
    assert_eq!(tasks(&done), ["LoadUnit new.service", "ReloadUnitFiles -", "StartUnit new.service"]);
}

//! The engine runner against a real etcd: leader election between engines, scheduling onto registered machines,
//! rescheduling after machine loss, fast hand-over on shutdown, a template burst, and body garbage collection.
//! Every wait is on a reflector or engine-status notification with a deadline, never a fixed sleep.
//!
//! `RUST_LOG=fleet=debug cargo test -p fleetd --test engine -- --nocapture` shows the engines' logs.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_core::model::{JobState, MachineState};
use fleet_core::unit::UnitHash;
use fleet_registry::{ApiWriter, LeaseKeeper, PutUnit, Reflector, Registry, Snapshot};
use fleet_testkit::TestEtcd;
use fleetd::engine::{Engine, EngineConfig, EngineStatus};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);
const EIV: Duration = Duration::from_secs(1);

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// One engine as fleetd runs it: its own reflector, its own task, its own cancellation token.
struct RunningEngine {
    id: String,
    cancel: CancellationToken,
    task: JoinHandle<()>,
    status: watch::Receiver<EngineStatus>,
    _reflector: Reflector,
}

impl RunningEngine {
    async fn start(reg: &Registry, id: &str, eiv: Duration) -> RunningEngine {
        let reflector = Reflector::start(reg);
        let config = EngineConfig {
            machine_id: id.to_string(),
            reconcile_interval: eiv,
            disable_engine: false,
            rebalance: false,
        };
        let engine = Engine::new(reg.clone(), reflector.subscribe(), config);
        let status = engine.status();
        let cancel = CancellationToken::new();
        let task = engine.spawn(cancel.clone());
        RunningEngine { id: id.to_string(), cancel, task, status, _reflector: reflector }
    }

    /// An engine as a fleetd without a full view runs it (`Engine::with_own_views`).
    fn start_on_own_views(reg: &Registry, id: &str, eiv: Duration) -> RunningEngine {
        let config = EngineConfig {
            machine_id: id.to_string(),
            reconcile_interval: eiv,
            disable_engine: false,
            rebalance: false,
        };
        let engine = Engine::with_own_views(fleet_registry::SharedFullView::new(reg), config);
        let status = engine.status();
        let cancel = CancellationToken::new();
        let task = engine.spawn(cancel.clone());
        // A view nobody reads, for the struct's sake: the engine keeps its own.
        let idle = Reflector::start_engine_keys(reg);
        RunningEngine { id: id.to_string(), cancel, task, status, _reflector: idle }
    }

    fn leading(&self) -> bool {
        self.status.borrow().leading
    }

    /// Cancels the engine and waits for it to finish resigning.
    async fn stop(self) {
        self.cancel.cancel();
        timeout(WAIT, self.task).await.expect("engine stops promptly").expect("engine task does not panic");
    }
}

/// Waits until `f` holds for an engine's status.
async fn wait_status(engine: &RunningEngine, what: &str, f: impl Fn(&EngineStatus) -> bool) {
    let mut rx = engine.status.clone();
    let ok = matches!(timeout(WAIT, rx.wait_for(|s| f(s))).await, Ok(Ok(_)));
    assert!(ok, "waited {WAIT:?} for {what} of engine {}; last: {:?}", engine.id, *engine.status.borrow());
}

/// Waits until `engine` has applied `decisions` and then run a pass with nothing left to do. The targets can be
/// visible before the pass that wrote the last of them has counted it (and a pass that ran before that write may
/// have planned nothing): the count, then such a pass.
async fn wait_converged(engine: &RunningEngine, decisions: u64) {
    wait_status(engine, &format!("{decisions} decisions applied, then a pass with nothing left to do"), |s| {
        s.applied >= decisions && s.last_pass.as_ref().is_some_and(|p| p.planned == 0)
    })
    .await;
}

/// A machine registered under its own presence lease.
struct Machine {
    lease: LeaseKeeper,
}

async fn register(reg: &Registry, id: &str, metadata: &[(&str, &str)]) -> Machine {
    let lease = LeaseKeeper::grant(reg, Duration::from_secs(10)).await.expect("grant machine lease");
    let state = MachineState {
        id: id.to_string(),
        metadata: metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    reg.register_machine(&state, lease.id()).await.expect("register machine");
    Machine { lease }
}

async fn create(reg: &Registry, name: &str, text: &str, desired: JobState) -> i64 {
    let hash = UnitHash::of(text).to_hex();
    let written = ApiWriter::new(reg.clone())
        .put_unit(&PutUnit { name, text, hash: &hash, desired, reschedule: false, no_restart: false })
        .await
        .expect("put unit");
    written.revision().expect("unit written")
}

const SLEEPER: &str = "[Service]\nExecStart=/bin/sleep infinity\n";

async fn observer(reg: &Registry) -> Reflector {
    let r = Reflector::start(reg);
    r.wait_connected(WAIT).await.expect("observer connects");
    r
}

/// Unit name → target, for units with a target.
fn targets(s: &Snapshot) -> BTreeMap<String, String> {
    s.units().filter_map(|u| u.target.map(|t| (u.name.to_string(), t.to_string()))).collect()
}

/// Number of scheduled units per machine.
fn loads(s: &Snapshot) -> BTreeMap<String, usize> {
    let mut loads = BTreeMap::new();
    for machine in targets(s).into_values() {
        *loads.entry(machine).or_default() += 1;
    }
    loads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_elect_exactly_one_leader() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-elect").await;
    let view = observer(&reg).await;
    let a = RunningEngine::start(&reg, "ma", EIV).await;
    let b = RunningEngine::start(&reg, "mb", EIV).await;

    let leader = view.wait_for(WAIT, "an engine leader", |s| s.leader().map(str::to_string)).await.unwrap();
    let (winner, loser) = if leader == "ma" { (&a, &b) } else { (&b, &a) };
    wait_status(winner, "leadership", |s| s.leading).await;
    wait_status(loser, "knowing the leader", |s| s.leader.as_deref() == Some(leader.as_str())).await;
    assert!(!loser.leading(), "{} must follow {leader}", loser.id);
    assert_eq!(view.snapshot().engine_version(), Some(1), "the first engine sets the cluster engine version");

    // Events keep both engines ticking; leadership does not move and only the leader reconciles.
    let _m = register(&reg, "m1", &[]).await;
    let rev = create(&reg, "a.service", SLEEPER, JobState::Launched).await;
    view.wait_for(WAIT, "a.service scheduled", |s| targets(s).get("a.service").cloned()).await.unwrap();
    view.wait_for_revision(rev, WAIT).await.unwrap();
    assert!(winner.leading() && !loser.leading());
    assert_eq!(loser.status.borrow().passes, 0, "a follower never reconciles");
    assert_eq!(view.snapshot().leader(), Some(leader.as_str()));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_are_scheduled_least_loaded_onto_registered_machines() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-schedule").await;
    let view = observer(&reg).await;
    let _machines = [
        register(&reg, "m1", &[]).await,
        register(&reg, "m2", &[]).await,
        register(&reg, "m3", &[("disk", "ssd")]).await,
    ];
    let engine = RunningEngine::start(&reg, "m1", EIV).await;

    for i in 1..=6 {
        create(&reg, &format!("hello@{i}.service"), SLEEPER, JobState::Launched).await;
    }
    create(&reg, "loaded.service", SLEEPER, JobState::Loaded).await;
    create(&reg, "off.service", SLEEPER, JobState::Inactive).await;
    create(
        &reg,
        "ssd.service",
        "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nMachineMetadata=disk=ssd\n",
        JobState::Launched,
    )
    .await;
    let placed =
        view.wait_for(WAIT, "8 units scheduled", |s| (targets(s).len() == 8).then(|| targets(s))).await.unwrap();
    assert!(!placed.contains_key("off.service"), "inactive units are not scheduled");
    assert_eq!(placed["ssd.service"], "m3", "metadata constraint honoured");
    let s = view.snapshot();
    let loads = loads(&s);
    assert!(loads.values().all(|&n| n == 8 / 3 || n == 8 / 3 + 1), "least-loaded spreads evenly: {loads:?}");
    wait_converged(&engine, 8).await;
    assert_eq!(engine.status.borrow().applied, 8, "every unit was scheduled exactly once");
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_leader_plans_again_only_when_the_view_changes() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-idle").await;
    let view = observer(&reg).await;
    let _machines = [register(&reg, "m1", &[]).await, register(&reg, "m2", &[]).await];
    let engine = RunningEngine::start(&reg, "m1", EIV).await;
    for i in 1..=4 {
        create(&reg, &format!("idle@{i}.service"), SLEEPER, JobState::Launched).await;
    }
    view.wait_for(WAIT, "4 units scheduled", |s| (targets(s).len() == 4).then_some(())).await.unwrap();
    wait_converged(&engine, 4).await;
    // Nothing changes for three resync periods: a pass would decide nothing, so none runs (each one builds the
    // scheduling input of every unit again: heap churn on an idle leader).
    let passes = engine.status.borrow().passes;
    let mut rx = engine.status.clone();
    let again = timeout(3 * EIV, rx.wait_for(|s| s.passes > passes)).await;
    assert!(again.is_err(), "an idle leader ran a pass on an unchanged view: {:?}", *engine.status.borrow());
    // A change to what the scheduler reads wakes it at once.
    create(&reg, "idle@5.service", SLEEPER, JobState::Launched).await;
    view.wait_for(WAIT, "the new unit scheduled", |s| (targets(s).len() == 5).then_some(())).await.unwrap();
    // The target is visible before the pass that wrote it has counted it: wait for the count.
    wait_status(&engine, "the fifth decision applied", |s| s.applied >= 5).await;
    assert_eq!(engine.status.borrow().applied, 5, "every unit was scheduled exactly once");
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_of_a_machine_whose_lease_is_revoked_are_rescheduled() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-loss").await;
    let view = observer(&reg).await;
    let m1 = register(&reg, "m1", &[]).await;
    let _m2 = register(&reg, "m2", &[]).await;
    let engine = RunningEngine::start(&reg, "m2", EIV).await;
    for i in 1..=4 {
        create(&reg, &format!("u{i}.service"), SLEEPER, JobState::Launched).await;
    }
    let before =
        view.wait_for(WAIT, "4 units scheduled", |s| (targets(s).len() == 4).then(|| targets(s))).await.unwrap();
    let on_m1 = before.values().filter(|m| *m == "m1").count();
    assert_eq!(on_m1, 2, "spread over both machines: {before:?}");

    let lost = Instant::now();
    m1.lease.revoke().await.unwrap();
    let after = view
        .wait_for(WAIT, "all units on m2", |s| {
            let t = targets(s);
            (s.machine("m1").is_none() && t.len() == 4 && t.values().all(|m| m == "m2")).then_some(t)
        })
        .await
        .unwrap();
    eprintln!("units of the lost machine rescheduled {:?} after its lease was revoked", lost.elapsed());
    assert_eq!(after.len(), 4);
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_leader_hands_over_without_waiting_for_lease_expiry() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-handover").await;
    let view = observer(&reg).await;
    // EIV 60 s: the engine lease's TTL is 5 min and no periodic resync comes within the test's waits (10 s), so a
    // hand-over seen at all proves the old leader resigned; expiry cannot be what ended its term.
    let eiv = Duration::from_secs(60);
    assert!(eiv * 5 > WAIT * 3, "the lease must outlive every wait of this test");
    let a = RunningEngine::start(&reg, "ma", eiv).await;
    let b = RunningEngine::start(&reg, "mb", eiv).await;
    let leader = view.wait_for(WAIT, "an engine leader", |s| s.leader().map(str::to_string)).await.unwrap();
    let (old, new) = if leader == "ma" { (a, b) } else { (b, a) };
    wait_status(&old, "leadership", |s| s.leading).await;

    let _m = register(&reg, "m1", &[]).await;
    old.stop().await;
    wait_status(
        &new,
        "leadership after hand-over (the old leader's lease is still valid: it must have resigned)",
        |s| s.leading,
    )
    .await;
    assert_eq!(view.wait_for(WAIT, "new leader visible", |s| s.leader().map(str::to_string)).await.unwrap(), new.id);

    // The new leader schedules.
    create(&reg, "after.service", SLEEPER, JobState::Launched).await;
    view.wait_for(WAIT, "after.service scheduled", |s| targets(s).get("after.service").cloned()).await.unwrap();
    new.stop().await;
    view.wait_for(WAIT, "no leader after the last engine stops", |s| s.leader().is_none().then_some(())).await.unwrap();
}

/// Issue 35: engines of fleetds without a full view follow the engine's keys alone, and the one that wins lists the
/// whole registry before it plans: it schedules, and so does the next one after a hand-over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_on_views_of_their_own_elect_and_the_leader_schedules_on_a_full_one() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-own-views").await;
    let view = observer(&reg).await;
    let eiv = Duration::from_secs(60);
    let _m = register(&reg, "m1", &[]).await;
    create(&reg, "before.service", SLEEPER, JobState::Launched).await;
    let a = RunningEngine::start_on_own_views(&reg, "ma", eiv);
    let b = RunningEngine::start_on_own_views(&reg, "mb", eiv);
    let leader = view.wait_for(WAIT, "an engine leader", |s| s.leader().map(str::to_string)).await.unwrap();
    view.wait_for(WAIT, "before.service scheduled by the first leader", |s| targets(s).get("before.service").cloned())
        .await
        .unwrap();
    let (old, new) = if leader == "ma" { (a, b) } else { (b, a) };
    assert!(!new.leading(), "one leader");
    old.stop().await;
    wait_status(&new, "leadership after hand-over", |s| s.leading).await;
    create(&reg, "after.service", SLEEPER, JobState::Launched).await;
    view.wait_for(WAIT, "after.service scheduled by the new leader", |s| targets(s).get("after.service").cloned())
        .await
        .unwrap();
    new.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_burst_of_100_units_is_scheduled_by_events_not_the_resync() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-burst").await;
    let view = observer(&reg).await;
    let _machines = [register(&reg, "m1", &[]).await, register(&reg, "m2", &[]).await, register(&reg, "m3", &[]).await];
    // EIV 60 s: no periodic resync comes within the test's waits, so every placement below comes from the engine
    // waking on the registry's change events.
    let engine = RunningEngine::start(&reg, "m1", Duration::from_secs(60)).await;
    wait_status(&engine, "leadership", |s| s.leading).await;

    let template = "[Unit]\nDescription=burst %i\n\n[Service]\nExecStart=/bin/sleep infinity\n\n[X-Fleet]\nConflicts=other@%i.service\n";
    let writes: Vec<_> = (0..100)
        .map(|i| {
            let reg = reg.clone();
            tokio::spawn(async move { create(&reg, &format!("burst@{i}.service"), template, JobState::Launched).await })
        })
        .collect();
    for w in writes {
        w.await.unwrap();
    }
    view.wait_for(WAIT, "100 units scheduled", |s| (targets(s).len() == 100).then_some(())).await.unwrap();
    let loads = loads(&view.snapshot());
    assert!(loads.values().all(|&n| n == 33 || n == 34), "spread evenly: {loads:?}");
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_destroyed_and_replaced_units_are_garbage_collected() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-gc").await;
    let view = observer(&reg).await;
    let _m = register(&reg, "m1", &[]).await;
    let engine = RunningEngine::start(&reg, "m1", EIV).await;

    let v1 = "[Service]\nExecStart=/bin/sleep 1\n";
    let v2 = "[Service]\nExecStart=/bin/sleep 2\n";
    let v3 = "[Service]\nExecStart=/bin/sleep 3\n";
    let (h1, h2, h3) = (UnitHash::of(v1).to_hex(), UnitHash::of(v2).to_hex(), UnitHash::of(v3).to_hex());
    create(&reg, "gone.service", v1, JobState::Launched).await;
    create(&reg, "kept.service", v2, JobState::Launched).await;
    view.wait_for(WAIT, "both scheduled", |s| (targets(s).len() == 2).then_some(())).await.unwrap();

    ApiWriter::new(reg.clone()).destroy_unit("gone.service").await.unwrap();
    // Replaced: v2 stays as the previous hash of v3 (rollback), so only v1 is garbage.
    create(&reg, "kept.service", v3, JobState::Launched).await;
    // The engine may collect v1 before the replacement's write reaches the view: wait for both.
    view.wait_for(WAIT, "the destroyed unit's body collected and the replacement visible", |s| {
        (s.body(&h1).is_none() && s.unit("kept.service").is_some_and(|u| u.hash == h3.as_str())).then_some(())
    })
    .await
    .unwrap();
    let s = view.snapshot();
    assert!(s.body(&h2).is_some(), "the previous body of a replaced unit is kept for rollback");
    assert!(s.body(&h3).is_some());
    engine.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_engine_returns_at_once_and_never_leads() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-disabled").await;
    let reflector = Reflector::start(&reg);
    let config =
        EngineConfig { machine_id: "m1".into(), reconcile_interval: EIV, disable_engine: true, rebalance: false };
    let engine = Engine::new(reg.clone(), reflector.subscribe(), config);
    let status = engine.status();
    timeout(WAIT, engine.run(CancellationToken::new())).await.expect("a disabled engine returns at once");
    assert!(!status.borrow().leading);
    assert_eq!(reg.read_snapshot().await.unwrap().leader(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_engine_lease_is_lost_steps_down_and_leadership_recovers() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-lease-loss").await;
    let view = observer(&reg).await;
    let a = RunningEngine::start(&reg, "ma", EIV).await;
    let b = RunningEngine::start(&reg, "mb", EIV).await;
    let record = view.wait_for(WAIT, "an engine leader", |s| s.leader_record().cloned()).await.unwrap();
    let (old, other) = if record.machine == "ma" { (&a, &b) } else { (&b, &a) };
    wait_status(old, "leadership", |s| s.leading).await;

    // Revoking the lease behind the engine's back is what etcd does when renewals stop arriving.
    reg.client().lease_revoke(record.lease).await.unwrap();
    wait_status(old, "stepping down", |s| !s.leading).await;
    let new = view
        .wait_for(WAIT, "a leader on a new lease", |s| s.leader_record().filter(|r| r.lease != record.lease).cloned())
        .await
        .unwrap();
    let (leader, follower) = if new.machine == old.id { (old, other) } else { (other, old) };
    wait_status(leader, "leadership on the new lease", |s| s.leading).await;
    assert!(!follower.leading(), "exactly one leader after recovery");

    let _m = register(&reg, "m1", &[]).await;
    create(&reg, "after.service", SLEEPER, JobState::Launched).await;
    view.wait_for(WAIT, "after.service scheduled", |s| targets(s).get("after.service").cloned()).await.unwrap();
    a.stop().await;
    b.stop().await;
}

/// Layout 2 (issue 35, docs/lab/scoped-views.md): once every present machine's fleetd runs layout 2, the leader
/// moves every unit and switches `P/version`; from then on its placements are schedule entries (no `target` key),
/// a stop written the layout-1 way reaches the entry, a global unit has an entry on every machine, and a machine
/// that goes away loses its scheduled units (they move) but keeps its global entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_running_layout_2_everywhere_is_switched_and_scheduled_by_entries() {
    init_logs();
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/engine-layout-2").await;
    assert_eq!(reg.ensure_layout_version().await.unwrap(), 1);
    let view = observer(&reg).await;
    let running = |id: &str| {
        let reg = reg.clone();
        let id = id.to_string();
        async move {
            let lease = LeaseKeeper::grant(&reg, Duration::from_secs(10)).await.unwrap();
            let state = MachineState { id, ..Default::default() };
            reg.register_machine_running(&state, lease.id(), &[1, 2]).await.unwrap();
            Machine { lease }
        }
    };
    let m1 = running("m1").await;
    // m2 runs layout 1 only: no switch while it is present.
    let old = register(&reg, "m2", &[]).await;
    for i in 1..=4 {
        create(&reg, &format!("u{i}.service"), SLEEPER, JobState::Launched).await;
    }
    create(&reg, "g.service", "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nGlobal=true\n", JobState::Launched).await;
    let engine = RunningEngine::start(&reg, "m1", EIV).await;
    view.wait_for(WAIT, "4 units scheduled", |s| (targets(s).len() == 4).then_some(())).await.unwrap();
    wait_converged(&engine, 4).await;
    assert_eq!(view.snapshot().layout_version(), Some(1), "m2 does not run layout 2");
    assert!(view.snapshot().unit_records().values().all(|r| r.entries().is_empty()), "layout 1: no entries");

    // m2 is upgraded (it registers again, running both).
    old.lease.revoke().await.unwrap();
    let m2 = running("m2").await;
    // The switch may come as soon as the old m2 is gone (a machine that left holds nothing back), before the new m2
    // registers; its global entry follows in the pass after it does.
    let s = view
        .wait_for(WAIT, "layout 2, every unit moved, g's entry on both machines", |s| {
            let moved = s.unit_records().values().all(|r| r.desired_key().is_none() && r.target_key().is_none());
            let g_entries = s.unit_record("g.service").map_or(0, |r| r.entries().len());
            (s.layout_version() == Some(2) && moved && targets(s).len() == 4 && g_entries == 2).then(|| s.clone())
        })
        .await
        .unwrap();
    let g = s.unit_record("g.service").unwrap();
    assert_eq!(g.entries().keys().map(|m| m.to_string()).collect::<Vec<_>>(), ["m1", "m2"], "a global entry each");
    assert!(g.entries().values().all(|e| e.global && e.desired == JobState::Launched));

    // A new unit is placed by an entry; a stop through the layout-1 `desired` key reaches its entry.
    create(&reg, "u5.service", SLEEPER, JobState::Launched).await;
    let placed = view
        .wait_for(WAIT, "u5 placed by an entry", |s| {
            let r = s.unit_record("u5.service")?;
            (r.target_key().is_none() && r.desired_key().is_none()).then(|| r.target().map(|t| t.to_string()))?
        })
        .await
        .unwrap();
    ApiWriter::new(reg.clone()).set_desired("u5.service", JobState::Loaded).await.unwrap();
    view.wait_for(WAIT, "u5's entry loaded, its desired key folded", |s| {
        let r = s.unit_record("u5.service")?;
        let e = r.entries().get(placed.as_str())?;
        (e.desired == JobState::Loaded && r.desired_key().is_none()).then_some(())
    })
    .await
    .unwrap();

    // m2 goes away: its scheduled units move to m1; its global entry stays for its return.
    m2.lease.revoke().await.unwrap();
    let s = view
        .wait_for(WAIT, "every unit on m1", |s| {
            let t = targets(s);
            (s.machine("m2").is_none() && t.len() == 5 && t.values().all(|m| m == "m1")).then(|| s.clone())
        })
        .await
        .unwrap();
    assert!(s.unit_records().values().all(|r| r.entries().iter().all(|(m, e)| &**m == "m1" || e.global)));
    assert!(s.unit_record("g.service").unwrap().entries().contains_key("m2"), "kept for m2's return");
    drop(m1);
    engine.stop().await;
}

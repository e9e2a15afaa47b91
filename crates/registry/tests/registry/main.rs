//! Registry against a real etcd: transactions, leases, leader election and the reflector's convergence after
//! bursts, compaction and etcd restarts. Waits are on the reflector's change notifications with deadlines, never
//! sleeps.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fleet_core::model::{JobState, MachineState, PublishedState};
use fleet_registry::{
    AgentSession, ApiWriter, Campaign, EngineVersionCheck, LeaderSession, LeaseKeeper, LeaseStatus, PlacementWrite,
    PutUnit, Reflector, Registration, Registry, RegistryError, Snapshot, UnitWrite,
};
use fleet_testkit::TestEtcd;
use sha1::{Digest, Sha1};

const WAIT: Duration = Duration::from_secs(10);

fn hash(text: &str) -> String {
    hex::encode(Sha1::digest(text.as_bytes()))
}

/// A unit version: text and hash, owned.
struct Version {
    text: String,
    hash: String,
}

fn version(text: &str) -> Version {
    Version { text: text.to_string(), hash: hash(text) }
}

fn put<'a>(name: &'a str, v: &'a Version, desired: JobState) -> PutUnit<'a> {
    PutUnit { name, text: &v.text, hash: &v.hash, desired, reschedule: false, no_restart: false }
}

/// The API's writes.
fn api(reg: &Registry) -> ApiWriter {
    ApiWriter::new(reg.clone())
}

/// `machine`'s agent writes, bound to `lease`.
fn agent(reg: &Registry, machine: &str, lease: i64) -> AgentSession {
    AgentSession::new(reg.clone(), machine, lease).expect("a valid machine ID")
}

/// Wins the engine election as `machine` on a fresh lease; the lease is returned to be kept alive.
async fn lead(reg: &Registry, machine: &str) -> (LeaderSession, LeaseKeeper) {
    let lease = LeaseKeeper::grant(reg, Duration::from_secs(30)).await.unwrap();
    (won(reg.campaign(machine, lease.id()).await.unwrap()), lease)
}

/// The session of a won campaign.
fn won(campaign: Campaign) -> LeaderSession {
    match campaign {
        Campaign::Leader(session) => session,
        Campaign::Follower { leader } => panic!("the campaign was lost to {leader:?}"),
    }
}

/// The engine's garbage collection: every body its fresh read of the registry shows unreferenced.
async fn collect_garbage(leader: &LeaderSession) -> usize {
    let snapshot = leader.read_snapshot().await.unwrap();
    leader.delete_bodies(&snapshot.unreferenced_bodies()).await.unwrap()
}

fn schedule<'a>(unit: &'a str, machine: &'a str) -> PlacementWrite<'a> {
    PlacementWrite::Schedule { unit, machine }
}

fn unschedule<'a>(unit: &'a str, machine: &'a str) -> PlacementWrite<'a> {
    PlacementWrite::Unschedule { unit, machine }
}

async fn connected(reg: &Registry) -> Reflector {
    let r = Reflector::start(reg);
    r.wait_connected(WAIT).await.expect("reflector connects");
    r
}

fn machine(id: &str) -> MachineState {
    MachineState {
        id: id.to_string(),
        public_ip: "10.0.0.1".into(),
        metadata: [("role".to_string(), "web".to_string())].into(),
        version: "v0.1.0".into(),
        disable_engine: false,
        cordoned: false,
        load_fault: None,
    }
}

fn state(unit: &str, machine: &str, hash: &str) -> PublishedState {
    PublishedState {
        name: unit.into(),
        machine_id: machine.into(),
        hash: hash.into(),
        load_state: "loaded".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        restarts: None,
        health: None,
        launched: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_replace_destroy_and_collect_bodies() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/units").await;
    assert_eq!(reg.ensure_layout_version().await.unwrap(), 1);
    let refl = connected(&reg).await;
    let (v1, v2, v3) =
        (version("[Service]\nExecStart=/bin/true\n"), version("[Service]\nExecStart=/bin/false\n"), version(""));

    let rev = api(&reg).create_unit(&put("a.service", &v1, JobState::Loaded)).await.unwrap();
    let err = api(&reg).create_unit(&put("a.service", &v2, JobState::Loaded)).await.unwrap_err();
    assert!(matches!(&err, RegistryError::UnitExists { hash, .. } if *hash == v1.hash), "{err}");
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    let a = snap.unit("a.service").unwrap();
    assert_eq!(
        (a.hash, a.previous_hash, a.desired, &**a.body),
        (v1.hash.as_str(), None, JobState::Loaded, v1.text.as_str())
    );

    assert_eq!(api(&reg).put_unit(&put("a.service", &v1, JobState::Launched)).await.unwrap(), UnitWrite::Unchanged);
    let w = api(&reg).put_unit(&put("a.service", &v2, JobState::Inactive)).await.unwrap();
    assert!(matches!(&w, UnitWrite::Replaced { previous: Some(p), .. } if *p == v1.hash), "{w:?}");
    let w = api(&reg).put_unit(&put("a.service", &v3, JobState::Inactive)).await.unwrap();
    let snap = refl.wait_for_revision(w.revision().unwrap(), WAIT).await.unwrap();
    let a = snap.unit("a.service").unwrap();
    assert_eq!(
        (a.hash, a.previous_hash),
        (v3.hash.as_str(), Some(v2.hash.as_str())),
        "previous hash kept for rollback"
    );

    let history: Vec<&str> =
        snap.unit_record("a.service").unwrap().object().unwrap().history.iter().map(|v| &*v.hash).collect();
    assert_eq!(history, [&v3.hash, &v2.hash, &v1.hash], "every version kept, newest first");

    // b shares v3's body: destroying a must not collect it.
    api(&reg).create_unit(&put("b.service", &v3, JobState::Inactive)).await.unwrap();
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.unreferenced_bodies().is_empty(), "a's history keeps v1 and v2: {:?}", snap.unreferenced_bodies());

    let destroyed = api(&reg).destroy_unit("a.service").await.unwrap();
    assert_eq!(*destroyed.object.unwrap().hash, *v3.hash);
    assert!(matches!(api(&reg).destroy_unit("a.service").await.unwrap_err(), RegistryError::UnitNotFound { .. }));
    assert!(matches!(
        api(&reg).set_desired("a.service", JobState::Loaded).await.unwrap_err(),
        RegistryError::UnitNotFound { .. }
    ));
    let (engine, _lease) = lead(&reg, "m1").await;
    assert_eq!(collect_garbage(&engine).await, 2, "a's older versions v1 and v2 are unreferenced now");
    let snap = refl.sync(WAIT).await.unwrap();
    let bodies: Vec<&str> = snap.bodies().keys().map(|k| &**k).collect();
    assert_eq!(bodies, [&v3.hash]);
    assert!(snap.unit("a.service").is_none() && snap.unit_record("a.service").is_none());

    api(&reg).destroy_unit("b.service").await.unwrap();
    assert_eq!(collect_garbage(&engine).await, 1);
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.bodies().is_empty() && snap.unit_records().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_spares_a_body_that_regained_a_reference() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/gc").await;
    let v1 = version("[Unit]\nDescription=x\n");
    api(&reg).create_unit(&put("a.service", &v1, JobState::Inactive)).await.unwrap();
    api(&reg).destroy_unit("a.service").await.unwrap();
    let stale = reg.read_snapshot().await.unwrap().unreferenced_bodies();
    assert_eq!(stale.len(), 1);
    // A new unit refers to the body after GC chose it: the re-put in the creating txn must save it.
    api(&reg).create_unit(&put("b.service", &v1, JobState::Inactive)).await.unwrap();
    let (engine, _lease) = lead(&reg, "m1").await;
    assert_eq!(engine.delete_bodies(&stale).await.unwrap(), 0);
    let snap = reg.read_snapshot().await.unwrap();
    assert_eq!(snap.unit("b.service").map(|u| u.body.to_string()), Some(v1.text.clone()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_schedulers_exactly_one_wins() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/sched").await;
    let (engine, _lease) = lead(&reg, "m0").await;
    let v = version("[Service]\nExecStart=/bin/true\n");
    let placed = |write: PlacementWrite<'_>| {
        let engine = engine.clone();
        let (unit, machine, on) = match write {
            PlacementWrite::Schedule { unit, machine } => (unit.to_string(), machine.to_string(), true),
            PlacementWrite::Unschedule { unit, machine } | PlacementWrite::UnscheduleFromAbsent { unit, machine } => {
                (unit.to_string(), machine.to_string(), false)
            }
        };
        async move {
            let write = if on { schedule(&unit, &machine) } else { unschedule(&unit, &machine) };
            engine.placement(&write).await.unwrap().is_some()
        }
    };
    assert!(!placed(schedule("a.service", "m0")).await, "cannot schedule a unit that does not exist");
    api(&reg).create_unit(&put("a.service", &v, JobState::Launched)).await.unwrap();

    let attempts = (0..8).map(|i| {
        let attempt = placed(schedule("a.service", &format!("m{i}")));
        tokio::spawn(async move { (format!("m{i}"), attempt.await) })
    });
    let results: Vec<(String, bool)> =
        futures::future::join_all(attempts).await.into_iter().map(|r| r.unwrap()).collect();
    let winners: Vec<&String> = results.iter().filter(|(_, won)| *won).map(|(m, _)| m).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0].clone();
    let snap = reg.read_snapshot().await.unwrap();
    assert_eq!(snap.unit("a.service").unwrap().target, Some(winner.as_str()));

    let loser = if winner == "m0" { "m1" } else { "m0" };
    assert!(!placed(unschedule("a.service", loser)).await, "unschedule must name the current target");
    assert!(placed(unschedule("a.service", &winner)).await);
    assert!(!placed(unschedule("a.service", &winner)).await);
    assert!(placed(schedule("a.service", loser)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_presence_states_and_markers_vanish_with_the_lease() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/presence").await;
    let refl = connected(&reg).await;
    let v = version("[Service]\nExecStart=/bin/true\n");
    api(&reg).create_unit(&put("a.service", &v, JobState::Launched)).await.unwrap();
    api(&reg).set_metadata("m1", "role", "").await.unwrap();
    api(&reg).set_metadata("m1", "dc", "east").await.unwrap();

    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(2)).await.unwrap();
    assert_eq!(reg.register_machine(&machine("m1"), lease.id()).await.unwrap(), Registration::Created);
    let (engine, _engine_lease) = lead(&reg, "m9").await;
    assert!(engine.placement(&schedule("a.service", "m1")).await.unwrap().is_some());
    agent(&reg, "m1", lease.id()).publish_state(&state("a.service", "m1", &v.hash)).await.unwrap();
    agent(&reg, "m2", lease.id()).publish_state(&state("a.service", "m2", &v.hash)).await.unwrap();

    let snap = refl.wait_for(WAIT, "state of m1 and m2", |s| (s.unit_states().count() == 2).then_some(())).await;
    snap.unwrap();
    assert_eq!(refl.snapshot().current_state("a.service"), JobState::Loaded);
    assert!(agent(&reg, "m1", lease.id()).mark_launched("a.service", &v.hash).await.unwrap());
    refl.wait_for(WAIT, "a launched", |s| (s.current_state("a.service") == JobState::Launched).then_some(()))
        .await
        .unwrap();
    let m = refl.snapshot().machine("m1").unwrap();
    assert_eq!(m.metadata, [("dc".to_string(), "east".to_string())].into(), "dynamic merged, tombstone hides role");

    // Removing m1's state leaves m2's (B7).
    agent(&reg, "m1", 0).remove_state("a.service").await.unwrap();
    let s = refl.sync(WAIT).await.unwrap();
    let left: Vec<String> = s.unit_states().map(|u| u.machine_id).collect();
    assert_eq!(left, ["m2"]);
    assert_eq!(s.current_state("a.service"), JobState::Inactive, "no state from the target machine");
    assert!(
        agent(&reg, "m1", lease.id()).publish_state(&state("a.service", "m1", "")).await.is_err(),
        "state needs a hash"
    );

    // Stop keeping the lease alive: everything bound to it expires by itself.
    drop(lease);
    refl.wait_for(WAIT, "m1 presence, states and marker to expire", |s| {
        let gone = s.machine("m1").is_none()
            && s.unit_states().count() == 0
            && s.unit_record("a.service").is_some_and(|u| u.launched_on().next().is_none());
        gone.then_some(())
    })
    .await
    .unwrap();
    let s = refl.snapshot();
    assert_eq!(s.machine_records()["m1"].metadata.len(), 2, "dynamic metadata survives the machine");
    assert_eq!(s.unit("a.service").unwrap().target, Some("m1"), "the schedule is the engine's to undo");
    assert!(
        !agent(&reg, "m1", 0).mark_launched("nope.service", &v.hash).await.unwrap(),
        "no marker for a missing unit"
    );
}

/// Issue 37: a machine's global units, published under its memory lease, outlive its presence (so a rollout begun
/// soon after it left counts it) and go with the memory lease; without one, nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_units_outlive_the_machine_until_its_memory_lease_ends() {
    use fleet_core::model::GlobalUnits;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/memory").await;
    let refl = connected(&reg).await;
    let presence = LeaseKeeper::grant(&reg, Duration::from_secs(2)).await.unwrap();
    let memory = LeaseKeeper::grant(&reg, Duration::from_secs(4)).await.unwrap();
    reg.register_machine(&machine("m1"), presence.id()).await.unwrap();
    let units = GlobalUnits { units: ["g.service".to_string()].into() };
    agent(&reg, "m2", presence.id()).put_global_units(&units).await.unwrap();
    let session = agent(&reg, "m1", presence.id()).with_memory(memory.id());
    session.put_global_units(&units).await.unwrap();
    refl.wait_for(WAIT, "m1's global units", |s| s.machine_records().get("m1")?.global_units.clone()).await.unwrap();
    assert!(!refl.snapshot().machine_records().contains_key("m2"), "no memory lease, nothing written");
    drop(presence);
    let s = refl.wait_for(WAIT, "m1's presence to expire", |s| s.machine("m1").is_none().then_some(())).await;
    s.unwrap();
    let remembered = refl.snapshot().machine_records().get("m1").and_then(|r| r.global_units.clone());
    assert_eq!(remembered, Some(units), "remembered after the machine left");
    drop(memory);
    refl.wait_for(WAIT, "m1 forgotten with its memory lease", |s| {
        (!s.machine_records().contains_key("m1")).then_some(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_keeper_reports_revocation_and_revoke_deletes_keys() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/lease").await;
    let refl = connected(&reg).await;

    let a = LeaseKeeper::grant(&reg, Duration::from_secs(2)).await.unwrap();
    reg.register_machine(&machine("m1"), a.id()).await.unwrap();
    // Longer than the TTL: keep-alives must be holding it.
    tokio::time::timeout(Duration::from_secs(3), a.lost()).await.expect_err("lease must stay alive");
    assert!(a.is_alive());
    assert!(refl.snapshot().machine("m1").is_some());

    reg.client().lease_revoke(a.id()).await.unwrap();
    let reason = tokio::time::timeout(WAIT, a.lost()).await.expect("loss reported");
    assert!(reason.contains("expired or revoked"), "{reason}");
    assert!(matches!(*a.status().borrow(), LeaseStatus::Lost { .. }));

    let b = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    reg.register_machine(&machine("m2"), b.id()).await.unwrap();
    refl.wait_for(WAIT, "m2 present, m1 gone", |s| {
        (s.machine("m2").is_some() && s.machine("m1").is_none()).then_some(())
    })
    .await
    .unwrap();
    b.revoke().await.unwrap();
    refl.wait_for(WAIT, "m2 gone after revoke", |s| s.machine("m2").is_none().then_some(())).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_machine_id_is_rejected() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/dup").await;
    let first = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    let second = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();

    assert_eq!(reg.register_machine(&machine("m1"), first.id()).await.unwrap(), Registration::Created);
    let mut changed = machine("m1");
    changed.public_ip = "10.0.0.9".into();
    assert_eq!(reg.register_machine(&changed, first.id()).await.unwrap(), Registration::Refreshed);
    let err = reg.register_machine(&machine("m1"), second.id()).await.unwrap_err();
    assert!(matches!(err, RegistryError::DuplicateMachine { lease, .. } if lease == first.id()), "{err}");
    assert!(err.to_string().contains("already registered"), "{err}");
    assert!(!reg.unregister_machine("m1", second.id()).await.unwrap(), "the duplicate cannot remove the original");
    assert_eq!(reg.read_snapshot().await.unwrap().machine("m1").unwrap().public_ip, "10.0.0.9");

    assert!(reg.unregister_machine("m1", first.id()).await.unwrap());
    assert_eq!(reg.register_machine(&machine("m1"), second.id()).await.unwrap(), Registration::Created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_with_takeover_after_resign_and_expiry() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/leader").await;
    let refl = connected(&reg).await;
    let a = LeaseKeeper::grant(&reg, Duration::from_secs(2)).await.unwrap();
    let b = LeaseKeeper::grant(&reg, Duration::from_secs(2)).await.unwrap();

    let (ra, rb) = tokio::join!(reg.campaign("ma", a.id()), reg.campaign("mb", b.id()));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let (leader, follower, leader_lease, follower_lease) = match (&ra, &rb) {
        (Campaign::Leader(_), Campaign::Follower { leader }) if leader == "ma" => ("ma", "mb", a, b),
        (Campaign::Follower { leader }, Campaign::Leader(_)) if leader == "mb" => ("mb", "ma", b, a),
        other => panic!("exactly one leader expected: {other:?}"),
    };
    let again = reg.campaign(leader, leader_lease.id()).await.unwrap();
    assert!(matches!(again, Campaign::Leader(_)), "idempotent for the holder: {again:?}");
    refl.wait_for(WAIT, "leader visible", |s| (s.leader() == Some(leader)).then_some(())).await.unwrap();

    assert!(!reg.resign(follower, follower_lease.id()).await.unwrap(), "a follower cannot resign the leader");
    assert!(reg.resign(leader, leader_lease.id()).await.unwrap());
    let takeover = reg.campaign(follower, follower_lease.id()).await.unwrap();
    assert!(matches!(takeover, Campaign::Leader(_)), "takeover after resign: {takeover:?}");

    // The new leader dies without resigning: the old one takes over once the lease expires.
    refl.wait_for(WAIT, "new leader visible", |s| (s.leader() == Some(follower)).then_some(())).await.unwrap();
    drop(follower_lease);
    refl.wait_for(WAIT, "leader lease to expire", |s| s.leader().is_none().then_some(())).await.unwrap();
    assert!(matches!(reg.campaign(leader, leader_lease.id()).await.unwrap(), Campaign::Leader(_)));

    assert_eq!(reg.check_engine_version(1).await.unwrap(), EngineVersionCheck::Upgraded { from: None });
    assert_eq!(reg.check_engine_version(1).await.unwrap(), EngineVersionCheck::Current);
    assert_eq!(reg.check_engine_version(2).await.unwrap(), EngineVersionCheck::Upgraded { from: Some(1) });
    assert_eq!(reg.check_engine_version(1).await.unwrap(), EngineVersionCheck::Newer(2));
}

/// Keys only engines and fleetds write, written by hand or by a hostile client (issue 36): a leader key bound to
/// no lease is no leader and is campaigned over; an engine version or layout version that is no number is raised
/// or read past. None of them keeps an engine from leading or a fleetd from starting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_leader_engine_version_and_layout_keys_keep_no_engine_from_leading() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/hostile").await;
    let refl = connected(&reg).await;
    // Written as a hostile client would: straight through etcd, past every typed writer.
    let mut kv = reg.client().kv_client();
    let keys = reg.keys().clone();

    kv.put(keys.layout_version(), "{\"layout\":\"two\"}", None).await.unwrap();
    assert_eq!(reg.ensure_layout_version().await.unwrap(), 1, "read as this layout");

    kv.put(keys.engine_version(), "not a version", None).await.unwrap();
    assert_eq!(reg.check_engine_version(1).await.unwrap(), EngineVersionCheck::Upgraded { from: None });
    assert_eq!(reg.check_engine_version(1).await.unwrap(), EngineVersionCheck::Current);

    // A leader key without a lease never expires: the snapshot reads no leader, and a campaign takes it over.
    kv.put(keys.engine_leader(), "hostile", None).await.unwrap();
    let rev = kv.get(keys.engine_leader(), None).await.unwrap().header().unwrap().revision();
    let seen = refl.wait_for_revision(rev, WAIT).await.unwrap();
    assert_eq!(seen.leader(), None, "a leader key bound to no lease is no leader");
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    won(reg.campaign("m1", lease.id()).await.unwrap());
    refl.wait_for(WAIT, "m1 to lead", |s| (s.leader() == Some("m1")).then_some(())).await.unwrap();
    // A key bound to a lease (a live engine's) is not taken over.
    let other = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    let lost = reg.campaign("m2", other.id()).await.unwrap();
    assert!(matches!(&lost, Campaign::Follower { leader } if leader == "m1"), "{lost:?}");
    lease.revoke().await.unwrap();
    other.revoke().await.unwrap();
}

fn unit_names(s: &Snapshot) -> BTreeSet<String> {
    s.units().map(|u| u.name.to_string()).collect()
}

/// The reflector's view equals a fresh read of etcd (units, bodies, states, machines).
fn assert_same_view(reflected: &Snapshot, fresh: &Snapshot) {
    assert_eq!(reflected.unit_records(), fresh.unit_records());
    assert_eq!(reflected.bodies().keys().collect::<Vec<_>>(), fresh.bodies().keys().collect::<Vec<_>>());
    assert_eq!(reflected.state_records(), fresh.state_records());
    assert_eq!(reflected.machine_records(), fresh.machine_records());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_converges_after_a_burst_of_writes() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/burst").await;
    let refl = connected(&reg).await;
    let v = Arc::new(version("[Service]\nExecStart=/bin/sleep 100\n"));
    let writers = (0..4).map(|w| {
        let (reg, v) = (reg.clone(), v.clone());
        tokio::spawn(async move {
            for i in 0..100 {
                let name = format!("u{w}-{i}.service");
                api(&reg).create_unit(&put(&name, &v, JobState::Launched)).await.unwrap();
                if i % 3 == 0 {
                    api(&reg).set_desired(&name, JobState::Inactive).await.unwrap();
                }
                if i % 5 == 0 {
                    api(&reg).destroy_unit(&name).await.unwrap();
                }
            }
        })
    });
    for w in futures::future::join_all(writers).await {
        w.unwrap();
    }
    let snap = refl.sync(WAIT).await.unwrap();
    assert_eq!(unit_names(&snap).len(), 4 * 80);
    assert_eq!(snap.units().filter(|u| u.desired == JobState::Inactive).count(), 4 * (34 - 7));
    assert_same_view(&snap, &reg.read_snapshot().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_relists_after_compaction() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/compact").await;
    let v = version("[Service]\nExecStart=/bin/true\n");
    api(&reg).create_unit(&put("gone.service", &v, JobState::Inactive)).await.unwrap();
    let old = reg.read_snapshot().await.unwrap();
    // Changes the resumed watch would have to replay, then compact them away.
    api(&reg).destroy_unit("gone.service").await.unwrap();
    let rev = api(&reg).create_unit(&put("new.service", &v, JobState::Loaded)).await.unwrap();
    reg.client().compact(rev, None).await.unwrap();

    let refl = Reflector::resume(&reg, old);
    let snap = refl
        .wait_for(WAIT, "re-listed view", |s| {
            (s.is_connected() && s.revision() >= rev && s.unit_record("gone.service").is_none()).then(|| s.clone())
        })
        .await
        .unwrap();
    assert_eq!(unit_names(&snap), BTreeSet::from(["new.service".to_string()]));
    assert_same_view(&snap, &reg.read_snapshot().await.unwrap());

    // And the watch keeps working after the re-list.
    let rev = api(&reg).set_desired("new.service", JobState::Launched).await.unwrap();
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    assert_eq!(snap.unit("new.service").unwrap().desired, JobState::Launched);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_survives_an_etcd_restart() {
    let mut etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/restart").await;
    let refl = connected(&reg).await;
    let v = version("[Service]\nExecStart=/bin/true\n");
    api(&reg).create_unit(&put("before.service", &v, JobState::Loaded)).await.unwrap();
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(4)).await.unwrap();
    reg.register_machine(&machine("m1"), lease.id()).await.unwrap();
    refl.wait_for(WAIT, "before.service", |s| s.unit("before.service").map(|_| ())).await.unwrap();

    etcd.kill();
    refl.wait_for(WAIT, "view to notice etcd is gone", |s| (!s.is_connected()).then_some(())).await.unwrap();
    assert!(refl.snapshot().unit("before.service").is_some(), "last known state stays readable");
    assert!(api(&reg).create_unit(&put("x.service", &v, JobState::Loaded)).await.unwrap_err().is_transient());

    etcd.restart().await;
    let rev = loop {
        // The client reconnects on its own; the first attempts may still fail while it does.
        match api(&reg).create_unit(&put("after.service", &v, JobState::Launched)).await {
            Ok(rev) => break rev,
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("{e}"),
        }
    };
    let snap = refl
        .wait_for(WAIT, "view to reconnect and see after.service", |s| {
            (s.is_connected() && s.revision() >= rev).then(|| s.clone())
        })
        .await
        .unwrap();
    assert_eq!(unit_names(&snap), BTreeSet::from(["after.service".to_string(), "before.service".to_string()]));
    assert_same_view(&snap, &reg.read_snapshot().await.unwrap());

    // etcd keeps leases across its restart and the keeper re-opens its keep-alive stream: presence survives
    // longer than one TTL after the restart.
    let ttl = lease.ttl();
    tokio::time::timeout(ttl + Duration::from_secs(1), lease.lost()).await.expect_err("lease must survive");
    assert!(reg.read_snapshot().await.unwrap().machine("m1").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_units_destroyed_concurrently_leave_no_units_and_their_bodies_are_collected() {
    use futures::StreamExt;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/scale").await;
    let refl = connected(&reg).await;
    let versions: Arc<Vec<Version>> =
        Arc::new((0..10).map(|i| version(&format!("[Service]\nExecStart=/bin/sleep {i}\n"))).collect());
    let names: Vec<String> = (0..1000).map(|i| format!("hello@{i}.service")).collect();

    futures::stream::iter(names.iter().enumerate())
        .for_each_concurrent(16, |(i, name)| {
            let (reg, versions) = (reg.clone(), versions.clone());
            async move {
                api(&reg).create_unit(&put(name, &versions[i % 10], JobState::Launched)).await.unwrap();
            }
        })
        .await;
    let watched = refl.wait_for(WAIT, "1000 units", |s| (s.units().count() == 1000).then(|| s.clone())).await.unwrap();
    // More keys than one list page: a fresh list (paginated at one revision) must equal the watched view.
    let listed = Reflector::start(&reg).wait_connected(WAIT).await.unwrap();
    assert!(listed.unit_records().len() * 3 > fleet_registry::LIST_PAGE as usize);
    assert_same_view(&watched, &listed);

    futures::stream::iter(names.iter())
        .for_each_concurrent(16, |name| {
            let reg = reg.clone();
            async move {
                api(&reg).destroy_unit(name).await.unwrap();
            }
        })
        .await;
    let snap = refl.wait_for(WAIT, "no units", |s| s.unit_records().is_empty().then(|| s.clone())).await.unwrap();
    let (engine, _lease) = lead(&reg, "m1").await;
    assert_eq!(engine.delete_bodies(&snap.unreferenced_bodies()).await.unwrap(), 10);
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_reads_hold_only_their_part_and_derive_current_state() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/scoped").await;
    let (v1, v2) = (version("[Service]\nExecStart=/bin/true\n"), version("[Service]\nExecStart=/bin/false\n"));
    api(&reg).create_unit(&put("a.service", &v1, JobState::Launched)).await.unwrap();
    api(&reg).create_unit(&put("a.service.service", &v2, JobState::Loaded)).await.unwrap();
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    reg.register_machine(&machine("m1"), lease.id()).await.unwrap();
    let (engine, _engine_lease) = lead(&reg, "m9").await;
    assert!(engine.placement(&schedule("a.service", "m1")).await.unwrap().is_some());
    agent(&reg, "m1", lease.id()).publish_state(&state("a.service", "m1", &v1.hash)).await.unwrap();
    agent(&reg, "m1", lease.id()).publish_state(&state("a.service.service", "m1", &v2.hash)).await.unwrap();
    assert!(agent(&reg, "m1", lease.id()).mark_launched("a.service", &v1.hash).await.unwrap());

    let one = reg.read_unit_snapshot("a.service").await.unwrap();
    let names: Vec<&str> = one.units().map(|u| u.name).collect();
    assert_eq!(names, ["a.service"], "a.service.service shares the name prefix but not the unit's range");
    let a = one.unit("a.service").unwrap();
    assert_eq!((a.current, a.target, &**a.body), (JobState::Launched, Some("m1"), v1.text.as_str()));
    assert_eq!(one.bodies().len(), 1);
    assert_eq!(one.machines().count(), 0);
    assert!(reg.read_unit_snapshot("nope.service").await.unwrap().unit("nope.service").is_none());

    let states = reg.read_states_snapshot(Some("a.service")).await.unwrap();
    assert_eq!(states.unit_states().map(|s| s.name).collect::<Vec<_>>(), ["a.service"]);
    assert_eq!(reg.read_states_snapshot(None).await.unwrap().unit_states().count(), 2);
    let machines = reg.read_machines_snapshot().await.unwrap();
    assert_eq!(machines.machines().map(|m| m.id).collect::<Vec<_>>(), ["m1"]);
    assert_eq!(machines.units().count(), 0);
    lease.revoke().await.unwrap();
}

/// A revision with no event under the prefix (a write elsewhere, a failed compare-and-swap) is reached through a
/// watch progress notification, which the reflector confirms against etcd before taking its revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_without_events_under_the_prefix_are_reached_through_confirmed_progress() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/progress").await;
    let refl = connected(&reg).await;
    let v1 = version("[Service]\nExecStart=/bin/true\n");
    let rev = api(&reg).create_unit(&put("a.service", &v1, JobState::Loaded)).await.unwrap();
    assert!(refl.wait_for_revision(rev, WAIT).await.unwrap().unit("a.service").is_some());

    let mut raw = reg.client();
    let outside = raw.put("/elsewhere/key", "x", None).await.unwrap().header().unwrap().revision();
    let snap = refl.wait_for_revision(outside, WAIT).await.unwrap();
    assert!(snap.revision() >= outside && snap.unit("a.service").is_some());

    // A failed create writes nothing; its revision is etcd's current one.
    let err = api(&reg).create_unit(&put("a.service", &v1, JobState::Loaded)).await.unwrap_err();
    assert!(matches!(err, RegistryError::UnitExists { .. }), "{err}");
    let outside = raw.put("/elsewhere/key", "y", None).await.unwrap().header().unwrap().revision();
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.revision() >= outside);

    // Interleaved writes inside and outside the prefix: every wait sees its own write.
    for i in 0..50 {
        let name = format!("u{i}.service");
        let rev = api(&reg).create_unit(&put(&name, &v1, JobState::Inactive)).await.unwrap();
        raw.put(format!("/elsewhere/{i}"), "z", None).await.unwrap();
        let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
        assert!(snap.unit(&name).is_some(), "{name} missing at revision {}", snap.revision());
        if i % 10 == 0 {
            raw.delete(format!("/elsewhere/{i}"), None).await.unwrap();
            let snap = refl.sync(WAIT).await.unwrap();
            assert!(snap.unit(&name).is_some());
        }
    }
}

/// The engine's batched placement writes are all or nothing: one failing compare writes none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placements_in_one_transaction_are_all_or_nothing() {
    use fleet_registry::MAX_PLACEMENTS_PER_TXN;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/placements").await;
    let (engine, _lease) = lead(&reg, "m9").await;
    let refl = connected(&reg).await;
    let v = version("[Service]\nExecStart=/bin/true\n");
    for name in ["a.service", "b.service", "c.service"] {
        api(&reg).create_unit(&put(name, &v, JobState::Launched)).await.unwrap();
    }
    assert!(engine.placement(&schedule("b.service", "m2")).await.unwrap().is_some());
    let batch = [
        PlacementWrite::Schedule { unit: "a.service", machine: "m1" },
        PlacementWrite::Schedule { unit: "b.service", machine: "m1" },
        PlacementWrite::Schedule { unit: "c.service", machine: "m1" },
    ];
    assert_eq!(engine.placements(&batch).await.unwrap(), None, "b is already scheduled");
    let snap = refl.sync(WAIT).await.unwrap();
    let targets = |snap: &Snapshot| -> Vec<Option<String>> {
        ["a.service", "b.service", "c.service"]
            .iter()
            .map(|n| snap.unit(n).and_then(|u| u.target.map(str::to_string)))
            .collect()
    };
    assert_eq!(targets(&snap), [None, Some("m2".to_string()), None]);

    let batch = [
        PlacementWrite::Schedule { unit: "a.service", machine: "m1" },
        PlacementWrite::Unschedule { unit: "b.service", machine: "m2" },
        PlacementWrite::Schedule { unit: "c.service", machine: "m3" },
    ];
    let rev = engine.placements(&batch).await.unwrap().expect("every compare holds");
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    assert_eq!(targets(&snap), [Some("m1".to_string()), None, Some("m3".to_string())]);

    let names: Vec<String> = (0..=MAX_PLACEMENTS_PER_TXN).map(|i| format!("u{i}.service")).collect();
    let too_many: Vec<PlacementWrite<'_>> =
        names.iter().map(|n| PlacementWrite::Schedule { unit: n, machine: "m1" }).collect();
    let err = engine.placements(&too_many).await.unwrap_err();
    assert!(matches!(err, RegistryError::TooManyOps { .. }), "{err}");
}

/// An at-most-once unit leaves a lost machine only while that machine is still absent: once it registered again
/// (its agent may run the unit again), the engine's unschedule is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unscheduling_from_an_absent_machine_fails_once_it_is_back() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/absent").await;
    let (engine, _engine_lease) = lead(&reg, "m9").await;
    let refl = connected(&reg).await;
    let v = version("[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nAtMostOnce=true\n");
    api(&reg).create_unit(&put("a.service", &v, JobState::Launched)).await.unwrap();
    assert!(engine.placement(&schedule("a.service", "m1")).await.unwrap().is_some());
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    reg.register_machine(&machine("m1"), lease.id()).await.unwrap();
    let away = [PlacementWrite::UnscheduleFromAbsent { unit: "a.service", machine: "m1" }];
    assert_eq!(engine.placements(&away).await.unwrap(), None, "m1 is present: the unit stays");
    lease.revoke().await.unwrap();
    let rev = engine.placements(&away).await.unwrap().expect("m1 is gone: the unit leaves it");
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    assert_eq!(snap.unit("a.service").and_then(|u| u.target), None);
}

/// Agents write states and launched markers of many units in one transaction each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_state_and_marker_writes() {
    use fleet_registry::StateWrite;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/batched").await;
    let refl = connected(&reg).await;
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(30)).await.unwrap();
    let v = version("[Service]\nExecStart=/bin/true\n");
    for name in ["a.service", "b.service"] {
        api(&reg).create_unit(&put(name, &v, JobState::Launched)).await.unwrap();
    }
    let (a, b) = (state("a.service", "m1", &v.hash), state("b.service", "m1", &v.hash));
    let m1 = agent(&reg, "m1", lease.id());
    m1.write_states(&[StateWrite::Publish(&a), StateWrite::Publish(&b)]).await.unwrap();
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.state_record("a.service", "m1").is_some() && snap.state_record("b.service", "m1").is_some());
    let twice = [StateWrite::Publish(&a), StateWrite::Remove { unit: "a.service", machine: "m1" }];
    let err = m1.write_states(&twice).await.unwrap_err();
    assert!(matches!(err, RegistryError::DuplicateKey { .. }), "{err}");
    let elsewhere = [StateWrite::Remove { unit: "a.service", machine: "m2" }];
    let err = m1.write_states(&elsewhere).await.expect_err("m1's agent removed m2's state");
    assert!(matches!(err, RegistryError::NotOwnMachine { .. }), "m1's agent wrote m2's key: {err}");
    agent(&reg, "m1", lease.id())
        .write_states(&[StateWrite::Remove { unit: "a.service", machine: "m1" }])
        .await
        .unwrap();
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.state_record("a.service", "m1").is_none() && snap.state_record("b.service", "m1").is_some());

    let hash = v.hash.as_str();
    let with_missing = [("a.service", hash), ("gone.service", hash)];
    assert!(
        !agent(&reg, "m1", lease.id()).mark_launched_many(&with_missing).await.unwrap(),
        "gone.service does not exist"
    );
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.unit_record("a.service").unwrap().launched_on().next().is_none(), "all or nothing");
    assert!(
        agent(&reg, "m1", lease.id()).mark_launched_many(&[("a.service", hash), ("b.service", hash)]).await.unwrap()
    );
    let snap = refl.sync(WAIT).await.unwrap();
    assert_eq!(snap.unit_record("b.service").unwrap().launched("m1").map(|h| &**h), Some(hash));
    agent(&reg, "m1", 0).unmark_launched_many(&["a.service", "b.service"]).await.unwrap();
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.unit_record("a.service").unwrap().launched_on().next().is_none());
    assert!(snap.unit_record("b.service").unwrap().launched_on().next().is_none());
}

/// A rollout of several units with the same new content (instances of one template) is stored, and written back
/// when undone: etcd refuses a transaction that puts one key twice, so a shared body goes in once (the nemesis found
/// every rolling replace of two or more instances failing with `duplicate key given in txn request`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_of_instances_sharing_their_new_content_is_stored() {
    use fleet_core::rollout::{RolloutKind, RolloutProgress, RolloutSpec, RolloutState, RolloutUnit};
    use fleet_registry::RolloutBody;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/rollout-instances").await;
    let refl = connected(&reg).await;
    let (v1, v2) = (version("[Service]\nExecStart=/bin/true\n"), version("[Service]\nExecStart=/bin/false\n"));
    let names = ["web@1.service", "web@2.service", "web@3.service"];
    let mut rev = 0;
    for name in names {
        rev = api(&reg).create_unit(&put(name, &v1, JobState::Launched)).await.unwrap();
    }
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    let units: Vec<RolloutUnit> = names
        .iter()
        .map(|n| RolloutUnit {
            name: n.to_string(),
            from: v1.hash.clone(),
            to: v2.hash.clone(),
            ..RolloutUnit::default()
        })
        .collect();
    let bodies: Vec<RolloutBody> = units
        .iter()
        .map(|u| {
            let record = snap.unit_record(&u.name).unwrap();
            RolloutBody { unit: u, text: &v2.text, object_revision: record.object_revision(), object: record.object() }
        })
        .collect();
    let spec = RolloutSpec {
        id: "web-1".into(),
        kind: RolloutKind::Replace,
        units: units.clone(),
        max_unavailable: 1,
        health_timeout_ms: 1000,
        created_ms: 1,
        ..RolloutSpec::default()
    };
    let rev = api(&reg).create_rollout(&spec, &bodies, None).await.expect("a rollout of three instances is stored");
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    for name in names {
        assert_eq!(snap.unit(name).unwrap().hash, v2.hash, "{name} has its new version");
    }
    assert_eq!(snap.bodies().get(v2.hash.as_str()).map(|b| &*b.text), Some(v2.text.as_str()));

    // Aborted: the leader writes every instance back to the old version they share, in one fenced write.
    let (leader, _lease) = lead(&reg, "m1").await;
    let aborted = RolloutProgress { state: RolloutState::Aborted, ..Default::default() };
    let rev = leader
        .write_rollout_progress(&snap, "web-1", &aborted, &units, &[])
        .await
        .expect("the rollback of three instances is written")
        .expect("this engine leads");
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    for name in names {
        assert_eq!(snap.unit(name).unwrap().hash, v1.hash, "{name} is back on its old version");
    }
}

/// A rollout's progress write is fenced to the engine leader and never brings a destroyed unit back: its rollback
/// objects are conditional on the unit being as the engine's view showed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_progress_is_fenced_and_a_rollback_never_resurrects_a_destroyed_unit() {
    use fleet_core::rollout::{OnFailure, RolloutKind, RolloutProgress, RolloutSpec, RolloutState, RolloutUnit};
    use fleet_registry::RolloutBody;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/rollouts").await;
    let refl = connected(&reg).await;
    let (v1, v2) = (version("[Service]\nExecStart=/bin/true\n"), version("[Service]\nExecStart=/bin/false\n"));
    let rev = api(&reg).create_unit(&put("db.service", &v1, JobState::Launched)).await.unwrap();
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    let unit =
        RolloutUnit { name: "db.service".into(), from: v1.hash.clone(), to: v2.hash.clone(), ..RolloutUnit::default() };
    let spec = RolloutSpec {
        id: "r1".into(),
        kind: RolloutKind::Replace,
        units: vec![unit.clone()],
        max_unavailable: 1,
        min_healthy_ms: 0,
        health_timeout_ms: 1000,
        on_failure: OnFailure::Pause,
        created_ms: 1,
        ..RolloutSpec::default()
    };
    let record = snap.unit_record("db.service").unwrap();
    let body =
        RolloutBody { unit: &unit, text: &v2.text, object_revision: record.object_revision(), object: record.object() };
    let rev = api(&reg).create_rollout(&spec, std::slice::from_ref(&body), None).await.unwrap();
    assert!(matches!(api(&reg).create_rollout(&spec, &[body], None).await, Err(RegistryError::RolloutExists { .. })));
    let snap = refl.wait_for_revision(rev, WAIT).await.unwrap();
    assert_eq!(snap.unit("db.service").unwrap().hash, v2.hash, "the new version is stored with the rollout");

    // An engine that led once and was deposed (it resigned; another engine won since) writes nothing.
    let (deposed, _deposed_lease) = lead(&reg, "m2").await;
    assert!(deposed.clone().resign().await.unwrap());
    let (leader, _lease) = lead(&reg, "m1").await;
    let aborted = RolloutProgress { state: RolloutState::Aborted, ..Default::default() };
    let err = deposed
        .write_rollout_progress(&snap, "r1", &aborted, std::slice::from_ref(&unit), &[])
        .await
        .expect_err("an engine that does not hold the leader key must write nothing, but it wrote");
    assert!(matches!(err, RegistryError::NotLeader { .. }), "progress by a non-leader: {err}");
    api(&reg).destroy_unit("db.service").await.unwrap();
    assert!(
        leader.write_rollout_progress(&snap, "r1", &aborted, std::slice::from_ref(&unit), &[]).await.unwrap().is_none(),
        "a view that still shows the destroyed unit cannot write it back"
    );
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(leader.write_rollout_progress(&snap, "r1", &aborted, &[unit], &[]).await.unwrap().is_some());
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.unit_record("db.service").is_none(), "the destroyed unit stays destroyed");
    assert_eq!(snap.rollouts()[0].state(), RolloutState::Aborted);
}

/// Garbage collection never takes what is still needed: a version a machine runs (launched marker) or holds
/// (published state) after the unit's history moved past it, and a rollout's versions while it holds machines;
/// finished rollouts beyond the last few of every unit are deleted by the engine leader only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_keeps_what_machines_and_rollouts_need_and_deletes_only_expired_finished_rollouts() {
    use fleet_core::rollout::{
        KEEP_FINISHED_PER_UNIT, OnFailure, RolloutKind, RolloutProgress, RolloutSpec, RolloutState, RolloutUnit,
        expired,
    };
    use fleet_registry::StateWrite;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/rollout-gc").await;
    let refl = connected(&reg).await;
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(30)).await.unwrap();
    // m2's engine led once and was deposed: its session is stale, and every write through it is refused.
    let (deposed, _deposed_lease) = lead(&reg, "m2").await;
    assert!(deposed.clone().resign().await.unwrap());
    let leader = won(reg.campaign("m1", lease.id()).await.unwrap());
    let versions: Vec<Version> = (0..13).map(|i| version(&format!("[Unit]\nDescription=v{i}\n"))).collect();
    api(&reg).create_unit(&put("a.service", &versions[0], JobState::Launched)).await.unwrap();
    assert!(agent(&reg, "m1", lease.id()).mark_launched_many(&[("a.service", &versions[0].hash)]).await.unwrap());
    let held = state("a.service", "m2", &versions[1].hash);
    agent(&reg, "m2", lease.id()).write_states(&[StateWrite::Publish(&held)]).await.unwrap();
    for v in &versions[1..12] {
        api(&reg).put_unit(&put("a.service", v, JobState::Launched)).await.unwrap();
    }
    let snap = refl.sync(WAIT).await.unwrap();
    let history = &snap.unit_record("a.service").unwrap().object().unwrap().history;
    assert!(
        !history.iter().any(|h| *h.hash == *versions[0].hash || *h.hash == *versions[1].hash),
        "the history moved past v0 and v1"
    );
    assert_eq!(snap.unreferenced_bodies(), [], "m1 runs v0 and m2 holds v1");
    assert_eq!(collect_garbage(&leader).await, 0);

    // A restart rollout of v12 (a body nothing else names) that still holds machines keeps it.
    let v12 = &versions[12];
    // v12's body is stored through a unit that is then destroyed, so only the rollout names it.
    api(&reg).create_unit(&put("b.service", v12, JobState::Inactive)).await.unwrap();
    api(&reg).destroy_unit("b.service").await.unwrap();
    let spec = |id: &str, created_ms: u64, hash: &str| RolloutSpec {
        id: id.into(),
        kind: RolloutKind::Restart,
        units: vec![RolloutUnit {
            name: "a.service".into(),
            from: hash.into(),
            to: hash.into(),
            ..RolloutUnit::default()
        }],
        max_unavailable: 1,
        min_healthy_ms: 0,
        health_timeout_ms: 1000,
        on_failure: OnFailure::Pause,
        created_ms,
        ..RolloutSpec::default()
    };
    api(&reg).create_rollout(&spec("running", 100, &v12.hash), &[], None).await.unwrap();
    let snap = refl.sync(WAIT).await.unwrap();
    assert_eq!(snap.unreferenced_bodies(), [], "the running rollout needs v12");

    // Machines let go of v0 and v1: both are collected, v12 is not.
    agent(&reg, "m1", 0).unmark_launched_many(&["a.service"]).await.unwrap();
    agent(&reg, "m2", lease.id())
        .write_states(&[StateWrite::Remove { unit: "a.service", machine: "m2" }])
        .await
        .unwrap();
    refl.sync(WAIT).await.unwrap();
    assert_eq!(collect_garbage(&leader).await, 2);
    let snap = refl.sync(WAIT).await.unwrap();
    assert!(snap.bodies().contains_key(v12.hash.as_str()) && !snap.bodies().contains_key(versions[0].hash.as_str()));

    // Seven finished rollouts: the two oldest expire; only the leader deletes them.
    let current = &versions[11].hash;
    for i in 0..7u64 {
        api(&reg).create_rollout(&spec(&format!("done-{i}"), i, current), &[], None).await.unwrap();
    }
    let snap = refl.sync(WAIT).await.unwrap();
    let done = RolloutProgress { state: RolloutState::Done, ..Default::default() };
    for i in 0..7 {
        assert!(leader.write_rollout_progress(&snap, &format!("done-{i}"), &done, &[], &[]).await.unwrap().is_some());
    }
    let snap = refl.sync(WAIT).await.unwrap();
    let rollouts = snap.rollouts();
    let old = expired(&rollouts, KEEP_FINISHED_PER_UNIT);
    assert_eq!(old, ["done-0", "done-1"]);
    let err = deposed.delete_rollouts(&snap, &old).await.expect_err("not the engine leader, but it deleted");
    assert!(matches!(err, RegistryError::NotLeader { .. }), "rollout GC by a non-leader: {err}");
    assert_eq!(leader.delete_rollouts(&snap, &old).await.unwrap(), 2);
    let snap = refl.sync(WAIT).await.unwrap();
    let ids: BTreeSet<String> = snap.rollout_records().keys().cloned().collect();
    let want: BTreeSet<String> = ["done-2", "done-3", "done-4", "done-5", "done-6", "running"].map(String::from).into();
    assert_eq!(ids, want, "the running rollout and the last {KEEP_FINISHED_PER_UNIT} finished ones stay");
    assert_eq!(reg.read_snapshot().await.unwrap().rollout_records().len(), 6, "every key of the deleted ones is gone");

    // Once the running rollout finishes, v12 is no longer needed.
    assert!(leader.write_rollout_progress(&snap, "running", &done, &[], &[]).await.unwrap().is_some());
    refl.sync(WAIT).await.unwrap();
    assert_eq!(collect_garbage(&leader).await, 1, "v12 goes with the rollout that needed it");
}

/// Engine writes are fenced to the writer's leadership (issue 14 item 3): once an engine is deposed — its lease
/// gone and another engine leading, or its own machine leading again under a new lease — its placements, body
/// deletions, rollout progress and rollout deletions are refused with `NotLeader` and write nothing; the current leader's go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_writes_are_rejected() {
    use fleet_core::rollout::{OnFailure, RolloutKind, RolloutProgress, RolloutSpec, RolloutState, RolloutUnit};
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/fence").await;
    let v = version("[Service]\nExecStart=/bin/true\n");
    api(&reg).create_unit(&put("a.service", &v, JobState::Launched)).await.unwrap();

    let old = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    let deposed = won(reg.campaign("ma", old.id()).await.unwrap());
    let schedule = PlacementWrite::Schedule { unit: "a.service", machine: "m1" };
    assert!(deposed.placement(&schedule).await.unwrap().is_some(), "the leader's write goes through");

    // Deposed: its lease is gone (as after a pause longer than the TTL), and another engine leads.
    old.revoke().await.unwrap();
    let new = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    let mb = won(reg.campaign("mb", new.id()).await.unwrap());
    let unschedule = PlacementWrite::Unschedule { unit: "a.service", machine: "m1" };
    let err = deposed
        .placement(&unschedule)
        .await
        .expect_err("a deposed leader's unschedule must be refused, but it was written");
    assert!(
        matches!(&err, RegistryError::NotLeader { holder, .. } if holder.starts_with("mb")),
        "a deposed leader's placement must be refused naming the holder, got {err}"
    );
    let err = deposed
        .placements(&[unschedule])
        .await
        .expect_err("a deposed leader's batched placements must be refused, but they were written");
    assert!(matches!(err, RegistryError::NotLeader { .. }), "batched placement: {err}");
    let snap = reg.read_snapshot().await.unwrap();
    assert_eq!(snap.unit("a.service").and_then(|u| u.target.map(str::to_string)), Some("m1".to_string()));

    // The same machine leading again under a new lease (a restarted fleetd): the old incarnation is still fenced.
    assert!(mb.resign().await.unwrap());
    let again = LeaseKeeper::grant(&reg, Duration::from_secs(5)).await.unwrap();
    let current = won(reg.campaign("ma", again.id()).await.unwrap());
    let err = deposed
        .placement(&unschedule)
        .await
        .expect_err("an earlier incarnation of the leader's machine must be refused, but it wrote");
    assert!(matches!(err, RegistryError::NotLeader { .. }), "old incarnation of the leader's machine: {err}");
    api(&reg).destroy_unit("a.service").await.unwrap();
    let snap = reg.read_snapshot().await.unwrap();
    let garbage = snap.unreferenced_bodies();
    assert!(!garbage.is_empty(), "destroying the unit leaves its body to collect");
    let err =
        deposed.delete_bodies(&garbage).await.expect_err("a deposed leader's body GC must be refused, but it deleted");
    assert!(matches!(err, RegistryError::NotLeader { .. }), "body GC by a deposed leader: {err}");

    assert_eq!(current.delete_bodies(&garbage).await.unwrap(), garbage.len(), "the leader collects");

    // Rollout progress and rollout deletion: the old incarnation is refused, the current leader writes.
    let spec = RolloutSpec {
        id: "r1".into(),
        kind: RolloutKind::Restart,
        units: vec![RolloutUnit {
            name: "a.service".into(),
            from: v.hash.clone(),
            to: v.hash.clone(),
            ..RolloutUnit::default()
        }],
        max_unavailable: 1,
        min_healthy_ms: 0,
        health_timeout_ms: 1000,
        on_failure: OnFailure::Pause,
        created_ms: 1,
        ..RolloutSpec::default()
    };
    api(&reg).create_rollout(&spec, &[], None).await.unwrap();
    let snap = reg.read_snapshot().await.unwrap();
    let done = RolloutProgress { state: RolloutState::Done, ..Default::default() };
    let err = deposed
        .write_rollout_progress(&snap, "r1", &done, &[], &[])
        .await
        .expect_err("a deposed leader's rollout progress must be refused, but it was written");
    assert!(matches!(err, RegistryError::NotLeader { .. }), "rollout progress by a deposed leader: {err}");
    assert!(reg.read_snapshot().await.unwrap().rollouts()[0].progress.is_none(), "nothing was written");
    assert!(current.write_rollout_progress(&snap, "r1", &done, &[], &[]).await.unwrap().is_some(), "the leader writes");
    let snap = reg.read_snapshot().await.unwrap();
    let err = deposed
        .delete_rollouts(&snap, &["r1"])
        .await
        .expect_err("a deposed leader's rollout deletion must be refused, but it deleted");
    assert!(matches!(err, RegistryError::NotLeader { .. }), "rollout deletion by a deposed leader: {err}");
    assert_eq!(reg.read_snapshot().await.unwrap().rollout_records().len(), 1, "the rollout is still there");
    assert_eq!(current.delete_rollouts(&snap, &["r1"]).await.unwrap(), 1, "the leader deletes");
}

/// A throwaway CA for the etcd TLS test: writes its certificate and signs leaves into `dir`.
struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    cert: std::path::PathBuf,
}

impl TestCa {
    fn new(dir: &std::path::Path, name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = dir.join(format!("{name}.pem"));
        std::fs::write(&cert, params.self_signed(&key).unwrap().pem()).unwrap();
        TestCa { issuer: rcgen::Issuer::new(params, key), cert }
    }

    fn leaf(&self, dir: &std::path::Path, cn: &str, names: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        let (cert_path, key_path) = (dir.join(format!("{cn}.pem")), dir.join(format!("{cn}-key.pem")));
        std::fs::write(&cert_path, params.signed_by(&key, &self.issuer).unwrap().pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_talks_to_etcd_over_tls_with_a_client_certificate() {
    use fleet_registry::EtcdConfig;
    use fleet_tls::ClientFiles;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = TestCa::new(d, "etcd-ca");
    let (cert, key) = ca.leaf(d, "etcd", &["127.0.0.1", "localhost"]);
    let client = ca.leaf(d, "fleetd", &[]);
    let etcd =
        TestEtcd::start_tls(fleet_testkit::ServerTls { cert, key, ca: ca.cert.clone(), client: client.clone() }).await;
    let config = |tls: ClientFiles| EtcdConfig {
        endpoints: vec![etcd.endpoint()],
        prefix: "/tls/".into(),
        request_timeout: Duration::from_secs(10),
        tls,
        ..EtcdConfig::default()
    };

    let with_cert =
        ClientFiles { ca: Some(ca.cert.clone()), cert: Some(client.0.clone()), key: Some(client.1.clone()) };
    let registry = Registry::connect(&config(with_cert)).await.expect("connect over TLS with a client certificate");
    registry.ensure_layout_version().await.expect("a write over TLS");
    let snapshot = registry.read_snapshot().await.expect("a read over TLS");
    assert_eq!(snapshot.machines().count(), 0);

    // Without a client certificate etcd refuses every request.
    let anonymous = Registry::connect(&config(ClientFiles { ca: Some(ca.cert.clone()), cert: None, key: None })).await;
    let refused = match anonymous {
        Ok(registry) => registry.ensure_layout_version().await.err().map(|e| e.to_string()),
        Err(e) => Some(e.to_string()),
    };
    assert!(refused.is_some(), "etcd served a client without a certificate");

    // A client that does not trust etcd's CA refuses etcd.
    let stranger = TestCa::new(d, "stranger-ca");
    let distrustful =
        ClientFiles { ca: Some(stranger.cert.clone()), cert: Some(client.0.clone()), key: Some(client.1) };
    let refused = match Registry::connect(&config(distrustful)).await {
        Ok(registry) => registry.ensure_layout_version().await.err().map(|e| e.to_string()),
        Err(e) => Some(e.to_string()),
    };
    assert!(refused.is_some(), "a client trusting another CA accepted etcd's certificate");

    let no_ca = Registry::connect(&config(ClientFiles::default())).await.expect_err("https without a CA is refused");
    assert!(no_ca.to_string().contains("need the CA that signed etcd"), "{no_ca}");
}

/// The API's batch writes: many units in few transactions (one revision each), each unit whole, and every unit its
/// own result when some of a transaction's units fail (a missing unit, a bad hash, a name given twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_unit_writes_use_few_transactions_and_report_each_unit() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/batch").await;
    let refl = connected(&reg).await;
    let (v1, v2) = (version("[Service]\nExecStart=/bin/sleep 1\n"), version("[Service]\nExecStart=/bin/sleep 2\n"));
    let names: Vec<String> = (0..300).map(|i| format!("t@{i}.service")).collect();
    let start = refl.sync(WAIT).await.unwrap().revision();

    // 300 instances of one body: 63 per transaction (object + desired each, the body once) → 5 revisions.
    let puts: Vec<PutUnit<'_>> = names.iter().map(|n| put(n, &v1, JobState::Inactive)).collect();
    let written = api(&reg).put_units(&puts).await;
    assert!(written.iter().all(|w| matches!(w, Ok(UnitWrite::Created { .. }))), "{:?}", written.first());
    let last = written.iter().filter_map(|w| w.as_ref().ok()?.revision()).max().unwrap();
    assert_eq!(last - start, 5, "300 units of one template in 5 transactions");
    let snap = refl.wait_for_revision(last, WAIT).await.unwrap();
    for n in &names {
        let u = snap.unit(n).unwrap_or_else(|| panic!("{n} written whole"));
        assert_eq!((u.hash, u.desired, &**u.body), (v1.hash.as_str(), JobState::Inactive, v1.text.as_str()), "{n}");
    }

    // A replace, an unchanged unit, a hash that does not match its text, and a name given twice.
    let bad = PutUnit { hash: &v2.hash, ..put("bad.service", &v1, JobState::Inactive) };
    let mixed = [
        put(&names[0], &v2, JobState::Loaded),
        put(&names[1], &v1, JobState::Loaded),
        bad,
        put("new.service", &v2, JobState::Inactive),
        put("new.service", &v2, JobState::Inactive),
    ];
    let written = api(&reg).put_units(&mixed).await;
    assert!(matches!(&written[0], Ok(UnitWrite::Replaced { previous: Some(p), .. }) if *p == v1.hash), "{written:?}");
    assert!(matches!(written[1], Ok(UnitWrite::Unchanged)), "{:?}", written[1]);
    assert!(matches!(written[2], Err(RegistryError::HashMismatch { .. })), "{:?}", written[2]);
    assert!(matches!(written[3], Ok(UnitWrite::Created { .. })), "{:?}", written[3]);
    assert!(matches!(written[4], Ok(UnitWrite::Unchanged)), "second of a repeated name: {:?}", written[4]);

    // Desired states: one missing unit among 200 fails alone; the others are set.
    let mut changes: Vec<(&str, JobState)> = names[..200].iter().map(|n| (n.as_str(), JobState::Launched)).collect();
    changes.insert(100, ("missing.service", JobState::Launched));
    let set = api(&reg).set_desired_many(&changes).await;
    assert!(matches!(&set[100], Err(RegistryError::UnitNotFound { unit }) if unit == "missing.service"), "{set:?}");
    assert_eq!(set.iter().filter(|r| r.is_ok()).count(), 200);
    let snap = refl.wait_for_revision(*set.iter().flatten().max().unwrap(), WAIT).await.unwrap();
    assert!(names[..200].iter().all(|n| snap.unit(n).unwrap().desired == JobState::Launched));
    assert_eq!(snap.unit(&names[200]).unwrap().desired, JobState::Inactive);

    // Destroy all 300 and a missing one: every key of every unit goes, the missing one is reported.
    let mut doomed: Vec<&str> = names.iter().map(String::as_str).collect();
    doomed.insert(7, "missing.service");
    let destroyed = api(&reg).destroy_units(&doomed).await;
    assert!(matches!(&destroyed[7], Err(RegistryError::UnitNotFound { .. })), "{:?}", destroyed[7]);
    assert_eq!(*destroyed[0].as_ref().unwrap().object.as_ref().unwrap().hash, *v2.hash);
    assert_eq!(destroyed.iter().filter(|r| r.is_ok()).count(), 300);
    let snap = refl.wait_for_revision(destroyed.iter().flatten().map(|d| d.revision).max().unwrap(), WAIT).await;
    let left = unit_names(&snap.unwrap());
    assert_eq!(left, ["new.service".to_string()].into_iter().collect(), "only the unit not destroyed is left");
}

/// A rollout's revision (the reflector's record) moves with each write of its keys, and
/// `wait_rollout_change` (fleetctl's etcd driver following a rollout) ends on the next write after a revision,
/// at once for a write it missed, and with `false` when nothing was written in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollouts_revision_moves_with_its_writes_and_a_change_wait_ends_on_the_next() {
    use fleet_core::rollout::{Action, Control, OnFailure, RolloutKind, RolloutSpec, RolloutUnit};
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/rollout-change").await;
    let refl = connected(&reg).await;
    let v1 = version("[Service]\nExecStart=/bin/true\n");
    api(&reg).create_unit(&put("db.service", &v1, JobState::Launched)).await.unwrap();
    let unit =
        RolloutUnit { name: "db.service".into(), from: v1.hash.clone(), to: v1.hash.clone(), ..RolloutUnit::default() };
    let spec = RolloutSpec {
        id: "r1".into(),
        kind: RolloutKind::Restart,
        units: vec![unit],
        max_unavailable: 1,
        min_healthy_ms: 0,
        health_timeout_ms: 1000,
        on_failure: OnFailure::Pause,
        created_ms: 1,
        ..RolloutSpec::default()
    };
    let created = api(&reg).create_rollout(&spec, &[], None).await.unwrap();
    let snap = refl.wait_for_revision(created, WAIT).await.unwrap();
    assert_eq!(snap.rollout_records()["r1"].revision, created, "the revision is the creating write's");

    assert!(
        !reg.wait_rollout_change("r1", created, Duration::from_millis(200)).await.unwrap(),
        "nothing written: the wait runs out"
    );
    let waiter = tokio::spawn({
        let reg = reg.clone();
        async move { reg.wait_rollout_change("r1", created, Duration::from_secs(60)).await }
    });
    let paused = api(&reg)
        .set_rollout_control("r1", &Control { action: Action::Pause, resumes: 0, ..Control::default() })
        .await
        .unwrap();
    let changed = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the wait ended on the control write, not after its 60 s")
        .unwrap()
        .unwrap();
    assert!(changed, "the wait reports the write");
    assert!(
        reg.wait_rollout_change("r1", created, Duration::from_secs(60)).await.unwrap(),
        "a write after the revision given, made before the wait began, ends it at once"
    );
    let snap = refl.wait_for_revision(paused, WAIT).await.unwrap();
    assert_eq!(snap.rollout_records()["r1"].revision, paused, "the control write moved the revision");
    assert!(matches!(
        reg.wait_rollout_change("no such/id", 0, Duration::from_secs(60)).await,
        Err(RegistryError::InvalidComponent(_))
    ));
}

/// An audit record of `who` at `at_ms`.
fn audit_record(at_ms: u64, who: &str) -> fleet_core::audit::AuditRecord {
    use fleet_core::audit::{AuditRecord, Via, Who};
    AuditRecord {
        at_ms,
        who: Who { via: Via::Unix, name: who.into() },
        method: "DELETE".into(),
        path: "/fleet/v1/units/a.service".into(),
        action: "destroy a.service".into(),
        units: vec!["a.service".into()],
        versions: Default::default(),
        status: 204,
        error: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_records_are_kept_in_time_order_read_since_and_trimmed_by_the_leader() {
    use fleet_core::audit::Limits;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/audit").await;
    let writer = api(&reg);
    let day = 24 * 3600 * 1000;
    let now = 100 * day;
    for (i, at) in [now - 40 * day, now - 31 * day, now - 3, now - 2, now - 2, now - 1].into_iter().enumerate() {
        let key = writer.record_audit(&audit_record(at, &format!("user{i}")), "m1").await.unwrap();
        assert!(key.starts_with("/test/audit/audit/"), "{key}");
    }
    // Garbage another client wrote is an error for that record, with its key, not for the read.
    reg.client().put("/test/audit/audit/00000000000000000001-x", "garbage", None).await.unwrap();

    let all = reg.read_audit(0).await.unwrap();
    assert_eq!(all.len(), 7, "two records in the same ms under one suffix both kept: {all:?}");
    let (bad_key, bad) = &all[0];
    let err = bad.as_ref().unwrap_err();
    assert!(err.to_string().starts_with(&format!("{bad_key}: cannot decode audit record")), "{err}");
    let names: Vec<String> = all[1..].iter().map(|(_, r)| r.as_ref().unwrap().who.name.clone()).collect();
    assert_eq!(names, ["user0", "user1", "user2", "user3", "user4", "user5"], "oldest first");
    let recent: Vec<u64> =
        reg.read_audit(now - 2).await.unwrap().iter().map(|(_, r)| r.as_ref().unwrap().at_ms).collect();
    assert_eq!(recent, [now - 2, now - 2, now - 1], "since is inclusive");

    let (leader, _lease) = lead(&reg, "m1").await;
    let trimmed = leader.trim_audit(Limits { max_records: 2, max_age_ms: 30 * day }, now).await.unwrap();
    assert_eq!((trimmed.too_old, trimmed.too_many), (3, 2), "the garbage and two records by age, then two by count");
    let left: Vec<String> =
        reg.read_audit(0).await.unwrap().iter().map(|(_, r)| r.as_ref().unwrap().who.name.clone()).collect();
    assert_eq!(left, ["user4", "user5"], "the newest two are kept");
    let again = leader.trim_audit(Limits { max_records: 2, max_age_ms: 30 * day }, now).await.unwrap();
    assert_eq!((again.too_old, again.too_many), (0, 0), "nothing more to trim");

    // A deposed leader trims nothing.
    let stale = leader.clone();
    assert!(leader.resign().await.unwrap());
    let refused = stale.trim_audit(Limits { max_records: 0, max_age_ms: 0 }, now).await;
    assert!(matches!(refused, Err(RegistryError::NotLeader { .. })), "{refused:?}");
    assert_eq!(reg.read_audit(0).await.unwrap().len(), 2);
}

/// Layout 2 (issue 35): a reflector scoped to m1 lists and watches m1's prefix alone, and publishes no entry
/// without its body: a new entry naming a new body arrives with it. Another machine's writes, units and states
/// never reach it. m1's own lease-bound keys (its states and markers, outside its prefix) are read when it lists,
/// and then follow what m1's session reports it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_reflector_holds_its_machine_and_the_bodies_its_entries_name() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/scoped-view").await;
    let keys = reg.keys().clone();
    let (v1, v2) = (version("[Service]\nExecStart=/bin/true\n"), version("[Service]\nExecStart=/bin/false\n"));
    api(&reg).create_unit(&put("a.service", &v1, JobState::Launched)).await.unwrap();
    api(&reg).create_unit(&put("b.service", &v2, JobState::Launched)).await.unwrap();
    let mut kv = reg.client().kv_client();
    let entry = |hash: &str| format!(r#"{{"hash":"{hash}","desired":"launched"}}"#);
    kv.put(keys.schedule_entry("m1", "a.service"), entry(&v1.hash), None).await.unwrap();
    kv.put(keys.schedule_entry("m2", "b.service"), entry(&v2.hash), None).await.unwrap();
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(10)).await.unwrap();
    let lease2 = LeaseKeeper::grant(&reg, Duration::from_secs(10)).await.unwrap();
    reg.register_machine(&machine("m1"), lease.id()).await.unwrap();
    reg.register_machine(&machine("m2"), lease2.id()).await.unwrap();
    // What m1's agent published before its view started: read with the list.
    let m1 = agent(&reg, "m1", lease.id());
    m1.publish_state(&state("a.service", "m1", &v1.hash)).await.unwrap();
    assert!(m1.mark_launched("a.service", &v1.hash).await.unwrap());

    use fleet_registry::StateWrite;
    let refl = Reflector::start_scoped(&reg, "m1", lease.id());
    let m1 = m1.with_own_writes(refl.own_writes());
    let s = refl.wait_connected(WAIT).await.unwrap();
    assert_eq!(s.scope(), Some("m1"));
    let own_states = |s: &fleet_registry::Snapshot| {
        s.state_records()
            .iter()
            .flat_map(|(unit, per)| per.iter().map(move |(m, r)| format!("{unit}@{m}={}", r.active_state)))
            .collect::<Vec<_>>()
    };
    assert_eq!(own_states(&s), ["a.service@m1=active"], "its own state, read by its lease");
    assert_eq!(s.running_hash("a.service", "m1"), Some(v1.hash.as_str()), "its own launched marker");
    let names =
        |s: &fleet_registry::Snapshot| s.units().map(|u| (u.name.to_string(), u.hash.to_string())).collect::<Vec<_>>();
    assert_eq!(names(&s), [("a.service".to_string(), v1.hash.clone())]);
    assert_eq!(s.machine_records().keys().collect::<Vec<_>>(), ["m1"], "only its own machine");
    assert!(s.body(&v2.hash).is_none(), "no body its entries do not name");

    // m1 is given b's version of a new unit: the entry arrives with its body, in one snapshot.
    api(&reg).create_unit(&put("c.service", &v2, JobState::Launched)).await.unwrap();
    kv.put(keys.schedule_entry("m1", "c.service"), entry(&v2.hash), None).await.unwrap();
    let s = refl.wait_for(WAIT, "c.service on m1", |s| s.unit_record("c.service").map(|_| s.clone())).await.unwrap();
    assert!(s.body(&v2.hash).is_some(), "published with its body");
    assert_eq!(names(&s).len(), 2);
    // m1's own writes, reported by its session, reach it though it does not watch them.
    let mut c = state("c.service", "m1", &v2.hash);
    c.active_state = "activating".into();
    m1.write_states(&[StateWrite::Publish(&c), StateWrite::Remove { unit: "a.service", machine: "m1" }]).await.unwrap();
    assert!(m1.mark_launched("c.service", &v2.hash).await.unwrap());
    let s = refl
        .wait_for(WAIT, "m1's own writes", |s| (s.running_hash("c.service", "m1").is_some()).then(|| s.clone()))
        .await
        .unwrap();
    assert_eq!(own_states(&s), ["c.service@m1=activating"], "a's state removed, c's published");
    // Writes elsewhere do not reach it.
    api(&reg).create_unit(&put("d.service", &v1, JobState::Launched)).await.unwrap();
    agent(&reg, "m2", lease2.id()).publish_state(&state("b.service", "m2", &v2.hash)).await.unwrap();
    kv.put(keys.schedule_entry("m2", "d.service"), entry(&v1.hash), None).await.unwrap();
    let s = refl.sync(WAIT).await.unwrap();
    assert_eq!(names(&s).len(), 2);
    assert!(s.unit_record("d.service").is_none());
    assert_eq!(own_states(&s), ["c.service@m1=activating"], "no other machine's state");
    // What its handover reads on demand: every machine's copy of b, and whether that machine is present.
    let copies = reg.read_copies_snapshot(&["b.service"]).await.unwrap();
    assert_eq!(copies.unit_states_of("b.service").map(|s| s.machine_id).collect::<Vec<_>>(), ["m2"]);
    assert!(copies.machine_records().get("m2").is_some_and(|m| m.object.is_some()), "m2's presence read with it");
    // A new list (here: a new view) reads the same from etcd.
    let again = Reflector::start_scoped(&reg, "m1", lease.id()).wait_connected(WAIT).await.unwrap();
    assert_eq!(own_states(&again), own_states(&s));
    assert_eq!(again.running_hash("c.service", "m1"), Some(v2.hash.as_str()));
    kv.delete(keys.schedule_entry("m1", "a.service"), None).await.unwrap();
    let s = refl.wait_for(WAIT, "a.service gone", |s| s.unit("a.service").is_none().then(|| s.clone())).await.unwrap();
    assert_eq!(names(&s), [("c.service".to_string(), v2.hash.clone())]);
}

/// Layout 2 (issue 35): the engine leader writes the entries `entry_changes` decides, fenced, in batches. A unit
/// changed or destroyed since the decision gets nothing from it (its guard), and the others of its batch are
/// written one by one; a delete meant for an absent machine waits while the machine is present; a deposed leader
/// writes nothing. What it wrote reads back as the placement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_writes_schedule_entries_and_a_deposed_one_writes_none() {
    use fleet_core::scheduler::entries::{EntryChanges, entry_changes};
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/entries").await;
    let v = version("[Service]\nExecStart=/bin/true\n");
    let names: Vec<String> = (0..70).map(|i| format!("u{i:02}.service")).collect();
    for name in &names {
        api(&reg).create_unit(&put(name, &v, JobState::Launched)).await.unwrap();
    }
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(10)).await.unwrap();
    reg.register_machine(&machine("m1"), lease.id()).await.unwrap();
    let (engine, engine_lease) = lead(&reg, "m9").await;
    for name in &names {
        assert!(engine.placement(&schedule(name, "m1")).await.unwrap().is_some());
    }
    let refl = connected(&reg).await;
    let view = refl.sync(WAIT).await.unwrap();
    let wanted = entry_changes(&view, &[], |_| Some(false));
    assert_eq!((wanted.put.len(), wanted.delete.len(), wanted.guards.len()), (70, 0, 70));
    let written = engine.write_entries(&wanted).await.unwrap();
    assert_eq!((written.written, written.conflicts.len()), (70, 0), "two transactions of at most 63");
    let view = refl.sync(WAIT).await.unwrap();
    assert!(entry_changes(&view, &[], |_| Some(false)).is_empty(), "what was written is what is wanted");
    assert_eq!(view.unit_record("u00.service").unwrap().entries().get("m1").map(|e| &*e.hash), Some(v.hash.as_str()));

    // Decided from that view: a put for u00 (destroyed since), one for u02 (replaced since), a delete of u01's entry
    // (unchanged) and one of u03's meant for an absent m1 (present). Only u01's is written.
    let mut stopped = view.unit_record("u02.service").unwrap().entries().get("m1").unwrap().clone();
    stopped.desired = JobState::Loaded;
    let mut stale = EntryChanges {
        put: vec![
            ("m1".to_string(), "u00.service".to_string(), stopped.clone()),
            ("m1".to_string(), "u02.service".to_string(), stopped),
        ],
        delete: vec![("m1".to_string(), "u01.service".to_string()), ("m1".to_string(), "u03.service".to_string())],
        ..EntryChanges::default()
    };
    for unit in ["u00.service", "u01.service", "u02.service", "u03.service"] {
        stale.guards.insert(unit.to_string(), view.unit_record(unit).unwrap().object_revision());
    }
    stale.while_absent.insert(("m1".to_string(), "u03.service".to_string()));
    api(&reg).destroy_unit("u00.service").await.unwrap();
    let w2 = version("[Service]\nExecStart=/bin/false\n");
    api(&reg).put_unit(&put("u02.service", &w2, JobState::Launched)).await.unwrap();
    let written = engine.write_entries(&stale).await.unwrap();
    assert_eq!(written.written, 1, "{written:?}");
    assert_eq!(written.conflicts, ["u00.service", "u02.service", "u03.service"]);
    let view = refl.sync(WAIT).await.unwrap();
    let entry_on_m1 = |unit: &str| view.unit_record(unit).and_then(|r| r.entries().get("m1").cloned());
    // (The API of layout 1 left u00's entry behind; the engine's next pass clears it.)
    assert_eq!(entry_on_m1("u00.service").map(|e| e.desired), Some(JobState::Launched), "not the stale put");
    assert_eq!(entry_on_m1("u01.service"), None, "the unchanged unit's delete went through");
    assert_eq!(entry_on_m1("u02.service").map(|e| e.desired), Some(JobState::Launched), "not the stale put");
    assert!(entry_on_m1("u03.service").is_some(), "m1 is present: its entry stays");

    // Deposed: nothing.
    drop(engine_lease);
    reg.client().kv_client().delete(reg.keys().engine_leader(), None).await.unwrap();
    let (_new, _new_lease) = lead(&reg, "m8").await;
    let delete =
        EntryChanges { delete: vec![("m1".to_string(), "u04.service".to_string())], ..EntryChanges::default() };
    let err = engine.write_entries(&delete).await;
    assert!(matches!(err, Err(fleet_registry::RegistryError::NotLeader { .. })), "{err:?}");
}

/// Layout 2's switch (issue 35): a unit moves only as it was read (a stop through a layout-1 writer meanwhile makes
/// the move write nothing, and the next one carries it); a moved unit reads as before; a global unit on more
/// machines than one transaction holds moves in several; `P/version` is switched once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_move_to_layout_2_as_they_were_read_and_the_layout_switches_once() {
    use fleet_core::layout::moves_to_layout_2;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/move").await;
    assert_eq!(reg.ensure_layout_version().await.unwrap(), 1);
    let v = version("[Service]\nExecStart=/bin/true\n");
    let g = version("[Service]\nExecStart=/bin/true\n[X-Fleet]\nGlobal=true\n");
    api(&reg).create_unit(&put("a.service", &v, JobState::Launched)).await.unwrap();
    api(&reg).create_unit(&put("g.service", &g, JobState::Launched)).await.unwrap();
    let lease = LeaseKeeper::grant(&reg, Duration::from_secs(10)).await.unwrap();
    let ids: Vec<String> = (0..140).map(|i| format!("m{i:03}")).collect();
    for id in &ids {
        reg.register_machine_running(&machine(id), lease.id(), &[1, 2]).await.unwrap();
    }
    let (engine, _engine_lease) = lead(&reg, "m000").await;
    assert!(engine.placement(&schedule("a.service", "m001")).await.unwrap().is_some());
    let refl = connected(&reg).await;
    let global = |u: &fleet_core::store::UnitView<'_>| Some(u.name == "g.service");
    let view = refl.sync(WAIT).await.unwrap();
    let before: Vec<(String, JobState, Option<String>)> =
        view.units().map(|u| (u.name.to_string(), u.desired, u.target.map(String::from))).collect();
    let moves = moves_to_layout_2(&view, &[], global);
    assert_eq!(
        moves.iter().map(|m| (m.unit.as_str(), m.entries.len())).collect::<Vec<_>>(),
        [("a.service", 1), ("g.service", 140)]
    );

    // Stopped through layout 1 after the move was decided: the move writes nothing.
    api(&reg).set_desired("a.service", JobState::Loaded).await.unwrap();
    assert_eq!(engine.move_unit(&moves[0]).await.unwrap(), None);
    let view = refl.sync(WAIT).await.unwrap();
    assert_eq!(view.unit_record("a.service").unwrap().desired_key(), Some(JobState::Loaded), "nothing moved");
    assert!(view.unit_record("a.service").unwrap().entries().is_empty());

    let moves = moves_to_layout_2(&view, &[], global);
    for m in &moves {
        assert!(engine.move_unit(m).await.unwrap().is_some(), "{} moved", m.unit);
    }
    let view = refl.sync(WAIT).await.unwrap();
    let now: Vec<(String, JobState, Option<String>)> =
        view.units().map(|u| (u.name.to_string(), u.desired, u.target.map(String::from))).collect();
    assert_eq!(now[0], ("a.service".to_string(), JobState::Loaded, Some("m001".to_string())));
    assert_eq!(now[1], before[1]);
    let a = view.unit_record("a.service").unwrap();
    assert_eq!((a.desired_key(), a.target_key(), a.object().unwrap().desired), (None, None, Some(JobState::Loaded)));
    assert_eq!(view.unit_record("g.service").unwrap().entries().len(), 140, "in two transactions");
    assert!(moves_to_layout_2(&view, &[], global).is_empty(), "nothing left to move");

    assert!(engine.switch_layout(1, 2).await.unwrap().is_some());
    assert_eq!(engine.switch_layout(1, 2).await.unwrap(), None, "once");
    assert_eq!(refl.sync(WAIT).await.unwrap().layout_version(), Some(2));

    // Another client's garbage in `P/version` is put back; a readable version is left alone.
    assert_eq!(engine.repair_layout(1).await.unwrap(), None, "a readable version is not repaired");
    let mut kv = reg.client().kv_client();
    kv.put(reg.keys().layout_version(), "{\"layout\":2}", None).await.unwrap();
    assert_eq!(refl.sync(WAIT).await.unwrap().layout_version(), None, "unreadable");
    assert!(engine.repair_layout(2).await.unwrap().is_some());
    assert_eq!(refl.sync(WAIT).await.unwrap().layout_version(), Some(2), "put back");
    kv.delete(reg.keys().layout_version(), None).await.unwrap();
    assert!(engine.repair_layout(2).await.unwrap().is_some(), "a deleted version is put back too");
    assert_eq!(refl.sync(WAIT).await.unwrap().layout_version(), Some(2));
}

/// Layout 2 (issue 35): an API writer given a view that shows layout 2 keeps the desired state in the unit object
/// (creation, replacement, single and batched changes; a layout-1 `desired` key left over goes), and a destroy or a
/// reschedule deletes the placements the view shows in the same transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_writes_layout_2_once_its_view_shows_it() {
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/api-layout-2").await;
    assert_eq!(reg.ensure_layout_version().await.unwrap(), 1);
    let mut kv = reg.client().kv_client();
    let keys = reg.keys().clone();
    let v = version("[Service]\nExecStart=/bin/true\n");
    // A unit written the layout-1 way before the switch: its `desired` key is left for a layout-2 write to fold.
    api(&reg).create_unit(&put("old.service", &v, JobState::Launched)).await.unwrap();
    kv.put(keys.layout_version(), "2", None).await.unwrap();
    let refl = connected(&reg).await;
    let writer = |view: Arc<Snapshot>| api(&reg).with_view(view);
    let w = writer(refl.sync(WAIT).await.unwrap());

    w.create_unit(&put("a.service", &v, JobState::Launched)).await.unwrap();
    let batch = [put("b.service", &v, JobState::Loaded), put("c.service", &v, JobState::Loaded)];
    assert!(w.put_units(&batch).await.iter().all(Result::is_ok));
    w.set_desired("old.service", JobState::Loaded).await.unwrap();
    let view = refl.sync(WAIT).await.unwrap();
    let stored = |view: &Snapshot, unit: &str| {
        let r = view.unit_record(unit).unwrap();
        (r.object().unwrap().desired, r.desired_key())
    };
    assert_eq!(stored(&view, "a.service"), (Some(JobState::Launched), None));
    assert_eq!(stored(&view, "b.service"), (Some(JobState::Loaded), None));
    assert_eq!(stored(&view, "old.service"), (Some(JobState::Loaded), None), "folded, its key gone");
    let w = writer(view);
    let results = w.set_desired_many(&[("b.service", JobState::Launched), ("c.service", JobState::Inactive)]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let err = w.set_desired("nobody.service", JobState::Loaded).await.unwrap_err();
    assert!(matches!(err, RegistryError::UnitNotFound { .. }), "{err}");
    let view = refl.sync(WAIT).await.unwrap();
    assert_eq!(stored(&view, "b.service"), (Some(JobState::Launched), None));
    assert_eq!(stored(&view, "c.service"), (Some(JobState::Inactive), None));
    // A replacement keeps the desired state it is given, in the object.
    let v2 = version("[Service]\nExecStart=/bin/false\n");
    w.put_unit(&put("b.service", &v2, JobState::Launched)).await.unwrap();
    assert_eq!(stored(&refl.sync(WAIT).await.unwrap(), "b.service"), (Some(JobState::Launched), None));

    // Placements (the engine's entries) that the view shows go with a destroy, a batched destroy and a reschedule.
    let entry = |hash: &str| format!(r#"{{"hash":"{hash}","desired":"launched"}}"#);
    kv.put(keys.schedule_entry("m1", "a.service"), entry(&v.hash), None).await.unwrap();
    kv.put(keys.schedule_entry("m2", "old.service"), entry(&v.hash), None).await.unwrap();
    kv.put(keys.schedule_entry("m1", "b.service"), entry(&v2.hash), None).await.unwrap();
    let global = format!(r#"{{"hash":"{}","desired":"launched","global":true}}"#, v.hash);
    kv.put(keys.schedule_entry("m3", "c.service"), global, None).await.unwrap();
    let w = writer(refl.sync(WAIT).await.unwrap());
    w.destroy_unit("a.service").await.unwrap();
    assert!(w.destroy_units(&["old.service", "c.service"]).await.iter().all(Result::is_ok));
    let v3 = version("[Service]\nExecStart=/bin/sleep 1\n");
    w.put_unit(&PutUnit { reschedule: true, ..put("b.service", &v3, JobState::Launched) }).await.unwrap();
    let view = refl.sync(WAIT).await.unwrap();
    let entries =
        |unit: &str| view.unit_record(unit).map(|r| r.entries().keys().map(|m| m.to_string()).collect::<Vec<_>>());
    assert_eq!(entries("a.service"), None, "destroyed with its placement");
    assert_eq!(entries("old.service"), None, "destroyed in a batch with its placement");
    assert_eq!(entries("b.service"), Some(Vec::new()), "rescheduled: its placement deleted");
    assert_eq!(entries("c.service"), Some(vec!["m3".to_string()]), "a global unit's entries are the engine's to clear");
}

/// The desired state and mod revision of `unit`'s schedule entry on `machine`, and whether it is a global unit's.
async fn entry_at(reg: &Registry, machine: &str, unit: &str) -> (JobState, i64, bool) {
    let key = reg.keys().schedule_entry(machine, unit);
    let resp = reg.client().kv_client().get(key.as_str(), None).await.unwrap();
    let kv = resp.kvs().first().unwrap_or_else(|| panic!("no entry {key}"));
    let entry: fleet_core::store::ScheduleEntry =
        fleet_core::store::records::decode_json(&key, "schedule entry", kv.value()).unwrap();
    (entry.desired, kv.mod_revision(), entry.global)
}

/// Layout 2 (issue 35): a desired-state change carries into the schedule entries the API's view shows, in the
/// revision of the object, single and batched, so that a scoped agent learns of a stop without an engine pass. An
/// entry the engine wrote since the view is not overwritten (the object still takes the state), and a global unit
/// on more machines than one write holds leaves its entries to the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_state_change_carries_into_the_entries_the_view_shows() {
    use fleet_core::scheduler::entries::MAX_DESIRED_ENTRIES;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/desired-entries").await;
    let mut kv = reg.client().kv_client();
    let keys = reg.keys().clone();
    let v = version("[Service]\nExecStart=/bin/true\n");
    kv.put(keys.layout_version(), "2", None).await.unwrap();
    let refl = connected(&reg).await;
    let w = api(&reg).with_view(refl.sync(WAIT).await.unwrap());
    for unit in ["a.service", "b.service", "g.service", "wide.service"] {
        w.create_unit(&put(unit, &v, JobState::Launched)).await.unwrap();
    }
    let placed = format!(r#"{{"hash":"{}","desired":"launched"}}"#, v.hash);
    let global = format!(r#"{{"hash":"{}","desired":"launched","global":true}}"#, v.hash);
    kv.put(keys.schedule_entry("m1", "a.service"), placed.as_str(), None).await.unwrap();
    kv.put(keys.schedule_entry("m2", "b.service"), placed.as_str(), None).await.unwrap();
    for m in ["m1", "m2", "m3"] {
        kv.put(keys.schedule_entry(m, "g.service"), global.as_str(), None).await.unwrap();
    }
    let wide: Vec<String> = (0..=MAX_DESIRED_ENTRIES).map(|i| format!("w{i:02}")).collect();
    for m in &wide {
        kv.put(keys.schedule_entry(m, "wide.service"), global.as_str(), None).await.unwrap();
    }
    let w = api(&reg).with_view(refl.sync(WAIT).await.unwrap());

    let revision = w.set_desired("a.service", JobState::Loaded).await.unwrap();
    assert_eq!(entry_at(&reg, "m1", "a.service").await, (JobState::Loaded, revision, false), "in the object's write");

    let results = w.set_desired_many(&[("b.service", JobState::Inactive), ("g.service", JobState::Loaded)]).await;
    let revisions: Vec<i64> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(entry_at(&reg, "m2", "b.service").await, (JobState::Inactive, revisions[0], false), "batched");
    for m in ["m1", "m2", "m3"] {
        assert_eq!(entry_at(&reg, m, "g.service").await, (JobState::Loaded, revisions[1], true), "global on {m}");
    }

    let before = entry_at(&reg, "w00", "wide.service").await;
    let revision = w.set_desired("wide.service", JobState::Loaded).await.unwrap();
    let view = refl.sync(WAIT).await.unwrap();
    assert_eq!(view.unit_record("wide.service").unwrap().object().unwrap().desired, Some(JobState::Loaded));
    assert!(before.1 < revision);
    for m in &wide {
        assert_eq!(entry_at(&reg, m, "wide.service").await.0, JobState::Launched, "{m}: the engine's to write");
    }

    // The engine pins a's entry to another version after the view (which shows it loaded) was taken: a start
    // leaves that entry alone.
    let shown = view.unit_record("a.service").unwrap().entries().get("m1").map(|e| e.desired);
    assert_eq!(shown, Some(JobState::Loaded));
    let w = api(&reg).with_view(view);
    let pinned = format!(r#"{{"hash":"{}","desired":"loaded"}}"#, "e".repeat(40));
    kv.put(keys.schedule_entry("m1", "a.service"), pinned.as_str(), None).await.unwrap();
    let revision = w.set_desired("a.service", JobState::Launched).await.unwrap();
    let view = refl.sync(WAIT).await.unwrap();
    assert_eq!(view.unit_record("a.service").unwrap().object().unwrap().desired, Some(JobState::Launched));
    let stored = kv.get(keys.schedule_entry("m1", "a.service"), None).await.unwrap();
    assert_eq!(stored.kvs()[0].value_str().unwrap(), pinned, "the engine's entry is kept");
    assert!(stored.kvs()[0].mod_revision() < revision);
}

/// Layout 2 (issue 35): a rebalance's or drain's released move carries the unit's placement (its entry) from one
/// machine to the other with the progress, only while the entry still reads as the view shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_moves_a_placement_entry_in_layout_2() {
    use fleet_core::rollout::{Move, RolloutProgress};
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/move-entry").await;
    let mut kv = reg.client().kv_client();
    let keys = reg.keys().clone();
    let v = version("[Service]\nExecStart=/bin/true\n");
    api(&reg).create_unit(&put("a.service", &v, JobState::Launched)).await.unwrap();
    api(&reg).create_unit(&put("b.service", &v, JobState::Launched)).await.unwrap();
    kv.put(keys.layout_version(), "2", None).await.unwrap();
    let entry = format!(r#"{{"hash":"{}","desired":"launched"}}"#, v.hash);
    kv.put(keys.schedule_entry("m1", "a.service"), entry.as_str(), None).await.unwrap();
    kv.put(keys.schedule_entry("m1", "b.service"), entry.as_str(), None).await.unwrap();
    let (leader, _lease) = lead(&reg, "m9").await;
    let refl = connected(&reg).await;
    let snap = refl.sync(WAIT).await.unwrap();
    let progress = RolloutProgress::default();
    let to_m2 = |unit: &str| Move { unit: unit.into(), from: "m1".into(), to: "m2".into() };
    assert!(leader.write_rollout_progress(&snap, "r1", &progress, &[], &[to_m2("a.service")]).await.unwrap().is_some());
    let snap2 = refl.sync(WAIT).await.unwrap();
    let on = |s: &Snapshot, unit: &str| s.unit_record(unit).unwrap().target().map(|t| t.to_string());
    assert_eq!(on(&snap2, "a.service").as_deref(), Some("m2"));
    assert_eq!(snap2.unit_record("a.service").unwrap().entries().len(), 1, "moved, not copied");
    // b's entry changed since `snap` (the engine wrote it again): the move is refused, nothing written.
    let changed = format!(r#"{{"hash":"{}","desired":"loaded"}}"#, v.hash);
    kv.put(keys.schedule_entry("m1", "b.service"), changed, None).await.unwrap();
    assert_eq!(leader.write_rollout_progress(&snap, "r2", &progress, &[], &[to_m2("b.service")]).await.unwrap(), None);
    // A move of a unit the view does not show on `from` is refused too.
    assert_eq!(leader.write_rollout_progress(&snap2, "r3", &progress, &[], &[to_m2("a.service")]).await.unwrap(), None);
    let snap3 = refl.sync(WAIT).await.unwrap();
    assert_eq!(on(&snap3, "b.service").as_deref(), Some("m1"));
    assert!(snap3.rollout_records().get("r2").is_none() && snap3.rollout_records().get("r3").is_none());
}

/// Layout 2 (issue 35): a rollout's progress and the entries it changes are one transaction: the entry of the
/// machine a step releases is written in the revision of the progress, and a unit replaced since the view makes
/// neither be written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollouts_progress_carries_the_entries_it_changes() {
    use fleet_core::rollout::RolloutProgress;
    use fleet_core::scheduler::entries::EntryChanges;
    let etcd = TestEtcd::start().await;
    let reg = etcd.registry("/test/progress-entries").await;
    let mut kv = reg.client().kv_client();
    let keys = reg.keys().clone();
    let (v1, v2) = (version("[Service]\nExecStart=/bin/true\n"), version("[Service]\nExecStart=/bin/false\n"));
    api(&reg).create_unit(&put("a.service", &v1, JobState::Launched)).await.unwrap();
    kv.put(keys.layout_version(), "2", None).await.unwrap();
    let pinned = format!(r#"{{"hash":"{}","desired":"launched"}}"#, v1.hash);
    kv.put(keys.schedule_entry("m1", "a.service"), pinned, None).await.unwrap();
    let (leader, _lease) = lead(&reg, "m9").await;
    let refl = connected(&reg).await;
    let snap = refl.sync(WAIT).await.unwrap();
    let mut released = snap.unit_record("a.service").unwrap().entries().get("m1").unwrap().clone();
    released.hash = v2.hash.as_str().into();
    let mut entries = EntryChanges {
        put: vec![("m1".to_string(), "a.service".to_string(), released.clone())],
        ..EntryChanges::default()
    };
    entries.guards.insert("a.service".to_string(), snap.unit_record("a.service").unwrap().object_revision());
    let progress = RolloutProgress::default();
    let revision = leader
        .write_rollout_progress_with_entries(&snap, "r1", &progress, &[], &[], &entries)
        .await
        .unwrap()
        .expect("written");
    let after = refl.wait_for_revision(revision, WAIT).await.unwrap();
    assert_eq!(after.unit_record("a.service").unwrap().entries().get("m1"), Some(&released));
    assert!(after.rollout_records().contains_key("r1"), "the progress in the same revision");

    // Replaced since `snap`: the guard fails, and the progress is not written either.
    api(&reg).put_unit(&put("a.service", &v2, JobState::Launched)).await.unwrap();
    let written = leader.write_rollout_progress_with_entries(&snap, "r2", &progress, &[], &[], &entries).await.unwrap();
    assert_eq!(written, None);
    assert!(!refl.sync(WAIT).await.unwrap().rollout_records().contains_key("r2"));
}

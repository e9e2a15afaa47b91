//! Live check of the agent runtime ([`fleetd::agent::Agent`]) in real machine containers against a real etcd. Driven
//! by `agent_probe.sh`, which starts a 2-machine harness cluster without fleet and runs this binary in it:
//!
//! * `agent_probe agent <etcd-url>` — what fleetd will do for the agent: register this machine under a lease,
//!   run the agent, and on lease loss (etcd gone for longer than the TTL) register again under a new lease and
//!   run again, like the monitor restart (spec §1.4). SIGTERM: purge and leave (spec §1.5). SIGUSR1: debug dump.
//! * `agent_probe drive <etcd-url> <this-machine> <other-machine>` — plays engine and fleetctl through the
//!   registry and checks what the agents do: load/start/stop/unload with states and launched markers, a
//!   same-machine replace (old `ExecStopPost` before new `ExecStartPre`) and a cross-machine move of a changed
//!   unit (the new machine's start waits until the old machine's stop completed).
//! * `agent_probe after-outage <etcd-url> <m1> <m2>` — after etcd was down: the units still run and their
//!   states and markers are bound to the machines' new leases.
//! * `agent_probe purged <etcd-url> <machine>` — after SIGTERM: no state or marker of that machine is left.
//!
//! Prints one `PASS`/`FAIL` line per check and exits 1 on the first failure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleet_core::model::{JobState, MachineState};
use fleet_core::unit::UnitHash;
use fleet_registry::{
    AgentSession, ApiWriter, Campaign, EtcdConfig, LeaderSession, LeaseKeeper, PlacementWrite, PutUnit, Reflector,
    Registry, Snapshot,
};
use fleet_systemd::{Bus, Systemd};
use fleetd::agent::handover::may_be_running;
use fleetd::agent::{Agent, AgentConfig};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(30);

const HELLO: &str = "[Service]\nExecStart=/bin/sleep 1000\n";
const SYNC_V1: &str = "[Service]\nExecStart=/bin/sleep 1000\nExecStopPost=/bin/sh -c 'sleep 1; date +%%s.%%N > /tmp/sync-stop-post; touch /tmp/fleetSyncReplaceFile'\n";
const SYNC_V2: &str = "[Service]\nExecStartPre=/bin/sh -c 'test -f /tmp/fleetSyncReplaceFile && date +%%s.%%N > /tmp/sync-start-pre'\nExecStart=/bin/sleep 1000\n";
const MOVE_V1: &str =
    "[Service]\nExecStart=/bin/sleep 1000\nExecStopPost=/bin/sh -c 'sleep 2; date +%%s.%%N > /tmp/move-stop-post'\n";
const MOVE_V2: &str =
    "[Service]\nExecStartPre=/bin/sh -c 'date +%%s.%%N > /tmp/move-start-pre'\nExecStart=/bin/sleep 1000\n";

fn check(ok: bool, what: &str, detail: impl std::fmt::Display) {
    println!("{} {what}: {detail}", if ok { "PASS" } else { "FAIL" });
    if !ok {
        std::process::exit(1);
    }
}

fn hash(text: &str) -> String {
    UnitHash::of(text).to_hex()
}

fn sh(cmd: &str) -> String {
    let out = std::process::Command::new("sh").arg("-c").arg(cmd).output().expect("sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn connect(url: &str) -> Registry {
    let config =
        EtcdConfig { endpoints: vec![url.to_string()], request_timeout: Duration::from_secs(2), ..Default::default() };
    loop {
        match Registry::connect(&config).await {
            Ok(r) => return r,
            Err(e) => {
                eprintln!("connect: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "fleet=info".into()))
        .with_target(false)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    match arg(0).as_str() {
        "agent" => agent(&arg(1)).await,
        "drive" => drive(&arg(1), &arg(2), &arg(3)).await,
        "after-outage" => after_outage(&arg(1), &arg(2), &arg(3)).await,
        "purged" => purged(&arg(1), &arg(2)).await,
        other => {
            eprintln!("usage: agent_probe agent|drive|after-outage|purged ... (got {other:?})");
            std::process::exit(2);
        }
    }
}

/// The agent as fleetd runs it, with the monitor's re-registration on lease loss.
async fn agent(url: &str) {
    let id = std::fs::read_to_string("/etc/machine-id").expect("machine-id").trim().to_string();
    let registry = connect(url).await;
    let systemd = Systemd::connect(Bus::System).await.expect("system bus");
    let config = AgentConfig { machine_id: id.clone(), units_dir: "/run/fleet/units".into(), ttl: TTL };
    let mut agent = Agent::new(config, systemd).await.expect("agent");
    let reflector = Reflector::start(&registry);
    let shutdown = CancellationToken::new();
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM");
    let mut usr1 = signal(SignalKind::user_defined1()).expect("SIGUSR1");
    let debug = agent.debug_handle();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = term.recv() => { shutdown.cancel(); return; }
                    _ = usr1.recv() => println!("{}", debug.dump()),
                }
            }
        });
    }
    let me = MachineState { id: id.clone(), version: "agent-probe".into(), ..Default::default() };
    let mut round = 0;
    while !shutdown.is_cancelled() {
        round += 1;
        let lease = loop {
            match LeaseKeeper::grant(&registry, TTL).await {
                Ok(l) => match registry.register_machine(&me, l.id()).await {
                    Ok(_) => break l,
                    Err(e) => eprintln!("register: {e}; retrying"),
                },
                Err(e) => eprintln!("lease: {e}; retrying"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => break_purge(&mut agent, &registry, &me.id, None).await,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        };
        tracing::info!(round, lease = format_args!("{:x}", lease.id()), "agent_probe: registered");
        let stop = shutdown.child_token();
        let lost = {
            let stop = stop.clone();
            let mut status = lease.status();
            tokio::spawn(async move {
                while status.changed().await.is_ok() {
                    if !matches!(*status.borrow(), fleet_registry::LeaseStatus::Alive) {
                        tracing::warn!("agent_probe: lease lost; restarting the agent under a new lease");
                        stop.cancel();
                        return;
                    }
                }
            })
        };
        let session = AgentSession::new(registry.clone(), &me.id, lease.id()).expect("a valid machine ID");
        if let Err(e) =
            agent.run(session, reflector.subscribe(), lease.alive_until(), fleet_registry::LAYOUT_VERSION, stop).await
        {
            eprintln!("agent run: {e}");
        }
        lost.abort();
        if shutdown.is_cancelled() {
            break_purge(&mut agent, &registry, &me.id, Some(lease)).await;
        }
        // Presumed lost, but etcd may still hold it (leases survive an etcd restart): give it up, so the
        // presence key can be created again under the next lease.
        let _ = lease.revoke().await;
    }
}

/// SIGTERM: purge, give up the lease (its presence key goes with it), exit.
async fn break_purge(agent: &mut Agent, registry: &Registry, machine: &str, lease: Option<LeaseKeeper>) -> ! {
    let session = lease.as_ref().and_then(|l| AgentSession::new(registry.clone(), machine, l.id()).ok());
    let r = agent.purge(session.as_ref(), Duration::from_secs(30)).await;
    tracing::info!(ok = r.is_ok(), "agent_probe: purged");
    if let Some(lease) = lease {
        let _ = lease.revoke().await;
    }
    std::process::exit(if r.is_ok() { 0 } else { 1 });
}

fn state_of<'a>(s: &'a Snapshot, unit: &str, machine: &str) -> Option<&'a fleet_registry::StateRecord> {
    s.state_record(unit, machine)
}

fn marker_of(s: &Snapshot, unit: &str, machine: &str) -> Option<String> {
    s.unit_record(unit).and_then(|r| r.launched(machine)).map(|h| h.to_string())
}

async fn wait<T>(r: &Reflector, what: &str, f: impl FnMut(&Snapshot) -> Option<T>) -> T {
    match r.wait_for(WAIT, what, f).await {
        Ok(v) => v,
        Err(e) => {
            check(false, what, e);
            unreachable!()
        }
    }
}

async fn put(registry: &Registry, name: &str, text: &str, desired: JobState) {
    let h = hash(text);
    ApiWriter::new(registry.clone())
        .put_unit(&PutUnit { name, text, hash: &h, desired, reschedule: false, no_restart: false })
        .await
        .expect("put unit");
}

/// The engine's placements, written as the elected leader would write them (no engine runs in the probe).
/// The lease is returned to be kept alive while the session writes.
async fn leader(registry: &Registry, machine: &str) -> (LeaderSession, LeaseKeeper) {
    let lease = LeaseKeeper::grant(registry, Duration::from_secs(60)).await.expect("driver lease");
    match registry.campaign(machine, lease.id()).await.expect("campaign") {
        Campaign::Leader(session) => (session, lease),
        Campaign::Follower { leader } => panic!("no engine runs in the probe, yet {leader} leads"),
    }
}

async fn drive(url: &str, m1: &str, m2: &str) {
    let registry = connect(url).await;
    let api = ApiWriter::new(registry.clone());
    let (engine, _engine_lease) = leader(&registry, m1).await;
    let reflector = Reflector::start(&registry);
    wait(&reflector, "both machines present", |s| (s.machine(m1).is_some() && s.machine(m2).is_some()).then_some(()))
        .await;
    check(true, "both machines present", format!("{} and {}", &m1[..8], &m2[..8]));

    // 1. Load, start, stop, unload on this machine, with states and markers.
    put(&registry, "probe-hello.service", HELLO, JobState::Launched).await;
    engine.placement(&PlacementWrite::Schedule { unit: "probe-hello.service", machine: m1 }).await.expect("schedule");
    let h = hash(HELLO);
    wait(&reflector, "hello active and marked launched", |s| {
        let st = state_of(s, "probe-hello.service", m1)?;
        (&*st.active_state == "active"
            && *st.hash == *h
            && marker_of(s, "probe-hello.service", m1).as_deref() == Some(&h))
        .then_some(())
    })
    .await;
    check(true, "start: state active with hash, launched marker", &h[..8]);
    let enabled = sh("systemctl is-enabled probe-hello.service");
    check(enabled == "linked-runtime", "unit linked as a runtime unit", &enabled);
    api.set_desired("probe-hello.service", JobState::Loaded).await.expect("desired");
    wait(&reflector, "hello stopped and unmarked", |s| {
        let st = state_of(s, "probe-hello.service", m1)?;
        (&*st.active_state == "inactive" && marker_of(s, "probe-hello.service", m1).is_none()).then_some(())
    })
    .await;
    check(true, "stop: state inactive, marker removed", sh("systemctl is-active probe-hello.service"));
    api.set_desired("probe-hello.service", JobState::Inactive).await.expect("desired");
    engine
        .placement(&PlacementWrite::Unschedule { unit: "probe-hello.service", machine: m1 })
        .await
        .expect("unschedule");
    wait(&reflector, "hello state removed", |s| state_of(s, "probe-hello.service", m1).is_none().then_some(())).await;
    let gone = !std::path::Path::new("/run/fleet/units/probe-hello.service").exists();
    check(gone, "unload: state removed, unit file deleted", sh("systemctl is-enabled probe-hello.service"));

    // 2. Replace on the same machine: old ExecStopPost completes before the new ExecStartPre.
    sh("rm -f /tmp/fleetSyncReplaceFile /tmp/sync-stop-post /tmp/sync-start-pre");
    put(&registry, "probe-sync.service", SYNC_V1, JobState::Launched).await;
    engine.placement(&PlacementWrite::Schedule { unit: "probe-sync.service", machine: m1 }).await.expect("schedule");
    let h1 = hash(SYNC_V1);
    wait(&reflector, "sync v1 active", |s| {
        state_of(s, "probe-sync.service", m1).filter(|st| &*st.active_state == "active" && *st.hash == *h1).map(|_| ())
    })
    .await;
    check(true, "sync v1 active", &h1[..8]);
    put(&registry, "probe-sync.service", SYNC_V2, JobState::Launched).await;
    let h2 = hash(SYNC_V2);
    wait(&reflector, "sync v2 active and marked", |s| {
        let st = state_of(s, "probe-sync.service", m1)?;
        (&*st.active_state == "active"
            && *st.hash == *h2
            && marker_of(s, "probe-sync.service", m1).as_deref() == Some(&h2))
        .then_some(())
    })
    .await;
    let stop_post = sh("cat /tmp/sync-stop-post");
    let start_pre = sh("cat /tmp/sync-start-pre");
    let ordered = matches!((stop_post.parse::<f64>(), start_pre.parse::<f64>()), (Ok(a), Ok(b)) if a < b);
    check(ordered, "same-machine replace: ExecStopPost(v1) < ExecStartPre(v2)", format!("{stop_post} < {start_pre}"));
    let result = sh("systemctl show -p Result --value probe-sync.service");
    check(result == "success", "new version active with Result=success", &result);

    // 3. A changed unit moves to the other machine: its start waits until this machine's stop completed.
    sh("rm -f /tmp/move-stop-post");
    put(&registry, "probe-move.service", MOVE_V1, JobState::Launched).await;
    engine.placement(&PlacementWrite::Schedule { unit: "probe-move.service", machine: m1 }).await.expect("schedule");
    let mv1 = hash(MOVE_V1);
    wait(&reflector, "move v1 active here", |s| {
        state_of(s, "probe-move.service", m1).filter(|st| &*st.active_state == "active" && *st.hash == *mv1).map(|_| ())
    })
    .await;
    check(true, "move v1 active on this machine", &mv1[..8]);
    // What an engine does for a replacement that lands elsewhere: new body, unschedule, schedule there.
    put(&registry, "probe-move.service", MOVE_V2, JobState::Launched).await;
    engine
        .placement(&PlacementWrite::Unschedule { unit: "probe-move.service", machine: m1 })
        .await
        .expect("unschedule");
    engine.placement(&PlacementWrite::Schedule { unit: "probe-move.service", machine: m2 }).await.expect("schedule");
    let mv2 = hash(MOVE_V2);
    let mut rx = reflector.subscribe();
    let mut seen: Vec<String> = Vec::new();
    let mut both_running = None;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = Arc::clone(&rx.borrow_and_update());
        let a = state_of(&s, "probe-move.service", m1).map(|st| st.active_state.to_string());
        let b = state_of(&s, "probe-move.service", m2).map(|st| (st.active_state.to_string(), st.hash.to_string()));
        let row = format!(
            "here={} there={}",
            a.as_deref().unwrap_or("-"),
            b.as_ref().map_or("-".to_string(), |(st, h)| format!("{st}@{}", &h[..8]))
        );
        if seen.last() != Some(&row) {
            seen.push(row.clone());
        }
        let there_up = b.as_ref().is_some_and(|(st, _)| st == "active" || st == "activating");
        if there_up && a.as_deref().is_some_and(may_be_running) {
            both_running = Some(row.clone());
        }
        if b.as_ref().is_some_and(|(st, h)| st == "active" && *h == mv2) && a.is_none() {
            break;
        }
        if tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
            check(false, "move v2 active on the other machine", seen.join(" → "));
        }
    }
    println!("INFO move states seen: {}", seen.join(" → "));
    check(
        seen.iter().any(|r| r.starts_with("here=deactivating")),
        "state published during the long stop job",
        "deactivating seen",
    );
    check(both_running.is_none(), "never running on both machines", both_running.unwrap_or_else(|| "ok".into()));
    println!("STOP_POST_HERE {}", sh("cat /tmp/move-stop-post"));
    wait(&reflector, "move marked launched there, unmarked here", |s| {
        (marker_of(s, "probe-move.service", m2).as_deref() == Some(&mv2)
            && marker_of(s, "probe-move.service", m1).is_none())
        .then_some(())
    })
    .await;
    check(true, "markers follow the move", "there=v2, here=none");
}

/// After etcd was down longer than the TTL: units still run, and their states and markers were re-bound to the
/// machines' new leases.
async fn after_outage(url: &str, m1: &str, m2: &str) {
    let registry = connect(url).await;
    let reflector = Reflector::start(&registry);
    let units = [("probe-sync.service", m1, hash(SYNC_V2)), ("probe-move.service", m2, hash(MOVE_V2))];
    let leases = wait(&reflector, "states, markers and presence back", |s| {
        let mut leases = BTreeMap::new();
        for (unit, m, h) in &units {
            let st = s.state_record(unit, m)?;
            if &*st.active_state != "active" || *st.hash != **h || marker_of(s, unit, m).as_deref() != Some(h) {
                return None;
            }
            leases.insert(m.to_string(), s.machine_records().get(*m)?.lease);
        }
        Some(leases)
    })
    .await;
    check(true, "units active with states and markers after the outage", format!("{leases:x?}"));
    let mut client = registry.client();
    for (unit, m, _) in &units {
        for key in [registry.keys().state(unit, m), registry.keys().unit_launched(unit, m)] {
            let resp = client.get(key.as_str(), None).await.expect("get");
            let lease = resp.kvs().first().map_or(0, |kv| kv.lease());
            check(
                lease == leases[*m] && lease != 0,
                "key bound to the machine's new lease",
                format!("{key} {lease:x}"),
            );
        }
    }
}

async fn purged(url: &str, machine: &str) {
    let registry = connect(url).await;
    let reflector = Reflector::start(&registry);
    let left = wait(&reflector, "no state or marker of the machine left", |s| {
        let states = s.state_records().values().filter(|per| per.contains_key(machine)).count();
        let markers = s.unit_records().values().filter(|r| r.launched(machine).is_some()).count();
        (states + markers == 0).then_some(s.machine(machine).is_some())
    })
    .await;
    check(true, "purge removed the machine's states and markers", format!("presence left: {left}"));
}

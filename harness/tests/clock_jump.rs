//! A wall clock an hour off (issue 37). The machines share the host's clock, so one fleetd runs under libfaketime
//! (`LD_PRELOAD`, `FAKETIME`, the monotonic clock left alone, as when NTP steps a wall clock): m2's fleetd an hour
//! ahead, m3's an hour behind, m1's right. fleet times leases, the at-most-once fence, health checks and rollout
//! steps by monotonic clocks and etcd's leases, and a leader's wall-clock stamps are read relative to the leader that
//! wrote them (`engine::rollouts::LeaderClock`), so this must change nothing:
//!
//! - no lease is lost: `list-machines` shows the three machines at every look, all along;
//! - no unit restarts: six template instances and an `AtMostOnce=true` unit keep their MainPIDs throughout, also
//!   through a restart of m1's fleetd that hands the engine to a skewed machine;
//! - no rollout step fails early: `restart --rolling` of a health-checked global unit (`--min-healthy=8s`,
//!   `--progress-deadline=150s`), driven first by one skewed machine's engine and then, after its fleetd restarts, by
//!   the other's (two hours apart), finishes (exit 0), and every machine runs a new process of it;
//! - the times each fleetd shows are its own: the audit record of a write through m2's API is stamped an hour ahead
//!   of the host's clock, through m3's an hour behind.
//!
//! Broken on purpose, then reverted: the leader's clock not rebased (`rollout::rebase` made a no-op). Handed from
//! m3 (an hour behind) to m2 (an hour ahead), the rollout's stamps looked two hours old and it paused: `fleetctl
//! restart --rolling global.service, its leader changed from one skewed machine to the other: exit 2; … waiting for
//! its health check (unknown) …`. Handed from m2 to m3, they lay two hours ahead, no step ever became healthy long
//! enough, and fleetctl had not returned when its 120 s ran out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fleet_harness::wait::{parse_table, table_args};
use fleet_harness::{Check, Cluster, Machine, Output};

const INSTANCES: usize = 6;
const PLAIN: &str = "[Service]\nExecStart=/bin/sleep 100000\n";
const ONCE: &str = "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\nAtMostOnce=true\n";
const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\nGlobal=true\nHealthCheck=/bin/true\n\
                      HealthCheckInterval=500ms\n";
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const HOUR_MS: i64 = 3_600_000;

fn ok(out: &Output, what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
}

fn host_now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Runs `m`'s fleetd with its wall clock `offset` (libfaketime's form, e.g. `+1h`) off, monotonic time untouched.
async fn skew(m: &Machine, offset: &str) {
    let dropin = format!(
        "[Service]\nEnvironment=LD_PRELOAD={LIBFAKETIME} FAKETIME={offset} FAKETIME_DONT_FAKE_MONOTONIC=1 \
         FAKETIME_NO_CACHE=1\n"
    );
    m.exec_ok(&["mkdir", "-p", "/etc/systemd/system/fleet.service.d"]).await.unwrap();
    m.write_file("/etc/systemd/system/fleet.service.d/clock.conf", &dropin).await.unwrap();
    m.exec_ok(&["sh", "-c", "systemctl daemon-reload && systemctl restart fleet.service"]).await.unwrap();
    let env = m.exec_ok(&["sh", "-c", "tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value fleet)/environ"]);
    let env = env.await.unwrap().stdout;
    assert!(env.contains(&format!("FAKETIME={offset}")), "{}'s fleetd runs without the offset: {env}", m.name());
}

/// `list-units` rows (unit, active) through machine 1.
async fn rows(cluster: &Cluster) -> Result<Vec<(String, String)>, String> {
    let out = cluster.fleetctl(1, &table_args("list-units", "unit,active")).await.map_err(|e| e.to_string())?;
    if !out.success() {
        return Err(out.describe());
    }
    let rows = parse_table(&out.stdout, &["unit", "active"]);
    Ok(rows.iter().map(|r| (r.get("unit").to_string(), r.get("active").to_string())).collect())
}

/// How far ahead of the host's clock the newest audit record read through `slot`'s API is stamped, in ms, after
/// a write through that API.
async fn audit_offset_ms(cluster: &Cluster, slot: usize, dir: &std::path::Path) -> i64 {
    let name = format!("probe-{slot}.service");
    let path = dir.join(&name);
    std::fs::write(&path, PLAIN).unwrap();
    let before = host_now_ms();
    ok(&cluster.fleetctl(slot, &["submit", &path.display().to_string()]).await.unwrap(), "fleetctl submit");
    let out = cluster.fleetctl(slot, &["audit", "--output=json", &name]).await.unwrap();
    ok(&out, "fleetctl audit");
    let records: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    let at = records["records"]
        .as_array()
        .and_then(|all| all.iter().filter_map(|r| r["atMs"].as_i64()).max())
        .unwrap_or_else(|| panic!("no audit record of {name} through m{slot}: {}", out.stdout));
    at - before
}

/// Restarts the fleetd of the leading machine while it is one of `not` (it adopts its units, and its engine
/// resigns) until a machine outside `not` leads; returns that machine's slot.
async fn lead_elsewhere(cluster: &Cluster, not: &[usize]) -> usize {
    for _ in 0..8 {
        let leader = cluster.engine_leader().await.unwrap();
        match leader {
            Some(slot) if !not.contains(&slot) => return slot,
            Some(slot) => {
                let m = cluster.machine(slot).unwrap();
                m.exec_ok(&["systemctl", "restart", "fleet.service"]).await.unwrap();
            }
            None => {}
        }
        cluster
            .wait_for("an engine leads", || async {
                match cluster.engine_leader().await {
                    Ok(Some(slot)) if Some(slot) != leader => Check::Ready(slot),
                    other => Check::NotYet(format!("{other:?}")),
                }
            })
            .await
            .unwrap();
    }
    panic!("no machine outside {not:?} came to lead after 8 restarts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleetd_whose_wall_clock_is_an_hour_off_changes_nothing() {
    let cluster = Cluster::builder().machines(3).agent_ttl("3s").start().await.unwrap();
    let (m2, m3) = (cluster.machine(2).unwrap(), cluster.machine(3).unwrap());
    skew(m2, "+1h").await;
    skew(m3, "-1h").await;
    cluster.wait_for_n_machines(1, 3).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    for (slot, want) in [(2, HOUR_MS), (3, -HOUR_MS), (1, 0)] {
        let offset = audit_offset_ms(&cluster, slot, dir.path()).await;
        eprintln!("m{slot}'s audit stamp: {offset:+} ms off the host's clock");
        assert!(
            (offset - want).abs() < 120_000,
            "m{slot}'s fleetd stamps its own time ({want:+} ms), not {offset:+} ms"
        );
    }

    // Watch presence all along (polled beside the rest, never spawned, so a failure drops the cluster at once):
    // every look must show three machines.
    let stop = AtomicBool::new(false);
    let watcher = async {
        let mut looks = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let out = cluster.fleetctl(1, &table_args("list-machines", "machine")).await;
            let n = out.ok().filter(Output::success).map(|o| o.stdout.lines().filter(|l| !l.is_empty()).count());
            looks.push(n);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        looks
    };
    let body = async {
        let checked = changes_nothing(&cluster, dir.path()).await;
        stop.store(true, Ordering::Relaxed);
        checked
    };
    let (looks, ()) = tokio::join!(watcher, body);
    let short: Vec<&Option<usize>> = looks.iter().filter(|n| **n != Some(3)).collect();
    eprintln!("presence: {} looks, {} without three machines", looks.len(), short.len());
    assert!(short.is_empty(), "every look must show three machines; these did not: {short:?} of {}", looks.len());
}

/// Units started across the machines keep their processes while the engine passes from one skewed machine to the
/// other in the middle of a rolling restart, which must finish.
async fn changes_nothing(cluster: &Cluster, dir: &std::path::Path) {
    let write = |name: &str, text: &str| -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    write("work@.service", PLAIN);
    let mut kept: Vec<String> = (1..=INSTANCES).map(|i| format!("work@{i}.service")).collect();
    kept.push("once.service".into());
    let mut args = vec!["start".to_string()];
    args.extend(kept.iter().map(|n| write(n, if n == "once.service" { ONCE } else { PLAIN })));
    args.push(write("global.service", GLOBAL));
    ok(&cluster.fleetctl(1, &args.iter().map(String::as_str).collect::<Vec<_>>()).await.unwrap(), "fleetctl start");
    cluster
        .wait_for("every instance and once.service active once, global.service on all three", || async {
            match rows(cluster).await {
                Ok(rows) => {
                    let count = |u: &str| rows.iter().filter(|(n, a)| n == u && a == "active").count();
                    if kept.iter().all(|u| count(u) == 1) && count("global.service") == 3 {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("{rows:?}"))
                    }
                }
                Err(e) => Check::NotYet(e),
            }
        })
        .await
        .unwrap();
    let before = cluster.main_pids(&kept).await.unwrap();
    assert_eq!(before.len(), kept.len(), "{before:?}");

    // A skewed machine leads: restart m1's fleetd (it adopts its units) until another engine wins.
    let first = lead_elsewhere(cluster, &[1]).await;
    let other = if first == 2 { 3 } else { 2 };

    // The rolling restart is driven by one skewed leader, then handed to the other, two hours apart: the stamps the
    // first wrote (step released, healthy since, the rollout's start) are an hour in the second's future or past.
    let globals = vec!["global.service".to_string()];
    let old = cluster.main_pids(&globals).await.unwrap();
    let rolling = async {
        let args = ["restart", "--rolling", "--min-healthy=8s", "--progress-deadline=150s", "global.service"];
        tokio::time::timeout(Duration::from_secs(180), cluster.fleetctl(1, &args)).await
    };
    let handover = async {
        cluster
            .wait_for("the rolling restart's first machine restarted", || async {
                let now = cluster.main_pids(&globals).await.unwrap();
                if old.iter().any(|(k, pid)| now.get(k).is_some_and(|p| p != pid)) {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{now:?}"))
                }
            })
            .await
            .unwrap();
        let second = lead_elsewhere(cluster, &[first, 1]).await;
        eprintln!("rollout handed from m{first} to m{second}");
        assert_eq!(second, other);
        second
    };
    let (out, second) = tokio::join!(rolling, handover);
    let out = match out {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("fleetctl restart --rolling, handed from m{first} to m{second}: {e}"),
        Err(_) => panic!("the rolling restart handed from m{first} to m{second} had not ended after 180 s"),
    };
    ok(&out, "fleetctl restart --rolling global.service, its leader changed from one skewed machine to the other");
    let new = cluster.main_pids(&globals).await.unwrap();
    assert_eq!(new.len(), 3, "global.service active on every machine after the rolling restart: {new:?}");
    for (key, pid) in &new {
        assert_ne!(old.get(key), Some(pid), "{key:?} was not restarted by the rolling restart");
    }

    let after = cluster.main_pids(&kept).await.unwrap();
    assert_eq!(after, before, "no unit restarted or moved");
}

//! Health checks (issue 34, docs/health.md) on a real machine: a unit's `[X-Fleet] HealthCheck=` runs on the
//! machine that runs the unit, its status is published with the unit's state and shows in `list-units
//! --fields=...,health`, `GET /fleet/v1/state` and `/metrics`; a restart by hand is checked again (the new run's
//! result, not the old one's); a unit without a check shows `-` and publishes no health.

use std::path::PathBuf;

use fleet_harness::wait::{parse_table, table_args};
use fleet_harness::{Cluster, Output};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Healthy only while `/run/web-ok` holds the PID of the unit's current main process: a restart makes it fail
/// until the file is written again, so the test sees which run a published status belongs to.
const WEB: &str = "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\n\
HealthCheck=pid=$(systemctl show -p MainPID --value $FLEET_UNIT); if [ \"$(cat /run/web-ok 2>/dev/null)\" = \"$pid\" ]; then echo serving $pid; else echo not serving $pid; exit 1; fi\n\
HealthCheckInterval=300ms\nHealthCheckTimeout=2s\n";
const PLAIN: &str = "[Service]\nExecStart=/bin/sleep 100000\n";
const FIELDS: &str = "unit,active,health";

fn ok(out: &Output, what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
}

/// Waits until list-units shows `want` as (unit, active, health) rows.
async fn wait_health(cluster: &Cluster, want: &[(&str, &str, &str)]) {
    let want: Vec<(String, String, String)> =
        want.iter().map(|(u, a, h)| (u.to_string(), a.to_string(), h.to_string())).collect();
    let what = format!("list-units to show (unit, active, health) {want:?}");
    cluster
        .wait_fleetctl(1, &table_args("list-units", FIELDS), &what, |out| {
            let rows: Vec<(String, String, String)> = parse_table(out, &["unit", "active", "health"])
                .iter()
                .map(|r| (r.get("unit").to_string(), r.get("active").to_string(), r.get("health").to_string()))
                .collect();
            if rows == want { Ok(()) } else { Err(format!("seen {rows:?}")) }
        })
        .await
        .unwrap();
}

/// One `GET` over plain HTTP/1.1 from the host: the body.
async fn http_get(addr: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "GET {path}: {answer}");
    answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

async fn main_pid(cluster: &Cluster) -> String {
    let m1 = cluster.machine(1).unwrap();
    let out = m1.exec_ok(&["systemctl", "show", "-p", "MainPID", "--value", "web.service"]).await.unwrap();
    out.stdout.trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_units_health_check_runs_on_its_machine_and_is_published_with_its_state() {
    let cluster = Cluster::builder().machines(1).agent_ttl("3s").start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| -> PathBuf { dir.path().join(name) };
    std::fs::write(path("web.service"), WEB).unwrap();
    std::fs::write(path("plain.service"), PLAIN).unwrap();
    let (web, plain) = (path("web.service").display().to_string(), path("plain.service").display().to_string());
    ok(&cluster.fleetctl(1, &["start", &web, &plain]).await.unwrap(), "fleetctl start");

    // Active, but the check fails until /run/web-ok names its process.
    wait_health(&cluster, &[("plain.service", "active", "-"), ("web.service", "active", "unhealthy")]).await;
    let m1 = cluster.machine(1).unwrap();
    let pid = main_pid(&cluster).await;
    m1.exec_ok(&["sh", "-c", &format!("echo {pid} > /run/web-ok")]).await.unwrap();
    wait_health(&cluster, &[("plain.service", "active", "-"), ("web.service", "active", "healthy")]).await;

    // The default columns are the original's.
    let listed = cluster.fleetctl(1, &["list-units"]).await.unwrap();
    ok(&listed, "fleetctl list-units");
    assert!(listed.stdout.starts_with("UNIT") && !listed.stdout.contains("HEALTH"), "{}", listed.stdout);

    // The API's states and the metrics.
    let api = format!("{}:{}", m1.ip(), fleet_harness::API_PORT);
    let states: serde_json::Value = serde_json::from_str(&http_get(&api, "/fleet/v1/state").await).unwrap();
    let state = |unit: &str| {
        states["states"].as_array().unwrap().iter().find(|s| s["name"] == unit).cloned().unwrap_or_else(|| {
            panic!("no state of {unit} in {states}");
        })
    };
    let health = &state("web.service")["health"];
    assert_eq!(health["status"], "healthy", "{states}");
    assert_eq!(health["output"], format!("serving {pid}"), "{states}");
    assert!(health["sinceMs"].as_u64().is_some_and(|t| t > 0), "{states}");
    assert!(state("plain.service").get("health").is_none(), "no health key without a check: {states}");
    let metrics = http_get(&api, "/metrics").await;
    let series = format!("fleet_unit_health{{unit=\"web.service\",machine=\"{}\",status=\"healthy\"}} 1", m1.id());
    assert!(metrics.contains(&series), "{series} not in {metrics}");
    assert!(!metrics.contains("unit=\"plain.service\""), "{metrics}");

    // Restarted by hand: the new run is checked (the file names the old PID: unhealthy), never the old run's pass.
    m1.exec_ok(&["systemctl", "restart", "web.service"]).await.unwrap();
    wait_health(&cluster, &[("plain.service", "active", "-"), ("web.service", "active", "unhealthy")]).await;
    let new_pid = main_pid(&cluster).await;
    assert_ne!(new_pid, pid, "systemctl restart started a new process");
    m1.exec_ok(&["sh", "-c", &format!("echo {new_pid} > /run/web-ok")]).await.unwrap();
    wait_health(&cluster, &[("plain.service", "active", "-"), ("web.service", "active", "healthy")]).await;

    // fleetd restarts (its units adopted by the next process): the unit keeps running and its health stays as published, `sinceMs` included —
    // the new process holds the state back until its first check instead of publishing `unknown` meanwhile.
    let since = |states: &serde_json::Value| {
        let web = states["states"].as_array().unwrap().iter().find(|s| s["name"] == "web.service").cloned();
        web.map(|s| (s["health"]["status"].clone(), s["health"]["sinceMs"].clone()))
    };
    let states: serde_json::Value = serde_json::from_str(&http_get(&api, "/fleet/v1/state").await).unwrap();
    let before = since(&states).unwrap();
    assert_eq!(before.0, "healthy", "{states}");
    m1.exec_ok(&["systemctl", "restart", "fleet.service"]).await.unwrap();
    let what = "the restarted fleetd to publish web.service's state after its first health check";
    cluster
        .wait_for(what, || async {
            let journal = m1.exec(&["journalctl", "-u", "fleet.service", "-o", "cat", "--no-pager"]).await;
            let seen = journal.map(|o| o.stdout).unwrap_or_default();
            match seen.lines().find(|l| l.contains("first health check after fleetd restarted")) {
                Some(line) => fleet_harness::Check::Ready(line.to_string()),
                None => fleet_harness::Check::NotYet(format!("{} journal lines, none about it", seen.lines().count())),
            }
        })
        .await
        .unwrap();
    let states: serde_json::Value = serde_json::from_str(&http_get(&api, "/fleet/v1/state").await).unwrap();
    assert_eq!(since(&states), Some(before), "health unchanged across the fleetd restart: {states}");
    assert_eq!(main_pid(&cluster).await, new_pid, "the fleetd restart touched the unit");

    // Stopped: unknown, and no check runs.
    ok(&cluster.fleetctl(1, &["stop", &web]).await.unwrap(), "fleetctl stop web.service");
    wait_health(&cluster, &[("plain.service", "active", "-"), ("web.service", "inactive", "unknown")]).await;
}

//! A full etcd (issue 37): etcd at its space quota refuses every write that adds data (its `NOSPACE` alarm). A
//! 3-machine cluster on an etcd with a small quota (`--quota-backend-bytes`, [`QUOTA`]) runs a global unit and
//! plain units; then junk is written outside fleet's prefix until etcd raises `NOSPACE`. While it is raised:
//!
//! - `fleetctl start` and `submit` of a new unit, `stop` (a desired state) and `restart --rolling` fail with exit 1
//!   and a message naming the cause; the API answers such a write `507` with that message;
//! - a `destroy` goes through: etcd takes writes that only delete (they add no data), and the API deletes a unit in
//!   one transaction — all of it or nothing;
//! - nothing stored changed otherwise (the API's units and `list-unit-files` as before, no half-written unit), the
//!   running units keep their processes, `list-units` answers, no fleetd restarted (`NRestarts`, `MainPID`);
//! - a unit stopped by hand cannot have its new state published: its agent logs a warning naming the cause a
//!   handful of times at most (not once per retry) and keeps retrying.
//!
//! Then the operator's recovery — compact, defragment, disarm — and fleet resumes with no fleetd restart: the
//! stopped unit's state is published, the refused requests are repeated successfully, a new unit starts.
//!
//! Found by this test, and fixed:
//! - `fleetctl stop` (and `unload`) ignored a refused desired-state write, as the original does, and reported
//!   success: `fleetctl stop plain.service with etcd full: want exit 1 and a message naming the cause …; got exit 0;
//!   stdout: Triggered unit plain.service stop; stderr: Successfully stopped units [plain.service].` Now: `Error
//!   setting target state for unit plain.service: googleapi: Error 507: etcd is out of space …`, exit 1.
//! - the agent warned for every retry of a state write, one line per unit per second (and per resync) for as long as
//!   etcd stayed full: `fleetd on m3 logged the probe's failing state write 18 times (want 1 to 4 …)` over the 10 s
//!   dwell. Now it warns once per unit and cause, again at the 10th, 100th … failure, and once when written again.
//!
//! Broken once on purpose, then reverted: `registry_failure` answering `NOSPACE` as any other registry failure
//! (500, empty message, as before issue 37). The test failed at the first refused request with:
//!
//! ```text
//! fleetctl start fresh.service with etcd full: want exit 1 and a message naming the cause ("etcd is out of space",
//! 507); got exit 1; stdout: (empty); stderr: Error creating units: failed creating unit fresh.service: googleapi:
//! Error 500:
//! ```

use std::time::{Duration, Instant};

use fleet_harness::wait::{parse_table, table_args};
use fleet_harness::{Check, Cluster, Machine, Output};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// etcd's backend quota: the cluster's own data is some tens of KiB, so this leaves room to run and fills in a
/// dozen junk puts of 256 KiB (under a second).
const QUOTA: u64 = 4 << 20;
const PLAIN: &str = "[Service]\nExecStart=/bin/sleep 100000\n";
const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\nGlobal=true\n";
/// Units whose processes must survive the full etcd untouched (`probe.service` is stopped by hand, `doomed.service`
/// destroyed).
const KEPT: [&str; 2] = ["global.service", "plain.service"];
/// How long the cluster lives with a full etcd before its logs are judged: many publish retries (every second and
/// every resync) of the probe's state.
const DWELL: Duration = Duration::from_secs(10);
/// How often one fleetd may warn of the failing state write of one unit: the first failure, and again at the 10th,
/// 100th … — never once per retry.
const MAX_LOGS_PER_UNIT: usize = 4;
/// What names the cause, in fleetctl's output, the API's answer and fleetd's log.
const CAUSE: &str = "etcd is out of space";

fn ok(out: &Output, what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
}

/// A fleetctl command refused for the full etcd: exit 1 and the cause named.
fn refused(out: &Output, what: &str) {
    let said = format!("{}\n{}", out.stdout, out.stderr);
    eprintln!("{what}: exit {}: {}", out.status, said.trim());
    assert!(
        out.status == 1 && said.contains(CAUSE) && said.contains("507"),
        "{what} with etcd full: want exit 1 and a message naming the cause ({CAUSE:?}, 507); got {}",
        out.describe()
    );
}

/// One HTTP/1.1 request from the host to a machine's API: status and body.
async fn http(m: &Machine, method: &str, path: &str, body: Option<&str>) -> Result<(u16, String), String> {
    let addr = format!("{}:{}", m.ip(), fleet_harness::API_PORT);
    let mut stream = tokio::net::TcpStream::connect(&addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    let body = body.unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("{method} {path}: {e}"))?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    read.map_err(|_| format!("{method} {path}: no answer within 20 s"))?
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse::<u16>().ok());
    let status = status.ok_or_else(|| format!("{method} {path}: no status line in {:?}", answer.get(..200)))?;
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// fleet.service's restart counter and main PID on a machine.
async fn fleetd_process(m: &Machine) -> (String, String) {
    let props = m.systemctl_show("fleet.service", &["NRestarts", "MainPID"]).await.unwrap();
    (props.get("NRestarts").cloned().unwrap_or_default(), props.get("MainPID").cloned().unwrap_or_default())
}

/// The machine where `unit` is active.
async fn runs_on<'a>(cluster: &'a Cluster, unit: &str) -> &'a Machine {
    let running = cluster.main_pids(&[unit]).await.unwrap();
    let (machine, _) = running.keys().next().unwrap_or_else(|| panic!("{unit} runs nowhere"));
    cluster.machines().iter().find(|m| m.name() == machine).unwrap()
}

/// fleet.service's journal on `m` since `since` (Unix seconds, the machine's clock).
async fn journal_since(m: &Machine, since: &str) -> String {
    let since = format!("@{since}");
    let out = m.exec_ok(&["journalctl", "-u", "fleet.service", "-o", "cat", "--no-pager", "--since", &since]).await;
    out.unwrap().stdout
}

/// `list-unit-files` as (unit, hash, dstate) rows without `except`: what is stored (the current states aside).
async fn stored_files(cluster: &Cluster, except: &str) -> Vec<(String, String, String)> {
    let out = cluster.fleetctl(1, &table_args("list-unit-files", "unit,hash,dstate")).await.unwrap();
    ok(&out, "fleetctl list-unit-files");
    parse_table(&out.stdout, &["unit", "hash", "dstate"])
        .iter()
        .filter(|r| r.get("unit") != except)
        .map(|r| (r.get("unit").to_string(), r.get("hash").to_string(), r.get("dstate").to_string()))
        .collect()
}

/// The API's units (`GET /fleet/v1/units`) without `except`, as JSON values: the registry as fleet reads it.
async fn stored_units(m: &Machine, except: &str) -> Vec<serde_json::Value> {
    let (status, body) = http(m, "GET", "/fleet/v1/units", None).await.unwrap();
    assert_eq!(status, 200, "GET /fleet/v1/units: {body}");
    let all: serde_json::Value = serde_json::from_str(&body).unwrap();
    let units = all["units"].as_array().cloned().unwrap_or_default();
    units.into_iter().filter(|u| u["name"] != except).collect()
}

/// `list-units` rows (unit, active) via machine 1.
async fn unit_rows(cluster: &Cluster) -> Result<Vec<(String, String)>, String> {
    let out = cluster.fleetctl(1, &table_args("list-units", "unit,active")).await.map_err(|e| e.to_string())?;
    if !out.success() {
        return Err(format!("fleetctl list-units: {}", out.describe()));
    }
    let rows = parse_table(&out.stdout, &["unit", "active"]);
    Ok(rows.iter().map(|r| (r.get("unit").to_string(), r.get("active").to_string())).collect())
}

/// Waits until `list-units` shows `unit` `active` in exactly `rows` rows.
async fn wait_listed(cluster: &Cluster, unit: &str, active: &str, rows: usize, when: &str) {
    cluster
        .wait_for(&format!("{unit} listed {active} ({rows} rows)"), || async {
            match unit_rows(cluster).await {
                Ok(all) => {
                    let seen: Vec<&(String, String)> = all.iter().filter(|(u, _)| u == unit).collect();
                    if seen.len() == rows && seen.iter().all(|(_, a)| a == active) {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("{unit}: {seen:?}"))
                    }
                }
                Err(e) => Check::NotYet(e),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{when}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_etcd_refuses_writes_by_name_loses_nothing_and_fleet_resumes_after_recovery() {
    let started = Instant::now();
    let cluster = Cluster::builder().machines(3).agent_ttl("3s").etcd_quota_bytes(QUOTA).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let units: Vec<String> =
        [("global.service", GLOBAL), ("plain.service", PLAIN), ("probe.service", PLAIN), ("doomed.service", PLAIN)]
            .iter()
            .map(|(name, text)| write(name, text))
            .collect();
    let args: Vec<&str> = ["start"].into_iter().chain(units.iter().map(String::as_str)).collect();
    ok(&cluster.fleetctl(1, &args).await.unwrap(), "fleetctl start");
    wait_listed(&cluster, "global.service", "active", 3, "the global unit did not start").await;
    for unit in ["plain.service", "probe.service", "doomed.service"] {
        wait_listed(&cluster, unit, "active", 1, "the plain units did not start").await;
    }

    let fleetds: Vec<(String, String)> = futures::future::join_all(cluster.machines().iter().map(fleetd_process)).await;
    let kept = cluster.main_pids(&KEPT).await.unwrap();
    assert_eq!(kept.len(), 3 + 1, "global.service on each machine, plain.service once: {kept:?}");
    let files_before = stored_files(&cluster, "doomed.service").await;
    let m1 = cluster.machine(1).unwrap();
    let units_before = stored_units(m1, "doomed.service").await;
    let probe_machine = runs_on(&cluster, "probe.service").await;
    let doomed_machine = runs_on(&cluster, "doomed.service").await;
    let since = m1.exec_ok(&["date", "+%s"]).await.unwrap().stdout.trim().to_string();

    // Fill etcd: junk outside fleet's prefix until etcd refuses a put for its quota.
    let usage = cluster.etcd().usage().await.unwrap();
    let fill = Instant::now();
    let filled = cluster.fill_etcd().await.unwrap();
    let alarms = cluster.etcd_alarms().await.unwrap();
    assert_eq!(alarms, ["NOSPACE"], "etcd's alarms after filling it ({filled:?})");
    eprintln!(
        "etcd filled: {} KiB before, {} puts of {} KiB in {:.1?}; refused with {:?}",
        usage.db_size >> 10,
        filled.puts,
        fleet_harness::cluster::FILL_CHUNK >> 10,
        fill.elapsed(),
        filled.refusal.lines().last().unwrap_or_default()
    );

    // Writes are refused, by name.
    let fresh = write("fresh.service", PLAIN);
    let other = write("other.service", PLAIN);
    refused(&cluster.fleetctl(1, &["start", "--no-block", &fresh]).await.unwrap(), "fleetctl start fresh.service");
    refused(&cluster.fleetctl(2, &["submit", &other]).await.unwrap(), "fleetctl submit other.service");
    refused(
        &cluster.fleetctl(3, &["stop", "--no-block", "plain.service"]).await.unwrap(),
        "fleetctl stop plain.service",
    );
    let rolling = ["restart", "--rolling", "--min-healthy=1s", "plain.service"];
    refused(&cluster.fleetctl(1, &rolling).await.unwrap(), "fleetctl restart --rolling plain.service");
    let new_unit = r#"{"name":"api.service","desiredState":"launched","options":[{"section":"Service","name":"ExecStart","value":"/bin/sleep 100000"}]}"#;
    for (method, path, body) in [
        ("PUT", "/fleet/v1/units/api.service", new_unit),
        ("PUT", "/fleet/v1/units/plain.service", r#"{"desiredState":"loaded"}"#),
    ] {
        let (status, answer) = http(m1, method, path, Some(body)).await.unwrap();
        assert!(
            status == 507 && answer.contains(CAUSE) && answer.contains("alarm disarm"),
            "{method} {path} with etcd full: want 507 naming the cause and the recovery; got {status}: {answer}"
        );
    }

    // A destroy only deletes: etcd takes it, whole.
    ok(&cluster.fleetctl(2, &["destroy", "doomed.service"]).await.unwrap(), "fleetctl destroy with etcd full");
    let (status, answer) = http(m1, "GET", "/fleet/v1/units/doomed.service", None).await.unwrap();
    assert_eq!(status, 404, "doomed.service after its destroy: {answer}");
    cluster
        .wait_for("doomed.service to stop on its machine", || async {
            let props = doomed_machine.systemctl_show("doomed.service", &["ActiveState"]).await;
            match props.as_ref().ok().and_then(|p| p.get("ActiveState")).map(String::as_str) {
                Some("inactive") | Some("failed") | None => Check::Ready(()),
                other => Check::NotYet(format!("{other:?}")),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("a unit destroyed while etcd is full was not stopped: {e}"));

    // A state change that cannot be published: the probe stopped by hand on its machine.
    probe_machine.exec_ok(&["systemctl", "stop", "probe.service"]).await.unwrap();
    let dwell = Instant::now();
    while dwell.elapsed() < DWELL {
        let rows = unit_rows(&cluster).await.unwrap_or_else(|e| panic!("list-units with etcd full: {e}"));
        assert!(rows.iter().any(|(u, _)| u == "plain.service"), "list-units with etcd full: {rows:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let rows = unit_rows(&cluster).await.unwrap();
    assert!(
        rows.contains(&("probe.service".to_string(), "active".to_string())),
        "the probe's stop was published although etcd is full (then this test fills nothing): {rows:?}"
    );

    // Nothing stored changed, nothing restarted, the units kept running.
    assert_eq!(stored_files(&cluster, "doomed.service").await, files_before, "list-unit-files changed with etcd full");
    assert_eq!(stored_units(m1, "doomed.service").await, units_before, "the API's units changed with etcd full");
    assert_eq!(cluster.main_pids(&KEPT).await.unwrap(), kept, "a running unit was stopped or restarted with etcd full");
    let now: Vec<(String, String)> = futures::future::join_all(cluster.machines().iter().map(fleetd_process)).await;
    assert_eq!(now, fleetds, "a fleetd restarted with etcd full: (NRestarts, MainPID) per machine");

    // The probe's agent says why it cannot publish, a handful of times, not once per retry.
    let journal = journal_since(probe_machine, &since).await;
    // The harness's fleetd logs at debug level; the warnings are what an operator sees.
    let probe_lines: Vec<&str> = journal
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("probe.service") && l.contains("cannot publish unit state"))
        .collect();
    assert!(
        (1..=MAX_LOGS_PER_UNIT).contains(&probe_lines.len()) && probe_lines[0].contains(CAUSE),
        "fleetd on {} logged the probe's failing state write {} times (want 1 to {MAX_LOGS_PER_UNIT}, the first \
         naming the cause {CAUSE:?}): {probe_lines:#?}",
        probe_machine.name(),
        probe_lines.len()
    );
    for m in cluster.machines() {
        let journal = journal_since(m, &since).await;
        let warned = journal.lines().filter(|l| !l.contains("DEBUG") && l.contains("out of space")).count();
        eprintln!(
            "{}: {} journal lines since the fill, {warned} above debug naming the full etcd",
            m.name(),
            journal.lines().count()
        );
    }

    // The operator's recovery: compact, defragment, disarm.
    let recovery = Instant::now();
    let revision = cluster.compact_etcd().await.unwrap();
    cluster.defrag_etcd().await.unwrap();
    cluster.disarm_etcd_alarms().await.unwrap();
    let alarms = cluster.etcd_alarms().await.unwrap();
    assert!(alarms.is_empty(), "alarms after the disarm: {alarms:?}");
    let usage = cluster.etcd().usage().await.unwrap();
    eprintln!("compacted at revision {revision}, defragmented to {} KiB, disarmed", usage.db_size >> 10);

    // Fleet resumes without a restart: the probe's state is published, and the refused requests go through.
    wait_listed(&cluster, "probe.service", "inactive", 1, "the probe's state was not published after the recovery")
        .await;
    eprintln!("the probe's state published {:.1?} after the recovery began", recovery.elapsed());
    let journal = journal_since(probe_machine, &since).await;
    assert!(
        journal.lines().any(|l| l.contains("probe.service") && l.contains("written again")),
        "fleetd on {} did not log that the probe's state was written again",
        probe_machine.name()
    );
    ok(&cluster.fleetctl(1, &rolling).await.unwrap(), "fleetctl restart --rolling plain.service after the recovery");
    ok(&cluster.fleetctl(3, &["stop", "--no-block", "plain.service"]).await.unwrap(), "fleetctl stop plain.service");
    cluster.wait_for_unit_state(1, "plain.service", "loaded").await.unwrap();
    wait_listed(&cluster, "plain.service", "inactive", 1, "plain.service did not stop after the recovery").await;
    ok(&cluster.fleetctl(2, &["submit", &other]).await.unwrap(), "fleetctl submit other.service after the recovery");
    ok(&cluster.fleetctl(1, &["start", "--no-block", &fresh]).await.unwrap(), "fleetctl start fresh.service");
    wait_listed(&cluster, "fresh.service", "active", 1, "a new unit did not start after the recovery").await;

    // Still the same fleetd processes, and the global unit never stopped.
    let now: Vec<(String, String)> = futures::future::join_all(cluster.machines().iter().map(fleetd_process)).await;
    assert_eq!(now, fleetds, "a fleetd restarted over the full etcd and its recovery");
    let global_before: Vec<_> = kept.iter().filter(|((_, u), _)| u == "global.service").collect();
    let global_now = cluster.main_pids(&["global.service"]).await.unwrap();
    let global_now: Vec<_> = global_now.iter().collect();
    assert_eq!(global_now, global_before, "global.service was restarted over the full etcd and its recovery");
    eprintln!("test took {:.1?}", started.elapsed());
}

//! Hostile records (issue 36): a record that does not parse is an error for that record, logged with its key and
//! shown where it matters; never a panic, never a stall. A cluster of three machines runs a global unit, plain
//! units and a finished rolling restart; then records no fleet writer would write are put straight into etcd under
//! the cluster's prefix — bad JSON, JSON of the wrong type or shape, 1 MiB values, unknown fields, values bound to no
//! lease, and keys with bad names (`..`, unicode, 4 KiB, control characters, invalid unit types, malformed hashes and
//! IDs) — for every record kind: unit object, desired state, target, launched and restarted markers, body, unit
//! state, machine object and metadata, rollout spec, control and progress, the engine leader and engine version keys
//! and the layout version. A rollout spec that decodes but holds `u64::MAX` times (an overflow in every sum of the
//! rollout decision) is driven for a unit of its own.
//!
//! While and after they are written: every fleetd keeps its process (`NRestarts` and `MainPID` of fleet.service
//! unchanged, no `panicked` in its journal: the harness runs a debug fleetd, whose panics unwind where the shipped
//! one aborts), every API answers without a 5xx, the running units keep their processes, the finished rollout whose
//! progress was overwritten shows the error in `GET /rollouts/<id>` and `fleetctl rollout-status`, a new unit is
//! scheduled by a leader and started and stopped, `list-machines` shows the three machines only, and each fleetd
//! logs a hostile key a bounded number of times (once per read, not once per pass). A failure names what broke: the
//! key, the machine, the unit, the request.
//!
//! Broken once on purpose, then reverted: `Snapshot::apply` decoding rollout progress with
//! `.expect("rollout progress decodes")` (the review's finding) instead of an error for the record. Every fleetd's
//! registry reflector died on the overwritten progress, and the test failed at the next API check with:
//!
//! ```text
//! after writing "rollouts/plain-a-1796420938139/progress" (rollout progress: wrong type (a real rollout)):
//! GET /fleet/v1/units on m1 answered 503: {"error":{"code":503,"message":"fleet server unable to communicate with
//! etcd"}}; panics in fleetd journals: ["m1: thread 'tokio-rt-worker' (159) panicked at
//! crates/core/src/store/snapshot.rs:428:103: rollout progress decodes: DecodeError { key: "/fleet_harness/
//! fh3a1a8e80/rollouts/plain-a-1796420938139/progress", what: "rollout progress", reason: "invalid type: string
//! \"nope\", expected struct RolloutProgress at line 1 column 6", value: "\"nope\"" }", "m2: …", "m3: …"]
//! ```
//!
//! Against the code before issue 36 it failed with `fresh.service did not become launched with the hostile records
//! in place: waited 29.9s …` (the lease-less leader key and the unreadable engine version stopped every engine).

use std::process::Stdio;
use std::time::Duration;

use fleet_harness::wait::{parse_table, table_args};
use fleet_harness::{Check, Cluster, Machine, Output};
use sha1::{Digest, Sha1};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PLAIN: &str = "[Service]\nExecStart=/bin/sleep 100000\n";
const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\nGlobal=true\n";
/// Units whose processes must survive the hostile writes untouched.
const KEPT: [&str; 3] = ["global.service", "plain-a.service", "plain-b.service"];
/// How long the cluster lives with the hostile records before the checks of restarts, processes and logs.
const DWELL: Duration = Duration::from_secs(12);
/// How much one fleetd may log from the first hostile write to the end of the test: the hostile values add up to
/// several MiB, of which a log line shows at most a few hundred bytes.
const MAX_JOURNAL_BYTES: usize = 128 << 10;
/// How often one fleetd may log one hostile key: once per read of it (each write, each re-list of the registry)
/// and by the few components that meet it. A log line per pass or per loop would be far more.
const MAX_LOGS_PER_KEY: usize = 6;

fn ok(out: &Output, what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
}

fn sha1_hex(text: &[u8]) -> String {
    hex::encode(Sha1::digest(text))
}

/// One record as a hostile client writes it: the key below the prefix, the value, and what it is.
struct Hostile {
    key: String,
    value: Vec<u8>,
    what: &'static str,
}

fn hostile(key: impl Into<String>, value: impl Into<Vec<u8>>, what: &'static str) -> Hostile {
    Hostile { key: key.into(), value: value.into(), what }
}

/// Every hostile record, by kind. A few overwrite records of the running cluster: the progress of the finished
/// `rollout`, unit states that machine `m1` publishes. `victim_hash`: the version of the unit a decodable spec of
/// `u64::MAX` times restarts.
fn hostile_records(m1: &str, rollout: &str, victim_hash: &str) -> Vec<Hostile> {
    let mib = |c: u8| vec![c; 1 << 20];
    let huge_json = format!("{{\"name\":\"{}\"}}", "x".repeat(1 << 20)).into_bytes();
    let long_name = format!("{}.service", "l".repeat(4096));
    let garbage_body = "[Service\nExecStart=".to_string();
    let garbage_hash = sha1_hex(garbage_body.as_bytes());
    let huge_body_hash = sha1_hex(&mib(b'#'));
    let max = u64::MAX;
    let mut all = vec![
        // Unit objects.
        hostile("units/hostile-a.service/object", "{\"name\":", "unit object: bad JSON"),
        hostile("units/hostile-a.service/desired", "launched", "desired state of a unit whose object is bad JSON"),
        hostile("units/hostile-b.service/object", "[1,2,3]", "unit object: wrong type"),
        hostile("units/hostile-c.service/object", "{\"name\":5,\"hash\":true}", "unit object: wrong field types"),
        hostile("units/hostile-d.service/object", huge_json.clone(), "unit object: 1 MiB"),
        hostile(
            "units/hostile-e.service/object",
            format!("{{\"name\":\"hostile-e.service\",\"hash\":\"{garbage_hash}\",\"future\":{{\"x\":[1]}}}}"),
            "unit object: unknown fields, body that does not parse",
        ),
        hostile("units/hostile-e.service/desired", "launched", "desired state of a unit whose body does not parse"),
        hostile(format!("bodies/{garbage_hash}"), garbage_body.clone(), "body that does not parse"),
        hostile(
            "units/hostile-f.service/object",
            format!("{{\"name\":\"hostile-f.service\",\"hash\":\"{huge_body_hash}\",\"history\":\"nope\"}}"),
            "unit object: history of the wrong type",
        ),
        hostile(format!("bodies/{huge_body_hash}"), mib(b'#'), "body: 1 MiB"),
        hostile(format!("bodies/{}", sha1_hex(b"binary")), vec![0xff, 0xfe, 0x00, 0x80], "body: not UTF-8"),
        hostile("bodies/not-a-hash", "[Service]\nExecStart=/bin/true\n", "body: malformed hash in its key"),
        hostile("bodies/..", "x", "body: '..' as its hash"),
        // Desired states and targets.
        hostile("units/hostile-g.service/desired", "running", "desired state: unknown word"),
        hostile("units/hostile-g.service/target", "../../etc", "target: a path"),
        hostile("units/hostile-h.service/desired", mib(b'd'), "desired state: 1 MiB"),
        hostile("units/hostile-h.service/target", "m\u{7}x", "target: a control character"),
        hostile("units/hostile-i.service/target", mib(b't'), "target: 1 MiB"),
        hostile("units/hostile-i.service/launched/nobody", mib(b'l'), "launched marker: 1 MiB"),
        hostile("units/hostile-i.service/restarted/nobody", "{}", "restarted marker of no unit"),
        // Unit states.
        hostile(format!("states/hello.service/{m1}"), "{\"hash\":", "unit state: bad JSON"),
        hostile(format!("states/plain-b.service/{m1}"), "{\"hash\":7,\"loadState\":[]}", "unit state: wrong types"),
        hostile("states/hostile-j.service/nobody", mib(b's'), "unit state: 1 MiB"),
        hostile(
            "states/hostile-k.service/nobody",
            "{\"hash\":\"x\",\"loadState\":\"a\",\"activeState\":\"b\",\"subState\":\"c\",\"nRestarts\":-1}",
            "unit state: negative restart counter",
        ),
        // Machines.
        hostile("machines/hostile-m/object", "{\"id\":", "machine object: bad JSON"),
        hostile("machines/hostile-n/object", "{\"id\":\"hostile-n\"}", "machine object: bound to no lease"),
        hostile(
            "machines/hostile-o/object",
            "{\"id\":\"hostile-o\",\"publicIP\":\"10.9.9.9\",\"future\":[1,2],\"metadata\":{\"a\":\"b\"}}",
            "machine object: unknown fields, no lease",
        ),
        hostile("machines/hostile-p/object", format!("{{\"id\":\"{m1}\"}}"), "machine object: another machine's id"),
        hostile("machines/hostile-q/object", huge_json, "machine object: 1 MiB"),
        hostile("machines/hostile-q/metadata/role", mib(b'r'), "machine metadata: 1 MiB"),
        hostile(format!("machines/{m1}/metadata/bad key!"), "x", "machine metadata: bad key"),
        // Rollouts: a finished one's progress overwritten, others of no unit.
        hostile(format!("rollouts/{rollout}/progress"), "\"nope\"", "rollout progress: wrong type (a real rollout)"),
        hostile("rollouts/hostile-r/spec", "{\"id\":", "rollout spec: bad JSON"),
        hostile("rollouts/hostile-r/control", "{\"action\":\"explode\"}", "rollout control: unknown action"),
        hostile("rollouts/hostile-r/progress", mib(b'['), "rollout progress: 1 MiB"),
        hostile(
            "rollouts/hostile-s/spec",
            "{\"id\":\"other\",\"kind\":\"restart\",\"units\":[],\"maxUnavailable\":1,\"minHealthyMs\":0,\
             \"healthTimeoutMs\":0}",
            "rollout spec: another rollout's id",
        ),
        hostile(
            "rollouts/hostile-t/spec",
            "{\"id\":\"hostile-t\",\"kind\":\"replace\",\"units\":[{\"name\":\"../x\",\"from\":\"a\",\"to\":\"b\"}],\
             \"maxUnavailable\":1,\"minHealthyMs\":0,\"healthTimeoutMs\":0}",
            "rollout spec: bad unit name and hashes",
        ),
        hostile(
            "rollouts/hostile-u/spec",
            format!(
                "{{\"id\":\"hostile-u\",\"kind\":\"restart\",\"units\":[{{\"name\":\"victim.service\",\"from\":\
                 \"{victim_hash}\",\"to\":\"{victim_hash}\"}}],\"maxUnavailable\":4294967295,\"minHealthyMs\":{max},\
                 \"healthTimeoutMs\":{max},\"createdMs\":{max},\"canary\":4294967295,\"canaryHoldMs\":{max},\
                 \"progressDeadlineMs\":{max}}}"
            ),
            "rollout spec: every time u64::MAX (driven: it decodes)",
        ),
        hostile(
            "rollouts/hostile-u/control",
            "{\"action\":\"run\",\"resumes\":4294967295}",
            "rollout control: resumes at u32::MAX",
        ),
        // Engine and layout keys.
        hostile("engine/version", "banana", "engine version: not a number"),
        hostile("engine/leader", "hostile-leader", "engine leader: bound to no lease"),
        hostile("version", "{\"layout\":2}", "layout version: JSON"),
        // Keys with bad names.
        hostile("units/../object", "{\"name\":\"..\",\"hash\":\"x\"}", "unit name '..'"),
        hostile("units/./desired", "launched", "unit name '.'"),
        hostile("units//object", "{}", "empty unit name"),
        hostile("units/ünïcödé.service/object", "{\"name\":\"ü\",\"hash\":\"x\"}", "unit name: unicode"),
        hostile("units/ünïcödé.service/desired", "launched", "unit name: unicode"),
        hostile(format!("units/{long_name}/object"), "{\"name\":\"l\",\"hash\":\"x\"}", "unit name: 4 KiB"),
        hostile(format!("units/{long_name}/desired"), "launched", "unit name: 4 KiB"),
        hostile("units/no-type/object", "{\"name\":\"no-type\",\"hash\":\"x\"}", "unit name without a type"),
        hostile("units/tab\there.service/target", "m", "unit name: control character"),
        hostile("units/hostile-v.service/launched/..", "x", "machine ID '..' in a launched marker"),
        hostile("states/../..", "{}", "unit state: '..' everywhere"),
        hostile("machines/../object", "{\"id\":\"..\"}", "machine ID '..'"),
        hostile("machines/tab\tm/object", "{\"id\":\"tab\\tm\"}", "machine ID: control character"),
        hostile("rollouts/../spec", "{}", "rollout ID '..'"),
        hostile("rollouts/ünï/progress", "{}", "rollout ID: unicode"),
        hostile("units/hostile-w.service/bogus", "x", "unknown key of a unit"),
        hostile("zzz/unknown", "x", "unknown key"),
    ];
    // A unit whose object and body are fine (the object first: an unreferenced body is garbage-collected), but
    // whose desired state is hostile: it is listed (inactive), and blocks nothing.
    let ok_body = "[Service]\nExecStart=/bin/sleep 100000\n# hostile neighbour\n";
    let ok_hash = sha1_hex(ok_body.as_bytes());
    all.push(hostile(
        "units/hostile-x.service/object",
        format!("{{\"name\":\"hostile-x.service\",\"hash\":\"{ok_hash}\"}}"),
        "a good object",
    ));
    all.push(hostile(format!("bodies/{ok_hash}"), ok_body, "a good body"));
    all.push(hostile("units/hostile-x.service/desired", "{\"state\":\"launched\"}", "desired state: JSON"));
    all
}

/// `etcdctl put` inside the etcd container, the value on stdin (any bytes, any size).
async fn etcd_put(cluster: &Cluster, key: &str, value: &[u8]) -> Result<(), String> {
    let mut child = tokio::process::Command::new("docker")
        .args(["exec", "-i", cluster.etcd().name(), "/usr/bin/etcdctl", "--endpoints=http://127.0.0.1:2379"])
        .args(["--command-timeout=10s", "put", key])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("docker exec etcdctl: {e}"))?;
    let mut stdin = child.stdin.take().expect("stdin piped");
    stdin.write_all(value).await.map_err(|e| format!("writing the value of {key}: {e}"))?;
    drop(stdin);
    let out = child.wait_with_output().await.map_err(|e| format!("etcdctl put {key}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("etcdctl put {key}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// `GET path` over plain HTTP/1.1 from the host: status and body.
async fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("GET {path}: {e}"))?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    read.map_err(|_| format!("GET {path}: no answer within 20 s"))?.map_err(|e| format!("GET {path}: {e}"))?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse::<u16>().ok());
    let status = status.ok_or_else(|| format!("GET {path}: no status line in {:?}", answer.get(..200)))?;
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn api_addr(m: &Machine) -> String {
    format!("{}:{}", m.ip(), fleet_harness::API_PORT)
}

/// Every machine's API answers the listings without a 5xx (or a broken connection); a failure names the request
/// and the machine, and quotes any panic in the fleetd journals since `since`.
async fn apis_answer(cluster: &Cluster, rollout: &str, since: &str, when: &str) {
    let paths = ["/fleet/v1/units", "/fleet/v1/machines", "/fleet/v1/state", "/fleet/v1/rollouts"];
    let one = format!("/fleet/v1/rollouts/{rollout}");
    for m in cluster.machines() {
        for path in paths.iter().copied().chain([one.as_str(), "/fleet/v1/rollouts/hostile-r"]) {
            let failed = match http_get(&api_addr(m), path).await {
                Ok((status, body)) if status >= 500 => {
                    format!("GET {path} on {} answered {status}: {}", m.name(), body.get(..500).unwrap_or(&body))
                }
                Ok(_) => continue,
                Err(e) => format!("{} did not answer: {e}", m.name()),
            };
            let mut panics = Vec::new();
            for m in cluster.machines() {
                let journal = journal_since(m, since).await;
                panics.extend(panics_in(&journal).into_iter().map(|p| format!("{}: {p}", m.name())));
            }
            panic!("{when}: {failed}; panics in fleetd journals: {panics:?}");
        }
    }
}

/// Each panic in a journal: the `panicked at` line with the message on the line after it.
fn panics_in(journal: &str) -> Vec<String> {
    let lines: Vec<&str> = journal.lines().collect();
    let at = |i: usize| lines.get(i).copied().unwrap_or_default();
    (0..lines.len()).filter(|&i| lines[i].contains("panicked")).map(|i| format!("{} {}", at(i), at(i + 1))).collect()
}

/// fleet.service's restart counter and main PID on a machine.
async fn fleetd_process(m: &Machine) -> (String, String) {
    let props = m.systemctl_show("fleet.service", &["NRestarts", "MainPID"]).await.unwrap();
    (props.get("NRestarts").cloned().unwrap_or_default(), props.get("MainPID").cloned().unwrap_or_default())
}

/// fleet.service's journal on `m` since `since` (Unix seconds, the machine's clock).
async fn journal_since(m: &Machine, since: &str) -> String {
    let since = format!("@{since}");
    let out = m.exec_ok(&["journalctl", "-u", "fleet.service", "-o", "cat", "--no-pager", "--since", &since]).await;
    out.unwrap().stdout
}

/// Waits until `list-units` shows `n` active rows.
async fn wait_active_rows(cluster: &Cluster, n: usize) {
    cluster
        .wait_fleetctl(1, &table_args("list-units", "unit,active"), &format!("{n} active unit rows"), |out| {
            let active = parse_table(out, &["unit", "active"]).iter().filter(|r| r.get("active") == "active").count();
            if active == n { Ok(()) } else { Err(format!("{active} of {n} active")) }
        })
        .await
        .unwrap_or_else(|e| panic!("the units did not start: {e}"));
}

/// Waits until `list-unit-files` shows `unit` with current state `state` (via machine 1).
async fn wait_unit_state(cluster: &Cluster, unit: &str, state: &str) {
    let result = cluster.wait_for_unit_state(1, unit, state).await;
    if let Err(e) = result {
        panic!("{unit} did not become {state} with the hostile records in place: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_records_are_errors_for_themselves_and_everything_else_keeps_working() {
    let cluster = Cluster::builder().machines(3).agent_ttl("3s").start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let units: Vec<String> = [
        ("global.service", GLOBAL),
        ("plain-a.service", PLAIN),
        ("plain-b.service", PLAIN),
        ("victim.service", PLAIN),
        ("hello.service", PLAIN),
    ]
    .iter()
    .map(|(name, text)| write(name, text))
    .collect();
    let args: Vec<&str> = ["start"].into_iter().chain(units.iter().map(String::as_str)).collect();
    ok(&cluster.fleetctl(1, &args).await.unwrap(), "fleetctl start");
    // The global unit is one row per machine.
    wait_active_rows(&cluster, 3 + 4).await;
    // A finished rollout, whose progress a hostile record overwrites below.
    let restart = cluster.fleetctl(1, &["restart", "--rolling", "--min-healthy=1s", "plain-a.service"]).await.unwrap();
    ok(&restart, "fleetctl restart --rolling plain-a.service");
    let (status, body) = http_get(&api_addr(cluster.machine(1).unwrap()), "/fleet/v1/rollouts").await.unwrap();
    assert_eq!(status, 200, "GET /rollouts: {body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rollout = listed["rollouts"][0]["id"].as_str().unwrap_or_else(|| panic!("no rollout in {body}")).to_string();
    let files = cluster.fleetctl(1, &table_args("list-unit-files", "unit,hash")).await.unwrap();
    ok(&files, "fleetctl list-unit-files");
    let victim_hash = parse_table(&files.stdout, &["unit", "hash"])
        .into_iter()
        .find(|r| r.get("unit") == "victim.service")
        .map(|r| r.get("hash").to_string())
        .unwrap_or_else(|| panic!("victim.service not in {}", files.stdout));

    let before: Vec<(String, String)> = futures::future::join_all(cluster.machines().iter().map(fleetd_process)).await;
    let kept = cluster.main_pids(&KEPT).await.unwrap();
    assert_eq!(kept.len(), 3 + 2, "global.service on each machine, the plain units once: {kept:?}");
    let m1 = cluster.machine(1).unwrap();
    let since = m1.exec_ok(&["date", "+%s"]).await.unwrap().stdout.trim().to_string();

    // The hostile writes, the APIs asked between them.
    let prefix = cluster.key_prefix();
    let records = hostile_records(m1.id(), &rollout, &victim_hash);
    for (i, record) in records.iter().enumerate() {
        let key = format!("{prefix}{}", record.key);
        if let Err(e) = etcd_put(&cluster, &key, &record.value).await {
            panic!("could not write the hostile record {:?} ({}): {e}", record.key, record.what);
        }
        if i % 8 == 7 {
            apis_answer(&cluster, &rollout, &since, &format!("after writing {:?} ({})", record.key, record.what)).await;
        }
    }
    apis_answer(&cluster, &rollout, &since, "after every hostile write").await;

    // A leader still schedules: a new unit starts and stops.
    let fresh = write("fresh.service", PLAIN);
    ok(&cluster.fleetctl(2, &["start", "--no-block", &fresh]).await.unwrap(), "fleetctl start fresh.service");
    wait_unit_state(&cluster, "fresh.service", "launched").await;
    cluster
        .wait_for("fresh.service to be active on its machine", || async {
            match cluster.fleetctl(1, &table_args("list-units", "unit,active")).await {
                Ok(out) if out.success() => {
                    let rows = parse_table(&out.stdout, &["unit", "active"]);
                    match rows.iter().find(|r| r.get("unit") == "fresh.service") {
                        Some(r) if r.get("active") == "active" => Check::Ready(()),
                        Some(r) => Check::NotYet(format!("fresh.service is {}", r.get("active"))),
                        None => Check::NotYet(format!("fresh.service not listed: {}", out.stdout)),
                    }
                }
                Ok(out) => Check::NotYet(out.describe()),
                Err(e) => Check::NotYet(e.to_string()),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("a new unit did not start with the hostile records in place: {e}"));
    ok(&cluster.fleetctl(3, &["stop", "--no-block", &fresh]).await.unwrap(), "fleetctl stop fresh.service");
    wait_unit_state(&cluster, "fresh.service", "loaded").await;
    apis_answer(&cluster, &rollout, &since, "after starting and stopping a new unit").await;

    // The overwritten rollout shows its error, in the API and in fleetctl.
    let (status, body) = http_get(&api_addr(m1), &format!("/fleet/v1/rollouts/{rollout}")).await.unwrap();
    assert_eq!(status, 200, "GET /rollouts/{rollout}: {body}");
    let shown: serde_json::Value = serde_json::from_str(&body).unwrap();
    let error = shown["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("rollouts/{rollout}/progress")) && error.contains("rollout progress"),
        "GET /rollouts/{rollout} does not show its unreadable progress: {body}"
    );
    let status_out = cluster.fleetctl(1, &["rollout-status", "--no-block", &rollout]).await.unwrap();
    assert_eq!(status_out.status, 1, "rollout-status of an unreadable rollout: {}", status_out.describe());
    assert!(
        status_out.stdout.contains("Cannot read this rollout") && status_out.stdout.contains("/progress"),
        "rollout-status does not show the error: {}",
        status_out.describe()
    );
    let (_, listed) = http_get(&api_addr(m1), "/fleet/v1/rollouts").await.unwrap();
    assert!(listed.contains("hostile-r"), "an unreadable rollout is listed with its error, not hidden: {listed}");

    // Only the three machines; the machines whose presence is hostile are not listed.
    let machines = cluster.wait_for_n_machines(1, 3).await;
    machines.unwrap_or_else(|e| panic!("list-machines does not show exactly the three machines: {e}"));

    // A unit state overwritten with garbage is published again by its machine's agent.
    cluster
        .wait_for("plain-b.service to be listed active again", || async {
            match cluster.fleetctl(1, &table_args("list-units", "unit,active")).await {
                Ok(out) if out.success() => {
                    let rows = parse_table(&out.stdout, &["unit", "active"]);
                    let b = rows.iter().filter(|r| r.get("unit") == "plain-b.service" && r.get("active") == "active");
                    if b.count() == 1 { Check::Ready(()) } else { Check::NotYet(out.stdout) }
                }
                Ok(out) => Check::NotYet(out.describe()),
                Err(e) => Check::NotYet(e.to_string()),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("a running unit's state overwritten with garbage was not published again: {e}"));

    // Live with the records for a while: more than two agent reconcile intervals (5 s) and many engine resyncs,
    // so a loop that met a hostile record on every pass (a panic, a log line) has had its passes.
    let dwell = std::time::Instant::now();
    while dwell.elapsed() < DWELL {
        apis_answer(&cluster, &rollout, &since, "living with the hostile records").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // No fleetd restarted or panicked; the kept units kept their processes.
    for (m, was) in cluster.machines().iter().zip(&before) {
        let now = fleetd_process(m).await;
        assert_eq!(
            &now,
            was,
            "fleetd on {} restarted during the hostile writes: (NRestarts, MainPID) was {was:?}, now {now:?}",
            m.name()
        );
        let journal = journal_since(m, &since).await;
        if let Some(panic) = panics_in(&journal).first() {
            panic!("fleetd on {} panicked after the hostile writes: {panic}", m.name());
        }
    }
    let now = cluster.main_pids(&KEPT).await.unwrap();
    for ((machine, unit), pid) in &kept {
        match now.get(&(machine.clone(), unit.clone())) {
            Some(p) if p == pid => {}
            Some(p) => panic!("{unit} on {machine} was restarted (main PID {pid} → {p}) by the hostile records"),
            None => panic!("{unit} on {machine} stopped running after the hostile records: {now:?}"),
        }
    }

    // The unit whose desired state is hostile is listed, as inactive.
    let (_, units) = http_get(&api_addr(m1), "/fleet/v1/units").await.unwrap();
    let units: serde_json::Value = serde_json::from_str(&units).unwrap();
    let x = units["units"].as_array().and_then(|all| all.iter().find(|u| u["name"] == "hostile-x.service"));
    let x = x.unwrap_or_else(|| {
        panic!("hostile-x.service (good object and body, hostile desired state) not listed: {units}")
    });
    assert_eq!(x["desiredState"], "inactive", "a desired state that does not decode reads as inactive: {x}");

    // Each hostile key is logged with its key, a bounded number of times (not once per pass or loop), and no
    // log line carries a hostile value whole.
    let marked = ["hostile-a.service/object", "hostile-r/spec", "hostile-n/object", "engine/leader", "units/../object"];
    for m in cluster.machines() {
        let journal = journal_since(m, &since).await;
        let longest = journal.lines().max_by_key(|l| l.len()).unwrap_or_default();
        assert!(
            journal.len() <= MAX_JOURNAL_BYTES,
            "fleetd on {} logged {} bytes since the hostile writes (at most {MAX_JOURNAL_BYTES}); longest line \
             ({} bytes) starts {:?}",
            m.name(),
            journal.len(),
            longest.len(),
            longest.get(..300).unwrap_or(longest)
        );
        for mark in marked {
            let seen = journal.lines().filter(|l| l.contains(mark)).count();
            assert!(seen >= 1, "fleetd on {} never logged the hostile key {mark}; its journal:\n{journal}", m.name());
            assert!(
                seen <= MAX_LOGS_PER_KEY,
                "fleetd on {} logged the hostile key {mark} {seen} times (at most {MAX_LOGS_PER_KEY}): {}",
                m.name(),
                journal.lines().filter(|l| l.contains(mark)).take(10).collect::<Vec<_>>().join("\n")
            );
        }
    }
}

//! Live check of the `systemd` module and the agent executor against a real systemd (run inside a machine
//! container as root; see `systemd_probe.sh`). Prints one line per check and exits 1 on the first failure.
//!
//! The replace check is the spec's removed `TestReplaceSerialization` (§10.4): version 1's `ExecStopPost` sleeps
//! 1 s and then writes a timestamp; version 2's `ExecStartPre` writes its own only if the first exists. Replacing
//! through the normal plan/executor path must run the old stop hooks before the new version starts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleet_core::machine_plan::plan::{Desired, Update};
use fleet_core::model::JobState;
use fleet_core::unit::UnitHash;
use fleet_systemd::{Bus, Definition, JobResult, Systemd, Transport, UnitChange};
use fleetd::agent::executor::{Executor, ExecutorConfig, Outcome, markers};
use fleetd::agent::units_dir::UnitsDir;

const DIR: &str = "/run/fleet/units";

const V1: &str = "[Service]\nExecStart=/bin/sleep 1000\nExecStopPost=/bin/sh -c 'sleep 1; date +%%s.%%N > /tmp/stop-post; touch /tmp/fleetSyncReplaceFile'\n";
const V2: &str = "[Service]\nExecStartPre=/bin/sh -c 'test -f /tmp/fleetSyncReplaceFile && date +%%s.%%N > /tmp/start-pre'\nExecStart=/bin/sleep 1000\n";
const FAILING: &str = "[Service]\nType=oneshot\nExecStart=/bin/false\n";
const MANY_V1: &str = "[Service]\nExecStart=/bin/sleep 1001\n";
const MANY_V2: &str = "[Service]\nExecStart=/bin/sleep 1002\n";
/// A service whose process exits 3 on SIGTERM: a stop leaves it failed.
const EXITS_3_ON_TERM: &str = "[Service]\nExecStart=/bin/sh -c 'trap \"exit 3\" TERM; while :; do sleep 0.1; done'\n";
const INSTALL: &str = "[Service]\nExecStart=/bin/sleep 1000\n\n[Install]\nWantedBy=multi-user.target\n";

fn check(ok: bool, what: &str, detail: impl std::fmt::Display) {
    println!("{} {what}: {detail}", if ok { "PASS" } else { "FAIL" });
    if !ok {
        std::process::exit(1);
    }
}

fn desired(units: &[(&str, JobState, &str, bool)]) -> BTreeMap<String, Desired> {
    units
        .iter()
        .map(|(n, s, t, i)| {
            (
                n.to_string(),
                Desired {
                    state: *s,
                    hash: UnitHash::of(t).to_hex(),
                    text: Arc::from(*t),
                    install: *i,
                    update: Update::Restart,
                    restart: None,
                },
            )
        })
        .collect()
}

fn sh(cmd: &str) -> String {
    let out = std::process::Command::new("sh").arg("-c").arg(cmd).output().expect("sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt().with_env_filter("fleet=debug").with_target(false).init();
    let systemd = Systemd::connect(Bus::System).await.expect("connect to systemd");
    // As root, straight to PID 1: no dbus-daemon in between.
    check(systemd.transport() == Transport::PrivateSocket, "connect", systemd.transport().as_str());

    // Change notifications: subscribe now and deliberately read nothing until the end (a lagging reader must not
    // stall the connection).
    let mut changes = systemd.changes();

    // Low-level operations.
    let r = systemd.reset_failed("never-loaded.service").await;
    check(r.is_ok(), "reset-failed of an unknown unit is tolerated", format!("{r:?}"));
    let r = systemd.states(&["never-loaded.service".to_string()]).await.expect("states");
    check(r[0].load_state == "not-found", "states of an unknown unit", format!("{:?}", r[0]));

    let units = UnitsDir::open(DIR).expect("units dir");
    let config = ExecutorConfig { start_wait: Duration::from_secs(30), stop_wait: Duration::from_secs(60) };
    let mut exec = Executor::new(systemd.clone(), units, config);

    // 1. Load + start version 1 through plan/executor.
    let _ = std::fs::remove_file("/tmp/fleetSyncReplaceFile");
    let d1 = desired(&[
        ("replace-sync.service", JobState::Launched, V1, false),
        ("failing.service", JobState::Launched, FAILING, false),
    ]);
    let reports = exec.reconcile(&d1).await;
    let summary: Vec<String> = reports.iter().map(|r| format!("{}:{:?}", r.planned.task.kind(), r.outcome)).collect();
    check(reports.iter().all(|r| r.outcome.is_ok()), "launch v1", summary.join(", "));
    let failing = reports
        .iter()
        .find(|r| r.planned.task.unit() == Some("failing.service") && r.planned.task.kind() == "StartUnit");
    check(
        matches!(failing.map(|r| &r.outcome), Some(Ok(Outcome::Started(JobResult::Failed)))),
        "start job result of a failing unit",
        format!("{:?}", failing.map(|r| &r.outcome)),
    );
    let enabled = sh("systemctl is-enabled replace-sync.service");
    check(enabled == "linked-runtime", "is-enabled", &enabled);
    let st = systemd.states(&["replace-sync.service".to_string()]).await.expect("states");
    check(st[0].active_state == "active" && st[0].sub_state == "running", "v1 running", format!("{:?}", st[0]));
    check(
        exec.launched().contains(&"replace-sync.service".to_string()),
        "believed launched",
        format!("{:?}", exec.launched()),
    );

    // 2. Replace: version 2 through the same reconcile path.
    let d2 = desired(&[
        ("replace-sync.service", JobState::Launched, V2, false),
        ("failing.service", JobState::Launched, FAILING, false),
    ]);
    let reports = exec.reconcile(&d2).await;
    let summary: Vec<String> = reports
        .iter()
        .map(|r| format!("{}({}):{:?}", r.planned.task.kind(), r.planned.task.unit().unwrap_or("-"), r.outcome))
        .collect();
    check(reports.iter().all(|r| r.outcome.is_ok()), "replace with v2", summary.join(", "));
    println!("     markers: {:?}", markers(&reports, exec.loaded()));
    let stop_post = sh("cat /tmp/stop-post");
    let start_pre = sh("cat /tmp/start-pre");
    let (a, b) = (stop_post.parse::<f64>().unwrap_or(f64::MAX), start_pre.parse::<f64>().unwrap_or(0.0));
    check(
        a < b,
        "old ExecStopPost finished before new ExecStartPre",
        format!("stop-post={stop_post} start-pre={start_pre} (+{:.3} s)", b - a),
    );
    let st = systemd.states(&["replace-sync.service".to_string()]).await.expect("states");
    check(st[0].active_state == "active", "v2 active", format!("{:?}", st[0]));
    let result = systemd.service_result("replace-sync.service").await.expect("Result");
    check(result == "success", "v2 Result", &result);
    let on_disk = std::fs::read_to_string(format!("{DIR}/replace-sync.service")).unwrap_or_default();
    check(on_disk == V2, "v2 file on disk", on_disk.len());

    // 3. [Install] → enabled at runtime.
    let d3 = desired(&[
        ("replace-sync.service", JobState::Loaded, V2, false),
        ("install.service", JobState::Loaded, INSTALL, true),
    ]);
    let reports = exec.reconcile(&d3).await;
    let summary: Vec<String> = reports
        .iter()
        .map(|r| format!("{}({}):{:?}", r.planned.task.kind(), r.planned.task.unit().unwrap_or("-"), r.outcome))
        .collect();
    check(reports.iter().all(|r| r.outcome.is_ok()), "stop v2, unload failing, load install", summary.join(", "));
    let st = systemd.states(&["replace-sync.service".to_string()]).await.expect("states");
    check(st[0].active_state == "inactive", "v2 stopped (loaded)", format!("{:?}", st[0]));
    let wants = sh("ls /run/systemd/system/multi-user.target.wants/ 2>/dev/null");
    check(wants.contains("install.service"), "install.service enabled in /run", &wants);
    let failing_link = sh("ls /run/systemd/system/failing.service 2>&1");
    check(failing_link.contains("No such file"), "failing.service link removed", &failing_link);
    let failed = sh("systemctl is-failed failing.service");
    check(failed != "failed", "failing.service reset-failed", &failed);

    // 4. Purge everything (SIGTERM path), including a file that was never linked.
    std::fs::write(format!("{DIR}/stray.service"), V2).expect("write stray file");
    let states = exec.current_states("probe-machine").await.expect("current states");
    check(
        states.len() == 2 && states["install.service"].active_state == "inactive",
        "current states",
        format!("{states:?}"),
    );
    let reports = exec.purge(Duration::from_secs(30)).await;
    let summary: Vec<String> = reports
        .iter()
        .map(|r| format!("{}({}):{:?}", r.planned.task.kind(), r.planned.task.unit().unwrap_or("-"), r.outcome))
        .collect();
    check(reports.iter().all(|r| r.outcome.is_ok()), "purge", summary.join(", "));
    let left = sh(&format!("ls {DIR}"));
    check(left.is_empty(), "units directory empty", format!("{left:?}"));
    let links = sh("ls /run/systemd/system/ 2>/dev/null | grep -E 'replace-sync|install|failing' || true");
    check(links.is_empty(), "runtime links removed", format!("{links:?}"));
    let again = systemd
        .unlink_runtime("replace-sync.service", std::path::Path::new(&format!("{DIR}/replace-sync.service")))
        .await;
    check(matches!(again, Ok(false)), "unlink of a link that is gone changes nothing", format!("{again:?}"));
    let enabled = sh("systemctl is-enabled replace-sync.service 2>&1");
    check(!enabled.contains("linked"), "systemd no longer lists the unlinked unit as linked", &enabled);
    let st =
        systemd.states(&["replace-sync.service".to_string(), "install.service".to_string()]).await.expect("states");
    check(st.iter().all(|s| s.active_state == "inactive"), "all inactive", format!("{st:?}"));

    // 5. New and unloaded plain units need no daemon-reload: systemd reads a new file when it first loads the
    //    unit and forgets a stopped, unlinked one. A loaded unit whose file changes on disk does need one.
    let many: Vec<String> = (0..40).map(|i| format!("many-{i}.service")).collect();
    let launch: Vec<(&str, JobState, &str, bool)> =
        many.iter().map(|n| (n.as_str(), JobState::Launched, MANY_V1, false)).collect();
    let reports = exec.reconcile(&desired(&launch)).await;
    let reload = reports.iter().find(|r| r.planned.task.kind() == "ReloadUnitFiles").map(|r| &r.outcome);
    check(
        matches!(reload, Some(Ok(Outcome::Skipped(_)))),
        "40 new units start without a daemon-reload",
        format!("{reload:?}"),
    );
    let st = systemd.states(&many).await.expect("states");
    check(st.iter().all(|s| s.active_state == "active"), "the 40 new units run", format!("{:?}", st.first()));
    let loaded = systemd.definitions(&many[..1]).await.expect("definitions");
    check(
        loaded[0].1 == Definition::Loaded { stale: false },
        "a new unit's definition is its file",
        format!("{loaded:?}"),
    );
    let all = systemd.definitions(&many).await.expect("definitions");
    check(
        all.len() == 40 && all.iter().all(|(_, d)| *d == Definition::Loaded { stale: false }),
        "40 running units, asked of every unit systemd holds, are each their file",
        format!("{} answers, first {:?}", all.len(), all.first()),
    );
    // Asked about, a unit systemd does not hold stays unloaded (a load would read its file, and an unreferenced
    // unit is dropped again at once); a name with a backslash is matched as itself.
    std::fs::write("/run/systemd/system/never-loaded.service", MANY_V1).expect("write never-loaded.service");
    let never = systemd.definitions(&["never-loaded.service".to_string()]).await.expect("definitions");
    let listed = sh("systemctl list-units --all --no-legend never-loaded.service | wc -l");
    check(
        never[0].1 == Definition::NotLoaded && listed == "0",
        "a unit systemd does not hold is told so, and not loaded by the question",
        format!("{never:?}, listed {listed}"),
    );
    let _ = std::fs::remove_file("/run/systemd/system/never-loaded.service");
    let escaped = r"esc\x2dprobe.service";
    std::fs::write(format!("/run/systemd/system/{escaped}"), MANY_V1).expect("write the escaped unit");
    let started = tokio::time::timeout(Duration::from_secs(30), systemd.start(escaped)).await;
    let held = systemd.definitions(&[escaped.to_string()]).await.expect("definitions");
    check(
        matches!(started, Ok(Ok(JobResult::Done))) && held[0].1 == Definition::Loaded { stale: false },
        "a unit whose name holds a backslash is found by its name",
        format!("{started:?}, {held:?}"),
    );
    let _ = tokio::time::timeout(Duration::from_secs(30), systemd.stop(escaped)).await;
    let _ = std::fs::remove_file(format!("/run/systemd/system/{escaped}"));
    std::fs::write(format!("{DIR}/many-0.service"), MANY_V2).expect("rewrite many-0");
    let stale = systemd.definitions(&many[..1]).await.expect("definitions");
    check(
        stale[0].1 == Definition::Loaded { stale: true },
        "a file changed under a loaded unit is stale",
        format!("{stale:?}"),
    );
    std::fs::write(format!("{DIR}/many-0.service"), MANY_V1).expect("restore many-0");
    let reports = exec.reconcile(&BTreeMap::new()).await;
    check(reports.iter().all(|r| r.outcome.is_ok()), "unload the 40", format!("{} tasks", reports.len()));
    let reload = reports.iter().find(|r| r.planned.task.kind() == "ReloadUnitFiles").map(|r| &r.outcome);
    let listed = sh("systemctl list-units --all --no-legend 'many-*' | wc -l");
    let gone = systemd.definitions(&many).await.expect("definitions");
    check(
        listed == "0" && gone.iter().all(|(_, d)| *d == Definition::NotLoaded),
        "unloaded units are gone from systemd",
        format!("listed {listed}, reload {reload:?}, first {:?}", gone.first()),
    );
    check(
        matches!(reload, Some(Ok(Outcome::Skipped(_)))),
        "the unload of the 40 takes no daemon-reload",
        format!("{reload:?}"),
    );
    let again = desired(&[("many-0.service", JobState::Launched, MANY_V2, false)]);
    let reports = exec.reconcile(&again).await;
    check(reports.iter().all(|r| r.outcome.is_ok()), "load many-0 again, changed", format!("{} tasks", reports.len()));
    let exec_start = sh("systemctl show -p ExecStart --value many-0.service");
    check(exec_start.contains("1002"), "systemd runs the new file of a unit loaded again", &exec_start);
    exec.purge(Duration::from_secs(30)).await;

    // 6. Notifications arrived for our units.
    // They carry the values the publisher takes from them: a service's NRestarts, its ActiveState and SubState.
    let mut seen = std::collections::BTreeSet::new();
    let mut reported: Vec<fleet_systemd::Reported> = Vec::new();
    while let Ok(Some(c)) = tokio::time::timeout(Duration::from_millis(200), changes.recv()).await {
        match c {
            UnitChange::Unit { name, reported: r } => {
                if name == "replace-sync.service" {
                    reported.push(r);
                }
                seen.insert(name);
            }
            UnitChange::Missed => check(false, "no change missed while connected", "UnitChange::Missed"),
        }
    }
    check(seen.contains("replace-sync.service"), "change notifications", format!("{seen:?}"));
    // Read only now, after its stop: one change pending, with the newest values of the Unit and Service signals
    // (the time it last entered `active` travels with its states: health checks tell restarts by it).
    let entered = reported.first().and_then(|r| r.entered);
    let stopped =
        fleet_systemd::Reported { active: Some(("inactive".into(), "dead".into())), restarts: Some(0), entered };
    check(
        reported == [stopped] && entered.is_some(),
        "change notifications of a unit coalesce, carrying ActiveState/SubState with ActiveEnterTimestampMonotonic, \
         and NRestarts",
        format!("{reported:?}"),
    );

    // 6b. A stop tells the state its job left the unit in, from the unit's signals before the job's removal: the
    // agent reads no state (and resets nothing) after a stop that left its unit inactive.
    std::fs::write("/run/systemd/system/left-inactive.service", MANY_V1).expect("write left-inactive.service");
    std::fs::write("/run/systemd/system/left-failed.service", EXITS_3_ON_TERM).expect("write left-failed.service");
    sh("systemctl daemon-reload");
    for unit in ["left-inactive.service", "left-failed.service"] {
        let started = tokio::time::timeout(Duration::from_secs(30), systemd.start(unit)).await;
        check(matches!(started, Ok(Ok(JobResult::Done))), "start a unit to stop", format!("{unit}: {started:?}"));
    }
    let stopped = tokio::time::timeout(Duration::from_secs(30), systemd.stop("left-inactive.service")).await;
    check(
        matches!(&stopped, Ok(Ok(s)) if s.result == JobResult::Done && s.left.as_deref() == Some("inactive")),
        "a stop tells that it left its unit inactive",
        format!("{stopped:?}"),
    );
    let stopped = tokio::time::timeout(Duration::from_secs(30), systemd.stop("left-failed.service")).await;
    check(
        matches!(&stopped, Ok(Ok(s)) if s.result == JobResult::Done && s.left.as_deref() == Some("failed")),
        "a stop tells that it left a unit failed whose process exited 3 on SIGTERM (the job is still done)",
        format!("{stopped:?}"),
    );
    let shown = sh("systemctl show -p ActiveState --value left-failed.service");
    check(shown.trim() == "failed", "systemd shows it failed", shown.trim());
    let _ = systemd.reset_failed("left-failed.service").await;
    for unit in ["left-inactive.service", "left-failed.service"] {
        let _ = std::fs::remove_file(format!("/run/systemd/system/{unit}"));
    }
    sh("systemctl daemon-reload");

    // 7. `systemctl daemon-reexec` closes PID 1's private socket: the client connects again by itself, tells
    // change subscribers that changes may have been missed, and jobs and their signals work on the new connection.
    let mut after_reexec = systemd.changes();
    let reexec = std::process::Command::new("systemctl").arg("daemon-reexec").status().expect("systemctl");
    check(reexec.success(), "daemon-reexec", format!("{reexec:?}"));
    let told = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match after_reexec.recv().await {
                Some(UnitChange::Missed) => return Some(UnitChange::Missed),
                Some(UnitChange::Unit { .. }) => continue,
                None => return None,
            }
        }
    })
    .await;
    check(
        matches!(told, Ok(Some(UnitChange::Missed))),
        "after daemon-reexec, subscribers are told changes may have been missed",
        format!("{told:?}"),
    );
    check(systemd.transport() == Transport::PrivateSocket, "connected again", systemd.transport().as_str());
    std::fs::write("/run/systemd/system/after-reexec.service", MANY_V1).expect("write after-reexec.service");
    let started = tokio::time::timeout(Duration::from_secs(30), systemd.start("after-reexec.service")).await;
    check(
        matches!(started, Ok(Ok(JobResult::Done))),
        "a start job on the new connection ends with its JobRemoved signal",
        format!("{started:?}"),
    );
    let stopped = tokio::time::timeout(Duration::from_secs(30), systemd.stop("after-reexec.service")).await;
    check(matches!(&stopped, Ok(Ok(s)) if s.result == JobResult::Done), "and a stop job", format!("{stopped:?}"));
    let _ = std::fs::remove_file("/run/systemd/system/after-reexec.service");
    println!("ALL PASSED");
}

//! The external profile end to end (issue 39): `fleet-conformance --against` judges a harness cluster driven only
//! through its endpoint, fleetctl and SSH — as a third party would judge its staging cluster. The run must pass with
//! at least [`MIN_RAN`] specs actually run (so it cannot pass by skipping everything), leave no unit with its prefix
//! behind (neither in fleet nor in systemd in any machine), and leave alone a unit that was there before it — named
//! `hello.service`, like a unit the suite itself creates: same machine, same MainPID. A second run interrupted with
//! SIGINT while its units run must exit 130 and remove them too.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fleet_harness::{Check, Cluster, Output, WaitOptions, wait_for};

/// The fewest specs the run against a 3-machine cluster with SSH and every capability must run (34 do on
/// 2026-12-05; `specs::tests::external_profile_counts_are_the_readmes`).
const MIN_RAN: usize = 30;

/// The longest the whole external run may take (it took 35 s on an idle machine).
const RUN_LIMIT: Duration = Duration::from_secs(420);

/// The unit that runs before and during the suite's run, and must come through untouched.
const BYSTANDER: &str = "hello.service";
const BYSTANDER_TEXT: &str =
    "[Service]\nExecStart=/bin/sh -c \"while true; do echo I was here first; sleep 1; done\"\n";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_fleet-conformance")
}

/// The bystander's machine (ID) and MainPID in that machine.
async fn bystander(c: &Cluster) -> (String, String) {
    let states = c.wait_for_n_active_units(1, 1).await.unwrap_or_else(|e| panic!("the bystander unit: {e}"));
    let id = states.get(BYSTANDER).cloned().unwrap_or_else(|| panic!("{BYSTANDER} is not active: {states:?}"));
    let m = c.machines().iter().find(|m| m.id() == id).expect("the bystander's machine");
    let p = m.systemctl_show(BYSTANDER, &["MainPID", "ActiveState"]).await.unwrap();
    assert_eq!(p.get("ActiveState").map(String::as_str), Some("active"), "{BYSTANDER} in {}: {p:?}", m.name());
    (id, p.get("MainPID").cloned().unwrap_or_default())
}

/// Every trace of units starting with `prefix`: fleet's unit list and states (API), and systemd's units in every
/// machine. Empty when the run cleaned up after itself.
async fn traces(c: &Cluster, prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    let out = c.fleetctl(1, &["list-unit-files", "--no-legend", "--full", "--fields", "unit"]).await.unwrap();
    found.extend(out.stdout.split_whitespace().filter(|u| u.starts_with(prefix)).map(|u| format!("fleet: {u}")));
    let out = c.fleetctl(1, &["list-units", "--no-legend", "--full", "--fields", "unit,machine"]).await.unwrap();
    found.extend(out.stdout.lines().filter(|l| l.starts_with(prefix)).map(|l| format!("fleet state: {l}")));
    for m in c.machines() {
        let pattern = format!("{prefix}*");
        let out = m.exec(&["systemctl", "list-units", "--all", "--plain", "--no-legend", &pattern]).await.unwrap();
        found.extend(out.stdout.lines().map(|l| format!("systemd in {}: {}", m.name(), l.trim())));
        let out = m.exec(&["sh", "-c", &format!("ls /run/fleet/units | grep '^{prefix}' || true")]).await.unwrap();
        found.extend(out.stdout.lines().map(|l| format!("/run/fleet/units in {}: {l}", m.name())));
    }
    found
}

fn args<'a>(c: &'a Cluster, key: &'a Path, fleetctl: &'a Path, prefix: &'a str, junit: &'a Path) -> Vec<String> {
    let endpoint = c.machine(1).unwrap().endpoint();
    [
        "--against",
        &endpoint,
        "--fleetctl",
        &fleetctl.display().to_string(),
        "--ssh-user",
        "core",
        "--ssh-key",
        &key.display().to_string(),
        "--capabilities",
        "all",
        "--prefix",
        prefix,
        "--junit",
        &junit.display().to_string(),
        "--jobs",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs the binary to its end (within [`RUN_LIMIT`]).
async fn run(args: &[String]) -> Output {
    let child = tokio::process::Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("fleet-conformance runs");
    let out = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("fleet-conformance --against did not finish within {RUN_LIMIT:?}"))
        .unwrap();
    Output {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        status: out.status.code().unwrap_or(-1),
    }
}

/// `(passed, failed, skipped)` test cases of a JUnit report.
fn counts(junit: &str) -> (usize, usize, usize) {
    let cases: Vec<&str> = junit.split("<testcase ").skip(1).collect();
    let failed = cases.iter().filter(|c| c.contains("<failure")).count();
    let skipped = cases.iter().filter(|c| c.contains("<skipped")).count();
    (cases.len() - failed - skipped, failed, skipped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_profile_passes_against_a_cluster_driven_through_its_endpoint() {
    let started = Instant::now();
    let c = Cluster::builder().machines(3).agent_ttl("3s").start().await.expect("a 3-machine harness cluster");
    c.wait_for_n_machines(1, 3).await.unwrap();
    let key = c.ssh_agent().expect("harness clusters authorise an SSH key").key_file().to_path_buf();
    let fleetctl = c.binaries().fleetctl.clone();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(BYSTANDER), BYSTANDER_TEXT).unwrap();
    let out = c.fleetctl(1, &["start", &tmp.path().join(BYSTANDER).display().to_string()]).await.unwrap();
    assert!(out.success(), "starting the bystander: {}", out.describe());
    let before = bystander(&c).await;

    let prefix = format!("fc-ci{:04x}-", std::process::id() & 0xffff);
    let junit = tmp.path().join("junit.xml");
    let out = run(&args(&c, &key, &fleetctl, &prefix, &junit)).await;
    let took = started.elapsed();
    let report = std::fs::read_to_string(&junit).unwrap_or_default();
    let (passed, failed, skipped) = counts(&report);
    assert!(
        out.status == 0 && failed == 0,
        "fleet-conformance --against exited {} with {failed} failed specs:\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    assert!(
        passed >= MIN_RAN,
        "only {passed} specs ran and passed ({skipped} skipped); at least {MIN_RAN} must run:\n{}",
        out.stdout
    );
    let left = traces(&c, &prefix).await;
    assert!(left.is_empty(), "the run left units with its prefix {prefix:?} behind: {left:#?}");
    let after = bystander(&c).await;
    assert_eq!(before, after, "{BYSTANDER} (not the suite's) must keep its machine and MainPID through the run");
    eprintln!(
        "external profile: {passed} passed, {skipped} skipped; cluster up and run done in {:.1} s",
        took.as_secs_f64()
    );

    // Interrupted while its units run: it stops, removes them and exits 130.
    let prefix = format!("fc-int{:04x}-", std::process::id() & 0xffff);
    let mut a = args(&c, &key, &fleetctl, &prefix, &junit);
    a.push("global_units::".into());
    let mut child = tokio::process::Command::new(bin())
        .args(&a)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Read its output meanwhile, so that a full pipe never holds it up.
    let mut pipe = child.stdout.take().expect("piped stdout");
    let reader = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text).await;
        text
    });
    let prefix_ref = &prefix;
    let c_ref = &c;
    wait_for(WaitOptions::secs(60).with_poll(Duration::from_millis(100)), "a unit of the second run", || async move {
        let seen = traces(c_ref, prefix_ref).await;
        if seen.iter().any(|t| t.starts_with("fleet: ")) {
            Check::Ready(())
        } else {
            Check::NotYet(format!("{seen:?}"))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let pid = child.id().expect("the second run is running").to_string();
    let kill = std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(kill.success(), "kill -INT {pid}");
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .expect("fleet-conformance ends within 120 s of SIGINT")
        .unwrap();
    let stdout = reader.await.unwrap_or_default();
    assert_eq!(status.code(), Some(130), "exit status after SIGINT:\n{stdout}");
    let left = traces(&c, &prefix).await;
    assert!(left.is_empty(), "after SIGINT the run left units with its prefix {prefix:?} behind: {left:#?}\n{stdout}");
    assert_eq!(
        before,
        bystander(&c).await,
        "{BYSTANDER} must keep its machine and MainPID through the interrupted run"
    );
}

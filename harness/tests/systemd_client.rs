//! fleet's systemd client (`fleet_systemd`, and the agent executor on top of it) against a real systemd over the
//! real system bus: the live probe `crates/fleetd/examples/systemd_probe.rs` runs as root in a harness machine with fleet
//! off, so nothing but the probe talks to that systemd. The probe prints one `PASS`/`FAIL` line per check and exits
//! 1 at the first failure; this test requires every check to pass and shows the probe's output otherwise.
//!
//! The probe binary is built with the fleet package's tests (`cargo nextest run --workspace`, as CI does, builds
//! examples); run alone: `cargo build -p fleetd --example systemd_probe` first.

use std::path::PathBuf;

use fleet_harness::{Cluster, Fleet, docker};

/// `target/<profile>/examples/systemd_probe`, next to this test's own `target/<profile>/deps/…` binary.
fn probe_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("tests run from target/<profile>/deps");
    profile_dir.join("examples").join("systemd_probe")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_client_passes_the_live_probe_in_a_machine() {
    let probe = probe_binary();
    assert!(
        probe.is_file(),
        "{} is missing: build it with `cargo build -p fleetd --example systemd_probe` (CI's workspace test build does)",
        probe.display()
    );
    let cluster = Cluster::builder().machines(1).fleet(Fleet::Off).start().await.expect("a machine with systemd");
    let machine = cluster.machine(1).expect("machine 1");
    let dest = format!("{}:/usr/local/bin/systemd_probe", machine.container_name());
    docker::run(&["cp", &probe.to_string_lossy(), &dest]).await.expect("docker cp of the probe into the machine");

    let out = machine.exec(&["/usr/local/bin/systemd_probe"]).await.expect("exec of the probe");
    let failed: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        out.success() && failed.is_empty(),
        "the systemd probe failed ({failed:?}); exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    let passed = out.stdout.lines().filter(|l| l.starts_with("PASS")).count();
    assert!(passed >= 20, "expected the probe's checks to run, saw {passed} PASS lines:\n{}", out.stdout);
}

//! A cluster, a restarted machine and fleetctl against a starting fleetd (issue 20): the harness hands out a
//! cluster (or a machine back) only once every fleet API answers a unit list, and fleetctl waits out the `503` a
//! starting fleetd answers. fleetd's start-up is slowed down for real: etcd is stopped while fleetd starts, so it
//! answers `503` until etcd is back.

use std::process::Stdio;

use fleet_harness::{Check, Cluster, Output};
use tokio::io::{AsyncBufReadExt, BufReader};

fn ok(out: &Output, what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
}

/// Waits until machine `slot`'s API answers `503`: fleetd runs but cannot serve (etcd is away).
async fn wait_unavailable(cluster: &Cluster, slot: usize) {
    let m = cluster.machine(slot).unwrap();
    cluster
        .wait_for("the fleet API to answer 503 while etcd is stopped", || async {
            match m.list_units_over_api().await {
                Err(seen) if seen.contains(" 503 ") => Check::Ready(()),
                Err(seen) => Check::NotYet(seen),
                Ok(()) => Check::NotYet("200: the unit list was served".into()),
            }
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_cluster_serves_every_api_and_takes_a_command_at_once() {
    let cluster = Cluster::builder().machines(2).agent_ttl("3s").start().await.unwrap();
    // One look each, no waiting: start() promised that every API answers.
    for m in cluster.machines() {
        if let Err(seen) = m.list_units_over_api().await {
            panic!("start() returned while the API of {} answered: {seen}", m.name());
        }
        assert!(m.api_ready_after().is_some(), "{} reports no API wait", m.name());
    }
    let hello = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/units/hello.service");
    let out = cluster.fleetctl(2, &["start", "--no-block", hello]).await.unwrap();
    ok(&out, "fleetctl start right after the cluster started");
    assert_eq!(out.stdout, "Unit hello.service inactive\nTriggered unit hello.service start\n", "{}", out.describe());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_machine_is_back_only_once_its_api_answers() {
    let cluster = Cluster::builder().machines(1).agent_ttl("3s").start().await.unwrap();
    let m = cluster.machine(1).unwrap();
    m.stop().await.unwrap();
    cluster.stop_etcd().await.unwrap();
    // The machine starts while etcd is away; etcd comes back only once fleetd answers 503, i.e. after fleet
    // started. The restart helper must not return before the API answers, whenever that is.
    let restart = async {
        m.start().await.unwrap();
        m.list_units_over_api().await
    };
    let etcd_back_late = async {
        wait_unavailable(&cluster, 1).await;
        cluster.start_etcd().await.unwrap();
    };
    let (answer, ()) = tokio::join!(restart, etcd_back_late);
    if let Err(seen) = answer {
        panic!("Machine::start returned while the API answered: {seen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleetctl_waits_out_a_starting_fleetd() {
    let cluster = Cluster::builder().machines(1).agent_ttl("3s").start().await.unwrap();
    cluster.stop_etcd().await.unwrap();
    let m = cluster.machine(1).unwrap();
    m.exec_ok(&["systemctl", "restart", "fleet.service"]).await.unwrap();
    wait_unavailable(&cluster, 1).await;

    let mut cmd = cluster.fleetctl_command(1, &["--debug", "--request-timeout=60", "list-units"]).unwrap();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    // etcd comes back only after fleetctl has met the 503 and said it retries.
    loop {
        match stderr.next_line().await.unwrap() {
            Some(line) if line.contains("fleet API unavailable (503), retrying") => break,
            Some(line) => seen.push(line),
            None => panic!("fleetctl ended without retrying the 503; stderr:\n{}", seen.join("\n")),
        }
    }
    cluster.start_etcd().await.unwrap();
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    let out = child.wait_with_output().await.unwrap();
    drain.await.unwrap();
    assert!(out.status.success(), "fleetctl failed after the 503: {:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "UNIT\tMACHINE\tACTIVE\tSUB\n");
}

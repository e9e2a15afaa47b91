//! Tests of the harness itself: real clusters, with fleet off or a stand-in for fleetd (fleetd does not need to
//! exist). Each test starts its own small cluster; every one ends by checking that nothing of it remains.

use std::time::Duration;

use fleet_harness::reap;
use fleet_harness::{Check, Cluster, ClusterError, Fleet, RunId, WaitOptions, wait_for};

/// Asserts that no container or network of `run` remains.
fn assert_gone(run: &RunId) {
    let left = reap::remaining(run).expect("docker answers");
    assert!(left.is_empty(), "run {run} left {left:?}");
}

/// Drops the cluster and asserts that nothing of it remains.
fn tear_down(cluster: Cluster) {
    let run = cluster.run_id().clone();
    drop(cluster);
    assert_gone(&run);
}

fn without_fleet(n: usize) -> fleet_harness::ClusterBuilder {
    Cluster::builder().machines(n).fleet(Fleet::Off)
}

/// A TCP connection from `machine` to `host:port` (bash's /dev/tcp, 2 s at most); true when it connects.
async fn can_reach(m: &fleet_harness::Machine, host: &str, port: u16) -> bool {
    let probe = format!("exec 3<>/dev/tcp/{host}/{port}");
    m.exec(&["timeout", "2", "bash", "-c", &probe]).await.expect("exec runs").success()
}

/// Asserts that the machine's network interface (eth0, or eth1 after a reconnect) has `ip`.
async fn assert_has_address(m: &fleet_harness::Machine, ip: &str) {
    let addrs = m.exec(&["ip", "-4", "-o", "addr"]).await.unwrap().stdout;
    assert!(addrs.contains(&format!("inet {ip}/")), "{} lacks {ip}: {addrs}", m.name());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_answers_from_inside_the_network() {
    let cluster = without_fleet(1).start().await.unwrap();
    let m = cluster.machine(1).unwrap();
    let request = format!(
        "exec 3<>/dev/tcp/{}/2379 && printf 'GET /version HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3",
        cluster.etcd().name()
    );
    let out = m.exec(&["bash", "-c", &request]).await.unwrap();
    assert!(out.stdout.contains("\"etcdserver\":\"3.4"), "{}", out.describe());
    // The v2 API is enabled too (the original fleet speaks it).
    let v2 = request.replace("/version", "/v2/keys/");
    let out = m.exec(&["bash", "-c", &v2]).await.unwrap();
    assert!(out.stdout.contains("\"action\":\"get\""), "{}", out.describe());
    assert!(cluster.etcd().health().await.unwrap().success());
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_boot_to_running_with_distinct_machine_ids() {
    let cluster = without_fleet(3).start().await.unwrap();
    let mut ids = std::collections::BTreeSet::new();
    for (i, m) in cluster.machines().iter().enumerate() {
        assert_eq!(m.system_state().await.unwrap(), "running", "{}", m.name());
        assert_eq!(m.read_file("/etc/machine-id").await.unwrap().trim(), m.id());
        assert_eq!(m.exec(&["hostname"]).await.unwrap().stdout.trim(), format!("m{}", i + 1));
        assert_eq!(m.id().len(), 32);
        ids.insert(m.id().to_string());
    }
    assert_eq!(ids.len(), 3, "machine ids must differ: {ids:?}");
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_started_inside_a_machine_runs() {
    let cluster = without_fleet(1).start().await.unwrap();
    let m = cluster.machine(1).unwrap();
    m.exec_ok(&["systemd-run", "--unit=hello", "/bin/sleep", "300"]).await.unwrap();
    let props = m.systemctl_show("hello.service", &["ActiveState", "SubState", "MainPID"]).await.unwrap();
    assert_eq!(props["ActiveState"], "active", "{props:?}");
    assert_eq!(props["SubState"], "running", "{props:?}");
    assert_ne!(props["MainPID"], "0");
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutting_a_machine_off_stops_its_etcd_traffic_and_healing_restores_it() {
    let cluster = without_fleet(2).start().await.unwrap();
    let (m1, m2) = (cluster.machine(1).unwrap(), cluster.machine(2).unwrap());
    let etcd = cluster.etcd().name().to_string();
    assert!(can_reach(m1, &etcd, 2379).await);

    m1.partition().await.unwrap();
    assert!(!can_reach(m1, &etcd, 2379).await, "partitioned machine still reaches etcd");
    assert!(can_reach(m2, &etcd, 2379).await, "the other machine lost etcd too");

    m1.heal().await.unwrap();
    assert!(can_reach(m1, &etcd, 2379).await, "healed machine cannot reach etcd");
    // Same address as before, so fleet's public_ip stays true.
    assert_has_address(m1, m1.ip()).await;
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_kill_and_start_again_keep_identity_and_address() {
    let cluster = without_fleet(1).start().await.unwrap();
    let m = cluster.machine(1).unwrap();
    let (id, ip) = (m.id().to_string(), m.ip().to_string());

    m.stop().await.unwrap();
    assert!(!m.is_running().await.unwrap());
    m.start().await.unwrap();
    assert_eq!(m.system_state().await.unwrap(), "running");

    m.kill().await.unwrap();
    assert!(!m.is_running().await.unwrap());
    m.start().await.unwrap();
    assert_eq!(m.system_state().await.unwrap(), "running");

    assert_eq!(m.read_file("/etc/machine-id").await.unwrap().trim(), id);
    assert_has_address(m, &ip).await;
    assert!(can_reach(m, cluster.etcd().name(), 2379).await);
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_machine_keeps_slot_and_address_with_a_new_machine_id() {
    let mut cluster = without_fleet(1).start().await.unwrap();
    let (old_id, ip) = {
        let m = cluster.machine(1).unwrap();
        (m.id().to_string(), m.ip().to_string())
    };
    let m = cluster.replace_machine(1).await.unwrap();
    assert_ne!(m.id(), old_id);
    assert_eq!(m.ip(), ip);
    assert_eq!(m.read_file("/etc/machine-id").await.unwrap().trim(), m.id());
    assert_has_address(m, &ip).await;
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_added_later_joins_the_network() {
    let mut cluster = without_fleet(1).start().await.unwrap();
    let slot = cluster.add_machine(Some("role=late")).await.unwrap();
    assert_eq!(slot, 2);
    let m2 = cluster.machine(2).unwrap();
    assert_eq!(m2.system_state().await.unwrap(), "running");
    assert_ne!(m2.id(), cluster.machine(1).unwrap().id());
    assert!(can_reach(m2, cluster.etcd().name(), 2379).await);
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_keeps_its_data_across_stop_and_start() {
    let cluster = without_fleet(1).start().await.unwrap();
    let etcdctl = |args: &[&str]| {
        let mut cmd = vec!["docker", "exec", cluster.etcd().name(), "/usr/bin/etcdctl"];
        cmd.extend_from_slice(args);
        std::process::Command::new(cmd[0]).args(&cmd[1..]).output().unwrap()
    };
    assert!(etcdctl(&["put", "/harness/k", "v1"]).status.success());
    cluster.stop_etcd().await.unwrap();
    let m = cluster.machine(1).unwrap();
    assert!(!can_reach(m, cluster.etcd().name(), 2379).await, "etcd still answers after stop");
    cluster.start_etcd().await.unwrap();
    let got = etcdctl(&["get", "--print-value-only", "/harness/k"]);
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "v1");
    assert!(can_reach(m, cluster.etcd().name(), 2379).await);
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stand_in_fleetd_runs_as_the_original_was_deployed() {
    let cluster = Cluster::builder()
        .machines(1)
        .fleet(Fleet::StandIn)
        .metadata(1, "region=us-west")
        .agent_ttl("5s")
        .engine_reconcile_interval(1.0)
        .start()
        .await
        .unwrap();
    let m = cluster.machine(1).unwrap();
    for unit in ["fleet.service", "fleet.socket", "fleet-tcp.socket"] {
        let props = m.systemctl_show(unit, &["ActiveState"]).await.unwrap();
        assert_eq!(props["ActiveState"], "active", "{unit}");
    }
    let conf = m.read_file("/etc/fleet/fleet.conf").await.unwrap();
    for line in [
        format!("etcd_servers={}\n", cluster.etcd().url()),
        format!("public_ip={}\n", m.ip()),
        "metadata=hostname=m1,region=us-west\n".to_string(),
        "agent_ttl=5s\n".to_string(),
        "engine_reconcile_interval=1\n".to_string(),
        format!("etcd_key_prefix=/fleet_harness/{}/\n", cluster.run_id()),
        "verbosity=1\n".to_string(),
    ] {
        assert!(conf.contains(&line), "missing {line:?} in\n{conf}");
    }
    // Socket activation: both sockets handed to the service; the Unix socket exists; TCP answers from the host.
    let journal = m.exec(&["journalctl", "-u", "fleet.service", "-o", "cat", "--no-pager"]).await.unwrap().stdout;
    assert!(journal.contains("stand-in fleetd -config /etc/fleet/fleet.conf LISTEN_FDS=2"), "{journal}");
    assert!(m.exec(&["test", "-S", "/var/run/fleet.sock"]).await.unwrap().success());
    let addr: std::net::SocketAddr = format!("{}:{}", m.ip(), fleet_harness::API_PORT).parse().unwrap();
    let tcp = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr)).await;
    assert!(matches!(tcp, Ok(Ok(_))), "TCP API port not reachable from the host: {tcp:?}");
    // fleetd is bind-mounted read-only.
    assert!(!m.exec(&["sh", "-c", "echo x >> /opt/fleet/fleetd"]).await.unwrap().success());
    tear_down(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chosen_machine_ids_and_per_machine_config_reproduce_a_recorded_cluster() {
    const ID1: &str = "8363165e6276f500b71169eca9b3f76b";
    let mut cluster = Cluster::builder()
        .machines(2)
        .fleet(Fleet::StandIn)
        .machine_id(1, ID1)
        .machine_config(1, "public_ip", "172.17.0.2")
        .start()
        .await
        .unwrap();
    let (m1, m2) = (cluster.machine(1).unwrap(), cluster.machine(2).unwrap());
    assert_eq!(m1.id(), ID1);
    assert_eq!(m1.read_file("/etc/machine-id").await.unwrap().trim(), ID1);
    assert_ne!(m2.id(), ID1);
    let conf1 = m1.read_file("/etc/fleet/fleet.conf").await.unwrap();
    assert!(conf1.contains("public_ip=172.17.0.2\n"), "slot 1 publishes the chosen address:\n{conf1}");
    let conf2 = m2.read_file("/etc/fleet/fleet.conf").await.unwrap();
    assert!(conf2.contains(&format!("public_ip={}\n", m2.ip())), "slot 2 keeps its own address:\n{conf2}");
    // A stand-in serves no API, so nothing waited for one.
    assert_eq!(m1.api_ready_after(), None);
    // A replacement gets a fresh machine-id, as the original's ReplaceMember.
    let replaced = cluster.replace_machine(1).await.unwrap();
    assert_ne!(replaced.id(), ID1);
    tear_down(cluster);
}

/// A stand-in fleetctl: prints its endpoint (flag or env) and, for `list-machines`, the lines of $FAKE_MACHINES.
const FAKE_FLEETCTL: &str = r#"#!/bin/sh
case "$*" in
  *list-machines*) printf "$(cat "$(dirname "$0")/machines")" ;;
  *) echo "args: $* env: $FLEETCTL_ENDPOINT"; cat ;;
esac
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleetctl_runs_on_the_host_and_wait_helpers_report_the_last_output() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("fleetctl");
    std::fs::write(&bin, FAKE_FLEETCTL).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("machines"), "aaaa\\n").unwrap();

    let cluster = without_fleet(1)
        .fleetctl_bin(&bin)
        .wait(WaitOptions { timeout: Duration::from_secs(1), poll: Duration::from_millis(100) })
        .start()
        .await
        .unwrap();
    let endpoint = cluster.machine(1).unwrap().endpoint();
    let out = cluster.fleetctl(1, &["status", "x"]).await.unwrap();
    assert_eq!(out.stdout, format!("args: --endpoint={endpoint} status x env: \n"));
    let out = cluster.fleetctl_with_env(1, &["status"]).await.unwrap();
    assert_eq!(out.stdout, format!("args: status env: {endpoint}\n"));
    let out = cluster.fleetctl_with_input(1, "unit text\n", &["submit"]).await.unwrap();
    assert!(out.stdout.ends_with("unit text\n"), "{}", out.stdout);

    let err = cluster.wait_for_n_machines(1, 2).await.unwrap_err();
    assert!(matches!(err, ClusterError::Wait(_)));
    let msg = err.to_string();
    assert!(msg.contains("for 2 machines; last seen: 1 of 2; output: aaaa"), "{msg}");

    std::fs::write(dir.path().join("machines"), "aaaa\\nbbbb\\n").unwrap();
    assert_eq!(cluster.wait_for_n_machines(1, 2).await.unwrap(), ["aaaa", "bbbb"]);
    tear_down(cluster);
}

#[tokio::test]
async fn generic_wait_gives_up_with_the_last_observation() {
    let opts = WaitOptions { timeout: Duration::from_millis(300), poll: Duration::from_millis(50) };
    let err = wait_for(opts, "the moon", || async { Check::<()>::NotYet("still cheese".into()) }).await.unwrap_err();
    assert!(err.to_string().contains("for the moon; last seen: still cheese"), "{err}");
}

/// Set in the child process of `nothing_remains_after_a_failing_test`.
const CHILD_ENV: &str = "FLEET_HARNESS_TEST_FAILING_CHILD";

/// Run only as the child of `nothing_remains_after_a_failing_test`: starts a cluster, records its run id, panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run by nothing_remains_after_a_failing_test"]
async fn failing_child() {
    let Ok(record) = std::env::var(CHILD_ENV) else { return };
    let cluster = without_fleet(2).start().await.unwrap();
    std::fs::write(&record, cluster.run_id().as_str()).unwrap();
    let m = cluster.machine(1).unwrap();
    m.exec_ok(&["systemd-run", "--unit=busy", "/bin/sleep", "600"]).await.unwrap();
    panic!("failing on purpose with cluster {} up", cluster.run_id());
}

#[test]
fn nothing_remains_after_a_failing_test() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run-id");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "failing_child", "--ignored", "--nocapture"])
        .env(CHILD_ENV, &record)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child was meant to fail:\n{stdout}\n{stderr}");
    assert!(stderr.contains("failing on purpose"), "{stderr}");
    let run = RunId::from_string(std::fs::read_to_string(&record).expect("child recorded its run id"));
    assert_gone(&run);
    // No process of the run is left on the host either (docker exec / fleetctl children die with their owner).
    let leftover: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(run.as_str()))
        .collect();
    assert!(leftover.is_empty(), "processes of run {run} remain: {leftover:?}");
}

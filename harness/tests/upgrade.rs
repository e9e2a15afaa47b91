//! Upgrading a running cluster from old fleetds, machine by machine, without a flag day (issue 35). "Old" is fleetd
//! and fleetctl built from main before registry layout 2 ([`OLD_COMMIT`]); they run layout 1 only.
//!
//! A cluster of old fleetds runs template instances, an `AtMostOnce=true` unit and a global unit, all started with
//! the old fleetctl. Each machine in turn gets the new fleetd (`systemctl restart fleet.service` onto the new binary,
//! docs/fleetd.md). Then:
//!
//! - while any machine runs an old fleetd, the cluster stays at layout 1 (`P/version` 1), and the old fleetctl lists
//!   every unit and starts a new one after each step;
//! - once every machine runs the new one, the engine switches the cluster to layout 2 (`P/version` 2): no `target`
//!   or `desired` key is left, and every placement is a schedule entry;
//! - no unit restarted or moved all along: each one's MainPID on its machine is the one it had before the first
//!   step, and the old fleetctl still lists, starts and stops units afterwards.
//!
//! The old binaries are built once from this repository's history (`git archive` of [`OLD_COMMIT`] and `cargo build`,
//! about 5 minutes on 2 cores) into `FLEET_OLD_BUILDS` (default `/var/lib/fleet-harness/old-builds`, else the
//! workspace's `target/old-builds`) and kept there by commit.
//!
//! Broken on purpose, then reverted: the new fleetd advertising layout 1 only (`layout::RUNS` = `[1]`): the cluster
//! never switched and the test failed with the last `P/version` it read ("1").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use fleet_harness::wait::{parse_table, table_args};
use fleet_harness::{Check, Cluster, Fleet, Output};

/// main just before registry layout 2 (the last commit of 2026-12-05's first session).
const OLD_COMMIT: &str = "9beecc88c18c8db78379657ba41c8a36fff83c58";
const INSTANCES: usize = 4;
const PLAIN: &str = "[Service]\nExecStart=/bin/sleep 100000\n";
const ONCE: &str = "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\nAtMostOnce=true\n";
const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\nGlobal=true\n";

fn ok(out: &Output, what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
}

fn run(cmd: &mut Command, what: &str) {
    let status = cmd.status().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(status.success(), "{what}: {status}");
}

/// The workspace root (this crate's parent).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the harness lies in the workspace").to_path_buf()
}

/// The directory holding `fleetd` and `fleetctl` built from [`OLD_COMMIT`], building them first if needed.
fn old_binaries() -> PathBuf {
    let root = std::env::var_os("FLEET_OLD_BUILDS").map(PathBuf::from).unwrap_or_else(|| {
        let shared = PathBuf::from("/var/lib/fleet-harness/old-builds");
        if std::fs::create_dir_all(&shared).is_ok() { shared } else { workspace().join("target/old-builds") }
    });
    let root = std::path::absolute(&root).expect("the old builds' directory as an absolute path");
    let bin = root.join(OLD_COMMIT);
    if bin.join("fleetd").is_file() && bin.join("fleetctl").is_file() {
        return bin;
    }
    let work = root.join(format!("{OLD_COMMIT}.build"));
    let _ = std::fs::remove_dir_all(&work);
    let src = work.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let archive = work.join("src.tar");
    run(
        Command::new("git")
            .arg("-C")
            .arg(workspace())
            .args(["archive", "--format=tar", "-o"])
            .arg(&archive)
            .arg(OLD_COMMIT),
        &format!("git archive of {OLD_COMMIT} (a clone with this repository's history is needed)"),
    );
    run(Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg(&src), "unpacking the old sources");
    eprintln!("building fleetd and fleetctl of {OLD_COMMIT} into {}", work.display());
    run(
        Command::new("cargo")
            .args(["build", "--locked", "-p", "fleetd", "-p", "fleetctl", "--target-dir"])
            .arg(work.join("target"))
            .current_dir(&src),
        "building the old fleetd and fleetctl",
    );
    let staged = root.join(format!("{OLD_COMMIT}.staged"));
    let _ = std::fs::remove_dir_all(&staged);
    std::fs::create_dir_all(&staged).unwrap();
    for name in ["fleetd", "fleetctl"] {
        std::fs::copy(work.join("target/debug").join(name), staged.join(name)).unwrap();
    }
    // Whole or not at all: a build cut short leaves nothing that looks finished.
    std::fs::rename(&staged, &bin).unwrap();
    let _ = std::fs::remove_dir_all(&work);
    bin
}

/// The new fleetd: this workspace's build (or `FLEETD_BIN`).
fn new_fleetd() -> PathBuf {
    fleet_harness::config::Binaries::locate().expect("this workspace's fleetd").fleetd
}

/// `P/version` as etcd holds it.
async fn layout(cluster: &Cluster) -> String {
    let key = format!("{}version", cluster.key_prefix());
    cluster.etcd().get(&key).await.unwrap().unwrap_or_default()
}

/// `list-units` rows (unit, machine ID, active) through machine 1, with the old fleetctl.
async fn rows(cluster: &Cluster) -> Result<Vec<(String, String, String)>, String> {
    let out = cluster.fleetctl(1, &table_args("list-units", "unit,machine,active")).await.map_err(|e| e.to_string())?;
    if !out.success() {
        return Err(out.describe());
    }
    let rows = parse_table(&out.stdout, &["unit", "machine", "active"]);
    Ok(rows
        .iter()
        .map(|r| (r.get("unit").to_string(), r.get("machine").to_string(), r.get("active").to_string()))
        .collect())
}

/// Waits until the old fleetctl lists `n` rows, all active.
async fn all_active(cluster: &Cluster, n: usize) {
    cluster
        .wait_for(&format!("{n} active rows in list-units"), || async {
            match rows(cluster).await {
                Ok(r) if r.len() == n && r.iter().all(|(_, _, a)| a == "active") => Check::Ready(()),
                Ok(r) => Check::NotYet(format!("{r:?}")),
                Err(e) => Check::NotYet(e),
            }
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_old_fleetds_is_upgraded_machine_by_machine_and_no_unit_restarts() {
    let old = old_binaries();
    let cluster = Cluster::builder()
        .machines(3)
        .agent_ttl("10s")
        .fleet(Fleet::Binary(old.join("fleetd")))
        .fleetctl_bin(old.join("fleetctl"))
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let mut units: Vec<String> = (1..=INSTANCES).map(|i| format!("web@{i}.service")).collect();
    file("web@.service", PLAIN);
    let mut args: Vec<String> = units.iter().map(|u| dir.path().join(u).display().to_string()).collect();
    args.push(file("once.service", ONCE));
    args.push(file("global.service", GLOBAL));
    units.extend(["once.service".to_string(), "global.service".to_string()]);
    let arg_refs: Vec<&str> = std::iter::once("start").chain(args.iter().map(String::as_str)).collect();
    ok(&cluster.fleetctl(1, &arg_refs).await.unwrap(), "old fleetctl start");
    let rows_now = INSTANCES + 1 + 3;
    all_active(&cluster, rows_now).await;
    assert_eq!(layout(&cluster).await, "1", "old fleetds run layout 1");
    let before: BTreeMap<(String, String), String> = cluster.main_pids(&units).await.unwrap();
    assert_eq!(before.len(), rows_now, "every copy has a MainPID: {before:?}");

    let new = new_fleetd();
    let mut extra = 0;
    for slot in 1..=3 {
        cluster.machine(slot).unwrap().upgrade_fleetd(&new).await.unwrap();
        cluster.wait_for_n_machines(1, 3).await.unwrap();
        if slot < 3 {
            assert_eq!(layout(&cluster).await, "1", "an old fleetd still runs: no switch after m{slot}");
        }
        // The old fleetctl starts a unit and lists it, whatever the machines run.
        extra += 1;
        let name = format!("extra-{extra}.service");
        ok(&cluster.fleetctl(1, &["start", &file(&name, PLAIN)]).await.unwrap(), "old fleetctl start mid-upgrade");
        all_active(&cluster, rows_now + extra).await;
    }

    cluster
        .wait_for("the switch to layout 2", || async {
            let version = layout(&cluster).await;
            if version == "2" { Check::Ready(()) } else { Check::NotYet(format!("P/version {version:?}")) }
        })
        .await
        .unwrap();
    // Nothing of layout 1 is left: no `target` or `desired` key, every placement an entry.
    let prefix = cluster.key_prefix();
    let keys = cluster.etcd().keys_with_prefix(&format!("{prefix}units/")).await.unwrap();
    let leftover: Vec<&String> = keys.iter().filter(|k| k.ends_with("/target") || k.ends_with("/desired")).collect();
    assert!(leftover.is_empty(), "layout-1 keys left after the switch: {leftover:?}");
    let entries = cluster.etcd().keys_with_prefix(&format!("{prefix}machines/")).await.unwrap();
    let placed = entries.iter().filter(|k| k.contains("/schedule/")).count();
    assert!(placed >= INSTANCES + 1 + extra + 3, "schedule entries: {entries:?}");

    all_active(&cluster, rows_now + extra).await;
    let after = cluster.main_pids(&units).await.unwrap();
    assert_eq!(after, before, "a unit restarted or moved during the upgrade (machine, unit) → MainPID");

    // The old fleetctl after the switch: stop, start and list.
    ok(&cluster.fleetctl(1, &["stop", "extra-1.service"]).await.unwrap(), "old fleetctl stop after the switch");
    cluster
        .wait_for("extra-1 stopped", || async {
            match rows(&cluster).await {
                Ok(r) if r.iter().any(|(u, _, a)| u == "extra-1.service" && a != "active") => Check::Ready(()),
                Ok(r) => Check::NotYet(format!("{r:?}")),
                Err(e) => Check::NotYet(e),
            }
        })
        .await
        .unwrap();
    ok(&cluster.fleetctl(1, &["start", &file("late.service", PLAIN)]).await.unwrap(), "old fleetctl start after");
    ok(&cluster.fleetctl(1, &["start", "extra-1.service"]).await.unwrap(), "old fleetctl start again");
    all_active(&cluster, rows_now + extra + 1).await;
    assert_eq!(cluster.main_pids(&units).await.unwrap(), before, "nothing restarted at the end either");
}

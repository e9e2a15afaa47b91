//! The machines' resources as the nemesis fails them (`--resource-faults`, issue 37): a full units directory and a
//! fleetd wall clock an hour off.
//!
//! A full disk is faithful only if the files already there stay visible and deletable: mounting a small filesystem
//! over a populated directory mid-run would hide them. So before any unit is placed, every machine gets its units
//! directory as a tmpfs of its own, from a mount unit in `/etc` (which survives a machine kill: the container's
//! writable layer is kept, and systemd mounts it again at boot, before fleet.service). The fault fills it with one
//! file until ENOSPC and removes that file when it is undone. The clock jump runs fleetd under libfaketime (in the
//! machine image) through a drop-in, as `harness/tests/clock_jump.rs` does, and removes the drop-in after.

use crate::cluster::Cluster;
use crate::machine::Machine;

/// fleetd's units directory in the machines.
pub const UNITS_DIR: &str = "/run/fleet/units";
const MOUNT_UNIT: &str = "/etc/systemd/system/run-fleet-units.mount";
const FLEET_DROPIN_DIR: &str = "/etc/systemd/system/fleet.service.d";
const FILLER: &str = "/run/fleet/units/.nemesis-fill";
const FILLER_UNIT: &str = "nemesis-fill";
const CLOCK_DROPIN: &str = "/etc/systemd/system/fleet.service.d/nemesis-clock.conf";
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Gives every machine's units directory a tmpfs of its own (fleetd stopped meanwhile: call before any unit is
/// placed) and waits for every API again.
pub async fn prepare(cluster: &Cluster) -> Result<(), String> {
    let mount = format!(
        "[Unit]\nDescription=fleet's units directory as a filesystem of its own (nemesis resource faults)\n\
         DefaultDependencies=no\nBefore=fleet.service\n\n[Mount]\nWhat=tmpfs\nWhere={UNITS_DIR}\nType=tmpfs\n\
         Options=size=64m,mode=0755\n"
    );
    let dropin = "[Unit]\nRequires=run-fleet-units.mount\nAfter=run-fleet-units.mount\n";
    for m in cluster.machines() {
        m.exec_ok(&["mkdir", "-p", FLEET_DROPIN_DIR]).await.map_err(err)?;
        m.write_file(MOUNT_UNIT, &mount).await.map_err(err)?;
        m.write_file(&format!("{FLEET_DROPIN_DIR}/nemesis-units-dir.conf"), dropin).await.map_err(err)?;
        let cmd = format!(
            "systemctl stop fleet.service && systemctl daemon-reload && systemctl start run-fleet-units.mount \
             && systemctl start fleet.service && findmnt -n -o FSTYPE {UNITS_DIR}"
        );
        let out = m.exec_ok(&["sh", "-c", &cmd]).await.map_err(err)?;
        if out.stdout.trim() != "tmpfs" {
            return Err(format!("{}: {UNITS_DIR} is not a tmpfs of its own: {:?}", m.name(), out.stdout.trim()));
        }
    }
    for m in cluster.machines() {
        m.wait_api(cluster.wait_options()).await.map_err(err)?;
    }
    Ok(())
}

/// Fills `m`'s units directory to the last page and keeps it full, as a disk is full when something keeps
/// writing: a page freed there (a unit file replaced, removed) is taken back within 100 ms by a filler running as a
/// transient service in the machine. Without that, one free page is enough for every later replace (the temporary
/// file takes it, the rename frees the old file's). Checks that nothing is left before it returns.
pub async fn fill(m: &Machine) -> Result<(), String> {
    let keep_full = format!(
        "while :; do dd if=/dev/zero of={FILLER} bs=64k oflag=append conv=notrunc 2>/dev/null; \
         dd if=/dev/zero of={FILLER}-pages bs=4k oflag=append conv=notrunc 2>/dev/null; sleep 0.1; done"
    );
    m.exec_ok(&["systemd-run", "--unit", FILLER_UNIT, "--collect", "sh", "-c", &keep_full]).await.map_err(err)?;
    // Full once the filler's first round is through: nothing left, and the filler still running.
    let check = format!(
        "for i in $(seq 100); do a=$(df --output=avail -B1 {UNITS_DIR} | tail -1 | tr -d ' '); \
         [ \"$a\" = 0 ] && systemctl is-active -q {FILLER_UNIT} && exit 0; sleep 0.1; done; echo $a; exit 1"
    );
    match m.exec(&["sh", "-c", &check]).await.map_err(err)? {
        out if out.success() => Ok(()),
        out => {
            Err(format!("{}: {UNITS_DIR} not full after filling it: {} bytes available", m.name(), out.stdout.trim()))
        }
    }
}

/// Frees `m`'s units directory again: the filler stopped, its files removed.
pub async fn free(m: &Machine) -> Result<(), String> {
    m.exec(&["systemctl", "stop", FILLER_UNIT]).await.map_err(err)?;
    m.exec_ok(&["rm", "-f", FILLER, &format!("{FILLER}-pages")]).await.map_err(err)?;
    Ok(())
}

/// Restarts `m`'s fleetd with its wall clock an hour ahead or behind (`Some`), or on the host's clock (`None`).
pub async fn skew(cluster: &Cluster, m: &Machine, ahead: Option<bool>) -> Result<(), String> {
    match ahead {
        Some(ahead) => {
            let offset = if ahead { "+1h" } else { "-1h" };
            let dropin = format!(
                "[Service]\nEnvironment=LD_PRELOAD={LIBFAKETIME} FAKETIME={offset} FAKETIME_DONT_FAKE_MONOTONIC=1 \
                 FAKETIME_NO_CACHE=1\n"
            );
            m.exec_ok(&["mkdir", "-p", FLEET_DROPIN_DIR]).await.map_err(err)?;
            m.write_file(CLOCK_DROPIN, &dropin).await.map_err(err)?;
        }
        None => {
            m.exec_ok(&["rm", "-f", CLOCK_DROPIN]).await.map_err(err)?;
        }
    }
    m.exec_ok(&["sh", "-c", "systemctl daemon-reload && systemctl restart fleet.service"]).await.map_err(err)?;
    m.wait_api(cluster.wait_options()).await.map_err(err)?;
    Ok(())
}

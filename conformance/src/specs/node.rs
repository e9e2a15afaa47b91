//! One fleetd's life: clean shutdown, shutdown while the monitor restarts the server, SIGHUP, purge on stop,
//! duplicate machine IDs.

use std::time::Duration;

use fleet_harness::Check;

use super::scheduling::stop_fleet;
use crate::check::ensure_eq;
use crate::ctx::tail;
use crate::fixtures;
use crate::{Ctx, Outcome};

/// fleet.service is `inactive` with `Result=success`.
async fn stopped_cleanly(ctx: &Ctx, slot: usize, secs: u64) -> Outcome {
    let what = format!("fleet.service in m{slot} to be inactive with Result=success");
    ctx.wait_for_secs(secs, &what, || async move {
        match ctx.show(slot, "fleet.service", &["ActiveState", "Result"]).await {
            Ok(p) if p.get("ActiveState").map(String::as_str) == Some("inactive") => {
                if p.get("Result").map(String::as_str) == Some("success") {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{p:?}"))
                }
            }
            Ok(p) => Check::NotYet(format!("{p:?}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
    .map_err(|e| format!("{e}\n  (a failed Result means fleetd exited non-zero or was killed on stop)"))
}

/// `systemctl stop fleet` ends fleetd cleanly.
pub async fn shutdown(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 1).await?;
    ctx.exec_ok(1, &["systemctl", "stop", "fleet"]).await?;
    stopped_cleanly(&ctx, 1, 30).await
}

/// With etcd unreachable the monitor restarts the server; `systemctl stop fleet` still ends fleetd cleanly.
pub async fn shutdown_vs_monitor(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 1).await?;
    ctx.machine(1)?.partition().await.map_err(|e| e.to_string())?;
    ctx.wait_journal(1, "Server monitor triggered: Monitor timed out before successful heartbeat", 60).await?;
    ctx.exec_ok(1, &["systemctl", "stop", "fleet"]).await?;
    stopped_cleanly(&ctx, 1, 100).await
}

/// SIGHUP reloads the configuration and the API keeps serving on the same listeners.
pub async fn sighup(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 1).await?;
    ctx.exec_ok(1, &["test", "-S", fleet_harness::config::SOCKET_PATH]).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("hello.service")]).await?;
    ctx.wait_for_n_active_units(1, 1).await?;
    ctx.fleetctl_ok(1, &["unload", "hello.service"]).await?;
    ctx.wait_for_n_units(1, 0).await?;
    ctx.exec_ok(1, &["systemctl", "kill", "-s", "SIGHUP", "fleet"]).await?;
    ctx.wait_journal(1, "Reloading configuration", 30).await?;
    let out = ctx.fleetctl(1, &["list-units"]).await?;
    ctx.ensure(out.success(), || "list-units after SIGHUP exits 0".into())?;
    ctx.wait_for_n_machines(1, 1).await?;
    let journal = ctx.journal_fleet(1).await?;
    ctx.ensure(!journal.contains("Failed serving HTTP on listener:"), || {
        format!("no `Failed serving HTTP on listener:` in fleet's journal; last lines: {}", tail(&journal, 8))
    })?;
    let p = ctx.show(1, "fleet.service", &["ActiveState", "Result"]).await?;
    ensure_eq(
        "fleet.service after SIGHUP",
        (Some("active"), Some("success")),
        (p.get("ActiveState").map(String::as_str), p.get("Result").map(String::as_str)),
    )
}

/// A machine whose fleet stops purges its units; a unit pinned to it (`MachineID=`) is not rescheduled.
pub async fn node_shutdown(mut ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 1).await?;
    let id = ctx.id(1)?;
    let unit = format!("pin@{id}.service");
    ctx.fleetctl_ok(1, &["start", &fixtures::path(&unit)]).await?;
    ctx.wait_for_n_active_units(1, 1).await?;
    let slot = ctx.cluster_mut().add_machine(None).await.map_err(|e| e.to_string())?;
    ctx.wait_for_n_machines(slot, 2).await?;
    stop_fleet(&ctx, 1).await?;
    let what = "m1 gone from list-machines within 10 s";
    ctx.wait_for_secs(10, what, || async {
        match ctx.fleetctl(slot, &["list-machines", "--no-legend", "--full", "--fields", "machine"]).await {
            Ok(o) if o.success() && fleet_harness::wait::parse_machines(&o.stdout).len() == 1 => Check::Ready(()),
            Ok(o) => Check::NotYet(o.describe()),
            Err(e) => Check::NotYet(e),
        }
    })
    .await?;
    ctx.wait_for_n_active_units(slot, 0).await?;
    ctx.hold(Duration::from_secs(5)).await;
    let units = ctx.list_units(slot).await?;
    let active = units.values().flatten().filter(|s| s.active_state == "active").count();
    ensure_eq("active units after the pinned unit's machine stopped fleet", 0, active)?;
    let p = ctx.show(1, &unit, &["ActiveState"]).await?;
    ensure_eq(&format!("{unit} in m1"), Some("inactive"), p.get("ActiveState").map(String::as_str))
}

/// A second machine with an ID already present cannot register: its fleetd keeps running and its API answers
/// 503; once the first machine gets a new ID, everything works again.
pub async fn duplicate_machine_id(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    let id1 = ctx.id(1)?;
    ctx.machine(2)?.write_file("/etc/machine-id", &format!("{id1}\n")).await.map_err(|e| e.to_string())?;
    ctx.exec_ok(2, &["systemctl", "restart", "fleet"]).await?;
    let what = "list-machines via m2 to exit 1 with `fleet server unable to communicate with etcd`";
    ctx.wait_for(what, || async {
        match ctx.fleetctl(2, &["list-machines"]).await {
            Ok(o) if o.status == 1 && o.stderr.contains("fleet server unable to communicate with etcd") => {
                Check::Ready(())
            }
            Ok(o) => Check::NotYet(o.describe()),
            Err(e) => Check::NotYet(e),
        }
    })
    .await?;
    let p = ctx.show(2, "fleet.service", &["ActiveState", "Result"]).await?;
    ensure_eq(
        "fleet.service in m2",
        (Some("active"), Some("success")),
        (p.get("ActiveState").map(String::as_str), p.get("Result").map(String::as_str)),
    )?;
    let fresh = fleet_harness::machine::new_machine_id();
    ctx.machine(1)?.write_file("/etc/machine-id", &format!("{fresh}\n")).await.map_err(|e| e.to_string())?;
    ctx.exec_ok(1, &["systemctl", "restart", "fleet"]).await?;
    ctx.wait_for("list-machines via m1 to exit 0", || async {
        match ctx.fleetctl(1, &["list-machines"]).await {
            Ok(o) if o.success() => Check::Ready(()),
            Ok(o) => Check::NotYet(o.describe()),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

//! Restarting fleetd without disruption (issue 14, item 1; capability `restart_adopts`): a fleetd restarted on a
//! machine — `systemctl restart fleet.service` (a binary upgrade), or killed outright and started again within
//! the TTL — restarts, stops and moves nothing; the new process adopts the running units. Stopping fleet for good
//! still hands the units to other machines (`cluster::stopped_fleet_moves_only_its_unit`).
//!
//! Observations are systemd's: each unit's `MainPID` in the machine running it, each unit's journal in every
//! other machine (a unit that never ran there has none), and a log line a oneshot unit writes each time it runs
//! (a unit that finished on its own is not started again by the new process either). The spec knows the new fleetd has reconciled once a unit
//! pinned to its machine, started after the restart, is active there: every reconcile plans every unit, so the
//! adopted ones were planned by then.

use std::collections::BTreeMap;

use crate::check::ensure_eq;
use crate::fixtures::{self, TempUnit};
use crate::{Ctx, Outcome};

const UNITS: usize = 9;
const ONCE: &str = "ran-once.service";
const ONCE_LOG: &str = "/run/ran-once.log";

/// A oneshot unit pinned to machine `slot` that logs one line each time it runs, started and finished.
async fn run_once(ctx: &Ctx, slot: usize) -> Result<TempUnit, String> {
    let id = ctx.id(slot)?;
    let text = format!(
        "[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo ran >> {ONCE_LOG}'\n\n[X-Fleet]\nMachineID={id}\n"
    );
    let unit = TempUnit::named(ONCE, &text)?;
    // Not blocking: a blocking start waits for `active`, which a finished oneshot never is.
    ctx.fleetctl_ok(1, &["start", "--no-block", &unit.path()]).await?;
    ctx.wait_for(&format!("{ONCE} to have run in m{slot}"), || async move {
        match ctx.exec(slot, &["cat", ONCE_LOG]).await {
            Ok(out) if out.stdout.lines().count() == 1 => fleet_harness::wait::Check::Ready(()),
            Ok(out) => fleet_harness::wait::Check::NotYet(format!("{ONCE_LOG}: {:?}", out.stdout)),
            Err(e) => fleet_harness::wait::Check::NotYet(e),
        }
    })
    .await?;
    ctx.wait_systemd(slot, ONCE, "ActiveState", "inactive").await?;
    Ok(unit)
}

fn units() -> Vec<String> {
    (1..=UNITS).map(|i| format!("hello@{i}.service")).collect()
}

/// Starts [`UNITS`] instances (3 per machine on 3 machines); unit → machine ID.
async fn start_units(ctx: &Ctx) -> Result<BTreeMap<String, String>, String> {
    ctx.wait_for_n_machines(1, 3).await?;
    let paths: Vec<String> = units().iter().map(|u| fixtures::path(u)).collect();
    let mut args = vec!["start"];
    args.extend(paths.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &args).await?;
    ctx.wait_for_n_active_units(1, UNITS).await
}

/// The slot running the most units, with them.
fn busiest(ctx: &Ctx, placement: &BTreeMap<String, String>) -> Result<(usize, Vec<String>), String> {
    let mut by_slot: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (unit, machine) in placement {
        let slot = ctx.slot_of(machine).ok_or_else(|| format!("{unit} on an unknown machine {machine}"))?;
        by_slot.entry(slot).or_default().push(unit.clone());
    }
    by_slot.into_iter().max_by_key(|(_, u)| u.len()).ok_or_else(|| "no unit placed".to_string())
}

/// systemd's MainPID of every unit, read in the machine running it.
async fn main_pids(ctx: &Ctx, placement: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (unit, machine) in placement {
        let slot = ctx.slot_of(machine).ok_or_else(|| format!("{unit} on an unknown machine {machine}"))?;
        let p = ctx.show(slot, unit, &["MainPID", "ActiveState"]).await?;
        let pid = p.get("MainPID").cloned().unwrap_or_default();
        ctx.ensure(pid != "0" && !pid.is_empty(), || format!("{unit} has no main process in m{slot}: {p:?}"))?;
        out.insert(unit.clone(), pid);
    }
    Ok(out)
}

async fn fleetd_pid(ctx: &Ctx, slot: usize) -> Result<String, String> {
    let p = ctx.show(slot, "fleet.service", &["MainPID"]).await?;
    Ok(p.get("MainPID").cloned().unwrap_or_default())
}

/// What a restart of fleetd on `slot` must leave: a new fleetd process, every unit with its machine and MainPID,
/// none of `slot`'s units ever run on another machine.
async fn expect_adopted(
    ctx: &Ctx,
    slot: usize,
    moved_units: &[String],
    placement: &BTreeMap<String, String>,
    pids: &BTreeMap<String, String>,
    old_fleetd: &str,
) -> Outcome {
    let new_fleetd = fleetd_pid(ctx, slot).await?;
    ctx.ensure(new_fleetd != *old_fleetd && new_fleetd != "0", || {
        format!(
            "fleet.service in m{slot} must run a new process after the restart: MainPID {old_fleetd} → {new_fleetd}"
        )
    })?;
    ctx.wait_api(slot).await?;
    // Barrier: a unit pinned to the restarted machine runs there only once its new fleetd has reconciled.
    let id = ctx.id(slot)?;
    let probe = format!("pin@{id}.service");
    ctx.fleetctl_ok(slot, &["start", &fixtures::path(&probe)]).await?;
    ctx.wait_systemd(slot, &probe, "ActiveState", "active").await?;

    let mut after = ctx.wait_for_n_active_units(slot, UNITS + 1).await?;
    after.remove(&probe);
    ensure_eq("placement (unit → machine) across the fleetd restart", placement, &after)?;
    let pids_after = main_pids(ctx, &after).await?;
    let changed: Vec<String> = pids
        .iter()
        .filter(|(u, p)| pids_after.get(*u) != Some(*p))
        .map(|(u, p)| format!("{u}: {p} → {}", pids_after.get(u).map(String::as_str).unwrap_or("-")))
        .collect();
    ctx.ensure(changed.is_empty(), || {
        format!("a fleetd restart must restart no unit; MainPID changed (in systemd) for: {}", changed.join(", "))
    })?;
    let runs = ctx.exec_ok(slot, &["cat", ONCE_LOG]).await?.stdout.lines().count();
    ctx.ensure(runs == 1, || {
        format!("{ONCE} finished before the fleetd restart and must not run again; it ran {runs} times in m{slot}")
    })?;
    for other in ctx.cluster().machines().iter().map(|m| m.slot()).filter(|s| *s != slot) {
        for unit in moved_units {
            let journal = ctx.exec_ok(other, &["journalctl", "--no-pager", "-q", "-o", "cat", "-u", unit]).await?;
            ctx.ensure(journal.stdout.trim().is_empty(), || {
                format!(
                    "{unit} of m{slot} ran on m{other} during the fleetd restart; its journal there: {}",
                    crate::ctx::tail(&journal.stdout, 4)
                )
            })?;
        }
    }
    Ok(())
}

/// `systemctl restart fleet.service` on a machine running several units: no unit restarted, stopped or moved.
pub async fn systemctl_restart_keeps_every_unit(ctx: Ctx) -> Outcome {
    let placement = start_units(&ctx).await?;
    let (slot, held) = busiest(&ctx, &placement)?;
    let _once = run_once(&ctx, slot).await?;
    let pids = main_pids(&ctx, &placement).await?;
    let old = fleetd_pid(&ctx, slot).await?;
    ctx.exec_ok(slot, &["systemctl", "restart", "fleet.service"]).await?;
    expect_adopted(&ctx, slot, &held, &placement, &pids, &old).await
}

/// fleetd killed with SIGKILL and started again within the TTL: the new process adopts every unit.
pub async fn killed_fleetd_started_within_the_ttl_keeps_every_unit(ctx: Ctx) -> Outcome {
    let placement = start_units(&ctx).await?;
    let (slot, held) = busiest(&ctx, &placement)?;
    let _once = run_once(&ctx, slot).await?;
    let pids = main_pids(&ctx, &placement).await?;
    let old = fleetd_pid(&ctx, slot).await?;
    // systemd would restart it only after RestartSec (10 s, beyond the 3 s TTL), and a start job waits for that
    // timer: once systemd has seen the process die (auto-restart), cancel the timer (a stop of a service with no
    // process runs nothing) and start fleet at once.
    let script = format!(
        "kill -9 {old} && timeout 5 sh -c 'until [ \"$(systemctl show -p SubState --value fleet.service)\" = auto-restart ]; do sleep 0.02; done' && systemctl stop fleet.service && systemctl start fleet.service"
    );
    ctx.exec_ok(slot, &["sh", "-c", &script]).await?;
    expect_adopted(&ctx, slot, &held, &placement, &pids, &old).await
}

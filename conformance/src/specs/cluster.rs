//! Machines joining, leaving, being replaced or killed; the engine surviving the loss of any machine.

use std::collections::BTreeMap;

use super::scheduling::{other_slot, stop_fleet, wait_active_elsewhere};
use super::{distinct, placement};
use crate::check::ensure_eq;
use crate::fixtures;
use crate::{Ctx, Outcome};

fn conflict_paths() -> Vec<String> {
    (0..3).map(|i| fixtures::path(&format!("conflict.{i}.service"))).collect()
}

async fn start_conflicts(ctx: &Ctx) -> Result<BTreeMap<String, String>, String> {
    let paths = conflict_paths();
    let mut args = vec!["start"];
    args.extend(paths.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &args).await?;
    let listed = ctx.list_units(1).await?;
    ensure_eq("list-units rows right after a blocking start", 3, listed.values().map(Vec::len).sum())?;
    let active = ctx.wait_for_n_active_units(1, 3).await?;
    ctx.ensure(distinct(active.values()), || format!("3 distinct machines: {}", placement(&active)))?;
    Ok(active)
}

/// A machine whose fleet stops gives up its unit; only that unit moves, and not next to a conflicting one.
pub async fn stopped_member_migration(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 4).await?;
    let before = start_conflicts(&ctx).await?;
    let gone = ctx.slot_of(&before["conflict.1.service"]).ok_or("conflict.1 on an unknown machine")?;
    stop_fleet(&ctx, gone).await?;
    let q = other_slot(&ctx, gone);
    ctx.wait_for_n_machines(q, 3).await?;
    let moved = wait_active_elsewhere(&ctx, q, "conflict.1.service", &before["conflict.1.service"]).await?;
    let after = ctx.wait_for_n_active_units(q, 3).await?;
    ensure_eq("conflict.0's machine", before.get("conflict.0.service"), after.get("conflict.0.service"))?;
    ensure_eq("conflict.2's machine", before.get("conflict.2.service"), after.get("conflict.2.service"))?;
    ctx.ensure(distinct(after.values()) && after["conflict.1.service"] == moved, || {
        format!("conflict.1 alone on its new machine: {}", placement(&after))
    })
}

/// A machine replaced by one with a new ID (same address): exactly one of three mutually conflicting units moves.
pub async fn member_reboot(mut ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    let before = start_conflicts(&ctx).await?;
    let old_id = ctx.id(2)?;
    ctx.cluster_mut().replace_machine(2).await.map_err(|e| e.to_string())?;
    ctx.wait_for_n_machines(1, 3).await?;
    // The replaced machine's states may outlive it by up to one TTL if its shutdown was not clean: wait until all
    // three units are active on machines that exist now.
    let old_id = &old_id;
    let what = "3 active units, none on the replaced machine";
    let after = ctx
        .wait_fleetctl(1, &["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"], what, |out| {
            let states = fleet_harness::wait::parse_unit_states(out);
            let m = fleet_harness::wait::active_to_single(&fleet_harness::wait::filter_active(&states))?;
            if m.len() == 3 && m.values().all(|x| x != old_id) { Ok(m) } else { Err(placement(&m)) }
        })
        .await?;
    let moved: Vec<&String> = before.keys().filter(|u| before.get(*u) != after.get(*u)).collect();
    ctx.ensure(moved.len() == 1, || {
        format!("exactly one unit moved: before {}, after {}", placement(&before), placement(&after))
    })?;
    ensure_eq("machine of the moved unit", Some(&ctx.id(2)?), after.get(moved[0]))
}

/// A killed machine's units are rescheduled on the others; the others' units stay where they are.
pub async fn killed_machine(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    let before = ctx.start_hello_instances(6).await?;
    let victim = ctx.slot_of(&before["hello@1.service"]).ok_or("hello@1 on an unknown machine")?;
    let victim_id = ctx.id(victim)?;
    ctx.machine(victim)?.kill().await.map_err(|e| e.to_string())?;
    let q = other_slot(&ctx, victim);
    ctx.wait_for_n_machines(q, 2).await?;
    let victim_id = &victim_id;
    let what = "6 active units, none on the killed machine";
    let after = ctx
        .wait_fleetctl(q, &["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"], what, |out| {
            let states = fleet_harness::wait::parse_unit_states(out);
            let m = fleet_harness::wait::active_to_single(&fleet_harness::wait::filter_active(&states))?;
            if m.len() == 6 && m.values().all(|x| x != victim_id) { Ok(m) } else { Err(placement(&m)) }
        })
        .await?;
    for (u, m) in &before {
        if m != victim_id {
            ensure_eq(&format!("machine of {u} (not on the killed machine)"), Some(m), after.get(u))?;
        }
    }
    Ok(())
}

/// Whichever machine holds the engine, killing it leaves a cluster that still schedules: each machine in turn is
/// killed, a new unit must become active on a live machine, and the machine comes back.
pub async fn leader_takeover(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    for victim in 1..=3 {
        let q = other_slot(&ctx, victim);
        let victim_id = ctx.id(victim)?;
        ctx.machine(victim)?.kill().await.map_err(|e| e.to_string())?;
        let probe = format!("hello@probe{victim}.service");
        ctx.fleetctl_ok(q, &["start", "--no-block", &fixtures::path(&probe)]).await?;
        ctx.wait_for_n_machines(q, 2).await.map_err(|e| format!("after killing m{victim}: {e}"))?;
        wait_active_elsewhere(&ctx, q, &probe, &victim_id)
            .await
            .map_err(|e| format!("after killing m{victim}: {e}"))?;
        ctx.machine(victim)?.start().await.map_err(|e| e.to_string())?;
        ctx.wait_for_n_machines(q, 3).await?;
        ctx.wait_for_n_active_units(q, victim).await?;
    }
    Ok(())
}

/// With no engine leader in the cluster, a unit already placed still stops, starts again and unloads: the desired
/// state reaches its machine without an engine pass. Machine 2 cannot lead (`disable_engine`); once machine 1's
/// fleet is gone, only the API and machine 2's agent take part.
pub async fn stop_and_start_with_no_engine_leader() -> Outcome {
    const UNIT: &str = "no-engine.service";
    let builder =
        fleet_harness::Cluster::builder().machines(2).agent_ttl("3s").machine_config(2, "disable_engine", "true");
    let ctx = Ctx::start(builder).await?;
    ctx.wait_for_n_machines(1, 2).await?;
    let m2 = ctx.id(2)?;
    let dir = fixtures::TempDir::new()?;
    let text = format!("[Service]\nExecStart=/bin/sh -c 'while true; do sleep 1; done'\n\n[X-Fleet]\nMachineID={m2}\n");
    let path = dir.write(UNIT, &text)?;
    ctx.fleetctl_ok(1, &["start", &path]).await?;
    ctx.wait_systemd(2, UNIT, "ActiveState", "active").await?;

    stop_fleet(&ctx, 1).await?;
    ctx.wait_for_n_machines(2, 1).await?;
    ctx.fleetctl_ok(2, &["stop", "--no-block", UNIT]).await?;
    ctx.wait_systemd(2, UNIT, "ActiveState", "inactive").await?;
    ctx.fleetctl_ok(2, &["start", "--no-block", UNIT]).await?;
    ctx.wait_systemd(2, UNIT, "ActiveState", "active").await?;
    ctx.fleetctl_ok(2, &["unload", "--no-block", UNIT]).await?;
    ctx.wait_systemd(2, UNIT, "LoadState", "not-found").await
}

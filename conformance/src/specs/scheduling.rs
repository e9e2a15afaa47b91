//! The engine's placement decisions (spec §6), observed through `list-units` / `list-unit-files`.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_harness::Check;
use fleet_harness::wait::{self, UnitState};

use super::{distinct, placement};
use crate::check::ensure_eq;
use crate::fixtures::{self, TempUnit};
use crate::{Ctx, Outcome};

/// Stops fleet on `slot` for good (`systemctl stop fleet`, plus its sockets so that no request re-activates it).
pub(crate) async fn stop_fleet(ctx: &Ctx, slot: usize) -> Outcome {
    ctx.exec_ok(slot, &["systemctl", "stop", "fleet.socket", "fleet-tcp.socket", "fleet.service"]).await.map(drop)
}

/// A slot other than `except` (for fleetctl after `except` lost its fleet).
pub(crate) fn other_slot(ctx: &Ctx, except: usize) -> usize {
    ctx.cluster().machines().iter().map(|m| m.slot()).find(|s| *s != except).unwrap_or(1)
}

/// Waits for exactly `n` active units, then requires that count to hold for `secs` (and returns them: unit →
/// machine): proves a count is stable, not a sample taken before something else became active.
pub(crate) async fn stays_n_active(
    ctx: &Ctx,
    slot: usize,
    n: usize,
    secs: u64,
) -> Result<BTreeMap<String, String>, String> {
    ctx.wait_for_n_active_units(slot, n).await?;
    let active = |units: &BTreeMap<String, Vec<UnitState>>| -> BTreeMap<String, String> {
        wait::filter_active(units).into_iter().map(|s| (s.name.clone(), s.machine.clone())).collect()
    };
    let count = |units: &BTreeMap<String, Vec<UnitState>>| wait::filter_active(units).len();
    let units = ctx.holds(slot, secs, &format!("exactly {n} active units"), |units| count(units) == n).await?;
    Ok(active(&units))
}

/// `pong.N` (`MachineOf=ping.N`) runs with `ping.N`, also after `ping.1`'s machine lost its fleet.
pub async fn machine_of(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    let mut args = vec!["start".to_string(), "--no-block".to_string()];
    for n in 0..3 {
        args.push(fixtures::path(&format!("ping.{n}.service")));
        args.push(fixtures::path(&format!("pong.{n}.service")));
    }
    ctx.fleetctl_ok(1, &args.iter().map(String::as_str).collect::<Vec<_>>()).await?;
    ctx.wait_for_n_unit_files(1, 6).await?;
    let before = ctx.wait_for_n_active_units(1, 6).await?;
    let pairs_together = |m: &BTreeMap<String, String>| {
        (0..3).all(|n| m.get(&format!("ping.{n}.service")) == m.get(&format!("pong.{n}.service")))
    };
    ctx.ensure(pairs_together(&before), || format!("ping/pong pairs together: {}", placement(&before)))?;
    let gone = ctx.slot_of(&before["ping.1.service"]).ok_or("ping.1 on an unknown machine")?;
    stop_fleet(&ctx, gone).await?;
    let q = other_slot(&ctx, gone);
    ctx.wait_for_n_machines(q, 2).await?;
    let what = "6 active units with ping.1 moved and each pair together";
    let after = ctx
        .wait_fleetctl(q, &["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"], what, |out| {
            let states = fleet_harness::wait::parse_unit_states(out);
            let active = fleet_harness::wait::filter_active(&states);
            let m = fleet_harness::wait::active_to_single(&active)?;
            if m.len() == 6 && m["ping.1.service"] != before["ping.1.service"] && pairs_together(&m) {
                Ok(m)
            } else {
                Err(placement(&m))
            }
        })
        .await?;
    ctx.ensure(after.values().all(|m| *m != before["ping.1.service"]), || {
        format!("nothing left on the stopped machine: {}", placement(&after))
    })
}

fn conflict_units(names: &[String]) -> Vec<String> {
    names.iter().map(|u| fixtures::path(u)).collect()
}

/// `Conflicts=conflict.*.service` on 5 units over 3 machines: exactly 3 active, on 3 machines, and it stays so.
pub async fn conflicts(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    let names: Vec<String> = (0..5).map(|i| format!("conflict.{i}.service")).collect();
    let paths = conflict_units(&names);
    let mut args = vec!["start", "--no-block"];
    args.extend(paths.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &args).await?;
    ctx.wait_for_n_unit_files(1, 5).await?;
    let active = stays_n_active(&ctx, 1, 3, 5).await?;
    ctx.ensure(distinct(active.values()), || format!("3 distinct machines: {}", placement(&active)))
}

/// A one-way `Conflicts=hello.service` keeps hello.service off the machine until the conflicting unit is destroyed.
pub async fn one_way_conflict(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 1).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("conflicts-with-hello.service")]).await?;
    ctx.wait_for_n_active_units(1, 1).await?;
    ctx.fleetctl_ok(1, &["start", "--no-block", &fixtures::path("hello.service")]).await?;
    ctx.wait_for_n_unit_files(1, 2).await?;
    let active = stays_n_active(&ctx, 1, 1, 4).await?;
    ensure_eq(
        "the single active unit",
        vec!["conflicts-with-hello.service"],
        active.keys().map(String::as_str).collect(),
    )?;
    ctx.fleetctl_ok(1, &["destroy", "conflicts-with-hello.service"]).await?;
    let what = "hello.service to be the only unit listed, active";
    ctx.wait_fleetctl(1, &["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"], what, |out| {
        let states = fleet_harness::wait::parse_unit_states(out);
        let names: Vec<&str> = states.keys().map(String::as_str).collect();
        let active = fleet_harness::wait::filter_active(&states).len();
        if names == ["hello.service"] && active == 1 { Ok(()) } else { Err(format!("{names:?}, {active} active")) }
    })
    .await
}

/// `Conflicts=` as a space-separated list and as repeated lines: the three units keep `conflict.0..2` off their
/// machines.
pub async fn multiple_conflicts(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    let names: Vec<String> = (0..3).map(|i| format!("conflict.multiple.{i}.service")).collect();
    let paths = conflict_units(&names);
    let mut args = vec!["start"];
    args.extend(paths.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &args).await?;
    ctx.wait_for_n_unit_files(1, 3).await?;
    let active = ctx.wait_for_n_active_units(1, 3).await?;
    ctx.ensure(distinct(active.values()), || format!("3 distinct machines: {}", placement(&active)))?;
    // Every machine now runs a unit whose Conflicts names conflict.0, conflict.1 and conflict.2 (one of them via
    // repeated lines): none of those can run anywhere.
    let more: Vec<String> = (0..3).map(|i| fixtures::path(&format!("conflict.{i}.service"))).collect();
    let mut args = vec!["start", "--no-block"];
    args.extend(more.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &args).await?;
    ctx.wait_for_n_unit_files(1, 6).await?;
    let after = stays_n_active(&ctx, 1, 3, 5).await?;
    ensure_eq("active units", names, after.keys().cloned().collect())
}

/// `Replaces=replace.0.service`: the replacer takes replace.0's machine and replace.0 moves (deterministically,
/// spec §12.2 B1; the original moves one of the two at random).
pub async fn replaces(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("replace.0.service")]).await?;
    ctx.fleetctl_ok(2, &["start", &fixtures::path("replace.1.service"), &fixtures::path("replace.2.service")]).await?;
    let before = ctx.wait_for_n_active_units(1, 3).await?;
    let origin = before["replace.0.service"].clone();
    ctx.fleetctl_ok(2, &["start", "--no-block", &fixtures::path("replace-kick0.service")]).await?;
    ctx.wait_for_n_unit_files(1, 4).await?;
    let what = "replace-kick0 on replace.0's original machine and replace.0 elsewhere";
    ctx.wait_fleetctl(1, &["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"], what, |out| {
        let states = fleet_harness::wait::parse_unit_states(out);
        let m = fleet_harness::wait::active_to_single(&fleet_harness::wait::filter_active(&states))?;
        let ok = m.len() == 4
            && m.get("replace-kick0.service") == Some(&origin)
            && m.get("replace.0.service").is_some_and(|x| *x != origin);
        if ok { Ok(()) } else { Err(format!("{} (replace.0 was on {})", placement(&m), super::short(&origin))) }
    })
    .await?;
    // ... and it stays so (the replacer is not moved back and forth).
    let after = stays_n_active(&ctx, 1, 4, 4).await?;
    ensure_eq("replace-kick0's machine", Some(&origin), after.get("replace-kick0.service"))
}

/// Two units that replace each other: exactly one of them runs (the original ignores circular Replaces and runs
/// both; its test passed by sampling before the second became active).
pub async fn circular_replaces(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    let kick = fixtures::read("replace-kick0.service")?;
    let zero = TempUnit::named(
        "replace.0.service",
        &kick.replace("Replaces=replace.0.service", "Replaces=replace-kick0.service"),
    )?;
    ctx.fleetctl_ok(1, &["start", &zero.path()]).await?;
    ctx.wait_for_n_unit_files(1, 1).await?;
    ctx.wait_for_n_active_units(1, 1).await?;
    let files = ctx.list_unit_files(1).await?;
    let launched = files.values().flatten().filter(|f| f.state == "launched").count();
    ensure_eq("launched unit files before the second start", 1, launched)?;
    ctx.fleetctl_ok(1, &["start", "--no-block", &fixtures::path("replace-kick0.service")]).await?;
    ctx.wait_for_n_unit_files(1, 2).await?;
    stays_n_active(&ctx, 1, 1, 8).await.map(drop)
}

/// `MachineID=<id>` puts each unit on its machine.
pub async fn machine_id(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    let mut units = Vec::new();
    for slot in 1..=3 {
        let id = ctx.id(slot)?;
        let text = format!(
            "[Service]\nExecStart=/bin/bash -c \"while true; do echo pinned to {id}; sleep 1; done\"\n\n[X-Fleet]\nMachineID={id}\n"
        );
        let unit = TempUnit::named(&format!("machine-id-{slot}.service"), &text)?;
        ctx.fleetctl_ok(1, &["start", &unit.path()]).await?;
        units.push((unit.name().to_string(), id));
    }
    let active = ctx.wait_for_n_active_units(1, 3).await?;
    for (name, id) in units {
        ensure_eq(&format!("machine of {name}"), Some(&id), active.get(&name))?;
    }
    Ok(())
}

/// A global unit runs on every machine, next to the other units.
pub async fn global_units(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("hello.service"), &fixtures::path("goodbye.service")]).await?;
    ctx.wait_for_n_active_units(1, 2).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("global.service")]).await?;
    let what = "global.service active on all 3 machines, 5 active rows";
    let ids: Vec<String> = (1..=3).map(|s| ctx.id(s)).collect::<Result<_, _>>()?;
    let ids = &ids;
    ctx.wait_fleetctl(1, &["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"], what, |out| {
        let states = fleet_harness::wait::parse_unit_states(out);
        let active = fleet_harness::wait::filter_active(&states);
        let mut on: Vec<&str> =
            active.iter().filter(|s| s.name == "global.service").map(|s| s.machine.as_str()).collect();
        on.sort();
        let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
        want.sort();
        if active.len() == 5 && on == want { Ok(()) } else { Err(format!("{} active; global on {on:?}", active.len())) }
    })
    .await
    // The `restart` step is global_units::two_units_and_a_global_make_five_..., the `status` step
    // ssh::status_of_a_global_unit_covers_every_machine.
}

/// Global units conflicting with each other: the first (by name) runs everywhere, the second nowhere.
pub async fn global_conflicts(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("conflict-global.0.service")]).await?;
    let check = |out: &str| {
        let states = fleet_harness::wait::parse_unit_states(out);
        let active = fleet_harness::wait::filter_active(&states);
        let zero = active.iter().filter(|s| s.name == "conflict-global.0.service").count();
        let one = active.iter().filter(|s| s.name == "conflict-global.1.service").count();
        if active.len() == 3 && zero == 3 && one == 0 {
            Ok(())
        } else {
            Err(format!("{zero} of .0 and {one} of .1 active"))
        }
    };
    let args = ["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"];
    ctx.wait_fleetctl(1, &args, "conflict-global.0 on all 3 machines", check).await?;
    ctx.fleetctl_ok(1, &["start", "--no-block", &fixtures::path("conflict-global.1.service")]).await?;
    ctx.wait_for_n_unit_files(1, 2).await?;
    ctx.hold(Duration::from_secs(5)).await;
    let out = ctx.fleetctl(1, &args).await?;
    check(&out.stdout).map_err(|e| ctx.fail(format!("after starting conflict-global.1: {e}")))
}

/// Instances started together spread over idle machines (2 each of 6 on 3), and the next unit goes to the machine
/// with the lowest ID among the least loaded (spec §6.5).
pub async fn least_loaded(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    let active = ctx.start_hello_instances(6).await?;
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for m in active.values() {
        *per.entry(m).or_default() += 1;
    }
    ctx.ensure(per.len() == 3 && per.values().all(|n| *n == 2), || format!("2 per machine: {}", placement(&active)))?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("hello.service")]).await?;
    let active = ctx.wait_for_n_active_units(1, 7).await?;
    let lowest = (1..=3).map(|s| ctx.id(s)).collect::<Result<Vec<_>, _>>()?.into_iter().min().unwrap_or_default();
    ensure_eq("machine of the 7th unit (lowest ID on a tie)", Some(&lowest), active.get("hello.service"))
}

/// Waits until `unit` is active on a machine other than `not_on`; returns that machine.
pub(crate) async fn wait_active_elsewhere(ctx: &Ctx, slot: usize, unit: &str, not_on: &str) -> Result<String, String> {
    let what = format!("{unit} active on a machine other than {}", super::short(not_on));
    ctx.wait_for(&what, || async move {
        match ctx.list_units(slot).await {
            Ok(states) => {
                let rows = states.get(unit).cloned().unwrap_or_default();
                match rows.iter().find(|r| r.active_state == "active" && r.machine != not_on) {
                    Some(r) => Check::Ready(r.machine.clone()),
                    None => Check::NotYet(format!("{rows:?}")),
                }
            }
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

//! Global units (spec §5 `Global`, §6.7, §6.8, §6.11, §9.6, §9.7, §12 L2): every eligible machine runs them,
//! `MachineMetadata=` narrows the set (also after metadata changes through the API), machines joining and leaving,
//! conflicts with non-global units, the unit actions on every machine, and how the listings show them
//! (transcript 05).
//!
//! Observations are `list-units` / `list-unit-files` and systemd inside each machine (`systemctl is-active`,
//! `systemctl show -p MainPID`). Right after a blocking fleetctl command returns, a spec observes *without waiting*:
//! that is what "fleetctl waits for every machine" means.

use std::collections::{BTreeMap, BTreeSet};

use fleet_harness::wait::UnitState;
use serde_json::json;

use super::scheduling::stop_fleet;
use super::short;
use crate::check::ensure_eq;
use crate::fixtures;
use crate::{Ctx, Outcome};

const GLOBAL: &str = "global.service";

/// A `list-units` observation as unit → machine ID → ACTIVE.
fn by_machine(units: &BTreeMap<String, Vec<UnitState>>) -> BTreeMap<String, BTreeMap<String, String>> {
    units
        .iter()
        .map(|(u, rows)| (u.clone(), rows.iter().map(|r| (r.machine.clone(), r.active_state.clone())).collect()))
        .collect()
}

/// The rows of `unit` in one `list-units` observation: machine ID → ACTIVE.
async fn rows_of(ctx: &Ctx, slot: usize, unit: &str) -> Result<BTreeMap<String, String>, String> {
    Ok(by_machine(&ctx.list_units(slot).await?).remove(unit).unwrap_or_default())
}

/// `id8=state, ...` for messages.
fn show_rows(rows: &BTreeMap<String, String>) -> String {
    if rows.is_empty() {
        return "no rows".into();
    }
    rows.iter().map(|(m, s)| format!("{}={s}", short(m))).collect::<Vec<_>>().join(", ")
}

fn show_ids(ids: &BTreeSet<String>) -> String {
    format!("{{{}}}", ids.iter().map(|m| short(m)).collect::<Vec<_>>().join(", "))
}

/// The machine IDs of `slots`.
fn ids(ctx: &Ctx, slots: &[usize]) -> Result<BTreeSet<String>, String> {
    slots.iter().map(|s| ctx.id(*s)).collect()
}

/// Requires (now, without waiting) that `unit` has exactly one `active` row on each machine of `on` and none
/// elsewhere.
async fn expect_active_on(ctx: &Ctx, slot: usize, unit: &str, on: &BTreeSet<String>, when: &str) -> Outcome {
    let rows = rows_of(ctx, slot, unit).await?;
    let ok = rows.keys().cloned().collect::<BTreeSet<_>>() == *on && rows.values().all(|s| s == "active");
    ctx.ensure(ok, || {
        format!("{when}: expected {unit} active on exactly {}, observed {}", show_ids(on), show_rows(&rows))
    })
}

/// Waits until `unit` has exactly one `active` row on each machine of `on` and none elsewhere.
async fn wait_active_on(ctx: &Ctx, slot: usize, unit: &str, on: &BTreeSet<String>) -> Outcome {
    let what = format!("{unit} active on exactly {}", show_ids(on));
    ctx.wait_for(&what, || async move {
        match rows_of(ctx, slot, unit).await {
            Ok(rows)
                if rows.keys().cloned().collect::<BTreeSet<_>>() == *on && rows.values().all(|s| s == "active") =>
            {
                fleet_harness::Check::Ready(())
            }
            Ok(rows) => fleet_harness::Check::NotYet(show_rows(&rows)),
            Err(e) => fleet_harness::Check::NotYet(e),
        }
    })
    .await
}

/// `systemctl is-active <unit>` in machine `slot` (its stdout; the exit status is not an error).
async fn is_active(ctx: &Ctx, slot: usize, unit: &str) -> Result<String, String> {
    Ok(ctx.exec(slot, &["systemctl", "is-active", unit]).await?.stdout.trim().to_string())
}

/// Requires `systemctl is-active <unit>` to print `want` in each of `slots` (now, without waiting).
async fn expect_systemd(ctx: &Ctx, slots: &[usize], unit: &str, want: &str, when: &str) -> Outcome {
    for &slot in slots {
        let got = is_active(ctx, slot, unit).await?;
        ctx.ensure(got == want, || {
            format!("{when}: `systemctl is-active {unit}` in m{slot}: expected {want}, observed {got}")
        })?;
    }
    Ok(())
}

async fn main_pids(ctx: &Ctx, slots: &[usize], unit: &str) -> Result<BTreeMap<usize, String>, String> {
    let mut pids = BTreeMap::new();
    for &s in slots {
        pids.insert(s, ctx.main_pid(s, unit).await?);
    }
    Ok(pids)
}

/// `PATCH /fleet/v1/machines`: sets `role` of machine `slot` (through machine 1's API).
async fn set_role(ctx: &Ctx, slot: usize, role: &str) -> Outcome {
    let body =
        json!([{"op": "replace", "path": format!("/{}/metadata/role", ctx.id(slot)?), "value": {"value": role}}]);
    let r = ctx.http(1, "PATCH", "/fleet/v1/machines", Some(&body.to_string())).await?;
    ctx.ensure(r.status == 204, || format!("PATCH {body}: expected 204, observed {}", r.describe()))
}

/// Holds for `secs`, requiring at every look that `check` accepts `list-units` (unit → machine → ACTIVE).
async fn holds(
    ctx: &Ctx,
    secs: u64,
    what: &str,
    check: impl Fn(&BTreeMap<String, BTreeMap<String, String>>) -> bool,
) -> Outcome {
    ctx.holds(1, secs, what, |units| check(&by_machine(units))).await.map(drop)
}

/// Makes `unit` slow to start and to stop in machine `slot` (a drop-in adding a 3 s `ExecStartPre=` and
/// `ExecStop=`), so a command that returns once *one* machine is done, not every machine, is caught in the act.
async fn slow_on(ctx: &Ctx, slot: usize, unit: &str) -> Outcome {
    let dir = format!("/etc/systemd/system/{unit}.d");
    let script = format!(
        "mkdir -p {dir} && printf '[Service]\\nExecStartPre=/bin/sleep 3\\nExecStop=/bin/sleep 3\\n' > {dir}/slow.conf && systemctl daemon-reload"
    );
    ctx.exec_ok(slot, &["sh", "-c", &script]).await.map(drop)
}

/// `start` of a global unit prints the original's lines and returns only once every machine runs it.
pub async fn start_waits_for_every_machine(ctx: Ctx) -> Outcome {
    let all = ids(&ctx, &[1, 2, 3])?;
    slow_on(&ctx, 3, GLOBAL).await?;
    let out = ctx.fleetctl_ok(1, &["start", &fixtures::path(GLOBAL)]).await?;
    // Transcript 05: the creation wait prints `Unit <name> ` (global units have no machine), then the trigger line.
    ensure_eq(
        "stdout of `fleetctl start global.service`",
        "Unit global.service \nTriggered global unit global.service start\n",
        out.stdout.as_str(),
    )
    .map_err(|e| ctx.fail(e))?;
    expect_active_on(&ctx, 1, GLOBAL, &all, "right after `start` returned").await?;
    expect_systemd(&ctx, &[1, 2, 3], GLOBAL, "active", "right after `start` returned").await
}

/// `MachineMetadata=role=a` selects the `role=a` machines; metadata set through the API moves the unit in and out.
pub async fn machine_metadata_selects_machines(ctx: Ctx) -> Outcome {
    let unit = "global-role-a.service";
    ctx.fleetctl_ok(1, &["start", &fixtures::path(unit)]).await?;
    wait_active_on(&ctx, 1, unit, &ids(&ctx, &[1, 3])?).await?;
    expect_systemd(&ctx, &[1, 3], unit, "active", "role=a machines").await?;
    expect_systemd(&ctx, &[2], unit, "inactive", "the role=b machine").await?;
    holds(&ctx, 3, "no row of global-role-a.service on the role=b machine", |v| {
        v.get(unit).is_some_and(|rows| rows.len() == 2)
    })
    .await?;
    let m3 = ctx.main_pid(3, unit).await?;
    // m2 becomes role=a through the API: it joins.
    set_role(&ctx, 2, "a").await?;
    wait_active_on(&ctx, 1, unit, &ids(&ctx, &[1, 2, 3])?).await?;
    expect_systemd(&ctx, &[2], unit, "active", "after PATCH role=a on m2").await?;
    // m1 becomes role=c: it leaves, and its copy stops.
    set_role(&ctx, 1, "c").await?;
    wait_active_on(&ctx, 1, unit, &ids(&ctx, &[2, 3])?).await?;
    ctx.wait_systemd(1, unit, "ActiveState", "inactive").await?;
    ensure_eq("MainPID in m3 (untouched by the metadata changes)", &m3, &ctx.main_pid(3, unit).await?)
}

/// A machine joining later gets the global unit; machines leaving (fleet stopped, machine removed) drop their
/// rows while the others keep their processes.
pub async fn machines_joining_and_leaving(mut ctx: Ctx) -> Outcome {
    ctx.fleetctl_ok(1, &["start", &fixtures::path(GLOBAL)]).await?;
    wait_active_on(&ctx, 1, GLOBAL, &ids(&ctx, &[1, 2])?).await?;
    let before = main_pids(&ctx, &[1, 2], GLOBAL).await?;
    let new = ctx.cluster_mut().add_machine(None).await.map_err(|e| format!("adding a machine: {e}"))?;
    ctx.wait_for_n_machines(1, 3).await?;
    wait_active_on(&ctx, 1, GLOBAL, &ids(&ctx, &[1, 2, new])?).await?;
    expect_systemd(&ctx, &[new], GLOBAL, "active", "on the machine that joined").await?;
    ensure_eq("MainPIDs of m1, m2 after a machine joined", &before, &main_pids(&ctx, &[1, 2], GLOBAL).await?)?;
    let before = main_pids(&ctx, &[1, new], GLOBAL).await?;
    // m2 stops fleet: its row goes, its copy is stopped (purge), m1 and the new machine keep theirs.
    stop_fleet(&ctx, 2).await?;
    wait_active_on(&ctx, 1, GLOBAL, &ids(&ctx, &[1, new])?).await?;
    ctx.wait_systemd(2, GLOBAL, "ActiveState", "inactive").await?;
    ensure_eq(
        "MainPIDs of m1 and the new machine after m2 stopped fleet",
        &before,
        &main_pids(&ctx, &[1, new], GLOBAL).await?,
    )?;
    // The new machine is removed outright: its row goes once its presence expires.
    let gone = ctx.id(new)?;
    ctx.cluster_mut().remove_machine(new).await.map_err(|e| format!("removing m{new}: {e}"))?;
    ctx.wait_for_n_machines(1, 1).await?;
    wait_active_on(&ctx, 1, GLOBAL, &ids(&ctx, &[1])?).await.map_err(|e| format!("{e} (removed: {})", short(&gone)))?;
    ensure_eq("MainPID of m1 after the removal", &before[&1], &ctx.main_pid(1, GLOBAL).await?)
}

/// A non-global unit whose `Conflicts=` names a global unit running everywhere is never scheduled.
pub async fn conflicting_unit_stays_unscheduled(ctx: Ctx) -> Outcome {
    let all = ids(&ctx, &[1, 2, 3])?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(GLOBAL)]).await?;
    wait_active_on(&ctx, 1, GLOBAL, &all).await?;
    let pids = main_pids(&ctx, &[1, 2, 3], GLOBAL).await?;
    let avoid = "avoids-global.service";
    ctx.fleetctl_ok(1, &["start", "--no-block", &fixtures::path(avoid)]).await?;
    ctx.wait_for_n_unit_files(1, 2).await?;
    holds(&ctx, 5, "avoids-global.service without a row and global.service active on all 3", |v| {
        !v.contains_key(avoid)
            && v.get(GLOBAL).is_some_and(|rows| rows.len() == 3 && rows.values().all(|s| s == "active"))
    })
    .await?;
    let row = file_row(&ctx, avoid).await?;
    ensure_eq(
        "list-unit-files row of the unschedulable unit",
        vec![avoid, "launched", "inactive", "-"],
        row.iter().map(String::as_str).collect(),
    )
    .map_err(|e| ctx.fail(e))?;
    expect_systemd(&ctx, &[1, 2, 3], avoid, "inactive", "the conflicting unit").await?;
    ensure_eq("MainPIDs of global.service", &pids, &main_pids(&ctx, &[1, 2, 3], GLOBAL).await?)
}

/// A global unit whose `Conflicts=` names a running non-global unit skips that unit's machine; the non-global
/// unit keeps running (its name sorts after the global's: the agent must not prefer the global by name order).
pub async fn global_skips_the_conflicting_units_machine(ctx: Ctx) -> Outcome {
    let g = "global-avoids-hello.service";
    ctx.fleetctl_ok(1, &["start", &fixtures::path("hello.service")]).await?;
    let placed = ctx.wait_for_n_active_units(1, 1).await?;
    let hello_on = placed.get("hello.service").cloned().ok_or("hello.service not active")?;
    let hello_slot = ctx.slot_of(&hello_on).ok_or("hello.service on an unknown machine")?;
    let others: Vec<usize> = (1..=3).filter(|s| *s != hello_slot).collect();
    let pid = ctx.main_pid(hello_slot, "hello.service").await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(g)]).await?;
    let elsewhere = ids(&ctx, &others)?;
    wait_active_on(&ctx, 1, g, &elsewhere).await?;
    let what = format!("{g} on the two other machines only, hello.service active on {}", short(&hello_on));
    holds(&ctx, 5, &what, |v| {
        v.get(g).is_some_and(|rows| rows.keys().cloned().collect::<BTreeSet<_>>() == elsewhere)
            && v.get("hello.service")
                .is_some_and(|rows| rows.len() == 1 && rows.get(&hello_on).map(String::as_str) == Some("active"))
    })
    .await?;
    expect_systemd(&ctx, &[hello_slot], g, "inactive", "on hello.service's machine").await?;
    ensure_eq("hello.service's MainPID", &pid, &ctx.main_pid(hello_slot, "hello.service").await?)?;
    // Without hello.service the global unit runs there too.
    ctx.fleetctl_ok(1, &["destroy", "hello.service"]).await?;
    wait_active_on(&ctx, 1, g, &ids(&ctx, &[1, 2, 3])?).await
}

/// `stop`, `unload` and `start` act on every machine and return once every machine is done (m3 takes 3 s longer
/// to start and to stop); `destroy` acts on every machine without waiting, like the original's.
pub async fn stop_unload_destroy_everywhere(ctx: Ctx) -> Outcome {
    let all_slots = [1, 2, 3];
    let all = ids(&ctx, &all_slots)?;
    slow_on(&ctx, 3, GLOBAL).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(GLOBAL)]).await?;
    wait_active_on(&ctx, 1, GLOBAL, &all).await?;

    let out = ctx.fleetctl_ok(1, &["stop", GLOBAL]).await?;
    ensure_eq("stdout of `stop`", "Triggered global unit global.service stop\n", out.stdout.as_str())
        .map_err(|e| ctx.fail(e))?;
    let rows = rows_of(&ctx, 1, GLOBAL).await?;
    let ok = rows.keys().cloned().collect::<BTreeSet<_>>() == all && rows.values().all(|s| s == "inactive");
    ctx.ensure(ok, || format!("right after `stop` returned: expected 3 inactive rows, observed {}", show_rows(&rows)))?;
    expect_systemd(&ctx, &all_slots, GLOBAL, "inactive", "right after `stop` returned").await?;
    for slot in all_slots {
        let p = ctx.show(slot, GLOBAL, &["LoadState"]).await?;
        ensure_eq(&format!("LoadState in m{slot} after stop"), Some("loaded"), p.get("LoadState").map(String::as_str))?;
    }
    expect_file_row(&ctx, ["loaded", "-"], "after stop").await?;

    let out = ctx.fleetctl_ok(1, &["unload", GLOBAL]).await?;
    ensure_eq("stdout of `unload`", "Triggered global unit global.service unload\n", out.stdout.as_str())
        .map_err(|e| ctx.fail(e))?;
    let rows = rows_of(&ctx, 1, GLOBAL).await?;
    ctx.ensure(rows.is_empty(), || {
        format!("right after `unload` returned: expected no rows, observed {}", show_rows(&rows))
    })?;
    expect_systemd(&ctx, &all_slots, GLOBAL, "inactive", "right after `unload` returned").await?;
    for slot in all_slots {
        ctx.wait_systemd(slot, GLOBAL, "LoadState", "not-found").await?;
    }
    expect_file_row(&ctx, ["inactive", "-"], "after unload").await?;

    ctx.fleetctl_ok(1, &["start", GLOBAL]).await?;
    expect_active_on(&ctx, 1, GLOBAL, &all, "right after the second `start` returned").await?;

    let out = ctx.fleetctl_ok(1, &["destroy", GLOBAL]).await?;
    ensure_eq("stdout of `destroy`", "Destroyed global.service\n", out.stdout.as_str()).map_err(|e| ctx.fail(e))?;
    let rows = rows_of(&ctx, 1, GLOBAL).await?;
    ctx.ensure(rows.is_empty(), || {
        format!("right after `destroy` returned: expected no rows, observed {}", show_rows(&rows))
    })?;
    let files = ctx.list_unit_files(1).await?;
    ctx.ensure(files.is_empty(), || {
        format!("right after `destroy` returned: expected no unit files, observed {files:?}")
    })?;
    // `destroy` does not wait for global units (its help says so, as the original's): the copies stop soon after.
    for slot in all_slots {
        ctx.wait_systemd(slot, GLOBAL, "ActiveState", "inactive").await?;
    }
    Ok(())
}

/// Requires `list-unit-files` to show global.service with DSTATE/STATE `want` and TARGET `global`.
async fn expect_file_row(ctx: &Ctx, want: [&str; 2], when: &str) -> Outcome {
    let row = file_row(ctx, GLOBAL).await?;
    ensure_eq(
        &format!("list-unit-files row {when}"),
        vec![GLOBAL, want[0], want[1], "global"],
        row.iter().map(String::as_str).collect(),
    )
    .map_err(|e| ctx.fail(e))
}

/// `unit`'s row of `list-unit-files` as UNIT, DSTATE, STATE, TARGET (empty when not listed).
async fn file_row(ctx: &Ctx, unit: &str) -> Result<Vec<String>, String> {
    let fields = ["unit", "dstate", "state", "target"];
    let rows = ctx.table(1, "list-unit-files", &fields).await?;
    Ok(rows
        .iter()
        .find(|r| r.get("unit") == unit)
        .map(|r| fields.iter().map(|f| r.get(f).to_string()).collect())
        .unwrap_or_default())
}

/// `restart` of a global unit restarts it on every machine: all active again, each with a new MainPID.
pub async fn restart_gives_every_machine_a_new_process(ctx: Ctx) -> Outcome {
    let all = ids(&ctx, &[1, 2, 3])?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(GLOBAL)]).await?;
    wait_active_on(&ctx, 1, GLOBAL, &all).await?;
    let before = main_pids(&ctx, &[1, 2, 3], GLOBAL).await?;
    ctx.fleetctl_ok(1, &["restart", GLOBAL]).await?;
    expect_active_on(&ctx, 1, GLOBAL, &all, "right after `restart` returned").await?;
    let after = main_pids(&ctx, &[1, 2, 3], GLOBAL).await?;
    let same: Vec<String> =
        before.iter().filter(|(s, p)| after.get(s) == Some(p)).map(|(s, p)| format!("m{s} (MainPID {p})")).collect();
    ctx.ensure(same.is_empty(), || {
        format!("expected a new MainPID on every machine after restart; unchanged on {}; before {before:?}, after {after:?}", same.join(", "))
    })
}

/// `TestScheduleGlobalUnits`: two plain units and a global one make 5 active rows (3 of them global), and
/// `restart global.service` exits 0 with 5 active afterwards. (The original's `status global.service` step needs
/// SSH: it is `ssh::global_status`.)
pub async fn two_units_and_a_global_make_five(ctx: Ctx) -> Outcome {
    let all = ids(&ctx, &[1, 2, 3])?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("hello.service"), &fixtures::path("goodbye.service")]).await?;
    ctx.wait_for_n_active_units(1, 2).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(GLOBAL)]).await?;
    five_active(&ctx, &all).await?;
    ctx.fleetctl_ok(1, &["restart", GLOBAL]).await?;
    five_active(&ctx, &all).await
}

/// Waits for 5 active rows with global.service active on each machine of `all`.
async fn five_active(ctx: &Ctx, all: &BTreeSet<String>) -> Outcome {
    let args = ["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"];
    ctx.wait_fleetctl(1, &args, "5 active rows, global.service on all 3 machines", |out| {
        let states = fleet_harness::wait::parse_unit_states(out);
        let active = fleet_harness::wait::filter_active(&states);
        let on: BTreeSet<String> = active.iter().filter(|s| s.name == GLOBAL).map(|s| s.machine.clone()).collect();
        if active.len() == 5 && on == *all {
            Ok(())
        } else {
            Err(format!("{} active; global on {}", active.len(), show_ids(&on)))
        }
    })
    .await
}

/// Listings: `list-unit-files` shows `-` as STATE and `global` as TARGET, `list-units` one row per machine —
/// byte for byte the original's tables (transcript 05) with this cluster's hashes and machines.
pub async fn listings_match_the_original(ctx: Ctx) -> Outcome {
    let slots = [1, 2, 3];
    ctx.fleetctl_ok(1, &["submit", &fixtures::path("hello@.service")]).await?;
    let instances: Vec<String> = (1..=6).map(|i| fixtures::path(&format!("hello@{i}.service"))).collect();
    let mut args = vec!["start"];
    args.extend(instances.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &args).await?;
    let placed = ctx.wait_for_n_active_units(1, 6).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(GLOBAL)]).await?;
    ctx.wait_for_n_units(1, 9).await?;
    wait_active_on(&ctx, 1, GLOBAL, &ids(&ctx, &slots)?).await?;

    // Ground truth from the harness: machine ID → (short legend, full legend).
    let mut legends: BTreeMap<String, (String, String)> = BTreeMap::new();
    for s in slots {
        let m = ctx.machine(s)?;
        legends
            .insert(m.id().to_string(), (format!("{}.../{}", short(m.id()), m.ip()), format!("{}/{}", m.id(), m.ip())));
    }
    let legend = |id: &str, full: bool| {
        legends.get(id).map(|(s, f)| if full { f.clone() } else { s.clone() }).unwrap_or_else(|| format!("?{id}"))
    };
    // Hashes are this cluster's; they must look like the original's (7 hex digits) and instances share the
    // template's.
    let out = ctx.fleetctl_ok(1, &["list-unit-files", "--no-legend", "--fields", "unit,hash"]).await?;
    let hashes: BTreeMap<String, String> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(u, h)| (u.trim().to_string(), h.trim().to_string())))
        .collect();
    let hex7 = |h: &str| h.len() == 7 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let (gh, th) =
        (hashes.get(GLOBAL).cloned().unwrap_or_default(), hashes.get("hello@.service").cloned().unwrap_or_default());
    ctx.ensure(
        hex7(&gh) && hex7(&th) && (1..=6).all(|i| hashes.get(&format!("hello@{i}.service")) == Some(&th)),
        || format!("expected 7-hex hashes, instances sharing the template's; observed {hashes:?}"),
    )?;

    let cells = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    // `fleetctl list-unit-files`
    let mut rows = vec![cells(&["UNIT", "HASH", "DSTATE", "STATE", "TARGET"])];
    rows.push(cells(&[GLOBAL, &gh, "launched", "-", "global"]));
    rows.push(cells(&["hello@.service", &th, "inactive", "inactive", "-"]));
    for i in 1..=6 {
        let u = format!("hello@{i}.service");
        rows.push(vec![u.clone(), th.clone(), "launched".into(), "launched".into(), legend(&placed[&u], false)]);
    }
    compare(&ctx, &["list-unit-files"], &tabwrite(&rows)).await?;
    // `fleetctl list-unit-files --fields=unit,global,dstate,state,target --full`
    let mut rows = vec![cells(&["UNIT", "GLOBAL", "DSTATE", "STATE", "TARGET"])];
    rows.push(cells(&[GLOBAL, "true", "launched", "-", "global"]));
    rows.push(cells(&["hello@.service", "false", "inactive", "inactive", "-"]));
    for i in 1..=6 {
        let u = format!("hello@{i}.service");
        rows.push(vec![u.clone(), "false".into(), "launched".into(), "launched".into(), legend(&placed[&u], true)]);
    }
    compare(&ctx, &["list-unit-files", "--fields=unit,global,dstate,state,target", "--full"], &tabwrite(&rows)).await?;
    // `fleetctl list-units`: one global row per machine (machine ID order), then the instances.
    let mut rows = vec![cells(&["UNIT", "MACHINE", "ACTIVE", "SUB"])];
    for id in legends.keys() {
        rows.push(vec![GLOBAL.into(), legend(id, false), "active".into(), "running".into()]);
    }
    for i in 1..=6 {
        let u = format!("hello@{i}.service");
        rows.push(vec![u.clone(), legend(&placed[&u], false), "active".into(), "running".into()]);
    }
    compare(&ctx, &["list-units"], &tabwrite(&rows)).await
}

/// Runs `fleetctl <args>` and requires its stdout to be exactly `want`.
async fn compare(ctx: &Ctx, args: &[&str], want: &str) -> Outcome {
    let out = ctx.fleetctl_ok(1, args).await?;
    ctx.ensure(out.stdout == want, || {
        format!("`fleetctl {}`: expected exactly\n{want:?}\nobserved\n{:?}", args.join(" "), out.stdout)
    })
}

/// The original's table layout: Go `text/tabwriter` with minwidth 0, tabwidth 8, padding 1, padchar `\t`. A
/// column is as wide as its widest cell plus one, rounded up to a tab stop; the last cell of a line is not padded.
fn tabwrite(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut width = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate().take(r.len().saturating_sub(1)) {
            width[i] = width[i].max(c.chars().count() + 1);
        }
    }
    let width: Vec<usize> = width.into_iter().map(|w| w.div_ceil(8) * 8).collect();
    let mut out = String::new();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            out.push_str(c);
            if i + 1 < r.len() {
                out.push_str(&"\t".repeat((width[i] - c.chars().count()).div_ceil(8)));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::tabwrite;

    fn rows(text: &str) -> Vec<Vec<String>> {
        text.lines().map(|l| l.split('\t').filter(|c| !c.is_empty()).map(str::to_string).collect()).collect()
    }

    #[test]
    fn tabwrite_reproduces_transcript_05() {
        // Verbatim from reference transcript 05 (list-unit-files, list-units after stop, list-units after start).
        for table in [
            "UNIT\t\tHASH\tDSTATE\t\tSTATE\t\tTARGET\nglobal.service\t2e39e56\tlaunched\t-\t\tglobal\nhello@.service\tb0a4370\tinactive\tinactive\t-\nhello@1.service\tb0a4370\tlaunched\tlaunched\t8363165e.../172.17.0.2\n",
            "UNIT\t\tGLOBAL\tDSTATE\t\tSTATE\t\tTARGET\nglobal.service\ttrue\tlaunched\t-\t\tglobal\nhello@.service\tfalse\tinactive\tinactive\t-\nhello@1.service\tfalse\tlaunched\tlaunched\t8363165e6276f500b71169eca9b3f76b/172.17.0.2\n",
            "UNIT\t\tMACHINE\t\t\tACTIVE\t\tSUB\nglobal.service\t8363165e.../172.17.0.2\tinactive\tdead\nhello@1.service\t8363165e.../172.17.0.2\tactive\t\trunning\n",
            "UNIT\t\tMACHINE\t\t\tACTIVE\tSUB\nglobal.service\t8363165e.../172.17.0.2\tactive\trunning\n",
        ] {
            assert_eq!(tabwrite(&rows(table)), table);
        }
    }
}

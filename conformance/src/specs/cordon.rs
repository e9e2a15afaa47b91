//! Cordoned machines (issue 38), in the `machines` area: `fleetctl cordon MACHINE` keeps new units off a machine
//! while the units it runs keep running, `list-machines --fields=...,state` and `--output=json` show it (the default
//! table stays the original's), a cordoned machine starts no global unit it does not run yet, and `fleetctl
//! uncordon` lets new units land there again.
//!
//! Observations: where `list-units` shows each unit active, and systemd inside the machines (`systemctl
//! is-active`, `MainPID`).

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_harness::wait::Check;
use serde_json::Value;

use super::short;
use crate::capabilities::Capability;
use crate::check::ensure_eq;
use crate::fixtures;
use crate::{Area, Ctx, Outcome, Spec, SpecFuture};

pub fn specs() -> Vec<Spec> {
    fn spec(name: &'static str, machines: usize, run: fn(Ctx) -> SpecFuture) -> Spec {
        Spec {
            name,
            area: Area::Machines,
            machines,
            metadata: &[],
            requires: &[],
            needs: super::CHANGES_MACHINES,
            origin: "issue 38",
            run,
        }
    }
    vec![
        spec("cordon_keeps_new_units_off_and_units_there_running", 2, |c| Box::pin(keeps_new_units_off(c)))
            .requires(&[Capability::Cordon]),
        spec("cordoned_machine_starts_no_global_unit_it_does_not_run", 2, |c| Box::pin(no_new_global(c)))
            .requires(&[Capability::Cordon]),
    ]
}

/// `fleetctl start` of `hello@<i>.service` for every `i` (the fixture template's instances), via machine 1.
async fn start_hellos(ctx: &Ctx, instances: impl Iterator<Item = usize>) -> Outcome {
    let paths: Vec<String> = instances.map(|i| fixtures::path(&format!("hello@{i}.service"))).collect();
    let mut args = vec!["start"];
    args.extend(paths.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &args).await.map(drop)
}

/// Waits until `list-machines --fields=machine,state` shows each machine in `want` (full ID → state).
async fn wait_states(ctx: &Ctx, want: &BTreeMap<String, &str>, what: &str) -> Outcome {
    ctx.wait_table(1, "list-machines", &["machine", "state"], what, |rows| {
        let seen: BTreeMap<String, &str> =
            rows.iter().map(|r| (r.get("machine").to_string(), r.get("state"))).collect();
        if seen == *want { Ok(()) } else { Err(format!("list-machines shows {seen:?}")) }
    })
    .await
}

/// Two machines, one unit on each; m2 cordoned: four more units all land on m1 while m2's unit keeps its process;
/// list-machines shows the state only when asked; uncordoned, the next two units land on m2 (the least loaded), and
/// nothing moved meanwhile.
pub async fn keeps_new_units_off(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    let (m1, m2) = (ctx.id(1)?, ctx.id(2)?);
    let first = ctx.start_hello_instances(2).await?;
    let on_m2: Vec<String> = first.iter().filter(|(_, m)| **m == m2).map(|(u, _)| u.clone()).collect();
    ctx.ensure(on_m2.len() == 1, || {
        format!("two units on two idle machines must spread one each; observed {first:?}")
    })?;
    let kept = on_m2[0].clone();
    let pid = ctx.main_pid(2, &kept).await?;
    let table_before = ctx.fleetctl_ok(1, &["list-machines", "--full"]).await?.stdout;

    let out = ctx.fleetctl_ok(1, &["cordon", short(&m2)]).await?;
    ctx.ensure(out.stdout.contains(&m2), || format!("cordon names the machine it cordoned: {}", out.describe()))?;
    let cordoned: BTreeMap<String, &str> = [(m1.clone(), "ready"), (m2.clone(), "cordoned")].into();
    wait_states(&ctx, &cordoned, "list-machines to show m2 cordoned, m1 ready").await?;
    let table_after = ctx.fleetctl_ok(1, &["list-machines", "--full"]).await?.stdout;
    ensure_eq("list-machines (default fields) before and after the cordon", &table_before, &table_after)?;
    let json: Value = serde_json::from_str(&ctx.fleetctl_ok(1, &["list-machines", "--output=json"]).await?.stdout)
        .map_err(|e| ctx.fail(format!("list-machines --output=json is not JSON: {e}")))?;
    let states: BTreeMap<String, String> = json["machines"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| (m["id"].as_str().unwrap_or("").to_string(), m["state"].as_str().unwrap_or("").to_string()))
        .collect();
    let want: BTreeMap<String, String> = cordoned.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
    ensure_eq("list-machines --output=json states", &want, &states)?;

    // Least-loaded placement would put two of these on m2; cordoned, it takes none.
    start_hellos(&ctx, 3..=6).await?;
    let placed = ctx.wait_for_n_active_units(1, 6).await?;
    let landed: Vec<&String> = placed.iter().filter(|(u, m)| **m == m2 && **u != kept).map(|(u, _)| u).collect();
    ctx.ensure(landed.is_empty(), || {
        format!("no new unit may land on cordoned m2 ({}); observed {landed:?} there (all: {placed:?})", short(&m2))
    })?;
    ensure_eq(&format!("{kept} stays on cordoned m2"), Some(&m2), placed.get(&kept))?;
    let now = ctx.main_pid(2, &kept).await?;
    ctx.ensure(now == pid, || format!("{kept} on cordoned m2 was restarted: MainPID {pid} -> {now}"))?;

    ctx.fleetctl_ok(1, &["uncordon", &m2]).await?;
    let ready: BTreeMap<String, &str> = [(m1.clone(), "ready"), (m2.clone(), "ready")].into();
    wait_states(&ctx, &ready, "list-machines to show both machines ready").await?;
    start_hellos(&ctx, 7..=8).await?;
    let after = ctx.wait_for_n_active_units(1, 8).await?;
    for unit in ["hello@7.service", "hello@8.service"] {
        ensure_eq(&format!("{unit} after the uncordon (m1 runs 5, m2 1)"), Some(&m2), after.get(unit))?;
    }
    let moved: Vec<&String> = placed.iter().filter(|(u, m)| after.get(*u) != Some(*m)).map(|(u, _)| u).collect();
    ctx.ensure(moved.is_empty(), || {
        format!("an uncordon moves nothing; moved: {moved:?} (before {placed:?}, after {after:?})")
    })
}

/// `systemctl is-active <unit>` in machine `slot`.
async fn is_active(ctx: &Ctx, slot: usize, unit: &str) -> Result<String, String> {
    Ok(ctx.exec(slot, &["systemctl", "is-active", unit]).await?.stdout.trim().to_string())
}

async fn wait_active(ctx: &Ctx, slot: usize, unit: &str) -> Outcome {
    ctx.wait_for(&format!("{unit} active in m{slot}"), || async move {
        match is_active(ctx, slot, unit).await {
            Ok(s) if s == "active" => Check::Ready(()),
            Ok(s) => Check::NotYet(format!("systemctl is-active: {s}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

/// A global unit runs on both machines; m2 cordoned: a second global unit starts on m1 only, m2 keeps the first
/// one's process; uncordoned, m2 starts the second one too.
pub async fn no_new_global(ctx: Ctx) -> Outcome {
    const OLD: &str = "global@1.service";
    const NEW: &str = "global@2.service";
    ctx.wait_for_n_machines(1, 2).await?;
    let m2 = ctx.id(2)?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(OLD)]).await?;
    wait_active(&ctx, 1, OLD).await?;
    wait_active(&ctx, 2, OLD).await?;
    let pid = ctx.main_pid(2, OLD).await?;

    ctx.fleetctl_ok(1, &["cordon", &m2]).await?;
    let out = ctx.fleetctl(1, &["start", &fixtures::path(NEW)]).await?;
    ctx.ensure(out.success(), || format!("start of a global unit with m2 cordoned: {}", out.describe()))?;
    wait_active(&ctx, 1, NEW).await?;
    // Held for 5 s: m2 never starts it (an agent acts within a second of a change).
    for _ in 0..10 {
        let state = is_active(&ctx, 2, NEW).await?;
        ctx.ensure(state != "active" && state != "activating", || {
            format!("cordoned m2 ({}) started the new global unit {NEW}: systemctl is-active {state}", short(&m2))
        })?;
        ctx.hold(Duration::from_millis(500)).await;
    }
    let now = ctx.main_pid(2, OLD).await?;
    ctx.ensure(now == pid, || format!("{OLD} on cordoned m2 was restarted or stopped: MainPID {pid} -> {now}"))?;

    ctx.fleetctl_ok(1, &["uncordon", &m2]).await?;
    wait_active(&ctx, 2, NEW).await?;
    let now = ctx.main_pid(2, OLD).await?;
    ctx.ensure(now == pid, || format!("{OLD} on m2 was restarted by the uncordon: MainPID {pid} -> {now}"))
}

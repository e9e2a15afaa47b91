//! Loss of etcd: a machine cut off keeps its units running, and the cluster converges when etcd is back.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_harness::wait::Row;

use crate::check::ensure_eq;
use crate::fixtures;
use crate::{Ctx, Outcome};

const STATES: [&str; 3] = ["inactive", "loaded", "launched"];

fn families() -> Vec<(String, &'static str)> {
    ["single", "global"].iter().flat_map(|f| STATES.iter().map(move |s| (format!("{f}@{s}.service"), *s))).collect()
}

/// unit → dstate, and unit → active state, as fleetctl should show them.
fn expected() -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut files = BTreeMap::new();
    let mut active = BTreeMap::new();
    for (u, s) in families() {
        files.insert(u.clone(), s.to_string());
        match s {
            "loaded" => {
                active.insert(u, "inactive".to_string());
            }
            "launched" => {
                active.insert(u, "active".to_string());
            }
            _ => {}
        }
    }
    (files, active)
}

async fn fleetctl_views_match(ctx: &Ctx, when: &str) -> Outcome {
    let (files, active) = expected();
    let (files, active) = (&files, &active);
    let by_unit = |rows: &[Row], field: &str| -> BTreeMap<String, String> {
        rows.iter().map(|r| (r.get("unit").to_string(), r.get(field).to_string())).collect()
    };
    ctx.wait_table(1, "list-unit-files", &["unit", "dstate"], &format!("{when}: desired states"), |rows| {
        let seen = by_unit(rows, "dstate");
        if seen == *files { Ok(()) } else { Err(format!("{seen:?}")) }
    })
    .await?;
    ctx.wait_table(1, "list-units", &["unit", "active"], &format!("{when}: active states"), |rows| {
        let seen = by_unit(rows, "active");
        if seen == *active { Ok(()) } else { Err(format!("{seen:?}")) }
    })
    .await
}

/// A single machine cut off from etcd longer than its TTL keeps running its launched units (and keeps loaded ones
/// linked); after the partition heals, fleetctl shows the same states and nothing was ever stopped.
pub async fn single_node_loss(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 1).await?;
    for (u, state) in families() {
        let path = fixtures::path(&u);
        match state {
            "inactive" => ctx.fleetctl_ok(1, &["submit", &path]).await?,
            "loaded" => ctx.fleetctl_ok(1, &["load", "--no-block", &path]).await?,
            _ => ctx.fleetctl_ok(1, &["start", "--no-block", &path]).await?,
        };
    }
    fleetctl_views_match(&ctx, "before the partition").await?;
    let machine = ctx.machine(1)?;
    machine.partition().await.map_err(|e| e.to_string())?;
    ctx.hold(Duration::from_secs(3 + 5 + 2)).await;
    for (u, state) in families() {
        if state == "inactive" {
            continue;
        }
        let out = ctx.exec(1, &["systemctl", "is-enabled", &u]).await?;
        ensure_eq(&format!("`systemctl is-enabled {u}` during the partition"), "linked-runtime", out.stdout.trim())?;
    }
    let out =
        ctx.exec_ok(1, &["systemctl", "list-units", "--no-legend", "--plain", "--all", "single@*", "global@*"]).await?;
    let mut running: Vec<String> = out
        .stdout
        .lines()
        .filter(|l| l.contains(" loaded active running"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    running.sort();
    ensure_eq(
        "units running during the partition",
        vec!["global@launched.service".to_string(), "single@launched.service".to_string()],
        running,
    )?;
    machine.heal().await.map_err(|e| e.to_string())?;
    ctx.hold(Duration::from_secs(3 + 5 + 2)).await;
    fleetctl_views_match(&ctx, "after the partition healed").await?;
    let journal = ctx.journal_pid1(1).await?;
    for needle in ["Stopping single@", "Stopping global@"] {
        ctx.ensure(!journal.contains(needle), || {
            let lines: Vec<&str> = journal.lines().filter(|l| l.contains("Stopping")).collect();
            format!("PID 1's journal must not contain {needle:?}; found: {lines:?}")
        })?;
    }
    Ok(())
}

/// The MainPID of each unit in `units` (unit → machine ID) on its machine.
async fn main_pids(ctx: &Ctx, units: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
    let mut pids = BTreeMap::new();
    for (u, m) in units {
        let slot = ctx.slot_of(m).ok_or_else(|| format!("{u} on unknown machine {m}"))?;
        pids.insert(u.clone(), ctx.main_pid(slot, u).await?);
    }
    Ok(pids)
}

/// etcd stopped for longer than the TTL and started again: units keep running throughout (same process, nothing
/// stopped) and the cluster converges to the same placement.
pub async fn etcd_restart(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    let before = ctx.start_hello_instances(4).await?;
    let pids = main_pids(&ctx, &before).await?;
    ctx.cluster().stop_etcd().await.map_err(|e| e.to_string())?;
    ctx.hold(Duration::from_secs(3 + 5 + 2)).await;
    ensure_eq("MainPIDs while etcd is down", &pids, &main_pids(&ctx, &before).await?)?;
    ctx.cluster().start_etcd().await.map_err(|e| e.to_string())?;
    ctx.wait_for_n_machines(1, 2).await?;
    let after = ctx.wait_for_n_active_units(1, 4).await?;
    ensure_eq("placement after etcd came back", &before, &after)?;
    // Give agents a few reconciles on the restored registry before looking for stops.
    ctx.hold(Duration::from_secs(5)).await;
    ensure_eq("MainPIDs after etcd came back", &pids, &main_pids(&ctx, &before).await?)?;
    for slot in 1..=2 {
        let journal = ctx.journal_pid1(slot).await?;
        let stops: Vec<&str> = journal.lines().filter(|l| l.contains("Stopping hello@")).collect();
        ctx.ensure(stops.is_empty(), || format!("no `Stopping hello@` in m{slot}'s PID 1 journal; found {stops:?}"))?;
    }
    Ok(())
}

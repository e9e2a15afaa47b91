//! Changing a running service without an outage (issue 12): a replace that only rewrites the unit file and reloads
//! systemd (`--replace --no-restart`), with what each machine runs published next to what it has on disk.
//!
//! Observations are systemd inside every machine (`MainPID`, `NeedDaemonReload`, the file fleet wrote, a marker the
//! unit's own `ExecReload=` writes) and `list-units --fields=unit,machine,hash,running-hash`; right after a blocking
//! fleetctl command returns, a spec observes without waiting, except for effects the command does not promise to
//! await (the reload job, which runs after the new file is published).

use std::collections::BTreeMap;

use crate::check::ensure_eq;
use crate::fixtures::TempDir;
use crate::{Ctx, Outcome};
use fleet_harness::wait::Check;

const UNIT: &str = "db-no-restart.service";

/// Version 1: a long-running service without `ExecReload=`.
const V1: &str = "[Unit]\nDescription=database v1\n\n[Service]\nExecStart=/bin/sh -c 'while true; do sleep 1; done'\n\n[X-Fleet]\nGlobal=true\n";

/// Version 2: one line changed, and an `ExecReload=` that leaves a marker the spec looks for.
const V2: &str = "[Unit]\nDescription=database v2\n\n[Service]\nExecStart=/bin/sh -c 'while true; do sleep 1; done'\nExecReload=/bin/sh -c 'echo v2 >> /run/db-no-restart.reloaded'\n\n[X-Fleet]\nGlobal=true\n";

const SLOTS: [usize; 3] = [1, 2, 3];

async fn main_pids(ctx: &Ctx) -> Result<BTreeMap<usize, String>, String> {
    let mut out = BTreeMap::new();
    for slot in SLOTS {
        let p = ctx.show(slot, UNIT, &["MainPID"]).await?;
        let pid = p.get("MainPID").cloned().unwrap_or_default();
        ctx.ensure(!pid.is_empty() && pid != "0", || format!("{UNIT} has no main process in m{slot}: {p:?}"))?;
        out.insert(slot, pid);
    }
    Ok(out)
}

/// `list-units` rows of the unit: machine ID → (hash, running hash), full hashes.
async fn versions(ctx: &Ctx) -> Result<BTreeMap<String, (String, String)>, String> {
    let out = ctx
        .fleetctl_ok(1, &["list-units", "--no-legend", "--full", "--fields", "unit,machine,hash,running-hash"])
        .await?;
    let mut rows = BTreeMap::new();
    for line in out.stdout.lines() {
        if let [unit, machine, hash, running] = line.split_whitespace().collect::<Vec<_>>()[..] {
            if unit == UNIT {
                let machine = machine.split('/').next().unwrap_or_default().to_string();
                rows.insert(machine, (hash.to_string(), running.to_string()));
            }
        }
    }
    Ok(rows)
}

/// The full hash `list-unit-files` gives the registry's copy.
async fn registry_hash(ctx: &Ctx) -> Result<String, String> {
    let out = ctx.fleetctl_ok(1, &["list-unit-files", "--no-legend", "--full", "--fields", "unit,hash"]).await?;
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{UNIT}\t")).map(|h| h.trim().to_string()))
        .ok_or_else(|| ctx.fail(format!("{UNIT} is not in list-unit-files")))
}

/// Every machine lists the unit with file hash `hash` and running hash `running`.
fn expect_versions(
    ctx: &Ctx,
    rows: &BTreeMap<String, (String, String)>,
    hash: &str,
    running: &str,
    when: &str,
) -> Outcome {
    let ok = rows.len() == SLOTS.len() && rows.values().all(|(h, r)| h == hash && r == running);
    ctx.ensure(ok, || {
        format!(
            "{when}: expected {} rows of {UNIT} with hash {} and running-hash {}, observed {rows:?}",
            SLOTS.len(),
            &hash[..7.min(hash.len())],
            &running[..7.min(running.len())]
        )
    })
}

/// `start --replace --no-restart` of a global unit: every machine writes the new file and reloads systemd, keeps the
/// unit's process and runs the new version's `ExecReload=`; `list-units` shows the running version lagging the file
/// until `restart`, which starts the new version everywhere.
pub async fn replace_without_restart_keeps_every_process(ctx: Ctx) -> Outcome {
    let dir = TempDir::new()?;
    let path = dir.write(UNIT, V1)?;
    ctx.fleetctl_ok(1, &["start", &path]).await?;
    let before = main_pids(&ctx).await?;
    let v1 = registry_hash(&ctx).await?;
    expect_versions(&ctx, &versions(&ctx).await?, &v1, &v1, "after start of v1")?;

    dir.write(UNIT, V2)?;
    let out = ctx.fleetctl_ok(1, &["start", "--replace", "--no-restart", &path]).await?;
    let v2 = registry_hash(&ctx).await?;
    ctx.ensure(v2 != v1, || format!("the registry still holds v1 after the replace: {}", out.describe()))?;
    let after = main_pids(&ctx).await?;
    ensure_eq("MainPID of every machine (slot → pid) across the replace without restart", &before, &after)
        .map_err(|e| ctx.fail(e))?;
    for slot in SLOTS {
        let file = ctx.exec_ok(slot, &["cat", &format!("/run/fleet/units/{UNIT}")]).await?;
        ctx.ensure(file.stdout.contains("Description=database v2"), || {
            format!("m{slot}: the unit file fleet wrote is not v2 right after the replace returned:\n{}", file.stdout)
        })?;
        let p = ctx.show(slot, UNIT, &["NeedDaemonReload", "ActiveState", "Description"]).await?;
        let want = [("NeedDaemonReload", "no"), ("ActiveState", "active"), ("Description", "database v2")];
        ctx.ensure(want.iter().all(|(k, v)| p.get(*k).map(String::as_str) == Some(*v)), || {
            format!("m{slot}: expected {want:?} right after the replace returned, systemd shows {p:?}")
        })?;
        // The reload job follows the daemon-reload: wait for the marker v2's ExecReload= writes.
        let c = &ctx;
        ctx.wait_for(&format!("v2's ExecReload= to run in m{slot}"), || async move {
            match c.exec(slot, &["cat", "/run/db-no-restart.reloaded"]).await {
                Ok(o) if o.success() && o.stdout.trim() == "v2" => Check::Ready(()),
                Ok(o) => Check::NotYet(format!("marker file: {}", o.describe())),
                Err(e) => Check::NotYet(e),
            }
        })
        .await?;
    }
    expect_versions(&ctx, &versions(&ctx).await?, &v2, &v1, "after the replace without restart")?;
    ensure_eq("MainPID of every machine after the reloads", &before, &main_pids(&ctx).await?)
        .map_err(|e| ctx.fail(e))?;

    // A restart brings every machine level: new processes, running the file's version.
    ctx.fleetctl_ok(1, &["restart", UNIT]).await?;
    let restarted = main_pids(&ctx).await?;
    for slot in SLOTS {
        ctx.ensure(restarted[&slot] != before[&slot], || {
            format!("m{slot}: MainPID {} unchanged after restart", before[&slot])
        })?;
    }
    let what = "every machine to list running-hash = hash (v2) after restart";
    let (ctx, v2) = (&ctx, &v2);
    ctx.wait_for(what, || async move {
        match versions(ctx).await {
            Ok(rows) if rows.len() == SLOTS.len() && rows.values().all(|(h, r)| h == v2 && r == v2) => Check::Ready(()),
            Ok(rows) => Check::NotYet(format!("{rows:?}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

//! `fleetctl plan` predicts what a replace then does (issue 12): each step runs `plan`, then the command it
//! planned, and compares plan's lines with what systemd shows on every machine afterwards — a new `MainPID`
//! (restart), the same one with the new version's `ExecReload=` marker (reload), where the unit runs (move), and
//! nothing at all when plan says nothing changes (exit 0).

use std::collections::BTreeMap;

use crate::fixtures::TempDir;
use crate::{Ctx, Outcome};

const SLOTS: [usize; 3] = [1, 2, 3];
const DB: &str = "db-plan.service";
const WEB: &str = "web-plan.service";
const ONE: &str = "one-plan.service";

fn looping(version: &str, extra: &str, xfleet: &str) -> String {
    format!(
        "[Unit]\nDescription={version}\n\n[Service]\nExecStart=/bin/sh -c 'while true; do sleep 1; done'\n{extra}\n[X-Fleet]\n{xfleet}\n"
    )
}

/// plan's lines as (unit, slot or 0 for none, action); the MACHINE column starts with the short machine ID.
fn parse_plan(ctx: &Ctx, stdout: &str) -> Result<Vec<(String, usize, String)>, String> {
    let mut short_ids = BTreeMap::new();
    for slot in SLOTS {
        short_ids.insert(ctx.id(slot)?[..8].to_string(), slot);
    }
    Ok(stdout
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let slot = f.get(1).and_then(|m| short_ids.get(m.get(..8)?)).copied().unwrap_or(0);
            Some((f.first()?.to_string(), slot, f.get(2)?.to_string()))
        })
        .collect())
}

async fn main_pids(ctx: &Ctx, unit: &str) -> Result<BTreeMap<usize, String>, String> {
    let mut pids = BTreeMap::new();
    for slot in SLOTS {
        pids.insert(slot, ctx.show(slot, unit, &["MainPID"]).await?.remove("MainPID").unwrap_or_default());
    }
    Ok(pids)
}

/// Runs `plan <args>` and expects exit status `code`; returns its lines, sorted (plan lists machines in ID order).
async fn plan(ctx: &Ctx, args: &[&str], code: i32) -> Result<Vec<(String, usize, String)>, String> {
    let mut full = vec!["plan"];
    full.extend_from_slice(args);
    let out = ctx.fleetctl(1, &full).await?;
    ctx.ensure(out.status == code, || {
        format!("fleetctl {}: expected exit {code}, got {}", full.join(" "), out.describe())
    })?;
    let mut lines = parse_plan(ctx, &out.stdout)?;
    lines.sort();
    Ok(lines)
}

/// The slots where `unit` is active, as systemd shows them.
async fn running_on(ctx: &Ctx, unit: &str) -> Result<Vec<usize>, String> {
    let mut on = Vec::new();
    for slot in SLOTS {
        if ctx.show(slot, unit, &["ActiveState"]).await?.get("ActiveState").map(String::as_str) == Some("active") {
            on.push(slot);
        }
    }
    Ok(on)
}

pub async fn plan_predicts_what_the_replace_does(ctx: Ctx) -> Outcome {
    let dir = TempDir::new()?;
    let db = dir.write(DB, &looping("db v1", "", "Global=true"))?;
    let web = dir.write(WEB, &looping("web v1", "", "Global=true"))?;
    let first_id = ctx.id(1)?;
    let one = dir.write(ONE, &looping("one v1", "", &format!("MachineID={first_id}")))?;
    // Nothing exists yet: plan of a start predicts the starts, and changes nothing.
    let lines = plan(&ctx, &["start", &db, &web, &one], 2).await?;
    let starts = lines.iter().filter(|(_, _, a)| a == "start").count();
    ctx.ensure(starts == 7 && lines.len() == 7, || format!("expected 3 + 3 + 1 start lines, plan said {lines:?}"))?;
    let listed = ctx.fleetctl_ok(1, &["list-unit-files", "--no-legend"]).await?;
    ctx.ensure(listed.stdout.trim().is_empty(), || format!("plan created units: {}", listed.describe()))?;
    ctx.fleetctl_ok(1, &["start", &db, &web, &one]).await?;
    for slot in SLOTS {
        ctx.wait_systemd(slot, DB, "ActiveState", "active").await?;
        ctx.wait_systemd(slot, WEB, "ActiveState", "active").await?;
    }
    ctx.wait_systemd(1, ONE, "ActiveState", "active").await?;

    // Same content everywhere: nothing would change (exit 0, no lines).
    let lines = plan(&ctx, &["start", "--replace", &db, &web, &one], 0).await?;
    ctx.ensure(lines.is_empty(), || format!("plan of identical content listed {lines:?}"))?;

    // A replace of the global db: a restart on every machine, and every MainPID changes.
    dir.write(DB, &looping("db v2", "", "Global=true"))?;
    let lines = plan(&ctx, &["start", "--replace", &db], 2).await?;
    let want: Vec<(String, usize, String)> =
        SLOTS.iter().map(|&s| (DB.to_string(), s, "restart".to_string())).collect();
    ctx.ensure(lines == want, || format!("plan of the db replace: expected {want:?}, got {lines:?}"))?;
    let before = main_pids(&ctx, DB).await?;
    ctx.fleetctl_ok(1, &["start", "--replace", &db]).await?;
    for slot in SLOTS {
        ctx.wait_systemd(slot, DB, "Description", "db v2").await?;
        ctx.wait_systemd(slot, DB, "ActiveState", "active").await?;
    }
    let after = main_pids(&ctx, DB).await?;
    for slot in SLOTS {
        ctx.ensure(after[&slot] != before[&slot], || {
            format!("plan said restart on m{slot}, but its MainPID stayed {}", before[&slot])
        })?;
    }

    // --no-restart of web with an ExecReload=: a reload on every machine, same MainPID, the reload marker written.
    let marker = "/run/web-plan.reloaded";
    let reload = format!("ExecReload=/bin/sh -c 'echo v2 >> {marker}'\n");
    dir.write(WEB, &looping("web v2", &reload, "Global=true"))?;
    let lines = plan(&ctx, &["start", "--replace", "--no-restart", &web], 2).await?;
    let want: Vec<(String, usize, String)> =
        SLOTS.iter().map(|&s| (WEB.to_string(), s, "reload".to_string())).collect();
    ctx.ensure(lines == want, || format!("plan of the web replace without restart: expected {want:?}, got {lines:?}"))?;
    let before = main_pids(&ctx, WEB).await?;
    ctx.fleetctl_ok(1, &["start", "--replace", "--no-restart", &web]).await?;
    // The command returns once every machine's reload job finished.
    for slot in SLOTS {
        let o = ctx.exec(slot, &["cat", marker]).await?;
        ctx.ensure(o.success() && o.stdout.trim() == "v2", || {
            format!("plan said reload: m{slot}'s web v2 ExecReload= marker after the replace: {}", o.describe())
        })?;
    }
    let after = main_pids(&ctx, WEB).await?;
    ctx.ensure(after == before, || format!("plan said reload (same process), MainPIDs went {before:?} -> {after:?}"))?;

    // one moves from m1 to m2 (its new version requires m2): plan says move m1 → m2, and that is where it runs.
    let second_id = ctx.id(2)?;
    dir.write(ONE, &looping("one v2", "", &format!("MachineID={second_id}")))?;
    let out = ctx.fleetctl(1, &["plan", "start", "--replace", &one]).await?;
    let lines = parse_plan(&ctx, &out.stdout)?;
    ctx.ensure(lines == [(ONE.to_string(), 2, "move".to_string())], || {
        format!("plan of the move: expected one move to m2, got {}", out.describe())
    })?;
    ctx.ensure(out.stdout.contains(&format!("{} → {}", &first_id[..8], &second_id[..8])), || {
        format!("plan's move must name both machines: {}", out.describe())
    })?;
    ctx.fleetctl_ok(1, &["start", "--replace", &one]).await?;
    ctx.wait_systemd(2, ONE, "Description", "one v2").await?;
    ctx.wait_systemd(2, ONE, "ActiveState", "active").await?;
    let on = running_on(&ctx, ONE).await?;
    ctx.ensure(on == [2], || format!("plan said {ONE} moves to m2; systemd runs it on {on:?}"))?;

    // No machine can run the next version: plan says blocked, and stop on m2 — and so it goes.
    dir.write(ONE, &looping("one v3", "", "MachineMetadata=role=nowhere"))?;
    let out = ctx.fleetctl(1, &["start", "--replace", "--dry-run", &one]).await?;
    let lines = parse_plan(&ctx, &out.stdout)?;
    let want = [(ONE.to_string(), 0, "blocked".to_string()), (ONE.to_string(), 2, "stop".to_string())];
    ctx.ensure(out.status == 2 && lines == want, || format!("--dry-run: expected {want:?}, got {}", out.describe()))?;
    ctx.ensure(out.stdout.contains("no agents able to run job"), || {
        format!("blocked must say why: {}", out.describe())
    })?;
    ctx.fleetctl_ok(1, &["start", "--replace", "--no-block", &one]).await?;
    ctx.wait_systemd(2, ONE, "ActiveState", "inactive").await?;
    let on = running_on(&ctx, ONE).await?;
    ctx.ensure(on.is_empty(), || format!("plan said {ONE} is blocked; systemd runs it on {on:?}"))?;
    for slot in SLOTS {
        ctx.exec_ok(slot, &["rm", "-f", marker]).await?;
    }
    Ok(())
}

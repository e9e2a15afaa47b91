//! Changing a running service without an outage (issue 12): a replace that only rewrites the unit file and reloads
//! systemd (`--replace --no-restart`), with what each machine runs published next to what it has on disk.
//!
//! Observations are systemd inside every machine (`MainPID`, `NeedDaemonReload`, the file fleet wrote, a marker the
//! unit's own `ExecReload=` writes) and `list-units --fields=unit,machine,hash,running-hash`; right after a blocking
//! fleetctl command returns, a spec observes without waiting: a replace without restart returns once every machine
//! runs the new definition and has finished the new version's `ExecReload=`.

use std::collections::BTreeMap;

use crate::check::ensure_eq;
use crate::fixtures::TempDir;
use crate::{Ctx, Outcome};
use fleet_harness::wait::Check;

const UNIT: &str = "db-no-restart.service";

/// Version 1: a long-running service without `ExecReload=`.
const V1: &str = "[Unit]\nDescription=database v1\n\n[Service]\nExecStart=/bin/sh -c 'while true; do sleep 1; done'\n\n[X-Fleet]\nGlobal=true\n";

/// Version 2: one line changed, and an `ExecReload=` that takes a second (so a command that does not wait for it
/// returns first) and leaves a marker the spec looks for.
const V2: &str = "[Unit]\nDescription=database v2\n\n[Service]\nExecStart=/bin/sh -c 'while true; do sleep 1; done'\nExecReload=/bin/sh -c 'sleep 1; echo v2 >> /run/db-no-restart.reloaded'\n\n[X-Fleet]\nGlobal=true\n";

const SLOTS: [usize; 3] = [1, 2, 3];

async fn main_pids(ctx: &Ctx) -> Result<BTreeMap<usize, String>, String> {
    let mut out = BTreeMap::new();
    for slot in SLOTS {
        out.insert(slot, ctx.main_pid(slot, UNIT).await?);
    }
    Ok(out)
}

/// `list-units` rows of the unit: machine ID → (hash, running hash), full hashes.
async fn versions(ctx: &Ctx) -> Result<BTreeMap<String, (String, String)>, String> {
    let rows = ctx.table(1, "list-units", &["unit", "machine", "hash", "running-hash"]).await?;
    Ok(rows
        .iter()
        .filter(|r| r.get("unit") == UNIT)
        .map(|r| {
            let machine = r.get("machine").split('/').next().unwrap_or_default().to_string();
            (machine, (r.get("hash").to_string(), r.get("running-hash").to_string()))
        })
        .collect())
}

/// The full hash `list-unit-files` gives the registry's copy.
async fn registry_hash(ctx: &Ctx) -> Result<String, String> {
    let rows = ctx.table(1, "list-unit-files", &["unit", "hash"]).await?;
    rows.iter()
        .find(|r| r.get("unit") == UNIT)
        .map(|r| r.get("hash").to_string())
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
        // The command waits for the reload job too: v2's ExecReload= has left its marker, exactly once.
        let marker = ctx.exec(slot, &["cat", "/run/db-no-restart.reloaded"]).await?;
        ctx.ensure(marker.success() && marker.stdout.trim() == "v2", || {
            format!("m{slot}: v2's ExecReload= marker right after the replace returned: {}", marker.describe())
        })?;
    }
    expect_versions(&ctx, &versions(&ctx).await?, &v2, &v1, "after the replace without restart")?;
    ensure_eq("MainPID of every machine after the reloads", &before, &main_pids(&ctx).await?)
        .map_err(|e| ctx.fail(e))?;

    // A rolling restart brings every machine level: new processes, running the file's version.
    ctx.fleetctl_ok(1, &["restart", "--rolling", "--min-healthy=0s", UNIT]).await?;
    let restarted = main_pids(&ctx).await?;
    for slot in SLOTS {
        ctx.ensure(restarted[&slot] != before[&slot], || {
            format!("m{slot}: MainPID {} unchanged after restart --rolling", before[&slot])
        })?;
    }
    let what = "every machine to list running-hash = hash (v2) after restart --rolling";
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

// ---- Rolling replace and restart, driven by the cluster ----

const DB: &str = "db-rolling.service";
const LOG: &str = "/run/db-rolling.log";

/// A global unit whose hooks log `<hook> <version> <ns since epoch>` to [`LOG`] in its machine; `exit_after`
/// makes the service exit with an error that many seconds after it started.
fn db_unit(version: &str, exit_after: Option<u32>) -> String {
    let log = |hook: &str| format!("/bin/sh -c 'echo {hook} {version} $(date +%%s%%N) >> {LOG}'");
    let main = match exit_after {
        Some(s) => format!("/bin/sh -c 'sleep {s}; exit 1'"),
        None => "/bin/sh -c 'while true; do sleep 1; done'".to_string(),
    };
    format!(
        "[Unit]\nDescription=db {version}\n\n[Service]\nExecStartPre={}\nExecStart={main}\nExecStopPost={}\n\n[X-Fleet]\nGlobal=true\n",
        log("start-pre"),
        log("stop-post")
    )
}

/// The hook lines of machine `slot`: (hook, version, ns).
async fn hook_log(ctx: &Ctx, slot: usize) -> Result<Vec<(String, String, u128)>, String> {
    let out = ctx.exec(slot, &["cat", LOG]).await?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [hook, version, ns] => Some((hook.to_string(), version.to_string(), ns.parse().ok()?)),
            _ => None,
        })
        .collect())
}

fn count(log: &[(String, String, u128)], hook: &str, version: &str) -> usize {
    log.iter().filter(|(h, v, _)| h == hook && v == version).count()
}

/// On every machine the old version's ExecStopPost ran exactly once and finished before the new version's
/// ExecStartPre, which also ran exactly once.
async fn expect_each_machine_changed_once_in_order(ctx: &Ctx, slots: &[usize], old: &str, new: &str) -> Outcome {
    for &slot in slots {
        let log = hook_log(ctx, slot).await?;
        let stop = log.iter().find(|(h, v, _)| h == "stop-post" && v == old).map(|l| l.2);
        let start = log.iter().find(|(h, v, _)| h == "start-pre" && v == new).map(|l| l.2);
        let ok = count(&log, "stop-post", old) == 1
            && count(&log, "start-pre", new) == 1
            && matches!((stop, start), (Some(s), Some(n)) if s < n);
        ctx.ensure(ok, || {
            format!(
                "m{slot}: expected {old}'s ExecStopPost once, then {new}'s ExecStartPre once, in that order; hook log: {log:?}"
            )
        })?;
    }
    Ok(())
}

/// Starts a sampler inside each machine: every 100 ms a line `<ns> <ActiveState>` of [`DB`] to /run/samples.
async fn start_samplers(ctx: &Ctx, slots: &[usize]) -> Outcome {
    let script = format!(
        "nohup sh -c 'while [ ! -e /run/samples.stop ]; do echo $(date +%s%N) $(systemctl is-active {DB}); sleep 0.1; done' >/run/samples 2>/dev/null &"
    );
    for &slot in slots {
        ctx.exec_ok(slot, &["sh", "-c", &script]).await?;
    }
    Ok(())
}

/// Stops the samplers and returns, per slot, the samples (ns, active).
async fn stop_samplers(ctx: &Ctx, slots: &[usize]) -> Result<BTreeMap<usize, Vec<(u128, bool)>>, String> {
    let mut all = BTreeMap::new();
    for &slot in slots {
        ctx.exec_ok(slot, &["touch", "/run/samples.stop"]).await?;
    }
    for &slot in slots {
        let out = ctx.exec_ok(slot, &["cat", "/run/samples"]).await?;
        let samples: Vec<(u128, bool)> = out
            .stdout
            .lines()
            .filter_map(|l| {
                let (ns, state) = l.split_once(' ')?;
                Some((ns.parse().ok()?, state.trim() == "active"))
            })
            .collect();
        all.insert(slot, samples);
    }
    Ok(all)
}

/// From the samples of every machine: the most machines seen without an active copy at the same time (each
/// machine's latest sample at every sample instant), and the longest gap between two samples of one machine (ms).
/// A machine's own change can be shorter than the sampling period, so whether a machine was restarted at all is
/// proven by its hook log, not by a sample.
fn unavailability(samples: &BTreeMap<usize, Vec<(u128, bool)>>) -> (usize, u128) {
    let mut instants: Vec<u128> = samples.values().flatten().map(|(t, _)| *t).collect();
    instants.sort_unstable();
    let mut worst = 0;
    for t in instants {
        let down = samples
            .values()
            .filter(|s| s.iter().take_while(|(at, _)| *at <= t).last().is_some_and(|(_, active)| !active))
            .count();
        worst = worst.max(down);
    }
    let gap = samples.values().flat_map(|s| s.windows(2).map(|w| (w[1].0 - w[0].0) / 1_000_000)).max().unwrap_or(0);
    (worst, gap)
}

/// Which version of [`DB`] each machine runs now (its Description), with its ActiveState.
async fn running_versions(ctx: &Ctx, slots: &[usize]) -> Result<BTreeMap<usize, (String, String)>, String> {
    let mut out = BTreeMap::new();
    for &slot in slots {
        let p = ctx.show(slot, DB, &["Description", "ActiveState"]).await?;
        out.insert(
            slot,
            (p.get("Description").cloned().unwrap_or_default(), p.get("ActiveState").cloned().unwrap_or_default()),
        );
    }
    Ok(out)
}

async fn start_v1(ctx: &Ctx, dir: &TempDir, slots: &[usize]) -> Result<String, String> {
    let path = dir.write(DB, &db_unit("v1", None))?;
    ctx.fleetctl_ok(1, &["start", &path]).await?;
    for &slot in slots {
        ctx.wait_systemd(slot, DB, "ActiveState", "active").await?;
    }
    Ok(path)
}

/// A rolling replace of a global unit on 3 machines: sampled from inside every machine every 100 ms, at most one
/// machine is ever without an active copy; on each, the old stop hooks finish before the new start hooks; the
/// command returns only once every machine runs the new version.
pub async fn rolling_replace_keeps_the_others_serving(ctx: Ctx) -> Outcome {
    let slots = [1, 2, 3];
    let dir = TempDir::new()?;
    let path = start_v1(&ctx, &dir, &slots).await?;
    dir.write(DB, &db_unit("v2", None))?;
    start_samplers(&ctx, &slots).await?;
    let out =
        ctx.fleetctl(1, &["start", "--replace", "--rolling", "--max-unavailable=1", "--min-healthy=1s", &path]).await?;
    let after = running_versions(&ctx, &slots).await?;
    let samples = stop_samplers(&ctx, &slots).await?;
    ctx.ensure(out.success(), || format!("the rolling replace failed: {}", out.describe()))?;
    ctx.ensure(after.values().all(|(d, a)| d == "db v2" && a == "active"), || {
        format!("right after the rolling replace returned, expected every machine active on v2; observed {after:?}")
    })?;
    let (worst, gap) = unavailability(&samples);
    ctx.ensure(worst <= 1, || {
        format!("max-unavailable=1 but {worst} machines were without an active copy at the same time")
    })?;
    ctx.ensure(gap <= 1_000, || format!("the samplers stalled ({gap} ms between two samples): no proof"))?;
    expect_each_machine_changed_once_in_order(&ctx, &slots, "v1", "v2").await?;
    // A change can be shorter than the sampling period: the hook logs (one host clock) bound each machine's
    // downtime from below by [v1's ExecStopPost, v2's ExecStartPre]; with max-unavailable=1 no two may overlap.
    let mut down: Vec<(u128, u128, usize)> = Vec::new();
    for &slot in &slots {
        let log = hook_log(&ctx, slot).await?;
        let at = |hook: &str, v: &str| log.iter().find(|(h, ver, _)| h == hook && ver == v).map(|l| l.2);
        if let (Some(stop), Some(start)) = (at("stop-post", "v1"), at("start-pre", "v2")) {
            down.push((stop, start, slot));
        }
    }
    down.sort_unstable();
    for pair in down.windows(2) {
        let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
        ctx.ensure(start >= end, || {
            format!(
                "max-unavailable=1 but m{a} and m{b} were down at the same time: m{b}'s old version stopped {} ms \
                 before m{a}'s new version started (hook logs: {down:?})",
                (end - start) / 1_000_000
            )
        })?;
    }
    Ok(())
}

/// A new version that fails (exits after 2 s) pauses the rollout after the first machine, the others keep the
/// old version and their processes, and `rollout-status` names the machine and why; with
/// `--on-failure=rollback` the first machine returns to the old version too.
pub async fn failing_version_pauses_or_rolls_back(ctx: Ctx) -> Outcome {
    let slots = [1, 2, 3];
    for (policy, code) in [("pause", 2), ("rollback", 3)] {
        let dir = TempDir::new()?;
        let path = start_v1(&ctx, &dir, &slots).await?;
        let before = running_versions(&ctx, &slots).await?;
        let pids: BTreeMap<usize, String> = {
            let mut p = BTreeMap::new();
            for slot in slots {
                p.insert(slot, ctx.show(slot, DB, &["MainPID"]).await?.remove("MainPID").unwrap_or_default());
            }
            p
        };
        dir.write(DB, &db_unit("v2", Some(2)))?;
        let out = ctx
            .fleetctl(
                1,
                &[
                    "start",
                    "--replace",
                    "--rolling",
                    "--min-healthy=6s",
                    "--health-timeout=60s",
                    &format!("--on-failure={policy}"),
                    &path,
                ],
            )
            .await?;
        ctx.ensure(out.status == code, || {
            format!("--on-failure={policy}: expected exit status {code}, got {}", out.describe())
        })?;
        let status = ctx.fleetctl(1, &["rollout-status", "--no-block", DB]).await?;
        let text = format!("{}{}", status.stdout, status.stderr);
        ctx.ensure(text.contains("stopped being active") && text.contains("failed"), || {
            format!("rollout-status must say which machine failed and why: {}", status.describe())
        })?;
        let now = running_versions(&ctx, &slots).await?;
        // Machines are taken in machine-ID order: the first one is the smallest ID.
        let mut by_id: Vec<(String, usize)> = Vec::new();
        for slot in slots {
            by_id.push((ctx.id(slot)?, slot));
        }
        by_id.sort();
        let first = by_id[0].1;
        for &slot in &slots {
            if slot == first && policy == "pause" {
                continue;
            }
            let want = ("db v1".to_string(), "active".to_string());
            if slot == first {
                // Rolled back: v1 again, active (a new process).
                let (slot_ctx, want) = (&ctx, &want);
                ctx.wait_for(&format!("m{slot} back on v1 after the rollback"), || async move {
                    match running_versions(slot_ctx, &[slot]).await {
                        Ok(v) if v[&slot] == *want => Check::Ready(()),
                        Ok(v) => Check::NotYet(format!("{:?}", v[&slot])),
                        Err(e) => Check::NotYet(e),
                    }
                })
                .await?;
                continue;
            }
            ctx.ensure(now[&slot] == before[&slot], || {
                format!("--on-failure={policy}: m{slot} must keep v1 active; observed {:?}", now[&slot])
            })?;
            let pid = ctx.show(slot, DB, &["MainPID"]).await?.remove("MainPID").unwrap_or_default();
            ctx.ensure(pid == pids[&slot], || {
                format!("--on-failure={policy}: m{slot} was restarted (MainPID {} -> {pid})", pids[&slot])
            })?;
        }
        // Next round from a clean slate.
        if policy == "pause" {
            ctx.fleetctl_ok(1, &["rollout-abort", DB]).await?;
        }
        ctx.fleetctl_ok(1, &["destroy", DB]).await?;
        for slot in slots {
            ctx.exec_ok(slot, &["rm", "-f", LOG]).await?;
            ctx.wait_systemd(slot, DB, "ActiveState", "inactive").await?;
        }
    }
    Ok(())
}

/// A new version that exits after 1 s and is restarted by systemd at once (`Restart=always`, `RestartSec=100ms`):
/// active most of the time, but its restart counter moves within `--min-healthy`, so the rollout pauses after the
/// first machine (in machine-ID order) and `rollout-status` names that machine and says the restart counter moved;
/// the other machines keep v1 and their processes.
pub async fn version_restarted_by_systemd_pauses_the_rollout(ctx: Ctx) -> Outcome {
    let slots = [1, 2, 3];
    let dir = TempDir::new()?;
    let path = start_v1(&ctx, &dir, &slots).await?;
    let mut pids = BTreeMap::new();
    for slot in slots {
        pids.insert(slot, ctx.show(slot, DB, &["MainPID"]).await?.remove("MainPID").unwrap_or_default());
    }
    let crashing = db_unit("v2", Some(1)).replace("ExecStopPost=", "Restart=always\nRestartSec=100ms\nExecStopPost=");
    dir.write(DB, &crashing)?;
    let out = ctx
        .fleetctl(1, &["start", "--replace", "--rolling", "--min-healthy=8s", "--health-timeout=60s", &path])
        .await?;
    ctx.ensure(out.status == 2, || format!("expected exit status 2 (paused), got {}", out.describe()))?;
    let mut by_id: Vec<(String, usize)> = Vec::new();
    for slot in slots {
        by_id.push((ctx.id(slot)?, slot));
    }
    by_id.sort();
    let (first_id, first) = (by_id[0].0.clone(), by_id[0].1);
    let status = ctx.fleetctl(1, &["rollout-status", "--no-block", DB]).await?;
    let text = format!("{}{}", status.stdout, status.stderr);
    ctx.ensure(text.contains(&first_id[..8]) && text.contains("the restart counter moved"), || {
        format!(
            "rollout-status must name m{first} ({}) and say its restart counter moved: {}",
            &first_id[..8],
            status.describe()
        )
    })?;
    let restarts = ctx.show(first, DB, &["NRestarts", "Description"]).await?;
    let counter: u32 = restarts.get("NRestarts").and_then(|n| n.parse().ok()).unwrap_or(0);
    ctx.ensure(restarts.get("Description").map(String::as_str) == Some("db v2") && counter >= 1, || {
        format!(
            "m{first} (the failed machine) must keep v2, restarted by systemd, after a pause; observed {restarts:?}"
        )
    })?;
    for &slot in slots.iter().filter(|s| **s != first) {
        let now = ctx.show(slot, DB, &["MainPID", "Description", "ActiveState"]).await?;
        let seen = |k: &str| now.get(k).cloned().unwrap_or_default();
        ctx.ensure(
            seen("Description") == "db v1" && seen("ActiveState") == "active" && seen("MainPID") == pids[&slot],
            || format!("m{slot} must keep v1 active with MainPID {}; observed {now:?}", pids[&slot]),
        )?;
    }
    ctx.fleetctl_ok(1, &["rollout-abort", DB]).await?;
    ctx.fleetctl_ok(1, &["destroy", DB]).await?;
    for slot in slots {
        ctx.exec_ok(slot, &["rm", "-f", LOG]).await?;
    }
    Ok(())
}

/// The rollout lives in the cluster: fleetctl killed after the first machine, then etcd stopped and started, and
/// the rollout still completes, each machine changed exactly once, and `rollout-status` reports it done.
pub async fn rolling_replace_survives_killed_client_and_etcd_restart(ctx: Ctx) -> Outcome {
    let slots = [1, 2, 3];
    let dir = TempDir::new()?;
    let path = start_v1(&ctx, &dir, &slots).await?;
    dir.write(DB, &db_unit("v2", None))?;
    let c = ctx.cluster();
    let m = c.machine(1).map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(&c.binaries().fleetctl)
        .arg(format!("--endpoint={}", m.endpoint()))
        .args(["start", "--replace", "--rolling", "--min-healthy=3s", &path])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn fleetctl: {e}"))?;
    let cref = &ctx;
    ctx.wait_for("the first machine to run v2", || async move {
        match running_versions(cref, &[1, 2, 3]).await {
            Ok(v) if v.values().any(|(d, a)| d == "db v2" && a == "active") => Check::Ready(()),
            Ok(v) => Check::NotYet(format!("{v:?}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await?;
    child.kill().await.map_err(|e| format!("kill fleetctl: {e}"))?;
    c.stop_etcd().await.map_err(|e| e.to_string())?;
    ctx.hold(std::time::Duration::from_secs(3)).await;
    c.start_etcd().await.map_err(|e| e.to_string())?;
    ctx.wait_api(1).await?;
    let status = ctx.fleetctl(1, &["rollout-status", DB]).await?;
    ctx.ensure(status.success(), || format!("rollout-status after the faults: {}", status.describe()))?;
    let after = running_versions(&ctx, &slots).await?;
    ctx.ensure(after.values().all(|(d, a)| d == "db v2" && a == "active"), || {
        format!("expected every machine active on v2 once rollout-status returned; observed {after:?}")
    })?;
    expect_each_machine_changed_once_in_order(&ctx, &slots, "v1", "v2").await
}

/// The machine whose fleetd leads the engine: the one whose fleet journal last said it acquired engine
/// leadership (and did not lose or release it since).
async fn engine_leader(ctx: &Ctx, slots: &[usize]) -> Result<usize, String> {
    let mut seen = Vec::new();
    for &slot in slots {
        let journal = ctx.journal_fleet(slot).await?;
        let last = journal.lines().rev().find(|l| l.to_lowercase().contains("engine leadership")).unwrap_or("");
        if last.to_lowercase().contains("acquired") {
            return Ok(slot);
        }
        seen.push(format!("m{slot}: {last:?}"));
    }
    Err(ctx.fail(format!("no machine's fleet journal says it holds engine leadership: {}", seen.join("; "))))
}

/// The engine leader's fleetd restarted (`systemctl restart fleet.service`) in the middle of a rolling replace:
/// the rollout still completes, and each machine's unit changed exactly once (hooks counted in systemd).
pub async fn rolling_replace_survives_restart_of_the_engine_leaders_fleetd(ctx: Ctx) -> Outcome {
    let slots = [1, 2, 3];
    let dir = TempDir::new()?;
    let path = start_v1(&ctx, &dir, &slots).await?;
    dir.write(DB, &db_unit("v2", None))?;
    ctx.fleetctl_ok(1, &["start", "--replace", "--rolling", "--no-block", "--min-healthy=3s", &path]).await?;
    let cref = &ctx;
    ctx.wait_for("the first machine to run v2", || async move {
        match running_versions(cref, &slots).await {
            Ok(v) if v.values().any(|(d, a)| d == "db v2" && a == "active") => Check::Ready(()),
            Ok(v) => Check::NotYet(format!("{v:?}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await?;
    let leader = engine_leader(&ctx, &slots).await?;
    ctx.exec_ok(leader, &["systemctl", "restart", "fleet.service"]).await?;
    let during = running_versions(&ctx, &slots).await?;
    ctx.ensure(during.values().any(|(d, _)| d == "db v1"), || {
        format!("the rollout must still be under way when m{leader}'s fleetd has restarted (no proof otherwise); observed {during:?}")
    })?;
    ctx.wait_api(leader).await?;
    let status = ctx.fleetctl(leader, &["rollout-status", DB]).await?;
    ctx.ensure(status.success(), || {
        format!("rollout-status after the engine leader's fleetd (m{leader}) restarted: {}", status.describe())
    })?;
    let after = running_versions(&ctx, &slots).await?;
    ctx.ensure(after.values().all(|(d, a)| d == "db v2" && a == "active"), || {
        format!("expected every machine active on v2 once rollout-status returned; observed {after:?}")
    })?;
    expect_each_machine_changed_once_in_order(&ctx, &slots, "v1", "v2").await
}

/// `history` lists a unit's versions newest first, and `rollback` returns every machine to the previous one, the
/// new version's stop hooks finishing before the old version's start hooks on each.
pub async fn history_and_rollback_restore_the_previous_version(ctx: Ctx) -> Outcome {
    let slots = [1, 2, 3];
    let dir = TempDir::new()?;
    let path = start_v1(&ctx, &dir, &slots).await?;
    let v1 = ctx.fleetctl_ok(1, &["cat", DB]).await?.stdout;
    dir.write(DB, &db_unit("v2", None))?;
    ctx.fleetctl_ok(1, &["start", "--replace", "--rolling", "--min-healthy=0s", &path]).await?;
    let history = ctx.fleetctl_ok(1, &["history", "--no-legend", "--full", DB]).await?;
    let hashes: Vec<String> =
        history.stdout.lines().filter_map(|l| l.split_whitespace().next().map(str::to_string)).collect();
    ctx.ensure(
        hashes.len() == 2 && history.stdout.lines().next().is_some_and(|l| l.trim_end().ends_with('*')),
        || format!("history must list v2 (current, marked *) then v1: {}", history.describe()),
    )?;
    let out = ctx.fleetctl(1, &["rollback", DB]).await?;
    ctx.ensure(out.success(), || format!("rollback failed: {}", out.describe()))?;
    let after = running_versions(&ctx, &slots).await?;
    ctx.ensure(after.values().all(|(d, a)| d == "db v1" && a == "active"), || {
        format!("right after rollback returned, expected every machine active on v1; observed {after:?}")
    })?;
    ensure_eq(
        "fleetctl cat after the rollback (the registry's version)",
        v1.as_str(),
        ctx.fleetctl_ok(1, &["cat", DB]).await?.stdout.as_str(),
    )
    .map_err(|e| ctx.fail(e))?;
    for &slot in &slots {
        let log = hook_log(&ctx, slot).await?;
        let stop_v2 = log.iter().find(|(h, v, _)| h == "stop-post" && v == "v2").map(|l| l.2);
        let start_v1_again = log.iter().filter(|(h, v, _)| h == "start-pre" && v == "v1").nth(1).map(|l| l.2);
        ctx.ensure(matches!((stop_v2, start_v1_again), (Some(s), Some(n)) if s < n), || {
            format!("m{slot}: v2's ExecStopPost must finish before v1's ExecStartPre runs again; hook log: {log:?}")
        })?;
    }
    Ok(())
}

/// A rolling replace of a global unit on a 5-machine cluster with `--max-unavailable=2`, while a fifth machine joins
/// mid-rollout: sampled inside every machine every 100 ms, at most two of the four original machines are ever
/// without an active copy; each of them changes once, old stop hooks before new start hooks; the machine that joins
/// runs only the target version (v1 never starts there); the command returns once all five run v2.
pub async fn rolling_replace_on_five_machines_with_a_joining_machine(ctx: Ctx) -> Outcome {
    let holders = [1, 2, 3, 4];
    let joiner = 5;
    // The fifth machine is out of the cluster until the rollout runs (stopping fleet there purges nothing yet).
    ctx.exec_ok(joiner, &["systemctl", "stop", "fleet.service"]).await?;
    ctx.wait_for_n_machines(1, 4).await?;
    let dir = TempDir::new()?;
    let path = start_v1(&ctx, &dir, &holders).await?;
    dir.write(DB, &db_unit("v2", None))?;
    start_samplers(&ctx, &holders).await?;
    let cref = &ctx;
    let args = ["start", "--replace", "--rolling", "--max-unavailable=2", "--min-healthy=2s", &path];
    let rolling = ctx.fleetctl(1, &args);
    let join = async move {
        cref.wait_for("the first machine to run v2", || async move {
            match running_versions(cref, &holders).await {
                Ok(v) if v.values().any(|(d, a)| d == "db v2" && a == "active") => Check::Ready(v),
                Ok(v) => Check::NotYet(format!("{v:?}")),
                Err(e) => Check::NotYet(e),
            }
        })
        .await?;
        cref.exec_ok(joiner, &["systemctl", "start", "fleet.service"]).await?;
        // Whether the rollout was still under way when the machine joined: else this spec proves nothing about joins.
        running_versions(cref, &holders).await
    };
    let (out, when_joined) = tokio::join!(rolling, join);
    let (out, when_joined) = (out?, when_joined?);
    let all: Vec<usize> = holders.iter().copied().chain([joiner]).collect();
    let after = running_versions(&ctx, &all).await;
    let samples = stop_samplers(&ctx, &holders).await?;
    ctx.ensure(out.success(), || format!("the rolling replace failed: {}", out.describe()))?;
    ctx.ensure(when_joined.values().any(|(d, _)| d == "db v1"), || {
        format!("m{joiner} must join while the rollout is under way (no proof otherwise); at its join: {when_joined:?}")
    })?;
    let after = after?;
    let (worst, gap) = unavailability(&samples);
    ctx.ensure(worst <= 2, || {
        format!("max-unavailable=2 but {worst} machines were without an active copy at the same time")
    })?;
    ctx.ensure(gap <= 1_000, || format!("the samplers stalled ({gap} ms between two samples): no proof"))?;
    expect_each_machine_changed_once_in_order(&ctx, &holders, "v1", "v2").await?;
    // The joining machine may still be starting v2 when the command returns (it is in no step of the rollout).
    ctx.wait_systemd(joiner, DB, "ActiveState", "active").await?;
    let joined = running_versions(&ctx, &[joiner]).await?;
    let log = hook_log(&ctx, joiner).await?;
    ctx.ensure(
        joined.get(&joiner).is_some_and(|(d, _)| d == "db v2")
            && count(&log, "start-pre", "v1") == 0
            && count(&log, "start-pre", "v2") == 1,
        || {
            format!(
                "m{joiner} joined mid-rollout and must run only v2, started once; runs {joined:?}, hook log {log:?}"
            )
        },
    )?;
    ctx.ensure(after.iter().filter(|(s, _)| **s != joiner).all(|(_, (d, a))| d == "db v2" && a == "active"), || {
        format!("right after the rolling replace returned, expected m1..m4 active on v2; observed {after:?}")
    })
}

//! Rollouts a database cluster can trust (issue 34): health checks that gate every step, a budget that counts every
//! machine not serving, undo within that budget, canaries, order, a progress deadline, and a policy in the unit.
//!
//! Every spec runs the database-like fixture `fixtures/units/safe-db.service` (a global unit that "syncs" for 3 s
//! after each start before its `HealthCheck=` passes, and whose stop takes 2 s) on 3 machines, and observes inside
//! every machine: `systemctl show` (version in `Description`, `ActiveState`, `MainPID`), the unit's hook log
//! (`<event> <version> <ns>`: `start-pre`, `ready`, `stop`, `stop-post`) and samplers that record every 100 ms
//! whether the unit is active and whether its own health check command passes. A machine *serves* when it is
//! active and its check passes.
//!
//! Break-once evidence (each spec was seen failing against a scratch edit of `crates/`, reverted after) is in
//! the doc of each spec. The breaks of the pause, rollback, canary, budget and policy (server) specs were run
//! before health checks reached main, with a scratch copy of the fixture without `HealthCheck=` and without the
//! sync (`FLEET_FIXTURES_DIR`); the others with the health checks of branch `health` merged.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fixtures::{self, TempDir};
use crate::{Ctx, Outcome};
use fleet_harness::wait::Check;

/// The fixture's unit name (and the prefix every name of this area starts with).
pub const DB: &str = "safe-db.service";
/// Its hook log in each machine.
const LOG: &str = "/run/safe-db.log";
/// Its readiness marker (what its health check tests).
const READY: &str = "/run/safe-db.ready";
/// A machine where this file exists refuses to start a version made by [`failing_where_marked`].
const BROKEN: &str = "/etc/safe-db.broken";
/// The samplers' output and stop marker in each machine.
const SAMPLES: &str = "/run/safe-db.samples";
const SAMPLES_STOP: &str = "/run/safe-db.samples.stop";
/// How long the fixture syncs after each start before it is ready.
const SYNC: Duration = Duration::from_secs(3);
const SLOTS: [usize; 3] = [1, 2, 3];

// ---- The fixture and its versions ----

/// The fixture's text (version `v1`, with its health check and its update policy).
fn fixture() -> Result<String, String> {
    let text = fixtures::read(DB)?;
    for needle in ["Description=safe-db v1", "sleep 3;", "HealthCheck=", "UpdatePolicy=rolling", "\n[Service]\n"] {
        if !text.contains(needle) {
            return Err(format!("fixture {DB} no longer contains {needle:?}; this area's variants rely on it"));
        }
    }
    Ok(text)
}

/// The fixture as version `v` (every `v1` changed).
fn version(text: &str, v: &str) -> String {
    text.replace("v1", v)
}

/// Without its `[X-Fleet] Update*=` policy: a plain replace replaces everywhere at once, flags say how to roll.
fn without_policy(text: &str) -> String {
    text.lines().filter(|l| !l.starts_with("Update")).map(|l| format!("{l}\n")).collect()
}

/// A version that cannot start (its first `ExecStartPre=` fails) on a machine holding [`BROKEN`].
fn failing_where_marked(text: &str) -> String {
    let gate = format!(
        "ExecStartPre=/bin/sh -c 'if [ -e {BROKEN} ]; then echo safe-db: this machine is marked broken >&2; exit 1; fi'\n"
    );
    text.replacen("\n[Service]\n", &format!("\n[Service]\n{gate}"), 1)
}

/// A version that never becomes ready: it starts (active) but never finishes syncing, so its check never passes.
fn never_ready(text: &str) -> String {
    text.replace("sleep 3;", "sleep infinity;")
}

/// The health check command the fixture declares (the samplers run exactly it).
fn check_command(text: &str) -> String {
    text.lines().find_map(|l| l.strip_prefix("HealthCheck=")).unwrap_or("false").trim().to_string()
}

// ---- Observations ----

/// What one machine runs: the version (`Description`), `ActiveState`, `MainPID`, and whether its check passes now.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    version: String,
    active: String,
    pid: String,
    ready: bool,
}

impl Seen {
    fn serves(&self, v: &str) -> bool {
        self.version == format!("safe-db {v}") && self.active == "active" && self.ready
    }
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ready = if self.ready { "check passes" } else { "check fails" };
        write!(f, "{:?} {} pid {} {ready}", self.version, self.active, self.pid)
    }
}

fn describe(seen: &BTreeMap<usize, Seen>) -> String {
    seen.iter().map(|(s, x)| format!("m{s}: {x}")).collect::<Vec<_>>().join("; ")
}

async fn seen(ctx: &Ctx, slots: &[usize]) -> Result<BTreeMap<usize, Seen>, String> {
    let mut out = BTreeMap::new();
    for &slot in slots {
        let p = ctx.show(slot, DB, &["Description", "ActiveState", "MainPID"]).await?;
        let ready = ctx.exec(slot, &["test", "-e", READY]).await?.success();
        let get = |k: &str| p.get(k).cloned().unwrap_or_default();
        out.insert(slot, Seen { version: get("Description"), active: get("ActiveState"), pid: get("MainPID"), ready });
    }
    Ok(out)
}

/// Waits until every slot in `slots` serves version `v`; the timeout shows what each machine ran last.
async fn wait_serving(ctx: &Ctx, slots: &[usize], v: &str, secs: u64) -> Result<BTreeMap<usize, Seen>, String> {
    let what = format!("{DB} to serve {v} (active, check passing) on m{slots:?}");
    ctx.wait_for_secs(secs, &what, || async move {
        match seen(ctx, slots).await {
            Ok(s) if s.values().all(|x| x.serves(v)) => Check::Ready(s),
            Ok(s) => Check::NotYet(describe(&s)),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

/// The slots in the default rollout order (machine-ID order).
fn id_order(ctx: &Ctx) -> Result<Vec<usize>, String> {
    let mut by_id: Vec<(String, usize)> = Vec::new();
    for slot in SLOTS {
        by_id.push((ctx.id(slot)?, slot));
    }
    by_id.sort();
    Ok(by_id.into_iter().map(|(_, s)| s).collect())
}

fn short_id(ctx: &Ctx, slot: usize) -> Result<String, String> {
    Ok(ctx.id(slot)?.chars().take(8).collect())
}

/// One line of a hook log: (event, version, ns since the epoch).
type Hook = (String, String, u128);

async fn hook_log(ctx: &Ctx, slot: usize) -> Result<Vec<Hook>, String> {
    let out = ctx.exec(slot, &["cat", LOG]).await?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [event, version, ns] => Some((event.to_string(), version.to_string(), ns.parse().ok()?)),
            _ => None,
        })
        .collect())
}

async fn hook_logs(ctx: &Ctx) -> Result<BTreeMap<usize, Vec<Hook>>, String> {
    let mut all = BTreeMap::new();
    for slot in SLOTS {
        all.insert(slot, hook_log(ctx, slot).await?);
    }
    Ok(all)
}

/// The `n`-th (0-based) time `event` of `version` was logged.
fn at(log: &[Hook], event: &str, version: &str, n: usize) -> Option<u128> {
    log.iter().filter(|(e, v, _)| e == event && v == version).nth(n).map(|h| h.2)
}

fn count(log: &[Hook], event: &str, version: &str) -> usize {
    log.iter().filter(|(e, v, _)| e == event && v == version).count()
}

fn render_logs(logs: &BTreeMap<usize, Vec<Hook>>) -> String {
    let first = logs.values().flatten().map(|h| h.2).min().unwrap_or(0);
    logs.iter()
        .map(|(slot, log)| {
            let events: Vec<String> =
                log.iter().map(|(e, v, ns)| format!("{e} {v} @{}ms", (ns - first) / 1_000_000)).collect();
            format!("m{slot}: [{}]", events.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Starts a sampler in each machine: every 100 ms a line `<ns> <ActiveState> <0|1>` (the last: whether the
/// fixture's own health check command passes) to [`SAMPLES`].
async fn start_samplers(ctx: &Ctx, check: &str) -> Outcome {
    let check = check.replace('\'', "'\\''");
    let script = format!(
        "rm -f {SAMPLES_STOP} {SAMPLES}; nohup sh -c 'while [ ! -e {SAMPLES_STOP} ]; do \
         if {check} >/dev/null 2>&1; then c=1; else c=0; fi; \
         echo $(date +%s%N) $(systemctl is-active {DB}) $c; sleep 0.1; done' >{SAMPLES} 2>/dev/null &"
    );
    for slot in SLOTS {
        ctx.exec_ok(slot, &["sh", "-c", &script]).await?;
    }
    Ok(())
}

/// One sample: (ns, active, check passes).
type Sample = (u128, bool, bool);

async fn stop_samplers(ctx: &Ctx) -> Result<BTreeMap<usize, Vec<Sample>>, String> {
    for slot in SLOTS {
        ctx.exec_ok(slot, &["touch", SAMPLES_STOP]).await?;
    }
    let mut all = BTreeMap::new();
    for slot in SLOTS {
        let out = ctx.exec_ok(slot, &["cat", SAMPLES]).await?;
        let samples = out
            .stdout
            .lines()
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [ns, state, check] => Some((ns.parse().ok()?, state == "active", check == "1")),
                _ => None,
            })
            .collect();
        all.insert(slot, samples);
    }
    Ok(all)
}

/// The most machines that did not serve at the same instant (each machine's latest sample at every sample
/// instant; serving = `serving(sample)`), when it happened (ms after the first sample) and which; and the longest
/// gap between two samples of one machine (ms).
fn worst(samples: &BTreeMap<usize, Vec<Sample>>, serving: impl Fn(&Sample) -> bool) -> (usize, u128, Vec<usize>, u128) {
    let mut instants: Vec<u128> = samples.values().flatten().map(|s| s.0).collect();
    instants.sort_unstable();
    let first = instants.first().copied().unwrap_or(0);
    let (mut most, mut when, mut which) = (0, 0, Vec::new());
    for t in instants {
        let down: Vec<usize> = samples
            .iter()
            .filter(|(_, s)| s.iter().take_while(|x| x.0 <= t).last().is_some_and(|x| !serving(x)))
            .map(|(slot, _)| *slot)
            .collect();
        if down.len() > most {
            (most, when, which) = (down.len(), (t - first) / 1_000_000, down);
        }
    }
    let gap = samples.values().flat_map(|s| s.windows(2).map(|w| (w[1].0 - w[0].0) / 1_000_000)).max().unwrap_or(0);
    (most, when, which, gap)
}

/// Requires that at most `limit` machines were ever without a serving copy (active and check passing) at once,
/// and that the samplers kept sampling (a stalled sampler proves nothing).
fn expect_at_most_down(ctx: &Ctx, samples: &BTreeMap<usize, Vec<Sample>>, limit: usize, when: &str) -> Outcome {
    let (most, at_ms, which, gap) = worst(samples, |s| s.1 && s.2);
    ctx.ensure(samples.values().all(|s| s.len() >= 10), || {
        format!("{when}: the samplers recorded too little to prove anything: {:?}", samples.values().map(Vec::len))
    })?;
    ctx.ensure(gap <= 1_000, || format!("{when}: the samplers stalled ({gap} ms between two samples): no proof"))?;
    ctx.ensure(most <= limit, || {
        format!(
            "{when}: at most {limit} machine(s) may be without a serving copy (active, check passing) at once, but \
             {most} were {at_ms} ms after sampling began: m{which:?}"
        )
    })
}

/// Starts v1 via `slot` and waits until every machine serves it and fleet publishes it `healthy` everywhere (a
/// machine whose check has not run yet counts as down, and a rollout would change it at once, out of turn).
async fn write_and_start_v1(ctx: &Ctx, dir: &TempDir, text: &str, slot: usize) -> Result<String, String> {
    let path = dir.write(DB, text)?;
    ctx.fleetctl_ok(slot, &["start", &path]).await?;
    wait_serving(ctx, &SLOTS, "v1", 60).await?;
    wait_published_healthy(ctx, slot).await?;
    Ok(path)
}

/// Waits until `list-units --fields=unit,machine,active,health` via `slot` shows the unit active and `healthy` on
/// every machine.
async fn wait_published_healthy(ctx: &Ctx, slot: usize) -> Outcome {
    let fields = ["unit", "machine", "active", "health"];
    ctx.wait_table(slot, "list-units", &fields, &format!("{DB} active and healthy on 3 machines"), |rows| {
        let mine: Vec<String> = rows
            .iter()
            .filter(|r| r.get("unit") == DB)
            .map(|r| format!("{} {} {}", r.get("machine"), r.get("active"), r.get("health")))
            .collect();
        let healthy = mine.iter().filter(|r| r.ends_with(" active healthy")).count();
        if healthy == SLOTS.len() { Ok(()) } else { Err(mine.join(", ")) }
    })
    .await
}

/// The steps of the newest rollout (`GET /fleet/v1/rollouts`) in order, as `m<slot>` (for failure messages).
async fn newest_rollout_steps(ctx: &Ctx) -> Result<String, String> {
    let r = ctx.http(1, "GET", "/fleet/v1/rollouts", None).await?;
    let steps = r.json()["rollouts"][0]["steps"].as_array().cloned().ok_or_else(|| r.describe())?;
    Ok(steps
        .iter()
        .map(|s| {
            let id = s["machine"].as_str().unwrap_or_default();
            ctx.slot_of(id).map_or_else(|| id.to_string(), |slot| format!("m{slot}"))
        })
        .collect::<Vec<_>>()
        .join(", "))
}

/// A rolling fleetctl command via `slot` that must return within `limit` (it blocks until its rollout ends); on
/// timeout it is killed and the failure says what `rollout-status --no-block` showed then.
async fn fleetctl_within(
    ctx: &Ctx,
    slot: usize,
    args: &[&str],
    limit: Duration,
) -> Result<fleet_harness::Output, String> {
    match tokio::time::timeout(limit, ctx.fleetctl(slot, args)).await {
        Ok(out) => out,
        Err(_) => {
            let (code, status) = status_text(ctx, slot).await.unwrap_or_else(|e| (-1, e));
            Err(ctx.fail(format!(
                "`fleetctl {}` had not returned after {limit:?}; `rollout-status --no-block` then exited {code}: {status}",
                args.join(" ")
            )))
        }
    }
}

/// `rollout-status --no-block` via `slot`: exit status and stdout + stderr.
async fn status_text(ctx: &Ctx, slot: usize) -> Result<(i32, String), String> {
    let out = ctx.fleetctl(slot, &["rollout-status", "--no-block", DB]).await?;
    Ok((out.status, format!("{}{}", out.stdout, out.stderr)))
}

// ---- Specs ----

/// A new version that cannot start on the 2nd machine in rollout order, `--on-failure=pause`: the 1st machine ends
/// on v2 (serving), the 2nd on v2 failed, the 3rd untouched (v1, same MainPID, its old version never stopped);
/// exit 2 within seconds of the failure (`--health-timeout=60s` is not waited out), and `rollout-status` names
/// the failed machine.
///
/// Break-once: fail-fast disabled (`false &&` before `down && holds_new_version(..)` in `rollout::check_released`):
/// "the failed version must fail its step within seconds, not at --health-timeout=60s; the command took 63.1s".
pub async fn failing_second_machine_pauses_with_the_third_untouched(ctx: Ctx) -> Outcome {
    failing_second_machine(ctx, "pause").await
}

/// The same failure with `--on-failure=rollback`: exit 3, every machine back on v1 serving, the failed (already
/// down) machine undone first, and — sampled every 100 ms inside every machine, with a stop that takes 2 s — never
/// two machines without a serving copy at once, forward or back; the 3rd machine untouched throughout.
///
/// Break-once: undo without the budget (`limit = if undoing { 100 } else { .. }` in `rollout::release`):
/// "--max-unavailable=1, rolling forward and back: at most 1 machine(s) may be without a serving copy (active, check
/// passing) at once, but 2 were 6553 ms after sampling began: m[2, 3]".
pub async fn failing_second_machine_rolls_back_never_two_down(ctx: Ctx) -> Outcome {
    failing_second_machine(ctx, "rollback").await
}

async fn failing_second_machine(ctx: Ctx, policy: &str) -> Outcome {
    let text = without_policy(&fixture()?);
    let dir = TempDir::new()?;
    let path = write_and_start_v1(&ctx, &dir, &text, 1).await?;
    let order = id_order(&ctx)?;
    let (first, second, third) = (order[0], order[1], order[2]);
    ctx.exec_ok(second, &["touch", BROKEN]).await?;
    let before = seen(&ctx, &SLOTS).await?;
    dir.write(DB, &failing_where_marked(&version(&text, "v2")))?;
    start_samplers(&ctx, &check_command(&text)).await?;
    let t0 = Instant::now();
    let args = [
        "start",
        "--replace",
        "--rolling",
        "--max-unavailable=1",
        "--min-healthy=1s",
        "--health-timeout=60s",
        &format!("--on-failure={policy}"),
        &path,
    ];
    let out = fleetctl_within(&ctx, 1, &args, Duration::from_secs(100)).await?;
    let took = t0.elapsed();
    let after = seen(&ctx, &SLOTS).await?;
    let samples = stop_samplers(&ctx).await?;
    let logs = hook_logs(&ctx).await?;
    let code = if policy == "pause" { 2 } else { 3 };
    let observed = || format!("machines after it returned: {}; hook logs: {}", describe(&after), render_logs(&logs));
    ctx.ensure(out.status == code, || {
        format!("--on-failure={policy}: expected exit status {code}, got {}; {}", out.describe(), observed())
    })?;
    // Forward: the first machine's step (stop 2 s, sync 3 s, 1 s healthy), then the second's stop and failure:
    // ~10 s. A failure noticed only at --health-timeout=60s would take over a minute.
    ctx.ensure(took < Duration::from_secs(40), || {
        format!(
            "the failed version must fail its step within seconds, not at --health-timeout=60s; the command took {took:?}; {}",
            observed()
        )
    })?;
    let third_ok = after[&third] == before[&third] && count(&logs[&third], "stop", "v1") == 0;
    ctx.ensure(third_ok, || {
        format!(
            "m{third} (3rd in rollout order) must be untouched: v1 with MainPID {} and its v1 never stopped; {}",
            before[&third].pid,
            observed()
        )
    })?;
    let (status, status_out) = status_text(&ctx, 1).await?;
    if policy == "pause" {
        ctx.ensure(after[&first].serves("v2"), || {
            format!("m{first} (1st in rollout order) must serve v2 after the pause; {}", observed())
        })?;
        ctx.ensure(after[&second].version == "safe-db v2" && after[&second].active != "active", || {
            format!("m{second} (2nd, marked broken) must hold v2, not active, after the pause; {}", observed())
        })?;
        let named = status_out.contains(&short_id(&ctx, second)?) && status_out.contains("failed");
        ctx.ensure(status == 2 && named, || {
            format!(
                "rollout-status must exit 2 and name m{second} ({}) as failed; exit {status}: {status_out}",
                short_id(&ctx, second).unwrap_or_default()
            )
        })?;
        return Ok(());
    }
    ctx.ensure(after.values().all(|s| s.serves("v1")), || {
        format!("right after the rollback returned (exit 3), every machine must serve v1 again; {}", observed())
    })?;
    ctx.ensure(status == 3, || format!("rollout-status must exit 3 (rolled back); exit {status}: {status_out}"))?;
    expect_at_most_down(&ctx, &samples, 1, "--max-unavailable=1, rolling forward and back")?;
    // Undo order: the failed machine (already down) returns to v1 and is ready before the first machine's v2 stops.
    let second_back = at(&logs[&second], "ready", "v1", 1);
    let first_leaves = at(&logs[&first], "stop", "v2", 0);
    ctx.ensure(matches!((second_back, first_leaves), (Some(b), Some(l)) if b < l), || {
        format!(
            "undo must take the already-down m{second} back to v1 (ready again) before it stops v2 on m{first}; \
             hook logs: {}",
            render_logs(&logs)
        )
    })
}

/// A slow-sync version (ready 3 s after each start) rolled with `--max-unavailable=1 --min-healthy=1s`: sampled in
/// every machine, the number of machines whose check passes never drops below N−1; each machine stops its old
/// version only after the previous machine's new version is ready (so the rollout waits for the check, not for
/// `active`); the command takes at least the sync time per machine; afterwards `list-units --fields=...,health`
/// and `GET /fleet/v1/state` show every machine `healthy`.
///
/// Break-once: the check ignored for released steps (`let checked = false && ..` in `rollout::check_released`):
/// "the rolling replace failed: exit 2; ... paused: safe-db.service on 82c7c704: its health check failed 1 s after
/// its step was done" (the step was done on `active` while the copy still synced).
pub async fn slow_sync_keeps_all_but_one_check_passing(ctx: Ctx) -> Outcome {
    let text = without_policy(&fixture()?);
    let dir = TempDir::new()?;
    let path = write_and_start_v1(&ctx, &dir, &text, 1).await?;
    dir.write(DB, &version(&text, "v2"))?;
    start_samplers(&ctx, &check_command(&text)).await?;
    let t0 = Instant::now();
    let out =
        ctx.fleetctl(1, &["start", "--replace", "--rolling", "--max-unavailable=1", "--min-healthy=1s", &path]).await?;
    let took = t0.elapsed();
    let after = seen(&ctx, &SLOTS).await?;
    let samples = stop_samplers(&ctx).await?;
    let logs = hook_logs(&ctx).await?;
    ctx.ensure(out.success(), || format!("the rolling replace failed: {}", out.describe()))?;
    ctx.ensure(after.values().all(|s| s.serves("v2")), || {
        format!("right after the rolling replace returned, every machine must serve v2; {}", describe(&after))
    })?;
    let (most, at_ms, which, gap) = worst(&samples, |s| s.2);
    ctx.ensure(gap <= 1_000, || format!("the samplers stalled ({gap} ms between two samples): no proof"))?;
    ctx.ensure(most <= 1, || {
        format!(
            "the check must pass on at least N-1 = 2 machines throughout, but it failed on {most} at once ({at_ms} \
             ms after sampling began: m{which:?}); hook logs: {}",
            render_logs(&logs)
        )
    })?;
    // In the order the machines changed: each stops v1 only once the one before serves v2.
    let mut changed: Vec<(u128, usize)> = Vec::new();
    for (slot, log) in &logs {
        let ok = count(log, "stop", "v1") == 1 && count(log, "start-pre", "v2") == 1;
        ctx.ensure(ok, || format!("m{slot} must stop v1 once and start v2 once; hook logs: {}", render_logs(&logs)))?;
        changed.push((at(log, "stop", "v1", 0).unwrap_or(0), *slot));
    }
    changed.sort_unstable();
    for pair in changed.windows(2) {
        let ((_, a), (b_stop, b)) = (pair[0], pair[1]);
        let a_ready = at(&logs[&a], "ready", "v2", 0);
        ctx.ensure(a_ready.is_some_and(|r| r < b_stop), || {
            format!(
                "m{b} stopped v1 before m{a}'s v2 was ready: the rollout did not wait for the health check; hook \
                 logs: {}",
                render_logs(&logs)
            )
        })?;
    }
    let floor = SYNC * SLOTS.len() as u32;
    ctx.ensure(took >= floor, || {
        format!("the rolling replace took {took:?}, less than the {floor:?} the checks need (3 s sync per machine)")
    })?;
    // Published health: list-units and the API show each machine healthy.
    wait_published_healthy(&ctx, 1).await?;
    let cref = &ctx;
    ctx.wait_for("GET /fleet/v1/state to show health.status healthy for 3 machines", || async move {
        match cref.http(1, "GET", "/fleet/v1/state", None).await {
            Ok(r) if r.status == 200 => {
                let states = r.json()["states"].as_array().cloned().unwrap_or_default();
                let health: Vec<Value> =
                    states.iter().filter(|s| s["name"] == DB).map(|s| s["health"]["status"].clone()).collect();
                if health.len() == 3 && health.iter().all(|h| h == "healthy") {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("health of {DB}: {health:?}"))
                }
            }
            Ok(r) => Check::NotYet(r.describe()),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

/// The unit's own `[X-Fleet] UpdatePolicy=rolling` (max-unavailable 1): a plain `fleetctl start --replace` rolls
/// (sampled: never two machines without a serving copy; each machine's old version stopped once, after the one
/// before serves the new one) and returns once every machine serves v2; then an API client replacing it the way
/// the original fleetctl does (`PUT` of `name` + `options` without `desiredState`, then `PUT` of `desiredState:
/// launched`) gets the same: the server rolls v3 machine by machine; a plain `restart` rolls as well (sampled; each
/// machine restarted once, after the one before is ready again); and a version without a policy (the new version
/// governs) is replaced everywhere at once with a one-line hint on stderr naming `--rolling`.
///
/// Break-once: the server ignores the policy (`&& false` at the end of `wire::put_rolls_out`): "an API client's
/// replace (two PUTs) of a unit with UpdateMaxUnavailable=1: at most 1 machine(s) may be without a serving copy
/// (active, check passing) at once, but 3 were 274 ms after sampling began: m[1, 2, 3]"; fleetctl ignores it
/// (`false &&` in `fleetctl::create::has_policy`; the server still rolls): "right after start --replace returned,
/// every machine must serve v2; ... m3: "safe-db v2" active pid 728 check fails".
pub async fn policy_in_the_unit_rolls_a_plain_replace(ctx: Ctx) -> Outcome {
    let text = fixture()?;
    let dir = TempDir::new()?;
    let path = write_and_start_v1(&ctx, &dir, &text, 1).await?;
    let check = check_command(&text);

    // 1. fleetctl start --replace, no flag.
    dir.write(DB, &version(&text, "v2"))?;
    start_samplers(&ctx, &check).await?;
    let out = ctx.fleetctl(1, &["start", "--replace", &path]).await?;
    let after = seen(&ctx, &SLOTS).await?;
    let samples = stop_samplers(&ctx).await?;
    let logs = hook_logs(&ctx).await?;
    ctx.ensure(out.success(), || format!("start --replace of a unit with a policy failed: {}", out.describe()))?;
    ctx.ensure(after.values().all(|s| s.serves("v2")), || {
        format!("right after start --replace returned, every machine must serve v2; {}", describe(&after))
    })?;
    expect_at_most_down(&ctx, &samples, 1, "plain start --replace with UpdateMaxUnavailable=1")
        .map_err(|e| format!("{e}; hook logs: {}", render_logs(&logs)))?;
    expect_rolled_in_turn(&ctx, &logs, "v1", "v2")?;

    // 2. The original client's two PUTs.
    start_samplers(&ctx, &check).await?;
    let unit = format!("/fleet/v1/units/{DB}");
    let options = json!({"name": DB, "options": unit_options(&version(&text, "v3"))}).to_string();
    let put1 = ctx.http(1, "PUT", &unit, Some(&options)).await?;
    ctx.ensure((200..300).contains(&put1.status), || {
        format!("PUT {unit} with new options and no desiredState: expected 2xx, observed {}", put1.describe())
    })?;
    let launch = json!({"name": DB, "desiredState": "launched"}).to_string();
    let put2 = ctx.http(1, "PUT", &unit, Some(&launch)).await?;
    ctx.ensure((200..300).contains(&put2.status), || {
        format!("PUT {unit} {launch}: expected 2xx, observed {}", put2.describe())
    })?;
    // The server's rollout, followed as a user would: rollout-status waits until it ends (0: done).
    let end = fleetctl_within(&ctx, 1, &["rollout-status", DB], Duration::from_secs(90)).await?;
    ctx.ensure(end.success(), || {
        format!("the rollout the two PUTs started must end done (rollout-status exit 0); {}", end.describe())
    })?;
    wait_serving(&ctx, &SLOTS, "v3", 30).await?;
    let samples = stop_samplers(&ctx).await?;
    let logs = hook_logs(&ctx).await?;
    expect_at_most_down(&ctx, &samples, 1, "an API client's replace (two PUTs) of a unit with UpdateMaxUnavailable=1")
        .map_err(|e| format!("{e}; hook logs: {}", render_logs(&logs)))?;
    expect_rolled_in_turn(&ctx, &logs, "v2", "v3")?;

    // 3. A plain restart follows the policy too: machine by machine, each new process ready before the next stops.
    start_samplers(&ctx, &check).await?;
    let out = ctx.fleetctl(1, &["restart", DB]).await?;
    let after = seen(&ctx, &SLOTS).await?;
    let samples = stop_samplers(&ctx).await?;
    let logs = hook_logs(&ctx).await?;
    ctx.ensure(out.success(), || format!("restart of a unit with a policy failed: {}", out.describe()))?;
    ctx.ensure(after.values().all(|s| s.serves("v3")), || {
        format!("right after restart returned, every machine must serve v3 again; {}", describe(&after))
    })?;
    expect_at_most_down(&ctx, &samples, 1, "plain restart with UpdateMaxUnavailable=1")
        .map_err(|e| format!("{e}; hook logs: {}", render_logs(&logs)))?;
    let mut restarted: Vec<(u128, usize)> = Vec::new();
    for (slot, log) in &logs {
        let ok = count(log, "stop", "v3") == 1 && count(log, "start-pre", "v3") == 2;
        ctx.ensure(ok, || {
            format!("restart: m{slot} must stop v3 once and start it again once; {}", render_logs(&logs))
        })?;
        restarted.push((at(log, "stop", "v3", 0).unwrap_or(0), *slot));
    }
    restarted.sort_unstable();
    for pair in restarted.windows(2) {
        let ((_, a), (b_stop, b)) = (pair[0], pair[1]);
        ctx.ensure(at(&logs[&a], "ready", "v3", 1).is_some_and(|r| r < b_stop), || {
            format!(
                "restart: m{b} stopped before m{a} was ready again: not one machine at a time; {}",
                render_logs(&logs)
            )
        })?;
    }

    // 4. The new version's policy governs: a version without one changes every machine at once, and fleetctl says
    //    so in one line on stderr naming --rolling.
    dir.write(DB, &without_policy(&version(&text, "v4")))?;
    let out = ctx.fleetctl(1, &["start", "--replace", &path]).await?;
    ctx.ensure(out.success() && out.stderr.lines().count() == 1 && out.stderr.contains("--rolling"), || {
        format!(
            "start --replace of a global unit whose new version has no policy must succeed with a one-line hint on \
             stderr naming --rolling; {}",
            out.describe()
        )
    })?;
    wait_serving(&ctx, &SLOTS, "v4", 60).await?;
    Ok(())
}

/// Each machine stopped `old` exactly once and started `new` exactly once, and each (in the order they changed)
/// stopped `old` only once the one before was ready on `new`.
fn expect_rolled_in_turn(ctx: &Ctx, logs: &BTreeMap<usize, Vec<Hook>>, old: &str, new: &str) -> Outcome {
    let mut changed: Vec<(u128, usize)> = Vec::new();
    for (slot, log) in logs {
        ctx.ensure(count(log, "stop", old) == 1 && count(log, "start-pre", new) == 1, || {
            format!("m{slot} must stop {old} once and start {new} once; hook logs: {}", render_logs(logs))
        })?;
        changed.push((at(log, "stop", old, 0).unwrap_or(0), *slot));
    }
    changed.sort_unstable();
    for pair in changed.windows(2) {
        let ((_, a), (b_stop, b)) = (pair[0], pair[1]);
        ctx.ensure(at(&logs[&a], "ready", new, 0).is_some_and(|r| r < b_stop), || {
            format!(
                "m{b} stopped {old} before m{a} was ready on {new}: not one machine at a time; hook logs: {}",
                render_logs(logs)
            )
        })?;
    }
    Ok(())
}

/// A unit file as the API's `options` (`[{"section","name","value"}]`, in file order; comments and blank lines
/// left out), as the original fleetctl sends it.
fn unit_options(text: &str) -> Value {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            out.push(json!({"section": section, "name": k.trim(), "value": v.trim()}));
        }
    }
    Value::Array(out)
}

/// `--canary=1`: the first machine (ID order) gets v2 and serves it, then the rollout pauses awaiting promotion
/// (exit 2; `rollout-status` exits 2 and says `awaiting promotion`; the API shows `awaitingPromotion: true`) with
/// the other machines on v1, untouched, and stays so; `rollout-promote` releases the rest and every machine ends on
/// v2.
///
/// Break-once: the canary gate never runs (`spec.canary > 0` → `> 1000` in `rollout::advance`): "--canary=1:
/// expected exit status 2 (paused), got exit 0; stdout: ... replace done".
pub async fn canary_pauses_until_promoted(ctx: Ctx) -> Outcome {
    let text = without_policy(&fixture()?);
    let dir = TempDir::new()?;
    let path = write_and_start_v1(&ctx, &dir, &text, 1).await?;
    let order = id_order(&ctx)?;
    let before = seen(&ctx, &SLOTS).await?;
    dir.write(DB, &version(&text, "v2"))?;
    let args = ["start", "--replace", "--rolling", "--canary=1", "--min-healthy=1s", &path];
    let out = fleetctl_within(&ctx, 1, &args, Duration::from_secs(60)).await?;
    let after = seen(&ctx, &SLOTS).await?;
    ctx.ensure(out.status == 2, || format!("--canary=1: expected exit status 2 (paused), got {}", out.describe()))?;
    let untouched = |now: &BTreeMap<usize, Seen>| order[1..].iter().all(|s| now[s] == before[s]);
    ctx.ensure(after[&order[0]].serves("v2") && untouched(&after), || {
        format!(
            "after the canary, m{} (first in ID order) must serve v2 and the others keep v1 with their MainPIDs \
             ({}); observed {}",
            order[0],
            describe(&before),
            describe(&after)
        )
    })?;
    let (status, status_out) = status_text(&ctx, 1).await?;
    ctx.ensure(status == 2 && status_out.contains("awaiting promotion"), || {
        format!("rollout-status of a canary awaiting promotion must exit 2 and say so; exit {status}: {status_out}")
    })?;
    let listed = ctx.http(1, "GET", "/fleet/v1/rollouts", None).await?;
    let newest = listed.json()["rollouts"][0].clone();
    ctx.ensure(newest["state"] == "paused" && newest["awaitingPromotion"] == true, || {
        format!("GET /fleet/v1/rollouts: the canary rollout must be paused with awaitingPromotion true: {newest}")
    })?;
    // It stays there: nothing else changes until promoted.
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        let now = seen(&ctx, &SLOTS).await?;
        ctx.ensure(untouched(&now), || {
            format!("before rollout-promote, the other machines must keep v1 untouched; observed {}", describe(&now))
        })?;
        ctx.hold(Duration::from_millis(300)).await;
    }
    let promote = ctx.fleetctl(1, &["rollout-promote", DB]).await?;
    ctx.ensure(promote.success(), || format!("rollout-promote failed: {}", promote.describe()))?;
    let end = fleetctl_within(&ctx, 1, &["rollout-status", DB], Duration::from_secs(60)).await?;
    ctx.ensure(end.success(), || format!("rollout-status after rollout-promote: expected exit 0, {}", end.describe()))?;
    let done = seen(&ctx, &SLOTS).await?;
    ctx.ensure(done.values().all(|s| s.serves("v2")), || {
        format!("once rollout-status returned 0 after the promotion, every machine must serve v2; {}", describe(&done))
    })
}

/// `--order=last:role=primary` where the primary (metadata set through the API) is the machine that comes first in
/// machine-ID order: it changes last, only once both others serve v2.
///
/// Break-once: main at 811efce itself: "m3 (role=primary, first in machine-ID order) must change last, after m1 is
/// ready on v2" — the rollout's order read only fleet.conf metadata (`registry::rollout_cluster` `metadata()`), not
/// what the machines API set; it passed with the merged metadata (`o.merged(&m.metadata).metadata`).
pub async fn order_last_changes_the_primary_last(ctx: Ctx) -> Outcome {
    let text = without_policy(&fixture()?);
    let dir = TempDir::new()?;
    let path = write_and_start_v1(&ctx, &dir, &text, 1).await?;
    let order = id_order(&ctx)?;
    let primary = order[0];
    let body = json!([{"op": "replace", "path": format!("/{}/metadata/role", ctx.id(primary)?), "value": {"value": "primary"}}]);
    let r = ctx.http(1, "PATCH", "/fleet/v1/machines", Some(&body.to_string())).await?;
    ctx.ensure(r.status == 204, || format!("PATCH {body}: expected 204, observed {}", r.describe()))?;
    let cref = &ctx;
    ctx.wait_table(1, "list-machines", &["machine", "metadata"], "the primary's metadata to show", |rows| {
        let id = cref.id(primary).unwrap_or_default();
        match rows.iter().find(|r| r.get("machine") == id) {
            Some(r) if r.get("metadata").contains("role=primary") => Ok(()),
            other => Err(format!("{:?}", other.map(|r| r.get("metadata").to_string()))),
        }
    })
    .await?;
    dir.write(DB, &version(&text, "v2"))?;
    let out = ctx
        .fleetctl(1, &["start", "--replace", "--rolling", "--order=last:role=primary", "--min-healthy=1s", &path])
        .await?;
    let logs = hook_logs(&ctx).await?;
    ctx.ensure(out.success(), || format!("the rolling replace with --order failed: {}", out.describe()))?;
    expect_rolled_in_turn(&ctx, &logs, "v1", "v2")?;
    let primary_stop = at(&logs[&primary], "stop", "v1", 0).unwrap_or(0);
    let steps = newest_rollout_steps(&ctx).await.unwrap_or_else(|e| e);
    for &other in &order[1..] {
        ctx.ensure(at(&logs[&other], "ready", "v2", 0).is_some_and(|r| r < primary_stop), || {
            format!(
                "m{primary} (role=primary, first in machine-ID order) must change last, after m{other} is ready on \
                 v2; the rollout's steps: {steps}; hook logs: {}",
                render_logs(&logs)
            )
        })?;
    }
    Ok(())
}

/// A machine that goes down before the rollout reaches it counts against `--max-unavailable=1`: while the first
/// machine's step runs, fleet is stopped on the last machine (its unit stops, the machine leaves); the rollout then
/// takes no further machine down — the middle machine keeps v1 with its MainPID — and `rollout-status` says it is
/// `waiting:` and names the machine; once that machine is back and serves the new version, the rollout finishes
/// (exit 0) with every machine serving v2.
///
/// Break-once: machines not serving outside the released steps not counted (`counts_down = false` in
/// `rollout::release`): "waited 29.8s for rollout-status to say `waiting:` and name m2; last seen: exit 0: ...
/// replace done ... skipped the machine left the cluster" (the middle machine was changed while m2 was gone).
pub async fn machine_already_down_counts_against_the_budget(ctx: Ctx) -> Outcome {
    let text = without_policy(&fixture()?);
    let dir = TempDir::new()?;
    let order = id_order(&ctx)?;
    let (first, middle, last) = (order[0], order[1], order[2]);
    let via = first; // every command through a machine that stays
    let path = write_and_start_v1(&ctx, &dir, &text, via).await?;
    let before = seen(&ctx, &SLOTS).await?;
    dir.write(DB, &version(&text, "v2"))?;
    let args = ["start", "--replace", "--rolling", "--no-block", "--max-unavailable=1", "--min-healthy=3s", &path];
    ctx.fleetctl_ok(via, &args).await?;
    let cref = &ctx;
    ctx.wait_for(&format!("m{first} to begin its step (v1 stopping)"), || async move {
        match hook_log(cref, first).await {
            Ok(log) if count(&log, "stop", "v1") > 0 => Check::Ready(()),
            Ok(log) => Check::NotYet(format!("{log:?}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await?;
    ctx.exec_ok(last, &["systemctl", "stop", "fleet.service"]).await?;
    let last_id = short_id(&ctx, last)?;
    let what = format!("rollout-status to say `waiting:` and name m{last} ({last_id})");
    let last_id = last_id.as_str();
    let middle_before = &before[&middle];
    let waiting = ctx
        .wait_for(&what, || async move {
            let middle_now = match seen(cref, &[middle]).await {
                Ok(s) => s[&middle].clone(),
                Err(e) => return Check::NotYet(e),
            };
            match status_text(cref, via).await {
                // The budget is broken as soon as the middle machine is touched while the last one is down.
                Ok((_, t)) if middle_now != *middle_before => Check::Ready(Err(format!(
                    "with m{last} down and --max-unavailable=1, m{middle} must keep v1 (MainPID {}); observed \
                     {middle_now}; rollout-status: {t}",
                    middle_before.pid
                ))),
                Ok((_, t)) if t.contains("waiting:") && t.contains(last_id) => Check::Ready(Ok(t)),
                Ok((code, t)) => Check::NotYet(format!("exit {code}: {t}")),
                Err(e) => Check::NotYet(e),
            }
        })
        .await?
        .map_err(|e| ctx.fail(e))?;
    // The budget holds: the middle machine is not taken down while the last one is gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let now = seen(&ctx, &[middle]).await?;
        ctx.ensure(now[&middle] == before[&middle], || {
            format!(
                "with m{last} down and --max-unavailable=1, m{middle} must keep v1 (MainPID {}); observed {}; \
                 rollout-status said: {waiting}",
                before[&middle].pid,
                describe(&now)
            )
        })?;
        ctx.hold(Duration::from_millis(300)).await;
    }
    ctx.exec_ok(last, &["systemctl", "start", "fleet.service"]).await?;
    let end = ctx.fleetctl(via, &["rollout-status", DB]).await?;
    let done = seen(&ctx, &SLOTS).await?;
    let logs = hook_logs(&ctx).await?;
    ctx.ensure(end.success() && done.values().all(|s| s.serves("v2")), || {
        format!(
            "once m{last} is back the rollout must finish (exit 0) with every machine serving v2; {}; {}; hook logs: \
             {}",
            end.describe(),
            describe(&done),
            render_logs(&logs)
        )
    })?;
    let middle_stop = at(&logs[&middle], "stop", "v1", 0);
    let last_ready = at(&logs[&last], "ready", "v2", 0);
    ctx.ensure(matches!((last_ready, middle_stop), (Some(r), Some(s)) if r < s), || {
        format!(
            "m{middle} must stop v1 only after m{last} (down before the rollout reached it) serves v2 again; hook \
             logs: {}",
            render_logs(&logs)
        )
    })
}

/// A copy stopped by hand (`systemctl stop` inside the machine that comes last in machine-ID order) before a rolling
/// replace with `--max-unavailable=1`: that machine is changed first, at no cost to the budget (its v2 starts before
/// any other machine stops v1), and — sampled every 100 ms inside every machine — no other machine is taken down
/// while it is down or syncing: never two machines without a serving copy at once; exit 0, every machine serves v2.
///
/// Break-once: a down machine's pending step not released first (the down-first loop of `rollout::release`
/// skipped; `conformance/mutants/safe-rollout-down-not-first.patch`, redone for main 197b262): "`fleetctl start --replace
/// --rolling ...` had not returned after 100s; `rollout-status --no-block` then exited 0: Rollout ... replace running:
/// waiting: 1 of at most 1 unavailable already: safe-db.service on fe2e7d76 (inactive/dead)".
pub async fn machine_stopped_by_hand_is_changed_first(ctx: Ctx) -> Outcome {
    let text = without_policy(&fixture()?);
    let dir = TempDir::new()?;
    let path = write_and_start_v1(&ctx, &dir, &text, 1).await?;
    let order = id_order(&ctx)?;
    let stopped = order[2];
    start_samplers(&ctx, &check_command(&text)).await?;
    ctx.exec_ok(stopped, &["systemctl", "stop", DB]).await?;
    let fields = ["unit", "machine", "active"];
    let id = ctx.id(stopped)?;
    let what = format!("list-units to show {DB} inactive on m{stopped}");
    ctx.wait_table(1, "list-units", &fields, &what, |rows| {
        let row = rows.iter().find(|r| r.get("unit") == DB && r.get("machine").starts_with(&id[..8]));
        match row.map(|r| r.get("active")) {
            Some("inactive") | Some("failed") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    dir.write(DB, &version(&text, "v2"))?;
    let args = ["start", "--replace", "--rolling", "--max-unavailable=1", "--min-healthy=1s", &path];
    let out = fleetctl_within(&ctx, 1, &args, Duration::from_secs(100)).await?;
    let after = seen(&ctx, &SLOTS).await?;
    let samples = stop_samplers(&ctx).await?;
    let logs = hook_logs(&ctx).await?;
    ctx.ensure(out.success() && after.values().all(|s| s.serves("v2")), || {
        format!(
            "the rolling replace must end done with every machine serving v2; {}; {}",
            out.describe(),
            describe(&after)
        )
    })?;
    // The machine stopped by hand counts as down from the start: the sampled limit is the budget, 1.
    expect_at_most_down(&ctx, &samples, 1, "--max-unavailable=1 with a copy stopped by hand")
        .map_err(|e| format!("{e}; hook logs: {}", render_logs(&logs)))?;
    let first_v2 = at(&logs[&stopped], "start-pre", "v2", 0);
    for &other in &order[..2] {
        ctx.ensure(first_v2.is_some_and(|t| at(&logs[&other], "stop", "v1", 0).is_some_and(|s| t < s)), || {
            format!(
                "m{stopped} (stopped by hand, last in machine-ID order) must be changed first, before m{other} stops \
                 v1; hook logs: {}",
                render_logs(&logs)
            )
        })?;
    }
    Ok(())
}

/// A version that never becomes healthy (active, but its check never passes), with `--health-timeout=120s` and
/// `--progress-deadline=10s`: the rollout fails at the deadline (exit 2 with `--on-failure=pause`, after at least
/// 10 s and well before the health timeout), `rollout-status` says why, the first machine holds v2 unready and the
/// others keep v1 untouched.
///
/// Break-once: no deadline (`let deadline_passed = false && ..` in `rollout::advance`): "`fleetctl start --replace
/// --rolling ... --progress-deadline=10s ...` had not returned after 60s; `rollout-status --no-block` then exited 0:
/// Rollout ... replace running". On main (d457f88 + the health branch) it fails too: the rollout pauses at the
/// deadline but the blocking command never returns (fleetctl's `wait_outcome` takes a pause without a failed step
/// and action `run` for a pause by request about to resume).
pub async fn progress_deadline_fails_a_rollout_that_never_gets_healthy(ctx: Ctx) -> Outcome {
    let text = without_policy(&fixture()?);
    let dir = TempDir::new()?;
    let path = write_and_start_v1(&ctx, &dir, &text, 1).await?;
    let order = id_order(&ctx)?;
    let before = seen(&ctx, &SLOTS).await?;
    dir.write(DB, &never_ready(&version(&text, "v2")))?;
    let t0 = Instant::now();
    let args = [
        "start",
        "--replace",
        "--rolling",
        "--min-healthy=1s",
        "--health-timeout=120s",
        "--progress-deadline=10s",
        "--on-failure=pause",
        &path,
    ];
    // The deadline is 10 s; allow for load, but not for the 120 s health timeout.
    let out = fleetctl_within(&ctx, 1, &args, Duration::from_secs(60)).await?;
    let took = t0.elapsed();
    let after = seen(&ctx, &SLOTS).await?;
    ctx.ensure(out.status == 2, || {
        format!("a rollout past its progress deadline (--on-failure=pause) must exit 2; {}", out.describe())
    })?;
    ctx.ensure(took >= Duration::from_secs(10) && took < Duration::from_secs(40), || {
        format!("the rollout must fail at its 10 s progress deadline (not before, not at the 120 s health timeout); it took {took:?}")
    })?;
    let (status, status_out) = status_text(&ctx, 1).await?;
    ctx.ensure(status == 2 && status_out.contains("deadline"), || {
        format!("rollout-status must exit 2 and name the progress deadline; exit {status}: {status_out}")
    })?;
    let first = &after[&order[0]];
    ctx.ensure(first.version == "safe-db v2" && first.active == "active" && !first.ready, || {
        format!("m{} must hold v2, active but never ready; observed {first}", order[0])
    })?;
    ctx.ensure(order[1..].iter().all(|s| after[s] == before[s]), || {
        format!("the other machines must keep v1 untouched; before {}, after {}", describe(&before), describe(&after))
    })
}

/// `--canary=2 --max-unavailable=1`: the first two machines (ID order) get v2 and serve it, and the rollout awaits
/// promotion; `rollout-abort` then returns both to v1 — sampled every 100 ms inside every machine, with a stop
/// that takes 2 s and a sync of 3 s, never two machines without a serving copy at once: an abort's undo keeps the
/// budget, as a rollback's does — and `rollout-status` exits 4 (aborted) once every machine serves v1, the third
/// machine untouched throughout.
///
/// Break-once (`safe-rollout-abort-unbudgeted`: `limit = 100` in `rollout::release` for an undo ending
/// `aborted`): both changed machines are returned at once. `failing_second_machine_rolls_back_never_two_down`
/// does not see that: its undo is a rollback.
pub async fn abort_returns_changed_machines_within_the_budget(ctx: Ctx) -> Outcome {
    let text = without_policy(&fixture()?);
    let dir = TempDir::new()?;
    let path = write_and_start_v1(&ctx, &dir, &text, 1).await?;
    let order = id_order(&ctx)?;
    let (first, second, third) = (order[0], order[1], order[2]);
    let before = seen(&ctx, &SLOTS).await?;
    dir.write(DB, &version(&text, "v2"))?;
    let args = ["start", "--replace", "--rolling", "--canary=2", "--max-unavailable=1", "--min-healthy=1s", &path];
    let out = fleetctl_within(&ctx, 1, &args, Duration::from_secs(60)).await?;
    ctx.ensure(out.status == 2, || format!("--canary=2: expected exit status 2 (paused), got {}", out.describe()))?;
    let canaries = seen(&ctx, &SLOTS).await?;
    let canaries_ok =
        canaries[&first].serves("v2") && canaries[&second].serves("v2") && canaries[&third] == before[&third];
    ctx.ensure(canaries_ok, || {
        format!(
            "after --canary=2, m{first} and m{second} (first in ID order) must serve v2 and m{third} keep v1 untouched \
             ({}); observed {}",
            before[&third],
            describe(&canaries)
        )
    })?;
    start_samplers(&ctx, &check_command(&text)).await?;
    ctx.fleetctl_ok(1, &["rollout-abort", DB]).await?;
    let end = fleetctl_within(&ctx, 1, &["rollout-status", DB], Duration::from_secs(60)).await?;
    let after = seen(&ctx, &SLOTS).await?;
    let samples = stop_samplers(&ctx).await?;
    let logs = hook_logs(&ctx).await?;
    let observed = || format!("machines after it returned: {}; hook logs: {}", describe(&after), render_logs(&logs));
    ctx.ensure(end.status == 4, || {
        format!("rollout-status after rollout-abort: expected exit 4 (aborted), got {}; {}", end.describe(), observed())
    })?;
    ctx.ensure(after.values().all(|s| s.serves("v1")), || {
        format!("once the aborted rollout ended, every machine must serve v1 again; {}", observed())
    })?;
    expect_at_most_down(&ctx, &samples, 1, "rollout-abort of two changed machines with --max-unavailable=1")?;
    ctx.ensure(after[&third] == before[&third] && count(&logs[&third], "stop", "v1") == 0, || {
        format!("m{third} (3rd in ID order) must be untouched: v1 with MainPID {}; {}", before[&third].pid, observed())
    })
}

/// A check that outlives its `HealthCheckTimeout=` is killed and counts as failed: a unit whose check sleeps 30 s
/// with a 1 s timeout is published `unhealthy` (`list-units --fields health`) within seconds, with the output `timed
/// out after 1s` (`GET /fleet/v1/state`), not left `unknown` while the check runs on.
///
/// Break-once (`health-check-timeout-ignored`: the timeout times 3600 in `agent::checks::run_check`): "timed out:
/// waited 29.9s for safe-db-hang.service active and unhealthy (its check timed out); last seen: active active, health
/// healthy" (`unknown` while the check ran, then `healthy` when `sleep 30` exited 0).
pub async fn check_past_its_timeout_is_published_unhealthy(ctx: Ctx) -> Outcome {
    let dir = TempDir::new()?;
    let unit = "safe-db-hang.service";
    let path = dir.write(
        unit,
        "[Service]\nExecStart=/bin/sleep infinity\n\n[X-Fleet]\nHealthCheck=sleep 30\nHealthCheckTimeout=1s\n\
         HealthCheckInterval=2s\n",
    )?;
    ctx.fleetctl_ok(1, &["start", &path]).await?;
    let t0 = Instant::now();
    let fields = ["unit", "active", "health"];
    ctx.wait_table(1, "list-units", &fields, &format!("{unit} active and unhealthy (its check timed out)"), |rows| {
        let row = rows.iter().find(|r| r.get("unit") == unit).ok_or_else(|| format!("no {unit} row: {rows:?}"))?;
        let (active, health) = (row.get("active"), row.get("health"));
        if active == "active" && health == "unhealthy" {
            Ok(())
        } else {
            Err(format!("active {active}, health {health}"))
        }
    })
    .await?;
    let took = t0.elapsed();
    ctx.ensure(took < Duration::from_secs(20), || {
        format!("a check with HealthCheckTimeout=1s must be judged failed within seconds; it took {took:?}")
    })?;
    let r = ctx.http(1, "GET", "/fleet/v1/state", None).await?;
    let states = r.json()["states"].as_array().cloned().unwrap_or_default();
    let health: Vec<Value> = states.iter().filter(|s| s["name"] == unit).map(|s| s["health"].clone()).collect();
    ctx.ensure(
        health.len() == 1
            && health[0]["status"] == "unhealthy"
            && health[0]["output"].as_str().is_some_and(|o| o.contains("timed out after 1s")),
        || {
            format!(
                "GET /fleet/v1/state: {unit} must be unhealthy with output \"timed out after 1s\"; health: {health:?}"
            )
        },
    )
}

/// The unit's health as machine `via`'s API shows it (`GET /fleet/v1/state`): `status sinceMs`, or why not.
async fn published_health(ctx: &Ctx, via: usize, unit: &str) -> String {
    match ctx.http(via, "GET", "/fleet/v1/state", None).await {
        Ok(r) if r.status == 200 => {
            let states = r.json()["states"].as_array().cloned().unwrap_or_default();
            match states.iter().find(|s| s["name"] == unit) {
                Some(s) => format!("{} {}", s["health"]["status"].as_str().unwrap_or("none"), s["health"]["sinceMs"]),
                None => "no state".into(),
            }
        }
        Ok(r) => r.describe(),
        Err(e) => e,
    }
}

/// A fleetd restart keeps a healthy unit's published health (docs/health.md, "After a fleetd restart"): a unit
/// pinned to m1 whose check takes 2 s is healthy; `systemctl restart fleet` on m1 while m2's API is sampled every
/// 100 ms: the unit's health stays `healthy` with the same `sinceMs` throughout — also while the new process's
/// first check runs — and its MainPID is unchanged. Publishing `unknown` meanwhile would fail a rollout step
/// holding for `minHealthy` at every fleetd upgrade.
pub async fn fleetd_restart_keeps_the_published_health(ctx: Ctx) -> Outcome {
    let unit = "safe-db-held.service";
    let dir = TempDir::new()?;
    let text = format!(
        "[Service]\nExecStart=/bin/sleep infinity\n\n[X-Fleet]\nMachineID={}\nHealthCheck=sleep 2\n\
         HealthCheckInterval=3s\nHealthCheckTimeout=10s\n",
        ctx.id(1)?
    );
    let path = dir.write(unit, &text)?;
    ctx.fleetctl_ok(1, &["start", &path]).await?;
    let cref = &ctx;
    let before = ctx
        .wait_for(&format!("{unit} published healthy (via m2)"), || async move {
            let h = published_health(cref, 2, unit).await;
            if h.starts_with("healthy ") { Check::Ready(h) } else { Check::NotYet(h) }
        })
        .await?;
    let pid = ctx.main_pid(1, unit).await?;
    let done = std::sync::atomic::AtomicBool::new(false);
    let sampler = async {
        let began = Instant::now();
        let mut seen: Vec<(f64, String)> = Vec::new();
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let round = tokio::time::Instant::now();
            seen.push((began.elapsed().as_secs_f64(), published_health(cref, 2, unit).await));
            tokio::time::sleep_until(round + Duration::from_millis(100)).await;
        }
        seen
    };
    let scenario = async {
        let restarted = ctx.exec_ok(1, &["systemctl", "restart", "fleet.service"]).await.map(|_| ());
        // The new process's first check of the unit runs at once and takes 2 s: hold past it.
        ctx.hold(Duration::from_secs(6)).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        restarted
    };
    let (seen, restarted) = tokio::join!(sampler, scenario);
    restarted?;
    let changed: Vec<String> =
        seen.iter().filter(|(_, h)| *h != before).map(|(t, h)| format!("{t:.1} s: {h}")).collect();
    ctx.ensure(seen.len() >= 20 && changed.is_empty(), || {
        format!(
            "across `systemctl restart fleet` on m1, {unit}'s published health must stay {before:?}; {} of {} \
             samples differ: {}",
            changed.len(),
            seen.len(),
            changed.iter().take(8).cloned().collect::<Vec<_>>().join("; ")
        )
    })?;
    let now = ctx.main_pid(1, unit).await?;
    ctx.ensure(now == pid, || format!("{unit} was restarted with fleet: MainPID {pid} -> {now}"))
}

/// A unit that is not active has no health: a checked unit published `healthy` is published `unknown` once
/// `fleetctl stop` stopped it (`list-units --fields health`, `GET /fleet/v1/state`), not the last run's `healthy`.
pub async fn stopped_unit_is_published_unknown(ctx: Ctx) -> Outcome {
    let unit = "safe-db-stopped.service";
    let dir = TempDir::new()?;
    let path = dir.write(
        unit,
        "[Service]\nExecStart=/bin/sleep infinity\n\n[X-Fleet]\nHealthCheck=true\nHealthCheckInterval=1s\n",
    )?;
    ctx.fleetctl_ok(1, &["start", &path]).await?;
    let fields = ["unit", "active", "health"];
    let row = |want_active: &'static str, want_health: &'static str| {
        move |rows: &[fleet_harness::wait::Row]| {
            let row = rows.iter().find(|r| r.get("unit") == unit).ok_or_else(|| format!("no {unit} row: {rows:?}"))?;
            let (active, health) = (row.get("active"), row.get("health"));
            if active == want_active && health == want_health {
                Ok(())
            } else {
                Err(format!("active {active}, health {health}"))
            }
        }
    };
    ctx.wait_table(1, "list-units", &fields, &format!("{unit} active and healthy"), row("active", "healthy")).await?;
    ctx.fleetctl_ok(1, &["stop", unit]).await?;
    ctx.wait_table(
        1,
        "list-units",
        &fields,
        &format!("the stopped {unit} inactive with health unknown"),
        row("inactive", "unknown"),
    )
    .await?;
    let health = published_health(&ctx, 1, unit).await;
    ctx.ensure(health.starts_with("unknown "), || {
        format!("GET /fleet/v1/state: the stopped {unit} must have health unknown; observed {health}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_of_the_fixture_change_what_they_say() {
        let text = fixture().unwrap();
        let v2 = version(&text, "v2");
        assert!(v2.contains("Description=safe-db v2") && !v2.contains("v1"), "{v2}");
        let plain = without_policy(&text);
        assert!(!plain.contains("UpdatePolicy") && plain.contains("HealthCheck=") && plain.contains("Global=true"));
        let broken = failing_where_marked(&v2);
        assert!(broken.contains(&format!("[Service]\nExecStartPre=/bin/sh -c 'if [ -e {BROKEN} ]")), "{broken}");
        assert!(never_ready(&text).contains("sleep infinity;") && !never_ready(&text).contains("sleep 3;"));
        assert_eq!(check_command(&text), format!("test -e {READY}"));
    }

    #[test]
    fn options_follow_the_file_in_order() {
        let o = unit_options("# c\n[Unit]\nDescription=x y\n\n[X-Fleet]\nGlobal=true\n");
        assert_eq!(
            o,
            json!([{"section":"Unit","name":"Description","value":"x y"},{"section":"X-Fleet","name":"Global","value":"true"}])
        );
    }

    #[test]
    fn worst_counts_machines_down_at_the_same_instant() {
        let s = |v: &[(u128, bool)]| v.iter().map(|(t, up)| (*t * 1_000_000, *up, *up)).collect::<Vec<_>>();
        let samples = BTreeMap::from([
            (1, s(&[(0, true), (100, false), (200, true)])),
            (2, s(&[(50, true), (150, false), (250, true)])),
        ]);
        let (most, at_ms, which, gap) = worst(&samples, |x| x.1);
        assert_eq!((most, at_ms, which, gap), (2, 150, vec![1, 2], 100));
    }
}

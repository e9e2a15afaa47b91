//! The rolling scenario (issue 12), on a fresh cluster per machine count: a global unit runs version 1 on every
//! machine; then
//! * the **floor**: on machine 1, `systemctl stop` then `systemctl start` of the same unit, timed inside the
//!   machine (no fleet involved) — what one machine's change costs at least;
//! * `fleetctl start --replace --rolling --min-healthy=0s` of version 2, timed until the command returns (it
//!   returns when the rollout is done, every machine running version 2), per machine, and as a ratio to the floor;
//! * the rollout's per-step timeline, read from the API (`GET /fleet/v1/rollouts/<id>`): for each machine when its
//!   step was released and when the engine saw the new version active, so the time between steps is visible;
//! * the same rolling replace again (version 3) of the unit with a health check that passes at once
//!   (`[X-Fleet] HealthCheck=true`, `HealthCheckInterval=` [`CHECK_INTERVAL`]; issue 34): a step then also waits
//!   for the check to pass on the new version, and the difference per step (with check − without) is what the
//!   check costs;
//! * on the larger cluster, a rolling restart of 10 template instances with `--max-unavailable=2`.

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::ctx::{Ctx, instances};
use super::options::Options;
use super::poll::{self, Progress};
use super::stats::secs;
use super::units;

const GLOBAL: &str = "roll.service";
/// The interval of the health check of the checked replace (a check that passes at once: what a step pays is the
/// wait for its first run after the new version is active, and the result's publication).
pub const CHECK_INTERVAL: &str = "250ms";
/// Repetitions of the floor measurement (the median is used).
const FLOOR_RUNS: usize = 5;

/// One step of the rollout as the engine recorded it (ms relative to the rollout's creation).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepTiming {
    pub machine: String,
    pub released_ms: i64,
    pub healthy_ms: i64,
}

/// A rolling command and what it cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RollingTiming {
    /// Machines (steps) changed.
    pub steps: usize,
    pub command_s: f64,
    pub per_step_s: f64,
    /// From the rollout's creation until its last step was seen healthy (the engine's clock; with
    /// `--min-healthy=0s` that is when it is done): the command without fleetctl's start-up and its 250 ms polls.
    pub rollout_s: Option<f64>,
    pub rollout_per_step_s: Option<f64>,
    pub command_error: Option<String>,
    pub timeline: Vec<StepTiming>,
}

/// The scenario's figures for one cluster size.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RollingReport {
    pub machines: usize,
    /// Median of `systemctl stop` + `systemctl start` of the unit on machine 1, and every sample.
    pub floor_s: Option<f64>,
    pub floor_samples_s: Vec<f64>,
    pub replace: Option<RollingTiming>,
    /// `replace.per_step_s / floor_s` (target ≤ 1.5).
    pub ratio: Option<f64>,
    /// `replace.rollout_per_step_s / floor_s`.
    pub rollout_ratio: Option<f64>,
    /// The same rolling replace of a version with `HealthCheck=true` every [`CHECK_INTERVAL`] (issue 34).
    pub checked: Option<RollingTiming>,
    /// What the check costs per step: `checked.per_step_s - replace.per_step_s` (the command's time).
    pub check_cost_per_step_s: Option<f64>,
    /// The same from the engine's timeline: `checked.rollout_per_step_s - replace.rollout_per_step_s`.
    pub check_cost_rollout_per_step_s: Option<f64>,
    /// Rolling restart of 10 instances, `--max-unavailable=2` (on the larger clusters only).
    pub restart: Option<RollingTiming>,
    pub errors: Vec<String>,
}

/// Runs the scenario on `machines` machines; failures land in `errors`.
pub async fn run(opts: &Options, machines: usize, with_restart: bool) -> RollingReport {
    let mut r = RollingReport { machines, ..Default::default() };
    let opts = Options { machines, ..opts.clone() };
    match Ctx::new(&opts).await {
        Ok(ctx) => {
            if let Err(e) = scenario(&ctx, &opts, with_restart, &mut r).await {
                r.errors.push(e);
            }
            ctx.finish().await;
        }
        Err(e) => r.errors.push(e),
    }
    r
}

fn global_unit(version: &str) -> String {
    format!("{}\n[X-Fleet]\nGlobal=true\n", units::looping(&format!("rolling bench ({version})"), "roll"))
}

/// [`global_unit`] with a health check that passes at once, run every [`CHECK_INTERVAL`].
fn checked_unit(version: &str) -> String {
    format!("{}HealthCheck=true\nHealthCheckInterval={CHECK_INTERVAL}\n", global_unit(version))
}

async fn scenario(ctx: &Ctx, opts: &Options, with_restart: bool, r: &mut RollingReport) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let v1 = units::write(&ctx.dir.path().join("v1"), &[(GLOBAL.into(), global_unit("v1"))]).map_err(io)?;
    let v2 = units::write(&ctx.dir.path().join("v2"), &[(GLOBAL.into(), global_unit("v2"))]).map_err(io)?;
    ctx.fleetctl_in(Some(&v1), &["start", GLOBAL]).await?;
    let n = opts.machines;
    let up = poll::until(Instant::now(), opts.poll, opts.timeout, n, || async move {
        let count = ctx.list_units().await?.iter().filter(|row| row.unit == GLOBAL && row.running()).count();
        Ok(Progress { count, done: count == n })
    })
    .await;
    if up.done_s.is_none() {
        return Err(format!("{GLOBAL} not active/running on {n} machines within {:?}", opts.timeout));
    }

    for _ in 0..FLOOR_RUNS {
        r.floor_samples_s.push(floor(ctx).await?);
    }
    let mut sorted = r.floor_samples_s.clone();
    sorted.sort_by(f64::total_cmp);
    r.floor_s = sorted.get(sorted.len() / 2).copied();
    // The floor's stop/start went behind fleet's back: wait until fleet shows the unit running everywhere again.
    let settled = poll::until(Instant::now(), opts.poll, opts.timeout, n, || async move {
        let count = ctx.list_units().await?.iter().filter(|row| row.unit == GLOBAL && row.running()).count();
        Ok(Progress { count, done: count == n })
    })
    .await;
    if settled.done_s.is_none() {
        return Err(format!("{GLOBAL} not running everywhere again after the floor measurement"));
    }

    let replace = rolling(ctx, Some(&v2), &["start", "--replace", "--rolling", "--min-healthy=0s", GLOBAL], n).await?;
    r.ratio = r.floor_s.filter(|f| *f > 0.0).map(|f| replace.per_step_s / f);
    r.rollout_ratio = r.floor_s.filter(|f| *f > 0.0).zip(replace.rollout_per_step_s).map(|(f, s)| s / f);
    let checked_dir = units::write(&ctx.dir.path().join("v3"), &[(GLOBAL.into(), checked_unit("v3"))]).map_err(io)?;
    let checked =
        rolling(ctx, Some(&checked_dir), &["start", "--replace", "--rolling", "--min-healthy=0s", GLOBAL], n).await?;
    (r.check_cost_per_step_s, r.check_cost_rollout_per_step_s) = check_cost(&replace, &checked);
    r.replace = Some(replace);
    r.checked = Some(checked);

    if with_restart {
        let ten = instances("t", 10);
        let dir =
            units::write(&ctx.dir.path().join("t"), &[(units::TEMPLATE.into(), units::template("v1"))]).map_err(io)?;
        let mut args = vec!["start"];
        args.extend(ten.iter().map(String::as_str));
        ctx.fleetctl_in(Some(&dir), &args).await?;
        let ten_ref = &ten;
        let up = poll::until(Instant::now(), opts.poll, opts.timeout, 10, || async move {
            let count =
                ctx.list_units().await?.iter().filter(|row| ten_ref.contains(&row.unit) && row.running()).count();
            Ok(Progress { count, done: count == 10 })
        })
        .await;
        if up.done_s.is_none() {
            return Err(format!("10 instances not active/running within {:?}", opts.timeout));
        }
        let mut args = vec!["restart", "--rolling", "--max-unavailable=2", "--min-healthy=0s"];
        args.extend(ten.iter().map(String::as_str));
        r.restart = Some(rolling(ctx, Some(&dir), &args, 10).await?);
    }
    Ok(())
}

/// What the health check costs per step, by the command's time and by the engine's timeline: with − without
/// (`None` where either run failed or has no timeline).
pub fn check_cost(without: &RollingTiming, with: &RollingTiming) -> (Option<f64>, Option<f64>) {
    let ok = |t: &RollingTiming| t.command_error.is_none();
    let command = (ok(without) && ok(with)).then_some(with.per_step_s - without.per_step_s);
    let rollout = with.rollout_per_step_s.zip(without.rollout_per_step_s).map(|(a, b)| a - b);
    (command, rollout)
}

/// `systemctl stop` + `systemctl start` of the unit in machine 1, timed inside the machine, in seconds.
async fn floor(ctx: &Ctx) -> Result<f64, String> {
    let script = format!(
        "t0=$(date +%s%N); systemctl stop {GLOBAL} && systemctl start {GLOBAL} && t1=$(date +%s%N) && echo $((t1 - t0))"
    );
    let machine = ctx.cluster.machine(1).map_err(|e| e.to_string())?;
    let out = machine.exec(&["sh", "-c", &script]).await.map_err(|e| e.to_string())?;
    let ns: u64 = out.stdout.trim().parse().map_err(|_| format!("floor measurement: {}", out.describe()))?;
    Ok(ns as f64 / 1e9)
}

/// Runs a rolling fleetctl command (blocking until the rollout ends) and reads its timeline from the API.
async fn rolling(
    ctx: &Ctx,
    dir: Option<&std::path::Path>,
    args: &[&str],
    steps: usize,
) -> Result<RollingTiming, String> {
    let t0 = Instant::now();
    let res = ctx.fleetctl_in(dir, args).await;
    let command_s = secs(t0.elapsed());
    let command_error = match res {
        Ok((out, _)) if out.success() => None,
        Ok((out, _)) => Some(format!("fleetctl {}: {}", args.join(" "), out.describe())),
        Err(e) => Some(e),
    };
    let timeline = match timeline(ctx).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the rollout's timeline");
            Vec::new()
        }
    };
    let rollout_s = timeline.iter().map(|s| s.healthy_ms).max().filter(|ms| *ms > 0).map(|ms| ms as f64 / 1000.0);
    Ok(RollingTiming {
        steps,
        command_s,
        per_step_s: command_s / steps.max(1) as f64,
        rollout_s,
        rollout_per_step_s: rollout_s.map(|s| s / steps.max(1) as f64),
        command_error,
        timeline,
    })
}

/// The newest rollout's steps from `GET /fleet/v1/rollouts` on machine 1's API (plain HTTP/1.0 on its TCP port).
async fn timeline(ctx: &Ctx) -> Result<Vec<StepTiming>, String> {
    let endpoint = ctx.cluster.machine(1).map_err(|e| e.to_string())?.endpoint();
    let addr = endpoint.trim_start_matches("http://").to_string();
    let body = tokio::time::timeout(Duration::from_secs(10), async {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
        let request = format!("GET /fleet/v1/rollouts HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(String::from_utf8_lossy(&raw).into_owned())
    })
    .await
    .map_err(|_| "GET /fleet/v1/rollouts timed out".to_string())??;
    let json = body.split_once("\r\n\r\n").map(|(_, b)| b).ok_or("no HTTP body")?;
    parse_timeline(json)
}

/// The newest rollout of a `{"rollouts":[...]}` answer (newest first) as step timings.
pub fn parse_timeline(json: &str) -> Result<Vec<StepTiming>, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("rollouts answer: {e}"))?;
    let newest = v["rollouts"].get(0).ok_or("no rollout in the answer")?;
    let created = newest["createdMs"].as_i64().unwrap_or(0);
    let steps = newest["steps"].as_array().ok_or("rollout without steps")?;
    let rel = |s: &serde_json::Value, k: &str| s[k].as_i64().filter(|t| *t > 0).map_or(-1, |t| t - created);
    let mut out: Vec<StepTiming> = steps
        .iter()
        .map(|s| StepTiming {
            machine: s["machine"].as_str().unwrap_or_default().chars().take(8).collect(),
            released_ms: rel(s, "releasedMs"),
            healthy_ms: rel(s, "healthySinceMs"),
        })
        .collect();
    out.sort_by_key(|s| s.released_ms);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_rollouts_steps_in_release_order_relative_to_its_creation() {
        let json = r#"{"rollouts":[{"createdMs":1000,"steps":[
            {"machine":"bbbbbbbb2222","releasedMs":1500,"healthySinceMs":1900},
            {"machine":"aaaaaaaa1111","releasedMs":1010,"healthySinceMs":1400}]},
            {"createdMs":1,"steps":[]}]}"#;
        let t = parse_timeline(json).unwrap();
        let want = [("aaaaaaaa", 10, 400), ("bbbbbbbb", 500, 900)];
        assert_eq!(t.iter().map(|s| (s.machine.as_str(), s.released_ms, s.healthy_ms)).collect::<Vec<_>>(), want);
        assert!(parse_timeline(r#"{"rollouts":[]}"#).unwrap_err().contains("no rollout"));
    }

    #[test]
    fn the_checks_cost_is_with_minus_without_per_step() {
        let t = |per_step_s, rollout: Option<f64>| RollingTiming {
            steps: 3,
            per_step_s,
            rollout_per_step_s: rollout,
            ..Default::default()
        };
        let (command, rollout) = check_cost(&t(0.05, Some(0.04)), &t(0.2, Some(0.17)));
        assert!((command.unwrap() - 0.15).abs() < 1e-9 && (rollout.unwrap() - 0.13).abs() < 1e-9);
        let failed = RollingTiming { command_error: Some("x".into()), ..t(0.2, None) };
        assert_eq!(check_cost(&t(0.05, Some(0.04)), &failed), (None, None));
        assert!(checked_unit("v3").contains("[X-Fleet]\nGlobal=true\nHealthCheck=true\nHealthCheckInterval="));
    }
}

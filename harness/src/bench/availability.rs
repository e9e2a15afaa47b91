//! The availability scenario (issue 34's "Done when"): how many machines still **serve** a global unit while it is
//! changed by a rollout, measured by sampling inside the machines, on a fresh cluster per machine count.
//!
//! The unit stands for a database node: each start removes its ready marker, "syncs" for 2 s, then writes the
//! marker; its health check (`[X-Fleet] HealthCheck=test -e /run/avail.ready`, every 500 ms) passes once the marker
//! is there; its stop takes 2 s (`ExecStop=/bin/sleep 2`), so two machines down at once would be seen. A machine
//! **serves** when the unit is `active` in its systemd **and** the check command passes there.
//!
//! The **sampler** is one long-running bash loop per machine (`docker exec`, read as a stream): every ~100 ms it
//! prints `<EPOCHREALTIME> <systemctl is-active> <exit status of /bin/sh -c CHECK>`. The machines share the host's
//! clock, so their lines fold into one timeline ([`fold`]): after every line, the number of machines whose latest
//! line says serving; the fewest over the operation, when, and for how long each count held.
//!
//! Operations, one after the other, each under its own sampler, each begun once every machine serves and fleet's
//! own view (`GET /fleet/v1/state`) has the unit active and healthy everywhere (a rollout begun before an agent
//! published `healthy` takes that machine for one that is down, and may change it together with another):
//! * **replace**: `fleetctl start --replace --rolling --min-healthy=1s` of version 2 (exit 0);
//! * **rollback**: version 3, whose `ExecStartPre=` fails on the second machine of the rollout (machine-ID order),
//!   with `--on-failure=rollback`: the first machine changes, the second fails, both are undone step by step
//!   (exit 3, `rolled_back`);
//! * **abort**: version 4 with `--min-healthy=5s --no-block`, `fleetctl rollout-abort` once the second machine's
//!   step is no longer pending, then `fleetctl rollout-status` until it ends (exit 4, `aborted`). An undo that
//!   pauses (an undo step failed) is an error of the operation, and is resumed (`rollout-resume`, at most twice)
//!   so that the window still covers the whole undo.
//!
//! With `maxUnavailable` 1 the target is: fewest serving ≥ N − 1. As a check of the sampler itself, each operation
//! must have seen the machines it changes go down (all N for the replace, at least 2 for the others): a sampler that
//! counted every machine as serving would report an error rather than a perfect figure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;

use super::ctx::Ctx;
use super::options::Options;
use super::stats::secs;
use super::units;

pub const UNIT: &str = "avail.service";
/// The unit's health check, run by fleet's agent (as `/bin/sh -c CHECK`) and by the sampler alike.
pub const CHECK: &str = "test -e /run/avail.ready";
/// The sampler's cadence: the sleep between two samples of a machine.
const SAMPLE_EVERY: &str = "0.1";
/// Longest wait for a sampler to print its last line after being told to stop.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// Longest wait for every machine to serve before an operation (the unit syncs for 2 s).
const SERVING_WAIT: Duration = Duration::from_secs(120);

/// One line of a machine's sampler.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Index of the machine (0-based, slot order).
    pub machine: usize,
    /// Unix time, seconds.
    pub t: f64,
    /// `systemctl is-active`.
    pub active: String,
    /// The health check passed.
    pub check: bool,
}

impl Sample {
    pub fn serving(&self) -> bool {
        self.active == "active" && self.check
    }
}

/// `<EPOCHREALTIME> <is-active> <check exit status>` → a sample; `None` for anything else (a shell error line).
pub fn parse_line(machine: usize, line: &str) -> Option<Sample> {
    let mut f = line.split_whitespace();
    let t: f64 = f.next()?.parse().ok()?;
    let active = f.next()?.to_string();
    let check = f.next()?.parse::<i32>().ok()? == 0;
    if f.next().is_some() || !t.is_finite() || active.is_empty() {
        return None;
    }
    Some(Sample { machine, t, active, check })
}

/// The samples of an operation folded into machines serving over time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Fold {
    /// Samples inside the window.
    pub samples: usize,
    /// Counts taken: at the window's start and after each sample inside it, once every machine had reported.
    pub rounds: usize,
    pub fewest: Option<usize>,
    /// Seconds after the window's start when the count first reached `fewest`.
    pub fewest_at_s: Option<f64>,
    /// Machines (0-based) not serving at that moment.
    pub fewest_down: Vec<usize>,
    /// Seconds the count held each value (count → seconds) within the window.
    pub seconds_at: BTreeMap<usize, f64>,
    /// Every change of the count: (seconds after the window's start, machines serving).
    pub changes: Vec<(f64, usize)>,
    /// Machines seen not serving at least once inside the window.
    pub seen_down: BTreeSet<usize>,
    /// Time between two samples of the same machine inside the window: mean and longest, ms.
    pub mean_gap_ms: Option<f64>,
    pub max_gap_ms: Option<f64>,
    /// Machines without any sample up to the window's end.
    pub never_sampled: Vec<usize>,
}

/// Folds the samples of `machines` machines into the count of machines serving in the window `[t0, t1]` (Unix
/// seconds). A machine's state is its latest sample; samples before `t0` give the state at the start. Counts are
/// taken only while every machine has reported.
pub fn fold(samples: &[Sample], machines: usize, t0: f64, t1: f64) -> Fold {
    let mut sorted: Vec<&Sample> = samples.iter().filter(|s| s.machine < machines && s.t <= t1).collect();
    sorted.sort_by(|a, b| a.t.total_cmp(&b.t));
    let mut state: Vec<Option<bool>> = vec![None; machines];
    let mut last_seen: Vec<Option<f64>> = vec![None; machines];
    let mut gaps: Vec<f64> = Vec::new();
    let mut f = Fold::default();
    let serving = |state: &[Option<bool>]| -> Option<usize> {
        state.iter().all(Option::is_some).then(|| state.iter().filter(|s| **s == Some(true)).count())
    };
    // The state at t0.
    let mut i = 0;
    while i < sorted.len() && sorted[i].t < t0 {
        state[sorted[i].machine] = Some(sorted[i].serving());
        i += 1;
    }
    let mut current: Option<(f64, usize)> = None; // since when, count
    let observe = |f: &mut Fold, at: f64, state: &[Option<bool>], current: &mut Option<(f64, usize)>| {
        let Some(count) = serving(state) else { return };
        f.rounds += 1;
        if current.is_none_or(|(_, c)| c != count) {
            if let Some((since, c)) = *current {
                *f.seconds_at.entry(c).or_default() += at - since;
            }
            *current = Some((at, count));
            f.changes.push((round_ms(at - t0), count));
        }
        if f.fewest.is_none_or(|m| count < m) {
            f.fewest = Some(count);
            f.fewest_at_s = Some(round_ms(at - t0));
            f.fewest_down = (0..machines).filter(|m| state[*m] != Some(true)).collect();
        }
    };
    observe(&mut f, t0, &state, &mut current);
    for s in &sorted[i..] {
        f.samples += 1;
        state[s.machine] = Some(s.serving());
        if !s.serving() {
            f.seen_down.insert(s.machine);
        }
        if let Some(prev) = last_seen[s.machine] {
            gaps.push((s.t - prev) * 1e3);
        }
        last_seen[s.machine] = Some(s.t);
        observe(&mut f, s.t, &state, &mut current);
    }
    if let Some((since, c)) = current {
        *f.seconds_at.entry(c).or_default() += t1 - since;
    }
    for v in f.seconds_at.values_mut() {
        *v = round_ms(*v);
    }
    if !gaps.is_empty() {
        f.mean_gap_ms = Some((gaps.iter().sum::<f64>() / gaps.len() as f64 * 10.0).round() / 10.0);
        f.max_gap_ms = gaps.iter().copied().reduce(f64::max).map(|g| (g * 10.0).round() / 10.0);
    }
    f.never_sampled = (0..machines).filter(|m| state[*m].is_none()).collect();
    f
}

fn round_ms(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// One long-running sampling loop per machine, read as streams.
struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    /// Bumped on every sample (and when a stream ends).
    seen: watch::Receiver<u64>,
    /// Why streams ended (a machine's docker exec exited), with their machine.
    ended: Arc<Mutex<Vec<(usize, String)>>>,
    /// Lines that were not samples (shell errors), first few kept.
    stray: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop_file: String,
    machines: usize,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The bash loop of one machine: `EPOCHREALTIME is-active check-exit` every ~100 ms until `stop_file` exists (at
/// most `cap_s` seconds, should the bench die before telling it to stop).
fn sampler_script(stop_file: &str, cap_s: u64) -> String {
    assert!(!CHECK.contains('\''), "the check is quoted in single quotes");
    format!(
        "rm -f {stop_file}; end=$((SECONDS + {cap_s})); \
         while [ ! -e {stop_file} ] && [ \"$SECONDS\" -lt \"$end\" ]; do \
         t=$EPOCHREALTIME; a=$(systemctl is-active {UNIT}); /bin/sh -c '{CHECK}' >/dev/null 2>&1; c=$?; \
         echo \"$t $a $c\"; sleep {SAMPLE_EVERY}; done"
    )
}

impl Sampler {
    async fn start(ctx: &Ctx, tag: &str, cap: Duration) -> Result<Sampler, String> {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(Mutex::new(Vec::new()));
        let stray = Arc::new(Mutex::new(Vec::new()));
        let (tx, seen) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let stop_file = format!("/run/avail-sampler-{tag}.stop");
        let script = sampler_script(&stop_file, cap.as_secs().max(60));
        let names = ctx.machine_names();
        let mut tasks = Vec::new();
        for (machine, container) in names.iter().enumerate() {
            let mut child = tokio::process::Command::new("docker")
                .args(["exec", container, "bash", "-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("sampler: cannot run docker exec in {container}: {e}"))?;
            let stdout = child.stdout.take().ok_or("sampler: no stdout")?;
            let (samples, ended, stray, tx) = (samples.clone(), ended.clone(), stray.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let _child = child;
                let mut lines = BufReader::new(stdout).lines();
                let why = loop {
                    match lines.next_line().await {
                        Ok(Some(line)) => match parse_line(machine, &line) {
                            Some(s) => {
                                samples.lock().unwrap().push(s);
                                tx.send_modify(|n| *n += 1);
                            }
                            None => {
                                let mut stray = stray.lock().unwrap();
                                if stray.len() < 5 {
                                    stray.push(format!("machine {}: {line}", machine + 1));
                                }
                            }
                        },
                        Ok(None) => break "ended".to_string(),
                        Err(e) => break format!("read error: {e}"),
                    }
                };
                ended.lock().unwrap().push((machine, why));
                tx.send_modify(|n| *n += 1);
            }));
        }
        Ok(Sampler { samples, seen, ended, stray, tasks, stop_file, machines: names.len() })
    }

    /// Each machine's latest sample.
    fn latest(&self) -> Vec<Option<Sample>> {
        let mut latest: Vec<Option<Sample>> = vec![None; self.machines];
        for s in self.samples.lock().unwrap().iter() {
            if latest[s.machine].as_ref().is_none_or(|l| l.t <= s.t) {
                latest[s.machine] = Some(s.clone());
            }
        }
        latest
    }

    /// Waits until every machine's latest sample serves; on timeout, or when a stream ends, the error names each
    /// machine's last sample.
    async fn until_all_serving(&mut self, ctx: &Ctx, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let names = ctx.machine_names();
        loop {
            self.seen.borrow_and_update();
            let latest = self.latest();
            if latest.iter().all(|s| s.as_ref().is_some_and(Sample::serving)) {
                return Ok(());
            }
            let describe = || {
                latest
                    .iter()
                    .enumerate()
                    .map(|(m, s)| match s {
                        Some(s) => format!("{} {} check {}", names[m], s.active, if s.check { "ok" } else { "fails" }),
                        None => format!("{} no sample", names[m]),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if let Some((m, why)) = self.ended.lock().unwrap().first() {
                return Err(format!("sampler of {} {why}; last samples: {}", names[*m], describe()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, self.seen.changed()).await.is_err() {
                return Err(format!(
                    "not every machine serving {UNIT} within {timeout:?}; last samples: {}",
                    describe()
                ));
            }
        }
    }

    /// Tells every loop to stop, waits for the streams to end (bounded), and returns all samples with the
    /// problems seen (stray lines, streams that ended early).
    async fn stop(mut self, ctx: &Ctx, stopped_at: f64) -> (Vec<Sample>, Vec<String>) {
        let stop_file = self.stop_file.as_str();
        let touch = ctx.cluster.machines().iter().map(|m| async move { m.exec(&["touch", stop_file]).await });
        let mut problems: Vec<String> = futures::future::join_all(touch)
            .await
            .into_iter()
            .filter_map(|r| r.err().map(|e| format!("stopping a sampler: {e}")))
            .collect();
        let deadline = Instant::now() + STOP_WAIT;
        for task in &mut self.tasks {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, task).await.is_err() {
                problems.push(format!("a sampler did not stop within {STOP_WAIT:?}"));
                break;
            }
        }
        let names = ctx.machine_names();
        for (m, why) in self.ended.lock().unwrap().iter() {
            let last = self.samples.lock().unwrap().iter().filter(|s| s.machine == *m).map(|s| s.t).reduce(f64::max);
            if last.is_none_or(|t| t < stopped_at - 1.0) {
                problems.push(format!("sampler of {} {why} early (last sample {:?})", names[*m], last));
            }
        }
        problems.extend(self.stray.lock().unwrap().iter().map(|l| format!("sampler printed: {l}")));
        let samples = std::mem::take(&mut *self.samples.lock().unwrap());
        (samples, problems)
    }
}

/// A rollout step as the engine recorded it, ms after the rollout's creation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Step {
    pub machine: String,
    pub phase: String,
    pub released_ms: i64,
    pub healthy_ms: i64,
    /// A step of the undo.
    pub undo: bool,
}

/// The newest rollout as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Rollout {
    pub id: String,
    pub state: String,
    pub steps: Vec<Step>,
}

/// The newest rollout of a `{"rollouts":[...]}` answer (newest first), forward steps then undo steps.
pub fn parse_rollout(json: &str) -> Result<Rollout, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("rollouts answer: {e}"))?;
    let newest = v["rollouts"].get(0).ok_or("no rollout in the answer")?;
    let created = newest["createdMs"].as_i64().unwrap_or(0);
    let rel = |s: &serde_json::Value, k: &str| s[k].as_i64().filter(|t| *t > 0).map_or(-1, |t| t - created);
    let steps = |key: &str, undo: bool| {
        newest[key].as_array().into_iter().flatten().map(move |s| Step {
            machine: s["machine"].as_str().unwrap_or_default().to_string(),
            phase: s["phase"].as_str().unwrap_or_default().to_string(),
            released_ms: rel(s, "releasedMs"),
            healthy_ms: rel(s, "healthySinceMs"),
            undo,
        })
    };
    Ok(Rollout {
        id: newest["id"].as_str().unwrap_or_default().to_string(),
        state: newest["state"].as_str().unwrap_or_default().to_string(),
        steps: steps("steps", false).chain(steps("undo", true)).collect(),
    })
}

/// `GET path` on machine 1's API (plain HTTP/1.0 on its TCP port): the body.
async fn api_get(ctx: &Ctx, path: &str) -> Result<String, String> {
    let endpoint = ctx.cluster.machine(1).map_err(|e| e.to_string())?.endpoint();
    let addr = endpoint.trim_start_matches("http://").to_string();
    let body = tokio::time::timeout(Duration::from_secs(10), async {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(String::from_utf8_lossy(&raw).into_owned())
    })
    .await
    .map_err(|_| format!("GET {path} timed out"))??;
    body.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).ok_or_else(|| format!("GET {path}: no HTTP body"))
}

/// The newest rollout.
async fn newest_rollout(ctx: &Ctx) -> Result<Rollout, String> {
    parse_rollout(&api_get(ctx, "/fleet/v1/rollouts").await?)
}

/// fleet's own view of the unit (`GET /fleet/v1/state`): how many machines report it `active` and, for a unit
/// with a check, `healthy`; and each state in a few words.
pub fn fleet_view(json: &str, check: bool) -> Result<(usize, String), String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("state answer: {e}"))?;
    let states: Vec<&serde_json::Value> =
        v["states"].as_array().into_iter().flatten().filter(|s| s["name"] == UNIT).collect();
    let ready =
        |s: &serde_json::Value| s["systemdActiveState"] == "active" && (!check || s["health"]["status"] == "healthy");
    let words: Vec<String> = states
        .iter()
        .map(|s| {
            let machine = s["machineID"].as_str().unwrap_or_default();
            let health = s["health"]["status"].as_str().unwrap_or("no health");
            format!("{} {} {health}", &machine[..machine.len().min(8)], s["systemdActiveState"].as_str().unwrap_or("-"))
        })
        .collect();
    Ok((states.iter().filter(|s| ready(s)).count(), words.join(", ")))
}

/// Waits (polling every 100 ms) until fleet's view has the unit active — and healthy, with a check — on all
/// `machines`: a rollout begun earlier would take a machine whose health is not yet published for one that is
/// down. The error names the states last seen.
async fn until_fleet_ready(ctx: &Ctx, machines: usize, check: bool, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let path = format!("/fleet/v1/state?unitName={UNIT}");
    let mut last;
    loop {
        let started = Instant::now();
        match api_get(ctx, &path).await.and_then(|body| fleet_view(&body, check)) {
            Ok((ready, _)) if ready >= machines => return Ok(()),
            Ok((_, words)) => last = words,
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "fleet's view: {UNIT} not active and healthy on {machines} within {timeout:?}; last: {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100).saturating_sub(started.elapsed())).await;
    }
}

/// One operation under the sampler.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OpReport {
    /// `replace`, `rollback`, `abort`.
    pub op: String,
    /// The fleetctl commands, in order.
    pub commands: Vec<String>,
    pub expected_exit: i32,
    /// Before the operation: how long after the sampler saw every machine serve fleet's view had the unit active
    /// and healthy everywhere (the operation starts after both).
    pub fleet_view_lag_s: Option<f64>,
    /// Exit status of the command that waited for the end (`start --replace --rolling`, or `rollout-status`).
    pub exit_code: Option<i32>,
    /// From the first command until the waiting one returned.
    pub duration_s: f64,
    /// The rollout as the API showed it afterwards.
    pub rollout: Option<Rollout>,
    /// Machines serving over the operation.
    pub serving: Fold,
    /// At least this many machines must be seen not serving (the ones the operation restarts).
    pub expected_down: usize,
    /// `serving.fewest ≥ machines − 1`.
    pub meets_target: Option<bool>,
    pub errors: Vec<String>,
}

/// The scenario on one cluster size.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AvailabilityReport {
    pub machines: usize,
    /// Machine hostnames and IDs (prefix) in rollout order (machine ID).
    pub rollout_order: Vec<String>,
    /// The unit had its health check (`--availability-no-check` runs it without).
    pub health_check: bool,
    pub ops: Vec<OpReport>,
    pub errors: Vec<String>,
}

impl AvailabilityReport {
    pub fn failed(&self) -> bool {
        !self.errors.is_empty() || self.ops.iter().any(|o| !o.errors.is_empty())
    }
}

/// The unit, version `version`; `extra` lines go into `[Service]` before `ExecStart=`.
pub fn unit_file(version: &str, extra: &str, check: bool) -> String {
    let check = if check { format!("HealthCheck={CHECK}\nHealthCheckInterval=500ms\n") } else { String::new() };
    format!(
        "[Unit]\nDescription=availability bench ({version})\n\n[Service]\nEnvironment=AVAIL_VERSION={version}\n\
         ExecStartPre=/bin/rm -f /run/avail.ready\n{extra}\
         ExecStart=/bin/sh -c 'sleep 2; touch /run/avail.ready; exec sleep infinity'\n\
         ExecStop=/bin/sleep 2\n\n[X-Fleet]\nGlobal=true\n{check}"
    )
}

/// Runs the scenario on `machines` machines; failures land in `errors`.
pub async fn run(opts: &Options, machines: usize) -> AvailabilityReport {
    let mut r = AvailabilityReport { machines, health_check: opts.availability_check, ..Default::default() };
    let opts = Options { machines, ..opts.clone() };
    match Ctx::new(&opts).await {
        Ok(ctx) => {
            if let Err(e) = scenario(&ctx, &opts, &mut r).await {
                r.errors.push(e);
            }
            ctx.finish().await;
        }
        Err(e) => r.errors.push(e),
    }
    r
}

async fn scenario(ctx: &Ctx, opts: &Options, r: &mut AvailabilityReport) -> Result<(), String> {
    let n = opts.machines;
    let check = opts.availability_check;
    // Rollout order: machine ID.
    let mut order: Vec<(String, String)> =
        ctx.cluster.machines().iter().map(|m| (m.id().to_string(), m.name().to_string())).collect();
    order.sort();
    r.rollout_order = order.iter().map(|(id, name)| format!("{name} {}", &id[..id.len().min(8)])).collect();
    let second = order.get(1).map(|(id, _)| id.clone()).ok_or("the scenario needs at least 2 machines")?;

    let io = |e: std::io::Error| e.to_string();
    let dir = |v: &str, extra: &str| {
        units::write(&ctx.dir.path().join(v), &[(UNIT.into(), unit_file(v, extra, check))]).map_err(io)
    };
    let v1 = dir("v1", "")?;
    let v2 = dir("v2", "")?;
    let fails_on_second = format!("ExecStartPre=/bin/grep -qvx {second} /etc/machine-id\n");
    let v3 = dir("v3", &fails_on_second)?;
    let v4 = dir("v4", "")?;

    let (out, _) = ctx.fleetctl_in(Some(&v1), &["start", UNIT]).await?;
    if !out.success() {
        return Err(format!("fleetctl start {UNIT}: {}", out.describe()));
    }

    let replace = ["start", "--replace", "--rolling", "--min-healthy=1s", UNIT];
    r.ops.push(blocking_op(ctx, opts, "replace", &v2, &replace, 0, n).await);

    let rollback = ["start", "--replace", "--rolling", "--min-healthy=1s", "--on-failure=rollback", UNIT];
    r.ops.push(blocking_op(ctx, opts, "rollback", &v3, &rollback, 3, 2).await);

    r.ops.push(abort_op(ctx, opts, &v4, &second).await);
    Ok(())
}

/// Starts a sampler and waits until every machine serves, then until fleet's view agrees; returns the sampler,
/// the window's start and how long fleet's view took after the sampler's.
async fn sampled(ctx: &Ctx, opts: &Options, op: &str) -> Result<(Sampler, f64, f64), String> {
    let mut sampler = Sampler::start(ctx, op, opts.timeout + SERVING_WAIT).await?;
    sampler.until_all_serving(ctx, SERVING_WAIT).await?;
    let serving = Instant::now();
    until_fleet_ready(ctx, opts.machines, opts.availability_check, SERVING_WAIT).await?;
    Ok((sampler, now_unix(), round_ms(secs(serving.elapsed()))))
}

/// The sampler's samples folded over `[t0, now]`, and the checks of the figures.
async fn finish(ctx: &Ctx, sampler: Sampler, t0: f64, r: &mut OpReport, machines: usize) {
    let t1 = now_unix();
    let (samples, problems) = sampler.stop(ctx, t1).await;
    r.errors.extend(problems);
    r.serving = fold(&samples, machines, t0, t1);
    r.meets_target = r.serving.fewest.map(|f| f + 1 >= machines);
    r.errors.extend(plausibility(&r.serving, r.expected_down));
    match newest_rollout(ctx).await {
        Ok(rollout) => r.rollout = Some(rollout),
        Err(e) => r.errors.push(format!("reading the rollout: {e}")),
    }
}

/// What says the sampler itself cannot be trusted for this operation.
pub fn plausibility(f: &Fold, expected_down: usize) -> Vec<String> {
    let mut out = Vec::new();
    if !f.never_sampled.is_empty() {
        out.push(format!("no sample from machine(s) {:?}", f.never_sampled.iter().map(|m| m + 1).collect::<Vec<_>>()));
    }
    if f.fewest.is_none() {
        out.push("no count of machines serving taken".into());
    }
    if f.seen_down.len() < expected_down {
        out.push(format!(
            "the sampler saw {} machine(s) not serving, the operation restarts at least {expected_down}: \
             the sampler (or the operation) is not what it seems",
            f.seen_down.len()
        ));
    }
    out
}

fn exit_check(r: &mut OpReport, what: &str, out: &Result<(crate::output::Output, Duration), String>) {
    match out {
        Ok((o, _)) => {
            r.exit_code = Some(o.status);
            if o.status != r.expected_exit {
                r.errors.push(format!("{what}: expected exit {}, {}", r.expected_exit, o.describe()));
            }
        }
        Err(e) => r.errors.push(format!("{what}: {e}")),
    }
}

/// A rolling command that waits for the rollout's end, under the sampler.
async fn blocking_op(
    ctx: &Ctx,
    opts: &Options,
    op: &str,
    dir: &std::path::Path,
    args: &[&str],
    expected_exit: i32,
    expected_down: usize,
) -> OpReport {
    let command = format!("fleetctl {}", args.join(" "));
    let mut r =
        OpReport { op: op.into(), commands: vec![command.clone()], expected_exit, expected_down, ..Default::default() };
    let (sampler, t0) = match sampled(ctx, opts, op).await {
        Ok((s, t0, lag)) => {
            r.fleet_view_lag_s = Some(lag);
            (s, t0)
        }
        Err(e) => {
            r.errors.push(e);
            return r;
        }
    };
    tracing::info!(machines = opts.machines, op, "availability: {command}");
    let started = Instant::now();
    let out = ctx.fleetctl_in(Some(dir), args).await;
    r.duration_s = secs(started.elapsed());
    exit_check(&mut r, &command, &out);
    finish(ctx, sampler, t0, &mut r, opts.machines).await;
    r
}

/// A rolling replace with `--min-healthy=5s`, aborted once the second machine's step is under way, followed with
/// `rollout-status` until it ends.
async fn abort_op(ctx: &Ctx, opts: &Options, dir: &std::path::Path, second: &str) -> OpReport {
    let start = ["start", "--replace", "--rolling", "--min-healthy=5s", "--no-block", UNIT];
    let abort = ["rollout-abort", UNIT];
    let status = ["rollout-status", UNIT];
    let resume = ["rollout-resume", UNIT];
    let line = |a: &[&str]| format!("fleetctl {}", a.join(" "));
    let mut r = OpReport {
        op: "abort".into(),
        commands: vec![line(&start), format!("(second machine's step not pending) {}", line(&abort)), line(&status)],
        expected_exit: 4,
        expected_down: 2,
        ..Default::default()
    };
    let (sampler, t0) = match sampled(ctx, opts, "abort").await {
        Ok((s, t0, lag)) => {
            r.fleet_view_lag_s = Some(lag);
            (s, t0)
        }
        Err(e) => {
            r.errors.push(e);
            return r;
        }
    };
    tracing::info!(machines = opts.machines, "availability: abort");
    let started = Instant::now();
    let steps = async {
        let (out, _) = ctx.fleetctl_in(Some(dir), &start).await?;
        if !out.success() {
            return Err(format!("{}: {}", line(&start), out.describe()));
        }
        until_in_flight(ctx, second, opts.timeout).await?;
        let (out, _) = ctx.fleetctl_in(Some(dir), &abort).await?;
        if !out.success() {
            return Err(format!("{}: {}", line(&abort), out.describe()));
        }
        Ok(())
    };
    match steps.await {
        Ok(()) => {
            let mut out = ctx.fleetctl_in(Some(dir), &status).await;
            // An undo step that fails pauses the undo (docs/rollouts.md): said as an error, then resumed (at most
            // twice) so that the window still covers the whole undo.
            for _ in 0..2 {
                let Ok((o, _)) = &out else { break };
                let Some(why) = o.stdout.lines().find(|l| l.contains("paused while rolling back")) else { break };
                if o.status != 2 {
                    break;
                }
                r.errors.push(format!("the undo paused after {:.1} s ({why}); resumed", secs(started.elapsed())));
                r.commands.push(format!("(undo paused) {}", line(&resume)));
                match ctx.fleetctl_in(Some(dir), &resume).await {
                    Ok((o, _)) if o.success() => {}
                    Ok((o, _)) => {
                        r.errors.push(format!("{}: {}", line(&resume), o.describe()));
                        break;
                    }
                    Err(e) => {
                        r.errors.push(format!("{}: {e}", line(&resume)));
                        break;
                    }
                }
                r.commands.push(line(&status));
                out = ctx.fleetctl_in(Some(dir), &status).await;
            }
            r.duration_s = secs(started.elapsed());
            exit_check(&mut r, &line(&status), &out);
        }
        Err(e) => {
            r.duration_s = secs(started.elapsed());
            r.errors.push(e);
        }
    }
    finish(ctx, sampler, t0, &mut r, opts.machines).await;
    r
}

/// Polls the newest rollout (every 100 ms) until the step of machine `id` is no longer pending; the error names
/// the phases last seen.
async fn until_in_flight(ctx: &Ctx, id: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        let started = Instant::now();
        match newest_rollout(ctx).await {
            Ok(ro) => {
                if ro.steps.iter().any(|s| !s.undo && same_machine(&s.machine, id) && s.phase != "pending") {
                    return Ok(());
                }
                let phases: Vec<String> =
                    ro.steps.iter().map(|s| format!("{} {}", &s.machine[..8.min(s.machine.len())], s.phase)).collect();
                last = format!("rollout {} {}: {}", ro.id, ro.state, phases.join(", "));
                if ro.state != "running" {
                    return Err(format!("the rollout ended before the second machine's step: {last}"));
                }
            }
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            return Err(format!("second machine's step not under way within {timeout:?}; last seen: {last}"));
        }
        tokio::time::sleep(Duration::from_millis(100).saturating_sub(started.elapsed())).await;
    }
}

/// A step's machine (the API's ID, possibly shortened) is machine `id`.
fn same_machine(step: &str, id: &str) -> bool {
    !step.is_empty() && id.starts_with(step)
}

/// The scenario's table: one column per machine count and operation.
pub fn table(reports: &[AvailabilityReport]) -> String {
    let cols: Vec<(&AvailabilityReport, &OpReport)> =
        reports.iter().flat_map(|r| r.ops.iter().map(move |o| (r, o))).collect();
    let col = |f: &dyn Fn(&AvailabilityReport, &OpReport) -> String| -> Vec<String> {
        cols.iter().map(|(r, o)| f(r, o)).collect()
    };
    let opt = |v: Option<f64>, unit: &str| v.map_or("—".to_string(), |v| format!("{v:.1}{unit}"));
    let rows: Vec<(&str, Vec<String>, &str)> = vec![
        ("machines", col(&|r, _| r.machines.to_string()), "target"),
        ("operation", col(&|_, o| o.op.clone()), ""),
        (
            "exit (expected)",
            col(&|_, o| format!("{} ({})", o.exit_code.map_or("—".into(), |c| c.to_string()), o.expected_exit)),
            "",
        ),
        ("rollout state", col(&|_, o| o.rollout.as_ref().map_or("—".into(), |x| x.state.clone())), ""),
        ("fleet's view healthy after the sampler's", col(&|_, o| opt(o.fleet_view_lag_s, " s")), "(before)"),
        ("duration", col(&|_, o| format!("{:.1} s", o.duration_s)), ""),
        ("samples (counts taken)", col(&|_, o| format!("{} ({})", o.serving.samples, o.serving.rounds)), ""),
        (
            "  per machine every, mean / longest",
            col(&|_, o| format!("{} / {}", opt(o.serving.mean_gap_ms, ""), opt(o.serving.max_gap_ms, " ms"))),
            "",
        ),
        (
            "fewest serving",
            col(&|r, o| {
                o.serving.fewest.map_or("—".into(), |f| {
                    let missed = if o.meets_target == Some(false) { " MISSED" } else { "" };
                    let doubt = if o.errors.is_empty() { "" } else { " (see errors)" };
                    format!("{f} of {}{missed}{doubt}", r.machines)
                })
            }),
            "≥ N − 1",
        ),
        ("  first at", col(&|_, o| opt(o.serving.fewest_at_s, " s")), ""),
        (
            "seconds at each count",
            col(&|_, o| {
                o.serving.seconds_at.iter().rev().map(|(c, s)| format!("{c}: {s:.1}")).collect::<Vec<_>>().join(", ")
            }),
            "",
        ),
        (
            "machines seen not serving",
            col(&|_, o| format!("{} (≥ {})", o.serving.seen_down.len(), o.expected_down)),
            "",
        ),
    ];
    let mut out = super::columns::render(&rows);
    for r in reports {
        let _ = writeln!(
            out,
            "  {} machines{}; rollout order: {}",
            r.machines,
            if r.health_check { "" } else { " (unit WITHOUT its health check)" },
            r.rollout_order.join(", ")
        );
        for o in &r.ops {
            let _ = writeln!(out, "  {} ({} machines): {}", o.op, r.machines, o.commands.join("; "));
            let changes: Vec<String> = o.serving.changes.iter().map(|(t, c)| format!("{t:.1}s→{c}")).collect();
            let _ = writeln!(out, "    serving over time: {}", changes.join(" "));
            if let Some(ro) = &o.rollout {
                let steps: Vec<String> = ro
                    .steps
                    .iter()
                    .map(|s| {
                        let m = &s.machine[..8.min(s.machine.len())];
                        let ms = |v: i64| if v < 0 { "—".to_string() } else { v.to_string() };
                        let undo = if s.undo { "undo " } else { "" };
                        format!("{undo}{m} {} +{}→{} ms", s.phase, ms(s.released_ms), ms(s.healthy_ms))
                    })
                    .collect();
                let _ = writeln!(out, "    rollout {} {}: {}", ro.id, ro.state, steps.join(", "));
            }
            for e in &o.errors {
                let _ = writeln!(out, "    error: {e}");
            }
        }
        for e in &r.errors {
            let _ = writeln!(out, "  error ({} machines): {e}", r.machines);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(machine: usize, t: f64, active: &str, check: bool) -> Sample {
        Sample { machine, t, active: active.into(), check }
    }

    #[test]
    fn sampler_lines_parse() {
        assert_eq!(parse_line(2, "1764870000.123456 active 0"), Some(s(2, 1764870000.123456, "active", true)));
        assert_eq!(parse_line(0, "1764870000.5 deactivating 1"), Some(s(0, 1764870000.5, "deactivating", false)));
        for bad in ["", "bash: systemctl: not found", "1764870000.5 active", "x active 0", "1.0 active 0 extra"] {
            assert_eq!(parse_line(0, bad), None, "{bad:?}");
        }
        let line = "1764870000.25 activating 1";
        assert!(!parse_line(0, line).unwrap().serving());
    }

    #[test]
    fn a_rolling_replace_folds_into_the_fewest_serving_and_when() {
        // Three machines serving; machine 0 goes down at 1.0 (deactivating), back active at 5.0 but its check
        // passes only from 7.0; machine 1 goes down at 9.0 and serves again at 13.0. Machine 2 stays.
        let mut v = vec![s(0, 99.9, "active", true), s(1, 99.95, "active", true), s(2, 99.97, "active", true)];
        v.extend([
            s(2, 100.5, "active", true),
            s(0, 101.0, "deactivating", true),
            s(0, 105.0, "active", false),
            s(0, 107.0, "active", true),
            s(1, 109.0, "inactive", false),
            s(1, 113.0, "active", true),
            s(2, 115.0, "active", true),
        ]);
        let f = fold(&v, 3, 100.0, 116.0);
        assert_eq!(f.samples, 7);
        assert_eq!(f.rounds, 8);
        assert_eq!((f.fewest, f.fewest_at_s, f.fewest_down.clone()), (Some(2), Some(1.0), vec![0]));
        assert_eq!(f.seen_down, [0, 1].into());
        assert_eq!(f.seconds_at, [(2, 10.0), (3, 6.0)].into());
        assert_eq!(f.changes, vec![(0.0, 3), (1.0, 2), (7.0, 3), (9.0, 2), (13.0, 3)]);
        assert_eq!(f.never_sampled, Vec::<usize>::new());
        assert_eq!((f.mean_gap_ms, f.max_gap_ms), (Some(6125.0), Some(14500.0)));
        assert!(plausibility(&f, 2).is_empty());
    }

    #[test]
    fn two_machines_down_at_once_are_the_minimum() {
        let v = vec![
            s(0, 0.0, "active", true),
            s(1, 0.0, "active", true),
            s(0, 1.0, "failed", false),
            s(1, 1.5, "activating", false),
            s(0, 2.0, "active", true),
        ];
        let f = fold(&v, 2, 0.5, 3.0);
        assert_eq!((f.fewest, f.fewest_at_s, f.fewest_down), (Some(0), Some(1.0), vec![0, 1]));
        assert_eq!(f.seconds_at, [(0, 0.5), (1, 1.5), (2, 0.5)].into());
    }

    #[test]
    fn no_count_until_every_machine_reported_and_samples_after_the_window_are_ignored() {
        let v = vec![s(0, 1.0, "inactive", false), s(1, 2.0, "active", true), s(1, 9.0, "inactive", false)];
        let f = fold(&v, 3, 0.0, 5.0);
        assert_eq!((f.fewest, f.rounds, f.never_sampled.clone()), (None, 0, vec![2]));
        let problems = plausibility(&f, 1);
        assert!(problems.iter().any(|p| p.contains("no sample from machine(s) [3]")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("no count")), "{problems:?}");
    }

    #[test]
    fn a_sampler_that_counts_every_machine_as_serving_is_reported() {
        // What a broken sampler (every line "active 0") gives during a replace of 3 machines: a perfect minimum,
        // which the plausibility check refuses.
        let v: Vec<Sample> =
            (0..30).flat_map(|i| (0..3).map(move |m| s(m, f64::from(i) * 0.1, "active", true))).collect();
        let f = fold(&v, 3, 0.0, 3.0);
        assert_eq!(f.fewest, Some(3));
        let problems = plausibility(&f, 3);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("saw 0 machine(s) not serving"), "{problems:?}");
        let r = AvailabilityReport {
            machines: 3,
            health_check: true,
            ops: vec![OpReport {
                op: "replace".into(),
                meets_target: Some(true),
                serving: f,
                expected_down: 3,
                errors: problems,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(r.failed());
        let t = table(&[r]);
        assert!(t.contains("error: the sampler saw 0 machine(s) not serving"), "{t}");
        assert!(t.lines().any(|l| l.contains("machines seen not serving") && l.contains("0 (≥ 3)")), "{t}");
        assert!(t.lines().any(|l| l.contains("fewest serving") && l.contains("3 of 3 (see errors)")), "{t}");
    }

    #[test]
    fn a_missed_target_shows_in_the_table() {
        let f = Fold { fewest: Some(1), fewest_at_s: Some(4.2), ..Default::default() };
        let r = AvailabilityReport {
            machines: 3,
            ops: vec![OpReport { op: "abort".into(), serving: f, meets_target: Some(false), ..Default::default() }],
            ..Default::default()
        };
        let t = table(&[r]);
        assert!(t.lines().any(|l| l.contains("fewest serving") && l.contains("1 of 3 MISSED")), "{t}");
        assert!(t.contains("(unit WITHOUT its health check)"), "{t}");
    }

    #[test]
    fn the_newest_rollout_with_its_undo() {
        let json = r#"{"rollouts":[{"id":"avail-1","state":"rolled_back","createdMs":1000,
            "steps":[{"machine":"aaaa1111","phase":"done","releasedMs":1010,"healthySinceMs":4000},
                     {"machine":"bbbb2222","phase":"failed","releasedMs":5000}],
            "undo":[{"machine":"bbbb2222","phase":"done","releasedMs":7000,"healthySinceMs":9500}]},
            {"id":"old","state":"done","createdMs":1,"steps":[]}]}"#;
        let r = parse_rollout(json).unwrap();
        assert_eq!((r.id.as_str(), r.state.as_str(), r.steps.len()), ("avail-1", "rolled_back", 3));
        assert_eq!(
            r.steps[1],
            Step { machine: "bbbb2222".into(), phase: "failed".into(), released_ms: 4000, healthy_ms: -1, undo: false }
        );
        assert!(r.steps[2].undo && r.steps[2].healthy_ms == 8500);
    }

    #[test]
    fn fleets_view_counts_machines_active_and_healthy() {
        let json = r#"{"states":[
            {"name":"avail.service","machineID":"aaaa1111ffff","systemdActiveState":"active","health":{"status":"healthy"}},
            {"name":"avail.service","machineID":"bbbb2222ffff","systemdActiveState":"active","health":{"status":"unknown"}},
            {"name":"other.service","machineID":"cccc3333ffff","systemdActiveState":"active"},
            {"name":"avail.service","machineID":"dddd4444ffff","systemdActiveState":"activating"}]}"#;
        let (ready, words) = fleet_view(json, true).unwrap();
        assert_eq!(ready, 1);
        assert_eq!(words, "aaaa1111 active healthy, bbbb2222 active unknown, dddd4444 activating no health");
        assert_eq!(fleet_view(json, false).unwrap().0, 2);
        assert_eq!(fleet_view(r#"{}"#, true).unwrap().0, 0);
    }

    #[test]
    fn the_unit_syncs_before_its_check_passes_and_fails_where_told() {
        let u = unit_file("v3", "ExecStartPre=/bin/grep -qvx abc /etc/machine-id\n", true);
        let pre = u.find("ExecStartPre=/bin/rm -f /run/avail.ready").unwrap();
        let fail = u.find("ExecStartPre=/bin/grep").unwrap();
        let start = u.find("ExecStart=/bin/sh -c 'sleep 2; touch /run/avail.ready").unwrap();
        assert!(pre < fail && fail < start, "{u}");
        assert!(u.contains("ExecStop=/bin/sleep 2\n") && u.contains("Global=true\n"), "{u}");
        assert!(u.contains(&format!("HealthCheck={CHECK}\nHealthCheckInterval=500ms\n")), "{u}");
        assert!(!unit_file("v1", "", false).contains("HealthCheck"));
        let script = sampler_script("/run/x.stop", 60);
        assert!(script.contains(&format!("/bin/sh -c '{CHECK}'")), "{script}");
        assert!(script.contains(&format!("systemctl is-active {UNIT}")), "{script}");
    }
}

//! The change driver (I/O): while the faults go on, makes each target's planned changes ([`changes::plan`]) with
//! fleetctl against a machine no fault is touching, follows every rollout it made (`rollout-status ID
//! --output=json`, about once a second) and keeps what fleet said, and after the faults stop waits for each rollout
//! to end (at most its deadline, 5 minutes without one). What it records — the versions it asked for, the rollouts
//! with their observed states, a log of every command and its outcome — is what [`rollcheck`](super::rollcheck)
//! judges.
//!
//! A unit is in at most one rollout that has not ended, so before a change the driver gets the target's previous
//! rollout out of the way: it waits up to [`HELD_PATIENCE`] for it to end, then acts as the change says
//! ([`OnHeld`]: abort, resume, resume skipping the failed steps; a running one is aborted, an undo that paused is
//! resumed skipping its failed steps), and waits again; a change whose target is still held after that is skipped
//! and logged. Nothing is started, and nothing waited for, past the run's `--duration`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::changes::{Change, OnHeld, Op, Pace, Target, Version};
use super::check::secs;
use super::rollcheck::{Asked, Observation, RolloutRecord};
use crate::cluster::Cluster;
use crate::output::Output;

/// How often the driver reads the rollouts it follows.
const POLL: Duration = Duration::from_secs(1);
/// How long the driver lets a target's previous rollout run on before it acts on it.
pub const HELD_PATIENCE: Duration = Duration::from_secs(20);
/// How long it then waits for the rollout to end.
const HELD_END_WAIT: Duration = Duration::from_secs(60);
/// How long an aborted-mid-way change waits for a step to leave `pending` before it aborts anyway.
const ABORT_WAIT: Duration = Duration::from_secs(30);

/// One line of the driver's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub t_ms: u64,
    pub target: Target,
    pub text: String,
}

/// What the driver did and saw.
#[derive(Debug, Clone, Default)]
pub struct Driven {
    pub asked: Vec<Asked>,
    pub rollouts: Vec<RolloutRecord>,
    pub log: Vec<Logged>,
    /// When the driver last sent `rollout-resume --skip-failed`, by rollout (index into `rollouts`).
    pub skip_failed_sent: BTreeMap<usize, u64>,
}

/// From when a step first seen waived at `seen_ms` counts as waived: when the resume that waived it was sent
/// (`sent_ms`: the one the caller knows, else the last `--skip-failed` sent for the rollout), not when a poll first
/// saw it. The engine may act on the resume before any poll shows the waiver (seen in the nemesis hour of stop 47:
/// a take-down 0.3 s after the resume, counted against a machine the user had given up).
pub fn waived_from(sent_ms: Option<u64>, last_skip_failed_ms: Option<u64>, seen_ms: u64) -> u64 {
    sent_ms.or(last_skip_failed_ms).map_or(seen_ms, |sent| sent.min(seen_ms))
}

/// The driver's view of the cluster: where to write unit files, the machines' IDs and names, which machines a fault
/// is touching now (not used as an endpoint), and the run's clock.
pub struct Driver<'a> {
    pub cluster: &'a Cluster,
    pub dir: PathBuf,
    pub faulted: Arc<Mutex<BTreeSet<usize>>>,
    pub t0: Instant,
    /// Unix ms at `t0` (fleet stamps rollouts with the host's wall clock, which the machines share).
    pub wall0_ms: u64,
    pub driven: Mutex<Driven>,
}

fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl<'a> Driver<'a> {
    pub fn new(cluster: &'a Cluster, dir: PathBuf, faulted: Arc<Mutex<BTreeSet<usize>>>, t0: Instant) -> Self {
        let wall0_ms = wall_ms().saturating_sub(t0.elapsed().as_millis() as u64);
        Driver { cluster, dir, faulted, t0, wall0_ms, driven: Mutex::new(Driven::default()) }
    }

    fn ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    fn log(&self, target: Target, text: String) {
        tracing::info!(target = target.label(), "{text}");
        let t_ms = self.ms();
        self.driven.lock().expect("driver lock").log.push(Logged { t_ms, target, text });
    }

    fn machine_ids(&self) -> Vec<String> {
        self.cluster.machines().iter().map(|m| m.id().to_string()).collect()
    }

    /// Writes `version`'s unit file where fleetctl finds it, and notes that it was asked for.
    fn write_version(&self, version: &Version) -> Result<Vec<String>, String> {
        let path = self.dir.join(version.target.file_name());
        std::fs::write(&path, version.unit_text(&self.machine_ids()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let t_ms = self.ms();
        self.driven.lock().expect("driver lock").asked.push(Asked {
            t_ms,
            target: version.target,
            version: version.label(),
        });
        Ok(version.target.units().iter().map(|u| self.dir.join(u).display().to_string()).collect())
    }

    /// Writes and launches every target's original version (`fleetctl start --no-block`).
    pub async fn launch(&self) -> Result<(), String> {
        let mut paths = Vec::new();
        for target in Target::ALL {
            paths.extend(self.write_version(&Version::original(target))?);
        }
        let mut args = vec!["start", "--no-block"];
        args.extend(paths.iter().map(String::as_str));
        let out = self.fleetctl(&args).await?;
        if out.success() { Ok(()) } else { Err(format!("fleetctl start of the rollout units: {}", out.describe())) }
    }

    /// fleetctl against the first machine no fault touches now (any machine when all are), after `skip` such
    /// machines (a retry goes to another one).
    async fn fleetctl_via(&self, args: &[&str], skip: usize) -> (usize, Result<Output, String>) {
        let faulted = self.faulted.lock().expect("faulted lock").clone();
        let free: Vec<usize> =
            self.cluster.machines().iter().map(|m| m.slot()).filter(|s| !faulted.contains(s)).collect();
        let slot = if free.is_empty() { 1 } else { free[skip % free.len()] };
        (slot, self.cluster.fleetctl(slot, args).await.map_err(|e| e.to_string()))
    }

    async fn fleetctl(&self, args: &[&str]) -> Result<Output, String> {
        self.fleetctl_via(args, 0).await.1
    }

    /// The last `API request failed` line of fleetd's journal in machine `slot` (why an API answered 500).
    async fn api_failure(&self, slot: usize) -> Option<String> {
        let m = self.cluster.machine(slot).ok()?;
        let cmd = [
            "sh",
            "-c",
            "journalctl -u fleet.service -n 200 --no-pager -o cat | grep 'API request failed' | tail -n 1",
        ];
        let out = m.exec(&cmd).await.ok()?;
        let line = out.stdout.trim();
        (!line.is_empty()).then(|| format!("{} fleetd: {}", m.name(), crate::wait::summarize(line)))
    }

    /// The rollout as the API shows it, through any machine that answers.
    async fn read(&self, id_or_unit: &str) -> Option<Value> {
        let faulted = self.faulted.lock().expect("faulted lock").clone();
        let mut slots: Vec<usize> = self.cluster.machines().iter().map(|m| m.slot()).collect();
        slots.sort_by_key(|s| faulted.contains(s));
        for slot in slots {
            let Ok(out) = self.cluster.fleetctl(slot, &["rollout-status", "--output=json", id_or_unit]).await else {
                continue;
            };
            if let Ok(v) = serde_json::from_str::<Value>(&out.stdout)
                && v.get("id").is_some()
            {
                return Some(v);
            }
        }
        None
    }

    /// Reads rollout `index` of the record and keeps what changed; returns its last observation. A step shown
    /// waived that the record does not have yet counts as waived from `waived_since` (when the resume that waived
    /// it was sent), else from now.
    async fn poll(&self, index: usize) -> Option<Observation> {
        self.poll_waived_since(index, None).await
    }

    async fn poll_waived_since(&self, index: usize, waived_since: Option<u64>) -> Option<Observation> {
        let id = self.driven.lock().expect("driver lock").rollouts[index].id.clone();
        let v = self.read(&id).await?;
        let t_ms = self.ms();
        let names: BTreeMap<String, String> =
            self.cluster.machines().iter().map(|m| (m.id().to_string(), m.name().to_string())).collect();
        let o = observation(&v, t_ms);
        let mut d = self.driven.lock().expect("driver lock");
        let last_skip_failed = d.skip_failed_sent.get(&index).copied();
        let r = &mut d.rollouts[index];
        r.last_seen_ms = t_ms;
        r.resumes = v["resumesTaken"].as_u64().unwrap_or(0) as u32;
        let name = |id: &str| names.get(id).cloned().unwrap_or_else(|| id.chars().take(8).collect());
        for step in v["undo"].as_array().into_iter().flatten() {
            let (Some(unit), Some(machine)) = (step["unit"].as_str(), step["machine"].as_str()) else { continue };
            r.undo.insert((unit.to_string(), name(machine)));
        }
        // A step given up while undoing holds the rest back no longer either, as a forward one does.
        let all_steps = v["steps"].as_array().into_iter().flatten().chain(v["undo"].as_array().into_iter().flatten());
        for step in all_steps {
            let (Some(unit), Some(machine)) = (step["unit"].as_str(), step["machine"].as_str()) else { continue };
            let key = (unit.to_string(), name(machine));
            if step["waived"] == true && !r.waived.iter().any(|(_, u, m)| (u, m) == (&key.0, &key.1)) {
                r.waived.push((waived_from(waived_since, last_skip_failed, t_ms), key.0, key.1));
            }
        }
        let describe_steps = |list: &Value, label: &str| -> Vec<String> {
            list.as_array()
                .into_iter()
                .flatten()
                .map(|s| {
                    let mut text = format!(
                        "{label}{} on {}: {}",
                        s["unit"].as_str().unwrap_or("?"),
                        name(s["machine"].as_str().unwrap_or("?")),
                        s["phase"].as_str().unwrap_or("?")
                    );
                    if let Some(d) = s["detail"].as_str().filter(|d| !d.is_empty()) {
                        text.push_str(&format!(" ({d})"));
                    }
                    text
                })
                .collect()
        };
        r.machines = v["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["unit"].as_str().is_some_and(|u| u == super::changes::GLOBAL))
            .filter_map(|s| s["machine"].as_str().map(name))
            .collect();
        r.steps = describe_steps(&v["steps"], "");
        r.steps.extend(describe_steps(&v["undo"], "undo "));
        let changed = r
            .observed
            .last()
            .is_none_or(|last| (&last.state, &last.reason, last.settled) != (&o.state, &o.reason, o.settled));
        if changed {
            r.observed.push(o.clone());
        }
        Some(o)
    }

    /// Polls rollout `index` until it has ended or `until`; returns its last observation.
    async fn follow(&self, index: Option<usize>, until: Instant) -> Option<Observation> {
        let mut last = None;
        loop {
            if let Some(i) = index {
                last = self.poll(i).await.or(last);
                if last.as_ref().is_some_and(Observation::ended) {
                    return last;
                }
            }
            if Instant::now() >= until {
                return last;
            }
            tokio::time::sleep(POLL.min(until.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// Runs `plan` on its target until `stop` (time since `t0`): one change after another. Nothing is started, and
    /// no held rollout waited for, past `stop`.
    pub async fn run(&self, plan: &[Change], stop: Duration) {
        let stop_at = self.t0 + stop;
        // The rollouts of the last change (a replace of instances with a policy makes one per instance).
        let mut current: Vec<usize> = Vec::new();
        'changes: for change in plan {
            let start = Instant::now() + change.gap;
            for &i in &current {
                self.follow(Some(i), start).await;
            }
            tokio::time::sleep_until(start.into()).await;
            if self.t0.elapsed() >= stop {
                break;
            }
            for &i in &current {
                if !self.clear(i, change, stop_at).await {
                    continue 'changes;
                }
            }
            if Instant::now() >= stop_at {
                break;
            }
            current = self.make(change).await;
        }
    }

    /// Gets rollout `index` out of the way of `change`, waiting no later than `stop_at`; false when it still holds
    /// the target.
    async fn clear(&self, index: usize, change: &Change, stop_at: Instant) -> bool {
        let within = |wait: Duration| (Instant::now() + wait).min(stop_at);
        let target = change.target;
        let id = self.driven.lock().expect("driver lock").rollouts[index].id.clone();
        let ended = |o: &Option<Observation>| {
            o.as_ref().is_some_and(|o| matches!(o.state.as_str(), "done" | "rolled_back" | "aborted"))
        };
        let mut seen = self.follow(Some(index), Instant::now()).await;
        if ended(&seen) {
            return true;
        }
        if seen.as_ref().is_some_and(|o| o.state == "running") {
            seen = self.follow(Some(index), within(HELD_PATIENCE)).await;
            if ended(&seen) {
                return true;
            }
        }
        if Instant::now() >= stop_at {
            return false;
        }
        let paused = seen.as_ref().is_some_and(|o| o.state == "paused");
        // An undo that paused is past aborting (it is the abort, or the rollback): it is resumed, leaving the failed
        // undo steps unless the change says to try them again.
        let undoing = seen.as_ref().is_some_and(|o| o.reason.starts_with("paused while rolling back"));
        let action: Vec<&str> = match (paused, change.on_held) {
            (true, OnHeld::Resume) => vec!["rollout-resume", &id],
            (true, OnHeld::ResumeSkipFailed) => vec!["rollout-resume", "--skip-failed", &id],
            (true, OnHeld::Abort) if undoing => vec!["rollout-resume", "--skip-failed", &id],
            _ => vec!["rollout-abort", &id],
        };
        let sent_ms = self.ms();
        if action.contains(&"--skip-failed") {
            self.driven.lock().expect("driver lock").skip_failed_sent.insert(index, sent_ms);
        }
        let out = self.fleetctl(&action).await;
        self.log(target, format!("{} (it was {}): {}", action.join(" "), describe(&seen), outcome(&out)));
        if action.contains(&"--skip-failed") {
            self.poll_waived_since(index, Some(sent_ms)).await;
        }
        let mut seen = self.wait_final(index, within(HELD_END_WAIT)).await;
        if !ended(&seen) && action[0] == "rollout-resume" && !undoing {
            let out = self.fleetctl(&["rollout-abort", &id]).await;
            self.log(
                target,
                format!("rollout-abort {id} (after the resume it was {}): {}", describe(&seen), outcome(&out)),
            );
            seen = self.wait_final(index, within(HELD_END_WAIT)).await;
        }
        if ended(&seen) {
            return true;
        }
        self.log(
            target,
            format!("skipping the next change: rollout {id} still holds the target ({})", describe(&seen)),
        );
        false
    }

    /// Polls until rollout `index` is done, rolled back or aborted (a pause is not enough here), or `until`.
    async fn wait_final(&self, index: usize, until: Instant) -> Option<Observation> {
        loop {
            let seen = self.follow(Some(index), until).await;
            let done = seen.as_ref().is_some_and(|o| matches!(o.state.as_str(), "done" | "rolled_back" | "aborted"));
            if done || Instant::now() >= until {
                return seen;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Makes `change` (a command that made no rollout is sent again, to another machine, up to 3 times); returns
    /// the indices of the rollouts it made.
    async fn make(&self, change: &Change) -> Vec<usize> {
        let target = change.target;
        let Some(pace) = change.pace() else { return Vec::new() };
        let mut args: Vec<String> = Vec::new();
        let units = target.units();
        let first = units[0].clone();
        match &change.op {
            Op::Replace(v) | Op::Abort(v) => {
                let paths = match self.write_version(v) {
                    Ok(p) => p,
                    Err(e) => {
                        self.log(target, format!("{}: could not write the unit file: {e}", change.op));
                        return Vec::new();
                    }
                };
                args.extend(["start", "--replace", "--no-block"].map(String::from));
                if let Some(flags) = change.flags {
                    args.push("--rolling".into());
                    args.extend(flags.flags());
                }
                args.extend(paths);
            }
            Op::Restart => {
                args.extend(["restart", "--rolling", "--no-block"].map(String::from));
                args.extend(pace.flags());
                args.extend(units.iter().cloned());
            }
            Op::Rollback => {
                args.extend(["rollback", "--rolling", "--no-block"].map(String::from));
                args.extend(pace.flags());
                args.push(first.clone());
            }
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let shown = argv.iter().map(|a| a.rsplit('/').next().unwrap_or(a)).collect::<Vec<_>>().join(" ");
        let mut made = Vec::new();
        for attempt in 0..3 {
            let sent_ms = self.ms();
            let sent_wall = self.wall0_ms + sent_ms;
            let (slot, out) = self.fleetctl_via(&argv, attempt).await;
            // The rollouts it made: the newest of each unit, if created since the command was sent.
            let mut found: Vec<Value> = Vec::new();
            for unit in units.iter().take(if matches!(change.op, Op::Rollback) { 1 } else { units.len() }) {
                let Some(v) = self.read(unit).await else { continue };
                let fresh = v["createdMs"].as_u64().is_some_and(|c| c + 1_000 >= sent_wall);
                if fresh && !found.iter().any(|f| f["id"] == v["id"]) {
                    found.push(v);
                }
            }
            let mut said = outcome(&out);
            if out.as_ref().is_ok_and(|o| o.stderr.contains("Error 500")) {
                if let Some(why) = self.api_failure(slot).await {
                    said.push_str(&format!(" [{why}]"));
                }
            }
            if found.is_empty() {
                self.log(target, format!("{}: `fleetctl {shown}` (via m{slot}) made no rollout: {said}", change.op));
                if !transient(&out) {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            for v in found {
                made.push(self.record(change, pace, &v, sent_ms, &shown, &said).await);
            }
            break;
        }
        if matches!(change.op, Op::Abort(_)) {
            for &index in &made {
                self.abort_mid_way(target, index).await;
            }
        }
        made
    }

    /// Keeps rollout `v` (as the API showed it) made by `change`; returns its index.
    async fn record(&self, change: &Change, pace: Pace, v: &Value, sent_ms: u64, shown: &str, said: &str) -> usize {
        let target = change.target;
        let id = v["id"].as_str().unwrap_or_default().to_string();
        let record = RolloutRecord {
            id: id.clone(),
            target,
            what: format!("{} [{}]", change.op, pace),
            units: v["units"]
                .as_array()
                .map(|u| u.iter().filter_map(|u| u["name"].as_str().map(String::from)).collect())
                .unwrap_or_else(|| target.units()),
            budget: pace.max_unavailable,
            created_ms: sent_ms,
            deadline_ms: pace.deadline.map(|d| d.as_millis() as u64),
            observed: Vec::new(),
            undo: BTreeSet::new(),
            resumes: 0,
            waived: Vec::new(),
            steps: Vec::new(),
            last_seen_ms: 0,
            machines: BTreeSet::new(),
        };
        let index = {
            let mut d = self.driven.lock().expect("driver lock");
            d.rollouts.push(record);
            d.rollouts.len() - 1
        };
        self.log(target, format!("{} [{pace}]: rollout {id} (`fleetctl {shown}`: {said})", change.op));
        self.poll(index).await;
        index
    }

    /// Aborts rollout `index` once one of its steps has left `pending` (or after [`ABORT_WAIT`]).
    async fn abort_mid_way(&self, target: Target, index: usize) {
        let id = self.driven.lock().expect("driver lock").rollouts[index].id.clone();
        let until = Instant::now() + ABORT_WAIT;
        loop {
            let released = self.read(&id).await.is_some_and(|v| {
                v["state"] != "running" || v["steps"].as_array().into_iter().flatten().any(|s| s["phase"] != "pending")
            });
            if released || Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let out = self.fleetctl(&["rollout-abort", &id]).await;
        self.log(target, format!("rollout-abort {id} mid-way: {}", outcome(&out)));
        self.poll(index).await;
    }

    /// After the faults stopped at `faults_end_ms`: follows every rollout that has not ended until it has, or until
    /// its deadline (the longest among them) has passed.
    pub async fn finish(&self, faults_end_ms: u64, default_deadline: Duration) {
        let open = |d: &Driven| -> Vec<(usize, u64)> {
            d.rollouts
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.last().is_some_and(Observation::ended))
                .map(|(i, r)| (i, r.deadline_ms.unwrap_or(default_deadline.as_millis() as u64)))
                .collect()
        };
        loop {
            let pending = open(&self.driven.lock().expect("driver lock"));
            let Some(longest) = pending.iter().map(|(_, d)| *d).max() else { return };
            if self.ms() > faults_end_ms + longest {
                return;
            }
            for (i, _) in pending {
                self.poll(i).await;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// What was driven (the driver is done).
    pub fn take(&self) -> Driven {
        std::mem::take(&mut self.driven.lock().expect("driver lock"))
    }
}

/// An observation from the API's rollout object: settled unless an action is on its way or a key did not decode —
/// fleetctl's rule for the end of its wait (`cli::rollout::wait_outcome`): a pause with an abort the engine has not
/// taken up (no `undoEnd` yet), or with a resume or a promotion not taken up.
pub fn observation(v: &Value, t_ms: u64) -> Observation {
    let state = v["state"].as_str().unwrap_or("unknown").to_string();
    let mut reason = v["reason"].as_str().unwrap_or_default().to_string();
    let error = v["error"].as_str().unwrap_or_default();
    let action = v["action"].as_str().unwrap_or_default();
    let resume_pending = v["resumes"].as_u64().unwrap_or(0) > v["resumesTaken"].as_u64().unwrap_or(0);
    let promotion_pending = v["awaitingPromotion"] == true && v["promoted"] == true;
    let paused = state == "paused";
    let on_its_way = (paused && action == "abort" && v["undoEnd"].is_null())
        || (paused && action == "run" && (resume_pending || promotion_pending));
    if !error.is_empty() {
        reason = format!("{reason} (error: {error})");
    }
    Observation { t_ms, state, reason, settled: error.is_empty() && !on_its_way }
}

/// Whether a command that made no rollout may succeed when sent again: the API answered 500/503 (etcd lost a
/// member or its leader: docs/faults.md, "The gap that remains") or could not be reached. A refusal (409, "no
/// earlier version", a bad flag) is not sent again.
fn transient(out: &Result<Output, String>) -> bool {
    match out {
        Err(_) => true,
        Ok(o) if o.success() => false,
        Ok(o) => ["Error 500", "Error 503", "timed out", "timeout", "connect", "error sending request", "reset"]
            .iter()
            .any(|needle| o.stderr.contains(needle)),
    }
}

fn describe(o: &Option<Observation>) -> String {
    match o {
        None => "unreadable".into(),
        Some(o) if o.reason.is_empty() => format!("{} at {}", o.state, secs(o.t_ms)),
        Some(o) => format!("{} at {}: {}", o.state, secs(o.t_ms), o.reason),
    }
}

fn outcome(out: &Result<Output, String>) -> String {
    match out {
        Ok(o) if o.success() => "exit 0".into(),
        Ok(o) => format!("exit {}: {}", o.status, crate::wait::summarize(o.stderr.trim())),
        Err(e) => e.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hour of stop 47: the resume was sent at 3134.7 s, the engine released the next undo step at 3135.0 s,
    /// and the first poll to show the waiver ran at 3135.7 s. The waiver counts from the send.
    #[test]
    fn a_waiver_counts_from_the_resume_that_made_it() {
        assert_eq!(waived_from(None, Some(3_134_700), 3_135_700), 3_134_700, "the last --skip-failed sent");
        assert_eq!(waived_from(Some(3_134_700), Some(1_000), 3_135_700), 3_134_700, "the caller's own send first");
        assert_eq!(waived_from(None, None, 3_135_700), 3_135_700, "no resume known: when it was seen");
        assert_eq!(waived_from(Some(9_000), None, 5_000), 5_000, "never later than seen");
    }

    #[test]
    fn an_observation_is_settled_only_with_no_action_on_its_way() {
        let o = observation(&serde_json::json!({"state": "paused", "reason": "paused: x", "action": "run"}), 5);
        assert!(o.settled && o.ended(), "{o:?}");
        let aborting = serde_json::json!({"state": "paused", "reason": "paused: x", "action": "abort"});
        assert!(!observation(&aborting, 5).ended(), "an abort not taken up yet");
        let undo_paused = serde_json::json!({"state": "paused", "reason": "paused while rolling back: x",
                                             "action": "abort", "undoEnd": "aborted"});
        assert!(observation(&undo_paused, 5).ended(), "an abort taken up whose undo paused has ended (paused)");
        let resuming = serde_json::json!({"state": "paused", "reason": "paused: x", "action": "run", "resumes": 2,
                                          "resumesTaken": 1});
        assert!(!observation(&resuming, 5).ended());
        let promoting = serde_json::json!({"state": "paused", "reason": "awaiting promotion", "action": "run",
                                           "awaitingPromotion": true, "promoted": true});
        assert!(!observation(&promoting, 5).ended());
        let broken = serde_json::json!({"state": "done", "error": "progress: bad json"});
        let b = observation(&broken, 5);
        assert!(!b.ended() && b.reason.contains("bad json"), "{b:?}");
        let done = observation(&serde_json::json!({"state": "done", "action": "run"}), 7);
        assert!(done.ended() && done.reason.is_empty());
    }
}

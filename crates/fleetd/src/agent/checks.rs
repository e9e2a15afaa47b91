//! The health checks this machine runs (issue 34, docs/health.md): the shell around [`super::health::Tracker`].
//!
//! * [`run_check`] — one run of a check: `/bin/sh -c COMMAND` in its own process group, stdin null, stdout and
//!   stderr into one pipe, `FLEET_UNIT` / `FLEET_MACHINE_ID` set; killed with its whole group at the timeout; the
//!   last non-empty output line kept.
//! * [`HealthChecks`] — owned by the agent across its runs: which version of each unit has a check (parsed once
//!   per hash), the tracker, and one task per checked *active* unit that runs its check every interval and judges
//!   each run against systemd's activation time ([`super::health::verdict`]). The publish loop feeds it what each
//!   round sees and puts the tracker's `health` into the states it publishes; the reconcile loop tells it of the
//!   agent's own starts through [`AgentStarts`]. A unit without a check costs a map lookup per round: no
//!   process, no timer, no task.
//! * After a fleetd restart (its units adopted by the next process: units keep running, the registry keeps the last process's states), a checked
//!   unit that the registry shows `healthy` for the version it runs has its state *held back* until this process's
//!   first check of it is judged: publishing `unknown` meanwhile would fail a rollout step holding for
//!   `minHealthy` on every fleetd restart, and publishing `healthy` unchecked could vouch for a run that restarted
//!   during the restart. Any other change of the unit (it leaves `active`, another version) ends the hold.
//! * A unit whose version's text this machine cannot read yet (neither in the registry snapshot nor in the units
//!   directory) is published `unknown`, not without health: no health is what a fleetd without checks publishes,
//!   and rollouts count such a machine as serving by systemd alone. It is decided again on the next snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info};

use super::health::{Action, Finished, Seen, Tracker, Verdict, verdict};
use super::publisher::{Readings, StatesNow};
use fleet_core::model::{Health, HealthStatus, PublishedState, now_ms};
use fleet_core::rollout::policy::HealthCheck;
use fleet_core::unit::UnitFile;
use fleet_registry::Snapshot;
use fleet_systemd::{SystemdOps, monotonic_us};

/// The longest `output` kept (characters).
pub const OUTPUT_LIMIT: usize = 200;
/// How much of a check's output is kept while it runs (its tail): the last line is all that is published.
const TAIL_BYTES: usize = 8 * 1024;
/// After the shell exited, how long its output may still arrive (a background process it left may hold the
/// pipe open; the group is killed after this).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(100);
/// How long the reconcile loop waits for the reset health of units it (re)started to be published before it
/// writes their markers anyway.
pub const START_PUBLISH_WAIT: Duration = Duration::from_secs(2);

/// How one check run ended (before it is judged against the unit's activation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    pub passed: bool,
    pub output: String,
}

/// Runs `check` once for `unit` on machine `machine`.
pub async fn run_check(check: &HealthCheck, unit: &str, machine: &str) -> CheckRun {
    let failed = |output: String| CheckRun { passed: false, output: clip(&output) };
    let (reader, writer) = match pipe() {
        Ok(ends) => ends,
        Err(e) => return failed(format!("cannot make a pipe for the check: {e}")),
    };
    let writer_too = match writer.try_clone() {
        Ok(fd) => fd,
        Err(e) => return failed(format!("cannot make a pipe for the check: {e}")),
    };
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&check.command)
        .env("FLEET_UNIT", unit)
        .env("FLEET_MACHINE_ID", machine)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer_too))
        .process_group(0)
        .kill_on_drop(true);
    let spawned = command.spawn();
    // The child holds the write ends now; ours must go, or the output never ends.
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return failed(format!("cannot run /bin/sh: {e}")),
    };
    // Whatever happens from here (timeout, this task aborted), the check's processes go with it.
    let _group = child.id().map(Group);
    let mut output = match tokio::net::unix::pipe::Receiver::from_owned_fd(reader) {
        Ok(receiver) => Some(receiver),
        Err(e) => {
            debug!(unit = %unit, err = %e, "cannot read the check's output");
            None
        }
    };
    let mut tail: Vec<u8> = Vec::new();
    let finished = tokio::time::timeout(check.timeout, async {
        let mut buffer = [0u8; 4096];
        let mut status = None;
        let mut drain_until: Option<Instant> = None;
        loop {
            tokio::select! {
                exited = child.wait(), if status.is_none() => {
                    status = Some(exited);
                    drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
                }
                read = async {
                    match output.as_mut() {
                        Some(pipe) => pipe.read(&mut buffer).await,
                        None => std::future::pending().await,
                    }
                } => match read {
                    Ok(0) | Err(_) => {
                        output = None;
                        if let Some(status) = status.take() {
                            return status;
                        }
                    }
                    Ok(n) => keep_tail(&mut tail, &buffer[..n]),
                },
                () = tokio::time::sleep_until(drain_until.unwrap_or_else(Instant::now)), if drain_until.is_some() => {
                    if let Some(status) = status.take() {
                        return status;
                    }
                }
            }
            if output.is_none() {
                if let Some(status) = status.take() {
                    return status;
                }
            }
        }
    })
    .await;
    let last = last_line(&tail);
    match finished {
        Err(_) => failed(format!("timed out after {:?}", check.timeout)),
        Ok(Err(e)) => failed(format!("cannot wait for the check: {e}")),
        Ok(Ok(status)) if status.success() => CheckRun { passed: true, output: last },
        Ok(Ok(status)) if last.is_empty() => failed(format!("exited with {status}")),
        Ok(Ok(_)) => CheckRun { passed: false, output: last },
    }
}

/// A check's process group, killed when dropped (`SIGKILL` to every process still in it).
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.0) {
            // SAFETY: kill(2) with a negative pid signals the group; no memory is involved. The group is the one
            // the check's shell leads (`process_group(0)`); ESRCH when it is gone already is fine.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

/// A pipe whose ends are closed on exec (the child gets its own copies as stdout and stderr).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2(2) writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened by pipe2 and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn keep_tail(tail: &mut Vec<u8>, more: &[u8]) {
    tail.extend_from_slice(more);
    if tail.len() > TAIL_BYTES {
        tail.drain(..tail.len() - TAIL_BYTES);
    }
}

/// The last non-empty line of `bytes`, trimmed, at most [`OUTPUT_LIMIT`] characters.
pub fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    clip(text.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or_default())
}

fn clip(text: &str) -> String {
    text.trim().chars().take(OUTPUT_LIMIT).collect()
}

/// A finished check, tagged with the unit and the epoch it began in.
#[derive(Debug)]
pub struct Done {
    pub unit: String,
    pub epoch: u64,
    pub verdict: Verdict,
}

/// The agent's own (re)starts of units, from the reconcile loop to the publish loop: a started unit's health must
/// be `unknown` in the registry before the agent's markers say it was (re)started (a rolling restart's step is
/// judged by its restarted marker and the published health), and the outcome of every start is something the
/// cluster waits for (the publish loop sends it without waiting for its pace, [`super::timing::Pace`]).
#[derive(Debug, Default)]
pub struct AgentStarts {
    inner: Mutex<StartsInner>,
    notify: Notify,
    published: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct StartsInner {
    seq: u64,
    pending: BTreeMap<String, u64>,
    /// The units with a check (set by the publish side).
    checked: BTreeSet<String>,
    /// Every unit (re)started since the publish side last took them, checked or not.
    started: BTreeSet<String>,
}

impl AgentStarts {
    fn lock(&self) -> std::sync::MutexGuard<'_, StartsInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The agent (re)started `units`; waits (at most `limit`) until the reset health of those that have a check is
    /// published. Returns at once when none has one.
    pub async fn started(&self, units: &[String], limit: Duration) {
        let seq = {
            let mut guard = self.lock();
            let StartsInner { seq, pending, checked, started } = &mut *guard;
            started.extend(units.iter().cloned());
            let checked_now = units.iter().any(|u| checked.contains(u));
            if checked_now {
                *seq += 1;
                for unit in units.iter().filter(|u| checked.contains(*u)) {
                    pending.insert(unit.clone(), *seq);
                }
            }
            checked_now.then_some(*seq)
        };
        self.notify.notify_one();
        let Some(seq) = seq else { return };
        let mut published = self.published.subscribe();
        if tokio::time::timeout(limit, published.wait_for(|p| *p >= seq)).await.is_err() {
            debug!(seq, "the health of restarted units was not published in time; writing their markers anyway");
        }
    }

    /// Wakes when starts were reported (the publish side).
    pub async fn reported(&self) {
        self.notify.notified().await;
    }

    /// Taken by the publish side: units started since the last call, and the sequence number they reach.
    fn take(&self) -> (Vec<String>, u64) {
        let mut inner = self.lock();
        let seq = inner.pending.values().copied().max().unwrap_or(0);
        (std::mem::take(&mut inner.pending).into_keys().collect(), seq)
    }

    /// Taken by the publish side: every unit (re)started since the last call.
    pub fn take_started(&self) -> BTreeSet<String> {
        std::mem::take(&mut self.lock().started)
    }

    fn set_checked(&self, units: BTreeSet<String>) {
        self.lock().checked = units;
    }

    fn mark_published(&self, seq: u64) {
        self.published.send_if_modified(|p| {
            let newer = seq > *p;
            if newer {
                *p = seq;
            }
            newer
        });
    }
}

/// Aborts its task when dropped.
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Everything the agent keeps of health checks between publishing runs (see the module docs).
pub struct HealthChecks<S> {
    systemd: S,
    machine: String,
    units_dir: PathBuf,
    tracker: Tracker,
    /// Unit-file hash → its check (`None`: no check), for the versions loaded here.
    definitions: BTreeMap<String, Option<Arc<HealthCheck>>>,
    tasks: BTreeMap<String, Task>,
    done_tx: mpsc::Sender<Done>,
    done_rx: mpsc::Receiver<Done>,
    starts: Arc<AgentStarts>,
    /// The highest agent-start sequence taken but not yet published.
    starts_taken: u64,
    /// No round has run yet in this process: units the registry shows healthy may be held (see the module docs).
    first_round: bool,
    /// Units whose state is held back until their first check in this process is judged, with the health the
    /// registry shows (kept, `sinceMs` included, when that check agrees).
    held: BTreeMap<String, Health>,
    /// Units published `unknown` because whether their version has a check is not known yet (its text is neither
    /// in the snapshot nor in the units directory), decided again when the snapshot changes; with the time each was
    /// first published so (kept, so that a unit that stays undecided is not written again).
    undecided: BTreeMap<String, u64>,
}

/// Whether a unit version has a health check, as far as this machine can tell.
enum Definition {
    Known(Option<Arc<HealthCheck>>),
    /// Its text is not readable here yet.
    NotYet,
}

impl<S: SystemdOps + Clone + 'static> HealthChecks<S> {
    pub fn new(systemd: S, machine: &str, units_dir: PathBuf) -> HealthChecks<S> {
        let (done_tx, done_rx) = mpsc::channel(64);
        HealthChecks {
            systemd,
            machine: machine.to_string(),
            units_dir,
            tracker: Tracker::new(),
            definitions: BTreeMap::new(),
            tasks: BTreeMap::new(),
            done_tx,
            done_rx,
            starts: Arc::new(AgentStarts::default()),
            starts_taken: 0,
            first_round: true,
            held: BTreeMap::new(),
            undecided: BTreeMap::new(),
        }
    }

    /// The handle the reconcile loop reports its starts through.
    pub fn starts(&self) -> Arc<AgentStarts> {
        Arc::clone(&self.starts)
    }

    /// The check of version `hash` of `unit`: from the registry's body, else from the file on disk when it is that
    /// version. Parsed once per hash; bodies that do not mention `HealthCheck` are not parsed at all.
    fn check_of(&mut self, unit: &str, hash: &str, snapshot: &Snapshot) -> Definition {
        if let Some(known) = self.definitions.get(hash) {
            return Definition::Known(known.clone());
        }
        let text = match snapshot.bodies().get(hash) {
            Some(body) => Some(body.text.to_string()),
            None => std::fs::read(self.units_dir.join(unit))
                .ok()
                .filter(|bytes| super::units_dir::file_hash(bytes) == hash)
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        };
        let Some(text) = text else {
            // Not known yet (the body may arrive with a later snapshot): ask again next time.
            return Definition::NotYet;
        };
        let check = text
            .contains("HealthCheck")
            .then(|| UnitFile::parse(&text).ok())
            .flatten()
            .and_then(|file| HealthCheck::of(&file))
            .map(Arc::new);
        self.definitions.insert(hash.to_string(), check.clone());
        Definition::Known(check)
    }

    /// Units published `unknown` only because their version's text was not readable here: the publish loop
    /// touches them again when the snapshot changes.
    pub fn undecided(&self) -> Vec<String> {
        self.undecided.keys().cloned().collect()
    }

    pub fn has_undecided(&self) -> bool {
        !self.undecided.is_empty()
    }

    /// Forgets the definitions of versions no longer loaded, and units no longer loaded (their checks stop).
    pub fn loaded_changed(&mut self, loaded: &BTreeMap<String, String>) {
        let hashes: BTreeSet<&String> = loaded.values().collect();
        self.definitions.retain(|hash, _| hashes.contains(hash));
        let gone: Vec<String> = self.tracker.units().filter(|u| !loaded.contains_key(*u)).map(str::to_string).collect();
        for unit in gone {
            self.forget(&unit);
        }
    }

    fn forget(&mut self, unit: &str) {
        if self.tracker.forget(unit) {
            debug!(unit = %unit, "no health check for this unit any more");
        }
        self.tasks.remove(unit);
        self.held.remove(unit);
        self.undecided.remove(unit);
    }

    /// The health the registry shows for this machine's state of `unit` at version `hash` (left by the fleetd
    /// process before this one), if it is active and healthy.
    fn stored_healthy(&self, unit: &str, hash: &str, snapshot: &Snapshot) -> Option<Health> {
        let per_machine = snapshot.state_records().get(unit)?;
        let record = per_machine.get(self.machine.as_str())?;
        let active = &*record.hash == hash && &*record.active_state == "active";
        record.health.clone().filter(|h| active && h.status == HealthStatus::Healthy)
    }

    /// One publishing round: feeds the tracker what the round computed (`now`) and puts each state's `health` in.
    pub fn round(&mut self, now: &mut StatesNow, readings: &Readings, snapshot: &Snapshot) {
        let at = now_ms();
        let (names, states): (Option<&BTreeSet<String>>, &mut BTreeMap<String, PublishedState>) = match now {
            StatesNow::All(states) => (None, states),
            StatesNow::Touched { names, states } => (Some(&*names), states),
        };
        for (name, state) in states.iter_mut() {
            let check = match self.check_of(name, &state.hash, snapshot) {
                Definition::Known(Some(check)) => check,
                Definition::Known(None) => {
                    self.forget(name);
                    state.health = None;
                    continue;
                }
                Definition::NotYet => {
                    let since = self.undecided.get(name).copied().unwrap_or(at);
                    self.forget(name);
                    self.undecided.insert(name.clone(), since);
                    state.health =
                        Some(Health { status: HealthStatus::Unknown, since_ms: since, output: String::new() });
                    continue;
                }
            };
            self.undecided.remove(name);
            let seen = Seen {
                active: state.active_state == "active",
                hash: &state.hash,
                restarts: state.restarts,
                entered: readings.entered(name),
            };
            let first_seen = self.tracker.health(name).is_none();
            let action = self.tracker.observe(name, seen, at);
            let stored = (self.first_round && first_seen && seen.active)
                .then(|| self.stored_healthy(name, &state.hash, snapshot))
                .flatten();
            if let Some(stored) = stored {
                debug!(unit = %name, "holding the unit's state until its first health check here");
                self.held.insert(name.clone(), stored);
            } else if action != Action::Nothing {
                self.held.remove(name);
            }
            self.apply(name, action, &check);
            state.health = self.tracker.health(name).cloned();
        }
        self.first_round = false;
        // Touched units without a state (no longer reported or loaded): nothing left to check.
        let without: Vec<String> = match names {
            Some(names) => names.iter().filter(|n| !states.contains_key(*n)).cloned().collect(),
            None => self.tracker.units().filter(|n| !states.contains_key(*n)).map(str::to_string).collect(),
        };
        for name in without {
            self.forget(&name);
        }
        // Held states are not published: the registry keeps the last process's until the first check is judged.
        states.retain(|name, _| !self.held.contains_key(name));
        self.starts.set_checked(self.tracker.units().map(str::to_string).collect());
    }

    fn apply(&mut self, unit: &str, action: Action, check: &Arc<HealthCheck>) {
        match action {
            Action::Nothing => {}
            Action::Stop => {
                self.tasks.remove(unit);
            }
            Action::Start { epoch } => {
                let task = tokio::spawn(check_loop(
                    self.systemd.clone(),
                    unit.to_string(),
                    self.machine.clone(),
                    Arc::clone(check),
                    epoch,
                    self.done_tx.clone(),
                ));
                self.tasks.insert(unit.to_string(), Task(task));
            }
        }
    }

    /// The next finished check.
    pub async fn next_done(&mut self) -> Option<Done> {
        self.done_rx.recv().await
    }

    /// Applies a finished check; the unit's name if its status changed (its state must be published again).
    pub fn take_done(&mut self, done: Done) -> Option<String> {
        let status_was = self.tracker.health(&done.unit).map(|h| h.status);
        if let Verdict::Unverified(why) = &done.verdict {
            debug!(unit = %done.unit, err = %why, "cannot tell whether the unit restarted during its check; result dropped");
        }
        let current = self.tracker.epoch(&done.unit) == done.epoch;
        let released = if current { self.held.remove(&done.unit) } else { None };
        let changed = self.tracker.result(&done.unit, done.epoch, done.verdict, now_ms());
        if let Some(stored) = released {
            // Still as the registry shows it (healthy): nothing changed, `sinceMs` included. Either way the held
            // state is published with this first verdict.
            self.tracker.keep(&done.unit, stored);
            let now = self.tracker.health(&done.unit).map_or("-", |h| h.status.as_str());
            info!(unit = %done.unit, health = %now, "first health check after fleetd restarted; publishing the unit's state");
            return Some(done.unit);
        }
        if !changed {
            return None;
        }
        let health = self.tracker.health(&done.unit)?;
        info!(
            unit = %done.unit,
            was = %status_was.map_or("-", |s| s.as_str()),
            health = %health.status,
            output = %health.output,
            "health check status changed"
        );
        Some(done.unit)
    }

    /// Takes the agent's starts reported since the last call: the units whose status went back to `unknown` (their
    /// states must be published again).
    pub fn take_starts(&mut self, snapshot: &Snapshot, loaded: &BTreeMap<String, String>) -> Vec<String> {
        let (units, seq) = self.starts.take();
        self.starts_taken = self.starts_taken.max(seq);
        let at = now_ms();
        let mut touched = Vec::new();
        for unit in units {
            // A held state must not outlive the restart: the next round publishes `unknown`.
            self.held.remove(&unit);
            let action = self.tracker.restarted(&unit, at);
            let check = loaded.get(&unit).map(|hash| self.check_of(&unit, hash, snapshot));
            match check {
                Some(Definition::Known(Some(check))) => self.apply(&unit, action, &check),
                // Its check cannot be read now: start over from the next round's view of it.
                _ => self.forget(&unit),
            }
            touched.push(unit);
        }
        touched
    }

    /// The states of a round were written: the starts taken before it are published.
    pub fn published(&mut self) {
        if self.starts_taken > 0 {
            self.starts.mark_published(self.starts_taken);
        }
    }

    /// Stops every check (shutdown).
    pub fn stop_all(&mut self) {
        self.tasks.clear();
    }
}

/// Runs a unit's check now and then every `check.interval` (start to start), sending each judged run, until the
/// task is aborted or the receiver is gone. A run that finds the unit restarted meanwhile is followed by another
/// at once: the first run of the new run of the unit.
async fn check_loop<S: SystemdOps>(
    systemd: S,
    unit: String,
    machine: String,
    check: Arc<HealthCheck>,
    epoch: u64,
    done: mpsc::Sender<Done>,
) {
    loop {
        let began = Instant::now();
        let began_us = monotonic_us();
        let run = run_check(&check, &unit, &machine).await;
        let activation = systemd.activation(&unit).await;
        let verdict = verdict(Finished { began_us, passed: run.passed, output: run.output }, activation);
        debug!(unit = %unit, epoch, verdict = ?verdict, "health check finished");
        let again_now = verdict == Verdict::Restarted;
        if done.send(Done { unit: unit.clone(), epoch, verdict }).await.is_err() {
            return;
        }
        if !again_now {
            tokio::time::sleep_until(began + check.interval).await;
        }
    }
}

#[cfg(test)]
mod tests;

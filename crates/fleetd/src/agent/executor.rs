//! Runs a plan against systemd (spec §7.3 task implementations, with the Recs of §10.4 and B8) and keeps what the
//! agent believes it did (its target-state cache) next to the unit files it owns.
//!
//! * Load = write the file, link it as a runtime unit, enable it (runtime) when it has `[Install]`; a failed enable
//!   removes the file again.
//! * Stop = stop, wait for the job and for the unit to be inactive (its stop hooks have run).
//! * Unload = Stop (unless this run stopped it) → remove the runtime link (on disk for a unit without
//!   `[Install]`, else disable runtime) → reset-failed of the batch's units systemd shows failed (a unit that is
//!   "not loaded" is fine; one whose stop told that it left it `inactive` is not read) → delete the file.
//! * Stop and wait: a stop job that is done left its unit inactive or failed, as the unit's signals tell by the job's
//!   end ([`fleet_systemd::Stopped`]); after another result the unit's state is waited for.
//! * Reload = one daemon-reload, only when files or links changed and systemd does not already match them (each
//!   changed unit asked, loading none, see [`fleet_systemd::Definition::matches_disk`]: new and unloaded units need none), and never while one of
//!   the agent's own start jobs is still running (then the reload and the starts after it wait for the next
//!   reconcile).
//! * Start = start and wait for the job result (up to `start_wait`; a longer job is left running and tracked).
//! * Update = overwrite a loaded unit's file with the new version, no stop (a replace without restart); the
//!   version the unit runs stays the one it was started with until it is started again.
//! * ReloadUnit = `systemctl reload` (the new version's `ExecReload=`), after the daemon-reload.
//!
//! A start of a unit whose desired state carries a rolling restart's token records the token (kept in
//! `.rollout-restarts` in the units directory, so a fleetd restart does not restart the unit a second time).
//! The target-state cache and the running versions are kept in `agent-state.json` next to the units directory ([`super::adoption`]), so
//! a new fleetd process adopts the units the last one launched: its first plan stops, starts and reloads nothing.
//!
//! A failing task is logged and skips only the later tasks of the same unit; everything else goes on, and the next
//! reconcile retries. Losing etcd never reaches this code as a stop: only a plan does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::adoption::{AGENT_STATE_FILE, AgentRecord, record_dir};
use super::error::AgentError;
use super::loaded::Loaded;
use super::publisher::unit_states;
use super::units_dir::UnitsDir;
use fleet_core::machine_plan::plan::{Actual, Desired, Planned, Task, plan};
use fleet_core::model::{JobState, PublishedState};
use fleet_systemd::{JobResult, Stopped, SystemdOps};

/// Start, stop and unload jobs of one batch in flight at once. systemd runs jobs in parallel; issuing one and
/// waiting for it before the next made a batch of hundreds of units take seconds per machine, and 32 at a time
/// kept PID 1's queue short enough that 333 stops took 2.6 s where `systemctl stop` of all took 1.5 s (1,000
/// units on 3 machines: destroy 1.9–2.0× → 1.5–1.7× the floor with 256).
pub const CONCURRENT_JOBS: usize = 256;
/// Whether the unit file at `path` has an `[Install]` section (it may have been enabled, not only linked); a file
/// that cannot be read or parsed counts as having one, so its unload asks systemd.
fn has_install_section(path: &std::path::Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| fleet_core::unit::UnitFile::parse_bytes(&bytes).ok())
        .is_none_or(|file| file.has_section("Install"))
}

/// Time limits of the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// How long a Start waits for its job before leaving it running in the background.
    pub start_wait: Duration,
    /// How long a Stop (or the stop of an Unload) waits for the job and for the unit to become inactive.
    pub stop_wait: Duration,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig { start_wait: Duration::from_secs(30), stop_wait: Duration::from_secs(300) }
    }
}

/// What a task did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Stop/Unload/Load/Reload done.
    Done,
    /// Load wrote or linked something (true) or found everything in place (false).
    Loaded { changed: bool },
    /// The stop job finished with this result and the unit is inactive.
    Stopped(JobResult),
    /// The start job finished with this result (a failed unit is still "launched": fleet never restarts units).
    Started(JobResult),
    /// The reload job finished with this result.
    Reloaded(JobResult),
    /// The start job is still running after `start_wait`; it is tracked and the unit counts as launched.
    StartPending,
    /// Nothing to do (e.g. a Reload when no file changed).
    Skipped(&'static str),
    /// Postponed to the next reconcile (a Reload while own start jobs run, and the starts that need it).
    Deferred(&'static str),
}

/// One executed task.
#[derive(Debug)]
pub struct TaskReport {
    pub planned: Planned,
    pub outcome: Result<Outcome, AgentError>,
}

/// A change to the "launched" marker the caller publishes in the registry (spec §7.6, `mark_launched`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// The agent started the unit with this file version: set the marker (bound to the machine's lease).
    Launched { unit: String, hash: String },
    /// The agent stopped or unloaded the unit: delete the marker.
    NotLaunched(String),
}

/// The markers to publish after a run, in task order; `hashes` are the recorded file hashes
/// ([`Executor::loaded`]).
pub fn markers(reports: &[TaskReport], hashes: &BTreeMap<String, String>) -> Vec<Marker> {
    reports
        .iter()
        .filter_map(|r| match (&r.planned.task, &r.outcome) {
            (Task::Start(n), Ok(Outcome::Started(_) | Outcome::StartPending)) => {
                Some(Marker::Launched { unit: n.clone(), hash: hashes.get(n).cloned().unwrap_or_default() })
            }
            (Task::Stop(n) | Task::Unload(n), Ok(_)) => Some(Marker::NotLaunched(n.clone())),
            _ => None,
        })
        .collect()
}

/// The markers that make this machine's launched markers in the registry (`have`: unit → hash) match the units
/// the agent believes it launched (`want`: unit → recorded hash), in unit-name order. A safety net next to
/// [`markers`]: it repairs markers whose write failed or that vanished.
pub fn marker_diff(want: &BTreeMap<String, String>, have: &BTreeMap<String, String>) -> Vec<Marker> {
    let names: BTreeSet<&String> = want.keys().chain(have.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| match (want.get(name), have.get(name)) {
            (Some(w), h) if h != Some(w) => Some(Marker::Launched { unit: name.clone(), hash: w.clone() }),
            (None, Some(_)) => Some(Marker::NotLaunched(name.clone())),
            _ => None,
        })
        .collect()
}

/// Whether an unloaded unit may be left failed in systemd, so that its state must be read (and a failed one reset
/// before its file goes): unless its stop in this run left it `inactive`, as systemd's signals told by the job's
/// end. Skipping that read takes a D-Bus round trip, in PID 1's busiest moment, off every replace.
fn may_be_failed(left: Option<&str>) -> bool {
    left != Some("inactive")
}

/// Where the rolling-restart tokens live, in the units directory (hidden files are not units).
pub const RESTARTS_FILE: &str = ".rollout-restarts";

/// Drives systemd for this machine and remembers what it did.
pub struct Executor<S> {
    systemd: S,
    units: UnitsDir,
    config: ExecutorConfig,
    /// The target-state cache: what the agent believes each unit is (absent = inactive).
    believed: BTreeMap<String, JobState>,
    /// Start jobs that outlived `start_wait`.
    pending_starts: BTreeSet<String>,
    /// Units this run's Stop tasks stopped (job done, unit inactive), with the state the stop left each in where
    /// systemd told it: their Unload skips a second stop and wait, three D-Bus round trips of every replace.
    stopped_in_run: BTreeMap<String, Option<String>>,
    /// Launched units → hash of the version they were started with (lags the file after an Update).
    running: BTreeMap<String, String>,
    /// Unit → the last rolling restart's token it was (re)started for; persisted in [`RESTARTS_FILE`].
    restarts: BTreeMap<String, String>,
    /// Files or links changed since the last daemon-reload.
    reload_needed: bool,
    /// The units whose files or links changed since the last daemon-reload; if systemd already reads each of
    /// them from disk (see [`fleet_systemd::Definition::matches_disk`]), the reload is skipped.
    changed_files: BTreeSet<String>,
    /// A change that always needs a daemon-reload (an `[Install]` unit enabled, a failed enable cleaned up).
    reload_required: bool,
    /// What `agent-state.json` holds (rewritten when `believed` or `running` no longer match it).
    recorded: AgentRecord,
    /// The loaded set (unit → recorded hash) with the launched hashes and the fresh units ([`Loaded`]), re-sent
    /// whenever one changes (a file written or removed, a start ended), so state publishing can follow it without
    /// waiting for a running plan. Shared, not copied: the publisher takes it at every round.
    loaded_tx: watch::Sender<Arc<Loaded>>,
    /// The launched hashes the loaded set carries ([`Loaded::launched`]).
    launched_shown: BTreeMap<String, String>,
    /// Units this run loaded that were not loaded before ([`Loaded::fresh`]).
    fresh: BTreeMap<String, tokio::time::Instant>,
    /// The units the running plan starts.
    starting: BTreeSet<String>,
    /// Units updated in place whose new file is not in effect yet → the hash published for them meanwhile (the
    /// previous file's). Released once the daemon-reload and the unit reloads of the run are done, so a published
    /// new hash means systemd runs the new definition and `ExecReload=` has finished: a waiting client never sees
    /// the new version still reloading.
    held: BTreeMap<String, String>,
}

impl<S: SystemdOps> Executor<S> {
    pub fn new(systemd: S, units: UnitsDir, config: ExecutorConfig) -> Self {
        let restarts = read_restarts(&units.dir().join(RESTARTS_FILE));
        let recorded = std::fs::read(record_dir(units.dir()).join(AGENT_STATE_FILE))
            .ok()
            .and_then(|bytes| AgentRecord::decode(&bytes))
            .unwrap_or_default();
        let (believed, running) = recorded.restore(units.hashes());
        let launched_shown = launched_hashes(&believed, &running, &units);
        let (loaded_tx, _) = watch::channel(Arc::new(Loaded {
            hashes: Arc::new(units.hashes().clone()),
            launched: launched_shown.clone(),
            fresh: BTreeMap::new(),
        }));
        if !believed.is_empty() {
            info!(
                launched = believed.values().filter(|s| **s == JobState::Launched).count(),
                loaded = believed.values().filter(|s| **s == JobState::Loaded).count(),
                "adopting the units the previous fleetd process left"
            );
        }
        Executor {
            systemd,
            units,
            config,
            believed,
            pending_starts: BTreeSet::new(),
            stopped_in_run: BTreeMap::new(),
            running,
            restarts,
            reload_needed: false,
            changed_files: BTreeSet::new(),
            reload_required: false,
            recorded,
            loaded_tx,
            launched_shown,
            fresh: BTreeMap::new(),
            starting: BTreeSet::new(),
            held: BTreeMap::new(),
        }
    }

    /// Rewrites `agent-state.json` when the caches changed since it was last written.
    fn record_state(&mut self) {
        let now = AgentRecord::of(&self.believed, &self.running);
        if now == self.recorded {
            return;
        }
        let path = record_dir(self.units.dir()).join(AGENT_STATE_FILE);
        let tmp = path.with_extension("json.tmp");
        match std::fs::write(&tmp, now.encode()).and_then(|()| std::fs::rename(&tmp, &path)) {
            Ok(()) => self.recorded = now,
            Err(e) => {
                warn!(path = %path.display(), err = %e, "cannot record the agent's state; a fleetd restart may start units again")
            }
        }
    }

    /// Follows the loaded set (unit → recorded hash) as files are written and removed, also in the middle of a
    /// plan (e.g. while a long stop job runs).
    pub fn watch_loaded(&self) -> watch::Receiver<Arc<Loaded>> {
        self.loaded_tx.subscribe()
    }

    /// What the agent believes of each unit it loaded or started (the target-state cache; absent = inactive).
    pub fn believed(&self) -> &BTreeMap<String, JobState> {
        &self.believed
    }

    /// Units stopped outside a plan (by the at-most-once fence, `super::fence`): no longer believed launched, so
    /// a later plan starts them again where they are still wanted.
    pub fn note_stopped(&mut self, names: &BTreeSet<String>) {
        for name in names {
            self.pending_starts.remove(name);
            self.running.remove(name);
            if self.believed.get(name) == Some(&JobState::Launched) {
                self.believed.insert(name.clone(), JobState::Loaded);
            }
        }
        self.record_state();
    }

    /// Whether unit files changed since the last daemon-reload (a reload was deferred, failed, or is still due).
    pub fn reload_pending(&self) -> bool {
        self.reload_needed
    }

    /// Re-sends the loaded set when it changed: the recorded hashes, with the previous hash of each unit whose
    /// in-place update is still [`held`](Self::held), the launched hashes shown, and the fresh units.
    fn loaded_changed(&mut self) {
        let on_disk = self.units.hashes();
        self.held.retain(|name, _| on_disk.contains_key(name));
        self.fresh.retain(|name, _| on_disk.contains_key(name));
        let held = &self.held;
        let (launched, fresh) = (&self.launched_shown, &self.fresh);
        let published = |name: &String, hash: &String| held.get(name).unwrap_or(hash).clone();
        self.loaded_tx.send_if_modified(|seen| {
            let same_hashes = seen.hashes.len() == on_disk.len()
                && seen.hashes.iter().zip(on_disk).all(|((sn, sh), (n, h))| sn == n && *sh == published(n, h));
            if same_hashes && seen.launched == *launched && seen.fresh == *fresh {
                return false;
            }
            let hashes = if same_hashes {
                Arc::clone(&seen.hashes)
            } else {
                Arc::new(on_disk.iter().map(|(n, h)| (n.clone(), published(n, h))).collect())
            };
            *seen = Arc::new(Loaded { hashes, launched: launched.clone(), fresh: fresh.clone() });
            true
        });
    }

    /// Shows every unit this run loaded and the launched hash of every launched unit ([`Loaded`]): called by the
    /// agent after a run, once the health its (re)starts reset is published, where layout 1 wrote the markers.
    pub fn publish_launched(&mut self) {
        self.launched_shown = self.launched_hashes();
        self.fresh.clear();
        self.loaded_changed();
    }

    pub fn systemd(&self) -> &S {
        &self.systemd
    }

    pub fn units(&self) -> &UnitsDir {
        &self.units
    }

    /// This machine's actual units: files on disk with their recorded hash, and what the agent believes.
    pub fn actual(&self) -> BTreeMap<String, Actual> {
        let mut out: BTreeMap<String, Actual> = self
            .units
            .hashes()
            .iter()
            .map(|(n, h)| (n.clone(), Actual { hash: Some(h.clone()), ..Actual::default() }))
            .collect();
        for (n, s) in &self.believed {
            out.entry(n.clone()).or_default().believed = *s;
        }
        for (n, token) in &self.restarts {
            if let Some(a) = out.get_mut(n) {
                a.restarted = Some(token.clone());
            }
        }
        out
    }

    /// Unit → the rolling restart's token it was last (re)started for.
    pub fn restarts(&self) -> &BTreeMap<String, String> {
        &self.restarts
    }

    /// Records the restart tokens of the units just started, and forgets those of units no longer on disk.
    fn note_restarts(&mut self, started: &[&str], desired: &BTreeMap<String, Desired>) {
        let before = self.restarts.clone();
        for name in started {
            if let Some(token) = desired.get(*name).and_then(|d| d.restart.clone()) {
                self.restarts.insert(name.to_string(), token);
            }
        }
        let on_disk = self.units.hashes();
        self.restarts.retain(|n, _| on_disk.contains_key(n));
        if self.restarts != before {
            let path = self.units.dir().join(RESTARTS_FILE);
            let text = serde_json::to_string(&self.restarts).unwrap_or_default();
            if let Err(e) = std::fs::write(&path, text) {
                warn!(path = %path.display(), err = %e, "cannot record rolling-restart tokens; a fleetd restart may restart those units again");
            }
        }
    }

    /// Units the agent believes it launched (the job-state heartbeat refreshes their markers).
    pub fn launched(&self) -> Vec<String> {
        self.believed.iter().filter(|(_, s)| **s == JobState::Launched).map(|(n, _)| n.clone()).collect()
    }

    /// Units the agent believes it launched, with the hash of the file it started (what their markers hold).
    /// Launched units → hash of the version each runs (the one it was started with; the file's own hash for a
    /// unit adopted without a start of this agent's).
    pub fn launched_hashes(&self) -> BTreeMap<String, String> {
        launched_hashes(&self.believed, &self.running, &self.units)
    }

    /// Units whose systemd state is published (those with a file here), with their recorded hash.
    pub fn loaded(&self) -> &BTreeMap<String, String> {
        self.units.hashes()
    }

    /// The unit states to publish for this machine: systemd's view of every unit with a file here, with the hash
    /// recorded for the file (spec §7.5), without restart counters (the publish loop reads those).
    pub async fn current_states(&self, machine_id: &str) -> Result<BTreeMap<String, PublishedState>, AgentError> {
        let names: Vec<String> = self.units.hashes().keys().cloned().collect();
        let statuses = self.systemd.states(&names).await?;
        Ok(unit_states(machine_id, &statuses, self.units.hashes(), &BTreeMap::new(), None))
    }

    /// Plan against `desired` and run the plan.
    pub async fn reconcile(&mut self, desired: &BTreeMap<String, Desired>) -> Vec<TaskReport> {
        let planned = plan(desired, &self.actual());
        self.run(planned, desired).await
    }

    /// Run `planned` in order. `desired` supplies the text of units to load. Consecutive tasks of one type (the
    /// plan groups them) run as a batch whose systemd jobs overlap ([`CONCURRENT_JOBS`]); the batch ends before
    /// the next type's tasks begin, so every stop still finishes before any file is deleted or any start issued.
    pub async fn run(&mut self, planned: Vec<Planned>, desired: &BTreeMap<String, Desired>) -> Vec<TaskReport> {
        let mut failed: BTreeSet<String> = BTreeSet::new();
        let mut reports = Vec::with_capacity(planned.len());
        self.stopped_in_run.clear();
        self.starting = planned
            .iter()
            .filter_map(|p| match &p.task {
                Task::Start(unit) => Some(unit.clone()),
                _ => None,
            })
            .collect();
        let mut rest = planned.into_iter().peekable();
        while let Some(first) = rest.next() {
            let mut batch = vec![first];
            while let Some(next) = rest.next_if(|p| p.task.kind() == batch[0].task.kind()) {
                batch.push(next);
            }
            let runnable: Vec<&Task> =
                batch.iter().map(|p| &p.task).filter(|t| t.unit().is_none_or(|unit| !failed.contains(unit))).collect();
            let mut outcomes = self.execute_batch(&runnable, desired).await.into_iter();
            for p in batch {
                let outcome = match p.task.unit() {
                    Some(unit) if failed.contains(unit) => Ok(Outcome::Skipped("an earlier task of this unit failed")),
                    _ => outcomes.next().unwrap_or(Ok(Outcome::Skipped("not run"))),
                };
                let kind = p.task.kind();
                let job = p.task.unit().unwrap_or("");
                match &outcome {
                    Ok(o) => {
                        info!(unit = %job, outcome = ?o, "AgentReconciler completed task: type={kind} job={job} reason=\"{}\"", p.reason)
                    }
                    Err(e) => {
                        warn!(unit = %job, "AgentReconciler task failed: type={kind} job={job} reason=\"{}\" err={e}", p.reason);
                        failed.insert(job.to_string());
                    }
                }
                reports.push(TaskReport { planned: p, outcome });
            }
        }
        // Every unit reload of this run has finished; once systemd also reads the new files, the in-place
        // updates are in effect and their new hashes may be published.
        if !self.reload_needed && !self.held.is_empty() {
            self.held.clear();
            self.loaded_changed();
        }
        self.record_state();
        reports
    }

    /// Runs tasks of one type; outcomes in task order.
    async fn execute_batch(
        &mut self,
        tasks: &[&Task],
        desired: &BTreeMap<String, Desired>,
    ) -> Vec<Result<Outcome, AgentError>> {
        let names: Vec<&str> = tasks.iter().filter_map(|t| t.unit()).collect();
        match tasks.first() {
            Some(Task::Stop(_)) => self.stop_all(&names).await,
            Some(Task::Unload(_)) => self.unload_all(&names).await,
            Some(Task::Start(_)) => {
                let outcomes = self.start_all(&names).await;
                let started: Vec<&str> = names
                    .iter()
                    .zip(&outcomes)
                    .filter(|(_, o)| matches!(o, Ok(Outcome::Started(_) | Outcome::StartPending)))
                    .map(|(n, _)| *n)
                    .collect();
                self.note_restarts(&started, desired);
                self.show_started_fresh(&names, desired);
                outcomes
            }
            Some(Task::ReloadUnit(_)) => self.reload_units(&names).await,
            Some(Task::Load(..)) => self.load_all(tasks, desired).await,
            Some(Task::Update(..)) => self.update_all(tasks, desired),
            Some(Task::Reload) => {
                let mut outcomes = Vec::with_capacity(tasks.len());
                for _ in tasks {
                    outcomes.push(self.reload().await);
                }
                outcomes
            }
            None => Vec::new(),
        }
    }

    /// Unload every unit file in the units directory, repeating every second until none is left or `deadline`
    /// has passed (spec §1.5 purge). Returns every task run.
    pub async fn purge(&mut self, deadline: Duration) -> Vec<TaskReport> {
        const PURGE_ROUNDS_WITHOUT_PROGRESS: u32 = 3;
        let started = Instant::now();
        let mut reports = Vec::new();
        let mut rounds_without_progress = 0;
        loop {
            if let Err(e) = self.units.rescan() {
                warn!(err = %e, "purge: cannot list the units directory");
            }
            self.loaded_changed();
            let left = self.units.hashes().len();
            if left == 0 {
                break;
            }
            let planned = plan(&BTreeMap::new(), &self.actual());
            reports.extend(self.run(planned, &BTreeMap::new()).await);
            if started.elapsed() >= deadline {
                warn!(left = self.units.hashes().len(), "purge: deadline passed with unit files left");
                break;
            }
            // Nothing unloaded for a few rounds: systemd is unreachable (e.g. D-Bus already stopped during a
            // system shutdown); retrying until the deadline would only delay the rest of the shutdown.
            rounds_without_progress = if self.units.hashes().len() < left { 0 } else { rounds_without_progress + 1 };
            if rounds_without_progress >= PURGE_ROUNDS_WITHOUT_PROGRESS {
                warn!(left = self.units.hashes().len(), "purge: no progress; giving up with unit files left");
                break;
            }
            if !self.units.hashes().is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        reports
    }

    /// Writes every file, then links (and enables) them concurrently.
    async fn load_all(
        &mut self,
        tasks: &[&Task],
        desired: &BTreeMap<String, Desired>,
    ) -> Vec<Result<Outcome, AgentError>> {
        let mut written: Vec<Result<(String, PathBuf, bool, bool), AgentError>> = Vec::with_capacity(tasks.len());
        for task in tasks {
            let Task::Load(name, hash) = task else {
                written.push(Err(AgentError::MissingUnit(task.unit().unwrap_or_default().to_string())));
                continue;
            };
            let Some(unit) = desired.get(name).filter(|d| d.hash == *hash) else {
                written.push(Err(AgentError::MissingUnit(name.clone())));
                continue;
            };
            if self.units.hash_of(name).is_none() {
                self.fresh.insert(name.clone(), tokio::time::Instant::now());
                // Its first shown state is a started one: it carries the hash from the start.
                if self.starting.contains(name) && !has_health_check(unit) {
                    self.launched_shown.insert(name.clone(), hash.clone());
                }
            }
            let file = self.units.write(name, &unit.text).and_then(|changed| Ok((self.units.path_of(name)?, changed)));
            written.push(file.map(|(path, changed)| (name.clone(), path, changed, unit.install)));
            self.held.remove(name);
        }
        self.loaded_changed();
        let linked: Vec<Result<bool, fleet_systemd::SystemdError>> = {
            let this = &*self;
            stream::iter(written.iter())
                .map(|w| async move {
                    let Ok((_, path, _, install)) = w else { return Ok(false) };
                    let mut changed = !this.systemd.link_runtime(path).await?.is_empty();
                    if *install {
                        changed |= !this.systemd.enable_runtime(path).await?.is_empty();
                    }
                    Ok(changed)
                })
                .buffered(CONCURRENT_JOBS)
                .collect()
                .await
        };
        let mut outcomes = Vec::with_capacity(written.len());
        for (w, link) in written.into_iter().zip(linked) {
            let (name, _, wrote, install) = match w {
                Ok(w) => w,
                Err(e) => {
                    outcomes.push(Err(e));
                    continue;
                }
            };
            self.reload_needed |= wrote;
            if wrote {
                self.changed_files.insert(name.clone());
            }
            match link {
                Ok(linked) => {
                    self.reload_needed |= linked;
                    if linked {
                        self.changed_files.insert(name.clone());
                        // Enabling adds dependencies to other units ([Install]): only a reload applies them.
                        self.reload_required |= install;
                    }
                    self.believed.insert(name, JobState::Loaded);
                    outcomes.push(Ok(Outcome::Loaded { changed: wrote || linked }));
                }
                Err(source) if install => {
                    // A failed enable leaves nothing behind: the file goes, and so does any link made.
                    if let Err(e) = self.units.remove(&name) {
                        warn!(unit = %name, err = %e, "cannot remove the unit file after a failed enable");
                    }
                    self.loaded_changed();
                    let _ = self.systemd.disable_runtime(&name).await;
                    self.reload_needed = true;
                    self.reload_required = true;
                    outcomes.push(Err(AgentError::Enable { name, source }));
                }
                Err(source) => outcomes.push(Err(source.into())),
            }
        }
        outcomes
    }

    /// Overwrites the files of loaded units with their new versions; nothing is stopped.
    fn update_all(&mut self, tasks: &[&Task], desired: &BTreeMap<String, Desired>) -> Vec<Result<Outcome, AgentError>> {
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            let Task::Update(name, hash) = task else {
                outcomes.push(Err(AgentError::MissingUnit(task.unit().unwrap_or_default().to_string())));
                continue;
            };
            let Some(unit) = desired.get(name).filter(|d| d.hash == *hash) else {
                outcomes.push(Err(AgentError::MissingUnit(name.clone())));
                continue;
            };
            let previous = self.units.hash_of(name).map(str::to_string);
            outcomes.push(self.units.write(name, &unit.text).map(|changed| {
                self.reload_needed |= changed;
                if changed {
                    self.changed_files.insert(name.clone());
                    if let Some(previous) = previous.filter(|p| p != hash) {
                        self.held.entry(name.clone()).or_insert(previous);
                    }
                }
                self.believed.entry(name.clone()).or_insert(JobState::Loaded);
                info!(unit = %name, hash = %hash, "updated unit file in place; the running process is kept");
                Outcome::Loaded { changed }
            }));
        }
        self.loaded_changed();
        outcomes
    }

    /// Reloads running units (`ExecReload=`) once the daemon-reload their new files need has happened.
    async fn reload_units(&mut self, names: &[&str]) -> Vec<Result<Outcome, AgentError>> {
        if let Some(not_yet) = self.reload_before(names.len()).await {
            return not_yet;
        }
        let results: Vec<Result<JobResult, fleet_systemd::SystemdError>> = {
            let this = &*self;
            stream::iter(names).map(|name| this.systemd.reload(name)).buffered(CONCURRENT_JOBS).collect().await
        };
        names
            .iter()
            .zip(results)
            .map(|(name, result)| {
                let result = result?;
                info!(unit = %name, result = %result, "Reloaded unit");
                Ok(Outcome::Reloaded(result))
            })
            .collect()
    }

    async fn stop_all(&mut self, names: &[&str]) -> Vec<Result<Outcome, AgentError>> {
        let results: Vec<Result<Stopped, AgentError>> = {
            let this = &*self;
            stream::iter(names).map(|name| this.stop_and_wait(name)).buffered(CONCURRENT_JOBS).collect().await
        };
        names
            .iter()
            .zip(results)
            .map(|(name, result)| {
                let Stopped { result, left } = result?;
                self.pending_starts.remove(*name);
                self.running.remove(*name);
                self.stopped_in_run.insert(name.to_string(), left);
                if self.believed.contains_key(*name) {
                    self.believed.insert(name.to_string(), JobState::Loaded);
                }
                Ok(Outcome::Stopped(result))
            })
            .collect()
    }

    /// Stops, disables and resets every unit concurrently, then deletes their files.
    async fn unload_all(&mut self, names: &[&str]) -> Vec<Result<Outcome, AgentError>> {
        for name in names {
            self.believed.remove(*name);
            self.running.remove(*name);
        }
        let results: Vec<Result<Option<String>, AgentError>> = {
            let this = &*self;
            stream::iter(names)
                .map(|name| {
                    let link = this.units.path_of(name).ok().filter(|path| !has_install_section(path));
                    this.unload_in_systemd(name, this.stopped_in_run.get(*name).cloned(), link)
                })
                .buffered(CONCURRENT_JOBS)
                .collect()
                .await
        };
        let unsure: Vec<&str> = names
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.as_ref().is_ok_and(|left| may_be_failed(left.as_deref())))
            .map(|(n, _)| *n)
            .collect();
        let mut reset_errors = self.reset_failed_where_failed(&unsure).await;
        let mut outcomes = Vec::with_capacity(names.len());
        for (name, result) in names.iter().zip(results) {
            let result = result.and_then(|_| reset_errors.remove(*name).map_or(Ok(()), Err));
            outcomes.push(match result {
                Ok(()) => {
                    self.pending_starts.remove(*name);
                    self.units.remove(name).map(|_| Outcome::Done)
                }
                Err(e) => Err(e),
            });
        }
        self.loaded_changed();
        self.reload_needed = true;
        self.changed_files.extend(names.iter().map(|n| n.to_string()));
        outcomes
    }

    /// Resets the units among `names` that systemd shows failed (one `ListUnitsByNames` instead of a
    /// `ResetFailedUnit` per unit; every one of them when the states cannot be read). Returns the failures.
    async fn reset_failed_where_failed(&self, names: &[&str]) -> BTreeMap<String, AgentError> {
        if names.is_empty() {
            return BTreeMap::new();
        }
        let owned: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let failed: Vec<String> = match self.systemd.states(&owned).await {
            Ok(states) => states.into_iter().filter(|s| s.active_state == "failed").map(|s| s.name).collect(),
            Err(e) => {
                debug!(err = %e, "cannot read the states of unloaded units; resetting each");
                owned
            }
        };
        let results: Vec<Result<(), AgentError>> = stream::iter(&failed)
            .map(|name| self.reset_failed_in_systemd(name))
            .buffered(CONCURRENT_JOBS)
            .collect()
            .await;
        failed.into_iter().zip(results).filter_map(|(name, r)| r.err().map(|e| (name, e))).collect()
    }

    /// The systemd side of an unload: stop (and wait) unless `stopped` already in this run (`Some`, with the state
    /// the stop left the unit in where told), remove the runtime link (for a unit without `[Install]`, whose file
    /// is `link`, on the file system when it is there; else `DisableUnitFiles`, which also undoes an enablement).
    /// Returns the state the stop left the unit in, where told; reset-failed follows for the batch.
    async fn unload_in_systemd(
        &self,
        name: &str,
        stopped: Option<Option<String>>,
        link: Option<PathBuf>,
    ) -> Result<Option<String>, AgentError> {
        let left = match stopped {
            Some(left) => left,
            None => self.stop_and_wait(name).await?.left,
        };
        let unlinked = match &link {
            Some(path) => self.systemd.unlink_runtime(name, path).await.unwrap_or_else(|e| {
                debug!(unit = %name, err = %e, "cannot remove the runtime link directly; asking systemd");
                false
            }),
            None => false,
        };
        if unlinked {
            debug!(unit = %name, "removed the runtime link");
        } else {
            self.disable_in_systemd(name).await?;
        }
        Ok(left)
    }

    async fn disable_in_systemd(&self, name: &str) -> Result<(), AgentError> {
        match self.systemd.disable_runtime(name).await {
            // A file that was never linked (e.g. left by a crash) has nothing to disable.
            Err(e) if !e.is_not_loaded() && e.dbus_name() != Some(fleet_systemd::NO_SUCH_UNIT) => Err(e.into()),
            _ => Ok(()),
        }
    }

    async fn reset_failed_in_systemd(&self, name: &str) -> Result<(), AgentError> {
        match self.systemd.reset_failed(name).await {
            Err(e) if !e.is_not_loaded() => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Stop `name` and wait, within `stop_wait`, for the job and for the unit to be inactive; the job's result
    /// and the state it left the unit in, where told. A unit systemd does not know is already stopped (and not
    /// failed).
    async fn stop_and_wait(&self, name: &str) -> Result<Stopped, AgentError> {
        let wait = async {
            let Stopped { result, left } = match self.systemd.stop(name).await {
                Ok(stopped) => stopped,
                Err(e) if e.is_not_loaded() => {
                    return Ok(Stopped { result: JobResult::Done, left: Some("inactive".into()) });
                }
                Err(e) => {
                    // The stop may have run with its answer lost: what systemd shows decides. Kept "launched", a
                    // stopped unit would never be started again.
                    let stopped = self
                        .systemd
                        .states(&[name.to_string()])
                        .await
                        .is_ok_and(|states| states.iter().all(|s| fleet_core::model::is_stopped(&s.active_state)));
                    if !stopped {
                        return Err(AgentError::from(e));
                    }
                    warn!(unit = %name, error = %e, "the stop's answer was lost, but systemd shows the unit stopped");
                    Stopped { result: JobResult::Unknown, left: None }
                }
            };
            // A stop job is done only once its unit is inactive or failed (its stop hooks have run); another
            // result (canceled, say) says nothing about the unit, so then its state is waited for.
            if result.is_done() {
                info!(unit = %name, result = %result, "Stopped unit");
                return Ok(Stopped { result, left });
            }
            let state = self.systemd.wait_inactive(name).await?;
            info!(unit = %name, result = %result, state = %state, "Stopped unit");
            Ok(Stopped { result, left: Some(state) })
        };
        match tokio::time::timeout(self.config.stop_wait, wait).await {
            Ok(r) => r,
            Err(_) => Err(AgentError::Timeout {
                what: format!("{name} to stop and become inactive"),
                secs: self.config.stop_wait.as_secs(),
            }),
        }
    }

    async fn reload(&mut self) -> Result<Outcome, AgentError> {
        if !self.reload_needed {
            return Ok(Outcome::Skipped("no unit file changed"));
        }
        if !self.reload_required {
            match self.unit_needing_reload().await {
                None => {
                    info!(
                        units = self.changed_files.len(),
                        "systemd already matches every changed unit file: no daemon-reload"
                    );
                    self.clear_reload();
                    return Ok(Outcome::Skipped("systemd already matches the changed unit files"));
                }
                Some(why) => debug!(%why, "a daemon-reload is needed"),
            }
        }
        if self.starts_running().await {
            return Ok(Outcome::Deferred("own start jobs still running"));
        }
        info!("Instructing systemd to reload units");
        self.systemd.daemon_reload().await?;
        self.clear_reload();
        Ok(Outcome::Done)
    }

    /// Asks systemd what it holds of each changed unit ([`fleet_systemd::Definition::matches_disk`]) and says
    /// which is the first that needs a daemon-reload, and why. Not knowing counts as needing one.
    async fn unit_needing_reload(&self) -> Option<String> {
        let names: Vec<String> = self.changed_files.iter().cloned().collect();
        let definitions = match self.systemd.definitions(&names).await {
            Ok(d) => d,
            Err(e) => return Some(format!("cannot ask systemd ({e})")),
        };
        let hashes = self.units.hashes();
        definitions.into_iter().find_map(|(name, definition)| {
            let has_file = hashes.contains_key(&name);
            (!definition.matches_disk(has_file)).then(|| {
                let file = if has_file { "its file is there" } else { "its file is gone" };
                format!("{name}: systemd holds {definition:?} and {file}")
            })
        })
    }

    fn clear_reload(&mut self) {
        self.reload_needed = false;
        self.reload_required = false;
        self.changed_files.clear();
    }

    /// The daemon-reload that `n` starts or unit reloads need before they run: `None` when done (or not needed),
    /// else their outcomes.
    async fn reload_before(&mut self, n: usize) -> Option<Vec<Result<Outcome, AgentError>>> {
        if !self.reload_needed {
            return None;
        }
        // Files changed but the reload has not happened (deferred or failed): starting now could run stale unit
        // definitions. Try the reload; otherwise wait for the next reconcile.
        match self.reload().await {
            Ok(Outcome::Done | Outcome::Skipped(_)) if !self.reload_needed => None,
            Ok(_) => Some((0..n).map(|_| Ok(Outcome::Deferred("daemon-reload pending"))).collect()),
            // The first task reports the failure; the others wait for the next reconcile.
            Err(e) => {
                let mut outcomes = vec![Err(e)];
                outcomes.extend((1..n).map(|_| Ok(Outcome::Deferred("daemon-reload failed"))));
                Some(outcomes)
            }
        }
    }

    /// Starts every unit concurrently and waits (up to `start_wait` each) for the jobs.
    async fn start_all(&mut self, names: &[&str]) -> Vec<Result<Outcome, AgentError>> {
        if let Some(not_yet) = self.reload_before(names.len()).await {
            return not_yet;
        }
        let results: Vec<Option<Result<JobResult, fleet_systemd::SystemdError>>> = {
            let this = &*self;
            stream::iter(names)
                .map(|name| async move { tokio::time::timeout(this.config.start_wait, this.systemd.start(name)).await.ok() })
                .buffered(CONCURRENT_JOBS)
                .collect()
                .await
        };
        let mut outcomes = Vec::with_capacity(names.len());
        for (name, result) in names.iter().zip(results) {
            outcomes.push(match result {
                Some(Ok(result)) => {
                    self.believed.insert(name.to_string(), JobState::Launched);
                    self.note_running(name);
                    self.pending_starts.remove(*name);
                    if result.is_done() {
                        info!(unit = %name, "Triggered systemd unit start: job done");
                    } else {
                        warn!(unit = %name, result = %result, "systemd start job did not succeed");
                    }
                    Ok(Outcome::Started(result))
                }
                Some(Err(e)) => Err(e.into()),
                None => {
                    debug!(unit = %name, "start job still running; tracking it");
                    self.believed.insert(name.to_string(), JobState::Launched);
                    self.note_running(name);
                    self.pending_starts.insert(name.to_string());
                    Ok(Outcome::StartPending)
                }
            });
        }
        outcomes
    }

    /// The fresh units among `names` whose start ended are fresh no more; their launched hash is the one they
    /// were started with, or none when the start failed. Not for those with a health check: a health the publisher
    /// may still hold from the unit's previous version must be reset and published before a new launched hash is,
    /// so theirs comes after the run ([`Self::publish_launched`]).
    fn show_started_fresh(&mut self, names: &[&str], desired: &BTreeMap<String, Desired>) {
        let launched = self.launched_hashes();
        for name in names {
            if self.fresh.remove(*name).is_none() || desired.get(*name).is_none_or(has_health_check) {
                continue;
            }
            match launched.get(*name) {
                Some(hash) => self.launched_shown.insert(name.to_string(), hash.clone()),
                None => self.launched_shown.remove(*name),
            };
        }
        self.loaded_changed();
    }

    /// Records that `name` now runs the version on disk, unless it already ran before this start (a start of an
    /// active unit is a no-op for systemd: the version it runs does not change).
    fn note_running(&mut self, name: &str) {
        if let Some(hash) = self.units.hash_of(name) {
            self.running.entry(name.to_string()).or_insert_with(|| hash.to_string());
        }
    }

    /// Whether any start job the agent left running is still running (unit `activating`).
    async fn starts_running(&mut self) -> bool {
        if self.pending_starts.is_empty() {
            return false;
        }
        let names: Vec<String> = self.pending_starts.iter().cloned().collect();
        match self.systemd.states(&names).await {
            Ok(states) => {
                let activating: BTreeSet<String> =
                    states.into_iter().filter(|s| s.active_state == "activating").map(|s| s.name).collect();
                self.pending_starts.retain(|n| activating.contains(n));
                !self.pending_starts.is_empty()
            }
            Err(e) => {
                warn!(err = %e, "cannot read states of pending start jobs; deferring daemon-reload");
                true
            }
        }
    }
}

/// Whether the unit may have a health check (its text names one; parsed by the publish loop).
fn has_health_check(unit: &Desired) -> bool {
    unit.text.contains(fleet_core::unit::xfleet::policy_keys::HEALTH_CHECK)
}

/// Launched units → hash of the version each runs ([`Executor::launched_hashes`]).
fn launched_hashes(
    believed: &BTreeMap<String, JobState>,
    running: &BTreeMap<String, String>,
    units: &UnitsDir,
) -> BTreeMap<String, String> {
    believed
        .iter()
        .filter(|(_, s)| **s == JobState::Launched)
        .map(|(n, _)| {
            let hash = running.get(n).map(String::as_str).or_else(|| units.hash_of(n)).unwrap_or_default();
            (n.clone(), hash.to_string())
        })
        .collect()
}

/// The recorded rolling-restart tokens; none when the file is missing or unreadable (then a unit in a rolling
/// restart may be restarted once more, never skipped).
fn read_restarts(path: &std::path::Path) -> BTreeMap<String, String> {
    std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests;

//! [`SimSystemd`]: a simulated unit manager for the scale simulation (issue 16 item 3) — the agent's
//! [`SystemdOps`] answered from memory, so hundreds of real agents run in one process without a systemd each.
//!
//! It answers as systemd does for what the agent asks (see `harness/tests/systemd_client.rs` for the real thing):
//! * `link_runtime`/`enable_runtime` record the runtime link (and the `[Install]` enablement) of a unit file and
//!   report the symlinks made (none when they were already there); nothing is loaded yet.
//! * A unit is **loaded** (its file read from disk, the definition kept) when it is first referenced: by
//!   `states` (`ListUnitsByNames` loads units), `start`, or `definitions` (`ListUnitsByNames` too); it is then
//!   `loaded`/`inactive`/`dead`. A unit without a file is `not-found`/`inactive`/`dead`.
//! * `start` → `activating`/`start` → `active`/`running`, job `done`; a unit whose `ExecStart=` is `/bin/false`
//!   (or `/usr/bin/false`) ends `failed`/`failed` with job `failed`. `stop` → `deactivating` → `inactive`/`dead`,
//!   after which the definition is dropped (systemd garbage-collects an inactive unit nothing references; the next
//!   reference reads the file again). `start`/`stop`/`reload` of a unit with no file: `NoSuchUnit`.
//! * A loaded unit whose file changed on disk needs a daemon-reload (`definitions`: stale); `daemon_reload`
//!   re-reads every loaded unit's file, and forgets inactive units whose file and link are gone (a running unit
//!   whose file vanished stays running, `not-found`).
//! * Every state change is announced on [`SystemdOps::changes`] with the values systemd's `PropertiesChanged`
//!   signals carry (`NRestarts` of a service, then `ActiveState`/`SubState`); a definition read again by
//!   `daemon_reload` is announced without values.
//!
//! Latency: each job (start, stop, reload) can be given a modelled duration ([`SimConfig::job_latency`], default
//! 0: the state changes happen in the call). It is a cost model only, never needed for correctness. Every other
//! operation costs a lock, a map lookup and, when loading, one read of a small file.
//!
//! The state machine is the pure [`transition`]; [`SimSystemd`] is the shell around it.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleet_systemd::{
    ChangeFeed, Definition, FileChange, JobResult, NO_SUCH_UNIT, Reported, Stopped, SystemdError, SystemdOps,
    UnitChanges, UnitStatus,
};

/// Where systemd keeps runtime links (what `LinkUnitFiles(runtime=true)` reports).
const RUNTIME_DIR: &str = "/run/systemd/system";

/// Cost model of the simulated unit manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimConfig {
    /// How long each start, stop and reload job takes between its two state changes (default 0).
    pub job_latency: Duration,
}

/// systemd's `ActiveState` of a simulated unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Active {
    #[default]
    Inactive,
    Activating,
    Active,
    Deactivating,
    Failed,
}

impl Active {
    /// `ActiveState` and `SubState` as systemd spells them for a service.
    pub fn states(self) -> (&'static str, &'static str) {
        match self {
            Active::Inactive => ("inactive", "dead"),
            Active::Activating => ("activating", "start"),
            Active::Active => ("active", "running"),
            Active::Deactivating => ("deactivating", "stop-sigterm"),
            Active::Failed => ("failed", "failed"),
        }
    }
}

/// A job the simulated manager runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    Start,
    Stop,
    Reload,
}

/// One step of a job: the state the unit passes through, then the state it ends in with the job's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The intermediate state announced while the job runs (none when the job has nothing to do).
    pub via: Option<Active>,
    pub end: Active,
    pub result: JobResult,
}

/// Pure: what `job` does to a loaded unit in state `now`; `runs` is whether its `ExecStart=` succeeds. A reload of
/// a unit that is not active is refused (`Err`, as systemd's `UnitNotActive`).
pub fn transition(now: Active, job: Job, runs: bool) -> Result<Transition, &'static str> {
    let done = |via, end| Transition { via, end, result: JobResult::Done };
    Ok(match (job, now) {
        (Job::Start, Active::Active) => done(None, Active::Active),
        (Job::Start, _) if runs => done(Some(Active::Activating), Active::Active),
        (Job::Start, _) => Transition { via: Some(Active::Activating), end: Active::Failed, result: JobResult::Failed },
        (Job::Stop, Active::Inactive) => done(None, Active::Inactive),
        (Job::Stop, Active::Failed) => done(None, Active::Failed),
        (Job::Stop, _) => done(Some(Active::Deactivating), Active::Inactive),
        (Job::Reload, Active::Active) => done(None, Active::Active),
        (Job::Reload, _) => return Err("is not active"),
    })
}

/// Pure: whether a unit file's `ExecStart=` would succeed in the simulation (everything but `/bin/false`).
pub fn exec_start_runs(text: &str) -> bool {
    !text.lines().any(|l| {
        let l = l.trim();
        l == "ExecStart=/bin/false" || l == "ExecStart=/usr/bin/false"
    })
}

/// What the simulated manager knows of one unit.
#[derive(Debug, Clone, Default)]
struct SimUnit {
    /// The runtime link's target (the unit file in fleet's units directory).
    link: Option<PathBuf>,
    /// Enabled (runtime) through its `[Install]` section.
    enabled: bool,
    /// The definition read from the file when the unit was (re)loaded; `None` = not loaded.
    definition: Option<String>,
    active: Active,
}

struct Inner {
    config: SimConfig,
    units: Mutex<BTreeMap<String, SimUnit>>,
    changes: ChangeFeed,
    operations: AtomicU64,
    reloads: AtomicU64,
}

/// The simulated unit manager (see the module docs). Cheap to clone; clones share the units.
#[derive(Clone)]
pub struct SimSystemd {
    inner: Arc<Inner>,
}

impl Default for SimSystemd {
    fn default() -> Self {
        SimSystemd::new(SimConfig::default())
    }
}

fn no_such_unit(call: &'static str, name: &str) -> SystemdError {
    SystemdError::Call {
        call,
        target: name.to_string(),
        name: NO_SUCH_UNIT.to_string(),
        message: format!("Unit {name} not loaded."),
    }
}

fn unit_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

impl SimSystemd {
    pub fn new(config: SimConfig) -> SimSystemd {
        SimSystemd {
            inner: Arc::new(Inner {
                config,
                units: Mutex::new(BTreeMap::new()),
                changes: ChangeFeed::default(),
                operations: AtomicU64::new(0),
                reloads: AtomicU64::new(0),
            }),
        }
    }

    /// Calls answered so far (every [`SystemdOps`] method counts one).
    pub fn operations(&self) -> u64 {
        self.inner.operations.load(Ordering::Relaxed)
    }

    /// Daemon-reloads done so far.
    pub fn daemon_reloads(&self) -> u64 {
        self.inner.reloads.load(Ordering::Relaxed)
    }

    /// The status of every unit the manager knows, in name order (for tests and the simulation's summary).
    pub fn all_states(&self) -> Vec<UnitStatus> {
        let units = self.lock();
        units.iter().map(|(name, u)| status(name, Some(u))).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, SimUnit>> {
        self.inner.operations.fetch_add(1, Ordering::Relaxed);
        // A poisoned lock only means a panic elsewhere while holding it; the map itself is still consistent.
        self.inner.units.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Announces a state change of `name` as systemd does: a service's Service-interface signal carrying its
    /// `NRestarts` (always 0 here), then the Unit-interface signal carrying `ActiveState` and `SubState`.
    fn announce(&self, name: &str) {
        // Not `lock()`: a signal is no operation the agent asked for.
        let units = self.inner.units.lock().unwrap_or_else(|e| e.into_inner());
        let (active, sub) = units.get(name).map_or(Active::Inactive, |u| u.active).states();
        drop(units);
        if name.ends_with(".service") {
            self.send(name, Reported { active: None, restarts: Some(0), entered: None });
        }
        self.send(
            name,
            Reported { active: Some((active.to_string(), sub.to_string())), restarts: None, entered: None },
        );
    }

    /// Announces a change that carries none of the values the publisher follows (a definition read again).
    fn announce_definition(&self, name: &str) {
        self.send(name, Reported::default());
    }

    fn send(&self, name: &str, reported: Reported) {
        self.inner.changes.push(name, &reported);
    }

    /// Loads `name` from its linked file if it is not loaded; false when it has no readable file.
    fn ensure_loaded(units: &mut BTreeMap<String, SimUnit>, name: &str) -> bool {
        let Some(unit) = units.get_mut(name) else { return false };
        if unit.definition.is_some() {
            return true;
        }
        match unit.link.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
            Some(text) => {
                unit.definition = Some(text);
                true
            }
            None => false,
        }
    }

    /// systemd garbage-collects an inactive unit it holds no definition of once nothing links it either.
    fn forget_if_unreferenced(units: &mut BTreeMap<String, SimUnit>, name: &str) {
        if units
            .get(name)
            .is_some_and(|u| u.active == Active::Inactive && u.definition.is_none() && u.link.is_none() && !u.enabled)
        {
            units.remove(name);
        }
    }

    /// Runs `job` on the unit; its result, and the state it left the unit in when that was announced (as
    /// systemd's signals tell it before the job's removal).
    async fn job(
        &self,
        call: &'static str,
        name: &str,
        job: Job,
    ) -> fleet_systemd::Result<(JobResult, Option<Active>)> {
        let step = {
            let mut units = self.lock();
            if !Self::ensure_loaded(&mut units, name) {
                return Err(no_such_unit(call, name));
            }
            let unit = units.get_mut(name).expect("loaded above");
            let runs = unit.definition.as_deref().is_some_and(exec_start_runs);
            let step = transition(unit.active, job, runs).map_err(|why| SystemdError::Call {
                call,
                target: name.to_string(),
                name: "org.freedesktop.systemd1.UnitNotActive".into(),
                message: format!("Unit {name} {why}."),
            })?;
            if let Some(via) = step.via {
                unit.active = via;
            }
            step
        };
        if step.via.is_some() {
            self.announce(name);
            if !self.inner.config.job_latency.is_zero() {
                tokio::time::sleep(self.inner.config.job_latency).await;
            }
        }
        {
            let mut units = self.lock();
            if let Some(unit) = units.get_mut(name) {
                unit.active = step.end;
                // An inactive unit nothing references is garbage-collected: its next reference reads the file.
                if step.end == Active::Inactive {
                    unit.definition = None;
                    if unit.link.is_none() {
                        units.remove(name);
                    }
                }
            }
        }
        let announced = step.via.is_some();
        if announced {
            self.announce(name);
        }
        Ok((step.result, announced.then_some(step.end)))
    }
}

/// systemd's answer for one unit (`ListUnitsByNames`): unknown units are `not-found`/`inactive`/`dead`.
fn status(name: &str, unit: Option<&SimUnit>) -> UnitStatus {
    let (active, sub) = unit.map_or(Active::Inactive, |u| u.active).states();
    let load = match unit {
        Some(u) if u.definition.is_some() => "loaded",
        _ => "not-found",
    };
    UnitStatus {
        name: name.to_string(),
        load_state: load.to_string(),
        active_state: active.to_string(),
        sub_state: sub.to_string(),
    }
}

impl SystemdOps for SimSystemd {
    fn start(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<JobResult>> + Send {
        let (this, name) = (self.clone(), name.to_string());
        async move { this.job("StartUnit", &name, Job::Start).await.map(|(result, _)| result) }
    }

    fn stop(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<Stopped>> + Send {
        let (this, name) = (self.clone(), name.to_string());
        async move {
            let known = this.lock().get(&name).is_some_and(|u| u.definition.is_some() || u.link.is_some());
            if !known {
                return Err(no_such_unit("StopUnit", &name));
            }
            let (result, left) = this.job("StopUnit", &name, Job::Stop).await?;
            Ok(Stopped { result, left: left.map(|active| active.states().0.to_string()) })
        }
    }

    fn reload(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<JobResult>> + Send {
        let (this, name) = (self.clone(), name.to_string());
        async move { this.job("ReloadUnit", &name, Job::Reload).await.map(|(result, _)| result) }
    }

    fn wait_inactive(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<String>> + Send {
        // Jobs finish inside their call, so a unit is never left between states here.
        let active = self.lock().get(name).map_or(Active::Inactive, |u| u.active);
        let state = match active {
            Active::Failed => "failed",
            _ => "inactive",
        };
        async move { Ok(state.to_string()) }
    }

    fn link_runtime(&self, path: &Path) -> impl Future<Output = fleet_systemd::Result<Vec<FileChange>>> + Send {
        let name = unit_name(path);
        let changes = {
            let mut units = self.lock();
            let unit = units.entry(name.clone()).or_default();
            if unit.link.as_deref() == Some(path) {
                Vec::new()
            } else {
                unit.link = Some(path.to_path_buf());
                vec![FileChange {
                    kind: "symlink".into(),
                    file: format!("{RUNTIME_DIR}/{name}"),
                    destination: path.to_string_lossy().into_owned(),
                }]
            }
        };
        async move { Ok(changes) }
    }

    fn enable_runtime(&self, path: &Path) -> impl Future<Output = fleet_systemd::Result<Vec<FileChange>>> + Send {
        let name = unit_name(path);
        let changes = {
            let mut units = self.lock();
            let unit = units.entry(name.clone()).or_default();
            let mut changes = Vec::new();
            if unit.link.as_deref() != Some(path) {
                unit.link = Some(path.to_path_buf());
                changes.push(FileChange {
                    kind: "symlink".into(),
                    file: format!("{RUNTIME_DIR}/{name}"),
                    destination: path.to_string_lossy().into_owned(),
                });
            }
            if !unit.enabled {
                unit.enabled = true;
                changes.push(FileChange {
                    kind: "symlink".into(),
                    file: format!("{RUNTIME_DIR}/multi-user.target.wants/{name}"),
                    destination: format!("{RUNTIME_DIR}/{name}"),
                });
            }
            changes
        };
        async move { Ok(changes) }
    }

    fn disable_runtime(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<Vec<FileChange>>> + Send {
        let changes = {
            let mut units = self.lock();
            let mut changes = Vec::new();
            if let Some(unit) = units.get_mut(name) {
                if unit.enabled {
                    unit.enabled = false;
                    changes.push(FileChange {
                        kind: "unlink".into(),
                        file: format!("{RUNTIME_DIR}/multi-user.target.wants/{name}"),
                        destination: String::new(),
                    });
                }
                if unit.link.take().is_some() {
                    changes.push(FileChange {
                        kind: "unlink".into(),
                        file: format!("{RUNTIME_DIR}/{name}"),
                        destination: String::new(),
                    });
                }
                Self::forget_if_unreferenced(&mut units, name);
            }
            changes
        };
        async move { Ok(changes) }
    }

    fn unlink_runtime(&self, name: &str, target: &Path) -> impl Future<Output = fleet_systemd::Result<bool>> + Send {
        let removed = {
            let mut units = self.lock();
            match units.get_mut(name) {
                Some(unit) if !unit.enabled && unit.link.as_deref() == Some(target) => {
                    unit.link = None;
                    Self::forget_if_unreferenced(&mut units, name);
                    true
                }
                _ => false,
            }
        };
        async move { Ok(removed) }
    }

    fn reset_failed(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<()>> + Send {
        let changed = {
            let mut units = self.lock();
            match units.get_mut(name) {
                Some(unit) if unit.active == Active::Failed => {
                    unit.active = Active::Inactive;
                    unit.definition = None;
                    if unit.link.is_none() {
                        units.remove(name);
                    }
                    true
                }
                // "Not loaded" counts as success, as the real client treats it.
                _ => false,
            }
        };
        if changed {
            self.announce(name);
        }
        async move { Ok(()) }
    }

    fn daemon_reload(&self) -> impl Future<Output = fleet_systemd::Result<()>> + Send {
        self.inner.reloads.fetch_add(1, Ordering::Relaxed);
        let changed: Vec<String> = {
            let mut units = self.lock();
            let mut changed = Vec::new();
            units.retain(|name, unit| {
                let text = unit.link.as_ref().and_then(|p| std::fs::read_to_string(p).ok());
                match text {
                    Some(text) => {
                        if unit.definition.as_ref().is_some_and(|d| *d != text) {
                            unit.definition = Some(text);
                            changed.push(name.clone());
                        }
                        true
                    }
                    None if unit.active == Active::Inactive => {
                        if unit.definition.is_some() {
                            changed.push(name.clone());
                        }
                        false
                    }
                    None => {
                        if unit.definition.take().is_some() {
                            changed.push(name.clone());
                        }
                        true
                    }
                }
            });
            changed
        };
        for name in &changed {
            self.announce_definition(name);
        }
        async move { Ok(()) }
    }

    fn states(&self, names: &[String]) -> impl Future<Output = fleet_systemd::Result<Vec<UnitStatus>>> + Send {
        let out = {
            let mut units = self.lock();
            names
                .iter()
                .map(|name| {
                    Self::ensure_loaded(&mut units, name);
                    status(name, units.get(name))
                })
                .collect()
        };
        async move { Ok(out) }
    }

    fn definitions(
        &self,
        names: &[String],
    ) -> impl Future<Output = fleet_systemd::Result<Vec<(String, Definition)>>> + Send {
        // As systemd's answer: what it holds, loading nothing.
        let definitions = {
            let units = self.lock();
            names
                .iter()
                .map(|name| {
                    let definition = match units.get(name).and_then(|u| u.definition.as_ref().map(|d| (u, d))) {
                        Some((unit, held)) => {
                            let on_disk = unit.link.as_ref().and_then(|p| std::fs::read_to_string(p).ok());
                            Definition::Loaded { stale: on_disk.as_ref() != Some(held) }
                        }
                        None => Definition::NotLoaded,
                    };
                    (name.clone(), definition)
                })
                .collect()
        };
        async move { Ok(definitions) }
    }

    fn changes(&self) -> UnitChanges {
        self.inner.changes.subscribe()
    }

    /// Loaded units restart 0 times: the simulation models no `Restart=`.
    fn restart_counts(&self, names: &[String]) -> impl Future<Output = Vec<(String, u32)>> + Send {
        let counts = {
            let units = self.lock();
            names
                .iter()
                .filter_map(|n| units.get(n).filter(|u| u.definition.is_some()).map(|_| (n.clone(), 0)))
                .collect()
        };
        async move { counts }
    }
}

#[cfg(test)]
mod tests;

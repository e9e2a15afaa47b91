//! A fake systemd for agent tests: records every call, answers from configurable tables.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use fleet_systemd::{Definition, FileChange, JobResult, Stopped, SystemdError, SystemdOps, UnitChanges, UnitStatus};

#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) log: Mutex<Vec<String>>,
    /// "call unit" → error to answer.
    pub(crate) fail: Mutex<BTreeMap<String, SystemdError>>,
    pub(crate) start_delay: Mutex<Option<Duration>>,
    /// Active state reported by `states`.
    pub(crate) active: Mutex<BTreeMap<String, String>>,
    /// Units whose definition systemd already reads from disk (`definitions`: loaded, not stale); the others are
    /// loaded in an older version and need a daemon-reload.
    pub(crate) current_files: Mutex<BTreeSet<String>>,
    /// Units systemd holds nothing of (`definitions`: not loaded), e.g. garbage-collected after their unload.
    pub(crate) forgotten: Mutex<BTreeSet<String>>,
    /// Result of a unit's stop job (default done).
    pub(crate) stop_results: Mutex<BTreeMap<String, JobResult>>,
    /// Units whose stop job runs (they become inactive) but whose answer is lost (`stop` answers that the signal
    /// stream ended), as systemd's merged jobs once did to fleet-systemd.
    pub(crate) stop_answer_lost: Mutex<BTreeSet<String>>,
    /// Units whose stop tells no state it left them in (`Stopped::left` is `None`), as when no signal came.
    pub(crate) stop_reports_nothing: Mutex<BTreeSet<String>>,
    /// The names of each `states` call, in order.
    pub(crate) state_reads: Mutex<Vec<Vec<String>>>,
    /// Units without a runtime link of theirs (`unlink_runtime` answers false).
    pub(crate) not_linked: Mutex<BTreeSet<String>>,
    /// Called at each `reload` (ReloadUnit) call, e.g. to look at what is published while the job runs.
    #[allow(clippy::type_complexity)]
    pub(crate) on_reload_unit: Mutex<Option<Box<dyn FnMut(&str) + Send>>>,
    /// Called at each `start` call, e.g. to look at what is published while the start job runs.
    #[allow(clippy::type_complexity)]
    pub(crate) on_start: Mutex<Option<Box<dyn FnMut(&str) + Send>>>,
}

impl Fake {
    pub(crate) fn record(&self, call: &str, arg: &str) -> fleet_systemd::Result<()> {
        let key = format!("{call} {arg}");
        self.log.lock().unwrap().push(key.clone());
        match self.fail.lock().unwrap().get(&key) {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
    pub(crate) fn fail(&self, key: &str, name: &str, message: &str) {
        let err = SystemdError::Call { call: "X", target: "t".into(), name: name.into(), message: message.into() };
        self.fail.lock().unwrap().insert(key.into(), err);
    }
    pub(crate) fn calls(&self) -> Vec<String> {
        std::mem::take(&mut self.log.lock().unwrap())
    }
    pub(crate) fn link() -> Vec<FileChange> {
        vec![FileChange { kind: "symlink".into(), file: "/run/systemd/system/x".into(), destination: "y".into() }]
    }
}

impl SystemdOps for Fake {
    fn start(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<JobResult>> + Send {
        let r = self.record("start", name);
        if let Some(hook) = self.on_start.lock().unwrap().as_mut() {
            hook(name);
        }
        let delay = *self.start_delay.lock().unwrap();
        async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            r.map(|_| JobResult::Done)
        }
    }
    fn stop(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<Stopped>> + Send {
        let mut r = self.record("stop", name);
        if r.is_ok() && self.stop_answer_lost.lock().unwrap().contains(name) {
            self.active.lock().unwrap().insert(name.to_string(), "inactive".into());
            r = Err(SystemdError::StreamEnded { what: format!("the stop job of {name}") });
        }
        let result = self.stop_results.lock().unwrap().get(name).cloned().unwrap_or(JobResult::Done);
        // As systemd's signals would tell: the state `active` holds for the unit (a test's "failed"), else the
        // stop left it inactive; nothing for a unit whose stop reports nothing.
        let left = match self.stop_reports_nothing.lock().unwrap().contains(name) {
            true => None,
            false => Some(self.active.lock().unwrap().get(name).cloned().unwrap_or_else(|| "inactive".into())),
        };
        async move { r.map(|_| Stopped { result, left }) }
    }
    fn reload(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<JobResult>> + Send {
        let r = self.record("reload_unit", name);
        if let Some(hook) = self.on_reload_unit.lock().unwrap().as_mut() {
            hook(name);
        }
        async move { r.map(|_| JobResult::Done) }
    }
    fn wait_inactive(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<String>> + Send {
        let r = self.record("wait_inactive", name);
        async move { r.map(|_| "inactive".to_string()) }
    }
    fn link_runtime(&self, path: &Path) -> impl Future<Output = fleet_systemd::Result<Vec<FileChange>>> + Send {
        let r = self.record("link", path.file_name().unwrap().to_str().unwrap());
        async move { r.map(|_| Fake::link()) }
    }
    fn enable_runtime(&self, path: &Path) -> impl Future<Output = fleet_systemd::Result<Vec<FileChange>>> + Send {
        let r = self.record("enable", path.file_name().unwrap().to_str().unwrap());
        async move { r.map(|_| Fake::link()) }
    }
    fn disable_runtime(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<Vec<FileChange>>> + Send {
        let r = self.record("disable", name);
        async move { r.map(|_| Vec::new()) }
    }
    fn unlink_runtime(&self, name: &str, _target: &Path) -> impl Future<Output = fleet_systemd::Result<bool>> + Send {
        let r = self.record("unlink", name);
        let linked = !self.not_linked.lock().unwrap().contains(name);
        async move { r.map(|_| linked) }
    }
    fn reset_failed(&self, name: &str) -> impl Future<Output = fleet_systemd::Result<()>> + Send {
        let r = self.record("reset_failed", name);
        async move { r }
    }
    fn daemon_reload(&self) -> impl Future<Output = fleet_systemd::Result<()>> + Send {
        let r = self.record("reload", "");
        async move { r }
    }
    fn states(&self, names: &[String]) -> impl Future<Output = fleet_systemd::Result<Vec<UnitStatus>>> + Send {
        self.state_reads.lock().unwrap().push(names.to_vec());
        let active = self.active.lock().unwrap().clone();
        let out = names
            .iter()
            .map(|n| UnitStatus {
                name: n.clone(),
                load_state: "loaded".into(),
                active_state: active.get(n).cloned().unwrap_or_else(|| "active".into()),
                sub_state: "running".into(),
            })
            .collect();
        async move { Ok(out) }
    }
    fn definitions(
        &self,
        names: &[String],
    ) -> impl Future<Output = fleet_systemd::Result<Vec<(String, Definition)>>> + Send {
        let (forgotten, current) = (self.forgotten.lock().unwrap(), self.current_files.lock().unwrap());
        let definitions = names
            .iter()
            .map(|name| {
                let definition = if forgotten.contains(name) {
                    Definition::NotLoaded
                } else {
                    Definition::Loaded { stale: !current.contains(name) }
                };
                (name.clone(), definition)
            })
            .collect();
        async move { Ok(definitions) }
    }
    fn changes(&self) -> UnitChanges {
        // No signals: a closed channel (the publisher then works on its resync period only).
        UnitChanges::closed()
    }
    fn restart_counts(&self, _names: &[String]) -> impl Future<Output = Vec<(String, u32)>> + Send {
        std::future::ready(Vec::new())
    }
}

//! The machine's load fault (issue 37, a full disk): unit files this agent could not write, and when it can again.
//!
//! A Load or Update whose file write fails with an I/O error (`ENOSPC` on a full `/run`, `EROFS`, ...) names its
//! unit in the fault; the agent publishes the fault under its lease (`P/machines/<id>/load-fault`), and the engine
//! then places no new unit here and moves the units named elsewhere (`scheduler` `Rejection::CannotLoad`). Those
//! units leave this machine's desired set, so nothing here writes their files again: a probe does. At every
//! reconcile that had no failed write while a fault stands, the agent writes and removes a hidden file as large
//! as the largest unit that failed (at least [`MIN_PROBE_BYTES`]); once that succeeds the fault is withdrawn and
//! the machine takes units again. Pure except [`probe`].

use std::collections::BTreeMap;
use std::path::Path;

use super::error::AgentError;
use super::executor::TaskReport;
use fleet_core::machine_plan::plan::Task;
use fleet_core::model::LoadFault;

/// The smallest probe: one page, which any unit file takes on tmpfs.
pub const MIN_PROBE_BYTES: usize = 4096;

/// The hidden file the probe writes (hidden files are never taken for units).
pub const PROBE_FILE: &str = ".fleet-write-probe";

/// The failed writes of a reconcile's reports: unit → error text, for each Load or Update that ended in an I/O
/// error (other failures, such as systemd refusing to link or enable, are not the disk's).
pub fn failed_writes(reports: &[TaskReport]) -> BTreeMap<String, String> {
    reports
        .iter()
        .filter_map(|r| match (&r.planned.task, &r.outcome) {
            (Task::Load(name, _) | Task::Update(name, _), Err(e @ AgentError::Io { .. })) => {
                Some((name.clone(), e.to_string()))
            }
            _ => None,
        })
        .collect()
}

/// What the agent should publish after a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    Put(LoadFault),
    Clear,
}

/// The fault this agent holds, and what it last published.
#[derive(Debug, Default)]
pub struct LoadFaults {
    fault: Option<LoadFault>,
    /// The size of the largest unit text that failed: what the probe must be able to write.
    probe_bytes: usize,
    published: Option<LoadFault>,
}

impl LoadFaults {
    pub fn current(&self) -> Option<&LoadFault> {
        self.fault.as_ref()
    }

    /// Folds in a reconcile's failed writes (`failed`: unit → error; `sizes`: unit → its text's length, where
    /// known). Returns whether a probe is due: a fault stands and nothing failed this time.
    pub fn note(&mut self, failed: BTreeMap<String, String>, sizes: &BTreeMap<String, usize>, now_ms: u64) -> bool {
        if failed.is_empty() {
            return self.fault.is_some();
        }
        let fault = self.fault.get_or_insert_with(|| LoadFault { since_ms: now_ms, ..LoadFault::default() });
        for (unit, reason) in failed {
            self.probe_bytes = self.probe_bytes.max(sizes.get(&unit).copied().unwrap_or(0));
            fault.reason = reason;
            fault.units.insert(unit);
        }
        false
    }

    /// The probe succeeded: unit files can be written again.
    pub fn recovered(&mut self) {
        self.fault = None;
        self.probe_bytes = 0;
    }

    /// How many bytes the probe writes.
    pub fn probe_bytes(&self) -> usize {
        self.probe_bytes.max(MIN_PROBE_BYTES)
    }

    /// What to write to the registry now, if anything (a change since the last [`LoadFaults::published`]).
    pub fn to_publish(&self) -> Option<Publish> {
        match (&self.fault, &self.published) {
            (Some(now), Some(was)) if now == was => None,
            (Some(now), _) => Some(Publish::Put(now.clone())),
            (None, Some(_)) => Some(Publish::Clear),
            (None, None) => None,
        }
    }

    /// `publish` was written.
    pub fn published(&mut self, publish: &Publish) {
        self.published = match publish {
            Publish::Put(fault) => Some(fault.clone()),
            Publish::Clear => None,
        };
    }
}

/// Writes `bytes` bytes to [`PROBE_FILE`] in `dir` and removes it again: whether unit files fit there now. A probe
/// that fails is removed too, so it never holds space.
pub fn probe(dir: &Path, bytes: usize) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join(PROBE_FILE);
    let written = std::fs::File::create(&path).and_then(|mut f| {
        f.write_all(&vec![b'#'; bytes])?;
        f.sync_all()
    });
    let removed = std::fs::remove_file(&path);
    written?;
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::executor::TaskReport;
    use fleet_core::machine_plan::plan::{Planned, Reason};

    fn report(task: Task, outcome: Result<crate::agent::executor::Outcome, AgentError>) -> TaskReport {
        TaskReport { planned: Planned { task, reason: Reason::UnitFilesChanged }, outcome }
    }

    fn full(path: &str) -> AgentError {
        AgentError::Io { op: "writing", path: path.into(), source: std::io::Error::from_raw_os_error(28) }
    }

    #[test]
    fn only_failed_writes_of_unit_files_count() {
        use crate::agent::executor::Outcome;
        let reports = [
            report(Task::Load("a.service".into(), "h".into()), Err(full("/u/.a.service.tmp"))),
            report(Task::Update("b.service".into(), "h".into()), Err(full("/u/.b.service.tmp"))),
            report(Task::Load("c.service".into(), "h".into()), Ok(Outcome::Loaded { changed: true })),
            report(Task::Load("d.service".into(), "h".into()), Err(AgentError::MissingUnit("d.service".into()))),
            report(Task::Start("e.service".into()), Err(full("/u/e"))),
        ];
        let failed = failed_writes(&reports);
        assert_eq!(failed.keys().collect::<Vec<_>>(), ["a.service", "b.service"]);
        assert!(failed["a.service"].contains("No space left on device"), "{failed:?}");
    }

    #[test]
    fn a_fault_is_published_once_probed_while_nothing_fails_and_withdrawn_when_the_probe_passes() {
        let mut faults = LoadFaults::default();
        assert!(!faults.note(BTreeMap::new(), &BTreeMap::new(), 1), "no fault: no probe");
        assert_eq!(faults.to_publish(), None);

        let failed = BTreeMap::from([("a.service".to_string(), "writing x: No space left on device".to_string())]);
        let sizes = BTreeMap::from([("a.service".to_string(), 9000)]);
        assert!(!faults.note(failed, &sizes, 5), "a reconcile that failed does not probe");
        let Some(Publish::Put(fault)) = faults.to_publish() else { panic!("the fault is published") };
        assert_eq!((fault.since_ms, fault.units.len()), (5, 1));
        assert_eq!(fault.reason, "writing x: No space left on device");
        assert_eq!(faults.probe_bytes(), 9000, "the probe is as large as the largest unit that failed");
        faults.published(&Publish::Put(fault));
        assert_eq!(faults.to_publish(), None, "unchanged: nothing to write");

        let more = BTreeMap::from([("b.service".to_string(), "again".to_string())]);
        faults.note(more, &BTreeMap::new(), 9);
        let Some(Publish::Put(fault)) = faults.to_publish() else { panic!("a new unit is published") };
        assert_eq!(fault.since_ms, 5, "since the first failure");
        assert_eq!(fault.units.iter().map(String::as_str).collect::<Vec<_>>(), ["a.service", "b.service"]);
        faults.published(&Publish::Put(fault));

        assert!(faults.note(BTreeMap::new(), &BTreeMap::new(), 10), "a quiet reconcile probes");
        faults.recovered();
        assert_eq!(faults.to_publish(), Some(Publish::Clear));
        faults.published(&Publish::Clear);
        assert_eq!(faults.to_publish(), None);
        assert_eq!(faults.probe_bytes(), MIN_PROBE_BYTES);
    }

    #[test]
    fn the_probe_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        probe(dir.path(), 10_000).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let missing = dir.path().join("missing");
        assert!(probe(&missing, 10).is_err(), "a directory that cannot be written fails the probe");
    }
}

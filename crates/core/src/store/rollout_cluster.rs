//! The cluster as the pure rollout decision ([`rollout::advance`]) sees it, read from a registry snapshot: shared by
//! the engine leader and the test fake, so both drive rollouts from the same observations.

use super::Snapshot;
use crate::rollout::{self, Observed};

/// The cluster as [`rollout::advance`] sees it, read from a registry snapshot.
pub struct SnapshotCluster<'a>(pub &'a Snapshot);

impl rollout::Cluster for SnapshotCluster<'_> {
    fn observe(&self, unit: &str, machine: &str) -> Observed {
        let s = self.0;
        let present = s.machine_records().get(machine).is_some_and(|m| m.object.is_some());
        let record = s.unit_record(unit);
        let state = s.state_record(unit, machine);
        Observed {
            present,
            hash: state.map(|st| st.hash.to_string()),
            running: record.and_then(|r| r.launched.get(machine)).map(|h| h.to_string()),
            active_state: state.map(|st| st.active_state.to_string()).unwrap_or_default(),
            sub_state: state.map(|st| st.sub_state.to_string()).unwrap_or_default(),
            restarts: state.and_then(|st| st.restarts),
            restarted_for: record.and_then(|r| r.restarted.get(machine)).map(|id| id.to_string()),
            health: state.and_then(|st| st.health.clone()),
        }
    }

    fn metadata(&self, machine: &str) -> std::collections::BTreeMap<String, String> {
        self.0
            .machine_records()
            .get(machine)
            .and_then(|m| m.object.as_ref().map(|o| o.merged(&m.metadata).metadata))
            .unwrap_or_default()
    }

    fn exists(&self, unit: &str) -> bool {
        self.0.unit_record(unit).is_some_and(|r| r.object.is_some())
    }

    /// Present machines that publish a state of the unit (every machine running a global unit; a scheduled unit's
    /// machine), else the unit's scheduled machine.
    fn holders(&self, unit: &str) -> Vec<String> {
        let s = self.0;
        let present = |m: &str| s.machine_records().get(m).is_some_and(|r| r.object.is_some());
        let publishing: Vec<String> = s
            .state_records()
            .get(unit)
            .into_iter()
            .flat_map(|per_machine| per_machine.keys())
            .filter(|m| present(m))
            .map(|m| m.to_string())
            .collect();
        if !publishing.is_empty() {
            return publishing;
        }
        s.unit_record(unit)
            .and_then(|r| r.target.as_deref())
            .filter(|m| present(m))
            .map(String::from)
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::Cluster;
    use crate::store::keys::Key;
    use crate::store::snapshot::tests::Build;

    /// Issue 38: a cordoned machine is present to a rollout, so its budget counts it as available.
    #[test]
    fn a_cordoned_machine_is_present_to_a_rollout() {
        let s = Build::new()
            .put_lease(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1"}"#, 7)
            .put(Key::MachineCordon { machine: "m1".into() }, r#"{"sinceMs":1}"#)
            .done();
        assert!(s.machine("m1").is_some_and(|m| m.cordoned));
        assert!(SnapshotCluster(&s).observe("a.service", "m1").present);
    }
}

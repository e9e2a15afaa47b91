//! One-shot consistent reads of one part of the prefix, for tools that keep no reflector (fleetctl's etcd driver).
//!
//! Each returns a [`Snapshot`] holding only the keys of its scope, all read at one revision, so the derived views
//! (`units()`, `unit()`, `unit_states()`, `machines()`, current state) work on it unchanged; everything outside the
//! scope is simply absent. Use [`Registry::read_snapshot`] when a call needs several scopes at once.

use super::Registry;
use super::error::Result;
use super::keys::{Component, check_component};
use super::snapshot::Snapshot;

impl Registry {
    /// One unit: its keys (object, desired, target, launched markers), its published states (needed for its
    /// current state) and its current body.
    pub async fn read_unit_snapshot(&self, name: &str) -> Result<Snapshot> {
        check_component(Component::UnitName, name)?;
        let mut snapshot = Snapshot::default();
        let revision = self.read_range_into(&mut snapshot, &self.keys.unit_dir(name), 0).await?;
        self.read_range_into(&mut snapshot, &self.keys.unit_states_dir(name), revision).await?;
        let hash = snapshot.unit_record(name).and_then(|r| r.object()).map(|o| o.hash.clone());
        if let Some(hash) = hash.filter(|h| check_component(Component::Hash, h).is_ok()) {
            self.read_range_into(&mut snapshot, &self.keys.body(&hash), revision).await?;
        }
        Ok(finish(snapshot, revision))
    }

    /// Published unit states: every unit's, or only `unit`'s.
    pub async fn read_states_snapshot(&self, unit: Option<&str>) -> Result<Snapshot> {
        let (states, units) = match unit {
            Some(name) => {
                check_component(Component::UnitName, name)?;
                (self.keys.unit_states_dir(name), self.keys.unit_dir(name))
            }
            None => (self.keys.states_dir(), self.keys.units_dir()),
        };
        let mut snapshot = Snapshot::default();
        let revision = self.read_range_into(&mut snapshot, &states, 0).await?;
        // The launched markers, at the same revision: they say which version each machine runs.
        self.read_range_into(&mut snapshot, &units, revision).await?;
        Ok(finish(snapshot, revision))
    }

    /// Every machine's copy of each of `units`, for an agent on a scoped view about to start them (its handover,
    /// docs/lab/scoped-views.md): their keys under `P/units/<name>/` (launched markers among them), their published
    /// states, and the presence of each machine named there, all at one revision. A few range reads per unit, not
    /// a read of the cluster.
    pub async fn read_copies_snapshot(&self, units: &[&str]) -> Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        let mut revision = 0;
        for name in units {
            check_component(Component::UnitName, name)?;
            revision = self.read_range_into(&mut snapshot, &self.keys.unit_dir(name), revision).await?;
            self.read_range_into(&mut snapshot, &self.keys.unit_states_dir(name), revision).await?;
        }
        let mut machines = std::collections::BTreeSet::new();
        for name in units {
            if let Some(states) = snapshot.state_records().get(*name) {
                machines.extend(states.iter().map(|(m, _)| m.to_string()));
            }
            if let Some(record) = snapshot.unit_record(name) {
                machines.extend(record.launched_on().map(|(m, _)| m.to_string()));
            }
        }
        for machine in &machines {
            revision = self.read_range_into(&mut snapshot, &self.keys.machine_object(machine), revision).await?;
        }
        Ok(finish(snapshot, revision))
    }

    /// Machines: presence objects and dynamic metadata.
    pub async fn read_machines_snapshot(&self) -> Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        let revision = self.read_range_into(&mut snapshot, &self.keys.machines_dir(), 0).await?;
        Ok(finish(snapshot, revision))
    }
}

fn finish(mut snapshot: Snapshot, revision: i64) -> Snapshot {
    snapshot.set_revision(revision);
    snapshot.set_connected(true);
    snapshot
}

//! One-shot consistent reads of one part of the prefix, for tools that keep no reflector (fleetctl's etcd driver).
//!
//! Each returns a [`Snapshot`] holding only the keys of its scope, all read at one revision, so the derived views
//! (`units()`, `unit()`, `unit_states()`, `machines()`, current state) work on it unchanged; everything outside the
//! scope is simply absent. Use [`Registry::read_snapshot`] when a call needs several scopes at once.

use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse};

use super::Registry;
use super::batch::MAX_TXN_OPS;
use super::error::Result;
use super::keys::{Component, check_component};
use super::snapshot::Change;
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
    /// docs/lab/scoped-views.md): their keys under `P/units/<name>/` (launched markers among them) and their
    /// published states, read in transactions of range reads (one revision each), then the presence of each machine
    /// named there. Two round trips for a reconcile's starts, not a read of the cluster.
    pub async fn read_copies_snapshot(&self, units: &[&str]) -> Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        let mut revision = 0;
        let mut ranges = Vec::with_capacity(units.len() * 2);
        for name in units {
            check_component(Component::UnitName, name)?;
            ranges.push(self.keys.unit_dir(name));
            ranges.push(self.keys.unit_states_dir(name));
        }
        let prefix = || Some(GetOptions::new().with_prefix());
        for chunk in ranges.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk.iter().map(|range| TxnOp::get(range.as_str(), prefix())).collect();
            let resp = self.txn("read copies", &chunk[0], Txn::new().and_then(ops)).await?;
            revision = revision.max(resp.header().map_or(0, |h| h.revision()));
            apply_gets(self, &mut snapshot, &resp);
        }
        let mut machines = std::collections::BTreeSet::new();
        for name in units {
            if let Some(states) = snapshot.state_records().get(*name) {
                machines.extend(states.iter().map(|(m, _)| self.keys.machine_object(m)));
            }
            if let Some(record) = snapshot.unit_record(name) {
                machines.extend(record.launched_on().map(|(m, _)| self.keys.machine_object(m)));
            }
        }
        let machines: Vec<String> = machines.into_iter().collect();
        for chunk in machines.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk.iter().map(|key| TxnOp::get(key.as_str(), None)).collect();
            let resp = self.txn("read copies' machines", &chunk[0], Txn::new().and_then(ops)).await?;
            revision = revision.max(resp.header().map_or(0, |h| h.revision()));
            apply_gets(self, &mut snapshot, &resp);
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

/// Applies the key-values of every get in a transaction's response to `snapshot`.
fn apply_gets(registry: &Registry, snapshot: &mut Snapshot, resp: &etcd_client::TxnResponse) {
    for op in resp.op_responses() {
        if let TxnOpResponse::Get(get) = op {
            for kv in get.kvs() {
                let change = Change::Put { value: kv.value(), mod_revision: kv.mod_revision(), lease: kv.lease() };
                snapshot.apply(registry.keys(), kv.key(), change);
            }
        }
    }
}

fn finish(mut snapshot: Snapshot, revision: i64) -> Snapshot {
    snapshot.set_revision(revision);
    snapshot.set_connected(true);
    snapshot
}

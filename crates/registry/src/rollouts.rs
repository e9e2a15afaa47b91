//! Rollout writes: create (API, with the new unit versions in the same transaction), control (API), progress and
//! rollback (engine leader, fenced to its leadership), restarted markers (agents). Layout and meaning: `keys.rs`
//! and the `rollout` module.

use etcd_client::{Compare, CompareOp, DeleteOptions, PutOptions, Txn, TxnOp};

use super::error::{RegistryError, Result};
use super::keys::{Component, check_component};
use super::records::{UnitObject, encode_json};
use super::roles::{AgentSession, ApiWriter, LeaderSession};
use super::snapshot::Snapshot;
use super::{MAX_TXN_OPS, Registry};
use fleet_core::rollout::{Control, Move, RolloutKind, RolloutProgress, RolloutSpec, RolloutUnit};
use fleet_core::store::Cordon;

/// A new version a rollout stores for one of its units.
#[derive(Debug, Clone)]
pub struct RolloutBody<'a> {
    pub unit: &'a RolloutUnit,
    /// Canonical text of `unit.to`.
    pub text: &'a str,
    /// Mod revision of the unit's object as the caller read it: the write fails if the unit changed since.
    pub object_revision: i64,
    /// The unit's object as read (its history continues in the new one).
    pub object: Option<&'a UnitObject>,
}

/// Most rollouts one deleting transaction names: a compare and a delete each, plus the fence's two compares, under
/// etcd's `--max-txn-ops` (128, counted per list of the transaction).
const MAX_ROLLOUT_DELETES_PER_TXN: usize = 60;

impl Registry {
    /// Waits until a key of rollout `id` is written or deleted after revision `after`, or `limit` passes (one
    /// etcd watch from `after + 1`; fleetctl's etcd driver follows a rollout with it). `Ok(true)` on a change,
    /// `Ok(false)` when the time ran out; a compacted `after` counts as a change (the caller re-reads).
    pub async fn wait_rollout_change(&self, id: &str, after: i64, limit: std::time::Duration) -> Result<bool> {
        check_component(Component::RolloutId, id)?;
        let dir = self.keys().rollout_dir(id);
        let options = etcd_client::WatchOptions::new().with_prefix().with_start_revision(after.saturating_add(1));
        let waiting = async {
            // Dropping the stream cancels the watch.
            let mut stream = self
                .client
                .watch_client()
                .watch(dir.as_str(), Some(options))
                .await
                .map_err(RegistryError::etcd("watch", &dir))?;
            let changed = loop {
                match stream.message().await.map_err(RegistryError::etcd("watch", &dir))? {
                    Some(resp) if resp.compact_revision() > 0 || resp.canceled() => break true,
                    Some(resp) if !resp.events().is_empty() => break true,
                    Some(_) => continue,
                    None => break true,
                }
            };
            Ok(changed)
        };
        match tokio::time::timeout(limit, waiting).await {
            Ok(result) => result,
            Err(_) => Ok(false),
        }
    }
}

/// The bodies a rollout stores, each hash once (in the order first named).
fn distinct_bodies<'a>(bodies: &'a [RolloutBody<'_>]) -> Vec<(&'a str, &'a str)> {
    let mut seen = std::collections::BTreeSet::new();
    bodies.iter().filter(|b| seen.insert(b.unit.to.as_str())).map(|b| (b.unit.to.as_str(), b.text)).collect()
}

impl ApiWriter {
    /// Stores a new rollout: its spec and control, and for a replace every unit's new version (object and body,
    /// the old hash kept as `previousHash`), all in one transaction that fails if the rollout exists or a unit
    /// changed since it was read. A drain (`spec.machine`) also writes `cordon` to its machine, or, without one,
    /// requires the machine's cordon it was decided under to stand. Returns the write's revision.
    pub async fn create_rollout(
        &self,
        spec: &RolloutSpec,
        bodies: &[RolloutBody<'_>],
        cordon: Option<&Cordon>,
    ) -> Result<i64> {
        check_component(Component::RolloutId, &spec.id)?;
        if spec.units.len() > crate::MAX_ROLLOUT_UNITS {
            return Err(RegistryError::TooManyOps {
                op: "create rollout",
                count: spec.units.len(),
                max: crate::MAX_ROLLOUT_UNITS,
            });
        }
        let k = &self.keys;
        let spec_key = k.rollout_spec(&spec.id);
        let mut compares = vec![Compare::version(spec_key.as_str(), CompareOp::Equal, 0)];
        let mut ops = vec![
            TxnOp::put(spec_key.as_str(), encode_json(spec), None),
            TxnOp::put(k.rollout_control(&spec.id), encode_json(&Control::default()), None),
        ];
        if spec.kind == RolloutKind::Drain {
            check_component(Component::MachineId, &spec.machine)?;
            let key = k.machine_cordon(&spec.machine);
            match cordon {
                Some(cordon) => ops.push(TxnOp::put(key.as_str(), encode_json(cordon), None)),
                None => compares.push(Compare::version(key.as_str(), CompareOp::Greater, 0)),
            }
        }
        for body in bodies {
            let unit = body.unit;
            check_component(Component::UnitName, &unit.name)?;
            check_component(Component::Hash, &unit.to)?;
            compares.push(Compare::mod_revision(k.unit_object(&unit.name), CompareOp::Equal, body.object_revision));
            let object = UnitObject::next(body.object, &unit.name, &unit.to, false, spec.created_ms);
            ops.push(TxnOp::put(k.unit_object(&unit.name), encode_json(&object), None));
        }
        // Each body once: units with the same new content (instances of one template) share it, and etcd refuses a
        // transaction that puts one key twice (`duplicate key given in txn request`).
        for (hash, text) in distinct_bodies(bodies) {
            ops.push(TxnOp::put(k.body(hash), text, None));
        }
        let resp = self.txn("create rollout", &spec_key, Txn::new().when(compares).and_then(ops)).await?;
        if resp.succeeded() {
            return Ok(resp.header().map_or(0, |h| h.revision()));
        }
        // Tell the two refusals apart with a read (rare path).
        let existing = self.kv().get(spec_key.as_str(), None).await.map_err(RegistryError::etcd("get", &spec_key))?;
        if !existing.kvs().is_empty() {
            return Err(RegistryError::RolloutExists { id: spec.id.clone() });
        }
        if spec.kind == RolloutKind::Drain {
            return Err(RegistryError::CordonChanged { machine: spec.machine.clone() });
        }
        let unit = bodies.first().map(|b| b.unit.name.clone()).unwrap_or_default();
        Err(RegistryError::UnitChanged { unit })
    }

    /// Stores a user's control of an existing rollout. Returns the write's revision.
    pub async fn set_rollout_control(&self, id: &str, control: &Control) -> Result<i64> {
        check_component(Component::RolloutId, id)?;
        let k = &self.keys;
        let txn = Txn::new()
            .when([Compare::version(k.rollout_spec(id), CompareOp::Greater, 0)])
            .and_then([TxnOp::put(k.rollout_control(id), encode_json(control), None)]);
        let key = k.rollout_control(id);
        let resp = self.txn("control rollout", &key, txn).await?;
        if resp.succeeded() {
            Ok(resp.header().map_or(0, |h| h.revision()))
        } else {
            Err(RegistryError::RolloutNotFound { id: id.to_string() })
        }
    }
}

impl LeaderSession {
    /// With `engine_rebalance` on: stores a rebalance rollout (spec and control, no units), fenced.
    /// `Some(revision)`; `None` when a rollout with this ID exists.
    pub async fn create_rebalance(&self, spec: &RolloutSpec) -> Result<Option<i64>> {
        check_component(Component::RolloutId, &spec.id)?;
        let k = &self.keys;
        let spec_key = k.rollout_spec(&spec.id);
        let compares = vec![Compare::version(spec_key.as_str(), CompareOp::Equal, 0)];
        let ops = vec![
            TxnOp::put(spec_key.as_str(), encode_json(spec), None),
            TxnOp::put(k.rollout_control(&spec.id), encode_json(&Control::default()), None),
        ];
        let written = self.fenced_txn("create rebalance", &spec_key, compares, ops).await?;
        Ok(written.map(|resp| resp.header().map_or(0, |h| h.revision())))
    }

    /// Stores a rollout's progress if it is still at the revision `view` shows (absent there: still
    /// absent), with the rollback's unit objects (`hash` back to `from`, history continued from `view`) in the same
    /// transaction, and a rebalance's released `moves` (each unit's target from `from` to `to`, if still on
    /// `from`), fenced to this session (leader key and lease). `Some(revision)` of the write; `None` when the
    /// progress or a unit changed since `view` (another writer): nothing was written; [`RegistryError::NotLeader`]
    /// when this engine no longer leads.
    pub async fn write_rollout_progress(
        &self,
        view: &Snapshot,
        id: &str,
        progress: &RolloutProgress,
        roll_back: &[RolloutUnit],
        moves: &[Move],
    ) -> Result<Option<i64>> {
        let none = fleet_core::scheduler::entries::EntryChanges::default();
        self.write_rollout_progress_with_entries(view, id, progress, roll_back, moves, &none).await
    }

    /// [`LeaderSession::write_rollout_progress`] with layout 2's schedule entries that the progress changes
    /// (`scheduler::entries::entry_changes_of_units`: a released step's version or restart token) in the same
    /// transaction, each unit's under its guard, so a machine sees its step in the revision that releases it.
    /// Entries that would not fit the transaction are left out (the engine's next pass writes them).
    pub async fn write_rollout_progress_with_entries(
        &self,
        view: &Snapshot,
        id: &str,
        progress: &RolloutProgress,
        roll_back: &[RolloutUnit],
        moves: &[Move],
        entries: &fleet_core::scheduler::entries::EntryChanges,
    ) -> Result<Option<i64>> {
        check_component(Component::RolloutId, id)?;
        let k = &self.keys;
        let revision = view.rollout_records().get(id).map_or(0, |r| r.progress_revision);
        let key = k.rollout_progress(id);
        let guard = if revision == 0 {
            Compare::version(key.as_str(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(key.as_str(), CompareOp::Equal, revision)
        };
        let mut compares = vec![guard];
        let mut ops = vec![TxnOp::put(key.as_str(), encode_json(progress), None)];
        // Each body once (instances of one template share it): etcd refuses a transaction that puts a key twice.
        let mut bodies_put = std::collections::BTreeSet::new();
        for unit in roll_back {
            check_component(Component::UnitName, &unit.name)?;
            // A unit destroyed meanwhile stays destroyed: only units the view shows are written back, and only if
            // they are still as the view shows them.
            let Some(record) = view.unit_record(&unit.name).filter(|r| r.object().is_some()) else { continue };
            compares.push(Compare::mod_revision(k.unit_object(&unit.name), CompareOp::Equal, record.object_revision()));
            let old = record.object();
            let object = UnitObject::next(old, &unit.name, &unit.from, false, fleet_core::model::now_ms());
            // Bodies are re-put with their object, as on every write, so a concurrent GC cannot take them.
            if let Some(text) = view.body(&unit.from)
                && bodies_put.insert(unit.from.as_str())
            {
                ops.push(TxnOp::put(k.body(&unit.from), text.as_ref(), None));
            }
            ops.push(TxnOp::put(k.unit_object(&unit.name), encode_json(&object), None));
        }
        let layout_2 = view.layout_version() == Some(fleet_core::layout::LAYOUT_2);
        for m in moves {
            check_component(Component::UnitName, &m.unit)?;
            check_component(Component::MachineId, &m.to)?;
            if layout_2 {
                // The placement is the entry on `from`: it moves to `to` as the view shows it (the engine's next
                // pass brings anything `to` must run differently, such as a rollout's pin).
                check_component(Component::MachineId, &m.from)?;
                let (from, to) = (k.schedule_entry(&m.from, &m.unit), k.schedule_entry(&m.to, &m.unit));
                let entry = view.unit_record(&m.unit).and_then(|r| r.entries().get(m.from.as_str()).cloned());
                match entry.filter(|e| !e.global) {
                    Some(entry) => {
                        let value = encode_json(&entry);
                        compares.push(Compare::value(from.as_str(), CompareOp::Equal, value.as_str()));
                        compares.push(Compare::version(to.as_str(), CompareOp::Equal, 0));
                        ops.push(TxnOp::delete(from.as_str(), None));
                        ops.push(TxnOp::put(to.as_str(), value, None));
                    }
                    // Not placed on `from` in the view: nothing to move it with. A compare that cannot hold (no
                    // version is negative) refuses the write, as a layout-1 target that moved does; the next drive
                    // decides from a newer view.
                    None => compares.push(Compare::version(from.as_str(), CompareOp::Less, 0)),
                }
                continue;
            }
            let target = k.unit_target(&m.unit);
            compares.push(Compare::value(target.as_str(), CompareOp::Equal, m.from.as_str()));
            ops.push(TxnOp::put(target.as_str(), m.to.as_str(), None));
        }
        // Fence (2), guards and entries must fit etcd's limits beside what is already there.
        let entry_ops = entries.put.len() + entries.delete.len();
        if entry_ops > 0
            && ops.len() + entry_ops <= MAX_TXN_OPS
            && compares.len() + 2 + entries.guards.len() + entries.while_absent.len() <= MAX_TXN_OPS
        {
            for (machine, unit, entry) in &entries.put {
                check_component(Component::MachineId, machine)?;
                check_component(Component::UnitName, unit)?;
                ops.push(TxnOp::put(k.schedule_entry(machine, unit), encode_json(entry), None));
            }
            for (machine, unit) in &entries.delete {
                check_component(Component::MachineId, machine)?;
                check_component(Component::UnitName, unit)?;
                ops.push(TxnOp::delete(k.schedule_entry(machine, unit), None));
            }
            for (unit, revision) in &entries.guards {
                compares.push(Compare::mod_revision(k.unit_object(unit), CompareOp::Equal, *revision));
            }
            for (machine, _) in &entries.while_absent {
                compares.push(Compare::version(k.machine_object(machine), CompareOp::Equal, 0));
            }
        }
        let written = self.fenced_txn("write rollout progress", &key, compares, ops).await?;
        Ok(written.map(|resp| resp.header().map_or(0, |h| h.revision())))
    }

    /// Deletes the finished rollouts `ids` (every key of each), in transactions fenced to this session
    /// (leader key and lease) and to each rollout's progress being unchanged since `view` (so only a rollout the
    /// view shows finished is deleted). Returns how many were deleted; [`RegistryError::NotLeader`] when this engine no
    /// longer leads.
    pub async fn delete_rollouts(&self, view: &Snapshot, ids: &[&str]) -> Result<usize> {
        for id in ids {
            check_component(Component::RolloutId, id)?;
        }
        let k = &self.keys;
        let mut deleted = 0;
        for chunk in ids.chunks(MAX_ROLLOUT_DELETES_PER_TXN) {
            let mut compares = Vec::new();
            let mut ops = Vec::new();
            for id in chunk {
                let Some(record) = view.rollout_records().get(*id).filter(|r| r.progress_revision > 0) else {
                    continue;
                };
                compares.push(Compare::mod_revision(
                    k.rollout_progress(id),
                    CompareOp::Equal,
                    record.progress_revision,
                ));
                ops.push(TxnOp::delete(k.rollout_dir(id), Some(DeleteOptions::new().with_prefix())));
            }
            if ops.is_empty() {
                continue;
            }
            let n = ops.len();
            let key = k.rollouts_dir();
            if self.fenced_txn("delete rollouts", &key, compares, ops).await?.is_some() {
                deleted += n;
            }
        }
        Ok(deleted)
    }
}

impl AgentSession {
    /// Records that this machine restarted `unit` for rollout `id` (bound to the machine's lease).
    pub async fn mark_restarted(&self, unit: &str, id: &str) -> Result<bool> {
        let (machine, lease) = (self.machine(), self.lease());
        check_component(Component::UnitName, unit)?;
        check_component(Component::RolloutId, id)?;
        let key = self.keys.unit_restarted(unit, machine);
        let txn = Txn::new()
            .when([Compare::version(self.keys.unit_object(unit), CompareOp::Greater, 0)])
            .and_then([TxnOp::put(key.as_str(), id, Some(PutOptions::new().with_lease(lease)))]);
        let resp = self.txn("mark restarted", &key, txn).await?;
        if resp.succeeded() {
            self.noted(resp.header().map_or(0, |h| h.revision()), [(key, Some(id.as_bytes().to_vec()))]);
        }
        Ok(resp.succeeded())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_with_the_same_new_content_store_its_body_once() {
        let unit = |name: &str, to: &str| RolloutUnit {
            name: name.into(),
            from: "0".repeat(40),
            to: to.into(),
            ..RolloutUnit::default()
        };
        let (a, b, c) = (unit("web@1.service", "aa"), unit("web@2.service", "aa"), unit("db.service", "bb"));
        let body = |unit, text| RolloutBody { unit, text, object_revision: 1, object: None };
        let bodies = [body(&a, "A"), body(&b, "A"), body(&c, "B")];
        assert_eq!(distinct_bodies(&bodies), [("aa", "A"), ("bb", "B")]);
    }
}

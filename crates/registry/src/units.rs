//! Unit writes: create, replace, set desired state, destroy ([`ApiWriter`]), placements ([`LeaderSession`]),
//! launched markers ([`AgentSession`]). Each is one etcd transaction guarded by compares, so concurrent writers cannot
//! interleave into a state no single writer intended.
//!
//! Body garbage collection is not done here (it needs a consistent view of all unit objects, which the engine's
//! reflector has for free): see `bodies.rs`. Creation always re-puts the body in the same transaction as the
//! object so that a concurrent GC, which deletes only bodies whose mod revision it saw unreferenced, cannot delete
//! a body that just gained a reference.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, DeleteOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use sha1::{Digest, Sha1};

use super::Registry;
use super::error::{RegistryError, Result};
use super::keys::{Component, check_component};
use super::records::{UnitObject, decode_json, encode_json};
use super::roles::{AgentSession, ApiWriter, LeaderSession};
use fleet_core::model::JobState;
use fleet_core::scheduler::entries;

/// How many times a read-then-conditional-write is retried when another writer keeps winning.
const MAX_ATTEMPTS: u32 = 5;

/// A unit version to store.
#[derive(Debug, Clone, Copy)]
pub struct PutUnit<'a> {
    pub name: &'a str,
    /// Canonical unit text (spec §4.3).
    pub text: &'a str,
    /// SHA-1 of `text` as 40 lowercase hex characters, as computed by the unit module. Verified here because a
    /// wrong hash would corrupt content addressing for every unit sharing it.
    pub hash: &'a str,
    /// Desired state written on create or replace.
    pub desired: JobState,
    /// Drop the unit's schedule (`target`) in the same transaction, so the engine places the new version afresh
    /// (the default `--replace`: the unit may move). One transaction keeps an interrupted client harmless.
    pub reschedule: bool,
    /// Store the version "without restart" ([`UnitObject::no_restart`]).
    pub no_restart: bool,
}

/// Most placement changes [`LeaderSession::placements`] puts in one transaction: each brings up to two compares,
/// the leader fence two more, and etcd refuses transactions with more than 128 compares or operations by default
/// (`--max-txn-ops`).
pub const MAX_PLACEMENTS_PER_TXN: usize = 63;

/// Most launched markers one transaction of [`AgentSession::mark_launched_many`] writes (etcd's default
/// `--max-txn-ops` is 128 compares and 128 operations).
pub const MAX_MARKERS_PER_TXN: usize = 128;

/// An engine decision as a registry write: the unit's schedule (`target` key) set or cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementWrite<'a> {
    /// Set the unit's target to `machine` if it has none and the unit exists.
    Schedule { unit: &'a str, machine: &'a str },
    /// Clear the unit's target if it is still `machine`.
    Unschedule { unit: &'a str, machine: &'a str },
    /// Clear the unit's target if it is still `machine` and `machine` is still absent (no presence key): an
    /// at-most-once unit leaves a lost machine only while that machine has not come back.
    UnscheduleFromAbsent { unit: &'a str, machine: &'a str },
}

impl PlacementWrite<'_> {
    pub fn unit(&self) -> &str {
        match self {
            PlacementWrite::Schedule { unit, .. }
            | PlacementWrite::Unschedule { unit, .. }
            | PlacementWrite::UnscheduleFromAbsent { unit, .. } => unit,
        }
    }

    fn op_name(&self) -> &'static str {
        match self {
            PlacementWrite::Schedule { .. } => "schedule",
            PlacementWrite::Unschedule { .. } | PlacementWrite::UnscheduleFromAbsent { .. } => "unschedule",
        }
    }
}

/// What [`ApiWriter::destroy_unit`] deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destroyed {
    /// The deleted unit object (`None` if it was unreadable); its bodies are now GC candidates.
    pub object: Option<UnitObject>,
    /// Revision of the delete.
    pub revision: i64,
}

/// What [`ApiWriter::put_unit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitWrite {
    Created {
        revision: i64,
    },
    /// The unit existed with another hash; `previous` is kept as the object's `previousHash` (`None` if the old
    /// object was unreadable).
    Replaced {
        previous: Option<String>,
        revision: i64,
    },
    /// The unit already has this hash; nothing was written (desired state included).
    Unchanged,
}

impl UnitWrite {
    /// Revision of the write, to wait for in a reflector; `None` when nothing was written.
    pub fn revision(&self) -> Option<i64> {
        match self {
            UnitWrite::Created { revision } | UnitWrite::Replaced { revision, .. } => Some(*revision),
            UnitWrite::Unchanged => None,
        }
    }
}

pub(super) fn revision_of(resp: &etcd_client::TxnResponse) -> i64 {
    resp.header().map_or(0, |h| h.revision())
}

impl PutUnit<'_> {
    pub(super) fn check(&self) -> Result<()> {
        check_component(Component::UnitName, self.name)?;
        check_component(Component::Hash, self.hash)?;
        let actual = hex::encode(Sha1::digest(self.text.as_bytes()));
        if actual != self.hash {
            return Err(RegistryError::HashMismatch {
                unit: self.name.to_string(),
                hash: self.hash.to_string(),
                actual,
            });
        }
        Ok(())
    }
}

impl ApiWriter {
    fn unit_write_ops(&self, unit: &PutUnit<'_>, old: Option<&UnitObject>) -> Vec<TxnOp> {
        let mut ops = vec![self.body_op(unit)];
        self.unit_ops(unit, old, fleet_core::model::now_ms(), &mut ops);
        ops
    }

    /// Appends the writes of one unit but its body to `ops`: its object (replacing `old`), its desired state, and
    /// the removal of its placement on `reschedule`. Layout 2 ([`ApiWriter::with_view`]): the desired state in the
    /// object (a layout-1 `desired` key left over is deleted), and a reschedule deletes the placements the view
    /// shows.
    pub(super) fn unit_ops(&self, unit: &PutUnit<'_>, old: Option<&UnitObject>, now: u64, ops: &mut Vec<TxnOp>) {
        let k = &self.keys;
        let mut object = UnitObject::next(old, unit.name, unit.hash, unit.no_restart, now);
        if self.layout_2() {
            object.desired = Some(unit.desired);
            ops.push(TxnOp::put(k.unit_object(unit.name), encode_json(&object), None));
            ops.push(TxnOp::delete(k.unit_desired(unit.name), None));
            if unit.reschedule {
                ops.extend(self.placement_deletes(unit.name));
            }
        } else {
            ops.push(TxnOp::put(k.unit_object(unit.name), encode_json(&object), None));
            ops.push(TxnOp::put(k.unit_desired(unit.name), unit.desired.as_str(), None));
        }
        if unit.reschedule {
            ops.push(TxnOp::delete(k.unit_target(unit.name), None));
        }
    }

    /// How many operations [`ApiWriter::unit_ops`] appends for `unit`.
    pub(super) fn unit_ops_count(&self, unit: &PutUnit<'_>) -> usize {
        let placements = if unit.reschedule { self.placements(unit.name).len().min(MAX_PLACEMENTS_DELETED) } else { 0 };
        2 + usize::from(unit.reschedule) + placements
    }

    /// The deletes of the placements of `name` the view shows (layout 2), with a destroy.
    pub(super) fn placement_deletes(&self, name: &str) -> Vec<TxnOp> {
        let machines = self.placements(name);
        machines
            .iter()
            .take(MAX_PLACEMENTS_DELETED)
            .map(|m| TxnOp::delete(self.keys.schedule_entry(m, name), None))
            .collect()
    }

    /// Layout 2's [`ApiWriter::set_desired`]: the object re-put with the state, guarded by the revision it was read
    /// at, a layout-1 `desired` key left over deleted, and the unit's schedule entries carrying the state
    /// ([`ApiWriter::entry_desired_writes`]). A write that fails is made again with the object alone: the engine's
    /// next pass brings the state into entries that changed since the view.
    async fn set_desired_in_object(&self, name: &str, state: JobState) -> Result<i64> {
        let key = self.keys.unit_object(name);
        let entries = self.entry_desired_writes(name, state);
        let mut with_entries = true;
        for _ in 0..MAX_ATTEMPTS {
            let resp = self.kv().get(key.as_str(), None).await.map_err(RegistryError::etcd("get", key.as_str()))?;
            let Some(kv) = resp.kvs().first() else {
                return Err(RegistryError::UnitNotFound { unit: name.to_string() });
            };
            let mut object = decode_json::<UnitObject>(&key, "unit object", kv.value())?;
            object.desired = Some(state);
            let mut compares = vec![Compare::mod_revision(key.as_str(), CompareOp::Equal, kv.mod_revision())];
            let mut ops = vec![
                TxnOp::put(key.as_str(), encode_json(&object), None),
                TxnOp::delete(self.keys.unit_desired(name), None),
            ];
            if with_entries {
                entries.push_to(&mut compares, &mut ops);
            }
            let resp = self.txn("set desired state", &key, Txn::new().when(compares).and_then(ops)).await?;
            if resp.succeeded() {
                return Ok(revision_of(&resp));
            }
            with_entries = false;
        }
        Err(RegistryError::Conflict { op: "set desired state", key, attempts: MAX_ATTEMPTS })
    }

    /// Layout 2: the writes that carry a change of `name`'s desired state to `state` into its schedule entries as
    /// the view shows them ([`entries::with_desired`]), so that a scoped agent learns of it from the same revision
    /// as the object, with or without an engine leader. Each entry is guarded by its value as the view shows it:
    /// one the engine wrote since (a move, a rollout's pin) is not overwritten.
    pub(super) fn entry_desired_writes(&self, name: &str, state: JobState) -> EntryWrites {
        let Some(record) = self.view().filter(|_| self.layout_2()).and_then(|v| v.unit_record(name)) else {
            return EntryWrites(Vec::new());
        };
        EntryWrites(
            entries::with_desired(record.entries(), state)
                .into_iter()
                .map(|(machine, stored, entry)| {
                    (self.keys.schedule_entry(machine, name), encode_json(stored), encode_json(&entry))
                })
                .collect(),
        )
    }
}

/// [`ApiWriter::entry_desired_writes`]: each entry's key, its value as the view shows it, and its new value.
pub(super) struct EntryWrites(Vec<(String, String, String)>);

impl EntryWrites {
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Appends each entry's guard and put.
    pub(super) fn push_to(&self, compares: &mut Vec<Compare>, ops: &mut Vec<TxnOp>) {
        for (key, shown, new) in &self.0 {
            compares.push(Compare::value(key.as_str(), CompareOp::Equal, shown.as_str()));
            ops.push(TxnOp::put(key.as_str(), new.as_str(), None));
        }
    }
}

/// Most placements of one unit a destroy or reschedule deletes itself (there is one, unless another writer left
/// more); the engine clears any others.
pub(super) const MAX_PLACEMENTS_DELETED: usize = 3;

impl Registry {
    /// The put of the unit's body, which units of one hash share.
    pub(super) fn body_op(&self, unit: &PutUnit<'_>) -> TxnOp {
        TxnOp::put(self.keys.body(unit.hash), unit.text, None)
    }

    /// The unit object that a destroy's prefix delete `op` removed, decoded (`None` if absent or unreadable).
    pub(super) fn destroyed_object(&self, name: &str, op: &TxnOpResponse) -> Option<UnitObject> {
        let TxnOpResponse::Delete(d) = op else { return None };
        let key = self.keys.unit_object(name);
        let kv = d.prev_kvs().iter().find(|kv| kv.key() == key.as_bytes())?;
        decode_json(&key, "unit object", kv.value()).ok()
    }
}

impl ApiWriter {
    /// Creates a unit that must not exist yet (fleetctl `submit` semantics); [`RegistryError::UnitExists`] names
    /// the stored hash otherwise. Returns the write's revision.
    pub async fn create_unit(&self, unit: &PutUnit<'_>) -> Result<i64> {
        unit.check()?;
        let key = self.keys.unit_object(unit.name);
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
            .and_then(self.unit_write_ops(unit, None))
            .or_else([TxnOp::get(key.as_str(), None)]);
        let resp = self.txn("create unit", &key, txn).await?;
        if resp.succeeded() {
            return Ok(revision_of(&resp));
        }
        let existing = first_get_value(&resp).map(|raw| decode_json::<UnitObject>(&key, "unit object", &raw));
        let hash = match existing {
            Some(Ok(o)) => o.hash.to_string(),
            Some(Err(e)) => return Err(e.into()),
            None => String::new(),
        };
        Err(RegistryError::UnitExists { unit: unit.name.to_string(), hash })
    }

    /// Creates the unit or replaces its body (keeping the old hash as `previousHash`), writing the desired state in
    /// the same transaction. A unit that already has this hash is left untouched ([`UnitWrite::Unchanged`]); the
    /// caller changes its desired state with [`ApiWriter::set_desired`]. The schedule (`target`) is kept: moving the
    /// unit is the engine's decision.
    pub async fn put_unit(&self, unit: &PutUnit<'_>) -> Result<UnitWrite> {
        unit.check()?;
        let key = self.keys.unit_object(unit.name);
        for _ in 0..MAX_ATTEMPTS {
            let resp = self.kv().get(key.as_str(), None).await.map_err(RegistryError::etcd("get", key.as_str()))?;
            // An unreadable object is replaced (with no previous hash) rather than blocking every repair.
            let current = resp.kvs().first().map(|kv| {
                let object = decode_json::<UnitObject>(&key, "unit object", kv.value())
                    .inspect_err(|e| tracing::warn!(error = %e, "replacing unreadable unit object"))
                    .ok();
                (object, kv.mod_revision())
            });
            // Guard on exactly what was read so the recorded previous hash is the one actually replaced.
            let guard = match &current {
                Some((Some(o), _)) if *o.hash == *unit.hash => return Ok(UnitWrite::Unchanged),
                Some((_, mod_revision)) => Compare::mod_revision(key.as_str(), CompareOp::Equal, *mod_revision),
                None => Compare::version(key.as_str(), CompareOp::Equal, 0),
            };
            let existed = current.is_some();
            let old = current.and_then(|(o, _)| o);
            let previous = old.as_ref().map(|o| o.hash.to_string());
            let txn = Txn::new().when([guard]).and_then(self.unit_write_ops(unit, old.as_ref()));
            let resp = self.txn("put unit", &key, txn).await?;
            if resp.succeeded() {
                let revision = revision_of(&resp);
                return Ok(match (existed, previous) {
                    (true, previous) => UnitWrite::Replaced { previous, revision },
                    (false, _) => UnitWrite::Created { revision },
                });
            }
        }
        Err(RegistryError::Conflict { op: "put unit", key, attempts: MAX_ATTEMPTS })
    }

    /// Sets the desired state of an existing unit. Returns the write's revision.
    pub async fn set_desired(&self, name: &str, state: JobState) -> Result<i64> {
        check_component(Component::UnitName, name)?;
        if self.layout_2() {
            return self.set_desired_in_object(name, state).await;
        }
        let object = self.keys.unit_object(name);
        let txn = Txn::new().when([Compare::version(object.as_str(), CompareOp::Greater, 0)]).and_then([TxnOp::put(
            self.keys.unit_desired(name),
            state.as_str(),
            None,
        )]);
        let resp = self.txn("set desired state", &object, txn).await?;
        if !resp.succeeded() {
            return Err(RegistryError::UnitNotFound { unit: name.to_string() });
        }
        Ok(revision_of(&resp))
    }

    /// Deletes every key of the unit (object, desired, target, launched markers) at once. Its bodies are left
    /// for garbage collection.
    pub async fn destroy_unit(&self, name: &str) -> Result<Destroyed> {
        check_component(Component::UnitName, name)?;
        let object = self.keys.unit_object(name);
        let mut ops =
            vec![TxnOp::delete(self.keys.unit_dir(name), Some(DeleteOptions::new().with_prefix().with_prev_key()))];
        ops.extend(self.placement_deletes(name));
        let txn = Txn::new().when([Compare::version(object.as_str(), CompareOp::Greater, 0)]).and_then(ops);
        let resp = self.txn("destroy unit", &object, txn).await?;
        if !resp.succeeded() {
            return Err(RegistryError::UnitNotFound { unit: name.to_string() });
        }
        let object = resp.op_responses().iter().find_map(|op| self.destroyed_object(name, op));
        Ok(Destroyed { object, revision: revision_of(&resp) })
    }
}

impl LeaderSession {
    /// One placement change as its own transaction; the revision of the write, or `None` when its compares failed.
    /// Written only while this engine still leads ([`RegistryError::NotLeader`]).
    pub async fn placement(&self, change: &PlacementWrite<'_>) -> Result<Option<i64>> {
        let (compares, op) = self.placement_txn(change)?;
        let target = self.keys.unit_target(change.unit());
        let resp = self.fenced_txn(change.op_name(), &target, compares, vec![op]).await?;
        Ok(resp.map(|r| revision_of(&r)))
    }

    /// Applies several placement changes in one transaction, all or nothing: the revision of the write,
    /// or `None` when any change's compares failed (then nothing was written; apply them one by one to find out
    /// which). At most [`MAX_PLACEMENTS_PER_TXN`] changes, each for a different unit (etcd refuses two writes of
    /// one key in a transaction).
    pub async fn placements(&self, changes: &[PlacementWrite<'_>]) -> Result<Option<i64>> {
        if changes.len() > MAX_PLACEMENTS_PER_TXN {
            return Err(RegistryError::TooManyOps {
                op: "placements",
                count: changes.len(),
                max: MAX_PLACEMENTS_PER_TXN,
            });
        }
        let mut compares = Vec::with_capacity(changes.len() * 2);
        let mut ops = Vec::with_capacity(changes.len());
        for change in changes {
            let (c, op) = self.placement_txn(change)?;
            compares.extend(c);
            ops.push(op);
        }
        let key = self.keys.units_dir();
        let resp = self.fenced_txn("placements", &key, compares, ops).await?;
        Ok(resp.map(|r| revision_of(&r)))
    }
}

/// Most schedule entries [`LeaderSession::write_entries`] changes in one transaction: each change may bring two
/// compares (its unit's guard, its machine's absence), the leader fence two more, and etcd refuses more than 128
/// compares or operations by default.
pub const MAX_ENTRIES_PER_TXN: usize = 63;

/// An entry operation with the compare it needs of its own (a delete's machine absence).
type EntryOp = (Option<Compare>, TxnOp);

/// One unit's entry operations that fit a transaction.
type EntryPiece<'a> = (&'a str, &'a [EntryOp]);

/// What [`LeaderSession::write_entries`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntriesWritten {
    /// Entry changes written.
    pub written: usize,
    /// Units whose changes were not written: their object changed since the view they were decided from (or a
    /// machine an entry was to leave came back). The next pass decides them again.
    pub conflicts: Vec<String>,
    /// Revision of the last write.
    pub revision: Option<i64>,
}

impl LeaderSession {
    /// Writes layout 2's schedule entries (`scheduler::entries`), fenced to this leadership. A unit's changes are
    /// written only while its object is at the revision they were decided from (`EntryChanges::guards`; a unit
    /// destroyed meanwhile gets no entry back) and a delete marked `while_absent` only while its machine is absent.
    /// Units share transactions of at most [`MAX_ENTRIES_PER_TXN`] changes; when one's compares fail, the units of
    /// that transaction are written one by one, and the ones that fail again are reported as conflicts.
    pub async fn write_entries(
        &self,
        changes: &fleet_core::scheduler::entries::EntryChanges,
    ) -> Result<EntriesWritten> {
        // Per unit, its operations and the compares each needs.
        let mut groups: BTreeMap<&str, Vec<EntryOp>> = BTreeMap::new();
        for (machine, unit, entry) in &changes.put {
            check_component(Component::MachineId, machine)?;
            check_component(Component::UnitName, unit)?;
            let put = TxnOp::put(self.keys.schedule_entry(machine, unit), encode_json(entry), None);
            groups.entry(unit).or_default().push((None, put));
        }
        for (machine, unit) in &changes.delete {
            check_component(Component::MachineId, machine)?;
            check_component(Component::UnitName, unit)?;
            let absent = changes
                .while_absent
                .contains(&(machine.clone(), unit.clone()))
                .then(|| Compare::version(self.keys.machine_object(machine), CompareOp::Equal, 0));
            groups
                .entry(unit)
                .or_default()
                .push((absent, TxnOp::delete(self.keys.schedule_entry(machine, unit), None)));
        }
        // A unit's operations in pieces that fit a transaction, then pieces packed into transactions.
        let mut pieces: Vec<EntryPiece<'_>> = Vec::new();
        for (unit, ops) in &groups {
            pieces.extend(ops.chunks(MAX_ENTRIES_PER_TXN).map(|c| (*unit, c)));
        }
        let mut batches: Vec<Vec<EntryPiece<'_>>> = Vec::new();
        let mut size = 0;
        for piece in pieces {
            if batches.is_empty() || size + piece.1.len() > MAX_ENTRIES_PER_TXN {
                batches.push(Vec::new());
                size = 0;
            }
            size += piece.1.len();
            batches.last_mut().expect("pushed above").push(piece);
        }
        let mut out = EntriesWritten::default();
        for batch in batches {
            if let Some(revision) = self.entry_txn(changes, &batch).await? {
                out.written += batch.iter().map(|(_, ops)| ops.len()).sum::<usize>();
                out.revision = Some(revision);
                continue;
            }
            if batch.len() == 1 {
                out.conflicts.push(batch[0].0.to_string());
                continue;
            }
            for piece in batch {
                match self.entry_txn(changes, &[piece]).await? {
                    Some(revision) => {
                        out.written += piece.1.len();
                        out.revision = Some(revision);
                    }
                    None => out.conflicts.push(piece.0.to_string()),
                }
            }
        }
        out.conflicts.dedup();
        Ok(out)
    }

    /// One fenced transaction of entry pieces: each unit's guard once, each delete's absence compare.
    async fn entry_txn(
        &self,
        changes: &fleet_core::scheduler::entries::EntryChanges,
        pieces: &[EntryPiece<'_>],
    ) -> Result<Option<i64>> {
        let mut compares = Vec::new();
        let mut guarded: Vec<&str> = Vec::new();
        for (unit, ops) in pieces {
            if let Some(revision) = changes.guards.get(*unit)
                && !guarded.contains(unit)
            {
                guarded.push(unit);
                compares.push(Compare::mod_revision(self.keys.unit_object(unit), CompareOp::Equal, *revision));
            }
            compares.extend(ops.iter().filter_map(|(c, _)| c.clone()));
        }
        let ops: Vec<TxnOp> = pieces.iter().flat_map(|(_, ops)| ops.iter().map(|(_, op)| op.clone())).collect();
        let key = self.keys.machines_dir();
        Ok(self.fenced_txn("schedule entries", &key, compares, ops).await?.map(|r| revision_of(&r)))
    }
}

impl Registry {
    fn placement_txn(&self, change: &PlacementWrite<'_>) -> Result<(Vec<Compare>, TxnOp)> {
        match *change {
            PlacementWrite::Schedule { unit, machine } => {
                check_component(Component::UnitName, unit)?;
                check_component(Component::MachineId, machine)?;
                let target = self.keys.unit_target(unit);
                let compares = vec![
                    Compare::version(target.as_str(), CompareOp::Equal, 0),
                    Compare::version(self.keys.unit_object(unit), CompareOp::Greater, 0),
                ];
                Ok((compares, TxnOp::put(target.as_str(), machine, None)))
            }
            PlacementWrite::Unschedule { unit, machine } => {
                check_component(Component::UnitName, unit)?;
                let target = self.keys.unit_target(unit);
                let compares = vec![Compare::value(target.as_str(), CompareOp::Equal, machine)];
                Ok((compares, TxnOp::delete(target.as_str(), None)))
            }
            PlacementWrite::UnscheduleFromAbsent { unit, machine } => {
                check_component(Component::UnitName, unit)?;
                check_component(Component::MachineId, machine)?;
                let target = self.keys.unit_target(unit);
                let compares = vec![
                    Compare::value(target.as_str(), CompareOp::Equal, machine),
                    Compare::version(self.keys.machine_object(machine), CompareOp::Equal, 0),
                ];
                Ok((compares, TxnOp::delete(target.as_str(), None)))
            }
        }
    }
}

impl AgentSession {
    /// Records that this machine started the unit (version `hash`), bound to the machine's lease so the
    /// marker vanishes with the machine instead of being rewritten periodically (spec §7.6). Only written while
    /// the unit exists, so a late agent cannot resurrect a destroyed unit's keys; `false` if it does not.
    pub async fn mark_launched(&self, name: &str, hash: &str) -> Result<bool> {
        check_component(Component::UnitName, name)?;
        let (machine, lease) = (self.machine(), self.lease());
        let key = self.keys.unit_launched(name, machine);
        let txn = Txn::new()
            .when([Compare::version(self.keys.unit_object(name), CompareOp::Greater, 0)])
            .and_then([TxnOp::put(key.as_str(), hash, Some(PutOptions::new().with_lease(lease)))]);
        let resp = self.txn("mark launched", &key, txn).await?;
        if resp.succeeded() {
            self.noted(resp.header().map_or(0, |h| h.revision()), [(key, Some(hash.as_bytes().to_vec()))]);
        }
        Ok(resp.succeeded())
    }

    /// [`AgentSession::mark_launched`] for several units (unit, hash) in one transaction, all or nothing:
    /// `false` when any of the units is gone (then nothing was written; mark them one by one). At most
    /// [`MAX_MARKERS_PER_TXN`] units, each once.
    pub async fn mark_launched_many(&self, units: &[(&str, &str)]) -> Result<bool> {
        let (machine, lease) = (self.machine(), self.lease());
        if units.len() > MAX_MARKERS_PER_TXN {
            return Err(RegistryError::TooManyOps {
                op: "mark launched",
                count: units.len(),
                max: MAX_MARKERS_PER_TXN,
            });
        }
        let mut compares = Vec::with_capacity(units.len());
        let mut ops = Vec::with_capacity(units.len());
        let mut written = Vec::with_capacity(units.len());
        for (name, hash) in units {
            check_component(Component::UnitName, name)?;
            let key = self.keys.unit_launched(name, machine);
            compares.push(Compare::version(self.keys.unit_object(name), CompareOp::Greater, 0));
            ops.push(TxnOp::put(key.as_str(), *hash, Some(PutOptions::new().with_lease(lease))));
            written.push((key, Some(hash.as_bytes().to_vec())));
        }
        let key = self.keys.units_dir();
        let resp = self.txn("mark launched", &key, Txn::new().when(compares).and_then(ops)).await?;
        if resp.succeeded() {
            self.noted(resp.header().map_or(0, |h| h.revision()), written);
        }
        Ok(resp.succeeded())
    }

    /// Removes this machine's launched markers of several units in one transaction (at most
    /// [`MAX_MARKERS_PER_TXN`], each once).
    pub async fn unmark_launched_many(&self, units: &[&str]) -> Result<()> {
        let machine = self.machine();
        if units.len() > MAX_MARKERS_PER_TXN {
            return Err(RegistryError::TooManyOps {
                op: "unmark launched",
                count: units.len(),
                max: MAX_MARKERS_PER_TXN,
            });
        }
        let mut ops = Vec::with_capacity(units.len());
        let mut written = Vec::with_capacity(units.len());
        for name in units {
            check_component(Component::UnitName, name)?;
            let key = self.keys.unit_launched(name, machine);
            ops.push(TxnOp::delete(key.as_str(), None));
            written.push((key, None));
        }
        let key = self.keys.units_dir();
        let resp = self.txn("unmark launched", &key, Txn::new().and_then(ops)).await?;
        self.noted(resp.header().map_or(0, |h| h.revision()), written);
        Ok(())
    }

    /// Removes this machine's launched marker (only its own key).
    pub async fn unmark_launched(&self, name: &str) -> Result<()> {
        check_component(Component::UnitName, name)?;
        let key = self.keys.unit_launched(name, self.machine());
        let resp = self.kv().delete(key.as_str(), None).await.map_err(RegistryError::etcd("delete", key.clone()))?;
        self.noted(resp.header().map_or(0, |h| h.revision()), [(key, None)]);
        Ok(())
    }
}

/// Value of the first key returned by a `get` op in a transaction response.
pub(crate) fn first_get_value(resp: &etcd_client::TxnResponse) -> Option<Vec<u8>> {
    resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_unit_checks_name_and_hash() {
        let text = "[Service]\nExecStart=/bin/sleep 100\n";
        let ok = PutUnit {
            name: "a.service",
            text,
            hash: "1c6fb6f3684bafb0c173d8b8b957ceff031180c1",
            desired: JobState::Inactive,
            reschedule: false,
            no_restart: false,
        };
        ok.check().unwrap();
        let err = PutUnit { hash: "a0f275d46bc6ee0eca06be7c339913c07d99c0c7", ..ok }.check().unwrap_err();
        assert!(matches!(err, RegistryError::HashMismatch { .. }), "{err}");
        assert!(PutUnit { name: "a/b.service", ..ok }.check().is_err());
        assert!(PutUnit { hash: "xyz", ..ok }.check().is_err());
    }
}

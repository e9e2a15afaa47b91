//! Unit writes for many units at once (the API's batch route): create/replace, desired state and destroy in as few
//! etcd transactions as etcd's `--max-txn-ops` allows ([`cost_batches`]). Every key of one unit is written in one
//! transaction, so a unit is never half written. When a transaction's compares fail (another writer changed one of
//! its units since it was read) or etcd refuses it, nothing of it was written, and its units are written one by one
//! through the single-unit operations of `units.rs`, so every unit gets its own result, in request order. The
//! transactions of one step go [`TXNS_IN_FLIGHT`] at a time, in [`waves`]: a unit named twice is written in
//! request order.

use std::collections::HashSet;

use etcd_client::{Compare, CompareOp, DeleteOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use futures::StreamExt;

use super::batch::{MAX_TXN_OPS, TXNS_IN_FLIGHT, TxnCost, cost_batches, txn_batches, waves};
use super::error::Result;
use super::keys::{Component, check_component};
use super::records::{UnitObject, decode_json};
use super::roles::ApiWriter;
use super::units::{Destroyed, EntryWrites, PutUnit, UnitWrite, revision_of};
use fleet_core::model::JobState;

/// One unit of a batched create/replace, after its read: what to write and how to guard it.
struct Planned<'a> {
    index: usize,
    unit: &'a PutUnit<'a>,
    /// The object's mod revision as read (`None`: it did not exist).
    read_revision: Option<i64>,
    /// The replaced object as read (`None` when absent or unreadable).
    old: Option<UnitObject>,
}

impl ApiWriter {
    /// [`Registry::put_unit`] for many units: the results in `units` order. The objects are read in transactions of
    /// up to [`MAX_TXN_OPS`] gets; the writes go in transactions holding each shared body once.
    pub async fn put_units(&self, units: &[PutUnit<'_>]) -> Vec<Result<UnitWrite>> {
        let mut results: Vec<Option<Result<UnitWrite>>> = units.iter().map(|_| None).collect();
        let mut valid = Vec::with_capacity(units.len());
        for (index, unit) in units.iter().enumerate() {
            match unit.check() {
                Ok(()) => valid.push(index),
                Err(err) => results[index] = Some(Err(err)),
            }
        }
        let mut planned: Vec<Planned<'_>> = Vec::with_capacity(valid.len());
        let dir = self.keys.units_dir();
        let reads = in_flight(valid.chunks(MAX_TXN_OPS), |chunk| {
            let gets: Vec<TxnOp> =
                chunk.iter().map(|&i| TxnOp::get(self.keys.unit_object(units[i].name), None)).collect();
            self.txn("read units", &dir, Txn::new().and_then(gets))
        })
        .await;
        for (chunk, read) in reads {
            let resp = match read {
                Ok(resp) => resp,
                Err(err) => {
                    tracing::debug!(error = %err, "batched read failed; writing these units one by one");
                    for &i in chunk {
                        results[i] = Some(self.put_unit(&units[i]).await);
                    }
                    continue;
                }
            };
            for (&index, op) in chunk.iter().zip(resp.op_responses()) {
                let unit = &units[index];
                let kv = got(op);
                let key = self.keys.unit_object(unit.name);
                // An unreadable object is replaced (with no previous hash), as `put_unit` does.
                let old = kv.as_ref().and_then(|(raw, _)| decode_json::<UnitObject>(&key, "unit object", raw).ok());
                if old.as_ref().is_some_and(|o| *o.hash == *unit.hash) {
                    results[index] = Some(Ok(UnitWrite::Unchanged));
                    continue;
                }
                planned.push(Planned { index, unit, read_revision: kv.map(|(_, r)| r), old });
            }
        }
        let dir = self.keys.units_dir();
        let groups = cost_batches(
            &planned,
            MAX_TXN_OPS,
            |p| p.unit.name,
            |p| TxnCost { compares: 1, ops: self.unit_ops_count(p.unit), shared: Some(p.unit.hash) },
        );
        let written = in_waves(
            groups,
            |p| p.unit.name,
            |group| {
                let mut compares = Vec::with_capacity(group.len());
                let mut ops = Vec::with_capacity(group.len() * 3);
                let mut bodies: HashSet<&str> = HashSet::new();
                let now = fleet_core::model::now_ms();
                for p in group {
                    let (unit, key) = (p.unit, self.keys.unit_object(p.unit.name));
                    compares.push(match p.read_revision {
                        Some(revision) => Compare::mod_revision(key.as_str(), CompareOp::Equal, revision),
                        None => Compare::version(key.as_str(), CompareOp::Equal, 0),
                    });
                    if bodies.insert(unit.hash) {
                        ops.push(self.body_op(unit));
                    }
                    self.unit_ops(unit, p.old.as_ref(), now, &mut ops);
                }
                self.txn("put units", &dir, Txn::new().when(compares).and_then(ops))
            },
        )
        .await;
        for (group, outcome) in written {
            match outcome {
                Ok(resp) if resp.succeeded() => {
                    let revision = revision_of(&resp);
                    for p in group {
                        results[p.index] = Some(Ok(match p.read_revision {
                            Some(_) => {
                                UnitWrite::Replaced { previous: p.old.as_ref().map(|o| o.hash.to_string()), revision }
                            }
                            None => UnitWrite::Created { revision },
                        }));
                    }
                }
                outcome => {
                    if let Err(err) = outcome {
                        tracing::debug!(error = %err, "batched unit write failed; writing its units one by one");
                    }
                    for p in group {
                        results[p.index] = Some(self.put_unit(p.unit).await);
                    }
                }
            }
        }
        results.into_iter().map(|r| r.expect("every unit is checked, unchanged, planned or failed")).collect()
    }

    /// [`Registry::set_desired`] for many units (each with its state): the revision of each write, in order. Up to
    /// [`MAX_TXN_OPS`] units per transaction.
    pub async fn set_desired_many(&self, changes: &[(&str, JobState)]) -> Vec<Result<i64>> {
        let mut results: Vec<Option<Result<i64>>> = changes.iter().map(|_| None).collect();
        let mut valid = Vec::with_capacity(changes.len());
        for (index, (name, _)) in changes.iter().enumerate() {
            match check_component(Component::UnitName, name) {
                Ok(()) => valid.push((index, *name)),
                Err(err) => results[index] = Some(Err(err.into())),
            }
        }
        if self.layout_2() {
            self.set_desired_in_objects(changes, &valid, &mut results).await;
            return results.into_iter().map(|r| r.expect("every change is checked or written")).collect();
        }
        let dir = self.keys.units_dir();
        let written = in_unit_waves(&valid, |group| {
            let compares = group
                .iter()
                .map(|&(i, _)| Compare::version(self.keys.unit_object(changes[i].0), CompareOp::Greater, 0));
            let ops = group
                .iter()
                .map(|&(i, _)| TxnOp::put(self.keys.unit_desired(changes[i].0), changes[i].1.as_str(), None));
            let txn = Txn::new().when(compares.collect::<Vec<_>>()).and_then(ops.collect::<Vec<_>>());
            self.txn("set desired states", &dir, txn)
        })
        .await;
        for (group, outcome) in written {
            match outcome {
                Ok(resp) if resp.succeeded() => {
                    let revision = revision_of(&resp);
                    for &(i, _) in group {
                        results[i] = Some(Ok(revision));
                    }
                }
                outcome => {
                    if let Err(err) = outcome {
                        tracing::debug!(error = %err, "batched desired states failed; writing them one by one");
                    }
                    for &(i, _) in group {
                        results[i] = Some(self.set_desired(changes[i].0, changes[i].1).await);
                    }
                }
            }
        }
        results.into_iter().map(|r| r.expect("every change is checked or written")).collect()
    }

    /// Layout 2's [`ApiWriter::set_desired_many`]: the objects read in transactions of gets, then re-put with their
    /// states, each guarded by the revision it was read at, with the entries that carry the states
    /// ([`ApiWriter::entry_desired_writes`]); a group whose compares fail is written one by one.
    async fn set_desired_in_objects(
        &self,
        changes: &[(&str, JobState)],
        valid: &[(usize, &str)],
        results: &mut [Option<Result<i64>>],
    ) {
        let dir = self.keys.units_dir();
        let reads = in_flight(valid.chunks(MAX_TXN_OPS), |chunk| {
            let gets: Vec<TxnOp> =
                chunk.iter().map(|&(_, name)| TxnOp::get(self.keys.unit_object(name), None)).collect();
            self.txn("read units", &dir, Txn::new().and_then(gets))
        })
        .await;
        // (index, name, object with its new state, revision read, its entries' writes)
        let mut planned: Vec<(usize, &str, UnitObject, i64, EntryWrites)> = Vec::with_capacity(valid.len());
        for (chunk, read) in reads {
            let Ok(resp) = read else {
                for &(i, name) in chunk {
                    results[i] = Some(self.set_desired(name, changes[i].1).await);
                }
                continue;
            };
            for (&(i, name), op) in chunk.iter().zip(resp.op_responses()) {
                let kv = got(op);
                let key = self.keys.unit_object(name);
                match kv.map(|(raw, revision)| (decode_json::<UnitObject>(&key, "unit object", &raw), revision)) {
                    None => results[i] = Some(Err(super::RegistryError::UnitNotFound { unit: name.to_string() })),
                    Some((Err(e), _)) => results[i] = Some(Err(e.into())),
                    Some((Ok(mut object), revision)) => {
                        object.desired = Some(changes[i].1);
                        let entries = self.entry_desired_writes(name, changes[i].1);
                        planned.push((i, name, object, revision, entries));
                    }
                }
            }
        }
        // Each unit: its object and leftover `desired` key, and its entries that carry the state.
        let groups = cost_batches(
            &planned,
            MAX_TXN_OPS,
            |p| p.1,
            |p| TxnCost { compares: 1 + p.4.len(), ops: 2 + p.4.len(), shared: None },
        );
        let written = in_waves(
            groups,
            |p| p.1,
            |group| {
                let mut compares = Vec::with_capacity(group.len());
                let mut ops = Vec::with_capacity(group.len() * 2);
                for (_, name, object, revision, entries) in group {
                    let key = self.keys.unit_object(name);
                    compares.push(Compare::mod_revision(key.as_str(), CompareOp::Equal, *revision));
                    ops.push(TxnOp::put(key.as_str(), super::records::encode_json(object), None));
                    ops.push(TxnOp::delete(self.keys.unit_desired(name), None));
                    entries.push_to(&mut compares, &mut ops);
                }
                self.txn("set desired states", &dir, Txn::new().when(compares).and_then(ops))
            },
        )
        .await;
        for (group, outcome) in written {
            match outcome {
                Ok(resp) if resp.succeeded() => {
                    let revision = revision_of(&resp);
                    for (i, ..) in group {
                        results[*i] = Some(Ok(revision));
                    }
                }
                outcome => {
                    if let Err(err) = outcome {
                        tracing::debug!(error = %err, "batched desired states failed; writing them one by one");
                    }
                    for (i, name, ..) in group {
                        results[*i] = Some(self.set_desired(name, changes[*i].1).await);
                    }
                }
            }
        }
    }

    /// [`Registry::destroy_unit`] for many units, in order. Up to [`MAX_TXN_OPS`] units per transaction (fewer in
    /// layout 2, where a destroy also deletes the unit's placements).
    pub async fn destroy_units(&self, names: &[&str]) -> Vec<Result<Destroyed>> {
        let mut results: Vec<Option<Result<Destroyed>>> = names.iter().map(|_| None).collect();
        let mut valid = Vec::with_capacity(names.len());
        for (index, name) in names.iter().enumerate() {
            match check_component(Component::UnitName, name) {
                Ok(()) => valid.push((index, *name)),
                Err(err) => results[index] = Some(Err(err.into())),
            }
        }
        let dir = self.keys.units_dir();
        let per_txn =
            if self.layout_2() { MAX_TXN_OPS / (1 + super::units::MAX_PLACEMENTS_DELETED) } else { MAX_TXN_OPS };
        let written = in_waves(
            txn_batches(&valid, per_txn, |v| v.1),
            |v| v.1,
            |group| {
                let compares = group
                    .iter()
                    .map(|&(i, _)| Compare::version(self.keys.unit_object(names[i]), CompareOp::Greater, 0));
                // Each unit's prefix delete first, in group order (its response finds the destroyed object), then the
                // placements.
                let mut ops: Vec<TxnOp> = group
                    .iter()
                    .map(|&(i, _)| {
                        TxnOp::delete(
                            self.keys.unit_dir(names[i]),
                            Some(DeleteOptions::new().with_prefix().with_prev_key()),
                        )
                    })
                    .collect();
                ops.extend(group.iter().flat_map(|&(i, _)| self.placement_deletes(names[i])));
                let txn = Txn::new().when(compares.collect::<Vec<_>>()).and_then(ops);
                self.txn("destroy units", &dir, txn)
            },
        )
        .await;
        for (group, outcome) in written {
            match outcome {
                Ok(resp) if resp.succeeded() => {
                    let revision = revision_of(&resp);
                    for (&(i, _), op) in group.iter().zip(resp.op_responses()) {
                        let object = self.destroyed_object(names[i], &op);
                        results[i] = Some(Ok(Destroyed { object, revision }));
                    }
                }
                outcome => {
                    if let Err(err) = outcome {
                        tracing::debug!(error = %err, "batched destroy failed; destroying its units one by one");
                    }
                    for &(i, _) in group {
                        results[i] = Some(self.destroy_unit(names[i]).await);
                    }
                }
            }
        }
        results.into_iter().map(|r| r.expect("every unit is checked or destroyed")).collect()
    }
}

/// The value and mod revision a transaction's get found (`None`: the key is absent).
fn got(op: TxnOpResponse) -> Option<(Vec<u8>, i64)> {
    match op {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| (kv.value().to_vec(), kv.mod_revision())),
        _ => None,
    }
}

/// Sends the transaction `send` builds for each group, [`TXNS_IN_FLIGHT`] at a time; the outcomes in group order.
async fn in_flight<'g, T: 'g, F>(
    groups: impl IntoIterator<Item = &'g [T]>,
    send: impl Fn(&'g [T]) -> F,
) -> Vec<(&'g [T], Result<TxnResponse>)>
where
    F: std::future::Future<Output = Result<TxnResponse>>,
{
    // The futures are made before the stream (they do nothing until polled): a stream mapping through a closure
    // trips the compiler's proof that the API handler's future is `Send` ("FnOnce is not general enough").
    let sent: Vec<_> = groups.into_iter().map(|group| paired(group, send(group))).collect();
    futures::stream::iter(sent).buffered(TXNS_IN_FLIGHT).collect().await
}

/// [`in_flight`] for writes: one [`waves`] wave after another, so a unit named twice is written in request order.
async fn in_waves<'g, T: 'g, F>(
    groups: Vec<&'g [T]>,
    unit_of: impl Fn(&T) -> &str,
    send: impl Fn(&'g [T]) -> F,
) -> Vec<(&'g [T], Result<TxnResponse>)>
where
    F: std::future::Future<Output = Result<TxnResponse>>,
{
    let mut outcomes = Vec::with_capacity(groups.len());
    for wave in waves(groups, unit_of) {
        outcomes.extend(in_flight(wave, &send).await);
    }
    outcomes
}

/// [`in_waves`] over checked `(index, unit name)` pairs split by [`txn_batches`] (the desired-state and destroy
/// steps: one operation per unit).
async fn in_unit_waves<'g, F>(
    valid: &'g [(usize, &'g str)],
    send: impl Fn(&'g [(usize, &'g str)]) -> F,
) -> Vec<(&'g [(usize, &'g str)], Result<TxnResponse>)>
where
    F: std::future::Future<Output = Result<TxnResponse>>,
{
    in_waves(txn_batches(valid, MAX_TXN_OPS, |v| v.1), |v| v.1, send).await
}

async fn paired<G, F: std::future::Future>(group: G, sent: F) -> (G, F::Output) {
    (group, sent.await)
}

//! Unit state publishing (spec §7.5): each agent writes and deletes only its own `P/states/<name>/<machine>` key,
//! bound to its machine lease. Removing one machine's state never touches another machine's (fixes B7), and a
//! dead machine's states vanish with its lease instead of needing periodic TTL rewrites.

use std::collections::HashSet;

use etcd_client::{PutOptions, Txn, TxnOp};

use super::error::{RegistryError, Result};
use super::keys::{Component, check_component};
use super::records::{StateRecord, encode_json};
use super::roles::AgentSession;
use fleet_core::model::PublishedState;

/// Most state writes [`AgentSession::write_states`] puts in one transaction (etcd's default `--max-txn-ops`).
pub const MAX_STATE_WRITES_PER_TXN: usize = 128;

/// One change to the states a machine publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateWrite<'a> {
    /// Write this state under the machine's lease.
    Publish(&'a PublishedState),
    /// Delete the state `machine` published for `unit`.
    Remove { unit: &'a str, machine: &'a str },
}

impl StateWrite<'_> {
    pub fn unit(&self) -> &str {
        match self {
            StateWrite::Publish(state) => &state.name,
            StateWrite::Remove { unit, .. } => unit,
        }
    }
}

impl AgentSession {
    /// Writes several states in one transaction (one commit instead of one per unit): all written or, on error,
    /// none. At most [`MAX_STATE_WRITES_PER_TXN`], each for a different unit.
    pub async fn write_states(&self, writes: &[StateWrite<'_>]) -> Result<()> {
        let lease = self.lease();
        if writes.len() > MAX_STATE_WRITES_PER_TXN {
            return Err(RegistryError::TooManyOps {
                op: "write states",
                count: writes.len(),
                max: MAX_STATE_WRITES_PER_TXN,
            });
        }
        let mut keys = HashSet::with_capacity(writes.len());
        let mut ops = Vec::with_capacity(writes.len());
        let mut written = Vec::with_capacity(writes.len());
        for write in writes {
            let (key, value) = match write {
                StateWrite::Publish(state) => {
                    self.own(&state.machine_id)?;
                    check_component(Component::UnitName, &state.name)?;
                    check_component(Component::MachineId, &state.machine_id)?;
                    check_component(Component::Hash, &state.hash)?;
                    let key = self.keys.state(&state.name, &state.machine_id);
                    (key, Some(encode_json(&StateRecord::from_state(state))))
                }
                StateWrite::Remove { unit, machine } => {
                    self.own(machine)?;
                    check_component(Component::UnitName, unit)?;
                    check_component(Component::MachineId, machine)?;
                    (self.keys.state(unit, machine), None)
                }
            };
            if !keys.insert(key.clone()) {
                return Err(RegistryError::DuplicateKey { op: "write states", key });
            }
            ops.push(match &value {
                Some(value) => TxnOp::put(key.as_str(), value.clone(), Some(PutOptions::new().with_lease(lease))),
                None => TxnOp::delete(key.as_str(), None),
            });
            written.push((key, value));
        }
        let key = self.keys.states_dir();
        let resp = self.txn("write states", &key, Txn::new().and_then(ops)).await?;
        self.noted(
            resp.header().map_or(0, |h| h.revision()),
            written.into_iter().map(|(k, v)| (k, v.map(String::into_bytes))),
        );
        Ok(())
    }

    /// Publishes `state` (its `name` and `machine_id`, which must be this machine, choose the key) under this
    /// machine's lease. A state without a hash is refused, as in the original: readers rely on knowing which
    /// version runs.
    pub async fn publish_state(&self, state: &PublishedState) -> Result<()> {
        self.own(&state.machine_id)?;
        let lease = self.lease();
        check_component(Component::UnitName, &state.name)?;
        check_component(Component::MachineId, &state.machine_id)?;
        check_component(Component::Hash, &state.hash)?;
        let key = self.keys.state(&state.name, &state.machine_id);
        let value = encode_json(&StateRecord::from_state(state));
        let resp = self
            .kv()
            .put(key.as_str(), value.clone(), Some(PutOptions::new().with_lease(lease)))
            .await
            .map_err(RegistryError::etcd("put", key.clone()))?;
        self.noted(resp.header().map_or(0, |h| h.revision()), [(key, Some(value.into_bytes()))]);
        Ok(())
    }

    /// Removes the state this machine published for `name` (no other machine's).
    pub async fn remove_state(&self, name: &str) -> Result<()> {
        check_component(Component::UnitName, name)?;
        let key = self.keys.state(name, self.machine());
        let resp = self.kv().delete(key.as_str(), None).await.map_err(RegistryError::etcd("delete", key.clone()))?;
        self.noted(resp.header().map_or(0, |h| h.revision()), [(key, None)]);
        Ok(())
    }
}

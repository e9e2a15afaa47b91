//! Machine presence and dynamic metadata.
//!
//! Presence is `P/machines/<id>/object` bound to the machine's lease: created only if absent (a second fleetd with
//! the same machine ID is detected and refused, spec §6.6), rewritten only by the lease that owns it, and gone
//! when that lease expires or is revoked. No periodic rewrites: the lease keep-alive is the heartbeat.
//!
//! Dynamic metadata (`P/machines/<id>/metadata/<key>`, no lease) is written by the API and survives the machine
//! leaving; removing a key stores the tombstone `""` so that it also hides a key from the machine's config (§3.3).
//! A cordon (`P/machines/<id>/cordon`, no lease, issue 38) likewise: written and deleted by the API only.
//! A load fault (`P/machines/<id>/load-fault`, issue 37) is the machine's own word that it cannot write unit files:
//! bound to its lease, written and deleted by its agent only.

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};

use super::Registry;
use super::error::{RegistryError, Result};
use super::keys::{Component, check_component};
use super::records::{Cordon, MachineObject, encode_json};
use super::roles::{AgentSession, ApiWriter};
use fleet_core::model::{GlobalUnits, LoadFault, MachineState};

/// What [`Registry::register_machine`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// The presence key did not exist and now does.
    Created,
    /// The presence key already belonged to this lease and was rewritten with the new state.
    Refreshed,
}

impl Registry {
    /// Registers (or refreshes) this machine's presence under `lease`. Fails with
    /// [`RegistryError::DuplicateMachine`] when another lease holds the ID, i.e. another live fleetd uses the same
    /// machine ID; the caller retries with backoff (the other one may be a previous incarnation whose lease has not
    /// expired yet). Refresh only when the published state changed: presence itself is kept by the lease, and every
    /// rewrite is an etcd write replicated to the whole cluster.
    pub async fn register_machine(&self, state: &MachineState, lease: i64) -> Result<Registration> {
        self.register_machine_running(state, lease, &[]).await
    }

    /// [`Registry::register_machine`], advertising the registry layouts this fleetd runs (`MachineObject::layouts`;
    /// none: layout 1 alone). The engine switches a cluster to layout 2 once every present machine lists it.
    pub async fn register_machine_running(
        &self,
        state: &MachineState,
        lease: i64,
        layouts: &[u32],
    ) -> Result<Registration> {
        check_component(Component::MachineId, &state.id)?;
        let key = self.keys.machine_object(&state.id);
        let object = MachineObject { layouts: layouts.to_vec(), ..MachineObject::from_state(state) };
        let put = || TxnOp::put(key.as_str(), encode_json(&object), Some(PutOptions::new().with_lease(lease)));
        // Outer: ours already → rewrite. Else inner: absent → create; else read the holder to report it.
        let create = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
            .and_then([put()])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let txn = Txn::new()
            .when([Compare::lease(key.as_str(), CompareOp::Equal, lease)])
            .and_then([put()])
            .or_else([TxnOp::txn(create)]);
        let resp = self.txn("register machine", &key, txn).await?;
        if resp.succeeded() {
            return Ok(Registration::Refreshed);
        }
        let Some(TxnOpResponse::Txn(inner)) = resp.op_responses().into_iter().next() else {
            return Err(RegistryError::Decode(fleet_core::store::DecodeError {
                key,
                what: "register machine response",
                reason: "nested transaction response missing".into(),
                value: String::new(),
            }));
        };
        if inner.succeeded() {
            return Ok(Registration::Created);
        }
        let holder = inner.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.lease()),
            _ => None,
        });
        Err(RegistryError::DuplicateMachine { machine: state.id.clone(), lease: holder.unwrap_or(0) })
    }

    /// Removes this machine's presence if it still belongs to `lease` (graceful shutdown). Never deletes the key of
    /// another fleetd that registered the same ID.
    pub async fn unregister_machine(&self, id: &str, lease: i64) -> Result<bool> {
        check_component(Component::MachineId, id)?;
        let key = self.keys.machine_object(id);
        let txn = Txn::new()
            .when([Compare::lease(key.as_str(), CompareOp::Equal, lease)])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        Ok(self.txn("unregister machine", &key, txn).await?.succeeded())
    }
}

impl ApiWriter {
    /// Sets dynamic metadata `key` = `value` for machine `id` (which need not be registered). An empty value is
    /// the same as [`Registry::remove_metadata`]. Returns the write's revision.
    pub async fn set_metadata(&self, id: &str, key: &str, value: &str) -> Result<i64> {
        check_component(Component::MachineId, id)?;
        check_component(Component::MetadataKey, key)?;
        let k = self.keys.machine_metadata(id, key);
        let resp = self.kv().put(k.as_str(), value, None).await.map_err(RegistryError::etcd("put", k))?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Hides metadata `key` of machine `id`, whether it came from the API or the machine's config (tombstone `""`).
    pub async fn remove_metadata(&self, id: &str, key: &str) -> Result<i64> {
        self.set_metadata(id, key, "").await
    }

    /// Cordons machine `id` (issue 38): writes `P/machines/<id>/cordon`, bound to no lease, so the cordon outlives
    /// the machine's presence (a fleetd restart, a reboot). Returns the write's revision.
    pub async fn cordon(&self, id: &str, cordon: &Cordon) -> Result<i64> {
        check_component(Component::MachineId, id)?;
        let k = self.keys.machine_cordon(id);
        let resp = self.kv().put(k.as_str(), encode_json(cordon), None).await.map_err(RegistryError::etcd("put", k))?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Removes the cordon of machine `id`, present or not (nothing to remove is not an error). Returns the
    /// revision.
    pub async fn uncordon(&self, id: &str) -> Result<i64> {
        check_component(Component::MachineId, id)?;
        let k = self.keys.machine_cordon(id);
        let resp = self.kv().delete(k.as_str(), None).await.map_err(RegistryError::etcd("delete", k))?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }
}

impl AgentSession {
    /// Publishes that this machine cannot write unit files (issue 37), under its lease: the engine then places no
    /// new unit here and moves the units named in `fault` elsewhere.
    pub async fn put_load_fault(&self, fault: &LoadFault) -> Result<()> {
        let key = self.keys.machine_load_fault(self.machine());
        let value = encode_json(fault);
        self.kv()
            .put(key.as_str(), value, Some(PutOptions::new().with_lease(self.lease())))
            .await
            .map_err(RegistryError::etcd("put", key))?;
        Ok(())
    }

    /// Publishes the global units this machine runs under its memory lease, so that they outlive it by
    /// `rollout::REMEMBER_DEPARTED` (issue 37). Without a memory lease, nothing is written.
    pub async fn put_global_units(&self, units: &GlobalUnits) -> Result<()> {
        let Some(memory) = self.memory() else { return Ok(()) };
        let key = self.keys.machine_global_units(self.machine());
        self.kv()
            .put(key.as_str(), encode_json(units), Some(PutOptions::new().with_lease(memory)))
            .await
            .map_err(RegistryError::etcd("put", key))?;
        Ok(())
    }

    /// Withdraws this machine's load fault: it can write unit files again.
    pub async fn clear_load_fault(&self) -> Result<()> {
        let key = self.keys.machine_load_fault(self.machine());
        self.kv().delete(key.as_str(), None).await.map_err(RegistryError::etcd("delete", key))?;
        Ok(())
    }
}

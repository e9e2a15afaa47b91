//! Unit state publishing (spec §7.5): each agent writes and deletes only its own `P/states/<name>/<machine>` key,
//! bound to its machine lease. Removing one machine's state never touches another machine's (fixes B7), and a
//! dead machine's states vanish with its lease instead of needing periodic TTL rewrites.

use etcd_client::PutOptions;

use super::Registry;
use super::error::{RegistryError, Result};
use super::keys::{Component, check_component};
use super::records::{StateRecord, encode_json};
use crate::model::UnitState;

impl Registry {
    /// Publishes `state` (its `name` and `machine_id` choose the key) under `lease`, the publishing machine's
    /// lease. A state without a hash is refused, as in the original: readers rely on knowing which version runs.
    pub async fn publish_state(&self, state: &UnitState, lease: i64) -> Result<()> {
        check_component(Component::UnitName, &state.name)?;
        check_component(Component::MachineId, &state.machine_id)?;
        check_component(Component::Hash, &state.hash)?;
        let key = self.keys.state(&state.name, &state.machine_id);
        let value = encode_json(&StateRecord::from_state(state));
        self.client
            .clone()
            .put(key.as_str(), value, Some(PutOptions::new().with_lease(lease)))
            .await
            .map_err(RegistryError::etcd("put", key))?;
        Ok(())
    }

    /// Removes the state `machine` published for `name` (no other machine's).
    pub async fn remove_state(&self, name: &str, machine: &str) -> Result<()> {
        check_component(Component::UnitName, name)?;
        check_component(Component::MachineId, machine)?;
        let key = self.keys.state(name, machine);
        self.client.clone().delete(key.as_str(), None).await.map_err(RegistryError::etcd("delete", key))?;
        Ok(())
    }
}

//! The contract every client keeps: the [`Client`] trait (what fleetctl does to a cluster, the original's
//! `client.API`) and the filter its state query takes. The implementations (`http`, `etcd`, `fake`) and the
//! commands use it; it needs only the client's errors.

use std::time::Duration;

use fleet_core::schema::{Machine, Rollout, RolloutRequest, Unit, UnitBatch, UnitHistory, UnitState};
use fleet_core::version::SemVer;

use super::error::ClientError;

/// Everything fleetctl does to a cluster. Names and semantics follow the original's `client.API`.
pub trait Client: Send + Sync {
    /// All present machines, sorted by ID.
    fn machines(&self) -> Result<Vec<Machine>, ClientError>;
    /// All units, sorted by name.
    fn units(&self) -> Result<Vec<Unit>, ClientError>;
    /// One unit, or `None` when it does not exist.
    fn unit(&self, name: &str) -> Result<Option<Unit>, ClientError>;
    /// Create or replace a unit: `unit` carries `name`, `options` and optionally `desiredState` (§8.6).
    fn create_unit(&self, unit: &Unit) -> Result<(), ClientError>;
    /// Change the desired state of an existing unit.
    fn set_unit_target_state(&self, name: &str, state: &str) -> Result<(), ClientError>;
    /// Delete a unit. A missing unit is an API error with code 404 ([`ClientError::is_not_found`]).
    fn destroy_unit(&self, name: &str) -> Result<(), ClientError>;
    /// Published systemd states, sorted by (name, machine), optionally filtered.
    fn unit_states(&self, filter: &StateFilter) -> Result<Vec<UnitState>, ClientError>;
    /// The first published state of one unit, or `None` when there is none.
    fn unit_state(&self, name: &str) -> Result<Option<UnitState>, ClientError>;
    /// Set one dynamic metadata key of a machine.
    fn set_machine_metadata(&self, machine_id: &str, key: &str, value: &str) -> Result<(), ClientError>;
    /// Remove one dynamic metadata key of a machine.
    fn delete_machine_metadata(&self, machine_id: &str, key: &str) -> Result<(), ClientError>;
    /// Cordon (`cordon`) or uncordon machine `machine_id` (full ID; issue 38): `PUT`/`DELETE
    /// /machines/<id>/cordon`, decided by [`fleet_core::api_rules::decide_cordon`]. An unknown machine is an API
    /// error with code 404.
    fn cordon_machine(&self, machine_id: &str, cordon: bool) -> Result<(), ClientError>;
    /// The newest fleetd version registered in the cluster, for the etcd driver's version check (spec §9.3).
    /// Clients that cannot see it (the API does not publish versions) answer `None`.
    fn latest_daemon_version(&self) -> Result<Option<SemVer>, ClientError> {
        Ok(None)
    }
    /// Start a rolling replace or restart under the ID `id` (`PUT /rollouts/<id>`); the rollout as stored.
    fn create_rollout(&self, id: &str, request: &RolloutRequest) -> Result<Rollout, ClientError>;
    /// Every rollout, newest first (`GET /rollouts`).
    fn rollouts(&self) -> Result<Vec<Rollout>, ClientError>;
    /// The unit's stored versions, newest first (`GET /units/<name>/history`); `None` if the unit does not exist.
    fn unit_history(&self, name: &str) -> Result<Option<UnitHistory>, ClientError>;
    /// One rollout, or `None` when it does not exist (`GET /rollouts/<id>`).
    fn rollout(&self, id: &str) -> Result<Option<Rollout>, ClientError>;
    /// The rollout once it changed after `revision` (the [`Rollout::revision`] it was seen at), or as it is after
    /// about `limit`; `None` when it does not exist (`GET /rollouts/<id>?waitRevision=`). A client that cannot wait
    /// for a change answers at once, as [`Client::rollout`] does.
    fn rollout_change(&self, id: &str, revision: i64, limit: Duration) -> Result<Option<Rollout>, ClientError> {
        let _ = (revision, limit);
        self.rollout(id)
    }
    /// Pause, resume (`run`) or abort a rollout that is not final (`PATCH /rollouts/<id>`).
    fn control_rollout(&self, id: &str, control: fleet_core::schema::RolloutControl) -> Result<(), ClientError>;
    /// The audit trail (`GET /audit`, issue 38): the newest records `query` asks for, oldest first.
    fn audit(&self, query: &fleet_core::audit::Query) -> Result<fleet_core::audit::AuditList, ClientError>;
    /// Many unit writes at once (`POST /units-batch`, an extension): one result per write, `put` then `destroy`,
    /// each what [`Client::create_unit`] (or [`Client::set_unit_target_state`] for a unit without options) and
    /// [`Client::destroy_unit`] would have returned. `None` when this client or its server has no batch route (the
    /// original fleet): the caller then sends one request per unit.
    fn unit_batch(&self, batch: &UnitBatch) -> Option<Vec<Result<(), ClientError>>> {
        let _ = batch;
        None
    }
}

/// A shared client is a client (lets tests keep a handle on the fake they hand out).
impl<T: Client + ?Sized> Client for std::sync::Arc<T> {
    fn machines(&self) -> Result<Vec<Machine>, ClientError> {
        (**self).machines()
    }
    fn units(&self) -> Result<Vec<Unit>, ClientError> {
        (**self).units()
    }
    fn unit(&self, name: &str) -> Result<Option<Unit>, ClientError> {
        (**self).unit(name)
    }
    fn create_unit(&self, unit: &Unit) -> Result<(), ClientError> {
        (**self).create_unit(unit)
    }
    fn set_unit_target_state(&self, name: &str, state: &str) -> Result<(), ClientError> {
        (**self).set_unit_target_state(name, state)
    }
    fn destroy_unit(&self, name: &str) -> Result<(), ClientError> {
        (**self).destroy_unit(name)
    }
    fn unit_states(&self, filter: &StateFilter) -> Result<Vec<UnitState>, ClientError> {
        (**self).unit_states(filter)
    }
    fn unit_state(&self, name: &str) -> Result<Option<UnitState>, ClientError> {
        (**self).unit_state(name)
    }
    fn set_machine_metadata(&self, machine_id: &str, key: &str, value: &str) -> Result<(), ClientError> {
        (**self).set_machine_metadata(machine_id, key, value)
    }
    fn delete_machine_metadata(&self, machine_id: &str, key: &str) -> Result<(), ClientError> {
        (**self).delete_machine_metadata(machine_id, key)
    }
    fn cordon_machine(&self, machine_id: &str, cordon: bool) -> Result<(), ClientError> {
        (**self).cordon_machine(machine_id, cordon)
    }
    fn latest_daemon_version(&self) -> Result<Option<SemVer>, ClientError> {
        (**self).latest_daemon_version()
    }
    fn create_rollout(&self, id: &str, request: &RolloutRequest) -> Result<Rollout, ClientError> {
        (**self).create_rollout(id, request)
    }
    fn rollouts(&self) -> Result<Vec<Rollout>, ClientError> {
        (**self).rollouts()
    }
    fn unit_history(&self, name: &str) -> Result<Option<UnitHistory>, ClientError> {
        (**self).unit_history(name)
    }
    fn rollout(&self, id: &str) -> Result<Option<Rollout>, ClientError> {
        (**self).rollout(id)
    }
    fn rollout_change(&self, id: &str, revision: i64, limit: Duration) -> Result<Option<Rollout>, ClientError> {
        (**self).rollout_change(id, revision, limit)
    }
    fn control_rollout(&self, id: &str, control: fleet_core::schema::RolloutControl) -> Result<(), ClientError> {
        (**self).control_rollout(id, control)
    }
    fn audit(&self, query: &fleet_core::audit::Query) -> Result<fleet_core::audit::AuditList, ClientError> {
        (**self).audit(query)
    }
    fn unit_batch(&self, batch: &UnitBatch) -> Option<Vec<Result<(), ClientError>>> {
        (**self).unit_batch(batch)
    }
}

/// Optional exact-match filters of `GET /state`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateFilter {
    pub machine_id: Option<String>,
    pub unit_name: Option<String>,
}

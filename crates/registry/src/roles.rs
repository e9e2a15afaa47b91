//! Who may write what, as types. Every key has one kind of writer (ARCHITECTURE.md, "Invariants"); each kind
//! gets a handle with only its own writes, so a component that holds the wrong handle cannot compile the write:
//!
//! * [`ApiWriter`] — the API (and fleetctl's etcd driver, which stands in for it): unit objects, bodies and desired
//!   state (in layout 2 also the desired state of the schedule entries its view shows, with the object),
//!   rollout specs and controls, machine metadata.
//! * [`AgentSession`] — one machine's agent, bound to its presence lease: its unit states and its launched and
//!   restarted markers, which vanish with the lease.
//! * [`LeaderSession`] — the engine leader, which exists only after winning the election
//!   ([`Registry::campaign`](crate::Registry::campaign)) and always carries its [`LeaderFence`]: placements,
//!   rollout progress and rebalance plans, body and rollout garbage collection, each write fenced to the leader
//!   key and lease in its own transaction.
//!
//! Each handle dereferences to the [`Registry`] for reads and the plumbing its writes share.

use std::ops::Deref;
use std::sync::Arc;

use crate::engine::LeaderFence;
use crate::error::{RegistryError, Result};
use crate::{Registry, Snapshot};
use fleet_core::store::{Component, check_component};

/// The API's writes: desired state, units, rollout spec and control, machine metadata.
#[derive(Debug, Clone)]
pub struct ApiWriter {
    registry: Registry,
    /// The view the writes are decided on ([`ApiWriter::with_view`]): its layout, and the unit placements it shows.
    view: Option<Arc<Snapshot>>,
}

impl ApiWriter {
    /// Writes in layout 1 (without a view: fleetctl's etcd driver, which has none; the engine folds what it writes
    /// into layout 2 after a switch).
    pub fn new(registry: Registry) -> ApiWriter {
        ApiWriter { registry, view: None }
    }

    /// The same writer, writing in the layout `view` shows: in layout 2 the desired state goes into the unit's
    /// object, and a destroy or a reschedule also deletes the placements (schedule entries) `view` shows, so a
    /// scoped agent learns of it from the same write. A view that lags behind the switch writes layout 1, which the
    /// engine folds; entries it does not show are the engine's to clear.
    pub fn with_view(&self, view: Arc<Snapshot>) -> ApiWriter {
        ApiWriter { registry: self.registry.clone(), view: Some(view) }
    }

    /// The view the writes are decided on, if any.
    pub(crate) fn view(&self) -> Option<&Snapshot> {
        self.view.as_deref()
    }

    /// The writes go in layout 2.
    pub(crate) fn layout_2(&self) -> bool {
        self.view.as_ref().is_some_and(|v| v.layout_version() == Some(fleet_core::layout::LAYOUT_2))
    }

    /// The machines `unit` is placed on in the view (its schedule entries that are not a global unit's), in
    /// layout 2.
    pub(crate) fn placements(&self, unit: &str) -> Vec<String> {
        let Some(view) = self.view.as_ref().filter(|_| self.layout_2()) else { return Vec::new() };
        view.unit_record(unit)
            .map(|r| r.entries().iter().filter(|(_, e)| !e.global).map(|(m, _)| m.to_string()).collect())
            .unwrap_or_default()
    }
}

impl Deref for ApiWriter {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.registry
    }
}

/// One machine's writes, bound to its presence lease: its unit states and markers.
#[derive(Debug, Clone)]
pub struct AgentSession {
    registry: Registry,
    machine: String,
    lease: i64,
    /// The machine's memory lease (`rollout::REMEMBER_DEPARTED`), if it has one: its global units are published
    /// under it.
    memory: Option<i64>,
    /// The scoped view of this machine, told of every write of its lease-bound keys (`Reflector::own_writes`).
    own_writes: Option<crate::reflector::OwnWrites>,
}

impl AgentSession {
    /// The session of `machine`, whose presence lease is `lease`.
    pub fn new(registry: Registry, machine: &str, lease: i64) -> Result<AgentSession> {
        check_component(Component::MachineId, machine)?;
        Ok(AgentSession { registry, machine: machine.to_string(), lease, memory: None, own_writes: None })
    }

    /// This session reporting its writes of lease-bound keys to `view` (a scoped view of this machine, which does
    /// not watch them: [`crate::Reflector::start_scoped`]).
    pub fn with_own_writes(self, view: Option<crate::reflector::OwnWrites>) -> AgentSession {
        AgentSession { own_writes: view, ..self }
    }

    /// Reports writes of this machine's lease-bound keys, made at `revision`, to its scoped view (if any): each key
    /// with its new value, `None` for a delete.
    pub(crate) fn noted(&self, revision: i64, writes: impl IntoIterator<Item = (String, Option<Vec<u8>>)>) {
        if let Some(view) = &self.own_writes {
            let lease = self.lease;
            let writes = writes
                .into_iter()
                .map(|(key, value)| crate::reflector::OwnWrite { key, value, revision, lease })
                .collect();
            view.note(writes);
        }
    }

    /// This session with the machine's memory lease (see [`AgentSession::put_global_units`]).
    pub fn with_memory(self, lease: i64) -> AgentSession {
        AgentSession { memory: Some(lease), ..self }
    }

    pub fn memory(&self) -> Option<i64> {
        self.memory
    }

    pub fn machine(&self) -> &str {
        &self.machine
    }

    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// Refuses a write for another machine's key: an agent writes only its own.
    pub(crate) fn own(&self, machine: &str) -> Result<()> {
        if machine == self.machine {
            Ok(())
        } else {
            Err(RegistryError::NotOwnMachine { machine: machine.to_string(), own: self.machine.clone() })
        }
    }
}

impl Deref for AgentSession {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.registry
    }
}

/// The engine leader's writes, each fenced to its leader key and lease.
#[derive(Debug, Clone)]
pub struct LeaderSession {
    registry: Registry,
    fence: LeaderFence,
}

impl LeaderSession {
    pub(crate) fn new(registry: Registry, fence: LeaderFence) -> LeaderSession {
        LeaderSession { registry, fence }
    }

    /// The session of a leader whose won campaign `view` confirms: the leader key holds `fence`'s machine, bound
    /// to its lease (a campaign whose answer was lost, and the view delivered the key later). `None` otherwise.
    pub fn confirmed(registry: Registry, fence: LeaderFence, view: &Snapshot) -> Option<LeaderSession> {
        let record = view.leader_record()?;
        (record.machine == fence.machine && record.lease == fence.lease).then(|| LeaderSession::new(registry, fence))
    }

    pub fn fence(&self) -> &LeaderFence {
        &self.fence
    }

    /// Gives leadership up at once (deletes the leader key if still ours); `false` if it was not ours any more.
    pub async fn resign(self) -> Result<bool> {
        self.registry.resign(&self.fence.machine, self.fence.lease).await
    }
}

impl Deref for LeaderSession {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.registry
    }
}

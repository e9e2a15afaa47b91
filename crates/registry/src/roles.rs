//! Who may write what, as types. Every key has one kind of writer (ARCHITECTURE.md, "Invariants"); each kind
//! gets a handle with only its own writes, so a component that holds the wrong handle cannot compile the write:
//!
//! * [`ApiWriter`] — the API (and fleetctl's etcd driver, which stands in for it): unit objects, bodies and desired
//!   state, rollout specs and controls, machine metadata.
//! * [`AgentSession`] — one machine's agent, bound to its presence lease: its unit states and its launched and
//!   restarted markers, which vanish with the lease.
//! * [`LeaderSession`] — the engine leader, which exists only after winning the election
//!   ([`Registry::campaign`](crate::Registry::campaign)) and always carries its [`LeaderFence`]: placements,
//!   rollout progress and rebalance plans, body and rollout garbage collection, each write fenced to the leader
//!   key and lease in its own transaction.
//!
//! Each handle dereferences to the [`Registry`] for reads and the plumbing its writes share.

use std::ops::Deref;

use crate::engine::LeaderFence;
use crate::error::{RegistryError, Result};
use crate::{Registry, Snapshot};
use fleet_core::store::{Component, check_component};

/// The API's writes: desired state, units, rollout spec and control, machine metadata.
#[derive(Debug, Clone)]
pub struct ApiWriter {
    registry: Registry,
}

impl ApiWriter {
    pub fn new(registry: Registry) -> ApiWriter {
        ApiWriter { registry }
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
}

impl AgentSession {
    /// The session of `machine`, whose presence lease is `lease`.
    pub fn new(registry: Registry, machine: &str, lease: i64) -> Result<AgentSession> {
        check_component(Component::MachineId, machine)?;
        Ok(AgentSession { registry, machine: machine.to_string(), lease, memory: None })
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

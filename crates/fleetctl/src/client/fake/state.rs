//! The fake client's state: the cluster it pretends to be (machines, units with their version history, published
//! states, rollouts, the agents' restart markers, the engine's clock) and the knobs tests turn (convergence, lag,
//! failures, unhealthy versions), and what both of its users derive from it: a unit's hash, whether it is global,
//! its pinned machine, and the next version of its history. Plain data under the fake's lock; the client
//! ([`super::FakeClient`]) and the registry image ([`super::registry_image`]) both work on it.

use std::collections::{BTreeMap, BTreeSet};

use fleet_core::schema::{Machine, UnitState};
use fleet_core::unit::UnitOption;
use fleet_core::unit::{Requirements, UnitFile};
use fleet_core::version::SemVer;

use crate::client::error::ClientError;

#[derive(Debug, Clone)]
pub(super) struct FakeUnit {
    pub(super) options: Vec<UnitOption>,
    /// The registry object's version history (newest first), kept as the registry keeps it.
    pub(super) history: Vec<fleet_registry::Version>,
    pub(super) desired: String,
    /// How often the unit was observed since its desired state last changed.
    pub(super) seen: u32,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) machines: Vec<Machine>,
    pub(super) units: BTreeMap<String, FakeUnit>,
    /// Extra published states (in addition to the converged ones).
    pub(super) states: Vec<UnitState>,
    pub(super) converge: bool,
    pub(super) lag: u32,
    pub(super) log: Vec<String>,
    /// Single-unit reads (`unit()`), by name.
    pub(super) unit_reads: BTreeMap<String, u32>,
    pub(super) fail: Option<ClientError>,
    /// Every desired-state write fails with this (reads work), like a server whose etcd is out of space.
    pub(super) fail_target_states: Option<ClientError>,
    pub(super) daemon_version: Option<SemVer>,
    /// Options of every version a rollout replaced, by hash (what a rollback returns to).
    pub(super) bodies: BTreeMap<String, Vec<UnitOption>>,
    pub(super) rollouts: BTreeMap<String, fleet_core::rollout::Rollout>,
    /// (unit, machine) → the rollout the machine last restarted the unit for (the agents' restarted markers).
    pub(super) restarted: BTreeMap<(String, String), String>,
    /// Versions (hashes) that fail on every machine that starts them.
    pub(super) unhealthy: BTreeSet<String>,
    /// While set, the pretend engine leaves rollouts alone.
    pub(super) rollouts_frozen: bool,
    /// The pretend engine's clock (Unix ms).
    pub(super) clock_ms: u64,
    /// How many of the next single-rollout reads fail, and with what.
    pub(super) failing_rollout_reads: Option<(u32, ClientError)>,
    /// The audit trail: one record per unit write and cordon, as the API records them (by [`FAKE_USER`]).
    pub(super) audit: Vec<fleet_core::audit::AuditRecord>,
}

/// Who the fake's audit records name: a Unix socket user.
pub(super) const FAKE_USER: &str = "tester";

pub(super) fn opts_hash(options: &[UnitOption]) -> String {
    UnitFile::from_options(options.to_vec()).hash().to_hex()
}

pub(super) fn is_global(name: &str, options: &[UnitOption]) -> bool {
    Requirements::of(&UnitFile::from_options(options.to_vec()), name).global
}

pub(super) fn pinned_machine(options: &[UnitOption]) -> Option<String> {
    options.iter().find(|o| o.section == "X-Fleet" && o.name == "MachineID").map(|o| o.value.clone())
}

impl State {
    /// The history after `old` (if any) gains the version `options`, as [`fleet_registry::UnitObject::next`]
    /// continues it; the old version's options are kept for the history and rollbacks.
    pub(super) fn next_history(
        &mut self,
        old: Option<&FakeUnit>,
        options: &[UnitOption],
    ) -> Vec<fleet_registry::Version> {
        let hash = opts_hash(options);
        let old_object = old.map(|o| {
            self.bodies.insert(opts_hash(&o.options), o.options.clone());
            fleet_registry::UnitObject {
                name: "".into(),
                hash: opts_hash(&o.options).into(),
                previous_hash: None,
                no_restart: false,
                history: o.history.clone(),
                desired: None,
            }
        });
        let clock = self.clock_ms;
        fleet_registry::UnitObject::next(old_object.as_ref(), "", &hash, false, clock).history
    }

    /// Records `write` (the API's `method path`) answered `done` on success, or with the refusal in `result`.
    pub(super) fn record<T>(
        &mut self,
        write: fleet_core::audit::Write<'_>,
        (method, path): (&str, String),
        done: u16,
        result: &Result<T, ClientError>,
    ) {
        use fleet_core::audit::{Via, Who, describe};
        let (status, error) = match result {
            Ok(_) => (done, None),
            Err(ClientError::Api { code, message }) => (*code, Some(message.clone())),
            Err(other) => (500, Some(other.to_string())),
        };
        let who = Who { via: Via::Unix, name: FAKE_USER.into() };
        let request = (method.to_string(), format!("/fleet/v1{path}"));
        self.audit.push(describe(write).into_record(self.clock_ms, who, request, (status, error)));
    }

    /// Stores `options` as the unit's new version (rollouts and rollbacks), continuing its history.
    pub(super) fn store_version(&mut self, name: &str, options: Vec<UnitOption>) {
        let Some(old) = self.units.get(name).cloned() else { return };
        let history = self.next_history(Some(&old), &options);
        if let Some(u) = self.units.get_mut(name) {
            u.options = options;
            u.history = history;
        }
    }
}

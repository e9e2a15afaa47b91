//! The registry's error type: every variant says which key or operation was involved and what was observed.

use std::time::Duration;

use fleet_core::store::{DecodeError, InvalidComponent};

/// Result of a registry operation.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// etcd did not answer or refused the request.
    #[error("etcd {op} {key}: {source}")]
    Etcd {
        op: &'static str,
        key: String,
        #[source]
        source: etcd_client::Error,
    },
    /// The TLS files for etcd (`etcd_cafile`, `etcd_certfile`, `etcd_keyfile`) are missing or unreadable.
    #[error("etcd TLS: {0}")]
    Tls(String),
    /// A stored value could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A name, machine ID, hash or metadata key that cannot be used in a key.
    #[error(transparent)]
    InvalidComponent(#[from] InvalidComponent),
    /// The caller passed a hash that is not the SHA-1 of the body text.
    #[error("unit {unit:?}: hash {hash} does not match its body (SHA-1 of the text is {actual})")]
    HashMismatch { unit: String, hash: String, actual: String },
    #[error("unit {unit:?} does not exist")]
    UnitNotFound { unit: String },
    #[error("unit {unit:?} already exists (hash {hash})")]
    UnitExists { unit: String, hash: String },
    #[error("rollout {id:?} already exists")]
    RolloutExists { id: String },
    #[error("rollout {id:?} does not exist")]
    RolloutNotFound { id: String },
    /// A unit of a new rollout changed between the caller's read and the write.
    #[error("unit {unit:?} changed while the rollout was being created; try again")]
    UnitChanged { unit: String },
    /// A drain was decided under a machine's cordon that was removed before it was stored.
    #[error("the cordon of machine {machine} was removed while the drain was being created; try again")]
    CordonChanged { machine: String },
    /// Another live fleetd holds this machine ID (spec §6.6, `TestDetectMachineId`).
    #[error(
        "machine ID {machine} is already registered by another fleetd (lease {lease:x}); \
         do two hosts share /etc/machine-id?"
    )]
    DuplicateMachine { machine: String, lease: i64 },
    /// An agent's write for another machine's key: each agent writes only its own.
    #[error("machine {own} may not write machine {machine}'s keys")]
    NotOwnMachine { machine: String, own: String },
    /// A conditional write kept failing because another writer changed the key in between.
    #[error("{op} {key}: still conflicting with concurrent writers after {attempts} attempts")]
    Conflict { op: &'static str, key: String, attempts: u32 },
    /// A batch larger than one transaction may hold.
    #[error("{op}: {count} changes in one transaction; at most {max} allowed")]
    TooManyOps { op: &'static str, count: usize, max: usize },
    /// One transaction would write the same key twice (etcd refuses it).
    #[error("{op}: {key} written twice in one transaction")]
    DuplicateKey { op: &'static str, key: String },
    /// The cluster's key layout is newer than this code understands.
    #[error("{key} says registry layout version {found}; this fleet understands up to {supported}")]
    LayoutTooNew { key: String, found: u32, supported: u32 },
    /// A lease this operation needs was lost (expired or revoked).
    #[error("lease {lease:x} is no longer alive: {reason}")]
    LeaseLost { lease: i64, reason: String },
    /// An engine write carried a leader fence that no longer holds: another engine (or nobody) leads now, and
    /// nothing was written.
    #[error(
        "engine write refused: {machine} with lease {lease:x} no longer holds engine leadership (leader key: {holder})"
    )]
    NotLeader { machine: String, lease: i64, holder: String },
    /// [`super::Reflector::wait_for`] ran out of time.
    #[error("waited {waited:?} for {what}; last seen: {last}")]
    Timeout { what: String, waited: Duration, last: String },
}

/// etcd at its space quota, as fleet names the cause wherever a write was refused for it (the API's answer, the
/// agent's log): etcd's own words are a gRPC status deep inside the error.
pub const NO_SPACE: &str = "etcd is out of space (its backend quota is reached and the NOSPACE alarm is raised)";

impl RegistryError {
    /// Whether etcd refused the write because it is at its space quota (the `NOSPACE` alarm: every write is
    /// refused until it is compacted, defragmented and the alarm disarmed).
    pub fn is_no_space(&self) -> bool {
        matches!(self, RegistryError::Etcd { source, .. } if source.to_string().contains("database space exceeded"))
    }

    pub(crate) fn etcd(op: &'static str, key: impl Into<String>) -> impl FnOnce(etcd_client::Error) -> RegistryError {
        let key = key.into();
        move |source| RegistryError::Etcd { op, key, source }
    }

    /// True when the error comes from etcd being unreachable or failing (worth retrying later), as opposed to a
    /// definite answer about the data.
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Etcd { .. } | RegistryError::Conflict { .. } | RegistryError::Timeout { .. })
    }
}

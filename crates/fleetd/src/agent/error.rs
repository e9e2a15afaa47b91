//! The one error type of the `agent` module.

use std::path::PathBuf;

use fleet_systemd::SystemdError;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A unit name that cannot be a file name in the units directory.
    #[error("invalid unit file name {0:?}")]
    InvalidName(String),
    /// A Load task for a unit the desired set does not hold.
    #[error("no unit text for {0}")]
    MissingUnit(String),
    /// Spec §4.6: enabling a unit with an `[Install]` section failed; its file was removed again.
    #[error("Failed to enable systemd unit {name}: {source}")]
    Enable {
        name: String,
        #[source]
        source: SystemdError,
    },
    #[error("waited {secs} s for {what}")]
    Timeout { what: String, secs: u64 },
    /// The stop job of a unit being unloaded ended but the unit is still running (e.g. the job was cancelled).
    #[error("{name} is still {state} after its stop job ({result})")]
    StillActive { name: String, state: String, result: String },
    /// The registry snapshot channel closed (its reflector stopped) while the agent was running.
    #[error("the registry snapshot feed ended")]
    SnapshotsEnded,
    /// Graceful shutdown could not unload every unit within its deadline.
    #[error("purge ended with {left} unit file(s) left in {dir}")]
    PurgeIncomplete { left: usize, dir: PathBuf },
    #[error(transparent)]
    Systemd(#[from] SystemdError),
}

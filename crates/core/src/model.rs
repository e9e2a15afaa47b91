//! Plain domain values shared by every layer: desired/current unit states, a machine's published state and a
//! unit's published systemd state. No I/O and no wire formats here; the registry and the API map these to theirs.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

/// Desired ("target") or derived current state of a unit in fleet's model (spec §7.1–§7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobState {
    /// Known to fleet, not assigned to a machine.
    Inactive,
    /// Assigned to a machine and loaded into its systemd, not started.
    Loaded,
    /// Loaded and started.
    Launched,
}

impl JobState {
    pub const ALL: [JobState; 3] = [JobState::Inactive, JobState::Loaded, JobState::Launched];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Inactive => "inactive",
            JobState::Loaded => "loaded",
            JobState::Launched => "launched",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Stored as its word (`"launched"`), as the layout-1 `desired` key holds it.
impl serde::Serialize for JobState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for JobState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        word.parse().map_err(serde::de::Error::custom)
    }
}

/// A string that is not one of the three job states.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {0:?} for JobState")]
pub struct InvalidJobState(pub String);

impl FromStr for JobState {
    type Err = InvalidJobState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "inactive" => Ok(JobState::Inactive),
            "loaded" => Ok(JobState::Loaded),
            "launched" => Ok(JobState::Launched),
            other => Err(InvalidJobState(other.to_string())),
        }
    }
}

/// What a machine publishes about itself (spec §1.10).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MachineState {
    /// Full machine ID (content of /etc/machine-id, trimmed).
    pub id: String,
    /// Public IP used by fleetctl for SSH and shown in listings; may be empty.
    pub public_ip: String,
    /// Merged metadata (static from config, overlaid by dynamic keys set through the API).
    pub metadata: BTreeMap<String, String>,
    /// fleetd version string of that machine.
    pub version: String,
    /// Whether the machine never runs the engine (`disable_engine`).
    pub disable_engine: bool,
    /// Whether the machine is cordoned (`P/machines/<id>/cordon`, written through the API): it takes no new unit,
    /// and what it runs stays. Read from the registry; never part of what a machine publishes about itself.
    pub cordoned: bool,
    /// Unit files cannot be written on the machine (issue 37: its units directory is full or read-only), as its
    /// agent published (`P/machines/<id>/load-fault`): it takes no new unit, and the units it failed to write go
    /// elsewhere, until the agent can write there again.
    pub load_fault: Option<LoadFault>,
}

/// The global units a machine runs, as its agent publishes them under a lease of its own that outlives the machine
/// by `rollout::REMEMBER_DEPARTED` (`P/machines/<id>/global-units`): a rollout begun shortly after the machine left
/// still counts it as a machine where those units should run and do not.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct GlobalUnits {
    pub units: std::collections::BTreeSet<String>,
}

/// Why a machine cannot write unit files, as its agent publishes it (issue 37, a full disk).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct LoadFault {
    /// The last write error, e.g. `writing /run/fleet/units/.a.service.tmp: No space left on device (os error 28)`.
    pub reason: String,
    /// When the agent first failed (Unix ms).
    #[serde(rename = "sinceMs", default)]
    pub since_ms: u64,
    /// The units whose file the agent failed to write, in name order.
    #[serde(default)]
    pub units: std::collections::BTreeSet<String>,
}

impl fmt::Display for LoadFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot write unit files ({}): {}",
            self.units.iter().cloned().collect::<Vec<_>>().join(", "),
            self.reason
        )
    }
}

impl MachineState {
    /// First 8 characters of the ID (the whole ID when shorter).
    pub fn short_id(&self) -> &str {
        short_machine_id(&self.id)
    }

    /// True when `wanted` is this machine's full or short ID (spec §1.10).
    pub fn matches_id(&self, wanted: &str) -> bool {
        !wanted.is_empty() && (self.id == wanted || self.short_id() == wanted)
    }
}

/// The first 7 bytes of a hash, as fleetctl shows it (the whole text when shorter or not cut at a character).
pub fn short_hash(hash: &str) -> &str {
    hash.get(..7).unwrap_or(hash)
}

/// First 8 characters of a machine ID (the whole ID when shorter).
pub fn short_machine_id(id: &str) -> &str {
    match id.char_indices().nth(8) {
        Some((i, _)) => &id[..i],
        None => id,
    }
}

/// systemd's view of one unit on one machine, as published by that machine's agent (spec §7.5).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PublishedState {
    pub name: String,
    /// Machine that published the state.
    pub machine_id: String,
    /// 40-hex SHA-1 of the unit file version the machine runs.
    pub hash: String,
    pub load_state: String,
    pub active_state: String,
    pub sub_state: String,
    /// systemd's restart counter of a service (`NRestarts`: automatic restarts by `Restart=` since the unit was
    /// last started by request), published while the service is active or activating; `None` otherwise, for
    /// other unit types, and from agents that do not publish it. Rollouts use it to notice a crash that systemd
    /// repaired between two published states.
    pub restarts: Option<u32>,
    /// The unit's health check on this machine (`[X-Fleet] HealthCheck=`), published only for units that have
    /// one; `None` otherwise and from agents that do not run checks.
    pub health: Option<Health>,
    /// Layout 2: the hash of the version the machine started (its launched marker, folded into the state: one
    /// write instead of two); `None`: not started, or an agent that writes separate markers (layout 1).
    pub launched: Option<String>,
}

/// Where a unit's health check stands on one machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// The check has not passed or failed since the unit last became active (or the unit is not active).
    Unknown,
    /// The last check exited 0 within its timeout.
    Healthy,
    /// The last check exited non-zero, was killed at its timeout, or could not be run.
    Unhealthy,
}

impl HealthStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Unknown => "unknown",
            HealthStatus::Healthy => "healthy",
            HealthStatus::Unhealthy => "unhealthy",
        }
    }
}

impl fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A unit's health on one machine as its agent publishes it: the status, since when (the agent's clock, Unix ms;
/// shown, never compared across machines) and the last line the check printed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Health {
    pub status: HealthStatus,
    #[serde(rename = "sinceMs", default)]
    pub since_ms: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
}

/// How a unit scheduled to a machine whose presence is gone shows in the unit states (`GET /state`, list-units):
/// its systemd state is unknown — the machine may still run it, or may have stopped it (an at-most-once unit) —
/// until the engine places it elsewhere (docs/at-most-once.md).
pub const IN_DOUBT: &str = "in-doubt";
/// The load and active state shown for such a unit.
pub const UNKNOWN_STATE: &str = "unknown";

/// Whether systemd's `ActiveState` means the unit is stopped: `inactive` or `failed`. Every other value, unknown ones
/// included, may mean its processes still run (or are about to, or are still stopping). The one rule for the agent,
/// the fence, the handover, rollouts and fleetctl's waits.
pub fn is_stopped(active_state: &str) -> bool {
    matches!(active_state, "inactive" | "failed")
}

/// The wall clock in Unix milliseconds, as rollouts and unit versions store times.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_state_round_trips_through_text() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>(), Ok(s));
        }
        assert_eq!("running".parse::<JobState>().unwrap_err().to_string(), "invalid value \"running\" for JobState");
    }

    #[test]
    fn machine_matches_full_and_short_id() {
        let m = MachineState { id: "8363165e6276f500b71169eca9b3f76b".into(), ..Default::default() };
        assert!(m.matches_id("8363165e6276f500b71169eca9b3f76b"));
        assert!(m.matches_id("8363165e"));
        assert!(!m.matches_id("8363165"));
        assert!(!m.matches_id(""));
        assert_eq!(short_machine_id("abc"), "abc");
    }
}

//! What the agent leaves on disk for the next fleetd process on this machine, so a restarted fleetd (a binary
//! upgrade, `systemctl restart fleet`, a crash followed by a start) adopts the running units instead of planning
//! them again: the target-state cache (which units this agent launched or only loaded) and the version each
//! launched unit runs (it lags the file after a replace without restart).
//!
//! The record lives in `agent-state.json` next to the units directory ([`record_dir`]: `/run/fleet/` for the
//! default `/run/fleet/units/`, so the units directory holds unit files only), on `/run` (tmpfs): a reboot clears
//! it together with the units themselves. It is rewritten after every executor run that
//! changed it, so a fleetd killed outright leaves the last complete record. Pure encode/decode here; the executor
//! does the I/O.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use fleet_core::model::JobState;

/// The file in [`record_dir`] holding the record.
pub const AGENT_STATE_FILE: &str = "agent-state.json";

/// Where fleetd keeps what its next process adopts: the parent of the units directory (the units directory
/// itself when it has none).
pub fn record_dir(units_dir: &Path) -> PathBuf {
    units_dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(units_dir).to_path_buf()
}

/// The executor's knowledge that a new process needs to adopt this machine's units.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// Unit → what the agent believes it did: `"launched"` or `"loaded"`.
    pub believed: BTreeMap<String, String>,
    /// Launched unit → hash of the version it was started with.
    pub running: BTreeMap<String, String>,
}

impl AgentRecord {
    /// The record of the executor's caches.
    pub fn of(believed: &BTreeMap<String, JobState>, running: &BTreeMap<String, String>) -> AgentRecord {
        AgentRecord {
            believed: believed
                .iter()
                .filter(|(_, s)| **s != JobState::Inactive)
                .map(|(n, s)| (n.clone(), s.as_str().to_string()))
                .collect(),
            running: running.clone(),
        }
    }

    /// Reads a record; `None` when the bytes are not one (a missing, truncated or foreign file: the new process
    /// then knows nothing and plans as after a reboot — a start of an active unit is a no-op for systemd).
    pub fn decode(bytes: &[u8]) -> Option<AgentRecord> {
        serde_json::from_slice(bytes).ok()
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The caches to restore, keeping only units whose file is still on disk (`on_disk`: unit → recorded hash) and
    /// states that parse. A launched unit's running version defaults to its file's hash.
    pub fn restore(
        &self,
        on_disk: &BTreeMap<String, String>,
    ) -> (BTreeMap<String, JobState>, BTreeMap<String, String>) {
        let believed: BTreeMap<String, JobState> = self
            .believed
            .iter()
            .filter(|(n, _)| on_disk.contains_key(*n))
            .filter_map(|(n, s)| {
                s.parse::<JobState>().ok().filter(|s| *s != JobState::Inactive).map(|s| (n.clone(), s))
            })
            .collect();
        let running = believed
            .iter()
            .filter(|(_, s)| **s == JobState::Launched)
            .filter_map(|(n, _)| self.running.get(n).or_else(|| on_disk.get(n)).map(|h| (n.clone(), h.clone())))
            .collect();
        (believed, running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map<V: Clone>(pairs: &[(&str, V)]) -> BTreeMap<String, V> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn a_record_round_trips_through_its_encoding() {
        let believed = map(&[("a.service", JobState::Launched), ("b.service", JobState::Loaded)]);
        let running = map(&[("a.service", "h1".to_string())]);
        let record = AgentRecord::of(&believed, &running);
        let back = AgentRecord::decode(record.encode().as_bytes()).expect("decodes");
        let on_disk = map(&[("a.service", "h2".to_string()), ("b.service", "h3".to_string())]);
        assert_eq!(back.restore(&on_disk), (believed, running));
    }

    #[test]
    fn restore_drops_units_without_a_file_and_states_that_do_not_parse() {
        let record = AgentRecord {
            believed: map(&[
                ("gone.service", "launched".to_string()),
                ("odd.service", "running".to_string()),
                ("kept.service", "launched".to_string()),
            ]),
            running: map(&[("gone.service", "h0".to_string())]),
        };
        let on_disk = map(&[("odd.service", "h1".to_string()), ("kept.service", "h2".to_string())]);
        let (believed, running) = record.restore(&on_disk);
        assert_eq!(believed, map(&[("kept.service", JobState::Launched)]));
        // No recorded running version: the file's.
        assert_eq!(running, map(&[("kept.service", "h2".to_string())]));
    }

    #[test]
    fn the_record_lives_next_to_the_units_directory() {
        assert_eq!(record_dir(Path::new("/run/fleet/units/")), PathBuf::from("/run/fleet"));
        assert_eq!(record_dir(Path::new("/run/fleet/units")), PathBuf::from("/run/fleet"));
        assert_eq!(record_dir(Path::new("units")), PathBuf::from("units"));
    }

    #[test]
    fn garbage_is_no_record() {
        assert_eq!(AgentRecord::decode(b"{\"believed\": [1,"), None);
        assert_eq!(AgentRecord::decode(b""), None);
    }
}

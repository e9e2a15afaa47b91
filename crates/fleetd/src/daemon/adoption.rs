//! Restart without disruption: how fleetd tells a restart (hand the machine to the next process) from a stop
//! (purge), and the presence record the next process adopts.
//!
//! On SIGTERM fleetd asks its own systemd which job is pending on the unit it runs in: `restart` (or
//! `try-restart`, `reload-or-restart`) means a new process follows at once, so this one leaves the machine **for adoption**: it stops
//! its components and exits, leaving every unit running, its states and launched markers published and its
//! presence lease unrevoked. Anything else (`stop`, a system shutdown, no job, not under systemd) **purges** as
//! the original did. SIGUSR2 always leaves it for adoption (for operators and supervisors other than systemd).
//!
//! The next process reads `presence.json` next to the units directory (`agent::adoption::record_dir`; this
//! machine's ID and presence lease, written at
//! every registration, so a fleetd killed outright leaves it too) and keeps that lease alive when etcd still
//! holds it: the machine never leaves the registry and the engine moves nothing. The agent's own record
//! (`agent::adoption`) lets it adopt the running units without a stop, start or daemon-reload.

use serde::{Deserialize, Serialize};

/// The file next to the units directory (`agent::adoption::record_dir`) holding the presence record.
pub const PRESENCE_FILE: &str = "presence.json";

/// How fleetd leaves on a shutdown signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Stop and unload every unit here and revoke the presence lease: the units go to other machines.
    Purge,
    /// Leave everything running and registered for the next fleetd process to adopt.
    Restart,
}

/// SIGTERM's exit, from the type of the job pending on fleetd's own systemd unit (`None`: no job, or fleetd
/// does not run in a systemd unit, or systemd could not be asked).
pub fn exit_for_job(job_type: Option<&str>) -> Exit {
    match job_type {
        Some("restart" | "try-restart" | "reload-or-restart" | "reload-or-try-restart") => Exit::Restart,
        _ => Exit::Purge,
    }
}

/// This machine's presence lease as the last registration left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceRecord {
    pub machine_id: String,
    pub lease: i64,
}

impl PresenceRecord {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The lease to adopt for `machine_id`; `None` for a record of another machine (a copied disk) or garbage.
    pub fn lease_for(bytes: &[u8], machine_id: &str) -> Option<i64> {
        serde_json::from_slice::<PresenceRecord>(bytes).ok().filter(|r| r.machine_id == machine_id).map(|r| r.lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_restart_job_hands_off() {
        let rows = [
            (Some("restart"), Exit::Restart),
            (Some("try-restart"), Exit::Restart),
            (Some("reload-or-restart"), Exit::Restart),
            (Some("stop"), Exit::Purge),
            (Some("start"), Exit::Purge),
            (None, Exit::Purge),
        ];
        for (job, want) in rows {
            assert_eq!(exit_for_job(job), want, "job {job:?}");
        }
    }

    #[test]
    fn the_presence_record_names_its_machine() {
        let text = PresenceRecord { machine_id: "m1".into(), lease: 0x1234 }.encode();
        assert_eq!(PresenceRecord::lease_for(text.as_bytes(), "m1"), Some(0x1234));
        assert_eq!(PresenceRecord::lease_for(text.as_bytes(), "m2"), None);
        assert_eq!(PresenceRecord::lease_for(b"{\"machine_id\":", "m1"), None);
    }
}

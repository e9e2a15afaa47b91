//! `--output=json` (issue 17): the machine-readable documents of list-machines, list-units, list-unit-files, cat,
//! status, history and rollout-status. This module owns their schema (documented in docs/json.md): field names are
//! the fleet API's where the API has the field (camelCase), every field is always present (empty string, `null` or
//! empty list rather than omitted), hashes are always the full 40 hex digits, and lists are sorted like the tables.
//! The default (`--output=text`) output is untouched by any of this.

use std::collections::BTreeMap;

use serde::Serialize;

use super::context::Ctx;
use super::stored::{stored_unit_file, unit_is_global};
use fleet_core::schema::{Machine, Rollout, Unit, UnitHistory, UnitState};

/// Commands that accept `--output` (hidden from help so help stays the original's byte for byte).
pub const JSON_COMMANDS: [&str; 7] =
    ["cat", "history", "list-machines", "list-unit-files", "list-units", "rollout-status", "status"];

/// What `--output` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// The format `--output` names, or the error to print.
pub fn parse_format(value: &str) -> Result<Format, String> {
    match value {
        "" | "text" => Ok(Format::Text),
        "json" => Ok(Format::Json),
        other => Err(format!("Invalid --output {other:?}: valid values are \"text\" and \"json\"")),
    }
}

/// The command's `--output`, printing the error (and giving `None`) when it is not a known format.
pub fn format(ctx: &mut Ctx<'_>) -> Option<Format> {
    match parse_format(ctx.flags.str("output")) {
        Ok(f) => Some(f),
        Err(e) => {
            ctx.warn(&e);
            None
        }
    }
}

/// Print `doc` as pretty JSON plus a newline.
pub fn print<T: Serialize>(ctx: &mut Ctx<'_>, doc: &T) {
    let text = to_text(doc);
    let _ = ctx.out.write_all(text.as_bytes());
}

/// `doc` as pretty JSON plus a newline (what [`print`] writes).
pub fn to_text<T: Serialize>(doc: &T) -> String {
    // Serialising these plain structs cannot fail (string keys, no non-finite floats).
    let mut text = serde_json::to_string_pretty(doc).unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    text.push('\n');
    text
}

/// `list-machines --output=json`.
#[derive(Debug, Serialize, PartialEq)]
pub struct MachineList {
    pub machines: Vec<MachineDoc>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct MachineDoc {
    pub id: String,
    #[serde(rename = "primaryIP")]
    pub primary_ip: String,
    pub metadata: BTreeMap<String, String>,
    /// `ready`, or `cordoned` while the machine takes no new unit (issue 38).
    pub state: String,
}

pub fn machine_list(machines: &[Machine]) -> MachineList {
    MachineList {
        machines: machines
            .iter()
            .map(|m| MachineDoc {
                id: m.id.clone(),
                primary_ip: m.primary_ip.clone(),
                metadata: m.metadata.clone(),
                state: m.state().to_string(),
            })
            .collect(),
    }
}

/// `list-units --output=json`: one entry per unit and machine reporting it.
#[derive(Debug, Serialize, PartialEq)]
pub struct UnitStateList {
    pub states: Vec<UnitStateDoc>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct UnitStateDoc {
    pub name: String,
    #[serde(rename = "machineID")]
    pub machine_id: String,
    /// The machine's primary IP, empty when the machine is not in the cluster's machine list.
    #[serde(rename = "machineIP")]
    pub machine_ip: String,
    #[serde(rename = "systemdLoadState")]
    pub load: String,
    #[serde(rename = "systemdActiveState")]
    pub active: String,
    #[serde(rename = "systemdSubState")]
    pub sub: String,
    /// Full hash of the unit file the machine holds (empty if it reported none).
    pub hash: String,
    /// Full hash of the version whose process runs (empty when not started); differs from `hash` after a replace
    /// with `--no-restart`.
    #[serde(rename = "runningHash")]
    pub running_hash: String,
    /// `in-doubt` for a unit scheduled to a machine whose presence is gone (its state unknown), else `present`.
    #[serde(rename = "machinePresence")]
    pub machine_presence: String,
    /// The unit's health check on the machine (`status`, `sinceMs`, `output`); `null` for a unit without one.
    pub health: Option<HealthDoc>,
}

/// A unit's health on one machine, as `list-units --output=json` shows it (every field present).
#[derive(Debug, Serialize, PartialEq)]
pub struct HealthDoc {
    pub status: fleet_core::model::HealthStatus,
    #[serde(rename = "sinceMs")]
    pub since_ms: u64,
    pub output: String,
}

fn ip_of(machine_id: &str, machines: &[Machine]) -> String {
    machines.iter().find(|m| m.id == machine_id).map(|m| m.primary_ip.clone()).unwrap_or_default()
}

pub fn unit_state_list(states: &[UnitState], machines: &[Machine]) -> UnitStateList {
    UnitStateList {
        states: states
            .iter()
            .map(|s| UnitStateDoc {
                name: s.name.clone(),
                machine_id: s.machine_id.clone(),
                machine_ip: ip_of(&s.machine_id, machines),
                load: s.systemd_load_state.clone(),
                active: s.systemd_active_state.clone(),
                sub: s.systemd_sub_state.clone(),
                hash: s.hash.clone(),
                running_hash: s.running_hash.clone(),
                machine_presence: s.presence().to_string(),
                health: s.health.as_ref().map(|h| HealthDoc {
                    status: h.status,
                    since_ms: h.since_ms,
                    output: h.output.clone(),
                }),
            })
            .collect(),
    }
}

/// `list-unit-files --output=json`.
#[derive(Debug, Serialize, PartialEq)]
pub struct UnitFileList {
    pub units: Vec<UnitFileDoc>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct UnitFileDoc {
    pub name: String,
    /// Full hash of the stored unit file.
    pub hash: String,
    /// The unit's `Description=`, empty when it has none.
    pub description: String,
    pub global: bool,
    #[serde(rename = "desiredState")]
    pub desired_state: String,
    /// `inactive`, `loaded` or `launched`; `null` for a global unit (it has a state per machine: see list-units).
    #[serde(rename = "currentState")]
    pub current_state: Option<String>,
    /// The machine the unit is scheduled to; `null` when global or not scheduled.
    #[serde(rename = "machineID")]
    pub machine_id: Option<String>,
    /// That machine's primary IP, `null` when there is no machine or it is not in the machine list.
    #[serde(rename = "machineIP")]
    pub machine_ip: Option<String>,
}

pub fn unit_file_list(units: &[Unit], machines: &[Machine]) -> UnitFileList {
    UnitFileList {
        units: units
            .iter()
            .map(|u| {
                let global = unit_is_global(u);
                let file = stored_unit_file(u);
                let machine_id = (!global && !u.machine_id.is_empty()).then(|| u.machine_id.clone());
                let machine_ip = machine_id.as_deref().map(|m| ip_of(m, machines)).filter(|ip| !ip.is_empty());
                UnitFileDoc {
                    name: u.name.clone(),
                    hash: file.hash().to_hex(),
                    description: file.description().to_string(),
                    global,
                    desired_state: u.desired_state.clone(),
                    current_state: (!global).then(|| u.current_state.clone()),
                    machine_id,
                    machine_ip,
                }
            })
            .collect(),
    }
}

/// `cat --output=json`.
#[derive(Debug, Serialize, PartialEq)]
pub struct UnitFileContent {
    pub name: String,
    pub hash: String,
    /// Exactly what `cat` prints as text.
    pub content: String,
}

pub fn unit_file_content(u: &Unit) -> UnitFileContent {
    let file = stored_unit_file(u);
    UnitFileContent { name: u.name.clone(), hash: file.hash().to_hex(), content: file.canonical() }
}

/// `status --output=json`: systemd's properties of each unit on each machine it runs on (`systemctl show`).
#[derive(Debug, Serialize, PartialEq)]
pub struct StatusList {
    pub statuses: Vec<StatusDoc>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct StatusDoc {
    pub name: String,
    #[serde(rename = "machineID")]
    pub machine_id: String,
    /// `systemctl show` output: property name → value, as systemd prints them.
    pub properties: BTreeMap<String, String>,
}

/// `systemctl show`'s `Key=Value` lines as a map (a value may itself contain `=`; lines without one are skipped).
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    text.lines().filter_map(|line| line.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// `history --output=json`.
#[derive(Debug, Serialize, PartialEq)]
pub struct HistoryDoc {
    pub name: String,
    /// Newest (current) first.
    pub versions: Vec<VersionDoc>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct VersionDoc {
    pub hash: String,
    /// When it was stored, Unix milliseconds; `null` for versions stored before history was kept.
    #[serde(rename = "storedMs")]
    pub stored_ms: Option<u64>,
    pub current: bool,
    /// Whether the version's unit file is still stored (rollback can return to it).
    #[serde(rename = "hasFile")]
    pub has_file: bool,
    /// Who stored it (`name (via)`, from the audit trail); `null` once its record is gone.
    pub by: Option<String>,
}

pub fn history_doc(name: &str, history: &UnitHistory) -> HistoryDoc {
    HistoryDoc {
        name: name.to_string(),
        versions: history
            .versions
            .iter()
            .map(|v| VersionDoc {
                hash: v.hash.clone(),
                stored_ms: (v.stored_ms != 0).then_some(v.stored_ms),
                current: v.current,
                has_file: !v.options.is_empty(),
                by: v.by.clone(),
            })
            .collect(),
    }
}

/// `audit --output=json`: the records, oldest first, every field present (`error` `null` for a success).
#[derive(Debug, Serialize, PartialEq)]
pub struct AuditDoc {
    pub records: Vec<AuditRecordDoc>,
    /// More records matched than `--limit`: the oldest are left out.
    pub truncated: bool,
    /// Stored records that do not decode, each naming its key.
    pub errors: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct AuditRecordDoc {
    #[serde(rename = "atMs")]
    pub at_ms: u64,
    pub who: fleet_core::audit::Who,
    pub method: String,
    pub path: String,
    pub action: String,
    pub units: Vec<String>,
    pub status: u16,
    pub error: Option<String>,
}

pub fn audit_doc(list: &fleet_core::audit::AuditList) -> AuditDoc {
    AuditDoc {
        records: list
            .records
            .iter()
            .map(|r| AuditRecordDoc {
                at_ms: r.at_ms,
                who: r.who.clone(),
                method: r.method.clone(),
                path: r.path.clone(),
                action: r.action.clone(),
                units: r.units.clone(),
                status: r.status,
                error: r.error.clone(),
            })
            .collect(),
        truncated: list.truncated,
        errors: list.errors.clone(),
    }
}

/// `rollout-status --output=json`: the rollout as the API shows it (`GET /fleet/v1/rollouts/<id>`, docs/rollouts.md)
/// with `reason` always present.
#[derive(Debug, Serialize, PartialEq)]
pub struct RolloutDoc {
    #[serde(flatten)]
    pub rollout: Rollout,
    /// Why it paused, rolled back or was aborted; empty otherwise.
    pub reason: String,
}

pub fn rollout_doc(rollout: &Rollout) -> RolloutDoc {
    RolloutDoc { rollout: Rollout { reason: String::new(), ..rollout.clone() }, reason: rollout.reason.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_json_command_accepts_the_hidden_output_flag() {
        for name in JSON_COMMANDS {
            let spec = crate::cli::commands::command(name).unwrap();
            assert!(spec.flags.iter().any(|f| f.name == "output" && f.hidden), "{name}");
        }
    }
}

//! Value formats stored in etcd: JSON records and plain values, encoded and decoded in one place.
//!
//! Records are versioned implicitly by `P/version`; decoders ignore unknown fields so a newer minor layout can add
//! fields without breaking older readers.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::keys::{Component, check_component};
use crate::model::{JobState, MachineState, PublishedState};

/// `P/units/<name>/object`: which body the unit is, and which it was before its last replacement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitObject {
    pub name: Arc<str>,
    /// 40-hex SHA-1 of the canonical text in `P/bodies/<hash>`.
    pub hash: Arc<str>,
    /// Hash before the last replacement; its body is kept (not garbage-collected) so a rollback can use it.
    #[serde(rename = "previousHash", default, skip_serializing_if = "Option::is_none")]
    pub previous_hash: Option<Arc<str>>,
    /// This version was stored "without restart": machines that hold an earlier version write the new file and
    /// reload systemd, but keep a running unit's process (`--no-restart`).
    #[serde(rename = "noRestart", default, skip_serializing_if = "std::ops::Not::not")]
    pub no_restart: bool,
    /// The unit's versions, newest (the current one) first, at most [`HISTORY_LEN`]; their bodies are kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Version>,
    /// Layout 2: the desired state, folded in (layout 1 keeps it in `P/units/<name>/desired`, which wins when both
    /// are there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<JobState>,
}

/// How many versions of a unit [`UnitObject::history`] keeps.
pub const HISTORY_LEN: usize = 10;

/// One stored version of a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub hash: Arc<str>,
    /// When it was stored (Unix ms; 0 when not known, for versions stored before history was kept).
    #[serde(rename = "storedMs", default)]
    pub stored_ms: u64,
}

impl UnitObject {
    /// Replaces the name and hashes by their shared copies.
    pub(super) fn share_texts(&mut self, texts: &mut super::interner::Interner) {
        texts.share_in_place(&mut self.name);
        texts.share_in_place(&mut self.hash);
        if let Some(previous) = &mut self.previous_hash {
            texts.share_in_place(previous);
        }
        for version in &mut self.history {
            texts.share_in_place(&mut version.hash);
        }
    }

    /// The object that stores version `hash` of unit `name` after `old` (`None`: a new unit): `old`'s hash becomes
    /// the previous one, the history gains the new version at its front, and `old`'s desired state (layout 2) stays.
    pub fn next(old: Option<&UnitObject>, name: &str, hash: &str, no_restart: bool, now_ms: u64) -> UnitObject {
        let mut history = vec![Version { hash: hash.into(), stored_ms: now_ms }];
        if let Some(old) = old {
            if old.history.is_empty() {
                history.push(Version { hash: old.hash.clone(), stored_ms: 0 });
            }
            history.extend(old.history.iter().cloned());
        }
        history.truncate(HISTORY_LEN);
        UnitObject {
            name: name.into(),
            hash: hash.into(),
            previous_hash: old.map(|o| o.hash.clone()),
            no_restart,
            history,
            // Layout 2 keeps the desired state in the object: a new version (a replace, a rollout, its rollback)
            // changes what runs, not whether it runs.
            desired: old.and_then(|o| o.desired),
        }
    }
}

/// `P/machines/<machine>/schedule/<name>` (layout 2): what `<machine>` must run of unit `<name>`, written by the
/// engine leader. For a scheduled unit the entry is its placement (layout 1's `target`), present for as long as the
/// unit is scheduled there; a global unit (`global`) has one on every machine (`scheduler::entries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleEntry {
    /// The version the machine must run: the object's, or the one a replace rollout keeps there.
    pub hash: Arc<str>,
    pub desired: JobState,
    /// The restart rollout that asks the machine to restart the unit once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Arc<str>>,
    /// The version was stored without restart (as [`UnitObject::no_restart`]).
    #[serde(rename = "noRestart", default, skip_serializing_if = "std::ops::Not::not")]
    pub no_restart: bool,
    /// An entry for a global unit (a pin or a restart), not a placement.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global: bool,
}

impl ScheduleEntry {
    pub(super) fn share_texts(&mut self, texts: &mut super::interner::Interner) {
        texts.share_in_place(&mut self.hash);
        if let Some(restart) = &mut self.restart {
            texts.share_in_place(restart);
        }
    }
}

/// `P/states/<name>/<machine>`: systemd's view of a unit on the publishing machine (name and machine are in the
/// key, so they are not repeated in the value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// Hash of the unit version the machine actually runs.
    pub hash: Arc<str>,
    #[serde(rename = "loadState")]
    pub load_state: Arc<str>,
    #[serde(rename = "activeState")]
    pub active_state: Arc<str>,
    #[serde(rename = "subState")]
    pub sub_state: Arc<str>,
    /// Extension: the service's restart counter (`NRestarts`) while it is active or activating; absent otherwise
    /// and from agents that do not publish it (additive: older readers ignore it).
    #[serde(rename = "nRestarts", default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u32>,
    /// Extension: the unit's health check result (units with `HealthCheck=` only; additive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::model::Health>,
    /// Layout 2: the hash of the version the machine last started (its launched marker, folded in; `""` when it
    /// started one it did not know the hash of). Absent: not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched: Option<Arc<str>>,
    /// Layout 2: the rollout the machine last restarted the unit for (its restarted marker, folded in).
    #[serde(rename = "restartedFor", default, skip_serializing_if = "Option::is_none")]
    pub restarted_for: Option<Arc<str>>,
}

impl StateRecord {
    /// Replaces the hash and the state words by their shared copies.
    pub(super) fn share_texts(&mut self, texts: &mut super::interner::Interner) {
        texts.share_in_place(&mut self.hash);
        texts.share_in_place(&mut self.load_state);
        texts.share_in_place(&mut self.active_state);
        texts.share_in_place(&mut self.sub_state);
        for marker in [&mut self.launched, &mut self.restarted_for].into_iter().flatten() {
            texts.share_in_place(marker);
        }
    }

    pub fn from_state(s: &PublishedState) -> StateRecord {
        StateRecord {
            hash: s.hash.as_str().into(),
            load_state: s.load_state.as_str().into(),
            active_state: s.active_state.as_str().into(),
            sub_state: s.sub_state.as_str().into(),
            restarts: s.restarts,
            health: s.health.clone(),
            launched: s.launched.as_deref().map(Into::into),
            restarted_for: None,
        }
    }

    pub fn into_state(self, unit: &str, machine: &str) -> PublishedState {
        PublishedState {
            name: unit.to_string(),
            machine_id: machine.to_string(),
            hash: self.hash.to_string(),
            load_state: self.load_state.to_string(),
            active_state: self.active_state.to_string(),
            sub_state: self.sub_state.to_string(),
            restarts: self.restarts,
            health: self.health,
            launched: self.launched.map(|h| h.to_string()),
        }
    }
}

/// `P/machines/<id>/object`: what a machine publishes about itself (static metadata only; dynamic metadata lives
/// in separate keys and is merged on read, §3.3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MachineObject {
    pub id: String,
    #[serde(rename = "publicIP", default)]
    pub public_ip: String,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub version: String,
    #[serde(rename = "disableEngine", default)]
    pub disable_engine: bool,
    /// The registry layouts the machine's fleetd can run (issue 35); absent: layout 1 only. The engine switches
    /// a cluster to layout 2 only once every present machine lists it (`layout::ready_for_layout_2`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<u32>,
}

impl MachineObject {
    pub fn from_state(m: &MachineState) -> MachineObject {
        MachineObject {
            id: m.id.clone(),
            public_ip: m.public_ip.clone(),
            metadata: m.metadata.clone(),
            version: m.version.clone(),
            disable_engine: m.disable_engine,
            layouts: Vec::new(),
        }
    }

    /// The published state: this object's metadata overlaid with dynamic metadata, where an empty dynamic value
    /// removes the key (spec §3.3).
    pub fn merged(&self, dynamic: &BTreeMap<String, String>) -> MachineState {
        let mut metadata = self.metadata.clone();
        for (k, v) in dynamic {
            if v.is_empty() {
                metadata.remove(k);
            } else {
                metadata.insert(k.clone(), v.clone());
            }
        }
        MachineState {
            id: self.id.clone(),
            public_ip: self.public_ip.clone(),
            metadata,
            version: self.version.clone(),
            disable_engine: self.disable_engine,
            cordoned: false,
            load_fault: None,
        }
    }
}

/// `P/machines/<id>/cordon`: the machine is cordoned — it takes no new unit; what it runs stays. Not bound to the
/// machine's lease: a cordon outlives a fleetd restart and a reboot, and stays after the machine left for good
/// until it is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Cordon {
    /// When it was cordoned (Unix ms; 0 when not known).
    #[serde(rename = "sinceMs", default)]
    pub since_ms: u64,
}

/// `P/machines/<id>/cordon`: a JSON object ([`Cordon`]); anything else does not decode.
pub fn decode_cordon(key: &str, raw: &[u8]) -> Result<Cordon> {
    decode_json(key, "machine cordon", raw)
}

pub fn encode_json<T: Serialize>(value: &T) -> String {
    // These records hold only strings, bools and string maps: serialisation cannot fail.
    serde_json::to_string(value).expect("registry records always serialise")
}

pub fn decode_json<T: for<'de> Deserialize<'de>>(key: &str, what: &'static str, raw: &[u8]) -> Result<T> {
    serde_json::from_slice(raw).map_err(|e| decode_error(key, what, e.to_string(), raw))
}

pub fn decode_text(key: &str, what: &'static str, raw: &[u8]) -> Result<String> {
    std::str::from_utf8(raw).map(str::to_string).map_err(|e| decode_error(key, what, e.to_string(), raw))
}

pub fn decode_job_state(key: &str, raw: &[u8]) -> Result<JobState> {
    let text = decode_text(key, "desired state", raw)?;
    text.parse().map_err(|e: crate::model::InvalidJobState| decode_error(key, "desired state", e.to_string(), raw))
}

pub fn decode_u32(key: &str, what: &'static str, raw: &[u8]) -> Result<u32> {
    let text = decode_text(key, what, raw)?;
    text.trim().parse().map_err(|e: std::num::ParseIntError| decode_error(key, what, e.to_string(), raw))
}

/// A value naming a machine (a unit's `target`, the engine leader): text that can be a machine ID.
pub fn decode_machine_id(key: &str, what: &'static str, raw: &[u8]) -> Result<String> {
    let text = decode_text(key, what, raw)?;
    check_component(Component::MachineId, &text).map_err(|e| decode_error(key, what, e.to_string(), raw))?;
    Ok(text)
}

/// `P/machines/<id>/object`: a presence record of machine `id`, bound to `lease`. A presence is always bound to
/// its machine's lease and names the machine of its key; anything else is not a machine (written by hand or by a
/// hostile client), and would otherwise attract units that never run.
pub fn decode_machine_object(key: &str, id: &str, raw: &[u8], lease: i64) -> Result<MachineObject> {
    const WHAT: &str = "machine object";
    let object: MachineObject = decode_json(key, WHAT, raw)?;
    if object.id != id {
        return Err(decode_error(
            key,
            WHAT,
            format!("its id {:?} is not the key's machine ID", shown(object.id.as_bytes())),
            raw,
        ));
    }
    if lease == 0 {
        return Err(decode_error(key, WHAT, "not bound to a lease (a machine's presence always is)".into(), raw));
    }
    Ok(object)
}

/// `P/rollouts/<id>/spec`: a spec is the rollout of its key, and names units and versions that keys can hold
/// (the engine writes them back in a rollback).
pub fn decode_rollout_spec(key: &str, id: &str, raw: &[u8]) -> Result<crate::rollout::RolloutSpec> {
    const WHAT: &str = "rollout spec";
    let spec: crate::rollout::RolloutSpec = decode_json(key, WHAT, raw)?;
    let invalid = |reason: String| decode_error(key, WHAT, reason, raw);
    if spec.id != id {
        return Err(invalid(format!("its id {:?} is not the key's rollout ID", shown(spec.id.as_bytes()))));
    }
    for unit in &spec.units {
        check_component(Component::UnitName, &unit.name).map_err(|e| invalid(e.to_string()))?;
        check_component(Component::Hash, &unit.from).map_err(|e| invalid(e.to_string()))?;
        check_component(Component::Hash, &unit.to).map_err(|e| invalid(e.to_string()))?;
    }
    Ok(spec)
}

/// `P/rollouts/<id>/progress`: its steps name units and machines that keys can hold (a rebalance step's move is
/// written back as the unit's target).
pub fn decode_rollout_progress(key: &str, raw: &[u8]) -> Result<crate::rollout::RolloutProgress> {
    const WHAT: &str = "rollout progress";
    let progress: crate::rollout::RolloutProgress = decode_json(key, WHAT, raw)?;
    for step in progress.steps.iter().chain(&progress.undo) {
        let checks = [
            check_component(Component::UnitName, &step.unit),
            check_component(Component::MachineId, &step.machine),
            if step.from_machine.is_empty() {
                Ok(())
            } else {
                check_component(Component::MachineId, &step.from_machine)
            },
        ];
        if let Some(e) = checks.into_iter().find_map(std::result::Result::err) {
            return Err(decode_error(key, WHAT, e.to_string(), raw));
        }
    }
    Ok(progress)
}

/// A stored value that does not decode: which key, what it should have been, why not, and (the start of) the value.
/// An error for that one record, never for the reader that met it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: cannot decode {what}: {reason} (value {value:?})")]
pub struct DecodeError {
    pub key: String,
    pub what: &'static str,
    pub reason: String,
    pub value: String,
}

type Result<T, E = DecodeError> = std::result::Result<T, E>;

pub fn decode_error(key: &str, what: &'static str, reason: String, raw: &[u8]) -> DecodeError {
    // The reason may quote the value (`invalid value "…" for JobState`): it is cut as the value is.
    DecodeError { key: shown(key.as_bytes()), what, reason: shown(reason.as_bytes()), value: shown(raw) }
}

/// How much of a stored key or value a log line or an error shows.
pub const SHOWN_MAX: usize = 200;

/// A stored key or value as log lines and errors show it: its first [`SHOWN_MAX`] bytes (invalid UTF-8 replaced),
/// then `…` when there is more. A hostile client may store a megabyte; no log line carries it.
pub fn shown(raw: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(&raw[..raw.len().min(SHOWN_MAX)]).into_owned();
    if raw.len() > SHOWN_MAX {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {

    /// Layout 2 keeps the desired state in the object: a new version (a replace, a rollout, its rollback) keeps it.
    #[test]
    fn a_new_version_keeps_the_desired_state_in_the_object() {
        let first = UnitObject::next(None, "a.service", "h1", false, 1);
        assert_eq!(first.desired, None);
        let launched = UnitObject { desired: Some(JobState::Launched), ..first };
        assert_eq!(UnitObject::next(Some(&launched), "a.service", "h2", false, 2).desired, Some(JobState::Launched));
    }
    use super::*;

    /// Layout 2's records as keys.rs documents them: absent fields are left out, so a layout-1 reader of the same
    /// object or state sees nothing new.
    #[test]
    fn layout_2_records_are_spelled_as_documented() {
        let e = ScheduleEntry {
            hash: "ab".into(),
            desired: JobState::Launched,
            restart: None,
            no_restart: false,
            global: false,
        };
        assert_eq!(encode_json(&e), r#"{"hash":"ab","desired":"launched"}"#);
        let e = ScheduleEntry { restart: Some("r1".into()), no_restart: true, global: true, ..e };
        assert_eq!(
            encode_json(&e),
            r#"{"hash":"ab","desired":"launched","restart":"r1","noRestart":true,"global":true}"#
        );
        assert_eq!(decode_json::<ScheduleEntry>("k", "schedule entry", encode_json(&e).as_bytes()).unwrap(), e);
        let err = decode_json::<ScheduleEntry>("k", "schedule entry", br#"{"hash":"ab","desired":"running"}"#);
        assert!(err.unwrap_err().to_string().contains("invalid value \"running\" for JobState"));
        let o = UnitObject::next(None, "a.service", "ab", false, 0);
        assert!(!encode_json(&o).contains("desired"), "layout 1 objects unchanged");
        let o = UnitObject { desired: Some(JobState::Loaded), ..o };
        assert!(encode_json(&o).ends_with(r#","desired":"loaded"}"#), "{}", encode_json(&o));
    }

    #[test]
    fn unit_object_round_trips_and_omits_missing_previous_hash() {
        let o = UnitObject {
            name: "a.service".into(),
            hash: "ab".into(),
            previous_hash: None,
            no_restart: false,
            history: Vec::new(),
            desired: None,
        };
        assert_eq!(encode_json(&o), r#"{"name":"a.service","hash":"ab"}"#);
        assert_eq!(decode_json::<UnitObject>("k", "unit object", encode_json(&o).as_bytes()).unwrap(), o);
        let o = UnitObject { previous_hash: Some("cd".into()), ..o };
        assert_eq!(encode_json(&o), r#"{"name":"a.service","hash":"ab","previousHash":"cd"}"#);
        assert_eq!(decode_json::<UnitObject>("k", "unit object", encode_json(&o).as_bytes()).unwrap(), o);
        let o = UnitObject { no_restart: true, ..o };
        assert_eq!(encode_json(&o), r#"{"name":"a.service","hash":"ab","previousHash":"cd","noRestart":true}"#);
        assert_eq!(decode_json::<UnitObject>("k", "unit object", encode_json(&o).as_bytes()).unwrap(), o);
    }

    #[test]
    fn history_keeps_the_newest_versions_first_and_seeds_from_objects_without_one() {
        let legacy = UnitObject { history: Vec::new(), ..UnitObject::next(None, "a.service", "h0", false, 5) };
        let mut o = UnitObject::next(Some(&legacy), "a.service", "h1", true, 10);
        assert_eq!((&*o.hash, o.previous_hash.as_deref(), o.no_restart), ("h1", Some("h0"), true));
        assert_eq!(
            o.history,
            [Version { hash: "h1".into(), stored_ms: 10 }, Version { hash: "h0".into(), stored_ms: 0 }]
        );
        for i in 2..20 {
            o = UnitObject::next(Some(&o), "a.service", &format!("h{i}"), false, 10 * i);
        }
        assert_eq!(o.history.len(), HISTORY_LEN);
        assert_eq!(&*o.history[0].hash, "h19");
        assert_eq!(&*o.history[HISTORY_LEN - 1].hash, "h10");
        let json = encode_json(&UnitObject::next(None, "b.service", "h", false, 7));
        assert_eq!(json, r#"{"name":"b.service","hash":"h","history":[{"hash":"h","storedMs":7}]}"#);
    }

    #[test]
    fn decoders_ignore_unknown_fields() {
        let raw = br#"{"name":"a","hash":"h","future":1}"#;
        assert_eq!(&*decode_json::<UnitObject>("k", "unit object", raw).unwrap().hash, "h");
    }

    #[test]
    fn decode_errors_name_the_key_and_value() {
        let err = decode_json::<UnitObject>("/p/units/a/object", "unit object", b"nope").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("/p/units/a/object: cannot decode unit object: "), "{msg}");
        assert!(msg.ends_with("(value \"nope\")"), "{msg}");
        let err = decode_job_state("/p/units/a/desired", b"running").unwrap_err();
        assert_eq!(
            err.to_string(),
            "/p/units/a/desired: cannot decode desired state: invalid value \"running\" for JobState (value \"running\")"
        );
        assert_eq!(decode_job_state("k", b"launched").unwrap(), JobState::Launched);
        assert_eq!(decode_u32("k", "version", b"12").unwrap(), 12);
    }

    #[test]
    fn state_record_maps_to_model_with_name_and_machine_from_key() {
        let raw = br#"{"hash":"h","loadState":"loaded","activeState":"active","subState":"running"}"#;
        let rec: StateRecord = decode_json("k", "unit state", raw).unwrap();
        let s = rec.clone().into_state("a.service", "m1");
        assert_eq!((s.name.as_str(), s.machine_id.as_str(), s.sub_state.as_str()), ("a.service", "m1", "running"));
        assert_eq!(StateRecord::from_state(&s), rec);
    }

    #[test]
    fn a_cordon_is_json_and_anything_else_does_not_decode() {
        let c = Cordon { since_ms: 7 };
        assert_eq!(encode_json(&c), r#"{"sinceMs":7}"#);
        assert_eq!(decode_cordon("k", br#"{"sinceMs":7}"#).unwrap(), c);
        assert_eq!(decode_cordon("k", b"{}").unwrap(), Cordon::default(), "an empty object is a cordon since unknown");
        assert_eq!(decode_cordon("k", br#"{"sinceMs":7,"by":"ops"}"#).unwrap(), c, "unknown fields are ignored");
        for bad in [&b"yes"[..], b"", b"7", br#"{"sinceMs":"soon"}"#, b"\xff"] {
            let err = decode_cordon("/p/machines/m1/cordon", bad).unwrap_err();
            assert!(err.to_string().starts_with("/p/machines/m1/cordon: cannot decode machine cordon: "), "{err}");
        }
    }

    #[test]
    fn dynamic_metadata_overrides_and_empty_value_hides_static_key() {
        let obj = MachineObject {
            id: "m1".into(),
            metadata: [("role".to_string(), "web".to_string()), ("dc".to_string(), "x".to_string())].into(),
            ..Default::default()
        };
        let dynamic = [("role".to_string(), "db".to_string()), ("dc".to_string(), String::new())].into();
        let merged = obj.merged(&dynamic);
        assert_eq!(merged.metadata, [("role".to_string(), "db".to_string())].into());
        assert_eq!(merged.id, "m1");
        let raw = encode_json(&obj);
        assert_eq!(decode_json::<MachineObject>("k", "machine", raw.as_bytes()).unwrap(), obj);
    }
}

//! The registry's etcd v3 key layout: the ONE place that spells a key (building and parsing).
//!
//! `P` is the configured prefix (`etcd_key_prefix`, default `/_coreos.com/fleet/`), normalised to start and end
//! with exactly one `/`. Every key fleet reads or writes lives under `P`; one prefix range GET plus one prefix
//! watch therefore sees the whole cluster state.
//!
//! | Key | Value | Lease | Writer | Readers |
//! |---|---|---|---|---|
//! | `P/version` | layout version, decimal (`1`) | — | first fleetd (create-if-absent) | every fleetd at start; refuses a newer layout |
//! | `P/units/<name>/object` | JSON `{"name","hash","previousHash"?}` (40-hex SHA-1s of canonical text) | — | API / fleetctl etcd driver (create, replace) | all |
//! | `P/units/<name>/desired` | `inactive` \| `loaded` \| `launched` | — | API / fleetctl (create, replace, set desired) | engine, agents, API |
//! | `P/units/<name>/target` | machine ID (schedule decision) | — | engine leader: create-if-absent / delete-if-still-M | agents, API |
//! | `P/units/<name>/launched/<machine>` | hash the machine started (may be empty) | that machine's lease | agent of `<machine>` | API, engine (current state §7.2) |
//! | `P/bodies/<hash>` | canonical unit text (raw, not JSON) | — | create/replace (re-put in the same txn as the object); body GC deletes | agents, API |
//! | `P/states/<name>/<machine>` | JSON `{"hash","loadState","activeState","subState"}` | that machine's lease | agent of `<machine>` | API, fleetctl |
//! | `P/machines/<id>/object` | JSON `{"id","publicIP","metadata","version","disableEngine"}` | that machine's lease | fleetd of `<id>` (create-if-absent) | all |
//! | `P/machines/<id>/metadata/<key>` | plain string; `""` is a tombstone hiding a config key (§3.3) | — | API `PATCH /machines` | all |
//! | `P/machines/<id>/cordon` | JSON `{"sinceMs"}` (`records::Cordon`): the machine takes no new unit | — | API `PUT`/`DELETE /machines/<id>/cordon` | engine, agents, API |
//! | `P/machines/<id>/load-fault` | JSON `model::LoadFault` `{"reason","sinceMs","units"}`: unit files cannot be written there; it takes no new unit | that machine's lease | agent of `<id>` (put when a write fails, deleted once a probe write succeeds) | engine, agents, API |
//! | `P/machines/<id>/global-units` | JSON `model::GlobalUnits` `{"units"}`: the global units the machine should run (a load fault does not take them off), remembered for `rollout::REMEMBER_DEPARTED` after it leaves | that machine's memory lease (TTL `REMEMBER_DEPARTED`, kept alive by its fleetd) | agent of `<id>` (put when the set changes) | engine (rollout budgets) |
//! | `P/engine/leader` | machine ID of the engine leader | engine lease (`5×EIV`) | engine (create-if-absent; resign = delete-if-ours) | engines, API |
//! | `P/engine/version` | cluster engine version, decimal | — | engine (check-and-set) | engines |
//! | `P/units/<name>/restarted/<machine>` | ID of the rollout the machine last restarted the unit for | that machine's lease | agent of `<machine>` | engine |
//! | `P/rollouts/<id>/spec` | JSON `rollout::RolloutSpec` | — | API (create-if-absent, with the new unit versions in the same txn) | all |
//! | `P/rollouts/<id>/control` | JSON `rollout::Control` | — | API (pause / resume / abort) | engine, API |
//! | `P/rollouts/<id>/progress` | JSON `rollout::RolloutProgress` | — | engine leader (CAS on its mod revision, fenced to the leader key) | all |
//! | `P/machines/<id>/schedule/<name>` | JSON `records::ScheduleEntry` `{"hash","desired","restart"?,"noRestart"?,"global"?}`: what machine `<id>` must run of the unit (layout 2, see below) | — | engine leader (fenced); API deletes a unit's placements with its destroy or reschedule | the agent of `<id>`, engine, API |
//! | `P/machines/<id>/drained` | JSON `model::GlobalUnits` `{"units"}`: the units a drain keeps stopped there (layout 2) | — | engine leader | the agent of `<id>` |
//! | `P/audit/<ms>-<suffix>` | JSON `audit::AuditRecord`: one write request; `<ms>` 20 zero-padded digits, so keys sort by time | — | API (after answering a write) / fleetctl etcd driver (create-if-absent); engine leader trims (fenced range deletes) | API `GET /audit`, fleetctl (read on demand; not in the snapshot) |
//!
//! Why this shape (differences from the original v2 layout, spec §3):
//! * Presence, unit states and launched markers are bound to the publishing machine's **lease** instead of TTL
//!   rewrites: an idle cluster costs one keep-alive per machine, and everything a machine published vanishes with
//!   it. Every lease-bound key has exactly one writer (its machine), so no machine can delete another's (B7).
//! * Launched markers are per machine (`launched/<machine>`), so global units running on many machines do not
//!   fight over one key; current state checks the marker of the target machine only.
//! * Bodies are content-addressed and garbage-collected (L9). The object keeps `previousHash` so a rollback can
//!   find the previous body, which GC keeps alive while it is referenced.
//! * A cordon is not bound to the machine's lease (it outlives a fleetd restart and a reboot, like dynamic metadata);
//!   the cordon of a machine that left for good stays until it is deleted (`fleetctl uncordon <full ID>`), and
//!   holds again if a machine with that ID comes back.
//! * Audit records are not cluster state: the snapshot skips them (every fleetd would otherwise hold up to
//!   `audit_max_records` of them in memory), and readers range-read `P/audit/` when asked. Their time-ordered
//!   names make trimming one range delete, by age or by count.
//! * Unit names, machine IDs, hashes and metadata keys never contain `/` (checked here), so every key parses
//!   unambiguously and `P/units/<name>/` is exactly one unit's range.
//! * All writers use transactions where two writers could race (see the operation modules).
//!
//! **Layout 2** (issue 35; docs/lab/scoped-views.md; the engine switches a cluster to it once every fleetd runs it):
//! everything a machine's agent needs lies under `P/machines/<id>/`, so it watches that one prefix instead of
//! everything (its own states and markers, bound to its lease, it reads by the lease's key list and then follows
//! from its own writes; a non-leading engine watches `P/engine/` alone). A scheduled unit's `target` becomes the entry `P/machines/<id>/schedule/<name>`, which carries the
//! version and desired state that machine must run (a rollout's pin and restart token already applied by the
//! engine); every global unit has an entry (`"global":true`) on every present machine, whose agent decides, as
//! today, whether the machine takes it; the desired state moves into the unit object (`"desired"`); the launched
//! marker moves into the state record (`"launched"`: agents write no marker key, and delete the ones they wrote in
//! layout 1 once their state carries the same hash). Readers take either layout: a `desired` key wins over the
//! object's field, a `target` key over a schedule entry, a launched or restarted marker over the state's field
//! (`"restartedFor"`; agents still write restarted markers as keys).

use std::fmt;

/// Prefix used when `etcd_key_prefix` is not configured.
pub const DEFAULT_PREFIX: &str = "/_coreos.com/fleet/";

/// Layout version a new cluster starts at (value of `P/version`); its engine switches it to layout 2 once every
/// machine runs that (`crate::layout`).
pub const LAYOUT_VERSION: u32 = 1;

/// Builds and parses every registry key for one prefix. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

/// A registry key, parsed back into what it addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    LayoutVersion,
    UnitObject { unit: String },
    UnitDesired { unit: String },
    UnitTarget { unit: String },
    UnitLaunched { unit: String, machine: String },
    Body { hash: String },
    State { unit: String, machine: String },
    MachineObject { machine: String },
    MachineMetadata { machine: String, key: String },
    MachineCordon { machine: String },
    MachineLoadFault { machine: String },
    MachineGlobalUnits { machine: String },
    EngineLeader,
    EngineVersion,
    UnitRestarted { unit: String, machine: String },
    RolloutSpec { id: String },
    RolloutControl { id: String },
    RolloutProgress { id: String },
    AuditRecord { id: String },
    ScheduleEntry { machine: String, unit: String },
    MachineDrained { machine: String },
}

/// What kind of identifier a key component is; used in validation errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    UnitName,
    MachineId,
    Hash,
    MetadataKey,
    RolloutId,
    AuditId,
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Component::UnitName => "unit name",
            Component::MachineId => "machine ID",
            Component::Hash => "unit hash",
            Component::MetadataKey => "metadata key",
            Component::RolloutId => "rollout ID",
            Component::AuditId => "audit record ID",
        })
    }
}

/// Why a string cannot be used as a key component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct InvalidComponent {
    pub what: Component,
    pub value: String,
    pub reason: &'static str,
}

/// The longest unit name, machine ID or metadata key a key holds.
const MAX_COMPONENT: usize = 256;

/// Checks that `value` can be embedded in a key as one path component of kind `what`.
///
/// Semantic validation (unit name syntax, template rules) belongs to the unit module; this only guarantees that
/// keys stay parseable and that one component cannot address another's keys.
pub fn check_component(what: Component, value: &str) -> Result<(), InvalidComponent> {
    let fail = |reason| Err(InvalidComponent { what, value: value.to_string(), reason });
    if value.is_empty() {
        return fail("must not be empty");
    }
    match what {
        Component::Hash => {
            if value.len() != 40 || !value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return fail("expected 40 lowercase hex characters");
            }
        }
        Component::RolloutId => {
            if value.len() > 64 || !value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            {
                return fail("at most 64 of A-Z a-z 0-9 _ . -");
            }
        }
        Component::AuditId => {
            let (ms, suffix) = value.split_once('-').unwrap_or((value, ""));
            if ms.len() != AUDIT_MS_DIGITS || !ms.bytes().all(|b| b.is_ascii_digit()) {
                return fail("expected 20 digits of Unix ms, '-' and a suffix");
            }
            if suffix.is_empty()
                || suffix.len() > 64
                || !suffix.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            {
                return fail("the suffix after the time is 1 to 64 of A-Z a-z 0-9 _ . -");
            }
        }
        Component::MetadataKey => {
            // Same alphabet the API accepts in PATCH paths (spec §8.8).
            if !value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')) {
                return fail("allowed characters are A-Z a-z 0-9 _ . -");
            }
            if value.len() > MAX_COMPONENT {
                return fail("at most 256 bytes");
            }
        }
        Component::UnitName | Component::MachineId => {
            // Unit names are at most 256 bytes (`unit::NAME_MAX`), machine IDs 32 hex digits: a longer one is no
            // name, and would be carried into every log line and write that names it.
            if value.len() > MAX_COMPONENT {
                return fail("at most 256 bytes");
            }
            if value.contains('/') {
                return fail("must not contain '/'");
            }
            if value.chars().any(char::is_control) {
                return fail("must not contain control characters");
            }
        }
    }
    Ok(())
}

/// Digits of the time in an audit record's ID: zero-padded, so IDs sort as their times do.
pub const AUDIT_MS_DIGITS: usize = 20;

/// The ID of the audit record written at `at_ms` by a writer naming itself `suffix` (unique per writer).
pub fn audit_id(at_ms: u64, suffix: &str) -> String {
    format!("{at_ms:0width$}-{suffix}", width = AUDIT_MS_DIGITS)
}

impl Default for Keys {
    fn default() -> Self {
        Keys::new(DEFAULT_PREFIX)
    }
}

impl Keys {
    /// Layout under `prefix`, normalised to exactly one leading and one trailing `/` (duplicate slashes are
    /// collapsed; an empty prefix means the root `/`).
    pub fn new(prefix: &str) -> Keys {
        let parts: Vec<&str> = prefix.split('/').filter(|p| !p.is_empty()).collect();
        let prefix = if parts.is_empty() { "/".to_string() } else { format!("/{}/", parts.join("/")) };
        Keys { prefix }
    }

    /// The normalised prefix, with trailing `/`: the range that holds everything.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, parts: &[&str]) -> String {
        let mut k = self.prefix.clone();
        k.push_str(&parts.join("/"));
        k
    }

    pub fn layout_version(&self) -> String {
        self.key(&["version"])
    }

    /// Range holding every key of one unit (object, desired, target, launched markers); what destroy deletes.
    pub fn unit_dir(&self, unit: &str) -> String {
        self.key(&["units", unit, ""])
    }

    pub fn units_dir(&self) -> String {
        self.key(&["units", ""])
    }

    pub fn unit_object(&self, unit: &str) -> String {
        self.key(&["units", unit, "object"])
    }

    pub fn unit_desired(&self, unit: &str) -> String {
        self.key(&["units", unit, "desired"])
    }

    pub fn unit_target(&self, unit: &str) -> String {
        self.key(&["units", unit, "target"])
    }

    pub fn unit_launched(&self, unit: &str, machine: &str) -> String {
        self.key(&["units", unit, "launched", machine])
    }

    pub fn bodies_dir(&self) -> String {
        self.key(&["bodies", ""])
    }

    pub fn body(&self, hash: &str) -> String {
        self.key(&["bodies", hash])
    }

    pub fn states_dir(&self) -> String {
        self.key(&["states", ""])
    }

    /// Range holding every machine's published state of one unit.
    pub fn unit_states_dir(&self, unit: &str) -> String {
        self.key(&["states", unit, ""])
    }

    pub fn state(&self, unit: &str, machine: &str) -> String {
        self.key(&["states", unit, machine])
    }

    pub fn machines_dir(&self) -> String {
        self.key(&["machines", ""])
    }

    pub fn machine_object(&self, machine: &str) -> String {
        self.key(&["machines", machine, "object"])
    }

    pub fn machine_metadata(&self, machine: &str, key: &str) -> String {
        self.key(&["machines", machine, "metadata", key])
    }

    /// The machine's cordon: present while the machine takes no new unit.
    pub fn machine_cordon(&self, machine: &str) -> String {
        self.key(&["machines", machine, "cordon"])
    }

    /// The machine's load fault: present while its agent cannot write unit files (issue 37).
    pub fn machine_load_fault(&self, machine: &str) -> String {
        self.key(&["machines", machine, "load-fault"])
    }

    /// The global units the machine runs, outliving it by `rollout::REMEMBER_DEPARTED` (issue 37).
    pub fn machine_global_units(&self, machine: &str) -> String {
        self.key(&["machines", machine, "global-units"])
    }

    /// The engine's keys (leader, version): what a non-leading engine watches.
    pub fn engine_dir(&self) -> String {
        self.key(&["engine", ""])
    }

    pub fn engine_leader(&self) -> String {
        self.key(&["engine", "leader"])
    }

    pub fn engine_version(&self) -> String {
        self.key(&["engine", "version"])
    }

    pub fn unit_restarted(&self, unit: &str, machine: &str) -> String {
        self.key(&["units", unit, "restarted", machine])
    }

    pub fn rollouts_dir(&self) -> String {
        self.key(&["rollouts", ""])
    }

    /// Every key of one rollout (spec, control, progress): a prefix.
    pub fn rollout_dir(&self, id: &str) -> String {
        self.key(&["rollouts", id, ""])
    }

    pub fn rollout_spec(&self, id: &str) -> String {
        self.key(&["rollouts", id, "spec"])
    }

    pub fn rollout_control(&self, id: &str) -> String {
        self.key(&["rollouts", id, "control"])
    }

    pub fn rollout_progress(&self, id: &str) -> String {
        self.key(&["rollouts", id, "progress"])
    }

    /// One machine's schedule entries (layout 2).
    pub fn machine_schedule_dir(&self, machine: &str) -> String {
        self.key(&["machines", machine, "schedule", ""])
    }

    pub fn schedule_entry(&self, machine: &str, unit: &str) -> String {
        self.key(&["machines", machine, "schedule", unit])
    }

    /// One machine's own keys (record, metadata, cordon, load fault, drained units, schedule entries): all its agent
    /// watches in layout 2.
    pub fn machine_dir(&self, machine: &str) -> String {
        self.key(&["machines", machine, ""])
    }

    /// The units a drain keeps stopped on the machine (layout 2).
    pub fn machine_drained(&self, machine: &str) -> String {
        self.key(&["machines", machine, "drained"])
    }

    /// Every audit record: a prefix, ordered by time.
    pub fn audit_dir(&self) -> String {
        self.key(&["audit", ""])
    }

    pub fn audit_record(&self, id: &str) -> String {
        self.key(&["audit", id])
    }

    /// The first key a record written at or after `at_ms` can have (records before it sort lower): where a read
    /// "since" starts and where a trim "older than" ends.
    pub fn audit_from(&self, at_ms: u64) -> String {
        self.key(&["audit", &format!("{at_ms:0width$}", width = AUDIT_MS_DIGITS)])
    }

    /// Parses a full key back into what it addresses; `None` for keys outside the prefix or unknown to this
    /// layout version (readers ignore those, so a newer fleet may add keys).
    pub fn parse(&self, key: &[u8]) -> Option<Key> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&self.prefix)?;
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return None;
        }
        let s = |p: &str| p.to_string();
        Some(match parts.as_slice() {
            ["version"] => Key::LayoutVersion,
            ["units", unit, "object"] => Key::UnitObject { unit: s(unit) },
            ["units", unit, "desired"] => Key::UnitDesired { unit: s(unit) },
            ["units", unit, "target"] => Key::UnitTarget { unit: s(unit) },
            ["units", unit, "launched", machine] => Key::UnitLaunched { unit: s(unit), machine: s(machine) },
            ["bodies", hash] => Key::Body { hash: s(hash) },
            ["states", unit, machine] => Key::State { unit: s(unit), machine: s(machine) },
            ["machines", machine, "object"] => Key::MachineObject { machine: s(machine) },
            ["machines", machine, "metadata", key] => Key::MachineMetadata { machine: s(machine), key: s(key) },
            ["machines", machine, "cordon"] => Key::MachineCordon { machine: s(machine) },
            ["machines", machine, "load-fault"] => Key::MachineLoadFault { machine: s(machine) },
            ["machines", machine, "global-units"] => Key::MachineGlobalUnits { machine: s(machine) },
            ["engine", "leader"] => Key::EngineLeader,
            ["engine", "version"] => Key::EngineVersion,
            ["units", unit, "restarted", machine] => Key::UnitRestarted { unit: s(unit), machine: s(machine) },
            ["rollouts", id, "spec"] => Key::RolloutSpec { id: s(id) },
            ["rollouts", id, "control"] => Key::RolloutControl { id: s(id) },
            ["rollouts", id, "progress"] => Key::RolloutProgress { id: s(id) },
            ["audit", id] => Key::AuditRecord { id: s(id) },
            ["machines", machine, "schedule", unit] => Key::ScheduleEntry { machine: s(machine), unit: s(unit) },
            ["machines", machine, "drained"] => Key::MachineDrained { machine: s(machine) },
            _ => return None,
        })
    }

    /// Builds the full key for a parsed [`Key`] (inverse of [`Keys::parse`]).
    pub fn build(&self, key: &Key) -> String {
        match key {
            Key::LayoutVersion => self.layout_version(),
            Key::UnitObject { unit } => self.unit_object(unit),
            Key::UnitDesired { unit } => self.unit_desired(unit),
            Key::UnitTarget { unit } => self.unit_target(unit),
            Key::UnitLaunched { unit, machine } => self.unit_launched(unit, machine),
            Key::Body { hash } => self.body(hash),
            Key::State { unit, machine } => self.state(unit, machine),
            Key::MachineObject { machine } => self.machine_object(machine),
            Key::MachineMetadata { machine, key } => self.machine_metadata(machine, key),
            Key::MachineCordon { machine } => self.machine_cordon(machine),
            Key::MachineLoadFault { machine } => self.machine_load_fault(machine),
            Key::MachineGlobalUnits { machine } => self.machine_global_units(machine),
            Key::EngineLeader => self.engine_leader(),
            Key::EngineVersion => self.engine_version(),
            Key::UnitRestarted { unit, machine } => self.unit_restarted(unit, machine),
            Key::RolloutSpec { id } => self.rollout_spec(id),
            Key::RolloutControl { id } => self.rollout_control(id),
            Key::RolloutProgress { id } => self.rollout_progress(id),
            Key::AuditRecord { id } => self.audit_record(id),
            Key::ScheduleEntry { machine, unit } => self.schedule_entry(machine, unit),
            Key::MachineDrained { machine } => self.machine_drained(machine),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_normalised_to_single_slashes() {
        assert_eq!(Keys::new("/_coreos.com/fleet/").prefix(), "/_coreos.com/fleet/");
        assert_eq!(Keys::new("_coreos.com/fleet").prefix(), "/_coreos.com/fleet/");
        assert_eq!(Keys::new("//a//b///").prefix(), "/a/b/");
        assert_eq!(Keys::new("").prefix(), "/");
        assert_eq!(Keys::new("/").prefix(), "/");
        assert_eq!(Keys::default().prefix(), DEFAULT_PREFIX);
    }

    #[test]
    fn keys_are_spelled_as_documented() {
        let k = Keys::new("/p");
        assert_eq!(k.layout_version(), "/p/version");
        assert_eq!(k.unit_object("a.service"), "/p/units/a.service/object");
        assert_eq!(k.unit_desired("a.service"), "/p/units/a.service/desired");
        assert_eq!(k.unit_target("a.service"), "/p/units/a.service/target");
        assert_eq!(k.unit_launched("a.service", "m1"), "/p/units/a.service/launched/m1");
        assert_eq!(k.unit_dir("a.service"), "/p/units/a.service/");
        assert_eq!(k.body("ab"), "/p/bodies/ab");
        assert_eq!(k.state("a.service", "m1"), "/p/states/a.service/m1");
        assert_eq!(k.unit_states_dir("a.service"), "/p/states/a.service/");
        assert_eq!(k.machine_object("m1"), "/p/machines/m1/object");
        assert_eq!(k.machine_metadata("m1", "role"), "/p/machines/m1/metadata/role");
        assert_eq!(k.machine_cordon("m1"), "/p/machines/m1/cordon");
        assert_eq!(k.machine_load_fault("m1"), "/p/machines/m1/load-fault");
        assert_eq!(k.engine_leader(), "/p/engine/leader");
        assert_eq!(k.engine_version(), "/p/engine/version");
        assert!(k.engine_leader().starts_with(&k.engine_dir()) && k.engine_version().starts_with(&k.engine_dir()));
        assert_eq!(k.unit_restarted("a.service", "m1"), "/p/units/a.service/restarted/m1");
        assert_eq!(k.rollout_spec("r1"), "/p/rollouts/r1/spec");
        assert_eq!(k.rollout_control("r1"), "/p/rollouts/r1/control");
        assert_eq!(k.rollout_progress("r1"), "/p/rollouts/r1/progress");
        assert!(check_component(Component::RolloutId, "r-1a.b_c").is_ok());
        assert!(check_component(Component::RolloutId, "r/1").is_err());
        assert_eq!(k.audit_record(&audit_id(1_700_000_000_123, "ab-1")), "/p/audit/00000001700000000123-ab-1");
        assert_eq!(k.audit_from(5), "/p/audit/00000000000000000005");
        assert!(k.audit_from(5) < k.audit_record(&audit_id(5, "a")), "a record at 5 ms sorts from audit_from(5)");
        assert!(k.audit_record(&audit_id(4, "zzz")) < k.audit_from(5));
        assert_eq!(k.schedule_entry("m1", "a.service"), "/p/machines/m1/schedule/a.service");
        assert_eq!(k.machine_schedule_dir("m1"), "/p/machines/m1/schedule/");
        assert!(k.schedule_entry("m1", "a.service").starts_with(&k.machine_dir("m1")), "one prefix per machine");
        assert_eq!(k.machine_dir("m1"), "/p/machines/m1/");
        assert_eq!(k.machine_drained("m1"), "/p/machines/m1/drained");
    }

    #[test]
    fn audit_ids_are_a_time_and_a_suffix() {
        assert!(check_component(Component::AuditId, &audit_id(12, "m1-7")).is_ok());
        for bad in [
            "12-m1",
            "00000000000000000012",
            "00000000000000000012-",
            "0000000000000000001x-a",
            "00000000000000000012-a/b",
        ] {
            let err = check_component(Component::AuditId, bad).unwrap_err();
            assert!(err.to_string().starts_with("invalid audit record ID"), "{bad}: {err}");
        }
    }

    #[test]
    fn every_built_key_parses_back() {
        let k = Keys::new("/x/y/");
        let all = [
            Key::LayoutVersion,
            Key::UnitObject { unit: "a@1.service".into() },
            Key::UnitDesired { unit: "a.service".into() },
            Key::UnitTarget { unit: "a.service".into() },
            Key::UnitLaunched { unit: "a.service".into(), machine: "m".into() },
            Key::Body { hash: "h".into() },
            Key::State { unit: "a.service".into(), machine: "m".into() },
            Key::MachineObject { machine: "m".into() },
            Key::MachineMetadata { machine: "m".into(), key: "role".into() },
            Key::MachineCordon { machine: "m".into() },
            Key::MachineLoadFault { machine: "m".into() },
            Key::MachineGlobalUnits { machine: "m".into() },
            Key::EngineLeader,
            Key::EngineVersion,
            Key::UnitRestarted { unit: "a.service".into(), machine: "m".into() },
            Key::RolloutSpec { id: "r-1".into() },
            Key::RolloutControl { id: "r-1".into() },
            Key::RolloutProgress { id: "r-1".into() },
            Key::AuditRecord { id: audit_id(7, "m1-1") },
            Key::ScheduleEntry { machine: "m".into(), unit: "a.service".into() },
            Key::MachineDrained { machine: "m".into() },
        ];
        for key in all {
            assert_eq!(k.parse(k.build(&key).as_bytes()), Some(key.clone()), "{key:?}");
        }
    }

    #[test]
    fn foreign_and_unknown_keys_do_not_parse() {
        let k = Keys::new("/p/");
        for key in ["/q/version", "/p/", "/p/units/a.service", "/p/units//object", "/p/units/a/object/x", "/p/zzz"] {
            assert_eq!(k.parse(key.as_bytes()), None, "{key}");
        }
        assert_eq!(k.parse(&[0xff, 0xfe]), None);
    }

    #[test]
    fn components_with_slashes_or_bad_hashes_are_rejected() {
        assert!(check_component(Component::UnitName, "a.service").is_ok());
        assert!(check_component(Component::UnitName, "a/b.service").is_err());
        assert!(check_component(Component::UnitName, "").is_err());
        assert!(check_component(Component::MachineId, "m\n").is_err());
        // At most 256 bytes: a longer one is no unit name or machine ID (issue 36).
        assert!(check_component(Component::UnitName, &format!("{}.service", "a".repeat(248))).is_ok());
        assert!(check_component(Component::UnitName, &format!("{}.service", "a".repeat(249))).is_err());
        assert!(check_component(Component::MachineId, &"m".repeat(257)).is_err());
        assert!(check_component(Component::MetadataKey, &"k".repeat(257)).is_err());
        assert!(check_component(Component::Hash, "da39a3ee5e6b4b0d3255bfef95601890afd80709").is_ok());
        assert!(check_component(Component::Hash, "DA39A3EE5E6B4B0D3255BFEF95601890AFD80709").is_err());
        assert!(check_component(Component::Hash, "da39").is_err());
        assert!(check_component(Component::MetadataKey, "role_1.x-y").is_ok());
        let err = check_component(Component::MetadataKey, "a b").unwrap_err();
        assert_eq!(err.to_string(), "invalid metadata key \"a b\": allowed characters are A-Z a-z 0-9 _ . -");
    }
}

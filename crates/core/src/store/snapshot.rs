//! The in-memory, typed image of everything under the prefix at one etcd revision, and how etcd key/value changes
//! are applied to it. Pure: no I/O. The reflector feeds it; derived views live in `views.rs`.
//!
//! Snapshots share what did not change. The sections that change with every unit (units, bodies, states) are
//! persistent maps ([`Section`]): a batch of watch events copies only the paths to the records it touches, whatever
//! the number of units, and two snapshots are compared by their shared nodes. The small sections (machines,
//! rollouts) are behind `Arc`s and copied whole when written while a reader holds them. Bodies are `Arc<str>` so
//! views never copy text.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::interner::Interner;
use super::keys::{Component, check_component};
use super::keys::{Key, Keys};
use super::records::{
    Cordon, DecodeError, MachineObject, ScheduleEntry, StateRecord, UnitObject, decode_cordon, decode_job_state,
    decode_json, decode_machine_id, decode_machine_object, decode_rollout_progress, decode_rollout_spec, decode_text,
    decode_u32, shown,
};
use crate::model::JobState;
use crate::rollout::{Control, Rollout, RolloutProgress, RolloutSpec};

/// A per-unit section of a snapshot, by unit name (or body hash): a persistent B-tree whose nodes are shared between
/// snapshots. Copying one is O(1); changing one record copies its path (a few nodes of up to 64 pointers), so the
/// keys and values are cheap to clone (`Arc`s). Before, every batch of watch events during a start of 1,000 units
/// copied whole sections (one `String` and one record per unit) while readers held the previous snapshot.
pub type Section<V> = imbl::OrdMap<Arc<str>, V>;

/// Everything fleet stores, at [`Snapshot::revision`].
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    revision: i64,
    connected: bool,
    /// How many etcd keys the snapshot was built from (those outside the layout included): lets the reflector
    /// confirm a watch progress notification against etcd (see `reflector.rs`).
    raw_keys: u64,
    layout_version: Option<u32>,
    engine_version: Option<u32>,
    leader: Option<LeaderRecord>,
    units: Section<Arc<UnitRecord>>,
    bodies: Section<BodyRecord>,
    /// Each unit's states behind their own `Arc`: an unchanged unit is the same pointer in both snapshots.
    states: Section<Arc<PerMachine<StateRecord>>>,
    machines: Arc<BTreeMap<String, MachineRecord>>,
    rollouts: Arc<BTreeMap<String, RolloutRecord>>,
    /// The texts this snapshot and its successors share (see `interner.rs`); only [`Snapshot::apply`] uses it.
    texts: SharedTexts,
    /// Layout 2: the machine whose agent this view is scoped to (its own prefixes only, docs/lab/scoped-views.md);
    /// `None` for a full view.
    scope: Option<Arc<str>>,
}

/// One [`Interner`] for a snapshot and every copy made of it: copies are what readers hold, and the next version
/// of the snapshot is a changed copy, so all of them share one set of texts.
#[derive(Clone, Default)]
struct SharedTexts(Arc<std::sync::Mutex<Interner>>);

impl std::fmt::Debug for SharedTexts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTexts")
    }
}

/// A unit's records per machine ID, in machine order. A unit is on one machine or a few (a global unit on every
/// one), so a sorted vector: the smallest B-tree node holds 11 entries, ~1.4 KiB for one machine's state, which
/// made the states of 1,000 units 1.6 MiB in every fleetd (massif).
pub type PerMachine<V> = litemap::LiteMap<Arc<str>, V>;

/// The keys of one rollout under `P/rollouts/<id>/`; without a spec (and without an error) it is ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloutRecord {
    pub spec: Option<RolloutSpec>,
    pub control: Option<Control>,
    pub progress: Option<RolloutProgress>,
    /// Mod revision of the progress key (0 when absent): the engine's compare-and-swap guard.
    pub progress_revision: i64,
    /// Mod revision of the newest write to any of its keys: it moves whenever what the API shows of the rollout
    /// does, which is what a change wait (`GET /rollouts/<id>?waitRevision=`) compares. A rollout's keys are only
    /// ever deleted all together, so a delete never needs to move it.
    pub revision: i64,
    /// Why a key of the rollout (`spec`, `control`, `progress`) does not decode, by key: logged once when read
    /// and shown with the rollout ([`RolloutRecord::error`]). A rollout with one takes part in no decision —
    /// no engine drives it, no agent holds to it, no API call changes it — since what it would decide is not
    /// known; it stays as it is until its keys are written again (or deleted).
    pub errors: BTreeMap<&'static str, String>,
}

impl RolloutRecord {
    fn is_empty(&self) -> bool {
        self.spec.is_none() && self.control.is_none() && self.progress.is_none() && self.errors.is_empty()
    }

    /// The rollout, if its spec is present and every key of it decodes.
    pub fn rollout(&self) -> Option<Rollout> {
        if !self.errors.is_empty() {
            return None;
        }
        Some(Rollout {
            spec: self.spec.clone()?,
            control: self.control.unwrap_or_default(),
            progress: self.progress.clone(),
        })
    }

    /// Why the rollout cannot be read (each key that does not decode, with why), if it cannot.
    pub fn error(&self) -> Option<String> {
        (!self.errors.is_empty()).then(|| self.errors.values().cloned().collect::<Vec<_>>().join("; "))
    }
}

/// The keys of one unit, in either layout (keys.rs): under `P/units/<name>/`, and in layout 2 also its schedule
/// entries and the markers folded into its states. Read it through the accessors
/// ([`UnitRecord::object`], [`UnitRecord::target`], [`UnitRecord::launched`], ...), which decide between the two
/// layouts in one place. A record without an object is an orphan (readers skip it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitRecord {
    /// `P/units/<name>/object` and its mod revision (0 when absent).
    units_object: Option<UnitObject>,
    units_object_revision: i64,
    /// `P/units/<name>/desired`; `None` when the key is missing or unreadable.
    desired_key: Option<JobState>,
    /// `P/units/<name>/target`.
    target_key: Option<Arc<str>>,
    /// Layout 2: `P/schedule/<machine>/<name>`, by machine.
    entries: PerMachine<ScheduleEntry>,
    /// `P/units/<name>/launched/<machine>`: machine → hash it started.
    launched_markers: PerMachine<Arc<str>>,
    /// Layout 2: the `launched` field of the machines' states.
    launched_in_states: PerMachine<Arc<str>>,
    /// `P/units/<name>/restarted/<machine>`: machine → the rollout it restarted the unit for.
    restarted_markers: PerMachine<Arc<str>>,
    /// Layout 2: the `restartedFor` field of the machines' states.
    restarted_in_states: PerMachine<Arc<str>>,
}

impl UnitRecord {
    fn is_empty(&self) -> bool {
        self.units_object.is_none()
            && self.desired_key.is_none()
            && self.target_key.is_none()
            && self.entries.is_empty()
            && self.launched_markers.is_empty()
            && self.launched_in_states.is_empty()
            && self.restarted_markers.is_empty()
            && self.restarted_in_states.is_empty()
    }

    /// The unit's object (`P/units/<name>/object`).
    pub fn object(&self) -> Option<&UnitObject> {
        self.units_object.as_ref()
    }

    /// Mod revision of the object key (0 when absent): a guard for writes that must not race a replace.
    pub fn object_revision(&self) -> i64 {
        self.units_object_revision
    }

    /// The layout-1 `desired` key alone (what the switch to layout 2 folds into the object and deletes).
    pub fn desired_key(&self) -> Option<JobState> {
        self.desired_key
    }

    /// The layout-1 `target` key alone (what the switch to layout 2 turns into an entry and deletes).
    pub fn target_key(&self) -> Option<&Arc<str>> {
        self.target_key.as_ref()
    }

    /// The desired state: the `desired` key, else the object's field (layout 2); `None` when neither is there
    /// (views read that as `inactive`, §3.2).
    pub fn desired(&self) -> Option<JobState> {
        self.desired_key.or_else(|| self.object().and_then(|o| o.desired))
    }

    /// The machine the engine scheduled the unit to: the `target` key, else the machine of its schedule entry that
    /// is a placement (layout 2; a global unit's entries are not).
    pub fn target(&self) -> Option<&Arc<str>> {
        self.target_key.as_ref().or_else(|| self.entries.iter().find(|(_, e)| !e.global).map(|(m, _)| m))
    }

    /// The schedule entries (layout 2), by machine.
    pub fn entries(&self) -> &PerMachine<ScheduleEntry> {
        &self.entries
    }

    /// The hash `machine` last started of the unit (`""`: one it did not know the hash of): its launched marker,
    /// else the `launched` field of its state.
    pub fn launched(&self, machine: &str) -> Option<&Arc<str>> {
        self.launched_markers.get(machine).or_else(|| self.launched_in_states.get(machine))
    }

    /// Every machine that started the unit, with the hash it started ([`UnitRecord::launched`]), by machine ID.
    pub fn launched_on(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<str>)> {
        let only_in_states =
            self.launched_in_states.iter().filter(|(m, _)| !self.launched_markers.contains_key(m.as_ref()));
        let mut all: Vec<(&Arc<str>, &Arc<str>)> = self.launched_markers.iter().chain(only_in_states).collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }

    /// The layout-1 launched marker keys alone, by machine: what a layout-1 agent writes and deletes.
    pub fn launched_markers(&self) -> &PerMachine<Arc<str>> {
        &self.launched_markers
    }

    /// The layout-1 restarted marker keys alone, by machine: what a layout-1 agent writes.
    pub fn restarted_markers(&self) -> &PerMachine<Arc<str>> {
        &self.restarted_markers
    }

    /// The rollout `machine` last restarted the unit for: its restarted marker, else the field of its state.
    pub fn restarted_for(&self, machine: &str) -> Option<&Arc<str>> {
        self.restarted_markers.get(machine).or_else(|| self.restarted_in_states.get(machine))
    }
}

/// A stored unit body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyRecord {
    pub text: Arc<str>,
    /// Needed by garbage collection: a body is deleted only if it was not re-put since it was seen unreferenced.
    pub mod_revision: i64,
}

/// One machine's keys under `P/machines/<id>/`. Without `object` the machine is not present (only metadata left).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineRecord {
    pub object: Option<MachineObject>,
    /// Lease the presence key is bound to (0 when absent).
    pub lease: i64,
    /// Dynamic metadata as stored, tombstones (`""`) included.
    pub metadata: BTreeMap<String, String>,
    /// The machine's cordon (`P/machines/<id>/cordon`), when it has one that decodes.
    pub cordon: Option<Cordon>,
    /// Why the cordon key does not decode, when it does not: logged once per write and read as no cordon (the
    /// machine takes units as before), until the key is written again or deleted (`uncordon`).
    pub cordon_error: Option<String>,
    /// What the machine's agent published about unit files it cannot write (`P/machines/<id>/load-fault`, bound to
    /// its lease). One that does not decode is nobody's word (its agent writes only what decodes): logged and read
    /// as no fault, so a stray write cannot keep units off a machine.
    pub load_fault: Option<crate::model::LoadFault>,
    /// The global units the machine runs, as its agent last published them (`P/machines/<id>/global-units`); kept
    /// by etcd for `rollout::REMEMBER_DEPARTED` after the machine left. One that does not decode reads as none.
    pub global_units: Option<crate::model::GlobalUnits>,
    /// Layout 2: the units a drain keeps stopped on the machine (`P/machines/<id>/drained`, written by the engine
    /// leader). One that does not decode reads as none.
    pub drained: Option<crate::model::GlobalUnits>,
}

impl MachineRecord {
    fn is_empty(&self) -> bool {
        self.object.is_none()
            && self.metadata.is_empty()
            && !self.has_cordon_key()
            && self.load_fault.is_none()
            && self.global_units.is_none()
            && self.drained.is_none()
    }

    /// Whether the machine's cordon key exists, decodable or not.
    pub fn has_cordon_key(&self) -> bool {
        self.cordon.is_some() || self.cordon_error.is_some()
    }
}

/// Current engine leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRecord {
    pub machine: String,
    pub lease: i64,
    pub mod_revision: i64,
}

/// One change to one key, as seen in a range response (always `Put`) or a watch event.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    Put { value: &'a [u8], mod_revision: i64, lease: i64 },
    Delete,
}

impl Snapshot {
    /// A snapshot built from a full range read of the prefix at `revision` (connected).
    pub fn from_kvs<'a>(keys: &Keys, revision: i64, kvs: impl IntoIterator<Item = (&'a [u8], Change<'a>)>) -> Self {
        let mut s = Snapshot { revision, connected: true, ..Default::default() };
        for (key, change) in kvs {
            s.apply(keys, key, change);
        }
        s
    }

    /// An empty view scoped to `machine` (layout 2): filled from that machine's prefixes only, it lists the units
    /// scheduled there from their entries ([`Snapshot::units`]).
    pub fn scoped(machine: &str) -> Self {
        Snapshot { scope: Some(machine.into()), ..Default::default() }
    }

    /// The machine a scoped view is for (`None`: a full view).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// Etcd revision this snapshot reflects.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// True while the reflector's watch is established; false after an error until the next successful re-list.
    /// A disconnected snapshot is the last known state and may be stale.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// `P/version`, if set.
    pub fn layout_version(&self) -> Option<u32> {
        self.layout_version
    }

    /// `P/engine/version`, if set.
    pub fn engine_version(&self) -> Option<u32> {
        self.engine_version
    }

    pub fn leader_record(&self) -> Option<&LeaderRecord> {
        self.leader.as_ref()
    }

    /// Machine ID of the current engine leader.
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_ref().map(|l| l.machine.as_str())
    }

    /// Every unit record (orphans included), by name.
    pub fn unit_records(&self) -> &Section<Arc<UnitRecord>> {
        &self.units
    }

    pub fn unit_record(&self, name: &str) -> Option<&UnitRecord> {
        self.units.get(name).map(|r| &**r)
    }

    /// Every stored body, by hash.
    pub fn bodies(&self) -> &Section<BodyRecord> {
        &self.bodies
    }

    pub fn body(&self, hash: &str) -> Option<&Arc<str>> {
        self.bodies.get(hash).map(|b| &b.text)
    }

    /// Published unit states: unit name → machine ID → state.
    pub fn state_records(&self) -> &Section<Arc<PerMachine<StateRecord>>> {
        &self.states
    }

    pub fn state_record(&self, unit: &str, machine: &str) -> Option<&StateRecord> {
        self.states.get(unit).and_then(|m| m.get(machine))
    }

    /// Every rollout record, by ID.
    pub fn rollout_records(&self) -> &BTreeMap<String, RolloutRecord> {
        &self.rollouts
    }

    /// Every machine record (including machines with only metadata left), by ID.
    pub fn machine_records(&self) -> &BTreeMap<String, MachineRecord> {
        &self.machines
    }

    /// True when `self` holds the same units, bodies, machines, leader, versions and connection state as
    /// `earlier`, i.e. at most unit states differ: what the engine needs to skip a pass when only agents published.
    ///
    /// Judged by section identity, which is cheap and sound: a section shared by both snapshots is the same value
    /// (sections are copied on write while shared). It can report a change where there is none (a section copied
    /// and then changed back), never miss one.
    pub fn same_except_states(&self, earlier: &Snapshot) -> bool {
        self.units.ptr_eq(&earlier.units)
            && self.bodies.ptr_eq(&earlier.bodies)
            && Arc::ptr_eq(&self.machines, &earlier.machines)
            && Arc::ptr_eq(&self.rollouts, &earlier.rollouts)
            && self.leader == earlier.leader
            && self.engine_version == earlier.engine_version
            && self.layout_version == earlier.layout_version
            && self.connected == earlier.connected
    }

    pub fn set_revision(&mut self, revision: i64) {
        self.revision = revision;
    }

    pub fn raw_keys(&self) -> u64 {
        self.raw_keys
    }

    /// Counts keys read by a range (`added` of them) or created/deleted by watch events.
    pub fn count_raw_keys(&mut self, added: u64, removed: u64) {
        self.raw_keys = (self.raw_keys + added).saturating_sub(removed);
    }

    pub fn set_connected(&mut self, connected: bool) {
        self.connected = connected;
    }

    /// Applies one key change. Keys outside the layout are ignored; so are keys whose names no writer of fleet
    /// can write (a unit name the API refuses, a malformed hash, machine ID or rollout ID), logged once per write
    /// with the key. Undecodable values are logged (once per write, with the key) and read as absent, so one bad
    /// key cannot hide the rest of the cluster; a rollout keeps the error to show ([`RolloutRecord::errors`]).
    pub fn apply(&mut self, keys: &Keys, raw_key: &[u8], change: Change<'_>) {
        let Some(key) = keys.parse(raw_key) else { return };
        if matches!(key, Key::AuditRecord { .. }) {
            // Not cluster state: read on demand (`P/audit/` in keys.rs), never held by every fleetd.
            return;
        }
        if let Some(why) = invalid_name(&key) {
            if matches!(change, Change::Put { .. }) {
                tracing::warn!(key = %shown(raw_key), reason = %why, "ignoring registry key with an invalid name");
            }
            return;
        }
        let full = || shown(raw_key);
        let (value, put_revision) = match change {
            Change::Put { value, mod_revision, .. } => (Some(value), mod_revision),
            Change::Delete => (None, 0),
        };
        let warn = |e: DecodeError| {
            tracing::warn!(error = %e, "ignoring undecodable registry value");
        };
        let texts = self.texts.clone();
        // A poisoned lock only means a panic elsewhere while sharing a text; the set itself is still sound.
        let mut texts = texts.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let texts = &mut *texts;
        match key {
            Key::LayoutVersion => {
                self.layout_version = value.and_then(|v| decode_u32(&full(), "layout version", v).map_err(warn).ok())
            }
            Key::EngineVersion => {
                self.engine_version = value.and_then(|v| decode_u32(&full(), "engine version", v).map_err(warn).ok())
            }
            Key::EngineLeader => {
                self.leader = match change {
                    // A leader key is always bound to its engine's lease: one without is no leader (engines
                    // campaign over it, see `Registry::campaign`), not one that never expires.
                    Change::Put { lease: 0, value, .. } => {
                        let reason = "not bound to a lease (an engine leader always is)".to_string();
                        warn(super::records::decode_error(&full(), "leader", reason, value));
                        None
                    }
                    Change::Put { value, mod_revision, lease } => decode_machine_id(&full(), "leader", value)
                        .map_err(warn)
                        .ok()
                        .map(|machine| LeaderRecord { machine, lease, mod_revision }),
                    Change::Delete => None,
                }
            }
            Key::UnitObject { unit } => {
                let object =
                    value.and_then(|v| decode_json::<UnitObject>(&full(), "unit object", v).map_err(warn).ok());
                let object = object.map(|mut o| {
                    o.share_texts(texts);
                    o
                });
                update_unit(&mut self.units, texts, &unit, |u| {
                    u.units_object = object;
                    u.units_object_revision = match (&u.units_object, change) {
                        (Some(_), Change::Put { mod_revision, .. }) => mod_revision,
                        _ => 0,
                    };
                })
            }
            Key::UnitDesired { unit } => update_unit(&mut self.units, texts, &unit, |u| {
                u.desired_key = value.and_then(|v| decode_job_state(&full(), v).map_err(warn).ok())
            }),
            Key::UnitTarget { unit } => {
                let target = value.and_then(|v| decode_machine_id(&full(), "target", v).map_err(warn).ok());
                let target = target.map(|t| texts.share(&t));
                update_unit(&mut self.units, texts, &unit, |u| u.target_key = target)
            }
            Key::ScheduleEntry { machine, unit } => {
                let entry =
                    value.and_then(|v| decode_json::<ScheduleEntry>(&full(), "schedule entry", v).map_err(warn).ok());
                let entry = entry.map(|mut e| {
                    e.share_texts(texts);
                    (texts.share(&machine), e)
                });
                update_unit(&mut self.units, texts, &unit, |u| match entry {
                    Some((machine, e)) => {
                        insert_per_machine(&mut u.entries, machine, e);
                    }
                    None => {
                        u.entries.remove(machine.as_str());
                    }
                })
            }
            Key::UnitLaunched { unit, machine } => {
                let hash = value.map(|v| decode_text(&full(), "launched marker", v));
                let marker = per_machine_text(texts, &machine, hash, warn);
                update_unit(&mut self.units, texts, &unit, |u| {
                    set_per_machine(&mut u.launched_markers, &machine, marker)
                })
            }
            Key::UnitRestarted { unit, machine } => {
                let id = value.map(|v| decode_text(&full(), "restarted marker", v));
                let marker = per_machine_text(texts, &machine, id, warn);
                update_unit(&mut self.units, texts, &unit, |u| {
                    set_per_machine(&mut u.restarted_markers, &machine, marker)
                })
            }
            Key::Body { hash } => {
                let bodies = &mut self.bodies;
                match change {
                    Change::Put { value, mod_revision, .. } => match decode_text(&full(), "unit body", value) {
                        Ok(text) => {
                            bodies.insert(texts.share(&hash), BodyRecord { text: text.into(), mod_revision });
                        }
                        Err(e) => {
                            warn(e);
                            bodies.remove(hash.as_str());
                        }
                    },
                    Change::Delete => {
                        bodies.remove(hash.as_str());
                    }
                }
            }
            Key::State { unit, machine } => {
                let record =
                    value.and_then(|v| decode_json::<StateRecord>(&full(), "unit state", v).map_err(warn).ok());
                let record = record.map(|mut r| {
                    r.share_texts(texts);
                    (texts.share(&machine), r)
                });
                // Layout 2's markers, folded into the state: the unit's record changes only when they do, so a
                // layout-1 state (without them) leaves the units section shared (`same_except_states`).
                let launched = record.as_ref().and_then(|(_, r)| r.launched.clone());
                let restarted = record.as_ref().and_then(|(_, r)| r.restarted_for.clone());
                update_record(&mut self.states, texts, &unit, |per_machine| {
                    match record {
                        Some((machine, r)) => insert_per_machine(Arc::make_mut(per_machine), machine, r),
                        None if per_machine.contains_key(machine.as_str()) => {
                            Arc::make_mut(per_machine).remove(machine.as_str())
                        }
                        None => None,
                    };
                    per_machine.is_empty()
                });
                let held = self.units.get(unit.as_str());
                let same = |held: Option<&Arc<str>>, new: &Option<Arc<str>>| held == new.as_ref();
                let unchanged = same(held.and_then(|u| u.launched_in_states.get(machine.as_str())), &launched)
                    && same(held.and_then(|u| u.restarted_in_states.get(machine.as_str())), &restarted);
                if !unchanged {
                    let machine = texts.share(&machine);
                    update_unit(&mut self.units, texts, &unit, |u| {
                        set_per_machine(&mut u.launched_in_states, &machine, launched.map(|h| (machine.clone(), h)));
                        set_per_machine(&mut u.restarted_in_states, &machine, restarted.map(|r| (machine.clone(), r)));
                    })
                }
            }
            Key::MachineDrained { machine } => {
                let read = value.map(|v| decode_json(&full(), "machine drained units", v));
                let units = read.and_then(|r| r.map_err(warn).ok());
                self.update_machine(machine, |m| m.drained = units)
            }
            Key::MachineObject { machine } => {
                let object = match change {
                    Change::Put { value, lease, .. } => {
                        decode_machine_object(&full(), &machine, value, lease).map_err(warn).ok().map(|o| (o, lease))
                    }
                    Change::Delete => None,
                };
                self.update_machine(machine, |m| match object {
                    Some((object, lease)) => {
                        m.object = Some(object);
                        m.lease = lease;
                    }
                    None => {
                        m.object = None;
                        m.lease = 0;
                    }
                })
            }
            Key::RolloutSpec { id } => {
                let spec = value.map(|v| decode_rollout_spec(&full(), &id, v));
                self.update_rollout(id, put_revision, |r| r.spec = rollout_part(&mut r.errors, "spec", spec, warn))
            }
            Key::RolloutControl { id } => {
                let control = value.map(|v| decode_json(&full(), "rollout control", v));
                self.update_rollout(id, put_revision, |r| {
                    r.control = rollout_part(&mut r.errors, "control", control, warn)
                })
            }
            Key::RolloutProgress { id } => {
                let progress = value.map(|v| decode_rollout_progress(&full(), v));
                self.update_rollout(id, put_revision, |r| {
                    r.progress = rollout_part(&mut r.errors, "progress", progress, warn);
                    r.progress_revision = put_revision;
                })
            }
            Key::AuditRecord { .. } => {}
            Key::MachineCordon { machine } => {
                let read = value.map(|v| decode_cordon(&full(), v));
                self.update_machine(machine, |m| match read {
                    Some(Ok(cordon)) => {
                        m.cordon = Some(cordon);
                        m.cordon_error = None;
                    }
                    Some(Err(e)) => {
                        m.cordon = None;
                        m.cordon_error = Some(e.to_string());
                        warn(e);
                    }
                    None => {
                        m.cordon = None;
                        m.cordon_error = None;
                    }
                })
            }
            // Records a machine's agent publishes: one that does not decode is nobody's word, read as none.
            Key::MachineLoadFault { machine } => {
                let read = value.map(|v| decode_json(&full(), "machine load fault", v));
                let fault = read.and_then(|r| r.map_err(warn).ok());
                self.update_machine(machine, |m| m.load_fault = fault)
            }
            Key::MachineGlobalUnits { machine } => {
                let read = value.map(|v| decode_json(&full(), "machine global units", v));
                let units = read.and_then(|r| r.map_err(warn).ok());
                self.update_machine(machine, |m| m.global_units = units)
            }
            Key::MachineMetadata { machine, key } => self.update_machine(machine, |m| {
                match value.map(|v| decode_text(&full(), "metadata value", v)) {
                    Some(Ok(v)) => m.metadata.insert(key, v),
                    Some(Err(e)) => {
                        warn(e);
                        m.metadata.remove(&key)
                    }
                    None => m.metadata.remove(&key),
                };
            }),
        }
    }

    fn update_rollout(&mut self, id: String, put_revision: i64, f: impl FnOnce(&mut RolloutRecord)) {
        let rollouts = Arc::make_mut(&mut self.rollouts);
        let record = rollouts.entry(id.clone()).or_default();
        f(record);
        record.revision = record.revision.max(put_revision);
        if record.is_empty() {
            rollouts.remove(&id);
        }
    }

    fn update_machine(&mut self, id: String, f: impl FnOnce(&mut MachineRecord)) {
        let machines = Arc::make_mut(&mut self.machines);
        let record = machines.entry(id.clone()).or_default();
        f(record);
        if record.is_empty() {
            machines.remove(&id);
        }
    }
}

/// Why `key` names something no writer of fleet can write, if it does: a unit name the API refuses
/// (`unit::validate_name`), or a machine ID, hash, rollout ID or metadata key that cannot be a key component.
/// Such a key is nobody's record: it is ignored, never passed on to the engine or the agents (which would plan a
/// unit file named `..`, or fail every write that names it).
fn invalid_name(key: &Key) -> Option<String> {
    let unit = |name: &str| crate::unit::validate_name(name).err().map(|e| format!("invalid unit name: {e}"));
    let component = |what, value: &str| check_component(what, value).err().map(|e| e.to_string());
    let machine = |id: &str| component(Component::MachineId, id);
    match key {
        Key::LayoutVersion | Key::EngineLeader | Key::EngineVersion => None,
        Key::UnitObject { unit: u } | Key::UnitDesired { unit: u } | Key::UnitTarget { unit: u } => unit(u),
        Key::UnitLaunched { unit: u, machine: m }
        | Key::UnitRestarted { unit: u, machine: m }
        | Key::State { unit: u, machine: m } => unit(u).or_else(|| machine(m)),
        Key::Body { hash } => component(Component::Hash, hash),
        Key::MachineObject { machine: m }
        | Key::MachineCordon { machine: m }
        | Key::MachineLoadFault { machine: m }
        | Key::MachineGlobalUnits { machine: m }
        | Key::MachineDrained { machine: m } => machine(m),
        Key::ScheduleEntry { machine: m, unit: u } => unit(u).or_else(|| machine(m)),
        Key::MachineMetadata { machine: m, key } => machine(m).or_else(|| component(Component::MetadataKey, key)),
        Key::RolloutSpec { id } | Key::RolloutControl { id } | Key::RolloutProgress { id } => {
            component(Component::RolloutId, id)
        }
        Key::AuditRecord { id } => component(Component::AuditId, id),
    }
}

/// One key of a rollout as read (`None`: deleted): its value, or `None` with the error kept under `part` (and
/// logged) when it does not decode.
fn rollout_part<T>(
    errors: &mut BTreeMap<&'static str, String>,
    part: &'static str,
    read: Option<Result<T, DecodeError>>,
    warn: impl Fn(DecodeError),
) -> Option<T> {
    match read {
        Some(Ok(value)) => {
            errors.remove(part);
            Some(value)
        }
        Some(Err(e)) => {
            errors.insert(part, e.to_string());
            warn(e);
            None
        }
        None => {
            errors.remove(part);
            None
        }
    }
}

/// Changes the unit record `name` (a default one when absent) with `f`; an empty record is removed.
fn update_unit(
    units: &mut Section<Arc<UnitRecord>>,
    texts: &mut Interner,
    name: &str,
    f: impl FnOnce(&mut UnitRecord),
) {
    update_record(units, texts, name, |record| {
        let record = Arc::make_mut(record);
        f(record);
        record.is_empty()
    });
}

/// The marker to set for `machine`, machine ID and value shared; `None` (remove it) when the key was deleted or its
/// value is unreadable (logged).
fn per_machine_text(
    texts: &mut Interner,
    machine: &str,
    value: Option<Result<String, DecodeError>>,
    warn: impl Fn(DecodeError),
) -> Option<(Arc<str>, Arc<str>)> {
    match value {
        Some(Ok(text)) => Some((texts.share(machine), texts.share(&text))),
        Some(Err(e)) => {
            warn(e);
            None
        }
        None => None,
    }
}

/// Sets (`Some`) or removes (`None`) `machine`'s entry of `markers`.
fn set_per_machine(markers: &mut PerMachine<Arc<str>>, machine: &str, marker: Option<(Arc<str>, Arc<str>)>) {
    match marker {
        Some((machine, text)) => {
            insert_per_machine(markers, machine, text);
        }
        None => {
            markers.remove(machine);
        }
    }
}

/// Inserts into a unit's per-machine records. Most units are on one machine: a first entry gets room for one
/// (a `Vec` grows from empty to room for four, 128–352 bytes per unit wasted in every fleetd, massif).
fn insert_per_machine<V>(records: &mut PerMachine<V>, machine: Arc<str>, value: V) -> Option<V> {
    if records.is_empty() {
        *records = PerMachine::with_capacity(1);
    }
    records.insert(machine, value)
}

/// Changes the record under `key` in `section` (a default one when absent) with `f`, which says whether the record
/// is empty afterwards; an empty record is removed. Only the path to the record is copied, and a key is allocated
/// (shared with the other sections) only for a new record.
fn update_record<V: Clone + Default>(
    section: &mut Section<V>,
    texts: &mut Interner,
    key: &str,
    f: impl FnOnce(&mut V) -> bool,
) {
    let empty = match section.get_mut(key) {
        Some(record) => f(record),
        None => {
            let mut record = V::default();
            if f(&mut record) {
                return;
            }
            section.insert(texts.share(key), record);
            return;
        }
    };
    if empty {
        section.remove(key);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const H1: &str = "1c6fb6f3684bafb0c173d8b8b957ceff031180c1";
    pub(crate) const H2: &str = "a0f275d46bc6ee0eca06be7c339913c07d99c0c7";

    /// Test builder: applies puts/deletes by parsed key.
    pub(crate) struct Build {
        pub keys: Keys,
        pub snap: Snapshot,
        rev: i64,
    }

    impl Build {
        pub fn new() -> Build {
            Build { keys: Keys::new("/p"), snap: Snapshot::default(), rev: 1 }
        }
        /// A put without a lease, but for a machine's presence, which is always bound to one (lease 1 here).
        pub fn put(self, key: Key, value: &str) -> Build {
            let lease = if matches!(key, Key::MachineObject { .. }) { 1 } else { 0 };
            self.put_lease(key, value, lease)
        }
        pub fn put_lease(mut self, key: Key, value: &str, lease: i64) -> Build {
            self.rev += 1;
            let k = self.keys.build(&key);
            let change = Change::Put { value: value.as_bytes(), mod_revision: self.rev, lease };
            self.snap.apply(&self.keys, k.as_bytes(), change);
            self
        }
        pub fn delete(mut self, key: Key) -> Build {
            self.rev += 1;
            let k = self.keys.build(&key);
            self.snap.apply(&self.keys, k.as_bytes(), Change::Delete);
            self
        }
        pub fn unit(self, name: &str, hash: &str, prev: Option<&str>, desired: &str) -> Build {
            let obj = match prev {
                Some(p) => format!(r#"{{"name":"{name}","hash":"{hash}","previousHash":"{p}"}}"#),
                None => format!(r#"{{"name":"{name}","hash":"{hash}"}}"#),
            };
            self.put(Key::Body { hash: hash.into() }, &format!("body of {hash}"))
                .put(Key::UnitObject { unit: name.into() }, &obj)
                .put(Key::UnitDesired { unit: name.into() }, desired)
        }
        pub fn state(self, unit: &str, machine: &str, hash: &str) -> Build {
            let v = format!(r#"{{"hash":"{hash}","loadState":"loaded","activeState":"active","subState":"running"}}"#);
            self.put(Key::State { unit: unit.into(), machine: machine.into() }, &v)
        }
        pub fn done(self) -> Snapshot {
            self.snap
        }
    }

    #[test]
    fn only_state_changes_keep_the_other_sections_shared() {
        let earlier = Build::new().unit("a.service", H1, None, "launched").state("a.service", "m1", H1).done();
        let mut later = earlier.clone();
        let keys = Keys::new("/p");
        let state = r#"{"hash":"x","loadState":"loaded","activeState":"failed","subState":"failed"}"#;
        let change = Change::Put { value: state.as_bytes(), mod_revision: 99, lease: 0 };
        later.apply(&keys, keys.state("a.service", "m1").as_bytes(), change);
        assert!(later.same_except_states(&earlier));
        let change = Change::Put { value: b"m1", mod_revision: 100, lease: 0 };
        later.apply(&keys, keys.unit_target("a.service").as_bytes(), change);
        assert!(!later.same_except_states(&earlier));
        assert!(earlier.same_except_states(&earlier.clone()));
    }

    #[test]
    fn unit_keys_fill_one_record_and_deleting_all_removes_it() {
        let b = Build::new()
            .unit("a.service", H1, None, "launched")
            .put(Key::UnitTarget { unit: "a.service".into() }, "m1")
            .put(Key::UnitLaunched { unit: "a.service".into(), machine: "m1".into() }, H1);
        let r = b.snap.unit_record("a.service").unwrap();
        assert_eq!(&*r.object().unwrap().hash, H1);
        assert_eq!(r.desired(), Some(JobState::Launched));
        assert_eq!(r.target().map(|t| &**t), Some("m1"));
        assert_eq!(r.launched("m1").map(|h| &**h), Some(H1));
        assert_eq!(b.snap.body(H1).map(|t| &**t), Some(format!("body of {H1}").as_str()));

        let s = b
            .delete(Key::UnitObject { unit: "a.service".into() })
            .delete(Key::UnitDesired { unit: "a.service".into() })
            .delete(Key::UnitTarget { unit: "a.service".into() })
            .delete(Key::UnitLaunched { unit: "a.service".into(), machine: "m1".into() })
            .done();
        assert!(s.unit_records().is_empty());
        assert!(s.body(H1).is_some(), "bodies outlive units until GC");
    }

    #[test]
    fn bad_values_read_as_absent_without_hiding_others() {
        let s = Build::new()
            .unit("a.service", H1, None, "running")
            .put(Key::UnitObject { unit: "b.service".into() }, "not json")
            .put(Key::LayoutVersion, "x")
            .done();
        assert_eq!(s.unit_record("a.service").unwrap().desired(), None);
        assert!(s.unit_record("a.service").unwrap().object().is_some());
        assert_eq!(s.unit_record("b.service"), None);
        assert_eq!(s.layout_version(), None);
    }

    /// Issue 36: a rollout key that does not decode is an error of that rollout, kept with the key and why, until a
    /// good value (or a delete) replaces it; meanwhile the rollout takes part in no decision.
    #[test]
    fn an_undecodable_rollout_key_is_an_error_of_its_rollout_until_rewritten() {
        let spec = |id: &str| {
            format!(
                r#"{{"id":"{id}","kind":"restart","units":[{{"name":"a.service","from":"{H1}","to":"{H1}"}}],"maxUnavailable":1,"minHealthyMs":0,"healthTimeoutMs":0}}"#
            )
        };
        let progress = r#"{"state":"done","steps":[]}"#;
        let b = Build::new()
            .put(Key::RolloutSpec { id: "r1".into() }, &spec("r1"))
            .put(Key::RolloutProgress { id: "r1".into() }, progress)
            .put(Key::RolloutSpec { id: "r2".into() }, &spec("r2"));
        assert_eq!(b.snap.rollouts().len(), 2);
        let b = b
            .put(Key::RolloutProgress { id: "r1".into() }, r#""nope""#)
            .put(Key::RolloutControl { id: "r2".into() }, "{");
        let r1 = &b.snap.rollout_records()["r1"];
        assert!(r1.rollout().is_none(), "a rollout that cannot be read decides nothing");
        let error = r1.error().unwrap();
        assert!(error.starts_with("/p/rollouts/r1/progress: cannot decode rollout progress: "), "{error}");
        assert!(r1.spec.is_some(), "what decodes is kept, to show");
        assert!(b.snap.rollout_records()["r2"].error().unwrap().contains("/p/rollouts/r2/control"));
        assert!(b.snap.rollouts().is_empty(), "neither is driven, pinned to or restarted for");

        // A spec of another rollout, or naming what no key can hold, is an error too.
        let b = b
            .put(Key::RolloutSpec { id: "r3".into() }, &spec("r1"))
            .put(Key::RolloutSpec { id: "r4".into() }, &spec("r4").replace("a.service", "../a").replace(H1, "zz"));
        assert!(b.snap.rollout_records()["r3"].error().unwrap().contains("is not the key's rollout ID"));
        assert!(b.snap.rollout_records()["r4"].error().unwrap().contains("invalid unit name"));
        let bad_step = r#"{"state":"running","steps":[{"unit":"a.service","machine":"m","phase":"pending"}]}"#;
        let b = b.put(Key::RolloutProgress { id: "r2".into() }, bad_step);
        assert!(b.snap.rollout_records()["r2"].errors.contains_key("progress"), "a step naming no machine");

        // Rewritten: readable again. Deleted: gone, error and all.
        let b = b
            .put(Key::RolloutProgress { id: "r1".into() }, progress)
            .delete(Key::RolloutControl { id: "r2".into() })
            .delete(Key::RolloutProgress { id: "r2".into() });
        assert_eq!(b.snap.rollout_records()["r1"].error(), None);
        assert_eq!(b.snap.rollouts().len(), 2);
        let s = b.delete(Key::RolloutSpec { id: "r3".into() }).done();
        assert!(!s.rollout_records().contains_key("r3"));
        // A key of nothing but an error is still a record: the API shows it rather than hiding it.
        let s = Build::new().put(Key::RolloutControl { id: "lone".into() }, "[1]").done();
        assert!(s.rollout_records()["lone"].error().is_some());
    }

    /// Issue 36: keys whose names no writer of fleet writes are nobody's record: ignored, never passed on.
    #[test]
    fn keys_with_invalid_names_are_ignored() {
        let keys = Keys::new("/p");
        let long = format!("{}.service", "l".repeat(300));
        let object = format!(r#"{{"name":"x","hash":"{H1}"}}"#);
        let mut s = Build::new().put(Key::Body { hash: H1.into() }, "[Service]\nExecStart=/bin/true\n").done();
        for unit in ["..", ".", "no-type", "a.service2", "ünï.service", "tab\there.service", ".hidden.service", &long]
        {
            for (key, value) in [
                (keys.unit_object(unit), object.as_str()),
                (keys.unit_desired(unit), "launched"),
                (keys.state(unit, "m1"), r#"{"hash":"h","loadState":"l","activeState":"a","subState":"s"}"#),
            ] {
                s.apply(&keys, key.as_bytes(), Change::Put { value: value.as_bytes(), mod_revision: 3, lease: 1 });
            }
        }
        let put = |s: &mut Snapshot, key: String, value: &str| {
            s.apply(&keys, key.as_bytes(), Change::Put { value: value.as_bytes(), mod_revision: 4, lease: 1 })
        };
        put(&mut s, keys.unit_launched("a.service", "m\u{7}"), H1);
        put(&mut s, keys.body("not-a-hash"), "x");
        put(&mut s, keys.body(".."), "x");
        put(&mut s, keys.machine_object(&"m".repeat(300)), &format!(r#"{{"id":"{}"}}"#, "m".repeat(300)));
        put(&mut s, keys.machine_metadata("m1", "bad key!"), "x");
        put(&mut s, keys.rollout_spec("ünï"), "{}");
        put(&mut s, keys.rollout_spec(&"r".repeat(65)), "{}");
        assert!(s.unit_records().is_empty(), "{:?}", s.unit_records().keys().collect::<Vec<_>>());
        assert!(s.state_records().is_empty());
        assert_eq!(s.bodies().len(), 1, "only the body under a real hash");
        assert!(s.machine_records().is_empty());
        assert!(s.rollout_records().is_empty());
        // A delete of such a key changes nothing either.
        s.apply(&keys, keys.unit_object("..").as_bytes(), Change::Delete);
        assert!(s.unit_records().is_empty());
    }

    /// Issue 36: a presence (a machine object) is always bound to its machine's lease and names the machine of
    /// its key, and the leader key is always bound to an engine lease: anything else is no machine and no leader
    /// (one would attract units that never run, the other never expire).
    #[test]
    fn a_presence_and_a_leader_need_their_lease_and_a_presence_its_own_id() {
        let s = Build::new()
            .put_lease(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1"}"#, 0)
            .put_lease(Key::MachineObject { machine: "m2".into() }, r#"{"id":"m1"}"#, 5)
            .put_lease(Key::MachineObject { machine: "m3".into() }, r#"{"id":"m3","future":[1]}"#, 5)
            .put_lease(Key::EngineLeader, "m3", 0)
            .done();
        let ids: Vec<String> = s.machines().map(|m| m.id).collect();
        assert_eq!(ids, ["m3"], "unknown fields are fine; no lease or another machine's id is not");
        assert_eq!(s.leader(), None, "a leader key bound to no lease is no leader");
        let s = Build::new()
            .put_lease(Key::EngineLeader, "m\u{7}", 9)
            .put(Key::UnitTarget { unit: "a.service".into() }, &"t".repeat(300))
            .done();
        assert_eq!(s.leader(), None, "a leader that is no machine ID");
        assert_eq!(s.unit_record("a.service"), None, "a target that is no machine ID reads as none");
    }

    /// Issue 36: a hostile value is logged and kept in errors by its first bytes only.
    #[test]
    fn errors_show_the_start_of_a_huge_key_value_and_reason() {
        let huge = "d".repeat(1 << 20);
        let err = super::super::records::decode_job_state(&format!("/p/units/{huge}/desired"), huge.as_bytes());
        let shown = err.unwrap_err().to_string();
        assert!(shown.len() < 1_000, "{} bytes shown", shown.len());
        assert!(shown.contains("…"));
    }

    #[test]
    fn names_hashes_machine_ids_and_state_words_are_one_copy_each() {
        let mut b = Build::new();
        for name in ["a.service", "b.service"] {
            let object = format!(r#"{{"name":"{name}","hash":"{H1}","history":[{{"hash":"{H1}","storedMs":1}}]}}"#);
            b = b
                .unit(name, H1, None, "launched")
                .put(Key::UnitObject { unit: name.into() }, &object)
                .put(Key::UnitTarget { unit: name.into() }, "m1")
                .put(Key::UnitLaunched { unit: name.into(), machine: "m1".into() }, H1)
                .state(name, "m1", H1);
        }
        let s = b.done();
        let same = |what: &str, texts: Vec<&Arc<str>>| {
            let first = texts[0];
            for (i, text) in texts.iter().enumerate() {
                assert_eq!(&***text, &**first, "{what}: copy {i} has other content");
                assert!(Arc::ptr_eq(text, first), "{what}: copy {i} ({text}) is a separate allocation");
            }
        };
        let (a, b) = (s.unit_record("a.service").unwrap(), s.unit_record("b.service").unwrap());
        let (la, lb) = (a.launched_on().next().unwrap(), b.launched_on().next().unwrap());
        let (oa, ob) = (a.object().unwrap(), b.object().unwrap());
        let state = |unit: &str| s.state_records().get(unit).unwrap().iter().next().unwrap();
        let ((ma, sa), (mb, sb)) = (state("a.service"), state("b.service"));
        same("hash", vec![&oa.hash, &ob.hash, &oa.history[0].hash, la.1, lb.1, &sa.hash, &sb.hash]);
        same("machine ID", vec![a.target().unwrap(), b.target().unwrap(), la.0, lb.0, ma, mb]);
        same("load state", vec![&sa.load_state, &sb.load_state]);
        same("active state", vec![&sa.active_state, &sb.active_state]);
        let (units_key, _) = s.unit_records().get_key_value("a.service").unwrap();
        let (states_key, _) = s.state_records().get_key_value("a.service").unwrap();
        same("unit name", vec![units_key, states_key, &oa.name]);
    }

    #[test]
    fn states_are_grouped_by_unit_then_machine_and_pruned() {
        let b = Build::new().state("a.service", "m2", H1).state("a.service", "m1", H1).state("b.service", "m1", H2);
        let machines: Vec<&str> = b.snap.state_records()["a.service"].keys().map(|m| &**m).collect();
        assert_eq!(machines, ["m1", "m2"]);
        let s = b
            .delete(Key::State { unit: "a.service".into(), machine: "m1".into() })
            .delete(Key::State { unit: "a.service".into(), machine: "m2".into() })
            .done();
        assert!(!s.state_records().contains_key("a.service"));
        assert!(s.state_record("b.service", "m1").is_some());
    }

    #[test]
    fn machine_presence_tracks_lease_and_metadata_survives_it() {
        let b = Build::new()
            .put_lease(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1","publicIP":"10.0.0.1"}"#, 7)
            .put(Key::MachineMetadata { machine: "m1".into(), key: "role".into() }, "db");
        assert_eq!(b.snap.machine_records()["m1"].lease, 7);
        let s = b.delete(Key::MachineObject { machine: "m1".into() }).done();
        let m = &s.machine_records()["m1"];
        assert_eq!((m.object.is_none(), m.lease, m.metadata["role"].as_str()), (true, 0, "db"));
    }

    /// Issue 38: a cordon survives the machine's presence (it is no lease's), and one that does not decode is an
    /// error of that record only: logged, read as no cordon, kept until rewritten or deleted.
    #[test]
    fn a_cordon_outlives_the_presence_and_a_bad_one_reads_as_none() {
        let m1 = || Key::MachineCordon { machine: "m1".into() };
        let b = Build::new()
            .put_lease(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1"}"#, 7)
            .put_lease(Key::MachineObject { machine: "m2".into() }, r#"{"id":"m2"}"#, 8)
            .put(m1(), r#"{"sinceMs":5}"#);
        let cordoned = |s: &Snapshot| s.machines().filter(|m| m.cordoned).map(|m| m.id).collect::<Vec<_>>();
        assert_eq!(cordoned(&b.snap), ["m1"]);
        assert_eq!(b.snap.machine_records()["m1"].cordon, Some(Cordon { since_ms: 5 }));
        let b = b.delete(Key::MachineObject { machine: "m1".into() });
        assert!(b.snap.machine("m1").is_none(), "gone from the machines");
        assert!(b.snap.machine_records()["m1"].has_cordon_key(), "the record stays for its cordon");
        let b = b.put_lease(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1"}"#, 9);
        assert_eq!(cordoned(&b.snap), ["m1"], "back with the same ID: still cordoned");

        let b = b.put(m1(), "yes").put(Key::MachineCordon { machine: "m2".into() }, "{}");
        assert_eq!(cordoned(&b.snap), ["m2"], "a cordon that does not decode reads as none, the others as before");
        let error = b.snap.machine_records()["m1"].cordon_error.clone().unwrap();
        assert!(error.starts_with("/p/machines/m1/cordon: cannot decode machine cordon: "), "{error}");
        let s = b.delete(m1()).delete(Key::MachineCordon { machine: "m2".into() }).done();
        assert!(cordoned(&s).is_empty());
        assert!(!s.machine_records()["m1"].has_cordon_key(), "deleted: error and all");
        // A cordon of a machine never seen is a record of its own, and a delete removes it.
        let s = Build::new().put(Key::MachineCordon { machine: "gone".into() }, "{}").done();
        assert!(s.machine("gone").is_none() && s.machine_records()["gone"].cordon.is_some());
    }

    /// Issue 37: a machine's load fault reaches its state (and so the scheduler); one that does not decode reads as
    /// none, so a stray write cannot keep units off a machine; a delete withdraws it.
    #[test]
    fn a_load_fault_reaches_the_machine_and_a_bad_one_reads_as_none() {
        let fault = || Key::MachineLoadFault { machine: "m1".into() };
        let b = Build::new().put_lease(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1"}"#, 7).put_lease(
            fault(),
            r#"{"reason":"disk full","sinceMs":3,"units":["a.service"]}"#,
            7,
        );
        let m1 = b.snap.machine("m1").unwrap().load_fault.unwrap();
        assert_eq!((m1.reason.as_str(), m1.since_ms, m1.units.len()), ("disk full", 3, 1));
        let b = b.put_lease(fault(), "full", 7);
        assert_eq!(b.snap.machine("m1").unwrap().load_fault, None, "a fault that does not decode is none");
        let b = b.put_lease(fault(), r#"{"reason":"x"}"#, 7);
        assert!(b.snap.machine("m1").unwrap().load_fault.is_some_and(|f| f.units.is_empty()));
        let s = b.delete(fault()).done();
        assert_eq!(s.machine("m1").unwrap().load_fault, None, "withdrawn");
    }

    #[test]
    fn leader_and_versions_follow_their_keys() {
        let b = Build::new()
            .put_lease(Key::EngineLeader, "m1", 9)
            .put(Key::EngineVersion, "1")
            .put(Key::LayoutVersion, "1");
        assert_eq!(b.snap.leader(), Some("m1"));
        assert_eq!(b.snap.leader_record().unwrap().lease, 9);
        assert_eq!((b.snap.engine_version(), b.snap.layout_version()), (Some(1), Some(1)));
        let s = b.delete(Key::EngineLeader).done();
        assert_eq!(s.leader(), None);
    }

    #[test]
    fn publishing_clones_only_the_touched_section() {
        let base = Build::new().unit("a.service", H1, None, "inactive").state("a.service", "m1", H1).done();
        let mut next = base.clone();
        let keys = Keys::new("/p");
        let k = keys.state("a.service", "m2");
        let v = br#"{"hash":"h","loadState":"l","activeState":"a","subState":"s"}"#;
        next.apply(&keys, k.as_bytes(), Change::Put { value: v, mod_revision: 99, lease: 0 });
        assert!(base.units.ptr_eq(&next.units));
        assert!(!base.states.ptr_eq(&next.states));
    }

    #[test]
    fn a_change_leaves_the_other_records_shared_and_the_old_snapshot_as_it_was() {
        let mut build = Build::new();
        for i in 0..300 {
            let name = format!("u{i}.service");
            build = build.unit(&name, H1, None, "launched").state(&name, "m1", H1);
        }
        let base = build.done();
        let mut next = base.clone();
        let keys = Keys::new("/p");
        next.apply(
            &keys,
            keys.unit_desired("u7.service").as_bytes(),
            Change::Put { value: b"loaded", mod_revision: 99, lease: 0 },
        );
        next.apply(&keys, keys.state("u8.service", "m1").as_bytes(), Change::Delete);
        assert_eq!(base.unit_record("u7.service").unwrap().desired(), Some(JobState::Launched));
        assert_eq!(next.unit_record("u7.service").unwrap().desired(), Some(JobState::Loaded));
        assert!(base.state_records().contains_key("u8.service"));
        assert!(!next.state_records().contains_key("u8.service"), "a unit without states leaves the section");
        let changed: Vec<_> = base.units.diff(&next.units).collect();
        assert_eq!(changed.len(), 1);
        for (name, record) in next.unit_records().iter().filter(|(n, _)| &***n != "u7.service") {
            assert!(Arc::ptr_eq(record, &base.unit_records()[name]), "{name} is shared");
        }
    }

    /// Layout 2 (issue 35, keys.rs): the desired state in the object, the placement in a schedule entry, the
    /// launched and restarted markers in the state. A reader sees the same unit as from layout 1's keys.
    #[test]
    fn a_layout_2_unit_reads_as_its_layout_1_twin() {
        let entry = |m: &str| Key::ScheduleEntry { machine: m.into(), unit: "a.service".into() };
        let state = |launched: &str| {
            format!(r#"{{"hash":"{H1}","loadState":"loaded","activeState":"active","subState":"running"{launched}}}"#)
        };
        let two = Build::new()
            .put(Key::Body { hash: H1.into() }, "body")
            .put(
                Key::UnitObject { unit: "a.service".into() },
                &format!(r#"{{"name":"a.service","hash":"{H1}","desired":"launched"}}"#),
            )
            .put(entry("m1"), &format!(r#"{{"hash":"{H1}","desired":"launched"}}"#))
            .put(Key::State { unit: "a.service".into(), machine: "m1".into() }, &state(""));
        let loaded = two.snap.unit("a.service").unwrap();
        assert_eq!((loaded.desired, loaded.target, loaded.current), (JobState::Launched, Some("m1"), JobState::Loaded));
        let before = two.snap.clone();
        let two = two.put(
            Key::State { unit: "a.service".into(), machine: "m1".into() },
            &state(&format!(r#","launched":"{H1}","restartedFor":"r1""#)),
        );
        assert!(!two.snap.same_except_states(&before), "a launched marker in a state is a unit change");
        let one = Build::new()
            .unit("a.service", H1, None, "launched")
            .put(Key::UnitTarget { unit: "a.service".into() }, "m1")
            .put(Key::UnitLaunched { unit: "a.service".into(), machine: "m1".into() }, H1)
            .put(Key::UnitRestarted { unit: "a.service".into(), machine: "m1".into() }, "r1")
            .state("a.service", "m1", H1);
        let (a2, a1) = (two.snap.unit("a.service").unwrap(), one.snap.unit("a.service").unwrap());
        assert_eq!((a2.desired, a2.target, a2.current), (a1.desired, a1.target, a1.current));
        assert_eq!(a2.current, JobState::Launched);
        let (r2, r1) = (two.snap.unit_record("a.service").unwrap(), one.snap.unit_record("a.service").unwrap());
        assert_eq!(r2.launched("m1"), r1.launched("m1"));
        assert_eq!(r2.restarted_for("m1").map(|r| &**r), Some("r1"));
        assert_eq!(two.snap.running_hash("a.service", "m1"), Some(H1));
        // The state goes (its machine's lease ended): so does what it carried.
        let gone = two.delete(Key::State { unit: "a.service".into(), machine: "m1".into() }).done();
        let r = gone.unit_record("a.service").unwrap();
        assert_eq!((r.launched("m1"), r.restarted_for("m1")), (None, None));
        assert_eq!(gone.unit("a.service").unwrap().current, JobState::Inactive);
    }

    /// While a cluster moves from layout 1 to 2 both can be there for a moment: layout 1's keys win, so a reader
    /// never sees a unit go back to what an older write said.
    #[test]
    fn layout_1_keys_win_over_layout_2_fields() {
        let entry = Key::ScheduleEntry { machine: "m2".into(), unit: "a.service".into() };
        let b = Build::new()
            .put(Key::Body { hash: H1.into() }, "body")
            .put(Key::UnitObject { unit: "a.service".into() }, &format!(r#"{{"name":"a.service","hash":"{H1}","desired":"loaded"}}"#))
            .put(Key::UnitDesired { unit: "a.service".into() }, "launched")
            .put(Key::UnitTarget { unit: "a.service".into() }, "m1")
            .put(entry.clone(), &format!(r#"{{"hash":"{H1}","desired":"loaded"}}"#))
            .put(Key::UnitLaunched { unit: "a.service".into(), machine: "m1".into() }, H1)
            .put(
                Key::State { unit: "a.service".into(), machine: "m1".into() },
                &format!(r#"{{"hash":"{H1}","loadState":"loaded","activeState":"active","subState":"running","launched":"{H2}"}}"#),
            );
        let u = b.snap.unit("a.service").unwrap();
        assert_eq!((u.desired, u.target), (JobState::Launched, Some("m1")));
        assert_eq!(b.snap.unit_record("a.service").unwrap().launched("m1").map(|h| &**h), Some(H1));
        let b = b
            .delete(Key::UnitDesired { unit: "a.service".into() })
            .delete(Key::UnitTarget { unit: "a.service".into() });
        let u = b.snap.unit("a.service").unwrap();
        assert_eq!((u.desired, u.target), (JobState::Loaded, Some("m2")), "then layout 2's");
        let b = b.delete(Key::UnitLaunched { unit: "a.service".into(), machine: "m1".into() });
        assert_eq!(b.snap.unit_record("a.service").unwrap().launched("m1").map(|h| &**h), Some(H2));
    }

    /// A global unit in layout 2: its object as any unit's, and an entry on every machine (`global`), which is
    /// no placement; a pinned version in an entry is kept from garbage collection.
    #[test]
    fn a_global_units_entries_are_not_placements() {
        let pin = Key::ScheduleEntry { machine: "m1".into(), unit: "g.service".into() };
        let b = Build::new()
            .put(Key::Body { hash: H1.into() }, "old")
            .put(Key::Body { hash: H2.into() }, "new")
            .put(
                Key::UnitObject { unit: "g.service".into() },
                &format!(r#"{{"name":"g.service","hash":"{H2}","desired":"launched"}}"#),
            )
            .put(pin.clone(), &format!(r#"{{"hash":"{H1}","desired":"launched","global":true}}"#));
        let r = b.snap.unit_record("g.service").unwrap();
        assert_eq!(r.target(), None, "a global unit's entry is no placement");
        assert_eq!(r.entries().get("m1").map(|e| &*e.hash), Some(H1));
        let u = b.snap.unit("g.service").unwrap();
        assert_eq!((u.hash, u.desired, u.target), (H2, JobState::Launched, None));
        assert!(b.snap.unreferenced_bodies().is_empty(), "the pinned version is needed");
        let s = b.delete(pin).done();
        assert_eq!(s.unreferenced_bodies().iter().map(|(h, _)| h.as_str()).collect::<Vec<_>>(), [H1]);
    }

    /// Layout 2's keys with names no fleet writer can write, or values that do not decode, are ignored, as every
    /// other key is.
    #[test]
    fn bad_layout_2_keys_and_values_are_ignored() {
        let s = Build::new()
            .put(
                Key::ScheduleEntry { machine: "m1".into(), unit: "..".into() },
                &format!(r#"{{"hash":"{H1}","desired":"launched"}}"#),
            )
            .put(
                Key::ScheduleEntry { machine: "m1".into(), unit: "b.service".into() },
                r#"{"hash":"x","desired":"running"}"#,
            )
            .put(Key::MachineDrained { machine: "m1".into() }, r#"{"units":["a.service"]}"#)
            .put(Key::MachineDrained { machine: "m2".into() }, "[")
            .done();
        assert!(s.unit_records().is_empty(), "{:?}", s.unit_records());
        let drained = s.machine_records()["m1"].drained.as_ref().unwrap();
        assert_eq!(drained.units.iter().collect::<Vec<_>>(), ["a.service"]);
        assert!(!s.machine_records().contains_key("m2"));
    }
}

//! What the cluster page shows, and what changed between two registry views (pure: snapshots in, values out).
//!
//! The board is machines (columns, with their metadata) × units (rows); a cell is the unit's published systemd
//! state on that machine, or `scheduled` where the engine placed the unit and its agent has not published yet, with
//! the unit's health there when it has a health check (docs/health.md).
//! Beside it, the rollouts panel (issue 38): every stored rollout as the API shows it (any kind, drains too), its
//! per-machine steps with the health the machine publishes, and the actions a user may ask of it now.
//! [`diff`] compares two snapshots and yields the rows, columns and rollouts to send to open pages plus the state
//! changes to remember for a unit's detail; rows and the panel are whole (never deltas), so applying one twice is
//! harmless.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use fleet_core::api_rules;
use fleet_core::model::{Health, MachineState, short_hash, short_machine_id};
use fleet_core::rollout::{RolloutKind, RolloutState, Step};
use fleet_core::schema;
use fleet_registry::{Section, Snapshot};
use imbl::ordmap::DiffItem;

/// A machine column: its ID, address, merged metadata, and whether it is cordoned (issue 38).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    pub id: String,
    pub short: String,
    pub ip: String,
    pub metadata: BTreeMap<String, String>,
    pub cordoned: bool,
}

/// One unit's state on one machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// `active`, `failed`, … or `scheduled` (placed here, nothing published yet).
    pub active: String,
    pub sub: String,
    pub load: String,
    /// Hash of the version this machine holds (empty while only scheduled).
    pub hash: String,
    /// Hash of the version this machine last started (its launched marker), if any.
    pub running: String,
    /// Hash of the version this machine should run now: the desired one, or the one a replace rollout keeps here
    /// until its step ([`fleet_core::rollout::hash_on`], what the machine's agent runs).
    pub intended: String,
    /// The engine placed the unit on this machine.
    pub target: bool,
    /// The unit's health check on this machine, for a unit that has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
}

/// One unit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub name: String,
    pub desired: String,
    pub current: String,
    /// The desired version's full hash.
    pub hash: String,
    pub target: Option<String>,
    /// Machine ID → cell.
    pub cells: BTreeMap<String, Cell>,
}

/// One rollout in the rollouts panel, from its wire form ([`api_rules::stored_rollout`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RolloutRow {
    pub id: String,
    /// `replace`, `restart`, `rebalance`, … as the API spells it: a kind this page does not know is shown as is.
    pub kind: String,
    /// The units the spec names, else those its steps name (a rebalance plans its moves).
    pub units: Vec<String>,
    pub state: String,
    /// Why it is paused, failed or ended; with an undo, the undo's reason.
    pub reason: String,
    pub steps: Vec<StepRow>,
    /// The steps returning machines to the old version (an abort or a rollback of a replace).
    pub undo: Vec<StepRow>,
    /// What a user may ask of it now ([`actions_of`]); the page offers them to the admin role only.
    pub actions: Vec<&'static str>,
    /// Set when a key of it does not decode.
    pub error: String,
}

/// One (unit, machine) step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepRow {
    pub unit: String,
    pub machine: String,
    /// Where the unit leaves from (a move: rebalance, drain); empty otherwise.
    pub from: String,
    pub phase: String,
    pub detail: String,
    /// The unit's health check on the machine, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
}

/// The whole page at one registry revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Board {
    pub revision: i64,
    pub connected: bool,
    pub machines: Vec<Column>,
    pub rows: Vec<Row>,
    pub rollouts: Vec<RolloutRow>,
}

/// What open pages must apply after a registry change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Update {
    pub revision: i64,
    pub connected: bool,
    /// The new columns, when machines or their metadata changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machines: Option<Vec<Column>>,
    /// Rows that are new or changed, whole.
    pub rows: Vec<Row>,
    /// Units no longer shown.
    pub removed: Vec<String>,
    /// The whole rollouts panel, when it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollouts: Option<Vec<RolloutRow>>,
}

impl Update {
    /// True when a page has nothing to apply (revision and connection aside).
    pub fn is_empty(&self) -> bool {
        self.machines.is_none() && self.rows.is_empty() && self.removed.is_empty() && self.rollouts.is_none()
    }
}

/// One remembered change of a unit, for its detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateChange {
    pub unit: String,
    /// The machine it happened on; `None` for changes of the unit itself (desired state, version, placement).
    pub machine: Option<String>,
    /// What changed, e.g. `activating/start → active/running`.
    pub change: String,
}

/// The result of comparing two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    pub update: Update,
    pub changes: Vec<StateChange>,
    /// Units that left the registry (their remembered changes can go).
    pub gone: Vec<String>,
}

/// The columns: present machines in ID order.
pub fn columns(snapshot: &Snapshot) -> Vec<Column> {
    snapshot.machines().map(column).collect()
}

fn column(m: MachineState) -> Column {
    Column {
        short: short_machine_id(&m.id).to_string(),
        id: m.id,
        ip: m.public_ip,
        metadata: m.metadata,
        cordoned: m.cordoned,
    }
}

/// The row of `name`, if the unit is readable (its object and body are stored).
pub fn row(snapshot: &Snapshot, name: &str) -> Option<Row> {
    row_with(snapshot, &snapshot.rollouts(), name)
}

/// [`row`] with `snapshot`'s rollouts ([`Snapshot::rollouts`]) read once for many rows.
fn row_with(snapshot: &Snapshot, rollouts: &[fleet_core::rollout::Rollout], name: &str) -> Option<Row> {
    let unit = snapshot.unit(name)?;
    let record = snapshot.unit_record(name)?;
    let intended = |machine: &str| fleet_core::rollout::hash_on(rollouts, name, unit.hash, machine).to_string();
    let mut cells = BTreeMap::new();
    for (machine, state) in snapshot.state_records().get(name).into_iter().flat_map(|states| states.iter()) {
        cells.insert(
            machine.to_string(),
            Cell {
                active: state.active_state.to_string(),
                sub: state.sub_state.to_string(),
                load: state.load_state.to_string(),
                hash: state.hash.to_string(),
                running: record.launched(machine).map(|h| h.to_string()).unwrap_or_default(),
                intended: intended(machine),
                target: unit.target == Some(&**machine),
                health: state.health.clone(),
            },
        );
    }
    if let Some(target) = unit.target {
        cells.entry(target.to_string()).or_insert_with(|| Cell {
            active: "scheduled".into(),
            sub: String::new(),
            load: String::new(),
            hash: String::new(),
            running: record.launched(target).map(|h| h.to_string()).unwrap_or_default(),
            intended: intended(target),
            target: true,
            health: None,
        });
    }
    Some(Row {
        name: name.to_string(),
        desired: unit.desired.to_string(),
        current: current(&unit, name, &cells),
        hash: unit.hash.to_string(),
        target: unit.target.map(str::to_string),
        cells,
    })
}

/// What a person reads as the unit's current state. The API's `currentState` follows the unit's target machine,
/// which a global unit has none of (so it reads `inactive` while running everywhere); a global unit says how many
/// of the machines holding it run it active instead, e.g. `3/3 active`.
fn current(unit: &fleet_registry::UnitView<'_>, name: &str, cells: &BTreeMap<String, Cell>) -> String {
    // Only a unit without a target that machines report on can be global: the body is parsed for those alone.
    let global = unit.target.is_none()
        && !cells.is_empty()
        && fleet_core::unit::UnitFile::parse(unit.body)
            .is_ok_and(|file| fleet_core::unit::Requirements::of(&file, name).global);
    if !global {
        return unit.current.to_string();
    }
    let active = cells.values().filter(|c| c.active == "active").count();
    format!("{active}/{} active", cells.len())
}

/// The rollouts panel: every stored rollout, newest first, as the API lists them.
pub fn rollouts(snapshot: &Snapshot) -> Vec<RolloutRow> {
    api_rules::stored_rollouts(snapshot).iter().map(|r| rollout_row(snapshot, r)).collect()
}

fn rollout_row(snapshot: &Snapshot, r: &schema::Rollout) -> RolloutRow {
    let step = |s: &Step| StepRow {
        unit: s.unit.clone(),
        machine: s.machine.clone(),
        from: s.from_machine.clone(),
        phase: s.phase.as_str().to_string(),
        detail: s.detail.clone(),
        health: snapshot.state_record(&s.unit, &s.machine).and_then(|st| st.health.clone()),
    };
    let mut units: Vec<String> = r.units.iter().map(|u| u.name.clone()).collect();
    if units.is_empty() {
        let named: BTreeSet<&str> = r.steps.iter().map(|s| s.unit.as_str()).collect();
        units = named.into_iter().map(str::to_string).collect();
    }
    RolloutRow {
        id: r.id.clone(),
        // The kind as the API spells it, so that a kind added later is shown without a change here.
        kind: serde_json::to_value(r.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        units,
        state: r.state.as_str().to_string(),
        reason: r.reason.clone(),
        steps: r.steps.iter().map(step).collect(),
        undo: r.undo.iter().map(step).collect(),
        actions: actions_of(r),
        error: r.error.clone(),
    }
}

/// What a user may ask of rollout `r` now, as the API would accept it ([`api_rules::decide_control`]): pause a
/// running one, resume a paused one, abort either, promote one awaiting promotion, and roll back the unit of a
/// finished replace (a `fleetctl rollback`, to the version before).
pub fn actions_of(r: &schema::Rollout) -> Vec<&'static str> {
    if !r.error.is_empty() {
        return Vec::new();
    }
    let mut actions = Vec::new();
    match r.state {
        RolloutState::Running => actions.extend(["pause", "abort"]),
        RolloutState::Paused => actions.extend(["resume", "abort"]),
        RolloutState::Done if r.kind == RolloutKind::Replace && r.units.len() == 1 => actions.push("rollback"),
        _ => {}
    }
    if r.awaiting_promotion && !r.state.is_final() {
        actions.push("promote");
    }
    actions
}

/// The whole board of `snapshot`.
pub fn board(snapshot: &Snapshot) -> Board {
    Board {
        revision: snapshot.revision(),
        connected: snapshot.is_connected(),
        machines: columns(snapshot),
        rows: {
            let rollouts = snapshot.rollouts();
            snapshot.units().filter_map(|u| row_with(snapshot, &rollouts, u.name)).collect()
        },
        rollouts: rollouts(snapshot),
    }
}

/// What changed from `old` to `new`: rows and columns for open pages, state changes to remember.
///
/// Cheap when little changed: sections the two snapshots share (copied on write) are skipped without a look, and
/// only units whose records differ are rebuilt.
pub fn diff(old: &Snapshot, new: &Snapshot) -> Diff {
    let mut out = Diff::default();
    out.update.revision = new.revision();
    out.update.connected = new.is_connected();
    if !std::ptr::eq(old.machine_records(), new.machine_records()) {
        let (before, after) = (columns(old), columns(new));
        if before != after {
            out.update.machines = Some(after);
        }
    }
    let mut changed: BTreeSet<&str> = BTreeSet::new();
    differing_keys(old.unit_records(), new.unit_records(), &mut changed);
    differing_keys(old.state_records(), new.state_records(), &mut changed);
    if !old.bodies().ptr_eq(new.bodies()) {
        // A unit is shown only while its body is stored: a body arriving or going changes rows, not records.
        for name in new.unit_records().keys() {
            if old.unit(name).is_some() != new.unit(name).is_some() {
                changed.insert(name);
            }
        }
    }
    let rollouts_changed = old.rollout_records() != new.rollout_records();
    if rollouts_changed {
        // A rollout decides which version a machine should run (`rollout::hash_on`): the rows of the units a
        // changed rollout names are rebuilt, though no record of theirs changed.
        for (id, record) in old.rollout_records().iter().chain(new.rollout_records()) {
            if old.rollout_records().get(id) == new.rollout_records().get(id) {
                continue;
            }
            let spec = record.spec.iter().flat_map(|s| s.units.iter().map(|u| u.name.as_str()));
            let steps = record.progress.iter().flat_map(|p| p.steps.iter().chain(&p.undo).map(|s| s.unit.as_str()));
            changed.extend(
                spec.chain(steps)
                    .filter(|name| new.unit_records().contains_key(*name) || old.unit_records().contains_key(*name)),
            );
        }
    }
    if rollouts_changed || !changed.is_empty() {
        // Steps show the health their machines publish: a state change can change the panel too.
        let after = rollouts(new);
        if rollouts(old) != after {
            out.update.rollouts = Some(after);
        }
    }
    let (old_rollouts, new_rollouts) =
        if changed.is_empty() { (Vec::new(), Vec::new()) } else { (old.rollouts(), new.rollouts()) };
    for name in changed {
        let (before, after) = (row_with(old, &old_rollouts, name), row_with(new, &new_rollouts, name));
        if new.unit_record(name).is_none() {
            out.gone.push(name.to_string());
        }
        match (&before, &after) {
            (_, Some(after)) if before.as_ref() != Some(after) => out.update.rows.push(after.clone()),
            (Some(_), None) => out.update.removed.push(name.to_string()),
            _ => {}
        }
        changes_of(name, before.as_ref(), after.as_ref(), &mut out.changes);
    }
    out
}

/// Adds the keys whose records differ between `old` and `new` (added, removed or changed). Nodes the two sections
/// share are skipped without a look, and for `Arc` values of an `Eq` type `!=` compares pointers first: a diff costs
/// what changed, not the number of units.
fn differing_keys<'a, V: PartialEq + Clone>(old: &'a Section<V>, new: &'a Section<V>, out: &mut BTreeSet<&'a str>) {
    for item in old.diff(new) {
        out.insert(match item {
            DiffItem::Add(key, _) | DiffItem::Remove(key, _) => key,
            DiffItem::Update { new: (key, _), .. } => key,
        });
    }
}

/// The remembered changes between two versions of one row.
fn changes_of(name: &str, before: Option<&Row>, after: Option<&Row>, out: &mut Vec<StateChange>) {
    let unit_change = |change: String| StateChange { unit: name.to_string(), machine: None, change };
    let machine_change =
        |machine: &str, change: String| StateChange { unit: name.to_string(), machine: Some(machine.into()), change };
    match (before, after) {
        (None, None) => {}
        (None, Some(row)) => {
            out.push(unit_change(format!("stored version {} (desired {})", short_hash(&row.hash), row.desired)))
        }
        (Some(_), None) => out.push(unit_change("destroyed".into())),
        (Some(old), Some(new)) => {
            if old.hash != new.hash {
                out.push(unit_change(format!("version {} → {}", short_hash(&old.hash), short_hash(&new.hash))));
            }
            if old.desired != new.desired {
                out.push(unit_change(format!("desired {} → {}", old.desired, new.desired)));
            }
            if old.target != new.target {
                let placed =
                    |t: &Option<String>| t.as_deref().map_or("nowhere".into(), |m| short_machine_id(m).to_string());
                out.push(unit_change(format!("scheduled {} → {}", placed(&old.target), placed(&new.target))));
            }
        }
    }
    let empty = BTreeMap::new();
    let old_cells = before.map_or(&empty, |r| &r.cells);
    let new_cells = after.map_or(&empty, |r| &r.cells);
    let machines: BTreeSet<&String> = old_cells.keys().chain(new_cells.keys()).collect();
    for machine in machines {
        let text = |c: Option<&Cell>| c.map_or("absent".to_string(), cell_text);
        let (was, is) = (old_cells.get(machine), new_cells.get(machine));
        if was.map(cell_text) != is.map(cell_text) {
            out.push(machine_change(machine, format!("{} → {}", text(was), text(is))));
        } else if let (Some(was), Some(is)) = (was, is) {
            if was.hash != is.hash {
                out.push(machine_change(
                    machine,
                    format!("holds version {} → {}", short_hash(&was.hash), short_hash(&is.hash)),
                ));
            }
        }
        let status = |c: Option<&Cell>| c.and_then(|c| c.health.as_ref()).map(|h| h.status);
        if let (before, Some(after)) = (status(was), is.and_then(|c| c.health.as_ref())) {
            if before != Some(after.status) {
                let mut change = format!("health {} → {}", before.map_or("-", |s| s.as_str()), after.status);
                if !after.output.is_empty() {
                    change.push_str(": ");
                    change.push_str(&after.output);
                }
                out.push(machine_change(machine, change));
            }
        }
    }
}

/// A state change as remembered: when it was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recorded {
    pub at_ms: u64,
    pub change: StateChange,
}

/// A unit's detail: its row, the stored file and the version before the last replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    pub row: Row,
    pub previous_hash: Option<String>,
    pub body: String,
}

/// The detail of `name`, if the unit is readable.
pub fn detail(snapshot: &Snapshot, name: &str) -> Option<Detail> {
    let unit = snapshot.unit(name)?;
    Some(Detail {
        previous_hash: unit.previous_hash.map(str::to_string),
        body: unit.body.to_string(),
        row: row(snapshot, name)?,
    })
}

/// A cell as one short text: `active/running`, or `scheduled`.
pub fn cell_text(cell: &Cell) -> String {
    if cell.sub.is_empty() { cell.active.clone() } else { format!("{}/{}", cell.active, cell.sub) }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use fleet_registry::{Change, Key, Keys};

    pub(crate) const H1: &str = "1c6fb6f3684bafb0c173d8b8b957ceff031180c1";
    pub(crate) const H2: &str = "a0f275d46bc6ee0eca06be7c339913c07d99c0c7";
    pub(crate) const M1: &str = "aaaaaaaa11111111111111111111111111";
    pub(crate) const M2: &str = "bbbbbbbb22222222222222222222222222";

    /// Applies registry key changes to a snapshot, as the reflector would.
    pub(crate) struct Registry {
        keys: Keys,
        pub snap: Snapshot,
        rev: i64,
    }

    impl Registry {
        pub fn new() -> Registry {
            let keys = Keys::new("/p");
            Registry { snap: Snapshot::from_kvs(&keys, 1, []), keys, rev: 1 }
        }
        pub fn put(&mut self, key: Key, value: &str) -> &mut Registry {
            self.rev += 1;
            let raw = self.keys.build(&key);
            self.snap.apply(
                &self.keys,
                raw.as_bytes(),
                Change::Put { value: value.as_bytes(), mod_revision: self.rev, lease: 1 },
            );
            self.snap.set_revision(self.rev);
            self
        }
        pub fn delete(&mut self, key: Key) -> &mut Registry {
            self.rev += 1;
            let raw = self.keys.build(&key);
            self.snap.apply(&self.keys, raw.as_bytes(), Change::Delete);
            self.snap.set_revision(self.rev);
            self
        }
        pub fn machine(&mut self, id: &str, ip: &str, metadata: &str) -> &mut Registry {
            let object = format!(r#"{{"id":"{id}","publicIP":"{ip}","metadata":{metadata},"version":"1"}}"#);
            self.put(Key::MachineObject { machine: id.into() }, &object)
        }
        pub fn unit(&mut self, name: &str, hash: &str, desired: &str) -> &mut Registry {
            let object = format!(r#"{{"name":"{name}","hash":"{hash}"}}"#);
            self.put(Key::Body { hash: hash.into() }, &format!("[Service]\nExecStart=/bin/true # {hash}\n"))
                .put(Key::UnitObject { unit: name.into() }, &object)
                .put(Key::UnitDesired { unit: name.into() }, desired)
        }
        pub fn cordon(&mut self, machine: &str) -> &mut Registry {
            self.put(Key::MachineCordon { machine: machine.into() }, r#"{"sinceMs":1}"#)
        }
        pub fn target(&mut self, name: &str, machine: &str) -> &mut Registry {
            self.put(Key::UnitTarget { unit: name.into() }, machine)
        }
        pub fn state(&mut self, name: &str, machine: &str, hash: &str, active: &str, sub: &str) -> &mut Registry {
            let value =
                format!(r#"{{"hash":"{hash}","loadState":"loaded","activeState":"{active}","subState":"{sub}"}}"#);
            self.put(Key::State { unit: name.into(), machine: machine.into() }, &value)
        }
        pub fn state_with_health(
            &mut self,
            name: &str,
            machine: &str,
            hash: &str,
            status: &str,
            output: &str,
        ) -> &mut Registry {
            let value = format!(
                r#"{{"hash":"{hash}","loadState":"loaded","activeState":"active","subState":"running","health":{{"status":"{status}","sinceMs":1,"output":"{output}"}}}}"#
            );
            self.put(Key::State { unit: name.into(), machine: machine.into() }, &value)
        }
        pub fn launched(&mut self, name: &str, machine: &str, hash: &str) -> &mut Registry {
            self.put(Key::UnitLaunched { unit: name.into(), machine: machine.into() }, hash)
        }
        pub fn now(&self) -> Snapshot {
            self.snap.clone()
        }
        /// Stores replace rollout `id` of `unit` from H1 to H2, one machine at a time, with `progress`.
        pub fn replace_rollout(
            &mut self,
            id: &str,
            unit: &str,
            progress: &fleet_core::rollout::RolloutProgress,
        ) -> &mut Registry {
            use fleet_core::rollout::{RolloutKind, RolloutSpec, RolloutUnit};
            let changed = RolloutUnit { name: unit.into(), from: H1.into(), to: H2.into(), ..RolloutUnit::default() };
            let spec = RolloutSpec {
                id: id.into(),
                kind: RolloutKind::Replace,
                units: vec![changed],
                max_unavailable: 1,
                ..RolloutSpec::default()
            };
            self.put(Key::RolloutSpec { id: id.into() }, &serde_json::to_string(&spec).unwrap());
            self.put(Key::RolloutProgress { id: id.into() }, &serde_json::to_string(progress).unwrap())
        }
    }

    #[test]
    fn a_global_unit_reads_how_many_of_its_machines_run_it_active() {
        let mut reg = Registry::new();
        reg.machine(M1, "10.0.0.1", "{}").machine(M2, "10.0.0.2", "{}");
        let global = "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nGlobal=true\n";
        reg.put(Key::Body { hash: H1.into() }, global)
            .put(Key::UnitObject { unit: "g.service".into() }, &format!(r#"{{"name":"g.service","hash":"{H1}"}}"#))
            .put(Key::UnitDesired { unit: "g.service".into() }, "launched");
        reg.state("g.service", M1, H1, "active", "running").state("g.service", M2, H1, "active", "running");
        assert_eq!(row(&reg.snap, "g.service").unwrap().current, "2/2 active", "running everywhere");
        reg.state("g.service", M2, H1, "failed", "failed");
        assert_eq!(row(&reg.snap, "g.service").unwrap().current, "1/2 active");
        // A unit that is not global keeps the API's current state, target or not.
        reg.unit("plain.service", H2, "launched").state("plain.service", M1, H2, "active", "running");
        assert_eq!(row(&reg.snap, "plain.service").unwrap().current, "inactive", "no target: the API's answer");
    }

    #[test]
    fn a_board_has_machines_as_columns_and_units_as_rows_with_each_cell_a_state() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", r#"{"region":"eu"}"#).machine(M2, "10.0.0.2", "{}");
        r.unit("web.service", H1, "launched").target("web.service", M1).state(
            "web.service",
            M1,
            H1,
            "active",
            "running",
        );
        r.launched("web.service", M1, H1);
        r.unit("db.service", H2, "launched").target("db.service", M2);
        let b = board(&r.now());
        assert_eq!(b.machines.iter().map(|c| c.short.as_str()).collect::<Vec<_>>(), ["aaaaaaaa", "bbbbbbbb"]);
        assert_eq!(b.machines[0].metadata.get("region").map(String::as_str), Some("eu"));
        assert_eq!(b.rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["db.service", "web.service"]);
        let web = &b.rows[1];
        assert_eq!((web.desired.as_str(), web.current.as_str()), ("launched", "launched"));
        assert_eq!(cell_text(&web.cells[M1]), "active/running");
        assert_eq!(web.cells[M1].running, H1);
        assert!(web.cells[M1].target);
        assert_eq!(cell_text(&b.rows[0].cells[M2]), "scheduled", "placed, nothing published yet");
        assert!(!b.rows[0].cells.contains_key(M1));
    }

    #[test]
    fn diff_sends_only_changed_rows_and_remembers_each_state_change() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}");
        r.unit("a.service", H1, "launched").target("a.service", M1).state("a.service", M1, H1, "activating", "start");
        r.unit("b.service", H1, "loaded");
        let before = r.now();
        r.state("a.service", M1, H1, "active", "running");
        let d = diff(&before, &r.now());
        assert_eq!(d.update.rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a.service"]);
        assert!(d.update.machines.is_none() && d.update.removed.is_empty());
        assert_eq!(
            d.changes,
            [StateChange {
                unit: "a.service".into(),
                machine: Some(M1.into()),
                change: "activating/start → active/running".into()
            }]
        );
    }

    #[test]
    fn a_cell_carries_the_health_of_a_checked_unit_and_its_changes_are_remembered() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}");
        r.unit("web.service", H1, "launched").target("web.service", M1);
        r.state_with_health("web.service", M1, H1, "unknown", "");
        let before = r.now();
        assert_eq!(board(&before).rows[0].cells[M1].health.as_ref().map(|h| h.status.as_str()), Some("unknown"));
        r.state_with_health("web.service", M1, H1, "unhealthy", "refused");
        let d = diff(&before, &r.now());
        let texts: Vec<&str> = d.changes.iter().map(|c| c.change.as_str()).collect();
        assert_eq!(texts, ["health unknown → unhealthy: refused"]);
        assert_eq!(d.update.rows.len(), 1, "the row is sent again");
        r.unit("plain.service", H2, "launched").target("plain.service", M1).state(
            "plain.service",
            M1,
            H2,
            "active",
            "running",
        );
        assert_eq!(board(&r.now()).rows[0].cells[M1].health, None, "no check, no health");
    }

    #[test]
    fn diff_of_identical_snapshots_is_empty() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}").unit("a.service", H1, "launched");
        let s = r.now();
        let d = diff(&s, &s.clone());
        assert!(d.update.is_empty() && d.changes.is_empty() && d.gone.is_empty(), "{d:?}");
    }

    #[test]
    fn diff_names_destroyed_units_new_versions_and_machine_changes() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}");
        r.unit("a.service", H1, "launched").unit("b.service", H1, "launched");
        let before = r.now();
        r.delete(Key::UnitObject { unit: "a.service".into() }).delete(Key::UnitDesired { unit: "a.service".into() });
        r.unit("b.service", H2, "launched");
        r.machine(M2, "10.0.0.2", r#"{"disk":"ssd"}"#);
        let d = diff(&before, &r.now());
        assert_eq!(d.update.removed, ["a.service"]);
        assert_eq!(d.gone, ["a.service"]);
        assert_eq!(d.update.rows.len(), 1);
        assert_eq!(d.update.rows[0].hash, H2);
        assert_eq!(d.update.machines.as_ref().map(Vec::len), Some(2));
        let texts: Vec<&str> = d.changes.iter().map(|c| c.change.as_str()).collect();
        assert_eq!(texts, ["destroyed", "version 1c6fb6f → a0f275d"]);
    }

    /// A rollout-only change (its progress moves, no record of the unit does) rebuilds the unit's row, whose
    /// machines' intended versions it decides, and sends the rollouts panel.
    #[test]
    fn a_rollout_only_change_rebuilds_the_units_row_and_the_panel() {
        use fleet_core::rollout::{Phase, RolloutProgress, RolloutState, Step};
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}").unit("db.service", H2, "launched").state(
            "db.service",
            M1,
            H1,
            "active",
            "running",
        );
        r.put(Key::Body { hash: H1.into() }, "[Service]\nExecStart=/bin/true # old\n");
        let progress = |phase| RolloutProgress {
            state: RolloutState::Running,
            steps: vec![Step { phase, ..Step::pending("db.service", M1) }],
            ..RolloutProgress::default()
        };
        r.replace_rollout("r1", "db.service", &progress(Phase::Pending));
        let before = r.now();
        assert_eq!(board(&before).rows[0].cells[M1].intended, H1, "pending: the old version");
        assert_eq!(board(&before).rollouts[0].actions, ["pause", "abort"]);
        r.replace_rollout("r1", "db.service", &progress(Phase::Updating));
        let d = diff(&before, &r.now());
        assert_eq!(d.update.rows.iter().map(|r| r.cells[M1].intended.as_str()).collect::<Vec<_>>(), [H2]);
        let panel = d.update.rollouts.expect("the panel is sent");
        assert_eq!((panel[0].kind.as_str(), panel[0].steps[0].phase.as_str()), ("replace", "updating"));
        assert!(diff(&r.now(), &r.now()).update.rollouts.is_none(), "unchanged: not sent");
    }
}

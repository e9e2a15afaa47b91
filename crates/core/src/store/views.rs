//! Derived, read-only views of a [`Snapshot`] in the orders the API and fleetctl list them (spec §8): units by
//! name with their current state (§7.2), unit states by name then machine, present machines by ID with merged
//! metadata (§3.3), and which bodies garbage collection may delete. Pure functions over the snapshot.

use std::sync::Arc;

use super::records::StateRecord;
use super::snapshot::{MachineRecord, Snapshot, UnitRecord};
use crate::model::{JobState, MachineState, PublishedState};

/// One unit as the API and engine see it: a unit object whose body is present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitView<'a> {
    pub name: &'a str,
    pub hash: &'a str,
    /// Hash before the last replacement (rollback target), if any.
    pub previous_hash: Option<&'a str>,
    /// Canonical unit text (parse it with the unit module).
    pub body: &'a Arc<str>,
    /// Desired state; a missing or unreadable `desired` key reads as `inactive`.
    pub desired: JobState,
    /// Machine the engine scheduled it to.
    pub target: Option<&'a str>,
    /// Derived current state (§7.2). Callers show `inactive` for global units regardless.
    pub current: JobState,
    /// The version was stored without restart (`UnitObject::no_restart`).
    pub no_restart: bool,
}

/// A present machine's state: its presence object with dynamic metadata merged, cordoned while its cordon key
/// decodes, with the load fault its agent published.
fn machine_state(m: &MachineRecord) -> Option<MachineState> {
    let mut state = m.object.as_ref()?.merged(&m.metadata);
    state.cordoned = m.cordon.is_some();
    state.load_fault = m.load_fault.clone();
    Some(state)
}

/// Current state of a non-global unit (spec §7.2): `inactive` without a target or without a state published by
/// the target machine; `launched` if the target machine also marked it launched; `loaded` otherwise.
pub fn current_state(target: Option<&str>, state_published_by_target: bool, launched_by_target: bool) -> JobState {
    match target {
        None => JobState::Inactive,
        Some(_) if !state_published_by_target => JobState::Inactive,
        Some(_) if launched_by_target => JobState::Launched,
        Some(_) => JobState::Loaded,
    }
}

impl Snapshot {
    /// Current state of `name` (§7.2); `inactive` for unknown units.
    pub fn current_state(&self, name: &str) -> JobState {
        self.unit_record(name).map_or(JobState::Inactive, |r| self.current_state_of(name, r))
    }

    fn current_state_of(&self, name: &str, r: &UnitRecord) -> JobState {
        let target = r.target().map(|t| &**t);
        let published = target.is_some_and(|t| self.state_record(name, t).is_some());
        let launched = target.is_some_and(|t| r.launched(t).is_some());
        current_state(target, published, launched)
    }

    fn view<'a>(&'a self, name: &'a str, r: &'a UnitRecord) -> Option<UnitView<'a>> {
        let mut view = self.view_unstated(name, r)?;
        view.current = self.current_state_of(name, r);
        Some(view)
    }

    /// [`Self::view`] but for its current state, which it leaves `inactive` (reading it costs the unit's states):
    /// the one decision of whether a unit is readable, and what it reads as. A unit object whose body is present;
    /// in a scoped view, also a unit with an entry for the view's machine ([`Self::scoped_view`]).
    fn view_unstated<'a>(&'a self, name: &'a str, r: &'a UnitRecord) -> Option<UnitView<'a>> {
        let Some(object) = r.object() else { return self.scoped_view(name, r) };
        // A unit whose body is missing is invisible (spec §3.2, §6.1) rather than an error for every reader.
        let body = self.body(&object.hash)?;
        Some(UnitView {
            name,
            hash: &object.hash,
            previous_hash: object.previous_hash.as_deref(),
            body,
            desired: r.desired().unwrap_or(JobState::Inactive),
            target: r.target().map(|t| &**t),
            current: JobState::Inactive,
            no_restart: object.no_restart,
        })
    }

    /// In a view scoped to machine M (layout 2), a unit scheduled to M, and every global unit, has its entry there
    /// and no object: it is what the entry says (version, desired state, M as target unless global). A full view
    /// never lists a unit without its object (a destroyed unit's leftover entry).
    fn scoped_view<'a>(&'a self, name: &'a str, r: &'a UnitRecord) -> Option<UnitView<'a>> {
        let me = self.scope()?;
        let (machine, entry) = r.entries().iter().find(|(m, _)| &***m == me)?;
        let (hash, body) = self.bodies().get_key_value(&*entry.hash)?;
        Some(UnitView {
            name,
            hash,
            previous_hash: None,
            body: &body.text,
            desired: entry.desired,
            target: (!entry.global).then_some(&**machine),
            current: JobState::Inactive,
            no_restart: entry.no_restart,
        })
    }

    /// The hashes the schedule entries name whose bodies this snapshot does not hold (a scoped view fetches them).
    pub fn missing_entry_bodies(&self) -> std::collections::BTreeSet<String> {
        self.unit_records()
            .values()
            .flat_map(|r| r.entries().values().map(|e| &*e.hash))
            .filter(|hash| self.body(hash).is_none())
            .map(str::to_string)
            .collect()
    }

    /// Every rollout with a readable spec, newest first (by creation time, then ID).
    pub fn rollouts(&self) -> Vec<crate::rollout::Rollout> {
        let mut all: Vec<crate::rollout::Rollout> =
            self.rollout_records().values().filter_map(|r| r.rollout()).collect();
        all.sort_by(|a, b| (b.spec.created_ms, &b.spec.id).cmp(&(a.spec.created_ms, &a.spec.id)));
        all
    }

    /// `unit` as `machine` should run it now: what the machine's schedule entry says (layout 2: the engine decided
    /// it), else [`Snapshot::unit_by_rollouts`]. `rollouts` is [`Snapshot::rollouts`].
    pub fn unit_on<'a>(
        &'a self,
        unit: UnitView<'a>,
        machine: &str,
        rollouts: &'a [crate::rollout::Rollout],
    ) -> UnitView<'a> {
        let entry = self.unit_record(unit.name).and_then(|r| r.entries().get(machine));
        match entry.and_then(|e| Some((e, self.bodies().get_key_value(&*e.hash)?))) {
            Some((entry, (hash, body))) => UnitView { hash, body: &body.text, no_restart: entry.no_restart, ..unit },
            None => self.unit_by_rollouts(unit, machine, rollouts),
        }
    }

    /// `unit` as `machine` should run it by the rollouts alone: the stored version, or the one a replace rollout
    /// keeps there ([`crate::rollout::hash_on`]; its body, when stored). What the engine writes into entries.
    pub fn unit_by_rollouts<'a>(
        &'a self,
        unit: UnitView<'a>,
        machine: &str,
        rollouts: &'a [crate::rollout::Rollout],
    ) -> UnitView<'a> {
        let hash = crate::rollout::hash_on(rollouts, unit.name, unit.hash, machine);
        match self.bodies().get_key_value(hash).filter(|_| hash != unit.hash) {
            Some((hash, body)) => UnitView { hash, body: &body.text, no_restart: false, ..unit },
            None => unit,
        }
    }

    /// The restart a restart rollout asks of `unit` on `machine`: the machine's schedule entry's token (layout 2),
    /// else [`crate::rollout::restart_token`].
    pub fn restart_token<'a>(
        &'a self,
        unit: &str,
        machine: &str,
        rollouts: &'a [crate::rollout::Rollout],
    ) -> Option<&'a str> {
        match self.unit_record(unit).and_then(|r| r.entries().get(machine)) {
            Some(entry) => entry.restart.as_deref(),
            None => crate::rollout::restart_token(rollouts, unit, machine),
        }
    }

    /// The units drains keep stopped on `machine` ([`crate::rollout::drained_units`] while it is cordoned since
    /// `cordon_since_ms`): the machine's `drained` key when there is one (layout 2: the engine decided it), else
    /// from the drains among `rollouts`.
    pub fn drained_units<'a>(
        &'a self,
        machine: &str,
        cordon_since_ms: Option<u64>,
        rollouts: &'a [crate::rollout::Rollout],
    ) -> std::collections::BTreeSet<&'a str> {
        match self.machine_records().get(machine).and_then(|m| m.drained.as_ref()) {
            Some(drained) if cordon_since_ms.is_some() => drained.units.iter().map(String::as_str).collect(),
            Some(_) => std::collections::BTreeSet::new(),
            None => crate::rollout::drained_units(rollouts, machine, cordon_since_ms),
        }
    }

    /// Hash of the version `machine` last started of `unit` (its launched marker), if it runs it.
    pub fn running_hash(&self, unit: &str, machine: &str) -> Option<&str> {
        self.unit_record(unit)?.launched(machine).map(|h| &**h).filter(|h| !h.is_empty())
    }

    /// Every readable unit, in name order.
    pub fn units(&self) -> impl Iterator<Item = UnitView<'_>> {
        self.unit_records().iter().filter_map(|(name, r)| self.view(name, r))
    }

    /// The names of the readable units, in name order: [`Self::units`] without building their views (an API page
    /// builds only its own, [`Self::unit`]).
    pub fn unit_names(&self) -> impl Iterator<Item = &str> {
        self.unit_records().iter().filter(|(name, r)| self.view_unstated(name, r).is_some()).map(|(name, _)| &**name)
    }

    /// One readable unit.
    pub fn unit(&self, name: &str) -> Option<UnitView<'_>> {
        let (name, r) = self.unit_records().get_key_value(name)?;
        self.view(name, r)
    }

    /// Readable units scheduled to `machine`, in name order (what that machine's agent must run, global units
    /// aside).
    pub fn units_targeting<'a>(&'a self, machine: &'a str) -> impl Iterator<Item = UnitView<'a>> {
        self.units().filter(move |u| u.target == Some(machine))
    }

    /// Every published unit state as stored, by unit name then machine ID, unconverted: for a caller that keeps a
    /// few of many (an API page) and converts only those ([`StateRecord::into_state`]).
    pub fn state_entries(&self) -> impl Iterator<Item = (&str, &str, &StateRecord)> + '_ {
        self.state_records()
            .iter()
            .flat_map(|(unit, per_machine)| per_machine.iter().map(move |(m, r)| (&**unit, &**m, r)))
    }

    /// [`Self::state_entries`] of one unit, by machine ID.
    pub fn state_entries_of<'a>(&'a self, unit: &str) -> impl Iterator<Item = (&'a str, &'a str, &'a StateRecord)> {
        self.state_records()
            .get_key_value(unit)
            .into_iter()
            .flat_map(|(unit, per_machine)| per_machine.iter().map(move |(m, r)| (&**unit, &**m, r)))
    }

    /// Every published unit state, sorted by unit name then machine ID.
    pub fn unit_states(&self) -> impl Iterator<Item = PublishedState> + '_ {
        self.state_entries().map(|(unit, m, r)| r.clone().into_state(unit, m))
    }

    /// One state per unit scheduled to a machine whose presence is gone (the engine has not moved it yet: an
    /// at-most-once unit while the engine waits the margin out, or any unit no machine can take), by unit name:
    /// load and active state [`crate::model::UNKNOWN_STATE`], sub state [`crate::model::IN_DOUBT`], the unit's
    /// current hash. Its own states vanished with the machine's lease.
    pub fn unit_states_in_doubt(&self) -> impl Iterator<Item = PublishedState> + '_ {
        self.unit_records().iter().filter_map(|(name, r)| {
            // The record's target first (the view's, when it is readable): nearly every unit's machine is present,
            // and every page of a state listing asks this of every unit.
            r.target().filter(|t| !t.is_empty() && !self.is_present(t))?;
            let u = self.view_unstated(name, r)?;
            let target = u.target.filter(|t| !t.is_empty() && !self.is_present(t))?;
            Some(PublishedState {
                name: u.name.to_string(),
                machine_id: target.to_string(),
                hash: u.hash.to_string(),
                load_state: crate::model::UNKNOWN_STATE.into(),
                active_state: crate::model::UNKNOWN_STATE.into(),
                sub_state: crate::model::IN_DOUBT.into(),
                restarts: None,
                health: None,
                launched: None,
            })
        })
    }

    /// States of one unit, by machine ID.
    pub fn unit_states_of<'a>(&'a self, unit: &'a str) -> impl Iterator<Item = PublishedState> + 'a {
        self.state_entries_of(unit).map(|(unit, m, r)| r.clone().into_state(unit, m))
    }

    /// Present machines (with a presence object), sorted by ID, metadata merged (§3.3), cordon read from its key.
    pub fn machines(&self) -> impl Iterator<Item = MachineState> + '_ {
        self.machine_records().values().filter_map(machine_state)
    }

    /// Whether a machine is present (has a presence object), without building its state.
    pub fn is_present(&self, id: &str) -> bool {
        self.machine_records().get(id).is_some_and(|m| m.object.is_some())
    }

    /// One present machine by full ID. A machine with only dynamic metadata (or a cordon) left is absent, never a
    /// record with an empty ID (fixes B14).
    pub fn machine(&self, id: &str) -> Option<MachineState> {
        machine_state(self.machine_records().get(id)?)
    }

    /// Bodies nothing needs, with the mod revision they were seen at; pass them to `Registry::delete_bodies`.
    /// Needed: every version a unit object names (current, previous, history), every version a machine runs
    /// (launched marker) or holds on disk (published state), and both versions of a rollout that still holds
    /// machines (`rollout::needed_hashes`).
    pub fn unreferenced_bodies(&self) -> Vec<(String, i64)> {
        let rollouts = self.rollouts();
        let referenced: std::collections::HashSet<&str> = self
            .unit_records()
            .values()
            .flat_map(|r| {
                let stored = r.object().into_iter().flat_map(|o| {
                    std::iter::once(&*o.hash)
                        .chain(o.previous_hash.as_deref())
                        .chain(o.history.iter().map(|v| &*v.hash))
                });
                // What machines run (launched markers), even when history has moved past it.
                stored
                    .chain(r.launched_on().map(|(_, h)| &**h))
                    // The versions schedule entries keep machines on (layout 2: a rollout's pins).
                    .chain(r.entries().values().map(|e| &*e.hash))
            })
            // What machines hold on disk (published states).
            .chain(self.state_records().values().flat_map(|per_machine| per_machine.values().map(|s| &*s.hash)))
            .chain(crate::rollout::needed_hashes(rollouts.iter()))
            .collect();
        self.bodies()
            .iter()
            .filter(|(hash, _)| !referenced.contains(&hash.as_ref()))
            .map(|(hash, b)| (hash.to_string(), b.mod_revision))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::keys::Key;
    use crate::store::snapshot::tests::{Build, H1, H2};

    #[test]
    fn current_state_table() {
        use JobState::*;
        let cases = [
            (None, false, false, Inactive),
            (None, true, true, Inactive),
            (Some("m1"), false, false, Inactive),
            (Some("m1"), false, true, Inactive),
            (Some("m1"), true, false, Loaded),
            (Some("m1"), true, true, Launched),
        ];
        for (target, published, launched, want) in cases {
            assert_eq!(current_state(target, published, launched), want, "{target:?} {published} {launched}");
        }
    }

    #[test]
    fn current_state_looks_only_at_the_target_machine() {
        let launched = |m: &str| Key::UnitLaunched { unit: "a.service".into(), machine: m.into() };
        let b = Build::new()
            .unit("a.service", H1, None, "launched")
            .put(Key::UnitTarget { unit: "a.service".into() }, "m1")
            .state("a.service", "m2", H1)
            .put(launched("m2"), H1);
        assert_eq!(b.snap.current_state("a.service"), JobState::Inactive, "state only from another machine");
        let b = b.state("a.service", "m1", H1);
        assert_eq!(b.snap.current_state("a.service"), JobState::Loaded, "launched only by another machine");
        let b = b.put(launched("m1"), H1);
        assert_eq!(b.snap.current_state("a.service"), JobState::Launched);
        assert_eq!(b.snap.current_state("nope.service"), JobState::Inactive);
    }

    #[test]
    fn units_are_listed_by_name_and_need_a_body() {
        let s = Build::new()
            .unit("b.service", H2, Some(H1), "loaded")
            .unit("a.service", H1, None, "inactive")
            .put(
                Key::UnitObject { unit: "c.service".into() },
                &format!(r#"{{"name":"c.service","hash":"{}"}}"#, "f".repeat(40)),
            )
            .delete(Key::UnitDesired { unit: "a.service".into() })
            .done();
        let names: Vec<&str> = s.units().map(|u| u.name).collect();
        assert_eq!(names, ["a.service", "b.service"]);
        let b = s.unit("b.service").unwrap();
        assert_eq!((b.hash, b.previous_hash, b.desired, b.target), (H2, Some(H1), JobState::Loaded, None));
        assert_eq!(s.unit("a.service").unwrap().desired, JobState::Inactive, "missing desired reads inactive");
        assert!(s.unit("c.service").is_none(), "missing body hides the unit");
    }

    #[test]
    fn unit_names_are_the_listed_units_without_their_views() {
        let entry = |hash: &str| format!(r#"{{"hash":"{hash}","desired":"launched"}}"#);
        let at = |machine: &str, unit: &str| Key::ScheduleEntry { machine: machine.into(), unit: unit.into() };
        let unknown = "f".repeat(40);
        // A full view: two readable units, one whose body is missing, a leftover entry of a destroyed unit.
        let full = Build::new()
            .unit("b.service", H2, Some(H1), "loaded")
            .put(Key::UnitObject { unit: "c.service".into() }, &format!(r#"{{"name":"c.service","hash":"{unknown}"}}"#))
            .put(at("m1", "gone.service"), &entry(H1))
            .unit("a.service", H1, None, "launched")
            .done();
        // A view scoped to m1: its entry whose body it holds, its entry whose body it does not, m2's entry.
        let mut scoped = Build::new();
        scoped.snap = Snapshot::scoped("m1");
        let scoped = scoped
            .put(Key::Body { hash: H1.into() }, "[Service]\nExecStart=/bin/true\n")
            .put(at("m1", "x.service"), &entry(H1))
            .put(at("m1", "y.service"), &entry(&unknown))
            .put(at("m2", "z.service"), &entry(H1))
            .done();
        for (s, want) in [(&full, &["a.service", "b.service"][..]), (&scoped, &["x.service"][..])] {
            let names: Vec<&str> = s.unit_names().collect();
            let listed: Vec<&str> = s.units().map(|u| u.name).collect();
            assert_eq!(names, listed, "the names of the listed units, in order");
            assert_eq!(names, want);
        }
    }

    #[test]
    fn units_of_an_absent_machine_are_in_doubt() {
        let target = |u: &str| Key::UnitTarget { unit: u.into() };
        let s = Build::new()
            .put(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1"}"#)
            .unit("here.service", H1, None, "launched")
            .put(target("here.service"), "m1")
            .unit("gone.service", H2, None, "launched")
            .put(target("gone.service"), "m2")
            .unit("idle.service", H1, None, "launched")
            .done();
        let doubt: Vec<PublishedState> = s.unit_states_in_doubt().collect();
        assert_eq!(doubt.len(), 1, "{doubt:?}");
        let d = &doubt[0];
        assert_eq!((d.name.as_str(), d.machine_id.as_str(), d.hash.as_str()), ("gone.service", "m2", H2));
        assert_eq!(
            (d.load_state.as_str(), d.active_state.as_str(), d.sub_state.as_str()),
            ("unknown", "unknown", "in-doubt")
        );
    }

    #[test]
    fn unit_states_are_sorted_by_name_then_machine() {
        let s =
            Build::new().state("b.service", "m1", H1).state("a.service", "m2", H1).state("a.service", "m1", H2).done();
        let got: Vec<(String, String)> = s.unit_states().map(|u| (u.name, u.machine_id)).collect();
        let want = [("a.service", "m1"), ("a.service", "m2"), ("b.service", "m1")];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
        assert_eq!(s.unit_states_of("a.service").count(), 2);
        assert_eq!(s.unit_states_of("zzz").count(), 0);
    }

    #[test]
    fn machines_without_presence_are_hidden() {
        let s = Build::new()
            .put(Key::MachineObject { machine: "m2".into() }, r#"{"id":"m2","metadata":{"a":"1"}}"#)
            .put(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1"}"#)
            .put(Key::MachineMetadata { machine: "m2".into(), key: "a".into() }, "")
            .put(Key::MachineMetadata { machine: "m3".into(), key: "b".into() }, "x")
            .done();
        let ids: Vec<String> = s.machines().map(|m| m.id).collect();
        assert_eq!(ids, ["m1", "m2"]);
        assert!(s.machine("m2").unwrap().metadata.is_empty(), "tombstone hides the object's key");
        assert_eq!(s.machine("m3"), None);
    }

    /// Layout 2: the engine writes the units a drain keeps stopped into the machine's own `drained` key, so a
    /// scoped agent (which holds no rollouts) knows them; they hold while the machine is cordoned.
    #[test]
    fn drained_units_come_from_the_machines_key_when_it_has_one() {
        let s = Build::new().put(Key::MachineDrained { machine: "m1".into() }, r#"{"units":["a.service"]}"#).done();
        assert_eq!(s.drained_units("m1", Some(5), &[]).into_iter().collect::<Vec<_>>(), ["a.service"]);
        assert!(s.drained_units("m1", None, &[]).is_empty(), "not cordoned: nothing held");
        assert!(s.drained_units("m2", Some(5), &[]).is_empty(), "no key, no drain");
    }

    #[test]
    fn gc_keeps_current_and_previous_bodies() {
        let h3 = "3".repeat(40);
        let s = Build::new()
            .unit("a.service", H2, Some(H1), "inactive")
            .put(Key::Body { hash: h3.clone() }, "orphan")
            .done();
        let unref = s.unreferenced_bodies();
        assert_eq!(unref.len(), 1);
        assert_eq!(unref[0].0, h3);
        assert_eq!(unref[0].1, s.bodies()[h3.as_str()].mod_revision);
    }
}

#[cfg(test)]
mod scale {
    use crate::store::keys::Key;
    use crate::store::snapshot::tests::{Build, H1};

    /// Listing 1,000 units with states shows each once, in name order, with its target and current state. How fast
    /// that is belongs to the bench (`fleet-harness bench`, list latency), not to a test on a shared machine.
    #[test]
    fn listing_a_thousand_units_shows_each_with_its_state() {
        let mut b = Build::new();
        for i in 0..1000 {
            let name = format!("u{i:04}.service");
            b = b.unit(&name, H1, None, "launched").put(Key::UnitTarget { unit: name.clone() }, "m1");
            b = b.state(&name, "m1", H1);
        }
        let s = b.done();
        let rows: Vec<(String, String, Option<String>)> = s
            .units()
            .map(|u| (u.name.to_string(), u.current.as_str().to_string(), u.target.map(String::from)))
            .collect();
        let expected: Vec<(String, String, Option<String>)> =
            (0..1000).map(|i| (format!("u{i:04}.service"), "loaded".to_string(), Some("m1".to_string()))).collect();
        assert_eq!(rows, expected);
    }
}

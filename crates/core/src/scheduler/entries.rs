//! Layout 2's schedule entries (`P/schedule/<machine>/<unit>`, keys.rs; docs/lab/scoped-views.md): what each
//! machine must run of each unit, decided here once, by the engine leader's full view, so that an agent needs only
//! its own entries. A scheduled unit's entry is its placement and carries the version its machine must run (a
//! replace rollout's pin, [`crate::rollout::hash_on`]), the desired state and a restart rollout's token
//! ([`crate::rollout::restart_token`]); a global unit has one on every present machine (`global`: no placement,
//! the machine's agent decides whether it takes the unit, as in layout 1). Where units are placed is the
//! scheduler's decision ([`super::plan`]); this module keeps the entries of those placements current, and clears
//! the rest. A desired-state change also reaches the entries at once, through the API ([`with_desired`]).

use std::collections::{BTreeMap, BTreeSet};

use super::schedule::Decision;
use super::schedule_input::ScheduleInput;
use crate::model::{GlobalUnits, JobState};
use crate::rollout::{self, Rollout};
use crate::store::snapshot::PerMachine;
use crate::store::{ScheduleEntry, Snapshot, UnitView};

/// What the engine must write so that the stored entries are the wanted ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryChanges {
    /// (machine, unit, entry) to put: missing or different.
    pub put: Vec<(String, String, ScheduleEntry)>,
    /// (machine, unit) to delete: an entry nothing wants (a leftover on a machine the unit is not placed on, a
    /// destroyed unit's).
    pub delete: Vec<(String, String)>,
    /// Unit → the mod revision of its object these changes were decided from. A unit's changes are written only
    /// while its object is still at that revision (a unit replaced, stopped or destroyed meanwhile is decided
    /// again from a newer view). Absent for a destroyed unit: deleting its entries needs no guard.
    pub guards: BTreeMap<String, i64>,
    /// (machine, unit) deletes that hold only while the machine is still absent: an at-most-once unit leaving a
    /// machine that went away (had it come back meanwhile, its agent may be running the unit again).
    pub while_absent: BTreeSet<(String, String)>,
}

impl EntryChanges {
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.delete.is_empty()
    }

    /// The units these changes touch, in name order.
    pub fn units(&self) -> BTreeSet<&str> {
        self.put.iter().map(|(_, u, _)| u.as_str()).chain(self.delete.iter().map(|(_, u)| u.as_str())).collect()
    }
}

/// A pass's placement decisions, as the entries will read once they are written: where each unit they touch is
/// placed now (`None`: nowhere), and which of its deletes hold only while their machine is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    pub target: BTreeMap<String, Option<String>>,
    pub while_absent: BTreeSet<(String, String)>,
}

impl Placed {
    /// The decisions of one pass, in order (a move is an unschedule, then a schedule).
    pub fn from_decisions(decisions: &[Decision], input: &ScheduleInput) -> Placed {
        let mut placed = Placed::default();
        for decision in decisions {
            match decision {
                Decision::Schedule { unit, machine, .. } => {
                    placed.target.insert(unit.clone(), Some(machine.clone()));
                }
                Decision::Unschedule { unit, machine, .. } => {
                    placed.target.insert(unit.clone(), None);
                    if decision.leaves_absent_machine(input) {
                        placed.while_absent.insert((machine.clone(), unit.clone()));
                    }
                }
            }
        }
        placed
    }
}

/// The entry `machine` must hold for `unit`: the version it must run (the object's, or one a replace rollout keeps
/// there while its body is stored, [`Snapshot::unit_by_rollouts`]), the desired state, a restart rollout's token.
pub fn entry_for(
    snapshot: &Snapshot,
    rollouts: &[Rollout],
    unit: &UnitView<'_>,
    machine: &str,
    global: bool,
) -> ScheduleEntry {
    let on = snapshot.unit_by_rollouts(unit.clone(), machine, rollouts);
    ScheduleEntry {
        hash: on.hash.into(),
        desired: unit.desired,
        restart: rollout::restart_token(rollouts, unit.name, machine).map(Into::into),
        no_restart: on.no_restart,
        global,
    }
}

/// Most schedule entries a desired-state change rewrites itself ([`with_desired`]); a global unit on more machines
/// gets its entries from the engine's next pass, as every unit did before.
pub const MAX_DESIRED_ENTRIES: usize = 16;

/// The entries that a change of a unit's desired state to `state` rewrites in the same write as its object (the
/// API's, in layout 2): each of the unit's `stored` entries whose desired state differs, as stored but with
/// `state` (the desired state is the one field of an entry that [`entry_for`] takes from the object alone). A
/// scoped agent then learns of a stop or a start from that revision, not from the engine's next pass, and one
/// comes about with no engine leader at all. What else the change implies stays the engine's decision: an
/// `inactive` unit leaving its machine, a unit not placed yet being placed. Nothing for a unit with more than
/// [`MAX_DESIRED_ENTRIES`] entries (one transaction must hold them).
pub fn with_desired(stored: &PerMachine<ScheduleEntry>, state: JobState) -> Vec<(&str, &ScheduleEntry, ScheduleEntry)> {
    if stored.len() > MAX_DESIRED_ENTRIES {
        return Vec::new();
    }
    stored
        .iter()
        .filter(|(_, entry)| entry.desired != state)
        .map(|(machine, entry)| (machine.as_ref(), entry, ScheduleEntry { desired: state, ..entry.clone() }))
        .collect()
}

/// The entry changes that make `snapshot`'s stored entries the wanted ones. `is_global` says whether a unit is
/// global (the engine's parsed-body cache answers it; `None`: its body does not parse). A unit whose body is
/// missing or does not parse keeps its entries as they are: nothing can be decided for it.
pub fn entry_changes(
    snapshot: &Snapshot,
    rollouts: &[Rollout],
    is_global: impl Fn(&UnitView<'_>) -> Option<bool>,
) -> EntryChanges {
    entry_changes_placing(snapshot, rollouts, is_global, &Placed::default())
}

/// [`entry_changes`] once `placed` (this pass's placement decisions, not stored yet) is applied: the engine writes
/// its decisions and the rest of the entries in one go. A global unit has an entry on every present machine, and
/// keeps the one of a machine that is absent for now, kept current (its agent, back, finds what it must run, and
/// no partition restarts a global unit); those go with the unit.
pub fn entry_changes_placing(
    snapshot: &Snapshot,
    rollouts: &[Rollout],
    is_global: impl Fn(&UnitView<'_>) -> Option<bool>,
    placed: &Placed,
) -> EntryChanges {
    changes_where(snapshot, rollouts, is_global, placed, |_| true)
}

/// [`entry_changes`] of `units` alone, as they will read once `rollouts` are stored (a rollout's new progress): what
/// the engine writes in the transaction that stores the progress, so a machine sees the step it is released for in
/// the same revision as the progress. Whether a unit is global is read off its stored entries (a unit in a rollout
/// has them); a unit without entries is left to the engine's pass.
pub fn entry_changes_of_units(snapshot: &Snapshot, rollouts: &[Rollout], units: &BTreeSet<&str>) -> EntryChanges {
    let is_global = |u: &UnitView<'_>| {
        let entries = snapshot.unit_record(u.name)?.entries();
        let first = entries.values().next()?;
        Some(first.global)
    };
    changes_where(snapshot, rollouts, is_global, &Placed::default(), |name| units.contains(name))
}

/// Layout 2: the `P/machines/<id>/drained` keys to write so that each machine's names what drains keep stopped there
/// under its cordon ([`crate::rollout::drained_units`]), which its scoped agent cannot work out (it holds no
/// rollouts): `(machine, Some(units))` to put, `(machine, None)` to delete.
pub fn drained_changes(snapshot: &Snapshot, rollouts: &[Rollout]) -> Vec<(String, Option<GlobalUnits>)> {
    drained_changes_with(snapshot, |machine, since| {
        rollout::drained_units(rollouts, machine, since).into_iter().map(str::to_string).collect()
    })
}

/// [`drained_changes`] with `wanted` (machine, its cordon's `sinceMs`) → the units to keep stopped there.
fn drained_changes_with(
    snapshot: &Snapshot,
    wanted: impl Fn(&str, Option<u64>) -> BTreeSet<String>,
) -> Vec<(String, Option<GlobalUnits>)> {
    snapshot
        .machine_records()
        .iter()
        .filter_map(|(id, record)| {
            let want = wanted(id, record.cordon.as_ref().map(|c| c.since_ms));
            match &record.drained {
                None if want.is_empty() => None,
                Some(have) if have.units == want => None,
                Some(_) if want.is_empty() => Some((id.clone(), None)),
                _ => Some((id.clone(), Some(GlobalUnits { units: want }))),
            }
        })
        .collect()
}

fn changes_where(
    snapshot: &Snapshot,
    rollouts: &[Rollout],
    is_global: impl Fn(&UnitView<'_>) -> Option<bool>,
    placed: &Placed,
    wanted_unit: impl Fn(&str) -> bool,
) -> EntryChanges {
    let machines: Vec<String> = snapshot.machines().map(|m| m.id).collect();
    let mut changes = EntryChanges { while_absent: placed.while_absent.clone(), ..EntryChanges::default() };
    for (name, record) in snapshot.unit_records().iter().filter(|(name, _)| wanted_unit(name)) {
        let stored = record.entries();
        let Some(view) = snapshot.unit(name) else {
            if record.object().is_none() {
                changes.delete.extend(stored.keys().map(|m| (m.to_string(), name.to_string())));
            }
            continue;
        };
        // A body that does not parse says nothing of where the unit runs: its entries are left as they are.
        let Some(global) = is_global(&view) else { continue };
        let mut wanted: BTreeMap<&str, ScheduleEntry> = BTreeMap::new();
        if global {
            let kept = stored.iter().filter(|(_, e)| e.global).map(|(m, _)| m.as_ref());
            for machine in machines.iter().map(String::as_str).chain(kept) {
                wanted.entry(machine).or_insert_with(|| entry_for(snapshot, rollouts, &view, machine, true));
            }
        } else {
            let target = match placed.target.get(&**name) {
                Some(placed) => placed.as_deref(),
                None => view.target,
            };
            if let Some(target) = target {
                wanted.insert(target, entry_for(snapshot, rollouts, &view, target, false));
            }
        }
        let before = changes.put.len() + changes.delete.len();
        for (machine, entry) in &wanted {
            if stored.get(*machine) != Some(entry) {
                changes.put.push((machine.to_string(), name.to_string(), entry.clone()));
            }
        }
        for machine in stored.keys().filter(|m| !wanted.contains_key(m.as_ref())) {
            changes.delete.push((machine.to_string(), name.to_string()));
        }
        if changes.put.len() + changes.delete.len() > before {
            changes.guards.insert(name.to_string(), record.object_revision());
        }
    }
    changes.while_absent.retain(|(m, u)| changes.delete.iter().any(|(dm, du)| dm == m && du == u));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;
    use crate::rollout::{Control, RolloutKind, RolloutSpec, RolloutUnit};
    use crate::store::snapshot::tests::{Build, H1, H2};
    use crate::store::{Key, Snapshot};

    #[test]
    fn a_machines_drained_key_follows_what_its_drains_keep_stopped() {
        let b = machine(machine(machine(Build::new(), "m1"), "m2"), "m3")
            .put(Key::MachineCordon { machine: "m1".into() }, r#"{"sinceMs":5}"#)
            .put(Key::MachineCordon { machine: "m2".into() }, r#"{"sinceMs":5}"#)
            .put(Key::MachineDrained { machine: "m2".into() }, r#"{"units":["a.service"]}"#)
            .put(Key::MachineDrained { machine: "m3".into() }, r#"{"units":["a.service"]}"#);
        let s = b.done();
        let held = |units: &[&str]| units.iter().map(|u| u.to_string()).collect::<BTreeSet<String>>();
        // m1 and m2 are cordoned since 5, m3 is not: what the drains keep stopped is decided by the rollouts.
        let want = |machine: &str, since: Option<u64>| match (machine, since) {
            ("m1", Some(5)) => held(&["a.service", "g.service"]),
            ("m2", Some(5)) => held(&["a.service"]),
            _ => BTreeSet::new(),
        };
        assert_eq!(
            drained_changes_with(&s, want),
            [
                ("m1".to_string(), Some(GlobalUnits { units: held(&["a.service", "g.service"]) })),
                ("m3".to_string(), None),
            ],
            "m1's key is written, m2's already says it, m3's goes with its cordon"
        );
        assert!(
            drained_changes_with(&s, |m, _| if m == "m2" { held(&["a.service"]) } else { BTreeSet::new() })
                .iter()
                .all(|(m, units)| m == "m3" && units.is_none())
        );
        assert_eq!(drained_changes(&s, &[]), [("m2".to_string(), None), ("m3".to_string(), None)], "no drain, no hold");
    }

    fn machine(b: Build, id: &str) -> Build {
        b.put(Key::MachineObject { machine: id.into() }, &format!(r#"{{"id":"{id}"}}"#))
    }

    fn entry(hash: &str, desired: JobState) -> ScheduleEntry {
        ScheduleEntry { hash: hash.into(), desired, restart: None, no_restart: false, global: false }
    }

    fn stored(b: Build, m: &str, unit: &str, e: &ScheduleEntry) -> Build {
        b.put(Key::ScheduleEntry { machine: m.into(), unit: unit.into() }, &crate::store::records::encode_json(e))
    }

    /// A replace rollout of `unit` from H1 to H2 that has not written progress yet: every machine keeps H1.
    fn replace(unit: &str) -> Rollout {
        let spec = RolloutSpec {
            id: "r1".into(),
            kind: RolloutKind::Replace,
            units: vec![RolloutUnit { name: unit.into(), from: H1.into(), to: H2.into(), ..RolloutUnit::default() }],
            max_unavailable: 1,
            ..RolloutSpec::default()
        };
        Rollout { spec, control: Control::default(), progress: None }
    }

    fn changes(s: &Snapshot, rollouts: &[Rollout]) -> EntryChanges {
        entry_changes(s, rollouts, |u| Some(u.name.starts_with("g")))
    }

    #[test]
    fn a_placed_unit_gets_its_entry_and_keeps_it_current() {
        let b = machine(Build::new(), "m1").unit("a.service", H1, None, "launched");
        let b = b.put(Key::UnitTarget { unit: "a.service".into() }, "m1");
        let c = changes(&b.snap, &[]);
        assert_eq!(c.put, [("m1".to_string(), "a.service".to_string(), entry(H1, JobState::Launched))]);
        assert!(c.delete.is_empty());
        let b = stored(b, "m1", "a.service", &entry(H1, JobState::Launched));
        assert!(changes(&b.snap, &[]).is_empty(), "nothing to do once stored");
        let b = b.put(Key::UnitDesired { unit: "a.service".into() }, "loaded");
        assert_eq!(changes(&b.snap, &[]).put[0].2, entry(H1, JobState::Loaded), "a desired state follows");
    }

    #[test]
    fn a_desired_state_change_rewrites_the_entries_as_the_engine_would() {
        // a placed on m1; g global on m1 and m2, pinned to H1 by a replace rollout on m2's entry.
        let b = machine(machine(Build::new(), "m1"), "m2").unit("a.service", H1, None, "launched");
        let b = b.unit("g.service", H1, None, "launched").unit("g.service", H2, Some(H1), "launched");
        let b = b.put(Key::UnitTarget { unit: "a.service".into() }, "m1");
        let rollouts = [replace("g.service")];
        let c = changes(&b.snap, &rollouts);
        let mut b = b;
        for (m, u, e) in &c.put {
            b = stored(b, m, u, e);
        }
        assert!(changes(&b.snap, &rollouts).is_empty(), "stored as the engine wants them");
        for (unit, state) in [("a.service", JobState::Loaded), ("g.service", JobState::Inactive)] {
            let written: Vec<(String, ScheduleEntry)> = {
                let record = b.snap.unit_record(unit).unwrap();
                with_desired(record.entries(), state).into_iter().map(|(m, _, e)| (m.to_string(), e)).collect()
            };
            assert_eq!(written.len(), if unit == "a.service" { 1 } else { 2 }, "{unit}: every entry: {written:?}");
            assert!(written.iter().all(|(_, e)| e.desired == state), "{unit}: {written:?}");
            // The object and the entries written in one go: the engine finds nothing left to write.
            b = b.put(Key::UnitDesired { unit: unit.into() }, state.as_str());
            for (m, e) in &written {
                b = stored(b, m, unit, e);
            }
            let left = changes(&b.snap, &rollouts);
            assert!(left.put.iter().all(|(_, u, _)| u != unit), "{unit}: the engine would write {left:?}");
        }
        let entries = b.snap.unit_record("g.service").unwrap().entries();
        assert_eq!(entries.get("m2").unwrap().hash.as_ref(), H1, "the pin is kept");
        assert!(with_desired(entries, JobState::Inactive).is_empty(), "already so: nothing to write");
    }

    #[test]
    fn a_unit_on_more_machines_than_a_write_holds_leaves_its_entries_to_the_engine() {
        let mut b = Build::new().unit("g.service", H1, None, "launched");
        let mut global = entry(H1, JobState::Launched);
        global.global = true;
        for i in 0..=MAX_DESIRED_ENTRIES {
            b = stored(machine(b, &format!("m{i:02}")), &format!("m{i:02}"), "g.service", &global);
        }
        let entries = b.snap.unit_record("g.service").unwrap().entries();
        assert_eq!(entries.len(), MAX_DESIRED_ENTRIES + 1);
        assert!(with_desired(entries, JobState::Loaded).is_empty());
    }

    #[test]
    fn a_replace_rollout_pins_the_placed_version_until_it_reaches_the_machine() {
        let b = machine(Build::new(), "m1").unit("a.service", H1, None, "launched").unit(
            "a.service",
            H2,
            Some(H1),
            "launched",
        );
        let b = b.put(Key::UnitTarget { unit: "a.service".into() }, "m1");
        let c = changes(&b.snap, &[replace("a.service")]);
        assert_eq!(c.put[0].2.hash.as_ref(), H1, "pinned: {c:?}");
        assert_eq!(changes(&b.snap, &[]).put[0].2.hash.as_ref(), H2, "no rollout: the object's version");
    }

    #[test]
    fn a_global_unit_has_an_entry_on_every_machine_with_its_pin() {
        let b = machine(machine(Build::new(), "m1"), "m2").unit("g.service", H1, None, "launched").unit(
            "g.service",
            H2,
            Some(H1),
            "launched",
        );
        let hashes = |c: &EntryChanges| -> Vec<(String, String, bool)> {
            c.put.iter().map(|(m, _, e)| (m.clone(), e.hash.to_string(), e.global)).collect()
        };
        let want = |h: &str| vec![("m1".to_string(), h.to_string(), true), ("m2".to_string(), h.to_string(), true)];
        assert_eq!(hashes(&changes(&b.snap, &[])), want(H2), "the object's version everywhere");
        assert_eq!(hashes(&changes(&b.snap, &[replace("g.service")])), want(H1), "pinned by the rollout");
        let mut pin = entry(H1, JobState::Launched);
        pin.global = true;
        let b = stored(stored(b, "m1", "g.service", &pin), "m3", "g.service", &pin);
        let c = changes(&b.snap, &[]);
        let mut all = want(H2);
        all.push(("m3".to_string(), H2.to_string(), true));
        assert_eq!(hashes(&c), all, "the rollout moved on: m1 follows the object, and so does absent m3's entry");
        assert!(c.delete.is_empty(), "m3 is not present: its global entry is kept for its return: {c:?}");
    }

    /// A pass's decisions are applied before the entries are compared: a move is the old entry's delete and the new
    /// one's put, under the unit's guard; an at-most-once unit's delete from a machine that went away holds only
    /// while that machine is absent.
    #[test]
    fn a_pass_writes_its_decisions_as_entries_under_the_units_guard() {
        use crate::scheduler::placement::Placement;
        use crate::scheduler::schedule::{Decision, ScheduleReason, UnscheduleReason};
        use crate::scheduler::schedule_input::{ScheduleInput, UnitSpec};
        let b = machine(machine(Build::new(), "m1"), "m2").unit("a.service", H1, None, "launched");
        let b = b.unit("b.service", H1, None, "launched");
        let b = stored(
            stored(b, "m1", "a.service", &entry(H1, JobState::Launched)),
            "m1",
            "b.service",
            &entry(H1, JobState::Launched),
        );
        let plain = UnitSpec { target: Some("m1".into()), ..UnitSpec::new("a.service", JobState::Launched) };
        let mut at_most_once = UnitSpec { name: "b.service".into(), ..plain.clone() };
        at_most_once.constraints.at_most_once = true;
        let input = ScheduleInput::new([plain, at_most_once], b.snap.machines()).unwrap();
        let gone = |unit: &str| Decision::Unschedule {
            unit: unit.into(),
            machine: "m1".into(),
            reason: UnscheduleReason::MachineWentAway { machine: "m1".into() },
        };
        let to_m2 = |unit: &str| Decision::Schedule {
            unit: unit.into(),
            machine: "m2".into(),
            reason: ScheduleReason {
                desired: JobState::Launched,
                placement: Placement::LeastLoaded { load: 0 },
                replacing: Vec::new(),
            },
        };
        let decisions = [gone("a.service"), to_m2("a.service"), gone("b.service"), to_m2("b.service")];
        let placed = Placed::from_decisions(&decisions, &input);
        assert_eq!(
            placed.while_absent,
            [("m1".to_string(), "b.service".to_string())].into(),
            "b alone is at-most-once"
        );
        let c = entry_changes_placing(&b.snap, &[], |u| Some(u.name.starts_with('g')), &placed);
        assert_eq!(
            c.put.iter().map(|(m, u, _)| (m.as_str(), u.as_str())).collect::<Vec<_>>(),
            [("m2", "a.service"), ("m2", "b.service")]
        );
        assert_eq!(
            c.delete,
            [("m1".to_string(), "a.service".to_string()), ("m1".to_string(), "b.service".to_string())]
        );
        assert_eq!(c.while_absent, placed.while_absent);
        let revisions: Vec<i64> =
            ["a.service", "b.service"].iter().map(|u| b.snap.unit_record(u).unwrap().object_revision()).collect();
        assert_eq!(c.guards.values().copied().collect::<Vec<_>>(), revisions, "each unit under its object's revision");
        assert!(revisions.iter().all(|r| *r > 0));
    }

    /// The entries a rollout's new progress changes, for its units alone: the machine its step releases gets the
    /// new version, the one still pending keeps the old; a unit outside the set is left alone.
    #[test]
    fn a_released_step_changes_its_machines_entry_with_the_progress() {
        use crate::rollout::{Phase, RolloutProgress, Step};
        let b = machine(machine(Build::new(), "m1"), "m2").unit("g.service", H1, None, "launched").unit(
            "g.service",
            H2,
            Some(H1),
            "launched",
        );
        let b = b.unit("other.service", H2, None, "launched");
        let mut pin = entry(H1, JobState::Launched);
        pin.global = true;
        let b = stored(stored(b, "m1", "g.service", &pin), "m2", "g.service", &pin);
        let b = stored(b, "m1", "other.service", &entry(H1, JobState::Launched));
        let mut rollout = replace("g.service");
        let step = |m: &str, phase: Phase| Step { phase, ..Step::pending("g.service", m) };
        rollout.progress = Some(RolloutProgress {
            steps: vec![step("m1", Phase::Updating), step("m2", Phase::Pending)],
            ..Default::default()
        });
        let units: BTreeSet<&str> = ["g.service"].into();
        let c = entry_changes_of_units(&b.snap, &[rollout], &units);
        let mut released = entry(H2, JobState::Launched);
        released.global = true;
        assert_eq!(c.put, [("m1".to_string(), "g.service".to_string(), released)], "m2 still pending keeps H1");
        assert!(c.delete.is_empty());
        assert_eq!(c.guards.keys().collect::<Vec<_>>(), ["g.service"], "other.service is not in the rollout");
    }

    #[test]
    fn a_unit_whose_body_does_not_parse_keeps_its_entries() {
        let b = machine(Build::new(), "m1").unit("a.service", H1, None, "launched");
        let mut global = entry(H1, JobState::Launched);
        global.global = true;
        let b = stored(b, "m1", "a.service", &global);
        assert_eq!(changes(&b.snap, &[]).delete.len(), 1, "parsed, not global: its global entry goes");
        assert!(entry_changes(&b.snap, &[], |_| None).is_empty(), "not parsed: nothing decided");
    }

    #[test]
    fn leftover_entries_are_cleared_but_a_unit_without_its_body_is_left_alone() {
        let b = machine(Build::new(), "m1").unit("a.service", H1, None, "launched");
        let b = b.put(Key::UnitTarget { unit: "a.service".into() }, "m1");
        let b = stored(b, "m1", "a.service", &entry(H1, JobState::Launched));
        let b = stored(b, "m2", "a.service", &entry(H1, JobState::Launched));
        let b = stored(b, "m1", "gone.service", &entry(H1, JobState::Launched));
        let c = changes(&b.snap, &[]);
        assert_eq!(
            c.delete,
            [("m2".to_string(), "a.service".to_string()), ("m1".to_string(), "gone.service".to_string())]
        );
        let b = b.put(
            Key::UnitObject { unit: "nobody.service".into() },
            &format!(r#"{{"name":"nobody.service","hash":"{}"}}"#, "f".repeat(40)),
        );
        let b = stored(b, "m1", "nobody.service", &entry(H1, JobState::Launched));
        assert!(!changes(&b.snap, &[]).delete.iter().any(|(_, u)| u == "nobody.service"), "its body is missing");
    }
}

//! Layout 2's schedule entries (`P/schedule/<machine>/<unit>`, keys.rs; docs/lab/scoped-views.md): what each
//! machine must run of each unit, decided here once, by the engine leader's full view, so that an agent needs only
//! its own entries. A scheduled unit's entry is its placement and carries the version its machine must run (a
//! replace rollout's pin, [`crate::rollout::hash_on`]), the desired state and a restart rollout's token
//! ([`crate::rollout::restart_token`]); a global unit has one on every present machine (`global`: no placement,
//! the machine's agent decides whether it takes the unit, as in layout 1). Where units are placed is the
//! scheduler's decision ([`super::plan`]); this module keeps the entries of those placements current, and clears
//! the rest.

use std::collections::BTreeMap;

use crate::rollout::{self, Rollout};
use crate::store::{ScheduleEntry, Snapshot, UnitView};

/// What the engine must write so that the stored entries are the wanted ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryChanges {
    /// (machine, unit, entry) to put: missing or different.
    pub put: Vec<(String, String, ScheduleEntry)>,
    /// (machine, unit) to delete: an entry nothing wants (a leftover on a machine the unit is not placed on, or
    /// that left, a destroyed unit's).
    pub delete: Vec<(String, String)>,
}

impl EntryChanges {
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.delete.is_empty()
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

/// The entry changes that make `snapshot`'s stored entries the wanted ones. `is_global` says whether a unit is
/// global (the engine's parsed-body cache answers it). A unit whose body is missing keeps its entries as they are:
/// nothing can be decided for it.
pub fn entry_changes(
    snapshot: &Snapshot,
    rollouts: &[Rollout],
    is_global: impl Fn(&UnitView<'_>) -> bool,
) -> EntryChanges {
    let machines: Vec<String> = snapshot.machines().map(|m| m.id).collect();
    let mut changes = EntryChanges::default();
    for (name, record) in snapshot.unit_records() {
        let stored = record.entries();
        let Some(view) = snapshot.unit(name) else {
            if record.object().is_none() {
                changes.delete.extend(stored.keys().map(|m| (m.to_string(), name.to_string())));
            }
            continue;
        };
        let global = is_global(&view);
        let mut wanted: BTreeMap<&str, ScheduleEntry> = BTreeMap::new();
        if global {
            for machine in &machines {
                wanted.insert(machine, entry_for(snapshot, rollouts, &view, machine, true));
            }
        } else if let Some(target) = view.target {
            wanted.insert(target, entry_for(snapshot, rollouts, &view, target, false));
        }
        for (machine, entry) in &wanted {
            if stored.get(*machine) != Some(entry) {
                changes.put.push((machine.to_string(), name.to_string(), entry.clone()));
            }
        }
        for machine in stored.keys().filter(|m| !wanted.contains_key(m.as_ref())) {
            changes.delete.push((machine.to_string(), name.to_string()));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;
    use crate::rollout::{Control, RolloutKind, RolloutSpec, RolloutUnit};
    use crate::store::snapshot::tests::{Build, H1, H2};
    use crate::store::{Key, Snapshot};

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
        entry_changes(s, rollouts, |u| u.name.starts_with("g"))
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
        assert_eq!(hashes(&c), want(H2), "the rollout moved on: m1 follows the object");
        assert_eq!(c.delete, [("m3".to_string(), "g.service".to_string())], "m3 is not present");
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

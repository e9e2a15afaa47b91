//! The switch of a cluster from registry layout 1 to layout 2 (issue 35; keys.rs, docs/lab/scoped-views.md): when
//! it may happen, and what the engine leader writes to make it happen. Pure; the engine carries it out.
//!
//! A unit moves in one transaction of its own ([`UnitMove`]): its object gains its desired state, its entries are
//! put, and only then, in the same transaction, are its `desired` and `target` keys deleted. Readers let layout 1's
//! keys win while both are there (`UnitRecord`'s accessors), so a reader sees the unit the same before, during and
//! after its move, and the moves of a cluster can be spread over many transactions. Launched and restarted markers
//! are bound to their machines' leases: each agent folds its own into its states after the switch; the engine
//! cannot.

use crate::rollout::Rollout;
use crate::scheduler::entries::entry_changes;
use crate::store::{ScheduleEntry, Snapshot, UnitObject, UnitView};

/// The layout a cluster switches to.
pub const LAYOUT_2: u32 = 2;

/// The layouts this code runs, as its fleetd advertises them in its machine object (`MachineObject::layouts`).
pub const RUNS: [u32; 2] = [1, LAYOUT_2];

/// Whether the cluster may switch to layout 2: every present machine's fleetd lists it among the layouts it runs.
/// `Err` names the machines that do not (a cluster with none present has nobody to switch for).
pub fn ready_for_layout_2(snapshot: &Snapshot) -> Result<(), Vec<String>> {
    let present: Vec<(&String, &crate::store::MachineObject)> =
        snapshot.machine_records().iter().filter_map(|(id, m)| Some((id, m.object.as_ref()?))).collect();
    if present.is_empty() {
        return Err(Vec::new());
    }
    let behind: Vec<String> =
        present.iter().filter(|(_, o)| !o.layouts.contains(&LAYOUT_2)).map(|(id, _)| id.to_string()).collect();
    if behind.is_empty() { Ok(()) } else { Err(behind) }
}

/// One unit's move to layout 2, written as one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitMove {
    pub unit: String,
    /// The object with the desired state folded in, and the mod revision it was read at (the transaction's guard:
    /// a unit replaced meanwhile is moved again from a newer view).
    pub object: UnitObject,
    pub object_revision: i64,
    /// Its entries: (machine, entry).
    pub entries: Vec<(String, ScheduleEntry)>,
    /// Delete its layout-1 `desired` key, which read this (the transaction's guard: a stop written meanwhile is
    /// moved again from a newer view), and its `target` key, which read this machine (its entry is put instead).
    pub delete_desired: Option<crate::model::JobState>,
    pub delete_target: Option<String>,
}

/// The units of `snapshot` (a full view) still in layout 1 — a `desired` or `target` key, or an object without its
/// desired state — with what moves each. A unit whose body is missing or does not parse moves with the entry of its target alone, if
/// it has one, for the object's version (nothing else can be decided for it; the engine's entry pass completes its
/// entries once its body is back). `is_global` as for
/// [`entry_changes`].
pub fn moves_to_layout_2(
    snapshot: &Snapshot,
    rollouts: &[Rollout],
    is_global: impl Fn(&UnitView<'_>) -> Option<bool>,
) -> Vec<UnitMove> {
    let mut entries = entry_changes(snapshot, rollouts, is_global).put;
    let mut moves = Vec::new();
    for (name, record) in snapshot.unit_records() {
        let Some(object) = record.object() else { continue };
        let (desired_key, target_key) = (record.desired_key(), record.target_key());
        if object.desired.is_some() && desired_key.is_none() && target_key.is_none() {
            continue;
        }
        let mut moved = object.clone();
        moved.desired = Some(record.desired().unwrap_or(crate::model::JobState::Inactive));
        let (mine, rest): (Vec<_>, Vec<_>) = entries.into_iter().partition(|(_, u, _)| u == &**name);
        entries = rest;
        let mut mine: Vec<(String, ScheduleEntry)> = mine.into_iter().map(|(m, _, e)| (m, e)).collect();
        if let Some(target) = record.target_key()
            && mine.is_empty()
            && !record.entries().contains_key(&**target)
        {
            // Its body is missing or does not parse, so nothing is decided for it; its placement must not be lost
            // with the target key (its machine may be running it): the entry of the object's version. Only a
            // scheduled unit has a target, so it is not global.
            mine.push((
                target.to_string(),
                ScheduleEntry {
                    hash: object.hash.clone(),
                    desired: moved.desired.unwrap_or(crate::model::JobState::Inactive),
                    restart: None,
                    no_restart: object.no_restart,
                    global: false,
                },
            ));
        }
        moves.push(UnitMove {
            unit: name.to_string(),
            object: moved,
            object_revision: record.object_revision(),
            entries: mine,
            delete_desired: desired_key,
            delete_target: target_key.map(|t| t.to_string()),
        });
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;
    use crate::store::snapshot::tests::{Build, H1};
    use crate::store::{Change, Key, Keys};

    fn machine(b: Build, id: &str, layouts: &str) -> Build {
        b.put(Key::MachineObject { machine: id.into() }, &format!(r#"{{"id":"{id}"{layouts}}}"#))
    }

    #[test]
    fn a_cluster_switches_only_when_every_present_machine_runs_layout_2() {
        let b = machine(Build::new(), "m1", r#","layouts":[1,2]"#);
        assert_eq!(ready_for_layout_2(&b.snap), Ok(()));
        let b = machine(b, "m2", "");
        assert_eq!(ready_for_layout_2(&b.snap), Err(vec!["m2".to_string()]), "an old fleetd holds it back");
        let b = b.delete(Key::MachineObject { machine: "m2".into() });
        assert_eq!(ready_for_layout_2(&b.snap), Ok(()), "a machine that left holds nothing back");
        assert_eq!(ready_for_layout_2(&Build::new().snap), Err(Vec::new()));
    }

    /// After its moves are applied, a unit reads the same as before, and no layout-1 key of it is left; a second
    /// look finds nothing to move.
    #[test]
    fn moved_units_read_as_before_and_are_moved_once() {
        let b = machine(Build::new(), "m1", r#","layouts":[1,2]"#)
            .unit("a.service", H1, None, "launched")
            .put(Key::UnitTarget { unit: "a.service".into() }, "m1")
            .unit("g.service", H1, None, "loaded")
            .unit("idle.service", H1, None, "inactive");
        let before: Vec<(String, JobState, Option<String>)> =
            b.snap.units().map(|u| (u.name.to_string(), u.desired, u.target.map(String::from))).collect();
        let moves = moves_to_layout_2(&b.snap, &[], |u| Some(u.name.starts_with('g')));
        assert_eq!(moves.len(), 3);
        let a = &moves[0];
        assert_eq!(
            (a.object.desired, a.delete_desired, a.delete_target.as_deref()),
            (Some(JobState::Launched), Some(JobState::Launched), Some("m1"))
        );
        assert_eq!(a.entries.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(), ["m1"]);
        assert_eq!(moves[1].entries.iter().map(|(m, e)| (m.as_str(), e.global)).collect::<Vec<_>>(), [("m1", true)]);
        assert!(moves[2].entries.is_empty() && moves[2].delete_target.is_none(), "an unscheduled unit has no entry");

        let keys = Keys::new("/p");
        let mut after = b.snap.clone();
        for m in &moves {
            let object = crate::store::records::encode_json(&m.object);
            let put = |s: &mut Snapshot, key: String, value: &str| {
                s.apply(&keys, key.as_bytes(), Change::Put { value: value.as_bytes(), mod_revision: 99, lease: 0 })
            };
            put(&mut after, keys.unit_object(&m.unit), &object);
            for (machine, entry) in &m.entries {
                put(&mut after, keys.schedule_entry(machine, &m.unit), &crate::store::records::encode_json(entry));
            }
            for (delete, key) in [
                (m.delete_desired.is_some(), keys.unit_desired(&m.unit)),
                (m.delete_target.is_some(), keys.unit_target(&m.unit)),
            ] {
                if delete {
                    after.apply(&keys, key.as_bytes(), Change::Delete);
                }
            }
        }
        let now: Vec<(String, JobState, Option<String>)> =
            after.units().map(|u| (u.name.to_string(), u.desired, u.target.map(String::from))).collect();
        assert_eq!(now, before);
        assert!(moves_to_layout_2(&after, &[], |u| Some(u.name.starts_with('g'))).is_empty(), "nothing left to move");
    }
}

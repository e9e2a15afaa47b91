//! Handing a unit over between machines: the cross-machine half of replace serialization (spec §10.4 Rec, L13).
//!
//! On one machine the plan already orders Stop/Unload < Load < Reload < Start and the executor waits for every
//! stop job, so a unit's old version has run `ExecStop`/`ExecStopPost` before its new version starts. When the
//! new version (or the same unit after a move) is scheduled to a *different* machine, the two agents act
//! independently; this module is the rule that keeps them in order, evaluated on the registry snapshot:
//!
//! > **A non-global unit U may be started on machine M only when no other machine N ≠ M that is present
//! > (its presence object exists) still holds a copy of U that may be running**, i.e. N publishes a state for U
//! > whose `activeState` is not `inactive` or `failed`, or N holds a launched marker for U while publishing no
//! > state for it (it started U and has not reported yet).
//!
//! Until then M may load U (write, link, daemon-reload) but defers its start; the deferral is re-evaluated on
//! every snapshot change, so M starts U as soon as N's stop completes (N's state turns `inactive`, or N removes it
//! when it deletes the unit file).
//!
//! Why this cannot deadlock:
//! * Only the target machine waits, and only for machines that are *not* U's target: those unload U without
//!   waiting for anyone, so there is no cycle.
//! * Everything N publishes (presence, states, markers) is bound to N's lease: a dead or partitioned N stops
//!   blocking within its TTL, exactly when the engine would reschedule anyway (L11 stays as designed).
//! * Global units are exempt: every machine runs its own copy by design.
//! * A failed or inactive old copy never blocks, so a crashed unit moves at once.
//!
//! The executor's own stop wait is bounded (`ExecutorConfig::stop_wait`); a stop that never completes keeps N's
//! state `deactivating` and therefore keeps U from starting elsewhere, which is the point.

use std::collections::BTreeMap;
use std::fmt;

use fleet_core::machine_plan::plan::{Planned, Task};
use fleet_registry::Snapshot;

/// Another machine's copy of a unit, as the registry shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherCopy {
    pub machine: String,
    /// The machine's presence object exists.
    pub present: bool,
    /// `activeState` of the state it publishes for the unit, if any.
    pub active_state: Option<String>,
    /// It holds a launched marker for the unit.
    pub launched: bool,
}

/// Why a start is held back: the machine still running the old copy and what it last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocker {
    pub machine: String,
    /// `None` when the machine has marked the unit launched but published no state yet.
    pub active_state: Option<String>,
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.active_state {
            Some(s) => write!(f, "unit still {s} on machine {}", self.machine),
            None => write!(f, "unit still launched on machine {}", self.machine),
        }
    }
}

/// Whether a published `activeState` may mean the unit's processes still run (anything but `inactive`/`failed`,
/// unknown values included).
pub fn may_be_running(active_state: &str) -> bool {
    !fleet_core::model::is_stopped(active_state)
}

/// The rule of this module: the copy that keeps `me` from starting a unit, if any. `global` units never wait.
pub fn start_blocker(me: &str, global: bool, copies: &[OtherCopy]) -> Option<Blocker> {
    if global {
        return None;
    }
    copies
        .iter()
        .filter(|c| c.machine != me && c.present)
        .find(|c| match &c.active_state {
            Some(state) => may_be_running(state),
            None => c.launched,
        })
        .map(|c| Blocker { machine: c.machine.clone(), active_state: c.active_state.clone() })
}

/// Every other machine's copy of `unit` in `snapshot` (states and launched markers), by machine ID.
pub fn other_copies(snapshot: &Snapshot, unit: &str, me: &str) -> Vec<OtherCopy> {
    let mut copies: BTreeMap<&str, OtherCopy> = BTreeMap::new();
    let entry = |machine: &str| {
        let present = snapshot.machine_records().get(machine).is_some_and(|m| m.object.is_some());
        OtherCopy { machine: machine.to_string(), present, active_state: None, launched: false }
    };
    if let Some(states) = snapshot.state_records().get(unit) {
        for (machine, record) in states.iter().filter(|(m, _)| &***m != me) {
            let mut copy = entry(machine);
            copy.active_state = Some(record.active_state.to_string());
            copies.insert(machine, copy);
        }
    }
    if let Some(record) = snapshot.unit_record(unit) {
        for (machine, _) in record.launched_on().filter(|(m, _)| &***m != me) {
            copies.entry(machine).or_insert_with(|| entry(machine)).launched = true;
        }
    }
    copies.into_values().collect()
}

/// Splits `planned` into the tasks to run now and the Start tasks held back, with their blockers. `blocker` is
/// asked once per Start task.
pub fn hold_starts(
    planned: Vec<Planned>,
    mut blocker: impl FnMut(&str) -> Option<Blocker>,
) -> (Vec<Planned>, Vec<(Planned, Blocker)>) {
    let mut run = Vec::with_capacity(planned.len());
    let mut held = Vec::new();
    for p in planned {
        match &p.task {
            Task::Start(name) => match blocker(name) {
                Some(b) => held.push((p, b)),
                None => run.push(p),
            },
            _ => run.push(p),
        }
    }
    (run, held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_core::machine_plan::plan::Reason;
    use fleet_registry::{Change, Keys};

    const ME: &str = "m-me";

    fn copy(machine: &str, present: bool, active: Option<&str>, launched: bool) -> OtherCopy {
        OtherCopy { machine: machine.into(), present, active_state: active.map(str::to_string), launched }
    }

    #[test]
    fn the_rule_as_a_table() {
        // (global, copies, blocked by)
        let rows: Vec<(bool, Vec<OtherCopy>, Option<&str>)> = vec![
            (false, vec![], None),
            // The old copy still runs or is stopping elsewhere: wait.
            (false, vec![copy("a", true, Some("active"), true)], Some("a")),
            (false, vec![copy("a", true, Some("deactivating"), false)], Some("a")),
            (false, vec![copy("a", true, Some("activating"), true)], Some("a")),
            (false, vec![copy("a", true, Some("reloading"), true)], Some("a")),
            (false, vec![copy("a", true, Some("some-future-state"), false)], Some("a")),
            // Stopped, or never came up: go.
            (false, vec![copy("a", true, Some("inactive"), true)], None),
            (false, vec![copy("a", true, Some("failed"), true)], None),
            // Started there but no state reported yet: wait; neither state nor marker: go.
            (false, vec![copy("a", true, None, true)], Some("a")),
            (false, vec![copy("a", true, None, false)], None),
            // A machine that is gone (its lease expired, presence deleted) never blocks.
            (false, vec![copy("a", false, Some("active"), true)], None),
            // Our own copy never blocks us.
            (false, vec![copy(ME, true, Some("active"), true)], None),
            // Global units: every machine runs its own copy.
            (true, vec![copy("a", true, Some("active"), true)], None),
            // The first running copy is named.
            (
                false,
                vec![copy("a", true, Some("inactive"), false), copy("b", true, Some("deactivating"), false)],
                Some("b"),
            ),
        ];
        for (i, (global, copies, want)) in rows.into_iter().enumerate() {
            let got = start_blocker(ME, global, &copies);
            assert_eq!(got.as_ref().map(|b| b.machine.as_str()), want, "row {i}: {copies:?}");
        }
    }

    #[test]
    fn blockers_explain_themselves() {
        let b = start_blocker(ME, false, &[copy("a", true, Some("deactivating"), true)]).unwrap();
        assert_eq!(b.to_string(), "unit still deactivating on machine a");
        let b = start_blocker(ME, false, &[copy("a", true, None, true)]).unwrap();
        assert_eq!(b.to_string(), "unit still launched on machine a");
    }

    fn snapshot(puts: &[(String, &str)]) -> Snapshot {
        let keys = Keys::new("/p");
        let changes =
            puts.iter().map(|(k, v)| (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 2, lease: 1 }));
        Snapshot::from_kvs(&keys, 2, changes)
    }

    #[test]
    fn copies_are_read_from_states_markers_and_presence() {
        let k = Keys::new("/p");
        let h = "1c6fb6f3684bafb0c173d8b8b957ceff031180c1";
        let state = |a: &str| format!(r#"{{"hash":"{h}","loadState":"loaded","activeState":"{a}","subState":"x"}}"#);
        let (sa, sme) = (state("deactivating"), state("active"));
        let s = snapshot(&[
            (k.unit_object("u.service"), r#"{"name":"u.service","hash":"1c6fb6f3684bafb0c173d8b8b957ceff031180c1"}"#),
            (k.state("u.service", "a"), &sa),
            (k.state("u.service", ME), &sme),
            (k.unit_launched("u.service", "b"), h),
            (k.unit_launched("u.service", ME), h),
            (k.machine_object("a"), r#"{"id":"a"}"#),
        ]);
        assert_eq!(
            other_copies(&s, "u.service", ME),
            [copy("a", true, Some("deactivating"), false), copy("b", false, None, true)]
        );
        assert!(other_copies(&s, "nope.service", ME).is_empty());
    }

    #[test]
    fn only_start_tasks_are_held() {
        let p = |task: Task| Planned { task, reason: Reason::HashDiffers };
        let planned = vec![
            p(Task::Load("a.service".into(), "h".into())),
            p(Task::Reload),
            p(Task::Start("a.service".into())),
            p(Task::Start("b.service".into())),
        ];
        let (run, held) = hold_starts(planned, |name| {
            (name == "a.service").then(|| Blocker { machine: "x".into(), active_state: Some("active".into()) })
        });
        let run: Vec<Task> = run.into_iter().map(|p| p.task).collect();
        assert_eq!(run, [Task::Load("a.service".into(), "h".into()), Task::Reload, Task::Start("b.service".into())]);
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].0.task, Task::Start("a.service".into()));
    }
}

//! Which unit states to publish (spec §7.5): a pure diff between what was last published and what systemd reports
//! now, for this machine's units only (B7: removing a state removes only this machine's entry). The registry
//! writes are done by the caller; a failed write is handed back with [`Publisher::failed`] and retried.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::UnitState;
use crate::registry::StateRecord;
use crate::systemd::UnitStatus;

/// One registry write for this machine's unit states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOp {
    /// Write this machine's state of the unit (with TTL).
    Publish(UnitState),
    /// Delete this machine's state of the unit (and nothing else: B7).
    Remove(String),
}

impl PublishOp {
    /// The unit this write is about.
    pub fn unit(&self) -> &str {
        match self {
            PublishOp::Publish(state) => &state.name,
            PublishOp::Remove(name) => name,
        }
    }
}

/// The states to publish for the units the agent has loaded: systemd's load/active/sub state joined with the hash
/// recorded for the unit file and, for a service that [`counts_restarts`], its restart counter from `restarts`.
/// Units systemd did not report are left out.
pub fn unit_states(
    machine_id: &str,
    statuses: &[UnitStatus],
    hashes: &BTreeMap<String, String>,
    restarts: &BTreeMap<String, u32>,
) -> BTreeMap<String, UnitState> {
    statuses
        .iter()
        .filter_map(|s| {
            let hash = hashes.get(&s.name)?;
            let state = UnitState {
                name: s.name.clone(),
                machine_id: machine_id.to_string(),
                hash: hash.clone(),
                load_state: s.load_state.clone(),
                active_state: s.active_state.clone(),
                sub_state: s.sub_state.clone(),
                restarts: if counts_restarts(s) { restarts.get(&s.name).copied() } else { None },
            };
            Some((s.name.clone(), state))
        })
        .collect()
}

/// The loaded units (`loaded`: unit → hash) whose systemd state must be read now: every one when `all` (at the
/// start, after missed notifications, on resync), else those named in change notifications since the last read
/// (`changed`) and those with no state read yet (`seen`). The others keep the state read last: systemd announces
/// every change of a unit, and reading all of hundreds of units at every notification kept PID 1 busy while it
/// was starting them.
pub fn states_to_read(
    loaded: &BTreeMap<String, String>,
    seen: &BTreeMap<String, UnitStatus>,
    changed: &BTreeSet<String>,
    all: bool,
) -> Vec<String> {
    loaded.keys().filter(|name| all || changed.contains(*name) || !seen.contains_key(*name)).cloned().collect()
}

/// Whether the unit's restart counter (`NRestarts`) is published with its state: a loaded service that is active or
/// on its way there (a restart by systemd passes through `activating`).
pub fn counts_restarts(s: &UnitStatus) -> bool {
    s.name.ends_with(".service")
        && s.load_state == "loaded"
        && matches!(s.active_state.as_str(), "active" | "activating" | "reloading")
}

/// The services whose restart counter must be read from systemd now: those that [`counts_restarts`] and either
/// changed since the last read (`changed`; every unit when `all`, e.g. after missed notifications) or have no
/// known counter in `known`. The counter only moves together with a change notification of its unit, so a
/// unit that did not change keeps its known counter and costs no D-Bus call.
pub fn restart_counts_to_read(
    statuses: &[UnitStatus],
    changed: &BTreeSet<String>,
    all: bool,
    known: &BTreeMap<String, u32>,
) -> Vec<String> {
    statuses
        .iter()
        .filter(|s| counts_restarts(s) && (all || changed.contains(&s.name) || !known.contains_key(&s.name)))
        .map(|s| s.name.clone())
        .collect()
}

/// Operations that turn `last` (published) into `now` (current), in unit-name order. States without a hash or
/// machine are never published (§7.5).
pub fn diff(last: &BTreeMap<String, UnitState>, now: &BTreeMap<String, UnitState>) -> Vec<PublishOp> {
    let mut ops = Vec::new();
    let names: BTreeSet<&String> = last.keys().chain(now.keys()).collect();
    for name in names {
        match (last.get(name), now.get(name).filter(|s| publishable(s))) {
            (_, Some(current)) if last.get(name) != Some(current) => ops.push(PublishOp::Publish(current.clone())),
            (Some(_), None) => ops.push(PublishOp::Remove(name.clone())),
            _ => {}
        }
    }
    ops
}

/// Ops that repair this machine's states as the registry holds them (`stored`: unit → record, from a snapshot)
/// against what the agent published: missing or different states are written again, and states of units the
/// agent neither published nor has loaded (`loaded`) are removed, e.g. left by an earlier incarnation.
pub fn repair(
    published: &BTreeMap<String, UnitState>,
    stored: &BTreeMap<String, StateRecord>,
    loaded: &BTreeSet<&str>,
) -> Vec<PublishOp> {
    let mut ops: Vec<PublishOp> = published
        .values()
        .filter(|s| stored.get(&s.name) != Some(&StateRecord::from_state(s)))
        .cloned()
        .map(PublishOp::Publish)
        .collect();
    ops.extend(
        stored
            .keys()
            .filter(|n| !published.contains_key(*n) && !loaded.contains(n.as_str()))
            .map(|n| PublishOp::Remove(n.clone())),
    );
    ops
}

fn publishable(s: &UnitState) -> bool {
    !s.hash.is_empty() && !s.machine_id.is_empty()
}

/// Remembers what was published, so only changes are written, and re-publishes everything each TTL period.
#[derive(Debug, Default)]
pub struct Publisher {
    published: BTreeMap<String, UnitState>,
    /// Removals whose write failed; retried with the next ops.
    removals: BTreeSet<String>,
}

impl Publisher {
    pub fn new() -> Self {
        Publisher::default()
    }

    /// Ops for the current states; they are assumed written (report failures with [`Publisher::failed`]).
    pub fn changes(&mut self, now: &BTreeMap<String, UnitState>) -> Vec<PublishOp> {
        let mut ops = diff(&self.published, now);
        for name in std::mem::take(&mut self.removals) {
            if !now.contains_key(&name) && !ops.contains(&PublishOp::Remove(name.clone())) {
                ops.push(PublishOp::Remove(name));
            }
        }
        self.apply(&ops);
        ops
    }

    /// Ops that refresh every published state (their registry entries expire after the TTL), plus failed removals.
    pub fn refresh(&mut self) -> Vec<PublishOp> {
        let mut ops: Vec<PublishOp> = self.published.values().cloned().map(PublishOp::Publish).collect();
        ops.extend(std::mem::take(&mut self.removals).into_iter().map(PublishOp::Remove));
        ops
    }

    /// Ops that repair the registry's copy of this machine's states (see [`repair`]).
    pub fn repair(&self, stored: &BTreeMap<String, StateRecord>, loaded: &BTreeSet<&str>) -> Vec<PublishOp> {
        repair(&self.published, stored, loaded)
    }

    /// A write of `op` failed: make sure the next `changes` repeats it.
    pub fn failed(&mut self, op: &PublishOp) {
        match op {
            PublishOp::Publish(s) => {
                self.published.remove(&s.name);
            }
            PublishOp::Remove(name) => {
                self.removals.insert(name.clone());
            }
        }
    }

    /// Every state this machine currently has published (SIGTERM purge removes them, §1.5).
    pub fn published(&self) -> &BTreeMap<String, UnitState> {
        &self.published
    }

    fn apply(&mut self, ops: &[PublishOp]) {
        for op in ops {
            match op {
                PublishOp::Publish(s) => {
                    self.published.insert(s.name.clone(), s.clone());
                }
                PublishOp::Remove(name) => {
                    self.published.remove(name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "aaaaaaaa11111111aaaaaaaa11111111";

    fn state(name: &str, active: &str, hash: &str) -> UnitState {
        UnitState {
            name: name.into(),
            machine_id: M.into(),
            hash: hash.into(),
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: if active == "active" { "running".into() } else { "dead".into() },
            restarts: None,
        }
    }

    fn status(name: &str, load: &str, active: &str) -> UnitStatus {
        UnitStatus { name: name.into(), load_state: load.into(), active_state: active.into(), sub_state: String::new() }
    }

    fn map(states: &[UnitState]) -> BTreeMap<String, UnitState> {
        states.iter().map(|s| (s.name.clone(), s.clone())).collect()
    }

    #[test]
    fn only_changed_and_unread_units_are_read_again_unless_all() {
        let loaded: BTreeMap<String, String> =
            [("a.service", "h1"), ("b.service", "h2"), ("c.service", "h3")].map(|(n, h)| (n.into(), h.into())).into();
        let seen: BTreeMap<String, UnitStatus> =
            ["a.service", "b.service", "gone.service"].map(|n| (n.to_string(), status(n, "loaded", "active"))).into();
        let changed: BTreeSet<String> = ["b.service".to_string(), "gone.service".to_string()].into();
        assert_eq!(states_to_read(&loaded, &seen, &changed, false), ["b.service", "c.service"], "b changed, c unread");
        assert_eq!(states_to_read(&loaded, &seen, &BTreeSet::new(), false), ["c.service"]);
        assert_eq!(states_to_read(&loaded, &seen, &BTreeSet::new(), true), ["a.service", "b.service", "c.service"]);
    }

    #[test]
    fn diff_publishes_new_and_changed_and_removes_gone_states() {
        let last = map(&[
            state("a.service", "active", "h1"),
            state("b.service", "active", "h1"),
            state("c.service", "active", "h1"),
        ]);
        let now = map(&[
            state("a.service", "active", "h1"),
            state("b.service", "inactive", "h1"),
            state("d.service", "active", "h2"),
        ]);
        assert_eq!(
            diff(&last, &now),
            [
                PublishOp::Publish(state("b.service", "inactive", "h1")),
                PublishOp::Remove("c.service".into()),
                PublishOp::Publish(state("d.service", "active", "h2")),
            ]
        );
    }

    #[test]
    fn a_new_hash_alone_is_a_change() {
        let last = map(&[state("a.service", "active", "h1")]);
        let now = map(&[state("a.service", "active", "h2")]);
        assert_eq!(diff(&last, &now), [PublishOp::Publish(state("a.service", "active", "h2"))]);
    }

    #[test]
    fn states_without_hash_or_machine_are_never_published() {
        let mut no_machine = state("b.service", "active", "h1");
        no_machine.machine_id.clear();
        let now = map(&[state("a.service", "active", ""), no_machine]);
        assert_eq!(diff(&BTreeMap::new(), &now), []);
        // ...and one that loses its hash is withdrawn.
        assert_eq!(
            diff(&map(&[state("a.service", "active", "h1")]), &map(&[state("a.service", "active", "")])),
            [PublishOp::Remove("a.service".into())]
        );
    }

    #[test]
    fn publisher_writes_only_changes_and_refreshes_everything() {
        let mut p = Publisher::new();
        let now = map(&[state("a.service", "active", "h1")]);
        assert_eq!(p.changes(&now), [PublishOp::Publish(state("a.service", "active", "h1"))]);
        assert_eq!(p.changes(&now), []);
        assert_eq!(p.refresh(), [PublishOp::Publish(state("a.service", "active", "h1"))]);
        assert_eq!(p.changes(&BTreeMap::new()), [PublishOp::Remove("a.service".into())]);
        assert!(p.published().is_empty());
        assert_eq!(p.refresh(), []);
    }

    #[test]
    fn failed_writes_are_repeated() {
        let mut p = Publisher::new();
        let now = map(&[state("a.service", "active", "h1")]);
        let ops = p.changes(&now);
        p.failed(&ops[0]);
        assert_eq!(p.changes(&now), ops);
        let ops = p.changes(&BTreeMap::new());
        p.failed(&ops[0]);
        assert_eq!(p.changes(&BTreeMap::new()), [PublishOp::Remove("a.service".into())]);
        assert_eq!(p.changes(&BTreeMap::new()), []);
    }

    #[test]
    fn repair_rewrites_missing_and_different_states_and_removes_strays() {
        let published = map(&[state("a.service", "active", "h1"), state("b.service", "active", "h1")]);
        let stored: BTreeMap<String, StateRecord> = [
            ("b.service".to_string(), StateRecord::from_state(&state("b.service", "inactive", "h1"))),
            ("c.service".to_string(), StateRecord::from_state(&state("c.service", "active", "h0"))),
            ("d.service".to_string(), StateRecord::from_state(&state("d.service", "active", "h0"))),
        ]
        .into();
        let loaded: BTreeSet<&str> = ["d.service"].into();
        assert_eq!(
            repair(&published, &stored, &loaded),
            [
                PublishOp::Publish(state("a.service", "active", "h1")),
                PublishOp::Publish(state("b.service", "active", "h1")),
                PublishOp::Remove("c.service".into()),
            ]
        );
        let in_sync: BTreeMap<String, StateRecord> =
            published.iter().map(|(n, s)| (n.clone(), StateRecord::from_state(s))).collect();
        assert_eq!(repair(&published, &in_sync, &BTreeSet::new()), []);
    }

    #[test]
    fn unit_states_join_systemd_states_with_recorded_hashes() {
        let statuses = [
            UnitStatus {
                name: "a.service".into(),
                load_state: "loaded".into(),
                active_state: "active".into(),
                sub_state: "running".into(),
            },
            UnitStatus {
                name: "x.service".into(),
                load_state: "loaded".into(),
                active_state: "active".into(),
                sub_state: "running".into(),
            },
        ];
        let hashes: BTreeMap<String, String> = [("a.service".to_string(), "h1".to_string())].into();
        assert_eq!(unit_states(M, &statuses, &hashes, &BTreeMap::new()), map(&[state("a.service", "active", "h1")]));
        let restarts: BTreeMap<String, u32> = [("a.service".to_string(), 3)].into();
        let with_counter = unit_states(M, &statuses, &hashes, &restarts);
        assert_eq!(with_counter["a.service"].restarts, Some(3), "an active service publishes its restart counter");
    }

    #[test]
    fn restart_counter_is_published_only_for_active_or_activating_services() {
        let restarts: BTreeMap<String, u32> = [("a.service", 2), ("b.service", 2), ("c.socket", 2), ("d.service", 2)]
            .map(|(n, c)| (n.to_string(), c))
            .into();
        let statuses = [
            status("a.service", "loaded", "activating"),
            status("b.service", "loaded", "inactive"),
            status("c.socket", "loaded", "active"),
            status("d.service", "not-found", "active"),
        ];
        let hashes: BTreeMap<String, String> = restarts.keys().map(|n| (n.clone(), "h".to_string())).collect();
        let states = unit_states(M, &statuses, &hashes, &restarts);
        let published: Vec<(&str, Option<u32>)> = states.iter().map(|(n, s)| (n.as_str(), s.restarts)).collect();
        assert_eq!(published, [("a.service", Some(2)), ("b.service", None), ("c.socket", None), ("d.service", None)]);
    }

    #[test]
    fn restart_counters_are_read_for_changed_or_unknown_active_services_only() {
        let statuses = [
            status("changed.service", "loaded", "active"),
            status("known.service", "loaded", "active"),
            status("new.service", "loaded", "activating"),
            status("stopped.service", "loaded", "inactive"),
            status("sock.socket", "loaded", "active"),
        ];
        let known: BTreeMap<String, u32> =
            [("changed.service", 0), ("known.service", 1)].map(|(n, c)| (n.to_string(), c)).into();
        let changed: BTreeSet<String> = ["changed.service".to_string(), "stopped.service".to_string()].into();
        assert_eq!(restart_counts_to_read(&statuses, &changed, false, &known), ["changed.service", "new.service"]);
        assert_eq!(
            restart_counts_to_read(&statuses, &BTreeSet::new(), true, &known),
            ["changed.service", "known.service", "new.service"],
            "after missed notifications every active service is read again"
        );
    }
}

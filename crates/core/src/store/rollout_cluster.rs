//! The cluster as the pure rollout decision ([`rollout::advance`]) sees it, read from a registry snapshot: shared by
//! the engine leader and the test fake, so both drive rollouts from the same observations.

use super::Snapshot;
use crate::rollout::{self, Observed};

/// The cluster as [`rollout::advance`] sees it, read from a registry snapshot.
pub struct SnapshotCluster<'a>(pub &'a Snapshot);

impl rollout::Cluster for SnapshotCluster<'_> {
    fn observe(&self, unit: &str, machine: &str) -> Observed {
        let s = self.0;
        let present = s.machine_records().get(machine).is_some_and(|m| m.object.is_some());
        let record = s.unit_record(unit);
        let state = s.state_record(unit, machine);
        Observed {
            present,
            hash: state.map(|st| st.hash.to_string()),
            running: record.and_then(|r| r.launched(machine)).map(|h| h.to_string()),
            active_state: state.map(|st| st.active_state.to_string()).unwrap_or_default(),
            sub_state: state.map(|st| st.sub_state.to_string()).unwrap_or_default(),
            restarts: state.and_then(|st| st.restarts),
            restarted_for: record.and_then(|r| r.restarted_for(machine)).map(|id| id.to_string()),
            health: state.and_then(|st| st.health.clone()),
        }
    }

    fn metadata(&self, machine: &str) -> std::collections::BTreeMap<String, String> {
        self.0
            .machine_records()
            .get(machine)
            .and_then(|m| m.object.as_ref().map(|o| o.merged(&m.metadata).metadata))
            .unwrap_or_default()
    }

    /// Read from the rollout records in place (no copies): the machine's cordon, then its drains' stop steps.
    fn drained(&self, unit: &str, machine: &str) -> bool {
        let s = self.0;
        let Some(since) = s.machine_records().get(machine).and_then(|m| m.cordon.as_ref()).map(|c| c.since_ms) else {
            return false;
        };
        s.rollout_records()
            .values()
            .filter(|r| r.errors.is_empty())
            .filter_map(|r| Some((r.spec.as_ref()?, r.progress.as_ref()?)))
            .any(|(spec, progress)| rollout::stopped_by(spec, progress, machine, since).any(|u| u == unit))
    }

    fn exists(&self, unit: &str) -> bool {
        self.0.unit_record(unit).is_some_and(|r| r.object().is_some())
    }

    /// Present, with a load fault, and not holding the unit (no state published for it).
    fn cannot_load(&self, unit: &str, machine: &str) -> bool {
        let s = self.0;
        s.machine_records().get(machine).is_some_and(|r| r.object.is_some() && r.load_fault.is_some())
            && s.state_record(unit, machine).is_none()
    }

    /// Scheduled (a global unit never is) to another machine.
    fn moved(&self, unit: &str, machine: &str) -> bool {
        self.0.unit_record(unit).and_then(|r| r.target().map(|t| &**t)).is_some_and(|t| t != machine)
    }

    /// Present machines that publish a state of the unit (every machine running a global unit; a scheduled unit's
    /// machine), and machines whose agent says they should run it as a global unit (`global-units`) but do not:
    /// present ones that cannot write its file (a load fault), and ones that left less than
    /// `rollout::REMEMBER_DEPARTED` ago (the record outlives them). A rollout counts those as machines where the
    /// unit should run and does not. Else the unit's scheduled machine.
    fn holders(&self, unit: &str) -> Vec<String> {
        let s = self.0;
        let present = |m: &str| s.machine_records().get(m).is_some_and(|r| r.object.is_some());
        let should_run = s
            .machine_records()
            .iter()
            .filter(|(_, r)| r.global_units.as_ref().is_some_and(|g| g.units.contains(unit)))
            .map(|(m, _)| m.to_string());
        let publishing: std::collections::BTreeSet<String> = s
            .state_records()
            .get(unit)
            .into_iter()
            .flat_map(|per_machine| per_machine.keys())
            .filter(|m| present(m))
            .map(|m| m.to_string())
            .chain(should_run)
            .collect();
        if !publishing.is_empty() {
            return publishing.into_iter().collect();
        }
        s.unit_record(unit)
            .and_then(|r| r.target().map(|t| &**t))
            .filter(|m| present(m))
            .map(String::from)
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::Cluster;
    use crate::store::keys::Key;
    use crate::store::snapshot::tests::Build;

    /// A rollout of `g.service` from `from` to `to`, not taken up yet.
    fn g_rollout(
        kind: crate::rollout::RolloutKind,
        from: &str,
        to: &str,
        max_unavailable: u32,
    ) -> crate::rollout::Rollout {
        use crate::rollout::{Control, Rollout, RolloutSpec, RolloutUnit};
        let unit = RolloutUnit { name: "g.service".into(), from: from.into(), to: to.into(), ..RolloutUnit::default() };
        let spec = RolloutSpec {
            id: "r1".into(),
            kind,
            units: vec![unit],
            max_unavailable,
            health_timeout_ms: 60_000,
            ..RolloutSpec::default()
        };
        Rollout { spec, control: Control::default(), progress: None }
    }

    /// (machine, phase) of each step.
    fn phases(p: &crate::rollout::RolloutProgress) -> Vec<(&str, &str)> {
        p.steps.iter().map(|s| (s.machine.as_str(), s.phase.as_str())).collect()
    }

    /// Issue 38: a cordoned machine is present to a rollout, so its budget counts it as available.
    #[test]
    fn a_cordoned_machine_is_present_to_a_rollout() {
        let s = Build::new()
            .put_lease(Key::MachineObject { machine: "m1".into() }, r#"{"id":"m1"}"#, 7)
            .put(Key::MachineCordon { machine: "m1".into() }, r#"{"sinceMs":1}"#)
            .done();
        assert!(s.machine("m1").is_some_and(|m| m.cordoned));
        assert!(SnapshotCluster(&s).observe("a.service", "m1").present);
    }

    /// Issue 38: a unit a drain stopped on its machine is drained there while the cordon it was made under stands,
    /// and a restart rollout of it skips that machine rather than wait for a unit that will not start.
    #[test]
    fn a_unit_a_drain_stopped_is_skipped_by_other_rollouts_while_the_cordon_stands() {
        use crate::rollout::{Phase, Rollout, RolloutKind, Step, advance};
        use crate::store::snapshot::tests::H1;
        let machine = |id: &str| Key::MachineObject { machine: id.into() };
        let drain = r#"{"id":"d1","kind":"drain","units":[],"machine":"m1","cordonSinceMs":5,"maxUnavailable":1,"minHealthyMs":0,"healthTimeoutMs":60000,"createdMs":5}"#;
        let stopped =
            r#"{"state":"running","steps":[{"unit":"g.service","machine":"m1","phase":"updating","releasedMs":6}]}"#;
        let build = |cordon: &str| {
            Build::new()
                .put_lease(machine("m1"), r#"{"id":"m1"}"#, 7)
                .put_lease(machine("m2"), r#"{"id":"m2"}"#, 7)
                .put(Key::MachineCordon { machine: "m1".into() }, cordon)
                .unit("g.service", H1, None, "launched")
                .state("g.service", "m1", H1)
                .state("g.service", "m2", H1)
                .put(Key::RolloutSpec { id: "d1".into() }, drain)
                .put(Key::RolloutProgress { id: "d1".into() }, stopped)
                .done()
        };
        let s = build(r#"{"sinceMs":5}"#);
        let c = SnapshotCluster(&s);
        assert!(c.drained("g.service", "m1"));
        assert!(!c.drained("g.service", "m2") && !c.drained("other.service", "m1"));
        let later_cordon = build(r#"{"sinceMs":9}"#);
        assert!(!SnapshotCluster(&later_cordon).drained("g.service", "m1"), "another cordon than the drain's");

        let restart = g_rollout(RolloutKind::Restart, H1, H1, 2);
        let mut first = advance(&restart, &c, 10).progress;
        assert_eq!(first.steps.iter().map(|s| s.phase).collect::<Vec<_>>(), [Phase::Skipped, Phase::Updating]);
        assert_eq!(first.steps[0].detail, crate::rollout::DRAINED, "not released on the drained machine");
        // Released before the drain took the unit away: the next pass skips it, naming the drain.
        first.steps[0] = Step { phase: Phase::Updating, released_ms: 10, ..Step::pending("g.service", "m1") };
        let again = advance(&Rollout { progress: Some(first), ..restart }, &c, 20).progress;
        assert_eq!(again.steps[0].phase, Phase::Skipped, "{again:?}");
        assert_eq!(again.steps[0].detail, crate::rollout::DRAINED);
    }

    /// Issue 37 (nemesis): a machine that left shortly before a rollout of a global unit began counts against its
    /// budget, as one that leaves during it does: its `global-units` record outlives it for
    /// `rollout::REMEMBER_DEPARTED`. A record that does not decode counts for nothing.
    #[test]
    fn a_machine_that_left_just_before_a_rollout_counts_against_its_budget() {
        use crate::rollout::{RolloutKind, advance};
        use crate::store::snapshot::tests::{H1, H2};
        let machine = |id: &str| Key::MachineObject { machine: id.into() };
        let remembered = |record: &str| {
            Build::new()
                .put_lease(machine("m1"), r#"{"id":"m1"}"#, 7)
                .put_lease(machine("m3"), r#"{"id":"m3"}"#, 7)
                .put_lease(Key::MachineGlobalUnits { machine: "m2".into() }, record, 9)
                .unit("g.service", H2, None, "launched")
                .state("g.service", "m1", H1)
                .state("g.service", "m3", H1)
                .done()
        };
        let rollout = g_rollout(RolloutKind::Replace, H1, H2, 1);
        let s = remembered(r#"{"units":["g.service","other.service"]}"#);
        let c = SnapshotCluster(&s);
        assert!(!c.observe("g.service", "m2").present);
        let p = advance(&rollout, &c, 10).progress;
        assert_eq!(phases(&p), [("m1", "pending"), ("m2", "skipped"), ("m3", "pending")]);
        assert_eq!(p.reason, "waiting: 1 of at most 1 unavailable already: g.service on m2 (left the cluster)");

        let s = remembered("not json");
        let p = advance(&rollout, &SnapshotCluster(&s), 10).progress;
        assert_eq!(phases(&p), [("m1", "updating"), ("m3", "pending")], "an unreadable record remembers nothing");
    }

    /// A unit that is not global moved when it is scheduled to another machine; a global one never moves.
    #[test]
    fn a_unit_moved_when_scheduled_elsewhere() {
        use crate::store::snapshot::tests::H1;
        let s = Build::new()
            .unit("a.service", H1, None, "launched")
            .put(Key::UnitTarget { unit: "a.service".into() }, "m2")
            .unit("g.service", H1, None, "launched")
            .done();
        let c = SnapshotCluster(&s);
        assert!(c.moved("a.service", "m1"));
        assert!(!c.moved("a.service", "m2"));
        assert!(!c.moved("g.service", "m1"));
    }

    /// Issue 37 (nemesis): a present machine that should run a global unit but cannot write its file (a full disk)
    /// is one of a rollout's machines, skipped, and counts against the budget: the fault took its copy away.
    #[test]
    fn a_machine_that_cannot_write_a_global_units_file_counts_against_the_budget() {
        use crate::rollout::{CANNOT_LOAD, RolloutKind, advance};
        use crate::store::snapshot::tests::{H1, H2};
        let machine = |id: &str| Key::MachineObject { machine: id.into() };
        let s = Build::new()
            .put_lease(machine("m1"), r#"{"id":"m1"}"#, 7)
            .put_lease(machine("m2"), r#"{"id":"m2"}"#, 8)
            .put_lease(machine("m3"), r#"{"id":"m3"}"#, 9)
            .put_lease(Key::MachineLoadFault { machine: "m2".into() }, r#"{"reason":"No space left on device"}"#, 8)
            .put_lease(Key::MachineGlobalUnits { machine: "m2".into() }, r#"{"units":["g.service"]}"#, 10)
            .unit("g.service", H2, None, "launched")
            .state("g.service", "m1", H1)
            .state("g.service", "m3", H1)
            .done();
        let c = SnapshotCluster(&s);
        assert!(c.cannot_load("g.service", "m2") && !c.cannot_load("g.service", "m1"));
        let rollout = g_rollout(RolloutKind::Replace, H1, H2, 1);
        let p = advance(&rollout, &c, 10).progress;
        assert_eq!(phases(&p), [("m1", "pending"), ("m2", "skipped"), ("m3", "pending")]);
        assert_eq!(p.steps[1].detail, CANNOT_LOAD);
        assert!(p.reason.starts_with("waiting: 1 of at most 1 unavailable already: g.service on m2"), "{}", p.reason);
    }
}

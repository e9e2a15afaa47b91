//! Which units this machine should have, and in which state: a pure function of the cluster snapshot (spec §7.3
//! "desired state", §6.7 global units, §6.8/§6.11 conflicts in unit-name order, B17).
//!
//! A cordoned machine (issue 38) takes on no global unit it does not hold already; the global units it holds (their
//! file is on the machine) stay and follow their desired state as anywhere else — replaced, stopped, unloaded. Once
//! one leaves (unloaded, or everything gone after a reboot), it does not come back while the machine is cordoned.
//! Scheduled units need nothing here: the engine places no new unit on a cordoned machine and keeps the ones there.
//! A drain of the machine stops the units that cannot leave it (its global units, units pinned there): those
//! ([`ThisMachine::drained`], from [`crate::rollout::drained_units`]) are not considered while the cordon stands.
//! A machine that cannot write unit files (issue 37, [`ThisMachine::load_fault`]) takes on no global unit it does
//! not hold either, until its agent can write there again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::plan::{Desired, Update};
use crate::model::JobState;
use crate::unit::Requirements;
use crate::unit::xfleet::{Candidate, accepted_by_machine};

/// One unit of the cluster snapshot, as the agent needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterUnit {
    pub name: String,
    pub desired: JobState,
    /// 40-hex unit hash.
    pub hash: String,
    /// Canonical unit text (what is written to disk).
    pub text: Arc<str>,
    /// Whether the unit has an `[Install]` section (enabled on load, spec §4.6).
    pub install: bool,
    /// Whether the unit has `ExecReload=` (reloaded, not restarted, by a replace without restart).
    pub reloadable: bool,
    /// This version was stored without restart: update the file in place, keep a running process.
    pub no_restart: bool,
    /// A restart rollout asks this machine to restart the unit once, for the rollout with this ID.
    pub restart: Option<String>,
    /// Machine the engine scheduled it to (`None` for unscheduled and global units).
    pub target: Option<String>,
    /// `[X-Fleet]` requirements, specifier-expanded with the unit's name (the agent uses `global`,
    /// `machine_metadata` and `conflicts`).
    pub requirements: Arc<Requirements>,
}

/// This machine as the registry sees it (its own record, with merged metadata and its cordon), and the units it
/// holds now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThisMachine {
    pub id: String,
    pub metadata: BTreeMap<String, String>,
    /// The machine is cordoned: it takes on no global unit outside [`ThisMachine::holds`].
    pub cordoned: bool,
    /// The machine's agent cannot write unit files (issue 37): it takes on no global unit outside
    /// [`ThisMachine::holds`].
    pub load_fault: bool,
    /// The units whose file the machine has now (the agent's actual units); read only while cordoned or faulted.
    pub holds: BTreeSet<String>,
    /// Units a drain of this machine stopped, under the cordon that stands ([`crate::rollout::drained_units`]).
    pub drained: BTreeSet<String>,
}

/// Spec B14: without this machine's own record every unit would look unscheduled here, so nothing is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this machine's record is missing from the registry")]
pub struct OwnMachineMissing;

/// The units this machine should hold (spec §7.3), by [`accepted_by_machine`]. Accepted units keep their desired
/// state (global units too, even `inactive`, which then means "unload").
///
/// `me` is this machine's record as read from the registry; an empty id means it is missing (B14) and the
/// reconcile must be skipped rather than unload everything.
pub fn desired_units(units: &[ClusterUnit], me: &ThisMachine) -> Result<BTreeMap<String, Desired>, OwnMachineMissing> {
    if me.id.is_empty() {
        return Err(OwnMachineMissing);
    }
    let considered: Vec<&ClusterUnit> = units.iter().filter(|u| considers(me, u)).collect();
    let candidates: Vec<Candidate<'_>> = considered
        .iter()
        .map(|u| Candidate { name: &u.name, requirements: &u.requirements, target: u.target.as_deref() })
        .collect();
    Ok(accepted_by_machine(&candidates, &me.id, &me.metadata)
        .into_iter()
        .map(|i| considered[i])
        .map(|u| {
            let desired = Desired {
                state: u.desired,
                hash: u.hash.clone(),
                text: Arc::clone(&u.text),
                install: u.install,
                update: if u.no_restart { Update::InPlace { reload: u.reloadable } } else { Update::Restart },
                restart: u.restart.clone(),
            };
            (u.name.clone(), desired)
        })
        .collect())
}

/// Whether this machine considers `unit` at all: a cordoned machine, or one that cannot write unit files, leaves
/// out the global units it does not hold; a cordoned one also the units a drain stopped.
fn considers(me: &ThisMachine, unit: &ClusterUnit) -> bool {
    let new_global = unit.requirements.global && !me.holds.contains(&unit.name);
    !((me.cordoned || me.load_fault) && new_global) && !(me.cordoned && me.drained.contains(&unit.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "aaaaaaaa11111111aaaaaaaa11111111";
    const OTHER: &str = "bbbbbbbb22222222bbbbbbbb22222222";

    fn unit(name: &str, desired: JobState, target: Option<&str>) -> ClusterUnit {
        ClusterUnit {
            name: name.into(),
            desired,
            hash: format!("hash-of-{name}"),
            text: Arc::from(""),
            install: false,
            reloadable: false,
            no_restart: false,
            restart: None,
            target: target.map(str::to_string),
            requirements: Arc::new(Requirements::default()),
        }
    }

    fn global(name: &str, desired: JobState, metadata: &[(&str, &[&str])]) -> ClusterUnit {
        let mut u = unit(name, desired, None);
        let r = Arc::make_mut(&mut u.requirements);
        r.global = true;
        r.machine_metadata =
            metadata.iter().map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect())).collect();
        u
    }

    fn with_conflicts(mut u: ClusterUnit, patterns: &[&str]) -> ClusterUnit {
        Arc::make_mut(&mut u.requirements).conflicts = patterns.iter().map(|p| p.to_string()).collect();
        u
    }

    fn me(metadata: &[(&str, &str)]) -> ThisMachine {
        ThisMachine {
            id: ME.into(),
            metadata: metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        }
    }

    fn cordoned(holds: &[&str]) -> ThisMachine {
        ThisMachine { cordoned: true, holds: holds.iter().map(|h| h.to_string()).collect(), ..me(&[]) }
    }

    impl ThisMachine {
        fn holding(self, holds: &[&str]) -> ThisMachine {
            ThisMachine { holds: holds.iter().map(|h| h.to_string()).collect(), ..self }
        }

        fn uncordoned(self) -> ThisMachine {
            ThisMachine { cordoned: false, ..self }
        }
    }

    /// Issue 38: a cordoned machine keeps the global units it holds (they follow their desired state) and takes on
    /// no other; its scheduled units are the engine's, unchanged.
    #[test]
    fn a_cordoned_machine_takes_on_no_global_unit_it_does_not_hold() {
        let units = [
            unit("here.service", JobState::Launched, Some(ME)),
            global("held.service", JobState::Launched, &[]),
            global("new.service", JobState::Launched, &[]),
            global("stopping.service", JobState::Inactive, &[]),
            global("off.service", JobState::Inactive, &[]),
        ];
        type Case = (&'static str, ThisMachine, &'static [(&'static str, JobState)]);
        let drained = |drained: &[&str]| ThisMachine {
            drained: drained.iter().map(|h| h.to_string()).collect(),
            ..cordoned(&["held.service", "here.service"])
        };
        let cases: [Case; 8] = [
            (
                "cordoned and drained: what the drain stopped is left out, global or scheduled",
                drained(&["held.service", "here.service"]),
                &[],
            ),
            (
                "drained units are read only while cordoned",
                ThisMachine { cordoned: false, ..drained(&["held.service", "here.service"]) },
                &[
                    ("held.service", JobState::Launched),
                    ("here.service", JobState::Launched),
                    ("new.service", JobState::Launched),
                    ("off.service", JobState::Inactive),
                    ("stopping.service", JobState::Inactive),
                ],
            ),
            (
                "not cordoned: every global unit",
                me(&[]),
                &[
                    ("held.service", JobState::Launched),
                    ("here.service", JobState::Launched),
                    ("new.service", JobState::Launched),
                    ("off.service", JobState::Inactive),
                    ("stopping.service", JobState::Inactive),
                ],
            ),
            (
                "cordoned: the held ones only (an inactive one held is unloaded)",
                cordoned(&["held.service", "stopping.service", "here.service"]),
                &[
                    ("held.service", JobState::Launched),
                    ("here.service", JobState::Launched),
                    ("stopping.service", JobState::Inactive),
                ],
            ),
            (
                "cordoned and holding nothing (after a reboot): scheduled units only",
                cordoned(&[]),
                &[("here.service", JobState::Launched)],
            ),
            (
                "unable to write unit files (issue 37): the held global units and the scheduled ones, no new global",
                ThisMachine { load_fault: true, ..me(&[]) }.holding(&["held.service", "stopping.service"]),
                &[
                    ("held.service", JobState::Launched),
                    ("here.service", JobState::Launched),
                    ("stopping.service", JobState::Inactive),
                ],
            ),
            (
                "a load fault keeps no drained unit stopped (only a cordon does)",
                ThisMachine { load_fault: true, ..drained(&["held.service", "here.service"]) }.uncordoned(),
                &[("held.service", JobState::Launched), ("here.service", JobState::Launched)],
            ),
            (
                "what is held is read only while cordoned",
                ThisMachine { cordoned: false, ..cordoned(&[]) },
                &[
                    ("held.service", JobState::Launched),
                    ("here.service", JobState::Launched),
                    ("new.service", JobState::Launched),
                    ("off.service", JobState::Inactive),
                    ("stopping.service", JobState::Inactive),
                ],
            ),
        ];
        for (name, machine, want) in cases {
            assert_eq!(run(&units, &machine), names(want), "case: {name}");
        }
        // A held global unit's new version is still its own: the machine updates it.
        let replaced = ClusterUnit { hash: "new-hash".into(), ..global("held.service", JobState::Launched, &[]) };
        let desired = desired_units(&[replaced], &cordoned(&["held.service"])).unwrap();
        assert_eq!(desired["held.service"].hash, "new-hash");
        // A global left out here no longer conflicts with anything here.
        let units = [
            with_conflicts(global("a-new.service", JobState::Launched, &[]), &["b-held.service"]),
            global("b-held.service", JobState::Launched, &[]),
        ];
        assert_eq!(run(&units, &cordoned(&["b-held.service"])), names(&[("b-held.service", JobState::Launched)]));
        assert_eq!(run(&units, &me(&[])), names(&[("a-new.service", JobState::Launched)]));
    }

    fn run(units: &[ClusterUnit], machine: &ThisMachine) -> Vec<(String, JobState)> {
        desired_units(units, machine).unwrap().into_iter().map(|(n, d)| (n, d.state)).collect()
    }

    fn names(v: &[(&str, JobState)]) -> Vec<(String, JobState)> {
        v.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn non_global_units_need_this_machine_as_target() {
        let units = [
            unit("a.service", JobState::Launched, Some(ME)),
            unit("b.service", JobState::Launched, Some(OTHER)),
            unit("c.service", JobState::Loaded, None),
            unit("d.service", JobState::Loaded, Some(ME)),
            unit("e.service", JobState::Inactive, Some(ME)),
        ];
        assert_eq!(
            run(&units, &me(&[])),
            names(&[
                ("a.service", JobState::Launched),
                ("d.service", JobState::Loaded),
                ("e.service", JobState::Inactive)
            ])
        );
    }

    #[test]
    fn short_id_target_is_not_this_machine() {
        let units = [unit("a.service", JobState::Launched, Some(&ME[..8]))];
        assert_eq!(run(&units, &me(&[])), names(&[]));
    }

    #[test]
    fn global_units_need_matching_metadata() {
        let units = [
            global("any.service", JobState::Launched, &[]),
            global("front.service", JobState::Launched, &[("role", &["web", "front"])]),
            global("db.service", JobState::Launched, &[("role", &["db"])]),
            global("both.service", JobState::Loaded, &[("role", &["web"]), ("region", &["eu"])]),
            global("missing-key.service", JobState::Launched, &[("disk", &["ssd"])]),
            global("off.service", JobState::Inactive, &[]),
        ];
        assert_eq!(
            run(&units, &me(&[("role", "web"), ("region", "eu")])),
            names(&[
                ("any.service", JobState::Launched),
                ("both.service", JobState::Loaded),
                ("front.service", JobState::Launched),
                ("off.service", JobState::Inactive),
            ])
        );
    }

    #[test]
    fn global_conflicts_are_resolved_in_name_order() {
        // TestScheduleGlobalConflicts: the alphabetically first global unit wins, whatever the snapshot order.
        let units = [
            with_conflicts(
                global("conflict-global.2.service", JobState::Launched, &[]),
                &["conflict-global.*.service"],
            ),
            with_conflicts(
                global("conflict-global.1.service", JobState::Launched, &[]),
                &["conflict-global.*.service"],
            ),
        ];
        assert_eq!(run(&units, &me(&[])), names(&[("conflict-global.1.service", JobState::Launched)]));
    }

    #[test]
    fn a_global_unit_never_displaces_a_unit_scheduled_here() {
        // The global sorts first by name, but hello.service was placed here by the engine, which counts the global
        // as absent from this machine (spec §6.2): the global skips this machine, hello.service stays.
        let units = [
            unit("hello.service", JobState::Launched, Some(ME)),
            with_conflicts(global("global-avoids-hello.service", JobState::Launched, &[]), &["hello.service"]),
            global("any.service", JobState::Launched, &[]),
        ];
        assert_eq!(
            run(&units, &me(&[])),
            names(&[("any.service", JobState::Launched), ("hello.service", JobState::Launched)])
        );
        // Elsewhere (hello.service not scheduled there) the global runs.
        let units = [
            unit("hello.service", JobState::Launched, Some(OTHER)),
            with_conflicts(global("global-avoids-hello.service", JobState::Launched, &[]), &["hello.service"]),
        ];
        assert_eq!(run(&units, &me(&[])), names(&[("global-avoids-hello.service", JobState::Launched)]));
    }

    #[test]
    fn one_way_conflict_keeps_both_directions_apart() {
        let units = [
            unit("hello.service", JobState::Launched, Some(ME)),
            with_conflicts(unit("a-avoid.service", JobState::Launched, Some(ME)), &["hello.service"]),
        ];
        // a-avoid sorts first and is accepted; hello is matched by a-avoid's pattern and is dropped.
        assert_eq!(run(&units, &me(&[])), names(&[("a-avoid.service", JobState::Launched)]));
    }

    #[test]
    fn a_unit_never_conflicts_with_itself_and_bad_patterns_match_nothing() {
        let units = [
            with_conflicts(unit("self.service", JobState::Launched, Some(ME)), &["self.*"]),
            with_conflicts(unit("x.service", JobState::Launched, Some(ME)), &["[", "s[e"]),
        ];
        assert_eq!(
            run(&units, &me(&[])),
            names(&[("self.service", JobState::Launched), ("x.service", JobState::Launched)])
        );
    }

    #[test]
    fn conflicts_only_count_units_accepted_here() {
        let units = [
            with_conflicts(unit("a.service", JobState::Launched, Some(OTHER)), &["b.service"]),
            unit("b.service", JobState::Launched, Some(ME)),
        ];
        assert_eq!(run(&units, &me(&[])), names(&[("b.service", JobState::Launched)]));
    }

    #[test]
    fn missing_own_record_skips_the_reconcile() {
        let units = [unit("a.service", JobState::Launched, Some(ME))];
        let err = desired_units(&units, &ThisMachine::default()).unwrap_err();
        assert_eq!(err, OwnMachineMissing);
    }
}

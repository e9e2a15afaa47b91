//! One table per scheduling rule (spec §6.2–§6.10 and the Recs of §12).

use super::*;
use crate::scheduler::constraints::MetadataMismatch;
use crate::scheduler::{
    ExplainError, Fit, Placement, Rejection, ScheduleReason, UnplacedReason, UnscheduleReason, explain, plan,
};

/// A table row: a cluster state, and the decisions of exactly one pass over it.
struct Case {
    name: &'static str,
    machines: Vec<MachineState>,
    units: Vec<UnitSpec>,
    want: &'static [&'static str],
}

fn run(cases: Vec<Case>) {
    for case in cases {
        let snapshot = ScheduleInput::new(case.units, case.machines).unwrap();
        assert_eq!(brief(&plan(&snapshot)), case.want, "case: {}", case.name);
    }
}

fn ms(ids: &[&str]) -> Vec<MachineState> {
    ids.iter().map(|id| machine(id)).collect()
}

#[test]
fn least_loaded_with_machine_id_tie_break() {
    run(vec![
        Case {
            name: "idle machines: lowest ID wins, whatever the input order",
            machines: ms(&["c", "a", "b"]),
            units: vec![launched("x.service")],
            want: &["+x.service@a"],
        },
        Case {
            name: "least loaded wins over lower ID",
            machines: ms(&["a", "b", "c"]),
            units: vec![launched("p.service").on("a"), launched("q.service").on("c"), launched("x.service")],
            want: &["+x.service@b"],
        },
        Case {
            name: "ties broken byte-wise, not numerically",
            machines: ms(&["m10", "m9", "m2"]),
            units: vec![launched("x.service")],
            want: &["+x.service@m10"],
        },
        Case {
            name: "loads are updated as decisions are made: round-robin over equal machines",
            machines: ms(&["a", "b"]),
            units: vec![launched("u1.service"), launched("u2.service"), launched("u3.service"), launched("u4.service")],
            want: &["+u1.service@a", "+u2.service@b", "+u3.service@a", "+u4.service@b"],
        },
        Case {
            name: "units are taken in name order",
            machines: ms(&["a", "b"]),
            units: vec![launched("z.service"), launched("b.service").on("b"), launched("a.service")],
            want: &["+a.service@a", "+z.service@a"],
        },
    ]);
}

#[test]
fn machine_loss_and_joins() {
    run(vec![
        Case {
            name: "units of a lost machine are rescheduled in the same pass",
            machines: ms(&["a", "b"]),
            units: vec![launched("x.service").on("gone"), launched("y.service").on("a")],
            want: &["-x.service@gone", "+x.service@b"],
        },
        Case {
            name: "no churn when a machine joins",
            machines: ms(&["a", "b", "new"]),
            units: vec![launched("x.service").on("a"), launched("y.service").on("a"), launched("z.service").on("b")],
            want: &[],
        },
        Case {
            name: "never scheduled onto an absent machine: pinned unit of a lost machine waits",
            machines: ms(&["a"]),
            units: vec![launched("pin.service").on("gone").with(machine_id("gone"))],
            want: &["-pin.service@gone"],
        },
        Case {
            name: "no machines at all",
            machines: vec![],
            units: vec![launched("x.service"), launched("y.service").on("gone")],
            want: &["-y.service@gone"],
        },
    ]);
}

#[test]
fn desired_states() {
    run(vec![
        Case {
            name: "desired loaded is scheduled like launched",
            machines: ms(&["a"]),
            units: vec![UnitSpec::new("x.service", JobState::Loaded)],
            want: &["+x.service@a"],
        },
        Case {
            name: "desired inactive is unscheduled and not placed again",
            machines: ms(&["a", "b"]),
            units: vec![UnitSpec::new("x.service", JobState::Inactive).on("a")],
            want: &["-x.service@a"],
        },
        Case {
            name: "inactive unscheduled units are left alone",
            machines: ms(&["a"]),
            units: vec![UnitSpec::new("x.service", JobState::Inactive)],
            want: &[],
        },
        Case {
            name: "inactive units do not count as load",
            machines: ms(&["a", "b"]),
            units: vec![
                UnitSpec::new("old.service", JobState::Inactive).on("b"),
                launched("p.service").on("a"),
                launched("x.service"),
            ],
            want: &["-old.service@b", "+x.service@b"],
        },
    ]);
}

#[test]
fn machine_id_and_metadata() {
    let roles = || vec![machine_with("a", &[("role", "web")]), machine_with("b", &[("role", "db")])];
    run(vec![
        Case {
            name: "MachineID by short ID",
            machines: ms(&["8363165e6276f500", "8606e1a2949979fb"]),
            units: vec![launched("x.service").with(machine_id("8606e1a2"))],
            want: &["+x.service@8606e1a2949979fb"],
        },
        Case {
            name: "MachineID of an unknown machine: unschedulable",
            machines: ms(&["a"]),
            units: vec![launched("x.service").with(machine_id("zzz"))],
            want: &[],
        },
        Case {
            name: "metadata steers away from the least-loaded machine",
            machines: roles(),
            units: vec![launched("p.service").on("b"), launched("x.service").with(metadata(&[("role", &["db"])]))],
            want: &["+x.service@b"],
        },
        Case {
            name: "metadata removed from the machine: unit moves",
            machines: vec![machine_with("a", &[]), machine_with("b", &[("role", "web")])],
            units: vec![launched("x.service").on("a").with(metadata(&[("role", &["web"])]))],
            want: &["-x.service@a", "+x.service@b"],
        },
    ]);
}

#[test]
fn machine_of_follows_the_peer() {
    run(vec![
        Case {
            name: "follower placed with its peer even when it sorts first",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("a-follower.service").with(machine_of(&["z-peer.service"])),
                launched("z-peer.service"),
            ],
            want: &["+z-peer.service@a", "+a-follower.service@a"],
        },
        Case {
            name: "peer must leave: its follower (sorting first) goes with it in the same pass",
            machines: vec![machine_with("a", &[]), machine_with("b", &[("role", "web")])],
            units: vec![
                launched("a-follower.service").on("a").with(machine_of(&["z-peer.service"])),
                launched("z-peer.service").on("a").with(metadata(&[("role", &["web"])])),
            ],
            want: &["-z-peer.service@a", "-a-follower.service@a", "+z-peer.service@b", "+a-follower.service@b"],
        },
        Case {
            name: "chains follow too",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("c1.service").on("gone"),
                launched("c2.service").on("gone").with(machine_of(&["c1.service"])),
                launched("c3.service").on("gone").with(machine_of(&["c2.service"])),
                launched("other.service").on("a"),
            ],
            want: &[
                "-c1.service@gone",
                "-c2.service@gone",
                "-c3.service@gone",
                "+c1.service@b",
                "+c2.service@b",
                "+c3.service@b",
            ],
        },
        Case {
            name: "mutual MachineOf can never be scheduled",
            machines: ms(&["a"]),
            units: vec![
                launched("x.service").with(machine_of(&["y.service"])),
                launched("y.service").with(machine_of(&["x.service"])),
            ],
            want: &[],
        },
        Case {
            name: "a global peer is satisfied wherever the global runs",
            machines: vec![machine_with("a", &[]), machine_with("b", &[("role", "edge")])],
            units: vec![
                launched("edge-proxy.service").with(Constraints { global: true, ..metadata(&[("role", &["edge"])]) }),
                launched("x.service").with(machine_of(&["edge-proxy.service"])),
            ],
            want: &["+x.service@b"],
        },
    ]);
}

#[test]
fn conflicts_rules() {
    run(vec![
        Case {
            name: "conflicts are re-checked for scheduled units: the first by name moves",
            machines: ms(&["a", "b"]),
            units: vec![launched("x.service").on("a").with(conflicts(&["y.service"])), launched("y.service").on("a")],
            want: &["-x.service@a", "+x.service@b"],
        },
        Case {
            name: "one-way conflict also keeps the named unit away",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("x.service").on("a").with(conflicts(&["y.service"])),
                launched("p.service").on("b"),
                launched("q.service").on("b"),
                launched("y.service"),
            ],
            want: &["+y.service@b"],
        },
        Case {
            name: "a unit never conflicts with itself",
            machines: ms(&["a"]),
            units: vec![launched("c.1.service").on("a").with(conflicts(&["c.*.service"]))],
            want: &[],
        },
        Case {
            name: "a global unit's conflicts keep non-global units off its machines",
            machines: vec![machine_with("a", &[("role", "edge")]), machine_with("b", &[])],
            units: vec![
                launched("g.service").with(Constraints {
                    global: true,
                    conflicts: strings(&["x.service"]),
                    ..metadata(&[("role", &["edge"])])
                }),
                launched("p.service").on("b"),
                launched("q.service").on("b"),
                launched("x.service"),
            ],
            want: &["+x.service@b"],
        },
        Case {
            name: "a global blocked by a scheduled unit does not count there",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("g.service").with(Constraints {
                    global: true,
                    conflicts: strings(&["x.service"]),
                    ..Default::default()
                }),
                launched("x.service").on("a"),
                launched("y.service"),
            ],
            want: &["+y.service@a"],
        },
        Case {
            name: "inactive globals neither count nor conflict",
            machines: ms(&["a", "b"]),
            units: vec![
                UnitSpec::new("g.service", JobState::Inactive).with(Constraints {
                    global: true,
                    conflicts: strings(&["x.service"]),
                    ..Default::default()
                }),
                launched("p.service").on("b"),
                launched("x.service"),
            ],
            want: &["+x.service@a"],
        },
    ]);
}

#[test]
fn replaces_rules() {
    run(vec![
        Case {
            name: "both scheduled together, replacer sorts first: the replaced unit moves",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("a-new.service").on("a").with(replaces(&["z-old.service"])),
                launched("z-old.service").on("a"),
            ],
            want: &["-z-old.service@a", "+z-old.service@b"],
        },
        Case {
            name: "both scheduled together, replaced sorts first: still the replaced unit moves",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("a-old.service").on("a"),
                launched("z-new.service").on("a").with(replaces(&["a-old.service"])),
            ],
            want: &["-a-old.service@a", "+a-old.service@b"],
        },
        Case {
            name: "the replaced unit's destination honours its constraints",
            machines: vec![
                machine_with("a", &[("role", "web")]),
                machine_with("b", &[("role", "db")]),
                machine_with("c", &[("role", "web")]),
                machine_with("d", &[("role", "web")]),
            ],
            units: vec![
                launched("busy.service").on("c"),
                launched("kick.service")
                    .with(Constraints { replaces: strings(&["old.service"]), ..Default::default() }),
                launched("old.service").on("a").with(metadata(&[("role", &["web"])])),
                launched("x.service").on("b"),
                launched("y.service").on("d"),
            ],
            // kick goes to a (all loads 1, lowest ID), displacing old; old skips a (its replacer) and b (wrong role)
            want: &["-old.service@a", "+kick.service@a", "+old.service@c"],
        },
        Case {
            name: "replaced unit with nowhere else to go stays unscheduled",
            machines: ms(&["a"]),
            units: vec![launched("kick.service").with(replaces(&["old.service"])), launched("old.service").on("a")],
            want: &["-old.service@a", "+kick.service@a"],
        },
        Case {
            name: "a glob replaces every matching unit on the machine",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("hello@1.service").on("a"),
                launched("hello@2.service").on("a"),
                launched("new.service").with(replaces(&["hello@*.service"])),
                launched("p.service").on("b"),
                launched("q.service").on("b"),
                launched("r.service").on("b"),
            ],
            want: &[
                "-hello@1.service@a",
                "-hello@2.service@a",
                "+new.service@a",
                "+hello@1.service@b",
                "+hello@2.service@b",
            ],
        },
        Case {
            name: "a replaced unit is not placed next to its replacer",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("kick.service").on("a").with(replaces(&["old.service"])),
                launched("old.service"),
                launched("p.service").on("b"),
                launched("q.service").on("b"),
            ],
            want: &["+old.service@b"],
        },
        Case {
            name: "a unit never displaces its own peer (it would lose the peer and churn)",
            machines: ms(&["a"]),
            units: vec![
                launched("b.service").with(Constraints {
                    machine_of: strings(&["h.service"]),
                    replaces: strings(&["h.service"]),
                    ..Default::default()
                }),
                launched("h.service").on("a"),
            ],
            want: &[],
        },
        Case {
            name: "nor a unit its peer follows",
            machines: ms(&["a"]),
            units: vec![
                launched("b.service").with(Constraints {
                    machine_of: strings(&["g.service"]),
                    replaces: strings(&["h.service"]),
                    ..Default::default()
                }),
                launched("g.service").on("a").with(machine_of(&["h.service"])),
                launched("h.service").on("a"),
            ],
            want: &[],
        },
        Case {
            name: "circular replace, both scheduled: exactly one stays (the later by name)",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("r1.service").on("a").with(replaces(&["r2.service"])),
                launched("r2.service").on("b").with(replaces(&["r1.service"])),
            ],
            want: &["-r1.service@a"],
        },
        Case {
            name: "circular replace, both new: exactly one placed (the first by name)",
            machines: ms(&["a", "b"]),
            units: vec![
                launched("r1.service").with(replaces(&["r2.service"])),
                launched("r2.service").with(replaces(&["r*.service"])),
            ],
            want: &["+r1.service@a"],
        },
        Case {
            name: "a global unit's Replaces= neither displaces nor keeps away a unit (globals are the agents')",
            machines: ms(&["a"]),
            units: vec![
                launched("g.service").with(Constraints { global: true, ..replaces(&["old.service"]) }),
                launched("old.service"),
            ],
            want: &["+old.service@a"],
        },
    ]);
}

#[test]
fn global_units_are_never_scheduled_or_unscheduled() {
    run(vec![
        Case {
            name: "global with metadata counts only where it runs",
            machines: vec![machine_with("a", &[("role", "edge")]), machine_with("b", &[])],
            units: vec![
                launched("g.service").with(Constraints { global: true, ..metadata(&[("role", &["edge"])]) }),
                launched("x.service"),
            ],
            want: &["+x.service@b"],
        },
        Case {
            name: "a stale target on a global unit is ignored",
            machines: ms(&["a"]),
            units: vec![launched("g.service").on("gone").with(global())],
            want: &[],
        },
    ]);
}

#[test]
fn reasons_read_like_the_original_task_reasons() {
    let snapshot = ScheduleInput::new(
        [
            UnitSpec::new("off.service", JobState::Inactive).on("a"),
            launched("lost.service").on("gone"),
            launched("meta.service").on("a").with(metadata(&[("role", &["db"])])),
            UnitSpec::new("new.service", JobState::Loaded),
        ],
        [machine("a"), machine_with("b", &[("role", "db")])],
    )
    .unwrap();
    let lines: Vec<String> = plan(&snapshot).iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "unschedule Unit(lost.service) from Machine(gone): target Machine(gone) went away",
            "unschedule Unit(meta.service) from Machine(a): target Machine(a) unable to run unit: \
             local Machine metadata insufficient: role is unset, wanted one of [\"db\"]",
            "unschedule Unit(off.service) from Machine(a): target state inactive",
            "schedule Unit(lost.service) to Machine(a): target state launched and unit not scheduled; \
             least-loaded able machine (0 units)",
            "schedule Unit(meta.service) to Machine(b): target state launched and unit not scheduled; \
             least-loaded able machine (0 units)",
            "schedule Unit(new.service) to Machine(a): target state loaded and unit not scheduled; \
             least-loaded able machine (1 units)",
        ]
    );
    let decisions = plan(&snapshot);
    assert_eq!(
        decisions[1],
        Decision::Unschedule {
            unit: "meta.service".into(),
            machine: "a".into(),
            reason: UnscheduleReason::UnableToRun {
                machine: "a".into(),
                rejection: Rejection::MetadataInsufficient(MetadataMismatch {
                    key: "role".into(),
                    wanted: strings(&["db"]),
                    actual: None
                }),
            },
        }
    );
    assert_eq!(
        decisions[5],
        Decision::Schedule {
            unit: "new.service".into(),
            machine: "a".into(),
            reason: ScheduleReason {
                desired: JobState::Loaded,
                placement: Placement::LeastLoaded { load: 1 },
                replacing: vec![]
            },
        }
    );

    let displaced = ScheduleInput::new(
        [launched("kick.service").with(replaces(&["old.service"])), launched("old.service").on("a")],
        [machine("a")],
    )
    .unwrap();
    let lines: Vec<String> = plan(&displaced).iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "unschedule Unit(old.service) from Machine(a): target Machine(a) is taken by Unit(kick.service), \
             which replaces this unit",
            "schedule Unit(kick.service) to Machine(a): target state launched and unit not scheduled; \
             least-loaded able machine (1 units); replacing Unit(old.service)",
        ]
    );
}

#[test]
fn unplaced_units_are_reported_with_a_reason() {
    let mut sim = Sim::new(&[]);
    sim.add(launched("x.service"));
    assert_eq!(sim.pass().unplaced[0].reason, UnplacedReason::NoMachines);
    assert_eq!(UnplacedReason::NoMachines.to_string(), "zero agents available");
    assert_eq!(UnplacedReason::NoMachineAbleToRun.to_string(), "no agents able to run job");
}

#[test]
fn explain_lists_every_machine_with_its_verdict() {
    let snapshot = ScheduleInput::new(
        [
            launched("c.service").on("b"),
            launched("x.service").with(Constraints {
                conflicts: strings(&["c.service"]),
                machine_metadata: metadata(&[("disk", &["ssd"])]).machine_metadata,
                ..Default::default()
            }),
        ],
        [machine("a"), machine_with("b", &[("disk", "ssd")]), machine_with("c", &[("disk", "ssd")])],
    )
    .unwrap();
    let why = explain(&snapshot, "x.service").unwrap();
    let verdicts: Vec<(&str, usize, &Fit)> =
        why.machines.iter().map(|v| (v.machine.as_str(), v.load, &v.fit)).collect();
    let no_disk = Fit::Rejected(Rejection::MetadataInsufficient(MetadataMismatch {
        key: "disk".into(),
        wanted: strings(&["ssd"]),
        actual: None,
    }));
    let conflict = Fit::Rejected(Rejection::Conflict { unit: "c.service".into() });
    assert_eq!(verdicts, [("a", 0, &no_disk), ("c", 0, &Fit::Ok), ("b", 1, &conflict)]);
    assert_eq!(why.would_choose, Some(("c".to_string(), Placement::LeastLoaded { load: 0 })));
    assert_eq!(
        why.to_string(),
        "Unit(x.service) desired launched, not scheduled; placement would choose Machine(c)\n\
         \x20 Machine(a) load 0: unable to run unit: local Machine metadata insufficient: disk is unset, wanted one of [\"ssd\"]\n\
         \x20 Machine(c) load 0: able to run unit\n\
         \x20 Machine(b) load 1: unable to run unit: found conflict with locally-scheduled Unit(c.service)\n"
    );
    assert_eq!(explain(&snapshot, "nope.service"), Err(ExplainError::UnknownUnit("nope.service".into())));
}

#[test]
fn at_most_once_units_of_a_lost_machine_wait_while_the_engine_waits_the_margin_out() {
    let amo = |name: &str| launched(name).on("gone").with(Constraints { at_most_once: true, ..Constraints::default() });
    let units = || vec![amo("amo.service"), launched("plain.service").on("gone")];
    let waiting = ScheduleInput::new(units(), ms(&["a", "b"])).unwrap().with_waiting(["gone".to_string()].into());
    assert_eq!(
        brief(&plan(&waiting)),
        ["-plain.service@gone", "+plain.service@a"],
        "while the engine waits, only the plain unit moves"
    );
    let over = ScheduleInput::new(units(), ms(&["a", "b"])).unwrap();
    assert_eq!(
        brief(&plan(&over)),
        ["-amo.service@gone", "-plain.service@gone", "+amo.service@a", "+plain.service@b"],
        "once the wait is over, the at-most-once unit moves too"
    );
    // No machine able to take it: it keeps its target (in doubt) instead of becoming unscheduled.
    let nowhere = ScheduleInput::new(
        vec![amo("amo.service").with(Constraints {
            at_most_once: true,
            machine_id: Some("gone".into()),
            ..Constraints::default()
        })],
        ms(&["a"]),
    )
    .unwrap();
    assert!(plan(&nowhere).is_empty(), "{:?}", brief(&plan(&nowhere)));
    // Waiting for another machine holds nothing here.
    let other = ScheduleInput::new(units(), ms(&["a"])).unwrap().with_waiting(["elsewhere".to_string()].into());
    assert_eq!(
        brief(&plan(&other)),
        ["-amo.service@gone", "-plain.service@gone", "+amo.service@a", "+plain.service@a"]
    );
}

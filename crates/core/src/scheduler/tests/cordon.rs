//! Cordoned machines (issue 38): no new placement lands on one — not a new unit, not a unit that lost its machine,
//! not a displaced unit (rebalance: `rebalance/tests.rs`) — while every unit already scheduled there stays, also through a
//! replace in place (its target kept); the refusal is a reason `explain` (and so `fleetctl plan`) shows.

use super::*;
use crate::scheduler::{Fit, Rejection, explain, plan};

fn cordoned(id: &str) -> MachineState {
    MachineState { cordoned: true, ..machine(id) }
}

fn run(machines: Vec<MachineState>, units: Vec<UnitSpec>) -> Vec<String> {
    brief(&plan(&ScheduleInput::new(units, machines).unwrap()))
}

#[test]
fn no_new_unit_lands_on_a_cordoned_machine() {
    type Case = (&'static str, Vec<MachineState>, Vec<UnitSpec>, &'static [&'static str]);
    let cases: Vec<Case> = vec![
        (
            "new units go round the other machines only",
            vec![machine("a"), cordoned("b")],
            vec![launched("u1.service"), launched("u2.service"), launched("u3.service")],
            &["+u1.service@a", "+u2.service@a", "+u3.service@a"],
        ),
        (
            "the least-loaded machine is passed over when cordoned",
            vec![machine("a"), cordoned("b")],
            vec![launched("p.service").on("a"), launched("q.service").on("a"), launched("x.service")],
            &["+x.service@a"],
        ),
        (
            "units already there stay, whatever the loads",
            vec![machine("a"), cordoned("b")],
            vec![launched("p.service").on("b"), launched("q.service").on("b"), launched("r.service").on("b")],
            &[],
        ),
        (
            "a unit of a lost machine does not move onto a cordoned one",
            vec![cordoned("a"), machine("b")],
            vec![launched("x.service").on("gone")],
            &["-x.service@gone", "+x.service@b"],
        ),
        (
            "only cordoned machines: the unit waits",
            vec![cordoned("a"), cordoned("b")],
            vec![launched("x.service"), launched("y.service").on("a")],
            &[],
        ),
        (
            "MachineID= on a cordoned machine: the unit waits",
            vec![cordoned("a"), machine("b")],
            vec![launched("pin.service").with(machine_id("a"))],
            &[],
        ),
        (
            "a MachineOf= follower does not join its peer on a cordoned machine",
            vec![cordoned("a"), machine("b")],
            vec![launched("peer.service").on("a"), launched("follower.service").with(machine_of(&["peer.service"]))],
            &[],
        ),
        (
            "a follower already with its peer on a cordoned machine stays",
            vec![cordoned("a"), machine("b")],
            vec![
                launched("peer.service").on("a"),
                launched("follower.service").on("a").with(machine_of(&["peer.service"])),
            ],
            &[],
        ),
        (
            "a replacer does not land on a cordoned machine to displace",
            vec![cordoned("a"), machine("b")],
            vec![launched("old.service").on("a"), launched("new.service").with(replaces(&["old.service"]))],
            &["+new.service@b"],
        ),
        (
            "a unit that must leave (desired inactive) still leaves",
            vec![cordoned("a"), machine("b")],
            vec![UnitSpec::new("x.service", JobState::Inactive).on("a")],
            &["-x.service@a"],
        ),
        (
            "a unit unable to run there any more (conflict) leaves for an uncordoned machine",
            vec![cordoned("a"), machine("b")],
            vec![launched("a1.service").on("a"), launched("b1.service").on("a").with(conflicts(&["a1.service"]))],
            &["-a1.service@a", "+a1.service@b"],
        ),
    ];
    for (name, machines, units, want) in cases {
        assert_eq!(run(machines, units), want, "case: {name}");
    }
}

#[test]
fn uncordoned_the_machine_takes_new_units_again_and_nothing_moved_meanwhile() {
    let mut sim = Sim::with_machines(vec![machine("a"), cordoned("b")]);
    sim.add(launched("old.service").on("b"));
    sim.start((1..=4).map(|i| launched(&format!("u{i}.service"))));
    let on_b: Vec<String> = sim.placements().into_iter().filter(|(_, m)| m == "b").map(|(u, _)| u).collect();
    assert_eq!(on_b, ["old.service"], "{:?}", sim.placements());
    // A replace in place keeps the unit's target: the cordoned machine keeps it.
    sim.add(UnitSpec { desired: JobState::Loaded, ..launched("old.service").on("b") });
    assert_eq!(sim.converge(), Vec::<Vec<String>>::new());
    assert_eq!(sim.target("old.service"), Some("b"));
    // Uncordoned: nothing moves by itself, new units land there again.
    sim.machines[1].cordoned = false;
    assert_eq!(sim.converge(), Vec::<Vec<String>>::new(), "an uncordon moves nothing");
    assert_eq!(sim.start([launched("v.service")]), [["+v.service@b"]]);
}

#[test]
fn explain_says_why_a_cordoned_machine_refuses_and_not_for_units_there() {
    let input = ScheduleInput::new(
        [launched("there.service").on("b"), launched("x.service"), launched("g.service").with(global())],
        [machine("a"), cordoned("b")],
    )
    .unwrap();
    let why = explain(&input, "x.service").unwrap();
    let verdict = |why: &crate::scheduler::explain::Explanation, m: &str| {
        why.machines.iter().find(|v| v.machine == m).map(|v| v.fit.clone()).unwrap()
    };
    assert_eq!(verdict(&why, "b"), Fit::Rejected(Rejection::Cordoned { machine: "b".into() }));
    assert_eq!(verdict(&why, "a"), Fit::Ok);
    assert!(
        why.to_string()
            .contains("Machine(b) load 2: unable to run unit: machine is cordoned: Machine(b) takes no new unit"),
        "{why}"
    );
    let there = explain(&input, "there.service").unwrap();
    assert_eq!(verdict(&there, "b"), Fit::Ok, "a unit already there may stay");
    assert_eq!(verdict(&explain(&input, "g.service").unwrap(), "b"), Fit::Ok, "globals are the agents' decision");
    // The engine's reason for a unit nobody can take, when only cordoned machines remain.
    let only = ScheduleInput::new([launched("x.service")], [cordoned("a")]).unwrap();
    let report = plan_with_report(&only);
    assert_eq!(report.unplaced.iter().map(|u| u.unit.as_str()).collect::<Vec<_>>(), ["x.service"]);
}

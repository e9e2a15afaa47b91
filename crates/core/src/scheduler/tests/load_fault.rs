//! Machines whose agent cannot write unit files (issue 37, a full disk): they take no new unit, the units whose
//! file they failed to write go elsewhere (a pinned one waits), the units they run stay, and the refusal names the
//! reason for `explain` (and so `fleetctl plan`).

use super::*;
use crate::model::LoadFault;
use crate::scheduler::{Fit, Rejection, explain, plan};

const FULL: &str = "writing /run/fleet/units/.x.service.tmp: No space left on device (os error 28)";

fn failing(id: &str, units: &[&str]) -> MachineState {
    let fault = LoadFault { reason: FULL.into(), since_ms: 1, units: units.iter().map(|u| u.to_string()).collect() };
    MachineState { load_fault: Some(fault), ..machine(id) }
}

fn run(machines: Vec<MachineState>, units: Vec<UnitSpec>) -> Vec<String> {
    brief(&plan(&ScheduleInput::new(units, machines).unwrap()))
}

#[test]
fn a_machine_that_cannot_write_unit_files_takes_none_and_gives_up_those_it_failed() {
    type Case = (&'static str, Vec<MachineState>, Vec<UnitSpec>, &'static [&'static str]);
    let cases: Vec<Case> = vec![
        (
            "new units go round it, though it is the least loaded",
            vec![machine("a"), failing("b", &[])],
            vec![launched("p.service").on("a"), launched("x.service"), launched("y.service")],
            &["+x.service@a", "+y.service@a"],
        ),
        (
            "a unit it failed to write moves to a machine that can take it",
            vec![machine("a"), failing("b", &["x.service"])],
            vec![launched("x.service").on("b")],
            &["-x.service@b", "+x.service@a"],
        ),
        (
            "the units it runs stay",
            vec![machine("a"), failing("b", &["x.service"])],
            vec![launched("p.service").on("b"), launched("q.service").on("b")],
            &[],
        ),
        (
            "a unit pinned to it with MachineID= leaves it and waits",
            vec![machine("a"), failing("b", &["pin.service"])],
            vec![launched("pin.service").on("b").with(machine_id("b"))],
            &["-pin.service@b"],
        ),
        (
            "once the fault is gone, the pinned unit is placed there again",
            vec![machine("a"), machine("b")],
            vec![launched("pin.service").with(machine_id("b"))],
            &["+pin.service@b"],
        ),
    ];
    for (what, machines, units, want) in cases {
        assert_eq!(run(machines, units), *want, "{what}");
    }
}

#[test]
fn explain_names_the_reason() {
    let input =
        ScheduleInput::new(vec![launched("x.service")], vec![machine("a"), failing("b", &["x.service"])]).unwrap();
    let why = explain(&input, "x.service").unwrap();
    let verdict = why.machines.iter().find(|v| v.machine == "b").map(|v| v.fit.clone()).unwrap();
    assert_eq!(verdict, Fit::Rejected(Rejection::CannotLoad { machine: "b".into(), reason: FULL.into() }));
    assert!(verdict.to_string().contains("No space left on device"), "{verdict}");
}

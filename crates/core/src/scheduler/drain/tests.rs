//! Tables of the drain planner: where each unit of the drained machine goes, which stay, which no machine takes.

use super::{DrainPlan, Stay, place, plan};
use crate::model::MachineState;
use crate::rollout::Move;
use crate::scheduler::tests::{conflicts, global, launched, machine, machine_id, machine_of, machine_with, metadata};
use crate::scheduler::{Constraints, ScheduleInput, UnitSpec};

fn cordoned(id: &str) -> MachineState {
    MachineState { cordoned: true, ..machine(id) }
}

fn on(name: &str, m: &str) -> UnitSpec {
    launched(name).on(m)
}

fn mv(unit: &str, to: &str) -> Move {
    Move { unit: unit.into(), from: "m1".into(), to: to.into() }
}

fn drain(machines: Vec<MachineState>, units: Vec<UnitSpec>) -> DrainPlan {
    plan(&ScheduleInput::new(units, machines).unwrap(), "m1").unwrap()
}

#[test]
fn units_go_to_the_least_loaded_machines_one_after_the_other() {
    let units = vec![
        on("a.service", "m1"),
        on("b.service", "m1"),
        on("c.service", "m1"),
        on("x.service", "m2"),
        launched("g.service").with(global()),
    ];
    let p = drain(vec![cordoned("m1"), machine("m2"), machine("m3")], units);
    assert_eq!(p.moves, [mv("a.service", "m3"), mv("b.service", "m2"), mv("c.service", "m3")], "{p:?}");
    assert!(p.unplaced.is_empty() && p.stays.is_empty(), "{p:?}");
}

#[test]
fn constraints_hold_and_no_machine_means_unplaced_with_every_verdict() {
    let units = vec![
        on("a.service", "m1").with(conflicts(&["x.service"])),
        on("x.service", "m2"),
        on("meta.service", "m1").with(metadata(&[("disk", &["ssd"])])),
        on("x2.service", "m3"),
    ];
    let m4 = MachineState { cordoned: true, ..machine_with("m4", &[("disk", "ssd")]) };
    let p = drain(vec![cordoned("m1"), machine("m2"), machine("m3"), m4], units);
    assert_eq!(p.moves, [mv("a.service", "m3")], "a conflicts with x on m2; m4 is cordoned: {p:?}");
    assert_eq!(p.unplaced.len(), 1, "{p:?}");
    let (unit, why) = &p.unplaced[0];
    assert_eq!(unit, "meta.service");
    for expected in
        ["no other machine takes it", "m2: unable to run unit: local Machine metadata", "m3:", "m4:", "cordoned"]
    {
        assert!(why.contains(expected), "the reason names {expected:?}: {why}");
    }
}

#[test]
fn pinned_units_and_their_followers_stay_and_a_peer_moves_before_its_followers() {
    let units = vec![
        on("anchor.service", "m1"),
        on("a-follower.service", "m1").with(machine_of(&["anchor.service"])),
        on("pinned.service", "m1").with(machine_id("m1")),
        on("b-tied.service", "m1").with(machine_of(&["pinned.service"])),
    ];
    let p = drain(vec![cordoned("m1"), machine("m2")], units);
    assert_eq!(p.moves, [mv("anchor.service", "m2"), mv("a-follower.service", "m2")], "{p:?}");
    assert_eq!(
        p.stays,
        [
            ("b-tied.service".to_string(), Stay::Follows("pinned.service".into())),
            ("pinned.service".into(), Stay::Pinned)
        ]
    );
}

#[test]
fn a_released_move_keeps_its_destination_or_finds_another_or_says_why_not() {
    let units = vec![on("a.service", "m1"), on("b.service", "m3")];
    let input = ScheduleInput::new(units.clone(), vec![cordoned("m1"), machine("m2"), machine("m3")]).unwrap();
    assert_eq!(place(&input, "a.service", "m1", "m3"), Ok("m3".into()), "the planned destination still takes it");
    let m3_cordoned = ScheduleInput::new(units.clone(), vec![cordoned("m1"), machine("m2"), cordoned("m3")]).unwrap();
    assert_eq!(place(&m3_cordoned, "a.service", "m1", "m3"), Ok("m2".into()), "another machine does");
    let none = ScheduleInput::new(units.clone(), vec![cordoned("m1"), cordoned("m2"), cordoned("m3")]).unwrap();
    let why = place(&none, "a.service", "m1", "m3").unwrap_err();
    assert!(why.contains("no other machine takes it") && why.contains("m2:"), "{why}");
    let elsewhere = place(&input, "b.service", "m1", "m2").unwrap_err();
    assert_eq!(elsewhere, "the unit is no longer scheduled on the drained machine");
    assert_eq!(place(&input, "gone.service", "m1", "m2").unwrap_err(), "the unit is gone");
    let alone = ScheduleInput::new(vec![on("a.service", "m1")], vec![cordoned("m1")]).unwrap();
    assert_eq!(place(&alone, "a.service", "m1", "m2").unwrap_err(), "no other machine in the cluster");
    let no_replace = Constraints { replaces: vec!["b.service".into()], ..Default::default() };
    let displacing = ScheduleInput::new(
        vec![on("a.service", "m1").with(no_replace), on("b.service", "m2")],
        vec![cordoned("m1"), machine("m2")],
    )
    .unwrap();
    assert!(place(&displacing, "a.service", "m1", "m2").is_err(), "a move never displaces a unit");
}

#[test]
fn an_unknown_machine_is_an_error() {
    let input = ScheduleInput::new(vec![on("a.service", "m1")], vec![machine("m1")]).unwrap();
    assert_eq!(plan(&input, "m9").unwrap_err(), "machine m9 is not in the cluster");
}

#[test]
fn a_peer_on_another_machine_holds_no_unit_back() {
    // a follows z, which runs on m2 (a stale placement): z is not among the drained units, so a is planned in
    // name order, before b, and goes to z's machine.
    let units =
        vec![on("a.service", "m1").with(machine_of(&["z.service"])), on("b.service", "m1"), on("z.service", "m2")];
    let p = drain(vec![cordoned("m1"), machine("m2"), machine("m3")], units);
    assert_eq!(p.moves, [mv("a.service", "m2"), mv("b.service", "m3")], "{p:?}");
}

#[test]
fn why_a_unit_stays_reads_as_words() {
    assert_eq!(Stay::Pinned.to_string(), "pinned to the machine by MachineID=");
    assert_eq!(Stay::Follows("db.service".into()).to_string(), "follows db.service (MachineOf=), which stays");
}

//! Tables and a property test of the rebalance planner: moves towards an even spread, never against a
//! constraint, never of a unit that stays, at most `max_moves`, each unit at most once.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::{Stay, check, loads, plan, stays};
use crate::model::JobState;
use crate::rollout::Move;
use crate::scheduler::tests::{
    Sim, conflicts, global, launched, machine, machine_id, machine_of, machine_with, metadata,
};
use crate::scheduler::{Constraints, Fit, ScheduleInput, UnitSpec, explain};

fn none() -> BTreeSet<&'static str> {
    BTreeSet::new()
}

/// `n` launched units `u00..` on `machines` as given by `on` (machine per unit).
fn input(machines: &[&str], units: Vec<UnitSpec>) -> ScheduleInput {
    ScheduleInput::new(units, machines.iter().map(|m| machine(m))).unwrap()
}

fn on(name: &str, m: &str) -> UnitSpec {
    launched(name).on(m)
}

fn counts(input: &ScheduleInput) -> Vec<usize> {
    loads(input).into_iter().map(|(_, n)| n).collect()
}

/// `input` with `moves` applied (targets rewritten), one after the other.
fn applied(input: &ScheduleInput, moves: &[Move]) -> ScheduleInput {
    moves.iter().fold(input.clone(), |now, m| super::moved(&now, m))
}

#[test]
fn a_returned_empty_machine_gets_its_share_a_few_at_a_time() {
    // 12 units on m1 and m2 (6/6), m3 back and empty: 4/4/4 takes 4 moves.
    let units = (0..12).map(|i| on(&format!("u{i:02}.service"), if i % 2 == 0 { "m1" } else { "m2" })).collect();
    let before = input(&["m1", "m2", "m3"], units);
    let moves = plan(&before, 100, &none());
    assert_eq!(moves.len(), 4, "{moves:?}");
    assert!(moves.iter().all(|m| m.to == "m3"), "every move goes to the empty machine: {moves:?}");
    assert_eq!(counts(&applied(&before, &moves)), [4, 4, 4]);
    let first_two = plan(&before, 2, &none());
    assert_eq!(first_two, moves[..2], "a bounded plan is the start of the full one");
    assert_eq!(counts(&applied(&before, &first_two)), [5, 5, 2]);
}

#[test]
fn a_spread_within_one_needs_no_move() {
    let units = vec![on("a.service", "m1"), on("b.service", "m1"), on("c.service", "m2"), on("d.service", "m3")];
    let before = input(&["m1", "m2", "m3"], units);
    assert_eq!(plan(&before, 10, &none()), [], "2/1/1 is as even as it gets");
    let uneven = input(&["m1", "m2", "m3"], vec![on("a.service", "m1"), on("b.service", "m1"), on("c.service", "m2")]);
    assert_eq!(plan(&uneven, 10, &none()).len(), 1, "2/1/0 becomes 1/1/1");
}

#[test]
fn units_that_asked_to_stay_or_are_tied_never_move() {
    let stay = Constraints { stays: true, ..Default::default() };
    let units = vec![
        on("asked.service", "m1").with(stay),
        on("pinned.service", "m1").with(machine_id("m1")),
        on("peer.service", "m1"),
        on("follower.service", "m1").with(machine_of(&["peer.service"])),
        on("rolling.service", "m1"),
        on("repl.service", "m1").with(Constraints { replaces: vec!["x.service".into()], ..Default::default() }),
        on("hates-global.service", "m1").with(conflicts(&["g.service"])),
        launched("g.service").with(global()),
    ];
    let before = input(&["m1", "m2"], units);
    let busy: BTreeSet<&str> = ["rolling.service"].into();
    assert_eq!(plan(&before, 10, &busy), [], "nothing on m1 may move");
    let reason = |u: &str| stays(&before, u, &busy);
    assert_eq!(reason("asked.service"), Some(Stay::AskedToStay));
    assert_eq!(reason("pinned.service"), Some(Stay::MachineId));
    assert_eq!(reason("peer.service"), Some(Stay::Followed));
    assert_eq!(reason("follower.service"), Some(Stay::MachineOf));
    assert_eq!(reason("rolling.service"), Some(Stay::InRollout));
    assert_eq!(reason("repl.service"), Some(Stay::Replaces));
    assert_eq!(reason("hates-global.service"), Some(Stay::ConflictsWithGlobal));
    assert_eq!(reason("g.service"), Some(Stay::Global));
    assert_eq!(Stay::AskedToStay.to_string(), "it asked to stay (Rebalance=false)");
}

#[test]
fn moves_respect_conflicts_and_metadata() {
    // a* conflict with each other (one on every machine), b1 needs role=db (only m1): only the c units can leave m1.
    let machines = [machine_with("m1", &[("role", "db")]), machine("m2"), machine("m3")];
    let units = vec![
        on("a1.service", "m1").with(conflicts(&["a*"])),
        on("a2.service", "m2").with(conflicts(&["a*"])),
        on("a3.service", "m3").with(conflicts(&["a*"])),
        on("b1.service", "m1").with(metadata(&[("role", &["db"])])),
        on("c1.service", "m1"),
        on("c2.service", "m1"),
        on("c3.service", "m1"),
    ];
    let before = ScheduleInput::new(units, machines).unwrap();
    let moves = plan(&before, 10, &none());
    let brief: Vec<String> = moves.iter().map(|m| format!("{}:{}->{}", m.unit, m.from, m.to)).collect();
    assert_eq!(brief, ["c1.service:m1->m2", "c2.service:m1->m3"]);
    assert_eq!(counts(&applied(&before, &moves)), [3, 2, 2]);
}

#[test]
fn check_refuses_a_move_the_cluster_no_longer_allows() {
    let units = (0..4).map(|i| on(&format!("u{i}.service"), "m1")).collect();
    let before = input(&["m1", "m2"], units);
    let moves = plan(&before, 10, &none());
    assert_eq!(moves.len(), 2);
    assert_eq!(check(&before, &moves[0], &none()), Ok(()));
    let after_both = applied(&before, &moves);
    let again = Move { unit: "u0.service".into(), from: "m1".into(), to: "m2".into() };
    let err = check(&after_both, &again, &none()).unwrap_err();
    assert!(err.contains("no longer evens the spread") || err.contains("no longer scheduled"), "{err}");
    let gone = Move { to: "m9".into(), ..moves[0].clone() };
    assert_eq!(check(&before, &gone, &none()).unwrap_err(), "the destination left the cluster");
    let busy: BTreeSet<&str> = [moves[0].unit.as_str()].into();
    assert!(check(&before, &moves[0], &busy).unwrap_err().contains("rollout in progress"));
}

const NAMES: [&str; 10] = [
    "a.service",
    "b.service",
    "c.service",
    "d.service",
    "e.service",
    "f.service",
    "g.service",
    "h.service",
    "i.service",
    "j.service",
];
const MACHINES: [&str; 4] = ["m1", "m2", "m3", "m4"];

fn unit(i: usize) -> impl Strategy<Value = UnitSpec> {
    (
        prop_oneof![
            Just(JobState::Inactive),
            Just(JobState::Loaded),
            Just(JobState::Launched),
            Just(JobState::Launched)
        ],
        proptest::option::weighted(0.3, prop_oneof![Just("a*"), Just("[b-d]*"), Just("j.service")]),
        proptest::option::weighted(0.1, 0..MACHINES.len()),
        proptest::option::weighted(0.15, 0..NAMES.len()),
        proptest::option::weighted(0.2, Just("db")),
        proptest::option::weighted(0.1, Just(())),
        proptest::option::weighted(0.15, Just(())),
    )
        .prop_map(move |(desired, conflict, pin, peer, role, is_global, stay)| {
            let mut c = Constraints {
                conflicts: conflict.into_iter().map(str::to_string).collect(),
                machine_id: pin.map(|m| MACHINES[m].to_string()),
                machine_of: peer.filter(|&p| p != i).map(|p| NAMES[p].to_string()).into_iter().collect(),
                global: is_global.is_some(),
                stays: stay.is_some(),
                ..Default::default()
            };
            if let Some(role) = role {
                c.machine_metadata.insert("role".into(), vec![role.to_string()]);
            }
            UnitSpec::new(NAMES[i], desired).with(c)
        })
}

/// A converged cluster (the scheduler placed everything it could on the first `live` machines), then every
/// machine present: what a returned or joined machine finds.
fn cluster() -> impl Strategy<Value = (ScheduleInput, usize)> {
    (
        proptest::collection::vec(proptest::bool::ANY, MACHINES.len()),
        1..MACHINES.len(),
        (0..NAMES.len()).map(unit).collect::<Vec<_>>(),
        1usize..6,
    )
        .prop_map(|(db, live, units, max_moves)| {
            let machines: Vec<_> = MACHINES
                .iter()
                .zip(&db)
                .map(|(m, db)| if *db { machine_with(m, &[("role", "db")]) } else { machine(m) })
                .collect();
            let mut sim = Sim::with_machines(machines[..live].to_vec());
            for u in units {
                sim.add(u);
            }
            sim.converge();
            sim.machines = machines;
            (sim.snapshot(), max_moves)
        })
}

fn sum_of_squares(input: &ScheduleInput) -> usize {
    counts(input).iter().map(|n| n * n).sum()
}

fn spread(input: &ScheduleInput) -> usize {
    let c = counts(input);
    c.iter().max().unwrap_or(&0) - c.iter().min().unwrap_or(&0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn moves_never_break_constraints_never_worsen_the_spread_and_are_bounded((before, max_moves) in cluster()) {
        let moves = plan(&before, max_moves, &none());
        prop_assert!(moves.len() <= max_moves, "{} moves, at most {max_moves} allowed", moves.len());
        let moved: BTreeSet<&str> = moves.iter().map(|m| m.unit.as_str()).collect();
        prop_assert_eq!(moved.len(), moves.len(), "a unit moved twice: {:?}", moves);
        let mut now = before.clone();
        for m in &moves {
            prop_assert_eq!(check(&now, m, &none()), Ok(()), "move {:?} on {:?}", m, loads(&now));
            prop_assert!(stays(&before, &m.unit, &none()).is_none(), "{} should have stayed", m.unit);
            let next = applied(&now, std::slice::from_ref(m));
            prop_assert!(sum_of_squares(&next) < sum_of_squares(&now), "{:?} did not even the loads", m);
            prop_assert!(spread(&next) <= spread(&now), "{:?} widened the spread", m);
            now = next;
        }
        // Every unit of the final state still fits where it is (nothing the moves did breaks a constraint).
        for u in now.units().filter(|u| u.target.is_some() && u.desired != JobState::Inactive) {
            let target = u.target.as_deref().unwrap();
            let before_fit = explain(&before, &u.name).unwrap();
            let was_ok = before_fit.machines.iter().find(|v| Some(v.machine.as_str()) == before.unit(&u.name).unwrap().target.as_deref())
                .is_none_or(|v| !matches!(v.fit, Fit::Rejected(_)));
            let verdict = explain(&now, &u.name).unwrap();
            let fit = &verdict.machines.iter().find(|v| v.machine == target).unwrap().fit;
            prop_assert!(!was_ok || !matches!(fit, Fit::Rejected(_)), "{} on {}: {}", u.name, target, fit);
        }
        // A bounded plan stops early only at its bound: with more room it would be the longer plan's start.
        let longer = plan(&before, max_moves + 4, &none());
        prop_assert_eq!(&longer[..moves.len()], &moves[..]);
    }
}

fn cordoned(id: &str) -> crate::model::MachineState {
    crate::model::MachineState { cordoned: true, ..machine(id) }
}

/// Issue 38: a cordoned machine receives no move; its own units may still move off it.
#[test]
fn rebalance_never_moves_a_unit_onto_a_cordoned_machine() {
    // 6 units on m1, m2 empty but cordoned, m3 empty: every move goes to m3; nothing is ever planned to m2.
    let units: Vec<UnitSpec> = (0..6).map(|i| launched(&format!("u{i}.service")).on("m1")).collect();
    let input = ScheduleInput::new(units, [machine("m1"), cordoned("m2"), machine("m3")]).unwrap();
    let moves = plan(&input, 100, &BTreeSet::new());
    assert_eq!(moves.len(), 3, "{moves:?}");
    assert!(moves.iter().all(|m| m.to == "m3"), "{moves:?}");
    let to_cordoned = crate::rollout::Move { unit: "u0.service".into(), from: "m1".into(), to: "m2".into() };
    let refused = check(&input, &to_cordoned, &BTreeSet::new()).unwrap_err();
    assert!(refused.contains("machine is cordoned"), "{refused}");
    // A cordoned machine's own units may still move off it towards an even spread (a rebalance asked for).
    let units: Vec<UnitSpec> = (0..4).map(|i| launched(&format!("u{i}.service")).on("m2")).collect();
    let input = ScheduleInput::new(units, [machine("m1"), cordoned("m2")]).unwrap();
    assert_eq!(plan(&input, 100, &BTreeSet::new()).len(), 2);
}

//! The original's functional scheduling tests (spec §11.3) and reference transcripts, replayed on the pure
//! scheduler. Each test names the original test it pins.

use super::*;
use crate::scheduler::{Fit, Rejection, UnplacedReason, explain};

#[test]
fn schedule_machine_of_pairs_stay_together_across_machine_loss() {
    // TestScheduleMachineOf
    let mut sim = Sim::new(&["m1", "m2", "m3"]);
    let mut batch = Vec::new();
    for n in 0..3 {
        batch.push(launched(&format!("ping.{n}.service")));
        batch.push(launched(&format!("pong.{n}.service")).with(machine_of(&[&format!("ping.{n}.service")])));
    }
    let passes = sim.start(batch);
    assert_eq!(passes.len(), 1, "everything placed in one pass");
    for n in 0..3 {
        assert_eq!(sim.target(&format!("ping.{n}.service")), sim.target(&format!("pong.{n}.service")));
    }
    assert_eq!(sim.target("ping.0.service"), Some("m1"));
    assert_eq!(sim.target("ping.1.service"), Some("m2"));
    assert_eq!(sim.target("ping.2.service"), Some("m3"));

    let before = sim.placements();
    sim.remove_machine("m2");
    let passes = sim.converge();
    assert_eq!(
        passes,
        [["-ping.1.service@m2", "-pong.1.service@m2", "+ping.1.service@m1", "+pong.1.service@m1",]],
        "the pair moves together in one pass, to the least-loaded machine (tie broken by ID)"
    );
    for n in [0, 2] {
        for unit in [format!("ping.{n}.service"), format!("pong.{n}.service")] {
            assert_eq!(sim.placements()[&unit], before[&unit], "{unit} did not move");
        }
    }
}

fn conflict_family(count: usize) -> Vec<UnitSpec> {
    (0..count).map(|n| launched(&format!("conflict.{n}.service")).with(conflicts(&["conflict.*.service"]))).collect()
}

#[test]
fn schedule_conflicts_at_most_one_per_machine() {
    // TestScheduleConflicts
    let mut sim = Sim::new(&["m1", "m2", "m3"]);
    sim.start(conflict_family(5));
    let placements = sim.placements();
    assert_eq!(placements.len(), 3);
    assert_eq!(placements.values().collect::<BTreeSet<_>>().len(), 3, "on 3 distinct machines");
    let plan = sim.pass();
    assert!(plan.decisions.is_empty());
    assert_eq!(
        plan.unplaced.iter().map(|u| (u.unit.as_str(), u.reason)).collect::<Vec<_>>(),
        [
            ("conflict.3.service", UnplacedReason::NoMachineAbleToRun),
            ("conflict.4.service", UnplacedReason::NoMachineAbleToRun)
        ]
    );
}

#[test]
fn schedule_one_way_conflict_keeps_the_other_unit_away() {
    // TestScheduleOneWayConflict
    let mut sim = Sim::new(&["m1"]);
    sim.start([launched("conflicts-with-hello.service").with(conflicts(&["hello.service"]))]);
    sim.start([launched("hello.service")]);
    assert_eq!(sim.scheduled(), BTreeSet::from(["conflicts-with-hello.service".to_string()]));
    let why = explain(&sim.snapshot(), "hello.service").unwrap();
    assert_eq!(why.machines[0].fit, Fit::Rejected(Rejection::Conflict { unit: "conflicts-with-hello.service".into() }));

    sim.units.remove("conflicts-with-hello.service"); // destroy
    assert_eq!(sim.converge(), [["+hello.service@m1"]]);
}

#[test]
fn schedule_multiple_conflicts_spread_over_machines() {
    // TestScheduleMultipleConflicts: patterns given on one line or several lines name conflict.0..2.
    let mut sim = Sim::new(&["m1", "m2", "m3"]);
    let patterns = ["conflict.2.service", "conflict.1.service", "conflict.0.service"];
    sim.start((0..3).map(|n| launched(&format!("conflict.multiple.{n}.service")).with(conflicts(&patterns))));
    assert_eq!(sim.placements().values().collect::<BTreeSet<_>>().len(), 3);
    // And the patterns really bite: each conflict.N must avoid every conflict.multiple unit.
    sim.start([launched("conflict.0.service")]);
    assert_eq!(sim.target("conflict.0.service"), None);
}

#[test]
fn schedule_replace_moves_the_replaced_unit_and_keeps_the_replacer() {
    // TestScheduleReplace (spec B1 Rec: deterministic)
    let mut sim = Sim::new(&["m0", "m1"]);
    sim.start([launched("replace.0.service")]);
    sim.start([launched("replace.1.service"), launched("replace.2.service").with(machine_of(&["replace.1.service"]))]);
    assert_eq!(sim.target("replace.0.service"), Some("m0"));
    assert_eq!(sim.target("replace.1.service"), Some("m1"));
    assert_eq!(sim.target("replace.2.service"), Some("m1"));

    let passes = sim.start([launched("replace-kick0.service").with(replaces(&["replace.0.service"]))]);
    assert_eq!(
        passes,
        [["-replace.0.service@m0", "+replace-kick0.service@m0", "+replace.0.service@m1"]],
        "the replacer takes the least-loaded machine; the replaced unit leaves first and lands elsewhere"
    );
    assert_eq!(sim.scheduled().len(), 4);
}

#[test]
fn schedule_circular_replace_keeps_exactly_one_active() {
    // TestScheduleCircularReplace (spec B2 Rec)
    let mut sim = Sim::new(&["m0", "m1"]);
    sim.start([launched("replace.0.service").with(replaces(&["replace-kick0.service"]))]);
    assert_eq!(sim.scheduled().len(), 1);
    sim.start([launched("replace-kick0.service").with(replaces(&["replace.0.service"]))]);
    assert_eq!(sim.scheduled(), BTreeSet::from(["replace.0.service".to_string()]));
    let why = explain(&sim.snapshot(), "replace-kick0.service").unwrap();
    for verdict in &why.machines {
        assert_eq!(
            verdict.fit,
            Fit::Rejected(Rejection::CircularReplace { unit: "replace.0.service".into(), machine: "m0".into() })
        );
    }
    assert_eq!(why.would_choose, None);
}

#[test]
fn schedule_condition_machine_id_places_each_unit_on_its_machine() {
    // TestScheduleConditionMachineID, with full IDs and with 8-char short IDs.
    let ids =
        ["8363165e6276f500b71169eca9b3f76b", "8606e1a2949979fb223fb4bad77d152c", "d91d98fca203da3cb89fb5c100ed0823"];
    for short in [false, true] {
        let mut sim = Sim::new(&ids);
        sim.start(ids.iter().rev().enumerate().map(|(n, id)| {
            let wanted = if short { &id[..8] } else { id };
            launched(&format!("pinned.{n}.service")).with(machine_id(wanted))
        }));
        for (n, id) in ids.iter().rev().enumerate() {
            assert_eq!(sim.target(&format!("pinned.{n}.service")), Some(*id), "short={short}");
        }
    }
}

#[test]
fn schedule_global_units_are_never_scheduled_but_count_as_load() {
    // TestScheduleGlobalUnits
    let mut sim = Sim::new(&["m1", "m2", "m3"]);
    sim.start([launched("hello.service"), launched("goodbye.service")]);
    let passes = sim.start([launched("global.service").with(global())]);
    assert!(passes.is_empty(), "the engine never schedules a global unit");
    assert_eq!(sim.target("global.service"), None);
    let why = explain(&sim.snapshot(), "global.service").unwrap();
    assert!(why.machines.iter().all(|v| v.fit == Fit::Ok), "global runs on every machine");
    // Loads are now m1=2 (goodbye, global), m2=2 (hello, global), m3=1 (global).
    sim.start([launched("next.service")]);
    assert_eq!(sim.target("next.service"), Some("m3"));
}

#[test]
fn schedule_global_conflicts_first_global_by_name_wins_everywhere() {
    // TestScheduleGlobalConflicts (spec B17: name order)
    let mut sim = Sim::new(&["m1", "m2", "m3"]);
    let family = |n: usize| {
        launched(&format!("conflict-global.{n}.service")).with(Constraints {
            global: true,
            conflicts: strings(&["conflict-global.*.service"]),
            ..Default::default()
        })
    };
    assert!(sim.start([family(1), family(0)]).is_empty());
    let first = explain(&sim.snapshot(), "conflict-global.0.service").unwrap();
    assert!(first.machines.iter().all(|v| v.fit == Fit::Ok && v.load == 1));
    let second = explain(&sim.snapshot(), "conflict-global.1.service").unwrap();
    for verdict in &second.machines {
        assert_eq!(verdict.fit, Fit::Rejected(Rejection::Conflict { unit: "conflict-global.0.service".into() }));
    }
}

#[test]
fn dynamic_cluster_new_member_unit_migration_moves_only_the_lost_unit() {
    // TestDynamicClusterNewMemberUnitMigration
    let mut sim = Sim::new(&["m1", "m2", "m3", "m4"]);
    sim.start(conflict_family(3));
    assert_eq!(sim.placements().values().collect::<BTreeSet<_>>().len(), 3);
    let lost = sim.target("conflict.1.service").unwrap().to_string();
    let before = sim.placements();
    sim.remove_machine(&lost);
    let passes = sim.converge();
    assert_eq!(passes.len(), 1);
    let after = sim.placements();
    assert_eq!(after.len(), 3);
    assert_ne!(after["conflict.1.service"], lost);
    assert_eq!(after["conflict.0.service"], before["conflict.0.service"]);
    assert_eq!(after["conflict.2.service"], before["conflict.2.service"]);
    assert_eq!(after.values().collect::<BTreeSet<_>>().len(), 3, "not onto another conflict unit's machine");
}

#[test]
fn dynamic_cluster_member_reboot_with_new_id_moves_exactly_one_unit() {
    // TestDynamicClusterMemberReboot
    let mut sim = Sim::new(&["m1", "m2", "m3"]);
    sim.start(conflict_family(3));
    let before = sim.placements();
    sim.remove_machine("m2");
    sim.machines.push(machine("m9"));
    let passes = sim.converge();
    let after = sim.placements();
    assert_eq!(after.len(), 3);
    let moved: Vec<_> = after.iter().filter(|(u, m)| before[*u] != **m).collect();
    assert_eq!(moved.len(), 1, "{passes:?}");
    assert_eq!(moved[0].1, "m9");
}

#[test]
fn templates_with_specifiers_in_metadata_land_on_their_hostname() {
    // TestTemplatesWithSpecifiersInMetadata (values arrive specifier-expanded)
    let machines = (0..3).map(|n| machine_with(&format!("id{n}"), &[("hostname", &format!("smoke{n}"))])).collect();
    let mut sim = Sim::with_machines(machines);
    let instance = |host: &str| launched(&format!("metadata@{host}.service")).with(metadata(&[("hostname", &[host])]));
    sim.start(["smoke2", "smoke1", "smoke0"].map(instance));
    for n in 0..3 {
        assert_eq!(sim.target(&format!("metadata@smoke{n}.service")), Some(format!("id{n}").as_str()));
    }
    sim.start([instance("invalid")]);
    assert_eq!(sim.target("metadata@invalid.service"), None);
}

#[test]
fn transcript_template_instances_spread_in_machine_id_order() {
    // reference transcript 04: hello@1..6 over 3 idle machines, 2 per machine, assigned in machine-ID order.
    let mut sim = Sim::new(&["d91d98fc", "8363165e", "8606e1a2"]);
    let passes = sim.start((1..=6).map(|n| launched(&format!("hello@{n}.service"))));
    assert_eq!(
        passes,
        [[
            "+hello@1.service@8363165e",
            "+hello@2.service@8606e1a2",
            "+hello@3.service@d91d98fc",
            "+hello@4.service@8363165e",
            "+hello@5.service@8606e1a2",
            "+hello@6.service@d91d98fc",
        ]]
    );
}

#[test]
fn transcript_conflicts_machine_of_machine_id() {
    // reference transcript 07: a sidekick follows meta-b, a fourth exclusive instance and an orphan sidekick wait,
    // a pinned unit lands on its machine, and destroying an exclusive instance lets the fourth one in.
    let (m1, m2, m3) =
        ("8363165e6276f500b71169eca9b3f76b", "8606e1a2949979fb223fb4bad77d152c", "d91d98fca203da3cb89fb5c100ed0823");
    let mut sim = Sim::with_machines(vec![
        machine_with(m1, &[("role", "a")]),
        machine_with(m2, &[("role", "b")]),
        machine_with(m3, &[("role", "c")]),
    ]);
    sim.start((1..=6).map(|n| launched(&format!("hello@{n}.service"))));
    sim.start([
        launched("meta-ac.service").with(metadata(&[("role", &["a", "c"])])),
        launched("meta-b.service").with(metadata(&[("role", &["b"])])),
    ]);
    assert_eq!(sim.target("meta-b.service"), Some(m2));
    sim.start([launched("sidekick.service").with(machine_of(&["meta-b.service"]))]);
    assert_eq!(sim.target("sidekick.service"), Some(m2));
    let excl = |n: usize| launched(&format!("excl@{n}.service")).with(conflicts(&["excl@*.service"]));
    sim.start((1..=3).map(excl));
    sim.start([excl(4)]);
    assert_eq!(sim.target("excl@4.service"), None);
    sim.start([launched("pinned.service").with(machine_id(m3))]);
    assert_eq!(sim.target("pinned.service"), Some(m3));
    sim.start([launched("orphan-sidekick.service").with(machine_of(&["does-not-exist.service"]))]);
    assert_eq!(sim.target("orphan-sidekick.service"), None);

    let freed = sim.target("excl@2.service").unwrap().to_string();
    sim.units.remove("excl@2.service");
    sim.converge();
    assert_eq!(sim.target("excl@4.service"), Some(freed.as_str()));
}

/// Issue 14 item 3: a `Replaces=` cycle longer than a pair (b replaces h replaces d replaces b) on one machine used
/// to displace around the cycle on every pass. Inside a cycle nobody displaces: it settles, and `explain` says why
/// the others wait.
#[test]
fn a_replaces_cycle_settles_instead_of_displacing_around_it() {
    let mut sim = Sim::new(&["m1"]);
    sim.add(launched("b.service").with(replaces(&["h.service"])));
    sim.add(launched("h.service").with(replaces(&["d.service"])));
    sim.add(launched("d.service").with(replaces(&["b.service"])).on("m1"));
    let passes = sim.converge();
    assert!(passes.len() <= 2, "a replace cycle must settle within two passes, took {passes:?}");
    assert_eq!(sim.scheduled(), BTreeSet::from(["d.service".to_string()]), "the unit already there stays");
    let why = explain(&sim.snapshot(), "h.service").unwrap();
    assert_eq!(why.machines[0].fit, Fit::Rejected(Rejection::ReplaceCycle { unit: "d.service".into() }));
    assert!(why.machines[0].fit.to_string().contains("cycle of Replaces"), "{}", why.machines[0].fit);
}

/// The verdict of each machine for `unit` on a snapshot of `units` on the machine `m1`.
fn verdict_on_m1(units: Vec<UnitSpec>, unit: &str) -> Fit {
    let why = explain(&ScheduleInput::new(units, [machine("m1")]).unwrap(), unit).unwrap();
    why.machines[0].fit.clone()
}

/// The cycle b → h → d → b again, now also reached from a unit outside it (a replaces h, and sorts first, so the
/// search for cycles starts outside the cycle): it is still a cycle, and h still does not displace d.
#[test]
fn a_replaces_cycle_reached_from_outside_is_still_a_cycle() {
    let units = vec![
        launched("a.service").with(replaces(&["h.service"])),
        launched("b.service").with(replaces(&["h.service"])),
        launched("d.service").with(replaces(&["b.service"])).on("m1"),
        launched("h.service").with(replaces(&["d.service"])),
    ];
    assert_eq!(verdict_on_m1(units, "h.service"), Fit::Rejected(Rejection::ReplaceCycle { unit: "d.service".into() }));
}

/// Two separate cycles, b → h → d → b and p → q → s → p, and h also replaces q: q's leaving reaches back into
/// its own cycle, not into h's, so h displaces q as any replacing unit does.
#[test]
fn a_unit_on_one_replaces_cycle_displaces_a_unit_of_another() {
    let units = vec![
        launched("b.service").with(replaces(&["h.service"])),
        launched("d.service").with(replaces(&["b.service"])),
        launched("h.service").with(replaces(&["d.service", "q.service"])),
        launched("p.service").with(replaces(&["q.service"])),
        launched("q.service").with(replaces(&["s.service"])).on("m1"),
        launched("s.service").with(replaces(&["p.service"])),
    ];
    assert_eq!(verdict_on_m1(units, "h.service"), Fit::Displaces(vec!["q.service".into()]));
}

/// A unit that replaces its own `MachineOf=` peer is on no cycle (nothing replaces it back): `explain` says it
/// would take its peer away, not that it closes a cycle.
#[test]
fn replacing_its_own_peer_is_refused_as_such_not_as_a_cycle() {
    let units = vec![
        launched("b.service").with(Constraints { replaces: strings(&["h.service"]), ..machine_of(&["h.service"]) }),
        launched("h.service").on("m1"),
    ];
    assert_eq!(verdict_on_m1(units, "b.service"), Fit::Rejected(Rejection::DisplacesPeer { peer: "h.service".into() }));
}

/// A cycle closed by `MachineOf=`: a replaces d replaces b, and g (replacing a) follows b, so d displacing b takes
/// g away, which brings a back, which displaces d. It settles too.
#[test]
fn a_replaces_cycle_closed_by_machine_of_settles() {
    let mut sim = Sim::new(&["m1"]);
    sim.add(launched("a.service").with(replaces(&["d.service"])));
    sim.add(launched("b.service"));
    sim.add(launched("d.service").with(replaces(&["b.service"])));
    sim.add(
        launched("g.service").with(Constraints { replaces: strings(&["a.service"]), ..machine_of(&["b.service"]) }),
    );
    let passes = sim.converge();
    assert!(passes.len() <= 2, "a replace cycle through MachineOf must settle within two passes, took {passes:?}");
    assert_eq!(sim.scheduled(), BTreeSet::from(["a.service".to_string(), "b.service".to_string()]));
}

/// A replacer displacing a unit and that unit's `MachineOf=` follower, which it also replaces, unschedules the
/// follower once (it leaves with its peer), not twice.
#[test]
fn displacing_a_unit_and_its_follower_unschedules_each_once() {
    let mut sim = Sim::new(&["m1"]);
    sim.add(launched("b.service").on("m1"));
    sim.add(launched("e.service").with(machine_of(&["b.service"])).on("m1"));
    sim.add(launched("h.service").with(replaces(&["b.service", "e.service"])));
    let passes = sim.converge();
    assert_eq!(passes[0], ["-b.service@m1", "-e.service@m1", "+h.service@m1"]);
    assert_eq!(sim.scheduled(), BTreeSet::from(["h.service".to_string()]));
}

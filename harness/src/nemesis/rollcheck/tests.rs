//! Hand-built timelines: each invariant holds on a quiet one and fires on one that breaks it.

use super::*;

const LIMITS: RollLimits = RollLimits {
    notice_health_ms: 3_000,
    notice_fault_ms: 13_000,
    excuse_grace_ms: 5_000,
    end_grace_ms: 3_000,
    default_deadline_ms: 300_000,
    forget_absent_ms: 2_000,
};

/// An active copy of `version` (its process `pid`, invocation `inv`) passing its check.
fn up(version: &str, inv: &str) -> Copy {
    Copy {
        active_state: "active".into(),
        sub_state: "running".into(),
        pid: 100 + inv.len() as u32,
        invocation: inv.into(),
        version: Some(version.into()),
        health: Health::Pass,
        flaps: false,
    }
}

/// The same copy failing its check.
fn sick(version: &str, inv: &str) -> Copy {
    Copy { health: Health::Fail, ..up(version, inv) }
}

/// A copy that is not running (stopped, or starting: `activating`).
fn not_running(state: &str, inv: &str) -> Copy {
    Copy {
        active_state: state.into(),
        sub_state: "dead".into(),
        pid: 0,
        invocation: inv.into(),
        version: None,
        health: Health::Unknown,
        flaps: false,
    }
}

type Seen<'a> = (&'a str, Option<Vec<(&'a str, Copy)>>);

fn round(t_ms: u64, machines: Vec<Seen>) -> RollRound {
    RollRound {
        t_ms,
        epoch_ms: 0,
        machines: machines
            .into_iter()
            .map(|(m, seen)| (m.to_string(), seen.map(|u| u.into_iter().map(|(n, c)| (n.to_string(), c)).collect())))
            .collect(),
    }
}

/// The global unit on m1..m3 as given.
fn global(t_ms: u64, m1: Option<Copy>, m2: Option<Copy>, m3: Option<Copy>) -> RollRound {
    let seen = |c: Option<Copy>| Some(c.map(|c| vec![(GLOBAL, c)]).unwrap_or_default());
    round(t_ms, vec![("m1", seen(m1)), ("m2", seen(m2)), ("m3", seen(m3))])
}

fn obs(t_ms: u64, state: &str, reason: &str) -> Observation {
    Observation { t_ms, state: state.into(), reason: reason.into(), settled: true }
}

fn rollout(id: &str, units: &[&str], budget: u32, created_ms: u64, observed: Vec<Observation>) -> RolloutRecord {
    RolloutRecord {
        id: id.into(),
        target: Target::of_unit(units[0]).unwrap(),
        what: "rolling replace to g2".into(),
        units: units.iter().map(|u| u.to_string()).collect(),
        budget,
        created_ms,
        deadline_ms: None,
        observed,
        undo: BTreeSet::new(),
        resumes: 0,
        waived: Vec::new(),
        steps: Vec::new(),
        last_seen_ms: 0,
        machines: BTreeSet::new(),
    }
}

fn fault(
    label: &str,
    kind: &'static str,
    start_ms: u64,
    undone_ms: u64,
    converged_ms: u64,
    touches: &[&str],
) -> FaultWindow {
    FaultWindow {
        label: label.into(),
        kind,
        start_ms,
        undone_ms,
        converged_ms: Some(converged_ms),
        touches: touches.iter().map(|s| s.to_string()).collect(),
    }
}

fn asked(target: Target, versions: &[&str]) -> Vec<Asked> {
    versions.iter().map(|v| Asked { t_ms: 0, target, version: v.to_string() }).collect()
}

fn of(checked: &Checked, invariant: RollInvariant) -> Vec<String> {
    checked.violations.iter().filter(|v| v.invariant == invariant).map(|v| v.to_string()).collect()
}

/// A rolling replace g1 → g2 on three machines, one machine at a time, done at 10 s.
fn one_at_a_time() -> Vec<RollRound> {
    let (a, b, c) = (up("g1", "a1"), up("g1", "b1"), up("g1", "c1"));
    vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        global(1_000, Some(not_running("activating", "a2")), Some(b.clone()), Some(c.clone())),
        global(2_000, Some(sick("g2", "a2")), Some(b.clone()), Some(c.clone())),
        global(3_000, Some(up("g2", "a2")), Some(b.clone()), Some(c.clone())),
        global(4_000, Some(up("g2", "a2")), Some(not_running("inactive", "b1")), Some(c.clone())),
        global(6_000, Some(up("g2", "a2")), Some(up("g2", "b2")), Some(c.clone())),
        global(7_000, Some(up("g2", "a2")), Some(up("g2", "b2")), Some(not_running("deactivating", "c1"))),
        global(9_000, Some(up("g2", "a2")), Some(up("g2", "b2")), Some(up("g2", "c2"))),
    ]
}

fn replace_g2(budget: u32) -> RolloutRecord {
    rollout("g-1", &[GLOBAL], budget, 500, vec![obs(600, "running", ""), obs(10_000, "done", "")])
}

#[test]
fn a_rollout_one_machine_at_a_time_breaks_nothing() {
    let checked = check(&one_at_a_time(), &[replace_g2(1)], &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    assert_eq!(checked.violations, [], "{:?}", checked.notes);
    assert_eq!(checked.notes, Vec::<String>::new());
}

#[test]
fn two_machines_down_at_once_over_a_budget_of_one_is_reported_with_rollout_machine_and_time() {
    let (a, b, c) = (up("g1", "a1"), up("g1", "b1"), up("g1", "c1"));
    let rounds = vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        global(1_000, Some(not_running("inactive", "a1")), Some(b.clone()), Some(c.clone())),
        global(1_500, Some(not_running("activating", "a2")), Some(not_running("inactive", "b1")), Some(c.clone())),
        global(5_000, Some(up("g2", "a2")), Some(up("g2", "b2")), Some(c.clone())),
    ];
    let checked = check(&rounds, &[replace_g2(1)], &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    assert_eq!(
        of(&checked, RollInvariant::Budget),
        ["rollout took a copy down over its budget: rollout g-1, nemr-global.service on m2 at 1.5s: rolling \
          replace to g2 (g-1, max-unavailable 1) took it down while 1 already had no active healthy copy: \
          nemr-global.service on m1 since 1.0s"]
    );
    // Both in one round: the second counts the first.
    let rounds = vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        global(1_000, Some(not_running("inactive", "a1")), Some(not_running("inactive", "b1")), Some(c.clone())),
    ];
    let checked = check(&rounds, &[replace_g2(1)], &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::Budget).len(), 1, "{checked:?}");
    assert!(of(&checked, RollInvariant::Budget)[0].contains("on m1 taken down in the same round"), "{checked:?}");
    // With a budget of two, the same is allowed.
    let checked = check(&rounds, &[replace_g2(2)], &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    assert_eq!(checked.violations, []);
}

#[test]
fn a_machine_the_faults_took_away_counts_once_fleet_could_know_of_it() {
    let (a, b, c) = (up("g1", "a1"), up("g1", "b1"), up("g1", "c1"));
    let kill = [fault("machine kill m3 for 30s", "machine kill", 0, 30_000, 31_000, &["m3"])];
    // m3 killed at 0.5 s; the rollout stops m1 at 14 s (13.5 s later: past the 13 s notice) — one too many.
    let late = vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        global(500, Some(a.clone()), Some(b.clone()), None),
        global(14_000, Some(not_running("inactive", "a1")), Some(b.clone()), None),
    ];
    let r = rollout("g-1", &[GLOBAL], 1, 200, vec![obs(300, "running", "")]);
    let checked = check(&late, std::slice::from_ref(&r), &asked(Target::Global, &["g1"]), &kill, 0, LIMITS);
    let budget = of(&checked, RollInvariant::Budget);
    assert_eq!(budget.len(), 1, "{checked:?}");
    assert!(
        budget[0].contains("on m1 at 14.0s") && budget[0].contains("nemr-global.service on m3 since 0.5s"),
        "{budget:?}"
    );
    assert!(!budget[0].contains("not one of"), "{budget:?}");
    // Begun after m3 was gone from the cluster, the rollout has no step there: it still counts, and is marked.
    let mut without_m3 = r.clone();
    without_m3.machines = ["m1", "m2"].map(String::from).into();
    let marked = check(&late, &[without_m3], &asked(Target::Global, &["g1"]), &kill, 0, LIMITS);
    let budget = of(&marked, RollInvariant::Budget);
    assert!(budget[0].contains("on m3 since 0.5s (not one of the rollout's machines)"), "{budget:?}");
    assert!(
        marked.notes.iter().any(|n| n.contains(
            "1 of the budget violations are over the budget only by counting machines the rollout has no step for"
        )),
        "{:?}",
        marked.notes
    );
    // The same 2 s after the kill: fleet cannot know yet (its lease has not expired) — a note, not a violation.
    let early =
        vec![late[0].clone(), late[1].clone(), global(2_500, Some(not_running("inactive", "a1")), Some(b), None)];
    let checked = check(&early, &[r], &asked(Target::Global, &["g1"]), &kill, 0, LIMITS);
    assert_eq!(of(&checked, RollInvariant::Budget), Vec::<String>::new());
    assert!(
        checked.notes.iter().any(|n| n.contains("could not yet know") && n.contains("m3 since 0.5s")),
        "{:?}",
        checked.notes
    );
}

#[test]
fn a_failing_check_is_the_units_own_and_counts_after_the_notice() {
    let (a, b, c) = (up("g1", "a1"), up("g1", "b1"), up("g1", "c1"));
    let rounds = vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        // m2's check fails (same process): not the rollout's doing.
        global(1_000, Some(a.clone()), Some(sick("g1", "b1")), Some(c.clone())),
        // 4 s later the rollout stops m1: m2 has failed its check for longer than the notice.
        global(5_000, Some(not_running("inactive", "a1")), Some(sick("g1", "b1")), Some(c.clone())),
    ];
    let checked = check(&rounds, &[replace_g2(1)], &asked(Target::Global, &["g1"]), &[], 20_000, LIMITS);
    let budget = of(&checked, RollInvariant::Budget);
    assert_eq!(budget.len(), 1, "{checked:?}");
    assert!(budget[0].contains("on m1 at 5.0s") && budget[0].contains("m2 since 1.0s"), "{budget:?}");
    assert_eq!(of(&checked, RollInvariant::RestartedTwice), Vec::<String>::new(), "a stop is no restart");
}

#[test]
fn a_copy_stopped_within_an_excusing_faults_window_is_the_faults() {
    let (a, b, c) = (up("g1", "a1"), up("g1", "b1"), up("g1", "c1"));
    let rounds = vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        global(1_000, Some(not_running("inactive", "a1")), Some(b.clone()), Some(c.clone())),
        // m2 healed from a long partition and changed version at once, while m1's step was in flight.
        global(1_500, Some(not_running("inactive", "a1")), Some(up("g2", "b2")), Some(c.clone())),
    ];
    let cut = [fault("m2 cut from etcd for 30s", "partition > TTL", 0, 1_200, 1_400, &["m2"])];
    let checked = check(&rounds, &[replace_g2(1)], &asked(Target::Global, &["g1", "g2"]), &cut, 20_000, LIMITS);
    assert_eq!(checked.violations, [], "{checked:?}");
    // A fleetd kill excuses nothing.
    let fleetd = [fault("fleetd kill -9 on m2", "fleetd kill -9", 0, 1_200, 1_400, &["m2"])];
    let checked = check(&rounds, &[replace_g2(1)], &asked(Target::Global, &["g1", "g2"]), &fleetd, 20_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::Budget).len(), 1, "{checked:?}");
}

#[test]
fn an_instance_is_available_while_any_copy_serves_and_a_move_is_no_down() {
    let i = "nemr-set@1.service";
    let rounds = vec![
        round(0, vec![("m1", Some(vec![(i, up("s1", "x1"))])), ("m2", Some(vec![]))]),
        round(1_000, vec![("m1", None), ("m2", Some(vec![]))]),
        round(12_000, vec![("m1", None), ("m2", Some(vec![(i, up("s1", "y1"))]))]),
    ];
    let r = rollout("s-1", &[i, "nemr-set@2.service"], 1, 0, vec![obs(100, "running", "")]);
    let kill = [fault("machine kill m1 for 20s", "machine kill", 500, 20_000, 21_000, &["m1"])];
    let checked = check(&rounds, &[r], &asked(Target::Set, &["s1"]), &kill, 30_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::Budget), Vec::<String>::new());
    assert_eq!(of(&checked, RollInvariant::RestartedTwice), Vec::<String>::new(), "{checked:?}");
}

#[test]
fn a_version_nobody_asked_for_is_reported_until_someone_asks() {
    let rounds = vec![
        global(0, Some(up("g1", "a1")), Some(up("g1", "b1")), None),
        global(1_000, Some(up("g1", "a1")), Some(up("g9", "b2")), None),
        global(2_000, Some(up("g1", "a1")), Some(up("g9", "b2")), None),
        global(3_000, Some(up("g1", "a1")), Some(up("g9", "b2")), None),
    ];
    let mut asks = asked(Target::Global, &["g1"]);
    asks.push(Asked { t_ms: 2_500, target: Target::Global, version: "g9".into() });
    // An instance-set version on the global unit is not asked for either.
    asks.push(Asked { t_ms: 0, target: Target::Set, version: "g9".into() });
    let checked = check(&rounds, &[], &asks, &[], 0, LIMITS);
    assert_eq!(
        of(&checked, RollInvariant::UnaskedVersion),
        ["a machine ran a version nobody asked for: nemr-global.service on m2 at 1.0s: ran version g9 from 1.0s to \
          2.0s; asked for by then: g1"]
    );
}

#[test]
fn every_rollout_must_end_with_a_reason_within_its_deadline_after_the_faults() {
    let faults_end = 100_000;
    let mut done = rollout("g-1", &[GLOBAL], 1, 10_000, vec![obs(10_500, "running", ""), obs(20_000, "done", "")]);
    let mut late = rollout(
        "g-2",
        &[GLOBAL],
        1,
        30_000,
        vec![obs(30_500, "running", ""), obs(200_000, "rolled_back", "rolled back: x")],
    );
    late.deadline_ms = Some(60_000);
    let mut running = rollout("g-3", &[GLOBAL], 1, 90_000, vec![obs(400_000, "running", "")]);
    running.last_seen_ms = 401_000;
    let silent = rollout("g-4", &[GLOBAL], 1, 91_000, vec![obs(95_000, "paused", "")]);
    let mut pending_abort = rollout("g-5", &[GLOBAL], 1, 92_000, vec![obs(95_000, "paused", "paused: x")]);
    pending_abort.observed[0].settled = false;
    let resumed = rollout(
        "g-6",
        &[GLOBAL],
        1,
        10_000,
        vec![obs(11_000, "paused", "paused: x"), obs(12_000, "running", ""), obs(13_000, "paused", "paused: y")],
    );
    done.deadline_ms = Some(1_000);
    let all = [done, late, running, silent, pending_abort, resumed];
    let checked = check(&[], &all, &[], &[], faults_end, LIMITS);
    let ended: Vec<String> = of(&checked, RollInvariant::NotEnded);
    assert_eq!(ended.len(), 4, "{ended:#?}");
    assert!(
        ended.iter().any(|v| v.contains("g-2")
            && v.contains(
                "ended rolled_back only at 200.0s, after 160.0s (its progress deadline of 60 s, after the faults \
                 stopped at 100.0s)"
            )),
        "{ended:#?}"
    );
    assert!(
        ended.iter().any(|v| v.contains("g-3")
            && v.contains(
                "not ended by 400.0s (the 5 minutes allowed without a progress deadline, after the faults stopped \
                 at 100.0s): last seen running at 401.0s (so since 400.0s)"
            )),
        "{ended:#?}"
    );
    assert!(ended.iter().any(|v| v.contains("g-4") && v.contains("ended paused without a reason")));
    assert!(
        ended.iter().any(|v| v.contains("g-5")
            && v.contains("last seen paused (paused: x) with an action not yet taken up at 95.0s")),
        "an abort on its way is no end"
    );
}

#[test]
fn a_second_restart_for_one_step_is_reported_and_an_undo_allows_one_more() {
    let rounds = vec![
        global(0, Some(up("g1", "a1")), Some(up("g1", "b1")), None),
        global(1_000, Some(up("g2", "a2")), Some(up("g1", "b1")), None),
        global(2_000, Some(up("g2", "a3")), Some(up("g1", "b1")), None),
    ];
    let r = replace_g2(1);
    let checked = check(&rounds, std::slice::from_ref(&r), &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    assert_eq!(
        of(&checked, RollInvariant::RestartedTwice),
        ["a machine restarted a unit more than once for one rollout step: rollout g-1, nemr-global.service on m1 at \
          2.0s: rolling replace to g2 (g-1) restarted it 2 times (at 1.0s, 2.0s); its steps allow 1 (1 for the step)"]
    );
    let mut undone = r.clone();
    undone.undo.insert((GLOBAL.to_string(), "m1".to_string()));
    let checked = check(&rounds, &[undone], &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::RestartedTwice), Vec::<String>::new());
    // A fleetd kill on m1 in between excuses nothing; a machine kill does.
    let fleetd = [fault("fleetd kill -9 on m1", "fleetd kill -9", 1_500, 1_500, 1_800, &["m1"])];
    let checked =
        check(&rounds, std::slice::from_ref(&r), &asked(Target::Global, &["g1", "g2"]), &fleetd, 20_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::RestartedTwice).len(), 1);
    let kill = [fault("machine kill m1 for 3s", "machine kill", 1_500, 1_600, 1_800, &["m1"])];
    let checked = check(&rounds, &[r], &asked(Target::Global, &["g1", "g2"]), &kill, 20_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::RestartedTwice), Vec::<String>::new());
}

#[test]
fn a_restart_with_no_rollout_live_is_reported_and_a_reboot_or_a_move_back_is_no_restart() {
    let i = "nemr-set@2.service";
    let rounds = vec![
        round(0, vec![("m1", Some(vec![(i, up("s1", "x1"))])), ("m2", Some(vec![(GLOBAL, up("g1", "g1"))]))]),
        // m1 cannot be read (it rebooted); the instance starts again there: a start, not a restart.
        round(1_000, vec![("m1", None), ("m2", Some(vec![(GLOBAL, up("g1", "g1"))]))]),
        round(5_000, vec![("m1", Some(vec![(i, up("s1", "x2"))])), ("m2", Some(vec![(GLOBAL, up("g1", "g1"))]))]),
        // It leaves m1 for m2 for a while, and comes back: a start on m1 again.
        round(6_000, vec![("m1", Some(vec![])), ("m2", Some(vec![(GLOBAL, up("g1", "g1")), (i, up("s1", "y1"))]))]),
        round(9_000, vec![("m1", Some(vec![(i, up("s1", "x3"))])), ("m2", Some(vec![(GLOBAL, up("g1", "g1"))]))]),
        // The global unit restarts on m2 with no rollout and no fault.
        round(10_000, vec![("m1", Some(vec![(i, up("s1", "x3"))])), ("m2", Some(vec![(GLOBAL, up("g1", "g2"))]))]),
    ];
    let checked = check(&rounds, &[], &[], &[], 0, LIMITS);
    assert_eq!(
        of(&checked, RollInvariant::RestartedTwice),
        ["a machine restarted a unit more than once for one rollout step: nemr-global.service on m2 at 10.0s: \
          restarted while no rollout of it was live and no machine kill or long partition excused the machine (0 \
          steps allow 0 restarts)"]
    );
    // A restart 5 s after its rollout was seen done is no longer the rollout's.
    let ended = rollout("g-1", &[GLOBAL], 1, 0, vec![obs(100, "running", ""), obs(5_000, "done", "")]);
    let checked = check(&rounds, &[ended], &[], &[], 0, LIMITS);
    assert_eq!(of(&checked, RollInvariant::RestartedTwice).len(), 1);
}

#[test]
fn what_happened_between_two_rounds_is_not_ordered_so_it_is_not_counted_against_each_other() {
    let (a, b, c) = (up("g1", "a1"), up("g1", "b1"), up("g1", "c1"));
    // m1 is back and m2 down in the next round (sampled 1 s later): m1 may have come back first.
    let rounds = vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        global(500, Some(sick("g2", "a2")), Some(b.clone()), Some(c.clone())),
        global(1_500, Some(up("g2", "a2")), Some(not_running("inactive", "b1")), Some(c.clone())),
    ];
    let checked = check(&rounds, &[replace_g2(1)], &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::Budget), Vec::<String>::new());
    // Two quick restarts between two rounds (a restart rollout of a unit without a check): one may have ended
    // before the other began.
    let quick = vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        global(1_000, Some(up("g1", "a2")), Some(up("g1", "b2")), Some(c.clone())),
    ];
    let checked = check(&quick, &[replace_g2(1)], &asked(Target::Global, &["g1"]), &[], 20_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::Budget), Vec::<String>::new());
    // But a quick restart while another machine stays down (the rollout's own, in both rounds) is one too many.
    let over = vec![
        global(0, Some(a.clone()), Some(b.clone()), Some(c.clone())),
        global(500, Some(not_running("inactive", "a1")), Some(b.clone()), Some(c.clone())),
        global(1_000, Some(not_running("inactive", "a1")), Some(up("g1", "b2")), Some(c)),
    ];
    let checked = check(&over, &[replace_g2(1)], &asked(Target::Global, &["g1"]), &[], 20_000, LIMITS);
    let budget = of(&checked, RollInvariant::Budget);
    assert_eq!(budget.len(), 1, "{checked:?}");
    assert!(budget[0].contains("on m2 at 1.0s") && budget[0].contains("m1 since 0.5s"), "{budget:?}");
}

#[test]
fn a_step_waived_by_a_resume_skipping_the_failed_no_longer_counts() {
    let i = |n: usize| format!("nemr-set@{n}.service");
    let on = |m: &str, copies: Vec<(String, Copy)>| (m.to_string(), Some(copies.into_iter().collect()));
    let mk = |t_ms: u64, one: Copy, two: Copy| RollRound {
        t_ms,
        epoch_ms: 0,
        machines: [on("m1", vec![(i(1), one)]), on("m2", vec![(i(2), two)])].into_iter().collect(),
    };
    let rounds = vec![
        mk(0, up("s1", "x1"), up("s1", "y1")),
        // The rollout's step on set@1 fails; it pauses.
        mk(1_000, not_running("failed", "x2"), up("s1", "y1")),
        mk(5_000, not_running("failed", "x2"), up("s1", "y1")),
        // Resumed skipping the failed step at 6 s: set@2 is taken next.
        mk(7_000, not_running("failed", "x2"), not_running("failed", "y2")),
    ];
    let mut r = rollout("s-1", &[&i(1), &i(2)], 1, 500, vec![obs(600, "running", "")]);
    r.target = Target::Set;
    let without = check(&rounds, std::slice::from_ref(&r), &asked(Target::Set, &["s1"]), &[], 0, LIMITS);
    let budget = of(&without, RollInvariant::Budget);
    assert_eq!(budget.len(), 1, "{without:?}");
    assert!(
        budget[0].contains("nemr-set@2.service on m2 at 7.0s") && budget[0].contains("nemr-set@1.service since 1.0s")
    );
    let v = without.violations.iter().find(|v| v.invariant == RollInvariant::Budget).unwrap();
    assert_eq!(v.related, [i(1)], "the counted instance is named for the report: {without:?}");
    r.waived.push((6_000, i(1), "m1".into()));
    let with = check(&rounds, std::slice::from_ref(&r), &asked(Target::Set, &["s1"]), &[], 0, LIMITS);
    assert_eq!(of(&with, RollInvariant::Budget), Vec::<String>::new());
    // Waived after the down: it still counted then.
    r.waived[0].0 = 7_500;
    let late = check(&rounds, &[r], &asked(Target::Set, &["s1"]), &[], 0, LIMITS);
    assert_eq!(of(&late, RollInvariant::Budget).len(), 1);
}

/// A copy whose check flaps fails it in the known windows of the host's clock: taken down by a round that spans
/// such a window, it may have been failing (fleet may have seen it fail and taken it first, at no cost), so the
/// take-down is not counted; outside the windows, or for a check that does not flap, it is (seen in the 60-minute
/// run and with a random seed: the sampler's last look, "ok", was 2.4 s old under load).
#[test]
fn a_flapping_copy_taken_down_across_a_flap_window_is_not_counted_against_the_budget() {
    let flapping = |c: Copy| Copy { flaps: true, ..c };
    let (a, c) = (flapping(up("g1", "a1")), flapping(up("g1", "c1")));
    // m2 fails a check that does not flap all along; m1's copy flaps. Host clock: second 1_000_017 is 17 s into a
    // 20 s period (passing), 1_000_019 still is, 1_000_021 lies in the next window.
    let at = |epoch_s: u64, mut r: RollRound| {
        r.epoch_ms = epoch_s * 1000;
        r
    };
    let rounds = |later_s: u64| {
        vec![
            at(1_000_015, global(0, Some(a.clone()), Some(sick("g1", "b1")), Some(c.clone()))),
            at(1_000_017, global(4_000, Some(a.clone()), Some(sick("g1", "b1")), Some(c.clone()))),
            at(later_s, global(6_000, Some(not_running("activating", "a2")), Some(sick("g1", "b1")), Some(c.clone()))),
        ]
    };
    let check_with =
        |rs: &[RollRound]| check(rs, &[replace_g2(1)], &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    let across = check_with(&rounds(1_000_021));
    assert_eq!(of(&across, RollInvariant::Budget), Vec::<String>::new(), "m1 may have been failing its flapping check");
    let outside = check_with(&rounds(1_000_019));
    assert_eq!(of(&outside, RollInvariant::Budget).len(), 1, "no window between the looks: {outside:?}");
}

/// A round that read no machine is the host stalled (fleet with it): a copy unavailable before the stall and after
/// it counts from the first round after, with its notice, not from before the stall (seen in the 60-minute run: a
/// flapping copy counted "since 631.7s" across a 5-minute stall of the whole host). A copy unavailable for longer
/// than the notice after the stall still counts.
#[test]
fn a_copy_unavailable_across_a_host_stall_counts_from_the_first_round_after_it() {
    let (a, c) = (up("g1", "a1"), up("g1", "c1"));
    let stall = |t| round(t, vec![("m1", None), ("m2", None), ("m3", None)]);
    let rounds = |down_at: u64| {
        vec![
            global(0, Some(a.clone()), Some(sick("g1", "b1")), Some(c.clone())),
            stall(1_000),
            stall(300_000),
            global(301_000, Some(a.clone()), Some(sick("g1", "b1")), Some(c.clone())),
            global(down_at - 500, Some(a.clone()), Some(sick("g1", "b1")), Some(c.clone())),
            global(down_at, Some(not_running("activating", "a2")), Some(sick("g1", "b1")), Some(c.clone())),
        ]
    };
    let rollout = || rollout("g-1", &[GLOBAL], 1, 500, vec![obs(600, "running", ""), obs(400_000, "done", "")]);
    let check_with =
        |rs: &[RollRound]| check(rs, &[rollout()], &asked(Target::Global, &["g1", "g2"]), &[], 500_000, LIMITS);
    let soon = check_with(&rounds(302_500));
    assert_eq!(of(&soon, RollInvariant::Budget), Vec::<String>::new(), "m2 counts from 301.0s, 1.5 s before: {soon:?}");
    let later = check_with(&rounds(306_000));
    let found = of(&later, RollInvariant::Budget);
    assert_eq!(found.len(), 1, "5 s after the stall m2 counts: {later:?}");
    assert!(found[0].contains("m2 since 301.0s"), "{found:?}");
}

/// A copy that is active with a process whose version and check the sampler could not read (`?`: the process went
/// away between the reads) may have been serving, as fleet may have seen it: a copy unavailable before and after such
/// a round counts from the round after it, with its notice (the 60-minute run of 2026-12-05: `nemr-set@2` counted
/// "since 3382.9s" through a round where it ran the new version, unread).
#[test]
fn a_copy_read_as_unknown_breaks_its_unavailability() {
    let (a, c) = (up("g1", "a1"), up("g1", "c1"));
    let unread = Copy { version: None, health: Health::Unknown, ..up("g1", "b2") };
    let rounds = |middle: Copy| {
        vec![
            global(0, Some(a.clone()), Some(sick("g1", "b1")), Some(c.clone())),
            global(10_000, Some(a.clone()), Some(sick("g1", "b1")), Some(c.clone())),
            global(10_500, Some(a.clone()), Some(middle), Some(c.clone())),
            global(11_000, Some(not_running("activating", "a2")), Some(sick("g1", "b3")), Some(c.clone())),
        ]
    };
    let check_with =
        |rs: &[RollRound]| check(rs, &[replace_g2(1)], &asked(Target::Global, &["g1", "g2"]), &[], 20_000, LIMITS);
    let unknown = check_with(&rounds(unread.clone()));
    assert_eq!(of(&unknown, RollInvariant::Budget), Vec::<String>::new(), "m2 may have served at 10.5s: {unknown:?}");
    let known = check_with(&rounds(sick("g1", "b1")));
    assert_eq!(of(&known, RollInvariant::Budget).len(), 1, "m2 failing all along counts: {known:?}");
}

/// seed 4052's hour: an aborted replace took m1 back to the old version (its undo) in the same seconds as the next
/// replace began. The sampler saw the undo's restart only in the first round after the next rollout was created;
/// it was that earlier rollout's (which allows it one), not a second restart for the new step.
#[test]
fn a_restart_seen_as_one_rollout_ends_and_the_next_begins_may_be_the_ending_ones() {
    let rounds = vec![
        global(0, Some(up("g1", "a1")), None, None),
        global(1_000, Some(up("g2", "a2")), None, None),
        global(5_000, Some(not_running("failed", "a2")), None, None),
        // Between 5.0 s and 8.0 s: the abort's undo started g1 (a3) and ended at 7.9 s; the next replace began at
        // 7.95 s.
        global(8_000, Some(up("g1", "a3")), None, None),
        global(9_000, Some(up("g3", "a4")), None, None),
    ];
    let mut aborted = rollout("g-1", &[GLOBAL], 1, 500, vec![obs(600, "running", ""), obs(7_900, "aborted", "x")]);
    aborted.undo.insert((GLOBAL.to_string(), "m1".to_string()));
    let next = rollout("g-2", &[GLOBAL], 1, 7_950, vec![obs(8_500, "running", ""), obs(9_500, "done", "")]);
    let asked = asked(Target::Global, &["g1", "g2", "g3"]);
    let checked = check(&rounds, &[aborted.clone(), next.clone()], &asked, &[], 20_000, LIMITS);
    assert_eq!(of(&checked, RollInvariant::RestartedTwice), Vec::<String>::new());
    // Without the undo the aborted rollout had no room for it: a restart too many, on the newest candidate.
    let mut no_undo = aborted;
    no_undo.undo.clear();
    let checked = check(&rounds, &[no_undo, next], &asked, &[], 20_000, LIMITS);
    assert_eq!(
        of(&checked, RollInvariant::RestartedTwice),
        ["a machine restarted a unit more than once for one rollout step: rollout g-2, nemr-global.service on m1 at \
          9.0s: rolling replace to g2 (g-2) restarted it 2 times (at 8.0s, 9.0s); its steps allow 1 (1 for the step)"]
    );
}

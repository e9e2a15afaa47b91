//! The invariants, checked on a timeline of what systemd showed in every machine (not fleet's view): pure, so a
//! violating timeline can be written by hand in a test.
//!
//! * **at-most-once**: a unit declaring `[X-Fleet] AtMostOnce=true` is never active on two machines in one round.
//! * **duplicate window**: another unit runs on two machines only while a fault touching one of them is in
//!   progress, or up to [`Limits::duplicate_window`] after it was undone (fleet is at-least-once: a machine cut off
//!   keeps its units while the engine starts them elsewhere after the TTL, until the partition heals).
//! * **lost**: once a fault's convergence wait ends, every launched unit is active somewhere.
//! * **restarted by an unrelated fault**: a unit's process that ran before a fault started, on a machine that fault
//!   did not touch, keeps running (same MainPID) through it — so an etcd fault (touching no machine) restarts
//!   nothing. A process ending while no fault is in progress is a violation too. A **host stall** longer than the
//!   TTL (no round sampled for that long: the sampler, etcd and every fleetd froze together) counts as a fault
//!   touching every machine: etcd's leases ran out on its own clock while nothing could renew them.

use std::collections::{BTreeMap, BTreeSet};

/// One look at every machine, at `t` seconds since the run started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// Milliseconds since the start of the run.
    pub t_ms: u64,
    /// machine name → its active units with their MainPID, or `None` when the machine could not be read (down).
    pub machines: BTreeMap<String, Option<BTreeMap<String, u32>>>,
}

/// A fault as it happened: when it started, when it was undone, when the cluster had converged again (`None`:
/// not within the deadline), and the machines it touched (none for an etcd fault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultWindow {
    pub label: String,
    /// [`Fault::kind`](super::schedule::Fault::kind).
    pub kind: &'static str,
    pub start_ms: u64,
    pub undone_ms: u64,
    pub converged_ms: Option<u64>,
    pub touches: BTreeSet<String>,
}

/// A unit the nemesis launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSpec {
    pub name: String,
    pub at_most_once: bool,
}

/// The bounds the invariants allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long after a fault was undone a unit may still run on two machines (bounded by the TTL: see
    /// docs/faults.md).
    pub duplicate_window_ms: u64,
    /// How long after convergence a process may still end and be blamed on the fault before.
    pub settle_grace_ms: u64,
    /// A gap between two rounds longer than this is a host stall ([`host_stalls`]): the agent TTL.
    pub host_stall_ms: u64,
}

/// Which invariant a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    AtMostOnce,
    DuplicateWindow,
    Lost,
    RestartedByUnrelatedFault,
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Invariant::AtMostOnce => "at-most-once unit ran twice",
            Invariant::DuplicateWindow => "unit ran twice outside the documented window",
            Invariant::Lost => "launched unit lost",
            Invariant::RestartedByUnrelatedFault => "unit restarted by a fault that did not touch its machine",
        })
    }
}

/// A broken invariant: which unit, on which machines, from when to when, during which fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    pub unit: String,
    pub machines: Vec<String>,
    pub from_ms: u64,
    pub to_ms: u64,
    pub fault: Option<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = if self.machines.is_empty() { "no machine".to_string() } else { self.machines.join(", ") };
        write!(f, "{}: {} on {on} from {} to {}", self.invariant, self.unit, secs(self.from_ms), secs(self.to_ms))?;
        match &self.fault {
            Some(fault) => write!(f, " (during: {fault})"),
            None => write!(f, " (no fault in progress)"),
        }
    }
}

/// `12.3s`.
/// Whether every unit in `names` is active on exactly one machine in `round`.
pub fn each_once<S: AsRef<str>>(round: &Round, names: &[S]) -> bool {
    names.iter().all(|n| round.machines.values().flatten().filter(|units| units.contains_key(n.as_ref())).count() == 1)
}

pub fn secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// Checks every invariant on `rounds` (in time order) against `faults` (in time order, not overlapping).
pub fn check(units: &[UnitSpec], rounds: &[Round], faults: &[FaultWindow], limits: Limits) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(twice(units, rounds, faults, limits));
    out.extend(lost(units, rounds, faults));
    out.extend(restarts(rounds, faults, limits));
    out.sort_by_key(|v| (v.from_ms, v.invariant, v.unit.clone()));
    out
}

/// The fault in progress at `t`: the last one started at or before `t`, while `t` is before its convergence plus
/// `grace` (or before the next fault when it never converged).
fn fault_at(faults: &[FaultWindow], t: u64, grace: u64) -> Option<&FaultWindow> {
    let i = faults.iter().rposition(|f| f.start_ms <= t)?;
    let f = &faults[i];
    let until = match f.converged_ms {
        Some(c) => c + grace,
        None => faults.get(i + 1).map_or(u64::MAX, |next| next.start_ms),
    };
    (t <= until).then_some(f)
}

/// Machines where `unit` is active in `round`.
fn running_on<'a>(round: &'a Round, unit: &str) -> Vec<&'a String> {
    round
        .machines
        .iter()
        .filter(|(_, seen)| seen.as_ref().is_some_and(|u| u.contains_key(unit)))
        .map(|(m, _)| m)
        .collect()
}

/// At-most-once and duplicate-window violations: episodes of consecutive rounds where a unit ran on two machines.
fn twice(units: &[UnitSpec], rounds: &[Round], faults: &[FaultWindow], limits: Limits) -> Vec<Violation> {
    let mut out = Vec::new();
    for unit in units {
        // Each episode: (first round, last round, machines seen).
        let mut episodes: Vec<(u64, u64, BTreeSet<String>)> = Vec::new();
        let mut open = false;
        for round in rounds {
            let on = running_on(round, &unit.name);
            if on.len() >= 2 {
                match (open, episodes.last_mut()) {
                    (true, Some(e)) => {
                        e.1 = round.t_ms;
                        e.2.extend(on.into_iter().cloned());
                    }
                    _ => episodes.push((round.t_ms, round.t_ms, on.into_iter().cloned().collect())),
                }
                open = true;
            } else {
                open = false;
            }
        }
        for (from, to, machines) in episodes {
            let during = fault_at(faults, from, limits.settle_grace_ms);
            let allowed = !unit.at_most_once
                && during.is_some_and(|f| {
                    !f.touches.is_disjoint(&machines) && to <= f.undone_ms + limits.duplicate_window_ms
                });
            if !allowed {
                out.push(Violation {
                    invariant: if unit.at_most_once { Invariant::AtMostOnce } else { Invariant::DuplicateWindow },
                    unit: unit.name.clone(),
                    machines: machines.into_iter().collect(),
                    from_ms: from,
                    to_ms: to,
                    fault: during.map(|f| f.label.clone()),
                });
            }
        }
    }
    out
}

/// Units not active anywhere in the last round before the next fault starts (or the last round of the run): the
/// cluster had its convergence wait and still does not run them.
fn lost(units: &[UnitSpec], rounds: &[Round], faults: &[FaultWindow]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, fault) in faults.iter().enumerate() {
        let before = faults.get(i + 1).map_or(u64::MAX, |next| next.start_ms);
        let Some(last) = rounds.iter().rev().find(|r| r.t_ms < before && r.t_ms >= fault.undone_ms) else { continue };
        for unit in units {
            if running_on(last, &unit.name).is_empty() {
                out.push(Violation {
                    invariant: Invariant::Lost,
                    unit: unit.name.clone(),
                    machines: Vec::new(),
                    from_ms: fault.start_ms,
                    to_ms: last.t_ms,
                    fault: Some(fault.label.clone()),
                });
            }
        }
    }
    out
}

/// The host stalls of a run: gaps between consecutive rounds longer than `limits.host_stall_ms`, as (last round
/// before, first round after). The sampler runs every second or so; a gap longer than the TTL means it, and the
/// containers beside it, did not run (seen: 17 s with no round, no fleetd log line, and then every presence lease
/// expired at the same instant).
pub fn host_stalls(rounds: &[Round], limits: Limits) -> Vec<(u64, u64)> {
    rounds.windows(2).map(|w| (w[0].t_ms, w[1].t_ms)).filter(|(a, b)| b - a > limits.host_stall_ms).collect()
}

/// Processes that ended on a machine the fault in progress did not touch although they predate that fault (or
/// while no fault was in progress), unless seen ended right after a host stall they predate.
fn restarts(rounds: &[Round], faults: &[FaultWindow], limits: Limits) -> Vec<Violation> {
    let mut out = Vec::new();
    let stalls = host_stalls(rounds, limits);
    let after_stall = |since: u64, t: u64| {
        stalls.iter().any(|(from, to)| since <= *from && *from < t && t <= to + limits.duplicate_window_ms)
    };
    // (machine, unit) → (pid, first seen).
    let mut alive: BTreeMap<(String, String), (u32, u64)> = BTreeMap::new();
    for round in rounds {
        for (machine, seen) in &round.machines {
            let Some(units) = seen else { continue };
            let ended: Vec<((String, String), (u32, u64))> = alive
                .iter()
                .filter(|((m, u), (pid, _))| m == machine && units.get(u) != Some(pid))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            for (key, (_, since)) in ended {
                alive.remove(&key);
                let during = fault_at(faults, round.t_ms, limits.settle_grace_ms);
                let blameless = during.is_some_and(|f| f.touches.contains(machine) || since >= f.start_ms)
                    || after_stall(since, round.t_ms);
                if !blameless {
                    out.push(Violation {
                        invariant: Invariant::RestartedByUnrelatedFault,
                        unit: key.1,
                        machines: vec![machine.clone()],
                        from_ms: since,
                        to_ms: round.t_ms,
                        fault: during.map(|f| f.label.clone()),
                    });
                }
            }
            for (unit, pid) in units {
                alive.entry((machine.clone(), unit.clone())).or_insert((*pid, round.t_ms));
            }
        }
    }
    out
}

/// How a fault disturbed the units, from systemd's view: the first round after the fault started in which some unit
/// was not active on exactly one machine, and the first round after that in which every unit was again (`None` for
/// the end when that never happened before the next fault). `None` when no round in the fault's time showed a
/// disturbance.
pub fn disruption(
    rounds: &[Round],
    units: &[UnitSpec],
    fault: &FaultWindow,
    next_start_ms: Option<u64>,
) -> Option<(u64, Option<u64>)> {
    let until = next_start_ms.unwrap_or(u64::MAX);
    let mut window = rounds.iter().filter(|r| r.t_ms >= fault.start_ms && r.t_ms < until);
    let names: Vec<&str> = units.iter().map(|u| u.name.as_str()).collect();
    let each_once = |r: &Round| each_once(r, &names);
    let first_bad = window.by_ref().find(|r| !each_once(r))?;
    let back = window.find(|r| each_once(r)).map(|r| r.t_ms);
    Some((first_bad.t_ms, back))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { duplicate_window_ms: 10_000, settle_grace_ms: 2_000, host_stall_ms: 5_000 };

    fn units() -> Vec<UnitSpec> {
        vec![
            UnitSpec { name: "a.service".into(), at_most_once: false },
            UnitSpec { name: "once.service".into(), at_most_once: true },
        ]
    }

    /// What one machine shows: `Some(&[(unit, pid)])`, or `None` when down.
    type Seen<'a> = (&'a str, Option<&'a [(&'a str, u32)]>);

    /// A round at `t_ms`.
    fn round(t_ms: u64, machines: &[Seen]) -> Round {
        Round {
            t_ms,
            machines: machines
                .iter()
                .map(|(m, seen)| {
                    (m.to_string(), seen.map(|units| units.iter().map(|(u, p)| (u.to_string(), *p)).collect()))
                })
                .collect(),
        }
    }

    fn fault(label: &str, start_ms: u64, undone_ms: u64, converged_ms: u64, touches: &[&str]) -> FaultWindow {
        FaultWindow {
            label: label.into(),
            kind: "test fault",
            start_ms,
            undone_ms,
            converged_ms: Some(converged_ms),
            touches: touches.iter().map(|s| s.to_string()).collect(),
        }
    }

    const BOTH_ON_M1: &[(&str, u32)] = &[("a.service", 10), ("once.service", 11)];

    #[test]
    fn a_quiet_timeline_and_a_machine_kill_that_moves_its_units_break_nothing() {
        let rounds = [
            round(0, &[("m1", Some(BOTH_ON_M1)), ("m2", Some(&[]))]),
            round(1_000, &[("m1", None), ("m2", Some(&[]))]),
            round(9_000, &[("m1", None), ("m2", Some(&[("a.service", 20), ("once.service", 21)]))]),
            round(12_000, &[("m1", Some(&[])), ("m2", Some(&[("a.service", 20), ("once.service", 21)]))]),
        ];
        let faults = [fault("machine kill m1", 500, 10_000, 12_000, &["m1"])];
        assert_eq!(check(&units(), &rounds, &faults, LIMITS), []);
    }

    #[test]
    fn an_at_most_once_unit_on_two_machines_is_reported_with_unit_machines_and_times() {
        let rounds = [
            round(0, &[("m1", Some(BOTH_ON_M1)), ("m2", Some(&[]))]),
            round(8_000, &[("m1", Some(BOTH_ON_M1)), ("m2", Some(&[("once.service", 30)]))]),
            round(8_500, &[("m1", Some(BOTH_ON_M1)), ("m2", Some(&[("once.service", 30)]))]),
            round(9_000, &[("m1", Some(&[("a.service", 10)])), ("m2", Some(&[("once.service", 30)]))]),
        ];
        let faults = [fault("m1 cut from etcd for 15s", 1_000, 16_000, 17_000, &["m1"])];
        let v = check(&units(), &rounds, &faults, LIMITS);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            v[0].to_string(),
            "at-most-once unit ran twice: once.service on m1, m2 from 8.0s to 8.5s (during: m1 cut from etcd for 15s)"
        );
    }

    #[test]
    fn a_duplicate_outlasting_the_window_after_the_fault_is_reported() {
        let twice = &[("m1", Some(&[("a.service", 10)][..])), ("m2", Some(&[("a.service", 20)][..]))];
        let faults = [fault("m1 cut from etcd for 20s", 0, 20_000, 40_000, &["m1"])];
        let inside = [round(25_000, twice), round(29_000, twice)];
        assert_eq!(check(&units()[..1], &inside, &faults, LIMITS), [], "within 10 s of the heal: allowed");
        let outside = [round(25_000, twice), round(31_000, twice)];
        let v = check(&units()[..1], &outside, &faults, LIMITS);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            v[0].to_string(),
            "unit ran twice outside the documented window: a.service on m1, m2 from 25.0s to 31.0s \
             (during: m1 cut from etcd for 20s)"
        );
        let untouched = [fault("m3 cut from etcd for 20s", 0, 20_000, 40_000, &["m3"])];
        let v = check(&units()[..1], &inside, &untouched, LIMITS);
        assert_eq!(v.len(), 1, "a fault on another machine allows no duplicate: {v:?}");
    }

    #[test]
    fn a_unit_restarted_by_an_etcd_fault_is_reported() {
        let rounds = [
            round(0, &[("m1", Some(BOTH_ON_M1))]),
            round(5_000, &[("m1", Some(&[("a.service", 99), ("once.service", 11)]))]),
        ];
        let faults = [fault("etcd leader killed for 6s", 1_000, 7_000, 8_000, &[])];
        let v = check(&units(), &rounds, &faults, LIMITS);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            v[0].to_string(),
            "unit restarted by a fault that did not touch its machine: a.service on m1 from 0.0s to 5.0s \
             (during: etcd leader killed for 6s)"
        );
    }

    #[test]
    fn a_unit_stopped_with_no_fault_in_progress_is_reported() {
        let rounds = [
            round(0, &[("m1", Some(BOTH_ON_M1))]),
            round(4_000, &[("m1", Some(BOTH_ON_M1))]),
            round(8_000, &[("m1", Some(&[("once.service", 11)]))]),
        ];
        let faults = [fault("fleetd kill -9 on m2", 1_000, 1_000, 3_000, &["m2"])];
        let v = check(&units()[1..], &rounds, &faults, LIMITS);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            v[0].to_string(),
            "unit restarted by a fault that did not touch its machine: a.service on m1 from 0.0s to 8.0s \
             (no fault in progress)"
        );
    }

    /// seed 4052's hour: the host froze for 17 s (no round sampled, no fleetd log line); etcd then expired every
    /// presence lease at once, and the at-most-once units stopped as documented. A stall longer than the TTL is a
    /// fault of every machine; a shorter gap, or a restart long after the stall, still counts.
    #[test]
    fn a_restart_right_after_a_host_stall_longer_than_the_ttl_is_excused() {
        let once = |pid| -> Option<&'static [(&'static str, u32)]> {
            Some(if pid == 11 { &[("once.service", 11)] } else { &[("once.service", 12)] })
        };
        let etcd = [fault("etcd leader killed for 3s", 1_000, 4_000, 5_000, &[])];
        let stalled =
            [round(0, &[("m1", once(11))]), round(1_500, &[("m1", once(11))]), round(18_500, &[("m1", once(12))])];
        assert_eq!(check(&units()[1..], &stalled, &etcd, LIMITS), []);
        assert_eq!(host_stalls(&stalled, LIMITS), [(1_500, 18_500)]);
        let short =
            [round(0, &[("m1", once(11))]), round(1_500, &[("m1", once(11))]), round(6_000, &[("m1", once(12))])];
        assert_eq!(check(&units()[1..], &short, &etcd, LIMITS).len(), 1, "a 4.5 s gap is no stall at a 5 s TTL");
        let mut late = stalled.to_vec();
        late[2] = round(18_500, &[("m1", once(11))]);
        late.extend((0..10).map(|i| round(20_000 + 2_000 * i, &[("m1", once(11))])));
        late.push(round(40_000, &[("m1", once(12))]));
        assert_eq!(check(&units()[1..], &late, &etcd, LIMITS).len(), 1, "a restart 21.5 s after the stall");
    }

    #[test]
    fn a_duplicate_started_during_the_fault_may_be_stopped_on_an_untouched_machine() {
        let rounds = [
            round(0, &[("m1", Some(&[("a.service", 10)])), ("m2", Some(&[]))]),
            round(9_000, &[("m1", Some(&[("a.service", 10)])), ("m2", Some(&[("a.service", 20)]))]),
            round(21_000, &[("m1", Some(&[("a.service", 10)])), ("m2", Some(&[]))]),
        ];
        let faults = [fault("m1 cut from etcd for 20s", 1_000, 20_000, 22_000, &["m1"])];
        assert_eq!(check(&units()[..1], &rounds, &faults, LIMITS), []);
    }

    #[test]
    fn disruption_spans_from_the_first_disturbed_round_to_the_first_whole_one() {
        let rounds = [
            round(0, &[("m1", Some(BOTH_ON_M1)), ("m2", Some(&[]))]),
            round(1_000, &[("m1", None), ("m2", Some(&[]))]),
            round(7_000, &[("m1", None), ("m2", Some(&[("a.service", 20)]))]),
            round(8_000, &[("m1", None), ("m2", Some(&[("a.service", 20), ("once.service", 21)]))]),
        ];
        let kill = fault("machine kill m1 for 9s", 500, 9_500, 10_000, &["m1"]);
        assert_eq!(disruption(&rounds, &units(), &kill, None), Some((1_000, Some(8_000))));
        assert_eq!(disruption(&rounds[..3], &units(), &kill, None), Some((1_000, None)));
        let quiet = fault("etcd member 2 killed for 3s", 8_000, 11_000, 11_500, &[]);
        assert_eq!(disruption(&rounds, &units(), &quiet, None), None);
    }

    #[test]
    fn a_unit_running_nowhere_after_the_convergence_wait_is_lost() {
        let rounds = [
            round(0, &[("m1", Some(BOTH_ON_M1)), ("m2", Some(&[]))]),
            round(20_000, &[("m1", Some(&[("a.service", 10)])), ("m2", Some(&[]))]),
        ];
        let mut never = fault("machine kill m2 for 5s", 1_000, 6_000, 0, &["m2"]);
        never.converged_ms = None;
        let v = check(&units()[1..], &rounds, &[never], LIMITS);
        let lost: Vec<String> = v.iter().filter(|v| v.invariant == Invariant::Lost).map(|v| v.to_string()).collect();
        assert_eq!(
            lost,
            ["launched unit lost: once.service on no machine from 1.0s to 20.0s (during: machine kill m2 for 5s)"],
            "{v:?}"
        );
    }
}

//! At-most-once units (`[X-Fleet] AtMostOnce=true`, issue 14 item 2; docs/at-most-once.md): the two rules that
//! keep such a unit from running on two machines at once, as pure functions of monotonic clocks.
//!
//! * **The agent** stops its at-most-once units when it can no longer prove its presence: at
//!   [`stop_deadline`] = (send time of the last renewal etcd answered) + TTL − [`margin`], by its own
//!   monotonic clock. etcd expires the lease no earlier than the moment it *received* that renewal plus the TTL,
//!   which is later than the send time: the agent's estimate errs on the early side.
//! * **The engine** places an at-most-once unit of a machine whose presence expired only [`margin`] after it
//!   first saw the presence gone ([`Absences`]), by its own monotonic clock.
//!
//! So a stop has `2 × margin` between its start and the earliest placement elsewhere, less what clock *rates*
//! may differ over one TTL ([`MAX_RATE_SKEW`]): [`stop_budget`]. etcd's lease expiry granularity (its lessor
//! revokes expired leases every 500 ms, through raft) and watch delivery only make the engine later, never
//! earlier. A unit whose stop (its `ExecStop=` plus the processes' exit, bounded by its `TimeoutStopSec=`) takes
//! longer than the budget is the documented residual risk.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

/// The shortest margin: a second covers the stop of a plain service (SIGTERM, exit) and a watch's delivery.
pub const MIN_MARGIN: Duration = Duration::from_secs(1);
/// The longest margin: every second of it is a second more an at-most-once unit is down during a partition.
pub const MAX_MARGIN: Duration = Duration::from_secs(10);
/// The largest rate difference assumed between two machines' monotonic clocks (and etcd's): 1,000 ppm, twice
/// the most an NTP-disciplined clock slews (500 ppm); free-running crystals are within about 100 ppm.
pub const MAX_RATE_SKEW: f64 = 1e-3;

/// The margin for a presence TTL: TTL/5 within [`MIN_MARGIN`, `MAX_MARGIN`], and never more than TTL/3 (the
/// agent renews every TTL/3: a larger margin would put its stop deadline before its next renewal). 30 s → 6 s,
/// 3 s → 1 s, 60 s and more → 10 s.
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 5).clamp(MIN_MARGIN, MAX_MARGIN).min(ttl / 3)
}

/// How long the stop of an at-most-once unit may take without risking a second copy: `2 × margin` less the
/// clock-rate allowance over one TTL (agent and engine each, against etcd's clock).
pub fn stop_budget(ttl: Duration) -> Duration {
    let skew = ttl.mul_f64(4.0 * MAX_RATE_SKEW) + ttl.mul_f64(2.0 * MAX_RATE_SKEW);
    (margin(ttl) * 2).saturating_sub(skew)
}

/// Agent: when it must have begun stopping its at-most-once units, given until when its presence lease is known
/// to live (`alive_until`: last answered renewal's send time + TTL).
pub fn stop_deadline(alive_until: Instant, margin: Duration) -> Instant {
    alive_until.checked_sub(margin).unwrap_or(alive_until)
}

/// Agent: whether this machine's presence is in doubt at `now` — the lease is lost (`None`), or its stop deadline
/// has passed. While in doubt, at-most-once units are stopped and none is started.
pub fn presence_in_doubt(alive_until: Option<Instant>, now: Instant, margin: Duration) -> bool {
    alive_until.is_none_or(|until| now >= stop_deadline(until, margin))
}

/// Engine: when the machines that units are scheduled to were first seen absent, by the engine's clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Absences {
    since: BTreeMap<String, Instant>,
}

impl Absences {
    /// Records the absent machines among `targeted` (machines units are scheduled to) first seen absent at
    /// `now`, and forgets machines that are present again or no longer targeted.
    pub fn observe<'a>(
        &mut self,
        targeted: impl IntoIterator<Item = &'a str>,
        present: impl Fn(&str) -> bool,
        now: Instant,
    ) {
        let absent: BTreeSet<&str> = targeted.into_iter().filter(|m| !present(m)).collect();
        self.since.retain(|m, _| absent.contains(m.as_str()));
        for machine in absent {
            self.since.entry(machine.to_string()).or_insert(now);
        }
    }

    /// Machines whose at-most-once units the engine may not place elsewhere yet at `now`.
    pub fn waiting(&self, now: Instant, margin: Duration) -> BTreeSet<String> {
        self.since.iter().filter(|(_, since)| !may_place(**since, now, margin)).map(|(m, _)| m.clone()).collect()
    }

    /// When the next waiting machine's margin runs out (the engine wakes then).
    pub fn next_wake(&self, now: Instant, margin: Duration) -> Option<Instant> {
        self.since.values().map(|since| *since + margin).filter(|at| *at > now).min()
    }
}

/// Engine: whether an at-most-once unit of a machine first seen absent at `absent_since` may be placed elsewhere.
pub fn may_place(absent_since: Instant, now: Instant, margin: Duration) -> bool {
    now >= absent_since + margin
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn margin_follows_the_ttl_within_bounds() {
        assert_eq!(margin(s(30.0)), s(6.0));
        assert_eq!(margin(s(3.0)), s(1.0));
        assert_eq!(margin(s(120.0)), MAX_MARGIN);
        assert_eq!(margin(s(2.0)), s(2.0) / 3);
        assert_eq!(margin(s(1.0)), s(1.0) / 3);
        // 2 × 6 s less 6 ‰ of the TTL (4 ‰ for the agent's and the engine's clocks against etcd's, 2 ‰ between
        // theirs): 12 s − 0.18 s.
        let budget = stop_budget(s(30.0));
        assert!((budget.as_secs_f64() - 11.82).abs() < 1e-6, "{budget:?}");
    }

    #[test]
    fn agent_doubts_its_presence_a_margin_before_the_lease_can_expire() {
        let t0 = Instant::now();
        let until = t0 + s(3.0);
        let m = margin(s(3.0));
        assert!(!presence_in_doubt(Some(until), t0 + s(1.99), m));
        assert!(presence_in_doubt(Some(until), t0 + s(2.0), m));
        assert!(presence_in_doubt(None, t0, m), "a lost lease is always in doubt");
    }

    #[test]
    fn engine_waits_the_margin_from_the_first_sight_of_an_absence() {
        let t0 = Instant::now();
        let m = s(6.0);
        let mut absences = Absences::default();
        absences.observe(["m1", "m2"], |m| m == "m2", t0);
        assert_eq!(absences.waiting(t0, m), BTreeSet::from(["m1".to_string()]));
        // Seen again later: the first sighting counts.
        absences.observe(["m1", "m2"], |m| m == "m2", t0 + s(5.0));
        assert_eq!(absences.next_wake(t0 + s(5.0), m), Some(t0 + m));
        assert_eq!(absences.waiting(t0 + s(5.9), m).len(), 1);
        assert!(absences.waiting(t0 + m, m).is_empty());
        assert_eq!(absences.next_wake(t0 + m, m), None);
        // Back, then gone again: the wait starts over.
        absences.observe(["m1"], |_| true, t0 + s(7.0));
        absences.observe(["m1"], |_| false, t0 + s(8.0));
        assert_eq!(absences.waiting(t0 + s(13.9), m).len(), 1);
        // No longer targeted: forgotten.
        absences.observe([], |_| false, t0 + s(9.0));
        assert_eq!(absences, Absences::default());
    }

    /// One partition timeline in real time (seconds from the agent's first renewal).
    #[derive(Debug, Clone)]
    struct Timeline {
        ttl: f64,
        /// Renewal round trips: (delay to etcd, delay back), one per renewal period.
        trips: Vec<(f64, f64)>,
        /// The cut: nothing crosses between the machine and etcd from then on.
        cut: f64,
        /// Clock rates: agent, etcd, engine (1 + ε).
        rates: (f64, f64, f64),
        /// etcd's revocation after expiry (lessor granularity and raft), and the engine's watch delay.
        revoke_delay: f64,
        watch_delay: f64,
        /// How long the unit's stop takes, as a fraction of the budget.
        stop_fraction: f64,
    }

    fn timeline() -> impl Strategy<Value = Timeline> {
        let skew = || -MAX_RATE_SKEW..MAX_RATE_SKEW;
        (1u32..=120, 0.0f64..1.0)
            .prop_flat_map(move |(ttl, cut_at)| {
                let ttl = f64::from(ttl);
                let period = ttl / 3.0;
                (
                    Just(ttl),
                    proptest::collection::vec((0.0..period / 2.0, 0.0..period / 2.0), 1..12),
                    Just(cut_at),
                    (skew(), skew(), skew()),
                    0.0f64..0.6,
                    0.0f64..0.5,
                    0.0f64..=1.0,
                )
            })
            .prop_map(|(ttl, trips, cut_at, (a, e, g), revoke_delay, watch_delay, stop_fraction)| {
                let period = ttl / 3.0;
                Timeline {
                    ttl,
                    cut: cut_at * period * trips.len() as f64,
                    trips,
                    rates: (1.0 + a, 1.0 + e, 1.0 + g),
                    revoke_delay,
                    watch_delay,
                    stop_fraction,
                }
            })
    }

    /// (when the agent's stop of the unit has finished, when the engine may first place it elsewhere), in real
    /// seconds, computed through the functions the agent and engine call. `None` when etcd never received a
    /// renewal (the lease's grant is then the last word, modelled as the first trip).
    fn stop_and_place(t: &Timeline) -> (f64, f64) {
        let ttl = s(t.ttl);
        let m = margin(ttl);
        let (agent_rate, etcd_rate, engine_rate) = t.rates;
        let period = t.ttl / 3.0;
        // Grant at 0: etcd received it at `d0` (the first trip's delay), the agent counts from 0 (send time).
        let mut agent_sent = 0.0f64; // real time of the last answered renewal's send
        let mut etcd_received = t.trips[0].0;
        for (k, (to, back)) in t.trips.iter().enumerate().skip(1) {
            let sent = k as f64 * period;
            if sent + to < t.cut {
                etcd_received = sent + to;
                if sent + to + back < t.cut {
                    agent_sent = sent;
                }
            }
        }
        // The agent: its clock reads `real × rate`; the deadline through `stop_deadline`.
        let base = Instant::now();
        let agent_local = |real: f64| base + s(real * agent_rate);
        let deadline = stop_deadline(agent_local(agent_sent) + ttl, m);
        let deadline_real = (deadline - base).as_secs_f64() / agent_rate;
        let stop_done = deadline_real + t.stop_fraction * stop_budget(ttl).as_secs_f64();
        // etcd: expiry TTL after the last received renewal by its clock, revoked a little later.
        let expiry = etcd_received + t.ttl / etcd_rate;
        let seen = expiry + t.revoke_delay + t.watch_delay;
        // The engine: first sight at `seen`, then `Absences` decides, by its clock.
        let engine_local = |real: f64| base + s(real * engine_rate);
        let mut absences = Absences::default();
        absences.observe(["m1"], |_| false, engine_local(seen));
        let wake = absences.next_wake(engine_local(seen), m).expect("a wait");
        assert!(!absences.waiting(wake, m).contains("m1") && absences.waiting(engine_local(seen), m).contains("m1"));
        let place = (wake - base).as_secs_f64() / engine_rate;
        (stop_done, place)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Whatever the renewals, the cut, the clock rates and etcd's delays, a stop that fits the budget has
        /// finished before the engine may place the unit elsewhere.
        #[test]
        fn the_agent_stop_and_the_engine_placement_never_overlap(t in timeline()) {
            let (stop_done, place) = stop_and_place(&t);
            prop_assert!(stop_done < place, "stop done at {stop_done:.4} s, placed at {place:.4} s: {t:?}");
        }
    }

    #[test]
    fn a_stop_longer_than_the_budget_can_overlap() {
        // Worst case: renewal answered at once, etcd received it at once, no delays, clocks equal.
        let t = Timeline {
            ttl: 30.0,
            trips: vec![(0.0, 0.0), (0.0, 0.0)],
            cut: 10.5,
            rates: (1.0, 1.0, 1.0),
            revoke_delay: 0.0,
            watch_delay: 0.0,
            stop_fraction: 1.0,
        };
        let (stop_done, place) = stop_and_place(&t);
        assert!(stop_done < place);
        let over = Timeline { stop_fraction: 1.1, ..t };
        let (stop_done, place) = stop_and_place(&over);
        assert!(stop_done > place, "the budget is tight: 10% over it overlaps ({stop_done} vs {place})");
    }
}

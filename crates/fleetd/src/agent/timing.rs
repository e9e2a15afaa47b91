//! The agent's fixed and TTL-derived periods (spec §1.8), and the pace of its publishing rounds ([`RoundPacer`]).

use std::time::Duration;

use tokio::time::Instant;

/// Safety-net period of the agent reconcile (it also runs on registry events).
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(5);

/// Period of the job-state heartbeat and of the full unit-state re-publish: `TTL*4/5` when `TTL > 10 s`, else
/// `TTL/2`.
pub fn refresh_period(ttl: Duration) -> Duration {
    if ttl > Duration::from_secs(10) { ttl * 4 / 5 } else { ttl / 2 }
}

/// When the publish loop may start its next round: a few rounds at once after a quiet spell, then one per `gap`
/// (a "generic cell rate" limit: `burst` rounds, refilled at one per `gap`).
///
/// A rolling step brings a machine two or three small changes within 20–30 ms (its stop, then its start) after a
/// quiet spell: each is published at once, so the next machine's step is not held by the gap. A mass start is a
/// stream of signals for seconds: its rounds soon come one per `gap` and collect its waves, as a fixed gap did; the
/// burst adds at most `burst - 1` rounds per quiet spell.
#[derive(Debug, Clone)]
pub struct RoundPacer {
    gap: Duration,
    burst: u32,
    /// The "theoretical arrival time": when the next round would start if rounds came exactly one per `gap`.
    due: Instant,
}

impl RoundPacer {
    pub fn new(gap: Duration, burst: u32, now: Instant) -> RoundPacer {
        RoundPacer { gap, burst: burst.max(1), due: now }
    }

    /// The earliest time the next round may start.
    pub fn earliest(&self) -> Instant {
        let credit = self.gap * (self.burst - 1);
        self.due.checked_sub(credit).unwrap_or(self.due)
    }

    /// Records a round started at `now` (which must not be before [`Self::earliest`]).
    pub fn started(&mut self, now: Instant) {
        self.due = self.due.max(now) + self.gap;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_pacer_allows_a_burst_then_one_round_per_gap() {
        let gap = Duration::from_millis(50);
        let t0 = Instant::now();
        let mut pacer = RoundPacer::new(gap, 3, t0);
        // Three rounds at once after the quiet spell...
        for _ in 0..3 {
            assert!(pacer.earliest() <= t0, "a round of the burst was held until {:?}", pacer.earliest() - t0);
            pacer.started(t0);
        }
        // ...then the fourth waits one gap, and a stream goes on at one per gap.
        assert_eq!(pacer.earliest(), t0 + gap);
        pacer.started(t0 + gap);
        assert_eq!(pacer.earliest(), t0 + 2 * gap);
        pacer.started(t0 + 2 * gap);
        assert_eq!(pacer.earliest(), t0 + 3 * gap);
    }

    #[test]
    fn the_credit_comes_back_one_round_per_gap_of_quiet() {
        let gap = Duration::from_millis(50);
        let t0 = Instant::now();
        let mut pacer = RoundPacer::new(gap, 3, t0);
        for _ in 0..3 {
            pacer.started(t0);
        }
        // One gap of quiet after the burst buys one round, not three.
        let one_gap = t0 + gap;
        assert_eq!(pacer.earliest(), one_gap);
        pacer.started(one_gap);
        assert_eq!(pacer.earliest(), t0 + 2 * gap, "a second round went within the same gap");
        // A long quiet spell restores the whole burst, and no more.
        let quiet = t0 + 20 * gap;
        for _ in 0..3 {
            assert!(pacer.earliest() <= quiet, "a round of the restored burst was held");
            pacer.started(quiet);
        }
        assert_eq!(pacer.earliest(), quiet + gap);
    }

    #[test]
    fn a_burst_of_one_is_a_fixed_gap() {
        let gap = Duration::from_millis(50);
        let t0 = Instant::now();
        let mut pacer = RoundPacer::new(gap, 1, t0);
        assert_eq!(pacer.earliest(), t0);
        pacer.started(t0);
        assert_eq!(pacer.earliest(), t0 + gap);
    }

    #[test]
    fn refresh_period_follows_the_ttl() {
        assert_eq!(refresh_period(Duration::from_secs(30)), Duration::from_secs(24));
        assert_eq!(refresh_period(Duration::from_secs(3)), Duration::from_millis(1500));
        assert_eq!(refresh_period(Duration::from_secs(10)), Duration::from_secs(5));
    }
}

//! The agent's fixed and TTL-derived periods (spec §1.8), and the pace of its publishing rounds ([`RoundPacer`],
//! [`Pace`], [`AwaitedStarts`]).

use std::collections::BTreeMap;
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

/// The lane a publishing round goes in ([`Pace`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Any round: the pace that collects a stream of changes.
    Paced,
    /// A round that carries a state the cluster waits for (the outcome of the agent's own start), once the paced
    /// lane has no credit left.
    Awaited,
}

/// The publish loop's pace, in two lanes of the same shape ([`RoundPacer`]): every round goes in the paced lane
/// while it has credit; a round carrying a state someone waits for may also go in the awaited lane.
///
/// Changes the cluster did not ask for can spend the paced lane's burst: five `systemctl stop` + `start` of a unit
/// by hand are ten rounds within 0.3 s. A rolling step released right after then had its started state held for
/// the rest of a gap, 20–30 ms on a step of about 20. The awaited lane keeps a burst for the outcome of the agent's
/// own starts, which rollout steps, handovers and `fleetctl start` wait for. A mass start keeps to the paced lane
/// ([`AWAITED_LANE_UNITS`]); its last few units use both.
#[derive(Debug, Clone)]
pub struct Pace {
    paced: RoundPacer,
    awaited: RoundPacer,
}

impl Pace {
    pub fn new(gap: Duration, burst: u32, now: Instant) -> Pace {
        Pace { paced: RoundPacer::new(gap, burst, now), awaited: RoundPacer::new(gap, burst, now) }
    }

    /// The lane a round may start in at `now` (`awaited`: it carries a state someone waits for), if any.
    pub fn lane(&self, now: Instant, awaited: bool) -> Option<Lane> {
        if now >= self.paced.earliest() {
            Some(Lane::Paced)
        } else if awaited && now >= self.awaited.earliest() {
            Some(Lane::Awaited)
        } else {
            None
        }
    }

    /// The earliest time a round may start (`awaited`: one that carries a state someone waits for).
    pub fn earliest(&self, awaited: bool) -> Instant {
        if awaited { self.paced.earliest().min(self.awaited.earliest()) } else { self.paced.earliest() }
    }

    /// Records a round that wrote, started at `now` in `lane`.
    pub fn started(&mut self, lane: Lane, now: Instant) {
        match lane {
            Lane::Paced => self.paced.started(now),
            Lane::Awaited => self.awaited.started(now),
        }
    }
}

/// Most units awaited at once for which the awaited lane is used ([`AwaitedStarts::any`]): the lane is for a
/// change of a few units (a rollout's step, a handover); the rounds of a mass start, hundreds of units started at
/// once, keep to the paced lane, which collects their waves.
pub const AWAITED_LANE_UNITS: usize = 8;

/// Longest a unit the agent started stays awaited ([`AwaitedStarts`]) without reaching `active` or `failed` (a
/// service that exits at once, or one stuck `activating`): its states go in the paced lane after that.
pub const AWAIT_LIMIT: Duration = Duration::from_secs(5);

/// The units the agent (re)started whose outcome is not published yet: their states go out in the awaited lane
/// ([`Pace`]).
#[derive(Debug, Clone, Default)]
pub struct AwaitedStarts {
    until: BTreeMap<String, Instant>,
}

impl AwaitedStarts {
    /// The agent (re)started `unit` at `now`.
    pub fn started(&mut self, unit: String, now: Instant) {
        self.until.insert(unit, now + AWAIT_LIMIT);
    }

    /// Whether a round may go in the awaited lane: `pending` says of an awaited unit that its state may have
    /// changed, and at most [`AWAITED_LANE_UNITS`] units are awaited.
    pub fn any(&self, pending: impl Fn(&str) -> bool) -> bool {
        self.until.len() <= AWAITED_LANE_UNITS && self.until.keys().any(|unit| pending(unit))
    }

    /// After a round at `now`: forgets the units whose outcome is published (`settled`) and those awaited longer
    /// than [`AWAIT_LIMIT`].
    pub fn settle(&mut self, now: Instant, settled: impl Fn(&str) -> bool) {
        self.until.retain(|unit, until| now < *until && !settled(unit));
    }

    /// No unit is awaited.
    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }
}

/// Whether a published state is the outcome of a start of version `hash`: that version, `active` or `failed`.
pub fn start_outcome(active_state: &str, published_hash: &str, hash: &str) -> bool {
    published_hash == hash && matches!(active_state, "active" | "failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_someone_waits_for_has_a_burst_of_its_own_once_the_pace_is_spent() {
        let gap = Duration::from_millis(50);
        let t0 = Instant::now();
        let mut pace = Pace::new(gap, 2, t0);
        for _ in 0..2 {
            assert_eq!(pace.lane(t0, false), Some(Lane::Paced));
            pace.started(Lane::Paced, t0);
        }
        // The paced lane's burst is spent: an ordinary round waits a gap, an awaited one goes at once...
        assert_eq!(pace.lane(t0, false), None);
        assert_eq!(pace.earliest(false), t0 + gap);
        assert_eq!(pace.lane(t0, true), Some(Lane::Awaited));
        assert!(pace.earliest(true) <= t0, "an awaited round was held");
        pace.started(Lane::Awaited, t0);
        pace.started(Lane::Awaited, t0);
        // ...until the awaited lane's burst is spent too: then both wait for the first lane to have credit.
        assert_eq!(pace.lane(t0, true), None);
        assert_eq!(pace.earliest(true), t0 + gap);
        assert_eq!(pace.lane(t0 + gap, true), Some(Lane::Paced), "the paced lane is used first");
    }

    #[test]
    fn a_start_is_awaited_until_its_outcome_is_published_or_it_expires() {
        let t0 = Instant::now();
        let mut awaited = AwaitedStarts::default();
        assert!(!awaited.any(|_| true) && awaited.is_empty());
        awaited.started("a.service".into(), t0);
        awaited.started("b.service".into(), t0);
        assert!(awaited.any(|u| u == "b.service"));
        assert!(!awaited.any(|u| u == "c.service"));
        awaited.settle(t0, |u| u == "a.service");
        assert!(!awaited.any(|u| u == "a.service"), "a.service's outcome is published");
        assert!(awaited.any(|u| u == "b.service"));
        awaited.settle(t0 + AWAIT_LIMIT, |_| false);
        assert!(awaited.is_empty(), "b.service was awaited for longer than the limit");
    }

    #[test]
    fn a_mass_start_keeps_to_the_paced_lane() {
        let t0 = Instant::now();
        let mut awaited = AwaitedStarts::default();
        for i in 0..AWAITED_LANE_UNITS {
            awaited.started(format!("u{i}.service"), t0);
        }
        assert!(awaited.any(|u| u == "u0.service"), "a few units awaited use the lane");
        awaited.started("one-more.service".into(), t0);
        assert!(!awaited.any(|_| true), "more than {AWAITED_LANE_UNITS} awaited: the paced lane only");
        // As the start's outcomes are published, the last few use the lane again.
        awaited.settle(t0, |u| u == "u0.service");
        assert!(awaited.any(|u| u == "one-more.service"));
    }

    #[test]
    fn the_outcome_of_a_start_is_its_version_active_or_failed() {
        assert!(start_outcome("active", "h2", "h2"));
        assert!(start_outcome("failed", "h2", "h2"));
        assert!(!start_outcome("active", "h1", "h2"), "the old version's state");
        for on_the_way in ["inactive", "activating", "deactivating", "reloading"] {
            assert!(!start_outcome(on_the_way, "h2", "h2"), "{on_the_way}");
        }
    }

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

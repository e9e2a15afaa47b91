//! Pure: what the agent logs about registry writes that keep failing — etcd at its space quota (`NOSPACE`),
//! unreachable, or refusing for another reason — without a line per retry. The publish loop retries a failed
//! state write every second (and on every resync) for as long as it fails, which may be hours; a warning each time
//! would bury the journal. So per key (a unit's state):
//!
//! - the first failure is logged, with its cause;
//! - the same cause again only at the 10th, 100th, 1000th … failure in a row (a handful of lines a day);
//! - a different cause at once (the operator fixed one thing and another shows);
//! - the first success after failures once, saying how many attempts failed.

use std::collections::BTreeMap;

/// The failing keys and their causes.
#[derive(Debug, Default)]
pub struct WriteFailures {
    failing: BTreeMap<String, Failing>,
}

#[derive(Debug)]
struct Failing {
    cause: String,
    /// Failures in a row with this cause.
    count: u64,
    /// Failures in a row, any cause.
    total: u64,
}

/// Whether a failure is to be logged, and as which one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Not logged: the same cause as before, between two logged counts.
    Quiet,
    /// The first failure of this key with this cause.
    First,
    /// The same cause, `count` failures in a row (a power of ten).
    Still { count: u64 },
}

impl WriteFailures {
    pub fn new() -> Self {
        WriteFailures::default()
    }

    /// Notes a failed write of `key` with `cause`; says whether (and how) to log it.
    pub fn failed(&mut self, key: &str, cause: &str) -> Report {
        match self.failing.get_mut(key) {
            Some(f) if f.cause == cause => {
                f.count += 1;
                f.total += 1;
                if is_power_of_ten(f.count) { Report::Still { count: f.count } } else { Report::Quiet }
            }
            Some(f) => {
                f.cause = cause.to_string();
                f.count = 1;
                f.total += 1;
                Report::First
            }
            None => {
                self.failing.insert(key.to_string(), Failing { cause: cause.to_string(), count: 1, total: 1 });
                Report::First
            }
        }
    }

    /// Notes a successful write of `key`: how many writes of it failed in a row before, if any (to log once).
    pub fn succeeded(&mut self, key: &str) -> Option<u64> {
        self.failing.remove(key).map(|f| f.total)
    }

    /// How many keys are failing now.
    pub fn failing(&self) -> usize {
        self.failing.len()
    }

    /// Forgets every failing key: a round of writes succeeded whole, so whatever failed before and was not in it
    /// has nothing left to write (its unit changed back, or went).
    pub fn settled(&mut self) {
        self.failing.clear();
    }
}

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n % 10 == 0 {
        n /= 10;
    }
    n == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "etcd is out of space";

    #[test]
    fn a_key_failing_for_one_cause_is_logged_first_then_at_powers_of_ten() {
        let mut f = WriteFailures::new();
        let logged: Vec<(u64, Report)> =
            (1..=1000).map(|n| (n, f.failed("a", FULL))).filter(|(_, r)| *r != Report::Quiet).collect();
        assert_eq!(
            logged,
            [
                (1, Report::First),
                (10, Report::Still { count: 10 }),
                (100, Report::Still { count: 100 }),
                (1000, Report::Still { count: 1000 })
            ]
        );
        assert_eq!(f.failing(), 1);
    }

    #[test]
    fn keys_are_counted_apart_and_a_new_cause_is_logged_at_once() {
        let mut f = WriteFailures::new();
        assert_eq!(f.failed("a", FULL), Report::First);
        assert_eq!(f.failed("b", FULL), Report::First, "another key");
        assert_eq!(f.failed("a", FULL), Report::Quiet);
        assert_eq!(f.failed("a", "connection refused"), Report::First, "the cause changed");
        assert_eq!(f.failed("a", "connection refused"), Report::Quiet);
        assert_eq!(f.failed("a", FULL), Report::First, "and changed back");
        assert_eq!(f.failing(), 2);
    }

    #[test]
    fn a_success_after_failures_is_reported_once_with_their_count() {
        let mut f = WriteFailures::new();
        assert_eq!(f.succeeded("a"), None, "nothing failed");
        for _ in 0..3 {
            f.failed("a", FULL);
        }
        f.failed("a", "connection refused");
        assert_eq!(f.succeeded("a"), Some(4), "every failure in a row, any cause");
        assert_eq!(f.succeeded("a"), None, "once");
        assert_eq!(f.failed("a", FULL), Report::First, "a new run of failures starts afresh");
        assert_eq!(f.failing(), 1);
        f.settled();
        assert_eq!((f.failing(), f.succeeded("a")), (0, None), "settled: nothing failing, nothing to report");
    }

    #[test]
    fn powers_of_ten() {
        let powers: Vec<u64> = (0..=100_000).filter(|n| is_power_of_ten(*n)).collect();
        assert_eq!(powers, [1, 10, 100, 1000, 10_000, 100_000]);
    }
}

//! The agent's fixed and TTL-derived periods (spec §1.8).

use std::time::Duration;

/// Safety-net period of the agent reconcile (it also runs on registry events).
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(5);

/// Period of the job-state heartbeat and of the full unit-state re-publish: `TTL*4/5` when `TTL > 10 s`, else
/// `TTL/2`.
pub fn refresh_period(ttl: Duration) -> Duration {
    if ttl > Duration::from_secs(10) { ttl * 4 / 5 } else { ttl / 2 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_period_follows_the_ttl() {
        assert_eq!(refresh_period(Duration::from_secs(30)), Duration::from_secs(24));
        assert_eq!(refresh_period(Duration::from_secs(3)), Duration::from_millis(1500));
        assert_eq!(refresh_period(Duration::from_secs(10)), Duration::from_secs(5));
    }
}

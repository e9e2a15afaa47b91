//! The leader keeps the audit trail bounded (issue 38): at most every [`TRIM_EVERY`] while leading, it deletes the
//! records older than `audit_max_age` and the oldest beyond `audit_max_records` (two fenced range deletes at most;
//! an idle trail costs two count-only reads). One writer of deletions, like every other collection.

use std::time::Duration;

use tokio::time::Instant;

use fleet_core::audit::Limits;
use fleet_registry::LeaderSession;

/// How often the leader trims: the trail may exceed its limits by the writes of this long.
pub const TRIM_EVERY: Duration = Duration::from_secs(60);

/// When the leader last trimmed, and what to keep.
#[derive(Debug)]
pub struct Trimmer {
    pub limits: Limits,
    last: Option<Instant>,
}

impl Trimmer {
    pub fn new(limits: Limits) -> Trimmer {
        Trimmer { limits, last: None }
    }

    /// Trims when [`TRIM_EVERY`] has passed since the last trim (at once on the first call). A failure is logged;
    /// the next period tries again.
    pub async fn tick(&mut self, session: &LeaderSession) {
        let now = Instant::now();
        if !due(self.last, now) {
            return;
        }
        self.last = Some(now);
        match session.trim_audit(self.limits, fleet_core::model::now_ms()).await {
            Ok(t) if t.too_old + t.too_many > 0 => {
                tracing::info!(too_old = t.too_old, too_many = t.too_many, "trimmed the audit trail")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot trim the audit trail; retrying in a minute"),
        }
    }
}

/// Whether a trim is due at `now` after the last one at `last` (none yet: at once).
fn due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|last| now.saturating_duration_since(last) >= TRIM_EVERY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_is_due_at_once_then_every_period() {
        let t0 = Instant::now();
        assert!(due(None, t0), "the first tick of a new leader trims");
        assert!(!due(Some(t0), t0 + TRIM_EVERY - Duration::from_millis(1)));
        assert!(due(Some(t0), t0 + TRIM_EVERY));
        assert!(!due(Some(t0 + TRIM_EVERY), t0), "a clock that reads earlier than the last trim waits");
    }
}

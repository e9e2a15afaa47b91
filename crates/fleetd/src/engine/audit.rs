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
        if self.last.is_some_and(|last| last.elapsed() < TRIM_EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        match session.trim_audit(self.limits, fleet_core::model::now_ms()).await {
            Ok(t) if t.too_old + t.too_many > 0 => {
                tracing::info!(too_old = t.too_old, too_many = t.too_many, "trimmed the audit trail")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot trim the audit trail; retrying in a minute"),
        }
    }
}

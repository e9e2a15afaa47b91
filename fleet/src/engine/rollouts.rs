//! The engine leader's side of rollouts: on every view change (unit states included) and when a rollout's next
//! deadline comes, each rollout that is not final is advanced by the pure [`rollout::advance`] over what the view
//! shows, and a changed progress is stored (compare-and-swap on its revision, fenced to this engine's leader key
//! and lease, with a rollback's unit objects in the same transaction). A failed compare is not an error: the next view
//! carries whatever won, and the decision is made again from it. Finished rollouts beyond the last
//! [`rollout::KEEP_FINISHED_PER_UNIT`] of every unit are deleted ([`rollout::expired`]), fenced the same way.

use crate::registry::{LeaderFence, Registry, RegistryError, Snapshot, SnapshotCluster};
use crate::rollout;

/// What one [`drive`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Driven {
    /// When to look again (Unix ms), if a rollout waits for a time rather than for the cluster.
    pub wake_at_ms: Option<u64>,
    /// The registry revision of the last progress this drive stored, if any: a view older than it would decide
    /// again what was just decided (and fail its compare-and-swap).
    pub written_revision: Option<i64>,
}

/// Advances every rollout of `view` that is not final and stores what changed.
pub async fn drive(registry: &Registry, view: &Snapshot, fence: &LeaderFence) -> Driven {
    let now = crate::model::now_ms();
    let cluster = SnapshotCluster(view);
    let mut wake: Option<u64> = None;
    let mut written_revision: Option<i64> = None;
    for (id, record) in view.rollout_records() {
        let Some(current) = record.rollout() else { continue };
        if current.state().is_final() {
            continue;
        }
        let advanced = rollout::advance(&current, &cluster, now);
        if let Some(at) = advanced.wake_at_ms {
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        if current.progress.as_ref() == Some(&advanced.progress) {
            continue;
        }
        let progress = &advanced.progress;
        match registry.write_rollout_progress(view, id, progress, fence, &advanced.roll_back).await {
            Ok(Some(revision)) => {
                written_revision = Some(written_revision.map_or(revision, |r| r.max(revision)));
                let counts = rollout::phase_counts(progress);
                tracing::info!(rollout = %id, state = %progress.state, reason = %progress.reason, steps = ?counts,
                    "rollout progressed");
                if !advanced.roll_back.is_empty() {
                    tracing::warn!(rollout = %id, units = advanced.roll_back.len(), "rollout rolled back");
                }
            }
            Ok(None) => tracing::debug!(rollout = %id, "rollout progress changed meanwhile"),
            Err(e @ RegistryError::NotLeader { .. }) => {
                tracing::info!(rollout = %id, error = %e, "not storing rollout progress: leadership moved");
                return Driven { wake_at_ms: None, written_revision };
            }
            Err(e) => {
                tracing::warn!(rollout = %id, error = %e, "cannot store rollout progress; retrying on the next change")
            }
        }
    }
    collect_finished(registry, view, fence).await;
    Driven { wake_at_ms: wake, written_revision }
}

/// Whether `view` shows a rollout that is not final (one [`drive`] may advance).
pub fn any_running(view: &Snapshot) -> bool {
    view.rollout_records().values().any(|r| r.rollout().is_some_and(|r| !r.state().is_final()))
}

/// Deletes the finished rollouts beyond the last [`rollout::KEEP_FINISHED_PER_UNIT`] of every unit. A failure is
/// logged; the next view change tries again.
async fn collect_finished(registry: &Registry, view: &Snapshot, fence: &LeaderFence) {
    let rollouts = view.rollouts();
    let expired = rollout::expired(&rollouts, rollout::KEEP_FINISHED_PER_UNIT);
    if expired.is_empty() {
        return;
    }
    match registry.delete_rollouts(view, &expired, fence).await {
        Ok(deleted) => tracing::info!(deleted, expired = expired.len(), "deleted finished rollouts"),
        Err(e) => tracing::warn!(error = %e, "cannot delete finished rollouts; retrying on the next change"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Change, Keys};
    use crate::rollout::Cluster as _;

    #[test]
    fn observations_and_holders_come_from_states_markers_and_presence() {
        let keys = Keys::new("/p");
        let kv = [
            (keys.machine_object("m1"), r#"{"id":"m1"}"#.to_string()),
            (keys.machine_object("m2"), r#"{"id":"m2"}"#.to_string()),
            (keys.unit_object("db.service"), r#"{"name":"db.service","hash":"h2"}"#.to_string()),
            (
                keys.state("db.service", "m1"),
                r#"{"hash":"h2","loadState":"loaded","activeState":"active","subState":"running","nRestarts":4}"#
                    .to_string(),
            ),
            (
                keys.state("db.service", "m2"),
                r#"{"hash":"h1","loadState":"loaded","activeState":"active","subState":"running"}"#.to_string(),
            ),
            (
                keys.state("db.service", "gone"),
                r#"{"hash":"h1","loadState":"loaded","activeState":"active","subState":"running"}"#.to_string(),
            ),
            (keys.unit_launched("db.service", "m1"), "h2".to_string()),
            (keys.unit_restarted("db.service", "m1"), "r1".to_string()),
        ];
        let changes =
            kv.iter().map(|(k, v)| (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 3, lease: 0 }));
        let snapshot = Snapshot::from_kvs(&keys, 3, changes);
        let c = SnapshotCluster(&snapshot);
        assert_eq!(c.holders("db.service"), ["m1", "m2"], "the machine that left is not a holder");
        let m1 = c.observe("db.service", "m1");
        assert_eq!(
            (
                m1.present,
                m1.hash.as_deref(),
                m1.running.as_deref(),
                m1.active_state.as_str(),
                m1.restarted_for.as_deref()
            ),
            (true, Some("h2"), Some("h2"), "active", Some("r1"))
        );
        let gone = c.observe("db.service", "gone");
        assert_eq!(m1.restarts, Some(4), "the published restart counter");
        assert!(!gone.present);
        assert_eq!(c.observe("db.service", "m2").restarts, None, "a state without a counter");
        assert_eq!(c.observe("db.service", "m2").running, None);
    }
}

//! Body garbage collection (the original leaked bodies forever, L9).
//!
//! Selection is pure ([`super::Snapshot::unreferenced_bodies`]): bodies that no unit object names as current or
//! previous hash in a consistent snapshot. Deletion is race-free: each body is deleted only if its mod revision
//! is still the one seen in that snapshot. Every write that adds a reference re-puts the body in the same
//! transaction (see `units.rs`), which bumps its mod revision, so a reference added after the snapshot makes the
//! delete's compare fail and the body survives.
//!
//! Who runs it: the engine leader, whenever its snapshot shows unreferenced bodies (after destroy or replace),
//! fenced to its leadership (`engine.rs`). Nobody else deletes bodies.

use etcd_client::{Compare, CompareOp, TxnOp};

use super::error::Result;
use super::keys::{Component, check_component};
use super::roles::LeaderSession;

/// Bodies per transaction: two entries each (compare + delete), well below etcd's default limit of 128 ops.
const BATCH: usize = 50;

impl LeaderSession {
    /// Deletes each `(hash, mod_revision)` body whose mod revision is unchanged, only while this engine leads.
    /// Returns how many were deleted.
    pub async fn delete_bodies(&self, candidates: &[(String, i64)]) -> Result<usize> {
        for (hash, _) in candidates {
            check_component(Component::Hash, hash)?;
        }
        let mut deleted = 0;
        for chunk in candidates.chunks(BATCH) {
            // Optimistic batch first; if any body was re-put meanwhile the whole batch fails and each body is then
            // tried alone, so one revived body does not protect the others.
            if self.delete_batch(chunk).await? {
                deleted += chunk.len();
                continue;
            }
            for one in chunk {
                if self.delete_batch(std::slice::from_ref(one)).await? {
                    deleted += 1;
                }
            }
        }
        if deleted > 0 {
            tracing::debug!(deleted, candidates = candidates.len(), "garbage-collected unit bodies");
        }
        Ok(deleted)
    }

    async fn delete_batch(&self, batch: &[(String, i64)]) -> Result<bool> {
        let compares: Vec<Compare> = batch
            .iter()
            .map(|(hash, rev)| Compare::mod_revision(self.keys.body(hash), CompareOp::Equal, *rev))
            .collect();
        let deletes: Vec<TxnOp> = batch.iter().map(|(hash, _)| TxnOp::delete(self.keys.body(hash), None)).collect();
        let resp = self.fenced_txn("delete bodies", &self.keys.bodies_dir(), compares, deletes).await?;
        Ok(resp.is_some())
    }
}

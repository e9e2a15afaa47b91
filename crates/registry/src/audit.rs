//! The audit trail under `P/audit/` (issue 38): the API's (and the etcd driver's) record of a write, reads on
//! demand, and the engine leader's trimming by age and count. Records are not in the reflector's snapshot; every
//! read here is one range read of etcd, in pages.

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use super::error::{RegistryError, Result};
use super::keys::{Component, audit_id, check_component};
use super::records::{DecodeError, encode_json};
use super::roles::{ApiWriter, LeaderSession};
use super::{LIST_PAGE, MAX_MESSAGE, Registry, range_end};
use fleet_core::audit::{AuditRecord, Limits};

/// Tries at one time and suffix before a record is given up (another writer of the same suffix in the same ms).
const ATTEMPTS: u32 = 4;

/// One stored record as read: its key, and the record or why it does not decode.
pub type ReadRecord = (String, std::result::Result<AuditRecord, DecodeError>);

/// What a trim deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Records older than the age limit.
    pub too_old: i64,
    /// The oldest records beyond the count limit.
    pub too_many: i64,
}

impl ApiWriter {
    /// Stores `record` under a new key, named by its time and `suffix` (unique per writer: a fleetd's or a
    /// fleetctl's); never overwrites a record. Returns the key.
    pub async fn record_audit(&self, record: &AuditRecord, suffix: &str) -> Result<String> {
        let value = encode_json(record);
        for attempt in 0..ATTEMPTS {
            let id = match attempt {
                0 => audit_id(record.at_ms, suffix),
                n => audit_id(record.at_ms, &format!("{suffix}.{n}")),
            };
            check_component(Component::AuditId, &id)?;
            let key = self.keys.audit_record(&id);
            let txn = Txn::new().when([Compare::version(key.as_str(), CompareOp::Equal, 0)]).and_then([TxnOp::put(
                key.as_str(),
                value.as_str(),
                None,
            )]);
            if self.txn("record audit", &key, txn).await?.succeeded() {
                return Ok(key);
            }
        }
        Err(RegistryError::Conflict { op: "record audit", key: self.keys.audit_dir(), attempts: ATTEMPTS })
    }
}

impl Registry {
    /// Every audit record written at or after `since_ms`, oldest first, at one revision (read in pages of
    /// [`LIST_PAGE`]). A record that does not decode is returned as its error, with its key.
    pub async fn read_audit(&self, since_ms: u64) -> Result<Vec<ReadRecord>> {
        let dir = self.keys.audit_dir();
        let end = range_end(dir.as_bytes());
        let mut kv = self.kv().max_decoding_message_size(MAX_MESSAGE);
        let mut start = self.keys.audit_from(since_ms).into_bytes();
        let mut revision = 0;
        let mut records = Vec::new();
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(LIST_PAGE);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let resp = kv.get(start.clone(), Some(options)).await.map_err(RegistryError::etcd("get", &dir))?;
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
            }
            for item in resp.kvs() {
                let key = String::from_utf8_lossy(item.key()).into_owned();
                let record = fleet_core::audit::decode(&key, item.value());
                records.push((key, record));
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => return Ok(records),
            }
        }
    }
}

impl LeaderSession {
    /// Deletes the records written before `limits`' age at `now_ms`, then the oldest beyond its count: two range
    /// deletes at most, each fenced to this leader. Records are named by time, so "older than" and "the oldest
    /// n" are ranges from the start of `P/audit/`.
    pub async fn trim_audit(&self, limits: Limits, now_ms: u64) -> Result<Trimmed> {
        let dir = self.keys.audit_dir();
        let mut trimmed = Trimmed::default();
        let cutoff = self.keys.audit_from(limits.oldest_kept_ms(now_ms));
        let old = GetOptions::new().with_range(cutoff.as_str()).with_count_only();
        let old = self.kv().get(dir.as_str(), Some(old)).await.map_err(RegistryError::etcd("count", &dir))?;
        if old.count() > 0 {
            trimmed.too_old = self.delete_audit_before(&dir, cutoff.into_bytes()).await?;
        }
        let all = GetOptions::new().with_prefix().with_count_only();
        let count = self.kv().get(dir.as_str(), Some(all)).await.map_err(RegistryError::etcd("count", &dir))?.count();
        let excess = limits.excess(u64::try_from(count).unwrap_or(0));
        if excess > 0 {
            // The excess-th oldest key: everything up to and including it goes.
            let oldest = GetOptions::new()
                .with_prefix()
                .with_keys_only()
                .with_sort(SortTarget::Key, SortOrder::Ascend)
                .with_limit(i64::try_from(excess).unwrap_or(i64::MAX));
            let resp = self.kv().get(dir.as_str(), Some(oldest)).await.map_err(RegistryError::etcd("get", &dir))?;
            if let Some(last) = resp.kvs().last() {
                let mut end = last.key().to_vec();
                end.push(0);
                trimmed.too_many = self.delete_audit_before(&dir, end).await?;
            }
        }
        Ok(trimmed)
    }

    /// Deletes every record from the start of `dir` up to `end` (exclusive), fenced; how many went.
    async fn delete_audit_before(&self, dir: &str, end: Vec<u8>) -> Result<i64> {
        let op = TxnOp::delete(dir, Some(DeleteOptions::new().with_range(end)));
        let Some(resp) = self.fenced_txn("trim audit", dir, Vec::new(), vec![op]).await? else { return Ok(0) };
        Ok(resp
            .op_responses()
            .into_iter()
            .map(|r| match r {
                etcd_client::TxnOpResponse::Delete(d) => d.deleted(),
                _ => 0,
            })
            .sum())
    }
}

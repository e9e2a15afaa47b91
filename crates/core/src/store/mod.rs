//! The registry's contents as data: the key layout, the record formats, the typed snapshot at one revision and the
//! views derived from it. No etcd here: `fleet-registry` reads and writes these through etcd, and everything else
//! (agents, the engine, the API, fleetctl, the fakes) reads them from a snapshot.
//!
//! | file | owns |
//! |---|---|
//! | `keys` | the key layout under the prefix: the one place that spells a key |
//! | `records` | value formats (JSON records, plain values), their encoding and [`DecodeError`] |
//! | `interner` | shared strings for the snapshot's repeated names |
//! | `snapshot` | [`Snapshot`]: the typed image of the prefix at one revision, and how a change applies to it |
//! | `views` | derived views: current state, sort orders, garbage-collection candidates |
//! | `rollout_cluster` | [`SnapshotCluster`]: a snapshot as the rollout decision sees the cluster |
//! | `batch` | how batched writers split their work into transactions |
//!
//! Architecture invariant: nothing outside this module and `fleet-registry` builds an etcd key or decodes a stored
//! value.

pub mod batch;
mod interner;
pub mod keys;
pub mod records;
mod rollout_cluster;
pub mod snapshot;
mod views;

pub use batch::{MAX_TXN_OPS, TxnCost, cost_batches, txn_batches};
pub use keys::{
    AUDIT_MS_DIGITS, Component, DEFAULT_PREFIX, InvalidComponent, Key, Keys, LAYOUT_VERSION, audit_id, check_component,
};
pub use records::{Cordon, DecodeError, HISTORY_LEN, MachineObject, ScheduleEntry, StateRecord, UnitObject, Version};
pub use rollout_cluster::SnapshotCluster;
pub use snapshot::{BodyRecord, Change, LeaderRecord, MachineRecord, RolloutRecord, Section, Snapshot, UnitRecord};
pub use views::{UnitView, current_state};

/// Most units one rollout may name: each brings a compare and two puts to one transaction (etcd's default
/// `--max-txn-ops` is 128).
pub const MAX_ROLLOUT_UNITS: usize = 40;

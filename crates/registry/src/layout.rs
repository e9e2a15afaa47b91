//! The layout version key `P/version`: written once by the first fleetd, checked by every fleetd at start so that
//! old code never misreads a newer layout; and the engine leader's writes that switch a cluster from layout 1 to
//! layout 2 (`fleet_core::layout`, docs/lab/scoped-views.md).

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use fleet_core::layout::UnitMove;
use fleet_core::model::GlobalUnits;

use super::MAX_TXN_OPS;
use super::Registry;
use super::error::{RegistryError, Result};
use super::keys::{Component, LAYOUT_VERSION, check_component};
use super::records::{decode_u32, encode_json};
use super::roles::LeaderSession;
use super::units::{first_get_value, revision_of};

impl Registry {
    /// Creates `P/version` if absent (a new cluster starts at [`LAYOUT_VERSION`] and is switched to layout 2 by its
    /// engine once every machine runs it); returns the stored layout version. Fails with
    /// [`RegistryError::LayoutTooNew`] when the cluster uses a newer layout than this code runs (layout 2).
    pub async fn ensure_layout_version(&self) -> Result<u32> {
        let key = self.keys.layout_version();
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), LAYOUT_VERSION.to_string(), None)])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let resp = self.txn("ensure layout version", &key, txn).await?;
        if resp.succeeded() {
            return Ok(LAYOUT_VERSION);
        }
        let raw = first_get_value(&resp).unwrap_or_default();
        let found = match decode_u32(&key, "layout version", &raw) {
            Ok(found) => found,
            Err(e) => {
                // No layout writes such a value, so it tells of no newer one; refusing to start would keep every
                // fleetd that restarts out of the cluster for one bad key. Read as this layout, left as it is.
                tracing::warn!(error = %e, "unreadable layout version; reading the registry as layout {LAYOUT_VERSION}");
                return Ok(LAYOUT_VERSION);
            }
        };
        if found > fleet_core::layout::LAYOUT_2 {
            return Err(RegistryError::LayoutTooNew { key, found, supported: fleet_core::layout::LAYOUT_2 });
        }
        Ok(found)
    }
}

impl LeaderSession {
    /// Writes one unit's move to layout 2 (`fleet_core::layout::UnitMove`), fenced to this leadership, while the
    /// unit reads as it did when the move was decided: its object at the same revision, its layout-1 `desired` key
    /// holding what was read. Entries beyond one transaction's room (a global
    /// unit on many machines) go first, in transactions of their own under the same guards; layout 1's keys win
    /// over them until the last transaction, which puts the object with its desired state and deletes those keys.
    /// The revision of the last transaction, or `None`: the unit changed meanwhile (nothing of the last
    /// transaction written; decide it again).
    pub async fn move_unit(&self, unit: &UnitMove) -> Result<Option<i64>> {
        check_component(Component::UnitName, &unit.unit)?;
        let object_key = self.keys.unit_object(&unit.unit);
        let desired_key = self.keys.unit_desired(&unit.unit);
        let target_key = self.keys.unit_target(&unit.unit);
        // The `target` key has no writer but this leader (fenced), so it needs no guard; the `desired` key is the
        // API's, so a stop written there since the view makes the move write nothing. A key the view could not
        // read (another client's bytes) neither guards nor blocks: a `desired` key is then left in place (were it a
        // real stop written meanwhile, it still wins over the object), a `target` key deleted.
        let guards = || {
            let mut compares = vec![Compare::mod_revision(object_key.as_str(), CompareOp::Equal, unit.object_revision)];
            if let Some(read) = unit.delete_desired {
                compares.push(Compare::value(desired_key.as_str(), CompareOp::Equal, read.as_str()));
            }
            compares
        };
        let mut puts = Vec::with_capacity(unit.entries.len());
        for (machine, entry) in &unit.entries {
            check_component(Component::MachineId, machine)?;
            puts.push(TxnOp::put(self.keys.schedule_entry(machine, &unit.unit), encode_json(entry), None));
        }
        // The last transaction: the object, the deletes, and the entries that fit beside them.
        let room = MAX_TXN_OPS - 3;
        let split = puts.len().saturating_sub(room);
        let (first, last) = puts.split_at(split);
        for chunk in first.chunks(room) {
            if self.fenced_txn("move unit to layout 2", &object_key, guards(), chunk.to_vec()).await?.is_none() {
                return Ok(None);
            }
        }
        let mut ops = vec![TxnOp::put(object_key.as_str(), encode_json(&unit.object), None)];
        ops.extend(last.iter().cloned());
        if unit.delete_desired.is_some() {
            ops.push(TxnOp::delete(desired_key.as_str(), None));
        }
        ops.push(TxnOp::delete(target_key.as_str(), None));
        Ok(self.fenced_txn("move unit to layout 2", &object_key, guards(), ops).await?.map(|r| revision_of(&r)))
    }

    /// Layout 2: writes machine `machine`'s `drained` key (the units drains keep stopped there, for its scoped
    /// agent), or deletes it (`None`), fenced. The write's revision, `None` if the fence's compares failed.
    pub async fn write_drained(&self, machine: &str, units: Option<&GlobalUnits>) -> Result<Option<i64>> {
        check_component(Component::MachineId, machine)?;
        let key = self.keys.machine_drained(machine);
        let op = match units {
            Some(units) => TxnOp::put(key.as_str(), encode_json(units), None),
            None => TxnOp::delete(key.as_str(), None),
        };
        Ok(self.fenced_txn("write drained units", &key, Vec::new(), vec![op]).await?.map(|r| revision_of(&r)))
    }

    /// Puts `to` back into `P/version` when it is absent or holds no layout version (another client wrote it),
    /// fenced, only while it still holds what was read. `None` when it reads as a layout version (nothing to
    /// repair) or changed meanwhile; else the write's revision.
    pub async fn repair_layout(&self, to: u32) -> Result<Option<i64>> {
        let key = self.keys.layout_version();
        let resp = self.kv().get(key.as_str(), None).await.map_err(RegistryError::etcd("get", key.clone()))?;
        let compare = match resp.kvs().first() {
            Some(kv) if decode_u32(&key, "layout version", kv.value()).is_ok() => return Ok(None),
            Some(kv) => Compare::mod_revision(key.as_str(), CompareOp::Equal, kv.mod_revision()),
            None => Compare::version(key.as_str(), CompareOp::Equal, 0),
        };
        let ops = vec![TxnOp::put(key.as_str(), to.to_string(), None)];
        Ok(self.fenced_txn("repair layout", &key, vec![compare], ops).await?.map(|r| revision_of(&r)))
    }

    /// Switches the cluster's layout from `from` to `to` (`P/version`), fenced, only while it still reads `from`:
    /// The write's revision, or `None` if it did not read `from`.
    pub async fn switch_layout(&self, from: u32, to: u32) -> Result<Option<i64>> {
        let key = self.keys.layout_version();
        let compares = vec![Compare::value(key.as_str(), CompareOp::Equal, from.to_string())];
        let ops = vec![TxnOp::put(key.as_str(), to.to_string(), None)];
        Ok(self.fenced_txn("switch layout", &key, compares, ops).await?.map(|r| revision_of(&r)))
    }
}

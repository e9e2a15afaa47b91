//! The layout version key `P/version`: written once by the first fleetd, checked by every fleetd at start so that
//! old code never misreads a newer layout.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::Registry;
use super::error::{RegistryError, Result};
use super::keys::LAYOUT_VERSION;
use super::records::decode_u32;
use super::units::first_get_value;

impl Registry {
    /// Creates `P/version` if absent; returns the stored layout version. Fails with
    /// [`RegistryError::LayoutTooNew`] when the cluster uses a newer layout than [`LAYOUT_VERSION`].
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
        if found > LAYOUT_VERSION {
            return Err(RegistryError::LayoutTooNew { key, found, supported: LAYOUT_VERSION });
        }
        Ok(found)
    }
}

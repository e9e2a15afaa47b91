//! Which registry view the agent runs on (docs/lab/scoped-views.md): in a cluster at layout 2, a view of its own
//! machine only ([`Reflector::start_scoped`]: its prefix, the bodies its entries name, its lease-bound keys), so that
//! a write reaches the machines it concerns rather than every machine; before the switch, the full view, which the
//! agent leaves for a scoped one once it shows the switch ([`layout_2_reached`]).

use std::sync::Arc;

use tokio::sync::watch;

use fleet_core::layout::LAYOUT_2;
use fleet_registry::{Reflector, Registry, Snapshot};

/// The scoped view for the agent of `machine` (presence lease `lease`) when the cluster is at `layout` 2; `None`:
/// it runs on the full view.
pub fn scoped_view(registry: &Registry, machine: &str, lease: i64, layout: u32) -> Option<Reflector> {
    (layout >= LAYOUT_2).then(|| Reflector::start_scoped(registry, machine, lease))
}

/// Resolves once the full view `snapshots` shows the cluster at layout 2 (never, if its reflector ends first).
pub async fn layout_2_reached(mut snapshots: watch::Receiver<Arc<Snapshot>>) {
    loop {
        if snapshots.borrow_and_update().layout_version() >= Some(LAYOUT_2) {
            return;
        }
        if snapshots.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

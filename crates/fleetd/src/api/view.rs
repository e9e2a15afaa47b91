//! The registry view the API reads (docs/fleetd.md, "Full views"): the fleetd's own full view when it keeps one
//! (`full_view = true`, or a cluster still at layout 1), else one taken at the first request and given up once no
//! request has come for [`IDLE`] and none is in flight (an open cluster page counts as one). That one is the
//! engine's while this fleetd leads (`SharedFullView`), else listed for the API. Every answer is the same either
//! way; the first request after an idle spell on a fleetd that does not lead pays for one list of the registry.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::ui::hub::Hub;
use fleet_registry::{Reflector, SharedFullView};

/// How long an API view of its own outlives the last request.
pub const IDLE: Duration = Duration::from_secs(60);

/// A view and the cluster page's hub on it, as one request or page holds them (cheap clones).
#[derive(Clone)]
pub struct Held {
    pub reflector: Arc<Reflector>,
    pub hub: Arc<Hub>,
}

impl Held {
    fn start(reflector: Arc<Reflector>) -> Held {
        let hub = Arc::new(Hub::start(reflector.subscribe()));
        Held { reflector, hub }
    }
}

/// Where the API's view comes from.
pub enum ApiView {
    /// The fleetd's full view, kept for its life.
    Kept(Held),
    /// A full view while it is used, shared with the engine while it leads.
    OnDemand { full_views: SharedFullView, held: Arc<Mutex<Option<(Held, Instant)>>> },
}

impl ApiView {
    /// The fleetd's own full view.
    pub fn kept(reflector: Arc<Reflector>) -> ApiView {
        ApiView::Kept(Held::start(reflector))
    }

    /// A view listed when a request needs one and dropped after [`IDLE`] without use.
    pub fn on_demand(full_views: SharedFullView) -> ApiView {
        let held = Arc::new(Mutex::new(None));
        tokio::spawn(drop_when_idle(Arc::downgrade(&held)));
        ApiView::OnDemand { full_views, held }
    }

    /// The view to answer from, started if there is none; using it keeps it for another [`IDLE`].
    pub fn get(&self) -> Held {
        match self {
            ApiView::Kept(held) => held.clone(),
            ApiView::OnDemand { full_views, held } => {
                // A poisoned lock only means a panic elsewhere while holding it; the slot itself is still sound.
                let mut slot = held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let (view, used) = slot.get_or_insert_with(|| {
                    if full_views.is_live() {
                        tracing::info!("API: reading the engine's full view of the registry");
                    } else {
                        tracing::info!("API: listing the registry for a view of its own");
                    }
                    (Held::start(full_views.get()), Instant::now())
                });
                *used = Instant::now();
                view.clone()
            }
        }
    }

    /// Whether a view is held now (an on-demand one may not be).
    pub fn is_held(&self) -> bool {
        match self {
            ApiView::Kept(_) => true,
            ApiView::OnDemand { held, .. } => held.lock().map(|slot| slot.is_some()).unwrap_or(true),
        }
    }
}

/// Drops an on-demand view once it was not used for [`IDLE`] and nothing holds it (no request in flight, no page
/// open); ends with the API.
async fn drop_when_idle(held: Weak<Mutex<Option<(Held, Instant)>>>) {
    loop {
        tokio::time::sleep(IDLE / 4).await;
        let Some(held) = held.upgrade() else { return };
        let mut slot = held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Every request and open page holds the hub; the reflector may be the engine's too, which keeps it anyway.
        let idle =
            slot.as_ref().is_some_and(|(view, used)| used.elapsed() >= IDLE && Arc::strong_count(&view.hub) == 1);
        if idle {
            tracing::info!("API: no request for {} s; dropping its view of the registry", IDLE.as_secs());
            *slot = None;
        }
    }
}

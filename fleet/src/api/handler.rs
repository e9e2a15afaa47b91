//! The API v1 handler: reads are served from the reflector's in-memory view of the registry, writes go to etcd
//! and wait until the view includes them, so a client always reads its own writes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::reply;
use super::route::{Route, RouteError, route};
use super::serve::{ApiHandler, StreamedBody};
use super::ui;
use super::ui::hub::{EVENTS_PATH, Hub};
use crate::registry::{Reflector, Registry, RegistryError, Snapshot};
use crate::schema::{PageToken, TokenError};
use crate::wire::ApiError;

/// The discovery document served at `/fleet/v1/discovery` (spec §8.9).
pub const DISCOVERY: &str = include_str!("discovery.json");

/// How long a write waits for the reflector to show it before answering anyway.
const WRITE_VISIBILITY: Duration = Duration::from_secs(5);

/// Serves API v1 over one registry.
pub struct Api {
    pub(super) registry: Registry,
    pub(super) reflector: Arc<Reflector>,
    pub(super) token_limit: u16,
    /// The cluster page's shared registry watch and recent state changes.
    pub(super) ui: Hub,
}

impl Api {
    pub fn new(registry: Registry, reflector: Arc<Reflector>, token_limit: u16) -> Api {
        let ui = Hub::start(reflector.subscribe());
        Api { registry, reflector, token_limit: token_limit.max(1), ui }
    }

    pub(super) fn snapshot(&self) -> Arc<Snapshot> {
        self.reflector.snapshot()
    }

    /// Waits until the view includes `revision` (read-your-writes for the next request).
    pub(super) async fn settle(&self, revision: i64) {
        if let Err(err) = self.reflector.wait_for_revision(revision, WRITE_VISIBILITY).await {
            tracing::warn!(revision, error = %err, "API write not yet visible in the registry view");
        }
    }

    /// The page `token_text` names, or the first page.
    pub(super) fn page(&self, tokens: &[&str]) -> Result<PageToken, ApiError> {
        let bad = |e: TokenError| ApiError::bad_request(e);
        match tokens {
            [] => Ok(PageToken::first(self.token_limit)),
            [one] => PageToken::parse_for(one, self.token_limit).map_err(bad),
            _ => Err(bad(TokenError::TooManyValues)),
        }
    }
}

/// A registry failure: logged with its cause, answered 500 with an empty message (spec §8.3).
pub(super) fn internal(op: &str, err: &RegistryError) -> Response<Bytes> {
    tracing::error!(op, error = %err, "API request failed");
    reply::error(StatusCode::INTERNAL_SERVER_ERROR, "")
}

impl ApiHandler for Api {
    fn stream(&self, method: &http::Method, uri: &http::Uri) -> Option<Response<StreamedBody>> {
        (*method == http::Method::GET && uri.path() == EVENTS_PATH).then(|| ui::events(&self.ui))
    }

    async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
        let path = request.uri().path().to_string();
        let query = request.uri().query().map(str::to_string);
        match route(request.method(), &path) {
            Ok(Route::Discovery) => reply::text(DISCOVERY.to_string(), "application/json"),
            Ok(Route::ListMachines) => self.list_machines(query.as_deref()),
            Ok(Route::PatchMachines) => self.patch_machines(request.body()).await,
            Ok(Route::ListUnits) => self.list_units(query.as_deref()),
            Ok(Route::GetUnit(name)) => self.get_unit(&name),
            Ok(Route::PutUnit(name)) => self.put_unit(&name, &request).await,
            Ok(Route::DeleteUnit(name)) => self.delete_unit(&name).await,
            Ok(Route::UnitBatch) => self.unit_batch(&request).await,
            Ok(Route::ListStates) => self.list_states(query.as_deref()),
            Ok(Route::GetState(name)) => self.get_state(&name),
            Ok(Route::Metrics) => self.metrics(),
            Ok(Route::UnitHistory(name)) => self.unit_history(&name),
            Ok(Route::ListRollouts) => self.list_rollouts(),
            Ok(Route::GetRollout(id)) => self.get_rollout(&id, query.as_deref()).await,
            Ok(Route::PutRollout(id)) => self.put_rollout(&id, &request).await,
            Ok(Route::PatchRollout(id)) => self.patch_rollout(&id, &request).await,
            Ok(Route::Ui(rest)) => ui::respond(&self.ui, &rest, query.as_deref()),
            Err(RouteError::Redirect(to)) => {
                let location = match &query {
                    Some(q) => format!("{to}?{q}"),
                    None => to,
                };
                let mut response = reply::status(StatusCode::MOVED_PERMANENTLY);
                if let Ok(value) = http::HeaderValue::from_str(&location) {
                    response.headers_mut().insert(http::header::LOCATION, value);
                }
                response
            }
            Err(RouteError::NotFound) => reply::error(StatusCode::NOT_FOUND, ""),
            Err(RouteError::MethodNotAllowed(message)) => reply::error(StatusCode::METHOD_NOT_ALLOWED, message),
            Err(RouteError::BadRequest(message)) => reply::error(StatusCode::BAD_REQUEST, message),
            Err(RouteError::Name(refused)) => reply::error(refused.status, &refused.message),
        }
    }
}

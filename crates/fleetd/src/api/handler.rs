//! The API v1 handler: reads are served from the reflector's in-memory view of the registry, writes go to etcd
//! and wait until the view includes them, so a client always reads its own writes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::access::Access;
use super::csrf::Csrf;
use super::reply;
use super::route::{Route, RouteError, route};
use super::serve::{ApiHandler, StreamedBody};
use super::ui;
use super::ui::hub::EVENTS_PATH;
use super::view::ApiView;
use fleet_core::api_rules::ApiError;
use fleet_core::schema::{PageToken, TokenError};
use fleet_registry::{ApiWriter, Reflector, Registry, RegistryError, SharedFullView, Snapshot};

/// The discovery document served at `/fleet/v1/discovery` (spec §8.9).
pub const DISCOVERY: &str = include_str!("discovery.json");

/// How long a write waits for the reflector to show it before answering anyway.
const WRITE_VISIBILITY: Duration = Duration::from_secs(5);
/// How long a read waits for etcd's current revision and for the view to reach it.
const READ_CATCH_UP: Duration = Duration::from_secs(5);

/// Serves API v1 over one registry.
pub struct Api {
    /// The API's writes (units, desired state, rollout spec and control, metadata, cordons); reads come from
    /// `view`.
    pub(super) registry: ApiWriter,
    /// The registry view reads are answered from, with the cluster page's hub (its shared watch and recent state
    /// changes) on it.
    pub(super) view: ApiView,
    pub(super) token_limit: u16,
    /// The page's action tokens and the check of browsers' writes.
    pub(super) csrf: Csrf,
}

impl Api {
    /// An API reading the fleetd's full view `reflector`.
    pub fn new(registry: Registry, reflector: Arc<Reflector>, token_limit: u16) -> Api {
        Api::with_view(registry, ApiView::kept(reflector), token_limit)
    }

    /// An API on a full view held while it is used (`view::ApiView::on_demand`), from `full_views` (the engine's while
    /// it leads): for a fleetd that keeps no full view.
    pub fn on_demand(full_views: SharedFullView, token_limit: u16) -> Api {
        Api::with_view(full_views.registry(), ApiView::on_demand(full_views), token_limit)
    }

    fn with_view(registry: Registry, view: ApiView, token_limit: u16) -> Api {
        Api { registry: ApiWriter::new(registry), view, token_limit: token_limit.max(1), csrf: Csrf::new() }
    }

    /// The view's reflector.
    pub(super) fn reflector(&self) -> Arc<Reflector> {
        self.view.get().reflector
    }

    pub(super) fn snapshot(&self) -> Arc<Snapshot> {
        self.reflector().snapshot()
    }

    /// The unit writer for a request: it writes in the layout the current view shows (`ApiWriter::with_view`).
    pub(super) fn writer(&self) -> fleet_registry::ApiWriter {
        self.registry.with_view(self.snapshot())
    }

    /// Waits until the view includes `revision` (read-your-writes for the next request). When it does not within
    /// [`WRITE_VISIBILITY`], the write stands but its answer is an error that says so (`504`): a success would
    /// promise that the next read through this fleetd shows the write.
    pub(super) async fn settle(&self, revision: i64) -> Result<(), Response<Bytes>> {
        match self.reflector().wait_for_revision(revision, WRITE_VISIBILITY).await {
            Ok(_) => Ok(()),
            Err(err) => {
                tracing::warn!(revision, error = %err, "API write not yet visible in the registry view");
                Err(not_yet_visible(revision))
            }
        }
    }

    /// Catches the view up with etcd before a read (a linearizable barrier: one count-only read of etcd's current
    /// revision, then the wait for the view to reach it), so that a read through this fleetd shows every write any
    /// fleetd answered with success before it (issue 37). Etcd out of reach: `503` (the original's message, as
    /// its reads fail then too); the view not there within [`READ_CATCH_UP`]: `504` naming the delay.
    pub(super) async fn catch_up(&self) -> Result<(), Response<Bytes>> {
        match tokio::time::timeout(READ_CATCH_UP, self.reflector().sync(READ_CATCH_UP)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(RegistryError::Timeout { last, .. })) => {
                tracing::warn!(last = %last, "API read: registry view behind etcd");
                Err(reply::error(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!(
                        "this fleetd's view of the registry did not catch up with etcd within {} s ({last}): \
                         its answer could miss recent writes; retry, or ask another machine",
                        READ_CATCH_UP.as_secs()
                    ),
                ))
            }
            Ok(Err(err)) => Err(reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("fleet server unable to communicate with etcd: {err}"),
            )),
            Err(_) => Err(reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "fleet server unable to communicate with etcd: no answer within {} s",
                    READ_CATCH_UP.as_secs()
                ),
            )),
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

/// The answer to a write that etcd stored at `revision` but this fleetd's view did not show in time.
pub(super) fn not_yet_visible(revision: i64) -> Response<Bytes> {
    reply::error(
        StatusCode::GATEWAY_TIMEOUT,
        &format!(
            "the write was stored (etcd revision {revision}), but this fleetd's view of the registry did not show it \
             within {} s: a read through this fleetd may not show it yet",
            WRITE_VISIBILITY.as_secs()
        ),
    )
}

/// The status and message a registry failure answers: etcd at its space quota is `507` naming the cause (nothing
/// was written); anything else is logged with its cause and answered 500 with an empty message (spec §8.3).
pub(super) fn registry_failure(op: &str, err: &RegistryError) -> (StatusCode, String) {
    if err.is_no_space() {
        tracing::error!(op, error = %err, "etcd is out of space: writes are refused");
        let message = format!(
            "{}: nothing was written; compact and defragment etcd, then disarm the alarm (etcdctl alarm disarm)",
            fleet_registry::NO_SPACE
        );
        return (StatusCode::INSUFFICIENT_STORAGE, message);
    }
    tracing::error!(op, error = %err, "API request failed");
    (StatusCode::INTERNAL_SERVER_ERROR, String::new())
}

/// [`registry_failure`] as a response.
pub(super) fn internal(op: &str, err: &RegistryError) -> Response<Bytes> {
    let (status, message) = registry_failure(op, err);
    reply::error(status, &message)
}

impl ApiHandler for Api {
    fn stream(&self, method: &http::Method, uri: &http::Uri) -> Option<Response<StreamedBody>> {
        (*method == http::Method::GET && uri.path() == EVENTS_PATH).then(|| {
            let held = self.view.get();
            ui::events(&held.hub.clone(), held)
        })
    }

    async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
        // The audit trail (issue 38): one record per write request, once its answer is decided.
        let audited = self.audit_begin(&request);
        let response = self.respond(request).await;
        self.audit_end(audited, &response).await;
        response
    }

    async fn refused(&self, request: Request<Bytes>, response: &Response<Bytes>) {
        let audited = self.audit_begin(&request);
        self.audit_end(audited, response).await;
    }
}

impl Api {
    /// The answer to one request.
    async fn respond(&self, request: Request<Bytes>) -> Response<Bytes> {
        // Held for the whole request, so that a view of the API's own is not dropped under it.
        let held = self.view.get();
        let path = request.uri().path().to_string();
        let query = request.uri().query().map(str::to_string);
        // The connection's access (serve.rs puts it in): browsers' writes must come from the admin's page.
        let access = request.extensions().get::<Access>().cloned().unwrap_or(Access::Unrestricted);
        if let Err(refused) = self.csrf.check(request.method(), request.headers(), &access) {
            tracing::info!(method = %request.method(), path, reason = %refused, "browser write refused");
            return reply::error(StatusCode::FORBIDDEN, &refused.to_string());
        }
        let route = route(request.method(), &path);
        // A later page of a listing reads a view at least as new as its first page, which caught up already: the
        // listing as a whole shows every write before it, and a listing of many pages pays one catch-up.
        let later_page = super::query::values(&super::query::pairs(query.as_deref()), "nextPageToken").next().is_some();
        if route.as_ref().is_ok_and(Route::uses_view) && !later_page {
            if let Err(behind) = self.catch_up().await {
                return behind;
            }
        }
        match route {
            Ok(Route::Discovery) => reply::text(DISCOVERY.to_string(), "application/json"),
            Ok(Route::ListMachines) => self.list_machines(query.as_deref()),
            Ok(Route::PatchMachines) => self.patch_machines(request.body()).await,
            Ok(Route::CordonMachine(id)) => self.cordon_machine(&id, true).await,
            Ok(Route::UncordonMachine(id)) => self.cordon_machine(&id, false).await,
            Ok(Route::ListUnits) => self.list_units(query.as_deref()),
            Ok(Route::GetUnit(name)) => self.get_unit(&name),
            Ok(Route::PutUnit(name)) => self.put_unit(&name, &request).await,
            Ok(Route::DeleteUnit(name)) => self.delete_unit(&name).await,
            Ok(Route::UnitBatch) => self.unit_batch(&request).await,
            Ok(Route::ListStates) => self.list_states(query.as_deref()),
            Ok(Route::GetState(name)) => self.get_state(&name),
            Ok(Route::Metrics) => self.metrics(),
            Ok(Route::UnitHistory(name)) => self.unit_history(&name).await,
            Ok(Route::Audit) => self.audit_list(query.as_deref()).await,
            Ok(Route::ListRollouts) => self.list_rollouts(),
            Ok(Route::GetRollout(id)) => self.get_rollout(&id, query.as_deref()).await,
            Ok(Route::PutRollout(id)) => self.put_rollout(&id, &request).await,
            Ok(Route::PatchRollout(id)) => self.patch_rollout(&id, &request).await,
            Ok(Route::Ui(rest)) => ui::respond(&held.hub, &rest, query.as_deref(), self.csrf.token(&access).as_deref()),
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

#[cfg(test)]
mod failure_tests {
    use super::*;

    fn etcd(message: &str) -> RegistryError {
        RegistryError::Etcd { op: "txn", key: "/p/x".into(), source: etcd_client::Error::InvalidArgs(message.into()) }
    }

    #[test]
    fn a_write_refused_by_etcds_space_quota_is_507_naming_the_cause() {
        let (status, message) = registry_failure("store unit", &etcd("etcdserver: mvcc: database space exceeded"));
        assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE);
        assert!(message.starts_with("etcd is out of space") && message.contains("alarm disarm"), "{message}");
        let (status, message) = registry_failure("store unit", &etcd("connection refused"));
        assert_eq!((status, message.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, ""), "other failures as before");
    }

    #[test]
    fn a_write_this_fleetd_cannot_see_in_time_is_not_a_success() {
        let response = not_yet_visible(42);
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
        let body = String::from_utf8_lossy(response.body()).to_string();
        assert!(body.contains("stored (etcd revision 42)") && body.contains("within 5 s"), "{body}");
    }
}

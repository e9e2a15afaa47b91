//! The API's audit trail (issue 38): one record per write request, written after its answer is decided (so it
//! carries the status and the error message), and `GET /fleet/v1/audit`. Reads (`GET`, `HEAD`) are not recorded.
//! Who made a request comes with it from the accept loop (`peer`); what it was is described by
//! `fleet_core::audit::describe`, as the etcd driver describes its own writes. A record that cannot be written is
//! logged and changes nothing in the answer.

use bytes::Bytes;
use http::{Method, Request, Response};

use super::handler::{Api, internal};
use super::query;
use super::reply;
use super::route::{Route, route};
use fleet_core::api_rules::ApiError;
use fleet_core::audit::{self, AuditRecord, Described, Query, Via, Who, Write};
use fleet_core::schema::{MachineMetadataOp, RolloutControl, RolloutRequest, Unit, UnitBatch, UnitHistory};

/// A write request whose record is written once its answer is known.
pub(super) struct Pending {
    who: Who,
    method: String,
    path: String,
    described: Described,
}

/// The write in `request` in words (`method` and `path` for a body that does not decode, or a path no route
/// serves).
fn describe(request: &Request<Bytes>) -> Described {
    let (method, path, body) = (request.method(), request.uri().path(), request.body());
    let other = || audit::describe(Write::Other(method.as_str(), path));
    match route(method, path) {
        Ok(Route::PutUnit(name)) => match json::<Unit>(body) {
            Some(unit) => audit::describe(Write::PutUnit(&Unit { name, ..unit })),
            None => other(),
        },
        Ok(Route::DeleteUnit(name)) => audit::describe(Write::DestroyUnit(&name)),
        Ok(Route::UnitBatch) => json::<UnitBatch>(body).map_or_else(other, |b| audit::describe(Write::Batch(&b))),
        Ok(Route::PatchMachines) => {
            json::<Vec<MachineMetadataOp>>(body).map_or_else(other, |ops| audit::describe(Write::Metadata(&ops)))
        }
        Ok(Route::CordonMachine(id)) => audit::describe(Write::Cordon(&id, true)),
        Ok(Route::UncordonMachine(id)) => audit::describe(Write::Cordon(&id, false)),
        Ok(Route::PutRollout(id)) => json::<RolloutRequest>(body)
            .map_or_else(other, |request| audit::describe(Write::CreateRollout(&id, &request))),
        Ok(Route::PatchRollout(id)) => json::<RolloutControl>(body)
            .map_or_else(other, |control| audit::describe(Write::ControlRollout(&id, control))),
        _ => other(),
    }
}

/// A request body as `T`, if it is one (the handler answers the one that is not).
fn json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
    serde_json::from_slice(body).ok()
}

/// `GET /audit`'s query: `unit`, `since` (Unix ms), `limit` (1 to [`audit::MAX_LIMIT`]); each at most once.
fn parse_query(text: Option<&str>) -> Result<Query, ApiError> {
    let pairs = query::pairs(text);
    let one = |key: &'static str| -> Result<Option<&str>, ApiError> {
        let values: Vec<&str> = query::values(&pairs, key).collect();
        match values.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            _ => Err(ApiError::bad_request(format!("query parameter {key} given {} times", values.len()))),
        }
    };
    let mut parsed = Query { unit: one("unit")?.map(str::to_string), ..Query::default() };
    if let Some(since) = one("since")? {
        parsed.since_ms = since.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid since {since:?}: expected Unix time in milliseconds"))
        })?;
    }
    if let Some(limit) = one("limit")? {
        parsed.limit = limit.parse().ok().filter(|l| (1..=audit::MAX_LIMIT).contains(l)).ok_or_else(|| {
            ApiError::bad_request(format!("invalid limit {limit:?}: expected 1 to {}", audit::MAX_LIMIT))
        })?;
    }
    Ok(parsed)
}

impl Api {
    /// The record to write for `request` once answered; `None` for a read.
    pub(super) fn audit_begin(&self, request: &Request<Bytes>) -> Option<Pending> {
        if matches!(*request.method(), Method::GET | Method::HEAD) {
            return None;
        }
        // The accept loop names every connection's peer; a request without one did not come through it.
        let who = request.extensions().get::<Who>().cloned();
        let who = who.unwrap_or_else(|| Who { via: Via::Tcp, name: "unknown peer".into() });
        let (method, path) = (request.method().to_string(), request.uri().path().to_string());
        Some(Pending { who, method, path, described: describe(request) })
    }

    /// Writes the record of `pending` answered with `response`; a failure is logged, never answered.
    pub(super) async fn audit_end(&self, pending: Option<Pending>, response: &Response<Bytes>) {
        let Some(Pending { who, method, path, described }) = pending else { return };
        let status = response.status().as_u16();
        let result = (status, audit::error_of(status, response.body()));
        let record = described.into_record(fleet_core::model::now_ms(), who, (method, path), result);
        if let Err(err) = self.registry.record_audit(&record, &audit::next_suffix()).await {
            tracing::warn!(error = %err, method = %record.method, path = %record.path, who = %record.who, status,
                "cannot write the audit record of an API write");
        }
    }

    /// `GET /fleet/v1/audit`: read from etcd on each request (the trail is not in the registry view).
    pub(super) async fn audit_list(&self, query_text: Option<&str>) -> Response<Bytes> {
        let query = match parse_query(query_text) {
            Ok(query) => query,
            Err(err) => return reply::refused(&err),
        };
        match self.registry.read_audit(query.since_ms).await {
            Ok(read) => reply::json(&audit::select(read.into_iter().map(|(_, r)| r), &query)),
            Err(err) => internal("read audit trail", &err),
        }
    }

    /// Fills in who stored each version of `unit` from the audit trail; without it (etcd failing) the history is
    /// shown as it is, and the failure logged.
    pub(super) async fn history_authors(&self, unit: &str, history: &mut UnitHistory) {
        let since = history.versions.iter().map(|v| v.stored_ms).min().unwrap_or(0).saturating_sub(5_000);
        match self.registry.read_audit(since).await {
            Ok(read) => {
                let records: Vec<AuditRecord> = read.into_iter().filter_map(|(_, r)| r.ok()).collect();
                audit::authors(unit, history, &records);
            }
            Err(err) => tracing::warn!(%unit, error = %err, "cannot read the audit trail for a unit's history"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn request(method: Method, path: &str, body: &str) -> Request<Bytes> {
        Request::builder().method(method).uri(path).body(Bytes::from(body.to_string())).unwrap()
    }

    #[test]
    fn requests_are_described_from_their_route_and_body() {
        let put = request(Method::PUT, "/fleet/v1/units/a.service", r#"{"desiredState":"launched"}"#);
        assert_eq!(describe(&put).action, "set a.service launched");
        let bad_body = request(Method::PUT, "/fleet/v1/units/a.service", "{nope");
        assert_eq!(describe(&bad_body).action, "PUT /fleet/v1/units/a.service");
        let cordon = request(Method::PUT, "/fleet/v1/machines/m1/cordon", "");
        assert_eq!(describe(&cordon).action, "cordon m1");
        let pause = request(Method::PATCH, "/fleet/v1/rollouts/r1", r#"{"action":"pause"}"#);
        assert_eq!(describe(&pause).action, "pause rollout r1");
        let unknown = request(Method::POST, "/fleet/v1/nowhere", "");
        assert_eq!(describe(&unknown).action, "POST /fleet/v1/nowhere");
    }

    #[test]
    fn the_query_names_what_is_wrong() {
        assert_eq!(parse_query(None).unwrap(), Query::default());
        let q = parse_query(Some("unit=a%40b.service&since=17&limit=5")).unwrap();
        assert_eq!(q, Query { unit: Some("a@b.service".into()), since_ms: 17, limit: 5 });
        for (text, message) in [
            ("since=yesterday", "invalid since \"yesterday\": expected Unix time in milliseconds"),
            ("limit=0", "invalid limit \"0\": expected 1 to 10000"),
            ("limit=10001", "invalid limit \"10001\": expected 1 to 10000"),
            ("unit=a&unit=b", "query parameter unit given 2 times"),
        ] {
            let err = parse_query(Some(text)).unwrap_err();
            assert_eq!((err.status, err.message.as_str()), (StatusCode::BAD_REQUEST, message), "{text}");
        }
    }
}

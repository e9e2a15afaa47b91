//! `/fleet/v1/units` (spec §8.6): list, get, create/replace/set desired state (decided by [`wire::decide_put`]),
//! destroy; and `POST /fleet/v1/units-batch` (an extension, issue 16): many of those writes in one request, each
//! decided and answered as its single request would be, written in few etcd transactions (`registry::unit_batch`).

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::handler::Api;
use super::query;
use super::reply;
use super::route::{NO_UNIT, NameRefused, NameUse, check_unit_name};
use fleet_core::api_rules::ApiError;
use fleet_core::api_rules::{self, PutAction, StoreOptions};
use fleet_core::model::JobState;
use fleet_core::schema;
use fleet_core::unit::UnitFile;
use fleet_registry::{PutUnit, RegistryError, Snapshot};

fn bad_request(message: impl std::fmt::Display) -> Response<Bytes> {
    reply::refused(&ApiError::bad_request(message))
}

impl Api {
    pub(super) fn list_units(&self, query_text: Option<&str>) -> Response<Bytes> {
        let pairs = query::pairs(query_text);
        let page = match self.page(&query::values(&pairs, "nextPageToken").collect::<Vec<_>>()) {
            Ok(page) => page,
            Err(err) => return reply::refused(&err),
        };
        let snapshot = self.snapshot();
        // Page first, by name, then build only that page's units: building one reads its states and parses its
        // body. (A stored body that does not parse — which the API never stores — leaves its page one unit short.)
        let names: Vec<&str> = snapshot.unit_names().collect();
        let (items, next) = page.slice(&names);
        reply::json(&schema::UnitPage {
            units: items.iter().filter_map(|name| api_rules::unit(&snapshot.unit(name)?, false)).collect(),
            next_page_token: next.map(|t| t.encode()).unwrap_or_default(),
        })
    }

    pub(super) fn get_unit(&self, name: &str) -> Response<Bytes> {
        let snapshot = self.snapshot();
        match snapshot.unit(name).and_then(|v| api_rules::unit(&v, true)) {
            Some(unit) => reply::json(&unit),
            None => reply::error(StatusCode::NOT_FOUND, NO_UNIT),
        }
    }

    pub(super) async fn delete_unit(&self, name: &str) -> Response<Bytes> {
        match self.writer().destroy_unit(name).await {
            Ok(destroyed) => {
                if let Err(response) = self.settle(destroyed.revision).await {
                    return response;
                }
                reply::status(StatusCode::NO_CONTENT)
            }
            Err(err) => error_reply("destroy unit", name, &err),
        }
    }

    /// The unit's stored versions, newest first (the current one marked), with their unit files and who stored
    /// them (from the audit trail).
    pub(super) async fn unit_history(&self, name: &str) -> Response<Bytes> {
        let snapshot = self.snapshot();
        let Some(object) = snapshot.unit_record(name).and_then(|r| r.object()) else {
            return reply::error(StatusCode::NOT_FOUND, NO_UNIT);
        };
        let mut history = api_rules::history(object, |hash| snapshot.body(hash).cloned());
        self.history_authors(name, &mut history).await;
        reply::json(&history)
    }

    /// The decision procedure of spec §8.6, steps 1–8.
    pub(super) async fn put_unit(&self, path_name: &str, request: &Request<Bytes>) -> Response<Bytes> {
        if let Err(err) = check_content_type(request) {
            return reply::refused(&err);
        }
        let body: schema::Unit = match serde_json::from_slice(request.body()) {
            Ok(body) => body,
            Err(err) => return bad_request(format!("unable to decode body: {err}")),
        };
        if !body.name.is_empty() && body.name != path_name {
            let body_name = &body.name;
            return bad_request(format!(
                "name in URL {path_name:?} differs from unit name in request body {body_name:?}"
            ));
        }
        let name = path_name;
        let prepared = prepare_put(&self.snapshot(), schema::Unit { name: name.to_string(), ..body });
        let result = match prepared {
            Prepared::Rejected(_, err) => return reply::refused(&err),
            Prepared::Roll(request) => {
                let taken: Vec<String> = self.snapshot().rollout_records().keys().map(|k| k.to_string()).collect();
                let id = api_rules::unused_rollout_id(name, fleet_core::model::now_ms(), &taken);
                return match self.store_rollout(&id, &request).await {
                    Ok(_) => {
                        let mut response = reply::status(StatusCode::CREATED);
                        if let Ok(value) = http::HeaderValue::from_str(&id) {
                            response.headers_mut().insert(ROLLOUT_HEADER, value);
                        }
                        response
                    }
                    Err(response) => response,
                };
            }
            Prepared::Store(store) => self.writer().put_unit(&store.put()).await.map(|write| {
                let (hash, desired, no_restart) = (&store.hash[..7], store.desired, store.options.no_restart);
                tracing::info!(unit = %name, %hash, %desired, no_restart, "stored unit");
                (write.revision(), StatusCode::CREATED)
            }),
            Prepared::SetDesired(_, state) => {
                self.writer().set_desired(name, state).await.map(|revision| (Some(revision), StatusCode::NO_CONTENT))
            }
        };
        match result {
            Ok((revision, status)) => {
                if let Some(revision) = revision {
                    if let Err(response) = self.settle(revision).await {
                        return response;
                    }
                }
                reply::status(status)
            }
            Err(err) => error_reply("store unit", name, &err),
        }
    }
}

/// The header of a `PUT /units/<name>` answer that went through a rollout (the unit's update policy): its ID.
pub const ROLLOUT_HEADER: &str = "x-fleet-rollout";

/// The status and message a single-unit request answers for a registry error (logging an unexpected one).
fn unit_error(op: &str, unit: &str, err: &RegistryError) -> (StatusCode, String) {
    match err {
        RegistryError::UnitNotFound { .. } => (StatusCode::NOT_FOUND, NO_UNIT.to_string()),
        err => {
            tracing::debug!(unit, "unit write failed");
            super::handler::registry_failure(op, err)
        }
    }
}

/// [`unit_error`] as a response.
fn error_reply(op: &str, unit: &str, err: &RegistryError) -> Response<Bytes> {
    let (status, message) = unit_error(op, unit, err);
    reply::error(status, &message)
}

/// What a single-unit request answers for a registry result (`status` on success).
fn batch_result<T>(name: &str, result: &Result<T, RegistryError>, status: StatusCode) -> schema::UnitBatchResult {
    let (code, message) = match result {
        Ok(_) => (status, String::new()),
        Err(err) => unit_error("unit batch", name, err),
    };
    schema::UnitBatchResult { name: name.to_string(), code: code.as_u16(), message }
}

/// A batch's answer for a name [`check_unit_name`] refused.
fn refused_name(name: &str, refused: NameRefused) -> schema::UnitBatchResult {
    let NameRefused { status, message } = refused;
    schema::UnitBatchResult { name: name.to_string(), code: status.as_u16(), message: message.into_owned() }
}

/// A unit to store: its name, canonical text, hash, desired state and store options.
struct ToStore {
    name: String,
    text: String,
    hash: String,
    desired: JobState,
    options: StoreOptions,
}

impl ToStore {
    fn put(&self) -> PutUnit<'_> {
        let StoreOptions { reschedule, no_restart } = self.options;
        PutUnit { name: &self.name, text: &self.text, hash: &self.hash, desired: self.desired, reschedule, no_restart }
    }
}

/// A put decided against the stored unit in `snapshot` ([`wire::decide_put`]): refused (with the unit's name), a
/// unit file to store, or a desired state to set.
enum Prepared {
    Rejected(String, ApiError),
    Store(ToStore),
    SetDesired(String, JobState),
    /// A replace that the new version's update policy makes a rollout ([`wire::put_rolls_out`]).
    Roll(schema::RolloutRequest),
}

fn prepare_put(snapshot: &Snapshot, unit: schema::Unit) -> Prepared {
    let existing = snapshot.unit(&unit.name);
    let existing_hash = existing.as_ref().map(|v| v.hash.to_string());
    let stored_desired = existing.as_ref().map(|v| v.desired);
    match api_rules::decide_put(&unit, existing_hash.as_deref()) {
        Err(err) => Prepared::Rejected(unit.name, err),
        Ok(action) if api_rules::put_rolls_out(&unit, &action, stored_desired) => {
            Prepared::Roll(schema::RolloutRequest {
                kind: fleet_core::rollout::RolloutKind::Replace,
                units: vec![schema::RolloutRequestUnit { name: unit.name, options: unit.options }],
                ..schema::RolloutRequest::default()
            })
        }
        Ok(action @ (PutAction::Create(desired) | PutAction::Replace(desired))) => {
            let options = StoreOptions::of(&unit, &action);
            let file = UnitFile::from_options(unit.options);
            let (text, hash) = (file.canonical(), file.hash().to_hex());
            Prepared::Store(ToStore { name: unit.name, text, hash, desired, options })
        }
        Ok(PutAction::SetDesired(state)) => Prepared::SetDesired(unit.name, state),
    }
}

impl Api {
    /// `POST /units-batch`: every `put` decided against the registry view as the request found it (as
    /// [`Api::put_unit`] decides one), then all creations and replacements written, then all desired states, then
    /// all destroys; one answer per write. Waits until the view shows every write (read-your-writes).
    pub(super) async fn unit_batch(&self, request: &Request<Bytes>) -> Response<Bytes> {
        if let Err(err) = check_content_type(request) {
            return reply::refused(&err);
        }
        let batch: schema::UnitBatch = match serde_json::from_slice(request.body()) {
            Ok(batch) => batch,
            Err(err) => return bad_request(format!("unable to decode body: {err}")),
        };
        let puts = batch.put.len();
        let mut results: Vec<Option<schema::UnitBatchResult>> = (0..puts + batch.destroy.len()).map(|_| None).collect();
        let snapshot = self.snapshot();
        let mut stores = Vec::new();
        let mut desired_changes = Vec::new();
        let mut rolls = Vec::new();
        for (index, unit) in batch.put.into_iter().enumerate() {
            match prepare_put(&snapshot, unit) {
                Prepared::Rejected(name, err) => {
                    let message = err.message;
                    results[index] = Some(schema::UnitBatchResult { name, code: err.status.as_u16(), message });
                }
                Prepared::Store(store) => stores.push((index, store)),
                Prepared::Roll(request) => rolls.push((index, request)),
                Prepared::SetDesired(name, state) => desired_changes.push((index, name, state)),
            }
        }
        let taken: Vec<String> = snapshot.rollout_records().keys().map(|k| k.to_string()).collect();
        drop(snapshot);
        for (index, request) in rolls {
            let name = request.units.first().map(|u| u.name.clone()).unwrap_or_default();
            let id = api_rules::unused_rollout_id(&name, fleet_core::model::now_ms(), &taken);
            let (code, message) = match self.store_rollout(&id, &request).await {
                Ok(_) => (StatusCode::CREATED.as_u16(), String::new()),
                Err(response) => (response.status().as_u16(), error_message(&response)),
            };
            results[index] = Some(schema::UnitBatchResult { name, code, message });
        }
        let mut revision = 0;
        let writes: Vec<PutUnit<'_>> = stores.iter().map(|(_, s)| s.put()).collect();
        for ((index, store), written) in stores.iter().zip(self.writer().put_units(&writes).await) {
            revision = revision.max(written.as_ref().ok().and_then(|w| w.revision()).unwrap_or(0));
            results[*index] = Some(batch_result(&store.name, &written, StatusCode::CREATED));
        }
        let changes: Vec<(&str, JobState)> = desired_changes.iter().map(|(_, n, s)| (n.as_str(), *s)).collect();
        for ((index, name, _), written) in desired_changes.iter().zip(self.writer().set_desired_many(&changes).await) {
            revision = revision.max(*written.as_ref().unwrap_or(&0));
            results[*index] = Some(batch_result(name, &written, StatusCode::NO_CONTENT));
        }
        // A destroy's name is decided as `DELETE /units/<name>` decides it: one no unit can have finds nothing.
        let mut names: Vec<(usize, &str)> = Vec::with_capacity(batch.destroy.len());
        for (i, name) in batch.destroy.iter().enumerate() {
            match check_unit_name(name, NameUse::Finds, NO_UNIT) {
                Ok(()) => names.push((puts + i, name)),
                Err(refused) => results[puts + i] = Some(refused_name(name, refused)),
            }
        }
        let to_destroy: Vec<&str> = names.iter().map(|&(_, name)| name).collect();
        for ((index, name), destroyed) in names.iter().zip(self.writer().destroy_units(&to_destroy).await) {
            revision = revision.max(destroyed.as_ref().map_or(0, |d| d.revision));
            results[*index] = Some(batch_result(name, &destroyed, StatusCode::NO_CONTENT));
        }
        tracing::info!(stored = stores.len(), desired = changes.len(), destroyed = to_destroy.len(), "unit batch");
        if revision > 0 {
            if let Err(response) = self.settle(revision).await {
                return response;
            }
        }
        let results = results.into_iter().map(|r| r.expect("every write of the batch has a result")).collect();
        reply::json(&schema::UnitBatchReply { results })
    }
}

/// The message of an error answer (`{"error":{"message":...}}`), empty if it has none.
fn error_message(response: &Response<Bytes>) -> String {
    serde_json::from_slice::<schema::ErrorBody>(response.body()).map(|b| b.error.message).unwrap_or_default()
}

/// Exactly one `Content-Type` whose media type is `application/json` (spec §8.6 step 1).
fn check_content_type<B>(request: &Request<B>) -> Result<(), ApiError> {
    let values: Vec<_> = request.headers().get_all(http::header::CONTENT_TYPE).iter().collect();
    if values.len() != 1 {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("expected 1 Content-Type, got {}", values.len()),
        ));
    }
    let media = values[0].to_str().unwrap_or("").split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "only acceptable Content-Type is application/json",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_types(types: &[&str]) -> Request<()> {
        let mut builder = Request::builder();
        for t in types {
            builder = builder.header(http::header::CONTENT_TYPE, *t);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn content_type_rules() {
        assert!(check_content_type(&with_types(&["application/json"])).is_ok());
        assert!(check_content_type(&with_types(&["application/json; charset=utf-8"])).is_ok());
        let none = reply::refused(&check_content_type(&with_types(&[])).unwrap_err());
        assert_eq!(none.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(none.body(), &Bytes::from(r#"{"error":{"code":415,"message":"expected 1 Content-Type, got 0"}}"#));
        let text = check_content_type(&with_types(&["text/plain"])).unwrap_err();
        assert_eq!(text.message, "only acceptable Content-Type is application/json");
    }
}

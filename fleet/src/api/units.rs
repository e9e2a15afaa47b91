//! `/fleet/v1/units` (spec §8.6): list, get, create/replace/set desired state, destroy. Unlike the original, every
//! path validates desired states and options and refuses to activate templates (bugs B9).

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::handler::{Api, internal};
use super::query;
use super::reply::{self, ApiError};
use crate::model::JobState;
use crate::registry::{PutUnit, RegistryError, UnitView};
use crate::schema;
use crate::unit::{NameInfo, Requirements, UnitFile, validate_name, validate_options};

/// The API form of one readable unit; `None` when its body does not parse (invisible, spec §3.2).
fn wire_unit(view: &UnitView<'_>, single: bool) -> Option<schema::Unit> {
    let file = match UnitFile::parse(view.body) {
        Ok(file) => file,
        Err(err) => {
            tracing::warn!(unit = %view.name, hash = %view.hash, error = %err, "stored unit body does not parse");
            return None;
        }
    };
    let global = Requirements::of(&file, view.name).global;
    let (current_state, machine_id) = match (global, single) {
        (true, true) => (String::new(), String::new()),
        (true, false) => (JobState::Inactive.to_string(), String::new()),
        (false, _) => (view.current.to_string(), view.target.unwrap_or_default().to_string()),
    };
    Some(schema::Unit {
        current_state,
        desired_state: view.desired.to_string(),
        machine_id,
        name: view.name.to_string(),
        options: file.into_options(),
    })
}

fn bad_request(message: impl std::fmt::Display) -> Response<Bytes> {
    ApiError::bad_request(message).response()
}

fn parse_state(text: &str) -> Result<JobState, ApiError> {
    text.parse::<JobState>().map_err(|_| {
        ApiError::bad_request(format!("invalid desiredState {text:?}: expected one of inactive, loaded, launched"))
    })
}

fn refuse_template_activation(name: &str, state: JobState) -> Result<(), ApiError> {
    if state != JobState::Inactive && NameInfo::parse(name).is_some_and(|i| i.is_template()) {
        return Err(ApiError::bad_request(format!("cannot activate template {name:?}")));
    }
    Ok(())
}

impl Api {
    pub(super) fn list_units(&self, query_text: Option<&str>) -> Response<Bytes> {
        let pairs = query::pairs(query_text);
        let page = match self.page(&query::values(&pairs, "nextPageToken").collect::<Vec<_>>()) {
            Ok(page) => page,
            Err(err) => return err.response(),
        };
        let snapshot = self.snapshot();
        let units: Vec<schema::Unit> = snapshot.units().filter_map(|v| wire_unit(&v, false)).collect();
        let (items, next) = page.slice(&units);
        reply::json(&schema::UnitPage {
            units: items.to_vec(),
            next_page_token: next.map(|t| t.encode()).unwrap_or_default(),
        })
    }

    pub(super) fn get_unit(&self, name: &str) -> Response<Bytes> {
        let snapshot = self.snapshot();
        match snapshot.unit(name).and_then(|v| wire_unit(&v, true)) {
            Some(unit) => reply::json(&unit),
            None => reply::error(StatusCode::NOT_FOUND, "unit does not exist"),
        }
    }

    pub(super) async fn delete_unit(&self, name: &str) -> Response<Bytes> {
        match self.registry.destroy_unit(name).await {
            Ok(destroyed) => {
                self.settle(destroyed.revision).await;
                reply::status(StatusCode::NO_CONTENT)
            }
            Err(RegistryError::UnitNotFound { .. }) => reply::error(StatusCode::NOT_FOUND, "unit does not exist"),
            Err(err) => internal("destroy unit", &err),
        }
    }

    /// The decision procedure of spec §8.6, steps 1–8.
    pub(super) async fn put_unit(&self, path_name: &str, request: &Request<Bytes>) -> Response<Bytes> {
        if let Err(err) = check_content_type(request) {
            return err.response();
        }
        let body: schema::Unit = match serde_json::from_slice(request.body()) {
            Ok(body) => body,
            Err(err) => return bad_request(format!("unable to decode body: {err}")),
        };
        let name = if body.name.is_empty() { path_name } else { body.name.as_str() };
        if name != path_name {
            return bad_request(format!("name in URL {path_name:?} differs from unit name in request body {name:?}"));
        }
        if let Err(err) = validate_name(name) {
            return bad_request(err);
        }
        let requested = if body.desired_state.is_empty() {
            None
        } else {
            match parse_state(&body.desired_state) {
                Ok(state) => Some(state),
                Err(err) => return err.response(),
            }
        };
        let existing_hash = self.snapshot().unit(name).map(|v| v.hash.to_string());

        if !body.options.is_empty() {
            let file = UnitFile::from_options(body.options);
            let hash = file.hash().to_hex();
            if existing_hash.as_deref() != Some(hash.as_str()) {
                return self.store(name, &file, &hash, requested.unwrap_or(JobState::Inactive)).await;
            }
        } else if existing_hash.is_none() {
            return reply::error(StatusCode::CONFLICT, "unit does not exist and options field empty");
        }
        let Some(state) = requested else {
            return reply::error(StatusCode::CONFLICT, "must provide DesiredState to update existing unit");
        };
        if let Err(err) = refuse_template_activation(name, state) {
            return err.response();
        }
        match self.registry.set_desired(name, state).await {
            Ok(revision) => {
                self.settle(revision).await;
                reply::status(StatusCode::NO_CONTENT)
            }
            Err(RegistryError::UnitNotFound { .. }) => reply::error(StatusCode::NOT_FOUND, "unit does not exist"),
            Err(err) => internal("set desired state", &err),
        }
    }

    /// Creates or replaces `name` with `file` (spec §8.6 steps 6–7), validating it first.
    async fn store(&self, name: &str, file: &UnitFile, hash: &str, desired: JobState) -> Response<Bytes> {
        if let Err(err) = validate_options(file) {
            return bad_request(err);
        }
        if let Err(err) = refuse_template_activation(name, desired) {
            return err.response();
        }
        let text = file.canonical();
        match self.registry.put_unit(&PutUnit { name, text: &text, hash, desired }).await {
            Ok(write) => {
                if let Some(revision) = write.revision() {
                    self.settle(revision).await;
                }
                tracing::info!(unit = %name, hash = %&hash[..7.min(hash.len())], %desired, "stored unit");
                reply::status(StatusCode::CREATED)
            }
            Err(err) => internal("store unit", &err),
        }
    }
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
        let none = check_content_type(&with_types(&[])).unwrap_err().response();
        assert_eq!(none.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(none.body(), &Bytes::from(r#"{"error":{"code":415,"message":"expected 1 Content-Type, got 0"}}"#));
        let text = check_content_type(&with_types(&["text/plain"])).unwrap_err();
        assert_eq!(text.message, "only acceptable Content-Type is application/json");
    }

    #[test]
    fn templates_cannot_be_activated() {
        assert!(refuse_template_activation("hello@.service", JobState::Inactive).is_ok());
        assert!(refuse_template_activation("hello@1.service", JobState::Launched).is_ok());
        let err = refuse_template_activation("hello@.service", JobState::Loaded).unwrap_err();
        assert_eq!(err.message, r#"cannot activate template "hello@.service""#);
    }

    #[test]
    fn unknown_desired_states_are_refused() {
        assert_eq!(parse_state("launched").unwrap(), JobState::Launched);
        assert_eq!(parse_state("bogus").unwrap_err().status, StatusCode::BAD_REQUEST);
    }
}

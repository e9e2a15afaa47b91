//! `/fleet/v1/rollouts` (an extension of this implementation, issue 12): start a rolling replace or restart
//! (`PUT /rollouts/<id>`), list and show rollouts, and pause, resume or abort one (`PATCH /rollouts/<id>`). The
//! decision is the pure [`wire::decide_rollout`]; the engine leader drives what is stored.
//!
//! `GET /rollouts/<id>?waitRevision=N[&waitMs=M]` is a change wait (as etcd v2's `?wait=true&waitIndex=`): it
//! answers as soon as the rollout's `revision` is above `N` (or it is gone), else after `M` ms with the rollout as
//! it is, so a client follows a rollout without polling.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::handler::{Api, internal};
use super::query;
use super::reply;
use fleet_core::api_rules;
use fleet_core::rollout::Control;
use fleet_core::schema;
use fleet_registry::{RegistryError, RolloutBody};

impl Api {
    pub(super) fn list_rollouts(&self) -> Response<Bytes> {
        let rollouts = api_rules::stored_rollouts(&self.snapshot());
        reply::json(&schema::RolloutList { rollouts })
    }

    pub(super) async fn get_rollout(&self, id: &str, query: Option<&str>) -> Response<Bytes> {
        let wait = match change_wait(query) {
            Ok(wait) => wait,
            Err(message) => return reply::error(StatusCode::BAD_REQUEST, &message),
        };
        if let Some(ChangeWait { after, limit }) = wait {
            let what = format!("rollout {id:?} to change after revision {after}");
            let changed = |s: &fleet_registry::Snapshot| match s.rollout_records().get(id) {
                Some(record) if record.revision <= after => None,
                _ => Some(()),
            };
            // Running out of time is an answer too: the rollout as it is, for the client to wait again.
            let _ = self.reflector().wait_for(limit, &what, changed).await;
        }
        match self.snapshot().rollout_records().get(id).and_then(|record| api_rules::stored_rollout(id, record)) {
            Some(r) => reply::json(&r),
            None => reply::error(StatusCode::NOT_FOUND, super::route::NO_ROLLOUT),
        }
    }

    pub(super) async fn put_rollout(&self, id: &str, request: &Request<Bytes>) -> Response<Bytes> {
        let body: schema::RolloutRequest = match serde_json::from_slice(request.body()) {
            Ok(body) => body,
            Err(err) => return reply::error(StatusCode::BAD_REQUEST, &format!("unable to decode body: {err}")),
        };
        match self.store_rollout(id, &body).await {
            Ok(created) => {
                let mut response = reply::json(&created);
                *response.status_mut() = StatusCode::CREATED;
                response
            }
            Err(response) => response,
        }
    }

    /// Decides and stores a new rollout (a `PUT /rollouts/<id>`, or a unit `PUT` that its update policy makes
    /// one): the rollout as created, or the error answer.
    pub(super) async fn store_rollout(
        &self,
        id: &str,
        body: &schema::RolloutRequest,
    ) -> Result<schema::Rollout, Response<Bytes>> {
        let snapshot = self.snapshot();
        let plan = match api_rules::decide_rollout(id, body, &snapshot, fleet_core::model::now_ms()) {
            Ok(plan) => plan,
            Err(err) => return Err(reply::refused(&err)),
        };
        let bodies: Vec<RolloutBody<'_>> = plan
            .bodies
            .iter()
            .map(|(name, text, revision)| RolloutBody {
                unit: plan.spec.unit(name).expect("bodies are made for the spec's units"),
                text,
                object_revision: *revision,
                object: snapshot.unit_record(name).and_then(|r| r.object()),
            })
            .collect();
        match self.registry.create_rollout(&plan.spec, &bodies, plan.cordon.as_ref()).await {
            Ok(revision) => {
                tracing::info!(rollout = %id, kind = ?plan.spec.kind, units = plan.spec.units.len(),
                    policy = %plan.spec.policy, "stored rollout");
                self.settle(revision).await?;
                let stored =
                    fleet_core::rollout::Rollout { spec: plan.spec, control: Control::default(), progress: None };
                Ok(schema::Rollout { revision, ..api_rules::rollout(&stored) })
            }
            Err(RegistryError::RolloutExists { .. }) => Err(reply::refused(&api_rules::rollout_exists(id))),
            Err(err @ (RegistryError::UnitChanged { .. } | RegistryError::CordonChanged { .. })) => {
                Err(reply::error(StatusCode::CONFLICT, &err.to_string()))
            }
            Err(err) => Err(internal("store rollout", &err)),
        }
    }

    pub(super) async fn patch_rollout(&self, id: &str, request: &Request<Bytes>) -> Response<Bytes> {
        let body: schema::RolloutControl = match serde_json::from_slice(request.body()) {
            Ok(body) => body,
            Err(err) => return reply::error(StatusCode::BAD_REQUEST, &format!("unable to decode body: {err}")),
        };
        let record = match api_rules::changeable_rollout(id, self.snapshot().rollout_records().get(id)) {
            Ok(record) => record,
            Err(err) => return reply::refused(&err),
        };
        let control = match api_rules::decide_control(&record, body) {
            Ok(control) => control,
            Err(err) => return reply::refused(&err),
        };
        match self.registry.set_rollout_control(id, &control).await {
            Ok(revision) => {
                tracing::info!(rollout = %id, action = body.action.as_str(), "rollout control");
                if let Err(response) = self.settle(revision).await {
                    return response;
                }
                reply::status(StatusCode::NO_CONTENT)
            }
            Err(RegistryError::RolloutNotFound { .. }) => reply::error(StatusCode::NOT_FOUND, super::route::NO_ROLLOUT),
            Err(err) => internal("control rollout", &err),
        }
    }
}

/// The longest a change wait holds a request; a longer `waitMs` is cut to it.
pub const MAX_CHANGE_WAIT: Duration = Duration::from_secs(60);
/// How long a change wait holds a request without `waitMs`.
pub const DEFAULT_CHANGE_WAIT: Duration = Duration::from_secs(10);

/// A change wait a `GET /rollouts/<id>` asks for: answer once the rollout's revision is above `after`, or after
/// `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeWait {
    pub after: i64,
    pub limit: Duration,
}

/// The change wait in `query` (`waitRevision`, `waitMs`), `None` without `waitRevision`, or what is wrong with it.
pub fn change_wait(query: Option<&str>) -> Result<Option<ChangeWait>, String> {
    let pairs = query::pairs(query);
    let one = |key: &str| -> Result<Option<u64>, String> {
        let values: Vec<&str> = query::values(&pairs, key).collect();
        match values[..] {
            [] => Ok(None),
            [text] => text
                .parse::<u64>()
                .map(Some)
                .map_err(|_| format!("{key} must be a whole number of at least 0, got {text:?}")),
            _ => Err(format!("{key} given {} times", values.len())),
        }
    };
    let (revision, wait_ms) = (one("waitRevision")?, one("waitMs")?);
    match (revision, wait_ms) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err("waitMs needs waitRevision (the revision of the rollout last seen)".to_string()),
        (Some(after), wait_ms) => Ok(Some(ChangeWait {
            after: i64::try_from(after).unwrap_or(i64::MAX),
            limit: wait_ms.map_or(DEFAULT_CHANGE_WAIT, Duration::from_millis).min(MAX_CHANGE_WAIT),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_wait_is_asked_for_with_a_revision() {
        assert_eq!(change_wait(None), Ok(None));
        assert_eq!(change_wait(Some("alt=json")), Ok(None));
        assert_eq!(
            change_wait(Some("alt=json&waitRevision=41")),
            Ok(Some(ChangeWait { after: 41, limit: DEFAULT_CHANGE_WAIT }))
        );
        assert_eq!(
            change_wait(Some("waitRevision=7&waitMs=1500")),
            Ok(Some(ChangeWait { after: 7, limit: Duration::from_millis(1500) }))
        );
        assert_eq!(
            change_wait(Some("waitRevision=7&waitMs=86400000")),
            Ok(Some(ChangeWait { after: 7, limit: MAX_CHANGE_WAIT }))
        );
    }

    #[test]
    fn a_malformed_change_wait_is_refused_by_name() {
        let err = change_wait(Some("waitRevision=-1")).unwrap_err();
        assert!(err.contains("waitRevision") && err.contains("\"-1\""), "{err}");
        let err = change_wait(Some("waitRevision=3&waitMs=soon")).unwrap_err();
        assert!(err.contains("waitMs") && err.contains("soon"), "{err}");
        let err = change_wait(Some("waitMs=100")).unwrap_err();
        assert!(err.contains("needs waitRevision"), "{err}");
        let err = change_wait(Some("waitRevision=1&waitRevision=2")).unwrap_err();
        assert!(err.contains("given 2 times"), "{err}");
    }
}

//! `/fleet/v1/rollouts` (an extension of this implementation, issue 12): start a rolling replace or restart
//! (`PUT /rollouts/<id>`), list and show rollouts, and pause, resume or abort one (`PATCH /rollouts/<id>`). The
//! decision is the pure [`wire::decide_rollout`]; the engine leader drives what is stored.

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::handler::{Api, internal};
use super::reply;
use crate::registry::{RegistryError, RolloutBody};
use crate::rollout::Control;
use crate::schema;
use crate::wire;

impl Api {
    pub(super) fn list_rollouts(&self) -> Response<Bytes> {
        let rollouts = self.snapshot().rollouts().iter().map(wire::rollout).collect();
        reply::json(&schema::RolloutList { rollouts })
    }

    pub(super) fn get_rollout(&self, id: &str) -> Response<Bytes> {
        match self.snapshot().rollout_records().get(id).and_then(|r| r.rollout()) {
            Some(r) => reply::json(&wire::rollout(&r)),
            None => reply::error(StatusCode::NOT_FOUND, "rollout does not exist"),
        }
    }

    pub(super) async fn put_rollout(&self, id: &str, request: &Request<Bytes>) -> Response<Bytes> {
        let body: schema::RolloutRequest = match serde_json::from_slice(request.body()) {
            Ok(body) => body,
            Err(err) => return reply::error(StatusCode::BAD_REQUEST, &format!("unable to decode body: {err}")),
        };
        let snapshot = self.snapshot();
        let plan = match wire::decide_rollout(id, &body, &snapshot, crate::model::now_ms()) {
            Ok(plan) => plan,
            Err(err) => return err.response(),
        };
        let bodies: Vec<RolloutBody<'_>> = plan
            .bodies
            .iter()
            .map(|(name, text, revision)| RolloutBody {
                unit: plan.spec.unit(name).expect("bodies are made for the spec's units"),
                text,
                object_revision: *revision,
                object: snapshot.unit_record(name).and_then(|r| r.object.as_ref()),
            })
            .collect();
        match self.registry.create_rollout(&plan.spec, &bodies).await {
            Ok(revision) => {
                tracing::info!(rollout = %id, kind = ?plan.spec.kind, units = plan.spec.units.len(), "stored rollout");
                self.settle(revision).await;
                let stored = crate::rollout::Rollout { spec: plan.spec, control: Control::default(), progress: None };
                let mut response = reply::json(&wire::rollout(&stored));
                *response.status_mut() = StatusCode::CREATED;
                response
            }
            Err(RegistryError::RolloutExists { .. }) => {
                reply::error(StatusCode::CONFLICT, &format!("rollout {id:?} already exists"))
            }
            Err(err @ RegistryError::UnitChanged { .. }) => reply::error(StatusCode::CONFLICT, &err.to_string()),
            Err(err) => internal("store rollout", &err),
        }
    }

    pub(super) async fn patch_rollout(&self, id: &str, request: &Request<Bytes>) -> Response<Bytes> {
        let body: schema::RolloutControl = match serde_json::from_slice(request.body()) {
            Ok(body) => body,
            Err(err) => return reply::error(StatusCode::BAD_REQUEST, &format!("unable to decode body: {err}")),
        };
        let Some(record) = self.snapshot().rollout_records().get(id).and_then(|r| r.rollout()) else {
            return reply::error(StatusCode::NOT_FOUND, "rollout does not exist");
        };
        let control = match wire::decide_control(&record, body.action) {
            Ok(control) => control,
            Err(err) => return err.response(),
        };
        match self.registry.set_rollout_control(id, &control).await {
            Ok(revision) => {
                tracing::info!(rollout = %id, action = body.action.as_str(), "rollout control");
                self.settle(revision).await;
                reply::status(StatusCode::NO_CONTENT)
            }
            Err(RegistryError::RolloutNotFound { .. }) => reply::error(StatusCode::NOT_FOUND, "rollout does not exist"),
            Err(err) => internal("control rollout", &err),
        }
    }
}

//! `/fleet/v1/machines` (spec §8.8): the present machines, and metadata changes by PATCH; and
//! `/fleet/v1/machines/<id>/cordon` (issue 38, an extension): cordon (`PUT`) and uncordon (`DELETE`).

use bytes::Bytes;
use http::{Response, StatusCode};

use super::handler::{Api, internal};
use super::query;
use super::reply;
use fleet_core::api_rules::{self, CordonAction};
use fleet_core::schema::{Machine, MachineMetadataOp, MachinePage};
use fleet_registry::{Component, Cordon, check_component};

/// One validated PATCH operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataChange {
    Set { machine: String, key: String, value: String },
    Remove { machine: String, key: String },
}

/// Validates every operation before any is applied (spec §8.8 step 2).
pub fn validate_ops(ops: &[MachineMetadataOp]) -> Result<Vec<MetadataChange>, &'static str> {
    ops.iter()
        .map(|op| {
            if !matches!(op.op.as_str(), "add" | "remove" | "replace") {
                return Err("invalid op: expect add, remove, or replace");
            }
            let (machine, key) = parse_metadata_path(&op.path).ok_or("machine metadata path invalid")?;
            if op.op == "remove" {
                return Ok(MetadataChange::Remove { machine, key });
            }
            match op.value.as_ref().map(|v| v.value.as_str()) {
                Some(value) if !value.is_empty() => Ok(MetadataChange::Set { machine, key, value: value.into() }),
                _ => Err("invalid value: add and replace require a value"),
            }
        })
        .collect()
}

/// `^/([^/]+)/metadata/([A-Za-z0-9_.-]+$)`, and a machine ID the registry can hold: one with a control character
/// (which the original's `[^/]+` let through) is refused here with the other bad paths, before any operation is
/// applied, rather than failing in the registry after the earlier ones were (issue 37).
fn parse_metadata_path(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix('/')?;
    let (machine, key) = rest.split_once("/metadata/")?;
    let key_ok = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    let machine_ok = check_component(Component::MachineId, machine).is_ok();
    (machine_ok && key_ok).then(|| (machine.to_string(), key.to_string()))
}

impl Api {
    pub(super) fn list_machines(&self, query_text: Option<&str>) -> Response<Bytes> {
        let pairs = query::pairs(query_text);
        let page = match self.page(&query::values(&pairs, "nextPageToken").collect::<Vec<_>>()) {
            Ok(page) => page,
            Err(err) => return reply::refused(&err),
        };
        let machines: Vec<Machine> = self.snapshot().machines().map(api_rules::machine).collect();
        let (items, next) = page.slice(&machines);
        reply::json(&MachinePage {
            machines: items.to_vec(),
            next_page_token: next.map(|t| t.encode()).unwrap_or_default(),
        })
    }

    pub(super) async fn patch_machines(&self, body: &Bytes) -> Response<Bytes> {
        let ops: Vec<MachineMetadataOp> = match serde_json::from_slice(body) {
            Ok(ops) => ops,
            Err(err) => return reply::error(StatusCode::BAD_REQUEST, &err.to_string()),
        };
        let changes = match validate_ops(&ops) {
            Ok(changes) => changes,
            Err(message) => return reply::error(StatusCode::BAD_REQUEST, message),
        };
        let mut last_revision = None;
        for change in changes {
            let result = match &change {
                MetadataChange::Set { machine, key, value } => self.registry.set_metadata(machine, key, value).await,
                MetadataChange::Remove { machine, key } => self.registry.remove_metadata(machine, key).await,
            };
            match result {
                Ok(revision) => last_revision = Some(revision),
                Err(err) => {
                    tracing::error!(?change, error = %err, "metadata change failed");
                    return internal("patch machine metadata", &err);
                }
            }
        }
        if let Some(revision) = last_revision {
            if let Err(response) = self.settle(revision).await {
                return response;
            }
        }
        reply::no_content_json()
    }

    /// `PUT` (`cordon`) or `DELETE` of `/machines/<id>/cordon` (issue 38), decided by
    /// [`api_rules::decide_cordon`]: `204` once the view shows it, also when there was nothing to change;
    /// `404 machine does not exist` for an unknown machine.
    pub(super) async fn cordon_machine(&self, id: &str, cordon: bool) -> Response<Bytes> {
        match api_rules::decide_cordon_in(&self.snapshot(), id, cordon) {
            Err(err) => reply::refused(&err),
            Ok(CordonAction::Unchanged) => reply::no_content_json(),
            Ok(CordonAction::Write) => {
                let written = if cordon {
                    self.registry.cordon(id, &Cordon { since_ms: fleet_core::model::now_ms() }).await
                } else {
                    self.registry.uncordon(id).await
                };
                match written {
                    Ok(revision) => {
                        tracing::info!(machine = %id, cordon, "machine cordon changed");
                        match self.settle(revision).await {
                            Ok(()) => reply::no_content_json(),
                            Err(response) => response,
                        }
                    }
                    Err(err) => internal(if cordon { "cordon machine" } else { "uncordon machine" }, &err),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(json: &str) -> Vec<MachineMetadataOp> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn valid_operations_of_spec_8_8() {
        let changes = validate_ops(&ops(r#"[{"op":"add","path":"/m0/metadata/foo","value":{"value":"bar"}},
                {"op":"replace","path":"/m1/metadata/ping","Value":{"value":"splat"}},
                {"op":"remove","path":"/m1/metadata/gone"}]"#))
        .unwrap();
        assert_eq!(
            changes,
            vec![
                MetadataChange::Set { machine: "m0".into(), key: "foo".into(), value: "bar".into() },
                MetadataChange::Set { machine: "m1".into(), key: "ping".into(), value: "splat".into() },
                MetadataChange::Remove { machine: "m1".into(), key: "gone".into() },
            ]
        );
    }

    #[test]
    fn invalid_operations_of_spec_8_8() {
        assert_eq!(
            validate_ops(&ops(r#"[{"op":"noop","path":"/m/metadata/a"}]"#)),
            Err("invalid op: expect add, remove, or replace")
        );
        assert_eq!(
            validate_ops(&ops(r#"[{"op":"add","path":"/m/foo","value":{"value":"x"}}]"#)),
            Err("machine metadata path invalid")
        );
        assert_eq!(
            validate_ops(&ops(r#"[{"op":"add","path":"/m/metadata/a b","value":{"value":"x"}}]"#)),
            Err("machine metadata path invalid")
        );
        assert_eq!(
            validate_ops(&ops(r#"[{"op":"add","path":"/m/metadata/a"}]"#)),
            Err("invalid value: add and replace require a value")
        );
        // Issue 37: a machine ID the registry cannot hold is a bad path, refused before any operation applies.
        assert_eq!(
            validate_ops(&ops(
                r#"[{"op":"remove","path":"/m1/metadata/a"},{"op":"remove","path":"/m\u007f1/metadata/k"}]"#
            )),
            Err("machine metadata path invalid")
        );
        assert_eq!(
            validate_ops(&ops(r#"[{"op":"remove","path":"/\u0000/metadata/k"}]"#)),
            Err("machine metadata path invalid")
        );
        assert!(
            serde_json::from_str::<Vec<MachineMetadataOp>>(r#"[{"op":"add","path":"/m/metadata/zone","value":"z1"}]"#)
                .is_err()
        );
    }
}

//! Machines: presence in `list-machines` and the machines API (list, pagination token, metadata PATCH).

use serde_json::{Value, json};

use super::scheduling::{other_slot, stop_fleet};
use crate::check::ensure_eq;
use crate::{Ctx, Outcome};

/// GET /fleet/v1/machines answers 200 with JSON listing the machine.
pub async fn list(ctx: Ctx) -> Outcome {
    ctx.wait_api(1).await?;
    let r = ctx.http(1, "GET", "/fleet/v1/machines", None).await?;
    ctx.ensure(r.status == 200 && r.is_json(), || format!("expected 200 JSON, observed {}", r.describe()))?;
    let id = ctx.id(1)?;
    let listed = r.json()["machines"].as_array().is_some_and(|ms| ms.iter().any(|m| m["id"] == id.as_str()));
    ctx.ensure(listed, || format!("expected machine {id} in {}", r.body))
}

/// A page token with the wrong limit is a 400 with a JSON error body.
pub async fn bad_token(ctx: Ctx) -> Outcome {
    ctx.wait_api(1).await?;
    let r = ctx.http(1, "GET", "/fleet/v1/machines?nextPageToken=EwBMLg==", None).await?;
    ctx.ensure(r.status == 400 && r.is_json(), || format!("expected 400 JSON, observed {}", r.describe()))?;
    ensure_eq("error.code", Some(400), r.json().pointer("/error/code").and_then(Value::as_i64))
}

/// The machines of GET /fleet/v1/machines by ID.
async fn machines_by_id(ctx: &Ctx) -> Result<std::collections::BTreeMap<String, Value>, String> {
    let r = ctx.http(1, "GET", "/fleet/v1/machines", None).await?;
    ctx.ensure(r.status == 200, || format!("GET machines: {}", r.describe()))?;
    let ms = r.json()["machines"].as_array().cloned().unwrap_or_default();
    Ok(ms.into_iter().map(|m| (m["id"].as_str().unwrap_or_default().to_string(), m)).collect())
}

async fn patch(ctx: &Ctx, body: &Value) -> Outcome {
    let r = ctx.http(1, "PATCH", "/fleet/v1/machines", Some(&body.to_string())).await?;
    ctx.ensure(r.status == 204 && r.is_json(), || {
        format!("PATCH {body}: expected 204 with JSON content type, observed {}", r.describe())
    })
}

async fn expect_machines(ctx: &Ctx, extra: [Value; 2]) -> Outcome {
    let got = machines_by_id(ctx).await?;
    for (i, extra) in extra.into_iter().enumerate() {
        let slot = i + 1;
        let m = ctx.machine(slot)?;
        let mut metadata = json!({"hostname": m.name()});
        if let (Some(md), Some(add)) = (metadata.as_object_mut(), extra.as_object()) {
            md.extend(add.clone());
        }
        let want = json!({"id": m.id(), "primaryIP": m.ip(), "metadata": metadata});
        ensure_eq(&format!("machine m{slot}"), Some(&want), got.get(m.id()))?;
    }
    Ok(())
}

/// PATCH add and replace set metadata (both wire spellings `value` and `Value` of the nested value object).
pub async fn patch_add_modify(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    let (a, b) = (ctx.id(1)?, ctx.id(2)?);
    let body = json!([
        {"op": "add", "path": format!("/{a}/metadata/foo"), "value": {"value": "bar"}},
        {"op": "replace", "path": format!("/{b}/metadata/ping"), "Value": {"value": "splat"}},
    ]);
    patch(&ctx, &body).await?;
    expect_machines(&ctx, [json!({"foo": "bar"}), json!({"ping": "splat"})]).await
}

/// PATCH remove of keys never set leaves only the configured metadata.
pub async fn patch_delete(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    let (a, b) = (ctx.id(1)?, ctx.id(2)?);
    let body = json!([
        {"op": "remove", "path": format!("/{a}/metadata/foo")},
        {"op": "remove", "path": format!("/{b}/metadata/ping")},
    ]);
    patch(&ctx, &body).await?;
    expect_machines(&ctx, [json!({}), json!({})]).await
}

/// Bad PATCH operations are 400s with JSON error bodies naming the problem.
pub async fn patch_bad(ctx: Ctx) -> Outcome {
    ctx.wait_api(1).await?;
    let id = ctx.id(1)?;
    let cases = [
        (
            json!([{"op": "noop", "path": format!("/{id}/metadata/foo"), "value": {"value": "bar"}}]),
            "invalid op: expect add, remove, or replace",
        ),
        (
            json!([{"op": "add", "path": format!("/{id}/foo"), "value": {"value": "bar"}}]),
            "machine metadata path invalid",
        ),
        (
            json!([{"op": "add", "path": format!("/{id}/metadata/foo"), "value": {"value": ""}}]),
            "invalid value: add and replace require a value",
        ),
    ];
    for (body, message) in cases {
        let r = ctx.http(1, "PATCH", "/fleet/v1/machines", Some(&body.to_string())).await?;
        ctx.ensure(r.status == 400 && r.is_json(), || {
            format!("PATCH {body}: expected 400 JSON, observed {}", r.describe())
        })?;
        ensure_eq(&format!("error message of PATCH {body}"), Some(message.to_string()), r.error_message())?;
    }
    Ok(())
}

/// `list-machines` shows each machine's ID, address and metadata; a machine whose fleet stops leaves the list.
pub async fn list_machines(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    // The default columns, read by name.
    let out = ctx.fleetctl_ok(1, &["list-machines", "--no-legend", "--full"]).await?;
    let rows = fleet_harness::wait::parse_table(&out.stdout, &["machine", "ip", "metadata"]);
    for slot in 1..=2 {
        let m = ctx.machine(slot)?;
        let row = rows.iter().find(|r| r.get("machine") == m.id());
        let (ip, metadata) = row.map_or(("", ""), |r| (r.get("ip"), r.get("metadata")));
        ctx.ensure(row.is_some() && ip == m.ip(), || format!("a row `{} {} <metadata>`", m.id(), m.ip()))?;
        let md: Vec<&str> = metadata.split(',').collect();
        ctx.ensure(md.contains(&format!("hostname={}", m.name()).as_str()), || format!("hostname in {metadata}"))?;
        if slot == 2 {
            ctx.ensure(md.contains(&"role=b"), || format!("role=b in {metadata}"))?;
        }
    }
    stop_fleet(&ctx, 2).await?;
    let left = ctx.wait_for_n_machines(other_slot(&ctx, 2), 1).await?;
    ensure_eq("machines after m2 stopped fleet", vec![ctx.id(1)?], left)
}

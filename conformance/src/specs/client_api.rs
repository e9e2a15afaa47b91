//! The HTTP API v1 with raw requests (spec §8, transcript 13): status codes, content types, error bodies.

use serde_json::{Value, json};

use crate::check::ensure_eq;
use crate::fixtures;
use crate::http::Response;
use crate::{Ctx, Outcome};

const UNIT: &str = "/fleet/v1/units/api.service";

fn options() -> Value {
    json!([{"section": "Service", "name": "ExecStart", "value": "/bin/bash -c \"while true; do echo api; sleep 1; done\""}])
}

fn expect(ctx: &Ctx, what: &str, r: &Response, status: u16, message: Option<&str>) -> Outcome {
    ctx.ensure(r.status == status, || format!("{what}: expected HTTP {status}, observed {}", r.describe()))?;
    if let Some(m) = message {
        ctx.ensure(r.is_json(), || format!("{what}: expected a JSON error body, observed {}", r.describe()))?;
        ensure_eq(
            &format!("{what}: error.code"),
            Some(i64::from(status)),
            r.json().pointer("/error/code").and_then(Value::as_i64),
        )?;
        ensure_eq(&format!("{what}: error.message"), Some(m.to_string()), r.error_message())?;
    }
    Ok(())
}

/// PUT creates (201), changes the desired state (204), refuses what it cannot do (400/409/415); GET and DELETE
/// answer 200/204/404 as the original does.
pub async fn units_crud(ctx: Ctx) -> Outcome {
    let ctx = &ctx;
    ctx.wait_api(1).await?;
    let put = |body: Value| async move { ctx.http(1, "PUT", UNIT, Some(&body.to_string())).await };
    let r = put(json!({"name": "api.service", "desiredState": "launched", "options": options()})).await?;
    expect(ctx, "PUT new unit", &r, 201, None)?;
    let r = put(json!({"desiredState": "launched", "options": options()})).await?;
    expect(ctx, "PUT same options and state again", &r, 204, None)?;
    let r = ctx.http(1, "GET", UNIT, None).await?;
    expect(ctx, "GET unit", &r, 200, None)?;
    ctx.ensure(r.is_json(), || format!("GET unit: JSON, observed {}", r.describe()))?;
    let u = r.json();
    ensure_eq("GET unit: name", Some("api.service"), u["name"].as_str())?;
    ensure_eq("GET unit: desiredState", Some("launched"), u["desiredState"].as_str())?;
    ensure_eq("GET unit: options", &options(), &u["options"])?;
    // On a cluster of one machine that is m1; on a bigger (live) cluster whichever machine the unit landed on.
    let id = ctx
        .wait_for(
            "api.service to be launched on a machine of the cluster (GET currentState, machineID)",
            || async move {
                match ctx.http(1, "GET", UNIT, None).await {
                    Ok(r) => {
                        let u = r.json();
                        match u["machineID"].as_str() {
                            Some(id) if u["currentState"] == "launched" && ctx.slot_of(id).is_some() => {
                                fleet_harness::Check::Ready(id.to_string())
                            }
                            _ => fleet_harness::Check::NotYet(r.describe()),
                        }
                    }
                    Err(e) => fleet_harness::Check::NotYet(e),
                }
            },
        )
        .await?;
    let slot = ctx.slot_of(&id).unwrap_or(1);
    ctx.wait_systemd(slot, "api.service", "ActiveState", "active").await?;

    let r = put(json!({"desiredState": "inactive"})).await?;
    expect(ctx, "PUT desiredState inactive", &r, 204, None)?;
    ctx.wait_systemd(slot, "api.service", "LoadState", "not-found").await?;
    let r = put(json!({})).await?;
    expect(ctx, "PUT without desiredState", &r, 409, Some("must provide DesiredState to update existing unit"))?;
    let r = ctx
        .http(1, "PUT", "/fleet/v1/units/other.service", Some(&json!({"desiredState": "launched"}).to_string()))
        .await?;
    expect(ctx, "PUT unknown unit without options", &r, 409, Some("unit does not exist and options field empty"))?;
    let r = put(json!({"name": "other.service", "desiredState": "launched", "options": options()})).await?;
    expect(
        ctx,
        "PUT with another name in the body",
        &r,
        400,
        Some("name in URL \"api.service\" differs from unit name in request body \"other.service\""),
    )?;
    let r = ctx.http_with_type(1, "PUT", UNIT, Some("{}"), Some("text/plain")).await?;
    expect(ctx, "PUT text/plain", &r, 415, Some("only acceptable Content-Type is application/json"))?;
    let r = ctx.http(1, "PUT", UNIT, Some("{not json")).await?;
    ctx.ensure(r.status == 400 && r.error_message().is_some_and(|m| m.starts_with("unable to decode body")), || {
        format!("PUT bad JSON: expected 400 `unable to decode body: ...`, observed {}", r.describe())
    })?;
    let tmpl = "/fleet/v1/units/tmpl@.service";
    let r =
        ctx.http(1, "PUT", tmpl, Some(&json!({"desiredState": "inactive", "options": options()}).to_string())).await?;
    expect(ctx, "PUT template", &r, 201, None)?;
    let r = ctx.http(1, "PUT", tmpl, Some(&json!({"desiredState": "launched"}).to_string())).await?;
    expect(ctx, "PUT template launched", &r, 400, Some("cannot activate template \"tmpl@.service\""))?;

    let r = ctx.http(1, "DELETE", UNIT, None).await?;
    expect(ctx, "DELETE unit", &r, 204, None)?;
    let r = ctx.http(1, "GET", UNIT, None).await?;
    expect(ctx, "GET deleted unit", &r, 404, Some("unit does not exist"))?;
    let r = ctx.http(1, "DELETE", UNIT, None).await?;
    expect(ctx, "DELETE deleted unit", &r, 404, Some("unit does not exist"))
}

/// Unknown paths, wrong methods and bad tokens get JSON error bodies `{"error":{"code":..,"message":..}}`;
/// discovery and the legacy prefix are served.
pub async fn errors(ctx: Ctx) -> Outcome {
    let ctx = &ctx;
    ctx.wait_api(1).await?;
    let cases: [(&str, &str, u16, Option<&str>); 7] = [
        ("GET", "/fleet/v1/bogus", 404, Some("")),
        ("GET", "/fleet/v1/units/no-such.service", 404, Some("unit does not exist")),
        ("DELETE", "/fleet/v1/units/no-such.service", 404, Some("unit does not exist")),
        ("POST", "/fleet/v1/units", 405, Some("only GET supported against this resource")),
        ("POST", "/fleet/v1/machines", 405, Some("only GET and PATCH supported against this resource")),
        ("POST", "/fleet/v1/state", 405, Some("only GET supported against this resource")),
        ("POST", "/fleet/v1/discovery", 400, Some("only HTTP GET supported against this resource")),
    ];
    for (method, path, status, message) in cases {
        let r = ctx.http(1, method, path, None).await?;
        expect(ctx, &format!("{method} {path}"), &r, status, message)?;
    }
    let r = ctx.http(1, "GET", "/fleet/v1/units?nextPageToken=garbage", None).await?;
    ctx.ensure(r.status == 400 && r.is_json() && r.error_message().is_some_and(|m| !m.is_empty()), || {
        format!("GET units with a garbage token: expected 400 with a message, observed {}", r.describe())
    })?;
    let r = ctx.http(1, "GET", "/fleet/v1/discovery", None).await?;
    ctx.ensure(r.status == 200 && r.is_json() && r.json()["id"] == "fleet:v1", || {
        format!(
            "GET discovery: expected 200 JSON with id fleet:v1, observed HTTP {} ({} bytes)",
            r.status,
            r.body.len()
        )
    })?;
    ctx.ensure(r.header("server").is_some_and(|s| s.starts_with("fleetd/")), || {
        format!("Server header `fleetd/<VERSION>`, observed {:?}", r.header("server"))
    })?;
    let legacy = ctx.http(1, "GET", "/v1-alpha/machines", None).await?;
    let current = ctx.http(1, "GET", "/fleet/v1/machines", None).await?;
    ctx.ensure(legacy.status == 200 && legacy.json() == current.json(), || {
        format!("/v1-alpha/machines like /fleet/v1/machines: {} vs {}", legacy.describe(), current.describe())
    })
}

/// Unknown desired states are refused with 400 on create and on update (spec §12.2 B9; the original: 500 / stored).
pub async fn bad_desired_state(ctx: Ctx) -> Outcome {
    let ctx = &ctx;
    ctx.wait_api(1).await?;
    let r = ctx.http(1, "PUT", UNIT, Some(&json!({"desiredState": "bogus", "options": options()}).to_string())).await?;
    expect(ctx, "PUT new unit with desiredState bogus", &r, 400, None)?;
    let r =
        ctx.http(1, "PUT", UNIT, Some(&json!({"desiredState": "inactive", "options": options()}).to_string())).await?;
    expect(ctx, "PUT new unit", &r, 201, None)?;
    let r = ctx.http(1, "PUT", UNIT, Some(&json!({"desiredState": "bogus"}).to_string())).await?;
    expect(ctx, "PUT desiredState bogus", &r, 400, None)?;
    let r = ctx.http(1, "GET", "/fleet/v1/units", None).await?;
    let listed = r.json()["units"].as_array().is_some_and(|us| us.iter().any(|u| u["name"] == "api.service"));
    ctx.ensure(r.status == 200 && listed, || format!("api.service still listed: {}", r.describe()))
}

/// GET /fleet/v1/state lists a launched unit's systemd state, filtered by unitName and machineID.
pub async fn states(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 1).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path("hello.service")]).await?;
    // m1 on a cluster of one machine; on a bigger (live) cluster the machine list-units names.
    let placed = ctx.wait_for_n_active_units(1, 1).await?;
    let id = placed.get("hello.service").cloned().unwrap_or_default();
    let r = ctx.http(1, "GET", "/fleet/v1/state?unitName=hello.service", None).await?;
    ctx.ensure(r.status == 200 && r.is_json(), || format!("GET state: {}", r.describe()))?;
    let states = r.json()["states"].as_array().cloned().unwrap_or_default();
    ensure_eq("number of states of hello.service", 1, states.len())?;
    let s = &states[0];
    for (k, v) in [
        ("name", "hello.service"),
        ("machineID", id.as_str()),
        ("systemdLoadState", "loaded"),
        ("systemdActiveState", "active"),
        ("systemdSubState", "running"),
    ] {
        ensure_eq(&format!("state.{k}"), Some(v), s[k].as_str())?;
    }
    let hash = s["hash"].as_str().unwrap_or_default();
    ctx.ensure(hash.len() == 40 && hash.chars().all(|c| c.is_ascii_hexdigit()), || {
        format!("state.hash 40 hex: {hash:?}")
    })?;
    let r = ctx.http(1, "GET", "/fleet/v1/state/hello.service", None).await?;
    ctx.ensure(r.status == 200 && r.json()["name"] == "hello.service", || {
        format!("GET state/hello.service: {}", r.describe())
    })?;
    let r = ctx.http(1, "GET", "/fleet/v1/state?machineID=00000000000000000000000000000000", None).await?;
    ctx.ensure(
        r.status == 200 && r.json().get("states").is_none_or(|s| s.as_array().is_some_and(Vec::is_empty)),
        || format!("GET state for an unknown machine: empty, observed {}", r.describe()),
    )
}

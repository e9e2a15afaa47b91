//! The audit trail (issue 38), in the `fleetctl` area: every write request through the API is recorded once, with
//! who made it, what it was and how it ended; a refused write with its error; reads not at all; `history` names
//! who stored each version.
//!
//! Observations: `fleetctl audit --output=json` and its table, `fleetctl history`, and raw API requests (a refused
//! write the client would not send).

use serde_json::Value;

use crate::capabilities::Capability;
use crate::fixtures;
use crate::{Area, Ctx, Outcome, Spec, SpecFuture};

pub fn specs() -> Vec<Spec> {
    fn spec(name: &'static str, machines: usize, run: fn(Ctx) -> SpecFuture) -> Spec {
        Spec {
            name,
            area: Area::Fleetctl,
            machines,
            metadata: &[],
            requires: &[],
            needs: &[crate::Need::EmptyCluster],
            origin: "issue 38",
            run,
        }
    }
    vec![
        spec("audit_records_each_write_with_who_what_and_result_and_no_read", 1, |c| Box::pin(records_writes(c)))
            .requires(&[Capability::Audit]),
    ]
}

const UNIT: &str = "hello@1.service";

/// The records `fleetctl audit --output=json [args]` shows.
async fn audit_records(ctx: &Ctx, args: &[&str]) -> Result<Vec<Value>, String> {
    let mut all = vec!["audit", "--output=json"];
    all.extend(args);
    let out = ctx.fleetctl_ok(1, &all).await?;
    let doc: Value = serde_json::from_str(&out.stdout)
        .map_err(|e| ctx.fail(format!("fleetctl audit --output=json is not JSON ({e}): {}", out.describe())))?;
    Ok(doc["records"].as_array().cloned().unwrap_or_default())
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// A start through fleetctl is recorded (the unit, the action, a 2xx result, who); a write the API refuses is
/// recorded with its status and error; reads (fleetctl and raw GETs) add no record; `history` shows the author.
pub async fn records_writes(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 1).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(UNIT)]).await?;
    let refused = ctx.http(1, "PUT", "/fleet/v1/units/bad.service", Some(r#"{"desiredState":"running"}"#)).await?;
    ctx.ensure(refused.status == 400, || {
        format!("a PUT with desiredState running must be refused: {}", refused.describe())
    })?;

    let records = audit_records(&ctx, &[]).await?;
    let started: Vec<&Value> =
        records.iter().filter(|r| r["units"].as_array().is_some_and(|u| u.iter().any(|n| n == UNIT))).collect();
    ctx.ensure(!started.is_empty(), || {
        format!("fleetctl audit must show the start of {UNIT} (a record naming it); it shows {records:?}")
    })?;
    for r in &started {
        let status = r["status"].as_u64().unwrap_or(0);
        ctx.ensure((200..300).contains(&status) && r["error"].is_null(), || {
            format!("the writes of a successful start must be recorded as successes; observed {r}")
        })?;
        ctx.ensure(text(&r["action"]).contains(UNIT) && !text(&r["who"]["name"]).is_empty(), || {
            format!("a record says what was done to {UNIT} and who did it; observed {r}")
        })?;
        ctx.ensure(text(&r["who"]["via"]) == "tcp", || format!("fleetctl reached the API over TCP; observed {r}"))?;
    }
    let bad: Vec<&Value> = records
        .iter()
        .filter(|r| r["units"].as_array().is_some_and(|u| u.iter().any(|n| n == "bad.service")))
        .collect();
    ctx.ensure(bad.len() == 1 && bad[0]["status"] == 400 && text(&bad[0]["error"]).contains("running"), || {
        format!(
            "the refused PUT must be recorded once with status 400 and its error; records naming bad.service: {bad:?}"
        )
    })?;
    ctx.ensure(records.iter().all(|r| !matches!(text(&r["method"]), "GET" | "HEAD")), || {
        format!("reads must not be recorded; observed {records:?}")
    })?;

    ctx.fleetctl_ok(1, &["list-units"]).await?;
    ctx.fleetctl_ok(1, &["cat", UNIT]).await?;
    ctx.http(1, "GET", "/fleet/v1/units", None).await?;
    let after = audit_records(&ctx, &[]).await?;
    ctx.ensure(after.len() == records.len(), || {
        format!(
            "reads added records: {} before list-units, cat and GET /units, {} after: {after:?}",
            records.len(),
            after.len()
        )
    })?;

    let for_unit = audit_records(&ctx, &[UNIT]).await?;
    ctx.ensure(for_unit.len() == started.len(), || {
        format!("fleetctl audit {UNIT} must show the {} records naming it; it shows {for_unit:?}", started.len())
    })?;
    let table = ctx.fleetctl_ok(1, &["audit", UNIT]).await?;
    ctx.ensure(table.stdout.starts_with("TIME") && table.stdout.contains(UNIT), || {
        format!("fleetctl audit prints a TIME/WHO/ACTION/RESULT table naming {UNIT}: {}", table.describe())
    })?;
    let who = text(&started[0]["who"]["name"]).to_string();
    let history = ctx.fleetctl_ok(1, &["history", UNIT]).await?;
    ctx.ensure(history.stdout.contains("BY") && history.stdout.contains(&who), || {
        format!("fleetctl history must name who stored the version ({who}): {}", history.describe())
    })?;
    Ok(())
}

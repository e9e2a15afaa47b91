//! A secure cluster refuses what it must (issue 15): the API's TCP listener speaks only TLS, requires a client
//! certificate of the cluster's CA that is valid now, authorises it by role (`read`: GET only; `admin`: all), and
//! refuses crafted names and bodies with 4xx without writing anything. Every spec runs on a TLS cluster (the
//! `tls` capability) and checks the registry through the admin certificate afterwards.

use std::sync::Arc;

use fleet_harness::pki::{Ca, CertFiles, LeafSpec};
use serde_json::json;

use crate::check::Context;
use crate::http::Response;
use crate::{Ctx, Outcome};

const UNIT: &str = "/fleet/v1/units/secure.service";

fn unit_body() -> String {
    json!({
        "name": "secure.service",
        "desiredState": "launched",
        "options": [{"section": "Service", "name": "ExecStart", "value": "/bin/sleep 1000"}],
    })
    .to_string()
}

/// The unit names the admin certificate lists.
async fn listed_units(ctx: &Ctx) -> Result<Vec<String>, String> {
    let r = ctx.http(1, "GET", "/fleet/v1/units", None).await?;
    ctx.ensure(r.status == 200, || format!("admin GET /fleet/v1/units: expected 200, observed {}", r.describe()))?;
    Ok(r.json()["units"]
        .as_array()
        .map(|units| units.iter().filter_map(|u| u["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default())
}

async fn ensure_nothing_written(ctx: &Ctx, after: &str) -> Outcome {
    let units = listed_units(ctx).await?;
    ctx.ensure(units.is_empty(), || format!("after {after}: expected no unit in the registry, the API lists {units:?}"))
}

/// fleetctl against machine `slot` presenting `client` (`None`: no client certificate); (exit ok, stderr).
async fn fleetctl_as(
    ctx: &Ctx,
    slot: usize,
    client: Option<&CertFiles>,
    args: &[&str],
) -> Result<(bool, String), String> {
    let mut command = ctx.cluster().fleetctl_command(slot, args).ctx("fleetctl command")?;
    match client {
        Some(files) => {
            command.env("FLEETCTL_CERT_FILE", &files.cert).env("FLEETCTL_KEY_FILE", &files.key);
        }
        None => {
            command.env_remove("FLEETCTL_CERT_FILE").env_remove("FLEETCTL_KEY_FILE");
        }
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), command.output())
        .await
        .map_err(|_| format!("fleetctl {} did not finish within 60 s", args.join(" ")))?
        .map_err(|e| format!("fleetctl {}: {e}", args.join(" ")))?;
    Ok((out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

fn describe(r: &Result<Response, String>) -> String {
    match r {
        Ok(r) => r.describe(),
        Err(e) => format!("error: {e}"),
    }
}

/// Plain HTTP to the TLS listener gets no answer from the API, and a plain PUT writes nothing.
pub async fn plain_http_is_refused(ctx: Ctx) -> Outcome {
    let ctx = &ctx;
    ctx.wait_api(1).await?;
    let endpoint = ctx.machine(1)?.endpoint();
    let plain = endpoint.replacen("https://", "http://", 1);
    ctx.ensure(plain != endpoint, || format!("the machine's endpoint {endpoint} is not https://"))?;
    for (method, body) in [("GET", None), ("PUT", Some(unit_body()))] {
        let r = crate::http::request(&plain, method, UNIT, body.as_deref(), Some("application/json")).await;
        ctx.ensure(!matches!(&r, Ok(r) if (200..300).contains(&r.status)), || {
            format!("plain HTTP {method} {UNIT} to the TLS listener was served: {}", describe(&r))
        })?;
    }
    ensure_nothing_written(ctx, "plain HTTP requests").await
}

/// Without a client certificate, with one of another CA, or with an expired one: no request is served (raw HTTPS
/// and fleetctl alike, fleetctl saying why), and nothing is written.
pub async fn clients_without_a_valid_certificate_are_refused(ctx: Ctx) -> Outcome {
    let ctx = &ctx;
    ctx.wait_api(1).await?;
    let pki = ctx.cluster().tls().ok_or("this spec needs a TLS cluster")?;
    let scratch = tempfile::tempdir().ctx("temporary directory")?;
    let stranger = Ca::new(scratch.path(), "stranger-ca").ctx("stranger CA")?;
    let foreign =
        stranger.issue(&LeafSpec { common_name: "foreign-admin", units: &["fleet-admin"], ..LeafSpec::default() });
    let foreign = foreign.ctx("certificate of the stranger CA")?;
    let expired = pki
        .ca
        .issue(&LeafSpec {
            common_name: "expired-admin",
            units: &["fleet-admin"],
            expired: true,
            ..LeafSpec::default()
        })
        .ctx("expired certificate")?;
    let cases: [(&str, Option<&CertFiles>, &str); 3] = [
        ("no client certificate", None, "requires a client certificate"),
        ("a certificate of another CA", Some(&foreign), "refused the client certificate"),
        ("an expired certificate", Some(&expired), "refused the client certificate: it has expired"),
    ];
    for (what, client, fleetctl_says) in cases {
        let tls = ctx.tls_client(client)?;
        for (method, body) in [("GET", None), ("PUT", Some(unit_body())), ("DELETE", None)] {
            let r = ctx.https(1, Some(Arc::clone(&tls)), method, UNIT, body.as_deref()).await;
            ctx.ensure(r.is_err(), || format!("{method} {UNIT} with {what} was answered: {}", describe(&r)))?;
        }
        let unit = crate::fixtures::TempUnit::named("secure.service", "[Service]\nExecStart=/bin/sleep 1000\n")?;
        let (ok, stderr) = fleetctl_as(ctx, 1, client, &["start", &unit.path()]).await?;
        ctx.ensure(!ok && stderr.contains(fleetctl_says), || {
            format!("fleetctl start with {what}: expected a failure saying {fleetctl_says:?}, observed ok={ok}, stderr: {stderr}")
        })?;
        ensure_nothing_written(ctx, &format!("requests with {what}")).await?;
    }
    Ok(())
}

/// The read role lists units but gets 403 naming its subject on PUT and DELETE, through raw HTTPS and fleetctl; a
/// certificate without a role gets 403 on everything.
pub async fn read_role_lists_but_cannot_write(ctx: Ctx) -> Outcome {
    let ctx = &ctx;
    ctx.wait_api(1).await?;
    let pki = ctx.cluster().tls().ok_or("this spec needs a TLS cluster")?;
    let unit = crate::fixtures::TempUnit::named("secure.service", "[Service]\nExecStart=/bin/sleep 1000\n")?;
    ctx.fleetctl_ok(1, &["start", &unit.path()]).await?;

    let read = ctx.tls_client(Some(&pki.read))?;
    let listed = ctx.https(1, Some(Arc::clone(&read)), "GET", "/fleet/v1/units", None).await?;
    ctx.ensure(listed.status == 200 && listed.body.contains("secure.service"), || {
        format!("read role GET /fleet/v1/units: expected 200 listing secure.service, observed {}", listed.describe())
    })?;
    for (method, body) in [("PUT", Some(json!({"desiredState": "inactive"}).to_string())), ("DELETE", None)] {
        let r = ctx.https(1, Some(Arc::clone(&read)), method, UNIT, body.as_deref()).await?;
        let message = r.error_message().unwrap_or_default();
        ctx.ensure(r.status == 403 && message.contains("CN=fleetctl-read"), || {
            format!("read role {method} {UNIT}: expected 403 naming CN=fleetctl-read, observed {}", r.describe())
        })?;
    }
    let (ok, stderr) = fleetctl_as(ctx, 1, Some(&pki.read), &["list-units"]).await?;
    ctx.ensure(ok, || format!("read role fleetctl list-units failed: {stderr}"))?;
    let (ok, stderr) = fleetctl_as(ctx, 1, Some(&pki.read), &["destroy", "secure.service"]).await?;
    ctx.ensure(!ok && stderr.contains("403") && stderr.contains("CN=fleetctl-read"), || {
        format!(
            "read role fleetctl destroy: expected a 403 naming CN=fleetctl-read, observed ok={ok}, stderr: {stderr}"
        )
    })?;

    let roleless = pki
        .ca
        .issue(&LeafSpec { common_name: "no-role", units: &["operations"], ..LeafSpec::default() })
        .ctx("certificate without a role")?;
    let r = ctx.https(1, Some(ctx.tls_client(Some(&roleless))?), "GET", "/fleet/v1/units", None).await?;
    ctx.ensure(r.status == 403 && r.error_message().unwrap_or_default().contains("CN=no-role"), || {
        format!("certificate without a role GET: expected 403 naming CN=no-role, observed {}", r.describe())
    })?;

    let units = listed_units(ctx).await?;
    ctx.ensure(units == ["secure.service"], || {
        format!("expected secure.service to survive the read role, listed {units:?}")
    })
}

/// The admin role submits, starts, stops and destroys through fleetctl and raw HTTPS.
pub async fn admin_role_does_everything(ctx: Ctx) -> Outcome {
    let ctx = &ctx;
    ctx.wait_api(1).await?;
    let r = ctx.http(1, "PUT", UNIT, Some(&unit_body())).await?;
    ctx.ensure(r.status == 201, || format!("admin PUT {UNIT}: expected 201, observed {}", r.describe()))?;
    ctx.wait_for_n_active_units(1, 1).await?;
    ctx.fleetctl_ok(1, &["stop", "secure.service"]).await?;
    let r = ctx.http(1, "DELETE", UNIT, None).await?;
    ctx.ensure(r.status == 204, || format!("admin DELETE {UNIT}: expected 204, observed {}", r.describe()))?;
    let unit = crate::fixtures::TempUnit::named("again.service", "[Service]\nExecStart=/bin/sleep 1000\n")?;
    ctx.fleetctl_ok(1, &["start", &unit.path()]).await?;
    ctx.wait_for_n_active_units(1, 1).await?;
    ctx.fleetctl_ok(1, &["destroy", "again.service"]).await?;
    ensure_nothing_written(ctx, "the admin destroyed its units").await
}

/// Names crafted to escape (`../`, NUL), a 10 MiB body and deeply nested JSON get 4xx, and nothing is written.
pub async fn crafted_names_and_bodies_are_refused(ctx: Ctx) -> Outcome {
    let ctx = &ctx;
    ctx.wait_api(1).await?;
    let body = unit_body();
    let crafted_paths = [
        "/fleet/v1/units/..%2F..%2Fetc%2Fpasswd.service",
        "/fleet/v1/units/%2E%2E%2Fescape.service",
        "/fleet/v1/units/a%00b.service",
        "/fleet/v1/units/%00.service",
        "/fleet/v1/units/..%5Cescape.service",
        "/fleet/v1/units/.hidden.service",
    ];
    for path in crafted_paths {
        let r = ctx.http(1, "PUT", path, Some(&body)).await.map_err(|e| format!("crafted name: {e}"))?;
        ctx.ensure((400..500).contains(&r.status), || format!("PUT {path}: expected 4xx, observed {}", r.describe()))?;
    }
    let huge = format!(
        "{{\"desiredState\":\"launched\",\"options\":[{{\"section\":\"Service\",\"name\":\"ExecStart\",\"value\":\"{}\"}}]}}",
        "x".repeat(10 << 20)
    );
    let r = ctx.http(1, "PUT", UNIT, Some(&huge)).await;
    ctx.ensure(matches!(&r, Ok(r) if (400..500).contains(&r.status)), || {
        format!("PUT a 10 MiB body: expected 4xx, observed {}", describe(&r))
    })?;
    let depth = 100_000;
    let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let r = ctx.http(1, "PUT", UNIT, Some(&deep)).await.map_err(|e| format!("deeply nested arrays: {e}"))?;
    ctx.ensure((400..500).contains(&r.status), || {
        format!("PUT JSON nested {depth} deep: expected 4xx, observed {}", r.describe())
    })?;
    let deep_object = format!("{{\"options\":{}1{}}}", "[{\"a\":".repeat(depth / 2), "}]".repeat(depth / 2));
    let r = ctx.http(1, "PUT", UNIT, Some(&deep_object)).await.map_err(|e| format!("deeply nested objects: {e}"))?;
    ctx.ensure((400..500).contains(&r.status), || {
        format!("PUT nested objects: expected 4xx, observed {}", r.describe())
    })?;
    let r = ctx.http(1, "PATCH", "/fleet/v1/machines", Some(&deep)).await.map_err(|e| format!("PATCH deep: {e}"))?;
    ctx.ensure((400..500).contains(&r.status), || {
        format!("PATCH machines with deep JSON: expected 4xx, observed {}", r.describe())
    })?;
    let machine_names = ctx.http(1, "GET", "/fleet/v1/machines", None).await?;
    ctx.ensure(machine_names.status == 200, || format!("the API stopped answering: {}", machine_names.describe()))?;
    ensure_nothing_written(ctx, "crafted requests").await?;
    // The cluster's own machine files are untouched by the escape attempts.
    let passwd = ctx.cluster().machine(1).map_err(|e| e.to_string())?.exec(&["cat", "/etc/passwd"]).await;
    let passwd = passwd.map_err(|e| e.to_string())?;
    ctx.ensure(passwd.stdout.contains("root:"), || format!("/etc/passwd in m1 looks changed: {}", passwd.describe()))?;
    Ok(())
}

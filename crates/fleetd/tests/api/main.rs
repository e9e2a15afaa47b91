//! The HTTP API v1 server against a real etcd: the original's wire semantics (status codes, error bodies,
//! pagination, PATCH format) exercised with raw HTTP requests, as any client would send them.

mod fuzz;

use std::sync::Arc;
use std::time::Duration;

use fleet_registry::{Reflector, Registry, SharedFullView};
use fleet_testkit::TestEtcd;
use fleetd::api::Api;
use fleetd::api::listen::{ListenAddress, bind};
use fleetd::api::serve::serve;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// The registry prefix of the API under test.
const PREFIX: &str = "/api-test/";

struct Server {
    addr: String,
    stop: CancellationToken,
    etcd: Arc<TestEtcd>,
}

impl Server {
    async fn start(token_limit: u16) -> Server {
        let etcd = Arc::new(TestEtcd::start().await);
        let registry = etcd.registry(PREFIX).await;
        Server::serving(registry, token_limit, CancellationToken::new(), etcd).await
    }

    /// An API over `registry` (its own registry view) on a free loopback port, until `stop`.
    async fn serving(registry: Registry, token_limit: u16, stop: CancellationToken, etcd: Arc<TestEtcd>) -> Server {
        let reflector = Arc::new(Reflector::start(&registry));
        reflector.wait_connected(Duration::from_secs(10)).await.expect("reflector connects");
        let api = Arc::new(Api::new(registry, reflector, token_limit));
        let listener = bind(&ListenAddress::Tcp("127.0.0.1:0".into())).await.unwrap();
        let addr = listener.describe().trim_start_matches("tcp://").to_string();
        let (_install, handler) = watch::channel(Some(api));
        tokio::spawn(serve(vec![listener], handler, stop.clone()));
        Server { addr, stop, etcd }
    }

    /// An API that keeps no view of the registry until a request comes (`Api::on_demand`, a fleetd without a
    /// full view), on the same etcd.
    async fn on_demand(&self) -> Server {
        let registry = self.etcd.registry(PREFIX).await;
        self.on_demand_sharing(SharedFullView::new(&registry)).await
    }

    /// An on-demand API that takes its view from `full_views` (shared with an engine, as in a fleetd).
    async fn on_demand_sharing(&self, full_views: SharedFullView) -> Server {
        let api = Arc::new(Api::on_demand(full_views, 100));
        let listener = bind(&ListenAddress::Tcp("127.0.0.1:0".into())).await.unwrap();
        let addr = listener.describe().trim_start_matches("tcp://").to_string();
        let (_install, handler) = watch::channel(Some(api));
        let stop = self.stop.child_token();
        tokio::spawn(serve(vec![listener], handler, stop.clone()));
        Server { addr, stop, etcd: self.etcd.clone() }
    }

    fn etcd_endpoint(&self) -> String {
        self.etcd.endpoint()
    }

    /// A second fleetd's API on the same etcd (its own registry view), as another machine's, whose link to etcd
    /// holds everything for `lag` (its watch events arrive that late).
    async fn another_fleetd(&self, lag: Duration) -> Server {
        let slow = fleet_testkit::delay::delaying_forwarder(&self.etcd.address(), lag).await;
        let registry = self.etcd.registry_at(&format!("http://{slow}"), PREFIX).await;
        Server::serving(registry, 100, self.stop.child_token(), self.etcd.clone()).await
    }

    async fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut stream = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
        let mut text = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
        for (k, v) in headers {
            text.push_str(&format!("{k}: {v}\r\n"));
        }
        text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
        let mut lines = head.lines();
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines.filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Reply { status, headers, body: body.to_string() }
    }

    async fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[], "").await
    }

    async fn put_json(&self, path: &str, body: &str) -> Reply {
        self.request("PUT", path, &[("Content-Type", "application/json")], body).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

const HELLO: &str = r#"{"name":"api.service","desiredState":"launched","options":[{"section":"Service","name":"ExecStart","value":"/bin/sleep 1000"}]}"#;

#[tokio::test]
async fn unit_lifecycle_follows_the_originals_status_codes() {
    let s = Server::start(100).await;

    let created = s.put_json("/fleet/v1/units/api.service", HELLO).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body, "");
    assert!(created.header("Server").unwrap().starts_with("fleetd/v"));

    let same = s.put_json("/fleet/v1/units/api.service", HELLO).await;
    assert_eq!(same.status, 204, "identical content with a desired state only updates the state");

    let unit = s.get("/fleet/v1/units/api.service").await;
    assert_eq!(unit.status, 200);
    assert_eq!(unit.header("Content-Type"), Some("application/json"));
    assert_eq!(
        unit.body,
        r#"{"currentState":"inactive","desiredState":"launched","name":"api.service","options":[{"name":"ExecStart","section":"Service","value":"/bin/sleep 1000"}]}"#
    );

    let set = s.put_json("/fleet/v1/units/api.service", r#"{"desiredState":"loaded"}"#).await;
    assert_eq!(set.status, 204);
    assert_eq!(s.get("/fleet/v1/units/api.service").await.json()["desiredState"], "loaded");

    let replaced = s
        .put_json(
            "/fleet/v1/units/api.service",
            r#"{"options":[{"section":"Service","name":"ExecStart","value":"/bin/sleep 2000"}]}"#,
        )
        .await;
    assert_eq!(replaced.status, 201, "different content replaces the unit");
    let after = s.get("/fleet/v1/units/api.service").await.json();
    assert_eq!(after["desiredState"], "inactive", "a replacement without desiredState becomes inactive");
    assert_eq!(after["options"][0]["value"], "/bin/sleep 2000");

    let deleted = s.request("DELETE", "/fleet/v1/units/api.service", &[], "").await;
    assert_eq!(deleted.status, 204);
    let gone = s.get("/fleet/v1/units/api.service").await;
    assert_eq!((gone.status, gone.body.as_str()), (404, r#"{"error":{"code":404,"message":"unit does not exist"}}"#));
    let again = s.request("DELETE", "/fleet/v1/units/api.service", &[], "").await;
    assert_eq!(again.status, 404);
}

#[tokio::test]
async fn bad_requests_change_nothing_and_get_the_originals_errors() {
    let s = Server::start(100).await;
    assert_eq!(s.put_json("/fleet/v1/units/api.service", HELLO).await.status, 201);
    let before = s.get("/fleet/v1/units/api.service").await.body;

    let cases: &[(&str, &str, Option<&str>, u16, &str)] = &[
        (
            "api.service",
            r#"{"name":"other.service","desiredState":"loaded"}"#,
            None,
            400,
            r#"name in URL \"api.service\" differs from unit name in request body \"other.service\""#,
        ),
        ("api.service", r#"{"desiredState":"bogus"}"#, None, 400, r#"invalid value \"bogus\" for JobState"#),
        ("api.service", "{not json", None, 400, "unable to decode body: "),
        ("api.service", "x", Some("text/plain"), 415, "only acceptable Content-Type is application/json"),
        ("api.service", r#"{}"#, None, 409, "must provide DesiredState to update existing unit"),
        ("new.service", r#"{"desiredState":"launched"}"#, None, 409, "unit does not exist and options field empty"),
        (
            "bad%24name.service",
            r#"{"options":[{"section":"Service","name":"ExecStart","value":"/bin/true"}]}"#,
            None,
            400,
            "invalid character '$' in unit name",
        ),
        (
            "x.service",
            r#"{"options":[{"section":"X-Fleet","name":"MachineID","value":"a"},{"section":"X-Fleet","name":"Global","value":"true"}]}"#,
            None,
            400,
            "MachineID cannot be used with Global",
        ),
        (
            "api.service",
            r#"{"options":[{"section":"X-Fleet","name":"Global","value":"true"},{"section":"X-Fleet","name":"MachineOf","value":"b.service"}]}"#,
            None,
            400,
            "Global cannot be used with Peers",
        ),
    ];
    for (name, body, content_type, status, message) in cases {
        let headers = [("Content-Type", content_type.unwrap_or("application/json"))];
        let reply = s.request("PUT", &format!("/fleet/v1/units/{name}"), &headers, body).await;
        assert_eq!(reply.status, *status, "PUT {name} {body}: {}", reply.body);
        assert_eq!(reply.header("Content-Type"), Some("application/json"));
        assert!(reply.body.contains(message), "PUT {name} {body}: expected {message:?} in {}", reply.body);
    }
    assert_eq!(s.get("/fleet/v1/units/api.service").await.body, before, "refused requests left the unit as it was");
    assert_eq!(s.get("/fleet/v1/units/new.service").await.status, 404);

    let template =
        r#"{"desiredState":"launched","options":[{"section":"Service","name":"ExecStart","value":"/bin/true"}]}"#;
    let activated = s.put_json("/fleet/v1/units/hello@.service", template).await;
    assert_eq!(activated.status, 400);
    assert!(activated.body.contains(r#"cannot activate template \"hello@.service\""#), "{}", activated.body);
}

#[tokio::test]
async fn routes_methods_and_discovery() {
    let s = Server::start(100).await;
    let cases: &[(&str, &str, u16, &str)] = &[
        ("GET", "/fleet/v1/bogus", 404, r#"{"error":{"code":404,"message":""}}"#),
        ("GET", "/", 405, r#"{"error":{"code":405,"message":""}}"#),
        (
            "POST",
            "/fleet/v1/units",
            405,
            r#"{"error":{"code":405,"message":"only GET supported against this resource"}}"#,
        ),
        (
            "POST",
            "/fleet/v1/discovery",
            400,
            r#"{"error":{"code":400,"message":"only HTTP GET supported against this resource"}}"#,
        ),
        (
            "GET",
            "/fleet/v1/units?nextPageToken=garbage",
            400,
            r#"{"error":{"code":400,"message":"illegal base64 data at input byte 4"}}"#,
        ),
        (
            "GET",
            "/fleet/v1/machines?nextPageToken=EwBMLg==",
            400,
            r#"{"error":{"code":400,"message":"token limit must be 100"}}"#,
        ),
        ("GET", "/fleet/v1/state/none.service", 404, r#"{"error":{"code":404,"message":"unit state does not exist"}}"#),
        ("GET", "/fleet/v1/units", 200, "{}"),
        ("GET", "/v1-alpha/machines", 200, "{}"),
        ("GET", "/fleet/v1/state", 200, "{}"),
    ];
    for (method, path, status, body) in cases {
        let reply = s.request(method, path, &[], "").await;
        assert_eq!((reply.status, reply.body.as_str()), (*status, *body), "{method} {path}");
    }
    let discovery = s.get("/fleet/v1/discovery").await;
    assert_eq!(discovery.status, 200);
    let doc = discovery.json();
    assert_eq!(doc["id"], "fleet:v1");
    assert_eq!(doc["baseUrl"], "$ENDPOINT/fleet/v1/");
    let metrics = s.get("/metrics").await;
    assert!(metrics.body.contains("fleet_machines 0"), "{}", metrics.body);
}

#[tokio::test]
async fn unit_lists_are_paginated_with_the_originals_tokens() {
    let s = Server::start(2).await;
    for i in 1..=4 {
        let body = format!(r#"{{"options":[{{"section":"Service","name":"ExecStart","value":"/bin/sleep {i}"}}]}}"#);
        assert_eq!(s.put_json(&format!("/fleet/v1/units/u{i}.service"), &body).await.status, 201);
    }
    let first = s.get("/fleet/v1/units").await.json();
    assert_eq!(first["units"].as_array().unwrap().len(), 2);
    assert_eq!(first["units"][0]["name"], "u1.service");
    assert_eq!(first["nextPageToken"], "AgACAA==");
    let second = s.get("/fleet/v1/units?nextPageToken=AgACAA%3D%3D").await.json();
    assert_eq!(second["units"][1]["name"], "u4.service");
    let third = s.get(&format!("/fleet/v1/units?nextPageToken={}", second["nextPageToken"].as_str().unwrap())).await;
    assert_eq!(third.body, "{}", "a list that fills its last page ends with one empty page");
    let twice = s.get("/fleet/v1/units?nextPageToken=AgACAA==&nextPageToken=AgACAA==").await;
    assert_eq!(twice.body, r#"{"error":{"code":400,"message":"too many values for page token"}}"#);
}

/// State lists are cut into pages after sorting and filtering (by machine, by unit), with the same tokens as
/// unit lists; only a page's states are converted.
#[tokio::test]
async fn state_lists_are_sorted_filtered_and_paginated() {
    let s = Server::start(2).await;
    let mut etcd = etcd_client::Client::connect([s.etcd_endpoint()], None).await.expect("connect to the test etcd");
    // Stored out of order on purpose: the listing sorts by unit, then machine.
    for (unit, machine) in
        [("c.service", "m3"), ("a.service", "m2"), ("c.service", "m2"), ("b.service", "m1"), ("a.service", "m1")]
    {
        let record = format!(
            r#"{{"hash":"h-{unit}","loadState":"loaded","activeState":"active","subState":"running@{machine}"}}"#
        );
        etcd.put(format!("{PREFIX}states/{unit}/{machine}"), record, None).await.expect("store a state");
    }
    let rows = |page: &serde_json::Value| -> Vec<String> {
        page["states"]
            .as_array()
            .map(|states| {
                states
                    .iter()
                    .map(|st| {
                        format!(
                            "{} {} {}",
                            st["name"].as_str().unwrap(),
                            st["machineID"].as_str().unwrap(),
                            st["systemdSubState"].as_str().unwrap()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let path = if token.is_empty() {
            "/fleet/v1/state".to_string()
        } else {
            format!("/fleet/v1/state?nextPageToken={}", token.replace('=', "%3D"))
        };
        let page = s.get(&path).await.json();
        let got = rows(&page);
        assert!(got.len() <= 2, "a page over the limit of 2: {got:?}");
        all.extend(got);
        match page["nextPageToken"].as_str() {
            Some(next) => token = next.to_string(),
            None => break,
        }
    }
    let want = [
        "a.service m1 running@m1",
        "a.service m2 running@m2",
        "b.service m1 running@m1",
        "c.service m2 running@m2",
        "c.service m3 running@m3",
    ];
    assert_eq!(all, want, "every state once, in unit then machine order, across pages");
    let m2 = s.get("/fleet/v1/state?machineID=m2").await.json();
    assert_eq!(rows(&m2), ["a.service m2 running@m2", "c.service m2 running@m2"], "filtered by machine");
    assert_eq!(m2["nextPageToken"], "AgACAA==", "a full page of the filtered list has a next page");
    let c = s.get("/fleet/v1/state?unitName=c.service").await.json();
    assert_eq!(rows(&c), ["c.service m2 running@m2", "c.service m3 running@m3"], "filtered by unit");
    let c_m3 = s.get("/fleet/v1/state?unitName=c.service&machineID=m3").await.json();
    assert_eq!(rows(&c_m3), ["c.service m3 running@m3"], "filtered by unit and machine");
}

#[tokio::test]
async fn machine_metadata_patch_uses_the_nested_value_format() {
    let s = Server::start(100).await;
    let ok = s
        .request(
            "PATCH",
            "/fleet/v1/machines",
            &[],
            r#"[{"op":"add","path":"/m0/metadata/foo","value":{"value":"bar"}},{"op":"remove","path":"/m1/metadata/x"}]"#,
        )
        .await;
    assert_eq!(ok.status, 204, "{}", ok.body);
    assert_eq!(ok.header("Content-Type"), Some("application/json"));
    for (body, message) in [
        (r#"[{"op":"noop","path":"/m0/metadata/foo"}]"#, "invalid op: expect add, remove, or replace"),
        (r#"[{"op":"add","path":"/m0/foo","value":{"value":"x"}}]"#, "machine metadata path invalid"),
        (r#"[{"op":"add","path":"/m0/metadata/foo"}]"#, "invalid value: add and replace require a value"),
    ] {
        let reply = s.request("PATCH", "/fleet/v1/machines", &[], body).await;
        assert_eq!(reply.status, 400, "{body}");
        assert_eq!(reply.json()["error"]["message"], message);
    }
    let string_value = s
        .request("PATCH", "/fleet/v1/machines", &[], r#"[{"op":"add","path":"/m0/metadata/zone","value":"z1"}]"#)
        .await;
    assert_eq!(string_value.status, 400, "a bare string value is refused like the original");
}

/// Issue 38: `PUT`/`DELETE /machines/<id>/cordon`: `404` for a machine the cluster does not know, idempotent
/// (`204` every time), `GET /machines` shows `"cordoned":true` only while cordoned (an uncordoned machine is the
/// original's object), the cordon outlives the machine's presence, and a machine that left can still be uncordoned.
#[tokio::test]
async fn cordon_is_idempotent_and_outlives_the_presence() {
    let s = Server::start(100).await;
    let registry = s.etcd.registry(PREFIX).await;
    let lease = fleet_registry::LeaseKeeper::grant(&registry, Duration::from_secs(30)).await.unwrap();
    let m1 = fleet_core::model::MachineState { id: "m1".into(), public_ip: "10.0.0.1".into(), ..Default::default() };
    registry.register_machine(&m1, lease.id()).await.unwrap();
    let machines = || async { s.get("/fleet/v1/machines").await.body };
    for _ in 0..100 {
        if machines().await.contains("m1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(machines().await, r#"{"machines":[{"id":"m1","primaryIP":"10.0.0.1"}]}"#);

    let unknown = s.request("PUT", "/fleet/v1/machines/m2/cordon", &[], "").await;
    assert_eq!((unknown.status, unknown.json()["error"]["message"].as_str()), (404, Some("machine does not exist")));
    let unknown = s.request("DELETE", "/fleet/v1/machines/m2/cordon", &[], "").await;
    assert_eq!(unknown.status, 404);
    for _ in 0..2 {
        let cordoned = s.request("PUT", "/fleet/v1/machines/m1/cordon", &[], "").await;
        assert_eq!(cordoned.status, 204, "{}", cordoned.body);
        assert_eq!(machines().await, r#"{"machines":[{"id":"m1","primaryIP":"10.0.0.1","cordoned":true}]}"#);
    }
    let other = s.request("GET", "/fleet/v1/machines/m1/cordon", &[], "").await;
    assert_eq!(other.status, 405);

    // The machine leaves (its presence is gone): the cordon stays, and can still be deleted, once.
    registry.unregister_machine("m1", lease.id()).await.unwrap();
    for _ in 0..100 {
        if !machines().await.contains("m1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(machines().await, "{}");
    let again = s.request("PUT", "/fleet/v1/machines/m1/cordon", &[], "").await;
    assert_eq!(again.status, 404, "no cordon for a machine that is not there");
    registry.register_machine(&m1, lease.id()).await.unwrap();
    for _ in 0..100 {
        if machines().await.contains("m1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(machines().await.contains(r#""cordoned":true"#), "back: still cordoned");
    registry.unregister_machine("m1", lease.id()).await.unwrap();
    for _ in 0..100 {
        if !machines().await.contains("m1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gone = s.request("DELETE", "/fleet/v1/machines/m1/cordon", &[], "").await;
    assert_eq!(gone.status, 204, "the cordon of a machine that left is deleted: {}", gone.body);
    let twice = s.request("DELETE", "/fleet/v1/machines/m1/cordon", &[], "").await;
    assert_eq!(twice.status, 404, "then nothing names m1 any more");
}

/// `POST /units-batch` answers every write exactly as its single request (`PUT`/`DELETE /units/<name>`) answers it
/// on the same registry state, status and error message alike, and the writes are visible when it answers.
#[tokio::test]
async fn unit_batch_answers_each_write_as_its_single_request() {
    let single = Server::start(100).await;
    let batched = Server::start(100).await;
    let exec = r#"[{"section":"Service","name":"ExecStart","value":"/bin/sleep 1000"}]"#;
    let other = r#"[{"section":"Service","name":"ExecStart","value":"/bin/sleep 2000"}]"#;
    let exists = format!(r#"{{"name":"e.service","options":{exec}}}"#);
    for s in [&single, &batched] {
        assert_eq!(s.put_json("/fleet/v1/units/e.service", &exists).await.status, 201);
    }
    // (name, PUT body); the same writes once as single requests, once in one batch.
    let puts = [
        ("a.service", format!(r#"{{"name":"a.service","desiredState":"launched","options":{exec}}}"#)),
        ("t@.service", format!(r#"{{"name":"t@.service","desiredState":"launched","options":{exec}}}"#)),
        ("m.service", r#"{"name":"m.service","desiredState":"launched"}"#.to_string()),
        ("e.service", r#"{"name":"e.service","desiredState":"loaded"}"#.to_string()),
        ("e.service", format!(r#"{{"name":"e.service","options":{other}}}"#)),
        ("b.service", format!(r#"{{"name":"b.service","desiredState":"running","options":{exec}}}"#)),
        ("e.service", r#"{"name":"e.service"}"#.to_string()),
    ];
    let destroys = ["a.service", "missing.service"];
    let mut expected = Vec::new();
    for (name, body) in &puts {
        let r = single.put_json(&format!("/fleet/v1/units/{name}"), body).await;
        let message = if r.body.is_empty() { String::new() } else { r.json()["error"]["message"].to_string() };
        expected.push((name.to_string(), r.status, message));
    }
    for name in destroys {
        let r = single.request("DELETE", &format!("/fleet/v1/units/{name}"), &[], "").await;
        let message = if r.body.is_empty() { String::new() } else { r.json()["error"]["message"].to_string() };
        expected.push((name.to_string(), r.status, message));
    }
    // The single requests ran one after the other, the batch decides every put on the state it found; the writes
    // above are chosen so that both give the same answers (e.service exists throughout).
    let bodies: Vec<&str> = puts.iter().map(|(_, b)| b.as_str()).collect();
    let batch = format!(r#"{{"put":[{}],"destroy":["a.service","missing.service"]}}"#, bodies.join(","));
    let reply = batched.request("POST", "/fleet/v1/units-batch", &[("Content-Type", "application/json")], &batch).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let got: Vec<(String, u16, String)> = reply.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let message = r.get("message").map_or(String::new(), |m| m.to_string());
            (r["name"].as_str().unwrap().to_string(), r["code"].as_u64().unwrap() as u16, message)
        })
        .collect();
    assert_eq!(got, expected);
    // Read-your-writes: the batch's units are listed as written.
    let list = batched.get("/fleet/v1/units").await.json();
    let names: Vec<&str> = list["units"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["e.service"], "a.service created then destroyed, nothing else valid");
    assert_eq!(list["units"][0]["options"][0]["value"], "/bin/sleep 2000");
    let wrong = batched.request("POST", "/fleet/v1/units-batch", &[("Content-Type", "text/plain")], "{}").await;
    assert_eq!(wrong.status, 415);
    let get = batched.get("/fleet/v1/units-batch").await;
    assert_eq!(get.status, 405);
}

/// `GET /rollouts/<id>?waitRevision=N` (an extension): held until the rollout changes after revision N, answered
/// with the rollout as it is when its `waitMs` runs out, refused by name when malformed.
#[tokio::test]
async fn a_rollout_change_wait_answers_when_the_rollout_changes() {
    let s = Arc::new(Server::start(100).await);
    let created = s.put_json("/fleet/v1/units/api.service", HELLO).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let started = s.put_json("/fleet/v1/rollouts/r1", r#"{"kind":"restart","units":[{"name":"api.service"}]}"#).await;
    assert_eq!(started.status, 201, "{}", started.body);
    let revision = started.json()["revision"].as_i64().expect("a created rollout carries its revision");
    assert!(revision > 0, "{}", started.body);
    let shown = s.get("/fleet/v1/rollouts/r1").await.json();
    assert_eq!(shown["revision"].as_i64(), Some(revision), "GET shows the revision PUT answered: {shown}");
    let listed = s.get("/fleet/v1/rollouts").await.json();
    assert_eq!(listed["rollouts"][0]["revision"].as_i64(), Some(revision), "{listed}");

    // Nothing changes: the wait runs out and answers with the rollout as it is.
    let idle = s.get(&format!("/fleet/v1/rollouts/r1?waitRevision={revision}&waitMs=200")).await;
    assert_eq!(idle.status, 200, "{}", idle.body);
    assert_eq!((idle.json()["revision"].as_i64(), idle.json()["action"].as_str()), (Some(revision), Some("run")));

    // A change while a wait is held answers it (whether the PATCH lands before or after the wait is registered).
    let waiter = tokio::spawn({
        let s = s.clone();
        async move { s.get(&format!("/fleet/v1/rollouts/r1?waitRevision={revision}&waitMs=60000")).await }
    });
    let paused = s.request("PATCH", "/fleet/v1/rollouts/r1", &[], r#"{"action":"pause"}"#).await;
    assert_eq!(paused.status, 204, "{}", paused.body);
    let changed = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the change wait answered when the rollout changed, not at the end of its 60 s")
        .unwrap();
    assert_eq!(changed.status, 200, "{}", changed.body);
    let changed = changed.json();
    assert!(changed["revision"].as_i64().unwrap_or(0) > revision, "the answer shows the change: {changed}");
    assert_eq!(changed["action"], "pause", "{changed}");

    // An older revision than the rollout's answers at once.
    let behind = s.get(&format!("/fleet/v1/rollouts/r1?waitRevision={revision}&waitMs=60000")).await;
    assert_eq!(behind.json()["action"], "pause");

    let bad = s.get("/fleet/v1/rollouts/r1?waitRevision=soon").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("waitRevision") && bad.body.contains("soon"), "{}", bad.body);
    let missing = s.get("/fleet/v1/rollouts/nope?waitRevision=1&waitMs=60000").await;
    assert_eq!(missing.status, 404, "a rollout that does not exist is answered at once: {}", missing.body);
}

/// Issue 38: over the Unix socket (no roles) the cluster page offers no action, and a write a browser sends there
/// is refused (the page is read-only without the admin role), while an API client's same write is decided as
/// before.
#[tokio::test]
async fn over_the_unix_socket_the_page_is_read_only_and_browser_writes_are_refused() {
    let etcd = TestEtcd::start().await;
    let registry = etcd.registry(PREFIX).await;
    let reflector = Arc::new(Reflector::start(&registry));
    reflector.wait_connected(Duration::from_secs(10)).await.expect("reflector connects");
    let api = Arc::new(Api::new(registry, reflector, 100));
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fleet.sock");
    let listener = bind(&ListenAddress::Unix(socket.clone())).await.unwrap();
    let (_install, handler) = watch::channel(Some(api));
    let stop = CancellationToken::new();
    tokio::spawn(serve(vec![listener], handler, stop.clone()));
    let request = |text: String| {
        let socket = socket.clone();
        async move {
            let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
            stream.write_all(text.as_bytes()).await.unwrap();
            let mut raw = String::new();
            stream.read_to_string(&mut raw).await.unwrap();
            raw
        }
    };
    let page = request("GET /ui/ HTTP/1.1\r\nHost: localhost:8080\r\nConnection: close\r\n\r\n".into()).await;
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("id=\"rollouts\""), "{page}");
    assert!(!page.contains("class=\"act\"") && !page.contains("fleet-token") && !page.contains("<dialog"), "{page}");
    let write = |browser: &str| {
        format!(
            "PUT /fleet/v1/machines/m1/cordon HTTP/1.1\r\nHost: localhost:8080\r\n{browser}Content-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
    };
    let refused = request(write("Origin: http://localhost:8080\r\nSec-Fetch-Site: same-origin\r\n")).await;
    assert!(refused.starts_with("HTTP/1.1 403") && refused.contains("the page is read-only"), "{refused}");
    let client = request(write("")).await;
    assert!(client.starts_with("HTTP/1.1 404") && client.contains("machine does not exist"), "{client}");
    stop.cancel();
}

/// The audit trail (issue 38): one record per write request with who, what, the status and the error; reads are
/// not recorded; `history` names who stored each version.
#[tokio::test]
async fn every_write_request_is_recorded_once_with_its_result_and_reads_are_not() {
    let s = Server::start(100).await;
    assert_eq!(s.put_json("/fleet/v1/units/api.service", HELLO).await.status, 201);
    let refused = s.put_json("/fleet/v1/units/api.service", r#"{"desiredState":"running"}"#).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let batch =
        r#"{"put":[{"name":"api.service","desiredState":"loaded"},{"name":"none.service","desiredState":"loaded"}]}"#;
    let batched = s.request("POST", "/fleet/v1/units-batch", &[("Content-Type", "application/json")], batch).await;
    assert_eq!(batched.status, 200, "{}", batched.body);
    assert_eq!(s.get("/fleet/v1/units").await.status, 200);
    assert_eq!(s.get("/fleet/v1/units/api.service/history").await.status, 200);

    let trail = s.get("/fleet/v1/audit").await;
    assert_eq!(trail.status, 200, "{}", trail.body);
    let records = trail.json()["records"].as_array().cloned().unwrap_or_default();
    let summary: Vec<(String, u64, String)> = records
        .iter()
        .map(|r| {
            let (action, status) = (r["action"].as_str().unwrap_or_default(), r["status"].as_u64().unwrap_or(0));
            (action.to_string(), status, r["error"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("submit api.service (launched)".to_string(), 201, String::new()),
            ("set api.service running".to_string(), 400, "invalid value \"running\" for JobState".to_string()),
            (
                "set 2 units loaded".to_string(),
                200,
                "1 of 2 writes failed: none.service 409 unit does not exist and options field empty".to_string()
            ),
        ],
        "one record per write request, none for the reads: {}",
        trail.body
    );
    let who = &records[0]["who"];
    assert_eq!(who["via"], "tcp", "{who}");
    assert!(who["name"].as_str().unwrap_or_default().starts_with("127.0.0.1:"), "{who}");
    assert_eq!(records[0]["units"], serde_json::json!(["api.service"]));

    let for_unit = s.get("/fleet/v1/audit?unit=none.service").await.json();
    assert_eq!(for_unit["records"].as_array().map(Vec::len), Some(1), "{for_unit}");
    let since = records[1]["atMs"].as_u64().unwrap();
    let newer = s.get(&format!("/fleet/v1/audit?since={since}&limit=1")).await.json();
    assert_eq!(newer["records"][0]["status"], 200, "the newest of those since: {newer}");
    assert_eq!(newer["truncated"], true);
    let bad = s.get("/fleet/v1/audit?since=yesterday").await;
    assert_eq!(
        (bad.status, bad.json()["error"]["message"].as_str()),
        (400, Some("invalid since \"yesterday\": expected Unix time in milliseconds"))
    );
    assert_eq!(s.request("DELETE", "/fleet/v1/audit", &[], "").await.status, 405);

    let history = s.get("/fleet/v1/units/api.service/history").await.json();
    let by = history["versions"][0]["by"].as_str().unwrap_or_default().to_string();
    assert!(by.starts_with("127.0.0.1:") && by.ends_with(" (tcp)"), "history names who stored the version: {history}");
}

/// On the Unix socket the record names the peer's user (`SO_PEERCRED`).
#[tokio::test]
async fn a_write_over_the_unix_socket_is_recorded_with_the_peers_user() {
    let etcd = TestEtcd::start().await;
    let registry = etcd.registry(PREFIX).await;
    let reflector = Arc::new(Reflector::start(&registry));
    reflector.wait_connected(Duration::from_secs(10)).await.expect("reflector connects");
    let api = Arc::new(Api::new(registry.clone(), reflector, 100));
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fleet.sock");
    let listener = bind(&ListenAddress::Unix(socket.clone())).await.unwrap();
    let (_install, handler) = watch::channel(Some(api));
    let stop = CancellationToken::new();
    tokio::spawn(serve(vec![listener], handler, stop.clone()));

    let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let request =
        "DELETE /fleet/v1/units/none.service HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");

    let records = registry.read_audit(0).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = records[0].1.as_ref().unwrap();
    // The test's own user: the owner of the directory it just made.
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.path()).unwrap());
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let expected = fleet_core::audit::user_name(&passwd, uid).unwrap_or_else(|| format!("uid {uid}"));
    assert_eq!((record.who.via, record.who.name.as_str()), (fleet_core::audit::Via::Unix, expected.as_str()));
    assert_eq!(
        (record.action.as_str(), record.status, record.error.as_deref()),
        ("destroy none.service", 404, Some("unit does not exist"))
    );
    stop.cancel();
}

/// Issue 37: a write answered with success is visible to the next read through any fleetd. Each round writes a
/// new unit through one fleetd and at once reads it, and the unit list, through another whose link to etcd is
/// 100 ms slow: its view learns of the write from its own watch 100 ms late, so only the read's catch-up with etcd
/// makes it show the write.
#[tokio::test]
async fn a_write_through_one_fleetd_is_visible_to_the_next_read_through_another() {
    let writer = Server::start(100).await;
    let reader = writer.another_fleetd(Duration::from_millis(100)).await;
    for round in 0..5 {
        let name = format!("ryw-{round}.service");
        let body = HELLO.replace("api.service", &name);
        let put = writer.put_json(&format!("/fleet/v1/units/{name}"), &body).await;
        assert_eq!(put.status, 201, "round {round}: {}", put.body);
        let got = reader.get(&format!("/fleet/v1/units/{name}")).await;
        assert_eq!(
            got.status, 200,
            "round {round}: {name} written through one fleetd, read through another: {}",
            got.body
        );
        let listed = reader.get("/fleet/v1/units").await.json();
        let count = listed["units"].as_array().map_or(0, Vec::len);
        assert_eq!(count, round + 1, "round {round}: the unit list through the other fleetd: {listed}");
    }
}

/// A write decided on the view waits for a view of the API's own to list first: a fleetd that just started its API
/// again (a layout switch) must tell a repeated PUT of a unit (204) from its creation (201), as a PUT of new
/// options for an existing unit from one of a new unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_a_fresh_on_demand_view_is_decided_on_the_listed_registry() {
    let kept = Server::start(100).await;
    let body = HELLO.replace("api.service", "w.service");
    let put = kept.put_json("/fleet/v1/units/w.service", &body).await;
    assert_eq!(put.status, 201, "{}", put.body);
    let fresh = kept.on_demand().await;
    let again = fresh.put_json("/fleet/v1/units/w.service", &body).await;
    assert_eq!(
        again.status, 204,
        "the same unit and state again, through an API whose view had not listed: {}",
        again.body
    );
}

/// A fleetd without a full view (issue 35: once the cluster is at layout 2, only the engine leader and
/// `full_view = true` keep one) answers from a view it lists at its first request: the same answers, and a write
/// through it is read through another such fleetd at once.
#[tokio::test]
async fn an_api_without_a_full_view_answers_from_one_listed_on_demand() {
    let kept = Server::start(100).await;
    let first = kept.on_demand().await;
    let second = kept.on_demand().await;
    let put = kept.put_json("/fleet/v1/units/a.service", &HELLO.replace("api.service", "a.service")).await;
    assert_eq!(put.status, 201, "{}", put.body);
    let listed = first.get("/fleet/v1/units").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.json()["units"][0]["name"], "a.service", "its first request lists the registry: {}", listed.body);
    for round in 0..3 {
        let name = format!("od-{round}.service");
        let put = first.put_json(&format!("/fleet/v1/units/{name}"), &HELLO.replace("api.service", &name)).await;
        assert_eq!(put.status, 201, "round {round}: {}", put.body);
        let got = second.get(&format!("/fleet/v1/units/{name}")).await;
        assert_eq!(
            got.status, 200,
            "round {round}: written through one on-demand API, read through another: {}",
            got.body
        );
        let via_kept = kept.get(&format!("/fleet/v1/units/{name}")).await;
        assert_eq!(via_kept.body, got.body, "round {round}: the same answer as a fleetd with a full view");
    }
}

/// The API of a fleetd without a kept full view reads the engine's full view while the engine holds one (it leads),
/// instead of listing a second; with no holder left, the next taker lists a new one.
#[tokio::test]
async fn an_on_demand_api_reads_the_full_view_the_engine_holds() {
    let kept = Server::start(100).await;
    let full_views = SharedFullView::new(&kept.etcd.registry(PREFIX).await);
    let engines = full_views.get();
    engines.wait_connected(Duration::from_secs(10)).await.expect("the engine's view connects");
    assert_eq!(Arc::strong_count(&engines), 1, "only the engine holds its view before any request");
    let api = kept.on_demand_sharing(full_views.clone()).await;
    let put = kept.put_json("/fleet/v1/units/a.service", &HELLO.replace("api.service", "a.service")).await;
    assert_eq!(put.status, 201, "{}", put.body);
    let listed = api.get("/fleet/v1/units").await;
    assert_eq!(listed.json()["units"][0]["name"], "a.service", "{}", listed.body);
    assert_eq!(
        Arc::strong_count(&engines),
        2,
        "the API answered from the engine's view (held by the engine and the API), not from one of its own"
    );
    assert!(Arc::ptr_eq(&engines, &full_views.get()), "a taker while the view is live gets the same one");
    drop(api);
    drop(engines);
    // The API's hold ends with it once its server task is gone; then the view is no one's.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while full_views.is_live() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!full_views.is_live(), "the shared view outlived its last holder");
}

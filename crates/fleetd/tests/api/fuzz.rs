//! A seeded fuzz run of raw HTTP requests against a running API over a real etcd (issue 37): random methods
//! (the seven the API knows and extension tokens) × paths under `/fleet/v1/` and `/v1-alpha/` (units, unit
//! history, state, machines, rollouts, discovery, the batch route; names with percent-encoded junk, `..`, NUL,
//! `/`, malformed escapes, invalid UTF-8, unicode and very long names; extra segments, trailing slashes, query
//! strings) × headers (content types: none, one, two, junk) × bodies (valid and invalid units, batches, rollouts,
//! metadata operations, truncated JSON, arbitrary bytes). Every answer must be below 500; every error body must be
//! the §8.3 shape with its status and a message that says what is wrong (except the original's empty 404 for a
//! path no route serves and its empty 405 for `/` and `/fleet/v1`, which the transcripts pin); and a request
//! that was not accepted (any answer but 2xx) must leave the registry — every key under the prefix, and etcd's
//! revision — as it was.
//!
//! Deterministic: `FLEET_API_FUZZ_SEED` (default below) and `FLEET_API_FUZZ_REQUESTS` (default 1,500) replay a
//! run; a failure names the seed, the request's index and the request.

use std::fmt::Write as _;

use fleetd::api::route::{RouteError, route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{PREFIX, Server};

const DEFAULT_SEED: u64 = 37;
const DEFAULT_REQUESTS: usize = 1_500;

/// SplitMix64: a seed replays on any build and platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len())]
    }
}

const METHODS: &[&str] = &["GET", "PUT", "DELETE", "PATCH", "POST", "HEAD", "OPTIONS", "BREW", "get", "M-SEARCH"];

/// Unit names, valid or not, already percent-encoded for a path where they need it.
fn unit_name(rng: &mut Rng) -> String {
    let valid: &[&str] = &["a.service", "fz-1.service", "t@.service", "t@1.service", "s.socket", "x:y.timer"];
    match rng.below(16) {
        0..=4 => rng.pick(valid).to_string(),
        5 => "..%2f..%2fetc".into(),
        6 => "%00x.service".into(),
        7 => format!("{}%00", rng.pick(valid)),
        8 => "%2e%2e".into(),
        9 => rng.pick(&["a%zz.service", "%", "%4", "%+1.service", "a%2", "%%"]).to_string(),
        10 => rng.pick(&["%ff.service", "%c3.service", "a%c3%28.service", "%ed%a0%80.service"]).to_string(),
        11 => rng
            .pick(&["%c3%a9t%c3%a9.service", "%f0%9f%92%a5.service", "%e2%80%ae.service", "%ef%bf%bd.service"])
            .to_string(),
        12 => {
            let len = rng.pick(&[&250usize, &257, &1000, &4000]);
            format!("{}.service", "n".repeat(*len))
        }
        13 => rng
            .pick(&[
                "a.servICE",
                "a.",
                "@a.service",
                "a@1.mount",
                "noext",
                "a%20b.service",
                "a+b.service",
                "a%2fb.service",
            ])
            .to_string(),
        14 => percent_junk(rng),
        _ => rng
            .pick(&[".service", "a.service%0a", "a.service%0d%0aX-Injected:%201", "%5c.service", "a;b.service"])
            .to_string(),
    }
}

/// A few random bytes, each percent-encoded (so any byte, NUL and `/` included, reaches the server's decoder).
fn percent_junk(rng: &mut Rng) -> String {
    let len = 1 + rng.below(12);
    let mut out = String::new();
    for _ in 0..len {
        let _ = write!(out, "%{:02x}", rng.below(256));
    }
    if rng.chance(50) {
        out.push_str(".service");
    }
    out
}

fn rollout_id(rng: &mut Rng) -> String {
    match rng.below(5) {
        0 | 1 => rng.pick(&["r1", "roll-2", "a.b_c"]).to_string(),
        2 => "x".repeat(65),
        3 => percent_junk(rng),
        _ => rng.pick(&["a%2fb", "%00", "..", "a%20b", "%zz"]).to_string(),
    }
}

/// A path and the methods its resource serves (most requests use one of them, so that they get past routing).
fn path(rng: &mut Rng) -> (String, &'static [&'static str]) {
    const UNIT: &[&str] = &["GET", "PUT", "DELETE"];
    const READ: &[&str] = &["GET"];
    let prefix = if rng.chance(85) { "/fleet/v1" } else { "/v1-alpha" };
    let (rest, methods) = match rng.below(20) {
        0..=6 => (format!("/units/{}", unit_name(rng)), UNIT),
        7 => (format!("/units/{}/history", unit_name(rng)), READ),
        8 | 9 => (format!("/state/{}", unit_name(rng)), READ),
        10 => ("/units".into(), READ),
        11 => ("/state".into(), READ),
        12 => ("/machines".into(), &["GET", "PATCH"][..]),
        13 => ("/rollouts".into(), READ),
        14 => (format!("/rollouts/{}", rollout_id(rng)), &["GET", "PUT", "PATCH"][..]),
        15 => ("/discovery".into(), READ),
        16 => ("/units-batch".into(), &["POST"][..]),
        17 => {
            let odd = ["", "/", "/units/", "/bogus", "/machines/", "/units/a.service/b", "/state/"];
            (odd[rng.below(odd.len())].to_string(), READ)
        }
        18 => (format!("/units/{}/..", unit_name(rng)), UNIT),
        _ => {
            let collection = rng.pick(&["units", "state", "rollouts", "%75nits"]);
            (format!("/{collection}/{}", percent_junk(rng)), UNIT)
        }
    };
    let query = match rng.below(10) {
        0 => "?alt=json",
        1 => "?nextPageToken=garbage",
        2 => "?nextPageToken=ZAABAA==&nextPageToken=x",
        3 => "?machineID=%00&unitName=a.service",
        4 => "?unitName=%zz",
        _ => "",
    };
    (format!("{prefix}{rest}{query}"), methods)
}

/// Header lines (without `Content-Length`, which the request writer adds).
fn headers(rng: &mut Rng) -> Vec<String> {
    let types: &[&str] = &[
        "application/json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "text/plain",
        "",
        "application/jsonx",
        ";",
        "application/json;;;",
        "multipart/form-data; boundary=x",
    ];
    let mut out = Vec::new();
    match rng.below(10) {
        0 => {}
        1 => {
            out.push(format!("Content-Type: {}", rng.pick(types)));
            out.push(format!("Content-Type: {}", rng.pick(types)));
        }
        2..=4 => out.push(format!("Content-Type: {}", rng.pick(types))),
        _ => out.push("Content-Type: application/json".into()),
    }
    if rng.chance(10) {
        out.push(
            rng.pick(&["Accept: */*", "X-Junk: a\tb", "Expect: 100-continue", "Accept-Encoding: gzip"]).to_string(),
        );
    }
    out
}

fn option(rng: &mut Rng) -> serde_json::Value {
    let (section, name, value) = match rng.below(12) {
        0..=5 => ("Service", "ExecStart", "/bin/sleep 1000"),
        6 => ("", "ExecStart", "/bin/true"),
        7 => ("Service", "", "value"),
        8 => ("X-Fleet", "Global", "true"),
        9 => ("X-Fleet", "MachineOf", "a.service"),
        10 => ("X-Fleet", "Conflicts", "a*"),
        _ => ("Unit", "Description", "line\\\n"),
    };
    serde_json::json!({"section": section, "name": name, "value": value})
}

fn unit_body(rng: &mut Rng) -> serde_json::Value {
    let mut body = serde_json::Map::new();
    if rng.chance(40) {
        let name = rng.pick(&["a.service", "other.service", "bad name.service", "\u{0}.service", ""]);
        body.insert("name".into(), name.into());
    }
    if rng.chance(70) {
        let state = rng.pick(&["launched", "loaded", "inactive", "bogus", ""]);
        body.insert("desiredState".into(), state.into());
    }
    if rng.chance(70) {
        let options: Vec<_> = (0..rng.below(4)).map(|_| option(rng)).collect();
        body.insert("options".into(), options.into());
    }
    if rng.chance(10) {
        body.insert("reschedule".into(), true.into());
        body.insert("noRestart".into(), rng.chance(50).into());
    }
    if rng.chance(5) {
        body.insert("options".into(), rng.pick(&["x", "1"]).into());
    }
    serde_json::Value::Object(body)
}

fn body(rng: &mut Rng) -> Vec<u8> {
    let json = match rng.below(14) {
        0..=4 => unit_body(rng),
        5 => serde_json::json!({
            "put": (0..rng.below(3)).map(|_| {
                let mut unit = unit_body(rng);
                unit["name"] = rng.pick(&["a.service", "b.service", "../x", "\u{0}"]).into();
                unit
            }).collect::<Vec<_>>(),
            "destroy": (0..rng.below(3)).map(|_| rng.pick(&["a.service", "gone.service", "../../etc", "\u{0}x.service", "", "a/b.service"]).to_string()).collect::<Vec<_>>(),
        }),
        6 => serde_json::json!([{
            "op": rng.pick(&["add", "remove", "replace", "move"]),
            "path": rng.pick(&["/m1/metadata/role", "/m1/metadata/", "m1", "/%00/metadata/k", "/m1/metadata/a b", "/\u{0}/metadata/k", "/m\u{7f}1/metadata/k"]),
            "value": {"value": rng.pick(&["x", ""])},
        }]),
        7 => serde_json::json!({
            "kind": rng.pick(&["replace", "restart", "rebalance", "bogus"]),
            "units": [{"name": rng.pick(&["a.service", "nope.service", "\u{0}"])}],
            "maxUnavailable": rng.below(3),
        }),
        8 => serde_json::json!({"action": rng.pick(&["pause", "run", "abort", "promote", "explode"])}),
        9 => {
            let mut text = unit_body(rng).to_string();
            text.truncate(rng.below(text.len().max(1)));
            return text.into_bytes();
        }
        10 => return (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
        11 => return Vec::new(),
        12 => {
            return rng
                .pick(&["null", "[]", "{}", "1e999", "\"x\"", "{\"options\":null}", "{\"name\":1}"])
                .as_bytes()
                .to_vec();
        }
        _ => serde_json::json!({"name": "n".repeat(3000), "options": [option(rng)]}),
    };
    json.to_string().into_bytes()
}

struct Request {
    method: &'static str,
    path: String,
    headers: Vec<String>,
    body: Vec<u8>,
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut body = String::from_utf8_lossy(&self.body).into_owned();
        if body.chars().count() > 300 {
            body = format!("{}… ({} bytes)", body.chars().take(300).collect::<String>(), self.body.len());
        }
        write!(f, "{} {} headers {:?} body {:?}", self.method, self.path, self.headers, body)
    }
}

struct Answer {
    status: u16,
    body: String,
}

async fn send(addr: &str, request: &Request) -> Result<Answer, String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    let mut head = format!("{} {} HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n", request.method, request.path);
    for header in &request.headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    let _ = write!(head, "Content-Length: {}\r\n\r\n", request.body.len());
    let mut raw = head.into_bytes();
    raw.extend_from_slice(&request.body);
    stream.write_all(&raw).await.map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let mut rest: &str = &text;
    loop {
        let (head, body) = rest.split_once("\r\n\r\n").ok_or_else(|| format!("no complete answer: {text:?}"))?;
        let status: u16 =
            head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status line: {head:?}"))?;
        // `Expect: 100-continue` gets an interim `100 Continue` first.
        if !(100..200).contains(&status) {
            return Ok(Answer { status, body: body.to_string() });
        }
        rest = body;
    }
}

/// What the registry holds: etcd's revision and every key under the prefix with its value and mod revision.
async fn registry_contents(client: &mut etcd_client::Client) -> (i64, Vec<(String, String, i64)>, usize) {
    let options = etcd_client::GetOptions::new().with_prefix();
    let resp = client.get(PREFIX, Some(options)).await.expect("read the registry");
    let revision = resp.header().map_or(0, |h| h.revision());
    let audit = format!("{PREFIX}audit/");
    let (audit, kvs): (Vec<_>, Vec<_>) = resp
        .kvs()
        .iter()
        .map(|kv| {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            (key, String::from_utf8_lossy(kv.value()).into_owned(), kv.mod_revision())
        })
        .partition(|(key, _, _)| key.starts_with(&audit));
    (revision, kvs, audit.len())
}

/// The original answers these with an empty message (spec §8.2, transcript 13): a path no route serves (404) and
/// `/`, `/fleet/v1` (405).
fn empty_message_is_the_originals(method: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    let Ok(method) = http::Method::from_bytes(method.as_bytes()) else { return false };
    matches!(route(&method, path), Err(RouteError::NotFound | RouteError::MethodNotAllowed("")))
}

/// What is wrong with an answer to `request`, if anything.
fn judge(request: &Request, answer: &Answer) -> Option<String> {
    if answer.status >= 500 {
        return Some(format!("answered {}: {}", answer.status, answer.body));
    }
    if !(400..500).contains(&answer.status) || request.method == "HEAD" {
        // A HEAD answer carries no body to judge.
        return None;
    }
    let Ok(body) = serde_json::from_str::<serde_json::Value>(&answer.body) else {
        return Some(format!("answered {} with a body that is not JSON: {:?}", answer.status, answer.body));
    };
    if body["error"]["code"] != answer.status {
        return Some(format!("answered {} with the error body {}", answer.status, answer.body));
    }
    let message = body["error"]["message"].as_str().unwrap_or("");
    if message.is_empty() && !empty_message_is_the_originals(request.method, &request.path) {
        return Some(format!("answered {} without saying why: {}", answer.status, answer.body));
    }
    None
}

#[tokio::test]
async fn random_requests_are_answered_below_500_saying_why_and_refusals_change_nothing() {
    let seed = std::env::var("FLEET_API_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED);
    let count = std::env::var("FLEET_API_FUZZ_REQUESTS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_REQUESTS);
    let s = Server::start(3).await;
    let mut etcd = etcd_client::Client::connect([s.etcd_endpoint()], None).await.expect("connect to the test etcd");
    // Units to find, replace and destroy, so look-ups by valid names meet both existing and unknown units.
    for name in ["a.service", "t@.service", "s.socket"] {
        let unit =
            r#"{"desiredState":"inactive","options":[{"section":"Service","name":"ExecStart","value":"/bin/true"}]}"#;
        assert_eq!(s.put_json(&format!("/fleet/v1/units/{name}"), unit).await.status, 201);
    }
    let mut rng = Rng(seed);
    let mut before = registry_contents(&mut etcd).await;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for index in 0..count {
        let (path, served) = path(&mut rng);
        let method = if rng.chance(75) { rng.pick(served) } else { rng.pick(METHODS) };
        let request = Request { method, path, headers: headers(&mut rng), body: body(&mut rng) };
        let place = format!("seed {seed} request {index}: {request}");
        let answer = send(&s.addr, &request).await.unwrap_or_else(|e| panic!("{place}: no answer: {e}"));
        *statuses.entry(answer.status).or_default() += 1;
        if let Some(problem) = judge(&request, &answer) {
            panic!("{place}: {problem}");
        }
        let after = registry_contents(&mut etcd).await;
        // Every request but a read leaves one audit record (issue 38), refused or not, and a refusal nothing else.
        let recorded = usize::from(!matches!(request.method, "GET" | "HEAD"));
        if after.2 != before.2 + recorded {
            panic!(
                "{place}: answered {}, audit records {} -> {} (expected {recorded} more)",
                answer.status, before.2, after.2
            );
        }
        let refused_but_changed = after.1 != before.1 || after.0 != before.0 + recorded as i64;
        if !(200..300).contains(&answer.status) && refused_but_changed {
            let changed: Vec<_> = after.1.iter().filter(|kv| !before.1.contains(kv)).map(|kv| &kv.0).collect();
            let gone: Vec<_> = before.1.iter().filter(|kv| !after.1.contains(kv)).map(|kv| &kv.0).collect();
            panic!(
                "{place}: refused with {} ({}) but the registry changed: revision {} -> {}, written {changed:?}, removed {gone:?}",
                answer.status, answer.body, before.0, after.0
            );
        }
        before = after;
    }
    eprintln!("{count} requests (seed {seed}), answers by status: {statuses:?}");
    assert!(statuses.keys().any(|s| (200..300).contains(s)), "some requests are accepted");
    assert!(statuses.contains_key(&400) && statuses.contains_key(&404), "and some refused");
}

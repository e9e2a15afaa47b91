//! The exact requests fleetctl sends for every command and flag that writes: method, path and JSON body, byte for
//! byte, so a field dropped on the way to the wire (as `reschedule` once was, issue 19) fails here.
//!
//! fleetctl (the binary) runs against a recording endpoint on 127.0.0.1: fleet's own accept loop
//! ([`fleetd::api::serve::serve`]) with a handler that records every request and answers like the API. It routes
//! with the API's router ([`route::route`]), decides every PUT with the API's procedure ([`wire::decide_put`]),
//! shows units with the API's renderer ([`wire::unit`]) and derives current states with the registry's rule
//! ([`current_state`]); it does not re-implement any of them. What the engine and agents would do is reduced to
//! "at once": a unit that should run is scheduled on the one machine, which publishes a systemd state for its
//! current content — so fleetctl's waits end and the test sees every request of a complete command.
//!
//! Rollouts (issue 12) likewise: a `PUT /rollouts/<id>` is decided by the API's [`wire::decide_rollout`] over a
//! registry image of the recorder's units ([`registry_image`]), a `PATCH` by [`decide_control`], and while the
//! pretend engine runs, every read of a rollout advances it with the engine's own [`rollout::advance`] over that
//! image until it no longer changes (at one instant: a rollout given `--min-healthy=0` completes).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fleet_core::api_rules::decide_control;
use fleet_core::api_rules::{self, PutAction};
use fleet_core::model::JobState;
use fleet_core::rollout::{self, Rollout};
use fleet_core::schema;
use fleet_core::unit::{Requirements, UnitFile};
use fleet_registry::SnapshotCluster;
use fleet_registry::{Change, Keys, MachineObject, Snapshot, StateRecord, UnitObject, UnitView, current_state};
use fleetd::api::listen::{ListenAddress, bind};
use fleetd::api::route::{self, Route};
use fleetd::api::serve::{ApiHandler, error_response, serve};
use http::{Request, Response, StatusCode};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const MACHINE: &str = "8363165e6276f500b71169eca9b3f76b";
const MACHINE_IP: &str = "172.17.0.2";

const HELLO: &str = "[Unit]\nDescription=Hello\n\n[Service]\nExecStart=/bin/sleep 1000\n";
const HELLO_V2: &str = "[Unit]\nDescription=Hello\n\n[Service]\nExecStart=/bin/sleep 2000\n";
const TEMPLATE: &str = "[Unit]\nDescription=Hello %i\n\n[Service]\nExecStart=/bin/sleep 1000\n";
const TEMPLATE_V2: &str = "[Unit]\nDescription=Hello %i\n\n[Service]\nExecStart=/bin/sleep 2000\n";
const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 1000\n\n[X-Fleet]\nGlobal=true\n";

/// `options` of the units above as fleetctl must send them (written out, not serialised here, so that a change
/// of the wire format shows).
const HELLO_OPTIONS: &str = r#"[{"name":"Description","section":"Unit","value":"Hello"},{"name":"ExecStart","section":"Service","value":"/bin/sleep 1000"}]"#;
const HELLO_V2_OPTIONS: &str = r#"[{"name":"Description","section":"Unit","value":"Hello"},{"name":"ExecStart","section":"Service","value":"/bin/sleep 2000"}]"#;
const TEMPLATE_OPTIONS: &str = r#"[{"name":"Description","section":"Unit","value":"Hello %i"},{"name":"ExecStart","section":"Service","value":"/bin/sleep 1000"}]"#;
const TEMPLATE_V2_OPTIONS: &str = r#"[{"name":"Description","section":"Unit","value":"Hello %i"},{"name":"ExecStart","section":"Service","value":"/bin/sleep 2000"}]"#;
const GLOBAL_OPTIONS: &str = r#"[{"name":"ExecStart","section":"Service","value":"/bin/sleep 1000"},{"name":"Global","section":"X-Fleet","value":"true"}]"#;

/// One request as it arrived.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    /// Path and query, as sent.
    target: String,
    body: String,
}

impl Recorded {
    fn line(&self) -> String {
        if self.body.is_empty() {
            format!("{} {}", self.method, self.target)
        } else {
            format!("{} {} {}", self.method, self.target, self.body)
        }
    }
}

/// A unit as the pretend registry holds it.
#[derive(Debug, Clone)]
struct Stored {
    body: Arc<str>,
    hash: String,
    desired: JobState,
    target: Option<String>,
}

impl Stored {
    fn new(text: &str, desired: JobState) -> Stored {
        let file = UnitFile::parse(text).expect("test units parse");
        Stored { body: file.canonical().into(), hash: file.hash().to_hex(), desired, target: None }
    }

    fn global(&self, name: &str) -> bool {
        UnitFile::parse(&self.body).is_ok_and(|f| Requirements::of(&f, name).global)
    }

    /// The engine's and the agent's work, done at once: scheduled on the machine while it should run.
    fn converge(&mut self, name: &str) {
        self.target = (self.desired != JobState::Inactive && !self.global(name)).then(|| MACHINE.to_string());
    }

    /// The systemd state the machine publishes for this unit, if it holds it.
    fn published(&self, name: &str) -> Option<schema::UnitState> {
        let held = if self.global(name) { self.desired != JobState::Inactive } else { self.target.is_some() };
        let (active, sub) = match self.desired {
            JobState::Launched => ("active", "running"),
            _ => ("inactive", "dead"),
        };
        held.then(|| schema::UnitState {
            hash: self.hash.clone(),
            machine_id: MACHINE.to_string(),
            name: name.to_string(),
            systemd_active_state: active.to_string(),
            systemd_load_state: "loaded".to_string(),
            systemd_sub_state: sub.to_string(),
            machine_presence: String::new(),
            health: None,
            running_hash: if active == "active" { self.hash.clone() } else { String::new() },
        })
    }

    fn view<'a>(&'a self, name: &'a str) -> UnitView<'a> {
        let target = self.target.as_deref();
        let published = self.published(name).is_some();
        UnitView {
            name,
            hash: &self.hash,
            previous_hash: None,
            body: &self.body,
            desired: self.desired,
            target,
            current: current_state(target, published, self.desired == JobState::Launched),
            no_restart: false,
        }
    }
}

/// The recording endpoint's handler.
#[derive(Default)]
struct Recorder {
    units: Mutex<BTreeMap<String, Stored>>,
    requests: Mutex<Vec<Recorded>>,
    rollouts: Mutex<Rollouts>,
}

/// The rollouts the recorder holds, the agent's restarted markers and whether the pretend engine drives them.
#[derive(Default)]
struct Rollouts {
    stored: BTreeMap<String, Rollout>,
    /// Unit → the rollout the machine last restarted it for.
    restarted: BTreeMap<String, String>,
    engine_stopped: bool,
}

/// When the recorder's clock starts (Unix ms); each request moves it by one.
const CLOCK_START_MS: u64 = 1_700_000_000_000;

fn record<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("registry records serialise")
}

/// The registry as it would hold the recorder's units (each published by the one machine as `Stored::published`
/// says) and rollouts: what the API's and the engine's rollout decisions read.
fn registry_image(units: &BTreeMap<String, Stored>, rollouts: &Rollouts) -> Snapshot {
    let keys = Keys::new("/wire/");
    let machine = MachineObject { id: MACHINE.into(), public_ip: MACHINE_IP.into(), ..Default::default() };
    let mut kvs: Vec<(String, String)> = vec![(keys.machine_object(MACHINE), record(&machine))];
    for (name, u) in units {
        let object = UnitObject::next(None, name, &u.hash, false, 0);
        kvs.push((keys.body(&u.hash), u.body.to_string()));
        kvs.push((keys.unit_object(name), record(&object)));
        kvs.push((keys.unit_desired(name), u.desired.as_str().to_string()));
        if let Some(target) = &u.target {
            kvs.push((keys.unit_target(name), target.clone()));
        }
        if let Some(state) = u.published(name) {
            let published = StateRecord {
                hash: state.hash.into(),
                load_state: state.systemd_load_state.into(),
                active_state: state.systemd_active_state.into(),
                sub_state: state.systemd_sub_state.into(),
                restarts: None,
                health: None,
                launched: None,
                restarted_for: None,
            };
            kvs.push((keys.state(name, MACHINE), record(&published)));
            if !state.running_hash.is_empty() {
                kvs.push((keys.unit_launched(name, MACHINE), state.running_hash));
            }
        }
    }
    for (unit, id) in &rollouts.restarted {
        kvs.push((keys.unit_restarted(unit, MACHINE), id.clone()));
    }
    for (id, r) in &rollouts.stored {
        kvs.push((keys.rollout_spec(id), record(&r.spec)));
        kvs.push((keys.rollout_control(id), record(&r.control)));
        if let Some(progress) = &r.progress {
            kvs.push((keys.rollout_progress(id), record(progress)));
        }
    }
    let changes =
        kvs.iter().map(|(k, v)| (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 1, lease: 0 }));
    Snapshot::from_kvs(&keys, 1, changes)
}

/// The pretend engine and agent at `now_ms`: the agent restarts what a restart rollout asks of it, the engine
/// advances every rollout, until nothing changes any more.
fn drive_rollouts(units: &BTreeMap<String, Stored>, rollouts: &mut Rollouts, now_ms: u64) {
    if rollouts.engine_stopped {
        return;
    }
    loop {
        for unit in units.keys() {
            if let Some(id) = rollout::restart_token(rollouts.stored.values(), unit, MACHINE) {
                rollouts.restarted.insert(unit.clone(), id.to_string());
            }
        }
        let image = registry_image(units, rollouts);
        let cluster = SnapshotCluster(&image);
        let mut changed = false;
        for r in rollouts.stored.values_mut().filter(|r| !r.state().is_final()) {
            let advanced = rollout::advance(r, &cluster, now_ms);
            if r.progress.as_ref() != Some(&advanced.progress) {
                r.progress = Some(advanced.progress);
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(serde_json::to_vec(value).expect("wire types serialise")));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

fn empty(status: StatusCode) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = status;
    response
}

impl Recorder {
    /// The recorder's clock: one millisecond per request so far.
    fn now_ms(&self) -> u64 {
        CLOCK_START_MS + self.requests.lock().unwrap().len() as u64
    }

    fn answer(&self, request: &Request<Bytes>) -> Response<Bytes> {
        let mut units = self.units.lock().unwrap();
        let not_found = || error_response(StatusCode::NOT_FOUND, "unit does not exist");
        match route::route(request.method(), request.uri().path()) {
            Ok(Route::ListMachines) => json(
                StatusCode::OK,
                &schema::MachinePage {
                    machines: vec![schema::Machine {
                        id: MACHINE.into(),
                        primary_ip: MACHINE_IP.into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ),
            Ok(Route::ListUnits) => json(
                StatusCode::OK,
                &schema::UnitPage {
                    units: units.iter().filter_map(|(name, u)| api_rules::unit(&u.view(name), false)).collect(),
                    ..Default::default()
                },
            ),
            Ok(Route::GetUnit(name)) => match units.get(&name).and_then(|u| api_rules::unit(&u.view(&name), true)) {
                Some(unit) => json(StatusCode::OK, &unit),
                None => not_found(),
            },
            Ok(Route::ListStates) => json(
                StatusCode::OK,
                &schema::UnitStatePage {
                    states: units.iter().filter_map(|(name, u)| u.published(name)).collect(),
                    ..Default::default()
                },
            ),
            Ok(Route::GetState(name)) => match units.get(&name).and_then(|u| u.published(&name)) {
                Some(state) => json(StatusCode::OK, &state),
                None => not_found(),
            },
            Ok(Route::DeleteUnit(name)) => match units.remove(&name) {
                Some(_) => empty(StatusCode::NO_CONTENT),
                None => not_found(),
            },
            Ok(Route::PutUnit(name)) => {
                let body: schema::Unit = match serde_json::from_slice(request.body()) {
                    Ok(body) => body,
                    Err(e) => return error_response(StatusCode::BAD_REQUEST, &format!("unable to decode body: {e}")),
                };
                let body = schema::Unit { name: name.clone(), ..body };
                let stored_hash = units.get(&name).map(|u| u.hash.clone());
                let action = match api_rules::decide_put(&body, stored_hash.as_deref()) {
                    Ok(action) => action,
                    Err(refused) => return fleetd::api::reply::refused(&refused),
                };
                let status = match action {
                    PutAction::Create(desired) | PutAction::Replace(desired) => {
                        let text = UnitFile::from_options(body.options).canonical();
                        units.insert(name.clone(), Stored::new(&text, desired));
                        StatusCode::CREATED
                    }
                    PutAction::SetDesired(desired) => {
                        units.get_mut(&name).expect("decide_put found it").desired = desired;
                        StatusCode::NO_CONTENT
                    }
                };
                units.get_mut(&name).expect("just stored").converge(&name);
                empty(status)
            }
            Ok(Route::ListRollouts) => {
                let mut rollouts = self.rollouts.lock().unwrap();
                drive_rollouts(&units, &mut rollouts, self.now_ms());
                let image = registry_image(&units, &rollouts);
                let all = image.rollouts().iter().map(api_rules::rollout).collect();
                json(StatusCode::OK, &schema::RolloutList { rollouts: all })
            }
            Ok(Route::GetRollout(id)) => {
                let mut rollouts = self.rollouts.lock().unwrap();
                drive_rollouts(&units, &mut rollouts, self.now_ms());
                match rollouts.stored.get(&id) {
                    Some(r) => json(StatusCode::OK, &api_rules::rollout(r)),
                    None => error_response(StatusCode::NOT_FOUND, "rollout does not exist"),
                }
            }
            Ok(Route::PutRollout(id)) => {
                let body: schema::RolloutRequest = match serde_json::from_slice(request.body()) {
                    Ok(body) => body,
                    Err(e) => return error_response(StatusCode::BAD_REQUEST, &format!("unable to decode body: {e}")),
                };
                let mut rollouts = self.rollouts.lock().unwrap();
                let image = registry_image(&units, &rollouts);
                let plan = match api_rules::decide_rollout(&id, &body, &image, self.now_ms()) {
                    Ok(plan) => plan,
                    Err(refused) => return fleetd::api::reply::refused(&refused),
                };
                for (name, text, _) in &plan.bodies {
                    let mut stored = Stored::new(text, JobState::Launched);
                    stored.converge(name);
                    units.insert(name.clone(), stored);
                }
                let stored = Rollout { spec: plan.spec, control: Default::default(), progress: None };
                let shown = api_rules::rollout(&stored);
                rollouts.stored.insert(id, stored);
                json(StatusCode::CREATED, &shown)
            }
            Ok(Route::PatchRollout(id)) => {
                let body: schema::RolloutControl = match serde_json::from_slice(request.body()) {
                    Ok(body) => body,
                    Err(e) => return error_response(StatusCode::BAD_REQUEST, &format!("unable to decode body: {e}")),
                };
                let mut rollouts = self.rollouts.lock().unwrap();
                let Some(r) = rollouts.stored.get_mut(&id) else {
                    return error_response(StatusCode::NOT_FOUND, "rollout does not exist");
                };
                match decide_control(r, body) {
                    Ok(control) => {
                        r.control = control;
                        empty(StatusCode::NO_CONTENT)
                    }
                    Err(refused) => fleetd::api::reply::refused(&refused),
                }
            }
            // The original fleet has no batch route: its mux answers 404, and fleetctl falls back to one request per
            // unit — the wire these tests pin.
            Ok(Route::UnitBatch) => error_response(StatusCode::NOT_FOUND, "404 page not found"),
            Ok(other) => error_response(StatusCode::NOT_IMPLEMENTED, &format!("not served here: {other:?}")),
            Err(e) => error_response(StatusCode::NOT_FOUND, &format!("no route: {e:?}")),
        }
    }
}

impl ApiHandler for Recorder {
    async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
        let target = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
        self.requests.lock().unwrap().push(Recorded {
            method: request.method().to_string(),
            target,
            body: String::from_utf8_lossy(request.body()).into_owned(),
        });
        self.answer(&request)
    }
}

/// A recording endpoint with a directory of unit files to run fleetctl in.
struct Endpoint {
    url: String,
    recorder: Arc<Recorder>,
    dir: tempfile::TempDir,
    stop: CancellationToken,
}

impl Endpoint {
    async fn start() -> Endpoint {
        let listener = bind(&ListenAddress::Tcp("127.0.0.1:0".into())).await.expect("loopback binds");
        let url = format!("http://{}", listener.describe().trim_start_matches("tcp://"));
        let recorder = Arc::new(Recorder::default());
        let (_install, handler) = watch::channel(Some(recorder.clone()));
        let stop = CancellationToken::new();
        tokio::spawn(serve(vec![listener], handler, stop.clone()));
        Endpoint { url, recorder, dir: tempfile::tempdir().expect("temp dir"), stop }
    }

    /// Puts a unit into the registry without a request (the state a test starts from).
    fn given(&self, name: &str, text: &str, desired: JobState) -> &Self {
        let mut stored = Stored::new(text, desired);
        stored.converge(name);
        self.recorder.units.lock().unwrap().insert(name.to_string(), stored);
        self
    }

    /// Stops (or starts again) the pretend engine: rollouts stay as they are.
    fn engine_running(&self, running: bool) -> &Self {
        self.recorder.rollouts.lock().unwrap().engine_stopped = !running;
        self
    }

    /// Writes a unit file into the directory fleetctl runs in.
    fn file(&self, name: &str, text: &str) -> &Self {
        std::fs::write(self.dir.path().join(name), text).expect("unit file written");
        self
    }

    /// Runs fleetctl in the unit directory; fails the test on a non-zero exit. Returns the writes it sent (every
    /// request but GETs, whose number depends on how often a wait polled).
    async fn fleetctl(&self, args: &[&str]) -> Vec<String> {
        self.recorder.requests.lock().unwrap().clear();
        let out = run_fleetctl(&self.url, self.dir.path(), args).await;
        assert!(
            out.status.success(),
            "fleetctl {} exited {:?}\nstdout: {}\nstderr: {}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let requests = self.recorder.requests.lock().unwrap();
        let writes: Vec<String> = requests.iter().filter(|r| r.method != "GET").map(Recorded::line).collect();
        // Against a server without the batch route (the original), fleetctl asks for it once, is answered 404 and
        // falls back to the original's one request per unit: the wire these tests pin.
        let (probes, per_unit): (Vec<String>, Vec<String>) =
            writes.into_iter().partition(|line| line.starts_with("POST /fleet/v1/units-batch"));
        assert!(
            probes.len() <= 1,
            "fleetctl {} asked for the batch route {} times after a 404",
            args.join(" "),
            probes.len()
        );
        per_unit
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn run_fleetctl(url: &str, dir: &Path, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetctl"))
        .arg(format!("--endpoint={url}"))
        .args(args)
        .current_dir(dir)
        .env_remove("FLEETCTL_ENDPOINT")
        .env_remove("FLEETCTL_DRIVER")
        .env_remove("FLEETCTL_TUNNEL")
        .kill_on_drop(true)
        .output()
        .await
        .expect("fleetctl runs")
}

fn put(name: &str, body: &str) -> String {
    format!("PUT /fleet/v1/units/{name}?alt=json {body}")
}

fn set(name: &str, state: &str) -> String {
    put(name, &format!(r#"{{"desiredState":"{state}","name":"{name}"}}"#))
}

/// A new unit: name and options only, so the API creates it `inactive` (the original's request for `submit`).
fn create(name: &str, options: &str) -> String {
    put(name, &format!(r#"{{"name":"{name}","options":{options}}}"#))
}

/// A new unit created with the desired state of `load` or `start` in the same request (issue 35: one write; the
/// original sent `create` and then `set`, and its API accepts this one as well).
fn create_at(name: &str, state: &str, options: &str) -> String {
    put(name, &format!(r#"{{"desiredState":"{state}","name":"{name}","options":{options}}}"#))
}

/// A replacement of a scheduled unit: content, desired state and (unless `--keep-machine`) `reschedule`, in one
/// request.
fn replace(name: &str, state: &str, options: &str, reschedule: bool) -> String {
    let flag = if reschedule { r#","reschedule":true"# } else { "" };
    put(name, &format!(r#"{{"desiredState":"{state}","name":"{name}","options":{options}{flag}}}"#))
}

fn delete(name: &str) -> String {
    format!("DELETE /fleet/v1/units/{name}?alt=json")
}

/// Requests of a command over several units, per unit in the order they came (fleetctl sends the units' requests
/// in parallel, so only each unit's own order is defined).
fn per_unit(lines: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut units: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in lines {
        let unit = line.split("/fleet/v1/units/").nth(1).and_then(|rest| rest.split('?').next()).unwrap_or("?");
        units.entry(unit.to_string()).or_default().push(line.clone());
    }
    units
}

fn expect_per_unit<const N: usize>(expected: [(&str, Vec<String>); N]) -> BTreeMap<String, Vec<String>> {
    expected.into_iter().map(|(unit, lines)| (unit.to_string(), lines)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_creates_the_unit_and_load_and_start_create_it_at_their_state() {
    let ep = Endpoint::start().await;
    ep.file("hello.service", HELLO);
    assert_eq!(ep.fleetctl(&["submit", "hello.service"]).await, [create("hello.service", HELLO_OPTIONS)]);
    assert_eq!(ep.fleetctl(&["submit", "hello.service"]).await, Vec::<String>::new(), "identical: nothing to do");
    // Existing and identical: only the desired state changes.
    assert_eq!(ep.fleetctl(&["load", "hello.service"]).await, [set("hello.service", "loaded")]);
    assert_eq!(ep.fleetctl(&["start", "hello.service"]).await, [set("hello.service", "launched")]);
    assert_eq!(ep.fleetctl(&["start", "hello.service"]).await, Vec::<String>::new(), "already launched");

    for (cmd, state) in [("load", "loaded"), ("start", "launched")] {
        for no_block in [false, true] {
            let ep = Endpoint::start().await;
            ep.file("hello.service", HELLO);
            let args: &[&str] = if no_block { &[cmd, "--no-block", "hello"] } else { &[cmd, "hello"] };
            assert_eq!(
                ep.fleetctl(args).await,
                [create_at("hello.service", state, HELLO_OPTIONS)],
                "{}",
                args.join(" ")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_unload_and_restart_send_only_desired_states() {
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Launched);
    assert_eq!(ep.fleetctl(&["stop", "hello.service"]).await, [set("hello.service", "loaded")]);
    assert_eq!(ep.fleetctl(&["stop", "hello.service"]).await, Vec::<String>::new(), "already loaded");
    assert_eq!(ep.fleetctl(&["unload", "hello.service"]).await, [set("hello.service", "inactive")]);
    assert_eq!(ep.fleetctl(&["unload", "hello.service"]).await, Vec::<String>::new(), "already inactive");

    let ep = Endpoint::start().await;
    ep.given("a.service", HELLO, JobState::Launched).given("b.service", HELLO, JobState::Launched);
    assert_eq!(
        ep.fleetctl(&["stop", "--no-block", "a.service", "b.service"]).await,
        [set("a.service", "loaded"), set("b.service", "loaded")]
    );
    assert_eq!(ep.fleetctl(&["unload", "--no-block", "a.service"]).await, [set("a.service", "inactive")]);

    // restart: a launched unit is stopped, then started; a loaded one only started.
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Launched).given("loaded.service", HELLO, JobState::Loaded);
    assert_eq!(
        ep.fleetctl(&["restart", "hello.service"]).await,
        [set("hello.service", "loaded"), set("hello.service", "launched")]
    );
    assert_eq!(ep.fleetctl(&["restart", "loaded.service"]).await, [set("loaded.service", "launched")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_sends_a_bare_delete_per_unit() {
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Launched).given("t@.service", TEMPLATE, JobState::Inactive);
    // fleetctl deletes the units in parallel: their order on the wire is not defined.
    let mut sent = ep.fleetctl(&["destroy", "hello.service", "t@.service"]).await;
    sent.sort();
    assert_eq!(sent, [delete("hello.service"), delete("t@.service")]);
    ep.given("hello.service", HELLO, JobState::Launched);
    assert_eq!(ep.fleetctl(&["destroy", "--no-block", "hello.service"]).await, [delete("hello.service")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_reschedules_in_the_same_request_unless_keep_machine() {
    // start --replace of a launched unit: new content, desired state and reschedule in one PUT.
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Launched).file("hello.service", HELLO_V2);
    assert_eq!(
        ep.fleetctl(&["start", "--replace", "hello.service"]).await,
        [replace("hello.service", "launched", HELLO_V2_OPTIONS, true)],
        "start --replace of a launched unit must carry \"reschedule\":true (docs/fleetctl.md, help start)"
    );
    // Same content now: nothing is sent.
    assert_eq!(ep.fleetctl(&["start", "--replace", "hello.service"]).await, Vec::<String>::new());

    // --keep-machine: the same request without reschedule.
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Launched).file("hello.service", HELLO_V2);
    assert_eq!(
        ep.fleetctl(&["start", "--replace", "--keep-machine", "hello.service"]).await,
        [replace("hello.service", "launched", HELLO_V2_OPTIONS, false)]
    );

    // --no-restart (load and start): the new content with noRestart, never reschedule (it implies --keep-machine).
    for (command, state) in [("start", JobState::Launched), ("load", JobState::Loaded)] {
        let ep = Endpoint::start().await;
        ep.given("hello.service", HELLO, state).file("hello.service", HELLO_V2);
        let body = format!(
            r#"{{"desiredState":"{state}","name":"hello.service","noRestart":true,"options":{HELLO_V2_OPTIONS}}}"#
        );
        assert_eq!(
            ep.fleetctl(&[command, "--replace", "--no-restart", "hello.service"]).await,
            [put("hello.service", &body)],
            "{command} --replace --no-restart must carry \"noRestart\":true and no reschedule"
        );
    }

    // load --replace of a loaded unit, with and without --keep-machine.
    for (keep, reschedule) in [(false, true), (true, false)] {
        let ep = Endpoint::start().await;
        ep.given("hello.service", HELLO, JobState::Loaded).file("hello.service", HELLO_V2);
        let mut args = vec!["load", "--replace"];
        if keep {
            args.push("--keep-machine");
        }
        args.push("hello.service");
        assert_eq!(
            ep.fleetctl(&args).await,
            [replace("hello.service", "loaded", HELLO_V2_OPTIONS, reschedule)],
            "load --replace keep-machine={keep}"
        );
    }

    // An inactive unit has no machine: its content is replaced like a creation (no desired state, so it stays
    // inactive), then the command's state is set.
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Inactive).file("hello.service", HELLO_V2);
    assert_eq!(
        ep.fleetctl(&["submit", "--replace", "hello.service"]).await,
        [create("hello.service", HELLO_V2_OPTIONS)]
    );
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Inactive).file("hello.service", HELLO_V2);
    assert_eq!(
        ep.fleetctl(&["start", "--replace", "--no-block", "hello.service"]).await,
        [create("hello.service", HELLO_V2_OPTIONS), set("hello.service", "launched")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_created_from_the_local_or_the_registry_template() {
    // A local template next to the argument.
    let ep = Endpoint::start().await;
    ep.file("hello@.service", TEMPLATE);
    assert_eq!(
        per_unit(&ep.fleetctl(&["start", "hello@1.service", "hello@2.service"]).await),
        expect_per_unit([
            ("hello@1.service", vec![create_at("hello@1.service", "launched", TEMPLATE_OPTIONS)]),
            ("hello@2.service", vec![create_at("hello@2.service", "launched", TEMPLATE_OPTIONS)]),
        ])
    );
    // The template itself is submitted (inactive) and never activated.
    assert_eq!(ep.fleetctl(&["submit", "hello@.service"]).await, [create("hello@.service", TEMPLATE_OPTIONS)]);

    // Only in the registry: its options are used.
    let ep = Endpoint::start().await;
    ep.given("reg@.service", TEMPLATE, JobState::Inactive);
    assert_eq!(
        ep.fleetctl(&["load", "--no-block", "reg@7.service"]).await,
        [create_at("reg@7.service", "loaded", TEMPLATE_OPTIONS)]
    );

    // Replacing instances from a changed local template (issue #1691), rescheduled and kept.
    for (keep, reschedule) in [(false, true), (true, false)] {
        let ep = Endpoint::start().await;
        ep.given("hello@.service", TEMPLATE, JobState::Inactive)
            .given("hello@1.service", TEMPLATE, JobState::Launched)
            .given("hello@2.service", TEMPLATE, JobState::Launched)
            .file("hello@.service", TEMPLATE_V2);
        let mut args = vec!["start", "--replace"];
        if keep {
            args.push("--keep-machine");
        }
        args.extend(["hello@1.service", "hello@2.service"]);
        assert_eq!(
            per_unit(&ep.fleetctl(&args).await),
            expect_per_unit([
                ("hello@1.service", vec![replace("hello@1.service", "launched", TEMPLATE_V2_OPTIONS, reschedule)]),
                ("hello@2.service", vec![replace("hello@2.service", "launched", TEMPLATE_V2_OPTIONS, reschedule)]),
            ]),
            "keep-machine={keep}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_units_and_escaped_names() {
    let ep = Endpoint::start().await;
    ep.file("global.service", GLOBAL);
    assert_eq!(
        ep.fleetctl(&["start", "global.service"]).await,
        [create_at("global.service", "launched", GLOBAL_OPTIONS)]
    );
    assert_eq!(ep.fleetctl(&["stop", "global.service"]).await, [set("global.service", "loaded")]);
    assert_eq!(ep.fleetctl(&["unload", "global.service"]).await, [set("global.service", "inactive")]);

    // Instance names with characters outside the unreserved set are percent-encoded in the path only.
    let ep = Endpoint::start().await;
    ep.given("esc@.service", TEMPLATE, JobState::Inactive);
    let name = r"esc@a\x2db:c.service";
    let path = "esc@a%5Cx2db:c.service";
    let json_name = r"esc@a\\x2db:c.service";
    assert_eq!(
        ep.fleetctl(&["load", "--no-block", name]).await,
        [put(path, &format!(r#"{{"desiredState":"loaded","name":"{json_name}","options":{TEMPLATE_OPTIONS}}}"#))]
    );
}

/// Issue 37: a unit file whose line gives an option an empty name or section is refused before anything is sent,
/// naming the file, the line and its text; a parse error keeps the original's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_unit_file_names_its_line_and_sends_nothing() {
    let ep = Endpoint::start().await;
    ep.file("bad.service", "[Service]\nExecStart=/bin/true\n=value\n");
    ep.file("blank.service", "[Unit]\nDescription=x\n\n[]\nExecStart=/bin/true\n");
    ep.file("garbage.service", "[Unit\n");
    let cases = [
        ("bad.service", "Error creating units: bad.service:3: \"=value\": option has an empty name\n"),
        ("blank.service", "Error creating units: blank.service:4: \"[]\": section has an empty name\n"),
        (
            "garbage.service",
            "Error creating units: failed getting Unit(garbage.service) from file: unable to find end of section\n",
        ),
    ];
    for (file, stderr) in cases {
        ep.recorder.requests.lock().unwrap().clear();
        let out = run_fleetctl(&ep.url, ep.dir.path(), &["submit", file]).await;
        assert_eq!(
            (out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()),
            (Some(1), stderr),
            "submit {file}"
        );
        let requests = ep.recorder.requests.lock().unwrap();
        let writes: Vec<String> = requests.iter().filter(|r| r.method != "GET").map(Recorded::line).collect();
        assert!(writes.is_empty(), "submit {file} sent {writes:?}");
    }
}

/// The rollout ID in the path of a recorded `PUT|PATCH /fleet/v1/rollouts/<id>?alt=json ...` line.
fn rollout_id_of(line: &str) -> String {
    let rest = line.split("/fleet/v1/rollouts/").nth(1).unwrap_or_else(|| panic!("not a rollout request: {line}"));
    rest.split('?').next().unwrap().to_string()
}

fn put_rollout(id: &str, body: &str) -> String {
    format!("PUT /fleet/v1/rollouts/{id}?alt=json {body}")
}

fn patch_rollout(id: &str, action: &str) -> String {
    format!(r#"PATCH /fleet/v1/rollouts/{id}?alt=json {{"action":"{action}"}}"#)
}

/// A generated rollout ID: the first unit's name without its type (characters outside `A-Za-z0-9_.-` as `_`),
/// `-`, Unix milliseconds.
fn assert_generated_id(id: &str, stem: &str) {
    let ms = id.strip_prefix(&format!("{stem}-")).unwrap_or_else(|| panic!("{id} does not start with {stem}-"));
    assert!(ms.len() == 13 && ms.bytes().all(|b| b.is_ascii_digit()), "{id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_replace_sends_one_rollout_with_every_changed_unit_and_the_default_pace() {
    let ep = Endpoint::start().await;
    ep.given("hello@.service", TEMPLATE, JobState::Inactive)
        .given("hello@1.service", TEMPLATE, JobState::Launched)
        .given("hello@2.service", TEMPLATE, JobState::Launched)
        .file("hello@.service", TEMPLATE_V2);
    let sent =
        ep.fleetctl(&["start", "--replace", "--rolling", "--no-block", "hello@1.service", "hello@2.service"]).await;
    let id = rollout_id_of(&sent[0]);
    assert_generated_id(&id, "hello_1");
    assert_eq!(
        sent,
        [put_rollout(
            &id,
            &format!(
                r#"{{"kind":"replace","units":[{{"name":"hello@1.service","options":{TEMPLATE_V2_OPTIONS}}},{{"name":"hello@2.service","options":{TEMPLATE_V2_OPTIONS}}}]}}"#
            )
        )],
        "one PUT with every unit's new options and the defaults (max-unavailable 1, min-healthy 10s, \
         health-timeout 5m, on-failure pause); no unit PUT"
    );
    // The new versions are stored: nothing differs any more, nothing is sent.
    assert_eq!(
        ep.fleetctl(&["start", "--replace", "--rolling", "hello@1.service", "hello@2.service"]).await,
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_replace_carries_the_pace_flags_and_waits_without_writing() {
    let ep = Endpoint::start().await;
    ep.given("global.service", GLOBAL, JobState::Launched)
        .file("global.service", GLOBAL.replace("1000", "2000").as_str());
    let options = r#"[{"name":"ExecStart","section":"Service","value":"/bin/sleep 2000"},{"name":"Global","section":"X-Fleet","value":"true"}]"#;
    // The pretend engine completes it (min-healthy 0), so the command waits and exits 0 with no other write.
    let sent = ep
        .fleetctl(&[
            "start",
            "--replace",
            "--rolling",
            "--max-unavailable=3",
            "--min-healthy=0",
            "--health-timeout=1m30s",
            "--on-failure=rollback",
            "global.service",
        ])
        .await;
    let id = rollout_id_of(&sent[0]);
    assert_generated_id(&id, "global");
    assert_eq!(
        sent,
        [put_rollout(
            &id,
            &format!(
                r#"{{"kind":"replace","units":[{{"name":"global.service","options":{options}}}],"maxUnavailable":3,"minHealthyMs":0,"healthTimeoutMs":90000,"onFailure":"rollback"}}"#
            )
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_sends_names_only() {
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Launched).given("global.service", GLOBAL, JobState::Launched);
    let sent =
        ep.fleetctl(&["restart", "--rolling", "--min-healthy=500ms", "--no-block", "hello", "global.service"]).await;
    let id = rollout_id_of(&sent[0]);
    assert_generated_id(&id, "hello");
    assert_eq!(
        sent,
        [put_rollout(
            &id,
            r#"{"kind":"restart","units":[{"name":"hello.service"},{"name":"global.service"}],"minHealthyMs":500}"#
        )],
        "a restart rollout: unit names, no options, no desired-state PUTs (plain restart's loaded/launched)"
    );
    // Waiting: the pretend engine and agent restart it, the command ends with no other write.
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Launched);
    let sent = ep.fleetctl(&["restart", "--rolling", "--min-healthy=0", "hello.service"]).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].contains(r#"{"kind":"restart","units":[{"name":"hello.service"}]"#), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_pause_resume_and_abort_patch_the_newest_rollout_in_progress() {
    let ep = Endpoint::start().await;
    ep.given("hello.service", HELLO, JobState::Launched).file("hello.service", HELLO_V2).engine_running(false);
    let id = rollout_id_of(&ep.fleetctl(&["start", "--replace", "--rolling", "--no-block", "hello.service"]).await[0]);
    assert_eq!(ep.fleetctl(&["rollout-pause", "hello.service"]).await, [patch_rollout(&id, "pause")]);
    assert_eq!(ep.fleetctl(&["rollout-resume", "hello"]).await, [patch_rollout(&id, "run")]);
    assert_eq!(ep.fleetctl(&["rollout-status", "--no-block", &id]).await, Vec::<String>::new(), "status only reads");
    assert_eq!(ep.fleetctl(&["rollout-abort", &id]).await, [patch_rollout(&id, "abort")]);
}

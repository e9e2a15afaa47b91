//! The live cluster page at `/ui/` (issue 17): machines (with their metadata) as columns, units as rows, each cell
//! the unit's state on that machine; a unit's detail at `/ui/units/<name>`; kept live by server-sent events at
//! `/ui/events` from one shared registry watch. Read-only (GET only), served on the API listeners behind
//! the same TLS and roles as the API, so the `read` role may see it. For the `admin` role the live page also offers
//! actions (issue 38: pause, resume, abort, promote, roll back, cordon, uncordon, drain), each previewed by
//! [`fleet_core::preview`] — what `fleetctl plan` prints — and confirmed before the page's script sends the API
//! write the preview names; [`super::csrf`] refuses browser writes that do not come from this page. [`hub::Hub`]
//! is the shared watch; `board` the pure model and diff; `render` the HTML.
//!
//! * `/ui/` — the page: the board rendered on the server (readable without JavaScript) plus `app.js`, which
//!   follows `/ui/events` and rewrites rows in place, never reloading the page.
//! * `/ui/?plain` — the same table without the script.
//! * `/ui/units/<name>` — a unit's detail page (`?fragment`: the panel the live page shows).
//! * `/ui/preview?action=A&subject=S` — JSON: what action `A` (`cordon`, `pause`, `rollback`, …) on `S` (a machine,
//!   rollout or unit) would change and the API request that performs it; `409` with the reason when it cannot be
//!   taken. A read: it changes nothing.
//! * `/ui/app.js`, `/ui/style.css` — the front end, hand-written and embedded in the binary.

mod board;
pub(in crate::api) mod hub;
mod render;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;

use fleet_core::api_rules;

use super::query;
use super::reply;
use super::route::decode_segment;
use super::serve::StreamedBody;
use hub::Hub;
use render::Mode;

const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// What the page may load: its own script and style sheet, nothing inline, nothing from elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /ui…`: `rest` is the path after `/ui`; `token` the admin role's action token (none: no actions).
pub fn respond(hub: &Hub, rest: &str, query: Option<&str>, token: Option<&str>) -> Response<Bytes> {
    let pairs = query::pairs(query);
    let flag = |name: &str| query::values(&pairs, name).next().is_some();
    match rest {
        "" => {
            let mut response = reply::status(StatusCode::MOVED_PERMANENTLY);
            response.headers_mut().insert(header::LOCATION, HeaderValue::from_static("/ui/"));
            response
        }
        "/" => {
            let mode = if flag("plain") { Mode::Plain } else { Mode::Live };
            html(render::page(&board::board(&hub.snapshot()), mode, token))
        }
        "/preview" => {
            let action = query::values(&pairs, "action").next().unwrap_or_default();
            let subject = query::values(&pairs, "subject").next().unwrap_or_default();
            preview(&hub.snapshot(), action, subject)
        }
        "/app.js" => asset(APP_JS, "text/javascript; charset=utf-8"),
        "/style.css" => asset(STYLE_CSS, "text/css; charset=utf-8"),
        _ => {
            let Some(name) = rest.strip_prefix("/units/").filter(|n| !n.is_empty() && !n.contains('/')) else {
                return reply::error(StatusCode::NOT_FOUND, "no such page under /ui/");
            };
            let Some(name) = decode_segment(name) else {
                return reply::error(
                    StatusCode::BAD_REQUEST,
                    "unit name in the path is not valid percent-encoded UTF-8",
                );
            };
            let snapshot = hub.snapshot();
            match board::detail(&snapshot, &name) {
                Some(detail) => {
                    html(render::detail(&detail, &hub.history(&name), &board::columns(&snapshot), flag("fragment")))
                }
                None => reply::error(StatusCode::NOT_FOUND, &format!("unit {name:?} does not exist")),
            }
        }
    }
}

/// `GET /ui/preview`: [`fleet_core::preview::preview`] of the action on the cluster as this fleetd's API shows it
/// (the view `fleetctl plan` reads over the API, built here from the same snapshot by the same `api_rules`).
fn preview(snapshot: &fleet_registry::Snapshot, action: &str, subject: &str) -> Response<Bytes> {
    let intent = match fleet_core::preview::Intent::parse(action, subject) {
        Ok(intent) => intent,
        Err(message) => return reply::error(StatusCode::BAD_REQUEST, &message),
    };
    let mut states: Vec<_> = snapshot.unit_states().chain(snapshot.unit_states_in_doubt()).collect();
    states.sort_by(|a, b| (&a.name, &a.machine_id).cmp(&(&b.name, &b.machine_id)));
    let mut view = fleet_core::preview::ClusterView {
        units: snapshot.units().filter_map(|v| api_rules::unit(&v, false)).collect(),
        states: states
            .into_iter()
            .map(|s| {
                let running = snapshot.running_hash(&s.name, &s.machine_id).map(str::to_string);
                api_rules::state(s, running.as_deref())
            })
            .collect(),
        machines: snapshot.machines().map(api_rules::machine).collect(),
        rollouts: api_rules::stored_rollouts(snapshot),
        histories: Default::default(),
    };
    if let Some(unit) = intent.history_of()
        && let Some(object) = snapshot.unit_record(unit).and_then(|r| r.object())
    {
        view.histories.insert(unit.to_string(), api_rules::history(object, |hash| snapshot.body(hash).cloned()));
    }
    match fleet_core::preview::preview(&view, &intent, fleet_core::model::now_ms()) {
        Ok(preview) => {
            let mut response = reply::json(&preview);
            response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(message) => reply::error(StatusCode::CONFLICT, &message),
    }
}

/// `GET /ui/events`: the page's server-sent events (see [`hub::Hub::events`]).
/// A page's event stream; `keep` is held as long as the page is open (the view its hub follows).
pub fn events(hub: &Hub, keep: impl Send + 'static) -> Response<StreamedBody> {
    let frames = hub.events().map(move |frame| {
        let _open = &keep;
        Ok(hyper::body::Frame::data(frame))
    });
    let mut response = Response::new(http_body_util::StreamBody::new(frames).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn html(body: String) -> Response<Bytes> {
    let mut response = reply::text(body, "text/html; charset=utf-8");
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

fn asset(text: &'static str, content_type: &'static str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from_static(text.as_bytes()));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

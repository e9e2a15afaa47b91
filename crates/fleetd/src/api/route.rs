//! Routing of HTTP API v1 requests (spec §8.2): which resource a path names and which methods it accepts, with Go
//! `ServeMux` path cleaning. Pure: a path and a method in, a [`Route`] or a [`RouteError`] out.
//!
//! A name in a path (a unit, a unit's state, a rollout) is decided here, once, the same for every method
//! ([`check_unit_name`], issue 37): a request that writes under a name no unit can have is refused with 400
//! naming the problem; a request that looks one up (GET, DELETE) finds nothing, the original's 404 for any unknown
//! unit. So no handler, and never the registry, sees a name that cannot be one.

use std::borrow::Cow;

use http::{Method, StatusCode};

use fleet_core::unit::name::validate_name;
use fleet_core::unit::parse::go_lossy;
use fleet_registry::{Component, check_component};

/// A request the API can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Discovery,
    ListMachines,
    PatchMachines,
    /// `PUT /machines/<id>/cordon` (issue 38): the machine takes no new unit.
    CordonMachine(String),
    /// `DELETE /machines/<id>/cordon`: it takes units again.
    UncordonMachine(String),
    ListUnits,
    GetUnit(String),
    PutUnit(String),
    DeleteUnit(String),
    ListStates,
    GetState(String),
    Metrics,
    /// Extensions of this implementation (rollouts, issue 12).
    /// The stored versions of a unit, newest first.
    UnitHistory(String),
    ListRollouts,
    GetRollout(String),
    PutRollout(String),
    PatchRollout(String),
    /// Many unit writes in one request (`POST /units-batch`, issue 16).
    UnitBatch,
    /// The audit trail (issue 38): `GET /audit?unit=&since=&limit=`.
    Audit,
    /// The live cluster page (issue 17): the path after `/ui` (`""`, `/`, `/units/<name>`, …).
    Ui(String),
}

impl Route {
    /// Whether the answer is read from the registry view (the reflector's snapshot), or the write decided on it
    /// (a unit's PUT tells a creation from a change of state by it): such a request first catches the view up with
    /// etcd, so it sees every write that succeeded before it, through any fleetd (issue 37), and never decides on
    /// a view of the API's own that has not listed yet (`view::ApiView`). The metrics, the audit trail (read from
    /// etcd) and the cluster page (which follows the view live) do not wait.
    pub fn uses_view(&self) -> bool {
        !matches!(self, Route::Discovery | Route::Metrics | Route::Audit | Route::Ui(_))
    }
}

/// A request the API refuses before any handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// 301 to the cleaned path (query string kept by the caller).
    Redirect(String),
    NotFound,
    /// 405 with the given message (possibly empty).
    MethodNotAllowed(&'static str),
    /// 400 with the given message (discovery answers non-GET methods with 400).
    BadRequest(&'static str),
    /// A name in the path refused by [`check_unit_name`] (or its rollout-ID twin).
    Name(NameRefused),
}

/// A refused name: 400 naming the problem, or 404 with the original's message for a name that finds nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameRefused {
    pub status: StatusCode,
    pub message: Cow<'static, str>,
}

impl NameRefused {
    fn bad(message: impl Into<Cow<'static, str>>) -> NameRefused {
        NameRefused { status: StatusCode::BAD_REQUEST, message: message.into() }
    }

    fn missing(message: &'static str) -> NameRefused {
        NameRefused { status: StatusCode::NOT_FOUND, message: message.into() }
    }
}

impl From<NameRefused> for RouteError {
    fn from(refused: NameRefused) -> RouteError {
        RouteError::Name(refused)
    }
}

/// What a request does with the name in its path, which decides how a name no unit can have is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameUse {
    /// Creates or changes what the name names (PUT): a bad name is the client's mistake, a 400 naming it.
    Writes,
    /// Finds what the name names (GET, DELETE): a bad name finds nothing, as any unknown name does.
    Finds,
}

/// The original's 404 messages for names that find nothing.
pub const NO_UNIT: &str = "unit does not exist";
pub const NO_UNIT_STATE: &str = "unit state does not exist";
pub const NO_ROLLOUT: &str = fleet_core::api_rules::NO_ROLLOUT;

/// Decides a unit name (already percent-decoded) for a request that `uses` it: valid per spec §4.4, or refused
/// as [`NameUse`] says. The one decision for `/units/<name>`, `/units/<name>/history`, `/state/<name>` and the
/// names in `POST /units-batch`.
pub fn check_unit_name(name: &str, uses: NameUse, missing: &'static str) -> Result<(), NameRefused> {
    match (validate_name(name), uses) {
        (Ok(()), _) => Ok(()),
        (Err(err), NameUse::Writes) => Err(NameRefused::bad(err.to_string())),
        (Err(_), NameUse::Finds) => Err(NameRefused::missing(missing)),
    }
}

/// A path segment naming a unit, decoded and decided by [`check_unit_name`].
fn unit_segment(segment: &str, uses: NameUse, missing: &'static str) -> Result<String, RouteError> {
    let name = decode_name(segment)?;
    check_unit_name(&name, uses, missing)?;
    Ok(name)
}

/// A path segment naming a rollout, decoded and decided as a unit name is (the registry's rollout-ID alphabet).
fn rollout_segment(segment: &str, uses: NameUse) -> Result<String, RouteError> {
    let id = decode_name(segment)?;
    match (check_component(Component::RolloutId, &id), uses) {
        (Ok(()), _) => Ok(id),
        (Err(err), NameUse::Writes) => Err(NameRefused::bad(err.to_string()).into()),
        (Err(_), NameUse::Finds) => Err(NameRefused::missing(NO_ROLLOUT).into()),
    }
}

/// A path segment naming a machine, decoded: one the registry cannot hold finds nothing (`404 machine does not
/// exist`), for both methods, as no machine can have it.
fn machine_segment(segment: &str) -> Result<String, RouteError> {
    let id = decode_name(segment)?;
    match check_component(Component::MachineId, &id) {
        Ok(()) => Ok(id),
        Err(_) => Err(NameRefused::missing(fleet_core::api_rules::NO_MACHINE).into()),
    }
}

/// A name segment percent-decoded. A malformed escape is refused for every method (no name was sent at all);
/// bytes that are not UTF-8 become U+FFFD, as Go reads them, and fail the name check like any invalid character.
fn decode_name(segment: &str) -> Result<String, RouteError> {
    match percent_decode(segment) {
        Some(bytes) => Ok(go_lossy(&bytes).into_owned()),
        None => Err(NameRefused::bad(format!(
            "malformed percent-encoding in path segment {}",
            fleet_core::go::quote(segment)
        ))
        .into()),
    }
}

/// Whether `method` writes under the name in its path.
fn uses_of(method: &Method) -> NameUse {
    if *method == Method::PUT { NameUse::Writes } else { NameUse::Finds }
}

const PREFIXES: [&str; 2] = ["/fleet/v1", "/v1-alpha"];

/// Resolves `path` (already percent-decoded per segment by [`decode_segment`] where needed) for `method`.
pub fn route(method: &Method, raw_path: &str) -> Result<Route, RouteError> {
    let cleaned = clean_path(raw_path);
    if cleaned != raw_path {
        return Err(RouteError::Redirect(cleaned));
    }
    if raw_path == "/" {
        return Err(RouteError::MethodNotAllowed(""));
    }
    if let Some(rest) = raw_path.strip_prefix("/ui").filter(|r| r.is_empty() || r.starts_with('/')) {
        return match *method {
            Method::GET | Method::HEAD => Ok(Route::Ui(rest.to_string())),
            _ => Err(RouteError::MethodNotAllowed("only GET supported against this resource")),
        };
    }
    if raw_path == "/metrics" {
        return if method == Method::GET { Ok(Route::Metrics) } else { Err(RouteError::MethodNotAllowed("")) };
    }
    let Some(rest) = PREFIXES.iter().find_map(|p| raw_path.strip_prefix(p)) else {
        return Err(RouteError::NotFound);
    };
    match rest {
        "" => Err(RouteError::MethodNotAllowed("")),
        "/discovery" => match *method {
            Method::GET => Ok(Route::Discovery),
            _ => Err(RouteError::BadRequest("only HTTP GET supported against this resource")),
        },
        "/machines" => match *method {
            Method::GET => Ok(Route::ListMachines),
            Method::PATCH => Ok(Route::PatchMachines),
            _ => Err(RouteError::MethodNotAllowed("only GET and PATCH supported against this resource")),
        },
        "/units" => match *method {
            Method::GET => Ok(Route::ListUnits),
            _ => Err(RouteError::MethodNotAllowed("only GET supported against this resource")),
        },
        "/units-batch" => match *method {
            Method::POST => Ok(Route::UnitBatch),
            _ => Err(RouteError::MethodNotAllowed("only POST supported against this resource")),
        },
        "/state" => match *method {
            Method::GET => Ok(Route::ListStates),
            _ => Err(RouteError::MethodNotAllowed("only GET supported against this resource")),
        },
        "/audit" => match *method {
            Method::GET => Ok(Route::Audit),
            _ => Err(RouteError::MethodNotAllowed("only GET supported against this resource")),
        },
        "/rollouts" => match *method {
            Method::GET => Ok(Route::ListRollouts),
            _ => Err(RouteError::MethodNotAllowed("only GET supported against this resource")),
        },
        _ => {
            if let Some(name) = single_segment(rest, "/units/") {
                // The method first, as the original's handler switches on it before it reads the name.
                if !matches!(*method, Method::GET | Method::PUT | Method::DELETE) {
                    return Err(RouteError::MethodNotAllowed(
                        "only GET, PUT and DELETE supported against this resource",
                    ));
                }
                let name = unit_segment(name, uses_of(method), NO_UNIT)?;
                return Ok(match *method {
                    Method::GET => Route::GetUnit(name),
                    Method::PUT => Route::PutUnit(name),
                    _ => Route::DeleteUnit(name),
                });
            }
            if let Some(name) = rest.strip_prefix("/units/").and_then(|r| r.strip_suffix("/history")) {
                if !name.is_empty() && !name.contains('/') {
                    if *method != Method::GET {
                        return Err(RouteError::MethodNotAllowed("only GET supported against this resource"));
                    }
                    return Ok(Route::UnitHistory(unit_segment(name, NameUse::Finds, NO_UNIT)?));
                }
            }
            if let Some(id) = rest.strip_prefix("/machines/").and_then(|r| r.strip_suffix("/cordon")) {
                if !id.is_empty() && !id.contains('/') {
                    if !matches!(*method, Method::PUT | Method::DELETE) {
                        return Err(RouteError::MethodNotAllowed(
                            "only PUT and DELETE supported against this resource",
                        ));
                    }
                    let id = machine_segment(id)?;
                    return Ok(if *method == Method::PUT {
                        Route::CordonMachine(id)
                    } else {
                        Route::UncordonMachine(id)
                    });
                }
            }
            if let Some(id) = single_segment(rest, "/rollouts/") {
                if !matches!(*method, Method::GET | Method::PUT | Method::PATCH) {
                    return Err(RouteError::MethodNotAllowed(
                        "only GET, PUT and PATCH supported against this resource",
                    ));
                }
                let id = rollout_segment(id, uses_of(method))?;
                return Ok(match *method {
                    Method::GET => Route::GetRollout(id),
                    Method::PUT => Route::PutRollout(id),
                    _ => Route::PatchRollout(id),
                });
            }
            if let Some(name) = single_segment(rest, "/state/") {
                if *method != Method::GET {
                    return Err(RouteError::MethodNotAllowed("only GET supported against this resource"));
                }
                return Ok(Route::GetState(unit_segment(name, NameUse::Finds, NO_UNIT_STATE)?));
            }
            Err(RouteError::NotFound)
        }
    }
}

fn single_segment<'a>(rest: &'a str, collection: &str) -> Option<&'a str> {
    rest.strip_prefix(collection).filter(|name| !name.is_empty() && !name.contains('/'))
}

/// Percent-decodes one path segment; `None` for malformed escapes or non-UTF-8 results.
pub fn decode_segment(segment: &str) -> Option<String> {
    String::from_utf8(percent_decode(segment)?).ok()
}

/// Percent-decodes one path segment into bytes; `None` for a malformed escape.
fn percent_decode(segment: &str) -> Option<Vec<u8>> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            // Two hex digits exactly: `from_str_radix` alone would also take a sign (`%+1`).
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let text = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(text, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Go `ServeMux`'s cleanPath: `path.Clean` semantics, rooted, keeping a trailing slash.
pub fn clean_path(path: &str) -> String {
    if path.is_empty() {
        return "/".into();
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut cleaned = format!("/{}", parts.join("/"));
    if path.ends_with('/') && cleaned != "/" {
        cleaned.push('/');
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_of_spec_8_2() {
        let get = Method::GET;
        assert_eq!(route(&get, "/fleet/v1/discovery"), Ok(Route::Discovery));
        assert_eq!(route(&get, "/v1-alpha/units"), Ok(Route::ListUnits));
        assert_eq!(route(&Method::PATCH, "/fleet/v1/machines"), Ok(Route::PatchMachines));
        assert_eq!(route(&get, "/fleet/v1/units/hello%40.service"), Ok(Route::GetUnit("hello@.service".into())));
        assert_eq!(route(&Method::PUT, "/fleet/v1/units/a.service"), Ok(Route::PutUnit("a.service".into())));
        assert_eq!(route(&Method::DELETE, "/fleet/v1/units/a.service"), Ok(Route::DeleteUnit("a.service".into())));
        assert_eq!(route(&get, "/fleet/v1/state/a.service"), Ok(Route::GetState("a.service".into())));
        assert_eq!(route(&get, "/metrics"), Ok(Route::Metrics));
        assert_eq!(route(&Method::POST, "/fleet/v1/units-batch"), Ok(Route::UnitBatch));
        assert_eq!(
            route(&get, "/fleet/v1/units-batch"),
            Err(RouteError::MethodNotAllowed("only POST supported against this resource"))
        );
        assert_eq!(route(&get, "/ui/"), Ok(Route::Ui("/".into())));
        assert_eq!(route(&get, "/ui"), Ok(Route::Ui("".into())));
        assert_eq!(route(&get, "/ui/units/a%40b.service"), Ok(Route::Ui("/units/a%40b.service".into())));
        assert_eq!(route(&get, "/uix"), Err(RouteError::NotFound));
        assert_eq!(
            route(&Method::PUT, "/ui/"),
            Err(RouteError::MethodNotAllowed("only GET supported against this resource"))
        );
    }

    #[test]
    fn refusals_of_spec_8_2() {
        use RouteError::*;
        let get = Method::GET;
        assert_eq!(route(&get, "/"), Err(MethodNotAllowed("")));
        assert_eq!(route(&Method::POST, "/fleet/v1"), Err(MethodNotAllowed("")));
        assert_eq!(route(&get, "/fleet/v1/"), Err(NotFound));
        assert_eq!(route(&get, "/fleet/v1/bogus"), Err(NotFound));
        assert_eq!(route(&get, "/fleet/v1/machines/"), Err(NotFound));
        assert_eq!(route(&get, "/fleet/v1/units/"), Err(NotFound));
        assert_eq!(route(&get, "/fleet/v1/units/a/b"), Err(NotFound));
        assert_eq!(
            route(&Method::POST, "/fleet/v1/units"),
            Err(MethodNotAllowed("only GET supported against this resource"))
        );
        assert_eq!(
            route(&Method::POST, "/fleet/v1/units/a.service"),
            Err(MethodNotAllowed("only GET, PUT and DELETE supported against this resource"))
        );
        assert_eq!(
            route(&Method::DELETE, "/fleet/v1/machines"),
            Err(MethodNotAllowed("only GET and PATCH supported against this resource"))
        );
        assert_eq!(
            route(&Method::POST, "/fleet/v1/discovery"),
            Err(BadRequest("only HTTP GET supported against this resource"))
        );
        assert_eq!(route(&get, "//fleet/v1/units"), Err(Redirect("/fleet/v1/units".into())));
        assert_eq!(route(&get, "/fleet/v1/units/../machines"), Err(Redirect("/fleet/v1/machines".into())));
    }

    /// Issue 37: a name decided once for every method — a write under a bad name is a 400 naming the problem, a
    /// look-up finds nothing (the original's 404), a malformed escape is a 400 for every method.
    #[test]
    fn names_are_decided_the_same_for_every_method() {
        let missing = |m: &'static str| Err(RouteError::Name(NameRefused::missing(m)));
        let bad = |m: &str| Err(RouteError::Name(NameRefused::bad(m.to_string())));
        for path in ["/fleet/v1/units/..%2f..%2fetc", "/fleet/v1/units/%00x.service", "/fleet/v1/units/a%ff.service"] {
            assert_eq!(route(&Method::GET, path), missing(NO_UNIT), "GET {path}");
            assert_eq!(route(&Method::DELETE, path), missing(NO_UNIT), "DELETE {path}");
            let history = format!("{path}/history");
            assert_eq!(route(&Method::GET, &history), missing(NO_UNIT), "GET {history}");
            let state = path.replace("/units/", "/state/");
            assert_eq!(route(&Method::GET, &state), missing(NO_UNIT_STATE), "GET {state}");
        }
        assert_eq!(route(&Method::PUT, "/fleet/v1/units/..%2f..%2fetc"), bad(r#"invalid unit type: "/etc""#));
        assert_eq!(route(&Method::PUT, "/fleet/v1/units/%00x.service"), bad(r"invalid character '\x00' in unit name"));
        assert_eq!(
            route(&Method::PUT, "/fleet/v1/units/a%ff.service"),
            bad("invalid character '\u{fffd}' in unit name")
        );
        for m in [Method::GET, Method::PUT, Method::DELETE] {
            assert_eq!(
                route(&m, "/fleet/v1/units/a%zz.service"),
                bad(r#"malformed percent-encoding in path segment "a%zz.service""#),
                "{m}"
            );
        }
        assert_eq!(
            route(&Method::POST, "/fleet/v1/units/%00x.service"),
            Err(RouteError::MethodNotAllowed("only GET, PUT and DELETE supported against this resource")),
            "the method is decided before the name"
        );
        assert_eq!(route(&Method::GET, "/fleet/v1/rollouts/a%2Fb"), missing(NO_ROLLOUT));
        assert_eq!(route(&Method::PATCH, "/fleet/v1/rollouts/a%20b"), missing(NO_ROLLOUT));
        let Err(RouteError::Name(refused)) = route(&Method::PUT, "/fleet/v1/rollouts/a%2Fb") else {
            panic!("a rollout ID with '/' is refused");
        };
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(refused.message.contains("a/b"), "{}", refused.message);
        // Valid names still reach their handlers, whatever the registry holds.
        assert_eq!(
            route(&Method::DELETE, "/fleet/v1/units/x%40y.service"),
            Ok(Route::DeleteUnit("x@y.service".into()))
        );
        assert_eq!(route(&Method::PUT, "/fleet/v1/rollouts/r-1"), Ok(Route::PutRollout("r-1".into())));
    }

    /// Issue 38: `/machines/<id>/cordon` takes PUT and DELETE; an ID no machine can have finds nothing.
    #[test]
    fn cordon_routes() {
        let path = "/fleet/v1/machines/8363165e6276f500b71169eca9b3f76b/cordon";
        let id = || "8363165e6276f500b71169eca9b3f76b".to_string();
        assert_eq!(route(&Method::PUT, path), Ok(Route::CordonMachine(id())));
        assert_eq!(route(&Method::DELETE, path), Ok(Route::UncordonMachine(id())));
        assert_eq!(route(&Method::PUT, "/v1-alpha/machines/m1/cordon"), Ok(Route::CordonMachine("m1".into())));
        for m in [Method::GET, Method::POST, Method::PATCH] {
            assert_eq!(
                route(&m, path),
                Err(RouteError::MethodNotAllowed("only PUT and DELETE supported against this resource")),
                "{m}"
            );
        }
        let missing = Err(RouteError::Name(NameRefused::missing(fleet_core::api_rules::NO_MACHINE)));
        assert_eq!(route(&Method::PUT, "/fleet/v1/machines/a%2Fb/cordon"), missing);
        assert_eq!(route(&Method::DELETE, "/fleet/v1/machines/m%07/cordon"), missing);
        assert_eq!(
            route(&Method::PUT, "/fleet/v1/machines//cordon"),
            Err(RouteError::Redirect("/fleet/v1/machines/cordon".into()))
        );
        assert_eq!(route(&Method::PUT, "/fleet/v1/machines/cordon"), Err(RouteError::NotFound));
        assert_eq!(route(&Method::PUT, "/fleet/v1/machines/m1/cordon/x"), Err(RouteError::NotFound));
        assert_eq!(route(&Method::PUT, "/fleet/v1/machines/m1"), Err(RouteError::NotFound));
    }

    #[test]
    fn a_percent_escape_is_two_hex_digits() {
        assert_eq!(decode_segment("%41%2f"), Some("A/".into()));
        assert_eq!(decode_segment("%+1"), None);
        assert_eq!(decode_segment("%4"), None);
        assert_eq!(decode_segment("%ff"), None);
    }

    #[test]
    fn clean_path_keeps_trailing_slash() {
        assert_eq!(clean_path("/a/b/"), "/a/b/");
        assert_eq!(clean_path("/a/./b/../c"), "/a/c");
        assert_eq!(clean_path(""), "/");
        assert_eq!(clean_path("/.."), "/");
    }
}

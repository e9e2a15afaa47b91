//! Routing of HTTP API v1 requests (spec §8.2): which resource a path names and which methods it accepts, with Go
//! `ServeMux` path cleaning. Pure: a path and a method in, a [`Route`] or a [`RouteError`] out.

use http::Method;

/// A request the API can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Discovery,
    ListMachines,
    PatchMachines,
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
    /// The live cluster page (issue 17): the path after `/ui` (`""`, `/`, `/units/<name>`, …).
    Ui(String),
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
        "/rollouts" => match *method {
            Method::GET => Ok(Route::ListRollouts),
            _ => Err(RouteError::MethodNotAllowed("only GET supported against this resource")),
        },
        _ => {
            if let Some(name) = single_segment(rest, "/units/") {
                let name = decode_segment(name).ok_or(RouteError::NotFound)?;
                return match *method {
                    Method::GET => Ok(Route::GetUnit(name)),
                    Method::PUT => Ok(Route::PutUnit(name)),
                    Method::DELETE => Ok(Route::DeleteUnit(name)),
                    _ => Err(RouteError::MethodNotAllowed("only GET, PUT and DELETE supported against this resource")),
                };
            }
            if let Some(name) = rest.strip_prefix("/units/").and_then(|r| r.strip_suffix("/history")) {
                if !name.is_empty() && !name.contains('/') {
                    let name = decode_segment(name).ok_or(RouteError::NotFound)?;
                    return match *method {
                        Method::GET => Ok(Route::UnitHistory(name)),
                        _ => Err(RouteError::MethodNotAllowed("only GET supported against this resource")),
                    };
                }
            }
            if let Some(id) = single_segment(rest, "/rollouts/") {
                let id = decode_segment(id).ok_or(RouteError::NotFound)?;
                return match *method {
                    Method::GET => Ok(Route::GetRollout(id)),
                    Method::PUT => Ok(Route::PutRollout(id)),
                    Method::PATCH => Ok(Route::PatchRollout(id)),
                    _ => Err(RouteError::MethodNotAllowed("only GET, PUT and PATCH supported against this resource")),
                };
            }
            if let Some(name) = single_segment(rest, "/state/") {
                let name = decode_segment(name).ok_or(RouteError::NotFound)?;
                return match *method {
                    Method::GET => Ok(Route::GetState(name)),
                    _ => Err(RouteError::MethodNotAllowed("only GET supported against this resource")),
                };
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
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let text = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(text, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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

    #[test]
    fn clean_path_keeps_trailing_slash() {
        assert_eq!(clean_path("/a/b/"), "/a/b/");
        assert_eq!(clean_path("/a/./b/../c"), "/a/c");
        assert_eq!(clean_path(""), "/");
        assert_eq!(clean_path("/.."), "/");
    }
}

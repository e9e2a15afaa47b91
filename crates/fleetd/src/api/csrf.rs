//! Cross-site request forgery defence for writes a browser sends (issue 38: the cluster page acts for the admin
//! role). With client certificates a browser presents its certificate to any page that makes it send a request,
//! so a write must prove it came from fleetd's own page:
//!
//! * A request that carries none of the headers browsers add (`Origin`, `Sec-Fetch-Site`, `Sec-Fetch-Mode`) nor
//!   the page's token header is an API client's (fleetctl, curl, scripts): decided as before, by the roles alone.
//! * A browser's write is refused unless all hold: `Sec-Fetch-Site`, if sent, is `same-origin`; `Origin`, if sent,
//!   names the host and port of the `Host` header; the connection's role is `admin` (a client certificate with
//!   `OU=fleet-admin` — over the Unix socket or TCP without client certificates the page stays read-only); and it
//!   carries [`TOKEN_HEADER`] with the page's token, which is bound to the certificate's subject by an HMAC under a
//!   key each fleetd draws at start. A form cannot set a header, another site cannot read the page to learn the
//!   token, and a cross-origin `fetch` with a custom header needs a CORS preflight fleetd never grants.
//!
//! Pure apart from the key: [`Csrf::check`] decides from the method, the headers and the connection's access.

use http::{HeaderMap, Method, header};
use ring::hmac;

use super::access::{self, Access, Role};

/// The header the page's script sends its token in.
pub const TOKEN_HEADER: &str = "x-fleet-csrf";

/// Why a browser's write was refused (answered 403).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("cross-site request refused (Sec-Fetch-Site: {0})")]
    CrossSite(String),
    #[error("request from origin {origin:?} refused: this fleetd is {host:?}")]
    ForeignOrigin { origin: String, host: String },
    #[error(
        "the cluster page acts only for a client certificate with OU={admin}; this connection has {0}, so the page is read-only",
        admin = access::ADMIN_UNIT
    )]
    NotAdmin(&'static str),
    #[error("the page's token ({TOKEN_HEADER}) is missing or wrong: reload the page")]
    Token,
}

/// The per-fleetd key and the decision.
pub struct Csrf {
    key: hmac::Key,
}

impl Csrf {
    /// A fresh random key: tokens of pages served by an earlier fleetd process stop working (the page says to
    /// reload).
    pub fn new() -> Csrf {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng).unwrap_or_else(|_| {
            // The system's random source failed; a key from the clock still differs between processes and hosts.
            tracing::warn!("no system randomness for the page token key: deriving it from the clock");
            hmac::Key::new(hmac::HMAC_SHA256, &fleet_core::model::now_ms().to_le_bytes())
        });
        Csrf { key }
    }

    /// The token of pages served to `access`: `Some` for the admin role only (the page renders actions then).
    pub fn token(&self, access: &Access) -> Option<String> {
        let subject = admin_subject(access)?;
        Some(hex(hmac::sign(&self.key, subject.as_bytes()).as_ref()))
    }

    /// Whether a request may proceed (see the module documentation).
    pub fn check(&self, method: &Method, headers: &HeaderMap, access: &Access) -> Result<(), Refused> {
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Ok(());
        }
        let text = |name: &str| headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let (origin, site, mode, token) =
            (text(header::ORIGIN.as_str()), text("sec-fetch-site"), text("sec-fetch-mode"), text(TOKEN_HEADER));
        if origin.is_none() && site.is_none() && mode.is_none() && token.is_none() {
            return Ok(());
        }
        if let Some(site) = site.filter(|s| s != "same-origin") {
            return Err(Refused::CrossSite(site));
        }
        if let Some(origin) = origin {
            let host = text(header::HOST.as_str()).unwrap_or_default();
            let named = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
            if host.is_empty() || named != Some(host.as_str()) {
                return Err(Refused::ForeignOrigin { origin, host });
            }
        }
        let Some(subject) = admin_subject(access) else {
            return Err(Refused::NotAdmin(match access {
                Access::Unrestricted => "no client certificate (Unix socket or TCP without client certificates)",
                Access::Certificate(_) => "no admin role",
            }));
        };
        let token = token.ok_or(Refused::Token)?;
        let tag = unhex(&token).ok_or(Refused::Token)?;
        hmac::verify(&self.key, subject.as_bytes(), &tag).map_err(|_| Refused::Token)
    }
}

impl Default for Csrf {
    fn default() -> Csrf {
        Csrf::new()
    }
}

/// The subject of an admin certificate, the one access the page acts for.
fn admin_subject(access: &Access) -> Option<&str> {
    match access {
        Access::Certificate(subject) if access::role_of(subject) == Some(Role::Admin) => Some(&subject.text),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_tls::Subject;

    fn cert(units: &[&str]) -> Access {
        Access::Certificate(Subject {
            text: format!("CN=ops,OU={}", units.join("+")),
            organisational_units: units.iter().map(|u| u.to_string()).collect(),
        })
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        map
    }

    #[test]
    fn api_clients_without_browser_headers_are_decided_by_roles_alone() {
        let csrf = Csrf::new();
        for access in [Access::Unrestricted, cert(&["fleet-admin"])] {
            let plain = headers(&[("host", "10.0.0.1:54728"), ("content-type", "application/json")]);
            assert_eq!(csrf.check(&Method::PUT, &plain, &access), Ok(()));
        }
    }

    #[test]
    fn the_admin_page_may_write_with_its_token_from_its_own_origin() {
        let csrf = Csrf::new();
        let admin = cert(&["fleet-admin"]);
        let token = csrf.token(&admin).expect("an admin page gets a token");
        let same = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
            (TOKEN_HEADER, &token),
        ]);
        assert_eq!(csrf.check(&Method::PATCH, &same, &admin), Ok(()));
        assert_eq!(csrf.check(&Method::GET, &headers(&[("sec-fetch-site", "cross-site")]), &admin), Ok(()), "reads");
    }

    #[test]
    fn a_cross_site_write_is_refused_even_with_the_admin_certificate() {
        let csrf = Csrf::new();
        let admin = cert(&["fleet-admin"]);
        let token = csrf.token(&admin).unwrap();
        let cross = headers(&[("host", "10.0.0.1:54728"), ("sec-fetch-site", "cross-site"), (TOKEN_HEADER, &token)]);
        assert_eq!(csrf.check(&Method::POST, &cross, &admin), Err(Refused::CrossSite("cross-site".into())));
        let foreign = headers(&[("host", "10.0.0.1:54728"), ("origin", "https://evil.example")]);
        let refused = csrf.check(&Method::DELETE, &foreign, &admin).unwrap_err();
        assert!(matches!(refused, Refused::ForeignOrigin { .. }), "{refused:?}");
        assert!(refused.to_string().contains("evil.example"), "{refused}");
        // A form from another site that a browser sends without Sec-Fetch headers still carries its Origin.
        let form = headers(&[("host", "10.0.0.1:54728"), ("origin", "null")]);
        assert!(matches!(csrf.check(&Method::POST, &form, &admin), Err(Refused::ForeignOrigin { .. })));
    }

    #[test]
    fn a_same_origin_write_without_the_right_token_is_refused() {
        let csrf = Csrf::new();
        let admin = cert(&["fleet-admin"]);
        let base = [("host", "h:1"), ("origin", "https://h:1")];
        assert_eq!(csrf.check(&Method::PUT, &headers(&base), &admin), Err(Refused::Token));
        let other = Csrf::new().token(&admin).unwrap();
        let stale = headers(&[base[0], base[1], (TOKEN_HEADER, &other)]);
        assert_eq!(csrf.check(&Method::PUT, &stale, &admin), Err(Refused::Token), "another fleetd's token");
        let garbage = headers(&[base[0], base[1], (TOKEN_HEADER, "zz")]);
        assert_eq!(csrf.check(&Method::PUT, &garbage, &admin), Err(Refused::Token));
        // A token is bound to the certificate subject it was issued to.
        let someone = Access::Certificate(Subject {
            text: "CN=eve,OU=fleet-admin".into(),
            organisational_units: vec!["fleet-admin".into()],
        });
        let theirs = csrf.token(&someone).unwrap();
        let borrowed = headers(&[base[0], base[1], (TOKEN_HEADER, &theirs)]);
        assert_eq!(csrf.check(&Method::PUT, &borrowed, &admin), Err(Refused::Token));
    }

    #[test]
    fn the_page_is_read_only_without_the_admin_role() {
        let csrf = Csrf::new();
        assert_eq!(csrf.token(&Access::Unrestricted), None);
        assert_eq!(csrf.token(&cert(&["fleet-read"])), None);
        let browser = headers(&[("host", "h:1"), ("origin", "http://h:1"), ("sec-fetch-site", "same-origin")]);
        let refused = csrf.check(&Method::PUT, &browser, &Access::Unrestricted).unwrap_err();
        assert!(refused.to_string().contains("Unix socket"), "{refused}");
        assert!(matches!(csrf.check(&Method::PUT, &browser, &cert(&["fleet-read"])), Err(Refused::NotAdmin(_))));
    }
}

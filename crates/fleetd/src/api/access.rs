//! Who may do what over the API (issue 15). Pure: a connection's [`Access`] and a request method in, allowed or a
//! [`Denied`] naming the certificate subject out.
//!
//! The policy: once fleetd requires client certificates (`api_tls_client_ca_file`), every request over TCP is
//! authorised by the organisational units (`OU=`) in the client certificate's subject:
//! * `OU=fleet-admin` → role `admin`: every method;
//! * `OU=fleet-read` → role `read`: `GET` and `HEAD` only;
//! * anything else → refused (deny by default).
//!
//! A certificate with both units is `admin`. Connections over the Unix socket (root-owned, mode 0660 by default)
//! and TCP without required client certificates are not restricted by this module.

use http::Method;

use fleet_tls::Subject;

/// The organisational unit that grants [`Role::Admin`].
pub const ADMIN_UNIT: &str = "fleet-admin";
/// The organisational unit that grants [`Role::Read`].
pub const READ_UNIT: &str = "fleet-read";

/// What a client certificate may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads only (`GET`, `HEAD`).
    Read,
    /// Everything.
    Admin,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

/// How a connection was authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// No client certificate is required on this listener (Unix socket, plain TCP, TLS without a client CA).
    Unrestricted,
    /// The verified client certificate's subject.
    Certificate(Subject),
}

/// Why a request was refused (answered 403).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("client certificate {subject:?} has no fleet role: its subject needs OU={ADMIN_UNIT} or OU={READ_UNIT}")]
    NoRole { subject: String },
    #[error("client certificate {subject:?} has role read, which allows GET only; {method} refused")]
    ReadOnly { subject: String, method: String },
}

/// The role `subject` maps to, if any (admin wins over read).
pub fn role_of(subject: &Subject) -> Option<Role> {
    subject
        .organisational_units
        .iter()
        .filter_map(|unit| match unit.as_str() {
            ADMIN_UNIT => Some(Role::Admin),
            READ_UNIT => Some(Role::Read),
            _ => None,
        })
        .max()
}

/// Whether a request with `method` over a connection with `access` may proceed.
pub fn authorize(access: &Access, method: &Method) -> Result<(), Denied> {
    let Access::Certificate(subject) = access else { return Ok(()) };
    match role_of(subject) {
        Some(Role::Admin) => Ok(()),
        Some(Role::Read) if *method == Method::GET || *method == Method::HEAD => Ok(()),
        Some(Role::Read) => Err(Denied::ReadOnly { subject: subject.text.clone(), method: method.to_string() }),
        None => Err(Denied::NoRole { subject: subject.text.clone() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(text: &str, units: &[&str]) -> Access {
        Access::Certificate(Subject {
            text: text.into(),
            organisational_units: units.iter().map(|u| u.to_string()).collect(),
        })
    }

    #[test]
    fn admin_may_use_every_method() {
        let admin = cert("CN=ops,OU=fleet-admin", &["fleet-admin"]);
        for method in [Method::GET, Method::PUT, Method::DELETE, Method::PATCH, Method::POST] {
            assert_eq!(authorize(&admin, &method), Ok(()), "{method}");
        }
    }

    #[test]
    fn read_role_may_only_get() {
        let read = cert("CN=viewer,OU=fleet-read", &["fleet-read"]);
        assert_eq!(authorize(&read, &Method::GET), Ok(()));
        assert_eq!(authorize(&read, &Method::HEAD), Ok(()));
        for method in [Method::PUT, Method::DELETE, Method::PATCH, Method::POST] {
            let denied = authorize(&read, &method).unwrap_err();
            assert_eq!(
                denied,
                Denied::ReadOnly { subject: "CN=viewer,OU=fleet-read".into(), method: method.to_string() }
            );
            assert!(denied.to_string().contains("CN=viewer"), "{denied}");
        }
    }

    #[test]
    fn unmapped_subject_is_denied_and_named() {
        for access in
            [cert("CN=intruder", &[]), cert("CN=x,OU=fleet-admins", &["fleet-admins"]), cert("CN=y,OU=ops", &["ops"])]
        {
            let denied = authorize(&access, &Method::GET).unwrap_err();
            assert!(matches!(denied, Denied::NoRole { .. }), "{denied:?}");
            let Access::Certificate(subject) = &access else { unreachable!() };
            assert!(denied.to_string().contains(&subject.text), "{denied}");
        }
    }

    #[test]
    fn admin_wins_when_both_units_are_present() {
        let both = cert("CN=both", &["fleet-read", "fleet-admin"]);
        assert_eq!(authorize(&both, &Method::DELETE), Ok(()));
    }

    #[test]
    fn roles_are_named_as_the_docs_name_them() {
        assert_eq!((Role::Read.name(), Role::Admin.name()), ("read", "admin"));
    }

    #[test]
    fn connections_without_required_certificates_are_unrestricted() {
        assert_eq!(authorize(&Access::Unrestricted, &Method::DELETE), Ok(()));
    }
}

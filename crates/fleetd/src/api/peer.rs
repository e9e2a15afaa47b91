//! Who is at the other end of an API connection, as the audit trail names them (issue 38): the client
//! certificate's subject, the Unix socket peer's user (`SO_PEERCRED`, named from `/etc/passwd`), or the TCP peer's
//! address. Decided once per connection by the accept loop and handed to the handler with every request.

use std::net::SocketAddr;

use fleet_core::audit::{Via, Who};

/// Where user names are looked up. Users only known to NSS (LDAP, …) are named by their uid.
const PASSWD: &str = "/etc/passwd";

/// A client that presented a certificate: its subject.
pub fn of_certificate(subject: &fleet_tls::Subject) -> Who {
    Who { via: Via::Certificate, name: subject.text.clone() }
}

/// A TCP client without a certificate: its address (an IPv4 client of a dual-stack listener as IPv4, not
/// `[::ffff:a.b.c.d]`).
pub fn of_tcp(peer: Option<SocketAddr>) -> Who {
    let name = peer.map_or_else(
        || "unknown address".to_string(),
        |a| SocketAddr::new(a.ip().to_canonical(), a.port()).to_string(),
    );
    Who { via: Via::Tcp, name }
}

/// A Unix socket client: the user of its process (`uid N` when it has no name here, `unknown user` when the
/// kernel did not say).
pub fn of_unix(uid: Option<u32>) -> Who {
    let name = match uid {
        None => "unknown user".to_string(),
        Some(uid) => {
            let passwd = std::fs::read_to_string(PASSWD).unwrap_or_default();
            fleet_core::audit::user_name(&passwd, uid).unwrap_or_else(|| format!("uid {uid}"))
        }
    };
    Who { via: Via::Unix, name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_named_by_how_they_connected() {
        assert_eq!(of_unix(None), Who { via: Via::Unix, name: "unknown user".into() });
        assert_eq!(of_unix(Some(4_000_000_000)).name, "uid 4000000000");
        let addr: SocketAddr = "10.0.0.5:4321".parse().unwrap();
        assert_eq!(of_tcp(Some(addr)), Who { via: Via::Tcp, name: "10.0.0.5:4321".into() });
        let mapped: SocketAddr = "[::ffff:10.0.0.5]:4321".parse().unwrap();
        assert_eq!(of_tcp(Some(mapped)).name, "10.0.0.5:4321", "an IPv4 client of a dual-stack listener");
        let v6: SocketAddr = "[fd00::5]:4321".parse().unwrap();
        assert_eq!(of_tcp(Some(v6)).name, "[fd00::5]:4321");
        let subject = fleet_tls::Subject { text: "CN=ops,OU=fleet-admin".into(), organisational_units: vec![] };
        assert_eq!(of_certificate(&subject), Who { via: Via::Certificate, name: "CN=ops,OU=fleet-admin".into() });
    }
}

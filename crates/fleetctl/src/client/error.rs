//! The client's errors: a failed call ([`ClientError`], worded like the original's) and a client that could not be
//! built ([`BuildError`]). Every implementation returns them; they live apart from [`super::build`] (the client's own
//! file) so that the implementations need nothing of that file.

use std::time::Duration;

use super::endpoint;

/// A failed client call. The texts follow the original (Go `googleapi` and `net/http` wording) because users and
/// scripts see them after `Error ...: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Non-2xx answer with an error entity.
    #[error("googleapi: Error {code}: {message}")]
    Api { code: u16, message: String },
    /// The API answered `503` (fleetd starting, reloading, or cut off from etcd) to every attempt until the
    /// request timeout was spent. `message` is the server's; the original's text stays a prefix of the line.
    #[error(
        "googleapi: Error 503: {message} (the fleet API was still unavailable after {attempts} attempts in {:.1}s; \
         fleetd is starting, reloading or cannot reach etcd)",
        waited.as_secs_f64()
    )]
    Unavailable { message: String, attempts: u32, waited: Duration },
    /// Non-2xx answer without a decodable error entity.
    #[error("googleapi: got HTTP response code {code} with body: {body}")]
    Status { code: u16, body: String },
    /// The request could not be made or answered (connect failure, timeout, dropped connection).
    #[error("{method} {url:?}: {cause}")]
    Transport { method: String, url: String, cause: String },
    /// A request the etcd driver refused by the API's own rules, with the status the API would have answered;
    /// shown as the bare message (there was no HTTP exchange).
    #[error("{message}")]
    Rejected { code: u16, message: String },
    /// A 2xx answer whose body is not the expected JSON.
    #[error("decoding response from {url:?}: {cause}")]
    Decode { url: String, cause: String },
    /// Anything a non-HTTP implementation reports.
    #[error("{0}")]
    Other(String),
}

impl ClientError {
    /// True for an API answer with status 404.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ClientError::Api { code: 404, .. }
                | ClientError::Status { code: 404, .. }
                | ClientError::Rejected { code: 404, .. }
        )
    }
}

/// Why a client could not be built (printed as `Unable to initialize client: <err>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("unrecognized driver {0:?}")]
    UnrecognizedDriver(String),
    #[error(transparent)]
    Endpoint(#[from] endpoint::EndpointError),
    #[error("{0}")]
    Etcd(String),
    #[error("SSH tunnels (--tunnel) are not supported with --driver=etcd yet")]
    TunnelNotImplemented,
    /// The SSH connection to the tunnel host failed.
    #[error("{0}")]
    Tunnel(crate::ssh::SshError),
    #[error("cannot start the HTTP client runtime: {0}")]
    Runtime(String),
    #[error("TLS: {0}")]
    Tls(String),
}

//! The client fleetctl talks through: one trait ([`Client`]), built from the global flags by [`build`].
//!
//! Implementations: [`http::HttpClient`] over the HTTP API v1 (`--driver=API`, TCP or Unix socket) and
//! [`etcd::EtcdClient`] directly over etcd (`--driver=etcd`, built on the registry module, answering like the API).
//! [`fake::FakeClient`] is an in-memory cluster for tests. The trait is synchronous: implementations
//! that need async I/O own their runtime, so command logic stays plain code and is easy to test.
//!
//! Rollouts (issue 12, an extension of this implementation): every implementation decides a new rollout with the
//! API's own [`fleet_core::api_rules::decide_rollout`] and a user's action on one with [`fleet_core::api_rules::decide_control`], and shows
//! rollouts with [`fleet_core::api_rules::rollout`].

pub mod endpoint;
pub mod etcd;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod http;
mod pool;

use std::time::Duration;

use fleet_core::schema::{Machine, Rollout, RolloutRequest, Unit, UnitBatch, UnitHistory, UnitState};
use fleet_core::version::SemVer;

/// Everything fleetctl does to a cluster. Names and semantics follow the original's `client.API`.
pub trait Client: Send + Sync {
    /// All present machines, sorted by ID.
    fn machines(&self) -> Result<Vec<Machine>, ClientError>;
    /// All units, sorted by name.
    fn units(&self) -> Result<Vec<Unit>, ClientError>;
    /// One unit, or `None` when it does not exist.
    fn unit(&self, name: &str) -> Result<Option<Unit>, ClientError>;
    /// Create or replace a unit: `unit` carries `name`, `options` and optionally `desiredState` (§8.6).
    fn create_unit(&self, unit: &Unit) -> Result<(), ClientError>;
    /// Change the desired state of an existing unit.
    fn set_unit_target_state(&self, name: &str, state: &str) -> Result<(), ClientError>;
    /// Delete a unit. A missing unit is an API error with code 404 ([`ClientError::is_not_found`]).
    fn destroy_unit(&self, name: &str) -> Result<(), ClientError>;
    /// Published systemd states, sorted by (name, machine), optionally filtered.
    fn unit_states(&self, filter: &StateFilter) -> Result<Vec<UnitState>, ClientError>;
    /// The first published state of one unit, or `None` when there is none.
    fn unit_state(&self, name: &str) -> Result<Option<UnitState>, ClientError>;
    /// Set one dynamic metadata key of a machine.
    fn set_machine_metadata(&self, machine_id: &str, key: &str, value: &str) -> Result<(), ClientError>;
    /// Remove one dynamic metadata key of a machine.
    fn delete_machine_metadata(&self, machine_id: &str, key: &str) -> Result<(), ClientError>;
    /// The newest fleetd version registered in the cluster, for the etcd driver's version check (spec §9.3).
    /// Clients that cannot see it (the API does not publish versions) answer `None`.
    fn latest_daemon_version(&self) -> Result<Option<SemVer>, ClientError> {
        Ok(None)
    }
    /// Start a rolling replace or restart under the ID `id` (`PUT /rollouts/<id>`); the rollout as stored.
    fn create_rollout(&self, id: &str, request: &RolloutRequest) -> Result<Rollout, ClientError>;
    /// Every rollout, newest first (`GET /rollouts`).
    fn rollouts(&self) -> Result<Vec<Rollout>, ClientError>;
    /// The unit's stored versions, newest first (`GET /units/<name>/history`); `None` if the unit does not exist.
    fn unit_history(&self, name: &str) -> Result<Option<UnitHistory>, ClientError>;
    /// One rollout, or `None` when it does not exist (`GET /rollouts/<id>`).
    fn rollout(&self, id: &str) -> Result<Option<Rollout>, ClientError>;
    /// The rollout once it changed after `revision` (the [`Rollout::revision`] it was seen at), or as it is after
    /// about `limit`; `None` when it does not exist (`GET /rollouts/<id>?waitRevision=`). A client that cannot wait
    /// for a change answers at once, as [`Client::rollout`] does.
    fn rollout_change(&self, id: &str, revision: i64, limit: Duration) -> Result<Option<Rollout>, ClientError> {
        let _ = (revision, limit);
        self.rollout(id)
    }
    /// Pause, resume (`run`) or abort a rollout that is not final (`PATCH /rollouts/<id>`).
    fn control_rollout(&self, id: &str, control: fleet_core::schema::RolloutControl) -> Result<(), ClientError>;
    /// Many unit writes at once (`POST /units-batch`, an extension): one result per write, `put` then `destroy`,
    /// each what [`Client::create_unit`] (or [`Client::set_unit_target_state`] for a unit without options) and
    /// [`Client::destroy_unit`] would have returned. `None` when this client or its server has no batch route (the
    /// original fleet): the caller then sends one request per unit.
    fn unit_batch(&self, batch: &UnitBatch) -> Option<Vec<Result<(), ClientError>>> {
        let _ = batch;
        None
    }
}

/// A shared client is a client (lets tests keep a handle on the fake they hand out).
impl<T: Client + ?Sized> Client for std::sync::Arc<T> {
    fn machines(&self) -> Result<Vec<Machine>, ClientError> {
        (**self).machines()
    }
    fn units(&self) -> Result<Vec<Unit>, ClientError> {
        (**self).units()
    }
    fn unit(&self, name: &str) -> Result<Option<Unit>, ClientError> {
        (**self).unit(name)
    }
    fn create_unit(&self, unit: &Unit) -> Result<(), ClientError> {
        (**self).create_unit(unit)
    }
    fn set_unit_target_state(&self, name: &str, state: &str) -> Result<(), ClientError> {
        (**self).set_unit_target_state(name, state)
    }
    fn destroy_unit(&self, name: &str) -> Result<(), ClientError> {
        (**self).destroy_unit(name)
    }
    fn unit_states(&self, filter: &StateFilter) -> Result<Vec<UnitState>, ClientError> {
        (**self).unit_states(filter)
    }
    fn unit_state(&self, name: &str) -> Result<Option<UnitState>, ClientError> {
        (**self).unit_state(name)
    }
    fn set_machine_metadata(&self, machine_id: &str, key: &str, value: &str) -> Result<(), ClientError> {
        (**self).set_machine_metadata(machine_id, key, value)
    }
    fn delete_machine_metadata(&self, machine_id: &str, key: &str) -> Result<(), ClientError> {
        (**self).delete_machine_metadata(machine_id, key)
    }
    fn latest_daemon_version(&self) -> Result<Option<SemVer>, ClientError> {
        (**self).latest_daemon_version()
    }
    fn create_rollout(&self, id: &str, request: &RolloutRequest) -> Result<Rollout, ClientError> {
        (**self).create_rollout(id, request)
    }
    fn rollouts(&self) -> Result<Vec<Rollout>, ClientError> {
        (**self).rollouts()
    }
    fn unit_history(&self, name: &str) -> Result<Option<UnitHistory>, ClientError> {
        (**self).unit_history(name)
    }
    fn rollout(&self, id: &str) -> Result<Option<Rollout>, ClientError> {
        (**self).rollout(id)
    }
    fn rollout_change(&self, id: &str, revision: i64, limit: Duration) -> Result<Option<Rollout>, ClientError> {
        (**self).rollout_change(id, revision, limit)
    }
    fn control_rollout(&self, id: &str, control: fleet_core::schema::RolloutControl) -> Result<(), ClientError> {
        (**self).control_rollout(id, control)
    }
    fn unit_batch(&self, batch: &UnitBatch) -> Option<Vec<Result<(), ClientError>>> {
        (**self).unit_batch(batch)
    }
}

/// Optional exact-match filters of `GET /state`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateFilter {
    pub machine_id: Option<String>,
    pub unit_name: Option<String>,
}

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

/// Which implementation `--driver` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Api,
    Etcd,
}

/// The global flags that shape a client.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// `--driver` as given (`API` or `etcd`, case-sensitive).
    pub driver: String,
    /// `--endpoint`: API URL, or comma-separated etcd URLs.
    pub endpoint: String,
    pub etcd_key_prefix: String,
    /// `--request-timeout`; zero or negative means no timeout.
    pub request_timeout: Duration,
    /// `--tunnel` as `host:port`, or empty.
    pub tunnel: String,
    /// How to make SSH connections (the tunnel's).
    pub ssh: crate::ssh::SshConfig,
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
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

impl ClientConfig {
    /// `--ca-file`, `--cert-file`, `--key-file` (empty: not given).
    pub fn tls_files(&self) -> fleet_tls::ClientFiles {
        let given = |s: &str| (!s.is_empty()).then(|| std::path::PathBuf::from(s));
        fleet_tls::ClientFiles { ca: given(&self.ca_file), cert: given(&self.cert_file), key: given(&self.key_file) }
    }

    pub fn driver(&self) -> Result<Driver, BuildError> {
        match self.driver.as_str() {
            "API" => Ok(Driver::Api),
            "etcd" => Ok(Driver::Etcd),
            other => Err(BuildError::UnrecognizedDriver(other.to_string())),
        }
    }
}

/// Build the client the flags ask for.
pub fn build(config: &ClientConfig) -> Result<Box<dyn Client>, BuildError> {
    let driver = config.driver()?;
    match driver {
        Driver::Api => {
            let ep = endpoint::ApiEndpoint::parse(&config.endpoint)?;
            let timeout = (!config.request_timeout.is_zero()).then_some(config.request_timeout);
            let client = if config.tunnel.is_empty() {
                http::HttpClient::new(ep, timeout)?
            } else {
                http::HttpClient::tunnelled(ep, timeout, &config.ssh, &config.tunnel)?
            };
            Ok(Box::new(client.with_tls(&config.tls_files())?))
        }
        Driver::Etcd if !config.tunnel.is_empty() => Err(BuildError::TunnelNotImplemented),
        Driver::Etcd => Ok(Box::new(etcd::EtcdClient::new(
            &config.endpoint,
            &config.etcd_key_prefix,
            config.request_timeout,
            config.tls_files(),
        )?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_core::rollout::{Action, Control, Rollout as StoredRollout};
    use fleet_core::schema::RolloutControl;

    fn act(action: Action) -> RolloutControl {
        RolloutControl { action, skip_failed: false }
    }
    use fleet_core::api_rules::decide_control;

    fn config(driver: &str, endpoint: &str) -> ClientConfig {
        ClientConfig {
            driver: driver.into(),
            endpoint: endpoint.into(),
            etcd_key_prefix: "/_coreos.com/fleet/".into(),
            request_timeout: Duration::from_secs(3),
            tunnel: String::new(),
            ssh: crate::ssh::SshConfig {
                user: "core".into(),
                timeout: Duration::from_secs(1),
                known_hosts: None,
                agent_sock: None,
                forward_agent: false,
            },
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
        }
    }

    fn rollout(progress: Option<fleet_core::rollout::RolloutState>) -> StoredRollout {
        use fleet_core::rollout::{OnFailure, RolloutKind, RolloutProgress, RolloutSpec};
        StoredRollout {
            spec: RolloutSpec {
                id: "db-1".into(),
                kind: RolloutKind::Restart,
                units: Vec::new(),
                max_unavailable: 1,
                min_healthy_ms: 0,
                health_timeout_ms: 1,
                on_failure: OnFailure::Pause,
                created_ms: 0,
                ..RolloutSpec::default()
            },
            control: Control { action: Action::Pause, resumes: 2, ..Control::default() },
            progress: progress.map(|state| RolloutProgress { state, ..Default::default() }),
        }
    }

    #[test]
    fn a_resume_counts_and_a_final_rollout_takes_no_action() {
        use fleet_core::rollout::RolloutState;
        let paused = rollout(Some(RolloutState::Paused));
        assert_eq!(
            decide_control(&paused, act(Action::Run)).unwrap(),
            Control { action: Action::Run, resumes: 3, ..Control::default() }
        );
        assert_eq!(
            decide_control(&paused, act(Action::Abort)).unwrap(),
            Control { action: Action::Abort, resumes: 2, ..Control::default() }
        );
        assert_eq!(
            decide_control(&rollout(None), act(Action::Pause)).unwrap(),
            Control { action: Action::Pause, resumes: 2, ..Control::default() }
        );
        for (state, action) in [(RolloutState::Done, Action::Abort), (RolloutState::RolledBack, Action::Run)] {
            let refused = decide_control(&rollout(Some(state)), act(action)).unwrap_err();
            assert_eq!(
                (refused.status.as_u16(), refused.message),
                (409, format!("rollout \"db-1\" is {state}: nothing to {}", action.as_str()))
            );
        }
    }

    #[test]
    fn unknown_driver_is_rejected_with_the_original_message() {
        let err = build(&config("bogus", "unix:///var/run/fleet.sock")).err().unwrap();
        assert_eq!(err.to_string(), "unrecognized driver \"bogus\"");
        // Case-sensitive like the original.
        assert!(build(&config("api", "unix:///var/run/fleet.sock")).is_err());
    }

    #[test]
    fn etcd_driver_connects_lazily() {
        // Nothing listens on port 1; building the client must still succeed (the first request fails instead).
        assert!(build(&config("etcd", "http://127.0.0.1:1")).is_ok());
        assert!(build(&config("etcd", "http://127.0.0.1:1,http://127.0.0.1:2")).is_ok());
        let err = build(&config("etcd", "https://127.0.0.1:2379")).err().unwrap();
        assert!(err.to_string().contains("https:// etcd endpoints need the CA that signed etcd"), "{err}");
    }

    #[test]
    fn a_tunnel_needs_the_agent_first() {
        let mut c = config("API", "unix:///var/run/fleet.sock");
        c.tunnel = "127.0.0.1:1".into();
        assert_eq!(build(&c).err().unwrap().to_string(), crate::ssh::NO_AGENT);
        c.driver = "etcd".into();
        assert!(matches!(build(&c).err().unwrap(), BuildError::TunnelNotImplemented));
    }

    #[test]
    fn api_errors_render_like_googleapi() {
        let e = ClientError::Api { code: 409, message: "must provide DesiredState to update existing unit".into() };
        assert_eq!(e.to_string(), "googleapi: Error 409: must provide DesiredState to update existing unit");
        let e = ClientError::Status { code: 502, body: "bad gateway".into() };
        assert_eq!(e.to_string(), "googleapi: got HTTP response code 502 with body: bad gateway");
        let e = ClientError::Transport {
            method: "Get".into(),
            url: "http://127.0.0.1:1/fleet/v1/state?alt=json".into(),
            cause: "dial tcp 127.0.0.1:1: connect: connection refused".into(),
        };
        assert_eq!(
            e.to_string(),
            "Get \"http://127.0.0.1:1/fleet/v1/state?alt=json\": dial tcp 127.0.0.1:1: connect: connection refused"
        );
    }
}

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
//!
//! Code map: `contract` (the [`Client`] trait and [`StateFilter`]), `error` ([`ClientError`], [`BuildError`]),
//! `endpoint` (parsing `--endpoint` for the API), `http`, `etcd` and `fake` (the implementations), `pool` (the HTTP
//! client's connections); this file has the global flags that shape a client ([`ClientConfig`]) and [`build`].

mod contract;
pub mod endpoint;
mod error;
pub mod etcd;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod http;
mod pool;

use std::time::Duration;

// Shared by the implementations, so kept out of this file, which builds them.
pub use contract::{Client, StateFilter};
pub use error::{BuildError, ClientError};

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

//! One fleet machine: a container booting systemd, with its own machine-id, fleet's units and fleet.conf, and the
//! fleetd binary bind-mounted read-only. Operations a test needs on it: exec, systemd properties, files, stop,
//! kill, start again, cut off from the cluster network and heal.
//!
//! A machine whose fleetd serves the API counts as up only once that API answers a real request (a unit list,
//! `200`) from the host: fleetd answers `503` until its components run (spec §8.1), so creating, restarting or
//! replacing a machine returns only after that, and a command sent right after never meets the `503`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::Rng;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::config::{self, FleetConf};
use crate::container::{self, Placement};
use crate::docker::{self, DockerError};
use crate::output::Output;
use crate::wait::{Check, WaitOptions, wait_for};

/// A machine operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("machine {name}: {source}")]
    Container { name: String, source: testcontainers::TestcontainersError },
    #[error("machine {name}: TLS certificates: {cause}")]
    Tls { name: String, cause: String },
    #[error("machine {name}: {source}")]
    Exec { name: String, source: crate::container::ExecError },
    #[error("machine {name}: {source}")]
    Docker { name: String, source: DockerError },
    #[error("machine {name} did not boot: {source}")]
    Boot { name: String, source: crate::wait::WaitError },
    #[error("machine {name}: fleet's API never answered: {source}")]
    ApiNotReady { name: String, source: crate::wait::WaitError },
    #[error("machine {name}: `{cmd}` failed: {output}")]
    Command { name: String, cmd: String, output: String },
    #[error("machine {name} has no container (removed)")]
    Gone { name: String },
}

/// Everything needed to (re)create the machine in a slot.
#[derive(Debug, Clone)]
pub struct MachineSpec {
    pub place: Placement,
    /// 1-based slot number; the hostname is `m<slot>` unless named otherwise.
    pub slot: usize,
    pub hostname: String,
    pub container_name: String,
    /// The fleetd binary, or `None` for a machine without fleet.
    pub fleetd: Option<PathBuf>,
    /// Whether that fleetd serves the API (a stand-in does not): then the machine is up only once the API answers.
    pub serves_api: bool,
    /// The machine-id to give the machine instead of a random one (a replacement always gets a fresh one).
    pub machine_id: Option<String>,
    pub etcd_url: String,
    pub key_prefix: String,
    /// fleet.conf `metadata` (the cluster puts `hostname=<hostname>` first).
    pub metadata: String,
    pub conf_overrides: BTreeMap<String, String>,
    pub wait: WaitOptions,
    /// The fleetctl binary to mount at [`config::FLEETCTL_PATH`], if it exists.
    pub fleetctl: Option<PathBuf>,
    /// A public key authorised for `core` and `root` over SSH.
    pub authorized_key: Option<String>,
    /// The cluster's certificates when it runs TLS: fleetd serves HTTPS, requires client certificates and reaches
    /// etcd over TLS.
    pub tls: Option<std::sync::Arc<crate::pki::ClusterPki>>,
}

/// Where a TLS machine keeps the cluster CA and fleetd's certificate and key.
pub const TLS_DIR: &str = "/etc/fleet/tls";

/// A running (or stopped) machine of a cluster.
pub struct Machine {
    spec: MachineSpec,
    id: String,
    ip: String,
    container: Option<ContainerAsync<GenericImage>>,
    /// How long the API took to answer after fleet was started, at the last (re)start.
    api_ready_after: Option<Duration>,
}

/// How long one API probe may take (connect, request, answer).
const API_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Judges a raw HTTP answer to a unit list: `Ok` for `200` with a JSON object body; otherwise what was seen, for
/// the wait's timeout message (status line and body).
pub fn unit_list_answer(raw: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse::<u16>().ok());
    let body = body.trim();
    match status {
        Some(200) if serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(body).is_ok() => Ok(()),
        Some(200) => Err(format!("200 with a body that is not a JSON object: {body:?}")),
        Some(_) => Err(format!("{status_line}: {body}")),
        None if raw.is_empty() => Err("connection closed without an answer".to_string()),
        None => Err(format!("not an HTTP answer: {:?}", text.chars().take(200).collect::<String>())),
    }
}

/// A fresh machine ID: 32 random hex digits (a UUID without dashes, like the original's `NewMachineID`).
pub fn new_machine_id() -> String {
    let n: u128 = rand::rng().random();
    format!("{n:032x}")
}

impl Machine {
    /// Creates the container, boots it to systemd `running`, pins its address (to `pin_ip` when given, e.g. when
    /// replacing a machine), writes fleet.conf and starts fleet.
    pub async fn create(spec: MachineSpec, pin_ip: Option<String>) -> Result<Self, MachineError> {
        let id = spec.machine_id.clone().unwrap_or_else(new_machine_id);
        let name = spec.container_name.clone();
        let mut req = container::systemd_options(container::request(&spec.place, &name, "machine"))
            .with_hostname(spec.hostname.clone())
            .with_copy_to("/etc/machine-id", format!("{id}\n").into_bytes());
        for (file, text) in config::fleet_units() {
            req = req.with_copy_to(format!("/etc/systemd/system/{file}"), text.into_bytes());
        }
        if let Some(fleetd) = &spec.fleetd {
            req = req.with_mount(container::read_only(fleetd, config::FLEETD_PATH));
        }
        if let Some(fleetctl) = spec.fleetctl.as_ref().filter(|p| p.is_file()) {
            req = req.with_mount(container::read_only(fleetctl, config::FLEETCTL_PATH));
        }
        if let Some(key) = &spec.authorized_key {
            for user in crate::ssh::USERS {
                req = req.with_copy_to(crate::ssh::authorized_keys_path(user), format!("{key}\n").into_bytes());
            }
        }
        let c = req.start().await.map_err(|source| MachineError::Container { name: name.clone(), source })?;
        let mut m = Machine { spec, id, ip: String::new(), container: Some(c), api_ready_after: None };
        m.ip = match pin_ip {
            Some(ip) => ip,
            None => m.current_ip().await?.unwrap_or_default(),
        };
        m.api_ready_after = m.boot().await?;
        tracing::info!(machine = %m.spec.hostname, id = %m.id, ip = %m.ip, "machine up");
        Ok(m)
    }

    /// After the container (re)started: same address as before, systemd running, fleet configured and started, and
    /// its API answering when it serves one. Returns how long the API took to answer after fleet was started.
    async fn boot(&self) -> Result<Option<Duration>, MachineError> {
        self.pin_ip().await?;
        self.wait_running(self.spec.wait).await?;
        if self.spec.fleetd.is_some() {
            let mut overrides = self.tls_conf().await?;
            overrides.extend(self.spec.conf_overrides.clone());
            let conf = FleetConf::for_machine(
                &self.spec.etcd_url,
                &self.ip,
                &self.spec.metadata,
                &self.spec.key_prefix,
                &overrides,
            );
            self.write_file(config::CONF_PATH, &conf.render()).await?;
            let started = Instant::now();
            self.exec_ok(&["systemctl", "start", "fleet.socket", "fleet-tcp.socket", "fleet.service"]).await?;
            if self.spec.serves_api {
                self.wait_api(self.spec.wait).await?;
                return Ok(Some(started.elapsed()));
            }
        }
        Ok(None)
    }

    /// In a TLS cluster: issues fleetd's certificate for this machine's names and address, writes it with the CA
    /// into [`TLS_DIR`], and returns the fleet.conf keys that use them (API TLS with client certificates, etcd TLS).
    async fn tls_conf(&self) -> Result<BTreeMap<String, String>, MachineError> {
        let Some(pki) = &self.spec.tls else { return Ok(BTreeMap::new()) };
        let fleetd = pki
            .fleetd(&self.spec.hostname, &self.spec.container_name, &self.ip)
            .map_err(|e| MachineError::Tls { name: self.spec.hostname.clone(), cause: e.to_string() })?;
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path).map_err(|e| MachineError::Tls {
                name: self.spec.hostname.clone(),
                cause: format!("{}: {e}", path.display()),
            })
        };
        let (ca, cert, key) =
            (format!("{TLS_DIR}/ca.pem"), format!("{TLS_DIR}/fleetd.pem"), format!("{TLS_DIR}/fleetd-key.pem"));
        self.write_file(&ca, &read(pki.ca.cert())?).await?;
        self.write_file(&cert, &read(&fleetd.cert)?).await?;
        self.write_file(&key, &read(&fleetd.key)?).await?;
        Ok([
            ("api_tls_cert_file", &cert),
            ("api_tls_key_file", &key),
            ("api_tls_client_ca_file", &ca),
            ("etcd_cafile", &ca),
            ("etcd_certfile", &cert),
            ("etcd_keyfile", &key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
    }

    /// Waits until fleet's API on this machine answers a unit list (`GET /fleet/v1/units`) with `200`; a timeout
    /// names the last answer (e.g. the `503` of a fleetd that cannot reach etcd, or a refused connection).
    pub async fn wait_api(&self, wait: WaitOptions) -> Result<(), MachineError> {
        let what = format!("the fleet API of {} ({}) to answer a unit list", self.spec.hostname, self.endpoint());
        let wait = wait.with_poll(Duration::from_millis(50));
        wait_for(wait, &what, || async {
            match self.list_units_over_api().await {
                Ok(()) => Check::Ready(()),
                Err(seen) => Check::NotYet(seen),
            }
        })
        .await
        .map_err(|source| MachineError::ApiNotReady { name: self.spec.hostname.clone(), source })
    }

    /// One `GET /fleet/v1/units?alt=json` from the host, as fleetctl would send it; `Err` describes the answer.
    pub async fn list_units_over_api(&self) -> Result<(), String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = format!("{}:{}", self.ip, config::API_PORT);
        let exchange = async {
            let stream = tokio::net::TcpStream::connect(&addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
            let request = format!("GET /fleet/v1/units?alt=json HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            let mut answer = Vec::new();
            match &self.spec.tls {
                None => {
                    let mut stream = stream;
                    stream.write_all(request.as_bytes()).await.map_err(|e| format!("send to {addr}: {e}"))?;
                    stream.read_to_end(&mut answer).await.map_err(|e| format!("read from {addr}: {e}"))?;
                }
                Some(pki) => {
                    let config = crate::pki::client_config(pki.ca.cert(), Some(&pki.admin))?;
                    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
                    let name = rustls::pki_types::ServerName::try_from(self.ip.clone())
                        .map_err(|e| format!("server name {}: {e}", self.ip))?;
                    let mut stream =
                        connector.connect(name, stream).await.map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
                    stream.write_all(request.as_bytes()).await.map_err(|e| format!("send to {addr}: {e}"))?;
                    stream.flush().await.map_err(|e| format!("send to {addr}: {e}"))?;
                    match stream.read_to_end(&mut answer).await {
                        // A peer closing without TLS close_notify after a complete answer is fine here.
                        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {}
                        Err(e) => return Err(format!("read from {addr}: {e}")),
                        Ok(_) => {}
                    }
                }
            }
            Ok::<_, String>(answer)
        };
        let answer = tokio::time::timeout(API_PROBE_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("no answer from {addr} within {API_PROBE_TIMEOUT:?}"))??;
        unit_list_answer(&answer)
    }

    /// How long the API took to answer after fleet was started when the machine was created (`None` without an
    /// API).
    pub fn api_ready_after(&self) -> Option<Duration> {
        self.api_ready_after
    }

    /// Hostname, e.g. `m1`.
    pub fn name(&self) -> &str {
        &self.spec.hostname
    }

    /// Docker container name.
    pub fn container_name(&self) -> &str {
        &self.spec.container_name
    }

    /// 1-based slot in the cluster.
    pub fn slot(&self) -> usize {
        self.spec.slot
    }

    /// The machine ID in `/etc/machine-id`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The address on the cluster network (fleet.conf `public_ip`).
    pub fn ip(&self) -> &str {
        &self.ip
    }

    /// fleet's API endpoint for fleetctl on the host: `http://<ip>:54728` (`https://` in a TLS cluster).
    pub fn endpoint(&self) -> String {
        let scheme = if self.spec.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.ip, config::API_PORT)
    }

    pub(crate) fn spec(&self) -> &MachineSpec {
        &self.spec
    }

    fn container(&self) -> Result<&ContainerAsync<GenericImage>, MachineError> {
        self.container.as_ref().ok_or_else(|| MachineError::Gone { name: self.spec.hostname.clone() })
    }

    fn docker_err(&self) -> impl Fn(DockerError) -> MachineError + '_ {
        |source| MachineError::Docker { name: self.spec.hostname.clone(), source }
    }

    /// Runs `cmd` inside the machine: stdout, stderr, exit status.
    pub async fn exec(&self, cmd: &[&str]) -> Result<Output, MachineError> {
        container::exec(&self.spec.container_name, cmd)
            .await
            .map_err(|source| MachineError::Exec { name: self.spec.hostname.clone(), source })
    }

    /// Like [`Self::exec`], but a non-zero exit status is an error.
    pub async fn exec_ok(&self, cmd: &[&str]) -> Result<Output, MachineError> {
        let out = self.exec(cmd).await?;
        if out.success() {
            Ok(out)
        } else {
            Err(MachineError::Command { name: self.spec.hostname.clone(), cmd: cmd.join(" "), output: out.describe() })
        }
    }

    /// `systemctl show <unit>` properties (all of them when `props` is empty).
    pub async fn systemctl_show(&self, unit: &str, props: &[&str]) -> Result<BTreeMap<String, String>, MachineError> {
        let mut cmd = vec!["systemctl", "show", unit];
        for p in props {
            cmd.extend(["-p", p]);
        }
        let out = self.exec_ok(&cmd).await?;
        Ok(out.stdout.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    /// The contents of a file inside the machine.
    pub async fn read_file(&self, path: &str) -> Result<String, MachineError> {
        Ok(self.exec_ok(&["cat", path]).await?.stdout)
    }

    /// Writes a file inside the machine (parent directories created).
    pub async fn write_file(&self, path: &str, contents: &str) -> Result<(), MachineError> {
        let script = "mkdir -p \"$(dirname \"$1\")\" && printf '%s' \"$2\" > \"$1\"";
        self.exec_ok(&["sh", "-c", script, "sh", path, contents]).await.map(drop)
    }

    /// Upgrades the machine's fleetd as an operator would: the binary at `host_binary` is copied into the machine
    /// ([`config::UPGRADED_FLEETD_PATH`]), `fleet.service` is pointed at it (a drop-in), and `systemctl restart
    /// fleet.service` hands the units over to the new process (docs/fleetd.md). Returns once its API answers.
    pub async fn upgrade_fleetd(&self, host_binary: &std::path::Path) -> Result<(), MachineError> {
        let dir = std::path::Path::new(config::UPGRADED_FLEETD_PATH).parent().map(|d| d.display().to_string());
        self.exec_ok(&["mkdir", "-p", &dir.unwrap_or_else(|| "/".into())]).await?;
        let source = host_binary.display().to_string();
        let dest = format!("{}:{}", self.spec.container_name, config::UPGRADED_FLEETD_PATH);
        docker::run(&["cp", &source, &dest]).await.map_err(self.docker_err())?;
        self.write_file("/etc/systemd/system/fleet.service.d/upgrade.conf", &config::upgraded_fleet_service()).await?;
        self.exec_ok(&["sh", "-c", "systemctl daemon-reload && systemctl restart fleet.service"]).await?;
        self.wait_api(WaitOptions::secs(60)).await
    }

    /// `systemctl is-system-running` (e.g. `running`, `starting`, `degraded`; `offline` when unreachable).
    pub async fn system_state(&self) -> Result<String, MachineError> {
        let out = self.exec(&["systemctl", "is-system-running"]).await?;
        let state = out.stdout.trim();
        Ok(if state.is_empty() { "offline".to_string() } else { state.to_string() })
    }

    /// Waits until systemd reports `running`. `degraded` is accepted with a warning naming the failed units.
    pub async fn wait_running(&self, wait: WaitOptions) -> Result<(), MachineError> {
        let what = format!("systemd in {} to be running", self.spec.hostname);
        let wait = wait.with_poll(Duration::from_millis(100));
        let state = wait_for(wait, &what, || async {
            match self.system_state().await {
                Ok(s) if s == "running" || s == "degraded" => Check::Ready(s),
                Ok(s) => Check::NotYet(s),
                Err(e) => Check::NotYet(e.to_string()),
            }
        })
        .await
        .map_err(|source| MachineError::Boot { name: self.spec.hostname.clone(), source })?;
        if state == "degraded" {
            let failed = self.exec(&["systemctl", "--failed", "--no-legend", "--plain"]).await?;
            tracing::warn!(machine = %self.spec.hostname, failed = %failed.stdout.trim(), "systemd degraded");
        }
        Ok(())
    }

    async fn current_ip(&self) -> Result<Option<String>, MachineError> {
        docker::container_ip(&self.spec.container_name, &self.spec.place.network).await.map_err(self.docker_err())
    }

    /// Makes sure the machine has its address on the cluster network (Docker may hand out another one after a
    /// restart or to a replacement).
    async fn pin_ip(&self) -> Result<(), MachineError> {
        let current = self.current_ip().await?;
        if current.as_deref() == Some(self.ip.as_str()) || self.ip.is_empty() {
            return Ok(());
        }
        tracing::debug!(machine = %self.spec.hostname, from = ?current, to = %self.ip, "pinning address");
        let (net, name) = (&self.spec.place.network, &self.spec.container_name);
        if current.is_some() {
            docker::disconnect(net, name).await.map_err(self.docker_err())?;
        }
        docker::connect(net, name, &self.ip).await.map_err(self.docker_err())
    }

    /// Graceful stop: systemd halts (fleetd gets SIGTERM), the container stops.
    pub async fn stop(&self) -> Result<(), MachineError> {
        self.container()?
            .stop_with_timeout(Some(20))
            .await
            .map_err(|source| MachineError::Container { name: self.spec.hostname.clone(), source })
    }

    /// Abrupt stop: SIGKILL to the whole container.
    pub async fn kill(&self) -> Result<(), MachineError> {
        docker::kill(&self.spec.container_name).await.map_err(self.docker_err())
    }

    /// Starts a stopped or killed machine again: same machine-id and address, systemd running, fleet started and
    /// its API answering.
    pub async fn start(&self) -> Result<(), MachineError> {
        self.container()?
            .start()
            .await
            .map_err(|source| MachineError::Container { name: self.spec.hostname.clone(), source })?;
        if let Some(took) = self.boot().await? {
            tracing::info!(machine = %self.spec.hostname, api_ready_after = ?took, "machine started again");
        }
        Ok(())
    }

    /// Whether the container is running.
    pub async fn is_running(&self) -> Result<bool, MachineError> {
        self.container()?
            .is_running()
            .await
            .map_err(|source| MachineError::Container { name: self.spec.hostname.clone(), source })
    }

    /// Cuts the machine off the cluster network: no traffic to etcd (nor to other machines or the host).
    pub async fn partition(&self) -> Result<(), MachineError> {
        docker::disconnect(&self.spec.place.network, &self.spec.container_name).await.map_err(self.docker_err())
    }

    /// Reconnects a partitioned machine with its former address (the interface may come back as `eth1`).
    pub async fn heal(&self) -> Result<(), MachineError> {
        docker::connect(&self.spec.place.network, &self.spec.container_name, &self.ip).await.map_err(self.docker_err())
    }

    /// Removes the container now.
    pub(crate) async fn remove(&mut self) {
        if let Some(c) = self.container.take()
            && let Err(e) = c.rm().await
        {
            tracing::warn!(machine = %self.spec.hostname, error = %e, "could not remove machine container");
        }
    }

    pub(crate) fn detach(&mut self) {
        if let Some(c) = self.container.take() {
            std::mem::forget(c);
        }
    }

    pub(crate) fn release(&mut self) {
        if let Some(c) = self.container.take() {
            crate::container::release(c);
        }
    }
}

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine")
            .field("name", &self.spec.hostname)
            .field("id", &self.id)
            .field("ip", &self.ip)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::unit_list_answer;

    #[test]
    fn only_a_200_with_a_json_object_is_an_answering_api() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(unit_list_answer(ok.as_bytes()), Ok(()));
        let units = "HTTP/1.1 200 OK\r\n\r\n{\"units\":[{\"name\":\"a.service\"}]}";
        assert_eq!(unit_list_answer(units.as_bytes()), Ok(()));
        let starting = "HTTP/1.1 503 Service Unavailable\r\nserver: fleetd/v1\r\n\r\n{\"error\":{\"code\":503,\"message\":\"fleet server unable to communicate with etcd\"}}";
        assert_eq!(
            unit_list_answer(starting.as_bytes()),
            Err("HTTP/1.1 503 Service Unavailable: {\"error\":{\"code\":503,\"message\":\"fleet server unable to communicate with etcd\"}}".into())
        );
        assert_eq!(
            unit_list_answer(b"HTTP/1.1 200 OK\r\n\r\nnot json"),
            Err("200 with a body that is not a JSON object: \"not json\"".into())
        );
        assert_eq!(unit_list_answer(b""), Err("connection closed without an answer".into()));
        assert!(unit_list_answer(b"SSH-2.0-OpenSSH").unwrap_err().starts_with("not an HTTP answer"));
    }
}

//! The cluster's etcd: Debian's binary (bind-mounted read-only) in a container of the machine image, v2 API
//! enabled as well, its data in the container's own file system so that stop/start keeps it. In a TLS cluster it
//! serves `https://` only and requires client certificates signed by the cluster's CA.

use std::path::Path;
use std::time::Duration;

use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::container::{self, Placement};
use crate::output::Output;
use crate::wait::{Check, WaitOptions, wait_for};

/// The client port.
pub const PORT: u16 = 2379;
/// The plain-HTTP metrics port of a TLS etcd (`/metrics` for the bench; the client port requires certificates).
pub const TLS_METRICS_PORT: u16 = 2381;
const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";
/// Where a TLS etcd finds its CA, certificate and key inside its container.
const TLS_DIR: &str = "/etc/etcd-tls";

/// etcd could not be started or reached.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("{ETCD} not found on the host: run ci/setup (package etcd-server)")]
    NotInstalled,
    #[error("etcd container {name}: {source}")]
    Container { name: String, source: testcontainers::TestcontainersError },
    #[error("etcd container {name}: {source}")]
    Docker { name: String, source: crate::docker::DockerError },
    #[error("etcd container {name}: {source}")]
    Exec { name: String, source: crate::container::ExecError },
    #[error("etcd container {name}: cannot read TLS file {path}: {source}")]
    Tls { name: String, path: std::path::PathBuf, source: std::io::Error },
    #[error("etcd {name} did not become healthy: {source}")]
    Unhealthy { name: String, source: crate::wait::WaitError },
}

/// The etcd member of a cluster.
pub struct Etcd {
    name: String,
    container: Option<ContainerAsync<GenericImage>>,
    /// Serves clients over TLS with client certificate authentication.
    tls: bool,
}

impl Etcd {
    /// Starts etcd as container `name` and waits until it reports healthy.
    /// With `tls`, etcd serves `https://` with that certificate and requires client certificates signed by the CA.
    pub async fn start(
        place: &Placement,
        name: &str,
        wait: WaitOptions,
        tls: Option<&crate::pki::ClusterPki>,
    ) -> Result<Self, EtcdError> {
        if !Path::new(ETCD).is_file() {
            return Err(EtcdError::NotInstalled);
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut cmd = vec![
            ETCD.to_string(),
            "--name=etcd".into(),
            "--data-dir=/var/lib/etcd/data".into(),
            "--enable-v2=true".into(),
            format!("--listen-client-urls={scheme}://0.0.0.0:2379"),
            format!("--advertise-client-urls={scheme}://{name}:{PORT}"),
            "--listen-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-cluster=etcd=http://127.0.0.1:2380".into(),
        ];
        if tls.is_some() {
            cmd.extend([
                format!("--cert-file={TLS_DIR}/etcd.pem"),
                format!("--key-file={TLS_DIR}/etcd-key.pem"),
                format!("--trusted-ca-file={TLS_DIR}/ca.pem"),
                "--client-cert-auth".into(),
                format!("--listen-metrics-urls=http://0.0.0.0:{TLS_METRICS_PORT}"),
            ]);
        }
        let mut req = container::request(place, name, "etcd")
            .with_cmd(cmd)
            .with_hostname("etcd")
            // An init (docker-init) as PID 1: etcd re-raises SIGTERM after cleaning up, which PID 1 would ignore.
            .with_host_config_modifier(|hc| hc.init = Some(true))
            .with_mount(container::read_only(Path::new(ETCD), ETCD));
        if Path::new(ETCDCTL).is_file() {
            req = req.with_mount(container::read_only(Path::new(ETCDCTL), ETCDCTL));
        }
        if let Some(pki) = tls {
            let read = |path: &Path| {
                std::fs::read(path).map_err(|source| EtcdError::Tls {
                    name: name.to_string(),
                    path: path.into(),
                    source,
                })
            };
            req = req
                .with_copy_to(format!("{TLS_DIR}/ca.pem"), read(pki.ca.cert())?)
                .with_copy_to(format!("{TLS_DIR}/etcd.pem"), read(&pki.etcd.cert)?)
                .with_copy_to(format!("{TLS_DIR}/etcd-key.pem"), read(&pki.etcd.key)?);
        }
        let c = req.start().await.map_err(|source| EtcdError::Container { name: name.to_string(), source })?;
        let etcd = Etcd { name: name.to_string(), container: Some(c), tls: tls.is_some() };
        etcd.wait_healthy(wait).await?;
        tracing::info!(etcd = %name, "etcd healthy");
        Ok(etcd)
    }

    /// Container name; machines reach etcd by it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client URL machines use (`http://<name>:2379`, `https://` in a TLS cluster).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}:{PORT}", self.name)
    }

    /// Where etcd serves `/metrics` in plain HTTP: the client port, or [`TLS_METRICS_PORT`] in a TLS cluster.
    pub fn metrics_port(&self) -> u16 {
        if self.tls { TLS_METRICS_PORT } else { PORT }
    }

    /// Whether etcd serves TLS with client certificate authentication.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// `etcdctl endpoint health` inside the etcd container (with etcd's own certificate as the client's in a TLS
    /// cluster).
    pub async fn health(&self) -> Result<Output, EtcdError> {
        let mut args = vec![ETCDCTL.to_string(), "--command-timeout=2s".into()];
        if self.tls {
            args.extend([
                "--endpoints=https://127.0.0.1:2379".to_string(),
                format!("--cacert={TLS_DIR}/ca.pem"),
                format!("--cert={TLS_DIR}/etcd.pem"),
                format!("--key={TLS_DIR}/etcd-key.pem"),
            ]);
        } else {
            args.push("--endpoints=http://127.0.0.1:2379".into());
        }
        args.extend(["endpoint".into(), "health".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        container::exec(&self.name, &args).await.map_err(|source| EtcdError::Exec { name: self.name.clone(), source })
    }

    /// Waits until [`Self::health`] succeeds.
    pub async fn wait_healthy(&self, wait: WaitOptions) -> Result<(), EtcdError> {
        wait_for(wait, &format!("etcd {} to be healthy", self.name), || async {
            match self.health().await {
                Ok(out) if out.success() => Check::Ready(()),
                Ok(out) => Check::NotYet(out.describe()),
                Err(e) => Check::NotYet(e.to_string()),
            }
        })
        .await
        .map_err(|source| EtcdError::Unhealthy { name: self.name.clone(), source })
    }

    /// Stops etcd gracefully (SIGTERM, SIGKILL after 10 s; etcd ignores the image's systemd stop signal). Its data
    /// is kept.
    pub async fn stop(&self) -> Result<(), EtcdError> {
        let err = |source| EtcdError::Docker { name: self.name.clone(), source };
        crate::docker::run(&["kill", "--signal", "TERM", &self.name]).await.map_err(err)?;
        let waited = tokio::time::timeout(Duration::from_secs(10), crate::docker::run(&["wait", &self.name])).await;
        if !matches!(waited, Ok(Ok(_))) {
            tracing::warn!(etcd = %self.name, "etcd did not stop on SIGTERM within 10 s; killing it");
            crate::docker::run(&["kill", "--signal", "KILL", &self.name]).await.map_err(err)?;
        }
        Ok(())
    }

    /// Starts etcd again and waits until it is healthy.
    pub async fn start_again(&self, wait: WaitOptions) -> Result<(), EtcdError> {
        let c = self.container.as_ref().expect("etcd container present until drop");
        c.start().await.map_err(|source| EtcdError::Container { name: self.name.clone(), source })?;
        self.wait_healthy(wait).await
    }

    /// Gives up the container handle without removing the container (for long-lived clusters).
    pub(crate) fn detach(&mut self) {
        if let Some(c) = self.container.take() {
            std::mem::forget(c);
        }
    }

    /// Removes the container now.
    pub(crate) async fn remove(&mut self) {
        if let Some(c) = self.container.take()
            && let Err(e) = c.rm().await
        {
            tracing::warn!(etcd = %self.name, error = %e, "could not remove etcd container");
        }
    }

    /// Hands the container to testcontainers' own drop, or forgets it when no runtime can run that drop
    /// (the cluster's label sweep removes it then).
    pub(crate) fn release(&mut self) {
        if let Some(c) = self.container.take() {
            crate::container::release(c);
        }
    }
}

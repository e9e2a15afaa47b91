//! The cluster's etcd: Debian's binary (bind-mounted read-only) in a container of the machine image, v2 API
//! enabled as well, its data in the container's own file system so that stop/start keeps it.

use std::path::Path;
use std::time::Duration;

use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::container::{self, Placement};
use crate::output::Output;
use crate::wait::{Check, WaitOptions, wait_for};

/// The client port.
pub const PORT: u16 = 2379;
const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";

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
    #[error("etcd {name} did not become healthy: {source}")]
    Unhealthy { name: String, source: crate::wait::WaitError },
}

/// The etcd member of a cluster.
pub struct Etcd {
    name: String,
    container: Option<ContainerAsync<GenericImage>>,
}

impl Etcd {
    /// Starts etcd as container `name` and waits until it reports healthy.
    pub async fn start(place: &Placement, name: &str, wait: WaitOptions) -> Result<Self, EtcdError> {
        if !Path::new(ETCD).is_file() {
            return Err(EtcdError::NotInstalled);
        }
        let url = format!("http://{name}:{PORT}");
        let cmd = [
            ETCD,
            "--name=etcd",
            "--data-dir=/var/lib/etcd/data",
            "--enable-v2=true",
            "--listen-client-urls=http://0.0.0.0:2379",
            &format!("--advertise-client-urls={url}"),
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=etcd=http://127.0.0.1:2380",
        ];
        let mut req = container::request(place, name, "etcd")
            .with_cmd(cmd)
            .with_hostname("etcd")
            // An init (docker-init) as PID 1: etcd re-raises SIGTERM after cleaning up, which PID 1 would ignore.
            .with_host_config_modifier(|hc| hc.init = Some(true))
            .with_mount(container::read_only(Path::new(ETCD), ETCD));
        if Path::new(ETCDCTL).is_file() {
            req = req.with_mount(container::read_only(Path::new(ETCDCTL), ETCDCTL));
        }
        let c = req.start().await.map_err(|source| EtcdError::Container { name: name.to_string(), source })?;
        let etcd = Etcd { name: name.to_string(), container: Some(c) };
        etcd.wait_healthy(wait).await?;
        tracing::info!(etcd = %name, "etcd healthy");
        Ok(etcd)
    }

    /// Container name; machines reach etcd by it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client URL machines use (`http://<name>:2379`).
    pub fn url(&self) -> String {
        format!("http://{}:{PORT}", self.name)
    }

    /// `etcdctl endpoint health` inside the etcd container.
    pub async fn health(&self) -> Result<Output, EtcdError> {
        container::exec(
            &self.name,
            &[ETCDCTL, "--endpoints=http://127.0.0.1:2379", "--command-timeout=2s", "endpoint", "health"],
        )
        .await
        .map_err(|source| EtcdError::Exec { name: self.name.clone(), source })
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

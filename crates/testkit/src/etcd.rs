//! A real etcd for tests: `/usr/bin/etcd` on 127.0.0.1 with free ports and a temporary data dir, killed on drop
//! (also when the test panics), restartable on the same data dir and ports. Shared by the integration test binaries
//! (through the `fleet-testkit` crate); each uses only part of it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fleet_registry::{EtcdConfig, Registry};
use tokio::time::{Instant, sleep};

const ETCD: &str = "/usr/bin/etcd";

pub struct TestEtcd {
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    /// Client-side TLS: etcd serves `https://` and requires client certificates signed by this CA.
    tls: Option<ServerTls>,
}

/// etcd's server certificate and key, and the CA its clients' certificates (and its own) chain to.
#[derive(Clone)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// A client certificate and key the readiness check presents.
    pub client: (PathBuf, PathBuf),
}

fn free_port() -> u16 {
    // Bind-then-release: another process could grab the port in between, which is unlikely enough on loopback.
    TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port").local_addr().unwrap().port()
}

impl TestEtcd {
    /// Starts etcd and waits until it answers.
    pub async fn start() -> TestEtcd {
        let mut etcd = TestEtcd {
            dir: tempfile::tempdir().expect("temp dir for etcd"),
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
            tls: None,
        };
        etcd.spawn().await;
        etcd
    }

    /// Starts etcd serving clients over TLS with client certificate authentication, and waits until it answers.
    pub async fn start_tls(tls: ServerTls) -> TestEtcd {
        let mut etcd = TestEtcd {
            dir: tempfile::tempdir().expect("temp dir for etcd"),
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
            tls: Some(tls),
        };
        etcd.spawn().await;
        etcd
    }

    /// `127.0.0.1:<port>` of the client listener.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    async fn spawn(&mut self) {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
        let mut command = Command::new(ETCD);
        if let Some(tls) = &self.tls {
            command
                .arg(format!("--cert-file={}", tls.cert.display()))
                .arg(format!("--key-file={}", tls.key.display()))
                .arg(format!("--trusted-ca-file={}", tls.ca.display()))
                .arg("--client-cert-auth");
        }
        let child = command
            .arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {ETCD} (apt-get install etcd-server): {e}"));
        self.child = Some(child);
        self.wait_ready().await;
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("etcd exited with {status}; log: {}", self.log());
            }
            let mut options = etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_millis(500));
            if let Some(tls) = &self.tls {
                let read = |p: &PathBuf| std::fs::read(p).expect("test TLS file");
                options = options.with_tls(
                    etcd_client::TlsOptions::new()
                        .ca_certificate(etcd_client::Certificate::from_pem(read(&tls.ca)))
                        .identity(etcd_client::Identity::from_pem(read(&tls.client.0), read(&tls.client.1))),
                );
            }
            let connect = etcd_client::Client::connect([self.endpoint()], Some(options));
            match connect.await {
                Ok(mut c) => match c.status().await {
                    Ok(_) => return,
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            sleep(Duration::from_millis(50)).await;
        }
        panic!("etcd did not answer within 30 s: {last}; log: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Kills etcd (SIGKILL) without removing its data.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data dir and ports.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }

    /// A registry under `prefix` with a short request timeout, so tests notice a dead etcd quickly.
    pub async fn registry(&self, prefix: &str) -> Registry {
        self.registry_at(&self.endpoint(), prefix).await
    }

    /// [`TestEtcd::registry`] through `endpoint` (e.g. a [`crate::delay::delaying_forwarder`] to this etcd).
    pub async fn registry_at(&self, endpoint: &str, prefix: &str) -> Registry {
        let config = EtcdConfig {
            endpoints: vec![endpoint.to_string()],
            prefix: prefix.to_string(),
            // Generous: these tests judge behaviour, and a loaded 2-core machine can stall an fsync for seconds.
            request_timeout: Duration::from_secs(10),
            ..EtcdConfig::default()
        };
        Registry::connect(&config).await.expect("connect to test etcd")
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}

//! A real etcd for tests: `/usr/bin/etcd` on 127.0.0.1 with free ports and a temporary data dir, killed on drop
//! (also when the test panics), restartable on the same data dir and ports. Shared by the integration test binaries
//! (`#[path = "../support/etcd.rs"] mod etcd;`); each uses only part of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fleet::registry::{EtcdConfig, Registry};
use tokio::time::{Instant, sleep};

const ETCD: &str = "/usr/bin/etcd";

pub struct TestEtcd {
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
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
        };
        etcd.spawn().await;
        etcd
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    async fn spawn(&mut self) {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
        let child = Command::new(ETCD)
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
            let connect = etcd_client::Client::connect(
                [self.endpoint()],
                Some(etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_millis(500))),
            );
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
        let config = EtcdConfig {
            endpoints: vec![self.endpoint()],
            prefix: prefix.to_string(),
            // Generous: these tests judge behaviour, and a loaded 2-core machine can stall an fsync for seconds.
            request_timeout: Duration::from_secs(10),
            user: None,
        };
        Registry::connect(&config).await.expect("connect to test etcd")
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}

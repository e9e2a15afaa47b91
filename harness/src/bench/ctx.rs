//! One bench cluster: the harness cluster, a directory of local unit files, fleetctl against machine 1.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::options::Options;
use crate::fleetctl::{self, EndpointVia};
use crate::output::Output;
use crate::{Cluster, docker};

/// A fresh cluster for one scenario. Dropping it removes the cluster.
pub struct Ctx {
    pub cluster: Cluster,
    pub dir: tempfile::TempDir,
    /// Longest a fleetctl command may run (fleetctl's blocking waits on 1,000 units can be long).
    pub command_timeout: Duration,
}

/// A row of `list-units --no-legend --full --fields unit,active,sub,hash,machine,load`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub unit: String,
    pub active: String,
    pub sub: String,
    pub hash: String,
    pub machine: String,
    /// systemd's load state as the agent reported it (`-` before any report).
    pub load: String,
}

impl Row {
    pub fn running(&self) -> bool {
        self.active == "active" && self.sub == "running"
    }
}

impl Ctx {
    /// Starts the cluster and waits until fleet lists every machine.
    pub async fn new(opts: &Options) -> Result<Ctx, String> {
        Ctx::new_with(opts, |b| b).await
    }

    /// [`Ctx::new`] with more settings of the cluster (e.g. fleet.conf keys).
    pub async fn new_with(
        opts: &Options,
        configure: impl FnOnce(crate::ClusterBuilder) -> crate::ClusterBuilder,
    ) -> Result<Ctx, String> {
        let builder = Cluster::builder()
            .machines(opts.machines)
            .agent_ttl(&opts.agent_ttl)
            .config("verbosity", &opts.verbosity.to_string())
            .tls(opts.tls);
        let cluster = configure(builder).start().await.map_err(|e| format!("cluster: {e}"))?;
        cluster.wait_for_n_machines(1, opts.machines).await.map_err(|e| format!("machines: {e}"))?;
        let dir = tempfile::Builder::new().prefix("fleet-bench-").tempdir().map_err(|e| e.to_string())?;
        let command_timeout = opts.timeout.max(opts.destroy_timeout);
        Ok(Ctx { cluster, dir, command_timeout })
    }

    /// Runs fleetctl (against machine 1) in `cwd` (default: the unit directory); returns output and wall time.
    pub async fn fleetctl_in(&self, cwd: Option<&Path>, args: &[&str]) -> Result<(Output, Duration), String> {
        let bin = &self.cluster.binaries().fleetctl;
        let endpoint = self.cluster.machine(1).map_err(|e| e.to_string())?.endpoint();
        let t = Instant::now();
        let cwd = cwd.unwrap_or(self.dir.path());
        // A TLS cluster's fleetctl presents the admin certificate.
        let env = self.cluster.tls().map(|pki| pki.fleetctl_env(&pki.admin)).unwrap_or_default();
        let out =
            fleetctl::run_in(bin, &endpoint, EndpointVia::Flag, args, &env, None, Some(cwd), self.command_timeout)
                .await
                .map_err(|e| short(&e.to_string()))?;
        Ok((out, t.elapsed()))
    }

    /// [`Self::fleetctl_in`] the unit directory, failing on a non-zero exit.
    pub async fn fleetctl_ok(&self, args: &[&str]) -> Result<(Output, Duration), String> {
        let (out, took) = self.fleetctl_in(None, args).await?;
        if out.success() { Ok((out, took)) } else { Err(short(&format!("fleetctl {}: {}", args[0], out.describe()))) }
    }

    /// `list-units` rows.
    pub async fn list_units(&self) -> Result<Vec<Row>, String> {
        let args = ["list-units", "--no-legend", "--full", "--fields", "unit,active,sub,hash,machine,load"];
        let (out, _) = self.fleetctl_ok(&args).await?;
        Ok(out
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() == 6)
            .map(|f| Row {
                unit: f[0].into(),
                active: f[1].into(),
                sub: f[2].into(),
                hash: f[3].into(),
                machine: f[4].split('/').next().unwrap_or_default().into(),
                load: f[5].into(),
            })
            .collect())
    }

    /// `list-unit-files` unit → hash.
    pub async fn unit_file_hashes(&self) -> Result<BTreeMap<String, String>, String> {
        let args = ["list-unit-files", "--no-legend", "--full", "--fields", "unit,hash"];
        let (out, _) = self.fleetctl_ok(&args).await?;
        Ok(out
            .stdout
            .lines()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .map(|(u, h)| (u.to_string(), h.trim().to_string()))
            .collect())
    }

    /// Container names of the machines, in slot order.
    pub fn machine_names(&self) -> Vec<String> {
        self.cluster.machines().iter().map(|m| m.container_name().to_string()).collect()
    }

    /// `<ip>:<port>` of etcd's plain-HTTP metrics on the cluster network (the host reaches it directly): 2379, or
    /// 2381 in a TLS cluster.
    pub async fn etcd_addr(&self) -> Result<String, String> {
        let etcd = self.cluster.etcd().name();
        let ip = docker::container_ip(etcd, self.cluster.network()).await.map_err(|e| e.to_string())?;
        ip.map(|ip| format!("{ip}:{}", self.cluster.etcd().metrics_port()))
            .ok_or_else(|| format!("{etcd} has no address"))
    }

    /// How many `daemon-reload`s systemd has done on each machine since it booted (its journal's "Reloading"
    /// messages; the machines run journald).
    pub async fn daemon_reloads(&self) -> Result<Vec<usize>, String> {
        let script = "journalctl -b --no-pager -o cat _PID=1 | grep -c '^Reloading' || true";
        let counts = self.cluster.machines().iter().map(|m| async move {
            let out = m.exec(&["sh", "-c", script]).await.map_err(|e| e.to_string())?;
            out.stdout.trim().parse::<usize>().map_err(|_| format!("daemon-reload count: {}", out.describe()))
        });
        futures::future::join_all(counts).await.into_iter().collect()
    }

    /// Removes the cluster now.
    pub async fn finish(self) {
        self.cluster.destroy().await;
    }
}

/// Error texts of commands with 1,000 arguments are cut to something readable.
pub fn short(s: &str) -> String {
    const MAX: usize = 600;
    if s.len() <= MAX {
        return s.to_string();
    }
    let cut = (0..=MAX).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    format!("{}… ({} bytes)", &s[..cut], s.len())
}

/// `prefix@1.service` … `prefix@n.service`.
pub fn instances(prefix: &str, n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix}@{i}.service")).collect()
}

//! The cluster's etcd: Debian's binary (bind-mounted read-only) in a container of the machine image, v2 API
//! enabled as well, its data in the container's own file system so that stop/start keeps it. In a TLS cluster it
//! serves `https://` only and requires client certificates signed by the cluster's CA.
//!
//! One member by default; [`Members`] describes an etcd cluster of several members (one container each, peers
//! talking plain HTTP over the cluster network by container name), started together since none is healthy before
//! a quorum is. [`Etcd::status`] reads a member's own view of who leads, so a test can kill the leader.
//!
//! A space quota ([`Members::with_quota`], etcd's `--quota-backend-bytes`) and the maintenance an operator does when
//! etcd reaches it — [`Etcd::fill`] (junk until `NOSPACE`), [`Etcd::compact`], [`Etcd::defrag`],
//! [`Etcd::alarm_disarm`], [`Etcd::alarms`] — let a test run fleet against a full etcd and its recovery.

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
    #[error("etcd {name}: cannot read `etcdctl endpoint status`: {cause}")]
    Status { name: String, cause: String },
    /// An `etcdctl` maintenance command (fill, compact, defrag, alarm) failed.
    #[error("etcd {name}: {what}: {cause}")]
    Maintenance { name: String, what: String, cause: String },
}

/// What etcd answers a write while its `NOSPACE` alarm is raised (or the write would pass the quota).
pub const NO_SPACE: &str = "database space exceeded";

/// The members of an etcd cluster: container names, in member order. The member's etcd name is `etcd` when alone
/// (as before, so old data dirs still fit) and `etcd<n>` (1-based) in a cluster of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    pub containers: Vec<String>,
    /// etcd's `--quota-backend-bytes` (its default, 2 GiB, when `None`).
    pub quota_bytes: Option<u64>,
}

impl Members {
    /// `count` members for run container prefix `base`: `<base>` first, then `<base>-2`, `<base>-3`, …
    pub fn new(base: &str, count: usize) -> Members {
        let containers =
            (1..=count.max(1)).map(|i| if i == 1 { base.to_string() } else { format!("{base}-{i}") }).collect();
        Members { containers, quota_bytes: None }
    }

    /// The same members with a backend space quota of `bytes` (`--quota-backend-bytes`): past it etcd raises
    /// its `NOSPACE` alarm and refuses every write that adds data until compacted, defragmented and disarmed.
    pub fn with_quota(self, bytes: Option<u64>) -> Members {
        Members { quota_bytes: bytes, ..self }
    }

    /// etcd's `--name` of member `index` (0-based).
    pub fn member_name(&self, index: usize) -> String {
        if self.containers.len() == 1 { "etcd".to_string() } else { format!("etcd{}", index + 1) }
    }

    /// The peer URL of member `index`.
    fn peer_url(&self, index: usize) -> String {
        if self.containers.len() == 1 {
            "http://127.0.0.1:2380".to_string()
        } else {
            format!("http://{}:2380", self.containers[index])
        }
    }

    /// etcd's `--initial-cluster`: `name=peer-url,…` of every member.
    pub fn initial_cluster(&self) -> String {
        (0..self.containers.len())
            .map(|i| format!("{}={}", self.member_name(i), self.peer_url(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The command line of member `index` (`scheme`: `http` or `https` for clients).
    pub fn command(&self, index: usize, scheme: &str, cluster_token: &str) -> Vec<String> {
        let name = &self.containers[index];
        let listen_peer = if self.containers.len() == 1 { "http://127.0.0.1:2380" } else { "http://0.0.0.0:2380" };
        let mut cmd = vec![
            ETCD.to_string(),
            format!("--name={}", self.member_name(index)),
            "--data-dir=/var/lib/etcd/data".into(),
            "--enable-v2=true".into(),
            format!("--listen-client-urls={scheme}://0.0.0.0:2379"),
            format!("--advertise-client-urls={scheme}://{name}:{PORT}"),
            format!("--listen-peer-urls={listen_peer}"),
            format!("--initial-advertise-peer-urls={}", self.peer_url(index)),
            format!("--initial-cluster={}", self.initial_cluster()),
            format!("--initial-cluster-token={cluster_token}"),
            "--initial-cluster-state=new".into(),
        ];
        if let Some(bytes) = self.quota_bytes {
            cmd.push(format!("--quota-backend-bytes={bytes}"));
        }
        cmd
    }
}

/// One member's view from `etcdctl endpoint status`: its own ID and the leader's (both as etcd prints them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    pub member_id: u64,
    pub leader: u64,
}

impl MemberStatus {
    pub fn is_leader(&self) -> bool {
        self.member_id == self.leader && self.leader != 0
    }
}

/// A member's revision and backend size from `etcdctl endpoint status -w json` (`header.revision`, `dbSize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub revision: i64,
    pub db_size: u64,
}

/// Parses the revision and database size out of `etcdctl endpoint status -w json`.
pub fn parse_usage(json: &str) -> Result<Usage, String> {
    let v: serde_json::Value = serde_json::from_str(json.trim()).map_err(|e| format!("not JSON ({e}): {json:?}"))?;
    let status = v.get(0).and_then(|e| e.get("Status")).ok_or_else(|| format!("no Status in {json:?}"))?;
    let revision = status
        .get("header")
        .and_then(|h| h.get("revision"))
        .and_then(serde_json::Value::as_i64)
        .ok_or_else(|| format!("no header.revision in {json:?}"))?;
    let db_size =
        status.get("dbSize").and_then(serde_json::Value::as_u64).ok_or_else(|| format!("no dbSize in {json:?}"))?;
    Ok(Usage { revision, db_size })
}

/// The alarms of `etcdctl alarm list` (`memberID:<id> alarm:<NAME>` per line): the names, one per raised alarm.
pub fn parse_alarms(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("alarm:"))).map(String::from).collect()
}

/// Quotes `word` for `sh -c`.
fn sh_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// How [`Etcd::fill`] ended: the puts etcd took, and its answer to the one it refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filled {
    pub puts: usize,
    pub refusal: String,
}

/// The index of the member that leads, by the members' own answers (`None` where a member did not answer): the
/// member whose ID is the leader a majority of the answering members name. `None` when no leader is named or the
/// leader named did not answer itself.
pub fn leader_index(statuses: &[Option<MemberStatus>]) -> Option<usize> {
    let answered: Vec<&MemberStatus> = statuses.iter().flatten().collect();
    let named: Vec<u64> = answered.iter().map(|s| s.leader).filter(|l| *l != 0).collect();
    let leader = named.iter().copied().max_by_key(|l| named.iter().filter(|n| *n == l).count())?;
    statuses.iter().position(|s| s.as_ref().is_some_and(|s| s.member_id == leader))
}

/// Parses `etcdctl endpoint status -w json`: `[{"Endpoint":…,"Status":{"header":{"member_id":…},"leader":…}}]`.
pub fn parse_status(json: &str) -> Result<MemberStatus, String> {
    let v: serde_json::Value = serde_json::from_str(json.trim()).map_err(|e| format!("not JSON ({e}): {json:?}"))?;
    let status = v.get(0).and_then(|e| e.get("Status")).ok_or_else(|| format!("no Status in {json:?}"))?;
    let member_id = status
        .get("header")
        .and_then(|h| h.get("member_id"))
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("no header.member_id in {json:?}"))?;
    let leader =
        status.get("leader").and_then(serde_json::Value::as_u64).ok_or_else(|| format!("no leader in {json:?}"))?;
    Ok(MemberStatus { member_id, leader })
}

/// The etcd member of a cluster.
pub struct Etcd {
    name: String,
    container: Option<ContainerAsync<GenericImage>>,
    /// Serves clients over TLS with client certificate authentication.
    tls: bool,
}

impl Etcd {
    /// Starts every member of `members` and waits until each reports healthy (which needs a quorum, so all are
    /// launched before any is waited for).
    pub async fn start_members(
        place: &Placement,
        members: &Members,
        wait: WaitOptions,
        tls: Option<&crate::pki::ClusterPki>,
    ) -> Result<Vec<Self>, EtcdError> {
        if tls.is_some() && members.containers.len() > 1 {
            return Err(EtcdError::Tls {
                name: members.containers[0].clone(),
                path: "etcd.pem".into(),
                source: std::io::Error::other("a TLS cluster runs a single etcd member (its certificate names one)"),
            });
        }
        let mut launched = Vec::new();
        for index in 0..members.containers.len() {
            launched.push(Etcd::launch(place, members, index, tls).await?);
        }
        for etcd in &launched {
            etcd.wait_healthy(wait).await?;
        }
        tracing::info!(members = launched.len(), "etcd healthy");
        Ok(launched)
    }

    /// Starts the container of member `index` without waiting for it to be healthy.
    async fn launch(
        place: &Placement,
        members: &Members,
        index: usize,
        tls: Option<&crate::pki::ClusterPki>,
    ) -> Result<Self, EtcdError> {
        if !Path::new(ETCD).is_file() {
            return Err(EtcdError::NotInstalled);
        }
        let name = members.containers[index].as_str();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut cmd = members.command(index, scheme, &place.run.to_string());
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
            .with_hostname(members.member_name(index))
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
        Ok(Etcd { name: name.to_string(), container: Some(c), tls: tls.is_some() })
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
        self.etcdctl(&["endpoint", "health"]).await
    }

    /// The value of `key` as this member holds it (`None` when absent), read with `etcdctl get`.
    pub async fn get(&self, key: &str) -> Result<Option<String>, EtcdError> {
        let out = self.etcdctl(&["get", "--print-value-only", key]).await?;
        if !out.success() {
            return Err(EtcdError::Status { name: self.name.clone(), cause: format!("get {key}: {}", out.describe()) });
        }
        let value = out.stdout.strip_suffix('\n').unwrap_or(&out.stdout);
        Ok((!out.stdout.is_empty()).then(|| value.to_string()))
    }

    /// Every key under `prefix` (`etcdctl get --prefix --keys-only`), in key order.
    pub async fn keys_with_prefix(&self, prefix: &str) -> Result<Vec<String>, EtcdError> {
        let out = self.etcdctl(&["get", "--prefix", "--keys-only", prefix]).await?;
        if !out.success() {
            let cause = format!("get --prefix {prefix}: {}", out.describe());
            return Err(EtcdError::Status { name: self.name.clone(), cause });
        }
        Ok(out.stdout.lines().filter(|l| !l.is_empty()).map(String::from).collect())
    }

    /// `etcdctl` inside the container against this member only, with `args` after the connection flags.
    pub(crate) async fn etcdctl(&self, args: &[&str]) -> Result<Output, EtcdError> {
        self.etcdctl_within("2s", args).await
    }

    /// [`Self::etcdctl`] with another command timeout (`timeout` as etcdctl reads it, e.g. `30s`).
    async fn etcdctl_within(&self, timeout: &str, args: &[&str]) -> Result<Output, EtcdError> {
        let timeout = format!("--command-timeout={timeout}");
        let mut with_timeout = vec![timeout.as_str()];
        with_timeout.extend_from_slice(args);
        let cmd = self.etcdctl_command(&with_timeout);
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        container::exec(&self.name, &cmd).await.map_err(|source| EtcdError::Exec { name: self.name.clone(), source })
    }

    /// The `etcdctl` command line (to run inside this member's container) against this member only, with `args`
    /// after the connection flags.
    pub(crate) fn etcdctl_command(&self, args: &[&str]) -> Vec<String> {
        let mut cmd = vec![ETCDCTL.to_string()];
        if self.tls {
            cmd.extend([
                "--endpoints=https://127.0.0.1:2379".to_string(),
                format!("--cacert={TLS_DIR}/ca.pem"),
                format!("--cert={TLS_DIR}/etcd.pem"),
                format!("--key={TLS_DIR}/etcd-key.pem"),
            ]);
        } else {
            cmd.push("--endpoints=http://127.0.0.1:2379".into());
        }
        cmd.extend(args.iter().map(|a| a.to_string()));
        cmd
    }

    /// This member's own ID and the leader it knows (`etcdctl endpoint status`).
    pub async fn status(&self) -> Result<MemberStatus, EtcdError> {
        let out = self.etcdctl(&["endpoint", "status", "-w", "json"]).await?;
        if !out.success() {
            return Err(EtcdError::Status { name: self.name.clone(), cause: out.describe() });
        }
        parse_status(&out.stdout).map_err(|cause| EtcdError::Status { name: self.name.clone(), cause })
    }

    /// `etcdctl args` that must succeed; `what` names it in the error.
    async fn maintenance(&self, what: &str, timeout: &str, args: &[&str]) -> Result<Output, EtcdError> {
        let out = self.etcdctl_within(timeout, args).await?;
        if out.success() {
            Ok(out)
        } else {
            Err(EtcdError::Maintenance { name: self.name.clone(), what: what.to_string(), cause: out.describe() })
        }
    }

    /// This member's revision and backend size (`etcdctl endpoint status`).
    pub async fn usage(&self) -> Result<Usage, EtcdError> {
        let out = self.maintenance("endpoint status", "5s", &["endpoint", "status", "-w", "json"]).await?;
        parse_usage(&out.stdout).map_err(|cause| EtcdError::Status { name: self.name.clone(), cause })
    }

    /// Writes `chunk` bytes of junk to `key` again and again (each put keeps the previous versions until a
    /// compaction) until etcd refuses one for its space quota ([`NO_SPACE`]): etcd raises its `NOSPACE` alarm
    /// then. At most `max_puts` puts; an error if etcd took them all or refused one for another reason.
    pub async fn fill(&self, key: &str, chunk: usize, max_puts: usize) -> Result<Filled, EtcdError> {
        let put = self.etcdctl_command(&["--command-timeout=10s", "put", key]);
        let put: Vec<String> = put.iter().map(|w| sh_quote(w)).collect();
        let script = format!("head -c {chunk} /dev/zero | tr '\\0' x | {}", put.join(" "));
        let fail =
            |cause: String| EtcdError::Maintenance { name: self.name.clone(), what: format!("fill {key}"), cause };
        for puts in 0..max_puts {
            let out = container::exec(&self.name, &["sh", "-c", &script])
                .await
                .map_err(|source| EtcdError::Exec { name: self.name.clone(), source })?;
            if out.success() {
                continue;
            }
            let answer = format!("{} {}", out.stdout.trim(), out.stderr.trim());
            if answer.contains(NO_SPACE) {
                return Ok(Filled { puts, refusal: answer.trim().to_string() });
            }
            return Err(fail(format!("put {} refused for another reason: {}", puts + 1, out.describe())));
        }
        Err(fail(format!("etcd still took writes after {max_puts} puts of {chunk} bytes")))
    }

    /// Compacts the key space to the current revision (`etcdctl compact --physical`); returns that revision.
    pub async fn compact(&self) -> Result<i64, EtcdError> {
        let revision = self.usage().await?.revision;
        let rev = revision.to_string();
        self.maintenance("compact", "30s", &["compact", &rev, "--physical"]).await?;
        Ok(revision)
    }

    /// Defragments this member's backend (`etcdctl defrag`), giving the space compaction freed back.
    pub async fn defrag(&self) -> Result<(), EtcdError> {
        self.maintenance("defrag", "60s", &["defrag"]).await.map(|_| ())
    }

    /// Disarms every alarm of the cluster (`etcdctl alarm disarm`): etcd takes writes again.
    pub async fn alarm_disarm(&self) -> Result<(), EtcdError> {
        self.maintenance("alarm disarm", "10s", &["alarm", "disarm"]).await.map(|_| ())
    }

    /// The raised alarms of the cluster (`etcdctl alarm list`), e.g. `["NOSPACE"]`.
    pub async fn alarms(&self) -> Result<Vec<String>, EtcdError> {
        let out = self.maintenance("alarm list", "10s", &["alarm", "list"]).await?;
        Ok(parse_alarms(&out.stdout))
    }

    /// SIGKILL to etcd (the container stops; its data is kept).
    pub async fn kill(&self) -> Result<(), EtcdError> {
        crate::docker::kill(&self.name).await.map_err(|source| EtcdError::Docker { name: self.name.clone(), source })
    }

    /// What etcd logged (both streams of `docker logs`, with docker's timestamps), for explaining a run afterwards.
    pub async fn logs(&self) -> Result<String, EtcdError> {
        let out = tokio::process::Command::new("docker")
            .args(["logs", "--timestamps", &self.name])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| EtcdError::Docker {
                name: self.name.clone(),
                source: crate::docker::DockerError::Spawn { args: format!("docker logs {}", self.name), source: e },
            })?;
        // etcd logs to stderr; docker keeps the streams apart.
        Ok(format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout)))
    }

    /// The container's PID on the host (for entering its network namespace), `None` when it is not running.
    pub async fn host_pid(&self) -> Result<Option<u32>, EtcdError> {
        let out = crate::docker::run(&["inspect", "--format", "{{.State.Pid}}", &self.name])
            .await
            .map_err(|source| EtcdError::Docker { name: self.name.clone(), source })?;
        Ok(out.trim().parse::<u32>().ok().filter(|pid| *pid != 0))
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
        self.start_container().await?;
        self.wait_healthy(wait).await
    }

    /// Starts the stopped container again without waiting for etcd to be healthy.
    pub async fn start_container(&self) -> Result<(), EtcdError> {
        let c = self.container.as_ref().expect("etcd container present until drop");
        c.start().await.map_err(|source| EtcdError::Container { name: self.name.clone(), source })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_member_keeps_its_old_name_and_loopback_peer() {
        let m = Members::new("run-etcd", 1);
        assert_eq!(m.containers, ["run-etcd"]);
        assert_eq!(m.initial_cluster(), "etcd=http://127.0.0.1:2380");
        let cmd = m.command(0, "http", "run");
        assert!(cmd.contains(&"--name=etcd".to_string()), "{cmd:?}");
        assert!(cmd.contains(&"--listen-peer-urls=http://127.0.0.1:2380".to_string()), "{cmd:?}");
    }

    #[test]
    fn three_members_name_each_other_by_container() {
        let m = Members::new("run-etcd", 3);
        assert_eq!(m.containers, ["run-etcd", "run-etcd-2", "run-etcd-3"]);
        assert_eq!(
            m.initial_cluster(),
            "etcd1=http://run-etcd:2380,etcd2=http://run-etcd-2:2380,etcd3=http://run-etcd-3:2380"
        );
        let cmd = m.command(1, "http", "tok");
        for want in [
            "--name=etcd2",
            "--advertise-client-urls=http://run-etcd-2:2379",
            "--initial-advertise-peer-urls=http://run-etcd-2:2380",
            "--listen-peer-urls=http://0.0.0.0:2380",
            "--initial-cluster-token=tok",
        ] {
            assert!(cmd.contains(&want.to_string()), "{want} missing from {cmd:?}");
        }
    }

    #[test]
    fn status_json_names_member_and_leader() {
        let json = r#"[{"Endpoint":"http://127.0.0.1:2379","Status":{"header":{"cluster_id":1,"member_id":42,"revision":9,"raft_term":3},"version":"3.4.23","dbSize":20480,"leader":42,"raftIndex":10,"raftTerm":3}}]"#;
        let s = parse_status(json).unwrap();
        assert_eq!(s, MemberStatus { member_id: 42, leader: 42 });
        assert!(s.is_leader());
        let follower = parse_status(&json.replace("\"leader\":42", "\"leader\":7")).unwrap();
        assert!(!follower.is_leader());
        let err = parse_status("[{\"Endpoint\":\"x\"}]").unwrap_err();
        assert!(err.contains("no Status"), "{err}");
    }

    #[test]
    fn a_quota_is_etcds_backend_quota_flag() {
        let m = Members::new("run-etcd", 1);
        assert!(!m.command(0, "http", "run").iter().any(|a| a.starts_with("--quota-backend-bytes")));
        let cmd = m.with_quota(Some(4 << 20)).command(0, "http", "run");
        assert!(cmd.contains(&"--quota-backend-bytes=4194304".to_string()), "{cmd:?}");
    }

    #[test]
    fn usage_and_alarms_are_read_from_etcdctl() {
        let json = r#"[{"Endpoint":"http://127.0.0.1:2379","Status":{"header":{"cluster_id":1,"member_id":42,"revision":917,"raft_term":3},"version":"3.4.23","dbSize":4202496,"leader":42}}]"#;
        assert_eq!(parse_usage(json).unwrap(), Usage { revision: 917, db_size: 4_202_496 });
        assert!(parse_usage("[{\"Status\":{\"header\":{}}}]").unwrap_err().contains("revision"));
        assert_eq!(parse_alarms("memberID:8e9e05c52164694d alarm:NOSPACE \n"), ["NOSPACE"]);
        assert!(parse_alarms("").is_empty());
    }

    #[test]
    fn shell_words_are_quoted() {
        assert_eq!(sh_quote("/a b"), "'/a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn leader_is_the_member_the_others_name() {
        let st = |member_id, leader| Some(MemberStatus { member_id, leader });
        assert_eq!(leader_index(&[st(1, 2), st(2, 2), st(3, 2)]), Some(1));
        assert_eq!(leader_index(&[None, st(2, 3), st(3, 3)]), Some(2), "a dead member is skipped");
        assert_eq!(leader_index(&[st(1, 0), st(2, 0), None]), None, "no leader during an election");
        assert_eq!(leader_index(&[st(1, 3), st(2, 3), None]), None, "the named leader did not answer");
    }
}

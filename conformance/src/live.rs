//! A live cluster the suite does not control (`fleet-conformance --against`): its API endpoint, the fleetctl that
//! drives it, its machines as the API lists them (in slot order), commands inside those machines over SSH, and the
//! removal of every unit with a given prefix — the only units the suite ever touches there.
//!
//! Machines get slots like a harness cluster's: by their `hostname=m<k>` metadata when every machine has one and
//! they number 1..M (a harness cluster driven through its endpoint), otherwise in the API's order (by machine ID).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fleet_harness::Output;
use fleet_harness::fleetctl::{self as run_fleetctl, EndpointVia};
use fleet_harness::wait::{self, Check, WaitOptions};
use serde_json::Value;

use crate::LiveShape;
use crate::http::{self, Response};

/// The longest one command inside a machine may take (over SSH).
pub const SSH_TIMEOUT: Duration = Duration::from_secs(60);

/// Client certificate files for an API that requires them (fleetctl's `--ca-file`, `--cert-file`, `--key-file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// How to run commands inside the machines: `ssh -i <key> -p <port> <user>@<machine's public IP>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshAccess {
    pub user: String,
    pub key: PathBuf,
    pub port: u16,
}

/// What `fleet-conformance --against` was told about the cluster.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// `http://host:port`, `https://host:port`, `unix:///path` or a socket path.
    pub endpoint: String,
    /// The fleetctl that drives the cluster (the implementation's own).
    pub fleetctl: PathBuf,
    pub tls: Option<TlsFiles>,
    pub ssh: Option<SshAccess>,
}

/// One machine as the API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMachine {
    pub id: String,
    pub ip: String,
    pub metadata: BTreeMap<String, String>,
}

/// A live cluster, shared by every spec of a run.
#[derive(Debug)]
pub struct LiveCluster {
    opts: LiveOptions,
    tls: Option<Arc<rustls::ClientConfig>>,
    machines: Vec<LiveMachine>,
    /// Known-hosts files for fleetctl and ssh, so that neither touches the user's.
    tmp: tempfile::TempDir,
}

impl LiveCluster {
    /// Reads the machines from the API (every page). Fails with what went wrong when the endpoint does not answer.
    pub async fn connect(opts: LiveOptions) -> Result<LiveCluster, String> {
        let tls = match &opts.tls {
            Some(files) => {
                let client = match (&files.cert, &files.key) {
                    (Some(cert), Some(key)) => {
                        Some(fleet_harness::pki::CertFiles { cert: cert.clone(), key: key.clone() })
                    }
                    (None, None) => None,
                    _ => return Err("--cert and --key go together".into()),
                };
                Some(Arc::new(fleet_harness::pki::client_config(&files.ca, client.as_ref())?))
            }
            None if opts.endpoint.starts_with("https://") => {
                return Err(format!(
                    "{} is https://: give --ca (and --cert/--key if it wants a client certificate)",
                    opts.endpoint
                ));
            }
            None => None,
        };
        let tmp = tempfile::Builder::new()
            .prefix("fleet-conformance-live-")
            .tempdir()
            .map_err(|e| format!("a temporary directory: {e}"))?;
        let mut cluster = LiveCluster { opts, tls, machines: Vec::new(), tmp };
        cluster.machines = cluster.read_machines().await?;
        if cluster.machines.is_empty() {
            return Err(format!("{} lists no machines", cluster.opts.endpoint));
        }
        Ok(cluster)
    }

    /// Removes this run's known-hosts files now (a process that ends with `exit` drops nothing).
    pub fn remove_files(&self) {
        let _ = std::fs::remove_dir_all(self.tmp.path());
    }

    pub fn endpoint(&self) -> &str {
        &self.opts.endpoint
    }

    /// The machines in slot order (slot 1 first).
    pub fn machines(&self) -> &[LiveMachine] {
        &self.machines
    }

    /// Machine `slot` (1-based).
    pub fn machine(&self, slot: usize) -> Result<&LiveMachine, String> {
        slot.checked_sub(1).and_then(|i| self.machines.get(i)).ok_or_else(|| {
            format!(
                "the cluster at {} has {} machines; there is no machine {slot}",
                self.endpoint(),
                self.machines.len()
            )
        })
    }

    /// What the specs' needs are judged against.
    pub fn shape(&self) -> LiveShape {
        LiveShape { machines: self.machines.iter().map(|m| m.metadata.clone()).collect(), ssh: self.opts.ssh.is_some() }
    }

    pub fn has_ssh(&self) -> bool {
        self.opts.ssh.is_some()
    }

    /// The machines as `GET /fleet/v1/machines` lists them (every page), in slot order.
    async fn read_machines(&self) -> Result<Vec<LiveMachine>, String> {
        let mut machines: Vec<LiveMachine> = self
            .list_all("/fleet/v1/machines", "machines")
            .await?
            .into_iter()
            .map(|m| LiveMachine {
                id: m["id"].as_str().unwrap_or_default().to_string(),
                ip: m["primaryIP"].as_str().unwrap_or_default().to_string(),
                metadata: m["metadata"]
                    .as_object()
                    .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                    .unwrap_or_default(),
            })
            .collect();
        machines.sort_by(|a, b| a.id.cmp(&b.id));
        let numbers: Vec<Option<usize>> = machines
            .iter()
            .map(|m| m.metadata.get("hostname").and_then(|h| h.strip_prefix('m')).and_then(|n| n.parse().ok()))
            .collect();
        let mut sorted: Vec<usize> = numbers.iter().flatten().copied().collect();
        sorted.sort_unstable();
        if sorted.len() == machines.len() && sorted.iter().enumerate().all(|(i, n)| *n == i + 1) {
            machines.sort_by_key(|m| m.metadata.get("hostname").and_then(|h| h[1..].parse::<usize>().ok()));
        }
        Ok(machines)
    }

    /// Every item of a paginated listing (`machines`, `units`, `states`).
    async fn list_all(&self, path: &str, key: &str) -> Result<Vec<Value>, String> {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..10_000 {
            let page = match &token {
                Some(t) => format!("{path}?nextPageToken={t}"),
                None => path.to_string(),
            };
            let r = self.http("GET", &page, None, None).await?;
            if r.status != 200 {
                return Err(format!("GET {}{page}: {}", self.endpoint(), r.describe()));
            }
            let v = r.json();
            items.extend(v[key].as_array().cloned().unwrap_or_default());
            match v["nextPageToken"].as_str().filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t.to_string()),
                None => return Ok(items),
            }
        }
        Err(format!("GET {}{path}: more than 10,000 pages", self.endpoint()))
    }

    /// One raw request to the API (with the client certificate when given).
    pub async fn http(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        content_type: Option<&str>,
    ) -> Result<Response, String> {
        http::request_with(self.endpoint(), self.tls.clone(), method, path, body, content_type).await
    }

    /// The names of every unit of the cluster that starts with `prefix` (`GET /fleet/v1/units`, every page).
    pub async fn units_with_prefix(&self, prefix: &str) -> Result<Vec<String>, String> {
        Ok(self
            .list_all("/fleet/v1/units", "units")
            .await?
            .iter()
            .filter_map(|u| u["name"].as_str())
            .filter(|n| n.starts_with(prefix))
            .map(str::to_string)
            .collect())
    }

    /// The names of the units starting with `prefix` that some machine still reports a state of (`GET
    /// /fleet/v1/state`): a destroyed unit's agent has not stopped and unloaded it yet.
    async fn states_with_prefix(&self, prefix: &str) -> Result<Vec<String>, String> {
        Ok(self
            .list_all("/fleet/v1/state", "states")
            .await?
            .iter()
            .filter_map(|u| u["name"].as_str())
            .filter(|n| n.starts_with(prefix))
            .map(str::to_string)
            .collect())
    }

    /// Destroys every unit whose name starts with `prefix` (and nothing else), found through the API rather than
    /// remembered, and waits until no machine reports one any more. Returns the units destroyed.
    pub async fn destroy_prefixed(&self, prefix: &str) -> Result<Vec<String>, String> {
        if prefix.is_empty() {
            return Err("refusing to destroy units without a prefix".into());
        }
        let destroyed = std::sync::Mutex::new(Vec::new());
        let what = format!("no unit starting with {prefix:?} left on {}", self.endpoint());
        wait::wait_for(WaitOptions::secs(60).with_poll(Duration::from_millis(500)), &what, || {
            let destroyed = &destroyed;
            async move {
                let units = match self.units_with_prefix(prefix).await {
                    Ok(u) => u,
                    Err(e) => return Check::NotYet(e),
                };
                for unit in &units {
                    match self.http("DELETE", &format!("/fleet/v1/units/{unit}"), None, None).await {
                        Ok(r) if r.status == 204 || r.status == 404 => {
                            let mut d = destroyed.lock().unwrap();
                            if !d.contains(unit) {
                                d.push(unit.clone());
                            }
                        }
                        Ok(r) => return Check::NotYet(format!("DELETE {unit}: {}", r.describe())),
                        Err(e) => return Check::NotYet(e),
                    }
                }
                match self.states_with_prefix(prefix).await {
                    Ok(states) if units.is_empty() && states.is_empty() => Check::Ready(()),
                    Ok(states) => Check::NotYet(format!("units {units:?}, states still reported {states:?}")),
                    Err(e) => Check::NotYet(e),
                }
            }
        })
        .await
        .map_err(|e| e.to_string())?;
        Ok(destroyed.into_inner().unwrap())
    }

    /// The environment of every fleetctl run: its own known-hosts file, and the TLS files when given.
    fn fleetctl_env(&self) -> Vec<(String, String)> {
        let mut env = vec![(
            "FLEETCTL_KNOWN_HOSTS_FILE".to_string(),
            self.tmp.path().join("fleetctl_known_hosts").display().to_string(),
        )];
        if let Some(t) = &self.opts.tls {
            env.push(("FLEETCTL_CA_FILE".into(), t.ca.display().to_string()));
            if let (Some(cert), Some(key)) = (&t.cert, &t.key) {
                env.push(("FLEETCTL_CERT_FILE".into(), cert.display().to_string()));
                env.push(("FLEETCTL_KEY_FILE".into(), key.display().to_string()));
            }
        }
        env
    }

    /// Runs the cluster's fleetctl with `args` and the endpoint (as `--endpoint`, or in `FLEETCTL_ENDPOINT`),
    /// feeding `stdin` when given.
    pub async fn fleetctl(&self, via: EndpointVia, args: &[&str], stdin: Option<&str>) -> Result<Output, String> {
        let env = self.fleetctl_env();
        let timeout = wait::scaled(run_fleetctl::TIMEOUT);
        run_fleetctl::run_in(&self.opts.fleetctl, self.endpoint(), via, args, &env, stdin, None, timeout)
            .await
            .map_err(|e| e.to_string())
    }

    /// The fleetctl binary.
    pub fn fleetctl_path(&self) -> &Path {
        &self.opts.fleetctl
    }

    /// Runs `cmd` inside machine `slot` over SSH: its output and exit status; an SSH failure (exit 255) is an error.
    pub async fn exec(&self, slot: usize, cmd: &[String]) -> Result<Output, String> {
        let ssh = self.opts.ssh.as_ref().ok_or(crate::NEEDS_SSH)?;
        let m = self.machine(slot)?;
        let target = format!("{}@{}", ssh.user, m.ip);
        let remote = cmd.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ");
        let known_hosts = self.tmp.path().join("ssh_known_hosts");
        let mut c = tokio::process::Command::new("ssh");
        c.args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=10"])
            .args(["-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .arg("-i")
            .arg(&ssh.key)
            .args(["-p", &ssh.port.to_string(), &target, "--", &remote])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(wait::scaled(SSH_TIMEOUT), c.output())
            .await
            .map_err(|_| format!("ssh {target} {remote}: no answer within {SSH_TIMEOUT:?}"))?
            .map_err(|e| format!("ssh {target}: {e} (is the OpenSSH client installed?)"))?;
        let out = Output {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            status: out.status.code().unwrap_or(-1),
        };
        if out.status == 255 {
            return Err(format!("ssh {target} {remote}: {}", out.describe()));
        }
        Ok(out)
    }
}

/// `word` quoted for a POSIX shell (ssh hands the remote command to the login shell).
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c)) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn words_reach_the_remote_shell_as_they_are() {
        assert_eq!(shell_quote("systemctl"), "systemctl");
        assert_eq!(shell_quote("/run/fleet/units/a@1.service"), "/run/fleet/units/a@1.service");
        assert_eq!(shell_quote("ls -A /x || true"), "'ls -A /x || true'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}

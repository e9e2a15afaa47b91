//! The state file of a long-lived cluster (`fleet-harness up`), so that `status` and `down` work from another
//! process.

use std::path::PathBuf;

use crate::labels::RunId;

/// Directory of state files; `FLEET_HARNESS_STATE_DIR` overrides.
pub fn dir() -> PathBuf {
    std::env::var_os("FLEET_HARNESS_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/fleet-harness"))
}

/// The state file of cluster `name`.
pub fn path(name: &str) -> PathBuf {
    dir().join(format!("{name}.json"))
}

/// A state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("no cluster `{name}` is up (no {path})")]
    NotUp { name: String, path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
}

/// One machine of a persisted cluster.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MachineState {
    pub name: String,
    pub container: String,
    pub id: String,
    pub ip: String,
    pub endpoint: String,
}

/// A persisted cluster.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClusterState {
    pub run: RunId,
    pub network: String,
    pub etcd: String,
    pub machines: Vec<MachineState>,
    pub fleetctl: PathBuf,
    pub tmp: Option<PathBuf>,
    /// The cluster's ssh-agent (`SSH_AUTH_SOCK`) and its pid, stopped by `down`.
    #[serde(default)]
    pub ssh_auth_sock: Option<PathBuf>,
    #[serde(default)]
    pub ssh_agent_pid: Option<u32>,
    /// The known-hosts file fleetctl is pointed at (`FLEETCTL_KNOWN_HOSTS_FILE`).
    #[serde(default)]
    pub known_hosts_file: Option<PathBuf>,
    /// A TLS cluster's fleetctl environment (`FLEETCTL_CA_FILE`, `_CERT_FILE`, `_KEY_FILE`, admin role) and the
    /// read-only role's certificate and key.
    #[serde(default)]
    pub tls: Option<TlsState>,
}

/// The client certificates of a TLS cluster, in the cluster's temporary directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsState {
    pub ca: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub read_cert: PathBuf,
    pub read_key: PathBuf,
}

impl ClusterState {
    /// The `export` lines a shell needs for fleetctl to drive this cluster (`list-*`, `status`, `journal`, `ssh`).
    pub fn env_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(m) = self.machines.first() {
            lines.push(format!("export FLEETCTL_ENDPOINT={}", m.endpoint));
        }
        if let Some(s) = &self.ssh_auth_sock {
            lines.push(format!("export SSH_AUTH_SOCK={}", s.display()));
        }
        if let Some(k) = &self.known_hosts_file {
            lines.push(format!("export FLEETCTL_KNOWN_HOSTS_FILE={}", k.display()));
        }
        if let Some(tls) = &self.tls {
            lines.push(format!("export FLEETCTL_CA_FILE={}", tls.ca.display()));
            lines.push(format!("export FLEETCTL_CERT_FILE={}", tls.admin_cert.display()));
            lines.push(format!("export FLEETCTL_KEY_FILE={}", tls.admin_key.display()));
            lines.push(format!(
                "# read-only role instead: FLEETCTL_CERT_FILE={} FLEETCTL_KEY_FILE={}",
                tls.read_cert.display(),
                tls.read_key.display()
            ));
        }
        lines
    }
}

impl ClusterState {
    pub fn save(&self, name: &str) -> Result<PathBuf, StateError> {
        let path = path(name);
        let io = |source| StateError::Io { path: path.clone(), source };
        std::fs::create_dir_all(dir()).map_err(io)?;
        let text =
            serde_json::to_string_pretty(self).map_err(|source| StateError::Json { path: path.clone(), source })?;
        std::fs::write(&path, text).map_err(io)?;
        Ok(path)
    }

    pub fn load(name: &str) -> Result<Self, StateError> {
        let path = path(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StateError::NotUp { name: name.to_string(), path });
            }
            Err(source) => return Err(StateError::Io { path, source }),
        };
        serde_json::from_str(&text).map_err(|source| StateError::Json { path, source })
    }

    pub fn forget(name: &str) -> Result<(), StateError> {
        let path = path(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StateError::Io { path, source: e }),
            _ => Ok(()),
        }
    }
}

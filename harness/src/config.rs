//! What runs fleet inside a machine: `fleet.conf` with the standard keys (spec §2.3) and the systemd units of the
//! original deployment (`fleet.service`, `fleet.socket`, `fleet-tcp.socket`; spec §1.3 step 5, §11.1).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// TCP port of `fleet-tcp.socket`, as in the original functional tests.
pub const API_PORT: u16 = 54728;
/// Where the fleetd binary is bind-mounted (read-only) in every machine.
pub const FLEETD_PATH: &str = "/opt/fleet/fleetd";
/// Where the fleetctl binary is bind-mounted (read-only) in every machine; the image links `fleetctl` on PATH to it
/// (`fleetctl fd-forward` on a tunnel host, fleetctl run inside a machine).
pub const FLEETCTL_PATH: &str = "/opt/fleet/fleetctl";
/// Where fleet.conf is written in every machine.
pub const CONF_PATH: &str = "/etc/fleet/fleet.conf";
/// The Unix socket of `fleet.socket`.
pub const SOCKET_PATH: &str = "/var/run/fleet.sock";
/// Environment variables naming the binaries to use instead of this workspace's build.
pub const FLEETD_ENV: &str = "FLEETD_BIN";
pub const FLEETCTL_ENV: &str = "FLEETCTL_BIN";

/// fleet.conf keys set by the cluster (and overridable with [`crate::ClusterBuilder::config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetConf {
    /// `key → value`, written in key order. Values are written verbatim.
    pub keys: BTreeMap<String, String>,
}

impl FleetConf {
    /// The keys every machine gets: etcd, its public IP, metadata, prefix; `overrides` win.
    pub fn for_machine(
        etcd_url: &str,
        public_ip: &str,
        metadata: &str,
        key_prefix: &str,
        overrides: &BTreeMap<String, String>,
    ) -> Self {
        let mut keys = BTreeMap::new();
        keys.insert("etcd_servers".into(), etcd_url.to_string());
        keys.insert("public_ip".into(), public_ip.to_string());
        keys.insert("metadata".into(), metadata.to_string());
        keys.insert("etcd_key_prefix".into(), key_prefix.to_string());
        keys.insert("agent_ttl".into(), "3s".into());
        keys.insert("verbosity".into(), "1".into());
        keys.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
        FleetConf { keys }
    }

    /// The file text: one `key=value` line per key.
    pub fn render(&self) -> String {
        self.keys.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }
}

/// `fleet.service` as the original was deployed: started by systemd, restarted when it exits; with glibc's
/// allocator tuned as the package's unit tunes it (`ci/deb/fleet.service`).
pub fn fleet_service() -> String {
    format!(
        "[Unit]\nDescription=fleet daemon\nWants=fleet.socket\nAfter=fleet.socket\n# Stopped before D-Bus at shutdown, so a graceful stop can still stop its units.\nAfter=dbus.service\n\n\
         [Service]\nExecStart={FLEETD_PATH} -config {CONF_PATH}\nEnvironment={FLEETD_ALLOCATOR_TUNABLES}\nRestart=always\nRestartSec=10s\n"
    )
}

/// Where [`crate::Machine::upgrade_fleetd`] copies a new fleetd binary into a machine.
pub const UPGRADED_FLEETD_PATH: &str = "/usr/local/lib/fleet/fleetd";

/// The drop-in that points `fleet.service` at an upgraded binary ([`UPGRADED_FLEETD_PATH`]).
pub fn upgraded_fleet_service() -> String {
    format!("[Service]\nExecStart=\nExecStart={UPGRADED_FLEETD_PATH} -config {CONF_PATH}\n")
}

/// fleetd's allocator settings, the same in the package's `fleet.service`: no per-thread caches or fast bins, so
/// freed blocks are merged and trimmed rather than held (git history of docs/bench.md at 58f0c3f, "fleetd under 10 MiB").
pub const FLEETD_ALLOCATOR_TUNABLES: &str = "GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.mxfast=0";

/// `fleet.socket`: the API on a Unix socket.
pub fn fleet_socket() -> String {
    format!("[Unit]\nDescription=fleet daemon API socket\n\n[Socket]\nListenStream={SOCKET_PATH}\n")
}

/// `fleet-tcp.socket`: the API on TCP, for fleetctl on the host.
pub fn fleet_tcp_socket() -> String {
    format!(
        "[Unit]\nDescription=fleet daemon API TCP socket\n\n[Socket]\nListenStream={API_PORT}\nService=fleet.service\n"
    )
}

/// The units written into `/etc/systemd/system/` of every machine, `(file name, text)`.
pub fn fleet_units() -> [(&'static str, String); 3] {
    [("fleet.service", fleet_service()), ("fleet.socket", fleet_socket()), ("fleet-tcp.socket", fleet_tcp_socket())]
}

/// The binaries a cluster uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub fleetd: PathBuf,
    pub fleetctl: PathBuf,
}

/// A binary could not be found.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    #[error("{env} is set but empty; unset it or name the binary's file")]
    EmptyOverride { env: &'static str },
    #[error("{env}={path} does not name an existing file (looked at {})", resolved.display())]
    BadOverride { env: &'static str, path: String, resolved: PathBuf },
    #[error("{env}={path} is relative, and the current directory to resolve it against is unknown: {source}")]
    NoCurrentDir { env: &'static str, path: String, source: std::io::Error },
    #[error("no `{name}` binary found (looked in: {looked}); run `cargo build --workspace` or set {env}")]
    NotBuilt { name: &'static str, env: &'static str, looked: String },
}

impl Binaries {
    /// `FLEETD_BIN` / `FLEETCTL_BIN` when set, else this workspace's build output.
    pub fn locate() -> Result<Self, BinaryError> {
        Ok(Binaries { fleetd: locate("fleetd", FLEETD_ENV)?, fleetctl: locate("fleetctl", FLEETCTL_ENV)? })
    }
}

/// Finds a binary: `$env` if set (a relative path is resolved against the current directory); else next to the
/// running executable (`target/<profile>/` or its `deps/`); else `$CARGO_TARGET_DIR/debug`; else
/// `<workspace>/target/debug`. The path returned is absolute: Docker bind-mounts it into the machines, and Docker
/// refuses relative mount sources ("mount path must be absolute").
pub fn locate(name: &'static str, env: &'static str) -> Result<PathBuf, BinaryError> {
    if let Some(value) = std::env::var_os(env) {
        let value = PathBuf::from(value);
        let cwd = if value.is_absolute() {
            PathBuf::new()
        } else {
            std::env::current_dir().map_err(|source| BinaryError::NoCurrentDir {
                env,
                path: value.display().to_string(),
                source,
            })?
        };
        return resolve_override(env, &value, &cwd);
    }
    let candidates = candidate_dirs();
    for dir in &candidates {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    let looked = candidates.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
    Err(BinaryError::NotBuilt { name, env, looked })
}

/// The file an override such as `FLEETD_BIN=target/release/fleetd` names, as an absolute path without `.`, `..`
/// or symlinks: `value` itself when absolute, else `value` resolved against `cwd`. It must be an existing file.
pub fn resolve_override(env: &'static str, value: &Path, cwd: &Path) -> Result<PathBuf, BinaryError> {
    if value.as_os_str().is_empty() {
        return Err(BinaryError::EmptyOverride { env });
    }
    let resolved = cwd.join(value);
    let bad = || BinaryError::BadOverride { env, path: value.display().to_string(), resolved: resolved.clone() };
    if !resolved.is_file() {
        return Err(bad());
    }
    std::fs::canonicalize(&resolved).map_err(|_| bad())
}

fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        if dir.file_name().is_some_and(|n| n == "deps") {
            dirs.extend(dir.parent().map(Path::to_path_buf));
        }
        dirs.push(dir.to_path_buf());
    }
    if let Ok(target) = std::env::var("CARGO_TARGET_DIR") {
        // A relative CARGO_TARGET_DIR (e.g. `target`) is relative to the current directory; made absolute here.
        dirs.extend(std::path::absolute(PathBuf::from(target).join("debug")));
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug"));
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_has_the_standard_keys_and_overrides_win() {
        let overrides = BTreeMap::from([("agent_ttl".to_string(), "5s".to_string())]);
        let conf = FleetConf::for_machine("http://etcd:2379", "10.1.2.3", "hostname=m1", "/p", &overrides);
        assert_eq!(
            conf.render(),
            "agent_ttl=5s\netcd_key_prefix=/p\netcd_servers=http://etcd:2379\nmetadata=hostname=m1\n\
             public_ip=10.1.2.3\nverbosity=1\n"
        );
    }

    /// A directory holding `target/release/fleetd`, as a workspace with a release build does.
    fn workspace_with_release_fleetd() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("target/release")).unwrap();
        std::fs::write(dir.path().join("target/release/fleetd"), "#!/bin/sh\n").unwrap();
        dir
    }

    #[test]
    fn relative_override_is_resolved_against_the_current_directory() {
        let ws = workspace_with_release_fleetd();
        let resolved = resolve_override(FLEETD_ENV, Path::new("target/release/fleetd"), ws.path())
            .unwrap_or_else(|e| panic!("relative to {}: {e}", ws.path().display()));
        assert!(resolved.is_absolute(), "Docker refuses relative mount sources, got {}", resolved.display());
        assert_eq!(resolved, ws.path().canonicalize().unwrap().join("target/release/fleetd"));
        let dotted = resolve_override(FLEETD_ENV, Path::new("./target/../target/release/fleetd"), ws.path())
            .unwrap_or_else(|e| panic!("relative to {}: {e}", ws.path().display()));
        assert_eq!(dotted, resolved, "`.` and `..` are resolved too");
    }

    #[test]
    fn absolute_override_is_used_as_it_is() {
        let ws = workspace_with_release_fleetd();
        let file = ws.path().canonicalize().unwrap().join("target/release/fleetd");
        assert_eq!(resolve_override(FLEETD_ENV, &file, Path::new("/nonexistent")).unwrap(), file);
    }

    #[test]
    fn missing_override_names_the_variable_and_where_it_looked() {
        let ws = workspace_with_release_fleetd();
        let err = resolve_override(FLEETCTL_ENV, Path::new("target/release/fleetctl"), ws.path()).unwrap_err();
        let expected = format!(
            "FLEETCTL_BIN=target/release/fleetctl does not name an existing file (looked at {})",
            ws.path().join("target/release/fleetctl").display()
        );
        assert_eq!(err.to_string(), expected);
        let dir = resolve_override(FLEETD_ENV, Path::new("target/release"), ws.path()).unwrap_err();
        assert!(matches!(dir, BinaryError::BadOverride { .. }), "a directory is not a binary: {dir}");
    }

    #[test]
    fn empty_override_is_an_error_naming_the_variable() {
        let err = resolve_override(FLEETD_ENV, Path::new(""), Path::new("/")).unwrap_err();
        assert_eq!(err.to_string(), "FLEETD_BIN is set but empty; unset it or name the binary's file");
    }

    #[test]
    fn tcp_socket_activates_fleet_service() {
        assert!(fleet_tcp_socket().contains("ListenStream=54728\nService=fleet.service\n"));
        assert!(fleet_service().contains("ExecStart=/opt/fleet/fleetd -config /etc/fleet/fleet.conf\n"));
    }

    #[test]
    fn fleetd_gets_the_allocator_settings_of_the_package_unit() {
        let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/deb/fleet.service");
        let package = std::fs::read_to_string(&package).unwrap();
        let line = format!("Environment={FLEETD_ALLOCATOR_TUNABLES}\n");
        assert!(package.contains(&line), "ci/deb/fleet.service does not set {line:?}:\n{package}");
        assert!(fleet_service().contains(&line), "the harness's fleet.service does not set {line:?}");
    }
}

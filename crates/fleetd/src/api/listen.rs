//! Where the API listens: sockets handed over by systemd (`LISTEN_FDS`, spec §1.3 step 5) and sockets fleetd binds
//! itself (`api_listeners`). Listeners are created once and survive configuration reloads.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;

/// A listening socket the server accepts on.
#[derive(Debug)]
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Listener {
    /// A human-readable address for logs.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| format!("tcp://{a}")).unwrap_or_else(|_| "tcp://?".into()),
            Listener::Unix(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| format!("unix://{}", p.display())))
                .unwrap_or_else(|| "unix://?".into()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("socket passed by systemd as fd {fd} is unusable: {source}")]
    Activated { fd: i32, source: std::io::Error },
    #[error("socket passed by systemd as fd {fd} is neither TCP nor a Unix stream socket")]
    UnknownFamily { fd: i32 },
    #[error("invalid API listener {0:?}: expected unix:///path or tcp://host:port")]
    BadAddress(String),
    #[error("cannot listen on {address}: {source}")]
    Bind { address: String, source: std::io::Error },
    #[error("API socket {path}: unknown group {group:?} (api_socket_group)")]
    UnknownGroup { path: PathBuf, group: String },
    #[error("API socket {path}: cannot set owner group or mode: {source}")]
    Permissions { path: PathBuf, source: std::io::Error },
}

/// First file descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;

/// Takes the sockets systemd passed to this process, if `LISTEN_PID` names it. Clears the variables so that child
/// processes do not inherit them.
pub fn activated() -> Result<Vec<Listener>, ListenError> {
    let for_us = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<i32>().ok()).unwrap_or(0);
    // SAFETY: removing variables happens before any thread of ours reads the environment concurrently.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    if !for_us || count <= 0 {
        return Ok(Vec::new());
    }
    (LISTEN_FDS_START..LISTEN_FDS_START + count).map(from_fd).collect()
}

fn from_fd(fd: i32) -> Result<Listener, ListenError> {
    // SAFETY: systemd hands these descriptors to this process exclusively; we take ownership exactly once.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let socket = socket2::Socket::from(owned);
    let wrap = |source| ListenError::Activated { fd, source };
    socket.set_cloexec(true).map_err(wrap)?;
    socket.set_nonblocking(true).map_err(wrap)?;
    let local = socket.local_addr().map_err(wrap)?;
    if local.is_unix() {
        let std_listener: std::os::unix::net::UnixListener = OwnedFd::from(socket).into();
        tokio::net::UnixListener::from_std(std_listener).map(Listener::Unix).map_err(wrap)
    } else if local.as_socket().is_some() {
        let std_listener: std::net::TcpListener = OwnedFd::from(socket).into();
        tokio::net::TcpListener::from_std(std_listener).map(Listener::Tcp).map_err(wrap)
    } else {
        Err(ListenError::UnknownFamily { fd })
    }
}

/// A listener address from configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    Unix(PathBuf),
    Tcp(String),
}

impl std::str::FromStr for ListenAddress {
    type Err = ListenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix://").filter(|p| p.starts_with('/')) {
            return Ok(ListenAddress::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = s.strip_prefix("tcp://").filter(|a| a.contains(':')) {
            return Ok(ListenAddress::Tcp(addr.to_string()));
        }
        Err(ListenError::BadAddress(s.to_string()))
    }
}

/// Binds a configured address. A stale Unix socket file left by an earlier fleetd is replaced.
pub async fn bind(address: &ListenAddress) -> Result<Listener, ListenError> {
    match address {
        ListenAddress::Tcp(addr) => tokio::net::TcpListener::bind(addr)
            .await
            .map(Listener::Tcp)
            .map_err(|source| ListenError::Bind { address: format!("tcp://{addr}"), source }),
        ListenAddress::Unix(path) => {
            let bind_err = |source| ListenError::Bind { address: format!("unix://{}", path.display()), source };
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(bind_err)?;
            }
            if std::os::unix::net::UnixStream::connect(path).is_err() {
                let _ = std::fs::remove_file(path);
            }
            tokio::net::UnixListener::bind(path).map(Listener::Unix).map_err(bind_err)
        }
    }
}

/// Restricts who may connect to the Unix socket at `path`: mode `mode` (e.g. 0660), owner root (fleetd's user) and
/// group `group` (a name or number; empty keeps the current group).
pub fn restrict_socket(path: &std::path::Path, mode: u32, group: &str) -> Result<(), ListenError> {
    use std::os::unix::fs::PermissionsExt;
    let failed = |source| ListenError::Permissions { path: path.to_path_buf(), source };
    if !group.is_empty() {
        let gid = group_id(group)
            .ok_or_else(|| ListenError::UnknownGroup { path: path.to_path_buf(), group: group.into() })?;
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(failed)?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(failed)
}

/// The id of group `group` (a number, or a name looked up in the group database).
fn group_id(group: &str) -> Option<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        return Some(gid);
    }
    let name = std::ffi::CString::new(group).ok()?;
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the buffer outlives it; `found` is only compared to null.
    let rc = unsafe { libc::getgrnam_r(name.as_ptr(), &mut entry, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    (rc == 0 && !found.is_null()).then_some(entry.gr_gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_configured_addresses() {
        assert_eq!(
            "unix:///var/run/fleet.sock".parse::<ListenAddress>().unwrap(),
            ListenAddress::Unix("/var/run/fleet.sock".into())
        );
        assert_eq!("tcp://0.0.0.0:54728".parse::<ListenAddress>().unwrap(), ListenAddress::Tcp("0.0.0.0:54728".into()));
        assert!("unix://var/run".parse::<ListenAddress>().is_err());
        assert!("http://x:1".parse::<ListenAddress>().is_err());
    }

    #[tokio::test]
    async fn binds_tcp_and_unix_and_replaces_stale_socket_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.sock");
        std::fs::write(&path, "stale").unwrap();
        let unix = bind(&ListenAddress::Unix(path.clone())).await.unwrap();
        assert_eq!(unix.describe(), format!("unix://{}", path.display()));
        let tcp = bind(&ListenAddress::Tcp("127.0.0.1:0".into())).await.unwrap();
        assert!(tcp.describe().starts_with("tcp://127.0.0.1:"));
    }

    #[tokio::test]
    async fn unix_socket_gets_the_configured_mode_and_group() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.sock");
        let _unix = bind(&ListenAddress::Unix(path.clone())).await.unwrap();
        let own_gid = std::fs::metadata(&path).unwrap().gid();
        restrict_socket(&path, 0o660, &own_gid.to_string()).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
        assert_eq!(meta.gid(), own_gid);
        restrict_socket(&path, 0o600, "root").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let err = restrict_socket(&path, 0o660, "no-such-group-here").unwrap_err();
        assert!(err.to_string().contains("unknown group \"no-such-group-here\""), "{err}");
    }
}

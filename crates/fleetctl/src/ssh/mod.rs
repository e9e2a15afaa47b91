//! SSH for fleetctl (spec §9.8, §9.9): connections authenticated through the user's ssh-agent, host keys checked
//! against fleetctl's own known-hosts file ([`known_hosts`]), tunnelled connections through a bastion, remote
//! commands with their output streamed and their exit status returned, interactive shells on a PTY, agent
//! forwarding, and byte streams (`direct-tcpip`, or a remote command's stdin/stdout) for the API tunnel.
//!
//! Built on `russh` (pure-Rust SSH; its crypto from RustCrypto and `ring`). Everything here is async; fleetctl
//! blocks on a current-thread runtime around it. Error texts follow the original's (Go `x/crypto/ssh`) where users
//! see them.

pub mod known_hosts;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use russh::client::{self, ChannelOpenHandle, Handle, Msg};
use russh::keys::agent::AgentIdentity;
use russh::keys::agent::client::AgentClient;
use russh::keys::{PublicKey, PublicKeyOrCertificate};
use russh::{Channel, ChannelMsg, ChannelStream};
use tokio::io::AsyncWriteExt;

pub use known_hosts::{HostKeyError, KnownHosts};

/// The message of the original when `SSH_AUTH_SOCK` is unset.
pub const NO_AGENT: &str = "SSH_AUTH_SOCK environment variable is not set. Verify ssh-agent is running. See https://github.com/coreos/fleet/blob/master/Documentation/using-the-client.md for help.";

/// How to connect.
#[derive(Debug, Clone, PartialEq)]
pub struct SshConfig {
    /// Remote user (`--ssh-username`).
    pub user: String,
    /// Limit of each dial stage: TCP connect + handshake + authentication, or one tunnel hop (`--ssh-timeout`).
    pub timeout: Duration,
    /// Host key checking (`--strict-host-key-checking`, `--known-hosts-file`); `None` accepts every key and reads
    /// or writes no file.
    pub known_hosts: Option<KnownHosts>,
    /// The agent socket (`SSH_AUTH_SOCK`); `None` when unset.
    pub agent_sock: Option<PathBuf>,
    /// Request agent forwarding on sessions (`ssh -A`).
    pub forward_agent: bool,
}

/// A failed SSH operation. Texts are the original's where it had one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshError {
    #[error("{NO_AGENT}")]
    NoAgent,
    /// The agent could not be reached or asked (`dial unix <path>: connect: <cause>`).
    #[error("{0}")]
    Agent(String),
    #[error("timed out while initiating SSH connection")]
    Timeout,
    #[error("dial tcp {addr}: connect: {cause}")]
    Dial { addr: String, cause: String },
    #[error("ssh: handshake failed: {0}")]
    HostKey(HostKeyError),
    #[error(
        "ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain"
    )]
    Auth,
    /// A tunnel hop was refused (`direct-tcpip`).
    #[error("ssh: rejected: connect failed ({0})")]
    Rejected(String),
    #[error("{0}")]
    Protocol(String),
}

/// How a remote command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// With this exit status (a signal or a missing status counts as 255 — Go's -1).
    Exit(i32),
    /// The user interrupted fleetctl (SIGINT/SIGTERM); the remote command was hung up.
    Interrupted,
}

/// What the remote side gets on stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Nothing: stdin is closed at once.
    None,
    /// fleetctl's own stdin, copied until it ends.
    Stdin,
}

/// The `russh` handler: host key checking and agent-forwarding channels.
struct Handler {
    host: String,
    port: u16,
    known_hosts: Option<KnownHosts>,
    agent_sock: Option<PathBuf>,
}

#[derive(Debug)]
enum HandlerError {
    Ssh(russh::Error),
    HostKey(HostKeyError),
}

impl From<russh::Error> for HandlerError {
    fn from(e: russh::Error) -> Self {
        HandlerError::Ssh(e)
    }
}

impl client::Handler for Handler {
    type Error = HandlerError;

    async fn check_server_key(&mut self, key: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        tracing::debug!(host = %self.host, port = self.port, checking = self.known_hosts.is_some(), "host key");
        let Some(kh) = self.known_hosts.clone() else { return Ok(true) };
        let key: PublicKey = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.clone(),
            PublicKeyOrCertificate::Certificate(cert) => PublicKey::from(cert.public_key().clone()),
        };
        let key_type = key.algorithm().as_str().to_string();
        let blob = key.to_bytes().map_err(|e| HandlerError::Ssh(russh::Error::from(e)))?;
        let (host, port) = (self.host.clone(), self.port);
        let verdict = tokio::task::spawn_blocking(move || {
            let mut ask = || {
                let mut answer = String::new();
                let _ = std::io::stdin().read_line(&mut answer);
                answer
            };
            // fleetctl's main thread holds the std stderr lock while a command runs: write to the descriptor.
            kh.check(&host, port, &key_type, &blob, &mut ask, &mut RawFd(2))
        })
        .await
        .unwrap_or(Err(HostKeyError::Untrusted));
        verdict.map(|()| true).map_err(HandlerError::HostKey)
    }

    async fn server_channel_open_agent_forward(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut client::Session,
    ) -> Result<(), Self::Error> {
        let Some(sock) = self.agent_sock.clone() else { return Ok(()) };
        reply.accept().await;
        tokio::spawn(async move {
            match tokio::net::UnixStream::connect(&sock).await {
                Ok(mut agent) => {
                    let mut stream = channel.into_stream();
                    let _ = tokio::io::copy_bidirectional(&mut stream, &mut agent).await;
                }
                Err(e) => tracing::debug!(error = %e, "forwarded agent channel: cannot reach the local agent"),
            }
        });
        Ok(())
    }
}

/// An authenticated SSH connection.
pub struct Session {
    handle: Handle<Handler>,
    config: SshConfig,
}

/// `host[:port]` → `(host, port)`, port 22 when absent (`maybeAddDefaultPort`); `[v6]:port` understood.
pub fn split_addr(addr: &str) -> (String, u16) {
    if let Some(rest) = addr.strip_prefix('[')
        && let Some((host, after)) = rest.split_once(']')
    {
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok()).unwrap_or(22);
        return (host.to_string(), port);
    }
    match addr.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h.to_string(), p.parse().unwrap_or(22)),
        _ => (addr.to_string(), 22),
    }
}

fn display_addr(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The agent's keys (`SSH_AUTH_SOCK` must be set and answer), asked before anything is dialled, like the original.
async fn agent(config: &SshConfig) -> Result<(AgentClient<tokio::net::UnixStream>, Vec<AgentIdentity>), SshError> {
    let sock = config.agent_sock.as_ref().ok_or(SshError::NoAgent)?;
    let stream = tokio::net::UnixStream::connect(sock).await.map_err(|e| {
        SshError::Agent(format!("dial unix {}: connect: {}", sock.display(), fleet_core::go::io_error(&e)))
    })?;
    let mut client = AgentClient::connect(stream);
    let ids = client.request_identities().await.map_err(|e| SshError::Agent(format!("agent: {e}")))?;
    Ok((client, ids))
}

fn russh_config() -> Arc<client::Config> {
    Arc::new(client::Config { keepalive_interval: Some(Duration::from_secs(30)), ..Default::default() })
}

impl Session {
    /// Connects to `addr` (`host[:port]`, port 22 by default) directly.
    pub async fn connect(config: &SshConfig, addr: &str) -> Result<Session, SshError> {
        let (agent, ids) = agent(config).await?;
        let (host, port) = split_addr(addr);
        let stage = async {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| SshError::Dial { addr: display_addr(&host, port), cause: fleet_core::go::io_error(&e) })?;
            let _ = tcp.set_nodelay(true);
            Self::handshake(config, &host, port, tcp, agent, ids).await
        };
        tokio::time::timeout(config.timeout, stage).await.map_err(|_| SshError::Timeout)?
    }

    /// Connects to `addr` through this connection (a `direct-tcpip` channel from the tunnel host).
    pub async fn connect_via(&self, config: &SshConfig, addr: &str) -> Result<Session, SshError> {
        let (agent, ids) = agent(config).await?;
        let (host, port) = split_addr(addr);
        let stream =
            tokio::time::timeout(config.timeout, self.open_tcp(&host, port)).await.map_err(|_| SshError::Timeout)??;
        tokio::time::timeout(config.timeout, Self::handshake(config, &host, port, stream, agent, ids))
            .await
            .map_err(|_| SshError::Timeout)?
    }

    async fn handshake<S>(
        config: &SshConfig,
        host: &str,
        port: u16,
        stream: S,
        mut agent: AgentClient<tokio::net::UnixStream>,
        ids: Vec<AgentIdentity>,
    ) -> Result<Session, SshError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let handler = Handler {
            host: host.to_string(),
            port,
            known_hosts: config.known_hosts.clone(),
            agent_sock: config.agent_sock.clone(),
        };
        let mut handle = client::connect_stream(russh_config(), stream, handler).await.map_err(|e| match e {
            HandlerError::HostKey(k) => SshError::HostKey(k),
            HandlerError::Ssh(e) => SshError::Protocol(format!("ssh: handshake failed: {e}")),
        })?;
        tracing::debug!(keys = ids.len(), "handshake done, authenticating");
        let rsa_hash = handle.best_supported_rsa_hash().await.ok().flatten().flatten();
        tracing::debug!("rsa hash known");
        for id in ids {
            let AgentIdentity::PublicKey { key, .. } = id else { continue };
            let hash = if key.algorithm().is_rsa() { rsa_hash } else { None };
            match handle.authenticate_publickey_with(config.user.clone(), key, hash, &mut agent).await {
                Ok(r) if r.success() => return Ok(Session { handle, config: config.clone() }),
                Ok(_) => {}
                Err(e) => tracing::debug!(error = ?e, "agent key refused"),
            }
        }
        Err(SshError::Auth)
    }

    /// A `direct-tcpip` channel to `host:port` as seen from the remote machine.
    pub async fn open_tcp(&self, host: &str, port: u16) -> Result<ChannelStream<Msg>, SshError> {
        let ch = self
            .handle
            .channel_open_direct_tcpip(host, u32::from(port), "127.0.0.1", 0)
            .await
            .map_err(|e| SshError::Rejected(e.to_string()))?;
        Ok(ch.into_stream())
    }

    /// A remote command whose stdin/stdout are the returned stream (stderr is dropped), e.g. `fleetctl fd-forward`.
    pub async fn open_command(&self, command: &str) -> Result<ChannelStream<Msg>, SshError> {
        let ch = self.session_channel().await?;
        ch.exec(true, command).await.map_err(|e| SshError::Protocol(e.to_string()))?;
        Ok(ch.into_stream())
    }

    async fn session_channel(&self) -> Result<Channel<Msg>, SshError> {
        let ch = self.handle.channel_open_session().await.map_err(|e| SshError::Protocol(e.to_string()))?;
        if self.config.forward_agent && self.config.agent_sock.is_some() {
            ch.agent_forward(false).await.map_err(|e| SshError::Protocol(e.to_string()))?;
        }
        Ok(ch)
    }

    /// Runs `command` (or a login shell when `None`), streaming its stdout and stderr, until it ends or the user
    /// interrupts. With `pty` (stdin a terminal), the terminal is put in raw mode and its size followed.
    pub async fn run(
        &self,
        command: Option<&str>,
        input: Input,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Ended, SshError> {
        let proto = |e: russh::Error| SshError::Protocol(e.to_string());
        let ch = self.session_channel().await?;
        let tty = input == Input::Stdin && terminal::is_tty(0);
        let _raw = if tty {
            let (cols, rows) = terminal::size(0).unwrap_or((80, 24));
            let modes = [(russh::Pty::ECHO, 1), (russh::Pty::TTY_OP_ISPEED, 14400), (russh::Pty::TTY_OP_OSPEED, 14400)];
            ch.request_pty(false, "xterm-256color", cols, rows, 0, 0, &modes).await.map_err(proto)?;
            terminal::RawMode::enter(0)
        } else {
            None
        };
        match command {
            Some(c) => ch.exec(true, c).await.map_err(proto)?,
            None => ch.request_shell(true).await.map_err(proto)?,
        }
        let (mut read, write) = ch.split();
        let write = Arc::new(write);
        let feeder = match input {
            Input::Stdin => {
                let w = write.clone();
                Some(tokio::spawn(async move {
                    let mut writer = w.make_writer();
                    let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut writer).await;
                    let _ = writer.flush().await;
                    let _ = w.eof().await;
                }))
            }
            Input::None => {
                let _ = write.eof().await;
                None
            }
        };
        let mut winch =
            if tty { tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok() } else { None };
        let mut interrupt = interrupt_signals();
        let mut status = None;
        let ended = loop {
            tokio::select! {
                msg = read.wait() => match msg {
                    Some(ChannelMsg::Data { data }) => {
                        let _ = out.write_all(&data);
                        let _ = out.flush();
                    }
                    Some(ChannelMsg::ExtendedData { data, .. }) => {
                        let _ = err.write_all(&data);
                        let _ = err.flush();
                    }
                    Some(ChannelMsg::ExitStatus { exit_status }) => status = Some(exit_status as i32),
                    Some(ChannelMsg::ExitSignal { .. }) => status = Some(255),
                    Some(ChannelMsg::Close) | None => break Ended::Exit(status.unwrap_or(255)),
                    Some(_) => {}
                },
                Some(()) = recv_opt(&mut winch) => {
                    if let Some((cols, rows)) = terminal::size(0) {
                        let _ = write.window_change(cols, rows, 0, 0).await;
                    }
                }
                () = interrupt.recv() => {
                    let _ = write.close().await;
                    break Ended::Interrupted;
                }
            }
        };
        if let Some(f) = feeder {
            f.abort();
        }
        Ok(ended)
    }

    /// Ends the connection politely.
    pub async fn close(&self) {
        let _ = self.handle.disconnect(russh::Disconnect::ByApplication, "", "en").await;
    }
}

/// Writes straight to a file descriptor, bypassing the std handles' locks.
pub struct RawFd(pub i32);

impl Write for RawFd {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // SAFETY: write(2) from a valid buffer to a descriptor we do not own or close.
        let n = unsafe { libc::write(self.0, buf.as_ptr().cast(), buf.len()) };
        if n < 0 { Err(std::io::Error::last_os_error()) } else { Ok(n as usize) }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A duplicate of descriptor `fd` as an async file (for stdout while the std handle is locked elsewhere).
pub fn dup_async(fd: i32) -> std::io::Result<tokio::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: dup(2) returns a new descriptor that the File owns.
    let new = unsafe { libc::dup(fd) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(tokio::fs::File::from_std(unsafe { std::fs::File::from_raw_fd(new) }))
}

async fn recv_opt(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// SIGINT or SIGTERM, whichever comes first (never, if the handlers cannot be installed).
struct Interrupts {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

fn interrupt_signals() -> Interrupts {
    use tokio::signal::unix::{SignalKind, signal};
    Interrupts { int: signal(SignalKind::interrupt()).ok(), term: signal(SignalKind::terminate()).ok() }
}

impl Interrupts {
    async fn recv(&mut self) {
        tokio::select! {
            Some(()) = recv_opt(&mut self.int) => {}
            Some(()) = recv_opt(&mut self.term) => {}
        }
    }
}

/// Runs `program args...` locally with fleetctl's stdio (for units on this very machine, spec §9.8). SIGINT and
/// SIGTERM go to the child (same process group for SIGINT from a terminal), and its status is returned.
pub async fn run_local(program: &str, args: &[String]) -> std::io::Result<Ended> {
    let mut child = tokio::process::Command::new(program).args(args).spawn()?;
    let mut interrupt = interrupt_signals();
    let mut interrupted = false;
    loop {
        tokio::select! {
            st = child.wait() => {
                let st = st?;
                if interrupted {
                    return Ok(Ended::Interrupted);
                }
                return Ok(Ended::Exit(st.code().unwrap_or(255)));
            }
            () = interrupt.recv(), if !interrupted => {
                interrupted = true;
                if let Some(pid) = child.id() {
                    // SAFETY: kill(2) on our own child's pid.
                    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                }
            }
        }
    }
}

/// The terminal: is it one, its size, raw mode restored on drop.
mod terminal {
    pub fn is_tty(fd: i32) -> bool {
        // SAFETY: isatty only inspects the descriptor.
        unsafe { libc::isatty(fd) == 1 }
    }

    /// `(columns, rows)`.
    pub fn size(fd: i32) -> Option<(u32, u32)> {
        // SAFETY: TIOCGWINSZ writes a winsize into the struct we pass.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
        (r == 0 && ws.ws_col > 0).then(|| (u32::from(ws.ws_col), u32::from(ws.ws_row)))
    }

    pub struct RawMode {
        fd: i32,
        saved: libc::termios,
    }

    impl RawMode {
        pub fn enter(fd: i32) -> Option<RawMode> {
            // SAFETY: tcgetattr/tcsetattr on a terminal descriptor with a termios we own.
            unsafe {
                let mut t: libc::termios = std::mem::zeroed();
                if libc::tcgetattr(fd, &mut t) != 0 {
                    return None;
                }
                let saved = t;
                libc::cfmakeraw(&mut t);
                if libc::tcsetattr(fd, libc::TCSANOW, &t) != 0 {
                    return None;
                }
                Some(RawMode { fd, saved })
            }
        }
    }

    impl Drop for RawMode {
        fn drop(&mut self) {
            // SAFETY: restores the attributes saved by `enter`.
            unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_port_22() {
        assert_eq!(split_addr("10.0.0.1"), ("10.0.0.1".into(), 22));
        assert_eq!(split_addr("10.0.0.1:2222"), ("10.0.0.1".into(), 2222));
        assert_eq!(split_addr("[fe80::1]:2"), ("fe80::1".into(), 2));
        assert_eq!(split_addr("fe80::1"), ("fe80::1".into(), 22));
    }

    #[test]
    fn errors_read_like_the_original() {
        assert_eq!(SshError::NoAgent.to_string(), NO_AGENT);
        assert_eq!(SshError::Timeout.to_string(), "timed out while initiating SSH connection");
        assert_eq!(SshError::HostKey(HostKeyError::Mismatch).to_string(), "ssh: handshake failed: host key mismatch");
    }

    #[tokio::test]
    async fn without_an_agent_nothing_is_dialled() {
        let config = SshConfig {
            user: "core".into(),
            timeout: Duration::from_secs(1),
            known_hosts: None,
            agent_sock: None,
            forward_agent: false,
        };
        assert_eq!(Session::connect(&config, "127.0.0.1:1").await.err(), Some(SshError::NoAgent));
        let config = SshConfig { agent_sock: Some("/nonexistent".into()), ..config };
        assert_eq!(
            Session::connect(&config, "127.0.0.1:1").await.err().map(|e| e.to_string()),
            Some("dial unix /nonexistent: connect: no such file or directory".into())
        );
    }
}

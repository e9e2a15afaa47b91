//! SSH access to a cluster's machines, as fleetctl's SSH-based commands need it (`ssh`, `status`, `journal`,
//! `--tunnel`): an ed25519 key made for the cluster, authorised for `core` and `root` in every machine, and an
//! `ssh-agent` holding it (`SSH_AUTH_SOCK`). Uses the host's OpenSSH tools (`ssh-keygen`, `ssh-agent`, `ssh-add`;
//! Debian `openssh-client`, installed by `ci/setup`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The users whose `authorized_keys` get the cluster's key.
pub const USERS: [&str; 2] = ["core", "root"];

/// Where a machine's authorised keys for `user` live (the image's sshd reads `/etc/ssh/authorized_keys/%u`).
pub fn authorized_keys_path(user: &str) -> String {
    format!("/etc/ssh/authorized_keys/{user}")
}

/// The agent could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("`{cmd}` could not run: {source} (is openssh-client installed? ci/setup installs it)")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("`{cmd}` failed: {stderr}")]
    Failed { cmd: String, stderr: String },
    #[error("ssh-agent did not announce its socket {socket} within 5 s (it printed {printed:?})")]
    NotListening { socket: PathBuf, printed: String },
}

/// A key and an agent holding it. Dropping it stops the agent (unless detached).
#[derive(Debug)]
pub struct SshAgent {
    socket: PathBuf,
    key: PathBuf,
    public_key: String,
    child: Option<Child>,
    pid: u32,
}

/// The first line `out` prints within `limit` (empty if none). The read runs on its own thread, which ends with
/// the line or with the pipe's end; the pipe's read end is dropped there, and the agent prints nothing more.
fn first_line_within(out: Option<std::process::ChildStdout>, limit: Duration) -> String {
    use std::io::BufRead;
    let Some(out) = out else { return String::new() };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(limit).unwrap_or_default().trim().to_string()
}

fn run(cmd: &mut Command) -> Result<(), AgentError> {
    let shown = format!("{cmd:?}");
    let out = cmd.stdin(Stdio::null()).output().map_err(|source| AgentError::Spawn { cmd: shown.clone(), source })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(AgentError::Failed { cmd: shown, stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() })
    }
}

impl SshAgent {
    /// Makes `dir/id_ed25519` and starts `ssh-agent` on `dir/agent.sock` with the key added. With `tied`, the
    /// agent dies with this process even if it is killed (tests); without, it outlives it (`fleet-harness up`).
    pub fn start(dir: &Path, tied: bool) -> Result<SshAgent, AgentError> {
        let key = dir.join("id_ed25519");
        let socket = dir.join("agent.sock");
        run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", "fleet-harness", "-f"]).arg(&key))?;
        let public_key = std::fs::read_to_string(key.with_extension("pub"))
            .map_err(|source| AgentError::Spawn { cmd: "read public key".into(), source })?;
        let mut cmd = Command::new("ssh-agent");
        cmd.arg("-D").arg("-a").arg(&socket).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
        if tied {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl in the child before exec; async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
        } else {
            use std::os::unix::process::CommandExt;
            // Its own session: a terminal's hangup or Ctrl-C does not reach it.
            unsafe {
                cmd.pre_exec(|| {
                    libc::setsid();
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|source| AgentError::Spawn { cmd: "ssh-agent".into(), source })?;
        let pid = child.id();
        let stdout = child.stdout.take();
        let agent = SshAgent { socket, key, public_key: public_key.trim().to_string(), child: Some(child), pid };
        // The socket file exists from bind(2) on, before listen(2): a client connecting in between is refused.
        // ssh-agent prints `SSH_AUTH_SOCK=...` only once it listens, so that line is the readiness signal.
        let printed = first_line_within(stdout, Duration::from_secs(5));
        if !printed.starts_with("SSH_AUTH_SOCK=") {
            return Err(AgentError::NotListening { socket: agent.socket.clone(), printed });
        }
        run(Command::new("ssh-add").arg("-q").arg(&agent.key).env("SSH_AUTH_SOCK", &agent.socket))?;
        Ok(agent)
    }

    /// `SSH_AUTH_SOCK` for fleetctl.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The private key file (for a plain `ssh -i`).
    pub fn key_file(&self) -> &Path {
        &self.key
    }

    /// The public key line (`ssh-ed25519 AAAA... fleet-harness`).
    pub fn public_key(&self) -> &str {
        &self.public_key
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Leaves the agent running after this value is dropped.
    pub fn detach(&mut self) {
        self.child.take();
    }
}

impl Drop for SshAgent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Stops a detached agent (`fleet-harness down`), if it is still an ssh-agent.
pub fn stop_detached(pid: u32) {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() == "ssh-agent" {
        // SAFETY: kill(2) on a pid we started and just checked.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_holds_the_key_and_stops_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let agent = SshAgent::start(dir.path(), true).unwrap();
        assert!(agent.public_key().starts_with("ssh-ed25519 "), "{}", agent.public_key());
        let out = Command::new("ssh-add").arg("-L").env("SSH_AUTH_SOCK", agent.socket()).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), agent.public_key());
        let pid = agent.pid();
        drop(agent);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists() || {
                let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                st.contains(") Z ")
            }
        );
    }
}

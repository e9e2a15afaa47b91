//! Runs the fleetctl binary on the host against a machine's API endpoint (spec §11.1 `Fleetctl`,
//! `FleetctlWithEnv`, `FleetctlWithInput`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::output::Output;

/// How long one fleetctl invocation may take before it is killed.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// fleetctl could not be run to completion.
#[derive(Debug, thiserror::Error)]
pub enum FleetctlError {
    #[error("could not start {bin}: {source}")]
    Spawn { bin: PathBuf, source: std::io::Error },
    #[error("fleetctl {args:?} did not finish within {timeout:?}")]
    TimedOut { args: Vec<String>, timeout: Duration },
    #[error("fleetctl {args:?}: {source}")]
    Io { args: Vec<String>, source: std::io::Error },
}

/// How the endpoint is handed to fleetctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointVia {
    /// `--endpoint=<url>` before the other arguments (unless an argument contains `--tunnel` or `-- `).
    Flag,
    /// `FLEETCTL_ENDPOINT=<url>` in the environment.
    Env,
}

/// The command `bin args...` against `endpoint` with `env` set, not started (for tests that stream its output or
/// signal it).
pub fn command(
    bin: &Path,
    endpoint: &str,
    via: EndpointVia,
    args: &[&str],
    env: &[(String, String)],
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let tunnelled = args.iter().any(|a| a.contains("--tunnel") || a.contains("-- "));
    match via {
        EndpointVia::Flag if !tunnelled => {
            cmd.arg(format!("--endpoint={endpoint}"));
        }
        EndpointVia::Flag => {}
        EndpointVia::Env => {
            cmd.env("FLEETCTL_ENDPOINT", endpoint);
        }
    }
    cmd.args(args);
    cmd
}

/// Runs `bin args...` against `endpoint` with `env` set, feeding `stdin` when given.
pub async fn run(
    bin: &Path,
    endpoint: &str,
    via: EndpointVia,
    args: &[&str],
    env: &[(String, String)],
    stdin: Option<&str>,
) -> Result<Output, FleetctlError> {
    run_in(bin, endpoint, via, args, env, stdin, None, crate::wait::scaled(TIMEOUT)).await
}

/// Like [`run`], in working directory `cwd` when given (fleetctl finds local unit files there), killed after
/// `timeout`.
#[allow(clippy::too_many_arguments)]
pub async fn run_in(
    bin: &Path,
    endpoint: &str,
    via: EndpointVia,
    args: &[&str],
    env: &[(String, String)],
    stdin: Option<&str>,
    cwd: Option<&Path>,
    timeout: Duration,
) -> Result<Output, FleetctlError> {
    let mut cmd = command(bin, endpoint, via, args, env);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let mut child = cmd.spawn().map_err(|source| FleetctlError::Spawn { bin: bin.to_path_buf(), source })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).await.map_err(|source| FleetctlError::Io { args: owned.clone(), source })?;
    }
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| FleetctlError::TimedOut { args: owned.clone(), timeout })?
        .map_err(|source| FleetctlError::Io { args: owned.clone(), source })?;
    tracing::debug!(args = ?owned, status = ?out.status.code(), "fleetctl");
    Ok(Output {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        status: out.status.code().unwrap_or(-1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoint_goes_first_as_a_flag_and_stdin_is_fed() {
        let out = run(
            Path::new("/bin/sh"),
            "http://1.2.3.4:54728",
            EndpointVia::Env,
            &["-c", "cat; echo $FLEETCTL_ENDPOINT $X"],
            &[("X".to_string(), "y".to_string())],
            Some("in\n"),
        )
        .await
        .unwrap();
        assert_eq!(out.stdout, "in\nhttp://1.2.3.4:54728 y\n");
        assert!(out.success());
        let out = run(Path::new("/bin/echo"), "http://e:1", EndpointVia::Flag, &["a"], &[], None).await.unwrap();
        assert_eq!(out.stdout, "--endpoint=http://e:1 a\n");
    }

    #[tokio::test]
    async fn exit_status_and_stderr_are_returned() {
        let out = run(Path::new("/bin/sh"), "x", EndpointVia::Env, &["-c", "echo oops >&2; exit 3"], &[], None)
            .await
            .unwrap();
        assert_eq!((out.status, out.stderr.as_str()), (3, "oops\n"));
    }
}

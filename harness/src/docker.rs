//! The few Docker operations testcontainers does not offer, through the `docker` command-line client:
//! networks (create with a chosen subnet, connect with a pinned IP, disconnect, remove), kill, inspect,
//! listing and removing by label. The blocking variants exist for `Drop`, which cannot await.

use std::process::{Command, Stdio};

/// A `docker` invocation that failed.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("could not run `docker {args}`: {source} (is the docker client installed? run ci/setup)")]
    Spawn { args: String, source: std::io::Error },
    #[error("`docker {args}` exited with {status}: {stderr}")]
    Failed { args: String, status: i32, stderr: String },
}

fn describe(args: &[&str]) -> String {
    args.join(" ")
}

fn finish(args: &[&str], out: std::process::Output) -> Result<String, DockerError> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(DockerError::Failed {
            args: describe(args),
            status: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Runs `docker args...` and returns its trimmed stdout.
pub async fn run(args: &[&str]) -> Result<String, DockerError> {
    let out = tokio::process::Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| DockerError::Spawn { args: describe(args), source })?;
    finish(args, out)
}

/// Blocking form of [`run`], for `Drop` and the command-line tool.
pub fn run_blocking(args: &[&str]) -> Result<String, DockerError> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| DockerError::Spawn { args: describe(args), source })?;
    finish(args, out)
}

/// Whether the engine answers `docker info`.
pub fn engine_answers() -> bool {
    run_blocking(&["info", "--format", "{{.ServerVersion}}"]).is_ok()
}

/// Whether the image `reference` exists locally.
pub async fn image_exists(reference: &str) -> bool {
    run(&["image", "inspect", "--format", "{{.Id}}", reference]).await.is_ok()
}

/// The IPv4 address of `container` on `network`, if attached.
pub async fn container_ip(container: &str, network: &str) -> Result<Option<String>, DockerError> {
    let format = format!("{{{{with index .NetworkSettings.Networks \"{network}\"}}}}{{{{.IPAddress}}}}{{{{end}}}}");
    let ip = run(&["inspect", "--format", &format, container]).await?;
    Ok((!ip.is_empty()).then_some(ip))
}

/// Attaches `container` to `network` at exactly `ip`.
pub async fn connect(network: &str, container: &str, ip: &str) -> Result<(), DockerError> {
    run(&["network", "connect", "--ip", ip, network, container]).await.map(drop)
}

/// Detaches `container` from `network`.
pub async fn disconnect(network: &str, container: &str) -> Result<(), DockerError> {
    run(&["network", "disconnect", "--force", network, container]).await.map(drop)
}

/// Sends SIGKILL to the container's init.
pub async fn kill(container: &str) -> Result<(), DockerError> {
    run(&["kill", "--signal", "KILL", container]).await.map(drop)
}

/// Ids of the containers matching every `label=...` filter given, running or not.
pub fn containers_with(filters: &[String]) -> Result<Vec<String>, DockerError> {
    let mut args = vec!["ps", "-aq", "--no-trunc"];
    for f in filters {
        args.extend(["--filter", f.as_str()]);
    }
    Ok(run_blocking(&args)?.lines().map(str::to_string).collect())
}

/// Ids of the networks matching every `label=...` filter given.
pub fn networks_with(filters: &[String]) -> Result<Vec<String>, DockerError> {
    let mut args = vec!["network", "ls", "-q", "--no-trunc"];
    for f in filters {
        args.extend(["--filter", f.as_str()]);
    }
    Ok(run_blocking(&args)?.lines().map(str::to_string).collect())
}

/// The value of `label` on a container or network (`kind` = `container` or `network`), empty when absent.
pub fn label_of(kind: &str, id: &str, label: &str) -> Result<String, DockerError> {
    let format = format!("{{{{index .{} \"{label}\"}}}}", if kind == "network" { "Labels" } else { "Config.Labels" });
    let v = run_blocking(&[kind, "inspect", "--format", &format, id])?;
    Ok(if v == "<no value>" { String::new() } else { v })
}

/// Force-removes containers (with their anonymous volumes), ignoring ones already gone.
pub fn remove_containers(ids: &[String]) -> Result<(), DockerError> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut args = vec!["rm", "-f", "-v"];
    args.extend(ids.iter().map(String::as_str));
    match run_blocking(&args) {
        Err(DockerError::Failed { stderr, .. }) if stderr.contains("No such container") => Ok(()),
        other => other.map(drop),
    }
}

/// Removes networks, ignoring ones already gone.
pub fn remove_networks(ids: &[String]) -> Result<(), DockerError> {
    for id in ids {
        match run_blocking(&["network", "rm", id]) {
            Err(DockerError::Failed { stderr, .. }) if stderr.contains("not found") => {}
            other => other.map(drop)?,
        }
    }
    Ok(())
}

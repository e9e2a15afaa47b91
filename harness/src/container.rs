//! What machine and etcd containers share: the image request with the options that boot systemd in Docker
//! (`shared/guide/machines.md`), labels, and `exec` returning an [`Output`].

use std::sync::OnceLock;

use futures::StreamExt;
use testcontainers::bollard::Docker;
use testcontainers::bollard::container::LogOutput;
use testcontainers::bollard::exec::{CreateExecOptions, StartExecResults};
use testcontainers::core::{AccessMode, CgroupnsMode, Mount};
use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};

use crate::labels::{self, RunId};
use crate::output::Output;

/// Where a container lives: image, run, network.
#[derive(Debug, Clone)]
pub struct Placement {
    pub image: (String, String),
    pub run: RunId,
    /// Created by `fleet-harness up`: kept by `reap` until `down`.
    pub keep: bool,
    pub network: String,
}

/// A container request for `name` on the placement's network, labelled with the run.
pub fn request(p: &Placement, name: &str, role: &str) -> ContainerRequest<GenericImage> {
    GenericImage::new(p.image.0.clone(), p.image.1.clone())
        .with_container_name(name)
        .with_network(p.network.clone())
        .with_labels(labels::for_run(&p.run, p.keep, role))
}

/// The options that boot systemd 252 to `running` in an unprivileged container.
pub fn systemd_options(req: ContainerRequest<GenericImage>) -> ContainerRequest<GenericImage> {
    ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "SYS_NICE"]
        .into_iter()
        .fold(req, |r, cap| r.with_cap_add(cap))
        .with_security_opt("seccomp=unconfined")
        .with_security_opt("apparmor=unconfined")
        .with_mount(Mount::tmpfs_mount("/run"))
        .with_mount(Mount::tmpfs_mount("/run/lock"))
        .with_mount(Mount::tmpfs_mount("/tmp"))
        .with_mount(Mount::bind_mount("/sys/fs/cgroup", "/sys/fs/cgroup").with_access_mode(AccessMode::ReadWrite))
        .with_cgroupns_mode(CgroupnsMode::Host)
}

/// A host file bind-mounted read-only.
pub fn read_only(host: &std::path::Path, inside: &str) -> Mount {
    Mount::bind_mount(host.display().to_string(), inside).with_access_mode(AccessMode::ReadOnly)
}

/// An exec could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("docker API: {0}")]
    Api(#[from] testcontainers::bollard::errors::Error),
}

fn api() -> Result<&'static Docker, ExecError> {
    static API: OnceLock<Docker> = OnceLock::new();
    if let Some(d) = API.get() {
        return Ok(d);
    }
    let d = Docker::connect_with_local_defaults()?;
    Ok(API.get_or_init(|| d))
}

/// Runs `cmd` in container `id` (name or id) and collects its output and exit status.
pub async fn exec(id: &str, cmd: &[&str]) -> Result<Output, ExecError> {
    let api = api()?;
    let opts = CreateExecOptions {
        cmd: Some(cmd.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..Default::default()
    };
    let exec = api.create_exec(id, opts).await?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let StartExecResults::Attached { mut output, .. } = api.start_exec(&exec.id, None).await? {
        while let Some(frame) = output.next().await {
            match frame? {
                LogOutput::StdOut { message } | LogOutput::Console { message } => stdout.extend_from_slice(&message),
                LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                LogOutput::StdIn { .. } => {}
            }
        }
    }
    let mut status = None;
    for _ in 0..200 {
        status = api.inspect_exec(&exec.id).await?.exit_code;
        if status.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    Ok(Output {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        status: status.map_or(-1, |s| s as i32),
    })
}

/// Hands a container to testcontainers' drop (which needs a Tokio runtime), or forgets it when there is none;
/// the cluster's label sweep removes it either way.
pub(crate) fn release(c: ContainerAsync<GenericImage>) {
    if tokio::runtime::Handle::try_current().is_ok() && !std::thread::panicking() {
        drop(c);
    } else {
        std::mem::forget(c);
    }
}

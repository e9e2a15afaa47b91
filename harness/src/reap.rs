//! Removes what harness runs left behind, by label. Only objects carrying [`labels::RUN`] are ever touched.
//! `ci/lib.sh` (`reap_leftovers`) applies the same rule before any binary is built.

use crate::docker::{self, DockerError};
use crate::labels::{self, RunId};

/// Which runs to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Runs whose owning process is gone, except clusters kept by `fleet-harness up`.
    Leftovers,
    /// Every harness object, including live and kept clusters.
    All,
    /// One run (e.g. `fleet-harness down`, or a cluster's own drop).
    Run(RunId),
}

/// What was removed (or remains).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub containers: usize,
    pub networks: usize,
}

impl Reaped {
    pub fn is_empty(&self) -> bool {
        self.containers == 0 && self.networks == 0
    }
}

fn pid_alive(pid: &str) -> bool {
    !pid.is_empty() && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn wanted(scope: &Scope, kind: &str, id: &str) -> Result<bool, DockerError> {
    Ok(match scope {
        Scope::All | Scope::Run(_) => true,
        Scope::Leftovers => {
            let keep = docker::label_of(kind, id, labels::KEEP)? == "true";
            let pid = docker::label_of(kind, id, labels::PID)?;
            !keep && !pid_alive(&pid)
        }
    })
}

/// Removes the containers, then the networks, of `scope`. Blocking: usable from `Drop`.
pub fn reap(scope: &Scope) -> Result<Reaped, DockerError> {
    let filter = match scope {
        Scope::Run(run) => run.filter(),
        _ => format!("label={}", labels::RUN),
    };
    let mut containers = Vec::new();
    for id in docker::containers_with(std::slice::from_ref(&filter))? {
        if wanted(scope, "container", &id)? {
            containers.push(id);
        }
    }
    docker::remove_containers(&containers)?;
    let mut networks = Vec::new();
    for id in docker::networks_with(std::slice::from_ref(&filter))? {
        if wanted(scope, "network", &id)? {
            networks.push(id);
        }
    }
    docker::remove_networks(&networks)?;
    let reaped = Reaped { containers: containers.len(), networks: networks.len() };
    if reaped != Reaped::default() {
        tracing::info!(?scope, containers = reaped.containers, networks = reaped.networks, "reaped");
    }
    Ok(reaped)
}

/// Containers and networks of `run` that still exist (for tests proving nothing is left behind).
pub fn remaining(run: &RunId) -> Result<Reaped, DockerError> {
    Ok(Reaped {
        containers: docker::containers_with(&[run.filter()])?.len(),
        networks: docker::networks_with(&[run.filter()])?.len(),
    })
}

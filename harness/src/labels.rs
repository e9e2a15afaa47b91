//! Run ids and the labels put on every Docker object a cluster creates.
//!
//! Architecture invariant: every container and network the harness creates carries [`RUN`] (its run id) and
//! [`PID`] (the process that owns it); `reap` removes nothing without [`RUN`]. `ci/lib.sh` spells the same labels.

use rand::Rng;

/// Label holding the run id of the cluster that created the object.
pub const RUN: &str = "fleet-harness.run";
/// Label holding the pid of the process that owns the object (reap keeps objects of live processes).
pub const PID: &str = "fleet-harness.pid";
/// Label set to `true` on clusters started by `fleet-harness up`: only `down` (or `reap --all`) removes them.
pub const KEEP: &str = "fleet-harness.keep";
/// Label naming the role of a container: `etcd` or `machine`.
pub const ROLE: &str = "fleet-harness.role";

/// A short random id naming one cluster's Docker objects, unique among parallel test processes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RunId(String);

impl RunId {
    /// A fresh id: `fh` followed by 8 random hex digits.
    pub fn random() -> Self {
        let n: u32 = rand::rng().random();
        RunId(format!("fh{n:08x}"))
    }

    /// Wraps an id read back from a label or a state file.
    pub fn from_string(s: impl Into<String>) -> Self {
        RunId(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `label=fleet-harness.run=<id>`, the Docker filter selecting this run's objects.
    pub fn filter(&self) -> String {
        format!("label={RUN}={}", self.0)
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The labels of an object owned by `run` in this process.
pub fn for_run(run: &RunId, keep: bool, role: &str) -> Vec<(String, String)> {
    let mut labels = vec![(RUN.to_string(), run.to_string()), (PID.to_string(), std::process::id().to_string())];
    if !role.is_empty() {
        labels.push((ROLE.to_string(), role.to_string()));
    }
    if keep {
        labels.push((KEEP.to_string(), "true".to_string()));
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_distinct_and_docker_safe() {
        let a = RunId::random();
        let b = RunId::random();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 10);
        assert!(a.as_str().chars().all(|c| c.is_ascii_alphanumeric()));
    }
}

//! fleet-conformance: black-box specs any fleet implementation can be run against.
//!
//! A spec sees only what a user sees — fleetctl, the HTTP API and the systemd state inside machines — through
//! [`fleet_harness::Cluster`]; it never reads the registry. Choose the implementation under test with
//! `FLEETD_BIN` / `FLEETCTL_BIN` (default: this workspace's build).

use std::future::Future;
use std::pin::Pin;

/// What a spec returns: `Err` with a message saying what was expected and what was observed.
pub type Outcome = Result<(), String>;

/// One black-box spec.
pub struct Spec {
    /// Named by behaviour (regressions by upstream issue: `r1509_...`).
    pub name: &'static str,
    /// Needs a working fleetd (ignored until one exists in this workspace).
    pub needs_fleet: bool,
    pub run: fn() -> Pin<Box<dyn Future<Output = Outcome> + Send>>,
}

/// Every spec, in catalogue order. Building this list must stay cheap: nextest lists it once per trial.
pub fn all() -> Vec<Spec> {
    let mut specs = vec![Spec {
        name: "harness_smoke_machine_runs_systemd",
        needs_fleet: false,
        run: || Box::pin(smoke::machine_runs_systemd()),
    }];
    specs.extend(replace::specs());
    specs
}

mod replace;

/// Smoke specs of the harness itself, until fleet's own specs arrive.
mod smoke {
    use fleet_harness::{Cluster, Fleet};

    use super::Outcome;

    pub async fn machine_runs_systemd() -> Outcome {
        let cluster = Cluster::builder().machines(1).fleet(Fleet::Off).start().await.map_err(|e| e.to_string())?;
        let state = cluster.machine(1).map_err(|e| e.to_string())?.system_state().await.map_err(|e| e.to_string())?;
        if state == "running" { Ok(()) } else { Err(format!("expected systemd `running`, found `{state}`")) }
    }
}

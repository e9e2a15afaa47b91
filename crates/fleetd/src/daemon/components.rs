//! Starting the optional components of one fleetd run.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::Config;
use crate::engine::{Engine, EngineConfig};
use fleet_registry::{Reflector, Registry};

/// Starts the engine unless `disable_engine` is set; it campaigns for leadership and schedules while leading, and
/// resigns when `stop` is cancelled.
pub fn start_engine(
    config: &Config,
    machine_id: &str,
    registry: &Registry,
    reflector: &Arc<Reflector>,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    if config.disable_engine {
        tracing::info!("engine disabled on this machine (disable_engine=true)");
        return None;
    }
    let engine = Engine::new(
        registry.clone(),
        reflector.subscribe(),
        EngineConfig {
            machine_id: machine_id.to_string(),
            reconcile_interval: config.engine_reconcile_interval(),
            disable_engine: false,
            rebalance: config.engine_rebalance,
        },
    )
    .with_agent_ttl(config.agent_ttl().unwrap_or(std::time::Duration::from_secs(30)))
    .with_audit_limits(config.audit_limits());
    Some(engine.spawn(stop))
}

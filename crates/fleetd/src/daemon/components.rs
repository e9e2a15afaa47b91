//! Starting the optional components of one fleetd run.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::Config;
use crate::engine::{Engine, EngineConfig};
use fleet_registry::{Reflector, Registry, SharedFullView};

/// Starts the engine unless `disable_engine` is set; it campaigns for leadership and schedules while leading, and
/// resigns when `stop` is cancelled. It reads the machine's full view `reflector` when the fleetd keeps one, else
/// keeps views of its own (a full one only while it leads, taken from `full_views`).
pub fn start_engine(
    config: &Config,
    machine_id: &str,
    registry: &Registry,
    reflector: Option<&Arc<Reflector>>,
    full_views: &SharedFullView,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    if config.disable_engine {
        tracing::info!("engine disabled on this machine (disable_engine=true)");
        return None;
    }
    let engine_config = EngineConfig {
        machine_id: machine_id.to_string(),
        reconcile_interval: config.engine_reconcile_interval(),
        disable_engine: false,
        rebalance: config.engine_rebalance,
    };
    let engine = match reflector {
        Some(reflector) => Engine::new(registry.clone(), reflector.subscribe(), engine_config),
        None => Engine::with_own_views(full_views.clone(), engine_config),
    };
    let engine = engine
        .with_agent_ttl(config.agent_ttl().unwrap_or(std::time::Duration::from_secs(30)))
        .with_audit_limits(config.audit_limits());
    Some(engine.spawn(stop))
}

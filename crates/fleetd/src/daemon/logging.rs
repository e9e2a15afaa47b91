//! fleetd's log output: `LEVEL target: message fields` lines on stderr without timestamps (journald adds them),
//! DEBUG only when `verbosity > 0` (spec §1.9). `RUST_LOG` (`level` and `target=level` directives, comma-separated)
//! overrides the filter.
//!
//! The filter is `Targets`, not `EnvFilter`: fleetd needs no span or field filters, and `EnvFilter` brings the regex
//! engine and its Unicode tables into every fleetd's resident code.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// The filter: `RUST_LOG` when set and readable, else warn for dependencies (their debug output, HTTP/2 frames and
/// D-Bus messages, drowns fleet's own) and `verbosity`'s level for fleet.
pub fn filter(verbosity: i64, rust_log: Option<&str>) -> Targets {
    if let Some(parsed) = rust_log.and_then(|directives| directives.parse::<Targets>().ok()) {
        return parsed;
    }
    let default = if verbosity > 0 { "debug" } else { "info" };
    // A target is matched by prefix: `fleet` covers every crate of fleet (fleetd, fleet_core, fleet_registry, ...).
    format!("warn,fleet={default}").parse().expect("the default directives parse")
}

pub fn init(verbosity: i64) {
    let filter = filter(verbosity, std::env::var("RUST_LOG").ok().as_deref());
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false).without_time();
    let _ = tracing_subscriber::registry().with(layer.with_filter(filter)).try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;
    use tracing_subscriber::filter::LevelFilter;

    #[test]
    fn verbosity_sets_fleets_level_and_dependencies_stay_at_warn() {
        let quiet = filter(0, None);
        assert!(quiet.would_enable("fleetd::agent", &Level::INFO));
        assert!(quiet.would_enable("fleet_registry::reflector", &Level::INFO));
        assert!(quiet.would_enable("fleet_core::store::snapshot", &Level::INFO));
        assert!(!quiet.would_enable("fleetd::agent", &Level::DEBUG));
        assert!(!quiet.would_enable("h2::codec", &Level::INFO));
        assert!(quiet.would_enable("h2::codec", &Level::WARN));
        assert!(filter(1, None).would_enable("fleetd", &Level::DEBUG));
    }

    #[test]
    fn rust_log_overrides_and_an_unreadable_one_is_ignored() {
        let custom = filter(0, Some("error,fleetd::engine=trace"));
        assert!(custom.would_enable("fleetd::engine::reconcile", &Level::TRACE));
        assert!(!custom.would_enable("fleetd::agent", &Level::WARN));
        assert_eq!(filter(0, Some("fleet=loud")).default_level(), Some(LevelFilter::WARN));
    }
}

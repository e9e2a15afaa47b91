//! fleetd's log output: `LEVEL target: message fields` lines on stderr without timestamps (journald adds them),
//! DEBUG only when `verbosity > 0` (spec §1.9). `RUST_LOG` overrides the filter.

use tracing_subscriber::EnvFilter;

pub fn init(verbosity: i64) {
    let default = if verbosity > 0 { "debug" } else { "info" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // Dependencies stay at warn: their debug output (HTTP/2 frames, D-Bus messages) drowns fleet's own.
        EnvFilter::new(format!("warn,fleet={default},fleetd={default}"))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .try_init();
}

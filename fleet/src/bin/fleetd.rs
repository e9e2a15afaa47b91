//! fleetd: one per machine. Parses its command line and runs the server until a shutdown signal.

use fleet::fleetd::args::{self, Invocation, USAGE};
use fleet::version::VERSION;

fn main() {
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_else(|| "fleetd".into());
    let rest: Vec<String> = argv.collect();
    let config = match args::parse(&argv0, &rest) {
        Ok(Invocation::Version) => return println!("fleetd version {VERSION}"),
        Ok(Invocation::Help) => return print!("{USAGE}"),
        Ok(Invocation::Run { config }) => config,
        Err(err) => {
            eprintln!("{err}");
            eprint!("{USAGE}");
            std::process::exit(err.exit_code());
        }
    };
    // Verbosity comes from the configuration; read it early so start-up itself can log at DEBUG.
    let verbosity = fleet::fleetd::config::load(config.as_deref(), &std::env::vars().collect())
        .map(|l| l.config.verbosity)
        .unwrap_or(0);
    fleet::fleetd::logging::init(verbosity);
    tracing::info!("Starting fleetd version {VERSION}");
    fleet::fleetd::heap::limit_arenas();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!("cannot start the async runtime: {err}");
            std::process::exit(1);
        }
    };
    if let Err(err) = runtime.block_on(fleet::fleetd::server::run(config)) {
        tracing::error!("{err}");
        std::process::exit(1);
    }
}

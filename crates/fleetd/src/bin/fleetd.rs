//! fleetd: one per machine. Parses its command line and runs the server until a shutdown signal.

use fleet_core::version::VERSION;
use fleetd::daemon::args::{self, Invocation, USAGE};

/// The C `pow` every `f64::powf` calls, from the pure-Rust `libm`: its only caller in fleetd is tokio's
/// multi-thread scheduler (a moving average of task poll times), and linking glibc's `libm.so` for it costs every
/// fleetd about 0.5 MiB of resident memory (the library's mapped pages). With this definition the linker resolves
/// `pow` here and, linking `--as-needed`, does not record `libm.so` as needed.
#[unsafe(no_mangle)]
pub extern "C" fn pow(base: f64, exponent: f64) -> f64 {
    libm::pow(base, exponent)
}

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
    let verbosity = fleetd::daemon::config::load(config.as_deref(), &std::env::vars().collect())
        .map(|l| l.config.verbosity)
        .unwrap_or(0);
    fleetd::daemon::logging::init(verbosity);
    tracing::info!("Starting fleetd version {VERSION}");
    fleetd::daemon::heap::limit_arenas();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!("cannot start the async runtime: {err}");
            std::process::exit(1);
        }
    };
    if let Err(err) = runtime.block_on(fleetd::daemon::server::run(config)) {
        tracing::error!("{err}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pow_agrees_with_the_c_library_where_it_is_exact_and_follows_c_for_special_values() {
        assert_eq!(super::pow(2.0, 10.0), 1024.0);
        assert_eq!(super::pow(0.9, 0.0), 1.0);
        assert_eq!(super::pow(4.0, 0.5), 2.0);
        assert_eq!(super::pow(2.0, -2.0), 0.25);
        assert!((super::pow(0.9, 3.5) - 0.691_590_124_278_824_6).abs() < 1e-15);
        assert!(super::pow(-8.0, 1.0 / 3.0).is_nan(), "C's pow of a negative base to a non-integer is NaN");
        assert_eq!(super::pow(f64::NAN, 0.0), 1.0, "C's pow(x, 0) is 1 even for NaN");
    }
}

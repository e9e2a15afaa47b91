//! fleetd: one per machine. Parses its command line; the server components are wired in by the core issue.

use fleet::fleetd::args::{self, Invocation, USAGE};
use fleet::version::VERSION;

fn main() {
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_else(|| "fleetd".into());
    let rest: Vec<String> = argv.collect();
    match args::parse(&argv0, &rest) {
        Ok(Invocation::Version) => println!("fleetd version {VERSION}"),
        Ok(Invocation::Help) => print!("{USAGE}"),
        Ok(Invocation::Run { .. }) => {
            eprintln!("fleetd {VERSION}: the server components are not built yet");
            std::process::exit(1);
        }
        Err(err) => {
            eprintln!("{err}");
            eprint!("{USAGE}");
            std::process::exit(err.exit_code());
        }
    }
}

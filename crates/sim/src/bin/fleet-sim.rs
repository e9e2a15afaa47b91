//! fleet-sim: simulated fleet machines for the scale bench (`fleet-harness bench --scenario scale`). Each is a
//! real agent and registry client on a simulated unit manager; see the `fleet_sim` library.

use fleet_sim::{USAGE, parse_args, run};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return print!("{USAGE}");
    }
    let options = match parse_args(&args) {
        Ok(options) => options,
        Err(err) => {
            eprintln!("fleet-sim: {err}");
            eprint!("{USAGE}");
            std::process::exit(2);
        }
    };
    fleetd::daemon::logging::init(0);
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("fleet-sim: cannot start the async runtime: {err}");
            std::process::exit(1);
        }
    };
    if let Err(err) = runtime.block_on(run(options)) {
        eprintln!("fleet-sim: {err}");
        std::process::exit(1);
    }
}

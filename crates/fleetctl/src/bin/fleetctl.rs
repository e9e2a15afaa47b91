//! fleetctl: the command-line client. All logic lives in `fleetctl::cli`; this only exits with its code.

fn main() {
    std::process::exit(fleetctl::cli::main());
}

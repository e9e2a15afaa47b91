//! fleetctl: the command-line client. All logic lives in `fleet::fleetctl`; this only exits with its code.

fn main() {
    std::process::exit(fleet::fleetctl::main());
}

//! fleetctl: the command-line client. Until the core lands it only reports its version.

fn main() {
    println!("fleetctl version {}", fleet::version::VERSION);
}

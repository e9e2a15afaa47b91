//! fleetd: one per machine. Until the core lands it only reports its version.

fn main() {
    println!("fleetd version {}", fleet::version::VERSION);
}

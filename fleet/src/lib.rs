//! fleet: a cluster init system that schedules systemd units onto machines through etcd.
//!
//! The library holds every layer of fleetd and fleetctl; the binaries in `src/bin` only wire them together.
//! See ARCHITECTURE.md at the repository root for the code map.

pub mod agent;
pub mod api;
pub mod at_most_once;
pub mod client;
pub mod engine;
pub mod fleetctl;
pub mod fleetd;
pub mod go;
pub mod machine;
pub mod manpages;
pub mod model;
pub mod registry;
pub mod rollout;
pub mod schema;
pub mod sim;
pub mod ssh;
pub mod systemd;
pub mod tls;
pub mod unit;
pub mod version;
pub mod wire;

//! fleet's core: the data model, unit files, rollouts, the registry's records and snapshot, and every pure decision
//! the server and the client share (scheduling, a machine's plan, the API's rules). No I/O: nothing here talks to
//! etcd, systemd or the network, so the layers above (`fleet-registry`, `fleet-systemd`, `fleetd`, `fleetctl`)
//! decide through it and fakes cannot drift from it. See ARCHITECTURE.md for the map.

pub mod api_rules;
pub mod at_most_once;
pub mod audit;
pub mod go;
pub mod layout;
pub mod machine_plan;
pub mod model;
pub mod preview;
pub mod rollout;
pub mod scheduler;
pub mod schema;
pub mod store;
pub mod unit;
pub mod version;

//! fleetd, one per machine: the agent that drives this machine's systemd, the engine that one elected fleetd runs
//! to schedule units, the HTTP API, and the daemon that starts, reloads and stops them. The decisions they make
//! are `fleet_core`'s; the registry is `fleet_registry`, systemd is `fleet_systemd`. See ARCHITECTURE.md.

pub mod agent;
pub mod api;
pub mod daemon;
pub mod engine;
pub mod machine;

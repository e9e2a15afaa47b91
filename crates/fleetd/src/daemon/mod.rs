//! fleetd: configuration (file, environment), wiring of the components, signals and supervision.

pub mod adoption;
pub mod args;
pub mod components;
pub mod config;
pub mod heap;
pub mod ini;
pub mod logging;
pub mod server;
pub mod signals;

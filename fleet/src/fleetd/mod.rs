//! fleetd: configuration (file, environment), wiring of the components, signals and supervision.

pub mod args;
pub mod config;
pub mod duration;
pub mod ini;

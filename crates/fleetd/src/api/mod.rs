//! HTTP API v1 server (spec §8): routing, wire handlers over the registry, serving on TCP, Unix and
//! systemd-activated sockets.

pub mod access;
mod audit;
pub mod csrf;
pub mod handler;
pub mod listen;
mod machines;
mod peer;
pub mod query;
pub mod reply;
mod rollouts;
pub mod route;
pub mod serve;
mod states;
mod ui;
mod units;
pub mod view;

pub use handler::Api;
pub use machines::{MetadataChange, validate_ops};

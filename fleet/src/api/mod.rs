//! HTTP API v1 server (spec §8): routing, wire handlers over the registry, serving on TCP, Unix and
//! systemd-activated sockets.

pub mod listen;
pub mod route;
pub mod serve;

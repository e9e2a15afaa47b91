//! The local machine: identity (machine-id), public IP and metadata. Presence in the registry is kept by a lease
//! owned by fleetd's wiring.

pub mod identity;

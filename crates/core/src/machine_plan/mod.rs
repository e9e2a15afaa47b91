//! A machine's plan, decided without I/O: which units this machine should hold ([`desired`]), the snapshot's units
//! as that decision needs them ([`unit_cache`]), and desired + actual → ordered tasks ([`plan`]). The agent runs
//! it against systemd; `fleetctl plan` runs the same functions to show what each machine would do.
//!
//! | file | owns |
//! |---|---|
//! | `unit_cache.rs` | the snapshot's units as the agent needs them; each body parsed once per hash |
//! | `desired.rs` | which units this machine should hold (targets, global units' metadata, conflicts: scheduled units before global units, each in name order) |
//! | `plan.rs` | desired + actual → ordered tasks (Stop < Unload < Load < Reload < Start) |

pub mod desired;
pub mod plan;
pub mod unit_cache;

pub use unit_cache::UnitCache;

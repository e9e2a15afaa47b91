//! The per-machine agent (spec §7): decides from the registry's wishes and the machine's state what to do, does it
//! through [`crate::systemd`], and reports what systemd says.
//!
//! | file | owns |
//! |---|---|
//! | `desired.rs` | pure: which units this machine should hold (targets, global units' metadata, conflicts in name order) |
//! | `plan.rs` | pure: desired + actual → ordered tasks (Stop < Unload < Load < Reload < Start) |
//! | `units_dir.rs` | the unit files in `units_directory`: write (0644), remove, list at start, recorded hashes |
//! | `executor.rs` | runs a plan against systemd, waiting for jobs; keeps what the agent believes it started |
//! | `publisher.rs` | pure: diff of published unit states against systemd's (this machine's states only) |
//! | `timing.rs` | reconcile interval, heartbeat / re-publish period from the TTL |
//! //! | `error.rs` | [`AgentError`] |

pub mod desired;
mod error;
pub mod executor;
#[cfg(test)]
pub(crate) mod fake;
pub mod plan;
pub mod publisher;
pub mod timing;
pub mod units_dir;

pub use error::AgentError;

//! The per-machine agent (spec §7): decides from the registry's wishes and the machine's state what to do, does it
//! through [`fleet_systemd`], and reports what systemd says.
//!
//! | file | owns |
//! |---|---|
//! | `runner.rs` | [`Agent`]: the running agent — reconcile loop (event-driven on registry snapshots, periodic safety net), launched markers, purge, debug dump |
//! | `publish_loop.rs` | the state-publishing loop beside it (systemd signals → this machine's unit states) |
//! | `fence.rs` | the at-most-once fence: while this machine's presence is in doubt (its stop deadline passed), its `AtMostOnce=true` units are stopped and none is started |
//! | `handover.rs` | pure: the cross-machine replace rule — when another machine's old copy keeps a start waiting |
//! | `load_fault.rs` | the machine's load fault (issue 37): unit files it could not write (published under its lease, so the engine moves those units and places none here), the probe that withdraws it |
//! | `units_dir.rs` | the unit files in `units_directory`: write (0644), remove, list at start, recorded hashes |
//! | `executor.rs` | runs a plan against systemd, waiting for jobs; keeps what the agent believes it started |
//! | `loaded.rs` | pure: what the executor tells the publish loop (loaded units and their hashes, launched hashes, units still starting) and which of them it shows |
//! | `adoption.rs` | pure: the record (`agent-state.json`) a restarted fleetd adopts the running units from |
//! | `write_failures.rs` | pure: which failed state writes are logged (first per unit and cause, then at the 10th, 100th … retry; once when written again) |
//! | `publisher.rs` | pure: diff of published unit states against systemd's (this machine's states only) |
//! | `health.rs` | pure: the health check status rules (`unknown` / `healthy` / `unhealthy`, never `healthy` from a check begun before the unit's latest (re)start) |
//! | `checks.rs` | the health checks run here: one task per checked active unit, the check process (group, timeout, last line), the agent's own starts reported to the publish loop |
//! | `debug.rs` | the SIGUSR1 dump |
//! | `timing.rs` | pure: reconcile interval, heartbeat / re-publish period from the TTL, the publish loop's pace (two lanes: the paced one, and one for the outcome of the agent's own starts) |
//! | `error.rs` | [`AgentError`] |
//! | `view.rs` | which registry view the agent runs on: scoped to its machine in layout 2, else the full one |
//!
//! ## Replace serialization
//! When a unit's content changes, or it moves away, the old version is stopped and its `ExecStop`/`ExecStopPost`
//! have completed (stop job done and unit inactive) before the new version's file is written and started:
//! * **same machine** — the plan orders the old version's Stop/Unload before the new version's Load and Start,
//!   and the executor waits for every stop job and for the unit to be inactive before it goes on;
//! * **another machine** — the new machine loads the unit but holds its start while a *present* other machine
//!   still publishes a state for it that is not `inactive`/`failed` (or has marked it launched without a state
//!   yet); global units are exempt. The rule, why it cannot deadlock, and its table tests are in `handover.rs`.
//!
//! Losing etcd never stops a unit — except an `AtMostOnce=true` unit, which the fence stops once this machine can
//! no longer prove its presence (see `fence.rs`, docs/at-most-once.md): with a disconnected snapshot, or without this machine's own record (B14), the
//! agent does nothing.

pub mod adoption;
pub mod checks;
mod debug;
mod error;
pub mod executor;
#[cfg(test)]
pub(crate) mod fake;
pub mod fence;
pub mod handover;
pub mod health;
pub mod load_fault;
pub mod loaded;
mod publish_loop;
pub mod publisher;
mod runner;
pub mod timing;
pub mod units_dir;
pub mod view;
pub mod write_failures;

pub use debug::DebugHandle;
pub use error::AgentError;
pub use runner::{Agent, AgentConfig};

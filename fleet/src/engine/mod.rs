//! The engine: the one elected fleetd that schedules units onto machines (spec §1.6, §6).
//!
//! This module holds the pure core; the async shell (leader loop on the registry, watches, periodic resync)
//! gathers a [`Snapshot`], calls [`plan`], and applies the [`Decision`]s in order.
//!
//! | file | owns |
//! |---|---|
//! | `constraints` | a unit's `[X-Fleet]` constraints; conflict and replace relations |
//! | `snapshot` | the scheduler's input, built once per pass |
//! | `cluster` | the per-machine view during a pass: presence, loads, fit of a unit on a machine |
//! | `fit` | the fit verdict and rejection reasons |
//! | `schedule` | the two-pass reconcile: snapshot → ordered decisions |
//! | `explain` | each machine's verdict for one unit |
//! | `leader` | leadership decisions per tick |
//! | `simulate` | synthetic clusters for scale checks and benchmarks |

mod cluster;
pub mod constraints;
pub mod explain;
pub mod fit;
pub mod leader;
pub mod schedule;
pub mod simulate;
pub mod snapshot;

#[cfg(test)]
mod tests;

pub use cluster::Placement;
pub use constraints::Constraints;
pub use explain::{ExplainError, Explanation, MachineVerdict, explain};
pub use fit::{Fit, Rejection};
pub use schedule::{
    Decision, Plan, ScheduleReason, Unplaced, UnplacedReason, UnscheduleReason, apply, plan, plan_with_report,
};
pub use snapshot::{Snapshot, SnapshotError, UnitSpec};

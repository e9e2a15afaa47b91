//! The scheduler: where units should run, decided without I/O (spec §1.6, §6). The engine (in fleetd) feeds it
//! registry snapshots and writes its decisions; `fleetctl plan` runs it to say why a unit is where it is.
//!
//! | file | owns |
//! |---|---|
//! | `catalog` | registry snapshot → scheduler input; parsed-body cache; each unit's [`Constraints`] |
//! | `constraints` | a unit's `[X-Fleet]` constraints; conflict and replace relations |
//! | `schedule_input` | the scheduler's input ([`ScheduleInput`]: units with constraints, present machines) |
//! | `placement` | the per-machine view during a pass: presence, loads, fit of a unit on a machine |
//! | `fit` | the fit verdict and rejection reasons |
//! | `schedule` | the two-pass reconcile: snapshot → ordered decisions |
//! | `explain` | each machine's verdict for one unit: the tests' oracle for every placement and refusal, and `fleetctl plan`'s reason why a unit is blocked |
//! | `entries` | layout 2's schedule entries: what each machine must run of each unit, kept current by the engine |
//! | `drain` | emptying a machine: where each of its units goes, which stay, the check of a move when released |
//! | `rebalance` | moves towards an even spread: the plan, the check of a move when released, who stays |
//! | `simulate` | synthetic clusters for the scale test and the `schedule` bench (test builds and feature `simulate` only) |

pub mod catalog;
pub mod constraints;
pub mod drain;
pub mod entries;
mod explain;
pub mod fit;
mod placement;
pub mod rebalance;
pub mod schedule;
pub mod schedule_input;
#[cfg(any(test, feature = "simulate"))]
pub mod simulate;

#[cfg(test)]
mod tests;

pub use catalog::UnitCatalog;
pub use constraints::Constraints;
pub use explain::{ExplainError, explain};
pub use fit::{Fit, Rejection};
pub use placement::Placement;
pub use schedule::{
    Decision, Plan, ScheduleReason, Unplaced, UnplacedReason, UnscheduleReason, plan, plan_with_report,
};
pub use schedule_input::{ScheduleInput, ScheduleInputError, UnitSpec};

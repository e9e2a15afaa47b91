//! The engine: the one elected fleetd that schedules units onto machines (spec §1.6, §6).
//!
//! A pure core (snapshot → ordered decisions; leadership decisions) inside a thin async shell ([`Engine`]): the
//! shell watches the registry view, elects one leader, builds a [`ScheduleInput`] from the view, calls [`plan`], and
//! applies the [`Decision`]s in order as compare-and-swap writes.
//!
//! Starting it (fleetd): `Engine::new(registry, reflector.subscribe(), EngineConfig { .. }).spawn(token)`;
//! stopping it: cancel the token and await the task (it resigns leadership and revokes its lease first).
//!
//! | file | owns |
//! |---|---|
//! | `runner` | the async shell: wake-ups, leadership, passes, shutdown ([`Engine`]) |
//! | `leadership` | leadership glue: registry view → [`leader::decide`] |
//! | `reconcile` | one leader pass against the registry: plan, CAS writes, body GC |
//! | `catalog` | registry view → scheduler snapshot; parsed-body cache; each unit's [`Constraints`] (the parser's `Requirements`) |
//! | `constraints` | a unit's `[X-Fleet]` constraints; conflict and replace relations |
//! | `schedule_input` | the scheduler's input ([`ScheduleInput`]: units with constraints, present machines), built once per pass from the registry's `Snapshot` |
//! | `cluster` | the per-machine view during a pass: presence, loads, fit of a unit on a machine |
//! | `fit` | the fit verdict and rejection reasons |
//! | `schedule` | the two-pass reconcile: snapshot → ordered decisions |
//! | `explain` | each machine's verdict for one unit: the tests' oracle for every placement and refusal, and `fleetctl plan`'s reason why a unit is blocked |
//! | `leader` | leadership decisions per tick |
//! | `rebalance` | moves towards an even spread (pure): the plan, the check of a move when released, who stays |
//! | `rollouts` | the leader's drive of stored rollouts (rebalance plans and target moves included) |
//! | `simulate` | synthetic clusters for the scale test and the `schedule` bench (test builds and feature `simulate` only) |

pub mod catalog;
mod cluster;
pub mod constraints;
mod explain;
pub mod fit;
pub mod leader;
pub mod leadership;
pub mod rebalance;
pub mod reconcile;
pub mod rollouts;
pub mod runner;
pub mod schedule;
pub mod schedule_input;
#[cfg(any(test, feature = "simulate"))]
pub mod simulate;

#[cfg(test)]
mod tests;

pub use catalog::UnitCatalog;
pub use cluster::Placement;
pub use constraints::Constraints;
pub use explain::{ExplainError, explain};
pub use fit::{Fit, Rejection};
pub use reconcile::{PassOutcome, PassReport, Reconciler};
pub use runner::{Engine, EngineConfig, EngineStatus};
pub use schedule::{
    Decision, Plan, ScheduleReason, Unplaced, UnplacedReason, UnscheduleReason, plan, plan_with_report,
};
pub use schedule_input::{ScheduleInput, ScheduleInputError, UnitSpec};

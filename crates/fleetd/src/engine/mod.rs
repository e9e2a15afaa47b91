//! The engine: the one elected fleetd that schedules units onto machines (spec §1.6, §6).
//!
//! A thin async shell around pure cores: the scheduler (`fleet_core::scheduler`: snapshot → ordered decisions) and
//! the leadership decisions per tick (`leader`). The shell watches the registry view, elects one leader, builds the
//! scheduler's input from the view, plans, and applies the decisions in order as compare-and-swap writes.
//!
//! Starting it (fleetd): `Engine::new(registry, reflector.subscribe(), EngineConfig { .. }).spawn(token)`;
//! stopping it: cancel the token and await the task (it resigns leadership and revokes its lease first).
//!
//! | file | owns |
//! |---|---|
//! | `runner` | the async shell: wake-ups, leadership, passes, shutdown ([`Engine`]) |
//! | `leadership` | leadership glue: registry view → [`leader::decide`] |
//! | `reconcile` | one leader pass against the registry: plan, CAS writes, body GC |
//! | `leader` | leadership decisions per tick |
//! | `rollouts` | the leader's drive of stored rollouts (rebalance plans and target moves included) |

pub mod leader;
pub mod leadership;
pub mod reconcile;
pub mod rollouts;
pub mod runner;

pub use reconcile::{PassOutcome, PassReport, Reconciler};
pub use runner::{Engine, EngineConfig, EngineStatus};

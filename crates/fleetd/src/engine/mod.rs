//! The engine: the one elected fleetd that schedules units onto machines (spec §1.6, §6).
//!
//! A thin async shell around pure cores: the scheduler (`fleet_core::scheduler`: snapshot → ordered decisions) and
//! the election decisions per tick (`election`). The shell watches the registry view, elects one leader, builds the
//! scheduler's input from the view, plans, and applies the decisions in order as compare-and-swap writes.
//!
//! Starting it (fleetd): `Engine::new(registry, reflector.subscribe(), EngineConfig { .. }).spawn(token)`;
//! stopping it: cancel the token and await the task (it resigns leadership and revokes its lease first).
//!
//! | file | owns |
//! |---|---|
//! | `runner` | the async shell: wake-ups, leadership, passes, shutdown ([`Engine`]) |
//! | `reconcile` | one leader pass against the registry: plan, CAS writes, body GC |
//! | `election` | the election, pure: registry view → this tick's step ([`election::step`], [`election::decide`]) |
//! | `audit` | the leader's trimming of the audit trail by age and count |
//! | `rollouts` | the leader's drive of stored rollouts (rebalance plans and target moves included) |

pub mod audit;
pub mod election;
pub mod reconcile;
pub mod rollouts;
pub mod runner;

pub use reconcile::{PassOutcome, PassReport, Reconciler};
pub use runner::{Engine, EngineConfig, EngineStatus};

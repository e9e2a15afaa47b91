//! fleet-harness: real fleet clusters for tests — etcd plus systemd machine containers on a Docker network of their
//! own, started by one call and removed without a trace.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fleet_harness::ClusterError> {
//! use fleet_harness::{Cluster, Fleet};
//! let cluster = Cluster::builder().machines(3).agent_ttl("3s").start().await?;
//! let ids = cluster.wait_for_n_machines(1, 3).await?;
//! let out = cluster.fleetctl(1, &["list-machines"]).await?;
//! cluster.machine(2)?.partition().await?;
//! # Ok(()) }
//! ```
//!
//! See ARCHITECTURE.md (harness section) for how the pieces fit.

pub mod bench;
pub mod cluster;
pub mod config;
pub mod container;
pub mod docker;
pub mod etcd;
pub mod fleetctl;
pub mod image;
pub mod labels;
pub mod machine;
pub mod nemesis;
pub mod network;
pub mod output;
pub mod pki;
pub mod reap;
pub mod ssh;
pub mod state;
pub mod wait;

pub use cluster::{Cluster, ClusterBuilder, ClusterError, Fleet};
pub use config::{API_PORT, Binaries};
pub use etcd::Etcd;
pub use labels::RunId;
pub use machine::Machine;
pub use output::Output;
pub use wait::{Check, UnitFileState, UnitState, WaitError, WaitOptions, wait_for};

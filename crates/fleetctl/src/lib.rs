//! fleetctl, the command-line client: the commands (`cli`), how they reach the cluster (`client`: the HTTP API,
//! or etcd directly), and SSH to machines (`ssh`). It links no fleetd code: what it shares with the server
//! (validation, the scheduler, a machine's plan) is `fleet_core`'s. See ARCHITECTURE.md.

pub mod cli;
pub mod client;
pub mod ssh;

//! Test support for the crates' integration tests: a throwaway local etcd (`etcd` from Debian's package, on a free
//! loopback port, in a temporary directory), and a forwarder that makes the link to it slow. Not a dependency of any
//! shipped binary.

pub mod delay;
pub mod etcd;

pub use etcd::{ServerTls, TestEtcd};

//! Test support for the crates' integration tests: a throwaway local etcd (`etcd` from Debian's package, on a free
//! loopback port, in a temporary directory). Not a dependency of any shipped binary.

pub mod etcd;

pub use etcd::{ServerTls, TestEtcd};

//! Helpers shared by the integration-test binaries (`tests/registry`, `tests/engine`). Not a test target itself
//! (no `main.rs`); each binary includes it with `#[path = "../support/mod.rs"] mod support;`.

#![allow(dead_code)] // each test binary uses a different subset

pub mod etcd;

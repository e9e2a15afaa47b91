//! fleet-harness: starts etcd and systemd machine containers as a fleet cluster for tests.

//! The per-machine agent (spec §7).

//! What the implementation under test declares it supports. Specs that need a capability it does not declare are
//! skipped (reported as ignored), never failed.
//!
//! Declared by, in order of precedence:
//! 1. `FLEET_CAPABILITIES=cap1,cap2,...` (comma or space separated; `all` = every known capability, `none` or empty
//!    = none);
//! 2. `FLEET_CAPABILITIES_FILE=<path>`: one capability per line, `#` starts a comment;
//! 3. otherwise: this workspace's own set ([`WORKSPACE`]) when neither `FLEETD_BIN` nor `FLEETCTL_BIN` is set (we are
//!    testing our own build), and no capability at all when they are (a third party must declare).

use std::collections::BTreeSet;

/// An optional behaviour some specs need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// `fleetctl ssh/status/journal`, `--tunnel` and known hosts work against the machines (the `ssh` area).
    Ssh,
    /// `--replace --keep-machine` keeps a replaced unit on its machine (specs of the `replace` area).
    KeepMachine,
    /// `Replaces=` always moves the *replaced* unit (spec §12.2 B1); the original picks a side at random.
    DeterministicReplaces,
    /// fleetd reloads on SIGHUP and logs `Reloading configuration` (the original's test skips itself otherwise).
    SighupReload,
    /// The API answers a unit PUT with an unknown desired state with 400 (spec §12.2 B9; the original: 500).
    StrictApiValidation,
    /// `--replace --no-restart` rewrites unit files and reloads systemd without restarting running units, and
    /// `list-units --fields=...,running-hash` shows the version each machine runs (issue 12).
    NoRestart,
    /// Rolling replace and restart driven by the cluster: `start --replace --rolling`, `restart --rolling`,
    /// `rollout-status`, `rollout-abort` (issue 12).
    Rollout,
}

impl Capability {
    pub const ALL: [Capability; 7] = [
        Capability::Ssh,
        Capability::KeepMachine,
        Capability::DeterministicReplaces,
        Capability::SighupReload,
        Capability::StrictApiValidation,
        Capability::NoRestart,
        Capability::Rollout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Ssh => "ssh",
            Capability::KeepMachine => "keep_machine",
            Capability::DeterministicReplaces => "deterministic_replaces",
            Capability::SighupReload => "sighup_reload",
            Capability::StrictApiValidation => "strict_api_validation",
            Capability::NoRestart => "no_restart",
            Capability::Rollout => "rollout",
        }
    }

    pub fn parse(s: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What this workspace's fleetd/fleetctl declare (update when a capability lands).
pub const WORKSPACE: &[Capability] = &[
    Capability::Ssh,
    Capability::DeterministicReplaces,
    Capability::SighupReload,
    Capability::StrictApiValidation,
    Capability::KeepMachine,
    Capability::NoRestart,
    Capability::Rollout,
];

/// What the original Go fleet (v1.0.0) would declare: `sighup_reload` only.
pub const ORIGINAL: &[Capability] = &[Capability::SighupReload];

pub const ENV: &str = "FLEET_CAPABILITIES";
pub const FILE_ENV: &str = "FLEET_CAPABILITIES_FILE";

/// A declared set of capabilities.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities(BTreeSet<Capability>);

impl Capabilities {
    pub fn of(caps: &[Capability]) -> Self {
        Capabilities(caps.iter().copied().collect())
    }

    pub fn has(&self, c: Capability) -> bool {
        self.0.contains(&c)
    }

    /// Parses a declaration: names separated by commas, white space or lines; `#` comments; `all`; `none`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut set = BTreeSet::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or_default();
            for word in line.split(|c: char| c == ',' || c.is_whitespace()).filter(|w| !w.is_empty()) {
                match word {
                    "all" => set.extend(Capability::ALL),
                    "none" => {}
                    w => {
                        let known = Capability::ALL.map(Capability::as_str).join(", ");
                        set.insert(
                            Capability::parse(w)
                                .ok_or_else(|| format!("unknown capability {w:?} (known: {known}, all, none)"))?,
                        );
                    }
                }
            }
        }
        Ok(Capabilities(set))
    }

    /// The declaration from the environment (see the module doc).
    pub fn from_env() -> Result<Self, String> {
        if let Ok(v) = std::env::var(ENV) {
            return Self::parse(&v).map_err(|e| format!("{ENV}: {e}"));
        }
        if let Ok(path) = std::env::var(FILE_ENV) {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{FILE_ENV}={path}: {e}"))?;
            return Self::parse(&text).map_err(|e| format!("{path}: {e}"));
        }
        let foreign = [fleet_harness::config::FLEETD_ENV, fleet_harness::config::FLEETCTL_ENV]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        Ok(if foreign { Capabilities::default() } else { Capabilities::of(WORKSPACE) })
    }

    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.0.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_comments_all_and_none() {
        let c = Capabilities::parse("ssh, keep_machine # later\nsighup_reload\n").unwrap();
        assert!(c.has(Capability::Ssh) && c.has(Capability::KeepMachine) && c.has(Capability::SighupReload));
        assert!(!c.has(Capability::DeterministicReplaces));
        assert_eq!(Capabilities::parse("all").unwrap(), Capabilities::of(&Capability::ALL));
        assert_eq!(Capabilities::parse("none").unwrap(), Capabilities::default());
        assert_eq!(Capabilities::parse("").unwrap(), Capabilities::default());
    }

    #[test]
    fn unknown_names_are_errors_that_list_the_known_ones() {
        let err = Capabilities::parse("ssh,teleport").unwrap_err();
        assert!(err.contains("\"teleport\"") && err.contains("keep_machine"), "{err}");
    }
}

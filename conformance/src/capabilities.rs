//! Profiles and capabilities: what an implementation under test claims.
//!
//! The **base** profile is what fleet v1 promised: every spec that requires no capability, which the original Go
//! fleet passes. Each stronger guarantee is a named **capability**; a spec that needs a capability the
//! implementation does not declare is skipped (reported as ignored, with the missing capabilities as the reason),
//! never failed. So `FLEET_CAPABILITIES` names exactly what an implementation claims beyond fleet v1.
//!
//! Every capability is one row of the table in [`capabilities!`] below (its name and the promise it stands for);
//! adding one is adding a row.
//!
//! Declared by, in order of precedence:
//! 1. `FLEET_CAPABILITIES=cap1,cap2,...` (comma or space separated; `all` = every known capability, `none` or empty
//!    = none);
//! 2. `FLEET_CAPABILITIES_FILE=<path>`: one capability per line, `#` starts a comment;
//! 3. otherwise: this workspace's own set ([`WORKSPACE`], every capability) when neither `FLEETD_BIN` nor
//!    `FLEETCTL_BIN` is set (we are testing our own build), and no capability at all when they are (a third party
//!    runs the base profile unless it declares more).

use std::collections::BTreeSet;

/// Defines [`Capability`] and its table from rows `Variant = "name": "promise"`.
macro_rules! capabilities {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal : $promise:literal, )+) => {
        /// A guarantee beyond fleet v1's that some specs need (see the module doc).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Capability {
            $( $(#[$doc])* $variant, )+
        }

        impl Capability {
            /// Every capability, in table order.
            pub const ALL: &'static [Capability] = &[$( Capability::$variant, )+];

            /// The name used in `FLEET_CAPABILITIES` and in the summary.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Capability::$variant => $name, )+
                }
            }

            /// What an implementation promises when it declares this capability.
            pub fn promise(self) -> &'static str {
                match self {
                    $( Capability::$variant => $promise, )+
                }
            }
        }
    };
}

capabilities! {
    Ssh = "ssh":
        "fleetctl ssh/status/journal, --tunnel and known hosts work against sshd in the machines",
    KeepMachine = "keep_machine":
        "`--replace --keep-machine` replaces a loaded/launched unit in place, on its machine",
    DeterministicReplaces = "deterministic_replaces":
        "`Replaces=` always moves the replaced unit, and of a circular pair exactly one runs (B1, B2)",
    SighupReload = "sighup_reload":
        "fleetd reloads its configuration on SIGHUP and logs `Reloading configuration`",
    StrictApiValidation = "strict_api_validation":
        "a unit PUT with an unknown desired state is refused with 400 (B9)",
    GlobalWait = "global_wait":
        "start/stop/unload of a global unit (also start --replace) return once every machine that should act is done",
    GlobalRestart = "global_restart":
        "restart of a global unit gives every machine's copy a new process (L2)",
    GlobalYieldsToScheduledUnits = "global_yields_to_scheduled_units":
        "a global unit skips the machine of a scheduled unit it conflicts with, whatever their names",
    GlobalSshCommands = "global_ssh_commands":
        "status and journal of a global unit cover every machine that runs it, or the one given with --machine",
    ReplaceWaitsForNewVersion = "replace_waits_for_new_version":
        "start --replace returns only once the new version runs, exactly once",
    ReplaceSurvivesClientKill = "replace_survives_client_kill":
        "a replacement is one request: a fleetctl killed right after sending it still gets the new version running",
    LocalTemplateInstances = "local_template_instances":
        "start --replace foo@1.service builds the instance from the local template foo@.service (#1691)",
    EtcdOutageUntouched = "etcd_outage_untouched":
        "an etcd outage beyond the TTL stops no unit, and every machine is back with the same placement",
    CrossMachineHandover = "cross_machine_handover":
        "a replaced unit that moves starts on its new machine only after its old copy stopped (ExecStopPost done)",
    NoRestart = "no_restart":
        "--replace --no-restart rewrites the unit file and reloads systemd on every machine without restarting running units; list-units --fields=...,running-hash shows the version each machine runs",
    Plan = "plan":
        "fleetctl plan start|load|submit [--replace ...] and --dry-run print what the command would do, machine by machine (restart, reload, update, load, start, stop, move, blocked; exit 0 nothing, 2 something), and the command then does exactly that",
    RestartAdopts = "restart_adopts":
        "a fleetd restarted on a machine (systemctl restart, or killed and started within the TTL) restarts, stops and moves none of its units; stopping fleet still hands them to other machines",
    Tls = "tls":
        "fleetd serves its API over TLS with client certificates required and read/admin roles (fleet.conf api_tls_*), fleetctl speaks https:// with --ca-file/--cert-file/--key-file, and crafted names and bodies are refused",
    EtcdMembers = "etcd_members":
        "fleetd takes several etcd endpoints (fleet.conf etcd_servers) and, with a 3-member etcd, rides through the loss of a follower and of the leader: no unit restarted, fleetctl answers, a new unit starts while the member is down",
    AtMostOnce = "at_most_once":
        "a unit with [X-Fleet] AtMostOnce=true never runs on two machines at once: a machine cut from etcd stops it before the engine places it elsewhere, and list-units shows the cut machine's units in doubt (active unknown, sub in-doubt, --fields presence)",
    Rollout = "rollout":
        "start --replace --rolling and restart --rolling change a unit machine by machine, driven by the cluster (max-unavailable, min-healthy, pause/rollback), with rollout-status/-pause/-resume/-abort, history and rollback",
    HealthChecks = "health_checks":
        "[X-Fleet] HealthCheck= runs on every machine where the unit is active and is published (list-units --fields health, GET /state health); a rollout step is done only once the new version is active and its check passed for --min-healthy, a version that fails fails its step within seconds, every machine of the rollout not active and healthy (down before it, or gone) counts against --max-unavailable, and a rollback undoes machine by machine within that budget, the machine already down first",
    UpdatePolicy = "update_policy":
        "[X-Fleet] UpdatePolicy=rolling (UpdateMaxUnavailable=, UpdateMinHealthy=, UpdateHealthTimeout=, UpdateOnFailure=, UpdateOrder=, UpdateProgressDeadline=) makes a plain start --replace, restart and rollback roll per the policy, from fleetctl and from an API client's PUT of new options (the server creates the rollout)",
    Canary = "canary":
        "--canary=N pauses a rollout after N machines awaiting promotion (exit 2) until rollout-promote (or --canary-hold), --order=first:/last: (machine ID prefixes or metadata key=value) orders the machines, and --progress-deadline fails a rollout not done in time",
    Cordon = "cordon":
        "fleetctl cordon MACHINE keeps every new unit off the machine (and a global unit it does not run yet) while the units it runs keep running, list-machines --fields=...,state and --output=json show it (the default table unchanged), and fleetctl uncordon lets new units land there again",
    Drain = "drain":
        "fleetctl drain MACHINE cordons the machine and moves its units to other machines a few at a time (a MachineOf= follower with its peer, an at-most-once unit never on two machines at once), then stops there the units that cannot leave (global units, units pinned by MachineID=), which start again after uncordon; rollout-pause/rollout-abort drain work, with exit codes 0 done, 2 paused, 4 aborted",
    Audit = "audit":
        "every write request through the API is recorded once in an audit trail with who made it, what it was, when and its result (a refused write with its error), reads are not; fleetctl audit [UNIT] [--since] [--output=json] shows it and fleetctl history names who stored each version",
    Rebalance = "rebalance":
        "fleetctl rebalance (and fleet.conf engine_rebalance=true, on its own when a machine joins or returns) moves units towards an even spread, never a unit pinned by MachineID= or asking Rebalance=false, never running a unit on two machines at once",
}

impl Capability {
    pub fn parse(s: &str) -> Option<Capability> {
        Capability::ALL.iter().copied().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name of the profile of specs that need no capability.
pub const BASE: &str = "base";

/// What this workspace's fleetd/fleetctl declare: every capability.
pub const WORKSPACE: &[Capability] = Capability::ALL;

/// What the original Go fleet (v1.0.0) declares: its SSH commands work and it reloads on SIGHUP.
pub const ORIGINAL: &[Capability] = &[Capability::Ssh, Capability::SighupReload];

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
                    "all" => set.extend(Capability::ALL.iter().copied()),
                    "none" => {}
                    w => {
                        let known = Capability::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ");
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

    /// `ssh,keep_machine` (table order), `all` or `none`.
    pub fn render(&self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        if self.0.len() == Capability::ALL.len() {
            return "all".into();
        }
        Capability::ALL.iter().filter(|c| self.has(**c)).map(|c| c.as_str()).collect::<Vec<_>>().join(",")
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
        assert_eq!(Capabilities::parse("all").unwrap(), Capabilities::of(Capability::ALL));
        assert_eq!(Capabilities::parse("none").unwrap(), Capabilities::default());
        assert_eq!(Capabilities::parse("").unwrap(), Capabilities::default());
    }

    #[test]
    fn unknown_names_are_errors_that_list_the_known_ones() {
        let err = Capabilities::parse("ssh,teleport").unwrap_err();
        assert!(err.contains("\"teleport\"") && err.contains("keep_machine"), "{err}");
    }

    #[test]
    fn every_row_has_a_distinct_name_that_parses_back() {
        let names: BTreeSet<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), Capability::ALL.len());
        for c in Capability::ALL {
            assert_eq!(Capability::parse(c.as_str()), Some(*c));
            assert!(!c.promise().is_empty());
            assert!(c.as_str() != BASE && c.as_str() != "all" && c.as_str() != "none");
        }
    }

    #[test]
    fn render_is_table_ordered_and_parses_back() {
        let c = Capabilities::parse("sighup_reload ssh").unwrap();
        assert_eq!(c.render(), "ssh,sighup_reload");
        assert_eq!(Capabilities::parse(&c.render()).unwrap(), c);
        assert_eq!(Capabilities::default().render(), "none");
        assert_eq!(Capabilities::of(Capability::ALL).render(), "all");
    }
}

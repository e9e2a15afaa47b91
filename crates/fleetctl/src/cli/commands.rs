//! The command table: names, usage lines, help texts and flags of every fleetctl command, in the original's words.
//! Help for commands whose help the reference transcripts show (start, list-units, list-unit-files, list-machines,
//! journal) is byte-exact; the others follow the original's texts as closely as they are known. Also the shape of a
//! flag ([`FlagSpec`], [`Kind`]), which the parser (`flags`) and help read.

/// Value type of a flag (also what help shows after the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Str,
    Int,
    Float,
    /// Go's `time.Duration` syntax (`10s`, `1m30s`, `500ms`, `0`), as pflag's duration flags.
    Duration,
}

/// One flag: name (without dashes), type, default (as text) and usage line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub usage: &'static str,
    /// Accepted but not listed in help.
    pub hidden: bool,
}

impl FlagSpec {
    pub const fn new(name: &'static str, kind: Kind, default: &'static str, usage: &'static str) -> Self {
        FlagSpec { name, kind, default, usage, hidden: false }
    }

    pub const fn hidden(name: &'static str, kind: Kind, default: &'static str, usage: &'static str) -> Self {
        FlagSpec { name, kind, default, usage, hidden: true }
    }
}

/// One subcommand.
#[derive(Debug, PartialEq)]
pub struct CommandSpec {
    pub name: &'static str,
    /// Usage after `fleetctl ` (cobra `Use`).
    pub use_line: &'static str,
    /// One-line summary (cobra `Short`).
    pub short: &'static str,
    /// Description (cobra `Long`).
    pub long: &'static str,
    pub flags: &'static [FlagSpec],
    /// Listed under "Available Commands" of the bare usage (cobra hides `help` and deprecated commands there).
    pub listed: bool,
    /// Deprecation message (cobra `Deprecated`).
    pub deprecated: Option<&'static str>,
}

const BLOCK_ATTEMPTS_START: FlagSpec = FlagSpec::new(
    "block-attempts",
    Kind::Int,
    "0",
    "Wait until the units are launched, performing up to N attempts before giving up. A value of 0 indicates no limit. Does not apply to global units.",
);
const NO_BLOCK_START: FlagSpec = FlagSpec::new(
    "no-block",
    Kind::Bool,
    "false",
    "Do not wait until the units have launched before exiting. Always the case for global units.",
);
const KEEP_MACHINE: FlagSpec = FlagSpec::new(
    "keep-machine",
    Kind::Bool,
    "false",
    "With --replace: keep each replaced unit on the machine it is scheduled to, as long as its constraints allow it there.",
);
const NO_RESTART: FlagSpec = FlagSpec::new(
    "no-restart",
    Kind::Bool,
    "false",
    "With --replace: write the new version on every machine holding the unit and reload systemd, but keep running units running (reloaded when the new version has ExecReload=). Implies --keep-machine.",
);
const DRY_RUN: FlagSpec = FlagSpec::new(
    "dry-run",
    Kind::Bool,
    "false",
    "Change nothing: print what the command would do, machine by machine, as fleetctl plan does (exit 0 nothing would change, 2 something would, 1 error).",
);
const REPLACE_PLAN: FlagSpec = FlagSpec::new("replace", Kind::Bool, "false", "Plan the command with --replace.");
const ROLLING_START: FlagSpec = FlagSpec::new(
    "rolling",
    Kind::Bool,
    "false",
    "With --replace: replace launched units machine by machine, driven by the cluster, and wait like rollout-status (unless --no-block).",
);
const ROLLING_RESTART: FlagSpec = FlagSpec::new(
    "rolling",
    Kind::Bool,
    "false",
    "Restart launched units machine by machine, driven by the cluster, and wait like rollout-status (unless --no-block).",
);
const ROLLING_ROLLBACK: FlagSpec = FlagSpec::new(
    "rolling",
    Kind::Bool,
    "false",
    "Return a launched unit to the earlier version machine by machine (default: every machine at once).",
);
const NO_BLOCK_ROLLING: FlagSpec =
    FlagSpec::new("no-block", Kind::Bool, "false", "With --rolling: do not wait for the rollout to end.");
const MAX_UNAVAILABLE: FlagSpec = FlagSpec::new(
    "max-unavailable",
    Kind::Str,
    "1",
    "With --rolling: how many machines may be without an active, healthy copy at once (N, or N% of the machines), counting machines already down.",
);
const CANARY: FlagSpec = FlagSpec::new(
    "canary",
    Kind::Int,
    "0",
    "With --rolling: change this many machines first, then pause until rollout-promote (or --canary-hold).",
);
const CANARY_HOLD: FlagSpec = FlagSpec::new(
    "canary-hold",
    Kind::Duration,
    "0s",
    "With --canary: promote on its own once the canaries stayed healthy this long.",
);
const ORDER: FlagSpec = FlagSpec::new(
    "order",
    Kind::Str,
    "",
    "With --rolling: machines to change first or last, e.g. first:8363165e,last:role=primary (machine IDs or metadata).",
);
const PROGRESS_DEADLINE: FlagSpec = FlagSpec::new(
    "progress-deadline",
    Kind::Duration,
    "0s",
    "With --rolling: fail the rollout if it is not done this long after it started (then --on-failure applies).",
);
const MIN_HEALTHY: FlagSpec = FlagSpec::new(
    "min-healthy",
    Kind::Duration,
    "10s",
    "With --rolling: how long the new version must stay active on a machine before the next machine is taken.",
);
const HEALTH_TIMEOUT: FlagSpec = FlagSpec::new(
    "health-timeout",
    Kind::Duration,
    "5m0s",
    "With --rolling: how long a machine may take to become healthy before its step fails.",
);
const ON_FAILURE: FlagSpec = FlagSpec::new(
    "on-failure",
    Kind::Str,
    "pause",
    "With --rolling: what a failed step does: pause (no further machine is changed) or rollback (every machine returns to the old version; a restart pauses).",
);
/// The flags of `start` and `restart` that only apply with `--rolling` (extensions of this implementation).
pub const ROLLING_FLAGS: [&str; 9] = [
    "rolling",
    "max-unavailable",
    "min-healthy",
    "health-timeout",
    "on-failure",
    "canary",
    "canary-hold",
    "order",
    "progress-deadline",
];
/// The flag of `start`, `load` and `submit` that only prints their plan (an extension of this implementation).
pub const DRY_RUN_FLAG: &str = "dry-run";
const SIGN: FlagSpec = FlagSpec::new("sign", Kind::Bool, "false", "DEPRECATED - this option cannot be used");
const FULL: FlagSpec = FlagSpec::new("full", Kind::Bool, "false", "Do not ellipsize fields on output");
const L: FlagSpec = FlagSpec::new("l", Kind::Bool, "false", "Shorthand for --full");
const NO_LEGEND: FlagSpec = FlagSpec::new("no-legend", Kind::Bool, "false", "Do not print a legend (column headers)");
/// `--output=text|json` of the commands that can print JSON (`json::JSON_COMMANDS`); hidden so that help stays the
/// original's byte for byte (documented in docs/json.md).
const OUTPUT_JSON: FlagSpec =
    FlagSpec::hidden("output", Kind::Str, "text", "Output format: text (the default tables) or json (docs/json.md).");
const SSH_PORT: FlagSpec =
    FlagSpec::new("ssh-port", Kind::Int, "22", "Connect to remote hosts over SSH using this TCP port.");

/// Commands this fleetctl adds to the original's (rollouts, issue 12); help tests leave them out when comparing
/// with the original's listings.
pub const EXTENSION_COMMANDS: [&str; 14] = [
    "audit",
    "completion",
    "cordon",
    "drain",
    "history",
    "plan",
    "rebalance",
    "rollback",
    "rollout-abort",
    "rollout-pause",
    "rollout-promote",
    "rollout-resume",
    "rollout-status",
    "uncordon",
];

/// Valid `--fields` of list-units, in help order.
pub const LIST_UNITS_FIELDS: &str = "active,hash,load,machine,sub,unit";
/// `--fields` of list-units that this fleetctl adds (accepted, not listed in the original's help text).
pub const LIST_UNITS_EXTENSION_FIELDS: &str = "running-hash,presence,health";
/// Valid `--fields` of list-unit-files, in help order.
pub const LIST_UNIT_FILES_FIELDS: &str = "desc,dstate,global,hash,state,target,tmachine,unit";
/// Valid `--fields` of list-machines, in help order.
pub const LIST_MACHINES_FIELDS: &str = "machine,ip,metadata";
/// `--fields` of list-machines that this fleetctl adds (accepted, not listed in the original's help text): `state`,
/// `ready` or `cordoned` (issue 38); `load-fault`, why the machine cannot write unit files, or `-` (issue 37).
pub const LIST_MACHINES_EXTENSION_FIELDS: &str = "state,load-fault";

/// Every command, sorted by name (the order help lists them in).
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "__complete",
        use_line: "__complete units|machines",
        short: "Print the registry's unit names or machine IDs for shell completion",
        long: "Internal helper of the completion scripts: prints the unit names or machine IDs in the registry, one a line.",
        flags: &[],
        listed: false,
        deprecated: None,
    },
    CommandSpec {
        name: "audit",
        use_line: "audit [--since=DURATION|TIME] [--limit=N] [--output=text|json] [--no-legend] [UNIT]",
        short: "Show who wrote what to the cluster, when, and how it ended",
        long: "Show the audit trail: one record per write request through the API (or write of\nfleetctl --driver=etcd), oldest first: its TIME (UTC), WHO made it (the client\ncertificate's subject, the Unix socket peer's user, the TCP peer's address, or\nuser@host for the etcd driver), the ACTION and its RESULT (status, and the error).\nReads are not recorded. With UNIT, only the writes that named it. The cluster keeps\nthe newest records (fleet.conf audit_max_records, audit_max_age).\n\tfleetctl audit --since=1h\n\tfleetctl audit --since=2026-12-01T08:00:00Z --output=json db.service",
        flags: &[
            FlagSpec::new(
                "since",
                Kind::Str,
                "",
                "Only records since then: a duration back from now (90m, 24h) or an RFC 3339 time.",
            ),
            FlagSpec::new("limit", Kind::Int, "1000", "Show at most this many records, the newest (at most 10000)."),
            FlagSpec::new("output", Kind::Str, "text", "Output format: text (a table) or json (docs/json.md)."),
            NO_LEGEND,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "cat",
        use_line: "cat UNIT",
        short: "Output the contents of a submitted unit",
        long: "Outputs the unit file that is currently loaded in the cluster. Useful to verify\nthe correct version of a unit is running.",
        flags: &[OUTPUT_JSON],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "completion",
        use_line: "completion bash|zsh|fish",
        short: "Print a shell completion script for fleetctl",
        long: "Print a completion script for bash, zsh or fish: commands, flags, and unit and machine names from\nthe registry (asked with the same --endpoint/--driver given on the line being completed, or FLEETCTL_*).\n\tsource <(fleetctl completion bash)\n\tfleetctl completion zsh > \"${fpath[1]}/_fleetctl\"\n\tfleetctl completion fish > ~/.config/fish/completions/fleetctl.fish",
        flags: &[],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "cordon",
        use_line: "cordon MACHINE",
        short: "Mark a machine as taking no new units; the units it runs stay",
        long: "Cordon a machine: the engine schedules no new unit to it and moves no unit there (a\nrebalance neither), and it starts no global unit it does not hold already. Units already\nscheduled to it keep running there, also when replaced with --keep-machine. The cordon is\nstored in the cluster: it outlives fleetd restarts and reboots of the machine, until\nuncordon. list-machines --fields=machine,state shows it.\n\nMACHINE is a machine ID or a unique prefix of one.\n\tfleetctl cordon 2e188a93\n\tfleetctl uncordon 2e188a93",
        flags: &[],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "drain",
        use_line: "drain [--max-unavailable=N] [--min-healthy=DURATION] [--health-timeout=DURATION] [--no-block] MACHINE",
        short: "Cordon a machine and move its units off, a few at a time",
        long: "Empty a machine for maintenance. The machine is cordoned (see cordon), then the engine\nleader moves its units to other machines, --max-unavailable at a time, with the scheduler's\nown rules (Conflicts, MachineMetadata, MachineOf: a unit following another goes where it\nwent). A move is done once the unit is active on its new machine (and passing its health\ncheck, if it has one) for --min-healthy; the old copy stops before the new one starts, so an\nat-most-once unit never runs twice. Units that cannot leave (global units, units pinned\nwith MachineID=, units following those) stop there last, and start again after uncordon.\nA unit no other machine takes pauses the drain, naming why.\n\nThe drain is stored in the cluster and driven by the engine: it survives an interrupted\nfleetctl and a new engine leader. It is a rollout (see rollout-status, rollout-pause,\nrollout-resume, rollout-abort; \"drain\" names the newest one in progress).\n\nMACHINE is a machine ID or a unique prefix of one.\n\nExit codes as rollout-status: 0 done, 1 error, 2 paused, 4 aborted.\n\tfleetctl drain 2e188a93\n\tfleetctl uncordon 2e188a93",
        flags: &[
            FULL,
            L,
            FlagSpec::new(
                "health-timeout",
                Kind::Duration,
                "5m0s",
                "How long a unit may take to become active (or to stop) before its step fails.",
            ),
            FlagSpec::new("max-unavailable", Kind::Int, "1", "How many units move at once."),
            FlagSpec::new(
                "min-healthy",
                Kind::Duration,
                "0s",
                "How long a moved unit must stay active on its new machine before its move is done.",
            ),
            FlagSpec::new("no-block", Kind::Bool, "false", "Do not wait for the drain to end."),
            NO_LEGEND,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "destroy",
        use_line: "destroy UNIT...",
        short: "Destroy one or more units in the cluster",
        long: "Completely remove one or more running or submitted units from the cluster.\n\nInstructs systemd on the host machine to destroy the unit, deferring to systemd\ncompletely for any custom stop directives (i.e. ExecStop option in the unit\nfile).\n\nDestroyed units are impossible to start unless re-submitted.",
        flags: &[
            FlagSpec::new(
                "block-attempts",
                Kind::Int,
                "0",
                "Wait until the units are destroyed, performing up to N attempts before giving up. A value of 0 indicates no limit. Does not apply to global units.",
            ),
            FlagSpec::new(
                "no-block",
                Kind::Bool,
                "false",
                "Do not wait until the units are destroyed before exiting. Always the case for global units.",
            ),
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "fd-forward",
        use_line: "fd-forward <socket>",
        short: "Proxy stdin and stdout to a unix domain socket",
        long: "fd-forward is an internal helper for tunnelled connections: it connects to the given unix\ndomain socket and copies stdin to the socket and the socket to stdout.",
        flags: &[],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "help",
        use_line: "help [command]",
        short: "Help about any command",
        long: "Help provides help for any command in the application.\nSimply type fleetctl help [path to command] for full details.",
        flags: &[],
        listed: false,
        deprecated: None,
    },
    CommandSpec {
        name: "history",
        use_line: "history [-l|--full] [--no-legend] UNIT",
        short: "List the stored versions of a unit, newest first",
        long: "List the versions of a unit the registry keeps (the last 10), newest (current) first:\nHASH, when it was STORED (UTC; - for versions stored before history was kept), BY\nwhom (from the audit trail; - once its record is gone), and CURRENT. rollback\nreturns to one of them.\n\tfleetctl history db.service",
        flags: &[OUTPUT_JSON, FULL, L, NO_LEGEND],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "journal",
        use_line: "journal [--lines=N] [--ssh-port=N] [-f|--follow] [--output=STRING] <unit>",
        short: "Print the journal of a unit in the cluster to stdout",
        long: "Outputs the journal of a unit by connecting to the machine that the unit occupies.\n\nRead the last 10 lines:\nfleetctl journal foo.service\n\nRead the last 100 lines:\nfleetctl journal --lines 100 foo.service\n\nThis command does not work with global units.",
        flags: &[
            FlagSpec::new("f", Kind::Bool, "false", "Shorthand for --follow"),
            FlagSpec::new(
                "follow",
                Kind::Bool,
                "false",
                "Continuously print new entries as they are appended to the journal.",
            ),
            FlagSpec::new("lines", Kind::Int, "10", "Number of recent log lines to return"),
            // Hidden so that the help stays the original's byte for byte; documented in docs/fleetctl.md.
            FlagSpec::hidden(
                "machine",
                Kind::Str,
                "",
                "For a global unit: the machine (ID or unique ID prefix) whose journal to read. Required with --follow.",
            ),
            FlagSpec::new(
                "output",
                Kind::Str,
                "short",
                "Output mode. This will be passed unaltered to journalctl on the remote host, and hence supports the same modes as that command.",
            ),
            FlagSpec::new("ssh-port", Kind::Int, "22", "Connect to remote hosts over SSH using this TCP port"),
            FlagSpec::new("sudo", Kind::Bool, "false", "Execute journal command with sudo"),
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "list-machines",
        use_line: "list-machines [-l|--full] [--no-legend]",
        short: "Enumerate the current hosts in the cluster",
        long: "Lists all active machines within the cluster. Previously active machines will not appear in this list.\n\nFor easily parsable output, you can remove the column headers:\nfleetctl list-machines --no-legend\n\nOutput the list without truncation:\nfleetctl list-machines --full",
        flags: &[
            OUTPUT_JSON,
            FlagSpec::new(
                "fields",
                Kind::Str,
                "machine,ip,metadata",
                "Columns to print for each Machine. Valid fields are \"machine,ip,metadata\"",
            ),
            FULL,
            L,
            NO_LEGEND,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "list-unit-files",
        use_line: "list-unit-files [--fields]",
        short: "List the units that exist in the cluster.",
        long: "Lists all unit files that exist in the cluster (whether or not they are loaded onto a machine).",
        flags: &[
            OUTPUT_JSON,
            FlagSpec::new(
                "fields",
                Kind::Str,
                "unit,hash,dstate,state,target",
                "Columns to print for each Unit file. Valid fields are \"desc,dstate,global,hash,state,target,tmachine,unit\"",
            ),
            FULL,
            NO_LEGEND,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "list-units",
        use_line: "list-units [--no-legend] [-l|--full] [--fields]",
        short: "List the current state of units in the cluster",
        long: "Lists the state of all units in the cluster loaded onto a machine.\n\nFor easily parsable output, you can remove the column headers:\nfleetctl list-units --no-legend\n\nOutput the list without ellipses:\nfleetctl list-units --full\n\nOr, choose the columns to display:\nfleetctl list-units --fields=unit,machine",
        flags: &[
            OUTPUT_JSON,
            FlagSpec::new(
                "fields",
                Kind::Str,
                "unit,machine,active,sub",
                "Columns to print for each Unit. Valid fields are \"active,hash,load,machine,sub,unit\"",
            ),
            FULL,
            L,
            NO_LEGEND,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "load",
        use_line: "load [--no-block|--block-attempts=N] UNIT...",
        short: "Schedule one or more units in the cluster, first submitting them if necessary.",
        long: "Load one or many units in the cluster into systemd, but do not start.\n\nSelect units to load by glob matching for units in the current working directory \nor matching the names of previously submitted units.\n\nFor units which are not global, load operations are performed synchronously,\nwhich means fleetctl will block until it detects that the unit(s) have\ntransitioned to a loaded state. This behaviour can be configured with the\nrespective --block-attempts and --no-block options. Load operations on global\nunits are always non-blocking.\n\nReplace a loaded unit with a new version, keeping it on its machine:\n\tfleetctl load --replace --keep-machine foo.service",
        flags: &[
            FlagSpec::new(
                "block-attempts",
                Kind::Int,
                "0",
                "Wait until the jobs are loaded, performing up to N attempts before giving up. A value of 0 indicates no limit. Does not apply to global units.",
            ),
            FlagSpec::new(
                "no-block",
                Kind::Bool,
                "false",
                "Do not wait until the jobs have been loaded before exiting. Always the case for global units.",
            ),
            DRY_RUN,
            NO_RESTART,
            KEEP_MACHINE,
            FlagSpec::new(
                "replace",
                Kind::Bool,
                "false",
                "Replace the old scheduled units in the cluster with new versions.",
            ),
            SIGN,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "plan",
        use_line: "plan start|load|submit [--replace] [--keep-machine|--no-restart] UNIT... | plan ACTION ARG",
        short: "Print what start, load or submit would do, machine by machine, without doing it",
        long: "Print what a start, load or submit with the same flags and units would do, machine by\nmachine, computed with the engine's scheduler and the agents' own plan on the\ncluster as it is now; nothing is changed. One line per change: UNIT, MACHINE,\nACTION (restart, reload, update, load, start, stop, move, blocked) and DETAIL (the\nversions, the scheduler's reason, or why no machine can take the unit).\n\nplan ACTION ARG previews an action as the cluster page does before it asks for\nconfirmation: cordon|uncordon|drain MACHINE, rollout-pause|rollout-resume|rollout-abort|\nrollout-promote ROLLOUT (an ID or a unit), rollback UNIT. What it does goes to stderr,\nthe changes to stdout (ACTION also hold, skip).\nExit status: 0 nothing would change, 2 something would, 1 on errors.\n\tfleetctl plan start --replace db.service\n\tfleetctl start --replace --dry-run db.service\n\tfleetctl plan rollout-pause db.service",
        flags: &[KEEP_MACHINE, NO_RESTART, REPLACE_PLAN],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "restart",
        use_line: "restart [--block-attempts=N] UNIT...",
        short: "Instruct systemd to rolling restart one or more units in the cluster.",
        long: "Restarts one or more units in the cluster. If they are stopped it starts them.\n\nInstructs systemd on the host machine to stop then start the unit, deferring to systemd\ncompletely for any custom restart directives (i.e. ExecStop options in the unit\nfile).\n\nFor units which are not global, restart operations are performed synchronously,\nwhich means fleetctl will block until it detects that the unit(s) have\ntransitioned to a stopped state and then back to a started state. This behaviour can be configured with the\nrespective --block-attempts options. Restart operations on global\nunits are always non-blocking.\n\nRestart a single unit:\n\tfleetctl restart foo.service\n\nRestart an entire directory of units with glob matching, without waiting:\n\tfleetctl restart myservice/*\n\nRestart launched units machine by machine (a global unit, or the instances named),\nwaiting until each machine runs the unit healthy for --min-healthy before the next;\nthe cluster drives it, so interrupting fleetctl does not stop it:\n\tfleetctl restart --rolling --min-healthy=30s db.service\n\nWith --rolling, restart ends when the rollout does. Exit codes: 0 done, 1 error,\n2 paused (a machine failed, or paused by request; the reason is printed),\n3 rolled back, 4 aborted.",
        flags: &[
            FlagSpec::new(
                "block-attempts",
                Kind::Int,
                "0",
                "Wait until the units are stopped/started, performing up to N attempts before giving up. A value of 0 indicates no limit. Does not apply to global units.",
            ),
            ROLLING_RESTART,
            NO_BLOCK_ROLLING,
            MAX_UNAVAILABLE,
            MIN_HEALTHY,
            HEALTH_TIMEOUT,
            ON_FAILURE,
            CANARY,
            CANARY_HOLD,
            ORDER,
            PROGRESS_DEADLINE,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "rebalance",
        use_line: "rebalance [--max-unavailable=N] [--min-healthy=DURATION] [--health-timeout=DURATION] [--no-block]",
        short: "Move units towards an even spread over the machines, a few at a time",
        long: "Move units from the machines that run the most units to those that run the fewest, until\nthe counts differ by at most one. The engine leader plans the moves with the scheduler's own\nrules: a move never breaks a constraint (Conflicts, MachineMetadata, ...) and never\ndisplaces a unit. Units that stay where they are: global units, units with MachineID=,\nMachineOf= (either side) or Replaces=, units conflicting with a global unit, units in a\nrollout, and units that asked to stay with [X-Fleet] Rebalance=false.\n\nThe rebalance is a rollout (see rollout-status, rollout-pause, rollout-abort; \"rebalance\"\nnames the newest one): --max-unavailable moves at a time, each done once the unit is\nactive on its new machine for --min-healthy; the old copy stops before the new one starts.\n\nExit codes as rollout-status: 0 done, 1 error, 2 paused, 4 aborted.\n\tfleetctl rebalance\n\tfleetctl rollout-status rebalance",
        flags: &[
            FULL,
            L,
            FlagSpec::new(
                "health-timeout",
                Kind::Duration,
                "5m0s",
                "How long a moved unit may take to become active on its new machine before its move fails.",
            ),
            FlagSpec::new("max-unavailable", Kind::Int, "2", "How many units move at once."),
            FlagSpec::new(
                "min-healthy",
                Kind::Duration,
                "0s",
                "How long a moved unit must stay active on its new machine before the next move.",
            ),
            FlagSpec::new("no-block", Kind::Bool, "false", "Do not wait for the rebalance to end."),
            NO_LEGEND,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "rollback",
        use_line: "rollback [--to=HASH] [--rolling ...] UNIT",
        short: "Return a unit to an earlier version from its history",
        long: "Return a unit to an earlier version stored in its history (see history): by default the\nversion before the current one, or the one whose hash starts with --to.\n\nA launched unit is rolled back as a rollout (see rollout-status): on every machine the\ncurrent version's stop hooks finish before the earlier version's start hooks. Without\n--rolling every machine changes at once; with --rolling machine by machine, paced by\n--max-unavailable, --min-healthy, --health-timeout and --on-failure. A unit that is not\nlaunched gets the earlier version stored in place, on its machine.\n\nExit codes as rollout-status: 0 done, 1 error, 2 paused, 3 rolled back, 4 aborted.\n\tfleetctl rollback db.service\n\tfleetctl rollback --to=5d8ed85 --rolling --min-healthy=30s db.service",
        flags: &[
            CANARY,
            CANARY_HOLD,
            HEALTH_TIMEOUT,
            MAX_UNAVAILABLE,
            MIN_HEALTHY,
            NO_BLOCK_ROLLING,
            ON_FAILURE,
            ORDER,
            PROGRESS_DEADLINE,
            ROLLING_ROLLBACK,
            FlagSpec::new(
                "to",
                Kind::Str,
                "",
                "The version to return to: a hash, or a unique prefix of one, from history.",
            ),
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "rollout-abort",
        use_line: "rollout-abort {UNIT|ROLLOUT-ID}",
        short: "Abort the rollout in progress of a unit; a replace returns every machine to the old version",
        long: "Abort a rolling replace or restart: no further machine is changed. A replace returns\nthe machines it already changed to the old version, so the unit is one version again;\na restart leaves every machine as it is.\n\nThe argument is a rollout ID or a unit: the newest rollout of that unit that has not ended.\n\tfleetctl rollout-abort db.service",
        flags: &[],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "rollout-pause",
        use_line: "rollout-pause {UNIT|ROLLOUT-ID}",
        short: "Pause the rollout in progress of a unit; no further machine is changed",
        long: "Pause a rolling replace or restart: machines being changed finish, no further machine\nis taken until rollout-resume.\n\nThe argument is a rollout ID or a unit: the newest rollout of that unit that has not ended.\n\tfleetctl rollout-pause db.service",
        flags: &[],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "rollout-promote",
        use_line: "rollout-promote {UNIT|ROLLOUT-ID}",
        short: "Release the rest of a rollout waiting after its canaries",
        long: "A rollout started with --canary=N changes N machines, then waits (paused, awaiting\npromotion) until this command releases the rest, under the same limits.\n\nThe argument is a rollout ID or a unit: the newest rollout of that unit that has not ended.\n\tfleetctl rollout-promote db.service",
        flags: &[],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "rollout-resume",
        use_line: "rollout-resume [--skip-failed] {UNIT|ROLLOUT-ID}",
        short: "Resume a paused rollout; machines that failed are tried again",
        long: "Resume a paused rolling replace or restart. Machines whose step failed are tried again,\nor with --skip-failed left as they are while the rollout goes on with the others.\n\nThe argument is a rollout ID or a unit: the newest rollout of that unit that has not ended.\n\tfleetctl rollout-resume db.service\n\tfleetctl rollout-resume --skip-failed db.service",
        flags: &[FlagSpec::new(
            "skip-failed",
            Kind::Bool,
            "false",
            "Leave the machines whose step failed as they are and go on with the others.",
        )],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "rollout-status",
        use_line: "rollout-status [--no-block] [-l|--full] [--no-legend] {UNIT|ROLLOUT-ID}",
        short: "Show a rolling replace or restart machine by machine and wait until it ends",
        long: "Show the rollout with this ID, or the newest rollout of this unit: a line with its ID, kind\n(replace or restart), state and reason, then one line per machine and unit, in the\norder the machines are taken: MACHINE, UNIT, PHASE (pending, updating, healthy, done,\nfailed, skipped) and DETAIL (why a step failed or was skipped).\n\nThe table is printed again whenever it changes, until the rollout is done, paused,\nrolled back or aborted (or at once with --no-block, which exits with the code of the\nstate it shows; 0 while running).\n\nExit codes: 0 done, 1 error, 2 paused (a machine failed, or paused by request;\nthe reason is printed), 3 rolled back, 4 aborted.\n\tfleetctl rollout-status db.service",
        flags: &[
            OUTPUT_JSON,
            FULL,
            L,
            FlagSpec::new("no-block", Kind::Bool, "false", "Show the rollout once, do not wait for it to end."),
            NO_LEGEND,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "ssh",
        use_line: "ssh [-A|--forward-agent] [--ssh-port=N] [--machine|--unit] {MACHINE|UNIT}",
        short: "Open interactive shell on a machine in the cluster",
        long: "Open an interactive shell on a specific machine in the cluster or on the machine\nwhere the specified unit is located.\n\nfleetctl tries to detect whether your first argument is a machine or a unit.\nTo skip this check use the --machine or --unit flags.\n\nOpen a shell on a machine:\n\tfleetctl ssh 2444264c-eac2-4eff-a490-32d5e5e4af24\n\nOpen a shell from your laptop, to the machine running a specific unit, using a\ncluster member as a bastion host:\n\tfleetctl --tunnel 10.10.10.10 ssh foo.service\n\nOpen a shell on a machine and forward the authentication agent connection:\n\tfleetctl ssh --forward-agent 2444264c-eac2-4eff-a490-32d5e5e4af24\n\nTip: Create an alias for --tunnel.\n\t- Add \"alias fleetctl=fleetctl --tunnel 10.10.10.10\" to your bash profile.\n\t- Now you can run all fleet commands locally.\n\nThis command does not work with global units.",
        flags: &[
            FlagSpec::new("A", Kind::Bool, "false", "Shorthand for --forward-agent"),
            FlagSpec::new("forward-agent", Kind::Bool, "false", "Forward local ssh-agent to target machine."),
            FlagSpec::new("machine", Kind::Str, "", "Open SSH connection to a specific machine."),
            SSH_PORT,
            FlagSpec::new("unit", Kind::Str, "", "Open SSH connection to machine running provided unit."),
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "start",
        use_line: "start [--no-block|--block-attempts=N] UNIT...",
        short: "Instruct systemd to start one or more units in the cluster, first submitting and loading if necessary.",
        long: "Start one or many units on the cluster. Select units to start by glob matching\nfor units in the current working directory or matching names of previously\nsubmitted units.\n\nFor units which are not global, start operations are performed synchronously,\nwhich means fleetctl will block until it detects that the unit(s) have\ntransitioned to a started state. This behaviour can be configured with the\nrespective --block-attempts and --no-block options. Start operations on global\nunits are always non-blocking.\n\nStart a single unit:\nfleetctl start foo.service\n\nStart an entire directory of units with glob matching:\nfleetctl start myservice/*\n\nYou may filter suitable hosts based on metadata provided by the machine.\nMachine metadata is located in the fleet configuration file.\n\nReplace running units with new versions (the old version of each is stopped\nbefore the new one starts). Without --keep-machine a replaced unit is\nrescheduled and may move to another machine; with it, it stays where it runs\nunless its constraints no longer allow it there:\n\tfleetctl start --replace --keep-machine foo.service foo@{1..10}.service\n\nReplace without restarting: every machine holding the unit gets the new file\nand a daemon-reload; running units keep their processes until restarted:\n\tfleetctl start --replace --no-restart db.service\n\nReplace launched units machine by machine (a global unit, or the instances named),\nwaiting until each machine runs the new version healthy for --min-healthy\nbefore the next; the cluster drives it, so interrupting fleetctl does not stop it\n(see rollout-status, rollout-pause, rollout-resume, rollout-abort):\n\tfleetctl start --replace --rolling --max-unavailable=1 --min-healthy=30s db.service\n\nWith --rolling, start ends when the rollout does. Exit codes: 0 done, 1 error,\n2 paused (a machine failed, or paused by request; the reason is printed),\n3 rolled back, 4 aborted.",
        flags: &[
            BLOCK_ATTEMPTS_START,
            DRY_RUN,
            KEEP_MACHINE,
            NO_BLOCK_START,
            NO_RESTART,
            ROLLING_START,
            MAX_UNAVAILABLE,
            MIN_HEALTHY,
            HEALTH_TIMEOUT,
            ON_FAILURE,
            CANARY,
            CANARY_HOLD,
            ORDER,
            PROGRESS_DEADLINE,
            FlagSpec::new(
                "replace",
                Kind::Bool,
                "false",
                "Replace the already started units in the cluster with new versions.",
            ),
            SIGN,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "status",
        use_line: "status [--ssh-port=N] UNIT...",
        short: "Output the status of one or more units in the cluster",
        long: "Output the status of one or more units currently running in the cluster.\nSupports glob matching of units in the current working directory or matches\npreviously started units.\n\nShow status of a single unit:\n\tfleetctl status foo.service\n\nShow status of an entire directory with glob matching:\nfleetctl status myservice/*\n\nFor a global unit, the status on every machine running it is shown;\n--machine picks one.",
        flags: &[
            OUTPUT_JSON,
            FlagSpec::new(
                "machine",
                Kind::Str,
                "",
                "For global units: only the machine with this ID (or unique ID prefix) instead of every machine running it.",
            ),
            SSH_PORT,
            // Accepted and ignored: the functional tests run `status --no-block` (spec §9.1).
            FlagSpec::hidden("no-block", Kind::Bool, "false", "Ignored."),
            FlagSpec::hidden("block-attempts", Kind::Int, "0", "Ignored."),
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "stop",
        use_line: "stop [--no-block|--block-attempts=N] UNIT...",
        short: "Instruct systemd to stop one or more units in the cluster.",
        long: "Stop one or more units from running in the cluster, but allow them to be\nstarted again in the future.\n\nInstructs systemd on the host machine to stop the unit, deferring to systemd\ncompletely for any custom stop directives (i.e. ExecStop option in the unit\nfile).\n\nFor units which are not global, stop operations are performed synchronously,\nwhich means fleetctl will block until it detects that the unit(s) have\ntransitioned to a stopped state. This behaviour can be configured with the\nrespective --block-attempts and --no-block options. Stop operations on global\nunits are always non-blocking.\n\nStop a single unit:\n\tfleetctl stop foo.service\n\nStop an entire directory of units with glob matching, without waiting:\n\tfleetctl --no-block stop myservice/*",
        flags: &[
            FlagSpec::new(
                "block-attempts",
                Kind::Int,
                "0",
                "Wait until the units are stopped, performing up to N attempts before giving up. A value of 0 indicates no limit. Does not apply to global units.",
            ),
            FlagSpec::new(
                "no-block",
                Kind::Bool,
                "false",
                "Do not wait until the units have stopped before exiting. Always the case for global units.",
            ),
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "submit",
        use_line: "submit UNIT...",
        short: "Upload one or more units to the cluster without starting them",
        long: "Upload one or more units to the cluster without starting them. Useful\nfor validating units before they are started.\n\nThis operation is idempotent; if a named unit already exists in the cluster, it will not be resubmitted.\n\nSubmit a single unit:\nfleetctl submit foo.service\n\nSubmit a directory of units with glob matching:\nfleetctl submit myservice/*",
        flags: &[
            DRY_RUN,
            FlagSpec::new(
                "replace",
                Kind::Bool,
                "false",
                "Replace the old submitted units in the cluster with new versions.",
            ),
            SIGN,
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "uncordon",
        use_line: "uncordon MACHINE",
        short: "Let a cordoned machine take new units again",
        long: "Remove a machine's cordon: new units may be scheduled to it again. Nothing moves by\nitself (see rebalance).\n\nMACHINE is a machine ID or a unique prefix of one; the full ID also removes the cordon of\na machine that left the cluster.\n\tfleetctl uncordon 2e188a93",
        flags: &[],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "unload",
        use_line: "unload UNIT...",
        short: "Unschedule one or more units in the cluster.",
        long: "Unload one or more units from the cluster: the units are stopped and unscheduled,\nbut stay submitted and can be loaded or started again.",
        flags: &[
            FlagSpec::new(
                "block-attempts",
                Kind::Int,
                "0",
                "Wait until the units are inactive, performing up to N attempts before giving up. A value of 0 indicates no limit. Does not apply to global units.",
            ),
            FlagSpec::new(
                "no-block",
                Kind::Bool,
                "false",
                "Do not wait until the units have become inactive before exiting. Always the case for global units.",
            ),
        ],
        listed: true,
        deprecated: None,
    },
    CommandSpec {
        name: "verify",
        use_line: "verify UNIT",
        short: "",
        long: "DEPRECATED - No longer works",
        flags: &[],
        listed: false,
        deprecated: Some("DEPRECATED - No longer works"),
    },
    CommandSpec {
        name: "version",
        use_line: "version",
        short: "Print the version and exit",
        long: "Print the version and exit",
        flags: &[],
        listed: true,
        deprecated: None,
    },
];

/// The command named exactly `name`.
pub fn command(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|c| c.name == name)
}

//! Help output (spec §9.1): the original's custom help layout (`fleetctl help`, `fleetctl help <cmd>`,
//! `<cmd> --help`, usage on parse errors), cobra's default usage (bare `fleetctl`) and pflag's flag listing.

use super::commands::{COMMANDS, CommandSpec};
use super::commands::{FlagSpec, Kind};
use super::flags::GLOBAL_FLAGS;
use super::table;
use fleet_core::version::VERSION;

const ROOT_SHORT: &str = "fleetctl is a command-line interface to fleet, the cluster-wide CoreOS init system.";

/// pflag's `FlagUsages`: one line per visible flag, sorted by name, usage aligned three columns after the longest
/// `--name type` part, with ` (default X)` for non-zero defaults.
pub fn flag_usages(specs: &[FlagSpec]) -> String {
    let mut sorted: Vec<&FlagSpec> = specs.iter().filter(|s| !s.hidden).collect();
    sorted.sort_by(|a, b| a.name.cmp(b.name));
    let lines: Vec<(String, String)> = sorted
        .iter()
        .map(|s| {
            let type_name = match s.kind {
                Kind::Bool => "",
                Kind::Str => " string",
                Kind::Int => " int",
                Kind::Float => " float",
                Kind::Duration => " duration",
            };
            let left = format!("      --{}{}", s.name, type_name);
            let default = match (s.kind, s.default) {
                (Kind::Bool, "false")
                | (Kind::Str, "")
                | (Kind::Int, "0")
                | (Kind::Float, "0")
                | (Kind::Duration, "0s") => String::new(),
                (Kind::Str, d) => format!(" (default {d:?})"),
                (_, d) => format!(" (default {d})"),
            };
            (left, format!("{}{}", s.usage, default))
        })
        .collect();
    let width = lines.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (left, usage) in lines {
        let pad = width - left.chars().count();
        out.push_str(&left);
        out.push_str(&" ".repeat(pad + 3));
        out.push_str(&usage);
        out.push('\n');
    }
    out
}

/// `fleetctl help` / `fleetctl --help`.
pub fn global_help() -> String {
    let mut out =
        format!("NAME:\n\tfleetctl - {ROOT_SHORT}\n\nUSAGE:\n\tfleetctl\n\nVERSION:\n\t{VERSION}\n\nCOMMANDS:\n");
    let rows: Vec<Vec<String>> = COMMANDS
        .iter()
        .filter(|c| !super::complete::HIDDEN_COMMANDS.contains(&c.name))
        .map(|c| vec![String::new(), c.name.to_string(), c.short.to_string()])
        .collect();
    out.push_str(&table::render(&rows));
    out.push_str("\nOPTIONS:\n");
    out.push_str(&flag_usages(GLOBAL_FLAGS));
    out.push('\n');
    out
}

/// `fleetctl help <cmd>` / `fleetctl <cmd> --help`, and the usage printed with parse errors.
pub fn command_help(cmd: &CommandSpec) -> String {
    let mut out = format!("NAME:\n\t{} - {}\n\nUSAGE:\n\tfleetctl {}\n\n", cmd.name, cmd.short, cmd.use_line);
    if !cmd.long.is_empty() {
        out.push_str("DESCRIPTION:\n");
        for line in cmd.long.trim_matches(|c| c == '\n' || c == '\t' || c == ' ').split('\n') {
            out.push('\t');
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    if cmd.flags.iter().any(|f| !f.hidden) {
        out.push_str("OPTIONS:\n");
        out.push_str(&flag_usages(cmd.flags));
        out.push('\n');
    }
    out.push_str("GLOBAL OPTIONS:\n");
    out.push_str(&flag_usages(GLOBAL_FLAGS));
    out.push('\n');
    out
}

/// Bare `fleetctl`: cobra's default help of the root command.
pub fn bare_usage() -> String {
    let listed: Vec<&CommandSpec> = COMMANDS.iter().filter(|c| c.listed).collect();
    let pad = listed.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = format!("{ROOT_SHORT}\n\nUsage:\n  fleetctl [flags]\n  fleetctl [command]\n\nAvailable Commands:\n");
    for c in listed {
        out.push_str(&format!("  {:<pad$} {}\n", c.name, c.short));
    }
    out.push_str("\nFlags:\n");
    out.push_str(&flag_usages(GLOBAL_FLAGS));
    out.push_str("\nUse \"fleetctl [command] --help\" for more information about a command.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::commands::{DRY_RUN_FLAG, EXTENSION_COMMANDS, ROLLING_FLAGS, command};

    /// Extract the stdout section of `$ <cmd>` from a reference transcript, with the reference version replaced.
    pub(crate) fn transcript_stdout(file: &str, cmd: &str) -> Option<String> {
        let text = std::fs::read_to_string(format!("/work/shared/spec/reference-transcripts/{file}")).ok()?;
        let start = text.find(&format!("$ {cmd}\n--- stdout ---\n"))?;
        let body = &text[start + cmd.len() + 3 + "--- stdout ---\n".len()..];
        let end = body.find("--- stderr ---\n")?;
        Some(body[..end].replace("v1.0.0-15-g45224983", VERSION))
    }

    const GLOBAL_OPTIONS: &str = "      --ca-file string             Location of TLS CA file used to secure communication with the fleet API or etcd
      --cert-file string           Location of TLS cert file used to secure communication with the fleet API or etcd
      --debug                      Print out more debug information to stderr
      --driver string              Adapter used to execute fleetctl commands. Options include \"API\" and \"etcd\". (default \"API\")
      --endpoint string            Location of the fleet API if --driver=API. Alternatively, if --driver=etcd, location of the etcd API. (default \"unix:///var/run/fleet.sock\")
      --etcd-cafile string         DEPRECATED: do not use this flag.
      --etcd-certfile string       DEPRECATED: do not use this flag.
      --etcd-key-prefix string     Keyspace for fleet data in etcd (development use only!) (default \"/_coreos.com/fleet/\")
      --etcd-keyfile string        DEPRECATED: do not use this flag.
      --experimental-api           DEPRECATED: do not use this flag. (default true)
      --h                          Print usage information and exit
      --help                       Print usage information and exit
      --key-file string            Location of TLS key file used to secure communication with the fleet API or etcd
      --known-hosts-file string    File used to store remote machine fingerprints. Ignored if strict host key checking is disabled. (default \"~/.fleetctl/known_hosts\")
      --request-timeout float      Amount of time in seconds to allow a single request before considering it failed. (default 3)
      --ssh-timeout float          Amount of time in seconds to allow for SSH connection initialization before failing. (default 10)
      --ssh-username string        Username to use when connecting to CoreOS instance. (default \"core\")
      --strict-host-key-checking   Verify host keys presented by remote machines before initiating SSH connections. (default true)
      --tunnel string              Establish an SSH tunnel through the provided address for communication with fleet and etcd.
      --version                    Print the version and exit
";

    #[test]
    fn global_flag_listing_is_byte_exact() {
        assert_eq!(flag_usages(GLOBAL_FLAGS), GLOBAL_OPTIONS);
    }

    #[test]
    fn fleetctl_help_matches_transcript_01() {
        let expected = format!(
            "NAME:\n\tfleetctl - fleetctl is a command-line interface to fleet, the cluster-wide CoreOS init system.\n\nUSAGE:\n\tfleetctl\n\nVERSION:\n\t{VERSION}\n\nCOMMANDS:\n\tcat\t\tOutput the contents of a submitted unit\n\tdestroy\t\tDestroy one or more units in the cluster\n\tfd-forward\tProxy stdin and stdout to a unix domain socket\n\thelp\t\tHelp about any command\n\tjournal\t\tPrint the journal of a unit in the cluster to stdout\n\tlist-machines\tEnumerate the current hosts in the cluster\n\tlist-unit-files\tList the units that exist in the cluster.\n\tlist-units\tList the current state of units in the cluster\n\tload\t\tSchedule one or more units in the cluster, first submitting them if necessary.\n\trestart\t\tInstruct systemd to rolling restart one or more units in the cluster.\n\tssh\t\tOpen interactive shell on a machine in the cluster\n\tstart\t\tInstruct systemd to start one or more units in the cluster, first submitting and loading if necessary.\n\tstatus\t\tOutput the status of one or more units in the cluster\n\tstop\t\tInstruct systemd to stop one or more units in the cluster.\n\tsubmit\t\tUpload one or more units to the cluster without starting them\n\tunload\t\tUnschedule one or more units in the cluster.\n\tverify\t\t\n\tversion\t\tPrint the version and exit\n\nOPTIONS:\n{GLOBAL_OPTIONS}\n"
        );
        assert_eq!(original_global_help(), expected);
        if let Some(t) = transcript_stdout("01-version-help.txt", "fleetctl help") {
            assert_eq!(original_global_help(), t);
        }
    }

    /// `fleetctl help` without the commands this fleetctl adds (their lines only: the others keep their layout).
    fn original_global_help() -> String {
        let ours = |line: &str| EXTENSION_COMMANDS.iter().any(|c| line.starts_with(&format!("\t{c}\t")));
        global_help().split_inclusive('\n').filter(|l| !ours(l)).collect()
    }

    /// Bare `fleetctl` without the commands this fleetctl adds.
    fn original_bare_usage() -> String {
        let ours = |line: &str| EXTENSION_COMMANDS.iter().any(|c| line.starts_with(&format!("  {c} ")));
        bare_usage().split_inclusive('\n').filter(|l| !ours(l)).collect()
    }

    #[test]
    fn help_lists_the_rollout_commands_in_name_order() {
        let help = global_help();
        let listed: Vec<&str> =
            help.lines().filter_map(|l| l.strip_prefix('\t')).filter_map(|l| l.split('\t').next()).collect();
        let pos = |name: &str| listed.iter().position(|c| *c == name).unwrap_or_else(|| panic!("{name} not listed"));
        assert!(pos("restart") < pos("rollout-abort") && pos("rollout-status") < pos("ssh"), "{listed:?}");
        assert!(help.contains(
            "\trollout-status\tShow a rolling replace or restart machine by machine and wait until it ends\n"
        ));
        let bare = bare_usage();
        for c in EXTENSION_COMMANDS {
            assert!(bare.contains(&format!("\n  {c:<15} ")), "{c} in bare usage:\n{bare}");
        }
        let status = command_help(command("rollout-status").unwrap());
        assert!(status.contains("\tExit codes: 0 done, 1 error, 2 paused"), "{status}");
        let start = command_help(command("start").unwrap());
        assert!(start.contains("\t3 rolled back, 4 aborted.\n"), "{start}");
        assert!(
            start.contains("\n      --min-healthy duration         With --rolling: how long the new version must stay")
        );
        assert!(start.contains("(default 10s)\n") && start.contains("(default 5m0s)\n"), "{start}");
    }

    #[test]
    fn bare_usage_matches_transcript_01() {
        let out = original_bare_usage();
        assert!(out.starts_with("fleetctl is a command-line interface to fleet, the cluster-wide CoreOS init system.\n\nUsage:\n  fleetctl [flags]\n  fleetctl [command]\n\nAvailable Commands:\n  cat             Output the contents of a submitted unit\n"));
        assert!(out.contains("  list-unit-files List the units that exist in the cluster.\n"));
        assert!(!out.contains("  help "));
        assert!(!out.contains("  verify "));
        assert!(out.ends_with(&format!(
            "Flags:\n{GLOBAL_OPTIONS}\nUse \"fleetctl [command] --help\" for more information about a command.\n"
        )));
        if let Some(t) = transcript_stdout("01-version-help.txt", "fleetctl") {
            assert_eq!(out, t);
        }
    }

    /// `start` as the original defines it: without `--keep-machine` and the paragraph on replacing.
    fn original_start() -> &'static CommandSpec {
        let ours = command("start").unwrap();
        let ours_only = [&["keep-machine", "no-restart", DRY_RUN_FLAG][..], &ROLLING_FLAGS].concat();
        let flags: Vec<FlagSpec> = ours.flags.iter().filter(|f| !ours_only.contains(&f.name)).cloned().collect();
        let long = ours.long.split("\n\nReplace running units").next().unwrap();
        Box::leak(Box::new(CommandSpec { flags: Box::leak(flags.into_boxed_slice()), long, ..*ours }))
    }

    #[test]
    fn start_help_documents_keep_machine() {
        let out = command_help(command("start").unwrap());
        assert!(
            out.contains(
                "\n      --keep-machine                 With --replace: keep each replaced unit on the machine"
            )
        );
        assert!(out.contains("\tfleetctl start --replace --keep-machine foo.service"));
        assert!(command_help(command("load").unwrap()).contains("\n      --keep-machine "));
    }

    #[test]
    fn start_help_matches_transcript_01() {
        let out = command_help(original_start());
        assert!(out.starts_with("NAME:\n\tstart - Instruct systemd to start one or more units in the cluster, first submitting and loading if necessary.\n\nUSAGE:\n\tfleetctl start [--no-block|--block-attempts=N] UNIT...\n\nDESCRIPTION:\n\tStart one or many units on the cluster."));
        assert!(out.contains("\tunits are always non-blocking.\n\t\n\tStart a single unit:\n"));
        assert!(out.contains("OPTIONS:\n      --block-attempts int   Wait until the units are launched, performing up to N attempts before giving up. A value of 0 indicates no limit. Does not apply to global units.\n      --no-block             Do not wait until the units have launched before exiting. Always the case for global units.\n      --replace              Replace the already started units in the cluster with new versions.\n      --sign                 DEPRECATED - this option cannot be used\n\nGLOBAL OPTIONS:\n"));
        assert!(out.ends_with(&format!("GLOBAL OPTIONS:\n{GLOBAL_OPTIONS}\n")));
        for cmd in ["fleetctl help start", "fleetctl start --help"] {
            if let Some(t) = transcript_stdout("01-version-help.txt", cmd) {
                assert_eq!(out, t, "{cmd}");
            }
        }
    }

    #[test]
    fn list_command_helps_match_the_transcripts() {
        let cases = [
            ("01-version-help.txt", "fleetctl help list-unit-files", "list-unit-files"),
            ("01-version-help.txt", "fleetctl list-units --bogus-flag", "list-units"),
            ("02-list-machines.txt", "fleetctl list-machines -l", "list-machines"),
            ("09-errors.txt", "fleetctl journal --machine=0123456789abcdef", "journal"),
        ];
        for (file, cmd, name) in cases {
            if let Some(t) = transcript_stdout(file, cmd) {
                assert_eq!(command_help(command(name).unwrap()), t, "{cmd}");
            }
        }
        let lu = command_help(command("list-units").unwrap());
        assert!(lu.contains("OPTIONS:\n      --fields string   Columns to print for each Unit. Valid fields are \"active,hash,load,machine,sub,unit\" (default \"unit,machine,active,sub\")\n      --full            Do not ellipsize fields on output\n      --l               Shorthand for --full\n      --no-legend       Do not print a legend (column headers)\n\n"));
    }

    #[test]
    fn hidden_flags_stay_out_of_help() {
        let st = command_help(command("status").unwrap());
        assert!(!st.contains("--no-block"));
        assert!(st.contains("--ssh-port int"));
    }
}

//! Manual pages (issue 17): `fleetctl(1)` from fleetctl's command and flag tables, `fleetd(8)` from fleetd's usage,
//! the fleet.conf option list (`fleetd::config::OPTION_NAMES`, each described in [`FLEET_CONF`]) and its
//! environment. Generated, so they cannot drift from what the programs accept; `fleet-docs` writes them out.

use std::fmt::Write as _;

use fleet_core::version::VERSION;
use fleetctl::cli::commands::COMMANDS;
use fleetctl::cli::commands::{FlagSpec, Kind};
use fleetctl::cli::complete::user_commands;
use fleetctl::cli::flags::GLOBAL_FLAGS;
use fleetd::daemon::config::OPTION_NAMES;

/// fleet.conf options: name, default as written in fleet.conf, description.
pub const FLEET_CONF: &[(&str, &str, &str)] = &[
    ("verbosity", "0", "Log verbosity: 0 logs the default level, higher values log debug output."),
    ("etcd_servers", "http://127.0.0.1:2379,http://127.0.0.1:4001", "Comma-separated etcd endpoints."),
    ("etcd_username", "", "Username for etcd authentication."),
    ("etcd_password", "", "Password for etcd authentication."),
    ("etcd_keyfile", "", "TLS client key for etcd."),
    ("etcd_certfile", "", "TLS client certificate for etcd."),
    ("etcd_cafile", "", "CA certificate that signs etcd's server certificate."),
    ("etcd_key_prefix", "/_coreos.com/fleet/", "Key prefix of fleet's data in etcd (development use only)."),
    ("etcd_request_timeout", "1.0", "Seconds a single etcd request may take."),
    (
        "engine_reconcile_interval",
        "2.0",
        "Seconds between engine reconciliations; the engine lease lasts five of these.",
    ),
    (
        "public_ip",
        "",
        "IP address other machines and fleetctl reach this machine at (default: the first non-loopback address).",
    ),
    ("metadata", "", "Comma-separated key=value pairs describing the machine, matched by MachineMetadata= in units."),
    ("agent_ttl", "30s", "How long this machine stays in the cluster without renewing its presence (Go duration)."),
    ("units_directory", "/run/fleet/units/", "Where the agent writes unit files for systemd."),
    ("systemd_user", "false", "Talk to the user's systemd instead of the system's."),
    ("token_limit", "100", "Maximum number of entries per page of the API's list responses."),
    ("enable_grpc", "false", "Not supported by this fleetd: ignored with a warning."),
    ("disable_engine", "false", "Never become the engine leader (this machine only runs units)."),
    (
        "engine_rebalance",
        "false",
        "When this machine's engine leads: when a machine joins or returns, move unpinned units towards an even \
         spread, as a rebalance rollout (see fleetctl rebalance).",
    ),
    (
        "full_view",
        "false",
        "Keep a full view of the registry always (a machine fleetctl and the cluster page talk to). Without it, once \
         the cluster is at registry layout 2, this fleetd holds one only while its engine leads or its API is in \
         use (dropped a minute after the last request).",
    ),
    ("disable_watches", "false", "Poll etcd instead of watching it."),
    ("verify_units", "false", "No longer supported: ignored with a warning."),
    ("authorized_keys_file", "", "No longer supported: ignored with a warning."),
    (
        "api_listeners",
        "unix:///var/run/fleet.sock",
        "Comma-separated unix:///path or tcp://host:port sockets fleetd binds itself when systemd passes none.",
    ),
    (
        "api_tls_cert_file",
        "",
        "PEM certificate (chain) the API serves on its TCP listeners; with api_tls_key_file, TCP speaks only TLS.",
    ),
    ("api_tls_key_file", "", "PEM private key of api_tls_cert_file."),
    (
        "api_tls_client_ca_file",
        "",
        "PEM CA bundle: every TCP client must present a certificate it signed; roles come from the subject's OU.",
    ),
    ("api_socket_group", "", "Group of the Unix sockets fleetd binds itself (empty: root's)."),
    ("api_socket_mode", "0660", "Mode (octal) of the Unix sockets fleetd binds itself."),
    (
        "audit_max_records",
        "10000",
        "The audit trail (fleetctl audit) keeps at most this many records; the engine leader deletes the oldest.",
    ),
    ("audit_max_age", "720h", "The audit trail keeps records this long (Go duration); older ones are deleted."),
];

/// Text escaped for roff: backslashes, and a leading `.` or `'` that would start a request.
fn roff(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    text.lines()
        .map(|l| if l.starts_with('.') || l.starts_with('\'') { format!("\\&{l}") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
}

fn flag_item(s: &mut String, f: &FlagSpec) {
    let value = match f.kind {
        Kind::Bool => String::new(),
        Kind::Str => " \\fIstring\\fR".into(),
        Kind::Int => " \\fIint\\fR".into(),
        Kind::Float => " \\fIfloat\\fR".into(),
        Kind::Duration => " \\fIduration\\fR".into(),
    };
    let default = match (f.kind, f.default) {
        (_, "") | (Kind::Bool, "false") => String::new(),
        (_, d) => format!(" (default: {})", roff(d)),
    };
    let _ = write!(s, ".TP\n\\fB\\-\\-{}\\fR{value}\n{}{default}\n", roff(f.name), roff(f.usage));
}

/// `fleetctl(1)`: every command with its usage, description and flags, then the global flags.
pub fn fleetctl_page() -> String {
    let mut s = format!(".TH FLEETCTL 1 \"\" \"fleet {VERSION}\" \"fleet manual\"\n");
    s.push_str(".SH NAME\nfleetctl \\- the command\\-line client of fleet, a cluster init system\n");
    s.push_str(
        ".SH SYNOPSIS\n\\fBfleetctl\\fR [\\fIglobal flags\\fR] \\fIcommand\\fR [\\fIflags\\fR] [\\fIarguments\\fR]\n",
    );
    s.push_str(".SH DESCRIPTION\nfleetctl talks to a fleet cluster through fleetd's HTTP API (\\fB\\-\\-driver=API\\fR, the default) or directly to etcd (\\fB\\-\\-driver=etcd\\fR). Every global flag can also be set as \\fBFLEETCTL_\\fR\\fIFLAG\\fR in the environment (upper case, \\- becomes _); the command line wins.\n");
    s.push_str(".SH COMMANDS\n");
    for c in user_commands() {
        let _ = write!(s, ".SS {}\n\\fBfleetctl {}\\fR\n.PP\n{}\n", roff(c.name), roff(c.use_line), roff(c.short));
        if !c.long.is_empty() {
            s.push_str(".PP\n.nf\n");
            s.push_str(&roff(c.long.trim_matches('\n')));
            s.push_str("\n.fi\n");
        }
        let visible: Vec<&FlagSpec> = c.flags.iter().collect();
        if !visible.is_empty() {
            s.push_str(".PP\nFlags:\n.RS\n");
            for f in visible {
                flag_item(&mut s, f);
            }
            s.push_str(".RE\n");
        }
    }
    s.push_str(".SH GLOBAL FLAGS\n");
    // Hidden flags too: they are hidden from --help only to keep it the original's byte for byte.
    for f in GLOBAL_FLAGS {
        flag_item(&mut s, f);
    }
    s.push_str(".SH EXIT STATUS\n0 on success, 1 on errors (including unknown commands and flags), 2 for the deprecated \\fBverify\\fR. Commands that wait for a rollout exit 2 when it paused, 3 when it rolled back and 4 when it was aborted. \\fBplan\\fR and \\fB\\-\\-dry\\-run\\fR exit 2 when something would change.\n");
    s.push_str(".SH SEE ALSO\n\\fBfleetd\\fR(8)\n");
    s
}

/// `fleetd(8)`: its flags, every fleet.conf option with default and meaning, and the environment.
pub fn fleetd_page() -> String {
    let mut s = format!(".TH FLEETD 8 \"\" \"fleet {VERSION}\" \"fleet manual\"\n");
    s.push_str(".SH NAME\nfleetd \\- the fleet daemon: agent, engine and HTTP API of a fleet machine\n");
    s.push_str(".SH SYNOPSIS\n\\fBfleetd\\fR [\\fB\\-config\\fR \\fIpath\\fR] [\\fB\\-version\\fR]\n");
    s.push_str(".SH DESCRIPTION\nfleetd runs on every machine of a fleet cluster. It registers the machine in etcd, runs the units scheduled to it through systemd, takes part in electing the engine that schedules units, and serves fleet's HTTP API on the sockets systemd passes (\\fBfleet.socket\\fR, \\fBfleet\\-tcp.socket\\fR) or on \\fBapi_listeners\\fR.\n");
    s.push_str(".SH OPTIONS\n");
    s.push_str(".TP\n\\fB\\-config\\fR \\fIpath\\fR\nPath to config file. Fleet will look for a config at /etc/fleet/fleet.conf by default.\n");
    s.push_str(".TP\n\\fB\\-version\\fR\nPrint the version and exit.\n");
    s.push_str(".PP\nFlags take one or two dashes, with the value after = or as the next argument.\n");
    s.push_str(".SH CONFIGURATION\nfleet.conf (default \\fI/etc/fleet/fleet.conf\\fR) holds \\fIoption\\fR=\\fIvalue\\fR lines; a value that does not parse for its option is ignored with a warning. Options:\n");
    for name in OPTION_NAMES {
        let (default, text) =
            FLEET_CONF.iter().find(|(n, _, _)| *n == name).map(|(_, d, t)| (*d, *t)).unwrap_or(("", ""));
        let default = if default.is_empty() { String::new() } else { format!(" (default: {})", roff(default)) };
        let _ = write!(s, ".TP\n\\fB{}\\fR\n{}{default}\n", roff(name), roff(text));
    }
    s.push_str(".SH ENVIRONMENT\n");
    for name in OPTION_NAMES {
        let _ = write!(
            s,
            ".TP\n\\fBFLEET_{}\\fR\nOverrides \\fB{}\\fR of fleet.conf.\n",
            roff(&name.to_uppercase()),
            roff(name)
        );
    }
    s.push_str(".SH FILES\n.TP\n/etc/fleet/fleet.conf\nThe configuration.\n.TP\n/var/run/fleet.sock\nThe API's unix socket (fleet.socket).\n.TP\nTCP port 54728\nThe API over TCP (fleet\\-tcp.socket, when enabled).\n");
    s.push_str(".SH SEE ALSO\n\\fBfleetctl\\fR(1), \\fBsystemd.socket\\fR(5)\n");
    s
}

/// A fully commented `/etc/fleet/fleet.conf` (what the package installs): every option with its meaning, as a
/// commented `option=default` line, so uncommenting a line gives the default.
pub fn sample_fleet_conf() -> String {
    let mut s = String::from(
        "# fleetd configuration (see fleetd(8)). One option=value per line; every option can also be set as\n\
         # FLEET_<OPTION> in fleetd's environment. Each commented line shows the option's default.\n",
    );
    for name in OPTION_NAMES {
        let (default, text) =
            FLEET_CONF.iter().find(|(n, _, _)| *n == name).map(|(_, d, t)| (*d, *t)).unwrap_or(("", ""));
        let _ = write!(s, "\n# {text}\n#{name}={default}\n");
    }
    s
}

/// Every command name of the table users see (what the page and the completions must cover).
pub fn command_names() -> Vec<&'static str> {
    COMMANDS.iter().filter(|c| user_commands().any(|u| u.name == c.name)).map(|c| c.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetctl::cli::complete::script;

    #[test]
    fn every_command_and_global_flag_is_in_the_man_page_and_every_completion_script() {
        let page = fleetctl_page();
        let scripts: Vec<(&str, String)> = ["bash", "zsh", "fish"].iter().map(|s| (*s, script(s).unwrap())).collect();
        assert!(command_names().len() > 20);
        for name in command_names() {
            assert!(page.contains(&format!(".SS {}\n", roff(name))), "fleetctl(1) lacks {name}");
            for (shell, text) in &scripts {
                let present = match *shell {
                    "fish" => text.contains(&format!("__fish_use_subcommand -a {name} ")),
                    _ => text.contains(&format!("        {name}) ")),
                };
                assert!(present, "{shell} completion lacks command {name}");
            }
            for f in fleetctl::cli::commands::command(name).unwrap().flags {
                assert!(
                    page.contains(&format!("\\fB\\-\\-{}\\fR", roff(f.name))),
                    "fleetctl(1) lacks {name} --{}",
                    f.name
                );
            }
        }
        for f in GLOBAL_FLAGS {
            assert!(page.contains(&format!("\\fB\\-\\-{}\\fR", roff(f.name))), "fleetctl(1) lacks --{}", f.name);
            for (shell, text) in &scripts {
                let present = match *shell {
                    "fish" => text.contains(&format!("-l {} ", f.name)),
                    _ => text.contains(&format!("--{}", f.name)),
                };
                assert!(present, "{shell} completion lacks --{}", f.name);
            }
        }
        for hidden in fleetctl::cli::complete::HIDDEN_COMMANDS {
            assert!(!page.contains(hidden) && !scripts.iter().any(|(_, t)| t.contains(&format!("-a {hidden}"))));
        }
    }

    #[test]
    fn every_fleet_conf_option_is_described_with_its_environment_variable() {
        let page = fleetd_page();
        for name in OPTION_NAMES {
            let (_, _, text) = FLEET_CONF
                .iter()
                .find(|(n, _, _)| *n == name)
                .unwrap_or_else(|| panic!("fleet.conf option {name} has no description in FLEET_CONF"));
            assert!(page.contains(&format!("\\fB{}\\fR\n{}", roff(name), roff(text))), "{name}");
            assert!(page.contains(&format!("\\fBFLEET_{}\\fR", roff(&name.to_uppercase()))), "FLEET_{name}");
        }
        assert_eq!(FLEET_CONF.len(), OPTION_NAMES.len(), "FLEET_CONF describes options fleetd does not have");
        assert!(page.contains("\\fB\\-config\\fR") && page.contains("\\fB\\-version\\fR"));
    }

    #[test]
    fn the_sample_fleet_conf_has_every_option_commented_out_with_its_default() {
        let conf = sample_fleet_conf();
        for name in OPTION_NAMES {
            assert!(conf.lines().any(|l| l.starts_with(&format!("#{name}="))), "{name}");
        }
        assert!(conf.lines().all(|l| l.is_empty() || l.starts_with('#')), "only comments: {conf}");
        assert!(conf.contains("\n#etcd_servers=http://127.0.0.1:2379,http://127.0.0.1:4001\n"));
    }

    #[test]
    fn roff_escapes_requests_dashes_and_backslashes() {
        assert_eq!(roff(".hidden\n'also\nfine \\n x-y"), "\\&.hidden\n\\&'also\nfine \\en x\\-y");
    }
}

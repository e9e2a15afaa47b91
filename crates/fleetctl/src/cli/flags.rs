//! The global flags and the command-line parser (spec §9.1–§9.2), compatible with what cobra/pflag make observable:
//! global flags before or after the subcommand, `--name=value` and `--name value`, bool flags with optional
//! `=value`, interleaved positionals, `--` ending flag parsing, unique-prefix subcommands, `FLEETCTL_<FLAG>`
//! environment for global flags. Deliberate differences (B11 Rec): `-l`, `-f` and `-A` are accepted as the long
//! flags `--l`, `--f`, `--A`, and `--debug` works on the command line.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::commands::{COMMANDS, CommandSpec, EXTENSION_COMMANDS, FlagSpec, Kind};
use fleet_core::go::parse_duration;

/// The persistent flags every command accepts (§9.2), in help order.
pub const GLOBAL_FLAGS: &[FlagSpec] = &[
    FlagSpec::new(
        "ca-file",
        Kind::Str,
        "",
        "Location of TLS CA file used to secure communication with the fleet API or etcd",
    ),
    FlagSpec::new(
        "cert-file",
        Kind::Str,
        "",
        "Location of TLS cert file used to secure communication with the fleet API or etcd",
    ),
    FlagSpec::new("debug", Kind::Bool, "false", "Print out more debug information to stderr"),
    FlagSpec::new(
        "driver",
        Kind::Str,
        "API",
        "Adapter used to execute fleetctl commands. Options include \"API\" and \"etcd\".",
    ),
    FlagSpec::new(
        "endpoint",
        Kind::Str,
        "unix:///var/run/fleet.sock",
        "Location of the fleet API if --driver=API. Alternatively, if --driver=etcd, location of the etcd API.",
    ),
    FlagSpec::new("etcd-cafile", Kind::Str, "", "DEPRECATED: do not use this flag."),
    FlagSpec::new("etcd-certfile", Kind::Str, "", "DEPRECATED: do not use this flag."),
    FlagSpec::new(
        "etcd-key-prefix",
        Kind::Str,
        "/_coreos.com/fleet/",
        "Keyspace for fleet data in etcd (development use only!)",
    ),
    FlagSpec::new("etcd-keyfile", Kind::Str, "", "DEPRECATED: do not use this flag."),
    FlagSpec::new("experimental-api", Kind::Bool, "true", "DEPRECATED: do not use this flag."),
    FlagSpec::new("h", Kind::Bool, "false", "Print usage information and exit"),
    FlagSpec::new("help", Kind::Bool, "false", "Print usage information and exit"),
    FlagSpec::new(
        "key-file",
        Kind::Str,
        "",
        "Location of TLS key file used to secure communication with the fleet API or etcd",
    ),
    FlagSpec::new(
        "known-hosts-file",
        Kind::Str,
        "~/.fleetctl/known_hosts",
        "File used to store remote machine fingerprints. Ignored if strict host key checking is disabled.",
    ),
    FlagSpec::new(
        "request-timeout",
        Kind::Float,
        "3",
        "Amount of time in seconds to allow a single request before considering it failed.",
    ),
    FlagSpec::new(
        "ssh-timeout",
        Kind::Float,
        "10",
        "Amount of time in seconds to allow for SSH connection initialization before failing.",
    ),
    FlagSpec::new("ssh-username", Kind::Str, "core", "Username to use when connecting to CoreOS instance."),
    FlagSpec::new(
        "strict-host-key-checking",
        Kind::Bool,
        "true",
        "Verify host keys presented by remote machines before initiating SSH connections.",
    ),
    FlagSpec::new(
        "tunnel",
        Kind::Str,
        "",
        "Establish an SSH tunnel through the provided address for communication with fleet and etcd.",
    ),
    FlagSpec::new("version", Kind::Bool, "false", "Print the version and exit"),
    // Hidden so that help stays the original's byte for byte (docs/fleetctl.md).
    FlagSpec::hidden(
        "no-progress",
        Kind::Bool,
        "false",
        "Do not draw the live progress line on a terminal's stderr while waiting.",
    ),
];

/// A parsed flag value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Str(String),
    Int(i64),
    Float(f64),
    Duration(Duration),
}

/// Why the command line could not be parsed. Messages are pflag's / cobra's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown command {0:?} for \"fleetctl\"")]
    UnknownCommand(String, Vec<&'static str>),
    #[error("unknown flag: --{0}")]
    UnknownFlag(String),
    #[error("unknown shorthand flag: '{0}' in -{1}")]
    UnknownShorthand(char, String),
    #[error("flag needs an argument: --{0}")]
    NeedsArgument(String),
    #[error("invalid argument {value:?} for \"--{flag}\" flag: {reason}")]
    InvalidValue { flag: String, value: String, reason: String },
    #[error("invalid value {value:?} in environment variable {var}: {reason}")]
    InvalidEnv { var: String, value: String, reason: String },
}

/// Values of all flags a command accepts (its own and the global ones), with defaults filled in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flags {
    values: BTreeMap<&'static str, Value>,
    /// Flags given on the command line or in the environment (not left at their default).
    given: BTreeSet<&'static str>,
}

impl Flags {
    fn with_defaults(specs: &[&[FlagSpec]]) -> Self {
        let mut values = BTreeMap::new();
        for list in specs {
            for s in *list {
                // Defaults are well-formed constants.
                if let Ok(v) = parse_value(s, s.default) {
                    values.insert(s.name, v);
                }
            }
        }
        Flags { values, given: BTreeSet::new() }
    }

    pub fn bool(&self, name: &str) -> bool {
        matches!(self.values.get(name), Some(Value::Bool(true)))
    }

    pub fn str(&self, name: &str) -> &str {
        match self.values.get(name) {
            Some(Value::Str(s)) => s,
            _ => "",
        }
    }

    pub fn int(&self, name: &str) -> i64 {
        match self.values.get(name) {
            Some(Value::Int(i)) => *i,
            _ => 0,
        }
    }

    pub fn float(&self, name: &str) -> f64 {
        match self.values.get(name) {
            Some(Value::Float(f)) => *f,
            _ => 0.0,
        }
    }

    pub fn duration(&self, name: &str) -> Duration {
        match self.values.get(name) {
            Some(Value::Duration(d)) => *d,
            _ => Duration::ZERO,
        }
    }

    /// Whether the command defines this flag.
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// Whether the flag was given (on the command line or in the environment), even with its default value.
    pub fn is_given(&self, name: &str) -> bool {
        self.given.contains(name)
    }
}

/// The outcome of parsing a command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The selected command (`None` for the root).
    pub command: Option<&'static CommandSpec>,
    pub flags: Flags,
    pub args: Vec<String>,
}

/// A parse failure together with the command whose usage should be shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub command: Option<&'static CommandSpec>,
    pub error: ParseError,
}

fn find_spec<'a>(specs: &[&'a [FlagSpec]], name: &str) -> Option<&'a FlagSpec> {
    specs.iter().flat_map(|l| l.iter()).find(|s| s.name == name)
}

/// pflag's `strconv` wording for bad values.
fn parse_value(spec: &FlagSpec, text: &str) -> Result<Value, String> {
    match spec.kind {
        Kind::Str => Ok(Value::Str(text.to_string())),
        Kind::Bool => match text {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(Value::Bool(true)),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(Value::Bool(false)),
            _ => Err(format!("strconv.ParseBool: parsing {text:?}: invalid syntax")),
        },
        Kind::Int => text
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|_| format!("strconv.ParseInt: parsing {text:?}: invalid syntax")),
        Kind::Float => text
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(Value::Float)
            .ok_or_else(|| format!("strconv.ParseFloat: parsing {text:?}: invalid syntax")),
        Kind::Duration => parse_duration(text).map(Value::Duration).map_err(|e| e.to_string()),
    }
}

/// Environment variable name of a global flag: `FLEETCTL_` + upper-case name with `-` → `_`.
pub fn env_name(flag: &str) -> String {
    format!("FLEETCTL_{}", flag.to_ascii_uppercase().replace('-', "_"))
}

/// Resolve a (possibly abbreviated) subcommand name: exact match, else a unique prefix among the original's
/// commands (so the commands added here take no abbreviation away: `r` is still `restart`), else a unique prefix
/// among the added ones.
pub fn lookup_command(word: &str) -> Option<&'static CommandSpec> {
    if let Some(c) = COMMANDS.iter().find(|c| c.name == word) {
        return Some(c);
    }
    let added = |c: &CommandSpec| EXTENSION_COMMANDS.contains(&c.name);
    match commands_starting_with(word, |c| !added(c)) {
        Ok(Some(c)) => Some(c),
        Ok(None) => commands_starting_with(word, added).ok().flatten(),
        Err(()) => None,
    }
}

/// The one command among those `pick` selects whose name starts with `word`: `Ok(None)` when none does, `Err` when
/// several do.
fn commands_starting_with(word: &str, pick: impl Fn(&CommandSpec) -> bool) -> Result<Option<&'static CommandSpec>, ()> {
    let mut matches = COMMANDS.iter().filter(|c| pick(c) && !word.is_empty() && c.name.starts_with(word));
    match (matches.next(), matches.next()) {
        (Some(c), None) => Ok(Some(c)),
        (None, _) => Ok(None),
        _ => Err(()),
    }
}

/// Commands whose name is close to `word` (cobra's "Did you mean this?").
fn suggestions(word: &str) -> Vec<&'static str> {
    COMMANDS
        .iter()
        .filter(|c| c.listed)
        .filter(|c| levenshtein(word, c.name) <= 2 || (!word.is_empty() && c.name.starts_with(word)))
        .map(|c| c.name)
        .collect()
}

fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Index of the subcommand word: the first argument that is not a flag or a global flag's separate value.
fn command_index(args: &[String]) -> Option<usize> {
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            return None;
        }
        if let Some(long) = a.strip_prefix("--") {
            if !long.contains('=') {
                if let Some(spec) = GLOBAL_FLAGS.iter().find(|s| s.name == long) {
                    if spec.kind != Kind::Bool {
                        i += 1;
                    }
                }
            }
        } else if !a.starts_with('-') || a == "-" {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Parse `args` (without the program name). `env` supplies `FLEETCTL_*` variables.
pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Invocation, Failure> {
    let idx = command_index(args);
    let command = match idx {
        Some(i) => match lookup_command(&args[i]) {
            Some(c) => Some(c),
            None => {
                let word = args[i].clone();
                let sugg = suggestions(&word);
                return Err(Failure { command: None, error: ParseError::UnknownCommand(word, sugg) });
            }
        },
        None => None,
    };
    let own: &'static [FlagSpec] = command.map(|c| c.flags).unwrap_or(&[]);
    let specs: [&[FlagSpec]; 2] = [own, GLOBAL_FLAGS];
    let mut flags = Flags::with_defaults(&specs);
    let fail = |error: ParseError| Failure { command, error };

    // Environment first; the command line overrides it.
    for spec in GLOBAL_FLAGS {
        let var = env_name(spec.name);
        if let Some(text) = env(&var).filter(|v| !v.is_empty()) {
            let v = parse_value(spec, &text)
                .map_err(|reason| fail(ParseError::InvalidEnv { var: var.clone(), value: text.clone(), reason }))?;
            flags.values.insert(spec.name, v);
            flags.given.insert(spec.name);
        }
    }

    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if Some(i - 1) == idx {
            continue;
        }
        if a == "--" {
            positional.extend(args[i..].iter().cloned());
            break;
        }
        let (name, inline): (String, Option<String>) = if let Some(long) = a.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (long.to_string(), None),
            }
        } else if let Some(short) = a.strip_prefix('-').filter(|s| !s.is_empty()) {
            // Shorthands: -h is help; -l/-f/-A map to the long flags of those names; -v only as first argument.
            let mut chars = short.chars();
            let c = chars.next().unwrap_or('-');
            let rest = chars.as_str();
            let long = match c {
                'h' => "help".to_string(),
                'v' if i == 1 => "version".to_string(),
                other if find_spec(&specs, &other.to_string()).is_some() => other.to_string(),
                other => return Err(fail(ParseError::UnknownShorthand(other, short.to_string()))),
            };
            let inline_val = if rest.is_empty() {
                None
            } else if let Some(v) = rest.strip_prefix('=') {
                Some(v.to_string())
            } else {
                let next = rest.chars().next().unwrap_or(c);
                return Err(fail(ParseError::UnknownShorthand(next, short.to_string())));
            };
            (long, inline_val)
        } else {
            positional.push(a.clone());
            continue;
        };
        let Some(spec) = find_spec(&specs, &name) else {
            return Err(fail(ParseError::UnknownFlag(name)));
        };
        let text = match (inline, spec.kind) {
            (Some(v), _) => v,
            (None, Kind::Bool) => "true".to_string(),
            (None, _) => {
                if i < args.len() {
                    i += 1;
                    args[i - 1].clone()
                } else {
                    return Err(fail(ParseError::NeedsArgument(name)));
                }
            }
        };
        let v = parse_value(spec, &text).map_err(|reason| {
            fail(ParseError::InvalidValue { flag: spec.name.to_string(), value: text.clone(), reason })
        })?;
        flags.values.insert(spec.name, v);
        flags.given.insert(spec.name);
    }
    Ok(Invocation { command, flags, args: positional })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn ok(s: &[&str]) -> Invocation {
        parse(&args(s), &no_env).unwrap()
    }

    fn err(s: &[&str]) -> String {
        parse(&args(s), &no_env).unwrap_err().error.to_string()
    }

    #[test]
    fn unique_prefixes_select_commands() {
        assert_eq!(ok(&["list-m"]).command.unwrap().name, "list-machines");
        assert_eq!(ok(&["list-units"]).command.unwrap().name, "list-units");
        assert_eq!(ok(&["list-unit-"]).command.unwrap().name, "list-unit-files");
        assert_eq!(ok(&["des", "a"]).command.unwrap().name, "destroy");
        assert_eq!(err(&["s", "a"]), "unknown command \"s\" for \"fleetctl\"");
        assert_eq!(err(&["list"]), "unknown command \"list\" for \"fleetctl\"");
        assert_eq!(err(&["bogus-command"]), "unknown command \"bogus-command\" for \"fleetctl\"");
    }

    #[test]
    fn added_commands_take_no_abbreviation_of_the_original_away() {
        assert_eq!(ok(&["r", "a"]).command.unwrap().name, "restart");
        assert_eq!(ok(&["re", "a"]).command.unwrap().name, "restart");
        assert_eq!(ok(&["rollout-s", "a"]).command.unwrap().name, "rollout-status");
        assert_eq!(ok(&["rollout-r", "a"]).command.unwrap().name, "rollout-resume");
        assert_eq!(err(&["ro"]), "unknown command \"ro\" for \"fleetctl\"");
        assert_eq!(err(&["rollout-"]), "unknown command \"rollout-\" for \"fleetctl\"");
    }

    #[test]
    fn global_flags_go_before_or_after_the_command() {
        let a = ok(&["--endpoint", "http://x:1", "list-units", "--full"]);
        assert_eq!(a.command.unwrap().name, "list-units");
        assert_eq!(a.flags.str("endpoint"), "http://x:1");
        assert!(a.flags.bool("full"));
        let b = ok(&["list-units", "--endpoint=http://y:2", "--no-legend"]);
        assert_eq!(b.flags.str("endpoint"), "http://y:2");
        assert!(b.flags.bool("no-legend"));
        assert_eq!(b.flags.str("driver"), "API");
        assert_eq!(b.flags.float("request-timeout"), 3.0);
    }

    #[test]
    fn flags_and_positionals_interleave_and_double_dash_passes_through() {
        let a = ok(&["start", "a.service", "--no-block", "b.service", "--block-attempts", "3"]);
        assert_eq!(a.args, ["a.service", "b.service"]);
        assert!(a.flags.bool("no-block"));
        assert_eq!(a.flags.int("block-attempts"), 3);
        let s = ok(&["ssh", "m1", "--", "ls", "-l"]);
        assert_eq!(s.args, ["m1", "ls", "-l"]);
    }

    #[test]
    fn single_letter_long_flags_accept_one_dash_too() {
        assert!(ok(&["list-units", "-l"]).flags.bool("l"));
        assert!(ok(&["list-machines", "--l"]).flags.bool("l"));
        assert!(ok(&["journal", "-f", "a"]).flags.bool("f"));
        assert!(ok(&["ssh", "-A", "m"]).flags.bool("A"));
        assert_eq!(err(&["list-unit-files", "-l"]), "unknown shorthand flag: 'l' in -l");
        assert_eq!(err(&["list-units", "-x"]), "unknown shorthand flag: 'x' in -x");
        assert_eq!(err(&["list-units", "-lx"]), "unknown shorthand flag: 'x' in -lx");
    }

    #[test]
    fn status_accepts_no_block() {
        assert!(ok(&["status", "--no-block", "global.service"]).flags.bool("no-block"));
    }

    #[test]
    fn flag_errors_use_pflag_messages() {
        assert_eq!(err(&["list-units", "--bogus-flag"]), "unknown flag: --bogus-flag");
        assert_eq!(err(&["journal", "--bogus=x"]), "unknown flag: --bogus");
        assert_eq!(err(&["list-units", "--fields"]), "flag needs an argument: --fields");
        assert_eq!(
            err(&["start", "--block-attempts=x"]),
            "invalid argument \"x\" for \"--block-attempts\" flag: strconv.ParseInt: parsing \"x\": invalid syntax"
        );
        assert_eq!(
            err(&["start", "--no-block=maybe"]),
            "invalid argument \"maybe\" for \"--no-block\" flag: strconv.ParseBool: parsing \"maybe\": invalid syntax"
        );
    }

    #[test]
    fn duration_flags_take_go_durations() {
        let a = ok(&["restart", "--rolling", "--min-healthy=1m30s", "--health-timeout", "500ms", "a"]);
        assert_eq!(a.flags.duration("min-healthy"), Duration::from_secs(90));
        assert_eq!(a.flags.duration("health-timeout"), Duration::from_millis(500));
        let defaults = ok(&["restart", "a"]);
        assert_eq!(defaults.flags.duration("min-healthy"), Duration::from_secs(10));
        assert_eq!(defaults.flags.duration("health-timeout"), Duration::from_secs(300));
        assert_eq!(ok(&["restart", "--min-healthy=0", "a"]).flags.duration("min-healthy"), Duration::ZERO);
        assert_eq!(
            err(&["restart", "--min-healthy=10"]),
            "invalid argument \"10\" for \"--min-healthy\" flag: time: invalid duration \"10\""
        );
        assert_eq!(
            err(&["start", "--health-timeout=-1s"]),
            "invalid argument \"-1s\" for \"--health-timeout\" flag: time: invalid duration \"-1s\""
        );
    }

    #[test]
    fn flags_given_are_told_apart_from_defaults() {
        let a = ok(&["restart", "--max-unavailable=1", "a"]);
        assert!(a.flags.is_given("max-unavailable"), "given with its default value");
        assert!(!a.flags.is_given("min-healthy"));
        assert!(!a.flags.is_given("rolling"));
    }

    #[test]
    fn bool_flags_take_optional_values() {
        assert!(!ok(&["--strict-host-key-checking=false", "list-units"]).flags.bool("strict-host-key-checking"));
        assert!(ok(&["list-units"]).flags.bool("strict-host-key-checking"));
        assert!(ok(&["--debug", "list-units"]).flags.bool("debug"));
    }

    #[test]
    fn environment_supplies_global_flags_and_the_command_line_wins() {
        let env = |k: &str| match k {
            "FLEETCTL_ENDPOINT" => Some("http://env:1".to_string()),
            "FLEETCTL_REQUEST_TIMEOUT" => Some("1.5".to_string()),
            "FLEETCTL_DRIVER" => Some(String::new()),
            "FLEETCTL_FULL" => Some("true".to_string()),
            _ => None,
        };
        let a = parse(&args(&["list-units"]), &env).unwrap();
        assert_eq!(a.flags.str("endpoint"), "http://env:1");
        assert_eq!(a.flags.float("request-timeout"), 1.5);
        assert_eq!(a.flags.str("driver"), "API", "empty variables are ignored");
        assert!(!a.flags.bool("full"), "command flags have no environment form");
        let b = parse(&args(&["--endpoint=http://cli:2", "list-units"]), &env).unwrap();
        assert_eq!(b.flags.str("endpoint"), "http://cli:2");
        let bad = |k: &str| (k == "FLEETCTL_DEBUG").then(|| "yes please".to_string());
        assert!(parse(&args(&["list-units"]), &bad).is_err());
    }

    #[test]
    fn help_and_version_flags() {
        assert!(ok(&["start", "--help"]).flags.bool("help"));
        assert!(ok(&["start", "-h"]).flags.bool("help"));
        assert!(ok(&["--h"]).flags.bool("h"));
        assert!(ok(&["-v"]).flags.bool("version"));
        assert!(ok(&["--version"]).flags.bool("version"));
        assert_eq!(err(&["list-units", "-v"]), "unknown shorthand flag: 'v' in -v");
        assert!(ok(&[]).command.is_none());
    }

    #[test]
    fn suggestions_for_near_misses() {
        match parse(&args(&["lst-units"]), &no_env).unwrap_err().error {
            ParseError::UnknownCommand(_, s) => assert_eq!(s, ["list-units"]),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn env_names() {
        assert_eq!(env_name("strict-host-key-checking"), "FLEETCTL_STRICT_HOST_KEY_CHECKING");
    }
}

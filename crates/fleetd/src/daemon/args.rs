//! fleetd's command line (spec §1.2): only `-version` and `-config <path>`, in Go `flag` syntax (one or two dashes,
//! `=` or a separate argument). Everything else is configured through fleet.conf and `FLEET_*` variables.

use std::path::PathBuf;

pub const USAGE: &str =
    "fleetd is the server component of fleet, a simple orchestration system for scheduling systemd units in a cluster.

Usage: fleetd [options]

Options:
  -config string
    \tPath to config file. Fleet will look for a config at /etc/fleet/fleet.conf by default.
  -version
    \tPrint the version and exit
";

/// What the command line asks fleetd to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Version,
    Help,
    Run { config: Option<PathBuf> },
}

/// A command line fleetd cannot act on; `exit_code` follows the original (1 for arguments, 2 for flags).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("{argv0} takes no arguments. Did you mean to invoke fleetctl instead?")]
    Positional { argv0: String },
    #[error("flag provided but not defined: {0}")]
    UnknownFlag(String),
    #[error("flag needs an argument: {0}")]
    MissingValue(String),
    #[error("invalid boolean value {value:?} for -version")]
    BadBool { value: String },
}

impl ArgsError {
    pub fn exit_code(&self) -> i32 {
        match self {
            ArgsError::Positional { .. } => 1,
            _ => 2,
        }
    }
}

/// Parses `args` (without argv0).
pub fn parse(argv0: &str, args: &[String]) -> Result<Invocation, ArgsError> {
    let mut config = None;
    let mut version = false;
    let mut iter = args.iter();
    let mut positional = Vec::new();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            positional.extend(iter.by_ref().cloned());
            break;
        }
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')).filter(|f| !f.is_empty()) else {
            positional.push(arg.clone());
            // Go's flag package stops at the first positional argument.
            positional.extend(iter.by_ref().cloned());
            break;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        match name {
            "version" => {
                version = match inline.as_deref() {
                    None => true,
                    Some(v) => crate::daemon::config::parse_go_bool(v)
                        .ok_or_else(|| ArgsError::BadBool { value: v.to_string() })?,
                }
            }
            "config" => {
                let value = match inline {
                    Some(v) => v,
                    None => iter.next().cloned().ok_or_else(|| ArgsError::MissingValue("-config".into()))?,
                };
                config = Some(PathBuf::from(value));
            }
            "h" | "help" => return Ok(Invocation::Help),
            other => return Err(ArgsError::UnknownFlag(format!("-{other}"))),
        }
    }
    match positional.first().map(String::as_str) {
        Some("version") => return Ok(Invocation::Version),
        Some(_) => return Err(ArgsError::Positional { argv0: argv0.to_string() }),
        None => {}
    }
    Ok(if version { Invocation::Version } else { Invocation::Run { config } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Invocation, ArgsError> {
        parse("fleetd", &args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn accepts_go_flag_spellings() {
        let run = |c: &str| Ok(Invocation::Run { config: Some(PathBuf::from(c)) });
        assert_eq!(p(&["-config", "/opt/fleet/fleet.conf"]), run("/opt/fleet/fleet.conf"));
        assert_eq!(p(&["--config=/a"]), run("/a"));
        assert_eq!(p(&["-config=/a"]), run("/a"));
        assert_eq!(p(&["--config", "/a"]), run("/a"));
        assert_eq!(p(&[]), Ok(Invocation::Run { config: None }));
        assert_eq!(p(&["-version"]), Ok(Invocation::Version));
        assert_eq!(p(&["--version"]), Ok(Invocation::Version));
        assert_eq!(p(&["version"]), Ok(Invocation::Version));
        assert_eq!(p(&["-h"]), Ok(Invocation::Help));
    }

    #[test]
    fn rejects_positionals_and_unknown_flags_with_the_original_exit_codes() {
        let err = p(&["start"]).unwrap_err();
        assert_eq!(err.to_string(), "fleetd takes no arguments. Did you mean to invoke fleetctl instead?");
        assert_eq!(err.exit_code(), 1);
        let err = p(&["--bogus"]).unwrap_err();
        assert_eq!(err.to_string(), "flag provided but not defined: -bogus");
        assert_eq!(err.exit_code(), 2);
        assert_eq!(p(&["-config"]).unwrap_err().exit_code(), 2);
    }
}

//! fleetctl, the command-line client (spec §9): the entry point, the outside world a run gets ([`Env`]), and the
//! dispatch of a parsed invocation to its command ([`run`]).
//!
//! Code map: `context` (the command context [`Ctx`] every command gets, its poll cadence, the log line format),
//! `flags` (flag table + parser), `commands` (command table and help texts), `help` (help layouts), `table` (the
//! tab-writer and machine legends), `stored` (what a stored unit's options mean to the listings), `parallel`
//! (requests for many units at once), `list` (list-machines, list-units, list-unit-files), `create` (the creation
//! step of submit/load/start/restart and the `--replace` decision table), `wait` (blocking semantics), `units`
//! (submit, load, start, stop, unload, destroy, restart, cat), `plan` (plan and `--dry-run`), `json`
//! (`--output=json` documents), `complete` (`completion bash|zsh|fish` and the hidden `__complete` helper),
//! `progress` (the progress line), `cordon` (cordon, uncordon), `audit` (the audit trail), `rollout` (`start --replace --rolling`, `restart --rolling`, rollout-status,
//! rollout-pause, rollout-resume, rollout-promote, rollout-abort, rebalance, history, rollback), `remote` (ssh,
//! status, journal, fd-forward: machines reached over SSH), `misc` (version, help, verify); `tests` (tests only:
//! whole invocations against the fake client, above the dispatch that calls every command).
//!
//! Exit codes: 0 on success, 1 on every error — including parse errors and unknown commands, where the original
//! exits 0 (B11) — and 2 for the deprecated `verify`, like the original. Commands that wait for a rollout exit 2
//! when it paused, 3 when it rolled back and 4 when it was aborted (`rollout`).

pub mod audit;
pub mod commands;
pub mod complete;
pub mod context;
pub mod cordon;
pub mod create;
pub mod flags;
pub mod help;
pub mod json;
pub mod list;
pub mod misc;
pub mod parallel;
pub mod plan;
pub mod progress;
pub mod remote;
pub mod rollout;
pub mod stored;
pub mod table;
#[cfg(test)]
mod tests;
pub mod units;
pub mod wait;

use std::io::Write;
use std::time::Duration;

use crate::client::{self, BuildError, Client, ClientConfig, Driver};
use context::Timing;
use flags::{Flags, ParseError};
use fleet_core::version::SemVer;

// The commands share these; they live in `context`, below the commands, so that this file can dispatch to them.
pub use context::{Ctx, log_line};

/// Builds a client from the global flags (`client::build` in the binary, a fake in tests).
pub type Connect = dyn Fn(&ClientConfig) -> Result<Box<dyn Client>, BuildError>;

/// Where output goes and how the outside world is reached; tests substitute every part.
pub struct Env<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    /// Environment lookup (`FLEETCTL_*`).
    pub getenv: &'a dyn Fn(&str) -> Option<String>,
    /// Builds the client from the global flags.
    pub connect: &'a Connect,
    pub timing: Timing,
    /// Whether to install the stderr log subscriber (only the real binary does).
    pub init_logging: bool,
    /// How machines are reached (`ssh`, `status`, `journal`).
    pub remote: &'a dyn remote::Remote,
    /// Whether `err` is a terminal: waiting commands then draw a progress line there (unless `--no-progress`).
    pub err_is_terminal: bool,
}

/// The process entry point used by `src/bin/fleetctl.rs`.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let mut out = stdout.lock();
    let mut err = stderr.lock();
    let getenv = |k: &str| std::env::var(k).ok();
    let mut env = Env {
        out: &mut out,
        err: &mut err,
        getenv: &getenv,
        connect: &client::build,
        timing: Timing::default(),
        init_logging: true,
        remote: &remote::SshRemote,
        err_is_terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    let code = run(&args, &mut env);
    let _ = env.out.flush();
    code
}

fn init_logging(debug: bool) {
    let level = if debug { tracing::Level::DEBUG } else { tracing::Level::INFO };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_max_level(level)
        .try_init();
}

/// The etcd driver's best-effort check that fleetctl is not older than the cluster's newest fleetd (spec §9.3):
/// an ERROR log line if the check fails, the original's banner if fleetctl is older.
fn check_version(client: &dyn Client, err: &mut dyn Write) {
    match client.latest_daemon_version() {
        Err(e) => {
            let line = log_line(
                std::time::SystemTime::now(),
                "ERROR",
                &format!("error attempting to check latest fleet version in Registry: {e}"),
            );
            let _ = writeln!(err, "{line}");
        }
        Ok(Some(latest)) => {
            let mine = SemVer::parse(fleet_core::version::VERSION);
            if let Some(mine) = mine.filter(|mine| *mine < latest) {
                let _ = writeln!(err, "{}", fleet_core::version::old_version_warning(&mine, &latest));
            }
        }
        Ok(None) => {}
    }
}

fn client_config(flags: &Flags, getenv: &dyn Fn(&str) -> Option<String>) -> ClientConfig {
    let secs = flags.float("request-timeout");
    let request_timeout = if secs > 0.0 { Duration::from_secs_f64(secs.min(1e9)) } else { Duration::ZERO };
    let pick =
        |a: &str, b: &str| if flags.str(a).is_empty() { flags.str(b).to_string() } else { flags.str(a).to_string() };
    ClientConfig {
        driver: flags.str("driver").to_string(),
        endpoint: flags.str("endpoint").to_string(),
        etcd_key_prefix: flags.str("etcd-key-prefix").to_string(),
        request_timeout,
        tunnel: remote::tunnel_addr(flags).unwrap_or_default(),
        ssh: remote::ssh_config(flags, getenv),
        ca_file: pick("ca-file", "etcd-cafile"),
        cert_file: pick("cert-file", "etcd-certfile"),
        key_file: pick("key-file", "etcd-keyfile"),
    }
}

/// Run one fleetctl invocation (`args` without the program name) and return its exit code.
pub fn run(args: &[String], env: &mut Env<'_>) -> i32 {
    if args.is_empty() {
        let _ = env.out.write_all(help::bare_usage().as_bytes());
        return 0;
    }
    let inv = match flags::parse(args, env.getenv) {
        Ok(inv) => inv,
        Err(failure) => {
            let e = &failure.error;
            match e {
                ParseError::UnknownCommand(_, suggestions) => {
                    let _ = writeln!(env.err, "Error: {e}");
                    if !suggestions.is_empty() {
                        let _ = write!(env.err, "\nDid you mean this?\n");
                        for s in suggestions {
                            let _ = writeln!(env.err, "\t{s}");
                        }
                        let _ = writeln!(env.err);
                    }
                    let _ = write!(env.err, "Run 'fleetctl --help' for usage.\ncannot execute cmdFleet: {e}\n");
                }
                _ => {
                    let usage = match failure.command {
                        Some(c) => help::command_help(c),
                        None => help::global_help(),
                    };
                    let _ = env.out.write_all(usage.as_bytes());
                    let _ = write!(env.err, "Error: {e}\n\ncannot execute cmdFleet: {e}\n");
                }
            }
            return 1;
        }
    };
    if env.init_logging {
        init_logging(inv.flags.bool("debug"));
    }
    if inv.flags.bool("version") {
        return misc::version(env.out);
    }
    if inv.flags.bool("help") || inv.flags.bool("h") {
        let text = match inv.command {
            Some(c) if c.name != "help" => help::command_help(c),
            _ => help::global_help(),
        };
        let _ = env.out.write_all(text.as_bytes());
        return 0;
    }
    let Some(cmd) = inv.command else {
        let _ = env.out.write_all(help::bare_usage().as_bytes());
        return 0;
    };
    if let Some(msg) = cmd.deprecated {
        let _ = writeln!(env.err, "Command {:?} is deprecated, {msg}", cmd.name);
    }
    match cmd.name {
        "help" => return misc::help(&inv.args, env.out, env.err),
        "version" => return misc::version(env.out),
        "verify" => return misc::verify(env.err),
        "fd-forward" => return remote::fd_forward(&inv.args, env.err),
        "completion" => return complete::completion(&inv.args, env.out, env.err),
        _ => {}
    }
    let config = client_config(&inv.flags, env.getenv);
    let client = match (env.connect)(&config) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(env.err, "Unable to initialize client: {e}");
            return 1;
        }
    };
    if config.driver() == Ok(Driver::Etcd) {
        check_version(client.as_ref(), env.err);
    }
    let mut ctx = Ctx::new(client.as_ref(), env.out, env.err, &inv.flags, cmd.name, env.timing);
    ctx.progress = env.err_is_terminal && !inv.flags.bool("no-progress");
    let args = &inv.args;
    let code = match cmd.name {
        "list-machines" => list::list_machines(&mut ctx),
        "audit" => audit::audit(&mut ctx, args),
        "cordon" => cordon::cordon(&mut ctx, args, true),
        "uncordon" => cordon::cordon(&mut ctx, args, false),
        "list-units" => list::list_units(&mut ctx),
        "list-unit-files" => list::list_unit_files(&mut ctx),
        "submit" => units::submit(&mut ctx, args),
        "load" => units::load(&mut ctx, args),
        "start" => units::start(&mut ctx, args),
        "stop" => units::stop(&mut ctx, args),
        "unload" => units::unload(&mut ctx, args),
        "destroy" => units::destroy(&mut ctx, args),
        "restart" => units::restart(&mut ctx, args),
        "cat" => units::cat(&mut ctx, args),
        "plan" => plan::plan(&mut ctx, args),
        "rollout-status" => rollout::status(&mut ctx, args),
        "rebalance" => rollout::rebalance(&mut ctx, args),
        "drain" => rollout::drain(&mut ctx, args),
        "history" => rollout::history(&mut ctx, args),
        "rollback" => rollout::rollback(&mut ctx, args),
        "rollout-pause" => rollout::control(&mut ctx, args, fleet_core::rollout::Action::Pause),
        "rollout-resume" => rollout::control(&mut ctx, args, fleet_core::rollout::Action::Run),
        "rollout-promote" => rollout::control(&mut ctx, args, fleet_core::rollout::Action::Promote),
        "rollout-abort" => rollout::control(&mut ctx, args, fleet_core::rollout::Action::Abort),
        "status" => remote::status(&mut ctx, env.remote, args),
        "journal" => remote::journal(&mut ctx, env.remote, args),
        "ssh" => remote::ssh(&mut ctx, env.remote, args),
        "__complete" => complete::names(&mut ctx, args),
        other => {
            ctx.warn(&format!("{other}: not implemented"));
            1
        }
    };
    ctx.clear_progress();
    code
}

#[cfg(test)]
mod log_line_tests {
    // Here, not in `tests/`: the line checked names the file that calls `log_line`, this one.
    #[test]
    fn log_lines_look_like_go_log_output() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_018_721); // 2026-11-30T06:05:21Z
        let line = super::log_line(t, "WARN", "Unit a.service: x");
        let want = format!("2026/11/30 06:05:21 WARN mod.rs:{}: Unit a.service: x", line!() - 1);
        assert_eq!(line, want);
        let leap = std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29T00:00:00Z
        assert!(super::log_line(leap, "ERROR", "m").starts_with("2000/02/29 00:00:00 ERROR "));
    }
}

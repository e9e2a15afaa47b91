//! fleetctl, the command-line client (spec §9): parsing, help, dispatch and the shared command context.
//!
//! Code map: `flags` (flag table + parser), `commands` (command table and help texts), `help` (help layouts),
//! `table` (the tab-writer and machine legends), `list` (list-machines, list-units, list-unit-files), `create` (the
//! creation step of submit/load/start/restart and the `--replace` decision table), `wait` (blocking semantics),
//! `units` (submit, load, start, stop, unload, destroy, restart, cat), `json` (`--output=json` documents),
//! `complete` (`completion bash|zsh|fish` and the hidden `__complete` helper), `progress` (the progress line), `rollout` (`start --replace --rolling`,
//! `restart --rolling`, rollout-status, rollout-pause, rollout-resume, rollout-abort), `remote` (ssh, status,
//! journal, fd-forward: machines reached over SSH), `misc` (version, help, verify).
//!
//! Exit codes: 0 on success, 1 on every error — including parse errors and unknown commands, where the original
//! exits 0 (B11) — and 2 for the deprecated `verify`, like the original. Commands that wait for a rollout exit 2
//! when it paused, 3 when it rolled back and 4 when it was aborted (`rollout`).

pub mod commands;
pub mod complete;
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
pub mod units;
pub mod wait;

use std::io::Write;
use std::time::Duration;

use crate::client::{self, BuildError, Client, ClientConfig, Driver};
use flags::{Flags, ParseError};
use fleet_core::schema::Machine;
use fleet_core::version::SemVer;

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
    pub timing: wait::Timing,
    /// Whether to install the stderr log subscriber (only the real binary does).
    pub init_logging: bool,
    /// How machines are reached (`ssh`, `status`, `journal`).
    pub remote: &'a dyn remote::Remote,
    /// Whether `err` is a terminal: waiting commands then draw a progress line there (unless `--no-progress`).
    pub err_is_terminal: bool,
}

/// What a command needs while it runs.
pub struct Ctx<'a> {
    pub client: &'a dyn Client,
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    pub flags: &'a Flags,
    /// Name of the running command (`submit`, `load`, ...).
    pub command: &'static str,
    pub timing: wait::Timing,
    /// Units replaced by this command → the hash of their new content: waits on them are satisfied only by the
    /// new version (the old one may still report the wanted state).
    pub replaced: std::collections::BTreeMap<String, String>,
    /// Draw the live progress line on `err` while waiting (stderr is a terminal, no `--no-progress`).
    pub progress: bool,
    /// When the command started (the progress line's elapsed time).
    pub started: std::time::Instant,
    /// A progress line is on the screen (to be erased before other output).
    progress_shown: bool,
    machines: Option<Vec<Machine>>,
    /// Registry templates read by this command, by name (`None`: not in the registry): the instances of one
    /// template are created from one read of it, not one each.
    registry_templates: std::collections::HashMap<String, Option<fleet_core::schema::Unit>>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        client: &'a dyn Client,
        out: &'a mut dyn Write,
        err: &'a mut dyn Write,
        flags: &'a Flags,
        command: &'static str,
        timing: wait::Timing,
    ) -> Self {
        Ctx {
            client,
            out,
            err,
            flags,
            command,
            timing,
            replaced: Default::default(),
            progress: false,
            started: std::time::Instant::now(),
            progress_shown: false,
            machines: None,
            registry_templates: Default::default(),
        }
    }

    /// Print a line on stdout. Output errors (closed pipe) are ignored, as the original does.
    pub fn say(&mut self, line: &str) {
        self.clear_progress();
        let _ = writeln!(self.out, "{line}");
        if self.progress {
            let _ = self.out.flush();
        }
    }

    /// Print a line on stderr.
    pub fn warn(&mut self, line: &str) {
        self.clear_progress();
        let _ = writeln!(self.err, "{line}");
    }

    /// Draw (or redraw) the progress line when progress is on; nothing otherwise.
    pub fn show_progress(&mut self, line: &str) {
        if !self.progress {
            return;
        }
        let _ = write!(self.err, "{}{line}", progress::ERASE);
        let _ = self.err.flush();
        self.progress_shown = true;
    }

    /// Erase the progress line, if one is shown.
    pub fn clear_progress(&mut self) {
        if self.progress_shown {
            let _ = write!(self.err, "{}", progress::ERASE);
            let _ = self.err.flush();
            self.progress_shown = false;
        }
    }

    /// Print a log line on stderr the way the original's logger does (spec §1.9):
    /// `YYYY/MM/DD HH:MM:SS <LEVEL> <file>:<line>: <message>`, naming the calling source line. The time is UTC
    /// (the original used local time).
    #[track_caller]
    pub fn log(&mut self, level: &str, message: &str) {
        self.clear_progress();
        let _ = writeln!(self.err, "{}", log_line(std::time::SystemTime::now(), level, message));
    }

    /// The cluster's machines, fetched once per invocation (errors give an empty list).
    pub fn machines(&mut self) -> &[Machine] {
        if self.machines.is_none() {
            let ms = self.client.machines().unwrap_or_else(|e| {
                tracing::debug!(error = %e, "cannot list machines for legends");
                Vec::new()
            });
            self.machines = Some(ms);
        }
        self.machines.as_deref().unwrap_or(&[])
    }

    /// The registry's template `name`, read once per invocation (a failed read is not remembered).
    pub fn registry_template(
        &mut self,
        name: &str,
    ) -> Result<Option<fleet_core::schema::Unit>, crate::client::ClientError> {
        if let Some(known) = self.registry_templates.get(name) {
            return Ok(known.clone());
        }
        let read = self.client.unit(name)?;
        self.registry_templates.insert(name.to_string(), read.clone());
        Ok(read)
    }

    /// `--no-block` ⇒ `None` (do not wait); `--block-attempts=N>0` ⇒ `Some(N)`; otherwise `Some(0)` = no limit.
    pub fn block_attempts(&self) -> Option<u64> {
        if self.flags.bool("no-block") {
            return None;
        }
        Some(u64::try_from(self.flags.int("block-attempts")).unwrap_or(0))
    }
}

/// One log line as the original's fleetctl prints it (see [`Ctx::log`]), naming the caller's source file and line.
#[track_caller]
pub fn log_line(now: std::time::SystemTime, level: &str, message: &str) -> String {
    let caller = std::panic::Location::caller();
    let file = caller.file().rsplit('/').next().unwrap_or(caller.file());
    format!("{} {level} {file}:{}: {message}", fleet_core::go::log_time(now), caller.line())
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
        timing: wait::Timing::default(),
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
pub(crate) mod testing {
    //! Running whole invocations against the fake client.

    use std::sync::Arc;

    use super::*;
    use crate::client::fake::FakeClient;

    pub struct Outcome {
        pub code: i32,
        pub out: String,
        pub err: String,
    }

    /// Run `args` against `fake` with instant polling and the given environment.
    pub fn run_with(fake: &Arc<FakeClient>, args: &[&str], vars: &[(&str, &str)]) -> Outcome {
        run_full(fake, &super::remote::fake::FakeRemote::default(), args, vars)
    }

    /// Run `args` against `fake`, reaching machines through `remote`.
    pub fn run_remote(fake: &Arc<FakeClient>, remote: &dyn super::remote::Remote, args: &[&str]) -> Outcome {
        run_full(fake, remote, args, &[])
    }

    fn run_full(
        fake: &Arc<FakeClient>,
        remote: &dyn super::remote::Remote,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> Outcome {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut out = Vec::new();
        let mut err = Vec::new();
        let err_is_terminal = vars.iter().any(|(k, _)| *k == "TEST_STDERR_IS_TERMINAL");
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let getenv = move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let f = fake.clone();
        let connect = move |cfg: &ClientConfig| -> Result<Box<dyn Client>, BuildError> {
            cfg.driver()?;
            Ok(Box::new(f.clone()))
        };
        let mut env = Env {
            out: &mut out,
            err: &mut err,
            getenv: &getenv,
            connect: &connect,
            timing: wait::Timing::instant(),
            init_logging: false,
            remote,
            err_is_terminal,
        };
        let code = super::run(&args, &mut env);
        Outcome {
            code,
            out: String::from_utf8_lossy(&out).into_owned(),
            err: String::from_utf8_lossy(&err).into_owned(),
        }
    }

    pub fn run(fake: &Arc<FakeClient>, args: &[&str]) -> Outcome {
        run_with(fake, args, &[])
    }

    /// A three-machine cluster like the reference transcripts'.
    pub fn cluster() -> Arc<FakeClient> {
        Arc::new(FakeClient::with_machines(&[
            ("8363165e6276f500b71169eca9b3f76b", "172.17.0.2"),
            ("8606e1a2949979fb223fb4bad77d152c", "172.17.0.3"),
            ("d91d98fca203da3cb89fb5c100ed0823", "172.17.0.4"),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use fleet_core::version::VERSION;

    #[test]
    fn etcd_driver_warns_when_the_cluster_runs_a_newer_fleet() {
        let c = cluster();
        c.set_daemon_version("v99.0.0");
        let o = run(&c, &["--driver=etcd", "list-machines", "--no-legend"]);
        assert_eq!(o.code, 0);
        let mine = fleet_core::version::VERSION.trim_start_matches('v');
        assert!(
            o.err.starts_with("####################################################################\n"),
            "{}",
            o.err
        );
        assert!(o.err.contains(&format!("WARNING: fleetctl ({mine}) is older than the latest registered\n")));
        assert!(o.err.contains("version of fleet found in the cluster (99.0.0). You are strongly\n"));
        assert!(
            o.err.ends_with("####################################################################\n\n"),
            "{}",
            o.err
        );
        // Not with the API driver, and not when fleetctl is as new as the cluster.
        assert_eq!(run(&c, &["list-machines", "--no-legend"]).err, "");
        c.set_daemon_version(fleet_core::version::VERSION);
        assert_eq!(run(&c, &["--driver=etcd", "list-machines", "--no-legend"]).err, "");
    }

    #[test]
    fn etcd_driver_logs_a_failed_version_check_and_carries_on() {
        let c = cluster();
        c.fail_all(Some(crate::client::ClientError::Other("etcd get /p/: unreachable".into())));
        let o = run(&c, &["--driver=etcd", "list-units"]);
        let lines: Vec<&str> = o.err.lines().collect();
        assert_eq!(lines.len(), 2, "{}", o.err);
        assert!(
            lines[0].ends_with("error attempting to check latest fleet version in Registry: etcd get /p/: unreachable"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains(" ERROR mod.rs:"), "{}", lines[0]);
        assert_eq!(lines[1], "Error retrieving list of units from repository: etcd get /p/: unreachable");
        assert_eq!(o.code, 1);
    }

    #[test]
    fn log_lines_look_like_go_log_output() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_018_721); // 2026-11-30T06:05:21Z
        let line = super::log_line(t, "WARN", "Unit a.service: x");
        let want = format!("2026/11/30 06:05:21 WARN mod.rs:{}: Unit a.service: x", line!() - 1);
        assert_eq!(line, want);
        let leap = std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29T00:00:00Z
        assert!(super::log_line(leap, "ERROR", "m").starts_with("2000/02/29 00:00:00 ERROR "));
    }

    #[test]
    fn version_forms() {
        let c = cluster();
        for args in [&["version"][..], &["--version"], &["-v"], &["list-units", "--version"]] {
            let o = run(&c, args);
            assert_eq!((o.code, o.out.as_str()), (0, format!("fleetctl version {VERSION}\n").as_str()), "{args:?}");
        }
    }

    #[test]
    fn bare_invocation_prints_usage_and_help_prints_help() {
        let c = cluster();
        let o = run(&c, &[]);
        assert_eq!(o.code, 0);
        assert!(o.out.starts_with("fleetctl is a command-line interface"));
        for args in [&["help"][..], &["--help"], &["-h"], &["--h"]] {
            let o = run(&c, args);
            assert_eq!(o.code, 0);
            assert!(o.out.starts_with("NAME:\n\tfleetctl - "), "{args:?}");
        }
        let o = run(&c, &["help", "start"]);
        assert!(o.out.starts_with("NAME:\n\tstart - "));
        let o = run(&c, &["start", "--help"]);
        assert!(o.out.starts_with("NAME:\n\tstart - "));
        let o = run(&c, &["help", "nope"]);
        assert_eq!(o.code, 1);
    }

    #[test]
    fn unknown_command_and_flag_fail_with_the_originals_messages_but_exit_1() {
        let c = cluster();
        let o = run(&c, &["bogus-command"]);
        assert_eq!(o.code, 1);
        assert_eq!(o.out, "");
        assert_eq!(
            o.err,
            "Error: unknown command \"bogus-command\" for \"fleetctl\"\nRun 'fleetctl --help' for usage.\ncannot execute cmdFleet: unknown command \"bogus-command\" for \"fleetctl\"\n"
        );
        let o = run(&c, &["list-units", "--bogus-flag"]);
        assert_eq!(o.code, 1);
        assert!(o.out.starts_with("NAME:\n\tlist-units - "));
        assert_eq!(o.err, "Error: unknown flag: --bogus-flag\n\ncannot execute cmdFleet: unknown flag: --bogus-flag\n");
        let o = run(&c, &["lst-units"]);
        assert!(
            o.err.contains("\nDid you mean this?\n\tlist-units\n\nRun 'fleetctl --help' for usage.\n"),
            "{}",
            o.err
        );
    }

    #[test]
    fn bad_driver_fails_client_initialisation() {
        let c = cluster();
        let o = run(&c, &["--driver=bogus", "list-machines"]);
        assert_eq!((o.code, o.err.as_str()), (1, "Unable to initialize client: unrecognized driver \"bogus\"\n"));
        let o = run_with(&c, &["list-machines"], &[("FLEETCTL_DRIVER", "bogus")]);
        assert_eq!(o.code, 1);
    }

    #[test]
    fn verify_is_deprecated_and_exits_2() {
        let o = run(&cluster(), &["verify", "hello.service"]);
        assert_eq!(o.code, 2);
        assert_eq!(
            o.err,
            "Command \"verify\" is deprecated, DEPRECATED - No longer works\nWARNING: The signed/verified units feature is DEPRECATED and cannot be used.\n"
        );
    }

    #[test]
    fn status_accepts_no_block_like_the_functional_tests_use_it() {
        let c = cluster();
        c.insert_unit("global.service", "[Service]\nExecStart=/bin/true\n[X-Fleet]\nGlobal=true\n", "launched");
        let o = run(&c, &["status", "--no-block", "global.service"]);
        assert_eq!(o.code, 0, "{}", o.err);
    }
}

//! The commands that act on machines over SSH (spec §9.7–§9.9): `ssh`, `status`, `journal`, and `fd-forward`
//! (the helper the API tunnel runs on the tunnel host).
//!
//! How a machine is reached is behind [`Remote`]: [`SshRemote`] (the real one: local execution when the unit's
//! machine is this machine, else SSH — through `--tunnel` when given) or a fake in tests. Messages are the
//! original's (Appendix A). Deliberate differences: `status` and `journal` of a global unit run on every machine
//! that reports a state for it, or on the one picked with `--machine` (the original silently did nothing for
//! `status` and refused `journal`); an unknown machine address exits 1 (the original exited 0).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use super::context::{Ctx, machine_by_prefix};
use super::flags::Flags;
use super::stored::unit_is_global;
use crate::ssh::{self, Ended, Input, KnownHosts, Session, SshConfig, SshError};
use fleet_core::unit::name as unitf;

/// A failure to run something on a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteError {
    /// No SSH connection could be made (`Failed building SSH client`, `Unable to SSH to remote host`).
    Connect(SshError),
    /// The connection was made but the command could not be run (`Failed running command over SSH`).
    Run(SshError),
    /// A local command could not be started.
    Local(String),
}

/// How fleetctl reaches machines.
pub trait Remote {
    /// The ID of the machine fleetctl runs on (`/etc/machine-id`), if any.
    fn local_machine_id(&self) -> Option<String>;
    /// Runs `argv` here with fleetctl's own stdin, stdout and stderr.
    fn run_local(&self, argv: &[String]) -> Result<Ended, RemoteError>;
    /// Runs `argv` here without input and returns how it ended and its stdout (stderr stays fleetctl's).
    fn capture_local(&self, argv: &[String]) -> Result<(Ended, Vec<u8>), RemoteError>;
    /// Connects to `addr` (`host[:port]`, through `--tunnel` when set) and runs `command`, or an interactive
    /// shell when `None`.
    fn run_remote(
        &self,
        flags: &Flags,
        addr: &str,
        command: Option<&str>,
        input: Input,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Ended, RemoteError>;
}

/// The SSH settings the global flags (and `ssh -A`) describe (spec §9.2, §9.9).
pub fn ssh_config(flags: &Flags, getenv: &dyn Fn(&str) -> Option<String>) -> SshConfig {
    let secs = flags.float("ssh-timeout");
    let timeout = if secs > 0.0 { Duration::from_secs_f64(secs.min(1e6)) } else { Duration::from_secs(10) };
    SshConfig {
        user: flags.str("ssh-username").to_string(),
        timeout,
        known_hosts: flags.bool("strict-host-key-checking").then(|| KnownHosts::new(flags.str("known-hosts-file"))),
        agent_sock: getenv("SSH_AUTH_SOCK").filter(|s| !s.is_empty()).map(PathBuf::from),
        forward_agent: flags.bool("A") || flags.bool("forward-agent"),
    }
}

/// `--tunnel` as `host:port` (port 22 added when absent), if set.
pub fn tunnel_addr(flags: &Flags) -> Option<String> {
    let t = flags.str("tunnel");
    if t.is_empty() {
        return None;
    }
    let (host, port) = ssh::split_addr(t);
    Some(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") })
}

/// The real [`Remote`]: processes here, SSH elsewhere.
pub struct SshRemote;

impl Remote for SshRemote {
    fn local_machine_id(&self) -> Option<String> {
        let id = std::fs::read_to_string("/etc/machine-id").ok()?;
        let id = id.trim();
        (!id.is_empty()).then(|| id.to_string())
    }

    fn run_local(&self, argv: &[String]) -> Result<Ended, RemoteError> {
        let rt = runtime().map_err(RemoteError::Local)?;
        let (program, args) = argv.split_first().ok_or_else(|| RemoteError::Local("empty command".into()))?;
        let r = rt.block_on(ssh::run_local(program, args)).map_err(|e| RemoteError::Local(e.to_string()));
        rt.shutdown_background();
        r
    }

    fn capture_local(&self, argv: &[String]) -> Result<(Ended, Vec<u8>), RemoteError> {
        let (program, args) = argv.split_first().ok_or_else(|| RemoteError::Local("empty command".into()))?;
        let output = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| RemoteError::Local(format!("{program}: {e}")))?;
        Ok((Ended::Exit(output.status.code().unwrap_or(255)), output.stdout))
    }

    fn run_remote(
        &self,
        flags: &Flags,
        addr: &str,
        command: Option<&str>,
        input: Input,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Ended, RemoteError> {
        let getenv = |k: &str| std::env::var(k).ok();
        let config = ssh_config(flags, &getenv);
        let rt = runtime().map_err(|e| RemoteError::Connect(SshError::Protocol(e)))?;
        let result = rt.block_on(async {
            let (session, _bastion) = match tunnel_addr(flags) {
                Some(tunnel) => {
                    // Agent forwarding is for the target, not the bastion.
                    let hop = SshConfig { forward_agent: false, ..config.clone() };
                    let bastion = Session::connect(&hop, &tunnel).await.map_err(RemoteError::Connect)?;
                    let s = bastion.connect_via(&config, addr).await.map_err(RemoteError::Connect)?;
                    (s, Some(bastion))
                }
                None => (Session::connect(&config, addr).await.map_err(RemoteError::Connect)?, None),
            };
            let ended = session.run(command, input, out, err).await.map_err(RemoteError::Run);
            session.close().await;
            ended
        });
        rt.shutdown_background();
        result
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())
}

/// `addr` plus `:<port>` unless the port is 22 (`findSSHPort`).
fn with_port(ip: &str, port: i64) -> String {
    if port == 22 || port <= 0 {
        ip.to_string()
    } else if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// `<cmd> "<arg1>" "<arg2>"...` with Go's `%q` quoting.
fn command_line(argv: &[String]) -> String {
    let mut line = argv[0].clone();
    for a in &argv[1..] {
        line.push(' ');
        line.push_str(&fleet_core::go::quote(a));
    }
    line
}

/// Runs `argv` on machine `machine_id` (locally when it is this machine) and returns the exit code
/// (`runCommand`, spec §9.8).
fn run_command(ctx: &mut Ctx<'_>, remote: &dyn Remote, machine_id: &str, argv: &[String]) -> Result<Ended, i32> {
    run_on_machine(ctx, remote, machine_id, argv, None)
}

/// [`run_command`], with the command's stdout going to `capture` when given (instead of fleetctl's stdout).
fn run_on_machine(
    ctx: &mut Ctx<'_>,
    remote: &dyn Remote,
    machine_id: &str,
    argv: &[String],
    capture: Option<&mut Vec<u8>>,
) -> Result<Ended, i32> {
    if remote.local_machine_id().as_deref() == Some(machine_id) {
        if let Some(buffer) = capture {
            return match remote.capture_local(argv) {
                Ok((ended, stdout)) => {
                    buffer.extend_from_slice(&stdout);
                    Ok(ended)
                }
                Err(e) => {
                    let msg = match e {
                        RemoteError::Local(m) => m,
                        RemoteError::Connect(e) | RemoteError::Run(e) => e.to_string(),
                    };
                    ctx.warn(&format!("Error running local command: {msg}"));
                    Err(1)
                }
            };
        }
        let _ = ctx.out.flush();
        return remote.run_local(argv).map_err(|e| {
            let msg = match e {
                RemoteError::Local(m) => m,
                RemoteError::Connect(e) | RemoteError::Run(e) => e.to_string(),
            };
            ctx.warn(&format!("Error running local command: {msg}"));
            1
        });
    }
    let ip = match ctx.machines().iter().find(|m| m.id == machine_id) {
        Some(m) if !m.primary_ip.is_empty() => m.primary_ip.clone(),
        _ => {
            ctx.warn(&format!("Error getting machine IP: machine {machine_id} is not in the cluster"));
            return Err(1);
        }
    };
    let addr = with_port(&ip, ctx.flags.int("ssh-port"));
    let out: &mut dyn Write = match capture {
        Some(buffer) => buffer,
        None => &mut *ctx.out,
    };
    match remote.run_remote(ctx.flags, &addr, Some(&command_line(argv)), Input::None, out, ctx.err) {
        Ok(ended) => Ok(ended),
        Err(RemoteError::Connect(e) | RemoteError::Run(e)) => {
            ctx.warn(&format!("Unable to SSH to remote host: {e}"));
            Err(255)
        }
        Err(RemoteError::Local(e)) => {
            ctx.warn(&format!("Unable to SSH to remote host: {e}"));
            Err(255)
        }
    }
}

fn exit_code(ended: Ended, interrupted: i32) -> i32 {
    match ended {
        Ended::Exit(c) => c,
        Ended::Interrupted => interrupted,
    }
}

/// The machines that report a state for global unit `name`, optionally only those whose ID starts with `pick`.
fn global_machines(ctx: &mut Ctx<'_>, name: &str, pick: &str) -> Result<Vec<String>, String> {
    let filter = crate::client::StateFilter { machine_id: None, unit_name: Some(name.to_string()) };
    let states = ctx.client.unit_states(&filter).map_err(|e| format!("Error retrieving unit states: {e}"))?;
    let mut ids: Vec<String> = states.into_iter().map(|s| s.machine_id).filter(|m| m.starts_with(pick)).collect();
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return Err(if pick.is_empty() {
            format!("Unit {name} does not appear to be loaded.")
        } else {
            format!("Unit {name} does not appear to be loaded on machine {pick}.")
        });
    }
    Ok(ids)
}

/// The machines a remote command about unit `name` goes to: those that should run a global unit (or the one chosen
/// with `--machine`), or the machine of any other unit. `Err` is the message to print: `retrieving` prefixes an API
/// error, `inactive_means` completes the original's "does not appear to be ..." for a unit on no machine.
fn unit_machines(ctx: &mut Ctx<'_>, name: &str, retrieving: &str, inactive_means: &str) -> Result<Vec<String>, String> {
    let unit = match ctx.client.unit(name) {
        Err(e) => return Err(format!("{retrieving}: {e}")),
        Ok(None) => return Err(format!("Unit {name} does not exist.")),
        Ok(Some(unit)) => unit,
    };
    if unit_is_global(&unit) {
        let pick = ctx.flags.str("machine").to_string();
        return global_machines(ctx, name, &pick);
    }
    if unit.current_state == "inactive" {
        return Err(format!("Unit {name} does not appear to be {inactive_means}."));
    }
    Ok(vec![unit.machine_id])
}

/// The machines `status` asks about `name` (text and JSON alike); `None` once the reason is shown.
fn status_machines(ctx: &mut Ctx<'_>, name: &str) -> Option<Vec<String>> {
    unit_machines(ctx, name, "Error retrieving unit", "loaded").map_err(|msg| ctx.warn(&msg)).ok()
}

/// `fleetctl status UNIT...`.
pub fn status(ctx: &mut Ctx<'_>, remote: &dyn Remote, args: &[String]) -> i32 {
    let Some(format) = super::json::format(ctx) else { return 1 };
    if format == super::json::Format::Json {
        return status_json(ctx, remote, args);
    }
    let mut first = true;
    for arg in args {
        let name = unitf::mangle(arg);
        let Some(machines) = status_machines(ctx, &name) else { return 1 };
        for m in machines {
            if !first {
                ctx.say("");
            }
            first = false;
            let argv = ["systemctl", "status", "-l", &name].map(String::from);
            match run_command(ctx, remote, &m, &argv) {
                Ok(Ended::Exit(0)) => {}
                Ok(ended) => return exit_code(ended, 130),
                Err(code) => return code,
            }
        }
    }
    0
}

/// `fleetctl status --output=json UNIT...`: `systemctl show` of each unit on each of its machines, as one document
/// printed once every machine answered (nothing is printed when one fails; its exit code is returned).
fn status_json(ctx: &mut Ctx<'_>, remote: &dyn Remote, args: &[String]) -> i32 {
    let mut statuses = Vec::new();
    for arg in args {
        let name = unitf::mangle(arg);
        let Some(machines) = status_machines(ctx, &name) else { return 1 };
        for m in machines {
            let argv = ["systemctl", "show", "--no-pager", &name].map(String::from);
            let mut stdout = Vec::new();
            match run_on_machine(ctx, remote, &m, &argv, Some(&mut stdout)) {
                Ok(Ended::Exit(0)) => {}
                Ok(ended) => return exit_code(ended, 130),
                Err(code) => return code,
            }
            let properties = super::json::parse_properties(&String::from_utf8_lossy(&stdout));
            statuses.push(super::json::StatusDoc { name: name.clone(), machine_id: m, properties });
        }
    }
    super::json::print(ctx, &super::json::StatusList { statuses });
    0
}

/// `fleetctl journal UNIT`.
pub fn journal(ctx: &mut Ctx<'_>, remote: &dyn Remote, args: &[String]) -> i32 {
    if args.len() != 1 {
        ctx.warn("One unit file must be provided.");
        return 1;
    }
    let name = unitf::mangle(&args[0]);
    let follow = ctx.flags.bool("follow") || ctx.flags.bool("f");
    let machines = match unit_machines(ctx, &name, &format!("Error retrieving unit {name}"), "running") {
        Ok(ids) if follow && ids.len() > 1 => {
            ctx.warn(&format!(
                "Unit {name} is global and runs on {} machines: choose one with --machine to follow its journal.",
                ids.len()
            ));
            return 1;
        }
        Ok(ids) => ids,
        Err(msg) => {
            ctx.warn(&msg);
            return 1;
        }
    };
    let mut argv: Vec<String> = vec![
        "journalctl".into(),
        "--unit".into(),
        name.clone(),
        "--no-pager".into(),
        "-n".into(),
        ctx.flags.int("lines").to_string(),
        "--output".into(),
        ctx.flags.str("output").to_string(),
    ];
    if ctx.flags.bool("sudo") {
        argv.insert(0, "sudo".into());
    }
    if follow {
        argv.push("-f".into());
    }
    for m in machines {
        match run_command(ctx, remote, &m, &argv) {
            Ok(Ended::Exit(0)) => {}
            // Following ends when the user interrupts it, as journalctl -f itself does: successfully.
            Ok(ended) => return exit_code(ended, 0),
            Err(code) => return code,
        }
    }
    0
}

/// The address of the machine running non-global unit `name` (`findAddressInRunningUnits`); `Ok(None)` when the
/// unit has no machine with an address.
fn unit_address(ctx: &mut Ctx<'_>, name: &str) -> Result<Option<String>, String> {
    let name = unitf::mangle(name);
    let u = match ctx.client.unit(&name) {
        Err(e) => return Err(e.to_string()),
        Ok(None) => return Err("unit does not exist".into()),
        Ok(Some(u)) => u,
    };
    if unit_is_global(&u) {
        return Err("global units unsupported".into());
    }
    Ok(ctx.machines().iter().find(|m| m.id == u.machine_id && !u.machine_id.is_empty()).map(|m| m.primary_ip.clone()))
}

/// `fleetctl ssh [--machine=ID|--unit=NAME] [{MACHINE|UNIT}] [--] [COMMAND...]`.
pub fn ssh(ctx: &mut Ctx<'_>, remote: &dyn Remote, args: &[String]) -> i32 {
    let (machine, unit) = (ctx.flags.str("machine").to_string(), ctx.flags.str("unit").to_string());
    if !machine.is_empty() && !unit.is_empty() {
        ctx.warn("Both machine and unit flags provided, please specify only one.");
        return 1;
    }
    let mut rest = args;
    let addr: Result<Option<String>, String> = if !machine.is_empty() {
        machine_by_prefix(ctx.machines(), &machine).map(|m| Some(m.primary_ip.clone()))
    } else if !unit.is_empty() {
        unit_address(ctx, &unit)
    } else if let Some((lookup, tail)) = args.split_first() {
        rest = tail;
        let by_machine = machine_by_prefix(ctx.machines(), lookup).map(|m| m.primary_ip.clone()).ok();
        let by_unit = unit_address(ctx, lookup).ok().flatten();
        match (by_machine, by_unit) {
            (Some(_), Some(_)) => Err(format!(
                "ambiguous argument, both machine and unit found for `{lookup}`.\nPlease use flag `-m` or `-u` to refine the search"
            )),
            (Some(a), None) | (None, Some(a)) => Ok(Some(a)),
            (None, None) => Err("could not find matching unit or machine".into()),
        }
    } else {
        Err("one machine or unit must be provided".into())
    };
    let addr = match addr {
        Err(e) => {
            ctx.warn(&format!("Unable to proceed: {e}"));
            return 1;
        }
        Ok(a) => a.unwrap_or_default(),
    };
    if addr.is_empty() {
        ctx.warn("Could not determine address of machine.");
        return 1;
    }
    let addr = with_port(&addr, ctx.flags.int("ssh-port"));
    let command = (!rest.is_empty()).then(|| rest.join(" "));
    match remote.run_remote(ctx.flags, &addr, command.as_deref(), Input::Stdin, ctx.out, ctx.err) {
        Ok(ended) => exit_code(ended, 130),
        Err(RemoteError::Connect(e)) => {
            ctx.warn(&format!("Failed building SSH client: {e}"));
            1
        }
        Err(RemoteError::Run(e)) if command.is_none() => {
            ctx.warn(&format!("Failed opening shell over SSH: {e}"));
            1
        }
        Err(RemoteError::Run(e)) => {
            ctx.warn(&format!("Failed running command over SSH: {e}"));
            255
        }
        Err(RemoteError::Local(e)) => {
            ctx.warn(&format!("Failed running command over SSH: {e}"));
            255
        }
    }
}

/// `fleetctl fd-forward SOCKET`: copies stdin to the unix socket and the socket to stdout until either side
/// closes (spec §9.7). Needs no cluster.
pub fn fd_forward(args: &[String], err: &mut dyn Write) -> i32 {
    if args.len() != 1 {
        let _ = writeln!(err, "Provide a single argument");
        return 1;
    }
    let path = &args[0];
    if path.is_empty() {
        let _ = writeln!(err, "Unable to use {path:?} as unix address: missing address");
        return 1;
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(err, "Encountered error during copy: {e}");
            return 1;
        }
    };
    let code = rt.block_on(async {
        let sock = match tokio::net::UnixStream::connect(path).await {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(
                    err,
                    "Failed dialing remote address: dial unix {path}: connect: {}",
                    fleet_core::go::io_error(&e)
                );
                // The original exits 0 here (quirk kept).
                return 0;
            }
        };
        let (mut rd, mut wr) = sock.into_split();
        let up = async {
            let r = tokio::io::copy(&mut tokio::io::stdin(), &mut wr).await;
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut wr).await;
            // stdin ended: the socket's write side is shut; its answer still flows until it closes.
            match r {
                Ok(_) => std::future::pending().await,
                Err(e) => Err(e),
            }
        };
        let down = async {
            // The std stdout handle is locked by fleetctl's main thread: use a duplicate of the descriptor.
            let mut stdout = ssh::dup_async(1)?;
            let r = tokio::io::copy(&mut rd, &mut stdout).await;
            let _ = tokio::io::AsyncWriteExt::flush(&mut stdout).await;
            r
        };
        // The socket closing (or a copy error) ends the forward.
        let result: std::io::Result<u64> = tokio::select! {
            r = up => r,
            r = down => r,
        };
        match result {
            Ok(_) => 0,
            Err(e) => {
                let _ = writeln!(err, "Encountered error during copy: {e}");
                1
            }
        }
    });
    rt.shutdown_background();
    code
}

#[cfg(test)]
pub(crate) mod fake {
    //! A [`Remote`] that records what would run where and answers with canned output.

    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    pub struct FakeRemote {
        pub local_id: Option<String>,
        /// `(where, command)`: where = `local` or the address.
        pub calls: Mutex<Vec<(String, String)>>,
        /// Exit status of every command.
        pub status: i32,
        /// Fail connecting with this error.
        pub connect_error: Option<SshError>,
        /// What every command prints on stdout; `None`: `ran on <where>: <command>`.
        pub stdout: Option<String>,
    }

    impl Remote for FakeRemote {
        fn local_machine_id(&self) -> Option<String> {
            self.local_id.clone()
        }

        fn run_local(&self, argv: &[String]) -> Result<Ended, RemoteError> {
            self.calls.lock().unwrap().push(("local".into(), argv.join(" ")));
            Ok(Ended::Exit(self.status))
        }

        fn capture_local(&self, argv: &[String]) -> Result<(Ended, Vec<u8>), RemoteError> {
            self.calls.lock().unwrap().push(("local".into(), argv.join(" ")));
            let stdout = self.stdout.clone().unwrap_or_else(|| format!("ran on local: {}\n", argv.join(" ")));
            Ok((Ended::Exit(self.status), stdout.into_bytes()))
        }

        fn run_remote(
            &self,
            _flags: &Flags,
            addr: &str,
            command: Option<&str>,
            _input: Input,
            out: &mut dyn Write,
            _err: &mut dyn Write,
        ) -> Result<Ended, RemoteError> {
            if let Some(e) = &self.connect_error {
                return Err(RemoteError::Connect(e.clone()));
            }
            let cmd = command.unwrap_or("<shell>").to_string();
            match &self.stdout {
                Some(text) => {
                    let _ = out.write_all(text.as_bytes());
                }
                None => {
                    let _ = writeln!(out, "ran on {addr}: {cmd}");
                }
            }
            self.calls.lock().unwrap().push((addr.into(), cmd));
            Ok(Ended::Exit(self.status))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fd_forward_checks_its_argument() {
        let mut err = Vec::new();
        assert_eq!(super::fd_forward(&[], &mut err), 1);
        assert_eq!(String::from_utf8(err).unwrap(), "Provide a single argument\n");
        let mut err = Vec::new();
        assert_eq!(super::fd_forward(&["/nonexistent.sock".into()], &mut err), 0);
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "Failed dialing remote address: dial unix /nonexistent.sock: connect: no such file or directory\n"
        );
    }
}

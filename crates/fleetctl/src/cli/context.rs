//! What a command works with while it runs ([`Ctx`]): the client, stdout and stderr, the parsed flags, its poll
//! cadence ([`Timing`]), and what it learned of the cluster once (machines, registry templates); printing through
//! it erases the progress line first. [`log_line`] is the original's log format. Every command takes a `Ctx`, so
//! this file uses no command (the poll cadence lives here rather than in `wait` for that reason).

use std::io::Write;
use std::time::Duration;

use super::flags::Flags;
use super::progress;
use crate::client::Client;
use fleet_core::schema::Machine;

/// Poll cadence. One attempt is `polls_per_attempt` polls `interval` apart (the first after one interval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub interval: Duration,
    pub polls_per_attempt: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { interval: Duration::from_millis(250), polls_per_attempt: 8 }
    }
}

impl Timing {
    /// No sleeping (tests).
    pub fn instant() -> Self {
        Timing { interval: Duration::ZERO, polls_per_attempt: 8 }
    }
}

/// What a command needs while it runs.
pub struct Ctx<'a> {
    pub client: &'a dyn Client,
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    pub flags: &'a Flags,
    /// Name of the running command (`submit`, `load`, ...).
    pub command: &'static str,
    pub timing: Timing,
    /// Units replaced by this command → the hash of their new content: waits on them are satisfied only by the
    /// new version (the old one may still report the wanted state).
    pub replaced: std::collections::BTreeMap<String, String>,
    /// Units this command created with its target state in the same request (`load`, `start`: one write instead
    /// of two, issue 35): triggered all the same, so they are waited for and reported as the ones it triggers.
    pub created_at_target: std::collections::BTreeSet<String>,
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
        timing: Timing,
    ) -> Self {
        Ctx {
            client,
            out,
            err,
            flags,
            command,
            timing,
            replaced: Default::default(),
            created_at_target: Default::default(),
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

/// The machine whose ID starts with `lookup` (`findAddressInMachineList`): what a MACHINE argument names (`ssh`,
/// `cordon`, ...).
pub fn machine_by_prefix<'m>(machines: &'m [Machine], lookup: &str) -> Result<&'m Machine, String> {
    let mut found = machines.iter().filter(|m| m.id.starts_with(lookup));
    match (found.next(), found.next()) {
        (Some(m), None) => Ok(m),
        (Some(_), Some(_)) => Err("found more than one machine".into()),
        (None, _) => Err("machine does not exist".into()),
    }
}

//! Plain data the `systemd` module hands out: job results, unit states, unit-file changes, change notifications.
//! No D-Bus types here, so the agent can use and fake them freely.

use std::fmt;

/// Which systemd instance to talk to (`systemd_user` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bus {
    /// PID 1 over the system bus (`/run/dbus/system_bus_socket` unless `DBUS_SYSTEM_BUS_ADDRESS` says otherwise).
    #[default]
    System,
    /// The user's `systemd --user` over the session bus.
    User,
}

impl Bus {
    pub fn as_str(self) -> &'static str {
        match self {
            Bus::System => "system",
            Bus::User => "user",
        }
    }
}

/// The result a systemd job finished with (the `result` argument of `JobRemoved`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobResult {
    Done,
    Canceled,
    Timeout,
    Failed,
    Dependency,
    Skipped,
    /// The job disappeared without its `JobRemoved` signal reaching us (e.g. a dropped signal); the caller should
    /// look at the unit's state instead.
    Unknown,
    /// A result string this code does not know.
    Other(String),
}

/// How a stop job ended: its result, and the `ActiveState` the unit's signals reported by the time the job was
/// removed (`left`; systemd sends a unit's changes before its job's removal). `None` when none was reported: the
/// unit did not change (it was stopped, or failed, already), its job's signal was lost, or the unit manager sends
/// no signals. Only `Some("inactive")` says the stop left the unit neither running nor failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    pub result: JobResult,
    pub left: Option<String>,
}

impl JobResult {
    pub fn parse(result: &str) -> JobResult {
        match result {
            "done" => JobResult::Done,
            "canceled" => JobResult::Canceled,
            "timeout" => JobResult::Timeout,
            "failed" => JobResult::Failed,
            "dependency" => JobResult::Dependency,
            "skipped" => JobResult::Skipped,
            other => JobResult::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            JobResult::Done => "done",
            JobResult::Canceled => "canceled",
            JobResult::Timeout => "timeout",
            JobResult::Failed => "failed",
            JobResult::Dependency => "dependency",
            JobResult::Skipped => "skipped",
            JobResult::Unknown => "unknown",
            JobResult::Other(s) => s,
        }
    }

    /// True for `done`.
    pub fn is_done(&self) -> bool {
        *self == JobResult::Done
    }
}

impl fmt::Display for JobResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// systemd's view of one unit: load, active and sub state (`ListUnitsByNames`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnitStatus {
    pub name: String,
    pub load_state: String,
    pub active_state: String,
    pub sub_state: String,
}

/// What systemd holds of one unit, as far as a daemon-reload is concerned (whether it holds the unit at all, then
/// `LoadState` and `NeedDaemonReload`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Definition {
    /// systemd holds nothing of the unit (never loaded, or garbage-collected): its next load reads the file as it
    /// is then.
    NotLoaded,
    /// Loaded from its file; `stale` when the file changed (or vanished) on disk since (`NeedDaemonReload`).
    Loaded { stale: bool },
    /// No file of that name is visible to systemd (`not-found`): nothing is held that a reload would drop.
    NotFound,
    /// Any other load state (`error`, `bad-setting`, `masked`, ...).
    Other(String),
}

impl Definition {
    /// From `LoadState` and `NeedDaemonReload`.
    pub fn from_properties(load_state: &str, need_daemon_reload: bool) -> Definition {
        match load_state {
            "loaded" => Definition::Loaded { stale: need_daemon_reload },
            "not-found" => Definition::NotFound,
            other => Definition::Other(other.to_string()),
        }
    }

    /// Whether a daemon-reload would change nothing for this unit: systemd reads its file as it is now when
    /// `has_file`, and holds nothing of it when the file is gone. systemd reads a unit file when it first loads
    /// the unit (finding a new link without a reload: it rebuilds its name cache when a unit directory changed)
    /// and forgets a stopped unit nothing references, so a new unit, a replaced one that systemd dropped after its
    /// stop, and an unloaded one match; one still held in an older version, or held as not found although its
    /// file is there, does not.
    pub fn matches_disk(&self, has_file: bool) -> bool {
        match self {
            Definition::NotLoaded => true,
            Definition::Loaded { stale } => has_file && !stale,
            Definition::NotFound => !has_file,
            Definition::Other(_) => false,
        }
    }
}

/// `name` as a shell pattern that matches only itself, for systemd's `ListUnitsByPatterns`, which matches with
/// `fnmatch(…, FNM_NOESCAPE)`: a backslash (systemd-escape's `\x2d`) is itself there, and a wildcard character
/// (never in a valid unit name) is put in brackets.
pub fn literal_pattern(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '*' | '?' | '[' => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

/// How a connection reaches systemd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// PID 1's private socket, directly (as root).
    PrivateSocket,
    /// The system bus, through dbus-daemon.
    SystemBus,
    /// The session bus (a user's systemd).
    SessionBus,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::PrivateSocket => "private socket",
            Transport::SystemBus => "system bus",
            Transport::SessionBus => "session bus",
        }
    }
}

/// One symlink change reported by LinkUnitFiles / EnableUnitFiles / DisableUnitFiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// `symlink` or `unlink`.
    pub kind: String,
    pub file: String,
    pub destination: String,
}

/// A change notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitChange {
    /// Some property of this unit changed; `reported` holds the newest values its signals carried (empty when one
    /// of them carried none of what the publisher follows).
    Unit { name: String, reported: Reported },
    /// Changes may have been missed (the connection to systemd was lost and made again): read every unit again.
    Missed,
}

/// Whether a unit is active and since when, as a health check's result is judged by it (`agent::health`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Active since this time: systemd's `ActiveEnterTimestampMonotonic`, µs of `CLOCK_MONOTONIC` (the clock of
    /// [`monotonic_us`]). A restart moves it, even one no state change told of.
    Since(u64),
    /// Not active (`activating`, `deactivating`, `inactive`, `failed`, ...).
    NotActive,
    /// The unit manager does not tell (the scale simulation's, tests' fakes).
    Untold,
}

/// Now in µs of `CLOCK_MONOTONIC`, the clock systemd stamps `ActiveEnterTimestampMonotonic` with (one clock per
/// kernel, so fleetd and PID 1 read the same one, also inside a container).
pub fn monotonic_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0).saturating_mul(1_000_000) + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000
}

/// What one `PropertiesChanged` signal of a unit carried of the values the state publisher follows: the Unit
/// interface's `ActiveState` and `SubState`, or the Service interface's `NRestarts`. systemd sends both interfaces'
/// signals at every change of a service. Empty when the signal carried none of them (another interface). Decoded from
/// the signal's body, without building any other of its values, in `events.rs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reported {
    /// `ActiveState` and `SubState`.
    pub active: Option<(String, String)>,
    /// `NRestarts`.
    pub restarts: Option<u32>,
    /// `ActiveEnterTimestampMonotonic` (µs), carried with `ActiveState` and `SubState`: when the unit last entered
    /// `active`. A restart moves it even when the signals of the states between were merged away.
    pub entered: Option<u64>,
}

/// The unit name encoded in a systemd unit object path (`/org/freedesktop/systemd1/unit/hello_2eservice` →
/// `hello.service`). None for paths outside the unit namespace or with a broken escape.
pub fn unit_name_from_path(path: &str) -> Option<String> {
    let label = path.strip_prefix("/org/freedesktop/systemd1/unit/")?;
    if label.is_empty() || label.contains('/') {
        return None;
    }
    if label == "_" {
        return Some(String::new());
    }
    let bytes = label.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'_' {
            let hex = label.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_paths_decode_to_names() {
        assert_eq!(
            unit_name_from_path("/org/freedesktop/systemd1/unit/hello_2eservice").as_deref(),
            Some("hello.service")
        );
        assert_eq!(
            unit_name_from_path("/org/freedesktop/systemd1/unit/hello_401_2eservice").as_deref(),
            Some("hello@1.service")
        );
        assert_eq!(
            unit_name_from_path("/org/freedesktop/systemd1/unit/a_2db_5fc_2emount").as_deref(),
            Some("a-b_c.mount")
        );
        assert_eq!(unit_name_from_path("/org/freedesktop/systemd1/unit/bad_2"), None);
        assert_eq!(unit_name_from_path("/org/freedesktop/systemd1/job/12"), None);
        assert_eq!(unit_name_from_path("/org/freedesktop/systemd1/unit/a/b"), None);
    }

    #[test]
    fn a_literal_pattern_matches_only_its_name_without_escapes() {
        assert_eq!(literal_pattern("a@1.service"), "a@1.service");
        assert_eq!(literal_pattern(r"a\x2db.service"), r"a\x2db.service", "a backslash is itself under FNM_NOESCAPE");
        assert_eq!(literal_pattern("a*b?c[d].service"), "a[*]b[?]c[[]d].service");
    }

    #[test]
    fn job_results_round_trip() {
        for r in ["done", "canceled", "timeout", "failed", "dependency", "skipped", "invalid"] {
            assert_eq!(JobResult::parse(r).as_str(), r);
        }
        assert!(JobResult::parse("done").is_done());
        assert!(!JobResult::parse("failed").is_done());
    }
}

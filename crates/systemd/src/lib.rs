//! The D-Bus client for `org.freedesktop.systemd1`: the only module of fleet that knows D-Bus.
//!
//! | file | owns |
//! |---|---|
//! | `proxies.rs` | hand-written zbus proxies (Manager, Unit, Service, Job) |
//! | `client.rs` | [`Systemd`]: connect (PID 1's private socket as root, else the system bus; or the user bus) and connect again when the connection is lost, start/stop waiting for the job result, wait for a unit to be inactive, link/enable/disable runtime, unlink a runtime link on disk, reset-failed, daemon-reload, states, change notifications |
//! | `events.rs` | one task per connection draining systemd's signals into the waits (a job's result to its waiter, a unit's change to its watchers, the newest `ActiveState` of a unit with a job under way, so a stop tells the state it left) and a per-unit coalescing [`UnitChanges`] feed; a `PropertiesChanged` body decoded into the [`Reported`] values only |
//! | `private.rs` | PID 1's private socket: the handshake, and systemd's well-known sender taken out of each incoming message before zbus reads it |
//! | `types.rs` | plain data handed out: [`JobResult`], [`UnitStatus`], [`FileChange`], [`UnitChange`], [`Bus`], [`Transport`] |
//! | `error.rs` | [`SystemdError`]: call, target, D-Bus error name and message |
//!
//! [`SystemdOps`] is the seam the agent is written against: [`Systemd`] implements it, tests fake it, and the scale
//! simulation runs agents on `agent::sim::SimSystemd` instead.

mod client;
mod error;
mod events;
mod private;
mod proxies;
mod types;

use std::future::Future;
use std::path::Path;

pub use client::Systemd;
pub use error::{NO_SUCH_UNIT, Result, SystemdError};
pub use events::ChangeFeed;
pub use events::UnitChanges;
pub use types::{
    Activation, Bus, Definition, FileChange, JobResult, Reported, Stopped, Transport, UnitChange, UnitStatus,
    monotonic_us, unit_name_from_path,
};

/// The operations the agent performs on systemd. Start and stop return once the job has finished.
pub trait SystemdOps: Send + Sync {
    fn start(&self, name: &str) -> impl Future<Output = Result<JobResult>> + Send;
    /// Stops the unit; the job's result with the state it left the unit in, where told ([`Stopped`]).
    fn stop(&self, name: &str) -> impl Future<Output = Result<Stopped>> + Send;
    fn reload(&self, name: &str) -> impl Future<Output = Result<JobResult>> + Send;
    fn wait_inactive(&self, name: &str) -> impl Future<Output = Result<String>> + Send;
    fn link_runtime(&self, path: &Path) -> impl Future<Output = Result<Vec<FileChange>>> + Send;
    fn enable_runtime(&self, path: &Path) -> impl Future<Output = Result<Vec<FileChange>>> + Send;
    fn disable_runtime(&self, name: &str) -> impl Future<Output = Result<Vec<FileChange>>> + Send;
    /// Removes the runtime link `name` → `target` of a linked, not enabled unit without asking systemd; false
    /// (nothing changed) when there is no such link.
    fn unlink_runtime(&self, name: &str, target: &Path) -> impl Future<Output = Result<bool>> + Send;
    fn reset_failed(&self, name: &str) -> impl Future<Output = Result<()>> + Send;
    fn daemon_reload(&self) -> impl Future<Output = Result<()>> + Send;
    fn states(&self, names: &[String]) -> impl Future<Output = Result<Vec<UnitStatus>>> + Send;
    /// What systemd holds of each named unit, in the order given, loading none (a unit it does not hold is
    /// [`Definition::NotLoaded`]).
    fn definitions(&self, names: &[String]) -> impl Future<Output = Result<Vec<(String, Definition)>>> + Send;
    /// Change notifications (a unit changed, or some were missed) for the state publisher.
    fn changes(&self) -> UnitChanges;
    /// The restart counter of each named service that is loaded (left out when it cannot be read).
    fn restart_counts(&self, names: &[String]) -> impl Future<Output = Vec<(String, u32)>> + Send;
    /// Whether the unit is active and since when; [`Activation::Untold`] from a unit manager without activation
    /// times.
    fn activation(&self, _name: &str) -> impl Future<Output = Result<Activation>> + Send {
        async { Ok(Activation::Untold) }
    }
}

/// A shared unit manager is a unit manager (lets a test keep a handle on the one it hands to the agent).
impl<T: SystemdOps> SystemdOps for std::sync::Arc<T> {
    fn start(&self, name: &str) -> impl Future<Output = Result<JobResult>> + Send {
        self.as_ref().start(name)
    }
    fn stop(&self, name: &str) -> impl Future<Output = Result<Stopped>> + Send {
        self.as_ref().stop(name)
    }
    fn reload(&self, name: &str) -> impl Future<Output = Result<JobResult>> + Send {
        self.as_ref().reload(name)
    }
    fn wait_inactive(&self, name: &str) -> impl Future<Output = Result<String>> + Send {
        self.as_ref().wait_inactive(name)
    }
    fn link_runtime(&self, path: &Path) -> impl Future<Output = Result<Vec<FileChange>>> + Send {
        self.as_ref().link_runtime(path)
    }
    fn enable_runtime(&self, path: &Path) -> impl Future<Output = Result<Vec<FileChange>>> + Send {
        self.as_ref().enable_runtime(path)
    }
    fn disable_runtime(&self, name: &str) -> impl Future<Output = Result<Vec<FileChange>>> + Send {
        self.as_ref().disable_runtime(name)
    }
    fn unlink_runtime(&self, name: &str, target: &Path) -> impl Future<Output = Result<bool>> + Send {
        self.as_ref().unlink_runtime(name, target)
    }
    fn reset_failed(&self, name: &str) -> impl Future<Output = Result<()>> + Send {
        self.as_ref().reset_failed(name)
    }
    fn daemon_reload(&self) -> impl Future<Output = Result<()>> + Send {
        self.as_ref().daemon_reload()
    }
    fn states(&self, names: &[String]) -> impl Future<Output = Result<Vec<UnitStatus>>> + Send {
        self.as_ref().states(names)
    }
    fn definitions(&self, names: &[String]) -> impl Future<Output = Result<Vec<(String, Definition)>>> + Send {
        self.as_ref().definitions(names)
    }
    fn changes(&self) -> UnitChanges {
        self.as_ref().changes()
    }
    fn restart_counts(&self, names: &[String]) -> impl Future<Output = Vec<(String, u32)>> + Send {
        self.as_ref().restart_counts(names)
    }
    fn activation(&self, name: &str) -> impl Future<Output = Result<Activation>> + Send {
        self.as_ref().activation(name)
    }
}

impl SystemdOps for Systemd {
    fn start(&self, name: &str) -> impl Future<Output = Result<JobResult>> + Send {
        Systemd::start(self, name)
    }
    fn stop(&self, name: &str) -> impl Future<Output = Result<Stopped>> + Send {
        Systemd::stop(self, name)
    }
    fn reload(&self, name: &str) -> impl Future<Output = Result<JobResult>> + Send {
        Systemd::reload(self, name)
    }
    fn wait_inactive(&self, name: &str) -> impl Future<Output = Result<String>> + Send {
        Systemd::wait_inactive(self, name)
    }
    fn link_runtime(&self, path: &Path) -> impl Future<Output = Result<Vec<FileChange>>> + Send {
        Systemd::link_runtime(self, path)
    }
    fn enable_runtime(&self, path: &Path) -> impl Future<Output = Result<Vec<FileChange>>> + Send {
        Systemd::enable_runtime(self, path)
    }
    fn disable_runtime(&self, name: &str) -> impl Future<Output = Result<Vec<FileChange>>> + Send {
        Systemd::disable_runtime(self, name)
    }
    fn unlink_runtime(&self, name: &str, target: &Path) -> impl Future<Output = Result<bool>> + Send {
        Systemd::unlink_runtime(self, name, target)
    }
    fn reset_failed(&self, name: &str) -> impl Future<Output = Result<()>> + Send {
        Systemd::reset_failed(self, name)
    }
    fn daemon_reload(&self) -> impl Future<Output = Result<()>> + Send {
        Systemd::daemon_reload(self)
    }
    fn states(&self, names: &[String]) -> impl Future<Output = Result<Vec<UnitStatus>>> + Send {
        Systemd::states(self, names)
    }
    fn definitions(&self, names: &[String]) -> impl Future<Output = Result<Vec<(String, Definition)>>> + Send {
        Systemd::definitions(self, names)
    }
    fn changes(&self) -> UnitChanges {
        Systemd::changes(self)
    }
    fn restart_counts(&self, names: &[String]) -> impl Future<Output = Vec<(String, u32)>> + Send {
        Systemd::restart_counts(self, names)
    }
    fn activation(&self, name: &str) -> impl Future<Output = Result<Activation>> + Send {
        Systemd::activation(self, name)
    }
}

//! Hand-written zbus proxies for the parts of systemd's D-Bus API that fleet uses. Nothing outside the `systemd`
//! module sees these types; `Systemd` wraps them in plain-data operations.

use zbus::{OwnedObjectPath, Result, proxy};

/// One entry of `ListUnitsByNames`, `ListUnitsByPatterns` and `ListUnits`: name, description, load state, active state, sub state, following unit, unit
/// object path, job id, job type, job object path.
pub(crate) type ListedUnit =
    (String, String, String, String, String, String, OwnedObjectPath, u32, String, OwnedObjectPath);

/// One change reported by `LinkUnitFiles`, `EnableUnitFiles` and `DisableUnitFiles`: type (`symlink`, `unlink`),
/// file name, destination.
pub(crate) type FileChangeTuple = (String, String, String);

#[proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub(crate) trait Manager {
    fn start_unit(&self, name: &str, mode: &str) -> Result<OwnedObjectPath>;

    fn stop_unit(&self, name: &str, mode: &str) -> Result<OwnedObjectPath>;

    fn reload_unit(&self, name: &str, mode: &str) -> Result<OwnedObjectPath>;

    fn link_unit_files(&self, files: &[&str], runtime: bool, force: bool) -> Result<Vec<FileChangeTuple>>;

    fn enable_unit_files(&self, files: &[&str], runtime: bool, force: bool) -> Result<(bool, Vec<FileChangeTuple>)>;

    fn disable_unit_files(&self, files: &[&str], runtime: bool) -> Result<Vec<FileChangeTuple>>;

    fn reload(&self) -> Result<()>;

    fn list_units_by_names(&self, names: &[&str]) -> Result<Vec<ListedUnit>>;

    fn list_units_by_patterns(&self, states: &[&str], patterns: &[&str]) -> Result<Vec<ListedUnit>>;

    fn list_units(&self) -> Result<Vec<ListedUnit>>;

    fn get_unit(&self, name: &str) -> Result<OwnedObjectPath>;

    #[zbus(name = "GetUnitByPID")]
    fn get_unit_by_pid(&self, pid: u32) -> Result<OwnedObjectPath>;

    fn load_unit(&self, name: &str) -> Result<OwnedObjectPath>;

    fn reset_failed_unit(&self, name: &str) -> Result<()>;

    fn subscribe(&self) -> Result<()>;

    #[zbus(signal)]
    fn job_removed(&self, id: u32, job: OwnedObjectPath, unit: String, result: String) -> Result<()>;

    #[zbus(signal)]
    fn unit_new(&self, id: String, unit: OwnedObjectPath) -> Result<()>;

    #[zbus(signal)]
    fn unit_removed(&self, id: String, unit: OwnedObjectPath) -> Result<()>;

    #[zbus(signal)]
    fn reloading(&self, active: bool) -> Result<()>;
}

#[proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1",
    assume_defaults = false
)]
pub(crate) trait Unit {
    #[zbus(property(emits_changed_signal = "false"))]
    fn load_state(&self) -> Result<String>;

    #[zbus(property(emits_changed_signal = "false"))]
    fn active_state(&self) -> Result<String>;

    #[zbus(property(emits_changed_signal = "false"))]
    fn sub_state(&self) -> Result<String>;

    #[zbus(property(emits_changed_signal = "false"))]
    fn need_daemon_reload(&self) -> Result<bool>;

    /// When the unit last entered `active`, in µs of `CLOCK_MONOTONIC` (0 if never).
    #[zbus(property(emits_changed_signal = "false"), name = "ActiveEnterTimestampMonotonic")]
    fn active_enter_timestamp_monotonic(&self) -> Result<u64>;
    /// The unit's pending job: (id, object path); id 0 and path `/` when none.
    #[zbus(property(emits_changed_signal = "false"))]
    fn job(&self) -> Result<(u32, OwnedObjectPath)>;
}

#[proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1",
    assume_defaults = false
)]
pub(crate) trait Service {
    #[zbus(property(emits_changed_signal = "false"))]
    fn result(&self) -> Result<String>;

    #[zbus(property(emits_changed_signal = "false"), name = "NRestarts")]
    fn n_restarts(&self) -> Result<u32>;
}

#[proxy(
    interface = "org.freedesktop.systemd1.Job",
    default_service = "org.freedesktop.systemd1",
    assume_defaults = false
)]
pub(crate) trait Job {
    #[zbus(property(emits_changed_signal = "false"))]
    fn state(&self) -> Result<String>;

    #[zbus(property(emits_changed_signal = "false"))]
    fn job_type(&self) -> Result<String>;
}

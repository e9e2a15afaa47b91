//! `Systemd`: the connection to one systemd instance and the high-level operations the agent needs. Start and stop
//! wait for their job's `JobRemoved` signal (subscribed before the call is issued, so a fast job cannot slip by).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};
use zbus::proxy::CacheProperties;
use zbus::{Connection, OwnedObjectPath};

use super::error::{Result, SystemdError};
use super::events::{ChangeFeed, Events, JobWait, UnitChanges};
use super::proxies::{FileChangeTuple, JobProxy, ManagerProxy, ServiceProxy, UnitProxy};
use super::types::{
    Activation, Bus, Definition, FileChange, JobResult, Stopped, Transport, UnitStatus, literal_pattern,
};

const SYSTEMD: &str = "org.freedesktop.systemd1";

/// How often a job wait checks that its job still exists (a safety net against a dropped `JobRemoved` signal; the
/// signal is what normally ends the wait).
const JOB_CHECK_PERIOD: Duration = Duration::from_secs(2);
/// How often `wait_inactive` re-reads the active state besides reacting to `PropertiesChanged`.
const INACTIVE_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// Handle on one systemd instance. Cheap to clone. When its connection is lost (`systemctl daemon-reexec` closes
/// PID 1's private socket; dbus-daemon can restart) it connects again by itself: calls made meanwhile fail, job
/// waits of the old connection end with [`SystemdError::StreamEnded`], and change subscribers are told
/// [`UnitChange::Missed`](super::UnitChange::Missed) once the new connection is up.
#[derive(Clone)]
pub struct Systemd {
    shared: Arc<Shared>,
}

/// What every clone shares; the last one dropped stops the keeper and ends the change feed.
struct Shared {
    bus: Bus,
    link: RwLock<Arc<Link>>,
    feed: Arc<ChangeFeed>,
    /// Where `LinkUnitFiles(runtime=true)` puts its links, when known (see [`Systemd::unlink_runtime`]).
    runtime_dir: Option<PathBuf>,
    /// Slots for operations awaiting systemd's reply ([`CALL_SLOTS`]).
    calls: Semaphore,
    /// The task that connects again when the connection is lost.
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            keeper.abort();
        }
        self.feed.close();
    }
}

/// One connection: its Manager proxy and its signal task.
struct Link {
    conn: Connection,
    manager: ManagerProxy<'static>,
    events: Events,
    transport: Transport,
}

/// Operations awaiting a reply on one connection at once, each with at most two calls in flight. dbus-daemon
/// refuses a connection's 129th pending call (`max_replies_per_connection`, 128 by default: `LimitsExceeded`),
/// and the agent runs hundreds of operations concurrently (a start of 333 units hit it).
pub const CALL_SLOTS: usize = 48;

/// Up to this many units, [`Systemd::definitions`] asks systemd for the units it holds by their names as patterns
/// (each loaded unit is matched against every pattern); for more, it lists every unit systemd holds.
const LIST_BY_PATTERNS_UP_TO: usize = 32;

/// How long connecting through PID 1's private socket may take before the system bus is used instead.
const PRIVATE_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The first and the longest pause between attempts to connect again.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_LONGEST: Duration = Duration::from_secs(5);

impl Systemd {
    /// Connect to systemd's system instance (as root through PID 1's private socket, else over the system bus) or,
    /// for `Bus::User`, to the user's instance over the session bus, and follow its signals.
    pub async fn connect(bus: Bus) -> Result<Systemd> {
        let feed = Arc::new(ChangeFeed::default());
        let link = Link::open(bus, Arc::clone(&feed)).await?;
        info!(transport = link.transport.as_str(), "connected to systemd");
        let runtime_dir = match bus {
            Bus::System => Some(PathBuf::from("/run/systemd/system")),
            Bus::User => std::env::var_os("XDG_RUNTIME_DIR").map(|d| PathBuf::from(d).join("systemd/user")),
        };
        let shared = Arc::new(Shared {
            bus,
            link: RwLock::new(Arc::new(link)),
            feed,
            runtime_dir,
            calls: Semaphore::new(CALL_SLOTS),
            keeper: Mutex::new(None),
        });
        let keeper = tokio::spawn(keep_connected(Arc::downgrade(&shared)));
        *shared.keeper.lock().unwrap_or_else(|e| e.into_inner()) = Some(keeper);
        Ok(Systemd { shared })
    }

    /// How the current connection reaches systemd.
    pub fn transport(&self) -> Transport {
        self.link().transport
    }

    /// The current connection.
    fn link(&self) -> Arc<Link> {
        self.shared.link()
    }

    /// `StartUnit(name, "replace")` and wait for the job's result.
    pub async fn start(&self, name: &str) -> Result<JobResult> {
        let link = self.link();
        let queuing = link.events.waits().queuing();
        let slot = self.call_slot().await;
        let job =
            link.manager.start_unit(name, "replace").await.map_err(|e| SystemdError::call("StartUnit", name, e))?;
        drop(slot);
        debug!(unit = %name, job = %job.as_str(), "start job queued");
        self.wait_job(&link, queuing.job(job.as_str()), &job, name).await
    }

    /// `ReloadUnit(name, "replace")` (= `systemctl reload`, runs `ExecReload=`) and wait for the job's result.
    pub async fn reload(&self, name: &str) -> Result<JobResult> {
        let link = self.link();
        let queuing = link.events.waits().queuing();
        let slot = self.call_slot().await;
        let job =
            link.manager.reload_unit(name, "replace").await.map_err(|e| SystemdError::call("ReloadUnit", name, e))?;
        drop(slot);
        debug!(unit = %name, job = %job.as_str(), "reload job queued");
        self.wait_job(&link, queuing.job(job.as_str()), &job, name).await
    }

    /// `StopUnit(name, "replace")` and wait for the job's result, with the state the unit's signals reported by
    /// the job's end ([`Stopped`]). A unit systemd does not know is an error for which `is_not_loaded()` is true.
    pub async fn stop(&self, name: &str) -> Result<Stopped> {
        let link = self.link();
        let track = link.events.waits().track_state(name);
        let queuing = link.events.waits().queuing();
        let slot = self.call_slot().await;
        let job = link.manager.stop_unit(name, "replace").await.map_err(|e| SystemdError::call("StopUnit", name, e))?;
        drop(slot);
        debug!(unit = %name, job = %job.as_str(), "stop job queued");
        let result = self.wait_job(&link, queuing.job(job.as_str()), &job, name).await?;
        // Without its signal, the signals before it may be lost too.
        let left = if result == JobResult::Unknown { None } else { track.reported() };
        Ok(Stopped { result, left })
    }

    /// Wait until the unit is `inactive` or `failed` (or not loaded at all); returns the active state seen.
    pub async fn wait_inactive(&self, name: &str) -> Result<String> {
        let link = self.link();
        let slot = self.call_slot().await;
        let path = match link.manager.get_unit(name).await {
            Ok(path) => path,
            Err(e) => {
                let e = SystemdError::call("GetUnit", name, e);
                return if e.is_not_loaded() { Ok("inactive".to_string()) } else { Err(e) };
            }
        };
        // Watch first, then read: a change between the two cannot be missed.
        let watch = link.events.waits().watch_unit(name);
        drop(slot);
        let unit = link.unit_proxy(path, name).await?;
        loop {
            let slot = self.call_slot().await;
            let state = unit.active_state().await;
            drop(slot);
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    let e = SystemdError::call("Get(ActiveState)", name, e);
                    return if e.is_gone() { Ok("inactive".to_string()) } else { Err(e) };
                }
            };
            if fleet_core::model::is_stopped(&state) {
                return Ok(state);
            }
            // The unit's next change, or a fresh read after a while in case a signal was lost.
            if let Ok(false) = tokio::time::timeout(INACTIVE_CHECK_PERIOD, watch.changed()).await {
                return Err(SystemdError::StreamEnded { what: format!("{name} to become inactive") });
            }
        }
    }

    /// Links the unit file at `path` as a runtime unit (shows as `linked-runtime`): what `LinkUnitFiles([path],
    /// runtime=true, force=true)` does — a symlink `<runtime dir>/<file name>` → `path`, replacing whatever was
    /// there — made on the file system when the runtime directory is known. Each `LinkUnitFiles` call costs PID 1
    /// a scan of the unit directories, which with hundreds of units linked made a start of 333 of them spend
    /// seconds of PID 1's time on links alone; systemd finds the new link when it next loads the unit. Without a
    /// known runtime directory, `LinkUnitFiles` does it. Reports the symlink made (none when it was there).
    pub async fn link_runtime(&self, path: &Path) -> Result<Vec<FileChange>> {
        let (Some(dir), Some(name)) = (&self.shared.runtime_dir, path.file_name()) else {
            return self.link_runtime_by_systemd(path).await;
        };
        let link = dir.join(name);
        let fail = |op: &'static str, e: std::io::Error| SystemdError::file(op, &link, &e);
        if std::fs::read_link(&link).is_ok_and(|points_to| points_to == path) {
            return Ok(Vec::new());
        }
        std::fs::create_dir_all(dir).map_err(|e| SystemdError::file("mkdir", dir, &e))?;
        // A new link under a temporary name, renamed over the old entry: systemd never sees the name missing.
        let temporary = dir.join(format!(".#{}.fleet-link", name.to_string_lossy()));
        let _ = std::fs::remove_file(&temporary);
        std::os::unix::fs::symlink(path, &temporary).map_err(|e| fail("symlink", e))?;
        if let Err(e) = std::fs::rename(&temporary, &link) {
            let _ = std::fs::remove_file(&temporary);
            return Err(fail("rename", e));
        }
        Ok(vec![FileChange {
            kind: "symlink".into(),
            file: link.display().to_string(),
            destination: path.display().to_string(),
        }])
    }

    /// `LinkUnitFiles([path], runtime=true, force=true)`.
    async fn link_runtime_by_systemd(&self, path: &Path) -> Result<Vec<FileChange>> {
        let link = self.link();
        let _slot = self.call_slot().await;
        let p = path.to_string_lossy();
        let changes = link
            .manager
            .link_unit_files(&[&p], true, true)
            .await
            .map_err(|e| SystemdError::call("LinkUnitFiles", p.clone(), e))?;
        Ok(file_changes(changes))
    }

    /// `EnableUnitFiles([path], runtime=true, force=true)`, for units with an `[Install]` section (spec §4.6).
    pub async fn enable_runtime(&self, path: &Path) -> Result<Vec<FileChange>> {
        let link = self.link();
        let _slot = self.call_slot().await;
        let p = path.to_string_lossy();
        let (_, changes) = link
            .manager
            .enable_unit_files(&[&p], true, true)
            .await
            .map_err(|e| SystemdError::call("EnableUnitFiles", p.clone(), e))?;
        Ok(file_changes(changes))
    }

    /// `DisableUnitFiles([name], runtime=true)`: removes the runtime link and any runtime enablement.
    pub async fn disable_runtime(&self, name: &str) -> Result<Vec<FileChange>> {
        let link = self.link();
        let _slot = self.call_slot().await;
        let changes = link
            .manager
            .disable_unit_files(&[name], true)
            .await
            .map_err(|e| SystemdError::call("DisableUnitFiles", name, e))?;
        Ok(file_changes(changes))
    }

    /// Removes the runtime link `name` → `target` that [`Systemd::link_runtime`] made, on the file system: what
    /// `DisableUnitFiles(runtime=true)` does for a linked unit that is not enabled, without its scan of every
    /// runtime link (with 333 units linked a call cost PID 1 several milliseconds, so unloading them all cost
    /// seconds). False, with nothing changed, when there is no such link (or the link directory is not known):
    /// then [`Systemd::disable_runtime`] is the way. systemd sees the change at the next daemon-reload.
    pub async fn unlink_runtime(&self, name: &str, target: &Path) -> Result<bool> {
        let Some(dir) = &self.shared.runtime_dir else { return Ok(false) };
        let link = dir.join(name);
        match std::fs::read_link(&link) {
            Ok(points_to) if points_to == target => {
                std::fs::remove_file(&link).map(|()| true).map_err(|e| SystemdError::file("unlink", &link, &e))
            }
            _ => Ok(false),
        }
    }

    /// `ResetFailedUnit(name)`; "not loaded" (the unit is already gone) counts as success (spec B8).
    pub async fn reset_failed(&self, name: &str) -> Result<()> {
        let link = self.link();
        let _slot = self.call_slot().await;
        match link.manager.reset_failed_unit(name).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let e = SystemdError::call("ResetFailedUnit", name, e);
                if e.is_not_loaded() {
                    debug!(unit = %name, "reset-failed: unit not loaded");
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// `Reload()` (= `systemctl daemon-reload`); returns once systemd has reloaded.
    pub async fn daemon_reload(&self) -> Result<()> {
        let link = self.link();
        let _slot = self.call_slot().await;
        link.manager.reload().await.map_err(|e| SystemdError::call("Reload", SYSTEMD, e))
    }

    /// Load/active/sub state of each named unit, in the order given (`ListUnitsByNames`; unknown units come back
    /// as `not-found`/`inactive`/`dead`).
    pub async fn states(&self, names: &[String]) -> Result<Vec<UnitStatus>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let link = self.link();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let _slot = self.call_slot().await;
        let listed = link
            .manager
            .list_units_by_names(&refs)
            .await
            .map_err(|e| SystemdError::call("ListUnitsByNames", names.join(","), e))?;
        Ok(listed
            .into_iter()
            .map(|(name, _, load_state, active_state, sub_state, ..)| UnitStatus {
                name,
                load_state,
                active_state,
                sub_state,
            })
            .collect())
    }

    /// Whether the unit is active and since when (`ActiveState`, `ActiveEnterTimestampMonotonic`): the health
    /// checks' proof that a check started after the unit's latest (re)start ([`Activation`]).
    pub async fn activation(&self, name: &str) -> Result<Activation> {
        let link = self.link();
        let _slot = self.call_slot().await;
        let path = link.manager.get_unit(name).await.map_err(|e| SystemdError::call("GetUnit", name, e))?;
        let unit = link.unit_proxy(path, name).await?;
        let active = unit.active_state().await.map_err(|e| SystemdError::call("Get(ActiveState)", name, e))?;
        if active != "active" {
            return Ok(Activation::NotActive);
        }
        let since = unit
            .active_enter_timestamp_monotonic()
            .await
            .map_err(|e| SystemdError::call("Get(ActiveEnterTimestampMonotonic)", name, e))?;
        Ok(Activation::Since(since))
    }

    /// Result of the unit's service (`Result` of org.freedesktop.systemd1.Service), e.g. `success`, `exit-code`.
    pub async fn service_result(&self, name: &str) -> Result<String> {
        let link = self.link();
        let _slot = self.call_slot().await;
        let path = link.manager.load_unit(name).await.map_err(|e| SystemdError::call("LoadUnit", name, e))?;
        let service = link.service_proxy(path, name).await?;
        service.result().await.map_err(|e| SystemdError::call("Get(Result)", name, e))
    }

    /// What systemd holds of each named unit ([`Definition`]), in the order given, without loading any: the units
    /// it holds now (`ListUnitsByPatterns` of the names, or `ListUnits` for more than `LIST_BY_PATTERNS_UP_TO`),
    /// then `NeedDaemonReload` of each loaded one, concurrently. A unit it does not hold is [`Definition::NotLoaded`].
    ///
    /// Why not ask by name: `ListUnitsByNames`, or a property read on a unit's path, loads a unit systemd does not
    /// hold, and systemd drops an inactive unit nothing references again right away, each drop walking every
    /// member of its slice. Before a start of 333 new units, such a check and the reads after it loaded and
    /// dropped each unit three times (PID 1's debug log, "Collecting": 1,311 for 333 units).
    pub async fn definitions(&self, names: &[String]) -> Result<Vec<(String, Definition)>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let link = self.link();
        let listed = {
            let _slot = self.call_slot().await;
            if names.len() <= LIST_BY_PATTERNS_UP_TO {
                let patterns: Vec<String> = names.iter().map(|n| literal_pattern(n)).collect();
                let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
                link.manager
                    .list_units_by_patterns(&[], &patterns)
                    .await
                    .map_err(|e| SystemdError::call("ListUnitsByPatterns", names.join(","), e))?
            } else {
                link.manager.list_units().await.map_err(|e| SystemdError::call("ListUnits", SYSTEMD, e))?
            }
        };
        let mut held: HashMap<String, (String, OwnedObjectPath)> =
            listed.into_iter().map(|(name, _, load_state, _, _, _, path, ..)| (name, (load_state, path))).collect();
        let asked: Vec<(String, Option<(String, OwnedObjectPath)>)> =
            names.iter().map(|name| (name.clone(), held.remove(name))).collect();
        let link = &link;
        let reads = futures::stream::iter(asked)
            .map(|(name, held)| async move {
                let (load_state, path) = match held {
                    None => return Ok((name, Definition::NotLoaded)),
                    Some(held) => held,
                };
                if load_state != "loaded" {
                    return Ok((name, Definition::from_properties(&load_state, false)));
                }
                let unit = link.unit_proxy(path, &name).await?;
                let _slot = self.call_slot().await;
                let stale = unit
                    .need_daemon_reload()
                    .await
                    .map_err(|e| SystemdError::call("Get(NeedDaemonReload)", &name, e))?;
                Ok((name, Definition::Loaded { stale }))
            })
            .buffered(CALL_SLOTS)
            .collect::<Vec<Result<(String, Definition)>>>()
            .await;
        reads.into_iter().collect()
    }

    /// systemd's restart counter (`NRestarts` of org.freedesktop.systemd1.Service) of each named service that is
    /// loaded, in the order given; a unit whose counter cannot be read (not loaded, not a service, gone meanwhile)
    /// is left out and logged at debug level.
    pub async fn restart_counts(&self, names: &[String]) -> Vec<(String, u32)> {
        // Concurrently (each read takes a call slot): one after the other, a start of 333 units made the
        // publisher wait seconds for the counters, in PID 1's queue behind the start jobs, before it published
        // any of their states.
        let reads = futures::stream::iter(names.iter().cloned())
            .map(|name| self.named_restart_count(name))
            .buffered(CALL_SLOTS)
            .collect::<Vec<_>>()
            .await;
        let mut counts = Vec::with_capacity(reads.len());
        for (name, read) in reads {
            match read {
                Ok(n) => counts.push((name, n)),
                Err(e) => tracing::debug!(unit = %name, err = %e, "cannot read the restart counter"),
            }
        }
        counts
    }

    async fn named_restart_count(&self, name: String) -> (String, Result<u32>) {
        let count = self.restart_count(&name).await;
        (name, count)
    }

    async fn restart_count(&self, name: &str) -> Result<u32> {
        let link = self.link();
        let _slot = self.call_slot().await;
        let path = link.manager.get_unit(name).await.map_err(|e| SystemdError::call("GetUnit", name, e))?;
        let service = link.service_proxy(path, name).await?;
        service.n_restarts().await.map_err(|e| SystemdError::call("Get(NRestarts)", name, e))
    }

    /// The type of the job pending on the unit this process runs in (`restart`, `stop`, ...); `None` when the
    /// process is not in a unit or no job is pending. During `systemctl restart` the job is `restart` while its
    /// stop phase runs (systemd turns it into `start` only once the stop finished).
    pub async fn own_unit_job(&self) -> Result<Option<String>> {
        let link = self.link();
        let _slot = self.call_slot().await;
        let pid = std::process::id();
        let unit = match link.manager.get_unit_by_pid(pid).await {
            Ok(path) => path,
            Err(e) => {
                debug!(pid, error = %e, "this process is in no systemd unit");
                return Ok(None);
            }
        };
        let proxy = link.unit_proxy(unit.clone(), unit.as_str()).await?;
        let (id, job) = proxy.job().await.map_err(|e| SystemdError::call("Get(Job)", unit.as_str(), e))?;
        if id == 0 {
            return Ok(None);
        }
        let job_proxy = JobProxy::builder(&link.conn)
            .path(job.clone())
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| SystemdError::call("Job", job.as_str(), e))?;
        let job_type = job_proxy.job_type().await.map_err(|e| SystemdError::call("Get(JobType)", job.as_str(), e))?;
        Ok(Some(job_type))
    }

    /// Waits for a free call slot ([`CALL_SLOTS`]); the slot is held until the permit is dropped.
    async fn call_slot(&self) -> SemaphorePermit<'_> {
        // The semaphore is never closed.
        self.shared.calls.acquire().await.expect("the call semaphore is never closed")
    }

    /// Notifications of changes to any unit (`PropertiesChanged` on unit objects), with the values they carried;
    /// filter for the units you follow. A reader that falls behind holds one pending change per unit (the newest
    /// values merged) instead of stalling or losing anything.
    pub fn changes(&self) -> UnitChanges {
        self.shared.feed.subscribe()
    }

    /// Wait for `job`'s JobRemoved (`wait` was registered before the job was queued), checking now and then that
    /// the job still exists in case its signal was lost.
    async fn wait_job(&self, link: &Link, mut wait: JobWait, job: &OwnedObjectPath, unit: &str) -> Result<JobResult> {
        let mut check = tokio::time::interval(JOB_CHECK_PERIOD);
        check.tick().await;
        loop {
            tokio::select! {
                result = wait.result() => match result {
                    Some(result) => {
                        debug!(unit = %unit, job = %job.as_str(), result = %result, "job finished");
                        return Ok(result);
                    }
                    None => return Err(SystemdError::StreamEnded { what: format!("job {} of {unit}", job.as_str()) }),
                },
                _ = check.tick() => {
                    if self.job_exists(link, job).await {
                        continue;
                    }
                    // Gone: its signal may have arrived meanwhile; otherwise it was lost.
                    if let Some(result) = wait.arrived() {
                        return Ok(result);
                    }
                    warn!(unit = %unit, job = %job.as_str(), "job vanished without a JobRemoved signal");
                    return Ok(JobResult::Unknown);
                }
            }
        }
    }

    async fn job_exists(&self, link: &Link, job: &OwnedObjectPath) -> bool {
        let _slot = self.call_slot().await;
        let proxy =
            match JobProxy::builder(&link.conn).path(job.clone()).cache_properties(CacheProperties::No).build().await {
                Ok(p) => p,
                Err(_) => return true,
            };
        match proxy.state().await {
            Ok(_) => true,
            Err(e) => !SystemdError::call("Get(Job.State)", job.as_str(), e).is_gone(),
        }
    }
}

impl Link {
    /// Connects as [`Systemd::connect`] describes.
    async fn open(bus: Bus, feed: Arc<ChangeFeed>) -> Result<Link> {
        let fail = |e: zbus::Error| SystemdError::Connect { bus: bus.as_str(), message: e.to_string() };
        match bus {
            Bus::System => {
                let private = async {
                    let conn = super::private::connect(Path::new(super::private::PRIVATE_SOCKET))
                        .await
                        .map_err(|e| SystemdError::Connect { bus: "private", message: e.to_string() })?;
                    Link::over(conn, Transport::PrivateSocket, Arc::clone(&feed)).await
                };
                match tokio::time::timeout(PRIVATE_CONNECT_TIMEOUT, private).await {
                    Ok(Ok(link)) => return Ok(link),
                    Ok(Err(e)) => debug!(error = %e, "systemd's private socket is not usable; using the system bus"),
                    Err(_) => warn!(
                        timeout = ?PRIVATE_CONNECT_TIMEOUT,
                        "systemd's private socket did not answer in time; using the system bus"
                    ),
                }
                let conn = Connection::system().await.map_err(fail)?;
                Link::over(conn, Transport::SystemBus, feed).await
            }
            Bus::User => {
                let conn = Connection::session().await.map_err(fail)?;
                Link::over(conn, Transport::SessionBus, feed).await
            }
        }
    }

    /// Follows systemd's signals on `conn`.
    async fn over(conn: Connection, transport: Transport, feed: Arc<ChangeFeed>) -> Result<Link> {
        let manager = ManagerProxy::builder(&conn)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| SystemdError::call("Manager", SYSTEMD, e))?;
        // On a bus, systemd only emits JobRemoved / PropertiesChanged while some client is subscribed (a direct
        // connection gets them anyway; there the call changes nothing).
        if let Err(e) = manager.subscribe().await {
            let e = SystemdError::call("Subscribe", SYSTEMD, e);
            if e.dbus_name() != Some("org.freedesktop.systemd1.AlreadySubscribed") {
                return Err(e);
            }
        }
        let events = Events::start(&conn, &manager, feed).await?;
        Ok(Link { conn, manager, events, transport })
    }

    /// The unit object at `path`, its properties read afresh on every call (systemd's own values, never a cache);
    /// `what` names the unit in errors.
    async fn unit_proxy(&self, path: OwnedObjectPath, what: &str) -> Result<UnitProxy<'_>> {
        UnitProxy::builder(&self.conn)
            .path(path)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| SystemdError::call("Unit", what, e))
    }

    /// The service interface of the unit at `path`, uncached like [`Self::unit_proxy`].
    async fn service_proxy(&self, path: OwnedObjectPath, what: &str) -> Result<ServiceProxy<'_>> {
        ServiceProxy::builder(&self.conn)
            .path(path)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| SystemdError::call("Service", what, e))
    }
}

/// Waits for the current connection to be lost, then connects again (pausing longer after each failed attempt),
/// puts the new connection in place and tells change subscribers that changes may have been missed; until the
/// last `Systemd` clone is gone.
async fn keep_connected(shared: Weak<Shared>) {
    loop {
        let Some(link) = shared.upgrade().map(|s| s.link()) else { return };
        link.events.lost().await;
        warn!(transport = link.transport.as_str(), "connection to systemd lost; connecting again");
        drop(link);
        let mut pause = RECONNECT_FIRST;
        loop {
            let Some(current) = shared.upgrade() else { return };
            match Link::open(current.bus, Arc::clone(&current.feed)).await {
                Ok(link) => {
                    info!(transport = link.transport.as_str(), "connected to systemd again");
                    *current.link.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(link);
                    current.feed.missed();
                    break;
                }
                Err(e) => warn!(error = %e, retry_in = ?pause, "cannot connect to systemd"),
            }
            drop(current);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RECONNECT_LONGEST);
        }
    }
}

impl Shared {
    /// The current connection.
    fn link(&self) -> Arc<Link> {
        Arc::clone(&self.link.read().unwrap_or_else(|e| e.into_inner()))
    }
}

fn file_changes(changes: Vec<FileChangeTuple>) -> Vec<FileChange> {
    changes.into_iter().map(|(kind, file, destination)| FileChange { kind, file, destination }).collect()
}

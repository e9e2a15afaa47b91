//! One task per connection drains systemd's signals (JobRemoved, PropertiesChanged of unit objects) into
//! [`Waits`] (a job's result for its waiter, a unit's change for whoever waits for it to stop) and into a
//! [`ChangeFeed`] of unit changes (for the state publisher and the fence, which must never lose one). zbus applies
//! backpressure: a signal stream nobody reads stalls the whole connection (method replies included), so no caller
//! ever holds a zbus stream; callers register with the waits or subscribe to the feed instead.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::{FutureExt, StreamExt};
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, warn};
use zbus::message::Type as MessageType;
use zbus::{Connection, MatchRule, MessageStream, Signature, Variant};

use super::error::{Result, SystemdError};
use super::proxies::ManagerProxy;
use super::types::{JobResult, Reported, UnitChange, unit_name_from_path};

const SYSTEMD: &str = "org.freedesktop.systemd1";
const UNIT_NAMESPACE: &str = "/org/freedesktop/systemd1/unit";

/// systemd's D-Bus interface of every unit (`ActiveState`, `SubState`).
const UNIT_INTERFACE: &str = "org.freedesktop.systemd1.Unit";
/// systemd's D-Bus interface of service units (`NRestarts`).
const SERVICE_INTERFACE: &str = "org.freedesktop.systemd1.Service";

/// The signals the events task takes, by path and member: the Manager's `JobRemoved`, and `PropertiesChanged` of a
/// unit object. On a bus the match rules below ask dbus-daemon for only these; a direct connection gets every
/// signal systemd sends (its `UnitNew`, `JobNew`, job objects' changes…), and `private` drops the others on
/// arrival with this test, before zbus parses them.
pub(super) fn follows_signal(path: &str, member: &str) -> bool {
    match member {
        "JobRemoved" => path == MANAGER_PATH,
        "PropertiesChanged" => path.strip_prefix(UNIT_NAMESPACE).is_some_and(|rest| rest.starts_with('/')),
        _ => false,
    }
}

/// The Manager object, where `JobRemoved` comes from.
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";

/// What a `PropertiesChanged` message of a unit object carried ([`Reported`]; empty when its body does not decode).
fn reported(msg: &zbus::Message) -> Reported {
    match msg.body().deserialize::<PropertiesChanged>() {
        Ok(PropertiesChanged(reported)) => reported,
        Err(e) => {
            debug!(err = %e, "undecodable PropertiesChanged body");
            Reported::default()
        }
    }
}

/// A `PropertiesChanged` body (`sa{sv}as`: interface, changed properties by name, names of invalidated ones)
/// decoded straight into the [`Reported`] it carries, building no other value: the Unit interface's `ActiveState`
/// and `SubState` (both in one signal, or neither counts) with its `ActiveEnterTimestampMonotonic`, and the Service
/// interface's `NRestarts`; a value of
/// another type, or from the other interface, counts as absent. Any other value is walked over as
/// [`IgnoredAny`], which builds nothing (zbus only parses each variant's signature, a few small allocations for a
/// container type), and the body of another interface is not read past its name. (Decoding every value into a
/// map of `Variant`s took 13.6 % of fleetd's CPU during a start of 333 units, with its 6,000 signals.)
struct PropertiesChanged(Reported);

impl zbus::Type for PropertiesChanged {
    const SIGNATURE: &'static Signature = &zbus::signature!("sa{sv}as");
}

impl<'de> Deserialize<'de> for PropertiesChanged {
    fn deserialize<D: Deserializer<'de>>(body: D) -> std::result::Result<Self, D::Error> {
        body.deserialize_tuple(3, BodyVisitor).map(PropertiesChanged)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Reported;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a PropertiesChanged body (sa{sv}as)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut body: A) -> std::result::Result<Reported, A::Error> {
        let interface = match body.next_element::<&str>()?.ok_or_else(|| de::Error::invalid_length(0, &self))? {
            UNIT_INTERFACE => Followed::Unit,
            SERVICE_INTERFACE => Followed::Service,
            _ => return Ok(Reported::default()),
        };
        let reported = body.next_element_seed(interface)?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
        body.next_element::<IgnoredAny>()?.ok_or_else(|| de::Error::invalid_length(2, &self))?;
        Ok(reported)
    }
}

/// An interface whose signals carry values [`Reported`] keeps; as a seed, it decodes their changed properties.
#[derive(Clone, Copy)]
enum Followed {
    Unit,
    Service,
}

impl<'de> DeserializeSeed<'de> for Followed {
    type Value = Reported;

    fn deserialize<D: Deserializer<'de>>(self, changed: D) -> std::result::Result<Reported, D::Error> {
        changed.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Followed {
    type Value = Reported;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("changed properties (a{sv})")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut changed: A) -> std::result::Result<Reported, A::Error> {
        let mut reported = Reported::default();
        let (mut active, mut sub, mut entered) = (None, None, None);
        while let Some(property) = changed.next_key::<&str>()? {
            // Only these four values are built (as a `Variant` borrowing the body: no allocation).
            match (self, property) {
                (Followed::Unit, "ActiveState") => active = string(changed.next_value()?),
                (Followed::Unit, "SubState") => sub = string(changed.next_value()?),
                (Followed::Unit, "ActiveEnterTimestampMonotonic") => {
                    entered = match changed.next_value()? {
                        Variant::U64(n) => Some(n),
                        _ => None,
                    }
                }
                (Followed::Service, "NRestarts") => {
                    reported.restarts = match changed.next_value()? {
                        Variant::U32(n) => Some(n),
                        _ => None,
                    }
                }
                _ => {
                    changed.next_value::<IgnoredAny>()?;
                }
            }
        }
        reported.active = active.zip(sub);
        // Only with the states it belongs to: a signal carrying nothing else still carries nothing.
        reported.entered = entered.filter(|_| reported.active.is_some());
        Ok(reported)
    }
}

fn string(value: Variant<'_>) -> Option<String> {
    match value {
        Variant::Str(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// The waits of one connection and the task feeding them and the shared [`ChangeFeed`]; the task stops when the
/// connection is lost (then `lost` fires) or the `Events` is dropped.
pub(crate) struct Events {
    waits: Arc<Waits>,
    lost: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Drop for Events {
    fn drop(&mut self) {
        self.task.abort();
        // Whoever still waits learns that nothing more comes, as when the stream ends.
        self.waits.close();
    }
}

/// One `PropertiesChanged` message of a unit object: into the feed and to the unit's waits.
fn unit_signal(msg: zbus::Result<zbus::Message>, changes: &ChangeFeed, waits: &Waits) {
    let msg = match msg {
        Ok(msg) => msg,
        Err(e) => return debug!(err = %e, "bad PropertiesChanged message"),
    };
    let header = msg.header();
    if let Some(unit) = header.path().and_then(|p| unit_name_from_path(p.as_str())) {
        let reported = reported(&msg);
        changes.push(&unit, &reported);
        waits.unit_changed(&unit, &reported);
    }
}

impl Events {
    /// Add the match rules (before returning, so nothing after this call is missed) and start draining into this
    /// connection's waits and into `feed`, which outlives the connection.
    pub(crate) async fn start(
        conn: &Connection,
        manager: &ManagerProxy<'static>,
        feed: Arc<ChangeFeed>,
    ) -> Result<Events> {
        let mut jobs =
            manager.receive_job_removed().await.map_err(|e| SystemdError::call("AddMatch", "JobRemoved", e))?;
        let rule = MatchRule::builder()
            .msg_type(MessageType::Signal)
            .sender(SYSTEMD)
            .interface("org.freedesktop.DBus.Properties")
            .member("PropertiesChanged")
            .path_namespace(UNIT_NAMESPACE)
            .build()
            .map_err(|e| SystemdError::call("AddMatch", UNIT_NAMESPACE, e))?;
        let mut props = MessageStream::for_match_rule(rule, conn, None)
            .await
            .map_err(|e| SystemdError::call("AddMatch", UNIT_NAMESPACE, e))?;
        let waits = Arc::new(Waits::default());
        let lost = Arc::new(Notify::new());
        let (task_waits, changes, task_lost) = (Arc::clone(&waits), feed, Arc::clone(&lost));
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    sig = jobs.next() => match sig {
                        Some(sig) => {
                            // systemd sends a unit's pending changes before the removal of its job, and zbus hands
                            // each message to its streams before reading the next: the changes that came first
                            // are taken first, so a job's waiter learns the state the job left its unit in.
                            while let Some(Some(msg)) = props.next().now_or_never() {
                                unit_signal(msg, &changes, &task_waits);
                            }
                            match sig.args() {
                                Ok(a) => task_waits.job_removed(a.job().as_str(), JobResult::parse(a.result())),
                                Err(e) => debug!(err = %e, "undecodable JobRemoved"),
                            }
                        }
                        None => break,
                    },
                    msg = props.next() => match msg {
                        Some(msg) => unit_signal(msg, &changes, &task_waits),
                        None => break,
                    },
                }
            }
            warn!("systemd signal stream ended (D-Bus connection lost)");
            task_waits.close();
            // `notify_one` keeps a permit: a waiter that comes later still learns of the loss.
            task_lost.notify_one();
        });
        Ok(Events { waits, lost, task })
    }

    /// Where job results and unit changes are waited for.
    pub(crate) fn waits(&self) -> &Arc<Waits> {
        &self.waits
    }

    /// Returns once this connection's signal stream has ended.
    pub(crate) async fn lost(&self) {
        self.lost.notified().await
    }
}

/// Waits for one signal each, found by the event task with one map lookup per signal: a job's `JobRemoved`, a
/// unit's next `PropertiesChanged`. (A broadcast channel woke every waiter on every signal: during a start of 333
/// units, with 256 start jobs waited on at once, that was over a million wake-ups per machine.)
#[derive(Default)]
pub(crate) struct Waits {
    state: Mutex<WaitState>,
}

#[derive(Default)]
struct WaitState {
    /// Calls under way that may queue a job ([`Queuing`]): a job can finish, and its `JobRemoved` arrive here,
    /// before the caller has read the job's path from the reply.
    queuing: usize,
    /// Results of jobs removed while some call was queuing and nobody waited for them (yet); forgotten once no
    /// call is queuing, as then every caller has claimed its own.
    early: HashMap<String, JobResult>,
    /// Job path → its waiters. systemd merges a stop (or start) asked for twice into one job and answers both
    /// calls with its path (seen: the at-most-once fence and the executor stopping one unit at once), so one job
    /// can have several waiters; each gets the result.
    jobs: HashMap<String, Vec<oneshot::Sender<JobResult>>>,
    /// Unit → the watchers told of its next change.
    units: HashMap<String, Vec<Arc<Notify>>>,
    /// Unit → the `ActiveState` its signals reported since it was first tracked ([`Waits::track_state`]), and
    /// how many track it. Only units with a job under way are here, not every unit's state.
    tracked: HashMap<String, Tracked>,
    /// The signal stream ended: nothing more comes.
    closed: bool,
}

impl Waits {
    fn state(&self) -> std::sync::MutexGuard<'_, WaitState> {
        lock(&self.state)
    }

    /// To be called before a call that queues a job; the job's path goes to [`Queuing::job`].
    pub(crate) fn queuing(self: &Arc<Self>) -> Queuing {
        self.state().queuing += 1;
        Queuing { waits: Some(Arc::clone(self)) }
    }

    fn job_removed(&self, job: &str, result: JobResult) {
        let mut state = self.state();
        if let Some(waiters) = state.jobs.remove(job) {
            for waiter in waiters {
                // A waiter that went away meanwhile no longer wants it.
                let _ = waiter.send(result.clone());
            }
        } else if state.queuing > 0 {
            state.early.insert(job.to_string(), result);
        }
    }

    /// Tells of `unit`'s changes from now on (subscribe first, then read its state: no change slips between).
    pub(crate) fn watch_unit(self: &Arc<Self>, unit: &str) -> UnitWatch {
        let notify = Arc::new(Notify::new());
        self.state().units.entry(unit.to_string()).or_default().push(Arc::clone(&notify));
        UnitWatch { waits: Arc::clone(self), unit: unit.to_string(), notify }
    }

    fn unit_changed(&self, unit: &str, reported: &Reported) {
        let mut state = self.state();
        if let (Some(tracked), Some((active, _))) = (state.tracked.get_mut(unit), &reported.active) {
            tracked.active = Some(active.clone());
        }
        if let Some(watchers) = state.units.get(unit) {
            for notify in watchers {
                notify.notify_one();
            }
        }
    }

    /// Keeps the `ActiveState` that `unit`'s signals report from now on, until the [`StateTrack`] is dropped
    /// (track before the call that queues a job: a job's waiter then reads the state the job left the unit in).
    pub(crate) fn track_state(self: &Arc<Self>, unit: &str) -> StateTrack {
        self.state().tracked.entry(unit.to_string()).or_default().trackers += 1;
        StateTrack { waits: Arc::clone(self), unit: unit.to_string() }
    }

    /// The signal stream ended: job waiters get nothing, unit watchers are woken to find it closed.
    fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.jobs.clear();
        state.early.clear();
        for notify in state.units.values().flatten() {
            notify.notify_one();
        }
    }
}

/// A unit's `ActiveState` as reported while it is tracked.
#[derive(Default)]
struct Tracked {
    trackers: usize,
    active: Option<String>,
}

/// The tracking of one unit's `ActiveState` (see [`Waits::track_state`]).
pub(crate) struct StateTrack {
    waits: Arc<Waits>,
    unit: String,
}

impl StateTrack {
    /// The unit's newest `ActiveState` reported since the tracking began; `None` when no signal told one (its
    /// state did not change, or the stream ended).
    pub(crate) fn reported(&self) -> Option<String> {
        let state = self.waits.state();
        if state.closed {
            return None;
        }
        state.tracked.get(&self.unit).and_then(|t| t.active.clone())
    }
}

impl Drop for StateTrack {
    fn drop(&mut self) {
        let mut state = self.waits.state();
        if let Some(tracked) = state.tracked.get_mut(&self.unit) {
            tracked.trackers -= 1;
            if tracked.trackers == 0 {
                state.tracked.remove(&self.unit);
            }
        }
    }
}

/// A call that may queue a job is under way (see [`Waits::queuing`]).
pub(crate) struct Queuing {
    waits: Option<Arc<Waits>>,
}

impl Queuing {
    /// The call queued `job`: wait for its result.
    pub(crate) fn job(mut self, job: &str) -> JobWait {
        let waits = self.waits.take().expect("a Queuing is consumed once");
        let result = {
            let mut state = waits.state();
            // Read, not taken: another call under way may have been answered with the same (merged) job.
            let result = match state.early.get(job) {
                Some(result) => JobWaitState::Finished(Some(result.clone())),
                None if state.closed => JobWaitState::Finished(None),
                None => {
                    let (sender, receiver) = oneshot::channel();
                    state.jobs.entry(job.to_string()).or_default().push(sender);
                    JobWaitState::Waiting(receiver)
                }
            };
            state.done_queuing();
            result
        };
        JobWait { waits, job: job.to_string(), result }
    }
}

impl WaitState {
    fn done_queuing(&mut self) {
        self.queuing = self.queuing.saturating_sub(1);
        if self.queuing == 0 {
            self.early.clear();
        }
    }
}

impl Drop for Queuing {
    fn drop(&mut self) {
        // The call failed: it queued nothing.
        if let Some(waits) = self.waits.take() {
            waits.state().done_queuing();
        }
    }
}

/// The wait for one job's `JobRemoved`.
pub(crate) struct JobWait {
    waits: Arc<Waits>,
    job: String,
    result: JobWaitState,
}

enum JobWaitState {
    Waiting(oneshot::Receiver<JobResult>),
    /// The result (`None`: the signal stream ended first).
    Finished(Option<JobResult>),
}

impl JobWait {
    /// The job's result once its `JobRemoved` arrived; `None` when the signal stream ended first. Cancel-safe.
    pub(crate) async fn result(&mut self) -> Option<JobResult> {
        match &mut self.result {
            JobWaitState::Waiting(receiver) => {
                let result = receiver.await.ok();
                self.result = JobWaitState::Finished(result.clone());
                result
            }
            JobWaitState::Finished(result) => result.clone(),
        }
    }

    /// The result if its `JobRemoved` has arrived by now.
    pub(crate) fn arrived(&mut self) -> Option<JobResult> {
        match &mut self.result {
            JobWaitState::Waiting(receiver) => receiver.try_recv().ok(),
            JobWaitState::Finished(result) => result.clone(),
        }
    }
}

impl Drop for JobWait {
    fn drop(&mut self) {
        if let JobWaitState::Waiting(receiver) = std::mem::replace(&mut self.result, JobWaitState::Finished(None)) {
            // Closing its receiver first marks its own sender; the other waiters of a merged job stay.
            drop(receiver);
            let mut state = self.waits.state();
            if let Some(waiters) = state.jobs.get_mut(&self.job) {
                waiters.retain(|w| !w.is_closed());
                if waiters.is_empty() {
                    state.jobs.remove(&self.job);
                }
            }
        }
    }
}

/// Wakes on each change of one unit (see [`Waits::watch_unit`]).
pub(crate) struct UnitWatch {
    waits: Arc<Waits>,
    unit: String,
    notify: Arc<Notify>,
}

impl UnitWatch {
    /// Returns at the unit's next change (at once when one came since the last call); false once the signal
    /// stream has ended.
    pub(crate) async fn changed(&self) -> bool {
        if self.waits.state().closed {
            return false;
        }
        self.notify.notified().await;
        !self.waits.state().closed
    }
}

impl Drop for UnitWatch {
    fn drop(&mut self) {
        let mut state = self.waits.state();
        if let Some(watchers) = state.units.get_mut(&self.unit) {
            watchers.retain(|n| !Arc::ptr_eq(n, &self.notify));
            if watchers.is_empty() {
                state.units.remove(&self.unit);
            }
        }
    }
}

/// Where change notifications go: one [`UnitChanges`] per subscriber, each coalescing per unit what it has not
/// taken yet. Never lossy and never blocking: however far a subscriber falls behind (a start of 333 units sends
/// 6,000 `PropertiesChanged` signals in a few seconds, which overran a bounded queue and made the publisher read
/// every unit again and again), it holds at most one pending change per unit, the newest values merged.
#[derive(Default)]
pub struct ChangeFeed {
    subscribers: Mutex<Vec<Weak<Pending>>>,
}

/// One subscriber's pending changes, by unit.
struct Pending {
    units: Mutex<BTreeMap<String, Merged>>,
    /// Changes may have been missed: the subscriber is told [`UnitChange::Missed`] before anything else.
    missed: AtomicBool,
    /// The feed has ended: once `units` is empty, nothing more comes.
    closed: AtomicBool,
    ready: Notify,
}

impl Pending {
    fn new(closed: bool) -> Arc<Pending> {
        Arc::new(Pending {
            units: Mutex::new(BTreeMap::new()),
            missed: AtomicBool::new(false),
            closed: AtomicBool::new(closed),
            ready: Notify::new(),
        })
    }
}

/// What a unit's signals since the subscriber last took it carried, merged.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Merged {
    /// The newest value of each field any of them carried.
    Values(Reported),
    /// One of them carried nothing the publisher follows: the subscriber must read the unit.
    Unknown,
}

impl Merged {
    fn merge(self, newer: &Reported) -> Merged {
        match self {
            _ if *newer == Reported::default() => Merged::Unknown,
            Merged::Unknown => Merged::Unknown,
            Merged::Values(older) => Merged::Values(Reported {
                active: newer.active.clone().or(older.active),
                restarts: newer.restarts.or(older.restarts),
                entered: newer.entered.or(older.entered),
            }),
        }
    }

    fn into_reported(self) -> Reported {
        match self {
            Merged::Values(reported) => reported,
            Merged::Unknown => Reported::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere while holding it; the map itself is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ChangeFeed {
    /// A new subscriber, told of every change from now on.
    pub fn subscribe(&self) -> UnitChanges {
        let pending = Pending::new(false);
        lock(&self.subscribers).push(Arc::downgrade(&pending));
        UnitChanges { pending }
    }

    /// Tells every subscriber that `unit` changed, carrying `reported`.
    pub fn push(&self, unit: &str, reported: &Reported) {
        lock(&self.subscribers).retain(|weak| {
            let Some(pending) = weak.upgrade() else { return false };
            {
                let mut units = lock(&pending.units);
                let merged = match units.remove(unit) {
                    Some(older) => older.merge(reported),
                    None => Merged::Values(Reported::default()).merge(reported),
                };
                units.insert(unit.to_string(), merged);
            }
            pending.ready.notify_one();
            true
        });
    }

    /// Changes may have been missed: each subscriber is told to read every unit again ([`UnitChange::Missed`]).
    pub fn missed(&self) {
        lock(&self.subscribers).retain(|weak| {
            let Some(pending) = weak.upgrade() else { return false };
            pending.missed.store(true, Ordering::SeqCst);
            pending.ready.notify_one();
            true
        });
    }

    /// No more changes: each subscriber gets what is pending, then `None`.
    pub fn close(&self) {
        for pending in lock(&self.subscribers).drain(..).filter_map(|w| w.upgrade()) {
            pending.closed.store(true, Ordering::SeqCst);
            pending.ready.notify_one();
        }
    }
}

/// Change notifications for the publisher and the fence: every unit that changed since the last one taken, with
/// the newest values its signals carried ([`ChangeFeed`]).
pub struct UnitChanges {
    pending: Arc<Pending>,
}

impl UnitChanges {
    /// A subscription that never tells of a change (`recv` answers `None`): for a manager without signals.
    pub fn closed() -> UnitChanges {
        UnitChanges { pending: Pending::new(true) }
    }

    /// The next change; `None` once the feed has ended (the D-Bus connection is gone) and nothing is pending.
    pub async fn recv(&mut self) -> Option<UnitChange> {
        loop {
            if self.pending.missed.swap(false, Ordering::SeqCst) {
                // Reading every unit covers the changes pending so far.
                lock(&self.pending.units).clear();
                return Some(UnitChange::Missed);
            }
            if let Some((name, merged)) = lock(&self.pending.units).pop_first() {
                return Some(UnitChange::Unit { name, reported: merged.into_reported() });
            }
            if self.pending.closed.load(Ordering::SeqCst) {
                return None;
            }
            // A push after the check above left a permit: this returns at once then.
            self.pending.ready.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn active(a: &str) -> Reported {
        Reported { active: Some((a.into(), "x".into())), restarts: None, entered: None }
    }

    fn restarts(n: u32) -> Reported {
        Reported { active: None, restarts: Some(n), entered: None }
    }

    /// A `PropertiesChanged` signal of a unit object with this body (its bytes as systemd would send them).
    fn signal<B: serde::Serialize + zbus::DynamicType>(body: &B) -> zbus::Message {
        zbus::Message::signal(
            "/org/freedesktop/systemd1/unit/a_2eservice",
            "org.freedesktop.DBus.Properties",
            "PropertiesChanged",
        )
        .build(body)
        .unwrap()
    }

    fn changed<'a>(interface: &'a str, properties: Vec<(&'a str, Variant<'a>)>) -> zbus::Message {
        let invalidated = vec!["ExecCondition", "ExecStartPre", "ExecStart", "ExecReload", "ExecStop"];
        signal(&(interface, properties.into_iter().collect::<HashMap<_, _>>(), invalidated))
    }

    /// An `Exec*` command list as systemd's Service interface has it: `a(sasbttttuii)` (path, argv, ignore
    /// failure, start and exit timestamps, PID, exit code and status).
    fn commands(n: usize) -> Variant<'static> {
        let command = |i: u64| {
            let argv = (0..20).map(|a| format!("--argument-{a}=/some/path/{i}")).collect::<Vec<_>>();
            ("/usr/bin/docker".to_string(), argv, false, i, i + 1, i + 2, i + 3, 42u32, 1i32, 0i32)
        };
        Variant::from((0..n as u64).map(command).collect::<Vec<_>>())
    }

    /// A Service-interface body with values of many types around `NRestarts`.
    fn service(restarts: Variant<'static>) -> Vec<(&'static str, Variant<'static>)> {
        vec![
            ("MainPID", Variant::from(4242u32)),
            ("StatusText", Variant::from("Ready.")),
            ("Result", Variant::from("success")),
            ("ExecMainStartTimestamp", Variant::from(1_700_000_000_000_000u64)),
            ("StatusErrno", Variant::from(0i32)),
            ("RemainAfterExit", Variant::from(true)),
            ("Environment", Variant::from(vec!["A=1", "B=2"])),
            ("ExecStartPre", commands(3)),
            ("ExecStart", commands(5)),
            ("NRestarts", restarts),
            ("ExecStop", commands(2)),
            ("ExecStopPost", commands(0)),
        ]
    }

    fn states(active: &str, sub: &str) -> Reported {
        Reported { active: Some((active.into(), sub.into())), restarts: None, entered: None }
    }

    #[test]
    fn a_signal_reports_when_the_unit_entered_active_with_its_states_only() {
        let body = |with_states: bool| {
            let mut properties = vec![
                ("ActiveEnterTimestamp", Variant::from(1_700_000_000_000_000u64)),
                ("ActiveEnterTimestampMonotonic", Variant::from(123_456u64)),
            ];
            if with_states {
                properties.extend([("ActiveState", Variant::from("active")), ("SubState", Variant::from("running"))]);
            }
            properties
        };
        let got = reported(&changed(UNIT_INTERFACE, body(true)));
        assert_eq!(got, Reported { entered: Some(123_456), ..states("active", "running") });
        assert_eq!(reported(&changed(UNIT_INTERFACE, body(false))), Reported::default(), "nothing without its states");
    }

    #[test]
    fn a_signal_reports_the_active_and_sub_state_of_units_and_the_restarts_of_services() {
        let unit = |active: Variant<'static>, sub: Option<Variant<'static>>| {
            let mut properties = vec![
                ("ActiveState", active),
                ("ActiveEnterTimestamp", Variant::from(1_700_000_000_000_000u64)),
                ("Job", Variant::from((0u32, zbus::ObjectPath::from_static_str_unchecked("/")))),
                ("Conditions", Variant::from(vec![("ConditionPathExists", false, false, "/x", 1i32)])),
                ("CanStart", Variant::from(true)),
            ];
            properties.extend(sub.map(|s| ("SubState", s)));
            properties
        };
        assert_eq!(
            reported(&changed(UNIT_INTERFACE, unit(Variant::from("active"), Some(Variant::from("running"))))),
            states("active", "running"),
            "ActiveState and SubState among a timestamp, a structure, an array of structures and a boolean"
        );
        assert_eq!(
            reported(&changed(SERVICE_INTERFACE, service(Variant::from(3u32)))),
            Reported { active: None, restarts: Some(3), entered: None },
            "NRestarts among command lists, strings, numbers, booleans and arrays"
        );
        assert_eq!(
            reported(&changed(UNIT_INTERFACE, unit(Variant::from("active"), None))),
            Reported::default(),
            "ActiveState without SubState"
        );
        assert_eq!(
            reported(&changed(UNIT_INTERFACE, unit(Variant::from(1u32), Some(Variant::from("running"))))),
            Reported::default(),
            "an ActiveState that is no string"
        );
        assert_eq!(
            reported(&changed(SERVICE_INTERFACE, service(Variant::from("3")))),
            Reported::default(),
            "an NRestarts that is no u32"
        );
    }

    #[test]
    fn a_signal_reports_nothing_of_another_interface_or_of_the_wrong_one() {
        for interface in ["org.freedesktop.systemd1.Socket", "org.freedesktop.systemd1.Scope", ""] {
            let mut properties = service(Variant::from(3u32));
            properties.extend([("ActiveState", Variant::from("active")), ("SubState", Variant::from("running"))]);
            assert_eq!(reported(&changed(interface, properties)), Reported::default(), "{interface}");
        }
        let mut states_on_service = service(Variant::from(3u32));
        states_on_service.retain(|(name, _)| *name != "NRestarts");
        states_on_service.extend([("ActiveState", Variant::from("active")), ("SubState", Variant::from("running"))]);
        assert_eq!(
            reported(&changed(SERVICE_INTERFACE, states_on_service)),
            Reported::default(),
            "the states count on the Unit interface only"
        );
        let mut restarts_on_unit = service(Variant::from(3u32));
        restarts_on_unit.push(("ActiveState", Variant::from("active")));
        assert_eq!(
            reported(&changed(UNIT_INTERFACE, restarts_on_unit)),
            Reported::default(),
            "NRestarts counts on the Service interface only"
        );
    }

    #[test]
    fn an_undecodable_signal_body_reports_nothing() {
        let both = || HashMap::from([("ActiveState", Variant::from("active")), ("SubState", Variant::from("running"))]);
        assert_eq!(reported(&signal(&(UNIT_INTERFACE, both()))), Reported::default(), "sa{{sv}}: no invalidated list");
        assert_eq!(reported(&signal(&(UNIT_INTERFACE, both(), vec![1u32]))), Reported::default(), "sa{{sv}}au");
        assert_eq!(
            reported(&signal(&(
                UNIT_INTERFACE,
                HashMap::from([("ActiveState", "active"), ("SubState", "running")]),
                vec!["x"]
            ))),
            Reported::default(),
            "sa{{ss}}as"
        );
        assert_eq!(reported(&signal(&())), Reported::default(), "no body");
        assert_eq!(
            reported(&signal(&(UNIT_INTERFACE, both(), Vec::<&str>::new()))),
            states("active", "running"),
            "the same values in a body of the right signature"
        );
    }

    fn taken(changes: &mut UnitChanges) -> Vec<(String, Reported)> {
        let mut out = Vec::new();
        while let Some(Some(UnitChange::Unit { name, reported })) = changes.recv().now_or_never() {
            out.push((name, reported));
        }
        out
    }

    #[tokio::test]
    async fn a_job_that_finished_before_its_caller_registered_it_is_not_missed() {
        let waits = Arc::new(Waits::default());
        let (fast, slow) = (waits.queuing(), waits.queuing());
        waits.job_removed("/job/1", JobResult::Done);
        waits.job_removed("/job/other-client", JobResult::Done);
        assert_eq!(fast.job("/job/1").result().now_or_never(), Some(Some(JobResult::Done)), "the result kept for it");
        let mut slow = slow.job("/job/2");
        assert!(waits.state().early.is_empty(), "no call is queuing: results nobody claimed are forgotten");
        assert_eq!(slow.arrived(), None);
        waits.job_removed("/job/2", JobResult::Failed);
        assert_eq!(slow.result().await, Some(JobResult::Failed));
        waits.job_removed("/job/3", JobResult::Done);
        assert!(waits.state().early.is_empty(), "with no call queuing nothing is kept");
    }

    /// systemd answers two stops of one unit asked at once with one (merged) job: both callers get its result. A
    /// single waiter per job dropped the first one's, which read as "the signal stream ended": the at-most-once
    /// fence and the executor both took the stop for failed, and the unit stayed stopped for good.
    #[tokio::test]
    async fn every_waiter_of_a_merged_job_gets_its_result() {
        let waits = Arc::new(Waits::default());
        let (first, second, third) = (waits.queuing(), waits.queuing(), waits.queuing());
        let mut first = first.job("/job/1");
        let mut second = second.job("/job/1");
        let gone = third.job("/job/1");
        drop(gone);
        waits.job_removed("/job/1", JobResult::Done);
        let got = (first.result().now_or_never(), second.result().now_or_never());
        assert_eq!(got, (Some(Some(JobResult::Done)), Some(Some(JobResult::Done))), "(first, second) waiter's result");
        assert!(waits.state().jobs.is_empty());
        // A merged job that finished before either caller read its path: both find its result.
        let (a, b) = (waits.queuing(), waits.queuing());
        waits.job_removed("/job/2", JobResult::Failed);
        let got = (a.job("/job/2").result().now_or_never(), b.job("/job/2").result().now_or_never());
        assert_eq!(got, (Some(Some(JobResult::Failed)), Some(Some(JobResult::Failed))), "early result, both callers");
    }

    #[test]
    fn dropped_waits_leave_nothing_registered() {
        let waits = Arc::new(Waits::default());
        drop(waits.queuing());
        let wait = waits.queuing().job("/job/1");
        let watch = waits.watch_unit("a.service");
        let other = waits.watch_unit("a.service");
        drop((wait, watch));
        let state = waits.state();
        assert_eq!((state.queuing, state.jobs.len()), (0, 0), "a failed call and a dropped job wait unregister");
        assert_eq!(state.units.get("a.service").map(Vec::len), Some(1), "only the watch still held is left");
        drop(state);
        drop(other);
        assert!(waits.state().units.is_empty());
    }

    #[tokio::test]
    async fn a_unit_watch_wakes_for_its_own_unit_only_and_ends_when_the_stream_does() {
        let waits = Arc::new(Waits::default());
        let watch = waits.watch_unit("a.service");
        waits.unit_changed("b.service", &active("active"));
        assert!(watch.changed().now_or_never().is_none(), "another unit's change does not wake it");
        waits.unit_changed("a.service", &active("active"));
        assert_eq!(watch.changed().now_or_never(), Some(true), "a change before the wait is kept");
        let mut job = waits.queuing().job("/job/1");
        waits.close();
        assert!(!watch.changed().await, "the watch learns that the stream ended");
        assert_eq!(job.result().await, None, "a job wait learns that no result comes");
        assert_eq!(waits.queuing().job("/job/2").result().await, None, "as does one registered after the end");
    }

    #[test]
    fn a_tracked_unit_tells_the_newest_state_reported_since_its_tracking_began() {
        let waits = Arc::new(Waits::default());
        waits.unit_changed("a.service", &active("failed"));
        let track = waits.track_state("a.service");
        assert_eq!(track.reported(), None, "a change before the tracking began is not told");
        waits.unit_changed("a.service", &active("deactivating"));
        waits.unit_changed("a.service", &restarts(2));
        assert_eq!(track.reported().as_deref(), Some("deactivating"), "a signal without states keeps the last one");
        waits.unit_changed("b.service", &active("failed"));
        waits.unit_changed("a.service", &active("inactive"));
        let second = waits.track_state("a.service");
        assert_eq!(second.reported().as_deref(), Some("inactive"), "trackers of one unit share its newest state");
        drop(track);
        assert_eq!(second.reported().as_deref(), Some("inactive"), "kept while any tracker holds it");
        assert!(!waits.state().tracked.contains_key("b.service"), "an untracked unit's state is not kept");
        waits.close();
        assert_eq!(second.reported(), None, "after the stream ended, nothing reported counts");
        drop(second);
        assert!(waits.state().tracked.is_empty(), "the last tracker dropped leaves nothing behind");
    }

    #[test]
    fn a_subscriber_behind_holds_one_change_per_unit_with_the_newest_values() {
        let feed = ChangeFeed::default();
        let mut changes = feed.subscribe();
        for i in 0..10_000 {
            feed.push("a.service", &restarts(i));
            feed.push("a.service", &active(if i % 2 == 0 { "activating" } else { "active" }));
        }
        feed.push("b.service", &active("active"));
        let newest = Reported { active: Some(("active".into(), "x".into())), restarts: Some(9_999), entered: None };
        assert_eq!(
            taken(&mut changes),
            [("a.service".into(), newest), ("b.service".into(), active("active"))],
            "nothing lost however far behind, nothing kept twice"
        );
        assert!(taken(&mut changes).is_empty());
        feed.push("a.service", &restarts(1));
        assert_eq!(taken(&mut changes), [("a.service".into(), restarts(1))], "a new change after the last was taken");
    }

    #[test]
    fn a_signal_that_carried_nothing_makes_the_unit_unknown_until_taken() {
        let feed = ChangeFeed::default();
        let mut changes = feed.subscribe();
        feed.push("a.service", &active("active"));
        feed.push("a.service", &Reported::default());
        feed.push("a.service", &restarts(2));
        assert_eq!(taken(&mut changes), [("a.service".into(), Reported::default())], "the subscriber must read a");
    }

    #[tokio::test]
    async fn every_subscriber_gets_every_change_and_then_the_end() {
        let feed = ChangeFeed::default();
        let (mut one, mut two) = (feed.subscribe(), feed.subscribe());
        let waiting = tokio::spawn(async move { one.recv().await });
        tokio::task::yield_now().await;
        feed.push("a.service", &restarts(0));
        let change = Some(UnitChange::Unit { name: "a.service".into(), reported: restarts(0) });
        assert_eq!(waiting.await.unwrap(), change, "a waiting recv wakes");
        feed.close();
        assert_eq!(two.recv().await, change);
        assert_eq!(two.recv().await, None, "what was pending, then the end");
        assert_eq!(UnitChanges::closed().recv().await, None);
    }

    #[tokio::test]
    async fn a_missed_notice_comes_first_wakes_a_waiting_subscriber_and_covers_what_was_pending() {
        let feed = ChangeFeed::default();
        let (mut waiting, mut lagging) = (feed.subscribe(), feed.subscribe());
        let woken = tokio::spawn(async move { waiting.recv().await });
        tokio::task::yield_now().await;
        feed.push("a.service", &restarts(1));
        feed.missed();
        assert!(woken.await.unwrap().is_some(), "a waiting recv wakes");
        assert_eq!(lagging.recv().await, Some(UnitChange::Missed), "the notice before the pending change");
        assert!(taken(&mut lagging).is_empty(), "reading every unit again covers the change pending before it");
        feed.push("b.service", &restarts(2));
        assert_eq!(taken(&mut lagging), [("b.service".into(), restarts(2))], "changes after the notice still come");
    }

    #[test]
    fn the_followed_signals_are_job_results_and_unit_changes() {
        assert!(follows_signal("/org/freedesktop/systemd1", "JobRemoved"));
        assert!(follows_signal("/org/freedesktop/systemd1/unit/a_2eservice", "PropertiesChanged"));
        assert!(!follows_signal("/org/freedesktop/systemd1/job/7", "PropertiesChanged"), "a job object's changes");
        assert!(!follows_signal("/org/freedesktop/systemd1/unitx", "PropertiesChanged"), "outside the namespace");
        assert!(!follows_signal("/org/freedesktop/systemd1", "UnitNew"));
        assert!(!follows_signal("/org/freedesktop/systemd1", "JobNew"));
    }
}

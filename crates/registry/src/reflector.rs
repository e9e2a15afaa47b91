//! [`Reflector`]: keeps an in-memory [`Snapshot`] of the whole prefix current by listing once and then watching;
//! or, scoped to one machine ([`Reflector::start_scoped`], layout 2), of that machine's prefix only, with the bodies
//! its entries name fetched before each snapshot is published, and the machine's own lease-bound keys (states,
//! markers: outside that prefix) read at each list and then kept current from its own writes ([`OwnWrites`]).
//!
//! The shape of kube-rs' watcher → reflector: one range GET of the prefix at revision R, then a prefix watch from
//! R+1, applying events to the snapshot and publishing it through a `tokio::sync::watch` channel, so the engine,
//! agent and API react to changes without polling and read without touching etcd. Any watch failure (compaction
//! of the revision it needs, cancellation, etcd restart, network loss) falls back to a fresh list; until it
//! succeeds the last snapshot stays readable with [`Snapshot::is_connected`] false.
//!
//! Revisions: after applying a batch, the snapshot's revision is that of the last event applied (a watch
//! response's header revision can be ahead of events still to come while the watcher catches up), or the header
//! revision H of a watch progress notification once confirmed. So "snapshot revision ≥ R" means every change up
//! to R is in the snapshot, which is what [`Reflector::wait_for_revision`] relies on.
//!
//! Progress notifications are requested only while someone waits for a revision the snapshot has not reached
//! (one with no event under the prefix, e.g. a failed compare-and-swap's). They are not trusted on their own:
//! etcd before 3.4.25/3.5.8 can send one ahead of events still queued for the watcher (etcd issue #15220; Debian
//! ships 3.4.23). H is taken only when etcd confirms that the prefix at H is what the snapshot holds: no key
//! alive at H was written after the snapshot's revision, and as many keys exist (so none was deleted).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use super::Registry;
use super::error::{RegistryError, Result};
use super::snapshot::{Change, Snapshot};

/// Most watch responses folded into one published snapshot when a burst is already buffered.
const MAX_BATCH: usize = 256;
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often a scoped view asks etcd which keys are still bound to its machine's lease. Another client that
/// overwrites or deletes one of them (a put without the lease unbinds it) is noticed within this: the key leaves the
/// view, so the agent writes it again (its resync compares what it published with what the view holds).
const OWN_KEYS_CHECK: Duration = Duration::from_secs(10);

/// A write of one of a machine's own lease-bound keys (its unit states, launched and restarted markers), as etcd
/// took it. A scoped view does not watch these keys (they lie under `P/states/` and `P/units/`, beside every other
/// machine's); the machine's agent is their only writer and they vanish only with its lease, which ends the view
/// too, so the view reads them when it lists and then applies what the agent's session reports it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnWrite {
    pub key: String,
    /// `None`: deleted.
    pub value: Option<Vec<u8>>,
    /// The revision of the write.
    pub revision: i64,
    pub lease: i64,
}

/// Where an [`crate::AgentSession`] reports its own writes to the scoped view of its machine
/// ([`Reflector::own_writes`]).
#[derive(Debug, Clone)]
pub struct OwnWrites(mpsc::UnboundedSender<Vec<OwnWrite>>);

impl OwnWrites {
    /// Hands `writes` to the view; a view that is gone needs none.
    pub(crate) fn note(&self, writes: Vec<OwnWrite>) {
        if !writes.is_empty() {
            let _ = self.0.send(writes);
        }
    }
}

/// A background list+watch of the registry. Dropping it stops the watch.
#[derive(Debug)]
pub struct Reflector {
    registry: Registry,
    rx: watch::Receiver<Arc<Snapshot>>,
    /// A scoped view's intake of its machine's own writes.
    own: Option<OwnWrites>,
    /// The highest revision a caller of [`Reflector::wait_for_revision`] asked for.
    wanted: watch::Sender<i64>,
    task: JoinHandle<()>,
}

/// The one full view a fleetd's components share when they need it only at times (the engine while it leads, the
/// API while it is used): whoever asks while one is live gets that one, so a leader that answers the API holds one
/// view of everything, not two. The view ends when the last holder drops it.
#[derive(Debug, Clone)]
pub struct SharedFullView {
    registry: Registry,
    live: Arc<std::sync::Mutex<std::sync::Weak<Reflector>>>,
}

impl SharedFullView {
    pub fn new(registry: &Registry) -> SharedFullView {
        SharedFullView { registry: registry.clone(), live: Arc::default() }
    }

    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    /// The live full view, or a new one started (listing the registry) when no holder is left.
    pub fn get(&self) -> Arc<Reflector> {
        // A poisoned lock only means a panic elsewhere while holding it; the slot itself is still sound.
        let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(view) = live.upgrade() {
            return view;
        }
        let view = Arc::new(Reflector::start(&self.registry));
        *live = Arc::downgrade(&view);
        view
    }

    /// Whether a full view is live now (held by some component).
    pub fn is_live(&self) -> bool {
        self.live.lock().map(|live| live.strong_count() > 0).unwrap_or(true)
    }
}

impl Reflector {
    /// Starts listing and watching in a background task. The first snapshot is empty and disconnected; wait with
    /// [`Reflector::wait_connected`] or [`Reflector::wait_for`] before relying on it.
    pub fn start(registry: &Registry) -> Reflector {
        Reflector::spawn(registry, Scope::Full, None)
    }

    /// Starts from an earlier snapshot (e.g. one a component kept across a restart of its reflector): watches from
    /// its revision instead of listing everything again, and falls back to a full list if etcd has compacted that
    /// revision away. Full views only.
    pub fn resume(registry: &Registry, snapshot: Snapshot) -> Reflector {
        Reflector::spawn(registry, Scope::Full, Some(snapshot))
    }

    /// A view scoped to `machine` (layout 2, docs/lab/scoped-views.md): it lists and watches `P/machines/<machine>/`
    /// alone, and every snapshot it publishes holds the bodies that prefix's entries name, and the keys bound to the
    /// machine's presence lease `lease` (read at each list, then kept current by the writes its agent's session
    /// reports: [`Reflector::own_writes`]).
    pub fn start_scoped(registry: &Registry, machine: &str, lease: i64) -> Reflector {
        Reflector::spawn(registry, Scope::Machine { machine: machine.to_string(), lease }, None)
    }

    /// A view of the engine's keys alone (`P/engine/`: the leader and the cluster's engine version), for an engine
    /// that does not lead: what its election needs, and nothing it would pay a watch event for.
    pub fn start_engine_keys(registry: &Registry) -> Reflector {
        Reflector::spawn(registry, Scope::Engine, None)
    }

    fn spawn(registry: &Registry, scope: Scope, resume_from: Option<Snapshot>) -> Reflector {
        let first = match &scope {
            Scope::Machine { machine, .. } => Snapshot::scoped(machine),
            Scope::Full | Scope::Engine => Snapshot::default(),
        };
        let (tx, rx) = watch::channel(Arc::new(first));
        let (wanted, wanted_rx) = watch::channel(0);
        let (own, own_rx) = match scope {
            Scope::Machine { .. } => {
                let (own, own_rx) = mpsc::unbounded_channel();
                (Some(OwnWrites(own)), Some(own_rx))
            }
            Scope::Full | Scope::Engine => (None, None),
        };
        let task = tokio::spawn(run(registry.clone(), scope, tx, wanted_rx, resume_from, own_rx));
        Reflector { registry: registry.clone(), rx, own, wanted, task }
    }

    /// Where the agent's session of a scoped view reports its own writes (`AgentSession::with_own_writes`); `None`
    /// for a full view, which watches those keys.
    pub fn own_writes(&self) -> Option<OwnWrites> {
        self.own.clone()
    }

    /// A receiver that is notified on every published snapshot (cheap `Arc` clones; `borrow()` it, or clone the
    /// `Arc` to keep a consistent view while working).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.rx.clone()
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.rx.borrow().clone()
    }

    /// Waits until `f` returns `Some` for a published snapshot (checked on the current one first). On timeout the
    /// error says what was awaited and summarises the last snapshot seen.
    pub async fn wait_for<T>(
        &self,
        limit: Duration,
        what: &str,
        mut f: impl FnMut(&Snapshot) -> Option<T>,
    ) -> Result<T> {
        let mut rx = self.rx.clone();
        let waiting = async {
            loop {
                let snapshot = rx.borrow_and_update().clone();
                if let Some(found) = f(&snapshot) {
                    return Some(found);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        match timeout(limit, waiting).await {
            Ok(Some(found)) => Ok(found),
            Ok(None) | Err(_) => {
                Err(RegistryError::Timeout { what: what.to_string(), waited: limit, last: describe(&self.rx.borrow()) })
            }
        }
    }

    /// Waits until the snapshot is connected (listed and watching).
    pub async fn wait_connected(&self, limit: Duration) -> Result<Arc<Snapshot>> {
        self.wait_for(limit, "registry view to connect", |s| s.is_connected().then(|| Arc::new(s.clone()))).await
    }

    /// Waits until the snapshot includes every change up to `revision` (e.g. the revision a write returned), for
    /// read-your-writes.
    pub async fn wait_for_revision(&self, revision: i64, limit: Duration) -> Result<Arc<Snapshot>> {
        let what = format!("registry view to reach revision {revision}");
        self.wanted.send_if_modified(|wanted| {
            let raise = revision > *wanted;
            if raise {
                *wanted = revision;
            }
            raise
        });
        self.wait_for(limit, &what, |s| (s.revision() >= revision).then(|| Arc::new(s.clone()))).await
    }

    /// Waits until the snapshot is at least as new as etcd is now (a linearizable barrier costing one read).
    pub async fn sync(&self, limit: Duration) -> Result<Arc<Snapshot>> {
        let key = self.registry.keys().layout_version();
        let resp = self
            .registry
            .kv()
            .get(key.as_str(), Some(etcd_client::GetOptions::new().with_count_only()))
            .await
            .map_err(RegistryError::etcd("get", key))?;
        let revision = resp.header().map_or(0, |h| h.revision());
        self.wait_for_revision(revision, limit).await
    }
}

impl Drop for Reflector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn describe(s: &Snapshot) -> String {
    format!(
        "revision {}, {}, {} units, {} bodies, {} units with states, {} machines, leader {}",
        s.revision(),
        if s.is_connected() { "connected" } else { "disconnected" },
        s.unit_records().len(),
        s.bodies().len(),
        s.state_records().len(),
        s.machine_records().len(),
        s.leader().unwrap_or("none"),
    )
}

/// What a reflector lists and watches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    /// The whole prefix.
    Full,
    /// One machine's prefix, its bodies and its lease-bound keys ([`Reflector::start_scoped`]).
    Machine { machine: String, lease: i64 },
    /// `P/engine/` ([`Reflector::start_engine_keys`]).
    Engine,
}

/// Why one list+watch round ended.
enum End {
    /// The watch needs a revision etcd no longer has: re-list at once.
    Compacted(i64),
    /// etcd failed or went away: re-list after a backoff.
    Failed(String),
}

async fn run(
    registry: Registry,
    scope: Scope,
    tx: watch::Sender<Arc<Snapshot>>,
    mut wanted: watch::Receiver<i64>,
    mut resume_from: Option<Snapshot>,
    mut own: Option<mpsc::UnboundedReceiver<Vec<OwnWrite>>>,
) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let started = Instant::now();
        match list_and_watch(&registry, &scope, &tx, &mut wanted, resume_from.take(), own.as_mut()).await {
            End::Compacted(revision) => {
                tracing::info!(compacted = revision, "registry watch fell behind compaction; re-listing");
                backoff = MIN_BACKOFF;
                continue;
            }
            End::Failed(error) => {
                tracing::warn!(%error, retry_in = ?backoff, "registry watch failed; re-listing");
                tx.send_if_modified(|s| {
                    let was = s.is_connected();
                    if was {
                        Arc::make_mut(s).set_connected(false);
                    }
                    was
                });
            }
        }
        // A round that stayed healthy for a while resets the backoff; a flapping etcd keeps it growing.
        if started.elapsed() > MAX_BACKOFF * 5 {
            backoff = MIN_BACKOFF;
        }
        sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn list_and_watch(
    registry: &Registry,
    scope: &Scope,
    tx: &watch::Sender<Arc<Snapshot>>,
    wanted: &mut watch::Receiver<i64>,
    resume_from: Option<Snapshot>,
    mut own: Option<&mut mpsc::UnboundedReceiver<Vec<OwnWrite>>>,
) -> End {
    // The revision at which this list read the machine's own keys: a write of them noted later with a revision up
    // to it is already in the list.
    let mut own_listed_at = 0;
    // Those keys, with the revision of their last write the view knows (listed or noted).
    let mut own_keys: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    let listed = match (resume_from, scope) {
        // Marked connected only once etcd confirms the watch (its `created` response).
        (Some(mut s), _) => {
            s.set_connected(false);
            Ok(s)
        }
        (None, Scope::Full) => registry.read_snapshot().await,
        (None, Scope::Engine) => registry.read_engine_snapshot().await,
        (None, Scope::Machine { machine, lease }) => match registry.read_machine_snapshot(machine).await {
            Ok(mut s) => registry.read_own_keys(&mut s, *lease).await.map(|(at, names)| {
                own_listed_at = at;
                own_keys = names.into_iter().map(|name| (name, at)).collect();
                s
            }),
            Err(e) => Err(e),
        },
    };
    let snapshot = match listed {
        Ok(s) => s,
        Err(e) => return End::Failed(e.to_string()),
    };
    let revision = snapshot.revision();
    tx.send_replace(Arc::new(snapshot));
    tracing::debug!(revision, "registry listed");

    let keys = registry.keys();
    let scoped_prefix = match scope {
        Scope::Full => None,
        Scope::Machine { machine, .. } => Some(keys.machine_dir(machine)),
        Scope::Engine => Some(keys.engine_dir()),
    };
    let prefix = scoped_prefix.as_deref().unwrap_or(keys.prefix());
    // No prev_kv: a delete event carries its key, and the snapshot already holds the previous value.
    let options = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
    let mut watcher = registry.watch_connection().watch_client().max_decoding_message_size(super::MAX_MESSAGE);
    let mut stream = match watcher.watch(prefix, Some(options)).await {
        Ok(s) => s,
        Err(e) => return End::Failed(format!("watch {prefix}: {e}")),
    };
    // A new watch needs its own progress request for whoever already waits.
    wanted.mark_changed();
    let own_lease = match scope {
        Scope::Machine { lease, .. } => Some(*lease),
        Scope::Full | Scope::Engine => None,
    };
    let mut own_check = tokio::time::interval_at(Instant::now() + OWN_KEYS_CHECK, OWN_KEYS_CHECK);
    own_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let first = tokio::select! {
            message = stream.message() => message,
            Some(writes) = next_own(&mut own) => {
                tx.send_if_modified(|shared| {
                    let mut changed = false;
                    for write in writes.into_iter().filter(|w| w.revision > own_listed_at) {
                        match &write.value {
                            Some(_) => own_keys.insert(write.key.as_bytes().to_vec(), write.revision),
                            None => own_keys.remove(write.key.as_bytes()),
                        };
                        let change = match &write.value {
                            Some(value) => Change::Put { value, mod_revision: write.revision, lease: write.lease },
                            None => Change::Delete,
                        };
                        Arc::make_mut(shared).apply(keys, write.key.as_bytes(), change);
                        changed = true;
                    }
                    changed
                });
                continue;
            }
            _ = own_check.tick(), if own_lease.is_some() => {
                let scope_machine = tx.borrow().scope().map(str::to_string);
                let lease = own_lease.unwrap_or_default();
                match registry.own_key_names(scope_machine.as_deref(), lease).await {
                    Ok((at, names)) => {
                        let bound: BTreeSet<&[u8]> = names.iter().map(Vec::as_slice).collect();
                        let lost = lost_own_keys(&own_keys, &bound, at);
                        if !lost.is_empty() {
                            tracing::warn!(keys = lost.len(), first = %String::from_utf8_lossy(&lost[0]),
                                "keys of this machine were overwritten or deleted by another client; writing them again");
                            tx.send_modify(|shared| {
                                for key in &lost {
                                    Arc::make_mut(shared).apply(keys, key, Change::Delete);
                                }
                            });
                            for key in &lost {
                                own_keys.remove(key);
                            }
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot read the keys of this machine's lease; asking again later"),
                }
                continue;
            }
            Ok(()) = wanted.changed() => {
                if *wanted.borrow_and_update() > tx.borrow().revision() {
                    if let Err(e) = stream.request_progress().await {
                        return End::Failed(format!("watch progress request: {e}"));
                    }
                }
                continue;
            }
        };
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Err(e) => return End::Failed(format!("watch {prefix}: {e}")),
                Ok(None) => return End::Failed(format!("watch {prefix}: stream closed by etcd")),
                Ok(Some(resp)) if resp.canceled() => {
                    if resp.compact_revision() > 0 {
                        return End::Compacted(resp.compact_revision());
                    }
                    return End::Failed(format!("watch {prefix} canceled: {}", resp.cancel_reason()));
                }
                Ok(Some(resp)) => batch.push(resp),
            }
            if batch.len() < MAX_BATCH {
                next = stream.message().now_or_never();
            }
        }
        let mut progress_at = None;
        // A scoped view's new entries may name bodies it does not hold: fetched into a copy before it is
        // published, so no reader ever sees an entry without its body (the unit would look gone).
        let mut scoped_copy = matches!(scope, Scope::Machine { .. }).then(|| (**tx.borrow()).clone());
        let apply = |snapshot: &mut Snapshot, progress_at: &mut Option<i64>| -> bool {
            let mut changed = false;
            for resp in &batch {
                if resp.created() {
                    if !snapshot.is_connected() {
                        snapshot.set_connected(true);
                        changed = true;
                    }
                    continue;
                }
                if resp.events().is_empty() {
                    // A progress notification: confirmed below before its revision is taken.
                    *progress_at = (*progress_at).max(resp.header().map(|h| h.revision()));
                    continue;
                }
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    let change = match event.event_type() {
                        EventType::Put => {
                            snapshot.count_raw_keys(u64::from(kv.version() == 1), 0);
                            Change::Put { value: kv.value(), mod_revision: kv.mod_revision(), lease: kv.lease() }
                        }
                        EventType::Delete => {
                            snapshot.count_raw_keys(0, 1);
                            Change::Delete
                        }
                    };
                    snapshot.apply(keys, kv.key(), change);
                    snapshot.set_revision(snapshot.revision().max(kv.mod_revision()));
                    changed = true;
                }
            }
            changed
        };
        match scoped_copy.as_mut() {
            None => {
                tx.send_if_modified(|shared| apply(Arc::make_mut(shared), &mut progress_at));
            }
            Some(copy) => {
                if apply(copy, &mut progress_at) {
                    if let Err(e) = registry.fetch_missing_bodies(copy).await {
                        return End::Failed(format!("reading the bodies of {prefix}: {e}"));
                    }
                    tx.send_replace(Arc::new(scoped_copy.take().expect("a scoped copy")));
                }
            }
        }
        let (revision, raw_keys) = {
            let snapshot = tx.borrow();
            (snapshot.revision(), snapshot.raw_keys())
        };
        let wanted_revision = *wanted.borrow();
        if revision >= wanted_revision {
            continue;
        }
        if let Some(at) = progress_at.filter(|at| *at > revision) {
            match progress_confirmed(registry, prefix, revision, raw_keys, at).await {
                Ok(true) => {
                    tx.send_if_modified(|shared| {
                        let behind = shared.revision() < at;
                        if behind {
                            Arc::make_mut(shared).set_revision(at);
                        }
                        behind
                    });
                    if at >= wanted_revision {
                        continue;
                    }
                }
                Ok(false) => tracing::debug!(revision, progress = at, "watch progress ahead of its events"),
                Err(e) => return End::Failed(format!("confirming watch progress: {e}")),
            }
        }
        // Still behind what a caller waits for: ask again (etcd answers only while the watcher is in sync).
        if let Err(e) = stream.request_progress().await {
            return End::Failed(format!("watch progress request: {e}"));
        }
    }
}

/// The own keys a scoped view holds (key → revision of the last write it knows) that are no longer bound to the
/// machine's lease at revision `at` (`bound`): overwritten or deleted by another client. A key written after `at`
/// is not judged by that answer.
fn lost_own_keys(held: &BTreeMap<Vec<u8>, i64>, bound: &BTreeSet<&[u8]>, at: i64) -> Vec<Vec<u8>> {
    held.iter()
        .filter(|(key, written)| **written <= at && !bound.contains(key.as_slice()))
        .map(|(k, _)| k.clone())
        .collect()
}

/// The next batch of own writes a scoped view was handed; never, for a full view.
async fn next_own(own: &mut Option<&mut mpsc::UnboundedReceiver<Vec<OwnWrite>>>) -> Option<Vec<OwnWrite>> {
    match own {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// True when `prefix` (the one watched) at revision `at` is what a snapshot at `revision` holding `raw_keys` keys
/// of it holds: no key alive at `at` was written after `revision`, and as many keys exist, so none was deleted
/// either.
async fn progress_confirmed(registry: &Registry, prefix: &str, revision: i64, raw_keys: u64, at: i64) -> Result<bool> {
    let mut kv = registry.kv();
    let at_progress = || etcd_client::GetOptions::new().with_prefix().with_revision(at);
    let newer = at_progress().with_min_mod_revision(revision + 1).with_keys_only().with_limit(1);
    let newer = kv.get(prefix, Some(newer)).await.map_err(RegistryError::etcd("get", prefix))?;
    if !newer.kvs().is_empty() {
        return Ok(false);
    }
    let total =
        kv.get(prefix, Some(at_progress().with_count_only())).await.map_err(RegistryError::etcd("get", prefix))?;
    Ok(u64::try_from(total.count()).is_ok_and(|count| count == raw_keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_keys_no_longer_bound_to_the_lease_are_lost_unless_written_after_the_answer() {
        let held: BTreeMap<Vec<u8>, i64> =
            [(b"kept".to_vec(), 5), (b"overwritten".to_vec(), 5), (b"written-later".to_vec(), 12)].into();
        let bound: BTreeSet<&[u8]> = [b"kept".as_slice()].into();
        assert_eq!(lost_own_keys(&held, &bound, 10), [b"overwritten".to_vec()]);
        assert!(lost_own_keys(&held, &[b"kept".as_slice(), b"overwritten".as_slice()].into(), 10).is_empty());
    }
}

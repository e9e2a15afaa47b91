//! [`Reflector`]: keeps an in-memory [`Snapshot`] of the whole prefix current by listing once and then watching.
//!
//! The shape of kube-rs' watcher → reflector: one range GET of the prefix at revision R, then a prefix watch from
//! R+1, applying events to the snapshot and publishing it through a `tokio::sync::watch` channel, so the engine,
//! agent and API react to changes without polling and read without touching etcd. Any watch failure (compaction
//! of the revision it needs, cancellation, etcd restart, network loss) falls back to a fresh list; until it
//! succeeds the last snapshot stays readable with [`Snapshot::is_connected`] false.
//!
//! Revisions: after applying a batch, the snapshot's revision is that of the last event applied (a watch
//! response's header revision can be ahead of events still to come while the watcher catches up), or the header
//! revision of a progress notification (sent only when the watcher is in sync). So "snapshot revision ≥ R" means
//! every change up to R is in the snapshot, which is what [`Reflector::wait_for_revision`] relies on.

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

/// A background list+watch of the registry. Dropping it stops the watch.
#[derive(Debug)]
pub struct Reflector {
    registry: Registry,
    rx: watch::Receiver<Arc<Snapshot>>,
    progress: mpsc::Sender<()>,
    task: JoinHandle<()>,
}

impl Reflector {
    /// Starts listing and watching in a background task. The first snapshot is empty and disconnected; wait with
    /// [`Reflector::wait_connected`] or [`Reflector::wait_for`] before relying on it.
    pub fn start(registry: &Registry) -> Reflector {
        Reflector::spawn(registry, None)
    }

    /// Starts from an earlier snapshot (e.g. one a component kept across a restart of its reflector): watches from
    /// its revision instead of listing everything again, and falls back to a full list if etcd has compacted that
    /// revision away.
    pub fn resume(registry: &Registry, snapshot: Snapshot) -> Reflector {
        Reflector::spawn(registry, Some(snapshot))
    }

    fn spawn(registry: &Registry, resume_from: Option<Snapshot>) -> Reflector {
        let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
        let (progress, progress_rx) = mpsc::channel(1);
        let task = tokio::spawn(run(registry.clone(), tx, progress_rx, resume_from));
        Reflector { registry: registry.clone(), rx, progress, task }
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
        let _ = self.progress.try_send(());
        self.wait_for(limit, &what, |s| (s.revision() >= revision).then(|| Arc::new(s.clone()))).await
    }

    /// Waits until the snapshot is at least as new as etcd is now (a linearizable barrier costing one read).
    pub async fn sync(&self, limit: Duration) -> Result<Arc<Snapshot>> {
        let key = self.registry.keys().layout_version();
        let resp = self
            .registry
            .client()
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

/// Why one list+watch round ended.
enum End {
    /// The watch needs a revision etcd no longer has: re-list at once.
    Compacted(i64),
    /// etcd failed or went away: re-list after a backoff.
    Failed(String),
}

async fn run(
    registry: Registry,
    tx: watch::Sender<Arc<Snapshot>>,
    mut progress: mpsc::Receiver<()>,
    mut resume_from: Option<Snapshot>,
) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let started = Instant::now();
        match list_and_watch(&registry, &tx, &mut progress, resume_from.take()).await {
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
    tx: &watch::Sender<Arc<Snapshot>>,
    progress: &mut mpsc::Receiver<()>,
    resume_from: Option<Snapshot>,
) -> End {
    let listed = match resume_from {
        // Marked connected only once etcd confirms the watch (its `created` response).
        Some(mut s) => {
            s.set_connected(false);
            Ok(s)
        }
        None => registry.read_snapshot().await,
    };
    let snapshot = match listed {
        Ok(s) => s,
        Err(e) => return End::Failed(e.to_string()),
    };
    let revision = snapshot.revision();
    tx.send_replace(Arc::new(snapshot));
    tracing::debug!(revision, "registry listed");

    let keys = registry.keys();
    let prefix = keys.prefix();
    // No prev_kv: a delete event carries its key, and the snapshot already holds the previous value.
    let options = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
    let mut watcher = registry.client().watch_client().max_decoding_message_size(super::MAX_MESSAGE);
    let mut stream = match watcher.watch(prefix, Some(options)).await {
        Ok(s) => s,
        Err(e) => return End::Failed(format!("watch {prefix}: {e}")),
    };
    loop {
        let first = tokio::select! {
            message = stream.message() => message,
            Some(()) = progress.recv() => {
                // Someone waits for a revision that may have no event under the prefix: ask etcd to confirm
                // how far this watcher is in sync.
                if let Err(e) = stream.request_progress().await {
                    return End::Failed(format!("watch progress request: {e}"));
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
        tx.send_if_modified(|shared| {
            let mut changed = false;
            let snapshot = Arc::make_mut(shared);
            for resp in &batch {
                if resp.created() {
                    if !snapshot.is_connected() {
                        snapshot.set_connected(true);
                        changed = true;
                    }
                    continue;
                }
                if resp.events().is_empty() {
                    // Progress notification: everything up to the header revision has been delivered.
                    if let Some(h) = resp.header().filter(|h| h.revision() > snapshot.revision()) {
                        snapshot.set_revision(h.revision());
                        changed = true;
                    }
                    continue;
                }
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    let change = match event.event_type() {
                        EventType::Put => {
                            Change::Put { value: kv.value(), mod_revision: kv.mod_revision(), lease: kv.lease() }
                        }
                        EventType::Delete => Change::Delete,
                    };
                    snapshot.apply(keys, kv.key(), change);
                    snapshot.set_revision(snapshot.revision().max(kv.mod_revision()));
                    changed = true;
                }
            }
            changed
        });
    }
}

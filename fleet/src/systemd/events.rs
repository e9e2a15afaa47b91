//! One task per connection drains systemd's signals (JobRemoved, PropertiesChanged of unit objects) into a
//! broadcast channel (for job waits, which check the job directly when they lag) and into a [`ChangeFeed`] of unit
//! changes (for the state publisher and the fence, which must never lose one). zbus applies backpressure: a
//! signal stream nobody reads stalls the whole connection (method replies included), so no caller ever holds a
//! zbus stream; callers subscribe to the channel or the feed instead, where a slow reader only lags.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::StreamExt;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;
use tracing::{debug, warn};
use zbus::message::Type as MessageType;
use zbus::{Connection, MatchRule, MessageStream, Variant};

use super::error::{Result, SystemdError};
use super::proxies::ManagerProxy;
use super::types::{Reported, UnitChange, unit_name_from_path};

const SYSTEMD: &str = "org.freedesktop.systemd1";
const UNIT_NAMESPACE: &str = "/org/freedesktop/systemd1/unit";
const CAPACITY: usize = 4096;

/// One signal from systemd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    JobRemoved {
        job: String,
        unit: String,
        result: String,
    },
    /// The values it carried go to the [`ChangeFeed`]; job waits need only the unit.
    PropertiesChanged {
        unit: String,
    },
}

impl Event {
    pub(crate) fn unit(&self) -> &str {
        match self {
            Event::JobRemoved { unit, .. } | Event::PropertiesChanged { unit } => unit,
        }
    }
}

/// What a `PropertiesChanged` message of a unit object carried ([`Reported`]; empty when its body does not decode).
fn reported(msg: &zbus::Message) -> Reported {
    let body = msg.body();
    match body.deserialize::<(&str, HashMap<&str, Variant<'_>>, Vec<&str>)>() {
        Ok((interface, changed, _)) => Reported::from_signal(interface, changed.iter().map(|(k, v)| (*k, v))),
        Err(e) => {
            debug!(err = %e, "undecodable PropertiesChanged body");
            Reported::default()
        }
    }
}

/// The channel and the task feeding it; the task stops when the last `Systemd` clone is dropped.
pub(crate) struct Events {
    sender: broadcast::Sender<Event>,
    feed: Arc<ChangeFeed>,
    task: JoinHandle<()>,
}

impl Drop for Events {
    fn drop(&mut self) {
        self.task.abort();
        // Subscribers still waiting learn that nothing more comes, as they do when the stream ends.
        self.feed.close();
    }
}

impl Events {
    /// Add the match rules (before returning, so nothing after this call is missed) and start draining.
    pub(crate) async fn start(conn: &Connection, manager: &ManagerProxy<'static>) -> Result<Arc<Events>> {
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
        let (sender, _) = broadcast::channel(CAPACITY);
        let tx = sender.clone();
        let feed = Arc::new(ChangeFeed::default());
        let changes = Arc::clone(&feed);
        let task = tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    sig = jobs.next() => match sig {
                        Some(sig) => match sig.args() {
                            Ok(a) => Event::JobRemoved {
                                job: a.job().as_str().to_string(),
                                unit: a.unit().clone(),
                                result: a.result().clone(),
                            },
                            Err(e) => { debug!(err = %e, "undecodable JobRemoved"); continue; }
                        },
                        None => break,
                    },
                    msg = props.next() => match msg {
                        Some(Ok(msg)) => {
                            let header = msg.header();
                            match header.path().and_then(|p| unit_name_from_path(p.as_str())) {
                                Some(unit) => {
                                    changes.push(&unit, &reported(&msg));
                                    Event::PropertiesChanged { unit }
                                }
                                None => continue,
                            }
                        }
                        Some(Err(e)) => { debug!(err = %e, "bad PropertiesChanged message"); continue; }
                        None => break,
                    },
                };
                // No receivers is fine: nobody is waiting right now.
                let _ = tx.send(event);
            }
            warn!("systemd signal stream ended (D-Bus connection lost)");
            changes.close();
        });
        Ok(Arc::new(Events { sender, feed, task }))
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }

    /// Change notifications from now on, coalesced per unit ([`ChangeFeed`]).
    pub(crate) fn changes(&self) -> UnitChanges {
        self.feed.subscribe()
    }
}

/// Where change notifications go: one [`UnitChanges`] per subscriber, each coalescing per unit what it has not
/// taken yet. Never lossy and never blocking: however far a subscriber falls behind (a start of 333 units sends
/// 6,000 `PropertiesChanged` signals in a few seconds, which overran a bounded queue and made the publisher read
/// every unit again and again), it holds at most one pending change per unit, the newest values merged.
#[derive(Default)]
pub(crate) struct ChangeFeed {
    subscribers: Mutex<Vec<Weak<Pending>>>,
}

/// One subscriber's pending changes, by unit.
struct Pending {
    units: Mutex<BTreeMap<String, Merged>>,
    /// The feed has ended: once `units` is empty, nothing more comes.
    closed: AtomicBool,
    ready: Notify,
}

impl Pending {
    fn new(closed: bool) -> Arc<Pending> {
        Arc::new(Pending { units: Mutex::new(BTreeMap::new()), closed: AtomicBool::new(closed), ready: Notify::new() })
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
    pub(crate) fn subscribe(&self) -> UnitChanges {
        let pending = Pending::new(false);
        lock(&self.subscribers).push(Arc::downgrade(&pending));
        UnitChanges { pending }
    }

    /// Tells every subscriber that `unit` changed, carrying `reported`.
    pub(crate) fn push(&self, unit: &str, reported: &Reported) {
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

    /// No more changes: each subscriber gets what is pending, then `None`.
    pub(crate) fn close(&self) {
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
        Reported { active: Some((a.into(), "x".into())), restarts: None }
    }

    fn restarts(n: u32) -> Reported {
        Reported { active: None, restarts: Some(n) }
    }

    fn taken(changes: &mut UnitChanges) -> Vec<(String, Reported)> {
        let mut out = Vec::new();
        while let Some(Some(UnitChange::Unit { name, reported })) = changes.recv().now_or_never() {
            out.push((name, reported));
        }
        out
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
        let newest = Reported { active: Some(("active".into(), "x".into())), restarts: Some(9_999) };
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
}

//! The one registry watch behind every open cluster page, and the memory of recent state changes.
//!
//! A [`Hub`] per API handler runs one task on the reflector's snapshot channel. For each new snapshot it computes
//! [`board::diff`] against the previous one, appends the state changes to a bounded per-unit ring
//! ([`HISTORY_PER_UNIT`] entries; a unit's ring goes when the unit leaves the registry) and, when any page is
//! open, serialises the update once into a server-sent-events frame on a broadcast channel of
//! [`FRAMES_BUFFERED`] frames. Each open page holds only a receiver of that channel: no watch, no copy of the
//! board. A page that falls more than [`FRAMES_BUFFERED`] frames behind (its connection not draining) is dropped —
//! its stream ends, and the browser's `EventSource` reconnects after [`RETRY_MS`] and starts again from a fresh
//! board — so a slow page never grows fleetd's memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use serde::Serialize;
use tokio::sync::{broadcast, watch};

use super::board::{self, Recorded, StateChange};
use fleet_core::model::now_ms;
use fleet_registry::Snapshot;

/// The path of the event stream (answered by [`Hub::events`]).
pub const EVENTS_PATH: &str = "/ui/events";
/// Frames kept for pages that have not read them yet; a page further behind is dropped.
pub const FRAMES_BUFFERED: usize = 32;
/// Recent state changes remembered per unit.
pub const HISTORY_PER_UNIT: usize = 16;
/// A comment sent on an idle stream, so that a closed page is noticed (by the failing write) and proxies keep it.
pub const KEEPALIVE: Duration = Duration::from_secs(30);
/// How long a browser waits before reconnecting a dropped stream (the `retry:` field).
pub const RETRY_MS: u64 = 2000;

/// Shares one registry watch among all open pages; dropping it stops the watch task.
pub struct Hub {
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

struct Shared {
    state: Mutex<State>,
    frames: broadcast::Sender<Bytes>,
}

struct State {
    /// The snapshot the last broadcast frame brought pages to.
    snapshot: Arc<Snapshot>,
    history: History,
}

/// Recent changes per unit, each ring at most `limit` long. Kept compact because every fleetd remembers them for
/// every unit whether or not a page is open: the ring is keyed by the unit (not repeated in each entry), and an
/// entry is 16 bytes, its machine ID and change text being numbers into one counted table of the texts entries
/// hold — a thousand units started one way share a handful of texts. (massif, 1,000 started units: 871 KiB as whole
/// [`Recorded`] values, then 600 KiB with a text per entry, then 410 KiB with shared 40-byte entries.)
#[derive(Debug, Default)]
pub struct History {
    per_unit: HashMap<Box<str>, VecDeque<Entry>>,
    texts: Texts,
    limit: usize,
}

/// One remembered change, without its unit.
#[derive(Debug, Clone, Copy)]
struct Entry {
    at_ms: u64,
    machine: Option<TextId>,
    change: TextId,
}

type TextId = std::num::NonZeroU32;

/// The texts entries hold, each once, with how many entries hold it; a text goes when its last entry does.
#[derive(Debug, Default)]
struct Texts {
    ids: HashMap<Arc<str>, TextId>,
    /// By ID - 1: the text and its count; `None` for a free slot.
    slots: Vec<Option<(Arc<str>, u32)>>,
    free: Vec<TextId>,
}

impl Texts {
    /// `text`'s ID, counting one more holder.
    fn hold(&mut self, text: &str) -> TextId {
        if let Some(&id) = self.ids.get(text) {
            if let Some((_, count)) = self.slot(id) {
                *count += 1;
            }
            return id;
        }
        let text: Arc<str> = text.into();
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id.get() as usize - 1] = Some((text.clone(), 1));
                id
            }
            None => {
                self.slots.push(Some((text.clone(), 1)));
                TextId::new(u32::try_from(self.slots.len()).unwrap_or(u32::MAX)).unwrap_or(TextId::MIN)
            }
        };
        self.ids.insert(text, id);
        id
    }

    /// Counts one holder of `id` less, letting the text go with its last.
    fn release(&mut self, id: TextId) {
        let Some((text, count)) = self.slot(id) else { return };
        *count -= 1;
        if *count == 0 {
            let text = text.clone();
            self.ids.remove(&text);
            self.slots[id.get() as usize - 1] = None;
            self.free.push(id);
        }
    }

    fn slot(&mut self, id: TextId) -> Option<&mut (Arc<str>, u32)> {
        self.slots.get_mut(id.get() as usize - 1).and_then(Option::as_mut)
    }

    fn text(&self, id: TextId) -> &str {
        self.slots.get(id.get() as usize - 1).and_then(Option::as_ref).map_or("", |(text, _)| text)
    }

    /// Texts held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.ids.len()
    }
}

impl History {
    pub fn new(limit: usize) -> History {
        History { per_unit: HashMap::new(), texts: Texts::default(), limit }
    }

    /// Remembers `diff`'s changes at `at_ms` and forgets units that left the registry.
    pub fn record(&mut self, diff: &board::Diff, at_ms: u64) {
        for change in &diff.changes {
            let machine = change.machine.as_deref().map(|m| self.texts.hold(m));
            let text = self.texts.hold(&change.change);
            let ring = match self.per_unit.get_mut(change.unit.as_str()) {
                Some(ring) => ring,
                None => self.per_unit.entry(change.unit.as_str().into()).or_default(),
            };
            let dropped = if ring.len() >= self.limit { ring.pop_front() } else { None };
            ring.push_back(Entry { at_ms, machine, change: text });
            if let Some(dropped) = dropped {
                self.let_go(dropped);
            }
        }
        for unit in &diff.gone {
            if let Some(ring) = self.per_unit.remove(unit.as_str()) {
                ring.into_iter().for_each(|entry| self.let_go(entry));
            }
        }
    }

    fn let_go(&mut self, entry: Entry) {
        if let Some(machine) = entry.machine {
            self.texts.release(machine);
        }
        self.texts.release(entry.change);
    }

    /// `unit`'s remembered changes, oldest first.
    pub fn of(&self, unit: &str) -> Vec<Recorded> {
        let Some(ring) = self.per_unit.get(unit) else { return Vec::new() };
        ring.iter()
            .map(|e| Recorded {
                at_ms: e.at_ms,
                change: StateChange {
                    unit: unit.to_string(),
                    machine: e.machine.map(|m| self.texts.text(m).to_string()),
                    change: self.texts.text(e.change).to_string(),
                },
            })
            .collect()
    }

    /// Entries held in all rings.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.per_unit.values().map(VecDeque::len).sum()
    }
}

impl Hub {
    /// Starts following `snapshots` (the reflector's channel) in a background task.
    pub fn start(snapshots: watch::Receiver<Arc<Snapshot>>) -> Hub {
        let (frames, _) = broadcast::channel(FRAMES_BUFFERED);
        let first = snapshots.borrow().clone();
        let shared = Arc::new(Shared {
            state: Mutex::new(State { snapshot: first, history: History::new(HISTORY_PER_UNIT) }),
            frames,
        });
        let task = tokio::spawn(follow(shared.clone(), snapshots)).abort_handle();
        Hub { shared, task }
    }

    /// The snapshot open pages are at (what a detail should show next to [`Hub::history`]).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.lock().snapshot.clone()
    }

    /// `unit`'s remembered changes, oldest first.
    pub fn history(&self, unit: &str) -> Vec<Recorded> {
        self.shared.lock().history.of(unit)
    }

    /// Pages open now.
    pub fn pages(&self) -> usize {
        self.shared.frames.receiver_count()
    }

    /// A new page's event stream: the whole board, then each update, keep-alive comments while idle. The board and
    /// the first update are taken under one lock, so a page misses no change and sees none twice.
    pub fn events(&self) -> impl Stream<Item = Bytes> + Send + 'static {
        let (snapshot, receiver) = {
            let state = self.shared.lock();
            (state.snapshot.clone(), self.shared.frames.subscribe())
        };
        tracing::debug!(pages = self.pages(), "cluster page opened");
        let mut first = format!("retry: {RETRY_MS}\n").into_bytes();
        first.extend_from_slice(&frame("board", &board::board(&snapshot)));
        let keepalive = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        let pump = Pump { first: Some(Bytes::from(first)), receiver, keepalive };
        futures::stream::unfold(pump, |mut pump| async move {
            if let Some(first) = pump.first.take() {
                return Some((first, pump));
            }
            tokio::select! {
                received = pump.receiver.recv() => match received {
                    Ok(frame) => Some((frame, pump)),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::info!(missed, "cluster page dropped: it fell behind the registry's updates");
                        None
                    }
                    Err(broadcast::error::RecvError::Closed) => None,
                },
                _ = pump.keepalive.tick() => Some((Bytes::from_static(b": keepalive\n\n"), pump)),
            }
        })
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Brings pages and history from the last snapshot to `new`.
    fn advance(&self, new: Arc<Snapshot>, at_ms: u64) {
        let mut state = self.lock();
        let diff = board::diff(&state.snapshot, &new);
        state.history.record(&diff, at_ms);
        let connection_changed = state.snapshot.is_connected() != new.is_connected();
        state.snapshot = new;
        // Sent under the lock: a page subscribing now gets either this snapshot's board or this frame, never neither.
        if (!diff.update.is_empty() || connection_changed) && self.frames.receiver_count() > 0 {
            let _ = self.frames.send(frame("update", &diff.update));
        }
    }
}

struct Pump {
    first: Option<Bytes>,
    receiver: broadcast::Receiver<Bytes>,
    keepalive: tokio::time::Interval,
}

async fn follow(shared: Arc<Shared>, mut snapshots: watch::Receiver<Arc<Snapshot>>) {
    while snapshots.changed().await.is_ok() {
        let new = snapshots.borrow_and_update().clone();
        shared.advance(new, now_ms());
    }
}

/// One server-sent event: `event: <name>` and the value as one line of JSON (JSON text has no raw newlines).
pub fn frame<T: Serialize>(event: &str, value: &T) -> Bytes {
    let json = serde_json::to_string(value).unwrap_or_else(|err| {
        tracing::error!(error = %err, "cannot encode a cluster page event");
        "{}".into()
    });
    Bytes::from(format!("event: {event}\ndata: {json}\n\n"))
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::super::board::tests::{H1, M1, Registry};
    use super::*;

    fn text(frame: &Bytes) -> String {
        String::from_utf8(frame.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_page_gets_the_board_then_each_change_from_the_one_shared_watch() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}").unit("a.service", H1, "launched").target("a.service", M1);
        let (publish, snapshots) = watch::channel(Arc::new(r.now()));
        let hub = Hub::start(snapshots);
        let mut page = Box::pin(hub.events());
        let mut other = Box::pin(hub.events());
        assert_eq!(hub.pages(), 2, "two pages, one receiver each");
        let board = text(&page.next().await.unwrap());
        assert!(board.starts_with("retry: 2000\nevent: board\ndata: {"), "{board}");
        assert!(board.contains("\"active\":\"scheduled\""), "{board}");
        let _ = other.next().await;

        r.state("a.service", M1, H1, "active", "running");
        publish.send_replace(Arc::new(r.now()));
        for stream in [&mut page, &mut other] {
            let update = text(&stream.next().await.unwrap());
            assert!(update.starts_with("event: update\ndata: {"), "{update}");
            assert!(update.contains("\"active\":\"active\",\"sub\":\"running\""), "{update}");
            assert!(update.ends_with("}\n\n"), "{update}");
        }
        let history = hub.history("a.service");
        assert_eq!(history.len(), 1, "{history:?}");
        assert_eq!(history[0].change.change, "scheduled → active/running");
    }

    #[tokio::test]
    async fn a_page_that_falls_behind_is_dropped_not_buffered() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}").unit("a.service", H1, "launched").target("a.service", M1);
        let (_publish, snapshots) = watch::channel(Arc::new(r.now()));
        let hub = Hub::start(snapshots);
        let mut slow = Box::pin(hub.events());
        let _ = slow.next().await;
        // More updates than the buffer holds while the page reads nothing (applied as the hub's task would).
        for i in 0..FRAMES_BUFFERED + 5 {
            r.state("a.service", M1, H1, "active", &format!("step{i}"));
            hub.shared.advance(Arc::new(r.now()), 0);
        }
        let mut received = 0;
        while let Some(frame) = slow.next().await {
            received += 1;
            assert!(received <= FRAMES_BUFFERED, "a lagging page kept receiving: {}", text(&frame));
        }
        assert_eq!(received, 0, "the lagging page's stream ended at once");
        assert_eq!(hub.pages(), 0, "the dropped page holds no receiver");
    }

    #[test]
    fn history_is_bounded_per_unit_and_forgets_destroyed_units() {
        let mut history = History::new(3);
        let change =
            |unit: &str, n: usize| board::StateChange { unit: unit.into(), machine: None, change: n.to_string() };
        let diff = board::Diff {
            changes: (0..5).map(|n| change("a", n)).chain([change("b", 9)]).collect(),
            ..Default::default()
        };
        history.record(&diff, 7);
        let kept: Vec<String> = history.of("a").into_iter().map(|r| r.change.change).collect();
        assert_eq!(kept, ["2", "3", "4"]);
        assert_eq!(history.len(), 4);
        history.record(&board::Diff { gone: vec!["a".into()], ..Default::default() }, 8);
        assert!(history.of("a").is_empty());
        assert_eq!(history.len(), 1);
    }

    #[test]
    fn history_matches_a_plain_model_and_holds_exactly_the_texts_its_entries_name() {
        use std::collections::{BTreeMap, BTreeSet};
        let mut history = History::new(3);
        let mut model: BTreeMap<String, VecDeque<Recorded>> = BTreeMap::new();
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for at_ms in 0..3000 {
            let mut diff = board::Diff::default();
            for _ in 0..next(4) {
                let change = board::StateChange {
                    unit: format!("u{}", next(6)),
                    machine: (next(3) > 0).then(|| format!("m{}", next(4))),
                    change: format!("c{}", next(9)),
                };
                let ring = model.entry(change.unit.clone()).or_default();
                if ring.len() == 3 {
                    ring.pop_front();
                }
                ring.push_back(Recorded { at_ms, change: change.clone() });
                diff.changes.push(change);
            }
            if next(10) == 0 {
                let gone = format!("u{}", next(6));
                model.remove(&gone);
                diff.gone.push(gone);
            }
            history.record(&diff, at_ms);
            for (unit, ring) in &model {
                assert_eq!(history.of(unit), ring.iter().cloned().collect::<Vec<_>>(), "{unit} at {at_ms}");
            }
            let named: BTreeSet<&str> = model
                .values()
                .flatten()
                .flat_map(|r| [Some(r.change.change.as_str()), r.change.machine.as_deref()])
                .flatten()
                .collect();
            assert_eq!(history.texts.len(), named.len(), "texts held at {at_ms}: {:?} vs {named:?}", history.texts);
        }
    }

    #[test]
    fn texts_that_rotated_out_of_every_ring_are_let_go() {
        let mut history = History::new(2);
        for i in 0..1000 {
            let change = board::StateChange { unit: "a".into(), machine: None, change: format!("version {i}") };
            history.record(&board::Diff { changes: vec![change], ..Default::default() }, i);
        }
        assert_eq!(history.len(), 2);
        assert_eq!(history.texts.len(), 2, "texts kept for the 2 entries left in the ring");
        let kept: Vec<String> = history.of("a").into_iter().map(|r| r.change.change).collect();
        assert_eq!(kept, ["version 998", "version 999"]);
    }

    #[test]
    fn history_gives_back_each_change_as_recorded_and_lets_gone_machines_go() {
        let mut history = History::new(4);
        let on = |unit: &str, machine: Option<&str>, text: &str| board::StateChange {
            unit: unit.into(),
            machine: machine.map(Into::into),
            change: text.into(),
        };
        let changes = vec![on("a", Some("m1"), "scheduled → active/running"), on("a", None, "destroyed")];
        history.record(&board::Diff { changes: changes.clone(), ..Default::default() }, 42);
        history.record(&board::Diff { changes: vec![on("b", Some("m1"), "x")], ..Default::default() }, 43);
        let got = history.of("a");
        assert_eq!(got.iter().map(|r| r.at_ms).collect::<Vec<_>>(), [42, 42]);
        assert_eq!(got.into_iter().map(|r| r.change).collect::<Vec<_>>(), changes);
        assert_eq!(history.texts.len(), 4, "one shared copy of m1 and of each text: {:?}", history.texts);
        history.record(&board::Diff { gone: vec!["a".into(), "b".into()], ..Default::default() }, 44);
        assert_eq!(history.texts.len(), 0, "no entry holds m1 or a text any more: {:?}", history.texts);
    }
}

//! The state-publishing half of a running agent (spec §7.5): follows the loaded set and systemd's change
//! notifications, reads the states of the loaded units, and writes the differences to this machine's
//! `P/states/<name>/<machine>` keys (bound to its lease; never another machine's keys, B7).
//!
//! Triggers: a unit file written or removed, a systemd change of a loaded unit (with the values its signals
//! carried, [`Readings`]), a health check whose status changed or a (re)start by the agent of a checked unit
//! ([`HealthChecks`]: the `health` of each checked unit goes into its state), a new snapshot while a unit's check
//! is undecided (its version's text was not readable yet), a failed write (retried after
//! [`RETRY`]), and every `refresh_period(ttl)` a resync that re-reads every state and repairs this machine's keys
//! against the registry snapshot. Rounds are paced: [`ROUND_BURST`] at once after a quiet spell, then one per
//! [`ROUND_GAP`]; a round that carries the outcome of the agent's own start has a second lane of the same shape
//! ([`Pace`], [`AwaitedStarts`]). A write that keeps failing (etcd at its space quota, or unreachable) is retried and logged as
//! [`WriteFailures`] decides: once per unit and cause, not once per retry. It runs beside the
//! reconcile loop on its own systemd handle, so a long stop job in a plan never delays publishing (that is how other machines see a unit
//! `deactivating` and wait for it, see [`super::handover`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval_at, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::checks::HealthChecks;
use super::debug::DebugHandle;
use super::loaded::{Loaded, launched_changes};
use super::publisher::{PublishOp, Publisher, Readings};
use super::timing::{AwaitedStarts, Pace, start_outcome};
use super::write_failures::{Report, WriteFailures};
use fleet_core::model::PublishedState;
use fleet_registry::{
    AgentSession, MAX_STATE_WRITES_PER_TXN, RegistryError, Snapshot, StateRecord, StateWrite, txn_batches,
};
use fleet_systemd::{SystemdOps, UnitChange, UnitChanges};

/// Delay before repeating failed registry writes or a failed systemd read.
pub const RETRY: Duration = Duration::from_secs(1);
/// Longest wait for the registry view's first list before the first publishing round.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);
/// Registry writes in flight at once.
const WRITERS: usize = 8;
/// Time between the starts of two publishing rounds in a stream of changes ([`super::timing::RoundPacer`]). A start of hundreds of
/// units brings thousands of signals within seconds; a round for each wave as it came made one transaction every
/// few milliseconds, each applied by every fleetd's view. Waiting this long collects the waves into fewer, larger
/// rounds, and a unit that passed through a state meanwhile (`activating`) has only its newest one written.
pub const ROUND_GAP: Duration = Duration::from_millis(50);
/// Rounds that write, published at once after a quiet spell, before [`ROUND_GAP`] applies. A rolling step writes
/// its machine's state more than three times within 20–30 ms (the new version's hash, the stop, the start, the
/// launched hash): a fixed gap held each write for the rest of the 50 ms after the previous one, and a step took 54–58 ms
/// against a floor of about 20 (a burst of 3 still took 52–59 ms; of 8, 27–29 ms). A mass start pays at most 7
/// more transactions per machine per quiet spell (175–218 etcd revisions in a start of 1,000, against 133–187).
pub const ROUND_BURST: u32 = 8;

/// How a publishing round went.
struct Round {
    /// Every write succeeded (or there was none).
    ok: bool,
    /// It wrote to etcd (or tried to).
    wrote: bool,
}

/// The cause of a failed state write, as logged; etcd's space quota by its name and what ends it.
fn cause(err: &RegistryError) -> String {
    if err.is_no_space() {
        format!(
            "{}; states are published again once it is compacted, defragmented and disarmed",
            fleet_registry::NO_SPACE
        )
    } else {
        err.to_string()
    }
}

/// Everything one publishing run needs; the caches it updates outlive it (they belong to the agent).
pub(crate) struct PublishLoop<'a, S> {
    pub registry: &'a AgentSession,
    pub systemd: &'a S,
    pub machine: &'a str,
    pub lease: i64,
    pub period: Duration,
    pub publisher: &'a mut Publisher,
    pub loaded: watch::Receiver<Arc<Loaded>>,
    /// Layout 2: the launched markers are folded into the states, and a unit a run loads to start it is not
    /// shown while still `inactive` ([`Loaded::holds_back`]).
    pub fold: bool,
    /// The launched hashes and fresh units the last round saw (layout 2): the units whose entry changed are
    /// computed again.
    pub launched: BTreeMap<String, String>,
    pub fresh: BTreeSet<String>,
    pub changes: &'a mut UnitChanges,
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    pub debug: &'a DebugHandle,
    pub health: &'a mut HealthChecks<S>,
    /// Which units' state writes are failing, so that a retry is not logged each time.
    pub failures: WriteFailures,
}

impl<S: SystemdOps + Clone + 'static> PublishLoop<'_, S> {
    /// Publishes until `stop` is cancelled. Starts by re-publishing every state it published before, binding
    /// them to this run's lease.
    pub async fn run(mut self, stop: CancellationToken) {
        let rebind = self.publisher.refresh();
        if !rebind.is_empty() {
            debug!(
                states = rebind.len(),
                lease = format_args!("{:x}", self.lease),
                "re-publishing under the new lease"
            );
        }
        let mut retry_at = (!self.write(rebind).await).then(|| Instant::now() + RETRY);
        // The first round takes the health a checked unit had before a restart of fleetd from this machine's stored
        // states, which the view holds once it has listed (a scoped view lists more than its prefix: its own states
        // by its lease): wait for that, a while at most (etcd may be out of reach).
        let mut listed = self.snapshots.clone();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::timeout(FIRST_LIST_WAIT, listed.wait_for(|s| s.is_connected())) => {}
        }
        let mut dirty = true;
        let mut dbus_open = true;
        let mut resync = interval_at(Instant::now() + self.period, self.period);
        // A round slower than the period must not make the next rounds resyncs back to back.
        resync.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // States and restart counters: taken from change signals, read only where no signal told (every state at
        // the start and on resync).
        let mut readings = Readings::new();
        let mut pace = Pace::new(ROUND_GAP, ROUND_BURST, Instant::now());
        let mut awaited = AwaitedStarts::default();
        let starts = self.health.starts();
        loop {
            let release_at = self.loaded.borrow().next_release(self.fold, Instant::now());
            let urgent = dirty && awaited.any(|unit| readings.may_have_changed(unit));
            let lane = if dirty { pace.lane(Instant::now(), urgent) } else { None };
            if let Some(lane) = lane {
                dirty = false;
                let started = Instant::now();
                self.drain_changes(&mut readings);
                let round = self.publish_current(&mut readings).await;
                // Only a round that wrote counts against the pace: one that found nothing new to publish (a
                // loaded-set change, a signal of a state held back or already shown) cost etcd nothing.
                if round.wrote {
                    pace.started(lane, started);
                }
                if !round.ok {
                    retry_at = retry_at.or(Some(Instant::now() + RETRY));
                }
                if !awaited.is_empty() {
                    let (loaded, published) = (self.loaded.borrow(), self.publisher.published());
                    awaited.settle(Instant::now(), |unit| match (loaded.hashes.get(unit), published.get(unit)) {
                        (Some(hash), Some(state)) => start_outcome(&state.active_state, &state.hash, hash),
                        (Some(_), None) => false,
                        (None, _) => true,
                    });
                }
            }
            let next_round = pace.earliest(urgent);
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                changed = self.loaded.changed() => match changed {
                    Ok(()) => dirty = true,
                    Err(_) => return,
                },
                change = self.changes.recv(), if dbus_open => match change {
                    Some(change) => dirty |= self.take(&mut readings, change),
                    None => {
                        warn!("systemd change notifications ended; publishing on the resync period only");
                        dbus_open = false;
                    }
                },
                _ = resync.tick() => {
                    if !self.repair().await {
                        retry_at = retry_at.or(Some(Instant::now() + RETRY));
                    }
                    readings.read_all_states();
                    dirty = true;
                }
                done = self.health.next_done() => {
                    if let Some(unit) = done.and_then(|done| self.health.take_done(done)) {
                        readings.touch(&unit);
                        dirty = true;
                    }
                }
                // A unit published `unknown` because its version's text was not readable yet: decided again with
                // each new snapshot (which may carry the body).
                changed = self.snapshots.changed(), if self.health.has_undecided() => {
                    if changed.is_err() {
                        return;
                    }
                    self.snapshots.borrow_and_update();
                    for unit in self.health.undecided() {
                        readings.touch(&unit);
                    }
                    dirty = true;
                }
                () = starts.reported() => {
                    let snapshot = Arc::clone(&self.snapshots.borrow());
                    let loaded = Arc::clone(&self.loaded.borrow().hashes);
                    for unit in self.health.take_starts(&snapshot, &loaded) {
                        readings.touch(&unit);
                    }
                    let now = Instant::now();
                    for unit in starts.take_started() {
                        readings.touch(&unit);
                        awaited.started(unit, now);
                    }
                    dirty = true;
                }
                _ = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    retry_at = None;
                    dirty = true;
                }
                _ = sleep_until(next_round), if dirty => {}
                // A fresh unit whose start has not begun is shown at the end of its hold.
                _ = sleep_until(release_at.unwrap_or_else(Instant::now)), if release_at.is_some() => {
                    for unit in &self.fresh {
                        readings.touch(unit);
                    }
                    dirty = true;
                }
            }
        }
    }

    /// Takes the change notifications already queued.
    fn drain_changes(&mut self, readings: &mut Readings) {
        while let Some(Some(change)) = self.changes.recv().now_or_never() {
            self.take(readings, change);
        }
    }

    /// Notes a change of a loaded unit (others are no concern of the publisher), or that every state must be read
    /// again; true if it was either.
    fn take(&self, readings: &mut Readings, change: UnitChange) -> bool {
        match change {
            UnitChange::Unit { name, reported } => {
                let loaded = self.loaded.borrow().hashes.contains_key(&name);
                if loaded {
                    readings.note(&name, &reported);
                }
                loaded
            }
            UnitChange::Missed => {
                readings.read_all_states();
                true
            }
        }
    }

    /// Reads what no change signal told of the loaded units' states and services' restart counters, and writes
    /// what changed. False if anything failed.
    async fn publish_current(&mut self, readings: &mut Readings) -> Round {
        let loaded = Arc::clone(&self.loaded.borrow_and_update());
        let hashes = Arc::clone(&loaded.hashes);
        if self.fold && self.launched != loaded.launched {
            for unit in launched_changes(&self.launched, &loaded.launched) {
                readings.touch(unit);
            }
            self.launched.clone_from(&loaded.launched);
        }
        if self.fold && !self.fresh.iter().eq(loaded.fresh.keys()) {
            for unit in self.fresh.iter().filter(|u| !loaded.fresh.contains_key(*u)) {
                readings.touch(unit);
            }
            self.fresh = loaded.fresh.keys().cloned().collect();
        }
        let loaded_changed = readings.took_loaded(&hashes);
        let at = Instant::now();
        let names = readings.states_to_read_deferring(&hashes, |unit| loaded.in_hold(self.fold, unit, at));
        let read = match self.systemd.states(&names).await {
            Ok(s) => s,
            Err(e) => {
                warn!(err = %e, units = names.len(), "cannot read unit states from systemd");
                return Round { ok: false, wrote: false };
            }
        };
        readings.took_states(&hashes, read);
        let counters = readings.restarts_to_read();
        readings.took_restarts(self.systemd.restart_counts(&counters).await);
        if loaded_changed {
            self.health.loaded_changed(&hashes);
        }
        let mut now = readings.states_now(self.machine, &hashes, self.fold.then_some(&loaded.launched));
        let snapshot = Arc::clone(&self.snapshots.borrow());
        self.health.round(&mut now, readings, &snapshot);
        let at = Instant::now();
        now.hold_back(|state| loaded.holds_back(self.fold, state, at));
        let ops = self.publisher.changes_now(&now);
        let wrote = !ops.is_empty();
        let ok = self.write(ops).await;
        if ok {
            self.health.published();
        } else {
            // The publisher forgot what failed; only a full comparison finds it again.
            readings.touch_all();
        }
        if loaded_changed {
            self.debug.set_subscribed(hashes.keys().cloned());
        }
        Round { ok, wrote }
    }

    /// Repairs this machine's keys against the registry snapshot (written by someone else, lost with an old
    /// lease, or left by an earlier incarnation). False if a write failed.
    async fn repair(&mut self) -> bool {
        let snapshot = Arc::clone(&self.snapshots.borrow());
        if !snapshot.is_connected() {
            return true;
        }
        let stored: BTreeMap<String, StateRecord> = snapshot
            .state_records()
            .iter()
            .filter_map(|(unit, per_machine)| per_machine.get(self.machine).map(|r| (unit.to_string(), r.clone())))
            .collect();
        let hashes = Arc::clone(&self.loaded.borrow().hashes);
        let loaded: BTreeSet<&str> = hashes.keys().map(String::as_str).collect();
        let ops = self.publisher.repair(&stored, &loaded);
        if !ops.is_empty() {
            debug!(ops = ops.len(), "repairing this machine's unit states in the registry");
        }
        self.write(ops).await
    }

    /// Writes `ops` (in transactions of many, a few transactions at a time); failed ones are handed back to the publisher for the next round. True if
    /// all succeeded.
    async fn write(&mut self, ops: Vec<PublishOp>) -> bool {
        if ops.is_empty() {
            return true;
        }
        let (registry, machine) = (self.registry, self.machine);
        let results: Vec<(&[PublishOp], Result<(), String>)> =
            futures::stream::iter(txn_batches(&ops, MAX_STATE_WRITES_PER_TXN, PublishOp::unit))
                .map(|chunk| async move {
                    let writes: Vec<StateWrite<'_>> = chunk
                        .iter()
                        .map(|op| match op {
                            PublishOp::Publish(s) => StateWrite::Publish(s),
                            PublishOp::Remove(name) => StateWrite::Remove { unit: name, machine },
                        })
                        .collect();
                    let result = registry.write_states(&writes).await.map_err(|e| cause(&e));
                    (chunk, result)
                })
                .buffer_unordered(WRITERS)
                .collect()
                .await;
        let mut pending: BTreeMap<String, Option<PublishedState>> = BTreeMap::new();
        for (op, result) in results.iter().flat_map(|(chunk, result)| chunk.iter().map(move |op| (op, result))) {
            if result.is_ok()
                && let Some(failed) = self.failures.succeeded(op.unit())
            {
                info!(unit = %op.unit(), failed, "unit state written again after {failed} failed attempts");
            }
            match (op, result) {
                (PublishOp::Publish(s), Ok(())) => {
                    debug!(unit = %s.name, active = %s.active_state, sub = %s.sub_state, hash = %s.hash, "published unit state")
                }
                (PublishOp::Remove(name), Ok(())) => debug!(unit = %name, "removed unit state"),
                (_, Err(e)) => {
                    let (name, state) = match op {
                        PublishOp::Publish(s) => (s.name.clone(), Some(s.clone())),
                        PublishOp::Remove(n) => (n.clone(), None),
                    };
                    match self.failures.failed(&name, e) {
                        Report::First => warn!(unit = %name, cause = %e,
                            "cannot publish unit state; retrying (logged again only if the cause changes or it goes on)"),
                        Report::Still { count } => {
                            warn!(unit = %name, cause = %e, "still cannot publish unit state after {count} attempts; retrying")
                        }
                        Report::Quiet => debug!(unit = %name, cause = %e, "cannot publish unit state; retrying"),
                    }
                    self.publisher.failed(op);
                    pending.insert(name, state);
                }
            }
        }
        let ok = pending.is_empty();
        if ok {
            self.failures.settled();
        }
        self.debug.sync_published(self.publisher.published(), ops.iter().map(PublishOp::unit), pending);
        ok
    }
}

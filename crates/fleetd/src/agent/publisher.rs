//! Which unit states to publish (spec §7.5): a pure diff between what was last published and what systemd reports
//! now, for this machine's units only (B7: removing a state removes only this machine's entry). The registry
//! writes are done by the caller; a failed write is handed back with [`Publisher::failed`] and retried.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fleet_core::model::PublishedState;
use fleet_registry::StateRecord;
use fleet_systemd::{Reported, UnitStatus};

/// One registry write for this machine's unit states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOp {
    /// Write this machine's state of the unit (with TTL).
    Publish(PublishedState),
    /// Delete this machine's state of the unit (and nothing else: B7).
    Remove(String),
}

impl PublishOp {
    /// The unit this write is about.
    pub fn unit(&self) -> &str {
        match self {
            PublishOp::Publish(state) => &state.name,
            PublishOp::Remove(name) => name,
        }
    }
}

/// The states to publish for the units the agent has loaded: systemd's load/active/sub state joined with the hash
/// recorded for the unit file and, for a service that [`counts_restarts`], its restart counter from `restarts`,
/// and, where `launched` is given (layout 2: the launched markers folded into the states), the hash the machine
/// started. Units systemd did not report are left out.
pub fn unit_states<'a>(
    machine_id: &str,
    statuses: impl IntoIterator<Item = &'a UnitStatus>,
    hashes: &BTreeMap<String, String>,
    restarts: &BTreeMap<String, u32>,
    launched: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, PublishedState> {
    statuses
        .into_iter()
        .filter_map(|s| {
            let hash = hashes.get(&s.name)?;
            let state = PublishedState {
                name: s.name.clone(),
                machine_id: machine_id.to_string(),
                hash: hash.clone(),
                load_state: s.load_state.clone(),
                active_state: s.active_state.clone(),
                sub_state: s.sub_state.clone(),
                restarts: if counts_restarts(s) { restarts.get(&s.name).copied() } else { None },
                health: None,
                launched: launched.and_then(|l| l.get(&s.name).cloned()),
            };
            Some((s.name.clone(), state))
        })
        .collect()
}

/// Whether the unit's restart counter (`NRestarts`) is published with its state: a loaded service that is active or
/// on its way there (a restart by systemd passes through `activating`).
pub fn counts_restarts(s: &UnitStatus) -> bool {
    s.name.ends_with(".service")
        && s.load_state == "loaded"
        && matches!(s.active_state.as_str(), "active" | "activating" | "reloading")
}

/// What the publisher knows of systemd's view of the loaded units — each one's state and each service's restart
/// counter (`NRestarts`) — and what it must read from systemd again.
///
/// systemd announces every change of a unit with `PropertiesChanged` signals that carry the new values: the Unit
/// interface's `ActiveState` and `SubState`, the Service interface's `NRestarts`. Those are taken from the signal
/// ([`Readings::note`]); only what no signal carried is read (`ListUnitsByNames` for states, one `Get` per
/// counter): a unit seen for the first time (its load state, which no signal carries), one whose notification
/// carried nothing, every state at the start and on resync (one call), and the counter of a service whose state
/// read differs from what the signals said (a sign that some were missed). Reading the counter of every changed
/// service cost PID 1 two calls per unit per change (4,000 of the 4,500 calls of a start of 333 units), and so did
/// reading every counter at each resync (every 1.5 s with `agent_ttl=3s`, back to back while rounds were slow). A
/// signal applied after a read that overtook it is no harm: the last signal of a unit carries its current values,
/// since any later change sends another.
#[derive(Debug, Default)]
pub struct Readings {
    statuses: BTreeMap<String, UnitStatus>,
    restarts: BTreeMap<String, u32>,
    /// When each unit last entered `active` (`ActiveEnterTimestampMonotonic`), as its signals carried it (health
    /// checks tell restarts by it; never read from systemd).
    entered: BTreeMap<String, u64>,
    /// Units whose state must be read (a notification carried none of it).
    stale_states: BTreeSet<String>,
    /// Services whose restart counter must be read.
    stale_restarts: BTreeSet<String>,
    /// Read every state.
    all_states: bool,
    /// Units whose state to publish may have changed since [`Self::states_now`] last looked (a signal, a read).
    touched: BTreeSet<String>,
    /// Every unit's state to publish must be computed again: at the start, on resync, when the loaded set changed.
    all_touched: bool,
    /// The loaded set (unit → hash) the last round saw, compared by identity.
    loaded: Option<Arc<BTreeMap<String, String>>>,
}

/// The states to publish now, from [`Readings::states_now`].
#[derive(Debug, Clone, PartialEq)]
pub enum StatesNow {
    /// Every loaded unit's state systemd reported.
    All(BTreeMap<String, PublishedState>),
    /// Only units that may have changed (`names`), with the states of those systemd reported; every other unit's
    /// state is as last computed.
    Touched { names: BTreeSet<String>, states: BTreeMap<String, PublishedState> },
}

impl StatesNow {
    /// Leaves out the states `hold_back` says not to publish yet (an absent state of a published unit withdraws
    /// it, as for a unit no longer loaded).
    pub fn hold_back(&mut self, hold_back: impl Fn(&PublishedState) -> bool) {
        match self {
            StatesNow::All(states) | StatesNow::Touched { states, .. } => states.retain(|_, s| !hold_back(s)),
        }
    }
}

impl Readings {
    /// Nothing known yet: the first round reads everything.
    pub fn new() -> Readings {
        Readings { all_states: true, all_touched: true, ..Readings::default() }
    }

    /// The loaded set (unit → hash) this round works with; true if it is not the one the last round saw (every
    /// state is then computed again: a unit loaded, gone or with a new hash).
    pub fn took_loaded(&mut self, loaded: &Arc<BTreeMap<String, String>>) -> bool {
        if self.loaded.as_ref().is_some_and(|seen| Arc::ptr_eq(seen, loaded)) {
            return false;
        }
        self.loaded = Some(Arc::clone(loaded));
        self.all_touched = true;
        true
    }

    /// Compute every state to publish again in the next [`Self::states_now`] (after a failed write).
    pub fn touch_all(&mut self) {
        self.all_touched = true;
    }

    /// When `name` last entered `active`, if a signal told.
    pub fn entered(&self, name: &str) -> Option<u64> {
        self.entered.get(name).copied()
    }

    /// Whether `name`'s state to publish may have changed since [`Self::states_now`] last looked.
    pub fn may_have_changed(&self, name: &str) -> bool {
        self.all_touched || self.touched.contains(name)
    }

    /// Compute `name`'s state to publish again in the next [`Self::states_now`] (its health changed).
    pub fn touch(&mut self, name: &str) {
        self.touched.insert(name.to_string());
    }

    /// A change notification of `name` carrying `reported`.
    pub fn note(&mut self, name: &str, reported: &Reported) {
        self.touched.insert(name.to_string());
        if let Some(t) = reported.entered {
            self.entered.insert(name.to_string(), t);
        }
        if let Some(n) = reported.restarts {
            self.restarts.insert(name.to_string(), n);
            self.stale_restarts.remove(name);
        }
        match (&reported.active, self.statuses.get_mut(name)) {
            (Some((active, sub)), Some(status)) => {
                status.active_state.clone_from(active);
                status.sub_state.clone_from(sub);
            }
            (Some(_), None) => {
                self.stale_states.insert(name.to_string());
            }
            (None, _) if reported.restarts.is_none() => {
                self.stale_states.insert(name.to_string());
                self.stale_restarts.insert(name.to_string());
            }
            (None, _) => {}
        }
    }

    /// A resync is due: read every state again.
    pub fn read_all_states(&mut self) {
        self.all_states = true;
        self.all_touched = true;
    }

    /// The loaded units (`loaded`: unit → hash) whose state must be read now: every one after [`Self::read_all_states`],
    /// else those no signal told about and those with no state read yet.
    pub fn states_to_read(&self, loaded: &BTreeMap<String, String>) -> Vec<String> {
        self.states_to_read_deferring(loaded, |_| false)
    }

    /// [`Self::states_to_read`], leaving out a unit `deferred` names while it has no state read yet and no signal
    /// told of it: one whose state would not be shown yet anyway (a unit a run loads to start it, in layout 2). A
    /// read by name makes systemd load a unit it does not hold and drop it again at once, each drop walking every
    /// member of its slice; once its start has loaded it, its first signal makes it due.
    pub fn states_to_read_deferring(
        &self,
        loaded: &BTreeMap<String, String>,
        deferred: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        loaded
            .keys()
            .filter(|name| {
                self.all_states
                    || self.stale_states.contains(*name)
                    || (!self.statuses.contains_key(*name) && !deferred(name))
            })
            .cloned()
            .collect()
    }

    /// Takes the states read (those [`Self::states_to_read`] named), forgetting the units no longer loaded. A
    /// state that differs from what the signals said makes the unit's counter stale too.
    pub fn took_states(&mut self, loaded: &BTreeMap<String, String>, read: Vec<UnitStatus>) {
        self.statuses.retain(|name, _| loaded.contains_key(name));
        self.restarts.retain(|name, _| loaded.contains_key(name));
        self.entered.retain(|name, _| loaded.contains_key(name));
        for status in read {
            let differs = self.statuses.get(&status.name).is_some_and(|known| {
                (&known.active_state, &known.sub_state) != (&status.active_state, &status.sub_state)
            });
            if differs {
                self.stale_restarts.insert(status.name.clone());
            }
            self.touched.insert(status.name.clone());
            self.statuses.insert(status.name.clone(), status);
        }
        self.stale_states.clear();
        self.all_states = false;
    }

    /// The services whose restart counter must be read now: those that [`counts_restarts`] and either have no
    /// known counter or a stale one.
    pub fn restarts_to_read(&self) -> Vec<String> {
        self.statuses
            .values()
            .filter(|s| {
                counts_restarts(s) && (self.stale_restarts.contains(&s.name) || !self.restarts.contains_key(&s.name))
            })
            .map(|s| s.name.clone())
            .collect()
    }

    /// Takes the counters read (those [`Self::restarts_to_read`] named, after [`Self::took_states`]): the round
    /// is complete.
    pub fn took_restarts(&mut self, read: Vec<(String, u32)>) {
        self.touched.extend(read.iter().map(|(name, _)| name.clone()));
        self.restarts.extend(read);
        self.stale_restarts.clear();
    }

    /// The states to publish now ([`unit_states`] of what is known).
    pub fn unit_states(
        &self,
        machine_id: &str,
        hashes: &BTreeMap<String, String>,
        launched: Option<&BTreeMap<String, String>>,
    ) -> BTreeMap<String, PublishedState> {
        unit_states(machine_id, self.statuses.values(), hashes, &self.restarts, launched)
    }

    /// The states to publish now, for the units that may have changed since the last call (all of them when
    /// [`Self::took_loaded`], a resync or [`Self::touch_all`] asked): a round during a start of hundreds of units
    /// costs the few that changed, not a copy of every state.
    pub fn states_now(
        &mut self,
        machine_id: &str,
        hashes: &BTreeMap<String, String>,
        launched: Option<&BTreeMap<String, String>>,
    ) -> StatesNow {
        let names = std::mem::take(&mut self.touched);
        if std::mem::take(&mut self.all_touched) {
            return StatesNow::All(self.unit_states(machine_id, hashes, launched));
        }
        let statuses = names.iter().filter_map(|n| self.statuses.get(n));
        let states = unit_states(machine_id, statuses, hashes, &self.restarts, launched);
        StatesNow::Touched { names, states }
    }
}

/// Operations that turn `last` (published) into `now` (current), in unit-name order. States without a hash or
/// machine are never published (§7.5).
pub fn diff(
    last: &BTreeMap<String, impl Borrow<PublishedState>>,
    now: &BTreeMap<String, PublishedState>,
) -> Vec<PublishOp> {
    let names: BTreeSet<&String> = last.keys().chain(now.keys()).collect();
    names.into_iter().filter_map(|name| change(name, last.get(name).map(Borrow::borrow), now.get(name))).collect()
}

/// The operation that turns unit `name`'s published state `last` into `now`, if any (an unpublishable state is
/// withdrawn, §7.5).
fn change(name: &str, last: Option<&PublishedState>, now: Option<&PublishedState>) -> Option<PublishOp> {
    match (last, now.filter(|s| publishable(s))) {
        (last, Some(current)) if last != Some(current) => Some(PublishOp::Publish(current.clone())),
        (Some(_), None) => Some(PublishOp::Remove(name.to_string())),
        _ => None,
    }
}

/// Ops that repair this machine's states as the registry holds them (`stored`: unit → record, from a snapshot)
/// against what the agent published: missing or different states are written again, and states of units the
/// agent neither published nor has loaded (`loaded`) are removed, e.g. left by an earlier incarnation.
pub fn repair(
    published: &BTreeMap<String, impl Borrow<PublishedState>>,
    stored: &BTreeMap<String, StateRecord>,
    loaded: &BTreeSet<&str>,
) -> Vec<PublishOp> {
    let mut ops: Vec<PublishOp> = published
        .values()
        .map(Borrow::borrow)
        .filter(|s| stored.get(&s.name) != Some(&StateRecord::from_state(s)))
        .cloned()
        .map(PublishOp::Publish)
        .collect();
    ops.extend(
        stored
            .keys()
            .filter(|n| !published.contains_key(*n) && !loaded.contains(n.as_str()))
            .map(|n| PublishOp::Remove(n.clone())),
    );
    ops
}

fn publishable(s: &PublishedState) -> bool {
    !s.hash.is_empty() && !s.machine_id.is_empty()
}

/// Remembers what was published, so only changes are written, and re-publishes everything each TTL period.
#[derive(Debug, Default)]
pub struct Publisher {
    /// Shared with the agent's SIGUSR1 dump ([`super::debug::DebugHandle`]), which holds the same states.
    published: BTreeMap<String, Arc<PublishedState>>,
    /// Removals whose write failed; retried with the next ops.
    removals: BTreeSet<String>,
}

impl Publisher {
    pub fn new() -> Self {
        Publisher::default()
    }

    /// Ops for the states [`Readings::states_now`] gave; they are assumed written (report failures with
    /// [`Publisher::failed`], then have every state computed again: [`Readings::touch_all`]).
    pub fn changes_now(&mut self, now: &StatesNow) -> Vec<PublishOp> {
        let (names, states) = match now {
            StatesNow::All(states) => return self.changes(states),
            StatesNow::Touched { names, states } => (names, states),
        };
        let ops: Vec<PublishOp> = names
            .iter()
            .filter_map(|name| change(name, self.published.get(name).map(|l| &**l), states.get(name)))
            .collect();
        self.apply(&ops);
        ops
    }

    /// Ops for the current states; they are assumed written (report failures with [`Publisher::failed`]).
    pub fn changes(&mut self, now: &BTreeMap<String, PublishedState>) -> Vec<PublishOp> {
        let mut ops = diff(&self.published, now);
        for name in std::mem::take(&mut self.removals) {
            if !now.contains_key(&name) && !ops.contains(&PublishOp::Remove(name.clone())) {
                ops.push(PublishOp::Remove(name));
            }
        }
        self.apply(&ops);
        ops
    }

    /// Ops that refresh every published state (their registry entries expire after the TTL), plus failed removals.
    pub fn refresh(&mut self) -> Vec<PublishOp> {
        let mut ops: Vec<PublishOp> = self.published.values().map(|s| PublishOp::Publish((**s).clone())).collect();
        ops.extend(std::mem::take(&mut self.removals).into_iter().map(PublishOp::Remove));
        ops
    }

    /// Ops that repair the registry's copy of this machine's states (see [`repair`]).
    pub fn repair(&self, stored: &BTreeMap<String, StateRecord>, loaded: &BTreeSet<&str>) -> Vec<PublishOp> {
        repair(&self.published, stored, loaded)
    }

    /// A write of `op` failed: make sure the next `changes` repeats it.
    pub fn failed(&mut self, op: &PublishOp) {
        match op {
            PublishOp::Publish(s) => {
                self.published.remove(&s.name);
            }
            PublishOp::Remove(name) => {
                self.removals.insert(name.clone());
            }
        }
    }

    /// Every state this machine currently has published (SIGTERM purge removes them, §1.5).
    pub fn published(&self) -> &BTreeMap<String, Arc<PublishedState>> {
        &self.published
    }

    fn apply(&mut self, ops: &[PublishOp]) {
        for op in ops {
            match op {
                PublishOp::Publish(s) => {
                    self.published.insert(s.name.clone(), Arc::new(s.clone()));
                }
                PublishOp::Remove(name) => {
                    self.published.remove(name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "aaaaaaaa11111111aaaaaaaa11111111";

    fn state(name: &str, active: &str, hash: &str) -> PublishedState {
        PublishedState {
            name: name.into(),
            machine_id: M.into(),
            hash: hash.into(),
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: if active == "active" { "running".into() } else { "dead".into() },
            restarts: None,
            health: None,
            launched: None,
        }
    }

    fn status(name: &str, load: &str, active: &str) -> UnitStatus {
        UnitStatus { name: name.into(), load_state: load.into(), active_state: active.into(), sub_state: String::new() }
    }

    fn map(states: &[PublishedState]) -> BTreeMap<String, PublishedState> {
        states.iter().map(|s| (s.name.clone(), s.clone())).collect()
    }

    fn loaded(names: &[&str]) -> BTreeMap<String, String> {
        names.iter().map(|n| (n.to_string(), "h".to_string())).collect()
    }

    fn active(a: &str, s: &str) -> Reported {
        Reported { active: Some((a.into(), s.into())), restarts: None, entered: None }
    }

    fn restarts(n: u32) -> Reported {
        Reported { active: None, restarts: Some(n), entered: None }
    }

    /// Readings after a first round that read `a` and `b` active with 0 restarts.
    fn read_once() -> (BTreeMap<String, String>, Readings) {
        let units = loaded(&["a.service", "b.service"]);
        let mut readings = Readings::new();
        assert_eq!(readings.states_to_read(&units), ["a.service", "b.service"], "the first round reads all");
        readings.took_states(
            &units,
            vec![status("a.service", "loaded", "active"), status("b.service", "loaded", "active")],
        );
        assert_eq!(readings.restarts_to_read(), ["a.service", "b.service"]);
        readings.took_restarts(vec![("a.service".into(), 0), ("b.service".into(), 0)]);
        (units, readings)
    }

    #[test]
    fn what_the_signals_carry_is_taken_without_reading_systemd() {
        let (units, mut readings) = read_once();
        readings.note("a.service", &restarts(1));
        readings.note("a.service", &active("activating", "auto-restart"));
        assert!(readings.states_to_read(&units).is_empty(), "the signals carried a's state");
        readings.took_states(&units, Vec::new());
        assert!(readings.restarts_to_read().is_empty(), "and its counter");
        readings.took_restarts(Vec::new());
        let a = &readings.unit_states(M, &units, None)["a.service"];
        assert_eq!(
            (a.load_state.as_str(), a.active_state.as_str(), a.sub_state.as_str()),
            ("loaded", "activating", "auto-restart")
        );
        assert_eq!(a.restarts, Some(1));
    }

    #[test]
    fn what_no_signal_carried_is_read() {
        let (mut units, mut readings) = read_once();
        readings.note("b.service", &Reported::default());
        units.insert("c.service".into(), "h".into());
        readings.note("c.service", &active("active", "running"));
        assert_eq!(readings.states_to_read(&units), ["b.service", "c.service"], "b's signal carried nothing; c is new");
        readings.took_states(
            &units,
            vec![status("b.service", "loaded", "active"), status("c.service", "loaded", "active")],
        );
        assert_eq!(readings.restarts_to_read(), ["b.service", "c.service"]);
        readings.took_restarts(vec![("b.service".into(), 4), ("c.service".into(), 0)]);
        assert!(readings.states_to_read(&units).is_empty() && readings.restarts_to_read().is_empty(), "all known now");
        readings.read_all_states();
        assert_eq!(readings.states_to_read(&units), ["a.service", "b.service", "c.service"], "resync");
        units.remove("a.service");
        readings.took_states(
            &units,
            vec![status("b.service", "loaded", "activating"), status("c.service", "loaded", "active")],
        );
        assert_eq!(readings.restarts_to_read(), ["b.service"], "b's state was not what the signals said; c's was");
        readings.took_restarts(vec![("b.service".into(), 5)]);
        assert_eq!(
            readings.unit_states(M, &units, None).keys().collect::<Vec<_>>(),
            ["b.service", "c.service"],
            "a is gone"
        );
        assert!(readings.states_to_read(&units).is_empty() && readings.restarts_to_read().is_empty());
    }

    #[test]
    fn a_deferred_unit_is_read_once_a_signal_tells_of_it_or_it_is_no_longer_deferred() {
        let (mut units, mut readings) = read_once();
        units.insert("c.service".into(), "h".into());
        let c_deferred = |name: &str| name == "c.service";
        assert!(readings.states_to_read_deferring(&units, c_deferred).is_empty(), "c has no state and is deferred");
        assert_eq!(readings.states_to_read(&units), ["c.service"], "not deferred, it is read");
        readings.note("c.service", &active("active", "running"));
        assert_eq!(readings.states_to_read_deferring(&units, c_deferred), ["c.service"], "its start was signalled");
        readings.took_states(&units, vec![status("c.service", "loaded", "active")]);
        readings.note("a.service", &Reported::default());
        let all = |_: &str| true;
        assert_eq!(readings.states_to_read_deferring(&units, all), ["a.service"], "only units without a state wait");
        readings.read_all_states();
        assert_eq!(readings.states_to_read_deferring(&units, all).len(), 3, "a resync reads every unit");
    }

    #[test]
    fn diff_publishes_new_and_changed_and_removes_gone_states() {
        let last = map(&[
            state("a.service", "active", "h1"),
            state("b.service", "active", "h1"),
            state("c.service", "active", "h1"),
        ]);
        let now = map(&[
            state("a.service", "active", "h1"),
            state("b.service", "inactive", "h1"),
            state("d.service", "active", "h2"),
        ]);
        assert_eq!(
            diff(&last, &now),
            [
                PublishOp::Publish(state("b.service", "inactive", "h1")),
                PublishOp::Remove("c.service".into()),
                PublishOp::Publish(state("d.service", "active", "h2")),
            ]
        );
    }

    #[test]
    fn a_new_hash_alone_is_a_change() {
        let last = map(&[state("a.service", "active", "h1")]);
        let now = map(&[state("a.service", "active", "h2")]);
        assert_eq!(diff(&last, &now), [PublishOp::Publish(state("a.service", "active", "h2"))]);
    }

    #[test]
    fn states_without_hash_or_machine_are_never_published() {
        let mut no_machine = state("b.service", "active", "h1");
        no_machine.machine_id.clear();
        let now = map(&[state("a.service", "active", ""), no_machine]);
        assert_eq!(diff(&BTreeMap::<String, PublishedState>::new(), &now), []);
        // ...and one that loses its hash is withdrawn.
        assert_eq!(
            diff(&map(&[state("a.service", "active", "h1")]), &map(&[state("a.service", "active", "")])),
            [PublishOp::Remove("a.service".into())]
        );
    }

    #[test]
    fn publisher_writes_only_changes_and_refreshes_everything() {
        let mut p = Publisher::new();
        let now = map(&[state("a.service", "active", "h1")]);
        assert_eq!(p.changes(&now), [PublishOp::Publish(state("a.service", "active", "h1"))]);
        assert_eq!(p.changes(&now), []);
        assert_eq!(p.refresh(), [PublishOp::Publish(state("a.service", "active", "h1"))]);
        assert_eq!(p.changes(&BTreeMap::new()), [PublishOp::Remove("a.service".into())]);
        assert!(p.published().is_empty());
        assert_eq!(p.refresh(), []);
    }

    #[test]
    fn failed_writes_are_repeated() {
        let mut p = Publisher::new();
        let now = map(&[state("a.service", "active", "h1")]);
        let ops = p.changes(&now);
        p.failed(&ops[0]);
        assert_eq!(p.changes(&now), ops);
        let ops = p.changes(&BTreeMap::new());
        p.failed(&ops[0]);
        assert_eq!(p.changes(&BTreeMap::new()), [PublishOp::Remove("a.service".into())]);
        assert_eq!(p.changes(&BTreeMap::new()), []);
    }

    #[test]
    fn repair_rewrites_missing_and_different_states_and_removes_strays() {
        let published = map(&[state("a.service", "active", "h1"), state("b.service", "active", "h1")]);
        let stored: BTreeMap<String, StateRecord> = [
            ("b.service".to_string(), StateRecord::from_state(&state("b.service", "inactive", "h1"))),
            ("c.service".to_string(), StateRecord::from_state(&state("c.service", "active", "h0"))),
            ("d.service".to_string(), StateRecord::from_state(&state("d.service", "active", "h0"))),
        ]
        .into();
        let loaded: BTreeSet<&str> = ["d.service"].into();
        assert_eq!(
            repair(&published, &stored, &loaded),
            [
                PublishOp::Publish(state("a.service", "active", "h1")),
                PublishOp::Publish(state("b.service", "active", "h1")),
                PublishOp::Remove("c.service".into()),
            ]
        );
        let in_sync: BTreeMap<String, StateRecord> =
            published.iter().map(|(n, s)| (n.clone(), StateRecord::from_state(s))).collect();
        assert_eq!(repair(&published, &in_sync, &BTreeSet::new()), []);
    }

    #[test]
    fn unit_states_join_systemd_states_with_recorded_hashes() {
        let statuses = [
            UnitStatus {
                name: "a.service".into(),
                load_state: "loaded".into(),
                active_state: "active".into(),
                sub_state: "running".into(),
            },
            UnitStatus {
                name: "x.service".into(),
                load_state: "loaded".into(),
                active_state: "active".into(),
                sub_state: "running".into(),
            },
        ];
        let hashes: BTreeMap<String, String> = [("a.service".to_string(), "h1".to_string())].into();
        assert_eq!(
            unit_states(M, &statuses, &hashes, &BTreeMap::new(), None),
            map(&[state("a.service", "active", "h1")])
        );
        let restarts: BTreeMap<String, u32> = [("a.service".to_string(), 3)].into();
        let with_counter = unit_states(M, &statuses, &hashes, &restarts, None);
        assert_eq!(with_counter["a.service"].restarts, Some(3), "an active service publishes its restart counter");
    }

    #[test]
    fn restart_counter_is_published_only_for_active_or_activating_services() {
        let restarts: BTreeMap<String, u32> = [("a.service", 2), ("b.service", 2), ("c.socket", 2), ("d.service", 2)]
            .map(|(n, c)| (n.to_string(), c))
            .into();
        let statuses = [
            status("a.service", "loaded", "activating"),
            status("b.service", "loaded", "inactive"),
            status("c.socket", "loaded", "active"),
            status("d.service", "not-found", "active"),
        ];
        let hashes: BTreeMap<String, String> = restarts.keys().map(|n| (n.clone(), "h".to_string())).collect();
        let states = unit_states(M, &statuses, &hashes, &restarts, None);
        let published: Vec<(&str, Option<u32>)> = states.iter().map(|(n, s)| (n.as_str(), s.restarts)).collect();
        assert_eq!(published, [("a.service", Some(2)), ("b.service", None), ("c.socket", None), ("d.service", None)]);
    }

    #[test]
    fn restart_counters_are_read_only_for_active_services_without_a_known_counter() {
        let units = loaded(&["known.service", "new.service", "stopped.service", "sock.socket"]);
        let mut readings = Readings::new();
        readings.note("known.service", &restarts(2));
        readings.took_states(
            &units,
            vec![
                status("known.service", "loaded", "active"),
                status("new.service", "loaded", "activating"),
                status("stopped.service", "loaded", "inactive"),
                status("sock.socket", "loaded", "active"),
            ],
        );
        assert_eq!(readings.restarts_to_read(), ["new.service"], "known's counter came with its signal");
        readings.took_restarts(vec![("new.service".into(), 0)]);
        readings.note("new.service", &restarts(1));
        assert!(readings.restarts_to_read().is_empty());
    }

    /// The publish loop's rounds with random systemd changes, loaded-set changes and failed writes: publishing only
    /// the touched units writes exactly what comparing every unit writes, round after round.
    #[test]
    fn publishing_the_touched_units_writes_what_comparing_every_unit_writes() {
        let mut seed: u64 = 0x5eed;
        let mut random = move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let names: Vec<String> = (0..12).map(|i| format!("u{i}.service")).collect();
        let actives = ["active", "activating", "failed", "inactive"];
        // What systemd holds: unit → (active state, restart counter).
        let mut systemd: BTreeMap<String, (String, u32)> =
            names.iter().map(|n| (n.clone(), ("inactive".to_string(), 0))).collect();
        let mut loaded = Arc::new(loaded(&["u0.service", "u1.service", "u2.service"]));
        let mut readings = Readings::new();
        let (mut incremental, mut reference) = (Publisher::new(), Publisher::new());
        let mut partial_rounds = 0;
        for round in 0..400 {
            if random(8) == 0 {
                let mut next = (*loaded).clone();
                let name = &names[random(12) as usize];
                match random(3) {
                    0 => next.remove(name),
                    _ => next.insert(name.clone(), format!("h{}", random(3))),
                };
                loaded = Arc::new(next);
            }
            for _ in 0..random(4) {
                let name = names[random(12) as usize].clone();
                let unit = systemd.get_mut(&name).unwrap();
                unit.0 = actives[random(4) as usize].to_string();
                unit.1 += u32::from(random(2) == 0);
                if loaded.contains_key(&name) {
                    let reported = match random(3) {
                        0 => Reported {
                            active: Some((unit.0.clone(), "sub".into())),
                            restarts: Some(unit.1),
                            entered: None,
                        },
                        1 => Reported { active: Some((unit.0.clone(), "sub".into())), restarts: None, entered: None },
                        _ => Reported::default(),
                    };
                    readings.note(&name, &reported);
                }
            }
            if random(20) == 0 {
                readings.read_all_states();
            }
            // One round of `publish_current`, reading from `systemd`.
            readings.took_loaded(&loaded);
            let read = readings
                .states_to_read(&loaded)
                .into_iter()
                .map(|n| UnitStatus {
                    load_state: "loaded".into(),
                    active_state: systemd[&n].0.clone(),
                    sub_state: "sub".into(),
                    name: n,
                })
                .collect();
            readings.took_states(&loaded, read);
            let counters = readings.restarts_to_read().into_iter().map(|n| (n.clone(), systemd[&n].1)).collect();
            readings.took_restarts(counters);
            let every = readings.unit_states(M, &loaded, None);
            let now = readings.states_now(M, &loaded, None);
            partial_rounds += usize::from(matches!(now, StatesNow::Touched { .. }));
            let (mut got, mut want) = (incremental.changes_now(&now), reference.changes(&every));
            got.sort_by(|a, b| a.unit().cmp(b.unit()));
            want.sort_by(|a, b| a.unit().cmp(b.unit()));
            assert_eq!(got, want, "round {round}");
            if let Some(op) = want.first().filter(|_| random(10) == 0) {
                incremental.failed(op);
                reference.failed(op);
                readings.touch_all();
            }
            assert_eq!(incremental.published(), reference.published(), "round {round}");
        }
        assert!(partial_rounds > 200, "most rounds publish only what was touched ({partial_rounds} of 400)");
    }

    #[test]
    fn a_round_after_a_signal_computes_only_its_unit() {
        let hashes = Arc::new(loaded(&["a.service", "b.service"]));
        let mut readings = Readings::new();
        let mut publisher = Publisher::new();
        assert!(readings.took_loaded(&hashes));
        readings.took_states(
            &hashes,
            vec![status("a.service", "loaded", "active"), status("b.service", "loaded", "active")],
        );
        let first = readings.states_now(M, &hashes, None);
        assert!(matches!(&first, StatesNow::All(states) if states.len() == 2), "{first:?}");
        assert_eq!(publisher.changes_now(&first).len(), 2);
        assert!(!readings.took_loaded(&hashes), "the same loaded set");
        readings.note("b.service", &active("failed", "failed"));
        let next = readings.states_now(M, &hashes, None);
        let StatesNow::Touched { names, states } = &next else { panic!("{next:?}") };
        assert_eq!(names.iter().collect::<Vec<_>>(), ["b.service"]);
        assert_eq!(states["b.service"].active_state, "failed");
        assert_eq!(publisher.changes_now(&next), vec![PublishOp::Publish(states["b.service"].clone())]);
        assert!(readings.took_loaded(&Arc::new(loaded(&["a.service"]))), "a new loaded set");
        assert!(matches!(readings.states_now(M, &hashes, None), StatesNow::All(_)));
    }
}

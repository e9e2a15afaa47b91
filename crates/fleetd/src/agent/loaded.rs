//! What the executor tells the publish loop about the units it holds ([`Loaded`]): the loaded set with the hash to
//! publish for each, the hash each launched unit was started with, and the units a run is still bringing up.
//!
//! In layout 2 the launched markers are folded into the states, and a unit the run loads to start it is not shown
//! while it is still `inactive` (loaded, its start not yet begun): its first state is the started one, which
//! already carries its launched hash, so a started unit costs one state write instead of `inactive`, `active` and a
//! marker. A copy that is starting or running is never held back (other machines wait for it, rollouts count it).
//! In layout 1 the publish loop shows every state at once and ignores `launched` (older fleetds read the markers).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fleet_core::model::PublishedState;

/// Longest a unit loaded by a run stays unpublished while still `inactive`: a start that has not begun by then (held
/// back, or behind a long daemon-reload) is shown as loaded.
pub const FRESH_HOLD: Duration = Duration::from_secs(5);

/// The executor's view of its units, as the publish loop follows it (a `watch` value, replaced as a whole).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Unit → the hash published for it: the recorded hash of its file, or the previous one while an in-place
    /// update is not in effect yet. Shared, and kept the same `Arc` while it does not change, so the publisher
    /// tells a changed loaded set by identity.
    pub hashes: Arc<BTreeMap<String, String>>,
    /// Launched unit → the hash it was started with, as its state carries it in layout 2. A fresh unit the run is
    /// about to start has its hash here from its load on (its first shown state is a started one); a (re)start of a
    /// unit already shown, or of one with a health check, is added after the run, once the health the start resets
    /// is published.
    pub launched: BTreeMap<String, String>,
    /// Units the current run loaded that were not loaded before, and since when: in layout 2 their `inactive`
    /// state is not shown ([`Loaded::holds_back`]).
    pub fresh: BTreeMap<String, Instant>,
}

impl Loaded {
    /// Whether `state` is held back at `now`: in layout 2 (`fold`), the state of a fresh unit that is still
    /// `inactive`, for [`FRESH_HOLD`] at most.
    pub fn holds_back(&self, fold: bool, state: &PublishedState, now: Instant) -> bool {
        state.active_state == "inactive" && self.in_hold(fold, &state.name, now)
    }

    /// Whether `unit` is a fresh unit within its hold at `now` (layout 2): its `inactive` state would not be shown,
    /// so the publisher reads no state of it before a signal tells of its start.
    pub fn in_hold(&self, fold: bool, unit: &str, now: Instant) -> bool {
        fold && self.fresh.get(unit).is_some_and(|since| now < *since + FRESH_HOLD)
    }

    /// When the next fresh unit's hold ends (layout 2), if one is running at `now`.
    pub fn next_release(&self, fold: bool, now: Instant) -> Option<Instant> {
        if !fold {
            return None;
        }
        self.fresh.values().map(|since| *since + FRESH_HOLD).filter(|at| *at > now).min()
    }
}

/// The units whose launched hash differs between `before` and `now` (their states must be computed again).
pub fn launched_changes<'a>(
    before: &'a BTreeMap<String, String>,
    now: &'a BTreeMap<String, String>,
) -> impl Iterator<Item = &'a String> {
    let gone_or_changed = before.iter().filter(|(n, h)| now.get(*n) != Some(*h)).map(|(n, _)| n);
    let added = now.keys().filter(|n| !before.contains_key(*n));
    gone_or_changed.chain(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(units: &[&str], fresh: &[(&str, Instant)]) -> Loaded {
        Loaded {
            hashes: Arc::new(units.iter().map(|u| (u.to_string(), format!("h-{u}"))).collect()),
            launched: BTreeMap::new(),
            fresh: fresh.iter().map(|(u, at)| (u.to_string(), *at)).collect(),
        }
    }

    fn state(name: &str, active: &str) -> PublishedState {
        PublishedState { name: name.into(), active_state: active.into(), ..PublishedState::default() }
    }

    #[test]
    fn a_fresh_units_inactive_state_is_held_back_in_layout_2_only_and_for_the_hold_at_most() {
        let t0 = Instant::now();
        let l = loaded(&["a.service", "b.service"], &[("b.service", t0)]);
        let soon = t0 + Duration::from_millis(10);
        assert!(l.holds_back(true, &state("b.service", "inactive"), soon), "b.service has not started yet");
        assert!(!l.holds_back(false, &state("b.service", "inactive"), soon), "layout 1 shows it");
        assert!(!l.holds_back(true, &state("a.service", "inactive"), soon), "a.service is not fresh");
        for started in ["activating", "active", "failed", "deactivating"] {
            assert!(!l.holds_back(true, &state("b.service", started), soon), "a {started} copy is always shown");
        }
        assert!(l.in_hold(true, "b.service", soon) && !l.in_hold(false, "b.service", soon));
        assert!(!l.in_hold(true, "a.service", soon) && !l.in_hold(true, "b.service", t0 + FRESH_HOLD));
        assert_eq!(l.next_release(true, t0), Some(t0 + FRESH_HOLD));
        assert_eq!(l.next_release(false, t0), None);
        let later = t0 + FRESH_HOLD;
        assert!(!l.holds_back(true, &state("b.service", "inactive"), later), "after the hold it is shown");
        assert_eq!(l.next_release(true, later), None);
    }

    #[test]
    fn launched_changes_name_added_removed_and_changed_units() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(u, h)| (u.to_string(), h.to_string())).collect()
        };
        let before = map(&[("a", "1"), ("b", "1"), ("c", "1")]);
        let now = map(&[("a", "1"), ("b", "2"), ("d", "1")]);
        let mut changed: Vec<&String> = launched_changes(&before, &now).collect();
        changed.sort();
        assert_eq!(changed, ["b", "c", "d"]);
    }
}

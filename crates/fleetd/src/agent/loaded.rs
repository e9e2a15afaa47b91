//! What the executor tells the publish loop about the units it holds ([`Loaded`]): the loaded set with the hash to
//! publish for each, the hash each launched unit was started with, and the units a run is still bringing up.
//!
//! In layout 2 the launched markers are folded into the states, and a unit's first state waits for its start: a
//! unit the run just loaded is not shown until its start job ended (or the run ended, or [`FRESH_HOLD`] passed), so
//! a started unit costs one state write, `active` with its launched hash, instead of `inactive`, then `active`,
//! then a marker. In layout 1 the publish loop shows every loaded unit at once and ignores `launched` (older
//! fleetds read the separate markers).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Longest a unit loaded by a run stays unpublished while its start is under way: a start job that takes longer
/// (a database joining its peers) shows `activating` after this, as it would have without the wait.
pub const FRESH_HOLD: Duration = Duration::from_secs(5);

/// The executor's view of its units, as the publish loop follows it (a `watch` value, replaced as a whole).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Unit → the hash published for it: the recorded hash of its file, or the previous one while an in-place
    /// update is not in effect yet. Shared, and kept the same `Arc` while it does not change, so the publisher
    /// tells a changed loaded set by identity.
    pub hashes: Arc<BTreeMap<String, String>>,
    /// Launched unit → the hash it was started with, as its state carries it in layout 2. Lags the executor: a
    /// (re)start of a unit already shown is added after the run, once the health it resets is published.
    pub launched: BTreeMap<String, String>,
    /// Units the current run loaded that were not loaded before, and since when: not shown in layout 2 until
    /// their start ended or [`FRESH_HOLD`] passed.
    pub fresh: BTreeMap<String, Instant>,
}

impl Loaded {
    /// The loaded set the publisher shows at `now`: every loaded unit, or in layout 2 (`fold`) those that are not
    /// fresh for less than [`FRESH_HOLD`]. The shared `hashes` itself when nothing is held back.
    pub fn shown(&self, fold: bool, now: Instant) -> Arc<BTreeMap<String, String>> {
        let held = |name: &String| self.fresh.get(name).is_some_and(|since| now < *since + FRESH_HOLD);
        if !fold || !self.hashes.keys().any(held) {
            return Arc::clone(&self.hashes);
        }
        Arc::new(self.hashes.iter().filter(|(name, _)| !held(name)).map(|(n, h)| (n.clone(), h.clone())).collect())
    }

    /// When the next fresh unit is shown by the hold alone (layout 2), if any is held back at `now`.
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

    #[test]
    fn fresh_units_are_held_back_in_layout_2_only_and_for_the_hold_at_most() {
        let t0 = Instant::now();
        let l = loaded(&["a.service", "b.service"], &[("b.service", t0)]);
        assert!(Arc::ptr_eq(&l.shown(false, t0), &l.hashes), "layout 1 shows every unit, the same map");
        let shown = l.shown(true, t0 + Duration::from_millis(10));
        assert_eq!(shown.keys().collect::<Vec<_>>(), ["a.service"], "b.service is still starting");
        assert_eq!(l.next_release(true, t0), Some(t0 + FRESH_HOLD));
        assert_eq!(l.next_release(false, t0), None);
        let later = t0 + FRESH_HOLD;
        assert!(Arc::ptr_eq(&l.shown(true, later), &l.hashes), "after the hold every unit is shown");
        assert_eq!(l.next_release(true, later), None);
    }

    #[test]
    fn a_fresh_unit_that_is_no_longer_loaded_holds_nothing_back() {
        let t0 = Instant::now();
        let l = loaded(&["a.service"], &[("gone.service", t0)]);
        assert!(Arc::ptr_eq(&l.shown(true, t0), &l.hashes));
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

//! One shared copy of each text the registry snapshot repeats: unit names (a unit's key in every section), body
//! hashes (a unit's object, its history, its launched markers and every machine's state name the same hash),
//! machine IDs and systemd's state words (`loaded`, `active`, `running`, …). Pure: no I/O.
//!
//! Why: a snapshot of 1,000 units held about eleven heap strings per unit for these, ~0.5 MB in every fleetd
//! (massif; docs/bench.md at 58f0c3f, "fleetd under 10 MiB"); shared, they are one allocation per distinct text.

use std::collections::HashSet;
use std::sync::Arc;

/// Texts no record holds any more are dropped when the set has grown to this many entries, and from then on
/// whenever it has doubled since the last purge: amortised O(1) per text.
const FIRST_PURGE: usize = 1024;

/// The set of shared texts. [`Interner::share`] returns the shared copy of a text, adding it when new.
#[derive(Debug, Default)]
pub struct Interner {
    texts: HashSet<Arc<str>>,
    /// `texts.len()` at which the next purge runs (0: not set yet).
    purge_at: usize,
}

impl Interner {
    /// The shared copy of `text`.
    pub fn share(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.texts.get(text) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(text);
        self.insert(shared.clone());
        shared
    }

    /// Replaces `text` by the shared copy of its content (making `text` the shared copy when it is new).
    pub fn share_in_place(&mut self, text: &mut Arc<str>) {
        match self.texts.get(&**text) {
            Some(shared) => {
                if !Arc::ptr_eq(shared, text) {
                    *text = shared.clone();
                }
            }
            None => self.insert(text.clone()),
        }
    }

    /// How many texts the set holds (some may be held by nothing else until the next purge).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.texts.len()
    }

    fn insert(&mut self, text: Arc<str>) {
        if self.texts.len() >= self.purge_at.max(FIRST_PURGE) {
            self.purge();
        }
        self.texts.insert(text);
    }

    /// Drops the texts only the set holds.
    fn purge(&mut self) {
        self.texts.retain(|text| Arc::strong_count(text) > 1);
        self.texts.shrink_to_fit();
        self.purge_at = self.texts.len() * 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_are_one_allocation() {
        let mut interner = Interner::default();
        let a = interner.share("0123456789abcdef0123456789abcdef01234567");
        let b = interner.share(&String::from("0123456789abcdef0123456789abcdef01234567"));
        assert!(Arc::ptr_eq(&a, &b));
        let mut decoded: Arc<str> = Arc::from("0123456789abcdef0123456789abcdef01234567");
        interner.share_in_place(&mut decoded);
        assert!(Arc::ptr_eq(&a, &decoded), "a decoded copy is replaced by the shared one");
        let mut new: Arc<str> = Arc::from("running");
        interner.share_in_place(&mut new);
        assert!(Arc::ptr_eq(&new, &interner.share("running")), "a new text becomes the shared copy");
        assert_eq!(interner.len(), 2);
    }

    #[test]
    fn texts_nothing_holds_are_dropped_as_the_set_grows_and_held_ones_stay_shared() {
        let mut interner = Interner::default();
        let held: Vec<Arc<str>> = (0..100).map(|i| interner.share(&format!("held-{i}"))).collect();
        for round in 0..20 {
            for i in 0..1_000 {
                interner.share(&format!("dropped-{round}-{i}"));
            }
            assert!(
                interner.len() <= 2 * (FIRST_PURGE + held.len()),
                "round {round}: the set holds {} texts, 100 of them held elsewhere",
                interner.len()
            );
        }
        for (i, text) in held.iter().enumerate() {
            assert!(Arc::ptr_eq(text, &interner.share(&format!("held-{i}"))), "held-{i} is no longer the shared copy");
        }
    }
}

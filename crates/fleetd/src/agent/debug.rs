//! The agent's SIGUSR1 dump (spec §1.5): what it believes of each unit, what it published and what it follows.
//! The reconcile and publish loops update a shared [`DebugHandle`], so a dump can be taken while they run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

use fleet_core::model::{JobState, PublishedState};

#[derive(Debug, Default)]
struct DebugInfo {
    target_states: BTreeMap<String, JobState>,
    /// The publisher's own states, shared.
    published: BTreeMap<String, Arc<PublishedState>>,
    to_publish: BTreeMap<String, Option<PublishedState>>,
    subscribed: Vec<String>,
}

/// A cheap, cloneable view of the agent's caches for debugging.
#[derive(Debug, Clone, Default)]
pub struct DebugHandle(Arc<Mutex<DebugInfo>>);

impl DebugHandle {
    fn lock(&self) -> MutexGuard<'_, DebugInfo> {
        // A panic while holding this lock cannot leave the plain maps inconsistent in a way that matters here.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `{"Agent":{"Cache":{"TargetStates":{..}}},"UnitStatePublisher":{"Cache":{..},"ToPublish":{..}},
    /// "UnitStateGenerator":{"Subscribed":[..]}}`, the original's shape.
    pub fn dump(&self) -> Value {
        let info = self.lock();
        let targets: BTreeMap<&str, &str> = info.target_states.iter().map(|(n, s)| (n.as_str(), s.as_str())).collect();
        let cache: BTreeMap<&str, Value> = info.published.iter().map(|(n, s)| (n.as_str(), state_json(s))).collect();
        let pending: BTreeMap<&str, Value> =
            info.to_publish.iter().map(|(n, s)| (n.as_str(), s.as_ref().map_or(Value::Null, state_json))).collect();
        json!({
            "Agent": {"Cache": {"TargetStates": targets}},
            "UnitStatePublisher": {"Cache": cache, "ToPublish": pending},
            "UnitStateGenerator": {"Subscribed": info.subscribed},
        })
    }

    pub(crate) fn set_target_states(&self, states: &BTreeMap<String, JobState>) {
        self.lock().target_states.clone_from(states);
    }

    pub(crate) fn set_published(
        &self,
        published: &BTreeMap<String, Arc<PublishedState>>,
        pending: BTreeMap<String, Option<PublishedState>>,
    ) {
        let mut info = self.lock();
        info.published.clone_from(published);
        info.to_publish = pending;
    }

    /// [`Self::set_published`] for the units one write named (`touched`), which are the only ones that can have
    /// changed: a copy of every published state after each write cost a fleetd 4 % of its CPU during a start of
    /// 1,000 units.
    pub(crate) fn sync_published<'a>(
        &self,
        published: &BTreeMap<String, Arc<PublishedState>>,
        touched: impl IntoIterator<Item = &'a str>,
        pending: BTreeMap<String, Option<PublishedState>>,
    ) {
        let mut info = self.lock();
        for unit in touched {
            match published.get(unit) {
                Some(state) => {
                    info.published.insert(unit.to_string(), state.clone());
                }
                None => {
                    info.published.remove(unit);
                }
            }
        }
        info.to_publish = pending;
    }

    pub(crate) fn set_subscribed(&self, names: impl IntoIterator<Item = String>) {
        self.lock().subscribed = names.into_iter().collect();
    }
}

fn state_json(s: &PublishedState) -> Value {
    json!({
        "name": s.name,
        "hash": s.hash,
        "machineID": s.machine_id,
        "loadState": s.load_state,
        "activeState": s.active_state,
        "subState": s.sub_state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_has_the_original_shape() {
        let h = DebugHandle::default();
        h.set_target_states(&[("a.service".to_string(), JobState::Launched)].into());
        let s = PublishedState {
            name: "a.service".into(),
            machine_id: "m1".into(),
            hash: "h".into(),
            load_state: "loaded".into(),
            active_state: "active".into(),
            sub_state: "running".into(),
            restarts: None,
            health: None,
            launched: None,
        };
        h.set_published(&[("a.service".to_string(), Arc::new(s))].into(), [("b.service".to_string(), None)].into());
        h.set_subscribed(["a.service".to_string()]);
        let v = h.dump();
        assert_eq!(v["Agent"]["Cache"]["TargetStates"]["a.service"], "launched");
        assert_eq!(v["UnitStatePublisher"]["Cache"]["a.service"]["activeState"], "active");
        assert_eq!(v["UnitStatePublisher"]["ToPublish"]["b.service"], Value::Null);
        assert_eq!(v["UnitStateGenerator"]["Subscribed"], json!(["a.service"]));
    }

    #[test]
    fn a_sync_copies_the_touched_units_only() {
        let h = DebugHandle::default();
        let state = |name: &str, active: &str| PublishedState {
            name: name.into(),
            machine_id: "m1".into(),
            hash: "h".into(),
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: "x".into(),
            restarts: None,
            health: None,
            launched: None,
        };
        let mut published: BTreeMap<String, Arc<PublishedState>> = [("a.service", "active"), ("b.service", "active")]
            .map(|(n, a)| (n.to_string(), Arc::new(state(n, a))))
            .into();
        h.set_published(&published, BTreeMap::new());
        published.insert("a.service".into(), Arc::new(state("a.service", "failed")));
        published.remove("b.service");
        published.insert("c.service".into(), Arc::new(state("c.service", "inactive")));
        h.sync_published(&published, ["a.service", "b.service"], [("d.service".to_string(), None)].into());
        assert!(
            Arc::ptr_eq(&h.lock().published["a.service"], &published["a.service"]),
            "the dump holds the publisher's state itself, not a copy of it"
        );
        let v = h.dump();
        let cache = &v["UnitStatePublisher"]["Cache"];
        assert_eq!(cache["a.service"]["activeState"], "failed", "a touched unit is copied: {v}");
        assert_eq!(cache["b.service"], Value::Null, "a touched unit no longer published is gone: {v}");
        assert_eq!(cache["c.service"], Value::Null, "an untouched unit is not looked at: {v}");
        assert_eq!(v["UnitStatePublisher"]["ToPublish"]["d.service"], Value::Null);
        assert!(v["UnitStatePublisher"]["ToPublish"].get("d.service").is_some(), "{v}");
    }
}

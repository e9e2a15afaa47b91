//! The cluster's units as the agent needs them ([`ClusterUnit`]), read from a registry [`Snapshot`]. Each body is
//! parsed once per hash, and each unit's requirements computed once per (name, hash): a reconcile runs on every
//! snapshot change, so it must cost no parsing when nothing changed.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::desired::ClusterUnit;
use crate::rollout;
use crate::store::{Snapshot, UnitView};
use crate::unit::{BodyCache, UnitFile};

/// The agent's [`BodyCache`], pruned to the hashes and names of the last snapshot.
#[derive(Debug, Default)]
pub struct UnitCache {
    bodies: BodyCache,
}

impl UnitCache {
    pub fn new() -> Self {
        UnitCache::default()
    }

    /// The readable units of `snapshot` machine `me` may run — scheduled to it, or global — in name order, with
    /// their requirements, as `me` must run them: a replace rollout that has not reached `me` yet keeps the unit's
    /// old version here, and a restart rollout's step on `me` carries its restart token (see the `rollout` module).
    /// Units scheduled elsewhere are left out: no machine accepts a unit it is not scheduled to unless it is global
    /// (`xfleet::accepted_by_machine`), and building one for every unit of the cluster on every round cost each
    /// agent memory and time in proportion to the cluster, not to its own units. Entries for hashes and names the
    /// snapshot no longer holds are dropped.
    pub fn cluster_units(&mut self, snapshot: &Snapshot, me: &str) -> Vec<ClusterUnit> {
        let rollouts = snapshot.rollouts();
        let mut names: Vec<&str> = Vec::new();
        let mut hashes: BTreeSet<&str> = BTreeSet::new();
        let mut units: Vec<ClusterUnit> = Vec::new();
        for view in snapshot.units() {
            let view = snapshot.unit_on(view, me, &rollouts);
            names.push(view.name);
            hashes.insert(view.hash);
            if view.target != Some(me) && !self.is_global(&view) {
                continue;
            }
            let mut unit = self.unit(&view);
            unit.restart = rollout::restart_token(&rollouts, &unit.name, me).map(str::to_string);
            units.push(unit);
        }
        // `snapshot.units()` is in name order.
        self.bodies.retain(|name, _| names.binary_search(&name).is_ok(), |hash| hashes.contains(hash));
        units
    }

    fn is_global(&mut self, view: &UnitView<'_>) -> bool {
        self.bodies.requirements(view.name, view.hash, view.body).is_some_and(|r| r.global)
    }

    /// Number of parsed bodies held.
    pub fn bodies(&self) -> usize {
        self.bodies.bodies()
    }

    fn unit(&mut self, view: &UnitView<'_>) -> ClusterUnit {
        // A body that does not parse is still written as is; no requirements apply to it.
        let file = self.bodies.file(view.name, view.hash, view.body);
        let install = file.as_ref().is_some_and(|f| f.has_section("Install"));
        let reloadable = file.as_ref().is_some_and(|f| reloadable(f));
        let requirements = self.bodies.requirements(view.name, view.hash, view.body).unwrap_or_default();
        ClusterUnit {
            name: view.name.to_string(),
            desired: view.desired,
            hash: view.hash.to_string(),
            text: Arc::clone(view.body),
            install,
            reloadable,
            no_restart: view.no_restart,
            restart: None,
            target: view.target.map(str::to_string),
            requirements,
        }
    }
}

/// Whether a unit file defines `ExecReload=` (a replace without restart reloads the running unit).
pub fn reloadable(file: &UnitFile) -> bool {
    file.values("Service", "ExecReload").iter().any(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;
    use crate::store::{Change, Keys};
    use crate::unit::{Requirements, UnitHash};

    /// A snapshot holding `units` as (name, text, desired, target).
    pub(crate) fn snapshot(units: &[(&str, &str, &str, Option<&str>)]) -> Snapshot {
        let keys = Keys::new("/p");
        let mut kvs: Vec<(String, String)> = Vec::new();
        for (name, text, desired, target) in units {
            let hash = UnitHash::of(text).to_hex();
            kvs.push((keys.body(&hash), text.to_string()));
            kvs.push((keys.unit_object(name), format!(r#"{{"name":"{name}","hash":"{hash}"}}"#)));
            kvs.push((keys.unit_desired(name), desired.to_string()));
            if let Some(t) = target {
                kvs.push((keys.unit_target(name), t.to_string()));
            }
        }
        let changes =
            kvs.iter().map(|(k, v)| (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 2, lease: 0 }));
        Snapshot::from_kvs(&keys, 2, changes)
    }

    const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 1\n\n[X-Fleet]\nGlobal=true\nConflicts=other-%i.service\n";
    const PLAIN: &str = "[Service]\nExecStart=/bin/sleep 1\n\n[Install]\nWantedBy=multi-user.target\n";

    #[test]
    fn units_carry_parsed_requirements_and_install() {
        let s = snapshot(&[("g@1.service", GLOBAL, "launched", None), ("p.service", PLAIN, "loaded", Some("m1"))]);
        let mut cache = UnitCache::new();
        let units = cache.cluster_units(&s, "m1");
        assert_eq!(units.len(), 2);
        let g = &units[0];
        assert_eq!((g.name.as_str(), g.desired, g.install), ("g@1.service", JobState::Launched, false));
        assert!(g.requirements.global);
        assert_eq!(g.requirements.conflicts, ["other-1.service"], "specifiers expanded with the unit's name");
        let p = &units[1];
        assert_eq!((p.install, p.target.as_deref(), p.requirements.global), (true, Some("m1"), false));
        assert_eq!(&*p.text, PLAIN);
    }

    #[test]
    fn each_body_is_parsed_once_and_dropped_when_unused() {
        let mut cache = UnitCache::new();
        let s = snapshot(&[
            ("g@1.service", GLOBAL, "launched", None),
            ("g@2.service", GLOBAL, "launched", None),
            ("p.service", PLAIN, "loaded", None),
        ]);
        let units = cache.cluster_units(&s, "m1");
        assert_eq!(cache.bodies(), 2, "instances share one parsed body");
        assert_eq!(units[1].requirements.conflicts, ["other-2.service"]);
        let again = cache.cluster_units(&s, "m1");
        assert!(Arc::ptr_eq(&units[0].requirements, &again[0].requirements), "requirements are reused");
        cache.cluster_units(&snapshot(&[("p.service", PLAIN, "loaded", None)]), "m1");
        assert_eq!((cache.bodies(), cache.bodies.units()), (1, 1));
    }

    #[test]
    fn units_scheduled_elsewhere_are_left_out_but_their_bodies_stay_parsed() {
        const OTHER: &str = "[Service]\nExecStart=/bin/sleep 2\n";
        let s = snapshot(&[
            ("a.service", PLAIN, "launched", Some("m1")),
            ("b.service", OTHER, "launched", Some("m2")),
            ("g@1.service", GLOBAL, "launched", None),
            ("u.service", OTHER, "launched", None),
        ]);
        let mut cache = UnitCache::new();
        let names = |units: Vec<ClusterUnit>| units.into_iter().map(|u| u.name).collect::<Vec<_>>();
        assert_eq!(names(cache.cluster_units(&s, "m1")), ["a.service", "g@1.service"]);
        assert_eq!(names(cache.cluster_units(&s, "m2")), ["b.service", "g@1.service"]);
        assert_eq!(cache.bodies(), 3, "every body of the snapshot stays parsed, so the next round parses nothing");
    }

    #[test]
    fn an_unparsable_body_still_yields_the_unit_without_requirements() {
        let bad = format!("[Service]\nExecStart={}\n", "x".repeat(3000));
        let s = snapshot(&[("bad.service", &bad, "launched", Some("m1"))]);
        let units = UnitCache::new().cluster_units(&s, "m1");
        assert_eq!(units.len(), 1);
        assert_eq!(*units[0].requirements, Requirements::default());
        assert!(!units[0].install);
    }
}

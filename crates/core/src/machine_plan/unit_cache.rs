//! The cluster's units as the agent needs them ([`ClusterUnit`]), read from a registry [`Snapshot`]. Each body is
//! parsed once per hash, and each unit's requirements computed once per (name, hash): a reconcile runs on every
//! snapshot change, so it must cost no parsing when nothing changed.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::desired::ClusterUnit;
use crate::store::{Snapshot, UnitView};
use crate::unit::BodyCache;

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
            unit.restart = snapshot.restart_token(&unit.name, me, &rollouts).map(str::to_string);
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
        let traits = self.bodies.traits(view.name, view.hash, view.body).unwrap_or_default();
        let requirements = self.bodies.requirements(view.name, view.hash, view.body).unwrap_or_default();
        ClusterUnit {
            name: view.name.to_string(),
            desired: view.desired,
            hash: view.hash.to_string(),
            text: Arc::clone(view.body),
            install: traits.install,
            reloadable: traits.reloadable,
            no_restart: view.no_restart,
            restart: None,
            target: view.target.map(str::to_string),
            requirements,
        }
    }
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

    /// Layout 2 (issue 35): an agent's scoped view — its entries, the global objects, the bodies, no rollouts, no
    /// other machine's units — yields the very units a full layout-1 view yields for it, a rollout's pin and restart
    /// token included. The agent runs the same code on either.
    #[test]
    fn a_scoped_layout_2_view_yields_what_the_full_layout_1_view_does() {
        use crate::rollout::{Phase, RolloutKind, RolloutProgress, RolloutSpec, RolloutState, RolloutUnit, Step};
        use crate::store::records::encode_json;
        const GLOBAL_NEW: &str = "[Service]\nExecStart=/bin/sleep 2\n\n[X-Fleet]\nGlobal=true\n";
        const RESTARTED: &str = "[Service]\nExecStart=/bin/sleep 3\n";
        let hash = |text: &str| UnitHash::of(text).to_hex();
        let (g_old, g_new) = (hash(GLOBAL), hash(GLOBAL_NEW));
        let keys = Keys::new("/p");
        let spec = |id: &str, kind, unit: &str, from: &str, to: &str| RolloutSpec {
            id: id.into(),
            kind,
            units: vec![RolloutUnit { name: unit.into(), from: from.into(), to: to.into(), ..RolloutUnit::default() }],
            max_unavailable: 1,
            ..RolloutSpec::default()
        };
        let progress = |unit: &str, phase: Phase| RolloutProgress {
            state: RolloutState::Running,
            steps: vec![Step { phase, ..Step::pending(unit, "m1") }],
            ..RolloutProgress::default()
        };
        let full: Vec<(String, String)> = vec![
            (keys.body(&hash(PLAIN)), PLAIN.into()),
            (keys.body(&g_old), GLOBAL.into()),
            (keys.body(&g_new), GLOBAL_NEW.into()),
            (keys.body(&hash(RESTARTED)), RESTARTED.into()),
            (keys.unit_object("p.service"), format!(r#"{{"name":"p.service","hash":"{}"}}"#, hash(PLAIN))),
            (keys.unit_desired("p.service"), "launched".into()),
            (keys.unit_target("p.service"), "m1".into()),
            (keys.unit_object("q.service"), format!(r#"{{"name":"q.service","hash":"{}"}}"#, hash(PLAIN))),
            (keys.unit_desired("q.service"), "launched".into()),
            (keys.unit_target("q.service"), "m2".into()),
            (
                keys.unit_object("g@1.service"),
                format!(r#"{{"name":"g@1.service","hash":"{g_new}","previousHash":"{g_old}"}}"#),
            ),
            (keys.unit_desired("g@1.service"), "launched".into()),
            (keys.unit_object("r.service"), format!(r#"{{"name":"r.service","hash":"{}"}}"#, hash(RESTARTED))),
            (keys.unit_desired("r.service"), "loaded".into()),
            (keys.unit_target("r.service"), "m1".into()),
            (keys.rollout_spec("pin"), encode_json(&spec("pin", RolloutKind::Replace, "g@1.service", &g_old, &g_new))),
            (keys.rollout_progress("pin"), encode_json(&progress("g@1.service", Phase::Pending))),
            (
                keys.rollout_spec("rr"),
                encode_json(&spec("rr", RolloutKind::Restart, "r.service", &hash(RESTARTED), &hash(RESTARTED))),
            ),
            (keys.rollout_progress("rr"), encode_json(&progress("r.service", Phase::Updating))),
        ];
        let scoped_kvs: Vec<(String, String)> = vec![
            (keys.body(&hash(PLAIN)), PLAIN.into()),
            (keys.body(&g_old), GLOBAL.into()),
            (keys.body(&g_new), GLOBAL_NEW.into()),
            (keys.body(&hash(RESTARTED)), RESTARTED.into()),
            (keys.schedule_entry("m1", "p.service"), format!(r#"{{"hash":"{}","desired":"launched"}}"#, hash(PLAIN))),
            (
                keys.schedule_entry("m1", "g@1.service"),
                format!(r#"{{"hash":"{g_old}","desired":"launched","global":true}}"#),
            ),
            (
                keys.schedule_entry("m1", "r.service"),
                format!(r#"{{"hash":"{}","desired":"loaded","restart":"rr"}}"#, hash(RESTARTED)),
            ),
        ];
        let fill = |mut s: Snapshot, kvs: &[(String, String)]| {
            for (k, v) in kvs {
                s.apply(&keys, k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 2, lease: 0 });
            }
            s
        };
        let full = fill(Snapshot::default(), &full);
        let scoped = fill(Snapshot::scoped("m1"), &scoped_kvs);
        let (from_full, from_scoped) =
            (UnitCache::new().cluster_units(&full, "m1"), UnitCache::new().cluster_units(&scoped, "m1"));
        let names: Vec<&str> = from_full.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["g@1.service", "p.service", "r.service"]);
        assert_eq!(from_full[0].hash, g_old, "the rollout keeps m1 on the old version");
        assert_eq!(from_full[2].restart.as_deref(), Some("rr"));
        assert_eq!(from_scoped, from_full);
        // A full view lists no unit from an entry alone: a destroyed unit's leftover entry is no unit.
        let leftover = fill(Snapshot::default(), &scoped_kvs[4..5]);
        assert_eq!(leftover.units().count(), 0);
    }
}

//! From the registry's view to the scheduler's input (spec §6.1): [`UnitCatalog`] turns a
//! [`store::Snapshot`](crate::store::Snapshot) into an engine [`ScheduleInput`], parsing each unit body once.
//!
//! * Bodies are parsed through the one parse cache, [`BodyCache`] (once per hash; constraints once per (name,
//!   hash)), shared in kind with the agent.
//! * A unit whose body is missing or does not parse is left out of the snapshot (neither scheduled nor
//!   unscheduled, as in the original), with one warning per hash rather than one per pass.
//! * Entries for hashes and names that left the registry are dropped after every build, so the cache never
//!   outgrows the cluster.

use std::collections::HashSet;

use super::constraints::Constraints;
use super::schedule_input::{ScheduleInput, ScheduleInputError, UnitSpec};
use crate::store;
use crate::unit::BodyCache;

/// The parse cache ([`BodyCache`]) and the bodies already warned about as missing, kept across reconcile passes
/// by the engine.
#[derive(Debug, Default)]
pub struct UnitCatalog {
    bodies: BodyCache,
    /// Hashes referenced by a unit object whose body is absent, already warned about.
    missing: HashSet<String>,
}

impl UnitCatalog {
    pub fn new() -> UnitCatalog {
        UnitCatalog::default()
    }

    /// The scheduler's input for one pass: every non-global unit with its desired state, target and constraints,
    /// every global unit (target ignored), and every present machine with merged metadata.
    pub fn snapshot(&mut self, view: &store::Snapshot) -> Result<ScheduleInput, ScheduleInputError> {
        let mut used_hashes: HashSet<&str> = HashSet::new();
        let mut missing_now: HashSet<String> = HashSet::new();
        let mut units = Vec::with_capacity(view.unit_records().len());
        for (name, record) in view.unit_records() {
            let Some(object) = record.object() else { continue };
            let hash = &*object.hash;
            let Some(body) = view.body(hash) else {
                if !self.missing.contains(hash) {
                    tracing::warn!(unit = %name, hash, "unit body missing from the registry; not scheduling the unit");
                }
                missing_now.insert(hash.to_string());
                continue;
            };
            used_hashes.insert(hash);
            // A body that does not parse leaves its units out (neither scheduled nor unscheduled).
            let Some(requirements) = self.bodies.requirements(name, hash, body) else { continue };
            let constraints: Constraints = (*requirements).clone();
            let target = if constraints.global { None } else { record.target().map(|t| t.to_string()) };
            units.push(UnitSpec {
                name: name.to_string(),
                desired: record.desired().unwrap_or(crate::model::JobState::Inactive),
                target,
                constraints,
            });
        }
        self.bodies.retain(
            |name, hash| view.unit_record(name).is_some() && used_hashes.contains(hash),
            |hash| used_hashes.contains(hash),
        );
        self.missing = missing_now;
        ScheduleInput::new(units, view.machines())
    }

    /// How many distinct bodies are cached (parsed or known unparsable).
    pub fn cached_bodies(&self) -> usize {
        self.bodies.bodies()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobState;
    use crate::store::{Change, Keys};

    const KEYS_PREFIX: &str = "/t/";

    /// A registry snapshot built from key/value pairs, as the reflector would list them.
    fn view(entries: &[(String, String)]) -> store::Snapshot {
        let keys = Keys::new(KEYS_PREFIX);
        let kvs: Vec<(Vec<u8>, Vec<u8>)> =
            entries.iter().map(|(k, v)| (format!("{KEYS_PREFIX}{k}").into_bytes(), v.clone().into_bytes())).collect();
        store::Snapshot::from_kvs(
            &keys,
            1,
            // Lease 1: machine presences are bound to one.
            kvs.iter().map(|(k, v)| (k.as_slice(), Change::Put { value: v.as_slice(), mod_revision: 1, lease: 1 })),
        )
    }

    fn hash(text: &str) -> String {
        crate::unit::UnitHash::of(text).to_hex()
    }

    /// Keys for one unit with `text` as its body.
    fn unit(name: &str, text: &str, desired: &str, target: Option<&str>) -> Vec<(String, String)> {
        let h = hash(text);
        let mut kv = vec![
            (format!("bodies/{h}"), text.to_string()),
            (format!("units/{name}/object"), format!(r#"{{"name":"{name}","hash":"{h}"}}"#)),
            (format!("units/{name}/desired"), desired.to_string()),
        ];
        if let Some(t) = target {
            kv.push((format!("units/{name}/target"), t.to_string()));
        }
        kv
    }

    fn machine(id: &str, metadata: &str) -> (String, String) {
        (format!("machines/{id}/object"), format!(r#"{{"id":"{id}","metadata":{metadata}}}"#))
    }

    #[test]
    fn units_machines_and_expanded_constraints_reach_the_scheduler() {
        let template =
            "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nConflicts=web@*.service\nMachineOf=side-%i.service\n";
        let global = "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nGlobal=true\nMachineMetadata=role=edge\n";
        let mut kv = Vec::new();
        kv.extend(unit("web@1.service", template, "launched", Some("m1")));
        kv.extend(unit("web@2.service", template, "loaded", None));
        kv.extend(unit("g.service", global, "launched", Some("stale")));
        kv.extend(unit("off.service", "[Service]\nExecStart=/bin/true\n", "inactive", None));
        kv.push(machine("m2", r#"{"role":"edge"}"#));
        kv.push(machine("m1", "{}"));
        let mut catalog = UnitCatalog::new();
        let snap = catalog.snapshot(&view(&kv)).unwrap();

        let names: Vec<&str> = snap.units().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["g.service", "off.service", "web@1.service", "web@2.service"]);
        let web1 = snap.unit("web@1.service").unwrap();
        assert_eq!((web1.desired, web1.target.as_deref()), (JobState::Launched, Some("m1")));
        assert_eq!(web1.constraints.machine_of, ["side-1.service"], "specifiers expanded per instance");
        assert_eq!(snap.unit("web@2.service").unwrap().constraints.machine_of, ["side-2.service"]);
        assert_eq!(snap.unit("web@2.service").unwrap().desired, JobState::Loaded);
        let g = snap.unit("g.service").unwrap();
        assert!(g.constraints.global);
        assert_eq!(g.target, None, "a global unit's stale target is not passed on");
        assert_eq!(g.constraints.machine_metadata["role"], ["edge"]);
        assert_eq!(snap.unit("off.service").unwrap().desired, JobState::Inactive);
        let machines: Vec<(&str, Option<&String>)> =
            snap.machines().iter().map(|m| (m.id.as_str(), m.metadata.get("role"))).collect();
        assert_eq!(machines, [("m1", None), ("m2", Some(&"edge".to_string()))]);
        assert_eq!(catalog.cached_bodies(), 3, "two instances share one parsed body");
    }

    #[test]
    fn units_with_missing_or_unparsable_bodies_are_left_out_and_the_cache_is_pruned() {
        let good = "[Service]\nExecStart=/bin/true\n";
        let bad = format!("[Service]\nExecStart={}\n", "x".repeat(5000));
        let mut kv = unit("good.service", good, "launched", None);
        kv.extend(unit("bad.service", &bad, "launched", None));
        let orphan_hash = "f".repeat(40);
        kv.push((
            "units/orphan.service/object".into(),
            format!(r#"{{"name":"orphan.service","hash":"{orphan_hash}"}}"#),
        ));
        kv.push(("units/orphan.service/desired".into(), "launched".into()));
        let mut catalog = UnitCatalog::new();
        let snap = catalog.snapshot(&view(&kv)).unwrap();
        assert_eq!(snap.units().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["good.service"]);
        assert_eq!(catalog.cached_bodies(), 2, "the unparsable body is remembered, so it is warned about once");
        assert!(catalog.missing.contains(&orphan_hash));

        // The bad unit is destroyed and the orphan gets its body: caches follow the registry.
        let mut kv = unit("good.service", good, "launched", None);
        kv.push((
            "units/orphan.service/object".into(),
            format!(r#"{{"name":"orphan.service","hash":"{}"}}"#, hash(good)),
        ));
        kv.push(("units/orphan.service/desired".into(), "launched".into()));
        let snap = catalog.snapshot(&view(&kv)).unwrap();
        assert_eq!(snap.units().count(), 2);
        assert_eq!(catalog.cached_bodies(), 1);
        assert!(catalog.missing.is_empty());
        assert_eq!(catalog.bodies.units(), 1, "the two listed units share one body without specifiers: one entry");
    }

    #[test]
    fn a_replaced_body_recomputes_the_constraints() {
        let v1 = "[Service]\nExecStart=/bin/true\n";
        let v2 = "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nMachineID=m2\n";
        let mut catalog = UnitCatalog::new();
        let snap = catalog.snapshot(&view(&unit("a.service", v1, "launched", None))).unwrap();
        assert_eq!(snap.unit("a.service").unwrap().constraints.machine_id, None);
        let snap = catalog.snapshot(&view(&unit("a.service", v2, "launched", None))).unwrap();
        assert_eq!(snap.unit("a.service").unwrap().constraints.machine_id.as_deref(), Some("m2"));
        assert_eq!(catalog.cached_bodies(), 1);
    }
}

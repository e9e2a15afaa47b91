//! The fake's registry image: its state (`state`) written out as the registry's keys and records, as a real
//! cluster's registry would hold it, and one pass of a pretend engine (and the agents' restarts) over the rollouts
//! in that image. Nothing here decides anything itself: the registry image is read by the API's
//! [`fleet_core::api_rules::decide_rollout`] and by the registry's [`SnapshotCluster`] (as the engine) +
//! [`rollout::advance`]; what each machine runs comes from the agents' own [`rollout::hash_on`] and
//! [`rollout::restart_token`].
//!
//! Machines act "at once": a machine runs whatever the agents' rule says the moment it is asked, and a version the
//! test marked unhealthy (`FakeClient::set_unhealthy`) reports `failed` wherever it runs. Time is the engine's
//! clock only: after a pass that changed a rollout it moves 1 ms, after a pass that changed nothing it jumps to
//! the rollouts' next deadline (the end of a `minHealthyMs`, or a health timeout), so a wait for a rollout ends
//! after a handful of reads whatever durations the rollout was given.

use super::state::{State, is_global, opts_hash, pinned_machine};
use fleet_core::model::JobState;
use fleet_core::rollout::{self, RolloutUnit};
use fleet_core::unit::UnitFile;
use fleet_registry::SnapshotCluster;
use fleet_registry::{Change, Keys, MachineObject, Snapshot, StateRecord, UnitObject};

/// The pretend engine's clock when a fake cluster is made (Unix ms).
pub(super) const START_MS: u64 = 1_700_000_000_000;

/// Machines that hold `name` (all of them for a global unit, else its scheduled machine), if it is not inactive.
fn holders(st: &State, name: &str) -> Vec<String> {
    let Some(u) = st.units.get(name) else { return Vec::new() };
    if u.desired == JobState::Inactive.as_str() {
        return Vec::new();
    }
    if is_global(name, &u.options) {
        return st.machines.iter().map(|m| m.id.clone()).collect();
    }
    pinned_machine(&u.options).or_else(|| st.machines.first().map(|m| m.id.clone())).into_iter().collect()
}

/// The agents' part: a machine whose step of a restart rollout is `updating` restarts the unit and marks it.
fn agents_restart(st: &mut State) {
    let mut marks = Vec::new();
    for name in st.units.keys() {
        for machine in holders(st, name) {
            if let Some(id) = rollout::restart_token(st.rollouts.values(), name, &machine) {
                marks.push(((name.clone(), machine), id.to_string()));
            }
        }
    }
    st.restarted.extend(marks);
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Registry records hold strings, numbers and maps only.
    serde_json::to_vec(value).unwrap_or_default()
}

/// The registry image of the fake cluster at this moment.
pub(super) fn registry_view(st: &State) -> Snapshot {
    let keys = Keys::new("/fake/");
    let mut kvs: Vec<(String, Vec<u8>)> = Vec::new();
    for m in &st.machines {
        let object = MachineObject {
            id: m.id.clone(),
            public_ip: m.primary_ip.clone(),
            metadata: m.metadata.clone(),
            ..Default::default()
        };
        kvs.push((keys.machine_object(&m.id), json(&object)));
    }
    for (hash, options) in &st.bodies {
        kvs.push((keys.body(hash), UnitFile::from_options(options.clone()).canonical().into_bytes()));
    }
    for (name, u) in &st.units {
        let hash = opts_hash(&u.options);
        kvs.push((keys.body(&hash), UnitFile::from_options(u.options.clone()).canonical().into_bytes()));
        let object = UnitObject {
            name: name.as_str().into(),
            hash: hash.as_str().into(),
            previous_hash: u.history.get(1).map(|v| v.hash.clone()),
            no_restart: false,
            history: u.history.clone(),
            desired: None,
        };
        kvs.push((keys.unit_object(name), json(&object)));
        kvs.push((keys.unit_desired(name), u.desired.clone().into_bytes()));
        let machines = holders(st, name);
        if !is_global(name, &u.options) {
            if let Some(target) = machines.first() {
                kvs.push((keys.unit_target(name), target.clone().into_bytes()));
            }
        }
        let launched = u.desired == JobState::Launched.as_str();
        for machine in &machines {
            let runs = rollout::hash_on(st.rollouts.values(), name, &hash, machine);
            let (active, sub) = match (launched, st.unhealthy.contains(runs)) {
                (true, false) => ("active", "running"),
                (true, true) => ("failed", "failed"),
                (false, _) => ("inactive", "dead"),
            };
            let record = StateRecord {
                hash: runs.into(),
                load_state: "loaded".into(),
                active_state: active.into(),
                sub_state: sub.into(),
                restarts: None,
                health: None,
                launched: None,
                restarted_for: None,
            };
            kvs.push((keys.state(name, machine), json(&record)));
            if launched {
                kvs.push((keys.unit_launched(name, machine), runs.as_bytes().to_vec()));
            }
        }
    }
    for ((unit, machine), id) in &st.restarted {
        kvs.push((keys.unit_restarted(unit, machine), id.clone().into_bytes()));
    }
    for (id, r) in &st.rollouts {
        kvs.push((keys.rollout_spec(id), json(&r.spec)));
        kvs.push((keys.rollout_control(id), json(&r.control)));
        if let Some(progress) = &r.progress {
            kvs.push((keys.rollout_progress(id), json(progress)));
        }
    }
    // Lease 1 for every key: a machine's presence is read only when bound to a lease.
    let changes = kvs.iter().map(|(k, v)| (k.as_bytes(), Change::Put { value: v, mod_revision: 1, lease: 1 }));
    Snapshot::from_kvs(&keys, 1, changes)
}

/// One pass of the pretend engine leader over every rollout that is not final (see the module doc for its clock).
pub(super) fn engine_pass(st: &mut State) {
    if st.rollouts_frozen || st.rollouts.values().all(|r| r.state().is_final()) {
        return;
    }
    agents_restart(st);
    let view = registry_view(st);
    let cluster = SnapshotCluster(&view);
    let now = st.clock_ms;
    let mut changed = false;
    let mut wake: Option<u64> = None;
    let mut roll_back: Vec<RolloutUnit> = Vec::new();
    for r in st.rollouts.values_mut().filter(|r| !r.state().is_final()) {
        let advanced = rollout::advance(r, &cluster, now);
        if let Some(at) = advanced.wake_at_ms {
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        if r.progress.as_ref() != Some(&advanced.progress) {
            r.progress = Some(advanced.progress);
            roll_back.extend(advanced.roll_back);
            changed = true;
        }
    }
    for unit in roll_back {
        if let Some(options) = st.bodies.get(&unit.from).cloned() {
            st.store_version(&unit.name, options);
        }
    }
    match wake {
        _ if changed => st.clock_ms += 1,
        Some(at) => st.clock_ms = st.clock_ms.max(at),
        None => {}
    }
}

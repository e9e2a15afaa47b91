//! An in-memory [`Client`]: a pretend cluster for command tests. Every write is decided by the API's own PUT
//! procedure ([`fleet_core::api_rules::decide_put`], spec §8.6), so the fake accepts and refuses exactly what fleetd
//! does; when `converge` is on, every unit reaches its desired state after `lag` observations, scheduled on the
//! first machine (or the one named by `MachineID=`), with systemd states to match. Every mutating call is logged,
//! including whether a replacement asked to be rescheduled.
//!
//! Rollouts go through the same pure code as in a real cluster (see [`registry_image`]): the API's
//! [`fleet_core::api_rules::decide_rollout`] over a registry image of the fake, the engine's [`fleet_core::rollout::advance`]
//! over that image, and the agents' [`fleet_core::rollout::hash_on`] / [`fleet_core::rollout::restart_token`] for what
//! each machine runs. A read of rollouts shows them as stored, then the engine makes one pass: a read right after
//! a user's action shows the rollout before the engine took it up, as in a real cluster.
//!
//! Cordons (issue 38) are decided by the API's [`fleet_core::api_rules::decide_cordon`] and shown with the machines;
//! the fake's pretend placement (the first machine) does not read them.
//!
//! Code map: `state` (what the fake holds, under its lock), `registry_image` (that state as the registry would hold
//! it, and the pretend engine's pass over it); this file is the [`Client`] over them and the knobs tests turn.

mod registry_image;
mod state;

use std::sync::Mutex;

use super::contract::{Client, StateFilter};
use super::error::ClientError;
use state::{FakeUnit, State, is_global, opts_hash, pinned_machine};

use fleet_core::api_rules::{self, ApiError, PutAction, decide_put};
use fleet_core::audit::{AuditList, Query, Write};
use fleet_core::rollout::Control;
use fleet_core::schema::{Machine, Rollout, RolloutRequest, Unit, UnitHistory, UnitState};
use fleet_core::unit::UnitFile;
use fleet_core::version::SemVer;

/// The fake cluster. Cheap to build; share it by reference.
#[derive(Debug, Default)]
pub struct FakeClient {
    state: Mutex<State>,
}

impl FakeClient {
    /// A cluster with machines `(id, ip)` that converges immediately.
    pub fn with_machines(machines: &[(&str, &str)]) -> Self {
        let fc = FakeClient::default();
        {
            let mut st = fc.lock();
            st.machines = machines
                .iter()
                .map(|(id, ip)| Machine { id: id.to_string(), primary_ip: ip.to_string(), ..Default::default() })
                .collect();
            st.converge = true;
            st.clock_ms = registry_image::START_MS;
        }
        fc
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Whether units reach their desired state at all.
    pub fn set_converge(&self, on: bool) {
        self.lock().converge = on;
    }

    /// Number of observations before a unit shows its new state.
    pub fn set_lag(&self, lag: u32) {
        self.lock().lag = lag;
    }

    /// Make every call fail with `err` (None to stop).
    pub fn fail_all(&self, err: Option<ClientError>) {
        self.lock().fail = err;
    }

    /// Make every desired-state write fail with `err` while reads still work (None to stop).
    pub fn fail_target_states(&self, err: Option<ClientError>) {
        self.lock().fail_target_states = err;
    }

    /// The newest fleetd version the cluster reports (for the etcd driver's version check).
    pub fn set_daemon_version(&self, version: &str) {
        self.lock().daemon_version = SemVer::parse(version);
    }

    /// Set a machine's metadata directly.
    pub fn set_metadata(&self, id: &str, key: &str, value: &str) {
        let mut st = self.lock();
        if let Some(m) = st.machines.iter_mut().find(|m| m.id == id) {
            m.metadata.insert(key.into(), value.into());
        }
    }

    /// Put a unit into the registry as-is (no log entry).
    pub fn insert_unit(&self, name: &str, text: &str, desired: &str) {
        let options = UnitFile::parse(text).map(|u| u.options().to_vec()).unwrap_or_default();
        let history = vec![fleet_registry::Version { hash: opts_hash(&options).into(), stored_ms: 0 }];
        self.lock().units.insert(name.into(), FakeUnit { options, history, desired: desired.into(), seen: u32::MAX });
    }

    /// Add a published state that is not derived from a unit (e.g. for list-units tests).
    pub fn push_state(&self, s: UnitState) {
        self.lock().states.push(s);
    }

    /// Make every machine that starts the version `text` of a unit report it `failed` (a new version that does
    /// not come up).
    pub fn set_unhealthy(&self, text: &str) {
        let hash = UnitFile::parse(text).map(|u| u.hash().to_hex()).unwrap_or_default();
        self.lock().unhealthy.insert(hash);
    }

    /// Stop (`true`) or let (`false`) the pretend engine advance rollouts.
    pub fn freeze_rollouts(&self, frozen: bool) {
        self.lock().rollouts_frozen = frozen;
    }

    /// Make the next `reads` reads of one rollout (`rollout(id)`, what a wait polls) fail with `err`.
    pub fn fail_rollout_reads(&self, reads: u32, err: ClientError) {
        self.lock().failing_rollout_reads = Some((reads, err));
    }

    /// The stored rollouts (as the engine left them), newest first.
    pub fn stored_rollouts(&self) -> Vec<fleet_core::rollout::Rollout> {
        Self::stored_rollouts_of(&self.lock())
    }

    fn stored_rollouts_of(st: &State) -> Vec<fleet_core::rollout::Rollout> {
        let mut all: Vec<fleet_core::rollout::Rollout> = st.rollouts.values().cloned().collect();
        all.sort_by(|a, b| (b.spec.created_ms, &b.spec.id).cmp(&(a.spec.created_ms, &a.spec.id)));
        all
    }

    /// Mutating calls so far: `create <name> <state>`, `replace <name> <state>` (with ` reschedule` when the
    /// request asked for it), `set <name> <state>`, `destroy <name>`, `meta ...`, `rollout <id> <kind> <units>`,
    /// `rollout <id> <action>`.
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// How many single-unit reads asked for `name`.
    pub fn unit_reads(&self, name: &str) -> u32 {
        self.lock().unit_reads.get(name).copied().unwrap_or(0)
    }

    /// The canonical text of a stored unit.
    pub fn unit_text(&self, name: &str) -> Option<String> {
        self.lock().units.get(name).map(|u| UnitFile::from_options(u.options.clone()).canonical())
    }

    /// Desired state of a stored unit.
    pub fn desired(&self, name: &str) -> Option<String> {
        self.lock().units.get(name).map(|u| u.desired.clone())
    }

    fn check_fail(st: &State) -> Result<(), ClientError> {
        match &st.fail {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The API view of one unit; counts as an observation.
    fn view(st: &mut State, name: &str) -> Option<Unit> {
        let converge = st.converge;
        let lag = st.lag;
        let first_machine = st.machines.first().map(|m| m.id.clone());
        let u = st.units.get_mut(name)?;
        u.seen = u.seen.saturating_add(1);
        let global = is_global(name, &u.options);
        let reached = converge && u.seen > lag;
        let mut out = Unit {
            name: name.to_string(),
            options: u.options.clone(),
            desired_state: u.desired.clone(),
            ..Default::default()
        };
        if global {
            return Some(out);
        }
        let target = pinned_machine(&u.options).or(first_machine);
        if u.desired == "inactive" {
            out.current_state = "inactive".into();
        } else if reached {
            out.current_state = u.desired.clone();
            out.machine_id = target.unwrap_or_default();
        } else {
            out.current_state = "inactive".into();
        }
        Some(out)
    }

    fn derived_states(st: &mut State) -> Vec<UnitState> {
        let names: Vec<String> = st.units.keys().cloned().collect();
        let mut out = Vec::new();
        let machines: Vec<String> = st.machines.iter().map(|m| m.id.clone()).collect();
        for name in names {
            let Some(u) = st.units.get(&name).cloned() else { continue };
            let global = is_global(&name, &u.options);
            let hash = opts_hash(&u.options);
            let (active, sub) = if u.desired == "launched" { ("active", "running") } else { ("inactive", "dead") };
            if u.desired == "inactive" || !st.converge {
                continue;
            }
            let on: Vec<String> = if global {
                machines.clone()
            } else {
                match Self::view(st, &name) {
                    Some(v) if !v.machine_id.is_empty() => vec![v.machine_id],
                    _ => vec![],
                }
            };
            for m in on {
                // A machine a replace rollout has not reached yet keeps the old version.
                let hash = fleet_core::rollout::hash_on(st.rollouts.values(), &name, &hash, &m).to_string();
                out.push(UnitState {
                    running_hash: if active == "active" { hash.clone() } else { String::new() },
                    hash,
                    machine_id: m,
                    name: name.clone(),
                    systemd_active_state: active.into(),
                    systemd_load_state: "loaded".into(),
                    systemd_sub_state: sub.into(),
                    machine_presence: String::new(),
                    health: None,
                });
            }
        }
        out.extend(st.states.iter().cloned());
        out.sort_by(|a, b| (&a.name, &a.machine_id).cmp(&(&b.name, &b.machine_id)));
        out
    }
    /// One `PUT /units/<name>`, decided as the API decides it.
    fn put(st: &mut State, unit: &Unit) -> Result<(), ClientError> {
        let stored = st.units.get(&unit.name).map(|u| opts_hash(&u.options));
        let action = decide_put(unit, stored.as_deref()).map_err(api_error)?;
        let name = unit.name.clone();
        match action {
            PutAction::Create(desired) | PutAction::Replace(desired) => {
                let verb = if matches!(action, PutAction::Create(_)) { "create" } else { "replace" };
                let reschedule = if api_rules::StoreOptions::of(unit, &action).reschedule { " reschedule" } else { "" };
                st.log.push(format!("{verb} {name} {desired}{reschedule}"));
                let old = st.units.remove(&name);
                let history = st.next_history(old.as_ref(), &unit.options);
                let stored = FakeUnit { options: unit.options.clone(), history, desired: desired.to_string(), seen: 0 };
                st.units.insert(name, stored);
            }
            PutAction::SetDesired(desired) => {
                if let Some(u) = st.units.get_mut(&name) {
                    u.desired = desired.to_string();
                    u.seen = 0;
                }
                st.log.push(format!("set {name} {desired}"));
            }
        }
        Ok(())
    }
}

/// The error the HTTP client reports for an API refusal.
fn api_error(e: ApiError) -> ClientError {
    ClientError::Api { code: e.status.as_u16(), message: e.message }
}

impl Client for FakeClient {
    fn machines(&self) -> Result<Vec<Machine>, ClientError> {
        let st = self.lock();
        Self::check_fail(&st)?;
        let mut ms = st.machines.clone();
        ms.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(ms)
    }

    fn units(&self) -> Result<Vec<Unit>, ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        let names: Vec<String> = st.units.keys().cloned().collect();
        Ok(names
            .iter()
            .filter_map(|n| {
                let mut u = Self::view(&mut st, n)?;
                if u.current_state.is_empty() {
                    u.current_state = "inactive".into();
                }
                Some(u)
            })
            .collect())
    }

    fn unit(&self, name: &str) -> Result<Option<Unit>, ClientError> {
        let mut st = self.lock();
        *st.unit_reads.entry(name.to_string()).or_default() += 1;
        Self::check_fail(&st)?;
        Ok(Self::view(&mut st, name))
    }

    fn create_unit(&self, unit: &Unit) -> Result<(), ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        let result = Self::put(&mut st, unit);
        st.record(Write::PutUnit(unit), ("PUT", format!("/units/{}", unit.name)), 201, &result);
        result
    }

    fn set_unit_target_state(&self, name: &str, state: &str) -> Result<(), ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        if let Some(e) = &st.fail_target_states {
            return Err(e.clone());
        }
        let unit = Unit { name: name.to_string(), desired_state: state.to_string(), ..Default::default() };
        let result = Self::put(&mut st, &unit);
        st.record(Write::PutUnit(&unit), ("PUT", format!("/units/{name}")), 204, &result);
        result
    }

    fn destroy_unit(&self, name: &str) -> Result<(), ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        let result = match st.units.remove(name) {
            None => Err(ClientError::Api { code: 404, message: "unit does not exist".into() }),
            Some(_) => {
                st.log.push(format!("destroy {name}"));
                Ok(())
            }
        };
        st.record(Write::DestroyUnit(name), ("DELETE", format!("/units/{name}")), 204, &result);
        result
    }

    fn unit_states(&self, filter: &StateFilter) -> Result<Vec<UnitState>, ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        Ok(Self::derived_states(&mut st)
            .into_iter()
            .filter(|s| filter.machine_id.as_ref().is_none_or(|m| &s.machine_id == m))
            .filter(|s| filter.unit_name.as_ref().is_none_or(|n| &s.name == n))
            .collect())
    }

    fn unit_state(&self, name: &str) -> Result<Option<UnitState>, ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        Ok(Self::derived_states(&mut st).into_iter().find(|s| s.name == name))
    }

    fn set_machine_metadata(&self, machine_id: &str, key: &str, value: &str) -> Result<(), ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        st.log.push(format!("meta {machine_id} {key}={value}"));
        if let Some(m) = st.machines.iter_mut().find(|m| m.id == machine_id) {
            m.metadata.insert(key.into(), value.into());
        }
        Ok(())
    }

    fn delete_machine_metadata(&self, machine_id: &str, key: &str) -> Result<(), ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        st.log.push(format!("meta {machine_id} -{key}"));
        if let Some(m) = st.machines.iter_mut().find(|m| m.id == machine_id) {
            m.metadata.remove(key);
        }
        Ok(())
    }

    fn cordon_machine(&self, machine_id: &str, cordon: bool) -> Result<(), ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        let found = st.machines.iter().position(|m| m.id == machine_id);
        let stored = found.filter(|&i| st.machines[i].cordoned).map(|_| fleet_registry::MachineRecord {
            cordon: Some(fleet_registry::Cordon::default()),
            ..Default::default()
        });
        let action = api_rules::decide_cordon(machine_id, found.is_some(), stored.as_ref(), cordon).map_err(api_error);
        let (method, path) = (if cordon { "PUT" } else { "DELETE" }, format!("/machines/{machine_id}/cordon"));
        st.record(Write::Cordon(machine_id, cordon), (method, path), 204, &action);
        let action = action?;
        let verb = if cordon { "cordon" } else { "uncordon" };
        match (action, found) {
            (api_rules::CordonAction::Write, Some(i)) => {
                st.machines[i].cordoned = cordon;
                st.log.push(format!("{verb} {machine_id}"));
            }
            _ => st.log.push(format!("{verb} {machine_id} (unchanged)")),
        }
        Ok(())
    }

    fn latest_daemon_version(&self) -> Result<Option<SemVer>, ClientError> {
        let st = self.lock();
        Self::check_fail(&st)?;
        Ok(st.daemon_version.clone())
    }

    fn create_rollout(&self, id: &str, request: &RolloutRequest) -> Result<Rollout, ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        if request.kind.plans_steps() {
            // A rebalance or a drain is planned by the engine's scheduler, which the fake does not run.
            return Err(ClientError::Api { code: 501, message: "the fake cluster does not rebalance or drain".into() });
        }
        let view = registry_image::registry_view(&st);
        let plan = api_rules::decide_rollout(id, request, &view, st.clock_ms).map_err(api_error)?;
        // Like the API: the new versions are stored with the rollout; the old ones are kept for a rollback.
        for unit in &plan.spec.units {
            let Some(stored) = st.units.get(&unit.name).cloned() else { continue };
            if let Some(new) = request.units.iter().find(|u| u.name == unit.name && !u.options.is_empty()) {
                st.bodies.insert(unit.from.clone(), stored.options);
                st.store_version(&unit.name, new.options.clone());
            }
        }
        let names: Vec<&str> = plan.spec.units.iter().map(|u| u.name.as_str()).collect();
        let kind = match plan.spec.kind {
            fleet_core::rollout::RolloutKind::Replace => "replace",
            fleet_core::rollout::RolloutKind::Restart => "restart",
            fleet_core::rollout::RolloutKind::Rebalance => "rebalance",
            fleet_core::rollout::RolloutKind::Drain => "drain",
        };
        st.log.push(format!("rollout {id} {kind} {}", names.join(",")));
        let stored = fleet_core::rollout::Rollout { spec: plan.spec, control: Control::default(), progress: None };
        let shown = api_rules::rollout(&stored);
        st.rollouts.insert(id.to_string(), stored);
        Ok(shown)
    }

    fn unit_history(&self, name: &str) -> Result<Option<UnitHistory>, ClientError> {
        let st = self.lock();
        Self::check_fail(&st)?;
        let Some(u) = st.units.get(name) else { return Ok(None) };
        let object = fleet_registry::UnitObject {
            name: name.into(),
            hash: opts_hash(&u.options).into(),
            previous_hash: None,
            no_restart: false,
            history: u.history.clone(),
            desired: None,
        };
        let body = |hash: &str| {
            let options = if hash == &*object.hash { Some(&u.options) } else { st.bodies.get(hash) };
            options.map(|o| std::sync::Arc::from(UnitFile::from_options(o.clone()).canonical()))
        };
        let mut history = api_rules::history(&object, body);
        fleet_core::audit::authors(name, &mut history, &st.audit);
        Ok(Some(history))
    }

    fn audit(&self, query: &Query) -> Result<AuditList, ClientError> {
        let st = self.lock();
        Self::check_fail(&st)?;
        Ok(fleet_core::audit::select(st.audit.iter().cloned().map(Ok), query))
    }

    fn rollouts(&self) -> Result<Vec<Rollout>, ClientError> {
        let shown = {
            let st = self.lock();
            Self::check_fail(&st)?;
            Self::stored_rollouts_of(&st)
        };
        registry_image::engine_pass(&mut self.lock());
        Ok(shown.iter().map(api_rules::rollout).collect())
    }

    fn rollout(&self, id: &str) -> Result<Option<Rollout>, ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        if let Some((left, err)) = st.failing_rollout_reads.take() {
            if left > 0 {
                st.failing_rollout_reads = Some((left - 1, err.clone()));
                return Err(err);
            }
        }
        let shown = st.rollouts.get(id).map(api_rules::rollout);
        registry_image::engine_pass(&mut st);
        Ok(shown)
    }

    fn control_rollout(&self, id: &str, control: fleet_core::schema::RolloutControl) -> Result<(), ClientError> {
        let mut st = self.lock();
        Self::check_fail(&st)?;
        let Some(rollout) = st.rollouts.get_mut(id) else {
            return Err(ClientError::Api { code: 404, message: "rollout does not exist".into() });
        };
        rollout.control = api_rules::decide_control(rollout, control).map_err(api_error)?;
        st.log.push(format!("rollout {id} {}", control.action.as_str()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "[Service]\nExecStart=/bin/sleep 100\n";
    const V2: &str = "[Service]\nExecStart=/bin/sleep 200\n";

    fn unit(name: &str, text: &str, desired: &str, reschedule: bool) -> Unit {
        let options = UnitFile::parse(text).unwrap().into_options();
        Unit { name: name.into(), options, desired_state: desired.into(), reschedule, ..Default::default() }
    }

    #[test]
    fn writes_are_logged_with_what_the_request_asked_for() {
        let c = FakeClient::with_machines(&[("m1", "10.0.0.1")]);
        c.create_unit(&unit("a.service", V1, "", false)).unwrap();
        c.set_unit_target_state("a.service", "launched").unwrap();
        c.create_unit(&unit("a.service", V2, "launched", true)).unwrap();
        c.create_unit(&unit("a.service", V1, "launched", false)).unwrap();
        // Same content: only the desired state changes, and reschedule means nothing then (as in the API).
        c.create_unit(&unit("a.service", V1, "loaded", true)).unwrap();
        assert_eq!(
            c.log(),
            [
                "create a.service inactive",
                "set a.service launched",
                "replace a.service launched reschedule",
                "replace a.service launched",
                "set a.service loaded",
            ]
        );
    }

    fn rollout_request(kind: fleet_core::rollout::RolloutKind, units: &[(&str, &str)]) -> RolloutRequest {
        RolloutRequest {
            kind,
            units: units
                .iter()
                .map(|(name, text)| fleet_core::schema::RolloutRequestUnit {
                    name: name.to_string(),
                    options: if text.is_empty() { Vec::new() } else { UnitFile::parse(text).unwrap().into_options() },
                })
                .collect(),
            max_unavailable: Some(1),
            min_healthy_ms: Some(0),
            health_timeout_ms: Some(1000),
            on_failure: Some(fleet_core::rollout::OnFailure::Pause),
            ..RolloutRequest::default()
        }
    }

    #[test]
    fn rollouts_are_refused_as_the_api_refuses_them() {
        use fleet_core::rollout::RolloutKind::{Replace, Restart};
        let c = FakeClient::with_machines(&[("m1", "10.0.0.1")]);
        c.insert_unit("a.service", V1, "launched");
        c.insert_unit("b.service", V1, "loaded");
        let refused = |id: &str, request: RolloutRequest| c.create_rollout(id, &request).unwrap_err().to_string();
        assert_eq!(
            refused("r1", rollout_request(Replace, &[("x.service", V2)])),
            "googleapi: Error 404: unit \"x.service\" does not exist"
        );
        assert_eq!(
            refused("r1", rollout_request(Replace, &[("a.service", V1)])),
            "googleapi: Error 409: unit \"a.service\" already has this content"
        );
        assert_eq!(
            refused("r1", rollout_request(Restart, &[("a.service", V2)])),
            "googleapi: Error 400: a restart takes no options (unit \"a.service\")"
        );
        assert_eq!(
            refused("r1", rollout_request(Restart, &[("b.service", "")])),
            "googleapi: Error 409: unit \"b.service\" is loaded (a rollout changes launched units)"
        );
        assert_eq!(
            refused("bad id", rollout_request(Restart, &[("a.service", "")])),
            "googleapi: Error 400: invalid rollout ID \"bad id\": at most 64 of A-Z a-z 0-9 _ . -"
        );
        assert!(c.log().is_empty());
        let created = c.create_rollout("r1", &rollout_request(Replace, &[("a.service", V2)])).unwrap();
        assert_eq!(
            (created.id.as_str(), created.state, created.steps.len()),
            ("r1", fleet_core::rollout::RolloutState::Running, 0)
        );
        assert_eq!(c.unit_text("a.service").unwrap(), V2, "the new version is stored with the rollout");
        assert_eq!(
            refused("r1", rollout_request(Restart, &[("a.service", "")])),
            "googleapi: Error 409: rollout \"r1\" already exists"
        );
        assert_eq!(
            c.control_rollout(
                "r2",
                fleet_core::schema::RolloutControl { action: fleet_core::rollout::Action::Pause, skip_failed: false }
            )
            .unwrap_err()
            .to_string(),
            "googleapi: Error 404: rollout does not exist"
        );
    }

    #[test]
    fn the_fake_refuses_what_the_api_refuses() {
        let c = FakeClient::with_machines(&[("m1", "10.0.0.1")]);
        let err = c.set_unit_target_state("missing.service", "launched").unwrap_err();
        assert_eq!(err.to_string(), "googleapi: Error 409: unit does not exist and options field empty");
        c.create_unit(&unit("t@.service", V1, "", false)).unwrap();
        let err = c.set_unit_target_state("t@.service", "launched").unwrap_err();
        assert_eq!(err.to_string(), "googleapi: Error 400: cannot activate template \"t@.service\"");
        let err = c.create_unit(&unit("b.service", V1, "running", false)).unwrap_err();
        assert_eq!(err.to_string(), "googleapi: Error 400: invalid value \"running\" for JobState");
        assert_eq!(c.log(), ["create t@.service inactive"]);
    }
}

//! [`Client`] directly over etcd (`--driver=etcd`, spec §9.3), built on the registry module: no fleetd and no HTTP
//! API in between, but the same answers the API would give.
//!
//! * Reads are one consistent registry read each: a whole snapshot for unit listings (units, bodies and states
//!   are needed together for current states), and scoped reads (one unit, states, machines) for the rest, so the
//!   polling in fleetctl's waits does not re-read a whole cluster every half second. Units and states are derived
//!   exactly as the API derives them (the registry's snapshot views, spec §7.2, §8.6).
//! * Writes apply the API's PUT procedure ([`decide_put`], spec §8.6, with the recommended validation of
//!   replacements and desired states), so a unit this driver stores is one the API would have stored. Unlike the
//!   original's etcd driver, creating a unit without options is refused like the API refuses it.
//! * After a replace or destroy, unreferenced unit bodies are garbage-collected (the original leaked them, L9).
//!
//! The trait is synchronous: the client owns one single-threaded tokio runtime and blocks on it per call. The etcd
//! connection is established lazily by the first request, so an unreachable etcd surfaces as that command's error
//! (as in the original) rather than as `Unable to initialize client`.

use std::future::Future;
use std::time::Duration;

use super::{BuildError, Client, ClientError, StateFilter};
use crate::model::{JobState, MachineState};
use crate::registry::{EtcdConfig, PutUnit, Registry, RegistryError, Snapshot, UnitView, UnitWrite};
use crate::schema::{Machine, Unit, UnitState};
use crate::unit::{NameInfo, Requirements, UnitFile, name, xfleet};
use crate::version::SemVer;

/// fleetctl's client over etcd.
pub struct EtcdClient {
    runtime: tokio::runtime::Runtime,
    registry: Registry,
}

/// Per-request timeout used when `--request-timeout` is zero or negative ("no timeout").
const NO_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl EtcdClient {
    /// A client for the comma-separated etcd URLs in `endpoints`, under `prefix`. `request_timeout` bounds every
    /// etcd request (zero: unbounded).
    pub fn new(endpoints: &str, prefix: &str, request_timeout: Duration) -> Result<EtcdClient, BuildError> {
        let endpoints: Vec<String> =
            endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_string).collect();
        if endpoints.is_empty() {
            return Err(BuildError::Etcd("no etcd endpoint given (--endpoint)".into()));
        }
        if let Some(tls) = endpoints.iter().find(|e| e.starts_with("https://")) {
            return Err(BuildError::Etcd(format!("TLS to etcd is not supported yet: {tls}")));
        }
        let config = EtcdConfig {
            endpoints,
            prefix: prefix.to_string(),
            request_timeout: if request_timeout.is_zero() { NO_TIMEOUT } else { request_timeout },
            user: None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BuildError::Runtime(e.to_string()))?;
        // Connecting builds the channel only; the first request dials.
        let registry = runtime.block_on(Registry::connect(&config)).map_err(|e| BuildError::Etcd(e.to_string()))?;
        Ok(EtcdClient { runtime, registry })
    }

    fn run<T>(&self, op: impl Future<Output = Result<T, RegistryError>>) -> Result<T, ClientError> {
        self.runtime.block_on(op).map_err(client_error)
    }

    fn read_unit(&self, name: &str) -> Result<Snapshot, ClientError> {
        if name::validate_name(name).is_err() {
            // Such a unit cannot exist; the registry would also refuse names it cannot put in a key.
            return Ok(Snapshot::default());
        }
        self.run(self.registry.read_unit_snapshot(name))
    }

    /// Deletes unit bodies nothing refers to any more. Best effort: the engine leader collects them too.
    fn collect_garbage(&self) {
        if let Err(e) = self.runtime.block_on(self.registry.collect_garbage()) {
            tracing::warn!(error = %e, "cannot garbage-collect unit bodies");
        }
    }

    /// Stores `unit`, returning whether an earlier version was replaced.
    fn store(&self, name: &str, unit: &UnitFile, desired: JobState) -> Result<bool, ClientError> {
        let (text, hash) = (unit.canonical(), unit.hash().to_hex());
        let put = PutUnit { name, text: &text, hash: &hash, desired };
        Ok(matches!(self.run(self.registry.put_unit(&put))?, UnitWrite::Replaced { .. }))
    }
}

/// Registry errors as fleetctl shows them; "not found" keeps the API's 404 so callers can tell it apart.
fn client_error(e: RegistryError) -> ClientError {
    match e {
        RegistryError::UnitNotFound { .. } => {
            ClientError::Rejected { code: 404, message: "unit does not exist".into() }
        }
        RegistryError::InvalidComponent(e) => ClientError::Rejected { code: 400, message: e.to_string() },
        other => ClientError::Other(other.to_string()),
    }
}

/// A refusal with the status the API would have answered.
fn reject(code: u16, message: impl Into<String>) -> ClientError {
    ClientError::Rejected { code, message: message.into() }
}

/// What a `PUT /units/<name>` does (spec §8.6), once the request passed [`decide_put`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutAction {
    /// The unit does not exist: store it with this desired state.
    Create(JobState),
    /// The unit exists with other content: store the new content with this desired state.
    Replace(JobState),
    /// The unit exists with the same content (or the request has none): change its desired state.
    SetDesired(JobState),
}

/// The API's PUT procedure (spec §8.6 steps 4–8) as a pure decision over the request `unit` and the stored unit's
/// hash (`None`: it does not exist). Follows the spec's recommendations where the original was lax: replacements
/// are validated like creations, and unknown desired states are refused on every path. Errors carry the API's
/// status code and message.
pub fn decide_put(unit: &Unit, stored_hash: Option<&str>) -> Result<PutAction, ClientError> {
    name::validate_name(&unit.name).map_err(|e| reject(400, e.to_string()))?;
    let desired = || -> Result<Option<JobState>, ClientError> {
        if unit.desired_state.is_empty() {
            return Ok(None);
        }
        unit.desired_state.parse::<JobState>().map(Some).map_err(|e| reject(400, e.to_string()))
    };
    let content = UnitFile::from_options(unit.options.clone());
    let validate = || xfleet::validate_options(&content).map_err(|e| reject(400, e.to_string()));
    match stored_hash {
        None if unit.options.is_empty() => Err(reject(409, "unit does not exist and options field empty")),
        None => {
            validate()?;
            Ok(PutAction::Create(desired()?.unwrap_or(JobState::Inactive)))
        }
        Some(stored) if !unit.options.is_empty() && content.hash().to_hex() != stored => {
            validate()?;
            Ok(PutAction::Replace(desired()?.unwrap_or(JobState::Inactive)))
        }
        Some(_) => {
            if unit.desired_state.is_empty() {
                return Err(reject(409, "must provide DesiredState to update existing unit"));
            }
            let is_template = NameInfo::parse(&unit.name).is_some_and(|i| i.is_template());
            if is_template && unit.desired_state != JobState::Inactive.as_str() {
                return Err(reject(400, format!("cannot activate template {}", name::go_quote(&unit.name))));
            }
            Ok(PutAction::SetDesired(desired()?.unwrap_or(JobState::Inactive)))
        }
    }
}

/// A unit as the API shows it (spec §8.6): in listings global units show `inactive` and no machine; a single GET
/// of a global unit omits both. `None` when the stored body does not parse (the unit is skipped, §3.2).
fn api_unit(view: &UnitView<'_>, single: bool) -> Option<Unit> {
    let content = match UnitFile::parse(view.body) {
        Ok(content) => content,
        Err(e) => {
            tracing::warn!(unit = %view.name, error = %e.located(), "skipping unit whose stored body does not parse");
            return None;
        }
    };
    let global = Requirements::of(&content, view.name).global;
    let (current, machine) = match (global, single) {
        (true, true) => ("", ""),
        (true, false) => (JobState::Inactive.as_str(), ""),
        (false, _) => (view.current.as_str(), view.target.unwrap_or("")),
    };
    Some(Unit {
        name: view.name.to_string(),
        options: content.into_options(),
        desired_state: view.desired.as_str().to_string(),
        current_state: current.to_string(),
        machine_id: machine.to_string(),
    })
}

fn api_state(s: crate::model::UnitState) -> UnitState {
    UnitState {
        hash: s.hash,
        machine_id: s.machine_id,
        name: s.name,
        systemd_active_state: s.active_state,
        systemd_load_state: s.load_state,
        systemd_sub_state: s.sub_state,
    }
}

fn api_machine(m: MachineState) -> Machine {
    Machine { id: m.id, metadata: m.metadata, primary_ip: m.public_ip }
}

impl Client for EtcdClient {
    fn machines(&self) -> Result<Vec<Machine>, ClientError> {
        let snapshot = self.run(self.registry.read_machines_snapshot())?;
        Ok(snapshot.machines().map(api_machine).collect())
    }

    fn units(&self) -> Result<Vec<Unit>, ClientError> {
        let snapshot = self.run(self.registry.read_snapshot())?;
        Ok(snapshot.units().filter_map(|view| api_unit(&view, false)).collect())
    }

    fn unit(&self, name: &str) -> Result<Option<Unit>, ClientError> {
        let snapshot = self.read_unit(name)?;
        Ok(snapshot.unit(name).and_then(|view| api_unit(&view, true)))
    }

    fn create_unit(&self, unit: &Unit) -> Result<(), ClientError> {
        let stored = if name::validate_name(&unit.name).is_ok() { Some(self.read_unit(&unit.name)?) } else { None };
        let stored_hash = stored.as_ref().and_then(|s| s.unit(&unit.name)).map(|view| view.hash);
        match decide_put(unit, stored_hash)? {
            PutAction::Create(desired) | PutAction::Replace(desired) => {
                let content = UnitFile::from_options(unit.options.clone());
                if self.store(&unit.name, &content, desired)? {
                    self.collect_garbage();
                }
            }
            PutAction::SetDesired(desired) => {
                self.run(self.registry.set_desired(&unit.name, desired))?;
            }
        }
        Ok(())
    }

    fn set_unit_target_state(&self, name: &str, state: &str) -> Result<(), ClientError> {
        // What the HTTP client sends: a PUT with only name and desired state.
        self.create_unit(&Unit { name: name.to_string(), desired_state: state.to_string(), ..Default::default() })
    }

    fn destroy_unit(&self, name: &str) -> Result<(), ClientError> {
        name::validate_name(name).map_err(|e| reject(400, e.to_string()))?;
        self.run(self.registry.destroy_unit(name))?;
        self.collect_garbage();
        Ok(())
    }

    fn unit_states(&self, filter: &StateFilter) -> Result<Vec<UnitState>, ClientError> {
        let unit = filter.unit_name.as_deref();
        if unit.is_some_and(|n| name::validate_name(n).is_err()) {
            return Ok(Vec::new());
        }
        let snapshot = self.run(self.registry.read_states_snapshot(unit))?;
        Ok(snapshot
            .unit_states()
            .filter(|s| filter.machine_id.as_ref().is_none_or(|m| &s.machine_id == m))
            .filter(|s| unit.is_none_or(|n| s.name == n))
            .map(api_state)
            .collect())
    }

    fn unit_state(&self, name: &str) -> Result<Option<UnitState>, ClientError> {
        let filter = StateFilter { machine_id: None, unit_name: Some(name.to_string()) };
        Ok(self.unit_states(&filter)?.into_iter().next())
    }

    fn set_machine_metadata(&self, machine_id: &str, key: &str, value: &str) -> Result<(), ClientError> {
        if value.is_empty() {
            return Err(reject(400, "invalid value: add and replace require a value"));
        }
        self.run(self.registry.set_metadata(machine_id, key, value)).map(drop)
    }

    fn delete_machine_metadata(&self, machine_id: &str, key: &str) -> Result<(), ClientError> {
        self.run(self.registry.remove_metadata(machine_id, key)).map(drop)
    }

    fn latest_daemon_version(&self) -> Result<Option<SemVer>, ClientError> {
        let snapshot = self.run(self.registry.read_machines_snapshot())?;
        Ok(snapshot.machines().filter_map(|m| SemVer::parse(&m.version)).max())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::UnitOption;

    const HELLO: &str = "[Service]\nExecStart=/bin/sleep 100\n";

    fn unit(name: &str, text: &str, desired: &str) -> Unit {
        let options = UnitFile::parse(text).unwrap().into_options();
        Unit { name: name.into(), options, desired_state: desired.into(), ..Default::default() }
    }

    fn hash(text: &str) -> String {
        UnitFile::parse(text).unwrap().hash().to_hex()
    }

    fn rejected(r: Result<PutAction, ClientError>) -> (u16, String) {
        match r {
            Err(ClientError::Rejected { code, message }) => (code, message),
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn new_units_are_created_inactive_unless_a_state_is_given() {
        assert_eq!(decide_put(&unit("a.service", HELLO, ""), None).unwrap(), PutAction::Create(JobState::Inactive));
        let launched = unit("a.service", HELLO, "launched");
        assert_eq!(decide_put(&launched, None).unwrap(), PutAction::Create(JobState::Launched));
    }

    #[test]
    fn creation_is_validated_like_the_api() {
        let empty = Unit { name: "empty.service".into(), ..Default::default() };
        assert_eq!(rejected(decide_put(&empty, None)), (409, "unit does not exist and options field empty".into()));
        assert_eq!(
            rejected(decide_put(&unit("bad name.service", HELLO, ""), None)),
            (400, "invalid character ' ' in unit name".into())
        );
        let gm = unit("gm.service", "[X-Fleet]\nGlobal=true\nMachineOf=a.service\n", "");
        assert_eq!(rejected(decide_put(&gm, None)), (400, "Global cannot be used with Peers".into()));
        assert_eq!(
            rejected(decide_put(&unit("a.service", HELLO, "running"), None)),
            (400, "invalid value \"running\" for JobState".into())
        );
    }

    #[test]
    fn different_content_replaces_and_is_validated_too() {
        let stored = hash("[Service]\nExecStart=/bin/true\n");
        assert_eq!(
            decide_put(&unit("a.service", HELLO, ""), Some(&stored)).unwrap(),
            PutAction::Replace(JobState::Inactive)
        );
        let bad = unit("a.service", "[X-Fleet]\nMachineID=x\nConflicts=b.service\n", "loaded");
        assert_eq!(rejected(decide_put(&bad, Some(&stored))), (400, "MachineID cannot be used with Conflicts".into()));
    }

    #[test]
    fn same_or_no_content_changes_the_desired_state() {
        let stored = hash(HELLO);
        assert_eq!(
            decide_put(&unit("a.service", HELLO, "loaded"), Some(&stored)).unwrap(),
            PutAction::SetDesired(JobState::Loaded)
        );
        let bare = Unit { name: "a.service".into(), desired_state: "launched".into(), ..Default::default() };
        assert_eq!(decide_put(&bare, Some(&stored)).unwrap(), PutAction::SetDesired(JobState::Launched));
        let no_state = Unit { desired_state: String::new(), ..bare.clone() };
        assert_eq!(
            rejected(decide_put(&no_state, Some(&stored))),
            (409, "must provide DesiredState to update existing unit".into())
        );
        let unknown = Unit { desired_state: "bogus".into(), ..bare };
        assert_eq!(rejected(decide_put(&unknown, Some(&stored))), (400, "invalid value \"bogus\" for JobState".into()));
    }

    #[test]
    fn templates_cannot_be_activated() {
        let stored = hash(HELLO);
        let t = |state: &str| Unit { name: "t@.service".into(), desired_state: state.into(), ..Default::default() };
        assert_eq!(
            rejected(decide_put(&t("launched"), Some(&stored))),
            (400, "cannot activate template \"t@.service\"".into())
        );
        assert_eq!(
            rejected(decide_put(&t("loaded"), Some(&stored))),
            (400, "cannot activate template \"t@.service\"".into())
        );
        assert_eq!(decide_put(&t("inactive"), Some(&stored)).unwrap(), PutAction::SetDesired(JobState::Inactive));
    }

    #[test]
    fn global_units_show_no_current_state_on_get_and_inactive_in_lists() {
        let body: std::sync::Arc<str> = "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nGlobal=true\n".into();
        let view = UnitView {
            name: "g.service",
            hash: "h",
            previous_hash: None,
            body: &body,
            desired: JobState::Launched,
            target: None,
            current: JobState::Inactive,
        };
        let single = api_unit(&view, true).unwrap();
        assert_eq!((single.current_state.as_str(), single.desired_state.as_str()), ("", "launched"));
        assert_eq!(single.options[1], UnitOption::new("X-Fleet", "Global", "true"));
        assert_eq!(api_unit(&view, false).unwrap().current_state, "inactive");
        let garbage: std::sync::Arc<str> = "[Unit\n".into();
        assert!(api_unit(&UnitView { body: &garbage, ..view }, false).is_none());
    }
}

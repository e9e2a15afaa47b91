//! [`Client`] directly over etcd (`--driver=etcd`, spec §9.3), built on the registry module: no fleetd and no HTTP
//! API in between, but the same answers the API would give.
//!
//! * Reads are one consistent registry read each: a whole snapshot for unit listings (units, bodies and states
//!   are needed together for current states), and scoped reads (one unit, states, machines) for the rest, so the
//!   polling in fleetctl's waits does not re-read a whole cluster every half second. Units and states are derived
//!   exactly as the API derives them (the registry's snapshot views, spec §7.2, §8.6).
//! * Writes apply the API's PUT procedure ([`wire::decide_put`], spec §8.6, with the recommended validation of
//!   replacements and desired states), so a unit this driver stores is one the API would have stored. Unlike the
//!   original's etcd driver, creating a unit without options is refused like the API refuses it.
//! * It writes only what the API writes ([`ApiWriter`]); unreferenced unit bodies are the engine leader's to
//!   collect, as after any API write.
//! * Rollouts are decided as the API decides them ([`wire::decide_rollout`] over a whole-registry read, then
//!   [`ApiWriter::create_rollout`]; [`wire::decide_control`] then [`ApiWriter::set_rollout_control`]) and shown as the
//!   API shows them ([`wire::stored_rollout`]); a wait for a rollout's next change is one etcd watch of its keys.
//!   The engine leader of the cluster drives them as usual.
//!
//! * Every write is recorded in the audit trail as the API records it (issue 38; `fleet_core::audit::describe`),
//!   `via: etcd-driver`, named `user@host` of this process, with the status the API would have answered. A record
//!   that cannot be written is logged; the write's own result stands.
//!
//! The trait is synchronous: the client owns one single-threaded tokio runtime and blocks on it per call. The etcd
//! connection is established lazily by the first request, so an unreachable etcd surfaces as that command's error
//! (as in the original) rather than as `Unable to initialize client`.

use std::future::Future;
use std::time::Duration;

use super::contract::{Client, StateFilter};
use super::error::{BuildError, ClientError};
use fleet_core::api_rules::{self, ApiError, CordonAction, PutAction, StoreOptions};
use fleet_core::audit::{self, AuditList, AuditRecord, Query, Via, Who, Write};
use fleet_core::model::JobState;
use fleet_core::rollout::Control;
use fleet_core::schema::{Machine, MachineMetadataOp, Rollout, RolloutRequest, Unit, UnitHistory, UnitState};
use fleet_core::unit::{UnitFile, name};
use fleet_core::version::SemVer;
use fleet_registry::{ApiWriter, EtcdConfig, PutUnit, Registry, RegistryError, RolloutBody, Snapshot};

/// fleetctl's client over etcd.
pub struct EtcdClient {
    runtime: tokio::runtime::Runtime,
    /// fleetctl stands in for the API here, so it holds the API's writes and nothing more.
    registry: ApiWriter,
    /// Who the audit trail names for this process's writes.
    who: Who,
}

/// Per-request timeout used when `--request-timeout` is zero or negative ("no timeout").
const NO_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl EtcdClient {
    /// A client for the comma-separated etcd URLs in `endpoints`, under `prefix`. `request_timeout` bounds every
    /// etcd request (zero: unbounded).
    pub fn new(
        endpoints: &str,
        prefix: &str,
        request_timeout: Duration,
        tls: fleet_tls::ClientFiles,
    ) -> Result<EtcdClient, BuildError> {
        let endpoints: Vec<String> =
            endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_string).collect();
        if endpoints.is_empty() {
            return Err(BuildError::Etcd("no etcd endpoint given (--endpoint)".into()));
        }
        let config = EtcdConfig {
            endpoints,
            prefix: prefix.to_string(),
            request_timeout: if request_timeout.is_zero() { NO_TIMEOUT } else { request_timeout },
            user: None,
            tls,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BuildError::Runtime(e.to_string()))?;
        // Connecting builds the channel only; the first request dials.
        let registry = runtime.block_on(Registry::connect(&config)).map_err(|e| BuildError::Etcd(e.to_string()))?;
        Ok(EtcdClient { runtime, registry: ApiWriter::new(registry), who: local_user() })
    }

    /// Records `write` (the API's `method path`) with its result in the audit trail; a failure is logged only.
    fn record<T>(&self, write: Write<'_>, method: &str, path: &str, done: u16, result: &Result<T, ClientError>) {
        let (status, error) = match result {
            Ok(_) => (done, None),
            Err(ClientError::Rejected { code, message }) => (*code, Some(message.clone())),
            Err(other) => (500, Some(other.to_string())),
        };
        let request = (method.to_string(), format!("/fleet/v1{path}"));
        let now = fleet_core::model::now_ms();
        let record = audit::describe(write).into_record(now, self.who.clone(), request, (status, error));
        if let Err(e) = self.runtime.block_on(self.registry.record_audit(&record, &audit::next_suffix())) {
            tracing::warn!(error = %e, action = %record.action, "cannot write the audit record of this write");
        }
    }

    /// [`Client::create_unit`], unrecorded: the status the API would answer.
    fn put_unit(&self, unit: &Unit) -> Result<u16, ClientError> {
        let stored = if name::validate_name(&unit.name).is_ok() { Some(self.read_unit(&unit.name)?) } else { None };
        let stored_hash = stored.as_ref().and_then(|s| s.unit(&unit.name)).map(|view| view.hash);
        let action = api_rules::decide_put(unit, stored_hash).map_err(rejected)?;
        match action {
            PutAction::Create(desired) | PutAction::Replace(desired) => {
                let options = StoreOptions::of(unit, &action);
                let content = UnitFile::from_options(unit.options.clone());
                self.store(&unit.name, &content, desired, options)?;
                Ok(201)
            }
            PutAction::SetDesired(desired) => {
                self.run(self.registry.set_desired(&unit.name, desired))?;
                Ok(204)
            }
        }
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

    /// Stores `unit` (created, or an earlier version replaced).
    fn store(&self, name: &str, unit: &UnitFile, desired: JobState, options: StoreOptions) -> Result<(), ClientError> {
        let (text, hash) = (unit.canonical(), unit.hash().to_hex());
        let StoreOptions { reschedule, no_restart } = options;
        let put = PutUnit { name, text: &text, hash: &hash, desired, reschedule, no_restart };
        self.run(self.registry.put_unit(&put)).map(drop)
    }
}

/// Registry errors as fleetctl shows them; "not found" keeps the API's 404 so callers can tell it apart.
fn client_error(e: RegistryError) -> ClientError {
    match e {
        RegistryError::UnitNotFound { .. } => {
            ClientError::Rejected { code: 404, message: "unit does not exist".into() }
        }
        RegistryError::InvalidComponent(e) => ClientError::Rejected { code: 400, message: e.to_string() },
        RegistryError::RolloutNotFound { .. } => {
            ClientError::Rejected { code: 404, message: "rollout does not exist".into() }
        }
        RegistryError::RolloutExists { id } => rejected(api_rules::rollout_exists(&id)),
        e @ (RegistryError::UnitChanged { .. } | RegistryError::CordonChanged { .. }) => {
            ClientError::Rejected { code: 409, message: e.to_string() }
        }
        other => ClientError::Other(other.to_string()),
    }
}

/// A refusal with the status the API would have answered.
fn reject(code: u16, message: impl Into<String>) -> ClientError {
    ClientError::Rejected { code, message: message.into() }
}

/// The API's refusal as fleetctl shows it.
fn rejected(e: ApiError) -> ClientError {
    reject(e.status.as_u16(), e.message)
}

impl Client for EtcdClient {
    fn machines(&self) -> Result<Vec<Machine>, ClientError> {
        let snapshot = self.run(self.registry.read_machines_snapshot())?;
        Ok(snapshot.machines().map(api_rules::machine).collect())
    }

    fn units(&self) -> Result<Vec<Unit>, ClientError> {
        let snapshot = self.run(self.registry.read_snapshot())?;
        Ok(snapshot.units().filter_map(|view| api_rules::unit(&view, false)).collect())
    }

    fn unit(&self, name: &str) -> Result<Option<Unit>, ClientError> {
        let snapshot = self.read_unit(name)?;
        Ok(snapshot.unit(name).and_then(|view| api_rules::unit(&view, true)))
    }

    fn create_unit(&self, unit: &Unit) -> Result<(), ClientError> {
        let result = self.put_unit(unit);
        let status = *result.as_ref().unwrap_or(&201);
        self.record(Write::PutUnit(unit), "PUT", &format!("/units/{}", unit.name), status, &result);
        result.map(drop)
    }

    fn set_unit_target_state(&self, name: &str, state: &str) -> Result<(), ClientError> {
        // What the HTTP client sends: a PUT with only name and desired state.
        self.create_unit(&Unit { name: name.to_string(), desired_state: state.to_string(), ..Default::default() })
    }

    fn destroy_unit(&self, name: &str) -> Result<(), ClientError> {
        let result = name::validate_name(name)
            .map_err(|e| reject(400, e.to_string()))
            .and_then(|()| self.run(self.registry.destroy_unit(name)).map(drop));
        self.record(Write::DestroyUnit(name), "DELETE", &format!("/units/{name}"), 204, &result);
        result
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
            .map(|s| {
                let running = snapshot.running_hash(&s.name, &s.machine_id).map(str::to_string);
                api_rules::state(s, running.as_deref())
            })
            .collect())
    }

    fn unit_state(&self, name: &str) -> Result<Option<UnitState>, ClientError> {
        let filter = StateFilter { machine_id: None, unit_name: Some(name.to_string()) };
        Ok(self.unit_states(&filter)?.into_iter().next())
    }

    fn set_machine_metadata(&self, machine_id: &str, key: &str, value: &str) -> Result<(), ClientError> {
        let result = if value.is_empty() {
            Err(reject(400, "invalid value: add and replace require a value"))
        } else {
            self.run(self.registry.set_metadata(machine_id, key, value)).map(drop)
        };
        let ops = [MachineMetadataOp::add(machine_id, key, value)];
        self.record(Write::Metadata(&ops), "PATCH", "/machines", 204, &result);
        result
    }

    fn delete_machine_metadata(&self, machine_id: &str, key: &str) -> Result<(), ClientError> {
        let result = self.run(self.registry.remove_metadata(machine_id, key)).map(drop);
        let ops = [MachineMetadataOp::remove(machine_id, key)];
        self.record(Write::Metadata(&ops), "PATCH", "/machines", 204, &result);
        result
    }

    fn cordon_machine(&self, machine_id: &str, cordon: bool) -> Result<(), ClientError> {
        let result = self.cordon(machine_id, cordon);
        let method = if cordon { "PUT" } else { "DELETE" };
        let path = format!("/machines/{machine_id}/cordon");
        self.record(Write::Cordon(machine_id, cordon), method, &path, 204, &result);
        result
    }

    fn latest_daemon_version(&self) -> Result<Option<SemVer>, ClientError> {
        let snapshot = self.run(self.registry.read_machines_snapshot())?;
        Ok(snapshot.machines().filter_map(|m| SemVer::parse(&m.version)).max())
    }

    fn create_rollout(&self, id: &str, request: &RolloutRequest) -> Result<Rollout, ClientError> {
        let result = self.start_rollout(id, request);
        self.record(Write::CreateRollout(id, request), "PUT", &format!("/rollouts/{id}"), 201, &result);
        result
    }

    fn audit(&self, query: &Query) -> Result<AuditList, ClientError> {
        let read = self.run(self.registry.read_audit(query.since_ms))?;
        Ok(audit::select(read.into_iter().map(|(_, r)| r), query))
    }

    fn rollouts(&self) -> Result<Vec<Rollout>, ClientError> {
        let snapshot = self.run(self.registry.read_snapshot())?;
        Ok(api_rules::stored_rollouts(&snapshot))
    }

    fn unit_history(&self, name: &str) -> Result<Option<UnitHistory>, ClientError> {
        let snapshot = self.read_unit(name)?;
        let Some(object) = snapshot.unit_record(name).and_then(|r| r.object()) else { return Ok(None) };
        // Only the current body is in a single-unit read: fetch the others' bodies from a full read.
        let full = self.run(self.registry.read_snapshot())?;
        let mut history = api_rules::history(object, |hash| full.body(hash).cloned());
        let since = history.versions.iter().map(|v| v.stored_ms).min().unwrap_or(0).saturating_sub(5_000);
        let records: Vec<AuditRecord> =
            self.run(self.registry.read_audit(since))?.into_iter().filter_map(|(_, r)| r.ok()).collect();
        audit::authors(name, &mut history, &records);
        Ok(Some(history))
    }

    fn rollout(&self, id: &str) -> Result<Option<Rollout>, ClientError> {
        let snapshot = self.run(self.registry.read_snapshot())?;
        Ok(snapshot.rollout_records().get(id).and_then(|record| api_rules::stored_rollout(id, record)))
    }

    fn rollout_change(&self, id: &str, revision: i64, limit: Duration) -> Result<Option<Rollout>, ClientError> {
        if fleet_registry::check_component(fleet_registry::Component::RolloutId, id).is_err() {
            return Ok(None);
        }
        self.run(self.registry.wait_rollout_change(id, revision, limit))?;
        self.rollout(id)
    }

    fn control_rollout(&self, id: &str, control: fleet_core::schema::RolloutControl) -> Result<(), ClientError> {
        let result = self.run(self.registry.read_snapshot()).and_then(|snapshot| {
            let rollout = api_rules::changeable_rollout(id, snapshot.rollout_records().get(id)).map_err(rejected)?;
            let decided = api_rules::decide_control(&rollout, control).map_err(rejected)?;
            self.run(self.registry.set_rollout_control(id, &decided)).map(drop)
        });
        self.record(Write::ControlRollout(id, control), "PATCH", &format!("/rollouts/{id}"), 204, &result);
        result
    }
}

impl EtcdClient {
    /// [`Client::cordon_machine`], unrecorded.
    fn cordon(&self, machine_id: &str, cordon: bool) -> Result<(), ClientError> {
        let snapshot = self.run(self.registry.read_machines_snapshot())?;
        match api_rules::decide_cordon_in(&snapshot, machine_id, cordon).map_err(rejected)? {
            CordonAction::Unchanged => Ok(()),
            CordonAction::Write if cordon => {
                let record = fleet_registry::Cordon { since_ms: fleet_core::model::now_ms() };
                self.run(self.registry.cordon(machine_id, &record)).map(drop)
            }
            CordonAction::Write => self.run(self.registry.uncordon(machine_id)).map(drop),
        }
    }

    /// [`Client::create_rollout`], unrecorded.
    fn start_rollout(&self, id: &str, request: &RolloutRequest) -> Result<Rollout, ClientError> {
        let snapshot = self.run(self.registry.read_snapshot())?;
        let plan = api_rules::decide_rollout(id, request, &snapshot, fleet_core::model::now_ms()).map_err(rejected)?;
        let mut bodies = Vec::with_capacity(plan.bodies.len());
        for (name, text, object_revision) in &plan.bodies {
            let unit = plan.spec.unit(name).ok_or_else(|| {
                ClientError::Other(format!("rollout decision has a body for {name}, which it does not name"))
            })?;
            let object = snapshot.unit_record(name).and_then(|r| r.object());
            bodies.push(RolloutBody { unit, text, object_revision: *object_revision, object });
        }
        let revision = self.run(self.registry.create_rollout(&plan.spec, &bodies, plan.cordon.as_ref()))?;
        let stored = fleet_core::rollout::Rollout { spec: plan.spec, control: Control::default(), progress: None };
        Ok(Rollout { revision, ..api_rules::rollout(&stored) })
    }
}

/// `user@host` of this process (`uid N` for a user without a name in /etc/passwd).
fn local_user() -> Who {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let user = match uid {
        Some(uid) => audit::user_name(&passwd, uid).unwrap_or_else(|| format!("uid {uid}")),
        None => "unknown user".to_string(),
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    Who { via: Via::EtcdDriver, name: if host.is_empty() { user } else { format!("{user}@{host}") } }
}

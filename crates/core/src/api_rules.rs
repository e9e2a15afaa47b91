//! One place for what the API answers and decides (pure), shared by the HTTP server (`api`), fleetctl's etcd driver
//! and the test fake (`client`) so they can never disagree; it sits below both, so no client imports the server: the wire form of units, unit states and machines (spec §8.5–§8.8) and the PUT decision
//! (spec §8.6, with the recommended validation: replacements are validated like creations, unknown desired states
//! are refused on every path, templates are never activated — bugs B9).

use http::StatusCode;

use crate::model::{JobState, MachineState, PublishedState};
use crate::rollout::policy::{HealthCheck, UpdatePolicy};
use crate::schema;
use crate::store::UnitView;
use crate::unit::{NameInfo, Requirements, UnitFile, name, xfleet};

/// A unit as the API shows it: in listings global units show `inactive` and no machine; a single GET of a global
/// unit omits both. `None` when the stored body does not parse (the unit is invisible, spec §3.2).
pub fn unit(view: &UnitView<'_>, single: bool) -> Option<schema::Unit> {
    let content = match UnitFile::parse(view.body) {
        Ok(content) => content,
        Err(e) => {
            // Every request reads the listing again: the parse caches of the agent and the engine warn, once per hash.
            tracing::debug!(unit = %view.name, hash = %view.hash, error = %e.located(), "stored unit body does not parse");
            return None;
        }
    };
    let global = Requirements::of(&content, view.name).global;
    let (current, machine) = match (global, single) {
        (true, true) => ("", ""),
        (true, false) => (JobState::Inactive.as_str(), ""),
        // A unit set inactive whose state is gone is on no machine. Its agent may unload it (the desired state
        // reaches the agent in its own write) before the engine clears its target; the original's engine always
        // cleared it first, so it never showed this unit on a machine (fleetctl's `Unit x inactive`).
        (false, _) if view.desired == JobState::Inactive && view.current == JobState::Inactive => {
            (JobState::Inactive.as_str(), "")
        }
        (false, _) => (view.current.as_str(), view.target.unwrap_or("")),
    };
    Some(schema::Unit {
        current_state: current.to_string(),
        desired_state: view.desired.as_str().to_string(),
        machine_id: machine.to_string(),
        name: view.name.to_string(),
        options: content.into_options(),
        reschedule: false,
        no_restart: false,
    })
}

/// A published unit state as the API shows it; `running_hash` is the version the machine last started
/// ([`crate::store::Snapshot::running_hash`]).
pub fn state(s: PublishedState, running_hash: Option<&str>) -> schema::UnitState {
    let in_doubt = s.sub_state == crate::model::IN_DOUBT && s.active_state == crate::model::UNKNOWN_STATE;
    schema::UnitState {
        running_hash: running_hash.unwrap_or_default().to_string(),
        hash: s.hash,
        machine_id: s.machine_id,
        name: s.name,
        systemd_active_state: s.active_state,
        systemd_load_state: s.load_state,
        machine_presence: if in_doubt { crate::model::IN_DOUBT.to_string() } else { String::new() },
        systemd_sub_state: s.sub_state,
        health: s.health,
    }
}

/// A present machine as the API shows it.
pub fn machine(m: MachineState) -> schema::Machine {
    let load_fault = m.load_fault.as_ref().map(ToString::to_string);
    schema::Machine { id: m.id, metadata: m.metadata, primary_ip: m.public_ip, cordoned: m.cordoned, load_fault }
}

/// The answer to a machine ID that names no machine (and no cordon).
pub const NO_MACHINE: &str = "machine does not exist";

/// What a `PUT` (`cordon`) or `DELETE` (`!cordon`) of `/machines/<id>/cordon` does once [`decide_cordon`] accepted
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CordonAction {
    /// Write the cordon key (`PUT`) or delete it (`DELETE`).
    Write,
    /// The machine already is as asked: nothing is written, and the answer is the same `204` (idempotent).
    Unchanged,
}

/// Cordoning (`cordon`) or uncordoning machine `id` (issue 38). `present`: the machine is in the cluster now;
/// `record`: its registry record, if any (a cordon outlives the presence). A cordon is set only on a present
/// machine (`404 machine does not exist` otherwise); it is removed from a present machine, or from one that left
/// for good as long as its cordon key is still stored (so a stale cordon can be deleted); an undecodable cordon key
/// is rewritten or deleted like a good one. The API, fleetctl's etcd driver and the test fake all decide with this.
pub fn decide_cordon(
    id: &str,
    present: bool,
    record: Option<&crate::store::MachineRecord>,
    cordon: bool,
) -> Result<CordonAction, ApiError> {
    let missing = || reject(StatusCode::NOT_FOUND, NO_MACHINE);
    if crate::store::check_component(crate::store::Component::MachineId, id).is_err() {
        return Err(missing());
    }
    let (has_key, decodes) = record.map_or((false, false), |r| (r.has_cordon_key(), r.cordon.is_some()));
    match (cordon, present) {
        (true, false) => Err(missing()),
        (true, true) if decodes => Ok(CordonAction::Unchanged),
        (true, true) => Ok(CordonAction::Write),
        (false, _) if has_key => Ok(CordonAction::Write),
        (false, true) => Ok(CordonAction::Unchanged),
        (false, false) => Err(missing()),
    }
}

/// [`decide_cordon`] for machine `id` as `snapshot` holds it.
pub fn decide_cordon_in(snapshot: &crate::store::Snapshot, id: &str, cordon: bool) -> Result<CordonAction, ApiError> {
    decide_cordon(id, snapshot.machine(id).is_some(), snapshot.machine_records().get(id), cordon)
}

/// A refused request: the status and message of the error body (spec §8.3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }

    pub fn bad_request(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message.to_string())
    }
}

/// What a `PUT /units/<name>` does once [`decide_put`] accepted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutAction {
    /// The unit does not exist: store it with this desired state.
    Create(JobState),
    /// The unit exists with other content: store the new content with this desired state.
    Replace(JobState),
    /// The unit exists with the same content (or the request has none): change its desired state.
    SetDesired(JobState),
}

/// How an accepted PUT stores a new version: the request's `reschedule` and `noRestart` apply only when it
/// replaces the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreOptions {
    pub reschedule: bool,
    pub no_restart: bool,
}

impl StoreOptions {
    pub fn of(unit: &schema::Unit, action: &PutAction) -> StoreOptions {
        let replacing = matches!(action, PutAction::Replace(_));
        StoreOptions { reschedule: unit.reschedule && replacing, no_restart: unit.no_restart && replacing }
    }
}

fn reject(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError::new(status, message)
}

/// The PUT procedure (spec §8.6 steps 4–8) over the request `unit` (its name already reconciled with the path) and
/// the stored unit's hash (`None`: it does not exist).
pub fn decide_put(unit: &schema::Unit, stored_hash: Option<&str>) -> Result<PutAction, ApiError> {
    name::validate_name(&unit.name).map_err(ApiError::bad_request)?;
    if unit.no_restart && unit.reschedule {
        // Moving a unit to another machine cannot keep its process.
        return Err(ApiError::bad_request("noRestart and reschedule cannot be combined"));
    }
    let desired = if unit.desired_state.is_empty() {
        None
    } else {
        Some(unit.desired_state.parse::<JobState>().map_err(ApiError::bad_request)?)
    };
    let is_template = NameInfo::parse(&unit.name).is_some_and(|i| i.is_template());
    let not_activating_template = |state: JobState| {
        if is_template && state != JobState::Inactive {
            return Err(ApiError::bad_request(format!("cannot activate template {}", crate::go::quote(&unit.name))));
        }
        Ok(state)
    };
    let content = UnitFile::from_options(unit.options.clone());
    let validated = || {
        // An option without section or name (e.g. `{}` or an object of unknown fields) is no unit file line.
        if let Some(blank) = crate::unit::first_blank(&unit.options) {
            return Err(ApiError::bad_request(blank));
        }
        validate_content(&content)
    };
    match stored_hash {
        None if unit.options.is_empty() => {
            Err(reject(StatusCode::CONFLICT, "unit does not exist and options field empty"))
        }
        None => {
            validated()?;
            Ok(PutAction::Create(not_activating_template(desired.unwrap_or(JobState::Inactive))?))
        }
        Some(stored) if !unit.options.is_empty() && content.hash().to_hex() != stored => {
            validated()?;
            Ok(PutAction::Replace(not_activating_template(desired.unwrap_or(JobState::Inactive))?))
        }
        Some(_) => match desired {
            None => Err(reject(StatusCode::CONFLICT, "must provide DesiredState to update existing unit")),
            Some(state) => Ok(PutAction::SetDesired(not_activating_template(state)?)),
        },
    }
}

/// A unit's versions as the API shows them, newest first; `body` finds a version's stored text.
pub fn history(
    object: &crate::store::UnitObject,
    body: impl Fn(&str) -> Option<std::sync::Arc<str>>,
) -> schema::UnitHistory {
    let mut versions: Vec<crate::store::Version> = object.history.clone();
    if versions.first().is_none_or(|v| v.hash != object.hash) {
        // An object stored before history was kept: what it knows is its hash and the previous one.
        versions = std::iter::once(crate::store::Version { hash: object.hash.clone(), stored_ms: 0 })
            .chain(object.previous_hash.iter().map(|h| crate::store::Version { hash: h.clone(), stored_ms: 0 }))
            .collect();
    }
    let versions = versions
        .into_iter()
        .enumerate()
        .map(|(i, v)| schema::UnitVersion {
            current: i == 0,
            options: body(&v.hash)
                .and_then(|text| UnitFile::parse(&text).ok())
                .map(UnitFile::into_options)
                .unwrap_or_default(),
            hash: v.hash.to_string(),
            stored_ms: v.stored_ms,
            by: None,
        })
        .collect();
    schema::UnitHistory { versions }
}

/// A rollout as the API shows it: spec, the user's last action, the engine's progress.
pub fn rollout(r: &crate::rollout::Rollout) -> schema::Rollout {
    let spec = &r.spec;
    let progress = r.progress.clone().unwrap_or_default();
    schema::Rollout {
        id: spec.id.clone(),
        kind: spec.kind,
        units: spec.units.clone(),
        max_unavailable: spec.max_unavailable,
        min_healthy_ms: spec.min_healthy_ms,
        health_timeout_ms: spec.health_timeout_ms,
        on_failure: spec.on_failure,
        created_ms: spec.created_ms,
        action: r.control.action,
        resumes: r.control.resumes,
        resumes_taken: r.progress.as_ref().map_or(0, |p| p.resumes),
        state: r.state(),
        reason: progress.reason,
        steps: progress.steps,
        max_unavailable_percent: spec.max_unavailable_percent,
        canary: spec.canary,
        canary_hold_ms: spec.canary_hold_ms,
        order: spec.order.clone(),
        progress_deadline_ms: spec.progress_deadline_ms,
        policy: spec.policy.clone(),
        promoted: r.control.promoted,
        awaiting_promotion: progress.awaiting_promotion,
        undo: progress.undo,
        undo_end: progress.undo_end,
        started_ms: progress.started_ms,
        revision: 0,
        error: String::new(),
        machine: spec.machine.clone(),
    }
}

/// Rollout `id` as stored, with the revision of its newest change; `None` while it has no spec. A rollout with a
/// key that does not decode is shown with what could be read and the error ([`schema::Rollout::error`]), never
/// hidden.
pub fn stored_rollout(id: &str, record: &crate::store::RolloutRecord) -> Option<schema::Rollout> {
    let shown = match (record.rollout(), record.error()) {
        (Some(r), _) => rollout(&r),
        (None, Some(error)) => {
            let readable = crate::rollout::Rollout {
                spec: record.spec.clone().unwrap_or_else(|| crate::rollout::RolloutSpec {
                    id: id.to_string(),
                    ..crate::rollout::RolloutSpec::default()
                }),
                control: record.control.unwrap_or_default(),
                progress: record.progress.clone(),
            };
            schema::Rollout { error, ..rollout(&readable) }
        }
        (None, None) => return None,
    };
    Some(schema::Rollout { revision: record.revision, ..shown })
}

/// Every stored rollout as the API lists it, each with its revision: newest first (by creation time, then ID), as
/// [`crate::store::Snapshot::rollouts`] orders them; those that cannot be read among them, with their error.
pub fn stored_rollouts(snapshot: &crate::store::Snapshot) -> Vec<schema::Rollout> {
    let mut all: Vec<schema::Rollout> =
        snapshot.rollout_records().iter().filter_map(|(id, record)| stored_rollout(id, record)).collect();
    all.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
    all
}

/// The rollout a `PATCH /rollouts/<id>` changes, from its stored `record`: not found without one (or without a
/// spec); refused (409, naming the key and why) when a key of it does not decode, since what the change would do
/// is not known.
pub fn changeable_rollout(
    id: &str,
    record: Option<&crate::store::RolloutRecord>,
) -> Result<crate::rollout::Rollout, ApiError> {
    let missing = || reject(StatusCode::NOT_FOUND, NO_ROLLOUT);
    let record = record.ok_or_else(missing)?;
    match (record.rollout(), record.error()) {
        (Some(rollout), _) => Ok(rollout),
        (None, Some(error)) => Err(reject(
            StatusCode::CONFLICT,
            format!("rollout {id:?} cannot be read, so it cannot be changed: {error}"),
        )),
        (None, None) => Err(missing()),
    }
}

/// The answer to a rollout ID that names no rollout.
pub const NO_ROLLOUT: &str = "rollout does not exist";

/// The control a user's `action` leaves on `rollout` (`PATCH /rollouts/<id>`): refused once the rollout is final;
/// `run` counts one more resume, which releases the steps a failure paused once more.
/// The API's `patch_rollout`, fleetctl's etcd driver and the test fake all decide with this function.
pub fn decide_control(
    rollout: &crate::rollout::Rollout,
    request: schema::RolloutControl,
) -> Result<crate::rollout::Control, ApiError> {
    use crate::rollout::Action;
    let action = request.action;
    let state = rollout.state();
    if state.is_final() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("rollout {:?} is {state}: nothing to {}", rollout.spec.id, action.as_str()),
        ));
    }
    if request.skip_failed && action != Action::Run {
        return Err(ApiError::bad_request("skipFailed goes only with the action run"));
    }
    let mut control = rollout.control;
    match action {
        Action::Promote if rollout.spec.canary == 0 => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("rollout {:?} has no canaries: nothing to promote", rollout.spec.id),
            ));
        }
        Action::Promote => control.promoted = true,
        Action::Run => {
            control.resumes = control.resumes.saturating_add(1);
            control.skip_failed = request.skip_failed;
            control.action = action;
        }
        Action::Pause | Action::Abort => control.action = action,
    }
    Ok(control)
}

/// What an accepted rollout request stores: the spec, and for a replace each unit's new text with the object
/// revision it was decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutPlan {
    pub spec: crate::rollout::RolloutSpec,
    /// (unit name, canonical text of the new version, object revision it replaces).
    pub bodies: Vec<(String, String, i64)>,
    /// A drain of a machine that is not cordoned yet: the cordon stored with the spec (`spec.machine`'s).
    pub cordon: Option<crate::store::Cordon>,
}

/// The decision for `PUT /rollouts/<id>` over the registry `snapshot`: every named unit must exist, be launched,
/// not be a template and not be in another rollout that is not final; a replace brings new, valid, different
/// content for each, a restart brings none.
pub fn decide_rollout(
    id: &str,
    request: &schema::RolloutRequest,
    snapshot: &crate::store::Snapshot,
    now_ms: u64,
) -> Result<RolloutPlan, ApiError> {
    use crate::rollout::{RolloutKind, RolloutSpec, RolloutUnit};
    crate::store::check_component(crate::store::Component::RolloutId, id).map_err(ApiError::bad_request)?;
    if snapshot.rollout_records().contains_key(id) {
        return Err(rollout_exists(id));
    }
    if request.kind.plans_steps() {
        return decide_planned(id, request, snapshot, now_ms);
    }
    if request.machine.is_some() {
        return Err(ApiError::bad_request("machine: only a drain names a machine"));
    }
    if request.units.is_empty() {
        return Err(ApiError::bad_request("a rollout needs at least one unit"));
    }
    if request.units.len() > crate::store::MAX_ROLLOUT_UNITS {
        return Err(ApiError::bad_request(format!(
            "a rollout takes at most {} units, got {}",
            crate::store::MAX_ROLLOUT_UNITS,
            request.units.len()
        )));
    }
    let rollouts = snapshot.rollouts();
    let mut policy: Option<UpdatePolicy> = None;
    let mut units = Vec::with_capacity(request.units.len());
    let mut bodies = Vec::new();
    for (i, u) in request.units.iter().enumerate() {
        name::validate_name(&u.name).map_err(ApiError::bad_request)?;
        if request.units[..i].iter().any(|earlier| earlier.name == u.name) {
            return Err(ApiError::bad_request(format!("unit {} is named twice", crate::go::quote(&u.name))));
        }
        let quoted = crate::go::quote(&u.name);
        let (Some(view), Some(record)) = (snapshot.unit(&u.name), snapshot.unit_record(&u.name)) else {
            return Err(reject(StatusCode::NOT_FOUND, format!("unit {quoted} does not exist")));
        };
        if view.desired != JobState::Launched {
            return Err(reject(
                StatusCode::CONFLICT,
                format!("unit {quoted} is {} (a rollout changes launched units)", view.desired),
            ));
        }
        if let Some(other) = crate::rollout::active_for(&rollouts, &u.name) {
            return Err(reject(
                StatusCode::CONFLICT,
                format!("unit {quoted} is in rollout {:?} ({})", other.spec.id, other.state()),
            ));
        }
        let from = view.hash.to_string();
        let current = UnitFile::parse(view.body).ok();
        let from_checked = current.as_ref().is_some_and(|f| HealthCheck::of(f).is_some());
        let mut to_file = current.clone();
        let to = match request.kind {
            RolloutKind::Restart => {
                if !u.options.is_empty() {
                    return Err(ApiError::bad_request(format!("a restart takes no options (unit {quoted})")));
                }
                from.clone()
            }
            RolloutKind::Rebalance | RolloutKind::Drain => unreachable!("decided by decide_planned"),
            RolloutKind::Replace => {
                if u.options.is_empty() {
                    return Err(ApiError::bad_request(format!("a replace needs the new options of unit {quoted}")));
                }
                let content = UnitFile::from_options(u.options.clone());
                validate_content(&content)?;
                let to = content.hash().to_hex();
                if to == from {
                    return Err(reject(StatusCode::CONFLICT, format!("unit {quoted} already has this content")));
                }
                bodies.push((u.name.clone(), content.canonical(), record.object_revision()));
                to_file = Some(content);
                to
            }
        };
        let checked = to_file.as_ref().is_some_and(|f| HealthCheck::of(f).is_some());
        if policy.is_none() {
            policy = to_file.as_ref().and_then(UpdatePolicy::of);
        }
        units.push(RolloutUnit { name: u.name.clone(), from, to, checked, from_checked });
    }
    let mut spec =
        RolloutSpec { id: id.to_string(), kind: request.kind, units, created_ms: now_ms, ..RolloutSpec::default() };
    pace(request, policy.as_ref(), &mut spec)?;
    Ok(RolloutPlan { spec, bodies, cordon: None })
}

/// The answer to a rollout ID that is taken. Decided here against the view ([`decide_rollout`]); the registry's
/// create transaction enforces it against a concurrent creator, and that refusal is worded by this too.
pub fn rollout_exists(id: &str) -> ApiError {
    reject(StatusCode::CONFLICT, format!("rollout {id:?} already exists"))
}

/// A rollout ID for units whose first is `first_unit`, made at `now_ms`: `<unit name without type>-<now_ms>`,
/// characters the registry does not take in IDs replaced by `_`, at most 64 characters.
pub fn rollout_id(first_unit: &str, now_ms: u64) -> String {
    let stem = first_unit.rsplit_once('.').map_or(first_unit, |(stem, _)| stem);
    let suffix = format!("-{now_ms}");
    let stem: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
        .take(64 - suffix.len())
        .collect();
    let stem = if stem.is_empty() { "rollout".to_string() } else { stem };
    format!("{stem}{suffix}")
}

/// The first [`rollout_id`] from `now_ms` on that no rollout has (`taken`): two commands within one millisecond
/// (a script) get different IDs.
pub fn unused_rollout_id(first_unit: &str, now_ms: u64, taken: &[String]) -> String {
    (now_ms..)
        .map(|ms| rollout_id(first_unit, ms))
        .find(|id| !taken.contains(id))
        .unwrap_or_else(|| rollout_id(first_unit, now_ms))
}

/// Whether a `PUT /units/<name>` decided as `action` replaces the content of a launched unit in a way its new
/// version's `[X-Fleet] UpdatePolicy=rolling` makes a rollout: the unit is launched (`stored_desired`), the request
/// keeps it so (desired state `launched`, or none — the original fleetctl's `--replace` sends none, then
/// `launched`), and it does not ask to keep processes (`noRestart`). The unit stays launched and a replace rollout
/// changes it machine by machine with the policy's pace.
pub fn put_rolls_out(request: &schema::Unit, action: &PutAction, stored_desired: Option<JobState>) -> bool {
    matches!(action, PutAction::Replace(_))
        && stored_desired == Some(JobState::Launched)
        && matches!(request.desired_state.as_str(), "" | "launched")
        && !request.no_restart
        && UpdatePolicy::of(&UnitFile::from_options(request.options.clone())).is_some()
}

/// The one validation of a unit's content, wherever it is submitted (unit PUT, rollouts, fleetctl before it
/// sends): the original's option rules (spec §5.1) and this implementation's health check and update policy.
pub fn validate_content(content: &UnitFile) -> Result<(), ApiError> {
    xfleet::validate_options(content).map_err(ApiError::bad_request)?;
    crate::rollout::policy::check(content).map_err(ApiError::bad_request)
}

/// A rollout's pace: what `request` gives, else the unit's update `policy`, else the defaults
/// (`rollout::policy`). Refuses a value that cannot be a pace, naming the field.
fn pace(
    request: &schema::RolloutRequest,
    policy: Option<&UpdatePolicy>,
    spec: &mut crate::rollout::RolloutSpec,
) -> Result<(), ApiError> {
    use crate::rollout::policy::{self, MaxUnavailable};
    let defaults = UpdatePolicy::default();
    let base = policy.unwrap_or(&defaults);
    use std::time::Duration;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let max = match (request.max_unavailable, request.max_unavailable_percent) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("give maxUnavailable or maxUnavailablePercent, not both"));
        }
        (Some(n), None) => MaxUnavailable::Count(n),
        (None, Some(p)) => MaxUnavailable::Percent(p),
        (None, None) => base.max_unavailable,
    };
    (spec.max_unavailable, spec.max_unavailable_percent) = match max {
        MaxUnavailable::Count(n) => (n, 0),
        MaxUnavailable::Percent(p) => (1, p),
    };
    spec.min_healthy_ms = request.min_healthy_ms.unwrap_or(ms(base.min_healthy));
    spec.health_timeout_ms = request.health_timeout_ms.unwrap_or(ms(base.health_timeout));
    spec.on_failure = request.on_failure.unwrap_or(base.on_failure);
    spec.order = request.order.clone().unwrap_or_else(|| base.order.clone());
    let progress_deadline = request.progress_deadline_ms.map(Duration::from_millis).or(base.progress_deadline);
    spec.progress_deadline_ms = progress_deadline.map_or(0, ms);
    spec.canary = request.canary.unwrap_or(0);
    spec.canary_hold_ms = request.canary_hold_ms.unwrap_or(0);
    let checked = policy::check_pace(
        max,
        Duration::from_millis(spec.health_timeout_ms),
        progress_deadline,
        spec.canary,
        Duration::from_millis(spec.canary_hold_ms),
        &spec.order,
    );
    if let Err((setting, problem)) = checked {
        // Named as the request names it (fleetctl's flags are these fields).
        let field = match (setting, max) {
            (policy::PaceSetting::MaxUnavailable, MaxUnavailable::Percent(_)) => "maxUnavailablePercent",
            (policy::PaceSetting::MaxUnavailable, MaxUnavailable::Count(_)) => "maxUnavailable",
            (policy::PaceSetting::HealthTimeout, _) => "healthTimeoutMs",
            (policy::PaceSetting::ProgressDeadline, _) => "progressDeadlineMs",
            (policy::PaceSetting::CanaryHold, _) => "canaryHoldMs",
            (policy::PaceSetting::Order, _) => "order",
        };
        return Err(ApiError::bad_request(format!("{field}: {problem}")));
    }
    if policy.is_some() {
        spec.policy = "unit".into();
    }
    Ok(())
}

/// A rollout whose steps the engine plans (`kind: rebalance` or `drain`): no units, a valid pace, no canary or
/// order. A rebalance: no other rebalance in progress. A drain (issue 38): `machine` is a present machine's full ID
/// with no other drain in progress; the machine is cordoned with the spec if it is not yet.
fn decide_planned(
    id: &str,
    request: &schema::RolloutRequest,
    snapshot: &crate::store::Snapshot,
    now_ms: u64,
) -> Result<RolloutPlan, ApiError> {
    use crate::rollout::{RolloutKind, RolloutSpec};
    let drain = request.kind == RolloutKind::Drain;
    let what = if drain { "drain" } else { "rebalance" };
    if !request.units.is_empty() {
        return Err(ApiError::bad_request(format!("a {what} names no units: the engine chooses which units move")));
    }
    let machine = match (drain, request.machine.as_deref()) {
        (true, None | Some("")) => return Err(ApiError::bad_request("machine: a drain names the machine to empty")),
        (true, Some(machine)) => machine,
        (false, Some(_)) => return Err(ApiError::bad_request("machine: only a drain names a machine")),
        (false, None) => "",
    };
    if drain && snapshot.machine(machine).is_none() {
        return Err(reject(StatusCode::NOT_FOUND, format!("{NO_MACHINE}: {machine:?} (give its full ID)")));
    }
    let busy = |r: &crate::rollout::Rollout| {
        r.spec.kind == request.kind && !r.state().is_final() && (!drain || r.spec.machine == machine)
    };
    if let Some(other) = snapshot.rollouts().into_iter().find(busy) {
        return Err(reject(
            StatusCode::CONFLICT,
            format!("{what} {:?} is in progress ({})", other.spec.id, other.state()),
        ));
    }
    let mut spec = RolloutSpec { id: id.to_string(), kind: request.kind, created_ms: now_ms, ..RolloutSpec::default() };
    // These move units one at a time on their own health: no unit policy applies, and before this implementation's
    // unit policies a rebalance's minHealthyMs defaulted to 0.
    let request = schema::RolloutRequest { min_healthy_ms: request.min_healthy_ms.or(Some(0)), ..request.clone() };
    pace(&request, None, &mut spec)?;
    if spec.canary > 0 || !spec.order.is_empty() {
        return Err(ApiError::bad_request(format!("a {what} takes no canary or order")));
    }
    let mut cordon = None;
    if drain {
        spec.machine = machine.to_string();
        let standing = snapshot.machine_records().get(machine).and_then(|r| r.cordon);
        spec.cordon_since_ms = match standing {
            Some(c) => c.since_ms,
            None => {
                cordon = Some(crate::store::Cordon { since_ms: now_ms });
                now_ms
            }
        };
    }
    Ok(RolloutPlan { spec, bodies: Vec::new(), cordon })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::UnitOption;

    /// The machine a unit shows, by desired and current state (its target is m1 throughout).
    #[test]
    fn a_unit_shows_its_target_unless_it_is_set_inactive_and_its_state_is_gone() {
        let body: std::sync::Arc<str> = "[Service]\nExecStart=/bin/true\n".into();
        let shown = |desired, current| {
            let view = UnitView {
                name: "a.service",
                hash: "h",
                previous_hash: None,
                body: &body,
                desired,
                target: Some("m1"),
                current,
                no_restart: false,
            };
            let u = unit(&view, true).expect("the body parses");
            (u.current_state, u.machine_id)
        };
        use JobState::{Inactive, Launched, Loaded};
        let on = |s: &str, m: &str| (s.to_string(), m.to_string());
        // Scheduled, its state not yet published: it is on its way to m1.
        assert_eq!(shown(Launched, Inactive), on("inactive", "m1"));
        assert_eq!(shown(Loaded, Loaded), on("loaded", "m1"));
        // Set inactive, its agent not there yet: still on m1.
        assert_eq!(shown(Inactive, Launched), on("launched", "m1"));
        // Set inactive and unloaded by its agent before the engine cleared the target (CI run 52's race).
        assert_eq!(shown(Inactive, Inactive), on("inactive", ""));
    }

    /// Issue 38: cordon and uncordon, as a table over what the registry holds of the machine.
    #[test]
    fn cordon_is_idempotent_and_needs_the_machine_or_its_cordon() {
        use crate::store::{Cordon, MachineRecord};
        let none = MachineRecord::default();
        let good = MachineRecord { cordon: Some(Cordon { since_ms: 1 }), ..Default::default() };
        let bad =
            MachineRecord { cordon_error: Some("k: cannot decode machine cordon: …".into()), ..Default::default() };
        let gone = Err(reject(StatusCode::NOT_FOUND, NO_MACHINE));
        use CordonAction::{Unchanged, Write};
        type Case<'a> = (bool, Option<&'a MachineRecord>, bool, Result<CordonAction, ApiError>);
        let cases: [Case<'_>; 14] = [
            // cordon: only a present machine; already cordoned → nothing to write; a bad key is rewritten.
            (true, None, true, Ok(Write)),
            (true, Some(&none), true, Ok(Write)),
            (true, Some(&good), true, Ok(Unchanged)),
            (true, Some(&bad), true, Ok(Write)),
            (false, None, true, gone.clone()),
            (false, Some(&good), true, gone.clone()),
            (false, Some(&bad), true, gone.clone()),
            // uncordon: wherever a cordon key is stored (also of a machine that left); else nothing or 404.
            (true, Some(&good), false, Ok(Write)),
            (true, Some(&bad), false, Ok(Write)),
            (true, Some(&none), false, Ok(Unchanged)),
            (true, None, false, Ok(Unchanged)),
            (false, Some(&good), false, Ok(Write)),
            (false, Some(&bad), false, Ok(Write)),
            (false, None, false, gone.clone()),
        ];
        for (present, record, cordon, want) in cases {
            assert_eq!(decide_cordon("m1", present, record, cordon), want, "present {present} {record:?} {cordon}");
        }
        assert_eq!(decide_cordon("a/b", true, None, true), gone, "no machine ID: finds nothing");
        assert_eq!(decide_cordon("", true, None, false), gone);
    }

    #[test]
    fn a_machine_shows_its_cordon() {
        let m = MachineState { id: "m1".into(), cordoned: true, ..Default::default() };
        assert!(machine(m.clone()).cordoned);
        assert!(!machine(MachineState { cordoned: false, ..m }).cordoned);
    }

    const HELLO: &str = "[Service]\nExecStart=/bin/sleep 100\n";

    #[test]
    fn only_a_state_of_an_absent_machine_is_in_doubt() {
        let state = |active: &str, sub: &str| PublishedState {
            name: "a.service".into(),
            machine_id: "m1".into(),
            hash: String::new(),
            load_state: "unknown".into(),
            active_state: active.into(),
            sub_state: sub.into(),
            restarts: None,
            health: None,
            launched: None,
        };
        assert_eq!(super::state(state("unknown", "in-doubt"), None).machine_presence, "in-doubt");
        assert_eq!(super::state(state("active", "running"), None).machine_presence, "");
        assert_eq!(super::state(state("active", "in-doubt"), None).machine_presence, "", "published by a machine");
    }

    fn request(name: &str, text: &str, desired: &str) -> schema::Unit {
        let options = UnitFile::parse(text).unwrap().into_options();
        schema::Unit { name: name.into(), options, desired_state: desired.into(), ..Default::default() }
    }

    fn hash(text: &str) -> String {
        UnitFile::parse(text).unwrap().hash().to_hex()
    }

    fn rejected(r: Result<PutAction, ApiError>) -> (u16, String) {
        let e = r.expect_err("expected a rejection");
        (e.status.as_u16(), e.message)
    }

    /// The registry image of one launched unit, `db.service` (HELLO).
    fn launched_db() -> crate::store::Snapshot {
        let keys = crate::store::Keys::new("/p");
        let h = hash(HELLO);
        let kvs = [
            (keys.body(&h), UnitFile::parse(HELLO).unwrap().canonical().into_bytes()),
            (keys.unit_object("db.service"), format!(r#"{{"name":"db.service","hash":"{h}"}}"#).into_bytes()),
            (keys.unit_desired("db.service"), b"launched".to_vec()),
        ];
        let changes = kvs
            .iter()
            .map(|(k, v)| (k.as_bytes(), crate::store::Change::Put { value: v.as_slice(), mod_revision: 2, lease: 0 }));
        crate::store::Snapshot::from_kvs(&keys, 2, changes)
    }

    #[test]
    fn a_pace_is_checked_once_and_refused_naming_the_requests_field() {
        let snapshot = launched_db();
        let restart = schema::RolloutRequest {
            kind: crate::rollout::RolloutKind::Restart,
            units: vec![schema::RolloutRequestUnit { name: "db.service".into(), options: Vec::new() }],
            ..Default::default()
        };
        let cases = [
            (
                schema::RolloutRequest { max_unavailable: Some(0), ..restart.clone() },
                "maxUnavailable: must be at least 1",
            ),
            (
                schema::RolloutRequest { max_unavailable_percent: Some(101), ..restart.clone() },
                "maxUnavailablePercent: a percentage must be from 1% to 100%, got 101%",
            ),
            (
                schema::RolloutRequest {
                    max_unavailable: Some(1),
                    max_unavailable_percent: Some(5),
                    ..restart.clone()
                },
                "give maxUnavailable or maxUnavailablePercent, not both",
            ),
            (
                schema::RolloutRequest { health_timeout_ms: Some(0), ..restart.clone() },
                "healthTimeoutMs: must be longer than 0",
            ),
            (
                schema::RolloutRequest { progress_deadline_ms: Some(0), ..restart.clone() },
                "progressDeadlineMs: must be longer than 0",
            ),
            (
                schema::RolloutRequest { canary_hold_ms: Some(60_000), ..restart.clone() },
                "canaryHoldMs: applies only with canaries",
            ),
            (schema::RolloutRequest { order: Some("middle:x".into()), ..restart.clone() }, "order: \"middle:x\""),
            (
                schema::RolloutRequest {
                    kind: crate::rollout::RolloutKind::Rebalance,
                    units: Vec::new(),
                    max_unavailable: Some(0),
                    ..restart.clone()
                },
                "maxUnavailable: must be at least 1",
            ),
        ];
        for (request, want) in cases {
            let err = decide_rollout("r1", &request, &snapshot, 1).map(drop).expect_err(want);
            assert_eq!(err.status, StatusCode::BAD_REQUEST, "{want}");
            assert!(err.message.starts_with(want), "{:?}, want {want:?}", err.message);
        }
        let fine = schema::RolloutRequest { canary: Some(1), canary_hold_ms: Some(60_000), ..restart };
        assert!(decide_rollout("r1", &fine, &snapshot, 1).is_ok(), "a canary hold with a canary is a pace");
    }

    #[test]
    fn new_units_are_created_inactive_unless_a_state_is_given() {
        assert_eq!(decide_put(&request("a.service", HELLO, ""), None).unwrap(), PutAction::Create(JobState::Inactive));
        let launched = request("a.service", HELLO, "launched");
        assert_eq!(decide_put(&launched, None).unwrap(), PutAction::Create(JobState::Launched));
    }

    #[test]
    fn creation_is_validated() {
        let empty = schema::Unit { name: "empty.service".into(), ..Default::default() };
        assert_eq!(rejected(decide_put(&empty, None)), (409, "unit does not exist and options field empty".into()));
        let blank_option = schema::Unit {
            name: "a.service".into(),
            options: vec![UnitOption::new("Service", "ExecStart", "/bin/true"), UnitOption::new("", "", "")],
            ..Default::default()
        };
        let blank = r#"option 1 (section "", name "") has an empty section and name"#;
        assert_eq!(rejected(decide_put(&blank_option, None)), (400, blank.into()));
        assert_eq!(rejected(decide_put(&blank_option, Some("abc"))), (400, blank.into()));
        assert_eq!(
            rejected(decide_put(&request("bad name.service", HELLO, ""), None)),
            (400, "invalid character ' ' in unit name".into())
        );
        let gm = request("gm.service", "[X-Fleet]\nGlobal=true\nMachineOf=a.service\n", "");
        assert_eq!(rejected(decide_put(&gm, None)), (400, "Global cannot be used with Peers".into()));
        assert_eq!(
            rejected(decide_put(&request("a.service", HELLO, "running"), None)),
            (400, "invalid value \"running\" for JobState".into())
        );
    }

    #[test]
    fn different_content_replaces_and_is_validated_too() {
        let stored = hash("[Service]\nExecStart=/bin/true\n");
        assert_eq!(
            decide_put(&request("a.service", HELLO, ""), Some(&stored)).unwrap(),
            PutAction::Replace(JobState::Inactive)
        );
        let bad = request("a.service", "[X-Fleet]\nMachineID=x\nConflicts=b.service\n", "loaded");
        assert_eq!(rejected(decide_put(&bad, Some(&stored))), (400, "MachineID cannot be used with Conflicts".into()));
    }

    #[test]
    fn reschedule_and_no_restart_apply_only_to_a_replace_and_never_together() {
        let stored = hash("[Service]\nExecStart=/bin/true\n");
        let flagged =
            |reschedule, no_restart| schema::Unit { reschedule, no_restart, ..request("a.service", HELLO, "launched") };
        let replace = decide_put(&flagged(false, true), Some(&stored)).unwrap();
        assert_eq!(
            StoreOptions::of(&flagged(false, true), &replace),
            StoreOptions { reschedule: false, no_restart: true }
        );
        assert_eq!(
            StoreOptions::of(&flagged(true, false), &replace),
            StoreOptions { reschedule: true, no_restart: false }
        );
        let create = decide_put(&flagged(false, true), None).unwrap();
        assert_eq!(StoreOptions::of(&flagged(true, true), &create), StoreOptions::default(), "nothing to keep or move");
        assert_eq!(
            rejected(decide_put(&flagged(true, true), Some(&stored))),
            (400, "noRestart and reschedule cannot be combined".into())
        );
    }

    #[test]
    fn history_lists_versions_newest_first_with_their_files() {
        use crate::store::UnitObject;
        let (v1, v2) = (hash(HELLO), hash("[Service]\nExecStart=/bin/true\n"));
        let o1 = UnitObject::next(None, "a.service", &v1, false, 1);
        let o2 = UnitObject::next(Some(&o1), "a.service", &v2, false, 2);
        let body = |h: &str| (h == v1).then(|| std::sync::Arc::from(HELLO));
        let h = history(&o2, body);
        let got: Vec<(bool, &str, u64, usize)> =
            h.versions.iter().map(|v| (v.current, v.hash.as_str(), v.stored_ms, v.options.len())).collect();
        assert_eq!(got, [(true, v2.as_str(), 2, 0), (false, v1.as_str(), 1, 1)], "v2's body is gone: no options");
        // An object from before history was kept still shows its current and previous hash.
        let legacy = UnitObject { history: Vec::new(), ..o2 };
        let got: Vec<String> = history(&legacy, body).versions.into_iter().map(|v| v.hash).collect();
        assert_eq!(got, [v2, v1]);
    }

    #[test]
    fn same_or_no_content_changes_the_desired_state() {
        let stored = hash(HELLO);
        assert_eq!(
            decide_put(&request("a.service", HELLO, "loaded"), Some(&stored)).unwrap(),
            PutAction::SetDesired(JobState::Loaded)
        );
        let bare = schema::Unit { name: "a.service".into(), desired_state: "launched".into(), ..Default::default() };
        assert_eq!(decide_put(&bare, Some(&stored)).unwrap(), PutAction::SetDesired(JobState::Launched));
        let no_state = schema::Unit { desired_state: String::new(), ..bare.clone() };
        assert_eq!(
            rejected(decide_put(&no_state, Some(&stored))),
            (409, "must provide DesiredState to update existing unit".into())
        );
        let unknown = schema::Unit { desired_state: "bogus".into(), ..bare };
        assert_eq!(rejected(decide_put(&unknown, Some(&stored))), (400, "invalid value \"bogus\" for JobState".into()));
    }

    #[test]
    fn templates_are_never_activated() {
        let stored = hash(HELLO);
        let t =
            |state: &str| schema::Unit { name: "t@.service".into(), desired_state: state.into(), ..Default::default() };
        for state in ["launched", "loaded"] {
            assert_eq!(
                rejected(decide_put(&t(state), Some(&stored))),
                (400, "cannot activate template \"t@.service\"".into())
            );
        }
        assert_eq!(decide_put(&t("inactive"), Some(&stored)).unwrap(), PutAction::SetDesired(JobState::Inactive));
        let create = request("t@.service", HELLO, "launched");
        assert_eq!(rejected(decide_put(&create, None)), (400, "cannot activate template \"t@.service\"".into()));
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
            no_restart: false,
        };
        let single = unit(&view, true).unwrap();
        assert_eq!((single.current_state.as_str(), single.desired_state.as_str()), ("", "launched"));
        assert_eq!(single.options[1], UnitOption::new("X-Fleet", "Global", "true"));
        assert_eq!(unit(&view, false).unwrap().current_state, "inactive");
        let garbage: std::sync::Arc<str> = "[Unit\n".into();
        assert!(unit(&UnitView { body: &garbage, ..view }, false).is_none());
    }

    /// Issue 36: a rollout with a key that does not decode is shown with what could be read and the error, is
    /// listed among the others, and is refused (409, naming the key) rather than changed.
    #[test]
    fn an_unreadable_rollout_is_shown_with_its_error_and_not_changed() {
        use crate::rollout::Action;
        use crate::store::Key;
        use crate::store::snapshot::tests::{Build, H1};
        let spec = |id: &str, created: u64| {
            format!(
                r#"{{"id":"{id}","kind":"restart","units":[{{"name":"a.service","from":"{H1}","to":"{H1}"}}],"maxUnavailable":1,"minHealthyMs":0,"healthTimeoutMs":0,"createdMs":{created}}}"#
            )
        };
        let s = Build::new()
            .put(Key::RolloutSpec { id: "good".into() }, &spec("good", 1))
            .put(Key::RolloutSpec { id: "bad".into() }, &spec("bad", 2))
            .put(Key::RolloutProgress { id: "bad".into() }, "[]")
            .put(Key::RolloutSpec { id: "nospec".into() }, "{")
            .done();
        let records = s.rollout_records();
        let bad = stored_rollout("bad", &records["bad"]).unwrap();
        assert!(bad.error.starts_with("/p/rollouts/bad/progress: cannot decode rollout progress"), "{}", bad.error);
        assert_eq!((bad.id.as_str(), bad.units.len(), bad.revision), ("bad", 1, records["bad"].revision));
        let nospec = stored_rollout("nospec", &records["nospec"]).unwrap();
        assert_eq!(nospec.id, "nospec", "the key's ID when the spec itself does not decode");
        assert!(nospec.error.contains("rollout spec"), "{}", nospec.error);
        assert_eq!(stored_rollout("good", &records["good"]).unwrap().error, "");
        let listed: Vec<String> = stored_rollouts(&s).into_iter().map(|r| r.id).collect();
        assert_eq!(listed, ["bad", "good", "nospec"], "newest first; none hidden");

        let refused = changeable_rollout("bad", records.get("bad")).unwrap_err();
        assert_eq!(refused.status, StatusCode::CONFLICT);
        assert!(refused.message.contains("/p/rollouts/bad/progress"), "{}", refused.message);
        assert_eq!(changeable_rollout("none", None).unwrap_err().status, StatusCode::NOT_FOUND);
        let mut good = changeable_rollout("good", records.get("good")).unwrap();
        // A stored resume counter at its maximum stays there rather than overflowing.
        good.control.resumes = u32::MAX;
        let control = decide_control(&good, schema::RolloutControl { action: Action::Run, skip_failed: false });
        assert_eq!(control.unwrap().resumes, u32::MAX);
    }

    /// Issue 38: a drain names a present machine by its full ID, one at a time per machine, cordons it with the
    /// spec unless a cordon stands (then it records that cordon's time), and takes no units, canary or order.
    #[test]
    fn a_drain_needs_a_present_machine_and_cordons_it_unless_cordoned() {
        use crate::rollout::RolloutKind;
        use crate::store::Key;
        use crate::store::snapshot::tests::Build;
        let machine = |id: &str| Key::MachineObject { machine: id.into() };
        let s = Build::new()
            .put(machine("m1"), r#"{"id":"m1"}"#)
            .put(machine("m2"), r#"{"id":"m2"}"#)
            .put(Key::MachineCordon { machine: "m2".into() }, r#"{"sinceMs":7}"#)
            .done();
        let drain = |m: &str| schema::RolloutRequest {
            kind: RolloutKind::Drain,
            machine: Some(m.into()),
            ..schema::RolloutRequest::default()
        };
        let plan = decide_rollout("d1", &drain("m1"), &s, 100).unwrap();
        assert_eq!((plan.spec.machine.as_str(), plan.spec.cordon_since_ms), ("m1", 100));
        assert_eq!(plan.cordon, Some(crate::store::Cordon { since_ms: 100 }), "m1 is cordoned with the spec");
        assert_eq!((plan.spec.min_healthy_ms, plan.spec.max_unavailable), (0, 1), "a drain's own defaults");
        let plan = decide_rollout("d2", &drain("m2"), &s, 100).unwrap();
        assert_eq!((plan.cordon, plan.spec.cordon_since_ms), (None, 7), "m2's standing cordon is the drain's");

        let refused = |request: &schema::RolloutRequest, snapshot: &crate::store::Snapshot| {
            let e = decide_rollout("d9", request, snapshot, 100).unwrap_err();
            (e.status.as_u16(), e.message)
        };
        assert_eq!(refused(&drain("m3"), &s), (404, r#"machine does not exist: "m3" (give its full ID)"#.into()));
        assert_eq!(refused(&drain(""), &s), (400, "machine: a drain names the machine to empty".into()));
        let with_units = schema::RolloutRequest {
            units: vec![schema::RolloutRequestUnit { name: "a.service".into(), options: Vec::new() }],
            ..drain("m1")
        };
        assert_eq!(refused(&with_units, &s).0, 400);
        let canary = schema::RolloutRequest { canary: Some(1), ..drain("m1") };
        assert_eq!(refused(&canary, &s), (400, "a drain takes no canary or order".into()));
        let rebalance = schema::RolloutRequest { kind: RolloutKind::Rebalance, ..drain("m1") };
        assert_eq!(refused(&rebalance, &s), (400, "machine: only a drain names a machine".into()));
        let restart = schema::RolloutRequest { kind: RolloutKind::Restart, ..with_units.clone() };
        assert_eq!(refused(&restart, &s), (400, "machine: only a drain names a machine".into()));

        let spec = r#"{"id":"d0","kind":"drain","units":[],"machine":"m1","maxUnavailable":1,"minHealthyMs":0,"healthTimeoutMs":1,"createdMs":1}"#;
        let running = Build::new()
            .put(machine("m1"), r#"{"id":"m1"}"#)
            .put(machine("m2"), r#"{"id":"m2"}"#)
            .put(Key::RolloutSpec { id: "d0".into() }, spec)
            .done();
        assert_eq!(refused(&drain("m1"), &running), (409, r#"drain "d0" is in progress (running)"#.into()));
        assert!(decide_rollout("d2", &drain("m2"), &running, 100).is_ok(), "another machine may be drained meanwhile");
    }

    fn open_rollout(canary: u32) -> crate::rollout::Rollout {
        use crate::rollout::{Action, Control, RolloutKind, RolloutSpec};
        crate::rollout::Rollout {
            spec: RolloutSpec { id: "r1".into(), kind: RolloutKind::Restart, canary, ..RolloutSpec::default() },
            control: Control { action: Action::Pause, resumes: 1, ..Control::default() },
            progress: None,
        }
    }

    #[test]
    fn skip_failed_goes_only_with_run_and_only_a_canary_rollout_is_promoted() {
        use crate::rollout::{Action, Control};
        let act = |action, skip_failed| schema::RolloutControl { action, skip_failed };
        let refused = |r: Result<Control, ApiError>| {
            let e = r.expect_err("expected a refusal");
            (e.status.as_u16(), e.message)
        };
        let plain = open_rollout(0);
        assert_eq!(
            decide_control(&plain, act(Action::Pause, false)).unwrap(),
            Control { action: Action::Pause, ..plain.control }
        );
        assert_eq!(
            decide_control(&plain, act(Action::Run, true)).unwrap(),
            Control { action: Action::Run, resumes: 2, skip_failed: true, promoted: false }
        );
        assert_eq!(
            refused(decide_control(&plain, act(Action::Pause, true))),
            (400, "skipFailed goes only with the action run".into())
        );
        assert_eq!(
            refused(decide_control(&plain, act(Action::Promote, false))),
            (409, r#"rollout "r1" has no canaries: nothing to promote"#.into())
        );
        let canary = open_rollout(1);
        assert_eq!(
            decide_control(&canary, act(Action::Promote, false)).unwrap(),
            Control { promoted: true, ..canary.control }
        );
    }

    fn rollout_of(kind: crate::rollout::RolloutKind, units: &[(&str, &str)]) -> schema::RolloutRequest {
        let units = units
            .iter()
            .map(|(name, text)| schema::RolloutRequestUnit {
                name: name.to_string(),
                options: if text.is_empty() { Vec::new() } else { UnitFile::parse(text).unwrap().into_options() },
            })
            .collect();
        schema::RolloutRequest { kind, units, ..Default::default() }
    }

    /// What a rollout request stores, and the refusals that depend on the units it names.
    #[test]
    fn a_rollout_stores_its_id_kind_units_and_time_and_refuses_what_changes_nothing() {
        use crate::rollout::{RolloutKind, RolloutUnit};
        let snapshot = launched_db();
        let h = hash(HELLO);
        let plan =
            decide_rollout("r1", &rollout_of(RolloutKind::Restart, &[("db.service", "")]), &snapshot, 42).unwrap();
        let unit = RolloutUnit {
            name: "db.service".into(),
            from: h.clone(),
            to: h.clone(),
            checked: false,
            from_checked: false,
        };
        assert_eq!(
            (plan.spec.id.as_str(), plan.spec.kind, plan.spec.units.as_slice(), plan.spec.created_ms),
            ("r1", RolloutKind::Restart, [unit].as_slice(), 42)
        );
        let refused = |request: &schema::RolloutRequest| {
            let e = decide_rollout("r1", request, &snapshot, 42).map(drop).unwrap_err();
            (e.status.as_u16(), e.message)
        };
        let same = rollout_of(RolloutKind::Replace, &[("db.service", HELLO)]);
        assert_eq!(refused(&same), (409, r#"unit "db.service" already has this content"#.into()));
        let new_text = "[Service]\nExecStart=/bin/sleep 200\n";
        let plan = decide_rollout("r1", &rollout_of(RolloutKind::Replace, &[("db.service", new_text)]), &snapshot, 42)
            .unwrap();
        assert_eq!(plan.spec.units[0].to, hash(new_text));
        assert_eq!(plan.bodies.len(), 1);
        let twice = rollout_of(RolloutKind::Restart, &[("db.service", ""), ("db.service", "")]);
        assert_eq!(refused(&twice), (400, r#"unit "db.service" is named twice"#.into()));
        let other = rollout_of(RolloutKind::Restart, &[("db.service", ""), ("web.service", "")]);
        assert_eq!(refused(&other), (404, r#"unit "web.service" does not exist"#.into()));
        // At most MAX_ROLLOUT_UNITS units: that many are judged one by one (here: the first does not exist).
        let names: Vec<String> = (0..=crate::store::MAX_ROLLOUT_UNITS).map(|i| format!("u{i}.service")).collect();
        let many = |n: usize| {
            let units: Vec<(&str, &str)> = names[..n].iter().map(|name| (name.as_str(), "")).collect();
            rollout_of(RolloutKind::Restart, &units)
        };
        assert_eq!(
            refused(&many(crate::store::MAX_ROLLOUT_UNITS)),
            (404, r#"unit "u0.service" does not exist"#.into())
        );
        let too_many = refused(&many(crate::store::MAX_ROLLOUT_UNITS + 1));
        assert_eq!(too_many.0, 400);
        assert!(too_many.1.starts_with("a rollout takes at most"), "{}", too_many.1);
    }

    #[test]
    fn a_planned_rollout_stores_its_id_kind_and_time() {
        use crate::rollout::RolloutKind;
        let rebalance = schema::RolloutRequest { kind: RolloutKind::Rebalance, ..Default::default() };
        let plan = decide_rollout("b1", &rebalance, &launched_db(), 42).unwrap();
        assert_eq!((plan.spec.id.as_str(), plan.spec.kind, plan.spec.created_ms), ("b1", RolloutKind::Rebalance, 42));
    }

    #[test]
    fn rollout_ids_are_the_first_unit_and_the_time_in_the_registry_alphabet() {
        use crate::store::{Component, check_component};
        assert_eq!(rollout_id("db.service", 1_700_000_000_000), "db-1700000000000");
        assert_eq!(rollout_id("hello@1.service", 5), "hello_1-5");
        assert_eq!(rollout_id(".service", 5), "rollout-5");
        let long = rollout_id(&format!("{}.service", "a".repeat(80)), 1_700_000_000_000);
        assert_eq!(long.len(), 64);
        assert!(long.ends_with("a-1700000000000"), "{long}");
        let taken = ["db-7".to_string(), "db-8".to_string()];
        assert_eq!(unused_rollout_id("db.service", 7, &taken), "db-9");
        assert_eq!(unused_rollout_id("db.service", 6, &taken), "db-6");
        for id in [long, rollout_id("x y/z.service", 1)] {
            check_component(Component::RolloutId, &id).unwrap();
        }
    }

    /// A PUT rolls out only a replace of a launched unit that stays launched, restarts, and has a rolling policy.
    #[test]
    fn only_a_restarting_replace_of_a_launched_rolling_unit_rolls_out() {
        let rolling = "[Service]\nExecStart=/bin/sleep 100\n\n[X-Fleet]\nUpdatePolicy=rolling\n";
        let put = |text: &str, desired: &str, no_restart: bool| schema::Unit {
            no_restart,
            ..request("a.service", text, desired)
        };
        let replace = PutAction::Replace(JobState::Launched);
        let launched = Some(JobState::Launched);
        let cases = [
            (put(rolling, "launched", false), replace.clone(), launched, true),
            (put(rolling, "", false), replace.clone(), launched, true),
            (put(rolling, "launched", false), PutAction::SetDesired(JobState::Launched), launched, false),
            (put(rolling, "launched", false), replace.clone(), Some(JobState::Loaded), false),
            (put(rolling, "launched", false), replace.clone(), None, false),
            (put(rolling, "loaded", false), replace.clone(), launched, false),
            (put(rolling, "launched", true), replace.clone(), launched, false),
            (put(HELLO, "launched", false), replace.clone(), launched, false),
        ];
        for (i, (unit, action, stored, want)) in cases.into_iter().enumerate() {
            assert_eq!(put_rolls_out(&unit, &action, stored), want, "case {i}: {action:?} {stored:?} {unit:?}");
        }
    }
}

//! What an operator's action would change, before it is taken (issue 12's `fleetctl plan`, issue 38's page
//! actions). Pure: the cluster as the API shows it in, the changes line by line out, computed by the decisions the
//! cluster itself makes, never a re-implementation:
//! * where units go: the engine's [`schedule::plan_with_report`] (moves and placements with the scheduler's reason,
//!   units left unplaced with each machine's verdict from [`explain`]);
//! * what each machine does: the agent's [`desired_units`] and [`agent_plan::plan`] (restart, in-place update,
//!   reload, start, stop), against what the machine holds now as the API shows it (its published states);
//! * what a rollout does next: the API's [`api_rules::decide_control`] and the engine's [`rollout::advance`].
//!
//! `fleetctl plan` and the cluster page's confirmation (`GET /ui/preview`) both call [`preview`] (and `plan
//! start|load|submit` calls [`changes`]), so the page shows exactly what `fleetctl plan` prints. [`Preview::write`]
//! is the API request that performs the action, so the page sends what it showed.
//!
//! A drain's changes are the engine's own plan of it ([`scheduler::drain::plan`]) on the machines with the drained
//! one cordoned.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use crate::api_rules;
use crate::machine_plan::desired::{ClusterUnit, ThisMachine, desired_units};
use crate::machine_plan::plan::{self as agent_plan, Actual, Desired, Planned, Task};
use crate::model::{JobState, MachineState, short_hash};
use crate::rollout::{self, Observed, Phase, RolloutKind, RolloutState, Step};
use crate::scheduler::{self, ScheduleInput, UnitSpec, explain, schedule};
use crate::schema::{self, Machine, Unit, UnitHistory, UnitState, UnitVersion};
use crate::unit::{Requirements, UnitFile};

/// What one change does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The old version stops (its stop hooks run), the new one starts: a new process.
    Restart,
    /// The file is updated in place and the running unit reloaded (`ExecReload=`): same process.
    Reload,
    /// Only the unit file changes (and systemd reloads its files): a running process is left alone, or the unit
    /// does not run there.
    Update,
    /// The unit's file is written on a machine that did not hold it; it does not start.
    Load,
    /// The unit starts on a machine where it does not run.
    Start,
    /// The unit stops (or leaves) on a machine.
    Stop,
    /// The unit leaves one machine for another (the scheduler's reason in the detail).
    Move,
    /// The unit needs a machine and no machine can take it (each machine's verdict in the detail).
    Blocked,
    /// A rollout step that would be released now stays pending: the machine keeps its version.
    Hold,
    /// A rollout step is given up: its machine is left as it is.
    Skip,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Restart => "restart",
            Action::Reload => "reload",
            Action::Update => "update",
            Action::Load => "load",
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Move => "move",
            Action::Blocked => "blocked",
            Action::Hold => "hold",
            Action::Skip => "skip",
        }
    }
}

/// One line of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub unit: String,
    /// The machine (full ID) the change happens on; for a move the destination; empty for `blocked`.
    pub machine: String,
    pub action: Action,
    pub detail: String,
}

/// The cluster as the API shows it: what `fleetctl plan` reads, and what the page's preview builds from its view.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    pub units: Vec<Unit>,
    pub states: Vec<UnitState>,
    pub machines: Vec<Machine>,
    /// Rollouts as listed (only [`preview`] of a rollout action reads them).
    pub rollouts: Vec<schema::Rollout>,
    /// Unit → its versions (only [`preview`] of a rollback reads them, of the unit it names).
    pub histories: BTreeMap<String, UnitHistory>,
}

impl ClusterView {
    /// The machines as the scheduler and the agents see them.
    pub fn machine_states(&self) -> Vec<MachineState> {
        self.machines
            .iter()
            .map(|m| MachineState {
                id: m.id.clone(),
                public_ip: m.primary_ip.clone(),
                metadata: m.metadata.clone(),
                cordoned: m.cordoned,
                ..Default::default()
            })
            .collect()
    }
}

/// One unit as the plan follows it: the parts of a stored unit that decide scheduling and the agents' tasks.
#[derive(Debug, Clone)]
pub struct PlanUnit {
    pub desired: JobState,
    pub file: UnitFile,
    pub hash: String,
    pub target: Option<String>,
    pub no_restart: bool,
}

impl PlanUnit {
    /// A unit not stored yet (a creation starts from it).
    pub fn absent() -> PlanUnit {
        PlanUnit {
            desired: JobState::Inactive,
            file: UnitFile::from_options(Vec::new()),
            hash: String::new(),
            target: None,
            no_restart: false,
        }
    }

    /// Stores `options` as the unit's content.
    pub fn set_content(&mut self, options: Vec<crate::unit::UnitOption>) {
        self.file = UnitFile::from_options(options);
        self.hash = self.file.hash().to_hex();
    }

    fn requirements(&self, name: &str) -> Requirements {
        Requirements::of(&self.file, name)
    }
}

/// Where the scheduler puts every unit, and why the ones it moves or leaves unplaced.
struct Placed {
    targets: BTreeMap<String, Option<String>>,
    /// Unit → the reason of the Schedule decision that placed it.
    scheduled: BTreeMap<String, String>,
    /// Unit → why it stays unplaced, with each machine's verdict.
    unplaced: BTreeMap<String, String>,
}

/// The changes from the units and machines of `view` to `after` on `machines_after` (the same machines, a cordon
/// perhaps set or lifted): `named` units are shown whatever happens to them, others when their placement or a
/// machine's tasks for them change. In unit order then machine-ID order.
pub fn changes(
    view: &ClusterView,
    after: &BTreeMap<String, PlanUnit>,
    machines_after: &[MachineState],
    named: &BTreeSet<String>,
) -> Result<Vec<Change>, String> {
    let before = stored_units(&view.units)?;
    let before_targets: BTreeMap<String, Option<String>> =
        before.iter().map(|(n, u)| (n.clone(), if global(n, u) { None } else { u.target.clone() })).collect();
    let placed = place(after, machines_after)?;
    let cordoned_before: BTreeMap<&str, bool> = view.machines.iter().map(|m| (m.id.as_str(), m.cordoned)).collect();

    // What each machine holds now (its published states) and what its agent believes it did (what it was asked).
    let mut held: BTreeMap<&str, BTreeMap<&str, &UnitState>> = BTreeMap::new();
    for s in &view.states {
        held.entry(s.machine_id.as_str()).or_default().insert(s.name.as_str(), s);
    }
    let mut per_unit: BTreeMap<String, Vec<(String, Vec<Planned>)>> = BTreeMap::new();
    let mut touched: BTreeSet<String> = named.clone();
    for m in machines_after {
        // What the machine holds (its published states): a cordoned one keeps only those of the global units.
        let holds: BTreeSet<String> =
            held.get(m.id.as_str()).map(|h| h.keys().map(|n| n.to_string()).collect()).unwrap_or_default();
        let was_cordoned = cordoned_before.get(m.id.as_str()).copied().unwrap_or(m.cordoned);
        let me = |cordoned| ThisMachine {
            id: m.id.clone(),
            metadata: m.metadata.clone(),
            cordoned,
            holds: holds.clone(),
            ..ThisMachine::default()
        };
        let was =
            desired_units(&cluster_units(&before, &before_targets), &me(was_cordoned)).map_err(|e| e.to_string())?;
        let will = desired_units(&cluster_units(after, &placed.targets), &me(m.cordoned)).map_err(|e| e.to_string())?;
        let actual = actual_units(&was, held.get(m.id.as_str()));
        let baseline = by_unit(agent_plan::plan(&was, &actual));
        for (unit, tasks) in by_unit(agent_plan::plan(&will, &actual)) {
            if baseline.get(&unit) != Some(&tasks) {
                touched.insert(unit.clone());
            }
            per_unit.entry(unit).or_default().push((m.id.clone(), tasks));
        }
    }
    for (name, target) in &placed.targets {
        if before_targets.get(name).cloned().flatten() != *target {
            touched.insert(name.clone());
        }
    }

    let mut changes = Vec::new();
    for name in &touched {
        let Some(unit) = after.get(name) else { continue };
        let from = before_targets.get(name).cloned().flatten();
        let to = placed.targets.get(name).cloned().flatten();
        let lines = per_unit.get(name).map(Vec::as_slice).unwrap_or_default();
        if !global(name, unit) {
            if let (Some(from), Some(to)) = (&from, &to)
                && from != to
            {
                let reason = placed.scheduled.get(name).cloned().unwrap_or_default();
                let detail = format!("{} → {}: {reason}", short(from), short(to));
                changes.push(Change { unit: name.clone(), machine: to.clone(), action: Action::Move, detail });
                continue;
            }
            if to.is_none() && unit.desired != JobState::Inactive {
                let why = placed.unplaced.get(name).cloned().unwrap_or_else(|| "not scheduled".into());
                changes.push(Change {
                    unit: name.clone(),
                    machine: String::new(),
                    action: Action::Blocked,
                    detail: why,
                });
            }
        }
        let old_hash = before.get(name).map(|u| u.hash.as_str());
        for (machine, tasks) in lines {
            let Some((action, mut detail)) = classify(tasks, old_hash, &unit.hash) else { continue };
            if from.is_none()
                && to.as_deref() == Some(machine.as_str())
                && let Some(reason) = placed.scheduled.get(name)
            {
                detail = format!("{detail}; {reason}");
            }
            changes.push(Change { unit: name.clone(), machine: machine.clone(), action, detail });
        }
    }
    Ok(changes)
}

/// The API's units as the plan follows them. A unit whose desired state or content does not parse is an error
/// (the engine would not schedule it either).
pub fn stored_units(units: &[Unit]) -> Result<BTreeMap<String, PlanUnit>, String> {
    units
        .iter()
        .map(|u| {
            let desired = u
                .desired_state
                .parse::<JobState>()
                .map_err(|e| format!("unit {}: desired state {:?}: {e}", u.name, u.desired_state))?;
            let file = UnitFile::from_options(u.options.clone());
            let hash = file.hash().to_hex();
            let target = (!u.machine_id.is_empty()).then(|| u.machine_id.clone());
            Ok((u.name.clone(), PlanUnit { desired, file, hash, target, no_restart: u.no_restart }))
        })
        .collect()
}

fn global(name: &str, unit: &PlanUnit) -> bool {
    unit.requirements(name).global
}

/// The units as the scheduler sees them (a global unit has no target).
fn unit_specs(units: &BTreeMap<String, PlanUnit>) -> BTreeMap<String, UnitSpec> {
    units
        .iter()
        .map(|(name, u)| {
            let constraints = u.requirements(name);
            let target = if constraints.global { None } else { u.target.clone() };
            (name.clone(), UnitSpec { name: name.clone(), desired: u.desired, target, constraints })
        })
        .collect()
}

/// One engine pass over the units and machines (the engine's own [`schedule::plan_with_report`]), applied.
fn place(units: &BTreeMap<String, PlanUnit>, machines: &[MachineState]) -> Result<Placed, String> {
    let specs = unit_specs(units);
    let snapshot = ScheduleInput::new(specs.values().cloned(), machines.iter().cloned()).map_err(|e| e.to_string())?;
    let report = schedule::plan_with_report(&snapshot);
    let mut placed = specs;
    // Where the units stand after the pass, as the engine's writes would leave them.
    for decision in &report.decisions {
        let Some(unit) = placed.get_mut(decision.unit()) else { continue };
        unit.target = match decision {
            schedule::Decision::Schedule { machine, .. } => Some(machine.clone()),
            schedule::Decision::Unschedule { .. } => None,
        };
    }
    let scheduled = report
        .decisions
        .iter()
        .filter_map(|d| match d {
            schedule::Decision::Schedule { unit, reason, .. } => Some((unit.clone(), reason.to_string())),
            schedule::Decision::Unschedule { .. } => None,
        })
        .collect();
    let unplaced = report
        .unplaced
        .iter()
        .map(|u| {
            let verdicts = explain(&snapshot, &u.unit)
                .map(|e| {
                    e.machines
                        .iter()
                        .map(|v| format!("{}: {}", short(&v.machine), v.fit))
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_default();
            let why = if verdicts.is_empty() { u.reason.to_string() } else { format!("{} ({verdicts})", u.reason) };
            (u.unit.clone(), why)
        })
        .collect();
    let targets = placed.into_iter().map(|(name, spec)| (name, spec.target)).collect();
    Ok(Placed { targets, scheduled, unplaced })
}

/// The units as an agent reads them from the registry (the parts [`desired_units`] and [`agent_plan::plan`] use).
fn cluster_units(units: &BTreeMap<String, PlanUnit>, targets: &BTreeMap<String, Option<String>>) -> Vec<ClusterUnit> {
    units
        .iter()
        .map(|(name, u)| ClusterUnit {
            name: name.clone(),
            desired: u.desired,
            hash: u.hash.clone(),
            text: Arc::from(""),
            install: u.file.has_section("Install"),
            reloadable: u.file.defines_reload(),
            no_restart: u.no_restart,
            restart: None,
            target: targets.get(name).cloned().flatten(),
            requirements: Arc::new(u.requirements(name)),
        })
        .collect()
}

/// What a machine has: the file it publishes a state for (else the version it was asked to hold), and what its
/// agent believes it did — the state it was asked for (`launched`: it started it), `loaded` for a leftover.
fn actual_units(
    asked: &BTreeMap<String, Desired>,
    published: Option<&BTreeMap<&str, &UnitState>>,
) -> BTreeMap<String, Actual> {
    let mut actual = BTreeMap::new();
    for (name, want) in asked.iter().filter(|(_, d)| d.state != JobState::Inactive) {
        let hash = published.and_then(|p| p.get(name.as_str())).map_or_else(|| want.hash.clone(), |s| s.hash.clone());
        actual.insert(name.clone(), Actual { hash: Some(hash), believed: want.state, restarted: None });
    }
    for (name, state) in published.into_iter().flatten() {
        if !actual.contains_key(*name) && !state.hash.is_empty() {
            let have = Actual { hash: Some(state.hash.clone()), believed: JobState::Loaded, restarted: None };
            actual.insert(name.to_string(), have);
        }
    }
    actual
}

/// A plan's tasks grouped by unit (the batch-wide daemon-reload left out).
fn by_unit(tasks: Vec<Planned>) -> BTreeMap<String, Vec<Planned>> {
    let mut out: BTreeMap<String, Vec<Planned>> = BTreeMap::new();
    for p in tasks {
        if let Some(unit) = p.task.unit() {
            out.entry(unit.to_string()).or_default().push(p);
        }
    }
    out
}

/// One unit's tasks on one machine as a plan line: the action and a detail naming the versions.
pub fn classify(tasks: &[Planned], old_hash: Option<&str>, new_hash: &str) -> Option<(Action, String)> {
    let has = |f: fn(&Task) -> bool| tasks.iter().any(|p| f(&p.task));
    let (stop, start) = (has(|t| matches!(t, Task::Stop(_))), has(|t| matches!(t, Task::Start(_))));
    let (load, unload) = (has(|t| matches!(t, Task::Load(..))), has(|t| matches!(t, Task::Unload(_))));
    let (update, reload) = (has(|t| matches!(t, Task::Update(..))), has(|t| matches!(t, Task::ReloadUnit(_))));
    let versions = match old_hash {
        Some(old) if !old.is_empty() && old != new_hash => format!("{} → {}", short_hash(old), short_hash(new_hash)),
        _ => short_hash(new_hash).to_string(),
    };
    let reason = tasks.first().map(|p| p.reason.to_string()).unwrap_or_default();
    let line = if stop && start {
        (Action::Restart, format!("{versions}: {reason}"))
    } else if reload {
        (Action::Reload, format!("{versions}: file updated in place, ExecReload= runs, same process"))
    } else if start {
        (Action::Start, format!("{versions}: {reason}"))
    } else if stop || (unload && !load) {
        (Action::Stop, reason)
    } else if update || (unload && load) {
        (Action::Update, format!("{versions}: unit file only, no process started or stopped"))
    } else if load {
        (Action::Load, format!("{versions}: {reason}"))
    } else {
        return None;
    };
    Some(line)
}

fn short(machine: &str) -> &str {
    machine.get(..8).unwrap_or(machine)
}

/// An operator's action, as the page and `fleetctl plan` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// `cordon MACHINE` (a full ID or a unique prefix).
    Cordon(String),
    /// `uncordon MACHINE`.
    Uncordon(String),
    /// `rollout-pause|resume|abort|promote ROLLOUT` (its ID, or a unit in a rollout that is not finished).
    Rollout { rollout: String, action: rollout::Action },
    /// `rollback UNIT`: the unit returns to the version before its current one, as a plain `fleetctl rollback`.
    Rollback(String),
    /// `drain MACHINE` (a full ID or a unique prefix), with `fleetctl drain`'s defaults.
    Drain(String),
}

impl Intent {
    /// The intent `action` names on `subject`; the actions are the page's (`pause`) and fleetctl's
    /// (`rollout-pause`) names.
    pub fn parse(action: &str, subject: &str) -> Result<Intent, String> {
        let subject = subject.to_string();
        let control = |action| Ok(Intent::Rollout { rollout: subject.clone(), action });
        match action.strip_prefix("rollout-").unwrap_or(action) {
            "cordon" => Ok(Intent::Cordon(subject)),
            "uncordon" => Ok(Intent::Uncordon(subject)),
            "pause" => control(rollout::Action::Pause),
            "resume" => control(rollout::Action::Run),
            "abort" => control(rollout::Action::Abort),
            "promote" => control(rollout::Action::Promote),
            "rollback" => Ok(Intent::Rollback(subject)),
            "drain" => Ok(Intent::Drain(subject)),
            other => Err(format!(
                "unknown action {other:?}: plan predicts cordon, uncordon, drain, rollout-pause, rollout-resume, \
                 rollout-abort, rollout-promote and rollback"
            )),
        }
    }

    /// The unit whose history [`preview`] needs (a rollback's), to put into [`ClusterView::histories`].
    pub fn history_of(&self) -> Option<&str> {
        match self {
            Intent::Rollback(unit) => Some(unit),
            _ => None,
        }
    }
}

/// The API request that performs an action.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Write {
    pub method: &'static str,
    pub path: String,
    /// The JSON body, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
}

/// What an action would do: a few sentences, the changes line by line, and the request that performs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preview {
    /// What the action is, e.g. `pause rollout db-1700000000000`.
    pub title: String,
    pub summary: Vec<String>,
    pub changes: Vec<Change>,
    pub write: Write,
}

/// What `intent` would change in `view` at `now_ms`, or why it cannot be taken (the API's own refusal where it
/// has one, e.g. `rollout "r1" is done: nothing to pause`).
pub fn preview(view: &ClusterView, intent: &Intent, now_ms: u64) -> Result<Preview, String> {
    match intent {
        Intent::Cordon(machine) => cordon(view, machine, true),
        Intent::Uncordon(machine) => cordon(view, machine, false),
        Intent::Rollout { rollout, action } => control(view, rollout, *action, now_ms),
        Intent::Rollback(unit) => rollback(view, unit, now_ms),
        Intent::Drain(machine) => drain(view, machine, now_ms),
    }
}

/// A drain of `machine` with `fleetctl drain`'s defaults (one unit at a time): the engine's plan of it, on the
/// cluster with the machine cordoned. Moves in the order the engine makes them, then the stops (units that cannot
/// leave, and the global units the machine runs); a unit no machine takes is `blocked` (the drain pauses there).
fn drain(view: &ClusterView, machine: &str, now_ms: u64) -> Result<Preview, String> {
    let id = machine_named(view, machine)?;
    let mut machines = view.machine_states();
    let was_cordoned = machines.iter().any(|m| m.id == id && m.cordoned);
    machines.iter_mut().filter(|m| m.id == id).for_each(|m| m.cordoned = true);
    let units = stored_units(&view.units)?;
    let specs = unit_specs(&units);
    let input = ScheduleInput::new(specs.values().cloned(), machines).map_err(|e| e.to_string())?;
    let plan = scheduler::drain::plan(&input, &id)?;
    let from = short(&id);
    let mut changes: Vec<Change> = plan
        .moves
        .iter()
        .map(|m| Change {
            unit: m.unit.clone(),
            machine: m.to.clone(),
            action: Action::Move,
            detail: format!("from {from}: the least-loaded machine that takes it"),
        })
        .collect();
    changes.extend(plan.unplaced.iter().map(|(unit, why)| Change {
        unit: unit.clone(),
        machine: String::new(),
        action: Action::Blocked,
        detail: why.clone(),
    }));
    let mut stops: BTreeMap<&str, String> =
        plan.stays.iter().map(|(unit, why)| (unit.as_str(), format!("it cannot leave: {why}"))).collect();
    for s in view.states.iter().filter(|s| s.machine_id == id) {
        if specs.get(&s.name).is_some_and(|u| u.constraints.global) {
            stops.insert(&s.name, "a global unit".into());
        }
    }
    changes.extend(stops.into_iter().map(|(unit, why)| Change {
        unit: unit.to_string(),
        machine: id.clone(),
        action: Action::Stop,
        detail: format!("{why}; stops last, starts again after uncordon"),
    }));
    let mut summary = vec![format!(
        "machine {from} {} and its units move off one at a time: {} move(s), then {} stop(s)",
        if was_cordoned { "stays cordoned" } else { "is cordoned" },
        plan.moves.len(),
        changes.iter().filter(|c| c.action == Action::Stop).count()
    )];
    if !plan.unplaced.is_empty() {
        summary.push(format!("{} unit(s) no other machine takes: the drain pauses at them", plan.unplaced.len()));
    }
    let taken: Vec<String> = view.rollouts.iter().map(|r| r.id.clone()).collect();
    let rollout = api_rules::unused_rollout_id(&format!("drain-{from}"), now_ms, &taken);
    let write = Write {
        method: "PUT",
        path: format!("/fleet/v1/rollouts/{rollout}"),
        body: Some(serde_json::json!({"kind": "drain", "machine": id})),
    };
    Ok(Preview { title: format!("drain machine {id}"), summary, changes, write })
}

fn cordon(view: &ClusterView, machine: &str, cordon: bool) -> Result<Preview, String> {
    let id = machine_named(view, machine)?;
    let verb = if cordon { "cordon" } else { "uncordon" };
    let mut machines = view.machine_states();
    let Some(m) = machines.iter_mut().find(|m| m.id == id) else { return Err(api_rules::NO_MACHINE.into()) };
    let was = m.cordoned;
    m.cordoned = cordon;
    let held = view.states.iter().filter(|s| s.machine_id == id).count();
    let mut summary = vec![match (was, cordon) {
        (true, true) => format!("machine {} is cordoned already: nothing is written", short(&id)),
        (false, false) => format!("machine {} is not cordoned: nothing is written", short(&id)),
        (false, true) => {
            format!("machine {} takes no new unit (scheduled or global); the {held} unit(s) it holds stay", short(&id))
        }
        (true, false) => format!("machine {} takes new units again", short(&id)),
    }];
    let after = stored_units(&view.units)?;
    let changes = changes(view, &after, &machines, &BTreeSet::new())?;
    if changes.is_empty() {
        summary.push("no unit starts, stops or moves now".into());
    }
    let write = Write {
        method: if cordon { "PUT" } else { "DELETE" },
        path: format!("/fleet/v1/machines/{id}/cordon"),
        body: None,
    };
    Ok(Preview { title: format!("{verb} machine {id}"), summary, changes, write })
}

/// The one machine `name` names: its full ID or a unique prefix of one.
fn machine_named(view: &ClusterView, name: &str) -> Result<String, String> {
    if let Some(m) = view.machines.iter().find(|m| m.id == name) {
        return Ok(m.id.clone());
    }
    let matching: Vec<&Machine> = view.machines.iter().filter(|m| !name.is_empty() && m.id.starts_with(name)).collect();
    match matching[..] {
        [one] => Ok(one.id.clone()),
        [] => Err(format!("no machine {name:?}: {}", api_rules::NO_MACHINE)),
        _ => Err(format!("{name:?} names {} machines: give more of the ID", matching.len())),
    }
}

/// The rollout `name` names: its ID, else the one rollout not finished that names unit `name`.
fn rollout_named<'a>(view: &'a ClusterView, name: &str) -> Result<&'a schema::Rollout, String> {
    if let Some(r) = view.rollouts.iter().find(|r| r.id == name) {
        return Ok(r);
    }
    view.rollouts
        .iter()
        .find(|r| {
            !r.state.is_final() && (r.units.iter().any(|u| u.name == name) || r.steps.iter().any(|s| s.unit == name))
        })
        .ok_or_else(|| format!("no rollout {name:?}, and no running or paused rollout of a unit {name:?}"))
}

/// The stored rollout a listed one stands for. The wire form lacks two fields the engine keeps in its progress
/// (`canariesDoneMs`, `undoReason`) and the last resume's `skipFailed`: they change no step of a preview's pass
/// except a canary hold's own promotion.
fn stored(r: &schema::Rollout) -> rollout::Rollout {
    let spec = rollout::RolloutSpec {
        id: r.id.clone(),
        kind: r.kind,
        units: r.units.clone(),
        max_unavailable: r.max_unavailable,
        min_healthy_ms: r.min_healthy_ms,
        health_timeout_ms: r.health_timeout_ms,
        on_failure: r.on_failure,
        created_ms: r.created_ms,
        max_unavailable_percent: r.max_unavailable_percent,
        canary: r.canary,
        canary_hold_ms: r.canary_hold_ms,
        order: r.order.clone(),
        progress_deadline_ms: r.progress_deadline_ms,
        policy: r.policy.clone(),
        machine: r.machine.clone(),
        // Not shown by the API: a preview never decides which units a drain holds stopped.
        cordon_since_ms: 0,
    };
    let control = rollout::Control { action: r.action, resumes: r.resumes, skip_failed: false, promoted: r.promoted };
    // The engine has not taken it up while it shows no step, no start and the first state.
    let taken_up = !r.steps.is_empty() || r.started_ms != 0 || r.state != RolloutState::Running;
    let progress = taken_up.then(|| rollout::RolloutProgress {
        state: r.state,
        reason: r.reason.clone(),
        steps: r.steps.clone(),
        resumes: r.resumes_taken,
        started_ms: r.started_ms,
        undo: r.undo.clone(),
        undo_end: r.undo_end,
        undo_reason: if r.undo_end.is_some() { r.reason.clone() } else { String::new() },
        awaiting_promotion: r.awaiting_promotion,
        canaries_done_ms: 0,
    });
    rollout::Rollout { spec, control, progress }
}

/// The cluster as [`rollout::advance`] sees it, read from what the API shows.
struct ViewCluster<'a>(&'a ClusterView);

impl rollout::Cluster for ViewCluster<'_> {
    fn observe(&self, unit: &str, machine: &str) -> Observed {
        let view = self.0;
        let state = view.states.iter().find(|s| s.name == unit && s.machine_id == machine);
        Observed {
            present: view.machines.iter().any(|m| m.id == machine),
            hash: state.map(|s| s.hash.clone()),
            running: state.map(|s| s.running_hash.clone()).filter(|h| !h.is_empty()),
            active_state: state.map(|s| s.systemd_active_state.clone()).unwrap_or_default(),
            sub_state: state.map(|s| s.systemd_sub_state.clone()).unwrap_or_default(),
            restarts: None,
            restarted_for: None,
            health: state.and_then(|s| s.health.clone()),
        }
    }

    fn holders(&self, unit: &str) -> Vec<String> {
        let view = self.0;
        let present = |m: &str| view.machines.iter().any(|x| x.id == m);
        let publishing: Vec<String> = view
            .states
            .iter()
            .filter(|s| s.name == unit && present(&s.machine_id))
            .map(|s| s.machine_id.clone())
            .collect();
        if !publishing.is_empty() {
            return publishing;
        }
        view.units.iter().filter(|u| u.name == unit && present(&u.machine_id)).map(|u| u.machine_id.clone()).collect()
    }

    fn exists(&self, unit: &str) -> bool {
        self.0.units.iter().any(|u| u.name == unit)
    }

    fn moved(&self, unit: &str, machine: &str) -> bool {
        self.0.units.iter().any(|u| u.name == unit && !u.machine_id.is_empty() && u.machine_id != machine)
    }

    fn metadata(&self, machine: &str) -> BTreeMap<String, String> {
        self.0.machines.iter().find(|m| m.id == machine).map(|m| m.metadata.clone()).unwrap_or_default()
    }
}

fn control(view: &ClusterView, name: &str, action: rollout::Action, now_ms: u64) -> Result<Preview, String> {
    let listed = rollout_named(view, name)?;
    if !listed.error.is_empty() {
        return Err(format!("rollout {:?} cannot be read: {}", listed.id, listed.error));
    }
    let current = stored(listed);
    let request = schema::RolloutControl { action, skip_failed: false };
    let control = api_rules::decide_control(&current, request).map_err(|e| e.message)?;
    let asked = rollout::Rollout { control, ..current.clone() };
    let cluster = ViewCluster(view);
    // The engine's next pass either way: what differs is what the action changes.
    let (was, will) = (rollout::advance(&current, &cluster, now_ms), rollout::advance(&asked, &cluster, now_ms));
    let verb = match action {
        rollout::Action::Run => "resume",
        other => other.as_str(),
    };
    let mut summary = Vec::new();
    let state = |p: &rollout::RolloutProgress| {
        if p.reason.is_empty() { p.state.to_string() } else { format!("{} ({})", p.state, p.reason) }
    };
    let (before, after) = (state(&was.progress), state(&will.progress));
    summary.push(if before == after {
        format!("the rollout stays {after}")
    } else {
        format!("the rollout goes from {} to {after}", state(current.progress.as_ref().unwrap_or(&was.progress)))
    });
    let changes = step_changes(&current.spec, &was.progress, &will.progress);
    let pending = will.progress.steps.iter().filter(|s| s.phase == Phase::Pending).count();
    if will.progress.state == RolloutState::Paused && pending > 0 {
        summary.push(format!("{pending} machine step(s) wait, keeping their version, until it is resumed"));
    } else if will.progress.state == RolloutState::Running && pending > 0 {
        let budget = current.spec.budget(will.progress.steps.len());
        summary.push(format!("then {pending} more machine step(s), at most {budget} unavailable at once"));
    }
    if !will.roll_back.is_empty() {
        let units: Vec<&str> = will.roll_back.iter().map(|u| u.name.as_str()).collect();
        summary.push(format!("the unit object(s) {} go back to the old version", units.join(", ")));
    }
    if changes.is_empty() {
        summary.push("no machine changes at the engine's next pass".into());
    }
    let body = serde_json::to_value(request).map_err(|e| e.to_string())?;
    let write = Write { method: "PATCH", path: format!("/fleet/v1/rollouts/{}", listed.id), body: Some(body) };
    Ok(Preview { title: format!("{verb} rollout {}", listed.id), summary, changes, write })
}

/// The steps (forward and undo) whose phase differs between the engine's next pass without and with the action.
fn step_changes(
    spec: &rollout::RolloutSpec,
    was: &rollout::RolloutProgress,
    will: &rollout::RolloutProgress,
) -> Vec<Change> {
    let mut out = Vec::new();
    let versions = |unit: &str, undo: bool| {
        let u = spec.unit(unit);
        let (from, to) = u.map_or((String::new(), String::new()), |u| (u.from.clone(), u.to.clone()));
        let (from, to) = if undo { (to, from) } else { (from, to) };
        match spec.kind {
            RolloutKind::Replace => format!("{} → {}", short_hash(&from), short_hash(&to)),
            _ => short_hash(&to).to_string(),
        }
    };
    for (undo, steps, before) in [(false, &will.steps, &was.steps), (true, &will.undo, &was.undo)] {
        for step in steps {
            let old = before.iter().find(|s| s.unit == step.unit && s.machine == step.machine);
            let old_phase = old.map(|s| s.phase);
            if old_phase == Some(step.phase) {
                continue;
            }
            out.push(step_change(step, old_phase, &versions(&step.unit, undo), undo));
        }
    }
    out
}

fn step_change(step: &Step, old: Option<Phase>, versions: &str, undo: bool) -> Change {
    let what = if undo { "undo" } else { "step" };
    let (action, detail) = match step.phase {
        Phase::Updating if !step.from_machine.is_empty() => {
            (Action::Move, format!("{} → {}: {what} released", short(&step.from_machine), short(&step.machine)))
        }
        Phase::Updating => (Action::Restart, format!("{versions}: {what} released")),
        Phase::Pending if old.is_some_and(|p| p != Phase::Pending) && old != Some(Phase::Failed) => {
            (Action::Hold, format!("{what} not released: keeps its version"))
        }
        Phase::Pending if old.is_none() && undo => (Action::Restart, format!("{versions}: {what} queued")),
        Phase::Pending => (Action::Restart, format!("{versions}: {what} to be tried again")),
        Phase::Skipped => (Action::Skip, format!("{what} given up: {}", step.detail)),
        other => (Action::Hold, format!("{what} {} → {}", old.map_or("-", Phase::as_str), other.as_str())),
    };
    Change { unit: step.unit.clone(), machine: step.machine.clone(), action, detail }
}

/// The version `rollback` returns to: the newest in `history` other than the current one (`to` empty), or the one
/// whose hash starts with `to`; its unit file must still be stored.
pub fn rollback_target<'a>(history: &'a UnitHistory, to: &str) -> Result<&'a UnitVersion, String> {
    // A version stored again (e.g. after a rollback) is listed more than once; the newest entry stands for it.
    let current = history.versions.iter().find(|v| v.current).map(|v| v.hash.as_str());
    let target = if to.is_empty() {
        history
            .versions
            .iter()
            .find(|v| Some(v.hash.as_str()) != current)
            .ok_or_else(|| "the unit has no earlier version in its history".to_string())?
    } else {
        let mut matching: Vec<&UnitVersion> = Vec::new();
        for v in history.versions.iter().filter(|v| v.hash.starts_with(to)) {
            if !matching.iter().any(|m| m.hash == v.hash) {
                matching.push(v);
            }
        }
        match matching[..] {
            [one] if Some(one.hash.as_str()) == current => return Err(format!("{to} is the current version")),
            [one] => one,
            [] => return Err(format!("no version of the unit's history starts with {to:?}")),
            _ => return Err(format!("{to:?} matches {} versions: give more of the hash", matching.len())),
        }
    };
    if target.options.is_empty() {
        return Err(format!("the unit file of version {} is no longer stored", short_hash(&target.hash)));
    }
    Ok(target)
}

/// A plain `fleetctl rollback UNIT` (no `--rolling`): a launched unit goes back through a replace rollout, every
/// machine at once unless the earlier version has an update policy (then its pace); another unit gets the earlier
/// version stored in place.
fn rollback(view: &ClusterView, name: &str, now_ms: u64) -> Result<Preview, String> {
    let unit = view.units.iter().find(|u| u.name == name).ok_or_else(|| format!("unit {name:?} does not exist"))?;
    let history = view.histories.get(name).ok_or_else(|| format!("the history of {name} was not read"))?;
    let target = rollback_target(history, "")?;
    let mut after = stored_units(&view.units)?;
    if let Some(planned) = after.get_mut(name) {
        planned.set_content(target.options.clone());
    }
    let named = BTreeSet::from([name.to_string()]);
    let changes = changes(view, &after, &view.machine_states(), &named)?;
    let launched = unit.desired_state == JobState::Launched.as_str();
    let (summary, write) = if launched {
        let file = UnitFile::from_options(target.options.clone());
        let mut request = schema::RolloutRequest {
            kind: RolloutKind::Replace,
            units: vec![schema::RolloutRequestUnit { name: name.to_string(), options: target.options.clone() }],
            ..Default::default()
        };
        let pace = if rollout::policy::UpdatePolicy::of(&file).is_some() {
            "at the pace of its update policy"
        } else {
            request.max_unavailable_percent = Some(100);
            request.min_healthy_ms = Some(0);
            "every machine at once"
        };
        let taken: Vec<String> = view.rollouts.iter().map(|r| r.id.clone()).collect();
        let id = api_rules::unused_rollout_id(name, now_ms, &taken);
        let body = serde_json::to_value(&request).map_err(|e| e.to_string())?;
        (
            format!("a replace rollout ({id}) returns {name} to version {}, {pace}", short_hash(&target.hash)),
            Write { method: "PUT", path: format!("/fleet/v1/rollouts/{id}"), body: Some(body) },
        )
    } else {
        let request = Unit {
            name: name.to_string(),
            options: target.options.clone(),
            desired_state: unit.desired_state.clone(),
            ..Default::default()
        };
        let body = serde_json::to_value(&request).map_err(|e| e.to_string())?;
        (
            format!("{name} ({}) gets version {} stored in place", unit.desired_state, short_hash(&target.hash)),
            Write { method: "PUT", path: format!("/fleet/v1/units/{name}"), body: Some(body) },
        )
    };
    Ok(Preview { title: format!("roll back {name}"), summary: vec![summary], changes, write })
}

#[cfg(test)]
mod tests;

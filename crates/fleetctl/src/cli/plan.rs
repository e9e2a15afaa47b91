//! `fleetctl plan start|load|submit [--replace ...] UNIT...` and `--dry-run` on those commands: what the command
//! would do, machine by machine, without doing it (issue 12, an extension of this implementation).
//!
//! The answer is computed by the decisions the cluster itself makes, never a re-implementation:
//! * what the command would store: [`create::intended_units`] (the `--replace` decision table and
//!   `replacement_mode` of `create`);
//! * where units go: the engine's [`schedule::plan_with_report`] on an engine snapshot of the API's units and
//!   machines with the new versions applied (moves and placements with the scheduler's reason, units left
//!   unplaced with each machine's verdict from [`explain`]);
//! * what each machine does: the agent's [`desired_units`] and [`agent_plan::plan`] (restart, in-place update, reload,
//!   start, stop), against what the machine holds now as the API shows it (its published states).
//!
//! Output: one line per change (`UNIT MACHINE ACTION DETAIL`, see docs/rollouts.md), nothing when nothing would
//! change. Exit status 0 when nothing would change, 2 when something would, 1 on errors.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::context::Ctx;
use super::create::{self, Creator, Intended, ReplaceFlags, ReplacementMode};
use super::table::{machine_id_legend, render};

use fleet_core::machine_plan::desired::{ClusterUnit, ThisMachine, desired_units};
use fleet_core::machine_plan::plan::{self as agent_plan, Actual, Desired, Planned, Task};
use fleet_core::machine_plan::unit_cache::reloadable;
use fleet_core::model::{JobState, MachineState, short_hash};
use fleet_core::scheduler::{ScheduleInput, UnitSpec, explain, schedule};
use fleet_core::schema::{Machine, Unit, UnitState};
use fleet_core::unit::{Requirements, UnitFile};

/// What one change does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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
        }
    }
}

/// One line of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub unit: String,
    /// The machine (full ID) the change happens on; for a move the destination; empty for `blocked`.
    pub machine: String,
    pub action: Action,
    pub detail: String,
}

/// The cluster as the API shows it.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    pub units: Vec<Unit>,
    pub states: Vec<UnitState>,
    pub machines: Vec<Machine>,
}

/// One unit as the plan follows it: the parts of a stored unit that decide scheduling and the agents' tasks.
#[derive(Debug, Clone)]
struct PlanUnit {
    desired: JobState,
    file: UnitFile,
    hash: String,
    target: Option<String>,
    no_restart: bool,
}

impl PlanUnit {
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

/// The changes the intended stores (then the command's desired state `command_state` on every argument, as
/// `load`/`start` set it) would cause, in unit order then machine-ID order.
pub fn predict(
    view: &ClusterView,
    intended: &[Intended],
    command_state: Option<JobState>,
) -> Result<Vec<Change>, String> {
    let machines: Vec<MachineState> = view
        .machines
        .iter()
        .map(|m| MachineState {
            id: m.id.clone(),
            public_ip: m.primary_ip.clone(),
            metadata: m.metadata.clone(),
            cordoned: m.cordoned,
            ..Default::default()
        })
        .collect();
    let before = stored_units(&view.units)?;
    let after = with_intended(&before, intended, command_state);
    let before_targets: BTreeMap<String, Option<String>> =
        before.iter().map(|(n, u)| (n.clone(), if global(n, u) { None } else { u.target.clone() })).collect();
    let placed = place(&after, &machines)?;

    // What each machine holds now (its published states) and what its agent believes it did (what it was asked).
    let mut held: BTreeMap<&str, BTreeMap<&str, &UnitState>> = BTreeMap::new();
    for s in &view.states {
        held.entry(s.machine_id.as_str()).or_default().insert(s.name.as_str(), s);
    }
    let names: BTreeSet<&str> = intended.iter().map(|i| i.name.as_str()).collect();
    let mut per_unit: BTreeMap<String, Vec<(String, Vec<Planned>)>> = BTreeMap::new();
    let mut touched: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    for m in &machines {
        // What the machine holds (its published states): a cordoned one keeps only those of the global units.
        let holds: BTreeSet<String> =
            held.get(m.id.as_str()).map(|h| h.keys().map(|n| n.to_string()).collect()).unwrap_or_default();
        // Units a drain stopped are not published there any more: not held, so a global one is left out already.
        let me = ThisMachine { holds, ..this_machine(m) };
        let was = desired_units(&cluster_units(&before, &before_targets), &me).map_err(|e| e.to_string())?;
        let will = desired_units(&cluster_units(&after, &placed.targets), &me).map_err(|e| e.to_string())?;
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
fn stored_units(units: &[Unit]) -> Result<BTreeMap<String, PlanUnit>, String> {
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

/// The units after the command: each intended store applied as the API applies the PUT (content, desired state,
/// schedule dropped by a reschedule or an `inactive` store, `noRestart`), then the command's desired state.
fn with_intended(
    before: &BTreeMap<String, PlanUnit>,
    intended: &[Intended],
    command_state: Option<JobState>,
) -> BTreeMap<String, PlanUnit> {
    let mut after = before.clone();
    for i in intended {
        let unit = after.entry(i.name.clone()).or_insert_with(|| PlanUnit {
            desired: JobState::Inactive,
            file: UnitFile::from_options(Vec::new()),
            hash: String::new(),
            target: None,
            no_restart: false,
        });
        if let Some(stored) = &i.unit {
            unit.file = UnitFile::from_options(stored.options.clone());
            unit.hash = unit.file.hash().to_hex();
            unit.no_restart = stored.no_restart;
            match i.mode {
                None | Some(ReplacementMode::ThroughInactive) => {
                    unit.desired = JobState::Inactive;
                    unit.target = None;
                }
                Some(ReplacementMode::Rescheduled(state)) => {
                    unit.desired = state;
                    unit.target = None;
                }
                Some(ReplacementMode::InPlace(state) | ReplacementMode::NoRestart(state)) => unit.desired = state,
            }
        }
        if let Some(state) = command_state {
            unit.desired = state;
        }
    }
    for unit in after.values_mut() {
        if unit.desired == JobState::Inactive {
            unit.target = None;
        }
    }
    after
}

fn global(name: &str, unit: &PlanUnit) -> bool {
    unit.requirements(name).global
}

/// One engine pass over the units and machines (the engine's own [`schedule::plan_with_report`]), applied.
fn place(units: &BTreeMap<String, PlanUnit>, machines: &[MachineState]) -> Result<Placed, String> {
    let specs: BTreeMap<String, UnitSpec> = units
        .iter()
        .map(|(name, u)| {
            let constraints = u.requirements(name);
            let target = if constraints.global { None } else { u.target.clone() };
            (name.clone(), UnitSpec { name: name.clone(), desired: u.desired, target, constraints })
        })
        .collect();
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
            reloadable: reloadable(&u.file),
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

/// `fleetctl plan COMMAND [flags] UNIT...`: `args[0]` is `start`, `load` or `submit`.
pub fn plan(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let Some((command, units)) = args.split_first() else {
        ctx.warn("plan needs a command (start, load or submit) and units: fleetctl plan start --replace UNIT...");
        return 1;
    };
    let creator = match command.as_str() {
        "start" => Creator::Start,
        "load" => Creator::Load,
        "submit" => Creator::Submit,
        other => {
            ctx.warn(&format!("plan: unknown command {other:?}: plan predicts start, load or submit"));
            return 1;
        }
    };
    run(ctx, creator, units)
}

/// `start|load|submit --dry-run ...` and `plan`: prints the predicted changes; 0 nothing changes, 2 something does,
/// 1 on errors.
pub fn run(ctx: &mut Ctx<'_>, creator: Creator, args: &[String]) -> i32 {
    if args.is_empty() {
        ctx.warn("No units given");
        return 1;
    }
    let flags = ReplaceFlags {
        creator,
        replace: ctx.flags.bool("replace"),
        keep_machine: ctx.flags.bool("keep-machine"),
        no_restart: ctx.flags.bool("no-restart"),
    };
    let command_state = match creator {
        Creator::Start => Some(JobState::Launched),
        Creator::Load => Some(JobState::Loaded),
        Creator::Submit | Creator::Restart => None,
    };
    // Messages the command would print go to stderr: stdout is the plan.
    let mut notes = Vec::new();
    let intended = {
        let mut sub = Ctx::new(ctx.client, &mut notes, &mut *ctx.err, ctx.flags, ctx.command, ctx.timing);
        create::intended_units(&mut sub, args, flags)
    };
    let _ = ctx.err.write_all(&notes);
    let intended = match intended {
        Ok(i) => i,
        Err(e) => {
            ctx.warn(&format!("Error planning units: {e}"));
            return 1;
        }
    };
    let view = match read_view(ctx) {
        Ok(v) => v,
        Err(e) => {
            ctx.warn(&format!("Error planning units: {e}"));
            return 1;
        }
    };
    match predict(&view, &intended, command_state) {
        Ok(changes) if changes.is_empty() => 0,
        Ok(changes) => {
            ctx.say(render(&lines(&changes, &view.machines)).trim_end_matches('\n'));
            2
        }
        Err(e) => {
            ctx.warn(&format!("Error planning units: {e}"));
            1
        }
    }
}

fn read_view(ctx: &Ctx<'_>) -> Result<ClusterView, String> {
    let client = ctx.client;
    let units = client.units().map_err(|e| format!("error retrieving units: {e}"))?;
    let states = client.unit_states(&Default::default()).map_err(|e| format!("error retrieving unit states: {e}"))?;
    let machines = client.machines().map_err(|e| format!("error retrieving machines: {e}"))?;
    Ok(ClusterView { units, states, machines })
}

/// The table: a header, then one row per change (machines as `list-units` shows them).
pub fn lines(changes: &[Change], machines: &[Machine]) -> Vec<Vec<String>> {
    let location = |id: &str| {
        if id.is_empty() {
            return "-".to_string();
        }
        match machines.iter().find(|m| m.id == id) {
            Some(m) => super::table::machine_full_legend(m, false),
            None => machine_id_legend(id, false),
        }
    };
    let mut rows = vec![vec!["UNIT".to_string(), "MACHINE".into(), "ACTION".into(), "DETAIL".into()]];
    rows.extend(
        changes
            .iter()
            .map(|c| vec![c.unit.clone(), location(&c.machine), c.action.as_str().to_string(), c.detail.clone()]),
    );
    rows
}

#[cfg(test)]
mod tests;

/// `m` as its agent sees itself, before what it holds.
fn this_machine(m: &MachineState) -> ThisMachine {
    ThisMachine { id: m.id.clone(), metadata: m.metadata.clone(), cordoned: m.cordoned, ..ThisMachine::default() }
}

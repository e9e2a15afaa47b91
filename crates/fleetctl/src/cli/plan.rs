//! `fleetctl plan start|load|submit [--replace ...] UNIT...` and `--dry-run` on those commands: what the command
//! would do, machine by machine, without doing it (issue 12, an extension of this implementation); and `fleetctl
//! plan cordon|uncordon MACHINE`, `plan rollout-pause|rollout-resume|rollout-abort|rollout-promote ROLLOUT`, `plan
//! rollback UNIT` (issue 38): what those actions would change, the same preview the cluster page shows before it
//! asks for confirmation.
//!
//! The answer is computed by the decisions the cluster itself makes, never a re-implementation: what the command
//! would store is [`create::intended_units`] (the `--replace` decision table and `replacement_mode` of `create`);
//! everything after that — the engine's scheduling, each agent's tasks, a rollout's next pass — is
//! [`fleet_core::preview`], which the page calls too.
//!
//! Output: one line per change (`UNIT MACHINE ACTION DETAIL`, see docs/rollouts.md), nothing when nothing would
//! change; an action's preview first prints what it does on stderr. Exit status 0 when nothing would change, 2 when
//! something would, 1 on errors.

use std::collections::{BTreeMap, BTreeSet};

use super::context::Ctx;
use super::create::{self, Creator, Intended, ReplaceFlags, ReplacementMode};
use super::table::{machine_id_legend, render};

use fleet_core::model::JobState;
use fleet_core::preview::{self, PlanUnit};
use fleet_core::schema::Machine;

pub use fleet_core::preview::{Action, Change, ClusterView};

/// The changes the intended stores (then the command's desired state `command_state` on every argument, as
/// `load`/`start` set it) would cause, in unit order then machine-ID order.
pub fn predict(
    view: &ClusterView,
    intended: &[Intended],
    command_state: Option<JobState>,
) -> Result<Vec<Change>, String> {
    let before = preview::stored_units(&view.units)?;
    let after = with_intended(&before, intended, command_state);
    let named: BTreeSet<String> = intended.iter().map(|i| i.name.clone()).collect();
    preview::changes(view, &after, &view.machine_states(), &named)
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
        let unit = after.entry(i.name.clone()).or_insert_with(PlanUnit::absent);
        if let Some(stored) = &i.unit {
            unit.set_content(stored.options.clone());
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

/// `fleetctl plan COMMAND [flags] ARG...`: `args[0]` is `start`, `load` or `submit` (units follow), or an action
/// of [`preview::Intent::parse`] with its one machine, rollout or unit.
pub fn plan(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let Some((command, rest)) = args.split_first() else {
        ctx.warn("plan needs a command (start, load or submit) and units: fleetctl plan start --replace UNIT...");
        return 1;
    };
    let creator = match command.as_str() {
        "start" => Creator::Start,
        "load" => Creator::Load,
        "submit" => Creator::Submit,
        action => return plan_action(ctx, action, rest),
    };
    run(ctx, creator, rest)
}

/// `plan cordon M`, `plan rollout-pause ID`, …: the preview the cluster page shows (what the action does on
/// stderr, the changes on stdout).
fn plan_action(ctx: &mut Ctx<'_>, action: &str, args: &[String]) -> i32 {
    let intent = match (preview::Intent::parse(action, args.first().map_or("", String::as_str)), args) {
        (Ok(intent), [_]) => intent,
        (Err(e), _) => {
            ctx.warn(&format!("plan: {e}; start, load and submit take units"));
            return 1;
        }
        (Ok(_), _) => {
            ctx.warn(&format!("plan {action} takes one argument"));
            return 1;
        }
    };
    let shown = read_view(ctx).and_then(|mut view| {
        if let Some(unit) = intent.history_of() {
            let history = ctx.client.unit_history(unit).map_err(|e| format!("error retrieving history: {e}"))?;
            view.histories.insert(unit.to_string(), history.ok_or_else(|| format!("unit {unit:?} does not exist"))?);
        }
        let preview = preview::preview(&view, &intent, fleet_core::model::now_ms())?;
        Ok((view, preview))
    });
    match shown {
        Ok((view, preview)) => {
            let _ = writeln!(ctx.err, "{}: {}", preview.title, preview.summary.join("; "));
            if preview.changes.is_empty() {
                return 0;
            }
            ctx.say(render(&lines(&preview.changes, &view.machines)).trim_end_matches('\n'));
            2
        }
        Err(e) => {
            ctx.warn(&format!("Error planning {action}: {e}"));
            1
        }
    }
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
    let rollouts = client.rollouts().map_err(|e| format!("error retrieving rollouts: {e}"))?;
    Ok(ClusterView { units, states, machines, rollouts, ..ClusterView::default() })
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

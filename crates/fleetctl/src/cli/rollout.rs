//! Rolling replace and restart as fleetctl drives them (issue 12, an extension of this implementation):
//! `start --replace --rolling`, `restart --rolling`, `rollout-status`, `rollout-pause`, `rollout-resume` and
//! `rollout-abort`.
//!
//! The cluster drives a rollout (the engine leader advances it, the agents follow it); fleetctl only creates one
//! (`PUT /fleet/v1/rollouts/<id>`, all units in one request), shows and waits for one (`GET` with a change wait,
//! `?waitRevision=`, which the server answers when the rollout changes; polling a server without one), and sends
//! a user's action (`PATCH`). So a fleetctl that is interrupted leaves the rollout going; `rollout-status` picks it up.
//!
//! Exit codes of the commands that wait ([`exit_code`]): 0 done, 1 error, 2 paused (a failed step, or paused by
//! request), 3 rolled back, 4 aborted.

use std::time::Duration;

use super::context::Ctx;
use super::flags::Flags;
use super::table::{location_legend, render};
use fleet_core::rollout::policy::MaxUnavailable;
use fleet_core::rollout::{Action, OnFailure, Phase, RolloutKind, RolloutState};
use fleet_core::schema::{Machine, Rollout, RolloutRequest, RolloutRequestUnit, UnitHistory};
use fleet_core::unit::name as unitf;

/// Exit code: the rollout is done (also `--no-block` while it runs).
pub const EXIT_DONE: i32 = 0;
/// Exit code: an error (no such unit or rollout, a refused request, the API unreachable while waiting).
pub const EXIT_ERROR: i32 = 1;
/// Exit code: the rollout is paused: a step failed, or a user paused it.
pub const EXIT_PAUSED: i32 = 2;
/// Exit code: a step failed with `--on-failure=rollback`; every unit is back on its old version.
pub const EXIT_ROLLED_BACK: i32 = 3;
/// Exit code: a user aborted the rollout.
pub const EXIT_ABORTED: i32 = 4;

/// Polls in a row that may fail (API unreachable, e.g. while the endpoint's fleetd restarts) before a wait gives
/// up; about a minute at the 250 ms cadence failed polls keep, longer when requests time out.
const MAX_FAILED_POLLS: u32 = 240;

/// How often a rollout wait polls a server that cannot wait for a change (one without rollout revisions). A step
/// can take tens of milliseconds (one stop and one start), so the start/stop waits' 250 ms cadence (the
/// original's, which `--block-attempts` counts in) would make the command outlast its rollout by up to a poll per
/// step it sees.
const ROLLOUT_POLL: Duration = Duration::from_millis(50);

/// How long one change wait may be held by the server (`waitMs`; the client keeps it inside `--request-timeout`):
/// a rollout wait otherwise learns of each change as it is made, with one request per change.
const CHANGE_WAIT: Duration = Duration::from_secs(10);
/// The same while a progress line is drawn, whose elapsed time should tick.
const CHANGE_WAIT_WITH_PROGRESS: Duration = Duration::from_secs(1);

/// The exit code a rollout in `state` ends a wait with; `None` while it runs (keep waiting).
pub fn exit_code(state: RolloutState) -> Option<i32> {
    match state {
        RolloutState::Running => None,
        RolloutState::Done => Some(EXIT_DONE),
        RolloutState::Paused => Some(EXIT_PAUSED),
        RolloutState::RolledBack => Some(EXIT_ROLLED_BACK),
        RolloutState::Aborted => Some(EXIT_ABORTED),
    }
}

/// The exit code of `rollout-status` without a wait: how the rollout ended, [`EXIT_DONE`] while it runs, and
/// [`EXIT_ERROR`] when it cannot be read.
fn snapshot_exit_code(rollout: &Rollout) -> i32 {
    if !rollout.error.is_empty() {
        return EXIT_ERROR;
    }
    exit_code(rollout.state).unwrap_or(EXIT_DONE)
}

/// Whether a wait for `rollout` as shown is over, and with which exit code. A user's action the engine has not
/// taken up yet is not an end: a paused rollout whose action is `abort` is about to be aborted (undone), one with a
/// resume the engine has not taken up (`resumes` > `resumesTaken`; every resume counts one more) is about to run
/// again (`rollout-resume` followed at once by `rollout-status`), and one awaiting a promotion that was given is
/// about to release the rest. Any other pause is an end (exit 2): a failed step, the progress deadline, a pause by
/// request, canaries awaiting promotion.
pub fn wait_outcome(rollout: &Rollout) -> Option<i32> {
    if !rollout.error.is_empty() {
        // Unreadable: no engine drives it, so waiting would wait forever.
        return Some(EXIT_ERROR);
    }
    let resume_pending = rollout.resumes > rollout.resumes_taken;
    let promotion_pending = rollout.awaiting_promotion && rollout.promoted;
    match (rollout.state, rollout.action) {
        (RolloutState::Paused, Action::Abort) if rollout.undo_end.is_none() => None,
        (RolloutState::Paused, Action::Run) if resume_pending || promotion_pending => None,
        (state, _) => exit_code(state),
    }
}

/// How a rollout goes, as far as the user's flags say: each field is `None` unless its flag was given, so the
/// server fills it from the unit's `[X-Fleet]` update policy, or the defaults (one decision, on the server).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pace {
    pub max_unavailable: Option<MaxUnavailable>,
    pub min_healthy: Option<Duration>,
    pub health_timeout: Option<Duration>,
    pub on_failure: Option<OnFailure>,
    pub canary: Option<u32>,
    pub canary_hold: Option<Duration>,
    pub order: Option<String>,
    pub progress_deadline: Option<Duration>,
}

impl Pace {
    /// Every machine at once, done as soon as each runs the version (`rollback` without `--rolling` and without a
    /// policy).
    pub fn all_at_once() -> Pace {
        Pace {
            max_unavailable: Some(MaxUnavailable::Percent(100)),
            min_healthy: Some(Duration::ZERO),
            ..Pace::default()
        }
    }

    /// The request's pace fields.
    fn apply(&self, request: &mut RolloutRequest) {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        match self.max_unavailable {
            Some(MaxUnavailable::Count(n)) => request.max_unavailable = Some(n),
            Some(MaxUnavailable::Percent(p)) => request.max_unavailable_percent = Some(p),
            None => {}
        }
        request.min_healthy_ms = self.min_healthy.map(ms);
        request.health_timeout_ms = self.health_timeout.map(ms);
        request.on_failure = self.on_failure;
        request.canary = self.canary;
        request.canary_hold_ms = self.canary_hold.map(ms);
        request.order = self.order.clone();
        request.progress_deadline_ms = self.progress_deadline.map(ms);
    }
}

/// The pace the given flags ask for, or the flag whose text does not parse. Whether the values make a pace is the
/// server's one decision (`rollout::policy::check_pace`); fleetctl shows its answer.
pub fn pace(flags: &Flags) -> Result<Pace, String> {
    let given = |name: &str| flags.is_given(name);
    let mut pace = Pace::default();
    if given("max-unavailable") {
        let text = flags.str("max-unavailable");
        pace.max_unavailable =
            Some(MaxUnavailable::parse(text).map_err(|e| format!("invalid --max-unavailable: {e}"))?);
    }
    if given("min-healthy") {
        pace.min_healthy = Some(flags.duration("min-healthy"));
    }
    if given("health-timeout") {
        pace.health_timeout = Some(flags.duration("health-timeout"));
    }
    if given("on-failure") {
        pace.on_failure = Some(match flags.str("on-failure") {
            "pause" => OnFailure::Pause,
            "rollback" => OnFailure::Rollback,
            other => return Err(format!("invalid --on-failure {other:?}: expected pause or rollback")),
        });
    }
    if given("canary") {
        let n = flags.int("canary");
        pace.canary = Some(u32::try_from(n).map_err(|_| format!("--canary must be 0 or more, got {n}"))?);
    }
    if given("canary-hold") {
        pace.canary_hold = Some(flags.duration("canary-hold"));
    }
    if given("order") {
        pace.order = Some(flags.str("order").to_string());
    }
    if given("progress-deadline") {
        pace.progress_deadline = Some(flags.duration("progress-deadline"));
    }
    Ok(pace)
}

/// Whether the command runs as a rollout (`--rolling`), or why its flags do not go together: `start --rolling`
/// needs `--replace` and cannot keep processes (`--no-restart`); the pace flags (and `restart --no-block`) need
/// `--rolling`.
pub fn rolling(flags: &Flags, command: &str) -> Result<bool, String> {
    let rolling = flags.bool("rolling");
    if rolling {
        if command == "start" && !flags.bool("replace") {
            return Err("--rolling applies only with --replace".into());
        }
        if flags.bool("no-restart") {
            return Err("--rolling cannot be combined with --no-restart".into());
        }
        return Ok(true);
    }
    let mut rolling_only: Vec<&str> = super::commands::ROLLING_FLAGS[1..].to_vec();
    if command == "restart" {
        rolling_only.push("no-block");
    }
    match rolling_only.into_iter().find(|f| flags.is_given(f)) {
        Some(flag) => Err(format!("--{flag} applies only with --rolling")),
        None => Ok(false),
    }
}

pub use fleet_core::api_rules::{rollout_id, unused_rollout_id};

fn kind_name(kind: RolloutKind) -> &'static str {
    match kind {
        RolloutKind::Replace => "replace",
        RolloutKind::Restart => "restart",
        RolloutKind::Rebalance => "rebalance",
        RolloutKind::Drain => "drain",
    }
}

/// What `rollout-status` prints for `rollout`: a header line (`Rollout <id> <kind> <state>[: <reason>]`), then the
/// steps in order as a table `MACHINE UNIT PHASE DETAIL` (machines as in list-units: `id8.../ip`).
pub fn render_status(rollout: &Rollout, machines: &[Machine], full: bool, legend: bool) -> String {
    let mut out = format!("Rollout {} {} {}", rollout.id, kind_name(rollout.kind), rollout.state);
    if rollout.kind == RolloutKind::Drain {
        out = format!(
            "Rollout {} drain of {} {}",
            rollout.id,
            location_legend(&rollout.machine, machines, full),
            rollout.state
        );
    }
    if !rollout.reason.is_empty() {
        out.push_str(&format!(": {}", rollout.reason));
    }
    out.push('\n');
    if !rollout.error.is_empty() {
        out.push_str(&format!("Cannot read this rollout (no engine drives it): {}\n", rollout.error));
    }
    if rollout.steps.is_empty() && rollout.kind.plans_steps() && rollout.state == RolloutState::Running {
        // A rebalance or drain has no step until the engine leader plans them: no empty table meanwhile.
        out.push_str("(waiting for the engine leader to plan the steps)\n");
    } else {
        out.push_str(&render_steps(rollout.kind, &rollout.steps, machines, full, legend));
    }
    if !rollout.undo.is_empty() {
        out.push_str("Undo (each changed machine back to the old version):\n");
        out.push_str(&render_steps(rollout.kind, &rollout.undo, machines, full, legend));
    }
    out
}

/// The steps as a table `MACHINE UNIT PHASE DETAIL`. A move (rebalance, drain) says where from; a drain's stop
/// says so.
fn render_steps(
    kind: RolloutKind,
    steps: &[fleet_core::rollout::Step],
    machines: &[Machine],
    full: bool,
    legend: bool,
) -> String {
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(steps.len() + 1);
    if legend {
        rows.push(["MACHINE", "UNIT", "PHASE", "DETAIL"].map(str::to_string).to_vec());
    }
    for step in steps {
        rows.push(vec![
            location_legend(&step.machine, machines, full),
            step.unit.clone(),
            step.phase.as_str().to_string(),
            match (step.detail.is_empty(), step.from_machine.is_empty()) {
                (false, _) => step.detail.clone(),
                (true, false) => format!("from {}", location_legend(&step.from_machine, machines, full)),
                (true, true) if step.is_stop(kind) => "stop: it cannot leave the machine".to_string(),
                (true, true) => "-".to_string(),
            },
        ]);
    }
    render(&rows)
}

/// The rollout `arg` names: the rollout with that ID, else the newest rollout of the unit `arg` names (only those
/// that have not ended when `in_progress`).
fn find(ctx: &Ctx<'_>, arg: &str, in_progress: bool) -> Result<Rollout, String> {
    let all = ctx.client.rollouts().map_err(|e| format!("Error retrieving rollouts: {e}"))?;
    if let Some(r) = all.iter().find(|r| r.id == arg) {
        return Ok(r.clone());
    }
    let planned = match arg {
        REBALANCE => Some(RolloutKind::Rebalance),
        DRAIN => Some(RolloutKind::Drain),
        _ => None,
    };
    if let Some(kind) = planned {
        let mut of_kind = all.into_iter().filter(|r| r.kind == kind);
        let found = if in_progress { of_kind.find(|r| !r.state.is_final()) } else { of_kind.next() };
        return found.ok_or_else(|| match in_progress {
            true => format!("No {arg} is in progress"),
            false => format!("No {arg} found"),
        });
    }
    let unit = unitf::mangle(arg);
    let mut of_unit = all.into_iter().filter(|r| r.units.iter().any(|u| u.name == unit));
    let found = if in_progress { of_unit.find(|r| !r.state.is_final()) } else { of_unit.next() };
    found.ok_or_else(|| match in_progress {
        true => format!("No rollout of unit {unit} is in progress (and no rollout has the ID {arg:?})"),
        false => format!("No rollout of unit {unit} found (and no rollout has the ID {arg:?})"),
    })
}

/// Print the rollout whenever it changes until it is no longer running; the exit code of how it ended.
fn wait(ctx: &mut Ctx<'_>, mut rollout: Rollout) -> i32 {
    let full = ctx.flags.bool("full") || ctx.flags.bool("l");
    let legend = !ctx.flags.bool("no-legend");
    let mut machines: Vec<Machine> = ctx.machines().to_vec();
    let mut shown = String::new();
    let mut failed_polls = 0u32;
    loop {
        // A machine that joined during the rollout gets its address once it appears in a step.
        if rollout.steps.iter().any(|s| !machines.iter().any(|m| m.id == s.machine)) {
            if let Ok(now) = ctx.client.machines() {
                machines = now;
            }
        }
        let text = render_status(&rollout, &machines, full, legend);
        if text != shown {
            ctx.clear_progress();
            let _ = ctx.out.write_all(text.as_bytes());
            if ctx.progress {
                let _ = ctx.out.flush();
            }
            shown = text;
        }
        show_rollout_progress(ctx, &rollout);
        if let Some(code) = wait_outcome(&rollout) {
            report_end(ctx, &rollout);
            return code;
        }
        let next = if failed_polls == 0 && rollout.revision > 0 {
            // The server holds the request until the rollout changes (or the wait runs out).
            let asked = std::time::Instant::now();
            let limit = if ctx.progress { CHANGE_WAIT_WITH_PROGRESS } else { CHANGE_WAIT };
            let next = ctx.client.rollout_change(&rollout.id, rollout.revision, limit);
            let unchanged = matches!(&next, Ok(Some(now)) if now.revision == rollout.revision);
            if unchanged && asked.elapsed() < ROLLOUT_POLL {
                // Answered at once with nothing new: a server that does not hold requests; pace it as a poll.
                std::thread::sleep(ROLLOUT_POLL.min(ctx.timing.interval));
            }
            next
        } else {
            if !ctx.timing.interval.is_zero() {
                let pause = if failed_polls == 0 { ROLLOUT_POLL.min(ctx.timing.interval) } else { ctx.timing.interval };
                std::thread::sleep(pause);
            }
            ctx.client.rollout(&rollout.id)
        };
        match next {
            Ok(Some(now)) => {
                rollout = now;
                failed_polls = 0;
            }
            Ok(None) => {
                ctx.warn(&format!("Error waiting for rollout {}: it no longer exists", rollout.id));
                return EXIT_ERROR;
            }
            Err(e) => {
                failed_polls += 1;
                if failed_polls == 1 {
                    ctx.warn(&format!("Error retrieving rollout {}: {e} (still waiting)", rollout.id));
                }
                if failed_polls >= MAX_FAILED_POLLS {
                    ctx.warn(&format!(
                        "Error waiting for rollout {}: {e} ({failed_polls} requests in a row failed; last seen: {}; \
                         the rollout goes on in the cluster, see fleetctl rollout-status {})",
                        rollout.id, rollout.state, rollout.id
                    ));
                    return EXIT_ERROR;
                }
            }
        }
    }
}

/// The progress line of a rollout waited for: steps done, the steps not done with their machine and phase.
fn show_rollout_progress(ctx: &mut Ctx<'_>, rollout: &Rollout) {
    if !ctx.progress {
        return;
    }
    let done = rollout.steps.iter().filter(|s| s.phase == Phase::Done).count();
    let waiting: Vec<super::progress::Waiting> = rollout
        .steps
        .iter()
        .filter(|s| s.phase != Phase::Done)
        .map(|s| super::progress::Waiting {
            unit: s.unit.clone(),
            at: format!("{} on {}", s.phase.as_str(), s.machine.get(..8).unwrap_or(&s.machine)),
        })
        .collect();
    let what = format!("rollout {}", rollout.id);
    let line = super::progress::line(&what, "steps done", done, rollout.steps.len(), &waiting, ctx.started.elapsed());
    ctx.show_progress(&line);
}

/// On stderr, how a rollout that is not done ended, and what to do about a paused one.
fn report_end(ctx: &mut Ctx<'_>, rollout: &Rollout) {
    let id = &rollout.id;
    if !rollout.error.is_empty() {
        ctx.warn(&format!("Rollout {id} cannot be read: {}", rollout.error));
        return;
    }
    match rollout.state {
        RolloutState::Running | RolloutState::Done => {}
        RolloutState::Paused if rollout.awaiting_promotion => ctx.warn(&format!(
            "Rollout {id} awaits promotion ({}): promote it with fleetctl rollout-promote {id}, or abort it with \
             fleetctl rollout-abort {id}",
            rollout.reason
        )),
        RolloutState::Paused => ctx.warn(&format!(
            "Rollout {id} is paused ({}): resume it with fleetctl rollout-resume {id}, or abort it with fleetctl \
             rollout-abort {id}",
            rollout.reason
        )),
        RolloutState::RolledBack | RolloutState::Aborted => {
            ctx.warn(&format!("Rollout {id} {}: {}", rollout.state, rollout.reason))
        }
    }
}

/// The argument of `rollout-status` and friends that names the newest rebalance (`fleetctl rebalance`).
pub const REBALANCE: &str = "rebalance";
/// The argument of `rollout-status` and friends that names the newest drain (`fleetctl drain`).
pub const DRAIN: &str = "drain";

/// Sends the rollout and waits for it (unless `--no-block`). `machine`: the machine a drain empties.
fn launch(
    ctx: &mut Ctx<'_>,
    kind: RolloutKind,
    units: Vec<RolloutRequestUnit>,
    pace: Pace,
    machine: Option<String>,
) -> i32 {
    let stem = match (kind, units.first(), machine.as_deref()) {
        (RolloutKind::Rebalance, _, _) => REBALANCE.to_string(),
        (RolloutKind::Drain, _, Some(machine)) => format!("{DRAIN}-{}", machine.get(..8).unwrap_or(machine)),
        (_, Some(first), _) => first.name.clone(),
        (_, None, _) => return EXIT_DONE,
    };
    let taken: Vec<String> = match ctx.client.rollouts() {
        Ok(all) => all.into_iter().map(|r| r.id).collect(),
        Err(e) => {
            ctx.warn(&format!("Error starting rollout: error retrieving rollouts: {e}"));
            return EXIT_ERROR;
        }
    };
    let id = unused_rollout_id(&stem, fleet_core::model::now_ms(), &taken);
    let names: Vec<String> = units.iter().map(|u| u.name.clone()).collect();
    let what = match &machine {
        Some(machine) => machine.clone(),
        None => units.iter().map(|u| u.name.as_str()).collect::<Vec<_>>().join(" "),
    };
    let mut request = RolloutRequest { kind, units, machine, ..RolloutRequest::default() };
    pace.apply(&mut request);
    let created = match ctx.client.create_rollout(&id, &request) {
        Ok(created) => created,
        Err(e) => {
            ctx.warn(&format!("Error starting rollout: {e}"));
            return EXIT_ERROR;
        }
    };
    tracing::debug!(rollout = %id, ?kind, units = names.len(), "rollout created");
    ctx.say(&format!("Rollout {id} started: {} {what}", kind_name(kind)));
    if ctx.flags.bool("no-block") {
        return EXIT_DONE;
    }
    wait(ctx, created)
}

/// `start --replace --rolling UNIT...`: one replace rollout of every unit whose local version differs.
pub fn start_rolling(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let result = pace(ctx.flags).and_then(|pace| Ok((pace, super::create::rolling_replacements(ctx, args)?)));
    match result {
        Ok((pace, units)) => launch(ctx, RolloutKind::Replace, units, pace, None),
        Err(e) => {
            ctx.warn(&format!("Error starting rollout: {e}"));
            EXIT_ERROR
        }
    }
}

/// `restart --rolling UNIT...`: one restart rollout of the named units, which must exist.
pub fn restart_rolling(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let pace = match pace(ctx.flags) {
        Ok(pace) => pace,
        Err(e) => {
            ctx.warn(&format!("Error starting rollout: {e}"));
            return EXIT_ERROR;
        }
    };
    let names = fleet_core::unit::name::mangle_unique(args);
    let client = ctx.client;
    let found = super::parallel::map(&names, |name| client.unit(name));
    for (name, found) in names.iter().zip(found) {
        let problem = match found {
            Ok(Some(_)) => continue,
            Ok(None) => format!("unit {name} does not exist: a rolling restart changes launched units"),
            Err(e) => format!("error retrieving Unit({name}) from Registry: {e}"),
        };
        ctx.warn(&format!("Error starting rollout: {problem}"));
        return EXIT_ERROR;
    }
    let units = names.into_iter().map(|name| RolloutRequestUnit { name, options: Vec::new() }).collect();
    launch(ctx, RolloutKind::Restart, units, pace, None)
}

/// `rebalance`: one rebalance rollout (the engine leader plans the moves), then waits like rollout-status.
pub fn rebalance(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    if let Some(extra) = args.first() {
        ctx.warn(&format!("Error starting rebalance: rebalance takes no arguments, got {extra:?}"));
        return EXIT_ERROR;
    }
    match planned_pace(ctx) {
        Ok(pace) => launch(ctx, RolloutKind::Rebalance, Vec::new(), pace, None),
        Err(e) => {
            ctx.warn(&format!("Error starting rebalance: {e}"));
            EXIT_ERROR
        }
    }
}

/// The pace of a rebalance or drain: its flags' own defaults, always sent; the server checks them. A step that
/// fails pauses it.
fn planned_pace(ctx: &Ctx<'_>) -> Result<Pace, String> {
    let max = ctx.flags.int("max-unavailable");
    match u32::try_from(max) {
        Ok(n) => Ok(Pace {
            max_unavailable: Some(MaxUnavailable::Count(n)),
            min_healthy: Some(ctx.flags.duration("min-healthy")),
            health_timeout: Some(ctx.flags.duration("health-timeout")),
            on_failure: Some(OnFailure::Pause),
            ..Pace::default()
        }),
        Err(_) => Err(format!("--max-unavailable must be a number of units, got {max}")),
    }
}

/// `drain MACHINE` (issue 38): one drain rollout of the machine (the API cordons it; the engine leader plans and
/// makes the moves), then waits like rollout-status.
pub fn drain(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let [lookup] = args else {
        ctx.warn("Error starting drain: one machine ID (or a unique prefix of one) must be given");
        return EXIT_ERROR;
    };
    let machine = match ctx.client.machines() {
        Ok(machines) => super::context::machine_by_prefix(&machines, lookup).map(|m| m.id.clone()),
        Err(e) => Err(format!("error retrieving list of active machines from fleet API ({e})")),
    };
    match machine.and_then(|machine| Ok((machine, planned_pace(ctx)?))) {
        Ok((machine, pace)) => launch(ctx, RolloutKind::Drain, Vec::new(), pace, Some(machine)),
        Err(e) => {
            ctx.warn(&format!("Error starting drain of {lookup}: {e}"));
            EXIT_ERROR
        }
    }
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of Unix milliseconds; `-` for 0 (not known).
pub fn utc(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let (year, month, day, h, m, s) = fleet_core::go::utc_fields(ms / 1000);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}")
}

/// The history table: HASH, STORED, BY, CURRENT.
pub fn render_history(history: &UnitHistory, full: bool, legend: bool) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    if legend {
        rows.push(vec!["HASH".into(), "STORED".into(), "BY".into(), "CURRENT".into()]);
    }
    for v in &history.versions {
        let hash = if full { v.hash.clone() } else { v.hash.chars().take(7).collect() };
        let by = v.by.clone().unwrap_or_else(|| "-".into());
        rows.push(vec![hash, utc(v.stored_ms), by, if v.current { "*".into() } else { String::new() }]);
    }
    render(&rows)
}

/// `history UNIT`: the unit's stored versions, newest first.
pub fn history(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let Some(format) = super::json::format(ctx) else { return EXIT_ERROR };
    let name = match args {
        [arg] => unitf::mangle(arg),
        _ => {
            ctx.warn("One unit must be given");
            return EXIT_ERROR;
        }
    };
    match ctx.client.unit_history(&name) {
        Ok(Some(history)) if format == super::json::Format::Json => {
            super::json::print(ctx, &super::json::history_doc(&name, &history));
            EXIT_DONE
        }
        Ok(Some(history)) => {
            let full = ctx.flags.bool("full") || ctx.flags.bool("l");
            let text = render_history(&history, full, !ctx.flags.bool("no-legend"));
            let _ = ctx.out.write_all(text.as_bytes());
            EXIT_DONE
        }
        Ok(None) => {
            ctx.warn(&format!("Unit {name} does not exist."));
            EXIT_ERROR
        }
        Err(e) => {
            ctx.warn(&format!("Error retrieving history of unit {name}: {e}"));
            EXIT_ERROR
        }
    }
}

/// `rollback [--to=HASH] [--rolling ...] UNIT`: a launched unit returns to the earlier version through a replace
/// rollout (every machine at once unless `--rolling`); another unit gets it stored in place.
pub fn rollback(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let name = match args {
        [arg] => unitf::mangle(arg),
        _ => {
            ctx.warn("One unit must be given");
            return EXIT_ERROR;
        }
    };
    let fail = |ctx: &mut Ctx<'_>, e: String| {
        ctx.warn(&format!("Error rolling back unit {name}: {e}"));
        EXIT_ERROR
    };
    let rolling = ctx.flags.bool("rolling");
    if !rolling {
        if let Some(flag) = super::commands::ROLLING_FLAGS[1..].iter().find(|f| ctx.flags.is_given(f)) {
            return fail(ctx, format!("--{flag} applies only with --rolling"));
        }
    }
    let (unit, history) = match (ctx.client.unit(&name), ctx.client.unit_history(&name)) {
        (Ok(Some(unit)), Ok(Some(history))) => (unit, history),
        (Ok(None), _) | (_, Ok(None)) => return fail(ctx, "the unit does not exist".into()),
        (Err(e), _) | (_, Err(e)) => return fail(ctx, e.to_string()),
    };
    let to = ctx.flags.str("to").to_string();
    let target = match fleet_core::preview::rollback_target(&history, &to) {
        Ok(target) => target.clone(),
        Err(e) => return fail(ctx, e),
    };
    if unit.desired_state != fleet_core::model::JobState::Launched.as_str() {
        let request = fleet_core::schema::Unit {
            name: name.clone(),
            options: target.options,
            desired_state: unit.desired_state.clone(),
            ..Default::default()
        };
        if let Err(e) = ctx.client.create_unit(&request) {
            return fail(ctx, e.to_string());
        }
        ctx.say(&format!("Unit {name} rolled back to {}", &target.hash[..7]));
        return EXIT_DONE;
    }
    let pace = match pace(ctx.flags) {
        Ok(pace) => pace,
        Err(e) => return fail(ctx, e),
    };
    // The version rolled back to governs, as the new version does in a replace.
    let file = fleet_core::unit::UnitFile::from_options(target.options.clone());
    let pace = if rolling || super::create::has_policy(&file) {
        pace
    } else {
        super::create::hint_all_at_once(ctx, &name, &file, "rollback", "rollback --rolling");
        Pace::all_at_once()
    };
    launch(ctx, RolloutKind::Replace, vec![RolloutRequestUnit { name, options: target.options }], pace, None)
}

/// The one argument of the rollout commands, or the exit code after saying what is wrong.
fn one_argument<'a>(ctx: &mut Ctx<'_>, args: &'a [String]) -> Result<&'a str, i32> {
    match args {
        [arg] => Ok(arg),
        _ => {
            ctx.warn("One unit or rollout ID must be given");
            Err(EXIT_ERROR)
        }
    }
}

/// `rollout-status {UNIT|ROLLOUT-ID} [--no-block]`.
pub fn status(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let Some(format) = super::json::format(ctx) else { return EXIT_ERROR };
    let arg = match one_argument(ctx, args) {
        Ok(arg) => arg,
        Err(code) => return code,
    };
    let rollout = match find(ctx, arg, false) {
        Ok(r) => r,
        Err(e) => {
            ctx.warn(&e);
            return EXIT_ERROR;
        }
    };
    if format == super::json::Format::Json {
        // A snapshot (never waits): the exit code tells how the rollout ended, as with --no-block.
        super::json::print(ctx, &super::json::rollout_doc(&rollout));
        return snapshot_exit_code(&rollout);
    }
    if ctx.flags.bool("no-block") {
        let machines = ctx.machines().to_vec();
        let full = ctx.flags.bool("full") || ctx.flags.bool("l");
        let text = render_status(&rollout, &machines, full, !ctx.flags.bool("no-legend"));
        let _ = ctx.out.write_all(text.as_bytes());
        report_end(ctx, &rollout);
        return snapshot_exit_code(&rollout);
    }
    wait(ctx, rollout)
}

/// `rollout-pause`, `rollout-resume` (`run`) and `rollout-abort` of the newest rollout in progress of a unit (or the
/// rollout with that ID).
pub fn control(ctx: &mut Ctx<'_>, args: &[String], action: Action) -> i32 {
    let arg = match one_argument(ctx, args) {
        Ok(arg) => arg,
        Err(code) => return code,
    };
    let rollout = match find(ctx, arg, true) {
        Ok(r) => r,
        Err(e) => {
            ctx.warn(&e);
            return EXIT_ERROR;
        }
    };
    let (verb, done) = match action {
        Action::Pause => ("pausing", "paused"),
        Action::Run => ("resuming", "resumed"),
        Action::Abort => ("aborting", "aborted"),
        Action::Promote => ("promoting", "promoted"),
    };
    let skip_failed = action == Action::Run && ctx.flags.is_given("skip-failed") && ctx.flags.bool("skip-failed");
    let request = fleet_core::schema::RolloutControl { action, skip_failed };
    match ctx.client.control_rollout(&rollout.id, request) {
        Ok(()) => {
            ctx.say(&format!("Rollout {} {done}", rollout.id));
            EXIT_DONE
        }
        Err(e) => {
            ctx.warn(&format!("Error {verb} rollout {}: {e}", rollout.id));
            EXIT_ERROR
        }
    }
}

#[cfg(test)]
mod tests;

//! The unit commands (spec §9.7): `submit`, `load`, `start`, `stop`, `unload`, `destroy`, `restart`, `cat`.
//! Messages are the original's (Appendix A); waiting follows §9.6 with the B3/B4/B5 Recs, and global units are
//! waited for on every machine that reports them (the original never waited for them). `start --replace --rolling`
//! and `restart --rolling` hand over to `rollout`.

use super::commands::DRY_RUN_FLAG;
use super::context::Ctx;
use super::create::{Creator, lazy_create_units};
use super::parallel;
use super::rollout;
use super::stored::unit_is_global;
use super::wait::{wait_for_destroyed, wait_for_global, wait_for_systemd_active, wait_for_unit_states};
use fleet_core::model::JobState;
use fleet_core::schema::Unit;
use fleet_core::unit::name as unitf;

/// The units named by `args` (mangled) that exist, in argument order, from one listing. Unknown names are dropped.
fn find_units(ctx: &mut Ctx<'_>, args: &[String]) -> Result<Vec<Unit>, String> {
    let all = ctx.client.units().map_err(|e| format!("Error retrieving list of units from repository: {e}"))?;
    let mut found: Vec<Unit> = Vec::new();
    for arg in args {
        let name = unitf::mangle(arg);
        if found.iter().any(|u| u.name == name) {
            continue;
        }
        if let Some(u) = all.iter().find(|u| u.name == name) {
            found.push(u.clone());
        }
    }
    Ok(found)
}

fn verb(target: JobState) -> &'static str {
    match target {
        JobState::Launched => "start",
        JobState::Loaded => "load",
        JobState::Inactive => "unload",
    }
}

pub fn submit(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    if args.is_empty() {
        ctx.warn("No units given");
        return 0;
    }
    if ctx.flags.bool(DRY_RUN_FLAG) {
        return super::plan::run(ctx, Creator::Submit, args);
    }
    if let Err(e) = lazy_create_units(ctx, args) {
        ctx.warn(&format!("Error creating units: {e}"));
        return 1;
    }
    0
}

/// Set `target` on every argument unit whose desired state differs. Returns (non-global, global) triggered names.
fn trigger(ctx: &mut Ctx<'_>, args: &[String], target: JobState) -> Result<(Vec<String>, Vec<String>), String> {
    let names = unitf::mangle_unique(args);
    // Look every unit up first (in parallel): a missing unit aborts the command before anything changed.
    let looked_up = parallel::look_up(ctx.client, &names);
    let mut units = Vec::with_capacity(names.len());
    for (name, found) in names.iter().zip(looked_up) {
        match found {
            Ok(Some(u)) => units.push(u),
            Ok(None) => return Err(format!("unable to find unit {name}")),
            Err(e) => return Err(format!("error retrieving unit {name} from registry: {e}")),
        }
    }
    // Units already in the target state are skipped, unless replaced in place (`--keep-machine`): the state came
    // with the new content, and they are waited for all the same.
    let put = units
        .iter()
        .filter(|u| u.desired_state != target.as_str())
        .map(|u| Unit { name: u.name.clone(), desired_state: target.as_str().to_string(), ..Default::default() })
        .collect();
    let results = parallel::write_units(ctx.client, &fleet_core::schema::UnitBatch { put, destroy: Vec::new() });
    if let Some(e) = results.into_iter().find_map(Result::err) {
        return Err(e.to_string());
    }
    let mut plain = Vec::new();
    let mut global = Vec::new();
    for u in units {
        if u.desired_state == target.as_str()
            && !ctx.replaced.contains_key(&u.name)
            && !ctx.created_at_target.contains(&u.name)
        {
            tracing::debug!(unit = %u.name, state = %target, "desired state already set, skipping");
            continue;
        }
        if unit_is_global(&u) {
            ctx.say(&format!("Triggered global unit {} {}", u.name, verb(target)));
            global.push(u.name);
        } else {
            plain.push(u.name);
        }
    }
    Ok((plain, global))
}

/// Wait for global units (unless `--no-block`), one after the other.
fn wait_globals(ctx: &mut Ctx<'_>, names: &[String], target: JobState) -> Result<(), String> {
    let Some(attempts) = ctx.block_attempts() else { return Ok(()) };
    for n in names {
        wait_for_global(ctx, n, target, attempts)?;
    }
    Ok(())
}

/// `load` and `start`: creation step, desired state, waits.
fn load_or_start(ctx: &mut Ctx<'_>, args: &[String], target: JobState) -> i32 {
    if args.is_empty() {
        ctx.warn("No units given");
        return 0;
    }
    if ctx.flags.bool(DRY_RUN_FLAG) {
        let creator = if target == JobState::Launched { Creator::Start } else { Creator::Load };
        return super::plan::run(ctx, creator, args);
    }
    match rollout::rolling(ctx.flags, ctx.command) {
        Ok(true) => return rollout::start_rolling(ctx, args),
        Ok(false) => {}
        Err(e) => {
            ctx.warn(&format!("Error creating units: {e}"));
            return 1;
        }
    }
    if target == JobState::Launched
        && ctx.flags.bool("replace")
        && !ctx.flags.bool("no-restart")
        && super::create::replacement_follows_policy(ctx, args)
    {
        return rollout::start_rolling(ctx, args);
    }
    if let Err(e) = lazy_create_units(ctx, args) {
        ctx.warn(&format!("Error creating units: {e}"));
        return 1;
    }
    let (plain, global) = match trigger(ctx, args, target) {
        Ok(t) => t,
        Err(e) => {
            let what = if target == JobState::Launched { "starting" } else { "loading" };
            ctx.warn(&format!("Error {what} units: {e}"));
            return 1;
        }
    };
    match ctx.block_attempts() {
        None => {
            for n in &plain {
                ctx.say(&format!("Triggered unit {n} {}", verb(target)));
            }
        }
        Some(attempts) => {
            if let Err(e) = wait_for_unit_states(ctx, &plain, target, attempts) {
                ctx.warn(&format!("Error waiting for unit states, exit status: {e}"));
                return 1;
            }
            if target == JobState::Launched {
                if let Err(e) = wait_for_systemd_active(ctx, &plain, attempts) {
                    ctx.warn(&format!("Error waiting for systemd unit states, err: {e}"));
                    return 1;
                }
            }
        }
    }
    if let Err(e) = wait_globals(ctx, &global, target) {
        ctx.warn(&format!("Error waiting for unit states, exit status: {e}"));
        return 1;
    }
    0
}

pub fn load(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    load_or_start(ctx, args, JobState::Loaded)
}

pub fn start(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    load_or_start(ctx, args, JobState::Launched)
}

/// The existing units `args` name (stop, unload, destroy, restart), or the exit code after the original's message:
/// `No units given` / `Units not found in registry` (0), a listing error (1).
fn existing_units(ctx: &mut Ctx<'_>, args: &[String]) -> Result<Vec<Unit>, i32> {
    if args.is_empty() {
        ctx.warn("No units given");
        return Err(0);
    }
    match find_units(ctx, args) {
        Ok(units) if units.is_empty() => {
            ctx.warn("Units not found in registry");
            Err(0)
        }
        Ok(units) => Ok(units),
        Err(e) => {
            ctx.warn(&e);
            Err(1)
        }
    }
}

/// The end of `stop` and `unload`: print `Triggered unit <n> <verb>` (`--no-block`) or wait for `target`, wait for
/// the global units, then report `Successfully <past> units [...]`.
fn finish(ctx: &mut Ctx<'_>, waiting: &[String], globals: &[String], target: JobState, verb: &str, past: &str) -> i32 {
    match ctx.block_attempts() {
        None => {
            for n in waiting {
                ctx.say(&format!("Triggered unit {n} {verb}"));
            }
        }
        Some(attempts) => {
            if let Err(e) = wait_for_unit_states(ctx, waiting, target, attempts) {
                ctx.warn(&format!("Failed to {verb} units {}. err: {e}", fleet_core::go::list(waiting)));
                return 1;
            }
        }
    }
    if let Err(e) = wait_globals(ctx, globals, target) {
        ctx.warn(&format!("Failed to {verb} units {}. err: {e}", fleet_core::go::list(globals)));
        return 1;
    }
    ctx.warn(&format!("Successfully {past} units {}.", fleet_core::go::list(waiting)));
    0
}

pub fn stop(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let units = match existing_units(ctx, args) {
        Ok(units) => units,
        Err(code) => return code,
    };
    let mut stopping = Vec::new();
    let mut globals = Vec::new();
    for u in &units {
        if unit_is_global(u) {
            if let Err(code) = set_target_state(ctx, &u.name, JobState::Loaded) {
                return code;
            }
            ctx.say(&format!("Triggered global unit {} stop", u.name));
            globals.push(u.name.clone());
            continue;
        }
        match u.current_state.as_str() {
            "inactive" => {
                ctx.warn(&format!("Unable to stop unit {} in state inactive", u.name));
                return 1;
            }
            "loaded" => {
                tracing::debug!(unit = %u.name, "unit already loaded, skipping");
                continue;
            }
            _ => {}
        }
        if let Err(code) = set_target_state(ctx, &u.name, JobState::Loaded) {
            return code;
        }
        stopping.push(u.name.clone());
    }
    finish(ctx, &stopping, &globals, JobState::Loaded, "stop", "stopped")
}

/// `stop` and `unload` set a unit's desired state. The original ignored a failure here and went on to report the
/// unit triggered (and, with `--no-block`, "Successfully stopped"): a write the server refused — etcd out of space
/// (`507`), unreachable — would read as done. A refusal ends the command with the server's message and exit 1 (the
/// units before it were triggered, those after it untouched); a unit destroyed since it was listed (`404`) is
/// skipped as the original did.
fn set_target_state(ctx: &mut Ctx<'_>, name: &str, state: JobState) -> Result<(), i32> {
    match ctx.client.set_unit_target_state(name, state.as_str()) {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => {
            tracing::debug!(unit = %name, error = %e, "unit gone before its target state was set");
            Ok(())
        }
        Err(e) => {
            ctx.warn(&format!("Error setting target state for unit {name}: {e}"));
            Err(1)
        }
    }
}

pub fn unload(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let units = match existing_units(ctx, args) {
        Ok(units) => units,
        Err(code) => return code,
    };
    let mut waiting = Vec::new();
    let mut globals = Vec::new();
    for u in &units {
        let global = unit_is_global(u);
        if !global && u.current_state == "inactive" {
            tracing::debug!(unit = %u.name, "unit already inactive, skipping");
            continue;
        }
        if let Err(code) = set_target_state(ctx, &u.name, JobState::Inactive) {
            return code;
        }
        if global {
            ctx.say(&format!("Triggered global unit {} unload", u.name));
            globals.push(u.name.clone());
        } else {
            waiting.push(u.name.clone());
        }
    }
    finish(ctx, &waiting, &globals, JobState::Inactive, "unload", "unloaded")
}

pub fn destroy(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let units = match existing_units(ctx, args) {
        Ok(units) => units,
        Err(code) => return code,
    };
    let mut code = 0;
    let mut destroyed = Vec::new();
    let batch =
        fleet_core::schema::UnitBatch { put: Vec::new(), destroy: units.iter().map(|u| u.name.clone()).collect() };
    let results = parallel::write_units(ctx.client, &batch);
    for (u, result) in units.iter().zip(results) {
        match result {
            Ok(()) => {
                ctx.say(&format!("Destroyed {}", u.name));
                destroyed.push(u.name.clone());
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                ctx.warn(&format!("Error destroying units: {e}"));
                code = 1;
            }
        }
    }
    // B4 Rec: wait (unless --no-block) until the units are gone everywhere.
    if let Some(attempts) = ctx.block_attempts() {
        for e in wait_for_destroyed(ctx, &destroyed, attempts) {
            ctx.warn(&format!("Error destroying units: {e}"));
            code = 1;
        }
    }
    code
}

pub fn restart(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    if args.is_empty() {
        ctx.warn("No units given");
        return 0;
    }
    match rollout::rolling(ctx.flags, ctx.command) {
        Ok(true) => return rollout::restart_rolling(ctx, args),
        Ok(false) => {}
        Err(e) => {
            ctx.warn(&format!("Error restarting units: {e}"));
            return 1;
        }
    }
    let units = match find_units(ctx, args) {
        Ok(u) => u,
        Err(e) => {
            ctx.warn(&e);
            return 1;
        }
    };
    // A launched unit with an update policy restarts as the policy says (a rolling restart), whoever asks.
    let launched = |u: &&Unit| u.desired_state == JobState::Launched.as_str();
    let files: Vec<(String, fleet_core::unit::UnitFile)> = units
        .iter()
        .filter(launched)
        .map(|u| (u.name.clone(), fleet_core::unit::UnitFile::from_options(u.options.clone())))
        .collect();
    if files.iter().any(|(_, f)| super::create::has_policy(f)) {
        return rollout::restart_rolling(ctx, args);
    }
    for (name, file) in &files {
        super::create::hint_all_at_once(ctx, name, file, "restart", "restart --rolling");
    }
    if let Err(e) = lazy_create_units(ctx, args) {
        ctx.warn(&format!("Error creating units: {e}"));
        return 1;
    }
    let attempts = u64::try_from(ctx.flags.int("block-attempts")).unwrap_or(0);
    for u in &units {
        let global = unit_is_global(u);
        let steps: &[JobState] = match (global, u.current_state.as_str(), u.desired_state.as_str()) {
            (true, _, "launched") => &[JobState::Loaded, JobState::Launched],
            (true, _, _) => &[JobState::Launched],
            (false, "inactive", _) => {
                ctx.warn(&format!("Unable to restart unit {} in state inactive", u.name));
                continue;
            }
            (false, "loaded", _) => &[JobState::Launched],
            (false, _, _) => &[JobState::Loaded, JobState::Launched],
        };
        for &step in steps {
            if let Err(e) = ctx.client.set_unit_target_state(&u.name, step.as_str()) {
                ctx.warn(&format!("Error setting target state for unit {}: {e}", u.name));
                return 1;
            }
            let waited = if global {
                wait_for_global(ctx, &u.name, step, attempts)
            } else {
                wait_for_unit_states(ctx, std::slice::from_ref(&u.name), step, attempts)
            };
            if let Err(e) = waited {
                ctx.warn(&format!("Error waiting for unit states, exit status: {e}"));
                return 1;
            }
        }
        tracing::info!("Unit({}) was restarted.", u.name);
    }
    0
}

pub fn cat(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    let Some(format) = super::json::format(ctx) else { return 1 };
    if args.len() != 1 {
        ctx.warn("One unit file must be provided");
        return 1;
    }
    let name = unitf::mangle(&args[0]);
    match ctx.client.unit(&name) {
        Err(e) => {
            ctx.warn(&format!("Error retrieving Unit {name}: {e}"));
            1
        }
        Ok(None) => {
            ctx.warn(&format!("Unit {name} not found"));
            1
        }
        Ok(Some(u)) if format == super::json::Format::Json => {
            super::json::print(ctx, &super::json::unit_file_content(&u));
            0
        }
        Ok(Some(u)) => {
            // The canonical text exactly, no newline added.
            let _ = ctx.out.write_all(super::stored::stored_unit_file(&u).canonical().as_bytes());
            0
        }
    }
}

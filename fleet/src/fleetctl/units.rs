//! The unit commands (spec §9.7): `submit`, `load`, `start`, `stop`, `unload`, `destroy`, `restart`, `cat`.
//! Messages are the original's (Appendix A); waiting follows §9.6 with the B3/B4/B5 Recs, and global units are
//! waited for on every machine that reports them (the original never waited for them).

use super::create::lazy_create_units;
use super::list::unit_is_global;
use super::wait::{wait_for_destroyed, wait_for_global, wait_for_systemd_active, wait_for_unit_states};
use super::Ctx;
use crate::model::JobState;
use crate::schema::Unit;
use crate::unit_compat::{self as unitf, UnitFile};

/// Go's `%v` of a string slice: `[a b c]`.
fn go_list(names: &[String]) -> String {
    format!("[{}]", names.join(" "))
}

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
    if let Err(e) = lazy_create_units(ctx, args) {
        ctx.warn(&format!("Error creating units: {e}"));
        return 1;
    }
    0
}

/// Set `target` on every argument unit whose desired state differs. Returns (non-global, global) triggered names.
fn trigger(ctx: &mut Ctx<'_>, args: &[String], target: JobState) -> Result<(Vec<String>, Vec<String>), String> {
    let mut plain = Vec::new();
    let mut global = Vec::new();
    for arg in args {
        let name = unitf::mangle(arg);
        if plain.contains(&name) || global.contains(&name) {
            continue;
        }
        let u = match ctx.client.unit(&name) {
            Ok(Some(u)) => u,
            Ok(None) => return Err(format!("unable to find unit {name}")),
            Err(e) => return Err(format!("error retrieving unit {name} from registry: {e}")),
        };
        if u.desired_state == target.as_str() {
            tracing::debug!(unit = %name, state = %target, "desired state already set, skipping");
            continue;
        }
        ctx.client.set_unit_target_state(&name, target.as_str()).map_err(|e| e.to_string())?;
        if unit_is_global(&u) {
            ctx.say(&format!("Triggered global unit {name} {}", verb(target)));
            global.push(name);
        } else {
            plain.push(name);
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

pub fn stop(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    if args.is_empty() {
        ctx.warn("No units given");
        return 0;
    }
    let units = match find_units(ctx, args) {
        Ok(u) => u,
        Err(e) => {
            ctx.warn(&e);
            return 1;
        }
    };
    if units.is_empty() {
        ctx.warn("Units not found in registry");
        return 0;
    }
    let mut stopping = Vec::new();
    let mut globals = Vec::new();
    for u in &units {
        if unit_is_global(u) {
            if let Err(e) = ctx.client.set_unit_target_state(&u.name, JobState::Loaded.as_str()) {
                tracing::debug!(unit = %u.name, error = %e, "setting target state failed");
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
        if let Err(e) = ctx.client.set_unit_target_state(&u.name, JobState::Loaded.as_str()) {
            tracing::debug!(unit = %u.name, error = %e, "setting target state failed");
        }
        stopping.push(u.name.clone());
    }
    match ctx.block_attempts() {
        None => {
            for n in &stopping {
                ctx.say(&format!("Triggered unit {n} stop"));
            }
        }
        Some(attempts) => {
            if let Err(e) = wait_for_unit_states(ctx, &stopping, JobState::Loaded, attempts) {
                ctx.warn(&format!("Failed to stop units {}. err: {e}", go_list(&stopping)));
                return 1;
            }
        }
    }
    if let Err(e) = wait_globals(ctx, &globals, JobState::Loaded) {
        ctx.warn(&format!("Failed to stop units {}. err: {e}", go_list(&globals)));
        return 1;
    }
    ctx.warn(&format!("Successfully stopped units {}.", go_list(&stopping)));
    0
}

pub fn unload(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    if args.is_empty() {
        ctx.warn("No units given");
        return 0;
    }
    let units = match find_units(ctx, args) {
        Ok(u) => u,
        Err(e) => {
            ctx.warn(&e);
            return 1;
        }
    };
    if units.is_empty() {
        ctx.warn("Units not found in registry");
        return 0;
    }
    let mut waiting = Vec::new();
    let mut globals = Vec::new();
    for u in &units {
        let global = unit_is_global(u);
        if !global && u.current_state == "inactive" {
            tracing::debug!(unit = %u.name, "unit already inactive, skipping");
            continue;
        }
        if let Err(e) = ctx.client.set_unit_target_state(&u.name, JobState::Inactive.as_str()) {
            tracing::debug!(unit = %u.name, error = %e, "setting target state failed");
        }
        if global {
            ctx.say(&format!("Triggered global unit {} unload", u.name));
            globals.push(u.name.clone());
        } else {
            waiting.push(u.name.clone());
        }
    }
    match ctx.block_attempts() {
        None => {
            for n in &waiting {
                ctx.say(&format!("Triggered unit {n} unload"));
            }
        }
        Some(attempts) => {
            if let Err(e) = wait_for_unit_states(ctx, &waiting, JobState::Inactive, attempts) {
                ctx.warn(&format!("Failed to unload units {}. err: {e}", go_list(&waiting)));
                return 1;
            }
        }
    }
    if let Err(e) = wait_globals(ctx, &globals, JobState::Inactive) {
        ctx.warn(&format!("Failed to unload units {}. err: {e}", go_list(&globals)));
        return 1;
    }
    ctx.warn(&format!("Successfully unloaded units {}.", go_list(&waiting)));
    0
}

pub fn destroy(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    if args.is_empty() {
        ctx.warn("No units given");
        return 0;
    }
    let units = match find_units(ctx, args) {
        Ok(u) => u,
        Err(e) => {
            ctx.warn(&e);
            return 1;
        }
    };
    if units.is_empty() {
        ctx.warn("Units not found in registry");
        return 0;
    }
    let mut code = 0;
    let mut destroyed = Vec::new();
    for u in &units {
        match ctx.client.destroy_unit(&u.name) {
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
        for n in &destroyed {
            if let Err(e) = wait_for_destroyed(ctx, n, attempts) {
                ctx.warn(&format!("Error destroying units: {e}"));
                code = 1;
            }
        }
    }
    code
}

pub fn restart(ctx: &mut Ctx<'_>, args: &[String]) -> i32 {
    if args.is_empty() {
        ctx.warn("No units given");
        return 0;
    }
    let units = match find_units(ctx, args) {
        Ok(u) => u,
        Err(e) => {
            ctx.warn(&e);
            return 1;
        }
    };
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
        Ok(Some(u)) => {
            // The canonical text exactly, no newline added.
            let _ = ctx.out.write_all(UnitFile::from_options(u.options).canonical().as_bytes());
            0
        }
    }
}

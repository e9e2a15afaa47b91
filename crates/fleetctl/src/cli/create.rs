//! The creation step of `submit`/`load`/`start`/`restart` (spec §9.4) and the `--replace` decision (§10.2–§10.3):
//! locate each argument's unit file (file, registry template, local template), decide per argument between create,
//! keep, replace or refuse, create through the client, then wait until the new units are `inactive`.
//!
//! How a unit is replaced ([`replacement_mode`]): like the original, by storing the new content with desired state
//! `inactive` (the unit is unscheduled, then scheduled again by the command's own step, possibly elsewhere); or,
//! with `--keep-machine` on `load`/`start` of a unit that is scheduled, in place: one PUT with the new content *and*
//! the command's desired state, so the unit keeps its machine and that machine's agent stops the old version
//! before it starts the new one. Either way every replaced unit is recorded in [`Ctx::replaced`] so that the
//! command's waits are satisfied only by the new content.
//!
//! `start --replace --rolling` locates the new versions the same way ([`rolling_replacements`]) but sends them all
//! in one rollout request instead (`fleetctl::rollout`).

use std::path::{Path, PathBuf};

use super::context::Ctx;
use super::parallel;
use super::wait::wait_for_unit_states;
use fleet_core::model::JobState;
use fleet_core::schema::{RolloutRequestUnit, Unit};
use fleet_core::unit::name as unitf;
use fleet_core::unit::xfleet;
use fleet_core::unit::{FileError, NameInfo, UnitFile};

/// The command running the creation step (it decides which desired states `--replace` may replace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creator {
    Submit,
    Load,
    Start,
    Restart,
}

impl Creator {
    pub fn of(command: &str) -> Self {
        match command {
            "load" => Creator::Load,
            "start" => Creator::Start,
            "restart" => Creator::Restart,
            _ => Creator::Submit,
        }
    }
}

/// Local content compared with the registry copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    Same,
    Different,
    /// No local content to compare with (message says why).
    Failed(String),
}

/// What `submit`/`load`/`start` do with one argument given the registry's copy (the `--replace` decision table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceDecision {
    /// Not in the registry: create it.
    Create,
    /// In the registry, no `--replace`: leave it (a differing copy was already warned about).
    Keep,
    /// `--replace`, identical content: print `Found same Unit(..) in Registry, nothing to do`.
    KeepSame,
    /// `--replace`, different content, desired state allows it: replace.
    Replace,
    /// `--replace`, different content, desired state does not allow it: warn, leave it.
    RefuseReplace,
    /// `--replace` but nothing local to compare with: abort the command.
    Fail(String),
}

/// How a unit allowed to be replaced is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplacementMode {
    /// The original's for units that are not scheduled (or `submit`): new content with desired state `inactive`,
    /// then the command's own step.
    ThroughInactive,
    /// A scheduled unit, default: new content, this desired state and "reschedule" in one request; the engine
    /// places the new version afresh (it may move). One request, so an interrupted fleetctl leaves the new
    /// version on its way to running, never nothing.
    Rescheduled(JobState),
    /// `--keep-machine`: new content and this desired state in one request; the unit keeps its machine.
    InPlace(JobState),
    /// `--no-restart`: as `InPlace`, and machines keep a running unit's process (the request's `noRestart`).
    NoRestart(JobState),
}

/// The replace-related flags of one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplaceFlags {
    pub creator: Creator,
    pub replace: bool,
    pub keep_machine: bool,
    pub no_restart: bool,
}

/// How `creator` replaces a unit whose desired state is `desired` (§10.3, plus `--keep-machine`). In place only
/// for `load`/`start` with `--keep-machine` of a unit that is `loaded` or `launched` (an `inactive` unit has no
/// machine to keep); `launched` is only kept by `start` (`load --replace` does not replace launched units).
pub fn replacement_mode(flags: ReplaceFlags, desired: Option<JobState>) -> ReplacementMode {
    let ReplaceFlags { creator, keep_machine, no_restart, .. } = flags;
    let state = match creator {
        Creator::Load => JobState::Loaded,
        Creator::Start => JobState::Launched,
        Creator::Submit | Creator::Restart => return ReplacementMode::ThroughInactive,
    };
    match desired {
        // A unit that is not scheduled runs nowhere: there is no process to keep.
        Some(JobState::Loaded | JobState::Launched) if no_restart => ReplacementMode::NoRestart(state),
        Some(JobState::Loaded | JobState::Launched) if keep_machine => ReplacementMode::InPlace(state),
        Some(JobState::Loaded | JobState::Launched) => ReplacementMode::Rescheduled(state),
        _ => ReplacementMode::ThroughInactive,
    }
}

/// Whether `creator --replace` may replace a unit whose desired state is `desired` (§10.2 table).
pub fn replace_allowed(creator: Creator, desired: Option<JobState>) -> bool {
    match creator {
        Creator::Submit => desired == Some(JobState::Inactive),
        Creator::Load => matches!(desired, Some(JobState::Inactive | JobState::Loaded)),
        Creator::Start | Creator::Restart => true,
    }
}

/// The decision table of §10.2: `existing` is the registry unit's desired state and the comparison, or `None`
/// when the unit does not exist.
pub fn decide(creator: Creator, replace: bool, existing: Option<(Option<JobState>, &Comparison)>) -> ReplaceDecision {
    let Some((desired, cmp)) = existing else { return ReplaceDecision::Create };
    if !replace {
        return ReplaceDecision::Keep;
    }
    match cmp {
        Comparison::Failed(e) => ReplaceDecision::Fail(e.clone()),
        Comparison::Same => ReplaceDecision::KeepSame,
        Comparison::Different if replace_allowed(creator, desired) => ReplaceDecision::Replace,
        Comparison::Different => ReplaceDecision::RefuseReplace,
    }
}

/// Go's wording of an I/O error (`read adir.service: is a directory`).
fn read_error(path: &Path, e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error ").next().unwrap_or(&text).to_string();
    let mut chars = text.chars();
    let lower: String = match chars.next() {
        Some(f) => f.to_lowercase().chain(chars).collect(),
        None => text,
    };
    format!("read {}: {lower}", path.display())
}

/// Why a local unit file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReadFailure {
    /// Unreadable or not a unit file: the original's words, printed after `failed getting Unit(<arg>) from file: `.
    Original(String),
    /// A line the API would refuse (an empty section or option name): `<file>:<line>: "<text>": <what>`, a
    /// message of its own.
    Refused(String),
}

impl ReadFailure {
    /// The message, an original one after `context` (`failed getting Unit(x) from file`).
    fn in_context(self, context: impl std::fmt::Display) -> String {
        match self {
            ReadFailure::Original(e) => format!("{context}: {e}"),
            ReadFailure::Refused(e) => e,
        }
    }
}

/// Read and parse a local unit file. `Ok(None)` when there is nothing at `path`.
fn read_unit_file(path: &Path) -> Result<Option<UnitFile>, ReadFailure> {
    if std::fs::metadata(path).is_err() {
        return Ok(None);
    }
    let bytes = std::fs::read(path).map_err(|e| ReadFailure::Original(read_error(path, &e)))?;
    match UnitFile::parse_submitted(&bytes) {
        Ok(file) => Ok(Some(file)),
        Err(FileError::Parse(e)) => Err(ReadFailure::Original(e.to_string())),
        // Named as systemd names a bad line, `file:line: ...`, with the path as it was given.
        Err(FileError::Blank(line)) => Err(ReadFailure::Refused(format!("{}:{line}", path.display()))),
    }
}

fn template_path(path: &Path, template: &str) -> PathBuf {
    path.parent().map(|d| d.join(template)).unwrap_or_else(|| PathBuf::from(template))
}

/// Compare local content for `arg` with the registry copy; prints the "differs" warning unless `replace`.
fn compare(ctx: &mut Ctx<'_>, arg: &str, path: &Path, name: &str, registry: &Unit, replace: bool) -> Comparison {
    let registry_hash = UnitFile::from_options(registry.options.clone()).hash();
    let local = match read_unit_file(path) {
        Ok(Some(local)) => Some(Some(local.hash())),
        // A file the API would refuse never equals the registry's copy; replacing with it names its bad line.
        Err(ReadFailure::Refused(_)) => Some(None),
        Ok(None) | Err(ReadFailure::Original(_)) => None,
    };
    if let Some(local) = local {
        if local == Some(registry_hash) {
            return Comparison::Same;
        }
        if !replace {
            ctx.warn(&format!(
                "WARNING: Unit {name} in registry differs from local unit file {arg}. Add --replace to override."
            ));
        }
        return Comparison::Different;
    }
    let info = NameInfo::parse(name).filter(NameInfo::is_instance);
    let Some(info) = info else {
        return Comparison::Failed(format!("error Unit {arg} does not seem to be a template unit"));
    };
    let tpath = template_path(path, &info.template.clone());
    match read_unit_file(&tpath) {
        Ok(Some(local)) => {
            if local.hash() == registry_hash {
                return Comparison::Same;
            }
            if !replace {
                ctx.warn(&format!(
                    "WARNING: Unit {name} in registry differs from local template unit file {arg}. Add --replace to override."
                ));
            }
            Comparison::Different
        }
        Ok(None) => {
            Comparison::Failed(format!("unable to find local template Unit({}) for Unit({name})", tpath.display()))
        }
        Err(e) => Comparison::Failed(
            e.in_context(format_args!("failed getting template Unit({}) from file", tpath.display())),
        ),
    }
}

/// Content of a unit that does not exist yet (§9.4 steps 3–5).
fn unit_file_for(ctx: &mut Ctx<'_>, arg: &str, path: &Path, name: &str) -> Result<UnitFile, String> {
    unitf::validate_name(name).map_err(|e| e.to_string())?;
    if let Some(uf) =
        read_unit_file(path).map_err(|e| e.in_context(format_args!("failed getting Unit({arg}) from file")))?
    {
        return Ok(uf);
    }
    let Some(info) = NameInfo::parse(name).filter(NameInfo::is_instance) else {
        return Err(format!("unable to find Unit({name}) in Registry or on filesystem"));
    };
    let template = info.template.clone();
    let from_template = |e: String| format!("failed getting Unit({arg}) from template: {e}");
    let template_file = |e: ReadFailure| e.in_context(format_args!("failed getting Unit({arg}) from template"));
    match ctx.registry_template(&template) {
        Ok(Some(t)) => return Ok(UnitFile::from_options(t.options)),
        Ok(None) => {}
        Err(e) => return Err(from_template(format!("error retrieving template Unit({template}) from Registry: {e}"))),
    }
    match read_unit_file(&template_path(path, &template)).map_err(template_file)? {
        Some(uf) => Ok(uf),
        None => Err(from_template(format!("unable to find template Unit({template}) in Registry or on filesystem"))),
    }
}

/// Content a replacement uses: the local file, else the local template (B19 Rec), else the registry template.
fn replacement_for(ctx: &mut Ctx<'_>, arg: &str, path: &Path, name: &str) -> Result<UnitFile, String> {
    match read_unit_file(path) {
        Ok(Some(uf)) => return Ok(uf),
        // The file is there and is refused: the template is no stand-in for it.
        Err(ReadFailure::Refused(e)) => return Err(e),
        Ok(None) | Err(ReadFailure::Original(_)) => {}
    }
    if let Some(info) = NameInfo::parse(name).filter(NameInfo::is_instance) {
        match read_unit_file(&template_path(path, &info.template.clone())) {
            Ok(Some(uf)) => return Ok(uf),
            Err(ReadFailure::Refused(e)) => return Err(e),
            Ok(None) | Err(ReadFailure::Original(_)) => {}
        }
    }
    unit_file_for(ctx, arg, path, name)
}

/// Validate a unit to create (or replace) and build its request; `desired` goes in the same request (else the API
/// makes the unit `inactive`).
fn prepare_unit(
    ctx: &mut Ctx<'_>,
    name: &str,
    uf: UnitFile,
    desired: Option<JobState>,
    mode: Option<ReplacementMode>,
) -> Result<Unit, String> {
    unitf::validate_name(name).map_err(|e| e.to_string())?;
    fleet_core::api_rules::validate_content(&uf).map_err(|e| e.message)?;
    // The original reports only the first unrecognised key (`Job.ValidateRequirements` returns on the first).
    if let Some(key) = xfleet::unrecognized_xfleet_keys(&uf).first() {
        ctx.log(
            "WARN",
            &format!("Unit {name}: unrecognized requirement in [X-Fleet] section: {}", fleet_core::go::quote(key)),
        );
    }
    Ok(Unit {
        name: name.to_string(),
        options: uf.options().to_vec(),
        desired_state: desired.map(|d| d.to_string()).unwrap_or_default(),
        reschedule: matches!(mode, Some(ReplacementMode::Rescheduled(_))),
        no_restart: matches!(mode, Some(ReplacementMode::NoRestart(_))),
        ..Default::default()
    })
}

/// Sends the prepared creations (batched, or in parallel); the first failure in argument order is the error.
fn send_units(ctx: &Ctx<'_>, pending: &mut Vec<Unit>) -> Result<(), String> {
    let batch = fleet_core::schema::UnitBatch { put: std::mem::take(pending), destroy: Vec::new() };
    let results = parallel::write_units(ctx.client, &batch);
    let sent = batch.put;
    for (unit, result) in sent.iter().zip(results) {
        result.map_err(|e| format!("failed creating unit {}: {e}", unit.name))?;
        tracing::debug!(unit = %unit.name, "created unit");
    }
    Ok(())
}

/// One unit argument of a creating command, looked up: its argument, mangled name, file path and what the registry
/// holds under that name (the lookup error already worded for the user).
struct ArgLookup<'a> {
    arg: &'a str,
    name: String,
    path: PathBuf,
    existing: Result<Option<Unit>, String>,
}

/// Looks every unit argument up at once (in parallel), duplicates dropped, in argument order. Lookup errors are
/// kept per argument, so a caller reports one only when it reaches that argument, after acting on the ones before.
fn look_up_args<'a>(ctx: &Ctx<'_>, args: &'a [String]) -> Vec<ArgLookup<'a>> {
    let names: Vec<String> = args.iter().map(|a| unitf::mangle(a)).collect();
    let lookups = parallel::look_up(ctx.client, &names);
    let mut seen = std::collections::HashSet::new();
    args.iter()
        .zip(names)
        .zip(lookups)
        .filter(|((_, name), _)| seen.insert(name.clone()))
        .map(|((arg, name), lookup)| ArgLookup {
            arg,
            path: PathBuf::from(unitf::append_default_type(arg)),
            existing: lookup.map_err(|e| format!("error retrieving Unit({name}) from Registry: {e}")),
            name,
        })
        .collect()
}

/// The creation step for all arguments. Any error aborts (units created before stay created); the caller prints
/// `Error creating units: <err>`.
pub fn lazy_create_units(ctx: &mut Ctx<'_>, args: &[String]) -> Result<(), String> {
    let flags = ReplaceFlags {
        creator: Creator::of(ctx.command),
        replace: ctx.flags.bool("replace"),
        keep_machine: ctx.flags.bool("keep-machine"),
        no_restart: ctx.flags.bool("no-restart"),
    };
    if flags.no_restart && !flags.replace {
        return Err("--no-restart applies only with --replace".into());
    }
    let mut created = Vec::new();
    // `load` and `start` create a new unit with the state they are about to set (one write, not two); the unit is
    // inactive until the engine places it, as one created inactive is.
    let at_creation = match flags.creator {
        Creator::Load => Some(JobState::Loaded),
        Creator::Start => Some(JobState::Launched),
        Creator::Submit | Creator::Restart => None,
    };
    // Every lookup at once; creations are batched and sent in parallel, in argument order, before anything that
    // needs them (an error sends what was decided before it: units created earlier stay created).
    let lookups = look_up_args(ctx, args);
    let mut pending: Vec<Unit> = Vec::new();
    let result: Result<(), String> = (|| {
        for ArgLookup { arg, name, path, existing } in lookups {
            let Some(existing) = existing? else {
                let uf = unit_file_for(ctx, arg, &path, &name)?;
                pending.push(prepare_unit(ctx, &name, uf, at_creation, None)?);
                created.push(name);
                continue;
            };
            replace_existing(ctx, arg, &path, &name, &existing, &mut pending, &mut created, flags)?;
        }
        Ok(())
    })();
    let at_target: Vec<String> = match at_creation {
        Some(_) => pending.iter().filter(|u| created.contains(&u.name)).map(|u| u.name.clone()).collect(),
        None => Vec::new(),
    };
    let global: std::collections::BTreeSet<String> =
        pending.iter().filter(|u| super::stored::unit_is_global(u)).map(|u| u.name.clone()).collect();
    send_units(ctx, &mut pending)?;
    ctx.created_at_target.extend(at_target);
    result?;
    if created.is_empty() {
        return Ok(());
    }
    // Created with their target state, they were inactive when stored (unplaced): said so now, as the wait for
    // `inactive` would have (a global unit's current state reads empty), since by the time a poll looks they may
    // have been placed.
    let (at_target, created): (Vec<String>, Vec<String>) =
        created.into_iter().partition(|name| ctx.created_at_target.contains(name));
    for name in &at_target {
        let state = if global.contains(name) { "" } else { "inactive" };
        ctx.say(&format!("Unit {name} {state}"));
    }
    if created.is_empty() {
        return Ok(());
    }
    // The original waits with the raw --block-attempts value here (0 = no limit), even with --no-block.
    let attempts = u64::try_from(ctx.flags.int("block-attempts")).unwrap_or(0);
    if let Err(e) = wait_for_unit_states(ctx, &created, JobState::Inactive, attempts) {
        ctx.warn(&format!("Error waiting on unit creation: {e}"));
        return Err("One or more errors creating units".into());
    }
    Ok(())
}

/// For `start --replace --rolling`: the new version of each argument's unit, located and validated exactly as
/// `--replace` does (local file, else local template, else registry template). Units whose content is the same are
/// reported as `--replace` reports them (`Found same Unit(..) in Registry, nothing to do`) and left out. A unit that
/// does not exist is an error: a rollout changes running units. Nothing is sent.
pub fn rolling_replacements(ctx: &mut Ctx<'_>, args: &[String]) -> Result<Vec<RolloutRequestUnit>, String> {
    let mut replacements = Vec::new();
    for ArgLookup { arg, name, path, existing } in look_up_args(ctx, args) {
        let name = name.as_str();
        let Some(existing) = existing? else {
            return Err(format!(
                "unit {name} does not exist: a rolling replace changes launched units (start it first)"
            ));
        };
        match compare(ctx, arg, &path, name, &existing, true) {
            Comparison::Same => ctx.say(&format!("Found same Unit({name}) in Registry, nothing to do")),
            Comparison::Failed(e) => return Err(e),
            Comparison::Different => {
                let uf = replacement_for(ctx, arg, &path, name)?;
                let unit = prepare_unit(ctx, name, uf, None, None)?;
                replacements.push(RolloutRequestUnit { name: unit.name, options: unit.options });
            }
        }
    }
    Ok(replacements)
}

/// On stderr, for a global unit without an update policy changed on every machine at once, one line naming the
/// rolling way (`rolling` is the command with `--rolling`). stdout stays the original's.
pub fn hint_all_at_once(ctx: &mut Ctx<'_>, name: &str, file: &fleet_core::unit::UnitFile, what: &str, rolling: &str) {
    if fleet_core::unit::Requirements::of(file, name).global && !has_policy(file) {
        ctx.warn(&format!(
            "hint: this {what} of global unit {name} changes every machine at once; fleetctl {rolling} goes machine by \
             machine (UpdatePolicy=rolling in [X-Fleet] makes that its default)"
        ));
    }
}

/// Whether a change of `file` (the version that governs it) follows its `[X-Fleet] UpdatePolicy=rolling`.
pub fn has_policy(file: &fleet_core::unit::UnitFile) -> bool {
    fleet_core::rollout::policy::UpdatePolicy::of(file).is_some()
}

/// Whether `start --replace` (without `--rolling`) of `args` is a change that the units' own update policy makes a
/// rollout: some argument names a launched unit whose new local version has `[X-Fleet] UpdatePolicy=rolling` (the
/// new version's policy governs). The command then goes as `start --replace --rolling` with the policy's pace. For
/// the others, the global units among them replaced without one get the all-at-once hint on stderr.
pub fn replacement_follows_policy(ctx: &mut Ctx<'_>, args: &[String]) -> bool {
    let mut global_without = Vec::new();
    for ArgLookup { arg, name, path, existing } in look_up_args(ctx, args) {
        let Ok(Some(existing)) = existing else { continue };
        if existing.desired_state != JobState::Launched.as_str() {
            continue;
        }
        let Ok(Some(uf)) = read_unit_file(&path) else { continue };
        let differs = UnitFile::from_options(existing.options.clone()).hash() != uf.hash();
        if !differs {
            continue;
        }
        if has_policy(&uf) {
            return true;
        }
        global_without.push((arg.to_string(), name, uf));
    }
    for (_, name, uf) in global_without {
        hint_all_at_once(ctx, &name, &uf, "replace", "start --replace --rolling");
    }
    false
}

/// What the creation step would store for one argument, decided exactly as [`lazy_create_units`] decides (the same
/// lookups, [`decide`], [`replacement_mode`] and validation), without sending anything (`fleetctl plan`,
/// `--dry-run`).
#[derive(Debug, Clone, PartialEq)]
pub struct Intended {
    pub name: String,
    /// The unit does not exist: it is created with `unit`'s content.
    pub created: bool,
    /// The unit's new content and flags as they would be sent; `None` when the unit is left as it is.
    pub unit: Option<Unit>,
    /// How an existing unit is replaced; `None` when it is created or left as it is.
    pub mode: Option<ReplacementMode>,
}

/// [`Intended`] for every argument (duplicates once, argument order). Messages the command would print (`Found
/// same Unit(..)`, refusals, warnings) go to `ctx` as the command prints them.
pub fn intended_units(ctx: &mut Ctx<'_>, args: &[String], flags: ReplaceFlags) -> Result<Vec<Intended>, String> {
    if flags.no_restart && !flags.replace {
        return Err("--no-restart applies only with --replace".into());
    }
    let mut out = Vec::new();
    for ArgLookup { arg, name, path, existing } in look_up_args(ctx, args) {
        let name = name.as_str();
        let Some(existing) = existing? else {
            let uf = unit_file_for(ctx, arg, &path, name)?;
            let unit = prepare_unit(ctx, name, uf, None, None)?;
            out.push(Intended { name: name.to_string(), created: true, unit: Some(unit), mode: None });
            continue;
        };
        let replacement = replacement_of(ctx, arg, &path, name, &existing, flags)?;
        let (unit, mode) = replacement.map_or((None, None), |(unit, mode)| (Some(unit), Some(mode)));
        let intended = Intended { name: name.to_string(), created: false, unit, mode };
        out.push(intended);
    }
    Ok(out)
}

/// The `--replace` decision for one argument whose unit exists (spec §10.2): the unit to store and how, or `None`
/// when it is left as it is. Messages (`Found same Unit(..)`, a refusal) go to `ctx` as the command prints them.
fn replacement_of(
    ctx: &mut Ctx<'_>,
    arg: &str,
    path: &Path,
    name: &str,
    existing: &Unit,
    flags: ReplaceFlags,
) -> Result<Option<(Unit, ReplacementMode)>, String> {
    let cmp = compare(ctx, arg, path, name, existing, flags.replace);
    let desired = existing.desired_state.parse::<JobState>().ok();
    match decide(flags.creator, flags.replace, Some((desired, &cmp))) {
        ReplaceDecision::Create | ReplaceDecision::Keep => Ok(None),
        ReplaceDecision::KeepSame => {
            ctx.say(&format!("Found same Unit({name}) in Registry, nothing to do"));
            Ok(None)
        }
        ReplaceDecision::RefuseReplace => {
            ctx.warn(&format!(
                "Warning: can not replace Unit({name}) in state '{}', use the appropriate command",
                existing.desired_state
            ));
            Ok(None)
        }
        ReplaceDecision::Fail(e) => Err(e),
        ReplaceDecision::Replace => {
            let uf = replacement_for(ctx, arg, path, name)?;
            let mode = replacement_mode(flags, desired);
            let unit = match mode {
                ReplacementMode::ThroughInactive => prepare_unit(ctx, name, uf, None, None)?,
                ReplacementMode::Rescheduled(state)
                | ReplacementMode::InPlace(state)
                | ReplacementMode::NoRestart(state) => prepare_unit(ctx, name, uf, Some(state), Some(mode))?,
            };
            Ok(Some((unit, mode)))
        }
    }
}

/// [`replacement_of`] for the creating commands: queues the replacement and records the hash it will have.
#[allow(clippy::too_many_arguments)]
fn replace_existing(
    ctx: &mut Ctx<'_>,
    arg: &str,
    path: &Path,
    name: &str,
    existing: &Unit,
    pending: &mut Vec<Unit>,
    created: &mut Vec<String>,
    flags: ReplaceFlags,
) -> Result<(), String> {
    let Some((unit, mode)) = replacement_of(ctx, arg, path, name, existing, flags)? else { return Ok(()) };
    // The hash the registry (and every agent) will give the stored content.
    let hash = UnitFile::from_options(unit.options.clone()).hash().to_hex();
    pending.push(unit);
    tracing::debug!(unit = %name, hash = %&hash[..7], ?mode, "replaced unit");
    ctx.replaced.insert(name.to_string(), hash);
    if mode == ReplacementMode::ThroughInactive {
        created.push(name.to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    const SAME: Comparison = Comparison::Same;
    const DIFF: Comparison = Comparison::Different;

    #[test]
    fn absent_units_are_created_with_or_without_replace() {
        for c in [Creator::Submit, Creator::Load, Creator::Start] {
            assert_eq!(decide(c, false, None), ReplaceDecision::Create);
            assert_eq!(decide(c, true, None), ReplaceDecision::Create);
        }
    }

    #[test]
    fn without_replace_existing_units_are_kept() {
        for c in [Creator::Submit, Creator::Load, Creator::Start] {
            for cmp in [&SAME, &DIFF, &Comparison::Failed("x".into())] {
                assert_eq!(decide(c, false, Some((Some(Launched), cmp))), ReplaceDecision::Keep);
            }
        }
    }

    #[test]
    fn replace_table_of_section_10_3() {
        // (creator, desired state, expected) for differing content.
        let table = [
            (Creator::Submit, Inactive, ReplaceDecision::Replace),
            (Creator::Submit, Loaded, ReplaceDecision::RefuseReplace),
            (Creator::Submit, Launched, ReplaceDecision::RefuseReplace),
            (Creator::Load, Inactive, ReplaceDecision::Replace),
            (Creator::Load, Loaded, ReplaceDecision::Replace),
            (Creator::Load, Launched, ReplaceDecision::RefuseReplace),
            (Creator::Start, Inactive, ReplaceDecision::Replace),
            (Creator::Start, Loaded, ReplaceDecision::Replace),
            (Creator::Start, Launched, ReplaceDecision::Replace),
        ];
        for (c, d, want) in table {
            assert_eq!(decide(c, true, Some((Some(d), &DIFF))), want, "{c:?} {d:?}");
        }
    }

    #[test]
    fn replace_of_identical_content_is_found_same_in_every_state() {
        for c in [Creator::Submit, Creator::Load, Creator::Start] {
            for d in JobState::ALL {
                assert_eq!(decide(c, true, Some((Some(d), &SAME))), ReplaceDecision::KeepSame);
            }
        }
    }

    #[test]
    fn replace_without_local_content_is_fatal() {
        let f = Comparison::Failed("error Unit x.service does not seem to be a template unit".into());
        assert_eq!(
            decide(Creator::Start, true, Some((Some(Launched), &f))),
            ReplaceDecision::Fail("error Unit x.service does not seem to be a template unit".into())
        );
    }

    #[test]
    fn unknown_desired_state_is_only_replaced_by_start() {
        assert_eq!(decide(Creator::Submit, true, Some((None, &DIFF))), ReplaceDecision::RefuseReplace);
        assert_eq!(decide(Creator::Load, true, Some((None, &DIFF))), ReplaceDecision::RefuseReplace);
        assert_eq!(decide(Creator::Start, true, Some((None, &DIFF))), ReplaceDecision::Replace);
    }

    #[test]
    fn keep_machine_replaces_scheduled_units_in_place() {
        use ReplacementMode::*;
        // (creator, keep, desired before, expected)
        let table = [
            (Creator::Start, true, Some(Launched), InPlace(Launched)),
            (Creator::Start, true, Some(Loaded), InPlace(Launched)),
            (Creator::Start, true, Some(Inactive), ThroughInactive),
            (Creator::Start, true, None, ThroughInactive),
            (Creator::Load, true, Some(Loaded), InPlace(Loaded)),
            (Creator::Load, true, Some(Inactive), ThroughInactive),
            (Creator::Submit, true, Some(Inactive), ThroughInactive),
            (Creator::Restart, true, Some(Launched), ThroughInactive),
            (Creator::Start, false, Some(Launched), Rescheduled(Launched)),
            (Creator::Start, false, Some(Loaded), Rescheduled(Launched)),
            (Creator::Start, false, Some(Inactive), ThroughInactive),
            (Creator::Load, false, Some(Loaded), Rescheduled(Loaded)),
        ];
        for (c, keep, d, want) in table {
            let flags = ReplaceFlags { creator: c, replace: true, keep_machine: keep, no_restart: false };
            assert_eq!(replacement_mode(flags, d), want, "{c:?} keep={keep} {d:?}");
        }
    }

    #[test]
    fn no_restart_replaces_scheduled_units_in_place_without_restart() {
        use ReplacementMode::*;
        // (creator, keep, desired before, expected): --no-restart implies --keep-machine.
        let table = [
            (Creator::Start, false, Some(Launched), NoRestart(Launched)),
            (Creator::Start, true, Some(Launched), NoRestart(Launched)),
            (Creator::Start, false, Some(Loaded), NoRestart(Launched)),
            (Creator::Load, false, Some(Loaded), NoRestart(Loaded)),
            // Nothing runs an unscheduled unit: replaced as without the flag.
            (Creator::Start, false, Some(Inactive), ThroughInactive),
            (Creator::Submit, false, Some(Inactive), ThroughInactive),
        ];
        for (c, keep, d, want) in table {
            let flags = ReplaceFlags { creator: c, replace: true, keep_machine: keep, no_restart: true };
            assert_eq!(replacement_mode(flags, d), want, "{c:?} keep={keep} {d:?}");
        }
    }

    /// Issue 37: a line that gives an option an empty name or section is refused naming the file, the line and
    /// its text; the parser's own errors keep the original's wording.
    #[test]
    fn a_refused_line_is_named_by_file_line_and_text() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let refused = |path: &Path| match read_unit_file(path) {
            Err(ReadFailure::Refused(message)) => message,
            other => panic!("{} not refused: {other:?}", path.display()),
        };
        let name = write("name.service", "[Unit]\nDescription=x\n=value\n");
        assert_eq!(refused(&name), format!("{}:3: \"=value\": option has an empty name", name.display()));
        let spaced = write("spaced.service", "[Service]\r\nExecStart=/bin/true\r\n  = value \r\n");
        assert_eq!(
            refused(&spaced),
            format!("{}:3: \"  = value \": option has an empty name", spaced.display()),
            "the line as written, its CR dropped"
        );
        let section = write("section.service", "# comment\n\n[]\nExecStart=/bin/true\n");
        assert_eq!(refused(&section), format!("{}:3: \"[]\": section has an empty name", section.display()));
        let both = write("both.service", "[Unit]\nA=b\n[]\n=x\n");
        assert_eq!(refused(&both), format!("{}:3: \"[]\": section has an empty name", both.display()));
        // A `[]` with no option under it gives the API nothing blank: accepted, as before.
        let bare = write("bare.service", "[Service]\nExecStart=/bin/true\n[]\n");
        assert!(matches!(read_unit_file(&bare), Ok(Some(_))));
        let e = ReadFailure::Refused("bad.service:3: \"=value\": option has an empty name".into());
        assert_eq!(
            e.in_context("failed getting Unit(bad.service) from file"),
            "bad.service:3: \"=value\": option has an empty name"
        );
        let garbage = write("garbage.service", "[Unit\n");
        let original = read_unit_file(&garbage).unwrap_err();
        assert_eq!(
            original.in_context("failed getting Unit(garbage.service) from file"),
            "failed getting Unit(garbage.service) from file: unable to find end of section"
        );
    }

    #[test]
    fn read_errors_read_like_go() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("adir.service");
        std::fs::create_dir(&d).unwrap();
        let err = read_unit_file(&d).unwrap_err();
        assert_eq!(err, ReadFailure::Original(format!("read {}: is a directory", d.display())));
    }
}

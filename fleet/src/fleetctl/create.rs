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

use std::path::{Path, PathBuf};

use super::Ctx;
use super::wait::wait_for_unit_states;
use crate::model::JobState;
use crate::schema::Unit;
use crate::unit::name as unitf;
use crate::unit::xfleet;
use crate::unit::{NameInfo, UnitFile};

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

/// What to do with one argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
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
    /// The original's: new content with desired state `inactive`, then the command's own step (may move).
    ThroughInactive,
    /// `--keep-machine`: new content and this desired state in one request; the unit keeps its machine.
    InPlace(JobState),
}

/// How `creator` replaces a unit whose desired state is `desired` (§10.3, plus `--keep-machine`). In place only
/// for `load`/`start` with `--keep-machine` of a unit that is `loaded` or `launched` (an `inactive` unit has no
/// machine to keep); `launched` is only kept by `start` (`load --replace` does not replace launched units).
pub fn replacement_mode(creator: Creator, keep_machine: bool, desired: Option<JobState>) -> ReplacementMode {
    let state = match creator {
        Creator::Load => JobState::Loaded,
        Creator::Start => JobState::Launched,
        Creator::Submit | Creator::Restart => return ReplacementMode::ThroughInactive,
    };
    match desired {
        Some(JobState::Loaded | JobState::Launched) if keep_machine => ReplacementMode::InPlace(state),
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
pub fn decide(creator: Creator, replace: bool, existing: Option<(Option<JobState>, &Comparison)>) -> Decision {
    let Some((desired, cmp)) = existing else { return Decision::Create };
    if !replace {
        return Decision::Keep;
    }
    match cmp {
        Comparison::Failed(e) => Decision::Fail(e.clone()),
        Comparison::Same => Decision::KeepSame,
        Comparison::Different if replace_allowed(creator, desired) => Decision::Replace,
        Comparison::Different => Decision::RefuseReplace,
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

/// Read and parse a local unit file. `Ok(None)` when there is nothing at `path`.
fn read_unit_file(path: &Path) -> Result<Option<UnitFile>, String> {
    if std::fs::metadata(path).is_err() {
        return Ok(None);
    }
    let bytes = std::fs::read(path).map_err(|e| read_error(path, &e))?;
    UnitFile::parse_bytes(&bytes).map(Some).map_err(|e| e.to_string())
}

fn template_path(path: &Path, template: &str) -> PathBuf {
    path.parent().map(|d| d.join(template)).unwrap_or_else(|| PathBuf::from(template))
}

/// Compare local content for `arg` with the registry copy; prints the "differs" warning unless `replace`.
fn compare(ctx: &mut Ctx<'_>, arg: &str, path: &Path, name: &str, registry: &Unit, replace: bool) -> Comparison {
    let registry_hash = UnitFile::from_options(registry.options.clone()).hash();
    if let Ok(Some(local)) = read_unit_file(path) {
        if local.hash() == registry_hash {
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
        Err(e) => Comparison::Failed(format!("failed getting template Unit({}) from file: {e}", tpath.display())),
    }
}

/// Content of a unit that does not exist yet (§9.4 steps 3–5).
fn unit_file_for(ctx: &mut Ctx<'_>, arg: &str, path: &Path, name: &str) -> Result<UnitFile, String> {
    unitf::validate_name(name).map_err(|e| e.to_string())?;
    if let Some(uf) = read_unit_file(path).map_err(|e| format!("failed getting Unit({arg}) from file: {e}"))? {
        return Ok(uf);
    }
    let Some(info) = NameInfo::parse(name).filter(NameInfo::is_instance) else {
        return Err(format!("unable to find Unit({name}) in Registry or on filesystem"));
    };
    let template = info.template.clone();
    let from_template = |e: String| format!("failed getting Unit({arg}) from template: {e}");
    match ctx.client.unit(&template) {
        Ok(Some(t)) => return Ok(UnitFile::from_options(t.options)),
        Ok(None) => {}
        Err(e) => return Err(from_template(format!("error retrieving template Unit({template}) from Registry: {e}"))),
    }
    match read_unit_file(&template_path(path, &template)).map_err(&from_template)? {
        Some(uf) => Ok(uf),
        None => Err(from_template(format!("unable to find template Unit({template}) in Registry or on filesystem"))),
    }
}

/// Content a replacement uses: the local file, else the local template (B19 Rec), else the registry template.
fn replacement_for(ctx: &mut Ctx<'_>, arg: &str, path: &Path, name: &str) -> Result<UnitFile, String> {
    if let Ok(Some(uf)) = read_unit_file(path) {
        return Ok(uf);
    }
    if let Some(info) = NameInfo::parse(name).filter(NameInfo::is_instance) {
        if let Ok(Some(uf)) = read_unit_file(&template_path(path, &info.template.clone())) {
            return Ok(uf);
        }
    }
    unit_file_for(ctx, arg, path, name)
}

/// Validate and create (or replace) one unit through the client; `desired` goes in the same request (else the
/// API makes the unit `inactive`).
fn create_unit(ctx: &mut Ctx<'_>, name: &str, uf: UnitFile, desired: Option<JobState>) -> Result<(), String> {
    unitf::validate_name(name).map_err(|e| e.to_string())?;
    xfleet::validate_options(&uf).map_err(|e| e.to_string())?;
    // The original reports only the first unrecognised key (`Job.ValidateRequirements` returns on the first).
    if let Some(key) = xfleet::unrecognized_xfleet_keys(&uf).first() {
        ctx.log(
            "WARN",
            &format!("Unit {name}: unrecognized requirement in [X-Fleet] section: {}", unitf::go_quote(key)),
        );
    }
    let unit = Unit {
        name: name.to_string(),
        options: uf.options().to_vec(),
        desired_state: desired.map(|d| d.to_string()).unwrap_or_default(),
        ..Default::default()
    };
    ctx.client.create_unit(&unit).map_err(|e| format!("failed creating unit {name}: {e}"))?;
    tracing::debug!(unit = %name, "created unit");
    Ok(())
}

/// The creation step for all arguments. Any error aborts (units created before stay created); the caller prints
/// `Error creating units: <err>`.
pub fn lazy_create_units(ctx: &mut Ctx<'_>, args: &[String]) -> Result<(), String> {
    let creator = Creator::of(ctx.command);
    let replace = ctx.flags.bool("replace");
    let keep_machine = ctx.flags.bool("keep-machine");
    let mut created = Vec::new();
    for arg in args {
        let path_text = unitf::append_default_type(arg);
        let path = PathBuf::from(&path_text);
        let name = unitf::mangle(arg);
        let existing =
            ctx.client.unit(&name).map_err(|e| format!("error retrieving Unit({name}) from Registry: {e}"))?;
        let Some(existing) = existing else {
            let uf = unit_file_for(ctx, arg, &path, &name)?;
            create_unit(ctx, &name, uf, None)?;
            created.push(name);
            continue;
        };
        let cmp = compare(ctx, arg, &path, &name, &existing, replace);
        let desired = existing.desired_state.parse::<JobState>().ok();
        match decide(creator, replace, Some((desired, &cmp))) {
            Decision::Create | Decision::Keep => {}
            Decision::KeepSame => ctx.say(&format!("Found same Unit({name}) in Registry, nothing to do")),
            Decision::RefuseReplace => ctx.warn(&format!(
                "Warning: can not replace Unit({name}) in state '{}', use the appropriate command",
                existing.desired_state
            )),
            Decision::Fail(e) => return Err(e),
            Decision::Replace => {
                let uf = replacement_for(ctx, arg, &path, &name)?;
                // The hash the registry (and every agent) will give the stored content.
                let hash = UnitFile::from_options(uf.options().to_vec()).hash().to_hex();
                let mode = replacement_mode(creator, keep_machine, desired);
                match mode {
                    ReplacementMode::ThroughInactive => create_unit(ctx, &name, uf, None)?,
                    ReplacementMode::InPlace(state) => create_unit(ctx, &name, uf, Some(state))?,
                }
                tracing::debug!(unit = %name, hash = %&hash[..7], ?mode, "replaced unit");
                ctx.replaced.insert(name.clone(), hash);
                if mode == ReplacementMode::ThroughInactive {
                    created.push(name);
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    const SAME: Comparison = Comparison::Same;
    const DIFF: Comparison = Comparison::Different;

    #[test]
    fn absent_units_are_created_with_or_without_replace() {
        for c in [Creator::Submit, Creator::Load, Creator::Start] {
            assert_eq!(decide(c, false, None), Decision::Create);
            assert_eq!(decide(c, true, None), Decision::Create);
        }
    }

    #[test]
    fn without_replace_existing_units_are_kept() {
        for c in [Creator::Submit, Creator::Load, Creator::Start] {
            for cmp in [&SAME, &DIFF, &Comparison::Failed("x".into())] {
                assert_eq!(decide(c, false, Some((Some(Launched), cmp))), Decision::Keep);
            }
        }
    }

    #[test]
    fn replace_table_of_section_10_3() {
        // (creator, desired state, expected) for differing content.
        let table = [
            (Creator::Submit, Inactive, Decision::Replace),
            (Creator::Submit, Loaded, Decision::RefuseReplace),
            (Creator::Submit, Launched, Decision::RefuseReplace),
            (Creator::Load, Inactive, Decision::Replace),
            (Creator::Load, Loaded, Decision::Replace),
            (Creator::Load, Launched, Decision::RefuseReplace),
            (Creator::Start, Inactive, Decision::Replace),
            (Creator::Start, Loaded, Decision::Replace),
            (Creator::Start, Launched, Decision::Replace),
        ];
        for (c, d, want) in table {
            assert_eq!(decide(c, true, Some((Some(d), &DIFF))), want, "{c:?} {d:?}");
        }
    }

    #[test]
    fn replace_of_identical_content_is_found_same_in_every_state() {
        for c in [Creator::Submit, Creator::Load, Creator::Start] {
            for d in JobState::ALL {
                assert_eq!(decide(c, true, Some((Some(d), &SAME))), Decision::KeepSame);
            }
        }
    }

    #[test]
    fn replace_without_local_content_is_fatal() {
        let f = Comparison::Failed("error Unit x.service does not seem to be a template unit".into());
        assert_eq!(
            decide(Creator::Start, true, Some((Some(Launched), &f))),
            Decision::Fail("error Unit x.service does not seem to be a template unit".into())
        );
    }

    #[test]
    fn unknown_desired_state_is_only_replaced_by_start() {
        assert_eq!(decide(Creator::Submit, true, Some((None, &DIFF))), Decision::RefuseReplace);
        assert_eq!(decide(Creator::Load, true, Some((None, &DIFF))), Decision::RefuseReplace);
        assert_eq!(decide(Creator::Start, true, Some((None, &DIFF))), Decision::Replace);
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
            (Creator::Start, false, Some(Launched), ThroughInactive),
            (Creator::Load, false, Some(Loaded), ThroughInactive),
        ];
        for (c, keep, d, want) in table {
            assert_eq!(replacement_mode(c, keep, d), want, "{c:?} keep={keep} {d:?}");
        }
    }

    #[test]
    fn read_errors_read_like_go() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("adir.service");
        std::fs::create_dir(&d).unwrap();
        let err = read_unit_file(&d).unwrap_err();
        assert_eq!(err, format!("read {}: is a directory", d.display()));
    }
}

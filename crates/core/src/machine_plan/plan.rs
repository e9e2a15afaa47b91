//! What the agent must do so that this machine matches what the registry wants of it: a pure function from the
//! desired units and the machine's actual units to an ordered task list (spec §7.3 with its Recs).
//!
//! Ordering is by task type, then unit name: **Stop < Unload < Load < Update < Reload < Start < ReloadUnit**. The executor waits for
//! every stop job (and for the unit to be inactive) before it goes on, so a replaced unit's old version has run its
//! stop hooks before its file is deleted and before the new version's start is issued (§10.4 Rec). One Reload is
//! planned per batch, and only when unit files are added, removed or changed.
//!
//! A version stored "without restart" ([`Update::InPlace`]) replaces the file in place (Update), reloads systemd
//! and, when the new version has `ExecReload=`, reloads the running unit (ReloadUnit) instead of stopping it: its
//! process keeps running, and what it runs lags the file until a later restart.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::model::JobState;

/// What the registry wants of one unit on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// `inactive` means "not here" (global units keep their desired state even when inactive).
    pub state: JobState,
    /// 40-hex hash of the unit text.
    pub hash: String,
    /// Canonical unit text, written to disk by Load.
    pub text: Arc<str>,
    /// Whether the unit has an `[Install]` section (enabled at load, §4.6).
    pub install: bool,
    /// How a machine holding another version of the unit changes to this one.
    pub update: Update,
    /// A rolling restart's token: restart the unit once unless it was (re)started for this token already.
    pub restart: Option<String>,
}

/// How a machine that holds another version of a unit changes to the desired one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Stop the old version (its stop hooks run), replace the file, start the new version (fleet's default).
    Restart,
    /// Replace the file and reload systemd; a running unit keeps its process and, when `reload` (the new version
    /// has `ExecReload=`), is reloaded (`--no-restart`).
    InPlace { reload: bool },
}

/// What this machine has of one unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actual {
    /// Hash recorded for the unit file in the units directory; `None` = no file.
    pub hash: Option<String>,
    /// What the agent believes it did: `launched` if it started the unit, `loaded` if it loaded or stopped it,
    /// `inactive` when it does not know (e.g. after a fleetd restart).
    pub believed: JobState,
    /// The last rolling restart's token this machine (re)started the unit for.
    pub restarted: Option<String>,
}

impl Default for Actual {
    fn default() -> Self {
        Actual { hash: None, believed: JobState::Inactive, restarted: None }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// Stop the unit and wait for the job and for the unit to be inactive.
    Stop(String),
    /// Stop (wait), disable the runtime link, reset-failed, delete the file.
    Unload(String),
    /// Write the file with this hash's text, link it (and enable it if it has `[Install]`).
    Load(String, String),
    /// Overwrite the file of a loaded unit with this hash's text, keeping the unit running (no stop).
    Update(String, String),
    /// One daemon-reload for the batch.
    Reload,
    /// Start the unit and wait for the job result.
    Start(String),
    /// Reload the running unit (`ExecReload=`) and wait for the job result.
    ReloadUnit(String),
}

impl Task {
    /// Position of the task's type in the plan order.
    fn rank(&self) -> u8 {
        match self {
            Task::Stop(_) => 0,
            Task::Unload(_) => 1,
            Task::Load(..) => 2,
            Task::Update(..) => 3,
            Task::Reload => 4,
            Task::Start(_) => 5,
            Task::ReloadUnit(_) => 6,
        }
    }

    /// Type name as logged (`type=<T>`).
    pub fn kind(&self) -> &'static str {
        match self {
            Task::Stop(_) => "StopUnit",
            Task::Unload(_) => "UnloadUnit",
            Task::Load(..) => "LoadUnit",
            Task::Update(..) => "UpdateUnit",
            Task::Reload => "ReloadUnitFiles",
            Task::Start(_) => "StartUnit",
            Task::ReloadUnit(_) => "ReloadUnit",
        }
    }

    /// The unit the task acts on (`None` for Reload).
    pub fn unit(&self) -> Option<&str> {
        match self {
            Task::Stop(n)
            | Task::Unload(n)
            | Task::Load(n, _)
            | Task::Update(n, _)
            | Task::Start(n)
            | Task::ReloadUnit(n) => Some(n),
            Task::Reload => None,
        }
    }
}

/// Why a task was planned (logged as `reason="<r>"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    NotScheduledHere,
    HashDiffers,
    NotLoaded,
    DesiredLaunched,
    DesiredLoaded,
    UnitFilesChanged,
    ReplacedWithoutRestart,
    RollingRestart,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::NotScheduledHere => "unit loaded but not scheduled here",
            Reason::HashDiffers => "unit loaded but hash differs to expected",
            Reason::NotLoaded => "unit scheduled here but not loaded",
            Reason::DesiredLaunched => "unit currently loaded but desired state is launched",
            Reason::DesiredLoaded => "unit currently launched but desired state is loaded",
            Reason::UnitFilesChanged => "unit files changed",
            Reason::ReplacedWithoutRestart => "unit replaced without restart",
            Reason::RollingRestart => "rolling restart reached this machine",
        })
    }
}

/// A task with the reason it was planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub task: Task,
    pub reason: Reason,
}

/// The ordered tasks that bring `actual` to `desired` (spec §7.3 table).
pub fn plan(desired: &BTreeMap<String, Desired>, actual: &BTreeMap<String, Actual>) -> Vec<Planned> {
    let mut out = Vec::new();
    let mut files_change = false;
    let none = Actual::default();
    let names: BTreeSet<&String> = desired.keys().chain(actual.keys()).collect();
    for name in names {
        let want = desired.get(name).filter(|d| d.state != JobState::Inactive);
        let have = actual.get(name).unwrap_or(&none);
        let mut push = |task: Task, reason: Reason| out.push(Planned { task, reason });
        let Some(want) = want else {
            if have.hash.is_some() {
                push(Task::Unload(name.clone()), Reason::NotScheduledHere);
                files_change = true;
            }
            continue;
        };
        let launch = want.state == JobState::Launched;
        match &have.hash {
            None => {
                push(Task::Load(name.clone(), want.hash.clone()), Reason::NotLoaded);
                files_change = true;
                if launch {
                    push(Task::Start(name.clone()), Reason::DesiredLaunched);
                }
            }
            Some(hash) if *hash != want.hash && want.update != Update::Restart => {
                let Update::InPlace { reload } = want.update else { unreachable!("checked by the guard") };
                push(Task::Update(name.clone(), want.hash.clone()), Reason::ReplacedWithoutRestart);
                files_change = true;
                match (launch, have.believed) {
                    (true, JobState::Launched) if reload => {
                        push(Task::ReloadUnit(name.clone()), Reason::ReplacedWithoutRestart)
                    }
                    (true, JobState::Launched) => {}
                    // Not started by this agent (or not known to be, after a fleetd restart): starting a running
                    // unit is a no-op for systemd, so this adopts it without a restart.
                    (true, _) => push(Task::Start(name.clone()), Reason::DesiredLaunched),
                    (false, JobState::Launched) => push(Task::Stop(name.clone()), Reason::DesiredLoaded),
                    (false, _) => {}
                }
            }
            Some(hash) if *hash != want.hash => {
                if have.believed == JobState::Launched {
                    push(Task::Stop(name.clone()), Reason::HashDiffers);
                }
                push(Task::Unload(name.clone()), Reason::HashDiffers);
                push(Task::Load(name.clone(), want.hash.clone()), Reason::HashDiffers);
                files_change = true;
                if launch {
                    push(Task::Start(name.clone()), Reason::DesiredLaunched);
                }
            }
            Some(_) => match (want.state, have.believed) {
                // Same file already on disk (e.g. after a fleetd restart): re-adopt it; no daemon-reload needed.
                (JobState::Loaded, JobState::Inactive) => {
                    push(Task::Load(name.clone(), want.hash.clone()), Reason::NotLoaded)
                }
                (JobState::Launched, JobState::Inactive) => {
                    push(Task::Load(name.clone(), want.hash.clone()), Reason::NotLoaded);
                    push(Task::Start(name.clone()), Reason::DesiredLaunched);
                }
                (JobState::Launched, JobState::Loaded) => push(Task::Start(name.clone()), Reason::DesiredLaunched),
                (JobState::Loaded, JobState::Launched) => push(Task::Stop(name.clone()), Reason::DesiredLoaded),
                (JobState::Launched, JobState::Launched)
                    if want.restart.is_some() && have.restarted != want.restart =>
                {
                    push(Task::Stop(name.clone()), Reason::RollingRestart);
                    push(Task::Start(name.clone()), Reason::RollingRestart);
                }
                _ => {}
            },
        }
    }
    if files_change {
        out.push(Planned { task: Task::Reload, reason: Reason::UnitFilesChanged });
    }
    // Stable: tasks were generated in name order, so equal types stay in name order.
    out.sort_by_key(|p| p.task.rank());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The logged type name and the unit of each task (the agent's logs, reports and markers read them).
    #[test]
    fn every_task_names_its_kind_and_unit() {
        let n = || "a.service".to_string();
        let table = [
            (Task::Stop(n()), "StopUnit", Some("a.service")),
            (Task::Unload(n()), "UnloadUnit", Some("a.service")),
            (Task::Load(n(), "h".into()), "LoadUnit", Some("a.service")),
            (Task::Update(n(), "h".into()), "UpdateUnit", Some("a.service")),
            (Task::Reload, "ReloadUnitFiles", None),
            (Task::Start(n()), "StartUnit", Some("a.service")),
            (Task::ReloadUnit(n()), "ReloadUnit", Some("a.service")),
        ];
        for (task, kind, unit) in table {
            assert_eq!((task.kind(), task.unit()), (kind, unit), "{task:?}");
        }
    }
    use JobState::{Inactive, Launched, Loaded};

    const HASH_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const HASH_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn a() -> String {
        "a.service".to_string()
    }

    fn want(state: JobState, hash: &str) -> Desired {
        Desired {
            state,
            hash: hash.into(),
            text: Arc::from(""),
            install: false,
            update: Update::Restart,
            restart: None,
        }
    }
    fn launched(hash: &str) -> Desired {
        want(Launched, hash)
    }
    fn loaded(hash: &str) -> Desired {
        want(Loaded, hash)
    }

    fn have(hash: Option<&str>, believed: JobState) -> Actual {
        Actual { hash: hash.map(str::to_string), believed, restarted: None }
    }
    fn running(hash: &str) -> Actual {
        have(Some(hash), Launched)
    }

    fn desired<const N: usize>(units: [(&str, Desired); N]) -> BTreeMap<String, Desired> {
        units.into_iter().map(|(n, d)| (n.to_string(), d)).collect()
    }
    fn actual<const N: usize>(units: [(&str, Actual); N]) -> BTreeMap<String, Actual> {
        units.into_iter().map(|(n, a)| (n.to_string(), a)).collect()
    }

    fn tasks(planned: &[Planned]) -> Vec<Task> {
        planned.iter().map(|p| p.task.clone()).collect()
    }

    fn run(d: &BTreeMap<String, Desired>, a: &BTreeMap<String, Actual>) -> Vec<Task> {
        tasks(&plan(d, a))
    }

    #[test]
    fn replaced_unit_is_stopped_before_the_new_version_starts() {
        let tasks = run(&desired([("a.service", launched(HASH_B))]), &actual([("a.service", running(HASH_A))]));
        assert_eq!(
            tasks,
            [Task::Stop(a()), Task::Unload(a()), Task::Load(a(), HASH_B.into()), Task::Reload, Task::Start(a())]
        );
    }

    fn in_place(state: JobState, hash: &str, reload: bool) -> Desired {
        Desired { update: Update::InPlace { reload }, ..want(state, hash) }
    }

    #[test]
    fn replace_without_restart_updates_the_file_and_keeps_the_process() {
        // (desired, actual, tasks): never a Stop or Unload of a running unit, whatever it believed.
        let rows: Vec<(Desired, Actual, Vec<Task>)> = vec![
            (in_place(Launched, HASH_B, false), running(HASH_A), vec![Task::Update(a(), HASH_B.into()), Task::Reload]),
            (
                in_place(Launched, HASH_B, true),
                running(HASH_A),
                vec![Task::Update(a(), HASH_B.into()), Task::Reload, Task::ReloadUnit(a())],
            ),
            // After a fleetd restart the agent does not know it runs the unit: a start adopts it (no-op if active).
            (
                in_place(Launched, HASH_B, true),
                have(Some(HASH_A), Inactive),
                vec![Task::Update(a(), HASH_B.into()), Task::Reload, Task::Start(a())],
            ),
            (
                in_place(Launched, HASH_B, false),
                have(Some(HASH_A), Loaded),
                vec![Task::Update(a(), HASH_B.into()), Task::Reload, Task::Start(a())],
            ),
            (
                in_place(Loaded, HASH_B, false),
                have(Some(HASH_A), Loaded),
                vec![Task::Update(a(), HASH_B.into()), Task::Reload],
            ),
            // Desired loaded: the unit is stopped as it would be without a replace.
            (
                in_place(Loaded, HASH_B, true),
                running(HASH_A),
                vec![Task::Stop(a()), Task::Update(a(), HASH_B.into()), Task::Reload],
            ),
            // Nothing on disk yet, or the same version: as without the flag.
            (
                in_place(Launched, HASH_B, true),
                Actual::default(),
                vec![Task::Load(a(), HASH_B.into()), Task::Reload, Task::Start(a())],
            ),
            (in_place(Launched, HASH_B, true), running(HASH_B), vec![]),
        ];
        for (i, (d, ac, expected)) in rows.into_iter().enumerate() {
            let got = run(&desired([("a.service", d.clone())]), &actual([("a.service", ac.clone())]));
            assert_eq!(got, expected, "row {i}: desired {d:?}, actual {ac:?}");
        }
    }

    #[test]
    fn a_rolling_restart_token_restarts_a_running_unit_once() {
        let token = |t: &str| Desired { restart: Some(t.into()), ..launched(HASH_A) };
        let restarted = |t: Option<&str>| Actual { restarted: t.map(str::to_string), ..running(HASH_A) };
        let stop_start = vec![Task::Stop(a()), Task::Start(a())];
        assert_eq!(run(&desired([("a.service", token("r1"))]), &actual([("a.service", restarted(None))])), stop_start);
        let none: Vec<Task> = vec![];
        assert_eq!(run(&desired([("a.service", token("r1"))]), &actual([("a.service", restarted(Some("r1")))])), none);
        assert_eq!(
            run(&desired([("a.service", token("r2"))]), &actual([("a.service", restarted(Some("r1")))])),
            stop_start
        );
        // Not running: the token asks for no start of its own.
        let stopped = Actual { restarted: None, ..have(Some(HASH_A), Loaded) };
        let want_loaded = Desired { restart: Some("r1".into()), ..loaded(HASH_A) };
        assert_eq!(run(&desired([("a.service", want_loaded)]), &actual([("a.service", stopped)])), none);
    }

    #[test]
    fn every_row_of_the_task_table() {
        // (desired, actual, tasks) — spec §7.3, one row each.
        let rows: Vec<(Option<Desired>, Option<Actual>, Vec<Task>)> = vec![
            // absent or inactive, not on disk → nothing
            (None, None, vec![]),
            (Some(want(Inactive, HASH_A)), None, vec![]),
            (None, Some(have(None, Loaded)), vec![]),
            // absent or inactive, on disk → unload (+ reload)
            (None, Some(have(Some(HASH_A), Inactive)), vec![Task::Unload(a()), Task::Reload]),
            (None, Some(running(HASH_A)), vec![Task::Unload(a()), Task::Reload]),
            (Some(want(Inactive, HASH_A)), Some(running(HASH_A)), vec![Task::Unload(a()), Task::Reload]),
            // loaded/launched, not on disk → load (+ start)
            (Some(loaded(HASH_A)), None, vec![Task::Load(a(), HASH_A.into()), Task::Reload]),
            (Some(launched(HASH_A)), None, vec![Task::Load(a(), HASH_A.into()), Task::Reload, Task::Start(a())]),
            // on disk, hash differs → (stop) unload, load, reload (+ start)
            (
                Some(loaded(HASH_B)),
                Some(have(Some(HASH_A), Loaded)),
                vec![Task::Unload(a()), Task::Load(a(), HASH_B.into()), Task::Reload],
            ),
            (
                Some(launched(HASH_B)),
                Some(have(Some(HASH_A), Inactive)),
                vec![Task::Unload(a()), Task::Load(a(), HASH_B.into()), Task::Reload, Task::Start(a())],
            ),
            (
                Some(loaded(HASH_B)),
                Some(running(HASH_A)),
                vec![Task::Stop(a()), Task::Unload(a()), Task::Load(a(), HASH_B.into()), Task::Reload],
            ),
            // same as believed, same hash → nothing
            (Some(loaded(HASH_A)), Some(have(Some(HASH_A), Loaded)), vec![]),
            (Some(launched(HASH_A)), Some(running(HASH_A)), vec![]),
            // loaded, believed inactive (fleetd restarted) → re-adopt the identical file, no reload
            (Some(loaded(HASH_A)), Some(have(Some(HASH_A), Inactive)), vec![Task::Load(a(), HASH_A.into())]),
            // launched, believed inactive → load, start (no stop of a running unit)
            (
                Some(launched(HASH_A)),
                Some(have(Some(HASH_A), Inactive)),
                vec![Task::Load(a(), HASH_A.into()), Task::Start(a())],
            ),
            // launched, believed loaded → start
            (Some(launched(HASH_A)), Some(have(Some(HASH_A), Loaded)), vec![Task::Start(a())]),
            // loaded, believed launched → stop
            (Some(loaded(HASH_A)), Some(running(HASH_A)), vec![Task::Stop(a())]),
        ];
        for (i, (d, ac, expected)) in rows.into_iter().enumerate() {
            let d: BTreeMap<String, Desired> = d.map(|d| (a(), d)).into_iter().collect();
            let ac: BTreeMap<String, Actual> = ac.map(|x| (a(), x)).into_iter().collect();
            assert_eq!(run(&d, &ac), expected, "row {i}: desired {d:?} actual {ac:?}");
        }
    }

    #[test]
    fn tasks_are_ordered_by_type_then_name_with_one_reload() {
        let d = desired([
            ("d.service", launched(HASH_A)),
            ("b.service", launched(HASH_B)),
            ("e.service", loaded(HASH_A)),
            ("a.service", launched(HASH_A)),
        ]);
        let ac = actual([
            ("c.service", running(HASH_A)),
            ("b.service", running(HASH_A)),
            ("e.service", running(HASH_A)),
            ("a.service", have(Some(HASH_A), Loaded)),
        ]);
        let n = |s: &str| s.to_string();
        assert_eq!(
            run(&d, &ac),
            [
                Task::Stop(n("b.service")),
                Task::Stop(n("e.service")),
                Task::Unload(n("b.service")),
                Task::Unload(n("c.service")),
                Task::Load(n("b.service"), HASH_B.into()),
                Task::Load(n("d.service"), HASH_A.into()),
                Task::Reload,
                Task::Start(n("a.service")),
                Task::Start(n("b.service")),
                Task::Start(n("d.service")),
            ]
        );
    }

    #[test]
    fn no_reload_when_no_file_changes() {
        let d = desired([("a.service", launched(HASH_A)), ("b.service", loaded(HASH_A))]);
        let ac = actual([("a.service", have(Some(HASH_A), Loaded)), ("b.service", running(HASH_A))]);
        assert_eq!(run(&d, &ac), [Task::Stop("b.service".into()), Task::Start(a())]);
    }

    #[test]
    fn reasons_follow_the_spec_wording() {
        let planned = plan(&desired([("a.service", launched(HASH_B))]), &actual([("a.service", running(HASH_A))]));
        let reasons: Vec<String> = planned.iter().map(|p| p.reason.to_string()).collect();
        assert_eq!(
            reasons,
            [
                "unit loaded but hash differs to expected",
                "unit loaded but hash differs to expected",
                "unit loaded but hash differs to expected",
                "unit files changed",
                "unit currently loaded but desired state is launched",
            ]
        );
        let planned = plan(&desired([]), &actual([("a.service", running(HASH_A))]));
        assert_eq!(planned[0].reason.to_string(), "unit loaded but not scheduled here");
        let planned = plan(&desired([("a.service", loaded(HASH_A))]), &actual([("a.service", running(HASH_A))]));
        assert_eq!(planned[0].reason.to_string(), "unit currently launched but desired state is loaded");
    }

    #[test]
    fn every_stop_and_unload_of_a_unit_precedes_its_load_and_start() {
        // Property over all small combinations: for any unit, no Load/Start comes before its Stop/Unload.
        let states = [None, Some(Inactive), Some(Loaded), Some(Launched)];
        let hashes = [None, Some(HASH_A), Some(HASH_B)];
        for ds in states {
            for dh in [HASH_A, HASH_B] {
                for ah in hashes {
                    for ab in [Inactive, Loaded, Launched] {
                        let d: BTreeMap<_, _> = ds.map(|s| (a(), want(s, dh))).into_iter().collect();
                        let ac = actual([("a.service", have(ah, ab))]);
                        let t = run(&d, &ac);
                        let first_up = t.iter().position(|t| matches!(t, Task::Load(..) | Task::Start(_)));
                        let last_down = t.iter().rposition(|t| matches!(t, Task::Stop(_) | Task::Unload(_)));
                        if let (Some(up), Some(down)) = (first_up, last_down) {
                            assert!(down < up, "{t:?}");
                        }
                        let reloads = t.iter().filter(|t| **t == Task::Reload).count();
                        let changes = t.iter().any(|t| matches!(t, Task::Unload(_)))
                            || t.iter().any(|t| matches!(t, Task::Load(_, h) if Some(h.as_str()) != ah));
                        assert_eq!(reloads, usize::from(changes), "{t:?}");
                    }
                }
            }
        }
    }
}

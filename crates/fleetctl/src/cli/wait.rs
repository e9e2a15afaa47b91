//! Blocking semantics (spec §9.6, with the B3/B4/B5 Recs): attempts of 8 polls 250 ms apart (≈2 s), a limit of
//! N attempts or none, and the waits built on it — unit job states, systemd activity after `start`, global units on
//! every machine that reports them, and destroyed units disappearing.

use std::collections::{BTreeMap, BTreeSet};

use super::context::{Ctx, Timing};
use super::progress::{self, Waiting};
use super::table::location_legend;
use crate::client::StateFilter;
use crate::client::{Client, ClientError};
use fleet_core::model::JobState;
use fleet_core::schema::Unit;
use fleet_core::unit::xfleet::{Candidate, accepted_by_machine};
use fleet_core::unit::{Requirements, UnitFile};

/// Nominal seconds per attempt, used in messages.
const ATTEMPT_SECS: u64 = 2;

/// Poll `check` until it returns true or `attempts` attempts (0 = no limit) have passed. True on success.
pub fn poll(timing: Timing, attempts: u64, mut check: impl FnMut() -> bool) -> bool {
    let mut done = 0u64;
    loop {
        // Check first: a state already reached must not cost the user an interval (the original slept first).
        for _ in 0..timing.polls_per_attempt.max(1) {
            if check() {
                return true;
            }
            if !timing.interval.is_zero() {
                std::thread::sleep(timing.interval);
            }
        }
        done += 1;
        if attempts > 0 && done >= attempts {
            return false;
        }
    }
}

/// What a poll saw of a unit waited for.
enum Seen {
    Reached,
    /// Not yet; where it is (state and machine), empty when unknown.
    NotYet(String),
}

/// `<state>[ on <machine ID prefix>]`: where a unit waited for is, for the progress line.
fn whereabouts(state: &str, machine: &str) -> String {
    let state = if state.is_empty() { "-" } else { state };
    match machine.get(..8) {
        Some(m) => format!("{state} on {m}"),
        None => state.to_string(),
    }
}

/// Whether `name` has reached `target` (current state; desired state for global units). Prints
/// `Unit <name> <currentState>[ on <legend>]` when it has.
fn assert_unit_state(
    ctx: &mut Ctx<'_>,
    name: &str,
    found: Result<Option<Unit>, ClientError>,
    target: JobState,
) -> Seen {
    let u = match found {
        Ok(Some(u)) => u,
        Ok(None) => {
            tracing::debug!(unit = %name, "unit not found while waiting");
            return Seen::NotYet("not found".into());
        }
        Err(e) => {
            tracing::debug!(unit = %name, error = %e, "error retrieving unit while waiting");
            return Seen::NotYet(String::new());
        }
    };
    let global = super::stored::unit_is_global(&u);
    let observed = if global { &u.desired_state } else { &u.current_state };
    if observed != target.as_str() {
        return Seen::NotYet(whereabouts(observed, &u.machine_id));
    }
    if !global && target != JobState::Inactive && !target_runs_replacement(ctx, name, &u.machine_id) {
        return Seen::NotYet(whereabouts("old version", &u.machine_id));
    }
    let mut msg = format!("Unit {name} {}", u.current_state);
    if !u.machine_id.is_empty() {
        let machines = ctx.machines().to_vec();
        if machines.iter().any(|m| m.id == u.machine_id) {
            msg.push_str(&format!(" on {}", location_legend(&u.machine_id, &machines, false)));
        }
    }
    ctx.say(&msg);
    Seen::Reached
}

/// For a unit this command replaced: whether its target machine publishes the new content (the old version's
/// state and launched marker may still say `launched`). True for units that were not replaced.
fn target_runs_replacement(ctx: &Ctx<'_>, name: &str, machine: &str) -> bool {
    let Some(hash) = ctx.replaced.get(name) else { return true };
    let filter = StateFilter { machine_id: Some(machine.to_string()), unit_name: Some(name.to_string()) };
    match ctx.client.unit_states(&filter) {
        Ok(states) => states.iter().any(|s| &s.hash == hash),
        Err(e) => {
            tracing::debug!(unit = %name, error = %e, "error retrieving unit states while waiting");
            false
        }
    }
}

/// Wait until every unit in `names` reports `target`. On timeout prints `Error waiting for units: <err>` and
/// returns the error text.
pub fn wait_for_unit_states(
    ctx: &mut Ctx<'_>,
    names: &[String],
    target: JobState,
    attempts: u64,
) -> Result<(), String> {
    let mut pending: Vec<String> = names.to_vec();
    let timing = ctx.timing;
    let ok = poll(timing, attempts, || {
        let mut waiting = Vec::new();
        let listed = pending.len() >= super::parallel::LIST_LOOKUPS_FROM;
        let mut found = super::parallel::look_up(ctx.client, &pending).into_iter();
        pending.retain(|n| {
            match assert_unit_state(ctx, n, single_for_global(ctx.client, n, found.next(), listed), target) {
                Seen::Reached => false,
                Seen::NotYet(at) => {
                    waiting.push(Waiting { unit: n.clone(), at });
                    true
                }
            }
        });
        let done = names.len() - pending.len();
        let line = progress::line(ctx.command, target.as_str(), done, names.len(), &waiting, ctx.started.elapsed());
        ctx.show_progress(&line);
        pending.is_empty()
    });
    if ok {
        return Ok(());
    }
    let err = format!(
        "timed out waiting for unit {} to report state {target}",
        pending.first().map(String::as_str).unwrap_or("")
    );
    ctx.warn(&format!("Error waiting for units: {err}"));
    Err(err)
}

/// A global unit found in a listing is asked for again: a listing shows a global unit's current state as
/// `inactive`, a single request as empty, and the message printed when it is reached quotes the single request's.
fn single_for_global(
    client: &dyn Client,
    name: &str,
    found: Option<Result<Option<Unit>, ClientError>>,
    listed: bool,
) -> Result<Option<Unit>, ClientError> {
    match found {
        Some(Ok(Some(u))) if !listed || !super::stored::unit_is_global(&u) => Ok(Some(u)),
        Some(Err(e)) => Err(e),
        Some(Ok(None)) => Ok(None),
        _ => client.unit(name),
    }
}

fn runs_active(s: &fleet_core::schema::UnitState) -> bool {
    s.systemd_active_state == "active" && s.systemd_load_state == "loaded"
}

/// After `start`: wait until systemd reports each unit active and loaded — for a replaced unit, its new content
/// (a machine still running the old one does not count). A missing state (404, or an error) counts as "not yet"
/// (B5 Rec). On timeout prints `Error waiting for units: <err>`.
pub fn wait_for_systemd_active(ctx: &mut Ctx<'_>, names: &[String], attempts: u64) -> Result<(), String> {
    let mut pending: Vec<String> = names.to_vec();
    let timing = ctx.timing;
    let client = ctx.client;
    let replaced = ctx.replaced.clone();
    let ok = poll(timing, attempts, || {
        let mut waiting = Vec::new();
        pending.retain(|n| {
            // The state the machine reports (`None`: none yet), and whether it counts.
            let found = match replaced.get(n) {
                None => client.unit_state(n).map(|s| (s.as_ref().is_some_and(runs_active), s)),
                Some(hash) => {
                    let filter = StateFilter { machine_id: None, unit_name: Some(n.clone()) };
                    client.unit_states(&filter).map(|all| {
                        let new = all.iter().find(|s| &s.hash == hash).cloned();
                        (all.iter().any(|s| &s.hash == hash && runs_active(s)), new)
                    })
                }
            };
            let (active, at) = match found {
                Ok((active, state)) => {
                    let at = state.map_or(String::new(), |s| whereabouts(&s.systemd_active_state, &s.machine_id));
                    (active, at)
                }
                Err(e) => {
                    tracing::debug!(unit = %n, error = %e, "error retrieving unit state while waiting");
                    (false, String::new())
                }
            };
            if !active {
                waiting.push(Waiting { unit: n.clone(), at });
            }
            !active
        });
        let done = names.len() - pending.len();
        let line = progress::line(ctx.command, "active", done, names.len(), &waiting, ctx.started.elapsed());
        ctx.show_progress(&line);
        pending.is_empty()
    });
    if ok {
        return Ok(());
    }
    let err = format!(
        "Failed to find an active unit {} within {}s",
        pending.first().map(String::as_str).unwrap_or(""),
        attempts.saturating_mul(ATTEMPT_SECS)
    );
    ctx.warn(&format!("Error waiting for units: {err}"));
    Err(err)
}

/// The machines whose agents hold global unit `name`, by the agents' own rule ([`accepted_by_machine`]: the
/// machine's metadata, then conflicts with what is scheduled there and with other globals) applied to the API's
/// machines and units; `None` when either cannot be read. A cordoned machine is not expected (it takes on no
/// global unit it does not hold; one it holds publishes a state, which the wait counts anyway).
fn expected_machines(client: &dyn Client, name: &str) -> Option<BTreeSet<String>> {
    let machines = client.machines().ok()?;
    let mut units = client.units().ok()?;
    units.retain(|u| u.desired_state.parse::<JobState>().is_ok());
    let requirements: Vec<Requirements> =
        units.iter().map(|u| Requirements::of(&UnitFile::from_options(u.options.clone()), &u.name)).collect();
    let candidates: Vec<Candidate<'_>> = units
        .iter()
        .zip(&requirements)
        .map(|(u, r)| Candidate {
            name: &u.name,
            requirements: r,
            target: (!u.machine_id.is_empty()).then_some(u.machine_id.as_str()),
        })
        .collect();
    Some(
        machines
            .into_iter()
            .filter(|m| !m.cordoned)
            .filter(|m| {
                accepted_by_machine(&candidates, &m.id, &m.metadata).into_iter().any(|i| candidates[i].name == name)
            })
            .map(|m| m.id)
            .collect(),
    )
}

/// Global units (the original never waited for them): wait until every machine expected to hold the unit
/// ([`expected_machines`]) and every machine that publishes a state for it runs the unit's current content in the
/// state `target` asks for — `launched`: active; `loaded`: loaded and inactive or failed; `inactive`: no machine reports
/// it any more. Without the expected set (machines or units unreadable) `launched`/`loaded` need at least one
/// report and every report good.
pub fn wait_for_global(ctx: &mut Ctx<'_>, name: &str, target: JobState, attempts: u64) -> Result<(), String> {
    let hash = match ctx.client.unit(name) {
        Ok(Some(u)) => UnitFile::from_options(u.options).hash().to_hex(),
        _ => String::new(),
    };
    let client = ctx.client;
    let filter = StateFilter { machine_id: None, unit_name: Some(name.to_string()) };
    let mut last = GlobalProgress::default();
    let what = format!("{} {name}", ctx.command);
    let ok = poll(ctx.timing, attempts, || {
        let Ok(states) = client.unit_states(&filter) else { return false };
        if target == JobState::Inactive {
            last = GlobalProgress { good: 0, expected: states.len() };
            let waiting: Vec<Waiting> = states
                .iter()
                .map(|s| Waiting { unit: whereabouts(&s.systemd_active_state, &s.machine_id), at: String::new() })
                .collect();
            let line = progress::line(&what, "machines gone", 0, states.len(), &waiting, ctx.started.elapsed());
            ctx.show_progress(&line);
            return states.is_empty();
        }
        let expected: Vec<String> =
            expected_machines(client, name).map(|m| m.into_iter().collect()).unwrap_or_default();
        let progress = global_progress(&states, &expected, target, &hash);
        last = progress;
        let state = format!("machines {}", target.as_str());
        let line = progress::line(&what, &state, progress.good, progress.expected, &[], ctx.started.elapsed());
        ctx.show_progress(&line);
        progress.good > 0 && progress.good == progress.expected
    });
    if ok {
        return Ok(());
    }
    let err = format!(
        "timed out waiting for global unit {name} to report state {target} on every machine ({} of {} machines)",
        last.good, last.expected
    );
    ctx.warn(&format!("Error waiting for units: {err}"));
    Err(err)
}

/// How far a global unit has come: machines in the wanted state, of the machines waited for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GlobalProgress {
    pub good: usize,
    pub expected: usize,
}

/// The machines waited for are `expected` plus every machine publishing a state; a machine is good when its
/// state shows content `hash` (any content when `hash` is empty) in the state `target` (`launched`/`loaded`)
/// asks for.
pub fn global_progress(
    states: &[fleet_core::schema::UnitState],
    expected: &[String],
    target: JobState,
    hash: &str,
) -> GlobalProgress {
    let good_state = |s: &fleet_core::schema::UnitState| {
        let right_content = hash.is_empty() || s.hash == hash;
        right_content
            && s.systemd_load_state == "loaded"
            && match target {
                JobState::Launched => s.systemd_active_state == "active",
                // Stopped means its stop hooks have run: `deactivating` (ExecStop still running) is not yet.
                _ => fleet_core::model::is_stopped(&s.systemd_active_state),
            }
    };
    let mut machines: std::collections::BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    machines.extend(states.iter().map(|s| s.machine_id.as_str()));
    let good = machines.iter().filter(|m| states.iter().any(|s| s.machine_id == **m && good_state(s))).count();
    GlobalProgress { good, expected: machines.len() }
}

/// Waits until every unit of `names` is gone everywhere: neither listed nor reported by any machine. All are
/// polled together (one listing of units and one of states per poll from [`super::parallel::LIST_LOOKUPS_FROM`]
/// units on, else per unit), so a destroy of many units waits as long as its slowest unit. Returns one error per
/// unit still there after `attempts`, in `names` order.
pub fn wait_for_destroyed(ctx: &mut Ctx<'_>, names: &[String], attempts: u64) -> Vec<String> {
    let client = ctx.client;
    let mut pending: Vec<String> = names.to_vec();
    poll(ctx.timing, attempts, || {
        let left = still_there(client, &pending);
        let mut waiting = Vec::new();
        let mut kept = Vec::new();
        for (name, at) in pending.drain(..).zip(left) {
            if let Some(at) = at {
                waiting.push(Waiting { unit: name.clone(), at });
                kept.push(name);
            }
        }
        pending = kept;
        let line = progress::line(
            "destroy",
            "destroyed",
            names.len() - pending.len(),
            names.len(),
            &waiting,
            ctx.started.elapsed(),
        );
        ctx.show_progress(&line);
        pending.is_empty()
    });
    pending.iter().map(|name| format!("timed out waiting for unit {name} to be destroyed")).collect()
}

/// For each of `names`: `None` when the unit is gone (not listed, no machine reports it), else where it still is
/// (`reported by N machine(s)`, or empty). A failed request counts as "still there".
fn still_there(client: &dyn Client, names: &[String]) -> Vec<Option<String>> {
    let reported = |n: usize| if n > 0 { format!("reported by {n} machine(s)") } else { String::new() };
    if names.len() < super::parallel::LIST_LOOKUPS_FROM {
        return names
            .iter()
            .map(|name| {
                let filter = StateFilter { machine_id: None, unit_name: Some(name.clone()) };
                let states = client.unit_states(&filter);
                let gone = matches!(client.unit(name), Ok(None)) && states.as_ref().is_ok_and(|s| s.is_empty());
                (!gone).then(|| reported(states.map_or(0, |s| s.len())))
            })
            .collect();
    }
    let (Ok(units), Ok(states)) = (client.units(), client.unit_states(&StateFilter::default())) else {
        return names.iter().map(|_| Some(String::new())).collect();
    };
    let listed: BTreeSet<&str> = units.iter().map(|u| u.name.as_str()).collect();
    let mut machines: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &states {
        *machines.entry(s.name.as_str()).or_default() += 1;
    }
    names
        .iter()
        .map(|name| {
            let n = machines.get(name.as_str()).copied().unwrap_or(0);
            (listed.contains(name.as_str()) || n > 0).then(|| reported(n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(machine: &str, hash: &str, active: &str) -> fleet_core::schema::UnitState {
        fleet_core::schema::UnitState {
            hash: hash.into(),
            machine_id: machine.into(),
            name: "g.service".into(),
            systemd_active_state: active.into(),
            systemd_load_state: "loaded".into(),
            systemd_sub_state: String::new(),
            machine_presence: String::new(),
            health: None,
            running_hash: String::new(),
        }
    }

    #[test]
    fn global_wait_counts_machines_that_should_run_the_unit() {
        let all = ["m1".to_string(), "m2".to_string(), "m3".to_string()];
        let p = |states: &[fleet_core::schema::UnitState], expected: &[String]| {
            let g = global_progress(states, expected, JobState::Launched, "new");
            (g.good, g.expected)
        };
        // One machine already runs the new version, the others have unloaded the old one: not done.
        assert_eq!(p(&[state("m1", "new", "active")], &all), (1, 3));
        // The old version still runs somewhere: not done.
        assert_eq!(
            p(&[state("m1", "new", "active"), state("m2", "old", "active"), state("m3", "new", "active")], &all),
            (2, 3)
        );
        assert_eq!(
            p(&[state("m1", "new", "active"), state("m2", "new", "active"), state("m3", "new", "active")], &all),
            (3, 3)
        );
        // Nothing known about which machines should run it: every reporting machine.
        assert_eq!(p(&[state("m1", "new", "active"), state("m2", "new", "activating")], &[]), (1, 2));
    }

    #[test]
    fn a_global_unit_is_stopped_only_once_inactive_or_failed_everywhere() {
        let all = ["m1".to_string(), "m2".to_string()];
        let stopped = |states: &[fleet_core::schema::UnitState]| {
            let g = global_progress(states, &all, JobState::Loaded, "");
            (g.good, g.expected)
        };
        // Its stop hooks are still running on m2.
        assert_eq!(stopped(&[state("m1", "h", "inactive"), state("m2", "h", "deactivating")]), (1, 2));
        assert_eq!(stopped(&[state("m1", "h", "inactive"), state("m2", "h", "failed")]), (2, 2));
    }

    #[test]
    fn poll_counts_attempts_of_eight_polls() {
        let mut n = 0;
        assert!(!poll(Timing::instant(), 3, || {
            n += 1;
            false
        }));
        assert_eq!(n, 24);
        let mut m = 0;
        assert!(poll(Timing::instant(), 0, || {
            m += 1;
            m == 100
        }));
    }
}

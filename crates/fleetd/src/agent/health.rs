//! Health check status rules (issue 34), pure: what this machine publishes as a checked unit's `health`, from what
//! the publishing rounds see of the unit, the agent's own (re)starts of it, and the verdicts of finished checks.
//! No processes, clocks or systemd here: the shell (`checks.rs`) runs the checks and feeds this.
//!
//! The rules:
//! * `unknown` whenever the unit is not active, and from every (re)start of it until a check that *started after*
//!   it became active again finishes. A (re)start is seen as: the unit leaving `active` in a round; the version it
//!   runs (hash), systemd's restart counter or the time it entered `active` (`ActiveEnterTimestampMonotonic`, as
//!   systemd's signals carry it) changing while it stays active; the agent's own start of it
//!   ([`Tracker::restarted`]); or a check that finds the unit entered `active` after the check began ([`verdict`]:
//!   the same timestamp read from systemd after the check, which catches a restart between two rounds that both saw
//!   the unit active even when no signal told).
//! * `healthy` / `unhealthy` after a check of the current run exited 0 / anything else (or timed out, or could not
//!   run).
//! * Each event of a (re)start begins a new *epoch*; a verdict of a check begun in an earlier epoch is dropped.
//! * `sinceMs` is when the status last changed; `output` is the check's last line *when the status changed*: a
//!   steady status with a new line is no change, so a steady check costs no registry write.

use std::collections::BTreeMap;

use fleet_core::model::{Health, HealthStatus};
use fleet_systemd::Activation;

/// What a publishing round saw of a checked unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen<'a> {
    /// systemd's `ActiveState` is `active`.
    pub active: bool,
    /// The version the machine publishes for it.
    pub hash: &'a str,
    /// systemd's restart counter (`NRestarts`), when published.
    pub restarts: Option<u32>,
    /// When the unit last entered `active` (systemd's `ActiveEnterTimestampMonotonic`), when a signal told.
    pub entered: Option<u64>,
}

/// What the shell must do about a unit's checks after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// (Re)start checking now, tagging results with this epoch (any earlier checking of the unit ends).
    Start {
        epoch: u64,
    },
    /// Stop checking.
    Stop,
}

/// How a check run ended, before it is judged against the unit's activation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// When the check began, µs of `CLOCK_MONOTONIC` (the clock of systemd's activation times).
    pub began_us: u64,
    /// Exited 0 within its timeout.
    pub passed: bool,
    /// Its last non-empty output line, or why it failed.
    pub output: String,
}

/// What a finished check says about the unit's current run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Healthy(String),
    Unhealthy(String),
    /// The unit entered `active` after the check began: the check saw an earlier run.
    Restarted,
    /// The unit was not active when the check ended.
    NotActive,
    /// Whether the unit restarted could not be read from systemd: the verdict is dropped.
    Unverified(String),
}

/// Judges a finished check by the unit's activation read *after* it finished (`activation`): it counts only if
/// the unit is still active and has been since before the check began.
pub fn verdict<E: std::fmt::Display>(run: Finished, activation: Result<Activation, E>) -> Verdict {
    match activation {
        Ok(Activation::Since(entered)) if entered > run.began_us => Verdict::Restarted,
        Ok(Activation::NotActive) => Verdict::NotActive,
        Ok(Activation::Since(_) | Activation::Untold) if run.passed => Verdict::Healthy(run.output),
        Ok(Activation::Since(_) | Activation::Untold) => Verdict::Unhealthy(run.output),
        Err(e) => Verdict::Unverified(e.to_string()),
    }
}

/// One checked unit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unit {
    health: Health,
    /// The epoch whose checks count; 0 while not checking (the unit is not active).
    epoch: u64,
    /// The run being checked: its hash and restart counter as a round last saw them.
    run: Option<(String, Option<u32>)>,
    /// When the run being checked entered `active`, once a round was told.
    entered: Option<u64>,
}

/// The health of every checked unit on this machine (units whose current version has a check).
#[derive(Debug, Default)]
pub struct Tracker {
    units: BTreeMap<String, Unit>,
    last_epoch: u64,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// A round saw `unit` (whose version has a check) as `seen`.
    pub fn observe(&mut self, unit: &str, seen: Seen<'_>, now_ms: u64) -> Action {
        let entry = self.units.entry(unit.to_string()).or_insert_with(|| Unit {
            health: Health { status: HealthStatus::Unknown, since_ms: now_ms, output: String::new() },
            epoch: 0,
            run: None,
            entered: None,
        });
        if !seen.active {
            let was_checking = entry.epoch != 0;
            entry.epoch = 0;
            entry.run = None;
            entry.entered = None;
            set(&mut entry.health, HealthStatus::Unknown, "", now_ms);
            return if was_checking { Action::Stop } else { Action::Nothing };
        }
        let run = (seen.hash.to_string(), seen.restarts);
        // A time first told for the run being checked is that run's; another time is another run.
        let reentered = matches!((entry.entered, seen.entered), (Some(was), Some(is)) if was != is);
        if entry.epoch != 0 && entry.run.as_ref() == Some(&run) && !reentered {
            entry.entered = entry.entered.or(seen.entered);
            return Action::Nothing;
        }
        // Newly active, another version, or (re)started since: systemd's `Restart=` moves the counter, any start
        // the activation time.
        self.last_epoch += 1;
        entry.epoch = self.last_epoch;
        entry.run = Some(run);
        entry.entered = seen.entered;
        set(&mut entry.health, HealthStatus::Unknown, "", now_ms);
        Action::Start { epoch: entry.epoch }
    }

    /// The agent (re)started `unit` itself (a rolling restart, a replace): whatever the rounds saw, its earlier
    /// verdicts no longer count.
    pub fn restarted(&mut self, unit: &str, now_ms: u64) -> Action {
        let Some(entry) = self.units.get_mut(unit) else { return Action::Nothing };
        set(&mut entry.health, HealthStatus::Unknown, "", now_ms);
        if entry.epoch == 0 {
            return Action::Nothing;
        }
        self.last_epoch += 1;
        entry.epoch = self.last_epoch;
        Action::Start { epoch: entry.epoch }
    }

    /// A check of `unit` begun in `epoch` ended with `verdict`; true if the status changed.
    pub fn result(&mut self, unit: &str, epoch: u64, verdict: Verdict, now_ms: u64) -> bool {
        let Some(entry) = self.units.get_mut(unit).filter(|u| u.epoch != 0 && u.epoch == epoch) else {
            return false;
        };
        match verdict {
            Verdict::Healthy(output) => set(&mut entry.health, HealthStatus::Healthy, &output, now_ms),
            Verdict::Unhealthy(output) => set(&mut entry.health, HealthStatus::Unhealthy, &output, now_ms),
            Verdict::Restarted | Verdict::NotActive => set(&mut entry.health, HealthStatus::Unknown, "", now_ms),
            Verdict::Unverified(_) => false,
        }
    }

    /// Takes `health` as `unit`'s if its status is the current one (the same status published by an earlier fleetd
    /// process keeps its `sinceMs` and output).
    pub fn keep(&mut self, unit: &str, health: Health) {
        if let Some(entry) = self.units.get_mut(unit).filter(|u| u.health.status == health.status) {
            entry.health = health;
        }
    }

    /// `unit` is no longer checked here (unloaded, or its version has no check); true if it was.
    pub fn forget(&mut self, unit: &str) -> bool {
        self.units.remove(unit).is_some()
    }

    /// What to publish as `unit`'s health: `None` for a unit without a check.
    pub fn health(&self, unit: &str) -> Option<&Health> {
        self.units.get(unit).map(|u| &u.health)
    }

    /// The epoch whose checks count for `unit` (0 while not checking).
    pub fn epoch(&self, unit: &str) -> u64 {
        self.units.get(unit).map_or(0, |u| u.epoch)
    }

    /// The checked units.
    pub fn units(&self) -> impl Iterator<Item = &str> {
        self.units.keys().map(String::as_str)
    }
}

/// Sets the status; the output and time change with it only. True if the status changed.
fn set(health: &mut Health, status: HealthStatus, output: &str, now_ms: u64) -> bool {
    if health.status == status {
        return false;
    }
    *health = Health { status, since_ms: now_ms, output: output.to_string() };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "web.service";

    fn active(hash: &str, restarts: u32) -> Seen<'_> {
        Seen { active: true, hash, restarts: Some(restarts), entered: None }
    }

    fn down() -> Seen<'static> {
        Seen { active: false, hash: "h1", restarts: None, entered: None }
    }

    fn status(t: &Tracker) -> HealthStatus {
        t.health(U).map_or_else(|| panic!("{U} is not tracked"), |h| h.status)
    }

    fn passed(began_us: u64) -> Finished {
        Finished { began_us, passed: true, output: "ok".into() }
    }

    fn judged(run: Finished, activation: Activation) -> Verdict {
        verdict::<String>(run, Ok(activation))
    }

    /// Starts tracking an active unit and returns its epoch.
    fn started(t: &mut Tracker) -> u64 {
        match t.observe(U, active("h1", 0), 1_000) {
            Action::Start { epoch } => epoch,
            other => panic!("an active unit is checked at once, got {other:?}"),
        }
    }

    #[test]
    fn an_active_unit_is_unknown_until_its_first_check_passes() {
        let mut t = Tracker::new();
        let epoch = started(&mut t);
        assert_eq!(status(&t), HealthStatus::Unknown);
        assert_eq!(t.observe(U, active("h1", 0), 1_500), Action::Nothing, "the same run is checked on");
        assert!(t.result(U, epoch, judged(passed(10), Activation::Since(5)), 2_000));
        let h = t.health(U).unwrap();
        assert_eq!((h.status, h.since_ms, h.output.as_str()), (HealthStatus::Healthy, 2_000, "ok"));
    }

    #[test]
    fn a_steady_status_keeps_its_time_and_output() {
        let mut t = Tracker::new();
        let epoch = started(&mut t);
        assert!(t.result(U, epoch, Verdict::Unhealthy("down 1".into()), 2_000));
        assert!(!t.result(U, epoch, Verdict::Unhealthy("down 2".into()), 3_000), "same status: nothing to publish");
        let h = t.health(U).unwrap();
        assert_eq!((h.since_ms, h.output.as_str()), (2_000, "down 1"));
    }

    #[test]
    fn leaving_active_is_unknown_and_stops_checking() {
        let mut t = Tracker::new();
        let epoch = started(&mut t);
        t.result(U, epoch, Verdict::Healthy(String::new()), 2_000);
        assert_eq!(t.observe(U, down(), 3_000), Action::Stop);
        assert_eq!(status(&t), HealthStatus::Unknown);
        assert!(!t.result(U, epoch, Verdict::Healthy(String::new()), 3_500), "a check of the stopped run is dropped");
        assert_eq!(status(&t), HealthStatus::Unknown);
        assert_eq!(t.observe(U, down(), 4_000), Action::Nothing);
    }

    #[test]
    fn a_new_version_or_a_moved_restart_counter_is_a_new_run() {
        let mut t = Tracker::new();
        let first = started(&mut t);
        t.result(U, first, Verdict::Healthy(String::new()), 2_000);
        let Action::Start { epoch: second } = t.observe(U, active("h1", 1), 3_000) else {
            panic!("systemd restarted it (Restart=): check again")
        };
        assert_eq!(status(&t), HealthStatus::Unknown);
        assert!(!t.result(U, first, Verdict::Healthy(String::new()), 3_100), "the old run's verdict is dropped");
        t.result(U, second, Verdict::Healthy(String::new()), 3_200);
        assert!(matches!(t.observe(U, active("h2", 1), 4_000), Action::Start { .. }), "replaced in place");
        assert_eq!(status(&t), HealthStatus::Unknown);
    }

    #[test]
    fn the_agents_own_restart_resets_a_healthy_unit() {
        let mut t = Tracker::new();
        let first = started(&mut t);
        t.result(U, first, Verdict::Healthy(String::new()), 2_000);
        let Action::Start { epoch: second } = t.restarted(U, 3_000) else { panic!("checks start over") };
        assert_eq!(status(&t), HealthStatus::Unknown);
        assert!(!t.result(U, first, Verdict::Healthy(String::new()), 3_100), "begun before the restart");
        assert!(t.result(U, second, Verdict::Healthy(String::new()), 3_200));
        assert_eq!(t.restarted("other.service", 3_300), Action::Nothing, "units without a check are not tracked");
    }

    /// The race: a restart between two publishing rounds that both see the unit active (same hash, same counter: a
    /// stop and start by request resets nothing a round sees). A check that began before the restart and passes
    /// after it must not make the new run healthy; the next check, begun after, does.
    #[test]
    fn a_restart_between_two_rounds_that_both_see_active_is_never_healthy_from_an_older_check() {
        let mut t = Tracker::new();
        let epoch = started(&mut t);
        // Run 1 entered active at 5 µs; a check begun at 10 µs passes: healthy.
        assert!(t.result(U, epoch, judged(passed(10), Activation::Since(5)), 2_000));
        assert_eq!(status(&t), HealthStatus::Healthy);
        // A check begins at 100 µs; the unit restarts at 150 µs (run 2); the check passes at 200 µs.
        assert_eq!(t.observe(U, active("h1", 0), 2_100), Action::Nothing, "the round before: active");
        let late = judged(passed(100), Activation::Since(150));
        assert_eq!(late, Verdict::Restarted);
        assert!(t.result(U, epoch, late, 2_200), "the restart is noticed");
        assert_eq!(status(&t), HealthStatus::Unknown, "never healthy from a check of the earlier run");
        assert_eq!(t.observe(U, active("h1", 0), 2_300), Action::Nothing, "the round after: active again");
        assert_eq!(status(&t), HealthStatus::Unknown);
        // The next check began after run 2 became active: it counts.
        assert!(t.result(U, epoch, judged(passed(300), Activation::Since(150)), 2_400));
        assert_eq!(status(&t), HealthStatus::Healthy);
    }

    /// The same race as seen by the rounds when systemd's signals told the activation times: the round after the
    /// restart sees a new one and starts over at once.
    #[test]
    fn a_new_activation_time_between_two_rounds_is_a_restart() {
        let mut t = Tracker::new();
        let at = |entered: Option<u64>| Seen { active: true, hash: "h1", restarts: Some(0), entered };
        let Action::Start { epoch } = t.observe(U, at(None), 1_000) else { panic!("checked at once") };
        assert_eq!(t.observe(U, at(Some(5)), 1_100), Action::Nothing, "the first time told is the same run's");
        assert!(t.result(U, epoch, Verdict::Healthy(String::new()), 1_200));
        assert_eq!(t.observe(U, at(Some(5)), 1_300), Action::Nothing);
        let Action::Start { epoch: next } = t.observe(U, at(Some(150)), 1_400) else {
            panic!("entered active again: a new run")
        };
        assert_eq!(status(&t), HealthStatus::Unknown);
        assert!(!t.result(U, epoch, Verdict::Healthy(String::new()), 1_500), "a check of the earlier run is dropped");
        assert!(t.result(U, next, Verdict::Healthy(String::new()), 1_600));
    }

    #[test]
    fn a_failed_check_of_an_earlier_run_does_not_make_the_new_run_unhealthy() {
        let failed = Finished { began_us: 100, passed: false, output: "refused".into() };
        assert_eq!(judged(failed.clone(), Activation::Since(150)), Verdict::Restarted);
        assert_eq!(judged(failed.clone(), Activation::Since(50)), Verdict::Unhealthy("refused".into()));
        assert_eq!(judged(failed, Activation::NotActive), Verdict::NotActive);
    }

    #[test]
    fn verdicts_without_activation_times_trust_the_epochs_and_unreadable_ones_are_dropped() {
        assert_eq!(judged(passed(100), Activation::Untold), Verdict::Healthy("ok".into()));
        assert_eq!(judged(passed(100), Activation::Since(100)), Verdict::Healthy("ok".into()), "began as it entered");
        let unread = verdict(passed(100), Err("GetUnit failed"));
        assert_eq!(unread, Verdict::Unverified("GetUnit failed".into()));
        let mut t = Tracker::new();
        let epoch = started(&mut t);
        assert!(!t.result(U, epoch, unread, 2_000));
        assert_eq!(status(&t), HealthStatus::Unknown);
    }

    #[test]
    fn a_status_published_before_is_kept_with_its_time_only_when_it_is_the_current_one() {
        let mut t = Tracker::new();
        let epoch = started(&mut t);
        let before = Health { status: HealthStatus::Healthy, since_ms: 7, output: "ok then".into() };
        t.keep(U, before.clone());
        assert_eq!(status(&t), HealthStatus::Unknown, "unknown now: the earlier healthy is not taken");
        t.result(U, epoch, Verdict::Healthy("ok now".into()), 2_000);
        t.keep(U, before.clone());
        assert_eq!(t.health(U), Some(&before));
    }

    #[test]
    fn an_inactive_checked_unit_is_published_unknown_and_a_forgotten_one_not_at_all() {
        let mut t = Tracker::new();
        assert_eq!(t.observe(U, down(), 1_000), Action::Nothing, "nothing to run while inactive");
        assert_eq!(t.health(U).map(|h| h.status), Some(HealthStatus::Unknown));
        assert_eq!(t.epoch(U), 0);
        assert!(t.forget(U));
        assert_eq!(t.health(U), None);
        assert!(!t.forget(U));
    }
}

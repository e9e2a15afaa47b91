//! The at-most-once fence (issue 14 item 2; docs/at-most-once.md): while this machine cannot prove its presence,
//! its `AtMostOnce=true` units are stopped and none is started.
//!
//! [`FenceLoop`] runs beside the reconcile and publish loops, on its own `Systemd` handle, so a long plan never
//! delays it. It follows the presence lease's `alive_until` (the registry's `LeaseKeeper`) and, at
//! [`at_most_once::stop_deadline`] by this machine's monotonic clock — or at once when the lease is lost — marks
//! the presence *in doubt*, stops every at-most-once unit with a file in the units directory (their `[X-Fleet]`
//! read from the files themselves, so units adopted from an earlier process count too) and then, while in doubt,
//! stops any of them that systemd reports starting again (a start a plan issued just before the doubt began).
//! The reconcile loop meanwhile plans at-most-once units as loaded only ([`hold_while_in_doubt`]), and learns of
//! the units the fence stopped ([`Fence::take_stopped`]) so that it starts them again when the doubt ends — a
//! renewal went through, so etcd never expired the presence and the engine never placed them elsewhere — if they
//! are still scheduled here. A new presence lease after a lost one starts a new run: the units run again only
//! where the registry, read after the new registration, schedules them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use fleet_core::at_most_once::{presence_in_doubt, stop_deadline};
use fleet_core::machine_plan::desired::ClusterUnit;
use fleet_core::machine_plan::plan::Desired;
use fleet_core::model::{JobState, is_stopped};
use fleet_core::unit::{Requirements, UnitFile};
use fleet_systemd::{SystemdOps, UnitChange, UnitChanges};

/// What the fence shares with the reconcile loop; kept by the agent across runs.
#[derive(Debug, Default)]
pub struct Fence {
    in_doubt: AtomicBool,
    stopped: Mutex<BTreeSet<String>>,
    /// Wakes the reconcile loop when the doubt ends.
    cleared: Notify,
}

impl Fence {
    /// Whether this machine's presence is in doubt now (at-most-once units must not run).
    pub fn in_doubt(&self) -> bool {
        self.in_doubt.load(Ordering::SeqCst)
    }

    /// The units the fence stopped since the last call (the executor then no longer believes them launched).
    pub fn take_stopped(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.stopped.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Resolves when the doubt ends.
    pub async fn cleared(&self) {
        self.cleared.notified().await
    }

    fn set_in_doubt(&self, doubt: bool) -> bool {
        self.in_doubt.swap(doubt, Ordering::SeqCst) != doubt
    }

    fn note_stopped(&self, names: impl IntoIterator<Item = String>) {
        self.stopped.lock().unwrap_or_else(|e| e.into_inner()).extend(names);
    }
}

/// While the presence is in doubt: every at-most-once unit wanted launched here is wanted loaded only, so the plan
/// stops it and starts none. Other units are untouched.
pub fn hold_while_in_doubt(desired: &mut BTreeMap<String, Desired>, units: &[ClusterUnit]) {
    for unit in units.iter().filter(|u| u.requirements.at_most_once) {
        if let Some(d) = desired.get_mut(&unit.name)
            && d.state == JobState::Launched
        {
            d.state = JobState::Loaded;
        }
    }
}

/// Whether a unit file's text declares `[X-Fleet] AtMostOnce=true` (an unparsable file does not).
pub fn declares_at_most_once(text: &str, name: &str) -> bool {
    UnitFile::parse(text).is_ok_and(|file| Requirements::of(&file, name).at_most_once)
}

/// The fence's loop for one run of the agent (one presence lease).
pub(crate) struct FenceLoop<'a, S: SystemdOps> {
    pub systemd: S,
    pub units_dir: &'a Path,
    pub margin: Duration,
    pub alive_until: watch::Receiver<Option<Instant>>,
    pub fence: &'a Fence,
    pub changes: UnitChanges,
}

impl<S: SystemdOps> FenceLoop<'_, S> {
    pub async fn run(mut self, stop: CancellationToken) {
        loop {
            let until = *self.alive_until.borrow_and_update();
            if presence_in_doubt(until, Instant::now(), self.margin) {
                if self.fence.set_in_doubt(true) {
                    warn!(lease_lost = until.is_none(), margin = ?self.margin,
                        "presence in doubt: stopping at-most-once units before the engine may place them elsewhere");
                }
                if !self.guard(&stop).await {
                    return;
                }
            } else {
                if self.fence.set_in_doubt(false) {
                    info!("presence renewed: at-most-once units scheduled here may run again");
                    self.fence.cleared.notify_one();
                }
                let deadline = stop_deadline(until.unwrap_or_else(Instant::now), self.margin);
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => return,
                    changed = self.alive_until.changed() => if changed.is_err() {
                        // The keeper stopped (the lease was given up): wait out what is left, then doubt.
                        sleep_until(deadline).await;
                        self.fence.set_in_doubt(true);
                        self.guard(&stop).await;
                        return;
                    },
                    () = sleep_until(deadline) => {}
                }
            }
        }
    }

    /// In doubt: stops the at-most-once units running here, then stops any of them that starts again, until the
    /// lease's expiry estimate changes (`true`: look again) or `stop` (`false`). A keeper that is gone changes
    /// nothing any more: the guard then lasts until `stop`. A stop that fails, with the unit still running, is
    /// tried again after [`STOP_RETRY_FIRST`], doubling up to [`STOP_RETRY_MAX`]: nothing else may come to wake the
    /// guard (a unit that keeps running sends no signal), and while it runs the machine may run it twice.
    async fn guard(&mut self, stop: &CancellationToken) -> bool {
        let mut pass = self.stop_running().await;
        let mut backoff = STOP_RETRY_FIRST;
        let mut retry_at = pass.left_running.then(|| Instant::now() + backoff);
        let mut lease_followed = true;
        let mut signals = true;
        loop {
            let again = tokio::select! {
                biased;
                _ = stop.cancelled() => return false,
                changed = self.alive_until.changed(), if lease_followed => {
                    if changed.is_ok() {
                        return true;
                    }
                    lease_followed = false;
                    false
                }
                () = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    backoff = (backoff * 2).min(STOP_RETRY_MAX);
                    true
                }
                change = self.changes.recv(), if signals => match change {
                    Some(UnitChange::Unit { name: unit, .. }) => pass.names.contains(&unit) || self.file_declares(&unit),
                    // A change may have been missed: look again.
                    Some(UnitChange::Missed) => true,
                    None => {
                        warn!("systemd signals ended; the fence can stop nothing more but by its retries");
                        signals = false;
                        false
                    }
                },
                else => {
                    stop.cancelled().await;
                    return false;
                }
            };
            if again {
                pass = self.stop_running().await;
                if !pass.left_running {
                    backoff = STOP_RETRY_FIRST;
                }
                retry_at = pass.left_running.then(|| Instant::now() + backoff);
            }
        }
    }

    /// Stops every at-most-once unit with a file here that systemd reports running.
    async fn stop_running(&self) -> FencePass {
        stop_at_most_once(&self.systemd, self.units_dir, self.fence).await
    }

    fn file_declares(&self, unit: &str) -> bool {
        std::fs::read_to_string(self.units_dir.join(unit)).is_ok_and(|text| declares_at_most_once(&text, unit))
    }
}

/// The first wait before the fence tries again a stop that failed with the unit still running, and the longest.
pub(crate) const STOP_RETRY_FIRST: Duration = Duration::from_millis(500);
pub(crate) const STOP_RETRY_MAX: Duration = Duration::from_secs(5);

/// What one pass of the fence found.
#[derive(Debug, Default, PartialEq, Eq)]
struct FencePass {
    /// The at-most-once units with a file here.
    names: BTreeSet<String>,
    /// A stop failed and systemd still shows that unit running (or its state could not be read).
    left_running: bool,
}

/// Stops every at-most-once unit with a file in `units_dir` that systemd reports running, and tells `fence` which
/// are stopped.
async fn stop_at_most_once<S: SystemdOps>(systemd: &S, units_dir: &Path, fence: &Fence) -> FencePass {
    let names = at_most_once_files(units_dir);
    if names.is_empty() {
        return FencePass { names, left_running: false };
    }
    let list: Vec<String> = names.iter().cloned().collect();
    let running: Vec<String> = match systemd.states(&list).await {
        Ok(states) => states.into_iter().filter(|s| !is_stopped(&s.active_state)).map(|s| s.name).collect(),
        Err(e) => {
            warn!(error = %e, "fence: cannot read unit states; stopping every at-most-once unit");
            list
        }
    };
    if running.is_empty() {
        return FencePass { names, left_running: false };
    }
    let results = join_all(running.iter().map(|name| systemd.stop(name))).await;
    let mut stopped = Vec::new();
    let mut unsure = Vec::new();
    for (name, result) in running.into_iter().zip(results) {
        match result {
            Ok(job) => {
                let result = &job.result;
                warn!(unit = %name, %result, "stopped at-most-once unit: this machine's presence is in doubt");
                stopped.push(name);
            }
            Err(e) if e.is_not_loaded() => stopped.push(name),
            Err(e) => {
                warn!(unit = %name, error = %e, "fence: cannot stop at-most-once unit");
                unsure.push(name);
            }
        }
    }
    // A stop that answered an error may still have run (its answer lost): what systemd shows decides. One the
    // reconcile loop is not told of stays "launched" to it, and is never started again when the doubt ends.
    let mut left_running = !unsure.is_empty();
    if !unsure.is_empty()
        && let Ok(states) = systemd.states(&unsure).await
    {
        let mut still = 0;
        for state in states {
            if is_stopped(&state.active_state) {
                warn!(unit = %state.name, active = %state.active_state, "stopped at-most-once unit (its stop's answer was lost)");
                stopped.push(state.name);
            } else {
                still += 1;
            }
        }
        left_running = still > 0;
    }
    fence.note_stopped(stopped);
    FencePass { names, left_running }
}

/// The units with a file in `dir` that declare `AtMostOnce=true`.
fn at_most_once_files(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeSet::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .filter(|name| std::fs::read_to_string(dir.join(name)).is_ok_and(|text| declares_at_most_once(&text, name)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use fleet_core::machine_plan::plan::Update;

    fn desired(state: JobState) -> Desired {
        Desired { state, hash: "h".into(), text: Arc::from(""), install: false, update: Update::Restart, restart: None }
    }

    fn unit(name: &str, at_most_once: bool) -> ClusterUnit {
        ClusterUnit {
            name: name.into(),
            desired: JobState::Launched,
            hash: "h".into(),
            text: Arc::from(""),
            install: false,
            reloadable: false,
            no_restart: false,
            restart: None,
            target: None,
            requirements: Arc::new(Requirements { at_most_once, ..Requirements::default() }),
        }
    }

    #[test]
    fn in_doubt_only_at_most_once_units_are_held_to_loaded() {
        let mut want: BTreeMap<String, Desired> = [
            ("amo.service".to_string(), desired(JobState::Launched)),
            ("plain.service".to_string(), desired(JobState::Launched)),
            ("amo-loaded.service".to_string(), desired(JobState::Loaded)),
        ]
        .into();
        let units = [unit("amo.service", true), unit("plain.service", false), unit("amo-loaded.service", true)];
        hold_while_in_doubt(&mut want, &units);
        assert_eq!(want["amo.service"].state, JobState::Loaded);
        assert_eq!(want["plain.service"].state, JobState::Launched);
        assert_eq!(want["amo-loaded.service"].state, JobState::Loaded);
    }

    #[test]
    fn the_fence_reads_the_option_from_unit_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.service"), "[Service]\nExecStart=/bin/true\n[X-Fleet]\nAtMostOnce=yes\n")
            .unwrap();
        std::fs::write(dir.path().join("b.service"), "[Service]\nExecStart=/bin/true\n").unwrap();
        std::fs::write(dir.path().join(".hidden"), "[X-Fleet]\nAtMostOnce=true\n").unwrap();
        assert_eq!(at_most_once_files(dir.path()), BTreeSet::from(["a.service".to_string()]));
        assert!(!declares_at_most_once("[X-Fleet]\nAtMostOnce=false\n", "x.service"));
    }

    /// seed 4052's hour: the stop went through but its answer was lost. The unit is stopped all the same, so the
    /// reconcile loop must learn it, or it keeps the unit "launched" and never starts it again.
    #[tokio::test]
    async fn a_unit_whose_stop_answer_was_lost_but_that_stopped_is_handed_over() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.service"), "[X-Fleet]\nAtMostOnce=true\n").unwrap();
        std::fs::write(dir.path().join("b.service"), "[X-Fleet]\nAtMostOnce=true\n").unwrap();
        let fake = crate::agent::fake::Fake::default();
        fake.stop_answer_lost.lock().unwrap().insert("a.service".into());
        fake.fail("stop b.service", "org.freedesktop.DBus.Error.Failed", "refused");
        let fence = Fence::default();
        let pass = stop_at_most_once(&fake, dir.path(), &fence).await;
        assert_eq!(
            fence.take_stopped(),
            BTreeSet::from(["a.service".to_string()]),
            "a stopped (its answer lost); b refused and still running"
        );
        assert!(pass.left_running, "b is to be tried again");
    }

    /// A stop systemd refuses while the presence is in doubt is tried again until it goes through, though nothing
    /// else happens: the unit would otherwise run on here while the engine places it elsewhere.
    #[tokio::test(start_paused = true)]
    async fn a_refused_stop_is_tried_again_while_in_doubt() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.service"), "[X-Fleet]\nAtMostOnce=true\n").unwrap();
        let fake = Arc::new(crate::agent::fake::Fake::default());
        fake.fail("stop b.service", "org.freedesktop.DBus.Error.Failed", "refused");
        let fence = Fence::default();
        let (_alive, alive_until) = watch::channel(None);
        let stop = CancellationToken::new();
        let fencing = FenceLoop {
            systemd: Arc::clone(&fake),
            units_dir: dir.path(),
            margin: Duration::from_secs(1),
            alive_until,
            fence: &fence,
            changes: UnitChanges::closed(),
        };
        let run = fencing.run(stop.clone());
        let check = async {
            let stops = |fake: &crate::agent::fake::Fake| {
                fake.log.lock().unwrap().iter().filter(|c| *c == "stop b.service").count()
            };
            tokio::time::sleep(Duration::from_secs(10)).await;
            let refused = stops(&fake);
            assert!(refused >= 3, "tried again while refused: {refused} stops in 10 s");
            assert!(fence.take_stopped().is_empty());
            fake.fail.lock().unwrap().clear();
            tokio::time::sleep(STOP_RETRY_MAX + Duration::from_millis(1)).await;
            assert_eq!(fence.take_stopped(), BTreeSet::from(["b.service".to_string()]), "stopped once it went through");
            fake.active.lock().unwrap().insert("b.service".into(), "inactive".into());
            let tried = stops(&fake);
            tokio::time::sleep(Duration::from_secs(60)).await;
            assert_eq!(stops(&fake), tried, "no retries once nothing is left running");
            stop.cancel();
        };
        tokio::join!(run, check);
    }

    #[test]
    fn stopped_units_are_handed_over_once() {
        let fence = Fence::default();
        fence.note_stopped(["a.service".to_string()]);
        assert_eq!(fence.take_stopped(), BTreeSet::from(["a.service".to_string()]));
        assert!(fence.take_stopped().is_empty());
        assert!(fence.set_in_doubt(true) && !fence.set_in_doubt(true) && fence.in_doubt());
    }
}

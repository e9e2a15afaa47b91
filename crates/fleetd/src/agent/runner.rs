//! The running agent: [`Agent`] owns the executor (with the units directory and the target-state cache), the
//! state publisher and the parsed-unit cache, and drives them from the registry snapshot and systemd's signals.
//!
//! [`Agent::run`] runs two loops side by side until its token is cancelled:
//! * **reconcile** — on every new snapshot (bursts coalesce: it always works on the latest one) and every
//!   [`RECONCILE_INTERVAL`] as a safety net: desired units → plan → hold starts whose old copy still runs on
//!   another machine ([`super::handover`]) → execute → write this machine's launched markers. Nothing happens
//!   while the snapshot is disconnected or this machine's own record is missing (B14): losing etcd never stops a
//!   unit.
//! * **publish** ([`super::publish_loop`]) — unit states, event-driven from systemd, on its own `Systemd`
//!   handle, so a long stop job in a plan never holds up state publishing; with each checked unit's health
//!   ([`super::checks`]). Before the reconcile writes the markers of units it (re)started, it waits (briefly) until
//!   the publish loop has published their health back at `unknown`.
//!
//! Everything either loop writes is bound to the lease `run` was given. A later `run` with a new lease (after a
//! monitor restart) first re-binds what the agent published before: every launched marker and every unit state.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval_at};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::checks::{AgentStarts, HealthChecks, START_PUBLISH_WAIT};
use super::debug::DebugHandle;
use super::error::AgentError;
use super::executor::{Executor, ExecutorConfig, Marker, Outcome, TaskReport, marker_diff, markers};
use super::fence::{Fence, FenceLoop, hold_while_in_doubt};
use super::handover::{Blocker, hold_starts, other_copies, start_blocker};
use super::load_fault::{self, LoadFaults, Publish};
use super::publish_loop::PublishLoop;
use super::publisher::Publisher;
use super::timing::{RECONCILE_INTERVAL, refresh_period};
use super::units_dir::UnitsDir;
use super::write_failures::WriteFailures;
use fleet_core::layout::LAYOUT_2;
use fleet_core::machine_plan::desired::{ThisMachine, desired_units};
use fleet_core::machine_plan::plan::{Desired, Planned, Reason, Task, plan};
use fleet_core::machine_plan::unit_cache::UnitCache;
use fleet_registry::{AgentSession, MAX_MARKERS_PER_TXN, Snapshot};
use fleet_systemd::{Systemd, SystemdOps, UnitChanges};

/// Registry writes in flight at once when applying markers or cleaning up.
const WRITERS: usize = 8;
/// Upper bound for the registry clean-up at the end of a purge (etcd may be gone at shutdown).
const PURGE_REGISTRY_LIMIT: Duration = Duration::from_secs(5);

/// What the agent needs to know about this machine.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// This machine's full ID.
    pub machine_id: String,
    /// `units_directory` (default `/run/fleet/units/`).
    pub units_dir: PathBuf,
    /// `agent_ttl`: sets the state resync period ([`refresh_period`]).
    pub ttl: Duration,
}

/// The per-machine agent (spec §7), on systemd ([`Systemd`]) or on any other unit manager behind [`SystemdOps`]
/// (the scale simulation's). See the module docs.
pub struct Agent<S = Systemd> {
    config: AgentConfig,
    systemd: S,
    executor: Executor<S>,
    publisher: Publisher,
    cache: UnitCache,
    changes: UnitChanges,
    debug: DebugHandle,
    /// The at-most-once fence's state, kept across runs (units it stopped are handed to the executor).
    fence: Fence,
    /// Health checks of the units here, kept across runs (their checks go on meanwhile).
    health: HealthChecks<S>,
    /// Unit files this machine could not write (issue 37), kept across runs; re-published under each new lease.
    load_faults: LoadFaults,
    /// The global units last published under the memory lease (`None`: not yet under this run's lease).
    global_units: Option<BTreeSet<String>>,
}

impl<S: SystemdOps + Clone + 'static> Agent<S> {
    /// Opens the units directory (adopting files already there, hashes recorded) and subscribes to systemd.
    pub async fn new(config: AgentConfig, systemd: S) -> Result<Agent<S>, AgentError> {
        let units = UnitsDir::open(&config.units_dir)?;
        info!(
            dir = %config.units_dir.display(),
            adopted = units.hashes().len(),
            machine = %config.machine_id,
            "agent: units directory opened"
        );
        let changes = systemd.changes();
        let executor = Executor::new(systemd.clone(), units, ExecutorConfig::default());
        let debug = DebugHandle::default();
        debug.set_subscribed(executor.loaded().keys().cloned());
        let health = HealthChecks::new(systemd.clone(), &config.machine_id, config.units_dir.clone());
        Ok(Agent {
            config,
            systemd,
            executor,
            publisher: Publisher::new(),
            cache: UnitCache::new(),
            changes,
            debug,
            fence: Fence::default(),
            health,
            load_faults: LoadFaults::default(),
            global_units: None,
        })
    }

    /// Reconciles this machine and publishes unit states until `stop` is cancelled. `lease` is this machine's
    /// presence lease: published states and launched markers are bound to it. May be called again after a
    /// monitor restart with a new lease (component state survives, units keep running): then re-publish every
    /// state and re-mark every launched unit under the new lease first. `alive_until` follows the presence lease
    /// (`LeaseKeeper::alive_until`): the at-most-once fence runs on it. `layout` is the registry's: from layout 2
    /// on, the launched markers are folded into the states ([`super::loaded`]) and no marker key is written.
    pub async fn run(
        &mut self,
        registry: AgentSession,
        snapshots: watch::Receiver<Arc<Snapshot>>,
        alive_until: watch::Receiver<Option<Instant>>,
        layout: u32,
        stop: CancellationToken,
    ) -> Result<(), AgentError> {
        let machine = self.config.machine_id.clone();
        let lease = registry.lease();
        let fold = layout >= LAYOUT_2;
        info!(machine = %machine, lease = format_args!("{lease:x}"), units = self.executor.loaded().len(), layout,
            "agent running");
        if !fold {
            let rebind: Vec<Marker> = self
                .executor
                .launched_hashes()
                .into_iter()
                .map(|(unit, hash)| Marker::Launched { unit, hash })
                .collect();
            let _ = write_markers(&registry, rebind).await;
        }
        // A load fault published under an earlier lease went with it.
        self.load_faults.published(&Publish::Clear);
        self.global_units = None;

        // Both loops end when `stop` is cancelled; the publisher also ends when the reconcile loop fails.
        let inner = stop.child_token();
        let starts = self.health.starts();
        let publishing = PublishLoop {
            registry: &registry,
            systemd: &self.systemd,
            machine: &machine,
            lease,
            period: refresh_period(self.config.ttl),
            publisher: &mut self.publisher,
            loaded: self.executor.watch_loaded(),
            fold,
            launched: BTreeMap::new(),
            fresh: BTreeSet::new(),
            changes: &mut self.changes,
            snapshots: snapshots.clone(),
            debug: &self.debug,
            health: &mut self.health,
            failures: WriteFailures::new(),
        }
        .run(inner.clone());
        let fencing = FenceLoop {
            systemd: self.systemd.clone(),
            units_dir: &self.config.units_dir,
            margin: fleet_core::at_most_once::margin(self.config.ttl),
            alive_until,
            fence: &self.fence,
            changes: self.systemd.changes(),
        }
        .run(inner.clone());
        let reconciling = async {
            let looped = ReconcileLoop {
                registry: &registry,
                executor: &mut self.executor,
                cache: &mut self.cache,
                load_faults: &mut self.load_faults,
                global_units: &mut self.global_units,
                units_dir: &self.config.units_dir,
                machine: &machine,
                snapshots,
                debug: &self.debug,
                fence: &self.fence,
                starts,
                held: BTreeMap::new(),
                skipped: None,
                markers_written: BTreeMap::new(),
                fold,
            };
            let result = looped.run(&stop).await;
            inner.cancel();
            result
        };
        let ((), (), result) = tokio::join!(publishing, fencing, reconciling);
        info!(machine = %machine, ok = result.is_ok(), "agent stopped");
        result
    }

    /// Graceful shutdown (spec §1.5): stop and unload every unit in the units directory (bounded by `deadline`),
    /// then remove this machine's published states if a registry is given.
    pub async fn purge(&mut self, registry: Option<&AgentSession>, deadline: Duration) -> Result<(), AgentError> {
        let machine = self.config.machine_id.clone();
        info!(machine = %machine, units = self.executor.loaded().len(), "agent: purging every unit");
        self.health.stop_all();
        let reports = self.executor.purge(deadline).await;
        if let Some(registry) = registry {
            let mut names: BTreeSet<String> = self.publisher.published().keys().cloned().collect();
            names.extend(reports.iter().filter_map(|r| r.planned.task.unit().map(str::to_string)));
            let cleanup = futures::stream::iter(names)
                .map(|name| async move {
                    if let Err(e) = registry.remove_state(&name).await {
                        warn!(unit = %name, err = %e, "purge: cannot remove unit state");
                    }
                    if let Err(e) = registry.unmark_launched(&name).await {
                        warn!(unit = %name, err = %e, "purge: cannot remove launched marker");
                    }
                })
                .buffer_unordered(WRITERS)
                .collect::<Vec<()>>();
            if tokio::time::timeout(PURGE_REGISTRY_LIMIT, cleanup).await.is_err() {
                warn!("purge: registry clean-up timed out; the machine's lease will remove the rest");
            }
        }
        self.publisher = Publisher::new();
        self.debug.set_published(self.publisher.published(), BTreeMap::new());
        self.debug.set_target_states(self.executor.believed());
        self.debug.set_subscribed(self.executor.loaded().keys().cloned());
        match self.executor.loaded().len() {
            0 => Ok(()),
            left => Err(AgentError::PurgeIncomplete { left, dir: self.config.units_dir.clone() }),
        }
    }

    /// How many unit files the agent holds in its units directory.
    pub fn loaded_count(&self) -> usize {
        self.executor.loaded().len()
    }

    /// A JSON-able debug dump (SIGUSR1): target states, published states, subscribed units.
    pub fn debug_state(&self) -> serde_json::Value {
        self.debug.dump()
    }

    /// A handle that dumps the same while [`Agent::run`] holds the agent (for a SIGUSR1 handler).
    pub fn debug_handle(&self) -> DebugHandle {
        self.debug.clone()
    }
}

/// Why a reconcile did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// The snapshot is stale (etcd unreachable): keep everything as it is.
    Disconnected,
    /// This machine's presence record is missing (B14): unloading everything would be wrong.
    OwnMachineMissing,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Skip::Disconnected => "registry unreachable",
            Skip::OwnMachineMissing => "this machine's record is missing from the registry",
        })
    }
}

/// What one reconcile did.
#[derive(Debug)]
pub(crate) struct Reconciled {
    pub reports: Vec<TaskReport>,
    /// Start tasks held back because the unit's old copy still runs elsewhere.
    pub held: Vec<(Planned, Blocker)>,
    /// Launched-marker writes that make the registry match (event-based from the reports, plus repairs).
    pub markers: Vec<Marker>,
    /// The global units this machine should run, whether or not it could take them on (published under its memory
    /// lease, so they outlive it).
    pub global: BTreeSet<String>,
}

/// One reconcile of this machine (the shell around the pure functions; systemd behind [`SystemdOps`] so tests
/// can fake it). `latest` returns the newest registry snapshot.
///
/// A plan can go stale while it runs: a stop job may take minutes, and meanwhile the unit may have moved to
/// another machine. So a plan that stops or unloads anything runs in two rounds: first only its Stop/Unload
/// tasks, then a fresh plan from the newest snapshot (with the daemon-reload the unloads need), whose Load/Start
/// tasks therefore never act on a decision made before the stops (units whose stop failed are left for the next
/// reconcile).
#[cfg(test)]
pub(crate) async fn reconcile_once<S: SystemdOps>(
    executor: &mut Executor<S>,
    cache: &mut UnitCache,
    latest: &dyn Fn() -> Arc<Snapshot>,
    me: &str,
) -> Result<Reconciled, Skip> {
    reconcile_fenced(executor, cache, latest, me, &|| false, None, &BTreeMap::new(), false).await
}

/// [`reconcile_once`] with the at-most-once fence: while `in_doubt()`, at-most-once units are planned as loaded
/// only (stopped, never started); asked again before the second round. A scoped view holds no other machine's
/// copies of a unit, so before starting units it reads theirs from `registry` ([`hold`]). `written` is the markers
/// this agent wrote that the view may not show yet (unit → hash, `None` for a removal): they count as stored. With
/// `fold` (layout 2) the markers are only retired ([`markers_to_retire`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn reconcile_fenced<S: SystemdOps>(
    executor: &mut Executor<S>,
    cache: &mut UnitCache,
    latest: &dyn Fn() -> Arc<Snapshot>,
    me: &str,
    in_doubt: &dyn Fn() -> bool,
    registry: Option<(&AgentSession, &mut Option<BTreeSet<String>>)>,
    written: &BTreeMap<String, Option<String>>,
    fold: bool,
) -> Result<Reconciled, Skip> {
    let mut snapshot = latest();
    let mut round = prepare(executor, cache, &snapshot, me, in_doubt())?;
    let mut reports = Vec::new();
    if round.planned.iter().any(|p| is_down(&p.task)) {
        let (down, _): (Vec<Planned>, Vec<Planned>) =
            std::mem::take(&mut round.planned).into_iter().partition(|p| is_down(&p.task));
        reports = executor.run(down, &round.desired).await;
        let failed: BTreeSet<String> = reports
            .iter()
            .filter(|r| r.outcome.is_err())
            .filter_map(|r| r.planned.task.unit().map(str::to_string))
            .collect();
        snapshot = latest();
        match prepare(executor, cache, &snapshot, me, in_doubt()) {
            Ok(mut next) => {
                next.planned.retain(|p| p.task.unit().is_none_or(|u| !failed.contains(u)));
                round = next;
            }
            Err(skip) => {
                debug!(reason = %skip, "agent: second round skipped");
            }
        }
    }
    let (session, published_global) = match registry {
        Some((session, published)) => (Some(session), Some(published)),
        None => (None, None),
    };
    hold(&mut round, &snapshot, me, session.map(|s| &**s)).await;
    // Before its starts: a machine that came back (or joined) counts for the rollouts of its global units from
    // now on, not only once it publishes their states.
    if let (Some(session), Some(published)) = (session, published_global) {
        publish_global_units(session, published, &round.global).await;
    }
    reports.extend(executor.run(round.planned, &round.desired).await);
    let mut have: BTreeMap<String, String> = snapshot
        .unit_records()
        .iter()
        .filter_map(|(name, r)| r.launched_markers().get(me).map(|h| (name.to_string(), h.to_string())))
        .collect();
    for (unit, hash) in written {
        match hash {
            Some(hash) => have.insert(unit.clone(), hash.clone()),
            None => have.remove(unit),
        };
    }
    let markers = if fold {
        let in_states: BTreeMap<String, String> = snapshot
            .state_records()
            .iter()
            .filter_map(|(unit, per_machine)| {
                per_machine.get(me).and_then(|r| r.launched.as_ref()).map(|h| (unit.to_string(), h.to_string()))
            })
            .collect();
        markers_to_retire(&have, &executor.launched_hashes(), &in_states)
    } else {
        marker_plan(&reports, executor.loaded(), &executor.launched_hashes(), &have)
    };
    Ok(Reconciled { reports, held: round.held, markers, global: round.global })
}

fn is_down(task: &Task) -> bool {
    matches!(task, Task::Stop(_) | Task::Unload(_))
}

/// One round's inputs: the desired units and the plan, with held starts taken out.
struct Round {
    desired: BTreeMap<String, Desired>,
    /// The global units this machine should run (a load fault does not take them off; a cordon does).
    global: BTreeSet<String>,
    planned: Vec<Planned>,
    held: Vec<(Planned, Blocker)>,
}

fn prepare<S: SystemdOps>(
    executor: &Executor<S>,
    cache: &mut UnitCache,
    snapshot: &Snapshot,
    me: &str,
    in_doubt: bool,
) -> Result<Round, Skip> {
    if !snapshot.is_connected() {
        return Err(Skip::Disconnected);
    }
    let machine = snapshot.machine(me).ok_or(Skip::OwnMachineMissing)?;
    let units = cache.cluster_units(snapshot, me);
    let actual = executor.actual();
    // A cordoned machine, or one that cannot write unit files, keeps only the global units whose file it has
    // (issues 38 and 37, `machine_plan::desired`).
    let load_fault = machine.load_fault.is_some();
    let holds = if machine.cordoned || load_fault {
        actual.iter().filter(|(_, a)| a.hash.is_some()).map(|(name, _)| name.clone()).collect()
    } else {
        BTreeSet::new()
    };
    // Units a drain stopped here stay stopped while the cordon it was made under stands (issue 38).
    let cordon_since = snapshot.machine_records().get(me).and_then(|r| r.cordon.as_ref()).map(|c| c.since_ms);
    let rollouts = if machine.cordoned { snapshot.rollouts() } else { Vec::new() };
    let drained = snapshot.drained_units(me, cordon_since, &rollouts).into_iter().map(String::from).collect();
    let this = ThisMachine {
        id: me.to_string(),
        metadata: machine.metadata,
        cordoned: machine.cordoned,
        load_fault,
        holds,
        drained,
    };
    let mut desired = desired_units(&units, &this).map_err(|_| Skip::OwnMachineMissing)?;
    // The global units this machine should run: with a load fault, those it could not take on count too (the fault
    // took them away: rollouts count the machine against their budget, `SnapshotCluster::holders`). A cordon is the
    // operator's choice and counts as ever.
    let should_run = if load_fault {
        let unfaulted = ThisMachine { load_fault: false, ..this.clone() };
        desired_units(&units, &unfaulted).map_err(|_| Skip::OwnMachineMissing)?.into_keys().collect()
    } else {
        desired.keys().cloned().collect::<BTreeSet<String>>()
    };
    if in_doubt {
        hold_while_in_doubt(&mut desired, &units);
    }
    let global: BTreeSet<&str> = units.iter().filter(|u| u.requirements.global).map(|u| u.name.as_str()).collect();
    let mut planned = plan(&desired, &actual);
    // A daemon-reload still due from an earlier run (deferred or failed) goes before this plan's starts.
    if executor.reload_pending() && !planned.iter().any(|p| p.task == Task::Reload) {
        let at = planned.iter().position(|p| matches!(p.task, Task::Start(_))).unwrap_or(planned.len());
        planned.insert(at, Planned { task: Task::Reload, reason: Reason::UnitFilesChanged });
    }
    let global_here = should_run.into_iter().filter(|name| global.contains(name.as_str())).collect();
    Ok(Round { desired, global: global_here, planned, held: Vec::new() })
}

/// Holds back the round's starts of units another machine's copy of which may still run (`handover.rs`). A full
/// view shows every copy; a scoped one shows this machine's only, so the other copies of the units to start are
/// read from `registry` first (a global unit starts whatever runs elsewhere, so none is read for it). If that read
/// fails, those starts wait for the next reconcile.
async fn hold(round: &mut Round, snapshot: &Snapshot, me: &str, registry: Option<&fleet_registry::Registry>) {
    let starts: Vec<&str> = round
        .planned
        .iter()
        .filter_map(|p| match &p.task {
            Task::Start(name) if !round.global.contains(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let read;
    let copies = match (snapshot.scope(), registry) {
        (Some(_), Some(registry)) if !starts.is_empty() => match registry.read_copies_snapshot(&starts).await {
            Ok(copies) => {
                read = copies;
                &read
            }
            Err(e) => {
                warn!(units = starts.len(), error = %e, "cannot read other machines' copies of units to start; starting them later");
                let starts: BTreeSet<String> = starts.into_iter().map(str::to_string).collect();
                round.planned.retain(|p| !matches!(&p.task, Task::Start(name) if starts.contains(name)));
                return;
            }
        },
        _ => snapshot,
    };
    let global = &round.global;
    let (planned, held) = hold_starts(std::mem::take(&mut round.planned), |name| {
        start_blocker(me, global.contains(name), &other_copies(copies, name, me))
    });
    round.planned = planned;
    round.held = held;
}

/// The marker writes after a run: the reports' markers (the last one per unit wins), then repairs
/// ([`marker_diff`]) for units the run did not touch. `have` is this machine's markers in the snapshot the run
/// started from.
pub(crate) fn marker_plan(
    reports: &[TaskReport],
    loaded: &BTreeMap<String, String>,
    launched: &BTreeMap<String, String>,
    have: &BTreeMap<String, String>,
) -> Vec<Marker> {
    let mut last: BTreeMap<String, Marker> = BTreeMap::new();
    for m in markers(reports, loaded) {
        let unit = match &m {
            Marker::Launched { unit, .. } | Marker::NotLaunched(unit) => unit.clone(),
        };
        last.insert(unit, m);
    }
    let touched: BTreeSet<&str> = reports.iter().filter_map(|r| r.planned.task.unit()).collect();
    let repairs: Vec<Marker> = marker_diff(launched, have)
        .into_iter()
        .filter(|m| match m {
            Marker::Launched { unit, .. } | Marker::NotLaunched(unit) => !touched.contains(unit.as_str()),
        })
        .collect();
    last.into_values().chain(repairs).collect()
}

/// Publishes the global units this machine should run when they changed from `published` (issue 37): under the
/// memory lease they outlive the machine, so a rollout begun soon after it left still counts it. A failed write is
/// retried at the next reconcile.
async fn publish_global_units(
    registry: &AgentSession,
    published: &mut Option<BTreeSet<String>>,
    global: &BTreeSet<String>,
) {
    if registry.memory().is_none() || published.as_ref() == Some(global) {
        return;
    }
    let record = fleet_core::model::GlobalUnits { units: global.clone() };
    match registry.put_global_units(&record).await {
        Ok(()) => *published = Some(record.units),
        Err(e) => debug!(error = %e, "cannot publish this machine's global units; retrying at the next reconcile"),
    }
}

/// Layout 2: the launched markers this machine still holds from layout 1 (`have`: unit → hash) that can go: those
/// of units it no longer runs (`launched`: what it runs now), and those whose published state already carries what
/// it runs (`in_states`). A marker wins over the state for readers, so one is kept until the state tells the same.
pub(crate) fn markers_to_retire(
    have: &BTreeMap<String, String>,
    launched: &BTreeMap<String, String>,
    in_states: &BTreeMap<String, String>,
) -> Vec<Marker> {
    have.keys()
        .filter(|unit| match launched.get(*unit) {
            None => true,
            Some(hash) => in_states.get(*unit) == Some(hash),
        })
        .map(|unit| Marker::NotLaunched(unit.clone()))
        .collect()
}

/// The units a run (re)started: start jobs that ran (their health starts over).
fn started_units(reports: &[TaskReport]) -> Vec<String> {
    reports
        .iter()
        .filter_map(|r| match (&r.planned.task, &r.outcome) {
            (Task::Start(unit), Ok(Outcome::Started(_) | Outcome::StartPending)) => Some(unit.clone()),
            _ => None,
        })
        .collect()
}

/// Writes markers: removals first, then launches (a unit stopped and started again in one run ends marked), in
/// transactions of many units, a few transactions at a time. A launch batch naming a unit that is gone from the
/// registry writes nothing and is retried one unit at a time. Failures are logged and repaired by a later
/// reconcile.
async fn write_markers(registry: &AgentSession, markers: Vec<Marker>) -> Vec<Marker> {
    let mut launched: BTreeMap<String, String> = BTreeMap::new();
    let mut removed: BTreeSet<String> = BTreeSet::new();
    for marker in markers {
        match marker {
            Marker::Launched { unit, hash } => {
                launched.insert(unit, hash);
            }
            Marker::NotLaunched(unit) => {
                launched.remove(&unit);
                removed.insert(unit);
            }
        }
    }
    let removed: Vec<&str> = removed.iter().map(String::as_str).collect();
    let mut written: Vec<Marker> = futures::stream::iter(removed.chunks(MAX_MARKERS_PER_TXN))
        .map(|units| async move {
            match registry.unmark_launched_many(units).await {
                Ok(()) => {
                    debug!(units = units.len(), "unmarked launched");
                    units.iter().map(|u| Marker::NotLaunched(u.to_string())).collect()
                }
                Err(e) => {
                    warn!(units = units.len(), err = %e, "cannot remove launched markers; retrying later");
                    Vec::new()
                }
            }
        })
        .buffer_unordered(WRITERS)
        .collect::<Vec<Vec<Marker>>>()
        .await
        .into_iter()
        .flatten()
        .collect();
    let launched: Vec<(&str, &str)> = launched.iter().map(|(u, h)| (u.as_str(), h.as_str())).collect();
    let launched_written = futures::stream::iter(launched.chunks(MAX_MARKERS_PER_TXN))
        .map(|units| async move {
            let marked = |unit: &str, hash: &str| Marker::Launched { unit: unit.to_string(), hash: hash.to_string() };
            match registry.mark_launched_many(units).await {
                Ok(true) => {
                    debug!(units = units.len(), "marked launched");
                    units.iter().map(|(unit, hash)| marked(unit, hash)).collect()
                }
                Ok(false) => {
                    let mut written = Vec::new();
                    for (unit, hash) in units {
                        match registry.mark_launched(unit, hash).await {
                            Ok(true) => {
                                debug!(unit = %unit, hash = %hash, "marked launched");
                                written.push(marked(unit, hash));
                            }
                            Ok(false) => {
                                debug!(unit = %unit, "not marked launched: the unit is gone from the registry")
                            }
                            Err(e) => warn!(unit = %unit, err = %e, "cannot mark unit launched; retrying later"),
                        }
                    }
                    written
                }
                Err(e) => {
                    warn!(units = units.len(), err = %e, "cannot mark units launched; retrying later");
                    Vec::new()
                }
            }
        })
        .buffer_unordered(WRITERS)
        .collect::<Vec<Vec<Marker>>>()
        .await;
    written.extend(launched_written.into_iter().flatten());
    written
}

/// The restarted markers this machine has not published yet: (unit, rollout ID) for every unit the executor
/// (re)started for a rolling restart whose marker in `snapshot` says otherwise.
pub(crate) fn restarted_markers_missing(
    restarts: &BTreeMap<String, String>,
    snapshot: &Snapshot,
    me: &str,
) -> Vec<(String, String)> {
    restarts
        .iter()
        .filter(|(unit, id)| {
            snapshot.unit_record(unit).is_some_and(|r| r.restarted_markers().get(me).map(|r| &**r) != Some(id.as_str()))
        })
        .map(|(unit, id)| (unit.clone(), id.clone()))
        .collect()
}

/// Writes restarted markers (few: one per unit of a rolling restart reaching this machine). Failures are logged;
/// the next reconcile writes what is still missing.
async fn write_restarted_markers(registry: &AgentSession, markers: Vec<(String, String)>) {
    for (unit, id) in markers {
        match registry.mark_restarted(&unit, &id).await {
            Ok(_) => debug!(unit = %unit, rollout = %id, "marked restarted"),
            Err(e) => warn!(unit = %unit, rollout = %id, err = %e, "cannot mark unit restarted; retrying later"),
        }
    }
}

/// The reconcile half of a run.
struct ReconcileLoop<'a, S> {
    registry: &'a AgentSession,
    executor: &'a mut Executor<S>,
    cache: &'a mut UnitCache,
    load_faults: &'a mut LoadFaults,
    global_units: &'a mut Option<BTreeSet<String>>,
    units_dir: &'a std::path::Path,
    machine: &'a str,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    debug: &'a DebugHandle,
    fence: &'a Fence,
    /// Where the (re)starts of checked units are reported before their markers are written.
    starts: Arc<AgentStarts>,
    /// Starts held at the last reconcile (logged at info only when they change).
    held: BTreeMap<String, Blocker>,
    /// Why the last reconcile was skipped (logged only when it changes).
    skipped: Option<Skip>,
    /// Launched markers this agent wrote (unit → hash, `None`: removed) until its view shows them: a view learns of
    /// a write after it is made (a watch event, or the scoped view's note), and a reconcile in between must not
    /// write the marker again.
    markers_written: BTreeMap<String, Option<String>>,
    /// Layout 2: launched hashes go into the states; marker keys left from layout 1 are only removed.
    fold: bool,
}

impl<S: SystemdOps> ReconcileLoop<'_, S> {
    async fn run(mut self, stop: &CancellationToken) -> Result<(), AgentError> {
        let mut tick = interval_at(Instant::now() + RECONCILE_INTERVAL, RECONCILE_INTERVAL);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            // The latest snapshot: every change that arrived while the last reconcile ran is folded into it.
            self.snapshots.mark_unchanged();
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Ok(()),
                () = self.reconcile() => {}
            }
            tick.reset();
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Ok(()),
                changed = self.snapshots.changed() => {
                    if changed.is_err() {
                        return Err(AgentError::SnapshotsEnded);
                    }
                }
                _ = tick.tick() => {}
                () = self.fence.cleared() => {}
            }
        }
    }

    async fn reconcile(&mut self) {
        let snapshots = self.snapshots.clone();
        let latest = move || Arc::clone(&snapshots.borrow());
        let revision = latest().revision();
        let stopped = self.fence.take_stopped();
        if !stopped.is_empty() {
            self.executor.note_stopped(&stopped);
        }
        let fence = self.fence;
        let registry = Some((self.registry, &mut *self.global_units));
        let written = &self.markers_written;
        match reconcile_fenced(
            self.executor,
            self.cache,
            &latest,
            self.machine,
            &|| fence.in_doubt(),
            registry,
            written,
            self.fold,
        )
        .await
        {
            Err(skip) => {
                if self.skipped != Some(skip) {
                    match skip {
                        Skip::Disconnected => info!(reason = %skip, "agent: not reconciling; units keep running"),
                        Skip::OwnMachineMissing => warn!(reason = %skip, "agent: not reconciling; units keep running"),
                    }
                }
                self.skipped = Some(skip);
            }
            Ok(done) => {
                if let Some(was) = self.skipped.take() {
                    info!(was = %was, revision, "agent: reconciling again");
                }
                if !done.reports.is_empty() {
                    debug!(tasks = done.reports.len(), revision, "agent: reconcile ran tasks");
                }
                self.log_held(&done.held);
                let started = started_units(&done.reports);
                if !started.is_empty() {
                    self.starts.started(&started, START_PUBLISH_WAIT).await;
                }
                self.executor.publish_launched();
                for marker in write_markers(self.registry, done.markers).await {
                    match marker {
                        Marker::Launched { unit, hash } => self.markers_written.insert(unit, Some(hash)),
                        Marker::NotLaunched(unit) => self.markers_written.insert(unit, None),
                    };
                }
                let snapshot = latest();
                // What the view shows now needs no overlay any more.
                let me = self.machine;
                self.markers_written.retain(|unit, hash| {
                    let shown =
                        snapshot.unit_record(unit).and_then(|r| r.launched_markers().get(me).map(|h| h.to_string()));
                    shown != *hash
                });
                let missing = restarted_markers_missing(self.executor.restarts(), &snapshot, self.machine);
                write_restarted_markers(self.registry, missing).await;
                self.load_fault(&done.reports, &snapshot).await;
                // Retried here when the write before the run failed.
                publish_global_units(self.registry, self.global_units, &done.global).await;
            }
        }
        self.debug.set_target_states(self.executor.believed());
    }

    /// Issue 37: folds this reconcile's failed unit-file writes into the machine's load fault, probes whether
    /// files fit again while a fault stands, and publishes the change (a failed registry write is retried at the
    /// next reconcile).
    async fn load_fault(&mut self, reports: &[TaskReport], snapshot: &Snapshot) {
        let failed = load_fault::failed_writes(reports);
        let sizes: BTreeMap<String, usize> = reports
            .iter()
            .filter_map(|r| match &r.planned.task {
                Task::Load(name, hash) | Task::Update(name, hash) if failed.contains_key(name) => {
                    snapshot.body(hash).map(|text| (name.clone(), text.len()))
                }
                _ => None,
            })
            .collect();
        if self.load_faults.note(failed, &sizes, fleet_core::model::now_ms()) {
            match load_fault::probe(self.units_dir, self.load_faults.probe_bytes()) {
                Ok(()) => {
                    info!(dir = %self.units_dir.display(), "unit files can be written again: withdrawing the load fault");
                    self.load_faults.recovered();
                }
                Err(e) => debug!(error = %e, "unit files still cannot be written"),
            }
        }
        let Some(publish) = self.load_faults.to_publish() else { return };
        let written = match &publish {
            Publish::Put(fault) => {
                warn!(%fault, "publishing the load fault: no new unit is placed here until files can be written");
                self.registry.put_load_fault(fault).await
            }
            Publish::Clear => self.registry.clear_load_fault().await,
        };
        match written {
            Ok(()) => self.load_faults.published(&publish),
            Err(e) => warn!(error = %e, "cannot publish the load fault; retrying at the next reconcile"),
        }
    }

    fn log_held(&mut self, held: &[(Planned, Blocker)]) {
        let now: BTreeMap<String, Blocker> =
            held.iter().filter_map(|(p, b)| p.task.unit().map(|u| (u.to_string(), b.clone()))).collect();
        for (p, b) in held {
            let job = p.task.unit().unwrap_or("");
            if self.held.get(job) != Some(b) {
                info!(
                    unit = %job, blocker = %b.machine,
                    "AgentReconciler deferred task: type={} job={job} reason=\"{b}\"", p.task.kind()
                );
            }
        }
        for unit in self.held.keys().filter(|u| !now.contains_key(*u)) {
            debug!(unit = %unit, "start no longer held by another machine");
        }
        self.held = now;
    }
}

#[cfg(test)]
mod tests;

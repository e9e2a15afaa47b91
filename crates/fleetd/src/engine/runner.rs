//! The engine's async shell: leader election on the registry and, while leading, event-driven reconcile passes
//! (spec §1.6, §1.7, §6; fixes B18's sleep-after-event).
//!
//! ```text
//! reflector ──watch──▶ Engine::run ──tick──▶ election::step ──▶ campaign / renew / stand aside / follow
//!                          ▲                        │ leading
//!      resync every EIV ───┘                        ▼
//!                                   Reconciler::pass ──CAS writes──▶ etcd ──▶ reflector (wait for revision)
//! ```
//!
//! * **Wake-ups**: a change of the registry view (bursts coalesced: the pass starts once the view has been quiet
//!   for [`QUIET`], at most [`MAX_SETTLE`] after the first change), the resync timer (every EIV, reset by every
//!   pass), or loss of the engine lease. No sleeps decide correctness. A pass runs only when what the scheduler
//!   reads changed since the last complete pass (or the at-most-once wait ended): a pass is a function of the view
//!   and that wait, so one on the same view would decide nothing new. The resync tick still re-decides
//!   leadership and drives rollouts; missed etcd events are the reflector's to catch (its watch fails and it lists
//!   again), not the engine's. An idle leader with 1,000 units no longer builds its scheduling input every EIV:
//!   that churn held 0.5–0.8 MB more free heap than the other fleetds kept (git history of docs/bench.md at 58f0c3f, "fleetd under 10 MiB").
//! * **Leadership**: the engine keeps its own lease (TTL `5×EIV`, granted on the first campaign and re-granted
//!   after loss; separate from the machine's presence lease). It campaigns only when the view shows no leader
//!   (a lost campaign still costs etcd a raft round), and counts as leader only once the view shows the key bound
//!   to its lease. Renewal is the lease keep-alive; its failure ends leadership at once. On shutdown it resigns
//!   (deletes the key if still its own) and revokes the lease, so another engine takes over without waiting for
//!   expiry. A leader key with this machine's ID under another lease (an earlier run: a killed fleetd, or a lease
//!   given up during an etcd outage that etcd restored) is retired at once. Every pass's writes carry the
//!   [`registry::LeaderFence`] (key and lease), so an engine deposed mid-pass writes nothing.
//! * **Engine version**: a cluster without the version key (or with an older one) is raised to
//!   [`ENGINE_VERSION`](super::election::ENGINE_VERSION) before campaigning; a newer one makes this engine stand
//!   aside (and resign if it led).
//! * **Passes**: only while leading and while the view is connected; each is bounded by the lease TTL and
//!   followed by a wait until the view shows the pass's own writes.
//! * **Rollouts**: while leading, every tick (unit-state changes included, which skip the scheduling pass) drives
//!   the rollouts that are not final (`rollouts::drive`); a rollout waiting for a time (min-healthy, a health
//!   timeout) sets a timer that wakes the loop then. A view change is offered to running rollouts at once, before
//!   the quiet window that batches scheduling passes, and so is every further change while the burst settles: a
//!   step seen healthy releases the next one without waiting for the burst to settle. A drive skips views older
//!   than its own last progress write (they would decide the same step again and lose the compare-and-swap).
//! * **Rebalance on its own** (`engine_rebalance`, off by default): while leading, a machine that appears in the
//!   view (joined or returned) makes the engine store a rebalance rollout (`rollouts::rebalance_spec`) once no
//!   other rebalance is in progress; it then runs like one a user asked for (docs/rebalance.md).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior, interval, timeout};
use tokio_util::sync::CancellationToken;

use super::audit::Trimmer;
use super::election::{ENGINE_VERSION, LeaderChange, LeadershipStep, StandAsideReason, lease_ttl};
use super::election::{step, view_shows_lease};
use super::reconcile::{PassOutcome, PassReport, Reconciler};
use super::rollouts;
use fleet_core::scheduler::catalog::UnitCatalog;
use fleet_registry::{
    Campaign, EngineVersionCheck, LeaderFence, LeaderSession, LeaseKeeper, LeaseStatus, Registry, SharedFullView,
};

/// `agent_ttl`'s default (spec §2.3), for an engine not told the cluster's.
const DEFAULT_AGENT_TTL: Duration = Duration::from_secs(30);

/// A pass starts once the view has not changed for this long after a change...
pub const QUIET: Duration = Duration::from_millis(5);
/// ...or this long after the first change of a burst, whichever comes first.
pub const MAX_SETTLE: Duration = Duration::from_millis(50);

/// What the engine needs to know about its machine and configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This machine's ID (the leader key's value).
    pub machine_id: String,
    /// `engine_reconcile_interval` (EIV): resync period; the engine lease lives `5×EIV`.
    pub reconcile_interval: Duration,
    /// `disable_engine`: the engine never runs on this machine.
    pub disable_engine: bool,
    /// `engine_rebalance`: rebalance on its own when a machine joins or returns.
    pub rebalance: bool,
}

impl EngineConfig {
    pub fn lease_ttl(&self) -> Duration {
        lease_ttl(self.reconcile_interval)
    }
}

/// What the engine is doing, published after every change (for fleetd's debug dump and for tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStatus {
    /// This engine leads (confirmed by the registry view, lease alive).
    pub leading: bool,
    /// The leader the view shows, if any.
    pub leader: Option<String>,
    /// Reconcile passes run by this engine.
    pub passes: u64,
    /// Scheduling decisions this engine wrote.
    pub applied: u64,
    /// The last pass, if any.
    pub last_pass: Option<PassReport>,
}

/// The engine of one fleetd. Build with [`Engine::new`], then [`Engine::run`] (or [`Engine::spawn`]) until the
/// cancellation token fires.
pub struct Engine {
    registry: Registry,
    /// The machine's full view, shared; `None`: the engine keeps views of its own ([`Engine::with_own_views`]).
    view: Option<watch::Receiver<Arc<fleet_registry::Snapshot>>>,
    /// Where a leader that keeps views of its own takes its full view (shared with the fleetd's API).
    full_views: SharedFullView,
    config: EngineConfig,
    status: watch::Sender<EngineStatus>,
    at_most_once_margin: Duration,
    audit_limits: fleet_core::audit::Limits,
}

impl Engine {
    /// `view` is a subscription to the machine's reflector (`Reflector::subscribe`).
    pub fn new(
        registry: Registry,
        view: watch::Receiver<Arc<fleet_registry::Snapshot>>,
        config: EngineConfig,
    ) -> Engine {
        Engine {
            full_views: SharedFullView::new(&registry),
            registry,
            view: Some(view),
            config,
            status: watch::Sender::new(EngineStatus::default()),
            at_most_once_margin: fleet_core::at_most_once::margin(DEFAULT_AGENT_TTL),
            audit_limits: fleet_core::audit::Limits::default(),
        }
    }

    /// An engine that keeps views of its own, for a fleetd that holds no full view (docs/fleetd.md, "Full views"):
    /// while it follows, the engine's keys alone (`Reflector::start_engine_keys`: what its election reads); while it
    /// leads, a full view, listed when it wins and dropped when it steps down.
    /// Its full view comes from `full_views` (the one the fleetd's API uses too, when it is live).
    pub fn with_own_views(full_views: SharedFullView, config: EngineConfig) -> Engine {
        let mut engine = Engine::new(full_views.registry(), watch::channel(Arc::default()).1, config);
        engine.view = None;
        engine.full_views = full_views;
        engine
    }

    /// How much of the audit trail the leader keeps (fleet.conf `audit_max_records`, `audit_max_age`); without
    /// this call the defaults.
    pub fn with_audit_limits(mut self, limits: fleet_core::audit::Limits) -> Engine {
        self.audit_limits = limits;
        self
    }

    /// The margin this engine waits, after a machine's presence expired, before it places that machine's
    /// at-most-once units elsewhere: `fleet_core::at_most_once::margin` of the cluster's `agent_ttl` (fleetd passes its
    /// own; machines of one cluster share it). Without this call: the margin of the default TTL, 30 s.
    pub fn with_agent_ttl(mut self, agent_ttl: Duration) -> Engine {
        self.at_most_once_margin = fleet_core::at_most_once::margin(agent_ttl);
        self
    }

    /// Status notifications.
    pub fn status(&self) -> watch::Receiver<EngineStatus> {
        self.status.subscribe()
    }

    /// Runs [`Engine::run`] as a task.
    pub fn spawn(self, cancel: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(self.run(cancel))
    }

    /// Takes part in leader election and reconciles while leading, until `cancel` fires; then resigns
    /// leadership and revokes the engine lease before returning. Returns at once when `disable_engine` is set.
    pub async fn run(self, cancel: CancellationToken) {
        if self.config.disable_engine {
            tracing::info!(machine = %self.config.machine_id, "engine disabled on this machine (disable_engine)");
            return;
        }
        let ttl = self.config.lease_ttl();
        let (view, own_view) = match self.view {
            Some(view) => (view, None),
            None => {
                let keys = fleet_registry::Reflector::start_engine_keys(&self.registry);
                (keys.subscribe(), Some(OwnView { _reflector: Arc::new(keys), full: false }))
            }
        };
        let mut runner = Runner {
            registry: self.registry,
            full_views: self.full_views,
            view,
            own_view,
            config: self.config,
            ttl,
            status: self.status,
            reconciler: Reconciler::new().with_at_most_once_margin(self.at_most_once_margin),
            lease: None,
            session: None,
            version_raised: None,
            standing_aside: None,
            last_leader: None,
            last_pass_view: None,
            rollout_wake_ms: None,
            clock: None,
            at_most_once_wake: None,
            rollouts_written: None,
            rollouts_driven: None,
            rollout_catalog: UnitCatalog::new(),
            known_machines: None,
            rebalance_wanted: false,
            audit: Trimmer::new(self.audit_limits),
        };
        tracing::info!(machine = %runner.config.machine_id, interval = ?runner.config.reconcile_interval,
            lease_ttl = ?ttl, "engine started");
        runner.run(&cancel).await;
        tracing::info!(machine = %runner.config.machine_id, "engine stopped");
    }
}

/// Why the loop woke up.
enum Wake {
    Changed,
    Resync,
    /// A rollout's min-healthy time or health timeout is due.
    RolloutTimer,
    /// The wait for a lost machine's at-most-once units is over: place them (a forced pass).
    AtMostOnceWaitOver,
    LeaseLost(String),
    ViewClosed,
    Cancelled,
}

/// An engine's own view ([`Engine::with_own_views`]): the reflector `Runner::view` follows.
struct OwnView {
    /// Held for its watch (dropping the last holder ends the watch; a full one may be the API's too).
    _reflector: Arc<fleet_registry::Reflector>,
    /// A full view (while leading), else the engine's keys.
    full: bool,
}

struct Runner {
    registry: Registry,
    view: watch::Receiver<Arc<fleet_registry::Snapshot>>,
    /// The view the engine keeps of its own, if it does; `None`: `view` is the machine's full view.
    own_view: Option<OwnView>,
    full_views: SharedFullView,
    config: EngineConfig,
    ttl: Duration,
    status: watch::Sender<EngineStatus>,
    reconciler: Reconciler,
    /// The engine lease, granted on the first campaign; dropped when lost.
    lease: Option<LeaseKeeper>,
    /// Leading: the session the view confirmed (the leader key on `lease`), while the lease has not been lost since.
    /// Every leader write goes through it, fenced.
    session: Option<LeaderSession>,
    /// While leading: the clock rollouts are driven by (taken with the lead).
    clock: Option<super::rollouts::LeaderClock>,
    /// The cluster engine version this engine wrote (the view may lag behind).
    version_raised: Option<u32>,
    /// Why this engine stands aside, logged once per reason.
    standing_aside: Option<StandAsideReason>,
    /// Leader shown by the view at the last tick, for change logs.
    last_leader: Option<String>,
    /// The view of the last complete pass: a change that touched none of its inputs needs no pass.
    last_pass_view: Option<Arc<fleet_registry::Snapshot>>,
    /// When a rollout waits for a time (Unix ms), not for the cluster.
    rollout_wake_ms: Option<u64>,
    /// When the engine's wait for a lost machine's at-most-once units ends (from the last pass).
    at_most_once_wake: Option<Instant>,
    /// The revision of the last rollout progress this engine stored, until the view shows it.
    rollouts_written: Option<i64>,
    /// The revision of the view the rollouts were last driven on: a rollout's decision reads only the view and the
    /// clock, so a view change is driven once (not again by the tick that follows it), and only a timer or the
    /// resync drives the same view again.
    rollouts_driven: Option<i64>,
    /// Parse cache for rebalance plans and checks.
    rollout_catalog: UnitCatalog,
    /// Present machines at the last tick while leading (`engine_rebalance`); `None` until the first.
    known_machines: Option<std::collections::BTreeSet<String>>,
    /// A machine joined or returned and no rebalance has been stored for it yet (`engine_rebalance`).
    rebalance_wanted: bool,
    /// The audit trail's trimming while leading.
    audit: Trimmer,
}

impl Runner {
    async fn run(&mut self, cancel: &CancellationToken) {
        let mut resync = interval(self.config.reconcile_interval);
        resync.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            // The first resync tick is immediate: one tick at start.
            let lease_status = self.session.as_ref().and_then(|_| self.lease.as_ref().map(LeaseKeeper::status));
            let rollout_timer = rollout_timer(self.rollout_wake_ms, self.clock);
            let at_most_once_timer = instant_timer(self.at_most_once_wake);
            let wake = tokio::select! {
                biased;
                _ = cancel.cancelled() => Wake::Cancelled,
                reason = lease_lost(lease_status) => Wake::LeaseLost(reason),
                changed = self.view.changed() => if changed.is_ok() { Wake::Changed } else { Wake::ViewClosed },
                _ = resync.tick() => Wake::Resync,
                () = rollout_timer => Wake::RolloutTimer,
                () = at_most_once_timer => Wake::AtMostOnceWaitOver,
            };
            let forced = matches!(wake, Wake::AtMostOnceWaitOver);
            let timed = matches!(wake, Wake::RolloutTimer | Wake::Resync | Wake::AtMostOnceWaitOver);
            match wake {
                Wake::Cancelled => break,
                Wake::ViewClosed => {
                    tracing::warn!("registry view closed; engine stopping");
                    break;
                }
                Wake::LeaseLost(reason) => {
                    tracing::warn!(machine = %self.config.machine_id, "Engine leadership lost, renewal failed: {reason}");
                    self.step_down();
                }
                Wake::Changed => {
                    self.drive_rollouts_at_once().await;
                    self.settle().await;
                }
                Wake::AtMostOnceWaitOver => self.at_most_once_wake = None,
                Wake::Resync | Wake::RolloutTimer => {}
            }
            self.tick(cancel, forced, timed).await;
            resync.reset();
        }
        self.shutdown().await;
    }

    /// Lets a burst of view changes settle (at most [`MAX_SETTLE`]), so one pass covers it. Each change in the
    /// burst is still offered to running rollouts at once: a rolling step publishes its unit's state two or three
    /// times within a few milliseconds, the last one healthy, and that one waited out the quiet window before it
    /// released the next step (5–7 ms of a ~20 ms step, in a debug-log timeline of a rolling replace).
    async fn settle(&mut self) {
        let until = Instant::now() + MAX_SETTLE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match timeout(QUIET.min(left), self.view.changed()).await {
                Ok(Ok(())) => self.drive_rollouts_at_once().await,
                _ => return,
            }
        }
    }

    /// One leadership decision, and a pass when leading and something the scheduler reads changed since the last
    /// complete pass. `forced` (the at-most-once wait is over: a time, not the view, changed) runs it regardless.
    async fn tick(&mut self, cancel: &CancellationToken, forced: bool, timed: bool) {
        let view = self.view.borrow_and_update().clone();
        if !view.is_connected() {
            self.reconciler.forget_absences();
            tracing::debug!("registry view disconnected; engine waits for it to reconnect");
            return;
        }
        self.note_leader(&view);
        if self.session.is_some() && !self.lease.as_ref().is_some_and(|l| view_shows_lease(&view, l.id())) {
            let holder = view.leader().unwrap_or("nobody");
            tracing::warn!(machine = %self.config.machine_id, holder,
                "Engine leadership lost: the leader key is no longer bound to this engine's lease");
            self.step_down();
            // The key went away without us resigning: the lease was most likely revoked or expired before its
            // keeper noticed. Campaign with a fresh one.
            self.lease = None;
        }
        self.adopt_own_key(&view);
        let view = if self.session.is_some() && !self.holds_full_view() {
            match self.take_full_view(cancel).await {
                Some(full) => full,
                None => return,
            }
        } else {
            view
        };
        if view.engine_version() >= self.version_raised {
            // The view caught up; from now on it alone tells (e.g. a deleted version key is raised again).
            self.version_raised = None;
        }
        // At most two rounds: the second after raising the cluster engine version.
        for _ in 0..2 {
            let held = if self.session.is_some() { self.lease.as_ref().map(LeaseKeeper::id) } else { None };
            let next = step(&self.config.machine_id, self.config.disable_engine, &view, self.version_raised, held);
            if !matches!(next, LeadershipStep::StandAside { .. }) {
                self.standing_aside = None;
            }
            match next {
                LeadershipStep::StandAside { reason, resign } => {
                    if self.standing_aside != Some(reason) {
                        tracing::info!(machine = %self.config.machine_id, %reason, "engine not participating");
                        self.standing_aside = Some(reason);
                    }
                    if resign {
                        self.resign().await;
                    }
                }
                LeadershipStep::RaiseClusterVersion { .. } => {
                    match self.registry.check_engine_version(ENGINE_VERSION).await {
                        Ok(EngineVersionCheck::Current | EngineVersionCheck::Upgraded { .. }) => {
                            self.version_raised = Some(ENGINE_VERSION);
                            continue;
                        }
                        Ok(EngineVersionCheck::Newer(v)) => {
                            tracing::info!(cluster = v, mine = ENGINE_VERSION, "cluster runs a newer engine");
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot check the cluster engine version"),
                    }
                }
                LeadershipStep::Renew => {
                    let unchanged = self.last_pass_view.as_ref().is_some_and(|last| view.same_except_states(last));
                    if forced || !unchanged {
                        self.reconcile(&view, cancel).await;
                    }
                    self.drive_rollouts(timed).await;
                    self.rebalance_on_join(&view).await;
                    if let Some(session) = &self.session {
                        self.audit.tick(session).await;
                    }
                }
                LeadershipStep::Campaign => {
                    if self.campaign(cancel).await {
                        let view = if self.holds_full_view() {
                            self.view.borrow_and_update().clone()
                        } else {
                            match self.take_full_view(cancel).await {
                                Some(full) => full,
                                None => return,
                            }
                        };
                        self.reconcile(&view, cancel).await;
                        self.drive_rollouts(true).await;
                    }
                }
                LeadershipStep::TakeOver { from, .. } => {
                    // Only our own earlier run can show up here (v3 leader keys carry no older engine version): a
                    // lease this engine gave up (lost during an etcd outage, then restored by etcd with a fresh
                    // TTL) or a killed fleetd's. No engine uses it — and a write of one would be refused by the
                    // leader fence — so the key is retired now instead of waiting up to 5×EIV for it to expire.
                    let ours = self.lease.as_ref().map(LeaseKeeper::id);
                    let stale = view.leader_record().filter(|r| r.machine == self.config.machine_id).map(|r| r.lease);
                    if let Some(stale) = stale.filter(|l| Some(*l) != ours) {
                        match self.registry.resign(&self.config.machine_id, stale).await {
                            Ok(true) => tracing::info!(leader = %from, lease = format_args!("{stale:x}"),
                                "retired the leader key of an earlier run of this machine"),
                            Ok(false) => tracing::debug!(leader = %from, "earlier run's leader key already gone"),
                            Err(e) => tracing::warn!(error = %e, "cannot retire an earlier run's leader key"),
                        }
                    }
                }
                LeadershipStep::Follow { .. } => {}
            }
            return;
        }
    }

    /// Logs leader changes seen in the view (spec §1.6 messages).
    fn note_leader(&mut self, view: &fleet_registry::Snapshot) {
        let current = view.leader().map(str::to_string);
        if let Some(change) = LeaderChange::between(self.last_leader.as_deref(), current.as_deref()) {
            match &change {
                LeaderChange::Vacated { from } => tracing::info!(leader = %from, "{change}"),
                LeaderChange::Elected { leader } => tracing::info!(leader = %leader, "{change}"),
                LeaderChange::Changed { from, to } => tracing::info!(from = %from, to = %to, "{change}"),
            }
            self.last_leader = current.clone();
            self.status.send_modify(|s| s.leader = current);
        }
    }

    /// Campaigns with the engine lease; `true` once the view confirms this engine leads.
    async fn campaign(&mut self, cancel: &CancellationToken) -> bool {
        let lease = match self.ensure_lease().await {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(error = %e, "cannot grant the engine lease; not campaigning");
                return false;
            }
        };
        let session = match self.registry.campaign(&self.config.machine_id, lease).await {
            Ok(Campaign::Leader(session)) => session,
            Ok(Campaign::Follower { leader }) => {
                tracing::debug!(leader = %leader, "engine leader campaign lost");
                return false;
            }
            Err(e) => {
                // Possibly because the lease is gone before its keeper noticed: start over with a new one.
                tracing::warn!(error = %e, "engine leader campaign failed");
                self.lease = None;
                return false;
            }
        };
        // Lead only once the view shows our key: passes then plan from a view that includes everything the
        // previous leader wrote before its key went away.
        if !wait_view(&self.view, self.ttl, cancel, |v| view_shows_lease(v, lease)).await {
            if !cancel.is_cancelled() {
                // The next tick adopts the key once the view shows it (see `adopt_own_key`).
                tracing::warn!(
                    lease = format_args!("{lease:x}"),
                    "won the engine campaign but the registry view did not show it yet"
                );
            }
            return false;
        }
        self.lead(session);
        true
    }

    fn lead(&mut self, session: LeaderSession) {
        let lease = session.fence().lease;
        self.session = Some(session);
        self.clock = Some(super::rollouts::LeaderClock::start());
        self.reconciler.forget_absences();
        self.last_pass_view = None;
        self.status.send_modify(|s| s.leading = true);
        tracing::info!(machine = %self.config.machine_id, lease = format_args!("{lease:x}"), "Engine leadership acquired");
    }

    /// Leads when the view shows the leader key on our live lease although we do not lead yet (a campaign whose
    /// confirmation the view delivered late). Without this, the key would look like an earlier run's and be
    /// waited out forever, since our own keep-alive keeps it from expiring.
    fn adopt_own_key(&mut self, view: &fleet_registry::Snapshot) {
        if self.session.is_some() {
            return;
        }
        if let Some(lease) = self.lease.as_ref().filter(|l| l.is_alive()).map(LeaseKeeper::id) {
            let fence = LeaderFence { machine: self.config.machine_id.clone(), lease };
            if let Some(session) = LeaderSession::confirmed(self.registry.clone(), fence, view) {
                self.lead(session);
            }
        }
    }

    /// The engine lease's ID, granting a new lease if there is none or it was lost.
    async fn ensure_lease(&mut self) -> Result<i64, fleet_registry::RegistryError> {
        if let Some(lease) = &self.lease
            && lease.is_alive()
        {
            return Ok(lease.id());
        }
        let lease = LeaseKeeper::grant(&self.registry, self.ttl).await?;
        let id = lease.id();
        self.lease = Some(lease);
        Ok(id)
    }

    async fn reconcile(&mut self, view: &Arc<fleet_registry::Snapshot>, cancel: &CancellationToken) {
        let deadline = Instant::now() + self.ttl;
        let Some(session) = self.session.clone() else { return };
        let lease_alive = self.lease.as_ref().map(LeaseKeeper::status);
        let keep_going =
            || !cancel.is_cancelled() && lease_alive.as_ref().is_some_and(|s| *s.borrow() == LeaseStatus::Alive);
        let report = self.reconciler.pass(&session, view, deadline, keep_going).await;
        match &report.outcome {
            PassOutcome::TimedOut { .. } => tracing::warn!(outcome = %report.outcome, planned = report.planned,
                applied = report.applied, "Engine reconciliation aborted"),
            _ if report.duration > self.config.reconcile_interval => {
                tracing::warn!(outcome = %report.outcome, "Engine completed reconciliation in {:?}", report.duration)
            }
            _ if report.planned > 0 || report.collected > 0 => tracing::debug!(outcome = %report.outcome,
                planned = report.planned, applied = report.applied, unplaced = report.unplaced,
                collected = report.collected, duration = ?report.duration, "engine reconcile pass"),
            _ => {}
        }
        let last_write = report.last_write;
        self.at_most_once_wake = report.at_most_once_wait_ends;
        self.last_pass_view = (report.outcome == PassOutcome::Complete).then(|| view.clone());
        self.status.send_modify(|s| {
            s.passes += 1;
            s.applied += report.applied as u64;
            s.last_pass = Some(report);
        });
        // Read-your-writes: the next plan must see this pass's decisions.
        if let Some(revision) = last_write
            && !wait_view(&self.view, self.ttl, cancel, |v| v.revision() >= revision).await
            && !cancel.is_cancelled()
        {
            tracing::warn!(revision, "registry view did not catch up with the engine's own writes");
        }
    }

    /// Advances the rollouts on the newest view (the pass before may have waited for its own writes).
    /// `again`: drive even a view already driven (a rollout waits for a time, or the periodic resync).
    async fn drive_rollouts(&mut self, again: bool) {
        let view = self.view.borrow().clone();
        if !again && self.rollouts_driven == Some(view.revision()) {
            return;
        }
        if self.rollouts_written.is_some_and(|written| view.revision() < written) {
            // The view does not show this engine's last progress yet; its arrival wakes the loop again.
            return;
        }
        self.rollouts_written = None;
        let driven = match (&self.session, self.clock) {
            (Some(session), Some(clock)) if !view.rollout_records().is_empty() => {
                rollouts::drive(session, &view, &mut self.rollout_catalog, clock).await
            }
            _ => rollouts::Driven::default(),
        };
        self.rollouts_driven = Some(view.revision());
        self.rollout_wake_ms = driven.wake_at_ms;
        self.rollouts_written = driven.written_revision;
    }

    /// On a view change while leading, drives running rollouts before the scheduling pass's quiet window: the
    /// change is most often an agent's state showing a step healthy, and the next step is released now.
    async fn drive_rollouts_at_once(&mut self) {
        if self.session.is_none() {
            return;
        }
        let view = self.view.borrow().clone();
        let ours = self.lease.as_ref().is_some_and(|l| view_shows_lease(&view, l.id()));
        if view.is_connected() && ours && rollouts::any_running(&view) {
            self.drive_rollouts(false).await;
        }
    }

    /// With `engine_rebalance`: stores a rebalance rollout once a machine has appeared since the last tick and no
    /// rebalance is in progress. A failed write is tried again on the next tick.
    async fn rebalance_on_join(&mut self, view: &fleet_registry::Snapshot) {
        if !self.config.rebalance {
            return;
        }
        let present: std::collections::BTreeSet<String> = view.machines().map(|m| m.id).collect();
        if let Some(known) = &self.known_machines
            && present.iter().any(|m| !known.contains(m))
        {
            self.rebalance_wanted = true;
        }
        self.known_machines = Some(present);
        if !self.rebalance_wanted || rollouts::rebalance_in_progress(view) {
            return;
        }
        let Some(session) = &self.session else { return };
        let spec = rollouts::rebalance_spec(fleet_core::model::now_ms());
        match session.create_rebalance(&spec).await {
            Ok(Some(_)) => {
                tracing::info!(rollout = %spec.id, "a machine joined: rebalance stored (engine_rebalance)");
                self.rebalance_wanted = false;
            }
            Ok(None) => tracing::debug!(rollout = %spec.id, "rebalance ID taken; trying again on the next tick"),
            Err(e) => tracing::warn!(error = %e, "cannot store a rebalance; trying again on the next tick"),
        }
    }

    /// Stops leading (keeps a live lease for the next campaign; drops a lost one).
    /// Whether `view` shows the whole registry: always with the machine's full view; with views of its own, only
    /// while leading.
    fn holds_full_view(&self) -> bool {
        self.own_view.as_ref().is_none_or(|own| own.full)
    }

    /// Leading on views of its own: lists the whole registry (a view that then includes everything the previous
    /// leader wrote) and follows it from now on. The connected view, or `None` when it did not connect within the
    /// lease's TTL (the next tick tries again) or the engine stops.
    async fn take_full_view(&mut self, cancel: &CancellationToken) -> Option<Arc<fleet_registry::Snapshot>> {
        if !self.holds_full_view() {
            let reflector = self.full_views.get();
            self.view = reflector.subscribe();
            self.own_view = Some(OwnView { _reflector: reflector, full: true });
            tracing::info!(machine = %self.config.machine_id, "engine leads: following the whole registry");
        }
        if wait_view(&self.view, self.ttl, cancel, fleet_registry::Snapshot::is_connected).await {
            Some(self.view.borrow_and_update().clone())
        } else {
            if !cancel.is_cancelled() {
                tracing::warn!("the engine's full view of the registry did not connect yet");
            }
            None
        }
    }

    /// Stops following the whole registry once this engine no longer leads (views of its own only).
    fn drop_full_view(&mut self) {
        if self.own_view.as_ref().is_some_and(|own| own.full) {
            let reflector = Arc::new(fleet_registry::Reflector::start_engine_keys(&self.registry));
            self.view = reflector.subscribe();
            self.own_view = Some(OwnView { _reflector: reflector, full: false });
            tracing::info!(machine = %self.config.machine_id, "engine follows: watching the engine's keys only");
        }
    }

    fn step_down(&mut self) {
        self.drop_full_view();
        self.session = None;
        self.clock = None;
        self.known_machines = None;
        self.last_pass_view = None;
        if self.lease.as_ref().is_some_and(|l| !l.is_alive()) {
            self.lease = None;
        }
        self.status.send_modify(|s| s.leading = false);
    }

    /// Gives leadership up at once (deletes the leader key if still ours) so another engine can take over.
    async fn resign(&mut self) {
        let Some(lease) = &self.lease else { return };
        // Without a confirmed session, the key may still be ours (a campaign the view has not shown yet).
        let resigned = match self.session.take() {
            Some(session) => session.resign().await,
            None => self.registry.resign(&self.config.machine_id, lease.id()).await,
        };
        match resigned {
            Ok(true) => tracing::info!(machine = %self.config.machine_id, "Engine leadership released"),
            Ok(false) => tracing::debug!("leader key was not ours any more"),
            Err(e) => tracing::warn!(error = %e, "cannot release engine leadership; it ends when the lease expires"),
        }
        self.drop_full_view();
        self.status.send_modify(|s| s.leading = false);
    }

    async fn shutdown(&mut self) {
        if self.session.is_some() {
            self.resign().await;
        }
        if let Some(lease) = self.lease.take()
            && let Err(e) = lease.revoke().await
        {
            tracing::warn!(error = %e, "cannot revoke the engine lease; it expires after its TTL");
        }
    }
}

/// Resolves with the reason once the lease is lost; never when there is no lease to watch.
/// Resolves at `wake_ms` (Unix ms), or never.
async fn rollout_timer(wake_ms: Option<u64>, clock: Option<super::rollouts::LeaderClock>) {
    match (wake_ms, clock) {
        (Some(at), Some(clock)) => tokio::time::sleep(Duration::from_millis(at.saturating_sub(clock.now_ms()))).await,
        _ => std::future::pending().await,
    }
}

/// Resolves at `at`, or never.
async fn instant_timer(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn lease_lost(status: Option<watch::Receiver<LeaseStatus>>) -> String {
    let Some(mut status) = status else { return std::future::pending().await };
    loop {
        if let LeaseStatus::Lost { reason } = &*status.borrow_and_update() {
            return reason.clone();
        }
        if status.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Waits until `ready` holds for the view, up to `limit`; `false` on timeout, cancellation or a closed view.
async fn wait_view(
    view: &watch::Receiver<Arc<fleet_registry::Snapshot>>,
    limit: Duration,
    cancel: &CancellationToken,
    mut ready: impl FnMut(&fleet_registry::Snapshot) -> bool,
) -> bool {
    let mut view = view.clone();
    let waiting = async {
        loop {
            if ready(&view.borrow_and_update()) {
                return true;
            }
            if view.changed().await.is_err() {
                return false;
            }
        }
    };
    tokio::select! {
        _ = cancel.cancelled() => false,
        done = timeout(limit, waiting) => done.unwrap_or(false),
    }
}

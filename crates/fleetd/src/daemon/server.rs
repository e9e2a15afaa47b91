//! fleetd's life cycle (spec §1.3–§1.5): start-up, registration, the components (engine, agent, API), the
//! monitor that restarts them when this machine's presence lease is lost, SIGHUP reloads and graceful shutdown —
//! a purge when fleet stops for good, adoption by the next process when it restarts ([`super::adoption`]).
//!
//! The API listeners and the agent outlive every restart: a reload or a monitor restart never closes a listener
//! and never stops a unit. Until the components run, the API answers 503.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::adoption::{Exit, PRESENCE_FILE, PresenceRecord, exit_for_job};
use super::config::{self, Config, ConfigError, Loaded};
use super::signals::{Request, Signals};
use crate::agent::adoption::record_dir;
use crate::agent::{Agent, AgentConfig};
use crate::api::Api;
use crate::api::listen::{self, ListenAddress, Listener};
use crate::machine::identity;
use fleet_core::model::MachineState;
use fleet_registry::{AgentSession, EtcdConfig, LeaseKeeper, Reflector, Registry, RegistryError};
use fleet_systemd::{Bus, Systemd};

/// How long a graceful shutdown may spend stopping units.
const PURGE_DEADLINE: Duration = Duration::from_secs(60);
/// Bound on the registry calls of a shutdown, so an unreachable etcd cannot hold fleetd up.
const SHUTDOWN_REGISTRY_DEADLINE: Duration = Duration::from_secs(3);
/// Bound on asking systemd, at SIGTERM, whether fleet is being restarted.
const OWN_JOB_DEADLINE: Duration = Duration::from_secs(2);
/// Registration retries: from [`FIRST_BACKOFF`], doubling to [`MAX_BACKOFF`]. Capped low (the original: one minute)
/// so that a fleetd registers again within about a second of etcd's return, however long etcd was away; the cost
/// is one connection attempt per second per machine during an outage.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Identity(#[from] identity::IdentityError),
    #[error("connecting to systemd: {0}")]
    Systemd(#[from] fleet_systemd::SystemdError),
    #[error("starting the agent: {0}")]
    Agent(#[from] crate::agent::AgentError),
    #[error(transparent)]
    Listen(#[from] listen::ListenError),
    #[error("installing signal handlers: {0}")]
    Signals(std::io::Error),
}

/// How one run of the components ended.
enum RunEnd {
    /// Shut down (purge, or leave the machine for adoption); with the registry connection and presence lease when this machine was
    /// registered.
    Shutdown(Option<Box<Registered>>, Exit),
    /// Reload the configuration; the registration is handed on so the machine stays registered throughout.
    Reload(Box<Registered>),
    /// The cluster switched to layout 2: run the components again on scoped views, still registered.
    Relayout(Box<Registered>),
    MonitorTriggered,
}

/// Why the components of one run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Shutdown(Exit),
    Reload,
    Relayout,
    Monitor,
}

/// A live registration: this machine's session (the connection, bound to the presence lease) and the lease.
struct Registered {
    session: AgentSession,
    presence: LeaseKeeper,
    /// The memory lease (`rollout::REMEMBER_DEPARTED`) the machine's global units are published under, so that they
    /// outlive it; `None` when etcd did not grant one (rollouts then forget this machine when it leaves).
    memory: Option<LeaseKeeper>,
}

/// Everything that survives restarts of the components.
struct Daemon {
    config_path: Option<PathBuf>,
    loaded: Loaded,
    machine_id: String,
    agent: Agent,
    /// Asked at SIGTERM whether fleet is being restarted.
    systemd: Systemd,
    api: watch::Sender<Option<Arc<Api>>>,
    /// TLS of the API's TCP listeners, re-read from the configured files on every reload (certificate rotation).
    api_tls: watch::Sender<Option<crate::api::serve::ServerTls>>,
    signals: Signals,
    /// The presence lease of the last successful registration: kept when registering again after a monitor
    /// restart if etcd still holds it, else revoked if it still holds our machine key.
    previous_presence: Option<i64>,
    /// A registration handed on by a reload, used by the next run instead of registering again.
    carried: Option<Registered>,
    /// The etcd connection of the last registration and the settings it was made with, used again by the next
    /// registration while they are unchanged.
    connection: Option<(EtcdConfig, Registry)>,
    /// The presence lease the previous fleetd process of this machine left (`presence.json`), adopted at the first
    /// registration when etcd still holds it.
    inherited: Option<i64>,
}

/// Runs fleetd until a shutdown signal; returns the process exit status.
pub async fn run(config_path: Option<PathBuf>) -> Result<(), ServerError> {
    let loaded = load_config(config_path.as_deref())?;
    let ttl = loaded.config.agent_ttl()?;
    let machine_id = identity::read_machine_id(std::path::Path::new(identity::MACHINE_ID_PATH))?;
    let signals = Signals::install().map_err(ServerError::Signals)?;
    let bus = if loaded.config.systemd_user { Bus::User } else { Bus::System };
    let systemd = Systemd::connect(bus).await?;
    let units_dir = PathBuf::from(&loaded.config.units_directory);
    let inherited = std::fs::read(record_dir(&units_dir).join(PRESENCE_FILE))
        .ok()
        .and_then(|bytes| PresenceRecord::lease_for(&bytes, &machine_id));
    let agent = Agent::new(AgentConfig { machine_id: machine_id.clone(), units_dir, ttl }, systemd.clone()).await?;

    let listeners = api_listeners(&loaded.config).await?;
    let (api, api_rx) = watch::channel(None);
    let (api_tls, api_tls_rx) = watch::channel(api_tls(&loaded.config)?);
    let api_stop = CancellationToken::new();
    let serving = tokio::spawn(crate::api::serve::serve_secured(listeners, api_rx, api_tls_rx, api_stop.clone()));
    tokio::spawn(super::heap::trim_freed_memory(api_stop.clone()));

    let mut daemon = Daemon {
        config_path,
        loaded,
        machine_id,
        agent,
        systemd,
        api,
        api_tls,
        signals,
        previous_presence: None,
        carried: None,
        connection: None,
        inherited,
    };
    loop {
        match daemon.run_components().await {
            RunEnd::Reload(registered) => {
                let before = daemon.loaded.config.clone();
                daemon.reload();
                daemon.carry_over(*registered, &before).await;
            }
            RunEnd::Relayout(registered) => daemon.carried = Some(*registered),
            RunEnd::MonitorTriggered => {
                tracing::error!("Server monitor triggered: Monitor timed out before successful heartbeat");
            }
            RunEnd::Shutdown(registered, Exit::Purge) => {
                daemon.shutdown(registered.map(|r| *r)).await;
                break;
            }
            RunEnd::Shutdown(registered, Exit::Restart) => {
                daemon.hand_off(registered.map(|r| *r));
                break;
            }
        }
    }
    api_stop.cancel();
    let _ = serving.await;
    Ok(())
}

fn load_config(path: Option<&std::path::Path>) -> Result<Loaded, ConfigError> {
    let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("FLEET_")).collect();
    let loaded = config::load(path, &env)?;
    tracing::info!("{}", loaded.source.describe());
    for warning in &loaded.warnings {
        tracing::error!("{warning}");
    }
    Ok(loaded)
}

/// Sockets passed by systemd; else the configured ones (the original served only activated sockets).
async fn api_listeners(config: &Config) -> Result<Vec<Listener>, ServerError> {
    let activated = listen::activated()?;
    if !activated.is_empty() {
        return Ok(activated);
    }
    let mut listeners = Vec::new();
    for text in &config.api_listeners {
        let address = text.parse::<ListenAddress>()?;
        listeners.push(listen::bind(&address).await?);
        if let ListenAddress::Unix(path) = &address {
            listen::restrict_socket(path, config.api_socket_mode, &config.api_socket_group)?;
        }
    }
    Ok(listeners)
}

/// The API's TLS settings from the configured files, read now; `None` when TLS is not configured.
fn api_tls(config: &Config) -> Result<Option<crate::api::serve::ServerTls>, ConfigError> {
    let Some(files) = config.api_tls()? else { return Ok(None) };
    let server = fleet_tls::server_config(&files).map_err(|e| ConfigError::ApiTls(e.to_string()))?;
    Ok(Some(crate::api::serve::ServerTls::new(server, files.client_ca.is_some())))
}

fn etcd_config(config: &Config) -> EtcdConfig {
    let user = (!config.etcd_username.is_empty()).then(|| (config.etcd_username.clone(), config.etcd_password.clone()));
    EtcdConfig {
        endpoints: config.etcd_servers.clone(),
        prefix: config.etcd_key_prefix.clone(),
        request_timeout: config.etcd_request_timeout(),
        user,
        tls: fleet_tls::ClientFiles {
            ca: (!config.etcd_cafile.is_empty()).then(|| PathBuf::from(&config.etcd_cafile)),
            cert: (!config.etcd_certfile.is_empty()).then(|| PathBuf::from(&config.etcd_certfile)),
            key: (!config.etcd_keyfile.is_empty()).then(|| PathBuf::from(&config.etcd_keyfile)),
        },
    }
}

/// Doubling backoff, capped at [`MAX_BACKOFF`] (spec §1.3 step 7 with a lower cap, issue 14).
fn next_backoff(current: Duration) -> Duration {
    (current * 2).min(MAX_BACKOFF)
}

impl Daemon {
    fn config(&self) -> &Config {
        &self.loaded.config
    }

    fn local_state(&self) -> MachineState {
        let c = self.config();
        identity::local_state(self.machine_id.clone(), &c.public_ip, c.metadata.clone(), c.disable_engine)
    }

    /// Waits `delay` unless a signal asks for something first.
    async fn pause(&mut self, delay: Duration) -> Option<RunEnd> {
        tokio::select! {
            _ = tokio::time::sleep(delay) => None,
            request = self.signals.next() => match request {
                Request::Shutdown => Some(RunEnd::Shutdown(None, exit_on_term(&self.systemd).await)),
                Request::Restart => Some(RunEnd::Shutdown(None, Exit::Restart)),
                // Not registered yet: nothing to hand on; the next attempt uses the new configuration.
                Request::Reload => {
                    self.reload();
                    None
                }
                Request::Dump => None,
            },
        }
    }

    /// Connects, registers this machine under a fresh presence lease (or keeps the one a reload handed on), runs
    /// the components until something ends them. Registration is retried forever with backoff; signals are
    /// honoured meanwhile.
    async fn run_components(&mut self) -> RunEnd {
        let ttl = self.config().agent_ttl().unwrap_or(Duration::from_secs(30));
        // A carried registration that cannot be refreshed means etcd stopped answering this machine: that is the
        // monitor's case (a heartbeat that did not succeed), reported as such before registering again.
        let carried = match self.carried.take() {
            Some(registered) => match self.refresh(registered).await {
                Some(registered) => Some(registered),
                None => return RunEnd::MonitorTriggered,
            },
            None => None,
        };
        let Registered { session, presence, memory } = match carried {
            Some(registered) => registered,
            None => {
                let mut backoff = FIRST_BACKOFF;
                loop {
                    match self.register(ttl).await {
                        Ok(registered) => break registered,
                        Err(err) => {
                            tracing::error!(
                                "Server register machine failed: {err}, retrying in {:.2} sec.",
                                backoff.as_secs_f64()
                            );
                            if let Some(end) = self.pause(backoff).await {
                                return end;
                            }
                            backoff = next_backoff(backoff);
                        }
                    }
                }
            }
        };
        let registry = Registry::clone(&session);
        // The views (docs/fleetd.md, "Full views"): in a cluster at layout 2 the agent's is scoped to this machine,
        // and a full one is kept only with `full_view`; the engine then keeps its own (a full one while it leads)
        // and the API one while it is used. Before the switch the agent needs the full view, which the others
        // share; the components start again on scoped views when it shows the switch.
        let layout = match registry.ensure_layout_version().await {
            Ok(layout) => layout,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the registry layout; running on a full view for now");
                fleet_registry::LAYOUT_VERSION
            }
        };
        let scoped = crate::agent::view::scoped_view(&registry, &self.machine_id, presence.id(), layout);
        let full = (scoped.is_none() || self.config().full_view).then(|| Arc::new(Reflector::start(&registry)));
        // Without a kept full view, the engine (while it leads) and the API (while it is used) share one.
        let full_views = fleet_registry::SharedFullView::new(&registry);
        let stop = CancellationToken::new();
        let engine = crate::daemon::components::start_engine(
            self.config(),
            &self.machine_id,
            &registry,
            full.as_ref(),
            &full_views,
            stop.child_token(),
        );
        let token_limit = u16::try_from(self.config().token_limit).unwrap_or(u16::MAX);
        let api = match &full {
            Some(full) => Api::new(registry.clone(), full.clone(), token_limit),
            None => Api::on_demand(full_views, token_limit),
        };
        self.api.send_replace(Some(Arc::new(api)));
        tracing::info!(machine = %self.machine_id, lease = format_args!("{:x}", presence.id()), layout,
            full_view = full.is_some(), "fleet server running");

        let debug = self.agent.debug_handle();
        let own_writes = scoped.as_ref().and_then(Reflector::own_writes);
        let agent_on_full_view = scoped.is_none();
        let agent_view = match (scoped, &full) {
            (Some(scoped), _) => Arc::new(scoped),
            (None, Some(full)) => full.clone(),
            (None, None) => Arc::new(Reflector::start(&registry)),
        };
        let switched = async {
            match &full {
                Some(full) if agent_on_full_view => crate::agent::view::layout_2_reached(full.subscribe()).await,
                _ => std::future::pending().await,
            }
        };
        let ended = {
            let session = session.clone().with_own_writes(own_writes.clone());
            let agent_run =
                self.agent.run(session, agent_view.subscribe(), presence.alive_until(), layout, stop.child_token());
            tokio::pin!(agent_run);
            tokio::pin!(switched);
            loop {
                tokio::select! {
                    result = &mut agent_run => {
                        if let Err(err) = result {
                            tracing::error!(error = %err, "agent stopped; restarting the components");
                        }
                        break Ended::Monitor;
                    }
                    () = &mut switched => {
                        tracing::info!("the registry is at layout 2: starting the components again on scoped views");
                        break Ended::Relayout;
                    }
                    reason = presence.lost() => {
                        tracing::warn!(%reason, "presence lease lost");
                        break Ended::Monitor;
                    }
                    request = self.signals.next() => match request {
                        Request::Shutdown => break Ended::Shutdown(exit_on_term(&self.systemd).await),
                        Request::Restart => break Ended::Shutdown(Exit::Restart),
                        Request::Reload => break Ended::Reload,
                        Request::Dump => dump(&debug, &agent_view),
                    },
                }
            }
        };
        // A reload keeps serving with the old handler until the new one is installed; otherwise 503 meanwhile.
        if !matches!(ended, Ended::Reload | Ended::Relayout) {
            self.api.send_replace(None);
        }
        stop.cancel();
        if let Some(engine) = engine
            && tokio::time::timeout(SHUTDOWN_REGISTRY_DEADLINE, engine).await.is_err()
        {
            tracing::warn!("engine did not stop in time");
        }
        match ended {
            Ended::Shutdown(exit) => RunEnd::Shutdown(Some(Box::new(Registered { session, presence, memory })), exit),
            Ended::Reload => RunEnd::Reload(Box::new(Registered { session, presence, memory })),
            Ended::Relayout => RunEnd::Relayout(Box::new(Registered { session, presence, memory })),
            Ended::Monitor => RunEnd::MonitorTriggered,
        }
    }

    /// Keeps a registration across a reload when the new configuration still points at the same etcd; otherwise
    /// retires it so the next run registers afresh.
    async fn carry_over(&mut self, registered: Registered, before: &Config) {
        let (old, new) = (etcd_config(before), etcd_config(self.config()));
        let same_etcd = old.endpoints == new.endpoints
            && old.prefix == new.prefix
            && old.user == new.user
            && old.tls == new.tls
            && before.agent_ttl == self.config().agent_ttl;
        if same_etcd && registered.presence.is_alive() {
            self.carried = Some(registered);
            return;
        }
        if tokio::time::timeout(SHUTDOWN_REGISTRY_DEADLINE, registered.presence.revoke()).await.is_err() {
            tracing::warn!("etcd did not answer; the old presence lease will expire on its own");
        }
    }

    /// Re-publishes this machine's state under a carried registration (metadata may have changed).
    async fn refresh(&self, registered: Registered) -> Option<Registered> {
        match registered
            .session
            .register_machine_running(&self.local_state(), registered.presence.id(), &fleet_core::layout::RUNS)
            .await
        {
            Ok(_) => Some(registered),
            Err(err) => {
                tracing::warn!(error = %err, "refreshing the kept registration failed; registering again");
                None
            }
        }
    }

    /// Connects to etcd and registers this machine: under the presence lease it held before while etcd still holds
    /// it, else under a new one.
    async fn register(&mut self, ttl: Duration) -> Result<Registered, RegistryError> {
        // The connection of the last registration, not a new one: its balancer has already taken dead etcd
        // members out, while a new one starts over with every endpoint and routes requests to a dead member until
        // its first probe (after an etcd leader was killed, re-registering on new connections failed for 7 s,
        // long enough for the presence lease to expire).
        let etcd = etcd_config(self.config());
        let registry = match &self.connection {
            Some((settings, registry)) if *settings == etcd => registry.clone(),
            _ => {
                let registry = Registry::connect(&etcd).await?;
                self.connection = Some((etcd, registry.clone()));
                registry
            }
        };
        registry.ensure_layout_version().await?;
        // A presence lease this machine held before — the previous fleetd process's, or this process's own, given
        // up when no renewal succeeded within a TTL — is kept while etcd still holds it: its keys (presence, unit
        // states, launched markers) never vanished, so no engine saw this machine leave. Revoking it instead deleted
        // them: during an etcd leader election that outlasted the TTL, the engine then moved every unit of this
        // machine away and the agent stopped them.
        let earlier = match self.inherited.take() {
            Some(lease) => Some((lease, "the previous fleetd process's")),
            None => self.previous_presence.map(|lease| (lease, "this machine's last")),
        };
        let presence = match earlier {
            Some((lease, whose)) => match LeaseKeeper::adopt(&registry, lease, ttl).await? {
                Some(kept) => {
                    tracing::info!(
                        lease = format_args!("{lease:x}"),
                        "keeping {whose} presence lease: etcd still holds it"
                    );
                    kept
                }
                None => {
                    tracing::info!(
                        lease = format_args!("{lease:x}"),
                        "{whose} presence lease is gone; registering afresh"
                    );
                    LeaseKeeper::grant(&registry, ttl).await?
                }
            },
            None => LeaseKeeper::grant(&registry, ttl).await?,
        };
        let mut result =
            registry.register_machine_running(&self.local_state(), presence.id(), &fleet_core::layout::RUNS).await;
        if let Err(RegistryError::DuplicateMachine { lease, .. }) = &result
            && Some(*lease) == self.previous_presence
        {
            // Our own earlier lease outlived the outage (etcd keeps leases across restarts): retire it.
            tracing::info!(lease = format_args!("{lease:x}"), "revoking this machine's previous presence lease");
            if let Err(err) = registry.revoke_lease(*lease).await {
                tracing::warn!(error = %err, "revoking the previous presence lease failed");
            }
            result =
                registry.register_machine_running(&self.local_state(), presence.id(), &fleet_core::layout::RUNS).await;
        }
        match result.and_then(|_| AgentSession::new(registry.clone(), &self.machine_id, presence.id())) {
            Ok(session) => {
                self.previous_presence = Some(presence.id());
                self.record_presence(presence.id());
                let memory = match LeaseKeeper::grant(&registry, fleet_core::rollout::REMEMBER_DEPARTED).await {
                    Ok(memory) => Some(memory),
                    Err(err) => {
                        tracing::warn!(error = %err, "no memory lease: rollouts will not count this machine once it left");
                        None
                    }
                };
                let session = match &memory {
                    Some(m) => session.with_memory(m.id()),
                    None => session,
                };
                Ok(Registered { session, presence, memory })
            }
            Err(err) => {
                let _ = presence.revoke().await;
                Err(err)
            }
        }
    }

    fn reload(&mut self) {
        let path = self.config_path.clone().unwrap_or_else(|| PathBuf::from(config::DEFAULT_CONFIG_PATH));
        tracing::info!("Reloading configuration from {}", path.display());
        match load_config(self.config_path.as_deref()) {
            Ok(loaded) if loaded.config.agent_ttl().is_ok() => match api_tls(&loaded.config) {
                Ok(tls) => {
                    tracing::info!(tls = tls.is_some(), "API TLS settings re-read");
                    self.api_tls.send_replace(tls);
                    self.loaded = loaded;
                }
                Err(err) => tracing::error!(error = %err, "new configuration refused; keeping the old one"),
            },
            Ok(loaded) => {
                tracing::error!(agent_ttl = %loaded.config.agent_ttl, "new configuration refused: bad agent_ttl")
            }
            Err(err) => tracing::error!(error = %err, "new configuration refused; keeping the old one"),
        }
    }

    fn presence_path(&self) -> PathBuf {
        record_dir(std::path::Path::new(&self.config().units_directory)).join(PRESENCE_FILE)
    }

    /// Writes `presence.json` for the next process of this machine (also one started after a crash).
    fn record_presence(&self, lease: i64) {
        let path = self.presence_path();
        let record = PresenceRecord { machine_id: self.machine_id.clone(), lease };
        let tmp = path.with_extension("tmp");
        if let Err(err) = std::fs::write(&tmp, record.encode()).and_then(|()| std::fs::rename(&tmp, &path)) {
            tracing::warn!(path = %path.display(), error = %err, "cannot record the presence lease; a restart of fleetd will register afresh");
        }
    }

    /// Restart without disruption: leave every unit running, its states and launched markers published and the
    /// presence lease unrevoked (dropping the keeper only stops keep-alives); the next fleetd process adopts them
    /// (`presence.json`, `agent-state.json`). Stopping the components has already resigned engine leadership.
    fn hand_off(&mut self, registered: Option<Registered>) {
        let lease = registered.as_ref().map(|r| r.presence.id());
        tracing::info!(
            units = self.agent.loaded_count(),
            lease = lease.map(|l| format!("{l:x}")).unwrap_or_default(),
            "handing this machine's units over to the next fleetd process"
        );
        if let Some(lease) = lease {
            self.record_presence(lease);
        }
    }

    /// Graceful shutdown (spec §1.5): stop and unload every unit here, then drop this machine's presence, states
    /// and launched markers at once by revoking its lease.
    async fn shutdown(&mut self, registered: Option<Registered>) {
        tracing::info!("Gracefully shutting down");
        let presence_file = self.presence_path();
        if let Err(err) = std::fs::remove_file(&presence_file)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %presence_file.display(), error = %err, "cannot remove the presence record");
        }
        let session = registered.as_ref().map(|r| &r.session);
        if let Err(err) = self.agent.purge(session, PURGE_DEADLINE).await {
            tracing::error!(error = %err, "purging units failed");
        }
        if let Some(Registered { presence, memory, .. }) = registered {
            // Stopped on purpose, its units purged: rollouts need not wait for this machine.
            if let Some(memory) = memory
                && tokio::time::timeout(SHUTDOWN_REGISTRY_DEADLINE, memory.revoke()).await.is_err()
            {
                tracing::warn!("etcd did not answer; the memory lease will expire on its own");
            }
            match tokio::time::timeout(SHUTDOWN_REGISTRY_DEADLINE, presence.revoke()).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, "could not revoke the presence lease"),
                Err(_) => tracing::warn!("etcd did not answer; the presence lease will expire on its own"),
            }
        }
    }
}

/// How to leave on SIGTERM: leave the machine for adoption when fleet's own systemd unit is being restarted, else purge.
async fn exit_on_term(systemd: &Systemd) -> Exit {
    let job = match tokio::time::timeout(OWN_JOB_DEADLINE, systemd.own_unit_job()).await {
        Ok(Ok(job)) => job,
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "cannot ask systemd whether fleet is restarting; purging");
            None
        }
        Err(_) => {
            tracing::warn!("systemd did not say in time whether fleet is restarting; purging");
            None
        }
    };
    let exit = exit_for_job(job.as_deref());
    tracing::info!(job = job.as_deref().unwrap_or("none"), ?exit, "shutdown requested");
    exit
}

/// SIGUSR1 (spec §1.5): the agent's caches, plus this fleetd's view of the registry and what its allocator holds
/// (`Heap`, bytes: what a resident size is made of), as one JSON line on stdout.
fn dump(agent: &crate::agent::DebugHandle, reflector: &Reflector) {
    let snapshot = reflector.snapshot();
    let mut dump = agent.dump();
    if let Some(object) = dump.as_object_mut() {
        object.insert(
            "Registry".into(),
            serde_json::json!({"Revision": snapshot.revision(), "Connected": snapshot.is_connected(), "Leader": snapshot.leader()}),
        );
        if let Some(heap) = super::heap::stats() {
            object.insert(
                "Heap".into(),
                serde_json::json!({"InUse": heap.in_use, "Free": heap.free, "TopFree": heap.top_free}),
            );
        }
    }
    println!("{dump}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_top_future_stays_small() {
        // It sits on the main thread's stack for the process's life (block_on), so its pages stay resident: at
        // 146 KB (release) it was most of the 452 KB resident main stack. Not polled: creating it does nothing.
        let run = run(None);
        let size = std::mem::size_of_val(&run);
        assert!(size <= 48 * 1024, "fleetd's top future takes {size} bytes: box the large futures it awaits");
    }

    #[test]
    fn backoff_doubles_to_a_second() {
        let mut d = FIRST_BACKOFF;
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(d.as_millis());
            d = next_backoff(d);
        }
        assert_eq!(seen, vec![250, 500, 1000, 1000, 1000]);
    }

    #[test]
    fn no_retry_delay_exceeds_the_cap_whatever_the_delay_before() {
        for ms in (0..=120_000).step_by(125) {
            let next = next_backoff(Duration::from_millis(ms));
            assert!(next <= MAX_BACKOFF, "after {ms} ms the next delay is {next:?}, above the cap {MAX_BACKOFF:?}");
        }
    }

    #[test]
    fn etcd_config_from_fleet_conf() {
        let config = Config {
            etcd_servers: vec!["http://etcd:2379".into()],
            etcd_key_prefix: "/x/".into(),
            etcd_username: "u".into(),
            etcd_password: "p".into(),
            ..Config::default()
        };
        let etcd = etcd_config(&config);
        assert_eq!(etcd.endpoints, vec!["http://etcd:2379"]);
        assert_eq!(etcd.prefix, "/x/");
        assert_eq!(etcd.user, Some(("u".into(), "p".into())));
        assert_eq!(etcd.request_timeout, Duration::from_secs(1));
    }
}

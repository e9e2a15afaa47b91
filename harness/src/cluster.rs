//! A fleet cluster: its own network, etcd, N machines; fleetctl against them; wait helpers; cleanup on drop.
//!
//! A cluster is handed out (and a machine is back after a restart or a replacement) only once the API of every
//! machine running fleetd answers a unit list, so the first command never meets a starting fleetd's `503`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{self, Binaries, BinaryError};
use crate::container::Placement;
use crate::etcd::{Etcd, EtcdError, Filled, Members};
use crate::fleetctl::{self, EndpointVia, FleetctlError};
use crate::image::{self, ImageError};
use crate::labels::RunId;
use crate::machine::{Machine, MachineError, MachineSpec};
use crate::network::{self, NetworkError};
use crate::output::Output;
use crate::reap::{self, Scope};
use crate::ssh::{AgentError, SshAgent};
use crate::state::{ClusterState, MachineState};
use crate::wait::{self, Check, UnitFileState, UnitState, WaitError, WaitOptions, wait_for};

/// Anything that can go wrong with a cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Binary(#[from] BinaryError),
    #[error(transparent)]
    Network(#[from] NetworkError),
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error(transparent)]
    Fleetctl(#[from] FleetctlError),
    #[error(transparent)]
    Wait(#[from] WaitError),
    #[error("no machine in slot {0}")]
    NoSuchMachine(usize),
    #[error("no etcd member with index {0}")]
    NoSuchEtcdMember(usize),
    #[error("temporary directory: {0}")]
    TempDir(std::io::Error),
    #[error("a fleet unit is active on more than one machine: {0}")]
    ActiveTwice(String),
    #[error("ssh agent: {0}")]
    Ssh(#[from] AgentError),
    #[error("TLS certificates: {0}")]
    Pki(#[from] crate::pki::PkiError),
}

/// What runs as fleetd in the machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fleet {
    /// No fleet at all: machines boot systemd only.
    Off,
    /// This workspace's `fleetd` (or `FLEETD_BIN`).
    Default,
    /// A stand-in: a shell script that logs its arguments and sleeps, for testing the harness without fleetd.
    StandIn,
    /// The given fleetd binary.
    Binary(PathBuf),
}

/// The script used by [`Fleet::StandIn`].
pub const STAND_IN: &str = "#!/bin/sh\necho \"stand-in fleetd $* LISTEN_FDS=$LISTEN_FDS LISTEN_FDNAMES=$LISTEN_FDNAMES\"\nexec sleep infinity\n";

/// Builds a [`Cluster`]: `Cluster::builder().machines(3).agent_ttl("3s").start().await?`.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    machines: usize,
    metadata: BTreeMap<usize, String>,
    config: BTreeMap<String, String>,
    machine_config: BTreeMap<usize, BTreeMap<String, String>>,
    machine_ids: BTreeMap<usize, String>,
    fleet: Fleet,
    fleetctl: Option<PathBuf>,
    wait: WaitOptions,
    boot: WaitOptions,
    keep: bool,
    tls: bool,
    etcd_members: usize,
    etcd_quota_bytes: Option<u64>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            machines: 1,
            metadata: BTreeMap::new(),
            config: BTreeMap::new(),
            machine_config: BTreeMap::new(),
            machine_ids: BTreeMap::new(),
            fleet: Fleet::Default,
            fleetctl: None,
            wait: WaitOptions::default(),
            boot: WaitOptions::secs(60),
            keep: false,
            tls: false,
            etcd_members: 1,
            etcd_quota_bytes: None,
        }
    }
}

impl ClusterBuilder {
    /// Number of machines (default 1).
    pub fn machines(mut self, n: usize) -> Self {
        self.machines = n;
        self
    }

    /// Extra fleet metadata of machine `slot` (1-based), `k=v[,k=v...]`, after the default `hostname=m<slot>`.
    pub fn metadata(mut self, slot: usize, metadata: &str) -> Self {
        self.metadata.insert(slot, metadata.to_string());
        self
    }

    /// Sets any fleet.conf key (overriding the cluster's own, e.g. `agent_ttl`).
    pub fn config(mut self, key: &str, value: &str) -> Self {
        self.config.insert(key.to_string(), value.to_string());
        self
    }

    /// Sets a fleet.conf key of machine `slot` only (over the cluster-wide value), e.g. a `public_ip` to publish.
    pub fn machine_config(mut self, slot: usize, key: &str, value: &str) -> Self {
        self.machine_config.entry(slot).or_default().insert(key.to_string(), value.to_string());
        self
    }

    /// The machine-id of machine `slot` (32 hex digits) instead of a random one, e.g. to reproduce a recorded
    /// cluster; a replacement of that machine still gets a fresh one.
    pub fn machine_id(mut self, slot: usize, id: &str) -> Self {
        self.machine_ids.insert(slot, id.to_string());
        self
    }

    /// fleet.conf `agent_ttl` (a Go duration; default `3s` like the original's tests).
    pub fn agent_ttl(self, ttl: &str) -> Self {
        self.config("agent_ttl", ttl)
    }

    /// fleet.conf `engine_reconcile_interval` in seconds.
    pub fn engine_reconcile_interval(self, secs: f64) -> Self {
        self.config("engine_reconcile_interval", &secs.to_string())
    }

    /// fleet.conf `verbosity`.
    pub fn verbosity(self, v: u32) -> Self {
        self.config("verbosity", &v.to_string())
    }

    /// What runs as fleetd (default: this workspace's build or `FLEETD_BIN`).
    pub fn fleet(mut self, fleet: Fleet) -> Self {
        self.fleet = fleet;
        self
    }

    /// The fleetctl binary (default: this workspace's build or `FLEETCTL_BIN`).
    pub fn fleetctl_bin(mut self, path: impl Into<PathBuf>) -> Self {
        self.fleetctl = Some(path.into());
        self
    }

    /// Deadline and poll interval of the wait helpers.
    pub fn wait(mut self, wait: WaitOptions) -> Self {
        self.wait = wait;
        self
    }

    /// Deadline for etcd and each machine to come up (default 60 s).
    pub fn boot_timeout(mut self, wait: WaitOptions) -> Self {
        self.boot = wait;
        self
    }

    /// A secure cluster: a throwaway CA ([`crate::pki`]) signs etcd's and every fleetd's certificates; etcd and
    /// the API serve TLS only and require client certificates; fleetctl runs get the admin role's certificate.
    pub fn tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// Runs etcd as a cluster of `n` members (default 1); every fleetd gets all of their endpoints.
    pub fn etcd_members(mut self, n: usize) -> Self {
        self.etcd_members = n.max(1);
        self
    }

    /// Starts etcd with a backend space quota of `bytes` (`--quota-backend-bytes`; etcd's default is 2 GiB), so
    /// that a test can fill it ([`Cluster::fill_etcd`]) and recover it ([`Cluster::compact_etcd`],
    /// [`Cluster::defrag_etcd`], [`Cluster::disarm_etcd_alarms`]).
    pub fn etcd_quota_bytes(mut self, bytes: u64) -> Self {
        self.etcd_quota_bytes = Some(bytes);
        self
    }

    /// Marks the cluster as long-lived (`fleet-harness up`): `reap` keeps it; only `down` removes it.
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// Starts network, etcd and the machines (in parallel) and waits until each machine runs systemd and, where
    /// fleetd runs, until its API answers a unit list. On error everything started so far is removed.
    pub async fn start(self) -> Result<Cluster, ClusterError> {
        let image = image::ensure_present().await?;
        let run = RunId::random();
        let tmp = tempfile::Builder::new()
            .prefix(&format!("fleet-harness-{run}-"))
            .tempdir()
            .map_err(ClusterError::TempDir)?;
        let fleetd = match &self.fleet {
            Fleet::Off => None,
            Fleet::Default => Some(config::locate("fleetd", config::FLEETD_ENV)?),
            Fleet::Binary(p) => Some(p.clone()),
            Fleet::StandIn => Some(write_stand_in(tmp.path()).map_err(ClusterError::TempDir)?),
        };
        let fleetctl = match &self.fleetctl {
            Some(p) => p.clone(),
            // fleetctl is only needed once a test calls it; a missing one is reported then.
            None => config::locate("fleetctl", config::FLEETCTL_ENV).unwrap_or_else(|_| PathBuf::from("fleetctl")),
        };
        let agent = SshAgent::start(tmp.path(), !self.keep)?;
        let network = format!("{run}-net");
        let etcd_name = format!("{run}-etcd");
        let pki = match self.tls {
            true => Some(std::sync::Arc::new(crate::pki::ClusterPki::new(&tmp.path().join("tls"), &etcd_name)?)),
            false => None,
        };
        let place = Placement { image, run: run.clone(), keep: self.keep, network: network.clone() };
        let mut cluster = Cluster {
            run: run.clone(),
            place,
            etcd: Vec::new(),
            machines: Vec::new(),
            binaries: Binaries { fleetd: fleetd.clone().unwrap_or_default(), fleetctl },
            fleetd,
            conf: self.config.clone(),
            machine_conf: self.machine_config.clone(),
            machine_ids: self.machine_ids.clone(),
            serves_api: matches!(self.fleet, Fleet::Default | Fleet::Binary(_)),
            wait: self.wait,
            boot: self.boot,
            tmp: Some(tmp),
            ssh: Some(agent),
            pki,
            etcd_quota_bytes: self.etcd_quota_bytes,
            detached: false,
        };
        tracing::info!(run = %run, machines = self.machines, "starting cluster");
        let subnet = network::create(&network, &run, self.keep).await?;
        tracing::debug!(run = %run, %subnet, "network");
        let members = Members::new(&etcd_name, self.etcd_members).with_quota(self.etcd_quota_bytes);
        cluster.etcd = Etcd::start_members(&cluster.place, &members, self.boot, cluster.pki.as_deref()).await?;
        let mut set = tokio::task::JoinSet::new();
        for slot in 1..=self.machines {
            let spec = cluster.spec(slot, self.metadata.get(&slot).map(String::as_str));
            set.spawn(Machine::create(spec, None));
        }
        let mut first_err = None;
        while let Some(res) = set.join_next().await {
            match res.expect("machine start task does not panic") {
                Ok(m) => cluster.machines.push(m),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        cluster.machines.sort_by_key(Machine::slot);
        if let Some(e) = first_err {
            return Err(e.into());
        }
        Ok(cluster)
    }
}

fn write_stand_in(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fleetd");
    std::fs::write(&path, STAND_IN)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// A running cluster. Dropping it (also while panicking) removes its containers, network and temp files.
pub struct Cluster {
    run: RunId,
    place: Placement,
    /// The etcd members (one unless [`ClusterBuilder::etcd_members`] asked for more).
    etcd: Vec<Etcd>,
    machines: Vec<Machine>,
    binaries: Binaries,
    fleetd: Option<PathBuf>,
    conf: BTreeMap<String, String>,
    /// Per-slot fleet.conf keys over `conf`.
    machine_conf: BTreeMap<usize, BTreeMap<String, String>>,
    /// Chosen machine-ids by slot.
    machine_ids: BTreeMap<usize, String>,
    /// Whether fleetd serves the API (this workspace's or a given binary; not a stand-in).
    serves_api: bool,
    wait: WaitOptions,
    boot: WaitOptions,
    tmp: Option<tempfile::TempDir>,
    /// The key authorised in every machine and the agent holding it (dropped after the machines).
    ssh: Option<SshAgent>,
    /// The certificates of a TLS cluster.
    pki: Option<std::sync::Arc<crate::pki::ClusterPki>>,
    /// etcd's `--quota-backend-bytes`, when the builder set one.
    etcd_quota_bytes: Option<u64>,
    detached: bool,
}

impl Cluster {
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    fn spec(&self, slot: usize, extra_metadata: Option<&str>) -> MachineSpec {
        let hostname = format!("m{slot}");
        let mut metadata = format!("hostname={hostname}");
        if let Some(extra) = extra_metadata.filter(|m| !m.is_empty()) {
            metadata = format!("{metadata},{extra}");
        }
        assert!(!self.etcd.is_empty(), "etcd starts before machines");
        let mut conf_overrides = self.conf.clone();
        conf_overrides.extend(self.machine_conf.get(&slot).cloned().unwrap_or_default());
        MachineSpec {
            place: self.place.clone(),
            slot,
            container_name: format!("{}-{hostname}", self.run),
            hostname,
            fleetd: self.fleetd.clone(),
            serves_api: self.serves_api,
            machine_id: self.machine_ids.get(&slot).cloned(),
            etcd_url: self.etcd.iter().map(Etcd::url).collect::<Vec<_>>().join(","),
            key_prefix: key_prefix(&self.run),
            metadata,
            conf_overrides,
            wait: self.boot,
            fleetctl: Some(self.binaries.fleetctl.clone()),
            authorized_key: self.ssh.as_ref().map(|a| a.public_key().to_string()),
            tls: self.pki.clone(),
        }
    }

    /// The certificates of a TLS cluster ([`ClusterBuilder::tls`]); `None` for a plain one.
    pub fn tls(&self) -> Option<&crate::pki::ClusterPki> {
        self.pki.as_deref()
    }

    /// The ssh-agent holding the key every machine authorises (for `core` and `root`).
    pub fn ssh_agent(&self) -> Option<&SshAgent> {
        self.ssh.as_ref()
    }

    /// The known-hosts file fleetctl uses by default in this cluster's runs (`FLEETCTL_KNOWN_HOSTS_FILE`), so that
    /// tests never touch `~/.fleetctl/known_hosts`. Not created until fleetctl records a host.
    pub fn known_hosts_file(&self) -> PathBuf {
        self.tmp.as_ref().map(|t| t.path().join("known_hosts")).unwrap_or_else(|| PathBuf::from("/dev/null"))
    }

    /// The environment every fleetctl run of this cluster gets: `SSH_AUTH_SOCK` (the cluster's agent) and
    /// `FLEETCTL_KNOWN_HOSTS_FILE` ([`Self::known_hosts_file`]); flags given to fleetctl override the latter. In a
    /// TLS cluster also `FLEETCTL_CA_FILE`, `FLEETCTL_CERT_FILE`, `FLEETCTL_KEY_FILE` (the admin role).
    pub fn fleetctl_env(&self) -> Vec<(String, String)> {
        let mut env = vec![("FLEETCTL_KNOWN_HOSTS_FILE".to_string(), self.known_hosts_file().display().to_string())];
        if let Some(a) = &self.ssh {
            env.push(("SSH_AUTH_SOCK".to_string(), a.socket().display().to_string()));
        }
        if let Some(pki) = &self.pki {
            env.extend(pki.fleetctl_env(&pki.admin));
        }
        env
    }

    /// A fleetctl command against machine `slot` (endpoint flag, [`Self::fleetctl_env`]), not started: for tests
    /// that stream its output or signal it.
    pub fn fleetctl_command(&self, slot: usize, args: &[&str]) -> Result<tokio::process::Command, ClusterError> {
        let m = self.machine(slot)?;
        Ok(fleetctl::command(&self.binaries.fleetctl, &m.endpoint(), EndpointVia::Flag, args, &self.fleetctl_env()))
    }

    /// The etcd key prefix of this cluster's fleet (`etcd_key_prefix` of every machine).
    pub fn key_prefix(&self) -> String {
        key_prefix(self.run_id())
    }

    /// The run id labelling every object of this cluster.
    pub fn run_id(&self) -> &RunId {
        &self.run
    }

    /// The cluster's Docker network.
    pub fn network(&self) -> &str {
        &self.place.network
    }

    /// The (first) etcd member.
    pub fn etcd(&self) -> &Etcd {
        self.etcd.first().expect("etcd present until drop")
    }

    /// Every etcd member, in member order.
    pub fn etcd_members(&self) -> &[Etcd] {
        &self.etcd
    }

    /// The index (0-based) of the etcd member that leads, as the members that answer see it; an error says what
    /// each member answered when none is known to lead.
    pub async fn etcd_leader(&self) -> Result<usize, ClusterError> {
        let mut seen = Vec::new();
        for etcd in &self.etcd {
            seen.push(etcd.status().await);
        }
        let statuses: Vec<Option<crate::etcd::MemberStatus>> = seen.iter().map(|r| r.as_ref().ok().cloned()).collect();
        crate::etcd::leader_index(&statuses).ok_or_else(|| {
            let cause = seen
                .iter()
                .zip(&self.etcd)
                .map(|(r, e)| match r {
                    Ok(s) => format!("{}: member {:x}, leader {:x}", e.name(), s.member_id, s.leader),
                    Err(err) => format!("{}: {err}", e.name()),
                })
                .collect::<Vec<_>>()
                .join("; ");
            EtcdError::Status { name: "etcd cluster".into(), cause: format!("no member leads: {cause}") }.into()
        })
    }

    /// The slot of the machine whose engine leads now (fleet's `engine/leader` key), if any machine leads.
    pub async fn engine_leader(&self) -> Result<Option<usize>, ClusterError> {
        let leader = self.etcd().get(&format!("{}engine/leader", self.key_prefix())).await?;
        Ok(leader.and_then(|id| self.machines.iter().find(|m| m.id() == id).map(Machine::slot)))
    }

    pub fn machines(&self) -> &[Machine] {
        &self.machines
    }

    /// The machine in `slot` (1-based).
    pub fn machine(&self, slot: usize) -> Result<&Machine, ClusterError> {
        self.machines.iter().find(|m| m.slot() == slot).ok_or(ClusterError::NoSuchMachine(slot))
    }

    /// The binaries in use (`fleetd` is empty when fleet is off).
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// The default wait options of this cluster's helpers.
    pub fn wait_options(&self) -> WaitOptions {
        self.wait
    }

    /// Adds a machine in the next free slot, with extra metadata; returns its slot once its API answers.
    pub async fn add_machine(&mut self, metadata: Option<&str>) -> Result<usize, ClusterError> {
        let slot = self.machines.iter().map(Machine::slot).max().unwrap_or(0) + 1;
        let m = Machine::create(self.spec(slot, metadata), None).await?;
        self.machines.push(m);
        Ok(slot)
    }

    /// Replaces the machine in `slot` by a new one with the same address and a new machine-id, like the original's
    /// `ReplaceMember`: graceful stop, removal, creation; returns once the new machine's API answers.
    pub async fn replace_machine(&mut self, slot: usize) -> Result<&Machine, ClusterError> {
        let i = self.machines.iter().position(|m| m.slot() == slot).ok_or(ClusterError::NoSuchMachine(slot))?;
        let old = &mut self.machines[i];
        let (spec, ip) = (MachineSpec { machine_id: None, ..old.spec().clone() }, old.ip().to_string());
        old.stop().await?;
        old.remove().await;
        self.machines[i] = Machine::create(spec, Some(ip)).await?;
        Ok(&self.machines[i])
    }

    /// Removes the machine in `slot` for good.
    pub async fn remove_machine(&mut self, slot: usize) -> Result<(), ClusterError> {
        let i = self.machines.iter().position(|m| m.slot() == slot).ok_or(ClusterError::NoSuchMachine(slot))?;
        let mut m = self.machines.remove(i);
        m.remove().await;
        Ok(())
    }

    /// etcd's backend space quota ([`ClusterBuilder::etcd_quota_bytes`]); `None`: etcd's default (2 GiB).
    pub fn etcd_quota_bytes(&self) -> Option<u64> {
        self.etcd_quota_bytes
    }

    /// The key [`Self::fill_etcd`] fills etcd with: outside the cluster's prefix, so no fleetd reads it.
    pub fn junk_key(&self) -> String {
        format!("/fleet_harness_junk/{}", self.run)
    }

    /// Fills etcd to its space quota: puts [`FILL_CHUNK`] bytes to [`Self::junk_key`] again and again until etcd
    /// refuses one for its quota (its `NOSPACE` alarm is raised then; every write that adds data is refused until
    /// compaction, defragmentation and a disarm). Returns how many puts it took and etcd's refusal.
    pub async fn fill_etcd(&self) -> Result<Filled, ClusterError> {
        let quota = self.etcd_quota_bytes.unwrap_or(DEFAULT_ETCD_QUOTA);
        let max_puts = (quota / FILL_CHUNK as u64) as usize * 2 + 16;
        Ok(self.etcd().fill(&self.junk_key(), FILL_CHUNK, max_puts).await?)
    }

    /// Compacts etcd's key space to its current revision (`etcdctl compact --physical`); returns the revision.
    pub async fn compact_etcd(&self) -> Result<i64, ClusterError> {
        Ok(self.etcd().compact().await?)
    }

    /// Defragments every etcd member (`etcdctl defrag`), giving back the space a compaction freed.
    pub async fn defrag_etcd(&self) -> Result<(), ClusterError> {
        for etcd in &self.etcd {
            etcd.defrag().await?;
        }
        Ok(())
    }

    /// Disarms etcd's alarms (`etcdctl alarm disarm`): a `NOSPACE` alarm, once there is room again.
    pub async fn disarm_etcd_alarms(&self) -> Result<(), ClusterError> {
        Ok(self.etcd().alarm_disarm().await?)
    }

    /// etcd's raised alarms (`etcdctl alarm list`), e.g. `["NOSPACE"]`.
    pub async fn etcd_alarms(&self) -> Result<Vec<String>, ClusterError> {
        Ok(self.etcd().alarms().await?)
    }

    /// Stops etcd, every member (its data is kept).
    pub async fn stop_etcd(&self) -> Result<(), ClusterError> {
        for etcd in &self.etcd {
            etcd.stop().await?;
        }
        Ok(())
    }

    /// Starts etcd again, every member, and waits until each is healthy (members first, then the waits: a member
    /// is healthy only once a quorum runs).
    pub async fn start_etcd(&self) -> Result<(), ClusterError> {
        for etcd in &self.etcd {
            etcd.start_container().await?;
        }
        for etcd in &self.etcd {
            etcd.wait_healthy(self.boot).await?;
        }
        Ok(())
    }

    /// Starts etcd member `index` (0-based) again after a stop or kill and waits until it is healthy.
    pub async fn start_etcd_member(&self, index: usize) -> Result<(), ClusterError> {
        let etcd = self.etcd.get(index).ok_or(ClusterError::NoSuchEtcdMember(index))?;
        Ok(etcd.start_again(self.boot).await?)
    }

    /// Runs fleetctl on the host with `--endpoint=<machine's endpoint>` (spec §11.1 `Fleetctl`).
    pub async fn fleetctl(&self, slot: usize, args: &[&str]) -> Result<Output, ClusterError> {
        let m = self.machine(slot)?;
        let env = self.fleetctl_env();
        Ok(fleetctl::run(&self.binaries.fleetctl, &m.endpoint(), EndpointVia::Flag, args, &env, None).await?)
    }

    /// Runs fleetctl with `FLEETCTL_ENDPOINT` set instead of the flag (`FleetctlWithEnv`).
    pub async fn fleetctl_with_env(&self, slot: usize, args: &[&str]) -> Result<Output, ClusterError> {
        let m = self.machine(slot)?;
        let env = self.fleetctl_env();
        Ok(fleetctl::run(&self.binaries.fleetctl, &m.endpoint(), EndpointVia::Env, args, &env, None).await?)
    }

    /// Runs fleetctl with `input` on stdin (`FleetctlWithInput`).
    pub async fn fleetctl_with_input(&self, slot: usize, input: &str, args: &[&str]) -> Result<Output, ClusterError> {
        let m = self.machine(slot)?;
        let env = self.fleetctl_env();
        Ok(fleetctl::run(&self.binaries.fleetctl, &m.endpoint(), EndpointVia::Flag, args, &env, Some(input)).await?)
    }

    /// Polls `observe` until it is ready, with this cluster's wait options.
    pub async fn wait_for<T, F, Fut>(&self, what: &str, observe: F) -> Result<T, ClusterError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Check<T>>,
    {
        Ok(wait_for(self.wait, what, observe).await?)
    }

    /// Polls a fleetctl command (via machine `slot`) until it succeeds and `accept` takes its stdout; the timeout
    /// shows the last output. Conformance specs wait through this too (`Ctx::wait_fleetctl`).
    pub async fn wait_fleetctl<T>(
        &self,
        slot: usize,
        args: &[&str],
        what: &str,
        accept: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ClusterError> {
        let accept = &accept;
        self.wait_for(what, || async move {
            match self.fleetctl(slot, args).await {
                Ok(out) if out.success() => match accept(&out.stdout) {
                    Ok(v) => Check::Ready(v),
                    Err(why) => Check::NotYet(format!("{why}; output: {}", wait::summarize(&out.stdout))),
                },
                Ok(out) => Check::NotYet(format!("fleetctl {}: {}", args.join(" "), out.describe())),
                Err(e) => Check::NotYet(e.to_string()),
            }
        })
        .await
    }

    /// (machine name, unit) → MainPID of every copy of `units` that systemd shows active, in every machine: what a
    /// test compares before and after a fault to see that nothing was restarted or moved.
    pub async fn main_pids<U: AsRef<str>>(
        &self,
        units: &[U],
    ) -> Result<BTreeMap<(String, String), String>, ClusterError> {
        let mut pids = BTreeMap::new();
        for m in &self.machines {
            for unit in units.iter().map(AsRef::as_ref) {
                let props = m.systemctl_show(unit, &["MainPID", "ActiveState"]).await?;
                if props.get("ActiveState").map(String::as_str) == Some("active") {
                    let pid = props.get("MainPID").cloned().unwrap_or_default();
                    pids.insert((m.name().to_string(), unit.to_string()), pid);
                }
            }
        }
        Ok(pids)
    }

    /// Waits until `fleetctl list-machines` (via machine `slot`) lists exactly `n` machines; returns their IDs.
    pub async fn wait_for_n_machines(&self, slot: usize, n: usize) -> Result<Vec<String>, ClusterError> {
        let args = ["list-machines", "--no-legend", "--full", "--fields", "machine"];
        self.wait_fleetctl(slot, &args, &format!("{n} machines"), |out| {
            let ids = wait::parse_machines(out);
            if ids.len() == n { Ok(ids) } else { Err(format!("{} of {n}", ids.len())) }
        })
        .await
    }

    /// Waits until `fleetctl list-units` shows exactly `n` unit rows; returns unit → rows.
    pub async fn wait_for_n_units(
        &self,
        slot: usize,
        n: usize,
    ) -> Result<BTreeMap<String, Vec<UnitState>>, ClusterError> {
        let args = ["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"];
        self.wait_fleetctl(slot, &args, &format!("{n} units"), |out| {
            let states = wait::parse_unit_states(out);
            let rows: usize = states.values().map(Vec::len).sum();
            if rows == n { Ok(states) } else { Err(format!("{rows} of {n}")) }
        })
        .await
    }

    /// Waits until exactly `n` units are `active`, each on one machine; returns unit → machine ID.
    pub async fn wait_for_n_active_units(
        &self,
        slot: usize,
        n: usize,
    ) -> Result<BTreeMap<String, String>, ClusterError> {
        let args = ["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"];
        let states = self
            .wait_fleetctl(slot, &args, &format!("{n} active units"), |out| {
                let states = wait::parse_unit_states(out);
                let active = wait::filter_active(&states).len();
                if active == n { Ok(states) } else { Err(format!("{active} of {n} active")) }
            })
            .await?;
        wait::active_to_single(&wait::filter_active(&states)).map_err(ClusterError::ActiveTwice)
    }

    /// Waits until `fleetctl list-unit-files` shows exactly `n` units; returns unit → rows.
    pub async fn wait_for_n_unit_files(
        &self,
        slot: usize,
        n: usize,
    ) -> Result<BTreeMap<String, Vec<UnitFileState>>, ClusterError> {
        let args = ["list-unit-files", "--no-legend", "--full", "--fields", "unit,dstate,state"];
        self.wait_fleetctl(slot, &args, &format!("{n} unit files"), |out| {
            let files = wait::parse_unit_file_states(out);
            if files.len() == n { Ok(files) } else { Err(format!("{} of {n}", files.len())) }
        })
        .await
    }

    /// Waits until `fleetctl list-unit-files` shows `unit` with current state `state` (e.g. `launched`).
    pub async fn wait_for_unit_state(
        &self,
        slot: usize,
        unit: &str,
        state: &str,
    ) -> Result<UnitFileState, ClusterError> {
        let args = ["list-unit-files", "--no-legend", "--full", "--fields", "unit,dstate,state"];
        self.wait_fleetctl(slot, &args, &format!("{unit} to be {state}"), |out| {
            let files = wait::parse_unit_file_states(out);
            match files.get(unit).and_then(|rows| rows.first()) {
                Some(row) if row.state == state => Ok(row.clone()),
                Some(row) => Err(format!("{unit} is {}", row.state)),
                None => Err(format!("{unit} not listed")),
            }
        })
        .await
    }

    /// What `fleet-harness status` and `down` need to find this cluster again from another process.
    pub fn state(&self) -> ClusterState {
        ClusterState {
            run: self.run.clone(),
            network: self.place.network.clone(),
            etcd: self.etcd.first().map(|e| e.name().to_string()).unwrap_or_default(),
            machines: self
                .machines
                .iter()
                .map(|m| MachineState {
                    name: m.name().to_string(),
                    container: m.container_name().to_string(),
                    id: m.id().to_string(),
                    ip: m.ip().to_string(),
                    endpoint: m.endpoint(),
                })
                .collect(),
            fleetctl: self.binaries.fleetctl.clone(),
            tmp: self.tmp.as_ref().map(|t| t.path().to_path_buf()),
            ssh_auth_sock: self.ssh.as_ref().map(|a| a.socket().to_path_buf()),
            ssh_agent_pid: self.ssh.as_ref().map(SshAgent::pid),
            known_hosts_file: self.tmp.as_ref().map(|_| self.known_hosts_file()),
            tls: self.pki.as_ref().map(|pki| crate::state::TlsState {
                ca: pki.ca.cert().to_path_buf(),
                admin_cert: pki.admin.cert.clone(),
                admin_key: pki.admin.key.clone(),
                read_cert: pki.read.cert.clone(),
                read_key: pki.read.key.clone(),
            }),
        }
    }

    /// Leaves the cluster running after this value is dropped (for `fleet-harness up`); returns its state.
    pub fn detach(mut self) -> ClusterState {
        let state = self.state();
        if let Some(tmp) = self.tmp.take() {
            let _ = tmp.keep();
        }
        for m in &mut self.machines {
            m.detach();
        }
        for e in &mut self.etcd {
            e.detach();
        }
        if let Some(a) = self.ssh.as_mut() {
            a.detach();
        }
        self.detached = true;
        state
    }

    /// Removes everything now (awaiting the removals instead of leaving them to drop).
    pub async fn destroy(mut self) {
        for m in &mut self.machines {
            m.remove().await;
        }
        for e in &mut self.etcd {
            e.remove().await;
        }
        // Drop sweeps the network and temp dir.
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        for m in &mut self.machines {
            m.release();
        }
        for e in &mut self.etcd {
            e.release();
        }
        // Whatever testcontainers did not remove (and the network, which it never does) goes by label.
        match reap::reap(&Scope::Run(self.run.clone())) {
            Ok(r) => {
                tracing::debug!(run = %self.run, containers = r.containers, networks = r.networks, "cluster removed")
            }
            Err(e) => {
                tracing::error!(run = %self.run, error = %e, "cluster cleanup failed; `fleet-harness reap` removes leftovers")
            }
        }
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("run", &self.run).field("machines", &self.machines).finish()
    }
}

/// The size of one junk value [`Cluster::fill_etcd`] writes (under etcd's 1.5 MiB request limit).
pub const FILL_CHUNK: usize = 256 << 10;
/// etcd's own backend quota when `--quota-backend-bytes` is not given.
const DEFAULT_ETCD_QUOTA: u64 = 2 << 30;

/// The etcd key prefix of a cluster's fleet: one per run, so clusters sharing nothing never meet in etcd.
fn key_prefix(run: &RunId) -> String {
    format!("/fleet_harness/{run}/")
}

//! The registry: fleet's whole cluster state in etcd v3, behind typed operations and an in-memory watched view.
//! The records, keys and snapshot it reads and writes are data in `fleet_core::store` (re-exported here).
//!
//! Code map:
//! * `roles` — who may write what, as types: [`ApiWriter`] (units, desired state, rollout spec and control,
//!   metadata), [`AgentSession`] (one machine's states and markers, bound to its lease), [`LeaderSession`] (the
//!   engine leader's fenced writes: placements, rollout progress, garbage collection). [`Registry`] itself reads,
//!   campaigns, and registers machines.
//! * Writes, one file per concern, each operation one etcd transaction wherever two writers could race: `units`
//!   (create/replace/desired/destroy, placements, launched markers), `unit_batch` (the same for many units in few
//!   transactions, never half a unit), `bodies` (body GC), `states` (unit state publishing), `machines` (presence,
//!   metadata), `rollouts` (spec, control, progress, markers), `engine` (leader key, fence, engine version),
//!   `layout` (layout version), `audit` (the audit trail: records, reads on demand, the leader's trimming).
//! * `lease` — [`LeaseKeeper`]: grant, manual keep-alive, loss notification, revoke.
//! * `endpoints` — with several etcd endpoints, probes each and keeps members that do not answer out of the
//!   client's balancer, so requests, keep-alives and watches go to live members.
//! * Reads: `reflector` ([`Reflector`]: list + watch → `watch::Receiver<Arc<Snapshot>>`), `scoped` (one-shot
//!   consistent reads of one part of the prefix, for tools without a reflector).
//! * `error` — [`RegistryError`].
//!
//! Readers serve from the reflector's snapshot, never from per-request etcd reads; writers go straight to etcd and
//! see their effect when the reflector catches up (wait on its revision if read-your-writes matters).
//!
//! Architecture invariant: nothing outside this crate and `fleet_core::store` builds an etcd key or decodes a
//! stored value.

mod audit;
mod bodies;
mod endpoints;
mod engine;
mod error;
mod layout;
mod lease;
mod machines;
mod reflector;
mod roles;
mod rollouts;
mod scoped;
mod states;
mod unit_batch;
mod units;

// The records, keys and snapshot are data (fleet-core's `store`); the registry is their one reader and writer.
pub use fleet_core::store::{
    BodyRecord, Change, Component, Cordon, DEFAULT_PREFIX, DecodeError, HISTORY_LEN, InvalidComponent, Key, Keys,
    LAYOUT_VERSION, LeaderRecord, MAX_ROLLOUT_UNITS, MAX_TXN_OPS, MachineObject, MachineRecord, RolloutRecord, Section,
    Snapshot, SnapshotCluster, StateRecord, TxnCost, UnitObject, UnitRecord, UnitView, Version, check_component,
    cost_batches, current_state, txn_batches,
};
use fleet_core::store::{batch, keys, records, snapshot};

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

pub use audit::{ReadRecord, Trimmed};
pub use engine::{Campaign, EngineVersionCheck, LeaderFence};
pub use error::{NO_SPACE, RegistryError, Result};
pub use lease::{LeaseKeeper, LeaseStatus};
pub use machines::Registration;
pub use reflector::{OwnWrites, Reflector, SharedFullView};
pub use roles::{AgentSession, ApiWriter, LeaderSession};
pub use rollouts::RolloutBody;
pub use states::{MAX_STATE_WRITES_PER_TXN, StateWrite};
pub use units::{
    Destroyed, EntriesWritten, MAX_ENTRIES_PER_TXN, MAX_MARKERS_PER_TXN, MAX_PLACEMENTS_PER_TXN, PlacementWrite,
    PutUnit, UnitWrite,
};

/// Reads of a machine's own keys in flight at once (`Registry::read_own_keys`).
const OWN_KEY_READS: usize = 16;

/// Keys per page when listing the prefix.
pub const LIST_PAGE: i64 = 1000;

/// Largest gRPC message accepted from etcd (list pages, watch batches while catching up). tonic's default of
/// 4 MB is too small for a watcher catching up on a busy 10,000-unit cluster.
pub(crate) const MAX_MESSAGE: usize = 256 * 1024 * 1024;

/// End of the etcd range holding every key that starts with `prefix`.
pub(crate) fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): every key from the prefix on.
    vec![0]
}

/// How to reach etcd.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// `etcd_key_prefix`.
    pub prefix: String,
    /// Per-request timeout (`etcd_request_timeout`); also bounds connecting.
    pub request_timeout: Duration,
    /// Basic auth, if configured.
    pub user: Option<(String, String)>,
    /// CA and client certificate for `https://` endpoints (`etcd_cafile`, `etcd_certfile`, `etcd_keyfile`).
    pub tls: fleet_tls::ClientFiles,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            prefix: DEFAULT_PREFIX.into(),
            request_timeout: Duration::from_secs(1),
            user: None,
            tls: fleet_tls::ClientFiles::default(),
        }
    }
}

/// TLS towards etcd (rustls on `ring`): the CA is required; a client certificate is presented when both a
/// certificate and a key are configured.
fn etcd_tls(files: &fleet_tls::ClientFiles) -> Result<etcd_client::TlsOptions> {
    let read = |what: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| RegistryError::Tls(format!("cannot read {what} {}: {e}", path.display())))
    };
    let Some(ca) = &files.ca else {
        return Err(RegistryError::Tls(
            "https:// etcd endpoints need the CA that signed etcd (fleet.conf etcd_cafile, fleetctl --ca-file)".into(),
        ));
    };
    let mut options =
        etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(read("etcd_cafile", ca)?));
    match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let identity = etcd_client::Identity::from_pem(read("etcd_certfile", cert)?, read("etcd_keyfile", key)?);
            options = options.identity(identity);
        }
        (None, None) => {}
        _ => return Err(RegistryError::Tls("etcd_certfile and etcd_keyfile must be given together".into())),
    }
    Ok(options)
}

/// Handle for typed registry writes and one-shot reads. Cheap to clone; all clones share one connection for
/// requests and leases, and one of its own for the reflector's watch (see [`Registry::watch_connection`]).
#[derive(Clone)]
pub struct Registry {
    // Behind `Arc`s: an etcd client is 3.7 KB (a gRPC stub per etcd service), and a registry is held by many
    // futures, whose size (on the heap and on the stack that polls them) grew by that much per clone held.
    client: Arc<etcd_client::Client>,
    watch_client: Arc<etcd_client::Client>,
    keys: Keys,
    /// The endpoint health task of a registry over several endpoints; it stops with the last clone.
    _health: Option<Arc<endpoints::Health>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("prefix", &self.keys.prefix()).finish()
    }
}

impl Registry {
    /// Connects to etcd. The connection is re-established transparently after etcd restarts.
    pub async fn connect(config: &EtcdConfig) -> Result<Registry> {
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(config.request_timeout)
            .with_timeout(config.request_timeout)
            // HTTP/2 pings detect a dead etcd (or a partition) on idle connections, e.g. a quiet watch stream.
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
            .with_keep_alive_while_idle(true)
            // A member cut off from the quorum refuses requests at once instead of serving a watch that never moves.
            .with_require_leader(true);
        if let Some((user, password)) = &config.user {
            options = options.with_user(user.clone(), password.clone());
        }
        if config.endpoints.iter().any(|e| e.starts_with("https://")) {
            options = options.with_tls(etcd_tls(&config.tls)?);
        }
        let connect = || async {
            etcd_client::Client::connect(&config.endpoints, Some(options.clone()))
                .await
                .map_err(RegistryError::etcd("connect", config.endpoints.join(",")))
        };
        let (client, watch_client) = (connect().await?, connect().await?);
        let health = endpoints::spawn(vec![client.clone(), watch_client.clone()], config.endpoints.clone(), options);
        Ok(Registry {
            client: Arc::new(client),
            watch_client: Arc::new(watch_client),
            keys: Keys::new(&config.prefix),
            _health: health.map(Arc::new),
        })
    }

    /// A registry over an existing client (its watches share that client's connection).
    pub fn new(client: etcd_client::Client, keys: Keys) -> Registry {
        let client = Arc::new(client);
        Registry { watch_client: client.clone(), client, keys, _health: None }
    }

    /// The client the reflector watches through: a connection of its own, so that a backlog of watch events for
    /// a machine that reads them slowly does not hold up its lease keep-alives and writes queued on the same
    /// connection (mass lease loss in the scale bench, 1,000 machines: git history of docs/scale.md at 58f0c3f, "Where it stops scaling, and why").
    pub fn watch_connection(&self) -> etcd_client::Client {
        (*self.watch_client).clone()
    }

    /// The key layout in use.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// A clone of the underlying client (for operations the registry does not wrap, e.g. maintenance in tests).
    pub fn client(&self) -> etcd_client::Client {
        (*self.client).clone()
    }

    /// The key-value stub of the client (400 bytes, where a whole client is 3.7 KB): what reads and writes hold
    /// while they wait.
    pub(crate) fn kv(&self) -> etcd_client::KvClient {
        self.client.kv_client()
    }

    /// The lease stub of the client.
    pub(crate) fn leases(&self) -> etcd_client::LeaseClient {
        self.client.lease_client()
    }

    /// Revokes lease `id` (a presence lease this process gave up: its keys go with it).
    pub async fn revoke_lease(&self, id: i64) -> Result<()> {
        self.leases().revoke(id).await.map_err(RegistryError::etcd("revoke lease", format!("{id:x}")))?;
        Ok(())
    }

    /// A one-shot consistent read of the whole prefix (what the reflector does on (re-)list). For tools that do not
    /// keep a reflector, e.g. fleetctl's etcd driver.
    ///
    /// Read in pages of [`LIST_PAGE`] keys, all at the revision of the first page, so a cluster of any size never
    /// needs one huge gRPC message and the result is still one consistent revision.
    pub async fn read_snapshot(&self) -> Result<Snapshot> {
        let prefix = self.keys.prefix().to_string();
        let mut snapshot = Snapshot::default();
        let revision = self.read_range_into(&mut snapshot, &prefix, 0).await?;
        snapshot.set_revision(revision);
        snapshot.set_connected(true);
        Ok(snapshot)
    }

    /// The engine's keys (`P/engine/`: leader, engine version) at one revision, connected: a non-leading engine's
    /// view.
    pub async fn read_engine_snapshot(&self) -> Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        let revision = self.read_range_into(&mut snapshot, &self.keys.engine_dir(), 0).await?;
        snapshot.set_revision(revision);
        snapshot.set_connected(true);
        Ok(snapshot)
    }

    /// A view scoped to `machine` (layout 2): every key under `P/machines/<machine>/` and the bodies its entries
    /// name, at one revision, connected.
    pub async fn read_machine_snapshot(&self, machine: &str) -> Result<Snapshot> {
        fleet_core::store::check_component(fleet_core::store::Component::MachineId, machine)?;
        let mut snapshot = Snapshot::scoped(machine);
        let revision = self.read_range_into(&mut snapshot, &self.keys.machine_dir(machine), 0).await?;
        snapshot.set_revision(revision);
        self.fetch_missing_bodies(&mut snapshot).await?;
        snapshot.set_connected(true);
        Ok(snapshot)
    }

    /// Reads into a scoped `snapshot` this machine's own keys outside its prefix: those bound to its presence lease
    /// `lease` (unit states, launched and restarted markers). etcd names them (a lease's keys), so the read costs
    /// what the machine holds, not what the cluster does. Returns the revision the names were read at (a write of
    /// them noted after the read with a revision up to it is already here: `reflector::OwnWrite`) and the names.
    pub(crate) async fn read_own_keys(&self, snapshot: &mut Snapshot, lease: i64) -> Result<(i64, Vec<Vec<u8>>)> {
        let (at, names) = self.own_key_names(snapshot.scope(), lease).await?;
        let kv = self.client.kv_client().max_decoding_message_size(MAX_MESSAGE);
        let reads = futures::stream::iter(names.clone())
            .map(|key| {
                let mut kv = kv.clone();
                async move {
                    let options = etcd_client::GetOptions::new().with_revision(at);
                    let shown = String::from_utf8_lossy(&key).into_owned();
                    kv.get(key, Some(options)).await.map_err(RegistryError::etcd("get", shown))
                }
            })
            .buffer_unordered(OWN_KEY_READS);
        let responses: Vec<etcd_client::GetResponse> = futures::TryStreamExt::try_collect(reads).await?;
        for resp in &responses {
            for kv in resp.kvs() {
                let change = Change::Put { value: kv.value(), mod_revision: kv.mod_revision(), lease: kv.lease() };
                snapshot.apply(&self.keys, kv.key(), change);
            }
        }
        Ok((at, names))
    }

    /// The keys bound to the presence lease `lease` of machine `scope` outside its prefix, and the revision etcd
    /// named them at.
    pub(crate) async fn own_key_names(&self, scope: Option<&str>, lease: i64) -> Result<(i64, Vec<Vec<u8>>)> {
        let options = etcd_client::LeaseTimeToLiveOptions::new().with_keys();
        let resp = self
            .leases()
            .time_to_live(lease, Some(options))
            .await
            .map_err(RegistryError::etcd("lease time-to-live", format!("lease {lease:x}")))?;
        let at = resp.header().map_or(0, |h| h.revision());
        let scope = scope.map(|m| self.keys.machine_dir(m));
        let names: Vec<Vec<u8>> = resp
            .keys()
            .iter()
            .filter(|key| scope.as_ref().is_none_or(|dir| !key.starts_with(dir.as_bytes())))
            .cloned()
            .collect();
        Ok((at, names))
    }

    /// Reads into `snapshot` the bodies its schedule entries name that it does not hold. Bodies never change under
    /// a hash, so the current revision serves any snapshot; they are outside the watched prefix and not counted
    /// among its keys. A body etcd no longer has stays missing (its unit is then not listed, as in a full view).
    pub(crate) async fn fetch_missing_bodies(&self, snapshot: &mut Snapshot) -> Result<()> {
        let mut kv = self.client.kv_client().max_decoding_message_size(MAX_MESSAGE);
        for hash in snapshot.missing_entry_bodies() {
            let key = self.keys.body(&hash);
            let resp = kv.get(key.as_str(), None).await.map_err(RegistryError::etcd("get", key.clone()))?;
            for kv in resp.kvs() {
                let change = Change::Put { value: kv.value(), mod_revision: kv.mod_revision(), lease: kv.lease() };
                snapshot.apply(&self.keys, kv.key(), change);
            }
        }
        Ok(())
    }

    /// Applies every key starting with `prefix` to `snapshot`, read in pages of [`LIST_PAGE`] keys at `revision`
    /// (0: the current revision). Returns the revision read at.
    pub(crate) async fn read_range_into(&self, snapshot: &mut Snapshot, prefix: &str, revision: i64) -> Result<i64> {
        let end = range_end(prefix.as_bytes());
        let mut kv = self.client.kv_client().max_decoding_message_size(MAX_MESSAGE);
        let mut start = prefix.as_bytes().to_vec();
        let mut revision = revision;
        loop {
            let mut options = etcd_client::GetOptions::new().with_range(end.clone()).with_limit(LIST_PAGE);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let resp = kv.get(start.clone(), Some(options)).await.map_err(RegistryError::etcd("get", prefix))?;
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
            }
            for kv in resp.kvs() {
                let change = Change::Put { value: kv.value(), mod_revision: kv.mod_revision(), lease: kv.lease() };
                snapshot.apply(&self.keys, kv.key(), change);
            }
            snapshot.count_raw_keys(resp.kvs().len() as u64, 0);
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    // Next page starts right after the last key returned.
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => return Ok(revision),
            }
        }
    }

    /// Runs a transaction and returns whether its compares held.
    pub(crate) async fn txn(
        &self,
        op: &'static str,
        key: &str,
        txn: etcd_client::Txn,
    ) -> Result<etcd_client::TxnResponse> {
        self.kv().txn(txn).await.map_err(RegistryError::etcd(op, key))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn range_end_increments_the_last_byte() {
        assert_eq!(super::range_end(b"/p/"), b"/p0");
        assert_eq!(super::range_end(b"a\xff"), b"b");
    }

    #[test]
    fn a_registry_is_small_enough_to_hold_in_futures() {
        // Every future that holds a registry (lease keeper, agent, engine, the daemon's run) carries its size; with
        // two etcd clients by value it was 7,440 bytes and the daemon's top future 146 KB.
        let size = std::mem::size_of::<super::Registry>();
        assert!(size <= 128, "a Registry takes {size} bytes: keep its etcd clients behind pointers");
    }
}

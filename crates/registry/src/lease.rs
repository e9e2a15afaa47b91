//! [`LeaseKeeper`]: one etcd lease kept alive in the background, with loss reported to its owner.
//!
//! Everything a machine publishes (presence, unit states, launched markers) and the engine leader key are bound to
//! leases, so liveness costs one keep-alive per lease every TTL/3 instead of rewriting keys. etcd-client's
//! keep-alive is manual: this task sends a keep-alive request, reads the answer, and repeats. The lease is
//! reported lost when etcd answers TTL 0 (expired or revoked), or when no renewal succeeded for a whole TTL (etcd
//! unreachable: the lease must be presumed expired, since the owner can no longer prove otherwise).

use std::time::Duration;

use etcd_client::LeaseClient;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use super::Registry;
use super::error::{RegistryError, Result};

/// Liveness of a kept lease as last observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseStatus {
    Alive,
    /// Final: a lost lease never comes back; grant a new one.
    Lost {
        reason: String,
    },
}

/// A granted lease kept alive until [`LeaseKeeper::revoke`] or drop (drop stops keep-alives; the lease then
/// expires after its TTL).
#[derive(Debug)]
pub struct LeaseKeeper {
    id: i64,
    ttl: Duration,
    registry: Registry,
    status: watch::Receiver<LeaseStatus>,
    alive_until: watch::Receiver<Option<Instant>>,
    task: JoinHandle<()>,
}

impl LeaseKeeper {
    /// Grants a lease of `ttl` (etcd rounds up to whole seconds and enforces its own minimum) and starts keeping
    /// it alive every TTL/3.
    pub async fn grant(registry: &Registry, ttl: Duration) -> Result<LeaseKeeper> {
        let secs = ttl.as_secs_f64().ceil().max(1.0) as i64;
        let sent = Instant::now();
        let resp = registry
            .leases()
            .grant(secs, None)
            .await
            .map_err(RegistryError::etcd("lease grant", format!("ttl {secs}s")))?;
        let (id, ttl) = (resp.id(), Duration::from_secs(resp.ttl().max(1) as u64));
        tracing::debug!(lease = format_args!("{id:x}"), ttl = ?ttl, "lease granted");
        Ok(LeaseKeeper::keep(registry, id, ttl, sent + ttl))
    }

    /// Takes over keeping lease `id` alive (granted earlier, e.g. by the fleetd process this one replaces) when
    /// etcd still holds it with a TTL of `ttl`; `None` when it expired, was revoked, or was granted another TTL
    /// (the caller grants a fresh one).
    pub async fn adopt(registry: &Registry, id: i64, ttl: Duration) -> Result<Option<LeaseKeeper>> {
        let sent = Instant::now();
        let resp = registry
            .leases()
            .time_to_live(id, None)
            .await
            .map_err(RegistryError::etcd("lease time-to-live", format!("lease {id:x}")))?;
        let (remaining, granted) = (resp.ttl(), resp.granted_ttl());
        let wanted = ttl.as_secs_f64().ceil().max(1.0) as i64;
        if remaining <= 0 || granted != wanted {
            tracing::debug!(lease = format_args!("{id:x}"), remaining, granted, wanted, "lease not adoptable");
            return Ok(None);
        }
        let granted = Duration::from_secs(granted as u64);
        tracing::debug!(lease = format_args!("{id:x}"), remaining, "lease adopted");
        // etcd reports whole seconds; one less is a bound that holds however it rounds.
        let alive_until = sent + Duration::from_secs(remaining as u64).saturating_sub(Duration::from_secs(1));
        Ok(Some(LeaseKeeper::keep(registry, id, granted, alive_until)))
    }

    /// Starts keeping lease `id` (TTL `ttl`, known alive until `alive_until`) alive.
    fn keep(registry: &Registry, id: i64, ttl: Duration, alive_until: Instant) -> LeaseKeeper {
        let (tx, status) = watch::channel(LeaseStatus::Alive);
        let (until_tx, until) = watch::channel(Some(alive_until));
        let task = tokio::spawn(keep_alive(registry.leases(), id, ttl, alive_until, tx, until_tx));
        LeaseKeeper { id, ttl, registry: registry.clone(), status, alive_until: until, task }
    }

    /// The lease ID, to bind keys to.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Change notifications of the lease's status.
    pub fn status(&self) -> watch::Receiver<LeaseStatus> {
        self.status.clone()
    }

    /// Until when etcd holds the lease at the least, by this process's monotonic clock: the send time of the last
    /// renewal (or grant) etcd answered, plus the TTL it answered — etcd counts from when it received the request,
    /// which is later. `None` once the lease is lost. The at-most-once fence of the agent follows this.
    pub fn alive_until(&self) -> watch::Receiver<Option<Instant>> {
        self.alive_until.clone()
    }

    pub fn is_alive(&self) -> bool {
        *self.status.borrow() == LeaseStatus::Alive
    }

    /// Waits until the lease is lost and returns why.
    pub async fn lost(&self) -> String {
        let mut rx = self.status.clone();
        loop {
            if let LeaseStatus::Lost { reason } = &*rx.borrow_and_update() {
                return reason.clone();
            }
            if rx.changed().await.is_err() {
                return "lease keeper stopped".into();
            }
        }
    }

    /// Stops keep-alives and revokes the lease, deleting every key bound to it at once (graceful shutdown).
    /// Revoking a lease that already expired is not an error.
    pub async fn revoke(self) -> Result<()> {
        self.task.abort();
        match self.registry.leases().revoke(self.id).await {
            Ok(_) => Ok(()),
            Err(etcd_client::Error::GRpcStatus(s)) if s.message().contains("lease not found") => Ok(()),
            Err(e) => Err(RegistryError::Etcd { op: "lease revoke", key: format!("lease {:x}", self.id), source: e }),
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn keep_alive(
    mut client: LeaseClient,
    id: i64,
    ttl: Duration,
    alive_until: Instant,
    tx: watch::Sender<LeaseStatus>,
    until_tx: watch::Sender<Option<Instant>>,
) {
    let period = (ttl / 3).max(Duration::from_millis(100));
    // After a failure, retry sooner than a full period so a short etcd hiccup does not eat the TTL.
    let retry = (period / 4).max(Duration::from_millis(50));
    // Until when the lease is known to be alive: the last successful renewal's send time plus the TTL it returned.
    let mut alive_until = alive_until;
    let mut stream = None;
    loop {
        let sent = Instant::now();
        let outcome = renew_once(&mut client, id, &mut stream, period).await;
        match outcome {
            Ok(granted) if granted > 0 => {
                alive_until = sent + Duration::from_secs(granted as u64);
                until_tx.send_replace(Some(alive_until));
                sleep(period.saturating_sub(sent.elapsed())).await;
                continue;
            }
            Ok(_) => {
                until_tx.send_replace(None);
                lose(&tx, id, "expired or revoked (etcd answered TTL 0)".into());
                return;
            }
            Err(e) => {
                tracing::debug!(lease = format_args!("{id:x}"), error = %e, "lease keep-alive failed");
                stream = None;
                if Instant::now() >= alive_until {
                    until_tx.send_replace(None);
                    lose(&tx, id, format!("not renewed within its TTL of {ttl:?}: {e}"));
                    return;
                }
            }
        }
        sleep(retry).await;
    }
}

type KeepAlive = (etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

/// One keep-alive round trip; `Ok(ttl)` is etcd's answer (0 = lease gone).
async fn renew_once(
    client: &mut LeaseClient,
    id: i64,
    stream: &mut Option<KeepAlive>,
    limit: Duration,
) -> Result<i64, String> {
    if stream.is_none() {
        let opened = timeout(limit, client.keep_alive(id)).await.map_err(|_| "opening keep-alive timed out")?;
        *stream = Some(opened.map_err(|e| e.to_string())?);
    }
    let (keeper, responses) = stream.as_mut().expect("stream opened above");
    keeper.keep_alive().await.map_err(|e| e.to_string())?;
    match timeout(limit, responses.message()).await {
        Err(_) => Err("keep-alive answer timed out".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(None)) => Err("keep-alive stream closed".into()),
        Ok(Ok(Some(resp))) => Ok(resp.ttl()),
    }
}

fn lose(tx: &watch::Sender<LeaseStatus>, id: i64, reason: String) {
    tracing::warn!(lease = format_args!("{id:x}"), %reason, "lease lost");
    tx.send_replace(LeaseStatus::Lost { reason });
}

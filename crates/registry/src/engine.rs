//! The engine leader lease and the cluster engine version (spec §1.6), in etcd v3 terms.
//!
//! Leadership is the key `P/engine/leader` (value: machine ID) bound to the engine's own lease (TTL `5×EIV`):
//! campaign = create-if-absent, renewal = the lease keep-alive (no key rewrite), resign = delete-if-still-ours, and
//! loss = the lease expiring. Engines learn the current leader from the reflector's snapshot, so an engine should
//! campaign only when the snapshot shows no leader: a failed campaign still costs etcd a raft round.
//!
//! **Fencing.** Every write the engine makes (placements, rollout progress, body GC) goes through its
//! [`LeaderSession`], which carries a [`LeaderFence`]: the leader key must
//! still hold this engine's machine ID *and* be bound to its lease, checked in the same transaction as the write.
//! A deposed leader that has not noticed yet (a paused process, a lost keep-alive, a previous incarnation of the
//! same machine) therefore writes nothing and gets [`RegistryError::NotLeader`].

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};

use super::Registry;
use super::error::{RegistryError, Result};
use super::keys::{Component, check_component};
use super::records::decode_u32;
use super::roles::LeaderSession;

/// How many times the engine version check-and-set retries against concurrent engines.
const MAX_ATTEMPTS: u32 = 5;

/// Outcome of [`Registry::campaign`].
#[derive(Debug, Clone)]
pub enum Campaign {
    /// This machine (with this lease) is the leader, newly or already: the session its writes go through.
    Leader(LeaderSession),
    /// Another engine holds the lease (`leader` may equal our machine ID when it is a previous incarnation of this
    /// fleetd whose lease has not expired yet).
    Follower { leader: String },
}

/// Outcome of [`Registry::check_engine_version`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineVersionCheck {
    /// The cluster runs this engine version.
    Current,
    /// The cluster version was missing or lower and is now ours.
    Upgraded { from: Option<u32> },
    /// A newer engine runs the cluster: this engine must not participate.
    Newer(u32),
}

/// The engine leader's identity as written in the leader key: its machine ID and the lease the key is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderFence {
    pub machine: String,
    pub lease: i64,
}

impl LeaderSession {
    /// Runs `compares` → `ops` only while this session's fence holds, in one transaction: `Ok(Some(response))` when written,
    /// `Ok(None)` when `compares` failed (nothing written), [`RegistryError::NotLeader`] when the fence failed.
    /// The fence's two compares join the caller's (a nested transaction would count against etcd's operation
    /// limit twice); on failure the leader key is read in the same transaction to tell which compare failed.
    pub(crate) async fn fenced_txn(
        &self,
        op: &'static str,
        key: &str,
        compares: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<Option<TxnResponse>> {
        let fence = self.fence();
        let leader = self.keys.engine_leader();
        let mut all = vec![
            Compare::value(leader.as_str(), CompareOp::Equal, fence.machine.as_str()),
            Compare::lease(leader.as_str(), CompareOp::Equal, fence.lease),
        ];
        all.extend(compares);
        let txn = Txn::new().when(all).and_then(ops).or_else([TxnOp::get(leader.as_str(), None)]);
        let resp = self.txn(op, key, txn).await?;
        if resp.succeeded() {
            return Ok(Some(resp));
        }
        let holder = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => {
                g.kvs().first().map(|kv| (String::from_utf8_lossy(kv.value()).into_owned(), kv.lease()))
            }
            _ => None,
        });
        match holder {
            Some((machine, lease)) if machine == fence.machine && lease == fence.lease => Ok(None),
            holder => Err(RegistryError::NotLeader {
                machine: fence.machine.clone(),
                lease: fence.lease,
                holder: holder.map_or_else(|| "absent".to_string(), |(m, l)| format!("{m} (lease {l:x})")),
            }),
        }
    }
}

impl Registry {
    /// Tries to become engine leader as `machine`, binding the key to `lease` (the engine lease).
    ///
    /// Wins when no engine leads: the key is absent, or holds a value bound to no lease. etcd compares a missing
    /// key's lease as 0, so one compare covers both. A leader key is only ever written bound to an engine lease; one
    /// without (written by hand, or by a hostile client) would otherwise never expire, and no engine would ever lead
    /// again (the snapshot reads it as no leader, see `Snapshot::apply`).
    pub async fn campaign(&self, machine: &str, lease: i64) -> Result<Campaign> {
        check_component(Component::MachineId, machine)?;
        let key = self.keys.engine_leader();
        let txn = Txn::new()
            .when([Compare::lease(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), machine, Some(PutOptions::new().with_lease(lease)))])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let resp = self.txn("campaign", &key, txn).await?;
        if resp.succeeded() {
            tracing::debug!(machine, lease = format_args!("{lease:x}"), "campaign won");
            return Ok(Campaign::Leader(self.leader_session(machine, lease)));
        }
        let holder = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| (kv.value().to_vec(), kv.lease())),
            _ => None,
        });
        match holder {
            Some((value, holder_lease)) => {
                let leader = String::from_utf8_lossy(&value).into_owned();
                if leader == machine && holder_lease == lease {
                    Ok(Campaign::Leader(self.leader_session(machine, lease)))
                } else {
                    Ok(Campaign::Follower { leader })
                }
            }
            // Deleted between the compare and the get cannot happen inside one txn; an empty answer means the key
            // expired right after: report no leader as a follower of nobody, the next tick campaigns again.
            None => Ok(Campaign::Follower { leader: String::new() }),
        }
    }

    fn leader_session(&self, machine: &str, lease: i64) -> LeaderSession {
        LeaderSession::new(self.clone(), LeaderFence { machine: machine.to_string(), lease })
    }

    /// Gives up leadership if `machine` still holds it with `lease`, so another engine can take over at once
    /// instead of waiting for the lease to expire. `false` if it was not ours (any more).
    pub async fn resign(&self, machine: &str, lease: i64) -> Result<bool> {
        let key = self.keys.engine_leader();
        let txn = Txn::new()
            .when([
                Compare::value(key.as_str(), CompareOp::Equal, machine),
                Compare::lease(key.as_str(), CompareOp::Equal, lease),
            ])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        Ok(self.txn("resign", &key, txn).await?.succeeded())
    }

    /// Compares the cluster engine version with `mine`, raising it (check-and-set) when lower or missing.
    pub async fn check_engine_version(&self, mine: u32) -> Result<EngineVersionCheck> {
        let key = self.keys.engine_version();
        for _ in 0..MAX_ATTEMPTS {
            let resp = self.kv().get(key.as_str(), None).await.map_err(RegistryError::etcd("get", &key))?;
            let (stored, guard) = match resp.kvs().first() {
                // A value that is no version is raised as a missing one is (compare-and-set on exactly it): it
                // cannot tell of a newer engine, and leaving it would keep every engine from leading.
                Some(kv) => (
                    decode_u32(&key, "engine version", kv.value())
                        .inspect_err(|e| tracing::warn!(error = %e, "replacing an unreadable cluster engine version"))
                        .ok(),
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, kv.mod_revision()),
                ),
                None => (None, Compare::version(key.as_str(), CompareOp::Equal, 0)),
            };
            match stored {
                Some(v) if v == mine => return Ok(EngineVersionCheck::Current),
                Some(v) if v > mine => return Ok(EngineVersionCheck::Newer(v)),
                _ => {}
            }
            let txn = Txn::new().when([guard]).and_then([TxnOp::put(key.as_str(), mine.to_string(), None)]);
            if self.txn("set engine version", &key, txn).await?.succeeded() {
                tracing::info!(from = ?stored, to = mine, "cluster engine version raised");
                return Ok(EngineVersionCheck::Upgraded { from: stored });
            }
        }
        Err(RegistryError::Conflict { op: "set engine version", key, attempts: MAX_ATTEMPTS })
    }
}

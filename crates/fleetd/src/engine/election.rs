//! The engine election (spec §1.6, adapted to etcd v3 leases), pure: on every tick the engine shell calls [`step`]
//! (the registry view → [`decide`]) and carries the step out with the registry's campaign / keep-alive / take-over /
//! resign primitives. Only a leader reconciles.
//!
//! The v3 leader key holds only a machine ID, bound to the leader's engine lease; the engine version lives in its
//! own key. A leader therefore always runs the cluster's engine version, which is what the record's version is
//! read as. "Holding" means the record is bound to the lease this engine campaigned with and still keeps alive; a
//! record with our machine ID but another lease belongs to an earlier run of this fleetd (crashed without
//! resigning, or a lease given up during an etcd outage and restored by etcd); the runner retires that key at once
//! (delete-if-still-that-lease) rather than waiting for the lease to expire.

use std::fmt;
use std::time::Duration;

/// This implementation's engine version, compared with the cluster's engine version key.
pub const ENGINE_VERSION: u32 = 1;

/// The leader lease lives for this many engine reconcile intervals (spec §1.6: `5 × EIV`).
pub const LEASE_INTERVALS: u32 = 5;

/// The leader lease TTL for a given `engine_reconcile_interval`.
pub fn lease_ttl(reconcile_interval: Duration) -> Duration {
    reconcile_interval * LEASE_INTERVALS
}

/// Who leads and with which engine version, as [`decide`] sees it (read from the registry's
/// [`LeaderRecord`](fleet_registry::LeaderRecord) and the cluster engine version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLeader {
    pub machine_id: String,
    pub version: u32,
}

/// What this engine knows at the start of a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeadershipView<'a> {
    /// This machine's ID.
    pub me: &'a str,
    /// This engine's version ([`ENGINE_VERSION`] in production).
    pub my_version: u32,
    /// `disable_engine` is set on this machine.
    pub engine_disabled: bool,
    /// The cluster engine version key; `None` when absent (read as 0).
    pub cluster_version: Option<u32>,
    /// The leader record currently in the registry, if any.
    pub record: Option<&'a CurrentLeader>,
    /// This process holds a live lease backing a record it wrote (it campaigned and keeps the lease alive).
    pub holding: bool,
}

/// What to do this tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeadershipStep {
    /// Take no part in leadership; release the lease first when `resign` (this process holds it).
    StandAside { reason: StandAsideReason, resign: bool },
    /// Compare-and-swap the cluster engine version from `from` (`None`: create) to `to`, then decide again.
    RaiseClusterVersion { from: Option<u32>, to: u32 },
    /// Keep our lease alive, then reconcile. If renewal fails, leadership is lost: log and stop reconciling.
    Renew,
    /// No leader: create the record with our lease only if it is still absent; reconcile if that succeeds.
    Campaign,
    /// Overwrite the record of `from` only if it is unchanged since read; reconcile if that succeeds. When
    /// `wait_for_old_lease`, first let the old lease's remaining TTL pass so the old engine has stopped.
    TakeOver { from: String, wait_for_old_lease: bool },
    /// Another engine leads; do not reconcile.
    Follow { leader: String },
}

impl LeadershipStep {
    /// Whether this engine reconciles this tick once the step has succeeded.
    pub fn leads(&self) -> bool {
        matches!(self, LeadershipStep::Renew | LeadershipStep::Campaign | LeadershipStep::TakeOver { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandAsideReason {
    EngineDisabled,
    /// The cluster runs a newer engine version than ours.
    ClusterVersionNewer {
        cluster: u32,
        mine: u32,
    },
}

impl fmt::Display for StandAsideReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StandAsideReason::EngineDisabled => f.write_str("engine disabled on this machine"),
            StandAsideReason::ClusterVersionNewer { cluster, mine } => {
                write!(f, "cluster engine version {cluster} is newer than this engine's version {mine}")
            }
        }
    }
}

/// The leadership step for this tick.
pub fn decide(view: &LeadershipView<'_>) -> LeadershipStep {
    if view.engine_disabled {
        return LeadershipStep::StandAside { reason: StandAsideReason::EngineDisabled, resign: view.holding };
    }
    let cluster = view.cluster_version.unwrap_or(0);
    if cluster > view.my_version {
        let reason = StandAsideReason::ClusterVersionNewer { cluster, mine: view.my_version };
        return LeadershipStep::StandAside { reason, resign: view.holding };
    }
    if cluster < view.my_version {
        return LeadershipStep::RaiseClusterVersion { from: view.cluster_version, to: view.my_version };
    }
    match view.record {
        None => LeadershipStep::Campaign,
        Some(record) if record.machine_id == view.me => {
            if view.holding {
                LeadershipStep::Renew
            } else {
                // Our own record from an earlier run of this machine: no one else can be leading.
                LeadershipStep::TakeOver { from: record.machine_id.clone(), wait_for_old_lease: false }
            }
        }
        Some(record) if record.version < view.my_version => {
            LeadershipStep::TakeOver { from: record.machine_id.clone(), wait_for_old_lease: true }
        }
        Some(record) => LeadershipStep::Follow { leader: record.machine_id.clone() },
    }
}

/// A change of leader between two ticks, for the log lines of §1.6.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderChange {
    Elected { leader: String },
    Changed { from: String, to: String },
    Vacated { from: String },
}

impl LeaderChange {
    pub fn between(previous: Option<&str>, current: Option<&str>) -> Option<LeaderChange> {
        match (previous, current) {
            (None, Some(to)) => Some(LeaderChange::Elected { leader: to.to_string() }),
            (Some(from), Some(to)) if from != to => {
                Some(LeaderChange::Changed { from: from.to_string(), to: to.to_string() })
            }
            (Some(from), None) => Some(LeaderChange::Vacated { from: from.to_string() }),
            _ => None,
        }
    }
}

impl fmt::Display for LeaderChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaderChange::Elected { leader } => write!(f, "Engine leader is {leader}"),
            LeaderChange::Changed { from, to } => write!(f, "Engine leadership changed from {from} to {to}"),
            LeaderChange::Vacated { from } => write!(f, "Engine leadership of {from} ended"),
        }
    }
}

// The registry view → decide.
/// The leadership step for this tick.
///
/// * `raised`: the cluster engine version this engine has just written, while the view may not show it yet.
/// * `held_lease`: the engine lease this engine leads with (confirmed in the view and still alive), if any.
pub fn step(
    me: &str,
    engine_disabled: bool,
    view: &fleet_registry::Snapshot,
    raised: Option<u32>,
    held_lease: Option<i64>,
) -> LeadershipStep {
    let cluster_version = view.engine_version().max(raised);
    let leader = view.leader_record();
    let record = leader.map(|r| CurrentLeader { machine_id: r.machine.clone(), version: cluster_version.unwrap_or(0) });
    let holding = matches!((leader, held_lease), (Some(r), Some(lease)) if r.lease == lease);
    decide(&LeadershipView {
        me,
        my_version: ENGINE_VERSION,
        engine_disabled,
        cluster_version,
        record: record.as_ref(),
        holding,
    })
}

/// True when the view shows the leader key bound to `lease`.
pub fn view_shows_lease(view: &fleet_registry::Snapshot, lease: i64) -> bool {
    view.leader_record().is_some_and(|r| r.lease == lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, version: u32) -> CurrentLeader {
        CurrentLeader { machine_id: id.into(), version }
    }

    #[test]
    fn leadership_decision_table() {
        let mine = record("me", 1);
        let other = record("other", 1);
        let old_other = record("other", 0);
        let newer_other = record("other", 2);
        use LeadershipStep::*;
        /// (case, disabled, cluster version, record, holding, expected step)
        type Row<'a> = (&'a str, bool, Option<u32>, Option<&'a CurrentLeader>, bool, LeadershipStep);
        let cases: Vec<Row> = vec![
            (
                "disabled engine never participates",
                true,
                Some(1),
                None,
                false,
                StandAside { reason: StandAsideReason::EngineDisabled, resign: false },
            ),
            (
                "disabled while holding resigns",
                true,
                Some(1),
                Some(&mine),
                true,
                StandAside { reason: StandAsideReason::EngineDisabled, resign: true },
            ),
            (
                "newer cluster version: stand aside",
                false,
                Some(2),
                None,
                false,
                StandAside { reason: StandAsideReason::ClusterVersionNewer { cluster: 2, mine: 1 }, resign: false },
            ),
            ("missing cluster version is created", false, None, None, false, RaiseClusterVersion { from: None, to: 1 }),
            (
                "older cluster version is raised",
                false,
                Some(0),
                Some(&other),
                false,
                RaiseClusterVersion { from: Some(0), to: 1 },
            ),
            ("no leader: campaign", false, Some(1), None, false, Campaign),
            ("we lead: renew", false, Some(1), Some(&mine), true, Renew),
            (
                "our stale record from a previous run: take over without waiting",
                false,
                Some(1),
                Some(&mine),
                false,
                TakeOver { from: "me".into(), wait_for_old_lease: false },
            ),
            (
                "another leader of our version: follow",
                false,
                Some(1),
                Some(&other),
                false,
                Follow { leader: "other".into() },
            ),
            (
                "lost our lease to another: follow",
                false,
                Some(1),
                Some(&other),
                true,
                Follow { leader: "other".into() },
            ),
            (
                "newer engine leads: follow",
                false,
                Some(1),
                Some(&newer_other),
                false,
                Follow { leader: "other".into() },
            ),
            (
                "older engine leads: take over after its lease",
                false,
                Some(1),
                Some(&old_other),
                false,
                TakeOver { from: "other".into(), wait_for_old_lease: true },
            ),
            ("record vanished while holding: campaign again", false, Some(1), None, true, Campaign),
        ];
        for (case, engine_disabled, cluster_version, record, holding, want) in cases {
            let view = LeadershipView { me: "me", my_version: 1, engine_disabled, cluster_version, record, holding };
            assert_eq!(decide(&view), want, "{case}");
        }
    }

    #[test]
    fn only_winning_steps_lead() {
        assert!(LeadershipStep::Renew.leads());
        assert!(LeadershipStep::Campaign.leads());
        assert!(LeadershipStep::TakeOver { from: "x".into(), wait_for_old_lease: true }.leads());
        assert!(!LeadershipStep::Follow { leader: "x".into() }.leads());
        assert!(!LeadershipStep::RaiseClusterVersion { from: None, to: 1 }.leads());
    }

    #[test]
    fn leader_changes_are_logged_like_the_original() {
        assert_eq!(LeaderChange::between(None, Some("a")).unwrap().to_string(), "Engine leader is a");
        assert_eq!(
            LeaderChange::between(Some("a"), Some("b")).unwrap().to_string(),
            "Engine leadership changed from a to b"
        );
        assert_eq!(LeaderChange::between(Some("a"), Some("a")), None);
        assert_eq!(LeaderChange::between(Some("a"), None), Some(LeaderChange::Vacated { from: "a".into() }));
        assert_eq!(lease_ttl(Duration::from_secs(2)), Duration::from_secs(10));
    }
}

#[cfg(test)]
mod view_tests {
    use super::*;
    use fleet_registry::{Change, Keys};

    const OURS: i64 = 0x10;
    const THEIRS: i64 = 0x20;

    /// A view with an optional engine version and an optional leader `(machine, lease)`.
    fn view(version: Option<&str>, leader: Option<(&str, i64)>) -> fleet_registry::Snapshot {
        let keys = Keys::new("/t/");
        let mut kvs: Vec<(String, String, i64)> = Vec::new();
        if let Some(v) = version {
            kvs.push((keys.engine_version(), v.to_string(), 0));
        }
        if let Some((machine, lease)) = leader {
            kvs.push((keys.engine_leader(), machine.to_string(), lease));
        }
        fleet_registry::Snapshot::from_kvs(
            &keys,
            5,
            kvs.iter().map(|(k, v, lease)| {
                (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 5, lease: *lease })
            }),
        )
    }

    #[test]
    fn leadership_glue_table() {
        use LeadershipStep::*;
        /// (case, engine version, leader, raised, held lease, expected)
        type Row<'a> = (&'a str, Option<&'a str>, Option<(&'a str, i64)>, Option<u32>, Option<i64>, LeadershipStep);
        let rows: Vec<Row> = vec![
            (
                "fresh cluster: raise the engine version first",
                None,
                None,
                None,
                None,
                RaiseClusterVersion { from: None, to: ENGINE_VERSION },
            ),
            ("version just raised, view behind: campaign", None, None, Some(1), None, Campaign),
            ("no leader: campaign", Some("1"), None, None, None, Campaign),
            (
                "another engine leads: follow",
                Some("1"),
                Some(("other", THEIRS)),
                None,
                None,
                Follow { leader: "other".into() },
            ),
            ("we lead with our lease: renew", Some("1"), Some(("me", OURS)), None, Some(OURS), Renew),
            (
                "our machine ID with another lease is an earlier run: wait it out",
                Some("1"),
                Some(("me", THEIRS)),
                None,
                Some(OURS),
                TakeOver { from: "me".into(), wait_for_old_lease: false },
            ),
            (
                "our record before the view confirmed it counts as an earlier run",
                Some("1"),
                Some(("me", OURS)),
                None,
                None,
                TakeOver { from: "me".into(), wait_for_old_lease: false },
            ),
            (
                "we held, another took over: follow",
                Some("1"),
                Some(("other", THEIRS)),
                None,
                Some(OURS),
                Follow { leader: "other".into() },
            ),
            (
                "newer cluster engine: stand aside",
                Some("2"),
                None,
                None,
                None,
                StandAside {
                    reason: StandAsideReason::ClusterVersionNewer { cluster: 2, mine: ENGINE_VERSION },
                    resign: false,
                },
            ),
            (
                "newer cluster engine while leading: resign",
                Some("2"),
                Some(("me", OURS)),
                None,
                Some(OURS),
                StandAside {
                    reason: StandAsideReason::ClusterVersionNewer { cluster: 2, mine: ENGINE_VERSION },
                    resign: true,
                },
            ),
            (
                "older cluster engine: raise",
                Some("0"),
                Some(("other", THEIRS)),
                None,
                None,
                RaiseClusterVersion { from: Some(0), to: ENGINE_VERSION },
            ),
        ];
        for (case, version, leader, raised, held, want) in rows {
            assert_eq!(step("me", false, &view(version, leader), raised, held), want, "{case}");
        }
    }

    #[test]
    fn disabled_engine_stands_aside() {
        let got = step("me", true, &view(Some("1"), None), None, None);
        assert_eq!(got, LeadershipStep::StandAside { reason: StandAsideReason::EngineDisabled, resign: false });
    }

    #[test]
    fn view_confirms_only_our_lease() {
        assert!(view_shows_lease(&view(Some("1"), Some(("me", OURS))), OURS));
        assert!(!view_shows_lease(&view(Some("1"), Some(("me", THEIRS))), OURS));
        assert!(!view_shows_lease(&view(Some("1"), None), OURS));
    }
}

//! Leadership glue between the registry view and the pure [`decide`](super::leader::decide) (spec §1.6 in etcd v3
//! terms). Pure: the runner calls [`step`] on every tick and carries the step out.
//!
//! The v3 leader key holds only a machine ID, bound to the leader's engine lease; the engine version lives in its
//! own key. A leader therefore always runs the cluster's engine version, which is what the record's version is
//! read as. "Holding" means the record is bound to the lease this engine campaigned with and still keeps alive; a
//! record with our machine ID but another lease belongs to an earlier run of this fleetd (crashed without
//! resigning, or a lease given up during an etcd outage and restored by etcd); the runner retires that key at once
//! (delete-if-still-that-lease) rather than waiting for the lease to expire.

use super::leader::{CurrentLeader, ENGINE_VERSION, LeadershipStep, LeadershipView, decide};

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
    use crate::engine::leader::StandAsideReason;
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

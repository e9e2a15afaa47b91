//! A 3-member etcd in the harness (issue 14 item 5), without fleet: every member healthy, one leader that every
//! member names, a killed leader replaced by an election among the other two, the member back and healthy, and
//! nothing left after the cluster is dropped.

use fleet_harness::{Cluster, Fleet, reap};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_elect_a_new_leader_when_the_leader_is_killed() {
    let cluster = Cluster::builder().machines(1).fleet(Fleet::Off).etcd_members(3).start().await.unwrap();
    let run = cluster.run_id().clone();
    let members = cluster.etcd_members();
    assert_eq!(members.len(), 3);
    for m in members {
        let health = m.health().await.unwrap();
        assert!(health.success(), "{} unhealthy: {}", m.name(), health.describe());
    }
    let leader = cluster.etcd_leader().await.unwrap();
    members[leader].kill().await.unwrap();
    let new_leader = cluster
        .wait_for("a new etcd leader among the two members left", || async {
            match cluster.etcd_leader().await {
                Ok(i) if i != leader => fleet_harness::Check::Ready(i),
                Ok(i) => fleet_harness::Check::NotYet(format!("member {i} still named leader")),
                Err(e) => fleet_harness::Check::NotYet(e.to_string()),
            }
        })
        .await
        .unwrap();
    assert_ne!(new_leader, leader);
    cluster.start_etcd_member(leader).await.unwrap();
    let back = members[leader].status().await.unwrap();
    assert_ne!(back.leader, 0, "the member that came back knows a leader: {back:?}");
    // The machine reaches every member by name.
    let m = cluster.machine(1).unwrap();
    for e in members {
        let probe = format!("exec 3<>/dev/tcp/{}/2379", e.name());
        let out = m.exec(&["timeout", "2", "bash", "-c", &probe]).await.unwrap();
        assert!(out.success(), "m1 cannot reach {}: {}", e.name(), out.describe());
    }
    drop(cluster);
    let left = reap::remaining(&run).expect("docker answers");
    assert!(left.is_empty(), "run {run} left {left:?}");
}

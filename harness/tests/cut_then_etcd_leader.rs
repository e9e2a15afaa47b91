//! The race behind nemesis seed 4242 (issue 37): m2 cut from etcd for 2 s (shorter than its TTL of 5 s), then, 0.8 s
//! after the cut healed, the etcd leader killed for 10 s. That run moved four of m2's units to m1 and ran two on
//! both. This composes the two faults back to back, several times over, on a 3-member etcd, and asks what the faults
//! must not change: every unit keeps its process (the same MainPID on the same machine) and every machine stays
//! listed. Odd rounds cut the engine leader's machine, even rounds another. The cut lasts 1.5–2.5 s and the gap before the kill 0.2–1.4 s, varying round by round around seed 4242's
//! (2 s, 0.8 s). Long (about 40 s a round): run it by hand with `--ignored` (`CUT_THEN_ETCD_LEADER_ROUNDS`, default
//! 5).

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_harness::{Check, Cluster, WaitOptions};

const UNITS: usize = 6;
const PLAIN: &str = "[Service]\nExecStart=/bin/sleep 100000\n";

fn rounds() -> usize {
    std::env::var("CUT_THEN_ETCD_LEADER_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: the two faults of seed 4242 back to back, several rounds"]
async fn a_short_cut_then_an_etcd_leader_loss_moves_and_restarts_nothing() {
    let cluster = Cluster::builder()
        .machines(3)
        .etcd_members(3)
        .agent_ttl("5s")
        .wait(WaitOptions { timeout: Duration::from_secs(60), ..WaitOptions::default() })
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (1..=UNITS).map(|i| format!("cut@{i}.service")).collect();
    let mut args = vec!["start".to_string(), "--no-block".to_string()];
    for n in &names {
        let path = dir.path().join(n);
        std::fs::write(&path, PLAIN).unwrap();
        args.push(path.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cluster.fleetctl(1, &args).await.unwrap();
    assert!(out.success(), "fleetctl start: {}", out.describe());
    let settled = || async {
        match cluster.main_pids(&names).await {
            Ok(pids) if pids.len() == UNITS => Check::Ready(pids),
            Ok(pids) => Check::NotYet(format!("{pids:?}")),
            Err(e) => Check::NotYet(e.to_string()),
        }
    };
    let mut before: BTreeMap<(String, String), String> =
        cluster.wait_for("every unit active on exactly one machine", settled).await.unwrap();
    let mut cut_slots = Vec::new();
    let mut changed = Vec::new();
    for round in 1..=rounds() {
        // Seed 4242's timing (a 2 s cut, 0.8 s before the kill) and its neighbours, round by round.
        let cut = Duration::from_millis(1_500 + (round as u64 % 3) * 500);
        let gap = Duration::from_millis(200 + (round as u64 % 4) * 400);
        // Odd rounds cut the engine leader's machine, even rounds another one (the two sides of seed 4242's m2).
        let leader = cluster.engine_leader().await.unwrap().unwrap_or(1);
        let slot = if round % 2 == 1 { leader } else { leader % 3 + 1 };
        cut_slots.push(slot);
        let machine = cluster.machine(slot).unwrap();
        machine.partition().await.unwrap();
        tokio::time::sleep(cut).await;
        machine.heal().await.unwrap();
        tokio::time::sleep(gap).await;
        let leader = cluster.etcd_leader().await.unwrap();
        cluster.etcd_members()[leader].kill().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        cluster.start_etcd_member(leader).await.unwrap();
        cluster.wait_for_n_machines(1, 3).await.unwrap();
        // Give a unit that moved time to show on its new machine before looking.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after = cluster.wait_for("every unit active on exactly one machine", settled).await.unwrap();
        if after != before {
            eprintln!(
                "round {round} (m{slot} cut {cut:?}, gap {gap:?}): before {before:?}\n          after  {after:?}"
            );
            changed.push(round);
        } else {
            eprintln!("round {round} (m{slot} cut {cut:?}, gap {gap:?}): nothing moved or restarted");
        }
        before = after;
    }
    for slot in changed.iter().map(|round| cut_slots[round - 1]) {
        let machine = cluster.machine(slot).unwrap();
        let journal = machine.exec(&[
            "sh",
            "-c",
            "journalctl -u fleet --no-pager | grep -i -E 'lease|regist|monitor' | tail -40",
        ]);
        eprintln!("{}'s fleetd:\n{}", machine.name(), journal.await.map(|o| o.stdout).unwrap_or_default());
    }
    assert!(changed.is_empty(), "units moved or restarted in rounds {changed:?} of {}", rounds());
}

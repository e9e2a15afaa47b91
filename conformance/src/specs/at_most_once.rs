//! At-most-once units across a partition (issue 14 item 2, capability `at_most_once`): a unit declaring
//! `[X-Fleet] AtMostOnce=true` never runs on two machines at once — judged by sampling systemd in every machine,
//! not fleet's view — and a cut-off machine and its units show as in doubt in `list-units` meanwhile.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::fixtures;
use crate::{Ctx, Outcome};

const AMO: &str = "amo-once.service";
const SIDECAR: &str = "amo-sidecar.service";
/// Samples of systemd in every machine start at most this far apart (a round of `systemctl is-active` in each).
const SAMPLE_PERIOD: Duration = Duration::from_millis(200);

/// systemd active states in which a unit's processes may run.
fn running(state: &str) -> bool {
    matches!(state, "active" | "activating" | "deactivating" | "reloading")
}

/// What the sampler saw.
#[derive(Default)]
struct Samples {
    rounds: usize,
    /// Rounds in which the at-most-once unit ran on more than one machine.
    violations: Vec<String>,
    /// Every change of the per-machine states, with the time since sampling began.
    timeline: Vec<String>,
}

/// Samples `systemctl is-active AMO` in the three machines, concurrently, until `done`; a round starts every
/// [`SAMPLE_PERIOD`] (later only when the previous round's `docker exec`s took longer).
async fn sample(ctx: &Ctx, done: &AtomicBool, seen: &Mutex<Samples>) {
    let began = Instant::now();
    let mut last: Vec<String> = Vec::new();
    while !done.load(Ordering::SeqCst) {
        let round = Instant::now();
        let is_active = |slot: usize| ctx.exec(slot, &["systemctl", "is-active", AMO]);
        let (a, b, c) = tokio::join!(is_active(1), is_active(2), is_active(3));
        let states: Vec<String> = [a, b, c]
            .into_iter()
            .map(|o| o.map(|o| o.stdout.trim().to_string()).unwrap_or_else(|e| format!("exec failed: {e}")))
            .collect();
        let on: Vec<String> =
            states.iter().enumerate().filter(|(_, s)| running(s)).map(|(i, _)| format!("m{}", i + 1)).collect();
        let at = began.elapsed().as_secs_f64();
        {
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.rounds += 1;
            if states != last {
                seen.timeline.push(format!("{at:.2} s {states:?}"));
                last = states.clone();
            }
            if on.len() > 1 {
                seen.violations.push(format!("{at:.2} s: {AMO} running on {} at once ({states:?})", on.join(" and ")));
            }
        }
        tokio::time::sleep_until(round + SAMPLE_PERIOD).await;
    }
}

/// `PATCH /fleet/v1/machines`: sets `role` of machine `slot` (through machine `via`'s API).
async fn set_role(ctx: &Ctx, via: usize, slot: usize, role: &str) -> Outcome {
    let body =
        json!([{"op": "replace", "path": format!("/{}/metadata/role", ctx.id(slot)?), "value": {"value": role}}]);
    let r = ctx.http(via, "PATCH", "/fleet/v1/machines", Some(&body.to_string())).await?;
    ctx.ensure(r.status == 204, || format!("PATCH {body}: expected 204, observed {}", r.describe()))
}

/// Machine 1 (the only `role=db` machine) runs an at-most-once unit and a plain unit that follows it
/// (`MachineOf=`); machine 1 is cut from etcd for longer than the TTL. Throughout, systemd in every machine is
/// sampled: the at-most-once unit never runs on two machines at once. During the cut, m1 stops it (its presence is
/// in doubt) while the plain unit keeps running there (at-least-once: fleet never stops a unit because etcd is out
/// of reach), and list-units from m2 shows the unit on m1 as `unknown`/`in-doubt`. Once m2 may run it (role=db
/// through the API), the engine moves it there — then the plain unit runs on both machines, the documented
/// at-least-once duplicate of a partition. After the cut heals, m1 starts neither again: one copy of each.
pub async fn never_runs_twice_across_a_partition(ctx: Ctx) -> Outcome {
    let machines = 3;
    ctx.wait_for_n_machines(1, machines).await?;
    let dir = fixtures::TempDir::new()?;
    let amo = dir.write(
        AMO,
        "[Unit]\nDescription=at most once\n\n[Service]\nExecStart=/bin/sleep infinity\n\n\
         [X-Fleet]\nAtMostOnce=true\nMachineMetadata=role=db\n",
    )?;
    let sidecar =
        dir.write(SIDECAR, "[Service]\nExecStart=/bin/sleep infinity\n\n[X-Fleet]\nMachineOf=amo-once.service\n")?;
    ctx.fleetctl_ok(1, &["start", &amo, &sidecar]).await?;
    let (m1, m2) = (ctx.id(1)?, ctx.id(2)?);
    let placed = ctx.wait_for_n_active_units(1, 2).await?;
    for unit in [AMO, SIDECAR] {
        ctx.ensure(placed.get(unit) == Some(&m1), || format!("{unit} must start on m1 (role=db); placed: {placed:?}"))?;
    }

    let done = AtomicBool::new(false);
    let seen = Mutex::new(Samples::default());
    let scenario = async {
        let result = partition_scenario(&ctx, &m1, &m2).await;
        done.store(true, Ordering::SeqCst);
        result
    };
    let ((), result) = tokio::join!(sample(&ctx, &done, &seen), scenario);
    let seen = seen.into_inner().unwrap_or_else(|e| e.into_inner());
    ctx.ensure(seen.violations.is_empty(), || {
        format!(
            "{AMO} ran on two machines at once in {} of {} samples: {}; state changes (m1, m2, m3): {}",
            seen.violations.len(),
            seen.rounds,
            seen.violations.iter().take(5).cloned().collect::<Vec<_>>().join("; "),
            seen.timeline.join(" | ")
        )
    })?;
    result?;
    // systemd's own record: m1 started the unit once (before the cut), never again.
    let journal = ctx.journal_pid1(1).await?;
    let starts: Vec<&str> = journal
        .lines()
        .filter(|l| l.starts_with("Started") && (l.contains(AMO) || l.contains("at most once")))
        .collect();
    ctx.ensure(starts.len() == 1, || {
        format!(
            "m1 must have started {AMO} once (before the cut); PID 1 logged {starts:?}; timeline: {}",
            seen.timeline.join(" | ")
        )
    })
}

async fn partition_scenario(ctx: &Ctx, m1: &str, m2: &str) -> Outcome {
    let machine = ctx.machine(1)?;
    machine.partition().await.map_err(|e| e.to_string())?;
    // m1 stops the at-most-once unit on its own; the plain unit keeps running there.
    ctx.wait_systemd(1, AMO, "ActiveState", "inactive").await?;
    // Seen from m2: the unit is still scheduled to m1, whose presence is gone, and shows so.
    let fields = ["unit", "machine", "active", "sub", "presence"];
    ctx.wait_table(
        2,
        "list-units",
        &fields,
        &format!("list-units on m2 to show {AMO} on the cut m1 in doubt"),
        |rows| {
            let row = rows.iter().find(|r| r.get("unit") == AMO).ok_or_else(|| format!("no {AMO} row: {rows:?}"))?;
            let (machine, active, sub, presence) =
                (row.get("machine"), row.get("active"), row.get("sub"), row.get("presence"));
            if machine.starts_with(m1) && active == "unknown" && sub == "in-doubt" && presence == "in-doubt" {
                Ok(())
            } else {
                Err(format!("{AMO}: machine {machine}, active {active}, sub {sub}, presence {presence}"))
            }
        },
    )
    .await?;
    let sidecar_on_m1 = ctx.show(1, SIDECAR, &["ActiveState"]).await?;
    ctx.ensure(sidecar_on_m1.get("ActiveState").map(String::as_str) == Some("active"), || {
        format!("{SIDECAR} (at-least-once) must keep running on the cut m1; observed {sidecar_on_m1:?}")
    })?;
    // m2 may run it now: the engine moves it there (after its margin), the sidecar follows.
    set_role(ctx, 2, 2, "db").await?;
    ctx.wait_systemd(2, AMO, "ActiveState", "active").await?;
    ctx.wait_systemd(2, SIDECAR, "ActiveState", "active").await?;
    // The documented at-least-once duplicate: the cut m1 still runs the plain unit.
    let sidecar_on_m1 = ctx.show(1, SIDECAR, &["ActiveState"]).await?;
    ctx.ensure(sidecar_on_m1.get("ActiveState").map(String::as_str) == Some("active"), || {
        format!("{SIDECAR} must still run on the cut m1 (at-least-once); observed {sidecar_on_m1:?}")
    })?;
    machine.heal().await.map_err(|e| e.to_string())?;
    ctx.wait_for_n_machines(2, 3).await?;
    // m1 learns that both moved: it stops the plain unit and starts neither again.
    ctx.wait_systemd(1, SIDECAR, "ActiveState", "inactive").await?;
    ctx.wait_table(2, "list-units", &["unit", "machine", "active"], "one active copy of each unit, on m2", |rows| {
        let seen: Vec<(String, String, String)> = rows
            .iter()
            .map(|r| (r.get("unit").to_string(), r.get("machine").to_string(), r.get("active").to_string()))
            .collect();
        let on_m2 = |u: &str| seen.iter().filter(|(n, m, a)| n == u && m.starts_with(m2) && a == "active").count() == 1;
        if on_m2(AMO) && on_m2(SIDECAR) && seen.len() == 2 { Ok(()) } else { Err(format!("{seen:?}")) }
    })
    .await?;
    // A few reconciles of the healed m1 under the sampler's eye.
    ctx.hold(Duration::from_secs(5)).await;
    let amo_on_m1 = ctx.show(1, AMO, &["ActiveState"]).await?;
    ctx.ensure(amo_on_m1.get("ActiveState").map(String::as_str) != Some("active"), || {
        format!("{AMO} must not run on m1 after the heal; observed {amo_on_m1:?}")
    })
}

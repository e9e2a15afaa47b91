//! Draining a machine (issue 38), in the `machines` area: `fleetctl drain MACHINE` cordons it and moves its units
//! off a few at a time (a `MachineOf=` follower with its peer, an at-most-once unit never on two machines at once),
//! then stops there the units that cannot leave (a global unit, a unit pinned by `MachineID=`), which start again
//! after `fleetctl uncordon`; a drain can be paused and aborted, with the rollouts' exit codes (0 done, 2 paused,
//! 4 aborted).
//!
//! Observations: `list-units` (where each unit is active), `list-machines --fields=machine,state`, fleetctl's exit
//! codes, and systemd inside the machines (`systemctl is-active`, sampled for the at-most-once unit).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fleet_harness::wait::Check;

use super::short;
use crate::capabilities::Capability;
use crate::fixtures;
use crate::{Area, Ctx, Outcome, Spec, SpecFuture};

pub fn specs() -> Vec<Spec> {
    fn spec(name: &'static str, machines: usize, run: fn(Ctx) -> SpecFuture) -> Spec {
        Spec {
            name,
            area: Area::Machines,
            machines,
            metadata: &[],
            requires: &[],
            needs: super::CHANGES_MACHINES,
            origin: "issue 38",
            run,
        }
    }
    vec![
        spec("drain_moves_units_off_then_stops_what_cannot_leave", 3, |c| Box::pin(moves_then_stops(c)))
            .requires(&[Capability::Drain]),
        spec("drain_pauses_and_aborts_with_rollout_exit_codes", 2, |c| Box::pin(pause_and_abort(c)))
            .requires(&[Capability::Drain]),
    ]
}

const AMO: &str = "drn-amo.service";
const PEER: &str = "drn-peer.service";
const FOLLOWER: &str = "drn-follower.service";
const PLAIN: &str = "drn-plain.service";
const GLOBAL: &str = "drn-global.service";
const PINNED: &str = "drn-pinned.service";

/// systemd active states in which a unit's processes may run.
fn running(state: &str) -> bool {
    matches!(state, "active" | "activating" | "deactivating" | "reloading")
}

/// `systemctl is-active <unit>` in machine `slot`.
async fn is_active(ctx: &Ctx, slot: usize, unit: &str) -> Result<String, String> {
    Ok(ctx.exec(slot, &["systemctl", "is-active", unit]).await?.stdout.trim().to_string())
}

/// Waits until systemd in machine `slot` shows `unit` active (`want`) or not running (`!want`).
async fn wait_running(ctx: &Ctx, slot: usize, unit: &str, want: bool) -> Outcome {
    let what = format!("{unit} {} in m{slot}", if want { "active" } else { "stopped" });
    ctx.wait_for(&what, || async move {
        match is_active(ctx, slot, unit).await {
            Ok(s) if (s == "active") == want && (want || !running(&s)) => Check::Ready(()),
            Ok(s) => Check::NotYet(format!("systemctl is-active: {s}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

/// The machines (full IDs) `list-units` shows each unit active on.
async fn active_on(ctx: &Ctx) -> Result<BTreeMap<String, Vec<String>>, String> {
    let units = ctx.list_units(1).await?;
    Ok(units
        .into_iter()
        .map(|(unit, rows)| {
            let on = rows.iter().filter(|r| r.active_state == "active").map(|r| r.machine.clone()).collect();
            (unit, on)
        })
        .collect())
}

/// Samples `systemctl is-active` of the at-most-once unit in machines 1–3 every 200 ms until `done`; returns the
/// rounds and the moments it ran on two machines at once.
async fn sample_amo(ctx: &Ctx, done: &AtomicBool, violations: &Mutex<Vec<String>>) -> usize {
    let mut rounds = 0;
    while !done.load(Ordering::SeqCst) {
        let (a, b, c) = tokio::join!(is_active(ctx, 1, AMO), is_active(ctx, 2, AMO), is_active(ctx, 3, AMO));
        let states: Vec<String> = [a, b, c].into_iter().map(|s| s.unwrap_or_else(|e| format!("exec: {e}"))).collect();
        if states.iter().filter(|s| running(s)).count() > 1 {
            violations.lock().unwrap_or_else(|e| e.into_inner()).push(format!("round {rounds}: {states:?}"));
        }
        rounds += 1;
        ctx.hold(Duration::from_millis(200)).await;
    }
    rounds
}

/// Three machines. With m2 and m3 cordoned, m1 gets a plain unit, an at-most-once unit, a unit and its `MachineOf=`
/// follower, a unit pinned to m1 (`MachineID=`) and a global unit (which runs everywhere). After uncordoning m2 and
/// m3, `fleetctl drain m1` (one move at a time) exits 0: every unit that may leave is active on m2 or m3, the
/// follower with its peer, the at-most-once unit never on two machines at once (systemd sampled throughout); the
/// pinned unit and the global unit are stopped on m1 (the global one still runs on m2 and m3); list-machines shows
/// m1 cordoned. `fleetctl uncordon m1` starts the pinned and the global unit on m1 again, and moves nothing back.
pub async fn moves_then_stops(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    let (m1, m2, m3) = (ctx.id(1)?, ctx.id(2)?, ctx.id(3)?);
    let dir = fixtures::TempDir::new()?;
    let service = "[Service]\nExecStart=/bin/sleep infinity\n";
    let files = [
        dir.write(PLAIN, service)?,
        dir.write(AMO, &format!("{service}\n[X-Fleet]\nAtMostOnce=true\n"))?,
        dir.write(PEER, service)?,
        dir.write(FOLLOWER, &format!("{service}\n[X-Fleet]\nMachineOf={PEER}\n"))?,
        dir.write(PINNED, &format!("{service}\n[X-Fleet]\nMachineID={m1}\n"))?,
        dir.write(GLOBAL, &format!("{service}\n[X-Fleet]\nGlobal=true\n"))?,
    ];
    for m in [&m2, &m3] {
        ctx.fleetctl_ok(1, &["cordon", m]).await?;
    }
    let mut start = vec!["start"];
    start.extend(files.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &start).await?;
    for unit in [PLAIN, AMO, PEER, FOLLOWER, PINNED, GLOBAL] {
        wait_running(&ctx, 1, unit, true).await?;
    }
    for m in [&m2, &m3] {
        ctx.fleetctl_ok(1, &["uncordon", m]).await?;
    }
    wait_running(&ctx, 2, GLOBAL, true).await?;
    wait_running(&ctx, 3, GLOBAL, true).await?;

    let done = AtomicBool::new(false);
    let violations = Mutex::new(Vec::new());
    let drain = async {
        let out = ctx.fleetctl(1, &["drain", "--max-unavailable=1", "--health-timeout=40s", short(&m1)]).await;
        done.store(true, Ordering::SeqCst);
        out
    };
    let (rounds, out) = tokio::join!(sample_amo(&ctx, &done, &violations), drain);
    let out = out?;
    ctx.ensure(out.status == 0, || format!("drain of m1 must exit 0 (done); observed {}", out.describe()))?;
    ctx.ensure(out.stdout.contains(&format!("drain of {}", short(&m1))), || {
        format!("drain shows its progress as 'drain of <machine>'; observed {}", out.describe())
    })?;
    let violations = violations.into_inner().unwrap_or_else(|e| e.into_inner());
    ctx.ensure(violations.is_empty(), || {
        format!("{AMO} ran on two machines at once in {} of {rounds} samples: {violations:?}", violations.len())
    })?;

    let on = active_on(&ctx).await?;
    let machine_of = |unit: &str| on.get(unit).cloned().unwrap_or_default();
    for unit in [PLAIN, AMO, PEER, FOLLOWER] {
        let at = machine_of(unit);
        ctx.ensure(at.len() == 1 && (at[0] == m2 || at[0] == m3), || {
            format!("after the drain {unit} must be active on m2 or m3 only; list-units shows it active on {at:?}")
        })?;
    }
    ctx.ensure(machine_of(FOLLOWER) == machine_of(PEER), || {
        format!("{FOLLOWER} follows {PEER} (MachineOf=): {:?} vs {:?}", machine_of(FOLLOWER), machine_of(PEER))
    })?;
    for unit in [PINNED, GLOBAL] {
        let state = is_active(&ctx, 1, unit).await?;
        ctx.ensure(!running(&state), || format!("the drain stops {unit} on m1; systemctl is-active: {state}"))?;
    }
    for slot in [2, 3] {
        let state = is_active(&ctx, slot, GLOBAL).await?;
        ctx.ensure(state == "active", || format!("{GLOBAL} keeps running on m{slot}; systemctl is-active: {state}"))?;
    }
    let states = ctx.table(1, "list-machines", &["machine", "state"]).await?;
    let m1_state = states.iter().find(|r| r.get("machine") == m1).map(|r| r.get("state").to_string());
    ctx.ensure(m1_state.as_deref() == Some("cordoned"), || {
        format!("a drained machine stays cordoned; list-machines shows m1 as {m1_state:?}")
    })?;

    ctx.fleetctl_ok(1, &["uncordon", &m1]).await?;
    wait_running(&ctx, 1, PINNED, true).await?;
    wait_running(&ctx, 1, GLOBAL, true).await?;
    let after = active_on(&ctx).await?;
    for unit in [PLAIN, AMO, PEER, FOLLOWER] {
        ctx.ensure(after.get(unit) == on.get(unit), || {
            format!("an uncordon moves nothing back: {unit} was on {:?}, now {:?}", on.get(unit), after.get(unit))
        })?;
    }
    Ok(())
}

/// Two machines; m2 cordoned while three units start on m1, then uncordoned. `drain --no-block --min-healthy=10m`
/// of m1 releases one move, which can never be done: `rollout-pause drain` makes `rollout-status drain` exit 2
/// (paused) with the units left on m1 still running there; `rollout-abort drain` makes it exit 4 (aborted), and
/// m1 stays cordoned.
pub async fn pause_and_abort(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    let (m1, m2) = (ctx.id(1)?, ctx.id(2)?);
    ctx.fleetctl_ok(1, &["cordon", &m2]).await?;
    let placed = ctx.start_hello_instances(3).await?;
    ctx.ensure(placed.values().all(|m| *m == m1), || format!("with m2 cordoned all go to m1: {placed:?}"))?;
    ctx.fleetctl_ok(1, &["uncordon", &m2]).await?;

    let out = ctx.fleetctl(1, &["drain", "--no-block", "--min-healthy=10m", "--health-timeout=20m", &m1]).await?;
    ctx.ensure(out.status == 0, || format!("drain --no-block exits 0 once stored; observed {}", out.describe()))?;
    // One unit moves to m2 and is active there; its step waits for --min-healthy.
    ctx.wait_for("one unit active on m2 while the drain runs", || async {
        match active_on(&ctx).await {
            Ok(on) if on.values().filter(|at| at.contains(&m2)).count() == 1 => Check::Ready(()),
            Ok(on) => Check::NotYet(format!("list-units: {on:?}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await?;
    ctx.fleetctl_ok(1, &["rollout-pause", "drain"]).await?;
    let status = ctx.fleetctl(1, &["rollout-status", "drain"]).await?;
    ctx.ensure(status.status == 2, || format!("rollout-status of a paused drain exits 2; {}", status.describe()))?;
    let on = active_on(&ctx).await?;
    let left: Vec<&String> = on.iter().filter(|(_, at)| at.contains(&m1)).map(|(u, _)| u).collect();
    ctx.ensure(left.len() == 2, || format!("a paused drain leaves the other two units running on m1: {on:?}"))?;

    ctx.fleetctl_ok(1, &["rollout-abort", "drain"]).await?;
    let status = ctx.fleetctl(1, &["rollout-status", "drain"]).await?;
    ctx.ensure(status.status == 4, || format!("rollout-status of an aborted drain exits 4; {}", status.describe()))?;
    let states = ctx.table(1, "list-machines", &["machine", "state"]).await?;
    let m1_state = states.iter().find(|r| r.get("machine") == m1).map(|r| r.get("state").to_string());
    ctx.ensure(m1_state.as_deref() == Some("cordoned"), || {
        format!("an aborted drain leaves the machine cordoned; list-machines shows m1 as {m1_state:?}")
    })
}

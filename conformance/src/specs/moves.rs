//! Replacements that move units between machines (spec §10.4, L13; issue 13) and the default of `--replace`
//! (issue 19), in the `replace` area.
//!
//! On one machine systemd's own job queue keeps a replaced unit's old stop hooks before its new start hooks, so a
//! spec whose replacements never move proves little about the hand-over between machines. Every round here *must*
//! move the unit: the new version's constraints exclude the machine it runs on (`MachineMetadata=hostname=...` of
//! the other machines), an instance's `MachineMetadata=r<k>=%i` pin rotates to another machine, or a global unit's
//! `MachineMetadata=` selects another set of machines. Each round goes through a command that replaces:
//! `start --replace`, or `stop` + `load --replace` + `start` (a loaded unit replaced), with and without
//! `--keep-machine`.
//!
//! The proof is read inside the machines: every version's `ExecStartPre` and `ExecStopPost` append
//! `<ns since epoch> <hook> v<version> <unit>` to `/root/sync.log` on their machine (the containers share the host's
//! clock), and the old version's `ExecStopPost` (which sleeps first: 1 s, for the instances 1–3 s) must have
//! finished before the new version's `ExecStartPre` started, wherever the two ran. Each spec prints
//! `timing: ...; machine changes: N`; a round that does not move fails. The sleeps are what makes a missing
//! hand-over visible (the new machine would start within them); no spec waits on them.

use std::collections::BTreeMap;
use std::time::Instant;

use fleet_harness::Cluster;
use fleet_harness::wait::Check;

use super::replace::{
    Dir, cluster, cluster_with, ctl, err, list_units_via, summary, unit_hashes_via, wait_runs_once_via,
};
use crate::capabilities::Capability;
use crate::{Area, Ctx, Outcome, Spec, SpecFuture};

/// Rounds of the plain-unit specs (each round moves the unit once).
const ROUNDS: usize = 8;
/// Rounds of the template-instance spec (each round moves three instances).
const INSTANCE_ROUNDS: usize = 6;
/// Rounds of the global-unit spec (each round one machine leaves and another joins).
const GLOBAL_ROUNDS: usize = 4;
/// Where the hooks log, in every machine.
const LOG: &str = "/root/sync.log";

/// The specs of this module, for the catalogue. Each builds its own cluster (machines = 0 for the framework).
pub fn specs() -> Vec<Spec> {
    fn spec(name: &'static str, origin: &'static str, run: fn(Ctx) -> SpecFuture) -> Spec {
        Spec {
            name,
            area: Area::Replace,
            machines: 0,
            metadata: &[],
            requires: &[],
            needs: super::OWN_CLUSTERS,
            origin,
            run,
        }
    }
    use Capability::*;
    vec![
        spec("moved_by_constraints_stop_post_precedes_start_pre_8_rounds", "issue 13, spec §10.4, L13", |_| {
            Box::pin(moved_by_constraints(false))
        })
        .requires(&[CrossMachineHandover]),
        spec("keep_machine_moved_by_constraints_stop_post_precedes_start_pre_8_rounds", "issue 13", |_| {
            Box::pin(moved_by_constraints(true))
        })
        .requires(&[CrossMachineHandover, KeepMachine]),
        spec("instances_whose_pins_rotate_stop_post_precedes_start_pre_6_rounds", "issue 13, PR #1509", |_| {
            Box::pin(instances_whose_pins_rotate())
        })
        .requires(&[CrossMachineHandover]),
        spec("global_unit_moved_by_metadata_stops_where_it_leaves_4_rounds", "issue 13, upstream #960", |_| {
            Box::pin(global_unit_moved_by_metadata())
        })
        .requires(&[GlobalWait]),
        spec("old_machines_fleetd_killed_during_stop_hooks", "issue 13", |_| {
            Box::pin(fleetd_killed_during_stop_hooks())
        })
        .requires(&[CrossMachineHandover]),
        spec("start_replace_reschedules_a_unit_off_its_busy_machine", "issue 19, spec L1", |_| {
            Box::pin(replace_default(false))
        }),
        spec("start_replace_keep_machine_keeps_a_unit_on_its_busy_machine", "issue 19, issue 5", |_| {
            Box::pin(replace_default(true))
        })
        .requires(&[KeepMachine]),
    ]
}

// ---------------------------------------------------------------------------------------------------------------
// Units whose hooks log, and the log

/// A unit (or instance: `%n` is the full unit name) whose `ExecStartPre` and `ExecStopPost` log to [`LOG`].
/// `before_stop_post` runs first in `ExecStopPost` (shell text ending in `; `), which then sleeps `stop_sleep`.
struct HookUnit<'a> {
    version: usize,
    before_stop_post: &'a str,
    stop_sleep: &'a str,
    xfleet: &'a str,
}

impl HookUnit<'_> {
    fn plain(version: usize, xfleet: &str) -> HookUnit<'_> {
        HookUnit { version, before_stop_post: "", stop_sleep: "1", xfleet }
    }

    fn text(&self) -> String {
        let v = self.version;
        let mut text = format!(
            "[Unit]\nDescription=hand-over v{v}\n\n[Service]\n\
             ExecStartPre=/bin/sh -c \"echo $$(date +%%s%%N) start-pre v{v} %n >> {LOG}\"\n\
             ExecStart=/bin/sh -c \"while true; do sleep 1; done\"\n\
             ExecStopPost=/bin/sh -c \"{}sleep {}; echo $$(date +%%s%%N) stop-post v{v} %n >> {LOG}\"\n",
            self.before_stop_post, self.stop_sleep
        );
        if !self.xfleet.is_empty() {
            text.push_str("\n[X-Fleet]\n");
            text.push_str(self.xfleet);
        }
        text
    }
}

/// A line `stage` of version `v` of `unit`, written from a hook (shell text ending in `; `).
fn log_line(stage: &str, v: usize) -> String {
    format!("echo $$(date +%%s%%N) {stage} v{v} %n >> {LOG}; ")
}

/// One line of a machine's hook log.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    ns: u128,
    hook: String,
    version: usize,
    unit: String,
    /// The machine's name (`m<slot>`).
    machine: String,
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} v{} {} on {}", self.ns, self.hook, self.version, self.unit, self.machine)
    }
}

/// Parses one machine's log (`<ns> <hook> v<version> <unit>` per line).
fn parse_log(machine: &str, text: &str) -> Result<Vec<Event>, String> {
    let mut events = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = |why: String| format!("{machine}:{LOG}: line {line:?}: {why}");
        let f: Vec<&str> = line.split_whitespace().collect();
        let [ns, hook, version, unit] = f[..] else { return Err(bad("expected 4 fields".into())) };
        let ns = ns.parse::<u128>().map_err(|e| bad(format!("timestamp: {e}")))?;
        let version = version
            .strip_prefix('v')
            .and_then(|v| v.parse::<usize>().ok())
            .ok_or_else(|| bad("version is not v<number>".into()))?;
        events.push(Event { ns, hook: hook.into(), version, unit: unit.into(), machine: machine.into() });
    }
    Ok(events)
}

/// Every machine's hook events, in time order.
async fn events(c: &Cluster) -> Result<Vec<Event>, String> {
    let mut all = Vec::new();
    for m in c.machines() {
        let out = m.exec(&["sh", "-c", &format!("cat {LOG} 2>/dev/null || true")]).await.map_err(err)?;
        all.extend(parse_log(m.name(), &out.stdout)?);
    }
    all.sort();
    Ok(all)
}

fn of_unit<'a>(events: &'a [Event], unit: &str) -> Vec<&'a Event> {
    events.iter().filter(|e| e.unit == unit).collect()
}

fn show(events: &[&Event]) -> String {
    events.iter().map(|e| format!("\n    {e}")).collect()
}

fn secs(ns: u128) -> f64 {
    ns as f64 / 1e9
}

/// The hand-over of `unit` from version 1 to `last`, wherever each ran: every version's `ExecStartPre` ran once,
/// every replaced version's `ExecStopPost` once, and version v's `ExecStartPre` started only after version v−1's
/// `ExecStopPost` finished. The error names the first violation and lists the unit's events.
fn check_handover(events: &[Event], unit: &str, last: usize) -> Result<(), String> {
    let mine = of_unit(events, unit);
    let find = |hook: &str, v: usize| -> Result<Option<&Event>, String> {
        let found: Vec<&&Event> = mine.iter().filter(|e| e.hook == hook && e.version == v).collect();
        match found[..] {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            _ => Err(format!("{unit} v{v}'s {hook} ran {} times; events:{}", found.len(), show(&mine))),
        }
    };
    for v in 1..=last {
        let start = find("start-pre", v)?
            .ok_or_else(|| format!("{unit} v{v}'s ExecStartPre never ran; events:{}", show(&mine)))?;
        if v < last && find("stop-post", v)?.is_none() {
            return Err(format!("{unit} v{v} was replaced but its ExecStopPost never ran; events:{}", show(&mine)));
        }
        if v > 1 {
            let stopped = find("stop-post", v - 1)?.expect("checked in the previous iteration");
            if start.ns < stopped.ns {
                return Err(format!(
                    "{unit}: v{v}'s ExecStartPre on {} ran {:.2} s before v{}'s ExecStopPost on {} finished \
                     (the new version started while the old one was still stopping); events:{}",
                    start.machine,
                    secs(stopped.ns - start.ns),
                    v - 1,
                    stopped.machine,
                    show(&mine)
                ));
            }
        }
    }
    if let Some(later) = mine.iter().find(|e| e.version > last) {
        return Err(format!("{unit}: an event of a version after v{last}: {later}; events:{}", show(&mine)));
    }
    Ok(())
}

/// Per machine, `unit`'s copies ran one after the other: start-pre vN, stop-post vN, start-pre vM (M > N), ...
/// with exactly the versions `expected[machine]`, the last one still running iff `running[machine]`.
fn check_per_machine(
    events: &[Event],
    unit: &str,
    expected: &BTreeMap<String, Vec<usize>>,
    running: &BTreeMap<String, bool>,
) -> Result<(), String> {
    for (machine, versions) in expected {
        let mine: Vec<&Event> = of_unit(events, unit).into_iter().filter(|e| &e.machine == machine).collect();
        let mut want = Vec::new();
        for (i, v) in versions.iter().enumerate() {
            want.push(("start-pre", *v));
            if i + 1 < versions.len() || !running.get(machine).copied().unwrap_or(false) {
                want.push(("stop-post", *v));
            }
        }
        let got: Vec<(&str, usize)> = mine.iter().map(|e| (e.hook.as_str(), e.version)).collect();
        if got != want {
            let want: Vec<String> = want.iter().map(|(h, v)| format!("{h} v{v}")).collect();
            return Err(format!(
                "{unit} on {machine}: expected the hooks {} in this order (each copy stopped before the next \
                 started); events:{}",
                want.join(", "),
                show(&mine)
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Commands that replace

/// How a round replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// `start --replace <files>` of launched units.
    Start,
    /// `stop <units>`, `load --replace <files>` of the now loaded units, `start <units>`.
    Load,
}

impl Via {
    fn of_round(round: usize) -> Via {
        if round % 2 == 1 { Via::Start } else { Via::Load }
    }
}

/// Replaces `units` (files in `dir`) through fleetctl via machine `slot`, as `via` says.
async fn replace(c: &Cluster, slot: usize, via: Via, keep_machine: bool, dir: &Dir, units: &[&str]) -> Outcome {
    let paths: Vec<String> = units.iter().map(|u| dir.path(u)).collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let mut replace = vec![if via == Via::Start { "start" } else { "load" }, "--replace"];
    if keep_machine {
        replace.push("--keep-machine");
    }
    replace.extend(&paths);
    if via == Via::Load {
        ctl(c, slot, &[&["stop"], units].concat()).await?;
    }
    ctl(c, slot, &replace).await?;
    if via == Via::Load {
        ctl(c, slot, &[&["start"], units].concat()).await?;
    }
    Ok(())
}

fn describe(via: Via, keep_machine: bool) -> &'static str {
    match (via, keep_machine) {
        (Via::Start, false) => "start --replace",
        (Via::Start, true) => "start --replace --keep-machine",
        (Via::Load, false) => "stop + load --replace + start",
        (Via::Load, true) => "stop + load --replace --keep-machine + start",
    }
}

/// The registry hash of `unit`, through machine `slot`'s API.
async fn hash_of(c: &Cluster, slot: usize, unit: &str) -> Result<String, String> {
    unit_hashes_via(c, slot).await?.remove(unit).ok_or_else(|| format!("{unit} is not listed by list-unit-files"))
}

/// The name (`m<slot>`, also its `hostname` metadata) of the machine with ID `id`.
fn name_of(c: &Cluster, id: &str) -> String {
    c.machines().iter().find(|m| m.id() == id).map_or_else(|| format!("unknown machine {id}"), |m| m.name().into())
}

// ---------------------------------------------------------------------------------------------------------------
// A plain unit whose new constraints exclude its machine

/// Every round the new version allows every machine but the one running the unit, alternating `start --replace`
/// and `stop` + `load --replace` + `start` (with `--keep-machine` too: the engine must move it anyway).
async fn moved_by_constraints(keep_machine: bool) -> Outcome {
    let c = cluster(3).await?;
    let dir = Dir::new()?;
    let unit = "moving.service";
    dir.write(unit, &HookUnit::plain(1, "").text())?;
    ctl(&c, 1, &["start", &dir.path(unit)]).await?;
    let mut home = wait_runs_once_via(&c, 1, unit, &hash_of(&c, 1, unit).await?).await?;
    let mut durations = Vec::new();
    let mut moves = 0;
    for round in 1..=ROUNDS {
        let v = round + 1;
        let via = Via::of_round(round);
        let elsewhere: String = c
            .machines()
            .iter()
            .filter(|m| m.id() != home)
            .map(|m| format!("MachineMetadata=hostname={}\n", m.name()))
            .collect();
        dir.write(unit, &HookUnit::plain(v, &elsewhere).text())?;
        let t = Instant::now();
        replace(&c, 1, via, keep_machine, &dir, &[unit])
            .await
            .map_err(|e| format!("round {round} ({}): {e}", describe(via, keep_machine)))?;
        durations.push(t.elapsed());
        let went = wait_runs_once_via(&c, 1, unit, &hash_of(&c, 1, unit).await?)
            .await
            .map_err(|e| format!("round {round} ({}): {e}", describe(via, keep_machine)))?;
        if went == home {
            return Err(format!(
                "round {round} ({}): v{v} runs on {}, which its constraints exclude",
                describe(via, keep_machine),
                name_of(&c, &home)
            ));
        }
        moves += 1;
        check_handover(&events(&c).await?, unit, v).map_err(|e| {
            format!(
                "round {round} ({}, {} -> {}): {e}",
                describe(via, keep_machine),
                name_of(&c, &home),
                name_of(&c, &went)
            )
        })?;
        home = went;
    }
    eprintln!(
        "timing: {} and {} of 1 unit that must move, {ROUNDS} rounds: {}; machine changes: {moves}",
        describe(Via::Start, keep_machine),
        describe(Via::Load, keep_machine),
        summary(&durations)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Template instances whose metadata pins rotate

/// Machine metadata for the rotation: in rotation k instance i runs on slot ((i − 1 + k) mod 3) + 1.
const ROTATION: &[(usize, &str)] = &[(1, "r0=1,r1=3,r2=2"), (2, "r0=2,r1=1,r2=3"), (3, "r0=3,r1=2,r2=1")];

fn rotation_slot(instance: usize, k: usize) -> usize {
    (instance - 1 + k) % 3 + 1
}

/// Three instances `pinned@1..3`, each with a file of its own whose `MachineMetadata=r<k>=%i` pin changes every
/// round, so that all three move at once, each to the machine the previous one leaves. Every machine stops one
/// instance and starts another in the same round; the stop hooks take 1, 2 and 3 s, so in every round some machine
/// is free to start its new instance while that instance's old machine is still stopping it.
async fn instances_whose_pins_rotate() -> Outcome {
    let c = cluster_with(3, ROTATION).await?;
    let dir = Dir::new()?;
    let units = ["pinned@1.service", "pinned@2.service", "pinned@3.service"];
    // Instance i's ExecStopPost takes i seconds: around the rotation some machine always finishes stopping its own
    // old instance a second or more before the machine it takes an instance from has stopped that one.
    let write = |v: usize| -> Result<(), String> {
        let pin = format!("MachineMetadata=r{}=%i\n", (v - 1) % 3);
        for (i, u) in units.iter().enumerate() {
            let sleep = (i + 1).to_string();
            let text = HookUnit { version: v, before_stop_post: "", stop_sleep: &sleep, xfleet: &pin }.text();
            dir.write(u, &text)?;
        }
        Ok(())
    };
    write(1)?;
    let paths: Vec<String> = units.iter().map(|u| dir.path(u)).collect();
    ctl(&c, 1, &[&["start"], &paths.iter().map(String::as_str).collect::<Vec<_>>()[..]].concat()).await?;
    let mut durations = Vec::new();
    let mut moves = 0;
    for round in 0..=INSTANCE_ROUNDS {
        let v = round + 1;
        let via = Via::of_round(round);
        if round > 0 {
            write(v)?;
            let t = Instant::now();
            replace(&c, 1, via, false, &dir, &units).await.map_err(|e| format!("round {round}: {e}"))?;
            durations.push(t.elapsed());
        }
        let hashes = unit_hashes_via(&c, 1).await?;
        for (i, unit) in units.iter().enumerate() {
            let want = c.machine(rotation_slot(i + 1, (v - 1) % 3)).map_err(err)?;
            let hash = hashes.get(*unit).ok_or_else(|| format!("{unit} not listed"))?;
            let went = wait_runs_once_via(&c, 1, unit, hash).await.map_err(|e| format!("round {round}: {e}"))?;
            if went != want.id() {
                return Err(format!(
                    "round {round}: {unit} v{v} runs on {}, but its pin r{}={} selects {}",
                    name_of(&c, &went),
                    (v - 1) % 3,
                    i + 1,
                    want.name()
                ));
            }
            if round > 0 {
                moves += 1;
            }
        }
        let ev = events(&c).await?;
        for unit in units {
            check_handover(&ev, unit, v).map_err(|e| format!("round {round} ({}): {e}", describe(via, false)))?;
        }
    }
    eprintln!(
        "timing: start --replace and stop + load --replace + start of 3 instances whose pins rotate, \
         {INSTANCE_ROUNDS} rounds: {}; machine changes: {moves}",
        summary(&durations)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// A global unit whose MachineMetadata moves it

/// m1 has `a=y`, m2 `a=y,b=y`, m3 `b=y`: odd versions select `a=y` (m1, m2), even versions `b=y` (m2, m3), so
/// every round one machine leaves, one joins and m2 keeps the unit.
const GLOBAL_METADATA: &[(usize, &str)] = &[(1, "a=y"), (2, "a=y,b=y"), (3, "b=y")];

fn global_slots(v: usize) -> [usize; 2] {
    if v % 2 == 1 { [1, 2] } else { [2, 3] }
}

/// A global unit moved by its `MachineMetadata=`: when `start --replace` returns, exactly the selected machines
/// run the new version and the machine it left has stopped it; per machine, each copy stopped (ExecStopPost
/// done) before the next started. Global units run on every selected machine at once by design, so no order
/// between machines is required.
async fn global_unit_moved_by_metadata() -> Outcome {
    let c = cluster_with(3, GLOBAL_METADATA).await?;
    let dir = Dir::new()?;
    let unit = "moving-global.service";
    let xfleet = |v: usize| format!("Global=true\nMachineMetadata={}=y\n", if v % 2 == 1 { "a" } else { "b" });
    dir.write(unit, &HookUnit::plain(1, &xfleet(1)).text())?;
    ctl(&c, 1, &["start", &dir.path(unit)]).await?;
    let mut durations = Vec::new();
    let mut moves = 0;
    let mut expected: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for round in 0..=GLOBAL_ROUNDS {
        let v = round + 1;
        if round > 0 {
            dir.write(unit, &HookUnit::plain(v, &xfleet(v)).text())?;
            let t = Instant::now();
            ctl(&c, 1, &["start", "--replace", &dir.path(unit)]).await.map_err(|e| format!("round {round}: {e}"))?;
            durations.push(t.elapsed());
            moves += 2;
        }
        let selected = global_slots(v);
        for s in selected {
            expected.entry(c.machine(s).map_err(err)?.name().to_string()).or_default().push(v);
        }
        let when = format!("round {round}: when `start{}` returned", if round > 0 { " --replace" } else { "" });
        let hash = hash_of(&c, 1, unit).await?;
        let rows = list_units_via(&c, 1).await?.remove(unit).unwrap_or_default();
        let mut on: Vec<String> = rows.iter().map(|r| name_of(&c, &r.machine)).collect();
        on.sort();
        let want: Vec<String> = selected.iter().map(|s| format!("m{s}")).collect();
        let all_new = rows.iter().all(|r| r.active == "active" && r.hash == hash);
        if on != want || !all_new {
            return Err(format!(
                "{when}: expected v{v} (hash {}) active on exactly {want:?}; list-units shows {rows:?}",
                &hash[..7]
            ));
        }
        let running: BTreeMap<String, bool> =
            c.machines().iter().map(|m| (m.name().to_string(), want.contains(&m.name().to_string()))).collect();
        for m in c.machines() {
            let active = m.exec(&["systemctl", "is-active", unit]).await.map_err(err)?.stdout.trim().to_string();
            let should = running[m.name()];
            if should != (active == "active") {
                return Err(format!(
                    "{when}: `systemctl is-active {unit}` on {} is {active}, expected {}",
                    m.name(),
                    if should { "active" } else { "not active (the unit left this machine)" }
                ));
            }
        }
        check_per_machine(&events(&c).await?, unit, &expected, &running).map_err(|e| format!("{when}: {e}"))?;
    }
    eprintln!(
        "timing: start --replace of a global unit whose MachineMetadata moves it, {GLOBAL_ROUNDS} rounds: {}; \
         machine changes: {moves}",
        summary(&durations)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// The old machine's fleetd killed while the old version's stop hooks run

/// Version 1's `ExecStopPost` sleeps 2 s (the new machine would start version 2 long before, were it not held
/// back), kills its machine's fleetd (SIGKILL; systemd restarts it after `RestartSec=10s`) and takes 0.5 s more,
/// less than the 3 s TTL of that fleetd's lease (renewed every second): what the killed fleetd published (the unit
/// still deactivating) must keep the new machine from starting version 2 until the old one has finished. The moved unit runs
/// once; the restarted fleetd starts nothing, removes its stale copy, and takes the unit back in round 2. fleetctl
/// talks to a machine whose fleetd stays up.
async fn fleetd_killed_during_stop_hooks() -> Outcome {
    let c = cluster(3).await?;
    let dir = Dir::new()?;
    let unit = "handover.service";
    let kill = format!(
        "sleep 2; {}systemctl kill --signal=SIGKILL fleet.service; {}",
        log_line("killing-fleetd", 1),
        log_line("fleetd-killed", 1)
    );
    let v1 = HookUnit { version: 1, before_stop_post: &kill, stop_sleep: "0.5", xfleet: "" };
    dir.write(unit, &v1.text())?;
    ctl(&c, 1, &["start", &dir.path(unit)]).await?;
    let old = wait_runs_once_via(&c, 1, unit, &hash_of(&c, 1, unit).await?).await?;
    let old_m = c.machines().iter().find(|m| m.id() == old).ok_or("unknown machine")?;
    let via = c.machines().iter().map(|m| m.slot()).find(|s| *s != old_m.slot()).ok_or("no other machine")?;
    let restarts_before = restarts(&c, old_m.slot()).await?;

    // Round 1: v2 excludes the old machine, whose fleetd dies while v1's ExecStopPost runs.
    let elsewhere: String = c
        .machines()
        .iter()
        .filter(|m| m.id() != old)
        .map(|m| format!("MachineMetadata=hostname={}\n", m.name()))
        .collect();
    dir.write(unit, &HookUnit::plain(2, &elsewhere).text())?;
    let t = Instant::now();
    ctl(&c, via, &["start", "--replace", &dir.path(unit)]).await.map_err(|e| format!("round 1: {e}"))?;
    let took = t.elapsed();
    let new =
        wait_runs_once_via(&c, via, unit, &hash_of(&c, via, unit).await?).await.map_err(|e| format!("round 1: {e}"))?;
    let ev = events(&c).await?;
    if !of_unit(&ev, unit).iter().any(|e| e.hook == "fleetd-killed" && e.machine == old_m.name()) {
        return Err(format!(
            "round 1: v1's ExecStopPost on {} did not get to kill fleetd; events:{}",
            old_m.name(),
            show(&of_unit(&ev, unit))
        ));
    }
    if new == old {
        return Err(format!("round 1: v2 runs on {}, which its constraints exclude", old_m.name()));
    }
    check_handover(&ev, unit, 2).map_err(|e| format!("round 1 (fleetd on {} killed): {e}", old_m.name()))?;

    // The killed fleetd comes back (systemd restarts it), starts nothing and removes its stale copy of v1.
    let old_slot = old_m.slot();
    c.wait_for(&format!("fleet.service on {} to be restarted and active", old_m.name()), || async {
        match c.machine(old_slot).map_err(err) {
            Ok(m) => match m.systemctl_show("fleet.service", &["NRestarts", "ActiveState"]).await {
                Ok(p) => {
                    let n = p.get("NRestarts").and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
                    if n > restarts_before && p.get("ActiveState").map(String::as_str) == Some("active") {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("{p:?}"))
                    }
                }
                Err(e) => Check::NotYet(e.to_string()),
            },
            Err(e) => Check::NotYet(e),
        }
    })
    .await
    .map_err(err)?;
    c.wait_for_n_machines(via, 3).await.map_err(err)?;
    c.wait_for(&format!("the restarted fleetd on {} to remove its stale copy of {unit}", old_m.name()), || async {
        match c.machine(old_slot).map_err(err) {
            Ok(m) => match m.systemctl_show(unit, &["LoadState", "ActiveState"]).await {
                Ok(p) if p.get("LoadState").map(String::as_str) == Some("not-found") => Check::Ready(()),
                Ok(p) => Check::NotYet(format!("{p:?}")),
                Err(e) => Check::NotYet(e.to_string()),
            },
            Err(e) => Check::NotYet(e),
        }
    })
    .await
    .map_err(err)?;
    let hash = hash_of(&c, via, unit).await?;
    let still = wait_runs_once_via(&c, via, unit, &hash).await?;
    if still != new {
        return Err(format!(
            "after fleetd on {} came back: {unit} moved from {} to {}",
            old_m.name(),
            name_of(&c, &new),
            name_of(&c, &still)
        ));
    }

    // Round 2: v3 is pinned to the machine whose fleetd was restarted; it must take the unit over in order.
    dir.write(unit, &HookUnit::plain(3, &format!("MachineMetadata=hostname={}\n", old_m.name())).text())?;
    ctl(&c, via, &["start", "--replace", &dir.path(unit)]).await.map_err(|e| format!("round 2: {e}"))?;
    let back =
        wait_runs_once_via(&c, via, unit, &hash_of(&c, via, unit).await?).await.map_err(|e| format!("round 2: {e}"))?;
    if back != old {
        return Err(format!("round 2: v3 runs on {}, but it is pinned to {}", name_of(&c, &back), old_m.name()));
    }
    check_handover(&events(&c).await?, unit, 3).map_err(|e| format!("round 2: {e}"))?;
    eprintln!(
        "timing: start --replace while the old machine's fleetd is killed in ExecStopPost: {:.2} s; \
         machine changes: 2 ({} -> {} -> {})",
        took.as_secs_f64(),
        old_m.name(),
        name_of(&c, &new),
        old_m.name()
    );
    Ok(())
}

/// `NRestarts` of fleet.service in machine `slot`.
async fn restarts(c: &Cluster, slot: usize) -> Result<u64, String> {
    let p = c.machine(slot).map_err(err)?.systemctl_show("fleet.service", &["NRestarts"]).await.map_err(err)?;
    p.get("NRestarts")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("fleet.service in m{slot}: no NRestarts in {p:?}"))
}

// ---------------------------------------------------------------------------------------------------------------
// The default of --replace (issue 19)

fn looping(version: usize, xfleet: &str) -> String {
    let mut text = format!("[Service]\nExecStart=/bin/sh -c \"while true; do echo v{version}; sleep 1; done\"\n");
    if !xfleet.is_empty() {
        text.push_str("\n[X-Fleet]\n");
        text.push_str(xfleet);
    }
    text
}

/// `r.service` runs on a machine that also runs two units pinned there, the other two machines run nothing, and
/// the new version allows every machine. Without `--keep-machine`, `start --replace` reschedules it: the
/// least-loaded rule must pick another machine. With `--keep-machine` it stays. The pinned units are untouched.
async fn replace_default(keep_machine: bool) -> Outcome {
    let c = cluster(3).await?;
    let dir = Dir::new()?;
    let unit = "r.service";
    dir.write(unit, &looping(1, ""))?;
    ctl(&c, 1, &["start", &dir.path(unit)]).await?;
    let home = wait_runs_once_via(&c, 1, unit, &hash_of(&c, 1, unit).await?).await?;
    let pinned = ["pinned-1.service", "pinned-2.service"];
    for p in pinned {
        dir.write(p, &looping(1, &format!("MachineID={home}\n")))?;
    }
    ctl(&c, 1, &["start", &dir.path(pinned[0]), &dir.path(pinned[1])]).await?;
    let placed = c.wait_for_n_active_units(1, 3).await.map_err(err)?;
    for p in pinned {
        if placed.get(p) != Some(&home) {
            return Err(format!("{p} is not on {} (MachineID=): {placed:?}", name_of(&c, &home)));
        }
    }
    let load = |placed: &BTreeMap<String, String>| {
        let mut per: BTreeMap<String, usize> = c.machines().iter().map(|m| (m.name().to_string(), 0)).collect();
        for m in placed.values() {
            *per.entry(name_of(&c, m)).or_default() += 1;
        }
        per
    };
    let before = load(&placed);
    dir.write(unit, &looping(2, ""))?;
    let mut args = vec!["start", "--replace"];
    if keep_machine {
        args.push("--keep-machine");
    }
    let path = dir.path(unit);
    args.push(&path);
    ctl(&c, 1, &args).await?;
    let went = wait_runs_once_via(&c, 1, unit, &hash_of(&c, 1, unit).await?).await?;
    let placed = c.wait_for_n_active_units(1, 3).await.map_err(err)?;
    for p in pinned {
        if placed.get(p) != Some(&home) {
            return Err(format!("{p} left {}: {placed:?}", name_of(&c, &home)));
        }
    }
    let verdict = format!(
        "`{}` of {unit} on {} (units per machine before: {before:?}) put it on {}",
        args[..args.len() - 1].join(" "),
        name_of(&c, &home),
        name_of(&c, &went)
    );
    eprintln!("placement: {verdict}");
    match (keep_machine, went == home) {
        (true, false) => Err(format!("{verdict}: --keep-machine must keep it where it runs")),
        (false, true) => Err(format!(
            "{verdict}: without --keep-machine a replaced unit is rescheduled, and the least-loaded rule must pick \
             one of the idle machines"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ns: u128, hook: &str, v: usize, machine: &str) -> Event {
        Event { ns, hook: hook.into(), version: v, unit: "u.service".into(), machine: machine.into() }
    }

    #[test]
    fn hook_lines_parse_and_bad_lines_are_named() {
        let e = parse_log("m1", "1700000000123456789 start-pre v2 pinned@1.service\n\n").unwrap();
        assert_eq!(
            e,
            [Event {
                ns: 1700000000123456789,
                hook: "start-pre".into(),
                version: 2,
                unit: "pinned@1.service".into(),
                machine: "m1".into()
            }]
        );
        let err = parse_log("m2", "12 start-pre 2 u.service").unwrap_err();
        assert!(err.contains("m2") && err.contains("v<number>"), "{err}");
    }

    #[test]
    fn handover_requires_each_stop_post_before_the_next_start_pre() {
        let good = [
            ev(1, "start-pre", 1, "m1"),
            ev(2, "stop-post", 1, "m1"),
            ev(3, "start-pre", 2, "m2"),
            ev(4, "stop-post", 2, "m2"),
            ev(5, "start-pre", 3, "m1"),
        ];
        assert_eq!(check_handover(&good, "u.service", 3), Ok(()));
        let early = [
            ev(1, "start-pre", 1, "m1"),
            ev(1_000_000_000, "start-pre", 2, "m2"),
            ev(2_800_000_000, "stop-post", 1, "m1"),
        ];
        let err = check_handover(&early, "u.service", 2).unwrap_err();
        assert!(err.contains("v2's ExecStartPre on m2 ran 1.80 s before v1's ExecStopPost on m1 finished"), "{err}");
        let missing = [ev(1, "start-pre", 1, "m1"), ev(3, "start-pre", 2, "m2")];
        assert!(check_handover(&missing, "u.service", 2).unwrap_err().contains("v1 was replaced but its ExecStopPost"));
        let twice = [ev(1, "start-pre", 1, "m1"), ev(2, "start-pre", 1, "m2")];
        assert!(check_handover(&twice, "u.service", 1).unwrap_err().contains("ran 2 times"));
        assert!(check_handover(&good, "u.service", 2).unwrap_err().contains("after v2"));
    }

    #[test]
    fn per_machine_copies_run_one_after_the_other() {
        let e = [
            ev(1, "start-pre", 1, "m1"),
            ev(1, "start-pre", 1, "m2"),
            ev(2, "stop-post", 1, "m1"),
            ev(3, "stop-post", 1, "m2"),
            ev(4, "start-pre", 2, "m2"),
        ];
        let expected = BTreeMap::from([("m1".to_string(), vec![1]), ("m2".to_string(), vec![1, 2])]);
        let running = BTreeMap::from([("m1".to_string(), false), ("m2".to_string(), true)]);
        assert_eq!(check_per_machine(&e, "u.service", &expected, &running), Ok(()));
        let overlapping = [ev(1, "start-pre", 1, "m2"), ev(2, "start-pre", 2, "m2"), ev(3, "stop-post", 1, "m2")];
        let expected = BTreeMap::from([("m2".to_string(), vec![1, 2])]);
        let err = check_per_machine(&overlapping, "u.service", &expected, &running).unwrap_err();
        assert!(err.contains("start-pre v1, stop-post v1, start-pre v2"), "{err}");
    }

    #[test]
    fn the_rotation_moves_every_instance_each_round_and_matches_the_metadata() {
        for k in 0..3 {
            let slots: Vec<usize> = (1..=3).map(|i| rotation_slot(i, k)).collect();
            let mut sorted = slots.clone();
            sorted.sort();
            assert_eq!(sorted, [1, 2, 3], "one instance per machine");
            for i in 1..=3 {
                assert_ne!(rotation_slot(i, k), rotation_slot(i, (k + 1) % 3), "instance {i} moves");
                let md = ROTATION.iter().find(|(s, _)| *s == rotation_slot(i, k)).unwrap().1;
                assert!(md.split(',').any(|kv| kv == format!("r{k}={i}")), "{md} selects instance {i} in r{k}");
            }
        }
    }

    #[test]
    fn hook_units_log_unit_name_and_version() {
        let t = HookUnit::plain(3, "MachineMetadata=hostname=m2\n").text();
        assert!(t.contains("start-pre v3 %n >> /root/sync.log"), "{t}");
        assert!(t.contains("sleep 1; echo $$(date +%%s%%N) stop-post v3 %n"), "{t}");
        assert!(t.ends_with("\n[X-Fleet]\nMachineMetadata=hostname=m2\n"), "{t}");
    }
}

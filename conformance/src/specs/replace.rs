//! `--replace` and `--keep-machine` (spec §10, issue 5): the decision table on a real cluster, serialization of
//! the old version's stop hooks before the new version's start hooks wherever the two run, template instances
//! that move or stay, global units, and replacements interrupted half-way.
//!
//! Every spec builds its own cluster and its unit files in a temporary directory. Timings (`start --replace` until
//! the new version is active) are printed on stderr as `timing: ...` lines.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fleet_harness::wait::{self, Check};
use fleet_harness::{Cluster, Output};

use crate::capabilities::Capability;
use crate::{Area, Ctx, Outcome, Spec, SpecFuture};

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
    // `--keep-machine` specs that also require fleetctl to return only once the new version runs.
    const KEEP_WAITS: &[Capability] = &[KeepMachine, ReplaceWaitsForNewVersion];
    vec![
        spec("replace_decision_table_on_a_cluster", "spec §10.2-§10.3", |_| Box::pin(decision_table()))
            .requires(KEEP_WAITS),
        spec("replace_stop_post_precedes_start_pre_20_rounds", "TestReplaceSerialization (removed upstream)", |_| {
            Box::pin(serialization(20))
        })
        .requires(KEEP_WAITS),
        spec("replaced_template_instance_may_move_without_pin", "PR #1509", |_| {
            Box::pin(template_instances(Pin::None))
        }),
        spec("replaced_template_instance_stays_with_metadata_pin", "PR #1509", |_| {
            Box::pin(template_instances(Pin::Metadata))
        })
        .requires(&[ReplaceWaitsForNewVersion]),
        spec("template_instance_keeps_machine_with_keep_machine_flag", "issue 5", |_| {
            Box::pin(template_instances(Pin::KeepMachine))
        })
        .requires(KEEP_WAITS),
        spec("r1691_replace_instance_uses_local_template", "upstream #1691", |_| Box::pin(local_template()))
            .requires(&[LocalTemplateInstances]),
        spec("global_unit_replaced_on_every_machine_stop_before_start", "upstream #960", |_| Box::pin(global_unit()))
            .requires(&[GlobalWait]),
        spec("replace_converges_after_fleetctl_is_killed", "issue 5", |_| {
            Box::pin(interrupted(Interruption::KillFleetctl, false))
        })
        .requires(&[ReplaceSurvivesClientKill]),
        spec("replace_keep_machine_converges_after_fleetctl_is_killed", "issue 5", |_| {
            Box::pin(interrupted(Interruption::KillFleetctl, true))
        })
        .requires(&[KeepMachine, ReplaceSurvivesClientKill]),
        spec("replace_converges_after_old_machine_dies", "issue 5", |_| {
            Box::pin(interrupted(Interruption::KillOldMachine, true))
        })
        .requires(&[KeepMachine]),
        spec("replace_converges_across_etcd_restart", "issue 5", |_| {
            Box::pin(interrupted(Interruption::EtcdRestart, true))
        })
        .requires(&[KeepMachine]),
    ]
}

pub(super) fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

pub(super) async fn cluster(machines: usize) -> Result<Cluster, String> {
    cluster_with(machines, &[]).await
}

/// A cluster of `machines` (agent_ttl 3 s) with extra metadata per slot, once every machine is listed.
pub(super) async fn cluster_with(machines: usize, metadata: &[(usize, &str)]) -> Result<Cluster, String> {
    let mut b = Cluster::builder().machines(machines).agent_ttl("3s");
    for (slot, md) in metadata {
        b = b.metadata(*slot, md);
    }
    let cluster = b.start().await.map_err(err)?;
    cluster.wait_for_n_machines(1, machines).await.map_err(err)?;
    Ok(cluster)
}

/// Runs fleetctl via machine `slot`; a non-zero exit is an error showing the output.
pub(super) async fn ctl(c: &Cluster, slot: usize, args: &[&str]) -> Result<Output, String> {
    let out = c.fleetctl(slot, args).await.map_err(err)?;
    if out.success() { Ok(out) } else { Err(format!("fleetctl {}: {}", args.join(" "), out.describe())) }
}

/// A machine to run fleetctl through: slot 1 unless a spec removed it.
pub(super) fn any_slot(c: &Cluster) -> Result<usize, String> {
    c.machines().first().map(|m| m.slot()).ok_or_else(|| "the cluster has no machine left".to_string())
}

/// A directory of unit files, removed on drop.
pub(super) struct Dir(tempfile::TempDir);

impl Dir {
    pub(super) fn new() -> Result<Dir, String> {
        tempfile::tempdir().map(Dir).map_err(err)
    }
    pub(super) fn write(&self, name: &str, text: &str) -> Result<String, String> {
        let p: PathBuf = self.0.path().join(name);
        std::fs::write(&p, text).map_err(err)?;
        Ok(p.display().to_string())
    }
    pub(super) fn path(&self, name: &str) -> String {
        self.0.path().join(name).display().to_string()
    }
}

/// One row of `list-units --full`: machine ID, full hash, active state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Row {
    pub(super) machine: String,
    pub(super) hash: String,
    pub(super) active: String,
}

pub(super) async fn list_units(c: &Cluster) -> Result<BTreeMap<String, Vec<Row>>, String> {
    list_units_via(c, any_slot(c)?).await
}

/// `list-units` through machine `slot`'s API: unit → rows.
pub(super) async fn list_units_via(c: &Cluster, slot: usize) -> Result<BTreeMap<String, Vec<Row>>, String> {
    let fields = ["unit", "machine", "hash", "active"];
    let out = ctl(c, slot, &wait::table_args("list-units", &fields.join(","))).await?;
    let mut rows: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for r in wait::parse_table(&out.stdout, &fields) {
        let machine = r.get("machine").split('/').next().unwrap_or("").to_string();
        let row = Row { machine, hash: r.get("hash").into(), active: r.get("active").into() };
        rows.entry(r.get("unit").to_string()).or_default().push(row);
    }
    Ok(rows)
}

/// unit → full hash of the registry copy.
pub(super) async fn unit_hashes(c: &Cluster) -> Result<BTreeMap<String, String>, String> {
    unit_hashes_via(c, any_slot(c)?).await
}

/// unit → full hash of the registry copy, through machine `slot`'s API.
pub(super) async fn unit_hashes_via(c: &Cluster, slot: usize) -> Result<BTreeMap<String, String>, String> {
    let out = ctl(c, slot, &wait::table_args("list-unit-files", "unit,hash")).await?;
    Ok(wait::parse_table(&out.stdout, &["unit", "hash"])
        .into_iter()
        .map(|r| (r.get("unit").to_string(), r.get("hash").to_string()))
        .collect())
}

/// The cluster's view and systemd's agree that `unit` runs exactly once, with content `hash`: one `list-units`
/// row, active, with that hash; systemd active on that machine and not active on any other. Returns the machine.
pub(super) async fn runs_once(c: &Cluster, unit: &str, hash: &str) -> Check<String> {
    match any_slot(c) {
        Ok(slot) => runs_once_via(c, slot, unit, hash).await,
        Err(e) => Check::NotYet(e),
    }
}

/// [`runs_once`], asking machine `slot`'s API.
pub(super) async fn runs_once_via(c: &Cluster, slot: usize, unit: &str, hash: &str) -> Check<String> {
    let rows = match list_units_via(c, slot).await {
        Ok(r) => r,
        Err(e) => return Check::NotYet(e),
    };
    let mine = rows.get(unit).cloned().unwrap_or_default();
    let [row] = &mine[..] else { return Check::NotYet(format!("{unit}: rows {mine:?}")) };
    if row.hash != hash || row.active != "active" {
        return Check::NotYet(format!("{unit}: {row:?}, want hash {}", &hash[..7]));
    }
    for m in c.machines() {
        let active = match m.exec(&["systemctl", "is-active", unit]).await {
            Ok(o) => o.stdout.trim().to_string(),
            Err(e) => return Check::NotYet(e.to_string()),
        };
        let want = if m.id() == row.machine { "active" } else { "inactive" };
        let ok = if want == "active" { active == "active" } else { active != "active" && active != "deactivating" };
        if !ok {
            return Check::NotYet(format!("{unit}: systemd on {} says {active}, fleet says {row:?}", m.name()));
        }
    }
    Check::Ready(row.machine.clone())
}

pub(super) async fn wait_runs_once(c: &Cluster, unit: &str, hash: &str) -> Result<String, String> {
    wait_runs_once_via(c, any_slot(c)?, unit, hash).await
}

/// [`wait_runs_once`], asking machine `slot`'s API.
pub(super) async fn wait_runs_once_via(c: &Cluster, slot: usize, unit: &str, hash: &str) -> Result<String, String> {
    let what = format!("{unit} to run once with hash {}", &hash[..7.min(hash.len())]);
    c.wait_for(&what, || runs_once_via(c, slot, unit, hash)).await.map_err(err)
}

// ---------------------------------------------------------------------------------------------------------------
// replaceUnitCommon (spec §10.7) and the decision table (§10.2–§10.3)

fn hello(sleep: u32) -> String {
    format!(
        "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo Hello, World!; sleep {sleep}; done\"\n"
    )
}

/// Every row of the §10.3 table for a plain unit, with the original's messages.
async fn decision_table() -> Outcome {
    let c = cluster(2).await?;
    let dir = Dir::new()?;
    let unit = "hello.service";
    let path = dir.write(unit, &hello(1))?;
    let expect = |out: &Output, stdout: &[&str], stderr: &[&str], what: &str| -> Result<(), String> {
        for s in stdout {
            if !out.stdout.contains(s) {
                return Err(format!("{what}: stdout lacks {s:?}: {}", out.describe()));
            }
        }
        for s in stderr {
            if !out.stderr.contains(s) {
                return Err(format!("{what}: stderr lacks {s:?}: {}", out.describe()));
            }
        }
        if !out.success() {
            return Err(format!("{what}: {}", out.describe()));
        }
        Ok(())
    };
    let run = |args: Vec<String>| {
        let c = &c;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            c.fleetctl(1, &args).await.map_err(err)
        }
    };
    let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cat = || async { ctl(&c, 1, &["cat", unit]).await.map(|o| o.stdout) };

    // inactive: submit --replace replaces.
    expect(&run(a(&["submit", &path])).await?, &["Unit hello.service inactive"], &[], "submit")?;
    dir.write(unit, &hello(2))?;
    let out = run(a(&["submit", &path])).await?;
    expect(&out, &[], &["WARNING: Unit hello.service in registry differs from local unit file"], "submit differing")?;
    expect(&run(a(&["submit", "--replace", &path])).await?, &["Unit hello.service inactive"], &[], "submit --replace")?;
    if !cat().await?.contains("sleep 2") {
        return Err("submit --replace of an inactive unit did not replace it".into());
    }
    let out = run(a(&["submit", "--replace", &path])).await?;
    expect(&out, &["Found same Unit(hello.service) in Registry, nothing to do"], &[], "same")?;
    // loaded: submit refuses, load replaces.
    ctl(&c, 1, &["load", &path]).await?;
    dir.write(unit, &hello(3))?;
    let out = run(a(&["submit", "--replace", &path])).await?;
    let refuse = "Warning: can not replace Unit(hello.service) in state 'loaded', use the appropriate command";
    expect(&out, &[], &[refuse], "submit --replace loaded")?;
    expect(&run(a(&["load", "--replace", &path])).await?, &["Unit hello.service loaded on"], &[], "load --replace")?;
    if !cat().await?.contains("sleep 3") {
        return Err("load --replace of a loaded unit did not replace it".into());
    }
    // launched: load refuses (and stops it, as the original), start replaces.
    ctl(&c, 1, &["start", &path]).await?;
    dir.write(unit, &hello(4))?;
    let refuse = "Warning: can not replace Unit(hello.service) in state 'launched', use the appropriate command";
    expect(&run(a(&["submit", "--replace", &path])).await?, &[], &[refuse], "submit --replace launched")?;
    expect(&run(a(&["load", "--replace", &path])).await?, &["Unit hello.service loaded on"], &[refuse], "load")?;
    if cat().await?.contains("sleep 4") {
        return Err("load --replace replaced a launched unit".into());
    }
    ctl(&c, 1, &["start", unit]).await?;
    let out = run(a(&["start", "--replace", &path])).await?;
    expect(&out, &["Unit hello.service launched on"], &[], "start --replace")?;
    let hash = unit_hashes(&c).await?.remove(unit).unwrap_or_default();
    if !cat().await?.contains("sleep 4") {
        return Err("start --replace of a launched unit did not replace it".into());
    }
    wait_runs_once(&c, unit, &hash).await?;
    // start --replace --keep-machine: in place, one line, same machine.
    let before = wait_runs_once(&c, unit, &hash).await?;
    dir.write(unit, &hello(5))?;
    let out = run(a(&["start", "--replace", "--keep-machine", &path])).await?;
    expect(&out, &["Unit hello.service launched on"], &[], "start --replace --keep-machine")?;
    let hash = unit_hashes(&c).await?.remove(unit).unwrap_or_default();
    match runs_once(&c, unit, &hash).await {
        Check::Ready(m) if m == before => {}
        Check::Ready(m) => return Err(format!("--keep-machine moved {unit} from {before} to {m}")),
        Check::NotYet(why) => return Err(format!("fleetctl returned before the new version ran: {why}")),
    }
    // A replacement without local content is fatal under --replace.
    let out = run(a(&["start", "--replace", &dir.path("nothere.service")])).await?;
    if out.success() {
        // No such unit in the registry either: plain creation error.
        return Err(format!("start --replace of a missing file succeeded: {}", out.describe()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Serialization (§10.4, L13)

/// A unit whose start-pre and (slow) stop-post hooks log timestamps to `/root/sync.log` on its machine.
fn sync_unit(version: usize, extra: &str) -> String {
    format!(
        "[Unit]\nDescription=replace serialization v{version}\n\n[Service]\n\
         ExecStartPre=/bin/sh -c \"echo $$(date +%%s%%N) start-pre v{version} >> /root/sync.log\"\n\
         ExecStart=/bin/sh -c \"while true; do sleep 1; done\"\n\
         ExecStopPost=/bin/sh -c \"sleep 1; echo $$(date +%%s%%N) stop-post v{version} >> /root/sync.log\"\n{extra}"
    )
}

/// Hook events of every machine: (nanoseconds, hook, version, machine name), in time order.
async fn sync_events(c: &Cluster) -> Result<Vec<(u128, String, usize, String)>, String> {
    let mut events = Vec::new();
    for m in c.machines() {
        let out = m.exec(&["sh", "-c", "cat /root/sync.log 2>/dev/null || true"]).await.map_err(err)?;
        for line in out.stdout.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let [ts, hook, v] = f[..] {
                let ts = ts.parse::<u128>().map_err(|e| format!("{line:?}: {e}"))?;
                let v = v.trim_start_matches('v').parse::<usize>().map_err(|e| format!("{line:?}: {e}"))?;
                events.push((ts, hook.to_string(), v, m.name().to_string()));
            }
        }
    }
    events.sort();
    Ok(events)
}

/// Versions 1..=last ran one after the other: start-pre v1, stop-post v1, start-pre v2, ... start-pre v<last>,
/// each once (so no two versions ever overlapped, on one machine or across machines).
fn check_alternation(events: &[(u128, String, usize, String)], last: usize) -> Result<(), String> {
    let show = || events.iter().map(|(t, h, v, m)| format!("{t} {h} v{v} {m}")).collect::<Vec<_>>().join("\n");
    let mut want = Vec::new();
    for v in 1..=last {
        want.push(("start-pre", v));
        if v < last {
            want.push(("stop-post", v));
        }
    }
    let got: Vec<(&str, usize)> = events.iter().map(|(_, h, v, _)| (h.as_str(), *v)).collect();
    if got != want {
        return Err(format!("hooks did not alternate version by version; events:\n{}", show()));
    }
    Ok(())
}

async fn serialization(rounds: usize) -> Outcome {
    let c = cluster(3).await?;
    let dir = Dir::new()?;
    let unit = "sync.service";
    let path = dir.write(unit, &sync_unit(1, ""))?;
    ctl(&c, 1, &["start", &path]).await?;
    let mut durations = Vec::new();
    let mut machines = Vec::new();
    for round in 2..=rounds + 1 {
        dir.write(unit, &sync_unit(round, ""))?;
        // Odd rounds are rescheduled (may move: the handover between machines), even rounds stay in place.
        let mut args = vec!["start", "--replace"];
        if round % 2 == 0 {
            args.push("--keep-machine");
        }
        args.push(&path);
        let t = Instant::now();
        ctl(&c, 1, &args).await?;
        durations.push(t.elapsed());
        let hash = unit_hashes(&c).await?.remove(unit).unwrap_or_default();
        // fleetctl returned: the new version must already be the one running, once.
        match runs_once(&c, unit, &hash).await {
            Check::Ready(m) => machines.push(m),
            Check::NotYet(why) => return Err(format!("round {round}: fleetctl returned before: {why}")),
        }
        let m = machines.last().cloned().unwrap_or_default();
        let machine = c.machines().iter().find(|x| x.id() == m).ok_or("unknown machine")?;
        let show = machine.systemctl_show(unit, &["ActiveState", "Result"]).await.map_err(err)?;
        if show.get("ActiveState").map(String::as_str) != Some("active")
            || show.get("Result").map(String::as_str) != Some("success")
        {
            return Err(format!("round {round}: {unit} on {}: {show:?}", machine.name()));
        }
    }
    check_alternation(&sync_events(&c).await?, rounds + 1)?;
    let moves = machines.windows(2).filter(|w| w[0] != w[1]).count();
    eprintln!("timing: start --replace of 1 unit, {rounds} rounds: {}; machine changes: {moves}", summary(&durations));
    Ok(())
}

pub(super) fn summary(d: &[Duration]) -> String {
    let mut s: Vec<f64> = d.iter().map(Duration::as_secs_f64).collect();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return "no samples".into();
    }
    format!("min {:.2} s, median {:.2} s, max {:.2} s", s[0], s[s.len() / 2], s[s.len() - 1])
}

// ---------------------------------------------------------------------------------------------------------------
// Template instances: move, pin, --keep-machine

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pin {
    None,
    Metadata,
    KeepMachine,
}

fn hello_template(version: usize, extra: &str) -> String {
    format!(
        "[Unit]\nDescription=Hello template v{version} %i\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hello-v{version} %i; sleep 1; done\"\n{extra}"
    )
}

/// unit → (machine ID, systemd InvocationID) of every active `hello@` instance.
async fn invocations(c: &Cluster) -> Result<BTreeMap<String, (String, String)>, String> {
    let mut out = BTreeMap::new();
    for (unit, rows) in list_units(c).await? {
        let Some(row) = rows.iter().find(|r| r.active == "active") else { continue };
        let m = c.machines().iter().find(|m| m.id() == row.machine).ok_or("unknown machine")?;
        let inv = m.systemctl_show(&unit, &["InvocationID"]).await.map_err(err)?;
        out.insert(unit, (row.machine.clone(), inv.get("InvocationID").cloned().unwrap_or_default()));
    }
    Ok(out)
}

async fn template_instances(pin: Pin) -> Outcome {
    const N: usize = 10;
    const BUSY: usize = 4;
    let c = cluster(3).await?;
    let dir = Dir::new()?;
    dir.write("hello@.service", &hello_template(1, ""))?;
    let names: Vec<String> = (1..=N).map(|i| format!("hello@{i}.service")).collect();
    let mut args = vec!["start".to_string()];
    args.extend(names.iter().map(|n| dir.path(n)));
    ctl(&c, 1, &args.iter().map(String::as_str).collect::<Vec<_>>()).await?;
    c.wait_for_n_active_units(1, N).await.map_err(err)?;
    let mut before = invocations(&c).await?;
    let name_of = |id: &str| c.machines().iter().find(|m| m.id() == id).map(|m| m.name().to_string());

    // One instance, replaced from a new local template (B19).
    let one = "hello@4.service";
    let (home, _) = before.get(one).cloned().ok_or("hello@4 not running")?;
    if pin == Pin::KeepMachine {
        // hello@4's machine becomes the busiest by far, so a replacement that reschedules (ignoring
        // --keep-machine) would move hello@4 and the instances beside it to a less loaded machine.
        let busy = Dir::new()?;
        let mut args = vec!["start".to_string()];
        for i in 1..=BUSY {
            let name = format!("busy-{i}.service");
            busy.write(&name, &format!("[Service]\nExecStart=/bin/sleep infinity\n\n[X-Fleet]\nMachineID={home}\n"))?;
            args.push(busy.path(&name));
        }
        ctl(&c, 1, &args.iter().map(String::as_str).collect::<Vec<_>>()).await?;
        c.wait_for_n_active_units(1, N + BUSY).await.map_err(err)?;
        before = invocations(&c).await?;
    }
    let v2 = Dir::new()?;
    let extra = match pin {
        Pin::Metadata => format!("\n[X-Fleet]\nMachineMetadata=hostname={}\n", name_of(&home).unwrap_or_default()),
        _ => String::new(),
    };
    v2.write("hello@.service", &hello_template(2, &extra))?;
    let mut args = vec!["start", "--replace"];
    if pin == Pin::KeepMachine {
        args.push("--keep-machine");
    }
    let p = v2.path(one);
    args.push(&p);
    let t = Instant::now();
    ctl(&c, 1, &args).await?;
    let one_took = t.elapsed();
    let hash = unit_hashes(&c).await?.remove(one).unwrap_or_default();
    let went = match runs_once(&c, one, &hash).await {
        Check::Ready(m) => m,
        Check::NotYet(why) => return Err(format!("fleetctl returned before {one} ran its new version: {why}")),
    };
    let after = invocations(&c).await?;
    for (unit, was) in &before {
        if unit != one && after.get(unit) != Some(was) {
            return Err(format!("{unit} was touched: before {was:?}, after {:?}", after.get(unit)));
        }
    }
    let moved = went != home;
    eprintln!(
        "timing: {pin:?}: start --replace {one}: {:.2} s; {} from {} to {}",
        one_took.as_secs_f64(),
        if moved { "moved" } else { "stayed" },
        name_of(&home).unwrap_or_default(),
        name_of(&went).unwrap_or_default()
    );
    if pin != Pin::None && moved {
        return Err(format!("{pin:?}: {one} moved from {home} to {went}"));
    }

    // All ten in one command (the pin variant pins only hello@4, so it is not repeated).
    if pin == Pin::Metadata {
        return Ok(());
    }
    let v3 = Dir::new()?;
    v3.write("hello@.service", &hello_template(3, ""))?;
    let before = invocations(&c).await?;
    let mut args = vec!["start".to_string(), "--replace".to_string()];
    if pin == Pin::KeepMachine {
        args.push("--keep-machine".into());
    }
    args.extend(names.iter().map(|n| v3.path(n)));
    let t = Instant::now();
    ctl(&c, 1, &args.iter().map(String::as_str).collect::<Vec<_>>()).await?;
    let all_took = t.elapsed();
    let hashes = unit_hashes(&c).await?;
    let mut moves = 0;
    for n in &names {
        let hash = hashes.get(n).cloned().unwrap_or_default();
        let went = match runs_once(&c, n, &hash).await {
            Check::Ready(m) => m,
            Check::NotYet(why) => return Err(format!("fleetctl returned before {n} ran its new version: {why}")),
        };
        if before.get(n).map(|(m, _)| m) != Some(&went) {
            moves += 1;
        }
    }
    eprintln!("timing: {pin:?}: start --replace of {N} instances: {:.2} s; {moves} moved", all_took.as_secs_f64());
    if pin == Pin::KeepMachine && moves > 0 {
        return Err(format!("--keep-machine: {moves} of {N} instances moved"));
    }
    Ok(())
}

/// #1691: `start --replace foo@1.service` with only a new local template builds the instance from it, even though
/// the registry's template is still the old one.
async fn local_template() -> Outcome {
    let c = cluster(1).await?;
    let dir = Dir::new()?;
    dir.write("hello@.service", &hello_template(1, ""))?;
    ctl(&c, 1, &["submit", &dir.path("hello@.service")]).await?;
    ctl(&c, 1, &["start", &dir.path("hello@1.service")]).await?;
    dir.write("hello@.service", &hello_template(2, ""))?;
    ctl(&c, 1, &["start", "--replace", &dir.path("hello@1.service")]).await?;
    let cat = ctl(&c, 1, &["cat", "hello@1.service"]).await?.stdout;
    if !cat.contains("hello-v2") {
        return Err(format!("hello@1 was not built from the local template:\n{cat}"));
    }
    let template = ctl(&c, 1, &["cat", "hello@.service"]).await?.stdout;
    if !template.contains("hello-v1") {
        return Err(format!("the registry template changed:\n{template}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Global units

/// `n` rows for `unit`, every one active with content `hash`.
async fn all_active(c: &Cluster, unit: &str, n: usize, hash: &str) -> Result<(), String> {
    let rows = list_units(c).await?.remove(unit).unwrap_or_default();
    let good = rows.iter().filter(|r| r.active == "active" && r.hash == hash).count();
    if good == n && rows.len() == n { Ok(()) } else { Err(format!("{unit}: {rows:?}")) }
}

async fn global_unit() -> Outcome {
    let mut c = cluster(3).await?;
    let dir = Dir::new()?;
    let unit = "gsync.service";
    let path = dir.write(unit, &sync_unit(1, "\n[X-Fleet]\nGlobal=true\n"))?;
    ctl(&c, 1, &["start", &path]).await?;
    let h1 = unit_hashes(&c).await?.remove(unit).unwrap_or_default();
    // fleetctl waits for global units: all three run v1 when it returns.
    all_active(&c, unit, 3, &h1).await.map_err(|e| format!("after start: {e}"))?;
    dir.write(unit, &sync_unit(2, "\n[X-Fleet]\nGlobal=true\n"))?;
    let t = Instant::now();
    ctl(&c, 1, &["start", "--replace", &path]).await?;
    let took = t.elapsed();
    let h2 = unit_hashes(&c).await?.remove(unit).unwrap_or_default();
    all_active(&c, unit, 3, &h2).await.map_err(|e| format!("when start --replace returned: {e}"))?;
    eprintln!("timing: start --replace of a global unit on 3 machines: {:.2} s", took.as_secs_f64());
    // Per machine: v1 started, v1 stopped (hooks done), then v2 started.
    let events = sync_events(&c).await?;
    for m in c.machines() {
        let mine: Vec<_> = events.iter().filter(|e| e.3 == m.name()).cloned().collect();
        check_alternation(&mine, 2).map_err(|e| format!("{}: {e}", m.name()))?;
    }
    // A machine joining afterwards runs the new version.
    c.add_machine(None).await.map_err(err)?;
    c.wait_for_n_machines(1, 4).await.map_err(err)?;
    let c = &c;
    c.wait_for("the new machine to run the new version", || {
        let h2 = &h2;
        async move {
            match all_active(c, unit, 4, h2).await {
                Ok(()) => Check::Ready(()),
                Err(e) => Check::NotYet(e),
            }
        }
    })
    .await
    .map_err(err)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Interrupted replacements

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interruption {
    /// fleetctl killed right after its request (in-place replacement: one write).
    KillFleetctl,
    /// The machine running the old version is killed while it is stopping it.
    KillOldMachine,
    /// etcd stops while the old version is stopping and comes back.
    EtcdRestart,
}

/// Spawns fleetctl against machine `slot` (not waited for).
pub(super) fn spawn_fleetctl(c: &Cluster, slot: usize, args: &[&str]) -> Result<tokio::process::Child, String> {
    let m = c.machine(slot).map_err(err)?;
    tokio::process::Command::new(&c.binaries().fleetctl)
        .arg(format!("--endpoint={}", m.endpoint()))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(err)
}

/// Waits until some machine's `/root/sync.log` shows `hook` of version `v`.
async fn wait_hook(c: &Cluster, hook: &str, v: usize) -> Result<(), String> {
    c.wait_for(&format!("{hook} v{v}"), || async {
        match sync_events(c).await {
            Ok(ev) if ev.iter().any(|e| e.1 == hook && e.2 == v) => Check::Ready(()),
            Ok(ev) => Check::NotYet(format!("{} events", ev.len())),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
    .map_err(err)
}

async fn interrupted(how: Interruption, keep_machine: bool) -> Outcome {
    let replace: &[&str] =
        if keep_machine { &["start", "--replace", "--keep-machine"] } else { &["start", "--replace"] };
    let mut c = cluster(3).await?;
    let dir = Dir::new()?;
    let unit = "sync.service";
    // A slower stop (3 s) leaves room to interrupt while the old version is stopping.
    let slow = |v: usize| sync_unit(v, "").replace("sleep 1; echo", "sleep 3; echo");
    let path = dir.write(unit, &slow(1))?;
    ctl(&c, 1, &["start", &path]).await?;
    let h1 = unit_hashes(&c).await?.remove(unit).unwrap_or_default();
    let home = wait_runs_once(&c, unit, &h1).await?;
    let home_slot = c.machines().iter().find(|m| m.id() == home).map(|m| m.slot()).ok_or("unknown machine")?;
    // fleetctl talks to a machine that stays up.
    let via = c.machines().iter().map(|m| m.slot()).find(|s| *s != home_slot).ok_or("no other machine")?;
    dir.write(unit, &slow(2))?;
    match how {
        Interruption::KillFleetctl => {
            let mut child = spawn_fleetctl(&c, via, &[replace, &[path.as_str()]].concat())?;
            // Killed as soon as its request is in, while the cluster is still stopping the old version.
            let (cref, h1) = (&c, &h1);
            c.wait_for("the new content in the registry", || async move {
                match unit_hashes(cref).await.map(|mut h| h.remove(unit)) {
                    Ok(Some(h)) if &h != h1 => Check::Ready(()),
                    other => Check::NotYet(format!("{other:?}")),
                }
            })
            .await
            .map_err(err)?;
            child.kill().await.map_err(err)?;
            wait_hook(&c, "stop-post", 1).await?;
        }
        Interruption::KillOldMachine => {
            let mut child = spawn_fleetctl(&c, via, &[replace, &[path.as_str()]].concat())?;
            tokio::time::sleep(Duration::from_millis(1000)).await;
            c.machine(home_slot).map_err(err)?.kill().await.map_err(err)?;
            c.remove_machine(home_slot).await.map_err(err)?;
            let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
        }
        Interruption::EtcdRestart => {
            let mut child = spawn_fleetctl(&c, via, &[replace, &[path.as_str()]].concat())?;
            tokio::time::sleep(Duration::from_millis(1000)).await;
            c.stop_etcd().await.map_err(err)?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            c.start_etcd().await.map_err(err)?;
            let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
        }
    }
    let registry = unit_hashes(&c).await?.remove(unit).unwrap_or_default();
    if registry == h1 {
        return Err("the replacement never reached the registry".into());
    }
    wait_runs_once(&c, unit, &registry).await?;
    if how != Interruption::KillOldMachine {
        // Every machine's log survives: the versions never overlapped.
        check_alternation(&sync_events(&c).await?, 2)?;
    }
    Ok(())
}

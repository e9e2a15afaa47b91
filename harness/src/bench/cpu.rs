//! Where the CPU went during a window (issue 16: "find out where the time goes"): the whole host (`/proc/stat`),
//! each container (its cgroup's CPU counter, read on the host), and inside each machine the processes that matter
//! (PID 1, dbus-daemon, journald, fleetd). What a machine used beyond those is its units and the commands run in
//! it (the floor's `systemctl`, the bench's `docker exec`s); what the host used beyond the containers is the bench
//! itself (fleetctl runs, `docker exec`) and the Docker engine. On a 2-core host the floor is CPU-bound, so every
//! CPU-second fleet adds shows up in its wall time; this split says whose seconds they are.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::ctx::Ctx;
use super::procs;
use crate::{container, docker};

/// The processes read inside each machine, by the name they are reported under.
const MACHINE_PROCS: [&str; 4] = ["pid1", "dbus-daemon", "journald", "fleetd"];

/// Prints `name ticks` for each of [`MACHINE_PROCS`] that runs (fleetd is fleet.service's main process), then
/// CLK_TCK.
const PROBE: &str = r#"show() { [ -n "$2" ] && [ "$2" != 0 ] && [ -r /proc/$2/stat ] && echo "$1 $(sed 's/^.*) //' /proc/$2/stat | cut -d' ' -f12,13)"; }
show pid1 1
show dbus-daemon "$(pidof -s dbus-daemon)"
show journald "$(pidof -s systemd-journald)"
show fleetd "$(systemctl show -p MainPID --value fleet.service 2>/dev/null)"
getconf CLK_TCK"#;

/// CPU counters at one moment.
#[derive(Debug, Clone)]
pub struct CpuSample {
    at: Instant,
    /// Host: busy and stolen clock ticks (`/proc/stat`), and ticks per second.
    host_busy: u64,
    host_steal: u64,
    host_hz: u64,
    /// Container name → its cgroup's CPU nanoseconds (None: counter not found).
    containers: Vec<(String, Option<u64>)>,
    /// Machine container name → process name → CPU seconds.
    machine_procs: Vec<(String, BTreeMap<String, f64>)>,
    /// Every process of the host (containers' included: one PID namespace seen from here): (pid, start time) →
    /// (command name, clock ticks).
    host_procs: BTreeMap<(u32, u64), (String, u64)>,
    /// Interrupt and softirq ticks of the host (attributed to no process).
    host_irq: u64,
}

/// CPU seconds used over a window, split by who used them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuSplit {
    pub window_s: f64,
    /// The host's busy CPU time (all cores), and the part of it the hypervisor gave to others (steal).
    pub host_s: f64,
    pub steal_s: f64,
    /// Summed over the machines: process name → seconds; `other` is the rest of the machines' containers.
    pub machines: BTreeMap<String, f64>,
    /// Per machine: container name → process name (and `other`) → seconds.
    pub per_machine: BTreeMap<String, BTreeMap<String, f64>>,
    /// The etcd container(s).
    pub etcd_s: f64,
    /// Host time outside every container: the bench's own commands (fleetctl, docker exec) and the Docker engine.
    pub outside_s: f64,
    /// The host's processes by command name (kernel worker threads folded into one name each), the largest
    /// first (at most [`TOP_PROCESSES`]), then `irq` (interrupts, softirqs) and `exited` (processes that ended in
    /// the window, and the rest).
    pub by_process: Vec<(String, f64)>,
    pub errors: Vec<String>,
}

/// Process names kept in [`CpuSplit::by_process`].
pub const TOP_PROCESSES: usize = 14;

impl CpuSplit {
    /// All machines' CPU seconds.
    pub fn machines_total(&self) -> f64 {
        self.machines.values().sum()
    }
}

/// Samples the host, every container of the cluster and the processes in each machine.
pub async fn sample(ctx: &Ctx) -> CpuSample {
    let machines = ctx.machine_names();
    let etcd: Vec<String> = ctx.cluster.etcd_members().iter().map(|m| m.name().to_string()).collect();
    let names: Vec<String> = machines.iter().chain(&etcd).cloned().collect();
    let cgroups = futures::future::join_all(names.iter().map(|n| container_cpu_ns(n)));
    let probes = futures::future::join_all(machines.iter().map(|n| machine_procs(n)));
    let (cgroups, probes) = tokio::join!(cgroups, probes);
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let (host_busy, host_steal) = host_ticks(&stat);
    CpuSample {
        at: Instant::now(),
        host_busy,
        host_steal,
        host_hz: clk_tck(),
        containers: names.into_iter().zip(cgroups).collect(),
        machine_procs: machines.into_iter().zip(probes).collect(),
        host_procs: host_processes(),
        host_irq: irq_ticks(&stat),
    }
}

/// What was used between two samples of the same cluster.
pub fn split(a: &CpuSample, b: &CpuSample, machine_count: usize) -> CpuSplit {
    let hz = a.host_hz.max(1) as f64;
    let round = |x: f64| (x * 100.0).round() / 100.0;
    let mut s = CpuSplit {
        window_s: round(b.at.duration_since(a.at).as_secs_f64()),
        host_s: round(b.host_busy.saturating_sub(a.host_busy) as f64 / hz),
        steal_s: round(b.host_steal.saturating_sub(a.host_steal) as f64 / hz),
        ..CpuSplit::default()
    };
    let mut containers_s = 0.0;
    for (i, ((name, x), (_, y))) in a.containers.iter().zip(&b.containers).enumerate() {
        let Some(used) = x.zip(*y).map(|(x, y)| y.saturating_sub(x) as f64 / 1e9) else {
            s.errors.push(format!("{name}: no cgroup CPU counter found"));
            continue;
        };
        containers_s += used;
        if i >= machine_count {
            s.etcd_s += used;
            continue;
        }
        let procs = a.machine_procs.iter().zip(&b.machine_procs).find(|((n, _), _)| n == name);
        let mut mine = BTreeMap::new();
        let mut named = 0.0;
        if let Some(((_, pa), (_, pb))) = procs {
            for (proc_name, after) in pb {
                // A process that restarted in the window counts from 0.
                let before = pa.get(proc_name).copied().filter(|v| v <= after).unwrap_or(0.0);
                mine.insert(proc_name.clone(), round(after - before));
                named += after - before;
            }
        }
        mine.insert("other".into(), round((used - named).max(0.0)));
        for (k, v) in &mine {
            *s.machines.entry(k.clone()).or_default() += v;
        }
        s.per_machine.insert(name.clone(), mine);
    }
    for v in s.machines.values_mut() {
        *v = round(*v);
    }
    s.etcd_s = round(s.etcd_s);
    s.outside_s = round((s.host_s - containers_s).max(0.0));
    s.by_process = by_process(a, b, s.host_s);
    s
}

/// Ticks per command name between two samples (a process that started in the window counts from 0), the
/// largest first, then `irq` and `exited`.
fn by_process(a: &CpuSample, b: &CpuSample, host_s: f64) -> Vec<(String, f64)> {
    let hz = a.host_hz.max(1) as f64;
    let mut per_name: BTreeMap<String, u64> = BTreeMap::new();
    for (key, (name, after)) in &b.host_procs {
        let before = a.host_procs.get(key).map_or(0, |(_, t)| *t);
        *per_name.entry(fold_name(name)).or_default() += after.saturating_sub(before);
    }
    let mut ranked: Vec<(String, f64)> =
        per_name.into_iter().filter(|(_, t)| *t > 0).map(|(n, t)| (n, t as f64 / hz)).collect();
    ranked.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    let live: f64 = ranked.iter().map(|(_, v)| v).sum();
    let irq = b.host_irq.saturating_sub(a.host_irq) as f64 / hz;
    ranked.truncate(TOP_PROCESSES);
    let round = |x: f64| (x * 100.0).round() / 100.0;
    let mut out: Vec<(String, f64)> = ranked.into_iter().map(|(n, v)| (n, round(v))).collect();
    out.push(("irq".into(), round(irq)));
    out.push(("exited".into(), round((host_s - live - irq).max(0.0))));
    out
}

/// `kworker/1:2-events` → `kworker`, `ksoftirqd/0` → `ksoftirqd`: one name per kind of kernel thread.
pub fn fold_name(comm: &str) -> String {
    comm.split('/').next().unwrap_or(comm).to_string()
}

/// Interrupt and softirq ticks of `/proc/stat`'s `cpu` line.
pub fn irq_ticks(stat: &str) -> u64 {
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else { return 0 };
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    v.get(5).copied().unwrap_or(0) + v.get(6).copied().unwrap_or(0)
}

/// Every process of the host: (pid, start time) → (command name, utime + stime).
fn host_processes() -> BTreeMap<(u32, u64), (String, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return BTreeMap::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (name, ticks, start) = parse_stat(&stat)?;
            Some(((pid, start), (name, ticks)))
        })
        .collect()
}

/// A `/proc/<pid>/stat` line: command name, utime + stime, start time.
pub fn parse_stat(stat: &str) -> Option<(String, u64, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // Fields from `state` (3) on: utime 14, stime 15, starttime 22.
    let field = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some((name, field(14)? + field(15)?, field(22)?))
}

/// Busy and steal ticks from `/proc/stat`'s `cpu` line (busy: everything but idle and iowait).
pub fn host_ticks(stat: &str) -> (u64, u64) {
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else { return (0, 0) };
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let get = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let busy = get(0) + get(1) + get(2) + get(5) + get(6) + get(7);
    (busy, get(7))
}

fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as u64 } else { 100 }
}

/// The container's CPU nanoseconds from its cgroup on the host: cgroup v1 `cpuacct.usage`, or v2 `cpu.stat`'s
/// `usage_usec` (systemd or cgroupfs driver).
async fn container_cpu_ns(name: &str) -> Option<u64> {
    let id = docker::run(&["inspect", "--format", "{{.Id}}", name]).await.ok()?;
    let id = id.trim();
    let v1 = [
        format!("/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage"),
        format!("/sys/fs/cgroup/cpu,cpuacct/docker/{id}/cpuacct.usage"),
        format!("/sys/fs/cgroup/cpuacct/system.slice/docker-{id}.scope/cpuacct.usage"),
    ];
    for path in v1 {
        if let Ok(text) = std::fs::read_to_string(&path) {
            return text.trim().parse().ok();
        }
    }
    let v2 = [
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat"),
        format!("/sys/fs/cgroup/docker/{id}/cpu.stat"),
    ];
    for path in v2 {
        if let Ok(text) = std::fs::read_to_string(&path) {
            return usage_usec(&text).map(|us| us * 1000);
        }
    }
    None
}

/// `usage_usec` of a cgroup v2 `cpu.stat`.
pub fn usage_usec(cpu_stat: &str) -> Option<u64> {
    cpu_stat.lines().find_map(|l| l.strip_prefix("usage_usec ")).and_then(|v| v.trim().parse().ok())
}

/// CPU seconds of the processes of [`MACHINE_PROCS`] in machine container `name` (empty when it cannot be read).
async fn machine_procs(name: &str) -> BTreeMap<String, f64> {
    match container::exec(name, &["sh", "-c", PROBE]).await {
        Ok(out) => parse_probe(&out.stdout),
        Err(_) => BTreeMap::new(),
    }
}

/// The probe's `name utime stime` lines and CLK_TCK (the last line) → name → seconds.
pub fn parse_probe(text: &str) -> BTreeMap<String, f64> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let hz = lines.last().and_then(|l| l.trim().parse::<u64>().ok()).unwrap_or(100);
    lines
        .iter()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?;
            if !MACHINE_PROCS.contains(&name) {
                return None;
            }
            let ticks = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
            Some((name.to_string(), procs::cpu_secs(ticks, hz)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ticks_count_busy_and_steal() {
        let stat = "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(host_ticks(stat), (100 + 5 + 50 + 3 + 2 + 7, 7));
        assert_eq!(host_ticks("nothing"), (0, 0));
    }

    #[test]
    fn probe_lines_become_seconds() {
        let p = parse_probe("pid1 150 50\ndbus-daemon 10 10\nfleetd 300 100\nbogus 1 1\n100\n");
        assert_eq!(p.get("pid1"), Some(&2.0));
        assert_eq!(p.get("dbus-daemon"), Some(&0.2));
        assert_eq!(p.get("fleetd"), Some(&4.0));
        assert!(!p.contains_key("bogus"));
    }

    #[test]
    fn cgroup_v2_usage_is_read() {
        assert_eq!(usage_usec("usage_usec 12345\nuser_usec 1\n"), Some(12345));
        assert_eq!(usage_usec("user_usec 1\n"), None);
    }

    #[test]
    fn a_split_attributes_machines_etcd_and_the_rest() {
        let t = Instant::now();
        let procs =
            |pid1: f64, fleetd: f64| BTreeMap::from([("pid1".to_string(), pid1), ("fleetd".to_string(), fleetd)]);
        let host = |fleetd: u64, late: Option<u64>| {
            let mut p =
                BTreeMap::from([((7, 1), ("fleetd".to_string(), fleetd)), ((9, 1), ("kworker/0:1".to_string(), 5))]);
            if let Some(t) = late {
                p.insert((8, 50), ("kworker/1:0".to_string(), t));
            }
            p
        };
        let a = CpuSample {
            at: t,
            host_busy: 1000,
            host_steal: 10,
            host_hz: 100,
            containers: vec![("m1".into(), Some(0)), ("etcd".into(), Some(0))],
            machine_procs: vec![("m1".into(), procs(1.0, 1.0))],
            host_procs: host(100, None),
            host_irq: 10,
        };
        let b = CpuSample {
            at: t + std::time::Duration::from_secs(2),
            host_busy: 1400,
            host_steal: 20,
            host_hz: 100,
            containers: vec![("m1".into(), Some(3_000_000_000)), ("etcd".into(), Some(500_000_000))],
            machine_procs: vec![("m1".into(), procs(2.0, 1.5))],
            host_procs: host(150, Some(20)),
            host_irq: 40,
        };
        let s = split(&a, &b, 1);
        assert_eq!((s.host_s, s.steal_s, s.etcd_s), (4.0, 0.1, 0.5));
        assert_eq!(s.machines.get("pid1"), Some(&1.0));
        assert_eq!(s.machines.get("fleetd"), Some(&0.5));
        assert_eq!(s.machines.get("other"), Some(&1.5), "3 s in the container, 1.5 s of it named");
        assert_eq!(s.outside_s, 0.5, "4 s busy − 3.5 s in containers");
        assert_eq!(s.machines_total(), 3.0);
        assert_eq!(
            s.by_process,
            vec![
                ("fleetd".to_string(), 0.5),
                ("kworker".to_string(), 0.2),
                ("irq".to_string(), 0.3),
                ("exited".to_string(), 3.0)
            ],
            "a kworker that started in the window counts from 0; 4 s busy − 0.7 s live − 0.3 s irq exited"
        );
    }

    #[test]
    fn stat_lines_give_name_ticks_and_start() {
        let line = "42 (fleet d) S 1 42 42 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 8 0 777 2 3";
        assert_eq!(parse_stat(line), Some(("fleet d".to_string(), 175, 777)));
        assert_eq!(fold_name("kworker/1:2-events"), "kworker");
        assert_eq!(irq_ticks("cpu  1 2 3 4 5 6 7 8\n"), 13);
    }
}

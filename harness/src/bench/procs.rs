//! Resident memory and CPU of fleetd (and etcd) from `/proc` inside the containers, and which fleetd leads the
//! engine (from its log, black-box).

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::container;

/// `/proc/<pid>` figures at one moment.
#[derive(Debug, Clone)]
pub struct ProcSample {
    pub pid: u32,
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    pub clk_tck: u64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub at: Instant,
}

/// The shell snippet printing pid, stat, VmRSS/VmHWM and CLK_TCK of the process whose pid `$pid` holds.
const PROBE: &str = "echo $pid; cat /proc/$pid/stat; grep -E '^Vm(RSS|HWM):' /proc/$pid/status; getconf CLK_TCK";

/// Samples fleetd (fleet.service's main process) in machine container `name`.
pub async fn sample_fleetd(name: &str) -> Result<ProcSample, String> {
    sample(name, &format!("pid=$(systemctl show -p MainPID --value fleet.service); {PROBE}")).await
}

/// Samples the etcd process in the etcd container `name`.
pub async fn sample_etcd(name: &str) -> Result<ProcSample, String> {
    sample(name, &format!("pid=$(pidof etcd); {PROBE}")).await
}

async fn sample(name: &str, script: &str) -> Result<ProcSample, String> {
    let out = container::exec(name, &["sh", "-c", script]).await.map_err(|e| format!("{name}: {e}"))?;
    parse(&out.stdout, Instant::now()).ok_or_else(|| format!("{name}: cannot read /proc: {}", out.describe()))
}

/// The output of [`PROBE`]: pid, stat line, the `Vm` lines of status, CLK_TCK (the last numeric line).
fn parse(text: &str, at: Instant) -> Option<ProcSample> {
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse().ok().filter(|&p: &u32| p > 0)?;
    let stat = lines.next()?;
    let status: Vec<&str> = lines.collect();
    let clk_tck = status.iter().rev().find_map(|l| l.trim().parse().ok()).unwrap_or(100);
    parse_proc(pid, stat, &status.join("\n"), clk_tck, at)
}

/// Pure: a sample of process `pid` from its `/proc/<pid>/stat` and `/proc/<pid>/status` texts (memory 0 when
/// status has no `VmRSS:` / `VmHWM:` line).
pub fn parse_proc(pid: u32, stat: &str, status: &str, clk_tck: u64, at: Instant) -> Option<ProcSample> {
    // Fields after the command name (which may hold spaces) start at field 3 (`state`); utime, stime are 14, 15.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    let (mut rss_kib, mut hwm_kib) = (0, 0);
    for l in status.lines() {
        let kib = || l.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
        if l.starts_with("VmRSS:") {
            rss_kib = kib();
        } else if l.starts_with("VmHWM:") {
            hwm_kib = kib();
        }
    }
    Some(ProcSample { pid, ticks, clk_tck, rss_kib, hwm_kib, at })
}

/// CPU seconds of `ticks` clock ticks.
pub fn cpu_secs(ticks: u64, clk_tck: u64) -> f64 {
    ticks as f64 / clk_tck.max(1) as f64
}

/// CPU use of `ticks` clock ticks over `window`, in percent of one core (not rounded).
pub fn cpu_pct(ticks: u64, clk_tck: u64, window: Duration) -> f64 {
    100.0 * cpu_secs(ticks, clk_tck) / window.as_secs_f64().max(1e-3)
}

/// A process over a window: memory at the end, CPU used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcReport {
    pub name: String,
    pub pid: u32,
    pub leader: bool,
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    /// CPU time over the window, in percent of one core.
    pub cpu_pct: f64,
    pub cpu_s: f64,
    pub restarted: bool,
}

/// What happened between two samples of the same process.
pub fn report(name: &str, leader: bool, a: &ProcSample, b: &ProcSample) -> ProcReport {
    let ticks = b.ticks.saturating_sub(a.ticks);
    let r = |x: f64| (x * 100.0).round() / 100.0;
    ProcReport {
        name: name.to_string(),
        pid: b.pid,
        leader,
        rss_mib: r(b.rss_kib as f64 / 1024.0),
        peak_rss_mib: r(b.hwm_kib as f64 / 1024.0),
        cpu_pct: r(cpu_pct(ticks, b.clk_tck, b.at.duration_since(a.at))),
        cpu_s: r(cpu_secs(ticks, b.clk_tck)),
        restarted: a.pid != b.pid,
    }
}

/// Whether the fleetd in machine `name` leads the engine: its log's last line about engine leadership says
/// it was acquired.
pub async fn is_leader(name: &str) -> bool {
    let script = "journalctl -u fleet --no-pager -o cat | grep -i 'engine leadership' | tail -n1";
    match container::exec(name, &["sh", "-c", script]).await {
        Ok(out) => out.stdout.to_lowercase().contains("acquired"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_status_are_parsed() {
        let text = "42\n42 (fleet d) S 1 42 42 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 8 0 1 2 3\n\
                    VmHWM:\t   12000 kB\nVmRSS:\t    8192 kB\n100\n";
        let s = parse(text, Instant::now()).unwrap();
        assert_eq!((s.pid, s.ticks, s.rss_kib, s.hwm_kib, s.clk_tck), (42, 175, 8192, 12000, 100));
        assert!(parse("0\n", Instant::now()).is_none());
    }
}

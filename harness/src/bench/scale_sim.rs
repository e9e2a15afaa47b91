//! The simulated machines of the scale scenario: a few `fleet-sim` processes on the host (fleet's binary, found
//! like fleetd: `FLEET_SIM_BIN` or this workspace's build), each running its share of the machines against the
//! cluster's etcd, the first machine of each also an engine candidate (as every fleetd is: when the leader's
//! machine is lost, another takes over). Their stdout lines (`fleet_sim::report`, four forms: `registered
//! N`, `pass {json}`, `lost <id> <reason>`, `stopped`) are collected as they come; RSS and CPU from `/proc`.
//! Processes are killed when dropped (also on error). Each one's stderr (warnings and errors) goes to
//! `$TMPDIR/fleet-bench-sim-<first index>.log`. A process that ends on its own ([`SimProcs::reap_exited`]) loses
//! every machine it ran: each is counted lost with the exit status and the last error of its log.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use super::procs::{self, ProcSample};

/// One engine pass as `fleet-sim` reports it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Pass {
    pub duration_ms: f64,
    pub planned: usize,
    pub applied: usize,
    pub unplaced: usize,
}

/// One parsed line of a `fleet-sim` process.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Registered(usize),
    Pass(Pass),
    Lost { machine: String, reason: String },
    Stopped,
}

/// Parses a `fleet-sim` stdout line; `None` for anything else.
pub fn parse_line(line: &str) -> Option<Line> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    match word {
        "registered" => rest.trim().parse().ok().map(Line::Registered),
        "pass" => serde_json::from_str(rest).ok().map(Line::Pass),
        "lost" => {
            let (machine, reason) = rest.split_once(' ').unwrap_or((rest, ""));
            Some(Line::Lost { machine: machine.to_string(), reason: reason.to_string() })
        }
        "stopped" => Some(Line::Stopped),
        _ => None,
    }
}

/// `fleet-sim`'s machine ID of index `i` (the same derivation as `fleet_sim::machine_id`).
pub fn machine_id(index: usize) -> String {
    format!("5151{index:028x}")
}

/// What the processes reported so far.
#[derive(Debug, Default)]
pub struct Events {
    pub registered: usize,
    pub passes: Vec<(Instant, Pass)>,
    pub lost: Vec<(String, String)>,
}

/// One `fleet-sim` process.
struct Proc {
    child: Child,
    pid: u32,
    first: usize,
    machines: usize,
    /// Its stderr.
    log: PathBuf,
    /// It ended on its own and its machines were counted lost.
    ended: bool,
}

/// Why a simulator ended: its exit status and the last error its log holds (else its last line).
pub fn exit_reason(status: &str, log: &str) -> String {
    let lines: Vec<String> = log.lines().map(strip_ansi).filter(|l| !l.trim().is_empty()).collect();
    let last = lines.iter().rev().find(|l| l.contains("ERROR")).or(lines.last());
    match last {
        Some(line) => format!("fleet-sim exited ({status}); last error: {}", line.trim()),
        None => format!("fleet-sim exited ({status}); its log is empty"),
    }
}

/// `line` without ANSI colour sequences (`ESC [ … m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The running `fleet-sim` processes.
pub struct SimProcs {
    procs: Vec<Proc>,
    events: Arc<Mutex<Events>>,
    changed: watch::Receiver<u64>,
}

/// How `machines` machines are split over `procs` processes: (first index, count) each, as even as possible.
pub fn split(machines: usize, procs: usize) -> Vec<(usize, usize)> {
    let procs = procs.clamp(1, machines.max(1));
    let (each, extra) = (machines / procs, machines % procs);
    let mut first = 0;
    (0..procs)
        .map(|i| {
            let n = each + usize::from(i < extra);
            let part = (first, n);
            first += n;
            part
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

impl SimProcs {
    /// Starts `machines` simulated machines in `procs` processes against `etcd` (`http://ip:port`) under key
    /// `prefix`, each with
    /// `metadata`, lease TTL `ttl_s`; the first process also runs the engine.
    pub fn start(
        etcd: &str,
        prefix: &str,
        machines: usize,
        procs: usize,
        ttl_s: u64,
        metadata: &str,
    ) -> Result<SimProcs, String> {
        let bin = crate::config::locate("fleet-sim", "FLEET_SIM_BIN").map_err(|e| e.to_string())?;
        let events = Arc::new(Mutex::new(Events::default()));
        let (tx, changed) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let mut started = Vec::new();
        for (first, n) in split(machines, procs) {
            // Warnings and errors of each simulator go to a file of its own, kept for a post-mortem.
            let log_path = std::env::temp_dir().join(format!("fleet-bench-sim-{first}.log"));
            let log = std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
            let mut cmd = Command::new(&bin);
            cmd.args(["--etcd", etcd, "--prefix", prefix, "--machines", &n.to_string(), "--first", &first.to_string()])
                .args(["--ttl", &ttl_s.to_string(), "--metadata", metadata])
                .stdout(Stdio::piped())
                .stderr(Stdio::from(log))
                .env("RUST_LOG", "warn")
                .kill_on_drop(true);
            cmd.arg("--engine");
            // SAFETY: prctl is async-signal-safe; the simulators die with the bench even when it is killed outright.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut child = cmd.spawn().map_err(|e| format!("starting {}: {e}", bin.display()))?;
            let pid = child.id().unwrap_or(0);
            let stdout = child.stdout.take().ok_or("fleet-sim has no stdout")?;
            let (events, tx) = (events.clone(), tx.clone());
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let Some(parsed) = parse_line(&line) else { continue };
                    {
                        let mut e = events.lock().unwrap_or_else(|e| e.into_inner());
                        match parsed {
                            Line::Registered(n) => e.registered += n,
                            Line::Pass(p) => e.passes.push((Instant::now(), p)),
                            Line::Lost { machine, reason } => e.lost.push((machine, reason)),
                            Line::Stopped => {}
                        }
                    }
                    tx.send_modify(|n| *n += 1);
                }
            });
            started.push(Proc { child, pid, first, machines: n, log: log_path, ended: false });
        }
        Ok(SimProcs { procs: started, events, changed })
    }

    /// Waits until every machine registered, or `timeout`; fails with what was seen (machines lost included).
    pub async fn wait_registered(&mut self, machines: usize, timeout: Duration) -> Result<Duration, String> {
        let t0 = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            self.reap_exited();
            {
                let e = self.events();
                if e.registered >= machines {
                    return Ok(t0.elapsed());
                }
                if !e.lost.is_empty() {
                    return Err(format!(
                        "{} simulated machine(s) failed, first: {} {}",
                        e.lost.len(),
                        e.lost[0].0,
                        e.lost[0].1
                    ));
                }
            }
            // Woken by a line, or every 500 ms to see whether a process ended.
            let wake = deadline.min(tokio::time::Instant::now() + Duration::from_millis(500));
            match tokio::time::timeout_at(wake, self.changed.changed()).await {
                Ok(Ok(())) => {}
                Err(_) if tokio::time::Instant::now() < deadline => {}
                Ok(Err(_)) | Err(_) => {
                    let e = self.events();
                    return Err(format!("{} of {machines} simulated machines registered in {timeout:?}", e.registered));
                }
            }
        }
    }

    /// Counts the machines of every process that ended on its own since the last call as lost, with why
    /// ([`exit_reason`]); returns those reasons, one per process.
    pub fn reap_exited(&mut self) -> Vec<String> {
        let mut reasons = Vec::new();
        for p in self.procs.iter_mut().filter(|p| !p.ended) {
            let Ok(Some(status)) = p.child.try_wait() else { continue };
            p.ended = true;
            let reason = exit_reason(&status.to_string(), &read_log(&p.log));
            let mut e = self.events.lock().unwrap_or_else(|e| e.into_inner());
            for i in p.first..p.first + p.machines {
                let id = machine_id(i);
                if !e.lost.iter().any(|(m, _)| *m == id) {
                    e.lost.push((id, reason.clone()));
                }
            }
            reasons.push(format!("machines {}..{}: {reason}", p.first, p.first + p.machines));
        }
        reasons
    }

    pub fn events(&self) -> std::sync::MutexGuard<'_, Events> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The host PIDs of the processes.
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.pid).collect()
    }

    /// Kills the last process outright (its machines vanish as in a crash: their leases expire after the TTL);
    /// returns the IDs of its machines.
    pub async fn kill_last(&mut self) -> Result<Vec<String>, String> {
        if self.procs.len() < 2 {
            return Err("the leave needs at least two simulator processes".into());
        }
        let mut p = self.procs.pop().ok_or("no process")?;
        p.child.kill().await.map_err(|e| format!("killing fleet-sim {}: {e}", p.pid))?;
        Ok((p.first..p.first + p.machines).map(machine_id).collect())
    }

    /// Stops every process with SIGTERM (their machines revoke their leases) and waits for them.
    pub async fn stop(mut self) {
        for p in &self.procs {
            // SAFETY: signalling a child process of ours by its pid.
            unsafe { libc::kill(p.pid as i32, libc::SIGTERM) };
        }
        for p in &mut self.procs {
            if tokio::time::timeout(Duration::from_secs(10), p.child.wait()).await.is_err() {
                let _ = p.child.kill().await;
            }
        }
    }
}

/// A sample of host process `pid` from `/proc` (`None` when it is gone, or has no memory lines: a zombie).
pub fn host_proc(pid: u32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    if !(status.contains("\nVmRSS:") && status.contains("\nVmHWM:")) {
        return None;
    }
    procs::parse_proc(pid, &stat, &status, clk_tck(), Instant::now())
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
pub fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_parsed_as_fleet_sim_prints_them() {
        assert_eq!(parse_line("registered 30"), Some(Line::Registered(30)));
        let pass = r#"pass {"duration_ms":1.500,"planned":10,"applied":9,"unplaced":1}"#;
        assert_eq!(parse_line(pass), Some(Line::Pass(Pass { duration_ms: 1.5, planned: 10, applied: 9, unplaced: 1 })));
        assert_eq!(
            parse_line("lost 5151 presence lease lost: x"),
            Some(Line::Lost { machine: "5151".into(), reason: "presence lease lost: x".into() })
        );
        assert_eq!(parse_line("stopped"), Some(Line::Stopped));
        assert_eq!(parse_line("WARN something"), None);
    }

    #[test]
    fn an_exit_names_the_status_and_the_last_error() {
        let log = "\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m engine: lease lost\n WARN slow\n\n";
        assert_eq!(
            exit_reason("exit status: 1", log),
            "fleet-sim exited (exit status: 1); last error: 2026 ERROR engine: lease lost"
        );
        assert_eq!(
            exit_reason("signal: 9 (SIGKILL)", " WARN slow\n"),
            "fleet-sim exited (signal: 9 (SIGKILL)); last error: WARN slow"
        );
        assert_eq!(exit_reason("exit status: 0", ""), "fleet-sim exited (exit status: 0); its log is empty");
    }

    #[test]
    fn machines_are_split_evenly_over_processes() {
        assert_eq!(split(100, 10), (0..10).map(|i| (i * 10, 10)).collect::<Vec<_>>());
        assert_eq!(split(7, 3), [(0, 3), (3, 2), (5, 2)]);
        assert_eq!(split(2, 10), [(0, 1), (1, 1)]);
        assert_eq!(machine_id(0), "51510000000000000000000000000000");
    }

    #[test]
    fn this_process_is_read_from_proc() {
        let me = host_proc(std::process::id()).expect("/proc/self");
        assert!(me.rss_kib > 0 && me.hwm_kib >= me.rss_kib, "{me:?}");
        assert_eq!(me.clk_tck, clk_tck());
    }
}

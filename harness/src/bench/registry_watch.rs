//! Following a start or a destroy in fleet's registry itself, event-driven: one `etcdctl watch` of the cluster's
//! key prefix (inside the etcd container, from the revision read just before the command), folded into a
//! [`Tally`] of the instances' scheduling targets, unit objects and published states, which records when each
//! stage was first reached.
//!
//! Why not poll `fleetctl list-units`: with 1,000 units every poll cost the API machine's fleetd and the fleetctl
//! process tens of milliseconds of CPU, 100 polls per start, on a 2-core host whose floor is CPU-bound, so the
//! measurement slowed down what it measured (and saw it only every ~110 ms). A watch costs fleetd nothing and sees
//! each change when etcd has it. list-units (what a person sees) is still read once at the end, to confirm.
//!
//! The keys are those of the original fleet's layout as well as ours: `<prefix>units/<name>/{object,target}` (or
//! `<prefix>job/<name>/{object,target}`) and `<prefix>states/<name>/<machine>` with JSON carrying `loadState`,
//! `activeState` and `subState`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use super::ctx::Ctx;
use super::stats::secs;

/// What the registry says of the watched instances (those whose name starts with the given prefix).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    instance_prefix: String,
    /// Units with a unit object (created, not destroyed).
    objects: BTreeSet<String>,
    /// Units with a scheduling target (a machine).
    targets: BTreeSet<String>,
    /// Layout 2: unit → the machines whose schedule entry places it there (global units' entries aside).
    placements: BTreeMap<String, BTreeSet<String>>,
    /// unit → machine → (load, active, sub) as the agent published it.
    states: BTreeMap<String, BTreeMap<String, (String, String, String)>>,
}

/// Counts of one [`Tally`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub objects: usize,
    pub scheduled: usize,
    /// Units with a state whose load state is `loaded` on some machine.
    pub loaded: usize,
    /// Units `active/running` on some machine.
    pub running: usize,
    /// Units with any state published.
    pub with_state: usize,
}

impl Tally {
    pub fn new(instance_prefix: &str) -> Tally {
        Tally { instance_prefix: instance_prefix.to_string(), ..Tally::default() }
    }

    /// Applies one event: `key` relative to fleet's prefix, `value` None for a delete. Returns whether anything
    /// about the watched instances changed.
    pub fn apply(&mut self, key: &str, value: Option<&[u8]>) -> bool {
        let parts: Vec<&str> = key.split('/').collect();
        match parts.as_slice() {
            ["units" | "job", unit, what] if unit.starts_with(&self.instance_prefix) => {
                let set = match *what {
                    "object" => &mut self.objects,
                    "target" => &mut self.targets,
                    _ => return false,
                };
                match value {
                    Some(_) => set.insert(unit.to_string()),
                    None => set.remove(*unit),
                }
            }
            ["machines", machine, "schedule", unit] if unit.starts_with(&self.instance_prefix) => {
                let placed = value.is_some_and(|v| serde_json::from_slice::<Entry>(v).is_ok_and(|e| !e.global));
                let machines = self.placements.entry(unit.to_string()).or_default();
                let changed = if placed { machines.insert(machine.to_string()) } else { machines.remove(*machine) };
                if machines.is_empty() {
                    self.placements.remove(*unit);
                }
                changed
            }
            ["states", unit, machine] if unit.starts_with(&self.instance_prefix) => match value {
                Some(v) => {
                    let Ok(s) = serde_json::from_slice::<PublishedState>(v) else { return false };
                    let new = (s.load_state, s.active_state, s.sub_state);
                    let machines = self.states.entry(unit.to_string()).or_default();
                    machines.insert(machine.to_string(), new.clone()) != Some(new)
                }
                None => {
                    let Some(machines) = self.states.get_mut(*unit) else { return false };
                    let removed = machines.remove(*machine).is_some();
                    if machines.is_empty() {
                        self.states.remove(*unit);
                    }
                    removed
                }
            },
            _ => false,
        }
    }

    pub fn counts(&self) -> Counts {
        let any = |unit: &BTreeMap<String, (String, String, String)>, f: &dyn Fn(&(String, String, String)) -> bool| {
            unit.values().any(f)
        };
        Counts {
            objects: self.objects.len(),
            scheduled: self.targets.len() + self.placements.keys().filter(|u| !self.targets.contains(*u)).count(),
            loaded: self.states.values().filter(|m| any(m, &|s| s.0 == "loaded")).count(),
            running: self.states.values().filter(|m| any(m, &|s| s.1 == "active" && s.2 == "running")).count(),
            with_state: self.states.len(),
        }
    }
}

/// The part of a layout-2 schedule entry the bench reads.
#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(default)]
    global: bool,
}

/// The part of a published unit state the bench reads.
#[derive(Debug, Deserialize)]
struct PublishedState {
    #[serde(rename = "loadState", default)]
    load_state: String,
    #[serde(rename = "activeState", default)]
    active_state: String,
    #[serde(rename = "subState", default)]
    sub_state: String,
}

/// When each stage of a start was first reached, in seconds since the command began (None: never).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StartStages {
    pub all_scheduled_s: Option<f64>,
    pub first_loaded_s: Option<f64>,
    pub half_loaded_s: Option<f64>,
    pub all_loaded_s: Option<f64>,
    pub first_active_s: Option<f64>,
    pub half_active_s: Option<f64>,
    pub all_active_s: Option<f64>,
}

impl StartStages {
    /// Records what the registry held at `at` for `n` instances.
    pub fn see(&mut self, at: f64, n: usize, c: &Counts) {
        let first = |slot: &mut Option<f64>, reached: bool| {
            if reached && slot.is_none() {
                *slot = Some(at);
            }
        };
        first(&mut self.all_scheduled_s, c.scheduled >= n);
        first(&mut self.first_loaded_s, c.loaded > 0);
        first(&mut self.half_loaded_s, c.loaded * 2 >= n);
        first(&mut self.all_loaded_s, c.loaded >= n);
        first(&mut self.first_active_s, c.running > 0);
        first(&mut self.half_active_s, c.running * 2 >= n);
        first(&mut self.all_active_s, c.running >= n);
    }
}

/// What the watch has seen so far: the counts after the newest event that changed them, and when it arrived.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    pub counts: Counts,
    pub at: Option<Instant>,
    pub events: usize,
    /// Why the watch stopped, if it did.
    pub ended: Option<String>,
}

/// A running watch; dropping it kills the `etcdctl` process.
pub struct RegistryWatch {
    seen: watch::Receiver<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RegistryWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RegistryWatch {
    /// Starts watching the cluster's fleet keys from the current revision on.
    pub async fn start(ctx: &Ctx, instance_prefix: &str) -> Result<RegistryWatch, String> {
        let prefix = ctx.cluster.key_prefix();
        let prefix = if prefix.ends_with('/') { prefix } else { format!("{prefix}/") };
        let etcdctl = Etcdctl::of(ctx).await?;
        // What is there now, and the revision it was read at: the watch goes on from the next one.
        let out = etcdctl
            .command(&["get", &prefix, "--prefix", "-w", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .map_err(|e| format!("registry watch: cannot run etcdctl get: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("registry watch: etcdctl get failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let (revision, present) = parse_get(&stdout, &prefix)
            .ok_or_else(|| format!("registry watch: cannot parse `etcdctl get`: {}", super::ctx::short(&stdout)))?;
        let mut tally = Tally::new(instance_prefix);
        for (key, value) in &present {
            tally.apply(key, Some(value));
        }
        let from = (revision + 1).to_string();
        let mut child = etcdctl
            .command(&["watch", "--prefix", &prefix, "--rev", &from, "-w", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("registry watch: cannot run etcdctl watch: {e}"))?;
        let stdout = child.stdout.take().ok_or("registry watch: no stdout")?;
        let (tx, seen) = watch::channel(Seen { counts: tally.counts(), ..Seen::default() });
        let task = tokio::spawn(async move {
            let _child = child;
            let mut lines = BufReader::new(stdout).lines();
            let mut events = 0;
            let ended = loop {
                match lines.next_line().await {
                    Ok(Some(line)) => {
                        let Some(batch) = parse_response(&line, &prefix) else { continue };
                        let mut changed = false;
                        for (key, value) in &batch {
                            changed |= tally.apply(key, value.as_deref());
                        }
                        events += batch.len();
                        if changed {
                            let counts = tally.counts();
                            tx.send_replace(Seen { counts, at: Some(Instant::now()), events, ended: None });
                        }
                    }
                    Ok(None) => break "etcdctl watch ended".to_string(),
                    Err(e) => break format!("reading etcdctl watch: {e}"),
                }
            };
            tx.send_modify(|s| s.ended = Some(ended));
        });
        Ok(RegistryWatch { seen, task })
    }

    /// Waits until `done` holds for the counts, calling `each` with every new state seen (and the seconds since
    /// `t0` at which it arrived); returns those seconds. On timeout (counted from `t0`) or when the watch ends, the
    /// error names the last counts seen.
    pub async fn until(
        &mut self,
        t0: Instant,
        timeout: Duration,
        mut each: impl FnMut(f64, &Seen),
        done: impl Fn(&Counts) -> bool,
    ) -> Result<f64, String> {
        loop {
            let seen = self.seen.borrow_and_update().clone();
            let at_s = seen.at.map_or(0.0, |at| secs(at.saturating_duration_since(t0)));
            each(at_s, &seen);
            if done(&seen.counts) {
                return Ok(at_s);
            }
            if let Some(why) = &seen.ended {
                return Err(format!("{why}; last seen at {at_s:.3} s: {:?}", seen.counts));
            }
            let left = timeout.saturating_sub(t0.elapsed());
            match tokio::time::timeout(left, self.seen.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(format!("registry watch task ended; last seen: {:?}", seen.counts)),
                Err(_) => {
                    return Err(format!(
                        "not done within {timeout:?}; last seen at {at_s:.3} s after {} events: {:?}",
                        seen.events, seen.counts
                    ));
                }
            }
        }
    }
}

/// How the bench reaches etcd: the host's own `etcdctl` on the cluster network (nothing relayed, so the
/// measurement costs no Docker CPU), or inside the etcd container in a TLS cluster (its certificates are there).
enum Etcdctl {
    Host { endpoint: String },
    InContainer { container: String, base: Vec<String> },
}

impl Etcdctl {
    async fn of(ctx: &Ctx) -> Result<Etcdctl, String> {
        let etcd = ctx.cluster.etcd();
        if etcd.is_tls() {
            return Ok(Etcdctl::InContainer { container: etcd.name().to_string(), base: etcd.etcdctl_command(&[]) });
        }
        let ip = crate::docker::container_ip(etcd.name(), ctx.cluster.network())
            .await
            .map_err(|e| format!("registry watch: {e}"))?
            .ok_or_else(|| format!("registry watch: {} has no address", etcd.name()))?;
        Ok(Etcdctl::Host { endpoint: format!("http://{ip}:{}", crate::etcd::PORT) })
    }

    /// The command running `etcdctl args…` (stdin closed).
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = match self {
            Etcdctl::Host { endpoint } => {
                let mut cmd = tokio::process::Command::new(ETCDCTL);
                cmd.arg(format!("--endpoints={endpoint}"));
                cmd
            }
            Etcdctl::InContainer { container, base } => {
                let mut cmd = tokio::process::Command::new("docker");
                cmd.arg("exec").arg(container).args(base);
                cmd
            }
        };
        cmd.args(args).stdin(Stdio::null());
        cmd
    }
}

/// The host's etcdctl (Debian's etcd-client, installed by `ci/setup`).
const ETCDCTL: &str = "/usr/bin/etcdctl";

/// Keys (relative to fleet's prefix) with their values.
pub type KeyValues = Vec<(String, Vec<u8>)>;

/// An `etcdctl get --prefix -w json` answer: its revision and the keys (relative to `prefix`) with their values.
pub fn parse_get(json: &str, prefix: &str) -> Option<(i64, KeyValues)> {
    #[derive(Deserialize)]
    struct Get {
        header: Header,
        #[serde(default)]
        kvs: Vec<Kv>,
    }
    #[derive(Deserialize)]
    struct Header {
        revision: i64,
    }
    let get: Get = serde_json::from_str(json.trim()).ok()?;
    let kvs = get.kvs.into_iter().filter_map(|kv| {
        let (key, value) = kv.decode(prefix)?;
        Some((key, value.unwrap_or_default()))
    });
    Some((get.header.revision, kvs.collect()))
}

/// A key-value of etcdctl's JSON output (key and value in base64).
#[derive(Deserialize)]
struct Kv {
    key: String,
    #[serde(default)]
    value: Option<String>,
}

impl Kv {
    /// The key relative to `prefix` (None outside it, or undecodable) and the value.
    fn decode(self, prefix: &str) -> Option<(String, Option<Vec<u8>>)> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let key = String::from_utf8(b64.decode(self.key).ok()?).ok()?;
        let key = key.strip_prefix(prefix)?.to_string();
        let value = match self.value {
            Some(v) => Some(b64.decode(v).ok()?),
            None => None,
        };
        Some((key, value))
    }
}

/// One line of `etcdctl watch -w json`: its events as (key relative to `prefix`, value; None for a delete).
/// Keys outside `prefix` and lines that are not watch responses give nothing.
pub fn parse_response(line: &str, prefix: &str) -> Option<Vec<(String, Option<Vec<u8>>)>> {
    #[derive(Deserialize)]
    struct Response {
        #[serde(rename = "Events", default)]
        events: Vec<Event>,
    }
    #[derive(Deserialize)]
    struct Event {
        #[serde(rename = "type", default)]
        kind: u8,
        kv: Kv,
    }
    let response: Response = serde_json::from_str(line).ok()?;
    Some(
        response
            .events
            .into_iter()
            .filter_map(|e| {
                let (key, value) = e.kv.decode(prefix)?;
                // A put of an empty value has no `value` field.
                Some((key, if e.kind == 1 { None } else { Some(value.unwrap_or_default()) }))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOADED: &[u8] = br#"{"hash":"h","loadState":"loaded","activeState":"activating","subState":"start"}"#;
    const RUNNING: &[u8] = br#"{"loadState":"loaded","activeState":"active","subState":"running","machineState":{}}"#;

    #[test]
    fn a_start_is_counted_stage_by_stage() {
        let mut t = Tally::new("t@");
        assert!(t.apply("units/t@1.service/object", Some(b"{}")));
        assert!(t.apply("units/t@1.service/target", Some(b"m1")));
        assert!(!t.apply("units/other.service/target", Some(b"m1")), "not one of ours");
        assert!(!t.apply("units/t@1.service/desired", Some(b"launched")), "not a key the tally keeps");
        assert!(t.apply("states/t@1.service/m1", Some(LOADED)));
        assert_eq!(t.counts(), Counts { objects: 1, scheduled: 1, loaded: 1, running: 0, with_state: 1 });
        assert!(!t.apply("states/t@1.service/m1", Some(LOADED)), "the same state again changes nothing");
        assert!(t.apply("states/t@1.service/m1", Some(RUNNING)));
        assert_eq!(t.counts().running, 1);
    }

    #[test]
    fn the_original_layout_counts_too() {
        let mut t = Tally::new("t@");
        t.apply("job/t@1.service/object", Some(b"{}"));
        t.apply("job/t@1.service/target", Some(b"m1"));
        t.apply("states/t@1.service/m1", Some(RUNNING));
        assert_eq!(t.counts(), Counts { objects: 1, scheduled: 1, loaded: 1, running: 1, with_state: 1 });
    }

    #[test]
    fn a_destroy_empties_the_tally() {
        let mut t = Tally::new("t@");
        t.apply("units/t@1.service/object", Some(b"{}"));
        t.apply("units/t@1.service/target", Some(b"m1"));
        t.apply("states/t@1.service/m1", Some(RUNNING));
        assert!(t.apply("units/t@1.service/object", None));
        assert!(t.apply("units/t@1.service/target", None));
        // Layout 2: a placement is a schedule entry; a global unit's entry places nothing.
        assert!(t.apply("machines/m2/schedule/t@2.service", Some(br#"{"hash":"h","desired":"launched"}"#)));
        assert!(
            !t.apply("machines/m2/schedule/t@3.service", Some(br#"{"hash":"h","desired":"launched","global":true}"#))
        );
        assert_eq!(t.counts().scheduled, 1);
        assert!(t.apply("machines/m2/schedule/t@2.service", None));
        assert_eq!(t.counts().scheduled, 0);
        assert!(t.apply("states/t@1.service/m1", None));
        assert!(!t.apply("states/t@1.service/m1", None), "deleting what is gone changes nothing");
        assert_eq!(t.counts(), Counts::default());
    }

    #[test]
    fn stages_keep_the_first_time_each_was_reached() {
        let mut s = StartStages::default();
        let c = |scheduled, loaded, running| Counts { objects: 4, scheduled, loaded, running, with_state: loaded };
        s.see(0.1, 4, &c(2, 0, 0));
        s.see(0.2, 4, &c(4, 1, 0));
        s.see(0.3, 4, &c(4, 2, 1));
        s.see(0.4, 4, &c(4, 4, 2));
        s.see(0.5, 4, &c(4, 4, 4));
        s.see(0.6, 4, &c(4, 4, 4));
        assert_eq!(
            (s.all_scheduled_s, s.first_loaded_s, s.half_loaded_s, s.all_loaded_s),
            (Some(0.2), Some(0.2), Some(0.3), Some(0.4))
        );
        assert_eq!((s.first_active_s, s.half_active_s, s.all_active_s), (Some(0.3), Some(0.4), Some(0.5)));
    }

    #[test]
    fn watch_lines_decode_puts_and_deletes_under_the_prefix() {
        let line = r#"{"Header":{"revision":9},"Events":[{"kv":{"key":"L3AvdW5pdHMvdEAxLnNlcnZpY2Uvb2JqZWN0","mod_revision":8,"value":"e30="}},{"type":1,"kv":{"key":"L3Avc3RhdGVzL3RAMS5zZXJ2aWNlL20x","mod_revision":9}},{"kv":{"key":"L3EveA==","value":"eA=="}}],"Canceled":false}"#;
        let events = parse_response(line, "/p/").unwrap();
        assert_eq!(
            events,
            vec![
                ("units/t@1.service/object".to_string(), Some(b"{}".to_vec())),
                ("states/t@1.service/m1".to_string(), None),
            ],
            "the key under /q/ is not fleet's"
        );
        assert!(parse_response("1", "/p/").is_none(), "etcdctl's revision line is no response");
    }

    #[test]
    fn a_get_gives_its_revision_and_the_keys_under_the_prefix() {
        let json = r#"{"header":{"cluster_id":1,"revision":42},"kvs":[{"key":"L3AvdW5pdHMvdEAxLnNlcnZpY2Uvb2JqZWN0","create_revision":8,"mod_revision":8,"version":1,"value":"e30="},{"key":"L3EveA==","value":"eA=="}],"count":2}"#;
        let (revision, kvs) = parse_get(json, "/p/").unwrap();
        assert_eq!(revision, 42);
        assert_eq!(kvs, vec![("units/t@1.service/object".to_string(), b"{}".to_vec())]);
        assert_eq!(parse_get(r#"{"header":{"revision":3}}"#, "/p/"), Some((3, Vec::new())), "an empty registry");
        assert_eq!(parse_get("nope", "/p/"), None);
    }
}

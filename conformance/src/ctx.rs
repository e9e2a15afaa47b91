//! What a spec works with: its cluster, fleetctl runs that remember their output (so a failure can show the last
//! one), waits that explain their timeouts, and views of systemd inside the machines.
//!
//! The cluster is either the spec's own harness cluster (containers the spec may kill, partition or replace) or a
//! live cluster shared with other users and other specs (`fleet-conformance --against`). On a live cluster every
//! name a spec gives goes out with the spec's prefix and comes back without it ([`crate::names`]); the spec does
//! not change. What only a harness cluster offers ([`Self::cluster`], [`Self::machine`]) is refused there: a spec
//! that uses it must declare [`crate::Need::Harness`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleet_harness::fleetctl::EndpointVia;
use fleet_harness::wait::{self, Check, Row, UnitFileState, UnitState, WaitOptions};
use fleet_harness::{Cluster, ClusterBuilder, Machine, Output};

use crate::check::Context;
use crate::http::{self, Response};
use crate::live::LiveCluster;
use crate::names::{self, Names};

/// Where a spec's cluster lives.
enum Target {
    /// A harness cluster of the spec's own (absent for specs of fleetctl alone).
    Harness(Option<Box<Cluster>>),
    /// A live cluster (shared), with a directory for the spec's unit files as they go to it (prefixed).
    Live { cluster: Arc<LiveCluster>, files: tempfile::TempDir },
}

/// A spec's cluster (absent for specs of fleetctl alone) and its observations.
pub struct Ctx {
    target: Target,
    names: Names,
    last: Mutex<Option<String>>,
}

/// Why a spec that reaches for the harness cannot run on a live cluster.
const NOT_HARNESS: &str =
    "this spec uses the harness's containers but does not declare Need::Harness, so it ran against a live cluster";

impl Ctx {
    /// Starts `builder`'s cluster.
    pub async fn start(builder: ClusterBuilder) -> Result<Ctx, String> {
        let cluster = builder.start().await.ctx("starting the cluster")?;
        Ok(Ctx { target: Target::Harness(Some(Box::new(cluster))), names: Names::identity(), last: Mutex::new(None) })
    }

    /// A context without a cluster.
    pub fn without_cluster() -> Ctx {
        Ctx { target: Target::Harness(None), names: Names::identity(), last: Mutex::new(None) }
    }

    /// A context on a live cluster, every unit of the spec named `<prefix><name>`.
    pub fn live(cluster: Arc<LiveCluster>, prefix: &str) -> Result<Ctx, String> {
        let files = tempfile::Builder::new()
            .prefix("fleet-conformance-units-")
            .tempdir()
            .map_err(|e| format!("a temporary directory for unit files: {e}"))?;
        Ok(Ctx { target: Target::Live { cluster, files }, names: Names::prefixed(prefix), last: Mutex::new(None) })
    }

    /// How the spec's unit names map to the cluster's (identity on a harness cluster).
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The name unit `name` of the spec has on the cluster (itself on a harness cluster).
    pub fn unit(&self, name: &str) -> String {
        self.names.outward(name)
    }

    fn live_cluster(&self) -> Option<&LiveCluster> {
        match &self.target {
            Target::Live { cluster, .. } => Some(cluster),
            Target::Harness(_) => None,
        }
    }

    pub fn cluster(&self) -> &Cluster {
        match &self.target {
            Target::Harness(c) => c.as_ref().expect("this spec declared no machines"),
            Target::Live { .. } => panic!("{NOT_HARNESS}"),
        }
    }

    pub fn cluster_mut(&mut self) -> &mut Cluster {
        match &mut self.target {
            Target::Harness(c) => c.as_mut().expect("this spec declared no machines"),
            Target::Live { .. } => panic!("{NOT_HARNESS}"),
        }
    }

    /// The harness's machine in `slot` (only on a harness cluster).
    pub fn machine(&self, slot: usize) -> Result<&Machine, String> {
        match &self.target {
            Target::Harness(_) => self.cluster().machine(slot).map_err(|e| e.to_string()),
            Target::Live { .. } => Err(format!("machine {slot}: {NOT_HARNESS}")),
        }
    }

    /// The machine ID of `slot`.
    pub fn id(&self, slot: usize) -> Result<String, String> {
        match self.live_cluster() {
            Some(live) => Ok(live.machine(slot)?.id.clone()),
            None => Ok(self.machine(slot)?.id().to_string()),
        }
    }

    /// The slot of the machine with ID `id`.
    pub fn slot_of(&self, id: &str) -> Option<usize> {
        match self.live_cluster() {
            Some(live) => live.machines().iter().position(|m| m.id == id).map(|i| i + 1),
            None => self.cluster().machines().iter().find(|m| m.id() == id).map(Machine::slot),
        }
    }

    /// How long waits take: the harness cluster's options, or the default (30 s, scaled) elsewhere.
    fn wait_options(&self) -> WaitOptions {
        match &self.target {
            Target::Harness(Some(c)) => c.wait_options(),
            _ => WaitOptions::default(),
        }
    }

    /// `Err(msg)` with the last fleetctl invocation appended.
    pub fn fail(&self, msg: impl std::fmt::Display) -> String {
        match self.last.lock().unwrap().as_ref() {
            Some(last) => format!("{msg}\n  last fleetctl: {last}"),
            None => msg.to_string(),
        }
    }

    /// `Err(self.fail(msg()))` unless `cond`.
    pub fn ensure(&self, cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
        if cond { Ok(()) } else { Err(self.fail(msg())) }
    }

    fn record(&self, args: &[&str], out: &Output) {
        *self.last.lock().unwrap() = Some(format!("`fleetctl {}` -> {}", args.join(" "), out.describe()));
    }

    /// Runs fleetctl against machine `slot`'s endpoint (`--endpoint`).
    pub async fn fleetctl(&self, slot: usize, args: &[&str]) -> Result<Output, String> {
        let out = self.run_fleetctl(slot, EndpointVia::Flag, args, None).await?;
        self.record(args, &out);
        Ok(out)
    }

    /// Runs fleetctl (endpoint as `via` says, `stdin` fed when given) without recording it. On a live cluster the
    /// arguments go out with the spec's names mapped and unit files rewritten, and the output comes back mapped.
    async fn run_fleetctl(
        &self,
        slot: usize,
        via: EndpointVia,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<Output, String> {
        let what = || match stdin {
            Some(input) => format!("fleetctl {} (stdin {input:?})", args.join(" ")),
            None if via == EndpointVia::Env => "fleetctl (endpoint from env)".to_string(),
            None => format!("fleetctl {}", args.join(" ")),
        };
        match &self.target {
            Target::Harness(_) => {
                let c = self.cluster();
                match (via, stdin) {
                    (_, Some(input)) => c.fleetctl_with_input(slot, input, args).await,
                    (EndpointVia::Env, None) => c.fleetctl_with_env(slot, args).await,
                    (EndpointVia::Flag, None) => c.fleetctl(slot, args).await,
                }
                .ctx(&what())
            }
            Target::Live { cluster, files } => {
                let mapped = self.fleetctl_args(args, files.path())?;
                let mapped: Vec<&str> = mapped.iter().map(String::as_str).collect();
                let out = cluster.fleetctl(via, &mapped, stdin).await.ctx(&what())?;
                Ok(self.fleetctl_output(args, out))
            }
        }
    }

    /// The arguments of a fleetctl run as they go to a live cluster: unit names prefixed, unit files (and the
    /// template an instance is made from) rewritten into `dir` under their prefixed names. Flags, and everything
    /// after `--` (a command for `fleetctl ssh`), go unchanged.
    fn fleetctl_args(&self, args: &[&str], dir: &Path) -> Result<Vec<String>, String> {
        let mut out = Vec::with_capacity(args.len());
        let mut rest_verbatim = false;
        for a in args {
            if rest_verbatim || a.starts_with('-') {
                rest_verbatim |= *a == "--";
                out.push(a.to_string());
                continue;
            }
            let path = Path::new(a);
            let base = path.file_name().and_then(|b| b.to_str()).unwrap_or_default();
            if a.contains('/') && names::is_unit_name(base) {
                out.push(self.unit_file_for_cluster(path, base, dir)?);
            } else if names::is_unit_name(a) {
                self.names.register(a);
                out.push(self.names.outward(a));
            } else {
                out.push(a.to_string());
            }
        }
        Ok(out)
    }

    /// Writes unit file `path` (named `base`) rewritten for the cluster into `dir` and returns the new path; an
    /// instance without a file of its own takes its template from `path`'s directory, as fleetctl does. The unit
    /// files beside it count as the spec's own (a spec keeps its units in one directory).
    fn unit_file_for_cluster(&self, path: &Path, base: &str, dir: &Path) -> Result<String, String> {
        let source_dir = path.parent().unwrap_or(Path::new("/"));
        self.names.register(base);
        if let Ok(entries) = std::fs::read_dir(source_dir) {
            for e in entries.flatten() {
                if let Some(n) = e.file_name().to_str() {
                    self.names.register(n);
                }
            }
        }
        let copy = |from: &Path, name: &str| -> Result<(), String> {
            let text = std::fs::read_to_string(from).map_err(|e| format!("unit file {}: {e}", from.display()))?;
            let to = dir.join(self.names.outward(name));
            std::fs::write(&to, self.names.rewrite_unit_file(&text)).map_err(|e| format!("{}: {e}", to.display()))
        };
        if path.is_file() {
            copy(path, base)?;
        } else if let Some(template) = names::template_of(base) {
            let t = source_dir.join(&template);
            if t.is_file() {
                copy(&t, &template)?;
            }
        }
        Ok(dir.join(self.names.outward(base)).to_string_lossy().into_owned())
    }

    /// fleetctl's output as the spec reads it: listings keep only the spec's rows, and names lose the prefix.
    fn fleetctl_output(&self, args: &[&str], out: Output) -> Output {
        let command = args.iter().find(|a| !a.starts_with('-')).copied().unwrap_or_default();
        let stdout = if matches!(command, "list-units" | "list-unit-files") {
            self.names.filter_listing(&out.stdout, !args.contains(&"--no-legend"))
        } else {
            out.stdout
        };
        Output { stdout: self.names.inward(&stdout), stderr: self.names.inward(&out.stderr), status: out.status }
    }

    /// Like [`Self::fleetctl`], but a non-zero exit or `Error` on stderr fails the spec.
    pub async fn fleetctl_ok(&self, slot: usize, args: &[&str]) -> Result<Output, String> {
        let out = self.fleetctl(slot, args).await?;
        self.ensure(out.success() && !out.stderr.contains("Error"), || {
            format!("expected `fleetctl {}` to succeed without `Error` on stderr", args.join(" "))
        })?;
        Ok(out)
    }

    /// Runs fleetctl with the endpoint in `FLEETCTL_ENDPOINT`.
    pub async fn fleetctl_with_env(&self, slot: usize, args: &[&str]) -> Result<Output, String> {
        let out = self.run_fleetctl(slot, EndpointVia::Env, args, None).await?;
        self.record(args, &out);
        Ok(out)
    }

    /// Runs fleetctl with `input` on its stdin (answers to host-key prompts); otherwise like [`Self::fleetctl`].
    pub async fn fleetctl_with_input(&self, slot: usize, input: &str, args: &[&str]) -> Result<Output, String> {
        let out = self.run_fleetctl(slot, EndpointVia::Flag, args, Some(input)).await?;
        self.record(args, &out);
        Ok(out)
    }

    /// Runs this implementation's fleetctl without any endpoint (for `version`, `help`).
    pub async fn fleetctl_bare(&self, args: &[&str]) -> Result<Output, String> {
        let bin = match self.live_cluster() {
            Some(live) => live.fleetctl_path().to_path_buf(),
            None => fleet_harness::config::locate("fleetctl", fleet_harness::config::FLEETCTL_ENV)
                .map_err(|e| e.to_string())?,
        };
        let out = tokio::process::Command::new(&bin)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .ctx(&format!("running {}", bin.display()))?;
        let out = Output {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            status: out.status.code().unwrap_or(-1),
        };
        self.record(args, &out);
        Ok(out)
    }

    /// Polls `observe` with the cluster's wait options (30 s, 250 ms).
    pub async fn wait_for<T, F, Fut>(&self, what: &str, observe: F) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Check<T>>,
    {
        wait::wait_for(self.wait_options(), what, observe).await.map_err(|e| self.fail(e))
    }

    /// Polls `observe` for up to `secs`.
    pub async fn wait_for_secs<T, F, Fut>(&self, secs: u64, what: &str, observe: F) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Check<T>>,
    {
        wait::wait_for(WaitOptions::secs(secs), what, observe).await.map_err(|e| self.fail(e))
    }

    /// Waits until `list-machines` (via machine `slot`) lists exactly `n` machines (on a live cluster: at least `n`,
    /// for a spec asks for the machines it needs, not for the cluster's size); returns their IDs.
    pub async fn wait_for_n_machines(&self, slot: usize, n: usize) -> Result<Vec<String>, String> {
        let live = self.live_cluster().is_some();
        let args = ["list-machines", "--no-legend", "--full", "--fields", "machine"];
        let what = if live { format!("at least {n} machines") } else { format!("{n} machines") };
        self.poll_fleetctl(slot, &args, &what, |out| {
            let ids = wait::parse_machines(out);
            if ids.len() == n || (live && ids.len() > n) { Ok(ids) } else { Err(format!("{} of {n}", ids.len())) }
        })
        .await
        .map_err(|e| e.to_string())
    }

    /// Waits until `list-units` shows exactly `n` unit rows (the spec's own, on a live cluster); unit → rows.
    pub async fn wait_for_n_units(&self, slot: usize, n: usize) -> Result<BTreeMap<String, Vec<UnitState>>, String> {
        let args = ["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"];
        self.poll_fleetctl(slot, &args, &format!("{n} units"), |out| {
            let states = wait::parse_unit_states(out);
            let rows: usize = states.values().map(Vec::len).sum();
            if rows == n { Ok(states) } else { Err(format!("{rows} of {n}")) }
        })
        .await
        .map_err(|e| e.to_string())
    }

    /// Waits for exactly `n` active units, each on one machine; unit → machine ID.
    pub async fn wait_for_n_active_units(&self, slot: usize, n: usize) -> Result<BTreeMap<String, String>, String> {
        let args = ["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"];
        let states = self
            .poll_fleetctl(slot, &args, &format!("{n} active units"), |out| {
                let states = wait::parse_unit_states(out);
                let active = wait::filter_active(&states).len();
                if active == n { Ok(states) } else { Err(format!("{active} of {n} active")) }
            })
            .await
            .map_err(|e| e.to_string())?;
        wait::active_to_single(&wait::filter_active(&states))
            .map_err(|e| format!("a fleet unit is active on more than one machine: {e}"))
    }

    /// `fleetctl start hello@1.service … hello@<n>.service` (the fixture template's instances) via machine 1, then
    /// waits for `n` active units; returns unit → machine.
    pub async fn start_hello_instances(&self, n: usize) -> Result<BTreeMap<String, String>, String> {
        let paths: Vec<String> = (1..=n).map(|i| crate::fixtures::path(&format!("hello@{i}.service"))).collect();
        let mut args = vec!["start"];
        args.extend(paths.iter().map(String::as_str));
        self.fleetctl_ok(1, &args).await?;
        self.wait_for_n_active_units(1, n).await
    }

    /// Waits until `list-unit-files` shows exactly `n` units; unit → rows.
    pub async fn wait_for_n_unit_files(
        &self,
        slot: usize,
        n: usize,
    ) -> Result<BTreeMap<String, Vec<UnitFileState>>, String> {
        let args = ["list-unit-files", "--no-legend", "--full", "--fields", "unit,dstate,state"];
        self.poll_fleetctl(slot, &args, &format!("{n} unit files"), |out| {
            let files = wait::parse_unit_file_states(out);
            if files.len() == n { Ok(files) } else { Err(format!("{} of {n}", files.len())) }
        })
        .await
        .map_err(|e| e.to_string())
    }

    /// Polls `fleetctl <args>` (via machine `slot`, not recorded) until it succeeds and `accept` takes its stdout;
    /// the timeout names the last output (the harness's `Cluster::wait_fleetctl`, through this context's names).
    async fn poll_fleetctl<T>(
        &self,
        slot: usize,
        args: &[&str],
        what: &str,
        accept: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, wait::WaitError> {
        let accept = &accept;
        wait::wait_for(self.wait_options(), what, || async move {
            match self.run_fleetctl(slot, EndpointVia::Flag, args, None).await {
                Ok(out) if out.success() => match accept(&out.stdout) {
                    Ok(v) => Check::Ready(v),
                    Err(why) => Check::NotYet(format!("{why}; output: {}", wait::summarize(&out.stdout))),
                },
                Ok(out) => Check::NotYet(format!("fleetctl {}: {}", args.join(" "), out.describe())),
                Err(e) => Check::NotYet(e),
            }
        })
        .await
    }

    /// One observation of `list-units` (unit → rows).
    pub async fn list_units(&self, slot: usize) -> Result<BTreeMap<String, Vec<UnitState>>, String> {
        let out =
            self.fleetctl(slot, &["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"]).await?;
        self.ensure(out.success(), || "list-units failed".into())?;
        Ok(wait::parse_unit_states(&out.stdout))
    }

    /// One observation of `list-unit-files` (unit → rows).
    pub async fn list_unit_files(&self, slot: usize) -> Result<BTreeMap<String, Vec<UnitFileState>>, String> {
        let out =
            self.fleetctl(slot, &["list-unit-files", "--no-legend", "--full", "--fields", "unit,dstate,state"]).await?;
        self.ensure(out.success(), || "list-unit-files failed".into())?;
        Ok(wait::parse_unit_file_states(&out.stdout))
    }

    /// Waits until `fleetctl <args>` (via machine `slot`) succeeds and `accept` takes its stdout: the harness's
    /// [`fleet_harness::Cluster::wait_fleetctl`], whose timeout shows the last output.
    pub async fn wait_fleetctl<T>(
        &self,
        slot: usize,
        args: &[&str],
        what: &str,
        accept: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, String> {
        self.poll_fleetctl(slot, args, what, accept).await.map_err(|e| self.fail(e))
    }

    /// One observation of `fleetctl <command> --no-legend --full --fields <fields>` via machine `slot`, by field.
    pub async fn table(&self, slot: usize, command: &str, fields: &[&str]) -> Result<Vec<Row>, String> {
        let joined = fields.join(",");
        let out = self.fleetctl_ok(slot, &wait::table_args(command, &joined)).await?;
        Ok(wait::parse_table(&out.stdout, fields))
    }

    /// Waits until `accept` takes the table of `fleetctl <command> --no-legend --full --fields <fields>`.
    pub async fn wait_table<T>(
        &self,
        slot: usize,
        command: &str,
        fields: &[&str],
        what: &str,
        accept: impl Fn(&[Row]) -> Result<T, String>,
    ) -> Result<T, String> {
        let joined = fields.join(",");
        self.wait_fleetctl(slot, &wait::table_args(command, &joined), what, |out| {
            accept(&wait::parse_table(out, fields))
        })
        .await
    }

    /// The MainPID of `unit` in machine `slot`, which must be active with a main process.
    pub async fn main_pid(&self, slot: usize, unit: &str) -> Result<String, String> {
        let p = self.show(slot, unit, &["ActiveState", "MainPID"]).await?;
        let (state, pid) =
            (p.get("ActiveState").cloned().unwrap_or_default(), p.get("MainPID").cloned().unwrap_or_default());
        self.ensure(state == "active" && !pid.is_empty() && pid != "0", || {
            format!("{unit} in m{slot}: expected active with a MainPID, observed ActiveState={state} MainPID={pid}")
        })?;
        Ok(pid)
    }

    /// Holds for `secs`, requiring at every look (every 500 ms) that `check` accepts an observation of
    /// `list-units` via machine `slot` (unit → rows); returns the last observation. Proves a state is stable, not a
    /// sample taken before something else changed.
    pub async fn holds(
        &self,
        slot: usize,
        secs: u64,
        what: &str,
        check: impl Fn(&BTreeMap<String, Vec<UnitState>>) -> bool,
    ) -> Result<BTreeMap<String, Vec<UnitState>>, String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let units = self.list_units(slot).await?;
            self.ensure(check(&units), || {
                let seen: Vec<String> = units
                    .values()
                    .flatten()
                    .map(|s| format!("{} {} on {}", s.name, s.active_state, s.machine.get(..8).unwrap_or(&s.machine)))
                    .collect();
                format!("expected {what} to hold for {secs} s; observed {}", seen.join(", "))
            })?;
            if tokio::time::Instant::now() >= deadline {
                return Ok(units);
            }
            self.hold(Duration::from_millis(500)).await;
        }
    }

    /// `systemctl show <unit> -p ...` in machine `slot`.
    pub async fn show(&self, slot: usize, unit: &str, props: &[&str]) -> Result<BTreeMap<String, String>, String> {
        if self.live_cluster().is_none() {
            return self.machine(slot)?.systemctl_show(unit, props).await.map_err(|e| e.to_string());
        }
        let mut cmd = vec!["systemctl", "show", unit];
        for p in props {
            cmd.extend(["-p", p]);
        }
        let out = self.exec_ok(slot, &cmd).await?;
        Ok(out.stdout.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    /// Waits until `systemctl show <unit>` in machine `slot` has `prop=value`; the timeout shows the last value.
    pub async fn wait_systemd(&self, slot: usize, unit: &str, prop: &str, value: &str) -> Result<(), String> {
        let what = format!("{unit} in m{slot} to have {prop}={value}");
        self.wait_for(&what, || async move {
            match self.show(slot, unit, &[prop]).await {
                Ok(p) if p.get(prop).map(String::as_str) == Some(value) => Check::Ready(()),
                Ok(p) => Check::NotYet(format!("{prop}={}", p.get(prop).cloned().unwrap_or_default())),
                Err(e) => Check::NotYet(e),
            }
        })
        .await
    }

    /// Runs a command in machine `slot` (exit status not checked): `docker exec` on a harness cluster, SSH on a
    /// live one (the spec's unit names in it mapped both ways).
    pub async fn exec(&self, slot: usize, cmd: &[&str]) -> Result<Output, String> {
        let Some(live) = self.live_cluster() else {
            return self.machine(slot)?.exec(cmd).await.map_err(|e| e.to_string());
        };
        if !live.has_ssh() {
            return Err(format!(
                "this spec looks inside machine {slot} but does not declare Need::Inside (or run with \
                 --ssh-user/--ssh-key): {}",
                cmd.join(" ")
            ));
        }
        let mapped = self.command_for_cluster(cmd)?;
        let out = live.exec(slot, &mapped).await?;
        Ok(Output {
            stdout: self.names.inward(&out.stdout),
            stderr: self.names.inward(&out.stderr),
            status: out.status,
        })
    }

    /// A command inside a machine as it goes to a live cluster: the spec's unit names prefixed. A unit of the spec
    /// named inside a longer word (a `sh -c` script) cannot be mapped safely — the script would act on a unit of that
    /// name that is not the spec's —, so such a command is refused.
    fn command_for_cluster(&self, cmd: &[&str]) -> Result<Vec<String>, String> {
        let separator =
            |c: char| c.is_whitespace() || matches!(c, '\'' | '"' | ';' | '&' | '|' | '>' | '<' | '/' | '=');
        let mut mapped = Vec::with_capacity(cmd.len());
        for w in cmd {
            let out = self.names.command_word(w);
            if out == *w
                && let Some(unit) = w.split(separator).find(|t| names::is_unit_name(t) && self.names.is_own(t))
            {
                return Err(format!(
                    "a command inside the machines names the spec's unit {unit} within {w:?}, which cannot be mapped \
                     to the unit's name on a live cluster: declare Need::MachineFiles or Need::Harness for this spec"
                ));
            }
            mapped.push(out);
        }
        Ok(mapped)
    }

    /// Runs a command in machine `slot`; a non-zero exit fails.
    pub async fn exec_ok(&self, slot: usize, cmd: &[&str]) -> Result<Output, String> {
        if self.live_cluster().is_none() {
            return self.machine(slot)?.exec_ok(cmd).await.map_err(|e| e.to_string());
        }
        let out = self.exec(slot, cmd).await?;
        if out.success() {
            Ok(out)
        } else {
            Err(format!("machine {slot}: `{}` failed: {}", cmd.join(" "), out.describe()))
        }
    }

    /// The lines a command in machine `slot` prints that name the spec's own units (all of them on a harness
    /// cluster), for listings of what a machine holds (`ls /run/fleet/units`), which on a live cluster also hold
    /// other users' units.
    pub async fn exec_own_lines(&self, slot: usize, cmd: &[&str]) -> Result<Vec<String>, String> {
        let Some(live) = self.live_cluster() else {
            return Ok(self.exec_ok(slot, cmd).await?.stdout.lines().map(str::to_string).collect());
        };
        let mapped = self.command_for_cluster(cmd)?;
        let out = live.exec(slot, &mapped).await?;
        if !out.success() {
            return Err(format!("machine {slot}: `{}` failed: {}", cmd.join(" "), out.describe()));
        }
        let own = self.names.filter_listing(&out.stdout, false);
        Ok(self.names.inward(&own).lines().map(str::to_string).collect())
    }

    /// PID 1's journal of this boot in machine `slot` (`journalctl _PID=1`).
    pub async fn journal_pid1(&self, slot: usize) -> Result<String, String> {
        Ok(self.exec_ok(slot, &["journalctl", "--no-pager", "-o", "cat", "_PID=1"]).await?.stdout)
    }

    /// fleet.service's journal in machine `slot` (all fleetd processes of this boot).
    pub async fn journal_fleet(&self, slot: usize) -> Result<String, String> {
        Ok(self.exec_ok(slot, &["journalctl", "--no-pager", "-o", "cat", "-u", "fleet.service"]).await?.stdout)
    }

    /// Waits until fleet.service's journal in `slot` contains `needle`.
    pub async fn wait_journal(&self, slot: usize, needle: &str, secs: u64) -> Result<(), String> {
        let what = format!("fleet's journal in m{slot} to contain {needle:?}");
        self.wait_for_secs(secs, &what, || async move {
            match self.journal_fleet(slot).await {
                Ok(j) if j.contains(needle) => Check::Ready(()),
                Ok(j) => Check::NotYet(format!("last lines: {}", tail(&j, 5))),
                Err(e) => Check::NotYet(e),
            }
        })
        .await
    }

    /// A raw HTTP request to machine `slot`'s API endpoint (in a TLS cluster: HTTPS with the admin certificate; on
    /// a live cluster: its endpoint, the spec's unit names mapped both ways).
    pub async fn http(&self, slot: usize, method: &str, path: &str, body: Option<&str>) -> Result<Response, String> {
        let ct = body.map(|_| "application/json");
        self.http_with_type(slot, method, path, body, ct).await
    }

    /// The TLS client configuration of a TLS cluster presenting `client` (`None`: no client certificate).
    pub fn tls_client(
        &self,
        client: Option<&fleet_harness::pki::CertFiles>,
    ) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
        let pki = self.cluster().tls().ok_or("this cluster does not run TLS")?;
        fleet_harness::pki::client_config(pki.ca.cert(), client).map(std::sync::Arc::new)
    }

    /// A raw request to machine `slot`'s API with an explicit TLS client configuration (or plain HTTP: `None`).
    pub async fn https(
        &self,
        slot: usize,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<Response, String> {
        let ct = body.map(|_| "application/json");
        http::request_with(&self.machine(slot)?.endpoint(), tls, method, path, body, ct).await
    }

    /// A raw HTTP request with an explicit Content-Type (or none).
    pub async fn http_with_type(
        &self,
        slot: usize,
        method: &str,
        path: &str,
        body: Option<&str>,
        content_type: Option<&str>,
    ) -> Result<Response, String> {
        if let Some(live) = self.live_cluster() {
            let path = self.names.request_path(path);
            let body = body.map(|b| self.names.request_body(b));
            let mut r =
                live.http(method, &path, body.as_deref(), content_type).await.map_err(|e| self.names.inward(&e))?;
            r.body = self.names.response_body(&r.body);
            return Ok(r);
        }
        let tls = match self.cluster().tls() {
            Some(pki) => Some(self.tls_client(Some(&pki.admin))?),
            None => None,
        };
        http::request_with(&self.machine(slot)?.endpoint(), tls, method, path, body, content_type).await
    }

    /// Waits until the API of `slot` answers `GET /fleet/v1/machines` with 200.
    pub async fn wait_api(&self, slot: usize) -> Result<(), String> {
        let what = format!("the API of m{slot} to answer 200");
        self.wait_for(&what, || async move {
            match self.http(slot, "GET", "/fleet/v1/machines", None).await {
                Ok(r) if r.status == 200 => Check::Ready(()),
                Ok(r) => Check::NotYet(r.describe()),
                Err(e) => Check::NotYet(e),
            }
        })
        .await
    }

    /// Sleeps (only where a spec must let time pass to prove that something does *not* happen).
    pub async fn hold(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

/// The last `n` lines of `text`, joined by ` | `.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

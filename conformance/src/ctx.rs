//! What a spec works with: its cluster, fleetctl runs that remember their output (so a failure can show the last
//! one), waits that explain their timeouts, and views of systemd inside the machines.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use fleet_harness::wait::{self, Check, Row, UnitFileState, UnitState, WaitOptions};
use fleet_harness::{Cluster, ClusterBuilder, Machine, Output};

use crate::check::Context;
use crate::http::{self, Response};

/// A spec's cluster (absent for specs of fleetctl alone) and its observations.
pub struct Ctx {
    cluster: Option<Cluster>,
    last: Mutex<Option<String>>,
}

impl Ctx {
    /// Starts `builder`'s cluster.
    pub async fn start(builder: ClusterBuilder) -> Result<Ctx, String> {
        let cluster = builder.start().await.ctx("starting the cluster")?;
        Ok(Ctx { cluster: Some(cluster), last: Mutex::new(None) })
    }

    /// A context without a cluster.
    pub fn without_cluster() -> Ctx {
        Ctx { cluster: None, last: Mutex::new(None) }
    }

    pub fn cluster(&self) -> &Cluster {
        self.cluster.as_ref().expect("this spec declared no machines")
    }

    pub fn cluster_mut(&mut self) -> &mut Cluster {
        self.cluster.as_mut().expect("this spec declared no machines")
    }

    pub fn machine(&self, slot: usize) -> Result<&Machine, String> {
        self.cluster().machine(slot).map_err(|e| e.to_string())
    }

    /// The machine ID of `slot`.
    pub fn id(&self, slot: usize) -> Result<String, String> {
        Ok(self.machine(slot)?.id().to_string())
    }

    /// The slot of the machine with ID `id`.
    pub fn slot_of(&self, id: &str) -> Option<usize> {
        self.cluster().machines().iter().find(|m| m.id() == id).map(Machine::slot)
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
        let out = self.cluster().fleetctl(slot, args).await.ctx(&format!("fleetctl {}", args.join(" ")))?;
        self.record(args, &out);
        Ok(out)
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
        let out = self.cluster().fleetctl_with_env(slot, args).await.ctx("fleetctl (endpoint from env)")?;
        self.record(args, &out);
        Ok(out)
    }

    /// Runs fleetctl with `input` on its stdin (answers to host-key prompts); otherwise like [`Self::fleetctl`].
    pub async fn fleetctl_with_input(&self, slot: usize, input: &str, args: &[&str]) -> Result<Output, String> {
        let out = self
            .cluster()
            .fleetctl_with_input(slot, input, args)
            .await
            .ctx(&format!("fleetctl {} (stdin {input:?})", args.join(" ")))?;
        self.record(args, &out);
        Ok(out)
    }

    /// Runs this implementation's fleetctl without any endpoint (for `version`, `help`).
    pub async fn fleetctl_bare(&self, args: &[&str]) -> Result<Output, String> {
        let bin = fleet_harness::config::locate("fleetctl", fleet_harness::config::FLEETCTL_ENV)
            .map_err(|e| e.to_string())?;
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
        wait::wait_for(self.cluster().wait_options(), what, observe).await.map_err(|e| self.fail(e))
    }

    /// Polls `observe` for up to `secs`.
    pub async fn wait_for_secs<T, F, Fut>(&self, secs: u64, what: &str, observe: F) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Check<T>>,
    {
        wait::wait_for(WaitOptions::secs(secs), what, observe).await.map_err(|e| self.fail(e))
    }

    pub async fn wait_for_n_machines(&self, slot: usize, n: usize) -> Result<Vec<String>, String> {
        self.cluster().wait_for_n_machines(slot, n).await.map_err(|e| e.to_string())
    }

    pub async fn wait_for_n_units(&self, slot: usize, n: usize) -> Result<BTreeMap<String, Vec<UnitState>>, String> {
        self.cluster().wait_for_n_units(slot, n).await.map_err(|e| e.to_string())
    }

    /// Waits for exactly `n` active units, each on one machine; unit → machine ID.
    pub async fn wait_for_n_active_units(&self, slot: usize, n: usize) -> Result<BTreeMap<String, String>, String> {
        self.cluster().wait_for_n_active_units(slot, n).await.map_err(|e| e.to_string())
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

    pub async fn wait_for_n_unit_files(
        &self,
        slot: usize,
        n: usize,
    ) -> Result<BTreeMap<String, Vec<UnitFileState>>, String> {
        self.cluster().wait_for_n_unit_files(slot, n).await.map_err(|e| e.to_string())
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
        self.cluster().wait_fleetctl(slot, args, what, accept).await.map_err(|e| self.fail(e))
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
        self.machine(slot)?.systemctl_show(unit, props).await.map_err(|e| e.to_string())
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

    /// Runs a command in machine `slot` (exit status not checked).
    pub async fn exec(&self, slot: usize, cmd: &[&str]) -> Result<Output, String> {
        self.machine(slot)?.exec(cmd).await.map_err(|e| e.to_string())
    }

    /// Runs a command in machine `slot`; a non-zero exit fails.
    pub async fn exec_ok(&self, slot: usize, cmd: &[&str]) -> Result<Output, String> {
        self.machine(slot)?.exec_ok(cmd).await.map_err(|e| e.to_string())
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

    /// A raw HTTP request to machine `slot`'s API endpoint (in a TLS cluster: HTTPS with the admin certificate).
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

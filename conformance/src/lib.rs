//! fleet-conformance: black-box specs any fleet implementation can be run against.
//!
//! A spec sees only what a user sees — fleetctl, the HTTP API and the systemd state inside machines — through its
//! [`Ctx`]: a [`fleet_harness::Cluster`] of its own (the harness profile), or a live cluster shared with others (the
//! external profile, `fleet-conformance --against`, for the specs whose [`Need`]s such a cluster meets); it never
//! reads the registry. Choose the implementation under test with `FLEETD_BIN` / `FLEETCTL_BIN` (default: this
//! workspace's build) and declare what it supports with `FLEET_CAPABILITIES` (see [`capabilities`]).

pub mod capabilities;
pub mod check;
pub mod ctx;
pub mod fixtures;
pub mod http;
pub mod live;
pub mod names;
pub mod run;
pub mod specs;
pub mod summary;

use std::future::Future;
use std::pin::Pin;

pub use capabilities::{Capabilities, Capability};
pub use ctx::Ctx;

/// What a spec returns: `Err` with a message saying what was expected and what was observed.
pub type Outcome = Result<(), String>;

/// The boxed future a spec's run function returns.
pub type SpecFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// Defines [`Area`] and its table from rows `Variant = "name"` (each with its doc): adding an area is adding a row.
macro_rules! areas {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, )+) => {
        /// The behaviour a spec covers (also the prefix of its trial name: `<area>::<name>`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Area {
            $( $(#[$doc])* $variant, )+
        }

        impl Area {
            /// Every area, in table order.
            pub const ALL: &'static [Area] = &[$( Area::$variant, )+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $( Area::$variant => $name, )+
                }
            }
        }
    };
}

areas! {
    /// submit / load / start / stop / unload / destroy / restart / cat, agreement with systemd.
    UnitActions = "unit_actions",
    /// The engine's placement: least-loaded, Conflicts, MachineOf, MachineID, Replaces, global units.
    Scheduling = "scheduling",
    /// Machine presence and the machines API (list, metadata PATCH).
    Machines = "machines",
    /// MachineMetadata and `%i` specifiers.
    Metadata = "metadata",
    /// Loss of etcd: units keep running, the cluster converges afterwards.
    Connectivity = "connectivity",
    /// The HTTP API v1 (raw requests: status codes, content types, error bodies).
    ClientApi = "client_api",
    /// One fleetd's life: shutdown, SIGHUP reload, duplicate machine IDs, monitor restarts.
    Node = "node",
    /// Machines joining, leaving, rebooting, dying; engine leadership changes.
    Cluster = "cluster",
    /// The fleetctl command line itself: version, help, environment, listing order.
    Fleetctl = "fleetctl",
    /// `--replace` and `--keep-machine`: serialization of stop and start hooks on one machine and across machines,
    /// template moves, global units, interrupted replacements.
    Replace = "replace",
    /// Global units: every eligible machine, MachineMetadata, machines joining and leaving, conflicts, actions.
    GlobalUnits = "global_units",
    /// The commands that reach machines over SSH: `ssh`, `status`, `journal`, `--tunnel`, known hosts.
    Ssh = "ssh",
    /// Changing a running service without an outage: replace without restart, rolling replace and restart.
    Rollout = "rollout",
    /// A secure cluster refuses what it must: plain HTTP, missing/foreign/expired client certificates, writes by
    /// the read role, crafted names and bodies (issue 15).
    Security = "security",
    /// Rollouts a database cluster can trust (issue 34): health checks gating every step, a budget counting every
    /// machine not serving, undo within it, canaries and promotion, order, progress deadlines, policy in the unit.
    SafeRollout = "safe_rollout",
}

impl Area {
    pub fn parse(s: &str) -> Option<Area> {
        Area::ALL.iter().copied().find(|a| a.as_str() == s)
    }
}

impl std::fmt::Display for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One black-box spec.
pub struct Spec {
    /// Named by behaviour (regressions by upstream issue: `r1509_...`).
    pub name: &'static str,
    pub area: Area,
    /// Machines the spec's cluster starts with (0: no cluster, e.g. `fleetctl version`).
    pub machines: usize,
    /// Extra metadata per machine slot (`k=v,...`), after the harness's `hostname=m<slot>`.
    pub metadata: &'static [(usize, &'static str)],
    /// Capabilities the implementation under test must declare; otherwise the spec is skipped (ignored).
    pub requires: &'static [Capability],
    /// What the spec needs of its cluster beyond `machines` (decides whether it runs against a live cluster).
    pub needs: &'static [Need],
    /// The original functional test(s) this spec rewrites, if any (for the README's table).
    pub origin: &'static str,
    pub run: fn(Ctx) -> SpecFuture,
}

impl Spec {
    /// The trial name: `<area>::<name>`.
    pub fn trial_name(&self) -> String {
        format!("{}::{}", self.area, self.name)
    }

    /// `base` when the spec needs no capability, else the capabilities it needs joined by `+`.
    pub fn profile(&self) -> String {
        if self.requires.is_empty() {
            capabilities::BASE.to_string()
        } else {
            self.requires.iter().map(|c| c.as_str()).collect::<Vec<_>>().join("+")
        }
    }

    /// The capabilities this spec needs that `caps` lacks.
    pub fn missing(&self, caps: &Capabilities) -> Vec<Capability> {
        self.requires.iter().copied().filter(|c| !caps.has(*c)).collect()
    }
}

/// What a spec needs of its cluster beyond [`Spec::machines`] machines running fleet. A harness cluster (one per
/// spec) gives all of it; a live cluster (`fleet-conformance --against`) gives only some, and a spec whose needs it
/// cannot meet is skipped with the reason ([`Spec::external_verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Need {
    /// Control of the cluster's containers: kills or partitions machines, stops or restarts fleetd or etcd, adds,
    /// replaces or removes machines, writes their system files, uses the harness's TLS certificates or ssh-agent, or
    /// starts clusters of its own.
    Harness,
    /// Its expectations hold for exactly [`Spec::machines`] machines (a global unit on all of them, N conflicting
    /// units over N machines), not for more.
    ExactMachines,
    /// No units but its own for the whole run: it compares whole listings or the cluster-wide audit trail, or its
    /// placement depends on every unit's load. A live cluster cannot promise that.
    EmptyCluster,
    /// It changes state every unit of the cluster shares: machine metadata through the API, cordons, drains.
    ChangesMachines,
    /// The harness's machine metadata `hostname=m<slot>` (and [`Spec::metadata`] per slot).
    SlotMetadata,
    /// It looks inside the machines: `systemctl` there, files under `/run/fleet` (over SSH on a live cluster).
    Inside,
    /// It writes files inside the machines at fixed paths (hook logs, samplers, markers under `/run`, systemd
    /// drop-ins under `/etc`), which another user's machines should not get and specs running alongside would share.
    MachineFiles,
}

impl Need {
    /// The name `fleet-conformance --list` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Need::Harness => "harness",
            Need::ExactMachines => "exact-machines",
            Need::EmptyCluster => "empty-cluster",
            Need::ChangesMachines => "changes-machines",
            Need::SlotMetadata => "slot-metadata",
            Need::Inside => "inside",
            Need::MachineFiles => "machine-files",
        }
    }
}

/// What the live cluster of an external run offers ([`Spec::external_verdict`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveShape {
    /// The metadata of each machine, in slot order (slot 1 first).
    pub machines: Vec<std::collections::BTreeMap<String, String>>,
    /// Whether commands can be run inside the machines (`--ssh-user` and `--ssh-key` given).
    pub ssh: bool,
}

/// Why a spec that needs machines to look into is skipped without SSH.
pub const NEEDS_SSH: &str = "needs --ssh-user/--ssh-key to observe systemd in the machines";

impl Spec {
    /// Whether the spec can run against a live cluster of `shape`: `Err` with the reason it is skipped.
    pub fn external_verdict(&self, shape: &LiveShape) -> Result<(), String> {
        let n = self.machines;
        let m = shape.machines.len();
        if self.needs.contains(&Need::Harness) {
            return Err("drives the harness (kills, partitions, fleetd or etcd restarts, machines added or replaced, \
                        or clusters of its own): harness profile only"
                .into());
        }
        if self.needs.contains(&Need::ChangesMachines) {
            return Err("changes machine metadata, cordons or drains, which every unit of a live cluster shares".into());
        }
        if self.needs.contains(&Need::EmptyCluster) {
            return Err("needs a cluster with no other units for the whole run (it compares whole listings or the \
                        audit trail, or placement by load)"
                .into());
        }
        if self.needs.contains(&Need::MachineFiles) {
            return Err("writes files into the machines (hook logs and samplers under /run, systemd drop-ins), which \
                        a live cluster's machines should not get and specs running alongside would share"
                .into());
        }
        if n == 0 {
            return Ok(());
        }
        if self.needs.contains(&Need::ExactMachines) && m != n {
            return Err(format!("needs exactly {}; the cluster has {m}", machines(n)));
        }
        if m < n {
            return Err(format!("needs at least {}; the cluster has {m}", machines(n)));
        }
        if self.needs.contains(&Need::SlotMetadata) || !self.metadata.is_empty() {
            for slot in 1..=n {
                let md = &shape.machines[slot - 1];
                let mut want = vec![("hostname".to_string(), format!("m{slot}"))];
                for (_, extra) in self.metadata.iter().filter(|(s, _)| *s == slot) {
                    want.extend(
                        extra.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())),
                    );
                }
                if let Some((k, v)) = want.iter().find(|(k, v)| md.get(k) != Some(v)) {
                    return Err(format!(
                        "needs the harness's machine metadata (machine {slot} with {k}={v}); the cluster's machine \
                         {slot} has {}",
                        render_metadata(md)
                    ));
                }
            }
        }
        if self.needs.contains(&Need::Inside) && !shape.ssh {
            return Err(NEEDS_SSH.into());
        }
        Ok(())
    }
}

/// `1 machine`, `3 machines`.
fn machines(n: usize) -> String {
    if n == 1 { "1 machine".into() } else { format!("{n} machines") }
}

/// `k=v,k=v` (or `no metadata`).
fn render_metadata(md: &std::collections::BTreeMap<String, String>) -> String {
    if md.is_empty() {
        return "no metadata".into();
    }
    md.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// Every spec, in catalogue order. Building this list must stay cheap: nextest lists it once per trial.
pub fn all() -> Vec<Spec> {
    specs::catalogue()
}

/// The etcd members of the cluster of a spec that needs [`Capability::EtcdMembers`] (one otherwise).
pub const ETCD_MEMBERS: usize = 3;

/// The longest a spec may run (nextest's `ci` profile ends a test after 240 s).
pub const SPEC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(200);

/// Set to `1` to run every spec on a TLS cluster ([`Transport::Tls`]).
pub const TLS_ENV: &str = "FLEET_CONFORMANCE_TLS";

/// The areas CI also runs on a TLS cluster (trials `tls::<area>::<spec>`), so that the secure set-up is judged by
/// ordinary work and not only by the `security` area.
pub const TLS_AREAS: &[Area] = &[Area::UnitActions, Area::Replace, Area::GlobalUnits];

/// How a spec's cluster is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Plain HTTP and etcd, unless the spec needs [`Capability::Tls`] or `FLEET_CONFORMANCE_TLS=1`.
    Default,
    /// etcd and the API over TLS with client certificates; fleetctl and raw requests use the admin certificate.
    Tls,
}

impl Transport {
    /// Whether `spec`'s cluster runs TLS.
    pub fn tls_for(self, spec: &Spec) -> bool {
        self == Transport::Tls
            || spec.requires.contains(&Capability::Tls)
            || std::env::var(TLS_ENV).is_ok_and(|v| v == "1" || v == "true")
    }
}

/// Runs one spec: starts the cluster it declares (agent_ttl 3 s like the original's suite), runs it within
/// [`SPEC_TIMEOUT`], and removes the cluster.
pub async fn execute(spec: &Spec) -> Outcome {
    execute_over(spec, Transport::Default).await
}

/// [`execute`] with the cluster secured as `transport` says.
pub async fn execute_over(spec: &Spec, transport: Transport) -> Outcome {
    let ctx = if spec.machines == 0 {
        Ctx::without_cluster()
    } else {
        let mut b =
            fleet_harness::Cluster::builder().machines(spec.machines).agent_ttl("3s").tls(transport.tls_for(spec));
        if spec.requires.contains(&Capability::EtcdMembers) {
            b = b.etcd_members(ETCD_MEMBERS);
        }
        for (slot, md) in spec.metadata {
            b = b.metadata(*slot, md);
        }
        let ctx = Ctx::start(b).await?;
        // Like the original's suite, a spec starts on a cluster whose machines have all registered.
        ctx.wait_for_n_machines(1, spec.machines).await.map_err(|e| format!("cluster not ready: {e}"))?;
        ctx
    };
    match tokio::time::timeout(SPEC_TIMEOUT, (spec.run)(ctx)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("the spec did not finish within {SPEC_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: Ctx) -> SpecFuture {
        Box::pin(async { Ok(()) })
    }

    fn spec(machines: usize, metadata: &'static [(usize, &'static str)], needs: &'static [Need]) -> Spec {
        Spec { name: "s", area: Area::Scheduling, machines, metadata, requires: &[], needs, origin: "", run: never }
    }

    fn shape(hostnames: &[&str], ssh: bool) -> LiveShape {
        let md = |h: &&str| [("hostname".to_string(), h.to_string())].into();
        LiveShape { machines: hostnames.iter().map(md).collect(), ssh }
    }

    #[test]
    fn a_live_cluster_runs_what_it_can_and_says_why_not_otherwise() {
        let three = shape(&["m1", "m2", "m3"], true);
        assert_eq!(spec(2, &[], &[]).external_verdict(&three), Ok(()), "more machines than asked for are fine");
        assert_eq!(
            spec(4, &[], &[]).external_verdict(&three),
            Err("needs at least 4 machines; the cluster has 3".into())
        );
        assert_eq!(
            spec(2, &[], &[Need::ExactMachines]).external_verdict(&three),
            Err("needs exactly 2 machines; the cluster has 3".into())
        );
        assert_eq!(spec(3, &[], &[Need::ExactMachines, Need::Inside]).external_verdict(&three), Ok(()));
        assert_eq!(
            spec(1, &[], &[Need::Inside]).external_verdict(&shape(&["m1"], false)),
            Err(NEEDS_SSH.into()),
            "looking inside needs SSH"
        );
        let role = spec(2, &[(2, "role=b")], &[]);
        let why = role.external_verdict(&three).unwrap_err();
        assert!(why.contains("machine 2 with role=b") && why.contains("hostname=m2"), "{why}");
        let unnamed = shape(&["a", "b", "c"], true);
        let why = spec(3, &[], &[Need::SlotMetadata]).external_verdict(&unnamed).unwrap_err();
        assert!(why.contains("machine 1 with hostname=m1") && why.contains("has hostname=a"), "{why}");
        for (need, start) in [
            (Need::Harness, "drives the harness"),
            (Need::ChangesMachines, "changes machine metadata"),
            (Need::EmptyCluster, "needs a cluster with no other units"),
            (Need::MachineFiles, "writes files into the machines"),
        ] {
            let needs: &'static [Need] = Box::leak(Box::new([need]));
            let why = spec(1, &[], needs).external_verdict(&three).unwrap_err();
            assert!(why.starts_with(start), "{need:?}: {why}");
        }
        assert_eq!(spec(0, &[], &[]).external_verdict(&shape(&[], false)), Ok(()), "fleetctl alone needs no machine");
    }
}

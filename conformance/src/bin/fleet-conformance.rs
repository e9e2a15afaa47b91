//! `fleet-conformance`: the conformance suite as one command — against a live cluster (`--against ENDPOINT`), or on
//! harness clusters of Docker containers started per spec (the default). See `conformance/README.md`, "Certifying an
//! implementation or a deployment".

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use clap::Parser;
use fleet_conformance::live::{LiveCluster, LiveOptions, SshAccess, TlsFiles};
use fleet_conformance::run::{self, Decision, Mode, Selection};
use fleet_conformance::{Capabilities, all, fixtures};

const ABOUT: &str = "The fleet conformance suite: black-box specs judged through fleetctl, the HTTP API v1 and \
                     systemd in the machines";

const LONG_ABOUT: &str = "The fleet conformance suite: black-box specs judged through fleetctl, the HTTP API v1 and \
systemd in the machines.

With --against ENDPOINT it certifies a live cluster (an implementation as deployed, or a staging cluster): every spec \
that needs no control of the cluster's containers runs against it, at most --jobs at once. Every unit it creates is \
named <prefix><NNN>-<name> (references between its units follow), and it destroys them after each spec, at the end, \
and on Ctrl-C or SIGTERM; it never touches another unit. Specs that need kills, partitions, fleetd or etcd restarts, \
an empty cluster, another number of machines or the harness's machine metadata are skipped with the reason; those \
that look inside the machines (systemctl, /run/fleet) need --ssh-user and --ssh-key, and the OpenSSH client.

Without --against it runs every spec on harness clusters: etcd and machines booting systemd in Docker, started per \
spec and removed afterwards. That needs a Docker engine and the machine image (ci/setup builds both on Debian 12, as \
root), --fleetd and --fleetctl (default: this workspace's build, FLEETD_BIN, FLEETCTL_BIN).

Exit status: 0 when no spec failed (and, with --against, no unit of the run was left behind); 1 when one did; 2 on \
usage or connection errors; 130 when ended by SIGINT or SIGTERM.";

#[derive(Debug, Parser)]
#[command(name = "fleet-conformance", version, about = ABOUT, long_about = LONG_ABOUT)]
struct Args {
    /// Judge the live cluster behind this API endpoint: http://HOST:PORT, https://HOST:PORT, unix:///PATH or a socket
    /// path (as fleetctl's --endpoint)
    #[arg(long, value_name = "ENDPOINT")]
    against: Option<String>,
    /// The fleetctl that drives the cluster (with --against: default `fleetctl` on PATH; otherwise: FLEETCTL_BIN or
    /// this workspace's build)
    #[arg(long, value_name = "PATH")]
    fleetctl: Option<PathBuf>,
    /// The fleetd the harness machines run (without --against; default: FLEETD_BIN or this workspace's build)
    #[arg(long, value_name = "PATH", conflicts_with = "against")]
    fleetd: Option<PathBuf>,
    /// CA certificate of an https:// endpoint (fleetctl's --ca-file)
    #[arg(long, value_name = "PATH", requires = "against")]
    ca: Option<PathBuf>,
    /// Client certificate for an API that requires one (fleetctl's --cert-file; with --key)
    #[arg(long, value_name = "PATH", requires_all = ["against", "key", "ca"])]
    cert: Option<PathBuf>,
    /// Private key of --cert (fleetctl's --key-file)
    #[arg(long, value_name = "PATH", requires_all = ["against", "cert", "ca"])]
    key: Option<PathBuf>,
    /// User to log in as over SSH to look inside the machines (systemctl show, /run/fleet); with --ssh-key
    #[arg(long, value_name = "USER", requires_all = ["against", "ssh_key"])]
    ssh_user: Option<String>,
    /// Private key for --ssh-user (the machines' public IPs, as the API lists them, port --ssh-port)
    #[arg(long, value_name = "PATH", requires_all = ["against", "ssh_user"])]
    ssh_key: Option<PathBuf>,
    /// SSH port of the machines
    #[arg(long, value_name = "PORT", default_value_t = 22)]
    ssh_port: u16,
    /// What the implementation claims beyond fleet v1 (comma separated; `all`, `none`); see conformance/README.md.
    /// Default: FLEET_CAPABILITIES or FLEET_CAPABILITIES_FILE, else none for --against/--fleetd/--fleetctl and all for
    /// this workspace's own build
    #[arg(long, value_name = "LIST")]
    capabilities: Option<String>,
    /// The prefix of every unit the run creates on a live cluster (default: fc-<6 random hex digits>-); at least 4
    /// characters of [A-Za-z0-9_.:-], ending in `-`
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    /// Where the JUnit report of every spec goes (skipped ones with their reason)
    #[arg(long, value_name = "PATH", default_value = "conformance-junit.xml")]
    junit: PathBuf,
    /// How many specs run at once
    #[arg(long, value_name = "N", default_value_t = 3)]
    jobs: usize,
    /// Leave out specs whose name (`<area>::<spec>`) contains this (repeatable)
    #[arg(long, value_name = "SUBSTRING")]
    skip: Vec<String>,
    /// Every wait and fleetctl run may take this many times its default (1–100)
    #[arg(long, value_name = "N")]
    time_scale: Option<String>,
    /// List the selected specs with their profile and, with --against, whether each runs there (or why not)
    #[arg(long)]
    list: bool,
    /// With --against and --prefix: destroy every unit starting with the prefix (left by an interrupted run) and exit
    #[arg(long, requires_all = ["against", "prefix"])]
    cleanup: bool,
    /// Run only specs whose name (`<area>::<spec>`) contains one of these
    #[arg(value_name = "FILTER")]
    filters: Vec<String>,
}

/// The live cluster, once connected, and the run's prefix, once chosen: what a panic outside a spec still cleans
/// up, and whose files go when the process exits.
static LIVE: OnceLock<Arc<LiveCluster>> = OnceLock::new();
static PREFIX: OnceLock<String> = OnceLock::new();

/// Removes this process's files (the fixtures written out, the live cluster's known-hosts files): `exit` runs no
/// destructor.
fn remove_files() {
    fixtures::remove_materialized();
    if let Some(live) = LIVE.get() {
        live.remove_files();
    }
}

fn main() {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "fleet_conformance=warn,fleet_harness=warn".into()),
        )
        .init();
    // The harness and the waits read these from the environment; set before any other thread exists.
    let mut env: Vec<(&str, String)> = Vec::new();
    if let Some(scale) = &args.time_scale {
        if let Err(e) = fleet_harness::wait::parse_time_scale(scale) {
            fail(2, &format!("--time-scale: {e}"));
        }
        env.push((fleet_harness::wait::TIME_SCALE_ENV, scale.clone()));
    }
    if args.against.is_none() {
        for (var, path) in
            [(fleet_harness::config::FLEETD_ENV, &args.fleetd), (fleet_harness::config::FLEETCTL_ENV, &args.fleetctl)]
        {
            if let Some(p) = path {
                env.push((var, absolute(p).display().to_string()));
            }
        }
    }
    for (k, v) in env {
        // SAFETY: no other thread runs yet (the runtime is built below), so nothing reads the environment meanwhile.
        unsafe { std::env::set_var(k, v) };
    }
    let rt =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fail(2, &e.to_string()));
    let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(main_async(&args)))) {
        Ok(code) => code,
        Err(_) => {
            // A bug outside the specs: still leave the live cluster as it was.
            if let (Some(cluster), Some(prefix)) = (LIVE.get(), PREFIX.get()) {
                eprintln!("fleet-conformance: panicked; removing the units of this run ({prefix}*)");
                if let Err(e) = rt.block_on(run::sweep(cluster, prefix)) {
                    eprintln!("fleet-conformance: {e}");
                }
            }
            101
        }
    };
    remove_files();
    std::process::exit(code);
}

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("fleet-conformance: {msg}");
    remove_files();
    std::process::exit(code);
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or(p.to_path_buf())
    }
}

/// `name` on `PATH`, as a shell would find it.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// The declaration: `--capabilities`, else the environment, else none for anything but this workspace's own build.
fn declared(args: &Args) -> Result<Capabilities, String> {
    if let Some(list) = &args.capabilities {
        return Capabilities::parse(list).map_err(|e| format!("--capabilities: {e}"));
    }
    let from_env = [fleet_conformance::capabilities::ENV, fleet_conformance::capabilities::FILE_ENV]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !from_env && (args.against.is_some() || args.fleetd.is_some() || args.fleetctl.is_some()) {
        return Ok(Capabilities::default());
    }
    Capabilities::from_env()
}

/// A prefix the run may own: long enough not to be another user's naming scheme by accident, and a valid start of
/// a unit name.
fn check_prefix(p: &str) -> Result<(), String> {
    let ok = p.len() >= 4
        && p.ends_with('-')
        && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!("--prefix {p:?}: expected at least 4 characters of [A-Za-z0-9_.:-] ending in '-'"))
    }
}

fn random_prefix() -> String {
    format!("fc-{:06x}-", rand::random::<u32>() & 0xff_ffff)
}

async fn connect(args: &Args, endpoint: &str) -> Result<LiveCluster, String> {
    let fleetctl = match &args.fleetctl {
        Some(p) => absolute(p),
        None => on_path("fleetctl").ok_or("no fleetctl on PATH: give --fleetctl")?,
    };
    if !fleetctl.is_file() {
        return Err(format!("--fleetctl {}: no such file", fleetctl.display()));
    }
    let tls = args.ca.as_ref().map(|ca| TlsFiles { ca: absolute(ca), cert: args.cert.clone(), key: args.key.clone() });
    let ssh = match (&args.ssh_user, &args.ssh_key) {
        (Some(user), Some(key)) => Some(SshAccess { user: user.clone(), key: absolute(key), port: args.ssh_port }),
        _ => None,
    };
    LiveCluster::connect(LiveOptions { endpoint: endpoint.to_string(), fleetctl, tls, ssh })
        .await
        .map_err(|e| format!("{endpoint}: {e}"))
}

async fn main_async(args: &Args) -> i32 {
    let declared = declared(args).unwrap_or_else(|e| fail(2, &e));
    let selection = Selection { filters: args.filters.clone(), skips: args.skip.clone(), jobs: args.jobs };
    let live = match &args.against {
        Some(endpoint) => {
            let cluster = Arc::new(connect(args, endpoint).await.unwrap_or_else(|e| fail(2, &e)));
            let _ = LIVE.set(Arc::clone(&cluster));
            Some(cluster)
        }
        None => None,
    };
    if args.list {
        let shape = live.as_ref().map(|l| l.shape());
        for spec in all().into_iter().filter(|s| selection.selects(&s.trial_name())) {
            let needs: Vec<&str> = spec.needs.iter().map(|n| n.as_str()).collect();
            let verdict = match run::decide(&spec, &declared, shape.as_ref()) {
                _ if shape.is_none() => {
                    format!("needs: {}", if needs.is_empty() { "-".into() } else { needs.join(",") })
                }
                Decision::Run => "runs".into(),
                Decision::MissingCapability => "skip: needs a capability not declared".into(),
                Decision::NotRun(why) => format!("skip: {why}"),
            };
            println!("{}\t{}\t{verdict}", spec.trial_name(), spec.profile());
        }
        return 0;
    }
    let mode = match live {
        Some(cluster) => {
            let prefix = args.prefix.clone().unwrap_or_else(random_prefix);
            check_prefix(&prefix).unwrap_or_else(|e| fail(2, &e));
            if args.cleanup {
                return match run::sweep(&cluster, &prefix).await {
                    Ok(()) => 0,
                    Err(e) => fail(1, &e),
                };
            }
            let existing = cluster.units_with_prefix(&prefix).await.unwrap_or_else(|e| fail(2, &e));
            if !existing.is_empty() {
                fail(
                    2,
                    &format!(
                        "{} unit(s) starting with {prefix:?} already exist ({}): another run's? Remove them with \
                         --cleanup --prefix {prefix}, or choose another --prefix",
                        existing.len(),
                        existing.join(", ")
                    ),
                );
            }
            println!("fleet-conformance against {} (units named {prefix}NNN-<name>)", cluster.endpoint());
            for (i, m) in cluster.machines().iter().enumerate() {
                let md: Vec<String> = m.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("  machine {}: {} {} {}", i + 1, m.id, m.ip, md.join(","));
            }
            let ssh = if cluster.has_ssh() { "over SSH" } else { "not looked into (no --ssh-user/--ssh-key)" };
            println!("  machines {ssh}; declared capabilities: {}", declared.render());
            let _ = PREFIX.set(prefix.clone());
            Mode::Live { cluster, prefix }
        }
        None => {
            println!("fleet-conformance on harness clusters; declared capabilities: {}", declared.render());
            Mode::Harness
        }
    };
    let result = run::run(all(), &declared, mode.clone(), &selection).await;
    let profile = match &mode {
        Mode::Live { cluster, .. } => format!("external (against {})", cluster.endpoint()),
        Mode::Harness => "harness".to_string(),
    };
    let t = result.report.total();
    println!("\nprofile {profile}: {} passed, {} failed, {} skipped", t.passed, t.failed, t.skipped);
    print!("{}", result.report.render());
    match std::fs::write(&args.junit, result.report.to_junit()) {
        Ok(()) => println!("JUnit report: {}", args.junit.display()),
        Err(e) => eprintln!("fleet-conformance: {}: {e}", args.junit.display()),
    }
    if let Err(e) = &result.cleaned {
        eprintln!("fleet-conformance: {e}");
    }
    result.exit_code()
}

//! Scenarios of fleetctl's SSH-based commands on real clusters (issue 7; spec §9.7–§9.9, §11.3
//! `TestUnitSSHActions`, `TestUnitStatus`, `TestKnownHostsVerification`, `TestTunnelScheduleBatchUnits`):
//! `status` and `journal` show systemd's view from the unit's machine (and every machine of a global unit),
//! `journal -f` streams and ends cleanly on interrupt, `ssh` runs commands by machine ID and unit name and returns
//! their exit status, `--tunnel` through one machine drives the whole cluster, and host keys are checked like the
//! original checks them. Each test starts its own cluster with fleet and the cluster's ssh-agent.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fleet_harness::{Check, Cluster, Output, WaitOptions, wait, wait_for};
use tokio::io::AsyncReadExt;

const HELLO: &str = "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo Hello, World!; sleep 1; done\"\n";
const HELLO_TEMPLATE: &str =
    "[Unit]\nDescription=Hello %i\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hello %i; sleep 1; done\"\n";
const GLOBAL: &str = "[Unit]\nDescription=Everywhere\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo everywhere on $(hostname); sleep 1; done\"\n\n[X-Fleet]\nGlobal=true\n";

/// Unit files in a temporary directory.
fn unit_dir(units: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in units {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let path = dir.path().to_path_buf();
    (dir, path)
}

fn arg(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

fn ok(out: &Output, what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
}

/// Runs fleetctl on slot 1 (with `input` for any host-key prompt) until `accept` takes its result, and returns that
/// result; panics with the last output when it never does. A unit's log lines reach the journal some time after
/// systemd reports it running, so checks on them must wait rather than look once.
async fn fleetctl_until(
    c: &Cluster,
    input: &str,
    args: &[&str],
    what: &str,
    accept: impl Fn(&Output) -> bool,
) -> Output {
    let accept = &accept;
    wait_for(WaitOptions::default(), what, || async move {
        match c.fleetctl_with_input(1, input, args).await {
            Ok(out) if accept(&out) => Check::Ready(out),
            Ok(out) => Check::NotYet(out.describe()),
            Err(e) => Check::NotYet(e.to_string()),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn cluster(n: usize) -> Cluster {
    let c = Cluster::builder().machines(n).agent_ttl("3s").start().await.unwrap();
    c.wait_for_n_machines(1, n).await.unwrap();
    c
}

/// The hostname (`m<slot>`) of the machine with this ID.
fn hostname_of(c: &Cluster, id: &str) -> String {
    c.machines().iter().find(|m| m.id() == id).map(|m| m.name().to_string()).unwrap_or_default()
}

const NO_CHECK: &str = "--strict-host-key-checking=false";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_journal_show_systemd_from_the_units_machine() {
    let c = cluster(2).await;
    let (_d, dir) = unit_dir(&[("hello.service", HELLO), ("idle.service", HELLO)]);
    ok(&c.fleetctl(1, &["start", &arg(&dir, "hello.service")]).await.unwrap(), "start");
    let active = c.wait_for_n_active_units(1, 1).await.unwrap();
    let host = hostname_of(&c, &active["hello.service"]);
    let from_host = format!(" {host} sh[");
    // Three log lines of the unit in its machine's journal (status and journal below look only once).
    let three = |o: &Output| o.success() && o.stdout.lines().filter(|l| l.contains(&from_host)).count() == 3;
    fleetctl_until(&c, "", &[NO_CHECK, "journal", "--lines=3", "hello.service"], "3 log lines from the unit", three)
        .await;

    let st = c.fleetctl(1, &[NO_CHECK, "status", "hello.service"]).await.unwrap();
    ok(&st, "status");
    assert!(st.stdout.starts_with("● hello.service - Hello World\n"), "{}", st.stdout);
    assert!(st.stdout.contains("Loaded: loaded"), "{}", st.stdout);
    assert!(st.stdout.contains("Active: active (running)"), "{}", st.stdout);
    assert!(st.stdout.contains(&from_host), "status not from {host}: {}", st.stdout);

    let j = c.fleetctl(1, &[NO_CHECK, "journal", "--lines=3", "hello.service"]).await.unwrap();
    ok(&j, "journal");
    let lines: Vec<&str> = j.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", j.stdout);
    assert!(lines.iter().all(|l| l.contains(&from_host) && l.ends_with("Hello, World!")), "{lines:?}");
    let j =
        c.fleetctl(1, &[NO_CHECK, "journal", "--sudo", "--lines=2", "--output=cat", "hello.service"]).await.unwrap();
    ok(&j, "journal --sudo --output=cat");
    assert_eq!(j.stdout, "Hello, World!\nHello, World!\n");

    // A loaded (not started) unit: systemd's view says loaded; the exit status is systemctl's (3: inactive).
    ok(&c.fleetctl(1, &["load", &arg(&dir, "idle.service")]).await.unwrap(), "load");
    let st = c.fleetctl(1, &[NO_CHECK, "status", "idle.service"]).await.unwrap();
    assert!(st.stdout.contains("Loaded: loaded"), "{}", st.describe());
    assert_eq!(st.status, 3, "{}", st.describe());

    // Inside the unit's own machine fleetctl runs systemctl itself: no SSH, no agent needed.
    let m = c.machines().iter().find(|m| m.name() == host).unwrap();
    let local = m.exec(&["fleetctl", "status", "hello.service"]).await.unwrap();
    ok(&local, "fleetctl status inside the machine");
    assert!(local.stdout.contains("Active: active (running)"), "{}", local.stdout);

    // Errors are the original's.
    let e = c.fleetctl(1, &[NO_CHECK, "status", "nope.service"]).await.unwrap();
    assert_eq!((e.status, e.stderr.as_str()), (1, "Unit nope.service does not exist.\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_journal_of_a_global_unit_cover_every_machine_or_the_chosen_one() {
    let c = cluster(2).await;
    let (_d, dir) = unit_dir(&[("everywhere.service", GLOBAL)]);
    ok(&c.fleetctl(1, &["start", &arg(&dir, "everywhere.service")]).await.unwrap(), "start");
    // Active on both machines (one unit, two rows: the single-location helper does not apply).
    let fields = ["unit", "active"];
    c.wait_fleetctl(1, &wait::table_args("list-units", "unit,active"), "the global unit active on 2 machines", |out| {
        let active = wait::parse_table(out, &fields).iter().filter(|r| r.get("active") == "active").count();
        if active == 2 { Ok(()) } else { Err(format!("{active} of 2 rows active")) }
    })
    .await
    .unwrap();
    // Two log lines on each machine (the journal checks below take two lines of m2 and one of each).
    for (slot, m) in c.machines().iter().enumerate() {
        let id = m.id()[..8].to_string();
        let args = [NO_CHECK, "journal", "--machine", &id, "--lines=2", "--output=cat", "everywhere.service"];
        let want = format!("everywhere on {}\n", m.name()).repeat(2);
        let what = format!("two log lines on machine {}", slot + 1);
        fleetctl_until(&c, "", &args, &what, |o| o.success() && o.stdout == want).await;
    }

    let st = c.fleetctl(1, &[NO_CHECK, "status", "everywhere.service"]).await.unwrap();
    ok(&st, "status of a global unit");
    assert_eq!(st.stdout.matches("● everywhere.service - Everywhere\n").count(), 2, "{}", st.stdout);
    assert!(st.stdout.contains(" m1 sh[") && st.stdout.contains(" m2 sh["), "{}", st.stdout);

    let m2 = c.machine(2).unwrap().id()[..8].to_string();
    let j = c
        .fleetctl(1, &[NO_CHECK, "journal", "--machine", &m2, "--lines=2", "--output=cat", "everywhere.service"])
        .await
        .unwrap();
    ok(&j, "journal --machine");
    assert_eq!(j.stdout, "everywhere on m2\neverywhere on m2\n");
    let j = c.fleetctl(1, &[NO_CHECK, "journal", "--lines=1", "--output=cat", "everywhere.service"]).await.unwrap();
    ok(&j, "journal of every machine");
    // One machine after the other, in machine ID order.
    let mut ms: Vec<(&str, &str)> = c.machines().iter().map(|m| (m.id(), m.name())).collect();
    ms.sort();
    assert_eq!(j.stdout, format!("everywhere on {}\neverywhere on {}\n", ms[0].1, ms[1].1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_follow_streams_new_lines_and_ends_cleanly_on_interrupt() {
    let c = cluster(1).await;
    let (_d, dir) = unit_dir(&[("hello.service", HELLO)]);
    ok(&c.fleetctl(1, &["start", &arg(&dir, "hello.service")]).await.unwrap(), "start");
    c.wait_for_n_active_units(1, 1).await.unwrap();

    let mut cmd = c.fleetctl_command(1, &[NO_CHECK, "journal", "-f", "--lines=1", "hello.service"]).unwrap();
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    let t0 = Instant::now();
    // The unit logs once a second: with --lines=1, three lines prove that new entries are streamed.
    while seen.matches("Hello, World!").count() < 3 {
        assert!(t0.elapsed() < Duration::from_secs(20), "journal -f streamed only: {seen:?}");
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(20), stdout.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "journal -f ended by itself: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    // SAFETY: SIGINT to the child we started, as Ctrl-C would send.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) };
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await.expect("ends on SIGINT").unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).await.unwrap();
    assert_eq!((status.code(), err.as_str()), (Some(0), ""), "journal -f must end cleanly");
    // The remote journalctl went with the SSH session.
    let m = c.machine(1).unwrap();
    let mut gone = false;
    for _ in 0..50 {
        if !m.exec(&["pgrep", "-x", "journalctl"]).await.unwrap().success() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "journalctl still runs on the machine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_runs_commands_by_machine_id_and_unit_name_and_returns_their_exit_status() {
    let c = cluster(2).await;
    let (_d, dir) = unit_dir(&[("hello.service", HELLO)]);
    ok(&c.fleetctl(1, &["start", &arg(&dir, "hello.service")]).await.unwrap(), "start");
    let active = c.wait_for_n_active_units(1, 1).await.unwrap();
    let host = hostname_of(&c, &active["hello.service"]);
    let m2 = c.machine(2).unwrap().id().to_string();

    let o = c.fleetctl(1, &[NO_CHECK, "ssh", &m2[..10], "hostname"]).await.unwrap();
    ok(&o, "ssh by machine id prefix");
    assert_eq!(o.stdout, "m2\n");
    let o = c.fleetctl(1, &[NO_CHECK, "ssh", "hello.service", "echo", "foo"]).await.unwrap();
    ok(&o, "ssh by unit");
    assert_eq!(o.stdout, "foo\n");
    let o = c.fleetctl(1, &[NO_CHECK, "ssh", "--unit=hello.service", "hostname"]).await.unwrap();
    assert_eq!(o.stdout, format!("{host}\n"));
    // The remote exit status is fleetctl's.
    let o = c.fleetctl(1, &[NO_CHECK, "ssh", &m2, "--", "sh", "-c", "'echo out; echo err >&2; exit 7'"]).await.unwrap();
    assert_eq!((o.status, o.stdout.as_str(), o.stderr.as_str()), (7, "out\n", "err\n"), "{}", o.describe());
    // core has passwordless sudo, as the original's functional tests use it.
    let o = c.fleetctl(1, &[NO_CHECK, "ssh", &m2, "sudo", "systemctl", "is-active", "fleet"]).await.unwrap();
    assert_eq!(o.stdout, "active\n", "{}", o.describe());
    // -A forwards the agent: the remote side sees our key; without it, no agent.
    let key = c.ssh_agent().unwrap().public_key().to_string();
    let o = c.fleetctl(1, &[NO_CHECK, "ssh", "-A", &m2, "--", "ssh-add", "-L"]).await.unwrap();
    ok(&o, "ssh -A");
    assert_eq!(o.stdout.trim(), key);
    let o = c.fleetctl(1, &[NO_CHECK, "ssh", &m2, "echo", "${SSH_AUTH_SOCK:-none}"]).await.unwrap();
    assert_eq!(o.stdout, "none\n");
    // Failures are the original's words.
    let o = c.fleetctl(1, &[NO_CHECK, "ssh", "nothing-like-this"]).await.unwrap();
    assert_eq!((o.status, o.stderr.as_str()), (1, "Unable to proceed: could not find matching unit or machine\n"));
    let o = c.fleetctl(1, &[NO_CHECK, "--ssh-username=nobody", "ssh", &m2, "true"]).await.unwrap();
    assert_eq!(o.status, 1, "{}", o.describe());
    assert!(
        o.stderr.starts_with("Failed building SSH client: ssh: handshake failed: ssh: unable to authenticate"),
        "{}",
        o.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_through_one_machine_drives_the_whole_cluster() {
    let c = cluster(3).await;
    let (_d, dir) = unit_dir(&[("hello.service", HELLO), ("hello@.service", HELLO_TEMPLATE)]);
    let known = tempfile::tempdir().unwrap();
    let known_hosts = known.path().join("known_hosts").display().to_string();
    let tunnel = format!("--tunnel={}", c.machine(1).unwrap().ip());
    let strict = ["--strict-host-key-checking=true", "--known-hosts-file", known_hosts.as_str()];
    let with = |more: &[&str]| -> Vec<String> {
        let mut v = vec![tunnel.clone()];
        v.extend(strict.iter().map(|s| s.to_string()));
        v.extend(more.iter().map(|s| s.to_string()));
        v
    };
    let args = with(&["start", &arg(&dir, "hello.service")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Default endpoint: the API is the tunnel host's unix socket, reached by `fleetctl fd-forward` there.
    let o = c.fleetctl_with_input(1, "yes\n", &args).await.unwrap();
    ok(&o, "start through the tunnel");
    assert!(!o.stderr.contains("Error"), "{}", o.stderr);
    assert!(o.stderr.contains("Warning: Permanently added"), "{}", o.stderr);
    // More instances than sshd's MaxSessions (10): the client must keep its session channels under it.
    let instances: Vec<String> = (1..=24).map(|i| arg(&dir, &format!("hello@{i}.service"))).collect();
    let mut more = vec!["start"];
    more.extend(instances.iter().map(String::as_str));
    let args = with(&more);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = c.fleetctl(1, &args).await.unwrap();
    ok(&o, "batch start through the tunnel (host now known)");
    assert!(!o.stderr.contains("Error"), "{}", o.stderr);
    let active = c.wait_for_n_active_units(1, 25).await.unwrap();

    let args = with(&["list-units", "--no-legend", "--full", "--fields=unit,active"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = c.fleetctl(1, &args).await.unwrap();
    ok(&o, "list-units through the tunnel");
    assert_eq!(o.stdout.lines().filter(|l| l.ends_with("active")).count(), 25, "{}", o.stdout);

    // status and ssh reach other machines through the tunnel host (their host keys are prompted for too).
    let (unit, on) = active.iter().find(|(_, m)| *m != c.machine(1).unwrap().id()).expect("a unit off the bastion");
    let args = with(&["status", unit]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The first call also answers the host-key prompt; the unit's first log line may still be on its way.
    let from_host = format!(" {} sh[", hostname_of(&c, on));
    let what = format!("status through the tunnel with a log line from {on}");
    let o = fleetctl_until(&c, "yes\n", &args, &what, |o| o.success() && o.stdout.contains(&from_host)).await;
    assert!(o.stdout.contains("Active: active (running)"), "{}", o.stdout);
    let args = with(&["ssh", on, "hostname"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = c.fleetctl(1, &args).await.unwrap();
    assert_eq!(o.stdout, format!("{}\n", hostname_of(&c, on)), "{}", o.describe());
    // The TCP endpoint of another machine works too (direct-tcpip from the tunnel host).
    let endpoint = format!("--endpoint={}", c.machine(3).unwrap().endpoint());
    let args = with(&[&endpoint, "list-machines", "--no-legend"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = c.fleetctl(1, &args).await.unwrap();
    assert_eq!(o.stdout.lines().count(), 3, "{}", o.describe());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_keys_are_prompted_for_recorded_and_a_changed_key_is_refused() {
    let mut c = cluster(2).await;
    let known = tempfile::tempdir().unwrap();
    let file = known.path().join("known_hosts");
    let kh = format!("--known-hosts-file={}", file.display());
    let m1 = c.machine(1).unwrap().id().to_string();
    let ip = c.machine(1).unwrap().ip().to_string();
    let strict = "--strict-host-key-checking=true";

    // Unknown host, strict checking, no "yes": refused, nothing recorded.
    let o = c.fleetctl(2, &[strict, &kh, "ssh", &m1, "uptime"]).await.unwrap();
    assert_eq!(o.status, 1, "{}", o.describe());
    assert!(
        o.stderr.starts_with(&format!(
            "The authenticity of host '{ip}' can't be established.\nssh-ed25519 key fingerprint is "
        )),
        "{}",
        o.stderr
    );
    assert!(o.stderr.ends_with("Are you sure you want to continue connecting (yes/no)? Host key verification failed.\nFailed building SSH client: ssh: handshake failed: unauthorized host\n"), "{}", o.stderr);
    assert!(!file.exists());
    // Without strict checking: no prompt, no file.
    let o = c.fleetctl(2, &[NO_CHECK, &kh, "ssh", &m1, "true"]).await.unwrap();
    assert_eq!((o.status, o.stderr.as_str()), (0, ""));
    assert!(!file.exists());
    // "yes": recorded as `<ip> ssh-ed25519 ...`, then silent.
    let o = c.fleetctl_with_input(2, "yes\n", &[strict, &kh, "ssh", &m1, "uptime"]).await.unwrap();
    ok(&o, "ssh after yes");
    assert!(
        o.stderr.ends_with(&format!("Warning: Permanently added '{ip}' (ssh-ed25519) to the list of known hosts.\n")),
        "{}",
        o.stderr
    );
    let recorded = std::fs::read_to_string(&file).unwrap();
    assert!(recorded.starts_with(&format!("{ip} ssh-ed25519 ")), "{recorded}");
    let o = c.fleetctl(2, &[strict, &kh, "ssh", &m1, "true"]).await.unwrap();
    assert_eq!((o.status, o.stderr.as_str()), (0, ""));

    // Same address, new machine, new host key: refused with the warning.
    c.replace_machine(1).await.unwrap();
    c.wait_for_n_machines(2, 2).await.unwrap();
    let m1 = c.machine(1).unwrap().id().to_string();
    let o = c.fleetctl_with_input(2, "yes\n", &[strict, &kh, "ssh", &m1, "uptime"]).await.unwrap();
    assert_eq!(o.status, 1, "{}", o.describe());
    assert!(o.stderr.starts_with("@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"), "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("Add correct host key in {} to get rid of this message.\n", file.display())),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.ends_with(
            "Host key verification failed.\nFailed building SSH client: ssh: handshake failed: host key mismatch\n"
        ),
        "{}",
        o.stderr
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), recorded, "a refused key is not recorded");

    // Forget the old key: prompted again, accepted.
    std::fs::write(&file, "").unwrap();
    let o = c.fleetctl_with_input(2, "yes\n", &[strict, &kh, "ssh", &m1, "uptime"]).await.unwrap();
    ok(&o, "ssh after forgetting the key");
}

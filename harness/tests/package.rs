//! The Debian package (`ci/package`, issue 17) installed into a harness machine instead of the bind-mounted binary:
//! dpkg installs it, its own units run its own fleetd against the cluster's etcd, and its fleetctl starts a unit
//! end to end through the Unix socket the package's `fleet.socket` provides (group `fleet`). The package holds the
//! shipped binaries (profile `ship`, issue 38), as `ci/package` builds it, not the tests' debug build.

use std::path::PathBuf;
use std::process::Command;

use fleet_harness::{Cluster, Fleet, WaitOptions, config};

/// The shipped binaries: `FLEET_PACKAGE_BIN_DIR`, else `<target>/ship` beside the debug build the harness uses.
fn ship_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FLEET_PACKAGE_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let fleetd = config::locate("fleetd", config::FLEETD_ENV).expect("fleetd is built (cargo build -p fleetd --bins)");
    let target = fleetd.parent().and_then(std::path::Path::parent).expect("fleetd is in <target>/<profile>/");
    target.join("ship")
}

/// Builds the package from the shipped binaries (`ci/test` builds them before the tests).
fn build_package(out: &std::path::Path) -> PathBuf {
    let bin_dir = ship_dir();
    for b in ["fleetd", "fleetctl", "fleet-docs"] {
        assert!(
            bin_dir.join(b).is_file(),
            "{} is missing: the package holds the shipped build (`ship_build` of ci/lib.sh, as ci/test does)",
            bin_dir.join(b).display()
        );
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ci/package");
    let run = Command::new(&script).arg(out).env("FLEET_PACKAGE_BIN_DIR", &bin_dir).output().expect("ci/package runs");
    assert!(run.status.success(), "ci/package failed: {}", String::from_utf8_lossy(&run.stderr));
    let deb = String::from_utf8_lossy(&run.stdout).lines().last().unwrap_or_default().to_string();
    assert!(deb.ends_with(".deb"), "ci/package prints the package's path last: {deb:?}");
    PathBuf::from(deb)
}

/// Builds the conformance suite's package (`ci/package --conformance`) from the tests' own build of
/// `fleet-conformance` (beside this test binary's `deps/`): what it proves is that the installed suite needs nothing
/// but what the package carries, whichever profile built it (the `ship` build takes minutes more of CI).
fn build_conformance_package(out: &std::path::Path) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let bin_dir =
        exe.parent().and_then(std::path::Path::parent).expect("the test binary is in <target>/<profile>/deps");
    for b in ["fleet-conformance", "conformance-summary"] {
        assert!(
            bin_dir.join(b).is_file(),
            "{} is missing (cargo build -p fleet-conformance --bins, as ci/test's build does)",
            bin_dir.join(b).display()
        );
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ci/package");
    let run = Command::new(&script)
        .args(["--conformance", &out.display().to_string()])
        .env("FLEET_PACKAGE_BIN_DIR", bin_dir)
        .output()
        .expect("ci/package --conformance runs");
    assert!(run.status.success(), "ci/package --conformance failed: {}", String::from_utf8_lossy(&run.stderr));
    let deb = String::from_utf8_lossy(&run.stdout).lines().last().unwrap_or_default().to_string();
    assert!(deb.ends_with(".deb") && deb.contains("fleet-conformance_"), "the conformance package's path: {deb:?}");
    PathBuf::from(deb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_package_installs_on_a_machine_and_runs_a_unit_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let deb = build_package(dir.path());
    // No fleet from the harness: the package brings fleetd and its units.
    let cluster = Cluster::builder().machines(1).fleet(Fleet::Off).start().await.unwrap();
    let m = cluster.machine(1).unwrap();
    let copy = Command::new("docker")
        .args(["cp", &deb.display().to_string(), &format!("{}:/root/fleet.deb", m.container_name())])
        .output()
        .unwrap();
    assert!(copy.status.success(), "docker cp: {}", String::from_utf8_lossy(&copy.stderr));
    // The harness's own units (in /etc, which would override the package's) go; the package's stay.
    m.exec_ok(&["rm", "-f", "/etc/systemd/system/fleet.service", "/etc/systemd/system/fleet.socket"]).await.unwrap();
    m.exec_ok(&["rm", "-f", "/etc/systemd/system/fleet-tcp.socket"]).await.unwrap();
    let install = m.exec(&["dpkg", "-i", "/root/fleet.deb"]).await.unwrap();
    assert!(install.success(), "dpkg -i: {}", install.describe());

    // What the package put in place: the shipped binaries themselves.
    for b in ["fleetd", "fleetctl"] {
        let shipped = std::fs::read(ship_dir().join(b)).unwrap();
        let installed = m.exec_ok(&["sha1sum", &format!("/usr/bin/{b}")]).await.unwrap();
        let want = hex::encode(<sha1::Sha1 as sha1::Digest>::digest(&shipped));
        assert!(
            installed.stdout.starts_with(&want),
            "/usr/bin/{b} is not the shipped build ({want}): {}",
            installed.stdout
        );
    }
    let conf = m.read_file("/etc/fleet/fleet.conf").await.unwrap();
    assert!(conf.contains("\n#etcd_servers=") && conf.contains("\n#public_ip="), "commented fleet.conf: {conf}");
    m.exec_ok(&["getent", "group", "fleet"]).await.unwrap();
    for path in [
        "/usr/share/man/man1/fleetctl.1.gz",
        "/usr/share/man/man8/fleetd.8.gz",
        "/usr/share/bash-completion/completions/fleetctl",
        "/usr/share/zsh/vendor-completions/_fleetctl",
        "/usr/share/fish/vendor_completions.d/fleetctl.fish",
    ] {
        m.exec_ok(&["test", "-s", path]).await.unwrap_or_else(|e| panic!("{path} installed: {e}"));
    }

    // Configure it like an operator would, and start the package's units.
    let settings = format!("{conf}\netcd_servers={}\npublic_ip={}\nagent_ttl=3s\n", cluster.etcd().url(), m.ip());
    m.write_file("/etc/fleet/fleet.conf", &settings).await.unwrap();
    m.exec_ok(&["systemctl", "enable", "--now", "fleet.socket", "fleet-tcp.socket", "fleet.service"]).await.unwrap();
    m.wait_api(WaitOptions::secs(60)).await.unwrap();
    let socket = m.exec_ok(&["stat", "-c", "%G %a", "/var/run/fleet.sock"]).await.unwrap().stdout;
    assert_eq!(socket.trim(), "fleet 660", "the API socket belongs to group fleet");
    let pid = m.systemctl_show("fleet.service", &["MainPID"]).await.unwrap()["MainPID"].clone();
    let exe = m.exec_ok(&["readlink", &format!("/proc/{pid}/exe")]).await.unwrap().stdout;
    assert_eq!(exe.trim(), "/usr/bin/fleetd", "the package's fleetd runs");

    // A unit through the package's fleetctl (default endpoint: the package's socket), as a member of group fleet.
    m.exec_ok(&["useradd", "--groups", "fleet", "--create-home", "fleetop"]).await.unwrap();
    m.write_file("/home/fleetop/hello.service", "[Service]\nExecStart=/bin/sleep 100000\n").await.unwrap();
    let start = m
        .exec(&[
            "runuser",
            "-u",
            "fleetop",
            "--",
            "sh",
            "-c",
            "cd /home/fleetop && /usr/bin/fleetctl start hello.service",
        ])
        .await
        .unwrap();
    assert!(start.success(), "fleetctl start: {}", start.describe());
    assert!(start.stdout.contains("Unit hello.service launched on "), "{}", start.describe());
    let active = m.exec(&["systemctl", "is-active", "hello.service"]).await.unwrap();
    assert_eq!(active.stdout.trim(), "active", "{}", active.describe());
    let listed = m.exec_ok(&["/usr/bin/fleetctl", "list-units", "--output=json"]).await.unwrap().stdout;
    assert!(listed.contains("\"systemdSubState\": \"running\""), "{listed}");
    // status --output=json on the unit's own machine: systemctl show run locally, captured.
    let status = m.exec_ok(&["/usr/bin/fleetctl", "status", "--output=json", "hello.service"]).await.unwrap().stdout;
    assert!(
        status.contains("\"ActiveState\": \"active\"") && status.contains("\"Id\": \"hello.service\""),
        "status --output=json shows systemd's properties of the unit (ActiveState active): {status}"
    );
    // The installed bash completion offers the registry's units (through the hidden __complete helper).
    let complete = "source /usr/share/bash-completion/completions/fleetctl; COMP_WORDS=(fleetctl status hel); \
                    COMP_CWORD=2; _fleetctl; echo \"${COMPREPLY[*]}\"";
    let offered = m.exec_ok(&["bash", "-c", complete]).await.unwrap().stdout;
    assert_eq!(offered.trim(), "hello.service", "bash completion of `fleetctl status hel`");
    // Someone outside the group cannot use the socket.
    m.exec_ok(&["useradd", "--create-home", "stranger"]).await.unwrap();
    let denied = m.exec(&["runuser", "-u", "stranger", "--", "/usr/bin/fleetctl", "list-units"]).await.unwrap();
    assert!(!denied.success(), "a user outside group fleet reached the API: {}", denied.describe());

    // The conformance suite's package certifies this machine's fleet through the package's socket with nothing but
    // what it carries: no source tree, no cargo in the machine; the fleetctl it drives is the one on PATH.
    let cdeb = build_conformance_package(dir.path());
    let copy = Command::new("docker")
        .args(["cp", &cdeb.display().to_string(), &format!("{}:/root/fleet-conformance.deb", m.container_name())])
        .output()
        .unwrap();
    assert!(copy.status.success(), "docker cp: {}", String::from_utf8_lossy(&copy.stderr));
    let install = m.exec(&["dpkg", "-i", "/root/fleet-conformance.deb"]).await.unwrap();
    assert!(install.success(), "dpkg -i fleet-conformance: {}", install.describe());
    let certify = m
        .exec(&[
            "sh",
            "-c",
            "cd /root && fleet-conformance --against unix:///var/run/fleet.sock --capabilities all --prefix fc-pkg- \
             fleetctl:: client_api:: unit_actions::start_runs_the_unit unit_actions::cat_prints_the_submitted_unit",
        ])
        .await
        .unwrap();
    let passed = certify.stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(
        certify.success() && passed >= 9,
        "the installed fleet-conformance against the package's socket: {passed} passed (at least 9 expected): {}\n{}",
        certify.stdout,
        certify.stderr
    );
    m.exec_ok(&["test", "-s", "/root/conformance-junit.xml"]).await.unwrap();
    let files = m.exec_ok(&["/usr/bin/fleetctl", "list-unit-files", "--no-legend", "--fields", "unit"]).await.unwrap();
    assert_eq!(files.stdout.trim(), "hello.service", "the suite removed its units and left the operator's alone");
    let active = m.exec(&["systemctl", "is-active", "hello.service"]).await.unwrap();
    assert_eq!(active.stdout.trim(), "active", "the operator's unit kept running: {}", active.describe());

    // Removing it stops fleet and takes its files (the conffile stays until purge).
    let remove = m.exec(&["dpkg", "--purge", "fleet"]).await.unwrap();
    assert!(remove.success(), "dpkg --purge: {}", remove.describe());
    assert!(!m.exec(&["test", "-e", "/usr/bin/fleetd"]).await.unwrap().success());
    let state = m.exec(&["systemctl", "is-active", "fleet.service"]).await.unwrap().stdout;
    assert_ne!(state.trim(), "active", "fleet.service stopped on removal");
    drop(cluster);
}

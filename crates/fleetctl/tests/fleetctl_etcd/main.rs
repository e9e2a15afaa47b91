//! The real `fleetctl` binary with `--driver=etcd` against a real etcd (no fleetd runs, so only commands that do
//! not wait for agents are exercised; a pretend machine is registered through the registry where a test needs
//! one). Expected output follows reference transcripts 09 and 11.

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use fleet_core::model::{MachineState, PublishedState};
use fleet_registry::{AgentSession, Campaign, LeaseKeeper, PlacementWrite, Registry};
use fleet_testkit::TestEtcd;
use predicates::prelude::*;

const PREFIX: &str = "/fleetctl-test/";
const HELLO: &str =
    "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi; sleep 1; done\"\n";
const HELLO_HASH: &str = "ceced3bd4e313c5019a65871e3b66324472d5947";
const HELLO_V2: &str =
    "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi-v2; sleep 1; done\"\n";
const TEMPLATE: &str = "[Unit]\nDescription=Hello template instance %i\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hello %i; sleep 1; done\"\n";
const MACHINE: &str = "8363165e6276f500b71169eca9b3f76b";

/// etcd, a runtime to drive registry calls from the test, and a directory of unit files.
struct Cluster {
    runtime: tokio::runtime::Runtime,
    etcd: TestEtcd,
    units: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        // Multi-threaded so lease keep-alives run while the test waits for fleetctl.
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let etcd = runtime.block_on(TestEtcd::start());
        let units = tempfile::tempdir().expect("units dir");
        Cluster { runtime, etcd, units }
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.units.path().join(name), text).expect("write unit file");
    }

    /// `fleetctl --driver=etcd --endpoint=<etcd> --etcd-key-prefix=<PREFIX> <args>` in the units directory.
    fn fleetctl(&self, args: &[&str]) -> Command {
        fleetctl_at(&self.etcd.endpoint(), self.units.path(), args)
    }

    fn registry(&self) -> Registry {
        self.runtime.block_on(self.etcd.registry(PREFIX))
    }

    /// Hashes of every stored unit body.
    fn bodies(&self) -> Vec<String> {
        let reg = self.registry();
        let snapshot = self.runtime.block_on(reg.read_snapshot()).expect("read registry");
        snapshot.bodies().keys().map(|k| k.to_string()).collect()
    }
}

/// Pretends to be fleetd on machine [`MACHINE`] (fleetd `version`), running hello.service: presence, schedule,
/// published state, launched marker. The lease keeps them while the returned keeper lives.
fn pretend_fleetd_runs_hello(c: &Cluster, version: &str) -> LeaseKeeper {
    let reg = c.registry();
    let lease = c.runtime.block_on(LeaseKeeper::grant(&reg, Duration::from_secs(30))).expect("lease");
    let machine = MachineState {
        id: MACHINE.into(),
        public_ip: "172.17.0.2".into(),
        metadata: [("role".to_string(), "a".to_string())].into(),
        version: version.into(),
        disable_engine: false,
        cordoned: false,
        load_fault: None,
    };
    let state = PublishedState {
        name: "hello.service".into(),
        machine_id: MACHINE.into(),
        hash: HELLO_HASH.into(),
        load_state: "loaded".into(),
        active_state: "active".into(),
        sub_state: "running".into(),
        restarts: None,
        health: None,
        launched: None,
    };
    c.runtime.block_on(async {
        reg.register_machine(&machine, lease.id()).await.expect("register");
        // The engine's placement, as the leader it would have been elected.
        let Campaign::Leader(leader) = reg.campaign(MACHINE, lease.id()).await.expect("campaign") else {
            panic!("no other engine runs here, yet the campaign was lost")
        };
        let schedule = PlacementWrite::Schedule { unit: "hello.service", machine: MACHINE };
        assert!(leader.placement(&schedule).await.expect("schedule").is_some());
        let agent = AgentSession::new(reg.clone(), MACHINE, lease.id()).expect("agent session");
        agent.publish_state(&state).await.expect("publish");
        assert!(agent.mark_launched("hello.service", HELLO_HASH).await.expect("launched"));
    });
    lease
}

fn fleetctl_at(endpoint: &str, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = assert_cmd::cargo::cargo_bin_cmd!("fleetctl");
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("FLEETCTL_")) {
        cmd.env_remove(key);
    }
    cmd.current_dir(dir)
        .arg("--driver=etcd")
        .arg(format!("--endpoint={endpoint}"))
        .arg(format!("--etcd-key-prefix={PREFIX}"))
        .args(args)
        .timeout(Duration::from_secs(60));
    cmd
}

#[test]
fn submit_list_cat_destroy_like_transcript_11() {
    let c = Cluster::start();
    c.write("hello.service", HELLO);

    c.fleetctl(&["list-machines"]).assert().success().stdout("MACHINE\tIP\tMETADATA\n").stderr("");
    c.fleetctl(&["submit", "hello.service"]).assert().success().stdout("Unit hello.service inactive\n").stderr("");
    // Submitting again is a no-op.
    c.fleetctl(&["submit", "hello.service"]).assert().success().stdout("").stderr("");
    c.fleetctl(&["list-unit-files", "--full", "--fields=unit,hash"])
        .assert()
        .success()
        .stdout(format!("UNIT\t\tHASH\nhello.service\t{HELLO_HASH}\n"));
    c.fleetctl(&["list-unit-files", "--fields=unit,dstate,state,target"])
        .assert()
        .success()
        .stdout("UNIT\t\tDSTATE\t\tSTATE\t\tTARGET\nhello.service\tinactive\tinactive\t-\n");
    c.fleetctl(&["cat", "hello.service"]).assert().success().stdout(HELLO);
    c.fleetctl(&["cat", "no-such.service"]).assert().code(1).stderr("Unit no-such.service not found\n");
    assert_eq!(c.bodies(), [HELLO_HASH]);

    c.fleetctl(&["destroy", "hello.service"]).assert().success().stdout("Destroyed hello.service\n");
    c.fleetctl(&["destroy", "hello.service"]).assert().success().stdout("").stderr("Units not found in registry\n");
    c.fleetctl(&["list-unit-files", "--no-legend"]).assert().success().stdout("");
    // Bodies are the engine leader's to collect (no fleetd runs here): fleetctl deletes none itself.
    assert_eq!(c.bodies(), [HELLO_HASH], "fleetctl is no second garbage collector");
}

#[test]
fn creation_is_validated_like_the_api() {
    let c = Cluster::start();
    c.write("bad name.service", HELLO);
    c.write("empty.service", "");
    c.write(
        "global-machineof.service",
        "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nGlobal=true\nMachineOf=meta-b.service\n",
    );
    c.write("badopt.service", "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nMachineFoo=bar\n");

    c.fleetctl(&["submit", "bad name.service"])
        .assert()
        .code(1)
        .stderr("Error creating units: invalid character ' ' in unit name\n");
    c.fleetctl(&["submit", "global-machineof.service"])
        .assert()
        .code(1)
        .stderr("Error creating units: Global cannot be used with Peers\n");
    // Deliberate difference from the original's etcd driver (which stored an empty unit): refused like the API.
    c.fleetctl(&["submit", "empty.service"]).assert().code(1).stderr(
        "Error creating units: failed creating unit empty.service: unit does not exist and options field empty\n",
    );
    c.fleetctl(&["submit", "badopt.service"])
        .assert()
        .success()
        .stdout("Unit badopt.service inactive\n")
        .stderr(predicate::str::is_match(
            r#"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d WARN \S+: Unit badopt.service: unrecognized requirement in \[X-Fleet\] section: "MachineFoo"\n$"#,
        )
        .unwrap());
    c.fleetctl(&["list-unit-files", "--no-legend", "--fields=unit"]).assert().success().stdout("badopt.service\n");
}

#[test]
fn templates_instances_replace_and_load_no_block() {
    let c = Cluster::start();
    c.write("hello@.service", TEMPLATE);
    c.write("hello.service", HELLO);

    c.fleetctl(&["submit", "hello@.service"]).assert().success().stdout("Unit hello@.service inactive\n");
    // The instance comes from the registry template.
    std::fs::remove_file(c.units.path().join("hello@.service")).unwrap();
    c.fleetctl(&["submit", "hello@1.service"]).assert().success().stdout("Unit hello@1.service inactive\n");
    c.fleetctl(&["cat", "hello@1.service"]).assert().success().stdout(TEMPLATE);
    // A template cannot be activated.
    c.fleetctl(&["load", "--no-block", "hello@.service"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("cannot activate template \"hello@.service\""));

    // The creation step waits for the new unit even with --no-block, as the original does.
    c.fleetctl(&["load", "--no-block", "hello.service"])
        .assert()
        .success()
        .stdout("Unit hello.service inactive\nTriggered unit hello.service load\n");
    c.fleetctl(&["list-unit-files", "--no-legend", "--fields=unit,dstate,state"]).assert().success().stdout(
        "hello.service\tloaded\t\tinactive\nhello@.service\tinactive\tinactive\nhello@1.service\tinactive\tinactive\n",
    );

    // --replace of a loaded unit by `load`: the new body is stored, the old one kept as the previous version.
    c.write("hello.service", HELLO_V2);
    c.fleetctl(&["load", "--no-block", "--replace", "hello.service"]).assert().success();
    c.fleetctl(&["cat", "hello.service"]).assert().success().stdout(HELLO_V2);
    assert_eq!(c.bodies().len(), 3, "template, hello v2 and hello v1 (previous version)");
    c.fleetctl(&["destroy", "hello.service", "hello@.service", "hello@1.service"]).assert().success();
    c.fleetctl(&["list-unit-files", "--no-legend"]).assert().success().stdout("");
    assert_eq!(c.bodies().len(), 3, "bodies are left for the engine leader to collect: {:?}", c.bodies());
}

#[test]
fn machines_states_and_current_state_come_from_the_registry() {
    let c = Cluster::start();
    c.write("hello.service", HELLO);
    c.fleetctl(&["start", "--no-block", "hello.service"])
        .assert()
        .success()
        .stdout("Unit hello.service inactive\nTriggered unit hello.service start\n");

    // Pretend to be fleetd on one machine: presence, schedule, published state, launched marker.
    let lease = pretend_fleetd_runs_hello(&c, "v99.1.0");

    let banner = "####################################################################\n\
                  WARNING: fleetctl (0.1.0) is older than the latest registered\n\
                  version of fleet found in the cluster (99.1.0). You are strongly\n\
                  recommended to upgrade fleetctl to prevent incompatibility issues.\n\
                  ####################################################################\n\n";
    let banner = banner.replace("0.1.0", fleet_core::version::VERSION.trim_start_matches('v'));
    c.fleetctl(&["list-machines"])
        .assert()
        .success()
        .stdout("MACHINE\t\tIP\t\tMETADATA\n8363165e...\t172.17.0.2\trole=a\n")
        .stderr(banner);
    c.fleetctl(&["list-unit-files"]).assert().success().stdout(
        "UNIT\t\tHASH\tDSTATE\t\tSTATE\t\tTARGET\nhello.service\tceced3b\tlaunched\tlaunched\t8363165e.../172.17.0.2\n",
    );
    c.fleetctl(&["list-units"])
        .assert()
        .success()
        .stdout("UNIT\t\tMACHINE\t\t\tACTIVE\tSUB\nhello.service\t8363165e.../172.17.0.2\tactive\trunning\n");
    c.fleetctl(&["stop", "--no-block", "hello.service"])
        .assert()
        .success()
        .stdout("Triggered unit hello.service stop\n");
    c.fleetctl(&["list-unit-files", "--no-legend", "--fields=unit,dstate,state"])
        .assert()
        .success()
        .stdout("hello.service\tloaded\tlaunched\n");
    c.runtime.block_on(lease.revoke()).expect("revoke");
}

#[test]
fn unreachable_etcd_fails_the_command_after_logging_the_version_check() {
    let dir = tempfile::tempdir().unwrap();
    fleetctl_at("http://127.0.0.1:1", dir.path(), &["--request-timeout=1", "list-units"])
        .assert()
        .code(1)
        .stdout("")
        .stderr(predicate::str::is_match(
            r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ERROR \S+: error attempting to check latest fleet version in Registry: .*\nError retrieving list of units from repository: .+\n$",
        )
        .unwrap());
}

#[test]
fn rollouts_are_decided_stored_shown_and_controlled_on_the_registry() {
    use fleet_core::rollout::{Action, Control, RolloutKind};
    let c = Cluster::start();
    c.write("hello.service", HELLO);
    c.fleetctl(&["start", "--no-block", "hello.service"]).assert().success();
    c.write("hello.service", HELLO_V2);
    let stored = |id: &str| {
        let snapshot = c.runtime.block_on(c.registry().read_snapshot()).expect("read registry");
        snapshot.rollout_records().get(id).and_then(|r| r.rollout()).unwrap_or_else(|| panic!("rollout {id} stored"))
    };

    // No fleetd runs here: the rollout is stored as the API would store it, and stays as stored.
    let out = c
        .fleetctl(&["start", "--replace", "--rolling", "--no-block", "--max-unavailable=2", "hello.service"])
        .assert()
        .success()
        .stderr("")
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).expect("utf-8");
    let id = out.strip_prefix("Rollout ").and_then(|r| r.split(' ').next()).expect("rollout ID").to_string();
    assert_eq!(out, format!("Rollout {id} started: replace hello.service\n"));
    let rollout = stored(&id);
    let v2 = fleet_core::unit::UnitFile::parse(HELLO_V2).expect("parses").hash().to_hex();
    let unit = &rollout.spec.units[0];
    assert_eq!(
        (rollout.spec.kind, rollout.spec.max_unavailable, rollout.spec.min_healthy_ms, unit.from.as_str(), &unit.to),
        (RolloutKind::Replace, 2, 10_000, HELLO_HASH, &v2)
    );
    c.fleetctl(&["cat", "hello.service"]).assert().success().stdout(HELLO_V2);
    assert!(c.bodies().contains(&HELLO_HASH.to_string()), "the old version is kept for the machines not yet changed");

    c.fleetctl(&["rollout-status", "--no-block", "hello"])
        .assert()
        .success()
        .stdout(format!("Rollout {id} replace running\nMACHINE\tUNIT\tPHASE\tDETAIL\n"));
    // A unit in a rollout that has not ended takes no other (the API's rule, without the HTTP prefix).
    c.fleetctl(&["restart", "--rolling", "--no-block", "hello.service"])
        .assert()
        .code(1)
        .stderr(format!("Error starting rollout: unit \"hello.service\" is in rollout {id:?} (running)\n"));

    c.fleetctl(&["rollout-pause", "hello"]).assert().success().stdout(format!("Rollout {id} paused\n"));
    assert_eq!(stored(&id).control, Control { action: Action::Pause, resumes: 0, ..Control::default() });
    c.fleetctl(&["rollout-resume", &id]).assert().success().stdout(format!("Rollout {id} resumed\n"));
    assert_eq!(stored(&id).control, Control { action: Action::Run, resumes: 1, ..Control::default() });
    c.fleetctl(&["rollout-abort", "hello.service"]).assert().success().stdout(format!("Rollout {id} aborted\n"));
    assert_eq!(stored(&id).control, Control { action: Action::Abort, resumes: 1, ..Control::default() });

    c.fleetctl(&["restart", "--rolling", "nope.service"])
        .assert()
        .code(1)
        .stderr("Error starting rollout: unit nope.service does not exist: a rolling restart changes launched units\n");
    c.fleetctl(&["rollout-pause", "nope"])
        .assert()
        .code(1)
        .stderr("No rollout of unit nope.service is in progress (and no rollout has the ID \"nope\")\n");
}

#[test]
fn output_json_of_the_real_binary_reads_the_registry() {
    let c = Cluster::start();
    c.write("hello.service", HELLO);
    c.fleetctl(&["start", "--no-block", "hello.service"]).assert().success();
    let lease = pretend_fleetd_runs_hello(&c, fleet_core::version::VERSION);
    let json_of = |args: &[&str]| -> serde_json::Value {
        let out = c.fleetctl(args).assert().success().stderr("").get_output().stdout.clone();
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", String::from_utf8_lossy(&out)))
    };
    assert_eq!(
        json_of(&["list-machines", "--output=json"]),
        serde_json::json!({"machines": [
            {"id": MACHINE, "primaryIP": "172.17.0.2", "metadata": {"role": "a"}, "state": "ready"}
        ]})
    );
    let states = json_of(&["list-units", "--output=json"]);
    assert_eq!(
        (&states["states"][0]["name"], &states["states"][0]["hash"], &states["states"][0]["systemdSubState"]),
        (&serde_json::json!("hello.service"), &serde_json::json!(HELLO_HASH), &serde_json::json!("running")),
        "{states}"
    );
    assert_eq!(states["states"][0]["machineIP"], "172.17.0.2", "{states}");
    let files = json_of(&["list-unit-files", "--output=json"]);
    assert_eq!(
        files,
        serde_json::json!({"units": [{"name": "hello.service", "hash": HELLO_HASH, "description": "Hello World",
            "global": false, "desiredState": "launched", "currentState": "launched", "machineID": MACHINE,
            "machineIP": "172.17.0.2"}]})
    );
    assert_eq!(
        json_of(&["cat", "--output=json", "hello"]),
        serde_json::json!({"name": "hello.service", "hash": HELLO_HASH, "content": HELLO})
    );
    c.fleetctl(&["list-units", "--output=xml"])
        .assert()
        .code(1)
        .stdout("")
        .stderr("Invalid --output \"xml\": valid values are \"text\" and \"json\"\n");
    c.runtime.block_on(lease.revoke()).expect("revoke");
}

/// Runs `fleetctl <args>` (the etcd driver against this etcd) with stdout and stderr on a pseudo-terminal
/// (util-linux `script`), returning everything the terminal received.
fn fleetctl_on_a_terminal(c: &Cluster, args: &[&str]) -> String {
    let bin = assert_cmd::cargo::cargo_bin!("fleetctl");
    let mut line =
        format!("'{}' --driver=etcd --endpoint={} --etcd-key-prefix={PREFIX}", bin.display(), c.etcd.endpoint());
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    let out = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .current_dir(c.units.path())
        .env_remove("FLEETCTL_NO_PROGRESS")
        .output()
        .expect("script(1) from util-linux runs fleetctl on a pseudo-terminal");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn on_a_terminal_waiting_draws_a_progress_line_and_erases_it_before_other_output() {
    const ERASE: &str = "\r\x1b[2K";
    let c = Cluster::start();
    c.write("hello.service", HELLO);
    // No fleetd runs: the start waits its one attempt (8 polls) for a state that never comes, then gives up.
    let screen = fleetctl_on_a_terminal(&c, &["start", "--block-attempts=1", "hello.service"]);
    assert!(screen.starts_with("Unit hello.service inactive\r\n"), "{screen:?}");
    assert!(
        screen.contains(&format!("{ERASE}start: 0/1 launched · waiting: hello.service (inactive) · ")),
        "the line says what is waited for, how far and where: {screen:?}"
    );
    assert!(
        screen.contains(&format!("s{ERASE}Error waiting for units: timed out waiting for unit hello.service")),
        "the line is erased before the error: {screen:?}"
    );
    assert!(screen.trim_end().ends_with("to report state launched"), "nothing drawn after the end: {screen:?}");
    // With --no-progress a terminal gets exactly what a pipe gets.
    c.fleetctl(&["destroy", "hello.service"]).assert().success();
    let screen = fleetctl_on_a_terminal(&c, &["--no-progress", "start", "--block-attempts=1", "hello.service"]);
    assert!(!screen.contains(ERASE), "{screen:?}");
    assert_eq!(
        screen,
        "Unit hello.service inactive\r\n\
         Error waiting for units: timed out waiting for unit hello.service to report state launched\r\n\
         Error waiting for unit states, exit status: timed out waiting for unit hello.service to report state launched\r\n"
    );
}

/// Issue 38: `cordon`/`uncordon` with `--driver=etcd` write the API's key (`P/machines/<id>/cordon`) with the API's
/// decision: 404 for an unknown machine, idempotent, shown by list-machines only when asked.
#[test]
fn cordon_and_uncordon_write_the_apis_key() {
    let c = Cluster::start();
    c.write("hello.service", HELLO);
    c.fleetctl(&["start", "--no-block", "hello.service"]).assert().success();
    let _lease = pretend_fleetd_runs_hello(&c, fleet_core::version::VERSION);
    let cordon_key = fleet_registry::Keys::new(PREFIX).machine_cordon(MACHINE);
    let stored = || {
        let reg = c.registry();
        let snapshot = c.runtime.block_on(reg.read_machines_snapshot()).expect("read machines");
        assert_eq!(snapshot.machines().count(), 1);
        snapshot.machine_records()[MACHINE].cordon.is_some()
    };
    c.fleetctl(&["cordon", "8363"]).assert().success().stdout(format!("Machine {MACHINE} cordoned\n")).stderr("");
    assert!(stored(), "{cordon_key} written");
    c.fleetctl(&["cordon", MACHINE])
        .assert()
        .success()
        .stdout(format!("Machine {MACHINE} cordoned (it already was)\n"));
    c.fleetctl(&["list-machines", "--fields=machine,state", "--no-legend"])
        .assert()
        .success()
        .stdout("8363165e...\tcordoned\n");
    c.fleetctl(&["list-machines", "--no-legend"]).assert().success().stdout("8363165e...\t172.17.0.2\trole=a\n");
    c.fleetctl(&["cordon", "ffff"]).assert().code(1).stderr("Error cordoning machine ffff: machine does not exist\n");
    c.fleetctl(&["uncordon", "8363"]).assert().success().stdout(format!("Machine {MACHINE} uncordoned\n"));
    assert!(!stored(), "{cordon_key} deleted");
}

/// Writes through the etcd driver are recorded in the audit trail as such (issue 38): `via: etcd-driver`, named
/// `user@host`, with the status the API would have answered; `audit` and `history` read them back.
#[test]
fn writes_through_the_etcd_driver_are_audited_as_such() {
    let c = Cluster::start();
    c.write("hello.service", HELLO);
    c.fleetctl(&["submit", "hello.service"]).assert().success();
    c.fleetctl(&["destroy", "hello.service"]).assert().success();
    c.fleetctl(&["list-units"]).assert().success();

    let records = c.runtime.block_on(c.registry().read_audit(0)).expect("read the audit trail");
    let records: Vec<fleet_core::audit::AuditRecord> = records.into_iter().map(|(_, r)| r.expect("decodes")).collect();
    let shown: Vec<(&str, u16)> = records.iter().map(|r| (r.action.as_str(), r.status)).collect();
    assert_eq!(shown, [("submit hello.service", 201), ("destroy hello.service", 204)], "{records:?}");
    let who = &records[0].who;
    assert_eq!(who.via, fleet_core::audit::Via::EtcdDriver);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert!(who.name.ends_with(&format!("@{}", host.trim())), "user@host: {who:?}");
    assert_eq!(records[1].path, "/fleet/v1/units/hello.service");

    c.fleetctl(&["audit", "--no-legend", "hello.service"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("{} (etcd-driver)\tsubmit hello.service\t201\n", who.name)));
    c.fleetctl(&["submit", "hello.service"]).assert().success();
    c.fleetctl(&["history", "--no-legend", "hello.service"])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("\t{} (etcd-driver)\t*", who.name)));
}

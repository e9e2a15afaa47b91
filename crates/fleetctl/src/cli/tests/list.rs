//! list-machines, list-units and list-unit-files as whole invocations against the fake cluster.

use super::{cluster, run};
use crate::client::ClientError;
use fleet_core::schema::UnitState;

const HELLO: &str =
    "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi; sleep 1; done\"\n";
const GLOBAL: &str = "[Unit]\nDescription=Global unit on every machine\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo global; sleep 5; done\"\n\n[X-Fleet]\nGlobal=true\n";

fn meta_cluster() -> std::sync::Arc<crate::client::fake::FakeClient> {
    let c = cluster();
    for (id, host, role) in [
        ("8363165e6276f500b71169eca9b3f76b", "m1", "a"),
        ("8606e1a2949979fb223fb4bad77d152c", "m2", "b"),
        ("d91d98fca203da3cb89fb5c100ed0823", "m3", "c"),
    ] {
        c.set_metadata(id, "hostname", host);
        c.set_metadata(id, "role", role);
    }
    c
}

#[test]
fn list_machines_variants_match_transcript_02() {
    let c = meta_cluster();
    let o = run(&c, &["list-machines"]);
    assert_eq!(o.code, 0);
    assert_eq!(
        o.out,
        "MACHINE\t\tIP\t\tMETADATA\n8363165e...\t172.17.0.2\thostname=m1,role=a\n8606e1a2...\t172.17.0.3\thostname=m2,role=b\nd91d98fc...\t172.17.0.4\thostname=m3,role=c\n"
    );
    let full = "MACHINE\t\t\t\t\tIP\t\tMETADATA\n8363165e6276f500b71169eca9b3f76b\t172.17.0.2\thostname=m1,role=a\n8606e1a2949979fb223fb4bad77d152c\t172.17.0.3\thostname=m2,role=b\nd91d98fca203da3cb89fb5c100ed0823\t172.17.0.4\thostname=m3,role=c\n";
    for flag in ["--full", "--l", "-l"] {
        assert_eq!(run(&c, &["list-machines", flag]).out, full, "{flag}");
    }
    assert_eq!(
        run(&c, &["list-machines", "--no-legend"]).out,
        "8363165e...\t172.17.0.2\thostname=m1,role=a\n8606e1a2...\t172.17.0.3\thostname=m2,role=b\nd91d98fc...\t172.17.0.4\thostname=m3,role=c\n"
    );
    assert_eq!(
        run(&c, &["list-machines", "--fields=machine,ip"]).out,
        "MACHINE\t\tIP\n8363165e...\t172.17.0.2\n8606e1a2...\t172.17.0.3\nd91d98fc...\t172.17.0.4\n"
    );
    assert_eq!(
        run(&c, &["list-machines", "--fields=metadata", "--full"]).out,
        "METADATA\nhostname=m1,role=a\nhostname=m2,role=b\nhostname=m3,role=c\n"
    );
}

#[test]
fn list_field_errors() {
    let c = cluster();
    let o = run(&c, &["list-machines", "--fields=bogus"]);
    assert_eq!((o.code, o.err.as_str(), o.out.as_str()), (1, "Invalid key in output format: \"bogus\"\n", ""));
    let o = run(&c, &["list-machines", "--fields=machine,bogus"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Invalid key in output format: \"bogus\"\n"));
    let o = run(&c, &["list-machines", "--fields="]);
    assert_eq!((o.code, o.err.as_str()), (1, "Must define output format\n"));
    let o = run(&c, &["list-units", "--fields=bogus"]);
    assert_eq!(o.code, 1);
    let o = run(&c, &["list-unit-files", "--fields=machine"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Invalid key in output format: \"machine\"\n"));
}

#[test]
fn fetch_errors_print_the_originals_lines() {
    let c = cluster();
    c.fail_all(Some(ClientError::Other("boom".into())));
    let o = run(&c, &["list-machines"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.err,
        "Error retrieving list of active machines from fleet API (boom)\nPossible issues:\n  etcd is unhealthy and/or lost quorum\n  connection cannot be established to any etcd servers\n"
    );
    let o = run(&c, &["list-units"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Error retrieving list of units from repository: boom\n"));
    let o = run(&c, &["list-unit-files"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Error retrieving list of units from repository: boom\n"));
}

#[test]
fn empty_lists_print_only_the_header() {
    let c = cluster();
    assert_eq!(run(&c, &["list-units"]).out, "UNIT\tMACHINE\tACTIVE\tSUB\n");
    assert_eq!(run(&c, &["list-unit-files"]).out, "UNIT\tHASH\tDSTATE\tSTATE\tTARGET\n");
}

#[test]
fn list_units_and_unit_files_match_transcript_03() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "loaded");
    assert_eq!(
        run(&c, &["list-unit-files"]).out,
        "UNIT\t\tHASH\tDSTATE\tSTATE\tTARGET\nhello.service\tceced3b\tloaded\tloaded\t8363165e.../172.17.0.2\n"
    );
    assert_eq!(
        run(&c, &["list-units"]).out,
        "UNIT\t\tMACHINE\t\t\tACTIVE\t\tSUB\nhello.service\t8363165e.../172.17.0.2\tinactive\tdead\n"
    );
    c.insert_unit("hello.service", HELLO, "launched");
    assert_eq!(
        run(&c, &["list-units", "--full"]).out,
        "UNIT\t\tMACHINE\t\t\t\t\t\tACTIVE\tSUB\nhello.service\t8363165e6276f500b71169eca9b3f76b/172.17.0.2\tactive\trunning\n"
    );
    c.insert_unit("hello.service", HELLO, "inactive");
    assert_eq!(
        run(&c, &["list-unit-files"]).out,
        "UNIT\t\tHASH\tDSTATE\t\tSTATE\t\tTARGET\nhello.service\tceced3b\tinactive\tinactive\t-\n"
    );
}

#[test]
fn global_units_show_dash_state_and_global_target() {
    let c = cluster();
    c.insert_unit("global.service", GLOBAL, "launched");
    let o = run(&c, &["list-unit-files", "--fields=unit,global,dstate,state,target"]);
    assert_eq!(o.out, "UNIT\t\tGLOBAL\tDSTATE\t\tSTATE\tTARGET\nglobal.service\ttrue\tlaunched\t-\tglobal\n");
    let o = run(&c, &["list-units", "--no-legend", "--fields=unit,hash,load"]);
    assert_eq!(o.out.lines().count(), 3);
    assert!(o.out.starts_with("global.service\t2e39e56\tloaded\n"), "{}", o.out);
}

#[test]
fn list_unit_files_all_fields_and_tmachine_warning() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    let o = run(&c, &["list-unit-files", "--fields=unit,desc,global,hash,dstate,state,target,tmachine"]);
    assert_eq!(o.err, "WARNING: The \"tmachine\" field is deprecated. Use \"target\" instead\n");
    assert_eq!(
        o.out,
        "UNIT\t\tDESC\t\tGLOBAL\tHASH\tDSTATE\t\tSTATE\t\tTARGET\t\t\tTMACHINE\nhello.service\tHello World\tfalse\tceced3b\tlaunched\tlaunched\t8363165e.../172.17.0.2\t8363165e.../172.17.0.2\n"
    );
}

#[test]
fn running_hash_field_and_lag_note_only_when_a_machine_runs_an_older_version() {
    let c = cluster();
    let state = |name: &str, hash: &str, running: &str| UnitState {
        hash: hash.into(),
        machine_id: "ffffffffffffffffffffffffffffffff".into(),
        name: name.into(),
        systemd_active_state: "active".into(),
        systemd_load_state: "loaded".into(),
        systemd_sub_state: "running".into(),
        machine_presence: String::new(),
        health: None,
        running_hash: running.into(),
    };
    let new = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    let old = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    c.push_state(state("level.service", new, new));
    c.push_state(state("stopped.service", new, ""));
    let o = run(&c, &["list-units", "--no-legend", "--fields=unit,hash,running-hash"]);
    assert_eq!(
        o.out,
        "level.service	bbbbbbb	bbbbbbb
stopped.service	bbbbbbb	-
"
    );
    assert_eq!(o.err, "", "nothing lags");
    c.push_state(state("db.service", new, old));
    let o = run(&c, &["list-units", "--no-legend", "--full", "--fields=unit,running-hash"]);
    assert!(
        o.out.starts_with(&format!(
            "db.service	{old}
"
        )),
        "{}",
        o.out
    );
    assert!(o.err.contains("1 unit(s) run an older version than their unit file"), "{}", o.err);
    assert!(o.err.contains("db.service on ffffffff"), "{}", o.err);
    // The default table is the original's, whatever lags.
    let o = run(&c, &["list-units", "--no-legend"]);
    assert!(
        o.out.starts_with(
            "db.service	ffffffff...	active	running
"
        ),
        "{}",
        o.out
    );
    assert_eq!(run(&c, &["list-units", "--fields=unit,nope"]).code, 1);
}

#[test]
fn list_units_machine_without_known_machine_has_no_ip() {
    let c = cluster();
    c.push_state(UnitState {
        hash: String::new(),
        machine_id: "ffffffffffffffffffffffffffffffff".into(),
        name: "x.service".into(),
        systemd_active_state: "active".into(),
        systemd_load_state: "loaded".into(),
        systemd_sub_state: "running".into(),
        machine_presence: String::new(),
        health: None,
        running_hash: String::new(),
    });
    let o = run(&c, &["list-units", "--no-legend", "--fields=unit,machine,hash"]);
    assert_eq!(o.out, "x.service\tffffffff...\t-\n");
}

#[test]
fn list_units_health_field_shows_each_status_and_a_dash_without_a_check() {
    use fleet_core::model::{Health, HealthStatus};
    let c = cluster();
    let state = |name: &str, health: Option<HealthStatus>| UnitState {
        machine_id: "ffffffffffffffffffffffffffffffff".into(),
        name: name.into(),
        systemd_active_state: "active".into(),
        health: health.map(|status| Health { status, since_ms: 1, output: String::new() }),
        ..Default::default()
    };
    c.push_state(state("a.service", Some(HealthStatus::Healthy)));
    c.push_state(state("b.service", Some(HealthStatus::Unhealthy)));
    c.push_state(state("c.service", Some(HealthStatus::Unknown)));
    c.push_state(state("d.service", None));
    let o = run(&c, &["list-units", "--fields=unit,machine,active,health"]);
    assert_eq!(
        o.out,
        "UNIT\t\tMACHINE\t\tACTIVE\tHEALTH\n\
             a.service\tffffffff...\tactive\thealthy\n\
             b.service\tffffffff...\tactive\tunhealthy\n\
             c.service\tffffffff...\tactive\tunknown\n\
             d.service\tffffffff...\tactive\t-\n"
    );
    let default = run(&c, &["list-units", "--no-legend"]);
    assert!(!default.out.contains("healthy") && !default.out.contains("unknown"), "{}", default.out);
    assert!(run(&c, &["list-units"]).out.starts_with("UNIT\t\tMACHINE\t\tACTIVE\tSUB\n"), "default columns");
}

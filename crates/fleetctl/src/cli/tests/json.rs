//! `--output=json` of every command that has it, against the fake cluster: the documents, their stable field names
//! and full hashes, and that bad values are refused.

use serde_json::{Value, json};

use super::{cluster, run};
use crate::cli::json::*;
use fleet_core::unit::UnitFile;

const HELLO: &str =
    "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi; sleep 1; done\"\n";
const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 1000\n\n[X-Fleet]\nGlobal=true\n";
const GLOBAL_V2: &str = "[Service]\nExecStart=/bin/sleep 2000\n\n[X-Fleet]\nGlobal=true\n";
const M1: &str = "8363165e6276f500b71169eca9b3f76b";

fn parsed(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn full_hash(text: &str) -> String {
    UnitFile::parse(text).unwrap().hash().to_hex()
}

#[test]
fn list_machines_json_has_ids_ips_and_metadata_in_full() {
    let c = cluster();
    c.set_metadata(M1, "role", "db");
    let o = run(&c, &["list-machines", "--output=json"]);
    assert_eq!((o.code, o.err.as_str()), (0, ""));
    assert_eq!(
        parsed(&o.out),
        json!({"machines": [
            {"id": M1, "primaryIP": "172.17.0.2", "metadata": {"role": "db"}, "state": "ready"},
            {"id": "8606e1a2949979fb223fb4bad77d152c", "primaryIP": "172.17.0.3", "metadata": {}, "state": "ready"},
            {"id": "d91d98fca203da3cb89fb5c100ed0823", "primaryIP": "172.17.0.4", "metadata": {}, "state": "ready"},
        ]})
    );
    // --fields, --full and --no-legend only shape the table.
    assert_eq!(run(&c, &["list-machines", "--output=json", "--fields=ip", "--no-legend"]).out, o.out);
}

#[test]
fn list_units_json_gives_every_state_field_with_full_hashes() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    let o = run(&c, &["list-units", "--output", "json"]);
    assert_eq!((o.code, o.err.as_str()), (0, ""));
    let doc = parsed(&o.out);
    let hash = full_hash(HELLO);
    assert_eq!(hash.len(), 40);
    assert_eq!(
        doc,
        json!({"states": [{
            "name": "hello.service", "machineID": M1, "machineIP": "172.17.0.2", "machinePresence": "present",
            "systemdLoadState": "loaded", "systemdActiveState": "active", "systemdSubState": "running",
            "hash": hash, "runningHash": doc["states"][0]["runningHash"], "health": null,
        }]})
    );
}

#[test]
fn list_units_json_gives_the_health_of_checked_units() {
    let c = cluster();
    c.push_state(fleet_core::schema::UnitState {
        name: "web.service".into(),
        machine_id: M1.into(),
        systemd_active_state: "active".into(),
        health: Some(fleet_core::model::Health {
            status: fleet_core::model::HealthStatus::Unhealthy,
            since_ms: 1_764_566_400_000,
            output: "connection refused".into(),
        }),
        ..Default::default()
    });
    let doc = parsed(&run(&c, &["list-units", "--output=json"]).out);
    assert_eq!(
        doc["states"][0]["health"],
        json!({"status": "unhealthy", "sinceMs": 1_764_566_400_000u64, "output": "connection refused"})
    );
}

#[test]
fn list_unit_files_json_has_null_state_and_machine_for_global_units() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    c.insert_unit("global.service", GLOBAL, "launched");
    let o = run(&c, &["list-unit-files", "--output=json"]);
    assert_eq!((o.code, o.err.as_str()), (0, ""));
    assert_eq!(
        parsed(&o.out),
        json!({"units": [
            {"name": "global.service", "hash": full_hash(GLOBAL), "description": "", "global": true,
             "desiredState": "launched", "currentState": null, "machineID": null, "machineIP": null},
            {"name": "hello.service", "hash": full_hash(HELLO), "description": "Hello World", "global": false,
             "desiredState": "launched", "currentState": "launched", "machineID": M1, "machineIP": "172.17.0.2"},
        ]})
    );
}

#[test]
fn cat_json_carries_exactly_the_text_cat_prints_and_the_full_hash() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    let text = run(&c, &["cat", "hello"]).out;
    let o = run(&c, &["cat", "--output=json", "hello"]);
    assert_eq!((o.code, o.err.as_str()), (0, ""));
    assert_eq!(parsed(&o.out), json!({"name": "hello.service", "hash": full_hash(HELLO), "content": text}));
    let o = run(&c, &["cat", "--output=json", "nope"]);
    assert_eq!((o.code, o.out.as_str(), o.err.as_str()), (1, "", "Unit nope.service not found\n"));
}

#[test]
fn history_and_rollout_status_json() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    c.insert_unit("db.service", GLOBAL, "launched");
    let f = dir.path().join("db.service");
    std::fs::write(&f, GLOBAL_V2).unwrap();
    let o = run(&c, &["start", "--replace", "--rolling", "--min-healthy=0", f.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}{}", o.out, o.err);

    let o = run(&c, &["history", "--output=json", "db"]);
    assert_eq!((o.code, o.err.as_str()), (0, ""));
    let doc = parsed(&o.out);
    assert_eq!(doc["name"], "db.service");
    let versions = doc["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{doc}");
    assert_eq!(
        (&versions[0]["hash"], &versions[0]["current"], &versions[0]["hasFile"]),
        (&json!(full_hash(GLOBAL_V2)), &json!(true), &json!(true))
    );
    assert_eq!((&versions[1]["hash"], &versions[1]["current"]), (&json!(full_hash(GLOBAL)), &json!(false)));
    assert!(versions.iter().all(|v| v["storedMs"].is_u64() || v["storedMs"].is_null()), "{doc}");

    let o = run(&c, &["rollout-status", "--output=json", "db"]);
    assert_eq!((o.code, o.err.as_str()), (0, ""));
    let doc = parsed(&o.out);
    assert_eq!((&doc["kind"], &doc["state"], &doc["reason"]), (&json!("replace"), &json!("done"), &json!("")));
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "{doc}");
    assert!(steps.iter().all(|s| s["phase"] == "done" && s["machine"].as_str().unwrap().len() == 32), "{doc}");
    assert_eq!(doc["units"][0]["to"], json!(full_hash(GLOBAL_V2)));
}

#[test]
fn unknown_output_formats_are_refused_on_every_command() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    for cmd in JSON_COMMANDS {
        let mut args = vec![cmd, "--output=yaml"];
        if !cmd.starts_with("list-") {
            args.push("hello.service");
        }
        let o = run(&c, &args);
        assert_eq!(
            (o.code, o.out.as_str(), o.err.as_str()),
            (1, "", "Invalid --output \"yaml\": valid values are \"text\" and \"json\"\n"),
            "{cmd}"
        );
    }
    // text is today's output, byte for byte.
    for cmd in ["list-units", "list-unit-files", "list-machines"] {
        assert_eq!(run(&c, &[cmd, "--output=text"]).out, run(&c, &[cmd]).out, "{cmd}");
    }
    assert!(parse_format("json").is_ok() && parse_format("JSON").is_err());
}

//! submit, load, start, stop, unload, destroy, restart and cat as whole invocations against the fake cluster: what
//! they print, what they send, and how they wait.

use std::path::Path;

use super::{cluster, run};

const HELLO: &str =
    "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi; sleep 1; done\"\n";
const HELLO_V2: &str =
    "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi-v2; sleep 1; done\"\n";
const TEMPLATE: &str = "[Unit]\nDescription=Hello template instance %i\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hello %i; sleep 1; done\"\n";
const GLOBAL: &str = "[Unit]\nDescription=Global unit on every machine\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo global; sleep 5; done\"\n\n[X-Fleet]\nGlobal=true\n";
const M1: &str = "8363165e.../172.17.0.2";

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn no_units_given() {
    let c = cluster();
    for cmd in ["submit", "load", "start", "stop", "unload", "destroy", "restart"] {
        let o = run(&c, &[cmd]);
        assert_eq!((o.code, o.err.as_str(), o.out.as_str()), (0, "No units given\n", ""), "{cmd}");
    }
}

#[test]
fn start_creates_waits_and_reports_the_machine() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let f = write(dir.path(), "hello.service", HELLO);
    let o = run(&c, &["start", &f]);
    assert_eq!(o.code, 0, "{}", o.err);
    assert_eq!(o.out, format!("Unit hello.service inactive\nUnit hello.service launched on {M1}\n"));
    assert_eq!(o.err, "");
    assert_eq!(c.log(), ["create hello.service launched"], "one write: created launched");
    // Already launched: nothing to do, nothing printed.
    let o = run(&c, &["start", &f]);
    assert_eq!((o.code, o.out.as_str(), o.err.as_str()), (0, "", ""));
    assert_eq!(c.unit_text("hello.service").unwrap(), HELLO);
}

#[test]
fn start_without_extension_finds_the_service_file() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    write(dir.path(), "hello.service", HELLO);
    let arg = dir.path().join("hello").display().to_string();
    let o = run(&c, &["load", &arg]);
    assert_eq!(o.out, format!("Unit hello.service inactive\nUnit hello.service loaded on {M1}\n"));
}

#[test]
fn start_no_block_prints_triggered_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let f = write(dir.path(), "hello.service", HELLO);
    let o = run(&c, &["start", "--no-block", &f]);
    assert_eq!(o.out, "Unit hello.service inactive\nTriggered unit hello.service start\n");
}

/// From `parallel::LIST_LOOKUPS_FROM` units on, lookups and waits use one listing per step: the output is
/// still the per-unit one, in argument order, and the cluster gets the same writes.
#[test]
fn many_units_print_and_write_as_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let names: Vec<String> = (0..40).map(|i| format!("many{i}.service")).collect();
    let files: Vec<String> = names.iter().map(|n| write(dir.path(), n, HELLO)).collect();
    let args = |cmd: &[&'static str]| cmd.iter().copied().chain(files.iter().map(String::as_str)).collect::<Vec<_>>();
    // Every 7th unit is launched already: neither created nor triggered, so a lookup answered for the wrong
    // name shows.
    let launched = |i: usize| i % 7 == 3;
    for (i, n) in names.iter().enumerate().filter(|(i, _)| launched(*i)) {
        c.insert_unit(n, &format!("{HELLO}# {i}\n"), "launched");
    }
    let fresh = || names.iter().enumerate().filter(|(i, _)| !launched(*i)).map(|(_, n)| n);
    let o = run(&c, &args(&["start", "--no-block"]));
    let inactive: String = fresh().map(|n| format!("Unit {n} inactive\n")).collect();
    let triggered: String = fresh().map(|n| format!("Triggered unit {n} start\n")).collect();
    assert_eq!((o.code, o.out, o.err), (0, format!("{inactive}{triggered}"), String::new()));
    let log = c.log();
    for n in fresh() {
        // Created launched in one write (issue 35), not created inactive and then set.
        assert!(log.contains(&format!("create {n} launched")) && !log.contains(&format!("set {n} launched")), "{n}");
    }
    let o = run(&c, &args(&["destroy"]));
    let destroyed: String = names.iter().map(|n| format!("Destroyed {n}\n")).collect();
    assert_eq!((o.code, o.out, o.err), (0, destroyed, String::new()));
    assert!(names.iter().all(|n| c.log().contains(&format!("destroy {n}"))));
    assert_eq!(run(&c, &["list-unit-files", "--no-legend"]).out, "");
}

#[test]
fn start_that_never_converges_times_out_with_the_originals_messages() {
    let c = cluster();
    c.set_converge(false);
    c.insert_unit("meta-none.service", HELLO, "inactive");
    let o = run(&c, &["start", "--block-attempts=2", "meta-none.service"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.err,
        "Error waiting for units: timed out waiting for unit meta-none.service to report state launched\nError waiting for unit states, exit status: timed out waiting for unit meta-none.service to report state launched\n"
    );
}

#[test]
fn start_waits_for_systemd_activity_across_lag() {
    let c = cluster();
    c.set_lag(5);
    c.insert_unit("hello.service", HELLO, "inactive");
    let o = run(&c, &["start", "--block-attempts=3", "hello.service"]);
    assert_eq!((o.code, o.out.as_str()), (0, format!("Unit hello.service launched on {M1}\n").as_str()), "{}", o.err);
}

#[test]
fn global_units_are_triggered_and_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let f = write(dir.path(), "global.service", GLOBAL);
    let o = run(&c, &["start", "--block-attempts=2", &f]);
    assert_eq!((o.code, o.out.as_str()), (0, "Unit global.service \nTriggered global unit global.service start\n"));
    let o = run(&c, &["stop", "global.service"]);
    assert_eq!(o.out, "Triggered global unit global.service stop\n");
    assert_eq!(o.err, "Successfully stopped units [].\n");
    let o = run(&c, &["unload", "global.service"]);
    assert_eq!(o.out, "Triggered global unit global.service unload\n");
    assert_eq!(o.err, "Successfully unloaded units [].\n");
    let o = run(&c, &["load", "global.service"]);
    assert_eq!((o.code, o.out.as_str()), (0, "Triggered global unit global.service load\n"));
}

#[test]
fn global_start_waits_for_every_eligible_machine_not_just_the_reporting_ones() {
    use fleet_core::schema::UnitState;
    use fleet_core::unit::UnitFile;
    let c = cluster();
    c.insert_unit("global.service", GLOBAL, "inactive");
    c.set_converge(false);
    // Only the first machine has reported the unit active; the others are eligible (no metadata required) but
    // have not reported yet: start must keep waiting.
    let first = crate::client::Client::machines(&c).unwrap()[0].id.clone();
    c.push_state(UnitState {
        hash: UnitFile::parse(GLOBAL).unwrap().hash().to_hex(),
        machine_id: first,
        name: "global.service".into(),
        systemd_active_state: "active".into(),
        systemd_load_state: "loaded".into(),
        systemd_sub_state: "running".into(),
        machine_presence: String::new(),
        health: None,
        running_hash: String::new(),
    });
    let o = run(&c, &["start", "--block-attempts=1", "global.service"]);
    assert_eq!(o.code, 1, "{}", o.out);
    assert!(o.err.contains("to report state launched on every machine (1 of "), "{}", o.err);
    // With converging agents every machine reports it and start returns.
    c.set_converge(true);
    let o = run(&c, &["start", "--block-attempts=1", "global.service"]);
    assert_eq!(o.code, 0, "{}", o.err);
}

#[test]
fn global_start_times_out_when_machines_never_report_it() {
    let c = cluster();
    c.insert_unit("global.service", GLOBAL, "inactive");
    c.set_converge(false);
    let o = run(&c, &["start", "--block-attempts=1", "global.service"]);
    assert_eq!(o.code, 1);
    assert!(o.err.contains("timed out waiting for global unit global.service to report state launched"), "{}", o.err);
    let o = run(&c, &["start", "--no-block", "global.service"]);
    assert_eq!(o.code, 0);
}

#[test]
fn creation_errors() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let d = |n: &str| dir.path().join(n).display().to_string();
    let o = run(&c, &["submit", &d("no-such-file.service")]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (1, "Error creating units: unable to find Unit(no-such-file.service) in Registry or on filesystem\n")
    );
    let o = run(&c, &["submit", &d("no-such@1.service")]);
    assert_eq!(
        o.err,
        "Error creating units: failed getting Unit(".to_string()
            + &d("no-such@1.service")
            + ") from template: unable to find template Unit(no-such@.service) in Registry or on filesystem\n"
    );
    let o = run(&c, &["start", &d("no-such@.service")]);
    assert_eq!(o.err, "Error creating units: unable to find Unit(no-such@.service) in Registry or on filesystem\n");
    let bad = write(dir.path(), "bad name.service", HELLO);
    assert_eq!(run(&c, &["submit", &bad]).err, "Error creating units: invalid character ' ' in unit name\n");
    let empty = write(dir.path(), "empty.service", "");
    assert_eq!(
        run(&c, &["submit", &empty]).err,
        "Error creating units: failed creating unit empty.service: googleapi: Error 409: unit does not exist and options field empty\n"
    );
    let garbage = write(dir.path(), "garbage.service", "[Unit\nfoo=bar\n");
    assert_eq!(
        run(&c, &["submit", &garbage]).err,
        format!("Error creating units: failed getting Unit({garbage}) from file: unable to find end of section\n")
    );
    let gm = write(
        dir.path(),
        "gm.service",
        "[Service]\nExecStart=/bin/true\n[X-Fleet]\nGlobal=true\nMachineOf=a.service\n",
    );
    assert_eq!(run(&c, &["submit", &gm]).err, "Error creating units: Global cannot be used with Peers\n");
    assert!(c.log().is_empty());
}

#[test]
fn template_type_and_parse_errors_read_like_transcript_09() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let dev = write(dir.path(), "tmpl@x.device", HELLO);
    assert_eq!(run(&c, &["submit", &dev]).err, "Error creating units: invalid unit type for template: \"device\"\n");
    let eof = write(dir.path(), "eof.service", "[Service]\nExecStart");
    assert_eq!(
        run(&c, &["submit", &eof]).err,
        format!("Error creating units: failed getting Unit({eof}) from file: EOF\n")
    );
    let pc = write(
        dir.path(),
        "peer-conflict.service",
        "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nMachineOf=meta-b.service\nConflicts=meta-*.service\n",
    );
    assert_eq!(
        run(&c, &["submit", &pc]).err,
        "Error creating units: unresolvable requirements: peer \"meta-b.service\" matches conflict \"meta-*.service\"\n"
    );
    let garbage = write(dir.path(), "g.service", "[Unit] # c\n");
    assert_eq!(
        run(&c, &["submit", &garbage]).err,
        format!(
            "Error creating units: failed getting Unit({garbage}) from file: found garbage after section name : [35 32 99]\n"
        )
    );
    assert!(c.log().is_empty());
}

#[test]
fn unrecognized_xfleet_keys_draw_one_warning_per_unit() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let text = "[Service]\nExecStart=/bin/true\n\n[X-Fleet]\nMachineFoo=bar\nGlobal=false\nmachineof=x\n";
    let f = write(dir.path(), "badopt.service", text);
    let o = run(&c, &["submit", &f]);
    assert_eq!((o.code, o.out.as_str()), (0, "Unit badopt.service inactive\n"));
    let lines: Vec<&str> = o.err.lines().collect();
    assert_eq!(lines.len(), 1, "{}", o.err);
    let (time, rest) = lines[0].split_at(20);
    assert!(time.len() == 20 && time.as_bytes()[4] == b'/' && time.as_bytes()[13] == b':', "{}", lines[0]);
    assert!(rest.starts_with("WARN create.rs:"), "{}", lines[0]);
    assert!(
        rest.ends_with(": Unit badopt.service: unrecognized requirement in [X-Fleet] section: \"MachineFoo\""),
        "{}",
        lines[0]
    );
    // Submitting it again creates nothing and warns about nothing.
    assert_eq!(run(&c, &["submit", &f]).err, "");
}

#[test]
fn cat_and_hash_show_the_stored_form_of_a_trailing_backslash() {
    // App. C.10: `A=b \` at the end of the file keeps its backslash; the stored text parses back with a
    // trailing newline in the value, so `cat` prints an extra empty line and the hash changes.
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let f = write(dir.path(), "bs.service", "[Service]\nExecStart=/bin/true \\");
    assert_eq!(run(&c, &["submit", &f]).code, 0);
    let o = run(&c, &["cat", "bs.service"]);
    assert_eq!(o.out, "[Service]\nExecStart=/bin/true \\\n\n");
    let submitted = fleet_core::unit::UnitFile::parse("[Service]\nExecStart=/bin/true \\").unwrap().hash().to_hex();
    let stored = fleet_core::unit::UnitFile::parse(&o.out).unwrap().hash().to_hex();
    assert_ne!(submitted, stored);
    let o = run(&c, &["list-unit-files", "--full", "--no-legend", "--fields=unit,hash"]);
    assert_eq!(o.out, format!("bs.service\t{stored}\n"));
}

#[test]
fn instances_come_from_the_registry_template_or_the_local_one() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    write(dir.path(), "hello@.service", TEMPLATE);
    let i1 = dir.path().join("hello@1.service").display().to_string();
    let o = run(&c, &["submit", &i1]);
    assert_eq!((o.code, o.out.as_str()), (0, "Unit hello@1.service inactive\n"), "{}", o.err);
    assert_eq!(c.unit_text("hello@1.service").unwrap(), TEMPLATE);
    assert!(c.unit_text("hello@.service").is_none(), "the template itself is not submitted");
    // A registry template wins over a local one.
    c.insert_unit("other@.service", HELLO, "inactive");
    write(dir.path(), "other@.service", TEMPLATE);
    let o2 = dir.path().join("other@2.service").display().to_string();
    assert_eq!(run(&c, &["submit", &o2]).code, 0);
    assert_eq!(c.unit_text("other@2.service").unwrap(), HELLO);
}

#[test]
fn the_instances_of_one_command_read_their_registry_template_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    c.insert_unit("many@.service", HELLO, "inactive");
    // Past LIST_LOOKUPS_FROM, so the instances themselves are looked up in one listing too.
    let names: Vec<String> =
        (1..=40).map(|i| dir.path().join(format!("many@{i}.service")).display().to_string()).collect();
    let mut args = vec!["start", "--no-block"];
    args.extend(names.iter().map(String::as_str));
    let o = run(&c, &args);
    assert_eq!(o.code, 0, "{}", o.err);
    assert_eq!(c.unit_text("many@40.service").unwrap(), HELLO);
    assert_eq!(c.unit_reads("many@.service"), 1, "one read of the template for 40 instances");
    // A template that is not in the registry is asked for once too, then read from the directory.
    write(dir.path(), "local@.service", TEMPLATE);
    let names: Vec<String> =
        (1..=3).map(|i| dir.path().join(format!("local@{i}.service")).display().to_string()).collect();
    let mut args = vec!["submit"];
    args.extend(names.iter().map(String::as_str));
    assert_eq!(run(&c, &args).code, 0);
    assert_eq!(c.unit_text("local@3.service").unwrap(), TEMPLATE);
    assert_eq!(c.unit_reads("local@.service"), 1);
}

#[test]
fn submit_is_idempotent_and_warns_about_differences() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    let f = write(dir.path(), "hello.service", HELLO);
    assert_eq!(run(&c, &["submit", &f]).out, "Unit hello.service inactive\n");
    let o = run(&c, &["submit", &f]);
    assert_eq!((o.code, o.out.as_str(), o.err.as_str()), (0, "", ""));
    std::fs::write(&f, HELLO_V2).unwrap();
    let o = run(&c, &["submit", &f]);
    assert_eq!(
        o.err,
        format!(
            "WARNING: Unit hello.service in registry differs from local unit file {f}. Add --replace to override.\n"
        )
    );
    let o = run(&c, &["submit", "--replace", &f]);
    assert_eq!((o.code, o.out.as_str(), o.err.as_str()), (0, "Unit hello.service inactive\n", ""));
    assert_eq!(c.unit_text("hello.service").unwrap(), HELLO_V2);
}

#[test]
fn replace_follows_the_table_of_section_10_3() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    let f = write(dir.path(), "hello.service", HELLO_V2);
    let o = run(&c, &["submit", "--replace", &f]);
    assert_eq!(
        o.err,
        "Warning: can not replace Unit(hello.service) in state 'launched', use the appropriate command\n"
    );
    assert_eq!(c.unit_text("hello.service").unwrap(), HELLO);
    // load --replace of a launched unit: refused, but the unit is then loaded (stopped).
    let o = run(&c, &["load", "--replace", &f]);
    assert_eq!(o.out, format!("Unit hello.service loaded on {M1}\n"));
    assert_eq!(
        o.err,
        "Warning: can not replace Unit(hello.service) in state 'launched', use the appropriate command\n"
    );
    assert_eq!(c.unit_text("hello.service").unwrap(), HELLO);
    // start --replace replaces in any state; a scheduled unit is rescheduled in the same request (no pass
    // through `inactive`, so no `Unit hello.service inactive` line).
    c.insert_unit("hello.service", HELLO, "launched");
    let o = run(&c, &["start", "--replace", &f]);
    assert_eq!((o.code, o.out.as_str()), (0, format!("Unit hello.service launched on {M1}\n").as_str()));
    assert_eq!(c.unit_text("hello.service").unwrap(), HELLO_V2);
    let o = run(&c, &["start", "--replace", &f]);
    assert_eq!(o.out, "Found same Unit(hello.service) in Registry, nothing to do\n");
}

#[test]
fn r1691_replace_instance_uses_local_template() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    c.insert_unit("hello@.service", TEMPLATE, "inactive");
    c.insert_unit("hello@1.service", TEMPLATE, "launched");
    let v2 = TEMPLATE.replace("echo hello", "echo hello-v2");
    write(dir.path(), "hello@.service", &v2);
    let i1 = dir.path().join("hello@1.service").display().to_string();
    let o = run(&c, &["start", &i1]);
    assert_eq!(
        o.err,
        format!(
            "WARNING: Unit hello@1.service in registry differs from local template unit file {i1}. Add --replace to override.\n"
        )
    );
    let o = run(&c, &["start", "--replace", &i1]);
    assert_eq!(o.code, 0, "{}", o.err);
    assert_eq!(c.unit_text("hello@1.service").unwrap(), v2);
}

#[test]
fn replace_without_local_content_fails() {
    let c = cluster();
    c.insert_unit("lonely.service", HELLO, "launched");
    let o = run(&c, &["start", "--replace", "/nonexistent/lonely.service"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.err,
        "Error creating units: error Unit /nonexistent/lonely.service does not seem to be a template unit\n"
    );
}

#[test]
fn stop_and_unload_follow_transcript_03() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    let o = run(&c, &["stop", "hello.service"]);
    assert_eq!((o.code, o.out.as_str()), (0, format!("Unit hello.service loaded on {M1}\n").as_str()));
    assert_eq!(o.err, "Successfully stopped units [hello.service].\n");
    let o = run(&c, &["stop", "hello.service"]);
    assert_eq!((o.out.as_str(), o.err.as_str()), ("", "Successfully stopped units [].\n"));
    let o = run(&c, &["unload", "hello.service"]);
    assert_eq!(
        (o.out.as_str(), o.err.as_str()),
        ("Unit hello.service inactive\n", "Successfully unloaded units [hello.service].\n")
    );
    let o = run(&c, &["unload", "hello.service"]);
    assert_eq!((o.out.as_str(), o.err.as_str()), ("", "Successfully unloaded units [].\n"));
    let o = run(&c, &["stop", "hello.service"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Unable to stop unit hello.service in state inactive\n"));
    for cmd in ["stop", "unload", "destroy"] {
        let o = run(&c, &[cmd, "no-such.service", "x@6.service-doesnotexist"]);
        assert_eq!((o.code, o.err.as_str()), (0, "Units not found in registry\n"), "{cmd}");
    }
}

#[test]
fn stop_and_unload_report_a_refused_desired_state_instead_of_success() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    c.insert_unit("global.service", GLOBAL, "launched");
    let full =
        "etcd is out of space (its backend quota is reached and the NOSPACE alarm is raised): nothing was written";
    c.fail_target_states(Some(crate::client::ClientError::Api { code: 507, message: full.into() }));
    for args in [
        &["stop", "hello.service"][..],
        &["stop", "--no-block", "hello.service"],
        &["unload", "--no-block", "hello.service"],
        &["stop", "--no-block", "global.service"],
        &["unload", "global.service"],
    ] {
        let o = run(&c, args);
        let name = args.last().unwrap();
        assert_eq!(
            (o.code, o.out.as_str(), o.err.as_str()),
            (1, "", format!("Error setting target state for unit {name}: googleapi: Error 507: {full}\n").as_str()),
            "{args:?}"
        );
    }
    assert_eq!(c.desired("hello.service").as_deref(), Some("launched"));
    assert!(c.log().is_empty(), "nothing written: {:?}", c.log());
    // A unit destroyed between the listing and the write is skipped, as the original did.
    c.fail_target_states(Some(crate::client::ClientError::Api { code: 404, message: "unit does not exist".into() }));
    let o = run(&c, &["stop", "--no-block", "hello.service"]);
    assert_eq!((o.code, o.err.as_str()), (0, "Successfully stopped units [hello.service].\n"));
}

#[test]
fn stop_no_block_triggers() {
    let c = cluster();
    c.insert_unit("hello@5.service", TEMPLATE, "launched");
    c.insert_unit("hello@6.service", TEMPLATE, "launched");
    let o = run(&c, &["stop", "--no-block", "hello@5.service", "hello@6.service"]);
    assert_eq!(o.out, "Triggered unit hello@5.service stop\nTriggered unit hello@6.service stop\n");
    assert_eq!(o.err, "Successfully stopped units [hello@5.service hello@6.service].\n");
}

#[test]
fn destroy_deletes_and_waits_until_gone() {
    let c = cluster();
    c.insert_unit("hello.service", HELLO, "launched");
    c.insert_unit("badopt.service", HELLO, "inactive");
    let o = run(&c, &["destroy", "badopt.service", "empty.service", "hello.service"]);
    assert_eq!((o.code, o.out.as_str()), (0, "Destroyed badopt.service\nDestroyed hello.service\n"));
    assert_eq!(c.log(), ["destroy badopt.service", "destroy hello.service"]);
    let o = run(&c, &["destroy", "hello.service"]);
    assert_eq!(o.err, "Units not found in registry\n");
}

#[test]
fn restart_stops_then_starts_and_waits_for_each_step() {
    let c = cluster();
    c.insert_unit("hello@1.service", TEMPLATE, "launched");
    c.insert_unit("hello@2.service", TEMPLATE, "loaded");
    c.insert_unit("hello@3.service", TEMPLATE, "inactive");
    let o = run(&c, &["restart", "hello@1.service", "hello@2.service", "hello@3.service"]);
    assert_eq!(o.code, 0, "{}", o.err);
    assert_eq!(
        o.out,
        format!(
            "Unit hello@1.service loaded on {M1}\nUnit hello@1.service launched on {M1}\nUnit hello@2.service launched on {M1}\n"
        )
    );
    assert_eq!(o.err, "Unable to restart unit hello@3.service in state inactive\n");
    assert_eq!(c.log(), ["set hello@1.service loaded", "set hello@1.service launched", "set hello@2.service launched"]);
}

#[test]
fn restart_of_unknown_units_submits_them_first() {
    let c = cluster();
    let o = run(&c, &["restart", "/nonexistent/no-such.service"]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (1, "Error creating units: unable to find Unit(no-such.service) in Registry or on filesystem\n")
    );
}

#[test]
fn cat_prints_the_canonical_text() {
    let c = cluster();
    c.insert_unit("hello@4.service", "# comment\n[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n", "launched");
    let o = run(&c, &["cat", "hello@4"]);
    assert_eq!((o.code, o.out.as_str()), (0, "[Unit]\nDescription=x\n\n[Service]\nExecStart=/bin/true\n"));
    let o = run(&c, &["cat", "no-such.service"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Unit no-such.service not found\n"));
    for args in [&["cat"][..], &["cat", "a", "b"]] {
        let o = run(&c, args);
        assert_eq!((o.code, o.err.as_str()), (1, "One unit file must be provided\n"));
    }
}

#[test]
fn lookup_errors_during_load_name_the_unit() {
    let c = cluster();
    c.insert_unit("a.service", HELLO, "inactive");
    c.fail_all(Some(crate::client::ClientError::Other("down".into())));
    let o = run(&c, &["load", "a.service"]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (1, "Error creating units: error retrieving Unit(a.service) from Registry: down\n")
    );
}

//! ssh, status and journal as whole invocations, reaching machines through a fake remote.

use std::sync::Arc;

use super::{Outcome, cluster, run_remote};
use crate::cli::remote::fake::FakeRemote;
use crate::client::fake::FakeClient;

const M2: &str = "8606e1a2949979fb223fb4bad77d152c";
const M1_ID: &str = "8363165e6276f500b71169eca9b3f76b";

/// `status --output=json` (issue 17): systemctl show on the unit's machine, parsed into properties.
#[test]
fn status_json_is_systemctl_show_of_each_machine_parsed_into_properties() {
    let c = cluster();
    c.insert_unit("hello.service", "[Service]\nExecStart=/bin/sleep 1000\n", "launched");
    let r = FakeRemote {
        stdout: Some("Id=hello.service\nActiveState=active\nExecStart={ path=/bin/sh ; argv[]=a=b }\n".into()),
        ..Default::default()
    };
    let o = run_remote(&c, &r, &["status", "--output=json", "hello"]);
    assert_eq!((o.code, o.err.as_str()), (0, ""));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&o.out).expect("a JSON document"),
        serde_json::json!({"statuses": [{"name": "hello.service", "machineID": M1_ID, "properties": {
                "Id": "hello.service", "ActiveState": "active", "ExecStart": "{ path=/bin/sh ; argv[]=a=b }"}}]})
    );
    assert_eq!(
        r.calls.lock().unwrap()[0],
        ("172.17.0.2".into(), "systemctl \"show\" \"--no-pager\" \"hello.service\"".into())
    );
    // On the unit's own machine it runs locally, captured the same way.
    let local =
        FakeRemote { local_id: Some(M1_ID.into()), stdout: Some("Id=hello.service\n".into()), ..Default::default() };
    let o = run_remote(&c, &local, &["status", "--output=json", "hello"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&o.out).expect("a JSON document")["statuses"][0]["properties"],
        serde_json::json!({"Id": "hello.service"})
    );
    assert_eq!(local.calls.lock().unwrap()[0], ("local".into(), "systemctl show --no-pager hello.service".into()));
    // A failing systemctl prints no document and passes its exit status on.
    let failing = FakeRemote { status: 4, stdout: Some(String::new()), ..Default::default() };
    let o = run_remote(&c, &failing, &["status", "--output=json", "hello"]);
    assert_eq!((o.code, o.out.as_str()), (4, ""));
}

fn with_units() -> Arc<FakeClient> {
    let c = cluster();
    c.insert_unit("hello.service", &format!("[Service]\nExecStart=/bin/true\n[X-Fleet]\nMachineID={M2}\n"), "launched");
    c.insert_unit("glob.service", "[Service]\nExecStart=/bin/true\n[X-Fleet]\nGlobal=true\n", "launched");
    c
}

fn go(c: &Arc<FakeClient>, remote: &FakeRemote, args: &[&str]) -> Outcome {
    run_remote(c, remote, args)
}

#[test]
fn status_runs_systemctl_on_the_units_machine_with_quoted_arguments() {
    let (c, r) = (with_units(), FakeRemote::default());
    let o = go(&c, &r, &["status", "hello"]);
    assert_eq!(o.code, 0, "{}", o.err);
    assert_eq!(o.out, "ran on 172.17.0.3: systemctl \"status\" \"-l\" \"hello.service\"\n");
    // --ssh-port is appended unless 22.
    let o = go(&c, &r, &["status", "--ssh-port=2222", "hello.service"]);
    assert!(o.out.starts_with("ran on 172.17.0.3:2222: "), "{}", o.out);
}

#[test]
fn status_runs_locally_on_the_units_own_machine_and_propagates_the_exit_status() {
    let c = with_units();
    let r = FakeRemote { local_id: Some(M2.into()), status: 3, ..Default::default() };
    let o = go(&c, &r, &["status", "hello.service"]);
    assert_eq!(o.code, 3);
    assert_eq!(r.calls.lock().unwrap()[0], ("local".into(), "systemctl status -l hello.service".into()));
}

#[test]
fn status_and_journal_errors_read_like_the_original() {
    let (c, r) = (with_units(), FakeRemote::default());
    let o = go(&c, &r, &["status", "nope.service"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Unit nope.service does not exist.\n"));
    let o = go(&c, &r, &["journal"]);
    assert_eq!((o.code, o.err.as_str()), (1, "One unit file must be provided.\n"));
    c.insert_unit("idle.service", "[Service]\nExecStart=/bin/true\n", "inactive");
    let o = go(&c, &r, &["status", "idle.service"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Unit idle.service does not appear to be loaded.\n"));
    let o = go(&c, &r, &["journal", "idle.service"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Unit idle.service does not appear to be running.\n"));
    let r = FakeRemote { connect_error: Some(crate::ssh::SshError::NoAgent), ..Default::default() };
    let o = go(&c, &r, &["status", "hello.service"]);
    assert_eq!(o.code, 255);
    assert_eq!(o.err, format!("Unable to SSH to remote host: {}\n", crate::ssh::NO_AGENT));
    let o = go(&c, &r, &["ssh", "hello.service"]);
    assert_eq!((o.code, o.err.clone()), (1, format!("Failed building SSH client: {}\n", crate::ssh::NO_AGENT)));
}

#[test]
fn journal_builds_the_journalctl_command() {
    let (c, r) = (with_units(), FakeRemote::default());
    let o = go(&c, &r, &["journal", "--lines=3", "--output=cat", "--sudo", "-f", "hello.service"]);
    assert_eq!(o.code, 0, "{}", o.err);
    assert_eq!(
        o.out,
        "ran on 172.17.0.3: sudo \"journalctl\" \"--unit\" \"hello.service\" \"--no-pager\" \"-n\" \"3\" \"--output\" \"cat\" \"-f\"\n"
    );
}

#[test]
fn global_units_run_on_every_machine_or_the_chosen_one() {
    let (c, r) = (with_units(), FakeRemote::default());
    let o = go(&c, &r, &["status", "glob.service"]);
    assert_eq!(o.code, 0, "{}", o.err);
    assert_eq!(
        o.out,
        "ran on 172.17.0.2: systemctl \"status\" \"-l\" \"glob.service\"\n\nran on 172.17.0.3: systemctl \"status\" \"-l\" \"glob.service\"\n\nran on 172.17.0.4: systemctl \"status\" \"-l\" \"glob.service\"\n"
    );
    let o = go(&c, &r, &["status", "--machine=8606", "glob.service"]);
    assert_eq!(o.out, "ran on 172.17.0.3: systemctl \"status\" \"-l\" \"glob.service\"\n");
    let o = go(&c, &r, &["journal", "--machine=zzz", "glob.service"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Unit glob.service does not appear to be loaded on machine zzz.\n"));
    let o = go(&c, &r, &["journal", "-f", "glob.service"]);
    assert_eq!(o.code, 1);
    assert!(o.err.contains("choose one with --machine"), "{}", o.err);
    let o = go(&c, &r, &["journal", "glob.service"]);
    assert_eq!(o.out.lines().count(), 3, "{}", o.out);
}

#[test]
fn ssh_finds_machines_by_prefix_and_units_by_name() {
    let (c, r) = (with_units(), FakeRemote::default());
    let o = go(&c, &r, &["ssh", "8363", "uptime"]);
    assert_eq!((o.code, o.out.as_str()), (0, "ran on 172.17.0.2: uptime\n"));
    let o = go(&c, &r, &["ssh", "hello.service", "echo", "foo"]);
    assert_eq!(o.out, "ran on 172.17.0.3: echo foo\n");
    let o = go(&c, &r, &["ssh", "--unit=hello", "--machine=8"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Both machine and unit flags provided, please specify only one.\n"));
    let o = go(&c, &r, &["ssh", "--machine=8"]);
    assert_eq!(o.err, "Unable to proceed: found more than one machine\n");
    let o = go(&c, &r, &["ssh", "zzz"]);
    assert_eq!(o.err, "Unable to proceed: could not find matching unit or machine\n");
    let o = go(&c, &r, &["ssh"]);
    assert_eq!(o.err, "Unable to proceed: one machine or unit must be provided\n");
    let o = go(&c, &r, &["ssh", "--unit=glob.service"]);
    assert_eq!(o.err, "Unable to proceed: global units unsupported\n");
    let o = go(&c, &r, &["ssh", "--machine=d91d"]);
    assert_eq!(o.out, "ran on 172.17.0.4: <shell>\n");
    let r = FakeRemote { status: 7, ..Default::default() };
    assert_eq!(go(&c, &r, &["ssh", "8363", "false"]).code, 7);
}

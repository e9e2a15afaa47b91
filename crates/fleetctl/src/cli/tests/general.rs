//! An invocation as such: usage, help and version forms, unknown commands and flags, the deprecated verify, client
//! initialisation and the etcd driver's version check.

use super::{cluster, run, run_with};
use fleet_core::version::VERSION;

#[test]
fn etcd_driver_warns_when_the_cluster_runs_a_newer_fleet() {
    let c = cluster();
    c.set_daemon_version("v99.0.0");
    let o = run(&c, &["--driver=etcd", "list-machines", "--no-legend"]);
    assert_eq!(o.code, 0);
    let mine = fleet_core::version::VERSION.trim_start_matches('v');
    assert!(o.err.starts_with("####################################################################\n"), "{}", o.err);
    assert!(o.err.contains(&format!("WARNING: fleetctl ({mine}) is older than the latest registered\n")));
    assert!(o.err.contains("version of fleet found in the cluster (99.0.0). You are strongly\n"));
    assert!(o.err.ends_with("####################################################################\n\n"), "{}", o.err);
    // Not with the API driver, and not when fleetctl is as new as the cluster.
    assert_eq!(run(&c, &["list-machines", "--no-legend"]).err, "");
    c.set_daemon_version(fleet_core::version::VERSION);
    assert_eq!(run(&c, &["--driver=etcd", "list-machines", "--no-legend"]).err, "");
}

#[test]
fn etcd_driver_logs_a_failed_version_check_and_carries_on() {
    let c = cluster();
    c.fail_all(Some(crate::client::ClientError::Other("etcd get /p/: unreachable".into())));
    let o = run(&c, &["--driver=etcd", "list-units"]);
    let lines: Vec<&str> = o.err.lines().collect();
    assert_eq!(lines.len(), 2, "{}", o.err);
    assert!(
        lines[0].ends_with("error attempting to check latest fleet version in Registry: etcd get /p/: unreachable"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains(" ERROR mod.rs:"), "{}", lines[0]);
    assert_eq!(lines[1], "Error retrieving list of units from repository: etcd get /p/: unreachable");
    assert_eq!(o.code, 1);
}

#[test]
fn version_forms() {
    let c = cluster();
    for args in [&["version"][..], &["--version"], &["-v"], &["list-units", "--version"]] {
        let o = run(&c, args);
        assert_eq!((o.code, o.out.as_str()), (0, format!("fleetctl version {VERSION}\n").as_str()), "{args:?}");
    }
}

#[test]
fn bare_invocation_prints_usage_and_help_prints_help() {
    let c = cluster();
    let o = run(&c, &[]);
    assert_eq!(o.code, 0);
    assert!(o.out.starts_with("fleetctl is a command-line interface"));
    for args in [&["help"][..], &["--help"], &["-h"], &["--h"]] {
        let o = run(&c, args);
        assert_eq!(o.code, 0);
        assert!(o.out.starts_with("NAME:\n\tfleetctl - "), "{args:?}");
    }
    let o = run(&c, &["help", "start"]);
    assert!(o.out.starts_with("NAME:\n\tstart - "));
    let o = run(&c, &["start", "--help"]);
    assert!(o.out.starts_with("NAME:\n\tstart - "));
    let o = run(&c, &["help", "nope"]);
    assert_eq!(o.code, 1);
}

#[test]
fn unknown_command_and_flag_fail_with_the_originals_messages_but_exit_1() {
    let c = cluster();
    let o = run(&c, &["bogus-command"]);
    assert_eq!(o.code, 1);
    assert_eq!(o.out, "");
    assert_eq!(
        o.err,
        "Error: unknown command \"bogus-command\" for \"fleetctl\"\nRun 'fleetctl --help' for usage.\ncannot execute cmdFleet: unknown command \"bogus-command\" for \"fleetctl\"\n"
    );
    let o = run(&c, &["list-units", "--bogus-flag"]);
    assert_eq!(o.code, 1);
    assert!(o.out.starts_with("NAME:\n\tlist-units - "));
    assert_eq!(o.err, "Error: unknown flag: --bogus-flag\n\ncannot execute cmdFleet: unknown flag: --bogus-flag\n");
    let o = run(&c, &["lst-units"]);
    assert!(o.err.contains("\nDid you mean this?\n\tlist-units\n\nRun 'fleetctl --help' for usage.\n"), "{}", o.err);
}

#[test]
fn bad_driver_fails_client_initialisation() {
    let c = cluster();
    let o = run(&c, &["--driver=bogus", "list-machines"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Unable to initialize client: unrecognized driver \"bogus\"\n"));
    let o = run_with(&c, &["list-machines"], &[("FLEETCTL_DRIVER", "bogus")]);
    assert_eq!(o.code, 1);
}

#[test]
fn verify_is_deprecated_and_exits_2() {
    let o = run(&cluster(), &["verify", "hello.service"]);
    assert_eq!(o.code, 2);
    assert_eq!(
        o.err,
        "Command \"verify\" is deprecated, DEPRECATED - No longer works\nWARNING: The signed/verified units feature is DEPRECATED and cannot be used.\n"
    );
}

#[test]
fn status_accepts_no_block_like_the_functional_tests_use_it() {
    let c = cluster();
    c.insert_unit("global.service", "[Service]\nExecStart=/bin/true\n[X-Fleet]\nGlobal=true\n", "launched");
    let o = run(&c, &["status", "--no-block", "global.service"]);
    assert_eq!(o.code, 0, "{}", o.err);
}

//! `cordon` and `uncordon` (issue 38) as whole invocations against the fake cluster, and how list-machines shows a
//! cordoned machine: only when asked (`--fields=...,state`, `--output=json`), the default table unchanged.

use super::{cluster, run};
use crate::client::ClientError;

const M1: &str = "8363165e6276f500b71169eca9b3f76b";
const M2: &str = "8606e1a2949979fb223fb4bad77d152c";

#[test]
fn cordon_and_uncordon_by_id_or_unique_prefix() {
    let c = cluster();
    let o = run(&c, &["cordon", "8606"]);
    assert_eq!((o.code, o.out.as_str(), o.err.as_str()), (0, format!("Machine {M2} cordoned\n").as_str(), ""));
    let o = run(&c, &["cordon", M2]);
    assert_eq!((o.code, o.out), (0, format!("Machine {M2} cordoned (it already was)\n")), "idempotent");
    assert_eq!(
        run(&c, &["list-machines", "--fields=machine,state"]).out,
        "MACHINE\t\tSTATE\n8363165e...\tready\n8606e1a2...\tcordoned\nd91d98fc...\tready\n"
    );
    let o = run(&c, &["uncordon", "8606e1a2"]);
    assert_eq!((o.code, o.out), (0, format!("Machine {M2} uncordoned\n")));
    let o = run(&c, &["uncordon", "8606e1a2"]);
    assert_eq!((o.code, o.out), (0, format!("Machine {M2} uncordoned (it already was)\n")));
    assert_eq!(
        c.log(),
        [
            "cordon 8606e1a2949979fb223fb4bad77d152c".to_string(),
            format!("cordon {M2} (unchanged)"),
            format!("uncordon {M2}"),
            format!("uncordon {M2} (unchanged)")
        ]
    );
    assert!(!run(&c, &["list-machines", "--fields=state", "--no-legend"]).out.contains("cordoned"));
}

#[test]
fn a_machine_that_is_not_there_or_not_unique_is_refused() {
    let c = cluster();
    let o = run(&c, &["cordon", "ffff"]);
    assert_eq!(o.code, 1);
    assert_eq!(o.err, "Error cordoning machine ffff: googleapi: Error 404: machine does not exist\n");
    let o = run(&c, &["uncordon", "8"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Error uncordoning machine 8: found more than one machine\n"));
    for args in [&["cordon"][..], &["cordon", M1, M2]] {
        let o = run(&c, args);
        assert_eq!(
            (o.code, o.err.as_str()),
            (1, "One machine ID (or a unique prefix of one) must be given to cordon\n")
        );
    }
    c.fail_all(Some(ClientError::Other("etcd is down".into())));
    let o = run(&c, &["cordon", M1]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (1, "Error retrieving list of active machines from fleet API (etcd is down)\n")
    );
    c.fail_all(None);
    assert!(c.log().is_empty(), "nothing was written: {:?}", c.log());
}

#[test]
fn list_machines_shows_the_state_only_when_asked() {
    let c = cluster();
    let default = run(&c, &["list-machines"]).out;
    let json = run(&c, &["list-machines", "--output=json"]).out;
    assert!(json.contains("\"state\": \"ready\""), "{json}");
    assert_eq!(run(&c, &["cordon", M1]).code, 0);
    assert_eq!(run(&c, &["list-machines"]).out, default, "the default table is the original's, cordon or not");
    assert_eq!(
        run(&c, &["list-machines", "--fields=machine,ip,metadata,state", "--full", "--no-legend"]).out,
        format!(
            "{M1}\t172.17.0.2\t-\tcordoned\n{M2}\t172.17.0.3\t-\tready\nd91d98fca203da3cb89fb5c100ed0823\t172.17.0.4\t-\tready\n"
        )
    );
    let json = run(&c, &["list-machines", "--output=json"]).out;
    assert_eq!(json.matches("\"state\": \"cordoned\"").count(), 1, "{json}");
    assert_eq!(json.matches("\"state\": \"ready\"").count(), 2, "{json}");
    // `state` is accepted, not listed: help stays the original's.
    let help = run(&c, &["help", "list-machines"]).out;
    assert!(help.contains("Valid fields are \"machine,ip,metadata\""), "{help}");
    assert!(!help.contains("state"), "{help}");
}

/// `plan cordon|uncordon` (issue 38): the preview the cluster page shows, on stderr what it does; nothing is
/// written (the fake's log stays empty); an unknown action or machine is an error.
#[test]
fn plan_cordon_previews_without_writing() {
    let c = cluster();
    let o = run(&c, &["plan", "cordon", "8606"]);
    assert_eq!((o.code, o.out.as_str()), (0, ""), "a cordon moves nothing: {}", o.err);
    assert!(o.err.starts_with(&format!("cordon machine {M2}: machine 8606e1a2 takes no new unit")), "{}", o.err);
    assert!(o.err.contains("no unit starts, stops or moves now"), "{}", o.err);
    let o = run(&c, &["plan", "uncordon", M2]);
    assert!(o.err.contains("is not cordoned: nothing is written"), "{}", o.err);
    assert!(c.log().is_empty(), "plan wrote: {:?}", c.log());
    let o = run(&c, &["plan", "cordon", "ffff"]);
    assert_eq!(o.code, 1);
    assert!(o.err.contains("Error planning cordon: no machine \"ffff\""), "{}", o.err);
    let o = run(&c, &["plan", "reboot", M1]);
    assert_eq!(o.code, 1);
    assert!(o.err.contains("unknown action \"reboot\""), "{}", o.err);
}

//! `completion` and the hidden `__complete` helper as whole invocations against the fake cluster.

use super::{cluster, run};
use crate::cli::complete::script;

#[test]
fn completion_command_and_the_names_helper() {
    let c = cluster();
    c.insert_unit("b.service", "[Service]\nExecStart=/bin/true\n", "inactive");
    c.insert_unit("a.service", "[Service]\nExecStart=/bin/true\n", "inactive");
    let o = run(&c, &["__complete", "units"]);
    assert_eq!((o.code, o.out.as_str()), (0, "a.service\nb.service\n"));
    let o = run(&c, &["__complete", "machines"]);
    assert_eq!(o.out.lines().count(), 3);
    let o = run(&c, &["__complete", "bogus"]);
    assert_eq!((o.code, o.out.as_str(), o.err.as_str()), (1, "", "__complete: give units or machines\n"));
    let o = run(&c, &["completion", "bash"]);
    assert_eq!((o.code, o.out.clone()), (0, script("bash").unwrap()));
    let o = run(&c, &["completion", "tcsh"]);
    assert_eq!((o.code, o.err.as_str()), (1, "Unknown shell \"tcsh\": completion supports bash, zsh and fish\n"));
    assert_eq!(run(&c, &["completion"]).err, "One shell must be given: bash, zsh or fish\n");
    assert!(!run(&c, &["help"]).out.contains("__complete"), "the helper stays out of help");
}

//! The progress line (issue 17) as waiting commands draw it on a terminal, and that nothing of it is written
//! otherwise.

use super::{Outcome, cluster, run_with};
use crate::cli::progress::ERASE;

const HELLO: &str = "[Service]\nExecStart=/bin/sleep 1000\n";
const TERMINAL: (&str, &str) = ("TEST_STDERR_IS_TERMINAL", "1");

/// The same command without and with a terminal on stderr, on identical fresh clusters with lagging states.
fn both(args: &[&str], extra: &[(&str, &str)], lag: u32) -> (Outcome, Outcome) {
    let setup = || {
        let c = cluster();
        c.set_lag(lag);
        for i in 1..=3 {
            c.insert_unit(&format!("web@{i}.service"), HELLO, "inactive");
        }
        c
    };
    let plain = run_with(&setup(), args, extra);
    let mut vars = extra.to_vec();
    vars.push(TERMINAL);
    let tty = run_with(&setup(), args, &vars);
    (plain, tty)
}

#[test]
fn on_a_terminal_the_line_is_drawn_in_place_and_erased_and_stdout_is_unchanged() {
    let args = ["start", "web@1.service", "web@2.service", "web@3.service"];
    let (plain, tty) = both(&args, &[], 3);
    assert_eq!((plain.code, plain.err.as_str()), (0, ""), "no terminal: stderr as today");
    assert_eq!((tty.code, &tty.out), (0, &plain.out), "stdout is the same either way");
    assert!(tty.err.starts_with(ERASE) && tty.err.ends_with(ERASE), "drawn in place and erased: {:?}", tty.err);
    let lines: Vec<&str> = tty.err.split(ERASE).filter(|l| !l.is_empty()).collect();
    assert!(lines.iter().any(|l| l.starts_with("start: 0/3 launched · waiting: web@1.service (")), "{lines:?}");
    assert!(lines.iter().all(|l| l.starts_with("start: ") && l.contains("s")), "{lines:?}");
    assert!(!tty.err.contains('\n'), "the progress line never scrolls: {:?}", tty.err);
}

#[test]
fn no_progress_or_no_terminal_writes_exactly_todays_output() {
    let args = ["--no-progress", "stop", "web@1.service"];
    let (plain, tty) = both(&args, &[], 3);
    assert_eq!((&tty.out, &tty.err, tty.code), (&plain.out, &plain.err, plain.code));
    let (plain, tty) = both(&["destroy", "web@1.service", "web@2.service"], &[("FLEETCTL_NO_PROGRESS", "true")], 3);
    assert_eq!((&tty.out, &tty.err), (&plain.out, &plain.err));
    // Errors and messages printed while waiting come on lines of their own.
    let (plain, tty) = both(&["start", "--block-attempts=1", "web@1.service"], &[], 100);
    assert!(plain.err.starts_with("Error waiting for units: "), "{}", plain.err);
    assert_eq!(tty.out, plain.out);
    assert_eq!(tty.err.replace(ERASE, "").lines().last(), plain.err.lines().last(), "{:?}", tty.err);
}

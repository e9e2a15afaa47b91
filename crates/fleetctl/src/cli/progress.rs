//! The live progress line of waiting commands (issue 17): while start/stop/load/unload/destroy/restart/replace wait
//! for units, or rollout-status for a rollout, one line on stderr says how many reached the state, which still wait
//! and where, and the time elapsed — redrawn in place (`\r`, erase line) after every poll, erased before any other
//! output and at the end. Only when stderr is a terminal and `--no-progress` is not given (`Ctx::progress`);
//! otherwise nothing of this is written and the output is exactly the original's.

use std::time::Duration;

/// Erases the current terminal line and returns the cursor to its start.
pub const ERASE: &str = "\r\x1b[2K";

/// How many waiting units the line names before `+N more`.
const NAMED: usize = 3;

/// One unit still waited for: its name and where it is (machine and state seen), if known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub unit: String,
    pub at: String,
}

/// The progress line: `<what>: <done>/<total> <state> · waiting: a (where), b (where), +N more · 3.2s`.
pub fn line(what: &str, state: &str, done: usize, total: usize, waiting: &[Waiting], elapsed: Duration) -> String {
    let mut out = format!("{what}: {done}/{total} {state}");
    if !waiting.is_empty() {
        let named: Vec<String> = waiting
            .iter()
            .take(NAMED)
            .map(|w| if w.at.is_empty() { w.unit.clone() } else { format!("{} ({})", w.unit, w.at) })
            .collect();
        out.push_str(" · waiting: ");
        out.push_str(&named.join(", "));
        if waiting.len() > NAMED {
            out.push_str(&format!(", +{} more", waiting.len() - NAMED));
        }
    }
    out.push_str(&format!(" · {:.1}s", elapsed.as_secs_f64()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::testing::{cluster, run_with};

    const HELLO: &str = "[Service]\nExecStart=/bin/sleep 1000\n";
    const TERMINAL: (&str, &str) = ("TEST_STDERR_IS_TERMINAL", "1");

    /// The same command without and with a terminal on stderr, on identical fresh clusters with lagging states.
    fn both(
        args: &[&str],
        extra: &[(&str, &str)],
        lag: u32,
    ) -> (super::super::testing::Outcome, super::super::testing::Outcome) {
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

    fn w(unit: &str, at: &str) -> Waiting {
        Waiting { unit: unit.into(), at: at.into() }
    }

    #[test]
    fn the_line_counts_names_the_first_waiting_units_with_where_they_are_and_the_time() {
        let ms = Duration::from_millis;
        assert_eq!(line("start", "launched", 4, 4, &[], ms(1234)), "start: 4/4 launched · 1.2s");
        assert_eq!(
            line("stop", "loaded", 1, 3, &[w("a.service", "active on 8363165e"), w("b.service", "")], ms(50)),
            "stop: 1/3 loaded · waiting: a.service (active on 8363165e), b.service · 0.1s"
        );
        let many: Vec<Waiting> = (0..7).map(|i| w(&format!("web@{i}.service"), "")).collect();
        assert_eq!(
            line("destroy", "destroyed", 0, 7, &many, ms(20_000)),
            "destroy: 0/7 destroyed · waiting: web@0.service, web@1.service, web@2.service, +4 more · 20.0s"
        );
    }
}

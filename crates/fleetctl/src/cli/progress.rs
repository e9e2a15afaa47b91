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

//! The lines a `fleet-sim` process prints on stdout, one event each, read by the scale bench
//! (`harness/src/bench/scale_sim.rs` parses the same four forms):
//!
//! * `registered N` — all N machines of the process are registered and running;
//! * `pass {"duration_ms":…,"planned":…,"applied":…,"unplaced":…}` — one engine reconcile pass (engine process only);
//! * `lost <machine-id> <reason>` — a machine stopped on its own (lease lost, agent failed, registration failed);
//! * `stopped` — the process is about to exit after SIGTERM/SIGINT.

use fleetd::engine::PassReport;

/// One event line.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Registered { machines: usize },
    Pass { duration_ms: f64, planned: usize, applied: usize, unplaced: usize },
    Lost { machine: String, reason: String },
    Stopped,
}

impl Line {
    pub fn pass(report: &PassReport) -> Line {
        Line::Pass {
            duration_ms: report.duration.as_secs_f64() * 1000.0,
            planned: report.planned,
            applied: report.applied,
            unplaced: report.unplaced,
        }
    }

    pub fn render(&self) -> String {
        match self {
            Line::Registered { machines } => format!("registered {machines}"),
            Line::Pass { duration_ms, planned, applied, unplaced } => format!(
                r#"pass {{"duration_ms":{duration_ms:.3},"planned":{planned},"applied":{applied},"unplaced":{unplaced}}}"#
            ),
            Line::Lost { machine, reason } => format!("lost {machine} {}", reason.replace('\n', " ")),
            Line::Stopped => "stopped".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_render_as_the_bench_reads_them() {
        assert_eq!(Line::Registered { machines: 3 }.render(), "registered 3");
        let pass = Line::Pass { duration_ms: 1.5, planned: 10, applied: 9, unplaced: 1 };
        assert_eq!(pass.render(), r#"pass {"duration_ms":1.500,"planned":10,"applied":9,"unplaced":1}"#);
        assert_eq!(Line::Lost { machine: "m".into(), reason: "a\nb".into() }.render(), "lost m a b");
        assert_eq!(Line::Stopped.render(), "stopped");
    }
}

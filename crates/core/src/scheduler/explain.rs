//! Why a unit is, or is not, placed where it is: each machine's verdict for one unit against the snapshot as it
//! stands (before the pass's decisions). For a future `fleetctl` explain/plan command and for engine logs.

use std::fmt;

use super::fit::Fit;
use super::placement::{ClusterView, Placement};
use super::schedule_input::ScheduleInput;
use crate::model::JobState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub unit: String,
    pub desired: JobState,
    pub global: bool,
    /// The machine the unit is scheduled to now, if any.
    pub target: Option<String>,
    /// Every machine, in the order least-loaded placement considers them (load, then ID).
    pub machines: Vec<MachineVerdict>,
    /// Where placement would put the unit now if it needed a machine; `None` for global units or when no machine
    /// is able to run it.
    pub would_choose: Option<(String, Placement)>,
}

/// One machine's verdict for the explained unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineVerdict {
    pub machine: String,
    /// Units counted present there (the unit itself included if it is there).
    pub load: usize,
    pub fit: Fit,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    #[error("unit {0:?} is not in the snapshot")]
    UnknownUnit(String),
}

pub fn explain(snapshot: &ScheduleInput, unit: &str) -> Result<Explanation, ExplainError> {
    let &u = snapshot.unit_index.get(unit).ok_or_else(|| ExplainError::UnknownUnit(unit.to_string()))?;
    let spec = &snapshot.units[u].spec;
    let view = ClusterView::new(snapshot);
    let machines = view
        .machines_by_load()
        .map(|(load, m)| MachineVerdict { machine: view.machine_id(m).to_string(), load, fit: view.fit(u, m) })
        .collect();
    let would_choose = if spec.constraints.global {
        None
    } else {
        view.choose(u, true).map(|c| (view.machine_id(c.machine).to_string(), c.placement))
    };
    Ok(Explanation {
        unit: spec.name.clone(),
        desired: spec.desired,
        global: spec.constraints.global,
        target: spec.target.clone(),
        machines,
        would_choose,
    })
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Unit({}) desired {}", self.unit, self.desired)?;
        match (&self.target, self.global) {
            (_, true) => f.write_str(", global")?,
            (Some(target), false) => write!(f, ", scheduled to Machine({target})")?,
            (None, false) => f.write_str(", not scheduled")?,
        }
        match &self.would_choose {
            Some((machine, _)) => writeln!(f, "; placement would choose Machine({machine})")?,
            None if self.global => writeln!(f)?,
            None => writeln!(f, "; no machine is able to run it")?,
        }
        for verdict in &self.machines {
            writeln!(f, "  Machine({}) load {}: {}", verdict.machine, verdict.load, verdict.fit)?;
        }
        Ok(())
    }
}

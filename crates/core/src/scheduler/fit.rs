//! Whether one unit can go on one machine ("AbleToRun", spec §6.3), as a value that explains itself.

use std::fmt;

use super::constraints::MetadataMismatch;

/// The verdict of checking a unit against a machine; checks run in the order of §6.3, the first failure wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// The unit can run there.
    Ok,
    /// The unit can run there, displacing these present units (in name order), which it replaces (§6.10).
    Displaces(Vec<String>),
    /// The unit cannot run there.
    Rejected(Rejection),
}

impl Fit {
    /// Whether placement may choose this machine. A displaced unit looking for a new home accepts only
    /// [`Fit::Ok`], so one pass cannot chain displacements forever.
    pub fn accepts(&self, may_displace: bool) -> bool {
        match self {
            Fit::Ok => true,
            Fit::Displaces(_) => may_displace,
            Fit::Rejected(_) => false,
        }
    }
}

impl fmt::Display for Fit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fit::Ok => f.write_str("able to run unit"),
            Fit::Displaces(units) => {
                write!(f, "able to run unit, replacing locally-scheduled ")?;
                write_unit_list(f, units)
            }
            Fit::Rejected(rejection) => write!(f, "unable to run unit: {rejection}"),
        }
    }
}

/// Why a machine cannot run a unit. Messages start with the original fleet's wording (§6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// `MachineID=` names another machine.
    MachineIdMismatch { machine: String, required: String },
    /// `MachineMetadata=` is not satisfied.
    MetadataInsufficient(MetadataMismatch),
    /// The machine is cordoned (issue 38): it takes no new unit; units already scheduled there stay.
    Cordoned { machine: String },
    /// The machine's agent cannot write unit files (issue 37: its units directory is full or read-only): it takes
    /// no new unit, and a unit whose file it failed to write leaves it.
    CannotLoad { machine: String, reason: String },
    /// A `MachineOf=` peer is not present on the machine.
    PeerNotPresent { peer: String },
    /// A present unit conflicts with this one (either direction).
    Conflict { unit: String },
    /// A present unit replaces this one (§6.10): this one has to go elsewhere.
    ReplacedBy { unit: String },
    /// Displacing the units this one replaces would take a `MachineOf=` peer away with them (the peer is
    /// replaced itself, or follows a replaced unit): the unit would undo its own placement.
    DisplacesPeer { peer: String },
    /// This unit and a scheduled unit replace each other (spec B2 Rec): it is unschedulable while that one runs.
    CircularReplace { unit: String, machine: String },
    /// This unit replaces a present unit, but displacing it would take away a unit on this one's own cycle of
    /// `Replaces=` (and `MachineOf=`) — X replaces Y replaces Z replaces X: within a cycle nobody displaces, units
    /// keep apart like `Conflicts=`, so the chain settles instead of displacing around the cycle on every pass.
    ReplaceCycle { unit: String },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::MachineIdMismatch { machine, required } => {
                write!(f, "agent ID {machine:?} does not match required {required:?}")
            }
            Rejection::MetadataInsufficient(MetadataMismatch { key, wanted, actual }) => {
                write!(f, "local Machine metadata insufficient: {key} is ")?;
                match actual {
                    Some(value) => write!(f, "{value:?}")?,
                    None => f.write_str("unset")?,
                }
                write!(f, ", wanted one of {wanted:?}")
            }
            Rejection::Cordoned { machine } => write!(f, "machine is cordoned: Machine({machine}) takes no new unit"),
            Rejection::CannotLoad { machine, reason } => {
                write!(f, "Machine({machine}) cannot write unit files: {reason}")
            }
            Rejection::PeerNotPresent { peer } => write!(f, "required peer Unit({peer}) is not scheduled locally"),
            Rejection::Conflict { unit } => write!(f, "found conflict with locally-scheduled Unit({unit})"),
            Rejection::ReplacedBy { unit } => write!(f, "found replace with locally-scheduled Unit({unit})"),
            Rejection::DisplacesPeer { peer } => {
                write!(f, "required peer Unit({peer}) would leave with the units this unit replaces")
            }
            Rejection::CircularReplace { unit, machine } => write!(
                f,
                "circular Replaces with Unit({unit}) scheduled on Machine({machine}): only one of them may run"
            ),
            Rejection::ReplaceCycle { unit } => write!(
                f,
                "found replaced Unit({unit}) locally-scheduled, but displacing it would close a cycle of Replaces: \
                 units on a Replaces cycle do not displace one another"
            ),
        }
    }
}

fn write_unit_list(f: &mut fmt::Formatter<'_>, units: &[String]) -> fmt::Result {
    for (i, unit) in units.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "Unit({unit})")?;
    }
    Ok(())
}

pub(crate) struct UnitList<'a>(pub &'a [String]);

impl fmt::Display for UnitList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_unit_list(f, self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_keep_the_original_wording() {
        let cases = [
            (
                Rejection::MachineIdMismatch { machine: "m1".into(), required: "m2".into() },
                "agent ID \"m1\" does not match required \"m2\"",
            ),
            (
                Rejection::MetadataInsufficient(MetadataMismatch {
                    key: "role".into(),
                    wanted: vec!["a".into(), "b".into()],
                    actual: None,
                }),
                "local Machine metadata insufficient: role is unset, wanted one of [\"a\", \"b\"]",
            ),
            (
                Rejection::PeerNotPresent { peer: "p.service".into() },
                "required peer Unit(p.service) is not scheduled locally",
            ),
            (Rejection::Conflict { unit: "c.service".into() }, "found conflict with locally-scheduled Unit(c.service)"),
            (Rejection::Cordoned { machine: "m1".into() }, "machine is cordoned: Machine(m1) takes no new unit"),
            (
                Rejection::CannotLoad { machine: "m1".into(), reason: "No space left on device".into() },
                "Machine(m1) cannot write unit files: No space left on device",
            ),
            (
                Rejection::ReplacedBy { unit: "r.service".into() },
                "found replace with locally-scheduled Unit(r.service)",
            ),
        ];
        for (rejection, text) in cases {
            assert_eq!(rejection.to_string(), text);
        }
        assert_eq!(
            Fit::Displaces(vec!["a.service".into(), "b.service".into()]).to_string(),
            "able to run unit, replacing locally-scheduled Unit(a.service), Unit(b.service)"
        );
        assert!(Fit::Ok.accepts(false));
        assert!(Fit::Displaces(vec![]).accepts(true));
        assert!(!Fit::Displaces(vec![]).accepts(false));
    }
}

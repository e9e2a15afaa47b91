//! `cordon MACHINE` and `uncordon MACHINE` (issue 38, an extension): a cordoned machine takes no new unit; the
//! units it runs stay. MACHINE is a machine ID or a unique prefix of one among the present machines; an argument
//! that names none goes to the cluster as it is, so the full ID of a machine that left still removes its cordon
//! (the cluster answers `machine does not exist` when nothing has that ID).

use super::context::{Ctx, machine_by_prefix};

/// `fleetctl cordon MACHINE` (`cordon`) or `fleetctl uncordon MACHINE`.
pub fn cordon(ctx: &mut Ctx<'_>, args: &[String], cordon: bool) -> i32 {
    let verb = if cordon { "cordon" } else { "uncordon" };
    let [lookup] = args else {
        ctx.warn(&format!("One machine ID (or a unique prefix of one) must be given to {verb}"));
        return 1;
    };
    let machines = match ctx.client.machines() {
        Ok(m) => m,
        Err(e) => {
            ctx.warn(&format!("Error retrieving list of active machines from fleet API ({e})"));
            return 1;
        }
    };
    let (id, was) = match machine_by_prefix(&machines, lookup) {
        Ok(m) => (m.id.clone(), Some(m.cordoned)),
        Err(e) if e == "machine does not exist" && !lookup.is_empty() => (lookup.clone(), None),
        Err(e) => {
            ctx.warn(&format!("Error {verb}ing machine {lookup}: {e}"));
            return 1;
        }
    };
    if let Err(e) = ctx.client.cordon_machine(&id, cordon) {
        ctx.warn(&format!("Error {verb}ing machine {id}: {e}"));
        return 1;
    }
    let done = if cordon { "cordoned" } else { "uncordoned" };
    let note = match was {
        Some(before) if before == cordon => " (it already was)",
        _ => "",
    };
    ctx.say(&format!("Machine {id} {done}{note}"));
    0
}

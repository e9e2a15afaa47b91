//! `MachineMetadata=` and `%i` specifiers.

use crate::check::ensure_eq;
use crate::fixtures;
use crate::{Ctx, Outcome};

/// `MachineMetadata=hostname=%i`: each instance runs on the machine named by its instance; an instance naming no
/// machine cannot start.
pub async fn specifiers(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 3).await?;
    ctx.fleetctl_ok(1, &["submit", &fixtures::path("metadata@.service")]).await?;
    for slot in (1..=3).rev() {
        ctx.fleetctl_ok(1, &["start", "--no-block", &fixtures::path(&format!("metadata@m{slot}.service"))]).await?;
    }
    let active = ctx.wait_for_n_active_units(1, 3).await?;
    for slot in 1..=3 {
        let unit = format!("metadata@m{slot}.service");
        ensure_eq(&format!("machine of {unit}"), Some(&ctx.id(slot)?), active.get(&unit))?;
    }
    let out = ctx.fleetctl(1, &["start", "--block-attempts=5", &fixtures::path("metadata@invalid.service")]).await?;
    ctx.ensure(!out.success(), || "start of metadata@invalid.service (no machine hostname=invalid) must fail".into())
}

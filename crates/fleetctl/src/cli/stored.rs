//! What a stored unit's options mean to fleetctl's listings (pure): its file as the original showed it, and
//! whether it is global. Shared by the tables, the JSON documents and the remote commands.

use fleet_core::schema::Unit;
use fleet_core::unit::{Requirements, UnitFile};

/// The unit as the registry hands it back (spec App. C.10): what `cat` prints and whose hash `list-unit-files`
/// shows. Idempotent, so it is harmless for clients that already return the stored form.
pub fn stored_unit_file(u: &Unit) -> UnitFile {
    let uf = UnitFile::from_options(u.options.clone());
    uf.as_stored().unwrap_or(uf)
}

/// Whether a unit is global, from its options.
pub fn unit_is_global(u: &Unit) -> bool {
    Requirements::of(&UnitFile::from_options(u.options.clone()), &u.name).global
}

//! Units: what fleet moves around. Pure (no I/O).
//!
//! This module owns everything two fleet implementations must agree on about a unit file:
//! * [`parse`] — the systemd unit format exactly as the original (go-systemd `unit.Deserialize`) lexes it;
//! * [`file`] — the ordered option list ([`UnitFile`]), its canonical text and its hash ([`hash`]);
//! * [`name`] — unit name validation, fleetctl's name mangling, templates/instances and `%` specifiers;
//! * [`xfleet`] — the `[X-Fleet]` scheduling requirements and the API's option-combination validation;
//! * [`glob`] — Go `path.Match`, which `Conflicts=` and `Replaces=` patterns use;
//! * [`option`] — the `{section, name, value}` option, which is also the HTTP API v1 wire type;
//! * [`cache`] — [`BodyCache`]: bodies parsed once per hash, requirements once per (name, hash) (engine and agent).
//!
//! Architecture invariant: the unit hash is computed in exactly one place, [`UnitHash::of`], over
//! [`UnitFile::canonical`].

pub mod cache;
pub mod file;
pub mod glob;
pub mod hash;
pub mod name;
pub mod option;
pub mod parse;
pub mod xfleet;

pub use cache::BodyCache;
pub use file::{BlankLine, FileError, UnitFile};
pub use hash::UnitHash;
pub use name::{
    NameError, NameInfo, append_default_type, expand_specifiers, has_recognized_type, mangle, template_of,
    validate_name,
};
pub use option::{Blank, BlankOption, UnitOption, first_blank};
pub use parse::ParseError;
pub use xfleet::{OptionsError, Requirements, unrecognized_xfleet_keys, validate_options};

#[cfg(test)]
mod parse_tests;
#[cfg(test)]
mod property_tests;

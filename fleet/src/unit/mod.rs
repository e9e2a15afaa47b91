//! Unit files: parsing, canonical text, the unit hash, names, templates and `[X-Fleet]` options. Pure: no I/O.

mod option;

pub use option::UnitOption;

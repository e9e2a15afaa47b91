//! One `(section, name, value)` option of a unit file; also the HTTP API v1 wire form of a unit option.

use serde::{Deserialize, Serialize};

/// One option line of a unit file. Field names are the API v1 wire names; an empty value is omitted on the wire
/// (Go `omitempty`) and read back as `""`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UnitOption {
    pub section: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
}

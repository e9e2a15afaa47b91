//! One unit option `(section, name, value)`. This struct is also the HTTP API v1 wire type `UnitOption`
//! (spec §8.5): every field is omitted from JSON when empty and read as `""` when missing (Go `omitempty`).

use serde::{Deserialize, Serialize};

/// One `Name=Value` line of a unit file together with the section it belongs to.
///
/// Fields are declared in the order Go's encoder emits them (`name`, `section`, `value`), so serialized JSON is
/// byte-identical to the original's.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnitOption {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub section: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
}

impl UnitOption {
    pub fn new(section: impl Into<String>, name: impl Into<String>, value: impl Into<String>) -> UnitOption {
        UnitOption { section: section.into(), name: name.into(), value: value.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_matches_go_field_names_order_and_omitempty() {
        let opt = UnitOption::new("Service", "ExecStart", "/bin/true");
        assert_eq!(
            serde_json::to_string(&opt).unwrap(),
            r#"{"name":"ExecStart","section":"Service","value":"/bin/true"}"#
        );
        let empty_value = UnitOption::new("Service", "Environment", "");
        assert_eq!(serde_json::to_string(&empty_value).unwrap(), r#"{"name":"Environment","section":"Service"}"#);
    }

    #[test]
    fn missing_fields_read_as_empty() {
        let opt: UnitOption = serde_json::from_str(r#"{"section":"Service","name":"Environment"}"#).unwrap();
        assert_eq!(opt, UnitOption::new("Service", "Environment", ""));
        let bare: UnitOption = serde_json::from_str("{}").unwrap();
        assert_eq!(bare, UnitOption::new("", "", ""));
    }

    #[test]
    fn transcript_options_decode() {
        // From reference transcript 13 (GET /fleet/v1/units/meta-b.service).
        let json = r#"[{"name":"Description","section":"Unit","value":"Only on role=b"},{"name":"MachineMetadata","section":"X-Fleet","value":"role=b"}]"#;
        let opts: Vec<UnitOption> = serde_json::from_str(json).unwrap();
        assert_eq!(opts[1], UnitOption::new("X-Fleet", "MachineMetadata", "role=b"));
        assert_eq!(serde_json::to_string(&opts).unwrap(), json);
    }
}

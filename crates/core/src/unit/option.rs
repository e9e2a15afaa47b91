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

/// An option no unit file line gives: an empty section (a `[]` header) or an empty name (`=value`). fleet refuses
/// such options (the original stored them); the refusal names the option, or the file's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blank {
    Section,
    Name,
    SectionAndName,
}

impl Blank {
    /// What is blank in `option`, if anything.
    pub fn of(option: &UnitOption) -> Option<Blank> {
        match (option.section.is_empty(), option.name.is_empty()) {
            (true, true) => Some(Blank::SectionAndName),
            (true, false) => Some(Blank::Section),
            (false, true) => Some(Blank::Name),
            (false, false) => None,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Blank::Section => "section",
            Blank::Name => "name",
            Blank::SectionAndName => "section and name",
        }
    }
}

/// The API's refusal of options given as JSON (no lines to point at): the first blank option, by index, section
/// and name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "option {index} (section {}, name {}) has an empty {}",
    crate::go::quote(section),
    crate::go::quote(name),
    blank.what()
)]
pub struct BlankOption {
    pub index: usize,
    pub section: String,
    pub name: String,
    pub blank: Blank,
}

/// The first option of `options` with an empty section or name.
pub fn first_blank(options: &[UnitOption]) -> Option<BlankOption> {
    options.iter().enumerate().find_map(|(index, o)| {
        Blank::of(o).map(|blank| BlankOption { index, section: o.section.clone(), name: o.name.clone(), blank })
    })
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
    fn a_blank_option_is_named_by_index_section_and_name() {
        let options = [
            UnitOption::new("Service", "ExecStart", "/bin/true"),
            UnitOption::new("Service", "", "value"),
            UnitOption::new("", "Description", "x"),
        ];
        let blank = first_blank(&options).unwrap();
        assert_eq!(blank.to_string(), r#"option 1 (section "Service", name "") has an empty name"#);
        assert_eq!(
            first_blank(&options[2..]).unwrap().to_string(),
            r#"option 0 (section "", name "Description") has an empty section"#
        );
        assert_eq!(
            first_blank(&[UnitOption::new("", "", "")]).unwrap().to_string(),
            r#"option 0 (section "", name "") has an empty section and name"#
        );
        assert_eq!(first_blank(&options[..1]), None);
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

//! STOPGAP until the `unit` module (parse/hash/names) is merged: the small subset of its planned API that fleetctl
//! and the fake client need, with the planned names, so that switching is a change of `use` lines. Delete this file
//! when `crate::unit` provides `UnitFile`, `validate_name`, `mangle`, `append_default_type`, `Requirements` and
//! `validate_options`.
//!
//! Simplifications against spec §4–§5 (the real module owns the exact behaviour): the parser is line based, option
//! validation (§5.1) only checks the combination table, and `[X-Fleet]` multi-value splitting is not done.

use sha1::{Digest, Sha1};

use crate::unit::UnitOption;

/// Why a unit file could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unable to find end of section")]
    NoEndOfSection,
    #[error("found garbage after section name {section}: {garbage:?}")]
    GarbageAfterSection { section: String, garbage: Vec<u8> },
    #[error("unexpected newline encountered while parsing option name")]
    NewlineInName,
    #[error("EOF")]
    Eof,
    #[error("line too long (max 2048 bytes)")]
    LineTooLong,
}

/// An ordered list of unit options.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnitFile {
    options: Vec<UnitOption>,
}

/// SHA-1 of a unit's canonical text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnitHash([u8; 20]);

impl UnitHash {
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn short(&self) -> String {
        self.to_hex()[..7].to_string()
    }
}

impl UnitFile {
    pub fn from_options(options: Vec<UnitOption>) -> Self {
        UnitFile { options }
    }

    pub fn options(&self) -> &[UnitOption] {
        &self.options
    }

    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut options = Vec::new();
        let mut section: Option<String> = None;
        let lines: Vec<&str> = text.split('\n').collect();
        let mut i = 0;
        while i < lines.len() {
            let raw = lines[i];
            i += 1;
            if raw.len() >= 2048 {
                return Err(ParseError::LineTooLong);
            }
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            let trimmed = line.trim();
            if trimmed.is_empty() {
                continue;
            }
            if trimmed.starts_with('#') || trimmed.starts_with(';') {
                let mut cur = trimmed.to_string();
                while (cur.ends_with('\\') || cur.ends_with("\\ ")) && i < lines.len() {
                    cur = lines[i].to_string();
                    i += 1;
                }
                continue;
            }
            if let Some(rest) = trimmed.strip_prefix('[') {
                let Some(end) = rest.find(']') else { return Err(ParseError::NoEndOfSection) };
                let garbage = rest[end + 1..].trim();
                if !garbage.is_empty() {
                    return Err(ParseError::GarbageAfterSection {
                        section: String::new(),
                        garbage: garbage.as_bytes().to_vec(),
                    });
                }
                section = Some(rest[..end].to_string());
                continue;
            }
            let Some(sec) = section.clone() else { continue };
            let Some(eq) = line.find('=') else {
                return Err(if i >= lines.len() { ParseError::Eof } else { ParseError::NewlineInName });
            };
            let name = line[..eq].trim().to_string();
            let mut value = line[eq + 1..].to_string();
            while value.ends_with('\\') && i < lines.len() && !lines[i].trim().is_empty() {
                value.push('\n');
                value.push_str(lines[i].strip_suffix('\r').unwrap_or(lines[i]));
                i += 1;
            }
            options.push(UnitOption { section: sec, name, value: value.trim().to_string() });
        }
        Ok(UnitFile { options })
    }

    /// Canonical text (§4.3).
    pub fn canonical(&self) -> String {
        let mut order: Vec<&str> = Vec::new();
        for o in &self.options {
            if !order.contains(&o.section.as_str()) {
                order.push(&o.section);
            }
        }
        let mut out = String::new();
        for (idx, sec) in order.iter().enumerate() {
            if idx > 0 {
                out.push('\n');
            }
            out.push('[');
            out.push_str(sec);
            out.push_str("]\n");
            for o in self.options.iter().filter(|o| o.section == *sec) {
                out.push_str(&o.name);
                out.push('=');
                out.push_str(&o.value);
                out.push('\n');
            }
        }
        out
    }

    pub fn hash(&self) -> UnitHash {
        let digest = Sha1::digest(self.canonical().as_bytes());
        let mut h = [0u8; 20];
        h.copy_from_slice(&digest);
        UnitHash(h)
    }

    pub fn description(&self) -> String {
        self.options
            .iter()
            .find(|o| o.section == "Unit" && o.name == "Description")
            .map(|o| o.value.clone())
            .unwrap_or_default()
    }

    fn values(&self, name: &str) -> Vec<&str> {
        self.options.iter().filter(|o| o.section == "X-Fleet" && o.name == name).map(|o| o.value.as_str()).collect()
    }
}

/// What fleet needs from `[X-Fleet]` here.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Requirements {
    pub global: bool,
}

impl Requirements {
    pub fn of(uf: &UnitFile, _name: &str) -> Self {
        let global = uf
            .values("Global")
            .last()
            .map(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "1" | "on" | "t"))
            .unwrap_or(false);
        Requirements { global }
    }
}

/// Invalid `[X-Fleet]` combination (§5.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OptionsError(pub String);

pub fn validate_options(uf: &UnitFile) -> Result<(), OptionsError> {
    let has = |names: &[&str]| names.iter().any(|n| !uf.values(n).is_empty());
    let target = has(&["MachineID", "X-ConditionMachineID", "X-ConditionMachineBootID"]);
    let peers = has(&["MachineOf", "X-ConditionMachineOf"]);
    let conflicts = has(&["Conflicts", "X-Conflicts"]);
    let replaces = has(&["Replaces"]);
    let global = Requirements::of(uf, "").global;
    let err = |s: &str| Err(OptionsError(s.to_string()));
    match () {
        _ if target && peers => err("MachineID cannot be used with Peers"),
        _ if target && conflicts => err("MachineID cannot be used with Conflicts"),
        _ if target && global => err("MachineID cannot be used with Global"),
        _ if target && replaces => err("MachineID cannot be used with Replaces"),
        _ if global && peers => err("Global cannot be used with Peers"),
        _ if global && replaces => err("Global cannot be used with Replaces"),
        _ if conflicts && replaces => err("Conflicts cannot be used with Replaces"),
        _ => Ok(()),
    }
}

const RECOGNISED_XFLEET: [&str; 11] = [
    "MachineID",
    "X-ConditionMachineID",
    "X-ConditionMachineBootID",
    "X-ConditionMachineOf",
    "MachineOf",
    "X-Conflicts",
    "Conflicts",
    "X-ConditionMachineMetadata",
    "MachineMetadata",
    "Global",
    "Replaces",
];

pub fn unrecognized_xfleet_keys(uf: &UnitFile) -> Vec<String> {
    uf.options
        .iter()
        .filter(|o| o.section == "X-Fleet" && !RECOGNISED_XFLEET.contains(&o.name.as_str()))
        .map(|o| o.name.clone())
        .collect()
}

/// Invalid unit name (§4.4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(pub String);

const VALID_TYPES: [&str; 13] = [
    "automount",
    "busname",
    "device",
    "mount",
    "path",
    "scope",
    "service",
    "slice",
    "snapshot",
    "socket",
    "swap",
    "target",
    "timer",
];
const TEMPLATE_TYPES: [&str; 5] = ["path", "service", "socket", "target", "timer"];
const RECOGNISED_TYPES: [&str; 7] = ["service", "socket", "timer", "path", "device", "mount", "automount"];

pub fn validate_name(name: &str) -> Result<(), NameError> {
    let e = |s: String| Err(NameError(s));
    if name.is_empty() {
        return e("unit name cannot be empty".into());
    }
    if name.len() > 256 {
        return e("unit name exceeds maximum length (256)".into());
    }
    let Some(dot) = name.rfind('.') else { return e("unit name must contain \".\"".into()) };
    if dot == name.len() - 1 {
        return e("unit name cannot end in \".\"".into());
    }
    let suffix = &name[dot + 1..];
    if !VALID_TYPES.contains(&suffix) {
        return e(format!("invalid unit type: {suffix:?}"));
    }
    if name.contains('@') && !TEMPLATE_TYPES.contains(&suffix) {
        return e(format!("invalid unit type for template: {suffix:?}"));
    }
    for c in name[..dot].chars() {
        if !(c.is_ascii_alphanumeric() || ":-_.\\@".contains(c)) {
            return e(format!("invalid character {c:?} in unit name"));
        }
    }
    if name.starts_with('@') {
        return e("unit name cannot start in \"@\"".into());
    }
    Ok(())
}

fn has_recognised_suffix(s: &str) -> bool {
    RECOGNISED_TYPES.iter().any(|t| s.ends_with(&format!(".{t}")))
}

/// `path` + `.service` unless it already ends in a recognised unit type.
pub fn append_default_type(path: &str) -> String {
    if has_recognised_suffix(path) { path.to_string() } else { format!("{path}.service") }
}

/// Basename of `arg` with the default type appended.
pub fn mangle(arg: &str) -> String {
    let trimmed = arg.trim_end_matches('/');
    let base = trimmed.rsplit('/').next().unwrap_or(trimmed);
    append_default_type(if base.is_empty() { arg } else { base })
}

/// Template/instance information of a unit name (§4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameInfo {
    pub prefix: String,
    pub instance: String,
    pub suffix: String,
    has_at: bool,
}

impl NameInfo {
    pub fn parse(name: &str) -> Option<Self> {
        let dot = name.rfind('.')?;
        let (base, suffix) = (&name[..dot], &name[dot..]);
        match base.find('@') {
            Some(at) => Some(NameInfo {
                prefix: base[..at].to_string(),
                instance: base[at + 1..].to_string(),
                suffix: suffix.to_string(),
                has_at: true,
            }),
            None => Some(NameInfo {
                prefix: base.to_string(),
                instance: String::new(),
                suffix: suffix.to_string(),
                has_at: false,
            }),
        }
    }

    pub fn is_instance(&self) -> bool {
        self.has_at && !self.instance.is_empty()
    }

    pub fn is_template(&self) -> bool {
        self.has_at && self.instance.is_empty()
    }

    pub fn template(&self) -> String {
        format!("{}@{}", self.prefix, self.suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_vectors() {
        let uf = UnitFile::parse("[Service]\nExecStart=/bin/sleep 100\n").unwrap();
        assert_eq!(uf.hash().to_hex(), "1c6fb6f3684bafb0c173d8b8b957ceff031180c1");
        assert_eq!(UnitFile::default().hash().short(), "da39a3e");
        let hello = "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi; sleep 1; done\"\n";
        assert_eq!(UnitFile::parse(hello).unwrap().hash().short(), "ceced3b");
        assert_eq!(UnitFile::parse(hello).unwrap().canonical(), hello);
    }

    #[test]
    fn names() {
        assert_eq!(mangle("foo"), "foo.service");
        assert_eq!(mangle("foo/bar.socket"), "bar.socket");
        assert_eq!(mangle("foo.target"), "foo.target.service");
        assert_eq!(validate_name("bad name.service").unwrap_err().to_string(), "invalid character ' ' in unit name");
        assert_eq!(
            validate_name("tmpl@x.device").unwrap_err().to_string(),
            "invalid unit type for template: \"device\""
        );
        let i = NameInfo::parse("hello@1.service").unwrap();
        assert!(i.is_instance());
        assert_eq!(i.template(), "hello@.service");
        assert!(NameInfo::parse("hello@.service").unwrap().is_template());
    }
}

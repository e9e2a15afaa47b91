//! [`UnitFile`]: a unit as fleet holds it — the ordered option list (duplicates kept), its canonical text
//! (spec §4.3, what `fleetctl cat` prints and the registry stores) and its hash.

use std::fmt;

use super::hash::UnitHash;
use super::option::{Blank, UnitOption};
use super::parse::{self, ParseError};

/// The section whose values may hold several quoted items (spec §4.2).
pub const XFLEET_SECTION: &str = "X-Fleet";

/// Why a submitted unit file is refused ([`UnitFile::parse_submitted`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// The parser's error, in the original's words.
    #[error(transparent)]
    Parse(ParseError),
    #[error(transparent)]
    Blank(BlankLine),
}

/// A line of a unit file that gives an option an empty section or name: `<line>: "<text>": <what>` (the file's
/// name goes before it, as systemd prints `file:line: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}: {}: {what}", crate::go::quote(text))]
pub struct BlankLine {
    /// 1-based.
    pub line: usize,
    pub text: String,
    pub what: &'static str,
}

/// A unit file: its options in file order. Two units are the same unit iff their canonical texts (and so their
/// hashes) are equal.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct UnitFile {
    options: Vec<UnitOption>,
    /// For each `[X-Fleet]` option whose value is a quoted multi-value line: (option index, its items).
    /// Precomputed so lookups can hand out borrowed strings.
    multi_values: Vec<(usize, Vec<String>)>,
}

impl UnitFile {
    /// Parses unit-file text (spec §4.1).
    pub fn parse(text: &str) -> Result<UnitFile, ParseError> {
        parse::parse(text).map(UnitFile::from_options)
    }

    /// Parses raw file bytes; invalid UTF-8 becomes U+FFFD byte by byte (spec App. C.7).
    pub fn parse_bytes(bytes: &[u8]) -> Result<UnitFile, ParseError> {
        parse::parse_bytes(bytes).map(UnitFile::from_options)
    }

    /// Parses a unit file a user submits: as [`UnitFile::parse_bytes`], and refused when a line gives an option an
    /// empty section or name (which the API refuses), naming that line. The parser's own errors keep the
    /// original's wording ([`FileError::Parse`]).
    pub fn parse_submitted(bytes: &[u8]) -> Result<UnitFile, FileError> {
        let placed = parse::parse_bytes_placed(bytes).map_err(FileError::Parse)?;
        if let Some((blank, p)) = placed.iter().find_map(|p| Blank::of(&p.option).map(|b| (b, p))) {
            // A blank section is fixed at its header, which comes before the option.
            let refused = match blank {
                Blank::Section | Blank::SectionAndName => {
                    BlankLine { line: p.section_line, text: p.section_text.clone(), what: "section has an empty name" }
                }
                Blank::Name => BlankLine { line: p.line, text: p.text.clone(), what: "option has an empty name" },
            };
            return Err(FileError::Blank(refused));
        }
        Ok(UnitFile::from_options(placed.into_iter().map(|p| p.option).collect()))
    }

    /// A unit from API options (spec §8.5), kept exactly as given.
    pub fn from_options(options: Vec<UnitOption>) -> UnitFile {
        let multi_values = options
            .iter()
            .enumerate()
            .filter(|(_, opt)| opt.section == XFLEET_SECTION && is_multi_value(&opt.value))
            .map(|(i, opt)| (i, split_multi_value(&opt.value)))
            .collect();
        UnitFile { options, multi_values }
    }

    pub fn options(&self) -> &[UnitOption] {
        &self.options
    }

    pub fn into_options(self) -> Vec<UnitOption> {
        self.options
    }

    pub fn is_empty(&self) -> bool {
        self.options.is_empty()
    }

    /// The canonical text (spec §4.3): options grouped by section in order of each section's first appearance,
    /// `[<section>]\n` then `<name>=<value>\n` per option, one blank line between sections; empty for no options.
    pub fn canonical(&self) -> String {
        let mut sections: Vec<&str> = Vec::new();
        let mut size = 0;
        for opt in &self.options {
            if !sections.contains(&opt.section.as_str()) {
                sections.push(&opt.section);
                size += opt.section.len() + 4;
            }
            size += opt.name.len() + opt.value.len() + 2;
        }
        let mut out = String::with_capacity(size);
        for (i, section) in sections.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push('[');
            out.push_str(section);
            out.push_str("]\n");
            for opt in self.options.iter().filter(|opt| opt.section == *section) {
                out.push_str(&opt.name);
                out.push('=');
                out.push_str(&opt.value);
                out.push('\n');
            }
        }
        out
    }

    /// SHA-1 of [`UnitFile::canonical`].
    pub fn hash(&self) -> UnitHash {
        UnitHash::of(&self.canonical())
    }

    /// The unit as the registry hands it back: the original stores the canonical text and parses it again on
    /// every read, so what `fleetctl cat` and `list-unit-files` show is this form. It differs from `self` only
    /// when a value ends in a backslash (spec App. C.10): the stored text then continues that value onto the
    /// next line. Fails only for option sets whose canonical text is not a valid unit file (see
    /// [`crate::unit::xfleet::validate_options`], which rejects those before they are stored).
    pub fn as_stored(&self) -> Result<UnitFile, ParseError> {
        UnitFile::parse(&self.canonical())
    }

    /// The first `[Unit] Description`, or "".
    pub fn description(&self) -> &str {
        self.values("Unit", "Description").first().copied().unwrap_or("")
    }

    /// All values of `name` in `section`, in file order ("Contents" in the original). In `[X-Fleet]` a value
    /// that starts and ends with `"` is split into its quoted items (spec §4.2).
    pub fn values(&self, section: &str, name: &str) -> Vec<&str> {
        let mut values = Vec::new();
        let mut multi = self.multi_values.iter().peekable();
        for (i, opt) in self.options.iter().enumerate() {
            while multi.next_if(|(at, _)| *at < i).is_some() {}
            if opt.section != section || opt.name != name {
                continue;
            }
            match multi.peek() {
                Some((at, items)) if *at == i => values.extend(items.iter().map(String::as_str)),
                _ => values.push(opt.value.as_str()),
            }
        }
        values
    }

    /// Whether any option belongs to `section` (e.g. `Install`, spec §4.6). Sections without options vanish.
    pub fn has_section(&self, section: &str) -> bool {
        self.options.iter().any(|opt| opt.section == section)
    }

    /// Whether the file defines `ExecReload=` (a replace without restart reloads the running unit).
    pub fn defines_reload(&self) -> bool {
        self.values("Service", "ExecReload").iter().any(|v| !v.is_empty())
    }

    /// Distinct option names of `section`, in order of first appearance.
    pub fn names_in(&self, section: &str) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for opt in self.options.iter().filter(|opt| opt.section == section) {
            if !names.contains(&opt.name.as_str()) {
                names.push(&opt.name);
            }
        }
        names
    }
}

impl fmt::Debug for UnitFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnitFile").field(&self.options).finish()
    }
}

impl From<Vec<UnitOption>> for UnitFile {
    fn from(options: Vec<UnitOption>) -> UnitFile {
        UnitFile::from_options(options)
    }
}

fn is_multi_value(value: &str) -> bool {
    value.starts_with('"') && value.ends_with('"')
}

/// `parseMultivalueLine`: splits on spaces (only `' '`) outside double quotes and drops every `"`.
/// Works on bytes like the original; quotes and spaces are ASCII, so items stay valid UTF-8.
fn split_multi_value(value: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in value.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => items.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    items.push(current);
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_value_examples_from_unit_test_go() {
        let cases: &[(&str, &[&str])] = &[
            (r#""bar" "ping" "pong""#, &["bar", "ping", "pong"]),
            (r#""bar""#, &["bar"]),
            (r#""""#, &[""]),
            (r#""bar"#, &[r#""bar"#]),
            (r#"foo\"bar"#, &[r#"foo\"bar"#]),
            (r#""bar" ""#, &["bar", ""]),
            (r#""foo\"bar""#, &[r"foo\bar"]),
            // App. C.9: only spaces separate; a tab does not, two spaces give an empty item.
            ("\"a\"\t\"b\"", &["a\tb"]),
            (r#""a"  "b""#, &["a", "", "b"]),
            (r#""123" "456""#, &["123", "456"]),
            (r#""role=a role=b""#, &["role=a role=b"]),
            ("\"", &[""]),
        ];
        for (value, want) in cases {
            let unit = UnitFile::from_options(vec![UnitOption::new("X-Fleet", "K", *value)]);
            assert_eq!(unit.values("X-Fleet", "K"), *want, "value {value:?}");
            // Outside [X-Fleet] values are never split.
            let plain = UnitFile::from_options(vec![UnitOption::new("Service", "K", *value)]);
            assert_eq!(plain.values("Service", "K"), [*value]);
        }
    }

    #[test]
    fn values_keep_file_order_across_duplicates_and_sections() {
        let unit = UnitFile::parse(
            "[X-Fleet]\nMachineMetadata=\"a=1\" \"b=2\"\n[Unit]\nDescription=x\n[X-Fleet]\nMachineMetadata=c=3\n",
        )
        .unwrap();
        assert_eq!(unit.values("X-Fleet", "MachineMetadata"), ["a=1", "b=2", "c=3"]);
        assert_eq!(unit.values("X-Fleet", "Nope"), Vec::<&str>::new());
        assert_eq!(unit.description(), "x");
        assert!(unit.has_section("Unit"));
        assert!(!unit.has_section("Install"));
        assert_eq!(unit.names_in("X-Fleet"), ["MachineMetadata"]);
    }

    #[test]
    fn description_is_first_unit_description() {
        let unit = UnitFile::parse("[Unit]\nDescription=first\nDescription=second\n").unwrap();
        assert_eq!(unit.description(), "first");
        assert_eq!(UnitFile::parse("[Service]\nDescription=not unit\n").unwrap().description(), "");
    }
}

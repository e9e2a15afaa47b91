//! Unit names (spec §4.4, §4.5): the API's validation with the original's messages, fleetctl's mangling of
//! command-line arguments, templates and instances, and the `%` specifiers fleet expands in `[X-Fleet]` values.

/// Unit types the agent manages (`unit.RecognizedUnitType`); fleetctl appends `.service` to anything else.
pub const RECOGNIZED_TYPES: [&str; 7] = ["service", "socket", "timer", "path", "device", "mount", "automount"];

/// Unit types the API accepts in a name (`api.ValidateName`). A superset of [`RECOGNIZED_TYPES`] (spec B16).
pub const VALID_TYPES: [&str; 13] = [
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

/// Unit types a template or instance (a name containing `@`) may have.
pub const TEMPLATE_TYPES: [&str; 5] = ["path", "service", "socket", "target", "timer"];

/// Longest accepted unit name, in bytes.
pub const NAME_MAX: usize = 256;

/// A name the API rejects. `Display` is the original's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("unit name cannot be empty")]
    Empty,
    #[error("unit name exceeds maximum length (256)")]
    TooLong,
    #[error("unit name must contain \".\"")]
    NoDot,
    #[error("unit name cannot end in \".\"")]
    EndsInDot,
    #[error("invalid unit type: {}", crate::go::quote(.0))]
    InvalidType(String),
    #[error("invalid unit type for template: {}", crate::go::quote(.0))]
    InvalidTemplateType(String),
    #[error("invalid character {} in unit name", crate::go::quote_rune(*.0))]
    InvalidCharacter(char),
    #[error("unit name cannot start in \"@\"")]
    StartsWithAt,
    /// A leading dot makes a hidden file (or `..`) in the units directory; no agent would load it.
    #[error("unit name cannot start in \".\"")]
    StartsWithDot,
}

/// `api.ValidateName`: the rules of spec §4.4, checked in the original's order.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > NAME_MAX {
        return Err(NameError::TooLong);
    }
    let Some(dot) = name.rfind('.') else {
        return Err(NameError::NoDot);
    };
    let suffix = &name[dot + 1..];
    if suffix.is_empty() {
        return Err(NameError::EndsInDot);
    }
    if !VALID_TYPES.contains(&suffix) {
        return Err(NameError::InvalidType(suffix.to_string()));
    }
    if name.contains('@') && !TEMPLATE_TYPES.contains(&suffix) {
        return Err(NameError::InvalidTemplateType(suffix.to_string()));
    }
    if let Some(bad) = name[..dot].chars().find(|&c| !is_valid_name_char(c)) {
        return Err(NameError::InvalidCharacter(bad));
    }
    if name.starts_with('@') {
        return Err(NameError::StartsWithAt);
    }
    if name.starts_with('.') {
        return Err(NameError::StartsWithDot);
    }
    Ok(())
}

/// `[0-9a-zA-Z]` and the literal characters `:-_.\@` (not a range).
fn is_valid_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.' | '\\' | '@')
}

/// Whether the name ends in `.<type>` for one of the agent's [`RECOGNIZED_TYPES`].
pub fn has_recognized_type(name: &str) -> bool {
    RECOGNIZED_TYPES
        .iter()
        .any(|t| name.len() > t.len() && name.ends_with(t) && name[..name.len() - t.len()].ends_with('.'))
}

/// `maybeAppendDefaultUnitType`: appends `.service` unless the text already ends in a recognised type. fleetctl
/// applies it to file paths before looking them up on disk (`foo.target` → `foo.target.service`).
pub fn append_default_type(path: &str) -> String {
    if has_recognized_type(path) { path.to_string() } else { format!("{path}.service") }
}

/// `unitNameMangle`: the unit name fleetctl derives from a command-line argument — the last path element, with
/// `.service` appended unless it ends in a recognised type (`foo/bar.socket` → `bar.socket`, `foo` →
/// `foo.service`).
pub fn mangle(arg: &str) -> String {
    append_default_type(go_path_base(arg))
}

/// The unit names of command-line arguments ([`mangle`]d: `foo` → `foo.service`), each once, in argument order.
pub fn mangle_unique(args: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for arg in args {
        let name = mangle(arg);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Go `path.Base`: the last `/`-separated element; `.` for "", `/` for all slashes.
fn go_path_base(path: &str) -> &str {
    if path.is_empty() {
        return ".";
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/";
    }
    match trimmed.rfind('/') {
        Some(slash) => &trimmed[slash + 1..],
        None => trimmed,
    }
}

/// What a unit name says about templates (`unit.NewUnitNameInfo`, spec §4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameInfo {
    /// The complete name (`foo@bar.service`).
    pub full_name: String,
    /// The name without the suffix (`foo@bar`).
    pub name: String,
    /// Text before the first `@`, or the whole `name` when there is no `@` (`foo`).
    pub prefix: String,
    /// The suffix including its dot (`.service`).
    pub suffix: String,
    /// `<prefix>@<suffix>` when the name contains `@` (`foo@.service`), else "".
    pub template: String,
    /// Text after the first `@` (`bar`; `bar@baz` for `foo@bar@baz.service`), else "".
    pub instance: String,
}

impl NameInfo {
    /// `None` for a name without a `.`.
    pub fn parse(unit_name: &str) -> Option<NameInfo> {
        let dot = unit_name.rfind('.')?;
        let (name, suffix) = unit_name.split_at(dot);
        let (prefix, template, instance) = match name.split_once('@') {
            Some((prefix, instance)) => (prefix, format!("{prefix}@{suffix}"), instance),
            None => (name, String::new(), ""),
        };
        Some(NameInfo {
            full_name: unit_name.to_string(),
            name: name.to_string(),
            prefix: prefix.to_string(),
            suffix: suffix.to_string(),
            template,
            instance: instance.to_string(),
        })
    }

    /// An instance has a non-empty instance string (`foo@x.service`).
    pub fn is_instance(&self) -> bool {
        !self.instance.is_empty()
    }

    /// A template has an `@` and an empty instance (`foo@.service`).
    pub fn is_template(&self) -> bool {
        !self.template.is_empty() && !self.is_instance()
    }

    /// The name of this template's instance `instance` (`foo@.service` + `x` → `foo@x.service`); `None` unless
    /// this is a template.
    pub fn instance_name(&self, instance: &str) -> Option<String> {
        self.is_template().then(|| format!("{}@{}{}", self.prefix, instance, self.suffix))
    }
}

/// The template an instance is created from (`foo@x.service` → `foo@.service`); `None` unless `name` is an
/// instance. An instance's unit file is a copy of its template's (spec §4.5): there is nothing to rewrite.
pub fn template_of(name: &str) -> Option<String> {
    NameInfo::parse(name).filter(NameInfo::is_instance).map(|info| info.template)
}

/// `unitPrintf`: replaces `%n`, `%N`, `%p`, `%i` in that order, by plain string replacement (a replacement can
/// therefore introduce a specifier that a later step expands, as in the original). Names without a `.` expand
/// nothing.
pub fn expand_specifiers(value: &str, unit_name: &str) -> String {
    let Some(info) = NameInfo::parse(unit_name) else {
        return value.to_string();
    };
    if !value.contains('%') {
        return value.to_string();
    }
    value
        .replace("%n", &info.full_name)
        .replace("%N", &info.name)
        .replace("%p", &info.prefix)
        .replace("%i", &info.instance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_accept_list() {
        for name in [
            "foo.service",
            "foo@.service",
            "foo@123.service",
            "yo.yo.service",
            "hello:world.service",
            r"yes@no\.service",
            "foo-bar.mount",
            "hello.socket",
            "a_b.target",
            "x.busname",
            "x.snapshot",
            "x.swap",
            "x.slice",
            "x.scope",
            "x.automount",
            "x.device",
            "x.path",
            "x.timer",
            "t@1.timer",
            "p@1.path",
            "s@1.socket",
            "t@1.target",
        ] {
            assert_eq!(validate_name(name), Ok(()), "{name}");
        }
        assert_eq!(validate_name(&format!("{}.service", "a".repeat(248))), Ok(()));
    }

    #[test]
    fn names_no_agent_could_write_are_refused() {
        // Found by the security conformance spec: the API stored `..\escape.service`, which every agent refused
        // to write (a hidden file in the units directory).
        for name in [r"..\escape.service", ".hidden.service", "..service"] {
            assert_eq!(validate_name(name), Err(NameError::StartsWithDot), "{name}");
        }
    }

    #[test]
    fn spec_reject_list_with_messages() {
        let cases: &[(&str, &str)] = &[
            ("", "unit name cannot be empty"),
            ("foo", "unit name must contain \".\""),
            ("foo.", "unit name cannot end in \".\""),
            ("foo.servICE", "invalid unit type: \"servICE\""),
            ("foo.target.bogus", "invalid unit type: \"bogus\""),
            ("foo.a\"b", "invalid unit type: \"a\\\"b\""),
            ("foo%.service", "invalid character '%' in unit name"),
            ("yes/no.service", "invalid character '/' in unit name"),
            ("bad name.service", "invalid character ' ' in unit name"),
            ("bad$char.service", "invalid character '$' in unit name"),
            ("it's.service", "invalid character '\\'' in unit name"),
            ("tab\there.service", "invalid character '\\t' in unit name"),
            ("nb\u{a0}sp.service", "invalid character '\\u00a0' in unit name"),
            ("é.service", "invalid character 'é' in unit name"),
            ("dog=woof@.mount", "invalid unit type for template: \"mount\""),
            ("tmpl@x.device", "invalid unit type for template: \"device\""),
            ("foo@1.mount", "invalid unit type for template: \"mount\""),
            ("@foo.service", "unit name cannot start in \"@\""),
            ("@.service", "unit name cannot start in \"@\""),
        ];
        for (name, message) in cases {
            let err = validate_name(name).unwrap_err();
            assert_eq!(err.to_string(), *message, "{name:?}");
        }
        let long = format!("{}.service", "a".repeat(249));
        assert_eq!(validate_name(&long), Err(NameError::TooLong));
        assert_eq!(NameError::TooLong.to_string(), "unit name exceeds maximum length (256)");
    }

    #[test]
    fn rules_apply_in_the_original_order() {
        // Type before characters, characters before the leading '@'.
        assert_eq!(validate_name("b d.bogus"), Err(NameError::InvalidType("bogus".into())));
        assert_eq!(validate_name("@b d.service"), Err(NameError::InvalidCharacter(' ')));
        assert_eq!(validate_name("b d@.mount"), Err(NameError::InvalidTemplateType("mount".into())));
        // Length is counted in bytes.
        let multibyte = format!("{}.service", "é".repeat(125));
        assert_eq!(validate_name(&multibyte), Err(NameError::TooLong));
    }

    #[test]
    fn mangling_examples() {
        let cases = [
            ("foo", "foo.service"),
            ("foo.1", "foo.1.service"),
            ("foo/bar.socket", "bar.socket"),
            ("foo.target", "foo.target.service"),
            ("./units/hello.service", "hello.service"),
            ("hello@1.service", "hello@1.service"),
            ("dir/", "dir.service"),
            ("a.automount", "a.automount"),
            ("a.mount", "a.mount"),
            ("", "..service"),
            ("/", "/.service"),
            (".service", ".service"),
        ];
        for (arg, want) in cases {
            assert_eq!(mangle(arg), want, "{arg:?}");
        }
        assert_eq!(append_default_type("units/foo"), "units/foo.service");
        assert_eq!(append_default_type("units/foo.timer"), "units/foo.timer");
    }

    #[test]
    fn name_info_templates_and_instances() {
        let info = NameInfo::parse("foo@bar.service").unwrap();
        assert_eq!((info.name.as_str(), info.prefix.as_str()), ("foo@bar", "foo"));
        assert_eq!((info.template.as_str(), info.instance.as_str()), ("foo@.service", "bar"));
        assert!(info.is_instance() && !info.is_template());

        let nested = NameInfo::parse("foo@bar@baz.service").unwrap();
        assert_eq!(nested.instance, "bar@baz");
        assert_eq!(nested.template, "foo@.service");

        let template = NameInfo::parse("foo@.service").unwrap();
        assert!(template.is_template() && !template.is_instance());
        assert_eq!(template.instance_name("x").as_deref(), Some("foo@x.service"));

        let plain = NameInfo::parse("foo.service").unwrap();
        assert!(!plain.is_template() && !plain.is_instance());
        assert_eq!(plain.prefix, "foo");
        assert_eq!(plain.instance_name("x"), None);

        assert_eq!(NameInfo::parse("nodot"), None);
        assert_eq!(template_of("foo@x.service").as_deref(), Some("foo@.service"));
        assert_eq!(template_of("foo@.service"), None);
        assert_eq!(template_of("foo.service"), None);
    }

    #[test]
    fn specifiers_expand_in_order() {
        assert_eq!(expand_specifiers("hostname=node%i", "web@3.service"), "hostname=node3");
        assert_eq!(expand_specifiers("%n|%N|%p|%i", "foo@bar.waldo"), "foo@bar.waldo|foo@bar|foo|bar");
        assert_eq!(expand_specifiers("%p-%i", "plain.service"), "plain-");
        assert_eq!(expand_specifiers("%i", "nodot"), "%i");
        assert_eq!(expand_specifiers("100%", "a@b.service"), "100%");
        // %n is replaced first; the %i it brings along is expanded by the later step.
        assert_eq!(expand_specifiers("%n", "a%i@x.service"), "ax@x.service");
        assert_eq!(expand_specifiers("%%i", "a@x.service"), "%x");
    }
}

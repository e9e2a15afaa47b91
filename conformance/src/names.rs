//! The names of the suite's units, and the mapping that keeps a spec to its own units on a shared cluster.
//!
//! On a harness cluster (one per spec) a spec's units are named as the spec names them and nothing here changes
//! anything ([`Names::identity`]). Against a live cluster (`fleet-conformance --against`) every unit a spec creates
//! carries the spec's prefix ([`Names::prefixed`]): the spec keeps writing `hello.service`, and [`crate::Ctx`]
//! translates at the edge — unit names in fleetctl arguments, in HTTP paths and bodies and in commands run inside the
//! machines go out prefixed ([`Names::outward`]); unit files go out with the references between the suite's own
//! units prefixed too ([`rewrite_unit_file`]: `Conflicts=`, `MachineOf=`, `Replaces=`, and systemd's dependencies
//! such as `After=` or `WantedBy=` where they name one of the suite's units); what comes back has the prefix taken
//! off ([`Names::inward`]), and listings keep only the spec's own rows ([`Names::filter_listing`]), so a spec that
//! counts rows counts its own units and never another user's.
//!
//! This module does no I/O: [`crate::Ctx`] reads and writes the files.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// The unit types systemd knows (a unit name is `<name>.<type>`).
pub const UNIT_TYPES: &[&str] =
    &["service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"];

/// Keys of `[X-Fleet]` that name fleet units (also the original's legacy spellings). Every unit these name in a
/// suite unit is one of the suite's own: fleet schedules against fleet units only, and the suite never means a unit
/// it did not create. Globs (`conflict.*.service`) are prefixed as well, so they match the spec's units only.
const FLEET_REFERENCES: &[&str] = &["Conflicts", "MachineOf", "Replaces", "X-Conflicts", "X-ConditionMachineOf"];

/// systemd's keys that name other units, per section. These may name units of the machine (`After=network.target`),
/// so only names of the suite's own units are prefixed.
const SYSTEMD_REFERENCES: &[(&str, &[&str])] = &[
    (
        "Unit",
        &[
            "Requires",
            "Requisite",
            "Wants",
            "BindsTo",
            "PartOf",
            "Upholds",
            "Conflicts",
            "Before",
            "After",
            "OnFailure",
            "OnSuccess",
            "PropagatesReloadTo",
            "ReloadPropagatedFrom",
            "JoinsNamespaceOf",
        ],
    ),
    ("Install", &["WantedBy", "RequiredBy", "UpheldBy", "Also"]),
    ("Socket", &["Service"]),
    ("Timer", &["Unit"]),
    ("Path", &["Unit"]),
];

/// Characters systemd allows in a unit name (before the type suffix).
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '.' | '\\' | '@' | '-')
}

/// Glob characters `Conflicts=` allows in fleet.
fn glob_char(c: char) -> bool {
    matches!(c, '*' | '?' | '[' | ']')
}

fn split_type(s: &str) -> Option<(&str, &str)> {
    let (stem, ty) = s.rsplit_once('.')?;
    (!stem.is_empty() && UNIT_TYPES.contains(&ty)).then_some((stem, ty))
}

/// Whether `s` is a unit name (`<name>.<type>` in systemd's characters; not a glob).
pub fn is_unit_name(s: &str) -> bool {
    split_type(s).is_some_and(|(stem, _)| stem.chars().all(name_char))
}

/// Whether `s` is a unit name or a glob of unit names (`conflict.*.service`).
pub fn is_unit_pattern(s: &str) -> bool {
    split_type(s).is_some_and(|(stem, _)| stem.chars().all(|c| name_char(c) || glob_char(c)))
}

/// The template of an instance: `foo@.service` for `foo@bar.service`; `None` for anything else (a template too).
pub fn template_of(name: &str) -> Option<String> {
    let (stem, ty) = split_type(name)?;
    let (base, instance) = stem.split_once('@')?;
    (!instance.is_empty()).then(|| format!("{base}@.{ty}"))
}

/// `text` with `f` applied to every whitespace-separated word, the white space kept as it was.
fn map_words(text: &str, mut f: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    for c in text.chars() {
        if c.is_whitespace() {
            if !word.is_empty() {
                out.push_str(&f(&word));
                word.clear();
            }
            out.push(c);
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push_str(&f(&word));
    }
    out
}

/// Whether a value of `key` in section `section` names units, and whether every one of them is the suite's
/// (`Some(true)`: fleet's keys) or only those `is_own` accepts (`Some(false)`: systemd's).
fn reference_kind(section: &str, key: &str) -> Option<bool> {
    if section == "X-Fleet" && FLEET_REFERENCES.contains(&key) {
        return Some(true);
    }
    SYSTEMD_REFERENCES.iter().find(|(s, _)| *s == section).filter(|(_, keys)| keys.contains(&key)).map(|_| false)
}

/// One value of `key` in `section` with the suite's unit references prefixed (see [`rewrite_unit_file`]).
pub fn rewrite_value(section: &str, key: &str, value: &str, prefix: &str, is_own: &dyn Fn(&str) -> bool) -> String {
    match reference_kind(section, key) {
        None => value.to_string(),
        Some(all) => map_words(value, |w| {
            let ours = if all { is_unit_pattern(w) } else { is_unit_name(w) && is_own(w) };
            if ours && !w.starts_with(prefix) { format!("{prefix}{w}") } else { w.to_string() }
        }),
    }
}

/// A unit file with the references between the suite's own units prefixed: every unit (or glob) `[X-Fleet]`
/// `Conflicts=`/`MachineOf=`/`Replaces=` name, and the units systemd's dependency keys (`After=`, `Requires=`,
/// `BindsTo=`, `WantedBy=`, ...) name when `is_own` says they are the suite's. Everything else — other keys,
/// comments, other units such as `network.target`, the layout — is kept byte for byte.
pub fn rewrite_unit_file(text: &str, prefix: &str, is_own: &dyn Fn(&str) -> bool) -> String {
    if prefix.is_empty() {
        return text.to_string();
    }
    let mut section = String::new();
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            section = name.to_string();
            out.push_str(line);
            continue;
        }
        if trimmed.starts_with('#') || trimmed.starts_with(';') {
            out.push_str(line);
            continue;
        }
        match line.split_once('=') {
            Some((key, value)) if reference_kind(&section, key.trim()).is_some() => {
                out.push_str(key);
                out.push('=');
                out.push_str(&rewrite_value(&section, key.trim(), value, prefix, is_own));
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// `text` with `prefix` taken off wherever it starts a name (at the start or after a character that cannot be part
/// of a unit name: white space, `/`, `"`, `=`, ...), e.g. `Unit fc-1-hello.service launched` → `Unit hello.service
/// launched`, `/run/fleet/units/fc-1-hello.service` → `/run/fleet/units/hello.service`.
pub fn strip_prefix(text: &str, prefix: &str) -> String {
    if prefix.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut prev: Option<char> = None;
    while let Some(at) = rest.find(prefix) {
        let before = &rest[..at];
        let boundary = before.chars().last().or(prev).is_none_or(|c| !name_char(c));
        out.push_str(before);
        if !boundary {
            out.push_str(prefix);
        }
        prev = prefix.chars().last();
        rest = &rest[at + prefix.len()..];
    }
    out.push_str(rest);
    out
}

/// The rows of a fleetctl listing that name a unit starting with `prefix`; the header line stays when `legend`.
pub fn filter_rows(out: &str, prefix: &str, legend: bool) -> String {
    if prefix.is_empty() {
        return out.to_string();
    }
    let mut kept = String::with_capacity(out.len());
    for (i, line) in out.split_inclusive('\n').enumerate() {
        if (legend && i == 0) || line.split_whitespace().any(|w| w.starts_with(prefix)) {
            kept.push_str(line);
        }
    }
    kept
}

/// A spec's unit names: its prefix (empty on a harness cluster) and the names it has used, which count as its own.
#[derive(Debug, Default)]
pub struct Names {
    prefix: String,
    /// Unit names (as the spec writes them) seen in its fleetctl arguments, HTTP paths and unit file names.
    seen: Mutex<BTreeSet<String>>,
}

impl Names {
    /// No mapping: a harness cluster belongs to one spec.
    pub fn identity() -> Names {
        Names::default()
    }

    /// Every unit of the spec is `<prefix><name>`.
    pub fn prefixed(prefix: &str) -> Names {
        Names { prefix: prefix.to_string(), seen: Mutex::default() }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether names go out unchanged (a harness cluster).
    pub fn is_identity(&self) -> bool {
        self.prefix.is_empty()
    }

    /// Remembers `name` (as the spec writes it) as one of the spec's units.
    pub fn register(&self, name: &str) {
        if is_unit_name(name) && !self.is_identity() {
            self.seen.lock().unwrap().insert(name.to_string());
        }
    }

    /// Whether `name` (as the spec writes it) is one of the suite's units: a fixture, an instance of a fixture
    /// template, or a name the spec has used.
    pub fn is_own(&self, name: &str) -> bool {
        if crate::fixtures::is_fixture(name) {
            return true;
        }
        let seen = self.seen.lock().unwrap();
        seen.contains(name) || template_of(name).is_some_and(|t| seen.contains(&t))
    }

    /// The name on the cluster of the spec's unit `name`.
    pub fn outward(&self, name: &str) -> String {
        if self.is_identity() || name.starts_with(&self.prefix) {
            name.to_string()
        } else {
            format!("{}{name}", self.prefix)
        }
    }

    /// A word of a command run inside a machine: one of the spec's unit names, alone or as the last part of a path
    /// (`/run/fleet/units/hello.service`), goes out prefixed; anything else (`fleet.service`, options) unchanged.
    pub fn command_word(&self, word: &str) -> String {
        if self.is_identity() {
            return word.to_string();
        }
        let (dir, base) = word.rsplit_once('/').map_or(("", word), |(d, b)| (d, b));
        if is_unit_name(base) && self.is_own(base) {
            if dir.is_empty() && !word.starts_with('/') {
                self.outward(base)
            } else {
                format!("{dir}/{}", self.outward(base))
            }
        } else {
            word.to_string()
        }
    }

    /// A unit file of the spec as it goes to the cluster (see [`rewrite_unit_file`]).
    pub fn rewrite_unit_file(&self, text: &str) -> String {
        rewrite_unit_file(text, &self.prefix, &|n| self.is_own(n))
    }

    /// Output of the cluster as the spec reads it: the prefix taken off its unit names.
    pub fn inward(&self, text: &str) -> String {
        strip_prefix(text, &self.prefix)
    }

    /// A fleetctl listing (`list-units`, `list-unit-files`) with the rows of other users' units left out.
    pub fn filter_listing(&self, out: &str, legend: bool) -> String {
        filter_rows(out, &self.prefix, legend)
    }

    /// An HTTP request path with its unit name (`/fleet/v1/units/<name>`, `/fleet/v1/state/<name>`, `?unitName=`)
    /// as it goes to the cluster.
    pub fn request_path(&self, path: &str) -> String {
        if self.is_identity() {
            return path.to_string();
        }
        let (route, query) = path.split_once('?').map_or((path, None), |(r, q)| (r, Some(q)));
        let route = match route.rsplit_once('/') {
            Some((dir, last)) if is_unit_name(last) => {
                self.register(last);
                format!("{dir}/{}", self.outward(last))
            }
            _ => route.to_string(),
        };
        let query = query.map(|q| {
            q.split('&')
                .map(|kv| match kv.split_once('=') {
                    Some(("unitName", v)) if is_unit_name(v) => {
                        self.register(v);
                        format!("unitName={}", self.outward(v))
                    }
                    _ => kv.to_string(),
                })
                .collect::<Vec<_>>()
                .join("&")
        });
        match query {
            Some(q) => format!("{route}?{q}"),
            None => route,
        }
    }

    /// A JSON request body as it goes to the cluster: the unit's `name`, and references in its `options`
    /// (`{"section", "name", "value"}` objects) as in a unit file. A body that is not JSON goes unchanged.
    pub fn request_body(&self, body: &str) -> String {
        if self.is_identity() {
            return body.to_string();
        }
        let Ok(mut v) = serde_json::from_str::<serde_json::Value>(body) else { return body.to_string() };
        let Some(obj) = v.as_object_mut() else { return body.to_string() };
        if let Some(serde_json::Value::String(name)) = obj.get_mut("name")
            && is_unit_name(name)
        {
            self.register(name);
            *name = self.outward(name);
        }
        if let Some(serde_json::Value::Array(options)) = obj.get_mut("options") {
            for o in options.iter_mut().filter_map(|o| o.as_object_mut()) {
                let section = o.get("section").and_then(|s| s.as_str()).unwrap_or_default().to_string();
                let key = o.get("name").and_then(|s| s.as_str()).unwrap_or_default().to_string();
                if let Some(serde_json::Value::String(value)) = o.get_mut("value") {
                    *value = rewrite_value(&section, &key, value, &self.prefix, &|n| self.is_own(n));
                }
            }
        }
        v.to_string()
    }

    /// A JSON response body as the spec reads it: listings (`units`, `states`) keep only the spec's units, and the
    /// prefix comes off every name. A body that is not JSON only loses the prefix.
    pub fn response_body(&self, body: &str) -> String {
        if self.is_identity() {
            return body.to_string();
        }
        let text = match serde_json::from_str::<serde_json::Value>(body) {
            Ok(mut v) => {
                if let Some(obj) = v.as_object_mut() {
                    for key in ["units", "states"] {
                        if let Some(serde_json::Value::Array(items)) = obj.get_mut(key) {
                            items.retain(|i| i["name"].as_str().is_some_and(|n| n.starts_with(&self.prefix)));
                        }
                    }
                }
                v.to_string()
            }
            Err(_) => body.to_string(),
        };
        self.inward(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "fc-1a2b3c-07-";

    fn own(n: &str) -> bool {
        ["hello.service", "ping.0.service"].contains(&n) || n.starts_with("hello@")
    }

    #[test]
    fn references_between_the_suites_units_follow_the_prefix_and_nothing_else_changes() {
        let unit = "# Conflicts=hello.service in a comment stays\n[Unit]\nDescription=Conflicts=hello.service\n\
                    After=network.target hello.service\nBindsTo = hello.service\nRequires=docker.service\n\n\
                    [Service]\nExecStart=/bin/sh -c 'echo hello.service; sleep 1'\n\n\
                    [Install]\nWantedBy=hello.service multi-user.target\n\n\
                    [X-Fleet]\nConflicts=conflict.*.service other.service\nMachineOf=ping.0.service\n\
                    Replaces=replace.0.service\nMachineMetadata=role=hello.service\nMachineID=abc\n";
        let want = "# Conflicts=hello.service in a comment stays\n[Unit]\nDescription=Conflicts=hello.service\n\
                    After=network.target fc-1a2b3c-07-hello.service\nBindsTo = fc-1a2b3c-07-hello.service\n\
                    Requires=docker.service\n\n\
                    [Service]\nExecStart=/bin/sh -c 'echo hello.service; sleep 1'\n\n\
                    [Install]\nWantedBy=fc-1a2b3c-07-hello.service multi-user.target\n\n\
                    [X-Fleet]\nConflicts=fc-1a2b3c-07-conflict.*.service fc-1a2b3c-07-other.service\n\
                    MachineOf=fc-1a2b3c-07-ping.0.service\nReplaces=fc-1a2b3c-07-replace.0.service\n\
                    MachineMetadata=role=hello.service\nMachineID=abc\n";
        assert_eq!(
            rewrite_unit_file(unit, P, &own),
            want,
            "fleet's references all take the prefix, systemd's only for the suite's units; nothing else changes"
        );
        // Repeated lines and template instances, and no double prefix.
        let repeated = "[X-Fleet]\nConflicts=conflict.2.service\nConflicts=fc-1a2b3c-07-conflict.1.service\n";
        assert_eq!(
            rewrite_unit_file(repeated, P, &own),
            "[X-Fleet]\nConflicts=fc-1a2b3c-07-conflict.2.service\nConflicts=fc-1a2b3c-07-conflict.1.service\n",
            "repeated lines each take the prefix, once"
        );
        let instance = "[Unit]\nAfter=hello@3.service\n";
        assert_eq!(
            rewrite_unit_file(instance, P, &own),
            "[Unit]\nAfter=fc-1a2b3c-07-hello@3.service\n",
            "an instance of the suite's template is the suite's"
        );
        // On a harness cluster nothing changes.
        assert_eq!(rewrite_unit_file(unit, "", &own), unit, "without a prefix (a harness cluster) nothing changes");
    }

    #[test]
    fn the_prefix_comes_off_names_only() {
        let out = "Unit fc-1a2b3c-07-hello.service launched on 1234.../10.0.0.2\n\
                   /run/fleet/units/fc-1a2b3c-07-hello@1.service \"fc-1a2b3c-07-x.service\" xfc-1a2b3c-07-y\n";
        assert_eq!(
            strip_prefix(out, P),
            "Unit hello.service launched on 1234.../10.0.0.2\n/run/fleet/units/hello@1.service \"x.service\" \
             xfc-1a2b3c-07-y\n",
            "the prefix comes off where a name starts, not inside a word"
        );
    }

    #[test]
    fn listings_keep_the_header_and_the_specs_own_rows() {
        let out = "UNIT\tMACHINE\nfc-1a2b3c-07-hello.service\tm1\nhello.service\tm2\nfc-1a2b3c-08-a.service\tm3\n";
        assert_eq!(
            filter_rows(out, P, true),
            "UNIT\tMACHINE\nfc-1a2b3c-07-hello.service\tm1\n",
            "the header and the spec's rows; not another user's unit, not another spec's"
        );
        assert_eq!(filter_rows(out, P, false), "fc-1a2b3c-07-hello.service\tm1\n", "--no-legend: no header kept");
    }

    #[test]
    fn http_paths_bodies_and_answers_map_both_ways() {
        let n = Names::prefixed(P);
        assert_eq!(
            n.request_path("/fleet/v1/units/api.service"),
            "/fleet/v1/units/fc-1a2b3c-07-api.service",
            "the unit of a unit's path"
        );
        assert_eq!(
            n.request_path("/fleet/v1/state?unitName=hello.service&machineID=abc"),
            "/fleet/v1/state?unitName=fc-1a2b3c-07-hello.service&machineID=abc"
        );
        assert_eq!(n.request_path("/fleet/v1/units?nextPageToken=x"), "/fleet/v1/units?nextPageToken=x");
        let body = r#"{"name":"api.service","options":[{"section":"X-Fleet","name":"Conflicts","value":"api.service"},{"section":"Unit","name":"After","value":"network.target api.service"}]}"#;
        let v: serde_json::Value = serde_json::from_str(&n.request_body(body)).unwrap();
        assert_eq!(v["name"], "fc-1a2b3c-07-api.service", "the body's unit name");
        assert_eq!(v["options"][0]["value"], "fc-1a2b3c-07-api.service", "an [X-Fleet] reference in the options");
        assert_eq!(v["options"][1]["value"], "network.target fc-1a2b3c-07-api.service", "api.service was used");
        assert_eq!(n.request_body("{not json"), "{not json", "a body that is not JSON goes as it is");
        let answer = r#"{"units":[{"name":"fc-1a2b3c-07-api.service"},{"name":"api.service"}]}"#;
        assert_eq!(
            n.response_body(answer),
            r#"{"units":[{"name":"api.service"}]}"#,
            "a listing keeps the spec's own unit (without its prefix) and drops another user's of the same name"
        );
        assert_eq!(
            n.command_word("/run/fleet/units/api.service"),
            "/run/fleet/units/fc-1a2b3c-07-api.service",
            "a path inside a machine naming the spec's unit"
        );
        assert_eq!(n.command_word("fleet.service"), "fleet.service", "not one of the suite's units");
        assert_eq!(n.command_word("hello.service"), "fc-1a2b3c-07-hello.service", "a fixture");
    }

    #[test]
    fn unit_names_and_templates() {
        assert!(is_unit_name("hello@1.service") && is_unit_name("conflict.multiple.0.service"));
        assert!(!is_unit_name("conflict.*.service") && is_unit_pattern("conflict.*.service"));
        assert!(!is_unit_name("unit,active,machine") && !is_unit_name("--fields") && !is_unit_name(".service"));
        assert_eq!(template_of("hello@1.service").as_deref(), Some("hello@.service"));
        assert_eq!(template_of("hello@.service"), None);
        assert_eq!(template_of("hello.service"), None);
    }
}

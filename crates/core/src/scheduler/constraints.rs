//! A unit's `[X-Fleet]` placement constraints as the scheduler sees them (spec §5), and the relations between two
//! units that depend only on their constraints: conflicts (§6.8) and replacements (§6.10).
//!
//! Values arrive already specifier-expanded: [`Constraints`] is `unit::Requirements`, read once per (name, hash).

use crate::model::MachineState;
use crate::unit::glob::Pattern;

/// Where a unit may run: the unit file's `[X-Fleet]` requirements, already specifier-expanded and split into single
/// values. One struct serves the parser and the scheduler; the scheduler's checks are the `impl` below.
pub use crate::unit::Requirements as Constraints;

/// Why a machine's metadata fails a unit's `MachineMetadata=`: the first required key (in key order) not satisfied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataMismatch {
    pub key: String,
    pub wanted: Vec<String>,
    /// The machine's value for the key; `None` when the machine lacks it.
    pub actual: Option<String>,
}

impl Constraints {
    /// Checks `MachineMetadata=` against a machine: OR within a key, AND across keys; a missing key fails.
    pub fn check_metadata(&self, machine: &MachineState) -> Result<(), MetadataMismatch> {
        for (key, wanted) in &self.machine_metadata {
            let actual = machine.metadata.get(key);
            if !actual.is_some_and(|value| wanted.contains(value)) {
                return Err(MetadataMismatch { key: key.clone(), wanted: wanted.clone(), actual: actual.cloned() });
            }
        }
        Ok(())
    }

    /// Checks `MachineID=` against a machine (full or short ID); `true` when there is no such requirement.
    pub fn allows_machine_id(&self, machine: &MachineState) -> bool {
        self.machine_id.as_deref().is_none_or(|wanted| machine.matches_id(wanted))
    }
}

/// A unit's `Conflicts=` or `Replaces=` patterns, compiled once. Malformed patterns are dropped: they match nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatternSet {
    patterns: Vec<Pattern>,
}

impl PatternSet {
    pub fn compile(patterns: &[String]) -> PatternSet {
        PatternSet { patterns: patterns.iter().filter_map(|p| Pattern::new(p)).collect() }
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    pub fn matches(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(name))
    }

    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }
}

/// True when units `a` and `b` may not share a machine: either one's `Conflicts=` matches the other's name
/// (§6.8). A unit never conflicts with itself.
pub fn conflict_between(a_name: &str, a_conflicts: &PatternSet, b_name: &str, b_conflicts: &PatternSet) -> bool {
    a_name != b_name && (a_conflicts.matches(b_name) || b_conflicts.matches(a_name))
}

/// How two units relate through `Replaces=` (§6.10), seen from unit `x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceRelation {
    None,
    /// `x` replaces the other unit: on a shared machine, the other one moves.
    Replaces,
    /// The other unit replaces `x`: on a shared machine, `x` moves.
    ReplacedBy,
    /// Each replaces the other: at most one of them may be scheduled anywhere (spec B2 Rec).
    Circular,
}

pub fn replace_relation(
    x_name: &str,
    x_replaces: &PatternSet,
    u_name: &str,
    u_replaces: &PatternSet,
) -> ReplaceRelation {
    if x_name == u_name {
        return ReplaceRelation::None;
    }
    match (x_replaces.matches(u_name), u_replaces.matches(x_name)) {
        (false, false) => ReplaceRelation::None,
        (true, false) => ReplaceRelation::Replaces,
        (false, true) => ReplaceRelation::ReplacedBy,
        (true, true) => ReplaceRelation::Circular,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(id: &str, metadata: &[(&str, &str)]) -> MachineState {
        MachineState {
            id: id.into(),
            metadata: metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        }
    }

    fn metadata(pairs: &[(&str, &[&str])]) -> Constraints {
        Constraints {
            machine_metadata: pairs
                .iter()
                .map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn metadata_is_or_within_a_key_and_across_keys() {
        let m = machine("m1", &[("region", "us"), ("disk", "ssd")]);
        type Requirement<'a> = (&'a str, &'a [&'a str]);
        let cases: &[(&[Requirement], bool)] = &[
            (&[], true),
            (&[("region", &["us"])], true),
            (&[("region", &["eu", "us"])], true),
            (&[("region", &["eu"])], false),
            (&[("region", &["us"]), ("disk", &["ssd"])], true),
            (&[("region", &["us"]), ("disk", &["hdd"])], false),
            (&[("rack", &["1"])], false),
            (&[("region", &[])], false),
        ];
        for (pairs, want) in cases {
            assert_eq!(metadata(pairs).check_metadata(&m).is_ok(), *want, "{pairs:?}");
        }
        assert_eq!(
            metadata(&[("disk", &["hdd"]), ("zone", &["a"])]).check_metadata(&m),
            Err(MetadataMismatch { key: "disk".into(), wanted: vec!["hdd".into()], actual: Some("ssd".into()) })
        );
    }

    #[test]
    fn machine_id_accepts_full_or_short_id() {
        let m = machine("8363165e6276f500b71169eca9b3f76b", &[]);
        let with = |id: &str| Constraints { machine_id: Some(id.into()), ..Default::default() };
        assert!(Constraints::default().allows_machine_id(&m));
        assert!(with("8363165e6276f500b71169eca9b3f76b").allows_machine_id(&m));
        assert!(with("8363165e").allows_machine_id(&m));
        assert!(!with("8363165").allows_machine_id(&m));
        assert!(!with("8606e1a2").allows_machine_id(&m));
    }

    #[test]
    fn conflicts_are_symmetric_and_never_with_self() {
        let set = |ps: &[&str]| PatternSet::compile(&ps.iter().map(|p| p.to_string()).collect::<Vec<_>>());
        let none = set(&[]);
        let hello = set(&["hello.service"]);
        assert!(conflict_between("c.service", &hello, "hello.service", &none));
        assert!(conflict_between("hello.service", &none, "c.service", &hello));
        assert!(!conflict_between("c.service", &hello, "other.service", &none));
        let all = set(&["conflict.*.service"]);
        assert!(!conflict_between("conflict.1.service", &all, "conflict.1.service", &all));
        assert!(conflict_between("conflict.1.service", &all, "conflict.2.service", &all));
        assert!(!conflict_between("a.service", &set(&["[", "\\"]), "[", &none), "malformed patterns match nothing");
    }

    #[test]
    fn replace_relation_directions() {
        let set = |ps: &[&str]| PatternSet::compile(&ps.iter().map(|p| p.to_string()).collect::<Vec<_>>());
        let kick = set(&["replace.0.service"]);
        let back = set(&["replace-kick0.service"]);
        let none = set(&[]);
        use ReplaceRelation::*;
        assert_eq!(replace_relation("replace-kick0.service", &kick, "replace.0.service", &none), Replaces);
        assert_eq!(replace_relation("replace.0.service", &none, "replace-kick0.service", &kick), ReplacedBy);
        assert_eq!(replace_relation("replace.0.service", &back, "replace-kick0.service", &kick), Circular);
        assert_eq!(replace_relation("replace.0.service", &none, "other.service", &back), None);
        assert_eq!(replace_relation("a.service", &set(&["a.service"]), "a.service", &none), None);
    }
}

//! `[X-Fleet]` scheduling requirements (spec §5): which keys mean what, which value wins, the deprecated aliases,
//! and the API's validation of option combinations (spec §5.1) with the original's messages. Also the pairwise
//! `Conflicts` relation the agent evaluates on raw patterns (spec §6.8); the engine compiles patterns once and
//! evaluates `Conflicts`/`Replaces` in `engine::constraints`.

use std::collections::BTreeMap;

use super::file::{UnitFile, XFLEET_SECTION};
use super::glob::glob_match;
use super::name::expand_specifiers;
use super::parse::ParseError;

/// The `[X-Fleet]` keys of a unit's health check and update policy (read by `rollout::policy`).
pub mod policy_keys {
    pub const HEALTH_CHECK: &str = "HealthCheck";
    pub const HEALTH_CHECK_INTERVAL: &str = "HealthCheckInterval";
    pub const HEALTH_CHECK_TIMEOUT: &str = "HealthCheckTimeout";
    pub const UPDATE_POLICY: &str = "UpdatePolicy";
    pub const UPDATE_MAX_UNAVAILABLE: &str = "UpdateMaxUnavailable";
    pub const UPDATE_MIN_HEALTHY: &str = "UpdateMinHealthy";
    pub const UPDATE_HEALTH_TIMEOUT: &str = "UpdateHealthTimeout";
    pub const UPDATE_ON_FAILURE: &str = "UpdateOnFailure";
    pub const UPDATE_ORDER: &str = "UpdateOrder";
    pub const UPDATE_PROGRESS_DEADLINE: &str = "UpdateProgressDeadline";
    /// The settings that mean something only with `UpdatePolicy=rolling`.
    pub const UPDATE_SETTINGS: [&str; 6] = [
        UPDATE_MAX_UNAVAILABLE,
        UPDATE_MIN_HEALTHY,
        UPDATE_HEALTH_TIMEOUT,
        UPDATE_ON_FAILURE,
        UPDATE_ORDER,
        UPDATE_PROGRESS_DEADLINE,
    ];
}

/// Every `[X-Fleet]` key fleet understands; anything else draws a warning from fleetctl.
pub const RECOGNIZED_KEYS: [&str; 23] = [
    policy_keys::HEALTH_CHECK,
    policy_keys::HEALTH_CHECK_INTERVAL,
    policy_keys::HEALTH_CHECK_TIMEOUT,
    policy_keys::UPDATE_POLICY,
    policy_keys::UPDATE_MAX_UNAVAILABLE,
    policy_keys::UPDATE_MIN_HEALTHY,
    policy_keys::UPDATE_HEALTH_TIMEOUT,
    policy_keys::UPDATE_ON_FAILURE,
    policy_keys::UPDATE_ORDER,
    policy_keys::UPDATE_PROGRESS_DEADLINE,
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
    AT_MOST_ONCE_KEY,
    "Rebalance",
];

/// `AtMostOnce=true`: the unit must never run on two machines at once (issue 14 item 2; docs/at-most-once.md).
/// Unlike `Global=`, its value is checked at submit: anything but a boolean is refused, so a typo cannot silently
/// leave a unit at-least-once.
pub const AT_MOST_ONCE_KEY: &str = "AtMostOnce";

/// Keys for the required machine, in order of precedence.
const MACHINE_ID_KEYS: [&str; 3] = ["MachineID", "X-ConditionMachineID", "X-ConditionMachineBootID"];
const MACHINE_OF_KEYS: [&str; 2] = ["X-ConditionMachineOf", "MachineOf"];
const METADATA_KEYS: [&str; 2] = ["X-ConditionMachineMetadata", "MachineMetadata"];
const CONFLICTS_KEYS: [&str; 2] = ["X-Conflicts", "Conflicts"];

/// A unit's scheduling requirements, read from `[X-Fleet]` (multi-value lines split) and specifier-expanded
/// with the unit's name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Requirements {
    /// First value of the first present key among `MachineID`, `X-ConditionMachineID`,
    /// `X-ConditionMachineBootID`. `Some("")` for `MachineID=`: the key is present, as in the original.
    pub machine_id: Option<String>,
    /// Peers (`X-ConditionMachineOf` values, then `MachineOf` values): exact unit names.
    pub machine_of: Vec<String>,
    /// Required metadata: key → accepted values (OR within a key, AND across keys). Only `key=value` items with
    /// exactly one `=` and both sides non-empty count; values are deduplicated in first-seen order.
    pub machine_metadata: BTreeMap<String, Vec<String>>,
    /// Glob patterns (`X-Conflicts`, then `Conflicts`), each value split on white space.
    pub conflicts: Vec<String>,
    /// The last `Global` value is truthy (`true`, `yes`, `1`, `on`, `t`, any case).
    pub global: bool,
    /// Glob patterns of `Replaces` (not split).
    pub replaces: Vec<String>,
    /// The last `AtMostOnce` value is true (`true`, `yes`, `1`, `on`, any case): never run on two machines at
    /// once. Values other than a boolean are refused at submit ([`validate_options`]).
    pub at_most_once: bool,
    /// The last `Rebalance` value is falsy (`false`, `no`, `0`, `off`, `f`, any case): rebalancing never moves the
    /// unit (docs/rebalance.md). An extension of this implementation; the scheduler ignores it.
    pub stays: bool,
}

impl Requirements {
    /// Whether [`Requirements::of`] can differ between two names of `unit`: only when an `[X-Fleet]` value holds
    /// a specifier (`%`).
    pub fn depend_on_name(unit: &UnitFile) -> bool {
        unit.options().iter().any(|o| o.section == XFLEET_SECTION && o.value.contains('%'))
    }

    /// Requirements of `unit` when it is named `unit_name`. A name without a `.` expands no specifiers, which is
    /// how the API validates raw values (pass "").
    pub fn of(unit: &UnitFile, unit_name: &str) -> Requirements {
        let values = |key: &str| -> Vec<String> {
            unit.values(XFLEET_SECTION, key).into_iter().map(|v| expand_specifiers(v, unit_name)).collect()
        };
        let machine_id = MACHINE_ID_KEYS.iter().find_map(|key| values(key).into_iter().next());
        let machine_of = MACHINE_OF_KEYS.iter().flat_map(|key| values(key)).collect();
        let mut machine_metadata: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pair in METADATA_KEYS.iter().flat_map(|key| values(key)) {
            let mut parts = pair.split('=');
            if let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next())
                && !key.is_empty()
                && !value.is_empty()
            {
                let accepted = machine_metadata.entry(key.to_string()).or_default();
                if !accepted.iter().any(|v| v == value) {
                    accepted.push(value.to_string());
                }
            }
        }
        let conflicts = CONFLICTS_KEYS
            .iter()
            .flat_map(|key| values(key))
            .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect();
        let global = values("Global").last().is_some_and(|v| is_truthy(v));
        let replaces = values("Replaces");
        let at_most_once = values(AT_MOST_ONCE_KEY).last().is_some_and(|v| parse_bool(v) == Some(true));
        let stays = values("Rebalance").last().is_some_and(|v| is_falsy(v));
        Requirements { machine_id, machine_of, machine_metadata, conflicts, global, replaces, at_most_once, stays }
    }

    /// Whether a machine with this ID may run the unit: its full ID or its 8-character short ID equals the
    /// required one. Always true without a `MachineID` requirement.
    pub fn machine_id_allows(&self, machine_id: &str) -> bool {
        match &self.machine_id {
            None => true,
            Some(required) => required == machine_id || machine_id.get(..8).is_some_and(|short| short == required),
        }
    }

    /// Whether a machine's metadata satisfies every required key (a missing key fails).
    pub fn metadata_allows(&self, metadata: &BTreeMap<String, String>) -> bool {
        self.machine_metadata
            .iter()
            .all(|(key, accepted)| metadata.get(key).is_some_and(|have| accepted.iter().any(|v| v == have)))
    }
}

/// The opposite of [`is_truthy`] for the values this implementation adds (`Rebalance=false`).
fn is_falsy(value: &str) -> bool {
    matches!(value.to_lowercase().as_str(), "false" | "no" | "0" | "off" | "f")
}

/// `isTruthyValue`.
fn is_truthy(value: &str) -> bool {
    matches!(value.to_lowercase().as_str(), "true" | "yes" | "1" | "on" | "t")
}

/// A strict boolean as systemd spells them (any case); `None` for anything else.
fn parse_bool(value: &str) -> Option<bool> {
    match value.to_lowercase().as_str() {
        "true" | "yes" | "1" | "on" => Some(true),
        "false" | "no" | "0" | "off" => Some(false),
        _ => None,
    }
}

/// `[X-Fleet]` keys fleet does not know, in order of first appearance (fleetctl warns
/// `Unit <name>: unrecognized requirement in [X-Fleet] section: "<key>"`; the unit is still accepted).
pub fn unrecognized_xfleet_keys(unit: &UnitFile) -> Vec<String> {
    unit.names_in(XFLEET_SECTION).into_iter().filter(|key| !RECOGNIZED_KEYS.contains(key)).map(str::to_string).collect()
}

/// Why the API (and fleetctl, before sending) refuses a unit's options. `Display` is the original's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// The options' canonical text is not a valid unit file (an over-long line, a name with a newline, ...).
    #[error(transparent)]
    Unparsable(#[from] ParseError),
    #[error("unresolvable requirements: peer {peer:?} matches conflict {conflict:?}")]
    PeerMatchesConflict { peer: String, conflict: String },
    #[error("unresolvable requirements: peer {peer:?} matches replace {replace:?}")]
    PeerMatchesReplace { peer: String, replace: String },
    #[error("MachineID cannot be used with Peers")]
    MachineIdWithPeers,
    #[error("MachineID cannot be used with Conflicts")]
    MachineIdWithConflicts,
    #[error("MachineID cannot be used with Global")]
    MachineIdWithGlobal,
    #[error("MachineID cannot be used with Replaces")]
    MachineIdWithReplaces,
    #[error("Global cannot be used with Peers")]
    GlobalWithPeers,
    #[error("Global cannot be used with Replaces")]
    GlobalWithReplaces,
    #[error("Conflicts cannot be used with Replaces")]
    ConflictsWithReplaces,
    #[error("AtMostOnce must be true or false (also yes/no, on/off, 1/0), found {value:?}")]
    AtMostOnceNotBoolean { value: String },
    #[error("AtMostOnce cannot be used with Global: a global unit runs on every machine")]
    AtMostOnceWithGlobal,
}

/// `api.ValidateOptions` (spec §5.1): the canonical text must parse again, no peer may match a conflict or
/// replace pattern, and then the first forbidden combination is reported. Runs on raw values (no specifier
/// expansion). Where the original iterates Go sets (random order), this reports the first pair in file order.
pub fn validate_options(unit: &UnitFile) -> Result<(), OptionsError> {
    UnitFile::parse(&unit.canonical())?;
    if let Some(value) = unit.values(XFLEET_SECTION, AT_MOST_ONCE_KEY).into_iter().find(|v| parse_bool(v).is_none()) {
        return Err(OptionsError::AtMostOnceNotBoolean { value: value.to_string() });
    }
    let reqs = Requirements::of(unit, "");
    for peer in &reqs.machine_of {
        if let Some(conflict) = reqs.conflicts.iter().find(|c| glob_match(c, peer)) {
            return Err(OptionsError::PeerMatchesConflict { peer: peer.clone(), conflict: conflict.clone() });
        }
        if let Some(replace) = reqs.replaces.iter().find(|r| glob_match(r, peer)) {
            return Err(OptionsError::PeerMatchesReplace { peer: peer.clone(), replace: replace.clone() });
        }
    }
    let target = reqs.machine_id.is_some();
    let peers = !reqs.machine_of.is_empty();
    let conflicts = !reqs.conflicts.is_empty();
    let replaces = !reqs.replaces.is_empty();
    let global = reqs.global;
    let forbidden = [
        (target && peers, OptionsError::MachineIdWithPeers),
        (target && conflicts, OptionsError::MachineIdWithConflicts),
        (target && global, OptionsError::MachineIdWithGlobal),
        (target && replaces, OptionsError::MachineIdWithReplaces),
        (global && peers, OptionsError::GlobalWithPeers),
        (global && replaces, OptionsError::GlobalWithReplaces),
        (conflicts && replaces, OptionsError::ConflictsWithReplaces),
        (global && reqs.at_most_once, OptionsError::AtMostOnceWithGlobal),
    ];
    match forbidden.into_iter().find(|(applies, _)| *applies) {
        Some((_, error)) => Err(error),
        None => Ok(()),
    }
}

/// One unit as a machine's acceptance rule ([`accepted_by_machine`]) sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub requirements: &'a Requirements,
    /// Where the engine scheduled it (`None` for unscheduled and global units).
    pub target: Option<&'a str>,
}

/// Which units a machine holds (spec §7.3), as indexes into `units`: non-global units scheduled to `machine_id`,
/// then global units whose `MachineMetadata` the machine's `metadata` satisfies, each group in unit-name order,
/// minus those conflicting with a unit accepted before them (§6.8). A global unit never displaces a unit the engine
/// placed here, whatever their names. The agent applies this to its own machine; fleetctl to predict where a global
/// unit runs.
pub fn accepted_by_machine(
    units: &[Candidate<'_>],
    machine_id: &str,
    metadata: &BTreeMap<String, String>,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| {
        (units[a].requirements.global, units[a].name).cmp(&(units[b].requirements.global, units[b].name))
    });
    let mut accepted: Vec<usize> = Vec::new();
    for i in order {
        let unit = &units[i];
        let here = if unit.requirements.global {
            unit.requirements.metadata_allows(metadata)
        } else {
            unit.target == Some(machine_id)
        };
        if !here {
            continue;
        }
        let conflict = accepted
            .iter()
            .map(|&a| &units[a])
            .find(|other| conflicts_between(unit.name, unit.requirements, other.name, other.requirements));
        if let Some(other) = conflict {
            tracing::debug!(unit = %unit.name, conflict = %other.name, "not accepted: conflicts with a unit accepted here");
            continue;
        }
        accepted.push(i);
    }
    accepted
}

/// Whether units `a` and `b` may not share a machine (spec §6.8): a pattern of either matches the other's name.
/// A unit never conflicts with itself.
pub fn conflicts_between(a_name: &str, a: &Requirements, b_name: &str, b: &Requirements) -> bool {
    a_name != b_name
        && (a.conflicts.iter().any(|p| glob_match(p, b_name)) || b.conflicts.iter().any(|p| glob_match(p, a_name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(xfleet: &str) -> UnitFile {
        UnitFile::parse(&format!("[Service]\nExecStart=/bin/true\n[X-Fleet]\n{xfleet}")).unwrap()
    }

    fn reqs(xfleet: &str, name: &str) -> Requirements {
        Requirements::of(&unit(xfleet), name)
    }

    #[test]
    fn machine_id_precedence_and_first_value() {
        assert_eq!(reqs("MachineID=\"123\" \"456\"\n", "a.service").machine_id.as_deref(), Some("123"));
        assert_eq!(
            reqs("X-ConditionMachineBootID=c\nX-ConditionMachineID=b\n", "a.service").machine_id.as_deref(),
            Some("b")
        );
        assert_eq!(
            reqs("X-ConditionMachineID=b\nMachineID=a\nMachineID=z\n", "a.service").machine_id.as_deref(),
            Some("a")
        );
        assert_eq!(reqs("X-ConditionMachineBootID=c\n", "a.service").machine_id.as_deref(), Some("c"));
        assert_eq!(reqs("MachineID=\n", "a.service").machine_id.as_deref(), Some(""));
        assert_eq!(reqs("MachineId=x\n", "a.service").machine_id, None);
        assert_eq!(reqs("MachineID=%i\n", "a@m1.service").machine_id.as_deref(), Some("m1"));
    }

    #[test]
    fn machine_id_matches_full_or_short_id() {
        let r = reqs("MachineID=d91d98fc\n", "a.service");
        assert!(r.machine_id_allows("d91d98fca203da3cb89fb5c100ed0823"));
        assert!(!r.machine_id_allows("8363165e6276f500b71169eca9b3f76b"));
        let full = reqs("MachineID=d91d98fca203da3cb89fb5c100ed0823\n", "a.service");
        assert!(full.machine_id_allows("d91d98fca203da3cb89fb5c100ed0823"));
        assert!(Requirements::default().machine_id_allows("anything"));
    }

    #[test]
    fn machine_of_collects_both_keys_without_whitespace_split() {
        let r = reqs("MachineOf=b.service\nX-ConditionMachineOf=a.service\nMachineOf=c d.service\n", "x.service");
        assert_eq!(r.machine_of, ["a.service", "b.service", "c d.service"]);
        assert_eq!(reqs("MachineOf=\"a.service\" \"b.service\"\n", "x.service").machine_of, ["a.service", "b.service"]);
        assert_eq!(reqs("Machineof=a.service\n", "x.service").machine_of, Vec::<String>::new());
    }

    #[test]
    fn machine_metadata_pairs() {
        let r = reqs(
            "MachineMetadata=role=a\nMachineMetadata=role=c\nMachineMetadata=hostname=m3\nMachineMetadata=foo=\n\
             MachineMetadata==x\nMachineMetadata=a=b=c\nMachineMetadata=plain\nX-ConditionMachineMetadata=role=a\n\
             MachineMetadata=\"disk=ssd\" \"disk=hdd\"\n",
            "x.service",
        );
        let want: BTreeMap<String, Vec<String>> = [
            ("disk".to_string(), vec!["ssd".to_string(), "hdd".to_string()]),
            ("hostname".to_string(), vec!["m3".to_string()]),
            ("role".to_string(), vec!["a".to_string(), "c".to_string()]),
        ]
        .into();
        assert_eq!(r.machine_metadata, want);
        let expanded = reqs("MachineMetadata=hostname=node%i\n", "web@3.service");
        assert_eq!(expanded.machine_metadata["hostname"], ["node3"]);

        let md = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(r.metadata_allows(&md(&[("role", "c"), ("hostname", "m3"), ("disk", "hdd")])));
        assert!(!r.metadata_allows(&md(&[("role", "b"), ("hostname", "m3"), ("disk", "hdd")])));
        assert!(!r.metadata_allows(&md(&[("role", "a"), ("hostname", "m3")])));
        assert!(Requirements::default().metadata_allows(&md(&[])));
    }

    #[test]
    fn conflicts_split_on_white_space() {
        let r = reqs("Conflicts=a b\tc\nX-Conflicts=x*\nConflicts=\"d e\" \"f\"\n", "u.service");
        assert_eq!(r.conflicts, ["x*", "a", "b", "c", "d", "e", "f"]);
        assert_eq!(reqs("Conflicts=\n", "u.service").conflicts, Vec::<String>::new());
        assert_eq!(reqs("Conflicts=excl@*.service\n", "excl@1.service").conflicts, ["excl@*.service"]);
        assert_eq!(reqs("X-ConditionConflicts=a\n", "u.service").conflicts, Vec::<String>::new());
    }

    #[test]
    fn global_last_value_wins() {
        for (text, want) in [
            ("Global=true\n", true),
            ("Global=TRUE\n", true),
            ("Global=Yes\n", true),
            ("Global=1\n", true),
            ("Global=on\n", true),
            ("Global=t\n", true),
            ("Global=T\n", true),
            ("Global=y\n", false),
            ("Global=false\n", false),
            ("Global=true\nGlobal=false\n", false),
            ("Global=false\nGlobal=true\n", true),
            ("Global=\"false\" \"true\"\n", true),
            ("X-Global=true\n", false),
            ("X-ConditionGlobal=true\n", false),
            ("global=true\n", false),
        ] {
            assert_eq!(reqs(text, "g.service").global, want, "{text:?}");
        }
    }

    #[test]
    fn rebalance_false_makes_a_unit_stay_last_value_wins() {
        for (text, want) in [
            ("Rebalance=false\n", true),
            ("Rebalance=No\n", true),
            ("Rebalance=0\n", true),
            ("Rebalance=off\n", true),
            ("Rebalance=true\n", false),
            ("Rebalance=false\nRebalance=true\n", false),
            ("Rebalance=maybe\n", false),
            ("", false),
        ] {
            assert_eq!(reqs(text, "u.service").stays, want, "{text:?}");
        }
        let unit = UnitFile::parse("[X-Fleet]\nRebalance=false\n").unwrap();
        assert!(unrecognized_xfleet_keys(&unit).is_empty(), "Rebalance is a known [X-Fleet] key");
    }

    #[test]
    fn replaces_values_are_not_split() {
        assert_eq!(reqs("Replaces=a b\nReplaces=c\n", "r.service").replaces, ["a b", "c"]);
        assert_eq!(reqs("Replaces=hello@%i.service\n", "r@1.service").replaces, ["hello@1.service"]);
    }

    #[test]
    fn unrecognized_keys_in_first_appearance_order() {
        let u = unit("MachineFoo=bar\nGlobal=true\nmachineof=x\nMachineFoo=baz\nMachineId=1\nX-ConditionConflicts=a\n");
        assert_eq!(unrecognized_xfleet_keys(&u), ["MachineFoo", "machineof", "MachineId", "X-ConditionConflicts"]);
        let ok = unit(&RECOGNIZED_KEYS.iter().map(|k| format!("{k}=v\n")).collect::<String>());
        assert!(unrecognized_xfleet_keys(&ok).is_empty());
        // Only the section named exactly X-Fleet is considered.
        let other = UnitFile::parse("[x-fleet]\nFoo=1\n").unwrap();
        assert!(unrecognized_xfleet_keys(&other).is_empty());
    }

    #[test]
    fn option_combinations() {
        let cases: &[(&str, Option<&str>)] = &[
            ("Global=true\nMachineOf=meta-b.service\n", Some("Global cannot be used with Peers")),
            ("MachineID=abc\nConflicts=x*\n", Some("MachineID cannot be used with Conflicts")),
            (
                "MachineOf=meta-b.service\nConflicts=meta-*.service\n",
                Some("unresolvable requirements: peer \"meta-b.service\" matches conflict \"meta-*.service\""),
            ),
            (
                "MachineOf=a.service\nReplaces=a.*\n",
                Some("unresolvable requirements: peer \"a.service\" matches replace \"a.*\""),
            ),
            ("MachineID=abc\nMachineOf=a.service\n", Some("MachineID cannot be used with Peers")),
            ("MachineID=abc\nGlobal=true\n", Some("MachineID cannot be used with Global")),
            ("MachineID=abc\nReplaces=a.service\n", Some("MachineID cannot be used with Replaces")),
            ("MachineID=\nConflicts=x\n", Some("MachineID cannot be used with Conflicts")),
            ("Global=true\nReplaces=a.service\n", Some("Global cannot be used with Replaces")),
            ("Conflicts=a\nReplaces=b\n", Some("Conflicts cannot be used with Replaces")),
            // Precedence: the first row of the table wins.
            (
                "MachineID=a\nMachineOf=p\nConflicts=c\nGlobal=1\nReplaces=r\n",
                Some("MachineID cannot be used with Peers"),
            ),
            ("Global=true\nMachineOf=p\nReplaces=r\n", Some("Global cannot be used with Peers")),
            // Peer/pattern checks come before the combination table.
            (
                "MachineID=a\nMachineOf=p\nConflicts=p\n",
                Some("unresolvable requirements: peer \"p\" matches conflict \"p\""),
            ),
            // Allowed combinations.
            ("Global=true\nMachineMetadata=role=a\nConflicts=x*\n", None),
            ("Global=false\nMachineOf=a.service\n", None),
            ("MachineID=abc\nMachineMetadata=a=b\n", None),
            ("MachineOf=a.service\nConflicts=b*\n", None),
            ("MachineFoo=bar\n", None),
            // Raw values: %i is not expanded, so the pattern does not match the peer here.
            ("MachineOf=a@%i.service\nConflicts=a@1.service\n", None),
        ];
        for (xfleet, want) in cases {
            let got = validate_options(&unit(xfleet)).err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), *want, "{xfleet:?}");
        }
    }

    #[test]
    fn at_most_once_is_a_strict_boolean() {
        for (text, want) in [
            ("AtMostOnce=true\n", true),
            ("AtMostOnce=YES\n", true),
            ("AtMostOnce=1\n", true),
            ("AtMostOnce=on\n", true),
            ("AtMostOnce=false\n", false),
            ("AtMostOnce=true\nAtMostOnce=no\n", false),
            ("AtMostOnce=off\nAtMostOnce=true\n", true),
            ("", false),
            ("atmostonce=true\n", false),
        ] {
            assert_eq!(reqs(text, "a.service").at_most_once, want, "{text:?}");
            assert_eq!(validate_options(&unit(text)), Ok(()), "{text:?}");
        }
        for bad in ["maybe", "t", "y", ""] {
            let got = validate_options(&unit(&format!("AtMostOnce={bad}\n"))).unwrap_err().to_string();
            assert_eq!(
                got,
                format!("AtMostOnce must be true or false (also yes/no, on/off, 1/0), found {bad:?}"),
                "AtMostOnce={bad}"
            );
        }
        assert_eq!(
            validate_options(&unit("Global=true\nAtMostOnce=true\n")).unwrap_err().to_string(),
            "AtMostOnce cannot be used with Global: a global unit runs on every machine"
        );
        assert_eq!(validate_options(&unit("Global=true\nAtMostOnce=false\n")), Ok(()));
        assert_eq!(validate_options(&unit("MachineID=abc\nAtMostOnce=true\n")), Ok(()));
    }

    #[test]
    fn options_whose_text_does_not_parse_are_rejected() {
        use crate::unit::UnitOption;
        let newline_in_name = UnitFile::from_options(vec![UnitOption::new("Service", "Exec\nStart", "x")]);
        assert_eq!(
            validate_options(&newline_in_name).unwrap_err().to_string(),
            "unexpected newline encountered while parsing option name"
        );
        let long = UnitFile::from_options(vec![UnitOption::new("Service", "ExecStart", "x".repeat(2100))]);
        assert_eq!(validate_options(&long).unwrap_err().to_string(), "line too long (max 2048 bytes)");
    }

    #[test]
    fn conflicts_are_symmetric_and_never_with_self() {
        let excl = reqs("Conflicts=excl@*.service\n", "excl@1.service");
        let none = Requirements::default();
        assert!(conflicts_between("excl@1.service", &excl, "excl@2.service", &excl));
        assert!(!conflicts_between("excl@1.service", &excl, "excl@1.service", &excl));
        let one_way = reqs("Conflicts=hello.service\n", "x.service");
        assert!(conflicts_between("x.service", &one_way, "hello.service", &none));
        assert!(conflicts_between("hello.service", &none, "x.service", &one_way));
        assert!(!conflicts_between("x.service", &one_way, "other.service", &none));
        let malformed = reqs("Conflicts=[\n", "x.service");
        assert!(!conflicts_between("x.service", &malformed, "[", &none));
    }
}

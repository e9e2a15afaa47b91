//! What a unit says about changing it while it runs (issue 34), read from its `[X-Fleet]` section:
//! * its **health check** (`HealthCheck=COMMAND`, `HealthCheckInterval=`, `HealthCheckTimeout=`), which each agent
//!   runs while the unit is active on its machine and which gates every rollout step;
//! * its **update policy** (`UpdatePolicy=rolling` with `UpdateMaxUnavailable=`, `UpdateMinHealthy=`,
//!   `UpdateHealthTimeout=`, `UpdateOnFailure=`, `UpdateOrder=`, `UpdateProgressDeadline=`), which every change of
//!   the unit follows unless the request overrides it; the *new* version's policy governs a replace.
//!
//! [`check`] is the one validation of these keys (API and fleetctl alike); [`HealthCheck::of`] and
//! [`UpdatePolicy::of`] read a unit that passed it, and fall back to the defaults, with a warning, for a value
//! that another client stored without it.
//!
//! The settings a unit's policy shares with a rollout spec and fleetctl's flags live here too: [`MaxUnavailable`],
//! [`OnFailure`] and the machine order ([`parse_order`], [`order_machines`]), so the rollout module uses this one
//! and not the other way round.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::go::parse_duration;
use crate::unit::UnitFile;
use crate::unit::file::XFLEET_SECTION;
use crate::unit::xfleet::policy_keys as keys;

/// How often a health check runs without `HealthCheckInterval=`.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// How long a health check may run without `HealthCheckTimeout=` before it is killed and counts as failed.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest interval a check may ask for: a check is a process per machine per interval.
pub const MIN_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Defaults of a rolling change, the same for fleetctl's flags and a unit's policy.
pub const DEFAULT_MAX_UNAVAILABLE: u32 = 1;
pub const DEFAULT_MIN_HEALTHY: Duration = Duration::from_secs(10);
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(300);

/// A unit's health check: a shell command the agent runs on each machine where the unit is active.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Run as `/bin/sh -c COMMAND`; exit 0 is healthy.
    pub command: String,
    pub interval: Duration,
    pub timeout: Duration,
}

impl HealthCheck {
    /// The check `unit` declares, `None` without `HealthCheck=` (or with an empty one). A malformed interval or
    /// timeout (stored by a client that did not validate) falls back to its default.
    pub fn of(unit: &UnitFile) -> Option<HealthCheck> {
        match health_check(unit) {
            Ok(check) => check,
            Err(e) => {
                tracing::warn!(error = %e, "unit's health check settings are invalid; using the defaults");
                let command = last(unit, keys::HEALTH_CHECK)?.trim().to_string();
                (!command.is_empty()).then_some(HealthCheck {
                    command,
                    interval: DEFAULT_CHECK_INTERVAL,
                    timeout: DEFAULT_CHECK_TIMEOUT,
                })
            }
        }
    }
}

/// What a failed step does to the rollout (`UpdateOnFailure=`, `--on-failure`, a rollout spec's `onFailure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Stop releasing machines; the failed machine keeps the new version.
    #[default]
    Pause,
    /// Return every unit to its old version (replace rollouts; a restart rollout pauses).
    Rollback,
}

/// `UpdateMaxUnavailable=` and `--max-unavailable`: a number of machines, or a percentage of the machines a
/// rollout changes (rounded down, at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    Count(u32),
    Percent(u32),
}

impl MaxUnavailable {
    /// `N` or `P%`, then [`check_pace`]'s ranges (`N` at least 1, `P` from 1 to 100).
    pub fn parse(text: &str) -> Result<MaxUnavailable, String> {
        let text = text.trim();
        let parsed = match text.strip_suffix('%') {
            Some(p) => p.trim().parse::<u32>().map(MaxUnavailable::Percent),
            None => text.parse::<u32>().map(MaxUnavailable::Count),
        };
        let max = parsed.map_err(|_| {
            format!("expected a number of machines such as 2 or a percentage such as 25%, got {text:?}")
        })?;
        max.check().map(|()| max)
    }

    /// At least one machine, or a percentage from 1 to 100.
    fn check(self) -> Result<(), String> {
        match self {
            MaxUnavailable::Count(0) => Err("must be at least 1".into()),
            MaxUnavailable::Percent(p) if !(1..=100).contains(&p) => {
                Err(format!("a percentage must be from 1% to 100%, got {p}%"))
            }
            _ => Ok(()),
        }
    }

    /// How many of `machines` may be unavailable at once (at least 1).
    pub fn of(self, machines: usize) -> u32 {
        match self {
            MaxUnavailable::Count(n) => n.max(1),
            MaxUnavailable::Percent(p) => {
                u32::try_from(machines.saturating_mul(p as usize) / 100).unwrap_or(u32::MAX).max(1)
            }
        }
    }
}

/// A pace setting of a rollout, as [`check_pace`] names the one it refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaceSetting {
    MaxUnavailable,
    HealthTimeout,
    ProgressDeadline,
    CanaryHold,
    Order,
}

/// The one set of rules for a rollout's pace, wherever it is given (a unit's `Update*=` keys, an API request,
/// fleetctl's flags through the API; each names the setting its own way): at least one machine (or 1% to 100%)
/// unavailable, a health timeout and a progress deadline (when there is one) longer than 0, a canary hold only
/// with canaries, and an order that parses.
pub fn check_pace(
    max_unavailable: MaxUnavailable,
    health_timeout: Duration,
    progress_deadline: Option<Duration>,
    canary: u32,
    canary_hold: Duration,
    order: &str,
) -> Result<(), (PaceSetting, String)> {
    max_unavailable.check().map_err(|e| (PaceSetting::MaxUnavailable, e))?;
    if health_timeout.is_zero() {
        return Err((PaceSetting::HealthTimeout, "must be longer than 0".into()));
    }
    if progress_deadline.is_some_and(|d| d.is_zero()) {
        return Err((PaceSetting::ProgressDeadline, "must be longer than 0".into()));
    }
    if !canary_hold.is_zero() && canary == 0 {
        return Err((PaceSetting::CanaryHold, "applies only with canaries".into()));
    }
    parse_order(order).map(drop).map_err(|e| (PaceSetting::Order, e))
}

/// One rule of `UpdateOrder=` / `--order=`: machines a selector picks go `first` (the default) or `last`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRule {
    pub last: bool,
    pub selector: Selector,
}

/// Which machines an [`OrderRule`] picks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// A machine ID, or a prefix of one (such as the 8 characters fleetctl shows).
    Machine(String),
    /// Machines whose metadata has this key with this value.
    Metadata { key: String, value: String },
}

impl Selector {
    pub fn picks(&self, machine: &str, metadata: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::Machine(id) => machine.starts_with(id.as_str()),
            Selector::Metadata { key, value } => metadata.get(key) == Some(value),
        }
    }
}

/// The rules of an order: items separated by commas or white space, each `[first:|last:]SELECTOR`, where a
/// selector with `=` is metadata (`role=primary`) and one without is a machine ID or prefix.
pub fn parse_order(text: &str) -> Result<Vec<OrderRule>, String> {
    let mut rules = Vec::new();
    for item in text.split([',', ' ', '\t']).filter(|s| !s.is_empty()) {
        let (last, selector) = match item.split_once(':') {
            Some(("first", rest)) => (false, rest),
            Some(("last", rest)) => (true, rest),
            Some((other, _)) => {
                return Err(format!("{item:?}: expected first:SELECTOR or last:SELECTOR, not {other:?}"));
            }
            None => (false, item),
        };
        let selector = match selector.split_once('=') {
            Some((key, value)) if !key.is_empty() && !value.is_empty() && !value.contains('=') => {
                Selector::Metadata { key: key.to_string(), value: value.to_string() }
            }
            Some(_) => return Err(format!("{item:?}: expected metadata as key=value")),
            None if !selector.is_empty() && selector.chars().all(|c| c.is_ascii_hexdigit()) => {
                Selector::Machine(selector.to_ascii_lowercase())
            }
            None => return Err(format!("{item:?}: expected a machine ID (hexadecimal) or metadata key=value")),
        };
        rules.push(OrderRule { last, selector });
    }
    Ok(rules)
}

/// Machines in rollout order: those a `first` rule picks (in rule order), then the rest, then those a `last` rule
/// picks (in rule order); machine-ID order within each group. The first rule that picks a machine places it.
pub fn order_machines(
    machines: Vec<String>,
    rules: &[OrderRule],
    metadata: impl Fn(&str) -> BTreeMap<String, String>,
) -> Vec<String> {
    let mut keyed: Vec<((u8, usize), String)> = machines
        .into_iter()
        .map(|m| {
            let md = metadata(&m);
            let key = match rules.iter().position(|r| r.selector.picks(&m, &md)) {
                Some(i) if rules[i].last => (2, i),
                Some(i) => (0, i),
                None => (1, 0),
            };
            (key, m)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, m)| m).collect()
}

/// A unit's update policy (`UpdatePolicy=rolling`): how every change of it proceeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatePolicy {
    pub max_unavailable: MaxUnavailable,
    pub min_healthy: Duration,
    pub health_timeout: Duration,
    pub on_failure: OnFailure,
    /// `UpdateOrder=` as written (validated by [`parse_order`]).
    pub order: String,
    pub progress_deadline: Option<Duration>,
}

impl Default for UpdatePolicy {
    fn default() -> Self {
        UpdatePolicy {
            max_unavailable: MaxUnavailable::Count(DEFAULT_MAX_UNAVAILABLE),
            min_healthy: DEFAULT_MIN_HEALTHY,
            health_timeout: DEFAULT_HEALTH_TIMEOUT,
            on_failure: OnFailure::Pause,
            order: String::new(),
            progress_deadline: None,
        }
    }
}

impl UpdatePolicy {
    /// The policy `unit` declares, `None` without `UpdatePolicy=rolling`. A unit whose policy does not validate
    /// (stored by a client that did not check it) still rolls, with the defaults for what is malformed.
    pub fn of(unit: &UnitFile) -> Option<UpdatePolicy> {
        match update_policy(unit) {
            Ok(policy) => policy,
            Err(e) => {
                tracing::warn!(error = %e, "unit's update policy is invalid; rolling with the defaults");
                Some(UpdatePolicy::default())
            }
        }
    }
}

/// What is wrong with a unit's health check or update policy: the key, the value, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[X-Fleet] {key}={value:?}: {problem}")]
pub struct PolicyError {
    pub key: &'static str,
    pub value: String,
    pub problem: String,
}

/// The validation of the keys this module reads, run wherever a unit is submitted (the API, and fleetctl before
/// it sends).
pub fn check(unit: &UnitFile) -> Result<(), PolicyError> {
    health_check(unit)?;
    update_policy(unit)?;
    Ok(())
}

fn last<'a>(unit: &'a UnitFile, key: &str) -> Option<&'a str> {
    unit.values(XFLEET_SECTION, key).into_iter().last()
}

fn error(key: &'static str, value: &str, problem: impl Into<String>) -> PolicyError {
    PolicyError { key, value: value.to_string(), problem: problem.into() }
}

fn duration(unit: &UnitFile, key: &'static str) -> Result<Option<Duration>, PolicyError> {
    let Some(value) = last(unit, key) else { return Ok(None) };
    parse_duration(value.trim())
        .map(Some)
        .map_err(|_| error(key, value, "expected a duration such as 30s, 1m30s or 500ms"))
}

fn health_check(unit: &UnitFile) -> Result<Option<HealthCheck>, PolicyError> {
    let interval = duration(unit, keys::HEALTH_CHECK_INTERVAL)?;
    let timeout = duration(unit, keys::HEALTH_CHECK_TIMEOUT)?;
    if let Some(i) = interval.filter(|i| *i < MIN_CHECK_INTERVAL) {
        let value = last(unit, keys::HEALTH_CHECK_INTERVAL).unwrap_or_default();
        return Err(error(keys::HEALTH_CHECK_INTERVAL, value, format!("must be at least 100ms, got {i:?}")));
    }
    if timeout.is_some_and(|t| t.is_zero()) {
        let value = last(unit, keys::HEALTH_CHECK_TIMEOUT).unwrap_or_default();
        return Err(error(keys::HEALTH_CHECK_TIMEOUT, value, "must be longer than 0"));
    }
    let command = last(unit, keys::HEALTH_CHECK).map(str::trim).unwrap_or_default();
    if command.is_empty() {
        for key in [keys::HEALTH_CHECK_INTERVAL, keys::HEALTH_CHECK_TIMEOUT] {
            if let Some(value) = last(unit, key) {
                return Err(error(key, value, "needs HealthCheck=COMMAND"));
            }
        }
        return Ok(None);
    }
    Ok(Some(HealthCheck {
        command: command.to_string(),
        interval: interval.unwrap_or(DEFAULT_CHECK_INTERVAL),
        timeout: timeout.unwrap_or(DEFAULT_CHECK_TIMEOUT),
    }))
}

fn update_policy(unit: &UnitFile) -> Result<Option<UpdatePolicy>, PolicyError> {
    let rolling = match last(unit, keys::UPDATE_POLICY).map(str::trim) {
        None | Some("") | Some("all-at-once") => false,
        Some("rolling") => true,
        Some(other) => return Err(error(keys::UPDATE_POLICY, other, "expected rolling or all-at-once")),
    };
    let mut policy = UpdatePolicy::default();
    if let Some(value) = last(unit, keys::UPDATE_MAX_UNAVAILABLE) {
        policy.max_unavailable =
            MaxUnavailable::parse(value).map_err(|e| error(keys::UPDATE_MAX_UNAVAILABLE, value, e))?;
    }
    if let Some(d) = duration(unit, keys::UPDATE_MIN_HEALTHY)? {
        policy.min_healthy = d;
    }
    if let Some(d) = duration(unit, keys::UPDATE_HEALTH_TIMEOUT)? {
        policy.health_timeout = d;
    }
    if let Some(value) = last(unit, keys::UPDATE_ON_FAILURE) {
        policy.on_failure = match value.trim() {
            "pause" => OnFailure::Pause,
            "rollback" => OnFailure::Rollback,
            _ => return Err(error(keys::UPDATE_ON_FAILURE, value, "expected pause or rollback")),
        };
    }
    if let Some(value) = last(unit, keys::UPDATE_ORDER) {
        policy.order = value.trim().to_string();
    }
    if let Some(d) = duration(unit, keys::UPDATE_PROGRESS_DEADLINE)? {
        policy.progress_deadline = Some(d);
    }
    let p = &policy;
    check_pace(p.max_unavailable, p.health_timeout, p.progress_deadline, 0, Duration::ZERO, &p.order).map_err(
        |(setting, problem)| {
            let key = match setting {
                PaceSetting::MaxUnavailable => keys::UPDATE_MAX_UNAVAILABLE,
                PaceSetting::HealthTimeout => keys::UPDATE_HEALTH_TIMEOUT,
                PaceSetting::ProgressDeadline => keys::UPDATE_PROGRESS_DEADLINE,
                // A unit's policy has no canary keys.
                PaceSetting::CanaryHold | PaceSetting::Order => keys::UPDATE_ORDER,
            };
            error(key, last(unit, key).unwrap_or_default(), problem)
        },
    )?;
    if !rolling {
        let given = keys::UPDATE_SETTINGS.iter().find(|k| last(unit, k).is_some());
        if let Some(key) = given {
            let value = last(unit, key).unwrap_or_default();
            return Err(error(key, value, "needs UpdatePolicy=rolling"));
        }
        return Ok(None);
    }
    Ok(Some(policy))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(xfleet: &str) -> UnitFile {
        UnitFile::parse(&format!("[Service]\nExecStart=/bin/true\n[X-Fleet]\n{xfleet}")).unwrap()
    }

    #[test]
    fn a_health_check_has_defaults_and_its_own_settings() {
        assert_eq!(HealthCheck::of(&unit("Global=true\n")), None);
        assert_eq!(HealthCheck::of(&unit("HealthCheck=\n")), None);
        let c = HealthCheck::of(&unit("HealthCheck=/usr/bin/db-ready --quiet\n")).unwrap();
        assert_eq!(c.command, "/usr/bin/db-ready --quiet");
        assert_eq!((c.interval, c.timeout), (DEFAULT_CHECK_INTERVAL, DEFAULT_CHECK_TIMEOUT));
        let c = HealthCheck::of(&unit("HealthCheck=true\nHealthCheckInterval=1s\nHealthCheckTimeout=500ms\n")).unwrap();
        assert_eq!((c.interval, c.timeout), (Duration::from_secs(1), Duration::from_millis(500)));
    }

    #[test]
    fn bad_health_check_values_are_refused_naming_the_key() {
        let e = check(&unit("HealthCheck=true\nHealthCheckInterval=5\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[X-Fleet] HealthCheckInterval=\"5\": expected a duration such as 30s, 1m30s or 500ms"
        );
        let e = check(&unit("HealthCheck=true\nHealthCheckInterval=10ms\n")).unwrap_err();
        assert!(e.to_string().contains("at least 100ms"), "{e}");
        let e = check(&unit("HealthCheck=true\nHealthCheckTimeout=0\n")).unwrap_err();
        assert_eq!(e.key, "HealthCheckTimeout");
        let e = check(&unit("HealthCheckTimeout=3s\n")).unwrap_err();
        assert_eq!(e.to_string(), "[X-Fleet] HealthCheckTimeout=\"3s\": needs HealthCheck=COMMAND");
        // Stored anyway by another client: the agent still checks, with the default interval.
        let c = HealthCheck::of(&unit("HealthCheck=true\nHealthCheckInterval=often\n")).unwrap();
        assert_eq!(c.interval, DEFAULT_CHECK_INTERVAL);
    }

    /// The bounds are inclusive where the docs say "at least", and each named value is read as itself (found
    /// untested by cargo-mutants: an interval of exactly 100ms, `UpdateOnFailure=pause`, a canary hold with
    /// canaries).
    #[test]
    fn bounds_and_named_values_read_as_the_docs_say() {
        let c = health_check(&unit("HealthCheck=true\nHealthCheckInterval=100ms\n")).unwrap().unwrap();
        assert_eq!(c.interval, MIN_CHECK_INTERVAL, "100ms is the least interval, and allowed");
        let p = UpdatePolicy::of(&unit("UpdatePolicy=rolling\nUpdateOnFailure=rollback\nUpdateOnFailure=pause\n"));
        assert_eq!(p.map(|p| p.on_failure), Some(OnFailure::Pause), "the last one counts, and pause is a value");
        assert_eq!(check(&unit("UpdatePolicy=rolling\nUpdateOnFailure=pause\n")), Ok(()), "pause is accepted");
        let pace = |canary, hold| {
            check_pace(MaxUnavailable::Count(1), Duration::from_secs(60), None, canary, hold, "").map_err(|e| e.0)
        };
        assert_eq!(pace(1, Duration::from_secs(30)), Ok(()), "a hold with canaries");
        assert_eq!(pace(0, Duration::from_secs(30)), Err(PaceSetting::CanaryHold), "a hold without canaries");
        assert_eq!(pace(0, Duration::ZERO), Ok(()));
    }

    #[test]
    fn an_update_policy_reads_every_setting() {
        assert_eq!(UpdatePolicy::of(&unit("Global=true\n")), None);
        assert_eq!(UpdatePolicy::of(&unit("UpdatePolicy=all-at-once\n")), None);
        assert_eq!(UpdatePolicy::of(&unit("UpdatePolicy=rolling\n")), Some(UpdatePolicy::default()));
        let p = UpdatePolicy::of(&unit(
            "UpdatePolicy=rolling\nUpdateMaxUnavailable=40%\nUpdateMinHealthy=30s\nUpdateHealthTimeout=2m\n\
             UpdateOnFailure=rollback\nUpdateOrder=last:role=primary\nUpdateProgressDeadline=10m\n",
        ))
        .unwrap();
        assert_eq!(p.max_unavailable, MaxUnavailable::Percent(40));
        assert_eq!((p.min_healthy, p.health_timeout), (Duration::from_secs(30), Duration::from_secs(120)));
        assert_eq!(p.on_failure, OnFailure::Rollback);
        assert_eq!(p.order, "last:role=primary");
        assert_eq!(p.progress_deadline, Some(Duration::from_secs(600)));
    }

    #[test]
    fn bad_policy_values_are_refused_naming_the_key() {
        let cases = [
            ("UpdatePolicy=slowly\n", "[X-Fleet] UpdatePolicy=\"slowly\": expected rolling or all-at-once"),
            ("UpdatePolicy=rolling\nUpdateMaxUnavailable=0\n", "UpdateMaxUnavailable=\"0\": must be at least 1"),
            ("UpdatePolicy=rolling\nUpdateMaxUnavailable=two\n", "UpdateMaxUnavailable=\"two\": expected a number"),
            ("UpdatePolicy=rolling\nUpdateMaxUnavailable=150%\n", "a percentage must be from 1% to 100%, got 150%"),
            ("UpdatePolicy=rolling\nUpdateMinHealthy=soon\n", "UpdateMinHealthy=\"soon\": expected a duration"),
            ("UpdatePolicy=rolling\nUpdateHealthTimeout=0s\n", "UpdateHealthTimeout=\"0s\": must be longer than 0"),
            ("UpdatePolicy=rolling\nUpdateOnFailure=retry\n", "UpdateOnFailure=\"retry\": expected pause or rollback"),
            ("UpdatePolicy=rolling\nUpdateOrder=middle:x\n", "UpdateOrder=\"middle:x\": \"middle:x\": expected first:"),
            ("UpdateMinHealthy=30s\n", "[X-Fleet] UpdateMinHealthy=\"30s\": needs UpdatePolicy=rolling"),
        ];
        for (xfleet, want) in cases {
            let got = check(&unit(xfleet)).map_err(|e| e.to_string());
            assert!(got.as_ref().is_err_and(|e| e.contains(want)), "{xfleet:?}: {got:?}, want {want:?}");
        }
    }

    #[test]
    fn max_unavailable_is_a_count_or_a_share_of_the_machines() {
        assert_eq!(MaxUnavailable::parse("2"), Ok(MaxUnavailable::Count(2)));
        assert_eq!(MaxUnavailable::parse("25%"), Ok(MaxUnavailable::Percent(25)));
        assert!(MaxUnavailable::parse("-1").is_err() && MaxUnavailable::parse("0%").is_err());
        assert_eq!(MaxUnavailable::Percent(25).of(10), 2, "rounded down");
        assert_eq!(MaxUnavailable::Percent(25).of(3), 1, "at least one");
        assert_eq!(MaxUnavailable::Percent(100).of(5), 5);
        assert_eq!(MaxUnavailable::Count(3).of(2), 3);
    }

    #[test]
    fn an_order_puts_picked_machines_first_or_last() {
        let rules = parse_order("last:role=primary, first:cc").unwrap();
        let md = |m: &str| -> BTreeMap<String, String> {
            let role = if m == "bb01" { "primary" } else { "replica" };
            [("role".to_string(), role.to_string())].into()
        };
        let machines = ["aa01", "bb01", "cc01", "dd01"].map(String::from).to_vec();
        assert_eq!(order_machines(machines.clone(), &rules, md), ["cc01", "aa01", "dd01", "bb01"]);
        assert_eq!(order_machines(machines.clone(), &[], md), machines, "machine-ID order without rules");
        assert_eq!(parse_order("DD01").unwrap()[0].selector, Selector::Machine("dd01".into()));
        assert!(parse_order("last:").is_err() && parse_order("a=b=c").is_err() && parse_order("m-1").is_err());
    }
}

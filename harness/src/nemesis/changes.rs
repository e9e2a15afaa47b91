//! The change driver's plan (pure): which rollouts the nemesis starts on its two rollout targets — a global unit and
//! an instance set (template instances) — in which order, with which pace, and the unit file of every version. A
//! function of the seed, so a printed seed replays the changes as it replays the faults; the changes draw from a
//! stream of their own ([`stream`]), so a seed's fault schedule is the same with changes on or off.
//!
//! A version's unit file carries its label in its environment (`NEM_VERSION=g3`, the `g`/`s` naming the target) and
//! the kind of its health check (`NEM_CHECK=`), so the sampler can read which version a process runs from
//! `/proc/<MainPID>/environ` and run the very check its unit declares ([`Check::command`]).

use std::time::Duration;

use super::schedule::SeededRng;

/// Every unit of the change driver matches this pattern (and no plain nemesis unit does: those are `nem-*`).
pub const PATTERN: &str = "nemr-*";
/// The global unit.
pub const GLOBAL: &str = "nemr-global.service";
/// The instance set's template.
pub const SET_TEMPLATE: &str = "nemr-set@.service";
/// How many instances the set has.
pub const SET_INSTANCES: usize = 3;
/// Where a version writes its readiness marker (`<dir>/<unit name>.ready`).
pub const READY_DIR: &str = "/run/nemr";
/// A flapping check fails for [`FLAP_DOWN_SECS`] out of every [`FLAP_PERIOD_SECS`] (by the host's clock, which the
/// machines share: every machine flaps at once).
pub const FLAP_PERIOD_SECS: u64 = 20;
pub const FLAP_DOWN_SECS: u64 = 4;
/// How often fleet's agent runs a version's check.
pub const CHECK_INTERVAL: &str = "500ms";

/// Whether the nemesis runs the change driver (`--changes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Plain units and faults only (the nemesis before the change driver).
    None,
    /// Rolling replaces, restarts, rollbacks and aborts of the global unit and the instance set.
    #[default]
    Rolling,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "none" => Ok(Mode::None),
            "rolling" => Ok(Mode::Rolling),
            _ => Err(format!("expected none or rolling, got {s:?}")),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::None => "none",
            Mode::Rolling => "rolling",
        })
    }
}

/// `nemr-set@<i>.service`.
pub fn set_instance(i: usize) -> String {
    format!("nemr-set@{i}.service")
}

/// The instances of the set, in order.
pub fn set_instances() -> Vec<String> {
    (1..=SET_INSTANCES).map(set_instance).collect()
}

/// What a rollout changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// [`GLOBAL`]: one copy on every machine; a rollout's steps are machines.
    Global,
    /// The instances of [`SET_TEMPLATE`]: each runs on one machine; a rollout's steps are instances.
    Set,
}

impl Target {
    pub const ALL: [Target; 2] = [Target::Global, Target::Set];

    /// The letter of its version labels.
    pub fn letter(self) -> char {
        match self {
            Target::Global => 'g',
            Target::Set => 's',
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Target::Global => "global unit",
            Target::Set => "instance set",
        }
    }

    /// The units a rollout of this target changes.
    pub fn units(self) -> Vec<String> {
        match self {
            Target::Global => vec![GLOBAL.to_string()],
            Target::Set => set_instances(),
        }
    }

    /// The target `unit` belongs to, if any.
    pub fn of_unit(unit: &str) -> Option<Target> {
        if unit == GLOBAL {
            Some(Target::Global)
        } else if unit.starts_with("nemr-set@") && unit != SET_TEMPLATE {
            Some(Target::Set)
        } else {
            None
        }
    }

    /// The file name a version of this target is written to (the template for the set: fleetctl finds an instance's
    /// content in the local template when the instance's own file is absent).
    pub fn file_name(self) -> &'static str {
        match self {
            Target::Global => GLOBAL,
            Target::Set => SET_TEMPLATE,
        }
    }
}

/// A version's health check (`[X-Fleet] HealthCheck=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No check: systemd's `active` is healthy.
    None,
    /// Passes once the unit has "synced" (its readiness marker exists), `sync` after each start.
    Sync,
    /// As [`Check::Sync`], and fails [`FLAP_DOWN_SECS`] out of every [`FLAP_PERIOD_SECS`] on every machine at once.
    Flap,
}

impl Check {
    pub fn as_str(self) -> &'static str {
        match self {
            Check::None => "none",
            Check::Sync => "sync",
            Check::Flap => "flap",
        }
    }

    pub fn parse(text: &str) -> Option<Check> {
        match text {
            "none" => Some(Check::None),
            "sync" => Some(Check::Sync),
            "flap" => Some(Check::Flap),
            _ => None,
        }
    }

    /// The shell command fleet's agent runs (`/bin/sh -c`, with `FLEET_UNIT` set), and the sampler runs the same.
    pub fn command(self) -> Option<String> {
        let ready = format!("test -e {READY_DIR}/$FLEET_UNIT.ready");
        match self {
            Check::None => None,
            Check::Sync => Some(ready),
            Check::Flap => {
                Some(format!("{ready} && test $(( $(date +%s) % {FLAP_PERIOD_SECS} )) -ge {FLAP_DOWN_SECS}"))
            }
        }
    }
}

/// Where a version cannot start (its `ExecStartPre=` fails), so that its rollout pauses or rolls back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fails {
    Never,
    /// On machine `slot` only (1-based).
    OnSlot(usize),
    Everywhere,
}

/// What a failed step does (`--on-failure`, `UpdateOnFailure=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    Pause,
    Rollback,
}

impl OnFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Pause => "pause",
            OnFailure::Rollback => "rollback",
        }
    }
}

/// How fast a rollout goes: given as fleetctl flags, or as the version's `[X-Fleet] Update*=` policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub max_unavailable: u32,
    pub min_healthy: Duration,
    pub health_timeout: Duration,
    pub on_failure: OnFailure,
    /// `--progress-deadline` (none: the nemesis allows 5 minutes after the faults stop).
    pub deadline: Option<Duration>,
}

/// Go's spelling of a duration for fleetctl and unit keys (`1500ms`).
fn go(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

impl Pace {
    /// fleetctl's flags for this pace (`--rolling` not included).
    pub fn flags(&self) -> Vec<String> {
        let mut flags = vec![
            format!("--max-unavailable={}", self.max_unavailable),
            format!("--min-healthy={}", go(self.min_healthy)),
            format!("--health-timeout={}", go(self.health_timeout)),
            format!("--on-failure={}", self.on_failure.as_str()),
        ];
        if let Some(d) = self.deadline {
            flags.push(format!("--progress-deadline={}", go(d)));
        }
        flags
    }

    /// The `[X-Fleet]` lines of this pace as the unit's update policy.
    fn policy_lines(&self) -> String {
        let mut s = format!(
            "UpdatePolicy=rolling\nUpdateMaxUnavailable={}\nUpdateMinHealthy={}\nUpdateHealthTimeout={}\nUpdateOnFailure={}\n",
            self.max_unavailable,
            go(self.min_healthy),
            go(self.health_timeout),
            self.on_failure.as_str()
        );
        if let Some(d) = self.deadline {
            s.push_str(&format!("UpdateProgressDeadline={}\n", go(d)));
        }
        s
    }
}

impl std::fmt::Display for Pace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max-unavailable {}, min-healthy {}, on-failure {}",
            self.max_unavailable,
            go(self.min_healthy),
            self.on_failure.as_str()
        )?;
        if let Some(d) = self.deadline {
            write!(f, ", deadline {}s", d.as_secs())?;
        }
        Ok(())
    }
}

/// One version of a target's unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub target: Target,
    /// 1 is the version launched at the start.
    pub n: u32,
    pub check: Check,
    /// How long each start "syncs" before its readiness marker appears.
    pub sync: Duration,
    pub fails: Fails,
    /// `[X-Fleet] UpdatePolicy=rolling` with this pace: a plain `start --replace` of it is a rollout.
    pub policy: Option<Pace>,
}

impl Version {
    /// `g3`, `s1`: what `NEM_VERSION=` says.
    pub fn label(&self) -> String {
        format!("{}{}", self.target.letter(), self.n)
    }

    /// What the report says about it: `g3 (check sync, fails on m2, policy …)`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} (check {}", self.label(), self.check.as_str());
        match self.fails {
            Fails::Never => {}
            Fails::OnSlot(slot) => s.push_str(&format!(", fails to start on m{slot}")),
            Fails::Everywhere => s.push_str(", fails to start everywhere"),
        }
        if let Some(p) = self.policy {
            s.push_str(&format!(", UpdatePolicy {p}"));
        }
        s.push(')');
        s
    }

    /// The version launched at the start: health-gated, starts everywhere, no policy.
    pub fn original(target: Target) -> Version {
        Version {
            target,
            n: 1,
            check: Check::Sync,
            sync: Duration::from_millis(1_000),
            fails: Fails::Never,
            policy: None,
        }
    }

    /// Its unit file. `machine_ids[slot - 1]` is the machine a [`Fails::OnSlot`] version refuses to start on.
    pub fn unit_text(&self, machine_ids: &[String]) -> String {
        let label = self.label();
        let mut s = format!(
            "[Unit]\nDescription=nemesis rollout unit {label}\n\n[Service]\nEnvironment=NEM_VERSION={label} NEM_CHECK={}\n\
             ExecStartPre=/bin/mkdir -p {READY_DIR}\nExecStartPre=/bin/rm -f {READY_DIR}/%n.ready\n",
            self.check.as_str()
        );
        let refuse = format!("echo version {label} refuses to start here >&2; exit 1");
        match self.fails {
            Fails::Never => {}
            Fails::Everywhere => s.push_str(&format!("ExecStartPre=/bin/sh -c '{refuse}'\n")),
            Fails::OnSlot(slot) => {
                let id = machine_ids.get(slot.saturating_sub(1)).map_or("no-such-machine", String::as_str);
                s.push_str(&format!("ExecStartPre=/bin/sh -c 'if grep -q {id} /etc/machine-id; then {refuse}; fi'\n"));
            }
        }
        s.push_str(&format!(
            "ExecStart=/bin/sh -c 'sleep {:.1}; touch {READY_DIR}/%n.ready; exec sleep infinity'\n\
             ExecStopPost=/bin/rm -f {READY_DIR}/%n.ready\n\n[X-Fleet]\n",
            self.sync.as_secs_f64()
        ));
        if self.target == Target::Global {
            s.push_str("Global=true\n");
        }
        if let Some(command) = self.check.command() {
            s.push_str(&format!(
                "HealthCheck={command}\nHealthCheckInterval={CHECK_INTERVAL}\nHealthCheckTimeout=2s\n"
            ));
        }
        if let Some(p) = self.policy {
            s.push_str(&p.policy_lines());
        }
        s
    }
}

/// What a change does to its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A rolling replace to a new version.
    Replace(Version),
    /// A rolling restart of the version running.
    Restart,
    /// `fleetctl rollback --rolling`: back to the version before the current one (for the set: its first instance).
    Rollback,
    /// A rolling replace to a new version, aborted (`rollout-abort`) once a step has left `pending`.
    Abort(Version),
}

impl Op {
    /// The version it asks for, if it asks for a new one.
    pub fn version(&self) -> Option<&Version> {
        match self {
            Op::Replace(v) | Op::Abort(v) => Some(v),
            Op::Restart | Op::Rollback => None,
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Replace(v) => write!(f, "rolling replace to {}", v.describe()),
            Op::Restart => f.write_str("rolling restart"),
            Op::Rollback => f.write_str("rollback to the previous version"),
            Op::Abort(v) => write!(f, "rolling replace to {}, aborted mid-way", v.describe()),
        }
    }
}

/// What the driver does when the target's previous rollout still holds it (running past the change's start, or
/// paused): a unit is in at most one rollout that has not ended, so the next change needs it out of the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnHeld {
    /// `rollout-abort`.
    Abort,
    /// `rollout-resume` (a paused one; a running one is aborted).
    Resume,
    /// `rollout-resume --skip-failed` (likewise).
    ResumeSkipFailed,
}

/// One change the driver makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub target: Target,
    /// How long after the previous change on the target (or the start) it begins.
    pub gap: Duration,
    pub op: Op,
    /// The pace as flags; `None` for a replace to a version with a policy, sent without `--rolling` (the server
    /// applies the policy).
    pub flags: Option<Pace>,
    pub on_held: OnHeld,
}

impl Change {
    /// The pace the rollout runs at: the flags, else the new version's policy.
    pub fn pace(&self) -> Option<Pace> {
        self.flags.or_else(|| self.op.version().and_then(|v| v.policy))
    }
}

/// The generator of `target`'s changes for `seed`: a stream apart from the fault schedule's.
pub fn stream(seed: u64, target: Target) -> SeededRng {
    let salt = match target {
        Target::Global => 0x6e65_6d72_676c_6f62,
        Target::Set => 0x6e65_6d72_7365_7421,
    };
    SeededRng::new(seed ^ salt)
}

/// `count` changes of `target` for `seed`, on a cluster of `machines`. Version numbers go up from 2 (1 is
/// [`Version::original`]).
pub fn plan(seed: u64, target: Target, count: usize, machines: usize) -> Vec<Change> {
    let mut rng = stream(seed, target);
    let mut next_version = 2;
    let ms = Duration::from_millis;
    let slots = machines.max(1) as u64;
    let steps = match target {
        Target::Global => machines,
        Target::Set => SET_INSTANCES,
    } as u64;
    (0..count)
        .map(|_| {
            let pace = |rng: &mut SeededRng| Pace {
                max_unavailable: if rng.range(0, 2) == 0 { 2.min(steps.max(1) as u32) } else { 1 },
                min_healthy: ms(rng.range(0, 4) * 500),
                health_timeout: ms(rng.range(20, 40) * 1_000),
                on_failure: if rng.range(0, 1) == 0 { OnFailure::Pause } else { OnFailure::Rollback },
                deadline: (rng.range(0, 2) == 0).then(|| ms(rng.range(60, 120) * 1_000)),
            };
            let mut version = |rng: &mut SeededRng, pace: Pace| {
                let n = next_version;
                next_version += 1;
                let check = match rng.range(0, 5) {
                    0 => Check::None,
                    1 | 2 => Check::Flap,
                    _ => Check::Sync,
                };
                let fails = match rng.range(0, 9) {
                    0 => Fails::Everywhere,
                    1 | 2 => Fails::OnSlot(rng.range(1, slots) as usize),
                    _ => Fails::Never,
                };
                let policy = (rng.range(0, 3) == 0).then_some(pace);
                Version { target, n, check, sync: ms(rng.range(2, 6) * 500), fails, policy }
            };
            let gap = ms(rng.range(4, 15) * 1_000);
            let on_held = match rng.range(0, 3) {
                0 => OnHeld::Resume,
                1 => OnHeld::ResumeSkipFailed,
                _ => OnHeld::Abort,
            };
            let p = pace(&mut rng);
            let (op, flags) = match rng.range(0, 9) {
                0..=3 => {
                    let v = version(&mut rng, p);
                    // A version with a policy is sent as a plain replace half of the time: the server rolls it.
                    let flags = if v.policy.is_some() && rng.range(0, 1) == 0 { None } else { Some(p) };
                    (Op::Replace(v), flags)
                }
                4 | 5 => (Op::Restart, Some(p)),
                6 => (Op::Rollback, Some(p)),
                _ => {
                    let v = version(&mut rng, p);
                    (Op::Abort(v), Some(p))
                }
            };
            Change { target, gap, op, flags, on_held }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_changes_and_the_targets_differ() {
        assert_eq!(plan(5, Target::Global, 40, 3), plan(5, Target::Global, 40, 3));
        assert_ne!(plan(5, Target::Global, 40, 3), plan(6, Target::Global, 40, 3));
        let g: Vec<Duration> = plan(5, Target::Global, 10, 3).iter().map(|c| c.gap).collect();
        let s: Vec<Duration> = plan(5, Target::Set, 10, 3).iter().map(|c| c.gap).collect();
        assert_ne!(g, s, "the two targets draw from streams of their own");
    }

    #[test]
    fn every_kind_of_change_and_version_is_drawn_and_versions_are_new_each_time() {
        let changes = plan(11, Target::Set, 300, 3);
        let has = |f: &dyn Fn(&Change) -> bool| changes.iter().any(f);
        assert!(has(&|c| matches!(c.op, Op::Replace(_))));
        assert!(has(&|c| matches!(c.op, Op::Restart)));
        assert!(has(&|c| matches!(c.op, Op::Rollback)));
        assert!(has(&|c| matches!(c.op, Op::Abort(_))));
        assert!(has(&|c| c.flags.is_none()), "some replaces leave the pace to the version's policy");
        let versions: Vec<&Version> = changes.iter().filter_map(|c| c.op.version()).collect();
        for check in [Check::None, Check::Sync, Check::Flap] {
            assert!(versions.iter().any(|v| v.check == check), "{check:?} drawn");
        }
        assert!(versions.iter().any(|v| v.fails == Fails::Everywhere));
        assert!(versions.iter().any(|v| matches!(v.fails, Fails::OnSlot(1..=3))));
        let numbers: Vec<u32> = versions.iter().map(|v| v.n).collect();
        assert_eq!(numbers, (2..2 + numbers.len() as u32).collect::<Vec<_>>(), "each version is new, from 2 up");
        for c in &changes {
            assert!(c.pace().is_some(), "every change has a pace: {c:?}");
            if c.flags.is_none() {
                assert!(c.op.version().is_some_and(|v| v.policy.is_some()), "{c:?}");
            }
            let p = c.pace().unwrap();
            assert!((1..=2).contains(&p.max_unavailable), "{p:?}");
        }
    }

    #[test]
    fn a_unit_file_carries_its_label_check_failure_and_policy() {
        let ids = vec!["aaaa".to_string(), "bbbb".to_string()];
        let pace = Pace {
            max_unavailable: 1,
            min_healthy: Duration::from_millis(1_500),
            health_timeout: Duration::from_secs(30),
            on_failure: OnFailure::Rollback,
            deadline: Some(Duration::from_secs(90)),
        };
        let v = Version {
            target: Target::Global,
            n: 7,
            check: Check::Flap,
            sync: Duration::from_millis(1_500),
            fails: Fails::OnSlot(2),
            policy: Some(pace),
        };
        let text = v.unit_text(&ids);
        for needle in [
            "Environment=NEM_VERSION=g7 NEM_CHECK=flap\n",
            "if grep -q bbbb /etc/machine-id; then echo version g7 refuses",
            "sleep 1.5;",
            "Global=true\n",
            "HealthCheck=test -e /run/nemr/$FLEET_UNIT.ready && test $(( $(date +%s) % 20 )) -ge 4\n",
            "UpdateMaxUnavailable=1\nUpdateMinHealthy=1500ms\nUpdateHealthTimeout=30000ms\nUpdateOnFailure=rollback\n",
            "UpdateProgressDeadline=90000ms\n",
        ] {
            assert!(text.contains(needle), "{needle:?} not in:\n{text}");
        }
        let plain = Version { target: Target::Set, check: Check::None, fails: Fails::Never, policy: None, ..v };
        let text = plain.unit_text(&ids);
        assert!(!text.contains("Global=") && !text.contains("HealthCheck") && !text.contains("Update"), "{text}");
        assert!(!text.contains("refuses"), "{text}");
        assert_eq!(
            pace.flags().join(" "),
            "--max-unavailable=1 --min-healthy=1500ms --health-timeout=30000ms --on-failure=rollback --progress-deadline=90000ms"
        );
    }

    #[test]
    fn units_belong_to_their_target() {
        assert_eq!(Target::of_unit(GLOBAL), Some(Target::Global));
        assert_eq!(Target::of_unit("nemr-set@2.service"), Some(Target::Set));
        assert_eq!(Target::of_unit(SET_TEMPLATE), None);
        assert_eq!(Target::of_unit("nem-3.service"), None);
        assert_eq!(Target::Set.units(), ["nemr-set@1.service", "nemr-set@2.service", "nemr-set@3.service"]);
    }
}

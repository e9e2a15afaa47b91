//! Sampling systemd in every machine: one round is `systemctl show -p Id -p ActiveState -p MainPID 'nem-*'` in each
//! machine at once; a machine whose container cannot run it (killed, booting) is recorded as down.
//!
//! With the change driver on, the same exec also shows its units (`nemr-*`: state, MainPID, InvocationID) and,
//! for each with a MainPID, reads the version its process runs (`NEM_VERSION` in `/proc/<pid>/environ`) and runs
//! that version's own health check in the machine (the command its unit declares, [`Check::command`]), as fleet's
//! agent would — the rollout invariants are about systemd, not fleet's view.

use std::collections::BTreeMap;

use super::changes::{self, Check};
use super::check::{Round, secs};
use super::rollcheck::{Copy, Health, RollRound};

/// The units the nemesis launches all match this pattern.
pub const PATTERN: &str = "nem-*";

/// Active units → MainPID from `systemctl show -p Id -p ActiveState -p MainPID` output (blocks separated by blank
/// lines, properties in any order). A unit counts as running when `active` with a MainPID.
pub fn parse_show(text: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for block in text.split("\n\n") {
        let props: BTreeMap<&str, &str> = block.lines().filter_map(|l| l.split_once('=')).collect();
        let (Some(id), Some(state), Some(pid)) = (props.get("Id"), props.get("ActiveState"), props.get("MainPID"))
        else {
            continue;
        };
        if *state == "active"
            && let Ok(pid) = pid.parse::<u32>()
            && pid != 0
        {
            out.insert(id.to_string(), pid);
        }
    }
    out
}

/// The shell script of a round with the change driver's units: the plain units' `systemctl show`, a line
/// `@@roll`, the driver's units' `systemctl show`, a line `@@probe`, then `@ <unit> <version|-> <n|1|0|->` per unit
/// with a MainPID (`n`: its version has no check; `1`/`0`: its check passed/failed; `-`: unknown). `$1` and `$2` are
/// the sync and flap checks, followed by the check's kind (`none`, `sync`, `flap`, `-`). A failing `systemctl` fails
/// the script (the machine reads as down).
const ROLL_SCRIPT: &str = r#"p=$(systemctl show -p Id -p ActiveState -p MainPID 'nem-*') || exit 1
r=$(systemctl show -p Id -p ActiveState -p SubState -p MainPID -p InvocationID 'nemr-*') || exit 1
printf '%s\n@@roll\n%s\n@@probe\n' "$p" "$r"
printf '%s\n\n' "$r" | { u=; m=; while IFS= read -r line; do
  case $line in
    Id=*) u=${line#Id=} ;;
    MainPID=*) m=${line#MainPID=} ;;
    '')
      if [ -n "$u" ] && [ -n "$m" ] && [ "$m" != 0 ]; then
        e=$(tr '\0' '\n' < /proc/$m/environ 2>/dev/null)
        v=$(printf '%s\n' "$e" | sed -n 's/^NEM_VERSION=//p')
        k=$(printf '%s\n' "$e" | sed -n 's/^NEM_CHECK=//p')
        case $k in
          none) h=n ;;
          sync) if FLEET_UNIT=$u sh -c "$1" >/dev/null 2>&1; then h=1; else h=0; fi ;;
          flap) if FLEET_UNIT=$u sh -c "$2" >/dev/null 2>&1; then h=1; else h=0; fi ;;
          *) h=- ;;
        esac
        echo "@ $u ${v:--} $h ${k:--}"
      fi
      u=; m= ;;
  esac
done; }
"#;

/// One round over `machines` (`(name, container)`), all sampled concurrently; with `rollouts`, the change driver's
/// units too (else the second round is empty for every machine that answered).
pub async fn round(machines: &[(String, String)], t_ms: u64, rollouts: bool) -> (Round, RollRound) {
    let sync = Check::Sync.command().unwrap_or_default();
    let flap = Check::Flap.command().unwrap_or_default();
    let looks = machines.iter().map(|(name, container)| {
        let (sync, flap) = (sync.clone(), flap.clone());
        async move {
            let plain = ["systemctl", "show", "-p", "Id", "-p", "ActiveState", "-p", "MainPID", PATTERN];
            let with_rollouts = ["sh", "-c", ROLL_SCRIPT, "sh", sync.as_str(), flap.as_str()];
            let cmd: &[&str] = if rollouts { &with_rollouts } else { &plain };
            let seen = match crate::container::exec(container, cmd).await {
                Ok(out) if out.success() => Some(parse_round(&out.stdout)),
                _ => None,
            };
            (name.clone(), seen)
        }
    });
    let mut round = Round { t_ms, machines: BTreeMap::new() };
    let mut roll = RollRound { t_ms, epoch_ms: 0, machines: BTreeMap::new() };
    let seen_all = futures::future::join_all(looks).await;
    // Once every machine answered, as `t_ms`.
    roll.epoch_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    for (name, seen) in seen_all {
        let (plain, copies) = match seen {
            Some((plain, copies)) => (Some(plain), Some(copies)),
            None => (None, None),
        };
        round.machines.insert(name.clone(), plain);
        roll.machines.insert(name, copies);
    }
    (round, roll)
}

/// A round's output: the plain units (as [`parse_show`]) and the driver's units (empty without `@@roll`).
pub fn parse_round(text: &str) -> (BTreeMap<String, u32>, BTreeMap<String, Copy>) {
    let Some((plain, rest)) = text.split_once("\n@@roll\n") else { return (parse_show(text), BTreeMap::new()) };
    let (shown, probes) = rest.split_once("\n@@probe\n").unwrap_or((rest, ""));
    (parse_show(plain), parse_copies(shown, probes))
}

/// The driver's units from `systemctl show -p Id -p ActiveState -p SubState -p MainPID -p InvocationID` and the
/// probe lines (`@ <unit> <version|-> <n|1|0|->`). Every loaded unit is kept, whatever its state.
pub fn parse_copies(shown: &str, probes: &str) -> BTreeMap<String, Copy> {
    let mut out = BTreeMap::new();
    for block in shown.split("\n\n") {
        let props: BTreeMap<&str, &str> = block.lines().filter_map(|l| l.split_once('=')).collect();
        let Some(id) = props.get("Id").filter(|id| changes::Target::of_unit(id).is_some()) else { continue };
        let get = |k: &str| props.get(k).copied().unwrap_or_default().to_string();
        out.insert(
            id.to_string(),
            Copy {
                active_state: get("ActiveState"),
                sub_state: get("SubState"),
                pid: get("MainPID").parse().unwrap_or(0),
                invocation: get("InvocationID"),
                version: None,
                health: Health::Unknown,
                flaps: false,
            },
        );
    }
    for line in probes.lines() {
        let (unit, version, health, kind) = match line.split_whitespace().collect::<Vec<_>>()[..] {
            [_, unit, version, health] => (unit, version, health, "-"),
            [_, unit, version, health, kind] => (unit, version, health, kind),
            _ => continue,
        };
        let Some(c) = out.get_mut(unit) else { continue };
        c.flaps = kind == "flap";
        c.version = (version != "-").then(|| version.to_string());
        c.health = match health {
            "n" => Health::NoCheck,
            "1" => Health::Pass,
            "0" => Health::Fail,
            _ => Health::Unknown,
        };
    }
    out
}

/// `unit`'s copies (of the change driver) between `from_ms` and `to_ms`, one line per change: `12.5s  m1:g2 pid 210
/// inv 3f2a ok  m2:inactive/dead  m3:down`.
pub fn roll_timeline(rounds: &[RollRound], unit: &str, from_ms: u64, to_ms: u64) -> Vec<String> {
    changes(rounds.iter().map(|r| (r.t_ms, &r.machines)), unit, from_ms, to_ms, |c| c.to_string())
}

/// `unit`'s rounds between `from_ms` and `to_ms`, one line each: `12.5s  m1:pid 210  m2:-  m3:down`, only where
/// something changed from the line before.
pub fn timeline(rounds: &[Round], unit: &str, from_ms: u64, to_ms: u64) -> Vec<String> {
    changes(rounds.iter().map(|r| (r.t_ms, &r.machines)), unit, from_ms, to_ms, |pid| format!("pid {pid}"))
}

/// The lines of [`timeline`] and [`roll_timeline`]: per round in the window, each machine's cell for `unit`
/// (`cell` of what it shows, `-` without it, `down` when it could not be read), a line where any cell changed.
fn changes<'a, T: 'a>(
    rounds: impl Iterator<Item = (u64, &'a BTreeMap<String, Option<BTreeMap<String, T>>>)>,
    unit: &str,
    from_ms: u64,
    to_ms: u64,
    cell: impl Fn(&T) -> String,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut previous = String::new();
    for (t_ms, machines) in rounds.filter(|(t, _)| *t >= from_ms && *t <= to_ms) {
        let state = machines
            .iter()
            .map(|(m, seen)| match seen {
                None => format!("{m}:down"),
                Some(units) => match units.get(unit) {
                    Some(c) => format!("{m}:{}", cell(c)),
                    None => format!("{m}:-"),
                },
            })
            .collect::<Vec<_>>()
            .join("  ");
        if state != previous {
            lines.push(format!("{:>7}  {state}", secs(t_ms)));
            previous = state;
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::check::each_once;
    use super::*;

    #[test]
    fn only_active_units_with_a_main_pid_count() {
        let text = "Id=nem-1.service\nActiveState=active\nMainPID=120\n\n\
                    MainPID=0\nId=nem-2.service\nActiveState=inactive\n\n\
                    Id=nem-3.service\nActiveState=deactivating\nMainPID=130\n";
        assert_eq!(parse_show(text), BTreeMap::from([("nem-1.service".to_string(), 120)]));
        assert!(parse_show("").is_empty());
    }

    #[test]
    fn a_round_with_the_drivers_units_parses_both_parts_and_the_probes() {
        let text = "Id=nem-1.service\nActiveState=active\nMainPID=120\n@@roll\n\
                    Id=nemr-global.service\nActiveState=active\nSubState=running\nMainPID=300\nInvocationID=ab12\n\n\
                    MainPID=0\nId=nemr-set@2.service\nActiveState=failed\nSubState=failed\nInvocationID=cd34\n\n\
                    Id=nemr-set@3.service\nActiveState=active\nSubState=running\nMainPID=310\nInvocationID=ef56\n\
                    @@probe\n@ nemr-global.service g3 1 flap\n@ nemr-set@3.service - - -\n";
        let (plain, copies) = parse_round(text);
        assert_eq!(plain, BTreeMap::from([("nem-1.service".to_string(), 120)]));
        assert_eq!(copies.len(), 3, "{copies:?}");
        let g = &copies["nemr-global.service"];
        assert_eq!(
            (g.pid, g.invocation.as_str(), g.version.as_deref(), g.health),
            (300, "ab12", Some("g3"), Health::Pass)
        );
        assert!(g.serving());
        assert!(g.flaps, "its version's check flaps");
        assert!(!copies["nemr-set@3.service"].flaps);
        let failed = &copies["nemr-set@2.service"];
        assert_eq!((failed.active_state.as_str(), failed.pid, failed.health), ("failed", 0, Health::Unknown));
        let unknown = &copies["nemr-set@3.service"];
        assert_eq!((unknown.version.as_deref(), unknown.health), (None, Health::Unknown));
        assert!(!unknown.serving(), "a copy whose version could not be read does not count as serving");
        // Without the driver's part, a round is the plain units only.
        assert_eq!(parse_round("Id=nem-1.service\nActiveState=active\nMainPID=7\n").1, BTreeMap::new());
    }

    #[test]
    fn timeline_shows_changes_only() {
        let mk = |t_ms, m1: Option<&[(&str, u32)]>| Round {
            t_ms,
            machines: BTreeMap::from([(
                "m1".to_string(),
                m1.map(|u| u.iter().map(|(n, p)| (n.to_string(), *p)).collect()),
            )]),
        };
        let rounds =
            [mk(0, Some(&[("a", 1)])), mk(500, Some(&[("a", 1)])), mk(1_000, None), mk(1_500, Some(&[("a", 2)]))];
        assert_eq!(timeline(&rounds, "a", 0, 2_000), ["   0.0s  m1:pid 1", "   1.0s  m1:down", "   1.5s  m1:pid 2"]);
        assert!(each_once(&rounds[0], &["a".to_string()]));
        assert!(!each_once(&rounds[2], &["a".to_string()]));
    }
}

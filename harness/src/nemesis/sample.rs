//! Sampling systemd in every machine: one round is `systemctl show -p Id -p ActiveState -p MainPID 'nem-*'` in each
//! machine at once; a machine whose container cannot run it (killed, booting) is recorded as down.

use std::collections::BTreeMap;

use super::check::{Round, secs};

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

/// One round over `machines` (`(name, container)`), all sampled concurrently.
pub async fn round(machines: &[(String, String)], t_ms: u64) -> Round {
    let looks = machines.iter().map(|(name, container)| async move {
        let cmd = ["systemctl", "show", "-p", "Id", "-p", "ActiveState", "-p", "MainPID", PATTERN];
        let seen = match crate::container::exec(container, &cmd).await {
            Ok(out) if out.success() => Some(parse_show(&out.stdout)),
            _ => None,
        };
        (name.clone(), seen)
    });
    Round { t_ms, machines: futures::future::join_all(looks).await.into_iter().collect() }
}

/// `unit`'s rounds between `from_ms` and `to_ms`, one line each: `12.5s  m1:pid 210  m2:-  m3:down`, only where
/// something changed from the line before.
pub fn timeline(rounds: &[Round], unit: &str, from_ms: u64, to_ms: u64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut previous = String::new();
    for r in rounds.iter().filter(|r| r.t_ms >= from_ms && r.t_ms <= to_ms) {
        let state = r
            .machines
            .iter()
            .map(|(m, seen)| match seen {
                None => format!("{m}:down"),
                Some(units) => match units.get(unit) {
                    Some(pid) => format!("{m}:pid {pid}"),
                    None => format!("{m}:-"),
                },
            })
            .collect::<Vec<_>>()
            .join("  ");
        if state != previous {
            lines.push(format!("{:>7}  {state}", secs(r.t_ms)));
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

//! The fault schedule: which faults the nemesis injects, in which order, with which parameters — a pure function
//! of the seed and the cluster's shape, so a printed seed replays the same sequence.

use std::time::Duration;

/// A small, fixed pseudo-random generator (SplitMix64): the same seed gives the same sequence on every build,
/// whatever version of `rand` the workspace uses.
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        SeededRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// One fault, with what it needs to be injected and undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL to machine `slot`'s container; started again after `down`.
    MachineKill { slot: usize, down: Duration },
    /// `kill -9` of fleetd in machine `slot`, then fleet.service started again at once (within the TTL).
    FleetdKill { slot: usize },
    /// fleet.service restarted gracefully on the machine that leads the engine (found when injected).
    EngineLeaderChurn,
    /// Machine `slot` cut off the cluster network (etcd included) for `down`; `beyond_ttl` says which side of the
    /// TTL that is.
    Partition { slot: usize, down: Duration, beyond_ttl: bool },
    /// SIGKILL to etcd member `index`; started again after `down`. With a single member this is an etcd outage.
    EtcdMemberKill { index: usize, down: Duration },
    /// SIGKILL to the etcd member that leads (found when injected); started again after `down`.
    EtcdLeaderKill { down: Duration },
    /// netem delay of `delay_ms` on every etcd member's network interface for `down`.
    SlowEtcd { delay_ms: u64, down: Duration },
    /// Machine `slot`'s units directory (a tmpfs of its own, [`super::resources`]) filled to the last byte for
    /// `down`: every unit-file write there fails with ENOSPC; the files already there stay.
    DiskFull { slot: usize, down: Duration },
    /// Machine `slot`'s fleetd restarted with its wall clock an hour ahead (or behind) for `down` (libfaketime,
    /// monotonic time untouched), then restarted on the host's clock.
    ClockJump { slot: usize, ahead: bool, down: Duration },
}

impl Fault {
    /// Whether the fault touches etcd only (no machine).
    pub fn is_etcd(&self) -> bool {
        matches!(self, Fault::EtcdMemberKill { .. } | Fault::EtcdLeaderKill { .. } | Fault::SlowEtcd { .. })
    }

    /// The fault's kind: its label without parameters (`machine kill m2 for 7s` → `machine kill`).
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::MachineKill { .. } => "machine kill",
            Fault::FleetdKill { .. } => "fleetd kill -9",
            Fault::EngineLeaderChurn => "engine leader churn",
            Fault::Partition { beyond_ttl: true, .. } => "partition > TTL",
            Fault::Partition { beyond_ttl: false, .. } => "partition < TTL",
            Fault::EtcdMemberKill { .. } => "etcd member kill",
            Fault::EtcdLeaderKill { .. } => "etcd leader kill",
            Fault::SlowEtcd { .. } => "slow etcd",
            Fault::DiskFull { .. } => "disk full",
            Fault::ClockJump { .. } => "clock jump",
        }
    }

    /// How long the fault lasts before it is undone (zero for the instant ones).
    pub fn down(&self) -> Duration {
        match self {
            Fault::MachineKill { down, .. }
            | Fault::Partition { down, .. }
            | Fault::EtcdMemberKill { down, .. }
            | Fault::EtcdLeaderKill { down }
            | Fault::SlowEtcd { down, .. }
            | Fault::DiskFull { down, .. }
            | Fault::ClockJump { down, .. } => *down,
            Fault::FleetdKill { .. } | Fault::EngineLeaderChurn => Duration::ZERO,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::MachineKill { slot, down } => write!(f, "machine kill m{slot} for {}s", down.as_secs()),
            Fault::FleetdKill { slot } => write!(f, "fleetd kill -9 on m{slot}, restarted at once"),
            Fault::EngineLeaderChurn => write!(f, "engine leader churn (fleet.service restarted on the leader)"),
            Fault::Partition { slot, down, beyond_ttl } => write!(
                f,
                "m{slot} cut from etcd for {}s ({} the TTL)",
                down.as_secs(),
                if *beyond_ttl { "longer than" } else { "shorter than" }
            ),
            Fault::EtcdMemberKill { index, down } => {
                write!(f, "etcd member {} killed for {}s", index + 1, down.as_secs())
            }
            Fault::EtcdLeaderKill { down } => write!(f, "etcd leader killed for {}s", down.as_secs()),
            Fault::SlowEtcd { delay_ms, down } => write!(f, "slow etcd: +{delay_ms} ms for {}s", down.as_secs()),
            Fault::DiskFull { slot, down } => write!(f, "m{slot} units directory full for {}s", down.as_secs()),
            Fault::ClockJump { slot, ahead, down } => write!(
                f,
                "m{slot} fleetd's wall clock an hour {} for {}s",
                if *ahead { "ahead" } else { "behind" },
                down.as_secs()
            ),
        }
    }
}

/// The cluster a schedule is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub machines: usize,
    pub etcd_members: usize,
    /// fleet.conf `agent_ttl`.
    pub ttl: Duration,
    /// Whether the machines' resources fail too: a full units directory, a fleetd wall clock an hour off.
    pub resource_faults: bool,
}

/// Kinds with their weights (how often each is drawn).
const KINDS: &[(Kind, u64)] = &[
    (Kind::MachineKill, 2),
    (Kind::FleetdKill, 2),
    (Kind::EngineLeaderChurn, 1),
    (Kind::ShortPartition, 1),
    (Kind::LongPartition, 2),
    (Kind::EtcdMemberKill, 2),
    (Kind::EtcdLeaderKill, 1),
    (Kind::SlowEtcd, 1),
];

/// Drawn as well with [`Shape::resource_faults`] (appended, so the kinds above keep their odds relative to each
/// other).
const RESOURCE_KINDS: &[(Kind, u64)] = &[(Kind::DiskFull, 1), (Kind::ClockJump, 1)];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    MachineKill,
    FleetdKill,
    EngineLeaderChurn,
    ShortPartition,
    LongPartition,
    EtcdMemberKill,
    EtcdLeaderKill,
    SlowEtcd,
    DiskFull,
    ClockJump,
}

/// `count` faults drawn from `seed` for `shape`. The etcd leader kill needs more than one member (a single member's
/// kill is drawn as an etcd member kill instead).
pub fn schedule(seed: u64, count: usize, shape: Shape) -> Vec<Fault> {
    let mut rng = SeededRng::new(seed);
    let kinds: Vec<(Kind, u64)> =
        KINDS.iter().chain(if shape.resource_faults { RESOURCE_KINDS } else { &[] }).copied().collect();
    let total: u64 = kinds.iter().map(|(_, w)| w).sum();
    let ttl = shape.ttl.as_secs().max(1);
    let machines = shape.machines.max(1) as u64;
    let members = shape.etcd_members.max(1) as u64;
    let secs = Duration::from_secs;
    (0..count)
        .map(|_| {
            let mut pick = rng.range(0, total - 1);
            let kind = kinds
                .iter()
                .find(|(_, w)| {
                    if pick < *w {
                        true
                    } else {
                        pick -= w;
                        false
                    }
                })
                .map(|(k, _)| *k)
                .expect("pick is below the total weight");
            let slot = rng.range(1, machines) as usize;
            match kind {
                Kind::MachineKill => Fault::MachineKill { slot, down: secs(rng.range(3, 3 * ttl)) },
                Kind::FleetdKill => Fault::FleetdKill { slot },
                Kind::EngineLeaderChurn => Fault::EngineLeaderChurn,
                Kind::ShortPartition => {
                    Fault::Partition { slot, down: secs(rng.range(1, (ttl / 2).max(1))), beyond_ttl: false }
                }
                Kind::LongPartition => {
                    Fault::Partition { slot, down: secs(rng.range(2 * ttl, 4 * ttl)), beyond_ttl: true }
                }
                Kind::EtcdLeaderKill if members > 1 => Fault::EtcdLeaderKill { down: secs(rng.range(2, 3 * ttl)) },
                Kind::EtcdMemberKill | Kind::EtcdLeaderKill => Fault::EtcdMemberKill {
                    index: rng.range(0, members - 1) as usize,
                    down: secs(rng.range(2, 3 * ttl)),
                },
                Kind::SlowEtcd => {
                    Fault::SlowEtcd { delay_ms: rng.range(1, 4) * 100, down: secs(rng.range(5, 3 * ttl)) }
                }
                Kind::DiskFull => Fault::DiskFull { slot, down: secs(rng.range(5, 6 * ttl)) },
                Kind::ClockJump => {
                    Fault::ClockJump { slot, ahead: rng.range(0, 1) == 1, down: secs(rng.range(5, 6 * ttl)) }
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape { machines: 3, etcd_members: 3, ttl: Duration::from_secs(5), resource_faults: false }
    }

    /// Resource faults are drawn only when asked for: without them a seed's schedule is the one it always was (CI's
    /// seed keeps its faults).
    #[test]
    fn resource_faults_are_drawn_only_when_asked_for() {
        let plain = schedule(11, 400, shape());
        assert!(!plain.iter().any(|f| matches!(f, Fault::DiskFull { .. } | Fault::ClockJump { .. })));
        let with = schedule(11, 400, Shape { resource_faults: true, ..shape() });
        for kind in ["disk full", "clock jump"] {
            assert!(with.iter().any(|f| f.kind() == kind), "{kind} drawn in 400 faults");
        }
        for f in &with {
            if let Fault::DiskFull { slot, .. } | Fault::ClockJump { slot, .. } = f {
                assert!((1..=3).contains(slot), "{f}");
            }
        }
    }

    #[test]
    fn a_seed_replays_the_same_schedule_and_another_seed_differs() {
        assert_eq!(schedule(42, 30, shape()), schedule(42, 30, shape()));
        assert_ne!(schedule(42, 30, shape()), schedule(43, 30, shape()));
    }

    #[test]
    fn the_generator_is_fixed_across_builds() {
        // SplitMix64's published first output for seed 0.
        assert_eq!(SeededRng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn every_kind_is_drawn_with_parameters_inside_the_cluster_and_on_the_right_side_of_the_ttl() {
        let faults = schedule(7, 400, shape());
        let ttl = shape().ttl;
        let mut seen = std::collections::HashSet::new();
        for f in &faults {
            seen.insert(std::mem::discriminant(f));
            match f {
                Fault::MachineKill { slot, .. } | Fault::FleetdKill { slot } => assert!((1..=3).contains(slot), "{f}"),
                Fault::Partition { slot, down, beyond_ttl } => {
                    assert!((1..=3).contains(slot), "{f}");
                    assert_eq!(*beyond_ttl, *down > ttl, "{f}");
                }
                Fault::EtcdMemberKill { index, .. } => assert!(*index < 3, "{f}"),
                Fault::SlowEtcd { delay_ms, .. } => assert!((100..=400).contains(delay_ms), "{f}"),
                Fault::EngineLeaderChurn | Fault::EtcdLeaderKill { .. } => {}
                Fault::DiskFull { .. } | Fault::ClockJump { .. } => panic!("a resource fault without asking: {f}"),
            }
        }
        assert_eq!(seen.len(), 7, "every fault kind is drawn in 400 faults");
        let long = faults.iter().filter(|f| matches!(f, Fault::Partition { beyond_ttl: true, .. })).count();
        let short = faults.iter().filter(|f| matches!(f, Fault::Partition { beyond_ttl: false, .. })).count();
        assert!(long > 0 && short > 0, "partitions on both sides of the TTL: {long} long, {short} short");
    }

    #[test]
    fn a_single_etcd_member_gets_no_leader_kill() {
        let one = Shape { etcd_members: 1, ..shape() };
        let faults = schedule(9, 200, one);
        assert!(!faults.iter().any(|f| matches!(f, Fault::EtcdLeaderKill { .. })));
        assert!(faults.iter().any(|f| matches!(f, Fault::EtcdMemberKill { index: 0, .. })));
    }
}

//! The per-machine view the scheduler works on during one pass (spec §6.2): which units are present on each
//! machine, machine loads kept in a sorted index, and the [`Fit`] of a unit on a machine (§6.3). Updated
//! incrementally as decisions are made so later decisions in the same pass see earlier ones.

use std::collections::{BTreeSet, HashMap};

use super::constraints::{ReplaceRelation, conflict_between, replace_relation};
use super::fit::{Fit, Rejection};
use super::schedule_input::ScheduleInput;
use crate::model::JobState;

/// Unit and machine handles are indexes into the snapshot (name order and ID order respectively).
pub(crate) type UnitIdx = usize;
pub(crate) type MachineIdx = usize;

/// How placement picked a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The least-loaded machine able to run the unit (ties broken by machine ID), with its load before placement.
    LeastLoaded { load: usize },
}

pub(crate) struct Choice {
    pub machine: MachineIdx,
    pub fit: Fit,
    pub placement: Placement,
}

pub(crate) struct ClusterView<'s> {
    snap: &'s ScheduleInput,
    /// The machine of every non-global unit counted as present (scheduled, desired state not inactive).
    placement: Vec<Option<MachineIdx>>,
    /// Per machine: present units (non-global and global), in name order.
    present: Vec<BTreeSet<UnitIdx>>,
    /// Per machine: present units that have `Conflicts=` patterns.
    present_with_conflicts: Vec<BTreeSet<UnitIdx>>,
    /// Per machine: present non-global units that have `Replaces=` patterns.
    present_with_replaces: Vec<BTreeSet<UnitIdx>>,
    /// Per machine: the active global units whose metadata the machine satisfies, in name order.
    eligible_globals: Vec<Vec<UnitIdx>>,
    /// Per machine: the globals currently counted present there.
    globals_on: Vec<Vec<UnitIdx>>,
    /// Non-global units that conflict with some active global: moving them can change global presence.
    touches_globals: Vec<bool>,
    /// Non-global units each unit replaces and is replaced by (spec B2).
    circular_partners: Vec<Vec<UnitIdx>>,
    /// The `Replaces=` cycles each unit and its transitive `MachineOf=` followers are on (see [`ReplaceCycles`]).
    replace_cycles: ReplaceCycles,
    /// Units naming a given unit in `MachineOf=`.
    followers: HashMap<UnitIdx, Vec<UnitIdx>>,
    /// (load, machine): ascending load, ties by machine ID.
    by_load: BTreeSet<(usize, MachineIdx)>,
}

impl<'s> ClusterView<'s> {
    /// The view of the snapshot as it stands, before any decision.
    pub fn new(snap: &'s ScheduleInput) -> ClusterView<'s> {
        let machines = snap.machines.len();
        let units = &snap.units;
        let active_globals: Vec<UnitIdx> = (0..units.len())
            .filter(|&i| units[i].spec.constraints.global && units[i].spec.desired != JobState::Inactive)
            .collect();
        let eligible_globals = snap
            .machines
            .iter()
            .map(|m| {
                active_globals
                    .iter()
                    .copied()
                    .filter(|&g| units[g].spec.constraints.check_metadata(m).is_ok())
                    .collect()
            })
            .collect();
        let touches_globals = units
            .iter()
            .map(|u| {
                !u.spec.constraints.global
                    && active_globals.iter().any(|&g| {
                        conflict_between(&u.spec.name, &u.conflicts, &units[g].spec.name, &units[g].conflicts)
                    })
            })
            .collect();
        let mut followers: HashMap<UnitIdx, Vec<UnitIdx>> = HashMap::new();
        for (f, unit) in units.iter().enumerate() {
            for peer in &unit.spec.constraints.machine_of {
                if let Some(&p) = snap.unit_index.get(peer) {
                    followers.entry(p).or_default().push(f);
                }
            }
        }
        let mut view = ClusterView {
            snap,
            placement: vec![None; units.len()],
            present: vec![BTreeSet::new(); machines],
            present_with_conflicts: vec![BTreeSet::new(); machines],
            present_with_replaces: vec![BTreeSet::new(); machines],
            eligible_globals,
            globals_on: vec![Vec::new(); machines],
            touches_globals,
            circular_partners: circular_partners(snap),
            replace_cycles: ReplaceCycles::new(snap, &followers),
            followers,
            by_load: BTreeSet::new(),
        };
        for (u, unit) in units.iter().enumerate() {
            let spec = &unit.spec;
            if spec.constraints.global || spec.desired == JobState::Inactive {
                continue;
            }
            if let Some(m) = spec.target.as_deref().and_then(|t| snap.machine_idx(t)) {
                view.insert_present(u, m);
                view.placement[u] = Some(m);
            }
        }
        for m in 0..machines {
            view.recount_globals(m);
            view.by_load.insert((view.present[m].len(), m));
        }
        view
    }

    pub fn machine_id(&self, m: MachineIdx) -> &'s str {
        &self.snap.machines[m].id
    }

    pub fn unit_name(&self, u: UnitIdx) -> &'s str {
        &self.snap.units[u].spec.name
    }

    pub fn load(&self, m: MachineIdx) -> usize {
        self.present[m].len()
    }

    /// Where a non-global unit is counted present, if anywhere.
    pub fn placement(&self, u: UnitIdx) -> Option<MachineIdx> {
        self.placement[u]
    }

    /// Machines in the order least-loaded placement considers them.
    pub fn machines_by_load(&self) -> impl Iterator<Item = (usize, MachineIdx)> + '_ {
        self.by_load.iter().copied()
    }

    /// Units naming `u` in `MachineOf=` that are present on `m`, in name order.
    pub fn followers_on(&self, u: UnitIdx, m: MachineIdx) -> Vec<UnitIdx> {
        self.followers.get(&u).into_iter().flatten().copied().filter(|&f| self.placement[f] == Some(m)).collect()
    }

    /// Non-global units counted present on `m`, in name order.
    pub fn placed_on(&self, m: MachineIdx) -> impl Iterator<Item = UnitIdx> + '_ {
        self.present[m].iter().copied().filter(move |&u| self.placement[u] == Some(m))
    }

    /// Whether moving non-global unit `u` can change which globals count as present (it conflicts with one).
    pub fn touches_globals(&self, u: UnitIdx) -> bool {
        self.touches_globals[u]
    }

    /// Whether some unit names `u` in `MachineOf=`.
    pub fn is_followed(&self, u: UnitIdx) -> bool {
        self.followers.get(&u).is_some_and(|f| !f.is_empty())
    }

    /// Counts non-global unit `u` as present on `m`.
    pub fn place(&mut self, u: UnitIdx, m: MachineIdx) {
        debug_assert!(self.placement[u].is_none(), "unit placed twice");
        let before = self.load(m);
        self.insert_present(u, m);
        self.placement[u] = Some(m);
        if self.touches_globals[u] {
            self.recount_globals(m);
        }
        self.reindex(m, before);
    }

    /// Stops counting non-global unit `u` where it is; returns the machine it was on.
    pub fn remove(&mut self, u: UnitIdx) -> Option<MachineIdx> {
        let m = self.placement[u].take()?;
        let before = self.load(m);
        self.present[m].remove(&u);
        self.present_with_conflicts[m].remove(&u);
        self.present_with_replaces[m].remove(&u);
        if self.touches_globals[u] {
            self.recount_globals(m);
        }
        self.reindex(m, before);
        Some(m)
    }

    fn insert_present(&mut self, u: UnitIdx, m: MachineIdx) {
        let unit = &self.snap.units[u];
        self.present[m].insert(u);
        if !unit.conflicts.is_empty() {
            self.present_with_conflicts[m].insert(u);
        }
        if !unit.replaces.is_empty() && !unit.spec.constraints.global {
            self.present_with_replaces[m].insert(u);
        }
    }

    fn reindex(&mut self, m: MachineIdx, load_before: usize) {
        self.by_load.remove(&(load_before, m));
        self.by_load.insert((self.load(m), m));
    }

    /// Recomputes which globals count as present on `m` (spec §6.2 step 2, in name order per B17): each eligible
    /// global that does not conflict with what is already present.
    fn recount_globals(&mut self, m: MachineIdx) {
        for g in std::mem::take(&mut self.globals_on[m]) {
            self.present[m].remove(&g);
            self.present_with_conflicts[m].remove(&g);
        }
        for i in 0..self.eligible_globals[m].len() {
            let g = self.eligible_globals[m][i];
            if self.first_conflict(g, m).is_none() {
                self.insert_present(g, m);
                self.globals_on[m].push(g);
            }
        }
    }

    /// The first present unit on `m` (in name order, other than `u`) that conflicts with `u` in either direction.
    fn first_conflict(&self, u: UnitIdx, m: MachineIdx) -> Option<UnitIdx> {
        let units = &self.snap.units;
        let x = &units[u];
        let candidates = if x.conflicts.is_empty() { &self.present_with_conflicts[m] } else { &self.present[m] };
        candidates
            .iter()
            .copied()
            .find(|&v| conflict_between(&x.spec.name, &x.conflicts, &units[v].spec.name, &units[v].conflicts))
    }

    /// Whether unit `u` can run on machine `m` given everything else present (spec §6.3; `u` itself is ignored).
    /// A cordoned machine refuses every non-global unit not already counted present there; so does a machine that
    /// cannot write unit files, and it also refuses the units whose file it failed to write.
    pub fn fit(&self, u: UnitIdx, m: MachineIdx) -> Fit {
        let unit = &self.snap.units[u];
        let constraints = &unit.spec.constraints;
        let machine = &self.snap.machines[m];
        if !constraints.allows_machine_id(machine) {
            let required = constraints.machine_id.clone().unwrap_or_default();
            return Fit::Rejected(Rejection::MachineIdMismatch { machine: machine.id.clone(), required });
        }
        if let Err(mismatch) = constraints.check_metadata(machine) {
            return Fit::Rejected(Rejection::MetadataInsufficient(mismatch));
        }
        // A cordoned machine takes no new unit; one already counted there stays (issue 38). Global units are the
        // agents' to decide (`machine_plan::desired`): a cordoned machine keeps the globals it holds.
        if machine.cordoned && !constraints.global && self.placement[u] != Some(m) {
            return Fit::Rejected(Rejection::Cordoned { machine: machine.id.clone() });
        }
        // Issue 37: a machine whose agent cannot write unit files (a full disk) takes no new unit, and the units
        // it failed to write go elsewhere; those it runs stay. Global units are the agents' to decide.
        if let Some(fault) = &machine.load_fault
            && !constraints.global
            && (self.placement[u] != Some(m) || fault.units.contains(&unit.spec.name))
        {
            return Fit::Rejected(Rejection::CannotLoad { machine: machine.id.clone(), reason: fault.reason.clone() });
        }
        if constraints.global {
            return match self.first_conflict(u, m) {
                Some(v) if !self.globals_on[m].contains(&u) => {
                    Fit::Rejected(Rejection::Conflict { unit: self.unit_name(v).to_string() })
                }
                _ => Fit::Ok,
            };
        }
        for peer in &constraints.machine_of {
            let here = self.snap.unit_index.get(peer).is_some_and(|&p| p != u && self.present[m].contains(&p));
            if !here {
                return Fit::Rejected(Rejection::PeerNotPresent { peer: peer.clone() });
            }
        }
        if let Some(v) = self.first_conflict(u, m) {
            return Fit::Rejected(Rejection::Conflict { unit: self.unit_name(v).to_string() });
        }
        if let Some((p, pm)) = self.circular_partners[u].iter().find_map(|&p| self.placement[p].map(|pm| (p, pm))) {
            let rejection = Rejection::CircularReplace {
                unit: self.unit_name(p).to_string(),
                machine: self.machine_id(pm).to_string(),
            };
            return Fit::Rejected(rejection);
        }
        let units = &self.snap.units;
        let relation =
            |v: UnitIdx| replace_relation(&unit.spec.name, &unit.replaces, &units[v].spec.name, &units[v].replaces);
        if let Some(v) =
            self.present_with_replaces[m].iter().copied().find(|&v| relation(v) == ReplaceRelation::ReplacedBy)
        {
            return Fit::Rejected(Rejection::ReplacedBy { unit: self.unit_name(v).to_string() });
        }
        if unit.replaces.is_empty() {
            return Fit::Ok;
        }
        let displaced: Vec<UnitIdx> = self.present[m]
            .iter()
            .copied()
            .filter(|&v| !units[v].spec.constraints.global && relation(v) == ReplaceRelation::Replaces)
            .collect();
        if displaced.is_empty() {
            return Fit::Ok;
        }
        if let Some(&v) = displaced.iter().find(|&&v| self.replace_cycles.closes_cycle(u, v)) {
            return Fit::Rejected(Rejection::ReplaceCycle { unit: self.unit_name(v).to_string() });
        }
        if !constraints.machine_of.is_empty() {
            let leaving = self.leaving_with(&displaced, m);
            if let Some(peer) = constraints.machine_of.iter().find(|p| leaving.contains(p.as_str())) {
                return Fit::Rejected(Rejection::DisplacesPeer { peer: peer.clone() });
            }
        }
        Fit::Displaces(displaced.into_iter().map(|v| self.unit_name(v).to_string()).collect())
    }

    /// Names of the units that leave `m` when `units` leave: they and, transitively, their `MachineOf=` followers.
    fn leaving_with(&self, units: &[UnitIdx], m: MachineIdx) -> BTreeSet<&'s str> {
        let mut leaving = BTreeSet::new();
        let mut stack = units.to_vec();
        while let Some(v) = stack.pop() {
            if leaving.insert(self.unit_name(v)) {
                stack.extend(self.followers_on(v, m));
            }
        }
        leaving
    }

    /// Picks a machine for non-global unit `u` (spec §6.5): the least-loaded acceptable machine (ties by machine ID). `may_displace` allows machines where `u` would
    /// displace units it replaces.
    pub fn choose(&self, u: UnitIdx, may_displace: bool) -> Option<Choice> {
        let accept = |(load, m): (usize, MachineIdx)| {
            let fit = self.fit(u, m);
            fit.accepts(may_displace).then_some(Choice { machine: m, fit, placement: Placement::LeastLoaded { load } })
        };
        match self.narrow_candidates(u) {
            Some(mut candidates) => {
                candidates.sort_unstable();
                candidates.into_iter().find_map(accept)
            }
            None => self.by_load.iter().copied().find_map(accept),
        }
    }

    /// A short list of (load, machine) candidates when `MachineID=` or `MachineOf=` pins the unit; `None` when
    /// every machine is a candidate.
    fn narrow_candidates(&self, u: UnitIdx) -> Option<Vec<(usize, MachineIdx)>> {
        let constraints = &self.snap.units[u].spec.constraints;
        let machines: Vec<MachineIdx> = if let Some(id) = &constraints.machine_id {
            self.snap.machines_matching_id(id)
        } else if let Some(peer) = constraints.machine_of.first() {
            match self.snap.unit_index.get(peer) {
                None => Vec::new(),
                Some(&p) if self.snap.units[p].spec.constraints.global => {
                    (0..self.present.len()).filter(|&m| self.globals_on[m].contains(&p)).collect()
                }
                Some(&p) => self.placement[p].into_iter().collect(),
            }
        } else {
            return None;
        };
        Some(machines.into_iter().map(|m| (self.load(m), m)).collect())
    }
}

/// The cycles of displacement (issue 14 item 3). Placing `x` displaces every unit `y` it replaces on the machine and,
/// with `y`, the units that follow `y` there through `MachineOf=` (transitively). When those edges close a cycle
/// (X replaces Y replaces Z replaces X, or a chain closed by a `MachineOf=` follower), some member is always left
/// without a machine and displaces the next one on every pass: the schedule never settles. So inside a cycle
/// nobody displaces: a unit that would displace a unit whose removal reaches back into its own cycle is refused
/// that machine ([`Rejection::ReplaceCycle`]), as if the two conflicted.
struct ReplaceCycles {
    /// The number of the cycle (strongly connected component of two or more units) each unit is on.
    cycle: Vec<Option<usize>>,
    /// For each unit, the cycles that it and its transitive followers are on (sorted, deduplicated).
    reached: Vec<Vec<usize>>,
}

impl ReplaceCycles {
    fn new(snap: &ScheduleInput, followers: &HashMap<UnitIdx, Vec<UnitIdx>>) -> ReplaceCycles {
        let units = &snap.units;
        let n = units.len();
        let mut leaving: Vec<Option<Vec<UnitIdx>>> = vec![None; n];
        let mut leaving_with = |v: UnitIdx| -> Vec<UnitIdx> {
            leaving[v]
                .get_or_insert_with(|| {
                    let mut seen = BTreeSet::from([v]);
                    let mut stack = vec![v];
                    while let Some(w) = stack.pop() {
                        for &f in followers.get(&w).into_iter().flatten() {
                            if seen.insert(f) {
                                stack.push(f);
                            }
                        }
                    }
                    seen.into_iter().collect()
                })
                .clone()
        };
        let mut edges = vec![Vec::new(); n];
        for (u, unit) in units.iter().enumerate() {
            if unit.replaces.is_empty() || unit.spec.constraints.global {
                continue;
            }
            let mut found = BTreeSet::new();
            for pattern in unit.replaces.patterns() {
                let replaced: Vec<UnitIdx> = match pattern.literal() {
                    Some(name) => snap.unit_index.get(name).copied().into_iter().collect(),
                    None => (0..n).filter(|&v| pattern.matches(&units[v].spec.name)).collect(),
                };
                for v in replaced.into_iter().filter(|&v| v != u && !units[v].spec.constraints.global) {
                    found.extend(leaving_with(v).into_iter().filter(|&w| w != u));
                }
            }
            edges[u] = found.into_iter().collect();
        }
        let cycle = strongly_connected(&edges);
        let reached = (0..n)
            .map(|v| {
                if cycle.iter().all(Option::is_none) {
                    return Vec::new();
                }
                let cycles: BTreeSet<usize> = leaving_with(v).into_iter().filter_map(|w| cycle[w]).collect();
                cycles.into_iter().collect()
            })
            .collect();
        ReplaceCycles { cycle, reached }
    }

    /// Whether `x` displacing `y` (which it replaces) would take away a unit on `x`'s own cycle.
    fn closes_cycle(&self, x: UnitIdx, y: UnitIdx) -> bool {
        self.cycle[x].is_some_and(|c| self.reached[y].binary_search(&c).is_ok())
    }
}

/// Numbers the strongly connected components of two or more nodes of a directed graph (Tarjan's algorithm,
/// iterative); nodes on no cycle get `None`.
fn strongly_connected(edges: &[Vec<UnitIdx>]) -> Vec<Option<usize>> {
    let n = edges.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut component = vec![None; n];
    let (mut next_index, mut next_component) = (0, 0);
    for root in 0..n {
        if index[root] != usize::MAX || edges[root].is_empty() {
            continue;
        }
        // (node, position in its edge list): the frames of the recursion.
        let mut frames = vec![(root, 0)];
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (u, ref mut at)) = frames.last_mut() {
            if let Some(&v) = edges[u].get(*at) {
                *at += 1;
                if index[v] == usize::MAX {
                    index[v] = next_index;
                    low[v] = next_index;
                    next_index += 1;
                    stack.push(v);
                    on_stack[v] = true;
                    frames.push((v, 0));
                } else if on_stack[v] {
                    low[u] = low[u].min(index[v]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(parent, _)) = frames.last() {
                low[parent] = low[parent].min(low[u]);
            }
            if low[u] == index[u] {
                let mut members = Vec::new();
                while let Some(v) = stack.pop() {
                    on_stack[v] = false;
                    members.push(v);
                    if v == u {
                        break;
                    }
                }
                if members.len() > 1 {
                    for v in members {
                        component[v] = Some(next_component);
                    }
                    next_component += 1;
                }
            }
        }
    }
    component
}

/// For every non-global unit, the non-global units it is in a circular `Replaces=` with. Exact-name patterns are
/// looked up directly, so the cost grows with glob patterns only.
fn circular_partners(snap: &ScheduleInput) -> Vec<Vec<UnitIdx>> {
    let units = &snap.units;
    let mut partners = vec![Vec::new(); units.len()];
    for (u, unit) in units.iter().enumerate() {
        if unit.replaces.is_empty() || unit.spec.constraints.global {
            continue;
        }
        let mut found = BTreeSet::new();
        for pattern in unit.replaces.patterns() {
            let candidates: Vec<UnitIdx> = match pattern.literal() {
                Some(name) => snap.unit_index.get(name).copied().into_iter().collect(),
                None => (0..units.len()).filter(|&v| pattern.matches(&units[v].spec.name)).collect(),
            };
            for v in candidates {
                let other = &units[v];
                if v != u && !other.spec.constraints.global && other.replaces.matches(&unit.spec.name) {
                    found.insert(v);
                }
            }
        }
        partners[u] = found.into_iter().collect();
    }
    partners
}

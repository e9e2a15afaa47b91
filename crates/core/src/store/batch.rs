//! Grouping many writes into etcd transactions: etcd refuses a transaction that names a key twice, and one with
//! more than `--max-txn-ops` operations, so every batched writer splits its work the same way.

use std::collections::HashSet;

/// etcd's default `--max-txn-ops`: a transaction may hold at most this many compares, and this many operations in
/// each branch (etcd 3.4 `checkTxnReqsPermission`/`checkTxnRequest`; the harness's etcd keeps the default).
pub const MAX_TXN_OPS: usize = 128;

/// Transactions of one batched write in flight at once: their round trips overlap, and etcd commits concurrent
/// proposals together (one WAL fsync for several). Only groups of one [`waves`] wave go together.
pub const TXNS_IN_FLIGHT: usize = 4;

/// What one item adds to a transaction: its compares and operations, and a key it shares with other items (a unit
/// body: many instances of one template have the same) that is written once per transaction, costing one more
/// operation only for the first item that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnCost<'a> {
    pub compares: usize,
    pub ops: usize,
    pub shared: Option<&'a str>,
}

/// `items` split into consecutive groups for one transaction each, in order: every item's compares and operations
/// stay in one group (a unit is never half written), a group holds each unit (`unit_of`) at most once, and its
/// compares and operations (shared keys counted once) stay within `limit`. An item that alone exceeds `limit` gets
/// a group of its own (etcd then refuses it and the caller reports that unit).
pub fn cost_batches<'a, T>(
    items: &'a [T],
    limit: usize,
    unit_of: impl Fn(&T) -> &str,
    cost_of: impl Fn(&'a T) -> TxnCost<'a>,
) -> Vec<&'a [T]> {
    let mut batches = Vec::new();
    let mut start = 0;
    let (mut compares, mut ops) = (0, 0);
    let mut units: HashSet<&str> = HashSet::new();
    let mut shared: HashSet<&str> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let cost = cost_of(item);
        let new_shared = cost.shared.is_some_and(|k| !shared.contains(k));
        let item_ops = cost.ops + usize::from(new_shared);
        let full = compares + cost.compares > limit || ops + item_ops > limit;
        if i > start && (full || units.contains(unit_of(item))) {
            batches.push(&items[start..i]);
            start = i;
            (compares, ops) = (0, 0);
            units.clear();
            shared.clear();
        }
        units.insert(unit_of(item));
        compares += cost.compares;
        ops += cost.ops;
        if let Some(key) = cost.shared {
            if shared.insert(key) {
                ops += 1;
            }
        }
    }
    if start < items.len() {
        batches.push(&items[start..]);
    }
    batches
}

/// `items` split into consecutive groups for one transaction each: in order, at most `limit` items per group, and a
/// new group whenever a unit (`unit_of`) comes back — a move is an unschedule then a schedule of the same key, a
/// state is published then removed. `limit` 0 is taken as 1.
pub fn txn_batches<T>(items: &[T], limit: usize, unit_of: impl Fn(&T) -> &str) -> Vec<&[T]> {
    cost_batches(items, limit.max(1), unit_of, |_| TxnCost { compares: 0, ops: 1, shared: None })
}

/// `groups` (consecutive, in request order) in waves to write one after another: each wave a run of consecutive
/// groups that share no unit (`unit_of`), so the groups of a wave may commit in any order while a unit named twice
/// in a request is still written in request order (the second of two creations finds the first, as its single
/// request would).
pub fn waves<'a, T>(groups: Vec<&'a [T]>, unit_of: impl Fn(&T) -> &str) -> Vec<Vec<&'a [T]>> {
    let mut waves: Vec<Vec<&'a [T]>> = Vec::new();
    let mut units: HashSet<&str> = HashSet::new();
    for group in groups {
        let fresh = group.iter().all(|item| !units.contains(unit_of(item)));
        if !fresh || waves.is_empty() {
            waves.push(Vec::new());
            units.clear();
        }
        units.extend(group.iter().map(&unit_of));
        waves.last_mut().expect("a wave was pushed").push(group);
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_named_again_starts_a_new_wave() {
        let items = ["a", "b", "c", "a", "d", "e", "d"];
        let groups = vec![&items[0..2], &items[2..3], &items[3..5], &items[5..6], &items[6..7]];
        let waves = waves(groups, |s| s);
        let shape: Vec<Vec<Vec<&str>>> = waves.iter().map(|w| w.iter().map(|g| g.to_vec()).collect()).collect();
        assert_eq!(shape, [vec![vec!["a", "b"], vec!["c"]], vec![vec!["a", "d"], vec!["e"]], vec![vec!["d"]]]);
        assert!(super::waves(Vec::<&[&str]>::new(), |s| s).is_empty());
    }

    fn sizes(items: &[&str], limit: usize) -> Vec<usize> {
        txn_batches(items, limit, |s| s).iter().map(|b| b.len()).collect()
    }

    #[test]
    fn batches_keep_order_respect_the_limit_and_split_at_a_repeated_unit() {
        assert!(sizes(&[], 64).is_empty());
        let names: Vec<String> = (0..150).map(|i| format!("u{i}.service")).collect();
        let many: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(sizes(&many, 64), [64, 64, 22]);
        assert_eq!(sizes(&many, 128), [128, 22]);
        let moved = ["a", "b", "b", "c", "a", "c"];
        assert_eq!(sizes(&moved, 64), [2, 3, 1]);
        let flat: Vec<&&str> = txn_batches(&moved, 64, |s| s).into_iter().flatten().collect();
        assert_eq!(flat, moved.iter().collect::<Vec<_>>());
        assert_eq!(sizes(&["a", "b"], 0), [1, 1]);
    }

    /// (unit, compares, ops, shared key) items split by [`cost_batches`]: group sizes.
    fn cost_sizes(items: &[(&str, usize, usize, Option<&str>)], limit: usize) -> Vec<usize> {
        cost_batches(items, limit, |i| i.0, |i| TxnCost { compares: i.1, ops: i.2, shared: i.3 })
            .iter()
            .map(|b| b.len())
            .collect()
    }

    #[test]
    fn cost_batches_count_a_shared_body_once_per_transaction() {
        assert!(cost_sizes(&[], MAX_TXN_OPS).is_empty());
        // 1,000 instances of one template: object + desired per unit, the one body once per transaction:
        // 2 × 63 + 1 = 127 operations, 63 compares.
        let names: Vec<String> = (0..1000).map(|i| format!("t@{i}.service")).collect();
        let instances: Vec<_> = names.iter().map(|n| (n.as_str(), 1, 2, Some("body"))).collect();
        let sizes = cost_sizes(&instances, MAX_TXN_OPS);
        assert_eq!(sizes[0], 63, "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 1000);
        assert!(sizes.len() == 16, "{sizes:?}");
        // Distinct bodies: 3 operations per unit → 42 per transaction.
        let distinct: Vec<_> = names.iter().map(|n| (n.as_str(), 1, 2, Some(n.as_str()))).collect();
        assert_eq!(cost_sizes(&distinct, MAX_TXN_OPS)[0], 42);
        // Compares bound the group too (a destroy: 1 compare, 1 operation per unit).
        let plain: Vec<_> = names.iter().map(|n| (n.as_str(), 1, 1, None)).collect();
        assert_eq!(cost_sizes(&plain, MAX_TXN_OPS)[..2], [128, 128]);
    }

    #[test]
    fn cost_batches_never_split_a_unit_and_never_repeat_one_in_a_transaction() {
        let items = [("a", 1, 3, None), ("b", 1, 3, None), ("a", 1, 3, None), ("c", 1, 3, None)];
        assert_eq!(cost_sizes(&items, 6), [2, 2]);
        assert_eq!(cost_sizes(&items, 128), [2, 2]);
        // An item bigger than the limit is alone (and whole), never split or dropped.
        let big = [("a", 1, 1, None), ("b", 1, 9, None), ("c", 1, 1, None)];
        assert_eq!(cost_sizes(&big, 4), [1, 1, 1]);
        let flat: Vec<_> = cost_batches(&big, 4, |i| i.0, |i| TxnCost { compares: i.1, ops: i.2, shared: i.3 })
            .into_iter()
            .flatten()
            .map(|i| i.0)
            .collect();
        assert_eq!(flat, ["a", "b", "c"]);
    }
}

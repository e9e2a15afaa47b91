//! Grouping many writes into etcd transactions: etcd refuses a transaction that names a key twice, and one with
//! more than `--max-txn-ops` operations, so every batched writer splits its work the same way.

use std::collections::HashSet;

/// `items` split into consecutive groups for one transaction each: in order, at most `limit` items per group, and a
/// new group whenever a unit (`unit_of`) comes back — a move is an unschedule then a schedule of the same key, a
/// state is published then removed. `limit` 0 is taken as 1.
pub fn txn_batches<T>(items: &[T], limit: usize, unit_of: impl Fn(&T) -> &str) -> Vec<&[T]> {
    let limit = limit.max(1);
    let mut batches = Vec::new();
    let mut start = 0;
    let mut units: HashSet<&str> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let unit = unit_of(item);
        if i - start == limit || !units.insert(unit) {
            batches.push(&items[start..i]);
            start = i;
            units.clear();
            units.insert(unit);
        }
    }
    if start < items.len() {
        batches.push(&items[start..]);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! Requests for many units at once: the API answers each request in a few milliseconds, so a command over
//! hundreds of units is bound by round trips unless they overlap. Results keep the order of the arguments, so
//! output and error reporting stay deterministic.
//!
//! Past a few dozen units, round trips are cut rather than overlapped: units are looked up in one listing
//! ([`look_up`]) and written in `POST /units-batch` requests ([`write_units`]), with one request per unit only
//! against a server without the batch route (the original fleet).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::client::{Client, ClientError};
use fleet_core::schema::{Unit, UnitBatch};

/// From this many names on, [`look_up`] lists every unit once instead of asking for each (a listing costs about as
/// much as a few dozen single requests on a large cluster).
pub const LIST_LOOKUPS_FROM: usize = 32;

/// At most this many requests in flight; enough to hide round trips without flooding the API server.
const WORKERS: usize = 16;

/// `f` over every item, on up to [`WORKERS`] threads; results in item order.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let chunks: Vec<Vec<(usize, R)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS.min(items.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        done.push((i, f(item)));
                    }
                    done
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    for (i, r) in chunks.into_iter().flatten() {
        results[i] = Some(r);
    }
    results.into_iter().map(|r| r.expect("every index is claimed by exactly one worker")).collect()
}

/// Each name's unit (`None`: it does not exist), in name order: one `units()` listing for
/// [`LIST_LOOKUPS_FROM`] names or more (its error then stands for every name), else one request per name.
pub fn look_up(client: &dyn Client, names: &[String]) -> Vec<Result<Option<Unit>, ClientError>> {
    if names.len() < LIST_LOOKUPS_FROM {
        return map(names, |name| client.unit(name));
    }
    match client.units() {
        Ok(all) => {
            let by_name: HashMap<&str, &Unit> = all.iter().map(|u| (u.name.as_str(), u)).collect();
            names.iter().map(|name| Ok(by_name.get(name.as_str()).map(|u| (*u).clone()))).collect()
        }
        Err(e) => names.iter().map(|_| Err(e.clone())).collect(),
    }
}

/// Writes `batch` (creations, replacements and desired states in `put`, then `destroy`), one result per write in
/// that order: in batch requests when there is more than one write and the server has the batch route, else
/// one request per unit (in parallel) — `create_unit` for a unit with options, `set_unit_target_state` for one
/// without, `destroy_unit`.
pub fn write_units(client: &dyn Client, batch: &UnitBatch) -> Vec<Result<(), ClientError>> {
    if batch.put.len() + batch.destroy.len() > 1 {
        if let Some(results) = client.unit_batch(batch) {
            return results;
        }
    }
    let mut results = map(&batch.put, |unit| {
        if unit.options.is_empty() {
            client.set_unit_target_state(&unit.name, &unit.desired_state)
        } else {
            client.create_unit(unit)
        }
    });
    results.extend(map(&batch.destroy, |name| client.destroy_unit(name)));
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_item_order() {
        let items: Vec<u32> = (0..200).collect();
        let out = map(&items, |i| i * 2);
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(map(&[7u32], |i| i + 1), vec![8]);
        assert!(map(&Vec::<u32>::new(), |i| *i).is_empty());
    }
}

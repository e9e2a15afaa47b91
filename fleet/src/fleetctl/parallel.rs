//! Requests for many units at once: the API answers each request in a few milliseconds, so a command over
//! hundreds of units is bound by round trips unless they overlap. Results keep the order of the arguments, so
//! output and error reporting stay deterministic.

use std::sync::atomic::{AtomicUsize, Ordering};

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

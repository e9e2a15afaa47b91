//! Polling a condition as fast as a given interval allows, measuring from a common start instant, and keeping
//! the progress seen at each poll (for first/half/all timings).

use std::future::Future;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::stats::secs;

/// One observation: how many of the awaited things are there (`done` when all are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub count: usize,
    pub done: bool,
}

/// The outcome of a poll loop; times are seconds since the common start.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Polled {
    /// End of the first poll that saw everything done (None: timed out).
    pub done_s: Option<f64>,
    /// End of the first poll that saw at least one / half of `target`.
    pub first_s: Option<f64>,
    pub half_s: Option<f64>,
    pub polls: usize,
    /// Mean time between the starts of successive polls (the granularity of `done_s`).
    pub poll_interval_ms: f64,
    /// The count of the last poll.
    pub last_count: usize,
    /// The last error a poll reported, if any.
    pub last_error: Option<String>,
}

/// Calls `observe` every `every` (or back to back when it is slower) until it reports done or `timeout` has
/// passed since `t0`. `target` is the count that "half" refers to.
pub async fn until<F, Fut>(t0: Instant, every: Duration, timeout: Duration, target: usize, mut observe: F) -> Polled
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Progress, String>>,
{
    let mut p = Polled::default();
    let first_start = Instant::now();
    let mut last_start = first_start;
    loop {
        let start = Instant::now();
        last_start = last_start.max(start);
        let seen = observe().await;
        let at = secs(t0.elapsed());
        p.polls += 1;
        match seen {
            Ok(pr) => {
                p.last_count = pr.count;
                if pr.count > 0 && p.first_s.is_none() {
                    p.first_s = Some(at);
                }
                if pr.count * 2 >= target && target > 0 && p.half_s.is_none() {
                    p.half_s = Some(at);
                }
                if pr.done {
                    p.done_s = Some(at);
                    break;
                }
            }
            Err(e) => p.last_error = Some(e),
        }
        if t0.elapsed() >= timeout {
            break;
        }
        tokio::time::sleep(every.saturating_sub(start.elapsed())).await;
    }
    if p.polls > 1 {
        let span = last_start.duration_since(first_start).as_secs_f64();
        p.poll_interval_ms = (span * 1e3 / (p.polls - 1) as f64 * 10.0).round() / 10.0;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_up_to_done() {
        let t0 = Instant::now();
        let mut n = 0;
        let p = until(t0, Duration::from_millis(5), Duration::from_secs(5), 4, || {
            n += 1;
            let c = n;
            async move { Ok(Progress { count: c, done: c == 4 }) }
        })
        .await;
        assert_eq!((p.polls, p.last_count), (4, 4));
        assert!(p.done_s.is_some() && p.first_s.is_some() && p.half_s.is_some());
        assert!(p.poll_interval_ms >= 4.0, "{p:?}");
    }

    #[tokio::test]
    async fn times_out_with_the_last_error() {
        let p = until(Instant::now(), Duration::from_millis(5), Duration::from_millis(30), 1, || async {
            Err::<Progress, _>("nope".to_string())
        })
        .await;
        assert_eq!((p.done_s, p.last_error.as_deref()), (None, Some("nope")));
    }
}

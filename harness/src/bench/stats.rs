//! Latency samples: median, p90, min, max (nearest-rank), in milliseconds.

use std::time::Duration;

use serde::Serialize;

/// A summary of repeated timings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub runs: usize,
    pub median_ms: f64,
    pub p90_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    /// Summarizes `samples` (none: all zero).
    pub fn of(samples: &[Duration]) -> Self {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        Latency {
            runs: ms.len(),
            median_ms: percentile(&ms, 50.0),
            p90_ms: percentile(&ms, 90.0),
            min_ms: ms.first().copied().unwrap_or_default(),
            max_ms: ms.last().copied().unwrap_or_default(),
        }
    }
}

/// Nearest-rank percentile of sorted values (0 when empty).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Seconds with millisecond precision, for reports.
pub fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e3).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 10.0);
        assert_eq!(percentile(&v, 90.0), 18.0);
        assert_eq!(percentile(&[], 90.0), 0.0);
        assert_eq!(percentile(&[7.0], 90.0), 7.0);
    }

    #[test]
    fn latency_of_samples() {
        let s: Vec<Duration> = [30, 10, 20].into_iter().map(Duration::from_millis).collect();
        let l = Latency::of(&s);
        assert_eq!((l.runs, l.median_ms, l.p90_ms, l.min_ms, l.max_ms), (3, 20.0, 30.0, 10.0, 30.0));
    }
}

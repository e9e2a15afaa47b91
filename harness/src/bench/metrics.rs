//! etcd's Prometheus metrics, fetched from the host over the cluster network (`GET http://<etcd>:2379/metrics`,
//! plain HTTP/1.0, no client dependency) and compared between two samples.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One scrape: every sample line `name{labels} value`, keyed by the text before the value.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub at: Instant,
    pub series: BTreeMap<String, f64>,
}

/// Fetches `http://<addr>/metrics`.
pub async fn scrape(addr: &str) -> Result<Scrape, String> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
        let req = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), fetch).await.map_err(|_| "metrics timed out")??;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).ok_or("no HTTP body")?;
    Ok(Scrape { at: Instant::now(), series: parse(body) })
}

/// Parses the Prometheus text format (comments skipped, unparsable values ignored).
pub fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| Some((k.trim().to_string(), v.trim().parse::<f64>().ok()?)))
        .collect()
}

impl Scrape {
    /// Sum of every series named `name` whose labels contain each of `labels` (e.g. `grpc_method="Range"`).
    pub fn sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.series
            .iter()
            .filter(|(k, _)| k.split('{').next() == Some(name) && labels.iter().all(|l| k.contains(l)))
            .map(|(_, v)| v)
            .sum()
    }
}

/// etcd activity per second between two scrapes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EtcdRates {
    pub window_s: f64,
    /// `etcd_mvcc_put_total` + `delete_total` + `txn_total` per second (the "writes").
    pub writes_per_s: f64,
    /// The same, in total over the window.
    pub writes: f64,
    /// Mean WAL fsync time over the window (ms; 0 without fsyncs).
    pub wal_fsync_ms: f64,
    pub wal_fsyncs: f64,
    pub puts_per_s: f64,
    pub deletes_per_s: f64,
    pub txns_per_s: f64,
    /// Revision increase per second: key changes that actually happened.
    pub revisions_per_s: f64,
    /// Raft proposals committed per second (every write, lease grants and revokes included).
    pub proposals_per_s: f64,
    /// `LeaseKeepAlive` stream messages received per second.
    pub lease_keepalives_per_s: f64,
    /// `etcd_debugging_lease_renewed_total` per second.
    pub lease_renewals_per_s: f64,
    pub lease_grants_per_s: f64,
    /// `etcd_mvcc_range_total` per second (reads).
    pub ranges_per_s: f64,
    /// Keys in the store at the end of the window.
    pub keys: f64,
    /// Watch streams open at the end of the window.
    pub watch_streams: f64,
}

/// Seconds from scrape `a` to scrape `b` (at least 1 ms).
pub fn window_secs(a: &Scrape, b: &Scrape) -> f64 {
    b.at.duration_since(a.at).as_secs_f64().max(1e-3)
}

/// Increase of [`Scrape::sum`]`(name, labels)` from scrape `a` to scrape `b`.
pub fn delta(a: &Scrape, b: &Scrape, name: &str, labels: &[&str]) -> f64 {
    b.sum(name, labels) - a.sum(name, labels)
}

/// [`delta`] per second of the window between the scrapes.
pub fn per_s(a: &Scrape, b: &Scrape, name: &str, labels: &[&str]) -> f64 {
    delta(a, b, name, labels) / window_secs(a, b)
}

/// Rates of the second scrape over the first.
pub fn rates(a: &Scrape, b: &Scrape) -> EtcdRates {
    let secs = window_secs(a, b);
    let per_s = |name: &str, labels: &[&str]| per_s(a, b, name, labels);
    let r = |x: f64| (x * 100.0).round() / 100.0;
    let (puts, deletes, txns) =
        (per_s("etcd_mvcc_put_total", &[]), per_s("etcd_mvcc_delete_total", &[]), per_s("etcd_mvcc_txn_total", &[]));
    let fsyncs = delta(a, b, "etcd_disk_wal_fsync_duration_seconds_count", &[]);
    let fsync_s = delta(a, b, "etcd_disk_wal_fsync_duration_seconds_sum", &[]);
    EtcdRates {
        window_s: r(secs),
        writes_per_s: r(puts + deletes + txns),
        writes: r((puts + deletes + txns) * secs),
        wal_fsync_ms: if fsyncs > 0.0 { r(fsync_s * 1e3 / fsyncs) } else { 0.0 },
        wal_fsyncs: fsyncs,
        puts_per_s: r(puts),
        deletes_per_s: r(deletes),
        txns_per_s: r(txns),
        revisions_per_s: r(per_s("etcd_debugging_mvcc_current_revision", &[])),
        proposals_per_s: r(per_s("etcd_server_proposals_committed_total", &[])),
        lease_keepalives_per_s: r(per_s("grpc_server_msg_received_total", &["grpc_method=\"LeaseKeepAlive\""])),
        lease_renewals_per_s: r(per_s("etcd_debugging_lease_renewed_total", &[])),
        lease_grants_per_s: r(per_s("etcd_debugging_lease_granted_total", &[])),
        ranges_per_s: r(per_s("etcd_mvcc_range_total", &[])),
        keys: b.sum("etcd_debugging_mvcc_keys_total", &[]),
        watch_streams: b.sum("etcd_debugging_mvcc_watch_stream_total", &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "# HELP x\netcd_mvcc_put_total 10\netcd_mvcc_txn_total 4\n\
        grpc_server_msg_received_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"x\"} 100\n\
        grpc_server_msg_received_total{grpc_method=\"Range\",grpc_service=\"x\"} 7\n";
    const B: &str = "etcd_mvcc_put_total 30\netcd_mvcc_txn_total 4\n\
        grpc_server_msg_received_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"x\"} 120\n\
        grpc_server_msg_received_total{grpc_method=\"Range\",grpc_service=\"x\"} 9\n";

    #[test]
    fn sums_filter_by_name_and_labels() {
        let now = Instant::now();
        let a = Scrape { at: now, series: parse(A) };
        assert_eq!(a.sum("etcd_mvcc_put_total", &[]), 10.0);
        assert_eq!(a.sum("grpc_server_msg_received_total", &[]), 107.0);
        assert_eq!(a.sum("grpc_server_msg_received_total", &["grpc_method=\"Range\""]), 7.0);
        let b = Scrape { at: now + Duration::from_secs(10), series: parse(B) };
        let r = rates(&a, &b);
        assert_eq!((r.writes_per_s, r.puts_per_s, r.lease_keepalives_per_s), (2.0, 2.0, 2.0));
    }
}

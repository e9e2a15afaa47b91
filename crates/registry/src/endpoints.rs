//! Endpoint health for a registry with several etcd endpoints: keeps dead members out of the client's balancer.
//!
//! etcd-client balances requests over every endpoint it was given (tonic's balance channel). A member that was
//! connected once and then died stays in the balancer: requests routed to it fail at once (`dns error`, `tcp
//! connect error`) instead of going to a live member, so a leased write, a lease keep-alive or a watch re-open
//! fails at random for as long as the member is down — long enough to lose a presence lease of a few seconds.
//!
//! [`spawn`] starts one task that probes every endpoint on its own single-endpoint connection (etcd's `Status` RPC with
//! the request timeout: answered, and the member knows a leader) every [`PROBE_INTERVAL`], and removes a member that
//! fails from the registry's clients (requests and watch) and adds it back once it answers again (additions first, so
//! the balancer is never empty in between). [`decide`] is the pure rule: never remove the last member in the balancer
//! (with every member failing the balancer is left as it is, so requests still reach whichever comes back first).

use std::collections::BTreeSet;
use std::time::Duration;

/// How often every endpoint is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// What to change in the balancer after one round of probes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub remove: Vec<String>,
    pub add: Vec<String>,
}

/// The changes that make the balancer hold exactly the endpoints that answered (`healthy`), given what it holds
/// now (`in_balancer`): failing endpoints leave, answering ones (back) in. When no endpoint answered nothing is
/// removed, so the balancer never ends up empty.
pub fn decide(all: &[String], in_balancer: &BTreeSet<String>, healthy: &BTreeSet<String>) -> Changes {
    let mut changes = Changes::default();
    for endpoint in all {
        match (in_balancer.contains(endpoint), healthy.contains(endpoint)) {
            (true, false) if !healthy.is_empty() => changes.remove.push(endpoint.clone()),
            (false, true) => changes.add.push(endpoint.clone()),
            _ => {}
        }
    }
    changes
}

/// The running health task; dropping it stops the task (and its hold on the clients' connections).
#[derive(Debug)]
pub struct Health(tokio::task::JoinHandle<()>);

impl Drop for Health {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the health task for `clients` over `endpoints` (none for a single endpoint: nothing to balance).
/// `probe_options` are the clients' own connect options (TLS, credentials, timeouts).
pub fn spawn(
    clients: Vec<etcd_client::Client>,
    endpoints: Vec<String>,
    probe_options: etcd_client::ConnectOptions,
) -> Option<Health> {
    (endpoints.len() >= 2).then(|| Health(tokio::spawn(run(clients, endpoints, probe_options))))
}

async fn run(clients: Vec<etcd_client::Client>, endpoints: Vec<String>, options: etcd_client::ConnectOptions) {
    let mut probes: Vec<Option<etcd_client::Client>> = endpoints.iter().map(|_| None).collect();
    let mut in_balancer: BTreeSet<String> = endpoints.iter().cloned().collect();
    let mut ticker = tokio::time::interval(PROBE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let rounds =
            endpoints.iter().zip(probes.iter_mut()).map(|(endpoint, probe)| probe_once(endpoint, probe, &options));
        let results = futures::future::join_all(rounds).await;
        let mut healthy = BTreeSet::new();
        for (endpoint, result) in endpoints.iter().zip(results) {
            match result {
                Ok(()) => {
                    healthy.insert(endpoint.clone());
                }
                Err(why) if in_balancer.contains(endpoint) => {
                    tracing::debug!(endpoint = %endpoint, error = %why, "etcd endpoint probe failed");
                }
                Err(_) => {}
            }
        }
        let changes = decide(&endpoints, &in_balancer, &healthy);
        for endpoint in changes.add {
            let added = futures::future::join_all(clients.iter().map(|c| c.add_endpoint(&endpoint))).await;
            match added.into_iter().find_map(Result::err) {
                None => {
                    tracing::info!(endpoint = %endpoint, "etcd member answers again; back in use");
                    in_balancer.insert(endpoint);
                }
                Some(e) => tracing::warn!(endpoint = %endpoint, error = %e, "cannot add etcd endpoint"),
            }
        }
        for endpoint in changes.remove {
            let removed = futures::future::join_all(clients.iter().map(|c| c.remove_endpoint(&endpoint))).await;
            match removed.into_iter().find_map(Result::err) {
                None => {
                    tracing::warn!(endpoint = %endpoint, "etcd member unreachable; requests go to the other members");
                    in_balancer.remove(&endpoint);
                }
                Some(e) => tracing::warn!(endpoint = %endpoint, error = %e, "cannot remove etcd endpoint"),
            }
        }
    }
}

/// One `Status` request to `endpoint` on its own connection (made on first use, kept while it works).
async fn probe_once(
    endpoint: &str,
    probe: &mut Option<etcd_client::Client>,
    options: &etcd_client::ConnectOptions,
) -> Result<(), String> {
    let client = match probe {
        Some(c) => c,
        None => {
            let c = etcd_client::Client::connect([endpoint], Some(options.clone())).await.map_err(|e| e.to_string())?;
            probe.insert(c)
        }
    };
    match client.status().await {
        Ok(status) if status.leader() != 0 => Ok(()),
        Ok(_) => Err("member knows no leader".to_string()),
        Err(e) => {
            *probe = None;
            Err(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn all() -> Vec<String> {
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_failing_member_leaves_and_comes_back_when_it_answers() {
        let out = decide(&all(), &set(&["a", "b", "c"]), &set(&["a", "c"]));
        assert_eq!(out, Changes { remove: vec!["b".into()], add: vec![] });
        let back = decide(&all(), &set(&["a", "c"]), &set(&["a", "b", "c"]));
        assert_eq!(back, Changes { remove: vec![], add: vec!["b".into()] });
    }

    #[test]
    fn nothing_changes_while_every_member_answers() {
        assert_eq!(decide(&all(), &set(&["a", "b", "c"]), &set(&["a", "b", "c"])), Changes::default());
    }

    #[test]
    fn the_balancer_is_never_emptied_when_every_member_fails() {
        assert_eq!(decide(&all(), &set(&["a", "b"]), &set(&[])), Changes::default());
        // The first member to answer again comes in while the others stay until a probe shows them failing.
        let out = decide(&all(), &set(&["a", "b"]), &set(&["c"]));
        assert_eq!(out, Changes { remove: vec!["a".into(), "b".into()], add: vec!["c".into()] });
    }
}

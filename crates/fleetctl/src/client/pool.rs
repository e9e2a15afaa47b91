//! Reused HTTP/1.1 connections to the API server. A command over many units sends hundreds of requests; opening
//! a connection for each costs a round trip (and through `--tunnel`, an SSH channel and a remote `fleetctl
//! fd-forward` process). The pool also bounds how many requests are in flight, which bounds how many connections
//! exist at once: a new connection is opened only when every open one is busy. Through a tunnel that bound keeps
//! the session channels under sshd's `MaxSessions` (10 by default), which refuses channels beyond it.

use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::{Semaphore, SemaphorePermit};

/// The sending half of one HTTP/1.1 connection; its connection task runs on the client's runtime.
pub(super) type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Idle connections plus the bound on requests in flight.
pub(super) struct ConnectionPool {
    idle: Mutex<Vec<Sender>>,
    in_flight: Semaphore,
}

impl ConnectionPool {
    /// A pool allowing at most `max_in_flight` concurrent requests (hence connections).
    pub(super) fn new(max_in_flight: usize) -> Self {
        ConnectionPool { idle: Mutex::new(Vec::new()), in_flight: Semaphore::new(max_in_flight.max(1)) }
    }

    /// Waits for a request slot; hold it until the request's answer is read.
    pub(super) async fn slot(&self) -> SemaphorePermit<'_> {
        match self.in_flight.acquire().await {
            Ok(permit) => permit,
            Err(_) => unreachable!("the pool's semaphore is never closed"),
        }
    }

    /// An idle connection that still looks usable, if any (closed ones are dropped on the way).
    pub(super) fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    /// Returns a connection whose last answer was read completely, so it can carry the next request.
    pub(super) fn give_back(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(sender);
    }

    /// Number of idle connections (for tests).
    #[cfg(test)]
    pub(super) fn idle_count(&self) -> usize {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }
}

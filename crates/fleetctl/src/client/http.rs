//! [`Client`] over the HTTP API v1 (spec §8, §9.3), as the original's generated Go client speaks it: `?alt=json` on
//! every request, `nextPageToken` followed until absent, 404 on single GETs read as "not found", error bodies turned
//! into `googleapi: ...` errors. HTTP/1.1 over TCP or a Unix socket, connections reused between requests
//! ([`super::pool`]); a per-request timeout (`--request-timeout`, B11 Rec) bounds connect + request + body.
//!
//! A fleetd that is starting, reloading or restarting its components answers every request `503` until they run
//! (spec §8.1). Such an answer is tried again after a short back-off ([`retry_delay`]) for as long as the request
//! timeout allows, so a command run right after fleetd (or its machine) starts waits it out instead of failing;
//! a fleetd still unavailable when the time is up is reported as [`ClientError::Unavailable`]. No other answer
//! and no transport error is retried.
//!
//! Many unit writes go in `POST /units-batch` requests ([`Client::unit_batch`], bodies up to [`MAX_BATCH_BODY`]); a
//! server that answers it 404 or 405 (the original fleet) is remembered as having no batch route, and the caller
//! falls back to one request per unit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

use super::contract::{Client, StateFilter};
use super::endpoint::{ApiEndpoint, Transport};
use super::error::{BuildError, ClientError};
use super::pool::{ConnectionPool, Sender};
use fleet_core::schema::{
    ErrorBody, Machine, MachineMetadataOp, MachinePage, Rollout, RolloutList, RolloutRequest, Unit, UnitBatch,
    UnitBatchReply, UnitHistory, UnitPage, UnitState, UnitStatePage,
};

const API_PREFIX: &str = "/fleet/v1";
const USER_AGENT: &str = concat!("fleetctl/", env!("CARGO_PKG_VERSION"));

/// HTTP API client. Owns a single-threaded runtime; every call blocks on it.
pub struct HttpClient {
    endpoint: ApiEndpoint,
    timeout: Option<Duration>,
    /// `--tunnel`: every connection is a channel of this SSH connection (declared before the runtime it lives on,
    /// so it is dropped first).
    tunnel: Option<crate::ssh::Session>,
    /// Connections kept open between requests, and the bound on requests in flight.
    pool: ConnectionPool,
    /// TLS for an `https://` endpoint (from `--ca-file`, `--cert-file`, `--key-file`).
    tls: Option<tokio_rustls::TlsConnector>,
    runtime: tokio::runtime::Runtime,
    /// The server answered `POST /units-batch` with 404 or 405: it has no batch route.
    no_batch_route: AtomicBool,
}

/// Largest body of one `POST /units-batch` request, well under the server's 4 MiB limit on request bodies; a
/// larger batch is sent as several requests.
pub const MAX_BATCH_BODY: usize = 1 << 20;

/// Most writes in one `POST /units-batch` request. The server writes a request's units in transactions of 63
/// instances, a few at a time, so a request's time grows with its writes: 1 MiB of instances is ~5,000 writes,
/// ~80 transactions, which took over fleetctl's 3 s `--request-timeout` on an etcd with 300 watchers (the scale
/// bench, 300 machines × 10,000 units, when they went one after another). 1,000 writes are ~16 transactions.
pub const MAX_BATCH_WRITES: usize = 1000;

/// Requests in flight at once over a direct connection (fleetctl's parallel commands use 16 workers).
const MAX_IN_FLIGHT: usize = 16;
/// Requests in flight at once through `--tunnel`: each is an SSH session channel, and sshd refuses more than
/// `MaxSessions` (10 by default) per connection.
const MAX_IN_FLIGHT_TUNNELLED: usize = 8;

/// One finished exchange.
struct Response {
    status: u16,
    body: Vec<u8>,
}

/// How long `503` answers are retried when no `--request-timeout` bounds a request (the flag's default).
pub const UNAVAILABLE_RETRY_WITHOUT_TIMEOUT: Duration = Duration::from_secs(3);
/// Back-off before the first retry of a `503`; it doubles with every retry up to [`MAX_RETRY_BACKOFF`].
const FIRST_RETRY_BACKOFF: Duration = Duration::from_millis(50);
const MAX_RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// Whether an answer with `status` is worth sending again, and after how long: only `503` (fleetd's "unavailable
/// until my components run", spec §8.1), and only while the back-off ends before `budget` (the request timeout)
/// is spent, counted from the first attempt (`elapsed` ago). `retries` is how many retries were made already.
pub fn retry_delay(status: u16, retries: u32, elapsed: Duration, budget: Duration) -> Option<Duration> {
    if status != 503 {
        return None;
    }
    let backoff = FIRST_RETRY_BACKOFF.saturating_mul(1u32 << retries.min(16)).min(MAX_RETRY_BACKOFF);
    (elapsed + backoff < budget).then_some(backoff)
}

impl HttpClient {
    pub fn new(endpoint: ApiEndpoint, timeout: Option<Duration>) -> Result<Self, BuildError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BuildError::Runtime(e.to_string()))?;
        Ok(HttpClient {
            endpoint,
            timeout,
            tunnel: None,
            pool: ConnectionPool::new(MAX_IN_FLIGHT),
            tls: None,
            runtime,
            no_batch_route: AtomicBool::new(false),
        })
    }

    /// Speaks TLS to an `https://` endpoint with `files`; any other endpoint ignores them.
    pub fn with_tls(mut self, files: &fleet_tls::ClientFiles) -> Result<Self, BuildError> {
        if matches!(self.endpoint.transport, Transport::Https { .. }) {
            let config = fleet_tls::client_config(files).map_err(|e| BuildError::Tls(e.to_string()))?;
            self.tls = Some(tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)));
        }
        Ok(self)
    }

    /// A client whose connections go through an SSH connection to `tunnel` (`host:port`, spec §9.3): for a unix
    /// endpoint each connection is `fleetctl fd-forward <socket>` run on the tunnel host, for TCP a `direct-tcpip`
    /// channel. The SSH connection (host key prompt included) is made here.
    pub fn tunnelled(
        endpoint: ApiEndpoint,
        timeout: Option<Duration>,
        ssh: &crate::ssh::SshConfig,
        tunnel: &str,
    ) -> Result<Self, BuildError> {
        let mut client = Self::new(endpoint, timeout)?;
        let session = client.runtime.block_on(crate::ssh::Session::connect(ssh, tunnel)).map_err(BuildError::Tunnel)?;
        client.tunnel = Some(session);
        client.pool = ConnectionPool::new(MAX_IN_FLIGHT_TUNNELLED);
        Ok(client)
    }

    fn url(&self, path: &str, query: &[(&str, &str)]) -> (String, String) {
        let mut pairs: Vec<(&str, &str)> = vec![("alt", "json")];
        pairs.extend_from_slice(query);
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        let qs: Vec<String> = pairs.iter().map(|(k, v)| format!("{}={}", escape_query(k), escape_query(v))).collect();
        let path_and_query = format!("{}{}{}?{}", self.endpoint.path_prefix, API_PREFIX, path, qs.join("&"));
        let full = format!("{}{}{}?{}", self.endpoint.base_url, API_PREFIX, path, qs.join("&"));
        (path_and_query, full)
    }

    fn send(
        &self,
        method: http::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Response, ClientError> {
        let (path_and_query, full_url) = self.url(path, query);
        let go_method = fleet_core::go::method_name(&method);
        let transport_err =
            |cause: String| ClientError::Transport { method: go_method.to_string(), url: full_url.clone(), cause };
        let started = Instant::now();
        let budget = self.timeout.unwrap_or(UNAVAILABLE_RETRY_WITHOUT_TIMEOUT);
        let mut retries = 0u32;
        loop {
            tracing::debug!(method = %method, url = %full_url, "request");
            // Every attempt (and the back-off between them) fits in the one request timeout.
            let left = self.timeout.map(|t| t.saturating_sub(started.elapsed()));
            let exchange = self.exchange(method.clone(), &path_and_query, body.clone());
            let result = self.runtime.block_on(async {
                match (self.timeout, left) {
                    (Some(t), Some(left)) => match tokio::time::timeout(left, exchange).await {
                        Ok(r) => r,
                        Err(_) => {
                            Err(format!("context deadline exceeded (Client.Timeout of {} exceeded)", format_secs(t)))
                        }
                    },
                    _ => exchange.await,
                }
            });
            let resp = result.map_err(transport_err)?;
            tracing::debug!(status = resp.status, url = %full_url, "response");
            if resp.status != 503 {
                return Ok(resp);
            }
            match retry_delay(resp.status, retries, started.elapsed(), budget) {
                Some(delay) => {
                    tracing::debug!(url = %full_url, retries, delay = ?delay, "fleet API unavailable (503), retrying");
                    self.runtime.block_on(async { tokio::time::sleep(delay).await });
                    retries += 1;
                }
                None if retries == 0 => return Ok(resp),
                None => {
                    let message = match error_from(resp.status, &resp.body) {
                        ClientError::Api { message, .. } => message,
                        _ => String::from_utf8_lossy(&resp.body).into_owned(),
                    };
                    return Err(ClientError::Unavailable { message, attempts: retries + 1, waited: started.elapsed() });
                }
            }
        }
    }

    fn check(&self, resp: Response) -> Result<Response, ClientError> {
        if (200..300).contains(&resp.status) {
            return Ok(resp);
        }
        Err(error_from(resp.status, &resp.body))
    }

    fn get_json<T: DeserializeOwned>(&self, path: &str, query: &[(&str, &str)]) -> Result<T, ClientError> {
        let resp = self.check(self.send(http::Method::GET, path, query, None)?)?;
        decode(&resp.body, &self.url(path, query).1)
    }

    fn get_optional<T: DeserializeOwned>(&self, path: &str, query: &[(&str, &str)]) -> Result<Option<T>, ClientError> {
        let resp = self.send(http::Method::GET, path, query, None)?;
        if resp.status == 404 {
            return Ok(None);
        }
        let resp = self.check(resp)?;
        decode(&resp.body, &self.url(path, query).1).map(Some)
    }

    fn put_unit(&self, unit: &Unit) -> Result<(), ClientError> {
        let body = serde_json::to_vec(unit).map_err(|e| ClientError::Other(e.to_string()))?;
        let path = format!("/units/{}", escape_path(&unit.name));
        self.check(self.send(http::Method::PUT, &path, &[], Some(body))?).map(|_| ())
    }

    /// One `POST /units-batch` request; `None` when the server has no such route.
    fn send_batch(&self, batch: &UnitBatch) -> Option<Vec<Result<(), ClientError>>> {
        let count = batch.put.len() + batch.destroy.len();
        let failed = |e: ClientError| Some(vec![Err(e); count]);
        let body = match serde_json::to_vec(batch) {
            Ok(body) => body,
            Err(e) => return failed(ClientError::Other(e.to_string())),
        };
        let resp = match self.send(http::Method::POST, "/units-batch", &[], Some(body)) {
            Ok(resp) => resp,
            Err(e) => return failed(e),
        };
        if resp.status == 404 || resp.status == 405 {
            tracing::debug!(status = resp.status, "no batch route on this server; one request per unit");
            self.no_batch_route.store(true, Ordering::Relaxed);
            return None;
        }
        let url = self.url("/units-batch", &[]).1;
        let reply: UnitBatchReply = match self.check(resp).and_then(|r| decode(&r.body, &url)) {
            Ok(reply) => reply,
            Err(e) => return failed(e),
        };
        if reply.results.len() != count {
            let cause = format!("{} results for {count} writes", reply.results.len());
            return failed(ClientError::Decode { url, cause });
        }
        Some(reply.results.into_iter().map(batch_result).collect())
    }

    fn patch_machines(&self, ops: &[MachineMetadataOp]) -> Result<(), ClientError> {
        let body = serde_json::to_vec(ops).map_err(|e| ClientError::Other(e.to_string()))?;
        self.check(self.send(http::Method::PATCH, "/machines", &[], Some(body))?).map(|_| ())
    }

    /// Follow `nextPageToken` through every page of a list.
    fn list_all<P, T>(
        &self,
        path: &str,
        query: &[(&str, &str)],
        split: impl Fn(P) -> (Vec<T>, String),
    ) -> Result<Vec<T>, ClientError>
    where
        P: DeserializeOwned,
    {
        let mut all = Vec::new();
        let mut token = String::new();
        loop {
            let mut q: Vec<(&str, &str)> = query.to_vec();
            if !token.is_empty() {
                q.push(("nextPageToken", token.as_str()));
            }
            let page: P = self.get_json(path, &q)?;
            let (items, next) = split(page);
            all.extend(items);
            if next.is_empty() {
                return Ok(all);
            }
            token = next;
        }
    }
}

impl Client for HttpClient {
    fn machines(&self) -> Result<Vec<Machine>, ClientError> {
        self.list_all("/machines", &[], |p: MachinePage| (p.machines, p.next_page_token))
    }

    fn units(&self) -> Result<Vec<Unit>, ClientError> {
        self.list_all("/units", &[], |p: UnitPage| (p.units, p.next_page_token))
    }

    fn unit(&self, name: &str) -> Result<Option<Unit>, ClientError> {
        self.get_optional(&format!("/units/{}", escape_path(name)), &[])
    }

    fn create_unit(&self, unit: &Unit) -> Result<(), ClientError> {
        let body = Unit {
            name: unit.name.clone(),
            options: unit.options.clone(),
            desired_state: unit.desired_state.clone(),
            reschedule: unit.reschedule,
            no_restart: unit.no_restart,
            ..Default::default()
        };
        self.put_unit(&body)
    }

    fn set_unit_target_state(&self, name: &str, state: &str) -> Result<(), ClientError> {
        self.put_unit(&Unit { name: name.to_string(), desired_state: state.to_string(), ..Default::default() })
    }

    fn unit_batch(&self, batch: &UnitBatch) -> Option<Vec<Result<(), ClientError>>> {
        if self.no_batch_route.load(Ordering::Relaxed) {
            return None;
        }
        let mut results = Vec::with_capacity(batch.put.len() + batch.destroy.len());
        for part in split_batch(batch, MAX_BATCH_BODY, MAX_BATCH_WRITES) {
            results.extend(self.send_batch(&part)?);
        }
        Some(results)
    }

    fn destroy_unit(&self, name: &str) -> Result<(), ClientError> {
        let path = format!("/units/{}", escape_path(name));
        self.check(self.send(http::Method::DELETE, &path, &[], None)?).map(|_| ())
    }

    fn unit_states(&self, filter: &StateFilter) -> Result<Vec<UnitState>, ClientError> {
        let mut q: Vec<(&str, &str)> = Vec::new();
        if let Some(m) = &filter.machine_id {
            q.push(("machineID", m));
        }
        if let Some(u) = &filter.unit_name {
            q.push(("unitName", u));
        }
        self.list_all("/state", &q, |p: UnitStatePage| (p.states, p.next_page_token))
    }

    fn unit_state(&self, name: &str) -> Result<Option<UnitState>, ClientError> {
        self.get_optional(&format!("/state/{}", escape_path(name)), &[])
    }

    fn set_machine_metadata(&self, machine_id: &str, key: &str, value: &str) -> Result<(), ClientError> {
        self.patch_machines(&[MachineMetadataOp::add(machine_id, key, value)])
    }

    fn delete_machine_metadata(&self, machine_id: &str, key: &str) -> Result<(), ClientError> {
        self.patch_machines(&[MachineMetadataOp::remove(machine_id, key)])
    }

    fn cordon_machine(&self, machine_id: &str, cordon: bool) -> Result<(), ClientError> {
        let method = if cordon { http::Method::PUT } else { http::Method::DELETE };
        let path = format!("/machines/{}/cordon", escape_path(machine_id));
        self.check(self.send(method, &path, &[], None)?).map(|_| ())
    }

    fn create_rollout(&self, id: &str, request: &RolloutRequest) -> Result<Rollout, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Other(e.to_string()))?;
        let path = format!("/rollouts/{}", escape_path(id));
        let resp = self.check(self.send(http::Method::PUT, &path, &[], Some(body))?)?;
        decode(&resp.body, &self.url(&path, &[]).1)
    }

    fn rollouts(&self) -> Result<Vec<Rollout>, ClientError> {
        self.get_json::<RolloutList>("/rollouts", &[]).map(|list| list.rollouts)
    }

    fn unit_history(&self, name: &str) -> Result<Option<UnitHistory>, ClientError> {
        self.get_optional(&format!("/units/{}/history", escape_path(name)), &[])
    }

    fn rollout(&self, id: &str) -> Result<Option<Rollout>, ClientError> {
        self.get_optional(&format!("/rollouts/{}", escape_path(id)), &[])
    }

    fn rollout_change(&self, id: &str, revision: i64, limit: Duration) -> Result<Option<Rollout>, ClientError> {
        // The server's wait must end well inside the request timeout, which bounds the whole exchange.
        let wait = self.timeout.map_or(limit, |t| limit.min(t.saturating_sub(t / 3)));
        let (revision, wait_ms) = (revision.to_string(), wait.as_millis().to_string());
        let query = [("waitRevision", revision.as_str()), ("waitMs", wait_ms.as_str())];
        self.get_optional(&format!("/rollouts/{}", escape_path(id)), &query)
    }

    fn control_rollout(&self, id: &str, control: fleet_core::schema::RolloutControl) -> Result<(), ClientError> {
        let body = serde_json::to_vec(&control).map_err(|e| ClientError::Other(e.to_string()))?;
        let path = format!("/rollouts/{}", escape_path(id));
        self.check(self.send(http::Method::PATCH, &path, &[], Some(body))?).map(|_| ())
    }

    fn audit(&self, query: &fleet_core::audit::Query) -> Result<fleet_core::audit::AuditList, ClientError> {
        let (since, limit) = (query.since_ms.to_string(), query.limit.to_string());
        let mut params = vec![("since", since.as_str()), ("limit", limit.as_str())];
        if let Some(unit) = &query.unit {
            params.push(("unit", unit.as_str()));
        }
        self.get_json("/audit", &params)
    }
}

impl HttpClient {
    /// Send one request and read the whole answer, on an idle connection when one is usable, else on a new one.
    /// Errors are the cause text of a transport error.
    async fn exchange(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Response, String> {
        let _slot = self.pool.slot().await;
        let mut request = build_request(method, path_and_query, self.endpoint.transport.host_header(), body)?;
        while let Some(mut sender) = self.pool.take_idle() {
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(request).await {
                Ok(answer) => return self.finish(sender, answer).await,
                // The server closed the idle connection before the request went out: it was not sent, so it is
                // safe to send it on another connection.
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(describe(failed.error())),
                },
            }
        }
        let mut sender = self.connect().await?;
        let answer = sender.send_request(request).await.map_err(|e| describe(&e))?;
        self.finish(sender, answer).await
    }

    /// Reads the answer's body, then returns the connection to the pool.
    async fn finish(&self, sender: Sender, answer: http::Response<Incoming>) -> Result<Response, String> {
        let status = answer.status().as_u16();
        let body = answer.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes().to_vec();
        self.pool.give_back(sender);
        Ok(Response { status, body })
    }

    /// A new connection to the API: directly, or as a channel of the `--tunnel` SSH connection.
    async fn connect(&self) -> Result<Sender, String> {
        match (&self.endpoint.transport, self.tunnel.as_ref()) {
            (Transport::Tcp { host, port, .. }, Some(ssh)) => {
                let stream = ssh
                    .open_tcp(host, *port)
                    .await
                    .map_err(|e| format!("dial tcp {} through the tunnel: {e}", display_addr(host, *port)))?;
                handshake(stream).await
            }
            (Transport::Unix { path }, Some(ssh)) => {
                let stream = ssh
                    .open_command(&format!("fleetctl fd-forward {path}"))
                    .await
                    .map_err(|e| format!("fleetctl fd-forward {path} through the tunnel: {e}"))?;
                handshake(stream).await
            }
            (Transport::Tcp { host, port, .. }, None) => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await.map_err(|e| {
                    format!("dial tcp {}: connect: {}", display_addr(host, *port), fleet_core::go::io_error(&e))
                })?;
                handshake(stream).await
            }
            (Transport::Unix { path }, None) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| format!("dial unix {path}: connect: {}", fleet_core::go::io_error(&e)))?;
                handshake(stream).await
            }
            (Transport::Https { host, port, .. }, Some(ssh)) => {
                let stream = ssh
                    .open_tcp(host, *port)
                    .await
                    .map_err(|e| format!("dial tcp {} through the tunnel: {e}", display_addr(host, *port)))?;
                handshake(self.tls_handshake(host, stream).await?).await
            }
            (Transport::Https { host, port, .. }, None) => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await.map_err(|e| {
                    format!("dial tcp {}: connect: {}", display_addr(host, *port), fleet_core::go::io_error(&e))
                })?;
                handshake(self.tls_handshake(host, stream).await?).await
            }
            (Transport::Unsupported { scheme }, _) => Err(format!("unsupported protocol scheme {scheme:?}")),
        }
    }

    /// The TLS handshake with the server named `host` over `stream`.
    async fn tls_handshake<S>(&self, host: &str, stream: S) -> Result<tokio_rustls::client::TlsStream<S>, String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let Some(connector) = &self.tls else {
            return Err("https:// endpoint without TLS settings".into());
        };
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("TLS: {host:?} is not a valid server name: {e}"))?;
        connector.connect(name, stream).await.map_err(|e| match fleet_tls::find_rustls_error(&e) {
            Some(tls) => fleet_tls::describe_client_failure(tls),
            None => format!("TLS handshake: {e}"),
        })
    }
}

/// HTTP/1.1 over `stream`; the connection task runs on the client's runtime until either side closes.
async fn handshake<S>(stream: S) -> Result<Sender, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "connection closed with error");
        }
    });
    Ok(sender)
}

fn build_request(
    method: http::Method,
    path_and_query: &str,
    host: &str,
    body: Option<Vec<u8>>,
) -> Result<http::Request<Full<Bytes>>, String> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, USER_AGENT);
    if body.is_some() {
        builder = builder.header(http::header::CONTENT_TYPE, "application/json");
    }
    builder.body(Full::new(Bytes::from(body.unwrap_or_default()))).map_err(|e| e.to_string())
}

/// A failed exchange as Go's client words the common case: a connection closed before the answer is `EOF`.
/// A TLS alert the server sent (a refused client certificate arrives after the handshake) is described as such.
fn describe(e: &hyper::Error) -> String {
    if let Some(tls) = fleet_tls::find_rustls_error(e) {
        return fleet_tls::describe_client_failure(tls);
    }
    if e.is_incomplete_message() { "EOF".to_string() } else { e.to_string() }
}

/// One write of a batch as its single request's answer would read: 2xx is done, anything else the API error.
fn batch_result(result: fleet_core::schema::UnitBatchResult) -> Result<(), ClientError> {
    if (200..300).contains(&result.code) {
        return Ok(());
    }
    Err(ClientError::Api { code: result.code, message: result.message })
}

/// `batch` split into batches whose JSON stays under `max_body` bytes (a write larger than that alone), in order.
pub fn split_batch(batch: &UnitBatch, max_body: usize, max_writes: usize) -> Vec<UnitBatch> {
    let mut parts = vec![UnitBatch::default()];
    let mut size = 0;
    let mut room = |len: usize, parts: &mut Vec<UnitBatch>| {
        let last = parts.last().expect("parts start non-empty");
        let writes = last.put.len() + last.destroy.len();
        if (size + len > max_body || writes >= max_writes.max(1)) && writes > 0 {
            parts.push(UnitBatch::default());
            size = 0;
        }
        size += len + 1;
    };
    for unit in &batch.put {
        room(serde_json::to_vec(unit).map_or(0, |v| v.len()), &mut parts);
        parts.last_mut().expect("parts start non-empty").put.push(unit.clone());
    }
    for name in &batch.destroy {
        room(name.len() + 2, &mut parts);
        parts.last_mut().expect("parts start non-empty").destroy.push(name.clone());
    }
    parts
}

fn error_from(status: u16, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => ClientError::Api { code: e.error.code, message: e.error.message },
        Err(_) => ClientError::Status { code: status, body: String::from_utf8_lossy(body).into_owned() },
    }
}

fn decode<T: DeserializeOwned>(body: &[u8], url: &str) -> Result<T, ClientError> {
    serde_json::from_slice(body).map_err(|e| ClientError::Decode { url: url.to_string(), cause: e.to_string() })
}

fn display_addr(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

fn format_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 { format!("{}s", s as u64) } else { format!("{s}s") }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Percent-encode one path segment (unit names may contain `@`, `:` and `\`).
fn escape_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if is_unreserved(b) || matches!(b, b'@' | b':') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Query escaping as Go's `url.QueryEscape` (space becomes `+`).
fn escape_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if is_unreserved(b) {
            out.push(char::from(b));
        } else if b == b' ' {
            out.push('+');
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A canned HTTP server on loopback: answers each connection with the next (status, body) and records the
    /// request line and body.
    fn serve(answers: Vec<(u16, &'static str)>) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for (status, body) in answers {
                let Ok((mut stream, _)) = listener.accept() else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    if h == "\r\n" || h.is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                }
                let mut req_body = vec![0u8; len];
                reader.read_exact(&mut req_body).unwrap();
                seen2.lock().unwrap().push(format!("{} {}", line.trim_end(), String::from_utf8_lossy(&req_body)));
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(resp.as_bytes()).unwrap();
            }
        });
        (format!("http://{addr}"), seen)
    }

    fn client(url: &str) -> HttpClient {
        HttpClient::new(ApiEndpoint::parse(url).unwrap(), Some(Duration::from_secs(5))).unwrap()
    }

    #[test]
    fn lists_follow_next_page_tokens() {
        let (url, seen) = serve(vec![
            (200, r#"{"machines":[{"id":"a"}],"nextPageToken":"ZAACAA=="}"#),
            (200, r#"{"machines":[{"id":"b","primaryIP":"1.2.3.4"}]}"#),
        ]);
        let ms = client(&url).machines().unwrap();
        assert_eq!(ms.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        let seen = seen.lock().unwrap();
        assert!(seen[0].starts_with("GET /fleet/v1/machines?alt=json HTTP/1.1"), "{seen:?}");
        assert!(seen[1].starts_with("GET /fleet/v1/machines?alt=json&nextPageToken=ZAACAA%3D%3D HTTP/1.1"), "{seen:?}");
    }

    /// A keep-alive server: answers every request on every connection with 200 `{}` and counts connections.
    fn serve_keep_alive() -> (String, Arc<Mutex<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(Mutex::new(0usize));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                *counter.lock().unwrap() += 1;
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        loop {
                            let mut h = String::new();
                            reader.read_line(&mut h).unwrap();
                            if h == "\r\n" || h.is_empty() {
                                break;
                            }
                        }
                        let resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
                        if stream.write_all(resp.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}"), accepted)
    }

    #[test]
    fn sequential_requests_reuse_one_connection() {
        let (url, accepted) = serve_keep_alive();
        let c = client(&url);
        for _ in 0..5 {
            assert!(c.unit_states(&StateFilter::default()).unwrap().is_empty());
        }
        assert_eq!(*accepted.lock().unwrap(), 1);
        assert_eq!(c.pool.idle_count(), 1);
    }

    #[test]
    fn parallel_requests_open_at_most_the_in_flight_bound() {
        let (url, accepted) = serve_keep_alive();
        let c = client(&url);
        // More callers than the bound, each with several requests, so an unbounded pool would open more.
        let results: Vec<_> = std::thread::scope(|scope| {
            let callers: Vec<_> = (0..4 * MAX_IN_FLIGHT)
                .map(|_| scope.spawn(|| (0..4).map(|_| c.unit_states(&StateFilter::default())).collect::<Vec<_>>()))
                .collect();
            callers.into_iter().flat_map(|t| t.join().unwrap()).collect()
        });
        assert!(results.iter().all(|r| r.as_ref().is_ok_and(|states| states.is_empty())));
        let opened = *accepted.lock().unwrap();
        assert!((1..=MAX_IN_FLIGHT).contains(&opened), "{opened} connections");
    }

    #[test]
    fn missing_unit_is_none_and_errors_render_like_googleapi() {
        let (url, _) = serve(vec![
            (404, r#"{"error":{"code":404,"message":"unit does not exist"}}"#),
            (409, r#"{"error":{"code":409,"message":"must provide DesiredState to update existing unit"}}"#),
            (502, "oops"),
        ]);
        let c = client(&url);
        assert_eq!(c.unit("no-such.service").unwrap(), None);
        let err = c.set_unit_target_state("a.service", "").unwrap_err();
        assert_eq!(err.to_string(), "googleapi: Error 409: must provide DesiredState to update existing unit");
        let err = c.units().unwrap_err();
        assert_eq!(err.to_string(), "googleapi: got HTTP response code 502 with body: oops");
    }

    #[test]
    fn put_sends_the_originals_json_body() {
        let (url, seen) = serve(vec![(204, "")]);
        client(&url).set_unit_target_state("hello@1.service", "launched").unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen[0],
            "PUT /fleet/v1/units/hello@1.service?alt=json HTTP/1.1 {\"desiredState\":\"launched\",\"name\":\"hello@1.service\"}"
        );
    }

    fn batch_of(put: &[&str], destroy: &[&str]) -> UnitBatch {
        let unit = |n: &&str| Unit { name: n.to_string(), desired_state: "launched".into(), ..Default::default() };
        UnitBatch { put: put.iter().map(unit).collect(), destroy: destroy.iter().map(|n| n.to_string()).collect() }
    }

    #[test]
    fn batch_results_read_as_the_single_requests_answers() {
        let reply = r#"{"results":[{"name":"a.service","code":204},{"name":"b.service","code":404,"message":"unit does not exist"},{"name":"c.service","code":204}]}"#;
        let (url, seen) = serve(vec![(200, reply)]);
        let results = client(&url).unit_batch(&batch_of(&["a.service", "b.service"], &["c.service"])).unwrap();
        assert_eq!(
            results,
            [Ok(()), Err(ClientError::Api { code: 404, message: "unit does not exist".into() }), Ok(())]
        );
        assert!(seen.lock().unwrap()[0].starts_with("POST /fleet/v1/units-batch?alt=json HTTP/1.1 {\"put\":["));
    }

    #[test]
    fn a_server_without_the_batch_route_is_asked_once_then_per_unit() {
        // The original fleet answers an unknown path 404.
        let (url, seen) = serve(vec![(404, r#"{"error":{"code":404,"message":""}}"#)]);
        let c = client(&url);
        assert_eq!(c.unit_batch(&batch_of(&["a.service", "b.service"], &[])), None);
        assert_eq!(c.unit_batch(&batch_of(&["a.service", "b.service"], &[])), None, "remembered, no second request");
        assert_eq!(seen.lock().unwrap().len(), 1);
        let (url, _) = serve(vec![(405, r#"{"error":{"code":405,"message":""}}"#)]);
        assert_eq!(client(&url).unit_batch(&batch_of(&[], &["a.service", "b.service"])), None);
    }

    #[test]
    fn big_batches_are_split_under_the_body_limit_in_order() {
        let names: Vec<String> = (0..100).map(|i| format!("t@{i}.service")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let batch = batch_of(&refs, &refs);
        let parts = split_batch(&batch, 2000, 1000);
        assert!(parts.len() > 2, "{}", parts.len());
        assert!(parts.iter().all(|p| serde_json::to_vec(p).unwrap().len() <= 2000 + 200));
        let puts: Vec<String> = parts.iter().flat_map(|p| p.put.iter().map(|u| u.name.clone())).collect();
        let destroys: Vec<String> = parts.iter().flat_map(|p| p.destroy.clone()).collect();
        assert_eq!((puts, destroys), (names.clone(), names.clone()));
        assert_eq!(split_batch(&batch, 1 << 20, 1000).len(), 1);

        // The writes cap splits a batch that fits the body limit, in order.
        let parts = split_batch(&batch, 1 << 20, 64);
        let sizes: Vec<(usize, usize)> = parts.iter().map(|p| (p.put.len(), p.destroy.len())).collect();
        assert_eq!(sizes, [(64, 0), (36, 28), (0, 64), (0, 8)]);
        let puts: Vec<String> = parts.iter().flat_map(|p| p.put.iter().map(|u| u.name.clone())).collect();
        assert_eq!(puts, names);
    }

    const UNAVAILABLE: &str = r#"{"error":{"code":503,"message":"fleet server unable to communicate with etcd"}}"#;

    #[test]
    fn only_503_is_retried_with_a_growing_back_off_inside_the_budget() {
        let ms = Duration::from_millis;
        let budget = Duration::from_secs(3);
        // (status, retries so far, elapsed) -> delay
        let table: [(u16, u32, Duration, Option<Duration>); 10] = [
            (503, 0, ms(0), Some(ms(50))),
            (503, 1, ms(60), Some(ms(100))),
            (503, 2, ms(200), Some(ms(200))),
            (503, 3, ms(450), Some(ms(400))),
            (503, 4, ms(900), Some(ms(500))),
            (503, 30, ms(2000), Some(ms(500))),
            (503, 5, ms(2500), None), // 2.5 s + 0.5 s reaches the budget
            (500, 0, ms(0), None),
            (404, 0, ms(0), None),
            (502, 0, ms(0), None),
        ];
        for (status, retries, elapsed, want) in table {
            assert_eq!(retry_delay(status, retries, elapsed, budget), want, "{status} after {retries} at {elapsed:?}");
        }
        assert_eq!(retry_delay(503, 0, ms(0), ms(40)), None, "no time for even one back-off");
    }

    #[test]
    fn a_starting_fleetd_is_waited_out_and_the_request_sent_again_unchanged() {
        let (url, seen) = serve(vec![(503, UNAVAILABLE), (503, UNAVAILABLE), (204, "")]);
        client(&url).set_unit_target_state("a.service", "launched").unwrap();
        let seen = seen.lock().unwrap();
        let put =
            "PUT /fleet/v1/units/a.service?alt=json HTTP/1.1 {\"desiredState\":\"launched\",\"name\":\"a.service\"}";
        assert_eq!(*seen, [put, put, put]);
    }

    #[test]
    fn a_fleetd_that_stays_unavailable_fails_within_the_timeout_with_the_servers_message() {
        let (url, seen) = serve(vec![(503, UNAVAILABLE); 64]);
        let c = HttpClient::new(ApiEndpoint::parse(&url).unwrap(), Some(Duration::from_millis(400))).unwrap();
        let err = c.units().unwrap_err();
        let ClientError::Unavailable { attempts, .. } = &err else { panic!("not an Unavailable error: {err:?}") };
        assert!(*attempts > 1, "{err}");
        assert_eq!(*attempts as usize, seen.lock().unwrap().len());
        let text = err.to_string();
        assert!(
            text.starts_with("googleapi: Error 503: fleet server unable to communicate with etcd (the fleet API was still unavailable after "),
            "{text}"
        );
        assert!(text.ends_with("fleetd is starting, reloading or cannot reach etcd)"), "{text}");
    }

    #[test]
    fn other_errors_are_not_retried() {
        for status in [500u16, 502, 404, 409, 400] {
            let (url, seen) = serve(vec![(status, r#"{"error":{"code":1,"message":"no"}}"#), (200, "{}")]);
            assert!(client(&url).units().is_err(), "{status}");
            assert_eq!(seen.lock().unwrap().len(), 1, "{status} was sent again");
        }
    }

    #[test]
    fn state_filters_are_sorted_query_parameters() {
        let (url, seen) = serve(vec![(200, "{}")]);
        let f = StateFilter { machine_id: Some("m1".into()), unit_name: Some("a b.service".into()) };
        assert!(client(&url).unit_states(&f).unwrap().is_empty());
        assert!(seen.lock().unwrap()[0].starts_with("GET /fleet/v1/state?alt=json&machineID=m1&unitName=a+b.service "));
    }

    #[test]
    fn connection_refused_reads_like_the_original() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = client(&format!("http://{addr}")).unit_states(&StateFilter::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Get \"http://{addr}/fleet/v1/state?alt=json\": dial tcp {addr}: connect: connection refused")
        );
    }

    #[test]
    fn unix_socket_errors_name_the_socket_and_domain_sock_url() {
        let err = client("unix:///nonexistent/fleet.sock").machines().unwrap_err();
        assert_eq!(
            err.to_string(),
            "Get \"http://domain-sock/fleet/v1/machines?alt=json\": dial unix /nonexistent/fleet.sock: connect: no such file or directory"
        );
    }

    #[test]
    fn unsupported_scheme_fails_on_request() {
        let err = client("ftp://foo").unit_states(&StateFilter::default()).unwrap_err();
        assert_eq!(err.to_string(), "Get \"ftp://foo/fleet/v1/state?alt=json\": unsupported protocol scheme \"ftp\"");
    }

    #[test]
    fn request_timeout_bounds_a_silent_server() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let hold = std::thread::spawn(move || {
            let conn = listener.accept();
            std::thread::sleep(Duration::from_millis(600));
            drop(conn);
        });
        let c =
            HttpClient::new(ApiEndpoint::parse(&format!("http://{addr}")).unwrap(), Some(Duration::from_millis(200)))
                .unwrap();
        let err = c.machines().unwrap_err();
        assert!(err.to_string().contains("Client.Timeout"), "{err}");
        hold.join().unwrap();
    }

    #[test]
    fn unix_socket_transport_works() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).unwrap();
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            assert!(req.to_ascii_lowercase().contains("host: domain-sock"), "{req}");
            let body = r#"{"units":[{"name":"a.service","desiredState":"inactive"}]}"#;
            write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        });
        let units = client(&format!("unix://{}", path.display())).units().unwrap();
        assert_eq!(units[0].name, "a.service");
    }

    /// Serves `{"units":[]}` (and 204 to writes) over TLS from the real API accept loop on a thread of its own;
    /// returns the `https://` endpoint. `client_ca` requires client certificates signed by it.
    fn serve_tls(cert: (std::path::PathBuf, std::path::PathBuf), client_ca: Option<std::path::PathBuf>) -> String {
        struct Units;
        impl fleetd::api::serve::ApiHandler for Units {
            async fn handle(&self, _request: http::Request<Bytes>) -> http::Response<Bytes> {
                http::Response::new(Bytes::from_static(br#"{"units":[]}"#))
            }
        }
        let files = fleet_tls::ServerFiles { cert: cert.0, key: cert.1, client_ca: client_ca.clone() };
        let settings =
            fleetd::api::serve::ServerTls::new(fleet_tls::server_config(&files).unwrap(), client_ca.is_some());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = fleetd::api::listen::Listener::Tcp(tokio::net::TcpListener::from_std(listener).unwrap());
                let (_handler_tx, handler) = tokio::sync::watch::channel(Some(Arc::new(Units)));
                let (_tls_tx, tls) = tokio::sync::watch::channel(Some(settings));
                let stop = tokio_util::sync::CancellationToken::new();
                fleetd::api::serve::serve_secured(vec![listener], handler, tls, stop).await;
            });
        });
        format!("https://localhost:{port}")
    }

    fn tls_client(endpoint: &str, files: fleet_tls::ClientFiles) -> Result<HttpClient, BuildError> {
        HttpClient::new(ApiEndpoint::parse(endpoint).unwrap(), Some(Duration::from_secs(10)))?.with_tls(&files)
    }

    #[test]
    fn https_endpoint_with_client_certificate_and_clear_tls_errors() {
        use fleet_tls::{ClientFiles, testing::Ca};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ca = Ca::new(d, "fleet-ca");
        let stranger_ca = Ca::new(d, "stranger-ca");
        let endpoint = serve_tls(ca.leaf(d, "fleetd", &[], &["localhost"], false), Some(ca.cert_path.clone()));
        let files = |trust: &Ca, cert: Option<(std::path::PathBuf, std::path::PathBuf)>| {
            let (cert, key) = cert.unzip();
            ClientFiles { ca: Some(trust.cert_path.clone()), cert, key }
        };

        let admin = files(&ca, Some(ca.leaf(d, "admin", &["fleet-admin"], &[], false)));
        assert_eq!(tls_client(&endpoint, admin.clone()).unwrap().units().unwrap(), Vec::<Unit>::new());

        let cases = [
            ("unknown server certificate", files(&stranger_ca, None), "not signed by the CA in --ca-file"),
            ("no client certificate", files(&ca, None), "requires a client certificate"),
            (
                "client certificate of another CA",
                files(&ca, Some(stranger_ca.leaf(d, "intruder", &["fleet-admin"], &[], false))),
                "refused the client certificate",
            ),
            (
                "expired client certificate",
                files(&ca, Some(ca.leaf(d, "old-admin", &["fleet-admin"], &[], true))),
                "refused the client certificate: it has expired",
            ),
        ];
        for (what, files, expected) in cases {
            let err = tls_client(&endpoint, files).unwrap().units().unwrap_err().to_string();
            assert!(err.contains(expected), "{what}: expected {expected:?} in {err:?}");
        }

        let no_ca = tls_client(&endpoint, ClientFiles::default()).err().unwrap().to_string();
        assert!(no_ca.contains("--ca-file or FLEETCTL_CA_FILE"), "{no_ca}");
        let half = ClientFiles { cert: admin.cert.clone(), ..files(&ca, None) };
        let half = tls_client(&endpoint, half).err().unwrap().to_string();
        assert!(half.contains("--cert-file is given but --key-file is not"), "{half}");
    }
}

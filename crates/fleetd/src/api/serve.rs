//! Accept loops for the API listeners. The handler is swappable: until fleetd's components run (and again while a
//! monitor restart or a reload is in progress) every request gets the 503 "unavailable" answer of spec §8.1, and
//! the listeners themselves are never closed by a reload.
//!
//! TCP listeners speak TLS when a [`ServerTls`] is installed (issue 15); it is swappable too, so a SIGHUP re-reads
//! certificates without closing a listener. Every request on a connection that had to present a client
//! certificate is authorised by [`super::access`] before the handler sees it. Unix sockets stay plain.
//!
//! Hostile clients are bounded: request bodies ([`MAX_BODY`]), the time to send request headers
//! ([`HEADER_READ_TIMEOUT`]) and to finish a TLS handshake ([`HANDSHAKE_TIMEOUT`]), and the number of open
//! connections ([`MAX_CONNECTIONS`]; further clients wait in the kernel's backlog).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::access::{self, Access};
use super::listen::Listener;
use super::peer;
use fleet_core::version::VERSION;

/// Request bodies above this size are refused (413); unit files are at most a few KiB.
pub const MAX_BODY: usize = 4 << 20;
/// A client must send its request headers within this time of starting them (or of connecting).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A TLS client must finish its handshake within this time of connecting.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once per listener; the accept loop waits for one to close beyond this.
pub const MAX_CONNECTIONS: usize = 4096;
/// A request body must arrive within this time of its headers.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Of a body over [`MAX_BODY`], up to this much more is read and discarded before answering 413, so that the client
/// (still sending) reads the answer instead of a connection reset.
const OVERSIZE_DRAIN: usize = 32 << 20;

/// A response body sent as it is produced (the cluster page's server-sent events).
pub type StreamedBody = UnsyncBoxBody<Bytes, Infallible>;

/// Serves one fully-read request.
pub trait ApiHandler: Send + Sync + 'static {
    fn handle(&self, request: Request<Bytes>) -> impl Future<Output = Response<Bytes>> + Send;

    /// A streamed answer (server-sent events) for a request that asks for one, decided from its method and URI
    /// once it is authorised and before its body is read; `None` leaves the request to [`ApiHandler::handle`].
    fn stream(&self, _method: &http::Method, _uri: &http::Uri) -> Option<Response<StreamedBody>> {
        None
    }

    /// A request refused before [`ApiHandler::handle`] saw it (its role does not allow it, its body is too large),
    /// with the answer it got: for the audit trail. Its body is not read.
    fn refused(&self, _request: Request<Bytes>, _response: &Response<Bytes>) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// TLS on the TCP listeners: the rustls configuration and whether it demands client certificates (then every
/// request is authorised by the certificate's role).
#[derive(Clone)]
pub struct ServerTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub clients_authenticated: bool,
}

impl ServerTls {
    pub fn new(config: rustls::ServerConfig, clients_authenticated: bool) -> ServerTls {
        ServerTls { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), clients_authenticated }
    }
}

/// The JSON error body of spec §8.3.
pub fn error_response(status: StatusCode, message: &str) -> Response<Bytes> {
    let body = serde_json::json!({ "error": { "code": status.as_u16(), "message": message } });
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Serves `listeners` in plain HTTP until `stop` is cancelled, dispatching to the handler currently in `handler`.
pub async fn serve<H: ApiHandler>(
    listeners: Vec<Listener>,
    handler: watch::Receiver<Option<Arc<H>>>,
    stop: CancellationToken,
) {
    let (_plain, tls) = watch::channel(None);
    serve_secured(listeners, handler, tls, stop).await
}

/// Serves `listeners` until `stop` is cancelled; TCP connections use the TLS settings current in `tls` when they
/// are accepted (none: plain HTTP).
pub async fn serve_secured<H: ApiHandler>(
    listeners: Vec<Listener>,
    handler: watch::Receiver<Option<Arc<H>>>,
    tls: watch::Receiver<Option<ServerTls>>,
    stop: CancellationToken,
) {
    let mut loops = tokio::task::JoinSet::new();
    for listener in listeners {
        let secured = matches!(listener, Listener::Tcp(_)) && tls.borrow().is_some();
        tracing::info!(listener = %listener.describe(), tls = secured, "serving API");
        loops.spawn(accept_loop(listener, handler.clone(), tls.clone(), stop.clone()));
    }
    while loops.join_next().await.is_some() {}
}

async fn accept_loop<H: ApiHandler>(
    listener: Listener,
    handler: watch::Receiver<Option<Arc<H>>>,
    tls: watch::Receiver<Option<ServerTls>>,
    stop: CancellationToken,
) {
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => return,
            permit = open.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = accept(&listener) => accepted,
        };
        let handler = handler.clone();
        let stop = stop.clone();
        match accepted {
            Ok(Connection::Tcp(stream)) => {
                let _ = stream.set_nodelay(true);
                match tls.borrow().clone() {
                    None => {
                        let who = peer::of_tcp(stream.peer_addr().ok());
                        spawn_connection(TokioIo::new(stream), Access::Unrestricted, who, handler, stop, permit)
                    }
                    Some(settings) => {
                        tokio::spawn(async move {
                            let handshake = settings.acceptor.accept(stream);
                            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                                Ok(Ok(stream)) => stream,
                                Ok(Err(err)) => {
                                    tracing::info!(error = %err, "API TLS handshake refused");
                                    return;
                                }
                                Err(_) => {
                                    tracing::info!("API TLS handshake timed out");
                                    return;
                                }
                            };
                            let access = access_of(&stream, settings.clients_authenticated);
                            let who = match &access {
                                Access::Certificate(subject) => peer::of_certificate(subject),
                                Access::Unrestricted => peer::of_tcp(stream.get_ref().0.peer_addr().ok()),
                            };
                            spawn_connection(TokioIo::new(stream), access, who, handler, stop, permit);
                        });
                    }
                }
            }
            Ok(Connection::Unix(stream)) => {
                let who = peer::of_unix(stream.peer_cred().ok().map(|cred| cred.uid()));
                spawn_connection(TokioIo::new(stream), Access::Unrestricted, who, handler, stop, permit)
            }
            Err(err) => {
                // EMFILE and friends: back off briefly instead of spinning, keep the listener.
                tracing::warn!(listener = %listener.describe(), error = %err, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// The access a TLS connection grants: the verified client certificate's subject when certificates are required.
fn access_of(stream: &tokio_rustls::server::TlsStream<tokio::net::TcpStream>, clients_authenticated: bool) -> Access {
    if !clients_authenticated {
        return Access::Unrestricted;
    }
    let subject = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| fleet_tls::subject_of(leaf.as_ref()));
    // rustls verified a certificate; one whose subject does not parse gets no role (deny).
    Access::Certificate(
        subject.unwrap_or(fleet_tls::Subject { text: "<unparsable subject>".into(), organisational_units: Vec::new() }),
    )
}

enum Connection {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Connection> {
    match listener {
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Connection::Tcp(s)),
        Listener::Unix(l) => l.accept().await.map(|(s, _)| Connection::Unix(s)),
    }
}

/// Serves one connection; every request carries `who` (in its extensions) for the audit trail.
fn spawn_connection<I, H>(
    io: I,
    access: Access,
    who: fleet_core::audit::Who,
    handler: watch::Receiver<Option<Arc<H>>>,
    stop: CancellationToken,
    permit: tokio::sync::OwnedSemaphorePermit,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: ApiHandler,
{
    let access = Arc::new(access);
    tokio::spawn(async move {
        let _permit = permit;
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let current = handler.borrow().clone();
            let access = access.clone();
            request.extensions_mut().insert(who.clone());
            async move { Ok::<_, Infallible>(dispatch(current, &access, request).await) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .serve_connection(io, service);
        tokio::select! {
            _ = stop.cancelled() => {}
            result = connection => {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "API connection ended with an error");
                }
            }
        }
    });
}

async fn dispatch<H: ApiHandler>(
    handler: Option<Arc<H>>,
    access: &Access,
    request: Request<Incoming>,
) -> Response<StreamedBody> {
    let mut request = request;
    // The handler reads it too: the page's actions and the cross-site check depend on the role.
    request.extensions_mut().insert(access.clone());
    let authorized = access::authorize(access, request.method());
    let streamed = match (&authorized, &handler) {
        (Ok(()), Some(handler)) => handler.stream(request.method(), request.uri()),
        _ => None,
    };
    let response = match streamed {
        Some(streamed) => streamed,
        None => whole(handler, authorized, request).await.map(|body| Full::new(body).boxed_unsync()),
    };
    let (mut parts, body) = response.into_parts();
    if let Ok(server) = HeaderValue::from_str(&format!("fleetd/{VERSION}")) {
        parts.headers.insert(http::header::SERVER, server);
    }
    Response::from_parts(parts, body)
}

/// The answer to a request whose body is read whole first (every request but a stream), `authorized` or not.
async fn whole<H: ApiHandler>(
    handler: Option<Arc<H>>,
    authorized: Result<(), access::Denied>,
    request: Request<Incoming>,
) -> Response<Bytes> {
    match (authorized, handler) {
        (Err(denied), handler) => {
            tracing::info!(method = %request.method(), path = request.uri().path(), reason = %denied, "API request refused");
            let response = error_response(StatusCode::FORBIDDEN, &denied.to_string());
            if let Some(handler) = handler {
                let (parts, _) = request.into_parts();
                handler.refused(Request::from_parts(parts, Bytes::new()), &response).await;
            }
            response
        }
        (Ok(()), None) => {
            error_response(StatusCode::SERVICE_UNAVAILABLE, "fleet server unable to communicate with etcd")
        }
        (Ok(()), Some(handler)) => {
            let (parts, body) = request.into_parts();
            match tokio::time::timeout(BODY_READ_TIMEOUT, read_body(body)).await {
                Ok(Ok(body)) => handler.handle(Request::from_parts(parts, body)).await,
                Ok(Err(BodyError::TooLarge)) => {
                    let response = error_response(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        &format!("request body larger than {} bytes", MAX_BODY),
                    );
                    handler.refused(Request::from_parts(parts, Bytes::new()), &response).await;
                    response
                }
                Ok(Err(BodyError::Unreadable)) => error_response(StatusCode::BAD_REQUEST, "request body unreadable"),
                Err(_) => error_response(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!("request body not received within {} s", BODY_READ_TIMEOUT.as_secs()),
                ),
            }
        }
    }
}

enum BodyError {
    TooLarge,
    Unreadable,
}

/// The whole body, at most [`MAX_BODY`] bytes; a larger one is drained (up to [`OVERSIZE_DRAIN`] more) and refused.
async fn read_body(mut body: Incoming) -> Result<Bytes, BodyError> {
    let mut kept = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyError::Unreadable)?;
        let Ok(data) = frame.into_data() else { continue };
        total += data.len();
        if total <= MAX_BODY {
            kept.extend_from_slice(&data);
        } else if total > MAX_BODY + OVERSIZE_DRAIN {
            break;
        }
    }
    if total > MAX_BODY { Err(BodyError::TooLarge) } else { Ok(Bytes::from(kept)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::listen::{ListenAddress, bind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers `<METHOD> <path>`; remembers the requests refused before it (as `<status> <METHOD> <path> <who>`).
    #[derive(Default)]
    struct Echo {
        refused: std::sync::Mutex<Vec<String>>,
    }

    impl ApiHandler for Echo {
        async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
            Response::new(Bytes::from(format!("{} {}", request.method(), request.uri().path())))
        }

        async fn refused(&self, request: Request<Bytes>, response: &Response<Bytes>) {
            let who = request.extensions().get::<fleet_core::audit::Who>().map(|w| w.name.clone());
            let seen = format!(
                "{} {} {} {}",
                response.status().as_u16(),
                request.method(),
                request.uri().path(),
                who.unwrap_or_default()
            );
            self.refused.lock().unwrap().push(seen);
        }
    }

    async fn get(addr: &str, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn answers_503_until_a_handler_is_installed_and_keeps_the_listener() {
        let listener = bind(&ListenAddress::Tcp("127.0.0.1:0".into())).await.unwrap();
        let addr = listener.describe().trim_start_matches("tcp://").to_string();
        let (install, current) = watch::channel::<Option<Arc<Echo>>>(None);
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(vec![listener], current, stop.clone()));

        let unavailable = get(&addr, "/fleet/v1/units").await;
        assert!(unavailable.starts_with("HTTP/1.1 503"), "{unavailable}");
        assert!(unavailable.contains("server: fleetd/v"), "{unavailable}");
        assert!(
            unavailable.contains(r#"{"error":{"code":503,"message":"fleet server unable to communicate with etcd"}}"#)
        );

        install.send_replace(Some(Arc::new(Echo::default())));
        let served = get(&addr, "/fleet/v1/units").await;
        assert!(served.starts_with("HTTP/1.1 200"), "{served}");
        assert!(served.ends_with("GET /fleet/v1/units"), "{served}");

        stop.cancel();
        server.await.unwrap();
    }

    /// A TLS API server on 127.0.0.1 with its own CA, and the certificates its tests present.
    struct TlsFixture {
        _dir: tempfile::TempDir,
        addr: String,
        ca: fleet_tls::testing::Ca,
        dir: std::path::PathBuf,
        tls: watch::Sender<Option<ServerTls>>,
        stop: CancellationToken,
        echo: Arc<Echo>,
    }

    impl TlsFixture {
        async fn start(require_client_certs: bool) -> TlsFixture {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().to_path_buf();
            let ca = fleet_tls::testing::Ca::new(&dir, "fleet-ca");
            let (cert, key) = ca.leaf(&dir, "fleetd", &[], &["localhost", "127.0.0.1"], false);
            let files =
                fleet_tls::ServerFiles { cert, key, client_ca: require_client_certs.then(|| ca.cert_path.clone()) };
            let config = fleet_tls::server_config(&files).unwrap();
            let listener = bind(&ListenAddress::Tcp("127.0.0.1:0".into())).await.unwrap();
            let addr = listener.describe().trim_start_matches("tcp://").to_string();
            let echo = Arc::new(Echo::default());
            let (_install, current) = watch::channel::<Option<Arc<Echo>>>(Some(echo.clone()));
            let (tls, tls_rx) = watch::channel(Some(ServerTls::new(config, require_client_certs)));
            let stop = CancellationToken::new();
            tokio::spawn(serve_secured(vec![listener], current, tls_rx, stop.clone()));
            // keep the handler sender alive for the server's lifetime
            std::mem::forget(_install);
            TlsFixture { _dir: tmp, addr, ca, dir, tls, stop, echo }
        }

        fn client(&self, cert: Option<(std::path::PathBuf, std::path::PathBuf)>) -> fleet_tls::ClientFiles {
            let (cert, key) = cert.unzip();
            fleet_tls::ClientFiles { ca: Some(self.ca.cert_path.clone()), cert, key }
        }

        /// Sends `method path` over TLS; the answer's text, or the TLS/IO error's text.
        async fn request(&self, files: &fleet_tls::ClientFiles, method: &str, path: &str) -> Result<String, String> {
            let config = fleet_tls::client_config(files).map_err(|e| e.to_string())?;
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let tcp = tokio::net::TcpStream::connect(&self.addr).await.map_err(|e| e.to_string())?;
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let mut stream = connector.connect(name, tcp).await.map_err(|e| e.to_string())?;
            let request =
                format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
            let mut out = String::new();
            stream.read_to_string(&mut out).await.map_err(|e| e.to_string())?;
            Ok(out)
        }
    }

    #[tokio::test]
    async fn tls_listener_serves_https_and_refuses_plain_http() {
        let fixture = TlsFixture::start(false).await;
        let answer = fixture.request(&fixture.client(None), "GET", "/fleet/v1/units").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let plain = get(&fixture.addr, "/fleet/v1/units").await;
        assert!(!plain.contains("HTTP/1.1 200"), "plain HTTP to the TLS listener was served: {plain}");
        fixture.stop.cancel();
    }

    #[tokio::test]
    async fn client_certificates_are_required_and_roles_enforced() {
        let fixture = TlsFixture::start(true).await;
        let dir = fixture.dir.clone();
        let admin = fixture.ca.leaf(&dir, "admin", &["fleet-admin"], &[], false);
        let reader = fixture.ca.leaf(&dir, "viewer", &["fleet-read"], &[], false);
        let nobody = fixture.ca.leaf(&dir, "nobody", &["ops"], &[], false);
        let expired = fixture.ca.leaf(&dir, "old-admin", &["fleet-admin"], &[], true);
        let other_ca = fleet_tls::testing::Ca::new(&dir, "other-ca");
        let foreign = other_ca.leaf(&dir, "foreign-admin", &["fleet-admin"], &[], false);

        let ok = fixture.request(&fixture.client(Some(admin)), "PUT", "/fleet/v1/units/a.service").await.unwrap();
        assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("PUT /fleet/v1/units/a.service"), "{ok}");

        let read = fixture.client(Some(reader));
        let listed = fixture.request(&read, "GET", "/fleet/v1/units").await.unwrap();
        assert!(listed.starts_with("HTTP/1.1 200"), "{listed}");
        for method in ["PUT", "DELETE"] {
            let refused = fixture.request(&read, method, "/fleet/v1/units/a.service").await.unwrap();
            assert!(refused.starts_with("HTTP/1.1 403"), "read role {method}: {refused}");
            assert!(refused.contains("CN=viewer") && refused.contains("role read"), "{refused}");
        }

        let unmapped = fixture.request(&fixture.client(Some(nobody)), "GET", "/fleet/v1/units").await.unwrap();
        assert!(unmapped.starts_with("HTTP/1.1 403") && unmapped.contains("CN=nobody"), "{unmapped}");
        // The audit trail hears of every refusal, with who was refused (issue 38).
        let refused = fixture.echo.refused.lock().unwrap().clone();
        let viewer = |method: &str| format!("403 {method} /fleet/v1/units/a.service CN=viewer, OU=fleet-read");
        assert_eq!(refused, [viewer("PUT"), viewer("DELETE"), "403 GET /fleet/v1/units CN=nobody, OU=ops".into()]);

        for (what, files) in [
            ("no certificate", fixture.client(None)),
            ("expired certificate", fixture.client(Some(expired))),
            ("certificate of another CA", fixture.client(Some(foreign))),
        ] {
            let refused = fixture.request(&files, "PUT", "/fleet/v1/units/a.service").await;
            assert!(refused.is_err(), "{what} was served: {refused:?}");
        }
        fixture.stop.cancel();
    }

    #[tokio::test]
    async fn new_tls_settings_apply_to_new_connections() {
        let fixture = TlsFixture::start(false).await;
        let before = fixture.request(&fixture.client(None), "GET", "/fleet/v1/units").await.unwrap();
        assert!(before.starts_with("HTTP/1.1 200"), "{before}");
        let dir = fixture.dir.clone();
        let rotated_ca = fleet_tls::testing::Ca::new(&dir, "rotated-ca");
        let (cert, key) = rotated_ca.leaf(&dir, "fleetd-rotated", &[], &["localhost"], false);
        let config = fleet_tls::server_config(&fleet_tls::ServerFiles { cert, key, client_ca: None }).unwrap();
        fixture.tls.send_replace(Some(ServerTls::new(config, false)));

        let old_trust = fixture.request(&fixture.client(None), "GET", "/fleet/v1/units").await;
        assert!(old_trust.is_err(), "the old certificate is still served: {old_trust:?}");
        let new_trust = fleet_tls::ClientFiles { ca: Some(rotated_ca.cert_path.clone()), cert: None, key: None };
        let answer = fixture.request(&new_trust, "GET", "/fleet/v1/units").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        fixture.stop.cancel();
    }

    /// Hostile clients do not starve others: while 1,000 connections sit idle and one client trickles its request
    /// a byte at a time, fresh requests are still answered. (The pacing sleep is the hostile client's behaviour,
    /// not a wait for the server.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keeps_answering_with_a_slow_client_and_a_thousand_idle_connections() {
        let listener = bind(&ListenAddress::Tcp("127.0.0.1:0".into())).await.unwrap();
        let addr = listener.describe().trim_start_matches("tcp://").to_string();
        let (_install, current) = watch::channel::<Option<Arc<Echo>>>(Some(Arc::new(Echo::default())));
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(vec![listener], current, stop.clone()));

        let mut idle = Vec::new();
        for _ in 0..1000 {
            idle.push(tokio::net::TcpStream::connect(&addr).await.expect("open an idle connection"));
        }
        let trickler = {
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
                for byte in b"GET /fleet/v1/units HTTP/1.1\r\nHost: slow\r\n".iter() {
                    if stream.write_all(&[*byte]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            })
        };
        for i in 0..20 {
            let path = format!("/fleet/v1/units/{i}");
            let request = get(&addr, &path);
            let answer = tokio::time::timeout(std::time::Duration::from_secs(60), request).await.unwrap_or_else(|_| {
                panic!("request {i} got no answer within 60 s while 1,000 idle connections and a slow client are open")
            });
            assert!(
                answer.starts_with("HTTP/1.1 200"),
                "request {i} while 1,000 idle connections and a slow client: {answer}"
            );
        }
        drop(idle);
        trickler.abort();
        stop.cancel();
        server.await.unwrap();
    }
}

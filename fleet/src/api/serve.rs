//! Accept loops for the API listeners. The handler is swappable: until fleetd's components run (and again while a
//! monitor restart or a reload is in progress) every request gets the 503 "unavailable" answer of spec §8.1, and
//! the listeners themselves are never closed by a reload.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::listen::Listener;
use crate::version::VERSION;

/// Request bodies above this size are refused (413); unit files are at most a few KiB.
const MAX_BODY: usize = 4 << 20;

/// Serves one fully-read request.
pub trait ApiHandler: Send + Sync + 'static {
    fn handle(&self, request: Request<Bytes>) -> impl Future<Output = Response<Bytes>> + Send;
}

/// The JSON error body of spec §8.3.
pub fn error_response(status: StatusCode, message: &str) -> Response<Bytes> {
    let body = serde_json::json!({ "error": { "code": status.as_u16(), "message": message } });
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Serves `listeners` until `stop` is cancelled, dispatching to the handler currently in `handler`.
pub async fn serve<H: ApiHandler>(
    listeners: Vec<Listener>,
    handler: watch::Receiver<Option<Arc<H>>>,
    stop: CancellationToken,
) {
    let mut loops = tokio::task::JoinSet::new();
    for listener in listeners {
        tracing::info!(listener = %listener.describe(), "serving API");
        loops.spawn(accept_loop(listener, handler.clone(), stop.clone()));
    }
    while loops.join_next().await.is_some() {}
}

async fn accept_loop<H: ApiHandler>(
    listener: Listener,
    handler: watch::Receiver<Option<Arc<H>>>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = accept(&listener) => accepted,
        };
        match accepted {
            Ok(Connection::Tcp(stream)) => spawn_connection(TokioIo::new(stream), handler.clone(), stop.clone()),
            Ok(Connection::Unix(stream)) => spawn_connection(TokioIo::new(stream), handler.clone(), stop.clone()),
            Err(err) => {
                // EMFILE and friends: back off briefly instead of spinning, keep the listener.
                tracing::warn!(listener = %listener.describe(), error = %err, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
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

fn spawn_connection<I, H>(io: I, handler: watch::Receiver<Option<Arc<H>>>, stop: CancellationToken)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: ApiHandler,
{
    tokio::spawn(async move {
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let current = handler.borrow().clone();
            async move { Ok::<_, Infallible>(dispatch(current, request).await) }
        });
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
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

async fn dispatch<H: ApiHandler>(handler: Option<Arc<H>>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let response = match handler {
        None => error_response(StatusCode::SERVICE_UNAVAILABLE, "fleet server unable to communicate with etcd"),
        Some(handler) => {
            let (parts, body) = request.into_parts();
            match Limited::new(body, MAX_BODY).collect().await {
                Ok(collected) => handler.handle(Request::from_parts(parts, collected.to_bytes())).await,
                Err(_) => error_response(StatusCode::PAYLOAD_TOO_LARGE, "request body too large or unreadable"),
            }
        }
    };
    let (mut parts, body) = response.into_parts();
    if let Ok(server) = HeaderValue::from_str(&format!("fleetd/{VERSION}")) {
        parts.headers.insert(http::header::SERVER, server);
    }
    Response::from_parts(parts, Full::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::listen::{ListenAddress, bind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Echo;

    impl ApiHandler for Echo {
        async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
            Response::new(Bytes::from(format!("{} {}", request.method(), request.uri().path())))
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

        install.send_replace(Some(Arc::new(Echo)));
        let served = get(&addr, "/fleet/v1/units").await;
        assert!(served.starts_with("HTTP/1.1 200"), "{served}");
        assert!(served.ends_with("GET /fleet/v1/units"), "{served}");

        stop.cancel();
        server.await.unwrap();
    }
}

//! A tiny HTTP/1.1 client over a TCP stream (or TLS over it, for `https://` endpoints, or a unix socket, for
//! `unix:///path` endpoints and bare socket paths), for raw requests to a machine's API endpoint: the specs check status codes, headers and bodies exactly as a client on the wire sees
//! them.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one request may take.
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// A response as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header names lower-cased, in order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// Whether `Content-Type` names `application/json`.
    pub fn is_json(&self) -> bool {
        self.header("content-type").is_some_and(|v| v.contains("application/json"))
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// `error.message` of an error body, if any.
    pub fn error_message(&self) -> Option<String> {
        self.json().pointer("/error/message").and_then(|v| v.as_str()).map(str::to_string)
    }

    /// One line for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "HTTP {} (Content-Type: {}) body: {}",
            self.status,
            self.header("content-type").unwrap_or("-"),
            if self.body.is_empty() { "(empty)" } else { &self.body }
        )
    }
}

/// Sends one request to `endpoint` (`http://host:port`) and reads the whole response (`Connection: close`).
/// `content_type` is sent with a body when given.
pub async fn request(
    endpoint: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    content_type: Option<&str>,
) -> Result<Response, String> {
    request_with(endpoint, None, method, path, body, content_type).await
}

/// [`request`] to an `http://` endpoint, or with `tls` (trust and client certificate) to an `https://` one.
pub async fn request_with(
    endpoint: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    method: &str,
    path: &str,
    body: Option<&str>,
    content_type: Option<&str>,
) -> Result<Response, String> {
    let what = format!("{method} {endpoint}{path}");
    tokio::time::timeout(TIMEOUT, request_inner(endpoint, tls, method, path, body, content_type))
        .await
        .map_err(|_| format!("{what}: no response within {TIMEOUT:?}"))?
        .map_err(|e| format!("{what}: {e}"))
}

async fn request_inner(
    endpoint: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    method: &str,
    path: &str,
    body: Option<&str>,
    content_type: Option<&str>,
) -> Result<Response, String> {
    if let Some(host) = endpoint.strip_prefix("https://") {
        let host = host.trim_end_matches('/');
        let tls = tls.ok_or("an https:// endpoint needs a TLS client configuration")?;
        let stream = TcpStream::connect(host).await.map_err(|e| format!("connect: {e}"))?;
        let server = host.rsplit_once(':').map_or(host, |(name, _)| name).to_string();
        let name = rustls::pki_types::ServerName::try_from(server).map_err(|e| format!("server name: {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        return exchange(stream, host, method, path, body, content_type).await;
    }
    if let Some(socket) = unix_socket(endpoint) {
        let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| format!("connect {socket}: {e}"))?;
        return exchange(stream, "localhost", method, path, body, content_type).await;
    }
    let host = endpoint.strip_prefix("http://").ok_or("endpoint must start with http://, https:// or unix://")?;
    let host = host.trim_end_matches('/');
    let stream = TcpStream::connect(host).await.map_err(|e| format!("connect: {e}"))?;
    exchange(stream, host, method, path, body, content_type).await
}

/// The socket path of a `unix:///path` endpoint or of a bare absolute path (fleetctl takes both).
pub fn unix_socket(endpoint: &str) -> Option<&str> {
    endpoint.strip_prefix("unix://").or_else(|| endpoint.starts_with('/').then_some(endpoint))
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    host: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    content_type: Option<&str>,
) -> Result<Response, String> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: */*\r\n");
    if let Some(ct) = content_type {
        req.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || matches!(method, "PUT" | "POST" | "PATCH") {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    // A server may answer (e.g. 413) and stop reading before the whole body is sent: read its answer anyway.
    // (A TLS stream keeps what the socket did not take yet until flushed.)
    let written = match stream.write_all(req.as_bytes()).await {
        Ok(()) => stream.flush().await,
        Err(e) => Err(e),
    };
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw).await {
        // A TLS peer closing without close_notify after a complete answer: the answer stands.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => {
            return Err(match written {
                Err(w) => format!("write: {w} (then read: {e})"),
                Ok(()) => format!("read: {e}"),
            });
        }
        Ok(_) => {}
    }
    if let (Err(w), true) = (&written, raw.is_empty()) {
        return Err(format!("write: {w}"));
    }
    parse(&raw)
}

/// Parses a complete HTTP/1.1 response (identity, `Content-Length` or chunked body).
pub fn parse(raw: &[u8]) -> Result<Response, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("incomplete response ({} bytes): {:?}", raw.len(), String::from_utf8_lossy(raw)))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked { dechunk(rest)? } else { rest.to_vec() };
    Ok(Response { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or("truncated chunk size")?;
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or_default().trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_body_and_headers() {
        let r = parse(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 54\r\n\r\n{\"error\":{\"code\":404,\"message\":\"unit does not exist\"}}").unwrap();
        assert_eq!(r.status, 404);
        assert!(r.is_json());
        assert_eq!(r.error_message().as_deref(), Some("unit does not exist"));
    }

    #[test]
    fn chunked_bodies_are_joined() {
        let r = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n")
            .unwrap();
        assert_eq!(r.body, "{\"a\":1}");
    }

    #[test]
    fn truncated_responses_are_errors() {
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}

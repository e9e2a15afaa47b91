//! Parsing `--endpoint` for the API driver (spec §9.3): which socket to dial and which URL prefix to request.

/// Where the API is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiEndpoint {
    pub transport: Transport,
    /// URL text requests are reported under, without trailing slash (e.g. `http://domain-sock`,
    /// `http://10.0.0.1:49153/prefix`).
    pub base_url: String,
    /// Path prefix put before `/fleet/v1/...` (the endpoint's own path, without trailing slash).
    pub path_prefix: String,
}

/// How to open a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// TCP to `host:port`; `authority` is the Host header.
    Tcp { host: String, port: u16, authority: String },
    /// TLS over TCP to `host:port` (an `https://` endpoint); the server's certificate must be valid for `host`.
    Https { host: String, port: u16, authority: String },
    /// A Unix domain socket at `path`.
    Unix { path: String },
    /// A scheme the client cannot speak; reported on the first request, like the original.
    Unsupported { scheme: String },
}

/// Why `--endpoint` is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("URL scheme undefined")]
    SchemeUndefined,
    #[error("parse {url:?}: {reason}")]
    Parse { url: String, reason: String },
    #[error("unable to connect to host {host:?} with scheme {scheme:?}")]
    HostWithSocket { host: String, scheme: String },
}

impl Transport {
    /// The `Host` header requests over this transport carry (Go's client sends `domain-sock` for sockets).
    pub fn host_header(&self) -> &str {
        match self {
            Transport::Tcp { authority, .. } | Transport::Https { authority, .. } => authority,
            Transport::Unix { .. } | Transport::Unsupported { .. } => "domain-sock",
        }
    }
}

impl ApiEndpoint {
    /// Parse the first of the comma-separated endpoints (the others are ignored with a warning).
    pub fn parse(endpoints: &str) -> Result<Self, EndpointError> {
        let mut all = endpoints.split(',');
        let first = all.next().unwrap_or_default().trim().to_string();
        if all.next().is_some() {
            tracing::warn!("multiple endpoints provided but only the first ({first}) is used");
        }
        let Some((scheme, rest)) = first.split_once("://") else {
            let head = first.split('/').next().unwrap_or_default();
            if head.contains(':') {
                return Err(EndpointError::Parse {
                    url: first.clone(),
                    reason: "first path segment in URL cannot contain colon".into(),
                });
            }
            return Err(EndpointError::SchemeUndefined);
        };
        if scheme.is_empty() {
            return Err(EndpointError::Parse { url: first.clone(), reason: "missing protocol scheme".into() });
        }
        let scheme = scheme.to_ascii_lowercase();
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        match scheme.as_str() {
            "unix" | "file" => {
                if !authority.is_empty() {
                    return Err(EndpointError::HostWithSocket { host: authority.to_string(), scheme });
                }
                Ok(ApiEndpoint {
                    transport: Transport::Unix { path: path.to_string() },
                    base_url: "http://domain-sock".into(),
                    path_prefix: String::new(),
                })
            }
            "http" | "https" => {
                let default_port = if scheme == "https" { 443 } else { 80 };
                let (host, port) = split_host_port(authority, default_port)
                    .map_err(|reason| EndpointError::Parse { url: first.clone(), reason })?;
                let prefix = path.trim_end_matches('/').to_string();
                let authority = authority.to_string();
                let transport = if scheme == "https" {
                    Transport::Https { host, port, authority: authority.clone() }
                } else {
                    Transport::Tcp { host, port, authority: authority.clone() }
                };
                Ok(ApiEndpoint { transport, base_url: format!("{scheme}://{authority}{prefix}"), path_prefix: prefix })
            }
            _ => Ok(ApiEndpoint {
                transport: Transport::Unsupported { scheme: scheme.clone() },
                base_url: format!("{scheme}://{authority}{}", path.trim_end_matches('/')),
                path_prefix: path.trim_end_matches('/').to_string(),
            }),
        }
    }
}

fn split_host_port(authority: &str, default_port: u16) -> Result<(String, u16), String> {
    if authority.is_empty() {
        return Err("missing host".into());
    }
    // [v6]:port
    if let Some(rest) = authority.strip_prefix('[') {
        let Some(end) = rest.find(']') else { return Err("missing ']' in host".into()) };
        let host = rest[..end].to_string();
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => parse_port(p, default_port)?,
            None if after.is_empty() => default_port,
            None => return Err(format!("invalid port {after:?} after host")),
        };
        return Ok((host, port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Ok((host.to_string(), parse_port(port, default_port)?)),
        None => Ok((authority.to_string(), default_port)),
    }
}

fn parse_port(p: &str, default_port: u16) -> Result<u16, String> {
    if p.is_empty() {
        return Ok(default_port);
    }
    p.parse::<u16>().map_err(|_| format!("invalid port {:?} after host", format!(":{p}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_socket_endpoint_uses_domain_sock_urls() {
        let ep = ApiEndpoint::parse("unix:///var/run/fleet.sock").unwrap();
        assert_eq!(ep.transport, Transport::Unix { path: "/var/run/fleet.sock".into() });
        assert_eq!(ep.base_url, "http://domain-sock");
        let ep = ApiEndpoint::parse("file:///tmp/f.sock").unwrap();
        assert_eq!(ep.transport, Transport::Unix { path: "/tmp/f.sock".into() });
    }

    #[test]
    fn unix_socket_with_host_is_rejected() {
        let err = ApiEndpoint::parse("unix://var/run/fleet.sock").unwrap_err();
        assert_eq!(err.to_string(), "unable to connect to host \"var\" with scheme \"unix\"");
    }

    #[test]
    fn http_endpoint_keeps_its_path_as_prefix() {
        let ep = ApiEndpoint::parse("http://172.17.0.2:49153").unwrap();
        assert_eq!(
            ep.transport,
            Transport::Tcp { host: "172.17.0.2".into(), port: 49153, authority: "172.17.0.2:49153".into() }
        );
        assert_eq!(ep.base_url, "http://172.17.0.2:49153");
        let ep = ApiEndpoint::parse("http://example.com/api/").unwrap();
        assert_eq!(ep.path_prefix, "/api");
        assert!(matches!(ep.transport, Transport::Tcp { port: 80, .. }));
    }

    #[test]
    fn only_the_first_endpoint_is_used() {
        let ep = ApiEndpoint::parse("http://a:1,http://b:2").unwrap();
        assert_eq!(ep.base_url, "http://a:1");
    }

    #[test]
    fn endpoints_without_scheme_fail_like_the_original() {
        assert_eq!(ApiEndpoint::parse("foo").unwrap_err().to_string(), "URL scheme undefined");
        assert_eq!(
            ApiEndpoint::parse("127.0.0.1:1").unwrap_err().to_string(),
            "parse \"127.0.0.1:1\": first path segment in URL cannot contain colon"
        );
    }

    #[test]
    fn unknown_schemes_fail_on_first_request() {
        let ep = ApiEndpoint::parse("ftp://foo").unwrap();
        assert_eq!(ep.transport, Transport::Unsupported { scheme: "ftp".into() });
        assert_eq!(ep.base_url, "ftp://foo");
    }

    #[test]
    fn https_endpoints_use_tls_and_port_443_by_default() {
        let ep = ApiEndpoint::parse("https://10.0.0.1:54728/p/").unwrap();
        let authority = "10.0.0.1:54728".to_string();
        assert_eq!(ep.transport, Transport::Https { host: "10.0.0.1".into(), port: 54728, authority });
        assert_eq!((ep.base_url.as_str(), ep.path_prefix.as_str()), ("https://10.0.0.1:54728/p", "/p"));
        assert!(matches!(
            ApiEndpoint::parse("https://fleet.example").unwrap().transport,
            Transport::Https { port: 443, .. }
        ));
        assert!(matches!(
            ApiEndpoint::parse("http://fleet.example").unwrap().transport,
            Transport::Tcp { port: 80, .. }
        ));
    }
}

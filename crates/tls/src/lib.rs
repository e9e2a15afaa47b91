//! TLS material shared by fleetd's API server and fleetctl's API client: reading PEM certificates, keys and CA
//! bundles, building rustls configurations on the `ring` provider (no OpenSSL, no aws-lc), naming a peer by its
//! certificate subject, and turning rustls failures into sentences a user can act on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Why TLS material could not be used. Every variant names the file (or the part of the configuration) at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {cause}")]
    Read { what: &'static str, path: PathBuf, cause: String },
    #[error("{what} {path} holds no PEM certificate")]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("CA file {path}: certificate {index} is unusable as a trust anchor: {cause}")]
    BadAnchor { path: PathBuf, index: usize, cause: String },
    #[error("certificate {cert} and key {key} do not form a usable pair: {cause}")]
    Pair { cert: PathBuf, key: PathBuf, cause: String },
    #[error("client CA {path}: {cause}")]
    Verifier { path: PathBuf, cause: String },
    #[error("{0}")]
    Incomplete(String),
}

/// The process-wide crypto provider: `ring`.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in the PEM file at `path` (a chain, leaf first, or a CA bundle).
pub fn read_certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read_err = |cause: String| TlsError::Read { what, path: path.to_path_buf(), cause };
    let bytes = std::fs::read(path).map_err(|e| read_err(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_err(format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { what, path: path.to_path_buf() });
    }
    Ok(certs)
}

/// The private key (PKCS#8, PKCS#1 or SEC1, PEM) at `path`.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let read_err = |cause: String| TlsError::Read { what: "key file", path: path.to_path_buf(), cause };
    let bytes = std::fs::read(path).map_err(|e| read_err(e.to_string()))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| read_err(format!("no usable PEM private key: {e}")))
}

/// The trust anchors of the CA bundle at `path`.
pub fn read_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for (index, cert) in read_certificates("CA file", path)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| TlsError::BadAnchor { path: path.to_path_buf(), index, cause: e.to_string() })?;
    }
    Ok(roots)
}

/// Files naming the API server's TLS identity and, optionally, the CA its clients' certificates must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, every TLS client must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

/// A server configuration (HTTP/1.1 only) from `files`, read now.
pub fn server_config(files: &ServerFiles) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let certs = read_certificates("certificate file", &files.cert)?;
    let key = read_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Incomplete(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(read_roots(ca)?), provider)
                    .build()
                    .map_err(|e| TlsError::Verifier { path: ca.clone(), cause: e.to_string() })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        cause: e.to_string(),
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Files fleetctl uses to reach an `https://` endpoint (`--ca-file`, `--cert-file`, `--key-file`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientFiles {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// A client configuration from `files`: the server must chain to the CA file; a client certificate is offered
/// when both a certificate and a key are given.
pub fn client_config(files: &ClientFiles) -> Result<ClientConfig, TlsError> {
    let Some(ca) = &files.ca else {
        return Err(TlsError::Incomplete(
            "an https:// endpoint needs the CA that signed fleetd's certificate: --ca-file or FLEETCTL_CA_FILE".into(),
        ));
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Incomplete(e.to_string()))?
        .with_root_certificates(read_roots(ca)?);
    let mut config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_certificates("certificate file", cert)?, read_key(key)?)
            .map_err(|e| TlsError::Pair { cert: cert.clone(), key: key.clone(), cause: e.to_string() })?,
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) => {
            return Err(TlsError::Incomplete("--cert-file is given but --key-file is not (FLEETCTL_KEY_FILE)".into()));
        }
        (None, Some(_)) => {
            return Err(TlsError::Incomplete("--key-file is given but --cert-file is not (FLEETCTL_CERT_FILE)".into()));
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Who a peer certificate names: its subject (RFC 4514 text) and the organisational units in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub text: String,
    pub organisational_units: Vec<String>,
}

/// The subject of a DER certificate, or `None` when it does not parse (rustls verified it, so it will).
pub fn subject_of(der: &[u8]) -> Option<Subject> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let name = cert.subject();
    let organisational_units =
        name.iter_organizational_unit().filter_map(|ou| ou.as_str().ok()).map(str::to_string).collect();
    Some(Subject { text: name.to_string(), organisational_units })
}

/// A sentence for a TLS failure seen by fleetctl, naming which side refused what. `error` is the first rustls
/// error found in a transport error's source chain.
pub fn describe_client_failure(error: &rustls::Error) -> String {
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error};
    match error {
        Error::InvalidCertificate(Cert::UnknownIssuer) => {
            "the server's certificate is not signed by the CA in --ca-file (unknown server certificate)".into()
        }
        Error::InvalidCertificate(Cert::Expired | Cert::ExpiredContext { .. }) => {
            "the server's certificate has expired".into()
        }
        Error::InvalidCertificate(Cert::NotValidForName | Cert::NotValidForNameContext { .. }) => {
            "the server's certificate is not valid for the endpoint's host name".into()
        }
        Error::AlertReceived(Alert::CertificateExpired) => "the server refused the client certificate: it has expired \
                                                             (--cert-file)"
            .into(),
        Error::AlertReceived(Alert::CertificateRequired) => {
            "the server requires a client certificate: give --cert-file and --key-file".into()
        }
        Error::AlertReceived(alert @ (Alert::BadCertificate | Alert::UnknownCA | Alert::CertificateUnknown)) => {
            format!("the server refused the client certificate (--cert-file) as not signed by its CA ({alert:?})")
        }
        other => format!("TLS: {other}"),
    }
}

/// The first rustls error in `error`'s source chain (hyper and tokio wrap it in I/O errors).
pub fn find_rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(err) = current {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(tls) = io.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        current = err.source();
    }
    None
}

/// Throwaway certificates for the crates' tests (feature `testing`; the harness has its own, fuller generator).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::path::{Path, PathBuf};

    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

    /// A CA that signs leaves into a directory.
    pub struct Ca {
        issuer: Issuer<'static, KeyPair>,
        pub cert_path: PathBuf,
    }

    impl Ca {
        pub fn new(dir: &Path, name: &str) -> Ca {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            let key = KeyPair::generate().unwrap();
            let cert = params.self_signed(&key).unwrap();
            let cert_path = dir.join(format!("{name}.pem"));
            std::fs::write(&cert_path, cert.pem()).unwrap();
            Ca { issuer: Issuer::new(params, key), cert_path }
        }

        /// A leaf for `names` (SANs), subject `CN=<cn>` plus `OU=<unit>` for each unit; `expired` puts its validity
        /// in the past. Returns (certificate path, key path).
        pub fn leaf(&self, dir: &Path, cn: &str, units: &[&str], names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
            let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
            params.distinguished_name.push(DnType::CommonName, cn);
            for unit in units {
                params.distinguished_name.push(DnType::OrganizationalUnitName, *unit);
            }
            if expired {
                params.not_before = rcgen::date_time_ymd(2020, 1, 1);
                params.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            let (cert_path, key_path) = (dir.join(format!("{cn}.pem")), dir.join(format!("{cn}-key.pem")));
            std::fs::write(&cert_path, cert.pem()).unwrap();
            std::fs::write(&key_path, key.serialize_pem()).unwrap();
            (cert_path, key_path)
        }
    }
}

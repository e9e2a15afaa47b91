//! Throwaway certificates for a TLS cluster (`fleet-harness up --tls`, [`crate::ClusterBuilder::tls`]): one CA per
//! cluster signs etcd's server certificate, each fleetd's certificate (the API's server certificate and fleetd's
//! etcd client certificate at once, valid for the machine's address and names), and the fleetctl client
//! certificates of the two roles fleetd knows: `admin` (`OU=fleet-admin`) and `read` (`OU=fleet-read`). Tests can
//! issue more (an expired one, one without a role) and make a stranger CA.
//!
//! Keys are ECDSA P-256 (rcgen on `ring`); files are PEM, written into the cluster's temporary directory.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

/// The organisational unit of fleetd's `admin` role.
pub const ADMIN_UNIT: &str = "fleet-admin";
/// The organisational unit of fleetd's `read` role.
pub const READ_UNIT: &str = "fleet-read";

/// Certificates could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("making certificate {name}: {source}")]
    Generate { name: String, source: rcgen::Error },
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    pub fn cert_pem(&self) -> std::io::Result<String> {
        std::fs::read_to_string(&self.cert)
    }

    pub fn key_pem(&self) -> std::io::Result<String> {
        std::fs::read_to_string(&self.key)
    }
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Default)]
pub struct LeafSpec<'a> {
    /// Subject common name; also the file name stem.
    pub common_name: &'a str,
    /// Subject organisational units (fleetd maps `fleet-admin` / `fleet-read` to roles).
    pub units: &'a [&'a str],
    /// DNS names and IP addresses the certificate is valid for (servers).
    pub names: &'a [&'a str],
    /// Validity in the past (2020–2021): an expired certificate.
    pub expired: bool,
}

/// A certificate authority whose key stays in memory; its certificate is a PEM file.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert: PathBuf,
    dir: PathBuf,
    /// Serialises file writes of concurrent issuers (machines boot in parallel).
    writing: Mutex<()>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("cert", &self.cert).finish()
    }
}

fn write(path: &Path, contents: &str) -> Result<(), PkiError> {
    std::fs::write(path, contents).map_err(|source| PkiError::Write { path: path.to_path_buf(), source })
}

impl Ca {
    /// A new CA `name`, writing into `dir` (created if missing).
    pub fn new(dir: &Path, name: &str) -> Result<Ca, PkiError> {
        std::fs::create_dir_all(dir).map_err(|source| PkiError::Write { path: dir.to_path_buf(), source })?;
        let generate = |source| PkiError::Generate { name: name.to_string(), source };
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(generate)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().map_err(generate)?;
        let cert = params.self_signed(&key).map_err(generate)?;
        let path = dir.join(format!("{name}.pem"));
        write(&path, &cert.pem())?;
        Ok(Ca { issuer: Issuer::new(params, key), cert: path, dir: dir.to_path_buf(), writing: Mutex::new(()) })
    }

    /// The CA certificate (what clients and servers trust).
    pub fn cert(&self) -> &Path {
        &self.cert
    }

    /// Issues a leaf certificate per `spec`, written as `<cn>.pem` and `<cn>-key.pem` next to the CA.
    pub fn issue(&self, spec: &LeafSpec<'_>) -> Result<CertFiles, PkiError> {
        let generate = |source| PkiError::Generate { name: spec.common_name.to_string(), source };
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(generate)?;
        for name in spec.names {
            params.subject_alt_names.push(match name.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*name).try_into().map_err(generate)?),
            });
        }
        params.distinguished_name.push(DnType::CommonName, spec.common_name);
        for unit in spec.units {
            params.distinguished_name.push(DnType::OrganizationalUnitName, *unit);
        }
        if spec.expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().map_err(generate)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(generate)?;
        let files = CertFiles {
            cert: self.dir.join(format!("{}.pem", spec.common_name)),
            key: self.dir.join(format!("{}-key.pem", spec.common_name)),
        };
        let _guard = self.writing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        write(&files.cert, &cert.pem())?;
        write(&files.key, &key.serialize_pem())?;
        Ok(files)
    }
}

/// The certificates of one TLS cluster.
#[derive(Debug)]
pub struct ClusterPki {
    pub ca: Ca,
    /// etcd's server certificate.
    pub etcd: CertFiles,
    /// fleetctl's `admin` client certificate (`OU=fleet-admin`).
    pub admin: CertFiles,
    /// fleetctl's `read` client certificate (`OU=fleet-read`).
    pub read: CertFiles,
}

impl ClusterPki {
    /// A CA in `dir` and the certificates for etcd (container `etcd_name`) and the two fleetctl roles.
    pub fn new(dir: &Path, etcd_name: &str) -> Result<ClusterPki, PkiError> {
        let ca = Ca::new(dir, "fleet-cluster-ca")?;
        let etcd = ca.issue(&LeafSpec {
            common_name: "etcd",
            names: &[etcd_name, "etcd", "localhost", "127.0.0.1"],
            ..LeafSpec::default()
        })?;
        let admin =
            ca.issue(&LeafSpec { common_name: "fleetctl-admin", units: &[ADMIN_UNIT], ..LeafSpec::default() })?;
        let read = ca.issue(&LeafSpec { common_name: "fleetctl-read", units: &[READ_UNIT], ..LeafSpec::default() })?;
        Ok(ClusterPki { ca, etcd, admin, read })
    }

    /// The certificate of fleetd on a machine: server name `hostname`/`container`/`ip`, and fleetd's identity
    /// towards etcd.
    pub fn fleetd(&self, hostname: &str, container: &str, ip: &str) -> Result<CertFiles, PkiError> {
        self.ca.issue(&LeafSpec {
            common_name: &format!("fleetd-{container}"),
            names: &[hostname, container, ip, "localhost", "127.0.0.1"],
            ..LeafSpec::default()
        })
    }

    /// `FLEETCTL_CA_FILE`, `FLEETCTL_CERT_FILE`, `FLEETCTL_KEY_FILE` for `client`.
    pub fn fleetctl_env(&self, client: &CertFiles) -> Vec<(String, String)> {
        vec![
            ("FLEETCTL_CA_FILE".into(), self.ca.cert().display().to_string()),
            ("FLEETCTL_CERT_FILE".into(), client.cert.display().to_string()),
            ("FLEETCTL_KEY_FILE".into(), client.key.display().to_string()),
        ]
    }
}

/// A TLS client configuration (rustls on `ring`) trusting `ca` and presenting `client`: the harness's own API
/// probe and tests that speak raw HTTPS to fleetd.
pub fn client_config(ca: &Path, client: Option<&CertFiles>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        roots.add(cert.map_err(|e| format!("{}: {e}", ca.display()))?).map_err(|e| e.to_string())?;
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
    match client {
        None => Ok(builder.with_no_client_auth()),
        Some(files) => {
            let chain = CertificateDer::pem_file_iter(&files.cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", files.cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| format!("{}: {e}", files.key.display()))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_pki_writes_a_ca_and_role_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let pki = ClusterPki::new(dir.path(), "run-etcd").unwrap();
        assert!(pki.ca.cert().is_file() && pki.etcd.cert.is_file() && pki.admin.key.is_file());
        let fleetd = pki.fleetd("m1", "run-m1", "172.18.0.3").unwrap();
        assert!(fleetd.cert_pem().unwrap().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(client_config(pki.ca.cert(), Some(&pki.read)).is_ok());
        let env = pki.fleetctl_env(&pki.admin);
        assert_eq!(env[2], ("FLEETCTL_KEY_FILE".to_string(), pki.admin.key.display().to_string()));
    }
}

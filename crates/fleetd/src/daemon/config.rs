//! fleetd configuration (spec §2): built-in defaults, then the config file, then `FLEET_*` environment variables.
//! A value that does not parse for its option's type is ignored with a warning and the previous value kept, as the
//! original did; options fleetd no longer supports are reported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ini;
use fleet_core::go::{DurationError, parse_duration};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/fleet/fleet.conf";

/// Errors that stop fleetd from starting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("Unable to use config file {path}: {source}")]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("Provided config {0} is a directory, not a file")]
    IsDirectory(PathBuf),
    #[error("config file {path}: {source}")]
    Syntax { path: PathBuf, source: ini::IniError },
    #[error("Failed creating Server: agent_ttl: {0}")]
    AgentTtl(DurationError),
    #[error("API TLS: {0}")]
    ApiTls(String),
}

/// Every option of spec §2.3, plus `api_listeners` (sockets fleetd binds itself when systemd passes none).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub verbosity: i64,
    pub etcd_servers: Vec<String>,
    pub etcd_username: String,
    pub etcd_password: String,
    pub etcd_keyfile: String,
    pub etcd_certfile: String,
    pub etcd_cafile: String,
    pub etcd_key_prefix: String,
    /// Seconds.
    pub etcd_request_timeout: f64,
    /// Seconds; the engine lease lasts five of these.
    pub engine_reconcile_interval: f64,
    pub public_ip: String,
    pub metadata: BTreeMap<String, String>,
    /// Go duration text; checked by [`Config::agent_ttl`].
    pub agent_ttl: String,
    pub units_directory: String,
    pub systemd_user: bool,
    pub token_limit: i64,
    pub enable_grpc: bool,
    pub disable_engine: bool,
    /// The engine leader rebalances on its own when a machine joins or returns (docs/rebalance.md).
    pub engine_rebalance: bool,
    /// Keep a full view of the registry always (for the API and the cluster page), even once the cluster is at
    /// layout 2, where this fleetd otherwise holds one only while its engine leads or its API is in use.
    pub full_view: bool,
    pub disable_watches: bool,
    pub verify_units: bool,
    pub authorized_keys_file: String,
    /// Comma-separated `unix:///path` or `tcp://host:port` listeners used when no socket is passed by systemd.
    pub api_listeners: Vec<String>,
    /// PEM certificate (chain) the API serves on its TCP listeners; with `api_tls_key_file`, turns on TLS.
    pub api_tls_cert_file: String,
    /// PEM private key of `api_tls_cert_file`.
    pub api_tls_key_file: String,
    /// PEM CA bundle; when set, every TCP client must present a certificate it signed, and is authorised by role.
    pub api_tls_client_ca_file: String,
    /// Group (name or number) owning the Unix API socket fleetd binds; empty keeps root's group.
    pub api_socket_group: String,
    /// Permission bits of the Unix API socket fleetd binds.
    pub api_socket_mode: u32,
    /// The audit trail keeps at most this many records (the engine leader trims the oldest).
    pub audit_max_records: u64,
    /// Go duration text: the audit trail keeps records this long; checked when loaded.
    pub audit_max_age: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            verbosity: 0,
            etcd_servers: vec!["http://127.0.0.1:2379".into(), "http://127.0.0.1:4001".into()],
            etcd_username: String::new(),
            etcd_password: String::new(),
            etcd_keyfile: String::new(),
            etcd_certfile: String::new(),
            etcd_cafile: String::new(),
            etcd_key_prefix: "/_coreos.com/fleet/".into(),
            etcd_request_timeout: 1.0,
            engine_reconcile_interval: 2.0,
            public_ip: String::new(),
            metadata: BTreeMap::new(),
            agent_ttl: "30s".into(),
            units_directory: "/run/fleet/units/".into(),
            systemd_user: false,
            token_limit: 100,
            enable_grpc: false,
            disable_engine: false,
            engine_rebalance: false,
            full_view: false,
            disable_watches: false,
            verify_units: false,
            authorized_keys_file: String::new(),
            api_listeners: vec!["unix:///var/run/fleet.sock".into()],
            api_tls_cert_file: String::new(),
            api_tls_key_file: String::new(),
            api_tls_client_ca_file: String::new(),
            api_socket_group: String::new(),
            api_socket_mode: 0o660,
            audit_max_records: fleet_core::audit::Limits::default().max_records,
            audit_max_age: "720h".into(),
        }
    }
}

/// Where the configuration came from, for the start-up log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    Provided(PathBuf),
    Default(PathBuf),
    None,
}

impl ConfigSource {
    pub fn describe(&self) -> String {
        match self {
            ConfigSource::Provided(p) => format!("Using provided config file {}", p.display()),
            ConfigSource::Default(p) => format!("Using default config file {}", p.display()),
            ConfigSource::None => "No provided or default config file found - proceeding without".to_string(),
        }
    }
}

/// A loaded configuration and what the loader wants logged.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub source: ConfigSource,
    pub warnings: Vec<String>,
}

/// Loads defaults ← file ← environment. `provided` is the `--config` path, if any.
pub fn load(provided: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Loaded, ConfigError> {
    let (source, file_values) = read_file(provided)?;
    let mut config = Config::default();
    let mut warnings = Vec::new();
    for (key, value) in &file_values {
        apply(&mut config, key, value, &mut warnings);
    }
    for key in OPTION_NAMES {
        if let Some(value) = env.get(&format!("FLEET_{}", key.to_uppercase())) {
            apply(&mut config, key, value, &mut warnings);
        }
    }
    if config.verify_units {
        warnings.push("Config option verify_units is no longer supported - ignoring".into());
    }
    if !config.authorized_keys_file.is_empty() {
        warnings.push("Config option authorized_keys_file is no longer supported - ignoring".into());
    }
    if config.enable_grpc {
        warnings.push("Config option enable_grpc is not supported by this fleetd - ignoring".into());
        config.enable_grpc = false;
    }
    Ok(Loaded { config, source, warnings })
}

fn read_file(provided: Option<&Path>) -> Result<(ConfigSource, BTreeMap<String, String>), ConfigError> {
    let (path, source) = match provided {
        Some(p) => (p.to_path_buf(), ConfigSource::Provided(p.to_path_buf())),
        None if Path::new(DEFAULT_CONFIG_PATH).exists() => {
            (PathBuf::from(DEFAULT_CONFIG_PATH), ConfigSource::Default(PathBuf::from(DEFAULT_CONFIG_PATH)))
        }
        None => return Ok((ConfigSource::None, BTreeMap::new())),
    };
    if path.is_dir() {
        return Err(ConfigError::IsDirectory(path));
    }
    let text =
        std::fs::read_to_string(&path).map_err(|source| ConfigError::Unreadable { path: path.clone(), source })?;
    let values = ini::parse(&text).map_err(|source| ConfigError::Syntax { path, source })?;
    Ok((source, values))
}

/// Every fleet.conf option (also read as `FLEET_<OPTION>` from the environment), in spec order.
pub const OPTION_NAMES: [&str; 31] = [
    "verbosity",
    "etcd_servers",
    "etcd_username",
    "etcd_password",
    "etcd_keyfile",
    "etcd_certfile",
    "etcd_cafile",
    "etcd_key_prefix",
    "etcd_request_timeout",
    "engine_reconcile_interval",
    "public_ip",
    "metadata",
    "agent_ttl",
    "units_directory",
    "systemd_user",
    "token_limit",
    "enable_grpc",
    "disable_engine",
    "engine_rebalance",
    "full_view",
    "disable_watches",
    "verify_units",
    "authorized_keys_file",
    "api_listeners",
    "api_tls_cert_file",
    "api_tls_key_file",
    "api_tls_client_ca_file",
    "api_socket_group",
    "api_socket_mode",
    "audit_max_records",
    "audit_max_age",
];

fn apply(config: &mut Config, key: &str, value: &str, warnings: &mut Vec<String>) {
    let mut bad = |kind: &str| warnings.push(format!("ignoring {key}={value:?}: not a valid {kind}"));
    match key {
        "verbosity" => match value.trim().parse() {
            Ok(v) => config.verbosity = v,
            Err(_) => bad("integer"),
        },
        "token_limit" => match value.trim().parse::<i64>() {
            Ok(v) if v > 0 => config.token_limit = v,
            _ => bad("positive integer"),
        },
        "etcd_request_timeout" => match parse_seconds(value) {
            Some(v) => config.etcd_request_timeout = v,
            None => bad("number of seconds"),
        },
        "engine_reconcile_interval" => match parse_seconds(value) {
            Some(v) => config.engine_reconcile_interval = v,
            None => bad("number of seconds"),
        },
        "systemd_user" | "enable_grpc" | "disable_engine" | "engine_rebalance" | "full_view" | "disable_watches"
        | "verify_units" => match parse_go_bool(value) {
            Some(v) => *bool_field(config, key) = v,
            None => bad("boolean"),
        },
        "etcd_servers" => config.etcd_servers = parse_list(value),
        "api_listeners" => config.api_listeners = parse_list(value),
        "metadata" => config.metadata = parse_metadata(value),
        "etcd_username" => config.etcd_username = value.to_string(),
        "etcd_password" => config.etcd_password = value.to_string(),
        "etcd_keyfile" => config.etcd_keyfile = value.to_string(),
        "etcd_certfile" => config.etcd_certfile = value.to_string(),
        "etcd_cafile" => config.etcd_cafile = value.to_string(),
        "etcd_key_prefix" => config.etcd_key_prefix = value.to_string(),
        "public_ip" => config.public_ip = value.to_string(),
        "agent_ttl" => config.agent_ttl = value.to_string(),
        "units_directory" => config.units_directory = value.to_string(),
        "authorized_keys_file" => config.authorized_keys_file = value.to_string(),
        "api_tls_cert_file" => config.api_tls_cert_file = value.trim().to_string(),
        "api_tls_key_file" => config.api_tls_key_file = value.trim().to_string(),
        "api_tls_client_ca_file" => config.api_tls_client_ca_file = value.trim().to_string(),
        "api_socket_group" => config.api_socket_group = value.trim().to_string(),
        "audit_max_records" => match value.trim().parse::<u64>() {
            Ok(v) if v > 0 => config.audit_max_records = v,
            _ => bad("positive integer"),
        },
        "audit_max_age" => match parse_duration(value.trim()) {
            Ok(d) if !d.is_zero() => config.audit_max_age = value.trim().to_string(),
            _ => bad("positive Go duration (e.g. 720h)"),
        },
        "api_socket_mode" => match u32::from_str_radix(value.trim(), 8) {
            Ok(mode) if mode <= 0o777 => config.api_socket_mode = mode,
            _ => bad("octal permission mode (e.g. 0660)"),
        },
        _ => warnings.push(format!("ignoring unknown config option {key:?}")),
    }
}

fn bool_field<'a>(config: &'a mut Config, key: &str) -> &'a mut bool {
    match key {
        "systemd_user" => &mut config.systemd_user,
        "enable_grpc" => &mut config.enable_grpc,
        "disable_engine" => &mut config.disable_engine,
        "engine_rebalance" => &mut config.engine_rebalance,
        "full_view" => &mut config.full_view,
        "disable_watches" => &mut config.disable_watches,
        _ => &mut config.verify_units,
    }
}

fn parse_seconds(value: &str) -> Option<f64> {
    value.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0)
}

/// Go `strconv.ParseBool` spellings.
pub fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Comma-separated list; each item loses leading spaces, `[` and `"` and trailing spaces, `"` and `]`, so both
/// `["http://a:2379","http://b:2379"]` and `http://a:2379,http://b:2379` work.
pub fn parse_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|item| item.trim_start_matches([' ', '[', '"']).trim_end_matches([' ', '"', ']']).to_string())
        .filter(|item| !item.is_empty())
        .collect()
}

/// `k=v[,k=v...]`: split on `,`, then on the first `=`; key and value trimmed; items without `=` ignored; later
/// duplicates win.
pub fn parse_metadata(value: &str) -> BTreeMap<String, String> {
    value
        .split(',')
        .filter_map(|item| item.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

impl Config {
    /// The presence TTL; an unparsable value stops fleetd (spec §1.3 step 1).
    pub fn agent_ttl(&self) -> Result<Duration, ConfigError> {
        match parse_duration(&self.agent_ttl) {
            Ok(d) if !d.is_zero() => Ok(d),
            Ok(_) => Err(ConfigError::AgentTtl(DurationError(self.agent_ttl.clone()))),
            Err(e) => Err(ConfigError::AgentTtl(e)),
        }
    }

    /// How much of the audit trail the engine leader keeps. `audit_max_age` was checked when loaded (a bad value
    /// kept the default).
    pub fn audit_limits(&self) -> fleet_core::audit::Limits {
        let default = fleet_core::audit::Limits::default();
        let age = parse_duration(&self.audit_max_age).map_or(default.max_age_ms, |d| d.as_millis() as u64);
        fleet_core::audit::Limits { max_records: self.audit_max_records, max_age_ms: age }
    }

    pub fn engine_reconcile_interval(&self) -> Duration {
        Duration::from_secs_f64(self.engine_reconcile_interval)
    }

    /// The API's TLS files, if TLS is configured: a certificate needs its key and the other way round, and a
    /// client CA needs both.
    pub fn api_tls(&self) -> Result<Option<fleet_tls::ServerFiles>, ConfigError> {
        let given = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        match (given(&self.api_tls_cert_file), given(&self.api_tls_key_file), given(&self.api_tls_client_ca_file)) {
            (Some(cert), Some(key), client_ca) => Ok(Some(fleet_tls::ServerFiles { cert, key, client_ca })),
            (None, None, None) => Ok(None),
            (Some(_), None, _) => {
                Err(ConfigError::ApiTls("api_tls_cert_file is set but api_tls_key_file is not".into()))
            }
            (None, Some(_), _) => {
                Err(ConfigError::ApiTls("api_tls_key_file is set but api_tls_cert_file is not".into()))
            }
            (None, None, Some(_)) => Err(ConfigError::ApiTls(
                "api_tls_client_ca_file needs api_tls_cert_file and api_tls_key_file (client certificates are only \
                 asked for over TLS)"
                    .into(),
            )),
        }
    }

    pub fn etcd_request_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.etcd_request_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn load_text(text: &str, environment: &[(&str, &str)]) -> Loaded {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.conf");
        std::fs::write(&path, text).unwrap();
        load(Some(&path), &env(environment)).unwrap()
    }

    #[test]
    fn file_values_override_defaults_and_env_overrides_file() {
        let text = "verbosity=2\netcd_servers=[\"http://172.18.0.1:4001\"]\netcd_key_prefix=/fleet_functional/smoke\n\
                    public_ip=172.18.1.1\nagent_ttl=3s\nmetadata=hostname=a\n";
        let loaded = load_text(text, &[("FLEET_METADATA", "hostname=smoke1,role=x"), ("FLEET_PUBLIC_IP", "")]);
        let c = &loaded.config;
        assert_eq!(c.verbosity, 2);
        assert_eq!(c.etcd_servers, vec!["http://172.18.0.1:4001"]);
        assert_eq!(c.etcd_key_prefix, "/fleet_functional/smoke");
        assert_eq!(c.public_ip, "", "an empty env var still overrides");
        assert_eq!(c.agent_ttl().unwrap(), Duration::from_secs(3));
        assert_eq!(c.metadata, env(&[("hostname", "smoke1"), ("role", "x")]));
    }

    #[test]
    fn unparsable_values_are_ignored_with_a_warning() {
        let loaded = load_text("verbosity=abc\ndisable_engine=yes\ntoken_limit=5\n", &[]);
        assert_eq!(loaded.config.verbosity, 0);
        assert!(!loaded.config.disable_engine);
        assert_eq!(loaded.config.token_limit, 5);
        assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
    }

    #[test]
    fn deprecated_options_are_reported() {
        let loaded = load_text("verify_units=true\nauthorized_keys_file=/x\nenable_grpc=true\n", &[]);
        assert!(loaded.warnings.iter().any(|w| w == "Config option verify_units is no longer supported - ignoring"));
        assert!(
            loaded.warnings.iter().any(|w| w == "Config option authorized_keys_file is no longer supported - ignoring")
        );
        assert!(!loaded.config.enable_grpc);
    }

    #[test]
    fn list_and_metadata_forms() {
        assert_eq!(parse_list("http://a:2379, http://b:2379"), vec!["http://a:2379", "http://b:2379"]);
        assert_eq!(parse_list("[\"http://a:2379\",\"http://b:2379\"]"), vec!["http://a:2379", "http://b:2379"]);
        assert_eq!(parse_metadata(" a = 1 ,b,c=x=y, a=2"), env(&[("a", "2"), ("c", "x=y")]));
    }

    #[test]
    fn api_tls_and_socket_options() {
        let loaded = load_text(
            "api_tls_cert_file=/etc/fleet/api.pem\napi_tls_key_file=/etc/fleet/api-key.pem\napi_socket_mode=0640\n",
            &[("FLEET_API_TLS_CLIENT_CA_FILE", "/etc/fleet/ca.pem"), ("FLEET_API_SOCKET_GROUP", "fleet")],
        );
        let c = &loaded.config;
        assert_eq!(
            c.api_tls().unwrap(),
            Some(fleet_tls::ServerFiles {
                cert: "/etc/fleet/api.pem".into(),
                key: "/etc/fleet/api-key.pem".into(),
                client_ca: Some("/etc/fleet/ca.pem".into()),
            })
        );
        assert_eq!((c.api_socket_mode, c.api_socket_group.as_str()), (0o640, "fleet"));
        assert_eq!(Config::default().api_socket_mode, 0o660);
        assert_eq!(Config::default().api_tls().unwrap(), None);

        let bad_mode = load_text("api_socket_mode=0999\n", &[]);
        assert_eq!(bad_mode.config.api_socket_mode, 0o660);
        assert!(bad_mode.warnings[0].contains("octal permission mode"), "{:?}", bad_mode.warnings);

        let half = Config { api_tls_cert_file: "/c.pem".into(), ..Config::default() };
        assert_eq!(
            half.api_tls().unwrap_err().to_string(),
            "API TLS: api_tls_cert_file is set but api_tls_key_file is not"
        );
        let ca_only = Config { api_tls_client_ca_file: "/ca.pem".into(), ..Config::default() };
        assert!(ca_only.api_tls().unwrap_err().to_string().contains("api_tls_client_ca_file needs"));
    }

    #[test]
    fn audit_limits_come_from_fleet_conf_and_bad_values_keep_the_defaults() {
        let defaults = Config::default().audit_limits();
        assert_eq!(defaults, fleet_core::audit::Limits { max_records: 10_000, max_age_ms: 30 * 24 * 3600 * 1000 });
        let loaded = load_text("audit_max_records=500\n", &[("FLEET_AUDIT_MAX_AGE", "36h")]);
        let limits = loaded.config.audit_limits();
        assert_eq!((limits.max_records, limits.max_age_ms), (500, 36 * 3600 * 1000));
        let bad = load_text("audit_max_records=0\naudit_max_age=soon\n", &[]);
        assert_eq!(bad.config.audit_limits(), defaults);
        assert_eq!(
            bad.warnings,
            [
                "ignoring audit_max_age=\"soon\": not a valid positive Go duration (e.g. 720h)",
                "ignoring audit_max_records=\"0\": not a valid positive integer",
            ]
        );
    }

    #[test]
    fn bad_agent_ttl_fails_startup() {
        let c = Config { agent_ttl: "30".into(), ..Config::default() };
        assert_eq!(
            c.agent_ttl().unwrap_err().to_string(),
            "Failed creating Server: agent_ttl: time: invalid duration \"30\""
        );
    }

    #[test]
    fn missing_or_directory_config_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(Some(dir.path()), &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().ends_with("is a directory, not a file"), "{err}");
        let err = load(Some(&dir.path().join("missing")), &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().starts_with("Unable to use config file"), "{err}");
    }
}

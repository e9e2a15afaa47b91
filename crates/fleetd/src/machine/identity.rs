//! Who this machine is (spec §1.10): its ID from `/etc/machine-id`, its public IP (configured, or the first global
//! unicast IPv4 address of the interface carrying the default route), and its static metadata.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use fleet_core::model::MachineState;

pub const MACHINE_ID_PATH: &str = "/etc/machine-id";

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("unable to determine local machine ID: {path}: {reason}")]
    MachineId { path: String, reason: String },
}

/// Reads and trims the machine ID; a missing or empty file is fatal for fleetd.
pub fn read_machine_id(path: &Path) -> Result<String, IdentityError> {
    let fail = |reason: String| IdentityError::MachineId { path: path.display().to_string(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let id = text.trim();
    if id.is_empty() {
        return Err(fail("file is empty".into()));
    }
    Ok(id.to_string())
}

/// The interface named by the default route in `/proc/net/route` text (destination `00000000`).
pub fn default_route_interface(proc_net_route: &str) -> Option<String> {
    proc_net_route.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace();
        let iface = fields.next()?;
        let destination = fields.next()?;
        (destination == "00000000").then(|| iface.to_string())
    })
}

/// True for addresses Go's `IP.IsGlobalUnicast` accepts (IPv4 only).
pub fn is_global_unicast(ip: Ipv4Addr) -> bool {
    !(ip.is_loopback() || ip.is_link_local() || ip.is_multicast() || ip.is_unspecified() || ip.is_broadcast())
}

/// Auto-detected public IP, or empty when it cannot be determined.
pub fn detect_public_ip() -> String {
    let Some(iface) = std::fs::read_to_string("/proc/net/route").ok().and_then(|t| default_route_interface(&t)) else {
        return String::new();
    };
    let Ok(addrs) = if_addrs::get_if_addrs() else {
        return String::new();
    };
    addrs
        .into_iter()
        .filter(|a| a.name == iface)
        .find_map(|a| match a.ip() {
            std::net::IpAddr::V4(v4) if is_global_unicast(v4) => Some(v4.to_string()),
            _ => None,
        })
        .unwrap_or_default()
}

/// This machine's published state: configured values win over detected ones.
pub fn local_state(
    id: String,
    public_ip: &str,
    metadata: BTreeMap<String, String>,
    disable_engine: bool,
) -> MachineState {
    let public_ip = if public_ip.is_empty() { detect_public_ip() } else { public_ip.to_string() };
    MachineState {
        id,
        public_ip,
        metadata,
        version: fleet_core::version::VERSION.to_string(),
        disable_engine,
        cordoned: false,
        load_fault: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_route_interface_from_proc_net_route() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n\
                     eth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\n\
                     eth1\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\n";
        assert_eq!(default_route_interface(table).as_deref(), Some("eth1"));
        assert_eq!(default_route_interface("Iface\tDestination\n"), None);
    }

    #[test]
    fn global_unicast_excludes_special_addresses() {
        assert!(is_global_unicast("172.17.0.2".parse().unwrap()));
        assert!(!is_global_unicast("127.0.0.1".parse().unwrap()));
        assert!(!is_global_unicast("169.254.1.1".parse().unwrap()));
        assert!(!is_global_unicast("0.0.0.0".parse().unwrap()));
    }

    #[test]
    fn machine_id_is_trimmed_and_must_not_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("machine-id");
        std::fs::write(&path, "8363165e6276f500b71169eca9b3f76b\n").unwrap();
        assert_eq!(read_machine_id(&path).unwrap(), "8363165e6276f500b71169eca9b3f76b");
        std::fs::write(&path, "\n").unwrap();
        assert!(read_machine_id(&path).unwrap_err().to_string().starts_with("unable to determine local machine ID"));
    }
}

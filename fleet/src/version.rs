//! The version string fleetd and fleetctl report. It must parse as semver after stripping the leading `v`.

/// `v<crate version>`, e.g. `v0.1.0`.
pub const VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_has_v_prefix_and_three_numeric_parts() {
        let rest = VERSION.strip_prefix('v').expect("leading v");
        let parts: Vec<&str> = rest.split('.').collect();
        assert_eq!(parts.len(), 3, "{VERSION}");
        assert!(parts.iter().all(|p| p.parse::<u64>().is_ok()), "{VERSION}");
    }
}

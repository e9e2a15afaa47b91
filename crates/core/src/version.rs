//! The version string fleetd and fleetctl report. It must parse as semver after stripping the leading `v`.

use std::cmp::Ordering;
use std::fmt;

/// `v<crate version>`, e.g. `v0.1.0`.
pub const VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));

/// A semantic version as go-semver reads it (`MAJOR.MINOR.PATCH[-PRERELEASE][+METADATA]`), here also accepting a
/// leading `v` since that is how fleet versions are written. Ordered by semver precedence; metadata is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemVer {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    /// Dot-separated pre-release identifiers (`15-g45224983` for `v1.0.0-15-g45224983`); empty for a release.
    pub pre_release: String,
}

impl SemVer {
    /// `None` when `text` is not a version (such machines are ignored by the version check).
    pub fn parse(text: &str) -> Option<SemVer> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let text = text.split_once('+').map_or(text, |(v, _)| v);
        let (core, pre_release) = text.split_once('-').unwrap_or((text, ""));
        let mut parts = core.splitn(3, '.').map(|p| p.parse::<u64>().ok());
        let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
        Some(SemVer { major, minor, patch, pre_release: pre_release.to_string() })
    }
}

impl fmt::Display for SemVer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre_release.is_empty() {
            write!(f, "-{}", self.pre_release)?;
        }
        Ok(())
    }
}

impl Ord for SemVer {
    fn cmp(&self, other: &Self) -> Ordering {
        let core = (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        core.then_with(|| match (self.pre_release.is_empty(), other.pre_release.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => cmp_pre_release(&self.pre_release, &other.pre_release),
        })
    }
}

impl PartialOrd for SemVer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Identifier by identifier: numbers numerically and below words, words in ASCII order; a shorter list that is a
/// prefix of the other comes first.
fn cmp_pre_release(a: &str, b: &str) -> Ordering {
    let mut a = a.split('.');
    let mut b = b.split('.');
    loop {
        match (a.next(), b.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

/// The banner fleetctl's etcd driver prints on stderr when a registered fleetd is newer than itself (spec §9.3).
pub fn old_version_warning(mine: &SemVer, latest: &SemVer) -> String {
    format!(
        "####################################################################\n\
         WARNING: fleetctl ({mine}) is older than the latest registered\n\
         version of fleet found in the cluster ({latest}). You are strongly\n\
         recommended to upgrade fleetctl to prevent incompatibility issues.\n\
         ####################################################################\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_has_v_prefix_and_three_numeric_parts() {
        let rest = VERSION.strip_prefix('v').expect("leading v");
        let parts: Vec<&str> = rest.split('.').collect();
        assert_eq!(parts.len(), 3, "{VERSION}");
        assert!(parts.iter().all(|p| p.parse::<u64>().is_ok()), "{VERSION}");
        assert!(SemVer::parse(VERSION).is_some());
    }

    #[test]
    fn semver_precedence() {
        let v = |s: &str| SemVer::parse(s).unwrap_or_else(|| panic!("{s}"));
        let ordered = ["0.9.0", "v1.0.0-15-g45224983", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0"];
        // "15-g45224983" is one word identifier (not a number): words compare in ASCII order, so it sorts first.
        let mut sorted: Vec<SemVer> = ordered.iter().rev().map(|s| v(s)).collect();
        sorted.sort();
        let names: Vec<String> = sorted.iter().map(|s| s.to_string()).collect();
        assert_eq!(names, ["0.9.0", "1.0.0-15-g45224983", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0"]);
        assert!(v("1.10.0") > v("1.9.9"));
        assert_eq!(v("v1.2.3+build.7"), v("1.2.3"));
        for bad in ["", "v1", "1.2", "1.x.3", "version"] {
            assert_eq!(SemVer::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn old_version_banner_matches_the_original() {
        let text = old_version_warning(&SemVer::parse("v0.1.0").unwrap(), &SemVer::parse("v1.0.0").unwrap());
        assert_eq!(
            text,
            "####################################################################\n\
             WARNING: fleetctl (0.1.0) is older than the latest registered\n\
             version of fleet found in the cluster (1.0.0). You are strongly\n\
             recommended to upgrade fleetctl to prevent incompatibility issues.\n\
             ####################################################################\n"
        );
    }
}

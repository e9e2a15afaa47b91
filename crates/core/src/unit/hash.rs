//! The unit hash: SHA-1 of a unit's canonical text (spec §4.3). The registry keys unit bodies by it, fleetctl
//! shows it, and `--replace` compares units with it. [`UnitHash::of`] is the only function that computes it.

use std::fmt;
use std::str::FromStr;

use sha1::{Digest, Sha1};

/// SHA-1 of a unit's canonical text.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitHash([u8; 20]);

/// A string that is not 40 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid unit hash {input:?}: expected 40 hex digits")]
pub struct HashError {
    pub input: String,
}

impl UnitHash {
    /// Hash of a canonical unit text, as produced by [`crate::unit::UnitFile::canonical`].
    pub fn of(canonical: &str) -> UnitHash {
        UnitHash(Sha1::digest(canonical.as_bytes()).into())
    }

    pub fn from_bytes(bytes: [u8; 20]) -> UnitHash {
        UnitHash(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// 40 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first 7 hex digits, as `fleetctl list-unit-files` shows without `--full`.
    pub fn short(&self) -> String {
        let mut full = self.to_hex();
        full.truncate(7);
        full
    }
}

impl fmt::Display for UnitHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for UnitHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnitHash({})", self.to_hex())
    }
}

impl FromStr for UnitHash {
    type Err = HashError;

    /// Accepts upper- or lowercase hex, as the original's `HashFromHexString` does.
    fn from_str(s: &str) -> Result<UnitHash, HashError> {
        let mut bytes = [0u8; 20];
        match hex::decode_to_slice(s, &mut bytes) {
            Ok(()) => Ok(UnitHash(bytes)),
            Err(_) => Err(HashError { input: s.to_string() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_vectors() {
        let cases = [
            ("[Service]\nExecStart=/bin/sleep 100\n", "1c6fb6f3684bafb0c173d8b8b957ceff031180c1"),
            ("[Unit]\nDescription=some description\n", "a0f275d46bc6ee0eca06be7c339913c07d99c0c7"),
            ("", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        ];
        for (text, hex) in cases {
            let h = UnitHash::of(text);
            assert_eq!(h.to_hex(), hex);
            assert_eq!(h.to_string(), hex);
            assert_eq!(h.short(), &hex[..7]);
            assert_eq!(hex.parse::<UnitHash>().unwrap(), h);
            assert_eq!(hex.to_uppercase().parse::<UnitHash>().unwrap(), h);
        }
    }

    #[test]
    fn rejects_malformed_hex() {
        for bad in [
            "",
            "abc",
            "da39a3ee5e6b4b0d3255bfef95601890afd8070",
            "da39a3ee5e6b4b0d3255bfef95601890afd807090",
            "zz39a3ee5e6b4b0d3255bfef95601890afd80709",
        ] {
            let err = bad.parse::<UnitHash>().unwrap_err();
            assert_eq!(err.input, bad);
        }
    }
}

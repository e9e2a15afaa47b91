//! Fixture units (`fixtures/units/`, spec §11.4) and temporary unit files.

use std::path::PathBuf;

/// Overrides the fixture directory (default: this workspace's `fixtures/units`).
pub const DIR_ENV: &str = "FLEET_FIXTURES_DIR";

/// The directory holding the fixture units.
pub fn dir() -> PathBuf {
    match std::env::var_os(DIR_ENV) {
        Some(d) => PathBuf::from(d),
        None => {
            let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/units");
            d.canonicalize().unwrap_or(d)
        }
    }
}

/// The absolute path of fixture `name` as a string for fleetctl (instances of a fixture template resolve through the
/// template in the same directory, like the original's suite).
pub fn path(name: &str) -> String {
    dir().join(name).to_string_lossy().into_owned()
}

/// The text of fixture `name`.
pub fn read(name: &str) -> Result<String, String> {
    let p = dir().join(name);
    std::fs::read_to_string(&p).map_err(|e| format!("fixture {}: {e}", p.display()))
}

/// A unit file in a temporary directory of its own, removed on drop (`util.TempUnit`); its file name is the unit name.
pub struct TempUnit {
    dir: tempfile::TempDir,
    name: String,
}

impl TempUnit {
    /// Writes `contents` as `<tmpdir>/<name>`.
    pub fn named(name: &str, contents: &str) -> Result<Self, String> {
        let dir =
            tempfile::Builder::new().prefix("fleet-conformance-").tempdir().map_err(|e| format!("tempdir: {e}"))?;
        std::fs::write(dir.path().join(name), contents).map_err(|e| format!("write {name}: {e}"))?;
        Ok(TempUnit { dir, name: name.to_string() })
    }

    /// A unit with a fresh random name `fleet-test-unit-<hex>.service`.
    pub fn new(contents: &str) -> Result<Self, String> {
        let n: u64 =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Self::named(&format!("fleet-test-unit-{:x}.service", n ^ u64::from(std::process::id())), contents)
    }

    /// The unit name (the file name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The absolute path, for fleetctl.
    pub fn path(&self) -> String {
        self.dir.path().join(&self.name).to_string_lossy().into_owned()
    }

    /// Writes another file next to it (e.g. a template for `--replace`), returning its path.
    pub fn sibling(&self, name: &str, contents: &str) -> Result<String, String> {
        let p = self.dir.path().join(name);
        std::fs::write(&p, contents).map_err(|e| format!("write {name}: {e}"))?;
        Ok(p.to_string_lossy().into_owned())
    }
}

/// A directory for generated unit files, removed on drop.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    pub fn new() -> Result<Self, String> {
        tempfile::Builder::new()
            .prefix("fleet-conformance-")
            .tempdir()
            .map(TempDir)
            .map_err(|e| format!("tempdir: {e}"))
    }

    /// Writes `<dir>/<name>` and returns its absolute path.
    pub fn write(&self, name: &str, contents: &str) -> Result<String, String> {
        let p = self.0.path().join(name);
        std::fs::write(&p, contents).map_err(|e| format!("write {name}: {e}"))?;
        Ok(p.to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_fixture_of_the_catalogue_exists() {
        for f in ["hello.service", "hello@.service", "global.service", "conflict.4.service", "discovery.service"] {
            assert!(super::read(f).is_ok(), "{f}");
        }
    }

    #[test]
    fn hello_is_canonical() {
        let t = super::read("hello.service").unwrap();
        assert!(t.starts_with("[Service]\nExecStart=") && t.lines().count() == 2, "{t}");
    }
}

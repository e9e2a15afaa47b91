//! Fixture units (`fixtures/units/`, spec §11.4) and temporary unit files.
//!
//! The fixtures are embedded in the crate at build time (`build.rs`), so an installed `fleet-conformance` needs no
//! source tree. fleetctl reads unit files from disk (and resolves `foo@1.service` through `foo@.service` in the same
//! directory), so the first [`path`] writes the embedded set into a directory of this process, which
//! [`remove_materialized`] removes at the end of a run. `FLEET_FIXTURES_DIR` replaces the embedded set with a
//! directory of one's own.

use std::path::PathBuf;
use std::sync::OnceLock;

include!(concat!(env!("OUT_DIR"), "/fixtures.rs"));

/// Overrides the fixture directory (default: the fixtures embedded from this workspace's `fixtures/units`).
pub const DIR_ENV: &str = "FLEET_FIXTURES_DIR";

/// The directory the embedded fixtures were written to, once asked for.
static MATERIALIZED: OnceLock<PathBuf> = OnceLock::new();

/// The directory holding the fixture units: `FLEET_FIXTURES_DIR`, or the embedded set written to a temporary
/// directory of this process.
pub fn dir() -> PathBuf {
    match std::env::var_os(DIR_ENV) {
        Some(d) => PathBuf::from(d),
        None => MATERIALIZED.get_or_init(materialize).clone(),
    }
}

/// Writes [`EMBEDDED`] into a fresh temporary directory. A machine that cannot write one cannot run the suite
/// (fleetctl needs files), so failing here is a panic naming the directory.
fn materialize() -> PathBuf {
    let dir = tempfile::Builder::new()
        .prefix("fleet-conformance-fixtures-")
        .tempdir()
        .unwrap_or_else(|e| panic!("a temporary directory for the fixture units: {e}"))
        .keep();
    for (name, text) in EMBEDDED {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("writing fixture {}: {e}", p.display()));
    }
    dir
}

/// Removes the directory [`dir`] wrote the embedded fixtures to, if it did (the runners call this at the end).
pub fn remove_materialized() {
    if let Some(d) = MATERIALIZED.get() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Whether `name` is one of the fixture units (a template's instances count as the template's).
pub fn is_fixture(name: &str) -> bool {
    let template = crate::names::template_of(name);
    EMBEDDED.iter().any(|(n, _)| *n == name || Some(*n) == template.as_deref())
}

/// The absolute path of fixture `name` as a string for fleetctl (instances of a fixture template resolve through the
/// template in the same directory, like the original's suite).
pub fn path(name: &str) -> String {
    dir().join(name).to_string_lossy().into_owned()
}

/// The text of fixture `name`.
pub fn read(name: &str) -> Result<String, String> {
    if std::env::var_os(DIR_ENV).is_none() {
        return EMBEDDED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| text.to_string())
            .ok_or_else(|| format!("fixture {name}: not among the embedded fixture units"));
    }
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
    fn the_embedded_set_is_the_directory_and_is_written_out_whole() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/units");
        let mut on_disk: Vec<String> =
            std::fs::read_dir(&src).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        on_disk.sort();
        let embedded: Vec<&str> = super::EMBEDDED.iter().map(|(n, _)| *n).collect();
        assert_eq!(embedded, on_disk, "build.rs embeds every file of fixtures/units");
        for (name, text) in super::EMBEDDED {
            assert_eq!(std::fs::read_to_string(src.join(name)).unwrap(), *text, "{name} as embedded");
        }
        if std::env::var_os(super::DIR_ENV).is_none() {
            let written = std::fs::read_to_string(super::path("hello@.service")).unwrap();
            super::remove_materialized();
            assert_eq!(written, super::read("hello@.service").unwrap());
            assert!(!super::dir().join("hello@.service").exists(), "removed at the end");
        }
    }

    #[test]
    fn hello_is_canonical() {
        let t = super::read("hello.service").unwrap();
        assert!(t.starts_with("[Service]\nExecStart=") && t.lines().count() == 2, "{t}");
    }
}

//! The unit files the agent owns in `units_directory` (default `/run/fleet/units/`, spec §7.4): writing them
//! (mode 0644, atomically), removing them, listing the recognised ones at start, and the hash recorded for each.
//! The set of files here is the agent's "loaded" set.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tracing::{debug, info, warn};

use super::error::AgentError;
use fleet_core::unit::{UnitFile, UnitHash, has_recognized_type};

/// True for a plain file name of a unit type the agent manages (`unit::RECOGNIZED_TYPES`, spec §4.4); files of
/// other types, and hidden files (the agent's temporary files), are ignored.
pub fn is_recognised(name: &str) -> bool {
    !name.starts_with('.') && has_recognized_type(name)
}

/// Hash recorded for a unit file found on disk at start (spec §7.3: "computed by parsing the file"): the unit hash
/// of its parsed, canonical form, so a file is hashed exactly as the registry hashes units. A file that does not
/// parse gets the hash of its raw text (it then differs from every registry hash and is replaced or unloaded).
pub fn file_hash(bytes: &[u8]) -> String {
    match UnitFile::parse_bytes(bytes) {
        Ok(file) => file.hash().to_hex(),
        Err(_) => UnitHash::of(&String::from_utf8_lossy(bytes)).to_hex(),
    }
}

/// The units directory and the hash recorded for each unit file in it.
#[derive(Debug)]
pub struct UnitsDir {
    dir: PathBuf,
    hashes: BTreeMap<String, String>,
}

impl UnitsDir {
    /// Create the directory (0755, recursively) and record the hash of every recognised unit file already in it.
    pub fn open(dir: impl Into<PathBuf>) -> Result<UnitsDir, AgentError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|source| AgentError::Io { op: "creating", path: dir.clone(), source })?;
        let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o755));
        let mut units = UnitsDir { dir, hashes: BTreeMap::new() };
        units.rescan()?;
        Ok(units)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Re-read the directory: every recognised regular file with its hash. Returns the unit names found.
    pub fn rescan(&mut self) -> Result<Vec<String>, AgentError> {
        let entries = fs::read_dir(&self.dir).map_err(|source| AgentError::Io {
            op: "listing",
            path: self.dir.clone(),
            source,
        })?;
        let mut hashes = BTreeMap::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            if !is_recognised(&name) {
                warn!(file = %name, dir = %self.dir.display(), "Found unrecognized file in units directory, ignoring");
                continue;
            }
            let path = entry.path();
            match fs::read(&path) {
                Ok(bytes) => {
                    hashes.insert(name, file_hash(&bytes));
                }
                Err(e) => warn!(file = %path.display(), err = %e, "cannot read unit file, ignoring"),
            }
        }
        self.hashes = hashes;
        Ok(self.hashes.keys().cloned().collect())
    }

    /// Recorded hash of each unit file, by unit name.
    pub fn hashes(&self) -> &BTreeMap<String, String> {
        &self.hashes
    }

    pub fn hash_of(&self, name: &str) -> Option<&str> {
        self.hashes.get(name).map(String::as_str)
    }

    /// Where `name`'s file lives; refuses names that are not plain, recognised unit file names.
    pub fn path_of(&self, name: &str) -> Result<PathBuf, AgentError> {
        let plain = !name.is_empty() && !name.contains(['/', '\0']) && !name.starts_with('.');
        if !plain || !is_recognised(name) {
            return Err(AgentError::InvalidName(name.to_string()));
        }
        Ok(self.dir.join(name))
    }

    /// Write canonical unit `text` as `name` (0644, via a temporary file and rename) and record its hash. Returns
    /// whether the file content changed (false when an identical file was already there).
    pub fn write(&mut self, name: &str, text: &str) -> Result<bool, AgentError> {
        let path = self.path_of(name)?;
        let hash = UnitHash::of(text).to_hex();
        if fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
            self.hashes.insert(name.to_string(), hash);
            return Ok(false);
        }
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let io = |op, source| AgentError::Io { op, path: tmp.clone(), source };
        let written = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(|e| io("creating", e))
            .and_then(|mut file| {
                file.write_all(text.as_bytes()).map_err(|e| io("writing", e))?;
                file.set_permissions(fs::Permissions::from_mode(0o644)).map_err(|e| io("setting mode of", e))
            })
            .and_then(|()| {
                fs::rename(&tmp, &path).map_err(|source| AgentError::Io {
                    op: "renaming into",
                    path: path.clone(),
                    source,
                })
            });
        if let Err(e) = written {
            // A partial temporary file would only hold on to the space that ran out (issue 37).
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        info!(unit = %name, bytes = text.len(), "Writing systemd unit");
        self.hashes.insert(name.to_string(), hash);
        Ok(true)
    }

    /// Delete `name`'s file (a missing file is fine) and forget its hash.
    pub fn remove(&mut self, name: &str) -> Result<(), AgentError> {
        let path = self.path_of(name)?;
        match fs::remove_file(&path) {
            Ok(()) => debug!(unit = %name, "removed unit file"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(AgentError::Io { op: "removing", path, source }),
        }
        self.hashes.remove(name);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_matches_the_spec_vectors() {
        assert_eq!(file_hash(b"[Service]\nExecStart=/bin/sleep 100\n"), "1c6fb6f3684bafb0c173d8b8b957ceff031180c1");
        assert_eq!(file_hash(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }

    #[test]
    fn files_on_disk_are_hashed_in_canonical_form() {
        // Comments, blank lines and spacing around `=` vanish in the canonical text (spec §4.3).
        let hand_edited = b"# edited\n[Service]\n\nExecStart = /bin/sleep 100\n";
        assert_eq!(file_hash(hand_edited), "1c6fb6f3684bafb0c173d8b8b957ceff031180c1");
    }

    #[test]
    fn recognised_types_only() {
        for ok in ["a.service", "a.socket", "a.timer", "a.path", "a.device", "a.mount", "a.automount", "a@1.service"] {
            assert!(is_recognised(ok), "{ok}");
        }
        for bad in ["a.target", "a.slice", "service", ".service", "a.service.tmp", "a.SERVICE"] {
            assert!(!is_recognised(bad), "{bad}");
        }
    }

    #[test]
    fn writes_with_mode_0644_and_records_the_hash() {
        let tmp = tempfile::tempdir().unwrap();
        let mut units = UnitsDir::open(tmp.path().join("units")).unwrap();
        let text = "[Service]\nExecStart=/bin/sleep 100\n";
        assert!(units.write("hello.service", text).unwrap());
        let path = tmp.path().join("units/hello.service");
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        assert_eq!(units.hash_of("hello.service"), Some("1c6fb6f3684bafb0c173d8b8b957ceff031180c1"));
        assert!(!units.write("hello.service", text).unwrap(), "identical content is no change");
        assert!(units.write("hello.service", "[Service]\nExecStart=/bin/true\n").unwrap());
        let h = UnitHash::of("[Service]\nExecStart=/bin/true\n").to_hex();
        assert_eq!(units.hash_of("hello.service"), Some(h.as_str()));
    }

    #[test]
    fn lists_recognised_files_at_start_and_ignores_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("a.service"), "[Service]\nExecStart=/bin/sleep 100\n").unwrap();
        fs::write(tmp.path().join("b.timer"), "").unwrap();
        fs::write(tmp.path().join("c.target"), "").unwrap();
        fs::write(tmp.path().join(".a.service.tmp"), "").unwrap();
        fs::create_dir(tmp.path().join("d.service")).unwrap();
        let units = UnitsDir::open(tmp.path()).unwrap();
        let hashes: Vec<(&str, &str)> = units.hashes().iter().map(|(n, h)| (n.as_str(), h.as_str())).collect();
        assert_eq!(
            hashes,
            [
                ("a.service", "1c6fb6f3684bafb0c173d8b8b957ceff031180c1"),
                ("b.timer", "da39a3ee5e6b4b0d3255bfef95601890afd80709")
            ]
        );
    }

    #[test]
    fn remove_deletes_and_forgets_and_tolerates_missing_files() {
        let tmp = tempfile::tempdir().unwrap();
        let mut units = UnitsDir::open(tmp.path()).unwrap();
        units.write("a.service", "x").unwrap();
        units.remove("a.service").unwrap();
        assert!(!tmp.path().join("a.service").exists());
        assert_eq!(units.hash_of("a.service"), None);
        units.remove("a.service").unwrap();
    }

    #[test]
    fn refuses_names_that_are_not_plain_unit_file_names() {
        let tmp = tempfile::tempdir().unwrap();
        let mut units = UnitsDir::open(tmp.path()).unwrap();
        for bad in ["../x.service", "a/b.service", ".hidden.service", "", "x.target"] {
            assert!(matches!(units.write(bad, "x"), Err(AgentError::InvalidName(_))), "{bad}");
        }
    }
}

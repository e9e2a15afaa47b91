//! The unit files the bench submits: a cheap template (a bash loop) and the changed versions `start --replace`
//! hands over.

use std::path::{Path, PathBuf};

/// The template of the start scenario, `t@.service`.
pub const TEMPLATE: &str = "t@.service";

/// A service running `while true; do echo <tag>; sleep 10; done`.
pub fn looping(description: &str, tag: &str) -> String {
    format!(
        "[Unit]\nDescription={description}\n\n[Service]\n\
         ExecStart=/bin/bash -c 'while true; do echo {tag}; sleep 10; done'\n"
    )
}

/// The template `t@.service` (version `version`).
pub fn template(version: &str) -> String {
    looping(&format!("bench instance %i ({version})"), &format!("hi %i {version}"))
}

/// Writes `files` (name, text) into `dir` (created); returns the directory.
pub fn write(dir: &Path, files: &[(String, String)]) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in files {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_is_a_bash_loop() {
        let t = template("v1");
        assert!(t.contains("ExecStart=/bin/bash -c 'while true; do echo hi %i v1; sleep 10; done'\n"), "{t}");
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[(TEMPLATE.to_string(), t.clone())]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(TEMPLATE)).unwrap(), t);
    }
}

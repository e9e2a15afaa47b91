//! The completion scripts run in the real shells (bash sourced and driven through `COMP_WORDS`; zsh and fish
//! parse-checked), with a stand-in `fleetctl` on `PATH` for the registry names. `completion` and `__complete` as
//! whole invocations are tested in `cli/tests/complete.rs`.

use std::path::Path;
use std::process::Command;

use super::*;

/// Completions bash offers for `line` (words; the last is the one being completed), with `dir` first on PATH.
fn bash_complete(dir: &Path, line: &[&str]) -> Vec<String> {
    let script = dir.join("fleetctl.bash");
    std::fs::write(&script, script_text("bash")).unwrap();
    let words = line.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" ");
    let program = format!(
        "source {}; COMP_WORDS=({words}); COMP_CWORD={}; _fleetctl; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        line.len() - 1
    );
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash").arg("-c").arg(program).current_dir(dir).env("PATH", path).output().unwrap();
    assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

fn script_text(shell: &str) -> String {
    script(shell).unwrap()
}

/// A stand-in `fleetctl` that logs its arguments and prints registry names.
fn stand_in(dir: &Path) {
    let path = dir.join("fleetctl");
    std::fs::write(
        &path,
        "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/calls\"\ncase \"$*\" in\n  *'__complete units') printf 'db.service\\nweb@1.service\\n' ;;\n  *'__complete machines') echo 8363165e6276f500b71169eca9b3f76b ;;\nesac\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn bash_completes_commands_flags_and_registry_names() {
    let dir = tempfile::tempdir().unwrap();
    stand_in(dir.path());
    std::fs::write(dir.path().join("local.service"), "[Service]\nExecStart=/bin/true\n").unwrap();
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "list-"]), ["list-machines", "list-unit-files", "list-units"]);
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "roll"]).len(), 6, "rollback and the five rollout-*");
    assert!(!bash_complete(dir.path(), &["fleetctl", "_"]).iter().any(|w| w.starts_with("__")), "helper hidden");
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "list-units", "--fi"]), ["--fields"]);
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "start", "--rol"]), ["--rolling"]);
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "--endp"]), ["--endpoint"]);
    // Units from the registry (asked with the cluster flags typed on the line) plus local files.
    let got = bash_complete(dir.path(), &["fleetctl", "--endpoint=http://10.0.0.1:54728", "start", ""]);
    for want in ["db.service", "web@1.service", "local.service"] {
        assert!(got.contains(&want.to_string()), "{want} in {got:?}");
    }
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    assert_eq!(calls, "--endpoint=http://10.0.0.1:54728 __complete units\n");
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "status", "d"]), ["db.service"]);
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "ssh", "83"]), ["8363165e6276f500b71169eca9b3f76b"]);
    // cordon/uncordon (issue 38): machine IDs only.
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "cordon", ""]), ["8363165e6276f500b71169eca9b3f76b"]);
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "uncordon", "8"]), ["8363165e6276f500b71169eca9b3f76b"]);
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "completion", "z"]), ["zsh"]);
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "plan", "s"]), ["start", "submit"]);
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "help", "list-m"]), ["list-machines"]);
    // A flag's value is not completed with names; the word after it is.
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "journal", "--lines", ""]), Vec::<String>::new());
    assert_eq!(bash_complete(dir.path(), &["fleetctl", "journal", "--lines", "5", "w"]), ["web@1.service"]);
}

#[test]
fn zsh_and_fish_scripts_parse_in_their_shells() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, file, check) in [("zsh", "_fleetctl", vec!["-n"]), ("fish", "fleetctl.fish", vec!["--no-execute"])] {
        let path = dir.path().join(file);
        std::fs::write(&path, script_text(shell)).unwrap();
        let out = Command::new(shell)
            .args(&check)
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("{shell} is needed for this test (ci/setup installs it): {e}"));
        assert!(out.status.success(), "{shell} rejects its script: {}", String::from_utf8_lossy(&out.stderr));
    }
}

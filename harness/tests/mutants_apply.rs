//! Every breakage in `conformance/mutants/` still applies to this tree and says what judges it: a patch that no
//! longer applies guards nothing, and would be found only at the next hours-long pass (seen: the fence's patch,
//! after the fence's stop moved into a function of its own).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// The value of `# <field>:` in a patch's header (empty when absent).
fn header<'a>(text: &'a str, field: &str) -> &'a str {
    let tag = format!("# {field}:");
    text.lines().find_map(|l| l.strip_prefix(tag.as_str())).map_or("", str::trim)
}

#[test]
fn every_mutation_patch_applies_and_names_what_catches_it() {
    let dir = root().join("conformance/mutants");
    let mut patches: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("conformance/mutants")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .collect();
    patches.sort();
    assert!(patches.len() >= 30, "only {} patches under {}", patches.len(), dir.display());
    let mut wrong = Vec::new();
    for p in &patches {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(p).unwrap();
        if header(&text, "breaks").is_empty() {
            wrong.push(format!("{name}: no `# breaks:`"));
        }
        if header(&text, "catchers").is_empty() && header(&text, "tests").is_empty() {
            wrong.push(format!("{name}: neither `# catchers:` nor `# tests:`"));
        }
        let out = Command::new("git")
            .args(["apply", "--check"])
            .arg(p)
            .current_dir(root())
            .output()
            .expect("git apply --check");
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            wrong.push(format!("{name}: does not apply: {}", why.lines().next().unwrap_or("").trim()));
        }
    }
    assert!(wrong.is_empty(), "mutation patches to mend ({} of {}):\n{}", wrong.len(), patches.len(), wrong.join("\n"));
}

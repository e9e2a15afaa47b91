//! Embeds the fixture units (`fixtures/units/`) in the crate, so that an installed `fleet-conformance`
//! (`cargo install --path conformance`, the `.deb`) needs no source tree at run time: `$OUT_DIR/fixtures.rs` holds
//! `(file name, contents)` for every file of the directory, sorted by name.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("../fixtures/units");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fixture units {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name().into_string().expect("a UTF-8 file name"))
        .collect();
    names.sort();
    let mut out = String::from(
        "/// Every fixture unit as (file name, contents), sorted by name.\npub static EMBEDDED: &[(&str, &str)] = &[\n",
    );
    for name in &names {
        let path = dir.join(name).canonicalize().expect("a fixture path");
        out.push_str(&format!("    ({name:?}, include_str!({:?})),\n", path.display().to_string()));
    }
    out.push_str("];\n");
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("fixtures.rs");
    std::fs::write(&target, out).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
}

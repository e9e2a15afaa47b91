//! What the dynamic loader maps for fleetd: every library it loads is resident memory in every fleetd (issue 16).
//! Asked of glibc's loader itself (`LD_TRACE_LOADED_OBJECTS`, what `ldd` does), so it tests the built binary.

use std::process::Command;

fn loaded_libraries(binary: &str) -> String {
    let out = Command::new(binary)
        .env("LD_TRACE_LOADED_OBJECTS", "1")
        .output()
        .unwrap_or_else(|err| panic!("cannot run {binary}: {err}"));
    assert!(out.status.success(), "the loader's trace of {binary} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn fleetd_does_not_load_glibcs_libm() {
    let libraries = loaded_libraries(env!("CARGO_BIN_EXE_fleetd"));
    assert!(libraries.contains("libc.so"), "the trace names no libc, so it proves nothing:\n{libraries}");
    assert!(
        !libraries.contains("libm.so"),
        "fleetd loads libm.so again (~0.5 MiB resident in every fleetd): `nm -D --undefined-only fleetd` names the \
         libm functions it calls (src/bin/fleetd.rs defines `pow`, the only one tokio calls):\n{libraries}"
    );
}

//! `fleet-docs OUTDIR`: writes the generated manual pages and shell completions (what a package installs):
//! `OUTDIR/man/fleetctl.1`, `OUTDIR/man/fleetd.8`, `OUTDIR/completions/{fleetctl.bash,_fleetctl,fleetctl.fish}` and
//! a commented `OUTDIR/fleet.conf`.

use std::path::Path;

fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn run(out: &Path) -> Result<(), String> {
    write(&out.join("man"), "fleetctl.1", &fleet_docs::fleetctl_page())?;
    write(&out.join("man"), "fleetd.8", &fleet_docs::fleetd_page())?;
    write(out, "fleet.conf", &fleet_docs::sample_fleet_conf())?;
    for (shell, file) in [("bash", "fleetctl.bash"), ("zsh", "_fleetctl"), ("fish", "fleetctl.fish")] {
        write(&out.join("completions"), file, &fleetctl::cli::complete::script(shell)?)?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out] = &args[..] else {
        eprintln!("usage: fleet-docs OUTDIR (writes OUTDIR/man and OUTDIR/completions)");
        std::process::exit(2);
    };
    if let Err(e) = run(Path::new(out)) {
        eprintln!("fleet-docs: {e}");
        std::process::exit(1);
    }
}

//! The conformance suite as one libtest-mimic binary: one trial per spec (`cargo nextest run -p fleet-conformance`).

use libtest_mimic::{Arguments, Failed, Trial};

fn main() {
    let args = Arguments::from_args();
    let trials = fleet_conformance::all()
        .into_iter()
        .map(|spec| {
            let run = spec.run;
            Trial::test(spec.name, move || {
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
                rt.block_on(run()).map_err(Failed::from)
            })
            .with_ignored_flag(spec.needs_fleet)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

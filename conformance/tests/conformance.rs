//! The conformance suite as one libtest-mimic binary: one trial per spec, named `<area>::<spec>`
//! (`cargo nextest run -p fleet-conformance`). Specs needing a capability the implementation under test does not
//! declare are ignored (skipped). When the whole catalogue runs in this one process (`cargo test`), a per-area
//! summary follows libtest's; under nextest (one process per trial) run `conformance-summary` on the JUnit report.

use std::sync::{Arc, Mutex};

use fleet_conformance::summary::{self, Summary};
use fleet_conformance::{Capabilities, all, execute};
use libtest_mimic::{Arguments, Failed, Trial};

fn main() {
    let args = Arguments::from_args();
    let caps = match Capabilities::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fleet-conformance: {e}");
            std::process::exit(2);
        }
    };
    let results = Arc::new(Mutex::new(Summary::default()));
    let specs = all();
    let mut skipped = Summary::default();
    let trials: Vec<Trial> = specs
        .into_iter()
        .map(|spec| {
            let name = spec.trial_name();
            let area = spec.area.to_string();
            let missing = spec.missing(&caps);
            if !missing.is_empty() {
                skipped.add(&area, summary::Result::Skipped);
            }
            let results = Arc::clone(&results);
            let ignored = !missing.is_empty();
            Trial::test(name, move || {
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
                let outcome = rt.block_on(execute(&spec));
                let r = if outcome.is_ok() { summary::Result::Passed } else { summary::Result::Failed };
                results.lock().unwrap().add(&area, r);
                outcome.map_err(Failed::from)
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    let whole_catalogue = args.filter.is_none() && args.skip.is_empty() && !args.list && !args.ignored;
    let conclusion = libtest_mimic::run(&args, trials);
    let ran = conclusion.num_passed + conclusion.num_failed;
    if whole_catalogue && ran > 1 {
        let mut s = results.lock().unwrap().clone();
        if !args.include_ignored {
            for (area, r) in skipped.entries() {
                for _ in 0..r {
                    s.add(&area, summary::Result::Skipped);
                }
            }
        }
        println!("{}", s.render());
    }
    conclusion.exit();
}

//! The conformance suite as one libtest-mimic binary: one trial per spec, named `<area>::<spec>`
//! (`cargo nextest run -p fleet-conformance`). Specs needing a capability the implementation under test does not
//! declare are ignored (skipped). When the whole catalogue runs in this one process (`cargo test`), the summary per
//! area and per profile follows libtest's; under nextest (one process per trial) run `conformance-summary` on the
//! JUnit report.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use fleet_conformance::summary::{JunitResult, Report};
use fleet_conformance::{Capabilities, Capability, TLS_AREAS, Transport, all, execute_over};
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
    let results: Arc<Mutex<BTreeMap<String, JunitResult>>> = Arc::default();
    // Every spec as `<area>::<spec>`; the areas of TLS_AREAS once more on TLS clusters as `tls::<area>::<spec>`
    // (skipped unless the implementation declares `tls`).
    let plain = all().into_iter().map(|spec| (spec, Transport::Default));
    let secured = all().into_iter().filter(|spec| TLS_AREAS.contains(&spec.area)).map(|spec| (spec, Transport::Tls));
    let trials: Vec<Trial> = plain
        .chain(secured)
        .map(|(spec, transport)| {
            let (name, ignored) = match transport {
                Transport::Default => (spec.trial_name(), !spec.missing(&caps).is_empty()),
                Transport::Tls => (
                    format!("tls::{}", spec.trial_name()),
                    !spec.missing(&caps).is_empty() || !caps.has(Capability::Tls),
                ),
            };
            let results = Arc::clone(&results);
            Trial::test(name.clone(), move || {
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
                let outcome = rt.block_on(execute_over(&spec, transport));
                let r = match &outcome {
                    Ok(()) => JunitResult::Passed,
                    Err(e) => JunitResult::Failed(e.clone()),
                };
                results.lock().unwrap().insert(name, r);
                outcome.map_err(Failed::from)
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    let whole_catalogue = args.filter.is_none() && args.skip.is_empty() && !args.list && !args.ignored;
    let include_ignored = args.include_ignored;
    let conclusion = libtest_mimic::run(&args, trials);
    let ran = conclusion.num_passed + conclusion.num_failed;
    if whole_catalogue && ran > 1 {
        // With --include-ignored every spec ran: report them as declared-all.
        let declared = if include_ignored { Capabilities::of(fleet_conformance::Capability::ALL) } else { caps };
        println!("{}", Report::new(&all(), &declared, &results.lock().unwrap()).render());
    }
    fleet_conformance::fixtures::remove_materialized();
    conclusion.exit();
}

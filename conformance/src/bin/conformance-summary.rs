//! `conformance-summary <junit.xml> [--junit-out <path>]`: passed / failed / skipped per area and per profile of a
//! nextest run of the conformance suite (nextest runs each spec in its own process, so the summary is made from its
//! JUnit report). Specs skipped for a capability the declaration lacks are taken from the catalogue with the same
//! declaration (`FLEET_CAPABILITIES`, ...) as the run. `--junit-out` writes a JUnit report of every spec, the
//! skipped ones with the capabilities they need (nextest's report leaves skipped tests out).
//! `conformance-summary --list` prints the catalogue instead: `<trial>\t<profile>` per spec (`base`, or the
//! capabilities it needs joined by `+`).
//! Exit status: 0 when nothing failed, 1 when a spec failed or no spec was found, 2 on usage or read errors.

use std::io::Write;

use fleet_conformance::summary::{Report, parse_junit};
use fleet_conformance::{Capabilities, all};

const USAGE: &str = "usage: conformance-summary <junit.xml> [--junit-out <path>]   (e.g. target/nextest/ci/junit.xml)
       conformance-summary --list";

fn main() {
    let mut args = std::env::args().skip(1);
    let mut input = None;
    let mut junit_out = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--junit-out" => junit_out = args.next(),
            "--list" => {
                // A closed pipe (`| head`) ends the listing quietly.
                let mut out = std::io::stdout().lock();
                for spec in all() {
                    if writeln!(out, "{}\t{}", spec.trial_name(), spec.profile()).is_err() {
                        break;
                    }
                }
                return;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            _ if input.is_none() && !a.starts_with('-') => input = Some(a),
            _ => fail(2, &format!("unexpected argument {a:?}\n{USAGE}")),
        }
    }
    let Some(path) = input else { fail(2, USAGE) };
    let caps = Capabilities::from_env().unwrap_or_else(|e| fail(2, &e));
    let xml = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(2, &format!("{path}: {e}")));
    let report = Report::new(&all(), &caps, &parse_junit(&xml));
    if report.is_empty() {
        fail(1, &format!("{path}: no conformance test cases found"));
    }
    print!("{}", report.render());
    if let Some(out) = junit_out {
        std::fs::write(&out, report.to_junit()).unwrap_or_else(|e| fail(2, &format!("{out}: {e}")));
        println!("JUnit report with skipped specs: {out}");
    }
    if report.failed() > 0 {
        std::process::exit(1);
    }
}

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("conformance-summary: {msg}");
    std::process::exit(code);
}

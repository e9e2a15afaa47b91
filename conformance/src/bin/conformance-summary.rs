//! `conformance-summary <junit.xml>`: passed / failed / skipped per area of a nextest run of the conformance suite
//! (nextest runs each spec in its own process, so the summary is made from its JUnit report).

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: conformance-summary <junit.xml>   (e.g. $CARGO_TARGET_DIR/nextest/ci/junit.xml)");
        std::process::exit(2);
    };
    match std::fs::read_to_string(&path) {
        Ok(xml) => {
            let s = fleet_conformance::summary::Summary::from_junit(&xml);
            if s.is_empty() {
                eprintln!("{path}: no conformance test cases found");
                std::process::exit(1);
            }
            print!("{}", s.render());
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    }
}

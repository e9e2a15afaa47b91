//! The unit parser on arbitrary bytes: `UnitFile::parse_bytes` (and `parse` of the same text when it is UTF-8, and
//! the placed and submitted forms fleetctl uses), then what runs on a file that parses — `validate_options`, the
//! rollout policy check, the scheduling requirements, the canonical text and its hash. Never a panic; every form
//! agrees on the options; a refused line is a line of the file; a file whose options validate is stored and read
//! back as a unit file again (`as_stored`), the same one unless a value ends in a backslash, and storing that
//! changes nothing more.
#![no_main]

use fleet_core::rollout::policy;
use fleet_core::unit::parse::parse_bytes_placed;
use fleet_core::unit::{FileError, Requirements, UnitFile, validate_options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = UnitFile::parse_bytes(data);
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(UnitFile::parse(text), parsed, "text and bytes parse alike");
    }
    let placed = parse_bytes_placed(data);
    let options = placed.as_ref().map(|p| p.iter().map(|p| p.option.clone()).collect::<Vec<_>>());
    assert_eq!(options.map_err(Clone::clone), parsed.clone().map(UnitFile::into_options), "placed options differ");
    let lines = 1 + data.iter().filter(|&&b| b == b'\n').count();
    match UnitFile::parse_submitted(data) {
        Ok(submitted) => assert_eq!(Ok(&submitted), parsed.as_ref(), "a submitted file parses as the plain one"),
        Err(FileError::Parse(e)) => assert_eq!(Err(&e), parsed.as_ref().map(|_| ()), "parse errors agree"),
        Err(FileError::Blank(line)) => {
            assert!(parsed.is_ok() && (1..=lines).contains(&line.line), "refused line {} of {lines}", line.line);
            assert!(!line.to_string().is_empty());
        }
    }
    let Ok(file) = parsed else { return };
    let _ = file.hash();
    let _ = policy::check(&file);
    let _ = Requirements::of(&file, "fuzz@1.service");
    if validate_options(&file).is_ok() {
        // The registry stores the canonical text and every reader parses it again.
        let Ok(stored) = file.as_stored() else {
            panic!("validated options whose canonical text does not parse: {:?}", file.canonical());
        };
        // Storing what was read back changes nothing more: `cat` then submit gives the same hash.
        let again = stored.as_stored().map(|s| s.canonical());
        assert_eq!(again.as_deref(), Ok(stored.canonical().as_str()), "storing is not idempotent");
        // And only a value ending in a backslash reads back other than written (spec App. C.10).
        if !file.options().iter().any(|o| o.value.ends_with('\\')) {
            assert_eq!(stored.canonical(), file.canonical(), "the stored unit differs from the submitted one");
        }
    }
});

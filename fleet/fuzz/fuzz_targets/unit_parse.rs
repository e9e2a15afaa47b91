//! The unit parser on arbitrary bytes: `UnitFile::parse_bytes` (and `parse` of the same text when it is UTF-8),
//! then what runs on a file that parses — `validate_options`, the rollout policy check, the scheduling
//! requirements, the canonical text and its hash. Never a panic; a file whose options validate is stored and read
//! back as a unit file again (`as_stored`), and parsing text or its bytes gives the same options.
#![no_main]

use fleet::rollout::policy;
use fleet::unit::{Requirements, UnitFile, validate_options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = UnitFile::parse_bytes(data);
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(UnitFile::parse(text), parsed, "text and bytes parse alike");
    }
    let Ok(file) = parsed else { return };
    let _ = file.hash();
    let _ = policy::check(&file);
    let _ = Requirements::of(&file, "fuzz@1.service");
    if validate_options(&file).is_ok() {
        // The registry stores the canonical text and every reader parses it again.
        let stored = file.as_stored();
        assert!(stored.is_ok(), "validated options whose canonical text does not parse: {:?}", file.canonical());
    }
});

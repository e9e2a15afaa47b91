//! Property tests: no panic or hang on any input (the parser's fuzz target, bounded for CI), canonical text is
//! stable under re-parsing except for the Appendix C.10 case, the hash depends only on the canonical text, and
//! API options round-trip through a unit file.

use proptest::prelude::*;

use super::glob::{Pattern, try_match};
use super::name::{expand_specifiers, mangle, validate_name};
use super::parse::{parse, parse_bytes};
use super::xfleet::{OptionsError, Requirements, unrecognized_xfleet_keys, validate_options};
use super::{UnitFile, UnitHash, UnitOption};

/// Text built from the characters the lexer treats specially, so generated files hit its corners often.
fn unit_like_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("[".to_string()),
        Just("]".to_string()),
        Just("=".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("\r".to_string()),
        Just("\\".to_string()),
        Just("\\\n".to_string()),
        Just(" ".to_string()),
        Just("\t".to_string()),
        Just("#".to_string()),
        Just(";".to_string()),
        Just("\"".to_string()),
        Just("\u{a0}".to_string()),
        Just("%i".to_string()),
        Just("[Service]\n".to_string()),
        Just("[X-Fleet]\n".to_string()),
        Just("ExecStart=/bin/true\n".to_string()),
        Just("Global=true\n".to_string()),
        Just("MachineOf=a.service\n".to_string()),
        Just("Conflicts=a* b\n".to_string()),
        "[a-zA-Z0-9@.*-]{1,8}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

/// Options as a client may send them over the API, restricted to ones whose text is a valid unit file.
fn clean_options() -> impl Strategy<Value = Vec<UnitOption>> {
    let option = ("[A-Za-z-]{1,6}", "[A-Za-z][A-Za-z0-9-]{0,6}", "([!-~][ -~]{0,10}[!-\\[\\]-~])?")
        .prop_map(|(section, name, value)| UnitOption::new(section, name, value));
    prop::collection::vec(option, 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(unit) = UnitFile::parse_bytes(&bytes) {
            let _ = unit.hash();
            let _ = Requirements::of(&unit, "a@b.service");
            let _ = validate_options(&unit);
            let _ = unrecognized_xfleet_keys(&unit);
        }
        let _ = parse_bytes(&bytes);
    }

    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>()) {
        let _ = parse(&text);
        let _ = validate_name(&text);
        let _ = mangle(&text);
        let _ = expand_specifiers(&text, &text);
        let _ = try_match(&text, "a.service");
        let _ = try_match("*?[a-z]*", &text);
    }

    #[test]
    fn arbitrary_glob_pairs_never_panic(pattern in "[*?\\[\\]^\\\\a-c/-é€]{0,12}", name in "[a-c/é€-]{0,12}") {
        let _ = try_match(&pattern, &name);
    }

    /// The compiled form validates exactly like the function form and matches the same names.
    #[test]
    fn compiled_pattern_agrees_with_try_match(pattern in "[*?\\[\\]^\\\\a-c/-é€]{0,12}", name in "[a-c/é€*?\\\\-]{0,12}") {
        let compiled = Pattern::new(&pattern);
        let direct = try_match(&pattern, &name);
        prop_assert_eq!(compiled.is_none(), direct.is_err(), "validity of {:?} vs {:?}", pattern, name);
        prop_assert_eq!(compiled.is_some_and(|p| p.matches(&name)), direct == Ok(true));
    }

    #[test]
    fn valid_utf8_bytes_parse_like_the_string(text in unit_like_text()) {
        prop_assert_eq!(parse_bytes(text.as_bytes()), parse(&text));
    }

    /// parse → canonical → parse gives the same options unless a value ends in a backslash (App. C.10), and the
    /// stored form is always parseable and a fixed point.
    #[test]
    fn canonical_text_is_stable_under_reparse(text in unit_like_text()) {
        if let Ok(unit) = UnitFile::parse(&text) {
            let stored = unit.as_stored().expect("canonical text of a parsed unit always parses");
            let ends_in_backslash = unit.options().iter().any(|o| o.value.ends_with('\\'));
            if ends_in_backslash {
                // The value swallows the following line (or gains a newline at the end). The canonical text
                // usually changes too, but not always: `=\` then `=x` re-reads as the one option `=\<newline>=x`.
                prop_assert_ne!(stored.options().to_vec(), grouped_by_section(unit.options()));
            } else {
                prop_assert_eq!(stored.canonical(), unit.canonical());
                prop_assert_eq!(stored.options().to_vec(), grouped_by_section(unit.options()));
            }
            prop_assert_eq!(stored.as_stored().unwrap(), stored.clone());
        }
    }

    #[test]
    fn hash_depends_only_on_canonical_text(a in unit_like_text(), b in unit_like_text()) {
        if let (Ok(ua), Ok(ub)) = (UnitFile::parse(&a), UnitFile::parse(&b)) {
            prop_assert_eq!(ua.hash(), UnitHash::of(&ua.canonical()));
            prop_assert_eq!(ua.canonical() == ub.canonical(), ua.hash() == ub.hash());
        }
    }

    #[test]
    fn comments_and_white_space_do_not_change_the_hash(options in clean_options()) {
        let unit = UnitFile::from_options(options);
        let mut noisy = String::from("# header comment\n");
        for opt in unit.options() {
            noisy.push_str(&format!("\n[{}]  \r\n ; c\n  {} = {} \t\r\n", opt.section, opt.name, opt.value));
        }
        prop_assert_eq!(UnitFile::parse(&noisy).unwrap().hash(), unit.hash());
    }

    /// API options → unit file → options is the identity; through the canonical text it is too, up to the
    /// grouping of sections that serialization performs.
    #[test]
    fn options_round_trip(options in clean_options()) {
        let unit = UnitFile::from_options(options.clone());
        prop_assert_eq!(unit.options(), options.as_slice());
        let json = serde_json::to_string(&options).unwrap();
        let back: Vec<UnitOption> = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&back, &options);

        let reparsed = UnitFile::parse(&unit.canonical()).unwrap();
        prop_assert_eq!(reparsed.options().to_vec(), grouped_by_section(&options));
        prop_assert_eq!(reparsed.hash(), unit.hash());
        prop_assert!(!matches!(validate_options(&unit), Err(OptionsError::Unparsable(_))));
    }
}

/// The options in the order serialization emits them: grouped by section, sections by first appearance.
fn grouped_by_section(options: &[UnitOption]) -> Vec<UnitOption> {
    let mut sections: Vec<&str> = Vec::new();
    for opt in options {
        if !sections.contains(&opt.section.as_str()) {
            sections.push(&opt.section);
        }
    }
    sections.into_iter().flat_map(|s| options.iter().filter(move |o| o.section == s).cloned()).collect()
}

#[test]
fn pathological_inputs_finish_quickly() {
    let started = std::time::Instant::now();
    let big = [
        "[".repeat(200_000),
        "#\\\n".repeat(100_000),
        format!("[S]\n{}", "A=\\\n".repeat(100_000)),
        format!("[S]\n{}", " ".repeat(200_000)),
        format!("[S]\n{}", "\\\n".repeat(100_000)),
        "]".repeat(200_000),
        format!("[S]\nA={}", "x\r".repeat(100_000)),
    ];
    for text in &big {
        let _ = parse(text);
    }
    let _ = try_match(&"*a".repeat(50), &"a".repeat(200));
    assert!(started.elapsed().as_secs() < 10, "took {:?}", started.elapsed());
}

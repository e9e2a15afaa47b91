//! Fuzz targets for hostile input (issue 15), as proptest properties that run on stable in CI (the coverage-guided
//! cargo-fuzz targets, on nightly, are in `crates/fleetd/fuzz/`; docs/faults.md, "Fuzzing"): API request bodies, request
//! paths, query strings and page tokens, and fleet.conf. Each must never panic, whatever the bytes; where a decoder accepts, what it produced must be consistent (a routed path is
//! clean, a page token re-encodes to itself, a unit the PUT decision accepts has a valid name and only options with
//! a section and a name). The unit parser's target lives in `crates/core/src/unit/property_tests.rs`.
//!
//! CI runs the default number of cases; a long run: `PROPTEST_CASES=200000 cargo nextest run -p fleetd --test fuzz`.

use std::collections::BTreeMap;

use fleet_core::api_rules::{PutAction, decide_put};
use fleet_core::schema::{MachineMetadataOp, PageToken, RolloutControl, RolloutRequest, Unit};
use fleet_core::unit::name::validate_name;
use fleetd::api::route::{Route, clean_path, decode_segment, route};
use fleetd::api::{query, validate_ops};
use fleetd::daemon::{config, ini};
use proptest::prelude::*;

/// JSON-ish text: the tokens of the API's bodies mixed with noise, so decoders get past the first byte often.
fn json_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("\"name\"".to_string()),
        Just("\"desiredState\"".to_string()),
        Just("\"options\"".to_string()),
        Just("\"section\"".to_string()),
        Just("\"value\"".to_string()),
        Just("\"launched\"".to_string()),
        Just("\"inactive\"".to_string()),
        Just("\"a.service\"".to_string()),
        Just("\"../x.service\"".to_string()),
        Just("\"a\\u0000b.service\"".to_string()),
        Just("\"op\"".to_string()),
        Just("\"add\"".to_string()),
        Just("\"path\"".to_string()),
        Just("\"/m1/metadata/k\"".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        Just("1e999".to_string()),
        Just("-0".to_string()),
        "\"[ -~]{0,12}\"",
        "[ -~]{0,4}",
    ];
    prop::collection::vec(piece, 0..48).prop_map(|pieces| pieces.concat())
}

/// A well-formed unit body with arbitrary field contents.
fn unit_body() -> impl Strategy<Value = String> {
    (
        "[ -~]{0,20}",
        prop_oneof![Just("launched"), Just("loaded"), Just("inactive"), Just(""), Just("bogus")],
        prop::collection::vec(("[ -~]{0,8}", "[ -~]{0,8}", "[ -~\n]{0,16}"), 0..4),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(name, desired, options, reschedule, no_restart)| {
            serde_json::json!({
                "name": name,
                "desiredState": desired,
                "options": options.into_iter().map(|(s, n, v)| serde_json::json!({"section": s, "name": n, "value": v})).collect::<Vec<_>>(),
                "reschedule": reschedule,
                "noRestart": no_restart,
            })
            .to_string()
        })
}

/// Paths built from the characters routing and cleaning treat specially.
fn path_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_string()),
        Just("//".to_string()),
        Just(".".to_string()),
        Just("..".to_string()),
        Just("%".to_string()),
        Just("%2F".to_string()),
        Just("%2e".to_string()),
        Just("%00".to_string()),
        Just("%5C".to_string()),
        Just("%zz".to_string()),
        Just("fleet".to_string()),
        Just("v1".to_string()),
        Just("v1-alpha".to_string()),
        Just("units".to_string()),
        Just("state".to_string()),
        Just("machines".to_string()),
        Just("rollouts".to_string()),
        Just("history".to_string()),
        Just("a.service".to_string()),
        Just("a@.service".to_string()),
        "[ -~]{0,6}",
        "\\PC{0,3}",
    ];
    prop::collection::vec(piece, 0..16).prop_map(|pieces| pieces.concat())
}

fn method() -> impl Strategy<Value = http::Method> {
    prop_oneof![
        Just(http::Method::GET),
        Just(http::Method::PUT),
        Just(http::Method::DELETE),
        Just(http::Method::PATCH),
        Just(http::Method::POST),
        Just(http::Method::HEAD),
        Just(http::Method::OPTIONS),
    ]
}

fn check_put(unit: &Unit) {
    for stored in [None, Some("0123456789abcdef0123456789abcdef01234567")] {
        if let Ok(action) = decide_put(unit, stored) {
            assert!(validate_name(&unit.name).is_ok(), "accepted a unit named {:?}", unit.name);
            if matches!(action, PutAction::Create(_) | PutAction::Replace(_)) {
                assert!(
                    unit.options.iter().all(|o| !o.section.is_empty() && !o.name.is_empty()),
                    "accepted options without section or name: {:?}",
                    unit.options
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes and JSON-ish text as every API body: decoding never panics; a decoded unit goes through the
    /// PUT decision, metadata operations through their validation.
    #[test]
    fn api_bodies_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), text in json_like()) {
        for body in [bytes.as_slice(), text.as_bytes()] {
            if let Ok(unit) = serde_json::from_slice::<Unit>(body) {
                check_put(&unit);
            }
            if let Ok(ops) = serde_json::from_slice::<Vec<MachineMetadataOp>>(body) {
                let _ = validate_ops(&ops);
            }
            let _ = serde_json::from_slice::<RolloutRequest>(body);
            let _ = serde_json::from_slice::<RolloutControl>(body);
        }
    }

    /// Well-formed unit bodies with arbitrary contents: the PUT decision never accepts a bad name or a blank option.
    #[test]
    fn unit_bodies_are_decided_consistently(body in unit_body()) {
        let unit: Unit = serde_json::from_str(&body).expect("generated body is valid JSON");
        check_put(&unit);
    }

    /// Any path with any method: routing never panics, a routed path is clean, a routed unit name is decoded text.
    #[test]
    fn paths_route_or_refuse(path in path_like(), m in method()) {
        let path = format!("/{path}");
        if let Ok(r) = route(&m, &path) {
            prop_assert_eq!(clean_path(&path), path.clone(), "routed an unclean path");
            if let Route::GetUnit(name) | Route::PutUnit(name) | Route::DeleteUnit(name) | Route::GetState(name)
                | Route::UnitHistory(name) = r
            {
                // Issue 37: every method hands its handler only a name a unit can have.
                prop_assert!(validate_name(&name).is_ok(), "unit name {:?} from {:?} is not one", name, path);
            }
        }
        for segment in path.split('/') {
            let _ = decode_segment(segment);
        }
    }

    /// Query strings and page tokens: parsing never panics; a token that parses re-encodes to the same page.
    #[test]
    fn query_strings_and_page_tokens(q in "[ -~]{0,64}", token in "[A-Za-z0-9_=%+/-]{0,12}", limit in 1u16..200) {
        let pairs = query::pairs(Some(&q));
        for value in query::values(&pairs, "nextPageToken") {
            let _ = PageToken::parse_for(value, limit);
        }
        if let Ok(parsed) = PageToken::parse_for(&token, limit) {
            prop_assert_eq!(PageToken::decode(&parsed.encode()).ok(), Some(parsed));
            let items: Vec<u32> = (0..500).collect();
            let (page, _) = parsed.slice(&items);
            prop_assert!(page.len() <= usize::from(limit));
        }
    }

    /// fleet.conf text and FLEET_* values: the INI parser and the loader never panic; every derived value is
    /// computed without panicking.
    #[test]
    fn fleet_conf_never_panics(text in "[ -~\n\r\t]{0,200}", key in "[a-z_]{0,24}", value in "[ -~]{0,24}") {
        let _ = ini::parse(&text);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.conf");
        std::fs::write(&path, format!("{text}\n{key}={value}\n")).unwrap();
        let env: BTreeMap<String, String> = [(format!("FLEET_{}", key.to_uppercase()), value.clone())].into();
        if let Ok(loaded) = config::load(Some(&path), &env) {
            let c = loaded.config;
            let _ = c.agent_ttl();
            let _ = c.api_tls();
            let _ = c.engine_reconcile_interval();
            let _ = c.etcd_request_timeout();
            for listener in &c.api_listeners {
                let _ = listener.parse::<fleetd::api::listen::ListenAddress>();
            }
        }
    }
}

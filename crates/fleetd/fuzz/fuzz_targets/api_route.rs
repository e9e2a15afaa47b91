//! The route decision (`api::route::route`, pure) on arbitrary methods and paths: the first byte picks a method
//! (the seven the API knows, or an extension token), the rest is the path. Never a panic; a routed path is clean;
//! every name a route hands a handler is one a unit (or rollout) can have; every refused name says why.
#![no_main]

use fleetd::api::route::{Route, RouteError, clean_path, route};
use fleet_registry::{Component, check_component};
use fleet_core::unit::validate_name;
use http::Method;
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 8] = ["GET", "PUT", "DELETE", "PATCH", "POST", "HEAD", "OPTIONS", "BREW"];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let method = Method::from_bytes(METHODS[usize::from(pick) % METHODS.len()].as_bytes()).unwrap();
    let path = String::from_utf8_lossy(rest);
    match route(&method, &path) {
        Ok(routed) => {
            assert_eq!(clean_path(&path), path, "routed an unclean path");
            match routed {
                Route::GetUnit(n)
                | Route::PutUnit(n)
                | Route::DeleteUnit(n)
                | Route::GetState(n)
                | Route::UnitHistory(n) => {
                    assert!(validate_name(&n).is_ok(), "{method} {path:?} handed on the unit name {n:?}");
                }
                Route::GetRollout(id) | Route::PutRollout(id) | Route::PatchRollout(id) => {
                    assert!(check_component(Component::RolloutId, &id).is_ok(), "{method} {path:?}: rollout {id:?}");
                }
                _ => {}
            }
        }
        Err(RouteError::Name(refused)) => {
            assert!(!refused.message.is_empty(), "{method} {path:?} refused a name without saying why");
            assert!(refused.status.is_client_error());
        }
        Err(_) => {}
    }
});

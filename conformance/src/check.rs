//! Small helpers for turning errors and failed expectations into the spec's failure message.

/// Attaches what was being done to any displayable error.
pub trait Context<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T, E: std::fmt::Display> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

/// `Err(msg())` unless `cond`.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(msg()) }
}

/// `Err` naming both values unless they are equal.
pub fn ensure_eq<T: PartialEq + std::fmt::Debug>(what: &str, expected: T, observed: T) -> Result<(), String> {
    ensure(expected == observed, || format!("{what}: expected {expected:?}, observed {observed:?}"))
}

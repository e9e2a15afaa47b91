//! The one cache of parsed unit bodies, used by the engine (scheduling input) and the agent (what it runs). Bodies
//! are content-addressed, so each is parsed once per hash: a template burst of N instances sharing one body parses
//! it once, and an unchanged cluster parses nothing. Requirements are specifier-expanded with the unit's name, so
//! they are cached per (name, hash). A body that does not parse is remembered as such and warned about once.
//! Whoever owns a cache drops what its last snapshot no longer holds ([`BodyCache::retain`]).

use std::collections::HashMap;
use std::sync::Arc;

use super::file::UnitFile;
use super::xfleet::Requirements;

/// Parsed bodies by hash and requirements by unit name.
#[derive(Debug, Default)]
pub struct BodyCache {
    /// hash → parsed body; `None` when it does not parse.
    parsed: HashMap<String, Option<Arc<UnitFile>>>,
    /// name → (hash the requirements were computed for, requirements).
    requirements: HashMap<String, (String, Arc<Requirements>)>,
}

impl BodyCache {
    pub fn new() -> BodyCache {
        BodyCache::default()
    }

    /// The parsed body with hash `hash` (text `body`, of unit `name`, named in the one warning when it does not
    /// parse); `None` when it does not parse.
    pub fn file(&mut self, name: &str, hash: &str, body: &str) -> Option<Arc<UnitFile>> {
        self.parsed
            .entry(hash.to_string())
            .or_insert_with(|| match UnitFile::parse(body) {
                Ok(file) => Some(Arc::new(file)),
                Err(error) => {
                    tracing::warn!(unit = %name, hash, error = %error.located(), "stored unit body does not parse");
                    None
                }
            })
            .clone()
    }

    /// The `[X-Fleet]` requirements of unit `name` whose body has hash `hash` (text `body`); `None` when the body
    /// does not parse.
    pub fn requirements(&mut self, name: &str, hash: &str, body: &str) -> Option<Arc<Requirements>> {
        if let Some((cached_hash, requirements)) = self.requirements.get(name)
            && cached_hash == hash
        {
            return Some(Arc::clone(requirements));
        }
        let file = self.file(name, hash, body)?;
        let requirements = Arc::new(Requirements::of(&file, name));
        self.requirements.insert(name.to_string(), (hash.to_string(), Arc::clone(&requirements)));
        Some(requirements)
    }

    /// Keeps only the bodies whose hash and the requirements whose (name, hash) `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&str, &str) -> bool, keep_hash: impl Fn(&str) -> bool) {
        self.parsed.retain(|hash, _| keep_hash(hash));
        self.requirements.retain(|name, (hash, _)| keep(name, hash));
    }

    /// How many distinct bodies are held (parsed or known not to parse).
    pub fn bodies(&self) -> usize {
        self.parsed.len()
    }

    /// How many units' requirements are held.
    pub fn units(&self) -> usize {
        self.requirements.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = "[Service]\nExecStart=/bin/sleep 1\n\n[X-Fleet]\nConflicts=other-%i.service\n";

    #[test]
    fn a_body_is_parsed_once_and_requirements_are_per_name() {
        let mut cache = BodyCache::new();
        let a = cache.requirements("t@a.service", "h1", TEMPLATE).unwrap();
        let b = cache.requirements("t@b.service", "h1", TEMPLATE).unwrap();
        assert_eq!((cache.bodies(), cache.units()), (1, 2));
        assert_eq!(a.conflicts, ["other-a.service"]);
        assert_eq!(b.conflicts, ["other-b.service"]);
        assert!(Arc::ptr_eq(&a, &cache.requirements("t@a.service", "h1", TEMPLATE).unwrap()), "cached");
    }

    #[test]
    fn an_unparsable_body_is_remembered_and_retain_drops_what_left() {
        let mut cache = BodyCache::new();
        assert!(cache.requirements("bad.service", "h2", "[Service\n").is_none());
        assert!(cache.file("bad.service", "h2", "[Service\n").is_none());
        cache.requirements("t@a.service", "h1", TEMPLATE).unwrap();
        assert_eq!(cache.bodies(), 2);
        cache.retain(|name, _| name == "t@a.service", |hash| hash == "h1");
        assert_eq!((cache.bodies(), cache.units()), (1, 1));
    }

    #[test]
    fn a_new_hash_recomputes_the_requirements() {
        let mut cache = BodyCache::new();
        assert!(!cache.requirements("a.service", "h1", TEMPLATE).unwrap().global);
        let replaced = cache.requirements("a.service", "h3", "[X-Fleet]\nGlobal=true\n").unwrap();
        assert!(replaced.global, "requirements of the new body, not the cached ones: {replaced:?}");
    }
}

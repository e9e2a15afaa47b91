//! The one cache of parsed unit bodies, used by the engine (scheduling input) and the agent (what it runs). Bodies
//! are content-addressed, so each is parsed once per hash: a template burst of N instances sharing one body parses
//! it once, and an unchanged cluster parses nothing. Requirements are specifier-expanded with the unit's name, so
//! they are cached per (name, hash) — unless the body's `[X-Fleet]` section has no specifier, when every name gets
//! the same requirements and they are cached once per hash (a thousand instances of a template: one entry, not a
//! thousand). A body that does not parse is remembered as such and warned about once.
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
    /// hash → requirements of a body whose requirements do not depend on the unit's name.
    shared: HashMap<String, Arc<Requirements>>,
    /// name → (hash the requirements were computed for, requirements), for bodies whose requirements do.
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
        if let Some(requirements) = self.shared.get(hash) {
            return Some(Arc::clone(requirements));
        }
        if let Some((cached_hash, requirements)) = self.requirements.get(name)
            && cached_hash == hash
        {
            return Some(Arc::clone(requirements));
        }
        let file = self.file(name, hash, body)?;
        let requirements = Arc::new(Requirements::of(&file, name));
        if Requirements::depend_on_name(&file) {
            self.requirements.insert(name.to_string(), (hash.to_string(), Arc::clone(&requirements)));
        } else {
            self.shared.insert(hash.to_string(), Arc::clone(&requirements));
        }
        Some(requirements)
    }

    /// Keeps only the bodies whose hash and the requirements whose (name, hash) `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&str, &str) -> bool, keep_hash: impl Fn(&str) -> bool) {
        self.parsed.retain(|hash, _| keep_hash(hash));
        self.shared.retain(|hash, _| keep_hash(hash));
        self.requirements.retain(|name, (hash, _)| keep(name, hash));
    }

    /// How many distinct bodies are held (parsed or known not to parse).
    pub fn bodies(&self) -> usize {
        self.parsed.len()
    }

    /// How many requirements are held: one per body shared by every name, one per unit where they depend on it.
    pub fn units(&self) -> usize {
        self.shared.len() + self.requirements.len()
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
    fn requirements_without_specifiers_are_held_once_for_every_name() {
        let mut cache = BodyCache::new();
        let plain = "[Service]\nExecStart=/bin/sleep %i\n\n[X-Fleet]\nConflicts=other.service\n";
        let a = cache.requirements("t@a.service", "h4", plain).unwrap();
        let b = cache.requirements("t@b.service", "h4", plain).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one shared entry: {a:?} {b:?}");
        assert_eq!(a.conflicts, ["other.service"]);
        assert_eq!((cache.bodies(), cache.units()), (1, 1));
        cache.retain(|_, _| true, |hash| hash != "h4");
        assert_eq!((cache.bodies(), cache.units()), (0, 0), "a body that left takes its shared requirements along");
    }

    #[test]
    fn a_new_hash_recomputes_the_requirements() {
        let mut cache = BodyCache::new();
        assert!(!cache.requirements("a.service", "h1", TEMPLATE).unwrap().global);
        let replaced = cache.requirements("a.service", "h3", "[X-Fleet]\nGlobal=true\n").unwrap();
        assert!(replaced.global, "requirements of the new body, not the cached ones: {replaced:?}");
    }
}

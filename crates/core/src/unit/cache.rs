//! The one cache of parsed unit bodies, used by the engine (scheduling input) and the agent (what it runs). Bodies
//! are content-addressed, so each is parsed once per hash: a template burst of N instances sharing one body parses
//! it once, and an unchanged cluster parses nothing. Requirements are specifier-expanded with the unit's name, so
//! they are cached per (name, hash) — unless the body's `[X-Fleet]` section has no specifier, when every name gets
//! the same requirements and they are cached once per hash (a thousand instances of a template: one entry, not a
//! thousand). A body that does not parse is remembered as such and warned about once.
//!
//! What is kept of a body is what its readers ask ([`Parsed`]), not the parsed file: a parsed file is about half a
//! KB, which the engine leader held for every body of the cluster (with a requirements value for each, 0.85 MB of
//! its heap at 1,000 units with their own bodies, by heaptrack).
//! The file is kept only for a body whose requirements depend on the name. Requirements without any constraint,
//! the common case, are one shared value.
//! Whoever owns a cache drops what its last snapshot no longer holds ([`BodyCache::retain`]).

use std::collections::HashMap;
use std::sync::Arc;

use super::file::UnitFile;
use super::xfleet::Requirements;

/// Parsed bodies by hash and requirements by unit name.
#[derive(Debug, Default)]
pub struct BodyCache {
    /// hash → what is kept of the parsed body; `None` when it does not parse.
    parsed: HashMap<String, Option<Parsed>>,
    /// name → (hash the requirements were computed for, requirements), for bodies whose requirements depend on it.
    requirements: HashMap<String, (String, Arc<Requirements>)>,
    /// The requirements of a body that states none, shared by every such body.
    unconstrained: Arc<Requirements>,
}

/// What the cache keeps of a body that parses.
#[derive(Debug, Clone)]
struct Parsed {
    traits: BodyTraits,
    requirements: NameRequirements,
}

#[derive(Debug, Clone)]
enum NameRequirements {
    /// The same for every name.
    Shared(Arc<Requirements>),
    /// They depend on the name: the file, to expand them for each name.
    PerName(Arc<UnitFile>),
}

/// What the agent needs to know of a body besides its requirements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BodyTraits {
    /// The body has an `[Install]` section (the agent enables it).
    pub install: bool,
    /// The body defines `ExecReload=` (a replace without restart reloads the running unit).
    pub reloadable: bool,
}

impl BodyTraits {
    pub fn of(file: &UnitFile) -> BodyTraits {
        BodyTraits { install: file.has_section("Install"), reloadable: file.defines_reload() }
    }
}

impl BodyCache {
    pub fn new() -> BodyCache {
        BodyCache::default()
    }

    /// What is kept of the body with hash `hash` (text `body`, of unit `name`, named in the one warning when it
    /// does not parse); `None` when it does not parse.
    fn parsed(&mut self, name: &str, hash: &str, body: &str) -> Option<&Parsed> {
        // Looked up before the entry is taken: every reconcile asks of every unit, and an entry costs a key.
        if !self.parsed.contains_key(hash) {
            let parsed = Self::parse(name, hash, body, &self.unconstrained);
            self.parsed.insert(hash.to_string(), parsed);
        }
        self.parsed.get(hash)?.as_ref()
    }

    fn parse(name: &str, hash: &str, body: &str, unconstrained: &Arc<Requirements>) -> Option<Parsed> {
        match UnitFile::parse(body) {
            Ok(file) => {
                let traits = BodyTraits::of(&file);
                let requirements = if Requirements::depend_on_name(&file) {
                    NameRequirements::PerName(Arc::new(file))
                } else {
                    let requirements = Requirements::of(&file, name);
                    NameRequirements::Shared(if requirements == **unconstrained {
                        Arc::clone(unconstrained)
                    } else {
                        Arc::new(requirements)
                    })
                };
                Some(Parsed { traits, requirements })
            }
            Err(error) => {
                tracing::warn!(unit = %name, hash, error = %error.located(), "stored unit body does not parse");
                None
            }
        }
    }

    /// The traits of the body with hash `hash` (text `body`, of unit `name`); `None` when it does not parse.
    pub fn traits(&mut self, name: &str, hash: &str, body: &str) -> Option<BodyTraits> {
        self.parsed(name, hash, body).map(|p| p.traits)
    }

    /// The `[X-Fleet]` requirements of unit `name` whose body has hash `hash` (text `body`); `None` when the body
    /// does not parse.
    pub fn requirements(&mut self, name: &str, hash: &str, body: &str) -> Option<Arc<Requirements>> {
        if let Some((cached_hash, requirements)) = self.requirements.get(name)
            && cached_hash == hash
        {
            return Some(Arc::clone(requirements));
        }
        let file = match &self.parsed(name, hash, body)?.requirements {
            NameRequirements::Shared(requirements) => return Some(Arc::clone(requirements)),
            NameRequirements::PerName(file) => Arc::clone(file),
        };
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

    /// How many requirements are held: one per body shared by every name, one per unit where they depend on it.
    pub fn units(&self) -> usize {
        let shared = self.parsed.values().flatten().filter(|p| matches!(p.requirements, NameRequirements::Shared(_)));
        shared.count() + self.requirements.len()
    }

    /// How many distinct parsed files are held (only for bodies whose requirements depend on the name).
    pub fn files(&self) -> usize {
        self.parsed.values().flatten().filter(|p| matches!(p.requirements, NameRequirements::PerName(_))).count()
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
        assert!(cache.traits("bad.service", "h2", "[Service\n").is_none());
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

    #[test]
    fn only_a_body_whose_requirements_depend_on_the_name_keeps_its_file() {
        let mut cache = BodyCache::new();
        cache.requirements("t@a.service", "h1", TEMPLATE).unwrap();
        cache.requirements("plain.service", "h5", "[Service]\nExecStart=/bin/true\n").unwrap();
        cache.requirements("pinned.service", "h6", "[X-Fleet]\nMachineID=abc\n").unwrap();
        assert_eq!((cache.bodies(), cache.files()), (3, 1), "only the template's file is kept");
    }

    #[test]
    fn bodies_that_state_no_requirements_share_one_value() {
        let mut cache = BodyCache::new();
        let a = cache.requirements("a.service", "h7", "[Service]\nExecStart=/bin/a\n").unwrap();
        let b = cache.requirements("b.service", "h8", "[Unit]\nDescription=b\n[Service]\nExecStart=/bin/b\n").unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one value for both: {a:?} {b:?}");
        assert_eq!(*a, Requirements::default());
        let pinned = cache.requirements("c.service", "h9", "[X-Fleet]\nMachineID=abc\n").unwrap();
        assert_eq!(pinned.machine_id.as_deref(), Some("abc"));
    }

    #[test]
    fn traits_say_whether_a_body_installs_and_reloads() {
        let mut cache = BodyCache::new();
        let body = "[Service]\nExecStart=/bin/a\nExecReload=/bin/kill -HUP $MAINPID\n\n[Install]\nWantedBy=x.target\n";
        assert_eq!(cache.traits("a.service", "h1", body), Some(BodyTraits { install: true, reloadable: true }));
        let plain = "[Service]\nExecStart=/bin/a\nExecReload=\n";
        assert_eq!(cache.traits("b.service", "h2", plain), Some(BodyTraits { install: false, reloadable: false }));
    }
}

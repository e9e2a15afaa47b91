//! Tidy test: the module layering of ARCHITECTURE.md holds in the source, in the spirit of rust-analyzer's tidy
//! tests. ARCHITECTURE.md's "Layers" section holds one table per source tree (`<!-- layers <tree> -->`); this test
//! reads those tables, so the document and the check cannot disagree. Rules, for every `.rs` file of a tree:
//! - an import of another top-level module (`crate::x`, or `super::…` reaching it) goes to a lower layer;
//! - within one top-level module, no two sibling files import each other (directly or round a longer cycle);
//! - every top-level module of the tree is in the table, and the table names only modules that exist.
//!
//! Imports are read from the code with comments and string contents removed: `use` trees (braces included) and
//! paths written inline. Test code counts too: a test that imports upwards is an upward import.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The trees ARCHITECTURE.md gives a layer table for, relative to the workspace root: the crates with more than one
/// layer inside (Cargo keeps the layers between crates).
const TREES: [&str; 4] = ["crates/core/src", "crates/fleetd/src", "crates/fleetctl/src", "harness/src"];

#[test]
fn core_modules_import_only_downwards() {
    check_tree("crates/core/src");
}

#[test]
fn fleetd_modules_import_only_downwards() {
    check_tree("crates/fleetd/src");
}

#[test]
fn fleetctl_modules_import_only_downwards() {
    check_tree("crates/fleetctl/src");
}

#[test]
fn harness_modules_import_only_downwards() {
    check_tree("harness/src");
}

#[test]
fn every_layer_table_names_a_checked_tree() {
    let doc = architecture();
    for tree in tables_in(&doc) {
        assert!(TREES.contains(&tree.as_str()), "ARCHITECTURE.md has a layer table for {tree}, which no test checks");
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("harness/ has a parent").to_path_buf()
}

fn architecture() -> String {
    let path = workspace().join("ARCHITECTURE.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn check_tree(tree: &str) {
    let layers = match Layers::parse(&architecture(), tree) {
        Ok(layers) => layers,
        Err(e) => panic!("ARCHITECTURE.md: {e}"),
    };
    let root = workspace().join(tree);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let sources: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
            (f.strip_prefix(&root).expect("under the tree root").to_path_buf(), text)
        })
        .collect();
    let violations = violations(tree, &layers, &sources);
    assert!(
        violations.is_empty(),
        "{} layering violation(s) against ARCHITECTURE.md's layer table for {tree}:\n{}",
        violations.len(),
        violations.iter().map(|v| format!("  {v}")).collect::<Vec<_>>().join("\n")
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// One table: top-level module name → layer number (higher layers may import lower ones).
#[derive(Debug, PartialEq)]
struct Layers(BTreeMap<String, u32>);

impl Layers {
    /// The table after `<!-- layers <tree> -->`: rows `| <n> | `a`, `b` |` until the first line not starting with `|`.
    fn parse(doc: &str, tree: &str) -> Result<Layers, String> {
        let marker = format!("<!-- layers {tree} -->");
        let start = doc.find(&marker).ok_or_else(|| format!("no layer table for {tree} (expected {marker:?})"))?;
        let mut modules = BTreeMap::new();
        let rows = doc[start + marker.len()..].lines().skip_while(|l| l.trim().is_empty());
        for line in rows.take_while(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let Ok(layer) = cells[0].parse::<u32>() else { continue }; // header and separator rows
            let names = cells.get(1).ok_or_else(|| format!("layer {layer} of {tree}: no module cell in {line:?}"))?;
            for name in names.split(',').map(|n| n.trim().trim_matches('`')).filter(|n| !n.is_empty()) {
                if let Some(other) = modules.insert(name.to_string(), layer) {
                    return Err(format!("{tree}: module `{name}` is on layers {other} and {layer}"));
                }
            }
        }
        if modules.is_empty() {
            return Err(format!("the layer table for {tree} has no rows"));
        }
        Ok(Layers(modules))
    }
}

fn tables_in(doc: &str) -> Vec<String> {
    doc.match_indices("<!-- layers ")
        .filter_map(|(i, _)| doc[i + 12..].split(" -->").next())
        .map(String::from)
        .collect()
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Violation {
    Upward { file: String, import: String, from: (String, u32), to: (String, u32) },
    SiblingCycle { module: String, files: Vec<String> },
    Unlisted { module: String },
    Missing { module: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Upward { file, import, from, to } => {
                let rule = if from.1 == to.1 {
                    "a module does not import one on its own layer"
                } else {
                    "imports go to lower layers only"
                };
                write!(
                    f,
                    "{file}: `{import}` — `{}` (layer {}) imports `{}` (layer {}); {rule}",
                    from.0, from.1, to.0, to.1
                )
            }
            Violation::SiblingCycle { module, files } => {
                write!(
                    f,
                    "{module}: files import each other in a cycle: {}; move the shared piece down",
                    files.join(" -> ")
                )
            }
            Violation::Unlisted { module } => write!(f, "module `{module}` is not in the layer table; give it a layer"),
            Violation::Missing { module } => write!(f, "the layer table names `{module}`, which is not a module here"),
        }
    }
}

/// Every breach of `layers` in `sources` (paths relative to the tree root, text).
fn violations(tree: &str, layers: &Layers, sources: &[(PathBuf, String)]) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut top_level: BTreeSet<String> = BTreeSet::new();
    // module path of a file → the module paths it imports (for sibling cycles).
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    // What each module's own file (its hub) declares: child modules, and items re-exported from them.
    let hubs: BTreeMap<Vec<String>, Hub> = sources
        .iter()
        .filter_map(|(path, text)| Some((module_path(path)?, Hub::read(&strip_comments_and_strings(text)))))
        .collect();
    for (path, text) in sources {
        let Some(module) = module_path(path) else { continue }; // lib.rs, main.rs and bin/: the roots
        top_level.insert(module[0].clone());
        // The hub's own code using a child: an edge from the hub's node to that child.
        if let Some(hub) = hubs.get(&module) {
            for child in hub.uses(&strip_comments_and_strings(text)) {
                let mut from = module.clone();
                from.push(HUB.to_string());
                let mut to = module.clone();
                to.push(child);
                edges.entry(from).or_default().insert(to);
            }
        }
        for import in imports(&module, text) {
            let Some(first) = import.target.first() else { continue };
            if *first != module[0] {
                let (Some(&from), Some(&to)) = (layers.0.get(&module[0]), layers.0.get(first)) else { continue };
                if to >= from {
                    found.push(Violation::Upward {
                        file: format!("{tree}/{}", path.display()),
                        import: import.written,
                        from: (module[0].clone(), from),
                        to: (first.clone(), to),
                    });
                }
            } else if import.target.len() > 1 && module.len() > 1 {
                edges.entry(module.clone()).or_default().insert(through_hub(&hubs, &module, import.target));
            }
        }
    }
    for module in &top_level {
        if !layers.0.contains_key(module) {
            found.push(Violation::Unlisted { module: module.clone() });
        }
    }
    for module in layers.0.keys() {
        if !top_level.contains(module) {
            found.push(Violation::Missing { module: module.clone() });
        }
    }
    found.extend(sibling_cycles(&edges));
    found.sort();
    found.dedup();
    found
}

/// The node standing for a module's own file (`mod.rs`, or `x.rs` with an `x/` directory) among its children, so a
/// hub that uses its children while they use it shows as the cycle it is.
const HUB: &str = "(hub)";

/// A module's own file: the child modules it declares, and which child each re-exported name comes from.
#[derive(Debug, Default)]
struct Hub {
    children: BTreeSet<String>,
    reexports: BTreeMap<String, String>,
}

impl Hub {
    fn read(code: &str) -> Hub {
        let mut hub = Hub::default();
        for line in code.lines().map(str::trim) {
            let decl = line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub ")).unwrap_or(line);
            if let Some(name) = decl.strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';')) {
                hub.children.insert(name.trim().to_string());
            }
        }
        for line in code.lines().map(str::trim) {
            let Some(tree) = line.strip_prefix("pub use ").or_else(|| line.strip_prefix("pub(crate) use ")) else {
                continue;
            };
            for path in expand(tree.trim_end_matches(';')) {
                let segments: Vec<&str> = path.split("::").map(str::trim).collect();
                let (Some(first), Some(last)) = (segments.first(), segments.last()) else { continue };
                if segments.len() > 1 && hub.children.contains(*first) {
                    let name = last.rsplit(" as ").next().unwrap_or(last).trim();
                    hub.reexports.insert(name.to_string(), first.to_string());
                }
            }
        }
        hub
    }

    /// The children the hub's own code uses (`child::…` outside `mod` and `pub use` lines).
    fn uses(&self, code: &str) -> BTreeSet<String> {
        let mut used = BTreeSet::new();
        for line in code.lines().map(str::trim) {
            if line.starts_with("pub use ") || line.starts_with("pub(crate) use ") || line.contains("mod ") {
                continue;
            }
            let bytes = line.as_bytes();
            for child in &self.children {
                let needle = format!("{child}::");
                for (at, _) in line.match_indices(&needle) {
                    let before = at.checked_sub(1).map(|i| bytes[i]);
                    let starts = before.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b':'));
                    if starts {
                        used.insert(child.clone());
                    }
                }
            }
        }
        used
    }
}

/// Where an import of `target` from `module` lands among `module`'s siblings: a sibling module itself, the sibling a
/// name of the parent's hub re-exports, or the hub's own items.
fn through_hub(hubs: &BTreeMap<Vec<String>, Hub>, module: &[String], target: Vec<String>) -> Vec<String> {
    let parent = &module[..module.len() - 1];
    if target.len() <= parent.len() || target[..parent.len()] != *parent {
        return target;
    }
    let Some(hub) = hubs.get(parent) else { return target };
    let name = &target[parent.len()];
    if hub.children.contains(name) {
        return target;
    }
    let mut landed = parent.to_vec();
    landed.push(hub.reexports.get(name).cloned().unwrap_or_else(|| HUB.to_string()));
    landed
}

/// `a/b.rs` → `[a, b]`, `a/mod.rs` → `[a]`; `None` for the crate roots (`lib.rs`, `main.rs`, `bin/…`).
fn module_path(path: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = path.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.first().is_some_and(|p| p == "bin") || parts == ["lib.rs"] || parts == ["main.rs"] {
        return None;
    }
    let file = parts.pop()?;
    let stem = file.strip_suffix(".rs")?;
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// Cycles among sibling files: an edge `a/x → a/y` when a file of `a/x` (or below) imports `a/y` (or below).
fn sibling_cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Violation> {
    // Collapse every edge to the pair of distinct siblings it runs between.
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, targets) in edges {
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len().min(to.len()) {
                continue; // a module and its own parent or child: declarations and `super::` items
            }
            graph.entry(from[..=common].to_vec()).or_default().insert(to[..=common].to_vec());
        }
    }
    let mut cycles = Vec::new();
    let mut reported: BTreeSet<Vec<Vec<String>>> = BTreeSet::new();
    for start in graph.keys() {
        let Some(path) = path_back(&graph, start) else { continue };
        let mut members = path.clone();
        members.sort();
        if reported.insert(members) {
            let mut files: Vec<String> = path.iter().map(|m| m.join("::")).collect();
            files.push(start.join("::"));
            cycles.push(Violation::SiblingCycle { module: start[..start.len() - 1].join("::"), files });
        }
    }
    cycles
}

/// A path `start → … → start` in `graph`, without its last step, if there is one.
fn path_back(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>, start: &Vec<String>) -> Option<Vec<Vec<String>>> {
    let mut stack: Vec<(Vec<String>, Vec<Vec<String>>)> = vec![(start.clone(), vec![start.clone()])];
    let mut seen: BTreeSet<Vec<String>> = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                return Some(path);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

/// One import: the module path it reaches (crate-absolute, items included) and how it was written.
#[derive(Debug, PartialEq)]
struct Import {
    target: Vec<String>,
    written: String,
}

/// The `crate::` and `super::` paths in `text`, a file of module `module`, resolved to crate-absolute paths.
/// `super` inside an inline `mod` (such as `mod tests`) counts from that inline module.
fn imports(module: &[String], text: &str) -> Vec<Import> {
    let code = strip_comments_and_strings(text);
    let inline = inline_module_depths(&code);
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let at_word_start =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        let rest = &code[i..];
        if at_word_start && (rest.starts_with("crate::") || rest.starts_with("super::")) {
            let end = path_end(&code, i);
            let written = compact(&code[i..end]);
            let depth = inline.iter().filter(|(open, close)| (*open..*close).contains(&i)).count();
            for target in expand(&written) {
                if let Some(resolved) = resolve(module, depth, &target) {
                    out.push(Import { target: resolved, written: written.clone() });
                }
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Where a path starting at `start` ends: identifiers, `::`, and one balanced `{…}` use tree.
fn path_end(code: &str, start: usize) -> usize {
    let bytes = code.as_bytes();
    let mut i = start;
    let mut depth = 0usize;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'{' => depth += 1,
            b'}' if depth == 0 => break,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ if depth > 0 => {}
            b':' | b'_' => {}
            _ if b.is_ascii_alphanumeric() => {}
            _ => break,
        }
        i += 1;
    }
    i
}

fn compact(path: &str) -> String {
    path.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A use tree as the paths it names: `crate::a::{b, c::{d, e}}` → `crate::a::b`, `crate::a::c::d`, `crate::a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else { return vec![tree.trim_end_matches(':').to_string()] };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut items = Vec::new();
    let (mut depth, mut from) = (0usize, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&inner[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[from..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .flat_map(|item| expand(&format!("{prefix}{item}")))
        .collect()
}

/// `crate::a::b` → `[a, b]`; `super::x` from `[m, f]` (`depth` inline modules deep) → `[m, x]`. `self` and `*`
/// segments name the path before them. `None` for a path to the crate root itself.
fn resolve(module: &[String], depth: usize, path: &str) -> Option<Vec<String>> {
    let mut segments = path.split("::").map(|s| s.split_whitespace().next().unwrap_or(""));
    let mut base: Vec<String> = match segments.next()? {
        "crate" => Vec::new(),
        "super" => {
            let mut here = module.to_vec();
            let mut ups = 1usize;
            let mut rest = Vec::new();
            for s in segments.by_ref() {
                if s == "super" {
                    ups += 1;
                } else {
                    rest.push(s);
                    break;
                }
            }
            // `super` first leaves the inline modules, then the file's own module path.
            let from_file = ups.saturating_sub(depth);
            if from_file > here.len() {
                return None;
            }
            here.truncate(here.len() - from_file);
            here.extend(rest.into_iter().map(String::from));
            here
        }
        _ => return None,
    };
    for s in segments {
        if s.is_empty() || s == "self" || s == "*" {
            break;
        }
        base.push(s.to_string());
    }
    base.retain(|s| !s.is_empty() && s != "self" && s != "*");
    (!base.is_empty()).then_some(base)
}

/// Byte ranges `(open, close)` of the bodies of inline `mod name { … }` blocks.
fn inline_module_depths(code: &str) -> Vec<(usize, usize)> {
    let bytes = code.as_bytes();
    let mut ranges = Vec::new();
    let mut opens: Vec<Option<usize>> = Vec::new(); // per open brace: Some(start) when it opens an inline module
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                let before = code[..i].trim_end();
                let is_mod = before
                    .rsplit_once(|c: char| c.is_whitespace())
                    .is_some_and(|(head, name)| head.trim_end().ends_with("mod") && is_ident(name));
                opens.push(is_mod.then_some(i));
            }
            b'}' => {
                if let Some(Some(open)) = opens.pop() {
                    ranges.push((open, i));
                }
            }
            _ => {}
        }
        i += 1;
    }
    ranges
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `text` with comments removed and string and char literal contents blanked (so neither braces nor paths in them
/// count); byte offsets are kept.
fn strip_comments_and_strings(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[u8]| {
        for &b in s {
            out.push(if b == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(rest.len(), |e| e + 4);
            blank(&mut out, &rest[..end]);
            i += end;
        } else if let Some(len) = raw_string_len(rest) {
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let len = (j + 1).min(rest.len());
            blank(&mut out, &rest[..len]);
            i += len;
        } else if let Some(len) = char_literal_len(rest) {
            blank(&mut out, &rest[..len]);
            i += len;
        } else {
            let c = text[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"…"`, `r#"…"#`, `br"…"` at the start of `rest`: its length.
fn raw_string_len(rest: &[u8]) -> Option<usize> {
    let start = if rest.starts_with(b"br") {
        2
    } else if rest.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = rest[start..].iter().take_while(|&&b| b == b'#').count();
    if rest.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    let end = rest[body..].windows(close.len()).position(|w| w == close.as_slice())?;
    Some(body + end + close.len())
}

/// `'x'`, `'\n'`, `'\u{1F600}'` at the start of `rest` (not a lifetime): its length.
fn char_literal_len(rest: &[u8]) -> Option<usize> {
    if rest.first() != Some(&b'\'') {
        return None;
    }
    if rest.get(1) == Some(&b'\\') {
        let end = rest[2..].iter().position(|&b| b == b'\'')?;
        return Some(end + 3);
    }
    let c = std::str::from_utf8(&rest[1..rest.len().min(5)])
        .ok()
        .or_else(|| (2..=5).rev().find_map(|n| std::str::from_utf8(&rest[1..rest.len().min(n)]).ok()))?;
    let ch = c.chars().next()?;
    (rest.get(1 + ch.len_utf8()) == Some(&b'\'')).then_some(2 + ch.len_utf8())
}

#[cfg(test)]
mod reading {
    use super::*;

    fn targets(module: &[&str], text: &str) -> Vec<String> {
        let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
        imports(&module, text).into_iter().map(|i| i.target.join("::")).collect()
    }

    #[test]
    fn use_trees_inline_paths_and_super_resolve_to_crate_paths() {
        let text = "use crate::{a::{b, c}, d};\nuse super::e::F;\nfn f() { crate::g::h(); }\n";
        assert_eq!(targets(&["m", "x"], text), ["a::b", "a::c", "d", "m::e::F", "g::h"]);
    }

    #[test]
    fn super_in_an_inline_test_module_counts_from_the_file() {
        let text = "mod tests {\n    use super::*;\n    use super::super::y::Z;\n}\n";
        assert_eq!(targets(&["m", "x"], text), ["m::x", "m::y::Z"]);
    }

    #[test]
    fn comments_and_strings_are_not_imports() {
        let text = "// crate::a\n/// [`crate::b`]\nconst S: &str = \"crate::c {\";\nconst R: &str = r#\"crate::d\"#;\nconst C: char = '{';\nfn f<'a>(x: &'a str) { crate::e::f(x) }\n";
        assert_eq!(targets(&["m"], text), ["e::f"]);
    }

    #[test]
    fn upward_imports_and_sibling_cycles_are_named() {
        let doc = "<!-- layers t -->\n| layer | modules |\n|---|---|\n| 2 | `top` |\n| 1 | `low`, `side` |\n";
        let layers = Layers::parse(doc, "t").unwrap();
        let sources = vec![
            (PathBuf::from("low/mod.rs"), "use crate::top::X;\nuse crate::side::Y;\n".to_string()),
            (PathBuf::from("top/a.rs"), "use super::b::B;\nuse crate::low::L;\n".to_string()),
            (PathBuf::from("top/b.rs"), "use super::a::A;\n".to_string()),
            (PathBuf::from("side.rs"), String::new()),
        ];
        let found: Vec<String> = violations("t", &layers, &sources).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "t/low/mod.rs: `crate::side::Y` — `low` (layer 1) imports `side` (layer 1); a module does not import one on its own layer",
                "t/low/mod.rs: `crate::top::X` — `low` (layer 1) imports `top` (layer 2); imports go to lower layers only",
                "top: files import each other in a cycle: top::a -> top::b -> top::a; move the shared piece down",
            ]
        );
    }

    #[test]
    fn a_hub_that_uses_a_child_using_the_hub_is_a_cycle() {
        let layers = Layers::parse("<!-- layers t -->\n| 1 | `top` |\n", "t").unwrap();
        let hub = "mod a;\nmod b;\npub use b::B;\npub struct Ctx;\nfn run() { a::go(); }\n";
        let sources = vec![
            (PathBuf::from("top/mod.rs"), hub.to_string()),
            (PathBuf::from("top/a.rs"), "use super::Ctx;\npub fn go() {}\n".to_string()),
            (PathBuf::from("top/b.rs"), "pub struct B;\n".to_string()),
        ];
        let found: Vec<String> = violations("t", &layers, &sources).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            ["top: files import each other in a cycle: top::(hub) -> top::a -> top::(hub); move the shared piece down"]
        );
    }

    #[test]
    fn a_name_the_hub_reexports_counts_as_its_sibling() {
        let layers = Layers::parse("<!-- layers t -->\n| 1 | `top` |\n", "t").unwrap();
        let hub = "mod a;\nmod b;\npub use b::B;\nfn run() { a::go(); }\n";
        let sources = vec![
            (PathBuf::from("top/mod.rs"), hub.to_string()),
            (PathBuf::from("top/a.rs"), "use super::B;\npub fn go() {}\n".to_string()),
            (PathBuf::from("top/b.rs"), "use super::a::go;\npub struct B;\n".to_string()),
        ];
        let found: Vec<String> = violations("t", &layers, &sources).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            ["top: files import each other in a cycle: top::a -> top::b -> top::a; move the shared piece down"]
        );
    }

    #[test]
    fn a_module_missing_from_the_table_is_named() {
        let layers = Layers::parse("<!-- layers t -->\n| 1 | `a` |\n", "t").unwrap();
        let sources = vec![(PathBuf::from("b.rs"), String::new())];
        let found: Vec<String> = violations("t", &layers, &sources).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "module `b` is not in the layer table; give it a layer",
                "the layer table names `a`, which is not a module here"
            ]
        );
    }
}

//! The config-file syntax fleetd inherited from goini (spec §2.2): `key = value` lines outside any section.

use std::collections::BTreeMap;

/// A line that is neither blank, a comment, a section header nor `key = value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config file line {line}: syntax error, expected `key = value`, found {found:?}")]
pub struct IniError {
    pub line: usize,
    pub found: String,
}

/// Parses the file into lower-cased keys → values. Options inside `[section]`s are ignored, as the original ignored
/// them; a later duplicate key wins.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, IniError> {
    let mut out = BTreeMap::new();
    let mut in_section = false;
    let mut pending = String::new();
    let mut pending_start = 0;
    for (idx, raw) in text.lines().enumerate() {
        let line_no = idx + 1;
        let trimmed = raw.trim();
        if pending.is_empty() {
            pending_start = line_no;
        }
        // A trailing backslash joins the next (trimmed) line.
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(trimmed);
        let logical = std::mem::take(&mut pending);
        handle_line(&logical, pending_start, &mut in_section, &mut out)?;
    }
    if !pending.is_empty() {
        handle_line(&pending, pending_start, &mut in_section, &mut out)?;
    }
    Ok(out)
}

fn handle_line(
    line: &str,
    line_no: usize,
    in_section: &mut bool,
    out: &mut BTreeMap<String, String>,
) -> Result<(), IniError> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
        return Ok(());
    }
    if line.starts_with('[') && line.ends_with(']') {
        *in_section = true;
        return Ok(());
    }
    let Some((key, value)) = line.split_once('=') else {
        return Err(IniError { line: line_no, found: line.to_string() });
    };
    let key = key.trim().to_lowercase();
    if key.is_empty() {
        return Err(IniError { line: line_no, found: line.to_string() });
    }
    let value = parse_value(value.trim()).ok_or_else(|| IniError { line: line_no, found: line.to_string() })?;
    if !*in_section {
        out.insert(key, value);
    }
    Ok(())
}

/// `"quoted"` and `'quoted'` values lose their quotes (the whole value must be quoted); unquoted values end at the
/// first `#` or `;`.
fn parse_value(value: &str) -> Option<String> {
    for quote in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(quote) {
            let inner = rest.strip_suffix(quote)?;
            if inner.contains(quote) {
                return None;
            }
            return Some(inner.to_string());
        }
    }
    let end = value.find(['#', ';']).unwrap_or(value.len());
    Some(value[..end].trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(text: &str) -> Vec<(String, String)> {
        parse(text).unwrap().into_iter().collect()
    }

    #[test]
    fn reads_keys_outside_sections_lowercased() {
        let text = "Verbosity=2\n# comment\n; other\n\netcd_servers=[\"http://a:2379\"]\n[sec]\nignored=1\n";
        assert_eq!(
            kv(text),
            vec![
                ("etcd_servers".to_string(), "[\"http://a:2379\"]".to_string()),
                ("verbosity".to_string(), "2".to_string())
            ]
        );
    }

    #[test]
    fn quotes_comments_empty_values_and_continuations() {
        assert_eq!(kv("a = \"x y\""), vec![("a".into(), "x y".into())]);
        assert_eq!(kv("a = 'x'"), vec![("a".into(), "x".into())]);
        assert_eq!(kv("a = x # trailing"), vec![("a".into(), "x".into())]);
        assert_eq!(kv("a = x ; trailing"), vec![("a".into(), "x".into())]);
        assert_eq!(kv("a ="), vec![("a".into(), "".into())]);
        assert_eq!(kv("metadata = a=1,\\\n  b=2"), vec![("metadata".into(), "a=1,b=2".into())]);
        assert_eq!(kv("a=1\na=2"), vec![("a".into(), "2".into())]);
    }

    #[test]
    fn rejects_lines_without_equals_and_half_quoted_values() {
        assert_eq!(parse("just words").unwrap_err().line, 1);
        assert_eq!(parse("ok=1\nx = \"open").unwrap_err().line, 2);
        assert!(parse("=v").is_err());
    }
}

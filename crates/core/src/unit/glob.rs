//! Go `path.Match` glob semantics, used by `Conflicts=` and `Replaces=` patterns (spec §5, §6.8, §6.10).
//!
//! `*` matches any run of non-`/` characters, `?` one non-`/` character, `[...]` a character class with ranges and
//! `^` negation, `\` escapes the next character. A malformed pattern matches nothing (the original ignores the
//! error `path.Match` returns and treats it as "no match"). No crate reproduces Go's exact rules, hence this file.
//!
//! Two forms over one matcher: the function form ([`glob_match`], [`try_match`]) for one-off checks such as option
//! validation, and the compiled [`Pattern`] for the scheduler, which matches the same patterns against many names
//! and resolves wildcard-free patterns (the common `Conflicts=foo.service`) by string equality or a map lookup.

/// A validated pattern, to match many names. Same semantics as [`glob_match`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    /// The name matched when the pattern has no wildcard (escapes removed): matching is then string equality.
    literal: Option<String>,
}

impl Pattern {
    /// Validates `pattern`; `None` when it is malformed (such a pattern matches no name).
    pub fn new(pattern: &str) -> Option<Pattern> {
        // Like Go (1.16+), a malformed pattern is reported whatever the name, so matching the empty name validates.
        try_match(pattern, "").ok()?;
        Some(Pattern { source: pattern.to_string(), literal: literal_of(pattern) })
    }

    /// The pattern text as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The exact name this pattern matches when it contains no wildcard.
    pub fn literal(&self) -> Option<&str> {
        self.literal.as_deref()
    }

    /// True when the whole of `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        match &self.literal {
            Some(literal) => literal == name,
            None => glob_match(&self.source, name),
        }
    }
}

/// The name a wildcard-free pattern matches, with `\` escapes resolved; `None` if it has a wildcard or class.
fn literal_of(pattern: &str) -> Option<String> {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' | '[' => return None,
            '\\' => out.push(chars.next()?),
            c => out.push(c),
        }
    }
    Some(out)
}

/// A pattern Go's `path.Match` rejects with `ErrBadPattern`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in pattern")]
pub struct BadPattern;

/// Whether `name` matches `pattern`; malformed patterns match nothing.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    matches!(try_match(pattern, name), Ok(true))
}

/// Go `path.Match`: `Ok(matched)` or `Err(BadPattern)` when the pattern is malformed.
///
/// Works on bytes like Go does: a star may resume matching in the middle of a multi-byte character, where `?`
/// then consumes single bytes (Go's `utf8.RuneError` of width 1).
pub fn try_match(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let mut pattern = pattern.as_bytes();
    let mut name = name.as_bytes();
    'chunks: while !pattern.is_empty() {
        let (star, chunk, rest) = next_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing star matches the rest of the name unless it crosses a '/'.
            return Ok(!name.contains(&b'/'));
        }
        let here = match_chunk(chunk, name);
        if let Ok(Some(after)) = here
            && (after.is_empty() || !pattern.is_empty())
        {
            name = after;
            continue;
        }
        here?;
        if star {
            // Let the star swallow 1, 2, ... bytes, never a '/'.
            for i in 0..name.len() {
                if name[i] == b'/' {
                    break;
                }
                match match_chunk(chunk, &name[i + 1..])? {
                    Some(after) if pattern.is_empty() && !after.is_empty() => continue,
                    Some(after) => {
                        name = after;
                        continue 'chunks;
                    }
                    None => {}
                }
            }
        }
        // No match; still report a malformed remainder the way Go does.
        while !pattern.is_empty() {
            let (_, chunk, rest) = next_chunk(pattern);
            pattern = rest;
            match_chunk(chunk, b"")?;
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off leading stars and the chunk that follows, up to the next star outside a class.
fn next_chunk(pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let stars = pattern.iter().take_while(|&&b| b == b'*').count();
    let trimmed = &pattern[stars..];
    let mut in_class = false;
    let mut i = 0;
    while i < trimmed.len() {
        match trimmed[i] {
            b'\\' if i + 1 < trimmed.len() => i += 1,
            b'[' => in_class = true,
            b']' => in_class = false,
            b'*' if !in_class => break,
            _ => {}
        }
        i += 1;
    }
    (stars > 0, &trimmed[..i], &trimmed[i..])
}

/// Matches one chunk (no unescaped stars) at the start of `s`; `Ok(Some(rest))` on success.
/// Like Go, keeps scanning the chunk after a mismatch so that malformed syntax is still reported.
fn match_chunk<'a>(chunk: &[u8], s: &'a [u8]) -> Result<Option<&'a [u8]>, BadPattern> {
    let mut chunk = chunk;
    let mut s = s;
    let mut failed = false;
    while let Some(&c) = chunk.first() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match c {
            b'[' => {
                let mut subject = '\0';
                if !failed {
                    let (r, n) = decode_rune(s);
                    subject = r;
                    s = &s[n..];
                }
                chunk = &chunk[1..];
                let negated = chunk.first() == Some(&b'^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if ranges > 0 && chunk.first() == Some(&b']') {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = class_char(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if chunk.first() == Some(&b'-') {
                        let (h, rest) = class_char(&chunk[1..])?;
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= subject && subject <= hi {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            b'?' => {
                if !failed {
                    if s[0] == b'/' {
                        failed = true;
                    }
                    let (_, n) = decode_rune(s);
                    s = &s[n..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                if c == b'\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return Err(BadPattern);
                    }
                }
                if !failed {
                    if chunk[0] != s[0] {
                        failed = true;
                    }
                    s = &s[1..];
                }
                chunk = &chunk[1..];
            }
        }
    }
    Ok(if failed { None } else { Some(s) })
}

/// One (possibly escaped) character of a class; a class must not end right after it.
fn class_char(chunk: &[u8]) -> Result<(char, &[u8]), BadPattern> {
    let mut chunk = chunk;
    match chunk.first() {
        None | Some(b'-') | Some(b']') => return Err(BadPattern),
        Some(b'\\') => {
            chunk = &chunk[1..];
            if chunk.is_empty() {
                return Err(BadPattern);
            }
        }
        Some(_) => {}
    }
    let (c, n) = decode_rune(chunk);
    if c == char::REPLACEMENT_CHARACTER && n == 1 {
        return Err(BadPattern);
    }
    let rest = &chunk[n..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((c, rest))
}

/// Go `utf8.DecodeRune`: the first character and its width; an invalid byte decodes as U+FFFD of width 1.
pub(crate) fn decode_rune(bytes: &[u8]) -> (char, usize) {
    let Some(&first) = bytes.first() else {
        return (char::REPLACEMENT_CHARACTER, 0);
    };
    if first < 0x80 {
        return (first as char, 1);
    }
    let width = match first {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return (char::REPLACEMENT_CHARACTER, 1),
    };
    match bytes.get(..width).and_then(|b| std::str::from_utf8(b).ok()) {
        Some(text) => (text.chars().next().unwrap_or(char::REPLACEMENT_CHARACTER), width),
        None => (char::REPLACEMENT_CHARACTER, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's own `path.Match` test table (`path/match_test.go`), as (pattern, name, matched, bad pattern).
    const GO_CASES: &[(&str, &str, bool, bool)] = &[
        ("abc", "abc", true, false),
        ("*", "abc", true, false),
        ("*c", "abc", true, false),
        ("a*", "a", true, false),
        ("a*", "abc", true, false),
        ("a*", "ab/c", false, false),
        ("a*/b", "abc/b", true, false),
        ("a*/b", "a/c/b", false, false),
        ("a*b*c*d*e*/f", "axbxcxdxe/f", true, false),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/f", true, false),
        ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", false, false),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", false, false),
        ("a*b?c*x", "abxbbxdbxebxczzx", true, false),
        ("a*b?c*x", "abxbbxdbxebxczzy", false, false),
        ("ab[c]", "abc", true, false),
        ("ab[b-d]", "abc", true, false),
        ("ab[e-g]", "abc", false, false),
        ("ab[^c]", "abc", false, false),
        ("ab[^b-d]", "abc", false, false),
        ("ab[^e-g]", "abc", true, false),
        ("a\\*b", "a*b", true, false),
        ("a\\*b", "ab", false, false),
        ("a?b", "a☺b", true, false),
        ("a[^a]b", "a☺b", true, false),
        ("a???b", "a☺b", false, false),
        ("a[^a][^a][^a]b", "a☺b", false, false),
        ("[a-ζ]*", "α", true, false),
        ("*[a-ζ]", "A", false, false),
        ("a?b", "a/b", false, false),
        ("a*b", "a/b", false, false),
        ("[\\]a]", "]", true, false),
        ("[\\-]", "-", true, false),
        ("[x\\-]", "x", true, false),
        ("[x\\-]", "-", true, false),
        ("[x\\-]", "z", false, false),
        ("[\\-x]", "x", true, false),
        ("[\\-x]", "-", true, false),
        ("[\\-x]", "a", false, false),
        ("[]a]", "]", false, true),
        ("[-]", "-", false, true),
        ("[x-]", "x", false, true),
        ("[x-]", "-", false, true),
        ("[x-]", "z", false, true),
        ("[-x]", "x", false, true),
        ("[-x]", "-", false, true),
        ("[-x]", "a", false, true),
        ("\\", "a", false, true),
        ("[a-b-c]", "a", false, true),
        ("[", "a", false, true),
        ("[^", "a", false, true),
        ("[^bc", "a", false, true),
        ("a[", "a", false, true),
        ("a[", "ab", false, true),
        ("a[", "x", false, true),
        ("a/b[", "x", false, true),
        ("*x", "xxx", true, false),
    ];

    #[test]
    fn go_path_match_table() {
        for &(pattern, name, want, bad) in GO_CASES {
            let got = try_match(pattern, name);
            if bad {
                assert_eq!(got, Err(BadPattern), "{pattern:?} vs {name:?}");
            } else {
                assert_eq!(got, Ok(want), "{pattern:?} vs {name:?}");
            }
            assert_eq!(glob_match(pattern, name), want && !bad, "{pattern:?} vs {name:?}");
        }
    }

    /// Further cases (from the engine's former matcher): empty patterns, reversed ranges, fleet-style names.
    const MORE_CASES: &[(&str, &str, bool)] = &[
        ("[z-a]", "m", false),
        ("", "", true),
        ("", "a", false),
        ("conflict.*.service", "conflict.3.service", true),
        ("conflict.*.service", "conflict.service", false),
        ("excl@*.service", "excl@4.service", true),
        ("hello.service", "hello.service", true),
        ("hello.service", "hello@1.service", false),
    ];

    #[test]
    fn compiled_patterns_agree_with_the_function_form() {
        let go = GO_CASES.iter().map(|&(p, n, want, bad)| (p, n, want && !bad));
        for (pattern, name, want) in go.chain(MORE_CASES.iter().copied()) {
            assert_eq!(glob_match(pattern, name), want, "{pattern:?} vs {name:?}");
            let compiled = Pattern::new(pattern);
            assert_eq!(compiled.is_some_and(|p| p.matches(name)), want, "compiled {pattern:?} vs {name:?}");
        }
    }

    #[test]
    fn malformed_patterns_match_nothing() {
        for pattern in ["[]a]", "[-]", "[x-]", "[-x]", "\\", "[a-b-c]", "[", "[^", "[^bc", "a[", "a\\", "[\\", "*[]"] {
            assert!(Pattern::new(pattern).is_none(), "{pattern:?} should be malformed");
            assert!(!glob_match(pattern, "a"), "{pattern:?}");
            assert!(!glob_match(pattern, pattern), "{pattern:?}");
        }
    }

    #[test]
    fn literal_patterns_are_recognised() {
        assert_eq!(Pattern::new("a\\*b.service").unwrap().literal(), Some("a*b.service"));
        assert_eq!(Pattern::new("hello.service").unwrap().literal(), Some("hello.service"));
        assert_eq!(Pattern::new("a*").unwrap().literal(), None);
        assert_eq!(Pattern::new("a?").unwrap().literal(), None);
        assert_eq!(Pattern::new("a[b]").unwrap().literal(), None);
        assert!(Pattern::new("a\\*b.service").unwrap().matches("a*b.service"));
    }

    #[test]
    fn fleet_patterns() {
        assert!(glob_match("excl@*.service", "excl@1.service"));
        assert!(glob_match("meta-*.service", "meta-b.service"));
        assert!(glob_match("conflict.*.service", "conflict.3.service"));
        assert!(!glob_match("conflict.*.service", "other.service"));
        assert!(glob_match("hello.service", "hello.service"));
        assert!(!glob_match("hello.service", "hello.socket"));
    }

    #[test]
    fn star_resumes_inside_a_multibyte_character_like_go() {
        // Go's star loop advances byte by byte, and `?` then eats single bytes of "€" (3 bytes).
        assert!(glob_match("*??", "€"));
        assert!(!glob_match("*???", "€"));
        assert!(glob_match("?", "€"));
        assert!(!glob_match("??", "€"));
    }
}

//! Go `path.Match` glob patterns, as used by `Conflicts=` and `Replaces=` (spec §5, §6.8, §6.10).
//!
//! TEMPORARY DUPLICATE of `unit::glob` (being written in the unit module): the engine needs the matcher before that
//! module is merged. At merge, delete this file and use `unit::glob` instead.
//!
//! Syntax: `*` matches any run of characters other than `/`; `?` matches one character other than `/`;
//! `[...]` is a non-empty class of characters and `lo-hi` ranges, negated by a leading `^`; `\c` matches `c`
//! literally, inside and outside classes. A malformed pattern (unclosed or empty class, dangling `\`, a range
//! missing an end) matches nothing, like fleet treating `path.Match`'s `ErrBadPattern` as "no match".

/// A compiled pattern. Build it once with [`Pattern::new`] and match many names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    tokens: Vec<Token>,
    /// The pattern text with escapes removed when it has no wildcard at all: matching is then string equality.
    literal: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    AnyChar,
    Star,
    Class { negated: bool, ranges: Vec<(char, char)> },
}

impl Pattern {
    /// Compiles `pattern`; `None` when it is malformed (such a pattern matches no name).
    pub fn new(pattern: &str) -> Option<Pattern> {
        let tokens = parse(pattern)?;
        let literal = tokens
            .iter()
            .map(|t| match t {
                Token::Char(c) => Some(*c),
                _ => None,
            })
            .collect::<Option<String>>();
        Some(Pattern { tokens, literal })
    }

    /// The exact name this pattern matches when it contains no wildcard.
    pub fn literal(&self) -> Option<&str> {
        self.literal.as_deref()
    }

    /// True when the whole of `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        if let Some(literal) = &self.literal {
            return literal == name;
        }
        let name: Vec<char> = name.chars().collect();
        // reachable[i]: the tokens consumed so far can match exactly name[..i].
        let mut reachable = vec![false; name.len() + 1];
        reachable[0] = true;
        for token in &self.tokens {
            let mut next = vec![false; name.len() + 1];
            match token {
                Token::Star => {
                    let mut open = false;
                    for i in 0..=name.len() {
                        open = reachable[i] || (open && name[i - 1] != '/');
                        next[i] = open;
                    }
                }
                single => {
                    for i in 0..name.len() {
                        next[i + 1] = reachable[i] && single_matches(single, name[i]);
                    }
                }
            }
            reachable = next;
            if !reachable.contains(&true) {
                return false;
            }
        }
        reachable[name.len()]
    }
}

/// Go `path.Match(pattern, name)` with a malformed pattern treated as no match.
pub fn matches(pattern: &str, name: &str) -> bool {
    Pattern::new(pattern).is_some_and(|p| p.matches(name))
}

fn single_matches(token: &Token, c: char) -> bool {
    match token {
        Token::Char(want) => *want == c,
        Token::AnyChar => c != '/',
        Token::Class { negated, ranges } => ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated,
        Token::Star => unreachable!("star handled by the caller"),
    }
}

fn parse(pattern: &str) -> Option<Vec<Token>> {
    let mut chars = pattern.chars().peekable();
    let mut tokens = Vec::new();
    while let Some(c) = chars.next() {
        let token = match c {
            '*' => {
                if tokens.last() == Some(&Token::Star) {
                    continue;
                }
                Token::Star
            }
            '?' => Token::AnyChar,
            '\\' => Token::Char(chars.next()?),
            '[' => {
                let negated = chars.next_if_eq(&'^').is_some();
                let mut ranges = Vec::new();
                loop {
                    if !ranges.is_empty() && chars.next_if_eq(&']').is_some() {
                        break;
                    }
                    let lo = class_char(&mut chars)?;
                    let hi = if chars.next_if_eq(&'-').is_some() { class_char(&mut chars)? } else { lo };
                    ranges.push((lo, hi));
                }
                Token::Class { negated, ranges }
            }
            other => Token::Char(other),
        };
        tokens.push(token);
    }
    Some(tokens)
}

/// One (possibly escaped) character inside a class; `-` and `]` must be escaped there, and the class must close.
fn class_char(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<char> {
    match chars.next()? {
        '-' | ']' => None,
        '\\' => chars.next(),
        c => Some(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_path_match_table() {
        // (pattern, name, matches) — cases follow Go's documented path.Match behaviour.
        let cases: &[(&str, &str, bool)] = &[
            ("abc", "abc", true),
            ("*", "abc", true),
            ("*c", "abc", true),
            ("a*", "a", true),
            ("a*", "abc", true),
            ("a*", "ab/c", false),
            ("a*/b", "abc/b", true),
            ("a*/b", "a/c/b", false),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", true),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/f", true),
            ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", false),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", false),
            ("a*b?c*x", "abxbbxdbxebxczzx", true),
            ("a*b?c*x", "abxbbxdbxebxczzy", false),
            ("ab[c]", "abc", true),
            ("ab[b-d]", "abc", true),
            ("ab[e-g]", "abc", false),
            ("ab[^c]", "abc", false),
            ("ab[^b-d]", "abc", false),
            ("ab[^e-g]", "abc", true),
            ("a\\*b", "a*b", true),
            ("a\\*b", "ab", false),
            ("a?b", "a☺b", true),
            ("a[^a]b", "a☺b", true),
            ("a???b", "a☺b", false),
            ("a[^a][^a][^a]b", "a☺b", false),
            ("[a-ζ]*", "α", true),
            ("*[a-ζ]", "A", false),
            ("a?b", "a/b", false),
            ("a*b", "a/b", false),
            ("[\\]a]", "]", true),
            ("[\\-]", "-", true),
            ("[x\\-]", "x", true),
            ("[x\\-]", "-", true),
            ("[x\\-]", "z", false),
            ("[\\-x]", "x", true),
            ("[\\-x]", "-", true),
            ("[\\-x]", "a", false),
            ("*x", "xxx", true),
            ("[z-a]", "m", false),
            ("", "", true),
            ("", "a", false),
            ("conflict.*.service", "conflict.3.service", true),
            ("conflict.*.service", "conflict.service", false),
            ("excl@*.service", "excl@4.service", true),
            ("hello.service", "hello.service", true),
            ("hello.service", "hello@1.service", false),
        ];
        for &(pattern, name, want) in cases {
            assert_eq!(matches(pattern, name), want, "pattern {pattern:?} against {name:?}");
        }
    }

    #[test]
    fn malformed_patterns_match_nothing() {
        for pattern in ["[]a]", "[-]", "[x-]", "[-x]", "\\", "[a-b-c]", "[", "[^", "[^bc", "a[", "a\\", "[\\", "*[]"] {
            assert!(Pattern::new(pattern).is_none(), "{pattern:?} should be malformed");
            assert!(!matches(pattern, "a"), "{pattern:?}");
            assert!(!matches(pattern, pattern), "{pattern:?}");
        }
    }

    #[test]
    fn literal_patterns_are_recognised() {
        assert_eq!(Pattern::new("a\\*b.service").unwrap().literal(), Some("a*b.service"));
        assert_eq!(Pattern::new("a*").unwrap().literal(), None);
        assert_eq!(Pattern::new("a[b]").unwrap().literal(), None);
    }
}

//! INTERIM: a Go `path.Match`-compatible glob for `Conflicts=` patterns, private to the agent until the unit
//! module's `unit::glob` lands; then `interim_path_match` is deleted and callers pass that function instead.

/// Go `path.Match`: `*` = any run of non-`/` characters, `?` = one non-`/` character, `[...]`/`[^...]` classes
/// with ranges, `\` escapes. An invalid pattern matches nothing.
pub fn interim_path_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    valid(&p) && matches(&p, &n)
}

fn valid(p: &[char]) -> bool {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '\\' if i + 1 >= p.len() => return false,
            '\\' => i += 2,
            '[' => match class(&p[i..], None) {
                Some((_, len)) => i += len,
                None => return false,
            },
            _ => i += 1,
        }
    }
    true
}

fn matches(p: &[char], n: &[char]) -> bool {
    match p.first() {
        None => n.is_empty(),
        Some('*') => {
            for i in 0..=n.len() {
                if matches(&p[1..], &n[i..]) {
                    return true;
                }
                if i < n.len() && n[i] == '/' {
                    break;
                }
            }
            false
        }
        Some('?') => n.first().is_some_and(|&c| c != '/') && matches(&p[1..], &n[1..]),
        Some('[') => match (n.first(), class(p, n.first().copied())) {
            (Some(_), Some((true, len))) => matches(&p[len..], &n[1..]),
            _ => false,
        },
        Some('\\') => p.len() > 1 && n.first() == Some(&p[1]) && matches(&p[2..], &n[1..]),
        Some(c) => n.first() == Some(c) && matches(&p[1..], &n[1..]),
    }
}

/// Parse the class starting at `p[0] == '['`: whether `c` is in it, and the class length. None when malformed.
fn class(p: &[char], c: Option<char>) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = p.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut hit = false;
    let mut ranges = 0;
    loop {
        if p.get(i) == Some(&']') && ranges > 0 {
            i += 1;
            break;
        }
        let (lo, len) = escaped(&p[i.min(p.len())..])?;
        i += len;
        let mut hi = lo;
        if p.get(i) == Some(&'-') {
            let (h, len) = escaped(&p[i + 1..])?;
            hi = h;
            i += 1 + len;
        }
        ranges += 1;
        if c.is_some_and(|c| lo <= c && c <= hi) {
            hit = true;
        }
    }
    Some((hit != negated, i))
}

fn escaped(p: &[char]) -> Option<(char, usize)> {
    match p.first()? {
        '-' | ']' => None,
        '\\' => p.get(1).map(|&c| (c, 2)),
        &c => Some((c, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::interim_path_match as m;

    #[test]
    fn behaves_like_go_path_match() {
        // (pattern, name, match) — cases from Go's path.Match documentation and test table.
        let table = [
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
            ("[\\-x]", "a", false),
            ("*x", "xxx", true),
            ("conflict.*.service", "conflict.2.service", true),
            ("conflict.*.service", "conflict.service", false),
            ("hello.service", "hello.service", true),
        ];
        for (pattern, name, want) in table {
            assert_eq!(m(pattern, name), want, "path.Match({pattern:?}, {name:?})");
        }
    }

    #[test]
    fn invalid_patterns_match_nothing() {
        for pattern in ["[]a]", "[-]", "[x-]", "[-x]", "\\", "[a-b-c]", "[", "[^", "[^bc", "a[", "*x\\", "[a-"] {
            assert!(!m(pattern, "a"), "{pattern:?} should be invalid");
            assert!(!m(pattern, "x"), "{pattern:?} should be invalid");
        }
    }
}

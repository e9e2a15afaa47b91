//! How the original's Go standard library spells things (pure): `strconv.Quote`, `%v` of a slice, OS errors as
//! `net` prints them, `net/http`'s method names, `log.LstdFlags` time, and `time.ParseDuration` ([`duration`]). Every
//! place that must print what the Go original printed uses these, so there is one of each.

use std::fmt::Write as _;

pub mod duration;

pub use duration::{DurationError, parse_duration};

/// Go `strconv.Quote` (double-quoted, escapes as Go prints them).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        push_escaped(&mut out, c, '"');
    }
    out.push('"');
    out
}

/// Go `strconv.QuoteRune` (`%q` of a rune): single-quoted.
pub fn quote_rune(c: char) -> String {
    let mut out = String::from("'");
    push_escaped(&mut out, c, '\'');
    out.push('\'');
    out
}

fn push_escaped(out: &mut String, c: char, quote: char) {
    if c == quote || c == '\\' {
        out.push('\\');
        out.push(c);
        return;
    }
    if is_print(c) {
        out.push(c);
        return;
    }
    let _ = match c {
        '\u{7}' => write!(out, "\\a"),
        '\u{8}' => write!(out, "\\b"),
        '\u{c}' => write!(out, "\\f"),
        '\n' => write!(out, "\\n"),
        '\r' => write!(out, "\\r"),
        '\t' => write!(out, "\\t"),
        '\u{b}' => write!(out, "\\v"),
        c if (c as u32) < 0x20 || c == '\u{7f}' => write!(out, "\\x{:02x}", c as u32),
        c if (c as u32) < 0x10000 => write!(out, "\\u{:04x}", c as u32),
        c => write!(out, "\\U{:08x}", c as u32),
    };
}

/// Approximates Go `strconv.IsPrint` (letters, marks, numbers, punctuation, symbols and ASCII space) without
/// Unicode tables: control, white space other than ' ', format, private-use and non-characters are not
/// printable. Unassigned code points are treated as printable (Go would escape them).
fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let u = c as u32;
    let format_or_private = matches!(u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E
        | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF | 0xF0000..=0x10FFFF
        | 0xE0001 | 0xE0020..=0xE007F);
    !format_or_private && (u & 0xFFFE) != 0xFFFE && !(0xFDD0..=0xFDEF).contains(&u)
}

/// An OS error as Go prints it: the lower-case strerror text without Rust's `(os error N)` suffix.
pub fn io_error(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// Go's `net/http` capitalisation of methods in errors (`Get "url": ...`).
pub fn method_name(m: &http::Method) -> &'static str {
    match *m {
        http::Method::GET => "Get",
        http::Method::PUT => "Put",
        http::Method::DELETE => "Delete",
        http::Method::PATCH => "Patch",
        http::Method::POST => "Post",
        _ => "Do",
    }
}

/// Go's `%v` of a string slice: `[a b c]`.
pub fn list(names: &[String]) -> String {
    format!("[{}]", names.join(" "))
}

/// `YYYY/MM/DD HH:MM:SS` in UTC (Go's `log.LstdFlags` layout).
pub fn log_time(now: std::time::SystemTime) -> String {
    let secs = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (year, month, day, h, m, s) = utc_fields(secs);
    format!("{year:04}/{month:02}/{day:02} {h:02}:{m:02}:{s:02}")
}

/// Year, month, day, hour, minute, second (UTC) of Unix seconds: the civil date from days since 1970-01-01
/// (Howard Hinnant's algorithm), as Go's `time` computes it.
pub fn utc_fields(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_as_strconv_quote() {
        assert_eq!(quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(quote("bell\u{7} tab\t nul\u{0}"), r#""bell\a tab\t nul\x00""#);
        assert_eq!(quote("zero\u{200b}width é"), r#""zero\u200bwidth é""#);
        assert_eq!(quote_rune('\''), r"'\''");
    }

    #[test]
    fn io_error_drops_the_os_error_suffix_and_lowercases() {
        let e = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(io_error(&e), "connection refused");
    }

    #[test]
    fn list_and_log_time_as_go_prints_them() {
        assert_eq!(list(&["a".to_string(), "b".to_string()]), "[a b]");
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        assert_eq!(log_time(t), "2023/11/14 22:13:20");
    }
}

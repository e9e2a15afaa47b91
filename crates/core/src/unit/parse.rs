//! The systemd unit-file lexer exactly as the original runs it (go-systemd `unit.Deserialize`, spec §4.1 and
//! Appendix C): a character-driven state machine, not a line-based INI parser. Its odd corners are part of the
//! contract because the unit hash is computed over what it produces.
//!
//! The lexer works on bytes. Keys are read character by character, so an invalid UTF-8 byte in a key becomes
//! U+FFFD; section names and values keep their bytes, and the original's JSON encoder replaces invalid bytes later.
//! [`parse_bytes`] therefore replaces every invalid byte with U+FFFD (one per byte, as Go does).
//!
//! Deliberate difference (spec App. C.1, Quirk): the original's line-length check depends on how much of the file
//! its reader happens to buffer. Here every physical line of 2048 bytes or more is rejected; a line is a run of
//! bytes without `\r` or `\n`, which is what the original's check looks for.

use std::borrow::Cow;
use std::fmt;

use super::glob::decode_rune;
use super::option::UnitOption;

/// systemd's LINE_MAX as the original enforces it: lines of this many bytes or more are rejected.
pub const LINE_MAX: usize = 2048;

/// Why a unit file was rejected. `Display` is the original's message verbatim (fleetctl prints it after
/// `failed getting Unit(<file>) from file: `); [`ParseError::line`] and [`ParseError::located`] add the place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A line of [`LINE_MAX`] bytes or more.
    #[error("line too long (max 2048 bytes)")]
    LineTooLong { line: usize },
    /// A key line ended (`\n` or `\r`) before its `=`.
    #[error("unexpected newline encountered while parsing option name")]
    NewlineInOptionName { line: usize },
    /// The input ended inside a key, before its `=` (the original reports Go's bare `io.EOF`).
    #[error("EOF")]
    EofInOptionName { line: usize },
    /// A `[` with no `]` anywhere after it.
    #[error("unable to find end of section")]
    UnterminatedSection { line: usize },
    /// Something other than white space after a section header's `]` on the same line. The original prints an
    /// empty section name and the trimmed garbage as a Go byte slice (`[35 32 99]`).
    #[error("found garbage after section name : {}", GoBytes(garbage))]
    GarbageAfterSection { line: usize, garbage: Vec<u8> },
}

impl ParseError {
    /// 1-based line the error refers to.
    pub fn line(&self) -> usize {
        match self {
            ParseError::LineTooLong { line }
            | ParseError::NewlineInOptionName { line }
            | ParseError::EofInOptionName { line }
            | ParseError::UnterminatedSection { line }
            | ParseError::GarbageAfterSection { line, .. } => *line,
        }
    }

    /// `line N: <message>`, for logs and diagnostics where the original's exact wording is not required.
    pub fn located(&self) -> String {
        format!("line {}: {}", self.line(), self)
    }
}

/// Go's `%v` rendering of a `[]byte`: decimal values in brackets.
struct GoBytes<'a>(&'a [u8]);

impl fmt::Display for GoBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{b}")?;
        }
        f.write_str("]")
    }
}

/// Parses unit-file text into its ordered options (duplicates and repeated sections kept, in file order).
pub fn parse(text: &str) -> Result<Vec<UnitOption>, ParseError> {
    parse_bytes(text.as_bytes())
}

/// Parses raw file bytes. Invalid UTF-8 is replaced by U+FFFD byte by byte, as the original's stored copy ends up
/// (spec App. C.7), so the result hashes the way fleetctl shows it after submission.
pub fn parse_bytes(bytes: &[u8]) -> Result<Vec<UnitOption>, ParseError> {
    lex(bytes).map(|lexed| lexed.options)
}

/// An option with the place in the file it was read from: what a refusal of one of its lines names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub option: UnitOption,
    /// 1-based line on which the option's name starts.
    pub line: usize,
    /// That line's text (without its line break).
    pub text: String,
    /// 1-based line of the header of the option's section.
    pub section_line: usize,
    /// The header line's text.
    pub section_text: String,
}

/// [`parse_bytes`], each option with its place in the file (for messages that name a line; the lexer is the same,
/// so the options are too).
pub fn parse_bytes_placed(bytes: &[u8]) -> Result<Vec<Placed>, ParseError> {
    let lexed = lex(bytes)?;
    let lines = Lines::of(bytes);
    Ok(lexed
        .options
        .into_iter()
        .zip(lexed.places)
        .map(|(option, place)| {
            let (line, text) = lines.at(place.key);
            let (section_line, section_text) = lines.at(place.header);
            Placed { option, line, text, section_line, section_text }
        })
        .collect())
}

/// Line numbers and texts of byte offsets in one input.
struct Lines<'a> {
    bytes: &'a [u8],
    /// Offsets of every `\n`.
    breaks: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn of(bytes: &'a [u8]) -> Lines<'a> {
        Lines { bytes, breaks: bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i).collect() }
    }

    /// The 1-based line of `offset` and its text (a `\r` before the break dropped; invalid UTF-8 as U+FFFD).
    fn at(&self, offset: usize) -> (usize, String) {
        let index = self.breaks.partition_point(|&b| b < offset);
        let start = if index == 0 { 0 } else { self.breaks[index - 1] + 1 };
        let end = self.breaks.get(index).copied().unwrap_or(self.bytes.len());
        let text = &self.bytes[start.min(end)..end];
        (index + 1, go_lossy(text.strip_suffix(b"\r").unwrap_or(text)).into_owned())
    }
}

fn lex(bytes: &[u8]) -> Result<Lexed, ParseError> {
    let first_long_line = find_long_line(bytes);
    match Lexer::new(bytes).run() {
        Ok(lexed) => match first_long_line {
            Some(at) => Err(ParseError::LineTooLong { line: line_of(bytes, at) }),
            None => Ok(lexed),
        },
        // The original checks line length as it goes, so a long line before the failing step wins.
        Err(failure) => match first_long_line {
            Some(at) if at <= failure.step_start => Err(ParseError::LineTooLong { line: line_of(bytes, at) }),
            _ => Err(failure.error),
        },
    }
}

/// Start offset of the first run of [`LINE_MAX`] or more bytes containing neither `\r` nor `\n`.
fn find_long_line(bytes: &[u8]) -> Option<usize> {
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' || b == b'\r' {
            start = i + 1;
        } else if i + 1 - start >= LINE_MAX {
            return Some(start);
        }
    }
    None
}

/// 1-based line number of a byte offset.
fn line_of(bytes: &[u8], offset: usize) -> usize {
    1 + bytes[..offset.min(bytes.len())].iter().filter(|&&b| b == b'\n').count()
}

/// A lexer error and where the lexing step that failed began (for ordering against the line-length rule).
struct Failure {
    error: ParseError,
    step_start: usize,
}

struct Lexer<'a> {
    input: &'a [u8],
    pos: usize,
    options: Vec<UnitOption>,
    /// Where each option of `options` was read.
    places: Vec<Place>,
}

/// Byte offsets of an option's name and of its section header's `[`.
#[derive(Clone, Copy)]
struct Place {
    key: usize,
    header: usize,
}

/// What the lexer read: the options and, index for index, their places.
struct Lexed {
    options: Vec<UnitOption>,
    places: Vec<Place>,
}

/// One line as go-systemd's `toEOL` returns it.
struct Line<'a> {
    /// The line without its `\n`. A `\r` before the `\n` stays (spec App. C.3); only a `\r` ending the input is cut.
    text: &'a [u8],
    /// The input ended before a `\n`.
    at_eof: bool,
}

impl<'a> Lexer<'a> {
    fn new(input: &'a [u8]) -> Lexer<'a> {
        Lexer { input, pos: 0, options: Vec::new(), places: Vec::new() }
    }

    fn fail(&self, error: ParseError, step_start: usize) -> Failure {
        Failure { error, step_start }
    }

    fn run(mut self) -> Result<Lexed, Failure> {
        // Before the first header everything is skipped except `[` and comment starts, wherever they occur in
        // a line (spec App. C.4). Structural characters are ASCII, so scanning bytes is exact.
        while let Some(&b) = self.input.get(self.pos) {
            self.pos += 1;
            match b {
                b'[' => return self.section_then_body(),
                b'#' | b';' => self.skip_comment(),
                _ => {}
            }
        }
        Ok(self.lexed())
    }

    fn lexed(self) -> Lexed {
        Lexed { options: self.options, places: self.places }
    }

    /// Reads a section header (the `[` is consumed) and then everything up to the next header, repeatedly.
    fn section_then_body(mut self) -> Result<Lexed, Failure> {
        loop {
            // The `[` was just consumed.
            let header = self.pos - 1;
            let section = self.section_header()?;
            if !self.section_body(&section, header)? {
                return Ok(self.lexed());
            }
        }
    }

    fn section_header(&mut self) -> Result<String, Failure> {
        let start = self.pos;
        let Some(len) = self.input[start..].iter().position(|&b| b == b']') else {
            let error = ParseError::UnterminatedSection { line: line_of(self.input, start) };
            return Err(self.fail(error, start));
        };
        let name = go_lossy(&self.input[start..start + len]).into_owned();
        self.pos = start + len + 1;
        let suffix_start = self.pos;
        let rest = self.read_line();
        let garbage = trim_space(rest.text);
        if !garbage.is_empty() {
            let error =
                ParseError::GarbageAfterSection { line: line_of(self.input, suffix_start), garbage: garbage.to_vec() };
            return Err(self.fail(error, suffix_start));
        }
        Ok(name)
    }

    /// Options of one section. Returns `Ok(true)` when another header's `[` was consumed, `Ok(false)` at the end.
    fn section_body(&mut self, section: &str, header: usize) -> Result<bool, Failure> {
        loop {
            let (c, width) = decode_rune(&self.input[self.pos..]);
            if width == 0 {
                return Ok(false);
            }
            if c.is_whitespace() {
                self.pos += width;
                continue;
            }
            match c {
                '[' => {
                    self.pos += 1;
                    return Ok(true);
                }
                '#' | ';' => {
                    self.pos += 1;
                    self.skip_comment();
                }
                _ => self.option(section, header)?,
            }
        }
    }

    /// A comment runs to the end of the line and continues while the line ends in `\` followed by at most one
    /// space (spec App. C.2).
    fn skip_comment(&mut self) {
        loop {
            let line = self.read_line();
            let text = line.text.strip_suffix(b" ").unwrap_or(line.text);
            if !text.ends_with(b"\\") || line.at_eof {
                return;
            }
        }
    }

    fn option(&mut self, section: &str, header: usize) -> Result<(), Failure> {
        let key_start = self.pos;
        let Some(len) = self.input[key_start..].iter().position(|&b| matches!(b, b'=' | b'\n' | b'\r')) else {
            let error = ParseError::EofInOptionName { line: line_of(self.input, self.input.len()) };
            return Err(self.fail(error, key_start));
        };
        let end = key_start + len;
        if self.input[end] != b'=' {
            let error = ParseError::NewlineInOptionName { line: line_of(self.input, end) };
            return Err(self.fail(error, key_start));
        }
        let name = go_lossy(trim_space(&self.input[key_start..end])).into_owned();
        self.pos = end + 1;
        let value = self.value();
        self.options.push(UnitOption { section: section.to_string(), name, value });
        self.places.push(Place { key: key_start, header });
        Ok(())
    }

    /// The value after `=`: the rest of the line, continued onto following lines while a line's last byte is `\`
    /// (the backslash and a `\n` are kept); a blank line ends a continuation (spec §4.1.5).
    fn value(&mut self) -> String {
        let mut raw: Vec<u8> = Vec::new();
        loop {
            let line = self.read_line();
            if trim_space(line.text).is_empty() {
                break;
            }
            raw.extend_from_slice(line.text);
            if line.text.last() != Some(&b'\\') {
                break;
            }
            if line.at_eof {
                // `A=b \` at the very end keeps its backslash and gets no newline.
                break;
            }
            raw.push(b'\n');
        }
        let trimmed = trim_space(&raw);
        if raw.last() == Some(&b'\n') {
            // A continuation ended by a blank line keeps one newline.
            let mut value = go_lossy(trimmed).into_owned();
            value.push('\n');
            value
        } else {
            go_lossy(trimmed).into_owned()
        }
    }

    fn read_line(&mut self) -> Line<'a> {
        let rest = &self.input[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(len) => {
                self.pos += len + 1;
                Line { text: &rest[..len], at_eof: false }
            }
            None => {
                self.pos = self.input.len();
                Line { text: rest.strip_suffix(b"\r").unwrap_or(rest), at_eof: true }
            }
        }
    }
}

/// Go `bytes.TrimSpace`: trims Unicode white space (Go's `unicode.IsSpace` equals Rust's `char::is_whitespace`).
/// Invalid UTF-8 is never white space, so trimming raw bytes equals trimming their U+FFFD replacement.
fn trim_space(bytes: &[u8]) -> &[u8] {
    let mut start = 0;
    while start < bytes.len() {
        let (c, width) = decode_rune(&bytes[start..]);
        if !c.is_whitespace() {
            break;
        }
        start += width;
    }
    let mut end = bytes.len();
    while end > start {
        match last_space_width(&bytes[start..end]) {
            Some(width) => end -= width,
            None => break,
        }
    }
    &bytes[start..end]
}

/// Width of the white-space character ending `bytes`, if it ends in one (valid UTF-8 of at most 3 bytes: every
/// white-space character is below U+10000).
fn last_space_width(bytes: &[u8]) -> Option<usize> {
    for width in 1..=3.min(bytes.len()) {
        let tail = &bytes[bytes.len() - width..];
        if let Ok(text) = std::str::from_utf8(tail) {
            let mut chars = text.chars();
            let c = chars.next()?;
            return (chars.next().is_none() && c.is_whitespace()).then_some(width);
        }
    }
    None
}

/// Replaces each byte that does not start a valid UTF-8 sequence with U+FFFD, as Go's decoders do (Rust's
/// `from_utf8_lossy` would replace a truncated sequence with a single U+FFFD instead).
pub fn go_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => {
            let mut out = String::with_capacity(bytes.len() + 8);
            let mut rest = bytes;
            while !rest.is_empty() {
                match std::str::from_utf8(rest) {
                    Ok(text) => {
                        out.push_str(text);
                        break;
                    }
                    Err(e) => {
                        let valid = e.valid_up_to();
                        out.push_str(std::str::from_utf8(&rest[..valid]).unwrap_or_default());
                        // Every byte of an invalid sequence is a lead byte or a lone continuation byte: one U+FFFD each.
                        let invalid = e.error_len().unwrap_or(rest.len() - valid);
                        for _ in 0..invalid {
                            out.push(char::REPLACEMENT_CHARACTER);
                        }
                        rest = &rest[valid + invalid..];
                    }
                }
            }
            Cow::Owned(out)
        }
    }
}

//! Table tests of the parser and the canonical text against the original's observed behaviour (spec §4.1–§4.3,
//! Appendix C) and against hashes shown in the reference transcripts.

use super::parse::{ParseError, parse, parse_bytes};
use super::{UnitFile, UnitOption};

/// (section, name, value)
type Opt<'a> = (&'a str, &'a str, &'a str);

fn opts(list: &[Opt]) -> Vec<UnitOption> {
    list.iter().map(|(s, n, v)| UnitOption::new(*s, *n, *v)).collect()
}

fn ok(text: &str) -> Vec<UnitOption> {
    parse(text).unwrap_or_else(|e| panic!("{text:?} rejected: {}", e.located()))
}

#[test]
fn accepted_inputs() {
    let cases: &[(&str, &str, &[Opt])] = &[
        ("empty file", "", &[]),
        ("no section at all", "This=Ignored\nOther=x\n", &[]),
        ("text before the first section is dropped", "Junk=1\n[S]\nA=b\n", &[("S", "A", "b")]),
        ("header name is not trimmed", "[ Service ]\nA=b\n", &[(" Service ", "A", "b")]),
        ("empty header", "[]\nA=b\n", &[("", "A", "b")]),
        ("white space after header", "[S] \t \nA=b\n", &[("S", "A", "b")]),
        ("header runs on to the next ]", "[Ser\nvice]\nA=b\n", &[("Ser\nvice", "A", "b")]),
        ("spaces around key, = and value", "[S]\n  A  =  b c  \n", &[("S", "A", "b c")]),
        ("value containing =", "[S]\nA = b = c \n", &[("S", "A", "b = c")]),
        ("key = key", "[S]\nA==b\n", &[("S", "A", "=b")]),
        ("empty value", "[S]\nEnvironment=\n", &[("S", "Environment", "")]),
        ("empty value at EOF", "[S]\nEnvironment=", &[("S", "Environment", "")]),
        ("empty key", "[S]\n=value\n", &[("S", "", "value")]),
        ("no validation of names", "[S]\n<<<<=bar\n", &[("S", "<<<<", "bar")]),
        ("key with inner space", "[S]\nExec Start=1\n", &[("S", "Exec Start", "1")]),
        ("no inline comments or quotes", "[S]\nA=b # c ; \"d\"\n", &[("S", "A", "b # c ; \"d\"")]),
        ("comments and blank lines", "# c\n; c\n\n[S]\n\n# A=x\n; B=y\n  # indented\nA=b\n\n", &[("S", "A", "b")]),
        ("duplicates kept in order", "[S]\nA=1\nB=2\nA=3\n", &[("S", "A", "1"), ("S", "B", "2"), ("S", "A", "3")]),
        (
            "repeated sections appended in file order",
            "[U]\nD=a\n[S]\nE=b\n[U]\nF=c\n",
            &[("U", "D", "a"), ("S", "E", "b"), ("U", "F", "c")],
        ),
        ("case-sensitive names", "[s]\na=1\n[S]\nA=2\n", &[("s", "a", "1"), ("S", "A", "2")]),
        ("no final newline", "[S]\nA=b", &[("S", "A", "b")]),
        ("continuation keeps backslash and newline", "[S]\nA=b \\\n  c\n", &[("S", "A", "b \\\n  c")]),
        ("continuation without space", "[S]\nA=b\\\nc\n", &[("S", "A", "b\\\nc")]),
        ("multi-line continuation", "[S]\nA=a \\\n b \\\n c\nD=e\n", &[("S", "A", "a \\\n b \\\n c"), ("S", "D", "e")]),
        ("# inside a continuation is data", "[S]\nA=b \\\n# c\n", &[("S", "A", "b \\\n# c")]),
        ("[ inside a continuation is data", "[S]\nA=b \\\n[T]\n", &[("S", "A", "b \\\n[T]")]),
        (
            "continuation ended by a blank line keeps one newline",
            "[S]\nA=b \\\n\nC=d\n",
            &[("S", "A", "b \\\n"), ("S", "C", "d")],
        ),
        (
            "white-space-only line ends a continuation",
            "[S]\nA=b \\\n \t \nC=d\n",
            &[("S", "A", "b \\\n"), ("S", "C", "d")],
        ),
        ("trailing backslash at EOF kept, no newline", "[S]\nA=b \\", &[("S", "A", "b \\")]),
        ("trailing backslash then newline at EOF", "[S]\nA=b \\\n", &[("S", "A", "b \\\n")]),
        ("lone backslash value", "[S]\nA=\\\n", &[("S", "A", "\\\n")]),
        ("backslash then space is not a continuation", "[S]\nA=b\\ \nC=d\n", &[("S", "A", "b\\"), ("S", "C", "d")]),
        ("backslash in the middle", "[S]\nA=C:\\dir\\file\n", &[("S", "A", "C:\\dir\\file")]),
        ("CRLF", "[U]\r\nD=a\r\n\r\n[S]\r\nE=b\r\n", &[("U", "D", "a"), ("S", "E", "b")]),
        ("CR before EOF", "[S]\r\nA=b\r", &[("S", "A", "b")]),
        ("CR inside a value is data", "[S]\nA=b\rc\n", &[("S", "A", "b\rc")]),
        ("CRLF backslash does not continue (C.3)", "[S]\r\nA=b \\\r\nC=d\r\n", &[("S", "A", "b \\"), ("S", "C", "d")]),
        ("comment continuation swallows the next line (C.2)", "[S]\n# c \\\nA=b\nC=d\n", &[("S", "C", "d")]),
        ("comment continuation with one space after \\", "[S]\n# c \\ \nA=b\nC=d\n", &[("S", "C", "d")]),
        ("two spaces after \\ end the comment", "[S]\n# c \\  \nA=b\n", &[("S", "A", "b")]),
        ("tab after \\ ends the comment", "[S]\n# c \\\t\nA=b\n", &[("S", "A", "b")]),
        ("; comment continues too", "[S]\n; c \\\nA=b\nC=d\n", &[("S", "C", "d")]),
        ("comment continuation chains", "[S]\n# a \\\nb \\\nA=1\nC=d\n", &[("S", "C", "d")]),
        ("comment with backslash at EOF", "[S]\nA=b\n# c \\", &[("S", "A", "b")]),
        (
            "pre-section comment swallows a header (C.2)",
            "# x \\\n[Unit]\nDescription=a\n[Service]\nExecStart=b\n",
            &[("Service", "ExecStart", "b")],
        ),
        ("pre-section [ opens a section (C.4)", "Junk=[X-Fleet]\nGlobal=true\n", &[("X-Fleet", "Global", "true")]),
        ("pre-section comment starts mid-line", "Junk # [Unit] \\\n[S]\nA=b\n", &[]),
        ("BOM before the first section is skipped", "\u{feff}[S]\nA=b\n", &[("S", "A", "b")]),
        ("BOM before a key is part of it", "[S]\n\u{feff}A=b\n", &[("S", "\u{feff}A", "b")]),
        (
            "Unicode white space trimmed (C.8)",
            "[S]\n\u{a0}\u{3000}A\u{2028} =\u{85} b\u{2003}\u{a0}\n",
            &[("S", "A", "b")],
        ),
        ("header garbage check trims CR", "[S]\r\nA=b\n", &[("S", "A", "b")]),
        ("comment right after a header's newline", "[S]\n#c\nA=b\n", &[("S", "A", "b")]),
    ];
    for (what, text, want) in cases {
        assert_eq!(ok(text), opts(want), "{what}: {text:?}");
    }
}

#[test]
fn rejected_inputs_with_original_messages_and_lines() {
    let cases: &[(&str, &str, &str, usize)] = &[
        ("no closing ]", "[Service\nA=b\n", "unable to find end of section", 1),
        ("no closing ] later", "[S]\nA=b\n[T\n", "unable to find end of section", 3),
        ("garbage after header", "[Service] x\n", "found garbage after section name : [120]", 1),
        ("comment after header (C.5)", "[Service] # c\n", "found garbage after section name : [35 32 99]", 1),
        (
            "pre-section [ followed by text (C.4)",
            "Junk=[X-Fleet] more\n",
            "found garbage after section name : [109 111 114 101]",
            1,
        ),
        ("garbage on the line of ]", "[S]\nA=1\n[a\nb] x\n", "found garbage after section name : [120]", 4),
        ("CR then text after header", "[S]\rA=b\n", "found garbage after section name : [65 61 98]", 1),
        ("key without =", "[Service]\nfoo\nA=b\n", "unexpected newline encountered while parsing option name", 2),
        ("CR in a key", "[S]\nA\r=b\n", "unexpected newline encountered while parsing option name", 2),
        ("key without = on the last line (C.6)", "[Service]\nA=b\nfoo", "EOF", 3),
        (
            "CRLF continuation line without = (C.3)",
            "[S]\r\nA=b \\\r\n  c\r\n",
            "unexpected newline encountered while parsing option name",
            3,
        ),
        ("key only spaces then EOF", "[S]\nA=b\n  x  ", "EOF", 3),
    ];
    for (what, text, message, line) in cases {
        let err = parse(text).expect_err(what);
        assert_eq!(err.to_string(), *message, "{what}: {text:?}");
        assert_eq!(err.line(), *line, "{what}: {text:?}");
        assert_eq!(err.located(), format!("line {line}: {message}"));
    }
}

#[test]
fn transcript_garbage_file_is_rejected() {
    // garbage.service in transcript 09 is 34 bytes and fails with this message; any unterminated header does.
    let err = parse("this is not a unit file\n[Unit\n").unwrap_err();
    assert_eq!(err.to_string(), "unable to find end of section");
}

#[test]
fn line_length_limit() {
    let line = |n: usize| format!("A={}", "x".repeat(n - 2));
    assert!(parse(&format!("[S]\n{}\n", line(2047))).is_ok());
    assert!(parse(&format!("[S]\n{}\r\n", line(2047))).is_ok());
    assert!(parse(&format!("[S]\n{}", line(2047))).is_ok());
    for text in [
        format!("[S]\n{}\n", line(2048)),
        format!("[S]\n{}", line(2048)),
        format!("[S]\n{}\n", line(5000)),
        format!("[S]\nB=c\n# {}\n", "c".repeat(2050)),
        format!("[S]\nB=c \\\n{}\n", "c".repeat(2050)),
        format!("{}\n[S]\nB=c\n", "j".repeat(2048)),
    ] {
        let err = parse(&text).unwrap_err();
        assert_eq!(err.to_string(), "line too long (max 2048 bytes)");
        assert!(matches!(err, ParseError::LineTooLong { .. }));
    }
    assert_eq!(parse(&format!("[S]\nB=c\n{}\n", line(3000))).unwrap_err().line(), 3);
    // A CR splits a line for this check, as in the original's look-ahead.
    assert!(parse(&format!("[S]\nA={}\r{}\n", "x".repeat(1500), "y".repeat(1500))).is_ok());
    // Errors earlier in the file than the long line win; later ones lose.
    let earlier = parse(&format!("[S] x\nA={}\n", "x".repeat(3000))).unwrap_err();
    assert!(matches!(earlier, ParseError::GarbageAfterSection { line: 1, .. }));
    let later = parse(&format!("# {}\n[S] x\n", "x".repeat(3000))).unwrap_err();
    assert_eq!(later, ParseError::LineTooLong { line: 1 });
}

#[test]
fn invalid_utf8_becomes_replacement_characters_byte_by_byte() {
    let options = parse_bytes(b"[S\xff]\nA\xffB=c\xfe\nD=\xe2\x82\nE=\xf0\x9f\x98A\n").unwrap();
    assert_eq!(
        options,
        opts(&[
            ("S\u{fffd}", "A\u{fffd}B", "c\u{fffd}"),
            ("S\u{fffd}", "D", "\u{fffd}\u{fffd}"),
            ("S\u{fffd}", "E", "\u{fffd}\u{fffd}\u{fffd}A"),
        ])
    );
    // Invalid bytes are not white space and are never trimmed.
    assert_eq!(parse_bytes(b"[S]\nA= \x85 \n").unwrap(), opts(&[("S", "A", "\u{fffd}")]));
    // Garbage is reported with its raw bytes.
    assert_eq!(parse_bytes(b"[S] \xff\n").unwrap_err().to_string(), "found garbage after section name : [255]");
}

#[test]
fn canonical_text_examples() {
    let cases: &[(&str, &str)] = &[
        ("", ""),
        ("# only a comment\n", ""),
        ("[Unit]\n[Service]\n", ""),
        ("[Unit]\n[Service]\nA=b\n", "[Service]\nA=b\n"),
        (
            "[Unit]\nDescription=a\n[Service]\nExecStart=/bin/true\n[Unit]\nAfter=x\n",
            "[Unit]\nDescription=a\nAfter=x\n\n[Service]\nExecStart=/bin/true\n",
        ),
        ("  [Service]  \n  # c\n  ExecStart =  /bin/sleep 100  \r\n\n\n", "[Service]\nExecStart=/bin/sleep 100\n"),
        ("[S]\nA=b \\\n  c\n", "[S]\nA=b \\\n  c\n"),
        ("[S]\nA=b \\\n\n[T]\nC=d\n", "[S]\nA=b \\\n\n\n[T]\nC=d\n"),
        ("[S]\nEnvironment=\n", "[S]\nEnvironment=\n"),
        ("[ Service ]\nA=b\n", "[ Service ]\nA=b\n"),
    ];
    for (text, canonical) in cases {
        assert_eq!(UnitFile::parse(text).unwrap().canonical(), *canonical, "{text:?}");
    }
}

#[test]
fn spec_hash_vectors() {
    let cases = [
        ("[Service]\nExecStart=/bin/sleep 100\n", "1c6fb6f3684bafb0c173d8b8b957ceff031180c1"),
        ("[Unit]\nDescription=some description\n", "a0f275d46bc6ee0eca06be7c339913c07d99c0c7"),
        ("", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        // Files differing only in comments and white space are the same unit.
        ("# c\n[Service]\r\n  ExecStart = /bin/sleep 100 \r\n", "1c6fb6f3684bafb0c173d8b8b957ceff031180c1"),
    ];
    for (text, hash) in cases {
        let unit = UnitFile::parse(text).unwrap();
        assert_eq!(unit.hash().to_hex(), hash, "{text:?}");
    }
    assert_eq!(UnitFile::parse("").unwrap().hash().short(), "da39a3e");
}

/// Unit files shown with `cat` in the reference transcripts and the hash fleetctl listed for them.
#[test]
fn transcript_units_hash_as_the_original() {
    fn unit(description: &str, exec: &str, xfleet: &[&str]) -> String {
        let mut text = format!("[Unit]\nDescription={description}\n\n[Service]\nExecStart={exec}\n");
        if !xfleet.is_empty() {
            text.push_str("\n[X-Fleet]\n");
            for line in xfleet {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }
    let echo5 = |word: &str| format!("/bin/sh -c \"while true; do echo {word}; sleep 5; done\"");
    let echo1 = |word: &str| format!("/bin/sh -c \"while true; do echo {word}; sleep 1; done\"");
    let cases = [
        (unit("Hello World", &echo1("hi"), &[]), "ceced3bd4e313c5019a65871e3b66324472d5947"),
        (unit("Hello World", &echo1("hi-v2"), &[]), "306c32a9e1e9c65c71289c402ae1921cb7e4db9a"),
        (unit("Hello World", &echo1("hi-v4"), &[]), "8ed31e50f297bfaf925880a62ec74577904562f8"),
        (unit("Hello template instance %i", &echo1("hello %i"), &[]), "b0a43703eef2b68e501948e05b8222b6a313f327"),
        (unit("Hello template instance %i", &echo1("hello-v2 %i"), &[]), "c3a4032392954eeef19f5e0c36b58ab538cb7a8b"),
        (
            unit("Only on role=b", &echo5("meta-b"), &["MachineMetadata=role=b"]),
            "a376edaa908070a2b0a672a108a06f53dee9b6f7",
        ),
        (
            unit(
                "role=a or role=c, and hostname=m3",
                &echo5("meta-ac"),
                &["MachineMetadata=role=a", "MachineMetadata=role=c", "MachineMetadata=hostname=m3"],
            ),
            "f738d44f0030e21d445914075fd2c49073cb066d",
        ),
        (
            unit("Requires metadata no machine has", &echo5("never"), &["MachineMetadata=role=zzz"]),
            "3f2a402a336149ac66582d3c4f6c977da1846061",
        ),
        (
            unit("Sidekick of meta-b.service", &echo5("sidekick"), &["MachineOf=meta-b.service"]),
            "4b4d1fcb8e65d54b3ecf42f4e42fcf7a49a9f3c7",
        ),
        (
            unit("Mutually exclusive instance %i", &echo5("excl %i"), &["Conflicts=excl@*.service"]),
            "17877a720b53ce4163a58da22227e22a811fa93d",
        ),
        (
            unit("Pinned to m3 by MachineID", &echo5("pinned"), &["MachineID=d91d98fca203da3cb89fb5c100ed0823"]),
            "71e4b9d72d56727e04d4856643f4a3da588b0930",
        ),
        (
            unit("Replaces hello@1.service", &echo5("replacer"), &["Replaces=hello@1.service"]),
            "f4b7079624d5897a2bff7571422f9515cfbbf61c",
        ),
        (
            unit("MachineOf a unit that is not running", &echo5("orphan"), &["MachineOf=does-not-exist.service"]),
            "15bc0841f94198571dc8395dc6044b386dcc43ae",
        ),
        (
            unit("Global unit on every machine", &echo5("global"), &["Global=true"]),
            "2e39e563f4003e53f13691b469535e1fb9d42184",
        ),
        (
            unit("Invalid X-Fleet option", &echo5("badopt"), &["MachineFoo=bar"]),
            "8457ffc67bca79b4a65632df2e5bdaa92f642b60",
        ),
    ];
    for (text, hash) in &cases {
        let parsed = UnitFile::parse(text).unwrap();
        // These files are already canonical: `fleetctl cat` printed them byte for byte.
        assert_eq!(&parsed.canonical(), text);
        assert_eq!(parsed.hash().to_hex(), *hash, "{text}");
        assert_eq!(parsed.as_stored().unwrap(), parsed);
    }
    // The registry body stored for meta-b.service (transcript 12) is exactly its canonical text.
    let raw = "[Unit]\nDescription=Only on role=b\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo meta-b; sleep 5; done\"\n\n[X-Fleet]\nMachineMetadata=role=b\n";
    assert_eq!(UnitFile::parse(raw).unwrap().canonical(), raw);
}

/// Appendix C.10: a value ending in a backslash does not survive the registry's re-parse of the canonical text.
#[test]
fn stored_form_of_values_ending_in_backslash() {
    // At the end of the file: the stored copy gains a newline, and `cat` an empty line.
    let eof = UnitFile::parse("[Service]\nExecStart=/bin/echo \\").unwrap();
    assert_eq!(eof.canonical(), "[Service]\nExecStart=/bin/echo \\\n");
    let stored = eof.as_stored().unwrap();
    assert_eq!(stored.options(), opts(&[("Service", "ExecStart", "/bin/echo \\\n")]));
    assert_eq!(stored.canonical(), "[Service]\nExecStart=/bin/echo \\\n\n");
    assert_ne!(stored.hash(), eof.hash());
    // Stored forms are fixed points.
    assert_eq!(stored.as_stored().unwrap(), stored);

    // Before another option (CRLF file, or a space after the backslash): the next line joins the value.
    let crlf = UnitFile::parse("[S]\r\nA=b \\\r\nC=d\r\n").unwrap();
    assert_eq!(crlf.as_stored().unwrap().options(), opts(&[("S", "A", "b \\\nC=d")]));
    let spaced = UnitFile::parse("[S]\nA=b\\ \nC=d\n").unwrap();
    assert_eq!(spaced.as_stored().unwrap().options(), opts(&[("S", "A", "b\\\nC=d")]));

    // Before another section: the separating blank line ends it and is kept as a newline.
    let before_section = UnitFile::parse("[S]\nA=b\\ \n[T]\nC=d\n").unwrap();
    assert_eq!(before_section.as_stored().unwrap().options(), opts(&[("S", "A", "b\\\n"), ("T", "C", "d")]));
}

/// Each option's place: the line its name starts on and its section header's line, with their texts; the
/// options themselves are what `parse_bytes` gives (one lexer).
#[test]
fn placed_options_name_their_lines() {
    use super::parse::parse_bytes_placed;
    let text = "# head\n[Unit]\nDescription=a \\\n  b\n\n  [Service] \nExecStart=/bin/true\r\n[]\n=v\n";
    let placed = parse_bytes_placed(text.as_bytes()).unwrap();
    let plain = parse_bytes(text.as_bytes()).unwrap();
    assert_eq!(placed.iter().map(|p| p.option.clone()).collect::<Vec<_>>(), plain);
    let places: Vec<_> =
        placed.iter().map(|p| (p.line, p.text.as_str(), p.section_line, p.section_text.as_str())).collect();
    assert_eq!(
        places,
        [(3, "Description=a \\", 2, "[Unit]"), (7, "ExecStart=/bin/true", 6, "  [Service] "), (9, "=v", 8, "[]"),]
    );
    assert_eq!(parse_bytes_placed(b"[Unit"), Err(ParseError::UnterminatedSection { line: 1 }));
}

/// A header whose name spans lines (the original takes everything up to `]`) is placed at its `[`.
#[test]
fn a_header_split_across_lines_is_placed_at_its_bracket() {
    use super::parse::parse_bytes_placed;
    let placed = parse_bytes_placed(b"[\nS]\nA=1\n").unwrap();
    let places: Vec<_> =
        placed.iter().map(|p| (p.line, p.text.as_str(), p.section_line, p.section_text.as_str())).collect();
    assert_eq!(places, [(3, "A=1", 1, "[")]);
}

/// Go's decoding of invalid UTF-8: one U+FFFD per byte of a bad or cut-off sequence, also after valid text.
#[test]
fn invalid_utf8_becomes_one_replacement_per_byte_as_in_go() {
    use super::parse::go_lossy;
    assert_eq!(go_lossy(b"ok"), "ok");
    assert_eq!(go_lossy(b"a\xff b"), "a\u{FFFD} b");
    assert_eq!(go_lossy(b"\xe2\x82"), "\u{FFFD}\u{FFFD}");
    assert_eq!(go_lossy(b"ab\xe2\x82"), "ab\u{FFFD}\u{FFFD}", "a sequence cut off by the end, after valid text");
}

/// A submitted file is refused at the line that gives an option a blank section or name.
#[test]
fn submitted_files_refuse_blank_lines() {
    use super::file::FileError;
    let refused = |text: &str| match UnitFile::parse_submitted(text.as_bytes()) {
        Err(FileError::Blank(line)) => line.to_string(),
        other => panic!("{text:?} not refused: {other:?}"),
    };
    assert_eq!(refused("[Unit]\nA=b\n=value\n"), r#"3: "=value": option has an empty name"#);
    assert_eq!(refused("[]\nA=b\n"), r#"1: "[]": section has an empty name"#);
    assert_eq!(refused("[X]\n\t=\x01\n"), r#"2: "\t=\x01": option has an empty name"#);
    assert_eq!(UnitFile::parse_submitted(b"[Unit"), Err(FileError::Parse(ParseError::UnterminatedSection { line: 1 })));
    let ok = UnitFile::parse_submitted(b"[Service]\nExecStart=/bin/true\n").unwrap();
    assert_eq!(ok, UnitFile::parse("[Service]\nExecStart=/bin/true\n").unwrap());
}

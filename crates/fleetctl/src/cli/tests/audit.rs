//! `audit` (issue 38) as whole invocations against the fake cluster, which records its writes as the API does:
//! one record per write, refusals with their error, reads not at all; `history` names who stored each version.

use super::{cluster, run};

const M2: &str = "8606e1a2949979fb223fb4bad77d152c";

/// A unit file in a temporary directory.
fn unit_file(dir: &tempfile::TempDir, name: &str, exec: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, format!("[Service]\nExecStart={exec}\n")).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn writes_are_listed_with_who_what_and_the_result_and_reads_are_not() {
    let c = cluster();
    let dir = tempfile::tempdir().unwrap();
    let web = unit_file(&dir, "web.service", "/bin/sleep 100");
    assert_eq!(run(&c, &["start", "--no-block", &web]).code, 0);
    assert_eq!(run(&c, &["cordon", M2]).code, 0);
    assert_eq!(run(&c, &["list-units"]).code, 0);

    let o = run(&c, &["audit", "--no-legend"]);
    assert_eq!((o.code, o.err.as_str()), (0, ""), "{}", o.out);
    let rows: Vec<Vec<&str>> = o.out.lines().map(|l| l.split('\t').filter(|c| !c.is_empty()).collect()).collect();
    let shown: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[1], r[2], r[3])).collect();
    assert_eq!(
        shown,
        [
            // `start` creates a new unit launched in one request (issue 35: one write, not two).
            ("tester (unix)", "submit web.service (launched)", "201"),
            ("tester (unix)", format!("cordon {M2}").as_str(), "204"),
        ],
        "{}",
        o.out
    );
    assert!(run(&c, &["audit"]).out.starts_with("TIME\t"), "legend");

    let o = run(&c, &["audit", "--output=json", "web"]);
    let doc: serde_json::Value = serde_json::from_str(&o.out).unwrap();
    assert_eq!(doc["records"].as_array().map(Vec::len), Some(1), "only the writes naming web.service: {doc}");
    assert_eq!(doc["records"][0]["who"], serde_json::json!({"via": "unix", "name": "tester"}));
    assert_eq!(doc["records"][0]["error"], serde_json::Value::Null, "every field present");
    assert_eq!(doc["truncated"], false);

    let o = run(&c, &["history", "--no-legend", "web.service"]);
    assert!(o.out.contains("\ttester (unix)\t"), "history names who stored the version: {}", o.out);
    let o = run(&c, &["history", "--output=json", "web.service"]);
    let doc: serde_json::Value = serde_json::from_str(&o.out).unwrap();
    assert_eq!(doc["versions"][0]["by"], "tester (unix)", "{doc}");
}

#[test]
fn bad_flags_are_named() {
    let c = cluster();
    let o = run(&c, &["audit", "--since=yesterday"]);
    assert_eq!(o.code, 1);
    assert!(o.err.contains("Invalid --since \"yesterday\""), "{}", o.err);
    let o = run(&c, &["audit", "--limit=0"]);
    assert!(o.code == 1 && o.err.contains("Invalid --limit 0: expected 1 to 10000"), "{}", o.err);
    let o = run(&c, &["audit", "a.service", "b.service"]);
    assert!(o.code == 1 && o.err.contains("At most one unit"), "{}", o.err);
    assert_eq!(run(&c, &["audit", "--since=1h", "--no-legend"]).out, "", "nothing written yet");
}

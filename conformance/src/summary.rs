//! The suite's summary: passed / failed / skipped per area and per profile (the `base` profile and each
//! capability), skipped specs with the capabilities they miss. Made in-process when the whole catalogue ran in one
//! process, or afterwards from nextest's JUnit report (`conformance-summary <junit.xml>`), which lists only the
//! trials that ran: specs the declaration skips are taken from the catalogue.

use std::collections::{BTreeMap, BTreeSet};

use crate::capabilities::{BASE, Capabilities, Capability};
use crate::{Area, Spec};

/// How one trial ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// With the first line of the failure message, when known.
    Failed(String),
    /// With the capabilities the declaration lacks.
    Skipped(Vec<Capability>),
    /// Not run for another reason: what the cluster does not offer (a live cluster: no container control, another
    /// size, no SSH, ...).
    NotRun(String),
}

/// One spec's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub trial: String,
    pub area: Area,
    /// `base` or the capabilities the spec needs, joined by `+`.
    pub profile: String,
    pub requires: Vec<Capability>,
    pub outcome: Outcome,
}

/// The results of one run, with the declaration they were made under.
#[derive(Debug, Clone)]
pub struct Report {
    pub declared: Capabilities,
    pub entries: Vec<Entry>,
}

/// passed / failed / skipped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Counts {
    fn add(&mut self, o: &Outcome) {
        match o {
            Outcome::Passed => self.passed += 1,
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Skipped(_) | Outcome::NotRun(_) => self.skipped += 1,
        }
    }
}

/// A trial's result as JUnit records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JunitResult {
    Passed,
    Failed(String),
    Skipped,
    /// Skipped for the reason given (not a capability: the cluster could not run it).
    NotRun(String),
}

impl Report {
    /// The report of `specs` under `declared`: specs missing a capability are skipped; the others take their
    /// result from `ran` (trial name → result) and are left out when they did not run (a filtered run).
    pub fn new(specs: &[Spec], declared: &Capabilities, ran: &BTreeMap<String, JunitResult>) -> Report {
        let mut entries = Vec::new();
        for spec in specs {
            let trial = spec.trial_name();
            let missing = spec.missing(declared);
            let outcome = if !missing.is_empty() {
                Outcome::Skipped(missing)
            } else {
                match ran.get(&trial) {
                    Some(JunitResult::Passed) => Outcome::Passed,
                    Some(JunitResult::Failed(m)) => Outcome::Failed(m.clone()),
                    // Ignored although declared: only with `--ignored` filters; counted as skipped without reason.
                    Some(JunitResult::Skipped) => Outcome::Skipped(Vec::new()),
                    Some(JunitResult::NotRun(why)) => Outcome::NotRun(why.clone()),
                    None => continue,
                }
            };
            entries.push(Entry {
                trial,
                area: spec.area,
                profile: spec.profile(),
                requires: spec.requires.to_vec(),
                outcome,
            });
        }
        Report { declared: declared.clone(), entries }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn failed(&self) -> usize {
        self.entries.iter().filter(|e| matches!(e.outcome, Outcome::Failed(_))).count()
    }

    /// Counts per area.
    pub fn by_area(&self) -> BTreeMap<Area, Counts> {
        let mut m: BTreeMap<Area, Counts> = BTreeMap::new();
        for e in &self.entries {
            m.entry(e.area).or_default().add(&e.outcome);
        }
        m
    }

    /// Counts per profile: `base` (specs needing nothing), then each capability in table order (specs needing it;
    /// a spec needing two capabilities counts in both rows). Each row also names why its skipped specs were skipped.
    pub fn by_profile(&self) -> Vec<(String, Counts, String)> {
        let mut rows = Vec::new();
        let row = |filter: &dyn Fn(&Entry) -> bool, own: Option<Capability>| {
            let mut counts = Counts::default();
            let mut reasons: BTreeSet<String> = BTreeSet::new();
            for e in self.entries.iter().filter(|e| filter(e)) {
                counts.add(&e.outcome);
                if let Outcome::NotRun(why) = &e.outcome {
                    reasons.insert(short_reason(why).to_string());
                }
                if let Outcome::Skipped(missing) = &e.outcome {
                    match own {
                        Some(c) if missing.contains(&c) => {
                            reasons.insert("not declared".into());
                        }
                        _ if missing.is_empty() => {
                            reasons.insert("ignored".into());
                        }
                        _ => {
                            let names: Vec<&str> = missing.iter().map(|c| c.as_str()).collect();
                            reasons.insert(format!("needs {}", names.join("+")));
                        }
                    }
                }
            }
            (counts, reasons.into_iter().collect::<Vec<_>>().join(", "))
        };
        let (c, why) = row(&|e| e.requires.is_empty(), None);
        rows.push((BASE.to_string(), c, why));
        for cap in Capability::ALL {
            let (c, why) = row(&|e| e.requires.contains(cap), Some(*cap));
            if c != Counts::default() {
                rows.push((cap.as_str().to_string(), c, why));
            }
        }
        rows
    }

    /// Totals over all specs (each once).
    pub fn total(&self) -> Counts {
        let mut c = Counts::default();
        for e in &self.entries {
            c.add(&e.outcome);
        }
        c
    }

    /// The summary: per area, per profile, the failed specs with their first message line.
    /// The summary as printed. A failure that was a wait running out of time says `timed out:` before its message
    /// (which names what was awaited and what was last observed), so a slow implementation's failures are told from
    /// wrong behaviour; `--time-scale` gives those more time.
    pub fn render(&self) -> String {
        let line = |name: &str, c: Counts, why: &str| {
            let why = if why.is_empty() || c.skipped == 0 { String::new() } else { format!(" ({why})") };
            format!("  {name:<34} {:>3} passed, {:>3} failed, {:>3} skipped{why}\n", c.passed, c.failed, c.skipped)
        };
        let mut out = String::from("conformance summary by area:\n");
        for (area, c) in self.by_area() {
            out.push_str(&line(area.as_str(), c, ""));
        }
        out.push_str(&line("total", self.total(), ""));
        out.push_str(&format!("conformance summary by profile (declared: {}):\n", self.declared.render()));
        for (name, c, why) in self.by_profile() {
            out.push_str(&line(&name, c, &why));
        }
        out.push_str(&line("total", self.total(), ""));
        let failed: Vec<&Entry> = self.entries.iter().filter(|e| matches!(e.outcome, Outcome::Failed(_))).collect();
        if !failed.is_empty() {
            out.push_str("failed:\n");
            for e in failed {
                if let Outcome::Failed(m) = &e.outcome {
                    let m = m.lines().next().unwrap_or_default();
                    let kind = if timed_out(m) { "timed out: " } else { "" };
                    out.push_str(&format!("  {}{}{kind}{m}\n", e.trial, if m.is_empty() { "" } else { ": " }));
                }
            }
        }
        out
    }

    /// A JUnit report of every entry, skipped specs included with their reason (nextest's report leaves them out).
    pub fn to_junit(&self) -> String {
        let c = self.total();
        let mut out = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"fleet-conformance\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">\n  <testsuite name=\"fleet-conformance\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">\n",
            c.passed + c.failed + c.skipped,
            c.failed,
            c.skipped,
            c.passed + c.failed + c.skipped,
            c.failed,
            c.skipped
        );
        for e in &self.entries {
            let head = format!(
                "    <testcase name=\"{}\" classname=\"fleet-conformance.{}\" profile=\"{}\"",
                xml_escape(&e.trial),
                e.area,
                e.profile
            );
            match &e.outcome {
                Outcome::Passed => out.push_str(&format!("{head}/>\n")),
                Outcome::Failed(m) => out.push_str(&format!(
                    "{head}>\n      <failure message=\"{}\"/>\n    </testcase>\n",
                    xml_escape(m.lines().next().unwrap_or_default())
                )),
                Outcome::NotRun(why) => out
                    .push_str(&format!("{head}>\n      <skipped message=\"{}\"/>\n    </testcase>\n", xml_escape(why))),
                Outcome::Skipped(missing) => {
                    let names: Vec<&str> = missing.iter().map(|c| c.as_str()).collect();
                    out.push_str(&format!(
                        "{head}>\n      <skipped message=\"needs capability {}\"/>\n    </testcase>\n",
                        names.join("+")
                    ));
                }
            }
        }
        out.push_str("  </testsuite>\n</testsuites>\n");
        out
    }
}

/// The gist of a reason a spec did not run, for the summary's rows: up to its first `(`, `;`, `:` or `,`.
pub fn short_reason(why: &str) -> &str {
    why.split([';', ':', ',', '(']).next().unwrap_or(why).trim()
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn xml_unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#10;", " ")
        .replace("&amp;", "&")
}

/// Reads nextest's JUnit XML: each `<testcase name="<area>::<spec>" ...>` of the conformance binary, failed when it
/// holds `<failure` or `<error` (with its message), skipped when it holds `<skipped`.
pub fn parse_junit(xml: &str) -> BTreeMap<String, JunitResult> {
    let mut results = BTreeMap::new();
    for case in xml.split("<testcase ").skip(1) {
        let Some(name) = attr(case, "name") else { continue };
        // Only the conformance binary's trials: other test binaries have `area::`-like module paths too.
        if attr(case, "classname").is_some_and(|c| !c.starts_with("fleet-conformance")) {
            continue;
        }
        let Some((area, _)) = name.split_once("::") else { continue };
        if Area::parse(area).is_none() {
            continue;
        }
        let body = case.split("</testcase>").next().unwrap_or(case);
        let self_closing = case.split('>').next().is_some_and(|t| t.ends_with('/'));
        let r = if self_closing {
            JunitResult::Passed
        } else if let Some(at) = body.find("<failure").or_else(|| body.find("<error")) {
            let message = attr(&body[at..], "message").map(xml_unescape).filter(|m| !m.is_empty());
            JunitResult::Failed(message.unwrap_or_else(|| libtest_failure(body, name)))
        } else if body.contains("<skipped") {
            JunitResult::Skipped
        } else {
            JunitResult::Passed
        };
        results.insert(name.to_string(), r);
    }
    results
}

/// Whether a failure message is a wait that ran out of time: the harness's wait (`waited 30.0s for …; last seen:
/// …`) or a fleetctl run it killed (`… did not finish within …`).
pub fn timed_out(message: &str) -> bool {
    (message.contains("waited ") && message.contains("; last seen: ")) || message.contains(" did not finish within ")
}

/// The first line of a failed trial's message in its captured output (libtest prints `---- <name> ----` and then
/// the message), or empty.
fn libtest_failure(body: &str, name: &str) -> String {
    let marker = format!("---- {} ----", xml_escape(name));
    body.split_once(&marker)
        .and_then(|(_, rest)| rest.lines().map(str::trim).find(|l| !l.is_empty()))
        .map(xml_unescape)
        .unwrap_or_default()
}

/// The value of attribute `name` in the (start of a) tag `tag`: `name="..."` at the start or after white space.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!("{name}=\"");
    let at = tag.match_indices(&needle).map(|(i, _)| i).find(|&i| i == 0 || tag[..i].ends_with(char::is_whitespace))?;
    let start = at + needle.len();
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ctx, SpecFuture};

    fn never(_: Ctx) -> SpecFuture {
        Box::pin(async { Ok(()) })
    }

    fn spec(area: Area, name: &'static str, requires: &'static [Capability]) -> Spec {
        Spec { name, area, machines: 0, metadata: &[], requires, needs: &[], origin: "", run: never }
    }

    #[test]
    fn junit_cases_are_read_with_failure_messages() {
        let xml = r#"<testsuite><testcase name="scheduling::a" classname="fleet-conformance::conformance" time="1"></testcase>
<testcase name="scheduling::tests::unit_test_of_another_binary" classname="fleet" time="0"/>
<testcase name="scheduling::b" time="1"><failure message="round 3: &quot;x&quot; moved" type="test failure"/></testcase>
<testcase name="scheduling::c" time="1"><failure type="test failure with exit code 101"/><system-out>
running 1 test
---- scheduling::c ----
round 3 (m1 -&gt; m2): v4&apos;s ExecStartPre ran early; events:
</system-out></testcase>
<testcase name="node::c" time="0"><skipped/></testcase>
<testcase name="node::d"/>
<testcase name="other_test" time="1"></testcase></testsuite>"#;
        let r = parse_junit(xml);
        assert_eq!(r["scheduling::a"], JunitResult::Passed);
        assert_eq!(r["scheduling::b"], JunitResult::Failed("round 3: \"x\" moved".into()));
        assert_eq!(
            r["scheduling::c"],
            JunitResult::Failed("round 3 (m1 -> m2): v4's ExecStartPre ran early; events:".into())
        );
        assert_eq!(r["node::c"], JunitResult::Skipped);
        assert_eq!(r["node::d"], JunitResult::Passed);
        assert_eq!(r.len(), 5);
    }

    #[test]
    fn profiles_count_base_and_each_capability_with_skip_reasons() {
        use Capability::*;
        let specs = [
            spec(Area::Scheduling, "plain", &[]),
            spec(Area::Scheduling, "broken", &[]),
            spec(Area::Replace, "keep", &[KeepMachine]),
            spec(Area::Replace, "keep_and_move", &[KeepMachine, CrossMachineHandover]),
            spec(Area::Ssh, "global_status", &[Ssh, GlobalSshCommands]),
            spec(Area::Node, "filtered_out", &[]),
        ];
        let ran = BTreeMap::from([
            ("scheduling::plain".to_string(), JunitResult::Passed),
            ("scheduling::broken".to_string(), JunitResult::Failed("expected 2, observed 3".into())),
            ("replace::keep".to_string(), JunitResult::Passed),
        ]);
        let declared = Capabilities::of(&[KeepMachine, Ssh]);
        let report = Report::new(&specs, &declared, &ran);
        assert_eq!(report.entries.len(), 5, "a spec that neither ran nor was skipped is left out");
        let rows = report.by_profile();
        let get = |n: &str| rows.iter().find(|r| r.0 == n).cloned().unwrap();
        assert_eq!(get("base").1, Counts { passed: 1, failed: 1, skipped: 0 });
        assert_eq!(
            get("keep_machine"),
            ("keep_machine".into(), Counts { passed: 1, failed: 0, skipped: 1 }, "needs cross_machine_handover".into())
        );
        assert_eq!(get("cross_machine_handover").2, "not declared");
        assert_eq!(get("ssh").2, "needs global_ssh_commands");
        assert!(!rows.iter().any(|r| r.0 == "sighup_reload"), "rows without specs are left out");
        let text = report.render();
        assert!(text.contains("declared: ssh,keep_machine"), "{text}");
        assert!(text.contains("scheduling::broken: expected 2, observed 3"), "{text}");
        assert_eq!(report.failed(), 1);
        let junit = report.to_junit();
        assert!(junit.contains("needs capability cross_machine_handover"), "{junit}");
        let back = parse_junit(&junit);
        assert_eq!(back["replace::keep_and_move"], JunitResult::Skipped);
        assert_eq!(back["scheduling::broken"], JunitResult::Failed("expected 2, observed 3".into()));
    }

    #[test]
    fn a_spec_the_cluster_cannot_run_is_skipped_with_its_reason() {
        let specs = [spec(Area::Scheduling, "exact", &[]), spec(Area::Node, "kills", &[])];
        let ran = BTreeMap::from([
            (
                "scheduling::exact".to_string(),
                JunitResult::NotRun("needs exactly 2 machines; the cluster has 3".into()),
            ),
            ("node::kills".to_string(), JunitResult::NotRun("drives the harness (kills, ...): harness only".into())),
        ]);
        let report = Report::new(&specs, &Capabilities::of(&[]), &ran);
        assert_eq!(report.total(), Counts { passed: 0, failed: 0, skipped: 2 }, "counted as skipped");
        let text = report.render();
        assert!(text.contains("(drives the harness, needs exactly 2 machines)"), "short reasons per profile: {text}");
        let junit = report.to_junit();
        assert!(junit.contains("<skipped message=\"needs exactly 2 machines; the cluster has 3\"/>"), "{junit}");
        assert_eq!(parse_junit(&junit)["node::kills"], JunitResult::Skipped, "conformance-summary reads it back");
    }

    #[test]
    fn a_failure_that_ran_out_of_time_says_so() {
        let waited = "waited 30.1s for 3 active units; last seen: a.service=activating";
        let killed = "fleetctl [\"start\", \"a.service\"] did not finish within 120s";
        assert!(timed_out(waited) && timed_out(killed));
        assert!(!timed_out("expected 2, observed 3") && !timed_out("waited for nothing"));
        let specs = [spec(Area::Scheduling, "slow", &[]), spec(Area::Scheduling, "wrong", &[])];
        let ran = BTreeMap::from([
            ("scheduling::slow".to_string(), JunitResult::Failed(waited.into())),
            ("scheduling::wrong".to_string(), JunitResult::Failed("expected 2, observed 3".into())),
        ]);
        let text = Report::new(&specs, &Capabilities::of(&[]), &ran).render();
        assert!(text.contains(&format!("scheduling::slow: timed out: {waited}")), "{text}");
        assert!(text.contains("scheduling::wrong: expected 2, observed 3"), "{text}");
    }
}

//! The per-area summary line(s): passed / failed / skipped per area, printed when the whole catalogue ran in one
//! process, or computed afterwards from nextest's JUnit report (`conformance-summary <junit.xml>`).

use std::collections::BTreeMap;

/// How one trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Result {
    Passed,
    Failed,
    Skipped,
}

/// Counts per area (areas by name: `unit_actions`, ...).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary(BTreeMap<String, [usize; 3]>);

impl Summary {
    pub fn add(&mut self, area: &str, r: Result) {
        let c = self.0.entry(area.to_string()).or_default();
        c[r as usize] += 1;
    }

    /// Area → number of skipped trials.
    pub fn entries(&self) -> Vec<(String, usize)> {
        self.0.iter().map(|(a, c)| (a.clone(), c[2])).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One line per area and a total, e.g. `scheduling: 10 passed, 1 failed, 1 skipped`.
    pub fn render(&self) -> String {
        let mut out = String::from("conformance summary:\n");
        let mut total = [0; 3];
        for (area, c) in &self.0 {
            out.push_str(&format!("  {area:<13} {:>3} passed, {:>3} failed, {:>3} skipped\n", c[0], c[1], c[2]));
            for i in 0..3 {
                total[i] += c[i];
            }
        }
        out.push_str(&format!(
            "  {:<13} {:>3} passed, {:>3} failed, {:>3} skipped\n",
            "total", total[0], total[1], total[2]
        ));
        out
    }

    /// Reads nextest's JUnit XML: each `<testcase name="<area>::<spec>" ...>` of the conformance binary, failed when
    /// it holds `<failure` or `<error`, skipped when it holds `<skipped`.
    pub fn from_junit(xml: &str) -> Summary {
        let mut s = Summary::default();
        for case in xml.split("<testcase ").skip(1) {
            let Some(name) = attr(case, "name") else { continue };
            // Only the conformance binary's trials: other test binaries have `area::`-like module paths too.
            if attr(case, "classname").is_some_and(|c| !c.starts_with("fleet-conformance")) {
                continue;
            }
            let Some((area, _)) = name.split_once("::") else { continue };
            if crate::Area::parse(area).is_none() {
                continue;
            }
            let body = case.split("</testcase>").next().unwrap_or(case);
            let self_closing = case.split('>').next().is_some_and(|t| t.ends_with('/'));
            let r = if self_closing {
                Result::Passed
            } else if body.contains("<failure") || body.contains("<error") {
                Result::Failed
            } else if body.contains("<skipped") {
                Result::Skipped
            } else {
                Result::Passed
            };
            s.add(area, r);
        }
        s
    }
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_cases_are_counted_per_area() {
        let xml = r#"<testsuite><testcase name="scheduling::a" classname="fleet-conformance::conformance" time="1"></testcase>
<testcase name="scheduling::tests::unit_test_of_another_binary" classname="fleet" time="0"/>
<testcase name="scheduling::b" time="1"><failure message="x"/></testcase>
<testcase name="node::c" time="0"><skipped/></testcase>
<testcase name="node::d"/>
<testcase name="other_test" time="1"></testcase></testsuite>"#;
        let s = Summary::from_junit(xml);
        assert_eq!(s.0["scheduling"], [1, 1, 0]);
        assert_eq!(s.0["node"], [1, 0, 1]);
        assert_eq!(s.0.len(), 2);
        assert!(s.render().contains("total"));
    }
}

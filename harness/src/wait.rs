//! Waiting for the cluster to reach a state, in the spirit of the original's helpers (spec §11.2): poll an
//! observation until it satisfies a predicate or a deadline passes; a timeout names what was awaited and what was
//! last observed. The parsers of fleetctl's `--no-legend --full` tables live here too.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The environment variable that stretches every wait: `FLEET_TIME_SCALE=3` gives each wait and each fleetctl run
/// three times its default time, so a slower implementation (or a loaded host) is judged on behaviour, not speed.
pub const TIME_SCALE_ENV: &str = "FLEET_TIME_SCALE";

/// The factor of [`TIME_SCALE_ENV`] (1 when unset). A value that is not a number from 1 to 100 is refused with a
/// message naming it (a run must not silently use another scale than it asked for).
pub fn time_scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var(TIME_SCALE_ENV) {
        Err(_) => 1.0,
        Ok(text) => parse_time_scale(&text).unwrap_or_else(|e| panic!("{e}")),
    })
}

/// [`TIME_SCALE_ENV`]'s value as a factor.
pub fn parse_time_scale(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(f) if (1.0..=100.0).contains(&f) => Ok(f),
        _ => Err(format!(
            "{TIME_SCALE_ENV}={text:?}: expected a number from 1 to 100 (how many times longer every wait may take)"
        )),
    }
}

/// `d` stretched by [`time_scale`].
pub fn scaled(d: Duration) -> Duration {
    d.mul_f64(time_scale())
}

/// How long to wait and how often to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitOptions {
    /// Give up after this long.
    pub timeout: Duration,
    /// Look again after this long (at most 250 ms, like the original's helpers).
    pub poll: Duration,
}

impl WaitOptions {
    /// The longest poll interval allowed.
    pub const MAX_POLL: Duration = Duration::from_millis(250);

    /// `timeout` (stretched by [`time_scale`]) with the default poll interval.
    pub fn secs(timeout: u64) -> Self {
        WaitOptions { timeout: scaled(Duration::from_secs(timeout)), ..Self::default() }
    }

    /// The same options with another poll interval (clamped to [`Self::MAX_POLL`]).
    pub fn with_poll(self, poll: Duration) -> Self {
        WaitOptions { poll: poll.min(Self::MAX_POLL), ..self }
    }
}

impl Default for WaitOptions {
    /// 30 s (the original waited 10–15 s on faster hosts; this 2-core machine runs several clusters at once),
    /// stretched by [`time_scale`], polled every 250 ms.
    fn default() -> Self {
        WaitOptions { timeout: scaled(Duration::from_secs(30)), poll: Self::MAX_POLL }
    }
}

/// One observation: done (with its value) or not yet (with what was seen, for the timeout message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check<T> {
    Ready(T),
    NotYet(String),
}

/// A wait that did not succeed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WaitError {
    #[error("waited {waited:.1?} for {what}; last seen: {last_seen}")]
    Timeout { what: String, waited: Duration, last_seen: String },
}

/// Calls `observe` every `opts.poll` (first time at once) until it returns [`Check::Ready`], or fails after
/// `opts.timeout` with the last observation.
pub async fn wait_for<T, F, Fut>(opts: WaitOptions, what: &str, mut observe: F) -> Result<T, WaitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Check<T>>,
{
    let start = Instant::now();
    let poll = opts.poll.min(WaitOptions::MAX_POLL);
    loop {
        let seen = match observe().await {
            Check::Ready(v) => return Ok(v),
            Check::NotYet(seen) => seen,
        };
        if start.elapsed() + poll > opts.timeout {
            tracing::debug!(what, last_seen = %seen, "wait timed out");
            return Err(WaitError::Timeout { what: what.to_string(), waited: start.elapsed(), last_seen: seen });
        }
        tokio::time::sleep(poll).await;
    }
}

/// A row of `fleetctl list-units --no-legend --full --fields unit,active,machine`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitState {
    pub name: String,
    pub active_state: String,
    /// The machine ID (the legend's text before the first `/`).
    pub machine: String,
}

/// A row of `fleetctl list-unit-files --no-legend --full --fields unit,dstate,state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFileState {
    pub name: String,
    pub desired_state: String,
    pub state: String,
}

/// Rows with exactly `n` whitespace-separated fields; other lines are ignored, as the original did.
fn rows(out: &str, n: usize) -> impl Iterator<Item = Vec<&str>> {
    out.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).filter(move |f| f.len() == n)
}

/// One row of a `fleetctl list-… --no-legend --full --fields <f1,f2,…>` table: its cells by field name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row(BTreeMap<String, String>);

impl Row {
    /// The cell of `field`; empty when the table has no such field.
    pub fn get(&self, field: &str) -> &str {
        self.0.get(field).map_or("", String::as_str)
    }
}

/// Parses a `--no-legend --full --fields <fields>` table (fields in the order asked for). Lines with another
/// number of whitespace-separated cells are ignored, as the original's helpers did.
pub fn parse_table(out: &str, fields: &[&str]) -> Vec<Row> {
    rows(out, fields.len())
        .map(|cells| Row(fields.iter().zip(cells).map(|(f, c)| (f.to_string(), c.to_string())).collect()))
        .collect()
}

/// The arguments of `fleetctl <command> --no-legend --full --fields <fields>`.
pub fn table_args<'a>(command: &'a str, fields: &'a str) -> [&'a str; 5] {
    [command, "--no-legend", "--full", "--fields", fields]
}

/// Parses `list-units --fields unit,active,machine` output into unit → rows (`ParseUnitStates`).
pub fn parse_unit_states(out: &str) -> BTreeMap<String, Vec<UnitState>> {
    let mut states: BTreeMap<String, Vec<UnitState>> = BTreeMap::new();
    for f in rows(out, 3) {
        let machine = f[2].split('/').next().unwrap_or_default().to_string();
        let s = UnitState { name: f[0].to_string(), active_state: f[1].to_string(), machine };
        states.entry(s.name.clone()).or_default().push(s);
    }
    states
}

/// Parses `list-unit-files --fields unit,dstate,state` output into unit → rows (`ParseUnitFileStates`).
pub fn parse_unit_file_states(out: &str) -> BTreeMap<String, Vec<UnitFileState>> {
    let mut states: BTreeMap<String, Vec<UnitFileState>> = BTreeMap::new();
    for f in rows(out, 3) {
        let s = UnitFileState { name: f[0].to_string(), desired_state: f[1].to_string(), state: f[2].to_string() };
        states.entry(s.name.clone()).or_default().push(s);
    }
    states
}

/// Parses `list-machines --no-legend --full --fields machine`: one machine ID per non-empty line.
pub fn parse_machines(out: &str) -> Vec<String> {
    out.trim().lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
}

/// The rows whose active state is `active` (`FilterActiveUnits`).
pub fn filter_active(states: &BTreeMap<String, Vec<UnitState>>) -> Vec<&UnitState> {
    states.values().flatten().filter(|s| s.active_state == "active").collect()
}

/// Unit → machine of the active rows; an error names a unit active on more than one machine
/// (`ActiveToSingleStates`).
pub fn active_to_single(active: &[&UnitState]) -> Result<BTreeMap<String, String>, String> {
    let mut single = BTreeMap::new();
    for s in active {
        if let Some(other) = single.insert(s.name.clone(), s.machine.clone()) {
            return Err(format!("unit {} is active on more than one machine: {other} and {}", s.name, s.machine));
        }
    }
    Ok(single)
}

/// One line per row, for timeout messages (`(empty)` when there is none).
pub fn summarize(out: &str) -> String {
    let t = out.trim();
    if t.is_empty() { "(empty)".to_string() } else { t.lines().collect::<Vec<_>>().join(" | ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID1: &str = "8363165e2b6a4b6e8c3b1b4f6a2c9d01";
    const ID2: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";

    #[test]
    fn a_time_scale_is_a_number_from_1_to_100() {
        assert_eq!(parse_time_scale("3"), Ok(3.0));
        assert_eq!(parse_time_scale(" 1.5 "), Ok(1.5));
        for bad in ["0.5", "101", "fast", ""] {
            let e = parse_time_scale(bad).unwrap_err();
            assert!(e.starts_with(&format!("FLEET_TIME_SCALE={bad:?}: expected a number from 1 to 100")), "{e}");
        }
    }

    #[tokio::test]
    async fn wait_returns_the_first_ready_value() {
        let mut n = 0;
        let got = wait_for(WaitOptions::secs(5).with_poll(Duration::from_millis(10)), "n to reach 3", || {
            n += 1;
            let seen = n;
            async move { if seen >= 3 { Check::Ready(seen) } else { Check::NotYet(format!("n={seen}")) } }
        })
        .await;
        assert_eq!(got, Ok(3));
    }

    #[tokio::test]
    async fn timeout_names_the_goal_and_the_last_observation() {
        let opts = WaitOptions { timeout: Duration::from_millis(100), poll: Duration::from_millis(20) };
        let err = wait_for(opts, "6 active units", || async { Check::<()>::NotYet("hello@1 active (1 of 6)".into()) })
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("waited "), "{msg}");
        assert!(msg.contains("for 6 active units; last seen: hello@1 active (1 of 6)"), "{msg}");
    }

    #[test]
    fn poll_is_capped_at_250ms() {
        assert_eq!(WaitOptions::secs(1).with_poll(Duration::from_secs(2)).poll, Duration::from_millis(250));
        assert!(WaitOptions::default().poll <= WaitOptions::MAX_POLL);
    }

    #[test]
    fn unit_states_take_the_machine_id_before_the_slash() {
        let out = format!(
            "hello.service\tactive\t{ID1}/172.17.0.2\nhello.service\tinactive\t{ID2}\nping.service\tactivating\t{ID2}/10.0.0.3\n"
        );
        let states = parse_unit_states(&out);
        assert_eq!(states.len(), 2);
        assert_eq!(states["hello.service"].len(), 2);
        assert_eq!(states["hello.service"][0].machine, ID1);
        assert_eq!(states["hello.service"][1].machine, ID2);
        let active = filter_active(&states);
        assert_eq!(active_to_single(&active), Ok(BTreeMap::from([("hello.service".into(), ID1.into())])));
    }

    #[test]
    fn rows_without_exactly_three_fields_are_ignored() {
        let out = "UNIT\t\tACTIVE\tMACHINE\tEXTRA\nbroken.service\tactive\n\n";
        assert!(parse_unit_states(out).is_empty());
        assert!(parse_unit_file_states(out).is_empty());
    }

    #[test]
    fn a_unit_active_twice_is_an_error() {
        let out = format!("a.service\tactive\t{ID1}/1.1.1.1\na.service\tactive\t{ID2}/1.1.1.2\n");
        let states = parse_unit_states(&out);
        let err = active_to_single(&filter_active(&states)).unwrap_err();
        assert!(err.contains("a.service is active on more than one machine"), "{err}");
    }

    #[test]
    fn unit_files_rows() {
        let out = "hello.service\tlaunched\tlaunched\nglobal.service\tlaunched\t-\n";
        let files = parse_unit_file_states(out);
        assert_eq!(
            files["global.service"],
            [UnitFileState { name: "global.service".into(), desired_state: "launched".into(), state: "-".into() }]
        );
        assert_eq!(files["hello.service"][0].state, "launched");
    }

    #[test]
    fn machines_are_lines_and_empty_output_is_none() {
        assert_eq!(parse_machines(&format!("{ID1}\n{ID2}\n")), [ID1, ID2]);
        assert!(parse_machines("").is_empty());
        assert!(parse_machines("\n").is_empty());
    }

    #[test]
    fn summaries_are_one_line() {
        assert_eq!(summarize(""), "(empty)");
        assert_eq!(summarize("a\nb\n"), "a | b");
    }

    #[test]
    fn tables_parse_by_field_name_and_skip_other_lines() {
        let out = "a.service\tactive\tm1\nUNIT ACTIVE\nb.service\tfailed\t-\n";
        let rows = parse_table(out, &["unit", "active", "machine"]);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].get("unit"), rows[0].get("active"), rows[0].get("machine")), ("a.service", "active", "m1"));
        assert_eq!((rows[1].get("unit"), rows[1].get("machine"), rows[1].get("hash")), ("b.service", "-", ""));
    }
}

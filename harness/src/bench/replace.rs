//! The replace scenario, on a fresh cluster: one unit and 10 template instances run in version 1; then
//! `fleetctl start --replace` of the one unit, and of the 10 instances in one command (local changed files
//! `t@1..10.service`), each timed until list-units shows the new hash (the one list-unit-files shows)
//! active/running.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::ctx::{Ctx, Row, instances};
use super::options::Options;
use super::poll::{self, Polled, Progress};
use super::stats::secs;
use super::units;

/// One `start --replace` command.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplaceTiming {
    pub units: usize,
    pub command_s: f64,
    pub command_error: Option<String>,
    /// `done_s`: every unit runs its new version.
    #[serde(flatten)]
    pub polled: Polled,
    /// Units whose new version runs on another machine than the old one did.
    pub moved: Vec<String>,
}

/// The scenario's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplaceReport {
    /// Version 1 of all 11 units active/running (from `start --no-block`).
    pub setup_s: Option<f64>,
    pub one: Option<ReplaceTiming>,
    pub ten: Option<ReplaceTiming>,
    pub errors: Vec<String>,
}

const ONE: &str = "one.service";

/// Runs the scenario; failures land in `errors`.
pub async fn run(opts: &Options) -> ReplaceReport {
    let mut r = ReplaceReport::default();
    match Ctx::new(opts).await {
        Ok(ctx) => {
            if let Err(e) = scenario(&ctx, opts, &mut r).await {
                r.errors.push(e);
            }
            ctx.finish().await;
        }
        Err(e) => r.errors.push(e),
    }
    r
}

async fn scenario(ctx: &Ctx, opts: &Options, r: &mut ReplaceReport) -> Result<(), String> {
    let ten = instances("t", 10);
    let io = |e: std::io::Error| e.to_string();
    let v1 = units::write(
        &ctx.dir.path().join("v1"),
        &[(ONE.into(), units::looping("one (v1)", "one v1")), (units::TEMPLATE.into(), units::template("v1"))],
    )
    .map_err(io)?;
    let mut changed = vec![(ONE.to_string(), units::looping("one (v2)", "one v2"))];
    changed.extend(ten.iter().map(|t| (t.clone(), units::template("v2"))));
    let v2 = units::write(&ctx.dir.path().join("v2"), &changed).map_err(io)?;

    let all: Vec<String> = std::iter::once(ONE.to_string()).chain(ten.iter().cloned()).collect();
    let mut args = vec!["start", "--no-block"];
    args.extend(all.iter().map(String::as_str));
    let t0 = Instant::now();
    ctx.fleetctl_in(Some(&v1), &args).await?;
    let all = &all;
    let up = poll::until(t0, opts.poll, opts.timeout, all.len(), || async move {
        let count = ctx.list_units().await?.iter().filter(|r| all.contains(&r.unit) && r.running()).count();
        Ok(Progress { count, done: count == all.len() })
    })
    .await;
    r.setup_s = up.done_s;
    if up.done_s.is_none() {
        return Err(format!("version 1 of {} units not active/running within {:?}", all.len(), opts.timeout));
    }
    let timing = replace(ctx, opts, &v2, &[ONE.to_string()]).await?;
    if timing.polled.done_s.is_none() {
        r.errors.push(format!("replace of {ONE}: new version not active within {:?}", opts.timeout));
    }
    r.one = Some(timing);
    let timing = replace(ctx, opts, &v2, &ten).await?;
    if timing.polled.done_s.is_none() {
        r.errors.push(format!("replace of 10 instances: new versions not active within {:?}", opts.timeout));
    }
    r.ten = Some(timing);
    Ok(())
}

/// `fleetctl start --replace <names>` in `dir` (blocking, as typed), polled until every unit's new version runs.
async fn replace(ctx: &Ctx, opts: &Options, dir: &Path, names: &[String]) -> Result<ReplaceTiming, String> {
    let old: BTreeMap<String, Row> = ctx.list_units().await?.into_iter().map(|r| (r.unit.clone(), r)).collect();
    let mut args = vec!["start", "--replace"];
    args.extend(names.iter().map(String::as_str));
    let t0 = Instant::now();
    let command = async {
        let res = match ctx.fleetctl_in(Some(dir), &args).await {
            Ok((out, _)) if !out.success() => Err(format!("fleetctl start --replace: {}", out.describe())),
            other => other.map(drop),
        };
        (secs(t0.elapsed()), res.err())
    };
    let new_rows = std::cell::RefCell::new(BTreeMap::new());
    let (fresh_rows, old) = (&new_rows, &old);
    let polled = poll::until(t0, opts.poll, opts.timeout, names.len(), || async move {
        let (rows, files) = tokio::join!(ctx.list_units(), ctx.unit_file_hashes());
        let (rows, files) = (rows?, files?);
        let mut fresh = BTreeMap::new();
        for row in rows.into_iter().filter(|r| names.contains(&r.unit) && r.running()) {
            let (want, was) = (files.get(&row.unit), old.get(&row.unit).map(|o| &o.hash));
            if want == Some(&row.hash) && was != Some(&row.hash) {
                fresh.insert(row.unit.clone(), row);
            }
        }
        let count = fresh.len();
        *fresh_rows.borrow_mut() = fresh;
        Ok(Progress { count, done: count == names.len() })
    });
    let ((command_s, command_error), polled) = tokio::join!(command, polled);
    let moved = new_rows
        .borrow()
        .values()
        .filter(|row| old.get(&row.unit).is_some_and(|o| o.machine != row.machine))
        .map(|row| row.unit.clone())
        .collect();
    Ok(ReplaceTiming { units: names.len(), command_s, command_error, polled, moved })
}

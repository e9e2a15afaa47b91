//! Running the catalogue in one process (`fleet-conformance`): on harness clusters, one per spec as `cargo nextest`
//! runs them, or against a live cluster (`--against`). This module owns which specs run and why the others do not,
//! running at most `jobs` at once, removing on a live cluster each spec's units after it and every unit of the run
//! at the end — also after a spec panicked and on Ctrl-C or SIGTERM —, and the results: one line per spec as it
//! ends, the summary per area and per profile, the JUnit report.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use tokio::task::JoinSet;

use crate::capabilities::Capabilities;
use crate::live::LiveCluster;
use crate::summary::{JunitResult, Report};
use crate::{Ctx, Outcome, SPEC_TIMEOUT, Spec, execute};

/// Where the specs run.
#[derive(Clone)]
pub enum Mode {
    /// Each spec on a harness cluster of its own (Docker and the machine image, `ci/setup`).
    Harness,
    /// Every spec on one live cluster; each spec's units are named `<prefix><NNN>-<name>` (NNN: its catalogue index).
    Live { cluster: Arc<LiveCluster>, prefix: String },
}

/// Which specs to run and how many at once.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Run only trials whose name contains one of these (all when empty).
    pub filters: Vec<String>,
    /// Leave out trials whose name contains one of these.
    pub skips: Vec<String>,
    /// At most this many specs at once.
    pub jobs: usize,
}

impl Selection {
    pub fn selects(&self, trial: &str) -> bool {
        (self.filters.is_empty() || self.filters.iter().any(|f| trial.contains(f.as_str())))
            && !self.skips.iter().any(|s| trial.contains(s.as_str()))
    }
}

/// What is done with one spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Run,
    /// The declaration lacks a capability it needs (the summary names which).
    MissingCapability,
    /// The cluster cannot run it, for the reason given.
    NotRun(String),
}

/// The decision for `spec` under `declared` on a live cluster of `shape` (`None`: a harness cluster).
pub fn decide(spec: &Spec, declared: &Capabilities, shape: Option<&crate::LiveShape>) -> Decision {
    if !spec.missing(declared).is_empty() {
        return Decision::MissingCapability;
    }
    match shape.map(|s| spec.external_verdict(s)) {
        Some(Err(why)) => Decision::NotRun(why),
        _ => Decision::Run,
    }
}

/// The prefix of the units of the spec with catalogue index `index` in a live run with prefix `run_prefix`.
pub fn spec_prefix(run_prefix: &str, index: usize) -> String {
    format!("{run_prefix}{index:03}-")
}

/// How a run ended.
pub struct RunResult {
    pub report: Report,
    /// The signal that ended the run early, if one did.
    pub interrupted: Option<&'static str>,
    /// Whether the final removal of the run's units left none (always true on harness clusters).
    pub cleaned: Result<(), String>,
}

impl RunResult {
    /// 0 when no spec failed, nothing was left behind and no signal ended the run; 130 on a signal; 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        if self.interrupted.is_some() {
            130
        } else if self.report.failed() > 0 || self.cleaned.is_err() {
            1
        } else {
            0
        }
    }
}

/// Resolves when the process gets SIGINT (Ctrl-C) or SIGTERM, with the signal's name.
async fn interruption() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C ends a run early");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// The message of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Runs one spec on its own harness cluster, or on the live cluster with its prefix, within [`SPEC_TIMEOUT`]; a
/// panic is a failure. On a live cluster the spec's units are then destroyed (whatever the outcome), and a spec
/// whose units cannot be removed fails.
async fn run_one(spec: Spec, mode: Mode, index: usize) -> Outcome {
    match mode {
        Mode::Harness => match AssertUnwindSafe(execute(&spec)).catch_unwind().await {
            Ok(outcome) => outcome,
            Err(p) => Err(format!("the spec panicked: {}", panic_message(&*p))),
        },
        Mode::Live { cluster, prefix } => {
            let prefix = spec_prefix(&prefix, index);
            let outcome = match Ctx::live(Arc::clone(&cluster), &prefix) {
                Ok(ctx) => {
                    let run = AssertUnwindSafe((spec.run)(ctx)).catch_unwind();
                    match tokio::time::timeout(SPEC_TIMEOUT, run).await {
                        Ok(Ok(outcome)) => outcome,
                        Ok(Err(p)) => Err(format!("the spec panicked: {}", panic_message(&*p))),
                        Err(_) => Err(format!("the spec did not finish within {SPEC_TIMEOUT:?}")),
                    }
                }
                Err(e) => Err(e),
            };
            // The spec reads its units' names without the prefix; the cluster's logs and listings show them with it.
            let outcome =
                outcome.map_err(|e| format!("{e}\n  (on the cluster this spec's units are named {prefix}<name>)"));
            match (outcome, cluster.destroy_prefixed(&prefix).await) {
                (Ok(()), Err(e)) => Err(format!("removing the spec's units ({prefix}*): {e}")),
                (outcome, Err(e)) => {
                    tracing::warn!(%prefix, error = %e, "the spec's units could not all be removed");
                    outcome
                }
                (outcome, Ok(_)) => outcome,
            }
        }
    }
}

/// Runs the selected specs of `specs` under `declared`; prints one line per spec as it ends.
pub async fn run(specs: Vec<Spec>, declared: &Capabilities, mode: Mode, selection: &Selection) -> RunResult {
    let shape = match &mode {
        Mode::Live { cluster, .. } => Some(cluster.shape()),
        Mode::Harness => None,
    };
    let mut results: BTreeMap<String, JunitResult> = BTreeMap::new();
    let mut to_run = Vec::new();
    for (index, spec) in specs.into_iter().enumerate() {
        let trial = spec.trial_name();
        if !selection.selects(&trial) {
            continue;
        }
        match decide(&spec, declared, shape.as_ref()) {
            Decision::Run => to_run.push((index, spec)),
            Decision::MissingCapability => {
                let names: Vec<&str> = spec.missing(declared).iter().map(|c| c.as_str()).collect();
                println!("SKIP  {trial}: needs capability {}", names.join("+"));
            }
            Decision::NotRun(why) => {
                println!("SKIP  {trial}: {why}");
                results.insert(trial, JunitResult::NotRun(why));
            }
        }
    }
    println!("running {} specs, at most {} at once", to_run.len(), selection.jobs.max(1));
    let permits = Arc::new(tokio::sync::Semaphore::new(selection.jobs.max(1)));
    let mut pending: Vec<String> = to_run.iter().map(|(_, s)| s.trial_name()).collect();
    let mut set = JoinSet::new();
    for (index, spec) in to_run {
        let (permits, mode) = (Arc::clone(&permits), mode.clone());
        set.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let trial = spec.trial_name();
            let started = Instant::now();
            let outcome = run_one(spec, mode, index).await;
            (trial, started.elapsed(), outcome)
        });
    }
    let mut interrupted = None;
    let signal = interruption();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            biased;
            sig = &mut signal => {
                println!("{sig}: stopping the specs still running");
                interrupted = Some(sig);
                // Dropping a spec's future drops its context: a harness cluster removes its containers then.
                set.shutdown().await;
                break;
            }
            next = set.join_next() => match next {
                None => break,
                Some(Ok((trial, took, outcome))) => {
                    let secs = took.as_secs_f64();
                    match &outcome {
                        Ok(()) => println!("PASS  {trial} ({secs:.1} s)"),
                        Err(e) => println!("FAIL  {trial} ({secs:.1} s): {}", e.replace('\n', "\n      ")),
                    }
                    pending.retain(|t| *t != trial);
                    results.insert(trial, outcome.map_or_else(JunitResult::Failed, |()| JunitResult::Passed));
                }
                Some(Err(e)) => println!("FAIL  a spec's task ended abnormally: {e}"),
            }
        }
    }
    if let Some(sig) = interrupted {
        for trial in pending {
            results.insert(trial, JunitResult::NotRun(format!("not finished: the run was ended by {sig}")));
        }
    }
    let cleaned = match &mode {
        Mode::Live { cluster, prefix } => sweep(cluster, prefix).await,
        Mode::Harness => Ok(()),
    };
    let selected: Vec<Spec> = crate::all().into_iter().filter(|s| selection.selects(&s.trial_name())).collect();
    let report = Report::new(&selected, declared, &results);
    RunResult { report, interrupted, cleaned }
}

/// Removes every unit of the run (`prefix*`) that is still there and checks that none is left.
pub async fn sweep(cluster: &LiveCluster, prefix: &str) -> Result<(), String> {
    match cluster.destroy_prefixed(prefix).await {
        Ok(left) if left.is_empty() => Ok(()),
        Ok(left) => {
            println!("removed {} unit(s) of this run left behind: {}", left.len(), left.join(", "));
            Ok(())
        }
        Err(e) => Err(format!("units of this run ({prefix}*) are still on {}: {e}", cluster.endpoint())),
    }
}

//! The rollout commands against the fake cluster, whose rollouts are decided by the API's `decide_rollout` and
//! driven by the engine's `rollout::advance` (see `client::fake`).

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::cli::testing::{Outcome, cluster, run};
use crate::client::fake::FakeClient;
use crate::client::{Client, ClientError};
use fleet_core::unit::UnitFile;

const GLOBAL: &str = "[Service]\nExecStart=/bin/sleep 1000\n\n[X-Fleet]\nGlobal=true\n";
const GLOBAL_V2: &str = "[Service]\nExecStart=/bin/sleep 2000\n\n[X-Fleet]\nGlobal=true\n";
const TEMPLATE: &str = "[Service]\nExecStart=/bin/sleep 1000 %i\n";
const TEMPLATE_V2: &str = "[Service]\nExecStart=/bin/sleep 2000 %i\n";
const M1: &str = "8363165e.../172.17.0.2";
const M2: &str = "8606e1a2.../172.17.0.3";
const M3: &str = "d91d98fc.../172.17.0.4";

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// The ID in `Rollout <id> started: ...`.
fn started_id(out: &str) -> String {
    let line = out.lines().find(|l| l.contains(" started: ")).unwrap_or_else(|| panic!("no start line in:\n{out}"));
    line.trim_start_matches("Rollout ").split(' ').next().unwrap().to_string()
}

/// A printed rollout: its header line and its step rows (cells), legend left out.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    header: String,
    rows: Vec<Vec<String>>,
}

impl Shown {
    fn phases(&self) -> Vec<&str> {
        self.rows.iter().map(|r| r[2].as_str()).collect()
    }
}

/// Every rollout table printed in `out`, in order.
fn shown(out: &str) -> Vec<Shown> {
    let mut all: Vec<Shown> = Vec::new();
    for line in out.lines() {
        if line.starts_with("Rollout ") && !line.contains(" started: ") {
            all.push(Shown { header: line.to_string(), rows: Vec::new() });
        } else if let Some(last) = all.last_mut() {
            let cells: Vec<String> = line.split('\t').filter(|c| !c.is_empty()).map(str::to_string).collect();
            if cells.first().map(String::as_str) != Some("MACHINE") {
                last.rows.push(cells);
            }
        }
    }
    all
}

fn row(machine: &str, unit: &str, phase: &str, detail: &str) -> Vec<String> {
    vec![machine.into(), unit.into(), phase.into(), detail.into()]
}

/// The fake cluster with `db.service` (global) launched on every machine.
fn db_cluster() -> Arc<FakeClient> {
    let c = cluster();
    c.insert_unit("db.service", GLOBAL, "launched");
    c
}

/// [`db_cluster`] and a local `db.service` file with `text` (the directory lives as long as the first value).
fn db_cluster_and_local(text: &str) -> (tempfile::TempDir, Arc<FakeClient>, String) {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "db.service", text);
    (dir, db_cluster(), f)
}

/// Asserts that `o` succeeded and began with the start line of a rollout of `what` (`replace db.service`); returns
/// the rollout's ID.
fn started_ok(o: &Outcome, what: &str) -> String {
    assert_eq!((o.code, o.err.as_str()), (0, ""), "{}", o.out);
    let id = started_id(&o.out);
    assert!(o.out.starts_with(&format!("Rollout {id} started: {what}\n")), "{}", o.out);
    id
}

/// The phases of every rollout table printed in `out`, in order.
fn phases(out: &str) -> Vec<Vec<String>> {
    shown(out).iter().map(|t| t.phases().into_iter().map(str::to_string).collect()).collect()
}

#[test]
fn rolling_replace_of_a_global_unit_takes_one_machine_at_a_time_in_order() {
    let (_dir, c, f) = db_cluster_and_local(GLOBAL_V2);
    let o = run(&c, &["start", "--replace", "--rolling", &f]);
    let id = started_ok(&o, "replace db.service");
    assert!(id.starts_with("db-") && id.len() == "db-".len() + 13, "{id}");
    let tables = shown(&o.out);
    assert_eq!(
        phases(&o.out),
        [
            vec![],
            vec!["updating", "pending", "pending"],
            vec!["healthy", "pending", "pending"],
            vec!["done", "updating", "pending"],
            vec!["done", "healthy", "pending"],
            vec!["done", "done", "updating"],
            vec!["done", "done", "healthy"],
            vec!["done", "done", "done"],
        ],
        "{}",
        o.out
    );
    let last = tables.last().unwrap();
    assert_eq!(last.header, format!("Rollout {id} replace done"));
    assert_eq!(
        last.rows,
        [row(M1, "db.service", "done", "-"), row(M2, "db.service", "done", "-"), row(M3, "db.service", "done", "-")]
    );
    assert!(tables[..tables.len() - 1].iter().all(|t| t.header == format!("Rollout {id} replace running")));
    let stored = &c.stored_rollouts()[0].spec;
    assert_eq!(
        (stored.max_unavailable, stored.min_healthy_ms, stored.health_timeout_ms, stored.on_failure),
        (1, 10_000, 300_000, OnFailure::Pause),
        "the defaults"
    );
    assert_eq!(c.unit_text("db.service").unwrap(), GLOBAL_V2);
    assert_eq!(c.log(), [format!("rollout {id} replace db.service")]);
}

#[test]
fn rolling_replace_of_instances_uses_the_local_template_and_the_pace_given() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    c.insert_unit("hello@.service", TEMPLATE, "inactive");
    for i in 1..=3 {
        c.insert_unit(&format!("hello@{i}.service"), TEMPLATE, "launched");
    }
    write(dir.path(), "hello@.service", TEMPLATE_V2);
    let args: Vec<String> =
        (1..=2).map(|i| dir.path().join(format!("hello@{i}.service")).display().to_string()).collect();
    let o = run(
        &c,
        &[
            "start",
            "--replace",
            "--rolling",
            "--max-unavailable=2",
            "--min-healthy=0",
            "--health-timeout=1m30s",
            "--on-failure=rollback",
            &args[0],
            &args[1],
        ],
    );
    assert_eq!((o.code, o.err.as_str()), (0, ""), "{}", o.out);
    let id = started_id(&o.out);
    assert!(id.starts_with("hello_1-"), "{id}");
    assert!(o.out.starts_with(&format!("Rollout {id} started: replace hello@1.service hello@2.service\n")));
    let tables = shown(&o.out);
    let phases: Vec<Vec<&str>> = tables.iter().map(Shown::phases).collect();
    assert_eq!(phases, [vec![], vec!["updating", "updating"], vec!["done", "done"]], "{}", o.out);
    let spec = &c.stored_rollouts()[0].spec;
    assert_eq!(
        (spec.max_unavailable, spec.min_healthy_ms, spec.health_timeout_ms, spec.on_failure),
        (2, 0, 90_000, OnFailure::Rollback)
    );
    assert_eq!(c.unit_text("hello@1.service").unwrap(), TEMPLATE_V2);
    assert_eq!(c.unit_text("hello@3.service").unwrap(), TEMPLATE, "not named: untouched");
}

#[test]
fn units_with_the_same_content_are_found_same_and_left_out() {
    let (dir, c, f) = db_cluster_and_local(GLOBAL);
    let o = run(&c, &["start", "--replace", "--rolling", &f]);
    assert_eq!(
        (o.code, o.out.as_str(), o.err.as_str()),
        (0, "Found same Unit(db.service) in Registry, nothing to do\n", "")
    );
    assert!(c.stored_rollouts().is_empty() && c.log().is_empty(), "no rollout when nothing differs");

    c.insert_unit("hello@1.service", TEMPLATE, "launched");
    c.insert_unit("hello@2.service", TEMPLATE_V2, "launched");
    write(dir.path(), "hello@.service", TEMPLATE_V2);
    let i1 = dir.path().join("hello@1.service").display().to_string();
    let i2 = dir.path().join("hello@2.service").display().to_string();
    let o = run(&c, &["start", "--replace", "--rolling", "--no-block", &i1, &i2]);
    assert_eq!(o.code, 0, "{}", o.err);
    let id = started_id(&o.out);
    assert_eq!(
        o.out,
        format!(
            "Found same Unit(hello@2.service) in Registry, nothing to do\nRollout {id} started: replace hello@1.service\n"
        )
    );
}

#[test]
fn a_new_version_that_fails_pauses_after_the_first_machine() {
    let (_dir, c, f) = db_cluster_and_local(GLOBAL_V2);
    c.set_unhealthy(GLOBAL_V2);
    let o = run(&c, &["start", "--replace", "--rolling", &f]);
    assert_eq!(o.code, EXIT_PAUSED, "{}\n{}", o.out, o.err);
    let id = started_id(&o.out);
    let detail = "the new version did not start: activeState=failed subState=failed";
    let reason = format!("paused: db.service on 8363165e: {detail}");
    let last = shown(&o.out).pop().unwrap();
    assert_eq!(last.header, format!("Rollout {id} replace paused: {reason}"));
    assert_eq!(
        last.rows,
        [
            row(M1, "db.service", "failed", detail),
            row(M2, "db.service", "pending", "-"),
            row(M3, "db.service", "pending", "-")
        ]
    );
    assert_eq!(
        o.err,
        format!(
            "Rollout {id} is paused ({reason}): resume it with fleetctl rollout-resume {id}, or abort it with \
             fleetctl rollout-abort {id}\n"
        )
    );
    assert_eq!(c.unit_text("db.service").unwrap(), GLOBAL_V2, "the failed machine keeps the new version");
    // The other machines still run the old version.
    let old = fleet_core::unit::UnitFile::parse(GLOBAL).unwrap().hash().to_hex();
    let states = c.unit_states(&Default::default()).unwrap();
    let runs_old: Vec<&str> = states.iter().filter(|s| s.hash == old).map(|s| &s.machine_id[..8]).collect();
    assert_eq!(runs_old, ["8606e1a2", "d91d98fc"]);
}

#[test]
fn with_on_failure_rollback_every_machine_returns_to_the_old_version() {
    let (_dir, c, f) = db_cluster_and_local(GLOBAL_V2);
    c.set_unhealthy(GLOBAL_V2);
    let o = run(&c, &["start", "--replace", "--rolling", "--on-failure=rollback", &f]);
    assert_eq!(o.code, EXIT_ROLLED_BACK, "{}\n{}", o.out, o.err);
    let id = started_id(&o.out);
    let reason = "rolled back: db.service on 8363165e: the new version did not start: activeState=failed \
                  subState=failed";
    assert_eq!(shown(&o.out).pop().unwrap().header, format!("Rollout {id} replace rolled_back: {reason}"));
    assert_eq!(o.err, format!("Rollout {id} rolled_back: {reason}\n"));
    assert_eq!(c.unit_text("db.service").unwrap(), GLOBAL, "back to the old version");
}

#[test]
fn rolling_restart_restarts_machine_by_machine() {
    let c = db_cluster();
    let o = run(&c, &["restart", "--rolling", "--min-healthy=0", "db"]);
    let id = started_ok(&o, "restart db.service");
    assert_eq!(
        phases(&o.out),
        [
            vec![],
            vec!["updating", "pending", "pending"],
            vec!["done", "updating", "pending"],
            vec!["done", "done", "updating"],
            vec!["done", "done", "done"],
        ],
        "{}",
        o.out
    );
    assert_eq!(shown(&o.out).pop().unwrap().header, format!("Rollout {id} restart done"));
    assert_eq!(c.log(), [format!("rollout {id} restart db.service")], "names only: no content is stored");
    assert_eq!(c.unit_text("db.service").unwrap(), GLOBAL);
}

#[test]
fn wrong_flags_and_missing_units_are_refused_before_anything_is_sent() {
    let (dir, c, f) = db_cluster_and_local(GLOBAL_V2);
    let nope = write(dir.path(), "nope.service", GLOBAL);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["start", "--rolling", &f], "Error creating units: --rolling applies only with --replace\n"),
        (
            vec!["start", "--replace", "--rolling", "--no-restart", &f],
            "Error creating units: --rolling cannot be combined with --no-restart\n",
        ),
        (
            vec!["start", "--max-unavailable=1", &f],
            "Error creating units: --max-unavailable applies only with --rolling\n",
        ),
        (
            vec!["restart", "--min-healthy=1s", "db"],
            "Error restarting units: --min-healthy applies only with --rolling\n",
        ),
        (vec!["restart", "--no-block", "db"], "Error restarting units: --no-block applies only with --rolling\n"),
        (
            vec!["restart", "--rolling", "--max-unavailable=0", "db"],
            "Error starting rollout: invalid --max-unavailable: expected a number of machines of at least 1 or a \
             percentage such as 25%, got \"0\"\n",
        ),
        (
            vec!["restart", "--rolling", "--health-timeout=0", "db"],
            "Error starting rollout: --health-timeout must be longer than 0\n",
        ),
        (
            vec!["restart", "--rolling", "--on-failure=retry", "db"],
            "Error starting rollout: invalid --on-failure \"retry\": expected pause or rollback\n",
        ),
        (
            vec!["restart", "--rolling", "db", "nope"],
            "Error starting rollout: unit nope.service does not exist: a rolling restart changes launched units\n",
        ),
        (
            vec!["start", "--replace", "--rolling", &f, &nope],
            "Error starting rollout: unit nope.service does not exist: a rolling replace changes launched units \
             (start it first)\n",
        ),
        (
            vec!["start", "--replace", "--rolling", "/nonexistent/db.service"],
            "Error starting rollout: error Unit /nonexistent/db.service does not seem to be a template unit\n",
        ),
    ];
    for (args, err) in cases {
        let o = run(&c, &args);
        assert_eq!((o.code, o.err.as_str(), o.out.as_str()), (EXIT_ERROR, err, ""), "{args:?}");
    }
    for (flag, value, reason) in [
        ("min-healthy", "10", "time: invalid duration \"10\""),
        ("health-timeout", "-1s", "time: invalid duration \"-1s\""),
    ] {
        let arg = format!("--{flag}={value}");
        let o = run(&c, &["restart", "--rolling", &arg, "db"]);
        assert_eq!(o.code, EXIT_ERROR);
        assert!(
            o.err.starts_with(&format!("Error: invalid argument {value:?} for \"--{flag}\" flag: {reason}\n")),
            "{}",
            o.err
        );
    }
    let o = run(&c, &["restart", "--rolling", "--max-unavailable=two", "db"]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (
            EXIT_ERROR,
            "Error starting rollout: invalid --max-unavailable: expected a number of machines of at least 1 or a \
             percentage such as 25%, got \"two\"\n"
        )
    );
    assert!(c.log().is_empty(), "{:?}", c.log());
}

#[test]
fn the_api_refuses_units_that_are_not_launched_or_already_rolling() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    c.insert_unit("idle.service", GLOBAL, "loaded");
    let f = write(dir.path(), "idle.service", GLOBAL_V2);
    let o = run(&c, &["start", "--replace", "--rolling", &f]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (
            EXIT_ERROR,
            "Error starting rollout: googleapi: Error 409: unit \"idle.service\" is loaded (a rollout changes launched \
             units)\n"
        )
    );
    c.insert_unit("db.service", GLOBAL, "launched");
    c.freeze_rollouts(true);
    let first = started_id(&run(&c, &["restart", "--rolling", "--no-block", "db.service"]).out);
    let o = run(&c, &["restart", "--rolling", "db.service"]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (
            EXIT_ERROR,
            format!(
                "Error starting rollout: googleapi: Error 409: unit \"db.service\" is in rollout {first:?} (running)\n"
            )
            .as_str()
        )
    );
}

#[test]
fn pause_resume_and_status_of_a_rollout_in_progress() {
    let (_dir, c, f) = db_cluster_and_local(GLOBAL_V2);
    c.freeze_rollouts(true);
    let o = run(&c, &["start", "--replace", "--rolling", "--no-block", "--min-healthy=0", &f]);
    let id = started_id(&o.out);
    assert_eq!((o.code, o.out.clone()), (0, format!("Rollout {id} started: replace db.service\n")));
    let o = run(&c, &["rollout-status", "--no-block", "db.service"]);
    assert_eq!((o.code, o.out.clone()), (0, format!("Rollout {id} replace running\nMACHINE\tUNIT\tPHASE\tDETAIL\n")));
    let o = run(&c, &["rollout-pause", "db"]);
    assert_eq!((o.code, o.out.clone(), o.err.as_str()), (0, format!("Rollout {id} paused\n"), ""));

    c.freeze_rollouts(false);
    let o = run(&c, &["rollout-status", "db.service"]);
    assert_eq!(o.code, EXIT_PAUSED, "{}", o.out);
    let last = shown(&o.out).pop().unwrap();
    assert_eq!(last.header, format!("Rollout {id} replace paused: paused by request"));
    assert_eq!(last.phases(), ["pending", "pending", "pending"], "nothing released while paused");
    assert!(o.err.starts_with(&format!("Rollout {id} is paused (paused by request): resume it with")), "{}", o.err);

    let o = run(&c, &["rollout-resume", &id]);
    assert_eq!((o.code, o.out.clone()), (0, format!("Rollout {id} resumed\n")));
    let o = run(&c, &["rollout-status", &id]);
    assert_eq!((o.code, o.err.as_str()), (EXIT_DONE, ""), "{}", o.out);
    assert_eq!(shown(&o.out).pop().unwrap().phases(), ["done", "done", "done"]);

    // Nothing in progress any more: by unit there is nothing to act on; by ID the API refuses.
    let o = run(&c, &["rollout-abort", "db.service"]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (EXIT_ERROR, "No rollout of unit db.service is in progress (and no rollout has the ID \"db.service\")\n")
    );
    let o = run(&c, &["rollout-abort", &id]);
    assert_eq!(
        (o.code, o.err.clone()),
        (
            EXIT_ERROR,
            format!("Error aborting rollout {id}: googleapi: Error 409: rollout {id:?} is done: nothing to abort\n")
        )
    );
    assert_eq!(
        c.log(),
        [format!("rollout {id} replace db.service"), format!("rollout {id} pause"), format!("rollout {id} run")]
    );
}

#[test]
fn an_aborted_rollout_ends_the_wait_with_4_and_status_shows_the_newest() {
    let c = db_cluster();
    let first = started_id(&run(&c, &["restart", "--rolling", "--min-healthy=0", "db"]).out);
    c.freeze_rollouts(true);
    // The clock of the fake engine moved on: the second rollout is the newer one.
    let second = started_id(&run(&c, &["restart", "--rolling", "--no-block", "db"]).out);
    assert_ne!(first, second);
    let o = run(&c, &["rollout-status", "--no-block", "db"]);
    assert!(o.out.starts_with(&format!("Rollout {second} restart running\n")), "{}", o.out);
    let o = run(&c, &["rollout-status", "--no-block", &first]);
    assert_eq!(o.code, EXIT_DONE);
    assert!(o.out.starts_with(&format!("Rollout {first} restart done\n")), "{}", o.out);

    // Paused by request, then aborted: the first read after the abort still shows it paused (the engine has not
    // taken the abort up); the wait goes on until it is aborted.
    assert_eq!(run(&c, &["rollout-pause", "db"]).code, 0);
    c.freeze_rollouts(false);
    assert_eq!(run(&c, &["rollout-status", "--no-block", "db"]).code, EXIT_DONE, "shown before the engine's pass");
    assert_eq!(run(&c, &["rollout-status", "--no-block", "db"]).code, EXIT_PAUSED, "paused by the engine now");
    let o = run(&c, &["rollout-abort", "db.service"]);
    assert_eq!((o.code, o.out.clone()), (0, format!("Rollout {second} aborted\n")));
    let o = run(&c, &["rollout-status", "db"]);
    assert_eq!(o.code, EXIT_ABORTED, "{}", o.out);
    assert_eq!(shown(&o.out)[0].header, format!("Rollout {second} restart paused: paused by request"), "{}", o.out);
    assert_eq!(shown(&o.out).pop().unwrap().header, format!("Rollout {second} restart aborted: aborted by request"));
    assert_eq!(o.err, format!("Rollout {second} aborted: aborted by request\n"));
}

#[test]
fn status_and_actions_need_one_known_unit_or_rollout() {
    let c = db_cluster();
    for cmd in ["rollout-status", "rollout-pause", "rollout-resume", "rollout-abort"] {
        for args in [vec![cmd], vec![cmd, "a", "b"]] {
            let o = run(&c, &args);
            assert_eq!((o.code, o.err.as_str()), (EXIT_ERROR, "One unit or rollout ID must be given\n"), "{args:?}");
        }
    }
    let o = run(&c, &["rollout-status", "db"]);
    assert_eq!(
        (o.code, o.err.as_str(), o.out.as_str()),
        (EXIT_ERROR, "No rollout of unit db.service found (and no rollout has the ID \"db\")\n", "")
    );
    let o = run(&c, &["rollout-pause", "no-such.service"]);
    assert_eq!(
        (o.code, o.err.as_str()),
        (
            EXIT_ERROR,
            "No rollout of unit no-such.service is in progress (and no rollout has the ID \"no-such.service\")\n"
        )
    );
    c.fail_all(Some(ClientError::Other("connection refused".into())));
    let o = run(&c, &["rollout-status", "db"]);
    assert_eq!((o.code, o.err.as_str()), (EXIT_ERROR, "Error retrieving rollouts: connection refused\n"));
}

#[test]
fn a_wait_rides_out_failed_reads_and_gives_up_after_many_in_a_row() {
    let c = db_cluster();
    c.freeze_rollouts(true);
    let id = started_id(&run(&c, &["restart", "--rolling", "--no-block", "--min-healthy=0", "db"]).out);
    c.freeze_rollouts(false);
    c.fail_rollout_reads(3, ClientError::Other("connection refused".into()));
    let o = run(&c, &["rollout-status", "db"]);
    assert_eq!(o.code, EXIT_DONE, "{}\n{}", o.out, o.err);
    assert_eq!(o.err, format!("Error retrieving rollout {id}: connection refused (still waiting)\n"));

    c.freeze_rollouts(true);
    let id = started_id(&run(&c, &["restart", "--rolling", "--no-block", "db"]).out);
    c.fail_rollout_reads(u32::MAX, ClientError::Other("connection refused".into()));
    let o = run(&c, &["rollout-status", "db"]);
    assert_eq!(o.code, EXIT_ERROR);
    assert_eq!(
        o.err,
        format!(
            "Error retrieving rollout {id}: connection refused (still waiting)\nError waiting for rollout {id}: \
             connection refused (240 requests in a row failed; last seen: running; the rollout goes on in the \
             cluster, see fleetctl rollout-status {id})\n"
        )
    );
}

#[test]
fn the_status_table_shows_machines_like_list_units() {
    let machines = [Machine {
        id: "8363165e6276f500b71169eca9b3f76b".into(),
        primary_ip: "172.17.0.2".into(),
        ..Default::default()
    }];
    let step = |machine: &str, phase, detail: &str| fleet_core::rollout::Step {
        unit: "db.service".into(),
        machine: machine.into(),
        phase,
        released_ms: 0,
        healthy_since_ms: 0,
        detail: detail.into(),
        restarts_at_healthy: None,
        down_since_ms: 0,
        from_machine: String::new(),
        ..fleet_core::rollout::Step::default()
    };
    let rollout = Rollout {
        id: "db-1".into(),
        kind: RolloutKind::Replace,
        units: Vec::new(),
        max_unavailable: 1,
        min_healthy_ms: 0,
        health_timeout_ms: 1,
        on_failure: OnFailure::Pause,
        created_ms: 0,
        action: Action::Run,
        resumes: 0,
        resumes_taken: 0,
        state: RolloutState::Paused,
        reason: "paused: db.service on 8363165e: boom".into(),
        steps: vec![
            step("8363165e6276f500b71169eca9b3f76b", fleet_core::rollout::Phase::Failed, "boom"),
            step("d91d98fca203da3cb89fb5c100ed0823", fleet_core::rollout::Phase::Pending, ""),
        ],
        revision: 0,
        ..Rollout::default()
    };
    assert_eq!(
        render_status(&rollout, &machines, false, true),
        "Rollout db-1 replace paused: paused: db.service on 8363165e: boom\n\
         MACHINE\t\t\tUNIT\t\tPHASE\tDETAIL\n\
         8363165e.../172.17.0.2\tdb.service\tfailed\tboom\n\
         d91d98fc...\t\tdb.service\tpending\t-\n"
    );
    assert_eq!(
        render_status(&rollout, &machines, true, false),
        "Rollout db-1 replace paused: paused: db.service on 8363165e: boom\n\
         8363165e6276f500b71169eca9b3f76b/172.17.0.2\tdb.service\tfailed\tboom\n\
         d91d98fca203da3cb89fb5c100ed0823\t\tdb.service\tpending\t-\n"
    );
}

#[test]
fn rollout_ids_are_the_first_unit_and_the_time_in_the_registry_alphabet() {
    assert_eq!(rollout_id("db.service", 1_700_000_000_000), "db-1700000000000");
    assert_eq!(rollout_id("hello@1.service", 5), "hello_1-5");
    assert_eq!(rollout_id(r"esc@a\x2db:c.service", 5), "esc_a_x2db_c-5");
    assert_eq!(rollout_id(".service", 5), "rollout-5");
    let long = rollout_id(&format!("{}.service", "a".repeat(80)), 1_700_000_000_000);
    assert_eq!(long.len(), 64);
    assert!(long.ends_with("a-1700000000000"), "{long}");
    let taken = ["db-7".to_string(), "db-8".to_string()];
    assert_eq!(unused_rollout_id("db.service", 7, &taken), "db-9");
    assert_eq!(unused_rollout_id("db.service", 6, &taken), "db-6");
    for id in [long, rollout_id("x y/z.service", 1)] {
        fleet_registry::check_component(fleet_registry::Component::RolloutId, &id).unwrap();
    }
}

#[test]
fn a_wait_goes_on_while_the_engine_has_not_taken_up_a_resume_or_an_abort() {
    use fleet_core::rollout::Phase;
    let step = |phase| fleet_core::rollout::Step {
        unit: "db.service".into(),
        machine: "m1".into(),
        phase,
        released_ms: 0,
        healthy_since_ms: 0,
        detail: String::new(),
        restarts_at_healthy: None,
        down_since_ms: 0,
        from_machine: String::new(),
        ..fleet_core::rollout::Step::default()
    };
    let shown = |state, action, phases: &[Phase], resumed: (u32, u32)| Rollout {
        id: "db-1".into(),
        kind: RolloutKind::Replace,
        units: Vec::new(),
        max_unavailable: 1,
        min_healthy_ms: 0,
        health_timeout_ms: 1,
        on_failure: OnFailure::Pause,
        created_ms: 0,
        action,
        resumes: resumed.0,
        resumes_taken: resumed.1,
        state,
        reason: String::new(),
        steps: phases.iter().map(|p| step(*p)).collect(),
        revision: 0,
        ..Rollout::default()
    };
    use Action::{Abort, Pause, Run};
    use Phase::{Failed, Pending, Updating};
    /// (state, action, phases, (resumes, resumes taken), exit code)
    type Row = (RolloutState, Action, &'static [Phase], (u32, u32), Option<i32>);
    let table: [Row; 10] = [
        (RolloutState::Running, Run, &[Updating, Pending], (0, 0), None),
        (RolloutState::Running, Pause, &[Updating, Pending], (0, 0), None),
        (RolloutState::Paused, Pause, &[Phase::Done, Pending], (0, 0), Some(EXIT_PAUSED)),
        (RolloutState::Paused, Run, &[Phase::Done, Pending], (1, 0), None),
        (RolloutState::Paused, Abort, &[Failed, Pending], (0, 0), None),
        // Failed, and resumed: paused again once the engine took the resume up, still waiting before.
        (RolloutState::Paused, Run, &[Failed, Pending], (1, 1), Some(EXIT_PAUSED)),
        (RolloutState::Paused, Run, &[Failed, Pending], (2, 1), None),
        (RolloutState::Done, Run, &[Phase::Done], (0, 0), Some(EXIT_DONE)),
        (RolloutState::Aborted, Abort, &[Phase::Done, Pending], (0, 0), Some(EXIT_ABORTED)),
        (RolloutState::RolledBack, Run, &[Failed, Pending], (0, 0), Some(EXIT_ROLLED_BACK)),
    ];
    for (state, action, phases, resumed, want) in table {
        assert_eq!(
            wait_outcome(&shown(state, action, phases, resumed)),
            want,
            "{state} {action:?} {phases:?} {resumed:?}"
        );
    }
}

/// Issue 36: a rollout with a key that does not decode is shown with the error, and ends a wait at once with exit 1
/// (no engine drives it: waiting would wait forever).
#[test]
fn an_unreadable_rollout_shows_its_error_and_ends_a_wait_with_1() {
    let rollout = Rollout {
        id: "db-1".into(),
        kind: RolloutKind::Restart,
        state: RolloutState::Running,
        error: "/p/rollouts/db-1/progress: cannot decode rollout progress: invalid type (value \"nope\")".into(),
        ..Rollout::default()
    };
    assert_eq!(
        render_status(&rollout, &[], false, false),
        "Rollout db-1 restart running\n\
         Cannot read this rollout (no engine drives it): /p/rollouts/db-1/progress: cannot decode rollout progress: \
         invalid type (value \"nope\")\n"
    );
    assert_eq!(wait_outcome(&rollout), Some(EXIT_ERROR));
    assert_eq!(snapshot_exit_code(&rollout), EXIT_ERROR);
    assert_eq!(snapshot_exit_code(&Rollout { error: String::new(), ..rollout }), EXIT_DONE, "running, readable");
}

#[test]
fn exit_codes_say_how_a_rollout_ended() {
    assert_eq!(exit_code(RolloutState::Running), None);
    assert_eq!(exit_code(RolloutState::Done), Some(0));
    assert_eq!(exit_code(RolloutState::Paused), Some(2));
    assert_eq!(exit_code(RolloutState::RolledBack), Some(3));
    assert_eq!(exit_code(RolloutState::Aborted), Some(4));
}

#[test]
fn utc_formats_unix_milliseconds() {
    assert_eq!(utc(0), "-");
    assert_eq!(utc(1), "1970-01-01 00:00:00");
    assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
    assert_eq!(utc(1_796_090_342_609), "2026-12-01 01:59:02", "as `date -u -d @1796090342` prints it");
}

#[test]
fn history_lists_versions_and_rollback_returns_to_the_previous_one_through_a_rollout() {
    let (_dir, c, f) = db_cluster_and_local(GLOBAL_V2);
    assert_eq!(run(&c, &["start", "--replace", "--rolling", "--min-healthy=0", &f]).code, 0);
    let (v1, v2) =
        (UnitFile::parse(GLOBAL).unwrap().hash().to_hex(), UnitFile::parse(GLOBAL_V2).unwrap().hash().to_hex());
    let o = run(&c, &["history", "--no-legend", "--full", "db.service"]);
    assert_eq!(o.code, 0, "{}", o.err);
    let rows: Vec<Vec<&str>> = o.out.lines().map(|l| l.split('\t').filter(|c| !c.is_empty()).collect()).collect();
    assert_eq!((rows.len(), rows[0][0], rows[1][0]), (2, v2.as_str(), v1.as_str()), "{}", o.out);
    assert_eq!(rows[0].last(), Some(&"*"), "the current version is marked: {}", o.out);
    assert!(run(&c, &["history", "db.service"]).out.starts_with("HASH\tSTORED"), "legend");

    // Back to v1 through a replace rollout of every machine at once.
    let o = run(&c, &["rollback", "db.service"]);
    assert_eq!(o.code, 0, "{}{}", o.out, o.err);
    assert!(o.out.contains("started: replace db.service"), "{}", o.out);
    assert_eq!(c.unit_text("db.service").as_deref(), Some(UnitFile::parse(GLOBAL).unwrap().canonical().as_str()));
    let rollouts = c.stored_rollouts();
    let last = rollouts.iter().max_by_key(|r| r.spec.created_ms).unwrap();
    assert_eq!((last.spec.units[0].from.as_str(), last.spec.units[0].to.as_str()), (v2.as_str(), v1.as_str()));
    assert!(last.spec.budget(3) >= 3 && last.spec.min_healthy_ms == 0, "all at once: {:?}", last.spec);

    // --to picks a version by prefix; the current one, unknown and ambiguous prefixes are refused.
    let o = run(&c, &["rollback", "--to", &v1[..7], "db.service"]);
    assert!(o.err.contains(&format!("{} is the current version", &v1[..7])), "{}", o.err);
    let o = run(&c, &["rollback", "--to=ffffffff", "db.service"]);
    assert!(o.err.contains("no version of the unit's history starts with \"ffffffff\""), "{}", o.err);
    let o = run(&c, &["rollback", "--to", &v2[..7], "--rolling", "--max-unavailable=2", "db.service"]);
    assert_eq!(o.code, 0, "{}", o.err);
    let rollouts = c.stored_rollouts();
    let last = rollouts.iter().max_by_key(|r| r.spec.created_ms).unwrap();
    assert_eq!((last.spec.units[0].to.as_str(), last.spec.max_unavailable), (v2.as_str(), 2));
    assert_eq!(run(&c, &["rollback", "--min-healthy=1s", "db.service"]).code, 1, "pace needs --rolling");
    assert!(
        run(&c, &["rollback", "nope.service"])
            .err
            .contains("Error rolling back unit nope.service: the unit does not exist")
    );
}

#[test]
fn rollback_of_a_unit_that_is_not_launched_stores_the_earlier_version_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster();
    c.insert_unit("t.service", TEMPLATE, "loaded");
    let f = write(dir.path(), "t.service", TEMPLATE_V2);
    assert_eq!(run(&c, &["load", "--replace", "--keep-machine", &f]).code, 0);
    let o = run(&c, &["rollback", "t.service"]);
    assert_eq!(
        (o.code, o.out.trim()),
        (0, &*format!("Unit t.service rolled back to {}", &UnitFile::parse(TEMPLATE).unwrap().hash().to_hex()[..7])),
        "{}",
        o.err
    );
    assert_eq!(c.unit_text("t.service").as_deref(), Some(UnitFile::parse(TEMPLATE).unwrap().canonical().as_str()));
    assert_eq!(c.desired("t.service").as_deref(), Some("loaded"));
    assert!(c.stored_rollouts().is_empty());
}

// Issue 34: the unit's update policy, the all-at-once hint, canaries and skip-failed through fleetctl.

const POLICY: &str = "[Service]\nExecStart=/bin/sleep 1000\n\n[X-Fleet]\nGlobal=true\nUpdatePolicy=rolling\n\
                      UpdateMaxUnavailable=2\nUpdateMinHealthy=0\nUpdateOnFailure=rollback\n";
const POLICY_V2: &str = "[Service]\nExecStart=/bin/sleep 2000\n\n[X-Fleet]\nGlobal=true\nUpdatePolicy=rolling\n\
                         UpdateMaxUnavailable=2\nUpdateMinHealthy=0\nUpdateOnFailure=rollback\n";

/// The newest stored rollout's spec.
fn newest_spec(c: &FakeClient) -> fleet_core::rollout::RolloutSpec {
    c.stored_rollouts().into_iter().max_by_key(|r| r.spec.created_ms).expect("a rollout was stored").spec
}

#[test]
fn a_plain_start_replace_of_a_unit_with_a_policy_rolls_with_the_new_versions_pace() {
    let (_dir, c, f) = db_cluster_and_local(POLICY);
    let o = run(&c, &["start", "--replace", &f]);
    started_ok(&o, "replace db.service");
    let spec = newest_spec(&c);
    assert_eq!(
        (spec.max_unavailable, spec.min_healthy_ms, spec.on_failure, spec.policy.as_str()),
        (2, 0, OnFailure::Rollback, "unit"),
        "the new version's policy"
    );
    assert_eq!(c.unit_text("db.service").as_deref(), Some(UnitFile::parse(POLICY).unwrap().canonical().as_str()));
    assert!(o.err.is_empty(), "no hint with a policy: {}", o.err);
    // Flags override the policy.
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "db.service", POLICY_V2);
    let o = run(&c, &["start", "--replace", "--rolling", "--max-unavailable=1", "--min-healthy=1s", &f]);
    assert_eq!(o.code, EXIT_DONE, "{}\n{}", o.out, o.err);
    let spec = newest_spec(&c);
    assert_eq!((spec.max_unavailable, spec.min_healthy_ms, spec.on_failure), (1, 1000, OnFailure::Rollback));
}

#[test]
fn a_plain_restart_of_a_unit_with_a_policy_is_a_rolling_restart() {
    let c = cluster();
    c.insert_unit("db.service", POLICY, "launched");
    let o = run(&c, &["restart", "db"]);
    started_ok(&o, "restart db.service");
    let spec = newest_spec(&c);
    assert_eq!((spec.kind, spec.max_unavailable, spec.policy.as_str()), (RolloutKind::Restart, 2, "unit"));
}

#[test]
fn a_plain_replace_or_restart_of_a_global_unit_without_a_policy_hints_at_rolling_on_stderr_only() {
    let (_dir, c, f) = db_cluster_and_local(GLOBAL_V2);
    let o = run(&c, &["start", "--replace", "--no-block", &f]);
    assert!(
        o.err.starts_with("hint: this replace of global unit db.service changes every machine at once"),
        "{}",
        o.err
    );
    assert!(o.err.contains("fleetctl start --replace --rolling goes machine by machine"), "{}", o.err);
    assert!(!o.out.contains("hint"), "stdout stays the original's: {}", o.out);
    assert!(c.stored_rollouts().is_empty(), "no rollout without a policy or --rolling");
    let o = run(&c, &["restart", "db"]);
    assert!(o.err.starts_with("hint: this restart of global unit db.service"), "{}", o.err);
}

#[test]
fn a_canary_rollout_waits_for_its_promotion_and_resume_can_skip_a_failed_machine() {
    let (_dir, c, f) = db_cluster_and_local(GLOBAL_V2);
    let o = run(&c, &["start", "--replace", "--rolling", "--min-healthy=0", "--canary=1", &f]);
    assert_eq!(o.code, EXIT_PAUSED, "{}\n{}", o.out, o.err);
    let id = started_id(&o.out);
    let last = shown(&o.out).pop().unwrap();
    assert!(last.header.contains("awaiting promotion: 1 canary machine(s)"), "{}", last.header);
    assert_eq!(last.phases(), ["done", "pending", "pending"]);
    assert!(o.err.starts_with(&format!("Rollout {id} awaits promotion (")), "{}", o.err);
    assert!(
        o.err.ends_with(&format!(
            "promote it with fleetctl rollout-promote {id}, or abort it with fleetctl rollout-abort {id}\n"
        )),
        "{}",
        o.err
    );
    let o = run(&c, &["rollout-promote", "db"]);
    assert_eq!((o.code, o.out.as_str()), (EXIT_DONE, format!("Rollout {id} promoted\n").as_str()), "{}", o.err);
    let o = run(&c, &["rollout-status", &id]);
    assert_eq!(o.code, EXIT_DONE, "{}\n{}", o.out, o.err);
    let o = run(&c, &["rollout-promote", &id]);
    assert_eq!(o.code, EXIT_ERROR, "a finished rollout: {}", o.err);

    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "db.service", GLOBAL);
    c.set_unhealthy(GLOBAL);
    let o = run(&c, &["start", "--replace", "--rolling", "--max-unavailable=2", &f]);
    assert_eq!(o.code, EXIT_PAUSED, "{}\n{}", o.out, o.err);
    let o = run(&c, &["rollout-resume", "--skip-failed", "db"]);
    assert_eq!(o.code, EXIT_DONE, "{}", o.err);
    let stored = c.stored_rollouts().into_iter().max_by_key(|r| r.spec.created_ms).unwrap();
    assert!(stored.control.skip_failed && stored.control.resumes == 1, "{:?}", stored.control);
}

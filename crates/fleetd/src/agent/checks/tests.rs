//! The check runner with real processes (`/bin/sh`), no systemd.

use std::time::{Duration, Instant};

use super::*;

fn check(command: &str, timeout: Duration) -> HealthCheck {
    HealthCheck { command: command.to_string(), interval: Duration::from_secs(5), timeout }
}

async fn run(command: &str, timeout: Duration) -> CheckRun {
    run_check(&check(command, timeout), "web.service", "m1").await
}

#[tokio::test]
async fn exit_0_passes_with_its_last_line() {
    let got = run("echo starting; echo '  all good  '; echo", Duration::from_secs(5)).await;
    assert_eq!(got, CheckRun { passed: true, output: "all good".into() });
}

#[tokio::test]
async fn a_non_zero_exit_fails_with_stderr_in_the_output() {
    let got = run("echo fine; echo 'connection refused' >&2; exit 1", Duration::from_secs(5)).await;
    assert_eq!(got, CheckRun { passed: false, output: "connection refused".into() });
    let silent = run("exit 3", Duration::from_secs(5)).await;
    assert!(!silent.passed);
    assert!(silent.output.contains("exit status: 3"), "says how it exited: {:?}", silent.output);
}

#[tokio::test]
async fn a_check_running_at_its_timeout_is_killed_with_its_group_and_fails() {
    let marker = tempfile::tempdir().unwrap();
    let pid_file = marker.path().join("pid");
    // A grandchild in the background (same group) must go too.
    let command = format!("sleep 10 & echo $! > {}; sleep 10", pid_file.display());
    let started = Instant::now();
    let got = run(&command, Duration::from_millis(200)).await;
    let took = started.elapsed();
    assert!(!got.passed, "{got:?}");
    assert_eq!(got.output, "timed out after 200ms");
    assert!(took < Duration::from_secs(2), "the check was not cut at its timeout: took {took:?}");
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    // Killed with SIGKILL; give the kernel a moment to reap it (its parent, the shell, is gone: init reaps).
    let mut alive = true;
    for _ in 0..50 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for its reaper.
        alive = !stat.is_empty() && !stat.contains(") Z ");
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive, "the check's background process {pid} outlived the timeout");
}

#[tokio::test]
async fn the_environment_names_the_unit_and_machine_and_stdin_is_empty() {
    let got =
        run("read line; echo \"$FLEET_UNIT on $FLEET_MACHINE_ID read=${line:-nothing}\"", Duration::from_secs(5)).await;
    assert_eq!(got.output, "web.service on m1 read=nothing");
}

#[tokio::test]
async fn an_exit_0_that_leaves_a_process_holding_the_output_ends_without_waiting_for_it() {
    let started = Instant::now();
    let got = run("sleep 10 & echo up", Duration::from_secs(5)).await;
    assert_eq!(got, CheckRun { passed: true, output: "up".into() });
    assert!(started.elapsed() < Duration::from_secs(2), "waited for the background process: {:?}", started.elapsed());
}

#[test]
fn output_is_the_last_non_empty_line_trimmed_and_clipped() {
    assert_eq!(last_line(b"a\n  b  \n\n \n"), "b");
    assert_eq!(last_line(b""), "");
    assert_eq!(last_line("x".repeat(300).as_bytes()).chars().count(), OUTPUT_LIMIT);
    let mut tail = Vec::new();
    keep_tail(&mut tail, &vec![b'a'; TAIL_BYTES]);
    keep_tail(&mut tail, b"\nlast");
    assert_eq!(tail.len(), TAIL_BYTES);
    assert_eq!(last_line(&tail), "last");
}

#[tokio::test]
async fn reported_starts_of_units_without_a_check_cost_no_wait() {
    let starts = AgentStarts::default();
    let started = Instant::now();
    starts.started(&["plain.service".to_string()], Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_millis(100));
    // Every start is told to the publish side (its outcome goes in the awaited lane), checked or not.
    tokio::time::timeout(Duration::from_secs(1), starts.reported()).await.expect("the start of a plain unit is told");
    assert_eq!(starts.take_started().into_iter().collect::<Vec<_>>(), ["plain.service"]);
    assert!(starts.take_started().is_empty(), "taken once");
    starts.set_checked(["web.service".to_string()].into());
    let web = ["web.service".to_string()];
    let waiting = starts.started(&web, Duration::from_secs(5));
    let publish = async {
        starts.reported().await;
        let (units, seq) = starts.take();
        assert_eq!(units, ["web.service"]);
        starts.mark_published(seq);
    };
    tokio::time::timeout(Duration::from_secs(2), async { tokio::join!(waiting, publish) })
        .await
        .expect("the start is released once its health is published");
    assert_eq!(starts.take_started().into_iter().collect::<Vec<_>>(), ["web.service"]);
}

mod rounds {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::*;
    use crate::agent::fake::Fake;
    use fleet_core::model::{HealthStatus, PublishedState};
    use fleet_core::unit::UnitHash;
    use fleet_registry::{Change, Keys, Snapshot};

    const CHECKED: &str =
        "[Service]\nExecStart=/bin/sleep 100\n\n[X-Fleet]\nHealthCheck=echo fine\nHealthCheckInterval=100ms\n";
    const PLAIN: &str = "[Service]\nExecStart=/bin/sleep 100\n";

    fn hash(text: &str) -> String {
        UnitHash::of(text).to_hex()
    }

    /// A snapshot holding these bodies.
    fn bodies(texts: &[&str]) -> Snapshot {
        with_states(texts, &[])
    }

    /// A snapshot holding these bodies and these states of machine m1 ((unit, record JSON)).
    fn with_states(texts: &[&str], states: &[(&str, String)]) -> Snapshot {
        let keys = Keys::new("/p");
        let mut kvs: Vec<(String, String)> = texts.iter().map(|t| (keys.body(&hash(t)), t.to_string())).collect();
        kvs.extend(states.iter().map(|(unit, record)| (keys.state(unit, "m1"), record.clone())));
        let changes =
            kvs.iter().map(|(k, v)| (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 2, lease: 0 }));
        Snapshot::from_kvs(&keys, 2, changes)
    }

    fn state(name: &str, text: &str, active: &str) -> PublishedState {
        PublishedState {
            name: name.into(),
            machine_id: "m1".into(),
            hash: hash(text),
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: "running".into(),
            restarts: Some(0),
            health: None,
            launched: None,
        }
    }

    fn all(states: &[PublishedState]) -> StatesNow {
        StatesNow::All(states.iter().map(|s| (s.name.clone(), s.clone())).collect())
    }

    fn health_of(now: &StatesNow, unit: &str) -> Option<HealthStatus> {
        let StatesNow::All(states) = now else { panic!("{now:?}") };
        let state =
            states.get(unit).unwrap_or_else(|| panic!("no state of {unit} this round (held back?): {states:?}"));
        state.health.as_ref().map(|h| h.status)
    }

    #[tokio::test]
    async fn a_checked_active_unit_is_checked_and_a_plain_one_costs_nothing() {
        let snapshot = bodies(&[CHECKED, PLAIN]);
        let dir = tempfile::tempdir().unwrap();
        let mut checks = HealthChecks::new(Arc::new(Fake::default()), "m1", dir.path().to_path_buf());
        let states = [state("checked.service", CHECKED, "active"), state("plain.service", PLAIN, "active")];
        let mut now = all(&states);
        checks.round(&mut now, &Readings::new(), &snapshot);
        assert_eq!(health_of(&now, "checked.service"), Some(HealthStatus::Unknown), "unknown until the first check");
        assert_eq!(health_of(&now, "plain.service"), None, "no check, no health key");
        assert_eq!(checks.tasks.keys().collect::<Vec<_>>(), ["checked.service"], "one task, for the checked unit");
        let done = tokio::time::timeout(Duration::from_secs(5), checks.next_done())
            .await
            .expect("no check of the unit finished within 5 s (is a check task running?)")
            .expect("the results channel is open");
        assert_eq!(checks.take_done(done), Some("checked.service".to_string()), "its status changed");
        let mut now = all(&states);
        checks.round(&mut now, &Readings::new(), &snapshot);
        assert_eq!(health_of(&now, "checked.service"), Some(HealthStatus::Healthy));
        let StatesNow::All(published) = &now else { unreachable!() };
        assert_eq!(published["checked.service"].health.as_ref().unwrap().output, "fine");
        // The next runs pass too: no change, nothing to publish.
        let again = tokio::time::timeout(Duration::from_secs(5), checks.next_done())
            .await
            .expect("no check of the unit finished within 5 s (is a check task running?)")
            .expect("the results channel is open");
        assert_eq!(checks.take_done(again), None, "a steady status is no change");
        // The unit stops: unknown, and its task ends.
        let mut now = all(&[state("checked.service", CHECKED, "inactive")]);
        checks.round(&mut now, &Readings::new(), &snapshot);
        assert_eq!(health_of(&now, "checked.service"), Some(HealthStatus::Unknown));
        assert!(checks.tasks.is_empty());
        // Unloaded: forgotten.
        checks.loaded_changed(&BTreeMap::new());
        assert_eq!(checks.tracker.health("checked.service"), None);
    }

    /// After a fleetd restart (its units adopted) the registry still shows the unit healthy: its state is held back until this
    /// process's first check is judged, instead of a blip to `unknown`.
    #[tokio::test]
    async fn a_unit_the_last_process_published_healthy_is_held_until_its_first_check() {
        let stored = format!(
            r#"{{"hash":"{}","loadState":"loaded","activeState":"active","subState":"running","health":{{"status":"healthy","sinceMs":1}}}}"#,
            hash(CHECKED)
        );
        let snapshot = with_states(&[CHECKED], &[("checked.service", stored)]);
        let dir = tempfile::tempdir().unwrap();
        let mut checks = HealthChecks::new(Arc::new(Fake::default()), "m1", dir.path().to_path_buf());
        let states = [state("checked.service", CHECKED, "active")];
        let mut now = all(&states);
        checks.round(&mut now, &Readings::new(), &snapshot);
        let StatesNow::All(published) = &now else { unreachable!() };
        assert!(published.is_empty(), "held back until the first check: {published:?}");
        let done = tokio::time::timeout(Duration::from_secs(5), checks.next_done())
            .await
            .expect("no check of the unit finished within 5 s (is a check task running?)")
            .expect("the results channel is open");
        assert_eq!(checks.take_done(done), Some("checked.service".to_string()), "released by its first verdict");
        let mut now = all(&states);
        checks.round(&mut now, &Readings::new(), &snapshot);
        assert_eq!(health_of(&now, "checked.service"), Some(HealthStatus::Healthy));
        let StatesNow::All(published) = &now else { unreachable!() };
        let health = published["checked.service"].health.as_ref().unwrap();
        assert_eq!((health.since_ms, health.output.as_str()), (1, ""), "still healthy since the last process said so");
        // Held again (a fresh process), then restarted by the agent before its first check: the hold ends and the
        // next round publishes unknown (before the agent writes its markers).
        let mut again = HealthChecks::new(Arc::new(Fake::default()), "m1", dir.path().to_path_buf());
        let mut now = all(&states);
        again.round(&mut now, &Readings::new(), &snapshot);
        assert!(matches!(&now, StatesNow::All(s) if s.is_empty()), "held: {now:?}");
        again.starts.lock().pending.insert("checked.service".into(), 1);
        let loaded: BTreeMap<String, String> = [("checked.service".to_string(), hash(CHECKED))].into();
        assert_eq!(again.take_starts(&snapshot, &loaded), ["checked.service"]);
        let mut now = all(&states);
        again.round(&mut now, &Readings::new(), &snapshot);
        assert_eq!(health_of(&now, "checked.service"), Some(HealthStatus::Unknown), "published at once, unknown");
        // A unit first seen after the first round starts at unknown, whatever the registry says.
        let mut later = HealthChecks::new(Arc::new(Fake::default()), "m1", dir.path().to_path_buf());
        later.round(&mut all(&[]), &Readings::new(), &snapshot);
        let mut now = all(&states);
        later.round(&mut now, &Readings::new(), &snapshot);
        assert_eq!(health_of(&now, "checked.service"), Some(HealthStatus::Unknown));
    }

    /// A unit whose version's text is not readable here yet (not in the snapshot, no such file) is published
    /// `unknown`: no health at all would tell rollouts that this fleetd runs no checks, and they would count the
    /// machine as serving on systemd's word alone (seen in a nemesis replay: a machine back on a checked version).
    /// Once the text arrives it is checked, or published without health if the version has no check.
    #[tokio::test]
    async fn a_unit_whose_version_is_not_readable_yet_is_unknown_until_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let mut checks = HealthChecks::new(Arc::new(Fake::default()), "m1", dir.path().to_path_buf());
        checks.round(&mut all(&[]), &Readings::new(), &bodies(&[]));
        let states = [state("checked.service", CHECKED, "active"), state("plain.service", PLAIN, "active")];
        let mut now = all(&states);
        checks.round(&mut now, &Readings::new(), &bodies(&[]));
        assert_eq!(health_of(&now, "checked.service"), Some(HealthStatus::Unknown), "not readable: unknown");
        assert_eq!(health_of(&now, "plain.service"), Some(HealthStatus::Unknown), "not readable: unknown");
        assert_eq!(checks.undecided(), ["checked.service", "plain.service"], "both to be decided again");
        assert!(checks.tasks.is_empty(), "nothing to run yet");
        let StatesNow::All(first) = &now else { unreachable!() };
        let since = first["checked.service"].health.as_ref().unwrap().since_ms;
        // Still not readable: the same state, so nothing new to write.
        std::thread::sleep(Duration::from_millis(5));
        let mut now = all(&states);
        checks.round(&mut now, &Readings::new(), &bodies(&[]));
        let StatesNow::All(again) = &now else { unreachable!() };
        assert_eq!(again["checked.service"].health.as_ref().unwrap().since_ms, since, "unchanged while undecided");
        // The bodies arrive.
        let mut now = all(&states);
        checks.round(&mut now, &Readings::new(), &bodies(&[CHECKED, PLAIN]));
        assert_eq!(health_of(&now, "checked.service"), Some(HealthStatus::Unknown), "checked from now on");
        assert_eq!(health_of(&now, "plain.service"), None, "no check: no health key");
        assert!(checks.undecided().is_empty());
        assert_eq!(checks.tasks.keys().collect::<Vec<_>>(), ["checked.service"]);
    }
}

//! The README's "Updating a service without downtime", run as written (issue 34): the unit it shows must be
//! `fixtures/units/safe-db.service` (comments aside), and every command of its `sh` blocks runs, in order, in one
//! shell working directory on a 3-machine cluster — `fleetctl` on `PATH` with `FLEETCTL_ENDPOINT` set, the
//! repository's `fixtures/` reachable as `./fixtures` — and must exit with the status its trailing comment names
//! (`# exit N`; 0 without one). At the end every machine must serve the version the section ends on (v3: the
//! failing v4 was aborted, then rolled back), having run every version the section rolled through. So the README
//! cannot drift from what fleet does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet_harness::{Cluster, Output};

const SECTION: &str = "## Updating a service without downtime";
const FIXTURE: &str = "safe-db.service";
/// How long one README command may take (a rolling replace of the fixture on 3 machines takes ~25 s).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(150);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// The README's section, up to the next `## ` heading.
fn section(readme: &str) -> &str {
    let start = readme.find(SECTION).unwrap_or_else(|| panic!("README.md has no section {SECTION:?}"));
    let rest = &readme[start + SECTION.len()..];
    let end = rest.find("\n## ").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

/// The bodies of the fenced blocks of `lang` in `text`, in order.
fn blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&fence) {
        let body = &rest[i + fence.len()..];
        let end = body.find("```").expect("unterminated fenced block");
        out.push(&body[..end]);
        rest = &body[end + 3..];
    }
    out
}

/// A command line of a `sh` block and the exit status its trailing `# exit N` comment names (0 without one).
#[derive(Debug, PartialEq, Eq)]
struct Command {
    line: String,
    status: i32,
}

fn commands(sh: &str) -> Vec<Command> {
    sh.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let status = l
                .rsplit_once("# exit ")
                .and_then(|(_, n)| n.split_whitespace().next()?.trim_end_matches([':', ',']).parse().ok())
                .unwrap_or(0);
            Command { line: l.to_string(), status }
        })
        .collect()
}

/// The unit text without comment lines.
fn without_comments(text: &str) -> String {
    text.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect::<String>().trim().to_string()
}

#[test]
fn the_section_is_parsed_as_expected() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let s = section(&readme);
    assert!(!s.contains("\n## "), "the section runs into the next one");
    let cmds: Vec<Command> = blocks(s, "sh").into_iter().flat_map(commands).collect();
    assert!(cmds.len() >= 10, "{cmds:?}");
    assert!(cmds.iter().any(|c| c.status == 2) && cmds.iter().any(|c| c.status == 3), "{cmds:?}");
    let fixture = std::fs::read_to_string(repo().join("fixtures/units").join(FIXTURE)).unwrap();
    assert_eq!(blocks(s, "ini").first().map(|b| b.trim()), Some(without_comments(&fixture).as_str()));
    assert_eq!(
        commands("a  # exit 4\n# c\nb # x\n"),
        [Command { line: "a  # exit 4".into(), status: 4 }, Command { line: "b # x".into(), status: 0 }]
    );
}

/// What each machine runs: `Description`, `ActiveState`, whether the unit's readiness marker exists.
async fn machines(cluster: &Cluster) -> Vec<(usize, String, String, bool)> {
    let mut out = Vec::new();
    for m in cluster.machines() {
        let p = m.systemctl_show(FIXTURE, &["Description", "ActiveState"]).await.unwrap_or_default();
        let ready = m.exec(&["test", "-e", "/run/safe-db.ready"]).await.is_ok_and(|o| o.success());
        let get = |k: &str| p.get(k).cloned().unwrap_or_default();
        out.push((m.slot(), get("Description"), get("ActiveState"), ready));
    }
    out
}

async fn run(dir: &Path, env: &[(String, String)], line: &str) -> Output {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(line).current_dir(dir).envs(env.iter().cloned()).kill_on_drop(true);
    cmd.stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(COMMAND_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("README command `{line}` did not finish within {COMMAND_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("README command `{line}`: {e}"));
    Output {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        status: out.status.code().unwrap_or(-1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_rollout_commands_run_as_written() {
    let repo = repo();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let s = section(&readme);

    // The unit the README shows is the fixture.
    let fixture = std::fs::read_to_string(repo.join("fixtures/units").join(FIXTURE)).unwrap();
    let shown = blocks(s, "ini");
    assert_eq!(shown.len(), 1, "the section must show the unit once in an ini block");
    assert_eq!(
        shown[0].trim(),
        without_comments(&fixture),
        "the unit in README.md's {SECTION:?} must be fixtures/units/{FIXTURE} without its comments"
    );
    let cmds: Vec<Command> = blocks(s, "sh").into_iter().flat_map(commands).collect();

    let cluster = Cluster::builder().machines(3).agent_ttl("3s").start().await.unwrap();
    cluster.wait_for_n_machines(1, 3).await.unwrap();

    // A working directory with ./fixtures, and a bin directory with `fleetctl` first on PATH.
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo.join("fixtures"), work.path().join("fixtures")).unwrap();
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&cluster.binaries().fleetctl, bin.path().join("fleetctl")).unwrap();
    let mut env = cluster.fleetctl_env();
    env.push(("FLEETCTL_ENDPOINT".into(), cluster.machine(1).unwrap().endpoint()));
    env.push(("PATH".into(), format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default())));

    let mut transcript = String::new();
    for c in &cmds {
        let out = run(work.path(), &env, &c.line).await;
        transcript.push_str(&format!("$ {}\n{}{}[exit {}]\n", c.line, out.stdout, out.stderr, out.status));
        if out.status != c.status {
            panic!(
                "README command `{}` exited {} (the README says {}); machines: {:?}\ntranscript:\n{transcript}",
                c.line,
                out.status,
                c.status,
                machines(&cluster).await
            );
        }
    }
    eprintln!("transcript:\n{transcript}");

    // Where the section ends: v3 everywhere, active and ready, after passing through v2 and v3 (and v4 tried).
    let seen = machines(&cluster).await;
    for (slot, description, active, ready) in &seen {
        assert!(
            description == "safe-db v3" && active == "active" && *ready,
            "m{slot} must serve v3 at the end of the README's commands; machines: {seen:?}\ntranscript:\n{transcript}"
        );
    }
    for m in cluster.machines() {
        let log = m.exec(&["cat", "/run/safe-db.log"]).await.unwrap().stdout;
        for v in ["v1", "v2", "v3"] {
            assert!(
                log.contains(&format!("ready {v} ")),
                "m{} never served {v} during the README's commands; its hook log:\n{log}",
                m.slot()
            );
        }
    }
    let cat = cluster.fleetctl(1, &["cat", FIXTURE]).await.unwrap();
    assert!(cat.stdout.contains("Description=safe-db v3"), "fleetctl cat at the end: {}", cat.describe());
}

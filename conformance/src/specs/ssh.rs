//! The commands that reach machines over SSH (spec §9.7–§9.9; capability `ssh`): `ssh` by machine ID and by unit
//! name with the remote exit status, `status` and `journal` from the unit's machine (every machine of a global
//! unit, or the one chosen with `--machine`), `--tunnel` through one machine, and host-key checking against a
//! known-hosts file.
//!
//! fleetctl runs on the host with the cluster's ssh-agent (`SSH_AUTH_SOCK`); the harness authorises its key in every
//! machine. Except where a spec is about host keys, fleetctl runs with `--strict-host-key-checking=false`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use fleet_harness::Output;
use fleet_harness::wait::{self, Check};

use super::short;
use crate::check::Context;
use crate::fixtures;
use crate::{Ctx, Outcome};

const NO_CHECK: &str = "--strict-host-key-checking=false";
const STRICT: &str = "--strict-host-key-checking=true";

/// The hostname (`m<slot>`) of the machine with ID `id`.
fn hostname(ctx: &Ctx, id: &str) -> Result<String, String> {
    let slot = ctx.slot_of(id).ok_or_else(|| format!("no machine of this cluster has ID {id}"))?;
    Ok(ctx.machine(slot)?.name().to_string())
}

/// A fresh known-hosts file in a temporary directory (not created until fleetctl records a host).
struct KnownHostsFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl KnownHostsFile {
    fn new() -> Result<Self, String> {
        let dir = tempfile::Builder::new().prefix("fleet-conformance-").tempdir().ctx("tempdir")?;
        let path = dir.path().join("known_hosts");
        Ok(KnownHostsFile { _dir: dir, path })
    }

    /// `--known-hosts-file=<path>`.
    fn flag(&self) -> String {
        format!("--known-hosts-file={}", self.path.display())
    }

    /// The file's text; empty when it does not exist.
    fn read(&self) -> Result<String, String> {
        match std::fs::read_to_string(&self.path) {
            Ok(t) => Ok(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(format!("reading {}: {e}", self.path.display())),
        }
    }

    /// The lines recording `host` (first field).
    fn entries_for(&self, host: &str) -> Result<Vec<String>, String> {
        Ok(self.read()?.lines().filter(|l| l.split_whitespace().next() == Some(host)).map(str::to_string).collect())
    }
}

/// The prompt for an unknown host at the start of `stderr` (spec §9.9): the key's algorithm and MD5 fingerprint, and
/// what follows the question.
fn parse_prompt<'a>(stderr: &'a str, host: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let rest = stderr.strip_prefix(&format!("The authenticity of host '{host}' can't be established.\n"))?;
    let (line, rest) = rest.split_once('\n')?;
    let (algo, fingerprint) = line.split_once(" key fingerprint is ")?;
    let fingerprint = fingerprint.strip_suffix('.')?;
    let rest = rest.strip_prefix("Are you sure you want to continue connecting (yes/no)? ")?;
    is_md5(fingerprint).then_some((algo, fingerprint, rest))
}

/// Colon-separated hex of 16 bytes.
fn is_md5(fp: &str) -> bool {
    let parts: Vec<&str> = fp.split(':').collect();
    parts.len() == 16 && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `TestKnownHostsVerification`: with strict checking and a fresh known-hosts file, an unknown host is prompted for;
/// any answer but yes fails and records nothing; yes records it and later connections are silent; the same address
/// with another host key (the machine replaced, keeping its address) is refused with the OpenSSH-style warning, even
/// when yes is on stdin; once the old entry is gone, the new key is prompted for again.
pub async fn known_hosts(mut ctx: Ctx) -> Outcome {
    let kh = KnownHostsFile::new()?;
    let flag = kh.flag();
    let m1 = ctx.id(1)?;
    let ip = ctx.machine(1)?.ip().to_string();
    let refused =
        "Host key verification failed.\nFailed building SSH client: ssh: handshake failed: unauthorized host\n";

    // Unknown host: "no" and no answer at all (end of input) are refusals; nothing is recorded.
    for input in ["no\n", ""] {
        let out = ctx.fleetctl_with_input(2, input, &[STRICT, &flag, "ssh", &m1, "hostname"]).await?;
        let rest = parse_prompt(&out.stderr, &ip).map(|(_, _, rest)| rest);
        ctx.ensure(out.status == 1 && out.stdout.is_empty() && rest == Some(refused), || {
            format!(
                "answering {input:?} to the prompt for {ip}: expected exit 1, the prompt (`The authenticity of host \
                 '{ip}' can't be established.` / `<ALGO> key fingerprint is <md5>.` / `Are you sure ...? `) and then \
                 {refused:?}"
            )
        })?;
        let recorded = kh.read()?;
        ctx.ensure(recorded.is_empty(), || format!("answering {input:?} recorded: {recorded:?}"))?;
    }

    // "yes": the command runs on m1, the host is recorded under its address.
    let out = ctx.fleetctl_with_input(2, "yes\n", &[STRICT, &flag, "ssh", &m1, "hostname"]).await?;
    let prompt = parse_prompt(&out.stderr, &ip);
    let (algo, first_fp) = prompt.map(|(a, f, _)| (a.to_string(), f.to_string())).unwrap_or_default();
    let added = format!("Warning: Permanently added '{ip}' ({algo}) to the list of known hosts.\n");
    ctx.ensure(out.success() && out.stdout == "m1\n" && prompt.is_some_and(|(_, _, rest)| rest == added), || {
        format!("answering yes: expected exit 0, stdout `m1`, the prompt and then {added:?}")
    })?;
    let recorded = kh.entries_for(&ip)?;
    ctx.ensure(recorded.len() == 1 && recorded[0].split_whitespace().count() >= 3, || {
        format!("expected one `{ip} <key type> <key>` line in the known-hosts file, observed {:?}", kh.read())
    })?;
    let file = kh.read()?;
    // Known now: no prompt, no warning, whatever is on stdin.
    let out = ctx.fleetctl(2, &[STRICT, &flag, "ssh", &m1, "hostname"]).await?;
    ctx.ensure((out.status, out.stdout.as_str(), out.stderr.as_str()) == (0, "m1\n", ""), || {
        "a known host: expected exit 0, stdout `m1` and nothing on stderr".into()
    })?;

    // The same address, a new machine with a new host key.
    let old_id = m1;
    ctx.cluster_mut().replace_machine(1).await.ctx("replacing m1")?;
    let m1 = ctx.id(1)?;
    ctx.ensure(ctx.machine(1)?.ip() == ip, || format!("the replaced m1 did not keep address {ip}"))?;
    let args = ["list-machines", "--no-legend", "--full", "--fields", "machine"];
    let (new, old) = (m1.as_str(), old_id.as_str());
    ctx.wait_fleetctl(2, &args, "the replaced m1 to be listed (and the old one gone)", |out| {
        let listed: Vec<&str> = out.lines().map(str::trim).collect();
        if listed.contains(&new) && !listed.contains(&old) { Ok(()) } else { Err(format!("listed {listed:?}")) }
    })
    .await?;
    let out = ctx.fleetctl_with_input(2, "yes\n", &[STRICT, &flag, "ssh", &m1, "hostname"]).await?;
    let head = "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
                @    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n";
    let add_correct = format!("Add correct host key in {} to get rid of this message.\n", kh.path.display());
    let tail = "Host key verification failed.\nFailed building SSH client: ssh: handshake failed: host key mismatch\n";
    // The warning names the new key's fingerprint: it must differ from the recorded one.
    let new_fp = out
        .stderr
        .lines()
        .skip_while(|l| !l.starts_with("The fingerprint for the "))
        .nth(1)
        .and_then(|l| l.strip_suffix('.'))
        .unwrap_or_default()
        .to_string();
    ctx.ensure(
        out.status == 1
            && out.stdout.is_empty()
            && out.stderr.starts_with(head)
            && out.stderr.contains(&add_correct)
            && out.stderr.ends_with(tail)
            && is_md5(&new_fp)
            && new_fp != first_fp,
        || {
            format!(
                "a changed host key at {ip}: expected exit 1 and the REMOTE HOST IDENTIFICATION HAS CHANGED warning \
                 (new fingerprint, different from {first_fp}; {add_correct:?}), ending {tail:?}"
            )
        },
    )?;
    let now = kh.read()?;
    ctx.ensure(now == file, || format!("a refused key changed the known-hosts file: {file:?} became {now:?}"))?;

    // Forget the old key: prompted again, accepted.
    std::fs::write(&kh.path, "").ctx("emptying the known-hosts file")?;
    let out = ctx.fleetctl_with_input(2, "yes\n", &[STRICT, &flag, "ssh", &m1, "hostname"]).await?;
    ctx.ensure(out.success() && out.stdout == "m1\n" && out.stderr.ends_with(&added), || {
        format!("after forgetting the old key: expected exit 0, stdout `m1`, stderr ending {added:?}")
    })?;
    let recorded = kh.entries_for(&ip)?;
    ctx.ensure(recorded.len() == 1, || format!("expected the new key recorded once, observed {:?}", kh.read()))
}

/// `TestTunnelScheduleBatchUnits`: everything through `--tunnel <m1>` with strict host-key checking (the tunnel host
/// is prompted for once): start one unit, then 24 template instances in one command — more than sshd's MaxSessions
/// (10), so the client must keep its session channels below it — and see all 25 active in `list-units` through the
/// tunnel.
pub async fn tunnel_batch(ctx: Ctx) -> Outcome {
    const INSTANCES: usize = 24;
    let kh = KnownHostsFile::new()?;
    let ip = ctx.machine(1)?.ip().to_string();
    let tunnel = format!("--tunnel={ip}");
    let flag = kh.flag();
    let through = |more: &[&str]| -> Vec<String> {
        [tunnel.as_str(), STRICT, flag.as_str()].iter().chain(more).map(|s| s.to_string()).collect()
    };
    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    let hello = fixtures::path("hello.service");
    let args = through(&["start", &hello]);
    let out = ctx.fleetctl_with_input(1, "yes\n", &strs(&args)).await?;
    let added = format!("Warning: Permanently added '{ip}' (");
    ctx.ensure(out.success() && !out.stderr.contains("Error") && out.stderr.contains(&added), || {
        format!("start through the tunnel (answering yes): expected exit 0, no `Error`, and {added:?}... on stderr")
    })?;

    let names: Vec<String> = (1..=INSTANCES).map(|i| format!("hello@{i}.service")).collect();
    let paths: Vec<String> = names.iter().map(|n| fixtures::path(n)).collect();
    let mut more = vec!["start"];
    more.extend(paths.iter().map(String::as_str));
    let args = through(&more);
    let out = ctx.fleetctl(1, &strs(&args)).await?;
    ctx.ensure(out.success() && !out.stderr.contains("Error") && !out.stderr.contains("authenticity"), || {
        format!(
            "start of {INSTANCES} instances through the tunnel (host known): expected exit 0, no prompt, no `Error`"
        )
    })?;

    let mut want: BTreeSet<String> = names.into_iter().collect();
    want.insert("hello.service".into());
    let args = through(&["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"]);
    let want = &want;
    let what = format!("{} units active in list-units through the tunnel", want.len());
    ctx.wait_fleetctl(1, &strs(&args), &what, |out| {
        let states = wait::parse_unit_states(out);
        let active: BTreeSet<String> = wait::filter_active(&states).iter().map(|s| s.name.clone()).collect();
        if &active == want && states.values().all(|rows| rows.len() == 1) {
            Ok(())
        } else {
            let missing: Vec<&String> = want.difference(&active).collect();
            Err(format!("{} active; not active: {missing:?}", active.len()))
        }
    })
    .await
}

/// Runs `fleetctl ssh ...` (no host-key checking) via machine 1.
async fn ssh(ctx: &Ctx, args: &[&str]) -> Result<Output, String> {
    let mut all = vec![NO_CHECK, "ssh"];
    all.extend(args);
    ctx.fleetctl(1, &all).await
}

/// Requires `(exit, stdout)` of the last fleetctl run.
fn expect_run(ctx: &Ctx, out: &Output, status: i32, stdout: &str, what: &str) -> Outcome {
    ctx.ensure(out.status == status && out.stdout == stdout, || {
        format!("{what}: expected exit {status} and stdout {stdout:?}")
    })
}

/// Waits until `journal --lines=<n> <unit>` (default output) shows `n` lines, each from `host` and ending `ends`.
async fn wait_journal_lines(ctx: &Ctx, unit: &str, n: usize, host: &str, ends: &str) -> Result<String, String> {
    let lines = format!("--lines={n}");
    let args = [NO_CHECK, "journal", lines.as_str(), unit];
    let from = format!(" {host} ");
    let what = format!("`journal {lines} {unit}` to show {n} lines from {host} ending {ends:?}");
    ctx.wait_fleetctl(1, &args, &what, |out| {
        let ls: Vec<&str> = out.lines().collect();
        if ls.len() == n && ls.iter().all(|l| l.contains(&from) && l.ends_with(ends)) {
            Ok(out.to_string())
        } else {
            Err(format!("{} lines", ls.len()))
        }
    })
    .await
}

/// `TestUnitSSHActions`: `ssh <machine ID or prefix>` and `ssh <unit>` run the command on that machine and return
/// its exit status (stdout and stderr passed through); an unknown name fails; `journal <unit>` shows the unit's
/// output from its machine.
pub async fn ssh_actions(ctx: Ctx) -> Outcome {
    let unit = "hello.service";
    ctx.fleetctl_ok(1, &["start", &fixtures::path(unit)]).await?;
    let placed = ctx.wait_for_n_active_units(1, 1).await?;
    let home = placed.get(unit).cloned().ok_or_else(|| format!("{unit} not active: {placed:?}"))?;
    let host = hostname(&ctx, &home)?;
    for m in ctx.cluster().machines() {
        let (id, name) = (m.id().to_string(), m.name().to_string());
        let out = ssh(&ctx, &[&id, "hostname"]).await?;
        expect_run(&ctx, &out, 0, &format!("{name}\n"), &format!("`ssh <ID of {name}> hostname`"))?;
        let out = ssh(&ctx, &[&id[..10], "hostname"]).await?;
        expect_run(&ctx, &out, 0, &format!("{name}\n"), &format!("`ssh <10-character ID prefix of {name}> hostname`"))?;
    }
    let out = ssh(&ctx, &[unit, "echo", "foo"]).await?;
    expect_run(&ctx, &out, 0, "foo\n", "`ssh hello.service echo foo`")?;
    let out = ssh(&ctx, &[unit, "hostname"]).await?;
    expect_run(&ctx, &out, 0, &format!("{host}\n"), &format!("`ssh hello.service hostname` (the unit is on {host})"))?;
    let out = ssh(&ctx, &["--unit=hello.service", "hostname"]).await?;
    expect_run(&ctx, &out, 0, &format!("{host}\n"), "`ssh --unit=hello.service hostname`")?;

    // The remote exit status is fleetctl's; stdout and stderr stay apart.
    let other = ctx.cluster().machines().iter().find(|m| m.id() != home).map(|m| m.id().to_string());
    let other = other.ok_or("a second machine")?;
    let out = ssh(&ctx, &[&other, "--", "sh", "-c", "'echo out; echo err >&2; exit 7'"]).await?;
    ctx.ensure((out.status, out.stdout.as_str(), out.stderr.as_str()) == (7, "out\n", "err\n"), || {
        "`ssh <ID> -- sh -c 'echo out; echo err >&2; exit 7'`: expected exit 7, stdout `out`, stderr `err`".into()
    })?;
    let out = ssh(&ctx, &[unit, "false"]).await?;
    ctx.ensure(out.status == 1, || "`ssh hello.service false`: expected exit 1".into())?;

    let out = ssh(&ctx, &["nothing-like-this", "true"]).await?;
    let want = "Unable to proceed: could not find matching unit or machine\n";
    ctx.ensure((out.status, out.stderr.as_str()) == (1, want), || {
        format!("`ssh nothing-like-this`: expected exit 1 and {want:?} on stderr")
    })?;

    // journal: the unit's lines, from its machine.
    wait_journal_lines(&ctx, unit, 3, &host, "Hello, World!").await?;
    let out = ctx.fleetctl(1, &[NO_CHECK, "journal", "--sudo", "--lines=2", "--output=cat", unit]).await?;
    expect_run(&ctx, &out, 0, "Hello, World!\nHello, World!\n", "`journal --sudo --lines=2 --output=cat hello.service`")
}

/// `TestUnitStatus`: `status <unit>` prints `systemctl status` from the unit's machine — its main process and its
/// log lines with that machine's hostname; a loaded unit shows `Loaded: loaded` with systemctl's exit status (3,
/// inactive); fleetctl inside the unit's machine shows the same without SSH; a unit that does not exist fails.
pub async fn status(ctx: Ctx) -> Outcome {
    let unit = "hello.service";
    ctx.fleetctl_ok(1, &["start", &fixtures::path(unit)]).await?;
    let placed = ctx.wait_for_n_active_units(1, 1).await?;
    let home = placed.get(unit).cloned().ok_or_else(|| format!("{unit} not active: {placed:?}"))?;
    let slot = ctx.slot_of(&home).ok_or("unknown machine")?;
    let host = hostname(&ctx, &home)?;
    ctx.wait_systemd(slot, unit, "SubState", "running").await?;
    let pid = ctx.show(slot, unit, &["MainPID"]).await?.get("MainPID").cloned().unwrap_or_default();

    let main = format!("Main PID: {pid} (bash)");
    let process = format!("{pid} /bin/bash -c \"while true; do echo Hello, World!; sleep 1; done\"");
    let logged = format!(" {host} bash[{pid}]: Hello, World!");
    let (main, process, logged) = (&main, &process, &logged);
    let what = format!("`status {unit}` to show its process {pid} and its log lines from {host}");
    let out = ctx
        .wait_fleetctl(1, &[NO_CHECK, "status", unit], &what, |out| {
            let missing: Vec<&str> =
                ["● hello.service", "Loaded: loaded (", "Active: active (running)", main, process, logged]
                    .into_iter()
                    .filter(|s| !out.contains(s))
                    .collect();
            if missing.is_empty() { Ok(out.to_string()) } else { Err(format!("lacks {missing:?}")) }
        })
        .await?;
    ctx.ensure(out.starts_with("● hello.service"), || "status output starts with `● hello.service`".into())?;

    // Inside the unit's machine fleetctl runs systemctl itself (default endpoint: the machine's fleet socket).
    let local = ctx.exec(slot, &["fleetctl", "status", unit]).await?;
    ctx.ensure(local.success() && local.stdout.contains(main), || {
        format!("`fleetctl status {unit}` inside {host}: expected exit 0 and {main:?}; {}", local.describe())
    })?;

    // A loaded unit: systemd's view says loaded; the exit status is systemctl's (3: inactive).
    let idle = "goodbye.service";
    ctx.fleetctl_ok(1, &["load", &fixtures::path(idle)]).await?;
    let args = [NO_CHECK, "status", idle];
    let (ctx, args) = (&ctx, &args);
    ctx.wait_for(&format!("`status {idle}` of a loaded unit to exit 3 with Loaded: loaded"), || async move {
        match ctx.fleetctl(1, args).await {
            Ok(out)
                if out.status == 3
                    && out.stdout.contains("Loaded: loaded")
                    && out.stdout.contains("Active: inactive (dead)") =>
            {
                Check::Ready(())
            }
            Ok(out) => Check::NotYet(out.describe()),
            Err(e) => Check::NotYet(e),
        }
    })
    .await?;

    let out = ctx.fleetctl(1, &[NO_CHECK, "status", "nope.service"]).await?;
    let want = "Unit nope.service does not exist.\n";
    ctx.ensure((out.status, out.stderr.as_str()) == (1, want), || {
        format!("`status nope.service`: expected exit 1 and {want:?} on stderr")
    })
}

/// The sections of `systemctl status` output of several machines: each starts with `● <unit>`.
fn sections<'a>(out: &'a str, unit: &str) -> Vec<&'a str> {
    let head = format!("● {unit}");
    let mut starts: Vec<usize> = out.match_indices(&head).map(|(i, _)| i).collect();
    starts.push(out.len());
    starts.windows(2).map(|w| &out[w[0]..w[1]]).collect()
}

/// The hostnames (`m<n>`) whose `bash[...]` log lines appear in `text`.
fn hosts_in(text: &str, hosts: &BTreeSet<String>) -> BTreeSet<String> {
    hosts.iter().filter(|h| text.contains(&format!(" {h} bash["))).cloned().collect()
}

/// The `status` step of `TestScheduleGlobalUnits`: with `hello`, `goodbye` and the global unit running, `status` of
/// the global unit shows systemd's view from every machine (one section each, with that machine's log lines), or
/// from the machine chosen with `--machine`; `journal` likewise.
pub async fn global_status(ctx: Ctx) -> Outcome {
    const GLOBAL: &str = "global.service";
    ctx.fleetctl_ok(1, &["start", &fixtures::path("hello.service"), &fixtures::path("goodbye.service")]).await?;
    ctx.wait_for_n_active_units(1, 2).await?;
    ctx.fleetctl_ok(1, &["start", &fixtures::path(GLOBAL)]).await?;
    let ids: BTreeMap<String, String> =
        ctx.cluster().machines().iter().map(|m| (m.id().into(), m.name().into())).collect();
    let hosts: BTreeSet<String> = ids.values().cloned().collect();
    let (ids, hosts) = (&ids, &hosts);
    let args = ["list-units", "--no-legend", "--full", "--fields", "unit,active,machine"];
    ctx.wait_fleetctl(1, &args, "5 active rows, global.service on all 3 machines", |out| {
        let states = wait::parse_unit_states(out);
        let active = wait::filter_active(&states);
        let on: BTreeSet<&String> = active.iter().filter(|s| s.name == GLOBAL).map(|s| &s.machine).collect();
        if active.len() == 5 && on == ids.keys().collect() {
            Ok(())
        } else {
            Err(format!("{} active; global on {:?}", active.len(), on.iter().map(|m| short(m)).collect::<Vec<_>>()))
        }
    })
    .await?;

    // Every machine: one section each, each with its own machine's log lines.
    let what = "`status global.service` to show one section per machine, each with its own log lines";
    ctx.wait_fleetctl(1, &[NO_CHECK, "status", GLOBAL], what, |out| {
        let secs = sections(out, GLOBAL);
        let per: Vec<BTreeSet<String>> = secs.iter().map(|s| hosts_in(s, hosts)).collect();
        let covered: BTreeSet<String> = per.iter().flatten().cloned().collect();
        if secs.len() == 3 && per.iter().all(|h| h.len() == 1) && &covered == hosts {
            Ok(())
        } else {
            Err(format!("{} sections, hosts per section {per:?}", secs.len()))
        }
    })
    .await?;

    // One machine chosen by an ID prefix.
    let (pick_id, pick) = ids.iter().nth(1).map(|(i, h)| (i.clone(), h.clone())).ok_or("3 machines")?;
    let m = format!("--machine={}", short(&pick_id));
    let out = ctx.fleetctl_ok(1, &[NO_CHECK, "status", &m, GLOBAL]).await?;
    let secs = sections(&out.stdout, GLOBAL);
    let only: BTreeSet<String> = [pick.clone()].into();
    ctx.ensure(secs.len() == 1 && hosts_in(&out.stdout, hosts) == only, || {
        format!("`status {m} global.service`: expected one section, with log lines from {pick} only")
    })?;
    let from = format!(" {pick} bash[");
    let from = &from;
    let what = format!("`journal {m} --lines=2 global.service` to show 2 log lines of the unit from {pick}");
    ctx.wait_fleetctl(1, &[NO_CHECK, "journal", &m, "--lines=2", GLOBAL], &what, |out| {
        let lines: Vec<&str> = out.lines().collect();
        if lines.len() == 2 && lines.iter().all(|l| l.contains(from) && l.ends_with("Hello, global World!")) {
            Ok(())
        } else {
            Err(format!("{} lines", lines.len()))
        }
    })
    .await?;

    // journal of every machine: one line each (the unit's own output: every machine has logged it by now).
    let what = "`journal --lines=1 global.service` to show one log line of the unit from each machine";
    ctx.wait_fleetctl(1, &[NO_CHECK, "journal", "--lines=1", GLOBAL], what, |out| {
        let lines: Vec<&str> = out.lines().collect();
        let from: BTreeSet<String> = lines.iter().flat_map(|l| hosts_in(l, hosts)).collect();
        if lines.len() == 3 && &from == hosts { Ok(()) } else { Err(format!("{} lines from {from:?}", lines.len())) }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_is_parsed_with_algorithm_and_md5_fingerprint() {
        let fp = "0b:7c:aa:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d";
        let err = format!(
            "The authenticity of host '10.0.0.2' can't be established.\nssh-ed25519 key fingerprint is {fp}.\n\
             Are you sure you want to continue connecting (yes/no)? Host key verification failed.\n"
        );
        assert_eq!(parse_prompt(&err, "10.0.0.2"), Some(("ssh-ed25519", fp, "Host key verification failed.\n")));
        assert_eq!(parse_prompt(&err, "10.0.0.3"), None);
        assert_eq!(parse_prompt(&err.replace(fp, "SHA256:abc"), "10.0.0.2"), None);
    }

    #[test]
    fn status_sections_split_at_each_unit_header() {
        let out = "● g.service\n  Loaded: loaded\nx m1 bash[1]: hi\n\n● g.service\ny m2 bash[2]: hi\n";
        let s = sections(out, "g.service");
        assert_eq!(s.len(), 2);
        let hosts: BTreeSet<String> = ["m1", "m2", "m3"].map(String::from).into();
        assert_eq!(hosts_in(s[1], &hosts), ["m2".to_string()].into());
    }
}

//! fleetctl's command tests: whole invocations, parsed and dispatched as the binary runs them ([`super::run`]),
//! against the fake client, one file per command family, and the harness they share (this file). They sit above
//! the commands and the dispatch rather than in each command's file, because the harness calls the dispatch, which
//! calls every command: a command's own test module importing it would make the command import itself round that
//! loop. Tests of a command's parts, which need no whole invocation, stay in its file.
//!
//! Code map: `general` (usage, help, version, unknown commands and flags, client initialisation, the etcd version
//! check), `list`, `units`, `remote` (ssh, status, journal), `rollout`, `json` (`--output=json`), `complete`
//! (`completion` and `__complete`), `progress` (the progress line on a terminal).

mod audit;
mod complete;
mod cordon;
mod general;
mod json;
mod list;
mod progress;
mod remote;
mod rollout;
mod units;

use std::sync::Arc;

use super::Env;
use super::context::Timing;
use super::remote::Remote;
use super::remote::fake::FakeRemote;
use crate::client::fake::FakeClient;
use crate::client::{BuildError, Client, ClientConfig};

/// What an invocation did: its exit code and what it wrote on stdout and stderr.
pub struct Outcome {
    pub code: i32,
    pub out: String,
    pub err: String,
}

/// Run `args` against `fake` with instant polling and the given environment.
pub fn run_with(fake: &Arc<FakeClient>, args: &[&str], vars: &[(&str, &str)]) -> Outcome {
    run_full(fake, &FakeRemote::default(), args, vars)
}

/// Run `args` against `fake`, reaching machines through `remote`.
pub fn run_remote(fake: &Arc<FakeClient>, remote: &dyn Remote, args: &[&str]) -> Outcome {
    run_full(fake, remote, args, &[])
}

fn run_full(fake: &Arc<FakeClient>, remote: &dyn Remote, args: &[&str], vars: &[(&str, &str)]) -> Outcome {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let mut out = Vec::new();
    let mut err = Vec::new();
    let err_is_terminal = vars.iter().any(|(k, _)| *k == "TEST_STDERR_IS_TERMINAL");
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let getenv = move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let f = fake.clone();
    let connect = move |cfg: &ClientConfig| -> Result<Box<dyn Client>, BuildError> {
        cfg.driver()?;
        Ok(Box::new(f.clone()))
    };
    let mut env = Env {
        out: &mut out,
        err: &mut err,
        getenv: &getenv,
        connect: &connect,
        timing: Timing::instant(),
        init_logging: false,
        remote,
        err_is_terminal,
    };
    let code = super::run(&args, &mut env);
    Outcome { code, out: String::from_utf8_lossy(&out).into_owned(), err: String::from_utf8_lossy(&err).into_owned() }
}

/// Run `args` against `fake` with instant polling.
pub fn run(fake: &Arc<FakeClient>, args: &[&str]) -> Outcome {
    run_with(fake, args, &[])
}

/// A three-machine cluster like the reference transcripts'.
pub fn cluster() -> Arc<FakeClient> {
    Arc::new(FakeClient::with_machines(&[
        ("8363165e6276f500b71169eca9b3f76b", "172.17.0.2"),
        ("8606e1a2949979fb223fb4bad77d152c", "172.17.0.3"),
        ("d91d98fca203da3cb89fb5c100ed0823", "172.17.0.4"),
    ]))
}

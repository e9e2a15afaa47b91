//! Small commands: `version`, `help`, the deprecated `verify`, and the SSH-based commands (`ssh`, `status`,
//! `journal`, `fd-forward`) that are parsed like the original's but not implemented yet.

use std::io::Write;

use super::commands;
use super::flags::lookup_command;
use super::help;
use crate::version::VERSION;

pub fn version(out: &mut dyn Write) -> i32 {
    let _ = writeln!(out, "fleetctl version {VERSION}");
    0
}

/// `fleetctl help [command]`.
pub fn help(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let Some(topic) = args.first() else {
        let _ = out.write_all(help::global_help().as_bytes());
        return 0;
    };
    match lookup_command(topic).or_else(|| commands::command(topic)) {
        Some(c) if c.name != "help" => {
            let _ = out.write_all(help::command_help(c).as_bytes());
            0
        }
        Some(_) => {
            let _ = out.write_all(help::global_help().as_bytes());
            0
        }
        None => {
            let _ = writeln!(err, "Unknown help topic `{topic}`");
            1
        }
    }
}

/// The signed-units feature is gone; the original exits 2.
pub fn verify(err: &mut dyn Write) -> i32 {
    let _ = writeln!(err, "WARNING: The signed/verified units feature is DEPRECATED and cannot be used.");
    2
}

pub fn not_implemented(name: &str, err: &mut dyn Write) -> i32 {
    let _ = writeln!(
        err,
        "fleetctl {name}: not implemented yet (the SSH-based commands ssh, status, journal and fd-forward come in a later release)"
    );
    1
}

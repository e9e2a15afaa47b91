//! Small commands: `version`, `help` and the deprecated `verify`.

use std::io::Write;

use super::commands;
use super::flags::lookup_command;
use super::help;
use fleet_core::version::VERSION;

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

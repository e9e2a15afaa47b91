//! The fleetctl command line itself.

use crate::check::ensure_eq;
use crate::fixtures;
use crate::{Ctx, Outcome};

/// `fleetctl version` and `--version` print `fleetctl version <VERSION>` (one line, a non-empty version).
pub async fn version(ctx: Ctx) -> Outcome {
    let out = ctx.fleetctl_bare(&["version"]).await?;
    ctx.ensure(out.success(), || "`fleetctl version` exits 0".into())?;
    let line = out.stdout.trim();
    let v = line.strip_prefix("fleetctl version ").unwrap_or_default();
    ctx.ensure(!v.is_empty() && !v.contains(char::is_whitespace) && line.lines().count() == 1, || {
        format!("expected `fleetctl version <VERSION>`, observed {line:?}")
    })?;
    let flag = ctx.fleetctl_bare(&["--version"]).await?;
    ctx.ensure(flag.success(), || "`fleetctl --version` exits 0".into())?;
    ensure_eq("`fleetctl --version` output", line, flag.stdout.trim())
}

/// `fleetctl help` exits 0 and shows the version `fleetctl version` reports.
pub async fn help_version(ctx: Ctx) -> Outcome {
    let v = ctx.fleetctl_bare(&["version"]).await?;
    let version = v.stdout.trim().strip_prefix("fleetctl version ").unwrap_or_default().to_string();
    let help = ctx.fleetctl_bare(&["help"]).await?;
    ctx.ensure(help.success(), || "`fleetctl help` exits 0".into())?;
    ctx.ensure(!version.is_empty() && help.stdout.contains(&version), || {
        format!("expected the help to contain the version {version:?}")
    })
}

/// `--help`, `-h`, `help` and no arguments all exit 0; `--help` prints something.
pub async fn help_flags(ctx: Ctx) -> Outcome {
    for args in [&["--help"][..], &["-h"], &["help"], &[]] {
        let out = ctx.fleetctl_bare(args).await?;
        ctx.ensure(out.success(), || format!("`fleetctl {}` exits 0", args.join(" ")))?;
        if args == ["--help"] {
            ctx.ensure(!out.stdout.trim().is_empty(), || "`fleetctl --help` prints the help on stdout".into())?;
        }
    }
    Ok(())
}

/// `FLEETCTL_ENDPOINT` works like `--endpoint`.
pub async fn endpoint_env(ctx: Ctx) -> Outcome {
    let ids = ctx.wait_for_n_machines(1, 1).await?;
    let out = ctx.fleetctl_with_env(1, &["list-machines", "--no-legend", "--full", "--fields", "machine"]).await?;
    ctx.ensure(out.success(), || "list-machines with FLEETCTL_ENDPOINT exits 0".into())?;
    ensure_eq("machines listed via FLEETCTL_ENDPOINT", ids, fleet_harness::wait::parse_machines(&out.stdout))
}

/// Units submitted one per command in any order are listed sorted by name.
pub async fn list_unit_files_order(ctx: Ctx) -> Outcome {
    let mut names: Vec<String> = (1..=20).map(|i| format!("hello@{i:02}.service")).collect();
    // Submit in an order that is neither sorted nor reverse-sorted.
    let order: Vec<&String> = names.iter().step_by(2).chain(names.iter().skip(1).step_by(2).rev()).collect();
    for name in order {
        ctx.fleetctl_ok(1, &["submit", &fixtures::path(name)]).await?;
    }
    ctx.wait_for_n_unit_files(1, 20).await?;
    let out = ctx.fleetctl(1, &["list-unit-files", "--no-legend", "--fields", "unit"]).await?;
    ctx.ensure(out.success(), || "list-unit-files exits 0".into())?;
    names.sort();
    let listed: Vec<String> = out.stdout.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect();
    ensure_eq("list-unit-files order", names, listed)
}

//! submit / load / start / stop / unload / destroy / restart / cat, and agreement with systemd in the machines.

use fleet_harness::Check;

use crate::check::{Context, ensure_eq};
use crate::fixtures::{self, TempDir};
use crate::{Ctx, Outcome};

/// The commands of `unitStartCommon` / `replaceUnitCommon`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    Submit,
    Load,
    Start,
}

impl Cmd {
    fn verb(self) -> &'static str {
        match self {
            Cmd::Submit => "submit",
            Cmd::Load => "load",
            Cmd::Start => "start",
        }
    }

    /// The command that undoes it.
    fn undo(self) -> &'static str {
        match self {
            Cmd::Submit => "destroy",
            Cmd::Load => "unload",
            Cmd::Start => "stop",
        }
    }
}

fn instances(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("hello@{i}.service")).collect()
}

/// Waits until the command's effect is visible for exactly `n` units: unit files (submit), listed units (load),
/// active units (start).
async fn wait_n(ctx: &Ctx, cmd: Cmd, n: usize) -> Outcome {
    match cmd {
        Cmd::Submit => ctx.wait_for_n_unit_files(1, n).await.map(drop),
        Cmd::Load => ctx.wait_for_n_units(1, n).await.map(drop),
        Cmd::Start => ctx.wait_for_n_active_units(1, n).await.map(drop),
    }
}

/// `start hello.service`: exactly one active unit, hello.service.
pub async fn runnable(ctx: Ctx) -> Outcome {
    ctx.fleetctl_ok(1, &["start", &fixtures::path("hello.service")]).await?;
    let active = ctx.wait_for_n_active_units(1, 1).await?;
    ensure_eq("active units", vec!["hello.service"], active.keys().map(String::as_str).collect())
}

/// `unitStartCommon`: the command on N template instances at once, checked, undone one by one, checked, twice.
pub async fn batch(ctx: Ctx, cmd: Cmd, n: usize) -> Outcome {
    let names = instances(n);
    let paths: Vec<String> = names.iter().map(|u| fixtures::path(u)).collect();
    for round in 1..=2 {
        let mut args = vec![cmd.verb()];
        args.extend(paths.iter().map(String::as_str));
        ctx.fleetctl_ok(1, &args).await.map_err(|e| format!("round {round}: {e}"))?;
        wait_n(&ctx, cmd, n).await?;
        if cmd == Cmd::Submit {
            let files = ctx.list_unit_files(1).await?;
            ensure_eq("submitted units", names.clone(), files.keys().cloned().collect())?;
        }
        for u in &names {
            ctx.fleetctl_ok(1, &[cmd.undo(), u]).await?;
        }
        wait_n(&ctx, cmd, 0).await.map_err(|e| format!("round {round}, after {}: {e}", cmd.undo()))?;
    }
    Ok(())
}

/// `restart` starts stopped (loaded) units and restarts running ones.
pub async fn restart(ctx: Ctx) -> Outcome {
    let names = instances(3);
    let mut start = vec!["start"];
    let paths: Vec<String> = names.iter().map(|u| fixtures::path(u)).collect();
    start.extend(paths.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &start).await?;
    ctx.wait_for_n_active_units(1, 3).await?;
    for round in 1..=2 {
        let mut restart = vec!["restart"];
        restart.extend(names.iter().map(String::as_str));
        ctx.fleetctl_ok(1, &restart).await.map_err(|e| format!("restart round {round}: {e}"))?;
        ctx.wait_for_n_active_units(1, 3).await?;
        let mut stop = vec!["stop"];
        stop.extend(names.iter().map(String::as_str));
        ctx.fleetctl_ok(1, &stop).await?;
        ctx.wait_for_n_active_units(1, 0).await?;
    }
    Ok(())
}

/// `cat` prints the submitted (canonical) unit text.
pub async fn cat(ctx: Ctx) -> Outcome {
    ctx.fleetctl_ok(1, &["submit", &fixtures::path("hello.service")]).await?;
    ctx.wait_for_n_unit_files(1, 1).await?;
    let out = ctx.fleetctl_ok(1, &["cat", "hello.service"]).await?;
    ensure_eq("cat output", fixtures::read("hello.service")?.trim(), out.stdout.trim())
}

/// `replaceUnitCommon` (spec §10.7): `<cmd> --replace` changes the unit in the state `<cmd>` leaves it in.
pub async fn replace(ctx: Ctx, cmd: Cmd, n: usize) -> Outcome {
    let names = instances(n);
    let paths: Vec<String> = names.iter().map(|u| fixtures::path(u)).collect();
    let mut args = vec![cmd.verb()];
    args.extend(paths.iter().map(String::as_str));
    ctx.fleetctl_ok(1, &args).await?;
    wait_n(&ctx, cmd, n).await?;
    let changed = fixtures::read("hello.service")?.replace("sleep 1", "sleep 2");
    let tmp = TempDir::new()?;
    for u in &names {
        let before = ctx.fleetctl_ok(1, &["cat", u]).await?.stdout;
        let path = tmp.write(u, &changed)?;
        ctx.fleetctl_ok(1, &[cmd.verb(), "--replace", &path]).await?;
        wait_n(&ctx, cmd, n).await?;
        let after = ctx.fleetctl_ok(1, &["cat", u]).await?.stdout;
        ctx.ensure(after != before, || format!("`{} --replace` left {u} unchanged:\n{after}", cmd.verb()))?;
        ctx.ensure(after.contains("sleep 2"), || format!("{u} after replace: {after}"))?;
    }
    for u in &names {
        ctx.fleetctl_ok(1, &[cmd.undo(), u]).await?;
    }
    wait_n(&ctx, cmd, 0).await
}

/// The machine slot a unit is listed on by `list-units`.
async fn slot_of_unit(ctx: &Ctx, unit: &str) -> Result<usize, String> {
    let what = format!("{unit} to be listed on a machine");
    let id = ctx
        .wait_for(&what, || async move {
            match ctx.list_units(1).await {
                Ok(states) => match states.get(unit).and_then(|r| r.first()) {
                    Some(s) if !s.machine.is_empty() && s.machine != "-" => Check::Ready(s.machine.clone()),
                    _ => Check::NotYet(format!("{states:?}")),
                },
                Err(e) => Check::NotYet(e),
            }
        })
        .await?;
    ctx.slot_of(&id).ok_or_else(|| ctx.fail(format!("{unit} listed on unknown machine {id}")))
}

/// A unit with `[Install] WantedBy=hello.service` and `MachineOf=hello.service` is enabled by fleet: systemd starts
/// it with hello.service and stops it with it (BindsTo).
pub async fn install(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    ctx.fleetctl_ok(1, &["load", &fixtures::path("hello.service"), &fixtures::path("discovery.service")]).await?;
    ctx.wait_for_n_units(1, 2).await?;
    let slot = slot_of_unit(&ctx, "discovery.service").await?;
    ensure_eq("hello.service's machine (MachineOf)", slot, slot_of_unit(&ctx, "hello.service").await?)?;
    ctx.wait_systemd(slot, "discovery.service", "ActiveState", "inactive").await?;
    ctx.fleetctl_ok(1, &["start", "hello.service"]).await?;
    ctx.wait_systemd(slot, "discovery.service", "ActiveState", "active").await?;
    ctx.fleetctl_ok(1, &["stop", "hello.service"]).await?;
    ctx.wait_systemd(slot, "discovery.service", "ActiveState", "inactive").await
}

/// Waits until `list-unit-files` shows hello.service with `dstate` and `state`, or (with `None`) not at all.
async fn wait_file(ctx: &Ctx, expect: Option<(&str, &str)>) -> Outcome {
    let what = format!("list-unit-files to show hello.service as {expect:?}");
    ctx.wait_for(&what, || async move {
        match ctx.list_unit_files(1).await {
            Ok(files) => {
                let row = files.get("hello.service").and_then(|r| r.first());
                let seen = row.map(|r| (r.desired_state.as_str(), r.state.as_str()));
                if seen == expect { Check::Ready(()) } else { Check::NotYet(format!("{seen:?}")) }
            }
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

/// Waits until `list-units` shows hello.service with the active state, or (with `None`) not at all.
async fn wait_listed(ctx: &Ctx, active: Option<&str>) -> Outcome {
    let what = format!("list-units to show hello.service as {active:?}");
    ctx.wait_for(&what, || async move {
        match ctx.list_units(1).await {
            Ok(units) => {
                let seen = units.get("hello.service").and_then(|r| r.first()).map(|r| r.active_state.as_str());
                if seen == active { Check::Ready(()) } else { Check::NotYet(format!("{seen:?}")) }
            }
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

/// The unit files in the agent's units directory (`/run/fleet/units/`, spec §7.4) of machine `slot`, sorted.
async fn units_dir(ctx: &Ctx, slot: usize) -> Result<Vec<String>, String> {
    let mut files = ctx.exec_own_lines(slot, &["sh", "-c", "ls -A /run/fleet/units 2>/dev/null || true"]).await?;
    files.sort();
    Ok(files)
}

/// Waits until the units directory of `slot` holds exactly `files`.
async fn wait_units_dir(ctx: &Ctx, slot: usize, files: &[&str]) -> Outcome {
    let what = format!("/run/fleet/units in m{slot} to hold exactly {files:?}");
    ctx.wait_for(&what, || async move {
        match units_dir(ctx, slot).await {
            Ok(seen) if seen == files => Check::Ready(()),
            Ok(seen) => Check::NotYet(format!("{seen:?}")),
            Err(e) => Check::NotYet(e),
        }
    })
    .await
}

/// Requires `systemctl show` of hello.service in `slot` to be `(LoadState, ActiveState, SubState)` now.
async fn expect_states(ctx: &Ctx, slot: usize, want: (&str, &str, &str), when: &str) -> Outcome {
    let p = ctx.show(slot, "hello.service", &["LoadState", "ActiveState", "SubState"]).await?;
    let get = |k: &str| p.get(k).cloned().unwrap_or_default();
    let seen = (get("LoadState"), get("ActiveState"), get("SubState"));
    ensure_eq(
        &format!("(LoadState, ActiveState, SubState) of hello.service in m{slot} {when}"),
        (want.0.to_string(), want.1.to_string(), want.2.to_string()),
        seen,
    )
}

/// submit → load → start → stop → unload → destroy, with `list-unit-files`, `list-units` and systemd in the
/// machine agreeing at each step. This is also `TestSystemdUnitFlow` rewritten black-box: instead of driving the
/// systemd manager directly, the agent's units directory and `systemctl show` in the machine are observed — empty
/// before load, exactly the unit (with the registry's content) once loaded, `loaded/inactive/dead`, then
/// `loaded/active/running`, then `loaded/inactive/dead` again, and nothing left after unload.
pub async fn lifecycle(ctx: Ctx) -> Outcome {
    ctx.wait_for_n_machines(1, 2).await?;
    let unit = "hello.service";
    let out = ctx.fleetctl_ok(1, &["submit", &fixtures::path(unit)]).await?;
    ctx.ensure(out.stdout.contains("Unit hello.service inactive"), || {
        "submit reports `Unit hello.service inactive`".into()
    })?;
    wait_file(&ctx, Some(("inactive", "inactive"))).await?;
    wait_listed(&ctx, None).await?;
    for slot in [1, 2] {
        let p = ctx.show(slot, unit, &["LoadState"]).await?;
        ensure_eq(
            &format!("LoadState in m{slot} after submit"),
            Some("not-found"),
            p.get("LoadState").map(String::as_str),
        )?;
        ensure_eq(
            &format!("/run/fleet/units in m{slot} after submit"),
            Vec::<String>::new(),
            units_dir(&ctx, slot).await?,
        )?;
    }

    let out = ctx.fleetctl_ok(1, &["load", unit]).await?;
    ctx.ensure(out.stdout.contains("Unit hello.service loaded"), || "load reports `Unit hello.service loaded`".into())?;
    wait_file(&ctx, Some(("loaded", "loaded"))).await?;
    wait_listed(&ctx, Some("inactive")).await?;
    let slot = slot_of_unit(&ctx, unit).await?;
    ctx.wait_systemd(slot, unit, "LoadState", "loaded").await?;
    ctx.wait_systemd(slot, unit, "ActiveState", "inactive").await?;
    expect_states(&ctx, slot, ("loaded", "inactive", "dead"), "after load").await?;
    wait_units_dir(&ctx, slot, &[unit]).await?;
    ensure_eq(
        &format!("/run/fleet/units in the other machine m{}", 3 - slot),
        vec![],
        units_dir(&ctx, 3 - slot).await?,
    )?;
    let written = ctx.exec_ok(slot, &["cat", "/run/fleet/units/hello.service"]).await?.stdout;
    let cat = ctx.fleetctl_ok(1, &["cat", unit]).await?.stdout;
    ensure_eq("/run/fleet/units/hello.service against `fleetctl cat`", cat.trim(), written.trim())?;

    let out = ctx.fleetctl_ok(1, &["start", unit]).await?;
    ctx.ensure(out.stdout.contains("Unit hello.service launched"), || {
        "start reports `Unit hello.service launched`".into()
    })?;
    wait_file(&ctx, Some(("launched", "launched"))).await?;
    wait_listed(&ctx, Some("active")).await?;
    ensure_eq("machine after start", slot, slot_of_unit(&ctx, unit).await?)?;
    ctx.wait_systemd(slot, unit, "ActiveState", "active").await?;
    ctx.wait_systemd(slot, unit, "SubState", "running").await?;
    expect_states(&ctx, slot, ("loaded", "active", "running"), "after start").await?;
    let other = 3 - slot;
    let p = ctx.show(other, unit, &["ActiveState"]).await?;
    ensure_eq(
        &format!("ActiveState in the other machine m{other}"),
        Some("inactive"),
        p.get("ActiveState").map(String::as_str),
    )?;

    ctx.fleetctl_ok(1, &["stop", unit]).await?;
    wait_file(&ctx, Some(("loaded", "loaded"))).await?;
    wait_listed(&ctx, Some("inactive")).await?;
    ctx.wait_systemd(slot, unit, "ActiveState", "inactive").await?;
    ctx.wait_systemd(slot, unit, "LoadState", "loaded").await?;
    expect_states(&ctx, slot, ("loaded", "inactive", "dead"), "after stop").await?;
    ensure_eq(
        &format!("/run/fleet/units in m{slot} after stop"),
        vec![unit.to_string()],
        units_dir(&ctx, slot).await?,
    )?;

    ctx.fleetctl_ok(1, &["unload", unit]).await?;
    wait_file(&ctx, Some(("inactive", "inactive"))).await?;
    wait_listed(&ctx, None).await?;
    ctx.wait_systemd(slot, unit, "LoadState", "not-found").await?;
    wait_units_dir(&ctx, slot, &[]).await?;

    let out = ctx.fleetctl_ok(1, &["destroy", unit]).await?;
    ctx.ensure(out.stdout.contains("Destroyed hello.service"), || "destroy reports `Destroyed hello.service`".into())?;
    wait_file(&ctx, None).await?;
    wait_listed(&ctx, None).await?;
    let listed = ctx.exec(slot, &["systemctl", "list-unit-files", "--no-legend", "hello.service"]).await?;
    ctx.ensure(listed.stdout.trim().is_empty(), || format!("no unit file left in m{slot}: {}", listed.stdout.trim()))
        .ctx("after destroy")
}

//! `list-machines`, `list-units` and `list-unit-files` (spec §9.5): field selection, cell values and the shared
//! table output.

use super::commands::{
    LIST_MACHINES_EXTENSION_FIELDS, LIST_MACHINES_FIELDS, LIST_UNIT_FILES_FIELDS, LIST_UNITS_EXTENSION_FIELDS,
    LIST_UNITS_FIELDS,
};
use super::context::Ctx;
use super::json::{self, Format};
use super::stored::{stored_unit_file, unit_is_global};
use super::table::{location_legend, machine_id_legend, render};
use crate::client::StateFilter;
use fleet_core::schema::{Machine, Unit, UnitState};

/// `--fields` split and checked against `valid` (comma-separated). Prints the original's errors.
fn selected_fields(ctx: &mut Ctx<'_>, valid: &str) -> Option<Vec<String>> {
    let spec = ctx.flags.str("fields").to_string();
    if spec.is_empty() {
        ctx.warn("Must define output format");
        return None;
    }
    let valid: Vec<&str> = valid.split(',').collect();
    let fields: Vec<String> = spec.split(',').map(str::to_string).collect();
    for f in &fields {
        if !valid.contains(&f.as_str()) {
            ctx.warn(&format!("Invalid key in output format: {f:?}"));
            return None;
        }
    }
    Some(fields)
}

fn full(ctx: &Ctx<'_>) -> bool {
    ctx.flags.bool("full") || ctx.flags.bool("l")
}

/// Header (unless `--no-legend`) plus rows, through the one tab-writer.
fn print_table(ctx: &mut Ctx<'_>, fields: &[String], rows: Vec<Vec<String>>) {
    let mut all = Vec::with_capacity(rows.len() + 1);
    if !ctx.flags.bool("no-legend") {
        all.push(fields.iter().map(|f| f.to_uppercase()).collect());
    }
    all.extend(rows);
    let text = render(&all);
    let _ = ctx.out.write_all(text.as_bytes());
}

pub fn machine_cell(m: &Machine, field: &str, full: bool) -> String {
    match field {
        "machine" => machine_id_legend(&m.id, full),
        "ip" if m.primary_ip.is_empty() => "-".into(),
        "ip" => m.primary_ip.clone(),
        "metadata" if m.metadata.is_empty() => "-".into(),
        "metadata" => m.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","),
        "state" => m.state().to_string(),
        "load-fault" => m.load_fault.clone().unwrap_or_else(|| "-".into()),
        _ => String::new(),
    }
}

pub fn list_machines(ctx: &mut Ctx<'_>) -> i32 {
    let Some(format) = json::format(ctx) else { return 1 };
    let valid = format!("{LIST_MACHINES_FIELDS},{LIST_MACHINES_EXTENSION_FIELDS}");
    let Some(fields) = selected_fields(ctx, &valid) else { return 1 };
    let mut machines = match ctx.client.machines() {
        Ok(m) => m,
        Err(e) => {
            ctx.warn(&format!("Error retrieving list of active machines from fleet API ({e})"));
            ctx.warn("Possible issues:");
            ctx.warn("  etcd is unhealthy and/or lost quorum");
            ctx.warn("  connection cannot be established to any etcd servers");
            return 1;
        }
    };
    machines.sort_by(|a, b| a.id.cmp(&b.id));
    if format == Format::Json {
        json::print(ctx, &json::machine_list(&machines));
        return 0;
    }
    let full = full(ctx);
    let rows = machines.iter().map(|m| fields.iter().map(|f| machine_cell(m, f, full)).collect()).collect();
    print_table(ctx, &fields, rows);
    0
}

pub fn unit_state_cell(s: &UnitState, field: &str, machines: &[Machine], full: bool) -> String {
    match field {
        "unit" => s.name.clone(),
        "load" => s.systemd_load_state.clone(),
        "active" => s.systemd_active_state.clone(),
        "sub" => s.systemd_sub_state.clone(),
        "machine" => location_legend(&s.machine_id, machines, full),
        "hash" if s.hash.is_empty() => "-".into(),
        "hash" if full => s.hash.clone(),
        "hash" => s.hash.chars().take(7).collect(),
        "running-hash" if s.running_hash.is_empty() => "-".into(),
        "running-hash" if full => s.running_hash.clone(),
        "running-hash" => s.running_hash.chars().take(7).collect(),
        "presence" => s.presence().to_string(),
        // `-` for a unit without a health check (docs/health.md).
        "health" => s.health.as_ref().map_or_else(|| "-".to_string(), |h| h.status.to_string()),
        _ => String::new(),
    }
}

/// Whether a machine runs an older version of the unit than the file it holds (replaced with `--no-restart` and
/// not restarted since).
pub fn runs_older_version(s: &UnitState) -> bool {
    !s.running_hash.is_empty() && !s.hash.is_empty() && s.running_hash != s.hash
}

pub fn list_units(ctx: &mut Ctx<'_>) -> i32 {
    let Some(format) = json::format(ctx) else { return 1 };
    let Some(fields) = selected_fields(ctx, &format!("{LIST_UNITS_FIELDS},{LIST_UNITS_EXTENSION_FIELDS}")) else {
        return 1;
    };
    let mut states = match ctx.client.unit_states(&StateFilter::default()) {
        Ok(s) => s,
        Err(e) => {
            ctx.warn(&format!("Error retrieving list of units from repository: {e}"));
            return 1;
        }
    };
    states.sort_by(|a, b| (&a.name, &a.machine_id).cmp(&(&b.name, &b.machine_id)));
    if format == Format::Json {
        let machines = ctx.machines().to_vec();
        json::print(ctx, &json::unit_state_list(&states, &machines));
        return 0;
    }
    let full = full(ctx);
    let machines = if fields.iter().any(|f| f == "machine") { ctx.machines().to_vec() } else { Vec::new() };
    let rows = states.iter().map(|s| fields.iter().map(|f| unit_state_cell(s, f, &machines, full)).collect()).collect();
    print_table(ctx, &fields, rows);
    // On stderr, so stdout stays the original's table; only units replaced with --no-restart can lag.
    let lagging: Vec<String> = states
        .iter()
        .filter(|s| runs_older_version(s))
        .map(|s| format!("{} on {}", s.name, short_id(&s.machine_id)))
        .collect();
    if !lagging.is_empty() {
        ctx.warn(&format!(
            "{} unit(s) run an older version than their unit file (replaced with --no-restart): {}; \
             see --fields=unit,machine,hash,running-hash, restart to run the new version",
            lagging.len(),
            lagging.join(", ")
        ));
    }
    0
}

fn short_id(machine: &str) -> &str {
    machine.get(..8).unwrap_or(machine)
}

pub fn unit_file_cell(u: &Unit, field: &str, machines: &[Machine], full: bool) -> String {
    let global = unit_is_global(u);
    match field {
        "unit" => u.name.clone(),
        "global" => global.to_string(),
        "dstate" if u.desired_state.is_empty() => "-".into(),
        "dstate" => u.desired_state.clone(),
        "state" if global || u.current_state.is_empty() => "-".into(),
        "state" => u.current_state.clone(),
        "target" | "tmachine" if global => "global".into(),
        "target" | "tmachine" => location_legend(&u.machine_id, machines, full),
        "hash" => {
            let h = stored_unit_file(u).hash();
            if full { h.to_hex() } else { h.short() }
        }
        "desc" => {
            let d = stored_unit_file(u).description().to_string();
            if d.is_empty() { "-".into() } else { d }
        }
        _ => String::new(),
    }
}

pub fn list_unit_files(ctx: &mut Ctx<'_>) -> i32 {
    let Some(format) = json::format(ctx) else { return 1 };
    let Some(fields) = selected_fields(ctx, LIST_UNIT_FILES_FIELDS) else { return 1 };
    if fields.iter().any(|f| f == "tmachine") {
        ctx.warn("WARNING: The \"tmachine\" field is deprecated. Use \"target\" instead");
    }
    let mut units = match ctx.client.units() {
        Ok(u) => u,
        Err(e) => {
            ctx.warn(&format!("Error retrieving list of units from repository: {e}"));
            return 1;
        }
    };
    units.sort_by(|a, b| a.name.cmp(&b.name));
    if format == Format::Json {
        let machines = ctx.machines().to_vec();
        json::print(ctx, &json::unit_file_list(&units, &machines));
        return 0;
    }
    let full = full(ctx);
    let machines =
        if fields.iter().any(|f| f == "target" || f == "tmachine") { ctx.machines().to_vec() } else { Vec::new() };
    let rows = units.iter().map(|u| fields.iter().map(|f| unit_file_cell(u, f, &machines, full)).collect()).collect();
    print_table(ctx, &fields, rows);
    0
}

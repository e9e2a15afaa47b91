//! `list-machines`, `list-units` and `list-unit-files` (spec §9.5): field selection, cell values and the shared
//! table output.

use super::Ctx;
use super::commands::{LIST_MACHINES_FIELDS, LIST_UNIT_FILES_FIELDS, LIST_UNITS_EXTENSION_FIELDS, LIST_UNITS_FIELDS};
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
        _ => String::new(),
    }
}

pub fn list_machines(ctx: &mut Ctx<'_>) -> i32 {
    let Some(format) = json::format(ctx) else { return 1 };
    let Some(fields) = selected_fields(ctx, LIST_MACHINES_FIELDS) else { return 1 };
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

#[cfg(test)]
mod tests {
    use crate::cli::testing::*;
    use crate::client::ClientError;
    use fleet_core::schema::UnitState;

    const HELLO: &str = "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi; sleep 1; done\"\n";
    const GLOBAL: &str = "[Unit]\nDescription=Global unit on every machine\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo global; sleep 5; done\"\n\n[X-Fleet]\nGlobal=true\n";

    fn meta_cluster() -> std::sync::Arc<crate::client::fake::FakeClient> {
        let c = cluster();
        for (id, host, role) in [
            ("8363165e6276f500b71169eca9b3f76b", "m1", "a"),
            ("8606e1a2949979fb223fb4bad77d152c", "m2", "b"),
            ("d91d98fca203da3cb89fb5c100ed0823", "m3", "c"),
        ] {
            c.set_metadata(id, "hostname", host);
            c.set_metadata(id, "role", role);
        }
        c
    }

    #[test]
    fn list_machines_variants_match_transcript_02() {
        let c = meta_cluster();
        let o = run(&c, &["list-machines"]);
        assert_eq!(o.code, 0);
        assert_eq!(
            o.out,
            "MACHINE\t\tIP\t\tMETADATA\n8363165e...\t172.17.0.2\thostname=m1,role=a\n8606e1a2...\t172.17.0.3\thostname=m2,role=b\nd91d98fc...\t172.17.0.4\thostname=m3,role=c\n"
        );
        let full = "MACHINE\t\t\t\t\tIP\t\tMETADATA\n8363165e6276f500b71169eca9b3f76b\t172.17.0.2\thostname=m1,role=a\n8606e1a2949979fb223fb4bad77d152c\t172.17.0.3\thostname=m2,role=b\nd91d98fca203da3cb89fb5c100ed0823\t172.17.0.4\thostname=m3,role=c\n";
        for flag in ["--full", "--l", "-l"] {
            assert_eq!(run(&c, &["list-machines", flag]).out, full, "{flag}");
        }
        assert_eq!(
            run(&c, &["list-machines", "--no-legend"]).out,
            "8363165e...\t172.17.0.2\thostname=m1,role=a\n8606e1a2...\t172.17.0.3\thostname=m2,role=b\nd91d98fc...\t172.17.0.4\thostname=m3,role=c\n"
        );
        assert_eq!(
            run(&c, &["list-machines", "--fields=machine,ip"]).out,
            "MACHINE\t\tIP\n8363165e...\t172.17.0.2\n8606e1a2...\t172.17.0.3\nd91d98fc...\t172.17.0.4\n"
        );
        assert_eq!(
            run(&c, &["list-machines", "--fields=metadata", "--full"]).out,
            "METADATA\nhostname=m1,role=a\nhostname=m2,role=b\nhostname=m3,role=c\n"
        );
    }

    #[test]
    fn list_field_errors() {
        let c = cluster();
        let o = run(&c, &["list-machines", "--fields=bogus"]);
        assert_eq!((o.code, o.err.as_str(), o.out.as_str()), (1, "Invalid key in output format: \"bogus\"\n", ""));
        let o = run(&c, &["list-machines", "--fields=machine,bogus"]);
        assert_eq!((o.code, o.err.as_str()), (1, "Invalid key in output format: \"bogus\"\n"));
        let o = run(&c, &["list-machines", "--fields="]);
        assert_eq!((o.code, o.err.as_str()), (1, "Must define output format\n"));
        let o = run(&c, &["list-units", "--fields=bogus"]);
        assert_eq!(o.code, 1);
        let o = run(&c, &["list-unit-files", "--fields=machine"]);
        assert_eq!((o.code, o.err.as_str()), (1, "Invalid key in output format: \"machine\"\n"));
    }

    #[test]
    fn fetch_errors_print_the_originals_lines() {
        let c = cluster();
        c.fail_all(Some(ClientError::Other("boom".into())));
        let o = run(&c, &["list-machines"]);
        assert_eq!(o.code, 1);
        assert_eq!(
            o.err,
            "Error retrieving list of active machines from fleet API (boom)\nPossible issues:\n  etcd is unhealthy and/or lost quorum\n  connection cannot be established to any etcd servers\n"
        );
        let o = run(&c, &["list-units"]);
        assert_eq!((o.code, o.err.as_str()), (1, "Error retrieving list of units from repository: boom\n"));
        let o = run(&c, &["list-unit-files"]);
        assert_eq!((o.code, o.err.as_str()), (1, "Error retrieving list of units from repository: boom\n"));
    }

    #[test]
    fn empty_lists_print_only_the_header() {
        let c = cluster();
        assert_eq!(run(&c, &["list-units"]).out, "UNIT\tMACHINE\tACTIVE\tSUB\n");
        assert_eq!(run(&c, &["list-unit-files"]).out, "UNIT\tHASH\tDSTATE\tSTATE\tTARGET\n");
    }

    #[test]
    fn list_units_and_unit_files_match_transcript_03() {
        let c = cluster();
        c.insert_unit("hello.service", HELLO, "loaded");
        assert_eq!(
            run(&c, &["list-unit-files"]).out,
            "UNIT\t\tHASH\tDSTATE\tSTATE\tTARGET\nhello.service\tceced3b\tloaded\tloaded\t8363165e.../172.17.0.2\n"
        );
        assert_eq!(
            run(&c, &["list-units"]).out,
            "UNIT\t\tMACHINE\t\t\tACTIVE\t\tSUB\nhello.service\t8363165e.../172.17.0.2\tinactive\tdead\n"
        );
        c.insert_unit("hello.service", HELLO, "launched");
        assert_eq!(
            run(&c, &["list-units", "--full"]).out,
            "UNIT\t\tMACHINE\t\t\t\t\t\tACTIVE\tSUB\nhello.service\t8363165e6276f500b71169eca9b3f76b/172.17.0.2\tactive\trunning\n"
        );
        c.insert_unit("hello.service", HELLO, "inactive");
        assert_eq!(
            run(&c, &["list-unit-files"]).out,
            "UNIT\t\tHASH\tDSTATE\t\tSTATE\t\tTARGET\nhello.service\tceced3b\tinactive\tinactive\t-\n"
        );
    }

    #[test]
    fn global_units_show_dash_state_and_global_target() {
        let c = cluster();
        c.insert_unit("global.service", GLOBAL, "launched");
        let o = run(&c, &["list-unit-files", "--fields=unit,global,dstate,state,target"]);
        assert_eq!(o.out, "UNIT\t\tGLOBAL\tDSTATE\t\tSTATE\tTARGET\nglobal.service\ttrue\tlaunched\t-\tglobal\n");
        let o = run(&c, &["list-units", "--no-legend", "--fields=unit,hash,load"]);
        assert_eq!(o.out.lines().count(), 3);
        assert!(o.out.starts_with("global.service\t2e39e56\tloaded\n"), "{}", o.out);
    }

    #[test]
    fn list_unit_files_all_fields_and_tmachine_warning() {
        let c = cluster();
        c.insert_unit("hello.service", HELLO, "launched");
        let o = run(&c, &["list-unit-files", "--fields=unit,desc,global,hash,dstate,state,target,tmachine"]);
        assert_eq!(o.err, "WARNING: The \"tmachine\" field is deprecated. Use \"target\" instead\n");
        assert_eq!(
            o.out,
            "UNIT\t\tDESC\t\tGLOBAL\tHASH\tDSTATE\t\tSTATE\t\tTARGET\t\t\tTMACHINE\nhello.service\tHello World\tfalse\tceced3b\tlaunched\tlaunched\t8363165e.../172.17.0.2\t8363165e.../172.17.0.2\n"
        );
    }

    #[test]
    fn running_hash_field_and_lag_note_only_when_a_machine_runs_an_older_version() {
        let c = cluster();
        let state = |name: &str, hash: &str, running: &str| UnitState {
            hash: hash.into(),
            machine_id: "ffffffffffffffffffffffffffffffff".into(),
            name: name.into(),
            systemd_active_state: "active".into(),
            systemd_load_state: "loaded".into(),
            systemd_sub_state: "running".into(),
            machine_presence: String::new(),
            health: None,
            running_hash: running.into(),
        };
        let new = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
        let old = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        c.push_state(state("level.service", new, new));
        c.push_state(state("stopped.service", new, ""));
        let o = run(&c, &["list-units", "--no-legend", "--fields=unit,hash,running-hash"]);
        assert_eq!(
            o.out,
            "level.service	bbbbbbb	bbbbbbb
stopped.service	bbbbbbb	-
"
        );
        assert_eq!(o.err, "", "nothing lags");
        c.push_state(state("db.service", new, old));
        let o = run(&c, &["list-units", "--no-legend", "--full", "--fields=unit,running-hash"]);
        assert!(
            o.out.starts_with(&format!(
                "db.service	{old}
"
            )),
            "{}",
            o.out
        );
        assert!(o.err.contains("1 unit(s) run an older version than their unit file"), "{}", o.err);
        assert!(o.err.contains("db.service on ffffffff"), "{}", o.err);
        // The default table is the original's, whatever lags.
        let o = run(&c, &["list-units", "--no-legend"]);
        assert!(
            o.out.starts_with(
                "db.service	ffffffff...	active	running
"
            ),
            "{}",
            o.out
        );
        assert_eq!(run(&c, &["list-units", "--fields=unit,nope"]).code, 1);
    }

    #[test]
    fn list_units_machine_without_known_machine_has_no_ip() {
        let c = cluster();
        c.push_state(UnitState {
            hash: String::new(),
            machine_id: "ffffffffffffffffffffffffffffffff".into(),
            name: "x.service".into(),
            systemd_active_state: "active".into(),
            systemd_load_state: "loaded".into(),
            systemd_sub_state: "running".into(),
            machine_presence: String::new(),
            health: None,
            running_hash: String::new(),
        });
        let o = run(&c, &["list-units", "--no-legend", "--fields=unit,machine,hash"]);
        assert_eq!(o.out, "x.service\tffffffff...\t-\n");
    }

    #[test]
    fn list_units_health_field_shows_each_status_and_a_dash_without_a_check() {
        use fleet_core::model::{Health, HealthStatus};
        let c = cluster();
        let state = |name: &str, health: Option<HealthStatus>| UnitState {
            machine_id: "ffffffffffffffffffffffffffffffff".into(),
            name: name.into(),
            systemd_active_state: "active".into(),
            health: health.map(|status| Health { status, since_ms: 1, output: String::new() }),
            ..Default::default()
        };
        c.push_state(state("a.service", Some(HealthStatus::Healthy)));
        c.push_state(state("b.service", Some(HealthStatus::Unhealthy)));
        c.push_state(state("c.service", Some(HealthStatus::Unknown)));
        c.push_state(state("d.service", None));
        let o = run(&c, &["list-units", "--fields=unit,machine,active,health"]);
        assert_eq!(
            o.out,
            "UNIT\t\tMACHINE\t\tACTIVE\tHEALTH\n\
             a.service\tffffffff...\tactive\thealthy\n\
             b.service\tffffffff...\tactive\tunhealthy\n\
             c.service\tffffffff...\tactive\tunknown\n\
             d.service\tffffffff...\tactive\t-\n"
        );
        let default = run(&c, &["list-units", "--no-legend"]);
        assert!(!default.out.contains("healthy") && !default.out.contains("unknown"), "{}", default.out);
        assert!(run(&c, &["list-units"]).out.starts_with("UNIT\t\tMACHINE\t\tACTIVE\tSUB\n"), "default columns");
    }
}

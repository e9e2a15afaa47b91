//! `/fleet/v1/state` (spec §8.7) and `/metrics`: published systemd states of units (with their health, for units
//! with a check), and a few cluster gauges.

use std::fmt::Write as _;

use bytes::Bytes;
use http::{Response, StatusCode};

use super::handler::Api;
use super::query;
use super::reply;
use fleet_core::api_rules;
use fleet_core::model::PublishedState;
use fleet_core::model::{HealthStatus, JobState};
use fleet_core::schema;
use fleet_core::store::records::StateRecord;
use fleet_registry::Snapshot;

/// One row of a state listing before its page is cut: a stored state, or one shown in doubt.
enum Row<'a> {
    Stored { name: &'a str, machine: &'a str, record: &'a StateRecord },
    InDoubt(&'a PublishedState),
}

impl<'a> Row<'a> {
    fn stored((name, machine, record): (&'a str, &'a str, &'a StateRecord)) -> Row<'a> {
        Row::Stored { name, machine, record }
    }

    /// The listing's order: unit name, then machine ID.
    fn key(&self) -> (&str, &str) {
        match self {
            Row::Stored { name, machine, .. } => (name, machine),
            Row::InDoubt(state) => (&state.name, &state.machine_id),
        }
    }

    fn state(&self) -> PublishedState {
        match self {
            Row::Stored { name, machine, record } => (*record).clone().into_state(name, machine),
            Row::InDoubt(state) => (*state).clone(),
        }
    }
}

impl Api {
    pub(super) fn list_states(&self, query_text: Option<&str>) -> Response<Bytes> {
        let pairs = query::pairs(query_text);
        let page = match self.page(&query::values(&pairs, "nextPageToken").collect::<Vec<_>>()) {
            Ok(page) => page,
            Err(err) => return reply::refused(&err),
        };
        let machine = query::values(&pairs, "machineID").next().filter(|m| !m.is_empty());
        let unit = query::values(&pairs, "unitName").next().filter(|u| !u.is_empty());
        let snapshot = self.snapshot();
        // Page first, then convert only that page's states: a listing of 1,000 states in pages of 100 converted
        // every state for each page (10,000 conversions per `list-units`).
        // Units of a machine whose presence is gone, shown as in doubt (docs/at-most-once.md).
        let in_doubt: Vec<PublishedState> =
            snapshot.unit_states_in_doubt().filter(|s| unit.is_none_or(|u| s.name == u)).collect();
        let mut rows: Vec<Row<'_>> = match unit {
            Some(unit) => snapshot.state_entries_of(unit).map(Row::stored).collect(),
            None => snapshot.state_entries().map(Row::stored).collect(),
        };
        rows.extend(in_doubt.iter().map(Row::InDoubt));
        rows.retain(|row| machine.is_none_or(|m| row.key().1 == m));
        rows.sort_by(|a, b| a.key().cmp(&b.key()));
        let (page_rows, next) = page.slice(&rows);
        let states: Vec<schema::UnitState> = page_rows
            .iter()
            .map(|row| {
                let state = row.state();
                let running = snapshot.running_hash(&state.name, &state.machine_id).map(str::to_string);
                api_rules::state(state, running.as_deref())
            })
            .collect();
        reply::json(&schema::UnitStatePage { states, next_page_token: next.map(|t| t.encode()).unwrap_or_default() })
    }

    pub(super) fn get_state(&self, name: &str) -> Response<Bytes> {
        let snapshot = self.snapshot();
        match snapshot.unit_states_of(name).next() {
            Some(state) => {
                let running = snapshot.running_hash(&state.name, &state.machine_id);
                reply::json(&api_rules::state(state.clone(), running))
            }
            None => reply::error(StatusCode::NOT_FOUND, super::route::NO_UNIT_STATE),
        }
    }

    /// Prometheus text: units by desired and current state, machines, published states, engine leader.
    pub(super) fn metrics(&self) -> Response<Bytes> {
        let snapshot = self.snapshot();
        let mut desired = [0usize; 3];
        let mut current = [0usize; 3];
        for unit in snapshot.units() {
            desired[unit.desired as usize] += 1;
            current[unit.current as usize] += 1;
        }
        let mut out = String::new();
        let _ = writeln!(out, "# HELP fleet_units Units in the registry by desired and current state.");
        let _ = writeln!(out, "# TYPE fleet_units gauge");
        for state in JobState::ALL {
            let (d, c) = (desired[state as usize], current[state as usize]);
            let _ = writeln!(out, "fleet_units{{kind=\"desired\",state=\"{state}\"}} {d}");
            let _ = writeln!(out, "fleet_units{{kind=\"current\",state=\"{state}\"}} {c}");
        }
        let _ = writeln!(out, "# HELP fleet_machines Machines currently present.");
        let _ = writeln!(out, "# TYPE fleet_machines gauge");
        let _ = writeln!(out, "fleet_machines {}", snapshot.machines().count());
        let _ = writeln!(out, "# HELP fleet_unit_states Published (unit, machine) systemd states.");
        let _ = writeln!(out, "# TYPE fleet_unit_states gauge");
        let _ = writeln!(out, "fleet_unit_states {}", snapshot.unit_states().count());
        let _ = writeln!(out, "# HELP fleet_engine_leader_present Whether an engine leader holds the lease.");
        let _ = writeln!(out, "# TYPE fleet_engine_leader_present gauge");
        let _ = writeln!(out, "fleet_engine_leader_present {}", u8::from(snapshot.leader().is_some()));
        let _ = writeln!(out, "# HELP fleet_registry_revision etcd revision of the registry view.");
        let _ = writeln!(out, "# TYPE fleet_registry_revision gauge");
        let _ = writeln!(out, "fleet_registry_revision {}", snapshot.revision());
        health_metrics(&snapshot, &mut out);
        reply::text(out, "text/plain; version=0.0.4")
    }
}

/// `fleet_unit_health`: for each unit with a health check and each machine publishing its state, one series per
/// status, 1 for the current one and 0 for the others (so `fleet_unit_health{status="unhealthy"} == 1` alerts).
/// Units without a check have no series; the gauge's help and type are written only when some unit has one.
fn health_metrics(snapshot: &Snapshot, out: &mut String) {
    let mut header = false;
    for (unit, per_machine) in snapshot.state_records().iter() {
        for (machine, record) in per_machine.iter() {
            let Some(health) = &record.health else { continue };
            if !header {
                let _ = writeln!(
                    out,
                    "# HELP fleet_unit_health Health check status of a unit on a machine (units with HealthCheck= only)."
                );
                let _ = writeln!(out, "# TYPE fleet_unit_health gauge");
                header = true;
            }
            for status in [HealthStatus::Healthy, HealthStatus::Unhealthy, HealthStatus::Unknown] {
                let _ = writeln!(
                    out,
                    "fleet_unit_health{{unit=\"{}\",machine=\"{}\",status=\"{status}\"}} {}",
                    label(unit),
                    label(machine),
                    u8::from(health.status == status)
                );
            }
        }
    }
}

/// A Prometheus label value: backslash, double quote and line feed escaped.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_registry::{Change, Keys};

    fn snapshot(states: &[(&str, &str, &str)]) -> Snapshot {
        let keys = Keys::new("/p");
        let kvs: Vec<(String, &str)> = states.iter().map(|(u, m, v)| (keys.state(u, m), *v)).collect();
        let changes =
            kvs.iter().map(|(k, v)| (k.as_bytes(), Change::Put { value: v.as_bytes(), mod_revision: 2, lease: 1 }));
        Snapshot::from_kvs(&keys, 2, changes)
    }

    const PLAIN: &str = r#"{"hash":"h","loadState":"loaded","activeState":"active","subState":"running"}"#;
    const HEALTHY: &str = r#"{"hash":"h","loadState":"loaded","activeState":"active","subState":"running","health":{"status":"healthy","sinceMs":5}}"#;

    #[test]
    fn health_gauges_cover_only_units_with_a_check() {
        let mut out = String::new();
        health_metrics(&snapshot(&[("plain.service", "m1", PLAIN)]), &mut out);
        assert_eq!(out, "", "no check anywhere: not even the header");
        health_metrics(&snapshot(&[("plain.service", "m1", PLAIN), ("web.service", "m2", HEALTHY)]), &mut out);
        assert_eq!(
            out,
            "# HELP fleet_unit_health Health check status of a unit on a machine (units with HealthCheck= only).\n\
             # TYPE fleet_unit_health gauge\n\
             fleet_unit_health{unit=\"web.service\",machine=\"m2\",status=\"healthy\"} 1\n\
             fleet_unit_health{unit=\"web.service\",machine=\"m2\",status=\"unhealthy\"} 0\n\
             fleet_unit_health{unit=\"web.service\",machine=\"m2\",status=\"unknown\"} 0\n"
        );
        assert_eq!(label("a\\x2d\"b\n"), "a\\\\x2d\\\"b\\n");
    }
}

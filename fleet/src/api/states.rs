//! `/fleet/v1/state` (spec §8.7) and `/metrics`: published systemd states of units, and a few cluster gauges.

use std::fmt::Write as _;

use bytes::Bytes;
use http::{Response, StatusCode};

use super::handler::Api;
use super::query;
use super::reply;
use crate::model::JobState;
use crate::schema;
use crate::wire;

impl Api {
    pub(super) fn list_states(&self, query_text: Option<&str>) -> Response<Bytes> {
        let pairs = query::pairs(query_text);
        let page = match self.page(&query::values(&pairs, "nextPageToken").collect::<Vec<_>>()) {
            Ok(page) => page,
            Err(err) => return err.response(),
        };
        let machine = query::values(&pairs, "machineID").next().filter(|m| !m.is_empty());
        let unit = query::values(&pairs, "unitName").next().filter(|u| !u.is_empty());
        let snapshot = self.snapshot();
        let mut states: Vec<_> = match unit {
            Some(unit) => snapshot.unit_states_of(unit).collect::<Vec<_>>(),
            None => snapshot.unit_states().collect(),
        };
        // Units of a machine whose presence is gone, shown as in doubt (docs/at-most-once.md).
        states.extend(snapshot.unit_states_in_doubt().filter(|s| unit.is_none_or(|u| s.name == u)));
        states.sort_by(|a, b| (&a.name, &a.machine_id).cmp(&(&b.name, &b.machine_id)));
        let states: Vec<schema::UnitState> = states
            .into_iter()
            .filter(|s| machine.is_none_or(|m| s.machine_id == m))
            .map(|s| {
                let running = snapshot.running_hash(&s.name, &s.machine_id).map(str::to_string);
                wire::state(s, running.as_deref())
            })
            .collect();
        let (items, next) = page.slice(&states);
        reply::json(&schema::UnitStatePage {
            states: items.to_vec(),
            next_page_token: next.map(|t| t.encode()).unwrap_or_default(),
        })
    }

    pub(super) fn get_state(&self, name: &str) -> Response<Bytes> {
        let snapshot = self.snapshot();
        match snapshot.unit_states_of(name).next() {
            Some(state) => {
                let running = snapshot.running_hash(&state.name, &state.machine_id);
                reply::json(&wire::state(state.clone(), running))
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
        reply::text(out, "text/plain; version=0.0.4")
    }
}

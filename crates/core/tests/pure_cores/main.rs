//! Tests of the pure cores through their public API, written to kill mutants that cargo-mutants found alive against
//! the unit tests (`conformance/mutants/cargo-mutants`; results in conformance/README.md). Modules are named after
//! the layers (`api`, `engine`, `unit`) so that one libtest filter selects a layer's unit tests and these together.
//! No I/O: plain values in, plain values out.

mod api_rules {
    use std::collections::BTreeMap;

    use fleet_core::api_rules;
    use fleet_core::model::{MachineState, PublishedState};

    /// A published unit state reaches the API with every field, under the original's JSON names (spec §8.7).
    #[test]
    fn a_published_state_keeps_every_field_on_the_wire() {
        let state = PublishedState {
            name: "hello.service".into(),
            machine_id: "113f16a7".into(),
            hash: "d4b1a2c3d4b1a2c3d4b1a2c3d4b1a2c3d4b1a2c3".into(),
            load_state: "loaded".into(),
            active_state: "active".into(),
            sub_state: "running".into(),
            restarts: None,
            health: None,
            launched: None,
        };
        let json = serde_json::to_value(api_rules::state(state.clone(), None)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "hash": "d4b1a2c3d4b1a2c3d4b1a2c3d4b1a2c3d4b1a2c3",
                "machineID": "113f16a7",
                "name": "hello.service",
                "systemdActiveState": "active",
                "systemdLoadState": "loaded",
                "systemdSubState": "running",
            })
        );
        // The version the machine runs, when it started one, goes along (this implementation's extension).
        let running = "a1b2c3d4a1b2c3d4a1b2c3d4a1b2c3d4a1b2c3d4";
        let json = serde_json::to_value(api_rules::state(state, Some(running))).unwrap();
        assert_eq!(json["runningHash"], running);
    }

    /// A present machine reaches the API with its ID, metadata and public IP (spec §8.8); the version and
    /// `disable_engine` it registered stay internal.
    #[test]
    fn a_machine_keeps_id_metadata_and_ip_on_the_wire() {
        let machine = MachineState {
            id: "113f16a7f2f24a2b9b8e6b3c3a6e5b10".into(),
            public_ip: "10.200.1.2".into(),
            metadata: BTreeMap::from([("role".to_string(), "web".to_string())]),
            version: "1.0.0".into(),
            disable_engine: true,
            cordoned: false,
            load_fault: None,
        };
        let json = serde_json::to_value(api_rules::machine(machine)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "id": "113f16a7f2f24a2b9b8e6b3c3a6e5b10",
                "metadata": {"role": "web"},
                "primaryIP": "10.200.1.2",
            })
        );
    }
}

mod scheduler {
    use fleet_core::model::{JobState, MachineState};
    use fleet_core::scheduler::{Decision, ScheduleInput, UnitSpec, plan};

    fn machine(id: &str) -> MachineState {
        MachineState { id: id.into(), ..Default::default() }
    }

    /// A decision names its unit and the machine it takes the unit from (unschedule) or puts it on (schedule):
    /// the engine shell writes exactly those keys.
    #[test]
    fn decisions_name_the_unit_and_the_machine_it_leaves_or_goes_to() {
        let units = [UnitSpec::new("a.service", JobState::Launched).on("m-gone")];
        let snapshot = ScheduleInput::new(units, [machine("m-1")]).unwrap();
        let decisions = plan(&snapshot);
        assert!(matches!(decisions[0], Decision::Unschedule { .. }), "{decisions:?}");
        assert!(matches!(decisions[1], Decision::Schedule { .. }), "{decisions:?}");
        let named: Vec<(&str, &str)> = decisions.iter().map(|d| (d.unit(), d.machine())).collect();
        assert_eq!(named, [("a.service", "m-gone"), ("a.service", "m-1")]);
    }
}

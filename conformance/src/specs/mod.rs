//! The catalogue: every spec with its area, machines, metadata and required capabilities. Spec bodies live in one
//! module per area.

pub mod at_most_once;
pub mod audit;
pub mod client_api;
pub mod cluster;
pub mod connectivity;
pub mod cordon;
pub mod drain;
pub mod fleetctl;
pub mod global;
pub mod machines;
pub mod metadata;
pub mod moves;
pub mod node;
pub mod plan;
pub mod rebalance;
pub mod replace;
pub mod restart;
pub mod rollout;
pub mod safe_rollout;
pub mod scheduling;
pub mod security;
pub mod ssh;
pub mod unit_actions;

use std::collections::{BTreeMap, BTreeSet};

use crate::{Area, Capability, Ctx, Need, Spec, SpecFuture};

/// The specs that start clusters of their own through the harness (`machines: 0` for the framework).
pub(crate) const OWN_CLUSTERS: &[Need] = &[Need::Harness];
/// Cordons and drains: state every unit of a cluster shares, observed inside the machines.
pub(crate) const CHANGES_MACHINES: &[Need] = &[Need::ChangesMachines, Need::Inside];

fn spec(area: Area, name: &'static str, machines: usize, origin: &'static str, run: fn(Ctx) -> SpecFuture) -> Spec {
    Spec { name, area, machines, metadata: &[], requires: &[], needs: &[], origin, run }
}

impl Spec {
    fn metadata(mut self, metadata: &'static [(usize, &'static str)]) -> Spec {
        self.metadata = metadata;
        self
    }

    fn requires(mut self, caps: &'static [Capability]) -> Spec {
        self.requires = caps;
        self
    }

    /// What the spec needs of its cluster beyond its machines ([`Need`]); the catalogue states it for every spec.
    fn needs(mut self, needs: &'static [Need]) -> Spec {
        self.needs = needs;
        self
    }
}

/// `Need` sets the catalogue uses (every spec states its own; none: it runs on any cluster of its size).
const HARNESS: &[Need] = &[Need::Harness];
const EXACT: &[Need] = &[Need::ExactMachines];
const INSIDE: &[Need] = &[Need::Inside];
const EXACT_INSIDE: &[Need] = &[Need::ExactMachines, Need::Inside];
/// Placement by load (spreading over idle machines) or whole listings: other units change both.
const EMPTY_EXACT: &[Need] = &[Need::EmptyCluster, Need::ExactMachines];
const CHANGES: &[Need] = &[Need::ChangesMachines, Need::SlotMetadata, Need::Inside];
const SLOT_METADATA: &[Need] = &[Need::SlotMetadata];
/// Hook logs, samplers and markers under `/run`, drop-ins under `/etc/systemd/system` (the global-wait specs' slow
/// machine).
const FILES: &[Need] = &[Need::MachineFiles, Need::Inside];

/// Every spec, in catalogue order.
pub fn catalogue() -> Vec<Spec> {
    use Area::*;
    const SSH: &[Capability] = &[Capability::Ssh];
    let mut all = vec![
        // fleetctl
        spec(Fleetctl, "version_prints_fleetctl_version", 0, "TestClientVersionFlag", |c| {
            Box::pin(fleetctl::version(c))
        }),
        spec(Fleetctl, "help_shows_the_version", 0, "TestClientVersionHelpOutput", |c| {
            Box::pin(fleetctl::help_version(c))
        }),
        spec(Fleetctl, "help_flags_and_no_arguments_exit_zero", 0, "TestClientHelpFlag", |c| {
            Box::pin(fleetctl::help_flags(c))
        }),
        spec(Fleetctl, "endpoint_from_environment", 1, "TestFleetctlWithEnv", |c| Box::pin(fleetctl::endpoint_env(c))),
        spec(Fleetctl, "list_unit_files_sorted_by_name", 1, "TestListUnitFilesOrder", |c| {
            Box::pin(fleetctl::list_unit_files_order(c))
        }),
        // unit_actions
        spec(UnitActions, "start_runs_the_unit", 1, "TestUnitRunnable", |c| Box::pin(unit_actions::runnable(c))),
        spec(UnitActions, "submit_batch_then_destroy", 1, "TestUnitSubmit", |c| {
            Box::pin(unit_actions::batch(c, unit_actions::Cmd::Submit, 9))
        }),
        spec(UnitActions, "load_batch_then_unload", 1, "TestUnitLoad", |c| {
            Box::pin(unit_actions::batch(c, unit_actions::Cmd::Load, 6))
        }),
        spec(UnitActions, "start_batch_then_stop", 1, "TestUnitStart", |c| {
            Box::pin(unit_actions::batch(c, unit_actions::Cmd::Start, 3))
        }),
        spec(UnitActions, "restart_starts_stopped_and_running_units", 1, "TestUnitRestart", |c| {
            Box::pin(unit_actions::restart(c))
        }),
        spec(UnitActions, "cat_prints_the_submitted_unit", 1, "TestUnitCat", |c| Box::pin(unit_actions::cat(c))),
        spec(UnitActions, "submit_replace_changes_inactive_units", 1, "TestUnitSubmitReplace", |c| {
            Box::pin(unit_actions::replace(c, unit_actions::Cmd::Submit, 9))
        }),
        spec(UnitActions, "load_replace_changes_loaded_units", 1, "TestUnitLoadReplace", |c| {
            Box::pin(unit_actions::replace(c, unit_actions::Cmd::Load, 6))
        }),
        spec(UnitActions, "start_replace_changes_launched_units", 1, "TestUnitStartReplace", |c| {
            Box::pin(unit_actions::replace(c, unit_actions::Cmd::Start, 3))
        }),
        spec(UnitActions, "install_section_wanted_by_follows_the_wanting_unit", 2, "TestInstallUnit", |c| {
            Box::pin(unit_actions::install(c))
        })
        .needs(INSIDE),
        spec(
            UnitActions,
            "lifecycle_listings_agree_with_systemd",
            2,
            "TestSystemdUnitFlow (black-box), core issue",
            |c| Box::pin(unit_actions::lifecycle(c)),
        )
        .needs(EXACT_INSIDE),
        // scheduling
        spec(Scheduling, "machine_of_keeps_pairs_together_when_one_moves", 3, "TestScheduleMachineOf", |c| {
            Box::pin(scheduling::machine_of(c))
        })
        .needs(HARNESS),
        spec(Scheduling, "conflicts_allow_one_per_machine", 3, "TestScheduleConflicts", |c| {
            Box::pin(scheduling::conflicts(c))
        })
        .needs(EXACT),
        spec(Scheduling, "one_way_conflict_blocks_until_destroyed", 1, "TestScheduleOneWayConflict", |c| {
            Box::pin(scheduling::one_way_conflict(c))
        })
        .needs(EXACT),
        spec(Scheduling, "conflicts_in_lists_and_repeated_lines", 3, "TestScheduleMultipleConflicts", |c| {
            Box::pin(scheduling::multiple_conflicts(c))
        })
        .needs(EMPTY_EXACT),
        spec(Scheduling, "replaces_moves_the_replaced_unit", 2, "TestScheduleReplace", |c| {
            Box::pin(scheduling::replaces(c))
        })
        .requires(&[Capability::DeterministicReplaces])
        .needs(EMPTY_EXACT),
        spec(Scheduling, "circular_replaces_runs_exactly_one", 2, "TestScheduleCircularReplace", |c| {
            Box::pin(scheduling::circular_replaces(c))
        })
        .requires(&[Capability::DeterministicReplaces]),
        spec(Scheduling, "machine_id_pins_each_unit", 3, "TestScheduleConditionMachineID", |c| {
            Box::pin(scheduling::machine_id(c))
        }),
        spec(Scheduling, "global_unit_runs_on_every_machine", 3, "TestScheduleGlobalUnits (start step)", |c| {
            Box::pin(scheduling::global_units(c))
        })
        .needs(EXACT),
        spec(Scheduling, "global_conflicts_keep_the_second_off", 3, "TestScheduleGlobalConflicts", |c| {
            Box::pin(scheduling::global_conflicts(c))
        })
        .needs(EXACT),
        spec(Scheduling, "template_instances_spread_least_loaded", 3, "core issue", |c| {
            Box::pin(scheduling::least_loaded(c))
        })
        .needs(EMPTY_EXACT),
        // metadata
        spec(Metadata, "template_specifier_in_machine_metadata", 3, "TestTemplatesWithSpecifiersInMetadata", |c| {
            Box::pin(metadata::specifiers(c))
        })
        .needs(SLOT_METADATA),
        // machines
        spec(Machines, "api_lists_machines_as_json", 1, "TestMachinesList", |c| Box::pin(machines::list(c))),
        spec(Machines, "api_rejects_a_bad_page_token", 1, "TestMachinesListBadNextPageToken", |c| {
            Box::pin(machines::bad_token(c))
        }),
        spec(Machines, "api_patch_adds_and_replaces_metadata", 2, "TestMachinesPatchAddModify", |c| {
            Box::pin(machines::patch_add_modify(c))
        })
        .needs(CHANGES),
        spec(Machines, "api_patch_removes_metadata", 2, "TestMachinesPatchDelete", |c| {
            Box::pin(machines::patch_delete(c))
        })
        .needs(CHANGES),
        spec(Machines, "api_patch_rejects_bad_operations", 1, "TestMachinesPatchBad", |c| {
            Box::pin(machines::patch_bad(c))
        }),
        spec(Machines, "list_machines_shows_ids_addresses_metadata", 2, "core issue", |c| {
            Box::pin(machines::list_machines(c))
        })
        .metadata(&[(2, "role=b")])
        .needs(HARNESS),
        // client_api
        spec(ClientApi, "units_put_get_delete_status_codes", 1, "transcript 13, spec §8.6", |c| {
            Box::pin(client_api::units_crud(c))
        })
        .needs(INSIDE),
        spec(ClientApi, "errors_are_json_with_code_and_message", 1, "transcript 13, spec §8.2-8.3", |c| {
            Box::pin(client_api::errors(c))
        }),
        spec(ClientApi, "put_rejects_unknown_desired_state", 1, "spec §12.2 B9", |c| {
            Box::pin(client_api::bad_desired_state(c))
        })
        .requires(&[Capability::StrictApiValidation]),
        spec(ClientApi, "state_lists_launched_units", 1, "transcript 13, spec §8.7", |c| {
            Box::pin(client_api::states(c))
        }),
        // node
        spec(Node, "shutdown_is_clean", 1, "TestShutdown", |c| Box::pin(node::shutdown(c))).needs(HARNESS),
        spec(Node, "shutdown_while_monitor_restarts_is_clean", 1, "TestShutdownVsMonitor", |c| {
            Box::pin(node::shutdown_vs_monitor(c))
        })
        .needs(HARNESS),
        spec(Node, "sighup_reloads_and_keeps_serving", 1, "TestReconfigureServer", |c| Box::pin(node::sighup(c)))
            .requires(&[Capability::SighupReload])
            .needs(HARNESS),
        spec(Node, "stopped_fleet_purges_its_pinned_unit", 1, "TestNodeShutdown", |c| Box::pin(node::node_shutdown(c)))
            .needs(HARNESS),
        spec(Node, "duplicate_machine_id_is_refused", 2, "TestDetectMachineId", |c| {
            Box::pin(node::duplicate_machine_id(c))
        })
        .needs(HARNESS),
        spec(Node, "systemctl_restart_keeps_every_unit", 3, "issue 14, upstream #1086", |c| {
            Box::pin(restart::systemctl_restart_keeps_every_unit(c))
        })
        .requires(&[Capability::RestartAdopts])
        .needs(HARNESS),
        spec(Node, "killed_fleetd_started_within_the_ttl_keeps_every_unit", 3, "issue 14, upstream #1086", |c| {
            Box::pin(restart::killed_fleetd_started_within_the_ttl_keeps_every_unit(c))
        })
        .requires(&[Capability::RestartAdopts])
        .needs(HARNESS),
        // cluster
        spec(Cluster, "stopped_fleet_moves_only_its_unit", 4, "TestDynamicClusterNewMemberUnitMigration", |c| {
            Box::pin(cluster::stopped_member_migration(c))
        })
        .needs(HARNESS),
        spec(Cluster, "replaced_machine_moves_exactly_one_unit", 3, "TestDynamicClusterMemberReboot", |c| {
            Box::pin(cluster::member_reboot(c))
        })
        .needs(HARNESS),
        spec(Cluster, "killed_machine_units_rescheduled", 3, "core issue", |c| Box::pin(cluster::killed_machine(c)))
            .needs(HARNESS),
        spec(Cluster, "units_stop_and_start_with_no_engine_leader", 0, "issue 35 (scoped agents)", |_| {
            Box::pin(cluster::stop_and_start_with_no_engine_leader())
        })
        .needs(OWN_CLUSTERS),
        spec(Cluster, "scheduling_survives_each_machine_killed", 3, "core issue (engine leader takeover)", |c| {
            Box::pin(cluster::leader_takeover(c))
        })
        .needs(HARNESS),
        // connectivity
        spec(Connectivity, "partitioned_machine_keeps_its_units", 1, "TestSingleNodeConnectivityLoss", |c| {
            Box::pin(connectivity::single_node_loss(c))
        })
        .needs(HARNESS),
        spec(Connectivity, "at_most_once_unit_never_runs_twice_across_a_partition", 3, "issue 14 item 2", |c| {
            Box::pin(at_most_once::never_runs_twice_across_a_partition(c))
        })
        .metadata(&[(1, "role=db")])
        .requires(&[Capability::AtMostOnce])
        .needs(HARNESS),
        spec(Connectivity, "etcd_restart_keeps_units_and_converges", 2, "core issue", |c| {
            Box::pin(connectivity::etcd_restart(c))
        })
        .requires(&[Capability::EtcdOutageUntouched])
        .needs(HARNESS),
        spec(Connectivity, "etcd_return_registers_every_fleetd_without_long_backoff", 2, "issue 14 item 3", |c| {
            Box::pin(connectivity::etcd_return_registers_every_fleetd_without_long_backoff(c))
        })
        .requires(&[Capability::EtcdOutageUntouched])
        .needs(HARNESS),
        spec(Connectivity, "etcd_follower_loss_restarts_nothing", 2, "issue 14 item 5", |c| {
            Box::pin(connectivity::etcd_follower_loss_restarts_nothing(c))
        })
        .requires(&[Capability::EtcdMembers])
        .needs(HARNESS),
        spec(Connectivity, "etcd_leader_loss_restarts_nothing", 2, "issue 14 item 5", |c| {
            Box::pin(connectivity::etcd_leader_loss_restarts_nothing(c))
        })
        .requires(&[Capability::EtcdMembers])
        .needs(HARNESS),
        // global_units
        spec(GlobalUnits, "start_waits_until_active_on_every_machine", 3, "transcript 05, spec §9.6", |c| {
            Box::pin(global::start_waits_for_every_machine(c))
        })
        .requires(&[Capability::GlobalWait])
        .needs(FILES),
        spec(GlobalUnits, "machine_metadata_selects_machines_and_follows_api_changes", 3, "spec §5, §6.11", |c| {
            Box::pin(global::machine_metadata_selects_machines(c))
        })
        .metadata(&[(1, "role=a"), (2, "role=b"), (3, "role=a")])
        .needs(CHANGES),
        spec(GlobalUnits, "joining_machine_gets_it_leaving_machines_drop_it", 2, "spec §6.7", |c| {
            Box::pin(global::machines_joining_and_leaving(c))
        })
        .needs(HARNESS),
        spec(GlobalUnits, "unit_conflicting_with_a_global_stays_unscheduled", 3, "spec §6.2, §6.8", |c| {
            Box::pin(global::conflicting_unit_stays_unscheduled(c))
        })
        .needs(EXACT_INSIDE),
        spec(GlobalUnits, "global_skips_the_machine_of_a_conflicting_unit", 3, "spec §6.8, §6.11", |c| {
            Box::pin(global::global_skips_the_conflicting_units_machine(c))
        })
        .requires(&[Capability::GlobalYieldsToScheduledUnits])
        .needs(EXACT_INSIDE),
        spec(GlobalUnits, "stop_unload_destroy_act_on_every_machine", 3, "transcript 05, spec §6.7, §9.7", |c| {
            Box::pin(global::stop_unload_destroy_everywhere(c))
        })
        .requires(&[Capability::GlobalWait])
        .needs(FILES),
        spec(GlobalUnits, "restart_gives_every_machine_a_new_main_pid", 3, "spec §9.7 (Rec), §12 L2", |c| {
            Box::pin(global::restart_gives_every_machine_a_new_process(c))
        })
        .requires(&[Capability::GlobalWait, Capability::GlobalRestart])
        .needs(EXACT_INSIDE),
        spec(
            GlobalUnits,
            "two_units_and_a_global_make_five_active_also_after_restart",
            3,
            "TestScheduleGlobalUnits (restart step)",
            |c| Box::pin(global::two_units_and_a_global_make_five(c)),
        )
        .needs(EXACT),
        spec(GlobalUnits, "listings_show_global_target_and_a_row_per_machine", 3, "transcript 05", |c| {
            Box::pin(global::listings_match_the_original(c))
        })
        .needs(EMPTY_EXACT),
        // ssh
        spec(Ssh, "known_hosts_prompt_records_and_refuses_a_changed_key", 2, "TestKnownHostsVerification", |c| {
            Box::pin(ssh::known_hosts(c))
        })
        .requires(SSH)
        .needs(HARNESS),
        spec(Ssh, "tunnel_starts_a_batch_beyond_max_sessions", 3, "TestTunnelScheduleBatchUnits", |c| {
            Box::pin(ssh::tunnel_batch(c))
        })
        .requires(SSH)
        .needs(HARNESS),
        spec(Ssh, "ssh_runs_on_the_machine_or_units_machine_with_its_exit_status", 2, "TestUnitSSHActions", |c| {
            Box::pin(ssh::ssh_actions(c))
        })
        .requires(SSH)
        .needs(HARNESS),
        spec(Ssh, "status_shows_systemd_from_the_units_machine", 2, "TestUnitStatus", |c| Box::pin(ssh::status(c)))
            .requires(SSH)
            .needs(HARNESS),
        spec(Ssh, "status_of_a_global_unit_covers_every_machine", 3, "TestScheduleGlobalUnits (status step)", |c| {
            Box::pin(ssh::global_status(c))
        })
        .requires(&[Capability::Ssh, Capability::GlobalSshCommands])
        .needs(HARNESS),
        // rollout
        spec(Rollout, "replace_without_restart_keeps_every_process", 3, "issue 12", |c| {
            Box::pin(rollout::replace_without_restart_keeps_every_process(c))
        })
        .requires(&[Capability::NoRestart, Capability::Rollout])
        .needs(FILES),
        spec(Rollout, "rolling_replace_keeps_the_others_serving", 3, "issue 12", |c| {
            Box::pin(rollout::rolling_replace_keeps_the_others_serving(c))
        })
        .requires(&[Capability::Rollout])
        .needs(FILES),
        spec(Rollout, "rolling_replace_on_five_machines_with_a_joining_machine", 5, "issue 12", |c| {
            Box::pin(rollout::rolling_replace_on_five_machines_with_a_joining_machine(c))
        })
        .requires(&[Capability::Rollout])
        .needs(HARNESS),
        spec(Rollout, "failing_version_pauses_or_rolls_back", 3, "issue 12", |c| {
            Box::pin(rollout::failing_version_pauses_or_rolls_back(c))
        })
        .requires(&[Capability::Rollout])
        .needs(FILES),
        spec(Rollout, "version_restarted_by_systemd_pauses_the_rollout", 3, "issue 12", |c| {
            Box::pin(rollout::version_restarted_by_systemd_pauses_the_rollout(c))
        })
        .requires(&[Capability::Rollout])
        .needs(FILES),
        spec(Rollout, "rolling_replace_survives_killed_client_and_etcd_restart", 3, "issue 12", |c| {
            Box::pin(rollout::rolling_replace_survives_killed_client_and_etcd_restart(c))
        })
        .requires(&[Capability::Rollout])
        .needs(HARNESS),
        spec(Rollout, "plan_predicts_what_the_replace_does", 3, "issue 12", |c| {
            Box::pin(plan::plan_predicts_what_the_replace_does(c))
        })
        .requires(&[Capability::Plan, Capability::NoRestart])
        .needs(FILES),
        spec(Rollout, "rolling_replace_survives_restart_of_the_engine_leaders_fleetd", 3, "issue 12", |c| {
            Box::pin(rollout::rolling_replace_survives_restart_of_the_engine_leaders_fleetd(c))
        })
        .requires(&[Capability::Rollout, Capability::RestartAdopts])
        .needs(HARNESS),
        spec(Rollout, "history_and_rollback_restore_the_previous_version", 3, "issue 12", |c| {
            Box::pin(rollout::history_and_rollback_restore_the_previous_version(c))
        })
        .requires(&[Capability::Rollout])
        .needs(FILES),
    ];
    const TLS: &[Capability] = &[Capability::Tls];
    all.extend([
        spec(Security, "plain_http_to_the_tls_listener_is_refused", 1, "issue 15", |c| {
            Box::pin(security::plain_http_is_refused(c))
        })
        .requires(TLS)
        .needs(HARNESS),
        spec(Security, "clients_without_a_valid_certificate_are_refused", 1, "issue 15", |c| {
            Box::pin(security::clients_without_a_valid_certificate_are_refused(c))
        })
        .requires(TLS)
        .needs(HARNESS),
        spec(Security, "read_role_lists_but_cannot_write", 1, "issue 15", |c| {
            Box::pin(security::read_role_lists_but_cannot_write(c))
        })
        .requires(TLS)
        .needs(HARNESS),
        spec(Security, "admin_role_does_everything", 1, "issue 15", |c| {
            Box::pin(security::admin_role_does_everything(c))
        })
        .requires(TLS)
        .needs(HARNESS),
        spec(Security, "crafted_names_and_bodies_are_refused", 1, "issue 15", |c| {
            Box::pin(security::crafted_names_and_bodies_are_refused(c))
        })
        .requires(TLS)
        .needs(HARNESS),
    ]);
    all.extend(replace::specs());
    all.extend(moves::specs());
    all.extend(rebalance::specs());
    all.extend(cordon::specs());
    all.extend(drain::specs());
    all.extend(audit::specs());
    all.extend(safe_rollout_specs());
    all
}

/// The `safe_rollout` area (issue 34), each on 3 machines.
fn safe_rollout_specs() -> Vec<Spec> {
    use Capability::{Canary, HealthChecks, Rollout, UpdatePolicy};
    const CHECKS: &[Capability] = &[Rollout, HealthChecks];
    const POLICY: &[Capability] = &[Rollout, HealthChecks, UpdatePolicy];
    const CANARY: &[Capability] = &[Rollout, HealthChecks, Canary];
    let s = |name, run: fn(Ctx) -> SpecFuture| spec(Area::SafeRollout, name, 3, "issue 34", run);
    vec![
        s("failing_second_machine_pauses_with_the_third_untouched", |c| {
            Box::pin(safe_rollout::failing_second_machine_pauses_with_the_third_untouched(c))
        })
        .requires(CHECKS)
        .needs(FILES),
        s("failing_second_machine_rolls_back_never_two_down", |c| {
            Box::pin(safe_rollout::failing_second_machine_rolls_back_never_two_down(c))
        })
        .requires(CHECKS)
        .needs(FILES),
        s("slow_sync_keeps_all_but_one_check_passing", |c| {
            Box::pin(safe_rollout::slow_sync_keeps_all_but_one_check_passing(c))
        })
        .requires(CHECKS)
        .needs(FILES),
        s("machine_already_down_counts_against_the_budget", |c| {
            Box::pin(safe_rollout::machine_already_down_counts_against_the_budget(c))
        })
        .requires(CHECKS)
        .needs(HARNESS),
        s("machine_stopped_by_hand_is_changed_first", |c| {
            Box::pin(safe_rollout::machine_stopped_by_hand_is_changed_first(c))
        })
        .requires(CHECKS)
        .needs(FILES),
        s("policy_in_the_unit_rolls_a_plain_replace", |c| {
            Box::pin(safe_rollout::policy_in_the_unit_rolls_a_plain_replace(c))
        })
        .requires(POLICY)
        .needs(FILES),
        s("canary_pauses_until_promoted", |c| Box::pin(safe_rollout::canary_pauses_until_promoted(c)))
            .requires(CANARY)
            .needs(FILES),
        s("order_last_changes_the_primary_last", |c| Box::pin(safe_rollout::order_last_changes_the_primary_last(c)))
            .metadata(&[(1, "role=replica"), (2, "role=replica"), (3, "role=replica")])
            .requires(CANARY)
            .needs(CHANGES),
        s("progress_deadline_fails_a_rollout_that_never_gets_healthy", |c| {
            Box::pin(safe_rollout::progress_deadline_fails_a_rollout_that_never_gets_healthy(c))
        })
        .requires(CANARY)
        .needs(FILES),
        s("abort_returns_changed_machines_within_the_budget", |c| {
            Box::pin(safe_rollout::abort_returns_changed_machines_within_the_budget(c))
        })
        .requires(CANARY)
        .needs(FILES),
        spec(Area::SafeRollout, "check_past_its_timeout_is_published_unhealthy", 1, "issue 34", |c| {
            Box::pin(safe_rollout::check_past_its_timeout_is_published_unhealthy(c))
        })
        .requires(&[HealthChecks]),
        spec(Area::SafeRollout, "fleetd_restart_keeps_the_published_health", 2, "issue 34", |c| {
            Box::pin(safe_rollout::fleetd_restart_keeps_the_published_health(c))
        })
        .requires(&[HealthChecks, Capability::RestartAdopts])
        .needs(HARNESS),
        spec(Area::SafeRollout, "stopped_unit_is_published_unknown", 1, "issue 34", |c| {
            Box::pin(safe_rollout::stopped_unit_is_published_unknown(c))
        })
        .requires(&[HealthChecks]),
    ]
}

/// Whether all values are distinct.
pub(crate) fn distinct<'a>(values: impl IntoIterator<Item = &'a String>) -> bool {
    let v: Vec<&String> = values.into_iter().collect();
    v.iter().collect::<BTreeSet<_>>().len() == v.len()
}

/// `name=machine` pairs for failure messages.
pub(crate) fn placement(map: &BTreeMap<String, String>) -> String {
    map.iter().map(|(u, m)| format!("{u}={}", short(m))).collect::<Vec<_>>().join(", ")
}

/// The first 8 characters of a machine ID.
pub(crate) fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_areas_set() {
        let all = catalogue();
        let names: BTreeSet<String> = all.iter().map(Spec::trial_name).collect();
        assert_eq!(names.len(), all.len());
        // The largest cluster a spec asks for is the rollout area's 5 machines (issue 12: 3- and 5-machine clusters);
        // three such clusters at once still fit the CI machine.
        let largest = all.iter().map(|s| s.machines).max().unwrap_or(0);
        assert!(largest <= 5, "a spec asks for {largest} machines; the CI machine runs three clusters of at most 5");
    }

    /// A live cluster of `machines` machines, with the harness's `hostname=m<k>` metadata when `hostnames`.
    fn live(machines: usize, hostnames: bool, ssh: bool) -> crate::LiveShape {
        let md = |k: usize| {
            if hostnames { [("hostname".to_string(), format!("m{k}"))].into() } else { BTreeMap::new() }
        };
        crate::LiveShape { machines: (1..=machines).map(md).collect(), ssh }
    }

    /// How many specs run against a live cluster (README, "Certifying an implementation or a deployment"): on 3
    /// machines with and without SSH, with and without the harness's metadata; and on 1, 2 and 5 machines.
    #[test]
    fn external_profile_counts_are_the_readmes() {
        let all = catalogue();
        let runs = |shape: crate::LiveShape| all.iter().filter(|s| s.external_verdict(&shape).is_ok()).count();
        let counts = [
            runs(live(3, true, true)),
            runs(live(3, true, false)),
            runs(live(3, false, true)),
            runs(live(3, false, false)),
            runs(live(1, false, true)),
            runs(live(2, false, true)),
            runs(live(5, false, true)),
        ];
        assert_eq!(counts, [34, 29, 33, 28, 24, 26, 26], "update the counts in conformance/README.md with these");
    }

    /// A spec of no machines builds its clusters itself (or needs none, as fleetctl's own): it must say which.
    #[test]
    fn specs_that_start_their_own_clusters_declare_the_harness() {
        for s in catalogue().iter().filter(|s| s.machines == 0 && s.area != Area::Fleetctl) {
            assert!(
                s.needs.contains(&Need::Harness),
                "{} builds its own clusters: declare Need::Harness",
                s.trial_name()
            );
        }
        let shape = live(3, true, true);
        for s in catalogue().iter().filter(|s| s.needs.contains(&Need::Harness)) {
            let why = s.external_verdict(&shape).expect_err("a harness spec never runs against a live cluster");
            assert!(why.starts_with("drives the harness"), "{}: {why}", s.trial_name());
        }
    }

    /// The specs the original Go fleet (v1.0.0-15) failed when run with `ssh,sighup_reload` (issue 13) are each
    /// behind a capability it does not declare, so its declaration runs only what it passes.
    #[test]
    fn what_the_original_failed_is_outside_its_declaration() {
        let original = crate::Capabilities::of(crate::capabilities::ORIGINAL);
        let failed_by_the_original = [
            "global_units::start_waits_until_active_on_every_machine",
            "global_units::stop_unload_destroy_act_on_every_machine",
            "global_units::restart_gives_every_machine_a_new_main_pid",
            "global_units::global_skips_the_machine_of_a_conflicting_unit",
            "replace::global_unit_replaced_on_every_machine_stop_before_start",
            "replace::replaced_template_instance_stays_with_metadata_pin",
            "replace::replace_converges_after_fleetctl_is_killed",
            "replace::r1691_replace_instance_uses_local_template",
            "connectivity::etcd_restart_keeps_units_and_converges",
            "ssh::status_of_a_global_unit_covers_every_machine",
        ];
        let all = catalogue();
        for name in failed_by_the_original {
            let spec = all.iter().find(|s| s.trial_name() == name).unwrap_or_else(|| panic!("{name} not found"));
            assert!(!spec.missing(&original).is_empty(), "{name} runs under the original's declaration");
        }
    }
}

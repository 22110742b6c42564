#![allow(clippy::unwrap_used)]
//! Coscheduling end to end: tests/data/scenarios/gang-group-timeout.yaml,
//! gang.yaml and gang-tainted-node.yaml through `koord-scheduler simulate
//! --output json`.

mod common;

use serde_json::Value;

fn simulate(scenario: &str) -> Value {
    common::simulate_report(scenario, &[])
}

fn placement<'a>(report: &'a Value, pod: &str) -> &'a Value {
    report["placements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pod"] == pod)
        .unwrap_or_else(|| panic!("no placement for {pod}"))
}

#[test]
fn gang_groups_bind_together_and_timed_out_gangs_are_rejected() {
    let report = simulate("gang-group-timeout");

    // The stale PodGroup has waited 10 minutes of its 5: rejected on every
    // node although the cluster was still empty when it was tried.
    for pod in ["default/stale-0", "default/stale-1"] {
        let p = placement(&report, pod);
        assert_eq!(p["node"], Value::Null, "{pod}");
        let reasons = p["reasons"].as_object().unwrap();
        assert_eq!(reasons.len(), 3, "{pod}: {reasons:?}");
        for reason in reasons.values() {
            assert_eq!(
                reason,
                "gang default/stale timed out: its members did not become schedulable together within 5m0s"
            );
        }
    }

    // ps and worker form one group and fill the three nodes together.
    let mut nodes: Vec<String> = ["default/ps-0", "default/worker-0", "default/worker-1"]
        .iter()
        .map(|pod| {
            placement(&report, pod)["node"]
                .as_str()
                .unwrap_or_else(|| panic!("{pod} not placed"))
                .to_string()
        })
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["node-a", "node-b", "node-c"]);

    // db's own gang is complete, but its group partner web is not.
    for pod in ["default/db-0", "default/web-0"] {
        let p = placement(&report, pod);
        assert_eq!(p["node"], Value::Null, "{pod}");
        assert_eq!(
            p["reasons"]["node-a"], "waiting for gang default/web: 1 of 2 members exist",
            "{pod}"
        );
    }

    // The stale group's status stays Scheduling, with its start time kept.
    let stale = &report["podGroups"]["default/stale"];
    assert_eq!(stale["phase"], "Scheduling", "{report}");
    assert_eq!(stale["scheduleStartTime"], "2025-12-31T23:50:00Z");
    assert_eq!(stale["scheduled"], 0);
}

#[test]
fn the_basic_gang_scenario_reports_its_pod_group_scheduled() {
    let report = simulate("gang");
    let pair = &report["podGroups"]["default/pair-job"];
    assert_eq!(pair["phase"], "Scheduled", "{report}");
    assert_eq!(pair["scheduled"], 2);
}

#[test]
fn a_tainted_control_plane_does_not_count_for_members_that_do_not_tolerate_it() {
    let report = simulate("gang-tainted-node");

    // Room on three nodes, usable on two: no member of trio is placed, so
    // none is stranded waiting for a third that can go nowhere.
    for pod in ["default/trio-0", "default/trio-1", "default/trio-2"] {
        let p = placement(&report, pod);
        assert_eq!(p["node"], Value::Null, "{pod}");
        assert_eq!(
            p["reasons"]["worker-a"],
            "waiting for gang default/trio: only 2 of 3 members can be placed together",
            "{pod}"
        );
    }

    // The tolerating gang uses all three nodes.
    let mut nodes: Vec<String> = [
        "default/tolerant-trio-0",
        "default/tolerant-trio-1",
        "default/tolerant-trio-2",
    ]
    .iter()
    .map(|pod| {
        placement(&report, pod)["node"]
            .as_str()
            .unwrap_or_else(|| panic!("{pod} not placed"))
            .to_string()
    })
    .collect();
    nodes.sort();
    assert_eq!(nodes, ["control-plane", "worker-a", "worker-b"]);
}

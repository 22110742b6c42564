#![allow(clippy::unwrap_used)]
//! Reservation placement end to end: the committed
//! tests/data/scenarios/reservation-placement.yaml through
//! `koord-scheduler simulate --output json`.

mod common;

use std::collections::BTreeMap;

use serde_json::{Value, json};

fn simulate(scenario: &str, now: &str) -> BTreeMap<String, Value> {
    common::simulate(scenario, &["--now", now])
}

#[test]
fn pending_reservations_pass_kube_schedulers_node_checks_first() {
    let p = simulate("reservation-placement", "2026-01-01T00:30:00Z");
    let plain = &p["Reservation/r-plain"];
    assert_eq!(plain["node"], "node-d");
    assert_eq!(
        plain["reasons"],
        json!({
            "node-a": "node(s) were unschedulable",
            "node-b": "node(s) had untolerated taint {dedicated: gpu}",
            "node-c": "Insufficient cpu",
        })
    );
    let gpu = &p["Reservation/r-gpu-pool"];
    assert_eq!(gpu["node"], "node-b");
    assert_eq!(
        gpu["reasons"]["node-d"],
        "node(s) didn't match Pod's node affinity/selector"
    );
    let pinned = &p["Reservation/r-pinned"];
    assert_eq!(pinned["node"], "node-c");
    assert_eq!(
        pinned["reasons"]["node-d"],
        "node(s) didn't match the requested node name"
    );
    // Expired before --now: not placed at all.
    assert!(!p.contains_key("Reservation/r-late"), "{:?}", p.keys());

    // Ordinary pods get kube-scheduler's node checks as well: the cordoned
    // and the tainted node are skipped, not just short of cpu.
    assert_eq!(p["default/stranger"]["node"], Value::Null);
    assert_eq!(
        p["default/stranger"]["reasons"],
        json!({
            "node-a": "node(s) were unschedulable",
            "node-b": "node(s) had untolerated taint {dedicated: gpu}",
            "node-c": "Insufficient cpu (held by reservations)",
            "node-d": "Insufficient cpu (held by reservations)",
        })
    );
    let guest = &p["default/gpu-guest"];
    assert_eq!(guest["node"], "node-b", "{guest}");
    assert_eq!(guest["reasons"]["node-a"], "node(s) were unschedulable");
    assert_eq!(p["default/plain-owner"]["node"], "node-d");
    assert_eq!(
        p["default/plain-owner"]["annotations"]["scheduling.koordinator.sh/reservation-allocated"],
        r#"{"name":"r-plain","uid":"r-plain-uid"}"#
    );

    // Half an hour earlier r-late is still valid and placed too.
    let early = simulate("reservation-placement", "2026-01-01T00:05:00Z");
    assert!(early["Reservation/r-late"]["node"].is_string());
}

#[test]
fn a_placed_reservation_holds_its_gpu_and_cpuset_for_its_owner() {
    let p = simulate("reservation-devices", "2026-01-01T00:30:00Z");
    let held = |pod: &str| {
        let annotations = &p[pod]["annotations"];
        let devices: Value = serde_json::from_str(
            annotations["scheduling.koordinator.sh/device-allocated"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let status: Value = serde_json::from_str(
            annotations["scheduling.koordinator.sh/resource-status"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        (devices["gpu"][0]["minor"].clone(), status["cpuset"].clone())
    };
    assert_eq!(held("Reservation/r-train"), (json!(0), json!("0,4")));
    assert_eq!(held("default/stranger"), (json!(1), json!("1,5")));
    assert_eq!(
        p["default/another"]["node"],
        Value::Null,
        "{:?}",
        p["default/another"]
    );
    assert_eq!(held("default/trainer"), (json!(0), json!("0,4")));
    assert_eq!(
        p["default/trainer"]["annotations"]["scheduling.koordinator.sh/reservation-allocated"],
        r#"{"name":"r-train","uid":"r-train-uid"}"#
    );
}

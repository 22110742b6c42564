#![allow(clippy::unwrap_used)]
//! Part-2 plugins end to end: the committed scenarios in
//! tests/data/scenarios through `koord-scheduler simulate --output json`.

mod common;

use common::simulate;
use serde_json::{Value, json};

fn annotation(placement: &Value, key: &str) -> Value {
    serde_json::from_str(placement["annotations"][key].as_str().unwrap()).unwrap()
}

#[test]
fn numa_scenario_pins_whole_cores_and_rejects_what_cannot_fit() {
    let p = simulate("numa", &[]);
    let status = "scheduling.koordinator.sh/resource-status";
    // 6 cpus never fit in one 4-cpu NUMA node under SingleNUMANode.
    assert_eq!(p["default/too-wide"]["node"], Value::Null);
    assert_eq!(
        p["default/too-wide"]["reasons"]["numa-node"],
        "Unaligned NUMA Hint cause cpu prefer [11] among [11]"
    );
    assert_eq!(
        annotation(&p["default/lsr-a"], status),
        json!({"cpuset": "0-1,4-5", "numaNodeResources": [{"node": 0, "resources": {"cpu": "4"}}]})
    );
    // SpreadByPCPUs: one thread on each core of NUMA node 1.
    assert_eq!(annotation(&p["default/lsr-b"], status)["cpuset"], "2-3");
    assert_eq!(annotation(&p["default/lsr-c"], status)["cpuset"], "6-7");
    assert_eq!(p["default/lsr-d"]["node"], Value::Null);
    assert_eq!(
        p["default/lsr-d"]["reasons"]["numa-node"],
        "not enough cpus available to satisfy request"
    );
}

#[test]
fn gang_scenario_places_a_gang_entirely_or_not_at_all() {
    let p = simulate("gang", &[]);
    for member in ["default/big-0", "default/big-1", "default/big-2"] {
        assert_eq!(p[member]["node"], Value::Null, "{member}");
        let reason = p[member]["reasons"]["node-a"].as_str().unwrap();
        assert!(
            reason.starts_with("waiting for gang default/big-job"),
            "{reason}"
        );
    }
    assert_eq!(p["default/pair-0"]["node"], "node-a");
    assert_eq!(p["default/pair-1"]["node"], "node-b");
}

#[test]
fn reservation_scenario_serves_owners_only_and_ignores_expired_ones() {
    let p = simulate("reservation", &["--now", "2026-01-01T00:30:00Z"]);
    // The pending r-new is placed first, through its reserve pod.
    assert_eq!(p["Reservation/r-new"]["node"], "node-r");
    assert_eq!(
        annotation(
            &p["default/late-owner"],
            "scheduling.koordinator.sh/reservation-allocated"
        )["name"],
        "r-new"
    );
    assert_eq!(p["default/stranger"]["node"], Value::Null);
    assert_eq!(
        p["default/stranger"]["reasons"]["node-r"],
        "Insufficient cpu (held by reservations)"
    );
    assert_eq!(p["default/owner"]["node"], "node-r");
    assert_eq!(
        annotation(
            &p["default/owner"],
            "scheduling.koordinator.sh/reservation-allocated"
        ),
        json!({"name": "r-web", "uid": "r-web-uid"})
    );
    // r-old's ttl (10m) has passed: its owner runs without it.
    assert_eq!(p["default/old-owner"]["node"], "node-r");
    assert_eq!(p["default/old-owner"]["annotations"], json!({}));

    // Before r-old expires it holds its 4 cpus too, so the owner's 6 no longer
    // fit beside it, and r-old's owner gets r-old.
    let early = simulate("reservation", &["--now", "2026-01-01T00:05:00Z"]);
    assert_eq!(early["default/owner"]["node"], Value::Null);
    assert_eq!(early["Reservation/r-new"]["node"], Value::Null);
    assert_eq!(
        annotation(
            &early["default/old-owner"],
            "scheduling.koordinator.sh/reservation-allocated"
        )["name"],
        "r-old"
    );
}

#[test]
fn deviceshare_scenario_keeps_whole_gpus_whole() {
    let p = simulate("deviceshare", &[]);
    let allocated = "scheduling.koordinator.sh/device-allocated";
    let minor = |pod: &str| annotation(&p[pod], allocated)["gpu"][0]["minor"].clone();
    assert_eq!(minor("default/half-a"), 0);
    assert_eq!(minor("default/half-b"), 0);
    assert_eq!(minor("default/whole"), 1);
    assert_eq!(
        annotation(&p["default/whole"], allocated)["gpu"][0]["resources"],
        json!({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "17179869184", "koordinator.sh/gpu-memory-ratio": "100"})
    );
    assert_eq!(p["default/another"]["node"], Value::Null);
    assert_eq!(
        p["default/another"]["reasons"]["gpu-node"],
        "Insufficient GPU Devices"
    );
    assert!(
        p["default/invalid"]["reasons"]["gpu-node"]
            .as_str()
            .unwrap()
            .starts_with("invalid resource device requests")
    );
}

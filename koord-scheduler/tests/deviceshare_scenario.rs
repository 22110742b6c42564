#![allow(clippy::unwrap_used)]
//! DeviceShare end to end: the committed
//! tests/data/scenarios/deviceshare-rdma-fpga.yaml,
//! deviceshare-topology.yaml and deviceshare-partitions.yaml through
//! `koord-scheduler simulate --output json`.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::simulate;
use serde_json::{Value, json};

const ALLOCATED: &str = "scheduling.koordinator.sh/device-allocated";

fn allocated(placement: &Value) -> Value {
    serde_json::from_str(placement["annotations"][ALLOCATED].as_str().unwrap()).unwrap()
}

#[test]
fn rdma_and_fpga_scenario_allocates_per_device() {
    let p = simulate("deviceshare-rdma-fpga", &[]);
    let trainer = allocated(&p["default/trainer"]);
    assert_eq!(trainer["gpu"][0]["minor"], 0);
    assert_eq!(
        trainer["rdma"],
        json!([{"minor": 0, "id": "0000:1f:00.0", "resources": {"koordinator.sh/rdma": "100"}}])
    );
    // Least allocated first: the untouched NIC 1.
    assert_eq!(
        allocated(&p["default/nic-share"])["rdma"],
        json!([{"minor": 1, "id": "0000:90:00.0", "resources": {"koordinator.sh/rdma": "30"}}])
    );
    assert_eq!(p["default/two-nics"]["node"], Value::Null);
    assert_eq!(
        p["default/two-nics"]["reasons"]["rdma-node"],
        "Insufficient rdma devices"
    );
    assert_eq!(
        p["default/nic-share"]["reasons"]["cpu-node"],
        "Insufficient rdma devices"
    );
    assert_eq!(
        allocated(&p["default/fpga-a"]),
        json!({"fpga": [{"minor": 0, "resources": {"koordinator.sh/fpga": "60"}}]})
    );
    // FPGA 1 is unhealthy, and 40 is left of FPGA 0.
    assert_eq!(p["default/fpga-b"]["node"], Value::Null);
    assert_eq!(
        p["default/fpga-b"]["reasons"]["rdma-node"],
        "Insufficient fpga devices"
    );
    assert_eq!(
        p["default/odd-rdma"]["reasons"]["rdma-node"],
        "invalid resource unit koordinator.sh/rdma: 150"
    );
    assert_eq!(
        allocated(&p["default/vf-user"])["rdma"],
        json!([{"minor": 1, "id": "0000:90:00.0", "resources": {"koordinator.sh/rdma": "1"},
                "extension": {"vfs": [{"minor": 1, "busID": "0000:90:00.2"}]}}])
    );
}

/// tests/data/scenarios/deviceshare-topology.yaml under `--config`.
fn simulate_with_config(config: &str) -> BTreeMap<String, Value> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let output = Command::new(env!("CARGO_BIN_EXE_koord-scheduler"))
        .args(["--config", &format!("{dir}/tests/data/{config}.yaml")])
        .args(["simulate", "--output", "json", "--snapshot"])
        .arg(format!(
            "{dir}/tests/data/scenarios/deviceshare-topology.yaml"
        ))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    report["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["pod"].as_str().unwrap().to_string(), p.clone()))
        .collect()
}

#[test]
fn device_pods_avoid_deviceless_nodes_and_joint_allocation_keeps_the_pcie_switch() {
    let p = simulate("deviceshare-topology", &[]);
    // No Device CR and nothing advertised: never chosen, reason readable.
    for pod in ["default/share-1", "default/share-2"] {
        assert_eq!(
            p[pod]["reasons"]["cpu-only"],
            "Insufficient koordinator.sh/gpu-core, Insufficient koordinator.sh/gpu-memory-ratio"
        );
    }
    // Upstream's default LeastAllocated spreads the shares.
    assert_eq!(p["default/share-1"]["node"], "gpu-a");
    assert_eq!(p["default/share-2"]["node"], "gpu-b");
    // The trainer's GPU and NIC share pcie-0 on gpu-a; gpu-b has no NIC there.
    let trainer = &p["default/trainer"];
    assert_eq!(trainer["node"], "gpu-a");
    assert_eq!(
        trainer["reasons"]["gpu-b"],
        "node(s) Device Joint-Allocate rules violation"
    );
    assert_eq!(
        trainer["reasons"]["cpu-only"],
        "Insufficient nvidia.com/gpu, Insufficient koordinator.sh/rdma"
    );
    let allocation = allocated(trainer);
    assert_eq!(allocation["gpu"][0]["minor"], 1);
    // Upstream's fillID: the Device CR's id of the allocated device.
    assert_eq!(allocation["gpu"][0]["id"], "GPU-1");
    assert_eq!(
        allocation["rdma"],
        json!([{"minor": 1, "id": "0000:0f:00.0", "resources": {"koordinator.sh/rdma": "1"}}])
    );
    let too_big = &p["default/too-big"];
    assert_eq!(too_big["node"], Value::Null);
    assert_eq!(too_big["reasons"]["gpu-a"], "Insufficient GPU Devices");
    assert_eq!(
        too_big["reasons"]["cpu-only"],
        "Insufficient nvidia.com/gpu"
    );
}

#[test]
fn most_allocated_scoring_packs_gpu_shares_onto_one_gpu() {
    let p = simulate_with_config("deviceshare-most-allocated");
    for pod in ["default/share-1", "default/share-2"] {
        assert_eq!(p[pod]["node"], "gpu-a", "{pod}");
        assert_eq!(allocated(&p[pod])["gpu"][0]["minor"], 0, "{pod}");
    }
    let scores = &p["default/share-2"]["scores"];
    assert!(
        scores["gpu-a"].as_i64().unwrap() > scores["gpu-b"].as_i64().unwrap(),
        "{scores}"
    );
}

#[test]
fn nvlink_partitions_keep_larger_partitions_whole_and_refuse_other_counts() {
    let p = simulate("deviceshare-partitions", &[]);
    let minors = |pod: &str| -> Vec<i64> {
        allocated(&p[pod])["gpu"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["minor"].as_i64().unwrap())
            .collect()
    };
    // GPU 4 is held: the pair 6-7 keeps the quad 0-3 whole.
    assert_eq!(minors("default/pair"), vec![6, 7]);
    assert_eq!(p["default/three"]["node"], Value::Null);
    assert_eq!(
        p["default/three"]["reasons"]["nvlink"],
        "node(s) Unsupported number of GPU requests"
    );
    assert_eq!(minors("default/quad"), vec![0, 1, 2, 3]);
    assert_eq!(p["default/second-quad"]["node"], Value::Null);
    assert_eq!(
        p["default/second-quad"]["reasons"]["nvlink"],
        "Insufficient Partitioned GPU Devices"
    );
}

#![allow(clippy::unwrap_used)]
//! DeviceShare's RDMA and FPGA end to end: the committed
//! tests/data/scenarios/deviceshare-rdma-fpga.yaml through
//! `koord-scheduler simulate --output json`.

mod common;

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
        json!([{"minor": 0, "resources": {"koordinator.sh/rdma": "100"}}])
    );
    // Least allocated first: the untouched NIC 1.
    assert_eq!(
        allocated(&p["default/nic-share"])["rdma"],
        json!([{"minor": 1, "resources": {"koordinator.sh/rdma": "30"}}])
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
        json!([{"minor": 1, "resources": {"koordinator.sh/rdma": "1"},
                "extension": {"vfs": [{"minor": 1, "busID": "0000:90:00.2"}]}}])
    );
}

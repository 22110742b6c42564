//! GPU partitions: the pure allocator and DeviceShare end to end, with
//! upstream's `TestAllocateByPartition` cases (as facts) on its 8-GPU
//! H800 Device.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use apis::extension::device_share::{
    ANNOTATION_GPU_PARTITION_SPEC, ANNOTATION_GPU_PARTITIONS, GPUPartitionTable, LABEL_GPU_MODEL,
    LABEL_GPU_PARTITION_POLICY,
};
use serde_json::{Value, json};

use super::partition::{
    ERR_INSUFFICIENT_PARTITIONED_DEVICE, ERR_NODE_MISSING_GPU_PARTITION_TABLE,
    ERR_UNSUPPORTED_GPU_REQUESTS, MinorSet, NodePartitions, Occupancy, PartitionIndex, Placement,
    PodPartitionSpec, allocate,
};
use super::*;
use crate::cache::Object;
use crate::framework::Scheduler;
use crate::testutil::{self, PodSpec, t0};

fn occupancy(used: &[i32], total: std::ops::Range<i32>) -> Occupancy {
    Occupancy {
        used: MinorSet::of(used.iter().copied()),
        total: MinorSet::of(total),
    }
}

fn hopper(honor: bool) -> NodePartitions {
    NodePartitions {
        index: Some(PartitionIndex::nvidia_hopper()),
        honor,
    }
}

fn place(
    node: &NodePartitions,
    pod: Option<&PodPartitionSpec>,
    count: i64,
    used: &[i32],
) -> Result<Option<Vec<i32>>, PartitionRefusal> {
    allocate(Placement { node, pod }, count, false, occupancy(used, 0..8))
}

#[test]
fn the_hopper_table_packs_as_upstreams_cases() {
    let honor = hopper(true);
    assert_eq!(place(&honor, None, 1, &[]).unwrap(), Some(vec![0]));
    assert_eq!(place(&honor, None, 2, &[]).unwrap(), Some(vec![0, 1]));
    assert_eq!(place(&honor, None, 4, &[]).unwrap(), Some(vec![0, 1, 2, 3]));
    assert_eq!(
        place(&honor, None, 8, &[]).unwrap(),
        Some((0..8).collect::<Vec<_>>())
    );
    // GPUs 2 and 3 used: the pair 0, 1.
    assert_eq!(place(&honor, None, 2, &[2, 3]).unwrap(), Some(vec![0, 1]));
    // GPU 4 used: the pair 6, 7 keeps the quad 0–3 whole; one GPU goes
    // beside 4 (5).
    assert_eq!(place(&honor, None, 2, &[4]).unwrap(), Some(vec![6, 7]));
    assert_eq!(place(&honor, None, 1, &[4]).unwrap(), Some(vec![5]));
    // Counts the table does not list cannot be placed while honoured.
    for count in [3, 6] {
        let rejection = place(&honor, None, count, &[]).unwrap_err();
        assert_eq!(rejection.reason, ERR_UNSUPPORTED_GPU_REQUESTS);
        assert!(rejection.unresolvable);
    }
    // Every quad touched: no free partition of four.
    let rejection = place(&honor, None, 4, &[0, 4]).unwrap_err();
    assert_eq!(rejection.reason, ERR_INSUFFICIENT_PARTITIONED_DEVICE);
    assert!(!rejection.unresolvable);
    // An unhealthy GPU is not in the total: its partitions are out.
    assert_eq!(
        allocate(
            Placement {
                node: &honor,
                pod: None
            },
            4,
            false,
            Occupancy {
                used: MinorSet::default(),
                total: MinorSet::of([0, 1, 2, 4, 5, 6, 7]),
            },
        )
        .unwrap(),
        Some(vec![4, 5, 6, 7])
    );

    // Preferred: failures fall back to the ordinary placement.
    let prefer = hopper(false);
    assert_eq!(place(&prefer, None, 3, &[]).unwrap(), None);
    assert_eq!(place(&prefer, None, 4, &[0, 4]).unwrap(), None);
    assert_eq!(place(&prefer, None, 2, &[4]).unwrap(), Some(vec![6, 7]));
    // A pod spec makes a preferred table binding for that pod.
    let spec = PodPartitionSpec {
        restricted: false,
        ring_bus_bandwidth: None,
    };
    assert_eq!(
        place(&prefer, Some(&spec), 3, &[]).unwrap_err().reason,
        ERR_UNSUPPORTED_GPU_REQUESTS
    );
    // Shared requests never use partitions, even when honoured.
    assert_eq!(
        allocate(
            Placement {
                node: &honor,
                pod: Some(&spec)
            },
            1,
            true,
            occupancy(&[], 0..8)
        )
        .unwrap(),
        None
    );
    // No table: binding only with the pod's spec or Honor.
    let none = NodePartitions {
        index: None,
        honor: false,
    };
    assert_eq!(place(&none, None, 2, &[]).unwrap(), None);
    let rejection = place(&none, Some(&spec), 2, &[]).unwrap_err();
    assert_eq!(rejection.reason, ERR_NODE_MISSING_GPU_PARTITION_TABLE);
    assert!(rejection.unresolvable);
}

fn table(value: Value) -> (PartitionIndex, Vec<String>) {
    let table: GPUPartitionTable = serde_json::from_value(value).unwrap();
    PartitionIndex::from_table(&table)
}

#[test]
fn score_tiers_restricted_best_effort_and_ring_bandwidth() {
    // Two tiers of pairs: score 1 (0,1) and (2,3); score 2 (4,5).
    let (index, problems) = table(json!({
        "2": [
            {"minors": [4, 5], "allocationScore": 2, "ringBusBandwidth": "400Gi"},
            {"minors": [0, 1], "allocationScore": 1, "ringBusBandwidth": "200Gi"},
            {"minors": [2, 3], "allocationScore": 1}
        ]
    }));
    assert!(problems.is_empty(), "{problems:?}");
    let node = NodePartitions {
        index: Some(Arc::new(index)),
        honor: true,
    };
    let best_effort = PodPartitionSpec {
        restricted: false,
        ring_bus_bandwidth: None,
    };
    let restricted = PodPartitionSpec {
        restricted: true,
        ring_bus_bandwidth: None,
    };
    // The lowest score tier first (upstream's sort order).
    assert_eq!(
        place(&node, Some(&best_effort), 2, &[]).unwrap(),
        Some(vec![0, 1])
    );
    // Its pairs used: best effort moves on, restricted does not.
    assert_eq!(
        place(&node, Some(&best_effort), 2, &[0, 2]).unwrap(),
        Some(vec![4, 5])
    );
    assert_eq!(
        place(&node, Some(&restricted), 2, &[0, 2])
            .unwrap_err()
            .reason,
        ERR_INSUFFICIENT_PARTITIONED_DEVICE
    );
    // A bandwidth wish skips partitions below it or without one.
    let fast = PodPartitionSpec {
        restricted: false,
        ring_bus_bandwidth: Some(apis::extension::QuantityValue::parse("300Gi").unwrap()),
    };
    assert_eq!(place(&node, Some(&fast), 2, &[]).unwrap(), Some(vec![4, 5]));
    let fastest = PodPartitionSpec {
        restricted: false,
        ring_bus_bandwidth: Some(apis::extension::QuantityValue::parse("1Ti").unwrap()),
    };
    assert_eq!(
        place(&node, Some(&fastest), 2, &[]).unwrap_err().reason,
        ERR_INSUFFICIENT_PARTITIONED_DEVICE
    );

    // Partitions the scheduler cannot use are left out with a reason.
    let (index, problems) = table(json!({
        "2": [{"minors": [-1, 0]}, {"minors": [127, 128]}, {"minors": []}, {"minors": [6, 7]}]
    }));
    assert_eq!(problems.len(), 3, "{problems:?}");
    let node = NodePartitions {
        index: Some(Arc::new(index)),
        honor: true,
    };
    assert_eq!(place(&node, None, 2, &[]).unwrap(), Some(vec![6, 7]));
}

#[test]
fn the_designated_table_needs_an_nvidia_hopper_model() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    for model in ["H100", "H800", "H20"] {
        let designated = NodePartitions::designated(&labels(&[(LABEL_GPU_MODEL, model)]));
        assert!(designated.index.is_some(), "{model}");
        assert!(!designated.honor);
    }
    let honored = NodePartitions::designated(&labels(&[
        (LABEL_GPU_MODEL, "H800"),
        ("node.koordinator.sh/gpu-vendor", "nvidia"),
        (LABEL_GPU_PARTITION_POLICY, "Honor"),
    ]));
    assert!(honored.index.is_some() && honored.honor);
    assert!(
        NodePartitions::designated(&labels(&[(LABEL_GPU_MODEL, "A100-SXM4-80GB")]))
            .index
            .is_none()
    );
    assert!(
        NodePartitions::designated(&labels(&[
            (LABEL_GPU_MODEL, "H800"),
            ("node.koordinator.sh/gpu-vendor", "huawei")
        ]))
        .index
        .is_none()
    );
}

/// Upstream's fake H800 Device's GPUs: minors 0–3 on NUMA node 0, 4–7 on
/// node 1, each GPU on its own PCIe root; `annotations` and `labels` for
/// the Device itself.
fn h800_device(node: &str, annotations: Value, labels: Value) -> Object {
    let pcie = ["0", "2", "3", "4", "5", "6", "7", "8"];
    let devices: Vec<Value> = (0..8)
        .map(|minor: usize| {
            json!({"type": "gpu", "id": format!("GPU-{minor}"), "minor": minor, "health": true,
                   "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "83201216Ki", "koordinator.sh/gpu-memory-ratio": "100"},
                   "topology": {"socketID": minor / 4, "nodeID": minor / 4, "pcieID": pcie[minor]}})
        })
        .collect();
    Object::Device(
        serde_json::from_value(json!({
            "metadata": {"name": node, "annotations": annotations, "labels": labels},
            "spec": {"devices": devices}
        }))
        .unwrap(),
    )
}

fn labelled_node(name: &str, labels: Value) -> Object {
    Object::Node(
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "64"}}
        }))
        .unwrap(),
    )
}

fn gpus_pod(name: &str, count: &str, spec: Option<&str>) -> Object {
    let requests = [("nvidia.com/gpu", count)];
    let annotations: Vec<(&str, &str)> = spec
        .map(|s| (ANNOTATION_GPU_PARTITION_SPEC, s))
        .into_iter()
        .collect();
    testutil::pod(PodSpec {
        name,
        requests: &requests,
        limits: &requests,
        annotations: &annotations,
        ..Default::default()
    })
}

fn gpu_minors(s: &mut Scheduler, pod: &str, node: &str) -> Result<Vec<i32>, String> {
    let reserved = s
        .reserve(&format!("default/{pod}"), node, t0())
        .map_err(|e| e.to_string())?;
    let value: BTreeMap<String, Vec<DeviceAllocation>> =
        serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap();
    let minors = value["gpu"].iter().map(|a| a.minor).collect();
    s.rollback(&reserved);
    Ok(minors)
}

/// One node `n1` labelled with `model` and `policy`, upstream's H800 GPUs,
/// a pod holding `held`, and a pod `want` asking for `count` GPUs.
fn hopper_node(model: &str, policy: &str, held: &[i32], count: &str) -> Scheduler {
    let mut s = testutil::scheduler("");
    let mut objects = vec![
        labelled_node(
            "n1",
            json!({LABEL_GPU_MODEL: model, LABEL_GPU_PARTITION_POLICY: policy}),
        ),
        h800_device("n1", json!({}), json!({})),
        gpus_pod("want", count, None),
    ];
    if !held.is_empty() {
        objects.push(testutil::whole_gpu_holder("held", "n1", held));
    }
    testutil::load(&mut s, objects);
    s
}

/// (GPU model label, partition policy label, GPUs held, GPUs wanted,
/// expected minors).
type Case = (
    &'static str,
    &'static str,
    &'static [i32],
    &'static str,
    &'static [i32],
);

#[test]
fn upstreams_allocate_by_partition_cases_on_the_h800_device() {
    let cases: [Case; 10] = [
        // (model, policy, held, wanted, expected minors)
        ("H800", "Honor", &[], "1", &[0]),
        ("H800", "Honor", &[], "2", &[0, 1]),
        ("H800", "Honor", &[], "4", &[0, 1, 2, 3]),
        ("H800", "Honor", &[], "8", &[0, 1, 2, 3, 4, 5, 6, 7]),
        ("H800", "Honor", &[2, 3], "2", &[0, 1]),
        ("H800", "Honor", &[4], "2", &[6, 7]),
        ("H800", "Honor", &[4], "1", &[5]),
        ("H100", "Honor", &[2, 3], "2", &[0, 1]),
        // Preferred and no partition of three: upstream's topology walk,
        // one NUMA node with three free GPUs.
        ("H100", "Prefer", &[2, 3], "3", &[4, 5, 6]),
        // Not a Hopper model and preferred: no table, the topology walk
        // (the busier NUMA node among equals).
        ("A100", "Prefer", &[4], "2", &[5, 6]),
    ];
    for (model, policy, held, count, expected) in cases {
        let mut s = hopper_node(model, policy, held, count);
        assert_eq!(
            gpu_minors(&mut s, "want", "n1").unwrap(),
            expected,
            "{model} {policy} held {held:?} want {count}"
        );
    }
    // Three and six GPUs cannot be placed on an honoured H800.
    for count in ["3", "6"] {
        let s = hopper_node("H800", "Honor", &[], count);
        assert_eq!(
            testutil::filter(&s, "default/want", t0()).failed_unresolvable["n1"],
            ERR_UNSUPPORTED_GPU_REQUESTS,
            "{count}"
        );
    }
    // Honoured without any table: the node cannot say where the links are.
    let s = hopper_node("A100", "Honor", &[], "2");
    assert_eq!(
        testutil::filter(&s, "default/want", t0()).failed_unresolvable["n1"],
        ERR_NODE_MISSING_GPU_PARTITION_TABLE
    );
    // Eight with one GPU taken: insufficient, and worth retrying later.
    let s = hopper_node("H800", "Honor", &[0], "8");
    assert_eq!(
        testutil::filter(&s, "default/want", t0()).failed["n1"],
        ERR_INSUFFICIENT_PARTITIONED_DEVICE
    );
}

#[test]
fn the_devices_own_table_and_policy_win_over_the_node_labels() {
    // The Device says: pairs (0,4) and (1,5) only, honoured. The node's
    // labels would designate the Hopper table and Prefer.
    let partitions = json!({
        "2": [{"minors": [0, 4], "gpuLinkType": "NVLink", "allocationScore": 1},
              {"minors": [1, 5], "gpuLinkType": "NVLink", "allocationScore": 1}]
    })
    .to_string();
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            labelled_node(
                "n1",
                json!({LABEL_GPU_MODEL: "H800", LABEL_GPU_PARTITION_POLICY: "Prefer"}),
            ),
            h800_device(
                "n1",
                json!({ANNOTATION_GPU_PARTITIONS: partitions}),
                json!({LABEL_GPU_PARTITION_POLICY: "Honor"}),
            ),
            gpus_pod("two", "2", None),
            gpus_pod("four", "4", None),
            testutil::whole_gpu_holder("held", "n1", &[4]),
        ],
    );
    assert_eq!(gpu_minors(&mut s, "two", "n1").unwrap(), vec![1, 5]);
    assert_eq!(
        testutil::filter(&s, "default/four", t0()).failed_unresolvable["n1"],
        ERR_UNSUPPORTED_GPU_REQUESTS
    );
}

#[test]
fn the_pods_partition_spec_binds_and_is_validated() {
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            // A node without any table and without a Hopper model.
            labelled_node("plain", json!({LABEL_GPU_MODEL: "A100"})),
            h800_device("plain", json!({}), json!({})),
            // A preferred Hopper node.
            labelled_node("hopper", json!({LABEL_GPU_MODEL: "H800"})),
            h800_device("hopper", json!({}), json!({})),
            gpus_pod("spec", "2", Some(r#"{"allocatePolicy":"Restricted"}"#)),
            gpus_pod("three", "3", Some("{}")),
            gpus_pod("no-spec-three", "3", None),
            gpus_pod("bad", "2", Some(r#"{"allocatePolicy":"Sometimes"}"#)),
            gpus_pod("bad-bandwidth", "2", Some(r#"{"ringBusBandwidth":"fast"}"#)),
        ],
    );
    let outcome = testutil::filter(&s, "default/spec", t0());
    assert_eq!(
        outcome.failed_unresolvable["plain"],
        ERR_NODE_MISSING_GPU_PARTITION_TABLE
    );
    assert!(
        outcome.feasible.contains(&"hopper".to_string()),
        "{outcome:?}"
    );
    assert_eq!(gpu_minors(&mut s, "spec", "hopper").unwrap(), vec![0, 1]);
    // With a spec, three GPUs cannot be placed on the Hopper node; without
    // one, the preferred table falls back to the topology walk.
    assert_eq!(
        testutil::filter(&s, "default/three", t0()).failed_unresolvable["hopper"],
        ERR_UNSUPPORTED_GPU_REQUESTS
    );
    assert_eq!(
        gpu_minors(&mut s, "no-spec-three", "hopper").unwrap(),
        vec![0, 1, 2]
    );
    for pod in ["bad", "bad-bandwidth"] {
        let outcome = testutil::filter(&s, &format!("default/{pod}"), t0());
        let reason = &outcome.failed_unresolvable["hopper"];
        assert!(
            reason.starts_with("invalid GPUPartitionSpec annotation, err: "),
            "{pod}: {reason}"
        );
    }
}

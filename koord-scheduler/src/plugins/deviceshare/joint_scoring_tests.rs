//! Joint GPU + RDMA allocation by PCIe switch and the node score, with
//! cases taken from upstream's deviceshare tests (as facts).
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::*;
use crate::cache::Object;
use crate::framework::Scheduler;
use crate::testutil::{self, PodSpec, t0};

/// Upstream's fake topology: 8 GPUs, two per PCIe switch (pcie-0 holds
/// GPUs 0 and 1, …), and one RDMA NIC per switch, minors 1 to 4. `nics`
/// limits which switches get their NIC.
fn topology_device(node: &str, nics: &[usize]) -> Object {
    let mut devices: Vec<Value> = (0..8)
        .map(|minor| {
            json!({"type": "gpu", "minor": minor, "health": true,
                   "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi", "koordinator.sh/gpu-memory-ratio": "100"},
                   "topology": {"socketID": minor / 4, "nodeID": minor / 4, "pcieID": format!("pcie-{}", minor / 2)}})
        })
        .collect();
    for &pcie in nics {
        devices.push(json!({"type": "rdma", "minor": pcie + 1, "health": true,
            "resources": {"koordinator.sh/rdma": "100"},
            "topology": {"socketID": pcie / 2, "nodeID": pcie / 2, "pcieID": format!("pcie-{pcie}")}}));
    }
    Object::Device(
        serde_json::from_value(json!({"metadata": {"name": node}, "spec": {"devices": devices}}))
            .unwrap(),
    )
}

fn pod(name: &str, requests: &[(&str, &str)], joint: Option<&str>) -> Object {
    let annotations: Vec<(&str, &str)> = joint
        .map(|j| {
            (
                apis::extension::device_share::ANNOTATION_DEVICE_JOINT_ALLOCATE,
                j,
            )
        })
        .into_iter()
        .collect();
    testutil::pod(PodSpec {
        name,
        requests,
        limits: requests,
        annotations: &annotations,
        ..Default::default()
    })
}

const SAME_PCIE: &str = r#"{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}"#;
const PREFERRED: &str = r#"{"deviceTypes":["gpu","rdma"]}"#;

fn allocated_minors(
    s: &mut Scheduler,
    pod: &str,
    node: &str,
) -> Result<(Vec<i32>, Vec<i32>), String> {
    let reserved = s
        .reserve(&format!("default/{pod}"), node, t0())
        .map_err(|e| e.to_string())?;
    let value: BTreeMap<String, Vec<DeviceAllocation>> =
        serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap();
    let minors = |kind: &str| {
        value
            .get(kind)
            .into_iter()
            .flatten()
            .map(|a| a.minor)
            .collect::<Vec<_>>()
    };
    let result = (minors("gpu"), minors("rdma"));
    s.rollback(&reserved);
    Ok(result)
}

#[test]
fn same_pcie_joint_allocation_follows_the_gpus_switches() {
    // Upstream's TestAutopilotAllocator: N GPUs and rdma 1 with SamePCIe
    // get the NICs of exactly the GPUs' switches.
    let cases: [(&str, &[i32]); 5] = [
        ("1", &[1]),
        ("2", &[1]),
        ("3", &[1, 2]),
        ("4", &[1, 2]),
        ("8", &[1, 2, 3, 4]),
    ];
    for (gpus, nics) in cases {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "64")]),
                topology_device("n1", &[0, 1, 2, 3]),
                pod(
                    "trainer",
                    &[("nvidia.com/gpu", gpus), ("koordinator.sh/rdma", "1")],
                    Some(SAME_PCIE),
                ),
            ],
        );
        let (gpu, rdma) = allocated_minors(&mut s, "trainer", "n1").unwrap();
        let count: usize = gpus.parse().unwrap();
        assert_eq!(gpu.len(), count, "{gpus} GPUs");
        assert_eq!(rdma, nics, "{gpus} GPUs");
    }
}

#[test]
fn a_required_switch_without_a_nic_violates_the_joint_rule_a_preferred_one_does_not() {
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            testutil::node("n1", &[("cpu", "64")]),
            // Only pcie-3 has a NIC; the first GPU picked sits on pcie-0.
            topology_device("n1", &[3]),
            pod(
                "required",
                &[("nvidia.com/gpu", "1"), ("koordinator.sh/rdma", "1")],
                Some(SAME_PCIE),
            ),
            pod(
                "preferred",
                &[("nvidia.com/gpu", "1"), ("koordinator.sh/rdma", "1")],
                Some(PREFERRED),
            ),
            pod(
                "alone",
                &[("nvidia.com/gpu", "1"), ("koordinator.sh/rdma", "1")],
                None,
            ),
        ],
    );
    assert_eq!(
        testutil::filter(&s, "default/required", t0()).failed["n1"],
        joint::ERR_JOINT_RULES_VIOLATION
    );
    assert_eq!(
        allocated_minors(&mut s, "preferred", "n1").unwrap(),
        (vec![0], vec![4])
    );
    assert_eq!(
        allocated_minors(&mut s, "alone", "n1").unwrap(),
        (vec![0], vec![4])
    );
}

#[test]
fn preferred_switches_are_taken_one_nic_each_before_others() {
    // NIC 1 (pcie-0) is half used. The joint pod's GPU 0 sits on pcie-0,
    // so its NIC comes from there; without a joint rule the least used NIC
    // wins instead.
    let mut s = testutil::scheduler("");
    let busy = testutil::pod(PodSpec {
        name: "busy",
        node: Some("n1"),
        requests: &[("koordinator.sh/rdma", "50")],
        annotations: &[(
            ANNOTATION_DEVICE_ALLOCATED,
            r#"{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"50"}}]}"#,
        )],
        ..Default::default()
    });
    testutil::load(
        &mut s,
        vec![
            testutil::node("n1", &[("cpu", "64")]),
            topology_device("n1", &[0, 1, 2, 3]),
            busy,
            pod(
                "joint",
                &[("nvidia.com/gpu", "1"), ("koordinator.sh/rdma", "10")],
                Some(PREFERRED),
            ),
            pod(
                "plain",
                &[("nvidia.com/gpu", "1"), ("koordinator.sh/rdma", "10")],
                None,
            ),
        ],
    );
    // GPU 0 on pcie-0: the joint pod takes pcie-0's half-used NIC 1.
    assert_eq!(
        allocated_minors(&mut s, "joint", "n1").unwrap(),
        (vec![0], vec![1])
    );
    // Alone, the least allocated NIC: 2.
    assert_eq!(
        allocated_minors(&mut s, "plain", "n1").unwrap(),
        (vec![0], vec![2])
    );
}

#[test]
fn invalid_joint_annotations_are_unresolvable() {
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            testutil::node("n1", &[("cpu", "64")]),
            topology_device("n1", &[0]),
            pod(
                "bad",
                &[("nvidia.com/gpu", "1"), ("koordinator.sh/rdma", "1")],
                Some(r#"{"deviceTypes":["gpu","tpu"]}"#),
            ),
            pod(
                "garbled",
                &[("nvidia.com/gpu", "1"), ("koordinator.sh/rdma", "1")],
                Some("{"),
            ),
        ],
    );
    for name in ["bad", "garbled"] {
        let outcome = testutil::filter(&s, &format!("default/{name}"), t0());
        assert!(
            outcome.failed_unresolvable["n1"]
                .starts_with("invalid DeviceJointAllocate annotation, err: "),
            "{name}: {outcome:?}"
        );
    }
}

/// Two nodes with two 16Gi GPUs each; on `busy` GPU 0 is half used.
fn two_nodes(config: &str) -> Scheduler {
    let mut s = testutil::scheduler(config);
    let half_used = testutil::pod(PodSpec {
        name: "half-used",
        node: Some("busy"),
        requests: &[
            ("koordinator.sh/gpu-core", "50"),
            ("koordinator.sh/gpu-memory-ratio", "50"),
        ],
        annotations: &[(
            ANNOTATION_DEVICE_ALLOCATED,
            r#"{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory-ratio":"50"}}]}"#,
        )],
        ..Default::default()
    });
    testutil::load(
        &mut s,
        vec![
            testutil::node("busy", &[("cpu", "8")]),
            super::tests::device("busy", 2),
            testutil::node("idle", &[("cpu", "8")]),
            super::tests::device("idle", 2),
            half_used,
            pod(
                "share",
                &[
                    ("koordinator.sh/gpu-core", "25"),
                    ("koordinator.sh/gpu-memory-ratio", "25"),
                ],
                None,
            ),
            testutil::pod(PodSpec {
                name: "no-devices",
                requests: &[("cpu", "1")],
                ..Default::default()
            }),
        ],
    );
    s
}

#[test]
fn least_allocated_by_default_spreads_and_most_allocated_packs() {
    let only = |args: &str| testutil::only(NAME, args);
    // Default (LeastAllocated over gpu-memory-ratio and gpu-memory): busy
    // has 75 of 200 % used after the pod, idle 25: idle scores higher.
    // Raw: busy (200−75)×100/200 = 62, idle (200−25)×100/200 = 87, for
    // both resources; normalized to the best: 62×100/87 = 71, 100.
    let s = two_nodes(&only("{}"));
    assert_eq!(
        testutil::scores(&s, "default/share", &["busy", "idle"], t0()),
        vec![71, 100]
    );
    // MostAllocated: busy 37, idle 12 → 100, 32.
    let most = r#"{scoringStrategy: {type: MostAllocated, resources: [{name: koordinator.sh/gpu-memory-ratio, weight: 1}]}}"#;
    let s = two_nodes(&only(most));
    assert_eq!(
        testutil::scores(&s, "default/share", &["busy", "idle"], t0()),
        vec![100, 32]
    );
    // A pod without devices: DeviceShare sits scoring out (no weight).
    let pod = s.cache.pod("default/no-devices").unwrap().clone();
    let state = s.pre_filter(&pod, t0()).unwrap();
    assert_eq!(s.score(&pod, &["busy".to_string()], &state).weight_sum, 0);
}

#[test]
fn invalid_scoring_args_are_refused() {
    let build = |args: Value| super::build(Some(&args)).err().map(|e| e.to_string());
    assert!(
        build(json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}))
            .unwrap()
            .contains("scoring strategy RequestedToCapacityRatio is not supported")
    );
    assert!(
        build(json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "koordinator.sh/rdma", "weight": 101}]}}))
            .unwrap()
            .contains("not in valid range (0, 100]")
    );
    assert!(build(json!({"scoringStrategy": {"type": "LeastAllocated"}})).is_none());
}

fn scoped(name: &str, requests: &[(&str, &str)], scope: &str) -> Object {
    let hint = format!(r#"{{"gpu":{{"requiredTopologyScope":"{scope}"}}}}"#);
    testutil::pod(PodSpec {
        name,
        requests,
        limits: requests,
        annotations: &[(
            apis::extension::device_share::ANNOTATION_DEVICE_ALLOCATE_HINT,
            &hint,
        )],
        ..Default::default()
    })
}

#[test]
fn required_topology_scope_keeps_gpus_within_one_switch_or_numa_node() {
    // Upstream's allocator_gpu_test facts on the same 8-GPU topology.
    let base = |held: &[i32]| {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "64")]),
                topology_device("n1", &[]),
                testutil::whole_gpu_holder("held", "n1", held),
                scoped("pcie", &[("nvidia.com/gpu", "2")], "PCIe"),
                scoped("numa", &[("nvidia.com/gpu", "4")], "NUMANode"),
            ],
        );
        s
    };
    // GPU 5 used: two GPUs on one switch go to pcie-3 (6, 7), beside the
    // used NUMA node 1, not to the empty pcie-0.
    let mut s = base(&[5]);
    assert_eq!(
        allocated_minors(&mut s, "pcie", "n1").unwrap().0,
        vec![6, 7]
    );
    // Four on one NUMA node: only NUMA node 0 has four free.
    assert_eq!(
        allocated_minors(&mut s, "numa", "n1").unwrap().0,
        vec![0, 1, 2, 3]
    );
    // GPUs 0 and 5 used: no NUMA node has four free.
    let s = base(&[0, 5]);
    assert_eq!(
        testutil::filter(&s, "default/numa", t0()).failed["n1"],
        ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES
    );
}

#[test]
fn several_gpus_without_a_required_scope_still_prefer_one_switch_then_one_numa_node() {
    // Upstream's tree walk runs without a required scope too: the deepest
    // scope holding enough free GPUs wins, the busier one among equals.
    let base = |held: &[i32]| {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "64")]),
                topology_device("n1", &[]),
                testutil::whole_gpu_holder("held", "n1", held),
                pod("two", &[("nvidia.com/gpu", "2")], None),
            ],
        );
        s
    };
    // Nothing used: the first switch.
    assert_eq!(
        allocated_minors(&mut base(&[]), "two", "n1").unwrap().0,
        vec![0, 1]
    );
    // GPUs 0 and 5 used: switches 1 (2, 3) and 3 (6, 7) have two free; 2 and
    // 3 come first, not 1 and 2 across two switches.
    assert_eq!(
        allocated_minors(&mut base(&[0, 5]), "two", "n1").unwrap().0,
        vec![2, 3]
    );
    // No switch has two free: one NUMA node (4, 6), not 3 and 4 across both.
    assert_eq!(
        allocated_minors(&mut base(&[0, 1, 2, 5, 7]), "two", "n1")
            .unwrap()
            .0,
        vec![4, 6]
    );
    // One free GPU per NUMA node: wherever they are.
    assert_eq!(
        allocated_minors(&mut base(&[0, 1, 2, 4, 5, 6]), "two", "n1")
            .unwrap()
            .0,
        vec![3, 7]
    );
}

#[test]
fn a_required_scope_needs_topology_and_whole_gpus_when_several() {
    let mut s = testutil::scheduler("");
    testutil::load(
        &mut s,
        vec![
            testutil::node("flat", &[("cpu", "64")]),
            super::tests::device("flat", 2),
            testutil::node("n1", &[("cpu", "64")]),
            topology_device("n1", &[]),
            scoped("pcie", &[("nvidia.com/gpu", "1")], "PCIe"),
            scoped(
                "multi-shared",
                &[
                    ("koordinator.sh/gpu.shared", "2"),
                    ("koordinator.sh/gpu-core", "100"),
                    ("koordinator.sh/gpu-memory-ratio", "100"),
                ],
                "PCIe",
            ),
        ],
    );
    let outcome = testutil::filter(&s, "default/pcie", t0());
    assert_eq!(
        outcome.failed_unresolvable["flat"],
        ERR_NODE_MISSING_GPU_DEVICE_TOPOLOGY_TREE
    );
    assert!(outcome.feasible.contains(&"n1".to_string()), "{outcome:?}");
    assert_eq!(
        testutil::filter(&s, "default/multi-shared", t0()).failed_unresolvable["n1"],
        ERR_UNSUPPORTED_MULTI_SHARED_GPU
    );
}

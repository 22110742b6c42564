//! Issue 16, finding 7: values a pod writes into its own annotations reach
//! the runtime only when they parse exactly and stay within bounds.
//!
//! - `scheduling.koordinator.sh/resource-status` cpusets: a list the kernel
//!   format allows, ids within bounds (the node's online CPUs: unit tests
//!   in `hooks/cpuset.rs`); anything else is a hook error and the runtime's
//!   cpuset stays.
//! - `koordinator.sh/oom-score-adj(-spec)`: never below the value the
//!   kubelet gives the pod's tier (BestEffort 1000, Burstable 2, Guaranteed
//!   -997) and, for a Koordinator BE pod, never below 1000: a tenant cannot
//!   make its process the last one the OOM killer picks.
//!
//! The dispatcher is driven as the RuntimeHookService server drives it and
//! the reply is built the same way (`to_container_response`).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use apis::runtime::v1alpha1 as wire;
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::{HookOptions, gated_hooks, parse_feature_gates};
use koordlet::runtimehooks::protocol::{
    ContainerContext, FailurePolicyConfig, HookRequest, HookStage,
};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

const UID: &str = "0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3";

fn dispatcher() -> HookDispatcher {
    let mut caps = koordlet::capabilities::detect(&SystemArgs::under(std::path::Path::new(
        "/nonexistent-koordlet-hostile",
    )));
    caps.cgroup.controllers = ["cpu", "cpuacct", "cpuset", "memory"]
        .map(String::from)
        .to_vec();
    let gates = parse_feature_gates("OOMScoreAdj=true").unwrap();
    HookDispatcher::new(
        gated_hooks(&HookOptions::default(), &gates),
        &caps,
        CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/nonexistent"),
        FailurePolicyConfig::default(),
    )
}

fn request(
    qos: &str,
    tier: &str,
    annotations: &[(&str, &str)],
    kubelet_oom_score_adj: i64,
) -> wire::ContainerResourceHookRequest {
    let parent = match tier {
        "" => format!("/kubepods/pod{UID}"),
        tier => format!("/kubepods/{tier}/pod{UID}"),
    };
    wire::ContainerResourceHookRequest {
        pod_meta: Some(wire::PodSandboxMetadata {
            name: "p".into(),
            uid: UID.into(),
            namespace: "tenant".into(),
            attempt: 0,
        }),
        container_meta: Some(wire::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
            id: String::new(),
        }),
        container_resources: Some(wire::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 200_000,
            cpu_shares: 1024,
            oom_score_adj: kubelet_oom_score_adj,
            ..Default::default()
        }),
        pod_annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        pod_labels: BTreeMap::from([("koordinator.sh/qosClass".to_string(), qos.to_string())]),
        pod_cgroup_parent: parent,
        ..Default::default()
    }
}

/// The server's reply to a PreCreateContainer request.
fn reply(
    dispatcher: &HookDispatcher,
    request: &wire::ContainerResourceHookRequest,
) -> (wire::LinuxContainerResources, usize) {
    let adjustment = dispatcher
        .run(
            HookStage::PreCreateContainer,
            &HookRequest::Container(ContainerContext::from(request)),
        )
        .unwrap();
    let response = adjustment.to_container_response(request);
    (
        response.container_resources.unwrap(),
        adjustment.ignored_failures.len(),
    )
}

#[test]
fn cpusets_from_annotations_parse_exactly_or_are_refused() {
    let dispatcher = dispatcher();
    let status = |cpuset: &str| serde_json::json!({ "cpuset": cpuset }).to_string();
    for cpuset in [
        "2-3;echo pwned",
        "2-3 ",
        " 2",
        "+2",
        "2,,3",
        "3-2",
        "1-",
        "0x2",
        "0-65536",
        "4294967296",
        "18446744073709551617",
        "-1",
        "2\n3",
    ] {
        let annotation = status(cpuset);
        let request = request(
            "LSR",
            "",
            &[("scheduling.koordinator.sh/resource-status", &annotation)],
            -997,
        );
        let (resources, failures) = reply(&dispatcher, &request);
        assert_eq!(resources.cpuset_cpus, "", "{cpuset:?} reached the runtime");
        assert_eq!(resources.cpu_quota, 200_000, "{cpuset:?}: quota unset");
        assert_eq!(failures, 1, "{cpuset:?} is a hook error");
    }

    // A good list is passed on in the kernel's canonical form.
    let annotation = status("3,1-2");
    let (resources, failures) = reply(
        &dispatcher,
        &request(
            "LSR",
            "",
            &[("scheduling.koordinator.sh/resource-status", &annotation)],
            -997,
        ),
    );
    assert_eq!(resources.cpuset_cpus, "1-3");
    assert_eq!(resources.cpu_quota, -1);
    assert_eq!(failures, 0);
}

#[test]
fn a_pod_cannot_lower_its_oom_score_adj_below_its_tier() {
    let dispatcher = dispatcher();
    // (QoS class, tier, kubelet's value, annotation, expected reply, refused)
    let cases: [(&str, &str, i64, &str, i64, bool); 9] = [
        // A BE pod stays the OOM killer's first choice.
        ("BE", "besteffort", 1000, "-1000", 1000, true),
        ("BE", "besteffort", 1000, "999", 1000, true),
        ("BE", "besteffort", 1000, "1000", 1000, false),
        // Also when its spec put it in another tier.
        ("BE", "burstable", 700, "500", 700, true),
        // Burstable pods: the kubelet's floor is 2.
        ("LS", "burstable", 700, "-1000", 700, true),
        ("LS", "burstable", 700, "1", 700, true),
        ("LS", "burstable", 700, "500", 500, false),
        // Guaranteed pods: as low as the kubelet goes (-997), not -1000.
        ("LSR", "", -997, "-1000", -997, true),
        ("LSR", "", -997, "-997", -997, false),
    ];
    for (qos, tier, kubelet, annotation, expected, refused) in cases {
        let annotations = [("koordinator.sh/oom-score-adj", annotation)];
        let request = request(qos, tier, &annotations, kubelet);
        let (resources, failures) = reply(&dispatcher, &request);
        assert_eq!(
            resources.oom_score_adj, expected,
            "{qos} pod in tier {tier:?} asking for {annotation}"
        );
        assert_eq!(
            failures,
            usize::from(refused),
            "{qos} pod in tier {tier:?} asking for {annotation}"
        );
    }

    // The per-container spec is held to the same floor.
    let spec = [("koordinator.sh/oom-score-adj-spec", r#"{"main":-1000}"#)];
    let (resources, failures) = reply(&dispatcher, &request("BE", "besteffort", &spec, 1000));
    assert_eq!(resources.oom_score_adj, 1000);
    assert_eq!(failures, 1);
}

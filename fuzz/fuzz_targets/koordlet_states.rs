//! koordlet's readers of the node's state from outside, and the decisions
//! taken on what they read:
//!
//! - selector `0`: the kubelet's `/pods` body (`parse_pod_list`);
//! - selector `1`: a standalone pods file (`parse_pods_document`, YAML);
//! - selector `2`: a standalone NodeSLO file (`parse_valid_node_slo`, YAML);
//! - selector `3`: the kubelet's CPU manager checkpoint (`cpu_manager_state`
//!   JSON, as `read_cpu_manager_checkpoint` decodes it);
//! - selector `4`: the Node object (JSON, its annotations and labels).
//!
//! The other inputs keep the values of this target's seed files. Then, as
//! the states informer and the runtime hooks do: the hook rules are built
//! from all of them, every pod becomes a hook context (and the collectors'
//! pod description, the kubelet pinning, the reclaim model's view) and runs
//! through every hook for its sandbox and each container.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use k8s_openapi::api::core::v1::{Node, Pod};
use koord_common::units::CpuSet;
use koord_fuzz::{DISPATCHERS, select};
use koordlet::runtimehooks::protocol::{ContainerContext, ContainerMeta, HookRequest, HookStage};
use koordlet::runtimehooks::reconciler::{pod_container_spec_resources, pod_context_of};
use koordlet::runtimehooks::rules::NodeRules;
use koordlet::statesinformer::cpumanager::{self, CpuManagerCheckpoint};
use koordlet::statesinformer::{kubelet, podmeta, podsfile, standalone};
use libfuzzer_sys::fuzz_target;

/// A seed file without its selector byte.
fn seed(text: &'static str) -> &'static str {
    &text[1..]
}

static PODS: LazyLock<Vec<Pod>> = LazyLock::new(|| {
    kubelet::parse_pod_list(
        seed(include_str!("../corpus/koordlet_states/pods-list.json")).as_bytes(),
    )
    .expect("seed pods")
});
static NODE_SLO: LazyLock<apis::slo::v1alpha1::NodeSLO> = LazyLock::new(|| {
    standalone::parse_valid_node_slo(
        Path::new("nodeslo.yaml"),
        seed(include_str!("../corpus/koordlet_states/nodeslo.yaml")),
    )
    .expect("seed NodeSLO")
});
static CHECKPOINT: LazyLock<CpuManagerCheckpoint> = LazyLock::new(|| {
    serde_json::from_str(seed(include_str!(
        "../corpus/koordlet_states/checkpoint.json"
    )))
    .expect("seed checkpoint")
});
static NODE: LazyLock<Node> = LazyLock::new(|| {
    serde_json::from_str(seed(include_str!("../corpus/koordlet_states/node.json")))
        .expect("seed node")
});

fn decide(
    node: &Node,
    node_slo: &apis::slo::v1alpha1::NodeSLO,
    pods: &[Pod],
    checkpoint: &CpuManagerCheckpoint,
) {
    let online: CpuSet = "0-7".parse().unwrap_or_default();
    let (rules, _problems) = NodeRules::build(
        Some(node),
        Some(node_slo),
        Some(pods),
        Some(&online),
        Some(checkpoint),
    );
    let _ = podmeta::advisor_snapshot_of(pods);
    let _ = cpumanager::kubelet_pod_allocs(checkpoint, pods);
    for pod in pods {
        let _ = koordlet::prediction::reclaim::PodForPrediction::from_pod(pod);
        let _ = koordlet::prediction::reclaim::pod_requests(pod);
    }
    let dispatcher = &DISPATCHERS[0];
    dispatcher.set_rules(rules);
    for pod in pods.iter().take(16) {
        let Some((context, _tier)) = pod_context_of(pod, dispatcher.layout()) else {
            continue;
        };
        let _ = dispatcher.run(
            HookStage::PreRunPodSandbox,
            &HookRequest::Pod(context.clone()),
        );
        let names = pod
            .spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .map(|c| &c.name);
        for name in names.take(8) {
            let container = ContainerContext {
                pod: context.clone(),
                container: ContainerMeta {
                    name: name.clone(),
                    id: "containerd://0123456789abcdef".into(),
                    ..ContainerMeta::default()
                },
                resources: pod_container_spec_resources(pod, name).unwrap_or_default(),
                ..ContainerContext::default()
            };
            for stage in [
                HookStage::PreCreateContainer,
                HookStage::PreUpdateContainerResources,
            ] {
                let _ = dispatcher.run(stage, &HookRequest::Container(container.clone()));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((selector, rest)) = select(data, 5) else {
        return;
    };
    match selector {
        0 => {
            if let Ok(pods) = kubelet::parse_pod_list(rest) {
                decide(&NODE, &NODE_SLO, &pods, &CHECKPOINT);
            }
        }
        1 => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            if let Ok(pods) = podsfile::parse_pods_document(text) {
                decide(&NODE, &NODE_SLO, &pods, &CHECKPOINT);
            }
        }
        2 => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            if let Ok(node_slo) = standalone::parse_valid_node_slo(Path::new("fuzz.yaml"), text) {
                decide(&NODE, &node_slo, &PODS, &CHECKPOINT);
            }
        }
        3 => {
            if let Ok(checkpoint) = serde_json::from_slice::<CpuManagerCheckpoint>(rest) {
                decide(&NODE, &NODE_SLO, &PODS, &checkpoint);
            }
        }
        _ => {
            if let Ok(node) = serde_json::from_slice::<Node>(rest) {
                decide(&node, &NODE_SLO, &PODS, &CHECKPOINT);
            }
        }
    }
});

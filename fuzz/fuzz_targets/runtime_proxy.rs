//! koord-runtime-proxy's handling of what the kubelet and the hook servers
//! send, without sockets:
//!
//! - selectors `0`–`2`: a CRI `RunPodSandbox`, `CreateContainer` or
//!   `UpdateContainerResources` request (protobuf, as the kubelet sends it)
//!   turned into the hook request, answered by koordlet's hook core, merged
//!   back, and re-encoded with the kubelet's unknown fields carried over;
//! - selectors `3`–`5`: the same three with the hook server's answer taken
//!   from the input too (a hook server is outside the proxy): the second
//!   byte splits the rest into the CRI request and the answer;
//! - selector `6`: a hook-server registration file (`hookserver.d/*.json`);
//! - selector `7`: the unknown-field walker over any CRI message: the second
//!   byte picks the message type, the rest is its encoding.
//!
//! Whenever the merged request goes out with the kubelet's unknown fields
//! appended, it must still decode to the merged request.
#![no_main]

use std::sync::LazyLock;

use apis::runtime::v1alpha1 as hook;
use bytes::Bytes;
use koord_fuzz::{DISPATCHERS, select};
use koord_runtime_proxy::config::{CriMethod, HookType, parse_registration_bytes};
use koord_runtime_proxy::cri::v1 as cri;
use koord_runtime_proxy::merge;
use koord_runtime_proxy::metrics::ProxyMetrics;
use koord_runtime_proxy::proxy::request_body;
use koord_runtime_proxy::unknown_fields::Schema;
use koordlet::runtimehooks::protocol::{ContainerContext, HookRequest, HookStage, PodContext};
use libfuzzer_sys::fuzz_target;
use prost::Message;

static METRICS: LazyLock<ProxyMetrics> = LazyLock::new(|| {
    ProxyMetrics::register(&koord_common::MetricsRegistry::new("koord_runtime_proxy"))
});

/// Request messages the walker is pointed at.
const MESSAGES: [&str; 8] = [
    ".runtime.v1.RunPodSandboxRequest",
    ".runtime.v1.CreateContainerRequest",
    ".runtime.v1.UpdateContainerResourcesRequest",
    ".runtime.v1.StartContainerRequest",
    ".runtime.v1.StopPodSandboxRequest",
    ".runtime.v1.ContainerConfig",
    ".runtime.v1.PodSandboxConfig",
    ".runtime.v1.LinuxContainerResources",
];

/// What the kubelet sent, the merged request, and the body sent on.
fn forward<M: Message + Default + PartialEq + std::fmt::Debug>(
    method: CriMethod,
    original: &[u8],
    merged: &M,
) {
    let body = request_body(
        &METRICS,
        method,
        Bytes::copy_from_slice(original),
        Some(merged),
    );
    let decoded = M::decode(body.as_ref())
        .unwrap_or_else(|e| panic!("the {} body sent on does not decode: {e}", method.name()));
    assert_eq!(&decoded, merged, "{} changed on its way out", method.name());
}

fn koordlet_pod(
    stage: HookStage,
    request: &hook::PodSandboxHookRequest,
) -> hook::PodSandboxHookResponse {
    let context = PodContext::from(request);
    match DISPATCHERS[3].run(stage, &HookRequest::Pod(context)) {
        Ok(adjustment) => adjustment.to_pod_response(request),
        Err(_) => hook::PodSandboxHookResponse::default(),
    }
}

fn koordlet_container(
    stage: HookStage,
    request: &hook::ContainerResourceHookRequest,
) -> hook::ContainerResourceHookResponse {
    let context = ContainerContext::from(request);
    match DISPATCHERS[3].run(stage, &HookRequest::Container(context)) {
        Ok(adjustment) => adjustment.to_container_response(request),
        Err(_) => hook::ContainerResourceHookResponse::default(),
    }
}

/// The context the proxy keeps for a created container (as its store does).
fn stored_container() -> hook::ContainerResourceHookRequest {
    let mut create = cri::CreateContainerRequest::default();
    let config = create.config.get_or_insert_with(Default::default);
    config.metadata = Some(cri::ContainerMetadata {
        name: "main".into(),
        attempt: 0,
    });
    let sandbox = create.sandbox_config.get_or_insert_with(Default::default);
    sandbox.metadata = Some(cri::PodSandboxMetadata {
        name: "p".into(),
        uid: "uid-1".into(),
        namespace: "default".into(),
        attempt: 0,
    });
    sandbox
        .labels
        .insert("koordinator.sh/qosClass".into(), "BE".into());
    sandbox
        .linux
        .get_or_insert_with(Default::default)
        .cgroup_parent = "/kubepods/besteffort/poduid-1".into();
    merge::container_hook_request(&create, None)
}

fn run_pod_sandbox(original: &[u8], answer: Option<&[u8]>) {
    let Ok(mut request) = cri::RunPodSandboxRequest::decode(original) else {
        return;
    };
    let mut context = merge::pod_hook_request(&request);
    let answer = match answer {
        Some(bytes) => match hook::PodSandboxHookResponse::decode(bytes) {
            Ok(answer) => answer,
            Err(_) => return,
        },
        None => koordlet_pod(HookStage::PreRunPodSandbox, &context),
    };
    merge::merge_pod_answer(&mut request, &mut context, &answer);
    forward(CriMethod::RunPodSandbox, original, &request);
}

fn create_container(original: &[u8], answer: Option<&[u8]>) {
    let Ok(mut request) = cri::CreateContainerRequest::decode(original) else {
        return;
    };
    let pod = request.sandbox_config.as_ref().map(|_| {
        merge::pod_hook_request(&cri::RunPodSandboxRequest {
            config: request.sandbox_config.clone(),
            runtime_handler: String::new(),
        })
    });
    let mut context = merge::container_hook_request(&request, pod.as_ref());
    let answer = match answer {
        Some(bytes) => match hook::ContainerResourceHookResponse::decode(bytes) {
            Ok(answer) => answer,
            Err(_) => return,
        },
        None => koordlet_container(HookStage::PreCreateContainer, &context),
    };
    merge::merge_create_answer(&mut request, &mut context, &answer);
    forward(CriMethod::CreateContainer, original, &request);
}

fn update_container(original: &[u8], answer: Option<&[u8]>) {
    let Ok(mut request) = cri::UpdateContainerResourcesRequest::decode(original) else {
        return;
    };
    let mut context = stored_container();
    merge::update_context_from_request(&mut context, &request);
    let answer = match answer {
        Some(bytes) => match hook::ContainerResourceHookResponse::decode(bytes) {
            Ok(answer) => answer,
            Err(_) => return,
        },
        None => koordlet_container(HookStage::PreUpdateContainerResources, &context),
    };
    merge::merge_update_answer(&mut request, &mut context, &answer);
    forward(CriMethod::UpdateContainerResources, original, &request);
}

/// The second byte splits the rest: that share of it is the CRI request.
fn split(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    let (share, rest) = rest.split_first()?;
    let at = rest.len() * usize::from(*share) / 256;
    Some(rest.split_at(at))
}

fuzz_target!(|data: &[u8]| {
    let Some((selector, rest)) = select(data, 8) else {
        return;
    };
    match selector {
        0 => run_pod_sandbox(rest, None),
        1 => create_container(rest, None),
        2 => update_container(rest, None),
        3..=5 => {
            let Some((request, answer)) = split(rest) else {
                return;
            };
            match selector {
                3 => run_pod_sandbox(request, Some(answer)),
                4 => create_container(request, Some(answer)),
                _ => update_container(request, Some(answer)),
            }
        }
        6 => {
            if let Ok(config) = parse_registration_bytes(std::path::Path::new("fuzz.json"), rest) {
                let _ = config.policy_warning();
                let _ = config.serves(HookType::PreRunPodSandbox);
            }
        }
        _ => {
            let Some((message, bytes)) = rest.split_first() else {
                return;
            };
            let message = MESSAGES[usize::from(message.wrapping_sub(b'0')) % MESSAGES.len()];
            for field in koord_runtime_proxy::wire::fields(bytes) {
                if field.is_err() {
                    break;
                }
            }
            if let Ok(schema) = Schema::cri() {
                let _ = schema.reattach(message, bytes, bytes);
                let _ = schema.reattach(message, bytes, &[]);
            }
        }
    }
});

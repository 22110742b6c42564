#![allow(clippy::unwrap_used)]
//! Message limits: the proxy takes and sends CRI messages up to the kubelet's
//! 16 MiB in every direction (kubelet to proxy, proxy to runtime, proxy to
//! hook server), where gRPC's 4 MiB default refused a busy node's pod list,
//! and refuses larger ones with an error that names the limit.

mod common;

use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use common::register;
use common::runtime::{ALL_STAGES, FakeRuntime, KUBELET_MAX_MESSAGE, RecordingHook, ServedProxy};
use koord_common::testing::TempDir;
use koord_runtime_proxy::cri::v1 as cri;
use koord_runtime_proxy::cri::v1::runtime_service_client::RuntimeServiceClient;
use koord_runtime_proxy::{rebuild_store, unix_channel};
use tonic::Code;

const MIB: usize = 1024 * 1024;
/// Longest wait for one call in these tests: a refused or stuck call fails
/// the test instead of hanging it.
const CALL_WAIT: Duration = Duration::from_secs(30);

struct Node {
    _dir: TempDir,
    runtime: FakeRuntime,
    hook: RecordingHook,
    proxy: ServedProxy,
}

/// A fake runtime, `hook` registered for every stage under `policy`, and a
/// proxy in front of them.
async fn node(label: &str, policy: &str, hook: RecordingHook) -> Node {
    let dir = TempDir::new(label).unwrap();
    let runtime_socket = dir.path().join("runtime.sock");
    let hook_socket = dir.path().join("hook.sock");
    let hooks = dir.path().join("hookserver.d");
    std::fs::create_dir_all(&hooks).unwrap();
    let runtime = FakeRuntime::serve(&runtime_socket);
    hook.serve(&hook_socket);
    register(&hooks, "hook.json", &hook_socket, policy, &ALL_STAGES);
    let proxy = ServedProxy::start(dir.path(), &runtime_socket, &hooks).await;
    Node {
        _dir: dir,
        runtime,
        hook,
        proxy,
    }
}

fn filler(len: usize) -> String {
    "x".repeat(len)
}

fn run_request(name: &str) -> cri::RunPodSandboxRequest {
    cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: "/kubepods/besteffort/kubelet".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: "runc".into(),
    }
}

fn create_request(pod: &str, annotation: String) -> cri::CreateContainerRequest {
    cri::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "main".into(),
                attempt: 0,
            }),
            annotations: [("big".to_string(), annotation)].into(),
            ..Default::default()
        }),
        sandbox_config: run_request("web").config,
    }
}

async fn bounded<F: std::future::Future>(what: &str, call: F) -> F::Output {
    tokio::time::timeout(CALL_WAIT, call)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {CALL_WAIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_listing_reads_pod_and_container_lists_over_4_mib() {
    let node = node("koord-rp-big-list", "Ignore", RecordingHook::default()).await;
    // Six pods and six containers with 1 MiB of annotations each: each list
    // is about 6 MiB, over gRPC's 4 MiB default and under the kubelet's 16 MiB.
    let (pods, containers) = {
        let mut state = node.runtime.state.lock().unwrap();
        let mut ids = (Vec::new(), Vec::new());
        for index in 0..6 {
            let pod = state.add_pod(&format!("pod-{index}"), &[], "/kubepods/big");
            let sandbox = &mut state.sandboxes.get_mut(&pod).unwrap().0;
            sandbox.annotations.insert("big".into(), filler(MIB));
            let container = state.add_container(&pod, "main", 2);
            let listed = &mut state.containers.get_mut(&container).unwrap().0;
            listed.annotations.insert("big".into(), filler(MIB));
            ids.0.push(pod);
            ids.1.push(container);
        }
        ids
    };

    // Old proxies retried the refused listing forever: bounded here.
    bounded(
        "the store rebuild from a 6 MiB listing",
        rebuild_store(&node.proxy.proxy),
    )
    .await;
    let store = &node.proxy.proxy.store;
    assert_eq!(store.counts(), (6, 6));
    assert_eq!(store.pod(&pods[0]).unwrap().annotations["big"].len(), MIB);
    let entry = store.container(&containers[5]).unwrap();
    assert_eq!(entry.pod_id, pods[5]);
    assert_eq!(entry.request.container_annotations["big"].len(), MIB);

    // The kubelet's own listings pass through the proxy whole.
    let mut client = node.proxy.client();
    let listed = bounded(
        "ListPodSandbox",
        client.list_pod_sandbox(cri::ListPodSandboxRequest::default()),
    )
    .await
    .unwrap()
    .into_inner();
    assert_eq!(listed.items.len(), 6);
    let listed = bounded(
        "ListContainers",
        client.list_containers(cri::ListContainersRequest::default()),
    )
    .await
    .unwrap()
    .into_inner();
    assert_eq!(listed.containers.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_request_over_4_mib_reaches_the_hook_and_the_runtime() {
    let node = node("koord-rp-big-request", "Fail", RecordingHook::default()).await;
    let mut client = node.proxy.client();
    let pod = bounded("RunPodSandbox", client.run_pod_sandbox(run_request("web")))
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;

    let request = create_request(&pod, filler(5 * MIB));
    let container = bounded("CreateContainer", client.create_container(request))
        .await
        .unwrap_or_else(|status| panic!("a 5 MiB CreateContainer was refused: {status}"))
        .into_inner()
        .container_id;

    let state = node.runtime.state.lock().unwrap();
    let (created, _) = &state.containers[&container];
    assert_eq!(created.annotations["big"].len(), 5 * MIB);
    let seen = node.hook.calls();
    let create = seen
        .iter()
        .find(|call| call.stage() == "PreCreateContainer")
        .and_then(|call| call.container())
        .expect("the hook server saw PreCreateContainer");
    assert_eq!(create.container_annotations["big"].len(), 5 * MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_answer_over_4_mib_is_merged() {
    let hook = RecordingHook {
        pod_answer: hook::PodSandboxHookResponse {
            annotations: [("from-hook".to_string(), filler(5 * MIB))].into(),
            ..Default::default()
        },
        ..Default::default()
    };
    // Under Fail an answer the proxy could not read would refuse the pod.
    let node = node("koord-rp-big-answer", "Fail", hook).await;
    let mut client = node.proxy.client();
    let pod = bounded("RunPodSandbox", client.run_pod_sandbox(run_request("web")))
        .await
        .unwrap_or_else(|status| panic!("the pod was refused: {status}"))
        .into_inner()
        .pod_sandbox_id;
    let state = node.runtime.state.lock().unwrap();
    let (sandbox, _) = &state.sandboxes[&pod];
    assert_eq!(sandbox.annotations["from-hook"].len(), 5 * MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_described_in_over_4_mib_is_looked_up_for_its_hooks() {
    let node = node("koord-rp-big-lookup", "Ignore", RecordingHook::default()).await;
    // A pod created before the proxy started, with 5 MiB of annotations: its
    // verbose status, which the lookup reads, is over 4 MiB.
    let pod = {
        let mut state = node.runtime.state.lock().unwrap();
        let pod = state.add_pod("old", &[], "/kubepods/old");
        let sandbox = &mut state.sandboxes.get_mut(&pod).unwrap().0;
        sandbox.annotations.insert("big".into(), filler(5 * MIB));
        pod
    };
    let mut client = node.proxy.client();
    bounded(
        "StopPodSandbox",
        client.stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        }),
    )
    .await
    .unwrap();
    let calls = node.hook.calls();
    let stop = calls
        .iter()
        .find(|call| call.stage() == "PostStopPodSandbox")
        .and_then(|call| call.pod())
        .expect("PostStopPodSandbox reached the hook with the looked-up pod");
    assert_eq!(stop.annotations["big"].len(), 5 * MIB);
    assert_eq!(stop.cgroup_parent, "/kubepods/old");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_16_mib_is_refused_with_the_limit_named() {
    let node = node("koord-rp-too-big", "Ignore", RecordingHook::default()).await;
    // A client that sends more than the kubelet would.
    let mut client = RuntimeServiceClient::new(unix_channel(node.proxy.socket.clone()))
        .max_encoding_message_size(64 * MIB);
    let status = bounded(
        "CreateContainer",
        client.create_container(create_request("pod-x", filler(KUBELET_MAX_MESSAGE + MIB))),
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status}");
    assert!(
        status.message().contains(&KUBELET_MAX_MESSAGE.to_string()),
        "the error names the limit: {status}"
    );
    assert_eq!(node.runtime.calls("CreateContainer"), 0);
    assert!(node.hook.calls().is_empty());

    // The connection and the proxy are fine afterwards.
    let mut client = node.proxy.client();
    bounded(
        "RunPodSandbox",
        client.run_pod_sandbox(run_request("after")),
    )
    .await
    .unwrap();
}

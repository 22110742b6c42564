#![allow(clippy::unwrap_used)]
//! A hook server that refuses a pre-hook (as koordlet does with
//! FAILED_PRECONDITION when a hook with per-hook policy Fail fails): the
//! registration's failure-policy alone decides, as in upstream's proxy.

mod common;

use common::runtime::{FakeRuntime, ServedProxy, pairs};
use common::{Behaviour, FakeHook, register, serve_hook};
use koord_common::testing::TempDir;
use koord_runtime_proxy::cri::v1 as cri;

/// Creates a pod directly in the runtime and a container through the proxy,
/// with a refusing hook registered for PreCreateContainer under `policy`.
async fn create_with_refusing_hook(
    policy: &str,
) -> (
    TempDir,
    FakeRuntime,
    Result<cri::CreateContainerResponse, tonic::Status>,
) {
    let dir = TempDir::new("koord-rp-policy").unwrap();
    let runtime_socket = dir.path().join("runtime.sock");
    let hook_socket = dir.path().join("hook.sock");
    let hooks = dir.path().join("hookserver.d");
    std::fs::create_dir_all(&hooks).unwrap();
    let runtime = FakeRuntime::serve(&runtime_socket);
    serve_hook(
        &hook_socket,
        FakeHook {
            behaviour: Behaviour::Refuse,
            pod_answer: Default::default(),
            container_answer: Default::default(),
        },
    );
    register(
        &hooks,
        "koordlet.json",
        &hook_socket,
        policy,
        &["PreCreateContainer"],
    );
    let proxy = ServedProxy::start(dir.path(), &runtime_socket, &hooks).await;
    let pod = runtime.state.lock().unwrap().add_pod(
        "web",
        &[("koordinator.sh/qosClass", "LSR")],
        "/kubepods/web",
    );
    let request = cri::CreateContainerRequest {
        pod_sandbox_id: pod,
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "main".into(),
                attempt: 0,
            }),
            annotations: pairs(&[("from", "kubelet")]),
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_shares: 1024,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        sandbox_config: None,
    };
    let result = proxy
        .client()
        .create_container(request)
        .await
        .map(|response| response.into_inner());
    (dir, runtime, result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_hook_under_fail_refuses_the_call() {
    let (_dir, runtime, result) = create_with_refusing_hook("Fail").await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unknown, "{status}");
    assert!(
        status
            .message()
            .starts_with("hook server err (failure-policy Fail): hook server "),
        "{status}"
    );
    assert!(
        status.message().contains("failed at PreCreateContainer"),
        "{status}"
    );
    assert!(
        status.message().contains("hook CPUSetAllocator failed"),
        "{status}"
    );
    assert_eq!(runtime.calls("CreateContainer"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_hook_under_any_other_policy_forwards_the_original_request() {
    // koordlet's default registration policy, no policy, and a misspelt "Fail".
    for policy in ["Ignore", "", "fail"] {
        let (_dir, runtime, result) = create_with_refusing_hook(policy).await;
        let id = result.unwrap().container_id;
        let state = runtime.state.lock().unwrap();
        let (container, resources) = &state.containers[&id];
        assert_eq!(container.annotations, pairs(&[("from", "kubelet")]));
        assert_eq!(
            resources.as_ref().unwrap().cpu_shares,
            1024,
            "policy {policy:?}"
        );
    }
}

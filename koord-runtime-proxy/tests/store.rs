#![allow(clippy::unwrap_used)]
//! The store against a fake runtime: a start-up listing answered after the
//! proxy began serving is merged into what live calls recorded, and calls
//! for containers the store lacks reach the hooks with the runtime's context.

mod common;

use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use common::register;
use common::runtime::{ALL_STAGES, FakeRuntime, RecordingHook, ServedProxy, pairs};
use koord_common::testing::TempDir;
use koord_runtime_proxy::cri::v1 as cri;
use koord_runtime_proxy::rebuild_store;
use koord_runtime_proxy::store::Origin;

struct Node {
    _dir: TempDir,
    runtime: FakeRuntime,
    hook: RecordingHook,
    proxy: ServedProxy,
}

/// A fake runtime, a recording hook server registered for every stage under
/// `policy` (not registered when `None`), and a proxy in front of them (with
/// an empty store).
async fn node(label: &str, policy: Option<&str>) -> Node {
    let dir = TempDir::new(label).unwrap();
    let runtime_socket = dir.path().join("runtime.sock");
    let hook_socket = dir.path().join("hook.sock");
    let hooks = dir.path().join("hookserver.d");
    std::fs::create_dir_all(&hooks).unwrap();
    let runtime = FakeRuntime::serve(&runtime_socket);
    let hook = RecordingHook {
        pod_answer: hook::PodSandboxHookResponse {
            cgroup_parent: "/kubepods/besteffort/from-hook".into(),
            ..Default::default()
        },
        container_answer: hook::ContainerResourceHookResponse {
            container_resources: Some(hook::LinuxContainerResources {
                cpu_shares: 777,
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    hook.serve(&hook_socket);
    if let Some(policy) = policy {
        register(&hooks, "hook.json", &hook_socket, policy, &ALL_STAGES);
    }
    let proxy = ServedProxy::start(dir.path(), &runtime_socket, &hooks).await;
    Node {
        _dir: dir,
        runtime,
        hook,
        proxy,
    }
}

fn run_request(name: &str, labels: &[(&str, &str)]) -> cri::RunPodSandboxRequest {
    cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: pairs(labels),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: "/kubepods/besteffort/kubelet".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: "runc".into(),
    }
}

fn create_request(pod: &str, config: &cri::RunPodSandboxRequest) -> cri::CreateContainerRequest {
    cri::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "main".into(),
                attempt: 0,
            }),
            envs: vec![cri::KeyValue {
                key: "FROM".into(),
                value: "kubelet".into(),
            }],
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_shares: 2,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        sandbox_config: config.config.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_answered_after_serving_began_keeps_live_entries() {
    let node = node("koord-rp-late-listing", Some("Ignore")).await;
    let mut client = node.proxy.client();
    // A pod and container from before the proxy started.
    let (old_pod, old_container) = {
        let mut state = node.runtime.state.lock().unwrap();
        let pod = state.add_pod("old", &[], "/kubepods/old");
        let container = state.add_container(&pod, "old-main", 128);
        (pod, container)
    };

    // The runtime is slow to answer the start-up listing; the proxy serves meanwhile.
    node.runtime.hold_listing();
    let rebuilding = {
        let proxy = std::sync::Arc::clone(&node.proxy.proxy);
        tokio::spawn(async move { rebuild_store(&proxy).await })
    };
    node.runtime.wait_for_calls("ListPodSandbox", 1).await;

    let run = run_request("web", &[("koordinator.sh/qosClass", "BE")]);
    let pod = client
        .run_pod_sandbox(run.clone())
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let container = client
        .create_container(create_request(&pod, &run))
        .await
        .unwrap()
        .into_inner()
        .container_id;
    // The old container is removed while the listing, which still has it, is in flight.
    client
        .remove_container(cri::RemoveContainerRequest {
            container_id: old_container.clone(),
        })
        .await
        .unwrap();

    node.runtime.release_listing();
    tokio::time::timeout(Duration::from_secs(30), rebuilding)
        .await
        .unwrap()
        .unwrap();

    let store = &node.proxy.proxy.store;
    // The listing (taken before RunPodSandbox) lacked the new pod; it stays.
    assert_eq!(store.pod_origin(&pod), Some(Origin::Live));
    assert_eq!(
        store.pod(&pod).unwrap().cgroup_parent,
        "/kubepods/besteffort/from-hook"
    );
    assert_eq!(store.container_origin(&container), Some(Origin::Live));
    assert_eq!(store.pod_origin(&old_pod), Some(Origin::Listed));
    assert!(
        store.container(&old_container).is_none(),
        "a container removed during the listing came back"
    );

    // Start and Stop of the new container reach the hooks with the context of
    // its creation: the kubelet's envs (a listing has none) and the sandbox
    // config's cgroup parent.
    node.hook.clear();
    client
        .start_container(cri::StartContainerRequest {
            container_id: container.clone(),
        })
        .await
        .unwrap();
    client
        .stop_container(cri::StopContainerRequest {
            container_id: container.clone(),
            timeout: 1,
        })
        .await
        .unwrap();
    assert_eq!(
        node.hook.stages(),
        [
            "PreStartContainer",
            "PostStartContainer",
            "PostStopContainer"
        ]
    );
    for call in node.hook.calls() {
        let request = call.container().unwrap();
        assert_eq!(request.container_meta.as_ref().unwrap().id, container);
        assert_eq!(request.pod_meta.as_ref().unwrap().name, "web");
        assert_eq!(request.pod_cgroup_parent, "/kubepods/besteffort/kubelet");
        assert_eq!(request.container_envs, pairs(&[("FROM", "kubelet")]));
        assert_eq!(
            request.pod_labels,
            pairs(&[("koordinator.sh/qosClass", "BE")])
        );
    }
    // Nothing had to be looked up: the merged store knew the container.
    assert_eq!(
        node.runtime.calls("ContainerStatus"),
        1,
        "the listing's only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_for_containers_missing_from_the_store_use_the_runtimes_context() {
    let node = node("koord-rp-lookup", Some("Fail")).await;
    let mut client = node.proxy.client();
    let (pod, container, skipped) = {
        let mut state = node.runtime.state.lock().unwrap();
        let pod = state.add_pod(
            "batch",
            &[("koordinator.sh/qosClass", "BE")],
            "/kubepods/be",
        );
        let container = state.add_container(&pod, "worker", 64);
        let koordlet = state.add_pod("koordlet", &[("skip", "true")], "/kubepods/ls");
        let skipped = state.add_container(&koordlet, "koordlet", 64);
        (pod, container, skipped)
    };
    assert_eq!(node.proxy.proxy.store.counts(), (0, 0));

    client
        .start_container(cri::StartContainerRequest {
            container_id: container.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        node.hook.stages(),
        ["PreStartContainer", "PostStartContainer"]
    );
    for call in node.hook.calls() {
        let request = call.container().unwrap();
        let meta = request.pod_meta.as_ref().unwrap();
        assert_eq!(
            (meta.name.as_str(), meta.uid.as_str()),
            ("batch", "uid-batch")
        );
        assert_eq!(request.pod_cgroup_parent, "/kubepods/be");
        assert_eq!(
            request.pod_labels,
            pairs(&[("koordinator.sh/qosClass", "BE")])
        );
        assert_eq!(request.pod_annotations, pairs(&[("pod-note", "batch")]));
        let container_meta = request.container_meta.as_ref().unwrap();
        assert_eq!(
            (container_meta.id.as_str(), container_meta.name.as_str()),
            (container.as_str(), "worker")
        );
        assert_eq!(
            request.container_annotations,
            pairs(&[("container-note", "worker")])
        );
        assert_eq!(request.container_resources.as_ref().unwrap().cpu_shares, 64);
    }
    // Looked up once, then kept.
    assert_eq!(
        node.proxy.proxy.store.container_origin(&container),
        Some(Origin::Live)
    );
    assert_eq!(
        node.proxy.proxy.store.pod(&pod).unwrap().cgroup_parent,
        "/kubepods/be"
    );
    let lookups = node.runtime.calls("ListContainers");
    assert_eq!(lookups, 1);

    // Update: the hook sees the request's resources and its answer reaches the runtime.
    node.hook.clear();
    client
        .update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: container.clone(),
            linux: Some(cri::LinuxContainerResources {
                cpu_shares: 96,
                memory_limit_in_bytes: 1 << 30,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(node.hook.stages(), ["PreUpdateContainerResources"]);
    let seen = node.hook.calls()[0].container().unwrap().clone();
    let seen = seen.container_resources.unwrap();
    assert_eq!((seen.cpu_shares, seen.memory_limit_in_bytes), (96, 1 << 30));
    let applied = node.runtime.resources(&container).unwrap();
    assert_eq!(
        (applied.cpu_shares, applied.memory_limit_in_bytes),
        (777, 1 << 30)
    );
    assert_eq!(node.runtime.calls("ListContainers"), lookups);

    // A pod with the skip label: looked up, no hooks.
    node.hook.clear();
    client
        .start_container(cri::StartContainerRequest {
            container_id: skipped.clone(),
        })
        .await
        .unwrap();
    assert!(node.hook.calls().is_empty(), "{:?}", node.hook.stages());

    // Neither the store nor the runtime knows it: the runtime's NotFound comes
    // back unchanged and no hook is called, even under Fail (as upstream).
    let error = client
        .start_container(cri::StartContainerRequest {
            container_id: "no-such-container".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::NotFound, "{error}");
    assert_eq!(error.message(), "container not found");
    assert!(node.hook.calls().is_empty(), "{:?}", node.hook.stages());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_of_a_container_and_pod_missing_from_the_store_reaches_post_hooks() {
    let node = node("koord-rp-lookup-stop", Some("Ignore")).await;
    let mut client = node.proxy.client();
    let (pod, container, idle) = {
        let mut state = node.runtime.state.lock().unwrap();
        let pod = state.add_pod("web", &[], "/kubepods/burstable/web");
        let container = state.add_container(&pod, "main", 256);
        let idle = state.add_pod("idle", &[], "/kubepods/burstable/idle");
        (pod, container, idle)
    };
    // A pod only the runtime knows (its status gives the context).
    client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: idle.clone(),
        })
        .await
        .unwrap();
    assert_eq!(node.hook.stages(), ["PostStopPodSandbox"]);
    let idle_pod = node.hook.calls()[0].pod().unwrap().clone();
    assert_eq!(idle_pod.pod_meta.as_ref().unwrap().uid, "uid-idle");
    assert_eq!(idle_pod.cgroup_parent, "/kubepods/burstable/idle");
    assert_eq!(idle_pod.annotations, pairs(&[("pod-note", "idle")]));
    node.hook.clear();

    client
        .stop_container(cri::StopContainerRequest {
            container_id: container.clone(),
            timeout: 1,
        })
        .await
        .unwrap();
    client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        node.hook.stages(),
        ["PostStopContainer", "PostStopPodSandbox"]
    );
    let calls = node.hook.calls();
    let stopped = calls[0].container().unwrap();
    assert_eq!(stopped.container_meta.as_ref().unwrap().id, container);
    assert_eq!(stopped.pod_cgroup_parent, "/kubepods/burstable/web");
    let stopped_pod = calls[1].pod().unwrap();
    assert_eq!(stopped_pod.pod_meta.as_ref().unwrap().name, "web");
    assert_eq!(stopped_pod.cgroup_parent, "/kubepods/burstable/web");
    assert_eq!(stopped_pod.runtime_handler, "runc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_hook_server_nothing_is_looked_up() {
    let node = node("koord-rp-no-lookup", None).await;
    let mut client = node.proxy.client();
    let (pod, container) = {
        let mut state = node.runtime.state.lock().unwrap();
        let pod = state.add_pod("web", &[], "/kubepods/web");
        let container = state.add_container(&pod, "main", 2);
        (pod, container)
    };
    client
        .start_container(cri::StartContainerRequest {
            container_id: container.clone(),
        })
        .await
        .unwrap();
    client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .unwrap();
    for lookup in ["ListContainers", "ContainerStatus", "PodSandboxStatus"] {
        assert_eq!(node.runtime.calls(lookup), 0, "{lookup}");
    }
    assert_eq!(node.runtime.calls("StartContainer"), 1);
    assert_eq!(node.proxy.proxy.store.counts(), (0, 0));
}

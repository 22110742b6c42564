#![allow(clippy::unwrap_used)]
//! The dispatcher against a fake hook server on a unix socket: answers,
//! errors and timeouts come back with the server's failure policy.

mod common;

use std::path::Path;
use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use common::{Behaviour, FakeHook, register, serve_hook};
use koord_runtime_proxy::config::{FailurePolicy, HookType, Registry};
use koord_runtime_proxy::dispatcher::{Dispatcher, HookError};
use koord_runtime_proxy::metrics::ProxyMetrics;

/// A hook server that answers with a marker cgroup parent and cpu shares.
fn serve(socket: &Path, behaviour: Behaviour) {
    serve_hook(
        socket,
        FakeHook {
            behaviour,
            pod_answer: hook::PodSandboxHookResponse {
                cgroup_parent: "/from-hook".into(),
                ..Default::default()
            },
            container_answer: hook::ContainerResourceHookResponse {
                container_resources: Some(hook::LinuxContainerResources {
                    cpu_shares: 512,
                    ..Default::default()
                }),
                ..Default::default()
            },
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_errors_and_timeouts_carry_the_servers_policy() {
    let dir = std::env::temp_dir().join(format!("koord-rp-dispatch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (good, bad, slow) = (
        dir.join("good.sock"),
        dir.join("bad.sock"),
        dir.join("slow.sock"),
    );
    serve(&good, Behaviour::Answer);
    serve(&bad, Behaviour::Refuse);
    serve(&slow, Behaviour::Hang);
    register(
        &dir,
        "a-good.json",
        &good,
        "Ignore",
        &["PreRunPodSandbox", "PreCreateContainer"],
    );
    register(
        &dir,
        "b-bad.json",
        &bad,
        "Fail",
        &["PreUpdateContainerResources", "PreCreateContainer"],
    );
    register(&dir, "c-slow.json", &slow, "Ignore", &["PreStartContainer"]);

    let metrics = ProxyMetrics::default();
    let registry = Registry::watch(dir.clone(), Duration::from_secs(60)).await;
    let dispatcher = Dispatcher::new(registry, Duration::from_millis(500), metrics);

    let (answer, policy) = dispatcher
        .pod_hook(HookType::PreRunPodSandbox, Default::default())
        .await
        .unwrap();
    assert_eq!(policy, FailurePolicy::Ignore);
    assert_eq!(answer.unwrap().cgroup_parent, "/from-hook");

    // The first file (by name) that lists a stage serves it.
    let (answer, _) = dispatcher
        .container_hook(HookType::PreCreateContainer, Default::default())
        .await
        .unwrap();
    assert_eq!(answer.unwrap().container_resources.unwrap().cpu_shares, 512);

    let (answer, policy) = dispatcher
        .container_hook(HookType::PreUpdateContainerResources, Default::default())
        .await
        .unwrap();
    assert_eq!(policy, FailurePolicy::Fail);
    match answer {
        Err(HookError::Status { stage, status, .. }) => {
            assert_eq!(stage, "PreUpdateContainerResources");
            assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        }
        other => panic!("expected the server's refusal, got {other:?}"),
    }

    let (answer, policy) = dispatcher
        .container_hook(HookType::PreStartContainer, Default::default())
        .await
        .unwrap();
    assert_eq!(policy, FailurePolicy::Ignore);
    assert!(
        matches!(answer, Err(HookError::Timeout { .. })),
        "{answer:?}"
    );

    // No server for the stage: nothing to call.
    assert!(
        dispatcher
            .container_hook(HookType::PostStopContainer, Default::default())
            .await
            .is_none()
    );

    // A registered but absent socket is an error under its policy, not a hang.
    register(
        &dir,
        "d-gone.json",
        &dir.join("gone.sock"),
        "Fail",
        &["PostStopContainer"],
    );
    let registry = Registry::watch(dir.clone(), Duration::from_secs(60)).await;
    let dispatcher = Dispatcher::new(registry, Duration::from_secs(5), ProxyMetrics::default());
    let (answer, policy) = dispatcher
        .container_hook(HookType::PostStopContainer, Default::default())
        .await
        .unwrap();
    assert_eq!(policy, FailurePolicy::Fail);
    assert!(
        matches!(answer, Err(HookError::Status { .. })),
        "{answer:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewritten_registrations_do_not_grow_the_client_cache() {
    let dir = koord_common::testing::TempDir::new("koord-rp-clients").unwrap();
    let registry = Registry::watch(dir.path().to_path_buf(), Duration::from_millis(20)).await;
    let dispatcher = Dispatcher::new(
        registry.clone(),
        Duration::from_secs(5),
        ProxyMetrics::default(),
    );
    for index in 0..6 {
        // A new endpoint each time (absent sockets: each call fails fast).
        let socket = dir.path().join(format!("hook-{index}.sock"));
        register(
            dir.path(),
            "koordlet.json",
            &socket,
            "Ignore",
            &["PostStopContainer"],
        );
        let expected = socket.display().to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while registry
            .server_for(HookType::PostStopContainer)
            .is_none_or(|server| server.remote_endpoint != expected)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{expected} not loaded"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (answer, _) = dispatcher
            .container_hook(HookType::PostStopContainer, Default::default())
            .await
            .unwrap();
        assert!(answer.is_err());
        assert!(
            dispatcher.cached_clients() <= 2,
            "{} clients cached after {} endpoints",
            dispatcher.cached_clients(),
            index + 1
        );
    }
}

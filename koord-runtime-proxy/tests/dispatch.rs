#![allow(clippy::unwrap_used)]
//! The dispatcher against a fake hook server on a unix socket: answers,
//! errors and timeouts come back with the server's failure policy.

use std::path::Path;
use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use apis::runtime::v1alpha1::runtime_hook_service_server::{
    RuntimeHookService, RuntimeHookServiceServer,
};
use koord_runtime_proxy::config::{FailurePolicy, HookType, Registry};
use koord_runtime_proxy::dispatcher::{Dispatcher, HookError};
use koord_runtime_proxy::metrics::ProxyMetrics;
use tonic::{Request, Response, Status};

#[derive(Clone, Copy)]
enum Behaviour {
    Answer,
    Refuse,
    Hang,
}

struct Fake(Behaviour);

impl Fake {
    async fn reply<T>(&self, answer: T) -> Result<Response<T>, Status> {
        match self.0 {
            Behaviour::Answer => Ok(Response::new(answer)),
            Behaviour::Refuse => Err(Status::failed_precondition("hook CPUSetAllocator failed")),
            Behaviour::Hang => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(Response::new(answer))
            }
        }
    }

    fn container_answer() -> hook::ContainerResourceHookResponse {
        hook::ContainerResourceHookResponse {
            container_resources: Some(hook::LinuxContainerResources {
                cpu_shares: 512,
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

type PodResult = Result<Response<hook::PodSandboxHookResponse>, Status>;
type ContainerResult = Result<Response<hook::ContainerResourceHookResponse>, Status>;

#[tonic::async_trait]
impl RuntimeHookService for Fake {
    async fn pre_run_pod_sandbox_hook(&self, _: Request<hook::PodSandboxHookRequest>) -> PodResult {
        self.reply(hook::PodSandboxHookResponse {
            cgroup_parent: "/from-hook".into(),
            ..Default::default()
        })
        .await
    }
    async fn post_stop_pod_sandbox_hook(
        &self,
        _: Request<hook::PodSandboxHookRequest>,
    ) -> PodResult {
        self.reply(Default::default()).await
    }
    async fn pre_create_container_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply(Self::container_answer()).await
    }
    async fn pre_start_container_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply(Self::container_answer()).await
    }
    async fn post_start_container_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply(Self::container_answer()).await
    }
    async fn post_stop_container_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply(Self::container_answer()).await
    }
    async fn pre_update_container_resources_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply(Self::container_answer()).await
    }
}

fn serve(socket: &Path, behaviour: Behaviour) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let next = listener.accept().await.map(|(stream, _)| stream);
        Some((next, listener))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RuntimeHookServiceServer::new(Fake(behaviour)))
            .serve_with_incoming(incoming),
    );
}

fn register(dir: &Path, name: &str, socket: &Path, policy: &str, hooks: &[&str]) {
    let json = serde_json::json!({
        "remote-endpoint": socket.display().to_string(),
        "failure-policy": policy,
        "runtime-hooks": hooks,
    });
    std::fs::write(dir.join(name), json.to_string()).unwrap();
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
    let registry = Registry::watch(dir.clone(), Duration::from_secs(60));
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
    let registry = Registry::watch(dir.clone(), Duration::from_secs(60));
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

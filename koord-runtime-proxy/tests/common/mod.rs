//! A fake hook server on a unix socket and its registration file, shared by
//! the integration tests that dispatch to hooks; `runtime` adds a fake CRI
//! runtime, a recording hook server and a served proxy.
// Each test file uses a part of these helpers.
#![allow(dead_code)]

pub mod docker;
pub mod runtime;

use std::path::Path;
use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use apis::runtime::v1alpha1::runtime_hook_service_server::{
    RuntimeHookService, RuntimeHookServiceServer,
};
use tonic::{Request, Response, Status};

/// How the fake hook server handles every call.
#[derive(Clone, Copy)]
pub enum Behaviour {
    Answer,
    Refuse,
    Hang,
}

/// Answers PreRunPodSandbox with `pod_answer`, every container hook with
/// `container_answer`, and PostStopPodSandbox with an empty answer.
pub struct FakeHook {
    pub behaviour: Behaviour,
    pub pod_answer: hook::PodSandboxHookResponse,
    pub container_answer: hook::ContainerResourceHookResponse,
}

impl FakeHook {
    async fn reply<T>(&self, answer: T) -> Result<Response<T>, Status> {
        match self.behaviour {
            Behaviour::Answer => Ok(Response::new(answer)),
            Behaviour::Refuse => Err(Status::failed_precondition("hook CPUSetAllocator failed")),
            Behaviour::Hang => {
                // Longer than any dispatcher timeout the tests set.
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(Response::new(answer))
            }
        }
    }

    async fn reply_container(&self) -> ContainerResult {
        self.reply(self.container_answer.clone()).await
    }
}

type PodResult = Result<Response<hook::PodSandboxHookResponse>, Status>;
type ContainerResult = Result<Response<hook::ContainerResourceHookResponse>, Status>;

#[tonic::async_trait]
impl RuntimeHookService for FakeHook {
    async fn pre_run_pod_sandbox_hook(&self, _: Request<hook::PodSandboxHookRequest>) -> PodResult {
        self.reply(self.pod_answer.clone()).await
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
        self.reply_container().await
    }
    async fn pre_start_container_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply_container().await
    }
    async fn post_start_container_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply_container().await
    }
    async fn post_stop_container_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply_container().await
    }
    async fn pre_update_container_resources_hook(
        &self,
        _: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.reply_container().await
    }
}

/// Serves `fake` on a new unix socket at `socket`, in the background.
pub fn serve_hook(socket: &Path, fake: FakeHook) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let next = listener.accept().await.map(|(stream, _)| stream);
        Some((next, listener))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RuntimeHookServiceServer::new(fake))
            .serve_with_incoming(incoming),
    );
}

/// Writes the registration file `name` in `dir` for the hook server on
/// `socket`.
pub fn register(dir: &Path, name: &str, socket: &Path, policy: &str, hooks: &[&str]) {
    let json = serde_json::json!({
        "remote-endpoint": socket.display().to_string(),
        "failure-policy": policy,
        "runtime-hooks": hooks,
    });
    std::fs::write(dir.join(name), json.to_string()).unwrap();
}

//! Docker-mode helpers: a hook server with an answer per stage, a Docker
//! proxy served on a unix socket, and a small HTTP/1.1 client for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use apis::runtime::v1alpha1::runtime_hook_service_server::{
    RuntimeHookService, RuntimeHookServiceServer,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use koord_runtime_proxy::config::Registry;
use koord_runtime_proxy::dispatcher::Dispatcher;
use koord_runtime_proxy::docker::DockerProxy;
use koord_runtime_proxy::metrics::ProxyMetrics;
use koord_runtime_proxy::proxy::SkipLabel;
use tonic::{Request, Response, Status};

pub use super::runtime::HookCall;

/// A hook server that records every call and answers each stage with what
/// was set for it (an empty answer otherwise), or refuses every call.
#[derive(Clone, Default)]
pub struct StageHook {
    calls: Arc<Mutex<Vec<HookCall>>>,
    pod_answers: Arc<Mutex<HashMap<String, hook::PodSandboxHookResponse>>>,
    container_answers: Arc<Mutex<HashMap<String, hook::ContainerResourceHookResponse>>>,
    refuse: Arc<Mutex<bool>>,
}

impl StageHook {
    pub fn serve(&self, socket: &Path) {
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let next = listener.accept().await.map(|(stream, _)| stream);
            Some((next, listener))
        });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RuntimeHookServiceServer::new(self.clone()))
                .serve_with_incoming(incoming),
        );
    }

    pub fn answer_pod(&self, stage: &str, answer: hook::PodSandboxHookResponse) {
        self.pod_answers
            .lock()
            .unwrap()
            .insert(stage.into(), answer);
    }

    pub fn answer_container(&self, stage: &str, answer: hook::ContainerResourceHookResponse) {
        self.container_answers
            .lock()
            .unwrap()
            .insert(stage.into(), answer);
    }

    pub fn refuse(&self, refuse: bool) {
        *self.refuse.lock().unwrap() = refuse;
    }

    pub fn calls(&self) -> Vec<HookCall> {
        self.calls.lock().unwrap().clone()
    }

    pub fn stages(&self) -> Vec<String> {
        self.calls().iter().map(|c| c.stage().to_string()).collect()
    }

    pub fn clear(&self) {
        self.calls.lock().unwrap().clear();
    }

    /// The last call of `stage`.
    pub fn last(&self, stage: &str) -> Option<HookCall> {
        self.calls().into_iter().rev().find(|c| c.stage() == stage)
    }

    fn pod(&self, stage: &str, request: hook::PodSandboxHookRequest) -> PodResult {
        self.calls
            .lock()
            .unwrap()
            .push(HookCall::Pod(stage.into(), request));
        if *self.refuse.lock().unwrap() {
            return Err(Status::failed_precondition("hook refused"));
        }
        let answer = self.pod_answers.lock().unwrap().get(stage).cloned();
        Ok(Response::new(answer.unwrap_or_default()))
    }

    fn container(
        &self,
        stage: &str,
        request: hook::ContainerResourceHookRequest,
    ) -> ContainerResult {
        self.calls
            .lock()
            .unwrap()
            .push(HookCall::Container(stage.into(), request));
        if *self.refuse.lock().unwrap() {
            return Err(Status::failed_precondition("hook refused"));
        }
        let answer = self.container_answers.lock().unwrap().get(stage).cloned();
        Ok(Response::new(answer.unwrap_or_default()))
    }
}

type PodResult = Result<Response<hook::PodSandboxHookResponse>, Status>;
type ContainerResult = Result<Response<hook::ContainerResourceHookResponse>, Status>;

#[tonic::async_trait]
impl RuntimeHookService for StageHook {
    async fn pre_run_pod_sandbox_hook(&self, r: Request<hook::PodSandboxHookRequest>) -> PodResult {
        self.pod("PreRunPodSandbox", r.into_inner())
    }
    async fn post_stop_pod_sandbox_hook(
        &self,
        r: Request<hook::PodSandboxHookRequest>,
    ) -> PodResult {
        self.pod("PostStopPodSandbox", r.into_inner())
    }
    async fn pre_create_container_hook(
        &self,
        r: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.container("PreCreateContainer", r.into_inner())
    }
    async fn pre_start_container_hook(
        &self,
        r: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.container("PreStartContainer", r.into_inner())
    }
    async fn post_start_container_hook(
        &self,
        r: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.container("PostStartContainer", r.into_inner())
    }
    async fn post_stop_container_hook(
        &self,
        r: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.container("PostStopContainer", r.into_inner())
    }
    async fn pre_update_container_resources_hook(
        &self,
        r: Request<hook::ContainerResourceHookRequest>,
    ) -> ContainerResult {
        self.container("PreUpdateContainerResources", r.into_inner())
    }
}

/// Every stage Docker mode can call.
pub const DOCKER_STAGES: [&str; 7] = [
    "PreRunPodSandbox",
    "PostStopPodSandbox",
    "PreCreateContainer",
    "PreStartContainer",
    "PostStartContainer",
    "PreUpdateContainerResources",
    "PostStopContainer",
];

/// A Docker proxy serving on `<dir>/docker-proxy.sock` in front of the
/// engine on `engine`, with registrations read from `hooks_dir`.
pub struct ServedDockerProxy {
    pub proxy: Arc<DockerProxy>,
    pub socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ServedDockerProxy {
    pub async fn start(dir: &Path, engine: &Path, hooks_dir: &Path) -> Self {
        let metrics = ProxyMetrics::default();
        let dispatcher = Dispatcher::new(
            Registry::watch(hooks_dir.to_path_buf(), Duration::from_secs(60)).await,
            Duration::from_secs(10),
            metrics.clone(),
        );
        let proxy = Arc::new(DockerProxy::new(
            engine.to_path_buf(),
            dispatcher,
            metrics,
            SkipLabel {
                key: "skip".into(),
                value: "true".into(),
            },
        ));
        let socket = dir.join("docker-proxy.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(Arc::clone(&proxy).serve(listener, async move {
            let _ = stopped.await;
        }));
        Self {
            proxy,
            socket,
            stop: Some(stop),
        }
    }
}

impl Drop for ServedDockerProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An HTTP answer: status and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "not JSON ({error}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Sends one request over a new connection to `socket`.
pub async fn call(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    content_type: &str,
) -> Answer {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "docker");
    if body.is_some() {
        request = request.header("content-type", content_type);
    }
    let request = request
        .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer { status, body }
}

/// A JSON request to `socket`.
pub async fn call_json(
    socket: &Path,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> Answer {
    call(
        socket,
        method,
        path,
        Some(body.to_string().as_bytes()),
        "application/json",
    )
    .await
}

//! A fake CRI runtime on a unix socket that keeps pods and containers in
//! memory, a hook server that records what it is asked, and a proxy wired
//! to both — the pieces of the store and lookup tests.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use apis::runtime::v1alpha1::runtime_hook_service_server::{
    RuntimeHookService, RuntimeHookServiceServer,
};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use koord_runtime_proxy::codec::{Received, ReceivingCodec};
use koord_runtime_proxy::config::Registry;
use koord_runtime_proxy::cri::v1 as cri;
use koord_runtime_proxy::cri::v1::runtime_service_client::RuntimeServiceClient;
use koord_runtime_proxy::dispatcher::Dispatcher;
use koord_runtime_proxy::metrics::ProxyMetrics;
use koord_runtime_proxy::proxy::{Backend, Proxy, SkipLabel};
use koord_runtime_proxy::store::MetaStore;
use koord_runtime_proxy::unix_channel;
use tonic::codegen::http;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

type HttpResponse = http::Response<tonic::body::Body>;

/// The kubelet's CRI message limit (`maxMsgSize` of k8s.io/cri-client), which
/// containerd's server also defaults to: the fake runtime, the recording hook
/// server and the kubelet-side test client use it.
pub const KUBELET_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// What the fake runtime holds.
#[derive(Default)]
pub struct RuntimeState {
    /// Sandbox and its cgroup parent.
    pub sandboxes: BTreeMap<String, (cri::PodSandbox, String)>,
    pub containers: BTreeMap<String, (cri::Container, Option<cri::LinuxContainerResources>)>,
    /// Method names in arrival order.
    pub calls: Vec<String>,
    next_id: u64,
}

impl RuntimeState {
    fn new_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{}", self.next_id)
    }

    /// Adds a pod as if the kubelet had created it without the proxy.
    pub fn add_pod(&mut self, name: &str, labels: &[(&str, &str)], cgroup_parent: &str) -> String {
        let id = self.new_id("pod");
        let sandbox = cri::PodSandbox {
            id: id.clone(),
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: pairs(labels),
            annotations: pairs(&[("pod-note", name)]),
            runtime_handler: "runc".into(),
            ..Default::default()
        };
        self.sandboxes
            .insert(id.clone(), (sandbox, cgroup_parent.to_string()));
        id
    }

    /// Adds a container of `pod` as if created without the proxy.
    pub fn add_container(&mut self, pod: &str, name: &str, cpu_shares: i64) -> String {
        let id = self.new_id("ctr");
        let container = cri::Container {
            id: id.clone(),
            pod_sandbox_id: pod.to_string(),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            annotations: pairs(&[("container-note", name)]),
            ..Default::default()
        };
        let resources = cri::LinuxContainerResources {
            cpu_shares,
            ..Default::default()
        };
        self.containers
            .insert(id.clone(), (container, Some(resources)));
        id
    }
}

pub fn pairs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A runtime answering the RuntimeService calls the proxy makes or forwards.
#[derive(Clone)]
pub struct FakeRuntime {
    pub state: Arc<Mutex<RuntimeState>>,
    /// While false, ListPodSandbox answers with the sandboxes present when it
    /// arrived, but only once this turns true (a slow runtime at start-up).
    listing_open: tokio::sync::watch::Sender<bool>,
}

impl FakeRuntime {
    pub fn serve(socket: &Path) -> Self {
        let (listing_open, _) = tokio::sync::watch::channel(true);
        let runtime = Self {
            state: Arc::default(),
            listing_open,
        };
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let served = runtime.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let runtime = served.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let runtime = runtime.clone();
                        async move { Ok::<_, Infallible>(runtime.handle(request).await) }
                    });
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        runtime
    }

    pub fn hold_listing(&self) {
        self.listing_open.send_replace(false);
    }

    pub fn release_listing(&self) {
        self.listing_open.send_replace(true);
    }

    pub fn calls(&self, method: &str) -> usize {
        let state = self.state.lock().unwrap();
        state.calls.iter().filter(|call| *call == method).count()
    }

    /// Waits until `method` has been called at least `count` times.
    pub async fn wait_for_calls(&self, method: &str, count: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.calls(method) < count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{method} was not called {count} time(s)"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn resources(&self, container: &str) -> Option<cri::LinuxContainerResources> {
        let state = self.state.lock().unwrap();
        state.containers.get(container).and_then(|(_, r)| r.clone())
    }

    async fn handle(self, request: http::Request<Incoming>) -> HttpResponse {
        let method = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        self.state.lock().unwrap().calls.push(method.clone());
        let state = Arc::clone(&self.state);
        match method.as_str() {
            "RunPodSandbox" => {
                answer(request, move |r: cri::RunPodSandboxRequest| async move {
                    let config = r.config.unwrap_or_default();
                    let mut state = state.lock().unwrap();
                    let id = state.new_id("pod");
                    let sandbox = cri::PodSandbox {
                        id: id.clone(),
                        metadata: config.metadata,
                        labels: config.labels,
                        annotations: config.annotations,
                        runtime_handler: r.runtime_handler,
                        ..Default::default()
                    };
                    let parent = config.linux.unwrap_or_default().cgroup_parent;
                    state.sandboxes.insert(id.clone(), (sandbox, parent));
                    Ok(cri::RunPodSandboxResponse { pod_sandbox_id: id })
                })
                .await
            }
            "StopPodSandbox" => {
                answer(request, move |r: cri::StopPodSandboxRequest| async move {
                    let state = state.lock().unwrap();
                    known(state.sandboxes.contains_key(&r.pod_sandbox_id), "pod")?;
                    Ok(cri::StopPodSandboxResponse {})
                })
                .await
            }
            "RemovePodSandbox" => {
                answer(request, move |r: cri::RemovePodSandboxRequest| async move {
                    let mut state = state.lock().unwrap();
                    state.sandboxes.remove(&r.pod_sandbox_id);
                    state
                        .containers
                        .retain(|_, (c, _)| c.pod_sandbox_id != r.pod_sandbox_id);
                    Ok(cri::RemovePodSandboxResponse {})
                })
                .await
            }
            "CreateContainer" => {
                answer(request, move |r: cri::CreateContainerRequest| async move {
                    let mut state = state.lock().unwrap();
                    known(state.sandboxes.contains_key(&r.pod_sandbox_id), "pod")?;
                    let config = r.config.unwrap_or_default();
                    let id = state.new_id("ctr");
                    let container = cri::Container {
                        id: id.clone(),
                        pod_sandbox_id: r.pod_sandbox_id,
                        metadata: config.metadata,
                        labels: config.labels,
                        annotations: config.annotations,
                        ..Default::default()
                    };
                    let resources = config.linux.and_then(|linux| linux.resources);
                    state.containers.insert(id.clone(), (container, resources));
                    Ok(cri::CreateContainerResponse { container_id: id })
                })
                .await
            }
            "StartContainer" => {
                answer(request, move |r: cri::StartContainerRequest| async move {
                    let state = state.lock().unwrap();
                    known(state.containers.contains_key(&r.container_id), "container")?;
                    Ok(cri::StartContainerResponse {})
                })
                .await
            }
            "StopContainer" => {
                answer(request, move |r: cri::StopContainerRequest| async move {
                    let state = state.lock().unwrap();
                    known(state.containers.contains_key(&r.container_id), "container")?;
                    Ok(cri::StopContainerResponse {})
                })
                .await
            }
            "RemoveContainer" => {
                answer(request, move |r: cri::RemoveContainerRequest| async move {
                    state.lock().unwrap().containers.remove(&r.container_id);
                    Ok(cri::RemoveContainerResponse {})
                })
                .await
            }
            "UpdateContainerResources" => {
                answer(
                    request,
                    move |r: cri::UpdateContainerResourcesRequest| async move {
                        let mut state = state.lock().unwrap();
                        let Some(entry) = state.containers.get_mut(&r.container_id) else {
                            return Err(Status::not_found("container not found"));
                        };
                        entry.1 = r.linux;
                        Ok(cri::UpdateContainerResourcesResponse {})
                    },
                )
                .await
            }
            "ListPodSandbox" => {
                let mut open = self.listing_open.subscribe();
                answer(request, move |_: cri::ListPodSandboxRequest| async move {
                    let items: Vec<cri::PodSandbox> = {
                        let state = state.lock().unwrap();
                        state.sandboxes.values().map(|(s, _)| s.clone()).collect()
                    };
                    let _ = open.wait_for(|open| *open).await;
                    Ok(cri::ListPodSandboxResponse { items })
                })
                .await
            }
            "PodSandboxStatus" => {
                answer(request, move |r: cri::PodSandboxStatusRequest| async move {
                    let state = state.lock().unwrap();
                    let Some((sandbox, parent)) = state.sandboxes.get(&r.pod_sandbox_id) else {
                        return Err(Status::not_found("pod not found"));
                    };
                    let info = serde_json::json!({"config": {"linux": {"cgroup_parent": parent}}});
                    Ok(cri::PodSandboxStatusResponse {
                        status: Some(cri::PodSandboxStatus {
                            id: sandbox.id.clone(),
                            metadata: sandbox.metadata.clone(),
                            labels: sandbox.labels.clone(),
                            annotations: sandbox.annotations.clone(),
                            runtime_handler: sandbox.runtime_handler.clone(),
                            ..Default::default()
                        }),
                        info: pairs(&[("info", &info.to_string())]),
                        ..Default::default()
                    })
                })
                .await
            }
            "ListContainers" => {
                answer(request, move |r: cri::ListContainersRequest| async move {
                    let state = state.lock().unwrap();
                    let id = r.filter.map(|f| f.id).unwrap_or_default();
                    let containers = state
                        .containers
                        .values()
                        .filter(|(c, _)| id.is_empty() || c.id == id)
                        .map(|(c, _)| c.clone())
                        .collect();
                    Ok(cri::ListContainersResponse { containers })
                })
                .await
            }
            "ContainerStatus" => {
                answer(request, move |r: cri::ContainerStatusRequest| async move {
                    let state = state.lock().unwrap();
                    let Some((container, resources)) = state.containers.get(&r.container_id) else {
                        return Err(Status::not_found("container not found"));
                    };
                    Ok(cri::ContainerStatusResponse {
                        status: Some(cri::ContainerStatus {
                            id: container.id.clone(),
                            metadata: container.metadata.clone(),
                            labels: container.labels.clone(),
                            annotations: container.annotations.clone(),
                            resources: Some(cri::ContainerResources {
                                linux: resources.clone(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                })
                .await
            }
            other => Status::unimplemented(format!("fake runtime has no {other}")).into_http(),
        }
    }
}

fn known(present: bool, what: &str) -> Result<(), Status> {
    if present {
        Ok(())
    } else {
        Err(Status::not_found(format!("{what} not found")))
    }
}

/// Decodes `Req`, runs `handler`, encodes its answer.
async fn answer<Req, Resp, F, Fut>(request: http::Request<Incoming>, handler: F) -> HttpResponse
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnOnce(Req) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Resp, Status>> + Send + 'static,
{
    let handler = Arc::new(Mutex::new(Some(handler)));
    let service = tower::service_fn(move |request: Request<Received<Req>>| {
        let handler = handler.lock().unwrap().take();
        async move {
            let handler = handler.ok_or_else(|| Status::internal("handler used twice"))?;
            handler(request.into_inner().message)
                .await
                .map(Response::new)
        }
    });
    tonic::server::Grpc::new(ReceivingCodec::<Req, Resp>::default())
        .max_decoding_message_size(KUBELET_MAX_MESSAGE)
        .max_encoding_message_size(KUBELET_MAX_MESSAGE)
        .unary(service, request)
        .await
}

/// One hook call as the hook server saw it.
#[derive(Debug, Clone)]
pub enum HookCall {
    Pod(String, hook::PodSandboxHookRequest),
    Container(String, hook::ContainerResourceHookRequest),
}

impl HookCall {
    pub fn stage(&self) -> &str {
        match self {
            HookCall::Pod(stage, _) | HookCall::Container(stage, _) => stage,
        }
    }

    pub fn container(&self) -> Option<&hook::ContainerResourceHookRequest> {
        match self {
            HookCall::Container(_, request) => Some(request),
            HookCall::Pod(..) => None,
        }
    }

    pub fn pod(&self) -> Option<&hook::PodSandboxHookRequest> {
        match self {
            HookCall::Pod(_, request) => Some(request),
            HookCall::Container(..) => None,
        }
    }
}

/// A hook server that records every call and answers pod hooks with
/// `pod_answer`, container hooks with `container_answer`.
#[derive(Clone, Default)]
pub struct RecordingHook {
    pub calls: Arc<Mutex<Vec<HookCall>>>,
    pub pod_answer: hook::PodSandboxHookResponse,
    pub container_answer: hook::ContainerResourceHookResponse,
}

impl RecordingHook {
    pub fn serve(&self, socket: &Path) {
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let next = listener.accept().await.map(|(stream, _)| stream);
            Some((next, listener))
        });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(
                    RuntimeHookServiceServer::new(self.clone())
                        .max_decoding_message_size(KUBELET_MAX_MESSAGE)
                        .max_encoding_message_size(KUBELET_MAX_MESSAGE),
                )
                .serve_with_incoming(incoming),
        );
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

    fn pod(&self, stage: &str, request: hook::PodSandboxHookRequest) -> PodResult {
        self.calls
            .lock()
            .unwrap()
            .push(HookCall::Pod(stage.into(), request));
        Ok(Response::new(self.pod_answer.clone()))
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
        Ok(Response::new(self.container_answer.clone()))
    }
}

type PodResult = Result<Response<hook::PodSandboxHookResponse>, Status>;
type ContainerResult = Result<Response<hook::ContainerResourceHookResponse>, Status>;

#[tonic::async_trait]
impl RuntimeHookService for RecordingHook {
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

/// Every stage a CRI call can trigger.
pub const ALL_STAGES: [&str; 7] = [
    "PreRunPodSandbox",
    "PostStopPodSandbox",
    "PreCreateContainer",
    "PreStartContainer",
    "PostStartContainer",
    "PreUpdateContainerResources",
    "PostStopContainer",
];

/// A proxy serving on `<dir>/proxy.sock` in front of the runtime on
/// `runtime_socket`, with registrations read from `hooks_dir`.
pub struct ServedProxy {
    pub proxy: Arc<Proxy>,
    pub socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ServedProxy {
    pub async fn start(dir: &Path, runtime_socket: &Path, hooks_dir: &Path) -> Self {
        let metrics = ProxyMetrics::default();
        let runtime = unix_channel(runtime_socket.to_path_buf());
        let proxy = Arc::new(Proxy {
            backend: Backend {
                runtime: runtime.clone(),
                image: runtime,
            },
            dispatcher: Dispatcher::new(
                Registry::watch(hooks_dir.to_path_buf(), Duration::from_secs(60)).await,
                Duration::from_secs(10),
                metrics.clone(),
            ),
            store: MetaStore::default(),
            metrics,
            skip: SkipLabel {
                key: "skip".into(),
                value: "true".into(),
            },
            max_message_size: koord_runtime_proxy::DEFAULT_MAX_MESSAGE_SIZE,
        });
        let socket = dir.join("proxy.sock");
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

    /// A kubelet-side client of the proxy.
    pub fn client(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(unix_channel(self.socket.clone()))
            .max_decoding_message_size(KUBELET_MAX_MESSAGE)
            .max_encoding_message_size(KUBELET_MAX_MESSAGE)
    }
}

impl Drop for ServedProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

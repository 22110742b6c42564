//! The CRI server: intercepted RuntimeService calls go through the hook
//! servers; every other call (ImageService, streaming, unknown methods) is
//! forwarded as raw HTTP/2 to the backend, so answers and errors come back
//! exactly as the runtime sent them.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::bytes::Bytes;
use tokio::net::UnixListener;
use tonic::codegen::http;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::codec::{ForwardingCodec, Received, ReceivingCodec};
use crate::config::{CriMethod, FailurePolicy, HookPhase, HookType};
use crate::cri::v1 as cri;
use crate::cri::v1::runtime_service_client::RuntimeServiceClient;
use crate::dispatcher::{Dispatched, Dispatcher};
use crate::merge;
use crate::metrics::ProxyMetrics;
use crate::store::{self, ContainerEntry, MetaStore, RuntimeSnapshot};
use crate::unknown_fields::Schema;

type Response = http::Response<tonic::body::Body>;

/// Longest wait for the runtime to describe a container or pod the store lacks.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The backend runtime's sockets.
#[derive(Clone)]
pub struct Backend {
    pub runtime: Channel,
    pub image: Channel,
}

/// Pods carrying this label skip the hook servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipLabel {
    pub key: String,
    pub value: String,
}

impl SkipLabel {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        labels.get(&self.key) == Some(&self.value)
    }
}

pub struct Proxy {
    pub backend: Backend,
    pub dispatcher: Dispatcher,
    pub store: MetaStore,
    pub metrics: ProxyMetrics,
    pub skip: SkipLabel,
    /// Largest CRI message taken or sent, to and from the kubelet and the
    /// runtime (`--cri-max-message-size`, the kubelet's 16 MiB by default).
    pub max_message_size: usize,
}

/// A pre-hook's outcome: the answer to merge, nothing, or the refusal.
fn pre_hook_outcome<T>(dispatched: Dispatched<T>) -> Result<Option<T>, Status> {
    match dispatched {
        None => Ok(None),
        Some((Ok(answer), _)) => Ok(Some(answer)),
        Some((Err(error), FailurePolicy::Fail)) => Err(Status::new(
            Code::Unknown,
            format!("hook server err (failure-policy Fail): {error}"),
        )),
        Some((Err(_), _)) => Ok(None),
    }
}

/// Serves one unary call with typed messages, taking and sending messages
/// of at most `limit` bytes.
async fn unary<Req, Resp, F, Fut>(
    request: http::Request<Incoming>,
    limit: usize,
    handler: F,
) -> Response
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnOnce(tonic::Request<Received<Req>>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
{
    let mut handler = Some(handler);
    let service = tower::service_fn(move |request: tonic::Request<Received<Req>>| {
        let handler = handler.take();
        async move {
            match handler {
                Some(handler) => handler(request).await,
                None => Err(Status::internal("request handler used twice")),
            }
        }
    });
    tonic::server::Grpc::new(ReceivingCodec::<Req, Resp>::default())
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit)
        .unary(service, request)
        .await
}

/// The method label of a CRI call's metrics: the method of a CRI v1 path,
/// else `unknown`, so arbitrary paths cannot grow the label set.
pub fn method_label(path: &str) -> &str {
    let known = CriMethod::from_path(path).is_some()
        || Schema::cri().is_ok_and(|schema| schema.knows_method(path));
    match path.rsplit_once('/') {
        Some((_, method)) if known => method,
        _ => "unknown",
    }
}

fn forwarded<T>(request: tonic::Request<Received<T>>) -> (tonic::metadata::MetadataMap, T, Bytes) {
    let (metadata, _, received) = request.into_parts();
    (metadata, received.message, received.raw)
}

/// The request body for the runtime: the kubelet's bytes when nothing was
/// merged; otherwise the merged message followed by the original's fields
/// that our CRI API does not know (see `unknown_fields`).
pub fn request_body<M: prost::Message>(
    metrics: &ProxyMetrics,
    method: CriMethod,
    original: Bytes,
    merged: Option<&M>,
) -> Bytes {
    let Some(message) = merged else {
        return original;
    };
    let mut body = message.encode_to_vec();
    // The schema is embedded at build time; `run` reports if it cannot be read.
    let Ok(schema) = Schema::cri() else {
        return body.into();
    };
    let message_name = format!(".runtime.v1.{}Request", method.name());
    match schema.reattach(&message_name, &original, &body) {
        Ok(reattached) => {
            if metrics.unknown_fields(method.name(), reattached.kept, reattached.dropped) {
                tracing::warn!(
                    method = method.name(),
                    dropped = reattached.dropped,
                    "the kubelet sent fields this proxy's CRI API does not know inside list or map \
                     elements (or in a part the merge removed); they were dropped from the merged \
                     request (logged once per method)"
                );
            }
            body.extend_from_slice(&reattached.trailer);
        }
        // E.g. a group-encoded unknown field (prost skips it, the walk refuses
        // it): send the merged message alone, as before unknown fields were kept.
        Err(error) => tracing::debug!(%error, method = method.name(), "unknown fields not kept"),
    }
    body.into()
}

impl Proxy {
    /// Serves CRI on `listener` until `shutdown` resolves.
    pub async fn serve(
        self: Arc<Self>,
        listener: UnixListener,
        shutdown: impl Future<Output = ()>,
    ) {
        crate::listen::accept_until(listener, shutdown, "CRI", |stream| {
            let proxy = Arc::clone(&self);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let proxy = Arc::clone(&proxy);
                    async move { Ok::<_, Infallible>(proxy.handle(request).await) }
                });
                if let Err(error) = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(%error, "CRI connection ended");
                }
            });
        })
        .await;
    }

    /// Answers one CRI request.
    pub async fn handle(self: Arc<Self>, request: http::Request<Incoming>) -> Response {
        let path = request.uri().path().to_string();
        let method_name = method_label(&path).to_string();
        self.metrics.call(&method_name);
        let response = match CriMethod::from_path(&path) {
            Some(method) => Arc::clone(&self).intercept(method, request).await,
            None => self.pass_through(&path, request).await,
        };
        if let Some(code) = grpc_code(&response)
            && code != Code::Ok
        {
            self.metrics.error(&method_name, code);
            if code == Code::OutOfRange && over_size_limit(&response) {
                tracing::warn!(
                    method = %method_name,
                    limit = self.max_message_size,
                    "a CRI message over a size limit was refused (the proxy's limit is \
                     --cri-max-message-size; the kubelet's is 16 MiB)"
                );
            }
        }
        response
    }

    /// A client of the runtime's RuntimeService with the CRI message limit.
    pub fn runtime_client(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.backend.runtime.clone())
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size)
    }

    async fn pass_through(&self, path: &str, request: http::Request<Incoming>) -> Response {
        let channel = if path.starts_with("/runtime.v1.ImageService/") {
            self.backend.image.clone()
        } else {
            self.backend.runtime.clone()
        };
        let request = request.map(tonic::body::Body::new);
        match tower::ServiceExt::oneshot(channel, request).await {
            Ok(response) => response,
            Err(error) => {
                Status::unavailable(format!("backend runtime unreachable: {error}")).into_http()
            }
        }
    }

    /// Sends an encoded request to the runtime's RuntimeService.
    async fn call_runtime<Resp>(
        &self,
        method: CriMethod,
        metadata: tonic::metadata::MetadataMap,
        body: Bytes,
    ) -> Result<tonic::Response<Resp>, Status>
    where
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.backend.runtime.clone())
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size);
        grpc.ready().await.map_err(|error| {
            Status::unavailable(format!("backend runtime unreachable: {error}"))
        })?;
        let path = http::uri::PathAndQuery::try_from(format!(
            "/runtime.v1.RuntimeService/{}",
            method.name()
        ))
        .map_err(|error| Status::internal(format!("bad method path: {error}")))?;
        let mut request = tonic::Request::from_parts(metadata, Default::default(), body);
        request.extensions_mut().insert(tonic::GrpcMethod::new(
            "runtime.v1.RuntimeService",
            method.name(),
        ));
        grpc.unary(request, path, ForwardingCodec::<Resp>::default())
            .await
    }

    async fn intercept(
        self: Arc<Self>,
        method: CriMethod,
        request: http::Request<Incoming>,
    ) -> Response {
        let limit = self.max_message_size;
        let proxy = self;
        match method {
            CriMethod::RunPodSandbox => {
                unary(request, limit, move |r| async move {
                    proxy.run_pod_sandbox(r).await
                })
                .await
            }
            CriMethod::StopPodSandbox => {
                unary(request, limit, move |r| async move {
                    proxy.stop_pod_sandbox(r).await
                })
                .await
            }
            CriMethod::RemovePodSandbox => {
                unary(request, limit, move |r| async move {
                    proxy.remove_pod_sandbox(r).await
                })
                .await
            }
            CriMethod::CreateContainer => {
                unary(request, limit, move |r| async move {
                    proxy.create_container(r).await
                })
                .await
            }
            CriMethod::StartContainer => {
                unary(request, limit, move |r| async move {
                    proxy.start_container(r).await
                })
                .await
            }
            CriMethod::StopContainer => {
                unary(request, limit, move |r| async move {
                    proxy.stop_container(r).await
                })
                .await
            }
            CriMethod::RemoveContainer => {
                unary(request, limit, move |r| async move {
                    proxy.remove_container(r).await
                })
                .await
            }
            CriMethod::UpdateContainerResources => {
                unary(request, limit, move |r| async move {
                    proxy.update_container_resources(r).await
                })
                .await
            }
        }
    }

    async fn run_pod_sandbox(
        &self,
        request: tonic::Request<Received<cri::RunPodSandboxRequest>>,
    ) -> Result<tonic::Response<cri::RunPodSandboxResponse>, Status> {
        let (metadata, mut message, raw) = forwarded(request);
        let mut context = merge::pod_hook_request(&message);
        let mut merged = false;
        if !self.skip.matches(&context.labels) {
            let stage = HookType::PreRunPodSandbox;
            let dispatched = self.dispatcher.pod_hook(stage, context.clone()).await;
            if let Some(answer) = pre_hook_outcome(dispatched)? {
                merge::merge_pod_answer(&mut message, &mut context, &answer);
                merged = true;
            }
        }
        let method = CriMethod::RunPodSandbox;
        let body = request_body(&self.metrics, method, raw, merged.then_some(&message));
        let response: tonic::Response<cri::RunPodSandboxResponse> =
            self.call_runtime(method, metadata, body).await?;
        self.store
            .put_pod(&response.get_ref().pod_sandbox_id, context);
        Ok(response)
    }

    async fn stop_pod_sandbox(
        &self,
        request: tonic::Request<Received<cri::StopPodSandboxRequest>>,
    ) -> Result<tonic::Response<cri::StopPodSandboxResponse>, Status> {
        let (metadata, message, raw) = forwarded(request);
        let pod = self
            .pod_context(&message.pod_sandbox_id, CriMethod::StopPodSandbox)
            .await;
        let result = self
            .call_runtime(CriMethod::StopPodSandbox, metadata, raw)
            .await;
        if let Some(pod) = pod.filter(|pod| !self.skip.matches(&pod.labels)) {
            let stage = CriMethod::StopPodSandbox.hook(HookPhase::Post);
            if let Some(stage) = stage {
                let _ = self.dispatcher.pod_hook(stage, pod).await;
            }
        }
        result
    }

    async fn remove_pod_sandbox(
        &self,
        request: tonic::Request<Received<cri::RemovePodSandboxRequest>>,
    ) -> Result<tonic::Response<cri::RemovePodSandboxResponse>, Status> {
        let (metadata, message, raw) = forwarded(request);
        let id = message.pod_sandbox_id;
        let response = self
            .call_runtime(CriMethod::RemovePodSandbox, metadata, raw)
            .await?;
        self.store.remove_pod(&id);
        Ok(response)
    }

    async fn create_container(
        &self,
        request: tonic::Request<Received<cri::CreateContainerRequest>>,
    ) -> Result<tonic::Response<cri::CreateContainerResponse>, Status> {
        let (metadata, mut message, raw) = forwarded(request);
        let pod_id = message.pod_sandbox_id.clone();
        let pod = self.store.pod(&pod_id);
        let mut context = merge::container_hook_request(&message, pod.as_ref());
        let mut merged = false;
        if !self.skip.matches(&context.pod_labels) {
            let dispatched = self
                .dispatcher
                .container_hook(HookType::PreCreateContainer, context.clone())
                .await;
            if let Some(answer) = pre_hook_outcome(dispatched)? {
                merge::merge_create_answer(&mut message, &mut context, &answer);
                merged = true;
            }
        }
        let method = CriMethod::CreateContainer;
        let body = request_body(&self.metrics, method, raw, merged.then_some(&message));
        let response: tonic::Response<cri::CreateContainerResponse> =
            self.call_runtime(method, metadata, body).await?;
        let id = response.get_ref().container_id.clone();
        if let Some(meta) = context.container_meta.as_mut() {
            meta.id = id.clone();
        }
        self.store.put_container(
            &id,
            ContainerEntry {
                pod_id,
                request: context,
            },
        );
        Ok(response)
    }

    /// Whether a hook server is registered for a stage of `method`; if not,
    /// there is no need to ask the runtime about ids the store lacks.
    fn any_server_for(&self, method: CriMethod) -> bool {
        [HookPhase::Pre, HookPhase::Post]
            .into_iter()
            .filter_map(|phase| method.hook(phase))
            .any(|stage| self.dispatcher.serves(stage))
    }

    /// The context of a pod: from the store, else from the runtime (then
    /// stored). `None`, with a warning, when neither knows it.
    async fn pod_context(
        &self,
        id: &str,
        method: CriMethod,
    ) -> Option<hook::PodSandboxHookRequest> {
        if let Some(pod) = self.store.pod(id) {
            return Some(pod);
        }
        if !self.any_server_for(method) {
            return None;
        }
        let mut client = self.runtime_client();
        match tokio::time::timeout(LOOKUP_TIMEOUT, lookup_pod(&mut client, id)).await {
            Ok(Ok(pod)) => {
                tracing::info!(
                    pod = id,
                    method = method.name(),
                    "pod missing from the store; context taken from the runtime"
                );
                self.store.put_pod(id, pod.clone());
                Some(pod)
            }
            Ok(Err(status)) => {
                lookup_failed("pod", id, method, &status);
                None
            }
            Err(_) => {
                lookup_timed_out("pod", id, method);
                None
            }
        }
    }

    /// The context of a container whose pod does not skip hooks: from the
    /// store, else from the runtime (then stored); `None` when hooks are
    /// skipped — the pod skips them, or no one can describe the container.
    async fn hooked_container(&self, id: &str, method: CriMethod) -> Option<ContainerEntry> {
        let entry = match self.store.container(id) {
            Some(entry) => entry,
            None if self.any_server_for(method) => self.look_up_container(id, method).await?,
            None => return None,
        };
        (!self.skip.matches(&entry.request.pod_labels)).then_some(entry)
    }

    async fn look_up_container(&self, id: &str, method: CriMethod) -> Option<ContainerEntry> {
        let mut client = self.runtime_client();
        let lookup = async {
            let (container, resources) = lookup_container(&mut client, id).await?;
            let pod = match self.store.pod(&container.pod_sandbox_id) {
                Some(pod) => pod,
                None => {
                    let pod = lookup_pod(&mut client, &container.pod_sandbox_id).await?;
                    self.store.put_pod(&container.pod_sandbox_id, pod.clone());
                    pod
                }
            };
            Ok::<_, Status>(ContainerEntry {
                pod_id: container.pod_sandbox_id.clone(),
                request: store::container_from_runtime(&container, resources.as_ref(), &pod),
            })
        };
        match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
            Ok(Ok(entry)) => {
                tracing::info!(
                    container = id,
                    pod = %entry.pod_id,
                    method = method.name(),
                    "container missing from the store; context taken from the runtime"
                );
                self.store.put_container(id, entry.clone());
                Some(entry)
            }
            Ok(Err(status)) => {
                lookup_failed("container", id, method, &status);
                None
            }
            Err(_) => {
                lookup_timed_out("container", id, method);
                None
            }
        }
    }

    async fn start_container(
        &self,
        request: tonic::Request<Received<cri::StartContainerRequest>>,
    ) -> Result<tonic::Response<cri::StartContainerResponse>, Status> {
        let (metadata, message, raw) = forwarded(request);
        let entry = self
            .hooked_container(&message.container_id, CriMethod::StartContainer)
            .await;
        if let Some(entry) = &entry {
            let dispatched = self
                .dispatcher
                .container_hook(HookType::PreStartContainer, entry.request.clone())
                .await;
            pre_hook_outcome(dispatched)?;
        }
        let result = self
            .call_runtime(CriMethod::StartContainer, metadata, raw)
            .await;
        if let Some(entry) = entry {
            let _ = self
                .dispatcher
                .container_hook(HookType::PostStartContainer, entry.request)
                .await;
        }
        result
    }

    async fn stop_container(
        &self,
        request: tonic::Request<Received<cri::StopContainerRequest>>,
    ) -> Result<tonic::Response<cri::StopContainerResponse>, Status> {
        let (metadata, message, raw) = forwarded(request);
        let entry = self
            .hooked_container(&message.container_id, CriMethod::StopContainer)
            .await;
        let result = self
            .call_runtime(CriMethod::StopContainer, metadata, raw)
            .await;
        if let Some(entry) = entry {
            let _ = self
                .dispatcher
                .container_hook(HookType::PostStopContainer, entry.request)
                .await;
        }
        result
    }

    async fn remove_container(
        &self,
        request: tonic::Request<Received<cri::RemoveContainerRequest>>,
    ) -> Result<tonic::Response<cri::RemoveContainerResponse>, Status> {
        let (metadata, message, raw) = forwarded(request);
        let id = message.container_id;
        let response = self
            .call_runtime(CriMethod::RemoveContainer, metadata, raw)
            .await?;
        self.store.remove_container(&id);
        Ok(response)
    }

    async fn update_container_resources(
        &self,
        request: tonic::Request<Received<cri::UpdateContainerResourcesRequest>>,
    ) -> Result<tonic::Response<cri::UpdateContainerResourcesResponse>, Status> {
        let (metadata, mut message, raw) = forwarded(request);
        let entry = self
            .hooked_container(&message.container_id, CriMethod::UpdateContainerResources)
            .await;
        let mut updated = None;
        let mut merged = false;
        if let Some(mut entry) = entry {
            merge::update_context_from_request(&mut entry.request, &message);
            let dispatched = self
                .dispatcher
                .container_hook(HookType::PreUpdateContainerResources, entry.request.clone())
                .await;
            if let Some(answer) = pre_hook_outcome(dispatched)? {
                merge::merge_update_answer(&mut message, &mut entry.request, &answer);
                merged = true;
            }
            updated = Some(entry);
        }
        let method = CriMethod::UpdateContainerResources;
        let body = request_body(&self.metrics, method, raw, merged.then_some(&message));
        let response: tonic::Response<cri::UpdateContainerResourcesResponse> =
            self.call_runtime(method, metadata, body).await?;
        let id = message.container_id;
        if let Some(entry) = updated {
            self.store.put_container(&id, entry);
        }
        Ok(response)
    }
}

/// Whether an error response is tonic's refusal of a message over its size
/// limit (`decoded` or `encoded message length too large`).
fn over_size_limit(response: &Response) -> bool {
    Status::from_header_map(response.headers())
        .is_some_and(|status| status.message().contains("message length too large"))
}

/// The gRPC status of a response when it is in the headers (errors
/// produced locally, trailers-only answers); streamed statuses are not seen.
fn grpc_code(response: &Response) -> Option<Code> {
    let value = response.headers().get("grpc-status")?;
    let number: i32 = value.to_str().ok()?.parse().ok()?;
    Some(Code::from_i32(number))
}

/// Reads pods and containers (with their status) from the runtime.
pub async fn snapshot_runtime(
    client: &mut RuntimeServiceClient<Channel>,
) -> Result<RuntimeSnapshot, Status> {
    let mut snapshot = RuntimeSnapshot::default();
    let sandboxes = client
        .list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await?
        .into_inner()
        .items;
    for sandbox in sandboxes {
        let info = client
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox.id.clone(),
                verbose: true,
            })
            .await
            .map(|response| response.into_inner().info)
            .unwrap_or_default();
        let parent = store::cgroup_parent_from_info(&info);
        snapshot.sandboxes.push((sandbox, parent));
    }
    let containers = client
        .list_containers(cri::ListContainersRequest::default())
        .await?
        .into_inner()
        .containers;
    for container in containers {
        let resources = client
            .container_status(cri::ContainerStatusRequest {
                container_id: container.id.clone(),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|response| response.into_inner().status)
            .and_then(|status| status.resources)
            .and_then(|resources| resources.linux);
        snapshot.containers.push((container, resources));
    }
    Ok(snapshot)
}

/// Logs why hooks are skipped for an id neither the store nor the runtime
/// can describe; NotFound (the call will fail the same way) is only a debug line.
fn lookup_failed(kind: &str, id: &str, method: CriMethod, status: &Status) {
    let method = method.name();
    if status.code() == Code::NotFound {
        tracing::debug!(kind, id, method, %status, "unknown to the store and to the runtime; hooks skipped");
    } else {
        tracing::warn!(kind, id, method, %status, "unknown to the store and the runtime cannot describe it; hooks skipped");
    }
}

fn lookup_timed_out(kind: &str, id: &str, method: CriMethod) {
    tracing::warn!(
        kind,
        id,
        method = method.name(),
        timeout = ?LOOKUP_TIMEOUT,
        "unknown to the store and the runtime did not describe it in time; hooks skipped"
    );
}

/// A pod's context as the runtime describes it (verbose status, for the
/// cgroup parent).
pub async fn lookup_pod(
    client: &mut RuntimeServiceClient<Channel>,
    id: &str,
) -> Result<hook::PodSandboxHookRequest, Status> {
    let response = client
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        })
        .await?
        .into_inner();
    let cgroup_parent = store::cgroup_parent_from_info(&response.info);
    let status = response
        .status
        .ok_or_else(|| Status::not_found(format!("runtime gave no status for pod {id}")))?;
    let sandbox = cri::PodSandbox {
        id: status.id,
        metadata: status.metadata,
        state: status.state,
        created_at: status.created_at,
        labels: status.labels,
        annotations: status.annotations,
        runtime_handler: status.runtime_handler,
    };
    Ok(store::pod_from_sandbox(&sandbox, &cgroup_parent))
}

/// A container as the runtime lists it (for its pod id and metadata) and its
/// current resources (from its status; `None` when the status has none).
pub async fn lookup_container(
    client: &mut RuntimeServiceClient<Channel>,
    id: &str,
) -> Result<(cri::Container, Option<cri::LinuxContainerResources>), Status> {
    let listed = client
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                id: id.to_string(),
                ..Default::default()
            }),
        })
        .await?
        .into_inner()
        .containers;
    let container = listed
        .into_iter()
        .find(|container| container.id == id)
        .ok_or_else(|| Status::not_found(format!("runtime lists no container {id}")))?;
    let resources = match client
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
    {
        Ok(response) => response
            .into_inner()
            .status
            .and_then(|status| status.resources)
            .and_then(|resources| resources.linux),
        Err(status) => {
            tracing::debug!(container = id, %status, "no container status; resources unknown");
            None
        }
    };
    Ok((container, resources))
}

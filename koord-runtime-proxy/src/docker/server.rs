//! The I/O shell of Docker mode: an HTTP/1.1 server on the proxy's unix
//! socket that forwards every request to the engine's socket, running the
//! hooks around the calls `core::route` picks out. Requests it does not
//! intercept, upgrades (attach, exec) included, go through unchanged.

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::http::{self, HeaderValue, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use koord_common::sync::RwLockExt;
use serde_json::Value;
use tokio::net::{UnixListener, UnixStream};

use super::core::{self, CgroupDriver, CreateBody, Described, Kind, Route, UpdateBody};
use crate::config::{FailurePolicy, HookType};
use crate::dispatcher::{Dispatched, Dispatcher};
use crate::metrics::ProxyMetrics;
use crate::proxy::SkipLabel;
use crate::store::{self, ContainerEntry, MetaStore, RuntimeSnapshot};

/// A body sent on: the client's (streamed) or one the proxy made.
pub type ProxyBody = Either<Incoming, Full<Bytes>>;

/// Longest wait for the engine to describe a container the store lacks.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest engine answer the proxy reads itself (inspect, list, info, create).
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot connect to the Docker engine at {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("Docker engine connection failed: {0}")]
    Http(#[from] hyper::Error),
    #[error("Docker engine answered {status} to {what}: {message}")]
    Status {
        what: String,
        status: StatusCode,
        message: String,
    },
    #[error("Docker engine's answer to {what} is unreadable: {reason}")]
    Answer { what: String, reason: String },
}

#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("cannot read the request body: {0}")]
    Broken(String),
}

/// Reads a body of at most `limit` bytes.
async fn read_capped<B>(body: B, limit: usize) -> Result<Bytes, ReadError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(ReadError::TooLarge { limit })
        }
        Err(error) => Err(ReadError::Broken(error.to_string())),
    }
}

fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A Docker-style error answer.
pub fn error_response(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(core::error_body(
        message,
    )))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A pre-hook's outcome: the answer to apply, nothing, or why the call is
/// refused (failure policy `Fail`), as in CRI mode.
fn pre_hook_outcome<T>(dispatched: Dispatched<T>) -> Result<Option<T>, String> {
    match dispatched {
        None => Ok(None),
        Some((Ok(answer), _)) => Ok(Some(answer)),
        Some((Err(error), FailurePolicy::Fail)) => {
            Err(format!("hook server err (failure-policy Fail): {error}"))
        }
        Some((Err(_), _)) => Ok(None),
    }
}

/// The answer refusing a call a pre-hook failed under `Fail`.
fn refused(message: &str) -> Response<ProxyBody> {
    error_response(StatusCode::INTERNAL_SERVER_ERROR, message)
}

/// The metrics label of a route.
fn call_label(route: &Route) -> &'static str {
    match route {
        Route::Create => "ContainerCreate",
        Route::Start(_) => "ContainerStart",
        Route::Stop(_) => "ContainerStop",
        Route::Update(_) => "ContainerUpdate",
        Route::Remove(_) => "ContainerDelete",
        Route::PassThrough => "other",
    }
}

pub struct DockerProxy {
    /// The engine's socket (`--remote-runtime-service-endpoint`).
    pub engine: PathBuf,
    pub dispatcher: Dispatcher,
    pub store: MetaStore,
    pub metrics: ProxyMetrics,
    pub skip: SkipLabel,
    /// The engine's cgroup driver, read from `GET /info` once.
    driver: RwLock<Option<CgroupDriver>>,
}

impl DockerProxy {
    pub fn new(
        engine: PathBuf,
        dispatcher: Dispatcher,
        metrics: ProxyMetrics,
        skip: SkipLabel,
    ) -> Self {
        Self {
            engine,
            dispatcher,
            store: MetaStore::default(),
            metrics,
            skip,
            driver: RwLock::new(None),
        }
    }

    /// Serves the Engine API on `listener` until `shutdown` resolves.
    pub async fn serve(
        self: Arc<Self>,
        listener: UnixListener,
        shutdown: impl Future<Output = ()>,
    ) {
        crate::listen::accept_until(listener, shutdown, "Docker API", |stream| {
            let proxy = Arc::clone(&self);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let proxy = Arc::clone(&proxy);
                    async move { Ok::<_, Infallible>(proxy.handle(request).await) }
                });
                if let Err(error) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades()
                    .await
                {
                    tracing::debug!(%error, "Docker API connection ended");
                }
            });
        })
        .await;
    }

    /// Answers one Engine API request.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ProxyBody> {
        let route = core::route(request.method(), request.uri().path());
        self.metrics.call(call_label(&route));
        match route {
            Route::PassThrough => self.pass_through(request).await,
            Route::Create => self.create(request).await,
            Route::Start(id) => self.start(&id, request).await,
            Route::Stop(id) => self.stop(&id, request).await,
            Route::Update(id) => self.update(&id, request).await,
            Route::Remove(id) => self.remove(&id, request).await,
        }
    }

    /// Sends a request to the engine on a new connection (kept open for an
    /// upgrade).
    pub async fn send(
        &self,
        request: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, EngineError> {
        let stream =
            UnixStream::connect(&self.engine)
                .await
                .map_err(|source| EngineError::Connect {
                    path: self.engine.display().to_string(),
                    source,
                })?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "Docker engine connection ended");
            }
        });
        Ok(sender.send_request(request).await?)
    }

    fn unreachable(error: &EngineError) -> Response<ProxyBody> {
        tracing::warn!(%error, "Docker engine unreachable");
        error_response(StatusCode::BAD_GATEWAY, &error.to_string())
    }

    /// Forwards a request unchanged; an upgrade (attach, exec start) is
    /// joined end to end once the engine switches protocols.
    async fn pass_through(&self, mut request: Request<Incoming>) -> Response<ProxyBody> {
        let client_upgrade = request
            .headers()
            .contains_key(header::UPGRADE)
            .then(|| hyper::upgrade::on(&mut request));
        let response = match self.send(request.map(Either::Left)).await {
            Ok(response) => response,
            Err(error) => return Self::unreachable(&error),
        };
        let mut response = response;
        if response.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client_upgrade) = client_upgrade
        {
            let engine_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                match tokio::try_join!(client_upgrade, engine_upgrade) {
                    Ok((client, engine)) => {
                        let mut client = TokioIo::new(client);
                        let mut engine = TokioIo::new(engine);
                        if let Err(error) =
                            tokio::io::copy_bidirectional(&mut client, &mut engine).await
                        {
                            tracing::debug!(%error, "upgraded Docker stream ended");
                        }
                    }
                    Err(error) => tracing::warn!(%error, "Docker stream upgrade failed"),
                }
            });
        }
        response.map(Either::Left)
    }

    /// Forwards a request whose body the proxy read (and may have rewritten).
    async fn send_read(
        &self,
        parts: http::request::Parts,
        body: Bytes,
    ) -> Result<Response<Incoming>, EngineError> {
        let mut request = Request::from_parts(parts, Either::Right(Full::new(body.clone())));
        let headers = request.headers_mut();
        headers.remove(header::TRANSFER_ENCODING);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        self.send(request).await
    }

    /// Reads an intercepted request's body, or the answer refusing it.
    async fn read_request(
        &self,
        request: Request<Incoming>,
    ) -> Result<(http::request::Parts, Bytes), Response<ProxyBody>> {
        let (parts, body) = request.into_parts();
        let limit = core::MAX_BODY_BYTES;
        let too_large = |path: &str| {
            tracing::warn!(path, limit, "Docker request body over the limit refused");
            error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("koord-runtime-proxy: request body is larger than {limit} bytes"),
            )
        };
        if declared_length(&parts.headers).is_some_and(|length| length > limit as u64) {
            return Err(too_large(parts.uri.path()));
        }
        match read_capped(body, limit).await {
            Ok(bytes) => Ok((parts, bytes)),
            Err(ReadError::TooLarge { .. }) => Err(too_large(parts.uri.path())),
            Err(error) => Err(error_response(StatusCode::BAD_REQUEST, &error.to_string())),
        }
    }

    /// GET `path` on the engine and parse the JSON answer.
    async fn get_json(&self, path: &str) -> Result<Value, EngineError> {
        let request = Request::get(path)
            .header(header::HOST, "docker")
            .body(Either::Right(Full::new(Bytes::new())))
            .map_err(|error| EngineError::Answer {
                what: path.to_string(),
                reason: error.to_string(),
            })?;
        let response = self.send(request).await?;
        let status = response.status();
        let body = read_capped(response.into_body(), MAX_ANSWER_BYTES)
            .await
            .map_err(|error| EngineError::Answer {
                what: path.to_string(),
                reason: error.to_string(),
            })?;
        if !status.is_success() {
            return Err(EngineError::Status {
                what: path.to_string(),
                status,
                message: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        serde_json::from_slice(&body).map_err(|error| EngineError::Answer {
            what: path.to_string(),
            reason: error.to_string(),
        })
    }

    /// The engine's cgroup driver, asked once; cgroupfs (with a warning)
    /// while the engine cannot say.
    pub async fn cgroup_driver(&self) -> CgroupDriver {
        if let Some(driver) = *self.driver.read_or_recover() {
            return driver;
        }
        match self.get_json("/info").await {
            Ok(info) => {
                let name = info
                    .get("CgroupDriver")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let driver = CgroupDriver::from_info(name);
                tracing::info!(cgroup_driver = name, "Docker engine's cgroup driver");
                *self.driver.write_or_recover() = Some(driver);
                driver
            }
            Err(error) => {
                tracing::warn!(%error, "cannot read the engine's cgroup driver; assuming cgroupfs for this call");
                CgroupDriver::Cgroupfs
            }
        }
    }

    /// Describes one container as the engine inspects it.
    async fn inspect(
        &self,
        id: &str,
        driver: CgroupDriver,
    ) -> Result<(String, Described), EngineError> {
        let path = format!("/containers/{id}/json");
        let inspected = self.get_json(&path).await?;
        let full_id = inspected
            .get("Id")
            .and_then(Value::as_str)
            .unwrap_or(id)
            .to_string();
        let described =
            core::describe(&inspected, driver).map_err(|error| EngineError::Answer {
                what: path,
                reason: error.to_string(),
            })?;
        Ok((full_id, described))
    }

    /// Reads every container from the engine into a store listing.
    pub async fn snapshot(&self) -> Result<RuntimeSnapshot, EngineError> {
        let driver = self.cgroup_driver().await;
        let listed = self.get_json("/containers/json?all=1").await?;
        let ids: Vec<String> = listed
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.get("Id").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let mut snapshot = RuntimeSnapshot::default();
        for id in ids {
            match self.inspect(&id, driver).await {
                Ok((
                    _,
                    Described::Sandbox {
                        sandbox,
                        cgroup_parent,
                    },
                )) => {
                    snapshot.sandboxes.push((*sandbox, cgroup_parent));
                }
                Ok((
                    _,
                    Described::Container {
                        container,
                        resources,
                    },
                )) => {
                    snapshot.containers.push((*container, Some(*resources)));
                }
                Ok((_, Described::Other)) => {}
                // Removed since the listing, or unreadable: it cannot get hooks either way.
                Err(error) => tracing::debug!(container = %id, %error, "not inspected"),
            }
        }
        Ok(snapshot)
    }

    /// Rebuilds the store from the engine, retrying until it answers.
    pub async fn rebuild_store(&self) {
        loop {
            self.store.begin_listing();
            match self.snapshot().await {
                Ok(snapshot) => {
                    let stats = self.store.merge_listing(snapshot);
                    let (pods, containers) = self.store.counts();
                    tracing::info!(pods, containers, listed = ?stats.listed, "metadata store rebuilt from the Docker engine");
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot list containers from the Docker engine yet; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn serves_any(&self, stages: &[HookType]) -> bool {
        stages.iter().any(|stage| self.dispatcher.serves(*stage))
    }

    /// A pod's context: from the store, else from the engine (then stored).
    async fn pod_context(&self, id: &str) -> Option<hook::PodSandboxHookRequest> {
        if let Some(pod) = self.store.pod(id) {
            return Some(pod);
        }
        let driver = self.cgroup_driver().await;
        match tokio::time::timeout(LOOKUP_TIMEOUT, self.inspect(id, driver)).await {
            Ok(Ok((
                full_id,
                Described::Sandbox {
                    sandbox,
                    cgroup_parent,
                },
            ))) => {
                let pod = store::pod_from_sandbox(&sandbox, &cgroup_parent);
                tracing::info!(pod = %full_id, "pod missing from the store; context taken from the engine");
                self.store.put_pod(&full_id, pod.clone());
                Some(pod)
            }
            Ok(Ok(_)) => None,
            Ok(Err(error)) => {
                tracing::warn!(pod = id, %error, "pod unknown to the store and the engine cannot describe it");
                None
            }
            Err(_) => {
                tracing::warn!(pod = id, "the engine did not describe the pod in time");
                None
            }
        }
    }

    /// What a start/stop/update path's id is: a container with its context,
    /// a sandbox, or unknown. Looked up in the engine only when a hook
    /// server serves one of `stages`.
    async fn resolve(&self, id: &str, stages: &[HookType]) -> Resolved {
        if let Some(entry) = self.store.container(id) {
            return Resolved::Container(id.to_string(), entry);
        }
        if let Some(pod) = self.store.pod(id) {
            return Resolved::Sandbox(pod);
        }
        if !self.serves_any(stages) {
            return Resolved::Unknown;
        }
        let driver = self.cgroup_driver().await;
        let described = match tokio::time::timeout(LOOKUP_TIMEOUT, self.inspect(id, driver)).await {
            Ok(Ok(described)) => described,
            Ok(Err(error)) => {
                tracing::debug!(container = id, %error, "unknown to the store and the engine; hooks skipped");
                return Resolved::Unknown;
            }
            Err(_) => {
                tracing::warn!(
                    container = id,
                    "the engine did not describe the container in time; hooks skipped"
                );
                return Resolved::Unknown;
            }
        };
        match described {
            (
                full_id,
                Described::Sandbox {
                    sandbox,
                    cgroup_parent,
                },
            ) => {
                let pod = store::pod_from_sandbox(&sandbox, &cgroup_parent);
                self.store.put_pod(&full_id, pod.clone());
                Resolved::Sandbox(pod)
            }
            (
                full_id,
                Described::Container {
                    container,
                    resources,
                },
            ) => {
                let pod = self
                    .pod_context(&container.pod_sandbox_id)
                    .await
                    .unwrap_or_default();
                let entry = ContainerEntry {
                    pod_id: container.pod_sandbox_id.clone(),
                    request: store::container_from_runtime(
                        &container,
                        Some(resources.as_ref()),
                        &pod,
                    ),
                };
                tracing::info!(container = %full_id, "container missing from the store; context taken from the engine");
                self.store.put_container(&full_id, entry.clone());
                Resolved::Container(full_id, entry)
            }
            (_, Described::Other) => Resolved::Unknown,
        }
    }

    async fn create(&self, request: Request<Incoming>) -> Response<ProxyBody> {
        let (parts, raw) = match self.read_request(request).await {
            Ok(read) => read,
            Err(refusal) => return refusal,
        };
        let name = core::query_param(parts.uri.query(), "name").unwrap_or_default();
        let mut body = match CreateBody::parse(&raw) {
            Ok(body) => body,
            Err(error) => {
                // The engine is the judge of its own API: it refuses the body
                // with its own error, and nothing is created without hooks.
                tracing::warn!(%error, name, "create body not understood; forwarded unchanged without hooks");
                return self.forward_read(parts, raw).await;
            }
        };
        let Some(meta) = core::kube_meta(&body.labels, &name) else {
            tracing::debug!(name, "not a Kubernetes container; forwarded without hooks");
            return self.forward_read(parts, raw).await;
        };
        let driver = self.cgroup_driver().await;
        let mut applied = core::Applied::default();
        let record: Record = match meta.kind {
            Kind::Sandbox => {
                let mut context = core::pod_hook_request(&meta, &body, driver);
                if !self.skip.matches(&context.labels) {
                    let dispatched = self
                        .dispatcher
                        .pod_hook(HookType::PreRunPodSandbox, context.clone())
                        .await;
                    match pre_hook_outcome(dispatched) {
                        Ok(Some(answer)) => {
                            applied =
                                core::apply_pod_answer(&mut body, &mut context, &answer, driver);
                        }
                        Ok(None) => {}
                        Err(message) => return refused(&message),
                    }
                }
                Record::Pod(context)
            }
            Kind::Container => {
                let pod = match &meta.sandbox_id {
                    Some(id) => self.pod_context(id).await,
                    None => None,
                };
                let mut context = core::container_hook_request(&meta, &body, pod.as_ref(), driver);
                if !self.skip.matches(&context.pod_labels) {
                    let dispatched = self
                        .dispatcher
                        .container_hook(HookType::PreCreateContainer, context.clone())
                        .await;
                    match pre_hook_outcome(dispatched) {
                        Ok(Some(answer)) => {
                            applied =
                                core::apply_create_answer(&mut body, &mut context, &answer, driver);
                        }
                        Ok(None) => {}
                        Err(message) => return refused(&message),
                    }
                }
                Record::Container(meta.sandbox_id.clone().unwrap_or_default(), context)
            }
        };
        let forwarded = if applied.changed() {
            tracing::info!(name, fields = ?applied.fields, "create body changed by hooks");
            Bytes::from(body.to_bytes())
        } else {
            raw
        };
        let response = match self.send_read(parts, forwarded).await {
            Ok(response) => response,
            Err(error) => return Self::unreachable(&error),
        };
        if !response.status().is_success() {
            return response.map(Either::Left);
        }
        // The id is in the answer, which is read (it is small) and sent on.
        let (answer_parts, answer_body) = response.into_parts();
        let answer = match read_capped(answer_body, MAX_ANSWER_BYTES).await {
            Ok(answer) => answer,
            Err(error) => {
                return error_response(
                    StatusCode::BAD_GATEWAY,
                    &format!("Docker engine's create answer: {error}"),
                );
            }
        };
        match core::created_id(&answer) {
            Some(id) => match record {
                Record::Pod(context) => self.store.put_pod(&id, context),
                Record::Container(pod_id, mut context) => {
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
                }
            },
            None => tracing::warn!(
                name,
                "the engine's create answer has no Id; container not stored"
            ),
        }
        Response::from_parts(answer_parts, Either::Right(Full::new(answer)))
    }

    async fn forward_read(&self, parts: http::request::Parts, body: Bytes) -> Response<ProxyBody> {
        match self.send_read(parts, body).await {
            Ok(response) => response.map(Either::Left),
            Err(error) => Self::unreachable(&error),
        }
    }

    async fn start(&self, id: &str, request: Request<Incoming>) -> Response<ProxyBody> {
        let stages = [HookType::PreStartContainer, HookType::PostStartContainer];
        let entry = match self.resolve(id, &stages).await {
            Resolved::Container(_, entry) if !self.skip.matches(&entry.request.pod_labels) => {
                Some(entry)
            }
            _ => None,
        };
        if let Some(entry) = &entry {
            let dispatched = self
                .dispatcher
                .container_hook(HookType::PreStartContainer, entry.request.clone())
                .await;
            if let Err(message) = pre_hook_outcome(dispatched) {
                return refused(&message);
            }
        }
        let response = self.pass_through(request).await;
        if let Some(entry) = entry {
            let _ = self
                .dispatcher
                .container_hook(HookType::PostStartContainer, entry.request)
                .await;
        }
        response
    }

    async fn stop(&self, id: &str, request: Request<Incoming>) -> Response<ProxyBody> {
        let stages = [HookType::PostStopContainer, HookType::PostStopPodSandbox];
        let resolved = self.resolve(id, &stages).await;
        let response = self.pass_through(request).await;
        match resolved {
            Resolved::Container(_, entry) if !self.skip.matches(&entry.request.pod_labels) => {
                let _ = self
                    .dispatcher
                    .container_hook(HookType::PostStopContainer, entry.request)
                    .await;
            }
            Resolved::Sandbox(pod) if !self.skip.matches(&pod.labels) => {
                let _ = self
                    .dispatcher
                    .pod_hook(HookType::PostStopPodSandbox, pod)
                    .await;
            }
            _ => {}
        }
        response
    }

    async fn update(&self, id: &str, request: Request<Incoming>) -> Response<ProxyBody> {
        let (parts, raw) = match self.read_request(request).await {
            Ok(read) => read,
            Err(refusal) => return refusal,
        };
        let mut body = match UpdateBody::parse(&raw) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(%error, container = id, "update body not understood; forwarded unchanged without hooks");
                return self.forward_read(parts, raw).await;
            }
        };
        let stages = [HookType::PreUpdateContainerResources];
        let mut updated = None;
        let mut applied = core::Applied::default();
        if let Resolved::Container(full_id, mut entry) = self.resolve(id, &stages).await
            && !self.skip.matches(&entry.request.pod_labels)
        {
            core::update_context(&mut entry.request, &body);
            let dispatched = self
                .dispatcher
                .container_hook(HookType::PreUpdateContainerResources, entry.request.clone())
                .await;
            match pre_hook_outcome(dispatched) {
                Ok(Some(answer)) => {
                    applied = core::apply_update_answer(&mut body, &mut entry.request, &answer);
                }
                Ok(None) => {}
                Err(message) => return refused(&message),
            }
            updated = Some((full_id, entry));
        }
        let forwarded = if applied.changed() {
            tracing::info!(container = id, fields = ?applied.fields, "update body changed by hooks");
            Bytes::from(body.to_bytes())
        } else {
            raw
        };
        let response = match self.send_read(parts, forwarded).await {
            Ok(response) => response,
            Err(error) => return Self::unreachable(&error),
        };
        if response.status().is_success()
            && let Some((full_id, entry)) = updated
        {
            self.store.put_container(&full_id, entry);
        }
        response.map(Either::Left)
    }

    async fn remove(&self, id: &str, request: Request<Incoming>) -> Response<ProxyBody> {
        let response = self.pass_through(request).await;
        if response.status().is_success() {
            self.store.remove_container(id);
            self.store.remove_pod(id);
        }
        response
    }
}

/// What a create stores once the engine gives the id.
enum Record {
    Pod(hook::PodSandboxHookRequest),
    Container(String, hook::ContainerResourceHookRequest),
}

/// What an id in a path is.
enum Resolved {
    Container(String, ContainerEntry),
    Sandbox(hook::PodSandboxHookRequest),
    Unknown,
}

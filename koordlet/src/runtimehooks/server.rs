//! The RuntimeHookService gRPC server (package `runtime.v1alpha1`) on a
//! unix socket, and the hook-server registration file the runtime proxy
//! reads (`<dir>/koordlet.json`).
//!
//! Each call converts the request, runs the [`HookDispatcher`] for the
//! stage, applies the side effects (pod cgroup files, resctrl, processes'
//! `oom_score_adj`) and answers with the request's values overlaid with the
//! decision. A fail-closed hook failure answers `FAILED_PRECONDITION`
//! naming the hook; the proxy then applies its own failure policy.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use apis::runtime::v1alpha1 as wire;
use apis::runtime::v1alpha1::runtime_hook_service_server::{
    RuntimeHookService, RuntimeHookServiceServer,
};
use koord_common::health::StatusCheck;
use tokio::net::UnixListener;
use tonic::{Request, Response, Status};

use super::apply::{EffectStatus, SideEffectApplier};
use super::dispatcher::HookDispatcher;
use super::protocol::{
    Adjustment, ContainerContext, FailurePolicy, HookFailure, HookRequest, HookStage, PodContext,
};
use crate::bounds::Bounded;
use crate::system::cgroup::CgroupResource;

/// Upstream's default socket (inside the koordlet container) and the path
/// the proxy on the host dials.
pub const DEFAULT_RUNTIME_HOOKS_ADDR: &str = "/host-var-run-koordlet/koordlet.sock";
pub const DEFAULT_HOST_ENDPOINT: &str = "/var/run/koordlet/koordlet.sock";
/// Upstream's registration directory and file name.
pub const DEFAULT_REGISTRATION_DIR: &str = "/etc/runtime/hookserver.d";
pub const REGISTRATION_FILE: &str = "koordlet.json";
/// The largest request or response the server takes or sends: the
/// kubelet's CRI limit, which the runtime proxy also uses.
pub const MAX_MESSAGE_SIZE: usize = apis::runtime::CRI_MAX_MESSAGE_SIZE;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot prepare the runtime hooks socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the hook server registration {path}: {source}")]
    Registration {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The service: dispatcher + side-effect applier.
#[derive(Clone)]
pub struct HookService {
    dispatcher: Arc<HookDispatcher>,
    applier: SideEffectApplier,
}

impl HookService {
    pub fn new(dispatcher: Arc<HookDispatcher>, applier: SideEffectApplier) -> Self {
        Self {
            dispatcher,
            applier,
        }
    }

    /// The gRPC service, taking and sending messages up to the kubelet's
    /// CRI limit ([`MAX_MESSAGE_SIZE`]): the proxy forwards CRI requests of
    /// that size. A larger request is refused before any hook runs, with
    /// tonic's `OUT_OF_RANGE` status naming the size and the limit (Go's
    /// gRPC says `RESOURCE_EXHAUSTED` for the same).
    pub fn into_server(self) -> RuntimeHookServiceServer<Self> {
        RuntimeHookServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn count(&self, method: &str, code: &str) {
        if let Some(metrics) = self.dispatcher.metrics() {
            metrics.count_server_request(method, code);
        }
    }

    /// Checks the request's cgroups (pure and on the node), runs the hooks
    /// and applies their side effects, all on the blocking pool: the scope
    /// check reads metadata and the effects write cgroup files.
    async fn decide(
        &self,
        method: &str,
        stage: HookStage,
        request: HookRequest,
    ) -> Result<Adjustment, Status> {
        let dispatcher = Arc::clone(&self.dispatcher);
        let applier = self.applier.clone();
        let decided = tokio::task::spawn_blocking(move || {
            let mut adjustment = dispatcher.run_checked(stage, &request, super::scope::check_fs)?;
            let effects = std::mem::take(&mut adjustment.side_effects);
            let reports = applier.apply_blocking(&effects);
            for report in &reports {
                if let (EffectStatus::PermissionDenied { .. }, Some(metrics)) =
                    (&report.status, dispatcher.metrics())
                {
                    metrics.count_permission_denied(&report.effect.resource_label());
                }
                log_effect(stage, &request, &report.effect, &report.status);
            }
            Ok(adjustment)
        })
        .await;
        match decided {
            Ok(Ok(adjustment)) => {
                self.count(method, "OK");
                Ok(adjustment)
            }
            Ok(Err(failure)) => {
                self.count(method, "FAILED_PRECONDITION");
                Err(failure_status(&failure))
            }
            Err(error) => {
                self.count(method, "INTERNAL");
                Err(Status::internal(format!(
                    "hook decision did not finish: {error}"
                )))
            }
        }
    }

    async fn container_call(
        &self,
        method: &str,
        stage: HookStage,
        request: Request<wire::ContainerResourceHookRequest>,
    ) -> Result<Response<wire::ContainerResourceHookResponse>, Status> {
        let request = request.into_inner();
        let mut context = ContainerContext::from(&request);
        if stage == HookStage::PostStartContainer {
            context.pids = self.container_pids(&context).await;
        }
        let adjustment = self
            .decide(method, stage, HookRequest::Container(context))
            .await?;
        if !adjustment.devices.is_empty() {
            // Upstream drops them silently here too; say so instead.
            let paths: Vec<&str> = adjustment.devices.iter().map(|d| d.path.as_str()).collect();
            tracing::warn!(
                method,
                devices = ?paths,
                "the RuntimeHookService response cannot carry device nodes; they are not added (use the NRI transport for RDMADeviceInject)"
            );
        }
        Ok(Response::new(adjustment.to_container_response(&request)))
    }

    async fn pod_call(
        &self,
        method: &str,
        stage: HookStage,
        request: Request<wire::PodSandboxHookRequest>,
    ) -> Result<Response<wire::PodSandboxHookResponse>, Status> {
        let request = request.into_inner();
        let context = PodContext::from(&request);
        let adjustment = self
            .decide(method, stage, HookRequest::Pod(context))
            .await?;
        Ok(Response::new(adjustment.to_pod_response(&request)))
    }

    /// The started container's processes, read from its cgroup (empty when
    /// unknown).
    async fn container_pids(&self, context: &ContainerContext) -> Vec<u32> {
        let layout = self.dispatcher.layout().clone();
        let Some(dir) = context.cgroup_dir(&layout) else {
            return Vec::new();
        };
        tokio::task::spawn_blocking(move || read_pids(&layout, &dir))
            .await
            .unwrap_or_default()
    }
}

/// PIDs listed in a cgroup's `cgroup.procs` (lines that are not numbers are
/// skipped), read without following a symlink below the kubepods directory.
pub fn read_pids(layout: &crate::system::cgroup::CgroupLayout, dir: &Path) -> Vec<u32> {
    layout
        .file_location(dir, CgroupResource::CgroupProcs)
        .ok()
        .and_then(|location| crate::system::cgroupfs::read_beneath(&location).ok())
        .map(|text| {
            text.lines()
                .filter_map(|line| line.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn failure_status(failure: &HookFailure) -> Status {
    Status::failed_precondition(failure.to_string())
}

fn log_effect(
    stage: HookStage,
    request: &HookRequest,
    effect: &super::protocol::SideEffect,
    status: &EffectStatus,
) {
    let pod = &request.pod().meta;
    let effect = effect.summary();
    match status {
        EffectStatus::Applied | EffectStatus::Unchanged => {
            tracing::debug!(%stage, pod = %pod, %effect, ?status, "hook side effect")
        }
        EffectStatus::NotFound => {
            tracing::debug!(%stage, pod = %pod, %effect, "hook side effect target does not exist yet; the reconciler applies it")
        }
        EffectStatus::PermissionDenied { lowering, error } => {
            tracing::warn!(%stage, pod = %pod, %effect, lowering, error = %Bounded(error), "hook side effect refused by the kernel")
        }
        EffectStatus::Failed(error) => {
            tracing::warn!(%stage, pod = %pod, %effect, error = %Bounded(error), "hook side effect failed")
        }
    }
}

#[tonic::async_trait]
impl RuntimeHookService for HookService {
    async fn pre_run_pod_sandbox_hook(
        &self,
        request: Request<wire::PodSandboxHookRequest>,
    ) -> Result<Response<wire::PodSandboxHookResponse>, Status> {
        self.pod_call("PreRunPodSandboxHook", HookStage::PreRunPodSandbox, request)
            .await
    }

    async fn post_stop_pod_sandbox_hook(
        &self,
        request: Request<wire::PodSandboxHookRequest>,
    ) -> Result<Response<wire::PodSandboxHookResponse>, Status> {
        self.pod_call(
            "PostStopPodSandboxHook",
            HookStage::PostStopPodSandbox,
            request,
        )
        .await
    }

    async fn pre_create_container_hook(
        &self,
        request: Request<wire::ContainerResourceHookRequest>,
    ) -> Result<Response<wire::ContainerResourceHookResponse>, Status> {
        self.container_call(
            "PreCreateContainerHook",
            HookStage::PreCreateContainer,
            request,
        )
        .await
    }

    async fn pre_start_container_hook(
        &self,
        request: Request<wire::ContainerResourceHookRequest>,
    ) -> Result<Response<wire::ContainerResourceHookResponse>, Status> {
        self.container_call(
            "PreStartContainerHook",
            HookStage::PreStartContainer,
            request,
        )
        .await
    }

    async fn post_start_container_hook(
        &self,
        request: Request<wire::ContainerResourceHookRequest>,
    ) -> Result<Response<wire::ContainerResourceHookResponse>, Status> {
        self.container_call(
            "PostStartContainerHook",
            HookStage::PostStartContainer,
            request,
        )
        .await
    }

    async fn post_stop_container_hook(
        &self,
        request: Request<wire::ContainerResourceHookRequest>,
    ) -> Result<Response<wire::ContainerResourceHookResponse>, Status> {
        self.container_call(
            "PostStopContainerHook",
            HookStage::PostStopContainer,
            request,
        )
        .await
    }

    async fn pre_update_container_resources_hook(
        &self,
        request: Request<wire::ContainerResourceHookRequest>,
    ) -> Result<Response<wire::ContainerResourceHookResponse>, Status> {
        self.container_call(
            "PreUpdateContainerResourcesHook",
            HookStage::PreUpdateContainerResources,
            request,
        )
        .await
    }
}

/// Binds the socket: creates the parent directory and removes a stale
/// socket left by a previous run (as upstream does).
pub fn bind(path: &Path) -> Result<UnixListener, ServerError> {
    let socket_error = |source| ServerError::Socket {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(socket_error)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!(path = %path.display(), "removed a stale runtime hooks socket"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(socket_error(error)),
    }
    UnixListener::bind(path).map_err(socket_error)
}

/// Serves `service` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    service: HookService,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let next = listener.accept().await.map(|(stream, _)| stream);
        Some((next, listener))
    });
    tonic::transport::Server::builder()
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// The registration file's JSON (upstream `RuntimeHookConfig`: keys
/// `remote-endpoint`, `failure-policy`, `runtime-hooks`, tab-indented).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegistrationFile {
    #[serde(
        rename = "remote-endpoint",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub remote_endpoint: String,
    #[serde(
        rename = "failure-policy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub failure_policy: Option<FailurePolicy>,
    #[serde(
        rename = "runtime-hooks",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub runtime_hooks: Vec<String>,
}

impl RegistrationFile {
    pub fn new(remote_endpoint: &str, policy: FailurePolicy, stages: &[HookStage]) -> Self {
        Self {
            remote_endpoint: remote_endpoint.to_string(),
            failure_policy: Some(policy),
            runtime_hooks: stages.iter().map(|s| s.as_str().to_string()).collect(),
        }
    }

    pub fn to_json(&self) -> String {
        use serde::Serialize;
        let mut out = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
        let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
        // Serialising plain strings into a Vec cannot fail.
        if self.serialize(&mut serializer).is_err() {
            return String::new();
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// Writes `<dir>/koordlet.json` (atomically: temp file + rename).
    pub fn write(&self, dir: &Path) -> Result<PathBuf, ServerError> {
        let path = dir.join(REGISTRATION_FILE);
        let error = |source| ServerError::Registration {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(error)?;
        let temp = dir.join(format!(".{REGISTRATION_FILE}.tmp"));
        std::fs::write(&temp, self.to_json()).map_err(error)?;
        std::fs::rename(&temp, &path).map_err(error)?;
        Ok(path)
    }
}

/// Where and how the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub socket: PathBuf,
    pub registration_dir: PathBuf,
    pub host_endpoint: String,
    /// What the proxy does when koordlet fails (written to the file).
    pub proxy_failure_policy: FailurePolicy,
}

/// Binds, writes the registration file, and serves in the background. The
/// readiness check `runtime-hooks-server` passes once the socket is bound,
/// with the socket and advertised stages as detail.
pub fn start(
    config: &ServerConfig,
    service: HookService,
    readiness: StatusCheck,
    shutdown: koord_common::Shutdown,
) -> Result<tokio::task::JoinHandle<()>, ServerError> {
    let listener = bind(&config.socket)?;
    let stages = service.dispatcher.stages();
    let registration =
        RegistrationFile::new(&config.host_endpoint, config.proxy_failure_policy, &stages);
    let path = registration.write(&config.registration_dir)?;
    tracing::info!(
        socket = %config.socket.display(),
        registration = %path.display(),
        stages = ?registration.runtime_hooks,
        "runtime hooks server listening"
    );
    readiness.set_passing();
    let socket = config.socket.clone();
    Ok(tokio::spawn(async move {
        let stop = shutdown.clone();
        let result = serve(listener, service, async move {
            stop.wait().await;
        })
        .await;
        if let Err(error) = result {
            readiness.set_failing(format!("runtime hooks server stopped: {error}"));
            tracing::error!(socket = %socket.display(), %error, "runtime hooks server stopped");
        }
        let _ = std::fs::remove_file(&socket);
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_json_matches_upstream_shape() {
        let file = RegistrationFile::new(
            DEFAULT_HOST_ENDPOINT,
            FailurePolicy::Ignore,
            &[HookStage::PreRunPodSandbox, HookStage::PreCreateContainer],
        );
        let json = file.to_json();
        assert_eq!(
            json,
            "{\n\t\"remote-endpoint\": \"/var/run/koordlet/koordlet.sock\",\n\t\"failure-policy\": \"Ignore\",\n\t\"runtime-hooks\": [\n\t\t\"PreRunPodSandbox\",\n\t\t\"PreCreateContainer\"\n\t]\n}"
        );
        let back: RegistrationFile = serde_json::from_str(&json).unwrap();
        assert_eq!(back, file);
    }
}

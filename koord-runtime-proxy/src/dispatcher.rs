//! Calls the hook server registered for a stage, with a timeout, and
//! reports the outcome together with that server's failure policy.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apis::runtime::v1alpha1 as hook;
use apis::runtime::v1alpha1::runtime_hook_service_client::RuntimeHookServiceClient;
use koord_common::sync::MutexExt;
use tonic::transport::Channel;

use crate::config::{FailurePolicy, HookType, Registry};
use crate::endpoint::unix_channel;
use crate::metrics::ProxyMetrics;

/// Upstream's hook-call timeout.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("hook server {endpoint} failed at {stage}: {status}")]
    Status {
        endpoint: String,
        stage: &'static str,
        status: Box<tonic::Status>,
    },
    #[error("hook server {endpoint} did not answer {stage} within {timeout:?}")]
    Timeout {
        endpoint: String,
        stage: &'static str,
        timeout: Duration,
    },
}

/// The result of a dispatch: `None` when no server is registered for the stage.
pub type Dispatched<T> = Option<(Result<T, HookError>, FailurePolicy)>;

#[derive(Clone)]
pub struct Dispatcher {
    registry: Registry,
    clients: Arc<Mutex<HashMap<String, RuntimeHookServiceClient<Channel>>>>,
    timeout: Duration,
    metrics: ProxyMetrics,
    /// Largest message sent to or taken from a hook server.
    max_message_size: usize,
}

impl Dispatcher {
    pub fn new(registry: Registry, timeout: Duration, metrics: ProxyMetrics) -> Self {
        Self {
            registry,
            clients: Arc::default(),
            timeout,
            metrics,
            max_message_size: crate::args::DEFAULT_MAX_MESSAGE_SIZE,
        }
    }

    /// Sets the largest message sent to or taken from a hook server
    /// (`--hook-max-message-size`; the kubelet's 16 MiB by default).
    pub fn with_max_message_size(mut self, limit: usize) -> Self {
        self.max_message_size = limit;
        self
    }

    /// Whether a server is registered for `stage` now.
    pub fn serves(&self, stage: HookType) -> bool {
        self.registry.server_for(stage).is_some()
    }

    /// The client of `endpoint`, made once. Clients of endpoints no longer
    /// registered are dropped when a new one is made, so rewriting the
    /// registrations cannot grow the cache.
    fn client(&self, endpoint: &str) -> RuntimeHookServiceClient<Channel> {
        let mut clients = self.clients.lock_or_recover();
        if let Some(client) = clients.get(endpoint) {
            return client.clone();
        }
        clients.retain(|known, _| self.registry.registers(known));
        let path = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
        let client = RuntimeHookServiceClient::new(unix_channel(path))
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size);
        clients.insert(endpoint.to_string(), client.clone());
        client
    }

    /// How many hook-server clients are cached.
    pub fn cached_clients(&self) -> usize {
        self.clients.lock_or_recover().len()
    }

    async fn call<Req, Resp, F, Fut>(
        &self,
        stage: HookType,
        request: Req,
        call: F,
    ) -> Dispatched<Resp>
    where
        F: FnOnce(RuntimeHookServiceClient<Channel>, Req) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let server = self.registry.server_for(stage)?;
        let client = self.client(&server.remote_endpoint);
        let started = Instant::now();
        let outcome = match tokio::time::timeout(self.timeout, call(client, request)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(HookError::Status {
                endpoint: server.remote_endpoint.clone(),
                stage: stage.name(),
                status: Box::new(status),
            }),
            Err(_) => Err(HookError::Timeout {
                endpoint: server.remote_endpoint.clone(),
                stage: stage.name(),
                timeout: self.timeout,
            }),
        };
        let result = if outcome.is_ok() { "ok" } else { "error" };
        self.metrics
            .hook_call(stage.name(), result, started.elapsed());
        if let Err(error) = &outcome {
            tracing::warn!(%error, policy = ?server.failure_policy, "hook call failed");
        }
        Some((outcome, server.failure_policy))
    }

    pub async fn pod_hook(
        &self,
        stage: HookType,
        request: hook::PodSandboxHookRequest,
    ) -> Dispatched<hook::PodSandboxHookResponse> {
        self.call(stage, request, move |mut client, request| async move {
            match stage {
                HookType::PostStopPodSandbox => client.post_stop_pod_sandbox_hook(request).await,
                _ => client.pre_run_pod_sandbox_hook(request).await,
            }
        })
        .await
    }

    pub async fn container_hook(
        &self,
        stage: HookType,
        request: hook::ContainerResourceHookRequest,
    ) -> Dispatched<hook::ContainerResourceHookResponse> {
        self.call(stage, request, move |mut client, request| async move {
            match stage {
                HookType::PreStartContainer => client.pre_start_container_hook(request).await,
                HookType::PostStartContainer => client.post_start_container_hook(request).await,
                HookType::PostStopContainer => client.post_stop_container_hook(request).await,
                HookType::PreUpdateContainerResources => {
                    client.pre_update_container_resources_hook(request).await
                }
                _ => client.pre_create_container_hook(request).await,
            }
        })
        .await
    }
}

//! Node e2e support for koord-runtime-proxy: the proxy binary as a process
//! in front of a harness containerd, koordlet as its RuntimeHookService
//! server (NRI off), and pod/container helpers over CRI.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use koord_common::sync::MutexExt;
use koord_common::testing::{TestProcess, http_get_blocking};

use crate::cri::{self, RuntimeClient, v1};
use crate::node_runtime::{Koordlet, container_log_lines, workspace_binary};

pub const WAIT: Duration = Duration::from_secs(60);

/// Builds the proxy binary (a no-op when up to date) and returns its path.
pub fn proxy_binary() -> Result<PathBuf, String> {
    static BUILT: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    workspace_binary(&BUILT, "koord-runtime-proxy", "koord-runtime-proxy")
}

/// koord-runtime-proxy running as a process.
pub struct Proxy {
    pub process: TestProcess,
    pub addr: SocketAddr,
    pub socket: PathBuf,
}

impl Proxy {
    /// Starts the proxy in front of `backend`, reading registrations from `hook_dir`.
    pub fn start(root: &Path, backend: &Path, hook_dir: &Path) -> Result<Self, String> {
        let socket = root.join("proxy/runtimeproxy.sock");
        let mut command = Command::new(proxy_binary()?);
        command
            .arg("--metrics-addr=127.0.0.1:0")
            .arg(format!(
                "--koord-runtimeproxy-endpoint={}",
                socket.display()
            ))
            .arg(format!(
                "--remote-runtime-service-endpoint={}",
                backend.display()
            ))
            .arg(format!("--hook-server-config-dir={}", hook_dir.display()))
            .arg("--hook-call-timeout=3s")
            .env("RUST_LOG", "info");
        let process =
            TestProcess::spawn(command).map_err(|err| format!("cannot start the proxy: {err}"))?;
        let addr = process
            .wait_for_serving_addr("health and metrics", WAIT)
            .ok_or_else(|| format!("proxy did not serve: {}", process.output()))?;
        let proxy = Self {
            process,
            addr,
            socket,
        };
        let deadline = Instant::now() + WAIT;
        while !proxy.socket.exists() || proxy.readyz().0 != 200 {
            if Instant::now() > deadline {
                return Err(format!(
                    "proxy not ready: {:?}\n{}",
                    proxy.readyz(),
                    proxy.process.output()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(proxy)
    }

    pub fn readyz(&self) -> (u16, String) {
        http_get_blocking(self.addr, "/readyz?verbose", Duration::from_secs(10))
            .map(|r| (r.status, r.body))
            .unwrap_or((0, String::new()))
    }

    pub fn metrics(&self) -> String {
        http_get_blocking(self.addr, "/metrics", Duration::from_secs(10))
            .map(|r| r.body)
            .unwrap_or_default()
    }

    /// Sum of a labelled counter's samples whose label text contains `filter`.
    pub fn counter(&self, name: &str, filter: &str) -> f64 {
        self.metrics()
            .lines()
            .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(filter))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub async fn client(&self) -> RuntimeClient {
        cri::connect(&self.socket)
            .await
            .unwrap_or_else(|err| panic!("proxy socket unusable: {err}"))
    }

    pub fn stop(mut self) -> String {
        let _ = self.process.signal("TERM");
        let _ = self.process.wait_exit(Duration::from_secs(20));
        self.process.output()
    }
}

/// koordlet serving only the RuntimeHookService (NRI off), registering in `hook_dir`.
pub fn start_hook_server(
    root: &Path,
    pods_file: &Path,
    hook_dir: &Path,
    failure_policy: &str,
) -> Result<Koordlet, String> {
    start_hook_server_with(root, pods_file, hook_dir, failure_policy, &[])
}

/// [`start_hook_server`] with more koordlet flags.
pub fn start_hook_server_with(
    root: &Path,
    pods_file: &Path,
    hook_dir: &Path,
    failure_policy: &str,
    extra: &[&str],
) -> Result<Koordlet, String> {
    let socket = root.join("koordlet/koordlet.sock");
    let registration = hook_dir.join("koordlet.json");
    let _ = std::fs::remove_file(&registration);
    let flags = [
        "--enable-nri-runtime-hook=false".to_string(),
        format!("--runtime-hooks-addr={}", socket.display()),
        format!("--runtime-hooks-host-endpoint={}", socket.display()),
        format!("--runtime-hooks-config-path={}", hook_dir.display()),
        format!("--runtime-hooks-failure-policy={failure_policy}"),
    ];
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let koordlet = Koordlet::start(&root.join("no-nri.sock"), pods_file, &args)?;
    let deadline = Instant::now() + WAIT;
    while !(registration.exists() && socket.exists()) {
        if Instant::now() > deadline {
            return Err(format!(
                "koordlet wrote no registration: {}",
                koordlet.process.output()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(koordlet)
}

/// A pod created over CRI.
pub struct Pod {
    pub id: String,
    pub config: v1::PodSandboxConfig,
    pub cgroup_parent: String,
    pub log_dir: PathBuf,
}

fn uid() -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{:x}{:x}{n}", std::process::id(), nanos & 0xffff_ffff)
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The sandbox config of a pod under `kubepods/<tier>`.
pub fn pod_config(
    root: &Path,
    kubepods: &str,
    name: &str,
    tier: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> (v1::PodSandboxConfig, String, PathBuf) {
    let uid = uid();
    let tier_dir = if tier.is_empty() {
        String::new()
    } else {
        format!("/{tier}")
    };
    let cgroup_parent = format!("{kubepods}{tier_dir}/pod{uid}");
    let log_dir = root.join("logs").join(&uid);
    let config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid,
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: log_dir.display().to_string(),
        labels: map(labels),
        annotations: map(annotations),
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    (config, cgroup_parent, log_dir)
}

pub async fn run_pod(
    client: &mut RuntimeClient,
    (config, cgroup_parent, log_dir): (v1::PodSandboxConfig, String, PathBuf),
) -> Result<Pod, tonic::Status> {
    // The kubelet creates the pod cgroup before RunPodSandbox; the pre-hook
    // writes pod-level values into it.
    for controller in ["cpu", "memory"] {
        let dir = format!("/sys/fs/cgroup/{controller}{cgroup_parent}");
        std::fs::create_dir_all(&dir)
            .map_err(|err| tonic::Status::internal(format!("cannot create {dir}: {err}")))?;
    }
    let id = client
        .run_pod_sandbox(v1::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    Ok(Pod {
        id,
        config,
        cgroup_parent,
        log_dir,
    })
}

/// The container's first command prints these before anything else runs in it.
pub const FIRST_INSTRUCTION: &str = "cat /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/cpu/cpu.cfs_quota_us \
     /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpuset/cpuset.cpus; exec sleep 3600";

pub fn container_config(image: &str, name: &str, shares: i64, quota: i64) -> v1::ContainerConfig {
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(v1::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: vec!["sh".into(), "-c".into(), FIRST_INSTRUCTION.into()],
        log_path: format!("{name}.log"),
        linux: Some(v1::LinuxContainerConfig {
            resources: Some(v1::LinuxContainerResources {
                cpu_shares: shares,
                cpu_period: 100_000,
                cpu_quota: quota,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub async fn create_container(
    client: &mut RuntimeClient,
    pod: &Pod,
    config: v1::ContainerConfig,
) -> Result<String, tonic::Status> {
    Ok(client
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        })
        .await?
        .into_inner()
        .container_id)
}

pub async fn start_container(client: &mut RuntimeClient, id: &str) -> Result<(), tonic::Status> {
    client
        .start_container(v1::StartContainerRequest {
            container_id: id.into(),
        })
        .await
        .map(|_| ())
}

/// The lines the container printed first (waits for all four).
pub fn first_lines(pod: &Pod, name: &str) -> Vec<String> {
    let path = pod.log_dir.join(format!("{name}.log"));
    let deadline = Instant::now() + WAIT;
    loop {
        let lines = container_log_lines(&path);
        if lines.len() >= 4 || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Encodes a prost message, returns the answer's raw bytes.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec<M>(std::marker::PhantomData<M>);

struct RawEncoder<M>(std::marker::PhantomData<M>);
struct RawDecoder;

impl<M: prost::Message + Send + 'static> tonic::codec::Codec for RawCodec<M> {
    type Encode = M;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder<M>;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder(std::marker::PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

impl<M: prost::Message> tonic::codec::Encoder for RawEncoder<M> {
    type Item = M;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: M,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        item.encode(dst)
            .map_err(|err| tonic::Status::internal(err.to_string()))
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use prost::bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// One unary call to any gRPC `path` on a unix socket; the answer's bytes.
pub async fn raw_unary<M: prost::Message + Clone + Send + Sync + 'static>(
    socket: &Path,
    path: &'static str,
    message: &M,
) -> Result<Vec<u8>, tonic::Status> {
    let socket_path = socket.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://cri.local")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket_path = socket_path.clone();
            async move {
                tokio::net::UnixStream::connect(socket_path)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .map_err(|err| tonic::Status::unavailable(err.to_string()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|err| tonic::Status::unavailable(err.to_string()))?;
    grpc.unary(
        tonic::Request::new(message.clone()),
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        RawCodec::<M>(std::marker::PhantomData),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// A cgroup root for koordlet in which `<controller>/kubepods` and
/// `<controller>/<kubepods>` are the private `kubepods` subtree of this
/// containerd (root files linked).
pub fn cgroup_root_with_private_kubepods(root: &Path, kubepods: &str) -> std::io::Result<PathBuf> {
    let farm = root.join("cgroup-root");
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")? {
        let hierarchy = hierarchy?;
        let real = hierarchy.path();
        let ours = farm.join(hierarchy.file_name());
        if hierarchy.file_type()?.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&real)?, &ours)?;
            continue;
        }
        std::fs::create_dir_all(&ours)?;
        for entry in std::fs::read_dir(&real)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::os::unix::fs::symlink(entry.path(), ours.join(entry.file_name()))?;
            }
        }
        let private = format!("{}{kubepods}", real.display());
        std::os::unix::fs::symlink(&private, ours.join("kubepods"))?;
        std::os::unix::fs::symlink(&private, ours.join(kubepods.trim_start_matches('/')))?;
    }
    Ok(farm)
}

/// The pods file the kubelet would serve for a BE pod with one container
/// `main` (batch resources from `requests`/`limits`).
pub fn be_pods_file(
    pod: &Pod,
    container_id: &str,
    spec_annotation: &str,
    batch_cpu: (&str, &str),
    batch_memory: &str,
) -> String {
    let meta = pod.config.metadata.clone().unwrap_or_default();
    serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "items": [{
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
                "labels": {"koordinator.sh/qosClass": "BE"},
                "annotations": {"node.koordinator.sh/extended-resource-spec": spec_annotation},
            },
            "spec": {"containers": [{
                "name": "main",
                "image": "busybox",
                "resources": {
                    "requests": {"kubernetes.io/batch-cpu": batch_cpu.0, "kubernetes.io/batch-memory": batch_memory},
                    "limits": {"kubernetes.io/batch-cpu": batch_cpu.1, "kubernetes.io/batch-memory": batch_memory},
                },
            }]},
            "status": {
                "phase": "Running",
                "qosClass": "BestEffort",
                "containerStatuses": [{
                    "name": "main",
                    "containerID": format!("containerd://{container_id}"),
                    "image": "busybox",
                    "imageID": "",
                    "ready": true,
                    "restartCount": 0,
                    "state": {"running": {}},
                }],
            },
        }],
    })
    .to_string()
}

/// Hook calls seen by a [`HookRecorder`]: stage name and request.
pub type RecordedHooks = std::sync::Arc<
    Mutex<
        Vec<(
            String,
            apis::runtime::v1alpha1::ContainerResourceHookRequest,
        )>,
    >,
>;

/// A RuntimeHookService that records container hook requests and answers
/// with no changes.
#[derive(Clone, Default)]
pub struct HookRecorder {
    pub calls: RecordedHooks,
}

type HookReply<T> = Result<tonic::Response<T>, tonic::Status>;

impl HookRecorder {
    fn record(
        &self,
        stage: &str,
        request: tonic::Request<apis::runtime::v1alpha1::ContainerResourceHookRequest>,
    ) -> HookReply<apis::runtime::v1alpha1::ContainerResourceHookResponse> {
        self.calls
            .lock_or_recover()
            .push((stage.to_string(), request.into_inner()));
        Ok(tonic::Response::new(Default::default()))
    }

    /// Serves on `socket` in the current tokio runtime.
    pub fn serve(&self, socket: &Path) -> std::io::Result<()> {
        use apis::runtime::v1alpha1::runtime_hook_service_server::RuntimeHookServiceServer;
        let listener = tokio::net::UnixListener::bind(socket)?;
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let next = listener.accept().await.map(|(stream, _)| stream);
            Some((next, listener))
        });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RuntimeHookServiceServer::new(self.clone()))
                .serve_with_incoming(incoming),
        );
        Ok(())
    }

    pub fn calls(
        &self,
    ) -> Vec<(
        String,
        apis::runtime::v1alpha1::ContainerResourceHookRequest,
    )> {
        self.calls.lock_or_recover().clone()
    }
}

#[tonic::async_trait]
impl apis::runtime::v1alpha1::runtime_hook_service_server::RuntimeHookService for HookRecorder {
    async fn pre_run_pod_sandbox_hook(
        &self,
        _: tonic::Request<apis::runtime::v1alpha1::PodSandboxHookRequest>,
    ) -> HookReply<apis::runtime::v1alpha1::PodSandboxHookResponse> {
        Ok(tonic::Response::new(Default::default()))
    }
    async fn post_stop_pod_sandbox_hook(
        &self,
        _: tonic::Request<apis::runtime::v1alpha1::PodSandboxHookRequest>,
    ) -> HookReply<apis::runtime::v1alpha1::PodSandboxHookResponse> {
        Ok(tonic::Response::new(Default::default()))
    }
    async fn pre_create_container_hook(
        &self,
        request: tonic::Request<apis::runtime::v1alpha1::ContainerResourceHookRequest>,
    ) -> HookReply<apis::runtime::v1alpha1::ContainerResourceHookResponse> {
        self.record("PreCreateContainer", request)
    }
    async fn pre_start_container_hook(
        &self,
        request: tonic::Request<apis::runtime::v1alpha1::ContainerResourceHookRequest>,
    ) -> HookReply<apis::runtime::v1alpha1::ContainerResourceHookResponse> {
        self.record("PreStartContainer", request)
    }
    async fn post_start_container_hook(
        &self,
        request: tonic::Request<apis::runtime::v1alpha1::ContainerResourceHookRequest>,
    ) -> HookReply<apis::runtime::v1alpha1::ContainerResourceHookResponse> {
        self.record("PostStartContainer", request)
    }
    async fn post_stop_container_hook(
        &self,
        request: tonic::Request<apis::runtime::v1alpha1::ContainerResourceHookRequest>,
    ) -> HookReply<apis::runtime::v1alpha1::ContainerResourceHookResponse> {
        self.record("PostStopContainer", request)
    }
    async fn pre_update_container_resources_hook(
        &self,
        request: tonic::Request<apis::runtime::v1alpha1::ContainerResourceHookRequest>,
    ) -> HookReply<apis::runtime::v1alpha1::ContainerResourceHookResponse> {
        self.record("PreUpdateContainerResources", request)
    }
}

//! RuntimeHookService over a real unix socket: a tonic client calls
//! PreRunPodSandboxHook / PreCreateContainerHook /
//! PreUpdateContainerResourcesHook for a BE batch pod and an LSR pod with a
//! resource-status cpuset; pod-level values land in a generated cgroup
//! tree; the registration file and the failure policy are checked too.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use apis::runtime::v1alpha1 as wire;
use apis::runtime::v1alpha1::runtime_hook_service_client::RuntimeHookServiceClient;
use hyper_util::rt::TokioIo;
use koord_common::HealthRegistry;
use koordlet::capabilities::NodeCapabilities;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::runtimehooks::apply::SideEffectApplier;
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::{HookOptions, all_hooks};
use koordlet::runtimehooks::metrics::HookMetrics;
use koordlet::runtimehooks::protocol::{FailurePolicy, FailurePolicyConfig, HookStage};
use koordlet::runtimehooks::server::{self, HookService, RegistrationFile, ServerConfig};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};
use tonic::transport::{Channel, Endpoint, Uri};

const BE_UID: &str = "be-pod-uid";
const LSR_UID: &str = "lsr-pod-uid";
const MI: i64 = 1024 * 1024;

fn temp_dir(label: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("koordlet-rh-server-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Capabilities of a node with the v1 cpu, cpuset and memory controllers
/// and nothing else (no group identity, core scheduling or resctrl).
fn caps(base: &Path) -> NodeCapabilities {
    let mut caps = koordlet::capabilities::detect(&SystemArgs::under(&base.join("empty")));
    caps.cgroup.controllers = ["cpu", "cpuacct", "cpuset", "memory"]
        .map(String::from)
        .to_vec();
    caps
}

/// A v1 tree with the BE pod's cgroup files at kubelet defaults.
fn generated_tree(base: &Path) -> CgroupLayout {
    let root = base.join("cgroup");
    let pod = format!("kubepods/besteffort/pod{BE_UID}");
    for (controller, file, value) in [
        ("cpu", "cpu.shares", "2"),
        ("cpu", "cpu.cfs_quota_us", "-1"),
        ("cpu", "cpu.cfs_period_us", "100000"),
        ("memory", "memory.limit_in_bytes", "9223372036854771712"),
    ] {
        let dir = root.join(controller).join(&pod);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), value).unwrap();
    }
    CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root)
}

struct Harness {
    base: PathBuf,
    layout: CgroupLayout,
    client: RuntimeHookServiceClient<Channel>,
    metrics: HookMetrics,
    shutdown: koord_common::Shutdown,
    socket: PathBuf,
    health: HealthRegistry,
}

async fn connect(socket: PathBuf) -> RuntimeHookServiceClient<Channel> {
    // The URI is ignored; every connection dials the socket.
    let channel = Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                tokio::net::UnixStream::connect(socket)
                    .await
                    .map(TokioIo::new)
            }
        }))
        .await
        .unwrap();
    RuntimeHookServiceClient::new(channel)
}

async fn start(label: &str, policy: FailurePolicyConfig) -> Harness {
    let base = temp_dir(label);
    let layout = generated_tree(&base);
    let metrics = HookMetrics::new("test-node");
    let dispatcher = HookDispatcher::new(
        all_hooks(&HookOptions::default()),
        &caps(&base),
        layout.clone(),
        policy,
    )
    .with_metrics(metrics.clone());
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let applier = SideEffectApplier::new(executor, base.join("proc"), base.join("resctrl"));
    let service = HookService::new(Arc::new(dispatcher), applier);
    let socket = base.join("run/koordlet.sock");
    let config = ServerConfig {
        socket: socket.clone(),
        registration_dir: base.join("hookserver.d"),
        host_endpoint: "/var/run/koordlet/koordlet.sock".into(),
        proxy_failure_policy: FailurePolicy::Ignore,
    };
    let health = HealthRegistry::new();
    let readiness = health.readiness_status("runtime-hooks-server", Err("starting".into()));
    let shutdown = koord_common::Shutdown::new();
    server::start(&config, service, readiness, shutdown.clone()).unwrap();
    let client = connect(socket.clone()).await;
    Harness {
        base,
        layout,
        client,
        metrics,
        shutdown,
        socket,
        health,
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown
            .trigger(koord_common::ShutdownReason::Requested("test done".into()));
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn labels(qos: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("koordinator.sh/qosClass".to_string(), qos.to_string())])
}

fn be_annotations() -> BTreeMap<String, String> {
    let spec = r#"{"containers":{
        "main":{"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"256Mi"},
                "limits":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"512Mi"}},
        "side":{"requests":{"kubernetes.io/batch-cpu":"250"},
                "limits":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"256Mi"}}}}"#;
    BTreeMap::from([(
        "node.koordinator.sh/extended-resource-spec".to_string(),
        spec.to_string(),
    )])
}

fn lsr_annotations(status: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(
        "scheduling.koordinator.sh/resource-status".to_string(),
        status.to_string(),
    )])
}

fn pod_meta(uid: &str) -> Option<wire::PodSandboxMetadata> {
    Some(wire::PodSandboxMetadata {
        name: format!("pod-{uid}"),
        uid: uid.to_string(),
        namespace: "default".into(),
        attempt: 0,
    })
}

fn container_request(
    uid: &str,
    qos: &str,
    annotations: BTreeMap<String, String>,
    cgroup_parent: &str,
) -> wire::ContainerResourceHookRequest {
    wire::ContainerResourceHookRequest {
        pod_meta: pod_meta(uid),
        container_meta: Some(wire::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
            id: String::new(),
        }),
        container_annotations: BTreeMap::from([("from".to_string(), "runtime".to_string())]),
        container_resources: Some(wire::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 200_000,
            cpu_shares: 2,
            cpuset_cpus: String::new(),
            ..Default::default()
        }),
        pod_resources: None,
        pod_annotations: annotations,
        pod_labels: labels(qos),
        pod_cgroup_parent: cgroup_parent.into(),
        container_envs: BTreeMap::from([("KEEP".to_string(), "1".to_string())]),
    }
}

fn read(layout: &CgroupLayout, controller: &str, file: &str) -> String {
    let path = layout
        .root
        .join(controller)
        .join(format!("kubepods/besteffort/pod{BE_UID}"))
        .join(file);
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn be_batch_pod_gets_batch_cgroup_values_at_sandbox_and_container_creation() {
    let mut h = start("be", FailurePolicyConfig::default()).await;

    // The registration file the proxy reads, in upstream's shape.
    let registration: RegistrationFile = serde_json::from_str(
        &std::fs::read_to_string(h.base.join("hookserver.d/koordlet.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        registration.remote_endpoint,
        "/var/run/koordlet/koordlet.sock"
    );
    assert_eq!(registration.failure_policy, Some(FailurePolicy::Ignore));
    for stage in [
        "PreRunPodSandbox",
        "PreCreateContainer",
        "PreUpdateContainerResources",
    ] {
        assert!(
            registration.runtime_hooks.iter().any(|s| s == stage),
            "{registration:?}"
        );
    }
    // GroupIdentity is unsupported here; CoreSched/Resctrl/OOMScoreAdj are off.
    assert!(
        !registration
            .runtime_hooks
            .iter()
            .any(|s| s == "PostStartContainer")
    );
    let report = h.health.evaluate(koord_common::Probe::Readiness).await;
    assert!(report.is_healthy(), "{}", report.render(true));
    assert!(h.socket.exists());

    let sandbox = wire::PodSandboxHookRequest {
        pod_meta: pod_meta(BE_UID),
        runtime_handler: String::new(),
        labels: labels("BE"),
        annotations: be_annotations(),
        cgroup_parent: format!("/kubepods/besteffort/pod{BE_UID}"),
        overhead: None,
        resources: None,
    };
    let response = h
        .client
        .pre_run_pod_sandbox_hook(sandbox.clone())
        .await
        .unwrap()
        .into_inner();
    let resources = response.resources.unwrap();
    // 500m + 250m requested; 1000m + 500m limit; 512Mi + 256Mi memory.
    assert_eq!(resources.cpu_shares, 750 * 1024 / 1000);
    assert_eq!(resources.cpu_quota, 150_000);
    assert_eq!(resources.memory_limit_in_bytes, 768 * MI);
    assert_eq!(response.cgroup_parent, sandbox.cgroup_parent);
    assert_eq!(response.annotations, sandbox.annotations);
    // Written to the pod cgroup the kubelet created.
    assert_eq!(read(&h.layout, "cpu", "cpu.shares"), "768");
    assert_eq!(read(&h.layout, "cpu", "cpu.cfs_quota_us"), "150000");
    assert_eq!(
        read(&h.layout, "memory", "memory.limit_in_bytes"),
        (768 * MI).to_string()
    );

    let request = container_request(
        BE_UID,
        "BE",
        be_annotations(),
        &format!("/kubepods/besteffort/pod{BE_UID}"),
    );
    let response = h
        .client
        .pre_create_container_hook(request.clone())
        .await
        .unwrap()
        .into_inner();
    let resources = response.container_resources.unwrap();
    assert_eq!(resources.cpu_shares, 512);
    assert_eq!(resources.cpu_quota, 100_000);
    assert_eq!(resources.cpu_period, 100_000);
    assert_eq!(resources.memory_limit_in_bytes, 512 * MI);
    // BE cpusets are left to cpusuppress.
    assert_eq!(resources.cpuset_cpus, "");
    assert_eq!(
        response.container_envs.get("KEEP").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        response
            .container_annotations
            .get("from")
            .map(String::as_str),
        Some("runtime")
    );

    let update = h
        .client
        .pre_update_container_resources_hook(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(update.container_resources.unwrap().cpu_shares, 512);
    assert!(
        h.metrics
            .calls("BatchResource", HookStage::PreCreateContainer, true)
            >= 1
    );
    assert!(
        h.metrics.calls(
            "BatchResource",
            HookStage::PreUpdateContainerResources,
            true
        ) >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lsr_pod_gets_its_resource_status_cpuset_and_no_quota() {
    let mut h = start("lsr", FailurePolicyConfig::default()).await;
    let parent = format!("/kubepods/pod{LSR_UID}");
    let request = container_request(
        LSR_UID,
        "LSR",
        lsr_annotations(r#"{"cpuset":"2-3"}"#),
        &parent,
    );
    for response in [
        h.client
            .pre_create_container_hook(request.clone())
            .await
            .unwrap()
            .into_inner(),
        h.client
            .pre_update_container_resources_hook(request.clone())
            .await
            .unwrap()
            .into_inner(),
    ] {
        let resources = response.container_resources.unwrap();
        assert_eq!(resources.cpuset_cpus, "2-3");
        assert_eq!(resources.cpu_quota, -1);
        // Not a batch pod: shares stay the runtime's.
        assert_eq!(resources.cpu_shares, 2);
    }
    let sandbox = wire::PodSandboxHookRequest {
        pod_meta: pod_meta(LSR_UID),
        labels: labels("LSR"),
        annotations: lsr_annotations(r#"{"cpuset":"2-3"}"#),
        cgroup_parent: parent,
        ..Default::default()
    };
    let response = h
        .client
        .pre_run_pod_sandbox_hook(sandbox)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.resources.unwrap().cpu_quota, -1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_annotation_follows_the_failure_policy() {
    let malformed = lsr_annotations("{\"cpuset\":");
    // Ignore (default): the call succeeds and the runtime's values stay.
    let mut open = start("ignore", FailurePolicyConfig::default()).await;
    // The pod's own cgroup (another pod's would be refused before any hook runs).
    let request = container_request(
        LSR_UID,
        "LSR",
        malformed.clone(),
        &format!("/kubepods/pod{LSR_UID}"),
    );
    let response = open
        .client
        .pre_create_container_hook(request.clone())
        .await
        .unwrap()
        .into_inner();
    let resources = response.container_resources.unwrap();
    assert_eq!(resources.cpuset_cpus, "");
    assert_eq!(resources.cpu_quota, 200_000);
    assert_eq!(
        open.metrics
            .calls("CPUSetAllocator", HookStage::PreCreateContainer, false),
        1
    );

    // Fail for this hook at this stage: the call is refused, naming the hook.
    let policy: FailurePolicyConfig =
        serde_json::from_str(r#"{"hookStages":{"CPUSetAllocator/PreCreateContainer":"Fail"}}"#)
            .unwrap();
    let mut closed = start("fail", policy).await;
    let status = closed
        .client
        .pre_create_container_hook(request.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert!(status.message().contains("CPUSetAllocator"), "{status:?}");
    // Other stages keep Ignore.
    closed
        .client
        .pre_update_container_resources_hook(request)
        .await
        .unwrap();
}

/// A BE sandbox request carrying `filler` bytes in one annotation.
fn sandbox_with_filler(filler: usize) -> wire::PodSandboxHookRequest {
    let mut annotations = be_annotations();
    annotations.insert("filler".into(), "x".repeat(filler));
    wire::PodSandboxHookRequest {
        pod_meta: pod_meta(BE_UID),
        runtime_handler: String::new(),
        labels: labels("BE"),
        annotations,
        cgroup_parent: format!("/kubepods/besteffort/pod{BE_UID}"),
        overhead: None,
        resources: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_up_to_the_kubelets_16_mib_pass_and_larger_ones_are_refused_naming_the_limit() {
    let h = start("size", FailurePolicyConfig::default()).await;
    const LIMIT: usize = 16 * 1024 * 1024;
    // A client that sends and receives more than the proxy would.
    let mut client = connect(h.socket.clone())
        .await
        .max_encoding_message_size(64 * 1024 * 1024)
        .max_decoding_message_size(64 * 1024 * 1024);

    // 5 MiB: over gRPC's 4 MiB default, within the CRI limit the proxy
    // forwards (a pod with large annotations).
    let response = client
        .pre_run_pod_sandbox_hook(sandbox_with_filler(5 * 1024 * 1024))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.annotations["filler"].len(), 5 * 1024 * 1024);

    // Over 16 MiB: refused by the server before any hook runs, naming the limit.
    let status = client
        .pre_run_pod_sandbox_hook(sandbox_with_filler(LIMIT + 1024))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status}");
    assert!(
        status.message().contains(&LIMIT.to_string()),
        "the status names the limit: {status}"
    );

    // The server keeps serving, on the same connection and on a new one.
    client
        .pre_run_pod_sandbox_hook(sandbox_with_filler(0))
        .await
        .unwrap();
    let mut fresh = connect(h.socket.clone()).await;
    fresh
        .pre_run_pod_sandbox_hook(sandbox_with_filler(0))
        .await
        .unwrap();
}

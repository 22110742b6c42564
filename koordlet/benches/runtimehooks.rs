//! RuntimeHookService round trip over a unix socket: a tonic client calls
//! koordlet's server (all default hooks enabled) the way the runtime proxy
//! does, one call at a time, and the latency of each call is recorded.
//! Prints p50/p99/p99.9/max for PreCreateContainerHook (BE batch container
//! and LSR cpuset container) and PreRunPodSandboxHook (BE pod; writes the
//! pod's cgroup files in a generated tree through the resource executor),
//! plus the in-process dispatcher cost for comparison. Target: p99 < 1 ms.
//!
//! Run: `cargo bench -p koordlet --bench runtimehooks` (optionally
//! `-- <calls per case>`, default 5000).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apis::runtime::v1alpha1 as wire;
use apis::runtime::v1alpha1::runtime_hook_service_client::RuntimeHookServiceClient;
use hyper_util::rt::TokioIo;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::runtimehooks::apply::SideEffectApplier;
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::{HookOptions, all_hooks};
use koordlet::runtimehooks::metrics::HookMetrics;
use koordlet::runtimehooks::protocol::{
    ContainerContext, FailurePolicyConfig, HookRequest, HookStage,
};
use koordlet::runtimehooks::server::{self, HookService};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};
use tonic::transport::{Channel, Endpoint, Uri};

const BE_UID: &str = "bench-be-uid";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let p99 = percentile(&samples, 0.99);
    println!(
        "{name:<46} n={:<6} p50={:>8.1}µs p99={:>8.1}µs p99.9={:>8.1}µs max={:>8.1}µs",
        samples.len(),
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        percentile(&samples, 0.999).as_secs_f64() * 1e6,
        samples.last().map(|d| d.as_secs_f64() * 1e6).unwrap_or(0.0),
    );
    p99
}

fn generated_tree(base: &Path) -> CgroupLayout {
    let root = base.join("cgroup");
    let pod = format!("kubepods/besteffort/pod{BE_UID}");
    for (controller, file, value) in [
        ("cpu", "cpu.shares", "2"),
        ("cpu", "cpu.cfs_quota_us", "-1"),
        ("memory", "memory.limit_in_bytes", "9223372036854771712"),
    ] {
        let dir = root.join(controller).join(&pod);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), value).unwrap();
    }
    CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root)
}

fn be_annotations() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "node.koordinator.sh/extended-resource-spec".to_string(),
        r#"{"containers":{"main":{"requests":{"kubernetes.io/batch-cpu":"500"},"limits":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"512Mi"}}}}"#.to_string(),
    )])
}

fn labels(qos: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("koordinator.sh/qosClass".to_string(), qos.to_string())])
}

fn container_request(
    uid: &str,
    qos: &str,
    annotations: BTreeMap<String, String>,
    parent: &str,
) -> wire::ContainerResourceHookRequest {
    wire::ContainerResourceHookRequest {
        pod_meta: Some(wire::PodSandboxMetadata {
            name: format!("pod-{uid}"),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        container_meta: Some(wire::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
            id: String::new(),
        }),
        container_resources: Some(wire::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 200_000,
            cpu_shares: 2,
            ..Default::default()
        }),
        pod_annotations: annotations,
        pod_labels: labels(qos),
        pod_cgroup_parent: parent.into(),
        ..Default::default()
    }
}

async fn connect(socket: PathBuf) -> RuntimeHookServiceClient<Channel> {
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

fn main() {
    let calls: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5000);
    let base = std::env::temp_dir().join(format!("koordlet-rh-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let layout = generated_tree(&base);
    let mut caps = koordlet::capabilities::detect(&SystemArgs::under(&base.join("empty")));
    caps.cgroup.controllers = ["cpu", "cpuacct", "cpuset", "memory"]
        .map(String::from)
        .to_vec();
    let dispatcher = Arc::new(
        HookDispatcher::new(
            all_hooks(&HookOptions::default()),
            &caps,
            layout.clone(),
            FailurePolicyConfig::default(),
        )
        .with_metrics(HookMetrics::new("bench")),
    );

    // In-process cost of the decisions alone.
    let lsr_request = container_request(
        "bench-lsr-uid",
        "LSR",
        BTreeMap::from([(
            "scheduling.koordinator.sh/resource-status".to_string(),
            r#"{"cpuset":"2-3"}"#.to_string(),
        )]),
        "/kubepods/podbench-lsr-uid",
    );
    let be_request = container_request(
        BE_UID,
        "BE",
        be_annotations(),
        &format!("/kubepods/besteffort/pod{BE_UID}"),
    );
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let context = HookRequest::Container(ContainerContext::from(&be_request));
        let adjustment = dispatcher
            .run(HookStage::PreCreateContainer, &context)
            .unwrap();
        std::hint::black_box(adjustment.to_container_response(&be_request));
        samples.push(started.elapsed());
    }
    println!("runtime hooks benchmark, {calls} sequential calls per case");
    report("dispatcher only (BE PreCreateContainer)", samples);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let socket = base.join("koordlet.sock");
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let applier = SideEffectApplier::new(executor, base.join("proc"), base.join("resctrl"));
    let service = HookService::new(Arc::clone(&dispatcher), applier);
    let mut p99s = Vec::new();
    runtime.block_on(async {
        let listener = server::bind(&socket).unwrap();
        let stop = koord_common::Shutdown::new();
        let waiter = stop.clone();
        tokio::spawn(server::serve(listener, service, async move {
            waiter.wait().await;
        }));
        let mut client = connect(socket.clone()).await;
        let sandbox = wire::PodSandboxHookRequest {
            pod_meta: be_request.pod_meta.clone(),
            labels: labels("BE"),
            annotations: be_annotations(),
            cgroup_parent: format!("/kubepods/besteffort/pod{BE_UID}"),
            ..Default::default()
        };
        for _ in 0..500 {
            client
                .pre_create_container_hook(be_request.clone())
                .await
                .unwrap();
        }
        for (name, request) in [
            ("gRPC PreCreateContainerHook (BE batch)", &be_request),
            ("gRPC PreCreateContainerHook (LSR cpuset)", &lsr_request),
        ] {
            let mut samples = Vec::with_capacity(calls);
            for _ in 0..calls {
                let started = Instant::now();
                let response = client
                    .pre_create_container_hook(request.clone())
                    .await
                    .unwrap();
                std::hint::black_box(response);
                samples.push(started.elapsed());
            }
            p99s.push((name, report(name, samples)));
        }
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let started = Instant::now();
            let response = client
                .pre_run_pod_sandbox_hook(sandbox.clone())
                .await
                .unwrap();
            std::hint::black_box(response);
            samples.push(started.elapsed());
        }
        let name = "gRPC PreRunPodSandboxHook (BE, cgroup files)";
        p99s.push((name, report(name, samples)));
        stop.trigger(koord_common::ShutdownReason::Requested("bench done".into()));
    });
    for (name, p99) in p99s {
        let verdict = if p99 < Duration::from_millis(1) {
            "meets"
        } else {
            "MISSES"
        };
        println!("{name}: p99 {verdict} the 1 ms target");
    }
    let _ = std::fs::remove_dir_all(&base);
}

#![allow(clippy::unwrap_used)]
//! Memory QoS (`cgreconcile`) on the real cgroup v1 memory hierarchy.
//!
//! A kubelet-style tree is built in a throwaway cgroup of the memory
//! hierarchy behind a symlinked cgroup root (the host's own `kubepods` is
//! never touched). The node's capabilities are detected from the host as
//! koordlet does at start. For every memory QoS file the test itself checks
//! whether the kernel offers it in the container cgroup; then one round with
//! every `memoryQOS` setting configured must: write exactly the offered files
//! with the expected values, fail nothing, create no file the kernel lacks,
//! and name each missing file with its NodeSLO setting in the capability
//! reason and in `GET /qos/explain?unsupported`. On this CI kernel (v1
//! without the Alibaba Cloud Linux patches) none of them exists, so the round
//! writes nothing and reports all twelve; `memory.limit_in_bytes`, which
//! memory QoS does not own, keeps its value. Needs root (prints `SKIP:`).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::{
    MemoryQOS, MemoryQOSCfg, NodeSLO, NodeSLOSpec, ResourceQOS, ResourceQOSStrategy,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_common::testing::TempDir;
use koordlet::capabilities::{MEMORY_QOS_FILES, detect};
use koordlet::metriccache::{MetricCache, MetricCacheConfig};
use koordlet::qosmanager::cgreconcile::{CgroupReconcile, resource_supported};
use koordlet::qosmanager::{QosManagerConfig, QosRunner, SnapshotSource, explain_router};
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs, StatesInformer};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{
    CgroupDriver, CgroupLayout, CgroupResource, CgroupVersion, Controller,
};
use support::cgroup::{ThrowawayCgroup, real_v1_layout_or_skip};

const GIB: i64 = 1 << 30;
const CONTAINER: &str = "kubepods/burstable/podls-real/c-ls";

fn ls_pod() -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some("web".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some("ls-real".into());
    pod.metadata.labels = Some(BTreeMap::from([(
        "koordinator.sh/qosClass".into(),
        "LS".into(),
    )]));
    let amount = |value: &str| BTreeMap::from([("memory".to_string(), Quantity(value.into()))]);
    pod.spec = Some(PodSpec {
        containers: vec![Container {
            name: "main".into(),
            resources: Some(ResourceRequirements {
                requests: Some(amount("1Gi")),
                limits: Some(amount("2Gi")),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    pod.status = Some(PodStatus {
        qos_class: Some("Burstable".into()),
        phase: Some("Running".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "main".into(),
            container_id: Some("containerd://c-ls".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    pod
}

/// Every memoryQOS setting, for the LS class.
fn node_slo() -> NodeSLO {
    let every = MemoryQOS {
        min_limit_percent: Some(100),
        low_limit_percent: Some(100),
        throttling_percent: Some(80),
        wmark_ratio: Some(95),
        wmark_scale_permill: Some(20),
        wmark_min_adj: Some(-25),
        priority_enable: Some(1),
        priority: Some(12),
        oom_kill_group: Some(1),
        page_cache_enable: Some(true),
        page_cache_limit_percent: None,
        page_cache_limit_size: Some(GIB / 2),
        page_cache_reclaim_sync: Some(false),
    };
    NodeSLO::new(
        "memory-real",
        NodeSLOSpec {
            resource_qos_strategy: Some(ResourceQOSStrategy {
                ls_class: Some(ResourceQOS {
                    memory_qos: Some(MemoryQOSCfg {
                        enable: Some(true),
                        memory_qos: every,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
}

/// What the container cgroup must hold after the round, for each file.
fn expected_container_value(file: &str) -> Option<String> {
    let high = (GIB + GIB * 80 / 100) / 4096 * 4096;
    Some(
        match file {
            "memory.min" | "memory.low" => GIB.to_string(),
            "memory.high" => high.to_string(),
            "memory.wmark_ratio" => "95".into(),
            "memory.wmark_scale_factor" => "20".into(),
            "memory.wmark_min_adj" => "-25".into(),
            "memory.priority" => "12".into(),
            "memory.use_priority_oom" | "memory.oom.group" => "1".into(),
            // Page cache limits are pod-level only.
            _ => return None,
        }
        .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_qos_writes_what_the_kernel_offers_and_names_the_rest() {
    let Some(host) = real_v1_layout_or_skip(&[Controller::Memory]) else {
        return;
    };
    let mut cgroup = ThrowawayCgroup::new(&host, "memory-qos", &[Controller::Memory]).unwrap();
    cgroup.create_child(CONTAINER).unwrap();
    let root = TempDir::new("memory-qos-root").unwrap();
    std::os::unix::fs::symlink(
        cgroup.path(cgroup.dir(), Controller::Memory),
        root.path().join("memory"),
    )
    .unwrap();
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root.path());
    let container_dir = cgroup.path(&cgroup.dir().join(CONTAINER), Controller::Memory);
    let limit_before =
        std::fs::read_to_string(container_dir.join("memory.limit_in_bytes")).unwrap();

    // The node as koordlet sees it at start.
    let caps = detect(&SystemArgs::default());
    let offered: BTreeMap<&str, bool> = MEMORY_QOS_FILES
        .iter()
        .map(|(file, _)| (*file, container_dir.join(file).is_file()))
        .collect();
    for resource in CgroupResource::ALL {
        if let Some(present) = offered.get(resource.name()) {
            assert_eq!(
                resource_supported(&caps, *resource),
                *present,
                "capability of {} disagrees with the kernel",
                resource.name()
            );
        }
    }
    let reason = caps.reasons.get("memoryQos").cloned().unwrap_or_default();
    for (file, setting) in MEMORY_QOS_FILES {
        if !offered[file] {
            assert!(
                reason.contains(&format!("{file} ({setting})")),
                "capability reason does not name {file}: {reason}"
            );
        }
    }

    let states = StatesInformer::new("memory-real", RequiredSyncs::PODS_ONLY);
    states.set_pods(PodsSnapshot {
        pods: vec![ls_pod()],
        origin: PodsOrigin::File,
        synced_at: SystemTime::now(),
    });
    states.set_node_slo(Some(node_slo()));
    let proc_root = TempDir::new("memory-qos-proc").unwrap();
    let source = SnapshotSource {
        states: states.clone(),
        cache: Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap()),
        capabilities: Arc::new(caps),
        layout: layout.clone(),
        collect_interval: Duration::from_secs(1),
        config: QosManagerConfig::default(),
        proc_root: proc_root.path().to_path_buf(),
        kubelet_root: None,
    };
    let mut runner = QosRunner::new(
        vec![Box::new(CgroupReconcile)],
        ResourceExecutor::new(layout.clone(), ExecutorConfig::default()),
    );
    let outcome = runner.run_one(0, &source.snapshot(SystemTime::now()));
    assert_eq!(outcome.errors, 0, "{:?}", outcome.notes);

    for (file, _) in MEMORY_QOS_FILES {
        let path = container_dir.join(file);
        if offered[file] {
            if let Some(expected) = expected_container_value(file) {
                assert_eq!(
                    std::fs::read_to_string(&path).unwrap().trim(),
                    expected,
                    "{file}"
                );
            }
        } else {
            assert!(
                !path.exists(),
                "{file} appeared although the kernel lacks it"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(container_dir.join("memory.limit_in_bytes")).unwrap(),
        limit_before,
        "memory QoS does not own memory.limit_in_bytes"
    );

    // The explain endpoint names every setting that was not written.
    let router = explain_router(runner.managed_files(), layout, Some(states));
    let response = tower::ServiceExt::oneshot(
        router,
        axum::http::Request::get("/qos/explain?unsupported")
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
    let listed_files: Vec<&str> = listed.iter().map(|u| u["file"].as_str().unwrap()).collect();
    for (file, setting) in MEMORY_QOS_FILES {
        let entry = listed.iter().find(|u| u["file"] == file);
        if offered[file] {
            assert!(
                entry.is_none(),
                "{file} is offered but listed: {listed_files:?}"
            );
        } else {
            let entry = entry.unwrap_or_else(|| panic!("{file} missing in {listed_files:?}"));
            assert_eq!(entry["setting"], setting);
            assert_eq!(entry["strategy"], "cgreconcile");
            assert!(entry["cgroups"].as_u64().unwrap() >= 1);
        }
    }
    let missing = offered.values().filter(|present| !**present).count();
    println!(
        "memory QoS files this kernel lacks: {missing} of {}",
        MEMORY_QOS_FILES.len()
    );
}

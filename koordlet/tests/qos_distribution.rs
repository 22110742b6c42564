#![allow(clippy::unwrap_used)]
//! Rule distribution metrics through the real QoS manager path: a NodeSLO
//! published on the states informer, the runner thread (`spawn_runner`)
//! building snapshots from it and running `cgreconcile` on a generated cgroup
//! v1 tree, and the Prometheus text of koordlet's registry checked for the
//! applied version, the update time and a latency sample, after the files the
//! NodeSLO implies hold their values. A second NodeSLO version replaces the
//! first in the files and in the metrics.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use apis::slo::v1alpha1::{
    MemoryQOS, MemoryQOSCfg, NodeSLO, NodeSLOSpec, ResourceQOS, ResourceQOSStrategy,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use koord_common::testing::TempDir;
use koord_common::{MetricsRegistry, Shutdown, ShutdownReason};
use koordlet::metriccache::{MetricCache, MetricCacheConfig};
use koordlet::qosmanager::cgreconcile::CgroupReconcile;
use koordlet::qosmanager::distribution::DistributionMetrics;
use koordlet::qosmanager::{
    QosManagerConfig, QosRunner, SnapshotSource, spawn_runner, test_capabilities,
};
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs, StatesInformer};
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

const GIB: i64 = 1 << 30;
const POD_DIR: &str = "kubepods/burstable/podls-1";
const CONTAINER_DIR: &str = "kubepods/burstable/podls-1/c-ls";

fn ls_pod() -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some("web".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some("ls-1".into());
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

/// A NodeSLO asking LS for `min_percent` of the request as memory.min,
/// updated (managedFields) at `updated`.
fn node_slo(resource_version: &str, min_percent: i64, updated: SystemTime) -> NodeSLO {
    let mut slo = NodeSLO::new(
        "node-d",
        NodeSLOSpec {
            resource_qos_strategy: Some(ResourceQOSStrategy {
                ls_class: Some(ResourceQOS {
                    memory_qos: Some(MemoryQOSCfg {
                        enable: Some(true),
                        memory_qos: MemoryQOS {
                            min_limit_percent: Some(min_percent),
                            throttling_percent: Some(80),
                            ..Default::default()
                        },
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    slo.metadata.resource_version = Some(resource_version.into());
    slo.metadata.generation = Some(min_percent);
    let secs = updated
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    slo.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("koord-manager".into()),
        time: Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(secs).unwrap(),
        )),
        ..Default::default()
    }]);
    slo
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap().trim().to_string()
}

/// Polls `check` on the registry text for up to 15 s, then encodes once
/// more: the runner records a round's metrics one family after another, so
/// the text that passed `check` may have been encoded in the middle of that
/// round's recording. `check` must therefore look for the last thing a
/// round records (the `from="updated"` latency sample).
fn wait_for(registry: &MetricsRegistry, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let body = registry.encode().unwrap();
        if check(&body) {
            return registry.encode().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_nodeslo_change_is_measured_until_its_cgroup_files_are_written() {
    let tree = TempDir::new("qos-distribution").unwrap();
    let memory_root = tree.path().join("memory");
    // A v1 memory hierarchy whose cgroups have the protection files.
    for dir in [
        "kubepods",
        "kubepods/burstable",
        "kubepods/besteffort",
        POD_DIR,
        CONTAINER_DIR,
    ] {
        let dir = memory_root.join(dir);
        fs::create_dir_all(&dir).unwrap();
        for file in ["memory.min", "memory.low", "memory.high"] {
            fs::write(dir.join(file), "0\n").unwrap();
        }
    }
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, tree.path());
    let mut caps = test_capabilities();
    caps.memory_qos.min = true;
    caps.memory_qos.low = true;
    caps.memory_qos.high = true;

    let states = StatesInformer::new("node-d", RequiredSyncs::PODS_ONLY);
    states.set_pods(PodsSnapshot {
        pods: vec![ls_pod()],
        origin: PodsOrigin::File,
        synced_at: SystemTime::now(),
    });
    let updated = SystemTime::now() - Duration::from_secs(3);
    states.set_node_slo(Some(node_slo("100", 100, updated)));

    let registry = MetricsRegistry::new("koordlet");
    let runner = QosRunner::new(
        vec![Box::new(CgroupReconcile)],
        ResourceExecutor::new(layout.clone(), ExecutorConfig::default()),
    )
    .with_distribution_metrics(DistributionMetrics::register(&registry, "node-d"));
    let proc_root = TempDir::new("qos-distribution-proc").unwrap();
    let source = SnapshotSource {
        states: states.clone(),
        cache: Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap()),
        capabilities: Arc::new(caps),
        layout,
        collect_interval: Duration::from_secs(1),
        config: QosManagerConfig {
            reconcile_interval: Duration::from_millis(100),
            ..QosManagerConfig::default()
        },
        proc_root: proc_root.path().to_path_buf(),
        kubelet_root: None,
    };
    let shutdown = Shutdown::new();
    let thread =
        spawn_runner(runner, source, shutdown.clone(), Duration::from_millis(100)).unwrap();

    let body = wait_for(&registry, "the first distribution", |body| {
        body.contains(
            "koordlet_nodeslo_distribution_latency_seconds_count{node=\"node-d\",from=\"updated\"} 1",
        )
    });
    assert!(
        body.contains(
            "koordlet_nodeslo_distribution_latency_seconds_count{node=\"node-d\",from=\"observed\"} 1",
        ),
        "{body}"
    );
    // The files hold the NodeSLO's values by the time the sample exists.
    assert_eq!(
        read(&memory_root.join(POD_DIR).join("memory.min")),
        GIB.to_string()
    );
    let high = (GIB + GIB * 80 / 100) / 4096 * 4096;
    assert_eq!(
        read(&memory_root.join(CONTAINER_DIR).join("memory.high")),
        high.to_string()
    );
    assert!(
        body.contains(
            "koordlet_nodeslo_rule_version{node=\"node-d\",strategy=\"cgreconcile\",resource_version=\"100\",generation=\"100\"} 1"
        ),
        "{body}"
    );
    let updated_secs = updated
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        body.contains(&format!(
            "koordlet_nodeslo_update_time_seconds{{node=\"node-d\"}} {updated_secs}"
        )),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "koordlet_nodeslo_rule_update_time_seconds{{node=\"node-d\",strategy=\"cgreconcile\"}} {updated_secs}"
        )),
        "{body}"
    );
    // Measured from the managedFields time too (about 3 s before).
    assert!(
        body.contains(
            "koordlet_nodeslo_distribution_latency_seconds_count{node=\"node-d\",from=\"updated\"} 1"
        ),
        "{body}"
    );
    let sum_updated: f64 = body
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "koordlet_nodeslo_distribution_latency_seconds_sum{node=\"node-d\",from=\"updated\"} ",
            )
        })
        .unwrap()
        .parse()
        .unwrap();
    assert!(sum_updated >= 2.0, "{sum_updated}");

    // The next version: new values, a second sample, the old label gone.
    states.set_node_slo(Some(node_slo("101", 50, SystemTime::now())));
    let body = wait_for(&registry, "the second distribution", |body| {
        body.contains(
            "koordlet_nodeslo_distribution_latency_seconds_count{node=\"node-d\",from=\"updated\"} 2",
        )
    });
    assert!(
        body.contains(
            "koordlet_nodeslo_distribution_latency_seconds_count{node=\"node-d\",from=\"observed\"} 2",
        ),
        "{body}"
    );
    assert_eq!(
        read(&memory_root.join(POD_DIR).join("memory.min")),
        (GIB / 2).to_string()
    );
    assert!(
        body.contains("resource_version=\"101\",generation=\"50\"} 1"),
        "{body}"
    );
    assert!(!body.contains("resource_version=\"100\""), "{body}");

    shutdown.trigger(ShutdownReason::Requested("test done".into()));
    thread.join().unwrap();
}

#![allow(clippy::unwrap_used)]
//! memoryevict end to end in standalone mode: the runner's decision goes
//! through the evictor and SIGKILLs the BE pod's real process, and only it.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use apis::extension::{PriorityClass, QoSClass};
use apis::slo::v1alpha1::{NodeSLOSpec, ResourceThresholdStrategy};
use koord_common::testing::TempDir;
use koord_common::units::Bytes;
use koordlet::evictor::qos::QosEvictor;
use koordlet::evictor::{EvictorArgs, PodEvictor};
use koordlet::qosmanager::framework::{MetricSample, QosPod, QosRunner, QosSnapshot};
use koordlet::qosmanager::memoryevict::MemoryEvict;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller, QosTier};
use support::cgroup::{ThrowawayCgroup, real_v1_layout_or_skip};

const GIB: i64 = 1 << 30;

struct Sleeper(Child);

impl Sleeper {
    fn spawn() -> Self {
        Self(
            Command::new("sleep")
                .arg("1000")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    fn killed_by(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.signal();
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pod(
    uid: &str,
    qos: QoSClass,
    tier: QosTier,
    layout: &CgroupLayout,
    memory: i64,
    now: SystemTime,
) -> QosPod {
    QosPod {
        uid: uid.to_string(),
        namespace: "default".to_string(),
        name: format!("pod-{uid}"),
        qos,
        qos_label: qos,
        kube_qos: tier,
        priority: PriorityClass::None,
        priority_value: if qos == QoSClass::BE { 5500 } else { 9500 },
        phase: "Running".to_string(),
        cgroup_dir: layout.pod_dir(tier, uid).unwrap(),
        containers: Vec::new(),
        allocated_cpus: None,
        cpu_usage: None,
        memory_usage: Some(MetricSample::new(memory as f64, now)),
        kube_index: None,
    }
}

#[test]
fn memory_pressure_kills_the_be_pod_process_and_spares_ls() {
    let Some(host) = real_v1_layout_or_skip(&[Controller::Cpu]) else {
        return;
    };
    let mut cgroup = ThrowawayCgroup::new(&host, "memevict", &[Controller::Cpu]).unwrap();
    let be_dir = cgroup.create_child("kubepods/besteffort/podbe-1").unwrap();
    let ls_dir = cgroup.create_child("kubepods/burstable/podls-1").unwrap();
    let mut be_process = Sleeper::spawn();
    let mut ls_process = Sleeper::spawn();
    cgroup.attach(&be_dir, be_process.0.id()).unwrap();
    cgroup.attach(&ls_dir, ls_process.0.id()).unwrap();
    // A cgroup root whose cpu hierarchy is the throwaway tree.
    let root = TempDir::new("memevict-root").unwrap();
    std::os::unix::fs::symlink(
        host.root.join("cpu").join(cgroup.dir()),
        root.path().join("cpu"),
    )
    .unwrap();
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root.path());

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let evictor = PodEvictor::for_mode(
        None,
        "node-a",
        &EvictorArgs {
            standalone_kill: true,
            ..EvictorArgs::default()
        },
    );
    let adapter = QosEvictor::new(evictor, layout.clone(), runtime.handle().clone());
    let mut runner = QosRunner::new(
        vec![Box::new(MemoryEvict::new())],
        ResourceExecutor::new(layout.clone(), ExecutorConfig::default()),
    )
    .with_evictor(Arc::new(adapter));

    let now = SystemTime::now();
    let mut snapshot = QosSnapshot::for_test(now);
    snapshot.layout = layout.clone();
    snapshot.node.memory_capacity = Bytes(10 * GIB as u64);
    snapshot.node_usage.memory = Some(MetricSample::new((9 * GIB) as f64, now));
    snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
        resource_used_threshold_with_be: Some(ResourceThresholdStrategy {
            enable: Some(true),
            memory_evict_threshold_percent: Some(70),
            ..ResourceThresholdStrategy::default()
        }),
        ..NodeSLOSpec::default()
    }));
    snapshot.pods = vec![
        pod(
            "ls-1",
            QoSClass::LS,
            QosTier::Burstable,
            &layout,
            6 * GIB,
            now,
        ),
        pod(
            "be-1",
            QoSClass::BE,
            QosTier::BestEffort,
            &layout,
            2 * GIB,
            now,
        ),
    ];
    assert_eq!(
        snapshot.pods[1].cgroup_dir,
        PathBuf::from("kubepods/besteffort/podbe-1")
    );

    let outcome = runner.run_one(0, &snapshot);
    assert_eq!(outcome.actions, 1, "one eviction: {outcome:?}");
    assert_eq!(be_process.killed_by(Duration::from_secs(20)), Some(9));
    assert_eq!(
        ls_process.killed_by(Duration::from_millis(300)),
        None,
        "the LS pod's process must survive"
    );
}

/// A process that holds `mib` MiB of anonymous memory, started inside the
/// pod cgroup `dir` of every controller of `cgroup` (so the kernel charges
/// its pages there): `dd` fills a buffer of that size and blocks writing it
/// to a pipe nobody reads.
fn memory_hog(cgroup: &ThrowawayCgroup, dir: &std::path::Path, mib: u64) -> Sleeper {
    let join = |controller| {
        cgroup
            .path(dir, controller)
            .join("cgroup.procs")
            .display()
            .to_string()
    };
    let script = format!(
        "echo $$ > {} && echo $$ > {} && echo $$ > {} && dd if=/dev/zero bs={mib}M count=1 2>/dev/null | sleep 1000",
        join(Controller::Memory),
        join(Controller::Cpu),
        join(Controller::Cpuacct),
    );
    Sleeper(
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn kube_pod(
    uid: &str,
    qos: &str,
    kube_qos: &str,
    priority: i32,
) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": uid, "namespace": "default", "uid": uid,
            "labels": { "koordinator.sh/qosClass": qos }
        },
        "spec": { "priority": priority, "containers": [{ "name": "main" }] },
        "status": { "phase": "Running", "qosClass": kube_qos }
    }))
    .unwrap()
}

/// Pod memory as koordlet's collector reads it from the real cgroups, put
/// into a snapshot whose node is the test tree: capacity `capacity`,
/// usage the sum of the pods' usage.
fn measured_snapshot(
    layout: &CgroupLayout,
    pods: &[k8s_openapi::api::core::v1::Pod],
    collector: &mut koordlet::metricsadvisor::PodResourceCollector,
    capacity: i64,
    threshold: ResourceThresholdStrategy,
    now: SystemTime,
) -> QosSnapshot {
    use koordlet::metricsadvisor::Collector;
    let (advisor_pods, errors) = koordlet::statesinformer::podmeta::advisor_snapshot_of(pods);
    assert!(errors.is_empty(), "{errors:?}");
    let samples = collector.collect(now, &advisor_pods);
    let cache = koordlet::metriccache::MetricCache::new(
        koordlet::metriccache::MetricCacheConfig::default(),
    )
    .unwrap();
    cache.append(&samples);
    let mut snapshot = QosSnapshot::for_test(now);
    snapshot.layout = layout.clone();
    snapshot.pods = koordlet::qosmanager::service::qos_pods(pods, layout, &cache);
    snapshot.kube_pods = Arc::new(pods.to_vec());
    let used: f64 = snapshot
        .pods
        .iter()
        .filter_map(|p| p.memory_usage.map(|s| s.value))
        .sum();
    snapshot.node.memory_capacity = Bytes::from_i64_or_zero(capacity);
    snapshot.node_usage.memory = Some(MetricSample::new(used, now));
    snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
        resource_used_threshold_with_be: Some(threshold),
        ..NodeSLOSpec::default()
    }));
    snapshot
}

const MIB: i64 = 1 << 20;

/// SIGKILLs every process left in the pod cgroups on drop (the hogs' `dd`
/// and `sleep` are grandchildren the [`Sleeper`]s do not reach), also when
/// the test fails; declared after the [`ThrowawayCgroup`] so it runs first.
struct KillLeftovers(Vec<PathBuf>);

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        let _ = koordlet::evictor::kill::kill_cgroup_trees(&self.0);
    }
}

/// Real memory pressure in real cgroups: two BE hogs (300 and 100 MiB) and
/// an LS process (150 MiB) on a "node" of 1 GiB. Usage ≈ 53 % ≥ threshold
/// 50 %: release down to 30 % ≈ 235 MiB, which the big BE hog alone covers.
/// It is killed; measured again, usage ≈ 24 % is under the threshold and
/// nothing else is evicted.
#[test]
fn real_memory_hog_in_a_be_cgroup_is_evicted_and_eviction_stops_at_the_lower_threshold() {
    let controllers = [Controller::Cpu, Controller::Cpuacct, Controller::Memory];
    let Some(host) = real_v1_layout_or_skip(&controllers) else {
        return;
    };
    let mut cgroup = ThrowawayCgroup::new(&host, "memevict-hog", &controllers).unwrap();
    let big_dir = cgroup
        .create_child("kubepods/besteffort/podbe-big")
        .unwrap();
    let small_dir = cgroup
        .create_child("kubepods/besteffort/podbe-small")
        .unwrap();
    let ls_dir = cgroup.create_child("kubepods/burstable/podls").unwrap();
    let _leftovers = KillLeftovers(
        [&big_dir, &small_dir, &ls_dir]
            .iter()
            .map(|dir| cgroup.path(dir, Controller::Cpu))
            .collect(),
    );
    let mut big = memory_hog(&cgroup, &big_dir, 300);
    let mut small = memory_hog(&cgroup, &small_dir, 100);
    let mut ls = memory_hog(&cgroup, &ls_dir, 150);
    let root = TempDir::new("memevict-hog-root").unwrap();
    for controller in controllers {
        std::os::unix::fs::symlink(
            host.root.join(controller.as_str()).join(cgroup.dir()),
            root.path().join(controller.as_str()),
        )
        .unwrap();
    }
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root.path());
    let pods = vec![
        kube_pod("be-big", "BE", "BestEffort", 5000),
        kube_pod("be-small", "BE", "BestEffort", 5000),
        kube_pod("ls", "LS", "Burstable", 9000),
    ];
    let threshold = ResourceThresholdStrategy {
        enable: Some(true),
        memory_evict_threshold_percent: Some(50),
        memory_evict_lower_percent: Some(30),
        ..ResourceThresholdStrategy::default()
    };
    let mut collector = koordlet::metricsadvisor::PodResourceCollector::new(layout.clone());

    // Wait until the kernel has charged the hogs' memory.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut snapshot = loop {
        let snapshot = measured_snapshot(
            &layout,
            &pods,
            &mut collector,
            1 << 30,
            threshold.clone(),
            SystemTime::now(),
        );
        let usage = |uid: &str| {
            snapshot
                .pods
                .iter()
                .find(|p| p.uid == uid)
                .and_then(|p| p.memory_usage)
                .map_or(0, |s| s.value as i64)
        };
        if usage("be-big") >= 295 * MIB && usage("be-small") >= 98 * MIB && usage("ls") >= 148 * MIB
        {
            break snapshot;
        }
        assert!(
            Instant::now() < deadline,
            "the hogs never reached their size: big {} small {} ls {}",
            usage("be-big"),
            usage("be-small"),
            usage("ls")
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let evictor = PodEvictor::for_mode(
        None,
        "node-a",
        &EvictorArgs {
            standalone_kill: true,
            ..EvictorArgs::default()
        },
    );
    let adapter = QosEvictor::new(evictor, layout.clone(), runtime.handle().clone());
    let mut runner = QosRunner::new(
        vec![Box::new(MemoryEvict::new())],
        ResourceExecutor::new(layout.clone(), ExecutorConfig::default()),
    )
    .with_evictor(Arc::new(adapter));
    let managed = runner.managed_files();

    snapshot.config.memory_evict_cool_time = Duration::from_secs(1);
    let first = runner.run_one(0, &snapshot);
    assert_eq!(first.actions, 1, "exactly one victim: {first:?}");
    let report = &managed.eviction_reports()[0];
    let victims: Vec<&str> = report.tasks[0]
        .victims
        .iter()
        .map(|v| v.pod.as_str())
        .collect();
    assert_eq!(victims, ["default/be-big"], "{report:?}");
    assert!(report.tasks[0].shortfall.is_empty(), "{report:?}");
    assert_eq!(big.killed_by(Duration::from_secs(20)), Some(9));
    assert_eq!(
        small.killed_by(Duration::from_millis(300)),
        None,
        "the small BE hog stays"
    );
    assert_eq!(
        ls.killed_by(Duration::from_millis(100)),
        None,
        "the LS process stays"
    );

    // Measured again after the cool time: usage fell under the threshold
    // (the kernel released the big hog's pages); no further eviction.
    let deadline = Instant::now() + Duration::from_secs(30);
    let second = loop {
        std::thread::sleep(Duration::from_millis(1200));
        let mut snapshot = measured_snapshot(
            &layout,
            &pods,
            &mut collector,
            1 << 30,
            threshold.clone(),
            SystemTime::now(),
        );
        snapshot.config.memory_evict_cool_time = Duration::from_secs(1);
        let used = snapshot.node_usage.memory.unwrap().value as i64;
        if used < 300 * MIB {
            break runner.run_one(0, &snapshot);
        }
        assert!(Instant::now() < deadline, "memory not released: {used}");
    };
    assert_eq!(second.actions, 0, "{second:?}");
    assert!(
        second
            .notes
            .iter()
            .any(|n| n.text.contains("below the threshold 50%")),
        "{second:?}"
    );
    assert_eq!(small.killed_by(Duration::from_millis(100)), None);
    assert_eq!(ls.killed_by(Duration::from_millis(100)), None);
}

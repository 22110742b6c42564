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
    snapshot.node.memory_capacity_bytes = 10 * GIB;
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

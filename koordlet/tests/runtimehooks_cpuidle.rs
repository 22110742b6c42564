//! cpu.idle of the BE QoS tier on a real cgroup v1 `cpu` hierarchy: the
//! CoreSched hook's reconciler sets `kubepods/besteffort/cpu.idle` to 1 when
//! the NodeSLO's CPU QoS policy is `coreSched` and BE sets `schedIdle: 1`,
//! repairs a hand-written drift, and sets it back to 0 under the group
//! identity policy. Two CPU hogs pinned to one CPU, one in a BE pod and one
//! in a Burstable pod, show the effect: while the BE tier is idle the BE
//! hog gets almost no CPU.
//!
//! Skipped (with a message) without root, without writable v1 `cpu` and
//! `cpuset` hierarchies, or on a kernel without `cpu.idle` (before 5.15).
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::runtimehooks::apply::SideEffectApplier;
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::coresched::CoreSched;
use koordlet::runtimehooks::metrics::HookMetrics;
use koordlet::runtimehooks::protocol::{FailurePolicyConfig, Hook};
use koordlet::runtimehooks::reconciler::Reconciler;
use koordlet::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs, StatesInformer};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller};
use support::cgroup::{BusyProcess, ThrowawayCgroup, real_v1_layout_or_skip};

const BE_UID: &str = "0c1d2e3f-be00-4000-8000-0000000000e1";
const LS_UID: &str = "0c1d2e3f-15a0-4000-8000-0000000000e2";

fn pod(uid: &str, qos_label: &str, kube_qos: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{qos_label}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            labels: Some([("koordinator.sh/qosClass".to_string(), qos_label.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            qos_class: Some(kube_qos.into()),
            ..PodStatus::default()
        }),
    }
}

fn node_slo(policy: &str) -> apis::slo::v1alpha1::NodeSLO {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "test-node"},
        "spec": {"resourceQOSStrategy": {
            "policies": {"cpuPolicy": policy},
            "lsClass": {"cpuQOS": {"enable": true, "schedIdle": 0}},
            "beClass": {"cpuQOS": {"enable": true, "schedIdle": 1}}
        }}
    }))
    .unwrap()
}

fn read(root: &Path, dir: &str, file: &str) -> String {
    std::fs::read_to_string(root.join("cpu").join(dir).join(file))
        .unwrap()
        .trim()
        .to_string()
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces) start at field 3.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The BE hog's share of the CPU time both hogs got over `window`.
fn be_share(be: &BusyProcess, ls: &BusyProcess, window: Duration) -> f64 {
    let (be0, ls0) = (cpu_ticks(be.pid()), cpu_ticks(ls.pid()));
    std::thread::sleep(window);
    let (be1, ls1) = (cpu_ticks(be.pid()), cpu_ticks(ls.pid()));
    let (be, ls) = ((be1 - be0) as f64, (ls1 - ls0) as f64);
    assert!(be + ls > 10.0, "the hogs did not run: {be} + {ls} ticks");
    be / (be + ls)
}

struct LinkRoot(PathBuf);

impl Drop for LinkRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_be_tier_becomes_an_idle_cgroup_and_yields_the_cpu() {
    let controllers = [Controller::Cpu, Controller::Cpuset];
    let Some(host) = real_v1_layout_or_skip(&controllers) else {
        return;
    };
    if !Path::new("/sys/fs/cgroup/cpu/cpu.idle").is_file() {
        println!("SKIP: this kernel has no cpu.idle (cgroup idle needs Linux 5.15 or later)");
        return;
    }
    let mut cgroups = ThrowawayCgroup::new(&host, "cpuidle", &controllers).unwrap();
    // Pin everything to the first CPU the tree may use, so the hogs compete.
    let kubepods = cgroups.create_child("kubepods").unwrap();
    let cpus = std::fs::read_to_string(
        cgroups
            .path(&kubepods, Controller::Cpuset)
            .join("cpuset.cpus"),
    )
    .unwrap();
    let first_cpu = cpus.trim().split([',', '-']).next().unwrap().to_string();
    std::fs::write(
        cgroups
            .path(&kubepods, Controller::Cpuset)
            .join("cpuset.cpus"),
        &first_cpu,
    )
    .unwrap();
    let be_pod_dir = format!("kubepods/besteffort/pod{BE_UID}");
    let ls_pod_dir = format!("kubepods/burstable/pod{LS_UID}");
    let be_dir = cgroups.create_child(&be_pod_dir).unwrap();
    let ls_dir = cgroups.create_child(&ls_pod_dir).unwrap();

    let link_root =
        LinkRoot(std::env::temp_dir().join(format!("koordlet-cpuidle-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&link_root.0);
    std::fs::create_dir_all(&link_root.0).unwrap();
    for controller in controllers {
        std::os::unix::fs::symlink(
            cgroups.path(cgroups.dir(), controller),
            link_root.0.join(controller.as_str()),
        )
        .unwrap();
    }
    let root = link_root.0.clone();
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, &root);

    // The hogs start before koordlet decides anything.
    let be_hog = BusyProcess::spawn().unwrap();
    let ls_hog = BusyProcess::spawn().unwrap();
    cgroups.attach(&be_dir, be_hog.pid()).unwrap();
    cgroups.attach(&ls_dir, ls_hog.pid()).unwrap();
    let fair = be_share(&be_hog, &ls_hog, Duration::from_millis(1500));
    assert!(
        (0.25..=0.75).contains(&fair),
        "without cpu.idle the BE hog should get about half the CPU, got {fair:.2}"
    );

    let caps = koordlet::capabilities::detect(&SystemArgs::default());
    assert!(
        caps.cpu_idle,
        "capabilities must see cpu.idle: {:?}",
        caps.reasons
    );
    let metrics = HookMetrics::new("test-node");
    let dispatcher = HookDispatcher::new(
        vec![(Arc::new(CoreSched) as Arc<dyn Hook>, true)],
        &caps,
        layout.clone(),
        FailurePolicyConfig::default(),
    )
    .with_metrics(metrics.clone());
    let status = &dispatcher.statuses()[0];
    assert_eq!(status.unsupported, None, "{status:?}");
    if !caps.core_sched {
        // This machine: the cookie half is reported as missing.
        assert_eq!(status.degraded.len(), 1, "{status:?}");
    }
    let states = StatesInformer::new("test-node", RequiredSyncs::PODS_ONLY);
    states.set_pods(PodsSnapshot {
        pods: vec![
            pod(BE_UID, "BE", "BestEffort"),
            pod(LS_UID, "LS", "Burstable"),
        ],
        origin: PodsOrigin::File,
        synced_at: SystemTime::now(),
    });
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let reconciler = Reconciler {
        dispatcher: Arc::new(dispatcher),
        applier: SideEffectApplier::new(executor, "/proc", root.join("no-resctrl")),
        states: states.clone(),
        interval: Duration::from_secs(10),
        online_cpus: None,
        kubelet_root: None,
        reported_denials: Default::default(),
        reported_host_app_refusals: Default::default(),
    };

    // No NodeSLO yet: nothing is decided.
    let waiting = reconciler.round_blocking();
    assert_eq!(waiting.repaired, 0, "{waiting:?}");
    assert_eq!(read(&root, "kubepods/besteffort", "cpu.idle"), "0");

    states.set_node_slo(Some(node_slo("coreSched")));
    let first = reconciler.round_blocking();
    assert_eq!(first.failed, 0, "{first:?}");
    assert_eq!(first.repaired, 1, "{first:?}");
    assert_eq!(read(&root, "kubepods/besteffort", "cpu.idle"), "1");
    assert_eq!(read(&root, "kubepods/burstable", "cpu.idle"), "0");
    assert_eq!(read(&root, "kubepods", "cpu.idle"), "0");
    // The kernel pins an idle group's weight to the minimum.
    assert_eq!(read(&root, "kubepods/besteffort", "cpu.shares"), "3");
    let idle = be_share(&be_hog, &ls_hog, Duration::from_millis(1500));
    println!("BE hog share of one CPU: {fair:.2} before, {idle:.2} with the BE tier idle");
    assert!(
        idle < 0.1,
        "with the BE tier idle the BE hog should get almost no CPU, got {idle:.2} (before: {fair:.2})"
    );

    // Drift by hand is repaired and counted.
    let repaired_before = metrics.drift_repaired("kubeqos", "cpu.idle");
    std::fs::write(root.join("cpu/kubepods/besteffort/cpu.idle"), "0").unwrap();
    let repair = reconciler.round_blocking();
    assert_eq!(repair.repaired, 1, "{repair:?}");
    assert_eq!(read(&root, "kubepods/besteffort", "cpu.idle"), "1");
    assert_eq!(
        metrics.drift_repaired("kubeqos", "cpu.idle"),
        repaired_before + 1
    );
    let steady = reconciler.round_blocking();
    assert_eq!(steady.repaired, 0, "{steady:?}");

    // Back to group identity: the tier is a normal cgroup again.
    states.set_node_slo(Some(node_slo("groupIdentity")));
    let back = reconciler.round_blocking();
    assert_eq!(back.repaired, 1, "{back:?}");
    assert_eq!(read(&root, "kubepods/besteffort", "cpu.idle"), "0");
    assert_eq!(read(&root, "kubepods/besteffort", "cpu.shares"), "1024");
    drop(be_hog);
    drop(ls_hog);
}

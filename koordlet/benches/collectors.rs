//! Cost of one collection round for 50 pods × 3 containers (150 container
//! cgroups): the node collector, the pod/container collector, and PSI.
//!
//! As root on a cgroup v1 host it creates real, empty kubelet-style cgroups
//! under `/sys/fs/cgroup/<ctrl>/koord-test-<pid>-...` (removed afterwards);
//! otherwise it times a generated file tree, which only measures parsing.
//!
//! Run: `cargo bench -p koordlet --bench collectors`

#![allow(clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use apis::extension::{PriorityClass, QoSClass};
use koord_common::testing::TempDir;
use koordlet::metriccache::{MetricCache, MetricCacheConfig};
use koordlet::metricsadvisor::{
    Collector, ContainerMeta, MetricsAdvisor, NodeResourceCollector, PodMeta, PodResourceCollector,
    PodsSnapshot, PsiCollector,
};
use koordlet::system::cgroup::{
    CgroupDriver, CgroupLayout, CgroupResource, CgroupVersion, Controller, QosTier,
};
use support::cgroup::ThrowawayCgroup;

const PODS: usize = 50;
const CONTAINERS_PER_POD: usize = 3;
const ROUNDS: u32 = 200;
const CONTROLLERS: [Controller; 3] = [Controller::Cpu, Controller::Cpuacct, Controller::Memory];

fn snapshot() -> PodsSnapshot {
    PodsSnapshot::new(
        (0..PODS)
            .map(|p| PodMeta {
                uid: Arc::from(format!("00000000-0000-4000-8000-{p:012x}")),
                namespace: "bench".into(),
                name: format!("pod-{p}"),
                qos: if p % 5 == 0 {
                    QoSClass::BE
                } else {
                    QoSClass::LS
                },
                kube_qos: QosTier::Burstable,
                priority: PriorityClass::None,
                containers: (0..CONTAINERS_PER_POD)
                    .map(|c| ContainerMeta {
                        name: format!("c{c}"),
                        id: Some(Arc::from(format!("containerd://{p:032x}{c:032x}"))),
                    })
                    .collect(),
            })
            .collect(),
    )
}

/// Every relative cgroup dir of the snapshot, parents first.
fn relative_dirs(layout: &CgroupLayout, pods: &PodsSnapshot) -> Vec<String> {
    let mut dirs = vec!["kubepods".to_string(), "kubepods/burstable".to_string()];
    for pod in &pods.pods {
        dirs.push(
            layout
                .pod_dir(pod.kube_qos, &pod.uid)
                .unwrap()
                .display()
                .to_string(),
        );
        for container in &pod.containers {
            let id = container.id.as_deref().unwrap();
            dirs.push(
                layout
                    .container_dir(pod.kube_qos, &pod.uid, id)
                    .unwrap()
                    .display()
                    .to_string(),
            );
        }
    }
    dirs
}

fn generated_tree(root: &Path, layout: &CgroupLayout, pods: &PodsSnapshot) {
    for dir in relative_dirs(layout, pods).iter().skip(2) {
        let files = [
            (CgroupResource::CpuacctUsage, "123456789000\n".to_string()),
            (
                CgroupResource::CpuStat,
                "nr_periods 10\nnr_throttled 1\nthrottled_time 5\nnr_bursts 0\nburst_time 0\n"
                    .to_string(),
            ),
            (
                CgroupResource::MemoryStat,
                // A realistic v1 memory.stat has ~36 lines.
                (0..18)
                    .map(|i| format!("stat_{i} {i}\n"))
                    .chain(
                        [
                            "total_inactive_anon 4096",
                            "total_active_anon 8192",
                            "total_unevictable 0",
                            "total_inactive_file 4096",
                            "total_active_file 4096",
                        ]
                        .map(|l| format!("{l}\n")),
                    )
                    .collect(),
            ),
            (CgroupResource::MemoryUsage, "20480\n".to_string()),
        ];
        for (resource, content) in files {
            let path = layout.file_path(dir, resource).unwrap();
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }
    }
    let _ = root;
}

fn cpu_seconds() -> Option<f64> {
    // utime and stime (fields 14, 15) in clock ticks of 10 ms.
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let after_comm = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn time_rounds(label: &str, mut round: impl FnMut(SystemTime)) {
    let start = SystemTime::now();
    round(start);
    let cpu_before = cpu_seconds();
    let began = Instant::now();
    for i in 1..=ROUNDS {
        round(start + Duration::from_secs(u64::from(i)));
    }
    let wall = began.elapsed().as_secs_f64() / f64::from(ROUNDS);
    let cpu = cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| (after - before) / f64::from(ROUNDS));
    match cpu {
        Some(cpu) => println!(
            "  {label:<34} wall {:>7.2} ms/round, cpu {:>7.2} ms/round = {:.2}% of a core at 1 s",
            wall * 1e3,
            cpu * 1e3,
            cpu * 100.0
        ),
        None => println!("  {label:<34} wall {:>7.2} ms/round", wall * 1e3),
    }
}

fn main() {
    let pods = snapshot();
    let links = TempDir::new("collectors-bench").unwrap();
    let mut real_tree = None;
    let layout = match support::cgroup::real_v1_layout_or_skip(&CONTROLLERS) {
        Some(host) => {
            let mut cgroup = ThrowawayCgroup::new(&host, "bench", &CONTROLLERS).unwrap();
            let plain = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/");
            for dir in relative_dirs(&plain, &pods) {
                cgroup.create_child(&dir).unwrap();
            }
            for controller in CONTROLLERS {
                std::os::unix::fs::symlink(
                    cgroup.path(cgroup.dir(), controller),
                    links.path().join(controller.as_str()),
                )
                .unwrap();
            }
            real_tree = Some(cgroup);
            println!(
                "collectors benchmark on real cgroup v1 (empty cgroups): {PODS} pods x {CONTAINERS_PER_POD} containers"
            );
            CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, links.path())
        }
        None => {
            let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, links.path());
            generated_tree(links.path(), &layout, &pods);
            println!(
                "collectors benchmark on a generated tree: {PODS} pods x {CONTAINERS_PER_POD} containers"
            );
            layout
        }
    };

    let mut node = NodeResourceCollector::new("/proc");
    time_rounds("node (/proc/stat, /proc/meminfo)", |now| {
        node.collect(now, &pods);
    });
    let mut pod_collector = PodResourceCollector::new(layout.clone());
    time_rounds("pods + containers (200 cgroups)", |now| {
        pod_collector.collect(now, &pods);
    });
    let mut psi = PsiCollector::new("/proc", layout.clone(), Duration::ZERO);
    time_rounds("PSI (every round; default is 10 s)", |now| {
        psi.collect(now, &pods);
    });

    let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
    let (_feed, receiver) = tokio::sync::watch::channel(Arc::new(pods.clone()));
    let mut advisor = MetricsAdvisor::new(cache.clone(), receiver)
        .with_collector(Box::new(NodeResourceCollector::new("/proc")))
        .with_collector(Box::new(PodResourceCollector::new(layout)));
    time_rounds("full round incl. cache append", |now| {
        advisor.collect_round(now);
    });
    let stats = cache.stats();
    println!(
        "  cache after {} rounds: {} series, {:.2} MiB estimated",
        ROUNDS + 1,
        stats.series,
        stats.estimated_bytes as f64 / (1024.0 * 1024.0)
    );
    drop(real_tree);
}

#![allow(clippy::unwrap_used)]
//! The collectors against the machine's real cgroup v1 hierarchies: a busy,
//! memory-holding process in a kubelet-style container cgroup
//! (`<test root>/kubepods/burstable/pod<uid>/<container id>`) must be
//! measured at about one core and a non-zero working set. Skips (printing
//! `SKIP: <reason>`) when not root or the hierarchies are not writable.

mod support;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use apis::extension::{PriorityClass, QoSClass};
use koord_common::testing::TempDir;
use koordlet::metriccache::{Entity, MetricKind, Sample};
use koordlet::metricsadvisor::{
    Collector, ContainerMeta, NodeResourceCollector, PodMeta, PodResourceCollector, PodsSnapshot,
    PsiCollector,
};
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller, QosTier};
use support::cgroup::{ThrowawayCgroup, real_v1_layout_or_skip};

const POD_UID: &str = "6f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f";
const GHOST_UID: &str = "6f0c1d2e-3a4b-4c5d-8e9f-00000000dead";
const CONTAINER_HEX: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";
const CONTROLLERS: [Controller; 3] = [Controller::Cpu, Controller::Cpuacct, Controller::Memory];
/// What the child keeps in a shell variable: charged as anonymous memory.
const HELD_BYTES: u64 = 32 * 1024 * 1024;

fn container_id() -> String {
    format!("containerd://{CONTAINER_HEX}")
}

/// A shell that waits for a line on stdin (so it can be moved into the
/// cgroup first and its memory charged there), fills a 32 MiB variable,
/// says "held" on stdout once the fill (and its short-lived pipe helpers)
/// is over, then spins. Killed on drop.
struct MemoryHoldingSpinner {
    child: Child,
}

impl MemoryHoldingSpinner {
    fn spawn() -> Self {
        let script = format!(
            "read go; x=$(head -c {HELD_BYTES} /dev/zero | tr '\\000' a); echo held; while :; do :; done"
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self { child }
    }

    fn start(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Blocks until the shell holds its memory. The shell's buffers grow and
    /// shrink while it fills the variable, so reading the cgroup before this
    /// compares pod and container files taken at different sizes.
    fn wait_until_held(&mut self) {
        let stdout = self.child.stdout.as_mut().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert_eq!(
            line.trim(),
            "held",
            "the spinner stopped before holding its memory"
        );
    }
}

impl Drop for MemoryHoldingSpinner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The same kubelet-style tree in the hybrid host's cgroup2 mount, where the
/// kernel keeps per-cgroup PSI on v1 hosts. Removed bottom-up on drop.
struct UnifiedTree {
    mount: PathBuf,
    created: Vec<PathBuf>,
}

impl UnifiedTree {
    fn create(mount: &Path, base: &Path, relative: &[&Path]) -> std::io::Result<Self> {
        let mut tree = Self {
            mount: mount.to_path_buf(),
            created: Vec::new(),
        };
        let top = mount.join(base);
        fs::create_dir(&top)?;
        tree.created.push(top.clone());
        for dir in relative {
            let full = top.join(dir);
            fs::create_dir(&full)?;
            tree.created.push(full);
        }
        Ok(tree)
    }
}

impl Drop for UnifiedTree {
    fn drop(&mut self) {
        for dir in self.created.iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if let Ok(pids) = fs::read_to_string(dir.join("cgroup.procs")) {
                    for pid in pids.split_whitespace() {
                        let _ = fs::write(self.mount.join("cgroup.procs"), pid);
                    }
                }
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(err) if Instant::now() >= deadline => {
                        eprintln!("cannot remove test cgroup {}: {err}", dir.display());
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

fn find(samples: &[Sample], kind: MetricKind, entity: &Entity) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.key.kind == kind && &s.key.entity == entity)
        .map(|s| s.value)
}

/// Online CPUs as the test itself counts them (`cpuN` lines of /proc/stat).
fn online_cpus() -> usize {
    fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .next()
                .and_then(|name| name.strip_prefix("cpu"))
                .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        })
        .count()
}

/// Anonymous memory charged to a v1 memory cgroup, read by the test itself.
fn anon_bytes(memory_dir: &Path) -> u64 {
    let stat = fs::read_to_string(memory_dir.join("memory.stat")).unwrap_or_default();
    stat.lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(key, _)| *key == "total_active_anon" || *key == "total_inactive_anon")
        .map(|(_, value)| value.trim().parse::<u64>().unwrap_or(0))
        .sum()
}

#[test]
fn busy_container_is_measured_at_about_one_core_with_memory() {
    let Some(host) = real_v1_layout_or_skip(&CONTROLLERS) else {
        return;
    };
    let mut cgroup = ThrowawayCgroup::new(&host, "collectors", &CONTROLLERS).unwrap();
    let pod_rel = Path::new("kubepods/burstable").join(format!("pod{POD_UID}"));
    let container_rel = pod_rel.join(CONTAINER_HEX);
    let container_dir = cgroup
        .create_child(container_rel.to_str().unwrap())
        .unwrap();
    // Other work on this 2-core machine (builds) must not starve the spinner:
    // weight the test tree like a large guaranteed pod.
    fs::write(
        cgroup
            .path(cgroup.dir(), Controller::Cpu)
            .join("cpu.shares"),
        "262144",
    )
    .unwrap();

    // The collectors see the test tree as the hierarchy root through symlinks,
    // so they resolve kubelet's own relative paths.
    let links = TempDir::new("collectors-real-root").unwrap();
    for controller in CONTROLLERS {
        std::os::unix::fs::symlink(
            cgroup.path(cgroup.dir(), controller),
            links.path().join(controller.as_str()),
        )
        .unwrap();
    }
    let mut layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, links.path());

    // Per-cgroup PSI lives in the hybrid cgroup2 mount when there is one.
    let unified_tree = host.unified_root.as_ref().and_then(|mount| {
        let relative = [
            Path::new("kubepods"),
            Path::new("kubepods/burstable"),
            pod_rel.as_path(),
            container_rel.as_path(),
        ];
        match UnifiedTree::create(mount, cgroup.dir(), &relative) {
            Ok(tree) => Some(tree),
            Err(err) => {
                println!(
                    "note: no per-cgroup PSI check, cannot create in {}: {err}",
                    mount.display()
                );
                None
            }
        }
    });
    if let Some(tree) = &unified_tree {
        let link = links.path().join("unified");
        std::os::unix::fs::symlink(&tree.created[0], &link).unwrap();
        layout = layout.with_unified_root(link);
    }

    let mut spinner = MemoryHoldingSpinner::spawn();
    cgroup.attach(&container_dir, spinner.child.id()).unwrap();
    if let Some(tree) = &unified_tree {
        fs::write(
            tree.created.last().unwrap().join("cgroup.procs"),
            spinner.child.id().to_string(),
        )
        .unwrap();
    }
    spinner.start();

    spinner.wait_until_held();
    let memory_dir = cgroup.path(&container_dir, Controller::Memory);
    assert!(
        anon_bytes(&memory_dir) >= HELD_BYTES / 2,
        "the child's memory is not charged to its cgroup (anon {} bytes)",
        anon_bytes(&memory_dir)
    );

    let snapshot = PodsSnapshot::new(vec![
        PodMeta {
            uid: POD_UID.into(),
            namespace: "default".into(),
            name: "spinner".into(),
            qos: QoSClass::LS,
            kube_qos: QosTier::Burstable,
            priority: PriorityClass::Prod,
            containers: vec![ContainerMeta {
                name: "main".into(),
                id: Some(container_id().into()),
            }],
        },
        // Listed by the kubelet but without a cgroup: skipped, no error.
        PodMeta {
            uid: GHOST_UID.into(),
            namespace: "default".into(),
            name: "ghost".into(),
            qos: QoSClass::BE,
            kube_qos: QosTier::BestEffort,
            priority: PriorityClass::Batch,
            containers: vec![],
        },
    ]);

    let mut pods = PodResourceCollector::new(layout.clone());
    let mut node = NodeResourceCollector::new("/proc");
    let t0 = SystemTime::now();
    pods.collect(t0, &snapshot);
    node.collect(t0, &snapshot);
    std::thread::sleep(Duration::from_millis(1000));
    let t1 = SystemTime::now();
    let pod_samples = pods.collect(t1, &snapshot);
    let node_samples = node.collect(t1, &snapshot);

    let container = Entity::container(container_id());
    let pod = Entity::pod(POD_UID);
    let container_cpu = find(&pod_samples, MetricKind::ContainerCpuUsage, &container).unwrap();
    let pod_cpu = find(&pod_samples, MetricKind::PodCpuUsage, &pod).unwrap();
    println!("container cpu {container_cpu:.3} cores, pod cpu {pod_cpu:.3} cores");
    assert!(
        (0.6..=1.2).contains(&container_cpu),
        "container CPU {container_cpu}"
    );
    assert!((0.6..=1.2).contains(&pod_cpu), "pod CPU {pod_cpu}");

    let working_set = find(
        &pod_samples,
        MetricKind::ContainerMemoryWorkingSet,
        &container,
    )
    .unwrap();
    let usage = find(&pod_samples, MetricKind::ContainerMemoryUsage, &container).unwrap();
    println!("container memory usage {usage} B, working set {working_set} B");
    assert!(working_set > 0.0, "working set {working_set}");
    assert!(usage >= (HELD_BYTES / 2) as f64, "memory usage {usage}");
    // The child holds its memory now, but v1 memory.stat counters are batched
    // per CPU, so allow a little slack in "pod includes container".
    let pod_usage = find(&pod_samples, MetricKind::PodMemoryUsage, &pod).unwrap();
    assert!(
        pod_usage >= usage * 0.95,
        "pod memory {pod_usage} < container memory {usage}"
    );
    // Throttling ratio exists (no quota set, so nothing is throttled).
    assert_eq!(
        find(&pod_samples, MetricKind::ContainerCpuThrottled, &container),
        Some(0.0)
    );
    assert!(
        pod_samples
            .iter()
            .all(|s| s.key.entity != Entity::pod(GHOST_UID)),
        "the pod without a cgroup must be skipped"
    );

    let node_cpu = node_samples
        .iter()
        .find(|s| s.key.kind == MetricKind::NodeCpuUsage)
        .map(|s| s.value)
        .unwrap();
    let cpus = online_cpus() as f64;
    println!("node cpu {node_cpu:.3} of {cpus} cores");
    assert!(
        node_cpu >= 0.5 && node_cpu <= cpus + 1e-9,
        "node CPU {node_cpu}"
    );
    let node_memory = node_samples
        .iter()
        .find(|s| s.key.kind == MetricKind::NodeMemoryUsage)
        .map(|s| s.value)
        .unwrap();
    assert!(
        node_memory >= HELD_BYTES as f64,
        "node memory {node_memory}"
    );

    if unified_tree.is_some() {
        let mut psi = PsiCollector::new("/proc", layout, Duration::from_secs(10));
        let psi_samples = psi.collect(SystemTime::now(), &snapshot);
        let kinds = |kind| psi_samples.iter().filter(|s| s.key.kind == kind).count();
        println!(
            "PSI samples: node {}, pod {}, container {}",
            kinds(MetricKind::NodePsi),
            kinds(MetricKind::PodPsi),
            kinds(MetricKind::ContainerPsi)
        );
        assert!(kinds(MetricKind::PodPsi) >= 3, "{psi_samples:?}");
        assert!(kinds(MetricKind::ContainerPsi) >= 3, "{psi_samples:?}");
        assert!(
            psi_samples
                .iter()
                .all(|s| s.value >= 0.0 && s.value <= 100.0)
        );
    }
    drop(spinner);
}

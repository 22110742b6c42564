//! Node e2e: koordlet's NRI plugin registered to a real containerd 1.7.
//!
//! Each test starts its own containerd (private `NR_ROOT` and `NR_KUBEPODS`)
//! with the `hack/node-runtime` kit and koordlet as a process, makes CRI
//! calls and reads the real cgroup files. Without root or a working kit each
//! test prints one `SKIP:` line and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use e2e::cri::{self, RuntimeClient, v1};
use e2e::node_runtime::{
    Containerd, Koordlet, Skip, container_log_lines, read_cgroup, wait_for_value, write_cgroup,
};

/// One containerd at a time: the tests restart processes and 2 cores are few.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const WAIT: Duration = Duration::from_secs(60);
const BATCH_MEMORY: i64 = 256 << 20;

struct Node {
    containerd: Containerd,
    cri: RuntimeClient,
    pods_file: PathBuf,
}

async fn node(test: &str) -> Result<Node, Skip> {
    let containerd = Containerd::start(test)?;
    let cri = cri::connect(&containerd.cri_socket())
        .await
        .map_err(|err| Skip(format!("CRI socket unusable: {err}")))?;
    let pods_file = containerd.root().join("pods.json");
    std::fs::write(
        &pods_file,
        r#"{"kind":"PodList","apiVersion":"v1","items":[]}"#,
    )
    .map_err(|err| Skip(format!("cannot write the pods file: {err}")))?;
    Ok(Node {
        containerd,
        cri,
        pods_file,
    })
}

fn start_koordlet(node: &Node) -> Koordlet {
    let kubepods = node.containerd.kubepods_flag();
    Koordlet::start(&node.containerd.nri_socket(), &node.pods_file, &[&kubepods]).unwrap()
}

/// Waits for the plugin to be registered `registrations` times in total.
fn wait_registered(koordlet: &Koordlet, registrations: f64) {
    let got = koordlet.wait_metric("koordlet_nri_registrations_total", WAIT, |v| {
        v >= registrations
    });
    assert_eq!(
        got,
        Some(registrations),
        "registrations; koordlet output:\n{}",
        koordlet.process.output()
    );
    let connected = koordlet.wait_metric("koordlet_nri_connected", WAIT, |v| v == 1.0);
    assert_eq!(connected, Some(1.0));
}

struct Pod {
    id: String,
    config: v1::PodSandboxConfig,
    cgroup_parent: String,
    log_dir: PathBuf,
}

fn uid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{:x}{:x}", std::process::id(), nanos & 0xffff_ffff)
}

async fn run_pod(
    node: &mut Node,
    name: &str,
    tier: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Pod {
    let uid = uid();
    let tier_dir = if tier.is_empty() {
        String::new()
    } else {
        format!("/{tier}")
    };
    let cgroup_parent = format!("{}{tier_dir}/pod{uid}", node.containerd.kubepods());
    let log_dir = node.containerd.root().join("logs").join(&uid);
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let config = v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: uid.clone(),
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
    let id = node
        .cri
        .run_pod_sandbox(v1::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    Pod {
        id,
        config,
        cgroup_parent,
        log_dir,
    }
}

/// The files the container's first command prints, before anything else runs in it.
const FIRST_INSTRUCTION: &str = "cat /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/cpu/cpu.cfs_quota_us \
     /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpuset/cpuset.cpus; exec sleep 3600";

async fn start_container(
    node: &mut Node,
    pod: &Pod,
    name: &str,
    shares: i64,
    quota: i64,
) -> String {
    let config = v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(v1::ImageSpec {
            image: node.containerd.var("NR_BUSYBOX_IMAGE"),
            ..Default::default()
        }),
        command: vec!["sh".into(), "-c".into(), FIRST_INSTRUCTION.into()],
        log_path: format!("{name}.log"),
        linux: Some(v1::LinuxContainerConfig {
            // What the kubelet would set from the pod's native resources.
            resources: Some(v1::LinuxContainerResources {
                cpu_shares: shares,
                cpu_period: 100_000,
                cpu_quota: quota,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = node
        .cri
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    node.cri
        .start_container(v1::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    id
}

/// The lines the container printed first (waits for all four).
fn first_lines(pod: &Pod, name: &str) -> Vec<String> {
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

fn be_annotations() -> String {
    format!(
        r#"{{"containers":{{"main":{{"requests":{{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"{BATCH_MEMORY}"}},"limits":{{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"{BATCH_MEMORY}"}}}}}}}}"#
    )
}

async fn run_be_pod(node: &mut Node) -> (Pod, String) {
    let spec = be_annotations();
    let pod = run_pod(
        node,
        "be-batch",
        "besteffort",
        &[("koordinator.sh/qosClass", "BE")],
        &[("node.koordinator.sh/extended-resource-spec", spec.as_str())],
    )
    .await;
    let id = start_container(node, &pod, "main", 2, 0).await;
    (pod, id)
}

fn cgroup(pod: &Pod, container: &str) -> String {
    format!("{}/{container}", pod.cgroup_parent)
}

async fn lock() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

macro_rules! node_or_skip {
    ($test:expr) => {
        match node($test).await {
            Ok(node) => node,
            Err(skip) => {
                skip.report($test);
                return;
            }
        }
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn be_pod_has_batch_cgroups_from_its_first_instruction() {
    let _serial = lock().await;
    let started = Instant::now();
    let mut node = node_or_skip!("nri-be");
    let koordlet = start_koordlet(&node);
    wait_registered(&koordlet, 1.0);

    let (pod, id) = run_be_pod(&mut node).await;
    // 500m request → 512 shares; 1000m limit → one period of quota; memory from batch-memory.
    let lines = first_lines(&pod, "main");
    assert_eq!(lines.len(), 4, "container output {lines:?}");
    assert_eq!(
        lines[0], "512",
        "cpu.shares seen by the container's first instruction"
    );
    assert_eq!(lines[1], "100000", "cpu.cfs_quota_us seen by the container");
    assert_eq!(
        lines[2],
        BATCH_MEMORY.to_string(),
        "memory.limit_in_bytes seen by the container"
    );
    // The host sees the same in the container's real cgroups.
    let dir = cgroup(&pod, &id);
    assert_eq!(read_cgroup("cpu", &dir, "cpu.shares").unwrap(), "512");
    assert_eq!(
        read_cgroup("cpu", &dir, "cpu.cfs_quota_us").unwrap(),
        "100000"
    );
    assert_eq!(
        read_cgroup("memory", &dir, "memory.limit_in_bytes").unwrap(),
        BATCH_MEMORY.to_string()
    );
    // Pod level (written by koordlet at RunPodSandbox): the sums over the pod's containers.
    let pod_dir = &pod.cgroup_parent;
    let pod_shares = wait_for_value(WAIT, "512", || read_cgroup("cpu", pod_dir, "cpu.shares"));
    assert_eq!(pod_shares, "512", "pod-level cpu.shares");
    assert_eq!(
        read_cgroup("cpu", pod_dir, "cpu.cfs_quota_us").unwrap(),
        "100000"
    );
    assert_eq!(
        read_cgroup("memory", pod_dir, "memory.limit_in_bytes").unwrap(),
        BATCH_MEMORY.to_string()
    );
    eprintln!(
        "containerd log lines about the plugin:\n{}",
        node.containerd
            .log()
            .lines()
            .filter(|line| line.contains("koordlet_nri"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    koordlet.stop();
    eprintln!("nri-be: passed in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lsr_pod_gets_the_scheduler_cpuset() {
    let _serial = lock().await;
    let started = Instant::now();
    let mut node = node_or_skip!("nri-lsr");
    let koordlet = start_koordlet(&node);
    wait_registered(&koordlet, 1.0);

    let pod = run_pod(
        &mut node,
        "lsr",
        "",
        &[("koordinator.sh/qosClass", "LSR")],
        &[(
            "scheduling.koordinator.sh/resource-status",
            r#"{"cpuset":"1"}"#,
        )],
    )
    .await;
    let id = start_container(&mut node, &pod, "main", 1024, 100_000).await;
    let lines = first_lines(&pod, "main");
    assert_eq!(lines.len(), 4, "container output {lines:?}");
    assert_eq!(lines[3], "1", "cpuset.cpus seen by the container");
    assert_eq!(
        lines[1], "-1",
        "cpuset-bound containers run without a CFS quota"
    );
    assert_eq!(
        read_cgroup("cpuset", &cgroup(&pod, &id), "cpuset.cpus").unwrap(),
        "1"
    );
    koordlet.stop();
    eprintln!("nri-lsr: passed in {:?}", started.elapsed());
}

/// Lines in containerd's log saying that our plugin registered.
fn registrations_in_log(containerd: &Containerd) -> usize {
    containerd
        .log()
        .lines()
        .filter(|line| line.contains("koordlet_nri") && line.to_lowercase().contains("regist"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_restart_reconnects_exactly_once() {
    let _serial = lock().await;
    let started = Instant::now();
    let mut node = node_or_skip!("nri-restart");
    let koordlet = start_koordlet(&node);
    wait_registered(&koordlet, 1.0);
    let logged_before = registrations_in_log(&node.containerd);
    assert!(
        logged_before >= 1,
        "containerd log:\n{}",
        node.containerd.log()
    );

    node.containerd.restart().unwrap();
    wait_registered(&koordlet, 2.0);
    // Give a duplicate every chance to appear (backoff cap is 1 s).
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        koordlet.metric("koordlet_nri_registrations_total"),
        Some(2.0)
    );
    assert_eq!(koordlet.metric("koordlet_nri_connections_total"), Some(2.0));
    assert_eq!(koordlet.metric("koordlet_nri_connected"), Some(1.0));
    assert_eq!(
        registrations_in_log(&node.containerd),
        2 * logged_before,
        "containerd saw exactly one more registration; log:\n{}",
        node.containerd.log()
    );

    // And the new connection works: a BE pod created after the restart is adjusted.
    node.cri = cri::connect(&node.containerd.cri_socket()).await.unwrap();
    let (pod, _) = run_be_pod(&mut node).await;
    assert_eq!(
        first_lines(&pod, "main").first().map(String::as_str),
        Some("512")
    );
    koordlet.stop();
    eprintln!("nri-restart: passed in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordlet_restart_resynchronizes_existing_containers() {
    let _serial = lock().await;
    let started = Instant::now();
    let mut node = node_or_skip!("nri-resync");
    // The container is created while koordlet is not running: the runtime
    // applies the kubelet's values only.
    let (pod, id) = run_be_pod(&mut node).await;
    let dir = cgroup(&pod, &id);
    let lines = first_lines(&pod, "main");
    assert_eq!(lines.first().map(String::as_str), Some("2"), "{lines:?}");

    let koordlet = start_koordlet(&node);
    wait_registered(&koordlet, 1.0);
    // Synchronize corrects it (the pods file is empty, so no reconciler is involved).
    let shares = wait_for_value(WAIT, "512", || read_cgroup("cpu", &dir, "cpu.shares"));
    assert_eq!(shares, "512");
    assert_eq!(
        read_cgroup("cpu", &dir, "cpu.cfs_quota_us").unwrap(),
        "100000"
    );
    koordlet.stop();

    // Drift while koordlet is away, then a restart: synchronized again.
    write_cgroup("cpu", &dir, "cpu.shares", "2").unwrap();
    let koordlet = start_koordlet(&node);
    wait_registered(&koordlet, 1.0);
    let shares = wait_for_value(WAIT, "512", || read_cgroup("cpu", &dir, "cpu.shares"));
    assert_eq!(
        shares,
        "512",
        "koordlet output:\n{}",
        koordlet.process.output()
    );
    koordlet.stop();
    eprintln!("nri-resync: passed in {:?}", started.elapsed());
}

/// A cgroup root for koordlet in which `<controller>/kubepods` and
/// `<controller>/<NR_KUBEPODS>` are this instance's private subtree (the
/// node's real `/kubepods` may belong to someone else): every hierarchy's
/// root files are linked, plus those two links.
fn cgroup_root_with_private_kubepods(node: &Node) -> PathBuf {
    let farm = node.containerd.root().join("cgroup-root");
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap() {
        let hierarchy = hierarchy.unwrap();
        let name = hierarchy.file_name();
        let real = hierarchy.path();
        let ours = farm.join(&name);
        if hierarchy.file_type().unwrap().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&real).unwrap(), &ours).unwrap();
            continue;
        }
        std::fs::create_dir_all(&ours).unwrap();
        for entry in std::fs::read_dir(&real).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                std::os::unix::fs::symlink(entry.path(), ours.join(entry.file_name())).unwrap();
            }
        }
        let private = format!("{}{}", real.display(), node.containerd.kubepods());
        std::os::unix::fs::symlink(&private, ours.join("kubepods")).unwrap();
        let name = node.containerd.kubepods().trim_start_matches('/');
        std::os::unix::fs::symlink(&private, ours.join(name)).unwrap();
    }
    farm
}

/// The pods file the kubelet would serve for the BE pod.
fn pods_file_with(pod: &Pod, container_id: &str) -> String {
    let meta = pod.config.metadata.as_ref().unwrap();
    serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "items": [{
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
                "labels": {"koordinator.sh/qosClass": "BE"},
                "annotations": {"node.koordinator.sh/extended-resource-spec": be_annotations()},
            },
            "spec": {"containers": [{
                "name": "main",
                "image": "busybox",
                "resources": {
                    "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": BATCH_MEMORY.to_string()},
                    "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": BATCH_MEMORY.to_string()},
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

/// Sum of the samples of a labelled counter.
fn counter_sum(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciler_repairs_drift_written_by_hand() {
    let _serial = lock().await;
    let started = Instant::now();
    let mut node = node_or_skip!("nri-drift");
    let cgroup_root = cgroup_root_with_private_kubepods(&node);
    let root_flag = format!("--cgroup-root-dir={}", cgroup_root.display());
    let kubepods = node.containerd.kubepods_flag();
    let koordlet = Koordlet::start(
        &node.containerd.nri_socket(),
        &node.pods_file,
        &[
            &root_flag,
            &kubepods,
            "--runtime-hooks-reconcile-interval=1s",
            "--kubelet-sync-interval=1s",
        ],
    )
    .unwrap();
    wait_registered(&koordlet, 1.0);
    let (pod, id) = run_be_pod(&mut node).await;
    let dir = cgroup(&pod, &id);
    assert_eq!(read_cgroup("cpu", &dir, "cpu.shares").unwrap(), "512");

    // The pod becomes known to koordlet (as the kubelet would report it),
    // then someone rewrites its cgroups by hand.
    std::fs::write(&node.pods_file, pods_file_with(&pod, &id)).unwrap();
    let drift_metric = "koordlet_runtime_hook_reconciler_drift_repaired_total";
    std::thread::sleep(Duration::from_secs(3));
    let repaired_before = counter_sum(&koordlet.metrics(), drift_metric);
    write_cgroup("cpu", &dir, "cpu.shares", "2").unwrap();
    write_cgroup("cpu", &dir, "cpu.cfs_quota_us", "-1").unwrap();

    let shares = wait_for_value(WAIT, "512", || read_cgroup("cpu", &dir, "cpu.shares"));
    assert_eq!(
        shares,
        "512",
        "koordlet output:\n{}",
        koordlet.process.output()
    );
    let quota = wait_for_value(WAIT, "100000", || {
        read_cgroup("cpu", &dir, "cpu.cfs_quota_us")
    });
    assert_eq!(quota, "100000");
    let repaired = counter_sum(&koordlet.metrics(), drift_metric);
    assert!(
        repaired >= repaired_before + 2.0,
        "drift repairs counted: before {repaired_before}, after {repaired}"
    );
    // No reconnect happened: the repair is the reconciler's, not a Synchronize.
    assert_eq!(
        koordlet.metric("koordlet_nri_registrations_total"),
        Some(1.0)
    );
    koordlet.stop();
    eprintln!("nri-drift: passed in {:?}", started.elapsed());
}

//! cgroup v2 and the systemd driver on a generated directory tree (this
//! kernel offers neither): the executor's writes land in the files a real
//! kubelet node would have, in v2 syntax, and the audit trail is served
//! over HTTP.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use koord_common::testing::{TempDir, http_get};
use koordlet::resourceexecutor::{
    AUDIT_PATH, ExecutorConfig, ResourceExecutor, ResourceUpdate, WriteStatus, audit_router,
};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{
    CgroupDriver, CgroupLayout, CgroupResource, CgroupValue, CgroupVersion, QosTier,
};

const POD_UID: &str = "1234-abcd";
const CONTAINER_ID: &str = "containerd://c0ffee";

// Written out by hand, as a systemd-driven kubelet names them.
const QOS: &str = "kubepods.slice/kubepods-burstable.slice";
const POD: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice";
const CONTAINER: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice/cri-containerd-c0ffee.scope";

/// Initial content of every cgroup's v2 files, as the kernel would show.
const V2_FILES: &[(&str, &str)] = &[
    ("cpu.weight", "100\n"),
    ("cpu.max", "max 100000\n"),
    ("cpu.max.burst", "0\n"),
    ("cpu.idle", "0\n"),
    (
        "cpu.stat",
        "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\nnr_periods 4\nnr_throttled 1\nthrottled_usec 70\n",
    ),
    ("cpuset.cpus", "\n"),
    ("cpuset.cpus.effective", "0-3\n"),
    ("cpuset.mems", "\n"),
    ("memory.max", "max\n"),
    ("memory.current", "4096\n"),
    ("memory.min", "0\n"),
    ("memory.high", "max\n"),
    ("pids.max", "max\n"),
    ("io.max", ""),
    ("cgroup.procs", ""),
    (
        "cpu.pressure",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    ),
];

struct Tree {
    _temp: TempDir,
    root: PathBuf,
}

fn v2_tree() -> Tree {
    let temp = TempDir::new("cgroup-tree").unwrap();
    // The same root koordlet's --cgroup-root-dir would point at.
    let root = SystemArgs::under(temp.path()).cgroup_root_dir;
    for dir in ["", "kubepods.slice", QOS, POD, CONTAINER] {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, content) in V2_FILES {
            std::fs::write(dir.join(file), content).unwrap();
        }
    }
    Tree { _temp: temp, root }
}

fn content(root: &Path, dir: &str, file: &str) -> String {
    std::fs::read_to_string(root.join(dir).join(file)).unwrap()
}

fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
}

fn update(dir: &Path, resource: CgroupResource, value: &str) -> ResourceUpdate {
    ResourceUpdate::parse(dir, resource, value, format!("tree test {resource}")).unwrap()
}

#[test]
fn systemd_v2_paths_resolve_to_the_generated_tree() {
    let tree = v2_tree();
    let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd, &tree.root);
    let container = layout
        .container_dir(QosTier::Burstable, POD_UID, CONTAINER_ID)
        .unwrap();
    assert_eq!(container, Path::new(CONTAINER));
    assert_eq!(
        layout.pod_dir(QosTier::Burstable, POD_UID).unwrap(),
        Path::new(POD)
    );
    assert_eq!(layout.qos_dir(QosTier::Burstable), Path::new(QOS));
    for resource in [
        CgroupResource::CpuShares,
        CgroupResource::CpuCfsQuota,
        CgroupResource::MemoryLimit,
        CgroupResource::CpuacctUsage,
    ] {
        let path = layout.file_path(&container, resource).unwrap();
        assert!(path.is_file(), "{} does not exist", path.display());
    }
    // Reads come back in v1 terms.
    assert_eq!(
        layout
            .read_int(&container, CgroupResource::CpuacctUsage)
            .unwrap(),
        Some(2_500_000)
    );
    assert_eq!(
        layout
            .read_int(&container, CgroupResource::CpuCfsQuota)
            .unwrap(),
        None
    );
    assert_eq!(
        layout
            .read_int(&container, CgroupResource::CpuCfsPeriod)
            .unwrap(),
        Some(100_000)
    );
    assert_eq!(
        layout
            .read_int(&container, CgroupResource::CpuShares)
            .unwrap(),
        Some(2597)
    );
    assert_eq!(
        layout
            .read_int(&container, CgroupResource::MemoryUsage)
            .unwrap(),
        Some(4096)
    );
    assert_eq!(
        layout
            .read_cpuset(&container, CgroupResource::CpusetCpusEffective)
            .unwrap()
            .to_string(),
        "0-3"
    );
    assert!(
        layout
            .read_raw(&container, CgroupResource::CpuPressure)
            .unwrap()
            .starts_with("some avg10=")
    );
}

#[test]
fn writes_land_in_v2_files_with_v2_syntax() {
    let tree = v2_tree();
    let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd, &tree.root);
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let container = layout
        .container_dir(QosTier::Burstable, POD_UID, CONTAINER_ID)
        .unwrap();
    let pod = layout.pod_dir(QosTier::Burstable, POD_UID).unwrap();
    std::fs::write(tree.root.join(CONTAINER).join("cpu.max"), "50000 100000\n").unwrap();

    let report = executor.apply_blocking(
        [
            update(&container, CgroupResource::CpuShares, "1024"),
            update(&pod, CgroupResource::CpuCfsQuota, "20000"),
            update(&container, CgroupResource::CpuCfsQuota, "-1"),
            update(&container, CgroupResource::MemoryLimit, "1073741824"),
            update(&pod, CgroupResource::MemoryLimit, "-1"),
            update(&container, CgroupResource::CpuBurst, "5000"),
            update(&container, CgroupResource::CpusetCpus, "0-1,3"),
            update(&container, CgroupResource::PidsMax, "256"),
            update(
                &container,
                CgroupResource::BlkioThrottleReadBps,
                "8:0 1048576",
            ),
            update(&container, CgroupResource::CgroupProcs, "4242"),
        ],
        at(0),
    );
    assert!(report.is_success(), "{report:?}");

    // cpu.shares 1024 is cpu.weight 39 (Kubernetes' mapping).
    assert_eq!(content(&tree.root, CONTAINER, "cpu.weight"), "39");
    // Quota keeps the present period in cpu.max; -1 is "max".
    assert_eq!(content(&tree.root, POD, "cpu.max"), "20000 100000");
    assert_eq!(content(&tree.root, CONTAINER, "cpu.max"), "max 100000");
    assert_eq!(content(&tree.root, CONTAINER, "memory.max"), "1073741824");
    // The pod's memory.max already was "max": nothing written.
    assert_eq!(content(&tree.root, POD, "memory.max"), "max\n");
    assert_eq!(content(&tree.root, CONTAINER, "cpu.max.burst"), "5000");
    assert_eq!(content(&tree.root, CONTAINER, "cpuset.cpus"), "0-1,3");
    assert_eq!(content(&tree.root, CONTAINER, "pids.max"), "256");
    assert_eq!(content(&tree.root, CONTAINER, "io.max"), "8:0 rbps=1048576");
    assert_eq!(content(&tree.root, CONTAINER, "cgroup.procs"), "4242");
    // v1 file names never appear in a v2 tree.
    assert!(!tree.root.join(CONTAINER).join("cpu.shares").exists());
    assert!(!tree.root.join(CONTAINER).join("cpu.cfs_quota_us").exists());

    // The period goes into the same file, keeping the quota.
    let report =
        executor.apply_blocking([update(&pod, CgroupResource::CpuCfsPeriod, "50000")], at(1));
    assert!(report.is_success(), "{report:?}");
    assert_eq!(content(&tree.root, POD, "cpu.max"), "20000 50000");
    assert_eq!(
        layout.read_int(&pod, CgroupResource::CpuCfsQuota).unwrap(),
        Some(20_000)
    );
    assert_eq!(
        layout.read_int(&pod, CgroupResource::CpuCfsPeriod).unwrap(),
        Some(50_000)
    );

    // Unchanged requests are skipped by the cache; cgroup.procs is always written.
    let report = executor.apply_blocking(
        [
            update(&container, CgroupResource::CpuShares, "1024"),
            update(&container, CgroupResource::CgroupProcs, "4242"),
        ],
        at(2),
    );
    let statuses: Vec<_> = report.writes.iter().map(|w| w.status.clone()).collect();
    assert_eq!(statuses, [WriteStatus::SkippedCached, WriteStatus::Written]);
}

#[test]
fn hierarchical_writes_are_ordered_on_the_tree() {
    let tree = v2_tree();
    let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd, &tree.root);
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    for dir in [QOS, POD, CONTAINER] {
        std::fs::write(tree.root.join(dir).join("cpuset.cpus"), "0-3\n").unwrap();
        std::fs::write(tree.root.join(dir).join("cpu.max"), "400000 100000\n").unwrap();
    }
    let (qos, pod, container) = (Path::new(QOS), Path::new(POD), Path::new(CONTAINER));
    // Narrow cpusets and lower quotas, submitted top-down.
    let report = executor.apply_blocking(
        [
            update(qos, CgroupResource::CpusetCpus, "0-1"),
            update(pod, CgroupResource::CpusetCpus, "0-1"),
            update(container, CgroupResource::CpusetCpus, "0"),
            update(qos, CgroupResource::CpuCfsQuota, "200000"),
            update(container, CgroupResource::CpuCfsQuota, "100000"),
        ],
        at(0),
    );
    assert!(report.is_success(), "{report:?}");
    // The audit trail lists writes newest first; reverse for execution order.
    let mut writes: Vec<_> = executor
        .recent_writes(10)
        .into_iter()
        .map(|r| (r.path, r.new_value))
        .collect();
    writes.reverse();
    let expected = [
        (CONTAINER, "cpuset.cpus", "0"),
        (CONTAINER, "cpu.max", "100000 100000"),
        (POD, "cpuset.cpus", "0-1"),
        (QOS, "cpuset.cpus", "0-1"),
        (QOS, "cpu.max", "200000 100000"),
    ]
    .map(|(dir, file, value)| {
        (
            tree.root.join(dir).join(file).display().to_string(),
            value.to_string(),
        )
    });
    assert_eq!(writes, expected);
}

#[test]
fn v1_systemd_layout_with_unified_psi_on_a_tree() {
    let temp = TempDir::new("cgroup-tree-v1").unwrap();
    let root = SystemArgs::under(temp.path()).cgroup_root_dir;
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Systemd, &root)
        .with_unified_root(root.join("unified"));
    let container = layout
        .container_dir(QosTier::BestEffort, POD_UID, "docker://feed")
        .unwrap();
    let relative = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd.slice/docker-feed.scope";
    assert_eq!(container, Path::new(relative));
    for (dir, file, value) in [
        ("cpu", "cpu.shares", "2\n"),
        ("cpu", "cpu.cfs_quota_us", "-1\n"),
        (
            "unified",
            "cpu.pressure",
            "some avg10=1.50 avg60=0.00 avg300=0.00 total=9\n",
        ),
    ] {
        let dir = root.join(dir).join(relative);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), value).unwrap();
    }
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let report = executor.apply_blocking(
        [
            update(&container, CgroupResource::CpuShares, "1024"),
            update(&container, CgroupResource::CpuCfsQuota, "50000"),
        ],
        at(0),
    );
    assert!(report.is_success(), "{report:?}");
    let cpu_dir = root.join("cpu").join(relative);
    assert_eq!(
        std::fs::read_to_string(cpu_dir.join("cpu.shares")).unwrap(),
        "1024"
    );
    assert_eq!(
        std::fs::read_to_string(cpu_dir.join("cpu.cfs_quota_us")).unwrap(),
        "50000"
    );
    assert!(
        layout
            .read_raw(&container, CgroupResource::CpuPressure)
            .unwrap()
            .starts_with("some avg10=1.50")
    );
}

#[test]
fn malformed_files_give_errors_naming_the_path() {
    let tree = v2_tree();
    let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd, &tree.root);
    std::fs::write(tree.root.join(POD).join("cpu.max"), "twenty\n").unwrap();
    std::fs::write(tree.root.join(POD).join("cpuset.cpus"), "0-\n").unwrap();
    std::fs::write(tree.root.join(POD).join("cpu.stat"), "nr_periods 1\n").unwrap();
    let pod = Path::new(POD);
    for (resource, file) in [
        (CgroupResource::CpuCfsQuota, "cpu.max"),
        (CgroupResource::CpusetCpus, "cpuset.cpus"),
        (CgroupResource::CpuacctUsage, "cpu.stat"),
    ] {
        let error = layout.read_value(pod, resource).unwrap_err();
        let path = tree.root.join(POD).join(file).display().to_string();
        assert!(error.to_string().contains(&path), "{error}");
    }
    // Writing a quota over a malformed cpu.max refuses rather than guessing the period.
    let error = layout
        .write_value(pod, CgroupResource::CpuCfsQuota, &CgroupValue::Int(20_000))
        .unwrap_err();
    assert!(error.to_string().contains("cpu.max"), "{error}");
    assert_eq!(content(&tree.root, POD, "cpu.max"), "twenty\n");
}

#[tokio::test]
async fn audit_trail_is_served_as_json() {
    let tree = v2_tree();
    let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd, &tree.root);
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let pod = Path::new(POD);
    for (n, shares) in [100, 200, 300].into_iter().enumerate() {
        let update = ResourceUpdate::new(
            pod,
            CgroupResource::CpuShares,
            CgroupValue::Int(shares),
            format!("step {n}"),
        )
        .unwrap();
        executor.apply(vec![update]).await.unwrap();
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(listener, audit_router(executor)).await.unwrap();
    });

    let response = http_get(addr, &format!("{AUDIT_PATH}?limit=2"))
        .await
        .unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    let records: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    let records = records.as_array().unwrap();
    assert_eq!(records.len(), 2);
    // Newest first; values in v2 syntax (cpu.weight), old value included.
    assert_eq!(records[0]["reason"], "step 2");
    assert_eq!(records[0]["resource"], "cpu.shares");
    assert_eq!(records[0]["newValue"], "12");
    assert_eq!(records[0]["oldValue"], "8");
    assert_eq!(records[0]["result"], "written");
    assert_eq!(
        records[0]["path"],
        tree.root.join(POD).join("cpu.weight").display().to_string()
    );
    assert!(records[0]["time"].as_str().unwrap().ends_with('Z'));

    let all = http_get(addr, AUDIT_PATH).await.unwrap();
    let all: serde_json::Value = serde_json::from_str(&all.body).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 3);

    let bad = http_get(addr, &format!("{AUDIT_PATH}?limit=many"))
        .await
        .unwrap();
    assert_eq!(bad.status, 400);
    server.abort();
}

#[test]
fn host_layout_picks_up_a_hybrid_unified_mount() {
    let temp = TempDir::new("cgroup-tree-hybrid").unwrap();
    let args = SystemArgs::under(temp.path());
    let plain = CgroupLayout::for_host(&args, CgroupVersion::V1, CgroupDriver::Cgroupfs);
    assert_eq!(plain.unified_root, None);
    let unified = args.cgroup_root_dir.join("unified");
    std::fs::create_dir_all(&unified).unwrap();
    std::fs::write(unified.join("cgroup.procs"), "").unwrap();
    let hybrid = CgroupLayout::for_host(&args, CgroupVersion::V1, CgroupDriver::Cgroupfs);
    assert_eq!(hybrid.unified_root, Some(unified));
    assert_eq!(hybrid.root, args.cgroup_root_dir);
    // On v2 the root itself is the unified hierarchy.
    let v2 = CgroupLayout::for_host(&args, CgroupVersion::V2, CgroupDriver::Systemd);
    assert_eq!(v2.unified_root, None);
}

//! Detection over generated directory trees (`SystemArgs::under`).

use std::fs;
use std::path::Path;

use koord_common::metrics::MetricsRegistry;
use koord_common::testing::TempDir;

use super::*;
use crate::system::SystemArgs;

const PSI: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n";

fn write(base: &Path, relative: &str, content: &str) {
    let path = base.join(relative);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn no_syscall() -> DetectOptions {
    DetectOptions {
        probe_core_sched_syscall: false,
        ..DetectOptions::default()
    }
}

/// Two sockets' worth of SMT pairs: cpu0/1 on core 0, cpu2/3 on core 1, one NUMA node each.
fn write_smt_topology(base: &Path) {
    write(base, "sys/devices/system/cpu/online", "0-3\n");
    for cpu in 0..4 {
        let core = cpu / 2;
        let siblings = if cpu < 2 { "0-1" } else { "2-3" };
        let dir = format!("sys/devices/system/cpu/cpu{cpu}/topology");
        write(base, &format!("{dir}/core_id"), &format!("{core}\n"));
        write(
            base,
            &format!("{dir}/physical_package_id"),
            &format!("{core}\n"),
        );
        write(
            base,
            &format!("{dir}/thread_siblings_list"),
            &format!("{siblings}\n"),
        );
    }
    write(base, "sys/devices/system/node/node0/cpulist", "0-1\n");
    write(base, "sys/devices/system/node/node1/cpulist", "2-3\n");
    write(base, "sys/devices/system/node/online", "0-1\n");
}

fn write_node_psi(base: &Path) {
    for resource in ["cpu", "memory", "io"] {
        write(base, &format!("proc/pressure/{resource}"), PSI);
    }
}

/// A systemd-driven cgroup v2 node with resctrl (CAT with 16 CLOSIDs, MBA with 8).
fn v2_systemd_resctrl_tree(base: &Path) {
    write(
        base,
        "proc/self/mountinfo",
        "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
         25 20 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n\
         40 20 0:40 / /sys/fs/resctrl rw,relatime shared:20 - resctrl resctrl rw\n",
    );
    // Since 6.x /proc/cgroups still lists controllers, all on hierarchy 0 under v2.
    write(
        base,
        "proc/cgroups",
        "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpuset\t0\t50\t1\ncpu\t0\t50\t1\n\
         io\t0\t50\t1\nmemory\t0\t50\t1\nhugetlb\t0\t50\t1\npids\t0\t50\t1\nrdma\t0\t50\t0\n",
    );
    write(
        base,
        "sys/fs/cgroup/cgroup.controllers",
        "cpuset cpu io memory hugetlb pids rdma misc\n",
    );
    for resource in ["cpu", "memory", "io"] {
        write(base, &format!("sys/fs/cgroup/{resource}.pressure"), PSI);
        write(
            base,
            &format!("sys/fs/cgroup/kubepods.slice/{resource}.pressure"),
            PSI,
        );
    }
    for file in [
        "cpu.max",
        "cpu.max.burst",
        "cpu.idle",
        "cpu.weight",
        "memory.min",
        "memory.low",
        "memory.high",
        "memory.oom.group",
    ] {
        write(base, &format!("sys/fs/cgroup/kubepods.slice/{file}"), "0\n");
    }
    write(base, "sys/fs/resctrl/info/L3/num_closids", "16\n");
    write(base, "sys/fs/resctrl/info/L3/cbm_mask", "fff\n");
    write(base, "sys/fs/resctrl/info/MB/num_closids", "8\n");
    write(base, "sys/fs/resctrl/info/MB/min_bandwidth", "10\n");
    write_node_psi(base);
    write_smt_topology(base);
    write(base, "proc/sys/kernel/osrelease", "6.6.30-test.x86_64\n");
}

#[test]
fn v2_systemd_node_with_resctrl() {
    let dir = TempDir::new("caps-v2").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let system = SystemArgs::under(dir.path());
    let caps = detect_with(&system, &no_syscall());

    assert_eq!(caps.cgroup.version, CgroupVersion::V2, "{:?}", caps.cgroup);
    assert!(caps.cgroup.unified_mount);
    assert_eq!(
        caps.cgroup.unified_mount_path.as_deref(),
        Some("/sys/fs/cgroup")
    );
    assert_eq!(caps.cgroup.driver, CgroupDriver::Systemd);
    assert!(
        caps.cgroup
            .driver_source
            .as_deref()
            .unwrap()
            .ends_with("kubepods.slice")
    );
    // rdma is listed as disabled in /proc/cgroups; misc is not listed there at all.
    assert_eq!(
        caps.cgroup.controllers,
        ["cpu", "cpuset", "hugetlb", "io", "memory", "misc", "pids"]
    );
    assert!(caps.cgroup.v1_controllers.is_empty());
    assert!(caps.cpu_burst, "{:?}", caps.reasons);
    assert!(caps.cpu_idle);
    assert!(caps.psi);
    assert!(caps.psi_cgroup);
    assert_eq!(
        caps.psi_cgroup_source.as_deref(),
        Some(system.cgroup_root_dir.to_str().unwrap())
    );
    assert!(!caps.group_identity);
    assert!(caps.reasons["groupIdentity"].contains("cpu.bvt_warp_ns"));
    assert_eq!(
        caps.resctrl,
        ResctrlCapabilities {
            supported: true,
            cat: true,
            mba: true,
            closids: Some(8),
            cbm_mask: Some("fff".to_string()),
        }
    );
    assert!(caps.smt);
    assert_eq!(caps.cpus, 4);
    assert_eq!(caps.numa_nodes, 2);
    assert_eq!(
        caps.cpu_topology[3],
        CpuTopology {
            cpu: 3,
            core: Some(1),
            socket: Some(1),
            node: Some(1)
        }
    );
    assert_eq!(caps.kernel, "6.6.30-test.x86_64");
    let memory = &caps.memory_qos;
    assert!(memory.min && memory.low && memory.high && memory.oom_group);
    assert!(!memory.wmark_ratio && !memory.priority);
    // Core scheduling was not probed: false, with a reason saying so.
    assert!(!caps.core_sched);
    assert!(caps.reasons["coreSched"].contains("not run"));
    for key in [
        "cpuBurst",
        "cpuIdle",
        "psi",
        "psiCgroup",
        "resctrl",
        "smt",
        "cpus",
        "kernel",
    ] {
        assert!(!caps.reasons.contains_key(key), "{key}: {:?}", caps.reasons);
    }
}

#[test]
fn kubelet_config_decides_the_driver() {
    let dir = TempDir::new("caps-kubelet").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let system = SystemArgs::under(dir.path());
    let config = dir.path().join("kubelet.yaml");
    let with_config = |text: &str| {
        fs::write(&config, text).unwrap();
        let options = DetectOptions {
            kubelet_config: Some(config.clone()),
            probe_core_sched_syscall: false,
        };
        detect_with(&system, &options).cgroup
    };
    // The kubelet's word wins over the directory name.
    let cgroup = with_config("kind: KubeletConfiguration\ncgroupDriver: cgroupfs\n");
    assert_eq!(cgroup.driver, CgroupDriver::Cgroupfs);
    assert!(cgroup.driver_source.unwrap().contains("kubelet.yaml"));
    let cgroup = with_config("kind: KubeletConfiguration\n");
    assert_eq!(cgroup.driver, CgroupDriver::Cgroupfs);
    assert!(cgroup.driver_source.unwrap().contains("kubelet default"));
    let caps = {
        fs::write(&config, "cgroupDriver: docker\n").unwrap();
        detect_with(
            &system,
            &DetectOptions {
                kubelet_config: Some(config.clone()),
                probe_core_sched_syscall: false,
            },
        )
    };
    assert_eq!(caps.cgroup.driver, CgroupDriver::Unknown);
    assert!(caps.reasons["cgroup.driver"].contains("docker"));
}

/// The shape of this project's CI machine, plus a cgroupfs kubepods tree and
/// Anolis interface files.
fn v1_anolis_tree(base: &Path, unified_controllers: &str) {
    write(
        base,
        "proc/self/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
         32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
         34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n\
         35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
         38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n\
         40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n\
         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    write(
        base,
        "proc/cgroups",
        "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpuset\t3\t1\t1\ncpu\t1\t1\t1\n\
         cpuacct\t1\t1\t1\nblkio\t7\t1\t1\nmemory\t4\t1\t1\nhugetlb\t0\t1\t1\nnet_cls\t0\t1\t1\n",
    );
    write(
        base,
        "sys/fs/cgroup/unified/cgroup.controllers",
        unified_controllers,
    );
    for file in [
        "tasks",
        "cpu.cfs_burst_us",
        "cpu.bvt_warp_ns",
        "cpu.pressure",
        "memory.pressure",
        "io.pressure",
    ] {
        let content = if file.ends_with("pressure") {
            PSI
        } else {
            "0\n"
        };
        write(base, &format!("sys/fs/cgroup/cpu,cpuacct/{file}"), content);
    }
    fs::create_dir_all(base.join("sys/fs/cgroup/cpu,cpuacct/kubepods/besteffort")).unwrap();
    for file in [
        "tasks",
        "memory.wmark_ratio",
        "memory.wmark_scale_factor",
        "memory.wmark_min_adj",
    ] {
        write(base, &format!("sys/fs/cgroup/memory/{file}"), "0\n");
    }
    write(base, "sys/fs/cgroup/memory/kubepods/memory.min", "0\n");
    write(base, "sys/fs/cgroup/cpuset/tasks", "");
    write(base, "sys/fs/cgroup/blkio/tasks", "");
    write(base, "proc/sys/kernel/sched_core", "1\n");
    write(
        base,
        "proc/filesystems",
        "nodev\tsysfs\nnodev\tcgroup\nnodev\tcgroup2\n",
    );
    write_node_psi(base);
    write(base, "sys/devices/system/cpu/online", "0\n");
    write(base, "sys/devices/system/cpu/cpu0/topology/core_id", "0\n");
    write(
        base,
        "sys/devices/system/cpu/cpu0/topology/physical_package_id",
        "-1\n",
    );
    write(
        base,
        "sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
        "0\n",
    );
    write(
        base,
        "proc/sys/kernel/osrelease",
        "5.10.134-13.an8.x86_64\n",
    );
}

#[test]
fn v1_anolis_node_with_empty_unified_mount() {
    let dir = TempDir::new("caps-v1").unwrap();
    v1_anolis_tree(dir.path(), "hugetlb\n");
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());

    assert_eq!(
        caps.cgroup.version,
        CgroupVersion::V1,
        "{}",
        caps.cgroup.version_reason
    );
    assert!(caps.cgroup.unified_mount);
    assert_eq!(
        caps.cgroup.unified_mount_path.as_deref(),
        Some("/sys/fs/cgroup/unified")
    );
    assert_eq!(caps.cgroup.v2_controllers, ["hugetlb"]);
    assert_eq!(
        caps.cgroup.v1_controllers,
        ["blkio", "cpu", "cpuacct", "cpuset", "memory"]
    );
    assert_eq!(
        caps.cgroup.controllers,
        ["blkio", "cpu", "cpuacct", "cpuset", "hugetlb", "memory"]
    );
    assert_eq!(caps.cgroup.driver, CgroupDriver::Cgroupfs);
    assert!(caps.cpu_burst);
    assert!(!caps.cpu_idle);
    assert!(caps.reasons["cpuIdle"].contains("cpu.idle"));
    assert!(caps.group_identity);
    assert!(
        caps.core_sched,
        "the Anolis sysctl counts: {:?}",
        caps.reasons
    );
    // The unified mount has no pressure files; the Anolis cpuacct ones count.
    assert!(caps.psi_cgroup);
    assert!(caps.psi_cgroup_source.unwrap().ends_with("cpu,cpuacct"));
    let memory = &caps.memory_qos;
    assert!(memory.min && memory.wmark_ratio && memory.wmark_scale_factor && memory.wmark_min_adj);
    assert!(!memory.low && !memory.high);
    assert!(caps.reasons["memoryQos"].contains("memory.low"));
    assert!(!caps.resctrl.supported);
    assert_eq!(caps.resctrl.closids, None);
    assert!(
        caps.reasons["resctrl"].contains("no resctrl filesystem"),
        "{:?}",
        caps.reasons
    );
    assert!(!caps.smt);
    assert_eq!(caps.cpus, 1);
    assert_eq!(caps.cpu_topology[0].socket, None, "-1 means unknown");
    assert_eq!(caps.numa_nodes, 0);
    assert!(caps.reasons.contains_key("numaNodes"));
}

#[test]
fn v1_with_memory_on_the_unified_mount_is_hybrid() {
    let dir = TempDir::new("caps-hybrid").unwrap();
    // memory is on v2 here only in the sense of the unified mount's list; the
    // v1 memory mount is removed so the kernel's view stays consistent.
    v1_anolis_tree(dir.path(), "memory hugetlb\n");
    let mountinfo = dir.path().join("proc/self/mountinfo");
    let text = fs::read_to_string(&mountinfo).unwrap();
    let text: String = text
        .lines()
        .filter(|line| !line.ends_with("rw,memory"))
        .map(|line| format!("{line}\n"))
        .collect();
    fs::write(&mountinfo, text).unwrap();
    write(
        dir.path(),
        "sys/fs/cgroup/unified/kubepods/memory.high",
        "max\n",
    );

    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    assert_eq!(caps.cgroup.version, CgroupVersion::Hybrid);
    assert!(
        caps.cgroup
            .version_reason
            .contains("memory on the cgroup2 mount")
    );
    // Memory knobs now come from the unified hierarchy.
    assert!(caps.memory_qos.high);
    assert!(!caps.memory_qos.wmark_ratio);
}

#[test]
fn layout_is_read_from_the_cgroup_root_without_a_mount_table() {
    let dir = TempDir::new("caps-nomounts").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    fs::remove_file(dir.path().join("proc/self/mountinfo")).unwrap();
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    assert_eq!(caps.cgroup.version, CgroupVersion::V2);
    assert!(caps.reasons["cgroup.version"].contains("layout read from the cgroup root"));
    assert!(caps.cpu_burst);

    let dir = TempDir::new("caps-nomounts-v1").unwrap();
    v1_anolis_tree(dir.path(), "hugetlb\n");
    fs::remove_file(dir.path().join("proc/self/mountinfo")).unwrap();
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    assert_eq!(caps.cgroup.version, CgroupVersion::V1);
    assert_eq!(
        caps.cgroup.v1_controllers,
        ["blkio", "cpu", "cpuacct", "cpuset", "memory"]
    );
    assert_eq!(caps.cgroup.driver, CgroupDriver::Cgroupfs);
}

#[test]
fn an_empty_tree_reports_unknowns_with_reasons() {
    let dir = TempDir::new("caps-empty").unwrap();
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    assert_eq!(caps.cgroup.version, CgroupVersion::Unknown);
    assert_eq!(caps.cgroup.driver, CgroupDriver::Unknown);
    assert!(!caps.cpu_burst && !caps.psi && !caps.resctrl.supported && !caps.smt);
    assert_eq!((caps.cpus, caps.numa_nodes), (0, 0));
    assert_eq!(caps.kernel, "unknown");
    for key in [
        "cgroup.version",
        "cgroup.driver",
        "cpuBurst",
        "cpuIdle",
        "psi",
        "psiCgroup",
        "coreSched",
        "groupIdentity",
        "resctrl",
        "smt",
        "numaNodes",
        "cpus",
        "kernel",
        "memoryQos",
    ] {
        assert!(caps.reasons.contains_key(key), "{key}: {:?}", caps.reasons);
    }
}

#[test]
fn malformed_files_never_panic_and_are_explained() {
    let dir = TempDir::new("caps-garbage").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let base = dir.path();
    write(base, "proc/self/mountinfo", "garbage without separator\n");
    write(base, "proc/mounts", "cgroup2\n");
    write(base, "proc/cgroups", "cpu one two three\n");
    write(base, "proc/pressure/memory", "some avg10=abc\n");
    write(base, "sys/fs/resctrl/info/L3/num_closids", "0\n");
    write(base, "sys/fs/resctrl/info/MB/num_closids", "many\n");
    write(base, "sys/devices/system/cpu/online", "3-0\n");
    write(base, "sys/devices/system/node/node1/cpulist", "x\n");
    write(base, "proc/sys/kernel/osrelease", "\n");

    let caps = detect_with(&SystemArgs::under(base), &no_syscall());
    // The mount table is unusable, so the layout comes from the root directory.
    assert_eq!(caps.cgroup.version, CgroupVersion::V2);
    assert!(caps.reasons["cgroup.version"].contains("mountinfo"));
    assert!(caps.reasons["cgroup.controllers"].contains("/proc/cgroups"));
    assert!(!caps.psi);
    assert!(caps.reasons["psi"].contains("memory"));
    assert!(!caps.resctrl.supported && !caps.resctrl.cat && !caps.resctrl.mba);
    assert!(caps.reasons["resctrl.cat"].contains("num_closids"));
    assert!(caps.reasons["resctrl.mba"].contains("num_closids"));
    assert_eq!(caps.cpus, 0);
    assert!(caps.reasons["cpus"].contains("start is after its end"));
    assert!(caps.reasons["cpuTopology"].contains("node1"));
    assert_eq!(caps.kernel, "unknown");
    assert!(caps.reasons["kernel"].contains("osrelease"));
}

#[test]
fn json_has_the_documented_keys_and_round_trips() {
    let dir = TempDir::new("caps-json").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let text = render(&caps, OutputFormat::Json).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["cgroup"]["version"], "v2");
    assert_eq!(json["cgroup"]["driver"], "systemd");
    assert!(
        json["cgroup"]["controllers"]
            .as_array()
            .unwrap()
            .contains(&"cpu".into())
    );
    assert_eq!(json["cgroup"]["unifiedMount"], true);
    for key in ["cpuBurst", "cpuIdle", "psi", "psiCgroup", "smt"] {
        assert_eq!(json[key], true, "{key}");
    }
    for key in ["coreSched", "groupIdentity"] {
        assert_eq!(json[key], false, "{key}");
    }
    assert_eq!(json["resctrl"]["supported"], true);
    assert_eq!(json["resctrl"]["cat"], true);
    assert_eq!(json["resctrl"]["mba"], true);
    assert_eq!(json["resctrl"]["closids"], 8);
    assert_eq!(json["numaNodes"], 2);
    assert_eq!(json["cpus"], 4);
    assert_eq!(json["kernel"], "6.6.30-test.x86_64");
    assert_eq!(json["memoryQos"]["min"], true);
    assert_eq!(json["cpuTopology"][2]["core"], 1);
    let back: NodeCapabilities = serde_json::from_str(&text).unwrap();
    assert_eq!(back, caps);
}

#[test]
fn table_rows_use_the_json_paths() {
    let dir = TempDir::new("caps-table").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let table = render(&caps, OutputFormat::Table).unwrap();
    let row = |key: &str| -> Vec<String> {
        table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} row in\n{table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert!(table.starts_with("CAPABILITY"));
    assert_eq!(row("cgroup.version")[1], "v2");
    assert_eq!(row("cgroup.driver")[1], "systemd");
    assert_eq!(row("cpuBurst")[1], "true");
    assert_eq!(row("coreSched")[1], "false");
    assert!(
        row("coreSched").len() > 2,
        "a false capability shows its reason"
    );
    assert_eq!(row("resctrl.closids")[1], "8");
    assert_eq!(row("cpus")[1], "4");
    assert_eq!(
        row("cpuTopology")[1..5],
        ["cpus=4", "sockets=2", "cores=2", "nodes=2"]
    );
    assert_eq!(row("kernel")[1], "6.6.30-test.x86_64");
    assert_eq!(row("memoryQos")[1], "min,low,high,oomGroup");
    assert_eq!(row("memoryQos")[2], "no", "the missing files follow");
}

#[test]
fn labels_annotation_and_patch() {
    let dir = TempDir::new("caps-labels").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let (labels, annotations) = node_labels_and_annotations(&caps);
    let label = |name: &str| labels[&format!("node.koordinator.sh/capability-{name}")].as_str();
    assert_eq!(label("cgroup-version"), "v2");
    assert_eq!(label("cgroup-driver"), "systemd");
    assert_eq!(label("cpu-burst"), "true");
    assert_eq!(label("core-sched"), "false");
    assert_eq!(label("resctrl-mba"), "true");
    assert_eq!(label("numa-nodes"), "2");
    assert_eq!(label("kernel"), "6.6.30-test.x86_64");
    assert_eq!(label("memory-wmark"), "false");
    for (key, value) in &labels {
        let (prefix, name) = key.split_once('/').unwrap();
        assert_eq!(prefix, apis::extension::constants::NODE_DOMAIN_PREFIX);
        assert!(name.len() <= 63 && value.len() <= 63, "{key}={value}");
        assert!(
            value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
            "{key}={value}"
        );
    }
    let matrix: NodeCapabilities =
        serde_json::from_str(&annotations["node.koordinator.sh/capabilities"]).unwrap();
    assert_eq!(matrix, caps);

    let patch = node_patch(&caps);
    assert_eq!(
        patch["metadata"]["labels"]["node.koordinator.sh/capability-psi"],
        "true"
    );
    assert!(patch["metadata"]["annotations"]["node.koordinator.sh/capabilities"].is_string());
    assert_eq!(
        patch.as_object().unwrap().len(),
        1,
        "only metadata is patched"
    );
}

#[test]
fn label_values_are_sanitised() {
    assert_eq!(label_value("6.1.0+"), "6.1.0");
    assert_eq!(label_value("5.4.0 custom/build"), "5.4.0_custom_build");
    assert_eq!(label_value("---"), "unknown");
    assert_eq!(label_value(&"a".repeat(80)).len(), 63);
}

#[test]
fn capability_gauges() {
    let dir = TempDir::new("caps-metrics").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let mut caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let metrics = MetricsRegistry::new("koordlet");
    let gauges = CapabilityMetrics::register(&metrics);
    gauges.update(&caps);
    let body = metrics.encode().unwrap();
    assert!(
        body.contains("# TYPE koordlet_node_capability gauge"),
        "{body}"
    );
    assert!(
        body.contains("koordlet_node_capability{capability=\"cpu_burst\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("koordlet_node_capability{capability=\"core_sched\"} 0"),
        "{body}"
    );
    assert!(
        body.contains("koordlet_node_capability{capability=\"resctrl_mba\"} 1"),
        "{body}"
    );
    caps.cpu_burst = false;
    gauges.update(&caps);
    let body = metrics.encode().unwrap();
    assert!(
        body.contains("koordlet_node_capability{capability=\"cpu_burst\"} 0"),
        "{body}"
    );
    assert_eq!(CAPABILITY_METRIC, "koordlet_node_capability");
}

fn nri_probe(socket: &str, present: bool, accepting: bool) -> crate::runtimehooks::nri::NriProbe {
    crate::runtimehooks::nri::NriProbe {
        socket: socket.into(),
        socket_present: present,
        accepts_connections: accepting,
        detail: format!("probe detail for {socket}"),
    }
}

#[test]
fn report_json_adds_the_nri_entry_beside_the_matrix() {
    let dir = TempDir::new("caps-nri-json").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let report = CapabilitiesReport::new(
        caps.clone(),
        nri_probe("/run/x/nri.sock", true, false),
        true,
    );
    let text = render_report(&report, OutputFormat::Json).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["nri"]["socket"], "/run/x/nri.sock");
    assert_eq!(json["nri"]["present"], true);
    assert_eq!(json["nri"]["accepting"], false);
    assert_eq!(json["nri"]["pluginEnabled"], true);
    assert_eq!(json["reasons"]["nri"], "probe detail for /run/x/nri.sock");
    // The matrix keys stay at the top level.
    assert_eq!(json["cgroup"]["version"], "v2");
    assert_eq!(json["cpus"], 4);
    let back: CapabilitiesReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, report);
    // The matrix alone (published on the Node) has no NRI entry.
    let matrix: serde_json::Value =
        serde_json::from_str(&render(&caps, OutputFormat::Json).unwrap()).unwrap();
    assert!(matrix.get("nri").is_none());
    assert!(matrix["reasons"].get("nri").is_none());
}

#[test]
fn an_accepting_nri_socket_has_no_reason() {
    let dir = TempDir::new("caps-nri-ok").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let report = CapabilitiesReport::new(caps, nri_probe("/run/nri.sock", true, true), false);
    assert!(report.nri.present && report.nri.accepting);
    assert!(!report.nri.plugin_enabled);
    assert!(!report.node.reasons.contains_key(NRI_KEY));
}

#[test]
fn report_table_has_nri_rows() {
    let dir = TempDir::new("caps-nri-table").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let report =
        CapabilitiesReport::new(caps, nri_probe("/var/run/nri/nri.sock", false, false), true);
    let table = render_report(&report, OutputFormat::Table).unwrap();
    let row = |key: &str| -> Vec<String> {
        table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no {key} row in\n{table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("nri.socket")[1], "/var/run/nri/nri.sock");
    assert_eq!(row("nri.present")[1], "false");
    assert_eq!(row("nri.accepting")[1], "false");
    assert_eq!(
        row("nri.accepting")[2..].join(" "),
        "probe detail for /var/run/nri/nri.sock"
    );
    assert_eq!(row("nri.pluginEnabled")[1], "true");
    // Every matrix row is still there.
    assert_eq!(row("cgroup.version")[1], "v2");
}

#[test]
fn detect_report_probes_the_socket_even_with_the_plugin_disabled() {
    let dir = TempDir::new("caps-nri-probe").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let socket = dir.path().join("nri.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let nri = <crate::runtimehooks::nri::NriArgs as clap::FromArgMatches>::from_arg_matches(
        &<crate::runtimehooks::nri::NriArgs as clap::Args>::augment_args(clap::Command::new("t"))
            .get_matches_from([
                "t".to_string(),
                format!("--runtime-hooks-nri-socket-path={}", socket.display()),
                "--enable-nri-runtime-hook=false".to_string(),
            ]),
    )
    .unwrap();
    let report = detect_report(&SystemArgs::under(dir.path()), &no_syscall(), &nri);
    assert_eq!(report.nri.socket, socket.display().to_string());
    assert!(report.nri.present);
    assert!(report.nri.accepting);
    assert!(!report.nri.plugin_enabled);
}

#[test]
fn report_shows_the_cpu_reaction_mechanism_and_why() {
    use crate::qosmanager::reaction::{ReactionCapability, ReactionMode, choose_mechanism};
    let dir = TempDir::new("caps-reaction").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let refused: Result<(), String> = Err("Invalid argument (os error 22)".into());
    let reaction: ReactionCapability = choose_mechanism(
        ReactionMode::Auto,
        Some(&refused),
        &Ok(()),
        std::time::Duration::from_millis(20),
    );
    let plain = CapabilitiesReport::new(caps, nri_probe("/run/nri.sock", true, true), false);
    // Without a probe there is no row and no JSON key.
    assert!(
        !render_report(&plain, OutputFormat::Table)
            .unwrap()
            .contains("cpuReaction")
    );
    let report = plain.with_cpu_reaction(reaction);
    let table = render_report(&report, OutputFormat::Table).unwrap();
    let row = table
        .lines()
        .find(|line| line.starts_with("cpuReaction "))
        .unwrap_or_else(|| panic!("no cpuReaction row in\n{table}"));
    assert!(row.contains(" cpuacct "), "{row}");
    assert!(
        row.contains("PSI trigger refused: Invalid argument"),
        "{row}"
    );
    let text = render_report(&report, OutputFormat::Json).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["cpuReaction"]["mechanism"], "cpuacct");
    assert_eq!(json["cpuReaction"]["psiTrigger"], false);
    let back: CapabilitiesReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, report);
}

#[test]
fn report_shows_the_network_qos_row_and_why_not() {
    use crate::qosmanager::netqos::capability::{NETWORK_QOS_KEY, NetQosCapability};
    let dir = TempDir::new("caps-netqos").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let plain = CapabilitiesReport::new(caps, nri_probe("/run/nri.sock", true, true), false);
    assert!(
        !render_report(&plain, OutputFormat::Table)
            .unwrap()
            .contains("networkQos")
    );
    let missing = NetQosCapability {
        supported: false,
        netlink: true,
        htb: Some(true),
        u32_classifier: Some(false),
        cgroup_classifier: Some(false),
        detail: "u32 classifier (cls_u32) is neither built in, loaded nor installed as a module"
            .to_string(),
    };
    let report = plain.with_network_qos(missing);
    let table = render_report(&report, OutputFormat::Table).unwrap();
    let row = table
        .lines()
        .find(|line| line.starts_with("networkQos "))
        .unwrap_or_else(|| panic!("no networkQos row in\n{table}"));
    assert!(row.contains(" false ") && row.contains("cls_u32"), "{row}");
    assert!(report.node.reasons[NETWORK_QOS_KEY].contains("cls_u32"));
    let text = render_report(&report, OutputFormat::Json).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["networkQos"]["u32Classifier"], false);
    let back: CapabilitiesReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, report);
}

#[test]
fn report_shows_what_host_applications_get() {
    use crate::runtimehooks::hostapp::HOST_APPLICATIONS_KEY;
    let row_of = |report: &CapabilitiesReport| {
        let table = render_report(report, OutputFormat::Table).unwrap();
        table
            .lines()
            .find(|line| line.starts_with("hostApplications "))
            .unwrap_or_else(|| panic!("no hostApplications row in\n{table}"))
            .to_string()
    };
    // cgroup v2 without Anolis: cpuset yes, bvt no, with the probe's reason.
    let dir = TempDir::new("caps-hostapps-v2").unwrap();
    v2_systemd_resctrl_tree(dir.path());
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let gi_reason = caps.reasons["groupIdentity"].clone();
    let report = CapabilitiesReport::new(caps, nri_probe("/run/nri.sock", true, true), false)
        .with_host_applications();
    let host_apps = report.host_applications.clone().unwrap();
    assert!(host_apps.cpuset && !host_apps.group_identity);
    let row = row_of(&report);
    assert!(row.contains(" cpuset.cpus "), "{row}");
    assert!(row.contains("cpu.bvt_warp_ns not enforced"), "{row}");
    assert!(row.contains(&gi_reason), "{row} lacks {gi_reason}");
    assert!(report.node.reasons[HOST_APPLICATIONS_KEY].contains("cpu.bvt_warp_ns"));
    let text = render_report(&report, OutputFormat::Json).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["hostApplications"]["cpuset"], true);
    assert_eq!(json["hostApplications"]["groupIdentity"], false);
    let back: CapabilitiesReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, report);

    // Anolis v1 with bvt: both knobs, no reason recorded.
    let dir = TempDir::new("caps-hostapps-anolis").unwrap();
    v1_anolis_tree(dir.path(), "");
    let caps = detect_with(&SystemArgs::under(dir.path()), &no_syscall());
    let report = CapabilitiesReport::new(caps, nri_probe("/run/nri.sock", true, true), false)
        .with_host_applications();
    let row = row_of(&report);
    assert!(row.contains(" cpuset.cpus,cpu.bvt_warp_ns "), "{row}");
    assert!(!report.node.reasons.contains_key(HOST_APPLICATIONS_KEY));

    // No cpuset controller and no bvt: nothing is enforceable.
    let mut caps = report.node.clone();
    caps.cgroup.controllers.retain(|c| c != "cpuset");
    caps.group_identity = false;
    let host_apps = crate::runtimehooks::hostapp::capability(&caps);
    assert_eq!(host_apps.knobs(), "none");
    assert!(
        host_apps.detail.contains("no cpuset controller"),
        "{}",
        host_apps.detail
    );
}

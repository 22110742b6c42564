//! The I/O side of detection: reads files below the configured roots, feeds
//! them to the parsers and records a reason for everything that is missing.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::parse::{
    self, CgroupFs, CgroupMount, KubeletCgroupDriver, filesystems_include, parse_cbm_mask,
    parse_controller_list, parse_num_closids, parse_osrelease, parse_proc_cgroups, validate_psi,
};
use super::{
    CgroupCapabilities, CgroupDriver, CgroupVersion, CpuTopology, MemoryQosCapabilities,
    NodeCapabilities, ResctrlCapabilities,
};
use crate::system::SystemArgs;

/// Controllers koordlet writes resource settings to; where these live decides
/// the reported cgroup version (`blkio` is v1's name for `io`).
pub const CGROUP_RESOURCE_CONTROLLERS: [&str; 7] =
    ["cpu", "cpuacct", "cpuset", "memory", "blkio", "io", "pids"];

/// Where kubelet-style layouts are mounted on a host; mount points below it
/// are re-rooted onto `--cgroup-root-dir`.
const DEFAULT_CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// v1 controllers the kernel may offer, used when `/proc/cgroups` is unreadable.
const KNOWN_V1_CONTROLLERS: [&str; 15] = [
    "blkio",
    "cpu",
    "cpuacct",
    "cpuset",
    "debug",
    "devices",
    "freezer",
    "hugetlb",
    "memory",
    "misc",
    "net_cls",
    "net_prio",
    "perf_event",
    "pids",
    "rdma",
];

/// Knobs of a detection run beyond the filesystem roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectOptions {
    /// KubeletConfiguration file to read `cgroupDriver` from.
    pub kubelet_config: Option<PathBuf>,
    /// Ask the running kernel for core scheduling with `prctl`. Tests over a
    /// generated tree turn this off, since the syscall ignores the roots.
    pub probe_core_sched_syscall: bool,
}

impl Default for DetectOptions {
    fn default() -> Self {
        Self {
            kubelet_config: None,
            probe_core_sched_syscall: true,
        }
    }
}

/// Detects the capabilities of the node whose roots `system` names.
pub fn detect(system: &SystemArgs) -> NodeCapabilities {
    detect_with(system, &DetectOptions::default())
}

/// [`detect`] with explicit options.
pub fn detect_with(system: &SystemArgs, options: &DetectOptions) -> NodeCapabilities {
    let mut reasons = Reasons::default();
    let layout = CgroupLayout::probe(system, &mut reasons);
    let cgroup = cgroup_capabilities(&layout, options, &mut reasons);

    let cpu_dir = layout.controller_dir("cpu");
    let cpu_burst = probe_cpu_burst(cpu_dir.as_ref(), &mut reasons);
    let cpu_idle = probe_cgroup_file(cpu_dir.as_ref(), "cpu.idle", "cpuIdle", "cpu", &mut reasons);
    let group_identity = probe_cgroup_file(
        cpu_dir.as_ref(),
        "cpu.bvt_warp_ns",
        "groupIdentity",
        "cpu",
        &mut reasons,
    );
    if !group_identity {
        reasons.append(
            "groupIdentity",
            "it needs an Anolis / Alibaba Cloud Linux kernel",
        );
    }
    let psi = probe_node_psi(system, &mut reasons);
    let psi_cgroup_source = probe_cgroup_psi(&layout, &mut reasons);
    let core_sched = probe_core_sched(system, options, &mut reasons);
    let resctrl = probe_resctrl(system, &mut reasons);
    let topology = probe_topology(system, &mut reasons);
    let kernel = probe_kernel(system, &mut reasons);
    let memory_qos = probe_memory_qos(layout.controller_dir("memory").as_ref(), &mut reasons);

    NodeCapabilities {
        cgroup,
        cpu_burst,
        cpu_idle,
        psi,
        psi_cgroup: psi_cgroup_source.is_some(),
        psi_cgroup_source,
        core_sched,
        group_identity,
        resctrl,
        smt: topology.smt,
        numa_nodes: topology.numa_nodes,
        cpus: topology.cpus,
        kernel,
        memory_qos,
        cpu_topology: topology.cpus_detail,
        reasons: reasons.0,
    }
}

/// Reason sentences keyed by JSON path.
#[derive(Default)]
struct Reasons(BTreeMap<String, String>);

impl Reasons {
    fn set(&mut self, key: &str, reason: impl Into<String>) {
        self.0.insert(key.to_string(), reason.into());
    }

    fn append(&mut self, key: &str, reason: &str) {
        match self.0.get_mut(key) {
            Some(existing) => {
                existing.push_str("; ");
                existing.push_str(reason);
            }
            None => self.set(key, reason),
        }
    }
}

/// Reads a whole file; errors name the path.
fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|err| describe_read_error(path, &err))
}

/// Reads and parses a file; parse errors are prefixed with the path.
fn read_parsed<T, E: std::fmt::Display>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Result<T, String> {
    let text = read(path)?;
    parse(&text).map_err(|err| format!("{}: {err}", path.display()))
}

fn describe_read_error(path: &Path, err: &io::Error) -> String {
    if err.kind() == io::ErrorKind::NotFound {
        format!("no {}", path.display())
    } else {
        format!("cannot read {}: {err}", path.display())
    }
}

/// A controller's hierarchy directory on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HierarchyDir {
    path: PathBuf,
    fs: CgroupFs,
}

/// Which hierarchies exist and which controllers each carries.
#[derive(Debug, Default)]
struct CgroupLayout {
    /// v1 controller → its hierarchy directory (under the cgroup root).
    v1: BTreeMap<String, PathBuf>,
    /// The cgroup2 mount, as a local directory and as the kernel names it.
    v2: Option<(PathBuf, String)>,
    v2_controllers: BTreeSet<String>,
    /// The cgroup root itself is the cgroup2 mount (pure v2).
    root_is_v2: bool,
    /// Controllers `/proc/cgroups` reports as disabled.
    disabled: BTreeSet<String>,
}

impl CgroupLayout {
    fn probe(system: &SystemArgs, reasons: &mut Reasons) -> Self {
        let proc_cgroups_path = system.proc_root_dir.join("cgroups");
        let subsystems = match read_parsed(&proc_cgroups_path, parse_proc_cgroups) {
            Ok(rows) => Some(rows),
            Err(err) => {
                reasons.append(
                    "cgroup.controllers",
                    &format!("{err}; enabled state not checked"),
                );
                None
            }
        };
        let known: BTreeSet<String> = match &subsystems {
            Some(rows) if !rows.is_empty() => rows.iter().map(|row| row.name.clone()).collect(),
            _ => KNOWN_V1_CONTROLLERS
                .iter()
                .map(|name| name.to_string())
                .collect(),
        };
        let disabled = subsystems
            .iter()
            .flatten()
            .filter(|row| !row.enabled)
            .map(|row| row.name.clone())
            .collect();

        let mut layout = Self {
            disabled,
            ..Self::default()
        };
        let cgroup_root = &system.cgroup_root_dir;
        match read_cgroup_mounts(system) {
            Ok(mounts) if !mounts.is_empty() => {
                for mount in &mounts {
                    layout.add_mount(mount, cgroup_root, &known);
                }
            }
            Ok(_) => {
                reasons.append(
                    "cgroup.version",
                    "the mount table lists no cgroup filesystem; layout read from the cgroup root",
                );
                layout.scan_root(cgroup_root, &known);
            }
            Err(err) => {
                reasons.append(
                    "cgroup.version",
                    &format!("{err}; layout read from the cgroup root"),
                );
                layout.scan_root(cgroup_root, &known);
            }
        }
        if let Some((dir, _)) = &layout.v2 {
            let path = dir.join("cgroup.controllers");
            match read_parsed(&path, parse_controller_list) {
                Ok(controllers) => layout.v2_controllers = controllers,
                Err(err) => reasons.append("cgroup.controllers", &err),
            }
        }
        layout
    }

    fn add_mount(&mut self, mount: &CgroupMount, cgroup_root: &Path, known: &BTreeSet<String>) {
        let local = local_mount_path(Path::new(&mount.mount_point), cgroup_root);
        match mount.fs {
            CgroupFs::V1 => {
                for option in &mount.options {
                    if known.contains(option) {
                        // A hierarchy bind-mounted twice keeps its first mount point.
                        self.v1
                            .entry(option.clone())
                            .or_insert_with(|| local.clone());
                    }
                }
            }
            CgroupFs::V2 => {
                let at_root = same_dir(&local, cgroup_root);
                // Prefer the mount at the cgroup root when several are listed.
                if self.v2.is_none() || (at_root && !self.root_is_v2) {
                    self.v2 = Some((local, mount.mount_point.clone()));
                    self.root_is_v2 = at_root;
                }
            }
        }
    }

    /// Without a mount table: `<root>/cgroup.controllers` means v2 at the
    /// root; a subdirectory with `tasks` is a v1 hierarchy named after its
    /// controllers (`cpu,cpuacct`); one with `cgroup.controllers` is cgroup2.
    fn scan_root(&mut self, cgroup_root: &Path, known: &BTreeSet<String>) {
        if cgroup_root.join("cgroup.controllers").is_file() {
            self.v2 = Some((cgroup_root.to_path_buf(), cgroup_root.display().to_string()));
            self.root_is_v2 = true;
            return;
        }
        let Ok(entries) = fs::read_dir(cgroup_root) else {
            return;
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.is_dir())
            .collect();
        dirs.sort();
        for dir in dirs {
            let name = dir
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            if dir.join("tasks").is_file() {
                for controller in name.split(',') {
                    if known.contains(controller) {
                        self.v1
                            .entry(controller.to_string())
                            .or_insert_with(|| dir.clone());
                    }
                }
            } else if dir.join("cgroup.controllers").is_file() && self.v2.is_none() {
                self.v2 = Some((dir.clone(), dir.display().to_string()));
            }
        }
    }

    fn v1_controllers(&self) -> BTreeSet<String> {
        self.v1
            .keys()
            .filter(|name| !self.disabled.contains(*name))
            .cloned()
            .collect()
    }

    fn v2_controllers(&self) -> BTreeSet<String> {
        self.v2_controllers
            .iter()
            .filter(|name| !self.disabled.contains(*name))
            .cloned()
            .collect()
    }

    /// The directory holding a controller's files: its v1 hierarchy, else the
    /// cgroup2 mount when the controller is available there.
    fn controller_dir(&self, controller: &str) -> Option<HierarchyDir> {
        if let Some(path) = self.v1.get(controller) {
            return Some(HierarchyDir {
                path: path.clone(),
                fs: CgroupFs::V1,
            });
        }
        let (dir, _) = self.v2.as_ref()?;
        self.v2_controllers
            .contains(controller)
            .then(|| HierarchyDir {
                path: dir.clone(),
                fs: CgroupFs::V2,
            })
    }
}

fn read_cgroup_mounts(system: &SystemArgs) -> Result<Vec<CgroupMount>, String> {
    let mountinfo = system.proc_root_dir.join("self/mountinfo");
    let mountinfo_error = match read(&mountinfo) {
        Ok(text) => match parse::parse_mountinfo(&text) {
            Ok(mounts) => return Ok(mounts),
            Err(err) => format!("{}: {err}", mountinfo.display()),
        },
        Err(err) => err,
    };
    let mounts = system.proc_root_dir.join("mounts");
    match read(&mounts) {
        Ok(text) => parse::parse_proc_mounts(&text)
            .map_err(|err| format!("{mountinfo_error}; {}: {err}", mounts.display())),
        Err(err) => Err(format!("{mountinfo_error}; {err}")),
    }
}

/// Maps a mount point from the mount table onto the configured cgroup root:
/// already below it → unchanged; below the default `/sys/fs/cgroup` → the
/// same relative path below the configured root; elsewhere → unchanged.
fn local_mount_path(mount_point: &Path, cgroup_root: &Path) -> PathBuf {
    if mount_point.starts_with(cgroup_root) {
        return mount_point.to_path_buf();
    }
    match mount_point.strip_prefix(DEFAULT_CGROUP_MOUNT) {
        Ok(relative) if relative.as_os_str().is_empty() => cgroup_root.to_path_buf(),
        Ok(relative) => cgroup_root.join(relative),
        Err(_) => mount_point.to_path_buf(),
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a.components().eq(b.components())
}

/// Decides the cgroup version from the controllers bound to each kind of
/// hierarchy (see [`CgroupVersion`] for the definitions) and explains it.
pub fn decide_cgroup_version(
    v1_controllers: &BTreeSet<String>,
    v2_controllers: &BTreeSet<String>,
    unified_mount: Option<&str>,
    root_is_v2: bool,
) -> (CgroupVersion, String) {
    let resource = |set: &BTreeSet<String>| -> Vec<String> {
        CGROUP_RESOURCE_CONTROLLERS
            .iter()
            .filter(|name| set.contains(**name))
            .map(|name| name.to_string())
            .collect()
    };
    let v1_resource = resource(v1_controllers);
    let v2_resource = resource(v2_controllers);
    let unified = unified_mount.unwrap_or("-");
    let list = |names: &[String]| names.join(", ");
    let others = |set: &BTreeSet<String>| {
        if set.is_empty() {
            "none".to_string()
        } else {
            set.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    };
    if !v1_resource.is_empty() && !v2_resource.is_empty() {
        return (
            CgroupVersion::Hybrid,
            format!(
                "resource controllers are split: {} on v1 hierarchies, {} on the cgroup2 mount at {unified}",
                list(&v1_resource),
                list(&v2_resource)
            ),
        );
    }
    if !v1_resource.is_empty() {
        let beside = match unified_mount {
            Some(path) => format!(
                "; the cgroup2 mount at {path} carries no resource controller (its controllers: {})",
                others(v2_controllers)
            ),
            None => "; no cgroup2 mount".to_string(),
        };
        return (
            CgroupVersion::V1,
            format!("{} are on v1 hierarchies{beside}", list(&v1_resource)),
        );
    }
    if !v2_resource.is_empty() || root_is_v2 {
        let controllers = if v2_resource.is_empty() {
            "no resource controller is available".to_string()
        } else {
            format!("{} are", list(&v2_resource))
        };
        return (
            CgroupVersion::V2,
            format!("{controllers} on the cgroup2 hierarchy at {unified}"),
        );
    }
    if !v1_controllers.is_empty() {
        return (
            CgroupVersion::V1,
            format!(
                "only v1 hierarchies ({}) are mounted, without resource controllers",
                others(v1_controllers)
            ),
        );
    }
    if unified_mount.is_some() {
        return (
            CgroupVersion::V2,
            format!("only a cgroup2 mount at {unified}, without resource controllers"),
        );
    }
    (
        CgroupVersion::Unknown,
        "no cgroup hierarchy found".to_string(),
    )
}

fn cgroup_capabilities(
    layout: &CgroupLayout,
    options: &DetectOptions,
    reasons: &mut Reasons,
) -> CgroupCapabilities {
    let v1 = layout.v1_controllers();
    let v2 = layout.v2_controllers();
    let unified_mount_path = layout.v2.as_ref().map(|(_, shown)| shown.clone());
    let (version, version_reason) =
        decide_cgroup_version(&v1, &v2, unified_mount_path.as_deref(), layout.root_is_v2);
    if version == CgroupVersion::Unknown {
        reasons.append("cgroup.version", &version_reason);
    }
    let (driver, driver_source) = detect_driver(layout, options, reasons);
    CgroupCapabilities {
        version,
        version_reason,
        driver,
        driver_source,
        controllers: v1.union(&v2).cloned().collect(),
        v1_controllers: v1.into_iter().collect(),
        v2_controllers: v2.into_iter().collect(),
        unified_mount: unified_mount_path.is_some(),
        unified_mount_path,
    }
}

fn detect_driver(
    layout: &CgroupLayout,
    options: &DetectOptions,
    reasons: &mut Reasons,
) -> (CgroupDriver, Option<String>) {
    if let Some(config) = &options.kubelet_config {
        let shown = config.display();
        return match read(config).and_then(|text| {
            parse::parse_kubelet_cgroup_driver(&text).map_err(|err| format!("{shown}: {err}"))
        }) {
            Ok(KubeletCgroupDriver::Systemd) => (
                CgroupDriver::Systemd,
                Some(format!("cgroupDriver in {shown}")),
            ),
            Ok(KubeletCgroupDriver::Cgroupfs) => (
                CgroupDriver::Cgroupfs,
                Some(format!("cgroupDriver in {shown}")),
            ),
            Ok(KubeletCgroupDriver::Defaulted) => (
                CgroupDriver::Cgroupfs,
                Some(format!(
                    "kubelet default: {shown} does not set cgroupDriver"
                )),
            ),
            Err(err) => {
                reasons.set("cgroup.driver", err);
                (CgroupDriver::Unknown, None)
            }
        };
    }
    let mut searched = Vec::new();
    for controller in ["cpu", "memory", "cpuset", "pids"] {
        let Some(dir) = layout.controller_dir(controller) else {
            continue;
        };
        if searched.contains(&dir.path) {
            continue;
        }
        let systemd = dir.path.join("kubepods.slice").is_dir();
        let cgroupfs = dir.path.join("kubepods").is_dir();
        match (systemd, cgroupfs) {
            (true, false) => {
                let source = dir.path.join("kubepods.slice");
                return (CgroupDriver::Systemd, Some(source.display().to_string()));
            }
            (false, true) => {
                let source = dir.path.join("kubepods");
                return (CgroupDriver::Cgroupfs, Some(source.display().to_string()));
            }
            (true, true) => {
                reasons.set(
                    "cgroup.driver",
                    format!(
                        "both kubepods and kubepods.slice exist in {}",
                        dir.path.display()
                    ),
                );
                return (CgroupDriver::Unknown, None);
            }
            (false, false) => searched.push(dir.path),
        }
    }
    let places = if searched.is_empty() {
        "no cpu, memory, cpuset or pids hierarchy to look in".to_string()
    } else {
        let dirs: Vec<String> = searched
            .iter()
            .map(|dir| dir.display().to_string())
            .collect();
        format!("no kubepods or kubepods.slice in {}", dirs.join(", "))
    };
    reasons.set(
        "cgroup.driver",
        format!("{places} (no kubelet has created pod cgroups; pass --kubelet-config to read it from the kubelet's configuration)"),
    );
    (CgroupDriver::Unknown, None)
}

/// Finds `file` in a hierarchy: at its root, in the kubepods cgroup, or in a
/// first-level child (v2 puts most interface files only in child cgroups).
fn find_in_hierarchy(dir: &Path, file: &str) -> Option<PathBuf> {
    let direct = [
        dir.join(file),
        dir.join("kubepods.slice").join(file),
        dir.join("kubepods").join(file),
    ];
    if let Some(found) = direct.into_iter().find(|path| path.exists()) {
        return Some(found);
    }
    let mut children: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    children.sort();
    children
        .into_iter()
        .map(|child| child.join(file))
        .find(|path| path.exists())
}

fn probe_cgroup_file(
    dir: Option<&HierarchyDir>,
    file: &str,
    key: &str,
    controller: &str,
    reasons: &mut Reasons,
) -> bool {
    let Some(dir) = dir else {
        reasons.set(key, format!("the {controller} controller is not mounted"));
        return false;
    };
    if find_in_hierarchy(&dir.path, file).is_some() {
        return true;
    }
    reasons.set(
        key,
        format!(
            "no {file} in {} (nor its kubepods or first-level child cgroups)",
            dir.path.display()
        ),
    );
    false
}

fn probe_cpu_burst(cpu_dir: Option<&HierarchyDir>, reasons: &mut Reasons) -> bool {
    let file = match cpu_dir.map(|dir| dir.fs) {
        Some(CgroupFs::V2) => "cpu.max.burst",
        _ => "cpu.cfs_burst_us",
    };
    probe_cgroup_file(cpu_dir, file, "cpuBurst", "cpu", reasons)
}

const PSI_RESOURCES: [&str; 3] = ["cpu", "memory", "io"];

fn probe_node_psi(system: &SystemArgs, reasons: &mut Reasons) -> bool {
    let mut problems = Vec::new();
    for resource in PSI_RESOURCES {
        let path = system.proc_root_dir.join("pressure").join(resource);
        if let Err(err) = read_parsed(&path, validate_psi) {
            problems.push(err);
        }
    }
    if problems.is_empty() {
        return true;
    }
    reasons.set("psi", problems.join("; "));
    false
}

/// Per-cgroup PSI lives in the cgroup2 hierarchy, or on Anolis v1 in cpuacct.
fn probe_cgroup_psi(layout: &CgroupLayout, reasons: &mut Reasons) -> Option<String> {
    let mut candidates = Vec::new();
    if let Some((dir, _)) = &layout.v2 {
        candidates.push(dir.clone());
    }
    if let Some(dir) = layout.v1.get("cpuacct") {
        candidates.push(dir.clone());
    }
    if candidates.is_empty() {
        reasons.set(
            "psiCgroup",
            "neither a cgroup2 mount nor a cpuacct hierarchy",
        );
        return None;
    }
    let mut problems = Vec::new();
    for hierarchy in &candidates {
        let Some(cpu_pressure) = find_in_hierarchy(hierarchy, "cpu.pressure") else {
            problems.push(format!("no cpu.pressure in {}", hierarchy.display()));
            continue;
        };
        let cgroup_dir = cpu_pressure.parent().unwrap_or(hierarchy).to_path_buf();
        let failures: Vec<String> = PSI_RESOURCES
            .iter()
            .filter_map(|resource| {
                let path = cgroup_dir.join(format!("{resource}.pressure"));
                read_parsed(&path, validate_psi).err()
            })
            .collect();
        if failures.is_empty() {
            return Some(hierarchy.display().to_string());
        }
        problems.extend(failures);
    }
    reasons.set("psiCgroup", problems.join("; "));
    None
}

/// Interprets `prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET, …)` for the calling
/// thread: `Ok` → usable; `EINVAL` → the kernel lacks core scheduling;
/// `ENODEV` → the kernel has it but the CPUs have no SMT; anything else →
/// undetermined. Returns whether it is usable and, if not, why.
pub fn core_sched_from_prctl(result: Result<u64, i32>) -> (bool, Option<String>) {
    const EINVAL: i32 = 22;
    const ENODEV: i32 = 19;
    match result {
        Ok(_) => (true, None),
        Err(EINVAL) => (
            false,
            Some("prctl(PR_SCHED_CORE) returned EINVAL: the kernel is built without core scheduling (CONFIG_SCHED_CORE)".to_string()),
        ),
        Err(ENODEV) => (
            false,
            Some("prctl(PR_SCHED_CORE) returned ENODEV: the kernel supports core scheduling but the CPUs have no SMT siblings".to_string()),
        ),
        Err(errno) => (
            false,
            Some(format!(
                "could not be determined: prctl(PR_SCHED_CORE) failed with {}",
                io::Error::from_raw_os_error(errno)
            )),
        ),
    }
}

fn probe_core_sched(system: &SystemArgs, options: &DetectOptions, reasons: &mut Reasons) -> bool {
    // Anolis kernels expose core scheduling as a sysctl.
    let sysctl = system.proc_root_dir.join("sys/kernel/sched_core");
    if sysctl.is_file() {
        return true;
    }
    if !options.probe_core_sched_syscall {
        reasons.set(
            "coreSched",
            format!(
                "no {}, and the prctl probe was not run for this detection",
                sysctl.display()
            ),
        );
        return false;
    }
    let result = rustix::thread::core_scheduling_cookie(
        rustix::thread::gettid(),
        rustix::thread::CoreSchedulingScope::Thread,
    )
    .map_err(|errno| errno.raw_os_error());
    let (supported, reason) = core_sched_from_prctl(result);
    if let Some(reason) = reason {
        reasons.set("coreSched", reason);
    }
    supported
}

fn probe_resctrl(system: &SystemArgs, reasons: &mut Reasons) -> ResctrlCapabilities {
    let root = system.resctrl_root();
    let info = root.join("info");
    let mut caps = ResctrlCapabilities {
        supported: false,
        cat: false,
        mba: false,
        closids: None,
        cbm_mask: None,
    };
    if !info.is_dir() {
        let filesystems = system.proc_root_dir.join("filesystems");
        let kernel = match read(&filesystems) {
            Ok(text) if filesystems_include(&text, "resctrl") => {
                "the kernel offers resctrl (listed in /proc/filesystems) but it is not mounted"
                    .to_string()
            }
            Ok(_) => "the kernel has no resctrl filesystem (not in /proc/filesystems)".to_string(),
            Err(err) => err,
        };
        reasons.set("resctrl", format!("no {}: {kernel}", info.display()));
        return caps;
    }
    let mut closids = Vec::new();

    let l3 = info.join("L3");
    if l3.is_dir() {
        let num = read_parsed(&l3.join("num_closids"), parse_num_closids);
        let mask = read_parsed(&l3.join("cbm_mask"), parse_cbm_mask);
        match (num, mask) {
            (Ok(num), Ok(mask)) => {
                caps.cat = true;
                closids.push(num);
                caps.cbm_mask = Some(format!("{mask:x}"));
            }
            (num, mask) => {
                let errors: Vec<String> = [num.err(), mask.err()].into_iter().flatten().collect();
                reasons.set("resctrl.cat", errors.join("; "));
            }
        }
    } else {
        reasons.set(
            "resctrl.cat",
            format!("no {} (no L3 cache allocation)", l3.display()),
        );
    }

    let mb = info.join("MB");
    if mb.is_dir() {
        match read_parsed(&mb.join("num_closids"), parse_num_closids) {
            Ok(num) => {
                caps.mba = true;
                closids.push(num);
            }
            Err(err) => reasons.set("resctrl.mba", err),
        }
    } else {
        reasons.set(
            "resctrl.mba",
            format!("no {} (no memory bandwidth allocation)", mb.display()),
        );
    }

    caps.closids = closids.into_iter().min();
    caps.supported = caps.cat || caps.mba;
    if !caps.supported {
        reasons.set(
            "resctrl",
            format!("{} offers neither usable L3 CAT nor MBA", root.display()),
        );
    }
    caps
}

struct Topology {
    cpus: u32,
    smt: bool,
    numa_nodes: u32,
    cpus_detail: Vec<CpuTopology>,
}

/// CPUs, SMT and NUMA from the metrics advisor's topology survey (the same
/// reader the metric cache uses); every problem becomes a reason.
fn probe_topology(system: &SystemArgs, reasons: &mut Reasons) -> Topology {
    let survey = crate::metricsadvisor::survey_cpu_topology(&system.sys_root_dir);

    let numa_nodes = match &survey.numa_nodes {
        Ok(0) => {
            reasons.set(
                "numaNodes",
                format!("no node<N> directory in {}", survey.node_root.display()),
            );
            0
        }
        Ok(count) => u32::try_from(*count).unwrap_or(u32::MAX),
        Err(err) => {
            let described = if err.is_not_found() {
                format!("no {}", survey.node_root.display())
            } else {
                err.to_string()
            };
            reasons.set(
                "numaNodes",
                format!("{described} (a kernel without NUMA support has no node directory)"),
            );
            0
        }
    };
    if !survey.node_problems.is_empty() {
        let problems: Vec<String> = survey
            .node_problems
            .iter()
            .map(ToString::to_string)
            .collect();
        reasons.set("cpuTopology", problems.join("; "));
    }

    match &survey.online {
        Ok(online) if online.is_empty() => {
            reasons.set("cpus", format!("{} is empty", survey.online_path.display()));
        }
        Ok(_) => {}
        Err(err) => reasons.set("cpus", err.to_string()),
    }

    let mut smt = false;
    let mut smt_unknown = Vec::new();
    let mut topology_problems = Vec::new();
    let mut detail = Vec::with_capacity(survey.cpus.len());
    for facts in &survey.cpus {
        let mut id = |value: &Result<Option<u32>, crate::metricsadvisor::CollectError>| match value
        {
            Ok(id) => *id,
            Err(err) => {
                topology_problems.push(err.to_string());
                None
            }
        };
        let core = id(&facts.core);
        let socket = id(&facts.socket);
        match &facts.thread_siblings {
            Ok(siblings) => smt |= *siblings > 1,
            Err(err) => smt_unknown.push(err.to_string()),
        }
        detail.push(CpuTopology {
            cpu: facts.cpu,
            core,
            socket,
            node: facts.node,
        });
    }
    if survey.cpus.is_empty() {
        reasons.set("smt", "no online CPU list to inspect");
    } else if !smt {
        if smt_unknown.is_empty() {
            reasons.set("smt", "every online CPU has a single hardware thread");
        } else {
            reasons.set("smt", smt_unknown.join("; "));
        }
    }
    if !topology_problems.is_empty() {
        topology_problems.truncate(4);
        reasons.append("cpuTopology", &topology_problems.join("; "));
    }
    Topology {
        cpus: u32::try_from(survey.cpus.len()).unwrap_or(u32::MAX),
        smt,
        numa_nodes,
        cpus_detail: detail,
    }
}

fn probe_kernel(system: &SystemArgs, reasons: &mut Reasons) -> String {
    let path = system.proc_root_dir.join("sys/kernel/osrelease");
    match read_parsed(&path, parse_osrelease) {
        Ok(release) => release.release,
        Err(err) => {
            reasons.set("kernel", err);
            "unknown".to_string()
        }
    }
}

fn probe_memory_qos(
    memory_dir: Option<&HierarchyDir>,
    reasons: &mut Reasons,
) -> MemoryQosCapabilities {
    let mut caps = MemoryQosCapabilities::default();
    let Some(dir) = memory_dir else {
        reasons.set("memoryQos", "the memory controller is not mounted");
        return caps;
    };
    let knobs: [(&str, &mut bool); 12] = [
        ("memory.min", &mut caps.min),
        ("memory.low", &mut caps.low),
        ("memory.high", &mut caps.high),
        ("memory.wmark_ratio", &mut caps.wmark_ratio),
        ("memory.wmark_scale_factor", &mut caps.wmark_scale_factor),
        ("memory.wmark_min_adj", &mut caps.wmark_min_adj),
        ("memory.priority", &mut caps.priority),
        ("memory.use_priority_oom", &mut caps.use_priority_oom),
        ("memory.oom.group", &mut caps.oom_group),
        (
            "memory.pagecache_limit.enable",
            &mut caps.pagecache_limit_enable,
        ),
        (
            "memory.pagecache_limit.size",
            &mut caps.pagecache_limit_size,
        ),
        (
            "memory.pagecache_limit.sync",
            &mut caps.pagecache_limit_sync,
        ),
    ];
    let mut missing = Vec::new();
    for (file, found) in knobs {
        *found = find_in_hierarchy(&dir.path, file).is_some();
        if !*found {
            // Name the NodeSLO settings that cannot take effect, not only the file.
            missing.push(format!("{file} ({})", super::memory_qos_setting(file)));
        }
    }
    if !missing.is_empty() {
        reasons.set(
            "memoryQos",
            format!(
                "no {} in {} (nor its kubepods or first-level child cgroups)",
                missing.join(", "),
                dir.path.display()
            ),
        );
    }
    caps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn v1_with_an_empty_unified_mount_is_v1() {
        let v1 = set(&[
            "blkio", "cpu", "cpuacct", "cpuset", "devices", "memory", "pids",
        ]);
        let (version, reason) = decide_cgroup_version(
            &v1,
            &set(&["hugetlb"]),
            Some("/sys/fs/cgroup/unified"),
            false,
        );
        assert_eq!(version, CgroupVersion::V1);
        assert!(
            reason.contains("/sys/fs/cgroup/unified carries no resource controller"),
            "{reason}"
        );
        assert!(reason.contains("hugetlb"), "{reason}");
        let (version, _) = decide_cgroup_version(&v1, &set(&[]), None, false);
        assert_eq!(version, CgroupVersion::V1);
    }

    #[test]
    fn split_resource_controllers_are_hybrid() {
        let (version, reason) = decide_cgroup_version(
            &set(&["cpu", "cpuacct", "cpuset"]),
            &set(&["memory", "io"]),
            Some("/sys/fs/cgroup/unified"),
            false,
        );
        assert_eq!(version, CgroupVersion::Hybrid);
        assert!(
            reason.contains("memory, io on the cgroup2 mount"),
            "{reason}"
        );
    }

    #[test]
    fn unified_root_is_v2() {
        let v2 = set(&["cpuset", "cpu", "io", "memory", "pids"]);
        assert_eq!(
            decide_cgroup_version(&set(&[]), &v2, Some("/sys/fs/cgroup"), true).0,
            CgroupVersion::V2
        );
        // A v2 root whose controllers file could not be read is still v2.
        assert_eq!(
            decide_cgroup_version(&set(&[]), &set(&[]), Some("/sys/fs/cgroup"), true).0,
            CgroupVersion::V2
        );
    }

    #[test]
    fn nothing_mounted_is_unknown() {
        assert_eq!(
            decide_cgroup_version(&set(&[]), &set(&[]), None, false).0,
            CgroupVersion::Unknown
        );
        assert_eq!(
            decide_cgroup_version(&set(&["freezer"]), &set(&[]), None, false).0,
            CgroupVersion::V1
        );
    }

    #[test]
    fn prctl_results_are_classified() {
        assert_eq!(core_sched_from_prctl(Ok(0)), (true, None));
        let (supported, reason) = core_sched_from_prctl(Err(22));
        assert!(!supported);
        assert!(reason.unwrap().contains("EINVAL"));
        let (supported, reason) = core_sched_from_prctl(Err(19));
        assert!(!supported);
        assert!(reason.unwrap().contains("no SMT"));
        let (supported, reason) = core_sched_from_prctl(Err(1));
        assert!(!supported);
        assert!(reason.unwrap().starts_with("could not be determined"));
    }

    #[test]
    fn mount_points_are_rerooted_onto_the_configured_root() {
        let root = Path::new("/tmp/tree/sys/fs/cgroup");
        assert_eq!(
            local_mount_path(Path::new("/sys/fs/cgroup/cpu,cpuacct"), root),
            root.join("cpu,cpuacct")
        );
        assert_eq!(local_mount_path(Path::new("/sys/fs/cgroup"), root), root);
        assert_eq!(
            local_mount_path(Path::new("/tmp/tree/sys/fs/cgroup/memory"), root),
            root.join("memory")
        );
        assert_eq!(
            local_mount_path(Path::new("/cgroup/cpu"), root),
            Path::new("/cgroup/cpu")
        );
        let host = Path::new("/host-cgroup");
        assert_eq!(
            local_mount_path(Path::new("/host-cgroup/cpu"), host),
            Path::new("/host-cgroup/cpu")
        );
    }
}

//! NodeResourceTopology reporter: the node's CPU topology and basic info,
//! NUMA zones and CPU pools, published the way upstream koordlet publishes
//! them so that koord-scheduler's NodeNUMAResource plugin can allocate
//! cpusets.
//!
//! - Pure core: [`build_desired_topology`] turns the hardware
//!   ([`NodeHardware`]), the Node and the pods into a [`DesiredTopology`];
//!   [`DesiredTopology::change_reason`] compares it with what the API server
//!   holds and [`DesiredTopology::apply_to`] merges it in.
//!   [`cpu_share_pools`] is the one share-pool computation, also used by the
//!   runtime hooks' CPUSetAllocator.
//! - I/O shell: [`NodeTopologyReporter`] creates the object named after the
//!   node when it is missing and replaces it only when its content changed,
//!   at start, after pod or Node changes (debounced) and every
//!   `--node-topology-sync-interval`; it can also write the object to a file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use apis::extension::{
    ANNOTATION_CPU_BASIC_INFO, ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_BE_CPU_SHARED_POOLS, ANNOTATION_NODE_CPU_ALLOCS,
    ANNOTATION_NODE_CPU_SHARED_POOLS, ANNOTATION_NODE_CPU_TOPOLOGY, ANNOTATION_NODE_RESERVATION,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE, CPUBasicInfo, CPUInfo, CPUSharedPool, CPUTopology,
    KUBELET_CPU_MANAGER_POLICY_STATIC, KubeletCPUManagerPolicy, LABEL_MANAGED_BY,
    LABEL_NODE_ENABLE_NUMA_RESERVATION, NodeReservation, PodCPUAlloc, QoSClass, QuantityValue,
    StringMap, get_node_reservation, get_resource_status, get_system_qos_resource,
    pod_qos_class_raw, qos_class_of_pod, set_cpu_basic_info, set_cpu_topology,
    set_kubelet_cpu_manager_policy, set_node_be_cpu_shared_pools, set_node_cpu_shared_pools,
    set_pod_cpu_allocs,
};
use apis::topology::v1alpha1::{NodeResourceTopology, ResourceInfo, TopologyManagerPolicy, Zone};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use koord_common::Shutdown;

use super::StatesInformer;
use crate::metriccache::MetricCache;
use crate::metricsadvisor::read_cpu_topology;
use crate::system::SystemArgs;
use crate::system::cputopology::{CpuInfo, CpuTopology};
use crate::system::units::CpuSet;

/// Zone type of a NUMA node (upstream `NodeZoneType`).
pub const NODE_ZONE_TYPE: &str = "Node";
/// Value of `app.kubernetes.io/managed-by` on objects koordlet creates.
pub const MANAGED_BY_KOORDINATOR: &str = "Koordinator";
/// Upstream's default `--node-topology-sync-interval`.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(3);
/// The feature gate (in `--feature-gates`) that turns API reporting off.
pub const NODE_TOPOLOGY_REPORT_GATE: &str = "NodeTopologyReport";

/// Annotations this reporter owns on the NodeResourceTopology.
pub const MANAGED_ANNOTATIONS: [&str; 8] = [
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_CPU_SHARED_POOLS,
    ANNOTATION_NODE_BE_CPU_SHARED_POOLS,
    ANNOTATION_NODE_CPU_TOPOLOGY,
    ANNOTATION_NODE_CPU_ALLOCS,
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
];
/// Labels copied from the Node to the NodeResourceTopology.
pub const MANAGED_LABELS: [&str; 1] = [LABEL_NODE_ENABLE_NUMA_RESERVATION];
/// Zone resources this reporter owns; other resources of a zone are kept.
pub const MANAGED_RESOURCES: [&str; 5] = [
    "cpu",
    "memory",
    "koordinator.sh/gpu",
    "hugepages-2Mi",
    "hugepages-1Gi",
];

#[derive(Debug, thiserror::Error)]
pub enum NodeTopologyError {
    #[error("cannot read the CPU topology: {0}")]
    CpuTopology(#[from] crate::metricsadvisor::CollectError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed {path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error("cannot encode annotation {key}: {reason}")]
    Encode { key: &'static str, reason: String },
    #[error("NodeResourceTopology {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Flags of the NodeResourceTopology reporter (upstream names where upstream has one).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct NodeTopologyArgs {
    /// How often the node topology is recomputed and, when changed, reported.
    #[arg(long = "node-topology-sync-interval", default_value = "3s", value_name = "DURATION", value_parser = super::parse_positive_duration)]
    pub node_topology_sync_interval: Duration,

    /// Also write the NodeResourceTopology (JSON) to this file whenever it changes;
    /// works in both modes (in standalone mode it is the only output).
    #[arg(long = "node-topology-output", value_name = "PATH")]
    pub node_topology_output: Option<PathBuf>,

    /// The kubelet's root directory as seen by koordlet; its cpu_manager_state names the
    /// CPU manager policy and the CPUs the static policy pinned.
    #[arg(
        long = "var-lib-kubelet-dir",
        default_value = "/var/lib/kubelet/",
        value_name = "DIR"
    )]
    pub var_lib_kubelet_dir: PathBuf,
}

impl Default for NodeTopologyArgs {
    fn default() -> Self {
        Self {
            node_topology_sync_interval: DEFAULT_SYNC_INTERVAL,
            node_topology_output: None,
            var_lib_kubelet_dir: PathBuf::from("/var/lib/kubelet/"),
        }
    }
}

/// What the node says: online CPUs, the memory of each NUMA node, the CPU's
/// basic features and the kubelet's CPU manager checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeHardware {
    pub cpus: CpuTopology,
    /// `MemTotal` of `node<N>/meminfo`, in bytes.
    pub numa_memory_bytes: BTreeMap<u32, u64>,
    /// Model, SMT, turbo, L3 CBM mask and vendor; parts that cannot be read are empty.
    pub cpu_basic_info: CPUBasicInfo,
    /// The kubelet's `cpu_manager_state`, when present and readable.
    pub kubelet_cpu_manager: Option<CpuManagerCheckpoint>,
    /// Why an optional input (the checkpoint) was left out.
    pub problems: Vec<String>,
}

pub use super::cpumanager::{
    CPU_MANAGER_STATE_FILE, CpuManagerCheckpoint, read_cpu_manager_checkpoint,
};

/// Pods whose CPUs the kubelet's static policy pinned, from its checkpoint,
/// leaving out the pods koordinator manages (labelled LS/BE, or bound by the
/// scheduler through resource-status). Returns the allocations (ordered by
/// UID) and the union of their CPUs.
pub fn kubelet_pod_allocs(
    checkpoint: &CpuManagerCheckpoint,
    pods: &[Pod],
) -> (Vec<PodCPUAlloc>, CpuSet, Vec<String>) {
    let mut problems = Vec::new();
    let empty = BTreeMap::new();
    let mut by_uid = BTreeMap::new();
    let mut managed = BTreeSet::new();
    for pod in pods {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            continue;
        };
        by_uid.insert(uid, pod);
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let bound = get_resource_status(annotations)
            .ok()
            .flatten()
            .and_then(|status| status.cpuset.trim().parse::<CpuSet>().ok())
            .is_some_and(|cpus| !cpus.is_empty());
        if matches!(pod_qos_class_raw(pod), QoSClass::LS | QoSClass::BE) || bound {
            managed.insert(uid);
        }
    }
    let mut allocs = Vec::new();
    let mut pinned = CpuSet::new();
    for (uid, containers) in &checkpoint.entries {
        if managed.contains(uid.as_str()) {
            continue;
        }
        let mut cpus = CpuSet::new();
        for (container, text) in containers {
            match text.trim().parse::<CpuSet>() {
                Ok(set) => cpus = cpus.union(&set),
                Err(error) => problems.push(format!(
                    "kubelet cpu_manager_state: pod {uid} container {container}: {error}"
                )),
            }
        }
        if cpus.is_empty() {
            continue;
        }
        let pod = by_uid.get(uid.as_str());
        allocs.push(PodCPUAlloc {
            namespace: pod
                .and_then(|p| p.metadata.namespace.clone())
                .unwrap_or_default(),
            name: pod
                .and_then(|p| p.metadata.name.clone())
                .unwrap_or_default(),
            uid: uid.clone(),
            cpuset: cpus.to_string(),
            managed_by_kubelet: true,
        });
        pinned = pinned.union(&cpus);
    }
    (allocs, pinned, problems)
}

/// What the kubelet's CPU manager checkpoint means for the CPU pools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletCpuState {
    /// The checkpoint's policy name; empty without a checkpoint.
    pub policy: KubeletCPUManagerPolicy,
    /// Pods the static policy pinned (see [`kubelet_pod_allocs`]).
    pub allocs: Vec<PodCPUAlloc>,
    /// Their CPUs, which leave the share pools.
    pub pinned: CpuSet,
}

impl KubeletCpuState {
    /// The kubelet runs the static policy (it owns the cpusets of the pods it pins).
    pub fn is_static(&self) -> bool {
        self.policy.policy == KUBELET_CPU_MANAGER_POLICY_STATIC
    }
}

/// The kubelet's policy and pinned pods from its checkpoint (`None`: no
/// kubelet information). Only the static policy pins; the NodeResourceTopology
/// report and the runtime hooks' share pool both use this.
pub fn kubelet_cpu_state(
    checkpoint: Option<&CpuManagerCheckpoint>,
    pods: &[Pod],
) -> (KubeletCpuState, Vec<String>) {
    let Some(checkpoint) = checkpoint else {
        return (KubeletCpuState::default(), Vec::new());
    };
    let mut state = KubeletCpuState {
        policy: KubeletCPUManagerPolicy {
            policy: checkpoint.policy_name.clone(),
            ..KubeletCPUManagerPolicy::default()
        },
        ..KubeletCpuState::default()
    };
    if !state.is_static() {
        return (state, Vec::new());
    }
    let (allocs, pinned, problems) = kubelet_pod_allocs(checkpoint, pods);
    state.allocs = allocs;
    state.pinned = pinned;
    (state, problems)
}

/// Reads the CPU topology and the per-NUMA memory below `sys_root`.
pub fn read_node_hardware(sys_root: &Path) -> Result<NodeHardware, NodeTopologyError> {
    let cpus = read_cpu_topology(sys_root)?;
    read_numa_memory(sys_root, cpus)
}

/// [`read_node_hardware`] (or [`read_numa_memory`] over a known topology)
/// plus the CPU basic info (below the `/proc`, `/sys` and resctrl roots of
/// `system`) and the kubelet checkpoint below `kubelet_root`; a checkpoint
/// that cannot be read becomes a problem, not a failure.
pub fn read_node_facts(
    system: &SystemArgs,
    kubelet_root: &Path,
    known_cpus: Option<CpuTopology>,
) -> Result<NodeHardware, NodeTopologyError> {
    let sys_root = &system.sys_root_dir;
    let mut hardware = match known_cpus {
        Some(cpus) => read_numa_memory(sys_root, cpus)?,
        None => read_node_hardware(sys_root)?,
    };
    hardware.cpu_basic_info = read_cpu_basic_info(
        &system.proc_root_dir,
        sys_root,
        &system.resctrl_root(),
        &hardware.cpus,
    );
    match read_cpu_manager_checkpoint(kubelet_root) {
        Ok(checkpoint) => hardware.kubelet_cpu_manager = checkpoint,
        Err(err) => hardware.problems.push(err.to_string()),
    }
    Ok(hardware)
}

/// Path of the intel_pstate turbo switch below the sys root.
pub const INTEL_PSTATE_NO_TURBO: &str = "devices/system/cpu/intel_pstate/no_turbo";
/// Path of the L3 capacity bit mask below the resctrl root.
pub const RESCTRL_L3_CBM_MASK: &str = "info/L3/cbm_mask";
/// Lines of `/proc/cpuinfo` looked at: the first processor's block is
/// enough (every processor repeats model and vendor), and reading stops
/// early because the kernel formats the file on demand, per CPU.
const CPUINFO_MAX_LINES: usize = 256;
/// Longest model or vendor string taken from `/proc/cpuinfo`.
const CPUINFO_MAX_VALUE_LEN: usize = 256;
/// A CBM mask fits 64 bits (the runtime hooks parse it as a `u64`).
const CBM_MASK_MAX_HEX_DIGITS: usize = 16;

/// The `node.koordinator.sh/cpu-basic-info` value. Every part that cannot
/// be read is left empty (false) and logged at debug; nothing fails.
pub fn read_cpu_basic_info(
    proc_root: &Path,
    sys_root: &Path,
    resctrl_root: &Path,
    topology: &CpuTopology,
) -> CPUBasicInfo {
    let identity = read_cpu_identity(&proc_root.join("cpuinfo"));
    CPUBasicInfo {
        cpu_model: identity.model.unwrap_or_default(),
        hyper_thread_enabled: hyper_threading_enabled(topology),
        turbo_enabled: read_turbo_enabled(&sys_root.join(INTEL_PSTATE_NO_TURBO)),
        cat_l3_cbm_mask: read_l3_cbm_mask(&resctrl_root.join(RESCTRL_L3_CBM_MASK))
            .unwrap_or_default(),
        vendor_id: identity.vendor.unwrap_or_default(),
    }
}

/// Model name and vendor of the first processor in `/proc/cpuinfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuIdentity {
    pub model: Option<String>,
    pub vendor: Option<String>,
}

/// A `/proc/cpuinfo` value as reported: trimmed, non-empty, printable and
/// of sane length.
fn cpuinfo_value(value: &str) -> Option<String> {
    let value = value.trim();
    let valid = !value.is_empty()
        && value.len() <= CPUINFO_MAX_VALUE_LEN
        && !value.chars().any(char::is_control);
    valid.then(|| value.to_string())
}

/// Parses the first processor block of `/proc/cpuinfo` (lines up to the
/// first blank line after content): `model name` (some kernels spell it
/// `Model Name`) and `vendor_id`. Invalid values are left out.
pub fn parse_cpu_identity<I, S>(lines: I) -> CpuIdentity
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut identity = CpuIdentity::default();
    let mut in_block = false;
    for line in lines.into_iter().take(CPUINFO_MAX_LINES) {
        let line = line.as_ref();
        if line.trim().is_empty() {
            if in_block {
                break;
            }
            continue;
        }
        in_block = true;
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        if key.eq_ignore_ascii_case("model name") && identity.model.is_none() {
            identity.model = cpuinfo_value(value);
        } else if key == "vendor_id" && identity.vendor.is_none() {
            identity.vendor = cpuinfo_value(value);
        }
        if identity.model.is_some() && identity.vendor.is_some() {
            break;
        }
    }
    identity
}

/// Reads [`CpuIdentity`] from `path` (`<proc-root>/cpuinfo`), stopping after
/// the first processor's block.
pub fn read_cpu_identity(path: &Path) -> CpuIdentity {
    use std::io::BufRead as _;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) => {
            tracing::debug!(path = %path.display(), %error, "cpu basic info: no model or vendor");
            return CpuIdentity::default();
        }
    };
    let mut failure = None;
    let lines = std::io::BufReader::new(file)
        .split(b'\n')
        .map_while(|line| match line {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(error) => {
                failure = Some(error);
                None
            }
        });
    let identity = parse_cpu_identity(lines);
    if let Some(error) = failure {
        tracing::debug!(path = %path.display(), %error, "cpu basic info: cpuinfo read stopped");
    }
    if identity.model.is_none() {
        tracing::debug!(path = %path.display(), "cpu basic info: no valid model name");
    }
    if identity.vendor.is_none() {
        tracing::debug!(path = %path.display(), "cpu basic info: no valid vendor_id");
    }
    identity
}

/// Whether any physical core (socket, core id) runs more than one CPU.
pub fn hyper_threading_enabled(topology: &CpuTopology) -> bool {
    let mut threads: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for cpu in &topology.cpus {
        *threads.entry((cpu.socket, cpu.core)).or_default() += 1;
    }
    threads.values().any(|count| *count > 1)
}

/// Turbo from intel_pstate's `no_turbo` (`0`: turbo on). Other drivers
/// expose no such switch: absent, unreadable or malformed counts as off,
/// as upstream.
pub fn read_turbo_enabled(no_turbo: &Path) -> bool {
    let text = match std::fs::read_to_string(no_turbo) {
        Ok(text) => text,
        Err(error) => {
            tracing::debug!(path = %no_turbo.display(), %error, "cpu basic info: turbo counted as off");
            return false;
        }
    };
    match text.trim().parse::<i64>() {
        Ok(value) => value == 0,
        Err(_) => {
            tracing::debug!(path = %no_turbo.display(), content = %text.trim(), "cpu basic info: malformed no_turbo, turbo counted as off");
            false
        }
    }
}

/// The L3 capacity bit mask (hex, as the kernel prints it) from resctrl's
/// `info/L3/cbm_mask`; `None` without resctrl L3 CAT or when malformed.
pub fn read_l3_cbm_mask(path: &Path) -> Option<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            tracing::debug!(path = %path.display(), %error, "cpu basic info: no L3 CBM mask");
            return None;
        }
    };
    let mask = text.trim();
    let valid = !mask.is_empty()
        && mask.len() <= CBM_MASK_MAX_HEX_DIGITS
        && mask.chars().all(|c| c.is_ascii_hexdigit());
    if !valid {
        tracing::debug!(path = %path.display(), content = %mask, "cpu basic info: malformed L3 CBM mask");
        return None;
    }
    Some(mask.to_string())
}

/// Adds the memory of each NUMA node of `cpus` (`node<N>/meminfo` below
/// `sys_root`); nodes without a meminfo file (no NUMA support) are left out.
pub fn read_numa_memory(
    sys_root: &Path,
    cpus: CpuTopology,
) -> Result<NodeHardware, NodeTopologyError> {
    let node_root = sys_root.join("devices/system/node");
    let mut numa_memory_bytes = BTreeMap::new();
    let nodes: BTreeSet<u32> = cpus.cpus.iter().map(|cpu| cpu.node).collect();
    for node in nodes {
        let path = node_root.join(format!("node{node}/meminfo"));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(NodeTopologyError::Read { path, source }),
        };
        let info = crate::metricsadvisor::parse::parse_numa_meminfo(&text).map_err(|err| {
            NodeTopologyError::Malformed {
                path: path.clone(),
                reason: err.to_string(),
            }
        })?;
        numa_memory_bytes.insert(node, info.total);
    }
    Ok(NodeHardware {
        cpus,
        numa_memory_bytes,
        ..NodeHardware::default()
    })
}

/// The LS and BE share pools (see [`cpu_share_pools`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSharePools {
    /// CPUs of LS and unbound pods: all minus LSE/LSR cpusets and withheld CPUs.
    pub ls: CpuSet,
    /// CPUs of BE pods: all minus LSE cpusets (LSR CPUs are lent to BE) and withheld CPUs.
    pub be: CpuSet,
}

fn pod_is_terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn pod_label(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The share pools of the node: `all_cpus` minus the cpusets the scheduler
/// bound to running LSE/LSR pods (resource-status annotation) minus
/// `withheld` (node-reserved and exclusive SYSTEM CPUs). Malformed
/// annotations are skipped and returned as messages.
pub fn cpu_share_pools(
    all_cpus: &CpuSet,
    pods: &[Pod],
    withheld: &CpuSet,
) -> (CpuSharePools, Vec<String>) {
    let mut problems = Vec::new();
    let mut bound_lse = CpuSet::new();
    let mut bound_lsr = CpuSet::new();
    let empty = BTreeMap::new();
    for pod in pods.iter().filter(|pod| !pod_is_terminated(pod)) {
        let class = qos_class_of_pod(pod);
        if !matches!(class, QoSClass::LSE | QoSClass::LSR) {
            continue;
        }
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let cpus = match get_resource_status(annotations) {
            Ok(Some(status)) if !status.cpuset.trim().is_empty() => {
                match status.cpuset.trim().parse::<CpuSet>() {
                    Ok(cpus) => cpus,
                    Err(error) => {
                        problems.push(format!(
                            "pod {} resource-status cpuset: {error}",
                            pod_label(pod)
                        ));
                        continue;
                    }
                }
            }
            Ok(_) => continue,
            Err(error) => {
                problems.push(format!("pod {}: {error}", pod_label(pod)));
                continue;
            }
        };
        if class == QoSClass::LSE {
            bound_lse = bound_lse.union(&cpus);
        } else {
            bound_lsr = bound_lsr.union(&cpus);
        }
    }
    let available = all_cpus.difference(withheld);
    let pools = CpuSharePools {
        ls: available.difference(&bound_lse).difference(&bound_lsr),
        be: available.difference(&bound_lse),
    };
    (pools, problems)
}

/// CPUs of the node's exclusive SYSTEM QoS set (`node.koordinator.sh/system-qos-resource`
/// with `cpusetExclusive` unset or true).
pub fn system_exclusive_cpus(node_annotations: &StringMap) -> Result<CpuSet, String> {
    match get_system_qos_resource(node_annotations) {
        Ok(Some(system)) if system.is_cpuset_exclusive() && !system.cpuset.trim().is_empty() => {
            system
                .cpuset
                .trim()
                .parse()
                .map_err(|error| format!("node system-qos-resource cpuset: {error}"))
        }
        Ok(_) => Ok(CpuSet::new()),
        Err(error) => Err(error.to_string()),
    }
}

/// The node reservation (`node.koordinator.sh/reservation`) with its CPUs
/// resolved: explicit `reservedCPUs`, else the CPU amount taken by topology.
/// A malformed annotation counts as no reservation (as upstream) and is
/// returned as a message.
pub fn node_reservation(
    node_annotations: &StringMap,
    topology: &CpuTopology,
) -> (NodeReservation, CpuSet, Option<String>) {
    let (mut reservation, problem) = match get_node_reservation(node_annotations) {
        Ok(reservation) => (reservation.unwrap_or_default(), None),
        Err(error) => (NodeReservation::default(), Some(error.to_string())),
    };
    let (explicit, count) = reservation.reserved_cpus_and_count();
    let (cpus, problem) = if !explicit.is_empty() {
        match explicit.trim().parse::<CpuSet>() {
            Ok(cpus) => (cpus, problem),
            Err(error) => (
                CpuSet::new(),
                Some(format!("node reservation reservedCPUs: {error}")),
            ),
        }
    } else {
        let count = usize::try_from(count).unwrap_or(0);
        (take_cpus_by_topology(topology, count), problem)
    };
    reservation.reserved_cpus = cpus.to_string();
    (reservation, cpus, problem)
}

/// Picks `count` CPUs packing them tightly: whole sockets first, then whole
/// physical cores, then single threads, lowest ids first (the spirit of the
/// kubelet's reserved-CPU selection).
pub fn take_cpus_by_topology(topology: &CpuTopology, count: usize) -> CpuSet {
    let mut taken = CpuSet::new();
    let mut remaining = count;
    let group_by = |key: fn(&CpuInfo) -> (u32, u32)| {
        let mut groups: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
        for cpu in &topology.cpus {
            groups.entry(key(cpu)).or_default().push(cpu.cpu);
        }
        groups
    };
    let sockets = group_by(|cpu| (cpu.socket, 0));
    let cores = group_by(|cpu| (cpu.socket, cpu.core));
    for groups in [sockets, cores] {
        for cpus in groups.values() {
            let free = cpus.iter().all(|cpu| !taken.contains(*cpu));
            if free && !cpus.is_empty() && cpus.len() <= remaining {
                for cpu in cpus {
                    // Ids came from a parsed CpuSet, so they are in range.
                    let _ = taken.insert(*cpu);
                }
                remaining -= cpus.len();
            }
        }
    }
    let mut rest: Vec<&CpuInfo> = topology.cpus.iter().collect();
    rest.sort_by_key(|cpu| (cpu.socket, cpu.core, cpu.cpu));
    for cpu in rest {
        if remaining == 0 {
            break;
        }
        if !taken.contains(cpu.cpu) {
            let _ = taken.insert(cpu.cpu);
            remaining -= 1;
        }
    }
    taken
}

/// Splits `cpus` into one pool per NUMA node, ordered by (socket, node).
pub fn pools_per_numa_node(cpus: &CpuSet, topology: &CpuTopology) -> Vec<CPUSharedPool> {
    let mut per_node: BTreeMap<u32, (u32, CpuSet)> = BTreeMap::new();
    for info in topology.cpus.iter().filter(|info| cpus.contains(info.cpu)) {
        let entry = per_node
            .entry(info.node)
            .or_insert_with(|| (info.socket, CpuSet::new()));
        let _ = entry.1.insert(info.cpu);
    }
    let mut pools: Vec<CPUSharedPool> = per_node
        .into_iter()
        .map(|(node, (socket, set))| CPUSharedPool {
            socket: to_i32(socket),
            node: to_i32(node),
            cpuset: set.to_string(),
        })
        .collect();
    pools.sort_by_key(|pool| (pool.socket, pool.node));
    pools
}

fn to_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// The `node.koordinator.sh/cpu-topology` value: every CPU, ordered by id.
pub fn cpu_topology_annotation(topology: &CpuTopology) -> CPUTopology {
    let mut detail: Vec<CPUInfo> = topology
        .cpus
        .iter()
        .map(|cpu| CPUInfo {
            id: to_i32(cpu.cpu),
            core: to_i32(cpu.core),
            socket: to_i32(cpu.socket),
            node: to_i32(cpu.node),
        })
        .collect();
    detail.sort_by_key(|cpu| cpu.id);
    CPUTopology { detail }
}

/// Zone name of NUMA node `id` (upstream `GenNodeZoneName`).
pub fn zone_name(id: u32) -> String {
    format!("node-{id}")
}

/// Formats milli-units as a Kubernetes quantity (whole units without suffix).
fn milli_quantity(milli: i64) -> Quantity {
    if milli % 1000 == 0 {
        Quantity((milli / 1000).to_string())
    } else {
        Quantity(format!("{milli}m"))
    }
}

/// Capacity minus allocatable of `resource` on the Node, in milli-units.
fn node_reserved_milli(node: &Node, resource: &str) -> i64 {
    let Some(status) = node.status.as_ref() else {
        return 0;
    };
    let milli = |list: &Option<BTreeMap<String, Quantity>>| {
        list.as_ref()
            .and_then(|list| list.get(resource))
            .and_then(|q| QuantityValue::of(q).ok())
            .map(QuantityValue::milli_value)
    };
    match (milli(&status.capacity), milli(&status.allocatable)) {
        (Some(capacity), Some(allocatable)) => (capacity - allocatable).max(0),
        _ => 0,
    }
}

/// One zone per NUMA node: CPUs (count), memory (`MemTotal`) and zero
/// hugepages (upstream reports hugepages only behind an alpha gate). With
/// the Node label `node.koordinator.sh/enable-numa-reservation=true` the
/// Node's capacity-minus-allocatable is taken evenly (rounded up) from each
/// zone's allocatable.
pub fn build_zones(hardware: &NodeHardware, node: Option<&Node>) -> Vec<Zone> {
    let mut node_ids: BTreeSet<u32> = hardware.cpus.cpus.iter().map(|c| c.node).collect();
    node_ids.extend(hardware.numa_memory_bytes.keys().copied());
    let numa_reservation = node.is_some_and(|node| {
        node.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_NODE_ENABLE_NUMA_RESERVATION))
            .is_some_and(|value| value == "true")
    });
    let count = i64::try_from(node_ids.len()).unwrap_or(1).max(1);
    let per_zone_reserved = |resource: &str| match node {
        Some(node) if numa_reservation => {
            let reserved = node_reserved_milli(node, resource);
            (reserved + count - 1) / count
        }
        _ => 0,
    };
    let cpu_reserved = per_zone_reserved("cpu");
    let memory_reserved = per_zone_reserved("memory");
    let mut zones: Vec<Zone> = node_ids
        .into_iter()
        .map(|id| {
            let cpus = i64::try_from(hardware.cpus.cpus_of_node(id).len()).unwrap_or(i64::MAX);
            let memory = hardware
                .numa_memory_bytes
                .get(&id)
                .map_or(0, |bytes| i64::try_from(*bytes).unwrap_or(i64::MAX));
            let resource = |name: &str, capacity_milli: i64, reserved_milli: i64| {
                let allocatable = milli_quantity((capacity_milli - reserved_milli).max(0));
                ResourceInfo {
                    name: name.to_string(),
                    capacity: milli_quantity(capacity_milli),
                    allocatable: allocatable.clone(),
                    available: allocatable,
                }
            };
            Zone {
                name: zone_name(id),
                type_: NODE_ZONE_TYPE.to_string(),
                resources: Some(vec![
                    resource("cpu", cpus.saturating_mul(1000), cpu_reserved),
                    resource("hugepages-1Gi", 0, 0),
                    resource("hugepages-2Mi", 0, 0),
                    resource("memory", memory.saturating_mul(1000), memory_reserved),
                ]),
                ..Zone::default()
            }
        })
        .collect();
    // Upstream orders zones by name.
    zones.sort_by(|a, b| a.name.cmp(&b.name));
    zones
}

/// What koordlet wants the NodeResourceTopology to say.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredTopology {
    /// Values of [`MANAGED_ANNOTATIONS`].
    pub annotations: BTreeMap<String, String>,
    /// Values of [`MANAGED_LABELS`] present on the Node.
    pub labels: BTreeMap<String, String>,
    pub topology_policies: Vec<TopologyManagerPolicy>,
    pub zones: Vec<Zone>,
    /// CPU pools as computed (for logs and the hook).
    pub pools: CpuSharePools,
}

/// Builds the desired content; malformed Node or pod annotations are
/// skipped (they never stop a report) and returned as messages.
pub fn build_desired_topology(
    hardware: &NodeHardware,
    node: Option<&Node>,
    pods: &[Pod],
) -> Result<(DesiredTopology, Vec<String>), NodeTopologyError> {
    let mut problems = hardware.problems.clone();
    let empty = BTreeMap::new();
    let node_annotations = node
        .and_then(|node| node.metadata.annotations.as_ref())
        .unwrap_or(&empty);
    let topology = &hardware.cpus;
    let all_cpus = CpuSet::from_ids(topology.cpus.iter().map(|c| c.cpu)).map_err(|err| {
        NodeTopologyError::Malformed {
            path: PathBuf::from("devices/system/cpu/online"),
            reason: err.to_string(),
        }
    })?;
    let (reservation, reserved_cpus, problem) = node_reservation(node_annotations, topology);
    problems.extend(problem);
    let system_exclusive = system_exclusive_cpus(node_annotations).unwrap_or_else(|problem| {
        problems.push(problem);
        CpuSet::new()
    });
    let (kubelet, kubelet_problems) =
        kubelet_cpu_state(hardware.kubelet_cpu_manager.as_ref(), pods);
    problems.extend(kubelet_problems);
    let withheld = reserved_cpus
        .union(&system_exclusive)
        .union(&kubelet.pinned);
    let (pools, pool_problems) = cpu_share_pools(&all_cpus, pods, &withheld);
    problems.extend(pool_problems);

    let mut annotations = BTreeMap::new();
    let encode =
        |key: &'static str, err: apis::extension::ExtensionError| NodeTopologyError::Encode {
            key,
            reason: err.to_string(),
        };
    set_cpu_topology(&mut annotations, &cpu_topology_annotation(topology))
        .map_err(|err| encode(ANNOTATION_NODE_CPU_TOPOLOGY, err))?;
    set_node_cpu_shared_pools(&mut annotations, &pools_per_numa_node(&pools.ls, topology))
        .map_err(|err| encode(ANNOTATION_NODE_CPU_SHARED_POOLS, err))?;
    set_node_be_cpu_shared_pools(&mut annotations, &pools_per_numa_node(&pools.be, topology))
        .map_err(|err| encode(ANNOTATION_NODE_BE_CPU_SHARED_POOLS, err))?;
    // The kubelet's /configz is not queried (see docs/nodetopology.md): the
    // policy name comes from its checkpoint, without options or reserved CPUs.
    set_kubelet_cpu_manager_policy(&mut annotations, &kubelet.policy)
        .map_err(|err| encode(ANNOTATION_KUBELET_CPU_MANAGER_POLICY, err))?;
    set_pod_cpu_allocs(&mut annotations, &kubelet.allocs)
        .map_err(|err| encode(ANNOTATION_NODE_CPU_ALLOCS, err))?;
    set_cpu_basic_info(&mut annotations, &hardware.cpu_basic_info)
        .map_err(|err| encode(ANNOTATION_CPU_BASIC_INFO, err))?;
    let reservation_json =
        serde_json::to_string(&reservation).map_err(|err| NodeTopologyError::Encode {
            key: ANNOTATION_NODE_RESERVATION,
            reason: err.to_string(),
        })?;
    annotations.insert(ANNOTATION_NODE_RESERVATION.to_string(), reservation_json);
    let system_qos = match get_system_qos_resource(node_annotations) {
        Ok(Some(system)) => serde_json::to_string(&system).unwrap_or_else(|_| "{}".to_string()),
        // Absent or malformed (already reported above): no SYSTEM CPUs.
        _ => "{}".to_string(),
    };
    annotations.insert(ANNOTATION_NODE_SYSTEM_QOS_RESOURCE.to_string(), system_qos);

    let labels = node
        .and_then(|node| node.metadata.labels.as_ref())
        .map(|labels| {
            MANAGED_LABELS
                .iter()
                .filter_map(|key| {
                    labels
                        .get(*key)
                        .filter(|value| !value.is_empty())
                        .map(|value| (key.to_string(), value.clone()))
                })
                .collect()
        })
        .unwrap_or_default();

    Ok((
        DesiredTopology {
            annotations,
            labels,
            topology_policies: vec![TopologyManagerPolicy::None],
            zones: build_zones(hardware, node),
            pools,
        },
        problems,
    ))
}

fn json_equal(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn quantity_equal(a: &Quantity, b: &Quantity) -> bool {
    match (QuantityValue::of(a), QuantityValue::of(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn managed_resources(zone: &Zone) -> BTreeMap<&str, &ResourceInfo> {
    zone.resources
        .iter()
        .flatten()
        .filter(|info| MANAGED_RESOURCES.contains(&info.name.as_str()))
        .map(|info| (info.name.as_str(), info))
        .collect()
}

impl DesiredTopology {
    /// Why `existing` differs from this content (`None`: no write needed).
    /// Annotations compare as JSON values, quantities by value; what other
    /// components added (annotations, zone resources) is ignored.
    pub fn change_reason(&self, existing: &NodeResourceTopology) -> Option<String> {
        let empty = BTreeMap::new();
        let annotations = existing.metadata.annotations.as_ref().unwrap_or(&empty);
        if existing.topology_policies != self.topology_policies {
            return Some("topologyPolicies changed".to_string());
        }
        for key in MANAGED_ANNOTATIONS {
            match (annotations.get(key), self.annotations.get(key)) {
                (None, None) => {}
                (Some(old), Some(new)) if json_equal(old, new) => {}
                _ => return Some(format!("annotation {key} changed")),
            }
        }
        let labels = existing.metadata.labels.as_ref().unwrap_or(&empty);
        for key in MANAGED_LABELS {
            if labels.get(key) != self.labels.get(key) {
                return Some(format!("label {key} changed"));
            }
        }
        let mut old_zones: Vec<&Zone> = existing.zones.iter().collect();
        old_zones.sort_by(|a, b| a.name.cmp(&b.name));
        if old_zones.len() != self.zones.len() {
            return Some("number of zones changed".to_string());
        }
        for (old, new) in old_zones.into_iter().zip(&self.zones) {
            if old.name != new.name || old.type_ != new.type_ {
                return Some(format!("zone {} renamed or retyped", new.name));
            }
            let (old_res, new_res) = (managed_resources(old), managed_resources(new));
            if old_res.len() != new_res.len() {
                return Some(format!("resources of zone {} changed", new.name));
            }
            for (name, new_info) in new_res {
                let same = old_res.get(name).is_some_and(|old_info| {
                    quantity_equal(&old_info.capacity, &new_info.capacity)
                        && quantity_equal(&old_info.allocatable, &new_info.allocatable)
                        && quantity_equal(&old_info.available, &new_info.available)
                });
                if !same {
                    return Some(format!("resource {name} of zone {} changed", new.name));
                }
            }
        }
        None
    }

    /// Merges this content into `object`: managed annotations and labels
    /// are set (a managed label gone from the Node is removed), policies
    /// replaced, zones replaced while keeping resources other components
    /// added to a zone of the same name.
    pub fn apply_to(&self, object: &mut NodeResourceTopology) {
        let annotations = object
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        for (key, value) in &self.annotations {
            annotations.insert(key.clone(), value.clone());
        }
        let labels = object.metadata.labels.get_or_insert_with(BTreeMap::new);
        for key in MANAGED_LABELS {
            match self.labels.get(key) {
                Some(value) => labels.insert(key.to_string(), value.clone()),
                None => labels.remove(key),
            };
        }
        object.topology_policies = self.topology_policies.clone();
        let old_zones = std::mem::take(&mut object.zones);
        object.zones = self
            .zones
            .iter()
            .map(|zone| {
                let mut zone = zone.clone();
                let foreign = old_zones
                    .iter()
                    .find(|old| old.name == zone.name)
                    .and_then(|old| old.resources.as_ref())
                    .map(|resources| {
                        resources
                            .iter()
                            .filter(|info| !MANAGED_RESOURCES.contains(&info.name.as_str()))
                            .cloned()
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default();
                if !foreign.is_empty() {
                    let resources = zone.resources.get_or_insert_with(Vec::new);
                    resources.extend(foreign);
                    resources.sort_by(|a, b| a.name.cmp(&b.name));
                }
                zone
            })
            .collect();
    }

    /// A new object named after the node, owned by the Node when its UID is
    /// known (so it goes away with the Node), with this content.
    pub fn new_object(&self, node_name: &str, node: Option<&Node>) -> NodeResourceTopology {
        let mut object = NodeResourceTopology::new(node_name);
        object.metadata.labels = Some(BTreeMap::from([(
            LABEL_MANAGED_BY.to_string(),
            MANAGED_BY_KOORDINATOR.to_string(),
        )]));
        if let Some(uid) = node.and_then(|node| node.metadata.uid.clone()) {
            object.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".to_string(),
                kind: "Node".to_string(),
                name: node_name.to_string(),
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]);
        }
        self.apply_to(&mut object);
        object
    }
}

/// Result of one API round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncOutcome {
    Created,
    Updated(String),
    Unchanged,
}

/// Reads the hardware; called off the async reactor.
pub type HardwareSource = Arc<dyn Fn() -> Result<NodeHardware, NodeTopologyError> + Send + Sync>;

/// The I/O shell: computes the desired topology from the states informer
/// and the hardware, and reports it (see the module doc).
pub struct NodeTopologyReporter {
    states: StatesInformer,
    hardware: HardwareSource,
    client: Option<kube::Client>,
    output: Option<PathBuf>,
    interval: Duration,
    debounce: Duration,
    resync: Duration,
    last_reported: Option<DesiredTopology>,
    last_checked: Option<tokio::time::Instant>,
    last_problems: Vec<String>,
    last_written: Option<String>,
}

impl NodeTopologyReporter {
    /// `client`: report to the API server; `output`: also write the object
    /// to this file.
    pub fn new(
        states: StatesInformer,
        hardware: HardwareSource,
        client: Option<kube::Client>,
        output: Option<PathBuf>,
    ) -> Self {
        Self {
            states,
            hardware,
            client,
            output,
            interval: DEFAULT_SYNC_INTERVAL,
            debounce: Duration::from_millis(500),
            resync: Duration::from_secs(60),
            last_reported: None,
            last_checked: None,
            last_problems: Vec::new(),
            last_written: None,
        }
    }

    /// How often the content is recomputed.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Quiet time after a pod or Node change before recomputing.
    pub fn with_debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// How long an unchanged content goes without re-reading the object
    /// from the API server (repairs edits and deletions by others).
    pub fn with_resync(mut self, resync: Duration) -> Self {
        self.resync = resync;
        self
    }

    /// Computes the desired content; `None` while pods (or, with an API
    /// server, the Node) are not known yet.
    pub async fn desired(&mut self) -> Result<Option<DesiredTopology>, NodeTopologyError> {
        let Some(pods) = self.states.pods() else {
            return Ok(None);
        };
        let node = self.states.node();
        if self.client.is_some() && node.is_none() {
            return Ok(None);
        }
        let hardware = Arc::clone(&self.hardware);
        let hardware = tokio::task::spawn_blocking(move || hardware())
            .await
            .map_err(|err| NodeTopologyError::Malformed {
                path: PathBuf::from("/sys"),
                reason: format!("hardware reader failed: {err}"),
            })??;
        let (desired, problems) = build_desired_topology(&hardware, node.as_deref(), &pods.pods)?;
        if problems != self.last_problems {
            for problem in &problems {
                tracing::warn!(problem = %problem, "node topology input skipped: {problem}");
            }
            self.last_problems = problems;
        }
        Ok(Some(desired))
    }

    /// One round: compute, then report where configured.
    pub async fn report_once(&mut self) -> Result<Option<SyncOutcome>, NodeTopologyError> {
        let Some(desired) = self.desired().await? else {
            tracing::debug!("node topology waits for pods and the Node");
            return Ok(None);
        };
        let node = self.states.node();
        let name = self.states.node_name().to_string();
        if let Some(path) = self.output.clone() {
            let object = desired.new_object(&name, node.as_deref());
            let text =
                serde_json::to_string_pretty(&object).map_err(|err| NodeTopologyError::Encode {
                    key: "NodeResourceTopology",
                    reason: err.to_string(),
                })?;
            if self.last_written.as_deref() != Some(text.as_str()) {
                let write_path = path.clone();
                let contents = text.clone();
                tokio::task::spawn_blocking(move || {
                    super::nodemetric::write_atomically(&write_path, &contents)
                })
                .await
                .map_err(|err| NodeTopologyError::Write {
                    path: path.clone(),
                    source: std::io::Error::other(err.to_string()),
                })?
                .map_err(|source| NodeTopologyError::Write {
                    path: path.clone(),
                    source,
                })?;
                tracing::info!(path = %path.display(), "node topology written");
                self.last_written = Some(text);
            }
        }
        let Some(client) = self.client.clone() else {
            return Ok(None);
        };
        let fresh = self
            .last_checked
            .is_some_and(|checked| checked.elapsed() < self.resync);
        if fresh && self.last_reported.as_ref() == Some(&desired) {
            return Ok(Some(SyncOutcome::Unchanged));
        }
        let outcome = sync_to_api(client, &name, node.as_deref(), &desired).await?;
        match &outcome {
            SyncOutcome::Created => tracing::info!(name = %name, "NodeResourceTopology created"),
            SyncOutcome::Updated(reason) => {
                tracing::info!(name = %name, reason = %reason, "NodeResourceTopology updated: {reason}")
            }
            SyncOutcome::Unchanged => {
                tracing::debug!(name = %name, "NodeResourceTopology up to date")
            }
        }
        self.last_reported = Some(desired);
        self.last_checked = Some(tokio::time::Instant::now());
        Ok(Some(outcome))
    }

    /// Reports until shutdown: at start, after pod or Node changes
    /// (debounced) and every interval.
    pub async fn run(mut self, shutdown: Shutdown) {
        tracing::info!(
            interval = ?self.interval,
            apiserver = self.client.is_some(),
            output = ?self.output,
            "reporting the node topology"
        );
        let mut pods = self.states.subscribe_pods();
        let mut node = self.states.subscribe_node();
        // A persistent failure (e.g. the CRD is not installed) is warned
        // about once, not every interval.
        let mut last_error: Option<String> = None;
        loop {
            match self.report_once().await {
                Ok(_) => {
                    if last_error.take().is_some() {
                        tracing::info!("node topology report recovered");
                    }
                }
                Err(err) => {
                    let text = err.to_string();
                    if last_error.as_deref() == Some(text.as_str()) {
                        tracing::debug!(error = %text, "node topology report still failing");
                    } else {
                        tracing::warn!(error = %text, "node topology report failed: {text}");
                        last_error = Some(text);
                    }
                }
            }
            let changed = tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(self.interval) => false,
                result = pods.changed() => result.is_ok(),
                result = node.changed() => result.is_ok(),
            };
            if changed {
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = tokio::time::sleep(self.debounce) => {}
                }
                pods.mark_unchanged();
                node.mark_unchanged();
            }
        }
    }
}

/// Creates the object when missing, replaces it when its content differs.
pub async fn sync_to_api(
    client: kube::Client,
    name: &str,
    node: Option<&Node>,
    desired: &DesiredTopology,
) -> Result<SyncOutcome, NodeTopologyError> {
    let api = kube::Api::<NodeResourceTopology>::all(client);
    let api_error = |source| NodeTopologyError::Api {
        name: name.to_string(),
        source,
    };
    let params = kube::api::PostParams::default();
    match api.get_opt(name).await.map_err(api_error)? {
        None => {
            api.create(&params, &desired.new_object(name, node))
                .await
                .map_err(api_error)?;
            Ok(SyncOutcome::Created)
        }
        Some(existing) => match desired.change_reason(&existing) {
            None => Ok(SyncOutcome::Unchanged),
            Some(reason) => {
                let mut updated = existing;
                desired.apply_to(&mut updated);
                // The resourceVersion read above guards against lost updates:
                // on conflict the next round starts over from a fresh read.
                api.replace(name, &params, &updated)
                    .await
                    .map_err(api_error)?;
                Ok(SyncOutcome::Updated(reason))
            }
        },
    }
}

/// Whether `--feature-gates` leaves `NodeTopologyReport` on (the default).
pub fn report_gate(feature_gates: &str) -> bool {
    crate::features::parse_feature_gates(feature_gates)
        .ok()
        .and_then(|gates| gates.get(NODE_TOPOLOGY_REPORT_GATE).copied())
        .unwrap_or(true)
}

/// Starts the reporter: API reporting in cluster mode unless the
/// `NodeTopologyReport` gate is off; the file output when configured. The
/// CPU topology comes from `cache` when its collector has filled it.
pub fn spawn(
    args: &NodeTopologyArgs,
    states: &StatesInformer,
    system: &SystemArgs,
    cache: Option<Arc<MetricCache>>,
    client: Option<kube::Client>,
    report_gate: bool,
    shutdown: Shutdown,
) {
    let client = client.filter(|_| report_gate);
    if client.is_none() && args.node_topology_output.is_none() {
        tracing::info!(
            "node topology is not reported (no API server or gate off, no --node-topology-output)"
        );
        return;
    }
    // The topology collector keeps the CPU topology in the metric cache;
    // sysfs is read only until it has.
    let kubelet_root = args.var_lib_kubelet_dir.clone();
    let system = system.clone();
    let hardware: HardwareSource = Arc::new(move || {
        let known = cache.as_ref().and_then(|cache| cache.cpu_topology());
        read_node_facts(
            &system,
            &kubelet_root,
            known.map(|cpus| CpuTopology::clone(&cpus)),
        )
    });
    let reporter = NodeTopologyReporter::new(
        states.clone(),
        hardware,
        client,
        args.node_topology_output.clone(),
    )
    .with_interval(args.node_topology_sync_interval);
    tokio::spawn(reporter.run(shutdown));
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// 2 sockets = 2 NUMA nodes, 2 cores each, 2 threads per core:
    /// CPU n and n+4 are siblings (like Linux numbers them).
    fn two_socket_smt() -> NodeHardware {
        let cpus = (0..8u32)
            .map(|cpu| {
                let thread_base = cpu % 4;
                CpuInfo {
                    cpu,
                    core: thread_base,
                    socket: thread_base / 2,
                    node: thread_base / 2,
                }
            })
            .collect();
        NodeHardware {
            cpus: CpuTopology { cpus },
            numa_memory_bytes: BTreeMap::from([(0, 8 << 30), (1, 8 << 30)]),
            ..NodeHardware::default()
        }
    }

    fn pod(name: &str, qos: &str, cpuset: Option<&str>, phase: &str) -> Pod {
        let mut annotations = BTreeMap::new();
        if let Some(cpuset) = cpuset {
            annotations.insert(
                "scheduling.koordinator.sh/resource-status".to_string(),
                format!(r#"{{"cpuset":"{cpuset}"}}"#),
            );
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": "default",
                "labels": {"koordinator.sh/qosClass": qos},
                "annotations": annotations,
            },
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn node(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Node {
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        Node {
            metadata: ObjectMeta {
                name: Some("node-a".to_string()),
                uid: Some("uid-1".to_string()),
                annotations: map(annotations),
                labels: map(labels),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn set(text: &str) -> CpuSet {
        text.parse().unwrap()
    }

    #[test]
    fn share_pools_drop_lse_lsr_cpus_and_withheld_cpus() {
        let all = set("0-7");
        let pods = [
            pod("lse", "LSE", Some("0,4"), "Running"),
            pod("lsr", "LSR", Some("1,5"), "Running"),
            pod("ls", "LS", Some("2"), "Running"),
            pod("done", "LSR", Some("3"), "Succeeded"),
            pod("be", "BE", None, "Running"),
        ];
        let (pools, problems) = cpu_share_pools(&all, &pods, &set("7"));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(pools.ls, set("2-3,6"));
        // BE may use what LSR pods hold but not what LSE pods hold.
        assert_eq!(pools.be, set("1-3,5-6"));
    }

    #[test]
    fn malformed_pod_status_is_reported_and_skipped() {
        let pods = [
            pod("bad", "LSR", Some("x-y"), "Running"),
            pod("good", "LSE", Some("0"), "Running"),
        ];
        let (pools, problems) = cpu_share_pools(&set("0-3"), &pods, &CpuSet::new());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("default/bad"), "{problems:?}");
        assert_eq!(pools.ls, set("1-3"));
    }

    #[test]
    fn pools_split_per_numa_node_in_socket_order() {
        let hardware = two_socket_smt();
        let pools = pools_per_numa_node(&set("1-3,5-7"), &hardware.cpus);
        assert_eq!(
            pools,
            vec![
                CPUSharedPool {
                    socket: 0,
                    node: 0,
                    cpuset: "1,5".to_string()
                },
                CPUSharedPool {
                    socket: 1,
                    node: 1,
                    cpuset: "2-3,6-7".to_string()
                },
            ]
        );
    }

    #[test]
    fn reserved_cpus_by_count_take_whole_cores_then_threads() {
        let hardware = two_socket_smt();
        // One whole core: CPU 0 and its sibling 4.
        assert_eq!(take_cpus_by_topology(&hardware.cpus, 2), set("0,4"));
        // A whole socket (cores 0 and 1 of socket 0).
        assert_eq!(take_cpus_by_topology(&hardware.cpus, 4), set("0-1,4-5"));
        // A whole socket, then a whole core of the other one.
        assert_eq!(take_cpus_by_topology(&hardware.cpus, 6), set("0-2,4-6"));
        // Odd count: a core, then one thread.
        assert_eq!(take_cpus_by_topology(&hardware.cpus, 3).len(), 3);
        assert!(take_cpus_by_topology(&hardware.cpus, 3).is_superset(&set("0,4")));
        assert_eq!(take_cpus_by_topology(&hardware.cpus, 0), CpuSet::new());
        assert_eq!(take_cpus_by_topology(&hardware.cpus, 99), set("0-7"));
    }

    #[test]
    fn node_reservation_explicit_cpus_win_and_amounts_round_up() {
        let hardware = two_socket_smt();
        let annotations: StringMap = [(
            "node.koordinator.sh/reservation".to_string(),
            r#"{"resources":{"cpu":"1500m"}}"#.to_string(),
        )]
        .into();
        let (reservation, cpus, problem) = node_reservation(&annotations, &hardware.cpus);
        assert_eq!(problem, None);
        assert_eq!(cpus, set("0,4"));
        assert_eq!(reservation.reserved_cpus, "0,4");
        let annotations: StringMap = [(
            "node.koordinator.sh/reservation".to_string(),
            r#"{"resources":{"cpu":"1"},"reservedCPUs":"3"}"#.to_string(),
        )]
        .into();
        let (_, cpus, _) = node_reservation(&annotations, &hardware.cpus);
        assert_eq!(cpus, set("3"));
        let broken: StringMap = [(
            "node.koordinator.sh/reservation".to_string(),
            "{".to_string(),
        )]
        .into();
        let (reservation, cpus, problem) = node_reservation(&broken, &hardware.cpus);
        assert!(problem.is_some());
        assert!(cpus.is_empty());
        assert_eq!(reservation, NodeReservation::default());
    }

    #[test]
    fn desired_topology_reads_like_upstream_for_the_scheduler() {
        let hardware = two_socket_smt();
        let node = node(
            &[
                ("node.koordinator.sh/reservation", r#"{"reservedCPUs":"7"}"#),
                (
                    "node.koordinator.sh/system-qos-resource",
                    r#"{"cpuset":"3"}"#,
                ),
            ],
            &[("node.koordinator.sh/enable-numa-reservation", "false")],
        );
        let pods = [pod("lse", "LSE", Some("0,4"), "Running")];
        let (desired, problems) = build_desired_topology(&hardware, Some(&node), &pods).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let annotations = &desired.annotations;
        let topology = apis::extension::get_cpu_topology(annotations)
            .unwrap()
            .unwrap();
        assert_eq!(topology.detail.len(), 8);
        assert_eq!(
            topology.detail[5],
            CPUInfo {
                id: 5,
                core: 1,
                socket: 0,
                node: 0
            }
        );
        let ls = apis::extension::get_node_cpu_shared_pools(annotations)
            .unwrap()
            .unwrap();
        let ls_text: Vec<&str> = ls.iter().map(|p| p.cpuset.as_str()).collect();
        // 0,4 bound to LSE; 3 exclusive SYSTEM; 7 reserved.
        assert_eq!(ls_text, ["1,5", "2,6"]);
        let be = apis::extension::get_node_be_cpu_shared_pools(annotations)
            .unwrap()
            .unwrap();
        assert_eq!(be.len(), 2);
        assert_eq!(
            annotations["node.koordinator.sh/reservation"],
            r#"{"reservedCPUs":"7"}"#
        );
        assert!(json_equal(
            &annotations["node.koordinator.sh/system-qos-resource"],
            r#"{"cpuset":"3"}"#
        ));
        assert_eq!(
            annotations["kubelet.koordinator.sh/cpu-manager-policy"],
            "{}"
        );
        assert_eq!(annotations["node.koordinator.sh/pod-cpu-allocs"], "[]");
        assert_eq!(
            desired
                .labels
                .get("node.koordinator.sh/enable-numa-reservation"),
            Some(&"false".to_string())
        );
        assert_eq!(desired.topology_policies, [TopologyManagerPolicy::None]);
        let names: Vec<&str> = desired.zones.iter().map(|z| z.name.as_str()).collect();
        assert_eq!(names, ["node-0", "node-1"]);
        let resources = desired.zones[1].resources.as_ref().unwrap();
        let cpu = resources.iter().find(|r| r.name == "cpu").unwrap();
        assert_eq!(cpu.capacity, Quantity("4".to_string()));
        let memory = resources.iter().find(|r| r.name == "memory").unwrap();
        assert_eq!(memory.allocatable, Quantity((8u64 << 30).to_string()));
    }

    #[test]
    fn numa_reservation_label_takes_node_reserved_evenly_from_zones() {
        let hardware = two_socket_smt();
        let mut node = node(
            &[],
            &[("node.koordinator.sh/enable-numa-reservation", "true")],
        );
        node.status = serde_json::from_value(serde_json::json!({
            "capacity": {"cpu": "8", "memory": "16Gi"},
            "allocatable": {"cpu": "7", "memory": "15Gi"},
        }))
        .unwrap();
        let zones = build_zones(&hardware, Some(&node));
        for zone in &zones {
            let resources = zone.resources.as_ref().unwrap();
            let cpu = resources.iter().find(|r| r.name == "cpu").unwrap();
            assert_eq!(cpu.capacity, Quantity("4".to_string()));
            assert_eq!(cpu.allocatable, Quantity("3500m".to_string()));
            let memory = resources.iter().find(|r| r.name == "memory").unwrap();
            assert_eq!(
                memory.allocatable,
                Quantity(((8u64 << 30) - (512u64 << 20)).to_string())
            );
        }
    }

    #[test]
    fn unchanged_content_needs_no_write_and_changes_are_named() {
        let hardware = two_socket_smt();
        let node = node(&[], &[]);
        let (desired, _) = build_desired_topology(&hardware, Some(&node), &[]).unwrap();
        let mut existing = desired.new_object("node-a", Some(&node));
        assert_eq!(desired.change_reason(&existing), None);
        assert_eq!(
            existing.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-1"
        );
        // Same JSON with other spacing, quantities in another spelling, and
        // foreign annotations and zone resources: still unchanged.
        let annotations = existing.metadata.annotations.as_mut().unwrap();
        let pools = annotations["node.koordinator.sh/cpu-shared-pools"].clone();
        let spaced = serde_json::to_string_pretty(
            &serde_json::from_str::<serde_json::Value>(&pools).unwrap(),
        )
        .unwrap();
        annotations.insert("node.koordinator.sh/cpu-shared-pools".to_string(), spaced);
        annotations.insert("other/key".to_string(), "x".to_string());
        let zone = &mut existing.zones[0];
        let resources = zone.resources.as_mut().unwrap();
        resources
            .iter_mut()
            .find(|r| r.name == "memory")
            .unwrap()
            .capacity = Quantity("8Gi".to_string());
        resources.push(ResourceInfo {
            name: "example.com/nic".to_string(),
            capacity: Quantity("2".to_string()),
            allocatable: Quantity("2".to_string()),
            available: Quantity("1".to_string()),
        });
        assert_eq!(desired.change_reason(&existing), None);

        // An LSR pod bound to CPUs 1,5 changes the pools.
        let pods = [pod("lsr", "LSR", Some("1,5"), "Running")];
        let (changed, _) = build_desired_topology(&hardware, Some(&node), &pods).unwrap();
        let reason = changed.change_reason(&existing).unwrap();
        assert!(reason.contains("cpu-shared-pools"), "{reason}");
        changed.apply_to(&mut existing);
        assert_eq!(changed.change_reason(&existing), None);
        // Merge kept what others wrote.
        assert_eq!(
            existing.metadata.annotations.as_ref().unwrap()["other/key"],
            "x"
        );
        assert!(
            existing.zones[0]
                .resources
                .as_ref()
                .unwrap()
                .iter()
                .any(|r| r.name == "example.com/nic")
        );
        let lost_zone = NodeResourceTopology {
            zones: existing.zones[..1].to_vec(),
            ..existing.clone()
        };
        assert!(changed.change_reason(&lost_zone).is_some());
    }

    #[test]
    fn kubelet_static_pins_are_reported_and_leave_the_pools() {
        let checkpoint: CpuManagerCheckpoint = serde_json::from_str(
            r#"{"policyName":"static","defaultCpuSet":"0,3-5","entries":{
                "u-guaranteed":{"a":"2","b":"6"},
                "u-lsr":{"main":"1"},
                "u-ls":{"main":"3"},
                "u-gone":{"main":"7"},
                "u-empty":{"main":""}
            },"checksum":12345}"#,
        )
        .unwrap();
        let mut guaranteed: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g", "namespace": "ns", "uid": "u-guaranteed"}
        }))
        .unwrap();
        guaranteed.status = None;
        let mut lsr = pod("lsr", "LSR", Some("1"), "Running");
        lsr.metadata.uid = Some("u-lsr".to_string());
        let mut ls = pod("ls", "LS", None, "Running");
        ls.metadata.uid = Some("u-ls".to_string());
        let pods = [guaranteed, lsr, ls];
        let hardware = NodeHardware {
            kubelet_cpu_manager: Some(checkpoint.clone()),
            ..two_socket_smt()
        };
        let (desired, problems) = build_desired_topology(&hardware, None, &pods).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let allocs = apis::extension::get_pod_cpu_allocs(&desired.annotations)
            .unwrap()
            .unwrap();
        assert_eq!(
            allocs,
            vec![
                PodCPUAlloc {
                    uid: "u-gone".to_string(),
                    cpuset: "7".to_string(),
                    managed_by_kubelet: true,
                    ..PodCPUAlloc::default()
                },
                PodCPUAlloc {
                    namespace: "ns".to_string(),
                    name: "g".to_string(),
                    uid: "u-guaranteed".to_string(),
                    cpuset: "2,6".to_string(),
                    managed_by_kubelet: true,
                },
            ]
        );
        // LSR CPU 1 and the kubelet's 2, 6, 7 are out of the LS pool.
        assert_eq!(desired.pools.ls, set("0,3-5"));
        assert_eq!(desired.pools.be, set("0-1,3-5"));
        assert_eq!(
            desired.annotations["kubelet.koordinator.sh/cpu-manager-policy"],
            r#"{"policy":"static"}"#
        );

        // The none policy pins nothing, whatever its checkpoint says.
        let none = NodeHardware {
            kubelet_cpu_manager: Some(CpuManagerCheckpoint {
                policy_name: "none".to_string(),
                ..checkpoint
            }),
            ..two_socket_smt()
        };
        let (desired, _) = build_desired_topology(&none, None, &pods).unwrap();
        assert_eq!(
            desired.annotations["node.koordinator.sh/pod-cpu-allocs"],
            "[]"
        );
        assert_eq!(
            desired.annotations["kubelet.koordinator.sh/cpu-manager-policy"],
            r#"{"policy":"none"}"#
        );
        assert_eq!(desired.pools.ls, set("0,2-7"));
    }

    #[test]
    fn kubelet_checkpoint_absent_empty_or_malformed() {
        let dir = koord_common::testing::TempDir::new("nodetopo-kubelet").unwrap();
        assert_eq!(read_cpu_manager_checkpoint(dir.path()).unwrap(), None);
        let path = dir.path().join(CPU_MANAGER_STATE_FILE);
        std::fs::write(&path, "\n").unwrap();
        assert_eq!(read_cpu_manager_checkpoint(dir.path()).unwrap(), None);
        std::fs::write(&path, r#"{"policyName":"none","entries":null}"#).unwrap();
        assert_eq!(
            read_cpu_manager_checkpoint(dir.path()).unwrap(),
            Some(CpuManagerCheckpoint {
                policy_name: "none".to_string(),
                ..CpuManagerCheckpoint::default()
            })
        );
        std::fs::write(&path, "{").unwrap();
        let err = read_cpu_manager_checkpoint(dir.path()).unwrap_err();
        assert!(err.to_string().contains("cpu_manager_state"), "{err}");
    }

    #[test]
    fn report_gate_defaults_on() {
        assert!(report_gate(""));
        assert!(report_gate("CPUSetAllocator=false"));
        assert!(!report_gate("NodeTopologyReport=false,CPUBurst=true"));
    }

    #[test]
    fn malformed_node_annotations_do_not_stop_the_report() {
        let hardware = two_socket_smt();
        let node = node(
            &[
                ("node.koordinator.sh/reservation", "{"),
                ("node.koordinator.sh/system-qos-resource", "["),
            ],
            &[],
        );
        let (desired, problems) = build_desired_topology(&hardware, Some(&node), &[]).unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(desired.pools.ls, set("0-7"));
    }

    /// A generated host: `proc/cpuinfo`, `sys/...` and `sys/fs/resctrl`
    /// below one temporary directory, each written only when given.
    struct FakeHost {
        dir: koord_common::testing::TempDir,
    }

    impl FakeHost {
        fn new(cpuinfo: Option<&str>, no_turbo: Option<&str>, cbm_mask: Option<&str>) -> Self {
            let dir = koord_common::testing::TempDir::new("nodetopo-basic-info").unwrap();
            let system = SystemArgs::under(dir.path());
            let write = |path: PathBuf, text: &str| {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, text).unwrap();
            };
            if let Some(text) = cpuinfo {
                write(system.proc_root_dir.join("cpuinfo"), text);
            }
            if let Some(text) = no_turbo {
                write(system.sys_root_dir.join(INTEL_PSTATE_NO_TURBO), text);
            }
            if let Some(text) = cbm_mask {
                write(system.resctrl_root().join(RESCTRL_L3_CBM_MASK), text);
            }
            Self { dir }
        }

        fn basic_info(&self, topology: &CpuTopology) -> CPUBasicInfo {
            let system = SystemArgs::under(self.dir.path());
            read_cpu_basic_info(
                &system.proc_root_dir,
                &system.sys_root_dir,
                &system.resctrl_root(),
                topology,
            )
        }
    }

    fn cpuinfo_block(processor: u32, vendor: &str, model: &str) -> String {
        format!(
            "processor\t: {processor}\nvendor_id\t: {vendor}\ncpu family\t: 6\n\
             model\t\t: 106\nmodel name\t: {model}\nflags\t\t: fpu cat_l3\n\n"
        )
    }

    /// One CPU per core: no SMT.
    fn no_smt(count: u32) -> CpuTopology {
        CpuTopology {
            cpus: (0..count)
                .map(|cpu| CpuInfo {
                    cpu,
                    core: cpu,
                    socket: 0,
                    node: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn basic_info_of_an_intel_node_with_turbo_and_cat() {
        let model = "Intel(R) Xeon(R) Platinum 8369B CPU @ 2.90GHz";
        let cpuinfo =
            cpuinfo_block(0, "GenuineIntel", model) + &cpuinfo_block(1, "GenuineIntel", model);
        let host = FakeHost::new(Some(&cpuinfo), Some("0\n"), Some("7ff\n"));
        let info = host.basic_info(&two_socket_smt().cpus);
        assert_eq!(
            info,
            CPUBasicInfo {
                cpu_model: model.to_string(),
                hyper_thread_enabled: true,
                turbo_enabled: true,
                cat_l3_cbm_mask: "7ff".to_string(),
                vendor_id: "GenuineIntel".to_string(),
            }
        );
        assert_eq!(
            info.key(),
            format!("{model}_true_true"),
            "the ratio model's lookup key"
        );
        // Turbo switched off by intel_pstate.
        let host = FakeHost::new(Some(&cpuinfo), Some("1\n"), None);
        assert!(!host.basic_info(&two_socket_smt().cpus).turbo_enabled);
    }

    #[test]
    fn basic_info_of_an_amd_node_without_intel_pstate_or_resctrl() {
        let model = "AMD EPYC 7763 64-Core Processor";
        let host = FakeHost::new(Some(&cpuinfo_block(0, "AuthenticAMD", model)), None, None);
        let info = host.basic_info(&no_smt(4));
        assert_eq!(
            info,
            CPUBasicInfo {
                cpu_model: model.to_string(),
                vendor_id: "AuthenticAMD".to_string(),
                ..CPUBasicInfo::default()
            }
        );
        // Empty parts are left out of the annotation, as upstream's omitempty.
        let mut annotations = StringMap::new();
        set_cpu_basic_info(&mut annotations, &info).unwrap();
        let value: serde_json::Value =
            serde_json::from_str(&annotations[ANNOTATION_CPU_BASIC_INFO]).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"cpuModel": model, "vendorID": "AuthenticAMD"})
        );
    }

    #[test]
    fn basic_info_leaves_out_what_is_missing_or_malformed() {
        // No cpuinfo file at all.
        let host = FakeHost::new(None, Some("0"), None);
        let info = host.basic_info(&no_smt(2));
        assert_eq!(info.cpu_model, "");
        assert_eq!(info.vendor_id, "");
        assert!(info.turbo_enabled);

        // An arm64 cpuinfo has neither field; control characters and
        // whitespace-only values are rejected; a malformed no_turbo and
        // mask count as absent.
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\n";
        let host = FakeHost::new(Some(arm), Some("yes"), Some("fff-\n"));
        assert_eq!(host.basic_info(&no_smt(2)), CPUBasicInfo::default());

        let broken = "vendor_id\t:   \nmodel name\t: bad\u{7}name\n";
        let host = FakeHost::new(Some(broken), None, Some(""));
        assert_eq!(host.basic_info(&no_smt(2)), CPUBasicInfo::default());
    }

    #[test]
    fn cpu_identity_comes_from_the_first_processor_block() {
        let text = "\n".to_string()
            + &cpuinfo_block(0, "GenuineIntel", "First")
            + &cpuinfo_block(1, "AuthenticAMD", "Second");
        let identity = parse_cpu_identity(text.lines());
        assert_eq!(identity.model.as_deref(), Some("First"));
        assert_eq!(identity.vendor.as_deref(), Some("GenuineIntel"));
        // A field only in a later block is not searched for.
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\n\nmodel name\t: Late\n";
        let identity = parse_cpu_identity(text.lines());
        assert_eq!(identity.model, None);
        assert_eq!(identity.vendor.as_deref(), Some("GenuineIntel"));
        // Older arm kernels spell it "Model Name"; a colon in the value stays.
        let identity = parse_cpu_identity(["Model Name : ARMv8 rev 1 (v8l): x"]);
        assert_eq!(identity.model.as_deref(), Some("ARMv8 rev 1 (v8l): x"));
    }

    #[test]
    fn smt_is_more_than_one_cpu_on_a_core_of_a_socket() {
        assert!(hyper_threading_enabled(&two_socket_smt().cpus));
        assert!(!hyper_threading_enabled(&no_smt(4)));
        assert!(!hyper_threading_enabled(&CpuTopology::default()));
        // Core ids repeat across sockets without being siblings.
        let per_socket = CpuTopology {
            cpus: (0..4u32)
                .map(|cpu| CpuInfo {
                    cpu,
                    core: cpu % 2,
                    socket: cpu / 2,
                    node: cpu / 2,
                })
                .collect(),
        };
        assert!(!hyper_threading_enabled(&per_socket));
    }

    #[test]
    fn basic_info_is_a_managed_annotation() {
        let info = CPUBasicInfo {
            cpu_model: "Model A".to_string(),
            hyper_thread_enabled: true,
            vendor_id: "GenuineIntel".to_string(),
            ..CPUBasicInfo::default()
        };
        let hardware = NodeHardware {
            cpu_basic_info: info.clone(),
            ..two_socket_smt()
        };
        let (desired, _) = build_desired_topology(&hardware, None, &[]).unwrap();
        assert_eq!(
            apis::extension::get_cpu_basic_info(&desired.annotations)
                .unwrap()
                .unwrap(),
            info
        );
        let mut existing = desired.new_object("node-a", None);
        assert_eq!(desired.change_reason(&existing), None);

        // Turbo switched on: the report changes.
        let turbo = NodeHardware {
            cpu_basic_info: CPUBasicInfo {
                turbo_enabled: true,
                ..info
            },
            ..two_socket_smt()
        };
        let (changed, _) = build_desired_topology(&turbo, None, &[]).unwrap();
        let reason = changed.change_reason(&existing).unwrap();
        assert!(reason.contains(ANNOTATION_CPU_BASIC_INFO), "{reason}");
        changed.apply_to(&mut existing);
        assert_eq!(changed.change_reason(&existing), None);

        // Nothing known: `{}`, still written (upstream always writes it).
        let (empty, _) = build_desired_topology(&two_socket_smt(), None, &[]).unwrap();
        assert_eq!(empty.annotations[ANNOTATION_CPU_BASIC_INFO], "{}");
    }

    #[test]
    fn read_node_facts_takes_basic_info_from_the_configured_roots() {
        let host = FakeHost::new(
            Some(&cpuinfo_block(0, "GenuineIntel", "Model B")),
            Some("0"),
            Some("fffff"),
        );
        let system = SystemArgs::under(host.dir.path());
        let kubelet = koord_common::testing::TempDir::new("nodetopo-facts-kubelet").unwrap();
        let facts = read_node_facts(&system, kubelet.path(), Some(no_smt(2))).unwrap();
        assert_eq!(
            facts.cpu_basic_info,
            CPUBasicInfo {
                cpu_model: "Model B".to_string(),
                turbo_enabled: true,
                cat_l3_cbm_mask: "fffff".to_string(),
                vendor_id: "GenuineIntel".to_string(),
                ..CPUBasicInfo::default()
            }
        );
        assert!(facts.problems.is_empty(), "{:?}", facts.problems);
    }
}

//! The pure core below the NodeResourceTopology reporter and the runtime
//! hooks: what the node's hardware is ([`NodeHardware`]), the LS/BE share
//! pools ([`cpu_share_pools`], also the runtime hooks' CPUSetAllocator
//! pool), the node reservation and exclusive SYSTEM CPUs, and the CPU/NUMA
//! arithmetic of the topology annotations. No I/O.

use std::collections::BTreeMap;
use std::path::PathBuf;

use apis::extension::{
    CPUBasicInfo, CPUInfo, CPUSharedPool, CPUTopology, NodeReservation, QoSClass, StringMap,
    get_node_reservation, get_resource_status, get_system_qos_resource, qos_class_of_pod,
};
use k8s_openapi::api::core::v1::Pod;

use crate::statesinformer::cpumanager::CpuManagerCheckpoint;
use koord_common::units::CpuSet;
use koord_common::units::{CpuInfo, CpuTopology};

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

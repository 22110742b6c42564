//! The desired NodeResourceTopology (pure): [`build_desired_topology`] turns
//! the hardware, the Node and the pods into a [`DesiredTopology`] (zones,
//! share pools, reservation, kubelet allocations, basic info);
//! [`DesiredTopology::change_reason`] compares it with what the API server
//! holds and [`DesiredTopology::apply_to`] merges it in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use apis::extension::{
    ANNOTATION_CPU_BASIC_INFO, ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_BE_CPU_SHARED_POOLS, ANNOTATION_NODE_CPU_ALLOCS,
    ANNOTATION_NODE_CPU_SHARED_POOLS, ANNOTATION_NODE_CPU_TOPOLOGY, ANNOTATION_NODE_RESERVATION,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE, LABEL_MANAGED_BY, LABEL_NODE_ENABLE_NUMA_RESERVATION,
    QuantityValue, get_system_qos_resource, set_cpu_basic_info, set_cpu_topology,
    set_kubelet_cpu_manager_policy, set_node_be_cpu_shared_pools, set_node_cpu_shared_pools,
    set_pod_cpu_allocs,
};
use apis::topology::v1alpha1::{NodeResourceTopology, ResourceInfo, TopologyManagerPolicy, Zone};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::pools::{
    CpuSharePools, NodeHardware, NodeTopologyError, cpu_share_pools, cpu_topology_annotation,
    node_reservation, pools_per_numa_node, system_exclusive_cpus, zone_name,
};
use crate::statesinformer::cpumanager::kubelet_cpu_state;
use koord_common::units::CpuSet;

/// Zone type of a NUMA node (upstream `NodeZoneType`).
pub const NODE_ZONE_TYPE: &str = "Node";
/// Value of `app.kubernetes.io/managed-by` on objects koordlet creates.
pub const MANAGED_BY_KOORDINATOR: &str = "Koordinator";

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

pub(super) fn json_equal(a: &str, b: &str) -> bool {
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

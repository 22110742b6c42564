//! CPU (milli-cores) and memory (bytes) pairs read from Kubernetes objects:
//! pod requests, node capacity and reservations, metric usages.
//!
//! Malformed quantities count as zero (and are reported by the caller's
//! reason text only when they change a decision); a manager must never stop
//! because one object carries a bad value.

use std::collections::BTreeMap;

use apis::extension::{
    PriorityClass, QoSClass, QuantityValue, RESOURCE_CPU, RESOURCE_MEMORY, get_node_reservation,
    priority_class_of_pod, qos_class_of_pod,
};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A CPU amount in milli-cores and a memory amount in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuMem {
    pub milli_cpu: i64,
    pub memory_bytes: i64,
}

impl CpuMem {
    pub const ZERO: CpuMem = CpuMem {
        milli_cpu: 0,
        memory_bytes: 0,
    };

    pub const fn new(milli_cpu: i64, memory_bytes: i64) -> Self {
        CpuMem {
            milli_cpu,
            memory_bytes,
        }
    }

    /// The cpu and memory entries of a resource list; absent or malformed → 0.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Self {
        CpuMem {
            milli_cpu: list
                .get(RESOURCE_CPU)
                .and_then(|q| QuantityValue::of(q).ok())
                .map_or(0, QuantityValue::milli_value),
            memory_bytes: list
                .get(RESOURCE_MEMORY)
                .and_then(|q| QuantityValue::of(q).ok())
                .map_or(0, QuantityValue::value),
        }
    }

    pub fn plus(self, other: CpuMem) -> CpuMem {
        CpuMem {
            milli_cpu: self.milli_cpu.saturating_add(other.milli_cpu),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    pub fn minus(self, other: CpuMem) -> CpuMem {
        CpuMem {
            milli_cpu: self.milli_cpu.saturating_sub(other.milli_cpu),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
        }
    }

    pub fn max(self, other: CpuMem) -> CpuMem {
        CpuMem {
            milli_cpu: self.milli_cpu.max(other.milli_cpu),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }

    pub fn clamp_non_negative(self) -> CpuMem {
        self.max(CpuMem::ZERO)
    }
}

/// `value × ratio`, truncated toward zero as Go's `int64(float64(v) * r)`.
pub fn scale(value: i64, ratio: f64) -> i64 {
    (value as f64 * ratio) as i64
}

fn container_requests(container: &Container) -> CpuMem {
    container
        .resources
        .as_ref()
        .and_then(|resources| resources.requests.as_ref())
        .map_or(CpuMem::ZERO, CpuMem::from_list)
}

/// The pod's effective cpu/memory request as the scheduler counts it:
/// containers and sidecars summed, the largest init-container phase, plus
/// the pod overhead (Kubernetes `PodRequests`).
pub fn pod_request(pod: &Pod) -> CpuMem {
    let Some(spec) = pod.spec.as_ref() else {
        return CpuMem::ZERO;
    };
    let mut total = spec
        .containers
        .iter()
        .map(container_requests)
        .fold(CpuMem::ZERO, CpuMem::plus);
    let mut sidecars = CpuMem::ZERO;
    let mut init_peak = CpuMem::ZERO;
    for init in spec.init_containers.iter().flatten() {
        let request = container_requests(init);
        let phase = if init.restart_policy.as_deref() == Some("Always") {
            total = total.plus(request);
            sidecars = sidecars.plus(request);
            sidecars
        } else {
            request.plus(sidecars)
        };
        init_peak = init_peak.max(phase);
    }
    total = total.max(init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        total = total.plus(CpuMem::from_list(overhead));
    }
    total
}

/// Whether the pod still holds its node's resources (running or pending).
pub fn pod_is_active(pod: &Pod) -> bool {
    matches!(
        pod.status
            .as_ref()
            .and_then(|status| status.phase.as_deref()),
        Some("Running") | Some("Pending")
    )
}

/// `namespace/name`, the key NodeMetric pod entries are matched by.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// What the node resource calculation needs of a pod; small, so a cache of
/// tens of thousands of pods costs little.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSummary {
    /// `namespace/name`.
    pub key: String,
    pub priority: PriorityClass,
    pub qos: QoSClass,
    pub request: CpuMem,
    /// Running or pending.
    pub active: bool,
}

impl PodSummary {
    pub fn of(pod: &Pod) -> Self {
        PodSummary {
            key: pod_key(pod),
            priority: priority_class_of_pod(pod),
            qos: qos_class_of_pod(pod),
            request: pod_request(pod),
            active: pod_is_active(pod),
        }
    }
}

/// Node capacity (cpu, memory).
pub fn node_capacity(node: &Node) -> CpuMem {
    node.status
        .as_ref()
        .and_then(|status| status.capacity.as_ref())
        .map_or(CpuMem::ZERO, CpuMem::from_list)
}

/// Node allocatable (cpu, memory).
pub fn node_allocatable(node: &Node) -> CpuMem {
    node.status
        .as_ref()
        .and_then(|status| status.allocatable.as_ref())
        .map_or(CpuMem::ZERO, CpuMem::from_list)
}

/// What kubelet holds back: `max(capacity − allocatable, 0)`.
pub fn kubelet_reserved(node: &Node) -> CpuMem {
    node_capacity(node)
        .minus(node_allocatable(node))
        .clamp_non_negative()
}

/// What the `node.koordinator.sh/reservation` annotation holds back; explicit
/// reserved CPUs count as whole cores. A malformed annotation reserves nothing.
pub fn annotation_reserved(node: &Node) -> CpuMem {
    let Some(annotations) = node.metadata.annotations.as_ref() else {
        return CpuMem::ZERO;
    };
    let Ok(Some(reservation)) = get_node_reservation(annotations) else {
        return CpuMem::ZERO;
    };
    let mut reserved = CpuMem::from_list(&reservation.resources);
    if !reservation.reserved_cpus.is_empty() {
        match count_cpu_list(&reservation.reserved_cpus) {
            Some(count) => reserved.milli_cpu = count.saturating_mul(1000),
            None => return CpuMem::ZERO,
        }
    }
    reserved
}

/// The node's system reservation: the larger of kubelet's and the annotation's.
pub fn node_reserved(node: &Node) -> CpuMem {
    kubelet_reserved(node).max(annotation_reserved(node))
}

/// Number of CPUs in a Linux cpu-list such as `0-3,8,10-11`; `None` when malformed.
pub fn count_cpu_list(list: &str) -> Option<i64> {
    let mut cpus = std::collections::BTreeSet::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((start, end)) => {
                let start: u32 = start.trim().parse().ok()?;
                let end: u32 = end.trim().parse().ok()?;
                if end < start || end - start > 65_536 {
                    return None;
                }
                cpus.extend(start..=end);
            }
            None => {
                cpus.insert(part.parse::<u32>().ok()?);
            }
        }
    }
    i64::try_from(cpus.len()).ok()
}

/// Text of a milli-CPU amount as Kubernetes prints a decimal quantity.
pub fn milli_cpu_quantity(milli: i64) -> Quantity {
    Quantity(QuantityValue::from_milli(milli).to_decimal_si())
}

/// Text of a whole-unit amount in decimal form (`12000` → `12k`), as for batch-cpu.
pub fn units_decimal_quantity(units: i64) -> Quantity {
    Quantity(QuantityValue::from_units(units).to_decimal_si())
}

/// Text of a byte amount as Kubernetes prints a binary quantity.
pub fn bytes_quantity(bytes: i64) -> Quantity {
    Quantity(QuantityValue::from_units(bytes).to_binary_si())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn container(cpu: &str, memory: &str, restart_policy: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            restart_policy: restart_policy.map(str::to_owned),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity(cpu.into())),
                    ("memory".to_owned(), Quantity(memory.into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_request_sums_containers_and_takes_the_init_peak() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container("500m", "1Gi", None), container("1", "1Gi", None)],
                init_containers: Some(vec![container("4", "1Mi", None)]),
                overhead: Some(BTreeMap::from([(
                    "cpu".to_owned(),
                    Quantity("100m".into()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        };
        // cpu: max(1500, 4000) + 100; memory: max(2Gi, 1Mi).
        assert_eq!(pod_request(&pod), CpuMem::new(4100, 2 << 30));
    }

    #[test]
    fn sidecars_run_alongside_the_main_containers() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container("1", "0", None)],
                init_containers: Some(vec![
                    container("200m", "0", Some("Always")),
                    container("1", "0", None),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        // main phase 1000 + 200 sidecar; second init phase 1000 + 200.
        assert_eq!(pod_request(&pod).milli_cpu, 1200);
    }

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("1,1"), Some(1));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("a"), None);
    }

    #[test]
    fn quantities_print_like_kubernetes() {
        assert_eq!(units_decimal_quantity(12000).0, "12k");
        assert_eq!(units_decimal_quantity(12345).0, "12345");
        assert_eq!(bytes_quantity(16 << 30).0, "16Gi");
        assert_eq!(milli_cpu_quantity(1500).0, "1500m");
    }
}

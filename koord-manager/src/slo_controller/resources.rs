//! CPU (milli-cores) and memory (bytes) pairs read from Kubernetes objects:
//! pod requests, node capacity and reservations, metric usages.
//!
//! An amount is read exactly or refused: a quantity that does not parse, is
//! negative or does not fit in 64 bits, and a sum that overflows, are an
//! [`InputError`] naming the object and field, never zero or a clamped
//! value. The caller decides what a refusal means (the node resource
//! controller leaves the node's status as it is); a manager must never stop
//! because one object carries a bad value.

use std::collections::BTreeMap;

use apis::extension::{
    ANNOTATION_NODE_RESERVATION, PriorityClass, QoSClass, QuantityError, QuantityValue,
    RESOURCE_CPU, RESOURCE_MEMORY, get_node_reservation, milli_value_of, priority_class_of_pod,
    qos_class_of_pod, value_of,
};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// An amount the calculation cannot use, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {field}: {problem}")]
pub struct InputError {
    /// The object, e.g. `Node n1`, `Pod default/web`, `NodeMetric n1`.
    pub object: String,
    /// The field, e.g. `status.capacity.cpu`.
    pub field: String,
    pub problem: String,
}

impl InputError {
    pub fn new(
        object: impl Into<String>,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        InputError {
            object: object.into(),
            field: field.into(),
            problem: problem.into(),
        }
    }
}

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

    /// The cpu and memory entries of a resource list; an absent entry is 0.
    /// An entry that does not parse, is negative or does not fit in 64 bits
    /// is an error naming the object and field `place` gives (the list's
    /// path; only called then, so reading costs no allocation).
    pub fn read(
        list: &BTreeMap<String, Quantity>,
        place: impl Fn() -> (String, String),
    ) -> Result<Self, InputError> {
        let amount = |name: &str, convert: fn(&Quantity) -> Result<i64, QuantityError>| {
            let Some(quantity) = list.get(name) else {
                return Ok(0);
            };
            let refuse = |problem: String| {
                let (object, field) = place();
                InputError::new(object, format!("{field}.{name}"), problem)
            };
            match convert(quantity) {
                Err(error) => Err(refuse(format!(
                    "invalid quantity {:?}: {}",
                    error.value, error.reason
                ))),
                Ok(value) if value < 0 => Err(refuse(format!("negative amount {:?}", quantity.0))),
                Ok(value) => Ok(value),
            }
        };
        Ok(CpuMem {
            milli_cpu: amount(RESOURCE_CPU, milli_value_of)?,
            memory_bytes: amount(RESOURCE_MEMORY, value_of)?,
        })
    }

    /// The sum, `None` when it does not fit in 64 bits.
    pub fn checked_plus(self, other: CpuMem) -> Option<CpuMem> {
        Some(CpuMem {
            milli_cpu: self.milli_cpu.checked_add(other.milli_cpu)?,
            memory_bytes: self.memory_bytes.checked_add(other.memory_bytes)?,
        })
    }

    /// The sum, or an error naming the object and what was being added up
    /// (`place` is only called then).
    pub fn try_plus(
        self,
        other: CpuMem,
        place: impl FnOnce() -> (String, String),
    ) -> Result<CpuMem, InputError> {
        self.checked_plus(other).ok_or_else(|| {
            let (object, what) = place();
            InputError::new(object, what, "the sum does not fit in 64 bits")
        })
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

fn container_requests(
    container: &Container,
    place: impl Fn() -> (String, String),
) -> Result<CpuMem, InputError> {
    match container
        .resources
        .as_ref()
        .and_then(|resources| resources.requests.as_ref())
    {
        Some(requests) => CpuMem::read(requests, place),
        None => Ok(CpuMem::ZERO),
    }
}

/// The pod's effective cpu/memory request as the scheduler counts it:
/// containers and sidecars summed, the largest init-container phase, plus
/// the pod overhead (Kubernetes `PodRequests`). An unreadable, negative or
/// overflowing amount is an error naming the pod and the field.
pub fn pod_request(pod: &Pod) -> Result<CpuMem, InputError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(CpuMem::ZERO);
    };
    let object = || format!("Pod {}", pod_key(pod));
    let at = |what: String| (object(), what);
    let mut total = CpuMem::ZERO;
    for (index, container) in spec.containers.iter().enumerate() {
        let request = container_requests(container, || {
            at(format!("spec.containers[{index}].resources.requests"))
        })?;
        total = total.try_plus(request, || {
            at("spec.containers[*].resources.requests".to_owned())
        })?;
    }
    let mut sidecars = CpuMem::ZERO;
    let mut init_peak = CpuMem::ZERO;
    for (index, init) in spec.init_containers.iter().flatten().enumerate() {
        let field = || format!("spec.initContainers[{index}].resources.requests");
        let request = container_requests(init, || at(field()))?;
        let phase = if init.restart_policy.as_deref() == Some("Always") {
            total = total.try_plus(request, || at(field()))?;
            sidecars = sidecars.try_plus(request, || at(field()))?;
            sidecars
        } else {
            request.try_plus(sidecars, || at(field()))?
        };
        init_peak = init_peak.max(phase);
    }
    total = total.max(init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        let overhead = CpuMem::read(overhead, || at("spec.overhead".to_owned()))?;
        total = total.try_plus(overhead, || at("spec.overhead".to_owned()))?;
    }
    Ok(total)
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
    /// The effective request, or why it cannot be read.
    pub request: Result<CpuMem, InputError>,
    /// Running or pending.
    pub active: bool,
    /// The NUMA nodes the scheduler bound the pod to (`numaNodeResources`
    /// of its `scheduling.koordinator.sh/resource-status` annotation),
    /// sorted, each once; empty when it has none.
    pub numa_nodes: Vec<i32>,
}

impl PodSummary {
    pub fn of(pod: &Pod) -> Self {
        PodSummary {
            key: pod_key(pod),
            priority: priority_class_of_pod(pod),
            qos: qos_class_of_pod(pod),
            request: pod_request(pod),
            active: pod_is_active(pod),
            numa_nodes: pod_numa_nodes(pod),
        }
    }
}

/// The NUMA nodes in the pod's `resource-status` annotation. An annotation
/// that does not parse counts as none, as upstream reads it: the pod's
/// amounts are then spread over every NUMA zone, like a pod that may run on
/// any CPU.
pub fn pod_numa_nodes(pod: &Pod) -> Vec<i32> {
    let Some(annotations) = pod.metadata.annotations.as_ref() else {
        return Vec::new();
    };
    let Ok(Some(status)) = apis::extension::get_resource_status(annotations) else {
        return Vec::new();
    };
    let mut nodes: Vec<i32> = status
        .numa_node_resources
        .iter()
        .map(|numa| numa.node)
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

fn node_object(node: &Node) -> String {
    format!("Node {}", node.metadata.name.as_deref().unwrap_or_default())
}

fn node_list(
    node: &Node,
    field: &str,
    list: impl FnOnce(&k8s_openapi::api::core::v1::NodeStatus) -> Option<&BTreeMap<String, Quantity>>,
) -> Result<CpuMem, InputError> {
    match node.status.as_ref().and_then(list) {
        Some(list) => CpuMem::read(list, || (node_object(node), field.to_owned())),
        None => Ok(CpuMem::ZERO),
    }
}

/// Node capacity (cpu, memory).
pub fn node_capacity(node: &Node) -> Result<CpuMem, InputError> {
    node_list(node, "status.capacity", |status| status.capacity.as_ref())
}

/// Node allocatable (cpu, memory).
pub fn node_allocatable(node: &Node) -> Result<CpuMem, InputError> {
    node_list(node, "status.allocatable", |status| {
        status.allocatable.as_ref()
    })
}

/// What kubelet holds back: `max(capacity − allocatable, 0)`.
pub fn kubelet_reserved(node: &Node) -> Result<CpuMem, InputError> {
    Ok(node_capacity(node)?
        .minus(node_allocatable(node)?)
        .clamp_non_negative())
}

/// What the `node.koordinator.sh/reservation` annotation holds back; explicit
/// reserved CPUs count as whole cores. An annotation that does not parse is
/// an error (counting it as no reservation would lend what it reserves).
pub fn annotation_reserved(node: &Node) -> Result<CpuMem, InputError> {
    let Some(annotations) = node.metadata.annotations.as_ref() else {
        return Ok(CpuMem::ZERO);
    };
    let object = node_object(node);
    let field = format!("metadata.annotations[{ANNOTATION_NODE_RESERVATION}]");
    let reservation = match get_node_reservation(annotations) {
        Ok(Some(reservation)) => reservation,
        Ok(None) => return Ok(CpuMem::ZERO),
        Err(error) => return Err(InputError::new(object, field, error.to_string())),
    };
    let mut reserved = CpuMem::read(&reservation.resources, || {
        (object.clone(), format!("{field}.resources"))
    })?;
    if !reservation.reserved_cpus.is_empty() {
        match count_cpu_list(&reservation.reserved_cpus) {
            Some(count) => reserved.milli_cpu = count.saturating_mul(1000),
            None => {
                return Err(InputError::new(
                    object,
                    format!("{field}.reservedCPUs"),
                    format!("invalid cpu list {:?}", reservation.reserved_cpus),
                ));
            }
        }
    }
    Ok(reserved)
}

/// The node's system reservation: the larger of kubelet's and the annotation's.
pub fn node_reserved(node: &Node) -> Result<CpuMem, InputError> {
    Ok(kubelet_reserved(node)?.max(annotation_reserved(node)?))
}

/// The highest CPU id a cpu list may name (koord-scheduler's bound too).
pub const MAX_CPU_ID: u32 = 65_535;

/// Number of CPUs in a Linux cpu-list such as `0-3,8,10-11`; `None` when
/// malformed or naming a CPU above [`MAX_CPU_ID`]. Overlapping entries count
/// each CPU once. The list comes from a node annotation, so the work is
/// bounded by its length and the 1,024 words of a set of every CPU, never by
/// the ranges it names.
pub fn count_cpu_list(list: &str) -> Option<i64> {
    const WORD: u32 = u64::BITS;
    let mut words = vec![0u64; (MAX_CPU_ID / WORD + 1) as usize];
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (start, end) = match part.split_once('-') {
            Some((start, end)) => (start.trim().parse::<u32>().ok()?, end.trim().parse().ok()?),
            None => {
                let id = part.parse::<u32>().ok()?;
                (id, id)
            }
        };
        if end < start || end > MAX_CPU_ID {
            return None;
        }
        for word in start / WORD..=end / WORD {
            let first = start.max(word * WORD) - word * WORD;
            let last = end.min(word * WORD + WORD - 1) - word * WORD;
            words[word as usize] |= (u64::MAX >> (WORD - 1 - last)) & (u64::MAX << first);
        }
    }
    Some(words.iter().map(|w| i64::from(w.count_ones())).sum())
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

/// Upstream `IsResourceDiff`: appeared or vanished, or moved by more than
/// `threshold` × the old value (in milli-units). A value that cannot be read
/// exactly differs from anything (writing replaces it).
pub fn is_resource_diff(old: Option<&Quantity>, new: Option<&Quantity>, threshold: f64) -> bool {
    match (old, new) {
        (None, None) => false,
        (Some(_), None) | (None, Some(_)) => true,
        (Some(old), Some(new)) => {
            let read = |q: &Quantity| QuantityValue::of(q).ok()?.checked_milli_value();
            match (read(old), read(new)) {
                (Some(old), Some(new)) => (new as f64 - old as f64).abs() > old as f64 * threshold,
                _ => true,
            }
        }
    }
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
        assert_eq!(pod_request(&pod), Ok(CpuMem::new(4100, 2 << 30)));
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
        assert_eq!(pod_request(&pod).unwrap().milli_cpu, 1200);
    }

    #[test]
    fn requests_are_read_exactly_or_refused() {
        let pod = |containers: Vec<Container>| Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("web".into()),
                namespace: Some("d".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            ..Default::default()
        };
        // Each fits in 64 bits of milli-cores; their sum does not.
        let huge = "9000000000000000";
        let err = pod_request(&pod(vec![
            container(huge, "0", None),
            container(huge, "0", None),
        ]))
        .unwrap_err();
        assert_eq!(err.object, "Pod d/web");
        assert_eq!(err.problem, "the sum does not fit in 64 bits");
        let err = pod_request(&pod(vec![container("1", "-1Gi", None)])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Pod d/web: spec.containers[0].resources.requests.memory: negative amount \"-1Gi\""
        );
        let err = pod_request(&pod(vec![container("1.5.0", "1Gi", None)])).unwrap_err();
        assert!(
            err.to_string().contains("invalid quantity \"1.5.0\""),
            "{err}"
        );
    }

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("1,1"), Some(1));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("a"), None);
    }

    /// Found with the cpuset fuzz target (fuzz/fuzz_targets/cpuset.rs): the
    /// node-reservation annotation is outside input, and every id of every
    /// range used to be put in a set one by one: 12 KB of wide ranges took
    /// 13 s and 600 MB, a 256 KiB annotation minutes and gigabytes.
    #[test]
    fn cpu_lists_naming_ids_beyond_the_largest_cpu_are_refused() {
        let wide: Vec<String> = (0..700u64)
            .map(|i| format!("{}-{}", i * 65_537, i * 65_537 + 65_536))
            .collect();
        assert_eq!(count_cpu_list(&wide.join(",")), None);
        assert_eq!(count_cpu_list("65536"), None);
        assert_eq!(count_cpu_list("0-65535"), Some(65_536));
    }

    #[test]
    fn a_cpu_list_that_repeats_its_ranges_is_counted_without_expanding_them() {
        let repeated = vec!["0-65535"; 20_000].join(",");
        let started = std::time::Instant::now();
        assert_eq!(count_cpu_list(&repeated), Some(65_536));
        assert_eq!(count_cpu_list("0-7,4-11,3"), Some(12));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn quantities_print_like_kubernetes() {
        assert_eq!(units_decimal_quantity(12000).0, "12k");
        assert_eq!(units_decimal_quantity(12345).0, "12345");
        assert_eq!(bytes_quantity(16 << 30).0, "16Gi");
        assert_eq!(milli_cpu_quantity(1500).0, "1500m");
    }
}

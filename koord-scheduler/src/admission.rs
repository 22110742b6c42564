//! Bounds on what enters the scheduler, checked where it enters — a watch
//! event or list, a `/filter` or `/prioritize` body, a simulator snapshot —
//! and before the scheduler's state lock is taken, so the work under the
//! lock is bounded by what passed here.
//!
//! - Every object needs a `metadata.name` of at most [`MAX_NAME_BYTES`];
//!   a list (watch relist, snapshot) may hold each object once.
//! - Annotations may add up to [`MAX_ANNOTATIONS_BYTES`] (the API server's
//!   own limit, so only input that did not come through it can exceed it).
//! - The annotations that hold cpu lists (a pod's or Reservation's
//!   `resource-status`, a node's `reservation`, `cpu-topology`,
//!   `cpu-manager-policy` and `pod-cpu-allocs`, also on
//!   NodeResourceTopologies) must parse under [`crate::cpuset`]'s bounds
//!   (64 KiB, ids up to 65,535, no CPU listed twice). One that does not is
//!   taken off the object (the object itself is kept: a bound pod still
//!   counts its requests on its node) and the refusal names the object, the
//!   annotation and the limit. A refused cpuset holds no CPUs.
//!
//! - Amounts must be exact counts ([`crate::resources::exact_amount`]: a
//!   Kubernetes quantity, not negative, within 64 bits in its unit). The
//!   object is kept as it is and the first amount that is not is returned
//!   with what the scheduler does about it ([`RefusedAmount`]); each
//!   consumer reads the same amounts with the same functions and refuses
//!   in the safe direction (see [`check_amounts`]).
//!
//! - Deprecated resource names (`koordinator.sh/batch-cpu`, `kubernetes.io/gpu-core`…)
//!   are moved to their current names ([`transform_deprecated_names`]).
//!
//! JSON nesting is bounded by serde_json's recursion limit (128) wherever
//! JSON is read.
//!
//! [`Reports`] lets a shell report each object's refusals once per object
//! version (not on every relist), and [`InputMetrics`] counts them.

use std::collections::{BTreeMap, HashMap, HashSet};

use apis::extension::node_reservation::{ANNOTATION_NODE_RESERVATION, get_node_reservation};
use apis::extension::numa_aware::{
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY, ANNOTATION_NODE_CPU_ALLOCS,
    ANNOTATION_NODE_CPU_TOPOLOGY, ANNOTATION_RESOURCE_STATUS, get_cpu_topology,
    get_kubelet_cpu_manager_policy, get_pod_cpu_allocs, get_resource_status,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::cache::{Object, ObjectKind, node_allocatable};
use crate::cpuset::{CpuSet, MAX_CPU_ID};
use crate::plugins::deviceshare::{allocation_amounts, device_amounts};
use crate::plugins::elasticquota::quota_amounts;
use crate::plugins::loadaware::node_metric_amounts;
use crate::plugins::reservation::reservation_amounts;
use crate::resources::{InvalidAmount, pod_limits_checked, pod_requests_checked};

/// The most candidate nodes one extender request (`/filter`, `/prioritize`,
/// `/preempt`) may name.
pub const MAX_CANDIDATE_NODES: usize = 100_000;

/// The API server's limit on all annotations of one object together
/// (`TotalAnnotationSizeLimitB`).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The longest object name (a DNS subdomain).
pub const MAX_NAME_BYTES: usize = 253;

/// An object refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("{kind:?} without metadata.name refused")]
    Nameless { kind: ObjectKind },
    #[error("{kind:?} {key} refused: its name of {len} bytes is longer than the {max} allowed")]
    NameTooLong {
        kind: ObjectKind,
        key: String,
        len: usize,
        max: usize,
    },
    #[error(
        "{kind:?} {key} refused: its annotations take {len} bytes, more than the {max} the API server allows"
    )]
    AnnotationsTooLarge {
        kind: ObjectKind,
        key: String,
        len: usize,
        max: usize,
    },
    #[error("{kind:?} {key} refused: listed more than once")]
    Duplicate { kind: ObjectKind, key: String },
}

impl InputError {
    pub fn kind(&self) -> ObjectKind {
        match self {
            InputError::Nameless { kind }
            | InputError::NameTooLong { kind, .. }
            | InputError::AnnotationsTooLarge { kind, .. }
            | InputError::Duplicate { kind, .. } => *kind,
        }
    }

    /// The field at fault, for [`InputMetrics`].
    pub fn field(&self) -> &'static str {
        match self {
            InputError::AnnotationsTooLarge { .. } => "metadata.annotations",
            _ => "metadata.name",
        }
    }
}

/// An amount of an admitted object that is not an exact count, and what
/// the scheduler does about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedAmount {
    pub kind: ObjectKind,
    pub key: String,
    pub amount: InvalidAmount,
    /// What follows for scheduling (the safe direction).
    pub consequence: &'static str,
}

impl std::fmt::Display for RefusedAmount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} {}: {} (not an exact amount); {}",
            self.kind, self.key, self.amount, self.consequence
        )
    }
}

/// An annotation taken off an object as it entered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedAnnotation {
    pub kind: ObjectKind,
    pub key: String,
    pub annotation: &'static str,
    pub reason: String,
}

impl std::fmt::Display for RefusedAnnotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} {}: annotation {} refused (not used): {}",
            self.kind, self.key, self.annotation, self.reason
        )
    }
}

/// An object that may enter, with what was taken off it.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub object: Object,
    pub refused: Vec<RefusedAnnotation>,
    /// The first amount that is not an exact count (the object is kept).
    pub invalid_amount: Option<RefusedAmount>,
}

impl Admitted {
    /// Whether anything was refused.
    pub fn has_refusals(&self) -> bool {
        !self.refused.is_empty() || self.invalid_amount.is_some()
    }
}

/// Where a pod's requests, limits and overhead are read from.
const POD_RESOURCES: &str = "spec";

/// The first amount of `object` that is not an exact count, read by the
/// same functions the scheduler decides with, and what follows:
///
/// - Node `status.allocatable`: the node is feasible for no pod and adds
///   nothing to any total;
/// - Pod requests, limits, overhead: a pending pod fits no node (a bound
///   one counts such an amount as the most it could mean when too large,
///   as nothing otherwise); the shares of a device-allocated annotation
///   (also on a Reservation) count as the whole device;
/// - NodeMetric node, aggregated, system and pod usage: LoadAware treats
///   the NodeMetric as expired (never as a less loaded node);
/// - ElasticQuota `min`, `max`, shared weight: the quota admits no pod,
///   nor do the quotas below it;
/// - Device resources: the node's devices offer nothing;
/// - Reservation allocatable (status, or template requests and the resize
///   annotation): it holds nothing and serves nobody, and is not placed.
pub fn check_amounts(object: &Object) -> Option<RefusedAmount> {
    const DEVICE_SHARE: &str = "the share counts as the whole device";
    let (amount, consequence) = match object {
        Object::Node(node) => (
            node_allocatable(node).err()?,
            "the node is feasible for no pod and adds nothing to quota totals",
        ),
        Object::Pod(pod) => {
            let refused = pod_requests_checked(pod)
                .1
                .or_else(|| pod_limits_checked(pod).1);
            match refused {
                Some(reason) => (
                    InvalidAmount::new(POD_RESOURCES, POD_RESOURCES.to_string(), reason),
                    "a pending pod fits no node; a bound one counts it as the most it could mean (too large) or nothing",
                ),
                None => (
                    allocation_amounts(pod.metadata.annotations.as_ref()).err()?,
                    DEVICE_SHARE,
                ),
            }
        }
        Object::NodeMetric(metric) => (
            node_metric_amounts(metric).err()?,
            "LoadAwareScheduling treats the NodeMetric as expired",
        ),
        Object::ElasticQuota(quota) => (
            quota_amounts(quota).err()?,
            "the quota admits no pod, nor do the quotas below it",
        ),
        Object::Device(device) => (
            device_amounts(device).err()?,
            "the node's devices offer nothing",
        ),
        Object::Reservation(reservation) => match reservation_amounts(reservation) {
            Err(amount) => (
                amount,
                "the reservation holds nothing, serves nobody and is not placed",
            ),
            Ok(_) => (
                allocation_amounts(reservation.metadata.annotations.as_ref()).err()?,
                DEVICE_SHARE,
            ),
        },
        Object::PodGroup(_) | Object::NodeResourceTopology(_) | Object::PodDisruptionBudget(_) => {
            return None;
        }
    };
    Some(RefusedAmount {
        kind: object.kind(),
        key: object.key(),
        amount,
        consequence,
    })
}

fn metadata_mut(object: &mut Object) -> &mut ObjectMeta {
    match object {
        Object::Node(o) => &mut o.metadata,
        Object::Pod(o) => &mut o.metadata,
        Object::NodeMetric(o) => &mut o.metadata,
        Object::Reservation(o) => &mut o.metadata,
        Object::ElasticQuota(o) => &mut o.metadata,
        Object::PodGroup(o) => &mut o.metadata,
        Object::Device(o) => &mut o.metadata,
        Object::NodeResourceTopology(o) => &mut o.metadata,
        Object::PodDisruptionBudget(o) => &mut o.metadata,
    }
}

type Check = fn(&BTreeMap<String, String>) -> Result<(), String>;

fn cpus(text: &str) -> Result<CpuSet, String> {
    CpuSet::parse_each_cpu_once(text).map_err(|e| e.to_string())
}

fn check_resource_status(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(status) = get_resource_status(annotations).map_err(|e| e.to_string())? {
        cpus(&status.cpuset).map_err(|e| format!("cpuset: {e}"))?;
    }
    Ok(())
}

fn check_node_reservation(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(reservation) = get_node_reservation(annotations).map_err(|e| e.to_string())? {
        cpus(&reservation.reserved_cpus).map_err(|e| format!("reservedCPUs: {e}"))?;
    }
    Ok(())
}

fn check_cpu_topology(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(topology) = get_cpu_topology(annotations).map_err(|e| e.to_string())? {
        let mut seen = CpuSet::new();
        for info in &topology.detail {
            if !(0..=MAX_CPU_ID).contains(&info.id) {
                return Err(format!("CPU id {} is outside 0-{MAX_CPU_ID}", info.id));
            }
            if !seen.insert(info.id) {
                return Err(format!("CPU {} is listed twice", info.id));
            }
        }
    }
    Ok(())
}

fn check_kubelet_policy(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(policy) = get_kubelet_cpu_manager_policy(annotations).map_err(|e| e.to_string())? {
        cpus(&policy.reserved_cpus).map_err(|e| format!("reservedCPUs: {e}"))?;
    }
    Ok(())
}

fn check_cpu_allocs(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(allocs) = get_pod_cpu_allocs(annotations).map_err(|e| e.to_string())? {
        for alloc in &allocs {
            cpus(&alloc.cpuset).map_err(|e| format!("cpuset of pod {}: {e}", alloc.name))?;
        }
    }
    Ok(())
}

/// The cpu-list annotations each kind carries.
fn checks(kind: ObjectKind) -> &'static [(&'static str, Check)] {
    const POD: &[(&str, Check)] = &[(ANNOTATION_RESOURCE_STATUS, check_resource_status)];
    const TOPOLOGY: &[(&str, Check)] = &[
        (ANNOTATION_NODE_CPU_TOPOLOGY, check_cpu_topology),
        (ANNOTATION_KUBELET_CPU_MANAGER_POLICY, check_kubelet_policy),
        (ANNOTATION_NODE_CPU_ALLOCS, check_cpu_allocs),
    ];
    const NODE: &[(&str, Check)] = &[
        (ANNOTATION_NODE_RESERVATION, check_node_reservation),
        (ANNOTATION_NODE_CPU_TOPOLOGY, check_cpu_topology),
        (ANNOTATION_KUBELET_CPU_MANAGER_POLICY, check_kubelet_policy),
        (ANNOTATION_NODE_CPU_ALLOCS, check_cpu_allocs),
    ];
    match kind {
        ObjectKind::Pod | ObjectKind::Reservation => POD,
        ObjectKind::Node => NODE,
        ObjectKind::NodeResourceTopology => TOPOLOGY,
        _ => &[],
    }
}

/// Checks one object against the bounds in the module docs.
pub fn admit(mut object: Object) -> Result<Admitted, InputError> {
    let kind = object.kind();
    let key = object.key();
    let meta = metadata_mut(&mut object);
    let name_len = meta.name.as_deref().map_or(0, str::len);
    if name_len == 0 {
        return Err(InputError::Nameless { kind });
    }
    if name_len > MAX_NAME_BYTES {
        return Err(InputError::NameTooLong {
            kind,
            key,
            len: name_len,
            max: MAX_NAME_BYTES,
        });
    }
    let mut refused = Vec::new();
    if let Some(annotations) = meta.annotations.as_mut() {
        let len: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
        if len > MAX_ANNOTATIONS_BYTES {
            return Err(InputError::AnnotationsTooLarge {
                kind,
                key,
                len,
                max: MAX_ANNOTATIONS_BYTES,
            });
        }
        for (annotation, check) in checks(kind) {
            if !annotations.contains_key(*annotation) {
                continue;
            }
            if let Err(reason) = check(annotations) {
                annotations.remove(*annotation);
                refused.push(RefusedAnnotation {
                    kind,
                    key: key.clone(),
                    annotation,
                    reason,
                });
            }
        }
    }
    transform_deprecated_names(&mut object);
    let invalid_amount = check_amounts(&object);
    Ok(Admitted {
        object,
        refused,
        invalid_amount,
    })
}

/// Deprecated resource names read as their current names, as upstream's
/// scheduler transformers do for pods, nodes, ElasticQuotas and Devices
/// (see [`apis::extension::deprecated`]): a pod that still asks for
/// `koordinator.sh/batch-cpu` is counted as asking for
/// `kubernetes.io/batch-cpu`. Returns whether anything moved.
pub fn transform_deprecated_names(object: &mut Object) -> bool {
    use apis::extension::{
        transform_deprecated_device_resources, transform_deprecated_node_resources,
        transform_deprecated_pod, transform_deprecated_quota_resources,
    };
    match object {
        Object::Pod(pod) => transform_deprecated_pod(pod),
        Object::Node(node) => transform_deprecated_node_resources(node),
        Object::ElasticQuota(quota) => transform_deprecated_quota_resources(&mut quota.spec),
        Object::Device(device) => transform_deprecated_device_resources(&mut device.spec),
        Object::NodeMetric(_)
        | Object::Reservation(_)
        | Object::PodGroup(_)
        | Object::NodeResourceTopology(_)
        | Object::PodDisruptionBudget(_) => false,
    }
}

/// What [`Reports::observe`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Nothing refused, nothing reported before.
    Clean,
    /// Refusals not yet reported for this version: report them.
    New,
    /// The same version's refusals were reported already (a relist).
    Again,
    /// Nothing refused any more, after a reported refusal.
    Cleared,
}

/// The object versions whose refusals a shell has reported, so each is
/// reported once per version and not on every relist. Holds only objects
/// with refusals.
#[derive(Debug, Default)]
pub struct Reports {
    reported: HashMap<(ObjectKind, String), String>,
}

impl Reports {
    pub fn observe(&mut self, admitted: &Admitted) -> Seen {
        let key = (admitted.object.kind(), admitted.object.key());
        if !admitted.has_refusals() {
            return match self.reported.remove(&key) {
                Some(_) => Seen::Cleared,
                None => Seen::Clean,
            };
        }
        let version = admitted.object.resource_version().unwrap_or_default();
        if self.reported.get(&key).is_some_and(|v| v == version) {
            return Seen::Again;
        }
        self.reported.insert(key, version.to_string());
        Seen::New
    }

    /// The object is gone.
    pub fn forget(&mut self, kind: ObjectKind, key: &str) {
        self.reported.remove(&(kind, key.to_string()));
    }

    /// After a relist of `kind`: forget what the list no longer has.
    pub fn retain_listed(&mut self, kind: ObjectKind, listed: &HashSet<String>) {
        self.reported
            .retain(|(k, key), _| *k != kind || listed.contains(key));
    }

    pub fn len(&self) -> usize {
        self.reported.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reported.is_empty()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InputLabels {
    kind: String,
    field: String,
}

/// `scheduler_invalid_input_total{kind, field}`: input refused where it
/// entered — a whole object (per event), an annotation or an amount (once
/// per object version).
#[derive(Clone, Debug, Default)]
pub struct InputMetrics {
    invalid_input: Family<InputLabels, Counter>,
}

impl InputMetrics {
    pub fn register(&self, registry: &koord_common::metrics::MetricsRegistry) {
        registry.register_component(|r| {
            r.register(
                "invalid_input",
                "Input refused where it entered the scheduler, by kind and field: whole objects per event, annotations and amounts that are not exact counts once per object version",
                self.invalid_input.clone(),
            );
        });
    }

    pub fn refused(&self, kind: ObjectKind, field: &str) {
        self.invalid_input
            .get_or_create(&InputLabels {
                kind: format!("{kind:?}"),
                field: field.to_string(),
            })
            .inc();
    }

    /// Counts every refusal of an admitted object.
    pub fn refused_parts(&self, admitted: &Admitted) {
        for refusal in &admitted.refused {
            self.refused(
                refusal.kind,
                &format!("metadata.annotations[{}]", refusal.annotation),
            );
        }
        if let Some(refused) = &admitted.invalid_amount {
            self.refused(refused.kind, refused.amount.section);
        }
    }

    /// The count for one kind and field (tests).
    pub fn count(&self, kind: ObjectKind, field: &str) -> u64 {
        self.invalid_input
            .get_or_create(&InputLabels {
                kind: format!("{kind:?}"),
                field: field.to_string(),
            })
            .get()
    }
}

/// [`admit`] over a list (a relist or a snapshot): each key once, the
/// first occurrence wins. Returns the admitted objects and the refusals.
pub fn admit_list(objects: Vec<Object>) -> (Vec<Admitted>, Vec<InputError>) {
    let mut seen = HashSet::new();
    let mut admitted = Vec::with_capacity(objects.len());
    let mut errors = Vec::new();
    for object in objects {
        match admit(object) {
            Ok(ok) => {
                let key = ok.object.key();
                if seen.insert(key.clone()) {
                    admitted.push(ok);
                } else {
                    errors.push(InputError::Duplicate {
                        kind: ok.object.kind(),
                        key,
                    });
                }
            }
            Err(err) => errors.push(err),
        }
    }
    (admitted, errors)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn pod(name: &str, annotations: serde_json::Value) -> Object {
        Object::Pod(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "annotations": annotations}
            }))
            .unwrap(),
        )
    }

    fn annotations(object: &Object) -> BTreeMap<String, String> {
        match object {
            Object::Pod(p) => p.metadata.annotations.clone().unwrap_or_default(),
            Object::Node(n) => n.metadata.annotations.clone().unwrap_or_default(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_repeated_cpuset_is_taken_off_and_the_refusal_names_object_and_limit() {
        let status = json!({"cpuset": vec!["0-65535"; 30_000].join(",")}).to_string();
        let admitted = admit(pod(
            "hog",
            json!({ANNOTATION_RESOURCE_STATUS: status, "other": "kept"}),
        ))
        .unwrap();
        assert_eq!(
            annotations(&admitted.object),
            BTreeMap::from([("other".to_string(), "kept".to_string())])
        );
        let [refusal] = &admitted.refused[..] else {
            panic!("{:?}", admitted.refused)
        };
        let text = refusal.to_string();
        assert!(
            text.starts_with(
                "Pod default/hog: annotation scheduling.koordinator.sh/resource-status refused"
            ),
            "{text}"
        );
        assert!(
            text.contains("longer than the 65536 bytes allowed"),
            "{text}"
        );

        let repeated = json!({"cpuset": "0-7,0-7"}).to_string();
        let admitted = admit(pod("hog", json!({ANNOTATION_RESOURCE_STATUS: repeated}))).unwrap();
        assert!(admitted.refused[0].reason.contains("repeats CPUs"));
        // A good cpuset and other annotations pass untouched.
        let good = json!({"cpuset": "0-3"}).to_string();
        let admitted = admit(pod("ok", json!({ANNOTATION_RESOURCE_STATUS: good}))).unwrap();
        assert!(admitted.refused.is_empty());
        assert_eq!(annotations(&admitted.object).len(), 1);
    }

    #[test]
    fn node_cpu_lists_are_checked_too() {
        let topology = json!({"detail": [{"id": 0, "core": 0, "socket": 0, "node": 0},
                                          {"id": 0, "core": 1, "socket": 0, "node": 0}]})
        .to_string();
        let node = Object::Node(
            serde_json::from_value(json!({"metadata": {"name": "n1", "annotations": {
                ANNOTATION_NODE_RESERVATION: r#"{"reservedCPUs": "1,1"}"#,
                ANNOTATION_NODE_CPU_TOPOLOGY: topology,
                ANNOTATION_KUBELET_CPU_MANAGER_POLICY: r#"{"policy": "static", "reservedCPUs": "0-1"}"#,
            }}}))
            .unwrap(),
        );
        let admitted = admit(node).unwrap();
        let refused: Vec<&str> = admitted.refused.iter().map(|r| r.annotation).collect();
        assert_eq!(
            refused,
            [ANNOTATION_NODE_RESERVATION, ANNOTATION_NODE_CPU_TOPOLOGY]
        );
        assert!(admitted.refused[1].reason.contains("CPU 0 is listed twice"));
        assert_eq!(
            annotations(&admitted.object).keys().collect::<Vec<_>>(),
            [ANNOTATION_KUBELET_CPU_MANAGER_POLICY]
        );
    }

    #[test]
    fn nameless_oversized_and_duplicate_objects_are_refused() {
        let nameless = Object::Pod(serde_json::from_value(json!({"metadata": {}})).unwrap());
        assert_eq!(
            admit(nameless.clone()).unwrap_err().to_string(),
            "Pod without metadata.name refused"
        );
        let big = "x".repeat(MAX_ANNOTATIONS_BYTES);
        let err = admit(pod("big", json!({"a": big})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("Pod default/big refused"), "{err}");
        assert!(err.contains("more than the 262144"), "{err}");
        let long = "n".repeat(MAX_NAME_BYTES + 1);
        assert!(matches!(
            admit(pod(&long, json!({}))),
            Err(InputError::NameTooLong { .. })
        ));

        let (admitted, errors) = admit_list(vec![
            pod("a", json!({"first": "yes"})),
            nameless,
            pod("b", json!({})),
            pod("a", json!({})),
        ]);
        let keys: Vec<String> = admitted.iter().map(|a| a.object.key()).collect();
        assert_eq!(keys, ["default/a", "default/b"]);
        assert_eq!(annotations(&admitted[0].object)["first"], "yes");
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "Pod without metadata.name refused",
                "Pod default/a refused: listed more than once"
            ]
        );
    }
}

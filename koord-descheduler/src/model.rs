//! The cluster objects the decision cores read, digested once from the
//! Kubernetes types: amounts as integers (CPU in milli-cores, everything else
//! in whole units, as upstream compares `MilliValue`/`Value`), the Koordinator
//! classes resolved, the protective facts of each pod precomputed.
//!
//! Digesting is pure and never fails: a malformed quantity or annotation is
//! recorded on the view (and reported by the plan), never a panic.

use std::collections::BTreeMap;

use apis::extension::qos::KubeQoSClass;
use apis::extension::quantity::QuantityValue;
use apis::extension::{PriorityClass, QoSClass};
use apis::scheduling::v1alpha1::PodMigrationJob;
use apis::slo::v1alpha1::NodeMetric;
use k8s_openapi::api::core::v1::{Node, NodeSelector, Pod, Taint, Toleration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;

/// Resource name → amount (CPU in milli-cores, the rest in units).
pub type Amounts = BTreeMap<String, i64>;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";

/// Annotations and labels the filters read.
pub const EVICT_ANNOTATION: &str = "descheduler.alpha.kubernetes.io/evict";
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// One quantity as the descheduler compares it.
pub fn amount_of(resource: &str, quantity: &Quantity) -> Result<i64, String> {
    let value = QuantityValue::of(quantity).map_err(|err| err.to_string())?;
    let amount = if resource == CPU {
        value.checked_milli_value()
    } else {
        value.checked_value()
    };
    amount.ok_or_else(|| format!("quantity {:?} is beyond the 64-bit range", quantity.0))
}

/// A resource list as [`Amounts`]; entries that do not parse are skipped and
/// named in the returned problems.
pub fn amounts_of(list: &BTreeMap<String, Quantity>) -> (Amounts, Vec<String>) {
    let mut amounts = Amounts::new();
    let mut problems = Vec::new();
    for (name, quantity) in list {
        match amount_of(name, quantity) {
            Ok(amount) => {
                amounts.insert(name.clone(), amount);
            }
            Err(err) => problems.push(format!("{name}: {err}")),
        }
    }
    (amounts, problems)
}

#[derive(Clone, Debug, Default)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub unschedulable: bool,
    /// No `Ready` condition other than `True` (upstream `IsReady`).
    pub ready: bool,
    pub taints: Vec<Taint>,
    /// What usage percentages are taken of: the raw-allocatable annotation
    /// when it parses, else `status.allocatable` (upstream
    /// `GetNodeRawAllocatableFromNode`).
    pub capacity: Amounts,
    /// `status.allocatable`, for the request fit.
    pub allocatable: Amounts,
    pub problems: Vec<String>,
}

impl NodeView {
    pub fn of(node: &Node) -> Self {
        let metadata = &node.metadata;
        let spec = node.spec.as_ref();
        let status = node.status.as_ref();
        let mut problems = Vec::new();
        let (allocatable, bad) = amounts_of(
            status
                .and_then(|status| status.allocatable.as_ref())
                .unwrap_or(&BTreeMap::new()),
        );
        let allocatable = with_current_resource_names(allocatable);
        problems.extend(bad.into_iter().map(|p| format!("status.allocatable {p}")));
        let annotations = metadata.annotations.clone().unwrap_or_default();
        let capacity = match apis::extension::get_node_raw_allocatable(&annotations) {
            Ok(Some(raw)) => {
                let (raw, bad) = amounts_of(&raw);
                problems.extend(bad.into_iter().map(|p| format!("raw allocatable {p}")));
                with_current_resource_names(raw)
            }
            Ok(None) => allocatable.clone(),
            Err(err) => {
                problems.push(format!(
                    "raw allocatable annotation ignored, status.allocatable used: {err}"
                ));
                allocatable.clone()
            }
        };
        let ready = status
            .and_then(|status| status.conditions.as_ref())
            .is_none_or(|conditions| {
                conditions
                    .iter()
                    .all(|c| c.type_ != "Ready" || c.status == "True")
            });
        NodeView {
            name: metadata.name.clone().unwrap_or_default(),
            labels: metadata.labels.clone().unwrap_or_default(),
            unschedulable: spec.and_then(|spec| spec.unschedulable).unwrap_or(false),
            ready,
            taints: spec
                .and_then(|spec| spec.taints.clone())
                .unwrap_or_default(),
            capacity,
            allocatable,
            problems,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerView {
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
}

#[derive(Clone, Debug, Default)]
pub struct PodView {
    /// `namespace/name`.
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node_name: String,
    pub labels: BTreeMap<String, String>,
    pub owners: Vec<OwnerView>,
    pub has_evict_annotation: bool,
    pub mirror: bool,
    /// `kubernetes.io/config.source` set to anything but `api`.
    pub static_pod: bool,
    pub terminating: bool,
    pub phase: String,
    /// `spec.priority` (absent counts as 0 where upstream compares).
    pub priority: Option<i32>,
    pub priority_class: PriorityClass,
    pub qos_class: QoSClass,
    pub kube_qos: Option<KubeQoSClass>,
    pub deletion_cost: i32,
    pub eviction_cost: i32,
    /// Nanoseconds since the epoch.
    pub created_at: Option<i128>,
    pub scheduler_name: String,
    pub local_storage: bool,
    pub pvc: bool,
    /// Effective requests (containers summed, init containers as a maximum,
    /// sidecars summed, overhead added).
    pub requests: Amounts,
    pub node_selector: BTreeMap<String, String>,
    pub required_node_affinity: Option<NodeSelector>,
    pub tolerations: Vec<Toleration>,
    pub ready: bool,
    pub problems: Vec<String>,
}

impl PodView {
    /// `namespace/name`, as NodeMetrics and PodMigrationJobs name pods.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Succeeded and failed pods hold no resources (upstream `ListPodsOnANode`).
    pub fn occupies_node(&self) -> bool {
        self.phase != "Succeeded" && self.phase != "Failed"
    }

    /// The controller owner reference, if any.
    pub fn controller(&self) -> Option<&OwnerView> {
        self.owners.iter().find(|owner| owner.controller)
    }

    pub fn of(pod: &Pod) -> Self {
        let metadata = &pod.metadata;
        let annotations = metadata.annotations.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let mut problems = Vec::new();
        let deletion_cost = match annotations.get(DELETION_COST_ANNOTATION) {
            None => 0,
            Some(text) => parse_cost(text).unwrap_or_else(|| {
                problems.push(format!(
                    "{DELETION_COST_ANNOTATION} {text:?} is not an int32; 0 used"
                ));
                0
            }),
        };
        let eviction_cost = match apis::extension::get_eviction_cost(&annotations) {
            Ok(cost) => cost.unwrap_or(0),
            Err(err) => {
                problems.push(format!("{err}; 0 used"));
                0
            }
        };
        let volumes = spec.and_then(|spec| spec.volumes.as_deref()).unwrap_or(&[]);
        let (requests, bad) = pod_requests(pod);
        let requests = with_current_resource_names(requests);
        problems.extend(bad);
        let namespace = metadata.namespace.clone().unwrap_or_default();
        let name = metadata.name.clone().unwrap_or_default();
        PodView {
            key: format!("{namespace}/{name}"),
            namespace,
            name,
            uid: metadata.uid.clone().unwrap_or_default(),
            node_name: spec
                .and_then(|spec| spec.node_name.clone())
                .unwrap_or_default(),
            labels: metadata.labels.clone().unwrap_or_default(),
            owners: metadata
                .owner_references
                .iter()
                .flatten()
                .map(|owner| OwnerView {
                    kind: owner.kind.clone(),
                    name: owner.name.clone(),
                    uid: owner.uid.clone(),
                    controller: owner.controller == Some(true),
                })
                .collect(),
            has_evict_annotation: annotations.contains_key(EVICT_ANNOTATION),
            mirror: annotations.contains_key(MIRROR_ANNOTATION),
            static_pod: annotations
                .get(CONFIG_SOURCE_ANNOTATION)
                .is_some_and(|source| source != "api"),
            terminating: metadata.deletion_timestamp.is_some(),
            phase: status
                .and_then(|status| status.phase.clone())
                .unwrap_or_default(),
            priority: spec.and_then(|spec| spec.priority),
            priority_class: apis::extension::priority_class_of_pod(pod),
            qos_class: apis::extension::qos_class_of_pod(pod),
            kube_qos: apis::extension::kube_qos_class_of_pod(pod),
            deletion_cost,
            eviction_cost,
            created_at: metadata
                .creation_timestamp
                .as_ref()
                .map(|time| time.0.as_nanosecond()),
            scheduler_name: spec
                .and_then(|spec| spec.scheduler_name.clone())
                .unwrap_or_else(|| "default-scheduler".to_string()),
            local_storage: volumes
                .iter()
                .any(|volume| volume.host_path.is_some() || volume.empty_dir.is_some()),
            pvc: volumes
                .iter()
                .any(|volume| volume.persistent_volume_claim.is_some()),
            requests,
            node_selector: spec
                .and_then(|spec| spec.node_selector.clone())
                .unwrap_or_default(),
            required_node_affinity: spec
                .and_then(|spec| spec.affinity.as_ref())
                .and_then(|affinity| affinity.node_affinity.as_ref())
                .and_then(|node| {
                    node.required_during_scheduling_ignored_during_execution
                        .clone()
                }),
            tolerations: spec
                .and_then(|spec| spec.tolerations.clone())
                .unwrap_or_default(),
            ready: status
                .and_then(|status| status.conditions.as_ref())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                }),
            problems,
        }
    }
}

/// A Kubernetes deletion cost: an int32 without a `+` or leading zeros.
fn parse_cost(text: &str) -> Option<i32> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let well_formed = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !well_formed {
        return None;
    }
    text.parse().ok()
}

/// Deprecated batch and device resource names moved to their current ones, as
/// upstream's descheduler transforms every Pod and Node it caches (the
/// scheduler's transformers, `apis::extension::deprecated`): when the current
/// name is present too, it wins and the deprecated entry stays, unread.
pub fn with_current_resource_names(mut amounts: Amounts) -> Amounts {
    let deprecated: Vec<(String, &'static str)> = amounts
        .keys()
        .filter_map(|name| {
            apis::extension::deprecated::current_batch_resource_name(name)
                .or_else(|| apis::extension::deprecated::current_device_resource_name(name))
                .map(|current| (name.clone(), current))
        })
        .collect();
    for (name, current) in deprecated {
        if amounts.contains_key(current) {
            continue;
        }
        if let Some(value) = amounts.remove(&name) {
            amounts.insert(current.to_owned(), value);
        }
    }
    amounts
}

/// The pod's effective requests (Kubernetes `resourcehelper.PodRequests`):
/// containers and sidecars summed, plain init containers as a maximum, pod
/// overhead added.
fn pod_requests(pod: &Pod) -> (Amounts, Vec<String>) {
    let mut total = Amounts::new();
    let mut problems = Vec::new();
    let Some(spec) = pod.spec.as_ref() else {
        return (total, problems);
    };
    let mut add = |target: &mut Amounts, list: Option<&BTreeMap<String, Quantity>>| {
        let Some(list) = list else { return };
        let (amounts, bad) = amounts_of(list);
        problems.extend(bad.into_iter().map(|p| format!("request {p}")));
        for (name, amount) in amounts {
            let entry = target.entry(name).or_insert(0);
            *entry = entry.saturating_add(amount);
        }
    };
    for container in &spec.containers {
        add(
            &mut total,
            container
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref()),
        );
    }
    let mut init_max = Amounts::new();
    let mut sidecars = Amounts::new();
    for container in spec.init_containers.iter().flatten() {
        let requests = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref());
        if container.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, requests);
            continue;
        }
        // A plain init container runs alone, after the sidecars started so far.
        let mut this = sidecars.clone();
        add(&mut this, requests);
        for (name, amount) in this {
            let entry = init_max.entry(name).or_insert(0);
            *entry = (*entry).max(amount);
        }
    }
    for (name, amount) in sidecars {
        let entry = total.entry(name).or_insert(0);
        *entry = entry.saturating_add(amount);
    }
    for (name, amount) in init_max {
        let entry = total.entry(name).or_insert(0);
        *entry = (*entry).max(amount);
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        add(&mut total, Some(overhead));
    }
    (total, problems)
}

/// A NodeMetric reduced to what LowNodeLoad reads.
#[derive(Clone, Debug, Default)]
pub struct MetricView {
    pub node: String,
    pub update_time: Option<Timestamp>,
    /// `status.nodeMetric` present.
    pub has_node_metric: bool,
    pub system_usage: Amounts,
    /// Pod key (`namespace/name`) → usage, in the NodeMetric's order.
    pub pods: Vec<(String, Amounts)>,
    pub problems: Vec<String>,
}

impl MetricView {
    pub fn of(metric: &NodeMetric) -> Self {
        let mut problems = Vec::new();
        let status = metric.status.as_ref();
        let node_metric = status.and_then(|status| status.node_metric.as_ref());
        let (system_usage, bad) = node_metric
            .map(|info| amounts_of(&info.system_usage.resources))
            .unwrap_or_default();
        problems.extend(bad.into_iter().map(|p| format!("systemUsage {p}")));
        let mut pods = Vec::new();
        for pod in status
            .map(|status| status.pods_metric.as_slice())
            .unwrap_or(&[])
        {
            let (usage, bad) = amounts_of(&pod.pod_usage.resources);
            problems.extend(
                bad.into_iter()
                    .map(|p| format!("podsMetric {}/{} {p}", pod.namespace, pod.name)),
            );
            pods.push((format!("{}/{}", pod.namespace, pod.name), usage));
        }
        MetricView {
            node: metric.metadata.name.clone().unwrap_or_default(),
            update_time: status
                .and_then(|status| status.update_time.as_ref())
                .map(|time| time.0),
            has_node_metric: node_metric.is_some(),
            system_usage,
            pods,
            problems,
        }
    }
}

/// A PodDisruptionBudget: whom it covers and how many more disruptions the
/// Eviction API would allow.
#[derive(Clone, Debug, Default)]
pub struct PdbView {
    pub namespace: String,
    pub name: String,
    pub selector: Option<LabelSelector>,
    pub disruptions_allowed: i32,
}

impl PdbView {
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        PdbView {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            name: pdb.metadata.name.clone().unwrap_or_default(),
            selector: pdb.spec.as_ref().and_then(|spec| spec.selector.clone()),
            disruptions_allowed: pdb
                .status
                .as_ref()
                .map_or(0, |status| status.disruptions_allowed),
        }
    }

    /// Whether the budget covers `pod` (same namespace, selector matches; a
    /// budget without a selector or with an invalid one covers nothing, as
    /// the Eviction API treats it).
    pub fn covers(&self, pod: &PodView) -> bool {
        if self.namespace != pod.namespace {
            return false;
        }
        let Some(selector) = &self.selector else {
            return false;
        };
        apis::configuration::selector::label_selector_matches(selector, &pod.labels)
            .unwrap_or(false)
    }
}

/// A workload owning pods, with the replicas it expects (upstream's
/// controller finder reads `spec.replicas` of the scale target).
#[derive(Clone, Debug, Default)]
pub struct WorkloadView {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub replicas: i32,
}

impl WorkloadView {
    /// A workload from its metadata and `spec.replicas` (absent means 1,
    /// the API server's default).
    pub fn new(
        kind: &str,
        metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        replicas: Option<i32>,
    ) -> Self {
        WorkloadView {
            kind: kind.to_string(),
            namespace: metadata.namespace.clone().unwrap_or_default(),
            name: metadata.name.clone().unwrap_or_default(),
            uid: metadata.uid.clone().unwrap_or_default(),
            replicas: replicas.unwrap_or(1),
        }
    }
}

/// An existing PodMigrationJob (Pending or Running ones count against the limits).
#[derive(Clone, Debug, Default)]
pub struct MigrationJobView {
    pub name: String,
    pub phase: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
}

impl MigrationJobView {
    pub fn of(job: &PodMigrationJob) -> Self {
        let pod = &job.spec.pod_ref;
        MigrationJobView {
            name: job.metadata.name.clone().unwrap_or_default(),
            phase: job
                .status
                .as_ref()
                .and_then(|status| status.phase.as_ref())
                .map(|phase| phase.as_str().to_string())
                .unwrap_or_default(),
            pod_namespace: pod.namespace.clone().unwrap_or_default(),
            pod_name: pod.name.clone().unwrap_or_default(),
            pod_uid: pod.uid.clone().unwrap_or_default(),
        }
    }
}

/// Everything one descheduling round reads.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    pub nodes: Vec<NodeView>,
    pub pods: Vec<PodView>,
    pub node_metrics: BTreeMap<String, MetricView>,
    pub pdbs: Vec<PdbView>,
    pub workloads: Vec<WorkloadView>,
    pub migration_jobs: Vec<MigrationJobView>,
}

#[cfg(test)]
mod deprecated_name_tests {
    use super::*;

    fn pod(requests: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"requests": requests}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    #[test]
    fn pods_and_nodes_read_deprecated_names_as_the_current_ones() {
        let view = PodView::of(&pod(serde_json::json!({
            "cpu": "1",
            "koordinator.sh/batch-cpu": "1000",
            "kubernetes.io/gpu-core": "50",
        })));
        assert_eq!(view.requests.get("kubernetes.io/batch-cpu"), Some(&1000));
        assert_eq!(view.requests.get("koordinator.sh/gpu-core"), Some(&50));
        assert!(!view.requests.contains_key("koordinator.sh/batch-cpu"));

        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "8", "koordinator.sh/batch-memory": "1Gi"}}
        }))
        .unwrap();
        let view = NodeView::of(&node);
        assert_eq!(
            view.allocatable.get("kubernetes.io/batch-memory"),
            Some(&(1 << 30))
        );
        assert_eq!(view.capacity, view.allocatable);
    }

    #[test]
    fn the_current_name_wins_when_both_are_given() {
        let view = PodView::of(&pod(serde_json::json!({
            "koordinator.sh/batch-cpu": "1000",
            "kubernetes.io/batch-cpu": "300",
        })));
        assert_eq!(view.requests.get("kubernetes.io/batch-cpu"), Some(&300));
        assert_eq!(view.requests.get("koordinator.sh/batch-cpu"), Some(&1000));
    }
}

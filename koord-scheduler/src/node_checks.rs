//! kube-scheduler's pod-to-node checks, for the placements no kube-scheduler
//! filters ahead of us: reserve pods (no kube-scheduler ever sees one), the
//! simulator's pods, and a gang's members checked against each other's
//! nodes. Cordoned nodes, taints, the node selector, required node
//! affinity, a pinned node name and resource fit; reasons use
//! kube-scheduler's wording.

use std::collections::BTreeMap;

use crate::cache::{NodeInfo, PodInfo};
use crate::resources::Resources;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

pub const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const REASON_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
pub const REASON_NODE_NAME: &str = "node(s) didn't match the requested node name";

pub(crate) const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Whether a pod with `spec` may go to `node` as far as kube-scheduler's
/// default filters for placement go.
pub fn check_node(spec: &PodSpec, node: &Node) -> Result<(), String> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if let Some(wanted) = spec.node_name.as_deref().filter(|n| !n.is_empty())
        && wanted != name
    {
        return Err(REASON_NODE_NAME.into());
    }
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let node_spec = node.spec.as_ref();
    if node_spec.and_then(|s| s.unschedulable) == Some(true) {
        let cordon = Taint {
            key: TAINT_UNSCHEDULABLE.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerations.iter().any(|t| tolerates(t, &cordon)) {
            return Err(REASON_UNSCHEDULABLE.into());
        }
    }
    for taint in node_spec
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
    {
        let blocking = taint.effect == "NoSchedule" || taint.effect == "NoExecute";
        if blocking && !tolerations.iter().any(|t| tolerates(t, taint)) {
            return Err(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or_default()
            ));
        }
    }
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affinity_ok = required.is_none_or(|selector| {
        selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, labels, name))
    });
    if selector_ok && affinity_ok {
        Ok(())
    } else {
        Err(REASON_AFFINITY.into())
    }
}

/// [`check_node`] for a cached pod on a cached node (a node known only from
/// its pods passes); the simulator applies it to ordinary pods, which no
/// kube-scheduler filters ahead of it there.
pub fn check_pod_on_node(pod: &PodInfo, node: &NodeInfo) -> Result<(), String> {
    match (pod.pod.spec.as_ref(), node.node.as_deref()) {
        (Some(spec), Some(node)) => check_node(spec, node),
        _ => Ok(()),
    }
}

/// Whether the pod restricts its nodes itself: a pinned `nodeName`, a
/// `nodeSelector` or required node affinity.
pub fn selects_nodes(pod: &PodInfo) -> bool {
    pod.pod.spec.as_ref().is_some_and(|spec| {
        spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
            || spec.node_selector.as_ref().is_some_and(|s| !s.is_empty())
            || spec
                .affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .is_some_and(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .is_some()
                })
    })
}

/// Resources always checked; others only when the node's allocatable lists
/// them (snapshots often leave extended resources out).
const ALWAYS_CHECKED: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// kube-scheduler's NodeResourcesFit for the reserve pod: every request
/// within the node's free allocatable, and room for one more pod.
pub fn check_resources(pod: &PodInfo, node: &NodeInfo) -> Result<(), String> {
    check_resources_without(pod, node, &[])
}

/// [`check_resources`] as if `gone`, pods on the node, were not there
/// (reservation pre-allocation: the reservation takes their place).
pub fn check_resources_without(
    pod: &PodInfo,
    node: &NodeInfo,
    gone: &[&PodInfo],
) -> Result<(), String> {
    let pods_allowed = node.allocatable.get("pods");
    let pods_there = node.pods.len().saturating_sub(gone.len());
    if pods_allowed > 0 && i64::try_from(pods_there).unwrap_or(i64::MAX) >= pods_allowed {
        return Err("Too many pods".into());
    }
    let mut insufficient = Vec::new();
    for (name, amount) in pod.requests.iter() {
        let allocatable = node.allocatable.get(name);
        if amount <= 0 || (allocatable == 0 && !ALWAYS_CHECKED.contains(&name)) {
            continue;
        }
        let freed: i64 = gone
            .iter()
            .map(|g| g.requests.get(name).max(0))
            .fold(0, i64::saturating_add);
        if amount > allocatable - node.requested.get(name).saturating_sub(freed).max(0) {
            insufficient.push(format!("Insufficient {name}"));
        }
    }
    if insufficient.is_empty() {
        Ok(())
    } else {
        Err(insufficient.join(", "))
    }
}

/// kube-scheduler's NodeResourcesFit score under its default strategy
/// (LeastAllocated, cpu and memory weighted 1), 0–100: per resource the share
/// of the node's allocatable left once the pod's non-zero request is added to
/// the node's (and to `held`, capacity that reservations keep for their
/// owners); none left, or none allocatable, scores 0. kube-scheduler would add
/// it to a reserve pod's scores had it seen one, and it spreads reservations
/// over free nodes where the plugins' scores alone tie.
pub fn least_allocated_score(pod: &PodInfo, node: &NodeInfo, held: &Resources) -> i64 {
    let share_left = |allocatable: i64, taken: [i64; 3]| -> i64 {
        let requested: i128 = taken.iter().map(|&amount| i128::from(amount.max(0))).sum();
        let allocatable = i128::from(allocatable);
        if allocatable <= 0 || requested > allocatable {
            return 0;
        }
        // ≤ 100 since requested ≥ 0.
        ((allocatable - requested) * 100 / allocatable) as i64
    };
    let cpu = share_left(
        node.allocatable.get("cpu"),
        [
            node.non_zero_requested.0,
            held.get("cpu"),
            pod.non_zero_requests.0,
        ],
    );
    let memory = share_left(
        node.allocatable.get("memory"),
        [
            node.non_zero_requested.1,
            held.get("memory"),
            pod.non_zero_requests.1,
        ],
    );
    (cpu + memory) / 2
}

/// kube's toleration-matches-taint rule.
pub(crate) fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key = toleration.key.as_deref().unwrap_or_default();
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => effect_ok && (key.is_empty() || key == taint.key),
        "Equal" | "" => {
            effect_ok
                && key == taint.key
                && toleration.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// A term with nothing in it matches no node, as in kube-scheduler.
pub(crate) fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let field_values = BTreeMap::from([("metadata.name".to_string(), name.to_string())]);
    expressions.iter().all(|r| requirement_matches(r, labels))
        && fields.iter().all(|r| requirement_matches(r, &field_values))
}

fn requirement_matches(
    requirement: &NodeSelectorRequirement,
    values: &BTreeMap<String, String>,
) -> bool {
    let actual = values.get(&requirement.key);
    let listed = requirement.values.as_deref().unwrap_or_default();
    let as_int = |v: &str| v.parse::<i64>().ok();
    let compare = |ordering: std::cmp::Ordering| match (
        actual.and_then(|a| as_int(a)),
        listed.first().and_then(|v| as_int(v)),
    ) {
        (Some(a), Some(b)) if listed.len() == 1 => a.cmp(&b) == ordering,
        _ => false,
    };
    match requirement.operator.as_str() {
        "In" => actual.is_some_and(|a| listed.contains(a)),
        "NotIn" => actual.is_none_or(|a| !listed.contains(a)),
        "Exists" => actual.is_some(),
        "DoesNotExist" => actual.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::*;
    use crate::cache::{Change, ClusterCache, Object};
    use std::sync::Arc;

    fn node(extra: Value) -> Node {
        let mut node = json!({"metadata": {"name": "n1", "labels": {"zone": "a", "gen": "5"}}});
        for (k, v) in extra.as_object().unwrap() {
            node[k] = v.clone();
        }
        serde_json::from_value(node).unwrap()
    }

    fn spec(value: Value) -> PodSpec {
        let mut spec = json!({"containers": []});
        for (k, v) in value.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value(spec).unwrap()
    }

    fn affinity(expressions: Value) -> Value {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}}})
    }

    #[test]
    fn cordons_and_taints_need_tolerations() {
        let cordoned = node(json!({"spec": {"unschedulable": true}}));
        assert_eq!(
            check_node(&spec(json!({})), &cordoned),
            Err(REASON_UNSCHEDULABLE.to_string())
        );
        let tolerant = spec(json!({"tolerations": [{"operator": "Exists"}]}));
        assert_eq!(check_node(&tolerant, &cordoned), Ok(()));

        let tainted = node(json!({"spec": {"taints": [
            {"key": "gpu", "value": "true", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"}]}}));
        assert_eq!(
            check_node(&spec(json!({})), &tainted),
            Err("node(s) had untolerated taint {gpu: true}".to_string())
        );
        let wrong_value = spec(json!({"tolerations": [{"key": "gpu", "value": "false"}]}));
        assert!(check_node(&wrong_value, &tainted).is_err());
        let right = spec(
            json!({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}),
        );
        assert_eq!(check_node(&right, &tainted), Ok(()));
    }

    #[test]
    fn selector_affinity_and_node_name() {
        let n = node(json!({}));
        assert_eq!(
            check_node(&spec(json!({"nodeSelector": {"zone": "a"}})), &n),
            Ok(())
        );
        assert_eq!(
            check_node(&spec(json!({"nodeSelector": {"zone": "b"}})), &n),
            Err(REASON_AFFINITY.to_string())
        );
        for (expressions, fits) in [
            (
                json!([{"key": "zone", "operator": "In", "values": ["a", "b"]}]),
                true,
            ),
            (
                json!([{"key": "zone", "operator": "NotIn", "values": ["a"]}]),
                false,
            ),
            (
                json!([{"key": "gen", "operator": "Gt", "values": ["4"]}]),
                true,
            ),
            (
                json!([{"key": "gen", "operator": "Lt", "values": ["4"]}]),
                false,
            ),
            (json!([{"key": "ssd", "operator": "DoesNotExist"}]), true),
            (json!([{"key": "ssd", "operator": "Exists"}]), false),
        ] {
            assert_eq!(
                check_node(&spec(affinity(expressions.clone())), &n).is_ok(),
                fits,
                "{expressions}"
            );
        }
        let by_field = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}});
        assert!(check_node(&spec(by_field), &n).is_err());
        assert_eq!(
            check_node(&spec(json!({"nodeName": "n2"})), &n),
            Err(REASON_NODE_NAME.to_string())
        );
    }

    #[test]
    fn node_checks_skip_only_what_cannot_fail() {
        let nodes = [
            json!({"metadata": {"name": "plain", "labels": {"pool": "a"}}}),
            json!({"metadata": {"name": "cordoned"}, "spec": {"unschedulable": true}}),
            json!({"metadata": {"name": "tainted"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
            json!({"metadata": {"name": "soft"}, "spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}}),
        ];
        let pod_with = |spec: serde_json::Value| {
            let mut spec = spec;
            spec["containers"] = json!([{"name": "main"}]);
            PodInfo::new(Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec}),
                )
                .unwrap(),
            ))
        };
        let pods = [
            (pod_with(json!({})), false),
            (pod_with(json!({"nodeSelector": {}})), false),
            (pod_with(json!({"nodeSelector": {"pool": "b"}})), true),
            (
                pod_with(
                    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}),
                ),
                true,
            ),
            (pod_with(json!({"affinity": {"nodeAffinity": {}}})), false),
        ];
        let mut cache = ClusterCache::new();
        for node in nodes {
            cache.apply(Change::Upsert(Object::Node(
                serde_json::from_value(node).unwrap(),
            )));
        }
        for (pod, selects) in &pods {
            assert_eq!(selects_nodes(pod), *selects, "{:?}", pod.pod.spec);
            for node in cache.nodes_sorted() {
                // Wherever the shortcut applies, the full check agrees.
                if !selects && !node.cordoned_or_tainted {
                    assert_eq!(check_pod_on_node(pod, node), Ok(()), "{}", node.name);
                }
            }
        }
        // The skipped check is real elsewhere: a cordoned node refuses a plain pod.
        let cordoned = cache.node("cordoned").unwrap();
        assert!(check_pod_on_node(&pods[0].0, cordoned).is_err());
    }

    #[test]
    fn least_allocated_is_kube_schedulers_share_left_over_cpu_and_memory() {
        let mut cache = ClusterCache::new();
        cache.apply(Change::Upsert(Object::Node(node(json!({
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}
        })))));
        let busy: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "busy", "namespace": "default", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                     "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}
        }))
        .unwrap();
        cache.apply(Change::Upsert(Object::Pod(busy)));
        let node = cache.node("n1").unwrap();
        let pod = |requests: Value| {
            PodInfo::new(Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}
                }))
                .unwrap(),
            ))
        };
        // cpu (8 - 2 - 2) / 8 = 50, memory (16 - 4 - 4) / 16 = 50.
        let two = pod(json!({"cpu": "2", "memory": "4Gi"}));
        assert_eq!(least_allocated_score(&two, node, &Resources::new()), 50);
        // Held capacity counts as taken: cpu (8 - 6) / 8 = 25, memory 50.
        let mut held_cpu = Resources::new();
        held_cpu.set("cpu", 2000);
        assert_eq!(least_allocated_score(&two, node, &held_cpu), 37);
        // A pod asking nothing counts kube-scheduler's non-zero defaults (100m, 200Mi):
        // cpu 5900/8000 → 73, memory (12Gi - 200Mi)/16Gi → 73.
        assert_eq!(
            least_allocated_score(&pod(json!({})), node, &Resources::new()),
            73
        );
        // More than the node has leaves nothing: 0 for cpu, memory 50.
        let big = pod(json!({"cpu": "7", "memory": "4Gi"}));
        assert_eq!(least_allocated_score(&big, node, &Resources::new()), 25);
    }
}

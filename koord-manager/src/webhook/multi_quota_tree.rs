//! Multi-quota-tree node affinity (upstream pod mutating
//! `addNodeAffinityForMultiQuotaTree`, feature gate `MultiQuotaTree`): a pod
//! created in a quota tree gets that tree's nodes as a required node
//! affinity. The tree's nodes are the `nodeSelector` of the
//! ElasticQuotaProfile labelled with the tree's
//! `quota.scheduling.koordinator.sh/tree-id`.

use std::collections::BTreeMap;

use apis::extension::{LABEL_QUOTA_TREE_ID, get_quota_namespaces, quota_name_of_pod};
use apis::quota::v1alpha1::ElasticQuotaProfile;
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The tree ID of the pod's quota: the quota named by the pod's quota label
/// (else named after its namespace), else the quota whose namespaces
/// annotation lists the pod's namespace (upstream `GetQuotaInfo`). Empty
/// when there is no such quota or it belongs to no tree.
pub fn quota_tree_of_pod(pod: &Pod, quotas: &[&ElasticQuota]) -> String {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = match quota_name_of_pod(&labels) {
        "" => namespace,
        labelled => labelled,
    };
    let quota = quotas
        .iter()
        .find(|q| q.metadata.name.as_deref() == Some(name))
        .or_else(|| {
            quotas.iter().find(|q| {
                q.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| get_quota_namespaces(a).ok().flatten())
                    .is_some_and(|namespaces| namespaces.iter().any(|ns| ns == namespace))
            })
        });
    quota
        .and_then(|q| q.metadata.labels.as_ref())
        .and_then(|labels| labels.get(LABEL_QUOTA_TREE_ID))
        .cloned()
        .unwrap_or_default()
}

/// The profile of tree `tree_id`: the first labelled with it, by namespace
/// and name (upstream takes the first its list returns).
pub fn profile_of_tree<'a>(
    tree_id: &str,
    profiles: &[&'a ElasticQuotaProfile],
) -> Option<&'a ElasticQuotaProfile> {
    let mut matching: Vec<&ElasticQuotaProfile> = profiles
        .iter()
        .copied()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_QUOTA_TREE_ID))
                .is_some_and(|id| id == tree_id)
        })
        .collect();
    matching.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    matching.first().copied()
}

/// A label selector as node selector requirements: each `matchLabels` entry
/// (by key) as `In [value]`, then the `matchExpressions` as they are.
pub fn node_selector_requirements(selector: &LabelSelector) -> Vec<NodeSelectorRequirement> {
    let labels: BTreeMap<&String, &String> = selector.match_labels.iter().flatten().collect();
    labels
        .into_iter()
        .map(|(key, value)| NodeSelectorRequirement {
            key: key.clone(),
            operator: "In".to_owned(),
            values: Some(vec![value.clone()]),
        })
        .chain(
            selector
                .match_expressions
                .iter()
                .flatten()
                .map(|expression| NodeSelectorRequirement {
                    key: expression.key.clone(),
                    operator: expression.operator.clone(),
                    values: expression.values.clone(),
                }),
        )
        .collect()
}

/// Adds the pod's quota tree's nodes to its required node affinity: the
/// requirements are appended to every existing node selector term (or make
/// the only term). Returns whether the pod changed. A pod outside any tree,
/// a tree without a profile, or a profile whose selector is empty (it selects
/// every node) leaves the pod alone.
pub fn add_node_affinity_for_multi_quota_tree(
    pod: &mut Pod,
    quotas: &[&ElasticQuota],
    profiles: &[&ElasticQuotaProfile],
) -> bool {
    let tree_id = quota_tree_of_pod(pod, quotas);
    if tree_id.is_empty() {
        return false;
    }
    let Some(profile) = profile_of_tree(&tree_id, profiles) else {
        return false;
    };
    let requirements = node_selector_requirements(&profile.spec.node_selector);
    if requirements.is_empty() {
        return false;
    }
    let Some(spec) = pod.spec.as_mut() else {
        return false;
    };
    let required = spec
        .affinity
        .get_or_insert_with(Affinity::default)
        .node_affinity
        .get_or_insert_with(NodeAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    if required.node_selector_terms.is_empty() {
        required.node_selector_terms.push(NodeSelectorTerm {
            match_expressions: Some(requirements),
            ..NodeSelectorTerm::default()
        });
    } else {
        for term in &mut required.node_selector_terms {
            term.match_expressions
                .get_or_insert_with(Vec::new)
                .extend(requirements.iter().cloned());
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn profile(name: &str, tree: &str, pool: &str) -> ElasticQuotaProfile {
        serde_json::from_value(json!({
            "apiVersion": "quota.koordinator.sh/v1alpha1", "kind": "ElasticQuotaProfile",
            "metadata": {"name": name, "namespace": "kube-system", "labels": {LABEL_QUOTA_TREE_ID: tree}},
            "spec": {"quotaName": format!("root-{name}"), "nodeSelector": {"matchLabels": {"node-pool": pool}}}
        }))
        .unwrap()
    }

    fn quota(namespace: &str, name: &str, labels: Value, annotations: Value) -> ElasticQuota {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": {}
        }))
        .unwrap()
    }

    fn pod(namespace: &str, quota: Option<&str>, affinity: Option<Value>) -> Pod {
        let mut value = json!({"metadata": {"name": "test-pod-1", "namespace": namespace}, "spec": {"containers": []}});
        if let Some(quota) = quota {
            value["metadata"]["labels"] = json!({"quota.scheduling.koordinator.sh/name": quota});
        }
        if let Some(affinity) = affinity {
            value["spec"]["affinity"] = affinity;
        }
        serde_json::from_value(value).unwrap()
    }

    fn required(expressions: Value) -> Value {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": expressions}]
        }}})
    }

    fn pool(name: &str) -> Value {
        json!({"key": "node-pool", "operator": "In", "values": [name]})
    }

    /// Upstream TestAddNodeAffinityForMultiQuotaTree.
    #[test]
    fn upstream_table() {
        let profiles = [
            profile("profileA", "tree1", "nodePoolA"),
            profile("profileB", "tree2", "nodePoolB"),
        ];
        let quotas = [
            quota("kube-system", "other-quota", json!({}), json!({})),
            quota(
                "kube-system",
                "root-quota-a",
                json!({LABEL_QUOTA_TREE_ID: "tree1", "quota.scheduling.koordinator.sh/is-parent": "true"}),
                json!({}),
            ),
            quota(
                "kube-system",
                "root-quota-a-child1",
                json!({LABEL_QUOTA_TREE_ID: "tree1", "quota.scheduling.koordinator.sh/parent": "root-quota-a"}),
                json!({}),
            ),
            quota(
                "namespace1",
                "namespace1",
                json!({LABEL_QUOTA_TREE_ID: "tree1", "quota.scheduling.koordinator.sh/parent": "root-quota-a"}),
                json!({}),
            ),
            quota(
                "kube-system",
                "root-quota-b",
                json!({LABEL_QUOTA_TREE_ID: "tree2", "quota.scheduling.koordinator.sh/is-parent": "true"}),
                json!({"quota.scheduling.koordinator.sh/namespaces": "[\"namespace2\"]"}),
            ),
            quota(
                "kube-system",
                "root-quota-b-child1",
                json!({LABEL_QUOTA_TREE_ID: "tree2", "quota.scheduling.koordinator.sh/parent": "root-quota-b"}),
                json!({}),
            ),
        ];
        let quotas: Vec<&ElasticQuota> = quotas.iter().collect();
        let profiles: Vec<&ElasticQuotaProfile> = profiles.iter().collect();
        let zone = json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["cn-hangzhou-a"]});
        let cases: Vec<(&str, Pod, Option<Value>)> = vec![
            ("no quota label", pod("default", None, None), None),
            (
                "no quota profile",
                pod("default", Some("other-quota"), None),
                None,
            ),
            (
                "add node affinity",
                pod("default", Some("root-quota-a-child1"), None),
                Some(required(json!([pool("nodePoolA")]))),
            ),
            (
                "append node affinity",
                pod(
                    "default",
                    Some("root-quota-a-child1"),
                    Some(required(json!([zone.clone()]))),
                ),
                Some(required(json!([zone.clone(), pool("nodePoolA")]))),
            ),
            (
                "multi quotas",
                pod("default", Some("root-quota-b-child1"), None),
                Some(required(json!([pool("nodePoolB")]))),
            ),
            (
                "default quota",
                pod("namespace1", None, None),
                Some(required(json!([pool("nodePoolA")]))),
            ),
            (
                "default quota 2",
                pod("namespace2", None, None),
                Some(required(json!([pool("nodePoolB")]))),
            ),
        ];
        for (name, mut pod, want) in cases {
            let before = pod.clone();
            let mutated = add_node_affinity_for_multi_quota_tree(&mut pod, &quotas, &profiles);
            assert_eq!(mutated, want.is_some(), "{name}");
            let spec = pod.spec.as_ref().unwrap();
            match want {
                None => assert_eq!(pod, before, "{name}"),
                Some(affinity) => assert_eq!(
                    serde_json::to_value(&spec.affinity).unwrap(),
                    affinity,
                    "{name}"
                ),
            }
        }
    }

    #[test]
    fn every_term_gets_the_requirements_and_expressions_keep_their_operators() {
        let mut selective = profile("p", "t", "gpu");
        selective.spec.node_selector = serde_json::from_value(json!({
            "matchLabels": {"zone": "b", "pool": "gpu"},
            "matchExpressions": [{"key": "arch", "operator": "NotIn", "values": ["arm64"]},
                                 {"key": "ready", "operator": "Exists"}]
        }))
        .unwrap();
        let quota = quota("ns", "q", json!({LABEL_QUOTA_TREE_ID: "t"}), json!({}));
        let mut pod = pod(
            "ns",
            Some("q"),
            Some(
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                                          {"matchExpressions": [{"key": "x", "operator": "Exists"}]}]
                }}}),
            ),
        );
        assert!(add_node_affinity_for_multi_quota_tree(
            &mut pod,
            &[&quota],
            &[&selective]
        ));
        let affinity = serde_json::to_value(&pod.spec.as_ref().unwrap().affinity).unwrap();
        let wanted = json!([
            {"key": "pool", "operator": "In", "values": ["gpu"]},
            {"key": "zone", "operator": "In", "values": ["b"]},
            {"key": "arch", "operator": "NotIn", "values": ["arm64"]},
            {"key": "ready", "operator": "Exists"}
        ]);
        let terms = &affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(terms[0]["matchExpressions"], wanted);
        assert_eq!(terms[0]["matchFields"][0]["key"], "metadata.name");
        let mut second = vec![json!({"key": "x", "operator": "Exists"})];
        second.extend(wanted.as_array().unwrap().iter().cloned());
        assert_eq!(terms[1]["matchExpressions"], Value::Array(second));

        // An empty selector (every node) adds nothing.
        let mut everything = profile("p", "t", "gpu");
        everything.spec.node_selector = LabelSelector::default();
        let mut plain = self::pod("ns", Some("q"), None);
        assert!(!add_node_affinity_for_multi_quota_tree(
            &mut plain,
            &[&quota],
            &[&everything]
        ));
        assert!(plain.spec.unwrap().affinity.is_none());
    }

    #[test]
    fn the_first_profile_of_a_tree_by_namespace_and_name_wins() {
        let mut late = profile("b", "t", "late");
        late.metadata.namespace = Some("a-ns".into());
        let early = profile("a", "t", "early");
        let other = profile("0", "other", "x");
        let profiles = [&early, &late, &other];
        assert_eq!(
            profile_of_tree("t", &profiles).and_then(|p| p.metadata.name.as_deref()),
            Some("b")
        );
        assert!(profile_of_tree("none", &profiles).is_none());
    }
}

//! Upstream's `NodeFit`: could a pod run on a node? Its node selector and
//! required node affinity match, it tolerates the node's NoSchedule and
//! NoExecute taints, its requests fit what the node's pods leave of
//! `status.allocatable`, and the node is schedulable.

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};

use crate::model::{Amounts, NodeView, PodView};

/// Why the pod does not fit; empty when it does.
pub fn node_fit(pod: &PodView, node: &NodeView, requested_on_node: &Amounts) -> Vec<String> {
    let mut problems = Vec::new();
    if !matches_node_selector(pod, node) {
        problems.push("pod node selector does not match the node label".to_string());
    }
    let untolerated = node.taints.iter().any(|taint| {
        (taint.effect == "NoSchedule" || taint.effect == "NoExecute")
            && !pod.tolerations.iter().any(|t| tolerates(t, taint))
    });
    if untolerated {
        problems.push("pod does not tolerate taints on the node".to_string());
    }
    for (name, request) in &pod.requests {
        let allocatable = node.allocatable.get(name).copied();
        let used = requested_on_node.get(name).copied().unwrap_or(0);
        let insufficient = match allocatable {
            // Upstream keeps cpu, memory and pods even when the node lists none.
            None if !matches!(name.as_str(), "cpu" | "memory" | "pods") => true,
            allocatable => *request > allocatable.unwrap_or(0).saturating_sub(used),
        };
        if insufficient {
            problems.push(format!("insufficient {name}"));
        }
    }
    if node.unschedulable {
        problems.push("node is not schedulable".to_string());
    }
    problems
}

/// Whether [`node_fit`] finds nothing, without building the reasons.
pub fn fits(pod: &PodView, node: &NodeView, requested_on_node: &Amounts) -> bool {
    if node.unschedulable || !matches_node_selector(pod, node) {
        return false;
    }
    let untolerated = node.taints.iter().any(|taint| {
        (taint.effect == "NoSchedule" || taint.effect == "NoExecute")
            && !pod.tolerations.iter().any(|t| tolerates(t, taint))
    });
    if untolerated {
        return false;
    }
    pod.requests.iter().all(
        |(name, request)| match node.allocatable.get(name).copied() {
            None if !matches!(name.as_str(), "cpu" | "memory" | "pods") => false,
            allocatable => {
                let used = requested_on_node.get(name).copied().unwrap_or(0);
                *request <= allocatable.unwrap_or(0).saturating_sub(used)
            }
        },
    )
}

/// Kubernetes `ToleratesTaint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        return operator == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match operator {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

fn matches_node_selector(pod: &PodView, node: &NodeView) -> bool {
    let labels_match = pod
        .node_selector
        .iter()
        .all(|(key, value)| node.labels.get(key) == Some(value));
    if !labels_match {
        return false;
    }
    match &pod.required_node_affinity {
        None => true,
        Some(selector) => selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, node)),
    }
}

fn term_matches(term: &NodeSelectorTerm, node: &NodeView) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|requirement| requirement_matches(requirement, node.labels.get(&requirement.key)))
        && fields.iter().all(|requirement| {
            requirement.key == "metadata.name" && requirement_matches(requirement, Some(&node.name))
        })
}

fn requirement_matches(requirement: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let values = requirement.values.as_deref().unwrap_or(&[]);
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(value), [bound]) = (value, values) else {
                return false;
            };
            match (value.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(value), Ok(bound)) if requirement.operator == "Gt" => value > bound,
                (Ok(value), Ok(bound)) => value < bound,
                _ => false,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelector;

    fn node() -> NodeView {
        NodeView {
            name: "n1".into(),
            labels: [("zone".to_string(), "a".to_string())].into(),
            allocatable: [("cpu".to_string(), 4000), ("memory".to_string(), 8 << 30)].into(),
            ready: true,
            ..Default::default()
        }
    }

    #[test]
    fn requests_selector_affinity_taints_and_cordon_each_count() {
        let mut pod = PodView {
            requests: [("cpu".to_string(), 1000)].into(),
            ..Default::default()
        };
        let used: Amounts = [("cpu".to_string(), 3500)].into();
        assert_eq!(
            node_fit(&pod, &node(), &Amounts::new()),
            Vec::<String>::new()
        );
        assert_eq!(node_fit(&pod, &node(), &used), vec!["insufficient cpu"]);
        assert!(fits(&pod, &node(), &Amounts::new()));
        assert!(!fits(&pod, &node(), &used));
        pod.node_selector = [("zone".to_string(), "b".to_string())].into();
        assert!(node_fit(&pod, &node(), &Amounts::new())[0].contains("node selector"));
        pod.node_selector.clear();
        pod.required_node_affinity = Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "zone".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["a".into()]),
                }]),
                match_fields: None,
            }],
        });
        assert_eq!(node_fit(&pod, &node(), &Amounts::new()).len(), 1);
        pod.required_node_affinity = None;
        let mut tainted = node();
        tainted.taints.push(Taint {
            key: "dedicated".into(),
            effect: "NoSchedule".into(),
            value: Some("gpu".into()),
            time_added: None,
        });
        tainted.unschedulable = true;
        assert_eq!(
            node_fit(&pod, &tainted, &Amounts::new()),
            vec![
                "pod does not tolerate taints on the node",
                "node is not schedulable"
            ]
        );
        pod.tolerations.push(Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("gpu".into()),
            effect: None,
            toleration_seconds: None,
        });
        assert_eq!(
            node_fit(&pod, &tainted, &Amounts::new()),
            vec!["node is not schedulable"]
        );
        assert!(!fits(&pod, &tainted, &Amounts::new()));
        tainted.unschedulable = false;
        assert!(fits(&pod, &tainted, &Amounts::new()));
        // An extended resource the node does not offer never fits.
        pod.requests.insert("example.com/fpga".into(), 1);
        assert!(
            node_fit(&pod, &node(), &Amounts::new())
                .contains(&"insufficient example.com/fpga".to_string())
        );
        assert!(!fits(&pod, &node(), &Amounts::new()));
    }
}

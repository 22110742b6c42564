//! Upstream's orders: hot nodes by weighted usage (highest first), and the
//! victims on one hot node by `sorter.PodSorter` — Koordinator priority
//! class, priority, Kubernetes QoS, Koordinator QoS, deletion cost, eviction
//! cost (all lowest first), then the pods that best cover the excess usage,
//! then the youngest.

use std::cmp::Ordering;

use apis::extension::qos::KubeQoSClass;
use apis::extension::{PriorityClass, QoSClass};

use crate::model::{Amounts, PodView};

fn priority_class_rank(class: PriorityClass) -> u8 {
    match class {
        PriorityClass::None => 5,
        PriorityClass::Prod => 4,
        PriorityClass::Mid => 3,
        PriorityClass::Batch => 2,
        PriorityClass::Free => 1,
    }
}

fn qos_rank(class: QoSClass) -> u8 {
    match class {
        QoSClass::None => 5,
        QoSClass::System | QoSClass::LSE => 4,
        QoSClass::LSR => 3,
        QoSClass::LS => 2,
        QoSClass::BE => 1,
    }
}

fn kube_qos_rank(class: Option<KubeQoSClass>) -> u8 {
    match class {
        Some(KubeQoSClass::Guaranteed) => 3,
        Some(KubeQoSClass::Burstable) => 2,
        Some(KubeQoSClass::BestEffort) => 1,
        None => 0,
    }
}

/// Upstream `mostRequestedScore`: usage per mille of capacity, capped at 1000.
fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    let requested = requested.min(capacity);
    requested.saturating_mul(1000) / capacity
}

/// Upstream `ResourceUsageScorer` over `(resource, usage)` entries.
pub fn node_score<'a>(
    usage: impl Iterator<Item = (&'a str, i64)>,
    capacity: &Amounts,
    weights: &crate::config::types::ResourceWeights,
) -> i64 {
    let mut score: i64 = 0;
    let mut weight_sum: i64 = 0;
    for (name, used) in usage {
        let weight = weights.get(name).copied().unwrap_or(0);
        let resource_score = most_requested_score(used, capacity.get(name).copied().unwrap_or(0));
        score = score.saturating_add(resource_score.saturating_mul(weight));
        weight_sum = weight_sum.saturating_add(weight);
    }
    if weight_sum == 0 {
        0
    } else {
        score / weight_sum
    }
}

/// Upstream `mostRequestedScorePod`: the closer the pod's usage is to the
/// excess, the higher; a pod larger than the excess scores `1/ratio + 1`.
fn pod_cover_score(requested: i64, excess: i64) -> f64 {
    if excess == 0 {
        return 0.0;
    }
    let ratio = requested as f64 / excess as f64;
    if ratio >= 1.0 {
        1.0 / ratio + 1.0
    } else {
        ratio
    }
}

/// Upstream `ResourceUsageScorerPod` of one pod's metric against the excess
/// of the over-used resources (`weights` holds only those).
pub fn pod_usage_score(
    metric: &Amounts,
    excess: &Amounts,
    weights: &crate::config::types::ResourceWeights,
) -> f64 {
    let mut score = 0.0;
    let mut weight_sum: i64 = 0;
    for (name, used) in metric {
        let weight = weights.get(name).copied().unwrap_or(0);
        let resource_score = pod_cover_score(*used, excess.get(name).copied().unwrap_or(0));
        score += resource_score * weight as f64;
        weight_sum = weight_sum.saturating_add(weight);
    }
    if weight_sum == 0 {
        0.0
    } else {
        score / weight_sum as f64
    }
}

/// One victim candidate with the facts the order reads.
pub struct Candidate<'a> {
    pub pod: &'a PodView,
    /// `None` when the NodeMetric has no entry for the pod.
    pub usage_score: Option<f64>,
}

/// The victim order: `Less` comes first (is evicted first).
pub fn compare_victims(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    let (p, q) = (a.pod, b.pod);
    priority_class_rank(p.priority_class)
        .cmp(&priority_class_rank(q.priority_class))
        .then_with(|| p.priority.unwrap_or(0).cmp(&q.priority.unwrap_or(0)))
        .then_with(|| kube_qos_rank(p.kube_qos).cmp(&kube_qos_rank(q.kube_qos)))
        .then_with(|| qos_rank(p.qos_class).cmp(&qos_rank(q.qos_class)))
        .then_with(|| p.deletion_cost.cmp(&q.deletion_cost))
        .then_with(|| p.eviction_cost.cmp(&q.eviction_cost))
        // Higher usage score first; pods without a metric last.
        .then_with(|| match (a.usage_score, b.usage_score) {
            (Some(x), Some(y)) => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
        // Younger first: upstream ranks the older pod higher.
        .then_with(|| b.pod.created_at.cmp(&a.pod.created_at))
        // Not upstream (its sort is unstable): a fixed order for equal pods.
        .then_with(|| p.namespace.cmp(&q.namespace))
        .then_with(|| p.name.cmp(&q.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_follow_upstream_formulas() {
        let capacity: Amounts = [("cpu".to_string(), 4000), ("memory".to_string(), 1000)].into();
        let weights = [("cpu".to_string(), 1), ("memory".to_string(), 1)].into();
        // cpu 750‰, memory 500‰ → (750 + 500) / 2.
        let score = node_score(
            [("cpu", 3000), ("memory", 500), ("pods", 7)].into_iter(),
            &capacity,
            &weights,
        );
        assert_eq!(score, 625);
        // Usage above capacity counts as full.
        assert_eq!(
            node_score([("cpu", 9000)].into_iter(), &capacity, &weights),
            1000
        );
        let excess: Amounts = [("cpu".to_string(), 1000)].into();
        let cpu_only = [("cpu".to_string(), 1)].into();
        let exact: Amounts = [("cpu".to_string(), 1000)].into();
        let half: Amounts = [("cpu".to_string(), 500)].into();
        let double: Amounts = [("cpu".to_string(), 2000)].into();
        assert_eq!(pod_usage_score(&exact, &excess, &cpu_only), 2.0);
        assert_eq!(pod_usage_score(&half, &excess, &cpu_only), 0.5);
        assert_eq!(pod_usage_score(&double, &excess, &cpu_only), 1.5);
    }
}

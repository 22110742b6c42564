//! ElasticQuota: quota groups form a tree (parent labels under the built-in
//! root); each group's *runtime* quota is its min plus a share, by shared
//! weight, of what its siblings leave unused, never more than it requests.
//! A pod is admitted when its group's use stays within runtime (or max).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::SystemTime;

use apis::extension::elastic_quota::{
    ANNOTATION_CHILD_REQUEST, ANNOTATION_NON_PREEMPTIBLE_REQUEST, ANNOTATION_NON_PREEMPTIBLE_USED,
    ANNOTATION_REQUEST, ANNOTATION_RUNTIME, DEFAULT_QUOTA_NAME, ROOT_QUOTA_NAME, SYSTEM_QUOTA_NAME,
    get_quota_namespaces, is_allow_lent_resource, is_parent_quota, is_pod_non_preemptible,
    is_tree_root_quota, parent_quota_name, quota_name_of_pod, shared_weight_or_max,
};
use apis::scheduling_sigs::v1alpha1::ElasticQuota as ElasticQuotaObject;

use crate::cache::{ClusterCache, ClusterEvent, ObjectKind, PodInfo};
use crate::config::{ConfigError, ElasticQuotaArgs, ElasticQuotaArgsRaw, parse_args};
use crate::framework::{AnnotationWrite, CycleState, Plugin, Rejection};
use crate::resources::Resources;

pub const NAME: &str = "ElasticQuota";
/// API resource the status annotations are written to.
pub const RESOURCE: &str = "elasticquotas.scheduling.sigs.k8s.io";

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let raw: ElasticQuotaArgsRaw = parse_args(NAME, args)?;
    Ok(Box::new(ElasticQuota::new(raw.with_defaults())))
}

/// One quota group as the tree sees it.
#[derive(Debug, Clone, Default)]
pub struct QuotaNode {
    pub name: String,
    pub namespace: String,
    pub parent: String,
    pub is_parent: bool,
    pub is_tree_root: bool,
    pub min: Resources,
    pub max: Resources,
    pub shared_weight: Resources,
    pub allow_lent: bool,
    pub namespaces: Vec<String>,
    /// Present as a CR (the built-ins may not be).
    pub from_object: bool,
    pub current_annotations: BTreeMap<String, String>,
}

/// Per-pod accounting.
#[derive(Debug, Clone)]
struct PodCharge {
    quota: String,
    requests: Resources,
    assigned: bool,
    non_preemptible: bool,
}

/// Sums per quota of its own pods.
#[derive(Debug, Clone, Default)]
struct QuotaUsage {
    request: Resources,
    used: Resources,
    non_preemptible_request: Resources,
    non_preemptible_used: Resources,
}

/// Derived figures, recomputed lazily after any change.
#[derive(Debug, Clone, Default)]
pub struct QuotaFigures {
    pub runtime: HashMap<String, Resources>,
    /// Request bounded by max (children's bounded requests for parents).
    pub limited_request: HashMap<String, Resources>,
    pub child_request: HashMap<String, Resources>,
    /// Own plus descendants' use.
    pub subtree_used: HashMap<String, Resources>,
}

/// See the module docs.
pub struct ElasticQuota {
    args: ElasticQuotaArgs,
    quotas: BTreeMap<String, QuotaNode>,
    pods: HashMap<String, PodCharge>,
    usage: HashMap<String, QuotaUsage>,
    cluster_total: Resources,
    figures: Mutex<Option<QuotaFigures>>,
    last_written: HashMap<String, BTreeMap<String, String>>,
    last_write_at: Option<SystemTime>,
}

fn builtin(name: &str, namespace: &str, max: Resources) -> QuotaNode {
    QuotaNode {
        name: name.to_string(),
        namespace: namespace.to_string(),
        parent: if name == ROOT_QUOTA_NAME {
            String::new()
        } else {
            ROOT_QUOTA_NAME.to_string()
        },
        is_parent: name == ROOT_QUOTA_NAME,
        shared_weight: max.clone(),
        max,
        allow_lent: true,
        ..QuotaNode::default()
    }
}

/// Splits `total` over `weights` in proportion, handing the rounding
/// remainder to the largest fractional parts (ties by position).
fn split_by_weight(total: i64, weights: &[i64]) -> Vec<i64> {
    let weight_sum: i128 = weights.iter().map(|w| (*w).max(0) as i128).sum();
    let mut shares = vec![0i64; weights.len()];
    if weight_sum <= 0 || total <= 0 {
        return shares;
    }
    let mut remainders = Vec::with_capacity(weights.len());
    let mut handed_out = 0i64;
    for (index, weight) in weights.iter().enumerate() {
        if *weight <= 0 {
            continue;
        }
        let product = *weight as i128 * total as i128;
        let base = (product / weight_sum) as i64;
        shares[index] = base;
        handed_out += base;
        remainders.push((product % weight_sum, index));
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut residual = total - handed_out;
    for (_, index) in remainders {
        if residual <= 0 {
            break;
        }
        shares[index] += 1;
        residual -= 1;
    }
    shares
}

/// One resource dimension of one parent: the children's runtime.
/// Inputs per child: (min, limited request, shared weight, allow lent).
pub fn redistribute(total: i64, children: &[(i64, i64, i64, bool)]) -> Vec<i64> {
    let mut runtime = vec![0i64; children.len()];
    let mut remaining = total;
    let mut hungry: Vec<usize> = Vec::new();
    for (index, (min, request, _, allow_lent)) in children.iter().enumerate() {
        if request > min {
            runtime[index] = *min;
            hungry.push(index);
        } else {
            runtime[index] = if *allow_lent { *request } else { *min };
        }
        remaining -= runtime[index];
    }
    while remaining > 0 && !hungry.is_empty() {
        let weights: Vec<i64> = hungry.iter().map(|i| children[*i].2).collect();
        if weights.iter().all(|w| *w <= 0) {
            break;
        }
        let shares = split_by_weight(remaining, &weights);
        remaining = 0;
        let mut still_hungry = Vec::new();
        for (share, index) in shares.into_iter().zip(hungry) {
            runtime[index] += share;
            let request = children[index].1;
            if runtime[index] < request {
                still_hungry.push(index);
            } else {
                remaining += runtime[index] - request;
                runtime[index] = request;
            }
        }
        hungry = still_hungry;
    }
    runtime
}

impl ElasticQuota {
    pub fn new(args: ElasticQuotaArgs) -> Self {
        let mut plugin = Self {
            quotas: BTreeMap::new(),
            pods: HashMap::new(),
            usage: HashMap::new(),
            cluster_total: Resources::new(),
            figures: Mutex::new(None),
            last_written: HashMap::new(),
            last_write_at: None,
            args,
        };
        plugin.reset_builtins();
        plugin
    }

    fn reset_builtins(&mut self) {
        let namespace = self.args.quota_group_namespace.clone();
        let root = builtin(ROOT_QUOTA_NAME, &namespace, Resources::new());
        let system = builtin(
            SYSTEM_QUOTA_NAME,
            &namespace,
            Resources::from_list(&self.args.system_quota_group_max),
        );
        let default = builtin(
            DEFAULT_QUOTA_NAME,
            &namespace,
            Resources::from_list(&self.args.default_quota_group_max),
        );
        for quota in [root, system, default] {
            if !self.quotas.get(&quota.name).is_some_and(|q| q.from_object) {
                self.quotas.insert(quota.name.clone(), quota);
            }
        }
    }

    fn invalidate(&self) {
        if let Ok(mut figures) = self.figures.lock() {
            *figures = None;
        }
    }

    /// The quota a pod is charged to (upstream's mapping order).
    pub fn quota_of(&self, pod: &PodInfo) -> String {
        let labelled = quota_name_of_pod(pod.labels());
        if !labelled.is_empty() && self.quotas.contains_key(labelled) {
            return labelled.to_string();
        }
        if self.quotas.contains_key(&pod.namespace) {
            return pod.namespace.clone();
        }
        if let Some(quota) = self
            .quotas
            .values()
            .find(|q| q.namespaces.contains(&pod.namespace))
        {
            return quota.name.clone();
        }
        DEFAULT_QUOTA_NAME.to_string()
    }

    fn charge(&mut self, key: &str, charge: PodCharge) {
        let usage = self.usage.entry(charge.quota.clone()).or_default();
        usage.request.add(&charge.requests);
        if charge.non_preemptible {
            usage.non_preemptible_request.add(&charge.requests);
        }
        if charge.assigned {
            usage.used.add(&charge.requests);
            if charge.non_preemptible {
                usage.non_preemptible_used.add(&charge.requests);
            }
        }
        self.pods.insert(key.to_string(), charge);
    }

    fn discharge(&mut self, key: &str) {
        let Some(charge) = self.pods.remove(key) else {
            return;
        };
        if let Some(usage) = self.usage.get_mut(&charge.quota) {
            usage.request.sub(&charge.requests);
            if charge.non_preemptible {
                usage.non_preemptible_request.sub(&charge.requests);
            }
            if charge.assigned {
                usage.used.sub(&charge.requests);
                if charge.non_preemptible {
                    usage.non_preemptible_used.sub(&charge.requests);
                }
            }
        }
    }

    fn charge_pod(&mut self, pod: &PodInfo, assigned: bool) {
        self.discharge(&pod.key);
        let charge = PodCharge {
            quota: self.quota_of(pod),
            requests: pod.requests.clone(),
            assigned,
            non_preemptible: is_pod_non_preemptible(pod.labels()),
        };
        self.charge(&pod.key, charge);
        self.invalidate();
    }

    fn quota_from_object(&self, object: &ElasticQuotaObject) -> QuotaNode {
        let empty = BTreeMap::new();
        let labels = object.metadata.labels.as_ref().unwrap_or(&empty);
        let annotations = object.metadata.annotations.as_ref().unwrap_or(&empty);
        let name = object.metadata.name.clone().unwrap_or_default();
        let max_list = object.spec.max.clone().unwrap_or_default();
        QuotaNode {
            parent: parent_quota_name(&name, labels).to_string(),
            namespace: object.metadata.namespace.clone().unwrap_or_default(),
            is_parent: is_parent_quota(labels),
            is_tree_root: is_tree_root_quota(labels),
            min: Resources::from_list(&object.spec.min.clone().unwrap_or_default()),
            max: Resources::from_list(&max_list),
            shared_weight: Resources::from_list(&shared_weight_or_max(annotations, &max_list)),
            allow_lent: is_allow_lent_resource(labels),
            namespaces: get_quota_namespaces(annotations)
                .ok()
                .flatten()
                .unwrap_or_default(),
            from_object: true,
            current_annotations: annotations.clone(),
            name,
        }
    }

    fn rebuild_quotas(&mut self, cache: &ClusterCache) {
        self.quotas.clear();
        for object in cache.elastic_quotas.values() {
            let node = self.quota_from_object(object);
            if !node.name.is_empty() {
                self.quotas.insert(node.name.clone(), node);
            }
        }
        self.reset_builtins();
        let pods: Vec<_> = cache.pods().cloned().collect();
        self.pods.clear();
        self.usage.clear();
        for pod in pods {
            self.charge_pod(&pod, pod.node.is_some());
        }
        self.invalidate();
    }

    fn recompute_cluster_total(&mut self, cache: &ClusterCache) {
        let mut total = Resources::new();
        for node in cache.nodes() {
            total.add(&node.allocatable);
        }
        self.cluster_total = total;
        self.invalidate();
    }

    fn children_of(&self, parent: &str) -> Vec<&QuotaNode> {
        self.quotas
            .values()
            .filter(|q| q.parent == parent && q.name != parent)
            .collect()
    }

    /// Computes runtime, bounded requests and subtree use for every quota.
    pub fn compute_figures(&self) -> QuotaFigures {
        let mut figures = QuotaFigures::default();
        // Bottom-up: bounded requests and subtree use.
        fn walk(
            plugin: &ElasticQuota,
            name: &str,
            figures: &mut QuotaFigures,
            depth: usize,
        ) -> (Resources, Resources) {
            let own = plugin.usage.get(name).cloned().unwrap_or_default();
            let mut request = own.request.clone();
            let mut used = own.used.clone();
            let mut child_request = Resources::new();
            if depth < 64 {
                for child in plugin.children_of(name) {
                    let (child_limited, child_used) = walk(plugin, &child.name, figures, depth + 1);
                    child_request.add(&child_limited);
                    used.add(&child_used);
                }
            }
            request.add(&child_request);
            let mut limited = request.clone();
            if let Some(quota) = plugin.quotas.get(name)
                && name != ROOT_QUOTA_NAME
            {
                for (resource, amount) in request.iter() {
                    let max = quota.max.get(resource);
                    limited.set(resource, amount.min(max));
                }
            }
            figures
                .limited_request
                .insert(name.to_string(), limited.clone());
            figures
                .child_request
                .insert(name.to_string(), child_request);
            figures.subtree_used.insert(name.to_string(), used.clone());
            (limited, used)
        }
        walk(self, ROOT_QUOTA_NAME, &mut figures, 0);

        // The built-ins keep their max; the rest of the cluster is shared.
        let mut shared_total = self.cluster_total.clone();
        for builtin_name in [SYSTEM_QUOTA_NAME, DEFAULT_QUOTA_NAME] {
            if let Some(quota) = self.quotas.get(builtin_name) {
                figures
                    .runtime
                    .insert(builtin_name.to_string(), quota.max.clone());
            }
            if let Some(used) = figures.subtree_used.get(builtin_name) {
                shared_total.sub(used);
            }
        }
        figures
            .runtime
            .insert(ROOT_QUOTA_NAME.to_string(), shared_total.clone());
        self.distribute(ROOT_QUOTA_NAME, &shared_total, &mut figures, 0);
        // Separate trees hang below quotas labelled is-root: their min is the tree's total.
        let tree_roots: Vec<&QuotaNode> = self.quotas.values().filter(|q| q.is_tree_root).collect();
        for root in tree_roots {
            let total = root.min.clone();
            figures.runtime.insert(root.name.clone(), total.clone());
            self.distribute(&root.name, &total, &mut figures, 0);
        }
        figures
    }

    fn distribute(
        &self,
        parent: &str,
        total: &Resources,
        figures: &mut QuotaFigures,
        depth: usize,
    ) {
        if depth >= 64 {
            return;
        }
        let children: Vec<&QuotaNode> = self
            .children_of(parent)
            .into_iter()
            .filter(|q| {
                q.name != SYSTEM_QUOTA_NAME && q.name != DEFAULT_QUOTA_NAME && !q.is_tree_root
            })
            .collect();
        if children.is_empty() {
            return;
        }
        let mut runtimes: Vec<Resources> = vec![Resources::new(); children.len()];
        let mut names: Vec<String> = Vec::new();
        for child in &children {
            for (name, _) in child.max.iter().chain(child.min.iter()) {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
        }
        for resource in &names {
            let available = total.get(resource);
            let min_sum: i64 = children.iter().map(|c| c.min.get(resource)).sum();
            let inputs: Vec<(i64, i64, i64, bool)> = children
                .iter()
                .map(|child| {
                    let mut min = child.min.get(resource);
                    if self.args.enable_min_quota_scale && min_sum > available && min_sum > 0 {
                        min = (min as i128 * available.max(0) as i128 / min_sum as i128) as i64;
                    }
                    let request = figures
                        .limited_request
                        .get(&child.name)
                        .map_or(0, |r| r.get(resource));
                    (
                        min,
                        request,
                        child.shared_weight.get(resource),
                        child.allow_lent,
                    )
                })
                .collect();
            for (slot, value) in runtimes.iter_mut().zip(redistribute(available, &inputs)) {
                slot.set(resource, value);
            }
        }
        for (child, runtime) in children.iter().zip(runtimes) {
            figures.runtime.insert(child.name.clone(), runtime.clone());
            self.distribute(&child.name, &runtime, figures, depth + 1);
        }
    }

    /// Current figures, recomputed if anything changed.
    pub fn figures(&self) -> QuotaFigures {
        match self.figures.lock() {
            Ok(mut cached) => cached.get_or_insert_with(|| self.compute_figures()).clone(),
            Err(_) => self.compute_figures(),
        }
    }

    fn with_figures<R>(&self, read: impl FnOnce(&QuotaFigures) -> R) -> R {
        match self.figures.lock() {
            Ok(mut cached) => read(cached.get_or_insert_with(|| self.compute_figures())),
            Err(_) => read(&self.compute_figures()),
        }
    }

    /// The admission check for one pod (pod-level, so it fails every node).
    pub fn admit(&self, pod: &PodInfo) -> Result<(), Rejection> {
        let quota_name = self.quota_of(pod);
        let Some(quota) = self.quotas.get(&quota_name) else {
            return Ok(());
        };
        let own = self.usage.get(&quota_name).cloned().unwrap_or_default();
        // The pod may already be charged as used (a retried bind): do not count it twice.
        let already_used = self.pods.get(&pod.key).is_some_and(|c| c.assigned);
        self.with_figures(|figures| {
            let limit = if self.args.enable_runtime_quota {
                figures.runtime.get(&quota_name).cloned().unwrap_or_default()
            } else {
                quota.max.clone()
            };
            let used = figures.subtree_used.get(&quota_name).cloned().unwrap_or_default();
            let mut exceeded = Vec::new();
            for (resource, _) in quota.max.iter() {
                let request = pod.requests.get(resource);
                if request <= 0 {
                    continue;
                }
                let after = used.get(resource) + if already_used { 0 } else { request };
                if after > limit.get(resource) {
                    exceeded.push(resource.to_string());
                }
            }
            if !exceeded.is_empty() {
                return Err(Rejection::unschedulable(format!(
                    "Insufficient quotas, quotaName: {quota_name}, {}: {}, used: {}, pod's request: {}, exceedDimensions: [{}]",
                    if self.args.enable_runtime_quota { "runtime" } else { "max" },
                    describe(&limit),
                    describe(&used),
                    describe(&pod.requests),
                    exceeded.join(" ")
                )));
            }
            if is_pod_non_preemptible(pod.labels()) {
                let mut exceeded = Vec::new();
                for (resource, _) in quota.max.iter() {
                    let request = pod.requests.get(resource);
                    if request <= 0 {
                        continue;
                    }
                    let after = own.non_preemptible_used.get(resource) + if already_used { 0 } else { request };
                    if after > quota.min.get(resource) {
                        exceeded.push(resource.to_string());
                    }
                }
                if !exceeded.is_empty() {
                    return Err(Rejection::unschedulable(format!(
                        "Insufficient non-preemptible quotas, quotaName: {quota_name}, min: {}, nonPreemptibleUsed: {}, pod's request: {}, exceedDimensions: [{}]",
                        describe(&quota.min),
                        describe(&own.non_preemptible_used),
                        describe(&pod.requests),
                        exceeded.join(" ")
                    )));
                }
            }
            if self.args.enable_check_parent_quota {
                let mut current = quota.parent.clone();
                let mut depth = 0;
                while !current.is_empty() && current != ROOT_QUOTA_NAME && depth < 64 {
                    let Some(parent) = self.quotas.get(&current) else { break };
                    let runtime = figures.runtime.get(&current).cloned().unwrap_or_default();
                    let used = figures.subtree_used.get(&current).cloned().unwrap_or_default();
                    for (resource, _) in parent.max.iter() {
                        let request = pod.requests.get(resource);
                        if request > 0 && used.get(resource) + request > runtime.get(resource) {
                            return Err(Rejection::unschedulable(format!(
                                "Insufficient parent quotas, parentQuotaName: {current}, runtime: {}, used: {}, pod's request: {}",
                                describe(&runtime),
                                describe(&used),
                                describe(&pod.requests)
                            )));
                        }
                    }
                    current = parent.parent.clone();
                    depth += 1;
                }
            }
            Ok(())
        })
    }

    /// The status annotations a quota should carry now.
    fn status_annotations(&self, name: &str, figures: &QuotaFigures) -> BTreeMap<String, String> {
        let own = self.usage.get(name).cloned().unwrap_or_default();
        let json = |r: Option<&Resources>| {
            serde_json::to_string(&r.cloned().unwrap_or_default().to_list())
                .unwrap_or_else(|_| "{}".into())
        };
        BTreeMap::from([
            (
                ANNOTATION_RUNTIME.to_string(),
                json(figures.runtime.get(name)),
            ),
            (
                ANNOTATION_REQUEST.to_string(),
                json(figures.limited_request.get(name)),
            ),
            (
                ANNOTATION_CHILD_REQUEST.to_string(),
                json(figures.child_request.get(name)),
            ),
            (
                ANNOTATION_NON_PREEMPTIBLE_REQUEST.to_string(),
                json(Some(&own.non_preemptible_request)),
            ),
            (
                ANNOTATION_NON_PREEMPTIBLE_USED.to_string(),
                json(Some(&own.non_preemptible_used)),
            ),
        ])
    }
}

fn describe(resources: &Resources) -> String {
    let parts: Vec<String> = resources
        .iter()
        .map(|(name, amount)| format!("{name}={}", crate::resources::format_amount(name, amount).0))
        .collect();
    format!("[{}]", parts.join(" "))
}

impl Plugin for ElasticQuota {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_event(&mut self, event: &ClusterEvent, cache: &ClusterCache) {
        match event {
            ClusterEvent::Pod { old, new, .. } => match (old, new) {
                (_, Some(pod)) => self.charge_pod(pod, pod.node.is_some()),
                (Some(pod), None) => {
                    self.discharge(&pod.key);
                    self.invalidate();
                }
                (None, None) => {}
            },
            ClusterEvent::Object {
                kind: ObjectKind::ElasticQuota,
                ..
            } => self.rebuild_quotas(cache),
            ClusterEvent::Object {
                kind: ObjectKind::Node,
                ..
            } => self.recompute_cluster_total(cache),
            ClusterEvent::Object { .. } => {}
        }
    }

    fn pre_filter(
        &self,
        pod: &PodInfo,
        _cache: &ClusterCache,
        _state: &mut CycleState,
    ) -> Result<(), Rejection> {
        self.admit(pod)
    }

    fn reserve(
        &mut self,
        pod: &PodInfo,
        _node: &str,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<(), Rejection> {
        self.charge_pod(pod, true);
        Ok(())
    }

    fn unreserve(&mut self, pod: &PodInfo, _node: &str, cache: &ClusterCache) {
        match cache.pod(&pod.key) {
            Some(current) => {
                let current = current.clone();
                self.charge_pod(&current, current.node.is_some());
            }
            None => {
                self.discharge(&pod.key);
                self.invalidate();
            }
        }
    }

    fn pending_writes(&mut self, _cache: &ClusterCache, now: SystemTime) -> Vec<AnnotationWrite> {
        if self
            .last_write_at
            .and_then(|at| now.duration_since(at).ok())
            .is_some_and(|elapsed| elapsed < self.args.status_update_interval)
        {
            return Vec::new();
        }
        self.last_write_at = Some(now);
        let figures = self.figures();
        let mut writes = Vec::new();
        for quota in self.quotas.values().filter(|q| q.from_object) {
            let wanted = self.status_annotations(&quota.name, &figures);
            let on_object = wanted
                .iter()
                .all(|(k, v)| quota.current_annotations.get(k) == Some(v));
            if on_object || self.last_written.get(&quota.name) == Some(&wanted) {
                continue;
            }
            self.last_written.insert(quota.name.clone(), wanted.clone());
            writes.push(AnnotationWrite {
                resource: RESOURCE,
                namespace: Some(quota.namespace.clone()),
                name: quota.name.clone(),
                annotations: wanted,
            });
        }
        writes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_hands_out_everything_by_weight() {
        assert_eq!(split_by_weight(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(split_by_weight(100, &[3, 1]), vec![75, 25]);
        assert_eq!(split_by_weight(7, &[0, 0]), vec![0, 0]);
    }

    #[test]
    fn redistribution_follows_min_request_and_weight() {
        // total 100: a wants 80 (min 20), b wants 10 (min 30, lends), c wants 50 (min 10).
        let runtime = redistribute(
            100,
            &[(20, 80, 1, true), (30, 10, 1, true), (10, 50, 1, true)],
        );
        assert_eq!(runtime[1], 10);
        assert_eq!(runtime.iter().sum::<i64>(), 100);
        // 60 is left after 20 + 10 + 10; a and c split it evenly.
        assert_eq!(runtime, vec![50, 10, 40]);
        // A quota that does not lend keeps its min even when idle.
        assert_eq!(
            redistribute(100, &[(30, 0, 1, false), (10, 200, 1, true)]),
            vec![30, 70]
        );
        // Surplus above one child's request flows to the other.
        assert_eq!(
            redistribute(100, &[(0, 10, 1, true), (0, 200, 1, true)]),
            vec![10, 90]
        );
    }
}

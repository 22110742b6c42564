//! ElasticQuota: quota groups form a tree (parent labels under the built-in
//! root); each group's *runtime* quota is its min plus a share, by shared
//! weight, of what its siblings leave unused, never more than it requests.
//! A pod is admitted when its group's use stays within runtime (or max).
//!
//! Upstream's feature gates are taken at their defaults: `MultiQuotaTree` is
//! off, so a quota labelled `is-root` is an ordinary member of the one tree,
//! and `ElasticQuotaGuaranteeUsage` is off, so `guaranteed` and `allocated`
//! stay empty.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apis::extension::elastic_quota::{
    ANNOTATION_ALLOCATED, ANNOTATION_CHILD_REQUEST, ANNOTATION_GUARANTEED,
    ANNOTATION_NON_PREEMPTIBLE_REQUEST, ANNOTATION_NON_PREEMPTIBLE_USED, ANNOTATION_REQUEST,
    ANNOTATION_RUNTIME, DEFAULT_QUOTA_NAME, ROOT_QUOTA_NAME, SYSTEM_QUOTA_NAME,
    get_quota_namespaces, is_allow_lent_resource, is_parent_quota, is_pod_non_preemptible,
    parent_quota_name, quota_name_of_pod, shared_weight_or_max,
};
use apis::scheduling_sigs::v1alpha1::ElasticQuota as ElasticQuotaObject;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cache::{ClusterCache, ClusterEvent, ObjectKind, PodInfo};
use crate::config::{ConfigError, ElasticQuotaArgs, ElasticQuotaArgsRaw, parse_args};
use crate::cow::CowMap;
use crate::framework::{AnnotationWrite, CycleState, Plugin, Rejection, StatusWrite};
use crate::resources::{InvalidAmount, Resources, bound_resources, exact_amount, exact_resources};

pub const NAME: &str = "ElasticQuota";
/// API resource the status annotations and `status.used` are written to.
pub const RESOURCE: &str = "elasticquotas.scheduling.sigs.k8s.io";

/// A status write the watch has not shown on the quota after this long is
/// sent again (a failed write is only logged by the shell).
pub const WRITE_RETRY_AFTER: Duration = Duration::from_secs(10);

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let raw: ElasticQuotaArgsRaw = parse_args(NAME, args)?;
    Ok(Box::new(ElasticQuota::new(raw.with_defaults()?)))
}

/// One quota group as the tree sees it.
#[derive(Debug, Clone, Default)]
pub struct QuotaNode {
    pub name: String,
    pub namespace: String,
    pub parent: String,
    pub is_parent: bool,
    pub min: Resources,
    pub max: Resources,
    /// Resource names listed in `max` (a request is bounded only on these).
    pub max_names: BTreeSet<String>,
    pub shared_weight: Resources,
    /// The amount of `min`, `max` or the shared weight that is not an
    /// exact count: the quota then holds and lends nothing (min, max and
    /// weight zero) and admits no pod, nor do the quotas below it.
    pub invalid: Option<InvalidAmount>,
    pub allow_lent: bool,
    pub namespaces: Vec<String>,
    /// Present as a CR (the built-ins may not be).
    pub from_object: bool,
    pub current_annotations: BTreeMap<String, String>,
    /// `status.used` as the object shows it.
    pub current_used: BTreeMap<String, Quantity>,
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
    /// Own pods' requests plus the children's bounded requests (upstream
    /// `childRequest`).
    pub child_request: HashMap<String, Resources>,
    /// The child request, raised to min when the quota does not lend
    /// (upstream `request`).
    pub request: HashMap<String, Resources>,
    /// The request bounded by max: what the parent shares out against.
    pub limited_request: HashMap<String, Resources>,
    /// Own plus descendants' use.
    pub subtree_used: HashMap<String, Resources>,
    /// Own plus descendants' non-preemptible requests and use.
    pub subtree_non_preemptible_request: HashMap<String, Resources>,
    pub subtree_non_preemptible_used: HashMap<String, Resources>,
}

/// A status write sent at `at` that the watch has not shown yet.
#[derive(Debug, Clone)]
struct InFlight<T> {
    sent: T,
    at: SystemTime,
}

fn in_flight<T: PartialEq>(record: Option<&InFlight<T>>, wanted: &T, now: SystemTime) -> bool {
    record.is_some_and(|record| {
        record.sent == *wanted
            && now
                .duration_since(record.at)
                .is_ok_and(|elapsed| elapsed < WRITE_RETRY_AFTER)
    })
}

/// A resource list as upstream compares them: zero entries dropped, each
/// amount in its comparison unit. `None` when a quantity does not parse.
fn comparable(list: &BTreeMap<String, Quantity>) -> Option<BTreeMap<String, i64>> {
    let mut out = BTreeMap::new();
    for (name, quantity) in list {
        let amount = exact_amount(name, quantity).ok()?;
        if amount != 0 {
            out.insert(name.clone(), amount);
        }
    }
    Some(out)
}

fn comparable_resources(resources: &Resources) -> BTreeMap<String, i64> {
    resources
        .iter()
        .map(|(name, amount)| (name.to_string(), amount))
        .collect()
}

/// Whether a status annotation already says `wanted` (zeros ignored, as
/// upstream). An absent annotation equals an empty list; one that is not a
/// resource list differs, so the scheduler repairs it.
fn annotation_matches(current: Option<&String>, wanted: &Resources) -> bool {
    let current = match current.map(String::as_str) {
        None | Some("") => BTreeMap::new(),
        Some(text) => match serde_json::from_str::<BTreeMap<String, Quantity>>(text) {
            Ok(list) => list,
            Err(_) => return false,
        },
    };
    comparable(&current).is_some_and(|current| current == comparable_resources(wanted))
}

fn resource_list_json(resources: &Resources) -> String {
    serde_json::to_string(&resources.to_list()).unwrap_or_else(|_| "{}".into())
}

/// The figures of the plugin's current state, computed when first asked
/// for after a change. A copy of the plugin (a published snapshot) starts
/// with the same figures, which hold for it until it changes.
#[derive(Default)]
struct FiguresCache(Mutex<Option<Arc<QuotaFigures>>>);

impl Clone for FiguresCache {
    fn clone(&self) -> Self {
        let figures = self.0.lock().ok().and_then(|cached| cached.clone());
        Self(Mutex::new(figures))
    }
}

/// See the module docs.
///
/// A clone (a published snapshot of the state) shares everything: the
/// per-pod and per-quota maps are copy-on-write ([`CowMap`]), the quota
/// tree is behind an `Arc` and replaced or copied whole on quota events.
#[derive(Clone)]
pub struct ElasticQuota {
    args: ElasticQuotaArgs,
    /// In name order (pods go to the first quota listing their namespace,
    /// children are shared out in this order); written only on quota
    /// events, through `Arc::make_mut`.
    quotas: Arc<BTreeMap<String, QuotaNode>>,
    /// Pod key → what it is charged.
    pods: CowMap<String, PodCharge>,
    /// Quota name → sums of its own pods (written on every pod event).
    usage: CowMap<String, QuotaUsage>,
    cluster_total: Resources,
    figures: FiguresCache,
    /// Annotation patches per quota that the watch has not shown yet.
    annotations_sent: CowMap<String, InFlight<BTreeMap<String, String>>>,
    /// `status.used` patches per quota that the watch has not shown yet.
    used_sent: CowMap<String, InFlight<serde_json::Value>>,
    last_annotation_write_at: Option<SystemTime>,
    last_used_write_at: Option<SystemTime>,
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
        max_names: max.iter().map(|(name, _)| name.to_string()).collect(),
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
            quotas: Arc::new(BTreeMap::new()),
            pods: CowMap::new(),
            usage: CowMap::new(),
            cluster_total: Resources::new(),
            figures: FiguresCache::default(),
            annotations_sent: CowMap::new(),
            used_sent: CowMap::new(),
            last_annotation_write_at: None,
            last_used_write_at: None,
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
            self.args.system_quota_group_max.clone(),
        );
        let default = builtin(
            DEFAULT_QUOTA_NAME,
            &namespace,
            self.args.default_quota_group_max.clone(),
        );
        for quota in [root, system, default] {
            if !self.quotas.get(&quota.name).is_some_and(|q| q.from_object) {
                Arc::make_mut(&mut self.quotas).insert(quota.name.clone(), quota);
            }
        }
    }

    fn invalidate(&self) {
        if let Ok(mut figures) = self.figures.0.lock() {
            *figures = None;
        }
    }

    /// A quota pods can be charged to: a quota object, or the built-in
    /// default and system quotas (not the root).
    fn is_known(&self, name: &str) -> bool {
        name == DEFAULT_QUOTA_NAME
            || name == SYSTEM_QUOTA_NAME
            || self.quotas.get(name).is_some_and(|q| q.from_object)
    }

    /// The quota a pod is charged to, in upstream's order: the quota-name
    /// label; else the quota named after the pod's namespace in that
    /// namespace; else the first quota (by name) whose `namespaces`
    /// annotation lists the namespace; else the default quota. A name that
    /// is not a known quota (a label naming a missing quota included) falls
    /// to the default quota.
    pub fn quota_of(&self, pod: &PodInfo) -> String {
        let labelled = quota_name_of_pod(pod.labels());
        let chosen = if !labelled.is_empty() {
            labelled
        } else if self
            .quotas
            .get(&pod.namespace)
            .is_some_and(|q| q.from_object && q.namespace == pod.namespace)
        {
            pod.namespace.as_str()
        } else if let Some(quota) = self
            .quotas
            .values()
            .find(|q| q.namespaces.contains(&pod.namespace))
        {
            quota.name.as_str()
        } else {
            DEFAULT_QUOTA_NAME
        };
        if self.is_known(chosen) {
            chosen.to_string()
        } else {
            DEFAULT_QUOTA_NAME.to_string()
        }
    }

    fn charge(&mut self, key: &str, charge: PodCharge) {
        let usage = self
            .usage
            .get_or_insert_with(charge.quota.clone(), QuotaUsage::default);
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
        let (min, max, shared_weight, invalid) = match quota_amounts(object) {
            Ok(amounts) => (amounts.min, amounts.max, amounts.shared_weight, None),
            Err(invalid) => (
                Resources::new(),
                Resources::new(),
                Resources::new(),
                Some(invalid),
            ),
        };
        QuotaNode {
            parent: parent_quota_name(&name, labels).to_string(),
            namespace: object.metadata.namespace.clone().unwrap_or_default(),
            is_parent: is_parent_quota(labels),
            min,
            max,
            max_names: max_list.keys().cloned().collect(),
            shared_weight,
            invalid,
            allow_lent: is_allow_lent_resource(labels),
            namespaces: get_quota_namespaces(annotations)
                .ok()
                .flatten()
                .unwrap_or_default(),
            from_object: true,
            current_annotations: annotations.clone(),
            current_used: object
                .status
                .as_ref()
                .and_then(|status| status.used.clone())
                .unwrap_or_default(),
            name,
        }
    }

    fn rebuild_quotas(&mut self, cache: &ClusterCache) {
        // A new tree, not a copy of the shared one to clear.
        let mut quotas = BTreeMap::new();
        for object in cache.elastic_quotas.values() {
            let node = self.quota_from_object(object);
            if !node.name.is_empty() {
                quotas.insert(node.name.clone(), node);
            }
        }
        self.quotas = Arc::new(quotas);
        self.reset_builtins();
        let quotas = &self.quotas;
        self.annotations_sent
            .retain(|name, _| quotas.get(name).is_some_and(|q| q.from_object));
        self.used_sent
            .retain(|name, _| quotas.get(name).is_some_and(|q| q.from_object));
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

    /// Computes runtime, requests and subtree use for every quota.
    pub fn compute_figures(&self) -> QuotaFigures {
        self.compute_figures_with(None)
    }

    /// The figures with `pending`'s requests counted into its quota's
    /// request, for a pod the cache does not hold yet.
    fn compute_figures_with(&self, pending: Option<(&str, &Resources)>) -> QuotaFigures {
        let mut figures = QuotaFigures::default();
        // Bottom-up: requests and subtree sums.
        self.walk(ROOT_QUOTA_NAME, &mut figures, 0, pending);

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
        figures
    }

    /// Fills the bottom-up figures of `name` and its subtree; returns what
    /// the parent adds up: (bounded request, used, non-preemptible request,
    /// non-preemptible used).
    fn walk(
        &self,
        name: &str,
        figures: &mut QuotaFigures,
        depth: usize,
        pending: Option<(&str, &Resources)>,
    ) -> (Resources, Resources, Resources, Resources) {
        let own = self.usage.get(name).cloned().unwrap_or_default();
        let mut child_request = own.request.clone();
        if let Some((quota, requests)) = pending
            && quota == name
        {
            child_request.add(requests);
        }
        let mut used = own.used.clone();
        let mut np_request = own.non_preemptible_request.clone();
        let mut np_used = own.non_preemptible_used.clone();
        if depth < 64 {
            for child in self.children_of(name) {
                let (child_limited, child_used, child_np_request, child_np_used) =
                    self.walk(&child.name, figures, depth + 1, pending);
                child_request.add(&child_limited);
                used.add(&child_used);
                np_request.add(&child_np_request);
                np_used.add(&child_np_used);
            }
        }
        let mut request = child_request.clone();
        let mut limited = child_request.clone();
        if let Some(quota) = self.quotas.get(name)
            && name != ROOT_QUOTA_NAME
        {
            // A quota that does not lend asks for at least its min.
            if !quota.allow_lent {
                request.max_with(&quota.min);
            }
            limited = request.clone();
            for resource in &quota.max_names {
                let bound = quota.max.get(resource);
                if limited.get(resource) > bound {
                    limited.set(resource, bound);
                }
            }
        }
        figures
            .child_request
            .insert(name.to_string(), child_request);
        figures.request.insert(name.to_string(), request);
        figures
            .limited_request
            .insert(name.to_string(), limited.clone());
        figures.subtree_used.insert(name.to_string(), used.clone());
        figures
            .subtree_non_preemptible_request
            .insert(name.to_string(), np_request.clone());
        figures
            .subtree_non_preemptible_used
            .insert(name.to_string(), np_used.clone());
        (limited, used, np_request, np_used)
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
            .filter(|q| q.name != SYSTEM_QUOTA_NAME && q.name != DEFAULT_QUOTA_NAME)
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
        match self.figures.0.lock() {
            Ok(mut cached) => {
                (**cached.get_or_insert_with(|| Arc::new(self.compute_figures()))).clone()
            }
            Err(_) => self.compute_figures(),
        }
    }

    fn with_figures<R>(&self, read: impl FnOnce(&QuotaFigures) -> R) -> R {
        match self.figures.0.lock() {
            Ok(mut cached) => read(cached.get_or_insert_with(|| Arc::new(self.compute_figures()))),
            Err(_) => read(&self.compute_figures()),
        }
    }

    /// The admission check for one pod (pod-level, so it fails every node).
    pub fn admit(&self, pod: &PodInfo) -> Result<(), Rejection> {
        let quota_name = self.quota_of(pod);
        let Some(quota) = self.quotas.get(&quota_name) else {
            return Ok(());
        };
        self.refuse_invalid(quota)?;
        let own = self.usage.get(&quota_name).cloned().unwrap_or_default();
        // The pod may already be charged as used (a retried bind): do not count it twice.
        let already_used = self.pods.get(&pod.key).is_some_and(|c| c.assigned);
        let check = |figures: &QuotaFigures| {
            let limit = if self.args.enable_runtime_quota {
                figures
                    .runtime
                    .get(&quota_name)
                    .cloned()
                    .unwrap_or_default()
            } else {
                quota.max.clone()
            };
            let used = figures
                .subtree_used
                .get(&quota_name)
                .cloned()
                .unwrap_or_default();
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
                    if self.args.enable_runtime_quota {
                        "runtime"
                    } else {
                        "max"
                    },
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
                    let after = own.non_preemptible_used.get(resource)
                        + if already_used { 0 } else { request };
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
                    let Some(parent) = self.quotas.get(&current) else {
                        break;
                    };
                    let runtime = figures.runtime.get(&current).cloned().unwrap_or_default();
                    let used = figures
                        .subtree_used
                        .get(&current)
                        .cloned()
                        .unwrap_or_default();
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
        };
        if self.pods.contains_key(&pod.key) {
            self.with_figures(check)
        } else {
            // kube-scheduler can ask about a pod before this cache's watch
            // has delivered it; upstream counts a pending pod's request into
            // its quota's runtime, so count this one as if it had arrived.
            check(&self.compute_figures_with(Some((&quota_name, &pod.requests))))
        }
    }

    /// A quota, or one above it, whose amounts cannot be read admits no
    /// pod (instead of bounding nothing).
    fn refuse_invalid(&self, quota: &QuotaNode) -> Result<(), Rejection> {
        let mut current = Some(quota);
        let mut depth = 0;
        while let Some(quota) = current
            && depth < 64
        {
            if let Some(invalid) = &quota.invalid {
                return Err(Rejection::unschedulable(format!(
                    "Invalid quota, quotaName: {}, {invalid}",
                    quota.name
                )));
            }
            if quota.parent.is_empty() || quota.parent == quota.name {
                break;
            }
            current = self.quotas.get(&quota.parent);
            depth += 1;
        }
        Ok(())
    }

    /// The status annotations a quota should carry now, in upstream's
    /// figures. `guaranteed` and `allocated` stay empty: upstream fills them
    /// only with the `ElasticQuotaGuaranteeUsage` feature gate (default off).
    fn status_figures(&self, name: &str, figures: &QuotaFigures) -> [(&'static str, Resources); 7] {
        let get = |map: &HashMap<String, Resources>| map.get(name).cloned().unwrap_or_default();
        [
            (ANNOTATION_RUNTIME, get(&figures.runtime)),
            (ANNOTATION_REQUEST, get(&figures.request)),
            (ANNOTATION_CHILD_REQUEST, get(&figures.child_request)),
            (ANNOTATION_GUARANTEED, Resources::new()),
            (ANNOTATION_ALLOCATED, Resources::new()),
            (
                ANNOTATION_NON_PREEMPTIBLE_REQUEST,
                get(&figures.subtree_non_preemptible_request),
            ),
            (
                ANNOTATION_NON_PREEMPTIBLE_USED,
                get(&figures.subtree_non_preemptible_used),
            ),
        ]
    }

    /// The status annotations `quota` should be patched with: all seven
    /// when any differs from what it shows (compared as upstream does: zero
    /// entries ignored, absent equals empty, an unreadable value differs),
    /// so the set stays whole and consistent; empty when it is up to date.
    pub fn annotation_patch(
        &self,
        quota: &QuotaNode,
        figures: &QuotaFigures,
    ) -> BTreeMap<String, String> {
        let wanted = self.status_figures(&quota.name, figures);
        if wanted
            .iter()
            .all(|(key, value)| annotation_matches(quota.current_annotations.get(*key), value))
        {
            return BTreeMap::new();
        }
        wanted
            .iter()
            .map(|(key, value)| (key.to_string(), resource_list_json(value)))
            .collect()
    }

    /// The merge patch that brings `status.used` to the quota's subtree use,
    /// or `None` when it already shows it. Entries that dropped to zero are
    /// removed (`null`), as upstream's two-way merge patch does.
    pub fn used_patch(
        &self,
        quota: &QuotaNode,
        figures: &QuotaFigures,
    ) -> Option<serde_json::Value> {
        let wanted = figures
            .subtree_used
            .get(&quota.name)
            .cloned()
            .unwrap_or_default();
        if comparable(&quota.current_used)
            .is_some_and(|current| current == comparable_resources(&wanted))
        {
            return None;
        }
        let mut used = serde_json::Map::new();
        for name in quota.current_used.keys() {
            used.insert(name.clone(), serde_json::Value::Null);
        }
        for (name, quantity) in wanted.to_list() {
            used.insert(name, serde_json::Value::String(quantity.0));
        }
        Some(serde_json::json!({ "status": { "used": used } }))
    }
}

/// The amounts of an ElasticQuota, each exact.
#[derive(Debug, Clone, Default)]
pub struct QuotaAmounts {
    pub min: Resources,
    pub max: Resources,
    pub shared_weight: Resources,
}

/// Where the shared weight is read from when the annotation gives one.
const SHARED_WEIGHT: &str = "metadata.annotations[quota.scheduling.koordinator.sh/shared-weight]";

/// `spec.min`, `spec.max` and the shared weight (its annotation, else
/// max, as upstream) of an ElasticQuota, or the first that cannot be read:
/// the min exact (not negative, not beyond 64 bits), the max and the
/// weight bounds (beyond 64 bits they bound nothing).
pub fn quota_amounts(object: &ElasticQuotaObject) -> Result<QuotaAmounts, InvalidAmount> {
    let (no_annotations, no_list) = (BTreeMap::new(), BTreeMap::new());
    let annotations = object
        .metadata
        .annotations
        .as_ref()
        .unwrap_or(&no_annotations);
    let max_list = object.spec.max.as_ref().unwrap_or(&no_list);
    let min = exact_resources(object.spec.min.as_ref().unwrap_or(&no_list), "spec.min")?;
    // Upper bounds: upstream's built-in quota objects carry MaxInt64/5 cores.
    let max = bound_resources(max_list, "spec.max")?;
    let weight_list = shared_weight_or_max(annotations, max_list);
    let shared_weight = if &weight_list == max_list {
        max.clone()
    } else {
        bound_resources(&weight_list, SHARED_WEIGHT)?
    };
    Ok(QuotaAmounts {
        min,
        max,
        shared_weight,
    })
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

    /// Which victims the quota rules keep:
    /// - a pod labelled `preemptible=false` (upstream's `canPreempt`);
    /// - a pod of the preemptor's own quota may always go (upstream's
    ///   ElasticQuota preemption);
    /// - with `disableDefaultQuotaPreemption` (the default), a pod of the
    ///   default quota is kept from a preemptor charged to another quota
    ///   (pods not placed through quotas land there); between two
    ///   default-quota pods the quota has no say, as upstream, where
    ///   DefaultPreemption follows ElasticQuota's PostFilter;
    /// - a pod of another quota may go only while its quota's used stays at
    ///   or above its min on every resource the pod requests: min is
    ///   guaranteed, only what a quota borrowed beyond it can be taken back.
    ///   Victims are taken lowest priority first, each counted against the
    ///   quota before the next.
    fn protects_victims(
        &self,
        preemptor: &PodInfo,
        victims: &[&PodInfo],
        _cache: &ClusterCache,
    ) -> Vec<Option<String>> {
        let mut reasons: Vec<Option<String>> = vec![None; victims.len()];
        let preemptor_quota = self.quota_of(preemptor);
        let figures = self.figures();
        let mut taken: HashMap<String, Resources> = HashMap::new();
        let mut order: Vec<usize> = (0..victims.len()).collect();
        order.sort_by_key(|&i| {
            (
                crate::cache::pod_priority(victims[i]),
                victims[i].key.as_str(),
            )
        });
        for index in order {
            let victim = victims[index];
            if is_pod_non_preemptible(victim.labels()) {
                reasons[index] = Some(format!(
                    "pod is labelled {}=false",
                    apis::extension::elastic_quota::LABEL_PREEMPTIBLE
                ));
                continue;
            }
            let victim_quota = self.quota_of(victim);
            if victim_quota == preemptor_quota {
                continue;
            }
            if victim_quota == DEFAULT_QUOTA_NAME {
                if self.args.disable_default_quota_preemption {
                    reasons[index] = Some(format!(
                        "pod is charged to {DEFAULT_QUOTA_NAME}, which disableDefaultQuotaPreemption \
                         protects from pods of quota {preemptor_quota}"
                    ));
                }
                continue;
            }
            let min = self
                .quotas
                .get(&victim_quota)
                .map(|q| q.min.clone())
                .unwrap_or_default();
            let used = figures
                .subtree_used
                .get(&victim_quota)
                .cloned()
                .unwrap_or_default();
            let already = taken.entry(victim_quota.clone()).or_default();
            let below: Vec<&str> = victim
                .requests
                .iter()
                .filter(|(name, request)| {
                    let floor = min.get(name);
                    *request > 0
                        && floor > 0
                        && used
                            .get(name)
                            .saturating_sub(already.get(name))
                            .saturating_sub(*request)
                            < floor
                })
                .map(|(name, _)| name)
                .collect();
            if below.is_empty() {
                already.add(&victim.requests);
            } else {
                reasons[index] = Some(format!(
                    "pod is charged to quota {victim_quota}, whose used would fall below its min \
                     on [{}]; the preemptor is charged to quota {preemptor_quota}",
                    below.join(", ")
                ));
            }
        }
        reasons
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

    /// The status annotations that differ from what the quotas show. A
    /// write the watch has not shown is sent again after
    /// [`WRITE_RETRY_AFTER`] (sooner when the figures change again).
    fn pending_writes(&mut self, _cache: &ClusterCache, now: SystemTime) -> Vec<AnnotationWrite> {
        if too_soon(
            self.last_annotation_write_at,
            self.args.status_update_interval,
            now,
        ) {
            return Vec::new();
        }
        self.last_annotation_write_at = Some(now);
        let figures = self.figures();
        let mut writes = Vec::new();
        for quota in self.quotas.values().filter(|q| q.from_object) {
            let patch = self.annotation_patch(quota, &figures);
            if patch.is_empty() {
                self.annotations_sent.remove(&quota.name);
                continue;
            }
            if in_flight(self.annotations_sent.get(&quota.name), &patch, now) {
                continue;
            }
            self.annotations_sent.insert(
                quota.name.clone(),
                InFlight {
                    sent: patch.clone(),
                    at: now,
                },
            );
            writes.push(AnnotationWrite {
                resource: RESOURCE,
                namespace: Some(quota.namespace.clone()),
                name: quota.name.clone(),
                annotations: patch,
            });
        }
        writes
    }

    /// `status.used` patches (the quota's own and its descendants' use), on
    /// the same terms as the annotations.
    fn pending_status_writes(
        &mut self,
        _cache: &ClusterCache,
        now: SystemTime,
    ) -> Vec<StatusWrite> {
        if too_soon(
            self.last_used_write_at,
            self.args.status_update_interval,
            now,
        ) {
            return Vec::new();
        }
        self.last_used_write_at = Some(now);
        let figures = self.figures();
        let mut writes = Vec::new();
        for quota in self.quotas.values().filter(|q| q.from_object) {
            let Some(patch) = self.used_patch(quota, &figures) else {
                self.used_sent.remove(&quota.name);
                continue;
            };
            if in_flight(self.used_sent.get(&quota.name), &patch, now) {
                continue;
            }
            self.used_sent.insert(
                quota.name.clone(),
                InFlight {
                    sent: patch.clone(),
                    at: now,
                },
            );
            writes.push(StatusWrite {
                resource: RESOURCE,
                namespace: Some(quota.namespace.clone()),
                name: quota.name.clone(),
                patch,
            });
        }
        writes
    }
}

/// True while the last write round at `last` is less than `interval` ago.
fn too_soon(last: Option<SystemTime>, interval: Duration, now: SystemTime) -> bool {
    last.and_then(|at| now.duration_since(at).ok())
        .is_some_and(|elapsed| elapsed < interval)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::cache::Change;
    use crate::testutil::{self, PodSpec};

    #[test]
    fn a_clone_keeps_answering_as_before_while_the_original_changes() {
        let mut cache = ClusterCache::new();
        let mut plugin = ElasticQuota::new(ElasticQuotaArgs::default());
        let apply = |plugin: &mut ElasticQuota, cache: &mut ClusterCache, change| {
            let event = cache.apply(change);
            plugin.on_event(&event, cache);
        };
        let team_a = [("quota.scheduling.koordinator.sh/name", "team-a")];
        let running = || {
            testutil::pod(PodSpec {
                name: "running",
                node: Some("n1"),
                requests: &[("cpu", "3")],
                labels: &team_a,
                ..Default::default()
            })
        };
        for object in [
            testutil::node("n1", &[("cpu", "8")]),
            testutil::quota("team-a", &[], &[("cpu", "4")], &[], &[]),
            running(),
            testutil::pod(PodSpec {
                name: "probe",
                requests: &[("cpu", "2")],
                labels: &team_a,
                ..Default::default()
            }),
        ] {
            apply(&mut plugin, &mut cache, Change::Upsert(object));
        }
        let probe = cache.pod("default/probe").unwrap().clone();
        let verdict =
            |plugin: &ElasticQuota| plugin.admit(&probe).map_err(|r| r.reason.to_string());
        let before = verdict(&plugin);
        assert!(
            before.as_ref().is_err_and(|r| r.contains("team-a")),
            "{before:?}"
        );
        let snapshot = plugin.clone();

        // The running pod leaves: the probe fits in the original only.
        apply(&mut plugin, &mut cache, Change::Delete(running()));
        assert_eq!(verdict(&plugin), Ok(()));
        assert_eq!(verdict(&snapshot), before);
        // The quota shrinks in the original only.
        apply(
            &mut plugin,
            &mut cache,
            Change::Upsert(testutil::quota("team-a", &[], &[("cpu", "1")], &[], &[])),
        );
        assert!(verdict(&plugin).is_err_and(|r| r.contains("runtime: [cpu=1")));
        assert_eq!(verdict(&snapshot), before);
        assert!(snapshot.pods.contains_key("default/running"));
        assert!(!plugin.pods.contains_key("default/running"));
        assert_eq!(snapshot.quotas["team-a"].max.get("cpu"), 4000);
        assert_eq!(plugin.quotas["team-a"].max.get("cpu"), 1000);
    }

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

//! LoadAwareScheduling: keeps nodes under their usage thresholds and prefers
//! the least loaded ones. Usage is the latest NodeMetric plus an estimate of
//! the pods assigned since that report (and of the incoming pod). When the
//! aggregated usage the args (or the node) ask for is not in the NodeMetric,
//! the full estimates of all the node's pods stand in for it, as upstream.
//!
//! A pod's assignment time is its `PodScheduled` condition; without one, the
//! time the plugin first saw it on its node (upstream stamps the time it
//! adds the pod to its cache). Pods this scheduler places are stamped at
//! reserve; pods that arrive bound through the watch, which carries no
//! clock, are stamped at the next housekeeping tick
//! ([`Plugin::pending_status_writes`], once a second in the extender) and
//! count as just assigned until then.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use apis::extension::load_aware::{
    CustomUsageThresholds, get_custom_estimated_scaling_factors,
    get_custom_estimated_seconds_after_initialized,
    get_custom_estimated_seconds_after_pod_scheduled, get_custom_usage_thresholds,
};
use apis::extension::node_resource_amplification::get_node_raw_allocatable;
use apis::extension::priority::PriorityClass;
use apis::extension::resource::{
    BATCH_CPU, BATCH_MEMORY, RESOURCE_CPU, RESOURCE_MEMORY,
    translate_resource_name_by_priority_class,
};
use apis::slo::v1alpha1::NodeMetric;

use crate::cache::{ClusterCache, ClusterEvent, NodeInfo, ObjectKind, PodInfo, object_key};
use crate::config::{ConfigError, LoadAwareArgs, LoadAwareSchedulingArgs, parse_args};
use crate::cow::{CowMap, CowVec};
use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin, Rejection, StatusWrite};
use crate::resources::{InvalidAmount, Resources, exact_resources};

pub const NAME: &str = "LoadAwareScheduling";

/// Estimate for a pod with no cpu request or limit (milli-cores).
pub const DEFAULT_ESTIMATED_MILLI_CPU: i64 = 250;
/// Estimate for a pod with no memory request or limit (bytes).
pub const DEFAULT_ESTIMATED_MEMORY: i64 = 200 * 1024 * 1024;
/// koordlet's report interval when the NodeMetric does not say.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(60);

pub const REASON_NODE_METRIC_EXPIRED: &str = "node(s) nodeMetric expired";
/// A NodeMetric with a usage that is not an exact amount (negative,
/// unparseable, beyond 64 bits), or a node whose raw allocatable annotation
/// cannot be read: treated as an expired NodeMetric, with this reason.
pub const REASON_NODE_METRIC_INVALID: &str = "node(s) nodeMetric invalid";

const INCOMING_ESTIMATE: &str = "LoadAwareScheduling/incoming";

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let raw: LoadAwareSchedulingArgs = parse_args(NAME, args)?;
    Ok(Box::new(LoadAware::new(raw.with_defaults()?)))
}

/// Per-node load figures, recomputed whenever the node's metric or pods change.
#[derive(Debug, Clone, Default)]
struct NodeLoad {
    /// The NodeMetric had a `status.nodeMetric` section.
    has_node_metric: bool,
    update_time: Option<SystemTime>,
    node_usage: Resources,
    prod_usage: Resources,
    /// (aggregation type, duration in seconds; 0 = the longest) → usage.
    aggregated: HashMap<(String, u64), Resources>,
    /// Estimates of recently assigned pods beyond their reported usage.
    node_delta: Resources,
    prod_delta: Resources,
    /// Full estimates of all the node's pods (the stand-in when the asked-for
    /// aggregated usage is missing).
    node_estimated: Resources,
}

/// See the module docs.
/// Resources load-aware tracks per node; cpu and memory come first and
/// further names from the args fill the remaining slots (extra names beyond
/// this are ignored). Inline arrays keep a node's figures in one cache line.
pub const MAX_DIMS: usize = 4;

type Vector = [i64; MAX_DIMS];

/// Thresholds in vector order; 0 = unchecked.
#[derive(Debug, Clone, Default)]
struct Thresholds {
    usage: Vector,
    prod: Vector,
    /// Aggregated thresholds and the usage base they apply to.
    aggregated: Option<Vector>,
}

/// Everything filter and score need for one node, as dense vectors.
#[derive(Debug, Clone, Default)]
struct NodeView {
    update_time: Option<SystemTime>,
    has_node_metric: bool,
    /// The NodeMetric (or the raw allocatable) could not be read: the view
    /// holds no usage and counts as expired.
    invalid: bool,
    allocatable: Vector,
    /// node usage + estimates of recently assigned pods.
    node_base: Vector,
    /// prod pods' usage + their estimates.
    prod_base: Vector,
    /// Base for the aggregated filter thresholds (args or node annotation).
    aggregated_filter_base: Option<Vector>,
    /// Base for aggregated scoring (args).
    aggregated_score_base: Option<Vector>,
    /// The node's own thresholds from its annotation, when set (rare, so boxed).
    custom: Option<Box<Thresholds>>,
}

/// See the module docs.
///
/// The per-node views and per-pod maps are copy-on-write ([`crate::cow`]):
/// a clone (a published snapshot of the state) shares them, and a write
/// after it copies one chunk or shard.
#[derive(Clone)]
pub struct LoadAware {
    args: LoadAwareArgs,
    /// Resource names in vector order: cpu, memory, then any other named in the args.
    dims: Vec<String>,
    defaults: Thresholds,
    weights: Vector,
    /// Views by [`NodeInfo::index`].
    views: CowVec<Option<NodeView>>,
    /// Pods without a `PodScheduled` time: pod key → (node, first seen there).
    /// Entries go when the pod leaves the node or gets the condition.
    first_seen: CowMap<String, (String, SystemTime)>,
    /// Pods seen on a node (pod key → node) through an event, which has no
    /// clock: stamped at the next [`Plugin::pending_status_writes`].
    unstamped: CowMap<String, String>,
}

fn to_system_time(time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> SystemTime {
    SystemTime::from(time.0)
}

/// `seconds` after `at`. The seconds may come from a pod annotation: a value
/// past what time can represent is capped (at about ten years) instead of
/// overflowing.
fn seconds_after(at: SystemTime, seconds: i64) -> SystemTime {
    const CAP: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
    let wanted = Duration::from_secs(seconds.unsigned_abs()).min(CAP);
    at.checked_add(wanted).unwrap_or(at)
}

fn condition_time(pod: &PodInfo, condition: &str) -> Option<SystemTime> {
    pod.pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == condition && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(to_system_time)
}

/// True when the metric is missing its update time or older than the expiration.
pub fn is_metric_expired(
    update_time: Option<SystemTime>,
    expiration_seconds: i64,
    now: SystemTime,
) -> bool {
    match update_time {
        None => true,
        Some(updated) => {
            expiration_seconds > 0
                && now
                    .duration_since(updated)
                    .is_ok_and(|age| age >= Duration::from_secs(expiration_seconds.unsigned_abs()))
        }
    }
}

fn add_delta(target: &mut Resources, estimate: &Resources, usage: Option<&Resources>) {
    for (name, estimated) in estimate.iter() {
        let used = usage.map_or(0, |u| u.get(name));
        if estimated > used {
            target.add_amount(name, estimated - used);
        }
    }
}

fn duration_seconds(duration: Option<apis::extension::duration::GoDuration>) -> u64 {
    duration.and_then(|d| d.to_std()).map_or(0, |d| d.as_secs())
}

impl LoadAware {
    pub fn new(args: LoadAwareArgs) -> Self {
        let mut dims: Vec<String> = vec![RESOURCE_CPU.to_string(), RESOURCE_MEMORY.to_string()];
        let aggregated_names = args
            .aggregated
            .iter()
            .flat_map(|a| a.usage_thresholds.keys());
        for name in args
            .usage_thresholds
            .keys()
            .chain(args.prod_usage_thresholds.keys())
            .chain(args.resource_weights.keys())
            .chain(args.estimated_scaling_factors.keys())
            .chain(aggregated_names)
        {
            if !dims.contains(name) && dims.len() < MAX_DIMS {
                dims.push(name.clone());
            }
        }
        let vector = |map: &BTreeMap<String, i64>| -> Vector {
            let mut out = [0; MAX_DIMS];
            for (slot, name) in out.iter_mut().zip(&dims) {
                *slot = map.get(name).copied().unwrap_or(0);
            }
            out
        };
        let defaults = Thresholds {
            usage: vector(&args.usage_thresholds),
            prod: vector(&args.prod_usage_thresholds),
            aggregated: args
                .aggregated
                .as_ref()
                .filter(|a| !a.usage_thresholds.is_empty() && a.usage_aggregation_type.is_some())
                .map(|a| vector(&a.usage_thresholds)),
        };
        let weights = vector(&args.resource_weights);
        Self {
            dims,
            defaults,
            weights,
            views: CowVec::new(),
            first_seen: CowMap::new(),
            unstamped: CowMap::new(),
            args,
        }
    }

    fn vector(&self, resources: &Resources) -> Vector {
        let mut out = [0; MAX_DIMS];
        for (slot, name) in out.iter_mut().zip(&self.dims) {
            *slot = resources.get(name);
        }
        out
    }

    /// The default estimator: max(request, limit) × factor, capped at the limit,
    /// with fixed defaults when the pod asks for nothing.
    pub fn estimate_pod(&self, pod: &PodInfo) -> Resources {
        let mut factors = self.args.estimated_scaling_factors.clone();
        if self.args.allow_customize_estimation
            && let Ok(Some(custom)) = get_custom_estimated_scaling_factors(pod.annotations())
        {
            factors.extend(custom);
        }
        let limits = &pod.limits;
        let mut estimate = Resources::new();
        for (name, factor) in &factors {
            // Classes without a mapping (free) estimate nothing, as upstream.
            let real =
                translate_resource_name_by_priority_class(pod.priority_class, name).unwrap_or("");
            let request = pod.requests.get(real);
            let limit = limits.get(real);
            let quantity = request.max(limit);
            let value = if quantity == 0 {
                match real {
                    RESOURCE_CPU | BATCH_CPU => DEFAULT_ESTIMATED_MILLI_CPU,
                    RESOURCE_MEMORY | BATCH_MEMORY => DEFAULT_ESTIMATED_MEMORY,
                    _ => 0,
                }
            } else {
                let scaled = (quantity as f64 * *factor as f64 / 100.0).round() as i64;
                if limit > 0 { scaled.min(limit) } else { scaled }
            };
            estimate.set(name, value);
        }
        estimate
    }

    /// Until when the pod's estimate is used even if its usage is reported.
    fn estimate_deadline(
        &self,
        pod: &PodInfo,
        assigned_at: Option<SystemTime>,
    ) -> Option<SystemTime> {
        let (mut after_scheduled, mut after_initialized) = (None, None);
        if self.args.allow_customize_estimation {
            after_scheduled = get_custom_estimated_seconds_after_pod_scheduled(pod.annotations())
                .ok()
                .flatten();
            after_initialized = get_custom_estimated_seconds_after_initialized(pod.annotations())
                .ok()
                .flatten();
        }
        let after_scheduled = after_scheduled.or(self.args.estimated_seconds_after_pod_scheduled);
        let after_initialized = after_initialized.or(self.args.estimated_seconds_after_initialized);
        if let Some(seconds) = after_initialized.filter(|s| *s > 0)
            && let Some(initialized) = condition_time(pod, "Initialized")
        {
            return Some(seconds_after(initialized, seconds));
        }
        match (after_scheduled.filter(|s| *s > 0), assigned_at) {
            (Some(seconds), Some(at)) => Some(seconds_after(at, seconds)),
            _ => None,
        }
    }

    fn recompute(&mut self, node_name: &str, cache: &ClusterCache) {
        let Some(node) = cache.node(node_name) else {
            return;
        };
        let index = node.index;
        let view = cache.node_metrics.get(node_name).map(|metric| {
            let allocatable = Self::node_allocatable(node);
            match (node_metric_amounts(metric), allocatable) {
                (Ok(amounts), Ok(allocatable)) => self.view_of(
                    &self.compute_load(metric, amounts, node_name, cache),
                    node,
                    &allocatable,
                ),
                // Figures that cannot be read count as none, as expired.
                _ => NodeView {
                    invalid: true,
                    ..NodeView::default()
                },
            }
        });
        if self.views.len() <= index {
            self.views.resize(index + 1, None);
        }
        if let Some(slot) = self.views.get_mut(index) {
            *slot = view;
        }
    }

    fn view_of(&self, load: &NodeLoad, node: &NodeInfo, allocatable: &Resources) -> NodeView {
        let with_delta = |usage: &Resources| {
            let mut total = usage.clone();
            total.add(&load.node_delta);
            self.vector(&total)
        };
        // The aggregated usage asked for (the longest period when no duration
        // is set, else the plain node usage) plus recent estimates; when the
        // NodeMetric lacks it, the full estimates of all the node's pods.
        let aggregated_base = |kind: &str, seconds: u64| -> Vector {
            match load
                .aggregated
                .get(&(kind.to_string(), seconds))
                .or_else(|| (seconds == 0).then_some(&load.node_usage))
            {
                Some(usage) => with_delta(usage),
                None => self.vector(&load.node_estimated),
            }
        };
        let custom = self.custom_thresholds(node);
        let filter_aggregation = match custom.as_ref().and_then(|c| c.aggregated_usage.as_ref()) {
            Some(agg) => agg.usage_aggregation_type.map(|kind| {
                (
                    kind.as_str().to_string(),
                    duration_seconds(agg.usage_aggregated_duration),
                )
            }),
            None => self.args.aggregated.as_ref().and_then(|a| {
                a.usage_aggregation_type
                    .clone()
                    .map(|kind| (kind, duration_seconds(a.usage_aggregated_duration)))
            }),
        };
        let score_aggregation = self.args.aggregated.as_ref().and_then(|a| {
            a.score_aggregation_type
                .clone()
                .map(|kind| (kind, duration_seconds(a.score_aggregated_duration)))
        });
        let mut prod = load.prod_usage.clone();
        prod.add(&load.prod_delta);
        let vector = |map: &BTreeMap<String, i64>| -> Vector {
            let mut out = [0; MAX_DIMS];
            for (slot, name) in out.iter_mut().zip(&self.dims) {
                *slot = map.get(name).copied().unwrap_or(0);
            }
            out
        };
        NodeView {
            update_time: load.update_time,
            has_node_metric: load.has_node_metric,
            invalid: false,
            allocatable: self.vector(allocatable),
            node_base: with_delta(&load.node_usage),
            prod_base: self.vector(&prod),
            aggregated_filter_base: filter_aggregation
                .map(|(kind, seconds)| aggregated_base(&kind, seconds)),
            aggregated_score_base: score_aggregation
                .map(|(kind, seconds)| aggregated_base(&kind, seconds)),
            custom: custom.map(|c| {
                Box::new(Thresholds {
                    usage: if c.usage_thresholds.is_empty() {
                        self.defaults.usage
                    } else {
                        vector(&c.usage_thresholds)
                    },
                    prod: if c.prod_usage_thresholds.is_empty() {
                        self.defaults.prod
                    } else {
                        vector(&c.prod_usage_thresholds)
                    },
                    aggregated: match &c.aggregated_usage {
                        Some(agg) => Some(vector(&agg.usage_thresholds)),
                        None => self.defaults.aggregated,
                    },
                })
            }),
        }
    }

    fn compute_load(
        &self,
        metric: &NodeMetric,
        amounts: MetricAmounts,
        node: &str,
        cache: &ClusterCache,
    ) -> NodeLoad {
        let status = metric.status.as_ref();
        let update_time = status
            .and_then(|s| s.update_time.as_ref())
            .map(to_system_time);
        let report_interval = metric
            .spec
            .collect_policy
            .as_ref()
            .and_then(|p| p.report_interval_seconds)
            .filter(|s| *s > 0)
            .map_or(DEFAULT_REPORT_INTERVAL, |s| {
                Duration::from_secs(s.unsigned_abs())
            });
        let MetricAmounts {
            has_node_metric,
            node_usage,
            aggregated,
            system_usage,
            pods: pod_usages,
        } = amounts;
        let mut load = NodeLoad {
            has_node_metric,
            update_time,
            node_usage,
            aggregated,
            ..NodeLoad::default()
        };
        if self.args.prod_usage_include_sys {
            load.prod_usage.add(&system_usage);
        }
        let recent_after = update_time.and_then(|t| t.checked_sub(report_interval));
        for pod in cache.pods_on_node(node) {
            let usage = pod_usages.get(&pod.key);
            let prod = pod.priority_class == PriorityClass::Prod;
            let active_prod = prod && usage.is_some_and(|(_, reported_prod)| *reported_prod);
            if active_prod && let Some((used, _)) = usage {
                load.prod_usage.add(used);
            }
            let estimate = self.estimate_pod(pod);
            load.node_estimated.add(&estimate);
            // Without a PodScheduled time: when first seen on this node; not
            // stamped yet means seen just now.
            let assigned_at = condition_time(pod, "PodScheduled").or_else(|| {
                self.first_seen
                    .get(&pod.key)
                    .filter(|(seen_on, _)| seen_on == node)
                    .map(|(_, at)| *at)
            });
            let deadline = self.estimate_deadline(pod, assigned_at);
            let recent = match (assigned_at, recent_after) {
                (Some(at), Some(after)) => at > after,
                _ => true,
            };
            let should =
                usage.is_none() || recent || deadline.zip(update_time).is_some_and(|(d, u)| d > u);
            let used = usage.map(|(u, _)| u);
            if should {
                add_delta(&mut load.node_delta, &estimate, used);
            }
            if prod {
                if !active_prod && used.is_some() {
                    add_delta(&mut load.prod_delta, &estimate, None);
                } else if should {
                    add_delta(&mut load.prod_delta, &estimate, used);
                }
            }
        }
        load
    }

    /// Keeps the first-seen stamps in step with a pod event: a pod that left
    /// its node (or the cache) or has a `PodScheduled` time is forgotten; one
    /// newly seen on a node waits for a stamp.
    fn track_first_seen(&mut self, old: Option<&PodInfo>, new: Option<&PodInfo>) {
        let Some(pod) = new else {
            if let Some(pod) = old {
                self.first_seen.remove(&pod.key);
                self.unstamped.remove(&pod.key);
            }
            return;
        };
        let node = match &pod.node {
            Some(node) if condition_time(pod, "PodScheduled").is_none() => node,
            _ => {
                self.first_seen.remove(&pod.key);
                self.unstamped.remove(&pod.key);
                return;
            }
        };
        if self
            .first_seen
            .get(&pod.key)
            .is_some_and(|(seen_on, _)| seen_on == node)
        {
            return;
        }
        self.first_seen.remove(&pod.key);
        self.unstamped.insert(pod.key.clone(), node.clone());
    }

    /// How many pods carry a first-seen stamp or wait for one.
    #[cfg(test)]
    fn first_seen_len(&self) -> (usize, usize) {
        (self.first_seen.len(), self.unstamped.len())
    }

    fn custom_thresholds(&self, node: &NodeInfo) -> Option<CustomUsageThresholds> {
        let mut custom = get_custom_usage_thresholds(node.annotations())
            .ok()
            .flatten()?;
        if custom
            .aggregated_usage
            .as_ref()
            .is_some_and(|a| a.usage_thresholds.is_empty() || a.usage_aggregation_type.is_none())
        {
            custom.aggregated_usage = None;
        }
        if custom.usage_thresholds.is_empty()
            && custom.prod_usage_thresholds.is_empty()
            && custom.aggregated_usage.is_none()
        {
            return None;
        }
        Some(custom)
    }

    /// Allocatable as load-aware sees it: the raw (un-amplified) figures
    /// when present. A raw figure that is not an exact amount is an error
    /// (the node then counts as having an unreadable NodeMetric); an
    /// annotation that is not JSON is left out, as upstream.
    fn node_allocatable(node: &NodeInfo) -> Result<Resources, InvalidAmount> {
        let mut allocatable = node.allocatable.clone();
        if let Ok(Some(raw)) = get_node_raw_allocatable(node.annotations()) {
            for (name, amount) in exact_resources(&raw, RAW_ALLOCATABLE)?.iter() {
                allocatable.set(name, amount);
            }
        }
        Ok(allocatable)
    }

    fn view(&self, node: &NodeInfo) -> Option<&NodeView> {
        self.views.get(node.index).and_then(Option::as_ref)
    }
}

fn percent(used: i64, total: i64) -> i64 {
    (used as f64 / total as f64 * 100.0).round() as i64
}

fn least_used_score(used: i64, capacity: i64) -> i64 {
    if capacity <= 0 || used > capacity {
        return 0;
    }
    (capacity - used) * MAX_NODE_SCORE / capacity
}

impl Plugin for LoadAware {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_event(&mut self, event: &ClusterEvent, cache: &ClusterCache) {
        match event {
            ClusterEvent::Pod { old, new, .. } => {
                self.track_first_seen(old.as_deref(), new.as_deref());
                let old_node = old.as_ref().and_then(|p| p.node.clone());
                let new_node = new.as_ref().and_then(|p| p.node.clone());
                if let Some(node) = &old_node {
                    self.recompute(node, cache);
                }
                if let Some(node) = new_node.filter(|n| Some(n) != old_node.as_ref()) {
                    self.recompute(&node, cache);
                }
            }
            ClusterEvent::Object {
                kind: ObjectKind::NodeMetric | ObjectKind::Node,
                key,
            } => self.recompute(key, cache),
            ClusterEvent::Object { .. } => {}
        }
    }

    fn pre_filter(
        &self,
        pod: &PodInfo,
        _cache: &ClusterCache,
        state: &mut CycleState,
    ) -> Result<(), Rejection> {
        state.write(INCOMING_ESTIMATE, self.vector(&self.estimate_pod(pod)));
        Ok(())
    }

    fn filter(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        if pod.is_daemonset_pod() {
            return Ok(());
        }
        // Nodes without a NodeMetric (no koordlet) are not load-aware.
        let Some(view) = self.view(node) else {
            return Ok(());
        };
        let thresholds = view.custom.as_deref().unwrap_or(&self.defaults);
        let prod_pod =
            pod.priority_class == PriorityClass::Prod && thresholds.prod.iter().any(|t| *t != 0);
        let (limits, base, aggregated) = if prod_pod {
            (&thresholds.prod, Some(&view.prod_base), false)
        } else if let Some(aggregated) = &thresholds.aggregated {
            (aggregated, view.aggregated_filter_base.as_ref(), true)
        } else {
            (&thresholds.usage, Some(&view.node_base), false)
        };
        if limits.iter().all(|t| *t == 0) {
            return Ok(());
        }
        if self.args.filter_expired_node_metrics
            && is_metric_expired(
                view.update_time,
                self.args.node_metric_expiration_seconds,
                state.now,
            )
        {
            return if self.args.enable_schedule_when_node_metrics_expired {
                Ok(())
            } else if view.invalid {
                Err(Rejection::unschedulable(REASON_NODE_METRIC_INVALID))
            } else {
                Err(Rejection::unschedulable(REASON_NODE_METRIC_EXPIRED))
            };
        }
        if !view.has_node_metric {
            return Ok(());
        }
        let incoming = state.read::<Vector>(INCOMING_ESTIMATE);
        for (i, threshold) in limits.iter().enumerate() {
            let total = view.allocatable[i];
            if *threshold == 0 || total == 0 {
                continue;
            }
            let estimated = base.map_or(0, |b| b[i]) + incoming.map_or(0, |v| v[i]);
            if percent(estimated, total) > *threshold {
                let name = self.dims.get(i).map_or("", String::as_str);
                let reason = if aggregated {
                    format!("node(s) {name} aggregated usage exceed threshold")
                } else {
                    format!("node(s) {name} usage exceed threshold")
                };
                return Err(Rejection::unschedulable(reason));
            }
        }
        Ok(())
    }

    /// Stamps a pod this scheduler places with the time of the cycle (the
    /// assume event that follows recomputes the node with it).
    fn reserve(
        &mut self,
        pod: &PodInfo,
        node: &str,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        if condition_time(pod, "PodScheduled").is_none() {
            self.unstamped.remove(&pod.key);
            self.first_seen
                .insert(pod.key.clone(), (node.to_string(), state.now));
        }
        Ok(())
    }

    fn unreserve(&mut self, pod: &PodInfo, node: &str, cache: &ClusterCache) {
        let still_there = cache
            .pod(&pod.key)
            .is_some_and(|current| current.node.as_deref() == Some(node));
        if !still_there
            && self
                .first_seen
                .get(&pod.key)
                .is_some_and(|(seen_on, _)| seen_on == node)
        {
            self.first_seen.remove(&pod.key);
        }
    }

    /// Writes nothing: the housekeeping tick stamps the pods that arrived
    /// bound without a `PodScheduled` time since the last tick.
    fn pending_status_writes(&mut self, cache: &ClusterCache, now: SystemTime) -> Vec<StatusWrite> {
        if self.unstamped.is_empty() {
            return Vec::new();
        }
        let mut nodes: Vec<String> = Vec::new();
        let unstamped = std::mem::take(&mut self.unstamped);
        for (key, node) in unstamped.iter() {
            let still_there = cache
                .pod(key)
                .is_some_and(|pod| pod.node.as_deref() == Some(node.as_str()));
            if still_there {
                self.first_seen.insert(key.clone(), (node.clone(), now));
                if !nodes.contains(node) {
                    nodes.push(node.clone());
                }
            }
        }
        for node in nodes {
            self.recompute(&node, cache);
        }
        Vec::new()
    }

    fn scores(&self) -> bool {
        !self.args.resource_weights.is_empty() || self.args.dominant_resource_weight != 0
    }

    fn score(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> i64 {
        let Some(view) = self.view(node) else {
            return 0;
        };
        if is_metric_expired(
            view.update_time,
            self.args.node_metric_expiration_seconds,
            state.now,
        ) || !view.has_node_metric
        {
            return 0;
        }
        let prod_pod =
            self.args.score_according_prod_usage && pod.priority_class == PriorityClass::Prod;
        let base = if prod_pod {
            Some(&view.prod_base)
        } else if self
            .args
            .aggregated
            .as_ref()
            .is_some_and(|a| a.score_aggregation_type.is_some())
        {
            view.aggregated_score_base.as_ref()
        } else {
            Some(&view.node_base)
        };
        let incoming = state.read::<Vector>(INCOMING_ESTIMATE);
        let dominant_weight = self.args.dominant_resource_weight;
        let (mut node_score, mut dominant_score, mut weight_sum) = (0i64, 0i64, 0i64);
        if dominant_weight != 0 {
            dominant_score = MAX_NODE_SCORE;
            weight_sum = dominant_weight;
        }
        for (i, weight) in self.weights.iter().enumerate() {
            if *weight == 0 {
                continue;
            }
            let used = base.map_or(0, |b| b[i]) + incoming.map_or(0, |v| v[i]);
            let score = least_used_score(used, view.allocatable[i]);
            node_score += score * weight;
            weight_sum += weight;
            dominant_score = dominant_score.min(score);
        }
        node_score += dominant_score * dominant_weight;
        if weight_sum <= 0 {
            0
        } else {
            node_score / weight_sum
        }
    }
}

/// Where the raw (un-amplified) allocatable annotation is read from.
const RAW_ALLOCATABLE: &str = "metadata.annotations[node.koordinator.sh/raw-allocatable]";

/// The amounts of a NodeMetric load-aware uses, each read exactly.
#[derive(Debug, Clone, Default)]
pub struct MetricAmounts {
    /// The NodeMetric had a `status.nodeMetric` section.
    pub has_node_metric: bool,
    pub node_usage: Resources,
    /// (aggregation type, duration in seconds; 0 = the longest) → usage.
    pub aggregated: HashMap<(String, u64), Resources>,
    pub system_usage: Resources,
    /// Pod key → (usage, reported as a prod pod).
    pub pods: HashMap<String, (Resources, bool)>,
}

/// Every usage of a NodeMetric load-aware reads — node, aggregated,
/// system and pod usage — each exact (not negative, not beyond 64 bits),
/// or the first that is not. A NodeMetric that fails here counts as
/// expired: a negative or unreadable usage must not make a node look
/// emptier than it is.
pub fn node_metric_amounts(metric: &NodeMetric) -> Result<MetricAmounts, InvalidAmount> {
    let status = metric.status.as_ref();
    let info = status.and_then(|s| s.node_metric.as_ref());
    let mut amounts = MetricAmounts {
        has_node_metric: info.is_some(),
        ..MetricAmounts::default()
    };
    if let Some(info) = info {
        amounts.node_usage =
            exact_resources(&info.node_usage.resources, "status.nodeMetric.nodeUsage")?;
        let mut longest: HashMap<String, u64> = HashMap::new();
        for aggregated in &info.aggregated_node_usages {
            let seconds = aggregated
                .duration
                .as_deref()
                .and_then(|d| apis::extension::duration::GoDuration::parse(d).ok())
                .and_then(|d| d.to_std())
                .map_or(0, |d| d.as_secs());
            for (kind, usage) in &aggregated.usage {
                if usage.resources.is_empty() {
                    continue;
                }
                let usage =
                    exact_resources(&usage.resources, "status.nodeMetric.aggregatedNodeUsages")?;
                amounts.aggregated.insert((kind.clone(), seconds), usage);
                let entry = longest.entry(kind.clone()).or_insert(0);
                *entry = (*entry).max(seconds);
            }
        }
        for (kind, seconds) in longest {
            if let Some(usage) = amounts.aggregated.get(&(kind.clone(), seconds)).cloned() {
                amounts.aggregated.insert((kind, 0), usage);
            }
        }
        amounts.system_usage = exact_resources(
            &info.system_usage.resources,
            "status.nodeMetric.systemUsage",
        )?;
    }
    for pod_metric in status.map(|s| s.pods_metric.as_slice()).unwrap_or_default() {
        if pod_metric.pod_usage.resources.is_empty() {
            continue;
        }
        let usage = exact_resources(
            &pod_metric.pod_usage.resources,
            "status.podsMetric.podUsage",
        )
        .map_err(|mut invalid| {
            invalid.field = format!(
                "{} of pod {}",
                invalid.field,
                crate::resources::shown(&object_key(Some(&pod_metric.namespace), &pod_metric.name))
            );
            invalid
        })?;
        let prod = PriorityClass::from_name(&pod_metric.priority) == PriorityClass::Prod;
        amounts.pods.insert(
            object_key(Some(&pod_metric.namespace), &pod_metric.name),
            (usage, prod),
        );
    }
    Ok(amounts)
}

/// The estimate of one pod under default args (for tools and tests).
pub fn default_estimate(pod: &PodInfo) -> BTreeMap<String, i64> {
    LoadAware::new(LoadAwareArgs::default())
        .estimate_pod(pod)
        .iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cache::Change;
    use crate::testutil::{PodSpec, node, pod, t0};

    fn feed(plugin: &mut LoadAware, cache: &mut ClusterCache, change: Change) {
        let event = cache.apply(change);
        plugin.on_event(&event, cache);
    }

    #[test]
    fn a_clone_keeps_answering_as_before_while_the_original_changes() {
        use crate::testutil::node_metric;
        let mut cache = ClusterCache::new();
        let mut plugin = LoadAware::new(LoadAwareArgs::default());
        for object in [
            node("n1", &[("cpu", "4")]),
            node("n2", &[("cpu", "4")]),
            node_metric("n1", t0(), &[("cpu", "2")], serde_json::json!([])),
            pod(PodSpec {
                name: "probe",
                requests: &[("cpu", "1")],
                ..PodSpec::default()
            }),
        ] {
            feed(&mut plugin, &mut cache, Change::Upsert(object));
        }
        let probe = cache.pod("default/probe").unwrap().clone();
        let answers = |plugin: &LoadAware, cache: &ClusterCache| {
            let mut state = CycleState::new(t0());
            plugin.pre_filter(&probe, cache, &mut state).unwrap();
            let n1 = cache.node("n1").unwrap();
            (
                plugin
                    .filter(&probe, n1, cache, &state)
                    .map_err(|r| r.reason.to_string()),
                plugin.score(&probe, n1, cache, &state),
                format!("{:?}", plugin.view(n1)),
                plugin.first_seen_len(),
            )
        };
        let before = answers(&plugin, &cache);
        assert_eq!(before.0, Err("node(s) cpu usage exceed threshold".into()));
        let (snapshot, snapshot_cache) = (plugin.clone(), cache.clone());

        // n1 reports less usage and a pod lands there, in the original only.
        for object in [
            node_metric("n1", t0(), &[("cpu", "500m")], serde_json::json!([])),
            pod(PodSpec {
                name: "landed",
                node: Some("n1"),
                requests: &[("cpu", "1")],
                ..PodSpec::default()
            }),
        ] {
            feed(&mut plugin, &mut cache, Change::Upsert(object));
        }
        let after = answers(&plugin, &cache);
        assert_eq!(answers(&snapshot, &snapshot_cache), before);
        assert_eq!(after.0, Ok(()));
        assert_ne!(after.2, before.2);
        assert_eq!(after.3, (0, 1));
        // The tick stamps the landed pod in the original only.
        assert!(plugin.pending_status_writes(&cache, t0()).is_empty());
        assert_eq!(plugin.first_seen_len(), (1, 0));
        assert_eq!(snapshot.first_seen_len(), (0, 0));
    }

    #[test]
    fn first_seen_stamps_are_kept_only_while_the_pod_is_on_its_node() {
        let mut cache = ClusterCache::new();
        let mut plugin = LoadAware::new(LoadAwareArgs::default());
        let unscheduled = |node_name: Option<&'static str>| {
            pod(PodSpec {
                name: "p",
                node: node_name,
                requests: &[("cpu", "1")],
                ..PodSpec::default()
            })
        };
        feed(
            &mut plugin,
            &mut cache,
            Change::Upsert(node("n1", &[("cpu", "4")])),
        );
        feed(
            &mut plugin,
            &mut cache,
            Change::Upsert(unscheduled(Some("n1"))),
        );
        // Seen through the watch: waits for the next tick's clock.
        assert_eq!(plugin.first_seen_len(), (0, 1));
        assert!(plugin.pending_status_writes(&cache, t0()).is_empty());
        assert_eq!(plugin.first_seen_len(), (1, 0));
        assert_eq!(
            plugin.first_seen.get("default/p"),
            Some(&("n1".to_string(), t0()))
        );
        // A later tick does not move the stamp.
        plugin.pending_status_writes(&cache, t0() + Duration::from_secs(5));
        assert_eq!(plugin.first_seen.get("default/p").unwrap().1, t0());
        // The condition takes over: the stamp goes.
        feed(
            &mut plugin,
            &mut cache,
            Change::Upsert(pod(PodSpec {
                name: "p",
                node: Some("n1"),
                requests: &[("cpu", "1")],
                scheduled_at: Some(t0()),
                ..PodSpec::default()
            })),
        );
        assert_eq!(plugin.first_seen_len(), (0, 0));
        // Deleted before a tick: nothing is kept.
        feed(
            &mut plugin,
            &mut cache,
            Change::Upsert(unscheduled(Some("n1"))),
        );
        assert_eq!(plugin.first_seen_len(), (0, 1));
        feed(
            &mut plugin,
            &mut cache,
            Change::Delete(unscheduled(Some("n1"))),
        );
        assert_eq!(plugin.first_seen_len(), (0, 0));
        assert!(plugin.pending_status_writes(&cache, t0()).is_empty());
        assert_eq!(plugin.first_seen_len(), (0, 0));
        // Stamped, then deleted: forgotten.
        feed(
            &mut plugin,
            &mut cache,
            Change::Upsert(unscheduled(Some("n1"))),
        );
        plugin.pending_status_writes(&cache, t0());
        assert_eq!(plugin.first_seen_len(), (1, 0));
        feed(
            &mut plugin,
            &mut cache,
            Change::Delete(unscheduled(Some("n1"))),
        );
        assert_eq!(plugin.first_seen_len(), (0, 0));
        // Not on a node: nothing to stamp.
        feed(&mut plugin, &mut cache, Change::Upsert(unscheduled(None)));
        assert_eq!(plugin.first_seen_len(), (0, 0));
    }
}

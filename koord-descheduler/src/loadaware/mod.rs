//! LowNodeLoad (upstream `framework/plugins/loadaware`): one balance round
//! over a cluster snapshot. Nodes are classified by NodeMetric usage against
//! each pool's low and high thresholds (node usage and prod usage), hot nodes
//! that stayed hot long enough (anomaly detection) give up pods in upstream's
//! victim order until they drop under their high thresholds or the cold
//! nodes' headroom is used up, and pods the evictor protects are skipped.
//!
//! Pure: the snapshot, the time and the evictor come in as arguments; the
//! decisions and their reasons come out as a [`RoundReport`].

pub mod anomaly;
pub mod sort;

use std::collections::{BTreeMap, HashMap, HashSet};

use apis::configuration::selector::label_selector_matches;
use apis::extension::PriorityClass;
use serde::Serialize;

use crate::config::types::{ResourceThresholds, ResourceWeights};
use crate::config::{LowNodeLoadConfig, NodePoolConfig};
use crate::model::{Amounts, ClusterView, MEMORY, NodeView, PODS, PodView};
use anomaly::{DetectorCache, State};

const MIN_PERCENTAGE: f64 = 0.0;
const MAX_PERCENTAGE: f64 = 100.0;
const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Where the round's victims go: the MigrationController's filter and its
/// `Evict` (creating a PodMigrationJob), or a stand-in in tests.
pub trait Evictor {
    /// `Err(reason)` when the pod may not be a victim now.
    fn filter(&self, pod: &PodView) -> Result<(), String>;
    /// Starts the pod's migration; `Err(reason)` when it would be refused.
    fn evict(&mut self, pod: &PodView, reason: &str) -> Result<(), String>;
}

/// Lookups over a [`ClusterView`] built once per snapshot.
pub struct ClusterIndex<'a> {
    pub view: &'a ClusterView,
    /// Pods holding resources on each node (not Succeeded or Failed).
    pub pods_by_node: HashMap<&'a str, Vec<&'a PodView>>,
    /// Sum of the requests of those pods.
    pub requested_by_node: HashMap<&'a str, Amounts>,
}

impl<'a> ClusterIndex<'a> {
    pub fn new(view: &'a ClusterView) -> Self {
        let mut pods_by_node: HashMap<&str, Vec<&PodView>> = HashMap::new();
        let mut requested_by_node: HashMap<&str, Amounts> = HashMap::new();
        for pod in &view.pods {
            if pod.node_name.is_empty() || !pod.occupies_node() {
                continue;
            }
            pods_by_node.entry(&pod.node_name).or_default().push(pod);
            let requested = requested_by_node.entry(&pod.node_name).or_default();
            for (name, amount) in &pod.requests {
                let entry = requested.entry(name.clone()).or_insert(0);
                *entry = entry.saturating_add(*amount);
            }
        }
        ClusterIndex {
            view,
            pods_by_node,
            requested_by_node,
        }
    }
}

/// How a node compares with its pool's thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum NodeClass {
    /// Under the low thresholds by node usage, appropriate by prod usage.
    Low,
    /// Above a high threshold by node usage: a source.
    High,
    /// Appropriate by node usage, under the prod low thresholds.
    ProdLow,
    /// Above a prod high threshold (and not a node-usage source): a prod source.
    ProdHigh,
    /// Under both the node and the prod low thresholds.
    BothLow,
    Appropriate,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    pub usage: i64,
    pub low_threshold: i64,
    pub high_threshold: i64,
    /// Usage as a percentage of the node's (raw) allocatable, when it has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_percent: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AnomalyReport {
    pub state: State,
    pub consecutive_abnormal_rounds: u32,
    /// The node turns anomalous after more than this many rounds.
    pub required_more_than: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassification {
    pub node: String,
    pub class: NodeClass,
    pub usage: BTreeMap<String, ResourceUsage>,
    pub prod_usage: BTreeMap<String, ResourceUsage>,
    /// For sources: the detector's state after this round's mark.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anomaly: Option<AnomalyReport>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedNode {
    pub node: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Migration {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// Upstream's eviction reason (`node is overutilized, ...`).
    pub reason: String,
    /// LowNodeLoad's own `dryRun`: counted, not handed to the evictor.
    pub dry_run: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedPod {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceReport {
    pub node: String,
    /// Balanced by prod usage (prod pods only) rather than node usage.
    pub prod: bool,
    pub migrations: Vec<Migration>,
    pub skipped: Vec<SkippedPod>,
    /// Why no further pod was taken from this node.
    pub stopped: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolReport {
    pub name: String,
    pub nodes: usize,
    pub skipped_nodes: Vec<SkippedNode>,
    pub classification: Vec<NodeClassification>,
    /// Why the pool stopped before balancing, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nothing_to_do: Option<String>,
    pub sources: Vec<SourceReport>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundReport {
    pub paused: bool,
    pub pools: Vec<PoolReport>,
}

impl RoundReport {
    pub fn migrations(&self) -> impl Iterator<Item = &Migration> {
        self.pools
            .iter()
            .flat_map(|pool| pool.sources.iter())
            .flat_map(|source| source.migrations.iter())
    }
}

/// One LowNodeLoad instance: its settings and its detectors, which persist
/// from round to round.
#[derive(Clone, Debug)]
pub struct LowNodeLoad {
    pub config: LowNodeLoadConfig,
    node_detectors: DetectorCache,
    prod_detectors: DetectorCache,
}

/// A pool's thresholds with upstream's fill-ins (`newThresholds`).
#[derive(Clone, Debug, PartialEq)]
pub struct PoolThresholds {
    pub resources: Vec<String>,
    pub low: ResourceThresholds,
    pub high: ResourceThresholds,
    pub prod_low: ResourceThresholds,
    pub prod_high: ResourceThresholds,
}

/// Upstream `newThresholds`: every resource named by any threshold, plus
/// memory, gets a value; a resource missing from a low map gets the neutral
/// value in both the low and the high map (0 with deviation thresholds,
/// 100 without).
pub fn pool_thresholds(pool: &NodePoolConfig) -> PoolThresholds {
    let mut low = pool.low_thresholds.clone();
    let mut high = pool.high_thresholds.clone();
    let mut prod_low = pool.prod_low_thresholds.clone();
    let mut prod_high = pool.prod_high_thresholds.clone();
    let mut names: Vec<String> = low
        .keys()
        .chain(high.keys())
        .chain(prod_low.keys())
        .chain(prod_high.keys())
        .cloned()
        .collect();
    names.push(MEMORY.to_string());
    let neutral = if pool.use_deviation_thresholds {
        MIN_PERCENTAGE
    } else {
        MAX_PERCENTAGE
    };
    for name in &names {
        if !low.contains_key(name) {
            low.insert(name.clone(), neutral);
            high.insert(name.clone(), neutral);
        }
        if !prod_low.contains_key(name) {
            prod_low.insert(name.clone(), neutral);
            prod_high.insert(name.clone(), neutral);
        }
    }
    PoolThresholds {
        resources: low.keys().cloned().collect(),
        low,
        high,
        prod_low,
        prod_high,
    }
}

/// Upstream `resourceThreshold`: the percentage of a capacity, truncated.
fn threshold_amount(capacity: i64, percentage: f64) -> i64 {
    (percentage * 0.01 * capacity as f64) as i64
}

fn clamp_percentage(percentage: f64) -> f64 {
    percentage.clamp(MIN_PERCENTAGE, MAX_PERCENTAGE)
}

/// Per-node state of one pool's round.
struct NodeState<'a> {
    node: &'a NodeView,
    pods: Vec<&'a PodView>,
    prod_pods: Vec<&'a PodView>,
    /// Aligned with the pool's resources.
    usage: Vec<i64>,
    prod_usage: Vec<i64>,
    pod_count: i64,
    prod_pod_count: i64,
    pod_metrics: HashMap<&'a str, &'a Amounts>,
    /// Requests of the pods on the node, for the fit check.
    requested: Amounts,
    low: Vec<i64>,
    high: Vec<i64>,
    prod_low: Vec<i64>,
    prod_high: Vec<i64>,
}

impl NodeState<'_> {
    fn usage(&self, prod: bool) -> &[i64] {
        if prod { &self.prod_usage } else { &self.usage }
    }

    fn high(&self, prod: bool) -> &[i64] {
        if prod { &self.prod_high } else { &self.high }
    }

    fn over_high(&self, prod: bool) -> Vec<usize> {
        let (usage, high) = (self.usage(prod), self.high(prod));
        (0..usage.len()).filter(|&i| usage[i] > high[i]).collect()
    }

    fn under_low(usage: &[i64], low: &[i64]) -> bool {
        usage.iter().zip(low).all(|(used, low)| used <= low)
    }
}

struct PoolContext<'p> {
    pool: &'p NodePoolConfig,
    thresholds: PoolThresholds,
    pods_index: Option<usize>,
}

impl PoolContext<'_> {
    fn percent(&self, state: &NodeState<'_>, resource: usize, used: i64) -> Option<f64> {
        let name = &self.thresholds.resources[resource];
        let capacity = state.node.capacity.get(name).copied().unwrap_or(0);
        (capacity != 0).then(|| 100.0 * used as f64 / capacity as f64)
    }

    /// Upstream `overUtilizedEvictionReason`.
    fn eviction_reason(&self, state: &NodeState<'_>, prod: bool) -> String {
        let (label, percentages) = if prod {
            ("prod", &self.thresholds.prod_high)
        } else {
            ("node", &self.thresholds.high)
        };
        let over = state.over_high(prod);
        let infos: Vec<String> = over
            .iter()
            .map(|&i| {
                let name = &self.thresholds.resources[i];
                format!(
                    "{label} {name} usage({:.2}%)>threshold({:.2}%)",
                    self.percent(state, i, state.usage(prod)[i]).unwrap_or(0.0),
                    percentages.get(name).copied().unwrap_or(0.0)
                )
            })
            .collect();
        format!("node is overutilized, {}", infos.join(", "))
    }

    fn node_score(&self, state: &NodeState<'_>, prod: bool) -> i64 {
        let usage = state.usage(prod);
        let pod_count = if prod {
            state.prod_pod_count
        } else {
            state.pod_count
        };
        let entries = self
            .thresholds
            .resources
            .iter()
            .map(String::as_str)
            .zip(usage.iter().copied());
        let extra = self.pods_index.is_none().then_some((PODS, pod_count));
        sort::node_score(
            entries.chain(extra),
            &state.node.capacity,
            &self.pool.resource_weights,
        )
    }
}

impl LowNodeLoad {
    pub fn new(config: LowNodeLoadConfig) -> Self {
        LowNodeLoad {
            config,
            node_detectors: DetectorCache::default(),
            prod_detectors: DetectorCache::default(),
        }
    }

    /// One round over `nodes` (the profile's ready, selected nodes). `now`
    /// drives the anomaly detectors; NodeMetrics are judged fresh or expired
    /// as of `metrics_as_of`. Both are nanoseconds since the epoch.
    pub fn balance(
        &mut self,
        index: &ClusterIndex<'_>,
        nodes: &[&NodeView],
        evictor: &mut dyn Evictor,
        now: i128,
        metrics_as_of: i128,
    ) -> RoundReport {
        if self.config.paused {
            return RoundReport {
                paused: true,
                pools: Vec::new(),
            };
        }
        self.node_detectors.sweep(now);
        self.prod_detectors.sweep(now);
        let mut processed: HashSet<String> = HashSet::new();
        let pools = self.config.node_pools.clone();
        let pools = pools
            .iter()
            .map(|pool| {
                self.process_pool(
                    pool,
                    index,
                    nodes,
                    &mut processed,
                    evictor,
                    now,
                    metrics_as_of,
                )
            })
            .collect();
        RoundReport {
            paused: false,
            pools,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn process_pool(
        &mut self,
        pool: &NodePoolConfig,
        index: &ClusterIndex<'_>,
        nodes: &[&NodeView],
        processed: &mut HashSet<String>,
        evictor: &mut dyn Evictor,
        now: i128,
        metrics_as_of: i128,
    ) -> PoolReport {
        let mut report = PoolReport {
            name: pool.name.clone(),
            nodes: 0,
            skipped_nodes: Vec::new(),
            classification: Vec::new(),
            nothing_to_do: None,
            sources: Vec::new(),
        };
        // Upstream: without a selector every node is in the pool, even one an
        // earlier pool balanced; with one, those are left out.
        let pool_nodes: Vec<&NodeView> = match &pool.node_selector {
            None => nodes.to_vec(),
            Some(selector) => nodes
                .iter()
                .copied()
                .filter(|node| !processed.contains(&node.name))
                .filter(|node| label_selector_matches(selector, &node.labels).unwrap_or(false))
                .collect(),
        };
        report.nodes = pool_nodes.len();
        if pool_nodes.is_empty() {
            report.nothing_to_do = Some("no nodes in the pool".to_string());
            return report;
        }
        let thresholds = pool_thresholds(pool);
        let context = PoolContext {
            pool,
            pods_index: thresholds.resources.iter().position(|name| name == PODS),
            thresholds,
        };
        let mut states = self.node_states(&context, index, &pool_nodes, metrics_as_of, &mut report);
        self.set_thresholds(&context, &mut states);

        let mut low = Vec::new();
        let mut high = Vec::new();
        let mut prod_low = Vec::new();
        let mut prod_high = Vec::new();
        let mut both_low = Vec::new();
        for (i, state) in states.iter().enumerate() {
            let schedulable = !state.node.unschedulable;
            let node_low = schedulable && NodeState::under_low(&state.usage, &state.low);
            let prod_low_now =
                schedulable && NodeState::under_low(&state.prod_usage, &state.prod_low);
            let node_high = !state.over_high(false).is_empty();
            let prod_high_now = !state.over_high(true).is_empty();
            let class = if node_low {
                if prod_high_now {
                    NodeClass::ProdHigh
                } else if prod_low_now {
                    NodeClass::BothLow
                } else {
                    NodeClass::Low
                }
            } else if node_high {
                NodeClass::High
            } else if prod_high_now {
                NodeClass::ProdHigh
            } else if prod_low_now {
                NodeClass::ProdLow
            } else {
                NodeClass::Appropriate
            };
            match class {
                NodeClass::Low => low.push(i),
                NodeClass::High => high.push(i),
                NodeClass::ProdLow => prod_low.push(i),
                NodeClass::ProdHigh => prod_high.push(i),
                NodeClass::BothLow => both_low.push(i),
                NodeClass::Appropriate => {}
            }
            report
                .classification
                .push(self.classification(&context, state, class));
        }

        if high.is_empty() && prod_high.is_empty() {
            report.nothing_to_do = Some("all nodes are under their high thresholds".to_string());
            return report;
        }
        let cache_timeout = self.config.detector_cache_timeout;
        let mut abnormal = Vec::new();
        filter_abnormal(
            &high,
            &states,
            &mut self.node_detectors,
            pool,
            cache_timeout,
            now,
            &mut abnormal,
            &mut report,
        );
        let mut abnormal_prod = Vec::new();
        filter_abnormal(
            &prod_high,
            &states,
            &mut self.prod_detectors,
            pool,
            cache_timeout,
            now,
            &mut abnormal_prod,
            &mut report,
        );
        if abnormal.is_empty() && abnormal_prod.is_empty() {
            report.nothing_to_do = Some(
                "no node above its high thresholds has been so for enough consecutive rounds"
                    .to_string(),
            );
            return report;
        }
        if low.is_empty() && prod_low.is_empty() && both_low.is_empty() {
            report.nothing_to_do = Some("no node is under its low thresholds".to_string());
            return report;
        }
        for &i in low.iter().chain(&both_low) {
            self.node_detectors.reset(&states[i].node.name, now);
        }
        for &i in &prod_low {
            self.prod_detectors.reset(&states[i].node.name, now);
        }
        let all_low = low.len() + prod_low.len() + both_low.len();
        if all_low <= usize::try_from(self.config.number_of_nodes).unwrap_or(0) {
            report.nothing_to_do = Some(format!(
                "{all_low} underutilized nodes, not more than numberOfNodes {}",
                self.config.number_of_nodes
            ));
            return report;
        }
        if all_low == pool_nodes.len() {
            report.nothing_to_do = Some("all nodes are underutilized".to_string());
            return report;
        }

        sort_sources(&context, &states, &mut abnormal, false);
        sort_sources(&context, &states, &mut abnormal_prod, true);

        let resources = context.thresholds.resources.len();
        let total = available(&states, &low, resources, false);
        let prod_available = available(&states, &prod_low, resources, true);
        let both_total = available(&states, &both_low, resources, false);
        let prod_both = available(&states, &both_low, resources, true);
        let mut node_total: Vec<i64> = total
            .iter()
            .zip(&both_total)
            .map(|(a, b)| a.saturating_add(*b))
            .collect();
        let targets: Vec<usize> = low.iter().chain(&both_low).copied().collect();
        self.balance_pods(
            &context,
            &mut states,
            &abnormal,
            &targets,
            &mut node_total,
            false,
            evictor,
            now,
            &mut report,
        );
        // What the node pass left of the both-low nodes is what prod may use.
        let both_left: Vec<i64> = both_total
            .iter()
            .zip(&node_total)
            .map(|(both, left)| (*both).min(*left))
            .collect();
        let mut prod_total: Vec<i64> = (0..resources)
            .map(|r| prod_available[r].saturating_add(prod_both[r].min(both_left[r])))
            .collect();
        let prod_targets: Vec<usize> = prod_low.iter().chain(&both_low).copied().collect();
        self.balance_pods(
            &context,
            &mut states,
            &abnormal_prod,
            &prod_targets,
            &mut prod_total,
            true,
            evictor,
            now,
            &mut report,
        );
        for &i in &abnormal {
            self.node_detectors.mark_normal(&states[i].node.name, now);
        }
        for &i in &abnormal_prod {
            self.prod_detectors.mark_normal(&states[i].node.name, now);
        }
        processed.extend(high.iter().map(|&i| states[i].node.name.clone()));
        report
    }

    /// Upstream `getNodeUsage`: nodes without a fresh NodeMetric are left out.
    fn node_states<'a>(
        &self,
        context: &PoolContext<'_>,
        index: &ClusterIndex<'a>,
        nodes: &[&'a NodeView],
        metrics_as_of: i128,
        report: &mut PoolReport,
    ) -> Vec<NodeState<'a>> {
        let resources = &context.thresholds.resources;
        let mut states = Vec::with_capacity(nodes.len());
        for &node in nodes {
            let pods: Vec<&PodView> = index
                .pods_by_node
                .get(node.name.as_str())
                .cloned()
                .unwrap_or_default();
            let prod_pods: Vec<&PodView> = pods
                .iter()
                .copied()
                .filter(|pod| pod.priority_class == PriorityClass::Prod)
                .collect();
            let Some(metric) = index.view.node_metrics.get(&node.name) else {
                report.skipped_nodes.push(SkippedNode {
                    node: node.name.clone(),
                    reason: "no NodeMetric".to_string(),
                });
                continue;
            };
            if !metric.has_node_metric {
                report.skipped_nodes.push(SkippedNode {
                    node: node.name.clone(),
                    reason: "NodeMetric has no status.nodeMetric".to_string(),
                });
                continue;
            }
            if let Some(expiration) = self.config.node_metric_expiration_seconds {
                let expired = match metric.update_time {
                    None => true,
                    Some(updated) => {
                        expiration > 0
                            && metrics_as_of - updated.as_nanosecond()
                                >= i128::from(expiration) * NANOS_PER_SECOND
                    }
                };
                if expired {
                    report.skipped_nodes.push(SkippedNode {
                        node: node.name.clone(),
                        reason: format!("NodeMetric expired (older than {expiration}s)"),
                    });
                    continue;
                }
            }
            let prod_keys: HashSet<&str> = prod_pods.iter().map(|pod| pod.key()).collect();
            let mut usage = Vec::with_capacity(resources.len());
            let mut prod_usage = Vec::with_capacity(resources.len());
            for name in resources {
                let mut used = metric.system_usage.get(name).copied().unwrap_or(0);
                let mut prod_used: i64 = 0;
                for (key, pod_usage) in &metric.pods {
                    let amount = pod_usage.get(name).copied().unwrap_or(0);
                    used = used.saturating_add(amount);
                    if prod_keys.contains(key.as_str()) {
                        prod_used = prod_used.saturating_add(amount);
                    }
                }
                usage.push(used);
                prod_usage.push(prod_used);
            }
            let pod_count = i64::try_from(pods.len()).unwrap_or(i64::MAX);
            let prod_pod_count = i64::try_from(prod_pods.len()).unwrap_or(i64::MAX);
            if let Some(i) = context.pods_index {
                usage[i] = pod_count;
                prod_usage[i] = prod_pod_count;
            }
            let pod_metrics = metric
                .pods
                .iter()
                .map(|(key, usage)| (key.as_str(), usage))
                .collect();
            states.push(NodeState {
                node,
                pods,
                prod_pods,
                usage,
                prod_usage,
                pod_count,
                prod_pod_count,
                pod_metrics,
                requested: index
                    .requested_by_node
                    .get(node.name.as_str())
                    .cloned()
                    .unwrap_or_default(),
                low: Vec::new(),
                high: Vec::new(),
                prod_low: Vec::new(),
                prod_high: Vec::new(),
            });
        }
        states
    }

    /// Upstream `getNodeThresholds`, with deviation thresholds around the
    /// pool's average usage percentage when asked for.
    fn set_thresholds(&self, context: &PoolContext<'_>, states: &mut [NodeState<'_>]) {
        let thresholds = &context.thresholds;
        let resources = &thresholds.resources;
        let deviation = context.pool.use_deviation_thresholds;
        let (average, prod_average) = if deviation {
            average_usage_percent(context, states)
        } else {
            (Vec::new(), Vec::new())
        };
        for state in states.iter_mut() {
            let mut low = Vec::with_capacity(resources.len());
            let mut high = Vec::with_capacity(resources.len());
            let mut prod_low = Vec::with_capacity(resources.len());
            let mut prod_high = Vec::with_capacity(resources.len());
            for (r, name) in resources.iter().enumerate() {
                let capacity = state.node.capacity.get(name).copied().unwrap_or(0);
                let low_pct = thresholds.low.get(name).copied().unwrap_or(0.0);
                let high_pct = thresholds.high.get(name).copied().unwrap_or(0.0);
                let prod_low_pct = thresholds.prod_low.get(name).copied().unwrap_or(0.0);
                let prod_high_pct = thresholds.prod_high.get(name).copied().unwrap_or(0.0);
                if deviation {
                    if low_pct == MIN_PERCENTAGE {
                        low.push(capacity);
                        high.push(capacity);
                    } else {
                        low.push(threshold_amount(
                            capacity,
                            clamp_percentage(average[r] - low_pct),
                        ));
                        high.push(threshold_amount(
                            capacity,
                            clamp_percentage(average[r] + high_pct),
                        ));
                    }
                    if prod_low_pct == MIN_PERCENTAGE {
                        prod_low.push(capacity);
                        prod_high.push(capacity);
                    } else {
                        prod_low.push(threshold_amount(
                            capacity,
                            clamp_percentage(prod_average[r] - prod_low_pct),
                        ));
                        prod_high.push(threshold_amount(
                            capacity,
                            clamp_percentage(prod_average[r] + prod_high_pct),
                        ));
                    }
                } else {
                    low.push(threshold_amount(capacity, low_pct));
                    high.push(threshold_amount(capacity, high_pct));
                    prod_low.push(threshold_amount(capacity, prod_low_pct));
                    prod_high.push(threshold_amount(capacity, prod_high_pct));
                }
            }
            state.low = low;
            state.high = high;
            state.prod_low = prod_low;
            state.prod_high = prod_high;
        }
    }

    fn classification(
        &self,
        context: &PoolContext<'_>,
        state: &NodeState<'_>,
        class: NodeClass,
    ) -> NodeClassification {
        let describe = |usage: &[i64], low: &[i64], high: &[i64]| {
            context
                .thresholds
                .resources
                .iter()
                .enumerate()
                .map(|(r, name)| {
                    (
                        name.clone(),
                        ResourceUsage {
                            usage: usage[r],
                            low_threshold: low[r],
                            high_threshold: high[r],
                            usage_percent: context.percent(state, r, usage[r]),
                        },
                    )
                })
                .collect()
        };
        NodeClassification {
            node: state.node.name.clone(),
            class,
            usage: describe(&state.usage, &state.low, &state.high),
            prod_usage: describe(&state.prod_usage, &state.prod_low, &state.prod_high),
            anomaly: None,
        }
    }

    /// Upstream `balancePods` for one set of sources.
    #[allow(clippy::too_many_arguments)]
    fn balance_pods(
        &mut self,
        context: &PoolContext<'_>,
        states: &mut [NodeState<'_>],
        sources: &[usize],
        targets: &[usize],
        available: &mut [i64],
        prod: bool,
        evictor: &mut dyn Evictor,
        now: i128,
        report: &mut PoolReport,
    ) {
        if targets.is_empty() {
            for &source in sources {
                report.sources.push(SourceReport {
                    node: states[source].node.name.clone(),
                    prod,
                    migrations: Vec::new(),
                    skipped: Vec::new(),
                    stopped: "no underutilized node to take its pods".to_string(),
                });
            }
            return;
        }
        for &source in sources {
            let mut source_report = SourceReport {
                node: states[source].node.name.clone(),
                prod,
                migrations: Vec::new(),
                skipped: Vec::new(),
                stopped: String::new(),
            };
            let pods = if prod {
                states[source].prod_pods.clone()
            } else {
                states[source].pods.clone()
            };
            let mut removable = Vec::new();
            for pod in pods {
                let verdict = evictor.filter(pod).and_then(|()| {
                    if !self.config.node_fit {
                        return Ok(());
                    }
                    let Some(metric) = states[source].pod_metrics.get(pod.key()).copied() else {
                        return Err("no usage of the pod in its node's NodeMetric".to_string());
                    };
                    fits_any_target(context, states, targets, pod, metric, prod)
                });
                match verdict {
                    Ok(()) => removable.push(pod),
                    Err(reason) => source_report.skipped.push(SkippedPod {
                        namespace: pod.namespace.clone(),
                        name: pod.name.clone(),
                        reason,
                    }),
                }
            }
            if removable.is_empty() {
                source_report.stopped = "no removable pods".to_string();
                report.sources.push(source_report);
                continue;
            }
            let ordered = order_victims(context, &states[source], removable, prod);
            source_report.stopped = "every removable pod was taken".to_string();
            for pod in ordered {
                if let Some(stop) = self.stop_reason(context, &states[source], available, prod, now)
                {
                    source_report.stopped = stop;
                    break;
                }
                if let Err(reason) = evictor.filter(pod) {
                    source_report.skipped.push(SkippedPod {
                        namespace: pod.namespace.clone(),
                        name: pod.name.clone(),
                        reason,
                    });
                    continue;
                }
                let reason = context.eviction_reason(&states[source], prod);
                if !self.config.dry_run
                    && let Err(refused) = evictor.evict(pod, &reason)
                {
                    source_report.skipped.push(SkippedPod {
                        namespace: pod.namespace.clone(),
                        name: pod.name.clone(),
                        reason: refused,
                    });
                    continue;
                }
                source_report.migrations.push(Migration {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    node: states[source].node.name.clone(),
                    reason,
                    dry_run: self.config.dry_run,
                });
                let Some(metric) = states[source].pod_metrics.get(pod.key()).copied() else {
                    // Upstream counts nothing moved for a pod without a metric.
                    continue;
                };
                let state = &mut states[source];
                for (r, name) in context.thresholds.resources.iter().enumerate() {
                    let amount = if Some(r) == context.pods_index {
                        1
                    } else {
                        metric.get(name).copied().unwrap_or(0)
                    };
                    available[r] = available[r].saturating_sub(amount);
                    state.usage[r] = state.usage[r].saturating_sub(amount);
                    if prod {
                        state.prod_usage[r] = state.prod_usage[r].saturating_sub(amount);
                    }
                }
            }
            report.sources.push(source_report);
        }
    }

    /// Upstream `continueEvictionCond`, as the reason to stop.
    fn stop_reason(
        &mut self,
        context: &PoolContext<'_>,
        state: &NodeState<'_>,
        available: &[i64],
        prod: bool,
        now: i128,
    ) -> Option<String> {
        if state.over_high(prod).is_empty() {
            let detectors = if prod {
                &mut self.prod_detectors
            } else {
                &mut self.node_detectors
            };
            detectors.reset(&state.node.name, now);
            let which = if prod { "prod" } else { "node" };
            return Some(format!("{which} usage is under the high thresholds now"));
        }
        for (r, left) in available.iter().enumerate() {
            if *left <= 0 {
                return Some(format!(
                    "the underutilized nodes have no {} headroom left",
                    context.thresholds.resources[r]
                ));
            }
        }
        None
    }
}

/// Upstream `filterRealAbnormalNodes`: with an anomaly condition of more
/// than one round, a hot node must have been hot that many rounds in a row.
#[allow(clippy::too_many_arguments)]
fn filter_abnormal(
    sources: &[usize],
    states: &[NodeState<'_>],
    detectors: &mut DetectorCache,
    pool: &NodePoolConfig,
    cache_timeout: std::time::Duration,
    now: i128,
    abnormal: &mut Vec<usize>,
    report: &mut PoolReport,
) {
    let condition = match pool.anomaly_condition {
        Some(condition) if condition.consecutive_abnormalities != 1 => condition,
        _ => {
            abnormal.extend_from_slice(sources);
            return;
        }
    };
    for &i in sources {
        let name = &states[i].node.name;
        let (state, counter) = detectors.mark_abnormal(name, condition, cache_timeout, now);
        if state == State::Anomaly {
            abnormal.push(i);
        }
        if let Some(entry) = report.classification.iter_mut().find(|c| &c.node == name) {
            entry.anomaly = Some(AnomalyReport {
                state,
                consecutive_abnormal_rounds: counter.consecutive_abnormalities,
                required_more_than: condition.consecutive_abnormalities,
            });
        }
    }
}

/// Upstream `targetAvailableUsage`: the headroom under the high thresholds,
/// summed over the nodes (a node over its threshold counts negative).
fn available(states: &[NodeState<'_>], nodes: &[usize], resources: usize, prod: bool) -> Vec<i64> {
    let mut total = vec![0i64; resources];
    for &i in nodes {
        let state = &states[i];
        let (high, usage) = (state.high(prod), state.usage(prod));
        for r in 0..resources {
            total[r] = total[r].saturating_add(high[r].saturating_sub(usage[r]));
        }
    }
    total
}

fn sort_sources(
    context: &PoolContext<'_>,
    states: &[NodeState<'_>],
    nodes: &mut [usize],
    prod: bool,
) {
    nodes.sort_by(|&a, &b| {
        context
            .node_score(&states[b], prod)
            .cmp(&context.node_score(&states[a], prod))
            // Not upstream (unstable sort): a fixed order for equal scores.
            .then_with(|| states[a].node.name.cmp(&states[b].node.name))
    });
}

/// Upstream `podFitsAnyNodeWithThreshold`: the first target the pod fits on
/// without going over its high thresholds takes the pod's usage (kept, as
/// upstream keeps it, for the next candidates' checks).
fn fits_any_target(
    context: &PoolContext<'_>,
    states: &mut [NodeState<'_>],
    targets: &[usize],
    pod: &PodView,
    metric: &Amounts,
    prod: bool,
) -> Result<(), String> {
    let mut no_fit = 0usize;
    let mut over_threshold = 0usize;
    for &target in targets {
        let state = &states[target];
        if !crate::nodefit::fits(pod, state.node, &state.requested) {
            no_fit += 1;
            continue;
        }
        let state = &mut states[target];
        let (usage, high) = if prod {
            (&mut state.prod_usage, &state.prod_high)
        } else {
            (&mut state.usage, &state.high)
        };
        let exceeds = context
            .thresholds
            .resources
            .iter()
            .zip(usage.iter())
            .zip(high.iter())
            .any(|((name, used), high)| {
                used.saturating_add(metric.get(name).copied().unwrap_or(0)) > *high
            });
        if exceeds {
            over_threshold += 1;
            continue;
        }
        for (name, used) in context.thresholds.resources.iter().zip(usage.iter_mut()) {
            *used = used.saturating_add(metric.get(name).copied().unwrap_or(0));
        }
        return Ok(());
    }
    Err(format!(
        "fits no underutilized node ({no_fit} refuse it by selector, affinity, taints, requests or cordon; {over_threshold} would go over their high thresholds)"
    ))
}

/// Upstream `sortPodsOnOneOverloadedNode`.
fn order_victims<'a>(
    context: &PoolContext<'_>,
    state: &NodeState<'_>,
    pods: Vec<&'a PodView>,
    prod: bool,
) -> Vec<&'a PodView> {
    let usage = state.usage(prod);
    let high = state.high(prod);
    let mut weights = ResourceWeights::new();
    let mut excess = Amounts::new();
    for r in state.over_high(prod) {
        let name = &context.thresholds.resources[r];
        weights.insert(
            name.clone(),
            context
                .pool
                .resource_weights
                .get(name)
                .copied()
                .unwrap_or(0),
        );
        excess.insert(name.clone(), usage[r].saturating_sub(high[r]));
    }
    let mut candidates: Vec<sort::Candidate<'a>> = pods
        .into_iter()
        .map(|pod| sort::Candidate {
            usage_score: state
                .pod_metrics
                .get(pod.key())
                .map(|metric| sort::pod_usage_score(metric, &excess, &weights)),
            pod,
        })
        .collect();
    candidates.sort_by(sort::compare_victims);
    candidates
        .into_iter()
        .map(|candidate| candidate.pod)
        .collect()
}

/// Upstream `calcAverageResourceUsagePercent` over the pool's nodes with metrics.
fn average_usage_percent(
    context: &PoolContext<'_>,
    states: &[NodeState<'_>],
) -> (Vec<f64>, Vec<f64>) {
    let resources = &context.thresholds.resources;
    let mut sum = vec![0.0; resources.len()];
    let mut prod_sum = vec![0.0; resources.len()];
    for state in states {
        for (r, name) in resources.iter().enumerate() {
            let capacity = state.node.capacity.get(name).copied().unwrap_or(0);
            if capacity == 0 {
                continue;
            }
            sum[r] += state.usage[r] as f64 / capacity as f64 * 100.0;
            prod_sum[r] += state.prod_usage[r] as f64 / capacity as f64 * 100.0;
        }
    }
    let count = states.len().max(1) as f64;
    (
        sum.into_iter().map(|total| total / count).collect(),
        prod_sum.into_iter().map(|total| total / count).collect(),
    )
}

#[cfg(test)]
mod tests;

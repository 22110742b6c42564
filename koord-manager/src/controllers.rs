//! The controllers' shell: kube-runtime reflectors keep caches of Nodes,
//! NodeMetrics, NodeSLOs, Pods, the `slo-controller-config` ConfigMap,
//! ElasticQuotaProfiles and ElasticQuotas; a pass runs the decision cores
//! over the whole cache ([`plan_pass`], pure) and applies the actions.
//!
//! A pass runs when a cache changes (at most every [`MIN_PASS_INTERVAL`]) and
//! every `--sync-period`, so NodeMetric staleness is noticed without events.
//!
//! A controller whose part of the ConfigMap has never been available since
//! start writes nothing ([`gate`]), as upstream's controllers drop their
//! requests until `IsCfgAvailable`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::extension::{BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY};
use apis::quota::v1alpha1::ElasticQuotaProfile;
use apis::scheduling::v1alpha1::Device;
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use apis::slo::v1alpha1::{NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY, NodeMetric, NodeSLO};
use apis::topology::v1alpha1::NodeResourceTopology;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::Notify;

use crate::metrics::ControllerMetrics;
use crate::quota_profile::reconcile_profile;
use crate::reflector::spawn_reflector;
use crate::slo_controller::config::{ConfigOutcome, ConfigSection, ConfigState, node_colocation};
use crate::slo_controller::device_resources::{self, DevicePlan};
use crate::slo_controller::node_meta::{
    MetaInputs, NodeResourcePlugins, meta_patch, plan_node_meta,
};
use crate::slo_controller::nodemetric::{NodeMetricAction, reconcile_node_metric};
use crate::slo_controller::noderesource::{self, MANAGED_RESOURCES, NodeInputs, SyncDecision};
use crate::slo_controller::nodeslo::{NodeSloAction, reconcile_node_slo};
use crate::slo_controller::numa_batch::{self, ZoneBatch};
use crate::slo_controller::pods_by_node;

/// Shortest pause between two event-triggered passes.
pub const MIN_PASS_INTERVAL: Duration = Duration::from_secs(2);
/// Concurrent API writes of one lane (one API resource, see [`write_lanes`])
/// during a pass. The client-side limit
/// (`--rest-config-qps`, per API resource) bounds the rate; this only has to
/// keep enough writes in flight to reach it when the API server answers
/// slowly: 8 in flight at the 0.25 s answers of a loaded API server allow
/// only about 30 writes/s, whatever the limit.
const WRITE_CONCURRENCY: usize = 32;

/// Upstream's leader-election lease (`koordinator-manager`); the elector
/// itself lives in [`koord_common::leader`].
pub const DEFAULT_LEASE_NAME: &str = "koordinator-manager";

/// Controller names for `--controllers`.
pub const ALL_CONTROLLERS: [&str; 4] = ["nodeslo", "nodemetric", "noderesource", "quotaprofile"];

/// Reconcile-count reason of a pass a controller skipped for want of config.
pub const CONFIG_UNAVAILABLE: &str = "configUnavailable";

/// Full-pass period when `--sync-period` is 0.
const DEFAULT_FULL_PASS_PERIOD: Duration = Duration::from_secs(60);

/// Flags of the controllers and of leader election (upstream names).
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Run the controllers only on the replica holding the Lease.
    #[arg(
        long = "enable-leader-election",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_parser = koord_common::cli::parse_go_bool_flag,
        value_name = "BOOL"
    )]
    pub enable_leader_election: bool,

    /// Namespace of the leader-election Lease.
    #[arg(
        long = "leader-election-namespace",
        default_value = apis::configuration::DEFAULT_CONFIG_NAMESPACE
    )]
    pub leader_election_namespace: String,

    /// Only `leases` is supported (upstream's default).
    #[arg(long = "leader-elect-resource-lock", default_value = "leases", value_parser = ["leases"])]
    pub leader_elect_resource_lock: String,

    /// Namespace of the slo-controller-config ConfigMap.
    #[arg(
        long = "config-namespace",
        default_value = apis::configuration::DEFAULT_CONFIG_NAMESPACE
    )]
    pub config_namespace: String,

    /// Name of the slo-controller-config ConfigMap.
    #[arg(
        long = "slo-config-name",
        default_value = apis::configuration::DEFAULT_SLO_CONTROLLER_CONFIG_NAME
    )]
    pub slo_config_name: String,

    /// `true` makes the slo-controller-config webhook require a unique name
    /// on every nodeStrategies entry; any other value does not (upstream's
    /// string flag and values).
    #[arg(
        long = "node-strategy-name-need-check",
        default_value = "false",
        value_name = "true|false"
    )]
    pub node_strategy_name_need_check: String,

    /// Period of full passes over every node (e.g. `60s`); `0`, which
    /// upstream's chart passes, or empty (upstream's default) keeps the default.
    #[arg(long = "sync-period", default_value = "60s", value_parser = parse_sync_period)]
    pub sync_period: Duration,

    /// Controllers to run: `*` for all, `name` to add, `-name` to remove
    /// (nodeslo, nodemetric, noderesource, quotaprofile, colocationprofile;
    /// the last also needs its feature gate).
    #[arg(long = "controllers", value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// Node resource plugins to run: `*` for all, `Name` to add, `-Name` to
    /// remove (MidResource, BatchResource, CPUNormalization,
    /// ResourceAmplification, GPUDeviceResource, RDMADeviceResource). Not
    /// given: all.
    #[arg(long = "noderesource-plugins", value_delimiter = ',')]
    pub noderesource_plugins: Option<Vec<String>>,

    /// Upstream's `EnableSyncGPUSharedResource` gate (from `--feature-gates`):
    /// the GPUDeviceResource plugin also writes `koordinator.sh/gpu.shared`.
    #[arg(skip)]
    pub sync_gpu_shared_resource: bool,
}

/// `--sync-period`: a Go-style duration, or empty, which upstream takes as
/// "not set" (here: the default period, as `0`).
fn parse_sync_period(text: &str) -> Result<Duration, String> {
    if text.trim().is_empty() {
        return Ok(Duration::ZERO);
    }
    koord_common::cluster::parse_duration(text)
}

impl ControllerArgs {
    /// `--node-strategy-name-need-check`: only the exact value `true` turns
    /// the check on, as upstream compares it.
    pub fn require_node_strategy_names(&self) -> bool {
        self.node_strategy_name_need_check == "true"
    }

    /// The period between full passes; a zero `--sync-period` (never a busy
    /// loop) means the 60 s default.
    pub fn full_pass_period(&self) -> Duration {
        if self.sync_period.is_zero() {
            DEFAULT_FULL_PASS_PERIOD
        } else {
            self.sync_period
        }
    }

    /// The node resource plugins `--noderesource-plugins` selects.
    pub fn node_resource_plugins(&self) -> NodeResourcePlugins {
        NodeResourcePlugins::from_flag(self.noderesource_plugins.as_deref())
    }

    /// Whether `name` is switched on by `--controllers`.
    pub fn is_enabled(&self, name: &str) -> bool {
        let mut star = false;
        for entry in &self.controllers {
            if entry == name {
                return true;
            }
            if entry.strip_prefix('-') == Some(name) {
                return false;
            }
            star |= entry == "*";
        }
        star
    }
}

/// Which controllers a pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enabled {
    pub node_slo: bool,
    pub node_metric: bool,
    pub node_resource: bool,
    pub quota_profile: bool,
}

impl Enabled {
    pub const ALL: Enabled = Enabled {
        node_slo: true,
        node_metric: true,
        node_resource: true,
        quota_profile: true,
    };

    pub fn from_args(args: &ControllerArgs) -> Self {
        Enabled {
            node_slo: args.is_enabled("nodeslo"),
            node_metric: args.is_enabled("nodemetric"),
            node_resource: args.is_enabled("noderesource"),
            quota_profile: args.is_enabled("quotaprofile"),
        }
    }
}

/// The cached cluster state one pass reads.
#[derive(Default)]
pub struct ClusterView {
    pub nodes: Vec<Arc<Node>>,
    pub node_metrics: Vec<Arc<NodeMetric>>,
    pub node_slos: Vec<Arc<NodeSLO>>,
    pub pods: Vec<Arc<Pod>>,
    pub profiles: Vec<Arc<ElasticQuotaProfile>>,
    pub quotas: Vec<Arc<ElasticQuota>>,
    /// NodeResourceTopologies: the CPU normalization plugin reads their
    /// `cpu-basic-info` annotation, the BatchResource plugin their zones.
    pub topologies: Vec<Arc<NodeResourceTopology>>,
    /// Devices, read by the GPUDeviceResource and RDMADeviceResource
    /// plugins; `None` until their cache has synced (the plugins then leave
    /// every node as it is rather than take a missing Device for a deleted
    /// one).
    pub devices: Option<Vec<Arc<Device>>>,
}

/// One API write.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    CreateNodeSlo(Box<NodeSLO>),
    ReplaceNodeSlo(Box<NodeSLO>),
    DeleteNodeSlo(String),
    CreateNodeMetric(Box<NodeMetric>),
    ReplaceNodeMetric(Box<NodeMetric>),
    DeleteNodeMetric(String),
    /// JSON merge patch of `nodes/<node>/status`.
    PatchNodeStatus {
        node: String,
        patch: serde_json::Value,
        reason: String,
    },
    /// JSON merge patch of the Node's metadata (the CPU normalization and
    /// resource amplification ratio annotations).
    PatchNodeMeta {
        node: String,
        patch: serde_json::Value,
        reason: String,
    },
    /// JSON merge patch of the zones of the node's NodeResourceTopology
    /// (NUMA-level batch resources), guarded by its resourceVersion.
    PatchTopologyZones {
        node: String,
        patch: serde_json::Value,
        reason: String,
    },
    LabelProfile {
        namespace: String,
        name: String,
        labels: BTreeMap<String, String>,
    },
    CreateQuota(Box<ElasticQuota>),
    ReplaceQuota(Box<ElasticQuota>),
}

/// A computed amount, for the allocatable gauge.
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    pub node: String,
    pub resources: noderesource::ExtendedResources,
}

/// Input a pass refused to act on: the node's status (or the object) is left
/// as it is, and the reason is logged, counted and recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The node whose batch and mid resources are not updated; `None` when
    /// the refused object has no name to attach the refusal to.
    pub node: Option<String>,
    pub reason: String,
}

/// Reconcile-count reason of a node whose inputs were refused.
pub const INVALID_INPUT: &str = "invalidInput";

/// Everything one pass decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassPlan {
    pub actions: Vec<Action>,
    pub computed: Vec<Computed>,
    pub refused: Vec<Refusal>,
    /// Each device plugin run (plugin name, succeeded), for upstream's
    /// `node_resource_run_plugin_status` counter.
    pub plugin_runs: Vec<(&'static str, bool)>,
}

/// Objects keyed by name, with the names that appear more than once (which
/// is meant to be impossible: the caches are keyed by name) and the
/// refusals for objects without a name.
fn by_name<'a, K: Resource>(
    objects: &'a [Arc<K>],
    kind: &str,
    refused: &mut Vec<Refusal>,
) -> (HashMap<&'a str, &'a K>, HashSet<&'a str>) {
    let mut named = HashMap::new();
    let mut duplicates = HashSet::new();
    for (index, object) in objects.iter().enumerate() {
        match object
            .meta()
            .name
            .as_deref()
            .filter(|name| !name.is_empty())
        {
            None => refused.push(Refusal {
                node: None,
                reason: format!("{kind} #{index} of the cache has no metadata.name; ignored"),
            }),
            Some(name) => {
                if named.insert(name, object.as_ref()).is_some() {
                    duplicates.insert(name);
                }
            }
        }
    }
    (named, duplicates)
}

/// A controller held back because the config it reads is not available.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paused {
    /// The `--controllers` name.
    pub controller: &'static str,
    /// Why, for the log.
    pub reason: String,
}

/// The controllers a pass may run, given which parts of the
/// `slo-controller-config` are available (upstream's `IsCfgAvailable`): the
/// NodeMetric and node resource controllers need a `colocation-config` that
/// was valid (or absent) at least once, the NodeSLO controller a ConfigMap
/// (or its absence) seen once. Those that must wait are returned with the
/// reason; they write nothing, not even deletions of orphans.
pub fn gate(enabled: Enabled, config: &ConfigState) -> (Enabled, Vec<Paused>) {
    let mut gated = enabled;
    let mut paused = Vec::new();
    let checks: [(&'static str, ConfigSection, &mut bool); 3] = [
        ("nodeslo", ConfigSection::NodeSlo, &mut gated.node_slo),
        (
            "nodemetric",
            ConfigSection::Colocation,
            &mut gated.node_metric,
        ),
        (
            "noderesource",
            ConfigSection::Colocation,
            &mut gated.node_resource,
        ),
    ];
    for (controller, section, switch) in checks {
        if !*switch {
            continue;
        }
        if let Err(reason) = config.availability(section) {
            *switch = false;
            paused.push(Paused { controller, reason });
        }
    }
    (gated, paused)
}

/// What a pass runs beyond the controllers' switches.
#[derive(Clone, Debug, Default)]
pub struct PassSettings {
    /// `--noderesource-plugins`.
    pub plugins: NodeResourcePlugins,
    /// ConfigMap keys never valid since start, with why
    /// ([`ConfigState::unavailable_keys`]).
    pub unavailable_keys: BTreeMap<String, String>,
    /// When this process last wrote each node's NodeResourceTopology zones.
    pub topology_last_synced: HashMap<String, SystemTime>,
    /// Upstream's `EnableSyncGPUSharedResource` gate.
    pub sync_gpu_shared_resource: bool,
    /// Nodes whose last write the cache has not shown yet: their Node
    /// writes wait for the next pass ([`crate::own_writes`]).
    pub awaiting_watch: HashSet<String>,
}

/// Decides every write of one pass with every node resource plugin on.
pub fn plan_pass(
    view: &ClusterView,
    config: &apis::configuration::SloControllerConfig,
    enabled: Enabled,
    last_synced: &HashMap<String, SystemTime>,
    now: SystemTime,
) -> PassPlan {
    plan_pass_with(
        view,
        config,
        enabled,
        &PassSettings::default(),
        last_synced,
        now,
    )
}

/// Decides every write of one pass. `last_synced` holds when each node's
/// status was last written by this process.
///
/// Objects without a name, names that appear twice, and nodes whose amounts
/// cannot be read exactly (see [`noderesource::calculate`]) are refused: no
/// status write is planned for them, and each refusal says why. The ratio
/// annotations ([`plan_node_meta`]) do not read those amounts and are
/// planned for every node that appears once.
pub fn plan_pass_with(
    view: &ClusterView,
    config: &apis::configuration::SloControllerConfig,
    enabled: Enabled,
    settings: &PassSettings,
    last_synced: &HashMap<String, SystemTime>,
    now: SystemTime,
) -> PassPlan {
    let mut plan = PassPlan::default();
    let no_annotations = BTreeMap::new();
    let topology_objects: HashMap<&str, &NodeResourceTopology> = view
        .topologies
        .iter()
        .filter_map(|topology| Some((topology.metadata.name.as_deref()?, topology.as_ref())))
        .collect();
    let topologies: HashMap<&str, &BTreeMap<String, String>> = topology_objects
        .iter()
        .map(|(name, topology)| {
            (
                *name,
                topology
                    .metadata
                    .annotations
                    .as_ref()
                    .unwrap_or(&no_annotations),
            )
        })
        .collect();
    let devices: Option<HashMap<&str, &Device>> = view.devices.as_ref().map(|devices| {
        devices
            .iter()
            .filter_map(|device| Some((device.metadata.name.as_deref()?, device.as_ref())))
            .collect()
    });
    let (nodes, duplicate_nodes) = by_name(&view.nodes, "Node", &mut plan.refused);
    let (metrics, duplicate_metrics) = by_name(&view.node_metrics, "NodeMetric", &mut plan.refused);
    let (slos, duplicate_slos) = by_name(&view.node_slos, "NodeSLO", &mut plan.refused);
    let pods = pods_by_node(view.pods.iter().map(|p| p.as_ref()));
    // Pods the node resource calculation cannot trust: nameless, or the same
    // namespace/name twice (their usage would count once, requests twice).
    let mut pod_problems: HashMap<&str, String> = HashMap::new();
    let mut seen_pods: HashMap<&str, &str> = HashMap::new();
    let mut node_names: Vec<&String> = pods.keys().collect();
    node_names.sort();
    for node in node_names {
        for pod in &pods[node.as_str()] {
            if pod.key.ends_with('/') {
                pod_problems
                    .entry(node.as_str())
                    .or_insert_with(|| "a Pod bound to it has no metadata.name".to_owned());
            } else if let Some(first) = seen_pods.insert(pod.key.as_str(), node.as_str()) {
                let reason = format!("Pod {} appears more than once in the cache", pod.key);
                pod_problems.entry(first).or_insert_with(|| reason.clone());
                pod_problems.entry(node.as_str()).or_insert(reason);
            }
        }
    }

    // In the cache's order, each name once.
    let mut names: Vec<&str> = Vec::with_capacity(nodes.len());
    let mut listed = HashSet::new();
    for node in &view.nodes {
        if let Some(name) = node.metadata.name.as_deref()
            && nodes.contains_key(name)
            && listed.insert(name)
        {
            names.push(name);
        }
    }
    for name in names.iter().copied() {
        let node = nodes[name];
        if duplicate_nodes.contains(name) {
            plan.refused.push(Refusal {
                node: Some(name.to_owned()),
                reason: format!(
                    "Node {name} appears more than once in the cache; nothing is written for it"
                ),
            });
            continue;
        }
        let colocation = node_colocation(config, node);
        if enabled.node_slo {
            if duplicate_slos.contains(name) {
                plan.refused.push(Refusal {
                    node: Some(name.to_owned()),
                    reason: format!(
                        "NodeSLO {name} appears more than once in the cache; it is not updated"
                    ),
                });
            } else {
                match reconcile_node_slo(name, Some(node), slos.get(name).copied(), config) {
                    NodeSloAction::Create(slo) => plan.actions.push(Action::CreateNodeSlo(slo)),
                    NodeSloAction::Update(slo) => plan.actions.push(Action::ReplaceNodeSlo(slo)),
                    NodeSloAction::Delete(_) | NodeSloAction::None => {}
                }
            }
        }
        if duplicate_metrics.contains(name) {
            if enabled.node_metric || enabled.node_resource {
                plan.refused.push(Refusal {
                    node: Some(name.to_owned()),
                    reason: format!(
                        "NodeMetric {name} appears more than once in the cache; neither it nor the node's batch and mid resources are updated"
                    ),
                });
            }
            continue;
        }
        let metric = metrics.get(name).copied();
        if enabled.node_metric {
            match reconcile_node_metric(name, Some(node), metric, Some(&colocation)) {
                NodeMetricAction::Create(spec) => {
                    let mut created = NodeMetric::new(name, spec);
                    created.metadata.owner_references = node_owner(node).map(|o| vec![o]);
                    plan.actions
                        .push(Action::CreateNodeMetric(Box::new(created)));
                }
                NodeMetricAction::UpdateSpec(spec) => {
                    if let Some(existing) = metric {
                        let mut updated = existing.clone();
                        updated.spec = spec;
                        plan.actions
                            .push(Action::ReplaceNodeMetric(Box::new(updated)));
                    }
                }
                NodeMetricAction::Delete(_) | NodeMetricAction::None => {}
            }
        }
        if enabled.node_resource {
            let meta = plan_node_meta(MetaInputs {
                node,
                colocation_enabled: noderesource::colocation_enabled(
                    colocation.cluster_enabled,
                    colocation.strategy.as_ref(),
                ),
                config,
                unavailable_keys: &settings.unavailable_keys,
                topology_annotations: topologies.get(name).copied(),
                plugins: settings.plugins,
            });
            // GPUDeviceResource and RDMADeviceResource: decided before the
            // batch inputs are checked, which they do not read.
            let device_plan = plan_node_devices(node, devices.as_ref(), &colocation, settings);
            record_device_runs(name, &device_plan, &mut plan);
            let (label_changes, label_reason) = device_resources::label_changes(node, &device_plan);
            // Planned from a cache that has not shown this process's last
            // write of the node yet: deciding again would repeat it.
            let awaiting_watch = settings.awaiting_watch.contains(name);
            if !awaiting_watch && (!meta.patch.is_empty() || !label_changes.is_empty()) {
                let mut patch = if meta.patch.is_empty() {
                    serde_json::json!({"metadata": {}})
                } else {
                    meta_patch(&meta.patch)
                };
                let mut reasons = Vec::new();
                if !meta.patch.is_empty() {
                    reasons.push(meta.reason());
                }
                if !label_changes.is_empty() {
                    patch["metadata"]["labels"] = serde_json::json!(label_changes);
                    reasons.push(label_reason);
                }
                plan.actions.push(Action::PatchNodeMeta {
                    node: name.to_owned(),
                    patch,
                    reason: reasons.join("; "),
                });
            }
            let current = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.clone())
                .unwrap_or_default();
            let device_status = device_plan.status();
            // The device resources' own write when the batch inputs are refused.
            let device_only = || {
                if awaiting_watch {
                    None
                } else {
                    device_only_write(name, &device_plan, colocation.strategy.as_ref(), &current)
                }
            };
            if let Some(problem) = pod_problems.get(name) {
                plan.refused.push(Refusal {
                    node: Some(name.to_owned()),
                    reason: format!(
                        "{problem}; the node's batch and mid resources are left as they are"
                    ),
                });
                plan.actions.extend(device_only());
                continue;
            }
            let node_pods = pods.get(name).map(Vec::as_slice).unwrap_or_default();
            let calculated = noderesource::calculate(
                colocation.cluster_enabled,
                colocation.strategy.as_ref(),
                NodeInputs {
                    node,
                    node_metric: metric,
                    pods: node_pods,
                    topology_zones: topology_objects
                        .get(name)
                        .map(|topology| topology.zones.as_slice()),
                },
                now,
            );
            let resources = match calculated {
                Ok(resources) => resources,
                Err(error) => {
                    plan.refused.push(Refusal {
                        node: Some(name.to_owned()),
                        reason: format!(
                            "{error}; the node's batch and mid resources are left as they are"
                        ),
                    });
                    plan.actions.extend(device_only());
                    continue;
                }
            };
            let mut desired = resources.desired_status(node);
            desired.retain(|resource, _| settings.plugins.manages(resource));
            // One status write carries every plugin's resources, as
            // upstream's prepared node does.
            desired.extend(device_status.clone());
            let decision = if desired.is_empty() || awaiting_watch {
                SyncDecision::Skip
            } else {
                noderesource::sync_decision(
                    colocation.strategy.as_ref(),
                    &current,
                    &desired,
                    last_synced.get(name).copied(),
                    now,
                )
            };
            if let SyncDecision::Write(reason) = decision {
                let mut patch = noderesource::status_patch(&desired);
                // Upstream records the origin batch amounts with every status write.
                if settings.plugins.batch_resource
                    && let Some(origin) = resources.origin_annotation(node)
                {
                    patch["metadata"] = serde_json::json!({"annotations": {
                        NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY: origin,
                    }});
                }
                let mut reason = format!("{reason}; {}", resources.reason);
                if !device_status.is_empty() {
                    reason = format!("{reason}; {}", device_plan.reason());
                }
                plan.actions.push(Action::PatchNodeStatus {
                    node: name.to_owned(),
                    patch,
                    reason,
                });
            }
            // BatchResource's NUMA-level part (upstream's PreUpdate): the
            // zones of the node's NodeResourceTopology, decided on their own.
            if settings.plugins.batch_resource {
                match (&resources.zones, topology_objects.get(name)) {
                    (ZoneBatch::Zones(amounts), Some(topology)) => {
                        let desired = numa_batch::zone_quantities(
                            amounts,
                            numa_batch::normalization_ratio(&meta),
                        );
                        if let Some(write) = numa_batch::zone_update(
                            colocation.strategy.as_ref(),
                            &topology.zones,
                            &desired,
                            settings.topology_last_synced.get(name).copied(),
                            now,
                        ) {
                            plan.actions.push(Action::PatchTopologyZones {
                                node: name.to_owned(),
                                patch: numa_batch::zones_patch(
                                    &write,
                                    topology.metadata.resource_version.as_deref(),
                                ),
                                reason: write.reason,
                            });
                        }
                    }
                    (ZoneBatch::Refused(error), _) => plan.refused.push(Refusal {
                        node: Some(name.to_owned()),
                        reason: format!(
                            "{error}; the node's NUMA-zone batch resources are left as they are"
                        ),
                    }),
                    _ => {}
                }
            }
            plan.computed.push(Computed {
                node: name.to_owned(),
                resources,
            });
        }
    }
    // Objects of nodes that are gone.
    let node_names: HashSet<&str> = names.into_iter().collect();
    if enabled.node_slo {
        let mut gone: Vec<&str> = slos
            .keys()
            .copied()
            .filter(|name| !node_names.contains(name))
            .collect();
        gone.sort_unstable();
        for name in gone {
            plan.actions.push(Action::DeleteNodeSlo(name.to_owned()));
        }
    }
    if enabled.node_metric {
        let mut gone: Vec<&str> = metrics
            .keys()
            .copied()
            .filter(|name| !node_names.contains(name))
            .collect();
        gone.sort_unstable();
        for name in gone {
            plan.actions.push(Action::DeleteNodeMetric(name.to_owned()));
        }
    }
    if enabled.quota_profile {
        plan_profiles(view, &mut plan.actions);
    }
    plan
}

/// Runs the selected device plugins for one node (nothing until the Device
/// cache has synced).
fn plan_node_devices(
    node: &Node,
    devices: Option<&HashMap<&str, &Device>>,
    colocation: &crate::slo_controller::config::NodeColocation,
    settings: &PassSettings,
) -> DevicePlan {
    let plugins = settings.plugins;
    if !plugins.gpu_device_resource && !plugins.rdma_device_resource {
        return DevicePlan::default();
    }
    let Some(devices) = devices else {
        return DevicePlan::skipped(device_resources::SKIPPED_CACHE_NOT_SYNCED);
    };
    let name = node.metadata.name.as_deref().unwrap_or_default();
    device_resources::plan_devices(
        node,
        devices.get(name).copied(),
        plugins,
        noderesource::colocation_enabled(colocation.cluster_enabled, colocation.strategy.as_ref()),
        settings.sync_gpu_shared_resource,
    )
}

/// Counts each device plugin run and refuses the node's device resources
/// of a plugin that failed (they are left as they are).
fn record_device_runs(node: &str, device_plan: &DevicePlan, plan: &mut PassPlan) {
    for run in &device_plan.runs {
        plan.plugin_runs.push((run.plugin, run.result.is_ok()));
        if let Err(error) = &run.result {
            plan.refused.push(Refusal {
                node: Some(node.to_owned()),
                reason: format!(
                    "{}: {error}; the node's {} resources are left as they are",
                    run.plugin, run.plugin
                ),
            });
        }
    }
}

/// The device resources' own status write for a node whose batch inputs
/// were refused: only when a device plugin's NeedSync says so.
fn device_only_write(
    node: &str,
    device_plan: &DevicePlan,
    strategy: Option<&apis::configuration::ColocationStrategy>,
    current: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<Action> {
    let status = device_plan.status();
    if status.is_empty() {
        return None;
    }
    let threshold = noderesource::resource_diff_threshold(strategy);
    let reason = device_resources::need_sync(device_plan, current, threshold)?;
    Some(Action::PatchNodeStatus {
        node: node.to_owned(),
        patch: noderesource::status_patch(&status),
        reason: format!("{reason}; {}", device_plan.reason()),
    })
}

fn plan_profiles(view: &ClusterView, actions: &mut Vec<Action>) {
    let nodes: Vec<&Node> = view.nodes.iter().map(|n| n.as_ref()).collect();
    for profile in &view.profiles {
        let namespace = profile.metadata.namespace.clone().unwrap_or_default();
        let existing = view.quotas.iter().find(|q| {
            q.metadata.namespace.as_deref() == Some(namespace.as_str())
                && q.metadata.name.as_deref() == Some(profile.spec.quota_name.as_str())
        });
        match reconcile_profile(profile, &nodes, existing.map(|q| q.as_ref())) {
            Ok(decided) => {
                if let Some(tree_id) = decided.label_profile_tree_id {
                    actions.push(Action::LabelProfile {
                        namespace: namespace.clone(),
                        name: profile.name_any(),
                        labels: BTreeMap::from([(
                            apis::extension::LABEL_QUOTA_TREE_ID.to_owned(),
                            tree_id,
                        )]),
                    });
                }
                if let Some(quota) = decided.create {
                    actions.push(Action::CreateQuota(Box::new(quota)));
                }
                if let Some(quota) = decided.update {
                    actions.push(Action::ReplaceQuota(Box::new(quota)));
                }
            }
            Err(err) => tracing::warn!(error = %err, "skipping ElasticQuotaProfile"),
        }
    }
}

/// The owner reference that lets the garbage collector remove a node's
/// NodeMetric with the node.
fn node_owner(node: &Node) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone()?,
        uid: node.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: None,
    })
}

/// Drops what the manager does not read of a NodeResourceTopology before it
/// is cached: every annotation but `cpu-basic-info` (koordlet's CPU topology
/// and allocation annotations are most of the object) and the managed fields.
/// The zones and the resourceVersion (which guards the zone writes) stay.
pub fn trim_topology(topology: &mut NodeResourceTopology) {
    if let Some(annotations) = topology.metadata.annotations.as_mut() {
        annotations.retain(|key, _| key == apis::extension::ANNOTATION_CPU_BASIC_INFO);
    }
    topology.metadata.managed_fields = None;
}

/// The NodeResourceTopology reflector: full objects, trimmed before caching.
fn spawn_topology_reflector(
    api: Api<NodeResourceTopology>,
    notify: Arc<Notify>,
) -> Store<NodeResourceTopology> {
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).modify(trim_topology),
    )
    .default_backoff();
    tokio::spawn(async move {
        let mut stream = Box::pin(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => notify.notify_one(),
                Err(err) => {
                    tracing::warn!(resource = "noderesourcetopologies", error = %err, "watch failed; retrying")
                }
            }
        }
    });
    reader
}

/// The caches of one controller process.
pub struct Caches {
    pub nodes: Store<Node>,
    pub node_metrics: Store<NodeMetric>,
    pub node_slos: Store<NodeSLO>,
    pub pods: Store<Pod>,
    pub config_maps: Store<ConfigMap>,
    pub profiles: Store<ElasticQuotaProfile>,
    pub quotas: Store<ElasticQuota>,
    /// Zones and the `cpu-basic-info` annotation only ([`trim_topology`]);
    /// not waited for (the CRD may be missing: the CPU normalization plugin
    /// then finds no topology and leaves the ratio, and no zone is written).
    pub topologies: Store<NodeResourceTopology>,
    /// Devices: not waited for (the CRD may be missing), but the device
    /// plugins act only once [`Self::devices_synced`] is set.
    pub devices: Store<Device>,
    /// Set once the Device cache has listed every Device.
    pub devices_synced: Arc<std::sync::atomic::AtomicBool>,
}

impl Caches {
    pub fn start(client: &kube::Client, args: &ControllerArgs, notify: &Arc<Notify>) -> Self {
        let all = watcher::Config::default();
        let config_map =
            watcher::Config::default().fields(&format!("metadata.name={}", args.slo_config_name));
        let devices: Store<Device> = spawn_reflector(
            Api::all(client.clone()),
            all.clone(),
            notify.clone(),
            "devices",
        );
        let devices_synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let (store, synced, notify) = (devices.clone(), devices_synced.clone(), notify.clone());
            tokio::spawn(async move {
                if store.wait_until_ready().await.is_ok() {
                    synced.store(true, std::sync::atomic::Ordering::Release);
                    tracing::info!("Device cache synced; the device resource plugins run");
                    notify.notify_one();
                }
            });
        }
        Caches {
            nodes: spawn_reflector(
                Api::all(client.clone()),
                all.clone(),
                notify.clone(),
                "nodes",
            ),
            node_metrics: spawn_reflector(
                Api::all(client.clone()),
                all.clone(),
                notify.clone(),
                "nodemetrics",
            ),
            node_slos: spawn_reflector(
                Api::all(client.clone()),
                all.clone(),
                notify.clone(),
                "nodeslos",
            ),
            pods: spawn_reflector(
                Api::all(client.clone()),
                all.clone(),
                notify.clone(),
                "pods",
            ),
            config_maps: spawn_reflector(
                Api::namespaced(client.clone(), &args.config_namespace),
                config_map,
                notify.clone(),
                "configmaps",
            ),
            profiles: spawn_reflector(
                Api::all(client.clone()),
                all.clone(),
                notify.clone(),
                "elasticquotaprofiles",
            ),
            quotas: spawn_reflector(
                Api::all(client.clone()),
                all,
                notify.clone(),
                "elasticquotas",
            ),
            topologies: spawn_topology_reflector(Api::all(client.clone()), notify.clone()),
            devices,
            devices_synced,
        }
    }

    /// Waits for the caches the SLO controllers need (the quota CRDs may be
    /// missing from a cluster, so those are not waited for).
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.nodes.wait_until_ready().await?;
        self.node_metrics.wait_until_ready().await?;
        self.node_slos.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.config_maps.wait_until_ready().await?;
        Ok(())
    }

    pub fn view(&self) -> ClusterView {
        ClusterView {
            nodes: self.nodes.state(),
            node_metrics: self.node_metrics.state(),
            node_slos: self.node_slos.state(),
            pods: self.pods.state(),
            profiles: self.profiles.state(),
            quotas: self.quotas.state(),
            topologies: self.topologies.state(),
            devices: self
                .devices_synced
                .load(std::sync::atomic::Ordering::Acquire)
                .then(|| self.devices.state()),
        }
    }
}

/// Applies passes until `stop` resolves.
pub struct Reconciler {
    client: kube::Client,
    args: ControllerArgs,
    enabled: Enabled,
    metrics: ControllerMetrics,
    recorder: Recorder,
    plugins: NodeResourcePlugins,
    config: ConfigState,
    rejected_version: Option<String>,
    /// Whether the ConfigMap existed at the last pass.
    config_map_present: Option<bool>,
    paused: Vec<Paused>,
    last_synced: HashMap<String, SystemTime>,
    /// When each node's NodeResourceTopology zones were last written.
    topology_last_synced: HashMap<String, SystemTime>,
    /// Node writes the watch cache has not shown yet.
    own_writes: crate::own_writes::OwnWrites,
    known_nodes: HashSet<String>,
    /// Nodes refused in the last pass, with the reason.
    refused_nodes: HashMap<String, String>,
    /// Refusals of objects without a name in the last pass (logged once).
    refused_unnamed: HashSet<String>,
}

impl Reconciler {
    pub fn new(client: kube::Client, args: ControllerArgs, metrics: ControllerMetrics) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "koord-manager".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        if let Some(entries) = args.noderesource_plugins.as_deref() {
            for unknown in NodeResourcePlugins::unknown_entries(entries) {
                tracing::warn!(plugin = %unknown, "--noderesource-plugins names no known plugin; ignored");
            }
        }
        Reconciler {
            enabled: Enabled::from_args(&args),
            plugins: args.node_resource_plugins(),
            client,
            args,
            metrics,
            recorder,
            config: ConfigState::default(),
            rejected_version: None,
            config_map_present: None,
            paused: Vec::new(),
            last_synced: HashMap::new(),
            topology_last_synced: HashMap::new(),
            own_writes: crate::own_writes::OwnWrites::default(),
            known_nodes: HashSet::new(),
            refused_nodes: HashMap::new(),
            refused_unnamed: HashSet::new(),
        }
    }

    /// Takes the ConfigMap from the cache; a version with refused keys
    /// raises a Warning Event once.
    async fn refresh_config(&mut self, caches: &Caches) {
        let config_map = caches
            .config_maps
            .state()
            .into_iter()
            .find(|cm| cm.metadata.name.as_deref() == Some(self.args.slo_config_name.as_str()));
        let no_data = BTreeMap::new();
        let update = self.config.offer(
            config_map
                .as_ref()
                .map(|cm| cm.data.as_ref().unwrap_or(&no_data)),
        );
        let name = self.args.slo_config_name.as_str();
        if update.changed {
            tracing::info!(configmap = %name, "slo-controller-config applied");
        }
        for section in &update.became_available {
            tracing::info!(configmap = %name, section = section.name(), "slo-controller-config available");
        }
        if update.kept_after_deletion && self.config_map_present != Some(false) {
            tracing::warn!(
                configmap = %name,
                "slo-controller-config not found; keeping the configuration in force until restart"
            );
        }
        self.config_map_present = Some(config_map.is_some());
        if update.refused.is_empty() {
            self.rejected_version = None;
            return;
        }
        let Some(config_map) = config_map else {
            return;
        };
        let version = config_map.resource_version();
        if self.rejected_version == version {
            return;
        }
        self.rejected_version = version;
        self.metrics.config_rejected(name);
        let ConfigOutcome::Rejected(mut message) = update.outcome() else {
            return;
        };
        if !self.config.is_available(ConfigSection::Colocation) {
            message.push_str(
                "; no valid colocation-config since start: the nodemetric and noderesource \
                 controllers write nothing until it is fixed",
            );
        } else {
            message.push_str(
                "; the refused keys keep their last valid value (their defaults if they never had one)",
            );
        }
        tracing::warn!(
            configmap = %name,
            error = %message,
            "invalid slo-controller-config"
        );
        let event = Event {
            type_: EventType::Warning,
            reason: "InvalidConfig".into(),
            note: Some(truncate(&message, 1000)),
            action: "ValidateConfig".into(),
            secondary: None,
        };
        if let Err(err) = self
            .recorder
            .publish(&event, &config_map.object_ref(&()))
            .await
        {
            tracing::warn!(error = %err, "cannot record the invalid-config event");
        }
    }

    /// Counts and logs the controllers held back by an unavailable config:
    /// a `failed`/`configUnavailable` reconcile count every pass, a log line
    /// when the set changes.
    fn report_paused(&mut self, paused: Vec<Paused>) {
        for held in &paused {
            match held.controller {
                "nodeslo" => self.metrics.node_slo(false, CONFIG_UNAVAILABLE),
                "nodemetric" => self.metrics.node_metric(false, CONFIG_UNAVAILABLE),
                "noderesource" => self.metrics.node_resource(false, CONFIG_UNAVAILABLE),
                _ => {}
            }
        }
        if paused == self.paused {
            return;
        }
        for held in paused.iter().filter(|held| !self.paused.contains(held)) {
            tracing::warn!(
                controller = held.controller,
                reason = %held.reason,
                "controller paused: it writes nothing until the config is available"
            );
        }
        for resumed in self
            .paused
            .iter()
            .filter(|old| !paused.iter().any(|new| new.controller == old.controller))
        {
            tracing::info!(controller = resumed.controller, "controller resumed");
        }
        self.paused = paused;
    }

    /// The controllers held back in the last pass, and why.
    pub fn paused(&self) -> &[Paused] {
        &self.paused
    }

    /// One full pass.
    pub async fn pass(&mut self, caches: &Caches) {
        self.refresh_config(caches).await;
        let (enabled, paused) = gate(self.enabled, &self.config);
        self.report_paused(paused);
        let view = caches.view();
        let now = SystemTime::now();
        // A topology gone (or recreated by koordlet) starts over, as
        // upstream's NRT delete handler forgets its sync time.
        let topologies: HashSet<&str> = view
            .topologies
            .iter()
            .filter_map(|topology| topology.metadata.name.as_deref())
            .collect();
        self.topology_last_synced
            .retain(|node, _| topologies.contains(node.as_str()));
        let node_versions: HashMap<&str, Option<&str>> = view
            .nodes
            .iter()
            .filter_map(|node| {
                Some((
                    node.metadata.name.as_deref()?,
                    node.metadata.resource_version.as_deref(),
                ))
            })
            .collect();
        let awaiting_watch = self.own_writes.still_awaited(
            |name| node_versions.get(name).copied().flatten(),
            std::time::Instant::now(),
        );
        if !awaiting_watch.is_empty() {
            tracing::debug!(
                nodes = awaiting_watch.len(),
                "node writes wait for the watch to show this process's last write"
            );
        }
        let settings = PassSettings {
            plugins: self.plugins,
            unavailable_keys: self.config.unavailable_keys(),
            topology_last_synced: std::mem::take(&mut self.topology_last_synced),
            sync_gpu_shared_resource: self.args.sync_gpu_shared_resource,
            awaiting_watch,
        };
        let PassPlan {
            actions,
            computed,
            refused,
            plugin_runs,
        } = plan_pass_with(
            &view,
            self.config.current(),
            enabled,
            &settings,
            &self.last_synced,
            now,
        );
        self.topology_last_synced = settings.topology_last_synced;
        for (plugin, succeeded) in plugin_runs {
            self.metrics
                .node_resource_plugin(plugin, succeeded, "ResourceCalculate");
        }
        self.report_refused(&view, refused).await;
        // Without a pass of the node resource controller nothing is known
        // about the nodes: keep their series and sync times as they are.
        if enabled.node_resource {
            self.record_computed(&computed);
        }
        if actions.is_empty() {
            return;
        }
        tracing::debug!(writes = actions.len(), "applying controller pass");
        let lanes = write_lanes(actions);
        let results: Vec<Option<Synced>> =
            futures::future::join_all(lanes.into_iter().map(|lane| {
                futures::stream::iter(lane)
                    .map(|action| apply_action_synced(&self.client, &self.metrics, action))
                    .buffer_unordered(WRITE_CONCURRENCY)
                    .collect::<Vec<_>>()
            }))
            .await
            .into_iter()
            .flatten()
            .collect();
        let written_at = std::time::Instant::now();
        for synced in results.into_iter().flatten() {
            match synced {
                Synced::NodeStatus { node, at, version } => {
                    let planned_from = node_versions.get(node.as_str()).copied().flatten();
                    self.own_writes
                        .record(&node, planned_from, version.as_deref(), written_at);
                    self.last_synced.insert(node, at);
                }
                Synced::NodeMeta { node, version } => {
                    let planned_from = node_versions.get(node.as_str()).copied().flatten();
                    self.own_writes
                        .record(&node, planned_from, version.as_deref(), written_at);
                }
                Synced::TopologyZones { node, at } => {
                    self.topology_last_synced.insert(node, at);
                }
            }
        }
    }

    /// Counts every refusal of a pass (`failed`/`invalidInput`); logs each
    /// and records a Warning Event on its Node when the reason is new, and
    /// logs when a node's refusal clears.
    async fn report_refused(&mut self, view: &ClusterView, refused: Vec<Refusal>) {
        let mut current: HashMap<String, String> = HashMap::new();
        let mut unnamed = HashSet::new();
        for refusal in refused {
            self.metrics.node_resource(false, INVALID_INPUT);
            let Some(node) = refusal.node else {
                if !self.refused_unnamed.contains(&refusal.reason) {
                    tracing::warn!(reason = %refusal.reason, "controller input refused");
                }
                unnamed.insert(refusal.reason);
                continue;
            };
            let known = self.refused_nodes.get(&node) == Some(&refusal.reason)
                || current.get(&node) == Some(&refusal.reason);
            if !known {
                tracing::warn!(node = %node, reason = %refusal.reason, "node input refused; its status is left as it is");
                let object = view
                    .nodes
                    .iter()
                    .find(|n| n.metadata.name.as_deref() == Some(node.as_str()));
                if let Some(object) = object {
                    let event = Event {
                        type_: EventType::Warning,
                        reason: "InvalidInput".into(),
                        note: Some(truncate(&refusal.reason, 1000)),
                        action: "CalculateExtendedResources".into(),
                        secondary: None,
                    };
                    if let Err(err) = self.recorder.publish(&event, &object.object_ref(&())).await {
                        tracing::warn!(node = %node, error = %err, "cannot record the invalid-input event");
                    }
                }
            }
            current.entry(node).or_insert(refusal.reason);
        }
        for node in self.refused_nodes.keys() {
            if !current.contains_key(node) {
                tracing::info!(node = %node, "node input accepted again");
            }
        }
        self.refused_nodes = current;
        self.refused_unnamed = unnamed;
    }

    /// Updates the allocatable gauges and forgets nodes that are gone (a
    /// node whose input was refused keeps its series and sync time).
    fn record_computed(&mut self, computed: &[Computed]) {
        let mut current_nodes: HashSet<String> = computed.iter().map(|c| c.node.clone()).collect();
        current_nodes.extend(self.refused_nodes.keys().cloned());
        for gone in self.known_nodes.difference(&current_nodes) {
            self.metrics.forget_node(gone, &MANAGED_RESOURCES);
            self.last_synced.remove(gone);
        }
        for item in computed {
            let r = &item.resources;
            self.metrics.allocatable(
                &item.node,
                BATCH_CPU,
                "integer",
                r.batch.milli_cpu as f64 / 1000.0,
            );
            self.metrics.allocatable(
                &item.node,
                BATCH_MEMORY,
                "byte",
                r.batch.memory_bytes as f64,
            );
            self.metrics.allocatable(
                &item.node,
                MID_CPU,
                "integer",
                r.mid.milli_cpu as f64 / 1000.0,
            );
            self.metrics
                .allocatable(&item.node, MID_MEMORY, "byte", r.mid.memory_bytes as f64);
        }
        self.known_nodes = current_nodes;
    }
}

/// The lane of an action: actions of one lane share the client-side rate limit of one API
/// resource, lanes run side by side. Within the Node lane, status writes (the batch and mid
/// allocatable the scheduler waits for) go before the annotation patches: both share the Node
/// resource's limit, and taken node by node, the last Node's allocatable waited for every
/// patch (a pass of 1,000 fresh nodes made 2,000 writes at 30/s: 68 s instead of 34 s).
fn lane_of(action: &Action) -> (u8, u8) {
    match action {
        Action::PatchNodeStatus { .. } => (0, 0),
        Action::PatchNodeMeta { .. } => (0, 1),
        Action::PatchTopologyZones { .. } => (1, 0),
        Action::CreateNodeSlo(_) | Action::ReplaceNodeSlo(_) | Action::DeleteNodeSlo(_) => (2, 0),
        Action::CreateNodeMetric(_)
        | Action::ReplaceNodeMetric(_)
        | Action::DeleteNodeMetric(_) => (3, 0),
        Action::LabelProfile { .. } => (4, 0),
        Action::CreateQuota(_) | Action::ReplaceQuota(_) => (5, 0),
    }
}

/// A pass's actions split into lanes (see [`lane_of`]), each in the order it is applied:
/// the plan's order, except that a Node's status writes come before the Node patches.
pub fn write_lanes(actions: Vec<Action>) -> Vec<Vec<Action>> {
    let mut keyed: Vec<((u8, u8), Action)> =
        actions.into_iter().map(|a| (lane_of(&a), a)).collect();
    // Stable: the plan's order within one kind is kept.
    keyed.sort_by_key(|(key, _)| *key);
    let mut lanes: Vec<Vec<Action>> = Vec::new();
    let mut current = None;
    for ((lane, _), action) in keyed {
        if current != Some(lane) {
            lanes.push(Vec::new());
            current = Some(lane);
        }
        lanes
            .last_mut()
            .expect("a lane was just pushed")
            .push(action);
    }
    lanes
}

fn truncate(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((index, _)) => format!("{}…", &text[..index]),
        None => text.to_owned(),
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// A successful write whose time the next passes need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Synced {
    /// `version`: the Node's resourceVersion the API server answered with.
    NodeStatus {
        node: String,
        at: SystemTime,
        version: Option<String>,
    },
    NodeMeta {
        node: String,
        version: Option<String>,
    },
    TopologyZones {
        node: String,
        at: SystemTime,
    },
}

/// Applies one action; a successful node status write returns its node and time.
pub async fn apply_action(
    client: &kube::Client,
    metrics: &ControllerMetrics,
    action: Action,
) -> Option<(String, SystemTime)> {
    match apply_action_synced(client, metrics, action).await? {
        Synced::NodeStatus { node, at, .. } => Some((node, at)),
        Synced::NodeMeta { .. } | Synced::TopologyZones { .. } => None,
    }
}

/// Applies one action; a successful node status or topology zone write
/// returns what was synced and when.
pub async fn apply_action_synced(
    client: &kube::Client,
    metrics: &ControllerMetrics,
    action: Action,
) -> Option<Synced> {
    let post = PostParams::default();
    match action {
        Action::CreateNodeSlo(slo) => {
            let result = Api::<NodeSLO>::all(client.clone())
                .create(&post, &slo)
                .await;
            record(
                metrics.clone(),
                Written::Slo,
                "createNodeSLO",
                &slo.name_any(),
                result.map(|_| ()),
            );
        }
        Action::ReplaceNodeSlo(slo) => {
            let name = slo.name_any();
            let result = Api::<NodeSLO>::all(client.clone())
                .replace(&name, &post, &slo)
                .await;
            record(
                metrics.clone(),
                Written::Slo,
                "updateNodeSLO",
                &name,
                result.map(|_| ()),
            );
        }
        Action::DeleteNodeSlo(name) => {
            let result = Api::<NodeSLO>::all(client.clone())
                .delete(&name, &DeleteParams::default())
                .await;
            record(
                metrics.clone(),
                Written::Slo,
                "deleteNodeSLO",
                &name,
                result.map(|_| ()),
            );
        }
        Action::CreateNodeMetric(metric) => {
            let result = Api::<NodeMetric>::all(client.clone())
                .create(&post, &metric)
                .await;
            record(
                metrics.clone(),
                Written::Metric,
                "createNodeMetric",
                &metric.name_any(),
                result.map(|_| ()),
            );
        }
        Action::ReplaceNodeMetric(metric) => {
            let name = metric.name_any();
            let result = Api::<NodeMetric>::all(client.clone())
                .replace(&name, &post, &metric)
                .await;
            record(
                metrics.clone(),
                Written::Metric,
                "updateNodeMetric",
                &name,
                result.map(|_| ()),
            );
        }
        Action::DeleteNodeMetric(name) => {
            let result = Api::<NodeMetric>::all(client.clone())
                .delete(&name, &DeleteParams::default())
                .await;
            record(
                metrics.clone(),
                Written::Metric,
                "deleteNodeMetric",
                &name,
                result.map(|_| ()),
            );
        }
        Action::PatchNodeStatus {
            node,
            patch,
            reason,
        } => {
            tracing::info!(node = %node, %reason, "updating node extended resources");
            let result = Api::<Node>::all(client.clone())
                .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            let version = result
                .as_ref()
                .ok()
                .map(|written| written.metadata.resource_version.clone());
            record(
                metrics.clone(),
                Written::Resource,
                "updateNodeStatus",
                &node,
                result.map(|_| ()),
            );
            if let Some(version) = version {
                return Some(Synced::NodeStatus {
                    node,
                    at: SystemTime::now(),
                    version,
                });
            }
        }
        Action::PatchTopologyZones {
            node,
            patch,
            reason,
        } => {
            tracing::info!(node = %node, %reason, "updating NodeResourceTopology batch resources");
            let result = Api::<NodeResourceTopology>::all(client.clone())
                .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            // A conflict means koordlet (or another writer) changed the
            // object since it was cached: the watch brings the new version
            // and the next pass decides again.
            let written = result.is_ok();
            record(
                metrics.clone(),
                Written::Resource,
                "updateNodeResourceTopology",
                &node,
                result.map(|_| ()),
            );
            if written {
                return Some(Synced::TopologyZones {
                    node,
                    at: SystemTime::now(),
                });
            }
        }
        Action::PatchNodeMeta {
            node,
            patch,
            reason,
        } => {
            tracing::info!(node = %node, %reason, "updating node ratio annotations");
            let result = Api::<Node>::all(client.clone())
                .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            let version = result
                .as_ref()
                .ok()
                .map(|written| written.metadata.resource_version.clone());
            record(
                metrics.clone(),
                Written::Resource,
                "patchNodeMeta",
                &node,
                result.map(|_| ()),
            );
            if let Some(version) = version {
                return Some(Synced::NodeMeta { node, version });
            }
        }
        Action::LabelProfile {
            namespace,
            name,
            labels,
        } => {
            let patch = serde_json::json!({"metadata": {"labels": labels}});
            let result = Api::<ElasticQuotaProfile>::namespaced(client.clone(), &namespace)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            if let Err(err) = result {
                tracing::warn!(profile = %name, error = %err, "cannot label ElasticQuotaProfile");
            }
        }
        Action::CreateQuota(quota) | Action::ReplaceQuota(quota) => {
            let namespace = quota.metadata.namespace.clone().unwrap_or_default();
            let name = quota.name_any();
            let api = Api::<ElasticQuota>::namespaced(client.clone(), &namespace);
            let result = if quota.metadata.resource_version.is_some() {
                api.replace(&name, &post, &quota).await
            } else {
                api.create(&post, &quota).await
            };
            if let Err(err) = result {
                tracing::warn!(quota = %name, namespace = %namespace, error = %err, "cannot write ElasticQuota");
            }
        }
    }
    None
}

#[derive(Clone, Copy)]
enum Written {
    Slo,
    Metric,
    Resource,
}

fn record(
    metrics: ControllerMetrics,
    written: Written,
    operation: &str,
    name: &str,
    result: Result<(), kube::Error>,
) {
    // A lost race with the cache (already created, already gone) is not a failure.
    let ok = match &result {
        Ok(()) => true,
        Err(err) => is_status(err, 409) || (operation.starts_with("delete") && is_status(err, 404)),
    };
    if let Err(err) = &result
        && !ok
    {
        tracing::warn!(object = %name, %operation, error = %err, "controller write failed");
    }
    match written {
        Written::Slo => metrics.node_slo(ok, operation),
        Written::Metric => metrics.node_metric(ok, operation),
        Written::Resource => metrics.node_resource(ok, operation),
    }
}

/// Runs the controllers until shutdown: with leader election, only while this
/// replica holds the Lease; losing it stops the process (as controller-runtime
/// does) so a fresh start rebuilds the caches.
///
/// `readiness` fails until this replica is either a standby (it still serves
/// webhooks) or the leader with synced caches and a first pass done.
pub async fn run_controllers(
    client: kube::Client,
    args: ControllerArgs,
    colocation_profile: Option<crate::colocation_profile::ColocationProfileArgs>,
    metrics: ControllerMetrics,
    readiness: koord_common::StatusCheck,
    shutdown: koord_common::Shutdown,
) {
    use koord_common::ShutdownReason;
    use koord_common::leader::{LeaderElector, LeaseTiming, default_identity};

    metrics.set_leader(false);
    if args.enable_leader_election {
        let elector = Arc::new(LeaderElector::new(
            client.clone(),
            &args.leader_election_namespace,
            DEFAULT_LEASE_NAME,
            default_identity(),
            LeaseTiming::default(),
        ));
        let timing = elector.timing();
        tracing::info!(
            identity = elector.identity(),
            lease = %format!("{}/{DEFAULT_LEASE_NAME}", args.leader_election_namespace),
            "waiting for leadership"
        );
        loop {
            match elector.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => readiness.set_passing(),
                Err(err) => {
                    readiness.set_failing(format!("leader election: {err}"));
                    tracing::warn!(error = %err, "leader election attempt failed");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(timing.retry_period) => {}
                _ = shutdown.wait() => return,
            }
        }
        tracing::info!(
            identity = elector.identity(),
            "became the leader; starting controllers"
        );
        metrics.set_leader(true);
        readiness.set_failing("leader: waiting for caches to sync");
        let renewer = Arc::clone(&elector);
        let (renew_shutdown, renew_metrics) = (shutdown.clone(), metrics.clone());
        tokio::spawn(async move {
            let mut last_renewed = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(timing.retry_period) => {}
                    _ = renew_shutdown.wait() => return,
                }
                match renewer.try_acquire_or_renew().await {
                    Ok(true) => last_renewed = tokio::time::Instant::now(),
                    Ok(false) => {}
                    Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
                }
                if last_renewed.elapsed() > timing.renew_deadline {
                    renew_metrics.set_leader(false);
                    tracing::error!("leader election lost");
                    renew_shutdown.trigger(ShutdownReason::Failed("leader election lost".into()));
                    return;
                }
            }
        });
    } else {
        metrics.set_leader(true);
        readiness.set_failing("waiting for caches to sync");
    }

    let notify = Arc::new(Notify::new());
    let caches = Caches::start(&client, &args, &notify);
    tokio::select! {
        ready = caches.wait_until_ready() => {
            if ready.is_err() {
                readiness.set_failing("a cache stopped before syncing");
                return;
            }
        }
        _ = shutdown.wait() => return,
    }
    tracing::info!("caches synced; controllers running");
    if let Some(colocation_args) = colocation_profile {
        tokio::spawn(crate::colocation_profile::run(
            client.clone(),
            colocation_args,
            caches.pods.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
    }
    let mut reconciler = Reconciler::new(client, args.clone(), metrics);
    loop {
        let started = tokio::time::Instant::now();
        reconciler.pass(&caches).await;
        readiness.set_passing();
        tokio::select! {
            _ = notify.notified() => {
                tokio::select! {
                    _ = tokio::time::sleep_until(started + MIN_PASS_INTERVAL) => {}
                    _ = shutdown.wait() => return,
                }
            }
            _ = tokio::time::sleep(args.full_pass_period()) => {}
            _ = shutdown.wait() => return,
        }
    }
}

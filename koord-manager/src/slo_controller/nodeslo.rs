//! NodeSLO decisions (upstream `slo-controller/nodeslo`): one NodeSLO per
//! Node, named after it, whose spec is the config's defaults ← cluster
//! strategy ← the first node strategy matching the node's labels, per section.

use std::collections::BTreeMap;

use apis::configuration::{
    CPUBurstCfg, CPULatencyProtectionCfg, HostApplicationCfg, ResourceQOSCfg, ResourceThresholdCfg,
    SloControllerConfig, SystemCfg,
};
use apis::extension::get_node_total_bandwidth;
use apis::slo::v1alpha1::{
    CPU_LATENCY_PROTECTION_EXTENSION_KEY, ExtensionsMap, NodeSLO, NodeSLOSpec,
};
use k8s_openapi::api::core::v1::Node;

/// The NodeSLO spec of `node` under `config`. Extensions already on the
/// NodeSLO (`previous`) are kept, except `cpuLatencyProtection` (ours),
/// which [`latency_protection_extension`] renders from the config's
/// `cpu-latency-protection-config` key when that key is set.
pub fn node_slo_spec(
    config: &SloControllerConfig,
    node: &Node,
    previous: Option<&NodeSLOSpec>,
) -> NodeSLOSpec {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let mut system = config.system.as_ref().map_or_else(
        || SystemCfg::default().strategy_for_node(labels),
        |cfg| cfg.strategy_for_node(labels),
    );
    // A node's own bandwidth annotation wins over the config.
    if let Ok(Some(bandwidth)) = get_node_total_bandwidth(annotations) {
        system.total_network_bandwidth = Some(bandwidth);
    }
    let host_applications = config
        .host_application
        .as_ref()
        .map(|cfg| cfg.applications_for_node(labels).to_vec())
        .unwrap_or_else(|| HostApplicationCfg::default().applications);
    NodeSLOSpec {
        resource_used_threshold_with_be: Some(match &config.resource_threshold {
            Some(cfg) => cfg.strategy_for_node(labels),
            None => ResourceThresholdCfg::default().strategy_for_node(labels),
        }),
        resource_qos_strategy: Some(match &config.resource_qos {
            Some(cfg) => cfg.strategy_for_node(labels),
            None => ResourceQOSCfg::default().strategy_for_node(labels),
        }),
        cpu_burst_strategy: Some(match &config.cpu_burst {
            Some(cfg) => cfg.strategy_for_node(labels),
            None => CPUBurstCfg::default().strategy_for_node(labels),
        }),
        system_strategy: Some(system),
        extensions: Some(latency_protection_extension(
            config,
            labels,
            previous
                .and_then(|spec| spec.extensions.clone())
                .unwrap_or_default(),
        )),
        host_applications,
    }
}

/// `extensions` with `cpuLatencyProtection` set from the config's
/// `cpu-latency-protection-config` key: the node's strategy when one applies,
/// removed when none does. Without the key, or with an invalid one (refused
/// and reported when the config is read, see `config::ConfigState`), the
/// extension is left as it is, as upstream keeps extensions it has no
/// plugin for.
pub fn latency_protection_extension(
    config: &SloControllerConfig,
    labels: &BTreeMap<String, String>,
    mut extensions: ExtensionsMap,
) -> ExtensionsMap {
    let Ok(Some(cfg)) = CPULatencyProtectionCfg::from_other_keys(&config.other_keys) else {
        return extensions;
    };
    let rendered = cfg
        .strategy_for_node(labels)
        .and_then(|strategy| serde_json::to_value(strategy).ok());
    match rendered {
        Some(value) => {
            extensions
                .object
                .insert(CPU_LATENCY_PROTECTION_EXTENSION_KEY.to_owned(), value);
        }
        None => {
            extensions
                .object
                .remove(CPU_LATENCY_PROTECTION_EXTENSION_KEY);
        }
    }
    extensions
}

/// What to do about one node's NodeSLO.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeSloAction {
    None,
    Create(Box<NodeSLO>),
    /// Replace the existing object (its resourceVersion is kept for optimistic locking).
    Update(Box<NodeSLO>),
    /// The node is gone: delete the NodeSLO of this name.
    Delete(String),
}

/// Compares the desired NodeSLO of `name` with what exists.
pub fn reconcile_node_slo(
    name: &str,
    node: Option<&Node>,
    existing: Option<&NodeSLO>,
    config: &SloControllerConfig,
) -> NodeSloAction {
    match (node, existing) {
        (None, None) => NodeSloAction::None,
        (None, Some(_)) => NodeSloAction::Delete(name.to_owned()),
        (Some(node), None) => NodeSloAction::Create(Box::new(NodeSLO::new(
            name,
            node_slo_spec(config, node, None),
        ))),
        (Some(node), Some(existing)) => {
            let spec = node_slo_spec(config, node, Some(&existing.spec));
            if spec == existing.spec {
                NodeSloAction::None
            } else {
                let mut updated = existing.clone();
                updated.spec = spec;
                NodeSloAction::Update(Box::new(updated))
            }
        }
    }
}

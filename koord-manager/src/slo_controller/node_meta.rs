//! The node resource controller's plugin selection (upstream
//! `--noderesource-plugins`) and the node metadata it writes: the CPU
//! normalization and resource amplification ratio annotations.
//!
//! Pure. [`plan_node_meta`] runs both plugins for one node the way
//! upstream's framework does (Calculate, then Prepare, then NeedSyncMeta)
//! and returns the annotation changes to patch onto the Node.

use std::collections::BTreeMap;

use apis::configuration::{
    CPU_NORMALIZATION_CONFIG_KEY, CPUNormalizationStrategy, RESOURCE_AMPLIFICATION_CONFIG_KEY,
    ResourceAmplificationStrategy, SloControllerConfig,
};
use apis::extension::{
    ANNOTATION_CPU_NORMALIZATION_RATIO, ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    get_cpu_normalization_ratio,
};
use k8s_openapi::api::core::v1::Node;

use super::{cpunormalization, gpudeviceresource, rdmadeviceresource, resourceamplification};

/// Upstream's plugin names, in its registration order; every one is enabled
/// by default.
pub const ALL_NODE_RESOURCE_PLUGINS: [&str; 6] = [
    "MidResource",
    "BatchResource",
    cpunormalization::PLUGIN_NAME,
    resourceamplification::PLUGIN_NAME,
    gpudeviceresource::PLUGIN_NAME,
    rdmadeviceresource::PLUGIN_NAME,
];

/// Which node resource plugins run (`--noderesource-plugins`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeResourcePlugins {
    pub mid_resource: bool,
    pub batch_resource: bool,
    pub cpu_normalization: bool,
    pub resource_amplification: bool,
    pub gpu_device_resource: bool,
    pub rdma_device_resource: bool,
}

impl Default for NodeResourcePlugins {
    fn default() -> Self {
        NodeResourcePlugins::ALL
    }
}

impl NodeResourcePlugins {
    pub const ALL: NodeResourcePlugins = NodeResourcePlugins {
        mid_resource: true,
        batch_resource: true,
        cpu_normalization: true,
        resource_amplification: true,
        gpu_device_resource: true,
        rdma_device_resource: true,
    };

    /// Upstream's selection: `None` (flag not given) enables every plugin;
    /// otherwise, per plugin, the first entry naming it (`Name` on, `-Name`
    /// off) decides, else `*` enables it, else it is off.
    pub fn from_flag(entries: Option<&[String]>) -> Self {
        let Some(entries) = entries else {
            return NodeResourcePlugins::ALL;
        };
        let enabled = |name: &str| {
            let mut star = false;
            for entry in entries {
                if entry == name {
                    return true;
                }
                if entry.strip_prefix('-') == Some(name) {
                    return false;
                }
                star |= entry == "*";
            }
            star
        };
        NodeResourcePlugins {
            mid_resource: enabled("MidResource"),
            batch_resource: enabled("BatchResource"),
            cpu_normalization: enabled(cpunormalization::PLUGIN_NAME),
            resource_amplification: enabled(resourceamplification::PLUGIN_NAME),
            gpu_device_resource: enabled(gpudeviceresource::PLUGIN_NAME),
            rdma_device_resource: enabled(rdmadeviceresource::PLUGIN_NAME),
        }
    }

    /// Whether the plugin owning an extended resource of the node status
    /// (`kubernetes.io/batch-*`, `kubernetes.io/mid-*`) runs.
    pub fn manages(&self, resource: &str) -> bool {
        match resource {
            apis::extension::BATCH_CPU | apis::extension::BATCH_MEMORY => self.batch_resource,
            apis::extension::MID_CPU | apis::extension::MID_MEMORY => self.mid_resource,
            _ => false,
        }
    }

    /// Entries that name no plugin upstream knows (they are ignored, as
    /// upstream ignores them).
    pub fn unknown_entries(entries: &[String]) -> Vec<String> {
        entries
            .iter()
            .filter(|entry| {
                let name = entry.strip_prefix('-').unwrap_or(entry);
                name != "*" && !ALL_NODE_RESOURCE_PLUGINS.contains(&name)
            })
            .cloned()
            .collect()
    }
}

/// What one node's metadata plugins read.
#[derive(Clone, Copy)]
pub struct MetaInputs<'a> {
    pub node: &'a Node,
    /// Colocation is on for the node. Off is upstream's reset path: neither
    /// plugin calculates, and the amplification ratio is removed.
    pub colocation_enabled: bool,
    pub config: &'a SloControllerConfig,
    /// ConfigMap keys that have not been valid since start, with why
    /// (upstream's per-plugin config cache is not available then).
    pub unavailable_keys: &'a BTreeMap<String, String>,
    /// Annotations of the node's NodeResourceTopology; `None` without one.
    pub topology_annotations: Option<&'a BTreeMap<String, String>>,
    pub plugins: NodeResourcePlugins,
}

/// One plugin's outcome on one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PluginOutcome {
    /// The plugin ran (it is enabled, and for normalization colocation is on).
    pub ran: bool,
    /// Why it produced no value, when it failed.
    pub error: Option<String>,
    /// The annotation's text after this pass (`None`: absent).
    pub after: Option<String>,
    /// Upstream's NeedSyncMeta verdict and reason; `(false, "")` when the
    /// plugin is not registered.
    pub need_sync: (bool, &'static str),
}

/// The metadata decisions of one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeMetaPlan {
    pub cpu_normalization: PluginOutcome,
    pub resource_amplification: PluginOutcome,
    /// Annotation changes to patch onto the Node (`None` removes the key);
    /// empty when no plugin needs a sync.
    pub patch: BTreeMap<&'static str, Option<String>>,
}

impl NodeMetaPlan {
    /// One line for the log: what is written and why.
    pub fn reason(&self) -> String {
        let mut parts = Vec::new();
        for (name, outcome) in [
            (cpunormalization::PLUGIN_NAME, &self.cpu_normalization),
            (
                resourceamplification::PLUGIN_NAME,
                &self.resource_amplification,
            ),
        ] {
            if outcome.need_sync.0 {
                parts.push(format!("{name}: {}", outcome.need_sync.1));
            }
            if let Some(error) = &outcome.error {
                parts.push(format!("{name}: {error}"));
            }
        }
        parts.join("; ")
    }
}

fn strategy_or_unavailable<'a, T>(
    value: &'a T,
    key: &str,
    unavailable: &'a BTreeMap<String, String>,
) -> Result<&'a T, &'a str> {
    match unavailable.get(key) {
        Some(reason) => Err(reason.as_str()),
        None => Ok(value),
    }
}

/// Runs the CPUNormalization and ResourceAmplification plugins for one node.
///
/// Amplification reads the normalization ratio the node carries after this
/// pass, so both annotations settle in one pass (upstream reads the node as
/// it was and settles in the next reconcile; the values are the same).
pub fn plan_node_meta(inputs: MetaInputs<'_>) -> NodeMetaPlan {
    let node = inputs.node;
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let current_normalization = annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO).cloned();
    let current_amplification = annotations
        .get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO)
        .cloned();
    let mut plan = NodeMetaPlan::default();

    // CPUNormalization: a ratio replaces the annotation; a failure (or the
    // reset path) leaves it as it is.
    let mut normalization_after = current_normalization.clone();
    if inputs.plugins.cpu_normalization {
        let outcome = &mut plan.cpu_normalization;
        if inputs.colocation_enabled {
            outcome.ran = true;
            let cfg = inputs.config.cpu_normalization.clone().unwrap_or_default();
            let strategy: CPUNormalizationStrategy = cfg.strategy_for_node(labels);
            let available = strategy_or_unavailable(
                &strategy,
                CPU_NORMALIZATION_CONFIG_KEY,
                inputs.unavailable_keys,
            );
            match cpunormalization::calculate(name, available, labels, inputs.topology_annotations)
            {
                Ok(text) => normalization_after = Some(text),
                Err(error) => outcome.error = Some(error.to_string()),
            }
        }
        outcome.after = normalization_after.clone();
        outcome.need_sync = cpunormalization::need_sync_meta(
            current_normalization.as_deref(),
            normalization_after.as_deref(),
        );
    }

    // ResourceAmplification: a ratio replaces the annotation; no ratio, a
    // failure or the reset path removes it.
    let mut amplification_after = current_amplification.clone();
    if inputs.plugins.resource_amplification {
        let outcome = &mut plan.resource_amplification;
        amplification_after = None;
        if inputs.colocation_enabled {
            outcome.ran = true;
            let cfg = inputs
                .config
                .resource_amplification
                .clone()
                .unwrap_or_default();
            let strategy: ResourceAmplificationStrategy = cfg.strategy_for_node(labels);
            let available = strategy_or_unavailable(
                &strategy,
                RESOURCE_AMPLIFICATION_CONFIG_KEY,
                inputs.unavailable_keys,
            );
            let normalization = match &normalization_after {
                None => Ok(None),
                Some(text) => get_cpu_normalization_ratio(&BTreeMap::from([(
                    ANNOTATION_CPU_NORMALIZATION_RATIO.to_owned(),
                    text.clone(),
                )]))
                .map_err(|e| e.to_string()),
            };
            match resourceamplification::calculate(name, available, normalization) {
                Ok(text) => amplification_after = text,
                Err(error) => outcome.error = Some(error.to_string()),
            }
        }
        outcome.after = amplification_after.clone();
        outcome.need_sync = resourceamplification::need_sync_meta(
            current_amplification.as_deref(),
            amplification_after.as_deref(),
        );
    }

    if plan.cpu_normalization.need_sync.0 || plan.resource_amplification.need_sync.0 {
        // Like upstream's merge patch of the prepared node: every key whose
        // text changes.
        for (key, before, after) in [
            (
                ANNOTATION_CPU_NORMALIZATION_RATIO,
                current_normalization,
                normalization_after,
            ),
            (
                ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
                current_amplification,
                amplification_after,
            ),
        ] {
            if before != after {
                plan.patch.insert(key, after);
            }
        }
    }
    plan
}

/// The JSON merge patch of the Node's metadata for [`NodeMetaPlan::patch`].
pub fn meta_patch(changes: &BTreeMap<&'static str, Option<String>>) -> serde_json::Value {
    let annotations: serde_json::Map<String, serde_json::Value> = changes
        .iter()
        .map(|(key, value)| {
            (
                (*key).to_owned(),
                value
                    .clone()
                    .map_or(serde_json::Value::Null, serde_json::Value::String),
            )
        })
        .collect();
    serde_json::json!({"metadata": {"annotations": annotations}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::extension::ANNOTATION_CPU_BASIC_INFO;

    fn node(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Node {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.labels = Some(map(labels));
        node.metadata.annotations = Some(map(annotations));
        node
    }

    fn config(normalization: &str, amplification: &str) -> SloControllerConfig {
        let mut data = BTreeMap::new();
        if !normalization.is_empty() {
            data.insert(
                CPU_NORMALIZATION_CONFIG_KEY.to_owned(),
                normalization.to_owned(),
            );
        }
        if !amplification.is_empty() {
            data.insert(
                RESOURCE_AMPLIFICATION_CONFIG_KEY.to_owned(),
                amplification.to_owned(),
            );
        }
        SloControllerConfig::from_configmap_data(&data).unwrap()
    }

    fn topology() -> BTreeMap<String, String> {
        BTreeMap::from([(
            ANNOTATION_CPU_BASIC_INFO.to_owned(),
            r#"{"cpuModel":"Intel Xeon","hyperThreadEnabled":true}"#.to_owned(),
        )])
    }

    fn inputs<'a>(
        node: &'a Node,
        config: &'a SloControllerConfig,
        unavailable: &'a BTreeMap<String, String>,
        topology: Option<&'a BTreeMap<String, String>>,
    ) -> MetaInputs<'a> {
        MetaInputs {
            node,
            colocation_enabled: true,
            config,
            unavailable_keys: unavailable,
            topology_annotations: topology,
            plugins: NodeResourcePlugins::ALL,
        }
    }

    #[test]
    fn plugin_selection_follows_upstream() {
        let list = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            NodeResourcePlugins::from_flag(None),
            NodeResourcePlugins::ALL
        );
        let only_batch = NodeResourcePlugins::from_flag(Some(&list(&["BatchResource"])));
        assert!(only_batch.batch_resource && !only_batch.mid_resource);
        assert!(!only_batch.cpu_normalization && !only_batch.resource_amplification);
        let all_but = NodeResourcePlugins::from_flag(Some(&list(&["*", "-ResourceAmplification"])));
        assert!(all_but.cpu_normalization && !all_but.resource_amplification);
        assert!(all_but.gpu_device_resource && all_but.rdma_device_resource);
        let no_gpu = NodeResourcePlugins::from_flag(Some(&list(&["*", "-GPUDeviceResource"])));
        assert!(!no_gpu.gpu_device_resource && no_gpu.rdma_device_resource);
        // The first entry naming a plugin decides.
        let first =
            NodeResourcePlugins::from_flag(Some(&list(&["-BatchResource", "*", "BatchResource"])));
        assert!(!first.batch_resource && first.mid_resource);
        let none = NodeResourcePlugins::from_flag(Some(&list(&[""])));
        assert_eq!(
            none,
            NodeResourcePlugins {
                mid_resource: false,
                batch_resource: false,
                cpu_normalization: false,
                resource_amplification: false,
                gpu_device_resource: false,
                rdma_device_resource: false,
            }
        );
        assert_eq!(
            NodeResourcePlugins::unknown_entries(&list(&["*", "-GPUDeviceResource", "Batch"])),
            ["Batch"]
        );
    }

    #[test]
    fn both_ratios_are_written_in_one_pass() {
        let cfg = config(
            r#"{"enable":true,"ratioModel":{"Intel Xeon":{"hyperThreadEnabledRatio":1.2}}}"#,
            r#"{"enable":true,"resourceAmplificationRatio":{"cpu":1.5,"memory":2}}"#,
        );
        let node = node(&[], &[]);
        let unavailable = BTreeMap::new();
        let topo = topology();
        let plan = plan_node_meta(inputs(&node, &cfg, &unavailable, Some(&topo)));
        assert_eq!(
            plan.patch,
            BTreeMap::from([
                (ANNOTATION_CPU_NORMALIZATION_RATIO, Some("1.20".to_owned())),
                (
                    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
                    Some(r#"{"cpu":1.80,"memory":2.00}"#.to_owned())
                ),
            ])
        );
        assert_eq!(
            meta_patch(&plan.patch)["metadata"]["annotations"][ANNOTATION_CPU_NORMALIZATION_RATIO],
            "1.20"
        );
        // Applied, the next pass writes nothing.
        let settled = node_with(&plan);
        let again = plan_node_meta(inputs(&settled, &cfg, &unavailable, Some(&topo)));
        assert!(again.patch.is_empty(), "{again:?}");
    }

    fn node_with(plan: &NodeMetaPlan) -> Node {
        let mut node = node(&[], &[]);
        let annotations = node.metadata.annotations.get_or_insert_default();
        for (key, value) in &plan.patch {
            match value {
                Some(value) => annotations.insert((*key).to_owned(), value.clone()),
                None => annotations.remove(*key),
            };
        }
        node
    }

    #[test]
    fn defaults_write_the_neutral_normalization_ratio_and_no_amplification() {
        // Upstream's defaults: both strategies disabled.
        let cfg = config("", "");
        let node = node(&[], &[]);
        let unavailable = BTreeMap::new();
        let plan = plan_node_meta(inputs(&node, &cfg, &unavailable, None));
        assert_eq!(
            plan.patch,
            BTreeMap::from([(ANNOTATION_CPU_NORMALIZATION_RATIO, Some("1.00".to_owned()))])
        );
        assert_eq!(plan.resource_amplification.after, None);
        assert_eq!(
            plan.resource_amplification.need_sync,
            (false, "ratio remains empty")
        );
    }

    #[test]
    fn failures_keep_normalization_and_remove_amplification() {
        let cfg = config(
            r#"{"enable":true,"ratioModel":{"Other":{"baseRatio":1.2}}}"#,
            r#"{"enable":true,"resourceAmplificationRatio":{"memory":0.5}}"#,
        );
        let node = node(
            &[],
            &[
                (ANNOTATION_CPU_NORMALIZATION_RATIO, "1.30"),
                (
                    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
                    r#"{"cpu":1.30}"#,
                ),
            ],
        );
        let unavailable = BTreeMap::new();
        let topo = topology();
        let plan = plan_node_meta(inputs(&node, &cfg, &unavailable, Some(&topo)));
        assert!(
            plan.cpu_normalization
                .error
                .as_deref()
                .unwrap()
                .contains("no ratio for CPU Intel Xeon")
        );
        assert!(
            plan.resource_amplification
                .error
                .as_deref()
                .unwrap()
                .contains("memory")
        );
        assert_eq!(
            plan.patch,
            BTreeMap::from([(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, None)])
        );
        assert!(
            plan.reason().contains("new ratio is empty"),
            "{}",
            plan.reason()
        );
    }

    #[test]
    fn colocation_off_removes_only_the_amplification_ratio() {
        let cfg = config(
            "",
            r#"{"enable":true,"resourceAmplificationRatio":{"cpu":2}}"#,
        );
        let node = node(
            &[],
            &[
                (ANNOTATION_CPU_NORMALIZATION_RATIO, "1.30"),
                (
                    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
                    r#"{"cpu":2.60}"#,
                ),
            ],
        );
        let unavailable = BTreeMap::new();
        let mut off = inputs(&node, &cfg, &unavailable, None);
        off.colocation_enabled = false;
        let plan = plan_node_meta(off);
        assert!(!plan.cpu_normalization.ran && !plan.resource_amplification.ran);
        assert_eq!(
            plan.patch,
            BTreeMap::from([(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, None)])
        );
    }

    #[test]
    fn unavailable_keys_and_deselected_plugins() {
        let cfg = config("", "");
        let node = node(
            &[],
            &[(
                ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
                r#"{"cpu":1.50}"#,
            )],
        );
        let unavailable = BTreeMap::from([
            (
                CPU_NORMALIZATION_CONFIG_KEY.to_owned(),
                "not JSON".to_owned(),
            ),
            (
                RESOURCE_AMPLIFICATION_CONFIG_KEY.to_owned(),
                "not JSON".to_owned(),
            ),
        ]);
        let plan = plan_node_meta(inputs(&node, &cfg, &unavailable, None));
        // Normalization keeps what the node has (nothing); amplification is removed.
        assert!(plan.cpu_normalization.error.is_some());
        assert_eq!(
            plan.patch,
            BTreeMap::from([(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, None)])
        );
        // With both plugins deselected nothing is touched.
        let mut off = inputs(&node, &cfg, &unavailable, None);
        off.plugins = NodeResourcePlugins::from_flag(Some(&["BatchResource".to_owned()]));
        assert!(plan_node_meta(off).patch.is_empty());
        // Amplification alone still reads the node's normalization ratio.
        let normalized = self::node(&[], &[(ANNOTATION_CPU_NORMALIZATION_RATIO, "1.25")]);
        let none = BTreeMap::new();
        let mut only_amplification = inputs(&normalized, &cfg, &none, None);
        only_amplification.plugins =
            NodeResourcePlugins::from_flag(Some(&["ResourceAmplification".to_owned()]));
        assert_eq!(
            plan_node_meta(only_amplification).patch,
            BTreeMap::from([(
                ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
                Some(r#"{"cpu":1.25}"#.to_owned())
            )])
        );
    }
}

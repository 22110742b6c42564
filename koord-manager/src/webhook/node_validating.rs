//! Node validation (upstream `webhook/node/validating` with the `sloconfig`
//! plugin, `SLOManagerConfigConflictForNode`): a node whose labels change
//! must not match more than one node strategy of one `slo-controller-config`
//! key, since the controllers would then pick one silently.
//!
//! Pure: the node, the stored node and the ConfigMap's data come in; `Err`
//! carries the denial message in upstream's format.
//!
//! Upstream's rules:
//! - only updates that change the node's labels are checked (a create is
//!   checked and only logged);
//! - the keys checked are `colocation-config` (`nodeConfigs`) and
//!   `resource-threshold-config`, `resource-qos-config`, `system-config`,
//!   `cpu-burst-config` (`nodeStrategies`);
//! - a key that is absent or does not parse, or one of whose entries has an
//!   absent, empty or malformed `nodeSelector`, is not checked;
//! - a key with at most one entry cannot conflict.

use std::collections::BTreeMap;

use apis::configuration::{
    COLOCATION_CONFIG_KEY, CPU_BURST_CONFIG_KEY, CPUBurstCfg, ColocationCfg, NodeCfgProfile,
    RESOURCE_QOS_CONFIG_KEY, RESOURCE_THRESHOLD_CONFIG_KEY, ResourceQOSCfg, ResourceThresholdCfg,
    SYSTEM_CONFIG_KEY, SystemCfg, is_empty_selector, label_selector_matches,
    validate_label_selector,
};
use k8s_openapi::api::core::v1::Node;
use serde::de::DeserializeOwned;

use super::review::{Operation, Refusal};

/// Upstream's plugin name (metrics label).
pub const PLUGIN_NAME: &str = "SLOManagerConfigConflictForNode";

/// Upstream's denial reason.
pub const REASON_EXIST_NODE_CONFLICT: &str = "ExistNodeConfict";

/// The largest key text read (what a whole ConfigMap may hold).
const MAX_KEY_BYTES: usize = 1 << 20;

/// Whether the request needs the check: a create, or an update whose labels
/// differ from the stored node's.
pub fn need_check(node: &Node, old: Option<&Node>) -> bool {
    let empty = BTreeMap::new();
    match old {
        None => true,
        Some(old) => {
            node.metadata.labels.as_ref().unwrap_or(&empty)
                != old.metadata.labels.as_ref().unwrap_or(&empty)
        }
    }
}

fn parse<T: DeserializeOwned>(data: &BTreeMap<String, String>, key: &str) -> Option<T> {
    let text = data.get(key)?;
    if text.len() > MAX_KEY_BYTES {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// The node entries of each checked key that parses.
fn profiles_by_key(data: &BTreeMap<String, String>) -> Vec<(&'static str, Vec<NodeCfgProfile>)> {
    let mut keys = Vec::new();
    if let Some(cfg) = parse::<ColocationCfg>(data, COLOCATION_CONFIG_KEY) {
        keys.push((
            COLOCATION_CONFIG_KEY,
            cfg.node_configs.into_iter().map(|n| n.profile).collect(),
        ));
    }
    if let Some(cfg) = parse::<ResourceThresholdCfg>(data, RESOURCE_THRESHOLD_CONFIG_KEY) {
        keys.push((
            RESOURCE_THRESHOLD_CONFIG_KEY,
            cfg.node_strategies.into_iter().map(|n| n.profile).collect(),
        ));
    }
    if let Some(cfg) = parse::<ResourceQOSCfg>(data, RESOURCE_QOS_CONFIG_KEY) {
        keys.push((
            RESOURCE_QOS_CONFIG_KEY,
            cfg.node_strategies.into_iter().map(|n| n.profile).collect(),
        ));
    }
    if let Some(cfg) = parse::<SystemCfg>(data, SYSTEM_CONFIG_KEY) {
        keys.push((
            SYSTEM_CONFIG_KEY,
            cfg.node_strategies.into_iter().map(|n| n.profile).collect(),
        ));
    }
    if let Some(cfg) = parse::<CPUBurstCfg>(data, CPU_BURST_CONFIG_KEY) {
        keys.push((
            CPU_BURST_CONFIG_KEY,
            cfg.node_strategies.into_iter().map(|n| n.profile).collect(),
        ));
    }
    keys
}

/// Upstream's JSON error text, fields in its order:
/// `___{"reason":…,"message":{"config":…,"strategies":[…],"exampleNodes":[…]}}___`.
/// A node whose labels match several node strategies of one ConfigMap key;
/// the message is upstream's `___{json}___` form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", conflict_message(.key, .strategies, .node))]
pub struct NodeConflict {
    pub key: String,
    pub strategies: Vec<String>,
    pub node: String,
}

impl Refusal for NodeConflict {
    fn metric_label(&self) -> &'static str {
        "node_strategy_conflict"
    }
}

fn conflict_message(key: &str, strategies: &[String], node: &str) -> String {
    let json = |value: serde_json::Value| value.to_string();
    format!(
        r#"___{{"reason":{},"message":{{"config":{},"strategies":{},"exampleNodes":{}}}}}___"#,
        json(REASON_EXIST_NODE_CONFLICT.into()),
        json(key.into()),
        json(serde_json::json!(strategies)),
        json(serde_json::json!([node])),
    )
}

/// Upstream `checkConflict`: the first key whose entries the node's labels
/// match more than once.
pub fn check_conflict(data: &BTreeMap<String, String>, node: &Node) -> Result<(), NodeConflict> {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or_default();
    for (key, profiles) in profiles_by_key(data) {
        // Upstream's checker refuses to start on any entry without a
        // usable selector, which skips the key.
        let usable = profiles.iter().all(|profile| {
            profile.node_selector.as_ref().is_some_and(|selector| {
                !is_empty_selector(selector) && validate_label_selector(selector).is_ok()
            })
        });
        if !usable || profiles.len() <= 1 {
            continue;
        }
        let matching: Vec<String> = profiles
            .iter()
            .filter(|profile| {
                profile
                    .node_selector
                    .as_ref()
                    .is_some_and(|selector| label_selector_matches(selector, labels) == Ok(true))
            })
            .map(|profile| profile.name.clone())
            .collect();
        if matching.len() > 1 {
            return Err(NodeConflict {
                key: key.to_owned(),
                strategies: matching,
                node: name.to_owned(),
            });
        }
    }
    Ok(())
}

/// Upstream `Validate`: updates that change labels are checked against the
/// ConfigMap's data (`None`: it could not be read, which allows, as
/// upstream); a conflicting create is only reported (`Ok(Some(message))`).
pub fn validate(
    operation: Operation,
    node: &Node,
    old: Option<&Node>,
    config_data: Option<&BTreeMap<String, String>>,
) -> Result<Option<NodeConflict>, NodeConflict> {
    let Some(data) = config_data else {
        return Ok(None);
    };
    match operation {
        Operation::Create => Ok(check_conflict(data, node).err()),
        Operation::Update if need_check(node, old) => check_conflict(data, node).map(|()| None),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    //! Cases follow upstream's `webhook/node/plugins/sloconfig/slo_plugin_test.go`.

    use super::*;

    fn node(labels: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("test-node0".into());
        node.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        node
    }

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const OVERLAPPING_THRESHOLD: &str = r#"{"clusterStrategy":{"enable":true},
        "nodeStrategies":[
          {"name":"xxx-yyy","nodeSelector":{"matchLabels":{"xxx":"yyy"}},"cpuSuppressThresholdPercent":60},
          {"name":"zzz-zzz","nodeSelector":{"matchLabels":{"zzz":"zzz"}},"cpuSuppressThresholdPercent":70}]}"#;

    #[test]
    fn invalid_or_single_strategy_configs_are_not_checked() {
        let old = node(&[]);
        let new = node(&[("xxx", "yyy"), ("zzz", "zzz")]);
        // "test skip: update node, config invalid"
        let invalid = data(&[
            (RESOURCE_THRESHOLD_CONFIG_KEY, "invalid_content"),
            (RESOURCE_QOS_CONFIG_KEY, "invalid_content"),
            (CPU_BURST_CONFIG_KEY, "invalid_content"),
            (SYSTEM_CONFIG_KEY, "invalid_content"),
        ]);
        assert_eq!(
            validate(Operation::Update, &new, Some(&old), Some(&invalid)),
            Ok(None)
        );
        // "test not conflict: config have no nodeStrategies"
        let plain = data(&[
            (
                COLOCATION_CONFIG_KEY,
                r#"{"enable":true,"cpuReclaimThresholdPercent":70}"#,
            ),
            (
                RESOURCE_THRESHOLD_CONFIG_KEY,
                r#"{"clusterStrategy":{"enable":true,"cpuSuppressThresholdPercent":60}}"#,
            ),
            (
                CPU_BURST_CONFIG_KEY,
                r#"{"clusterStrategy":{"cfsQuotaBurstPeriodSeconds":60}}"#,
            ),
            (
                SYSTEM_CONFIG_KEY,
                r#"{"clusterStrategy":{"minFreeKbytesFactor":150}}"#,
            ),
        ]);
        assert_eq!(
            validate(Operation::Update, &new, Some(&old), Some(&plain)),
            Ok(None)
        );
        // An entry without a selector disables the key's check.
        let selectorless = data(&[(
            RESOURCE_THRESHOLD_CONFIG_KEY,
            r#"{"nodeStrategies":[{"name":"a","nodeSelector":{"matchLabels":{"xxx":"yyy"}}},{"name":"b"}]}"#,
        )]);
        assert_eq!(
            validate(Operation::Update, &new, Some(&old), Some(&selectorless)),
            Ok(None)
        );
    }

    #[test]
    fn a_label_change_matching_two_strategies_is_refused() {
        let old = node(&[("xxx", "yyy")]);
        let new = node(&[("xxx", "yyy"), ("zzz", "zzz")]);
        let cfg = data(&[(RESOURCE_THRESHOLD_CONFIG_KEY, OVERLAPPING_THRESHOLD)]);
        let err = validate(Operation::Update, &new, Some(&old), Some(&cfg)).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"___{"reason":"ExistNodeConfict","message":{"config":"resource-threshold-config","strategies":["xxx-yyy","zzz-zzz"],"exampleNodes":["test-node0"]}}___"#
        );
        // One match: allowed.
        assert_eq!(
            validate(Operation::Update, &old, Some(&node(&[])), Some(&cfg)),
            Ok(None)
        );
        // Labels unchanged: not checked at all.
        assert_eq!(
            validate(Operation::Update, &new, Some(&new), Some(&cfg)),
            Ok(None)
        );
        // A create is only reported.
        assert!(matches!(
            validate(Operation::Create, &new, None, Some(&cfg)),
            Ok(Some(_))
        ));
        // Without the ConfigMap: allowed.
        assert_eq!(
            validate(Operation::Update, &new, Some(&old), None),
            Ok(None)
        );
    }

    #[test]
    fn colocation_node_configs_are_checked_too() {
        let cfg = data(&[(
            COLOCATION_CONFIG_KEY,
            r#"{"enable":true,"nodeConfigs":[
              {"name":"a","nodeSelector":{"matchLabels":{"pool":"x"}}},
              {"name":"b","nodeSelector":{"matchExpressions":[{"key":"pool","operator":"Exists"}]}}]}"#,
        )]);
        let err = check_conflict(&cfg, &node(&[("pool", "x")])).unwrap_err();
        assert!(
            err.to_string().contains(r#""config":"colocation-config""#),
            "{err}"
        );
        assert!(check_conflict(&cfg, &node(&[("pool", "y")])).is_ok());
    }
}

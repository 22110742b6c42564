//! (ours) The `cpu-latency-protection-config` key of `slo-controller-config`:
//! the cluster and node strategies koord-manager renders into each NodeSLO's
//! extension `cpuLatencyProtection` (see
//! [`crate::slo::v1alpha1::cpu_latency_protection`]). Upstream has no such
//! key, so [`super::SloControllerConfig`] keeps it among `other_keys`; it is
//! parsed here, bounded like every other key.
//!
//! ```json
//! {"clusterStrategy": {"enable": true, "targetWaitPercent": 25},
//!  "nodeStrategies": [{"name": "db", "nodeSelector": {"matchLabels": {"pool": "db"}},
//!                      "targetWaitPercent": 10}]}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::merge::profile_matches;
use super::types::NodeCfgProfile;
use super::{ConfigValueError, decode_bounded};
use crate::slo::v1alpha1::CPULatencyProtectionStrategy;

/// The ConfigMap key.
pub const CPU_LATENCY_PROTECTION_CONFIG_KEY: &str = "cpu-latency-protection-config";

/// The key's document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CPULatencyProtectionCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_strategy: Option<CPULatencyProtectionStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_strategies: Vec<NodeCPULatencyProtectionCfg>,
}

/// A node-level entry: `name`, `nodeSelector` and the strategy's fields
/// inline, as the other keys' node entries. The strategy's fields are kept
/// as read and checked by [`CPULatencyProtectionCfg::parse`] (serde cannot
/// refuse unknown fields of a flattened struct).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeCPULatencyProtectionCfg {
    #[serde(flatten)]
    pub profile: NodeCfgProfile,
    #[serde(flatten)]
    pub strategy: BTreeMap<String, serde_json::Value>,
}

/// Why the key was not taken.
#[derive(Debug, thiserror::Error)]
pub enum CPULatencyProtectionCfgError {
    #[error("{CPU_LATENCY_PROTECTION_CONFIG_KEY}: {0}")]
    Value(#[from] ConfigValueError),
    #[error("{CPU_LATENCY_PROTECTION_CONFIG_KEY}: {path}: {message}")]
    Strategy { path: String, message: String },
}

fn overlay(base: &mut CPULatencyProtectionStrategy, top: &CPULatencyProtectionStrategy) {
    fn set<T: Copy>(field: &mut Option<T>, value: Option<T>) {
        if value.is_some() {
            *field = value;
        }
    }
    set(&mut base.enable, top.enable);
    set(&mut base.target_wait_percent, top.target_wait_percent);
    set(&mut base.hold_band_percent, top.hold_band_percent);
    set(&mut base.min_be_cpu_percent, top.min_be_cpu_percent);
    set(&mut base.max_be_cpu_percent, top.max_be_cpu_percent);
    set(&mut base.increase_step_percent, top.increase_step_percent);
    set(
        &mut base.decrease_factor_percent,
        top.decrease_factor_percent,
    );
}

/// A strategy's fields checked as if enabled (a disabled strategy with an
/// out-of-range bound would fail the day someone turns it on).
fn check(
    strategy: &CPULatencyProtectionStrategy,
    path: String,
) -> Result<(), CPULatencyProtectionCfgError> {
    let enabled = CPULatencyProtectionStrategy {
        enable: Some(true),
        ..strategy.clone()
    };
    enabled
        .resolve()
        .map(|_| ())
        .map_err(|err| CPULatencyProtectionCfgError::Strategy {
            path,
            message: err.to_string(),
        })
}

impl NodeCPULatencyProtectionCfg {
    /// The entry's strategy fields as the typed strategy.
    pub fn strategy(&self) -> Result<CPULatencyProtectionStrategy, String> {
        let object: serde_json::Map<String, serde_json::Value> = self
            .strategy
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        CPULatencyProtectionStrategy::deserialize(serde_json::Value::Object(object))
            .map_err(|err| err.to_string())
    }
}

impl CPULatencyProtectionCfg {
    /// Parses and checks the key's JSON (size and nesting bounded like
    /// every key; every strategy's fields known and in range).
    pub fn parse(raw: &str) -> Result<Self, CPULatencyProtectionCfgError> {
        let cfg: Self = decode_bounded(raw)?;
        if let Some(cluster) = &cfg.cluster_strategy {
            check(cluster, "clusterStrategy".into())?;
        }
        for (index, node) in cfg.node_strategies.iter().enumerate() {
            let path = format!("nodeStrategies[{index}]");
            let strategy =
                node.strategy()
                    .map_err(|message| CPULatencyProtectionCfgError::Strategy {
                        path: path.clone(),
                        message,
                    })?;
            check(&strategy, path)?;
        }
        Ok(cfg)
    }

    /// The key of a ConfigMap's other keys: `Ok(None)` when absent or blank.
    pub fn from_other_keys(
        other_keys: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, CPULatencyProtectionCfgError> {
        match other_keys.get(CPU_LATENCY_PROTECTION_CONFIG_KEY) {
            Some(raw) if !raw.trim().is_empty() => Self::parse(raw).map(Some),
            _ => Ok(None),
        }
    }

    /// `clusterStrategy ← the first nodeStrategy matching the labels`;
    /// `None` when neither applies (no default: the loop is opt-in).
    pub fn strategy_for_node(
        &self,
        node_labels: &BTreeMap<String, String>,
    ) -> Option<CPULatencyProtectionStrategy> {
        let node = self
            .node_strategies
            .iter()
            .find(|node| profile_matches(&node.profile, node_labels))
            .and_then(|node| node.strategy().ok());
        match (&self.cluster_strategy, node) {
            (None, None) => None,
            (Some(cluster), None) => Some(cluster.clone()),
            (None, Some(node)) => Some(node),
            (Some(cluster), Some(node)) => {
                let mut strategy = cluster.clone();
                overlay(&mut strategy, &node);
                Some(strategy)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn node_strategies_overlay_the_cluster_strategy() {
        let cfg = CPULatencyProtectionCfg::parse(
            &json!({
                "clusterStrategy": {"enable": true, "targetWaitPercent": 25, "minBECPUPercent": 5},
                "nodeStrategies": [
                    {"name": "db", "nodeSelector": {"matchLabels": {"pool": "db"}}, "targetWaitPercent": 10},
                    {"name": "off", "nodeSelector": {"matchLabels": {"pool": "batch"}}, "enable": false}
                ]
            })
            .to_string(),
        )
        .unwrap();
        let db = cfg.strategy_for_node(&labels(&[("pool", "db")])).unwrap();
        assert_eq!(
            (db.enable, db.target_wait_percent, db.min_be_cpu_percent),
            (Some(true), Some(10), Some(5))
        );
        let batch = cfg
            .strategy_for_node(&labels(&[("pool", "batch")]))
            .unwrap();
        assert_eq!(batch.enable, Some(false));
        let other = cfg.strategy_for_node(&labels(&[])).unwrap();
        assert_eq!(other.target_wait_percent, Some(25));
        // Node strategies only: nodes that match none get nothing.
        let only_nodes = CPULatencyProtectionCfg::parse(
            r#"{"nodeStrategies": [{"nodeSelector": {"matchLabels": {"pool": "db"}}, "enable": true}]}"#,
        )
        .unwrap();
        assert!(only_nodes.strategy_for_node(&labels(&[])).is_none());
        assert_eq!(
            only_nodes
                .strategy_for_node(&labels(&[("pool", "db")]))
                .and_then(|s| s.enable),
            Some(true)
        );
    }

    #[test]
    fn bad_documents_are_refused_with_a_path() {
        let cases = [
            (
                json!({"clusterStrategy": {"targetWaitPercent": 0}}),
                "clusterStrategy: ",
            ),
            (
                json!({"nodeStrategies": [{"name": "a", "decreaseFactorPercent": 100}]}),
                "nodeStrategies[0]: ",
            ),
            (
                json!({"nodeStrategies": [{"name": "a", "targetWaitPercnt": 5}]}),
                "unknown field",
            ),
            (
                json!({"clusterStrategy": {"enable": true, "x": 1}}),
                "unknown field",
            ),
            (
                json!({"clusterStrategy": 5}),
                "cpu-latency-protection-config",
            ),
        ];
        for (value, want) in cases {
            let err = CPULatencyProtectionCfg::parse(&value.to_string())
                .expect_err(&value.to_string())
                .to_string();
            assert!(err.contains(want), "{value}: {err}");
        }
        let deep = "[".repeat(100);
        assert!(CPULatencyProtectionCfg::parse(&deep).is_err());
        let mut keys = BTreeMap::new();
        assert!(matches!(
            CPULatencyProtectionCfg::from_other_keys(&keys),
            Ok(None)
        ));
        keys.insert(
            CPU_LATENCY_PROTECTION_CONFIG_KEY.to_string(),
            "  ".to_string(),
        );
        assert!(matches!(
            CPULatencyProtectionCfg::from_other_keys(&keys),
            Ok(None)
        ));
    }
}

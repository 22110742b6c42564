//! The manager's view of the `slo-controller-config` ConfigMap: parsed,
//! validated, and kept at the last valid version when a bad one arrives.

use std::collections::BTreeMap;

use apis::configuration::{
    ColocationStrategy, SloConfigParseError, SloControllerConfig, ValidationErrors,
    apply_node_colocation_overrides, default_colocation_strategy, merged,
};
use k8s_openapi::api::core::v1::Node;

/// Why a ConfigMap was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ConfigRejected {
    #[error(transparent)]
    Parse(#[from] SloConfigParseError),
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
}

/// Parses and validates ConfigMap data; a missing ConfigMap (`None`) means
/// every key at its default.
///
/// Node entries whose selectors overlap are accepted: the controllers take
/// the first match, as upstream's do. Refusing overlaps is the (optional)
/// admission webhook's job, so that one check is left out here.
pub fn parse_config(
    data: Option<&BTreeMap<String, String>>,
) -> Result<SloControllerConfig, ConfigRejected> {
    let Some(data) = data else {
        return Ok(SloControllerConfig::default());
    };
    let config = SloControllerConfig::from_configmap_data(data)?;
    if let Err(mut invalid) = config.validate() {
        invalid
            .errors
            .retain(|error| !is_overlap_report(&error.path));
        if !invalid.errors.is_empty() {
            return Err(invalid.into());
        }
    }
    Ok(config)
}

/// Overlaps are reported on the list itself (`<key>.nodeStrategies`), every
/// other node-entry problem on an indexed entry.
fn is_overlap_report(path: &str) -> bool {
    path.ends_with(".nodeStrategies") || path.ends_with(".nodeConfigs")
}

/// What happened when a ConfigMap version was offered to [`ConfigState`].
#[derive(Debug, PartialEq)]
pub enum ConfigOutcome {
    /// The config in force changed.
    Applied,
    /// Same content as the config in force.
    Unchanged,
    /// Refused; the previous config stays in force. The text names the bad fields.
    Rejected(String),
}

/// The config in force: the last valid ConfigMap seen (defaults until then).
#[derive(Clone, Debug, Default)]
pub struct ConfigState {
    current: SloControllerConfig,
}

impl ConfigState {
    pub fn current(&self) -> &SloControllerConfig {
        &self.current
    }

    /// Offers a ConfigMap version (`None`: the ConfigMap does not exist).
    pub fn offer(&mut self, data: Option<&BTreeMap<String, String>>) -> ConfigOutcome {
        match parse_config(data) {
            Ok(config) if config == self.current => ConfigOutcome::Unchanged,
            Ok(config) => {
                self.current = config;
                ConfigOutcome::Applied
            }
            Err(rejected) => ConfigOutcome::Rejected(rejected.to_string()),
        }
    }
}

/// The colocation settings of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeColocation {
    /// The cluster-level `enable` (defaults ← `colocation-config`).
    pub cluster_enabled: bool,
    /// The node's merged strategy; `None` when the cluster strategy is invalid.
    pub strategy: Option<ColocationStrategy>,
}

/// `defaults ← cluster ← first matching nodeConfig ← node annotation/labels`.
pub fn node_colocation(config: &SloControllerConfig, node: &Node) -> NodeColocation {
    let colocation = config.colocation.clone().unwrap_or_default();
    let cluster = merged(&default_colocation_strategy(), &colocation.strategy);
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let strategy = colocation.strategy_for_node(labels).map(|mut strategy| {
        // A malformed override annotation is ignored, as upstream does.
        let _ = apply_node_colocation_overrides(&mut strategy, labels, annotations);
        strategy
    });
    NodeColocation {
        cluster_enabled: cluster.enable == Some(true),
        strategy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn an_invalid_configmap_keeps_the_last_valid_config() {
        let mut state = ConfigState::default();
        let good = data(&[(
            "resource-threshold-config",
            r#"{"clusterStrategy":{"enable":true,"cpuSuppressThresholdPercent":55}}"#,
        )]);
        assert_eq!(state.offer(Some(&good)), ConfigOutcome::Applied);
        let before = state.current().clone();

        let out_of_range = data(&[(
            "resource-threshold-config",
            r#"{"clusterStrategy":{"cpuSuppressThresholdPercent":500}}"#,
        )]);
        match state.offer(Some(&out_of_range)) {
            ConfigOutcome::Rejected(message) => {
                assert!(message.contains("cpuSuppressThresholdPercent"), "{message}")
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        let not_json = data(&[("colocation-config", "{not json")]);
        assert!(matches!(
            state.offer(Some(&not_json)),
            ConfigOutcome::Rejected(message) if message.contains("colocation-config")
        ));
        assert_eq!(state.current(), &before);
        assert_eq!(state.offer(Some(&good)), ConfigOutcome::Unchanged);
    }

    #[test]
    fn a_missing_configmap_means_defaults() {
        let mut state = ConfigState::default();
        assert_eq!(state.offer(None), ConfigOutcome::Unchanged);
        let node = Node::default();
        let colocation = node_colocation(state.current(), &node);
        assert!(!colocation.cluster_enabled);
        assert_eq!(colocation.strategy.unwrap().degrade_time_minutes, Some(15));
    }
}

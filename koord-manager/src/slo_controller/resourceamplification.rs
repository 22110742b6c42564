//! Resource amplification (upstream noderesource plugin
//! `ResourceAmplification`): the node's
//! `node.koordinator.sh/resource-amplification-ratio` annotation, from the
//! `resource-amplification-config` strategy and the node's CPU
//! normalization ratio.
//!
//! Pure. Upstream's formula, per resource:
//! - CPU: the configured CPU ratio (1 when unset or not positive) × the
//!   node's CPU normalization ratio (when set); it replaces the configured
//!   ratio only when the product is above 1;
//! - every other configured resource: its ratio as configured;
//! - the configured ratios count only when the strategy's `enable` is true;
//! - any ratio below 1 refuses the whole calculation.
//!
//! What the controller then writes follows upstream's `Prepare`: a result
//! replaces the annotation; no ratio, or a failed calculation, removes it.

use std::collections::BTreeMap;

use apis::configuration::ResourceAmplificationStrategy;
use apis::extension::{RESOURCE_CPU, Ratio, format_node_resource_amplification_ratios};

/// The plugin's name in `--noderesource-plugins`.
pub const PLUGIN_NAME: &str = "ResourceAmplification";

/// Why no ratio was calculated; the controller then removes the annotation,
/// as upstream does. Messages follow upstream's.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AmplificationError {
    #[error(
        "calculate failed for node {node}, getResourceAmplificationRatios failed: cfgHandler is not available: {reason}"
    )]
    ConfigUnavailable { node: String, reason: String },
    #[error(
        "calculate failed for node {node}, calculateCPUAmplificationRatio failed: failed to get cpu normalization ratio, error: {reason}"
    )]
    NormalizationRatio { node: String, reason: String },
    #[error(
        "calculate failed for node {node}, amplification ratio is invalid: ratio with resource type {resource} and value {value} is invalid"
    )]
    BelowOne {
        node: String,
        resource: String,
        value: f64,
    },
    #[error("calculate failed for node {node}: {reason}")]
    Format { node: String, reason: String },
}

/// The ratios for the node (upstream `Calculate`), empty when the node needs
/// none. `strategy` is the node's effective strategy (`Err`: the config key
/// has never been valid since start); `normalization_ratio` the node's CPU
/// normalization ratio annotation as read (`Ok(None)`: absent).
pub fn ratios(
    node_name: &str,
    strategy: Result<&ResourceAmplificationStrategy, &str>,
    normalization_ratio: Result<Option<f64>, String>,
) -> Result<BTreeMap<String, Ratio>, AmplificationError> {
    let strategy = strategy.map_err(|reason| AmplificationError::ConfigUnavailable {
        node: node_name.to_owned(),
        reason: reason.to_owned(),
    })?;
    let mut ratios: BTreeMap<String, Ratio> = if strategy.enable == Some(true) {
        strategy
            .resource_amplification_ratio
            .iter()
            .map(|(name, ratio)| (name.clone(), Ratio(*ratio)))
            .collect()
    } else {
        BTreeMap::new()
    };
    let configured_cpu = ratios.get(RESOURCE_CPU).map_or(0.0, |ratio| ratio.0);
    let mut cpu = if configured_cpu > 0.0 {
        configured_cpu
    } else {
        1.0
    };
    match normalization_ratio {
        Err(reason) => {
            return Err(AmplificationError::NormalizationRatio {
                node: node_name.to_owned(),
                reason,
            });
        }
        Ok(Some(normalization)) if normalization > 0.0 => cpu *= normalization,
        Ok(_) => {}
    }
    if cpu > 1.0 {
        ratios.insert(RESOURCE_CPU.to_owned(), Ratio(cpu));
    }
    // NaN is refused too: it is not at least 1.
    if let Some((resource, ratio)) = ratios
        .iter()
        .find(|(_, ratio)| ratio.0 < 1.0 || ratio.0.is_nan())
    {
        return Err(AmplificationError::BelowOne {
            node: node_name.to_owned(),
            resource: resource.clone(),
            value: ratio.0,
        });
    }
    Ok(ratios)
}

/// The annotation text for the node, `None` when it needs no ratio.
pub fn calculate(
    node_name: &str,
    strategy: Result<&ResourceAmplificationStrategy, &str>,
    normalization_ratio: Result<Option<f64>, String>,
) -> Result<Option<String>, AmplificationError> {
    let ratios = ratios(node_name, strategy, normalization_ratio)?;
    if ratios.is_empty() {
        return Ok(None);
    }
    format_node_resource_amplification_ratios(&ratios)
        .map(Some)
        .map_err(|error| AmplificationError::Format {
            node: node_name.to_owned(),
            reason: error.to_string(),
        })
}

/// Upstream `NeedSyncMeta`: the annotation texts compared as they are (an
/// empty one counts as absent).
pub fn need_sync_meta(old: Option<&str>, new: Option<&str>) -> (bool, &'static str) {
    let old = old.unwrap_or_default();
    let new = new.unwrap_or_default();
    match (old.is_empty(), new.is_empty()) {
        (true, true) => (false, "ratio remains empty"),
        (true, false) => (true, "old ratio is empty"),
        (false, true) => (true, "new ratio is empty"),
        (false, false) if old == new => (false, "ratio remains unchanged"),
        (false, false) => (true, "ratio changed"),
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    //! Cases transcribed from upstream's
    //! `noderesource/plugins/resourceamplification/plugin_test.go`.

    use super::*;

    fn enabled(pairs: &[(&str, f64)]) -> ResourceAmplificationStrategy {
        ResourceAmplificationStrategy {
            enable: Some(true),
            resource_amplification_ratio: pairs
                .iter()
                .map(|(name, ratio)| ((*name).to_owned(), *ratio))
                .collect(),
        }
    }

    #[test]
    fn need_sync_meta_follows_upstream() {
        let cases = [
            (
                "no need sync when both have no ratio",
                None,
                None,
                false,
                "ratio remains empty",
            ),
            (
                "need sync when old has no ratio",
                None,
                Some(r#"{"cpu":1.12}"#),
                true,
                "old ratio is empty",
            ),
            (
                "need sync when new has no ratio",
                Some(r#"{"cpu":1.12}"#),
                None,
                true,
                "new ratio is empty",
            ),
            (
                "skip sync when ratio is unchanged",
                Some(r#"{"cpu":1.12}"#),
                Some(r#"{"cpu":1.12}"#),
                false,
                "ratio remains unchanged",
            ),
            (
                "need sync when ratio is different",
                Some(r#"{"cpu":1.12}"#),
                Some(r#"{"cpu":1.23}"#),
                true,
                "ratio changed",
            ),
        ];
        for (name, old, new, want, reason) in cases {
            assert_eq!(need_sync_meta(old, new), (want, reason), "{name}");
        }
    }

    #[test]
    fn calculate_follows_upstream() {
        let empty = ResourceAmplificationStrategy::default();
        let cases: Vec<(
            &str,
            ResourceAmplificationStrategy,
            Result<Option<f64>, String>,
            Result<Option<&str>, ()>,
        )> = vec![
            (
                "get cpu normalization ratio failed",
                empty.clone(),
                Err("invalid".into()),
                Err(()),
            ),
            (
                "calculate ratio correctly with cpu normalization",
                empty.clone(),
                Ok(Some(1.22)),
                Ok(Some(r#"{"cpu":1.22}"#)),
            ),
            (
                "calculate ratio correctly without cpu normalization",
                empty.clone(),
                Ok(None),
                Ok(None),
            ),
            (
                "calculate ratio with amplification ratio",
                enabled(&[("cpu", 1.1), ("memory", 2.1)]),
                Ok(None),
                Ok(Some(r#"{"cpu":1.10,"memory":2.10}"#)),
            ),
            (
                "calculate ratio with both cpu normalization ratio and amplification ratio",
                enabled(&[("cpu", 1.5), ("memory", 2.5)]),
                Ok(Some(1.2)),
                Ok(Some(r#"{"cpu":1.80,"memory":2.50}"#)),
            ),
            (
                "calculate ratio with cpu normalization ratio and amplification memory ratio",
                enabled(&[("memory", 3.5)]),
                Ok(Some(1.5)),
                Ok(Some(r#"{"cpu":1.50,"memory":3.50}"#)),
            ),
            (
                "calculate ratio with cpu normalization ratio and other resource type ratio",
                enabled(&[("memory", 3.5), ("storage", 1.8)]),
                Ok(Some(1.5)),
                Ok(Some(r#"{"cpu":1.50,"memory":3.50,"storage":1.80}"#)),
            ),
            (
                "calculate ratio with final cpu normalization ratio > 1 correctly",
                enabled(&[("cpu", 0.8), ("memory", 3.5), ("storage", 1.8)]),
                Ok(Some(1.5)),
                Ok(Some(r#"{"cpu":1.20,"memory":3.50,"storage":1.80}"#)),
            ),
            (
                "calculate ratio with final cpu normalization ratio < 1 invalid",
                enabled(&[("cpu", 0.5), ("memory", 3.5), ("storage", 1.8)]),
                Ok(Some(1.5)),
                Err(()),
            ),
            (
                "calculate ratio with one resource amplification ratio invalid",
                enabled(&[("memory", 3.5), ("storage", 0.5)]),
                Ok(Some(1.5)),
                Err(()),
            ),
        ];
        for (name, strategy, normalization, want) in cases {
            let got = calculate("test-node", Ok(&strategy), normalization);
            match want {
                Ok(text) => assert_eq!(got, Ok(text.map(str::to_owned)), "{name}"),
                Err(()) => assert!(got.is_err(), "{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn disabled_strategies_and_unavailable_config() {
        // Configured ratios count only when enabled; normalization always does.
        let off = ResourceAmplificationStrategy {
            enable: Some(false),
            ..enabled(&[("memory", 2.0)])
        };
        assert_eq!(calculate("n", Ok(&off), Ok(None)), Ok(None));
        assert_eq!(
            calculate("n", Ok(&off), Ok(Some(1.5))),
            Ok(Some(r#"{"cpu":1.50}"#.to_owned()))
        );
        let err = calculate("n", Err("never valid"), Ok(None)).unwrap_err();
        assert!(
            err.to_string().contains("cfgHandler is not available"),
            "{err}"
        );
        let err = calculate("n", Ok(&enabled(&[("memory", 0.5)])), Ok(None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "calculate failed for node n, amplification ratio is invalid: ratio with resource type memory and value 0.5 is invalid"
        );
    }
}

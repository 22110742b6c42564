//! CPU normalization (upstream noderesource plugin `CPUNormalization`): the
//! node's `node.koordinator.sh/cpu-normalization-ratio` annotation, from the
//! CPU basic info koordlet reports on the node's NodeResourceTopology and the
//! `cpu-normalization-config` ratio model.
//!
//! Pure: the node's effective strategy, its labels and the annotations of
//! its NodeResourceTopology come in; the ratio text (or why there is none)
//! goes out. What the controller then writes follows upstream's `Prepare`:
//! a ratio replaces the annotation, a failure leaves it as it is.

use std::collections::BTreeMap;

use apis::configuration::CPUNormalizationStrategy;
use apis::extension::{
    CPUBasicInfo, format_cpu_normalization_ratio, get_cpu_basic_info,
    get_cpu_normalization_enabled, get_cpu_normalization_ratio,
    is_cpu_normalization_ratio_different,
};

/// The plugin's name in `--noderesource-plugins`.
pub const PLUGIN_NAME: &str = "CPUNormalization";
/// The ratio written when normalization is off for the node.
pub const DEFAULT_RATIO_TEXT: &str = "1.00";
/// Ratios below this are refused (scaling CPU down is not supported).
pub const MIN_RATIO: f64 = 1.0;
/// Ratios above this are refused, against runaway amplification.
pub const MAX_RATIO: f64 = 5.0;

/// Why no ratio was calculated; the node's annotation is then left as it is.
/// Messages follow upstream's.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NormalizationError {
    #[error(
        "failed to get config in cpu normalization calculation, err: config is not available: {0}"
    )]
    ConfigUnavailable(String),
    #[error("failed to get node label in cpu normalization calculation, err: {0}")]
    NodeLabel(String),
    #[error(
        "failed to get NodeResourceTopology in cpu normalization calculation, err: NodeResourceTopology {0} not found"
    )]
    TopologyMissing(String),
    #[error("failed to parse CPUBasicInfo in cpu normalization calculation, err: {0}")]
    BasicInfoInvalid(String),
    #[error("failed to get CPUBasicInfo in cpu normalization calculation, err: info is missing")]
    BasicInfoMissing,
    #[error("failed to get ratio in cpu normalization calculation, err: {0}")]
    Ratio(String),
    #[error(
        "failed to validate ratio in cpu normalization calculation, ratio {ratio}, err: {reason}"
    )]
    OutOfRange { ratio: f64, reason: String },
}

/// Whether normalization is on for the node: the
/// `node.koordinator.sh/cpu-normalization-enabled` label wins over the
/// strategy's `enable`; neither set means off.
pub fn is_enabled(
    strategy: &CPUNormalizationStrategy,
    node_labels: &BTreeMap<String, String>,
) -> Result<bool, NormalizationError> {
    match get_cpu_normalization_enabled(node_labels) {
        Err(error) => Err(NormalizationError::NodeLabel(error.to_string())),
        Ok(Some(enabled)) => Ok(enabled),
        Ok(None) => Ok(strategy.enable == Some(true)),
    }
}

/// The ratio the model gives for this CPU and its hyper-threading and turbo
/// state (upstream `getCPUNormalizationRatioFromModel`).
pub fn ratio_from_model(
    info: &CPUBasicInfo,
    strategy: &CPUNormalizationStrategy,
) -> Result<f64, String> {
    if strategy.ratio_model.is_empty() {
        return Err("ratio model is nil".to_owned());
    }
    let model = &info.cpu_model;
    let Some(ratios) = strategy.ratio_model.get(model) else {
        return Err(format!("no ratio for CPU {model}"));
    };
    let (ratio, name) = match (info.hyper_thread_enabled, info.turbo_enabled) {
        (true, true) => (
            ratios.hyper_thread_turbo_enabled_ratio,
            "HyperThreadTurboEnabledRatio",
        ),
        (true, false) => (ratios.hyper_thread_enabled_ratio, "HyperThreadEnabledRatio"),
        (false, true) => (ratios.turbo_enabled_ratio, "TurboEnabledRatio"),
        (false, false) => (ratios.base_ratio, "BaseRatio"),
    };
    ratio.ok_or_else(|| format!("missing {name} for CPU {model}"))
}

/// The model's ratio, else the strategy's `defaultRatio` (upstream
/// `getCPUNormalizationRatio`).
pub fn strategy_ratio(
    info: &CPUBasicInfo,
    strategy: &CPUNormalizationStrategy,
) -> Result<f64, String> {
    match ratio_from_model(info, strategy) {
        Ok(ratio) => Ok(ratio),
        Err(error) => strategy.default_ratio.ok_or_else(|| {
            format!("failed to get cpu normalization ratio from model, err: {error}")
        }),
    }
}

/// Refuses ratios outside `[MIN_RATIO, MAX_RATIO]` (and NaN).
pub fn validate_ratio(ratio: f64) -> Result<(), String> {
    if ratio.is_nan() {
        return Err("the ratio is not a number".to_owned());
    }
    if ratio < MIN_RATIO {
        return Err(format!(
            "the ratio is too small, cur[{ratio}] < min[{MIN_RATIO}]"
        ));
    }
    if ratio > MAX_RATIO {
        return Err(format!(
            "the ratio is too big, cur[{ratio}] > max[{MAX_RATIO}]"
        ));
    }
    Ok(())
}

/// The annotation text for the node (upstream `Calculate`). `strategy` is
/// the node's effective strategy (`Err`: the config key has never been
/// valid since start), `topology_annotations` those of the node's
/// NodeResourceTopology (`None`: there is none).
pub fn calculate(
    node_name: &str,
    strategy: Result<&CPUNormalizationStrategy, &str>,
    node_labels: &BTreeMap<String, String>,
    topology_annotations: Option<&BTreeMap<String, String>>,
) -> Result<String, NormalizationError> {
    let strategy =
        strategy.map_err(|reason| NormalizationError::ConfigUnavailable(reason.to_owned()))?;
    if !is_enabled(strategy, node_labels)? {
        return Ok(DEFAULT_RATIO_TEXT.to_owned());
    }
    let Some(annotations) = topology_annotations else {
        return Err(NormalizationError::TopologyMissing(node_name.to_owned()));
    };
    let info = get_cpu_basic_info(annotations)
        .map_err(|error| NormalizationError::BasicInfoInvalid(error.to_string()))?
        .ok_or(NormalizationError::BasicInfoMissing)?;
    let ratio = strategy_ratio(&info, strategy).map_err(NormalizationError::Ratio)?;
    validate_ratio(ratio).map_err(|reason| NormalizationError::OutOfRange { ratio, reason })?;
    Ok(format_cpu_normalization_ratio(ratio))
}

/// Upstream `NeedSyncMeta`: whether the annotation changes from `old` to
/// `new` enough to write, and why. Ratios closer than 0.01 are equal.
pub fn need_sync_meta(old: Option<&str>, new: Option<&str>) -> (bool, &'static str) {
    let read = |text: Option<&str>| -> Result<Option<f64>, ()> {
        let Some(text) = text else {
            return Ok(None);
        };
        let annotations = BTreeMap::from([(
            apis::extension::ANNOTATION_CPU_NORMALIZATION_RATIO.to_owned(),
            text.to_owned(),
        )]);
        get_cpu_normalization_ratio(&annotations).map_err(|_| ())
    };
    let Ok(old) = read(old) else {
        return (true, "old ratio parsed error");
    };
    let Ok(new) = read(new) else {
        return (false, "new ratio parsed error");
    };
    match (old, new) {
        (None, None) => (false, "ratios are nil"),
        (None, Some(_)) => (true, "old ratio is nil"),
        (Some(_), None) => (true, "new ratio is nil"),
        (Some(old), Some(new)) if !is_cpu_normalization_ratio_different(old, new) => {
            (false, "ratios are close")
        }
        (Some(_), Some(_)) => (true, "ratio is different"),
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    //! Cases transcribed from upstream's
    //! `noderesource/plugins/cpunormalization/plugin_test.go`.

    use super::*;
    use apis::configuration::{CPUNormalizationCfg, ModelRatioCfg};
    use apis::extension::ANNOTATION_CPU_BASIC_INFO;

    fn model(
        base: Option<f64>,
        turbo: Option<f64>,
        ht: Option<f64>,
        both: Option<f64>,
    ) -> ModelRatioCfg {
        ModelRatioCfg {
            base_ratio: base,
            turbo_enabled_ratio: turbo,
            hyper_thread_enabled_ratio: ht,
            hyper_thread_turbo_enabled_ratio: both,
        }
    }

    fn full_model() -> ModelRatioCfg {
        model(Some(1.5), Some(1.65), Some(1.0), Some(1.1))
    }

    fn strategy(enable: bool, models: &[(&str, ModelRatioCfg)]) -> CPUNormalizationStrategy {
        CPUNormalizationStrategy {
            enable: Some(enable),
            default_ratio: None,
            ratio_model: models
                .iter()
                .map(|(name, ratios)| ((*name).to_owned(), ratios.clone()))
                .collect(),
        }
    }

    fn info(model: &str, ht: bool, turbo: bool) -> CPUBasicInfo {
        CPUBasicInfo {
            cpu_model: model.to_owned(),
            hyper_thread_enabled: ht,
            turbo_enabled: turbo,
            ..CPUBasicInfo::default()
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn nrt_xxx() -> BTreeMap<String, String> {
        map(&[(
            ANNOTATION_CPU_BASIC_INFO,
            r#"{"cpuModel": "XXX", "hyperThreadEnabled": true, "turboEnabled": true}"#,
        )])
    }

    #[test]
    fn need_sync_meta_follows_upstream() {
        let cases: [(&str, Option<&str>, Option<&str>, bool, &str); 8] = [
            (
                "need sync when failed to parse old ratio",
                Some("[}"),
                Some("1.10"),
                true,
                "old ratio parsed error",
            ),
            (
                "abort sync when failed to parse new ratio",
                Some("1.10"),
                Some("[}"),
                false,
                "new ratio parsed error",
            ),
            (
                "no need sync when both have no ratio",
                None,
                None,
                false,
                "ratios are nil",
            ),
            (
                "need sync when old has no ratio",
                None,
                Some("1.10"),
                true,
                "old ratio is nil",
            ),
            (
                "need sync when new has no ratio",
                Some("1.10"),
                None,
                true,
                "new ratio is nil",
            ),
            (
                "skip sync when ratio is unchanged",
                Some("1.10"),
                Some("1.10"),
                false,
                "ratios are close",
            ),
            (
                "skip sync when ratio are close",
                Some("1.10"),
                Some("1.099999999"),
                false,
                "ratios are close",
            ),
            (
                "need sync when ratio is different",
                Some("1.10"),
                Some("1.20"),
                true,
                "ratio is different",
            ),
        ];
        for (name, old, new, want, reason) in cases {
            assert_eq!(need_sync_meta(old, new), (want, reason), "{name}");
        }
    }

    #[test]
    fn calculate_follows_upstream() {
        let no_labels = BTreeMap::new();
        let nrt = nrt_xxx();
        let disabled = strategy(false, &[]);
        let enabled_empty = strategy(true, &[]);
        type Case<'a> = (
            &'a str,
            Result<&'a CPUNormalizationStrategy, &'a str>,
            BTreeMap<String, String>,
            Option<&'a BTreeMap<String, String>>,
            Result<&'a str, ()>,
        );
        let only_base = strategy(true, &[("XXX", model(Some(1.0), None, None, None))]);
        let too_big = strategy(true, &[("XXX", model(None, None, None, Some(10.0)))]);
        let full = strategy(true, &[("XXX", full_model())]);
        let full_disabled = strategy(false, &[("XXX", full_model())]);
        let no_info = BTreeMap::new();
        let bad_info = map(&[(ANNOTATION_CPU_BASIC_INFO, "{]")]);
        let cases: Vec<Case<'_>> = vec![
            (
                "get configmap cache failed",
                Err("never valid"),
                no_labels.clone(),
                Some(&nrt),
                Err(()),
            ),
            (
                "failed to get node config",
                Ok(&disabled),
                map(&[(apis::extension::LABEL_CPU_NORMALIZATION_ENABLED, "{]")]),
                Some(&nrt),
                Err(()),
            ),
            (
                "node strategy is disabled",
                Ok(&disabled),
                no_labels.clone(),
                None,
                Ok("1.00"),
            ),
            (
                "failed to get NRT",
                Ok(&enabled_empty),
                no_labels.clone(),
                None,
                Err(()),
            ),
            (
                "failed to get CPUBasicInfo",
                Ok(&enabled_empty),
                no_labels.clone(),
                Some(&no_info),
                Err(()),
            ),
            (
                "failed to parse CPUBasicInfo",
                Ok(&enabled_empty),
                no_labels.clone(),
                Some(&bad_info),
                Err(()),
            ),
            (
                "failed to get ratio",
                Ok(&only_base),
                no_labels.clone(),
                Some(&nrt),
                Err(()),
            ),
            (
                "failed to validate ratio",
                Ok(&too_big),
                no_labels.clone(),
                Some(&nrt),
                Err(()),
            ),
            (
                "get ratio correctly",
                Ok(&full),
                no_labels.clone(),
                Some(&nrt),
                Ok("1.10"),
            ),
            (
                "get ratio when strategy disable but not enabled",
                Ok(&full_disabled),
                map(&[(apis::extension::LABEL_CPU_NORMALIZATION_ENABLED, "true")]),
                Some(&nrt),
                Ok("1.10"),
            ),
            (
                "strategy enabled but node disabled",
                Ok(&full),
                map(&[(apis::extension::LABEL_CPU_NORMALIZATION_ENABLED, "false")]),
                Some(&nrt),
                Ok("1.00"),
            ),
        ];
        for (name, strategy, labels, topology, want) in cases {
            let got = calculate("test-node", strategy, &labels, topology);
            match want {
                Ok(text) => assert_eq!(got.as_deref(), Ok(text), "{name}"),
                Err(()) => assert!(got.is_err(), "{name}: {got:?}"),
            }
        }
    }

    /// Upstream case "get ratio correctly 1": the first matching node config
    /// is merged over a disabled cluster strategy.
    #[test]
    fn a_node_config_overrides_the_cluster_strategy() {
        let cfg: CPUNormalizationCfg = serde_json::from_value(serde_json::json!({
            "enable": false,
            "ratioModel": {"XXX": {"baseRatio": 1.0, "turboEnabledRatio": 1.0,
                "hyperThreadEnabledRatio": 1.0, "hyperThreadTurboEnabledRatio": 1.0}},
            "nodeConfigs": [{
                "nodeSelector": {"matchLabels": {"xxx": "yyy"}},
                "enable": true,
                "ratioModel": {"XXX": {"baseRatio": 1.5, "turboEnabledRatio": 1.65,
                    "hyperThreadEnabledRatio": 1.0, "hyperThreadTurboEnabledRatio": 1.1}}
            }]
        }))
        .unwrap();
        let labels = map(&[("xxx", "yyy")]);
        let strategy = cfg.strategy_for_node(&labels);
        let nrt = nrt_xxx();
        assert_eq!(
            calculate("test-node-1", Ok(&strategy), &labels, Some(&nrt)).as_deref(),
            Ok("1.10")
        );
        // Another node keeps the disabled cluster strategy.
        let other = cfg.strategy_for_node(&BTreeMap::new());
        assert_eq!(
            calculate("test-node-2", Ok(&other), &BTreeMap::new(), Some(&nrt)).as_deref(),
            Ok(DEFAULT_RATIO_TEXT)
        );
    }

    #[test]
    fn ratio_from_model_follows_upstream() {
        let xxx = |ratios: ModelRatioCfg| strategy(true, &[("CPU XXX", ratios)]);
        let cases: Vec<(
            &str,
            CPUBasicInfo,
            CPUNormalizationStrategy,
            Result<f64, ()>,
        )> = vec![
            (
                "nil model",
                info("", false, false),
                strategy(true, &[]),
                Err(()),
            ),
            (
                "no ratio for model",
                info("CPU XXX", false, false),
                strategy(true, &[("CPU YYY", model(Some(1.0), None, None, None))]),
                Err(()),
            ),
            (
                "missing ratio for Turbo and HT on",
                info("CPU XXX", true, true),
                xxx(model(Some(1.5), None, None, None)),
                Err(()),
            ),
            (
                "got ratio for Turbo and HT on",
                info("CPU XXX", true, true),
                xxx(full_model()),
                Ok(1.1),
            ),
            (
                "got ratio for HT on",
                info("CPU XXX", true, false),
                xxx(full_model()),
                Ok(1.0),
            ),
            (
                "got ratio for Turbo on",
                info("CPU XXX", false, true),
                xxx(full_model()),
                Ok(1.65),
            ),
            (
                "got ratio for basic setting",
                info("CPU XXX", false, false),
                xxx(full_model()),
                Ok(1.5),
            ),
            (
                "missing ratio for basic setting",
                info("CPU XXX", false, false),
                xxx(ModelRatioCfg::default()),
                Err(()),
            ),
        ];
        for (name, info, strategy, want) in cases {
            let got = ratio_from_model(&info, &strategy);
            match want {
                Ok(ratio) => assert_eq!(got, Ok(ratio), "{name}"),
                Err(()) => assert!(got.is_err(), "{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn the_default_ratio_covers_models_without_a_ratio() {
        let with_default =
            |default: Option<f64>, models: &[(&str, ModelRatioCfg)]| CPUNormalizationStrategy {
                default_ratio: default,
                ..strategy(true, models)
            };
        let cases: Vec<(
            &str,
            CPUBasicInfo,
            CPUNormalizationStrategy,
            Result<f64, ()>,
        )> = vec![
            (
                "nil model and nil default ratio",
                info("", false, false),
                with_default(None, &[]),
                Err(()),
            ),
            (
                "nil model and valid default ratio",
                info("", false, false),
                with_default(Some(2.5), &[]),
                Ok(2.5),
            ),
            (
                "model takes precedence over the default ratio",
                info("CPU XXX", false, false),
                with_default(
                    Some(3.5),
                    &[(
                        "CPU XXX",
                        model(Some(1.9), Some(1.65), Some(1.0), Some(1.1)),
                    )],
                ),
                Ok(1.9),
            ),
            (
                "use the default ratio with invalid model",
                info("CPU XXX", false, false),
                with_default(Some(2.2), &[("CPU XXX", ModelRatioCfg::default())]),
                Ok(2.2),
            ),
        ];
        for (name, info, strategy, want) in cases {
            let got = strategy_ratio(&info, &strategy);
            match want {
                Ok(ratio) => assert_eq!(got, Ok(ratio), "{name}"),
                Err(()) => assert!(got.is_err(), "{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn ratios_are_bounded_and_printed_with_two_decimals() {
        assert!(validate_ratio(0.99).is_err());
        assert!(validate_ratio(5.01).is_err());
        assert!(validate_ratio(f64::NAN).is_err());
        assert!(validate_ratio(1.0).is_ok() && validate_ratio(5.0).is_ok());
        assert_eq!(format_cpu_normalization_ratio(1.1), "1.10");
        assert_eq!(format_cpu_normalization_ratio(1.23456), "1.23");
    }
}

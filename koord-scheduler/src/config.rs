//! The scheduler configuration file: a `KubeSchedulerConfiguration` subset
//! (profiles, plugin enable/disable with weights, `pluginConfig` args) with
//! upstream's plugin names, arg names and defaults.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use apis::extension::duration::GoDuration;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;

use crate::resources::{Resources, bound_amount};

/// Errors reading or validating the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read scheduler config {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed scheduler config: {0}")]
    Malformed(#[source] apis::yaml::YamlError),
    #[error("invalid args for plugin {plugin}: {message}")]
    InvalidArgs { plugin: String, message: String },
    #[error("unknown plugin {0:?}")]
    UnknownPlugin(String),
}

/// `KubeSchedulerConfiguration` (only what this scheduler reads).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerConfiguration {
    #[serde(default)]
    pub profiles: Vec<Profile>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    #[serde(default)]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub plugins: Option<Plugins>,
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

/// Extension points; the extender maps preFilter/filter/score/reserve/preBind.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    #[serde(default)]
    pub multi_point: PluginSet,
    #[serde(default)]
    pub pre_filter: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub reserve: PluginSet,
    #[serde(default)]
    pub pre_bind: PluginSet,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct PluginSet {
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PluginRef {
    pub name: String,
    #[serde(default)]
    pub weight: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default)]
    pub args: serde_json::Value,
}

impl SchedulerConfiguration {
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        apis::yaml::from_str(text, &apis::yaml::Limits::CONFIG).map_err(ConfigError::Malformed)
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml(&text)
    }

    /// The first profile (the extender serves one).
    pub fn profile(&self) -> Profile {
        self.profiles.first().cloned().unwrap_or_default()
    }
}

impl Profile {
    pub fn args_for(&self, plugin: &str) -> Option<&serde_json::Value> {
        self.plugin_config
            .iter()
            .find(|c| c.name == plugin)
            .map(|c| &c.args)
            .filter(|a| !a.is_null())
    }
}

/// Parses a plugin's args (absent → all defaults).
pub fn parse_args<T: serde::de::DeserializeOwned + Default>(
    plugin: &str,
    args: Option<&serde_json::Value>,
) -> Result<T, ConfigError> {
    match args {
        None => Ok(T::default()),
        // Through `null_as_empty`, as the file they came from.
        Some(value) => {
            apis::yaml::null_as_empty::deserialize(value).map_err(|e| ConfigError::InvalidArgs {
                plugin: plugin.to_string(),
                message: e.to_string(),
            })
        }
    }
}

/// `LoadAwareSchedulingArgs.aggregated`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LoadAwareAggregatedArgs {
    #[serde(default)]
    pub usage_thresholds: BTreeMap<String, i64>,
    #[serde(default)]
    pub usage_aggregation_type: Option<String>,
    #[serde(default)]
    pub usage_aggregated_duration: Option<GoDuration>,
    #[serde(default)]
    pub score_aggregation_type: Option<String>,
    #[serde(default)]
    pub score_aggregated_duration: Option<GoDuration>,
}

/// `LoadAwareSchedulingArgs` as written; see [`LoadAwareArgs`] for the defaulted form.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadAwareSchedulingArgs {
    pub filter_expired_node_metrics: Option<bool>,
    pub node_metric_expiration_seconds: Option<i64>,
    pub enable_schedule_when_node_metrics_expired: Option<bool>,
    #[serde(default)]
    pub resource_weights: BTreeMap<String, i64>,
    #[serde(default)]
    pub dominant_resource_weight: i64,
    #[serde(default)]
    pub usage_thresholds: BTreeMap<String, i64>,
    #[serde(default)]
    pub prod_usage_thresholds: BTreeMap<String, i64>,
    #[serde(default)]
    pub prod_usage_include_sys: bool,
    pub score_according_prod_usage: Option<bool>,
    #[serde(default)]
    pub estimator: String,
    pub estimated_scaling_factors: Option<BTreeMap<String, i64>>,
    pub estimated_seconds_after_pod_scheduled: Option<i64>,
    pub estimated_seconds_after_initialized: Option<i64>,
    #[serde(default)]
    pub allow_customize_estimation: bool,
    pub aggregated: Option<LoadAwareAggregatedArgs>,
    #[serde(default)]
    pub supported_resources: Vec<String>,
}

/// LoadAwareScheduling args with upstream's defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadAwareArgs {
    pub filter_expired_node_metrics: bool,
    pub node_metric_expiration_seconds: i64,
    pub enable_schedule_when_node_metrics_expired: bool,
    pub resource_weights: BTreeMap<String, i64>,
    pub dominant_resource_weight: i64,
    pub usage_thresholds: BTreeMap<String, i64>,
    pub prod_usage_thresholds: BTreeMap<String, i64>,
    pub prod_usage_include_sys: bool,
    pub score_according_prod_usage: bool,
    pub estimated_scaling_factors: BTreeMap<String, i64>,
    pub estimated_seconds_after_pod_scheduled: Option<i64>,
    pub estimated_seconds_after_initialized: Option<i64>,
    pub allow_customize_estimation: bool,
    pub aggregated: Option<LoadAwareAggregatedArgs>,
}

fn pairs(entries: &[(&str, i64)]) -> BTreeMap<String, i64> {
    entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

impl LoadAwareSchedulingArgs {
    /// Applies upstream's `SetDefaults_LoadAwareSchedulingArgs` and validates.
    pub fn with_defaults(self) -> Result<LoadAwareArgs, ConfigError> {
        let invalid = |message: String| ConfigError::InvalidArgs {
            plugin: "LoadAwareScheduling".into(),
            message,
        };
        let mut resource_weights = self.resource_weights;
        if resource_weights.is_empty() && self.dominant_resource_weight == 0 {
            resource_weights = pairs(&[("cpu", 1), ("memory", 1)]);
        }
        let usage_thresholds = if self.usage_thresholds.is_empty() {
            pairs(&[("cpu", 65), ("memory", 95)])
        } else {
            self.usage_thresholds
        };
        let mut factors = self.estimated_scaling_factors.unwrap_or_default();
        for (name, value) in [("cpu", 85), ("memory", 70)] {
            factors.entry(name.to_string()).or_insert(value);
        }
        for (what, map) in [
            ("usageThresholds", &usage_thresholds),
            ("prodUsageThresholds", &self.prod_usage_thresholds),
            ("estimatedScalingFactors", &factors),
        ] {
            if let Some((name, value)) = map.iter().find(|(_, v)| !(0..=100).contains(*v)) {
                return Err(invalid(format!(
                    "{what}[{name}]={value} must be within 0..100"
                )));
            }
        }
        if let Some((name, value)) = resource_weights
            .iter()
            .find(|(_, v)| !(0..=100).contains(*v))
        {
            return Err(invalid(format!(
                "resourceWeights[{name}]={value} must be within 0..100"
            )));
        }
        let expiration = self.node_metric_expiration_seconds.unwrap_or(180);
        if expiration < 0 {
            return Err(invalid(format!(
                "nodeMetricExpirationSeconds={expiration} must not be negative"
            )));
        }
        Ok(LoadAwareArgs {
            filter_expired_node_metrics: self.filter_expired_node_metrics.unwrap_or(true),
            node_metric_expiration_seconds: expiration,
            enable_schedule_when_node_metrics_expired: self
                .enable_schedule_when_node_metrics_expired
                .unwrap_or(false),
            resource_weights,
            dominant_resource_weight: self.dominant_resource_weight,
            usage_thresholds,
            prod_usage_thresholds: self.prod_usage_thresholds,
            prod_usage_include_sys: self.prod_usage_include_sys,
            score_according_prod_usage: self.score_according_prod_usage.unwrap_or(false),
            estimated_scaling_factors: factors,
            estimated_seconds_after_pod_scheduled: self.estimated_seconds_after_pod_scheduled,
            estimated_seconds_after_initialized: self.estimated_seconds_after_initialized,
            allow_customize_estimation: self.allow_customize_estimation,
            aggregated: self.aggregated,
        })
    }
}

impl Default for LoadAwareArgs {
    fn default() -> Self {
        // Defaulting an empty args object cannot fail.
        match LoadAwareSchedulingArgs::default().with_defaults() {
            Ok(args) => args,
            Err(_) => unreachable!("defaults are valid"),
        }
    }
}

/// `ElasticQuotaArgs` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElasticQuotaArgsRaw {
    pub delay_evict_time: Option<GoDuration>,
    pub revoke_pod_interval: Option<GoDuration>,
    pub default_quota_group_max: Option<BTreeMap<String, Quantity>>,
    pub system_quota_group_max: Option<BTreeMap<String, Quantity>>,
    #[serde(default)]
    pub quota_group_namespace: String,
    pub monitor_all_quotas: Option<bool>,
    pub enable_check_parent_quota: Option<bool>,
    pub enable_runtime_quota: Option<bool>,
    pub enable_min_quota_scale: Option<bool>,
    pub disable_default_quota_preemption: Option<bool>,
    pub enable_queue_hint: Option<bool>,
    pub quota_snapshot_update_interval: Option<GoDuration>,
}

/// ElasticQuota args with upstream's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ElasticQuotaArgs {
    pub delay_evict_time: Duration,
    pub revoke_pod_interval: Duration,
    /// Read exactly at start (see [`quota_group_max`]).
    pub default_quota_group_max: Resources,
    pub system_quota_group_max: Resources,
    pub quota_group_namespace: String,
    pub monitor_all_quotas: bool,
    pub enable_check_parent_quota: bool,
    pub enable_runtime_quota: bool,
    pub enable_min_quota_scale: bool,
    pub disable_default_quota_preemption: bool,
    /// How often quota status annotations may be written (upstream: every 1s).
    pub status_update_interval: Duration,
}

/// math.MaxInt64 / 5, upstream's default max of the built-in quotas.
pub const BUILTIN_QUOTA_MAX: i64 = i64::MAX / 5;

/// The built-in quotas' max when the args give none: upstream's
/// MaxInt64/5 cores and bytes (the cores beyond what milli-cores in 64 bits
/// hold, so the most they hold).
pub fn builtin_quota_max() -> Resources {
    let mut max = Resources::new();
    max.set("cpu", BUILTIN_QUOTA_MAX.saturating_mul(1000));
    max.set("memory", BUILTIN_QUOTA_MAX);
    max
}

/// A built-in quota's max from the args: absent or empty is
/// [`builtin_quota_max`]; each amount must parse and not be negative, or
/// the args are refused naming `field`, the resource and the value. An
/// amount beyond what 64 bits count (upstream's own MaxInt64/5 cores, in
/// milli-cores) bounds nothing and holds the most an `i64` holds.
pub fn quota_group_max(
    list: Option<BTreeMap<String, Quantity>>,
    field: &str,
) -> Result<Resources, ConfigError> {
    let Some(list) = list.filter(|m| !m.is_empty()) else {
        return Ok(builtin_quota_max());
    };
    let mut max = Resources::new();
    for (name, quantity) in &list {
        let amount = match bound_amount(name, quantity) {
            Ok(amount) => amount,
            Err(reason) => {
                return Err(ConfigError::InvalidArgs {
                    plugin: "ElasticQuota".into(),
                    message: format!("{field} {name}: {reason}"),
                });
            }
        };
        max.set(name, amount);
    }
    Ok(max)
}

impl ElasticQuotaArgsRaw {
    /// Upstream's defaults for what is not set; a built-in max that is not
    /// an exact amount is an error (see [`quota_group_max`]).
    pub fn with_defaults(mut self) -> Result<ElasticQuotaArgs, ConfigError> {
        let default_max =
            quota_group_max(self.default_quota_group_max.take(), "defaultQuotaGroupMax")?;
        let system_max =
            quota_group_max(self.system_quota_group_max.take(), "systemQuotaGroupMax")?;
        Ok(self.into_args(default_max, system_max))
    }

    fn into_args(self, default_max: Resources, system_max: Resources) -> ElasticQuotaArgs {
        let duration = |d: Option<GoDuration>, default: Duration| {
            d.and_then(GoDuration::to_std).unwrap_or(default)
        };
        ElasticQuotaArgs {
            delay_evict_time: duration(self.delay_evict_time, Duration::from_secs(120)),
            revoke_pod_interval: duration(self.revoke_pod_interval, Duration::from_secs(1)),
            default_quota_group_max: default_max,
            system_quota_group_max: system_max,
            quota_group_namespace: if self.quota_group_namespace.is_empty() {
                "koordinator-system".to_string()
            } else {
                self.quota_group_namespace
            },
            monitor_all_quotas: self.monitor_all_quotas.unwrap_or(false),
            enable_check_parent_quota: self.enable_check_parent_quota.unwrap_or(false),
            enable_runtime_quota: self.enable_runtime_quota.unwrap_or(true),
            enable_min_quota_scale: self.enable_min_quota_scale.unwrap_or(true),
            disable_default_quota_preemption: self.disable_default_quota_preemption.unwrap_or(true),
            status_update_interval: Duration::from_secs(1),
        }
    }
}

impl Default for ElasticQuotaArgs {
    fn default() -> Self {
        ElasticQuotaArgsRaw::default().into_args(builtin_quota_max(), builtin_quota_max())
    }
}

/// `NodeResourcesFitPlusArgs.resources[name]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ResourcesType {
    #[serde(rename = "type")]
    pub scoring_type: String,
    pub weight: i64,
}

/// `NodeResourcesFitPlusArgs`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct NodeResourcesFitPlusArgs {
    #[serde(default)]
    pub resources: BTreeMap<String, ResourcesType>,
}

/// `ScarceResourceAvoidanceArgs`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ScarceResourceAvoidanceArgs {
    #[serde(default)]
    pub resources: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused_for_their_budget() {
        use apis::yaml::hostile;
        for text in [
            hostile::alias_bomb(),
            hostile::deep_flow(10_000),
            hostile::deep_block(10_000),
        ] {
            match SchedulerConfiguration::from_yaml(&text) {
                Err(ConfigError::Malformed(error)) => assert!(error.is_budget(), "{error}"),
                other => panic!("not refused for its budget: {other:?}"),
            }
        }
    }

    #[test]
    fn empty_plugin_args_read_as_empty() {
        let args: serde_json::Value =
            apis::yaml::from_str("resources:\n", &apis::yaml::Limits::CONFIG).unwrap();
        assert!(args["resources"].is_null());
        let scarce: ScarceResourceAvoidanceArgs =
            parse_args("ScarceResourceAvoidance", Some(&args)).unwrap();
        assert!(scarce.resources.is_empty());
        let fit_plus: NodeResourcesFitPlusArgs =
            parse_args("NodeResourcesFitPlus", Some(&args)).unwrap();
        assert!(fit_plus.resources.is_empty());
        // A wrong type is still refused.
        let wrong = serde_json::json!({"resources": "gpu"});
        assert!(
            parse_args::<ScarceResourceAvoidanceArgs>("ScarceResourceAvoidance", Some(&wrong))
                .is_err()
        );
    }

    #[test]
    fn load_aware_defaults_match_upstream() {
        let args = LoadAwareArgs::default();
        assert!(args.filter_expired_node_metrics);
        assert_eq!(args.node_metric_expiration_seconds, 180);
        assert!(!args.enable_schedule_when_node_metrics_expired);
        assert_eq!(args.resource_weights, pairs(&[("cpu", 1), ("memory", 1)]));
        assert_eq!(args.usage_thresholds, pairs(&[("cpu", 65), ("memory", 95)]));
        assert_eq!(
            args.estimated_scaling_factors,
            pairs(&[("cpu", 85), ("memory", 70)])
        );
    }

    #[test]
    fn partial_scaling_factors_are_completed_and_bad_thresholds_rejected() {
        let raw: LoadAwareSchedulingArgs =
            serde_json::from_value(serde_json::json!({"estimatedScalingFactors": {"cpu": 50}}))
                .unwrap();
        let args = raw.with_defaults().unwrap();
        assert_eq!(
            args.estimated_scaling_factors,
            pairs(&[("cpu", 50), ("memory", 70)])
        );
        let raw: LoadAwareSchedulingArgs =
            serde_json::from_value(serde_json::json!({"usageThresholds": {"cpu": 150}})).unwrap();
        assert!(raw.with_defaults().is_err());
    }

    #[test]
    fn profile_reads_plugins_and_args() {
        let config = SchedulerConfiguration::from_yaml(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: koord-scheduler
  plugins:
    score:
      enabled:
      - name: LoadAwareScheduling
        weight: 3
  pluginConfig:
  - name: ElasticQuota
    args:
      quotaGroupNamespace: quotas
      enableRuntimeQuota: false
"#,
        )
        .unwrap();
        let profile = config.profile();
        let quota: ElasticQuotaArgsRaw =
            parse_args("ElasticQuota", profile.args_for("ElasticQuota")).unwrap();
        let quota = quota.with_defaults().unwrap();
        assert_eq!(quota.quota_group_namespace, "quotas");
        assert!(!quota.enable_runtime_quota);
        assert_eq!(quota.delay_evict_time, Duration::from_secs(120));
        assert_eq!(profile.plugins.unwrap().score.enabled[0].weight, Some(3));
        assert!(SchedulerConfiguration::from_yaml("profiles: 3").is_err());
    }
}

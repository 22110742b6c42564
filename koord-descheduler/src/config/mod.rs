//! The descheduler's configuration file (`--config`): upstream's
//! `DeschedulerConfiguration` in `descheduler/v1alpha2`, decoded strictly,
//! defaulted and validated as upstream does, then turned into the settings
//! the decision cores read ([`Profile`], [`LowNodeLoadConfig`]).

pub(crate) mod defaults;
pub mod error;
pub mod settings;
pub mod types;
pub mod validate;

use std::time::Duration;

use apis::extension::duration::GoDuration;

pub use defaults::{
    DEFAULT_DESCHEDULER_NAME, DEFAULT_INSECURE_PORT, DEFAULT_NODE_POOL_NAME, default_configuration,
};
pub use error::{ConfigError, MAX_CONFIG_BYTES};
pub use settings::{AnomalyCondition, Configuration, LowNodeLoadConfig, NodePoolConfig, Profile};
use types::*;
pub use types::{API_VERSION, KIND, LOW_NODE_LOAD, MIGRATION_CONTROLLER};

/// The deepest nesting accepted in the file.
pub const MAX_NESTING: usize = 64;

/// Reads and loads the file at `path`.
pub fn load_file(path: &std::path::Path) -> Result<Configuration, ConfigError> {
    let read_error = |reason: String| ConfigError::Read {
        path: path.display().to_string(),
        reason,
    };
    let metadata = std::fs::metadata(path).map_err(|err| read_error(err.to_string()))?;
    if metadata.len() > MAX_CONFIG_BYTES as u64 {
        return Err(ConfigError::TooLarge);
    }
    let text = std::fs::read_to_string(path).map_err(|err| read_error(err.to_string()))?;
    load(&text)
}

/// Decodes, defaults and validates a configuration (YAML or JSON).
pub fn load(text: &str) -> Result<Configuration, ConfigError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge);
    }
    let apis::yaml::null_as_empty::EmptyOnNull::<DeschedulerConfiguration>(file) =
        serde_saphyr::from_str_with_options(text, yaml_options(text))
            .map_err(|err| ConfigError::Decode(err.to_string()))?;
    from_file(file)
}

/// Defaults and validates an already decoded file.
pub fn from_file(mut file: DeschedulerConfiguration) -> Result<Configuration, ConfigError> {
    if file.api_version != API_VERSION {
        return Err(ConfigError::ApiVersion {
            found: file.api_version,
        });
    }
    if file.kind != KIND {
        return Err(ConfigError::Kind { found: file.kind });
    }
    let mut decoded = decode_plugin_args(&file)?;
    defaults::set_defaults(&mut file, &mut decoded)?;
    let profiles = build_profiles(&file, decoded)?;
    let mut errors = validate::validate_configuration(&file);
    for (index, profile) in profiles.iter().enumerate() {
        let path = format!("profiles[{index}]");
        errors.extend(validate::validate_migration_controller_args(
            &format!("{path}.pluginConfig[{MIGRATION_CONTROLLER}].args"),
            &profile.migration_controller,
        ));
        if let Some(low_node_load) = &profile.low_node_load {
            errors.extend(validate::validate_low_node_load(
                &format!("{path}.pluginConfig[{LOW_NODE_LOAD}].args"),
                low_node_load,
            ));
        }
    }
    if !errors.is_empty() {
        return Err(ConfigError::Invalid(errors));
    }
    Ok(Configuration { file, profiles })
}

fn decode_plugin_args(file: &DeschedulerConfiguration) -> Result<Vec<DecodedArgs>, ConfigError> {
    let mut all = Vec::with_capacity(file.profiles.len());
    for (profile_index, profile) in file.profiles.iter().enumerate() {
        let mut decoded = DecodedArgs::default();
        for (index, config) in profile.plugin_config.iter().enumerate() {
            let fail = |reason: String| ConfigError::PluginArgs {
                profile: profile_index,
                index,
                plugin: config.name.clone(),
                reason,
            };
            let args = config
                .args
                .clone()
                .unwrap_or(serde_json::Value::Object(Default::default()));
            match config.name.as_str() {
                LOW_NODE_LOAD => {
                    let typed: LowNodeLoadArgs = decode_args(args, LOW_NODE_LOAD).map_err(fail)?;
                    decoded.low_node_load = Some(typed);
                }
                MIGRATION_CONTROLLER => {
                    let typed: MigrationControllerArgs =
                        decode_args(args, MIGRATION_CONTROLLER).map_err(fail)?;
                    decoded.migration_controller = Some(typed);
                }
                // Args of plugins this build does not implement stay as written.
                _ => {}
            }
        }
        all.push(decoded);
    }
    Ok(all)
}

fn decode_args<T: serde::de::DeserializeOwned>(
    args: serde_json::Value,
    plugin: &str,
) -> Result<T, String> {
    let expected_kind = format!("{plugin}Args");
    if let Some(kind) = args.get("kind").and_then(|kind| kind.as_str())
        && kind != expected_kind
    {
        return Err(format!("args are of kind {kind:?}, not {expected_kind:?}"));
    }
    if let Some(version) = args.get("apiVersion").and_then(|v| v.as_str())
        && version != API_VERSION
    {
        return Err(format!(
            "apiVersion {version:?} is not supported: use {API_VERSION:?}"
        ));
    }
    apis::yaml::null_as_empty::deserialize(args).map_err(|err| err.to_string())
}

fn build_profiles(
    file: &DeschedulerConfiguration,
    decoded: Vec<DecodedArgs>,
) -> Result<Vec<Profile>, ConfigError> {
    let mut profiles = Vec::with_capacity(file.profiles.len());
    for (profile, args) in file.profiles.iter().zip(decoded) {
        let plugins = profile.plugins.clone().unwrap_or_default();
        let low_node_load_enabled = plugins
            .balance
            .enabled
            .iter()
            .any(|plugin| plugin.name == LOW_NODE_LOAD);
        let low_node_load = match (low_node_load_enabled, args.low_node_load) {
            (true, Some(args)) => Some(convert_low_node_load(args)),
            _ => None,
        };
        profiles.push(Profile {
            name: profile.name.clone(),
            node_selector: profile.node_selector.clone(),
            plugins,
            low_node_load,
            migration_controller: args.migration_controller.unwrap_or_default(),
        });
    }
    Ok(profiles)
}

/// Upstream's v1alpha2 → internal conversion of `LowNodeLoadArgs`.
fn convert_low_node_load(args: LowNodeLoadArgs) -> LowNodeLoadConfig {
    let anomaly = |condition: Option<LoadAnomalyCondition>| {
        condition.map(|condition| AnomalyCondition {
            timeout: condition
                .timeout
                .and_then(GoDuration::to_std)
                .unwrap_or(Duration::ZERO),
            consecutive_abnormalities: condition.consecutive_abnormalities,
            consecutive_normalities: condition.consecutive_normalities,
        })
    };
    let default_pool = NodePoolConfig {
        name: DEFAULT_NODE_POOL_NAME.to_string(),
        node_selector: args.node_selector.clone(),
        use_deviation_thresholds: args.use_deviation_thresholds.unwrap_or(false),
        low_thresholds: args.low_thresholds.clone().unwrap_or_default(),
        high_thresholds: args.high_thresholds.clone().unwrap_or_default(),
        prod_low_thresholds: args.prod_low_thresholds.clone().unwrap_or_default(),
        prod_high_thresholds: args.prod_high_thresholds.clone().unwrap_or_default(),
        resource_weights: args.resource_weights.clone().unwrap_or_default(),
        anomaly_condition: anomaly(args.anomaly_condition.clone()),
    };
    let mut node_pools = vec![default_pool];
    node_pools.extend(args.node_pools.into_iter().map(|pool| NodePoolConfig {
        name: pool.name,
        node_selector: pool.node_selector,
        use_deviation_thresholds: pool.use_deviation_thresholds,
        low_thresholds: pool.low_thresholds.unwrap_or_default(),
        high_thresholds: pool.high_thresholds.unwrap_or_default(),
        prod_low_thresholds: pool.prod_low_thresholds.unwrap_or_default(),
        prod_high_thresholds: pool.prod_high_thresholds.unwrap_or_default(),
        resource_weights: pool.resource_weights.unwrap_or_default(),
        anomaly_condition: anomaly(pool.anomaly_condition),
    }));
    LowNodeLoadConfig {
        paused: args.paused.unwrap_or(false),
        dry_run: args.dry_run.unwrap_or(false),
        number_of_nodes: args.number_of_nodes.unwrap_or(0),
        node_metric_expiration_seconds: args.node_metric_expiration_seconds,
        evictable_namespaces: args.evictable_namespaces,
        pod_selectors: args
            .pod_selectors
            .into_iter()
            .filter_map(|selector| selector.selector)
            .collect(),
        node_fit: args.node_fit.unwrap_or(true),
        detector_cache_timeout: args
            .detector_cache_timeout
            .and_then(GoDuration::to_std)
            .unwrap_or(Duration::ZERO),
        node_pools,
    }
}

/// serde-saphyr's options for the file: budgets against alias bombs and deep
/// nesting, and repeated keys refused as upstream's strict decoder does.
fn yaml_options(text: &str) -> serde_saphyr::Options {
    let linear = text.len().saturating_add(1024);
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_NESTING,
            flow_nesting_limit: MAX_NESTING,
            max_events: linear,
            max_nodes: linear,
            max_documents: 1,
            max_total_scalar_bytes: linear,
        },
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        strict_booleans: true,
        with_snippet: false,
    }
}

#[cfg(test)]
mod tests;

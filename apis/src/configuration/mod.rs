//! The `slo-controller-config` ConfigMap: one JSON document per key, each a
//! cluster strategy plus node-level overrides selected by node labels.
//!
//! - [`types`]: the JSON shape of every key (upstream
//!   `apis/configuration/slo_controller_config.go`);
//! - [`defaults`]: upstream's built-in values (`pkg/util/sloconfig`);
//! - [`SloControllerConfig`]: parsing and writing the ConfigMap data;
//! - [`validate`]: the checks of upstream's ConfigMap admission webhook, all
//!   reported at once with their paths;
//! - [`merge`]: `default ← clusterStrategy ← matching nodeStrategy`;
//! - [`selector`]: label selector matching.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub mod defaults;
pub mod latency_protection;
pub mod merge;
pub mod selector;
pub mod types;
pub mod validate;

pub use defaults::*;
pub use latency_protection::*;
pub use merge::*;
pub use selector::*;
pub use types::*;
pub use validate::*;

/// Key of [`ColocationCfg`].
pub const COLOCATION_CONFIG_KEY: &str = "colocation-config";
/// Key of [`ResourceThresholdCfg`].
pub const RESOURCE_THRESHOLD_CONFIG_KEY: &str = "resource-threshold-config";
/// Key of [`ResourceQOSCfg`].
pub const RESOURCE_QOS_CONFIG_KEY: &str = "resource-qos-config";
/// Key of [`CPUBurstCfg`].
pub const CPU_BURST_CONFIG_KEY: &str = "cpu-burst-config";
/// Key of [`SystemCfg`].
pub const SYSTEM_CONFIG_KEY: &str = "system-config";
/// Key of [`HostApplicationCfg`].
pub const HOST_APPLICATION_CONFIG_KEY: &str = "host-application-config";
/// Key of [`CPUNormalizationCfg`].
pub const CPU_NORMALIZATION_CONFIG_KEY: &str = "cpu-normalization-config";
/// Key of [`ResourceAmplificationCfg`].
pub const RESOURCE_AMPLIFICATION_CONFIG_KEY: &str = "resource-amplification-config";

/// Every key upstream defines, in upstream's order.
pub const ALL_CONFIG_KEYS: [&str; 8] = [
    COLOCATION_CONFIG_KEY,
    RESOURCE_THRESHOLD_CONFIG_KEY,
    RESOURCE_QOS_CONFIG_KEY,
    CPU_BURST_CONFIG_KEY,
    SYSTEM_CONFIG_KEY,
    HOST_APPLICATION_CONFIG_KEY,
    CPU_NORMALIZATION_CONFIG_KEY,
    RESOURCE_AMPLIFICATION_CONFIG_KEY,
];

/// Default name of the ConfigMap (koord-manager flag `--slo-config-name`).
pub const DEFAULT_SLO_CONTROLLER_CONFIG_NAME: &str = "slo-controller-config";
/// Default namespace of the ConfigMap (koord-manager flag `--config-namespace`).
pub const DEFAULT_CONFIG_NAMESPACE: &str = "koordinator-system";

/// The most one key's JSON document may hold: all of a ConfigMap's data
/// together may not exceed 1 MiB in Kubernetes.
pub const MAX_CONFIG_VALUE_BYTES: usize = 1024 * 1024;

/// The deepest nesting of objects and arrays a key's JSON document may have.
/// Upstream's documents nest at most about six levels deep.
pub const MAX_CONFIG_VALUE_DEPTH: usize = 32;

/// A key whose value is not valid JSON for its type.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {source}")]
pub struct ConfigKeyError {
    /// The ConfigMap key, e.g. `resource-threshold-config`.
    pub key: String,
    #[source]
    pub source: ConfigValueError,
}

/// Why one key's value was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ConfigValueError {
    /// Not valid JSON for the key's type (or not encodable).
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Larger than [`MAX_CONFIG_VALUE_BYTES`]; refused before parsing.
    #[error("value of {bytes} bytes is larger than {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
    /// Nested deeper than [`MAX_CONFIG_VALUE_DEPTH`]; refused before parsing.
    #[error("JSON nested deeper than {limit} levels (at byte {offset})")]
    TooDeep { limit: usize, offset: usize },
}

/// Every key of a ConfigMap that failed to parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid slo-controller-config: {}", join_errors(.errors))]
pub struct SloConfigParseError {
    pub errors: Vec<ConfigKeyError>,
}

fn join_errors(errors: &[ConfigKeyError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The parsed `slo-controller-config` data. A key that is absent (or blank)
/// is `None`, which means "use the defaults" to every consumer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SloControllerConfig {
    pub colocation: Option<ColocationCfg>,
    pub resource_threshold: Option<ResourceThresholdCfg>,
    pub resource_qos: Option<ResourceQOSCfg>,
    pub cpu_burst: Option<CPUBurstCfg>,
    pub system: Option<SystemCfg>,
    pub host_application: Option<HostApplicationCfg>,
    pub cpu_normalization: Option<CPUNormalizationCfg>,
    pub resource_amplification: Option<ResourceAmplificationCfg>,
    /// Keys upstream does not define (e.g. third-party extension configs),
    /// kept verbatim.
    pub other_keys: BTreeMap<String, String>,
}

impl SloControllerConfig {
    /// Parses every key; fails if any known key is malformed, naming each one.
    pub fn from_configmap_data(
        data: &BTreeMap<String, String>,
    ) -> Result<Self, SloConfigParseError> {
        let (config, errors) = Self::from_configmap_data_lenient(data);
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(SloConfigParseError { errors })
        }
    }

    /// Parses every key independently: a malformed key is left `None` and
    /// reported, the others are kept (upstream's controllers likewise keep
    /// their last good value per key).
    pub fn from_configmap_data_lenient(
        data: &BTreeMap<String, String>,
    ) -> (Self, Vec<ConfigKeyError>) {
        let mut errors = Vec::new();
        let mut config = SloControllerConfig {
            colocation: parse_key(data, COLOCATION_CONFIG_KEY, &mut errors),
            resource_threshold: parse_key(data, RESOURCE_THRESHOLD_CONFIG_KEY, &mut errors),
            resource_qos: parse_key(data, RESOURCE_QOS_CONFIG_KEY, &mut errors),
            cpu_burst: parse_key(data, CPU_BURST_CONFIG_KEY, &mut errors),
            system: parse_key(data, SYSTEM_CONFIG_KEY, &mut errors),
            host_application: parse_key(data, HOST_APPLICATION_CONFIG_KEY, &mut errors),
            cpu_normalization: parse_key(data, CPU_NORMALIZATION_CONFIG_KEY, &mut errors),
            resource_amplification: parse_key(data, RESOURCE_AMPLIFICATION_CONFIG_KEY, &mut errors),
            other_keys: BTreeMap::new(),
        };
        config.other_keys = data
            .iter()
            .filter(|(key, _)| !ALL_CONFIG_KEYS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        (config, errors)
    }

    /// Writes the configuration back as ConfigMap data (compact JSON per key).
    pub fn to_configmap_data(&self) -> Result<BTreeMap<String, String>, ConfigKeyError> {
        let mut data = self.other_keys.clone();
        write_key(&mut data, COLOCATION_CONFIG_KEY, &self.colocation)?;
        write_key(
            &mut data,
            RESOURCE_THRESHOLD_CONFIG_KEY,
            &self.resource_threshold,
        )?;
        write_key(&mut data, RESOURCE_QOS_CONFIG_KEY, &self.resource_qos)?;
        write_key(&mut data, CPU_BURST_CONFIG_KEY, &self.cpu_burst)?;
        write_key(&mut data, SYSTEM_CONFIG_KEY, &self.system)?;
        write_key(
            &mut data,
            HOST_APPLICATION_CONFIG_KEY,
            &self.host_application,
        )?;
        write_key(
            &mut data,
            CPU_NORMALIZATION_CONFIG_KEY,
            &self.cpu_normalization,
        )?;
        write_key(
            &mut data,
            RESOURCE_AMPLIFICATION_CONFIG_KEY,
            &self.resource_amplification,
        )?;
        Ok(data)
    }
}

fn parse_key<T: DeserializeOwned>(
    data: &BTreeMap<String, String>,
    key: &str,
    errors: &mut Vec<ConfigKeyError>,
) -> Option<T> {
    let raw = data.get(key)?;
    if raw.trim().is_empty() {
        return None;
    }
    match decode_bounded(raw) {
        Ok(value) => Some(value),
        Err(source) => {
            errors.push(ConfigKeyError {
                key: key.to_owned(),
                source,
            });
            None
        }
    }
}

/// Parses one key's JSON after checking its size and nesting, so that what
/// the parser builds stays in proportion to what a ConfigMap may hold.
fn decode_bounded<T: DeserializeOwned>(raw: &str) -> Result<T, ConfigValueError> {
    if raw.len() > MAX_CONFIG_VALUE_BYTES {
        return Err(ConfigValueError::TooLarge {
            bytes: raw.len(),
            limit: MAX_CONFIG_VALUE_BYTES,
        });
    }
    if let Some(offset) = json_nesting_beyond(raw, MAX_CONFIG_VALUE_DEPTH) {
        return Err(ConfigValueError::TooDeep {
            limit: MAX_CONFIG_VALUE_DEPTH,
            offset,
        });
    }
    Ok(serde_json::from_str(raw)?)
}

/// The byte offset where JSON text opens its `limit + 1`-th nested object or
/// array, if it does (strings skipped; one pass, no allocation). Malformed
/// text is left for the parser to report.
pub fn json_nesting_beyond(text: &str, limit: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, byte) in text.bytes().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return Some(offset);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

fn write_key<T: Serialize>(
    data: &mut BTreeMap<String, String>,
    key: &str,
    value: &Option<T>,
) -> Result<(), ConfigKeyError> {
    if let Some(value) = value {
        let text = serde_json::to_string(value).map_err(|source| ConfigKeyError {
            key: key.to_owned(),
            source: source.into(),
        })?;
        data.insert(key.to_owned(), text);
    }
    Ok(())
}

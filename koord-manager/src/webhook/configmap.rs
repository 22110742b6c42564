//! ConfigMap validation (upstream `cm/validating`): the manager's
//! `slo-controller-config` must parse and pass `apis::configuration`'s
//! checks; other ConfigMaps and deletions pass.

use apis::configuration::{
    SloConfigParseError, SloControllerConfig, ValidationErrors, ValidationOptions,
};
use k8s_openapi::api::core::v1::ConfigMap;

use super::review::{Operation, Refusal};

/// Why the slo-controller-config is refused; the messages are
/// `apis::configuration`'s, naming every bad key and field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigMapError {
    /// A key's JSON does not parse.
    #[error(transparent)]
    Parse(#[from] SloConfigParseError),
    /// The config parses but a field is out of range.
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
}

impl Refusal for ConfigMapError {
    fn metric_label(&self) -> &'static str {
        match self {
            ConfigMapError::Parse(_) => "unparsable_config",
            ConfigMapError::Invalid(_) => "invalid_config",
        }
    }
}

/// Which ConfigMap is the slo-controller-config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SloConfigRef {
    pub namespace: String,
    pub name: String,
    pub options: ValidationOptions,
}

impl Default for SloConfigRef {
    fn default() -> Self {
        SloConfigRef {
            namespace: apis::configuration::DEFAULT_CONFIG_NAMESPACE.to_owned(),
            name: apis::configuration::DEFAULT_SLO_CONTROLLER_CONFIG_NAME.to_owned(),
            options: ValidationOptions::default(),
        }
    }
}

/// `Err` is the denial.
pub fn validate_configmap(
    operation: Operation,
    config_map: &ConfigMap,
    request_namespace: &str,
    target: &SloConfigRef,
) -> Result<(), ConfigMapError> {
    let namespace = config_map
        .metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or(request_namespace);
    let name = config_map.metadata.name.as_deref().unwrap_or("");
    if namespace != target.namespace || name != target.name {
        return Ok(());
    }
    if !matches!(operation, Operation::Create | Operation::Update) {
        return Ok(());
    }
    let data = config_map.data.clone().unwrap_or_default();
    let config = SloControllerConfig::from_configmap_data(&data)?;
    Ok(config.validate_with(&target.options)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config_map(name: &str, data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "koordinator-system"},
            "data": data
        }))
        .unwrap()
    }

    #[test]
    fn bad_threshold_is_denied_naming_the_field() {
        let cm = config_map(
            "slo-controller-config",
            json!({"resource-threshold-config": r#"{"clusterStrategy":{"enable":true,"cpuSuppressThresholdPercent":150}}"#}),
        );
        let err =
            validate_configmap(Operation::Update, &cm, "", &SloConfigRef::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent"),
            "{err}"
        );
    }

    #[test]
    fn unparsable_key_is_denied_naming_the_key() {
        let cm = config_map(
            "slo-controller-config",
            json!({"colocation-config": "{not json"}),
        );
        let err =
            validate_configmap(Operation::Create, &cm, "", &SloConfigRef::default()).unwrap_err();
        assert!(err.to_string().contains("colocation-config"), "{err}");
    }

    #[test]
    fn other_configmaps_valid_configs_and_deletes_pass() {
        let target = SloConfigRef::default();
        let other = config_map("something-else", json!({"colocation-config": "{not json"}));
        assert!(validate_configmap(Operation::Create, &other, "", &target).is_ok());
        let bad = config_map(
            "slo-controller-config",
            json!({"colocation-config": "{not json"}),
        );
        assert!(validate_configmap(Operation::Delete, &bad, "", &target).is_ok());
        let good = config_map(
            "slo-controller-config",
            json!({"colocation-config": r#"{"enable":true,"cpuReclaimThresholdPercent":60}"#}),
        );
        assert!(validate_configmap(Operation::Create, &good, "", &target).is_ok());
    }

    #[test]
    fn latency_protection_key_is_checked_at_admission() {
        let target = SloConfigRef::default();
        let with = |raw: &str| {
            config_map(
                "slo-controller-config",
                json!({"cpu-latency-protection-config": raw}),
            )
        };
        let good = with(
            r#"{"clusterStrategy":{"enable":true,"targetWaitPercent":25},
                "nodeStrategies":[{"name":"db","nodeSelector":{"matchLabels":{"pool":"db"}},"targetWaitPercent":10}]}"#,
        );
        validate_configmap(Operation::Update, &good, "", &target).unwrap();
        let out_of_range = with(r#"{"clusterStrategy":{"enable":true,"targetWaitPercent":0}}"#);
        let err = validate_configmap(Operation::Update, &out_of_range, "", &target).unwrap_err();
        assert!(
            err.to_string()
                .contains("cpu-latency-protection-config.clusterStrategy"),
            "{err}"
        );
        let unknown = with(r#"{"clusterStrategy":{"enable":true,"targetWaitPercnt":25}}"#);
        assert!(validate_configmap(Operation::Create, &unknown, "", &target).is_err());
        let no_selector = with(r#"{"nodeStrategies":[{"name":"all","targetWaitPercent":10}]}"#);
        let err = validate_configmap(Operation::Update, &no_selector, "", &target).unwrap_err();
        assert!(
            err.to_string()
                .contains("cpu-latency-protection-config.nodeStrategies[0].nodeSelector"),
            "{err}"
        );
        let not_json = with("{");
        let err = validate_configmap(Operation::Update, &not_json, "", &target).unwrap_err();
        assert!(
            err.to_string().contains("cpu-latency-protection-config"),
            "{err}"
        );
        // Blank means "not set".
        validate_configmap(Operation::Update, &with(" "), "", &target).unwrap();
    }
}

//! `--feature-gates` (upstream `k8s.io/component-base/featuregate` syntax:
//! `Name=true,Other=false`) and the webhook gates with upstream's defaults.

use std::collections::BTreeMap;
use std::str::FromStr;

use super::handlers::{
    AdmissionGates, PATH_MUTATE_ELASTIC_QUOTA, PATH_MUTATE_NODE_STATUS, PATH_MUTATE_POD,
    PATH_VALIDATE_CONFIGMAP, PATH_VALIDATE_ELASTIC_QUOTA, PATH_VALIDATE_NODE, PATH_VALIDATE_POD,
    PATH_VALIDATE_POD_EVICTION,
};
use super::handlers::{PATH_MUTATE_RESERVATION, PATH_VALIDATE_POD_BINDING};

/// Gates as given; names nobody here knows are kept (other parts of the
/// manager or later builds may read them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates(BTreeMap<String, bool>);

impl FromStr for FeatureGates {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut gates = BTreeMap::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("missing bool value for {entry}"))?;
            let value = apis::extension::parse_go_bool(value.trim())
                .ok_or_else(|| format!("invalid value of {name}={value}, err: not a bool"))?;
            gates.insert(name.trim().to_owned(), value);
        }
        Ok(FeatureGates(gates))
    }
}

impl FeatureGates {
    /// The gate's value, else `default`.
    pub fn enabled(&self, name: &str, default: bool) -> bool {
        self.0.get(name).copied().unwrap_or(default)
    }

    /// The admission paths whose gates are on. Upstream leaves
    /// `ConfigMapValidatingWebhook` off by default; here it is on, so an
    /// invalid slo-controller-config is refused at the door. `NodeScopedEvictionWebhook` is ours.
    pub fn enabled_paths(&self) -> Vec<&'static str> {
        [
            (PATH_MUTATE_POD, "PodMutatingWebhook", true),
            (PATH_VALIDATE_POD, "PodValidatingWebhook", true),
            (PATH_MUTATE_ELASTIC_QUOTA, "ElasticMutatingWebhook", true),
            (
                PATH_VALIDATE_ELASTIC_QUOTA,
                "ElasticValidatingWebhook",
                true,
            ),
            (PATH_VALIDATE_CONFIGMAP, "ConfigMapValidatingWebhook", true),
            (
                PATH_VALIDATE_POD_EVICTION,
                "NodeScopedEvictionWebhook",
                true,
            ),
            (PATH_MUTATE_NODE_STATUS, "NodeMutatingWebhook", false),
            (PATH_VALIDATE_NODE, "NodeValidatingWebhook", false),
            (PATH_VALIDATE_POD_BINDING, "BindingAdmissionWebhook", false),
            (PATH_MUTATE_RESERVATION, "ReservationMutatingWebhook", false),
        ]
        .into_iter()
        .filter(|(_, gate, default)| self.enabled(gate, *default))
        // Upstream registers the binding handler with the pod validating ones.
        .filter(|(path, _, _)| {
            *path != PATH_VALIDATE_POD_BINDING || self.enabled("PodValidatingWebhook", true)
        })
        .map(|(path, _, _)| path)
        .collect()
    }

    /// `WebhookFramework`, upstream's switch for all webhooks.
    pub fn webhook_framework(&self) -> bool {
        self.enabled("WebhookFramework", true)
    }

    pub fn admission_gates(&self) -> AdmissionGates {
        AdmissionGates {
            colocation_profile_skip_mutating_resources: self
                .enabled("ColocationProfileSkipMutatingResources", false),
            colocation_profile_skip_validating_priority: self
                .enabled("ColocationProfileSkipValidatingPriority", false),
            disable_extended_resource_spec: self.enabled("DisableExtendedResourceSpec", false),
            elastic_quota_enable_update_resource_key: self
                .enabled("ElasticQuotaEnableUpdateResourceKey", false),
            quota_evaluation: super::quota_evaluate::EvaluationGates {
                enabled: self.enabled("EnableQuotaAdmission", false),
                on_update: self.enabled("EnableQuotaAdmissionOnUpdate", false),
                transform_pod: self.enabled("ElasticQuotaEvaluationTransformPod", false),
                replace_resources_transformer: self.enabled("ReplaceResourcesTransformer", false),
                disable_default_quota: self.enabled("DisableDefaultQuota", false),
            },
            multi_quota_tree: self.enabled("MultiQuotaTree", false),
            disable_device_resource_spec: self.enabled("DisableDeviceResourceSpec", false),
            validate_pod_device_resource: self.enabled("ValidatePodDeviceResource", false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_syntax_parses_and_gates_paths() {
        let empty: FeatureGates = "".parse().unwrap();
        assert_eq!(empty.enabled_paths().len(), 6);
        assert!(empty.webhook_framework());

        let gates: FeatureGates = "PodMutatingWebhook=false, ColocationProfileSkipMutatingResources=true,SomethingElse=True"
            .parse()
            .unwrap();
        assert!(!gates.enabled_paths().contains(&PATH_MUTATE_POD));
        assert!(
            gates
                .admission_gates()
                .colocation_profile_skip_mutating_resources
        );
        assert!(gates.enabled("SomethingElse", false));

        // Upstream's node webhooks are off unless asked for.
        assert!(!empty.enabled_paths().contains(&PATH_MUTATE_NODE_STATUS));
        let node: FeatureGates = "NodeMutatingWebhook=true".parse().unwrap();
        assert!(node.enabled_paths().contains(&PATH_MUTATE_NODE_STATUS));
        assert!(!node.enabled_paths().contains(&PATH_VALIDATE_NODE));
        // Binding admission and the Reservation webhook are off by default, as upstream;
        // the binding path also needs the pod validating webhooks.
        assert!(!empty.enabled_paths().contains(&PATH_VALIDATE_POD_BINDING));
        assert!(!empty.enabled_paths().contains(&PATH_MUTATE_RESERVATION));
        let on: FeatureGates = "BindingAdmissionWebhook=true,ReservationMutatingWebhook=true"
            .parse()
            .unwrap();
        assert!(on.enabled_paths().contains(&PATH_VALIDATE_POD_BINDING));
        assert!(on.enabled_paths().contains(&PATH_MUTATE_RESERVATION));
        let no_pod: FeatureGates = "BindingAdmissionWebhook=true,PodValidatingWebhook=false"
            .parse()
            .unwrap();
        assert!(!no_pod.enabled_paths().contains(&PATH_VALIDATE_POD_BINDING));
        // Quota admission and the multi-quota-tree affinity are off by default, as upstream.
        let defaults = empty.admission_gates();
        assert_eq!(
            defaults.quota_evaluation,
            crate::webhook::quota_evaluate::EvaluationGates::default()
        );
        assert!(!defaults.multi_quota_tree);
        let on: FeatureGates = "EnableQuotaAdmission=true,EnableQuotaAdmissionOnUpdate=true,ElasticQuotaEvaluationTransformPod=true,ReplaceResourcesTransformer=true,DisableDefaultQuota=true,MultiQuotaTree=true"
            .parse()
            .unwrap();
        let on = on.admission_gates();
        let evaluation = on.quota_evaluation;
        assert!(evaluation.enabled && evaluation.on_update && evaluation.transform_pod);
        assert!(evaluation.replace_resources_transformer && evaluation.disable_default_quota);
        assert!(on.multi_quota_tree);

        assert!("PodMutatingWebhook".parse::<FeatureGates>().is_err());
        assert!("PodMutatingWebhook=maybe".parse::<FeatureGates>().is_err());
    }
}

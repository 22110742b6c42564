//! `--feature-gates` (upstream `k8s.io/component-base/featuregate` syntax:
//! `Name=true,Other=false`), read through koord-common's registry against
//! the manager's gate table (names and defaults there), and the webhook
//! paths and admission switches they turn on.

use std::str::FromStr;

use koord_common::features::{self, MANAGER_GATES};

use super::handlers::{
    AdmissionGates, PATH_MUTATE_ELASTIC_QUOTA, PATH_MUTATE_NODE_STATUS, PATH_MUTATE_POD,
    PATH_VALIDATE_CONFIGMAP, PATH_VALIDATE_ELASTIC_QUOTA, PATH_VALIDATE_NODE, PATH_VALIDATE_POD,
    PATH_VALIDATE_POD_EVICTION,
};
use super::handlers::{PATH_MUTATE_RESERVATION, PATH_VALIDATE_POD_BINDING};

/// Every manager gate's value; a name outside [`MANAGER_GATES`] is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates(features::FeatureGates);

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates(features::FeatureGates::defaults(MANAGER_GATES))
    }
}

impl FromStr for FeatureGates {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        features::FeatureGates::parse(MANAGER_GATES, text)
            .map(FeatureGates)
            .map_err(|error| error.to_string())
    }
}

impl FeatureGates {
    /// The gate's value (given, else its default in [`MANAGER_GATES`]).
    pub fn enabled(&self, name: &str) -> bool {
        self.0.enabled(name)
    }

    /// The admission paths whose gates are on. Upstream leaves
    /// `ConfigMapValidatingWebhook` off by default; here it is on, so an
    /// invalid slo-controller-config is refused at the door. `NodeScopedEvictionWebhook` is ours.
    pub fn enabled_paths(&self) -> Vec<&'static str> {
        [
            (PATH_MUTATE_POD, "PodMutatingWebhook"),
            (PATH_VALIDATE_POD, "PodValidatingWebhook"),
            (PATH_MUTATE_ELASTIC_QUOTA, "ElasticMutatingWebhook"),
            (PATH_VALIDATE_ELASTIC_QUOTA, "ElasticValidatingWebhook"),
            (PATH_VALIDATE_CONFIGMAP, "ConfigMapValidatingWebhook"),
            (PATH_VALIDATE_POD_EVICTION, "NodeScopedEvictionWebhook"),
            (PATH_MUTATE_NODE_STATUS, "NodeMutatingWebhook"),
            (PATH_VALIDATE_NODE, "NodeValidatingWebhook"),
            (PATH_VALIDATE_POD_BINDING, "BindingAdmissionWebhook"),
            (PATH_MUTATE_RESERVATION, "ReservationMutatingWebhook"),
        ]
        .into_iter()
        .filter(|(_, gate)| self.enabled(gate))
        // Upstream registers the binding handler with the pod validating ones.
        .filter(|(path, _)| {
            *path != PATH_VALIDATE_POD_BINDING || self.enabled("PodValidatingWebhook")
        })
        .map(|(path, _)| path)
        .collect()
    }

    /// `WebhookFramework`, upstream's switch for all webhooks.
    pub fn webhook_framework(&self) -> bool {
        self.enabled("WebhookFramework")
    }

    pub fn admission_gates(&self) -> AdmissionGates {
        AdmissionGates {
            colocation_profile_skip_mutating_resources: self
                .enabled("ColocationProfileSkipMutatingResources"),
            colocation_profile_skip_validating_priority: self
                .enabled("ColocationProfileSkipValidatingPriority"),
            disable_extended_resource_spec: self.enabled("DisableExtendedResourceSpec"),
            elastic_quota_enable_update_resource_key: self
                .enabled("ElasticQuotaEnableUpdateResourceKey"),
            quota_evaluation: super::quota_evaluate::EvaluationGates {
                enabled: self.enabled("EnableQuotaAdmission"),
                on_update: self.enabled("EnableQuotaAdmissionOnUpdate"),
                transform_pod: self.enabled("ElasticQuotaEvaluationTransformPod"),
                replace_resources_transformer: self.enabled("ReplaceResourcesTransformer"),
                disable_default_quota: self.enabled("DisableDefaultQuota"),
            },
            multi_quota_tree: self.enabled("MultiQuotaTree"),
            disable_device_resource_spec: self.enabled("DisableDeviceResourceSpec"),
            validate_pod_device_resource: self.enabled("ValidatePodDeviceResource"),
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
        assert_eq!(
            empty.enabled(crate::colocation_profile::FEATURE_GATE),
            crate::colocation_profile::FEATURE_GATE_DEFAULT
        );

        let gates: FeatureGates =
            "PodMutatingWebhook=false, ColocationProfileSkipMutatingResources=true,DisablePVCReservation=True"
                .parse()
                .unwrap();
        assert!(!gates.enabled_paths().contains(&PATH_MUTATE_POD));
        assert!(
            gates
                .admission_gates()
                .colocation_profile_skip_mutating_resources
        );
        assert!(gates.enabled("DisablePVCReservation"));

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
        assert!("PodMutatingWebhook=tRuE".parse::<FeatureGates>().is_err());
        let unknown = "SomethingElse=true".parse::<FeatureGates>().unwrap_err();
        assert_eq!(unknown, "unrecognized feature gate: SomethingElse");
    }
}

//! The one `--feature-gates` registry: Kubernetes' `component-base/featuregate`
//! syntax (`Name=true,Other=false`, values as Go's `strconv.ParseBool` reads
//! them), checked against a per-component table of gate names, defaults and
//! stages. Tables hold upstream Koordinator's names and defaults; where a
//! default here differs from upstream, or a gate is ours, the entry says so.
//!
//! Unknown names are refused (upstream's koordlet refuses them too), so a
//! misspelt gate stops the process at start instead of silently doing nothing.
//! `AllAlpha` / `AllBeta` set every gate of that stage that is not named
//! explicitly, as in Kubernetes.

use std::collections::{BTreeMap, BTreeSet};

/// A gate's maturity, which `AllAlpha` / `AllBeta` select on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
}

/// One gate of a component's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateSpec {
    pub name: &'static str,
    pub default: bool,
    pub stage: Stage,
}

const fn alpha(name: &'static str, default: bool) -> GateSpec {
    GateSpec {
        name,
        default,
        stage: Stage::Alpha,
    }
}

const fn beta(name: &'static str, default: bool) -> GateSpec {
    GateSpec {
        name,
        default,
        stage: Stage::Beta,
    }
}

/// koordlet: upstream's `pkg/features/koordlet_features.go` and the runtime
/// hooks' gates (`pkg/koordlet/runtimehooks/config.go`), which upstream adds
/// to the same koordlet gate set.
pub const KOORDLET_GATES: &[GateSpec] = &[
    alpha("AuditEvents", false),
    alpha("AuditEventsHTTPHandler", false),
    beta("BECPUSuppress", true),
    alpha("BECPUManager", false),
    alpha("BECPUEvict", false),
    alpha("CPUEvict", false),
    alpha("CPUAllocatableEvict", false),
    alpha("BEMemoryEvict", false),
    alpha("MemoryEvict", false),
    alpha("MemoryAllocatableEvict", false),
    beta("CPUBurst", true),
    alpha("SystemConfig", false),
    beta("RdtResctrl", true),
    alpha("ResctrlCollector", false),
    alpha("CgroupReconcile", false),
    beta("NodeTopologyReport", true),
    alpha("Accelerators", false),
    alpha("RDMADevices", false),
    alpha("CPICollector", false),
    alpha("Libpfm4", false),
    alpha("PSICollector", false),
    alpha("BlkIOReconcile", false),
    alpha("ColdPageCollector", false),
    alpha("HugePageReport", false),
    alpha("PodResourcesProxy", false),
    alpha("HamiCoreVGPUMonitor", false),
    alpha("PerCPUMetric", false),
    alpha("NodeMetricPromMetrics", false),
    // Runtime hooks.
    beta("GroupIdentity", true),
    beta("CPUSetAllocator", true),
    alpha("GPUEnvInject", false),
    alpha("RDMADeviceInject", false),
    beta("BatchResource", true),
    alpha("CPUNormalization", false),
    alpha("CoreSched", false),
    alpha("TerwayQoS", false),
    alpha("TCNetworkQoS", false),
    alpha("Resctrl", false),
    alpha("OOMScoreAdj", false),
];

/// koord-manager: upstream's `pkg/features/features.go` (manager, descheduler
/// and transformer gates, which upstream registers in one set).
pub const MANAGER_GATES: &[GateSpec] = &[
    beta("PodMutatingWebhook", true),
    beta("PodValidatingWebhook", true),
    beta("ElasticMutatingWebhook", true),
    beta("ElasticValidatingWebhook", true),
    alpha("NodeMutatingWebhook", false),
    alpha("NodeValidatingWebhook", false),
    // Upstream: off. On here, so an invalid slo-controller-config is refused at the door.
    alpha("ConfigMapValidatingWebhook", true),
    alpha("ReservationMutatingWebhook", false),
    beta("WebhookFramework", true),
    alpha("ColocationProfileSkipMutatingResources", false),
    alpha("ColocationProfileSkipValidatingPriority", false),
    alpha("MultiQuotaTree", false),
    alpha("ElasticQuotaIgnorePodOverhead", false),
    alpha("ElasticQuotaIgnoreTerminatingPod", false),
    alpha("ElasticQuotaImmediateIgnoreTerminatingPod", false),
    alpha("ElasticQuotaGuaranteeUsage", false),
    alpha("ElasticQuotaEnableUpdateResourceKey", false),
    alpha("ElasticQuotaEvaluationTransformPod", false),
    alpha("DisableDefaultQuota", false),
    alpha("SupportParentQuotaSubmitPod", false),
    alpha("EnableQuotaAdmission", false),
    alpha("EnableQuotaAdmissionOnUpdate", false),
    alpha("EnableSyncGPUSharedResource", false),
    alpha("ColocationProfileController", false),
    alpha("ValidatePodDeviceResource", false),
    alpha("EnablePodEnhancedValidator", false),
    alpha("DisableExtendedResourceSpec", false),
    alpha("DisableDeviceResourceSpec", false),
    alpha("BindingAdmissionWebhook", false),
    beta("DisablePVCReservation", false),
    alpha("PriorityTransformer", false),
    alpha("PreemptionPolicyTransformer", false),
    alpha("ReplaceResourcesTransformer", false),
    // Ours: the node-scoped eviction admission (no upstream gate).
    beta("NodeScopedEvictionWebhook", true),
];

/// Why a `--feature-gates` value was refused; the texts follow Kubernetes'.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    #[error("missing bool value for {0}")]
    MissingValue(String),
    #[error(
        "invalid value of {name}={value}, err: not a bool (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)"
    )]
    NotABool { name: String, value: String },
    #[error("unrecognized feature gate: {0}")]
    Unknown(String),
}

/// Go's `strconv.ParseBool`: exactly these spellings, nothing else (no
/// `yes`, no `tRuE`, no surrounding blanks).
pub fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A component's gates after `--feature-gates`: every gate of its table has a
/// value (the one given, else `AllAlpha`/`AllBeta`, else the default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    table: &'static [GateSpec],
    values: BTreeMap<&'static str, bool>,
    /// The gates the flag set (by name, or through AllAlpha/AllBeta).
    given: BTreeSet<&'static str>,
}

impl FeatureGates {
    /// The table's defaults.
    pub fn defaults(table: &'static [GateSpec]) -> Self {
        let values = table.iter().map(|gate| (gate.name, gate.default)).collect();
        FeatureGates {
            table,
            values,
            given: BTreeSet::new(),
        }
    }

    /// Parses `A=true,B=false` (blanks around entries, names and values are
    /// trimmed; empty entries are skipped) against `table`.
    pub fn parse(table: &'static [GateSpec], text: &str) -> Result<Self, FeatureGateError> {
        let mut explicit: BTreeMap<&'static str, bool> = BTreeMap::new();
        let mut all_stage: Vec<(Stage, bool)> = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| FeatureGateError::MissingValue(entry.to_owned()))?;
            let (name, value) = (name.trim(), value.trim());
            let on = parse_go_bool(value).ok_or_else(|| FeatureGateError::NotABool {
                name: name.to_owned(),
                value: value.to_owned(),
            })?;
            match name {
                "AllAlpha" => all_stage.push((Stage::Alpha, on)),
                "AllBeta" => all_stage.push((Stage::Beta, on)),
                _ => {
                    let gate = table
                        .iter()
                        .find(|gate| gate.name == name)
                        .ok_or_else(|| FeatureGateError::Unknown(name.to_owned()))?;
                    explicit.insert(gate.name, on);
                }
            }
        }
        let mut gates = Self::defaults(table);
        for (stage, on) in all_stage {
            for gate in table.iter().filter(|gate| gate.stage == stage) {
                gates.values.insert(gate.name, on);
                gates.given.insert(gate.name);
            }
        }
        // A gate named explicitly wins over AllAlpha/AllBeta, in any order.
        gates.given.extend(explicit.keys());
        gates.values.extend(explicit);
        Ok(gates)
    }

    /// Whether `name` is on. A name outside the table is a programming error
    /// in the caller; it reads as off and is logged.
    pub fn enabled(&self, name: &str) -> bool {
        match self.values.get(name) {
            Some(on) => *on,
            None => {
                tracing::error!(gate = name, "feature gate is not in this component's table");
                false
            }
        }
    }

    /// Every gate and its value, by name.
    pub fn values(&self) -> &BTreeMap<&'static str, bool> {
        &self.values
    }

    /// Only the gates the flag set, with their values.
    pub fn given(&self) -> BTreeMap<&'static str, bool> {
        self.given
            .iter()
            .map(|name| (*name, self.values[name]))
            .collect()
    }

    /// The table these gates were checked against.
    pub fn table(&self) -> &'static [GateSpec] {
        self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_bool_spellings_are_exactly_strconv_parse_bool() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(text), Some(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(text), Some(false), "{text}");
        }
        for text in [
            "", "tRuE", "fAlSe", "yes", "no", "on", "2", " true", "truee",
        ] {
            assert_eq!(parse_go_bool(text), None, "{text:?}");
        }
    }

    #[test]
    fn lists_override_defaults_and_keep_the_rest() {
        let gates = FeatureGates::parse(
            KOORDLET_GATES,
            " CPUBurst=F, GPUEnvInject=1,,BECPUEvict = TRUE ",
        )
        .unwrap();
        assert!(!gates.enabled("CPUBurst"));
        assert!(gates.enabled("GPUEnvInject"));
        assert!(gates.enabled("BECPUEvict"));
        // Untouched gates keep their defaults.
        assert!(gates.enabled("BECPUSuppress"));
        assert!(!gates.enabled("CgroupReconcile"));
        assert_eq!(gates.values().len(), KOORDLET_GATES.len());
        assert_eq!(
            FeatureGates::parse(MANAGER_GATES, "").unwrap(),
            FeatureGates::defaults(MANAGER_GATES)
        );
    }

    #[test]
    fn bad_entries_are_refused_with_the_entry_named() {
        let err = FeatureGates::parse(KOORDLET_GATES, "CPUBurst").unwrap_err();
        assert_eq!(err.to_string(), "missing bool value for CPUBurst");
        let err = FeatureGates::parse(KOORDLET_GATES, "CPUBurst=yes").unwrap_err();
        assert!(err.to_string().starts_with("invalid value of CPUBurst=yes"));
        let err = FeatureGates::parse(KOORDLET_GATES, "CPUBurst=tRuE").unwrap_err();
        assert!(matches!(err, FeatureGateError::NotABool { .. }));
        let err = FeatureGates::parse(KOORDLET_GATES, "CpuBurst=true").unwrap_err();
        assert_eq!(err.to_string(), "unrecognized feature gate: CpuBurst");
        // A gate of another component is unknown here.
        let err = FeatureGates::parse(KOORDLET_GATES, "PodMutatingWebhook=false").unwrap_err();
        assert_eq!(err, FeatureGateError::Unknown("PodMutatingWebhook".into()));
    }

    #[test]
    fn all_alpha_and_all_beta_yield_to_named_gates() {
        let gates = FeatureGates::parse(
            KOORDLET_GATES,
            "CoreSched=false,AllAlpha=true,AllBeta=false",
        )
        .unwrap();
        assert!(gates.enabled("GPUEnvInject"), "alpha turned on");
        assert!(!gates.enabled("CoreSched"), "named gate wins");
        assert!(!gates.enabled("CPUBurst"), "beta turned off");
        let given = gates.given();
        assert_eq!(given.get("CoreSched"), Some(&false));
        assert_eq!(given.get("GPUEnvInject"), Some(&true));
        assert_eq!(given.len(), KOORDLET_GATES.len());
        let named = FeatureGates::parse(KOORDLET_GATES, "CoreSched=t").unwrap();
        assert_eq!(named.given(), BTreeMap::from([("CoreSched", true)]));
    }

    #[test]
    fn tables_have_unique_names() {
        for table in [KOORDLET_GATES, MANAGER_GATES] {
            let mut names: Vec<_> = table.iter().map(|gate| gate.name).collect();
            names.sort_unstable();
            let count = names.len();
            names.dedup();
            assert_eq!(names.len(), count);
        }
    }
}

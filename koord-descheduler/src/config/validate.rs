//! Upstream's validation of the configuration (`ValidateDeschedulerConfiguration`,
//! `ValidateMigrationControllerArgs`, `ValidateLowLoadUtilizationArgs`), plus
//! the bounds upstream leaves to Go's types (finite percentages). Each error
//! names its field path.

use std::collections::BTreeMap;

use apis::configuration::selector::validate_label_selector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::defaults::split_host_port;
use super::settings::LowNodeLoadConfig;
use super::types::*;

/// Eviction gates `skipEvictionGates` may name.
pub const EVICTION_GATES: &[&str] = &[
    "MaxUnavailablePerWorkload",
    "MaxMigratingPerWorkload",
    "MaxMigratingPerNode",
    "MaxMigratingPerNamespace",
    "MaxMigratingGlobally",
    "ExpectedReplicas",
    "PVC",
    "BarePods",
    "LocalStorage",
    "SystemCritical",
    "PriorityThreshold",
    "LabelSelector",
    "Namespaces",
    "NodeFit",
];

pub(crate) fn validate_configuration(file: &DeschedulerConfiguration) -> Vec<String> {
    let mut errors = Vec::new();
    if file.client_connection.burst < 0 {
        errors.push(format!(
            "clientConnection.burst: Invalid value: {}: must be non-negative",
            file.client_connection.burst
        ));
    }
    if !file.client_connection.qps.is_finite() {
        errors.push("clientConnection.qps: Invalid value: must be a finite number".to_string());
    }
    let election = &file.leader_election;
    if election.leader_elect == Some(true) {
        for (field, value) in [
            ("leaseDuration", election.lease_duration),
            ("renewDeadline", election.renew_deadline),
            ("retryPeriod", election.retry_period),
        ] {
            if value.as_nanos() <= 0 {
                errors.push(format!(
                    "leaderElection.{field}: Invalid value: {value}: must be greater than zero"
                ));
            }
        }
        if election.lease_duration <= election.renew_deadline {
            errors.push(format!(
                "leaderElection.leaseDuration: Invalid value: {}: LeaseDuration must be greater than RenewDeadline",
                election.lease_duration
            ));
        }
        for (field, value) in [
            ("resourceLock", &election.resource_lock),
            ("resourceName", &election.resource_name),
            ("resourceNamespace", &election.resource_namespace),
        ] {
            if value.is_empty() {
                errors.push(format!("leaderElection.{field}: Required value"));
            }
        }
    }
    if file.profiles.is_empty() {
        errors.push("profiles: Required value".to_string());
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, profile) in file.profiles.iter().enumerate() {
        if profile.name.is_empty() {
            errors.push(format!("profiles[{index}].name: Required value"));
        }
        if let Some(first) = seen.insert(&profile.name, index) {
            errors.push(format!(
                "profiles[{index}].name: Duplicate value: profiles[{first}].name"
            ));
        }
        let mut seen_configs: Vec<&str> = Vec::new();
        for (config_index, config) in profile.plugin_config.iter().enumerate() {
            if seen_configs.contains(&config.name.as_str()) {
                errors.push(format!(
                    "profiles[{index}].pluginConfig[{config_index}]: Duplicate value: {:?}",
                    config.name
                ));
            }
            seen_configs.push(&config.name);
        }
        if let Some(selector) = &profile.node_selector
            && let Err(err) = validate_label_selector(selector)
        {
            errors.push(format!("profiles[{index}].nodeSelector: {err}"));
        }
    }
    for (field, address) in [
        ("healthzBindAddress", &file.healthz_bind_address),
        ("metricsBindAddress", &file.metrics_bind_address),
    ] {
        if let Some(message) = address.as_deref().and_then(socket_address_error) {
            errors.push(format!(
                "{field}: Invalid value: {:?}: {message}",
                address.as_deref().unwrap_or_default()
            ));
        }
    }
    if file.descheduling_interval.as_nanos() < 0 {
        errors.push(format!(
            "deschedulingInterval: Invalid value: {}: must not be negative",
            file.descheduling_interval
        ));
    }
    if let Some(selector) = &file.node_selector
        && let Err(err) = validate_label_selector(selector)
    {
        errors.push(format!("nodeSelector: {err}"));
    }
    errors
}

/// Upstream `isValidSocketAddr`, without its DNS lookup of host names (a
/// configuration check does no I/O here; a bad name fails at bind time).
fn socket_address_error(address: &str) -> Option<String> {
    let Some((_host, port)) = split_host_port(address) else {
        return Some("must be a valid socket address (host:port)".to_string());
    };
    if port.is_empty() {
        return Some("port must not be empty in socket address".to_string());
    }
    if port.parse::<u16>().is_err() {
        return Some(format!("port {port:?} is not a number from 0 to 65535"));
    }
    None
}

/// Whether `value` is an int or a percentage string, as
/// `intstr.GetScaledValueFromIntOrPercent` accepts it.
pub fn int_or_percent_error(value: &IntOrString) -> Option<String> {
    match value {
        IntOrString::Int(_) => None,
        IntOrString::String(text) => match text.strip_suffix('%') {
            Some(number) if number.parse::<i32>().is_ok() => None,
            Some(_) => Some(format!("invalid value {text:?}: not a percentage")),
            None => Some(format!(
                "invalid value for IntOrString: invalid type: string {text:?} is not a percentage"
            )),
        },
    }
}

pub(crate) fn validate_migration_controller_args(
    path: &str,
    args: &MigrationControllerArgs,
) -> Vec<String> {
    let mut errors = Vec::new();
    for (index, gate) in args.skip_eviction_gates.iter().enumerate() {
        if !EVICTION_GATES.contains(&gate.as_str()) {
            errors.push(format!(
                "{path}.skipEvictionGates[{index}]: Invalid value: {gate:?}: unknown eviction gate"
            ));
        }
    }
    for (field, value) in [
        ("maxMigratingGlobally", args.max_migrating_globally),
        ("maxMigratingPerNamespace", args.max_migrating_per_namespace),
        ("maxMigratingPerNode", args.max_migrating_per_node),
    ] {
        if let Some(value) = value
            && value < 0
        {
            errors.push(format!(
                "{path}.{field}: Invalid value: {value}: {field} should be greater or equal 0"
            ));
        }
    }
    for (field, value) in [
        ("maxMigratingPerWorkload", &args.max_migrating_per_workload),
        (
            "maxUnavailablePerWorkload",
            &args.max_unavailable_per_workload,
        ),
    ] {
        if let Some(message) = value.as_ref().and_then(int_or_percent_error) {
            errors.push(format!(
                "{path}.{field}: Invalid value: {field} is invalid, err: {message}"
            ));
        }
    }
    let qps = args
        .evict_qps
        .as_ref()
        .map_or(0.0, FloatOrString::float_value);
    if qps.is_nan() || qps <= 0.0 {
        errors.push(format!(
            "{path}.evictQPS: Invalid value: {qps}: evictQPS must be greater than 0"
        ));
    }
    if args.evict_burst.unwrap_or(0) <= 0 {
        errors.push(format!(
            "{path}.evictBurst: Invalid value: {}: evictBurst must be greater than 0",
            args.evict_burst.unwrap_or(0)
        ));
    }
    if let Some(selector) = &args.label_selector
        && let Err(err) = validate_label_selector(selector)
    {
        errors.push(format!("{path}.labelSelector: {err}"));
    }
    if let Some(namespaces) = &args.namespaces
        && !namespaces.include.is_empty()
        && !namespaces.exclude.is_empty()
    {
        errors.push(format!(
            "{path}.namespaces: Invalid value: only one of Include/Exclude namespaces can be set"
        ));
    }
    if args.max_concurrent_reconciles.unwrap_or(0) < 1 {
        errors.push(format!(
            "{path}.maxConcurrentReconciles: Invalid value: {}: maxConcurrentReconciles should be greater than or equal to 1",
            args.max_concurrent_reconciles.unwrap_or(0)
        ));
    }
    if args.default_job_mode != "ReservationFirst" && args.default_job_mode != "EvictDirectly" {
        errors.push(format!(
            "{path}.defaultJobMode: Invalid value: {:?}: defaultJobMode must be ReservationFirst or EvictDirectly",
            args.default_job_mode
        ));
    }
    if args.default_job_ttl.is_some_and(|ttl| ttl.as_nanos() < 0) {
        errors.push(format!(
            "{path}.defaultJobTTL: Invalid value: defaultJobTTL should be positive or zero"
        ));
    }
    if let Some(threshold) = &args.priority_threshold
        && threshold
            .value
            .is_some_and(|value| value > SYSTEM_CRITICAL_PRIORITY)
    {
        errors.push(format!(
            "{path}.priorityThreshold.value: Invalid value: priority threshold can't be greater than {SYSTEM_CRITICAL_PRIORITY}"
        ));
    }
    errors
}

/// Kubernetes `scheduling.SystemCriticalPriority`.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

fn check_thresholds(
    errors: &mut Vec<String>,
    path: &str,
    field: &str,
    thresholds: &ResourceThresholds,
) {
    for (name, percentage) in thresholds {
        if !percentage.is_finite() {
            errors.push(format!(
                "{path}.{field}[{name}]: Invalid value: {percentage}: percentage must be a finite number"
            ));
        } else if *percentage < 0.0 {
            errors.push(format!(
                "{path}.{field}[{name}]: Invalid value: {percentage}: percentage must be greater than or equal to 0"
            ));
        }
    }
}

pub(crate) fn validate_low_node_load(path: &str, args: &LowNodeLoadConfig) -> Vec<String> {
    let mut errors = Vec::new();
    if args.number_of_nodes < 0 {
        errors.push(format!(
            "{path}.numberOfNodes: Invalid value: {}: must be greater than or equal to 0",
            args.number_of_nodes
        ));
    }
    if let Some(seconds) = args.node_metric_expiration_seconds
        && seconds <= 0
    {
        errors.push(format!(
            "{path}.nodeMetricExpirationSeconds: Invalid value: {seconds}: nodeMetricExpiredSeconds should be a positive value"
        ));
    }
    if let Some(namespaces) = &args.evictable_namespaces
        && !namespaces.include.is_empty()
        && !namespaces.exclude.is_empty()
    {
        errors.push(format!(
            "{path}.evictableNamespaces: Invalid value: only one of Include/Exclude namespaces can be set"
        ));
    }
    for (index, selector) in args.pod_selectors.iter().enumerate() {
        if let Err(err) = validate_label_selector(selector) {
            errors.push(format!("{path}.podSelectors[{index}]: {err}"));
        }
    }
    for (index, pool) in args.node_pools.iter().enumerate() {
        let pool_path = format!("{path}.nodePools[{index}]");
        if let Some(selector) = &pool.node_selector
            && let Err(err) = validate_label_selector(selector)
        {
            errors.push(format!("{pool_path}.nodeSelector: {err}"));
        }
        check_thresholds(
            &mut errors,
            &pool_path,
            "highThresholds",
            &pool.high_thresholds,
        );
        check_thresholds(
            &mut errors,
            &pool_path,
            "lowThresholds",
            &pool.low_thresholds,
        );
        check_thresholds(
            &mut errors,
            &pool_path,
            "prodHighThresholds",
            &pool.prod_high_thresholds,
        );
        check_thresholds(
            &mut errors,
            &pool_path,
            "prodLowThresholds",
            &pool.prod_low_thresholds,
        );
        for (name, low) in &pool.low_thresholds {
            if let Some(high) = pool.high_thresholds.get(name)
                && low > high
            {
                errors.push(format!(
                    "{pool_path}.lowThresholds[{name}]: Invalid value: {low}: low percentage must be less than or equal to highThresholds"
                ));
            }
        }
        for (name, prod_high) in &pool.prod_high_thresholds {
            if let Some(high) = pool.high_thresholds.get(name)
                && prod_high > high
            {
                errors.push(format!(
                    "{pool_path}.prodHighThresholds[{name}]: Invalid value: {prod_high}: node percentage must be greater than or equal to prodHighThresholds"
                ));
            }
        }
        for (name, prod_low) in &pool.prod_low_thresholds {
            if let Some(prod_high) = pool.prod_high_thresholds.get(name)
                && prod_low > prod_high
            {
                errors.push(format!(
                    "{pool_path}.prodLowThresholds[{name}]: Invalid value: {prod_low}: low percentage must be less than or equal to prodHighThresholds"
                ));
            }
        }
        for (name, weight) in &pool.resource_weights {
            if *weight < 0 {
                errors.push(format!(
                    "{pool_path}.resourceWeights[{name}]: Invalid value: {weight}: must not be negative"
                ));
            }
        }
        if let Some(condition) = &pool.anomaly_condition {
            if condition.consecutive_abnormalities == 0 {
                errors.push(format!(
                    "{pool_path}.anomalyCondition.consecutiveAbnormalities: Invalid value: 0: consecutiveAbnormalities must be greater than 0"
                ));
            }
            if condition.consecutive_normalities == 0 {
                errors.push(format!(
                    "{pool_path}.anomalyCondition.consecutiveNormalities: Invalid value: 0: consecutiveNormalities must be greater than 0"
                ));
            }
        }
    }
    errors
}

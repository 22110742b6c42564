//! Upstream's defaulting of `descheduler/v1alpha2` (its `SetDefaults_*`
//! functions and default plugin set), applied to the decoded file.

use std::collections::BTreeSet;
use std::time::Duration;

use apis::extension::duration::GoDuration;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::error::ConfigError;
use super::types::*;

/// Name of the single profile when the file names none.
pub const DEFAULT_DESCHEDULER_NAME: &str = "koord-descheduler";
/// Upstream `DefaultInsecureDeschedulerPort`: healthz and metrics.
pub const DEFAULT_INSECURE_PORT: u16 = 10251;
/// The pool upstream's conversion makes of the top-level thresholds.
pub const DEFAULT_NODE_POOL_NAME: &str = "__default_node_pool__";

const DEFAULT_NODE_METRIC_EXPIRATION_SECONDS: i64 = 180;
const DEFAULT_DETECTOR_CACHE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
const DEFAULT_ANOMALY_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_CONSECUTIVE_ABNORMALITIES: u32 = 5;
const DEFAULT_CONSECUTIVE_NORMALITIES: u32 = 3;
const DEFAULT_MAX_MIGRATING_PER_NODE: i32 = 2;
const DEFAULT_JOB_MODE: &str = "ReservationFirst";
const DEFAULT_JOB_TTL: Duration = Duration::from_secs(5 * 60);
const DEFAULT_EVICTION_POLICY: &str = "Eviction";
const DEFAULT_EVICT_QPS: f64 = 10.0;
const DEFAULT_EVICT_BURST: i32 = 1;
const DEFAULT_SCHEDULER_NAME: &str = "koord-scheduler";
const DEFAULT_ARBITRATION_INTERVAL: Duration = Duration::from_millis(500);
const DEFAULT_WORKLOAD_LIMITER_WINDOW: Duration = Duration::from_secs(5 * 60);

/// The configuration upstream runs with when `--config` is not given.
pub fn default_configuration() -> DeschedulerConfiguration {
    DeschedulerConfiguration {
        api_version: API_VERSION.to_string(),
        kind: KIND.to_string(),
        ..Default::default()
    }
}

fn go(duration: Duration) -> GoDuration {
    GoDuration::from_std(duration)
}

fn default_anomaly_condition() -> LoadAnomalyCondition {
    LoadAnomalyCondition {
        timeout: Some(go(DEFAULT_ANOMALY_TIMEOUT)),
        consecutive_abnormalities: DEFAULT_CONSECUTIVE_ABNORMALITIES,
        consecutive_normalities: DEFAULT_CONSECUTIVE_NORMALITIES,
    }
}

/// Upstream's default plugins: MigrationController as the evictor and filter.
fn default_plugins() -> Plugins {
    Plugins {
        evict: PluginSet {
            enabled: vec![Plugin::named(MIGRATION_CONTROLLER)],
            disabled: Vec::new(),
        },
        filter: PluginSet {
            enabled: vec![Plugin::named(MIGRATION_CONTROLLER)],
            disabled: Vec::new(),
        },
        ..Default::default()
    }
}

/// Upstream `mergePluginSet`: defaults minus the disabled ones (all with
/// `*`), a re-enabled default keeps its place, other custom plugins follow.
fn merge_plugin_set(defaults: PluginSet, custom: PluginSet) -> PluginSet {
    let disabled: BTreeSet<&str> = custom.disabled.iter().map(|p| p.name.as_str()).collect();
    let mut replaced = BTreeSet::new();
    let mut enabled = Vec::new();
    if !disabled.contains("*") {
        for plugin in defaults.enabled {
            if disabled.contains(plugin.name.as_str()) {
                continue;
            }
            // The last custom entry of a name wins, as upstream's map does.
            match custom.enabled.iter().rposition(|p| p.name == plugin.name) {
                Some(index) => {
                    replaced.insert(index);
                    enabled.push(custom.enabled[index].clone());
                }
                None => enabled.push(plugin),
            }
        }
    }
    for (index, plugin) in custom.enabled.into_iter().enumerate() {
        if !replaced.contains(&index) {
            enabled.push(plugin);
        }
    }
    PluginSet {
        enabled,
        disabled: Vec::new(),
    }
}

fn merge_plugins(custom: Option<Plugins>) -> Plugins {
    let defaults = default_plugins();
    let Some(custom) = custom else {
        return defaults;
    };
    Plugins {
        deschedule: merge_plugin_set(defaults.deschedule, custom.deschedule),
        balance: merge_plugin_set(defaults.balance, custom.balance),
        evict: merge_plugin_set(defaults.evict, custom.evict),
        filter: merge_plugin_set(defaults.filter, custom.filter),
    }
}

/// Plugins whose args upstream's scheme knows (so a default is added when
/// an enabled one has no `pluginConfig` entry).
const KNOWN_ARGS: &[&str] = &[
    MIGRATION_CONTROLLER,
    LOW_NODE_LOAD,
    "CustomPriority",
    "FragmentationAware",
    "ScaleDownBinPack",
];

pub(crate) fn set_defaults(
    file: &mut DeschedulerConfiguration,
    decoded: &mut Vec<DecodedArgs>,
) -> Result<(), ConfigError> {
    if file.profiles.is_empty() {
        file.profiles.push(DeschedulerProfile::default());
        decoded.push(DecodedArgs::default());
    }
    if file.profiles.len() == 1 && file.profiles[0].name.is_empty() {
        file.profiles[0].name = DEFAULT_DESCHEDULER_NAME.to_string();
    }
    for (profile, args) in file.profiles.iter_mut().zip(decoded.iter_mut()) {
        set_profile_defaults(profile, args)?;
    }

    let election = &mut file.leader_election;
    if election.resource_lock.is_empty() {
        election.resource_lock = "leases".to_string();
    }
    if election.resource_namespace.is_empty() {
        election.resource_namespace = "koordinator-system".to_string();
    }
    if election.resource_name.is_empty() {
        election.resource_name = DEFAULT_DESCHEDULER_NAME.to_string();
    }
    // component-base RecommendedDefaultLeaderElectionConfiguration.
    election.leader_elect.get_or_insert(true);
    if election.lease_duration.as_nanos() == 0 {
        election.lease_duration = GoDuration::from_secs(15);
    }
    if election.renew_deadline.as_nanos() == 0 {
        election.renew_deadline = GoDuration::from_secs(10);
    }
    if election.retry_period.as_nanos() == 0 {
        election.retry_period = GoDuration::from_secs(2);
    }

    let client = &mut file.client_connection;
    if client.content_type.is_empty() {
        client.content_type = "application/vnd.kubernetes.protobuf".to_string();
        client.accept_content_types =
            "application/vnd.kubernetes.protobuf,application/json".to_string();
    }
    if client.qps == 0.0 {
        client.qps = 50.0;
    }
    if client.burst == 0 {
        client.burst = 100;
    }
    let profiling = *file.enable_profiling.get_or_insert(true);
    if profiling && file.enable_contention_profiling.is_none() {
        file.enable_contention_profiling = Some(true);
    }
    default_bind_address(&mut file.healthz_bind_address);
    default_bind_address(&mut file.metrics_bind_address);
    Ok(())
}

/// Upstream: absent → `0.0.0.0:10251`; `host:port` with an empty host gets
/// `0.0.0.0`; a bare IP gets the default port; anything else is left for
/// validation to refuse.
fn default_bind_address(address: &mut Option<String>) {
    let Some(text) = address.as_deref() else {
        *address = Some(format!("0.0.0.0:{DEFAULT_INSECURE_PORT}"));
        return;
    };
    if let Some((host, port)) = split_host_port(text) {
        let host = if host.is_empty() { "0.0.0.0" } else { host };
        *address = Some(join_host_port(host, port));
    } else if text.parse::<std::net::IpAddr>().is_ok() {
        *address = Some(join_host_port(text, &DEFAULT_INSECURE_PORT.to_string()));
    }
}

/// Go's `net.SplitHostPort` for the forms a bind address takes.
pub(crate) fn split_host_port(text: &str) -> Option<(&str, &str)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return (!port.contains(':')).then_some((host, port));
    }
    let (host, port) = text.rsplit_once(':')?;
    (!host.contains(':')).then_some((host, port))
}

fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn set_profile_defaults(
    profile: &mut DeschedulerProfile,
    args: &mut DecodedArgs,
) -> Result<(), ConfigError> {
    let plugins = merge_plugins(profile.plugins.take());
    // Default args for each enabled plugin with known args and no entry.
    let mut names: BTreeSet<String> = BTreeSet::new();
    for set in [
        &plugins.deschedule,
        &plugins.balance,
        &plugins.evict,
        &plugins.filter,
    ] {
        names.extend(set.enabled.iter().map(|plugin| plugin.name.clone()));
    }
    profile.plugins = Some(plugins);
    for name in names {
        let configured = profile.plugin_config.iter().any(|c| c.name == name);
        if configured || !KNOWN_ARGS.contains(&name.as_str()) {
            continue;
        }
        match name.as_str() {
            LOW_NODE_LOAD => args.low_node_load = Some(LowNodeLoadArgs::default()),
            MIGRATION_CONTROLLER => {
                args.migration_controller = Some(MigrationControllerArgs::default())
            }
            _ => {}
        }
        let kind = format!("{name}Args");
        profile.plugin_config.push(PluginConfig {
            name,
            args: Some(serde_json::json!({"apiVersion": API_VERSION, "kind": kind})),
        });
    }
    if let Some(low_node_load) = args.low_node_load.as_mut() {
        set_low_node_load_defaults(low_node_load);
    }
    let migration = args
        .migration_controller
        .get_or_insert_with(Default::default);
    set_migration_controller_defaults(migration);
    // The file carries the defaulted args, as upstream's encoder writes them.
    for config in &mut profile.plugin_config {
        let typed = match config.name.as_str() {
            LOW_NODE_LOAD => args.low_node_load.as_ref().map(serde_json::to_value),
            MIGRATION_CONTROLLER => args.migration_controller.as_ref().map(serde_json::to_value),
            _ => None,
        };
        if let Some(value) = typed {
            let mut value = value.map_err(|err| ConfigError::Decode(err.to_string()))?;
            if let Some(object) = value.as_object_mut() {
                object.insert("apiVersion".into(), API_VERSION.into());
                object.insert("kind".into(), format!("{}Args", config.name).into());
            }
            config.args = Some(value);
        }
    }
    Ok(())
}

/// Upstream `SetDefaults_LowNodeLoadArgs` and `SetDefaults_LowNodeLoadNodePools`.
pub(crate) fn set_low_node_load_defaults(args: &mut LowNodeLoadArgs) {
    args.node_fit.get_or_insert(true);
    match args.anomaly_condition.as_mut() {
        None => args.anomaly_condition = Some(default_anomaly_condition()),
        // Upstream fills one of the two counts per pass (an else-if chain).
        Some(condition) if condition.consecutive_abnormalities == 0 => {
            condition.consecutive_abnormalities = DEFAULT_CONSECUTIVE_ABNORMALITIES;
        }
        Some(condition) if condition.consecutive_normalities == 0 => {
            condition.consecutive_normalities = DEFAULT_CONSECUTIVE_NORMALITIES;
        }
        Some(_) => {}
    }
    args.detector_cache_timeout
        .get_or_insert(go(DEFAULT_DETECTOR_CACHE_TIMEOUT));
    args.node_metric_expiration_seconds
        .get_or_insert(DEFAULT_NODE_METRIC_EXPIRATION_SECONDS);

    let mut default_weights: ResourceWeights =
        [("cpu".to_string(), 1), ("memory".to_string(), 1)].into();
    for name in args
        .low_thresholds
        .iter()
        .chain(args.high_thresholds.iter())
        .flat_map(|thresholds| thresholds.keys())
    {
        default_weights.insert(name.clone(), 1);
    }
    match args.resource_weights.as_mut() {
        None => args.resource_weights = Some(default_weights),
        Some(weights) => {
            for (name, weight) in default_weights {
                let entry = weights.entry(name).or_insert(0);
                if *entry <= 0 {
                    *entry = weight;
                }
            }
        }
    }

    let inherited_condition = args.anomaly_condition.clone();
    for pool in &mut args.node_pools {
        if pool.high_thresholds.is_none() {
            pool.high_thresholds = args.high_thresholds.clone();
        }
        if pool.low_thresholds.is_none() {
            pool.low_thresholds = args.low_thresholds.clone();
        }
        if pool.prod_high_thresholds.is_none() {
            pool.prod_high_thresholds = args.prod_high_thresholds.clone();
        }
        if pool.prod_low_thresholds.is_none() {
            pool.prod_low_thresholds = args.prod_low_thresholds.clone();
        }
        if pool.resource_weights.is_none() {
            pool.resource_weights = args.resource_weights.clone();
        }
        match (
            pool.anomaly_condition.as_mut(),
            inherited_condition.as_ref(),
        ) {
            (None, _) => pool.anomaly_condition = inherited_condition.clone(),
            (Some(condition), Some(inherited)) => {
                if condition.consecutive_abnormalities == 0 {
                    condition.consecutive_abnormalities = inherited.consecutive_abnormalities;
                }
                if condition.consecutive_normalities == 0 {
                    condition.consecutive_normalities = inherited.consecutive_normalities;
                }
            }
            (Some(_), None) => {}
        }
    }
}

/// Upstream `SetDefaults_MigrationControllerArgs`.
pub(crate) fn set_migration_controller_defaults(args: &mut MigrationControllerArgs) {
    args.max_concurrent_reconciles.get_or_insert(1);
    args.max_migrating_per_node
        .get_or_insert(DEFAULT_MAX_MIGRATING_PER_NODE);
    if args.default_job_mode.is_empty() {
        args.default_job_mode = DEFAULT_JOB_MODE.to_string();
    }
    if args.scheduler_names.is_empty() {
        args.scheduler_names = vec![DEFAULT_SCHEDULER_NAME.to_string()];
    }
    args.default_job_ttl.get_or_insert(go(DEFAULT_JOB_TTL));
    if args.eviction_policy.is_empty() {
        args.eviction_policy = DEFAULT_EVICTION_POLICY.to_string();
    }
    args.evict_qps
        .get_or_insert(FloatOrString::Float(DEFAULT_EVICT_QPS));
    args.evict_burst.get_or_insert(DEFAULT_EVICT_BURST);
    if args.object_limiters.is_empty() {
        args.object_limiters.insert(
            "workload".to_string(),
            MigrationObjectLimiter {
                duration: go(DEFAULT_WORKLOAD_LIMITER_WINDOW),
                max_migrating: None::<IntOrString>,
                burst: 0,
            },
        );
    }
    let arbitration = args.arbitration_args.get_or_insert(ArbitrationArgs {
        enabled: true,
        interval: None,
    });
    arbitration
        .interval
        .get_or_insert(go(DEFAULT_ARBITRATION_INTERVAL));
}

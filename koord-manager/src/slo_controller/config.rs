//! The manager's view of the `slo-controller-config` ConfigMap: parsed,
//! validated key by key, each key kept at its last valid value when a bad
//! version arrives, and whether the controllers may act on it yet.

use std::collections::{BTreeMap, BTreeSet};

use apis::configuration::{
    ALL_CONFIG_KEYS, COLOCATION_CONFIG_KEY, CPU_BURST_CONFIG_KEY,
    CPU_LATENCY_PROTECTION_CONFIG_KEY, CPU_NORMALIZATION_CONFIG_KEY, CPULatencyProtectionCfg,
    ColocationStrategy, HOST_APPLICATION_CONFIG_KEY, RESOURCE_AMPLIFICATION_CONFIG_KEY,
    RESOURCE_QOS_CONFIG_KEY, RESOURCE_THRESHOLD_CONFIG_KEY, SYSTEM_CONFIG_KEY, SloConfigParseError,
    SloControllerConfig, ValidationErrors, apply_node_colocation_overrides,
    default_colocation_strategy, merged,
};
use k8s_openapi::api::core::v1::Node;

/// Why a ConfigMap was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ConfigRejected {
    #[error(transparent)]
    Parse(#[from] SloConfigParseError),
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
}

/// Parses and validates ConfigMap data; a missing ConfigMap (`None`) means
/// every key at its default.
///
/// Node entries whose selectors overlap are accepted: the controllers take
/// the first match, as upstream's do. Refusing overlaps is the (optional)
/// admission webhook's job, so that one check is left out here.
pub fn parse_config(
    data: Option<&BTreeMap<String, String>>,
) -> Result<SloControllerConfig, ConfigRejected> {
    let Some(data) = data else {
        return Ok(SloControllerConfig::default());
    };
    let config = SloControllerConfig::from_configmap_data(data)?;
    if let Err(mut invalid) = config.validate() {
        invalid
            .errors
            .retain(|error| !is_overlap_report(&error.path));
        if !invalid.errors.is_empty() {
            return Err(invalid.into());
        }
    }
    Ok(config)
}

/// Overlaps are reported on the list itself (`<key>.nodeStrategies`), every
/// other node-entry problem on an indexed entry.
fn is_overlap_report(path: &str) -> bool {
    path.ends_with(".nodeStrategies") || path.ends_with(".nodeConfigs")
}

/// The part of the ConfigMap a controller reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigSection {
    /// `colocation-config`: read by the NodeMetric and node resource controllers.
    Colocation,
    /// [`NODE_SLO_KEYS`]: read by the NodeSLO controller.
    NodeSlo,
}

impl ConfigSection {
    pub const ALL: [ConfigSection; 2] = [ConfigSection::Colocation, ConfigSection::NodeSlo];

    pub fn name(self) -> &'static str {
        match self {
            ConfigSection::Colocation => "colocation",
            ConfigSection::NodeSlo => "nodeslo",
        }
    }
}

/// The keys the NodeSLO controller renders into NodeSLOs.
pub const NODE_SLO_KEYS: [&str; 5] = [
    RESOURCE_THRESHOLD_CONFIG_KEY,
    RESOURCE_QOS_CONFIG_KEY,
    CPU_BURST_CONFIG_KEY,
    SYSTEM_CONFIG_KEY,
    HOST_APPLICATION_CONFIG_KEY,
];

/// A summary of what happened when a ConfigMap version was offered.
#[derive(Debug, PartialEq)]
pub enum ConfigOutcome {
    /// The config in force changed and nothing was refused.
    Applied,
    /// Same content as the config in force, nothing refused.
    Unchanged,
    /// At least one key was refused and keeps its previous value; the text
    /// names the bad fields. Valid keys of the same version were applied.
    Rejected(String),
}

/// What one [`ConfigState::offer`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigUpdate {
    /// The config in force changed.
    pub changed: bool,
    /// Keys of this version that were refused (their last valid value stays
    /// in force, the defaults if there never was one), with the problems.
    pub refused: BTreeMap<String, String>,
    /// Sections that became available with this offer.
    pub became_available: Vec<ConfigSection>,
    /// The ConfigMap is absent but a configuration was already in force: it
    /// is kept (upstream ignores the deletion of the ConfigMap).
    pub kept_after_deletion: bool,
}

impl ConfigUpdate {
    pub fn outcome(&self) -> ConfigOutcome {
        if !self.refused.is_empty() {
            ConfigOutcome::Rejected(
                self.refused
                    .iter()
                    .map(|(key, problem)| format!("{key}: {problem}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        } else if self.changed {
            ConfigOutcome::Applied
        } else {
            ConfigOutcome::Unchanged
        }
    }
}

/// The config in force, key by key, as upstream's config caches keep it:
///
/// - a valid key replaces the value in force; a refused key (malformed JSON
///   or failing validation) keeps the last valid value, or the defaults if
///   the key was never valid;
/// - a key that is absent or blank means its defaults;
/// - a ConfigMap that does not exist means the defaults for every key that
///   never had a valid value; keys that had one keep it (upstream ignores
///   the ConfigMap's deletion).
///
/// Whether a controller may act on it ([`ConfigState::availability`]) also
/// follows upstream: the NodeMetric and node resource controllers wait until
/// `colocation-config` has been valid (or absent) once, the NodeSLO
/// controller until the ConfigMap (or its absence) has been seen once. A
/// fresh state (`default()`) has seen nothing, so nothing is available.
#[derive(Clone, Debug, Default)]
pub struct ConfigState {
    current: SloControllerConfig,
    /// A ConfigMap version, or its absence, has been offered.
    observed: bool,
    /// Keys whose value in force came from a valid version or from the
    /// defaults of an absent key or ConfigMap.
    settled: BTreeSet<String>,
    /// Keys refused in the last version offered.
    refused: BTreeMap<String, String>,
}

impl ConfigState {
    pub fn current(&self) -> &SloControllerConfig {
        &self.current
    }

    /// Keys refused in the last version offered, with the problems.
    pub fn refused(&self) -> &BTreeMap<String, String> {
        &self.refused
    }

    /// `Ok` when the controllers reading `section` may act on the config in
    /// force, otherwise why they must not.
    pub fn availability(&self, section: ConfigSection) -> Result<(), String> {
        if !self.observed {
            return Err("the slo-controller-config ConfigMap has not been read yet".to_owned());
        }
        match section {
            ConfigSection::NodeSlo => Ok(()),
            ConfigSection::Colocation => {
                if self.settled.contains(COLOCATION_CONFIG_KEY) {
                    return Ok(());
                }
                let problem = self
                    .refused
                    .get(COLOCATION_CONFIG_KEY)
                    .map_or("refused", String::as_str);
                Err(format!(
                    "{COLOCATION_CONFIG_KEY} has not been valid since start ({problem})"
                ))
            }
        }
    }

    /// Keys that have had no valid value (nor been absent) since start,
    /// with the problem of their last version: upstream's per-plugin config
    /// caches (CPU normalization, resource amplification) are not available
    /// for them. Empty before the ConfigMap is read (the controllers are
    /// paused then anyway).
    pub fn unavailable_keys(&self) -> BTreeMap<String, String> {
        if !self.observed {
            return BTreeMap::new();
        }
        ALL_CONFIG_KEYS
            .iter()
            .filter(|key| !self.settled.contains(**key))
            .map(|key| {
                let problem = self.refused.get(*key).map_or("refused", String::as_str);
                (
                    (*key).to_owned(),
                    format!("{key} has not been valid since start ({problem})"),
                )
            })
            .collect()
    }

    pub fn is_available(&self, section: ConfigSection) -> bool {
        self.availability(section).is_ok()
    }

    /// Offers a ConfigMap version: `Some(data)` for an existing ConfigMap
    /// (an empty map when it has no data), `None` when it does not exist.
    pub fn offer(&mut self, data: Option<&BTreeMap<String, String>>) -> ConfigUpdate {
        let available_before: Vec<bool> = ConfigSection::ALL
            .iter()
            .map(|section| self.is_available(*section))
            .collect();
        let before = self.current.clone();
        let mut update = ConfigUpdate::default();
        match data {
            None => {
                // Keys that never had a valid value take their defaults.
                let defaults = SloControllerConfig::default();
                for key in ALL_CONFIG_KEYS {
                    if self.settled.insert(key.to_owned()) {
                        take_key(&mut self.current, &defaults, key);
                    } else {
                        update.kept_after_deletion = true;
                    }
                }
                self.refused.clear();
            }
            Some(data) => {
                let (candidate, problems) = parse_by_key(data);
                for key in ALL_CONFIG_KEYS {
                    if problems.contains_key(key) {
                        continue;
                    }
                    take_key(&mut self.current, &candidate, key);
                    self.settled.insert(key.to_owned());
                }
                let last_latency = self
                    .current
                    .other_keys
                    .get(CPU_LATENCY_PROTECTION_CONFIG_KEY)
                    .cloned();
                self.current.other_keys = candidate.other_keys;
                self.refused = problems
                    .into_iter()
                    .map(|(key, list)| (key.to_owned(), list.join("; ")))
                    .collect();
                // Our key lives among the other keys: kept at its last valid
                // value when refused (by its parser or by the validation
                // above), like upstream's keys.
                let key = CPU_LATENCY_PROTECTION_CONFIG_KEY.to_owned();
                let parse_error =
                    CPULatencyProtectionCfg::from_other_keys(&self.current.other_keys).err();
                if let Some(err) = &parse_error {
                    self.refused.insert(key.clone(), err.to_string());
                }
                if parse_error.is_some() || self.refused.contains_key(&key) {
                    match last_latency {
                        Some(value) => self.current.other_keys.insert(key.clone(), value),
                        None => self.current.other_keys.remove(&key),
                    };
                }
                update.refused = self.refused.clone();
            }
        }
        self.observed = true;
        update.changed = self.current != before;
        update.became_available = ConfigSection::ALL
            .iter()
            .zip(available_before)
            .filter(|(section, was)| !was && self.is_available(**section))
            .map(|(section, _)| *section)
            .collect();
        update
    }
}

/// Parses every key on its own and validates the result, grouping the
/// problems by ConfigMap key. Overlapping node selectors are not a problem
/// here (see [`parse_config`]).
fn parse_by_key(
    data: &BTreeMap<String, String>,
) -> (SloControllerConfig, BTreeMap<&'static str, Vec<String>>) {
    let (config, parse_errors) = SloControllerConfig::from_configmap_data_lenient(data);
    let mut problems: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for error in parse_errors {
        let key = ALL_CONFIG_KEYS
            .iter()
            .copied()
            .find(|key| *key == error.key);
        match key {
            Some(key) => problems
                .entry(key)
                .or_default()
                .push(error.source.to_string()),
            None => {
                for key in ALL_CONFIG_KEYS {
                    problems.entry(key).or_default().push(error.to_string());
                }
            }
        }
    }
    if let Err(invalid) = config.validate() {
        for error in invalid
            .errors
            .iter()
            .filter(|error| !is_overlap_report(&error.path))
        {
            // Our key is validated with the rest and refused on its own.
            let key = ALL_CONFIG_KEYS
                .iter()
                .copied()
                .chain([CPU_LATENCY_PROTECTION_CONFIG_KEY])
                .find(|key| {
                    error.path == *key
                        || error
                            .path
                            .strip_prefix(key)
                            .is_some_and(|rest| rest.starts_with('.'))
                });
            match key {
                Some(key) => problems.entry(key).or_default().push(error.to_string()),
                // Not attributable to one key: refuse them all.
                None => {
                    for key in ALL_CONFIG_KEYS {
                        problems.entry(key).or_default().push(error.to_string());
                    }
                }
            }
        }
    }
    (config, problems)
}

/// Copies the value of one ConfigMap key from `source` into `target`.
fn take_key(target: &mut SloControllerConfig, source: &SloControllerConfig, key: &str) {
    match key {
        COLOCATION_CONFIG_KEY => target.colocation = source.colocation.clone(),
        RESOURCE_THRESHOLD_CONFIG_KEY => {
            target.resource_threshold = source.resource_threshold.clone()
        }
        RESOURCE_QOS_CONFIG_KEY => target.resource_qos = source.resource_qos.clone(),
        CPU_BURST_CONFIG_KEY => target.cpu_burst = source.cpu_burst.clone(),
        SYSTEM_CONFIG_KEY => target.system = source.system.clone(),
        HOST_APPLICATION_CONFIG_KEY => target.host_application = source.host_application.clone(),
        CPU_NORMALIZATION_CONFIG_KEY => target.cpu_normalization = source.cpu_normalization.clone(),
        RESOURCE_AMPLIFICATION_CONFIG_KEY => {
            target.resource_amplification = source.resource_amplification.clone()
        }
        _ => {}
    }
}

/// The colocation settings of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeColocation {
    /// The cluster-level `enable` (defaults ← `colocation-config`).
    pub cluster_enabled: bool,
    /// The node's merged strategy; `None` when the cluster strategy is invalid.
    pub strategy: Option<ColocationStrategy>,
}

/// `defaults ← cluster ← first matching nodeConfig ← node annotation/labels`.
pub fn node_colocation(config: &SloControllerConfig, node: &Node) -> NodeColocation {
    let colocation = config.colocation.clone().unwrap_or_default();
    let cluster = merged(&default_colocation_strategy(), &colocation.strategy);
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let strategy = colocation.strategy_for_node(labels).map(|mut strategy| {
        // A malformed override annotation is ignored, as upstream does.
        let _ = apply_node_colocation_overrides(&mut strategy, labels, annotations);
        strategy
    });
    NodeColocation {
        cluster_enabled: cluster.enable == Some(true),
        strategy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn an_invalid_configmap_keeps_the_last_valid_config() {
        let mut state = ConfigState::default();
        let good_threshold =
            r#"{"clusterStrategy":{"enable":true,"cpuSuppressThresholdPercent":55}}"#;
        let good = data(&[("resource-threshold-config", good_threshold)]);
        assert_eq!(state.offer(Some(&good)).outcome(), ConfigOutcome::Applied);
        let before = state.current().clone();

        let out_of_range = data(&[(
            "resource-threshold-config",
            r#"{"clusterStrategy":{"cpuSuppressThresholdPercent":500}}"#,
        )]);
        match state.offer(Some(&out_of_range)).outcome() {
            ConfigOutcome::Rejected(message) => {
                assert!(message.contains("cpuSuppressThresholdPercent"), "{message}")
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
        let not_json = data(&[
            ("resource-threshold-config", good_threshold),
            ("colocation-config", "{not json"),
        ]);
        let update = state.offer(Some(&not_json));
        assert!(matches!(
            update.outcome(),
            ConfigOutcome::Rejected(message) if message.contains("colocation-config")
        ));
        assert_eq!(
            update.refused.keys().collect::<Vec<_>>(),
            ["colocation-config"]
        );
        assert_eq!(state.current(), &before);
        assert_eq!(state.offer(Some(&good)).outcome(), ConfigOutcome::Unchanged);
    }

    #[test]
    fn keys_are_taken_one_by_one() {
        let mut state = ConfigState::default();
        let first = data(&[
            ("colocation-config", r#"{"enable":true}"#),
            (
                "resource-threshold-config",
                r#"{"clusterStrategy":{"enable":true}}"#,
            ),
        ]);
        state.offer(Some(&first));
        // A valid colocation change next to a refused threshold key: the
        // colocation change applies, the threshold keeps its last value.
        let mixed = data(&[
            (
                "colocation-config",
                r#"{"enable":true,"degradeTimeMinutes":20}"#,
            ),
            (
                "resource-threshold-config",
                r#"{"clusterStrategy":{"cpuSuppressThresholdPercent":500}}"#,
            ),
        ]);
        let update = state.offer(Some(&mixed));
        assert!(update.changed);
        assert_eq!(
            update.refused.keys().collect::<Vec<_>>(),
            ["resource-threshold-config"]
        );
        let colocation = state.current().colocation.as_ref().unwrap();
        assert_eq!(colocation.strategy.degrade_time_minutes, Some(20));
        let threshold = state.current().resource_threshold.as_ref().unwrap();
        let cluster = threshold.cluster_strategy.as_ref().unwrap();
        assert_eq!(cluster.enable, Some(true));
        assert_eq!(cluster.cpu_suppress_threshold_percent, None);
        // A key that is removed from the ConfigMap goes back to its defaults.
        let only_colocation = data(&[("colocation-config", r#"{"enable":true}"#)]);
        assert!(state.offer(Some(&only_colocation)).changed);
        assert_eq!(state.current().resource_threshold, None);
    }

    #[test]
    fn a_refused_latency_key_refuses_only_itself() {
        let mut state = ConfigState::default();
        let latency = "cpu-latency-protection-config";
        let valid_latency = r#"{"clusterStrategy":{"enable":true,"targetWaitPercent":25}}"#;
        state.offer(Some(&data(&[
            ("colocation-config", r#"{"enable":true}"#),
            (latency, valid_latency),
        ])));
        // Out of range, and a node strategy without a selector (refused by
        // the validation every key goes through): each time the colocation
        // change still applies and the latency key keeps its last value.
        for (minutes, bad) in [
            (
                20,
                r#"{"clusterStrategy":{"enable":true,"targetWaitPercent":0}}"#,
            ),
            (
                30,
                r#"{"nodeStrategies":[{"name":"all","targetWaitPercent":10}]}"#,
            ),
        ] {
            let colocation = format!(r#"{{"enable":true,"degradeTimeMinutes":{minutes}}}"#);
            let update = state.offer(Some(&data(&[
                ("colocation-config", colocation.as_str()),
                (latency, bad),
            ])));
            assert_eq!(
                update.refused.keys().collect::<Vec<_>>(),
                [latency],
                "{bad}"
            );
            let applied = state.current().colocation.as_ref().unwrap();
            assert_eq!(applied.strategy.degrade_time_minutes, Some(minutes));
            assert_eq!(
                state.current().other_keys.get(latency).map(String::as_str),
                Some(valid_latency)
            );
        }
    }

    #[test]
    fn a_missing_configmap_means_defaults() {
        let mut state = ConfigState::default();
        let update = state.offer(None);
        assert_eq!(update.outcome(), ConfigOutcome::Unchanged);
        assert_eq!(
            update.became_available,
            [ConfigSection::Colocation, ConfigSection::NodeSlo]
        );
        let node = Node::default();
        let colocation = node_colocation(state.current(), &node);
        assert!(!colocation.cluster_enabled);
        assert_eq!(colocation.strategy.unwrap().degrade_time_minutes, Some(15));
    }

    #[test]
    fn nothing_is_available_before_the_configmap_is_read() {
        let state = ConfigState::default();
        for section in ConfigSection::ALL {
            let reason = state.availability(section).unwrap_err();
            assert!(reason.contains("not been read"), "{reason}");
        }
    }

    #[test]
    fn colocation_waits_for_a_valid_colocation_config() {
        let mut state = ConfigState::default();
        let invalid = data(&[
            (
                "colocation-config",
                r#"{"enable":true,"degradeTimeMinutes":0}"#,
            ),
            (
                "resource-threshold-config",
                r#"{"clusterStrategy":{"enable":true}}"#,
            ),
        ]);
        let update = state.offer(Some(&invalid));
        // Upstream: the NodeSLO cache is available with any ConfigMap, the
        // colocation cache only once colocation-config was valid.
        assert_eq!(update.became_available, [ConfigSection::NodeSlo]);
        let reason = state.availability(ConfigSection::Colocation).unwrap_err();
        assert!(reason.contains("degradeTimeMinutes"), "{reason}");
        assert!(state.current().resource_threshold.is_some());
        assert_eq!(state.current().colocation, None);

        // The same invalid version again changes nothing.
        let again = state.offer(Some(&invalid));
        assert!(!again.changed && again.became_available.is_empty());
        assert!(!state.is_available(ConfigSection::Colocation));

        // A present ConfigMap whose colocation-config is blank: defaults, available.
        let blank = data(&[("colocation-config", " ")]);
        let update = state.offer(Some(&blank));
        assert_eq!(update.became_available, [ConfigSection::Colocation]);
        assert_eq!(state.current().colocation, None);
    }

    #[test]
    fn keys_never_valid_are_unavailable() {
        let mut state = ConfigState::default();
        assert!(state.unavailable_keys().is_empty());
        state.offer(Some(&data(&[(
            "resource-amplification-config",
            "{not json",
        )])));
        let unavailable = state.unavailable_keys();
        assert_eq!(
            unavailable.keys().collect::<Vec<_>>(),
            ["resource-amplification-config"]
        );
        assert!(
            unavailable["resource-amplification-config"].contains("has not been valid"),
            "{unavailable:?}"
        );
        state.offer(Some(&data(&[(
            "resource-amplification-config",
            r#"{"enable":true}"#,
        )])));
        assert!(state.unavailable_keys().is_empty());
        // Refused later: the last valid value stays in force, available.
        state.offer(Some(&data(&[(
            "resource-amplification-config",
            "{not json",
        )])));
        assert!(state.unavailable_keys().is_empty());
    }

    #[test]
    fn a_deleted_configmap_keeps_the_config_in_force() {
        let mut state = ConfigState::default();
        let good = data(&[("colocation-config", r#"{"enable":true}"#)]);
        state.offer(Some(&good));
        let before = state.current().clone();
        let update = state.offer(None);
        assert!(update.kept_after_deletion);
        assert!(!update.changed);
        assert_eq!(state.current(), &before);

        // Never valid, then deleted: the defaults, and colocation is available.
        let mut state = ConfigState::default();
        state.offer(Some(&data(&[("colocation-config", "{not json")])));
        assert!(!state.is_available(ConfigSection::Colocation));
        state.offer(None);
        assert!(state.is_available(ConfigSection::Colocation));
        assert_eq!(state.current().colocation, None);
    }
}

//! The plugins and the registry that builds them from the configuration.
//! A new plugin is one module plus one [`PluginFactory`] row in [`REGISTRY`].

#[cfg(test)]
mod amount_tests;
pub mod coscheduling;
pub mod deviceshare;
pub mod elasticquota;
pub mod loadaware;
pub mod nodenumaresource;
pub mod noderesourcesfit;
pub mod noderesourcesfitplus;
#[cfg(test)]
#[path = "tests.rs"]
mod plugin_tests;
pub mod reservation;
pub mod scarceresourceavoidance;

use std::collections::BTreeSet;

use std::time::Duration;

use crate::config::{ConfigError, Profile, SchedulerConfiguration};
use crate::framework::{Plugin, PluginEntry, Scheduler};

/// Builds a plugin from its `pluginConfig` args (absent → defaults).
pub type BuildPlugin = fn(Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError>;

/// How to build one plugin and where it takes part by default.
pub struct PluginFactory {
    pub name: &'static str,
    /// Enabled without being listed in the profile.
    pub enabled_by_default: bool,
    /// Takes part in filtering.
    pub filters: bool,
    /// Score weight when enabled without an explicit weight; 0 = does not score.
    pub default_score_weight: i64,
    pub build: BuildPlugin,
}

/// Every plugin this scheduler knows, in the order they run.
pub const REGISTRY: &[PluginFactory] = &[
    PluginFactory {
        name: coscheduling::NAME,
        enabled_by_default: true,
        filters: true,
        default_score_weight: 0,
        build: coscheduling::build,
    },
    PluginFactory {
        name: elasticquota::NAME,
        enabled_by_default: true,
        filters: true,
        default_score_weight: 0,
        build: elasticquota::build,
    },
    PluginFactory {
        name: noderesourcesfit::NAME,
        enabled_by_default: true,
        filters: true,
        default_score_weight: 0,
        build: noderesourcesfit::build,
    },
    PluginFactory {
        name: nodenumaresource::NAME,
        enabled_by_default: true,
        filters: true,
        default_score_weight: 0,
        build: nodenumaresource::build,
    },
    PluginFactory {
        name: reservation::NAME,
        enabled_by_default: true,
        filters: true,
        default_score_weight: 1,
        build: reservation::build,
    },
    PluginFactory {
        name: deviceshare::NAME,
        enabled_by_default: true,
        filters: true,
        default_score_weight: 1,
        build: deviceshare::build,
    },
    PluginFactory {
        name: loadaware::NAME,
        enabled_by_default: true,
        filters: true,
        default_score_weight: 1,
        build: loadaware::build,
    },
    PluginFactory {
        name: noderesourcesfitplus::NAME,
        enabled_by_default: false,
        filters: false,
        default_score_weight: 1,
        build: noderesourcesfitplus::build,
    },
    PluginFactory {
        name: scarceresourceavoidance::NAME,
        enabled_by_default: false,
        filters: false,
        default_score_weight: 1,
        build: scarceresourceavoidance::build,
    },
];

/// Builds the enabled plugins of a profile: defaults, plus anything enabled
/// at any extension point, minus anything disabled (`*` disables the defaults).
pub fn build_plugins(profile: &Profile) -> Result<Vec<PluginEntry>, ConfigError> {
    let plugins = profile.plugins.clone().unwrap_or_default();
    let sets = [
        &plugins.multi_point,
        &plugins.pre_filter,
        &plugins.filter,
        &plugins.score,
        &plugins.reserve,
        &plugins.pre_bind,
    ];
    let known: BTreeSet<&str> = REGISTRY.iter().map(|f| f.name).collect();
    let mut enabled: BTreeSet<String> = BTreeSet::new();
    let mut disabled: BTreeSet<String> = BTreeSet::new();
    let mut disable_defaults = false;
    for set in sets {
        for plugin in &set.enabled {
            enabled.insert(plugin.name.clone());
        }
        for plugin in &set.disabled {
            if plugin.name == "*" {
                disable_defaults = true;
            } else {
                disabled.insert(plugin.name.clone());
            }
        }
    }
    // Plugins kube-scheduler itself runs may be listed too; only ours must exist.
    let weight_of = |name: &str| {
        plugins
            .score
            .enabled
            .iter()
            .chain(plugins.multi_point.enabled.iter())
            .find(|p| p.name == name)
            .and_then(|p| p.weight)
    };
    let score_disabled = |name: &str| {
        plugins
            .score
            .disabled
            .iter()
            .any(|p| p.name == name || p.name == "*")
    };
    let filter_disabled = |name: &str| {
        plugins
            .filter
            .disabled
            .iter()
            .any(|p| p.name == name || p.name == "*")
    };
    let mut entries = Vec::new();
    for factory in REGISTRY {
        let listed = enabled.contains(factory.name);
        let on = (listed || (factory.enabled_by_default && !disable_defaults))
            && !disabled.contains(factory.name);
        if !on {
            continue;
        }
        let plugin = (factory.build)(profile.args_for(factory.name))?;
        let score_weight = if score_disabled(factory.name) {
            0
        } else if factory.default_score_weight == 0 {
            // Does not score by default; a scoring plugin given an explicit
            // weight does (NodeNUMAResource, as upstream's profiles enable it).
            if plugin.scores() {
                weight_of(factory.name).unwrap_or(0).max(0)
            } else {
                0
            }
        } else {
            weight_of(factory.name)
                .unwrap_or(factory.default_score_weight)
                .max(0)
        };
        entries.push(PluginEntry {
            plugin,
            filter: factory.filters && !filter_disabled(factory.name),
            score_weight,
        });
    }
    for config in &profile.plugin_config {
        if !known.contains(config.name.as_str()) {
            tracing::debug!(plugin = %config.name, "args for a plugin this extender does not run; ignored");
        }
    }
    Ok(entries)
}

/// Builds the scheduler (cache + enabled plugins) for a configuration: the
/// registry sits above both the framework and the plugins.
pub fn build_scheduler(
    config: &SchedulerConfiguration,
    assumed_pod_ttl: Duration,
) -> anyhow::Result<Scheduler> {
    let profile = config.profile();
    let plugins = build_plugins(&profile)?;
    let mut scheduler = Scheduler::new(plugins, assumed_pod_ttl);
    let reservation_args: reservation::ReservationArgs =
        crate::config::parse_args(reservation::NAME, profile.args_for(reservation::NAME))?;
    scheduler.pre_allocation = reservation_args.pre_allocation()?;
    Ok(scheduler)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SchedulerConfiguration;

    #[test]
    fn defaults_and_explicit_enable_disable_and_weights() {
        let names = |yaml: &str| {
            let config = SchedulerConfiguration::from_yaml(yaml).unwrap();
            build_plugins(&config.profile())
                .unwrap()
                .into_iter()
                .map(|e| (e.plugin.name(), e.score_weight))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names("profiles: []"),
            vec![
                ("Coscheduling", 0),
                ("ElasticQuota", 0),
                ("NodeResourcesFit", 0),
                ("NodeNUMAResource", 0),
                ("Reservation", 1),
                ("DeviceShare", 1),
                ("LoadAwareScheduling", 1)
            ]
        );
        assert_eq!(
            names(
                "profiles:\n- plugins:\n    score:\n      enabled: [{name: NodeResourcesFitPlus, weight: 2}, {name: LoadAwareScheduling, weight: 5}]\n    filter:\n      disabled: [{name: ElasticQuota}]\n    reserve:\n      disabled: [{name: ElasticQuota}]\n"
            ),
            vec![
                ("Coscheduling", 0),
                ("NodeResourcesFit", 0),
                ("NodeNUMAResource", 0),
                ("Reservation", 1),
                ("DeviceShare", 1),
                ("LoadAwareScheduling", 5),
                ("NodeResourcesFitPlus", 2)
            ]
        );
    }
}

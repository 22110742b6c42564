//! `--controller-plugins`: which plugins' controllers (status and
//! annotation writers, the Reservation controller) run on this replica.

use crate::plugins::{coscheduling, elasticquota, reservation};

/// `--controller-plugins`: which plugins' controllers run, with upstream's
/// rule: the first entry naming the plugin decides (`Name` on, `-Name`
/// off), else `*` turns every one on. Upstream's controller plugins are
/// Reservation (our Reservation controller), Coscheduling (PodGroup status)
/// and ElasticQuota (quota status and annotations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerPlugins(Vec<String>);

impl Default for ControllerPlugins {
    fn default() -> Self {
        Self(vec!["*".to_string()])
    }
}

impl ControllerPlugins {
    pub fn new<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(entries.into_iter().map(Into::into).collect())
    }

    /// Whether the controller of `plugin` runs.
    pub fn is_enabled(&self, plugin: &str) -> bool {
        let mut star = false;
        for entry in &self.0 {
            if entry == plugin {
                return true;
            }
            if entry.strip_prefix('-') == Some(plugin) {
                return false;
            }
            star |= entry == "*";
        }
        star
    }

    /// Whether a write to `resource` (an API resource such as
    /// `podgroups.scheduling.sigs.k8s.io`) may go out: PodGroup status is
    /// Coscheduling's controller's, quota writes ElasticQuota's; writes to
    /// anything else belong to no controller plugin.
    pub fn allows_write_to(&self, resource: &str) -> bool {
        match resource {
            coscheduling::POD_GROUP_RESOURCE => self.is_enabled(coscheduling::NAME),
            elasticquota::RESOURCE => self.is_enabled(elasticquota::NAME),
            _ => true,
        }
    }

    /// The names turned off among the ones this scheduler runs, for the log.
    pub fn disabled(&self) -> Vec<&'static str> {
        [reservation::NAME, coscheduling::NAME, elasticquota::NAME]
            .into_iter()
            .filter(|name| !self.is_enabled(name))
            .collect()
    }
}

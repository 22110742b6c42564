//! One live descheduling round, without I/O: upstream's `deschedulerOnce`
//! over a [`ClusterView`] read from the caches. The [`Descheduler`] keeps
//! each profile's LowNodeLoad instance, and with it the anomaly detectors,
//! from round to round; the victims come out as [`Victim`]s for the sink.
//!
//! As upstream: the round refuses to run with fewer than two ready nodes
//! (evicting on a one-node cluster only disrupts), and the top-level
//! `maxNoOfPodsToEvictPerNode`/`PerNamespace`/`Total` limits start afresh
//! every round and span all profiles.

use std::collections::{BTreeMap, HashMap};

use apis::extension::duration::GoDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use k8s_openapi::jiff::Timestamp;

use crate::config::Configuration;
use crate::evictor::{EvictorError, SnapshotEvictor};
use crate::loadaware::{ClusterIndex, Evictor, LowNodeLoad, NodeClass, RoundReport};
use crate::model::{ClusterView, PodView};
use crate::plan::profile_nodes;

/// The plugin that triggers every live migration (upstream's evict trigger).
pub const LOW_NODE_LOAD_TRIGGER: &str = crate::config::LOW_NODE_LOAD;

/// A pod the round chose to migrate, with how its PodMigrationJob is made.
#[derive(Clone, Debug, PartialEq)]
pub struct Victim {
    pub profile: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub pool: String,
    /// Balanced by prod usage rather than node usage.
    pub prod: bool,
    /// Upstream's eviction reason.
    pub reason: String,
    /// The plugin that chose it.
    pub trigger: String,
    /// The MigrationController's `defaultJobMode`.
    pub mode: String,
    /// The MigrationController's `defaultJobTTL`.
    pub ttl: Option<GoDuration>,
    /// The MigrationController's `defaultDeleteOptions`.
    pub delete_options: Option<DeleteOptions>,
    /// The top-level `dryRun` or the MigrationController's: logged and
    /// counted, no PodMigrationJob.
    pub dry_run: bool,
}

/// What one profile's LowNodeLoad did in a round.
#[derive(Clone, Debug)]
pub struct ProfileRound {
    pub profile: String,
    pub report: RoundReport,
    /// Migrations LowNodeLoad's own `dryRun` kept back (never victims).
    pub low_node_load_dry_run: usize,
}

impl ProfileRound {
    /// Nodes per (pool, class), for the metrics.
    pub fn classified(&self) -> BTreeMap<(String, String), usize> {
        let mut counts = BTreeMap::new();
        for pool in &self.report.pools {
            for node in &pool.classification {
                *counts
                    .entry((pool.name.clone(), class_name(node.class)))
                    .or_insert(0) += 1;
            }
        }
        counts
    }
}

/// A class as the reports and metrics spell it (`low`, `high`, ...).
pub fn class_name(class: NodeClass) -> String {
    serde_json::to_value(class)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The outcome of a round.
#[derive(Clone, Debug)]
pub enum RoundOutcome {
    /// Nothing was looked at, and why.
    Skipped(String),
    Ran {
        profiles: Vec<ProfileRound>,
        victims: Vec<Victim>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    #[error("profile {profile}: {source}")]
    Evictor {
        profile: String,
        #[source]
        source: EvictorError,
    },
    #[error("profile {profile}: MigrationController defaultDeleteOptions: {reason}")]
    DeleteOptions { profile: String, reason: String },
}

/// One profile's long-lived state.
struct ProfileState {
    name: String,
    low_node_load: Option<LowNodeLoad>,
    delete_options: Option<DeleteOptions>,
}

/// The descheduler's state across rounds.
pub struct Descheduler {
    profiles: Vec<ProfileState>,
    rounds: u64,
}

impl Descheduler {
    /// Checks what the configuration leaves to be checked against the API
    /// types (`defaultDeleteOptions`) and sets up each profile.
    pub fn new(configuration: &Configuration) -> Result<Self, RoundError> {
        let mut profiles = Vec::new();
        for profile in &configuration.profiles {
            let delete_options = profile
                .migration_controller
                .default_delete_options
                .clone()
                .map(serde_json::from_value::<DeleteOptions>)
                .transpose()
                .map_err(|err| RoundError::DeleteOptions {
                    profile: profile.name.clone(),
                    reason: err.to_string(),
                })?;
            profiles.push(ProfileState {
                name: profile.name.clone(),
                low_node_load: profile.low_node_load.clone().map(LowNodeLoad::new),
                delete_options,
            });
        }
        Ok(Descheduler {
            profiles,
            rounds: 0,
        })
    }

    /// Whether any profile balances with LowNodeLoad.
    pub fn balances(&self) -> bool {
        self.profiles.iter().any(|p| p.low_node_load.is_some())
    }

    /// Rounds run so far (skipped ones included).
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// One round at `now`: the anomaly detectors advance, NodeMetrics are
    /// judged fresh or expired as of `now`.
    pub fn round(
        &mut self,
        configuration: &Configuration,
        view: &ClusterView,
        priority_classes: &HashMap<String, i32>,
        now: Timestamp,
    ) -> Result<RoundOutcome, RoundError> {
        self.rounds += 1;
        let top_selector = &configuration.file.node_selector;
        let ready = view
            .nodes
            .iter()
            .filter(|node| node.ready)
            .filter(|node| match top_selector {
                None => true,
                Some(selector) => {
                    apis::configuration::selector::label_selector_matches(selector, &node.labels)
                        .unwrap_or(false)
                }
            })
            .count();
        if ready <= 1 {
            return Ok(RoundOutcome::Skipped(format!(
                "{ready} ready node(s): with 0 or 1 nodes an eviction only disrupts service"
            )));
        }
        let index = ClusterIndex::new(view);
        let pods_by_key: HashMap<&str, &PodView> =
            view.pods.iter().map(|pod| (pod.key(), pod)).collect();
        let mut limiter = EvictionLimiter::new(configuration);
        let now_nanos = now.as_nanosecond();
        let mut profiles = Vec::new();
        let mut victims = Vec::new();
        for (profile, state) in configuration.profiles.iter().zip(&mut self.profiles) {
            let (Some(plugin), Some(low_node_load)) =
                (state.low_node_load.as_mut(), profile.low_node_load.as_ref())
            else {
                continue;
            };
            let evictor = SnapshotEvictor::new(
                &index,
                &profile.migration_controller,
                low_node_load.evictable_namespaces.as_ref(),
                &low_node_load.pod_selectors,
                priority_classes,
            )
            .map_err(|source| RoundError::Evictor {
                profile: profile.name.clone(),
                source,
            })?;
            let mut evictor = LimitedEvictor {
                inner: evictor,
                limiter: &mut limiter,
            };
            let nodes = profile_nodes(configuration, profile, &view.nodes);
            let report = plugin.balance(&index, &nodes, &mut evictor, now_nanos, now_nanos);
            let dry_run = configuration.file.dry_run || profile.migration_controller.dry_run;
            let mut kept_back = 0;
            for pool in &report.pools {
                for source in &pool.sources {
                    for migration in &source.migrations {
                        if migration.dry_run {
                            kept_back += 1;
                            continue;
                        }
                        let key = format!("{}/{}", migration.namespace, migration.name);
                        victims.push(Victim {
                            profile: state.name.clone(),
                            namespace: migration.namespace.clone(),
                            name: migration.name.clone(),
                            uid: pods_by_key
                                .get(key.as_str())
                                .map(|pod| pod.uid.clone())
                                .unwrap_or_default(),
                            node: migration.node.clone(),
                            pool: pool.name.clone(),
                            prod: source.prod,
                            reason: migration.reason.clone(),
                            trigger: LOW_NODE_LOAD_TRIGGER.to_string(),
                            mode: profile.migration_controller.default_job_mode.clone(),
                            ttl: profile.migration_controller.default_job_ttl,
                            delete_options: state.delete_options.clone(),
                            dry_run,
                        });
                    }
                }
            }
            profiles.push(ProfileRound {
                profile: state.name.clone(),
                report,
                low_node_load_dry_run: kept_back,
            });
        }
        Ok(RoundOutcome::Ran { profiles, victims })
    }
}

/// Upstream's `EvictionLimiter`: the top-level per-node, per-namespace and
/// total limits of one round.
#[derive(Debug, Default)]
pub struct EvictionLimiter {
    per_node: Option<u32>,
    per_namespace: Option<u32>,
    total: Option<u32>,
    node_counts: HashMap<String, u32>,
    namespace_counts: HashMap<String, u32>,
    total_count: u32,
}

impl EvictionLimiter {
    pub fn new(configuration: &Configuration) -> Self {
        EvictionLimiter {
            per_node: configuration.file.max_no_of_pods_to_evict_per_node,
            per_namespace: configuration.file.max_no_of_pods_to_evict_per_namespace,
            total: configuration.file.max_no_of_pods_to_evict_total,
            ..Default::default()
        }
    }

    /// `Err(reason)` when one more eviction of `pod` would pass a limit.
    pub fn allow(&self, pod: &PodView) -> Result<(), String> {
        let next = |count: Option<&u32>| count.copied().unwrap_or(0).saturating_add(1);
        if !pod.node_name.is_empty()
            && let Some(limit) = self.per_node
            && next(self.node_counts.get(&pod.node_name)) > limit
        {
            return Err(format!(
                "maximum number of evicted pods per node reached (maxNoOfPodsToEvictPerNode {limit})"
            ));
        }
        if let Some(limit) = self.per_namespace
            && next(self.namespace_counts.get(&pod.namespace)) > limit
        {
            return Err(format!(
                "maximum number of evicted pods per namespace reached (maxNoOfPodsToEvictPerNamespace {limit})"
            ));
        }
        if let Some(limit) = self.total
            && self.total_count.saturating_add(1) > limit
        {
            return Err(format!(
                "maximum number of evicted pods total reached (maxNoOfPodsToEvictTotal {limit})"
            ));
        }
        Ok(())
    }

    pub fn done(&mut self, pod: &PodView) {
        if !pod.node_name.is_empty() {
            *self.node_counts.entry(pod.node_name.clone()).or_insert(0) += 1;
        }
        *self
            .namespace_counts
            .entry(pod.namespace.clone())
            .or_insert(0) += 1;
        self.total_count += 1;
    }
}

/// The snapshot evictor behind the round's eviction limits.
struct LimitedEvictor<'a, 'b> {
    inner: SnapshotEvictor<'a>,
    limiter: &'b mut EvictionLimiter,
}

impl Evictor for LimitedEvictor<'_, '_> {
    fn filter(&self, pod: &PodView) -> Result<(), String> {
        self.inner.filter(pod)
    }

    fn evict(&mut self, pod: &PodView, reason: &str) -> Result<(), String> {
        self.limiter.allow(pod)?;
        self.inner.evict(pod, reason)?;
        self.limiter.done(pod);
        Ok(())
    }
}

//! `koord-descheduler plan`: what LowNodeLoad would do with a snapshot, with
//! no cluster. The snapshot is replayed round after round, as if the load
//! it shows persisted, until a round starts migrations or the rounds run out
//! (by default as many as the strictest anomaly condition needs). The JSON
//! printed is a stable contract, documented in `docs/plan.md`.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::config::{Configuration, Profile};
use crate::evictor::SnapshotEvictor;
use crate::loadaware::{ClusterIndex, LowNodeLoad, RoundReport};
use crate::model::NodeView;
use crate::snapshot::Snapshot;

/// The format version of the output; bumped only for incompatible changes.
pub const FORMAT_VERSION: u32 = 1;
/// The most rounds a plan replays.
pub const MAX_ROUNDS: u32 = 1000;

#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// The snapshot: YAML documents (or a List) of Nodes, Pods, NodeMetrics,
    /// PodDisruptionBudgets and optionally PodMigrationJobs, PriorityClasses
    /// and workloads.
    #[arg(long = "snapshot", value_name = "FILE")]
    pub snapshot: PathBuf,

    /// Output format; only `json` is offered.
    #[arg(long = "output", short = 'o', value_name = "FORMAT", default_value = "json", value_parser = ["json"])]
    pub output: String,

    /// The time of the snapshot (RFC 3339), against which NodeMetrics are
    /// judged fresh or expired [default: the current time].
    #[arg(long = "now", value_name = "TIME")]
    pub now: Option<Timestamp>,

    /// Rounds to replay at most; 0 picks enough for every pool's anomaly
    /// condition.
    #[arg(long = "rounds", value_name = "N", default_value_t = 0)]
    pub rounds: u32,

    /// The largest snapshot file read, in bytes.
    #[arg(long = "max-snapshot-bytes", value_name = "BYTES", default_value_t = crate::snapshot::DEFAULT_MAX_SNAPSHOT_BYTES)]
    pub max_snapshot_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    #[error("profile {profile}: {source}")]
    Evictor {
        profile: String,
        #[source]
        source: crate::evictor::EvictorError,
    },
    #[error(
        "no profile enables the LowNodeLoad balance plugin; enable it under profiles[].plugins.balance.enabled in the --config file"
    )]
    NoLowNodeLoad,
    #[error("--rounds {0} is more than {MAX_ROUNDS}")]
    TooManyRounds(u32),
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanOutput {
    pub format_version: u32,
    pub now: String,
    pub nodes: usize,
    pub pods: usize,
    pub profiles: Vec<ProfilePlan>,
    /// Problems with single fields of snapshot objects (bad quantities,
    /// annotations), which were read as documented instead.
    pub snapshot_problems: Vec<String>,
    pub ignored_kinds: std::collections::BTreeMap<String, usize>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfilePlan {
    pub name: String,
    /// Rounds replayed; the last one, reported here, is the first to start
    /// migrations, or the last allowed.
    pub round: u32,
    pub descheduling_interval_seconds: f64,
    /// The flat list of migrations the reported round starts, in order.
    pub migrations: Vec<PlannedMigration>,
    pub low_node_load: RoundReport,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedMigration {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub pool: String,
    pub prod: bool,
    pub reason: String,
    pub dry_run: bool,
}

/// Rounds enough for the strictest anomaly condition of the profile.
fn rounds_needed(low_node_load: &crate::config::LowNodeLoadConfig) -> u32 {
    low_node_load
        .node_pools
        .iter()
        .filter_map(|pool| pool.anomaly_condition)
        .filter(|condition| condition.consecutive_abnormalities != 1)
        .map(|condition| condition.consecutive_abnormalities.saturating_add(1))
        .max()
        .unwrap_or(1)
        .clamp(1, MAX_ROUNDS)
}

/// The nodes a profile works on: ready ones matching the top-level and the
/// profile's node selectors.
pub(crate) fn profile_nodes<'a>(
    configuration: &Configuration,
    profile: &Profile,
    nodes: &'a [NodeView],
) -> Vec<&'a NodeView> {
    let selects = |selector: &Option<_>, node: &NodeView| match selector {
        None => true,
        Some(selector) => {
            apis::configuration::selector::label_selector_matches(selector, &node.labels)
                .unwrap_or(false)
        }
    };
    nodes
        .iter()
        .filter(|node| node.ready)
        .filter(|node| selects(&configuration.file.node_selector, node))
        .filter(|node| selects(&profile.node_selector, node))
        .collect()
}

/// Plans every profile that enables LowNodeLoad.
pub fn plan(
    configuration: &Configuration,
    snapshot: &Snapshot,
    now: Timestamp,
    rounds: u32,
) -> Result<PlanOutput, PlanError> {
    if rounds > MAX_ROUNDS {
        return Err(PlanError::TooManyRounds(rounds));
    }
    let index = ClusterIndex::new(&snapshot.view);
    let interval = configuration
        .file
        .descheduling_interval
        .to_std()
        .unwrap_or(Duration::ZERO);
    let now_nanos = now.as_nanosecond();
    let mut profiles = Vec::new();
    for profile in &configuration.profiles {
        let Some(low_node_load) = &profile.low_node_load else {
            continue;
        };
        // Upstream runs once when no interval is set.
        let limit = if interval.is_zero() {
            1
        } else if rounds == 0 {
            rounds_needed(low_node_load)
        } else {
            rounds
        };
        let nodes = profile_nodes(configuration, profile, &snapshot.view.nodes);
        let mut plugin = LowNodeLoad::new(low_node_load.clone());
        let mut round = 0;
        let mut report = RoundReport::default();
        while round < limit {
            round += 1;
            let mut evictor = SnapshotEvictor::new(
                &index,
                &profile.migration_controller,
                low_node_load.evictable_namespaces.as_ref(),
                &low_node_load.pod_selectors,
                &snapshot.priority_classes,
            )
            .map_err(|source| PlanError::Evictor {
                profile: profile.name.clone(),
                source,
            })?;
            let offset = i128::try_from(interval.as_nanos())
                .unwrap_or(i128::MAX)
                .saturating_mul(i128::from(round - 1));
            report = plugin.balance(
                &index,
                &nodes,
                &mut evictor,
                now_nanos.saturating_add(offset),
                now_nanos,
            );
            if report.migrations().next().is_some() {
                break;
            }
        }
        let migrations = report
            .pools
            .iter()
            .flat_map(|pool| {
                pool.sources.iter().flat_map(move |source| {
                    source
                        .migrations
                        .iter()
                        .map(move |migration| PlannedMigration {
                            namespace: migration.namespace.clone(),
                            name: migration.name.clone(),
                            node: migration.node.clone(),
                            pool: pool.name.clone(),
                            prod: source.prod,
                            reason: migration.reason.clone(),
                            dry_run: migration.dry_run,
                        })
                })
            })
            .collect();
        profiles.push(ProfilePlan {
            name: profile.name.clone(),
            round,
            descheduling_interval_seconds: interval.as_secs_f64(),
            migrations,
            low_node_load: report,
        });
    }
    if profiles.is_empty() {
        return Err(PlanError::NoLowNodeLoad);
    }
    Ok(PlanOutput {
        format_version: FORMAT_VERSION,
        now: now.to_string(),
        nodes: snapshot.view.nodes.len(),
        pods: snapshot.view.pods.len(),
        profiles,
        snapshot_problems: snapshot.problems.clone(),
        ignored_kinds: snapshot.ignored_kinds.clone(),
    })
}

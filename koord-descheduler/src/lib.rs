//! koord-descheduler: moves pods off nodes that stay hot (LowNodeLoad) so
//! that the scheduler can place them on cold ones.
//!
//! Pure cores: [`loadaware`] (one LowNodeLoad balance round), [`evictor`]
//! (the MigrationController's filters and limits), [`nodefit`], over the
//! [`model`] digested from Kubernetes objects; [`config`] reads upstream's
//! DeschedulerConfiguration; [`args`] holds the flags. Two shells run them:
//! - `koord-descheduler plan` ([`plan`], [`snapshot`]): rounds over a
//!   snapshot file, no cluster (docs/plan.md);
//! - the live binary ([`run`], [`live`]): reflector caches, leader election
//!   on upstream's Lease, a round every `deschedulingInterval` while
//!   leading with the anomaly state carried across rounds, and victims
//!   handed to an evictor sink that creates PodMigrationJobs (or, with
//!   `dryRun`, logs and counts them); `/readyz` passes once the caches are
//!   synced (docs/run.md).
//!
//! The MigrationController ([`migration`]) carries the PodMigrationJobs out
//! (docs/migration.md); [`run`] starts it beside the loop, on the same
//! leadership.

pub mod args;
pub mod cli;
pub mod config;
pub mod evictor;
pub mod live;
pub mod loadaware;
pub mod migration;
pub mod model;
pub mod nodefit;
pub mod plan;
pub mod snapshot;

pub use args::{DeschedulerArgs, DeschedulerCommand};

use std::sync::Arc;

use anyhow::Context;
use koord_common::ShutdownReason;
use koord_common::leader::{
    LeaderElector, Leadership, LeaseTiming, check_object_name, default_identity,
    export_leader_status, spawn_campaign,
};
use koord_common::process::{Component, ComponentContext, connect_required_cluster};

use crate::config::Configuration;

pub const COMPONENT: Component = Component {
    name: "koord-descheduler",
    metric_prefix: "koord_descheduler",
};

/// Readiness check of the descheduling loop: passes once its caches are synced.
pub const DESCHEDULER_CHECK: &str = "descheduler";

/// Writes the configuration in effect (JSON, which YAML readers take).
pub fn write_config(configuration: &Configuration, path: &std::path::Path) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(&configuration.file)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// The leader-election settings of the configuration file, checked:
/// `None` when `leaderElection.leaderElect` is false.
pub fn leader_election(
    configuration: &Configuration,
) -> anyhow::Result<Option<(String, String, LeaseTiming)>> {
    let election = &configuration.file.leader_election;
    if election.leader_elect == Some(false) {
        return Ok(None);
    }
    if election.resource_lock != "leases" {
        anyhow::bail!(
            "leaderElection.resourceLock {:?}: only \"leases\" is supported",
            election.resource_lock
        );
    }
    let name = check_object_name("leaderElection.resourceName", &election.resource_name, 253)
        .map_err(anyhow::Error::msg)?;
    let namespace = check_object_name(
        "leaderElection.resourceNamespace",
        &election.resource_namespace,
        63,
    )
    .map_err(anyhow::Error::msg)?;
    let duration = |what: &str, value: apis::extension::duration::GoDuration| {
        value
            .to_std()
            .with_context(|| format!("leaderElection.{what} {value} is negative"))
    };
    let timing = LeaseTiming {
        lease_duration: duration("leaseDuration", election.lease_duration)?,
        renew_deadline: duration("renewDeadline", election.renew_deadline)?,
        retry_period: duration("retryPeriod", election.retry_period)?,
    };
    timing.validate()?;
    Ok(Some((namespace, name, timing)))
}

/// The MigrationController's arguments: the first profile's (upstream runs
/// one controller), with upstream's defaults filled in.
fn migration_args(configuration: &Configuration) -> config::types::MigrationControllerArgs {
    let mut args = configuration
        .profiles
        .first()
        .map(|profile| profile.migration_controller.clone())
        .unwrap_or_default();
    config::defaults::set_migration_controller_defaults(&mut args);
    args
}

/// Runs until a signal or a failure; `Err` means start-up failed.
pub async fn run(args: DeschedulerArgs) -> anyhow::Result<ShutdownReason> {
    let configuration = Arc::new(args.configuration()?);
    let listeners = args.listeners(&configuration)?;
    let election = leader_election(&configuration)?;
    let descheduler = live::round::Descheduler::new(&configuration)?;
    for profile in &configuration.profiles {
        tracing::info!(
            profile = %profile.name,
            plugins = ?profile.enabled_plugins(),
            "profile {} loaded",
            profile.name
        );
    }
    let context = ComponentContext::new(COMPONENT);
    koord_common::spawn_signal_handler(context.shutdown.clone())?;
    let loop_check = context
        .health
        .readiness_status(DESCHEDULER_CHECK, Err("caches not synced yet".to_string()));
    let cluster_check = context.register_cluster_check();
    let live_metrics = live::metrics::LiveMetrics::register(&context.metrics);
    let server = if listeners.is_empty() {
        None
    } else {
        Some(context.start_server(listeners).await?)
    };
    let mut cluster = args.cluster.options();
    if cluster.kubeconfig.is_none() && !configuration.file.client_connection.kubeconfig.is_empty() {
        cluster.kubeconfig = Some(
            configuration
                .file
                .client_connection
                .kubeconfig
                .clone()
                .into(),
        );
    }
    let connected = match connect_required_cluster(&context, &cluster, &cluster_check).await {
        Ok(Some(connected)) => connected,
        Ok(None) => return Ok(context.wait_for_shutdown(server).await),
        Err(err) => {
            context
                .shutdown
                .trigger(ShutdownReason::Failed(err.to_string()));
            context.wait_for_shutdown(server).await;
            return Err(err.into());
        }
    };

    let client = connected.client.clone();
    // Evictions go through a client that hands a 429 (a PodDisruptionBudget
    // refusing) straight back, so the job records it and retries on its own
    // schedule instead of kube's default retries holding the call for minutes.
    let mut eviction_config = connected.config.clone();
    eviction_config.default_retry = false;
    let eviction_client =
        kube::Client::try_from(eviction_config).context("building the eviction client")?;
    let migration = migration::MigrationHandle::new(migration_args(&configuration))
        .context("MigrationController arguments")?
        .with_eviction_client(eviction_client);

    let caches = Arc::new(live::caches::Caches::start(&client));
    let (synced_tx, mut synced) = tokio::sync::watch::channel(false);
    {
        let caches = Arc::clone(&caches);
        let loop_check = loop_check.clone();
        tokio::spawn(async move {
            if caches.wait_until_ready(&loop_check).await.is_ok() {
                loop_check.set_passing();
                synced_tx.send_replace(true);
                tracing::info!("descheduler caches synced");
            }
        });
    }
    let identity = default_identity();
    let leadership = match election {
        None => {
            tracing::info!("leaderElection.leaderElect is false: this replica runs the loop");
            Leadership::unconditional()
        }
        Some((namespace, name, timing)) => {
            let elector =
                LeaderElector::new(client.clone(), &namespace, &name, identity.clone(), timing);
            let mut synced = synced.clone();
            let cache_synced = async move {
                if synced.wait_for(|synced| *synced).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let leadership = spawn_campaign(elector, cache_synced, context.shutdown.clone());
            export_leader_status(&context.metrics, &name, &leadership);
            leadership
        }
    };

    // The evictor sink: victims become PodMigrationJobs carrying the
    // MigrationController's instance id, which it only acts on (upstream's
    // job-created-by rule).
    let sink: Arc<dyn live::EvictorSink> = Arc::new(live::PodMigrationJobSink::new(
        client.clone(),
        migration.reconciler_id().as_str().to_owned(),
    ));

    // The MigrationController carries the jobs out, on the same leadership.
    {
        let client = client.clone();
        let metrics = context.metrics.clone();
        let leadership = leadership.clone();
        let shutdown = context.shutdown.clone();
        tokio::spawn(async move {
            if let Err(err) = migration::run_migration_controller(
                client,
                migration,
                &metrics,
                leadership,
                shutdown.clone(),
            )
            .await
            {
                tracing::error!(error = %format!("{err:#}"), "MigrationController stopped");
                shutdown.trigger(ShutdownReason::Failed(format!(
                    "MigrationController: {err:#}"
                )));
            }
        });
    }

    let live_loop = live::LiveLoop::new(
        Arc::clone(&configuration),
        descheduler,
        sink,
        live_metrics,
        leadership,
        live::system_clock(),
    );
    let shutdown = context.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            synced = synced.wait_for(|synced| *synced) => {
                if synced.is_err() {
                    return;
                }
            }
            _ = shutdown.wait() => return,
        }
        let source: Arc<dyn live::ViewSource> = caches;
        live_loop.run(source, shutdown, |_| {}).await;
    });
    Ok(context.wait_for_shutdown(server).await)
}

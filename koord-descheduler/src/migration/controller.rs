//! The MigrationController's shell: reflectors keep the PodMigrationJobs and
//! the cluster the arbitrator reads (pods, nodes, ReplicaSets,
//! StatefulSets, PriorityClasses); every tick (the arbitration interval) it
//! arbitrates waiting jobs, reconciles the jobs that are due (a bounded
//! number per tick, each pass a bounded number of API calls: reads of the
//! job, its pod, its reservation and the pod bound to it, then at most one
//! action and one status write, guarded by the resourceVersion read), and
//! once a minute scavenges old jobs. It acts only while this replica leads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use apis::scheduling::v1alpha1::{PodMigrationJob, PodMigrationJobPhase, Reservation};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use koord_common::leader::Leadership;
use koord_common::metrics::MetricsRegistry;
use koord_common::shutdown::Shutdown;
use koord_common::sync::MutexExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use super::arbitration::{self, Verdict, Waiting};
use super::core::{
    self, Action, ActionFailure, Decision, EvictionPolicy, Observation, Outcome, ReservationLookup,
    Settings,
};
use super::job::{self, JobContext, JobError, ReconcilerId};
use super::limiter::{LimiterSubject, ObjectLimiters, TokenBucket, UnknownLimitedObject};
use super::metrics::MigrationMetrics;
use super::{ANNOTATION_PASSED_ARBITRATION, DEFAULT_REQUEUE_AFTER, reservation as rsv};
use crate::config::types::MigrationControllerArgs;
use crate::evictor::SnapshotEvictor;
use crate::loadaware::ClusterIndex;
use crate::model::{ClusterView, NodeView, PodView, WorkloadView};

/// Jobs reconciled per tick at most; the rest wait for the next tick.
pub const MAX_RECONCILES_PER_TICK: usize = 32;
/// Jobs the scavenger deletes per sweep at most.
pub const MAX_SCAVENGES_PER_SWEEP: usize = 64;
/// How often the scavenger sweeps (upstream: every minute).
pub const SCAVENGE_PERIOD: Duration = Duration::from_secs(60);
/// An API call that takes longer is abandoned (the job is retried).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings that are not in `MigrationControllerArgs` (tests shorten them).
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// How long a waiting job waits before the next look (upstream 3 s).
    pub requeue_after: Duration,
    /// The first retry delay after a failed pass; doubled up to `max_backoff`.
    pub base_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            requeue_after: DEFAULT_REQUEUE_AFTER,
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// Arguments the controller cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Limiter(#[from] UnknownLimitedObject),
    #[error("evictionPolicy {0:?} is not Eviction, Delete or SoftEviction")]
    EvictionPolicy(String),
}

/// Why no job was created for a victim.
#[derive(Debug, thiserror::Error)]
pub enum CreateJobError {
    #[error(transparent)]
    Invalid(#[from] JobError),
    #[error("object limiter: {0}")]
    Limited(String),
    #[error("creating the PodMigrationJob: {0}")]
    Api(#[from] kube::Error),
}

/// What the controller and the live loop share: the arguments, this
/// instance's id (the jobs it creates carry it) and the object limiters.
#[derive(Clone)]
pub struct MigrationHandle {
    args: Arc<MigrationControllerArgs>,
    settings: Settings,
    policy: EvictionPolicy,
    id: ReconcilerId,
    limiters: Arc<Mutex<ObjectLimiters>>,
    eviction_client: Option<kube::Client>,
    options: ControllerOptions,
}

impl MigrationHandle {
    /// Checks the arguments (mode, delete options, eviction policy, object
    /// limiter types) and makes a fresh instance id.
    pub fn new(args: MigrationControllerArgs) -> Result<Self, HandleError> {
        let default_mode = job::parse_mode(&args.default_job_mode)?;
        let default_delete_options = job::parse_delete_options(&args)?;
        let policy = EvictionPolicy::parse(&args.eviction_policy)
            .ok_or_else(|| HandleError::EvictionPolicy(args.eviction_policy.clone()))?;
        let limiters = ObjectLimiters::new(&args)?;
        Ok(MigrationHandle {
            settings: Settings {
                default_mode,
                default_delete_options,
                requeue_after: DEFAULT_REQUEUE_AFTER,
            },
            policy,
            id: ReconcilerId::generate(),
            limiters: Arc::new(Mutex::new(limiters)),
            eviction_client: None,
            options: ControllerOptions::default(),
            args: Arc::new(args),
        })
    }

    /// Uses `id` instead of a random one.
    pub fn with_reconciler_id(mut self, id: ReconcilerId) -> Self {
        self.id = id;
        self
    }

    /// Evicts through `client`, which should not retry 429 answers itself
    /// (kube's default client retries them for minutes; with it each
    /// eviction is cut off after [`CALL_TIMEOUT`]).
    pub fn with_eviction_client(mut self, client: kube::Client) -> Self {
        self.eviction_client = Some(client);
        self
    }

    pub fn with_options(mut self, options: ControllerOptions) -> Self {
        self.settings.requeue_after = options.requeue_after;
        self.options = options;
        self
    }

    pub fn reconciler_id(&self) -> &ReconcilerId {
        &self.id
    }

    pub fn args(&self) -> &MigrationControllerArgs {
        &self.args
    }

    fn lock_limiters(&self) -> std::sync::MutexGuard<'_, ObjectLimiters> {
        self.limiters.lock_or_recover()
    }

    /// `Some(message)` when an object limiter holds `pod` back now.
    pub fn object_limited(&self, pod: &Pod, now: Timestamp) -> Option<String> {
        self.lock_limiters()
            .exceeded(&limiter_subject(pod, None), now)
    }

    /// Creates the PodMigrationJob for a victim, as upstream's evictor does
    /// after its filter passed: nothing in dry-run (`Ok(None)`); refused
    /// while an object limiter holds the pod back. The caller runs the
    /// evictor's filter ([`crate::evictor::SnapshotEvictor`]) first.
    pub async fn create_job(
        &self,
        client: &kube::Client,
        pod: &Pod,
        reason: &str,
        trigger: &str,
        context: Option<&JobContext>,
    ) -> Result<Option<PodMigrationJob>, CreateJobError> {
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        if self.args.dry_run {
            tracing::info!(pod = %key, %trigger, %reason, "dry run: would create a PodMigrationJob");
            return Ok(None);
        }
        if let Some(message) = self.object_limited(pod, Timestamp::now()) {
            return Err(CreateJobError::Limited(message));
        }
        let job = job::build_migration_job(
            pod,
            reason,
            trigger,
            &self.args,
            &self.id,
            context,
            job::random_u128(),
        )?;
        let created = Api::<PodMigrationJob>::all(client.clone())
            .create(&PostParams::default(), &job)
            .await?;
        tracing::info!(pod = %key, job = %created.metadata.name.as_deref().unwrap_or_default(),
            %trigger, %reason, "created PodMigrationJob");
        Ok(Some(created))
    }
}

fn limiter_subject(pod: &Pod, expected_replicas: Option<i32>) -> LimiterSubject {
    LimiterSubject {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        controller: pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|owner| owner.controller == Some(true))
            .map(|owner| {
                (
                    owner.uid.clone(),
                    format!("{}/{}/{}", owner.name, owner.kind, owner.api_version),
                )
            }),
        expected_replicas,
    }
}

/// Starts a reflector for `api`; every change wakes `notify`; deletions of
/// objects go to `deleted` when given.
fn spawn_reflector<K>(
    api: Api<K>,
    notify: Arc<Notify>,
    what: &'static str,
    deleted: Option<tokio::sync::mpsc::UnboundedSender<K>>,
) -> Store<K>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    tokio::spawn(async move {
        let mut stream = Box::pin(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Delete(object)) => {
                    if let Some(sender) = &deleted {
                        let _ = sender.send(object);
                    }
                    notify.notify_one();
                }
                Ok(_) => notify.notify_one(),
                Err(err) => tracing::warn!(resource = what, error = %err, "watch failed; retrying"),
            }
        }
    });
    reader
}

struct Caches {
    jobs: Store<PodMigrationJob>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    replica_sets: Store<ReplicaSet>,
    stateful_sets: Store<StatefulSet>,
    priority_classes: Store<PriorityClass>,
}

impl Caches {
    async fn wait_until_ready(&self) -> anyhow::Result<()> {
        self.jobs.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.replica_sets.wait_until_ready().await?;
        self.stateful_sets.wait_until_ready().await?;
        self.priority_classes.wait_until_ready().await?;
        Ok(())
    }
}

/// When a job is looked at next.
#[derive(Clone, Debug)]
struct Schedule {
    /// `None`: only when the cached object changes.
    due: Option<tokio::time::Instant>,
    /// The resourceVersion of the cached object last seen.
    seen_version: String,
    backoff: Duration,
}

/// The controller's state between ticks.
struct Controller {
    client: kube::Client,
    handle: MigrationHandle,
    metrics: MigrationMetrics,
    caches: Caches,
    schedule: HashMap<String, Schedule>,
    /// The newest object this controller read or wrote per job (the cache
    /// may lag behind its own writes).
    latest: HashMap<String, PodMigrationJob>,
    eviction_limiter: Option<TokenBucket>,
    last_arbitration: Option<tokio::time::Instant>,
    last_scavenge: Option<tokio::time::Instant>,
}

fn version_number(job: &PodMigrationJob) -> Option<u64> {
    job.metadata.resource_version.as_deref()?.parse().ok()
}

/// Whether an API error says the object is gone.
fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

fn failure_of(err: &kube::Error) -> ActionFailure {
    match err {
        kube::Error::Api(status) => ActionFailure {
            code: Some(status.code),
            message: status.message.clone(),
        },
        other => ActionFailure {
            code: None,
            message: other.to_string(),
        },
    }
}

async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {CALL_TIMEOUT:?}").into(),
        )),
    }
}

async fn get_opt<K>(api: &Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match bounded(api.get(name)).await {
        Ok(object) => Ok(Some(object)),
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

impl Controller {
    fn jobs_api(&self) -> Api<PodMigrationJob> {
        Api::all(self.client.clone())
    }

    fn reservations_api(&self) -> Api<Reservation> {
        Api::all(self.client.clone())
    }

    /// The job as this controller knows it best: the cache's copy, or the
    /// newer one it read or wrote itself.
    fn current(&self, cached: &PodMigrationJob) -> PodMigrationJob {
        let name = cached.metadata.name.clone().unwrap_or_default();
        match self.latest.get(&name) {
            Some(own) if version_number(own) > version_number(cached) => own.clone(),
            _ => cached.clone(),
        }
    }

    fn remember(&mut self, job: &PodMigrationJob) {
        if let Some(name) = &job.metadata.name {
            self.latest.insert(name.clone(), job.clone());
        }
    }

    fn expected_replicas(&self, pod: &Pod) -> Option<i32> {
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|owner| owner.controller == Some(true))?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        match owner.kind.as_str() {
            "ReplicaSet" => self
                .caches
                .replica_sets
                .get(&ObjectRef::new(&owner.name).within(namespace))
                .and_then(|rs| rs.spec.as_ref().and_then(|s| s.replicas)),
            "StatefulSet" => self
                .caches
                .stateful_sets
                .get(&ObjectRef::new(&owner.name).within(namespace))
                .and_then(|ss| ss.spec.as_ref().and_then(|s| s.replicas)),
            _ => None,
        }
    }

    /// The cluster as the evictor reads it, with the jobs that count as
    /// migrating.
    fn cluster_view(&self, jobs: &[PodMigrationJob]) -> ClusterView {
        let mut view = ClusterView {
            nodes: self
                .caches
                .nodes
                .state()
                .iter()
                .map(|n| NodeView::of(n))
                .collect(),
            pods: self
                .caches
                .pods
                .state()
                .iter()
                .map(|p| PodView::of(p))
                .collect(),
            ..ClusterView::default()
        };
        for rs in self.caches.replica_sets.state() {
            view.workloads.push(workload_view(
                "ReplicaSet",
                &rs.metadata,
                rs.spec.as_ref().and_then(|s| s.replicas),
            ));
        }
        for ss in self.caches.stateful_sets.state() {
            view.workloads.push(workload_view(
                "StatefulSet",
                &ss.metadata,
                ss.spec.as_ref().and_then(|s| s.replicas),
            ));
        }
        view.migration_jobs = jobs
            .iter()
            .filter(|job| arbitration::counts_as_migrating(job))
            .map(arbitration::job_view)
            .collect();
        view
    }

    fn priority_classes(&self) -> HashMap<String, i32> {
        self.caches
            .priority_classes
            .state()
            .iter()
            .filter_map(|pc| Some((pc.metadata.name.clone()?, pc.value)))
            .collect()
    }

    /// Upstream `doOnceArbitrate` over the waiting jobs of this instance.
    async fn arbitrate(&mut self) {
        let jobs: Vec<PodMigrationJob> = self
            .caches
            .jobs
            .state()
            .iter()
            .map(|job| self.current(job))
            .collect();
        let id = self.handle.id.as_str().to_string();
        let waiting_jobs: Vec<&PodMigrationJob> = jobs
            .iter()
            .filter(|job| arbitration::is_waiting(job) && !core::is_foreign(job, &id))
            .collect();
        if waiting_jobs.is_empty() {
            return;
        }
        let view = self.cluster_view(&jobs);
        let pods_by_key: HashMap<&str, &PodView> =
            view.pods.iter().map(|pod| (pod.key(), pod)).collect();
        let pod_of = |job: &PodMigrationJob| {
            let key = format!(
                "{}/{}",
                job.spec.pod_ref.namespace.as_deref().unwrap_or_default(),
                job.spec.pod_ref.name.as_deref().unwrap_or_default()
            );
            pods_by_key.get(key.as_str()).copied()
        };
        let mut waiting: Vec<Waiting<'_>> = waiting_jobs
            .iter()
            .map(|job| Waiting {
                job,
                pod: pod_of(job),
            })
            .collect();
        let counts = arbitration::migrating_by_batch_owner(jobs.iter(), pod_of);
        arbitration::sort(&mut waiting, &counts);
        let index = ClusterIndex::new(&view);
        let priority_classes = self.priority_classes();
        let verdicts: Vec<(PodMigrationJob, Verdict)> = {
            let mut evictor =
                match SnapshotEvictor::new(&index, &self.handle.args, None, &[], &priority_classes)
                {
                    Ok(evictor) => evictor,
                    Err(err) => {
                        tracing::warn!(error = %err, "arbitration skipped");
                        return;
                    }
                };
            arbitration::arbitrate(&waiting, &mut evictor)
                .into_iter()
                .map(|(job, verdict)| (job.clone(), verdict))
                .collect()
        };
        for (mut job, verdict) in verdicts {
            let name = job.metadata.name.clone().unwrap_or_default();
            match verdict {
                Verdict::Passed => {
                    self.metrics.arbitrated("passed");
                    job.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(
                            ANNOTATION_PASSED_ARBITRATION.to_string(),
                            "true".to_string(),
                        );
                    match bounded(self.jobs_api().replace(&name, &PostParams::default(), &job))
                        .await
                    {
                        Ok(updated) => {
                            tracing::info!(job = %name, "passed arbitration");
                            self.remember(&updated);
                            self.due_now(&name);
                        }
                        Err(err) => {
                            self.metrics.api_error("updateJob");
                            tracing::warn!(job = %name, error = %err, "marking the job passed failed");
                        }
                    }
                }
                Verdict::Forbidden(message) => {
                    self.metrics.arbitrated("forbidden");
                    let status = job.status.get_or_insert_with(Default::default);
                    status.phase = Some(PodMigrationJobPhase::Failed);
                    status.reason = Some(
                        apis::scheduling::v1alpha1::PodMigrationJobReason::ForbiddenMigratePod,
                    );
                    status.message = Some(message.clone());
                    match self.write_status(&job).await {
                        Ok(()) => {
                            self.metrics.job_finished("Failed", "ForbiddenMigratePod");
                            tracing::info!(job = %name, %message, "failed by arbitration");
                        }
                        Err(err) => {
                            tracing::warn!(job = %name, error = %err, "failing the job failed")
                        }
                    }
                }
                Verdict::Limited(why) => {
                    self.metrics.arbitrated("limited");
                    tracing::debug!(job = %name, %why, "waiting for arbitration");
                }
            }
        }
    }

    fn due_now(&mut self, name: &str) {
        if let Some(schedule) = self.schedule.get_mut(name) {
            schedule.due = Some(tokio::time::Instant::now());
        }
    }

    async fn write_status(&mut self, job: &PodMigrationJob) -> Result<(), kube::Error> {
        let name = job.metadata.name.clone().unwrap_or_default();
        match bounded(
            self.jobs_api()
                .replace_status(&name, &PostParams::default(), job),
        )
        .await
        {
            Ok(updated) => {
                self.remember(&updated);
                Ok(())
            }
            Err(err) => {
                self.metrics.api_error("updateJobStatus");
                Err(err)
            }
        }
    }

    /// Jobs due for a pass now, oldest due first, at most the tick's share.
    fn due_jobs(&mut self) -> Vec<String> {
        let now = tokio::time::Instant::now();
        let cached = self.caches.jobs.state();
        let mut present = HashSet::new();
        let id = self.handle.id.as_str().to_string();
        for cached_job in &cached {
            let Some(name) = cached_job.metadata.name.clone() else {
                continue;
            };
            present.insert(name.clone());
            // Only jobs a pass can move: started (or passed), not paused,
            // not finished, not another instance's. Others are looked at
            // again when they change.
            let job = self.current(cached_job);
            let movable = matches!(
                job.status.as_ref().and_then(|s| s.phase.clone()),
                None | Some(PodMigrationJobPhase::Pending) | Some(PodMigrationJobPhase::Running)
            ) && !arbitration::is_waiting(&job)
                && job.spec.paused != Some(true)
                && !core::is_foreign(&job, &id);
            if !movable {
                self.schedule.remove(&name);
                continue;
            }
            let job = cached_job;
            let version = job.metadata.resource_version.clone().unwrap_or_default();
            let schedule = self.schedule.entry(name).or_insert_with(|| Schedule {
                due: Some(now),
                seen_version: version.clone(),
                backoff: Duration::ZERO,
            });
            if schedule.seen_version != version {
                schedule.seen_version = version;
                schedule.due = Some(now);
            }
        }
        self.schedule.retain(|name, _| present.contains(name));
        self.latest.retain(|name, _| present.contains(name));
        let mut due: Vec<(tokio::time::Instant, String)> = self
            .schedule
            .iter()
            .filter_map(|(name, s)| s.due.filter(|d| *d <= now).map(|d| (d, name.clone())))
            .collect();
        due.sort();
        due.into_iter()
            .take(MAX_RECONCILES_PER_TICK)
            .map(|(_, name)| name)
            .collect()
    }

    /// One pass over one job; the delay until the next (`None`: when it changes).
    async fn reconcile(&mut self, name: &str) -> Result<Option<Duration>, kube::Error> {
        let Some(job) = get_opt(&self.jobs_api(), name).await? else {
            return Ok(None);
        };
        self.remember(&job);
        let active = matches!(
            job.status.as_ref().and_then(|s| s.phase.clone()),
            None | Some(PodMigrationJobPhase::Pending) | Some(PodMigrationJobPhase::Running)
        );
        // Waiting jobs start only through arbitration (upstream reconciles
        // a job once the arbitrator updated it).
        if !active || arbitration::is_waiting(&job) {
            return Ok(None);
        }
        let pod_ref = &job.spec.pod_ref;
        let pod_namespace = pod_ref.namespace.clone().unwrap_or_default();
        let pod_name = pod_ref.name.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod_namespace);
        let pod = if pod_namespace.is_empty() || pod_name.is_empty() {
            None
        } else {
            get_opt(&pods, &pod_name).await?
        };
        let reservation = match core::reservation_name(&job) {
            None => None,
            Some(reservation_name) => {
                Some(get_opt(&self.reservations_api(), &reservation_name).await?)
            }
        };
        let lookup = match &reservation {
            None => ReservationLookup::NotReferenced,
            Some(None) => ReservationLookup::Missing,
            Some(Some(found)) => ReservationLookup::Found(found),
        };
        let bound_pod = match reservation
            .as_ref()
            .and_then(|r| r.as_ref())
            .and_then(rsv::bound_pod)
        {
            Some(reference) => {
                let api: Api<Pod> = Api::namespaced(
                    self.client.clone(),
                    reference.namespace.as_deref().unwrap_or_default(),
                );
                match reference.name.as_deref() {
                    Some(bound_name) if !bound_name.is_empty() => get_opt(&api, bound_name).await?,
                    _ => None,
                }
            }
            None => None,
        };
        let now = Timestamp::now();
        let limited = pod
            .as_ref()
            .and_then(|pod| self.handle.object_limited(pod, now));
        let decision = core::decide(
            Observation {
                job: &job,
                pod: pod.as_ref(),
                reservation: lookup,
                bound_pod: bound_pod.as_ref(),
                object_limited: limited.as_deref(),
                reconciler_id: self.handle.id.as_str(),
                now,
            },
            &self.handle.settings,
            self.handle.policy,
        );
        self.apply(job, pod.as_ref(), decision).await
    }

    /// Performs the decision's action, then writes its status.
    async fn apply(
        &mut self,
        mut job: PodMigrationJob,
        pod: Option<&Pod>,
        decision: Decision,
    ) -> Result<Option<Duration>, kube::Error> {
        let name = job.metadata.name.clone().unwrap_or_default();
        let outcome_label = match &decision.outcome {
            Outcome::Skipped(_) => "skipped",
            Outcome::Waiting(_) => "waiting",
            Outcome::Acting(_) => "acting",
            Outcome::Finished(_) => "finished",
        };
        self.metrics.reconciled(outcome_label);
        match &decision.outcome {
            Outcome::Skipped(why) => tracing::debug!(job = %name, why, "skipped"),
            Outcome::Waiting(why) | Outcome::Acting(why) => {
                tracing::info!(job = %name, step = %why, "reconciled")
            }
            Outcome::Finished(phase) => tracing::info!(job = %name, phase = phase.as_str(),
                reason = ?decision.status.as_ref().and_then(|s| s.reason.clone()),
                message = ?decision.status.as_ref().and_then(|s| s.message.clone()), "job finished"),
        }
        match &decision.action {
            Action::None => {}
            Action::UpdateSpec(spec) => {
                job.spec = (**spec).clone();
                job = self.replace_job(&job).await?;
            }
            Action::CreateReservation {
                reservation,
                options,
            } => {
                let api = self.reservations_api();
                let created = match bounded(api.create(&PostParams::default(), reservation)).await {
                    Ok(created) => Ok(created),
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        let existing = reservation.metadata.name.clone().unwrap_or_default();
                        bounded(api.get(&existing)).await
                    }
                    Err(err) => Err(err),
                };
                match created {
                    Ok(created) => {
                        tracing::info!(job = %name, reservation = %created.metadata.name.as_deref().unwrap_or_default(),
                            "created Reservation");
                        job.spec = core::after_reservation_created(&job, options, &created);
                        job = self.replace_job(&job).await?;
                    }
                    Err(err) => {
                        self.metrics.api_error("createReservation");
                        return self.after_failure(job, &decision, &err).await;
                    }
                }
            }
            Action::DeleteReservation(reservation) => {
                match bounded(
                    self.reservations_api()
                        .delete(reservation, &DeleteParams::default()),
                )
                .await
                {
                    Ok(_) => tracing::info!(job = %name, %reservation, "deleted Reservation"),
                    Err(err) if is_not_found(&err) => {}
                    Err(err) => {
                        self.metrics.api_error("deleteReservation");
                        return Err(err);
                    }
                }
            }
            Action::Evict(request) => {
                let core::EvictRequest {
                    namespace,
                    name: pod_name,
                    node,
                    policy,
                    delete_options,
                    trigger,
                    ..
                } = &**request;
                if let Some(limiter) = &mut self.eviction_limiter
                    && !limiter.allow(Timestamp::now())
                {
                    tracing::debug!(job = %name, "evictQPS reached; eviction postponed");
                    return Ok(Some(Duration::from_secs(1)));
                }
                let result = self.evict(request, delete_options.clone()).await;
                self.metrics
                    .pod_evicted(result.is_ok(), trigger, namespace, node);
                match result {
                    Ok(()) => {
                        tracing::info!(job = %name, pod = %format!("{namespace}/{pod_name}"), %node,
                            ?policy, "evicted pod");
                        if let Some(pod) = pod {
                            let replicas = self.expected_replicas(pod);
                            self.handle
                                .lock_limiters()
                                .track(&limiter_subject(pod, replicas), Timestamp::now());
                        }
                    }
                    Err(err) => {
                        self.metrics.api_error("evict");
                        return self.after_failure(job, &decision, &err).await;
                    }
                }
            }
        }
        if let Some(status) = &decision.status {
            job.status = Some(status.clone());
            self.write_status(&job).await?;
            if let Outcome::Finished(phase) = &decision.outcome {
                let reason = status
                    .reason
                    .as_ref()
                    .map_or("", |r| r.as_str())
                    .to_string();
                self.metrics.job_finished(phase.as_str(), &reason);
            }
        }
        Ok(decision.requeue)
    }

    async fn replace_job(&mut self, job: &PodMigrationJob) -> Result<PodMigrationJob, kube::Error> {
        let name = job.metadata.name.clone().unwrap_or_default();
        match bounded(self.jobs_api().replace(&name, &PostParams::default(), job)).await {
            Ok(updated) => {
                self.remember(&updated);
                Ok(updated)
            }
            Err(err) => {
                self.metrics.api_error("updateJob");
                Err(err)
            }
        }
    }

    /// Records a failed action in the job's status, then reports the error
    /// so the job is retried after a backoff.
    async fn after_failure(
        &mut self,
        mut job: PodMigrationJob,
        decision: &Decision,
        err: &kube::Error,
    ) -> Result<Option<Duration>, kube::Error> {
        let name = job.metadata.name.clone().unwrap_or_default();
        let failure = failure_of(err);
        tracing::warn!(job = %name, code = ?failure.code, error = %failure.message, "action failed; retrying");
        if let Some(status) = core::after_failure(&job, decision, &failure, Timestamp::now()) {
            job.status = Some(status);
            if let Err(write) = self.write_status(&job).await {
                tracing::warn!(job = %name, error = %write, "recording the failure failed");
            }
        }
        Err(kube::Error::Service(failure.message.into()))
    }

    async fn evict(
        &self,
        request: &core::EvictRequest,
        delete_options: Option<DeleteOptions>,
    ) -> Result<(), kube::Error> {
        let (namespace, name, uid, policy) = (
            request.namespace.as_str(),
            request.name.as_str(),
            request.uid.as_deref(),
            request.policy,
        );
        let client = self
            .handle
            .eviction_client
            .clone()
            .unwrap_or_else(|| self.client.clone());
        match policy {
            EvictionPolicy::Eviction => {
                let eviction = Eviction {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(namespace.to_string()),
                        ..ObjectMeta::default()
                    },
                    delete_options: with_uid_precondition(delete_options, uid),
                };
                let body = serde_json::to_vec(&eviction).map_err(kube::Error::SerdeError)?;
                let request =
                    kube::core::Request::new(format!("/api/v1/namespaces/{namespace}/pods"))
                        .create_subresource("eviction", name, &PostParams::default(), body)
                        .map_err(kube::Error::BuildRequest)?;
                bounded(client.request::<serde_json::Value>(request))
                    .await
                    .map(|_| ())
            }
            EvictionPolicy::Delete => {
                let params = delete_params(with_uid_precondition(delete_options, uid));
                let pods: Api<Pod> = Api::namespaced(client, namespace);
                bounded(pods.delete(name, &params)).await.map(|_| ())
            }
            EvictionPolicy::SoftEviction => {
                let spec = apis::extension::descheduling::SoftEvictionSpec {
                    timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        Timestamp::now(),
                    )),
                    delete_options,
                    initiator: request.trigger.clone(),
                    reason: request.reason.clone(),
                };
                let value = serde_json::to_string(&spec).map_err(kube::Error::SerdeError)?;
                let patch = serde_json::json!({"metadata": {"annotations": {
                    apis::extension::descheduling::ANNOTATION_SOFT_EVICTION: value
                }}});
                let pods: Api<Pod> = Api::namespaced(client, namespace);
                bounded(pods.patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                ))
                .await
                .map(|_| ())
            }
        }
    }

    /// Upstream `doScavenge`: jobs 30 minutes old (or TTL + 5 minutes) are
    /// deleted with their reservations.
    async fn scavenge(&mut self) {
        let now = Timestamp::now();
        let due: Vec<PodMigrationJob> = self
            .caches
            .jobs
            .state()
            .iter()
            .filter(|job| core::scavenge_due(job, now))
            .take(MAX_SCAVENGES_PER_SWEEP)
            .map(|job| self.current(job))
            .collect();
        for job in due {
            let name = job.metadata.name.clone().unwrap_or_default();
            if let Some(reservation) = core::reservation_name(&job) {
                match bounded(
                    self.reservations_api()
                        .delete(&reservation, &DeleteParams::default()),
                )
                .await
                {
                    Ok(_) => {}
                    Err(err) if is_not_found(&err) => {}
                    Err(err) => {
                        self.metrics.api_error("deleteReservation");
                        tracing::warn!(job = %name, error = %err, "scavenging stopped: deleting the reservation failed");
                        break;
                    }
                }
            }
            match bounded(self.jobs_api().delete(&name, &DeleteParams::default())).await {
                Ok(_) => tracing::info!(job = %name, "scavenged PodMigrationJob"),
                Err(err) if is_not_found(&err) => {}
                Err(err) => {
                    self.metrics.api_error("deleteJob");
                    tracing::warn!(job = %name, error = %err, "scavenging the job failed");
                }
            }
        }
    }

    /// A deleted job's reservation goes too (upstream's delete handler).
    async fn release(&mut self, job: &PodMigrationJob) {
        let Some(reservation) = core::reservation_name(job) else {
            return;
        };
        match bounded(
            self.reservations_api()
                .delete(&reservation, &DeleteParams::default()),
        )
        .await
        {
            Ok(_) => {
                tracing::info!(%reservation, "deleted the Reservation of a deleted PodMigrationJob")
            }
            Err(err) if is_not_found(&err) => {}
            Err(err) => {
                self.metrics.api_error("deleteReservation");
                tracing::warn!(%reservation, error = %err, "deleting the reservation of a deleted job failed");
            }
        }
    }

    fn export_job_counts(&self) {
        let mut counts: BTreeMap<&'static str, usize> = [
            ("Pending", 0),
            ("Running", 0),
            ("Succeeded", 0),
            ("Failed", 0),
            ("Aborted", 0),
        ]
        .into();
        for job in self.caches.jobs.state() {
            let phase = match self.current(&job).status.and_then(|s| s.phase) {
                None | Some(PodMigrationJobPhase::Pending) => "Pending",
                Some(PodMigrationJobPhase::Running) => "Running",
                Some(PodMigrationJobPhase::Succeeded) => "Succeeded",
                Some(PodMigrationJobPhase::Failed) => "Failed",
                Some(PodMigrationJobPhase::Aborted) => "Aborted",
                Some(PodMigrationJobPhase::Other(_)) => continue,
            };
            *counts.entry(phase).or_insert(0) += 1;
        }
        for (phase, count) in counts {
            self.metrics.set_jobs(phase, count);
        }
    }

    /// One round; it stops between jobs when leadership is lost (an
    /// in-flight pass finishes, so an eviction is never left unrecorded).
    async fn tick(&mut self, interval: Duration, leadership: &Leadership) {
        let now = tokio::time::Instant::now();
        if self
            .last_arbitration
            .is_none_or(|last| now - last >= interval)
        {
            self.last_arbitration = Some(now);
            self.arbitrate().await;
        }
        for name in self.due_jobs() {
            if !leadership.is_leader() {
                return;
            }
            let result = self.reconcile(&name).await;
            let Some(schedule) = self.schedule.get_mut(&name) else {
                continue;
            };
            let now = tokio::time::Instant::now();
            match result {
                Ok(requeue) => {
                    schedule.backoff = Duration::ZERO;
                    schedule.due = requeue.map(|delay| now + delay);
                }
                Err(err) => {
                    self.metrics.reconciled("error");
                    let options = &self.handle.options;
                    schedule.backoff = if schedule.backoff.is_zero() {
                        options.base_backoff
                    } else {
                        (schedule.backoff * 2).min(options.max_backoff)
                    };
                    schedule.due = Some(now + schedule.backoff);
                    tracing::warn!(job = %name, error = %err, retry_in = ?schedule.backoff, "reconcile failed");
                }
            }
        }
        if self
            .last_scavenge
            .is_none_or(|last| now - last >= SCAVENGE_PERIOD)
        {
            self.last_scavenge = Some(now);
            self.scavenge().await;
        }
        self.export_job_counts();
    }
}

/// Delete options bound to the pod's uid, so a re-created pod of the same
/// name is never evicted by mistake.
fn with_uid_precondition(
    options: Option<DeleteOptions>,
    uid: Option<&str>,
) -> Option<DeleteOptions> {
    let Some(uid) = uid else {
        return options;
    };
    let mut options = options.unwrap_or_default();
    let preconditions = options.preconditions.get_or_insert_with(Default::default);
    if preconditions.uid.is_none() {
        preconditions.uid = Some(uid.to_string());
    }
    Some(options)
}

/// `metav1.DeleteOptions` as kube's delete parameters.
fn delete_params(options: Option<DeleteOptions>) -> DeleteParams {
    let Some(options) = options else {
        return DeleteParams::default();
    };
    DeleteParams {
        dry_run: options.dry_run.is_some_and(|d| !d.is_empty()),
        grace_period_seconds: options
            .grace_period_seconds
            .and_then(|g| u32::try_from(g).ok()),
        propagation_policy: options.propagation_policy.as_deref().and_then(|p| match p {
            "Orphan" => Some(kube::api::PropagationPolicy::Orphan),
            "Background" => Some(kube::api::PropagationPolicy::Background),
            "Foreground" => Some(kube::api::PropagationPolicy::Foreground),
            _ => None,
        }),
        preconditions: options.preconditions.map(|p| kube::api::Preconditions {
            resource_version: p.resource_version,
            uid: p.uid,
        }),
    }
}

fn workload_view(kind: &str, metadata: &ObjectMeta, replicas: Option<i32>) -> WorkloadView {
    WorkloadView {
        kind: kind.to_string(),
        namespace: metadata.namespace.clone().unwrap_or_default(),
        name: metadata.name.clone().unwrap_or_default(),
        uid: metadata.uid.clone().unwrap_or_default(),
        // Upstream reads spec.replicas, which defaults to 1.
        replicas: replicas.unwrap_or(1),
    }
}

/// Runs the MigrationController until `shutdown`: caches first, then, while
/// this replica leads, arbitration, reconcile passes and the scavenger.
/// Returns `Err` only when the caches could not start.
pub async fn run_migration_controller(
    client: kube::Client,
    handle: MigrationHandle,
    metrics: &MetricsRegistry,
    leadership: Leadership,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let metrics = MigrationMetrics::register(metrics);
    let notify = Arc::new(Notify::new());
    let (deleted_sender, mut deleted) = tokio::sync::mpsc::unbounded_channel();
    let caches = Caches {
        jobs: spawn_reflector(
            Api::all(client.clone()),
            notify.clone(),
            "podmigrationjobs",
            Some(deleted_sender),
        ),
        pods: spawn_reflector(Api::all(client.clone()), notify.clone(), "pods", None),
        nodes: spawn_reflector(Api::all(client.clone()), notify.clone(), "nodes", None),
        replica_sets: spawn_reflector(
            Api::all(client.clone()),
            notify.clone(),
            "replicasets",
            None,
        ),
        stateful_sets: spawn_reflector(
            Api::all(client.clone()),
            notify.clone(),
            "statefulsets",
            None,
        ),
        priority_classes: spawn_reflector(
            Api::all(client.clone()),
            notify.clone(),
            "priorityclasses",
            None,
        ),
    };
    tokio::select! {
        ready = caches.wait_until_ready() => ready.context("MigrationController caches")?,
        _ = shutdown.wait() => return Ok(()),
    }
    let interval = handle
        .args
        .arbitration_args
        .as_ref()
        .and_then(|a| a.interval)
        .and_then(|i| i.to_std())
        .filter(|i| !i.is_zero())
        .unwrap_or(Duration::from_millis(500));
    tracing::info!(
        reconciler = handle.id.as_str(),
        ?interval,
        "MigrationController started"
    );
    let mut controller = Controller {
        eviction_limiter: super::limiter::eviction_limiter(&handle.args),
        client,
        handle,
        metrics,
        caches,
        schedule: HashMap::new(),
        latest: HashMap::new(),
        last_arbitration: None,
        last_scavenge: None,
    };
    loop {
        if !leadership.is_leader() {
            tokio::select! {
                leading = leadership.until_leading() => if !leading { return Ok(()) },
                _ = shutdown.wait() => return Ok(()),
            }
            continue;
        }
        while let Ok(job) = deleted.try_recv() {
            controller.release(&job).await;
        }
        tokio::select! {
            () = controller.tick(interval, &leadership) => {}
            _ = shutdown.wait() => return Ok(()),
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = notify.notified() => tokio::time::sleep(Duration::from_millis(50)).await,
            _ = shutdown.wait() => return Ok(()),
        }
    }
}

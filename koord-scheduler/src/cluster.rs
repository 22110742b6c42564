//! Cluster-mode shell: kube-runtime watchers feeding the cache, the Binder
//! writing the pod patch and the Binding, and the periodic housekeeping
//! (assumed-pod expiry, quota and PodGroup status write-back).
//!
//! Every replica watches, serves the extender and expires its own assumed
//! pods; only the replica holding the leader Lease writes status and runs
//! the Reservation controller (see [`start_background_work`]).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::scheduling::v1alpha1::{Device, Reservation};
use apis::scheduling_sigs::v1alpha1::{ElasticQuota, PodGroup};
use apis::slo::v1alpha1::NodeMetric;
use apis::topology::v1alpha1::NodeResourceTopology;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koord_common::Shutdown;
use koord_common::health::StatusCheck;
use koord_common::leader::Leadership;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::admission::{self, InputMetrics};
use crate::cache::{Change, Object, ObjectKind};
use crate::config::SchedulerConfiguration;
use crate::framework::{
    AnnotationWrite, BindError, BindFuture, Binder, Nomination, Reserved, SharedScheduler,
    StatusWrite,
};
use crate::plugins::{coscheduling, elasticquota};
use crate::reservation_controller;

/// Binds through the API server: merge-patches the annotations, then posts
/// the `pods/binding` subresource. A failed Binding also takes the
/// annotations back off (best effort) so a retry starts clean.
pub struct KubeBinder {
    pub client: kube::Client,
}

impl KubeBinder {
    async fn patch_annotations(
        &self,
        api: &Api<Pod>,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), kube::Error> {
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }
}

impl Binder for KubeBinder {
    fn bind<'a>(&'a self, reserved: &'a Reserved) -> BindFuture<'a> {
        Box::pin(async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &reserved.namespace);
            if !reserved.annotations.is_empty() {
                let set = reserved
                    .annotations
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect();
                self.patch_annotations(&api, &reserved.name, &set)
                    .await
                    .map_err(|e| BindError::PatchAnnotations(e.to_string()))?;
            }
            let binding = Binding {
                metadata: ObjectMeta {
                    name: Some(reserved.name.clone()),
                    namespace: Some(reserved.namespace.clone()),
                    uid: (!reserved.uid.is_empty()).then(|| reserved.uid.clone()),
                    ..ObjectMeta::default()
                },
                target: ObjectReference {
                    kind: Some("Node".into()),
                    api_version: Some("v1".into()),
                    name: Some(reserved.node.clone()),
                    ..ObjectReference::default()
                },
            };
            let created: Result<serde_json::Value, _> = api
                .create_subresource("binding", &reserved.name, &PostParams::default(), &binding)
                .await;
            if let Err(err) = created {
                if !reserved.annotations.is_empty() {
                    let unset = reserved
                        .annotations
                        .keys()
                        .map(|k| (k.clone(), None))
                        .collect();
                    if let Err(cleanup) = self.patch_annotations(&api, &reserved.name, &unset).await
                    {
                        tracing::warn!(pod = %reserved.pod_key, error = %cleanup, "could not remove annotations after a failed binding");
                    }
                }
                return Err(BindError::CreateBinding(err.to_string()));
            }
            Ok(())
        })
    }

    /// A merge patch of `pods/status`; the uid in it makes the API server
    /// refuse it for a pod recreated under the same name.
    fn nominate<'a>(&'a self, nomination: &'a Nomination) -> BindFuture<'a> {
        Box::pin(async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &nomination.namespace);
            let patch = serde_json::json!({
                "metadata": {"uid": nomination.uid},
                "status": {"nominatedNodeName": nomination.node},
            });
            api.patch_status(
                &nomination.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
            .map_err(|e| BindError::PatchStatus(e.to_string()))
        })
    }
}

/// Logs and counts what admission refused of one object, once per object
/// version (a relist repeats nothing already reported).
fn report(
    admitted: &admission::Admitted,
    reports: &mut admission::Reports,
    metrics: &InputMetrics,
) {
    match reports.observe(admitted) {
        admission::Seen::New => {
            metrics.refused_parts(admitted);
            for refusal in &admitted.refused {
                tracing::warn!(object = %refusal.key, annotation = refusal.annotation, reason = %refusal.reason, "{refusal}");
            }
            if let Some(refused) = &admitted.invalid_amount {
                tracing::warn!(
                    kind = ?refused.kind,
                    object = %refused.key,
                    resource_version = admitted.object.resource_version().unwrap_or_default(),
                    field = %refused.amount.field,
                    reason = %refused.amount.reason,
                    "{refused}"
                );
            }
        }
        admission::Seen::Cleared => {
            tracing::info!(kind = ?admitted.object.kind(), object = %admitted.object.key(), "object accepted again: nothing refused in its new version");
        }
        admission::Seen::Clean | admission::Seen::Again => {}
    }
}

/// One watched object through [`admission::admit`]; `None` when refused.
fn admit_one(
    object: Object,
    reports: &mut admission::Reports,
    metrics: &InputMetrics,
) -> Option<Object> {
    let kind = object.kind();
    match admission::admit(object) {
        Ok(admitted) => {
            report(&admitted, reports, metrics);
            Some(admitted.object)
        }
        Err(err) => {
            metrics.refused(kind, err.field());
            tracing::warn!(error = %err, "watched object refused");
            None
        }
    }
}

/// A listed set of objects through [`admission::admit_list`].
fn admit_relist(
    kind: ObjectKind,
    objects: Vec<Object>,
    reports: &mut admission::Reports,
    metrics: &InputMetrics,
) -> Vec<Object> {
    let (admitted, refused) = admission::admit_list(objects);
    for err in refused {
        metrics.refused(err.kind(), err.field());
        tracing::warn!(error = %err, "listed object refused");
    }
    let listed: std::collections::HashSet<String> =
        admitted.iter().map(|a| a.object.key()).collect();
    reports.retain_listed(kind, &listed);
    admitted
        .into_iter()
        .map(|admitted| {
            report(&admitted, reports, metrics);
            admitted.object
        })
        .collect()
}

/// Streams one kind into the scheduler; flips `synced` after the first list.
async fn feed<K>(
    api: Api<K>,
    scheduler: SharedScheduler,
    kind: ObjectKind,
    wrap: fn(K) -> Object,
    synced: watch::Sender<bool>,
    metrics: InputMetrics,
    shutdown: Shutdown,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut events = watcher(api, watcher::Config::default())
        .modify(koord_common::cluster::drop_managed_fields)
        .default_backoff()
        .boxed();
    let mut initial: Vec<Object> = Vec::new();
    let mut reports = admission::Reports::default();
    loop {
        let event = tokio::select! {
            _ = shutdown.wait() => return,
            event = events.next() => event,
        };
        let Some(event) = event else { return };
        // Bounds are checked here, before the lock (see `admission`).
        let changes: Vec<Change> = match event {
            Ok(Event::Apply(object)) => admit_one(wrap(object), &mut reports, &metrics)
                .map(Change::Upsert)
                .into_iter()
                .collect(),
            Ok(Event::Delete(object)) => {
                let object = wrap(object);
                reports.forget(kind, &object.key());
                vec![Change::Delete(object)]
            }
            Ok(Event::Init) => {
                initial.clear();
                Vec::new()
            }
            Ok(Event::InitApply(object)) => {
                initial.push(wrap(object));
                Vec::new()
            }
            Ok(Event::InitDone) => {
                let _ = synced.send(true);
                // A relist after a reconnect: objects deleted meanwhile are
                // not in it and would otherwise stay cached for good.
                let listed =
                    admit_relist(kind, std::mem::take(&mut initial), &mut reports, &metrics);
                match scheduler.read() {
                    Ok(scheduler) => scheduler.cache.relist_changes(kind, listed),
                    Err(_) => return,
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "watch error; retrying with backoff");
                Vec::new()
            }
        };
        if changes.is_empty() {
            continue;
        }
        if !apply_watch_changes(&scheduler, changes) {
            return;
        }
    }
}

/// Applies admitted watch changes to the scheduler state: the one entry
/// point of watch events (also driven by the benchmark's event storm).
/// `false` when the state is no longer usable (the feed then stops).
pub fn apply_watch_changes(scheduler: &SharedScheduler, changes: Vec<Change>) -> bool {
    match scheduler.write() {
        Ok(mut scheduler) => {
            for change in changes {
                scheduler.apply(change);
            }
            true
        }
        Err(_) => false,
    }
}

/// Turns `true` once Nodes and Pods are listed.
pub type CacheSynced = watch::Receiver<bool>;

/// Starts the watchers; `ready` passes, and the returned flag turns `true`,
/// once Nodes and Pods are listed. Refused input is counted in an
/// unregistered [`InputMetrics`] (see [`start_watchers_counted`]).
pub fn start_watchers(
    client: &kube::Client,
    scheduler: &SharedScheduler,
    ready: StatusCheck,
    shutdown: &Shutdown,
) -> CacheSynced {
    start_watchers_counted(client, scheduler, ready, &InputMetrics::default(), shutdown)
}

/// [`start_watchers`] counting refused input in `metrics`.
pub fn start_watchers_counted(
    client: &kube::Client,
    scheduler: &SharedScheduler,
    ready: StatusCheck,
    metrics: &InputMetrics,
    shutdown: &Shutdown,
) -> CacheSynced {
    let (synced_tx, synced) = watch::channel(false);
    let (nodes_tx, mut nodes_rx) = watch::channel(false);
    let (pods_tx, mut pods_rx) = watch::channel(false);
    macro_rules! spawn_feed {
        ($kind:ty, $variant:ident, $tx:expr) => {
            tokio::spawn(feed::<$kind>(
                Api::all(client.clone()),
                Arc::clone(scheduler),
                ObjectKind::$variant,
                Object::$variant,
                $tx,
                metrics.clone(),
                shutdown.clone(),
            ));
        };
    }
    spawn_feed!(Node, Node, nodes_tx);
    spawn_feed!(Pod, Pod, pods_tx);
    // CRD kinds are optional: a missing CRD only logs watch errors.
    spawn_feed!(NodeMetric, NodeMetric, watch::channel(false).0);
    spawn_feed!(ElasticQuota, ElasticQuota, watch::channel(false).0);
    spawn_feed!(Reservation, Reservation, watch::channel(false).0);
    spawn_feed!(PodGroup, PodGroup, watch::channel(false).0);
    spawn_feed!(Device, Device, watch::channel(false).0);
    spawn_feed!(
        NodeResourceTopology,
        NodeResourceTopology,
        watch::channel(false).0
    );
    // Preemption counts the victims it adds against these; until they are
    // listed it sees none (as kube-scheduler with an empty lister).
    spawn_feed!(
        PodDisruptionBudget,
        PodDisruptionBudget,
        watch::channel(false).0
    );
    tokio::spawn(async move {
        let _ = nodes_rx.wait_for(|synced| *synced).await;
        let _ = pods_rx.wait_for(|synced| *synced).await;
        ready.set_passing();
        synced_tx.send_replace(true);
        tracing::info!("scheduler cache synced (nodes and pods listed)");
    });
    synced
}

/// Merge-patches a plugin's write onto its object (PodGroup status, pod
/// annotations). PodGroups have no status subresource upstream, so the
/// object itself is patched.
pub async fn write_status(client: &kube::Client, write: &StatusWrite) -> Result<(), kube::Error> {
    let Some(namespace) = write.namespace.as_deref() else {
        return Ok(());
    };
    let params = PatchParams::default();
    let patch = Patch::Merge(&write.patch);
    match write.resource {
        coscheduling::POD_GROUP_RESOURCE => {
            let api: Api<PodGroup> = Api::namespaced(client.clone(), namespace);
            api.patch(&write.name, &params, &patch).await.map(|_| ())
        }
        coscheduling::POD_RESOURCE => {
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            api.patch(&write.name, &params, &patch).await.map(|_| ())
        }
        // ElasticQuota has no status subresource: `status.used` is merged
        // into the object itself.
        elasticquota::RESOURCE => {
            let api: Api<ElasticQuota> = Api::namespaced(client.clone(), namespace);
            api.patch(&write.name, &params, &patch).await.map(|_| ())
        }
        other => {
            tracing::error!(
                resource = other,
                name = %write.name,
                "no writer for this status write; dropped"
            );
            Ok(())
        }
    }
}

/// Expires assumed pods and writes due quota and PodGroup status, once per
/// `interval`, unconditionally (a single replica, or leader election off).
pub fn start_housekeeping(
    client: &kube::Client,
    scheduler: &SharedScheduler,
    interval: Duration,
    shutdown: &Shutdown,
) {
    start_gated_housekeeping(
        client,
        scheduler,
        interval,
        Leadership::unconditional(),
        shutdown,
    );
}

/// Housekeeping once per `interval`: every replica expires its assumed
/// pods; only while `leadership` holds are the due quota annotations,
/// PodGroup status and gang-timeout annotations collected and written.
///
/// Expiry is local: each replica's cache holds the assumptions of the binds
/// its own extender served (kube-scheduler's leader calls the extender in
/// its pod, and that may change), and releasing them writes nothing, so a
/// standby must expire them too or its cache would keep phantom pods.
/// Writes are only collected by the leader, since collecting marks them as
/// written; losing leadership cancels the write in flight and drops the rest.
pub fn start_gated_housekeeping(
    client: &kube::Client,
    scheduler: &SharedScheduler,
    interval: Duration,
    leadership: Leadership,
    shutdown: &Shutdown,
) {
    let client = client.clone();
    let scheduler = Arc::clone(scheduler);
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = ticker.tick() => {}
            }
            let writes = match scheduler.write() {
                Ok(mut scheduler) => {
                    let now = SystemTime::now();
                    crate::framework::log_released(&scheduler.expire_permits(now));
                    let expired = scheduler.expire_assumed(now);
                    if expired > 0 {
                        tracing::warn!(
                            expired,
                            "assumed pods were never confirmed by the watch; released"
                        );
                    }
                    if leadership.is_leader() {
                        (
                            scheduler.pending_writes(now),
                            scheduler.pending_status_writes(now),
                        )
                    } else {
                        (Vec::new(), Vec::new())
                    }
                }
                Err(_) => return,
            };
            let (writes, status_writes) = writes;
            if write_due(&client, &leadership, writes, status_writes)
                .await
                .is_none()
            {
                tracing::warn!("leadership lost; stopped writing quota and PodGroup status");
            }
        }
    });
}

/// Writes the due status patches, then the quota annotations; `None` when
/// leadership was lost on the way (the remaining writes are dropped).
async fn write_due(
    client: &kube::Client,
    leadership: &Leadership,
    writes: Vec<AnnotationWrite>,
    status_writes: Vec<StatusWrite>,
) -> Option<()> {
    for write in &status_writes {
        if let Err(err) = leadership
            .while_leading(write_status(client, write))
            .await?
        {
            tracing::warn!(object = %write.name, resource = write.resource, error = %err, "status write failed");
        }
    }
    for write in writes {
        if write.resource != elasticquota::RESOURCE {
            continue;
        }
        let Some(namespace) = write.namespace.as_deref() else {
            continue;
        };
        let api: Api<ElasticQuota> = Api::namespaced(client.clone(), namespace);
        let patch = serde_json::json!({"metadata": {"annotations": write.annotations}});
        let written = leadership
            .while_leading(api.patch(&write.name, &PatchParams::default(), &Patch::Merge(&patch)))
            .await?;
        if let Err(err) = written {
            tracing::warn!(quota = %write.name, error = %err, "quota status write failed");
        }
    }
    Some(())
}

/// Starts the background work that writes to the cluster: the housekeeping
/// (every `housekeeping_interval`) and the Reservation controller, both
/// writing only while `leadership` holds, and each only as far as the
/// scheduler's `--controller-plugins` selection allows. Assumed-pod expiry
/// runs on every replica regardless.
pub fn start_background_work(
    client: &kube::Client,
    scheduler: &SharedScheduler,
    config: &SchedulerConfiguration,
    housekeeping_interval: Duration,
    leadership: &Leadership,
    shutdown: &Shutdown,
) {
    start_gated_housekeeping(
        client,
        scheduler,
        housekeeping_interval,
        leadership.clone(),
        shutdown,
    );
    let controllers = scheduler
        .read()
        .map(|scheduler| scheduler.controllers.clone())
        .unwrap_or_default();
    if controllers.is_enabled(crate::plugins::reservation::NAME) {
        reservation_controller::start(client, scheduler, config, leadership.clone(), shutdown);
    } else {
        tracing::info!(
            "--controller-plugins disables Reservation: the Reservation controller does not run"
        );
    }
}

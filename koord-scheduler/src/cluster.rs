//! Cluster-mode shell: kube-runtime watchers feeding the cache, the Binder
//! writing the pod patch and the Binding, and the periodic housekeeping
//! (assumed-pod expiry, quota status write-back).

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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koord_common::Shutdown;
use koord_common::health::StatusCheck;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::cache::{Change, Object, ObjectKind};
use crate::framework::{BindError, BindFuture, Binder, Reserved, SharedScheduler, StatusWrite};
use crate::plugins::{coscheduling, elasticquota};

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
                    .map_err(|e| BindError(format!("patching pod annotations: {e}")))?;
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
                return Err(BindError(format!("creating the Binding: {err}")));
            }
            Ok(())
        })
    }
}

/// Streams one kind into the scheduler; flips `synced` after the first list.
async fn feed<K>(
    api: Api<K>,
    scheduler: SharedScheduler,
    kind: ObjectKind,
    wrap: fn(K) -> Object,
    synced: watch::Sender<bool>,
    shutdown: Shutdown,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut initial: Vec<Object> = Vec::new();
    loop {
        let event = tokio::select! {
            _ = shutdown.wait() => return,
            event = events.next() => event,
        };
        let Some(event) = event else { return };
        let changes: Vec<Change> = match event {
            Ok(Event::Apply(object)) => vec![Change::Upsert(wrap(object))],
            Ok(Event::Delete(object)) => vec![Change::Delete(wrap(object))],
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
                let listed = std::mem::take(&mut initial);
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
        match scheduler.write() {
            Ok(mut scheduler) => {
                for change in changes {
                    scheduler.apply(change);
                }
            }
            Err(_) => return,
        }
    }
}

/// Starts the watchers; `ready` passes once Nodes and Pods are listed.
pub fn start_watchers(
    client: &kube::Client,
    scheduler: &SharedScheduler,
    ready: StatusCheck,
    shutdown: &Shutdown,
) {
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
    tokio::spawn(async move {
        let _ = nodes_rx.wait_for(|synced| *synced).await;
        let _ = pods_rx.wait_for(|synced| *synced).await;
        ready.set_passing();
        tracing::info!("scheduler cache synced (nodes and pods listed)");
    });
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

/// Expires assumed pods and writes due quota and PodGroup status, once per `interval`.
pub fn start_housekeeping(
    client: &kube::Client,
    scheduler: &SharedScheduler,
    interval: Duration,
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
                    let expired = scheduler.expire_assumed(now);
                    if expired > 0 {
                        tracing::warn!(
                            expired,
                            "assumed pods were never confirmed by the watch; released"
                        );
                    }
                    (
                        scheduler.pending_writes(now),
                        scheduler.pending_status_writes(now),
                    )
                }
                Err(_) => return,
            };
            let (writes, status_writes) = writes;
            for write in &status_writes {
                if let Err(err) = write_status(&client, write).await {
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
                if let Err(err) = api
                    .patch(&write.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::warn!(quota = %write.name, error = %err, "quota status write failed");
                }
            }
        }
    });
}

//! The live loop's caches: kube-runtime reflectors over what a round reads
//! (Nodes, Pods, NodeMetrics, PodDisruptionBudgets, PodMigrationJobs,
//! PriorityClasses and the workloads whose `spec.replicas` the migration
//! limits read: ReplicaSets, StatefulSets, ReplicationControllers). Objects
//! are trimmed of what no round reads before they are cached, and each
//! round digests the caches into the same [`ClusterView`] the `plan`
//! command builds from a snapshot file.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;

use koord_common::cluster::drop_managed_fields;

use apis::scheduling::v1alpha1::PodMigrationJob;
use apis::slo::v1alpha1::NodeMetric;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::model::{
    ClusterView, MetricView, MigrationJobView, NodeView, PdbView, PodView, WorkloadView,
};

/// A cluster view and what came with it.
pub struct CachedView {
    pub view: ClusterView,
    pub priority_classes: HashMap<String, i32>,
    /// Problems with single fields (bad quantities, annotations), by object.
    pub problems: Vec<String>,
}

pub struct Caches {
    pub nodes: Store<Node>,
    pub pods: Store<Pod>,
    pub node_metrics: Store<NodeMetric>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub migration_jobs: Store<PodMigrationJob>,
    pub priority_classes: Store<PriorityClass>,
    pub replica_sets: Store<ReplicaSet>,
    pub stateful_sets: Store<StatefulSet>,
    pub replication_controllers: Store<ReplicationController>,
}

fn spawn_reflector<K>(api: Api<K>, trim: fn(&mut K), what: &'static str) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).modify(trim),
    )
    .default_backoff();
    tokio::spawn(async move {
        let mut stream = Box::pin(stream);
        while let Some(event) = stream.next().await {
            if let Err(err) = event {
                tracing::warn!(resource = what, error = %err, "watch failed; retrying");
            }
        }
    });
    reader
}

fn trim_node(node: &mut Node) {
    drop_managed_fields(node);
    if let Some(status) = node.status.as_mut() {
        // The image list is most of a Node and no round reads it.
        status.images = None;
    }
}

fn trim_replica_set(set: &mut ReplicaSet) {
    drop_managed_fields(set);
    if let Some(spec) = set.spec.as_mut() {
        spec.template = None;
    }
}

fn trim_stateful_set(set: &mut StatefulSet) {
    drop_managed_fields(set);
    if let Some(spec) = set.spec.as_mut() {
        spec.template = Default::default();
        spec.volume_claim_templates = None;
    }
}

fn trim_replication_controller(controller: &mut ReplicationController) {
    drop_managed_fields(controller);
    if let Some(spec) = controller.spec.as_mut() {
        spec.template = None;
    }
}

impl Caches {
    pub fn start(client: &kube::Client) -> Self {
        Caches {
            nodes: spawn_reflector(Api::all(client.clone()), trim_node, "nodes"),
            pods: spawn_reflector(Api::all(client.clone()), drop_managed_fields, "pods"),
            node_metrics: spawn_reflector(
                Api::all(client.clone()),
                drop_managed_fields,
                "nodemetrics",
            ),
            pdbs: spawn_reflector(
                Api::all(client.clone()),
                drop_managed_fields,
                "poddisruptionbudgets",
            ),
            migration_jobs: spawn_reflector(
                Api::all(client.clone()),
                drop_managed_fields,
                "podmigrationjobs",
            ),
            priority_classes: spawn_reflector(
                Api::all(client.clone()),
                drop_managed_fields,
                "priorityclasses",
            ),
            replica_sets: spawn_reflector(
                Api::all(client.clone()),
                trim_replica_set,
                "replicasets",
            ),
            stateful_sets: spawn_reflector(
                Api::all(client.clone()),
                trim_stateful_set,
                "statefulsets",
            ),
            replication_controllers: spawn_reflector(
                Api::all(client.clone()),
                trim_replication_controller,
                "replicationcontrollers",
            ),
        }
    }

    /// Resolves once every cache has listed its kind, naming in `check`
    /// the kind still awaited (a missing CRD or permission shows there).
    pub async fn wait_until_ready(
        &self,
        check: &koord_common::StatusCheck,
    ) -> Result<(), reflector::store::WriterDropped> {
        macro_rules! wait {
            ($store:expr, $what:literal) => {
                if !is_ready(&$store).await {
                    check.set_failing(concat!(
                        "waiting for the first list of ",
                        $what,
                        " (is the CRD installed and may the service account list it?)"
                    ));
                }
                $store.wait_until_ready().await?;
            };
        }
        wait!(self.nodes, "nodes");
        wait!(self.pods, "pods");
        wait!(self.node_metrics, "nodemetrics.slo.koordinator.sh");
        wait!(self.pdbs, "poddisruptionbudgets");
        wait!(
            self.migration_jobs,
            "podmigrationjobs.scheduling.koordinator.sh"
        );
        wait!(self.priority_classes, "priorityclasses");
        wait!(self.replica_sets, "replicasets");
        wait!(self.stateful_sets, "statefulsets");
        wait!(self.replication_controllers, "replicationcontrollers");
        Ok(())
    }

    /// The cluster as a round reads it.
    pub fn view(&self) -> CachedView {
        digest(Objects {
            nodes: self.nodes.state(),
            pods: self.pods.state(),
            node_metrics: self.node_metrics.state(),
            pdbs: self.pdbs.state(),
            migration_jobs: self.migration_jobs.state(),
            priority_classes: self.priority_classes.state(),
            replica_sets: self.replica_sets.state(),
            stateful_sets: self.stateful_sets.state(),
            replication_controllers: self.replication_controllers.state(),
        })
    }
}

/// Whether `store` has listed already (without waiting).
async fn is_ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    tokio::time::timeout(std::time::Duration::ZERO, store.wait_until_ready())
        .await
        .is_ok_and(|ready| ready.is_ok())
}

/// The cached objects of one round.
#[derive(Default)]
pub struct Objects {
    pub nodes: Vec<std::sync::Arc<Node>>,
    pub pods: Vec<std::sync::Arc<Pod>>,
    pub node_metrics: Vec<std::sync::Arc<NodeMetric>>,
    pub pdbs: Vec<std::sync::Arc<PodDisruptionBudget>>,
    pub migration_jobs: Vec<std::sync::Arc<PodMigrationJob>>,
    pub priority_classes: Vec<std::sync::Arc<PriorityClass>>,
    pub replica_sets: Vec<std::sync::Arc<ReplicaSet>>,
    pub stateful_sets: Vec<std::sync::Arc<StatefulSet>>,
    pub replication_controllers: Vec<std::sync::Arc<ReplicationController>>,
}

/// Digests cached objects with the model's conversions, in a stable order
/// (nodes and pods by name) so that equal caches give equal rounds.
pub fn digest(objects: Objects) -> CachedView {
    let mut problems = Vec::new();
    let mut note = |kind: &str, name: &str, found: &[String]| {
        problems.extend(
            found
                .iter()
                .map(|problem| format!("{kind} {name}: {problem}")),
        );
    };
    let mut view = ClusterView::default();
    for node in &objects.nodes {
        let node = NodeView::of(node);
        note("Node", &node.name, &node.problems);
        view.nodes.push(node);
    }
    view.nodes.sort_by(|a, b| a.name.cmp(&b.name));
    for pod in &objects.pods {
        let pod = PodView::of(pod);
        note("Pod", pod.key(), &pod.problems);
        view.pods.push(pod);
    }
    view.pods.sort_by(|a, b| a.key.cmp(&b.key));
    for metric in &objects.node_metrics {
        let metric = MetricView::of(metric);
        note("NodeMetric", &metric.node, &metric.problems);
        view.node_metrics.insert(metric.node.clone(), metric);
    }
    view.pdbs = objects.pdbs.iter().map(|pdb| PdbView::of(pdb)).collect();
    view.migration_jobs = objects
        .migration_jobs
        .iter()
        .map(|job| MigrationJobView::of(job))
        .collect();
    let replicas = |replicas: Option<i32>| replicas.map(|r| r.max(0));
    view.workloads
        .extend(objects.replica_sets.iter().map(|set| {
            WorkloadView::new(
                "ReplicaSet",
                &set.metadata,
                replicas(set.spec.as_ref().and_then(|spec| spec.replicas)),
            )
        }));
    view.workloads
        .extend(objects.stateful_sets.iter().map(|set| {
            WorkloadView::new(
                "StatefulSet",
                &set.metadata,
                replicas(set.spec.as_ref().and_then(|spec| spec.replicas)),
            )
        }));
    view.workloads
        .extend(objects.replication_controllers.iter().map(|controller| {
            WorkloadView::new(
                "ReplicationController",
                &controller.metadata,
                replicas(controller.spec.as_ref().and_then(|spec| spec.replicas)),
            )
        }));
    let priority_classes = objects
        .priority_classes
        .iter()
        .filter_map(|class| Some((class.metadata.name.clone()?, class.value)))
        .collect();
    CachedView {
        view,
        priority_classes,
        problems,
    }
}

//! Reading a cluster snapshot for `plan`: YAML documents separated by `---`
//! (JSON is YAML too), each one object or a `List` of objects as
//! `kubectl get -o yaml` prints. Kinds read: Node, Pod, NodeMetric,
//! PodDisruptionBudget, PodMigrationJob, PriorityClass, and the workloads
//! whose `spec.replicas` the migration limits read (ReplicaSet,
//! StatefulSet, Deployment, ReplicationController). Other kinds are counted
//! and ignored. The format is documented in `docs/plan.md`.

use std::collections::{BTreeMap, HashMap};

use apis::scheduling::v1alpha1::PodMigrationJob;
use apis::slo::v1alpha1::NodeMetric;
use apis::yaml::null_as_empty;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::model::{
    ClusterView, MetricView, MigrationJobView, NodeView, PdbView, PodView, WorkloadView,
};

/// The largest snapshot read (`--max-snapshot-bytes` default).
pub const DEFAULT_MAX_SNAPSHOT_BYTES: u64 = 512 << 20;
/// The deepest nesting accepted (Kubernetes objects nest about a dozen levels).
pub const MAX_NESTING: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path} is {size} bytes, more than the limit of {limit} (--max-snapshot-bytes)")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{source_name}: {message}")]
    Syntax {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: document {document}: {kind} {name:?}: {message}")]
    Object {
        source_name: String,
        document: usize,
        kind: String,
        name: String,
        message: String,
    },
}

/// A parsed snapshot.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub view: ClusterView,
    /// PriorityClass name → value.
    pub priority_classes: HashMap<String, i32>,
    /// Kinds present but not read, with their counts.
    pub ignored_kinds: BTreeMap<String, usize>,
    /// Problems with single fields (bad quantities, annotations), by object.
    pub problems: Vec<String>,
}

impl Snapshot {
    pub fn read_file(path: &std::path::Path, max_bytes: u64) -> Result<Self, SnapshotError> {
        let display = path.display().to_string();
        let size = std::fs::metadata(path)
            .map_err(|err| SnapshotError::Read {
                path: display.clone(),
                reason: err.to_string(),
            })?
            .len();
        if size > max_bytes {
            return Err(SnapshotError::TooLarge {
                path: display,
                size,
                limit: max_bytes,
            });
        }
        let text = std::fs::read_to_string(path).map_err(|err| SnapshotError::Read {
            path: display.clone(),
            reason: err.to_string(),
        })?;
        Self::parse(&text, &display)
    }

    pub fn parse(text: &str, source_name: &str) -> Result<Self, SnapshotError> {
        let linear = text.len().saturating_add(1024);
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! {
                max_depth: MAX_NESTING,
                flow_nesting_limit: MAX_NESTING,
                max_events: linear,
                max_nodes: linear,
                max_documents: linear,
                max_total_scalar_bytes: linear,
            },
            strict_booleans: true,
            with_snippet: false,
        };
        let documents: Vec<Option<Value>> =
            serde_saphyr::from_str_multiple_with_options(text, options).map_err(|err| {
                SnapshotError::Syntax {
                    source_name: source_name.to_string(),
                    message: err.to_string(),
                }
            })?;
        let mut snapshot = Snapshot::default();
        for (index, document) in documents.into_iter().enumerate() {
            let Some(document) = document else { continue };
            snapshot.add(document, index + 1, source_name)?;
        }
        snapshot.view.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(snapshot)
    }

    fn add(
        &mut self,
        value: Value,
        document: usize,
        source_name: &str,
    ) -> Result<(), SnapshotError> {
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let fail = |message: String| SnapshotError::Object {
            source_name: source_name.to_string(),
            document,
            kind: kind.clone(),
            name: name.clone(),
            message,
        };
        if kind.ends_with("List") {
            let Some(Value::Array(items)) = value.get("items").cloned() else {
                return Err(fail("a List needs an items array".to_string()));
            };
            for item in items {
                self.add(item, document, source_name)?;
            }
            return Ok(());
        }
        if kind.is_empty() {
            return Err(fail("the object has no kind".to_string()));
        }
        if name.is_empty() {
            return Err(fail("the object has no metadata.name".to_string()));
        }
        let decode_error = |err: serde_json::Error| fail(err.to_string());
        match kind.as_str() {
            "Node" => {
                let node: Node = null_as_empty::deserialize(value).map_err(decode_error)?;
                let view = NodeView::of(&node);
                self.note(&kind, &view.name, &view.problems);
                self.view.nodes.push(view);
            }
            "Pod" => {
                let pod: Pod = null_as_empty::deserialize(value).map_err(decode_error)?;
                let view = PodView::of(&pod);
                self.note(&kind, view.key(), &view.problems);
                self.view.pods.push(view);
            }
            "NodeMetric" => {
                let metric: NodeMetric = null_as_empty::deserialize(value).map_err(decode_error)?;
                let view = MetricView::of(&metric);
                self.note(&kind, &view.node, &view.problems);
                self.view.node_metrics.insert(view.node.clone(), view);
            }
            "PodDisruptionBudget" => {
                let pdb: PodDisruptionBudget =
                    null_as_empty::deserialize(value).map_err(decode_error)?;
                self.view.pdbs.push(PdbView::of(&pdb));
            }
            "PodMigrationJob" => {
                let job: PodMigrationJob =
                    null_as_empty::deserialize(value).map_err(decode_error)?;
                self.view.migration_jobs.push(MigrationJobView::of(&job));
            }
            "PriorityClass" => {
                let priority = value
                    .get("value")
                    .and_then(Value::as_i64)
                    .and_then(|v| i32::try_from(v).ok())
                    .ok_or_else(|| fail("value must be a 32-bit integer".to_string()))?;
                self.priority_classes.insert(name.clone(), priority);
            }
            "ReplicaSet" | "StatefulSet" | "Deployment" | "ReplicationController" => {
                let replicas = match value.pointer("/spec/replicas") {
                    None | Some(Value::Null) => 1,
                    Some(replicas) => replicas
                        .as_i64()
                        .and_then(|v| i32::try_from(v).ok())
                        .filter(|v| *v >= 0)
                        .ok_or_else(|| {
                            fail("spec.replicas must be a non-negative 32-bit integer".to_string())
                        })?,
                };
                let metadata: ObjectMeta = value
                    .get("metadata")
                    .cloned()
                    .map(null_as_empty::deserialize)
                    .transpose()
                    .map_err(decode_error)?
                    .unwrap_or_default();
                self.view
                    .workloads
                    .push(WorkloadView::new(&kind, &metadata, Some(replicas)));
            }
            _ => *self.ignored_kinds.entry(kind.clone()).or_insert(0) += 1,
        }
        Ok(())
    }

    fn note(&mut self, kind: &str, name: &str, problems: &[String]) {
        self.problems.extend(
            problems
                .iter()
                .map(|problem| format!("{kind} {name}: {problem}")),
        );
    }
}

//! `koord-manager preview`: what the manager would write for each node of a
//! snapshot, without a cluster, using the controllers' decision cores.
//!
//! The snapshot is multi-document YAML (or JSON) holding Nodes, NodeMetrics,
//! Pods, NodeResourceTopologies, Devices and the `slo-controller-config`
//! ConfigMap;
//! `List` documents (as
//! `kubectl get -o yaml` prints) are unpacked. The JSON output is a stable
//! contract documented in `docs/preview.md`.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::SystemTime;

use apis::configuration::SloControllerConfig;
use apis::scheduling::v1alpha1::{Device, DeviceInfo, DeviceSpec};
use apis::slo::v1alpha1::{
    HostApplicationMetricInfo, NodeMetric, NodeMetricInfo, NodeMetricSpec, NodeMetricStatus,
    NodeSLOSpec, PeakMetric, PodMetricInfo, ReclaimableMetric,
};
use apis::topology::v1alpha1::Zone;
use apis::yaml::null_as_empty::{self, EmptyOnNull};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Node, NodeStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::slo_controller::config::{ConfigRejected, parse_config};
use crate::slo_controller::noderesource::MANAGED_RESOURCES;
use crate::slo_controller::resources::{self, PodSummary};
use crate::slo_controller::{NodeExtras, NodePlan, plan_node_with, pod_node_name};

mod fast_yaml;
pub mod limits;

pub use limits::{DEFAULT_MAX_SNAPSHOT_BYTES, MAX_NESTING};

/// Why a preview could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("{source_name}: document {index}: {message}")]
    Document {
        source_name: String,
        index: usize,
        message: String,
    },
    #[error("{source_name}: {kind} {name:?} cannot be read: {message}")]
    Object {
        source_name: String,
        kind: String,
        name: String,
        message: String,
    },
    #[error("{source_name}: the ConfigMap {name:?} is rejected: {source}")]
    Config {
        source_name: String,
        name: String,
        #[source]
        source: ConfigRejected,
    },
    #[error("{source_name}: no ConfigMap found")]
    NoConfigMap { source_name: String },
    /// Text that is not YAML (or JSON); the message gives the line and
    /// column.
    #[error("{source_name}: {message}")]
    Syntax {
        source_name: String,
        message: String,
    },
    /// Text that goes beyond a limit: nesting deeper than [`MAX_NESTING`],
    /// aliases expanding beyond the text's size; the message says where.
    #[error("{source_name}: {message}")]
    Budget {
        source_name: String,
        message: String,
    },
    /// An object the controllers could not tell apart: no name, or the name
    /// of an earlier object of its kind.
    #[error("{source_name}: {location}: {message}")]
    Refused {
        source_name: String,
        location: String,
        message: String,
    },
}

/// The objects of a snapshot. Pods are kept only as the summaries the
/// calculation reads, grouped by node, so large snapshots stay small.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub nodes: Vec<Node>,
    pub node_metrics: Vec<NodeMetric>,
    pub pods: HashMap<String, Vec<PodSummary>>,
    pub pod_count: usize,
    pub config_maps: Vec<ConfigMap>,
    /// The annotations of each NodeResourceTopology, by name (the CPU
    /// normalization plugin reads `cpu-basic-info` there).
    pub topologies: HashMap<String, BTreeMap<String, String>>,
    /// The zones of each NodeResourceTopology, by name (the BatchResource
    /// plugin writes NUMA-level batch resources there).
    pub topology_zones: HashMap<String, Vec<Zone>>,
    /// Devices by name (the device plugins read the one named after each
    /// node).
    pub devices: HashMap<String, Device>,
    /// Which reader produced the snapshot.
    pub read_by: SnapshotReader,
    /// `namespace/name` of the pods bound to no node (only named in errors).
    unbound_pods: Vec<String>,
}

/// The readers [`Snapshot::parse`] tries, fastest first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotReader {
    /// serde_json into lean structs (JSON streams).
    #[default]
    LeanJson,
    /// The built-in streaming YAML reader into lean structs.
    FastYaml,
    /// serde-saphyr into lean structs: YAML the fast reader leaves alone
    /// (anchors, tags, folded scalars, ...).
    LeanYaml,
    /// Full Kubernetes types, after a lean read failed.
    Full,
}

/// Just enough of an object to route it.
#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Option<HeaderMeta>,
}

#[derive(Deserialize)]
struct HeaderMeta {
    #[serde(default)]
    name: Option<String>,
}

/// Any snapshot object, reduced to the fields the preview reads of Nodes
/// (labels, annotations, capacity, allocatable), NodeMetrics (status), Pods
/// (what [`PodSummary::of`] reads) and ConfigMaps (data); serde skips the
/// rest without building it.
#[derive(Deserialize)]
struct LeanObject {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Option<LeanMeta>,
    #[serde(default)]
    spec: Option<LeanPodSpec>,
    #[serde(default)]
    status: Option<LeanStatus>,
    #[serde(default)]
    data: Option<BTreeMap<String, String>>,
    /// A NodeResourceTopology's zones.
    #[serde(default)]
    zones: Option<Vec<Zone>>,
    #[serde(default)]
    items: Option<ListItems>,
}

/// A `List`'s items, added to a snapshot of their own as each is read, so a
/// large list never exists as whole objects (Pods shrink to summaries).
struct ListItems(Builder);

impl<'de> Deserialize<'de> for ListItems {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ItemsVisitor;

        impl<'de> serde::de::Visitor<'de> for ItemsVisitor {
            type Value = ListItems;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of objects")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ListItems, A::Error> {
                let mut items = Builder::default();
                let mut index = 0;
                while let Some(item) = seq.next_element::<Option<LeanObject>>()? {
                    items.position.item = Some(index);
                    if let Some(item) = item {
                        items.add_lean(item);
                    }
                    index += 1;
                }
                Ok(ListItems(items))
            }
        }

        deserializer.deserialize_seq(ItemsVisitor)
    }
}

#[derive(Deserialize)]
struct LeanMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

impl LeanMeta {
    fn into_object_meta(self) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            labels: self.labels,
            annotations: self.annotations,
            ..ObjectMeta::default()
        }
    }
}

/// A Pod's spec as far as requests, QoS and priority go, and a Device's
/// devices (other kinds' specs have none of these fields and come out
/// empty).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanPodSpec {
    #[serde(default)]
    devices: Option<Vec<DeviceInfo>>,
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    containers: Option<Vec<LeanContainer>>,
    #[serde(default)]
    init_containers: Option<Vec<LeanContainer>>,
    #[serde(default)]
    overhead: Option<BTreeMap<String, Quantity>>,
}

impl LeanPodSpec {
    fn into_pod_spec(self) -> PodSpec {
        let containers = |list: Vec<LeanContainer>| -> Vec<Container> {
            list.into_iter()
                .map(LeanContainer::into_container)
                .collect()
        };
        PodSpec {
            node_name: self.node_name,
            priority: self.priority,
            containers: containers(self.containers.unwrap_or_default()),
            init_containers: self.init_containers.map(containers),
            overhead: self.overhead,
            ..PodSpec::default()
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanContainer {
    #[serde(default)]
    name: String,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
    #[serde(default)]
    restart_policy: Option<String>,
}

impl LeanContainer {
    fn into_container(self) -> Container {
        Container {
            name: self.name,
            resources: self.resources,
            restart_policy: self.restart_policy,
            ..Container::default()
        }
    }
}

/// The union of the status fields read of Pods, Nodes and NodeMetrics; their
/// names do not overlap.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanStatus {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    qos_class: Option<String>,
    #[serde(default)]
    capacity: Option<BTreeMap<String, Quantity>>,
    #[serde(default)]
    allocatable: Option<BTreeMap<String, Quantity>>,
    #[serde(default)]
    update_time: Option<Time>,
    #[serde(default)]
    node_metric: Option<NodeMetricInfo>,
    #[serde(default)]
    pods_metric: Vec<PodMetricInfo>,
    #[serde(default)]
    host_application_metric: Vec<HostApplicationMetricInfo>,
    #[serde(default)]
    prod_reclaimable_metric: Option<ReclaimableMetric>,
    #[serde(default)]
    prod_peak_metric: Option<PeakMetric>,
}

/// Where an object is in a snapshot: its document (0-based, empty documents
/// not counted) and, inside a `List`, its item.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Position {
    document: Option<usize>,
    item: Option<usize>,
}

impl Position {
    fn in_document(self, document: usize) -> Self {
        Position {
            document: Some(self.document.unwrap_or(document)),
            item: self.item,
        }
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "document {}", self.document.unwrap_or_default())?;
        if let Some(item) = self.item {
            write!(f, " item {item}")?;
        }
        Ok(())
    }
}

/// Why an object was refused, kept until its document is known.
#[derive(Clone, Debug)]
enum Problem {
    Nameless {
        kind: &'static str,
        at: Position,
    },
    Duplicate {
        kind: &'static str,
        key: String,
        at: Position,
        first: Position,
    },
}

impl Problem {
    fn in_document(self, document: usize) -> Self {
        match self {
            Problem::Nameless { kind, at } => Problem::Nameless {
                kind,
                at: at.in_document(document),
            },
            Problem::Duplicate {
                kind,
                key,
                at,
                first,
            } => Problem::Duplicate {
                kind,
                key,
                at: at.in_document(document),
                first: first.in_document(document),
            },
        }
    }

    fn into_error(self, source_name: &str) -> PreviewError {
        let (location, message) = match self {
            Problem::Nameless { kind, at } => {
                (at.to_string(), format!("a {kind} without metadata.name"))
            }
            Problem::Duplicate {
                kind,
                key,
                at,
                first,
            } => (
                at.to_string(),
                format!("{kind} {key:?} appears a second time (first in {first})"),
            ),
        };
        PreviewError::Refused {
            source_name: source_name.to_owned(),
            location,
            message,
        }
    }
}

/// A snapshot being read: the objects, the keys seen so far (to refuse a
/// second object of the same kind and name, which the controllers could
/// not tell apart) and the first problem.
#[derive(Default)]
struct Builder {
    snapshot: Snapshot,
    /// Where the next object is.
    position: Position,
    /// Objects seen, by [`ObjectKeys::of`] (a keyed hash: no key is copied).
    seen: HashMap<u64, Position, ObjectKeys>,
    problem: Option<Problem>,
}

/// Hashes of (kind, namespace, name) under a key chosen at random per
/// process (SipHash), so that two different objects share one only by a
/// chance of about 2^-64 per pair, which input cannot arrange; the map then
/// uses the hash as it is.
#[derive(Clone)]
struct ObjectKeys(std::collections::hash_map::RandomState);

impl Default for ObjectKeys {
    fn default() -> Self {
        // One key per process, so that a List's items and the documents
        // around it hash alike.
        static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
            std::sync::OnceLock::new();
        ObjectKeys(KEYS.get_or_init(Default::default).clone())
    }
}

impl ObjectKeys {
    fn of(&self, kind: &str, namespace: Option<&str>, name: &str) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = self.0.build_hasher();
        hasher.write(kind.as_bytes());
        hasher.write_u8(0);
        if let Some(namespace) = namespace {
            hasher.write(namespace.as_bytes());
            hasher.write_u8(b'/');
        }
        hasher.write(name.as_bytes());
        hasher.finish()
    }
}

impl std::hash::BuildHasher for ObjectKeys {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// Passes an [`ObjectKeys`] hash through.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

impl Builder {
    /// Records an object; false (and the first problem kept) when it has no
    /// name or its kind and (namespace and) name were seen before.
    fn admit(&mut self, kind: &'static str, metadata: &ObjectMeta, namespaced: bool) -> bool {
        if self.problem.is_some() {
            return false;
        }
        let at = self.position;
        let Some(name) = metadata.name.as_deref().filter(|name| !name.is_empty()) else {
            self.problem = Some(Problem::Nameless { kind, at });
            return false;
        };
        let namespace = namespaced.then(|| metadata.namespace.as_deref().unwrap_or_default());
        let hash = self.seen.hasher().of(kind, namespace, name);
        match self.seen.entry(hash) {
            std::collections::hash_map::Entry::Occupied(entry) => {
                self.problem = Some(Problem::Duplicate {
                    kind,
                    key: match namespace {
                        Some(namespace) => format!("{namespace}/{name}"),
                        None => name.to_owned(),
                    },
                    at,
                    first: *entry.get(),
                });
                false
            }
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(at);
                true
            }
        }
    }

    fn add_node(&mut self, node: Node) {
        if self.admit("Node", &node.metadata, false) {
            self.snapshot.nodes.push(node);
        }
    }

    fn add_node_metric(&mut self, metric: NodeMetric) {
        if self.admit("NodeMetric", &metric.metadata, false) {
            self.snapshot.node_metrics.push(metric);
        }
    }

    fn add_pod(&mut self, pod: &Pod) {
        if self.admit("Pod", &pod.metadata, true) {
            self.snapshot.add_pod(pod);
        }
    }

    fn add_config_map(&mut self, config_map: ConfigMap) {
        if self.admit("ConfigMap", &config_map.metadata, true) {
            self.snapshot.config_maps.push(config_map);
        }
    }

    fn add_device(&mut self, device: Device) {
        if self.admit("Device", &device.metadata, false)
            && let Some(name) = device.metadata.name.clone()
        {
            self.snapshot.devices.insert(name, device);
        }
    }

    fn add_topology(&mut self, metadata: ObjectMeta, zones: Vec<Zone>) {
        if self.admit("NodeResourceTopology", &metadata, false)
            && let Some(name) = metadata.name
        {
            self.snapshot.topology_zones.insert(name.clone(), zones);
            self.snapshot
                .topologies
                .insert(name, metadata.annotations.unwrap_or_default());
        }
    }

    fn add_lean(&mut self, object: LeanObject) {
        let LeanObject {
            kind,
            metadata,
            spec,
            status,
            data,
            zones,
            items,
        } = object;
        let metadata = metadata.map(LeanMeta::into_object_meta).unwrap_or_default();
        let status_present = status.is_some();
        let status = status.unwrap_or_default();
        match kind.as_str() {
            "Node" => self.add_node(Node {
                metadata,
                spec: None,
                status: status_present.then(|| NodeStatus {
                    capacity: status.capacity,
                    allocatable: status.allocatable,
                    ..NodeStatus::default()
                }),
            }),
            "NodeMetric" => self.add_node_metric(NodeMetric {
                metadata,
                spec: NodeMetricSpec::default(),
                status: status_present.then_some(NodeMetricStatus {
                    update_time: status.update_time,
                    node_metric: status.node_metric,
                    pods_metric: status.pods_metric,
                    host_application_metric: status.host_application_metric,
                    prod_reclaimable_metric: status.prod_reclaimable_metric,
                    prod_peak_metric: status.prod_peak_metric,
                }),
            }),
            "Pod" => self.add_pod(&Pod {
                metadata,
                spec: spec.map(LeanPodSpec::into_pod_spec),
                status: status_present.then(|| PodStatus {
                    phase: status.phase,
                    qos_class: status.qos_class,
                    ..PodStatus::default()
                }),
            }),
            "ConfigMap" => self.add_config_map(ConfigMap {
                metadata,
                data,
                ..ConfigMap::default()
            }),
            "NodeResourceTopology" => self.add_topology(metadata, zones.unwrap_or_default()),
            "Device" => self.add_device(Device {
                metadata,
                spec: DeviceSpec {
                    devices: spec.and_then(|spec| spec.devices),
                },
                status: None,
            }),
            kind if kind.ends_with("List") => {
                if let Some(ListItems(items)) = items {
                    self.merge(items);
                }
            }
            _ => {}
        }
    }

    /// The kind and (namespace and) name of the object this builder
    /// admitted under `hash`, found again (only for an error message).
    fn describe(&self, hash: u64) -> (&'static str, String) {
        let keys = self.seen.hasher();
        let cluster_scoped = |kind: &'static str, metadata: &ObjectMeta| {
            let name = metadata.name.as_deref().unwrap_or_default();
            (keys.of(kind, None, name) == hash).then(|| (kind, name.to_owned()))
        };
        let namespaced = |kind: &'static str, namespace: &str, name: &str| {
            (keys.of(kind, Some(namespace), name) == hash)
                .then(|| (kind, format!("{namespace}/{name}")))
        };
        let snapshot = &self.snapshot;
        snapshot
            .nodes
            .iter()
            .find_map(|node| cluster_scoped("Node", &node.metadata))
            .or_else(|| {
                snapshot
                    .node_metrics
                    .iter()
                    .find_map(|metric| cluster_scoped("NodeMetric", &metric.metadata))
            })
            .or_else(|| {
                snapshot.devices.keys().find_map(|name| {
                    (keys.of("Device", None, name) == hash).then(|| ("Device", name.clone()))
                })
            })
            .or_else(|| {
                snapshot.topologies.keys().find_map(|name| {
                    (keys.of("NodeResourceTopology", None, name) == hash)
                        .then(|| ("NodeResourceTopology", name.clone()))
                })
            })
            .or_else(|| {
                snapshot.config_maps.iter().find_map(|cm| {
                    namespaced(
                        "ConfigMap",
                        cm.metadata.namespace.as_deref().unwrap_or_default(),
                        cm.metadata.name.as_deref().unwrap_or_default(),
                    )
                })
            })
            .or_else(|| {
                snapshot
                    .pods
                    .values()
                    .flatten()
                    .map(|pod| pod.key.as_str())
                    .chain(snapshot.unbound_pods.iter().map(String::as_str))
                    .find_map(|key| {
                        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
                        namespaced("Pod", namespace, name)
                    })
            })
            .unwrap_or(("object", String::new()))
    }

    /// Appends a `List`'s objects (read by a builder of their own, whose
    /// positions are items of the current document), keeping their order.
    fn merge(&mut self, items: Builder) {
        if self.problem.is_some() {
            return;
        }
        let document = self.position.document.unwrap_or_default();
        if let Some(problem) = items.problem {
            self.problem = Some(problem.in_document(document));
            return;
        }
        // Of the items that repeat an earlier object, the first is reported.
        // The smaller map is walked and merged into the larger one (a large
        // `List` often follows a few documents).
        let mut items = items;
        for at in items.seen.values_mut() {
            *at = at.in_document(document);
        }
        let mut repeated: Option<(u64, Position, Position)> = None;
        let mut report = |hash: u64, at: Position, first: Position| {
            if repeated.is_none_or(|(_, other, _)| at.item < other.item) {
                repeated = Some((hash, at, first));
            }
        };
        if self.seen.len() < items.seen.len() {
            let earlier = std::mem::replace(&mut self.seen, std::mem::take(&mut items.seen));
            for (hash, first) in earlier {
                if let Some(at) = self.seen.insert(hash, first) {
                    report(hash, at, first);
                }
            }
            // `items.seen` is empty now; describe() below needs only its hasher.
        } else {
            for (hash, at) in &items.seen {
                match self.seen.get(hash) {
                    Some(first) => report(*hash, *at, *first),
                    None => {
                        self.seen.insert(*hash, *at);
                    }
                }
            }
        }
        if let Some((hash, at, first)) = repeated {
            let (kind, key) = items.describe(hash);
            self.problem = Some(Problem::Duplicate {
                kind,
                key,
                at,
                first,
            });
            return;
        }
        let snapshot = &mut self.snapshot;
        let other = items.snapshot;
        snapshot.nodes.extend(other.nodes);
        snapshot.node_metrics.extend(other.node_metrics);
        snapshot.config_maps.extend(other.config_maps);
        snapshot.topologies.extend(other.topologies);
        snapshot.topology_zones.extend(other.topology_zones);
        snapshot.devices.extend(other.devices);
        snapshot.unbound_pods.extend(other.unbound_pods);
        snapshot.pod_count += other.pod_count;
        for (node, pods) in other.pods {
            snapshot.pods.entry(node).or_default().extend(pods);
        }
    }

    /// Moves on to the next (non-empty) document.
    fn next_document(&mut self) {
        self.position = Position {
            document: Some(self.position.document.map_or(0, |d| d + 1)),
            item: None,
        };
    }

    fn finish(self, read_by: SnapshotReader, source_name: &str) -> Result<Snapshot, PreviewError> {
        match self.problem {
            Some(problem) => Err(problem.into_error(source_name)),
            None => Ok(Snapshot {
                read_by,
                ..self.snapshot
            }),
        }
    }
}

/// The 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// serde-saphyr's options for snapshots: the nesting limit, and budgets
/// (alias expansion included) in proportion to the text, as for every YAML
/// input (`apis::yaml`); the size was checked when the file was read.
fn saphyr_options(text: &str) -> serde_saphyr::Options {
    apis::yaml::options(text, &apis::yaml::Limits::objects(usize::MAX, MAX_NESTING))
}

/// serde-saphyr's error with its position first, as the fast reader's.
fn saphyr_message(error: &serde_saphyr::Error) -> String {
    let text = error.to_string();
    let Some(location) = error.location() else {
        return text;
    };
    let (line, column) = (location.line(), location.column());
    let suffix = format!(" at line {line}, column {column}");
    let mut message = text.strip_suffix(&suffix).unwrap_or(&text).to_owned();
    let depth_budget = matches!(
        error.without_snippet(),
        serde_saphyr::Error::Budget {
            breach: serde_saphyr::budget::BudgetBreach::Depth { .. },
            ..
        }
    );
    // The scanner's flow nesting limit says "recursion limit exceeded".
    if depth_budget || message == "recursion limit exceeded" {
        message = format!("nested deeper than {MAX_NESTING} levels");
    }
    format!("line {line} column {column}: {message}")
}

/// Documents handed to a [`Builder`] by serde-saphyr (which collects into
/// any `Default + Extend`).
#[derive(Default)]
struct LeanDocuments(Builder);

impl Extend<Option<EmptyOnNull<LeanObject>>> for LeanDocuments {
    fn extend<I: IntoIterator<Item = Option<EmptyOnNull<LeanObject>>>>(&mut self, documents: I) {
        for EmptyOnNull(document) in documents.into_iter().flatten() {
            self.0.next_document();
            self.0.add_lean(document);
        }
    }
}

/// Whole documents as JSON values, for the slow path's precise errors.
#[derive(Default)]
struct ValueDocuments(Vec<Value>);

impl Extend<Option<Value>> for ValueDocuments {
    fn extend<I: IntoIterator<Item = Option<Value>>>(&mut self, documents: I) {
        self.0.extend(documents.into_iter().flatten());
    }
}

impl Snapshot {
    /// Parses YAML documents, or a stream of JSON objects (e.g. the output of
    /// `kubectl get -o json`); `source_name` labels errors.
    ///
    /// Documents are read straight into lean structs holding only what the
    /// preview reads. Should that fail anywhere, the whole text is read again
    /// through full Kubernetes types, which names the bad document or object.
    /// Nesting deeper than [`MAX_NESTING`], and objects without a name or
    /// with the name of an earlier object of their kind, are refused.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, PreviewError> {
        if text.trim_start().starts_with('{') {
            // serde_json limits nesting only in what it builds, not in what
            // it steps over.
            if let Some(offset) = apis::configuration::json_nesting_beyond(text, MAX_NESTING) {
                let (line, column) = line_column(text, offset);
                return Err(PreviewError::Budget {
                    source_name: source_name.to_owned(),
                    message: format!(
                        "line {line} column {column}: nested deeper than {MAX_NESTING} levels"
                    ),
                });
            }
            return match Self::parse_lean_json(text) {
                Some(builder) => builder.finish(SnapshotReader::LeanJson, source_name),
                None => Self::parse_full_json(text, source_name),
            };
        }
        let mut builder = Builder::default();
        let fast = fast_yaml::for_each_document(text, |object: Option<EmptyOnNull<LeanObject>>| {
            if let Some(EmptyOnNull(object)) = object {
                builder.next_document();
                builder.add_lean(object);
            }
        });
        match fast {
            Ok(()) => return builder.finish(SnapshotReader::FastYaml, source_name),
            Err(refused) if refused.is_limit() => {
                let message = match refused.offset() {
                    Some(offset) => {
                        let (line, column) = line_column(text, offset);
                        format!("line {line} column {column}: {}", refused.message())
                    }
                    None => refused.message().to_owned(),
                };
                return Err(PreviewError::Budget {
                    source_name: source_name.to_owned(),
                    message,
                });
            }
            Err(reason) => tracing::debug!(%reason, "snapshot left to serde-saphyr"),
        }
        match serde_saphyr::from_str_multiple_with_options::<
            Option<EmptyOnNull<LeanObject>>,
            LeanDocuments,
        >(text, saphyr_options(text))
        {
            Ok(LeanDocuments(builder)) => builder.finish(SnapshotReader::LeanYaml, source_name),
            Err(error) => {
                tracing::debug!(error = %error, "lean read failed; reading full objects");
                Self::parse_full_yaml(text, source_name)
            }
        }
    }

    /// The fast JSON path; `None` on any malformed document.
    fn parse_lean_json(text: &str) -> Option<Builder> {
        let mut builder = Builder::default();
        let stream = serde_json::Deserializer::from_str(text).into_iter::<Option<LeanObject>>();
        for object in stream {
            if let Some(object) = object.ok()? {
                builder.next_document();
                builder.add_lean(object);
            }
        }
        Some(builder)
    }

    fn add_pod(&mut self, pod: &Pod) {
        self.pod_count += 1;
        match pod_node_name(pod) {
            Some(node) => self
                .pods
                .entry(node.to_owned())
                .or_default()
                .push(PodSummary::of(pod)),
            None => self.unbound_pods.push(resources::pod_key(pod)),
        }
    }

    /// The slow JSON path through full types, kept for its precise errors.
    fn parse_full_json(text: &str, source_name: &str) -> Result<Self, PreviewError> {
        let mut builder = Builder::default();
        let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        for (index, value) in stream.enumerate() {
            let value = value.map_err(|err| {
                let message = err.to_string();
                let message = match message.strip_prefix("recursion limit exceeded") {
                    Some(at) => format!("nested deeper than {MAX_NESTING} levels{at}"),
                    None => message,
                };
                PreviewError::Document {
                    source_name: source_name.to_owned(),
                    index,
                    message,
                }
            })?;
            if !value.is_null() {
                builder.next_document();
                add_value(&mut builder, value, source_name)?;
            }
        }
        builder.finish(SnapshotReader::Full, source_name)
    }

    /// The slow YAML path through full types, kept for its precise errors.
    fn parse_full_yaml(text: &str, source_name: &str) -> Result<Self, PreviewError> {
        let documents =
            serde_saphyr::from_str_multiple_with_options::<Option<Value>, ValueDocuments>(
                text,
                saphyr_options(text),
            )
            .map_err(|error| {
                let source_name = source_name.to_owned();
                let message = saphyr_message(&error);
                if apis::yaml::is_budget_error(&error) {
                    PreviewError::Budget {
                        source_name,
                        message,
                    }
                } else {
                    PreviewError::Syntax {
                        source_name,
                        message,
                    }
                }
            })?;
        let mut builder = Builder::default();
        for value in documents.0 {
            builder.next_document();
            add_value(&mut builder, value, source_name)?;
        }
        builder.finish(SnapshotReader::Full, source_name)
    }

    /// The ConfigMap called `name`, if the snapshot has it.
    pub fn config_map(&self, name: &str) -> Option<&ConfigMap> {
        self.config_maps
            .iter()
            .find(|cm| cm.metadata.name.as_deref() == Some(name))
    }
}

/// Adds one document (or `List` item) read as a JSON value.
fn add_value(builder: &mut Builder, value: Value, source_name: &str) -> Result<(), PreviewError> {
    if value.is_null() {
        return Ok(());
    }
    let header =
        null_as_empty::deserialize::<Header, _>(&value).map_err(|err| PreviewError::Refused {
            source_name: source_name.to_owned(),
            location: builder.position.to_string(),
            message: err.to_string(),
        })?;
    let name = header.metadata.and_then(|m| m.name).unwrap_or_default();
    let fail = |err: serde_json::Error| PreviewError::Object {
        source_name: source_name.to_owned(),
        kind: header.kind.clone(),
        name: name.clone(),
        message: err.to_string(),
    };
    match header.kind.as_str() {
        "Node" => builder.add_node(null_as_empty::deserialize(value).map_err(fail)?),
        "NodeMetric" => builder.add_node_metric(null_as_empty::deserialize(value).map_err(fail)?),
        "Pod" => {
            let pod: Pod = null_as_empty::deserialize(value).map_err(fail)?;
            builder.add_pod(&pod);
        }
        "ConfigMap" => builder.add_config_map(null_as_empty::deserialize(value).map_err(fail)?),
        "Device" => {
            let mut device: Device = null_as_empty::deserialize(value).map_err(fail)?;
            // The allocations are not read.
            device.status = None;
            builder.add_device(device);
        }
        "NodeResourceTopology" => {
            let metadata = value.get("metadata").cloned().unwrap_or(Value::Null);
            let metadata: Option<ObjectMeta> =
                null_as_empty::deserialize(metadata).map_err(fail)?;
            let zones = value.get("zones").cloned().unwrap_or(Value::Null);
            let zones: Option<Vec<Zone>> = null_as_empty::deserialize(zones).map_err(fail)?;
            builder.add_topology(metadata.unwrap_or_default(), zones.unwrap_or_default());
        }
        kind if kind.ends_with("List") => {
            if let Value::Object(mut map) = value
                && let Some(Value::Array(items)) = map.remove("items")
            {
                let document = builder.position;
                for (item, value) in items.into_iter().enumerate() {
                    builder.position = Position {
                        item: Some(item),
                        ..document
                    };
                    add_value(builder, value, source_name)?;
                }
                builder.position = document;
            }
        }
        // Other kinds (NodeSLOs, Services, ...) are irrelevant here.
        _ => {}
    }
    Ok(())
}

/// Parses and validates a ConfigMap's data.
pub fn config_from(
    config_map: Option<&ConfigMap>,
    source_name: &str,
) -> Result<SloControllerConfig, PreviewError> {
    parse_config(config_map.and_then(|cm| cm.data.as_ref())).map_err(|source| {
        PreviewError::Config {
            source_name: source_name.to_owned(),
            name: config_map
                .and_then(|cm| cm.metadata.name.clone())
                .unwrap_or_default(),
            source,
        }
    })
}

/// One node's line of the report (the JSON contract).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub name: String,
    #[serde(rename = "nodeSLO")]
    pub node_slo: NodeSLOSpec,
    /// The four managed resources; `"0"` when withdrawn.
    pub allocatable: BTreeMap<String, String>,
    pub degraded: bool,
    /// Why the resources are withdrawn or some is zero, or why the node's
    /// inputs were refused; empty otherwise.
    pub reason: String,
    /// The node's inputs cannot be read exactly: the controller would leave
    /// its status as it is, which `allocatable` shows.
    pub refused: bool,
    /// The `node.koordinator.sh/cpu-normalization-ratio` annotation the node
    /// carries after the pass (CPUNormalization plugin); `null` when absent.
    pub cpu_normalization_ratio: Option<String>,
    /// The `node.koordinator.sh/resource-amplification-ratio` annotation
    /// after the pass (ResourceAmplification plugin), per resource; `null`
    /// when absent.
    pub resource_amplification_ratio: Option<BTreeMap<String, f64>>,
    /// CPU and memory allocatable as the node-status webhook
    /// (`NodeMutatingWebhook`) makes them from the raw values and the ratios;
    /// `null` without an amplification ratio.
    pub amplified_allocatable: Option<BTreeMap<String, String>>,
    /// Why a ratio plugin produced nothing (normalization: the annotation is
    /// left as it is; amplification: it is removed); empty otherwise.
    pub ratio_reason: String,
    /// The NUMA-level batch resources the BatchResource plugin computes for
    /// each zone of the node's NodeResourceTopology (zone name → resource →
    /// quantity, batch CPU after CPU normalization); `null` when the zones
    /// are left as they are.
    pub numa_batch: Option<ZoneBatchReport>,
    /// Why `numaBatch` is `null`; empty otherwise.
    pub numa_batch_reason: String,
    /// What the GPUDeviceResource and RDMADeviceResource plugins write from
    /// the node's Device: resource → quantity, `null` for a resource they
    /// remove; resources they leave alone are absent. `null` when no device
    /// plugin ran.
    pub device_resources: Option<DeviceResourceReport>,
    /// The GPU labels the GPUDeviceResource plugin sets on the node.
    pub device_labels: BTreeMap<String, String>,
    /// The device plugins' messages, failures, or why they did not run.
    pub device_reason: String,
}

/// Zone name → resource → quantity text.
pub type ZoneBatchReport = BTreeMap<String, BTreeMap<String, String>>;

/// One field that a config change would change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldChange {
    /// Dotted path, e.g. `nodeSLO.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent`.
    pub path: String,
    /// Value under the snapshot's config (`null` when absent).
    pub current: Value,
    /// Value under the `--against` config (`null` when absent).
    pub against: Value,
}

/// The changes on one node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeDiff {
    pub name: String,
    pub changes: Vec<FieldChange>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PreviewReport {
    pub nodes: Vec<NodeReport>,
    /// Present with `--against`: only the nodes that would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<Vec<NodeDiff>>,
}

/// The ratio fields of a node's report: the annotations after the pass and
/// what the node-status webhook would make of the node's allocatable.
struct RatioReport {
    cpu_normalization_ratio: Option<String>,
    resource_amplification_ratio: Option<BTreeMap<String, f64>>,
    amplified_allocatable: Option<BTreeMap<String, String>>,
    ratio_reason: String,
}

fn ratio_report(node: &Node, plan: &NodePlan) -> RatioReport {
    use apis::extension::{
        ANNOTATION_CPU_NORMALIZATION_RATIO, get_node_resource_amplification_ratios,
    };
    let meta = &plan.meta;
    let mut annotations = node.metadata.annotations.clone().unwrap_or_default();
    for (key, value) in &meta.patch {
        match value {
            Some(value) => annotations.insert((*key).to_owned(), value.clone()),
            None => annotations.remove(*key),
        };
    }
    let mut reasons: Vec<String> = [&meta.cpu_normalization, &meta.resource_amplification]
        .iter()
        .filter_map(|outcome| outcome.error.clone())
        .collect();
    let ratios = match get_node_resource_amplification_ratios(&annotations) {
        Ok(ratios) => ratios,
        Err(err) => {
            reasons.push(err.to_string());
            None
        }
    };
    let amplified = ratios.as_ref().and_then(|_| {
        // The webhook amplifies what the kubelet reports: the recorded raw
        // values when the node has them, else its allocatable as it is.
        let mut preview = node.clone();
        preview.metadata.annotations = Some(annotations.clone());
        if let Some(status) = preview.status.as_mut()
            && let Ok(Some(raw)) = apis::extension::get_node_raw_allocatable(&annotations)
        {
            let allocatable = status.allocatable.get_or_insert_with(BTreeMap::new);
            for (resource, quantity) in raw {
                allocatable.insert(resource, quantity);
            }
        }
        let before = preview.clone();
        match crate::webhook::node_status::admit(
            crate::webhook::review::Operation::Update,
            &mut preview,
            Some(&before),
        ) {
            Ok(()) => {}
            Err(reason) => {
                reasons.push(reason.to_string());
                return None;
            }
        }
        let allocatable = preview.status?.allocatable?;
        Some(
            crate::webhook::node_status::SUPPORTED_RESOURCES
                .iter()
                .filter_map(|resource| {
                    Some((
                        (*resource).to_owned(),
                        allocatable.get(*resource)?.0.clone(),
                    ))
                })
                .collect(),
        )
    });
    RatioReport {
        cpu_normalization_ratio: annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO).cloned(),
        resource_amplification_ratio: ratios
            .map(|ratios| ratios.into_iter().map(|(k, v)| (k, v.0)).collect()),
        amplified_allocatable: amplified,
        ratio_reason: reasons.join("; "),
    }
}

/// The `numaBatch` and `numaBatchReason` fields of a node's report.
fn numa_batch_report(plan: &NodePlan) -> (Option<ZoneBatchReport>, String) {
    match &plan.numa_batch {
        Ok(zones) => (
            Some(
                zones
                    .iter()
                    .map(|(zone, quantities)| {
                        let quantities = quantities
                            .iter()
                            .map(|(resource, quantity)| {
                                ((*resource).to_owned(), quantity.0.clone())
                            })
                            .collect();
                        (zone.clone(), quantities)
                    })
                    .collect(),
            ),
            String::new(),
        ),
        Err(reason) => (None, reason.clone()),
    }
}

/// Resource → quantity text, `None` for a resource removed.
pub type DeviceResourceReport = BTreeMap<String, Option<String>>;

/// The `deviceResources`, `deviceLabels` and `deviceReason` fields.
fn device_report(
    plan: &NodePlan,
) -> (
    Option<DeviceResourceReport>,
    BTreeMap<String, String>,
    String,
) {
    let devices = &plan.devices;
    let resources = (!devices.runs.is_empty()).then(|| {
        devices
            .status()
            .into_iter()
            .map(|(name, quantity)| (name.to_owned(), quantity.map(|q| q.0)))
            .collect()
    });
    let labels = devices
        .labels()
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
    (resources, labels, devices.reason())
}

fn node_report(node: &Node, name: &str, plan: &NodePlan) -> NodeReport {
    let ratios = ratio_report(node, plan);
    let (device_resources, device_labels, device_reason) = device_report(plan);
    let (numa_batch, numa_batch_reason) = numa_batch_report(plan);
    let resources = match &plan.resources {
        Ok(resources) => resources,
        // Refused: the controller leaves the status as it is, so the report
        // shows what the node already carries.
        Err(error) => {
            let current = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
            return NodeReport {
                name: name.to_owned(),
                node_slo: plan.node_slo.clone(),
                allocatable: MANAGED_RESOURCES
                    .iter()
                    .map(|resource| {
                        let text = current
                            .and_then(|list| list.get(*resource))
                            .map_or_else(|| "0".to_owned(), |q| q.0.clone());
                        ((*resource).to_owned(), text)
                    })
                    .collect(),
                degraded: false,
                reason: format!("refused: {error}; the node's status is left as it is"),
                refused: true,
                cpu_normalization_ratio: ratios.cpu_normalization_ratio,
                resource_amplification_ratio: ratios.resource_amplification_ratio,
                amplified_allocatable: ratios.amplified_allocatable,
                ratio_reason: ratios.ratio_reason,
                numa_batch,
                numa_batch_reason,
                device_resources,
                device_labels,
                device_reason,
            };
        }
    };
    let allocatable = MANAGED_RESOURCES
        .iter()
        .map(|resource| {
            let text = plan
                .desired_status
                .get(resource)
                .and_then(|q| q.as_ref())
                .map_or_else(|| "0".to_owned(), |q| q.0.clone());
            ((*resource).to_owned(), text)
        })
        .collect::<BTreeMap<_, _>>();
    let any_zero = allocatable.values().any(|v| v == "0");
    let reason = if resources.reset || any_zero {
        resources.reason.clone()
    } else {
        String::new()
    };
    NodeReport {
        name: name.to_owned(),
        node_slo: plan.node_slo.clone(),
        allocatable,
        degraded: resources.degraded,
        reason,
        refused: false,
        cpu_normalization_ratio: ratios.cpu_normalization_ratio,
        resource_amplification_ratio: ratios.resource_amplification_ratio,
        amplified_allocatable: ratios.amplified_allocatable,
        ratio_reason: ratios.ratio_reason,
        numa_batch,
        numa_batch_reason,
        device_resources,
        device_labels,
        device_reason,
    }
}

/// Runs the controllers' cores over the snapshot, handing each node's
/// report (and, with `against`, its changes) to `sink` in node-name order.
pub fn preview_each(
    snapshot: &Snapshot,
    config: &SloControllerConfig,
    against: Option<&SloControllerConfig>,
    now: SystemTime,
    mut sink: impl FnMut(NodeReport, Option<NodeDiff>),
) {
    let metrics: HashMap<&str, &NodeMetric> = snapshot
        .node_metrics
        .iter()
        .filter_map(|m| Some((m.metadata.name.as_deref()?, m)))
        .collect();
    let mut nodes: Vec<&Node> = snapshot.nodes.iter().collect();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let node_pods = snapshot
            .pods
            .get(name)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let metric = metrics.get(name).copied();
        let extras = NodeExtras {
            topology_annotations: snapshot.topologies.get(name),
            topology_zones: snapshot.topology_zones.get(name).map(Vec::as_slice),
            device: snapshot.devices.get(name),
            ..NodeExtras::default()
        };
        let report = node_report(
            node,
            name,
            &plan_node_with(config, node, metric, node_pods, None, now, extras),
        );
        let diff = against.and_then(|against| {
            let new_plan = plan_node_with(against, node, metric, node_pods, None, now, extras);
            let changes = diff_reports(&report, &node_report(node, name, &new_plan));
            (!changes.is_empty()).then(|| NodeDiff {
                name: name.to_owned(),
                changes,
            })
        });
        sink(report, diff);
    }
}

/// [`preview_each`] collected into one report.
pub fn preview(
    snapshot: &Snapshot,
    config: &SloControllerConfig,
    against: Option<&SloControllerConfig>,
    now: SystemTime,
) -> PreviewReport {
    let mut report = PreviewReport {
        nodes: Vec::with_capacity(snapshot.nodes.len()),
        diff: against.map(|_| Vec::new()),
    };
    preview_each(snapshot, config, against, now, |node, diff| {
        report.nodes.push(node);
        if let (Some(diffs), Some(diff)) = (report.diff.as_mut(), diff) {
            diffs.push(diff);
        }
    });
    report
}

fn report_fields(report: &NodeReport) -> BTreeMap<String, Value> {
    let mut fields = BTreeMap::new();
    let node_slo = serde_json::to_value(&report.node_slo).unwrap_or(Value::Null);
    flatten("nodeSLO", &node_slo, &mut fields);
    for (resource, value) in &report.allocatable {
        fields.insert(
            format!("allocatable.{resource}"),
            Value::String(value.clone()),
        );
    }
    fields.insert("degraded".into(), Value::Bool(report.degraded));
    fields.insert("refused".into(), Value::Bool(report.refused));
    fields.insert(
        "cpuNormalizationRatio".into(),
        report
            .cpu_normalization_ratio
            .clone()
            .map_or(Value::Null, Value::String),
    );
    for (prefix, value) in [
        (
            "resourceAmplificationRatio",
            serde_json::to_value(&report.resource_amplification_ratio),
        ),
        (
            "amplifiedAllocatable",
            serde_json::to_value(&report.amplified_allocatable),
        ),
        ("numaBatch", serde_json::to_value(&report.numa_batch)),
        (
            "deviceResources",
            serde_json::to_value(&report.device_resources),
        ),
        ("deviceLabels", serde_json::to_value(&report.device_labels)),
    ] {
        flatten(prefix, &value.unwrap_or(Value::Null), &mut fields);
    }
    fields
}

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                flatten(&format!("{prefix}.{key}"), child, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

/// Leaf-by-leaf differences (lists compare as a whole).
pub fn diff_reports(current: &NodeReport, against: &NodeReport) -> Vec<FieldChange> {
    let before = report_fields(current);
    let after = report_fields(against);
    let mut paths: Vec<&String> = before.keys().chain(after.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter_map(|path| {
            let old = before.get(path).cloned().unwrap_or(Value::Null);
            let new = after.get(path).cloned().unwrap_or(Value::Null);
            (old != new).then(|| FieldChange {
                path: path.clone(),
                current: old,
                against: new,
            })
        })
        .collect()
}

const TEXT_HEADER: &str = "NODE                              BATCH-CPU   BATCH-MEMORY    MID-CPU     MID-MEMORY DEGRADED CPU-NORM AMPLIFIED-CPU AMPLIFIED-MEMORY  REASON";

fn text_line(node: &NodeReport) -> String {
    let get = |name: &str| node.allocatable.get(name).map_or("0", String::as_str);
    let amplified = |name: &str| {
        node.amplified_allocatable
            .as_ref()
            .and_then(|list| list.get(name))
            .map_or("-", String::as_str)
    };
    let reason = match (node.reason.is_empty(), node.ratio_reason.is_empty()) {
        (_, true) => node.reason.clone(),
        (true, false) => node.ratio_reason.clone(),
        (false, false) => format!("{}; {}", node.reason, node.ratio_reason),
    };
    let mut line = format!(
        "{:<32} {:>10} {:>14} {:>10} {:>14} {:>8} {:>8} {:>13} {:>16}  {}",
        node.name,
        get(apis::extension::BATCH_CPU),
        get(apis::extension::BATCH_MEMORY),
        get(apis::extension::MID_CPU),
        get(apis::extension::MID_MEMORY),
        node.degraded,
        node.cpu_normalization_ratio.as_deref().unwrap_or("-"),
        amplified(apis::extension::RESOURCE_CPU),
        amplified(apis::extension::RESOURCE_MEMORY),
        reason
    );
    // The device resources the plugins write, on one indented line.
    let written: Vec<String> = node
        .device_resources
        .iter()
        .flatten()
        .filter_map(|(name, quantity)| Some(format!("{name}={}", quantity.as_ref()?)))
        .collect();
    if !written.is_empty() {
        line.push_str(&format!("\n  devices {}", written.join(" ")));
    }
    // The NUMA-level batch resources, one indented line per zone.
    for (zone, quantities) in node.numa_batch.iter().flatten() {
        let get = |name: &str| quantities.get(name).map_or("0", String::as_str);
        line.push_str(&format!(
            "\n  zone {:<25} {:>10} {:>14}",
            zone,
            get(apis::extension::BATCH_CPU),
            get(apis::extension::BATCH_MEMORY),
        ));
    }
    line
}

fn text_diff(diff: &[NodeDiff], node_count: usize) -> String {
    use std::fmt::Write;
    let mut out = format!("\n{} of {node_count} node(s) would change:\n", diff.len());
    for node in diff {
        let _ = writeln!(out, "{}:", node.name);
        for change in &node.changes {
            let _ = writeln!(
                out,
                "  {}: {} -> {}",
                change.path, change.current, change.against
            );
        }
    }
    out
}

/// The human-readable form: one line per node, then the diff.
pub fn render_text(report: &PreviewReport) -> String {
    let mut out = format!("{TEXT_HEADER}\n");
    for node in &report.nodes {
        out.push_str(&text_line(node));
        out.push('\n');
    }
    if let Some(diff) = &report.diff {
        out.push_str(&text_diff(diff, report.nodes.len()));
    }
    out
}

/// Output format of `preview`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Flags of `koord-manager preview`.
#[derive(Clone, Debug, clap::Args)]
pub struct PreviewArgs {
    /// Multi-document YAML (or JSON) with Nodes, NodeMetrics, Pods and the
    /// slo-controller-config ConfigMap.
    #[arg(long, value_name = "FILE")]
    pub snapshot: std::path::PathBuf,

    /// A ConfigMap YAML to compare against: adds the per-node differences.
    #[arg(long, value_name = "FILE")]
    pub against: Option<std::path::PathBuf>,

    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,

    /// Name of the ConfigMap to take from the snapshot (upstream `--slo-config-name`).
    #[arg(
        long = "slo-config-name",
        default_value = apis::configuration::DEFAULT_SLO_CONTROLLER_CONFIG_NAME
    )]
    pub config_name: String,

    /// The time staleness of NodeMetrics is judged at (RFC 3339); default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub now: Option<SystemTime>,

    /// Print the time spent reading the snapshot and computing the report to stderr.
    #[arg(long)]
    pub timings: bool,

    /// Refuse a snapshot (or `--against` file) larger than this many bytes.
    #[arg(
        long = "max-snapshot-bytes",
        value_name = "BYTES",
        default_value_t = DEFAULT_MAX_SNAPSHOT_BYTES
    )]
    pub max_snapshot_bytes: u64,
}

fn parse_time(text: &str) -> Result<SystemTime, String> {
    text.parse::<k8s_openapi::jiff::Timestamp>()
        .map(SystemTime::from)
        .map_err(|err| format!("invalid RFC 3339 time {text:?}: {err}"))
}

/// Failure of the `preview` command as a whole.
#[derive(Debug, thiserror::Error)]
pub enum PreviewCommandError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is larger than {limit} bytes (--max-snapshot-bytes)")]
    TooLarge { path: String, limit: u64 },
    #[error(transparent)]
    Preview(#[from] PreviewError),
    #[error("cannot encode the report: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("cannot write the report: {0}")]
    Write(#[from] std::io::Error),
}

/// Reads a file of at most `limit` bytes: a larger one is refused before
/// (or, when it grows meanwhile, while) it is read.
fn read(path: &std::path::Path, limit: u64) -> Result<String, PreviewCommandError> {
    use std::io::Read;
    let fail = |source| PreviewCommandError::Read {
        path: path.display().to_string(),
        source,
    };
    let too_large = || PreviewCommandError::TooLarge {
        path: path.display().to_string(),
        limit,
    };
    let file = std::fs::File::open(path).map_err(fail)?;
    if file.metadata().map_err(fail)?.len() > limit {
        return Err(too_large());
    }
    let mut text = String::new();
    file.take(limit.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(fail)?;
    if text.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(text)
}

/// Runs `preview`, writing the report to `out` node by node.
pub fn run_preview(args: &PreviewArgs, out: &mut dyn Write) -> Result<(), PreviewCommandError> {
    let started = std::time::Instant::now();
    let snapshot_name = args.snapshot.display().to_string();
    let snapshot = Snapshot::parse(
        &read(&args.snapshot, args.max_snapshot_bytes)?,
        &snapshot_name,
    )?;
    let parsed = started.elapsed();
    let config = config_from(snapshot.config_map(&args.config_name), &snapshot_name)?;
    let against = match &args.against {
        None => None,
        Some(path) => {
            let name = path.display().to_string();
            let file = Snapshot::parse(&read(path, args.max_snapshot_bytes)?, &name)?;
            let config_map = file
                .config_map(&args.config_name)
                .or(file.config_maps.first())
                .ok_or(PreviewError::NoConfigMap {
                    source_name: name.clone(),
                })?;
            Some(config_from(Some(config_map), &name)?)
        }
    };
    let now = args.now.unwrap_or_else(SystemTime::now);
    let json = args.output == OutputFormat::Json;
    out.write_all(if json {
        b"{\"nodes\": [\n"
    } else {
        TEXT_HEADER.as_bytes()
    })?;
    if !json {
        out.write_all(b"\n")?;
    }
    let mut diffs = Vec::new();
    let mut count = 0usize;
    let mut failure: Option<PreviewCommandError> = None;
    preview_each(&snapshot, &config, against.as_ref(), now, |node, diff| {
        if failure.is_some() {
            return;
        }
        let written = if json {
            let separator: &[u8] = if count == 0 { b"" } else { b",\n" };
            out.write_all(separator)
                .map_err(PreviewCommandError::from)
                .and_then(|()| serde_json::to_writer(&mut *out, &node).map_err(Into::into))
        } else {
            writeln!(out, "{}", text_line(&node)).map_err(Into::into)
        };
        if let Err(err) = written {
            failure = Some(err);
        }
        count += 1;
        diffs.extend(diff);
    });
    if let Some(err) = failure {
        return Err(err);
    }
    if json {
        out.write_all(b"\n]")?;
        if against.is_some() {
            out.write_all(b",\n\"diff\": ")?;
            serde_json::to_writer_pretty(&mut *out, &diffs)?;
        }
        out.write_all(b"}\n")?;
    } else if against.is_some() {
        out.write_all(text_diff(&diffs, count).as_bytes())?;
    }
    out.flush()?;
    if args.timings {
        eprintln!(
            "preview: {} nodes, {} node metrics, {} pods; read+parse {:.3}s ({:?} reader), pass+output {:.3}s",
            snapshot.nodes.len(),
            snapshot.node_metrics.len(),
            snapshot.pod_count,
            parsed.as_secs_f64(),
            snapshot.read_by,
            (started.elapsed() - parsed).as_secs_f64()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNAPSHOT: &str = include_str!("../tests/data/preview-snapshot.yaml");

    fn at(text: &str) -> SystemTime {
        parse_time(text).unwrap()
    }

    #[test]
    fn json_streams_and_yaml_give_the_same_report() {
        let yaml = Snapshot::parse(SNAPSHOT, "yaml").unwrap();
        // The same objects as a stream of JSON objects.
        let json_text = as_json_stream(SNAPSHOT);
        let json = Snapshot::parse(&json_text, "json").unwrap();
        assert_eq!(json.pod_count, 2);
        let now = at("2026-01-01T00:10:00Z");
        let config = config_from(yaml.config_map("slo-controller-config"), "yaml").unwrap();
        assert_eq!(
            preview(&yaml, &config, None, now),
            preview(&json, &config, None, now)
        );
    }

    const RATIO_SNAPSHOT: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: slo-controller-config, namespace: koordinator-system}
data:
  colocation-config: '{"enable": true}'
  cpu-normalization-config: '{"enable": true, "ratioModel": {"Xeon": {"hyperThreadEnabledRatio": 1.2}}}'
  resource-amplification-config: '{"enable": true, "resourceAmplificationRatio": {"cpu": 1.5, "memory": 2}}'
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  capacity: {cpu: "4", memory: 8Gi}
  allocatable: {cpu: "4", memory: 8Gi}
---
apiVersion: v1
kind: Node
metadata:
  name: n2
  annotations:
    node.koordinator.sh/raw-allocatable: '{"cpu":"2","memory":"4Gi"}'
status:
  capacity: {cpu: "2", memory: 4Gi}
  allocatable: {cpu: "6", memory: 16Gi}
---
apiVersion: topology.node.k8s.io/v1alpha1
kind: NodeResourceTopology
metadata:
  name: n1
  annotations:
    node.koordinator.sh/cpu-basic-info: '{"cpuModel": "Xeon", "hyperThreadEnabled": true}'
zones: []
topologyPolicies: []
"#;

    #[test]
    fn ratios_and_amplified_allocatable_are_reported_per_node() {
        for text in [RATIO_SNAPSHOT.to_owned(), as_json_stream(RATIO_SNAPSHOT)] {
            let snapshot = Snapshot::parse(&text, "ratios").unwrap();
            assert_eq!(snapshot.topologies.len(), 1);
            let config =
                config_from(snapshot.config_map("slo-controller-config"), "ratios").unwrap();
            let report = preview(&snapshot, &config, None, at("2026-01-01T00:10:00Z"));
            let n1 = &report.nodes[0];
            assert_eq!(n1.cpu_normalization_ratio.as_deref(), Some("1.20"));
            assert_eq!(
                n1.resource_amplification_ratio,
                Some(BTreeMap::from([
                    ("cpu".to_owned(), 1.8),
                    ("memory".to_owned(), 2.0)
                ]))
            );
            assert_eq!(
                n1.amplified_allocatable,
                Some(BTreeMap::from([
                    ("cpu".to_owned(), "7200m".to_owned()),
                    ("memory".to_owned(), "16Gi".to_owned())
                ]))
            );
            // n2 has no topology: normalization fails and keeps nothing; the
            // raw values it recorded are amplified, not its allocatable.
            let n2 = &report.nodes[1];
            assert_eq!(n2.cpu_normalization_ratio, None);
            assert!(
                n2.ratio_reason
                    .contains("NodeResourceTopology n2 not found"),
                "{}",
                n2.ratio_reason
            );
            assert_eq!(
                n2.amplified_allocatable,
                Some(BTreeMap::from([
                    ("cpu".to_owned(), "3".to_owned()),
                    ("memory".to_owned(), "8Gi".to_owned())
                ]))
            );
            let text = render_text(&report);
            assert!(
                text.contains("CPU-NORM") && text.contains("7200m"),
                "{text}"
            );
        }
        // A config without amplification: the diff names the ratio fields.
        let snapshot = Snapshot::parse(RATIO_SNAPSHOT, "ratios").unwrap();
        let config = config_from(snapshot.config_map("slo-controller-config"), "ratios").unwrap();
        let mut data = snapshot
            .config_map("slo-controller-config")
            .unwrap()
            .data
            .clone()
            .unwrap();
        data.remove("resource-amplification-config");
        let against = parse_config(Some(&data)).unwrap();
        let report = preview(
            &snapshot,
            &config,
            Some(&against),
            at("2026-01-01T00:10:00Z"),
        );
        let diff = report.diff.unwrap();
        let paths: Vec<&str> = diff[0].changes.iter().map(|c| c.path.as_str()).collect();
        assert!(
            paths.contains(&"resourceAmplificationRatio.memory"),
            "{paths:?}"
        );
        assert!(paths.contains(&"amplifiedAllocatable.memory"), "{paths:?}");
    }

    const NUMA_SNAPSHOT: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: slo-controller-config, namespace: koordinator-system}
data:
  colocation-config: '{"enable": true}'
  cpu-normalization-config: '{"enable": true, "ratioModel": {"Xeon": {"hyperThreadEnabledRatio": 1.2}}}'
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  capacity: {cpu: "100", memory: 120G}
  allocatable: {cpu: "100", memory: 120G}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status:
  capacity: {cpu: "4", memory: 8Gi}
  allocatable: {cpu: "4", memory: 8Gi}
---
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: n1}
status:
  updateTime: "2026-01-01T00:05:00Z"
  nodeMetric:
    nodeUsage: {resources: {cpu: "20", memory: 20G}}
    systemUsage: {resources: {cpu: "7", memory: 12G}}
  podsMetric:
  - {namespace: d, name: web, podUsage: {resources: {cpu: "5", memory: 5G}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: d
  labels: {koordinator.sh/qosClass: LS}
  annotations:
    scheduling.koordinator.sh/resource-status: '{"numaNodeResources": [{"node": 0}]}'
spec:
  nodeName: n1
  containers:
  - name: c
    resources: {requests: {cpu: "10", memory: 10G}}
status: {phase: Running}
---
apiVersion: topology.node.k8s.io/v1alpha1
kind: NodeResourceTopology
metadata:
  name: n1
  annotations:
    node.koordinator.sh/cpu-basic-info: '{"cpuModel": "Xeon", "hyperThreadEnabled": true}'
topologyPolicies: ["None"]
zones:
- name: node-0
  type: Node
  resources:
  - {name: cpu, capacity: "50", allocatable: "50", available: "50"}
  - {name: memory, capacity: 62G, allocatable: 62G, available: 62G}
- name: node-1
  type: Node
  resources:
  - {name: cpu, capacity: "50", allocatable: "50", available: "50"}
  - {name: memory, capacity: 58G, allocatable: 58G, available: 58G}
"#;

    #[test]
    fn numa_level_batch_is_reported_per_zone() {
        let now = at("2026-01-01T00:10:00Z");
        let mut reports = Vec::new();
        for text in [NUMA_SNAPSHOT.to_owned(), as_json_stream(NUMA_SNAPSHOT)] {
            for snapshot in [
                Snapshot::parse(&text, "numa").unwrap(),
                if text.starts_with('{') {
                    Snapshot::parse_full_json(&text, "numa").unwrap()
                } else {
                    Snapshot::parse_full_yaml(&text, "numa").unwrap()
                },
            ] {
                assert_eq!(snapshot.topology_zones["n1"].len(), 2);
                let config =
                    config_from(snapshot.config_map("slo-controller-config"), "numa").unwrap();
                reports.push(preview(&snapshot, &config, None, now));
            }
        }
        assert!(reports.windows(2).all(|pair| pair[0] == pair[1]));
        let report = &reports[0];
        let n1 = &report.nodes[0];
        // node-0: 50 - 20 margin (default cpuReclaimThresholdPercent 60) -
        // 3.5 system - 5 (the pod bound to it), × the normalization ratio
        // 1.2; node-1: 50 - 20 - 3.5.
        // Memory: 62G - 21.7G - 6G - 5G and 58G - 20.3G - 6G.
        let zones = n1.numa_batch.as_ref().unwrap_or_else(|| panic!("{n1:?}"));
        let get = |zone: &str, resource: &str| zones[zone][resource].as_str();
        assert_eq!(get("node-0", "kubernetes.io/batch-cpu"), "25800");
        assert_eq!(get("node-1", "kubernetes.io/batch-cpu"), "31800");
        assert_eq!(get("node-0", "kubernetes.io/batch-memory"), "29300000000");
        assert_eq!(get("node-1", "kubernetes.io/batch-memory"), "31700000000");
        assert_eq!(n1.numa_batch_reason, "");
        let n2 = &report.nodes[1];
        assert_eq!(n2.numa_batch, None);
        assert!(
            n2.numa_batch_reason.contains("withdrawn"),
            "{}",
            n2.numa_batch_reason
        );

        let json = serde_json::to_value(n1).unwrap();
        assert_eq!(
            json["numaBatch"]["node-1"]["kubernetes.io/batch-cpu"],
            "31800"
        );
        let text = render_text(report);
        let zone_line = text
            .lines()
            .find(|line| line.trim_start().starts_with("zone node-0"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            zone_line.contains("25800") && zone_line.contains("29300000000"),
            "{zone_line}"
        );

        // Normalization off in the new config: the zones' batch CPU changes.
        let snapshot = Snapshot::parse(NUMA_SNAPSHOT, "numa").unwrap();
        let config = config_from(snapshot.config_map("slo-controller-config"), "numa").unwrap();
        let mut data = snapshot.config_maps[0].data.clone().unwrap();
        data.remove("cpu-normalization-config");
        let against = parse_config(Some(&data)).unwrap();
        let diff = preview(&snapshot, &config, Some(&against), now)
            .diff
            .unwrap();
        let change = diff[0]
            .changes
            .iter()
            .find(|c| c.path == "numaBatch.node-0.kubernetes.io/batch-cpu")
            .unwrap_or_else(|| panic!("{diff:?}"));
        assert_eq!(
            (change.current.as_str(), change.against.as_str()),
            (Some("25800"), Some("21500"))
        );
    }

    const DEVICE_SNAPSHOT: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: slo-controller-config, namespace: koordinator-system}
data:
  colocation-config: '{"enable": true}'
---
apiVersion: v1
kind: Node
metadata: {name: gpu-node}
status:
  capacity: {cpu: "8", memory: 32Gi}
  allocatable: {cpu: "8", memory: 32Gi}
---
apiVersion: v1
kind: Node
metadata: {name: plain-node}
status:
  capacity: {cpu: "8", memory: 32Gi}
  allocatable: {cpu: "8", memory: 32Gi, koordinator.sh/gpu-core: "100"}
---
apiVersion: v1
kind: List
items:
- apiVersion: scheduling.koordinator.sh/v1alpha1
  kind: Device
  metadata:
    name: gpu-node
    labels: {node.koordinator.sh/gpu-model: A100}
  spec:
    devices:
    - type: gpu
      id: GPU-0
      minor: 0
      health: true
      resources: {koordinator.sh/gpu-core: "100", koordinator.sh/gpu-memory: 40Gi, koordinator.sh/gpu-memory-ratio: "100"}
    - type: gpu
      id: GPU-1
      minor: 1
      health: false
      resources: {koordinator.sh/gpu-core: "100", koordinator.sh/gpu-memory: 40Gi, koordinator.sh/gpu-memory-ratio: "100"}
  status:
    allocations: []
"#;

    #[test]
    fn device_resources_are_reported_per_node() {
        let now = at("2026-01-01T00:10:00Z");
        let mut reports = Vec::new();
        for text in [DEVICE_SNAPSHOT.to_owned(), as_json_stream(DEVICE_SNAPSHOT)] {
            for snapshot in [
                Snapshot::parse(&text, "devices").unwrap(),
                if text.starts_with('{') {
                    Snapshot::parse_full_json(&text, "devices").unwrap()
                } else {
                    Snapshot::parse_full_yaml(&text, "devices").unwrap()
                },
            ] {
                assert_eq!(snapshot.devices.len(), 1, "{:?}", snapshot.read_by);
                let config =
                    config_from(snapshot.config_map("slo-controller-config"), "devices").unwrap();
                reports.push(preview(&snapshot, &config, None, now));
            }
        }
        assert!(reports.windows(2).all(|pair| pair[0] == pair[1]));
        let report = &reports[0];
        let gpu = &report.nodes[0];
        let resources = gpu
            .device_resources
            .as_ref()
            .unwrap_or_else(|| panic!("{gpu:?}"));
        let get = |name: &str| resources[name].as_deref();
        // One healthy GPU of two.
        assert_eq!(get("koordinator.sh/gpu-core"), Some("100"));
        assert_eq!(get("koordinator.sh/gpu-memory"), Some("40Gi"));
        assert_eq!(get("koordinator.sh/gpu-memory-ratio"), Some("100"));
        assert_eq!(get("koordinator.sh/gpu"), Some("100"));
        assert_eq!(get("koordinator.sh/rdma"), None, "no RDMA device: removed");
        assert_eq!(
            gpu.device_labels,
            BTreeMap::from([(
                "node.koordinator.sh/gpu-model".to_owned(),
                "A100".to_owned()
            )])
        );
        // No Device: every GPU resource is removed.
        let plain = &report.nodes[1];
        let removed = plain.device_resources.as_ref().unwrap();
        assert_eq!(removed.len(), 9, "{removed:?}");
        assert!(removed.values().all(Option::is_none));
        assert!(
            plain.device_reason.contains("reset node gpu resources"),
            "{}",
            plain.device_reason
        );
        let json = serde_json::to_value(gpu).unwrap();
        assert_eq!(json["deviceResources"]["koordinator.sh/gpu-core"], "100");
        assert_eq!(json["deviceResources"]["koordinator.sh/rdma"], Value::Null);
        let text = render_text(report);
        assert!(
            text.contains("  devices koordinator.sh/gpu=100 koordinator.sh/gpu-core=100"),
            "{text}"
        );

        // Colocation off in the new config: the device plugins do not run.
        let snapshot = Snapshot::parse(DEVICE_SNAPSHOT, "devices").unwrap();
        let config = config_from(snapshot.config_map("slo-controller-config"), "devices").unwrap();
        let against = parse_config(Some(&BTreeMap::from([(
            "colocation-config".to_owned(),
            r#"{"enable": false}"#.to_owned(),
        )])))
        .unwrap();
        let off = preview(&snapshot, &against, None, now);
        assert_eq!(off.nodes[0].device_resources, None);
        assert!(
            off.nodes[0]
                .device_reason
                .contains("colocation is disabled")
        );
        let diff = preview(&snapshot, &config, Some(&against), now)
            .diff
            .unwrap();
        assert!(
            diff[0]
                .changes
                .iter()
                .any(|c| c.path == "deviceResources.koordinator.sh/gpu-core"),
            "{diff:?}"
        );

        // A second Device of the same name is refused.
        let twice = format!(
            "{DEVICE_SNAPSHOT}---\napiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Device\nmetadata: {{name: gpu-node}}\n"
        );
        let err = Snapshot::parse(&twice, "devices").unwrap_err().to_string();
        assert!(
            err.contains("Device \"gpu-node\" appears a second time"),
            "{err}"
        );
    }

    fn as_json_stream(yaml: &str) -> String {
        let limits = apis::yaml::Limits::objects(usize::MAX, MAX_NESTING);
        apis::yaml::from_str_each::<Value>(yaml, &limits)
            .unwrap()
            .filter_map(|(_, doc)| doc.unwrap())
            .map(|doc| format!("{doc}\n"))
            .collect()
    }

    #[test]
    fn lean_and_full_reads_give_the_same_report() {
        let now = at("2026-01-01T00:10:00Z");
        for (text, json) in [
            (SNAPSHOT.to_owned(), false),
            (as_json_stream(SNAPSHOT), true),
        ] {
            let lean = Snapshot::parse(&text, "lean").unwrap();
            assert_ne!(lean.read_by, SnapshotReader::Full);
            let full = if json {
                Snapshot::parse_full_json(&text, "full").unwrap()
            } else {
                Snapshot::parse_full_yaml(&text, "full").unwrap()
            };
            assert_eq!(lean.nodes.len(), 3);
            assert_eq!(lean.pod_count, full.pod_count);
            assert_eq!(lean.pods, full.pods);
            let config = config_from(full.config_map("slo-controller-config"), "full").unwrap();
            let lean_config =
                config_from(lean.config_map("slo-controller-config"), "lean").unwrap();
            assert_eq!(lean_config, config);
            assert_eq!(
                preview(&lean, &config, None, now),
                preview(&full, &config, None, now)
            );
        }
    }

    #[test]
    fn malformed_documents_fall_back_to_the_full_read() {
        // A non-Pod kind whose spec clashes with the lean Pod fields is still
        // accepted (and ignored) through the full read.
        let text = "kind: Widget\nspec: {priority: high}\n---\nkind: Pod\nmetadata: {name: p, namespace: d}\nspec: {nodeName: n1}\n";
        let snapshot = Snapshot::parse(text, "snap.yaml").unwrap();
        assert_eq!(snapshot.read_by, SnapshotReader::Full);
        assert_eq!(snapshot.pod_count, 1);
        assert_eq!(snapshot.pods["n1"][0].key, "d/p");
    }

    /// A small cluster in the shape the benchmark generates: the config,
    /// then per node its Node, Pods and (mostly) a NodeMetric.
    fn generated_cluster(nodes: usize) -> Vec<Value> {
        use serde_json::json;
        let mut objects = vec![json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
            "data": {
                "colocation-config": "{\"enable\": true, \"midUnallocatedPercent\": 10}",
                "resource-threshold-config": "{\"clusterStrategy\": {\"enable\": true}}\n",
            },
        })];
        for n in 0..nodes {
            let name = format!("node-{n:03}");
            objects.push(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"pool": if n % 2 == 0 { "online" } else { "offline" }},
                             "annotations": {"note": "a long annotation value that wraps over several lines because it is longer than eighty characters"}},
                "spec": {"taints": []},
                "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                           "allocatable": {"cpu": "62", "memory": "250Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null}]},
            }));
            let mut pod_metrics = Vec::new();
            for p in 0..4 {
                let batch = p % 3 == 2;
                let pod = format!("pod-{n:03}-{p}");
                pod_metrics.push(json!({
                    "namespace": "default", "name": pod,
                    "priority": if batch { "koord-batch" } else { "koord-prod" },
                    "podUsage": {"resources": {"cpu": format!("{}m", 500 + p * 100), "memory": format!("{}Gi", 1 + p)}},
                }));
                let requests = if batch {
                    json!({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"})
                } else {
                    json!({"cpu": "2", "memory": "4Gi"})
                };
                objects.push(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"namespace": "default", "name": pod,
                                 "labels": {"koordinator.sh/qosClass": if batch { "BE" } else { "LS" }}},
                    "spec": {"nodeName": name, "priority": if batch { 5500 } else { 9500 },
                             "containers": [{"name": "main", "image": "registry:5000/app:1",
                                             "args": ["--port=8080", "-v", "0b1"],
                                             "resources": {"requests": requests}}]},
                    "status": {"phase": "Running", "qosClass": "Burstable"},
                }));
            }
            if n % 7 == 3 {
                continue;
            }
            let updated = if n % 5 == 1 {
                "2025-12-31T22:00:00Z"
            } else {
                "2026-01-01T00:09:30Z"
            };
            objects.push(json!({
                "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": name},
                "status": {"updateTime": updated,
                           "nodeMetric": {"nodeUsage": {"resources": {"cpu": "20", "memory": "80Gi"}},
                                          "systemUsage": {"resources": {"cpu": "2", "memory": "8Gi"}}},
                           "podsMetric": pod_metrics,
                           "prodReclaimableMetric": {"resource": {"resources": {"cpu": "8", "memory": "32Gi"}}}},
            }));
        }
        objects
    }

    fn report_json(snapshot: &Snapshot) -> String {
        let config = config_from(snapshot.config_map("slo-controller-config"), "snap").unwrap();
        let report = preview(snapshot, &config, None, at("2026-01-01T00:10:00Z"));
        serde_json::to_string(&report).unwrap()
    }

    #[test]
    fn generated_yaml_and_json_snapshots_give_identical_output() {
        let objects = generated_cluster(12);
        let json_text: String = objects.iter().map(|o| format!("{o}\n")).collect();
        let json = Snapshot::parse(&json_text, "snap.json").unwrap();
        assert_eq!(json.read_by, SnapshotReader::LeanJson);
        assert_eq!(json.nodes.len(), 12);
        let expected = report_json(&json);
        // One document per object, and one `List` as `kubectl get -o yaml` prints.
        let documents: String = objects
            .iter()
            .map(|o| format!("---\n{}", apis::yaml::to_string(o).unwrap()))
            .collect();
        let list = apis::yaml::to_string(&serde_json::json!({
            "apiVersion": "v1", "items": objects, "kind": "List",
            "metadata": {"resourceVersion": ""},
        }))
        .unwrap();
        for yaml_text in [documents, list] {
            let yaml = Snapshot::parse(&yaml_text, "snap.yaml").unwrap();
            assert_eq!(yaml.read_by, SnapshotReader::FastYaml, "{yaml_text}");
            assert_eq!(yaml.pod_count, 48);
            assert_eq!(report_json(&yaml), expected);
        }
    }

    #[test]
    fn yaml_the_fast_reader_leaves_alone_is_read_by_serde_saphyr() {
        // An anchor and alias: same report, through serde-saphyr.
        let with_alias = SNAPSHOT.replacen(
            "capacity: {cpu: \"16\", memory: 64Gi}",
            "capacity: &cap {cpu: \"16\", memory: 64Gi}",
            1,
        );
        assert_ne!(with_alias, SNAPSHOT);
        let fast = Snapshot::parse(SNAPSHOT, "snap.yaml").unwrap();
        assert_eq!(fast.read_by, SnapshotReader::FastYaml);
        let slow = Snapshot::parse(&with_alias, "snap.yaml").unwrap();
        assert_eq!(slow.read_by, SnapshotReader::LeanYaml);
        assert_eq!(report_json(&fast), report_json(&slow));
    }

    #[test]
    fn empty_values_read_as_empty_in_every_yaml_reader() {
        // `labels:`, `annotations:` and `containers:` left empty, as people
        // write them; Kubernetes reads them as empty.
        let text = "kind: Node\nmetadata:\n  name: n1\n  labels:\n  annotations:\nstatus:\n  allocatable: {cpu: \"4\", memory: 8Gi}\n  capacity: {cpu: \"4\", memory: 8Gi}\n---\nkind: Pod\nmetadata:\n  name: p\n  namespace: d\n  labels:\nspec:\n  nodeName: n1\n  containers:\n";
        let fast = Snapshot::parse(text, "snap.yaml").unwrap();
        assert_eq!(fast.read_by, SnapshotReader::FastYaml);
        let with_anchor = text.replacen("capacity: {", "capacity: &cap {", 1);
        let lean = Snapshot::parse(&with_anchor, "snap.yaml").unwrap();
        assert_eq!(lean.read_by, SnapshotReader::LeanYaml);
        let full = Snapshot::parse_full_yaml(text, "snap.yaml").unwrap();
        for snapshot in [&fast, &lean, &full] {
            assert_eq!(snapshot.nodes.len(), 1);
            assert_eq!(snapshot.pod_count, 1);
            assert_eq!(snapshot.pods["n1"].len(), 1);
        }
    }

    #[test]
    fn malformed_yaml_is_an_error_with_its_location() {
        // Positions as serde-saphyr reports them (an unclosed bracket or
        // quote at its opening).
        for (text, line) in [
            ("kind: Node\nmetadata:\n  name: a\n    labels: {}\n", 4),
            ("kind: Node\nmetadata: {name: a\n", 2),
            ("kind: Pod\nmetadata:\n  name: \"unterminated\n", 3),
            ("kind: Node\n\tmetadata: {}\n", 1),
            ("kind: Node\nmetadata: a: b\n", 2),
            ("- a\nkind: Node\n", 2),
        ] {
            let err = Snapshot::parse(text, "snap.yaml").unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("snap.yaml: line {line} column ")),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn nesting_beyond_the_limit_is_refused_with_its_position() {
        // serde_yaml (libyaml), the fallback reader before, needed time
        // quadratic in the depth of flow collections, and read any depth
        // inside fields the preview skips.
        let flow = |anchor: &str| {
            format!(
                "kind: Node\nmetadata: {{name: {anchor}a}}\nx: {}{}\n",
                "[".repeat(5_000),
                "]".repeat(5_000)
            )
        };
        let block: String = (0..200)
            .map(|depth| format!("{}k{depth}:\n", " ".repeat(depth)))
            .collect();
        for (text, line) in [
            (flow(""), 3),
            // The anchor sends the text past the built-in reader.
            (flow("&n "), 3),
            // The 129th level is the mapping that starts on line 130.
            (format!("kind: Node\n{block}"), 130),
        ] {
            let err = Snapshot::parse(&text, "snap.yaml").unwrap_err().to_string();
            assert!(
                err.starts_with("snap.yaml: ")
                    && err.contains("nested deeper than 128")
                    && err.contains(&format!("line {line} column")),
                "{err}"
            );
        }
        let json = format!(
            "{{\"kind\": \"Node\", \"x\": {}{}}}",
            "[".repeat(5_000),
            "]".repeat(5_000)
        );
        let err = Snapshot::parse(&json, "snap.json").unwrap_err().to_string();
        assert!(
            err.contains("snap.json") && err.contains("line 1 column"),
            "{err}"
        );
    }

    /// The built-in reader against serde-saphyr on one snapshot file, in one
    /// run (the module doc of `fast_yaml` records the figures):
    /// `KOORD_PREVIEW_SNAPSHOT=FILE cargo test --release -p koord-manager --lib
    /// -- --ignored readers_on_one_snapshot --nocapture`; `hack/bench-manager-preview.sh
    /// --format kubectl --keep FILE` writes such a file.
    #[test]
    #[ignore = "a measurement: needs KOORD_PREVIEW_SNAPSHOT and a release build"]
    fn readers_on_one_snapshot() {
        let path = std::env::var("KOORD_PREVIEW_SNAPSHOT").expect("KOORD_PREVIEW_SNAPSHOT");
        let text = std::fs::read_to_string(path).unwrap();
        let mut fast = Builder::default();
        let started = std::time::Instant::now();
        fast_yaml::for_each_document(&text, |object: Option<EmptyOnNull<LeanObject>>| {
            if let Some(EmptyOnNull(object)) = object {
                fast.next_document();
                fast.add_lean(object);
            }
        })
        .unwrap();
        let fast_time = started.elapsed();
        let started = std::time::Instant::now();
        let LeanDocuments(saphyr) = serde_saphyr::from_str_multiple_with_options::<
            Option<EmptyOnNull<LeanObject>>,
            LeanDocuments,
        >(&text, saphyr_options(&text))
        .unwrap();
        let saphyr_time = started.elapsed();
        let fast = fast.finish(SnapshotReader::FastYaml, "fast").unwrap();
        let saphyr = saphyr.finish(SnapshotReader::LeanYaml, "saphyr").unwrap();
        assert_eq!(report_json(&fast), report_json(&saphyr));
        println!(
            "{} MiB: built-in reader {:.3} s, serde-saphyr {:.3} s ({:.1}x)",
            text.len() >> 20,
            fast_time.as_secs_f64(),
            saphyr_time.as_secs_f64(),
            saphyr_time.as_secs_f64() / fast_time.as_secs_f64()
        );
    }

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused_for_their_budget() {
        use apis::yaml::hostile;
        let node = "kind: Node\nmetadata: {name: a}\n";
        for text in [
            format!("{node}status:\n  bomb:\n{}", indent(&hostile::alias_bomb())),
            format!("{node}{}", hostile::deep_flow(10_000)),
            format!("{node}status:\n{}", indent(&hostile::deep_block(10_000))),
        ] {
            match Snapshot::parse(&text, "snap.yaml") {
                Err(PreviewError::Budget { message, .. }) => assert!(
                    message.contains("budget") || message.contains("nested deeper than 128"),
                    "{message}"
                ),
                other => panic!("not refused for its budget: {:?}", other.err()),
            }
        }
    }

    fn indent(text: &str) -> String {
        text.lines().map(|line| format!("    {line}\n")).collect()
    }

    #[test]
    fn nameless_and_duplicate_objects_are_refused() {
        let node = |name: &str| format!("kind: Node\nmetadata: {{name: {name}}}\n");
        let cases = [
            (
                "kind: Node\nmetadata: {labels: {a: b}}\n".to_owned(),
                "document 0: a Node without metadata.name",
            ),
            (
                format!("{}---\nkind: NodeMetric\nmetadata: {{}}\n", node("a")),
                "document 1: a NodeMetric without metadata.name",
            ),
            (
                format!("{}---\n{}---\n{}", node("a"), node("b"), node("a")),
                "document 2: Node \"a\" appears a second time (first in document 0)",
            ),
            (
                "kind: List\nitems:\n- {kind: Pod, metadata: {name: p, namespace: d}}\n- {kind: Pod, metadata: {name: q, namespace: d}}\n- {kind: Pod, metadata: {name: p, namespace: d}}\n".to_owned(),
                "document 0 item 2: Pod \"d/p\" appears a second time (first in document 0 item 0)",
            ),
            (
                "kind: ConfigMap\nmetadata: {name: c, namespace: n}\n---\nkind: List\nitems:\n- {kind: ConfigMap, metadata: {name: c, namespace: n}}\n".to_owned(),
                "document 1 item 0: ConfigMap \"n/c\" appears a second time (first in document 0)",
            ),
            (
                format!(
                    "{}---\nkind: List\nitems:\n- {{kind: Node, metadata: {{name: b}}}}\n- {{kind: Node, metadata: {{name: a}}}}\n- {{kind: Node, metadata: {{name: c}}}}\n",
                    node("a")
                ),
                "document 1 item 1: Node \"a\" appears a second time (first in document 0)",
            ),
            (
                "kind: Pod\nmetadata: {name: p, namespace: d}\n---\nkind: PodList\nitems:\n- {kind: Pod, metadata: {name: q, namespace: d}}\n- {kind: Pod, metadata: {name: p, namespace: d}}\n".to_owned(),
                "document 1 item 1: Pod \"d/p\" appears a second time (first in document 0)",
            ),
        ];
        for (yaml, expected) in cases {
            let err = Snapshot::parse(&yaml, "snap.yaml").unwrap_err().to_string();
            assert_eq!(err, format!("snap.yaml: {expected}"), "{yaml}");
            // The same objects as JSON.
            let json = as_json_stream(&yaml);
            let err = Snapshot::parse(&json, "snap.json").unwrap_err().to_string();
            assert_eq!(err, format!("snap.json: {expected}"), "{json}");
        }
        // The same name in other kinds or namespaces is fine.
        let text = format!(
            "{}---\nkind: NodeMetric\nmetadata: {{name: a}}\n---\nkind: Pod\nmetadata: {{name: a, namespace: x}}\n---\nkind: Pod\nmetadata: {{name: a, namespace: y}}\n",
            node("a")
        );
        let snapshot = Snapshot::parse(&text, "snap.yaml").unwrap();
        assert_eq!(snapshot.pod_count, 2);
    }

    /// A node whose status already carries batch resources, its capacity
    /// CPU, a pod's CPU request, the system's and the pod's CPU usage given.
    fn refusal_snapshot(
        capacity_cpu: &str,
        request_cpu: &str,
        system_cpu: &str,
        pod_cpu: &str,
    ) -> String {
        format!(
            r#"kind: ConfigMap
metadata: {{name: slo-controller-config, namespace: koordinator-system}}
data:
  colocation-config: '{{"enable": true}}'
---
kind: Node
metadata: {{name: n1}}
status:
  capacity: {{cpu: "{capacity_cpu}", memory: 64Gi}}
  allocatable: {{cpu: "16", memory: 64Gi, kubernetes.io/batch-cpu: "5555", kubernetes.io/batch-memory: 7Gi, kubernetes.io/mid-cpu: "0", kubernetes.io/mid-memory: "0"}}
---
kind: Pod
metadata: {{name: web, namespace: d}}
spec:
  nodeName: n1
  priority: 9500
  containers:
  - name: c
    resources: {{requests: {{cpu: "{request_cpu}", memory: 1Gi}}}}
status: {{phase: Running}}
---
kind: NodeMetric
metadata: {{name: n1}}
status:
  updateTime: "2026-01-01T00:09:00Z"
  nodeMetric:
    nodeUsage: {{resources: {{cpu: "4", memory: 8Gi}}}}
    systemUsage: {{resources: {{cpu: "{system_cpu}", memory: 1Gi}}}}
  podsMetric:
  - namespace: d
    name: web
    podUsage: {{resources: {{cpu: "{pod_cpu}", memory: 1Gi}}}}
"#
        )
    }

    #[test]
    fn unreadable_negative_or_overflowing_inputs_leave_the_node_as_it_is() {
        let now = at("2026-01-01T00:10:00Z");
        let report = |text: &str| {
            let snapshot = Snapshot::parse(text, "snap.yaml").unwrap();
            let config = config_from(snapshot.config_map("slo-controller-config"), "snap").unwrap();
            preview(&snapshot, &config, None, now).nodes.remove(0)
        };
        // Readable inputs: batch-cpu = 16000 - 40% (6400) - system 1000 - web 2000.
        let good = report(&refusal_snapshot("16", "2", "1", "2"));
        assert_eq!(good.allocatable["kubernetes.io/batch-cpu"], "6600");
        for (text, field) in [
            // Unreadable quantities used to count as zero.
            (
                refusal_snapshot("lots", "2", "1", "2"),
                "status.capacity.cpu",
            ),
            (refusal_snapshot("16", "2x", "1", "2"), "requests.cpu"),
            (refusal_snapshot("16", "2", "1", "two"), "podUsage"),
            // Negative usage used to become extra batch capacity.
            (refusal_snapshot("16", "2", "-8", "2"), "systemUsage"),
            (refusal_snapshot("16", "2", "1", "-2"), "podUsage"),
            // Overflowing amounts used to saturate.
            (refusal_snapshot("16", "2", "1E", "2"), "systemUsage"),
            (
                refusal_snapshot("10E", "2", "1", "2"),
                "status.capacity.cpu",
            ),
        ] {
            let node = report(&text);
            // The node keeps what its status says.
            assert_eq!(
                node.allocatable["kubernetes.io/batch-cpu"], "5555",
                "{field}: {node:?}"
            );
            assert_eq!(
                node.allocatable["kubernetes.io/batch-memory"], "7Gi",
                "{field}: {node:?}"
            );
            assert!(
                node.reason.starts_with("refused: ") && node.reason.contains(field),
                "{field}: {}",
                node.reason
            );
        }
    }

    #[test]
    fn malformed_objects_are_named() {
        let text = "apiVersion: v1\nkind: Node\nmetadata: {name: broken}\nstatus: {capacity: 7}\n";
        let err = Snapshot::parse(text, "snap.yaml").unwrap_err().to_string();
        assert!(err.contains("snap.yaml") && err.contains("broken"), "{err}");
        let err = Snapshot::parse("{\"kind\": ", "snap.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("snap.json"), "{err}");
    }
}

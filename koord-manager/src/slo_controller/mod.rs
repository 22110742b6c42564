//! SLO controllers' decision cores (upstream `pkg/slo-controller`): the
//! config in force, NodeSLO, NodeMetric and node resource decisions, and
//! [`plan_node`], the per-node pass shared by the controllers and `preview`.

pub mod batch_formula;
pub mod config;
pub mod cpunormalization;
pub mod device_items;
pub mod device_resources;
pub mod gpudeviceresource;
pub mod node_meta;
pub mod nodemetric;
pub mod noderesource;
pub mod nodeslo;
pub mod numa_batch;
pub mod rdmadeviceresource;
pub mod resourceamplification;
pub mod resources;

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use apis::configuration::SloControllerConfig;
use apis::slo::v1alpha1::{NodeMetric, NodeSLOSpec};
use k8s_openapi::api::core::v1::{Node, Pod};

use self::resources::{InputError, PodSummary};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use self::config::{NodeColocation, node_colocation};
use self::node_meta::{MetaInputs, NodeMetaPlan, NodeResourcePlugins, plan_node_meta};
use self::noderesource::{ExtendedResources, NodeInputs};

/// Everything the manager derives for one node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePlan {
    pub colocation: NodeColocation,
    pub node_slo: NodeSLOSpec,
    /// The batch and mid resources, or why the node's inputs were refused.
    pub resources: Result<ExtendedResources, InputError>,
    /// Per managed resource: the quantity for the node status, `None` to
    /// remove it; empty when the inputs were refused (nothing is written).
    pub desired_status: BTreeMap<&'static str, Option<Quantity>>,
    /// The CPU normalization and resource amplification ratio annotations.
    pub meta: NodeMetaPlan,
    /// The batch quantities the BatchResource plugin writes into each zone
    /// of the node's NodeResourceTopology, or why its zones are left as
    /// they are.
    pub numa_batch: Result<Vec<(String, numa_batch::ZoneQuantities)>, String>,
    /// What the GPUDeviceResource and RDMADeviceResource plugins make of
    /// the node's Device.
    pub devices: device_resources::DevicePlan,
}

/// Inputs of [`plan_node_with`] beyond the node's own objects.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeExtras<'a> {
    /// Annotations of the node's NodeResourceTopology, if it has one.
    pub topology_annotations: Option<&'a BTreeMap<String, String>>,
    /// Zones of the node's NodeResourceTopology, if it has one.
    pub topology_zones: Option<&'a [apis::topology::v1alpha1::Zone]>,
    /// ConfigMap keys never valid since start, with why.
    pub unavailable_keys: Option<&'a BTreeMap<String, String>>,
    pub plugins: NodeResourcePlugins,
    /// The Device named after the node, if any.
    pub device: Option<&'a apis::scheduling::v1alpha1::Device>,
    /// Upstream's `EnableSyncGPUSharedResource` gate.
    pub sync_gpu_shared_resource: bool,
}

/// Computes the NodeSLO spec and the extended resources of one node (no
/// NodeResourceTopology, every plugin on).
pub fn plan_node(
    config: &SloControllerConfig,
    node: &Node,
    node_metric: Option<&NodeMetric>,
    pods: &[PodSummary],
    previous_node_slo: Option<&NodeSLOSpec>,
    now: SystemTime,
) -> NodePlan {
    plan_node_with(
        config,
        node,
        node_metric,
        pods,
        previous_node_slo,
        now,
        NodeExtras::default(),
    )
}

/// [`plan_node`] with the node's NodeResourceTopology, the config keys'
/// availability and the plugin selection.
pub fn plan_node_with(
    config: &SloControllerConfig,
    node: &Node,
    node_metric: Option<&NodeMetric>,
    pods: &[PodSummary],
    previous_node_slo: Option<&NodeSLOSpec>,
    now: SystemTime,
    extras: NodeExtras<'_>,
) -> NodePlan {
    let colocation = node_colocation(config, node);
    let colocation_on =
        noderesource::colocation_enabled(colocation.cluster_enabled, colocation.strategy.as_ref());
    let devices = device_resources::plan_devices(
        node,
        extras.device,
        extras.plugins,
        colocation_on,
        extras.sync_gpu_shared_resource,
    );
    let no_keys = BTreeMap::new();
    let meta = plan_node_meta(MetaInputs {
        node,
        colocation_enabled: colocation_on,
        config,
        unavailable_keys: extras.unavailable_keys.unwrap_or(&no_keys),
        topology_annotations: extras.topology_annotations,
        plugins: extras.plugins,
    });
    let resources = noderesource::calculate(
        colocation.cluster_enabled,
        colocation.strategy.as_ref(),
        NodeInputs {
            node,
            node_metric,
            pods,
            topology_zones: extras.topology_zones,
        },
        now,
    );
    let numa_batch = match &resources {
        Err(error) => Err(format!("refused: {error}")),
        Ok(_) if !extras.plugins.batch_resource => {
            Err(numa_batch::ZONES_UNTOUCHED_PLUGIN_OFF.to_owned())
        }
        Ok(resources) => match &resources.zones {
            numa_batch::ZoneBatch::Untouched(reason) => Err(reason.clone()),
            numa_batch::ZoneBatch::Refused(error) => Err(format!("refused: {error}")),
            numa_batch::ZoneBatch::Zones(amounts) => Ok(numa_batch::zone_quantities(
                amounts,
                numa_batch::normalization_ratio(&meta),
            )),
        },
    };
    let desired_status = resources
        .as_ref()
        .map(|resources| {
            let mut desired = resources.desired_status(node);
            desired.retain(|resource, _| extras.plugins.manages(resource));
            desired
        })
        .unwrap_or_default();
    NodePlan {
        node_slo: nodeslo::node_slo_spec(config, node, previous_node_slo),
        colocation,
        resources,
        desired_status,
        meta,
        numa_batch,
        devices,
    }
}

/// The node a pod is bound to, if any.
pub fn pod_node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|name| !name.is_empty())
}

/// Pod summaries grouped by `spec.nodeName`; unbound pods are left out.
pub fn pods_by_node<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
) -> HashMap<String, Vec<PodSummary>> {
    let mut grouped: HashMap<String, Vec<PodSummary>> = HashMap::new();
    for pod in pods {
        if let Some(node) = pod_node_name(pod) {
            grouped
                .entry(node.to_owned())
                .or_default()
                .push(PodSummary::of(pod));
        }
    }
    grouped
}

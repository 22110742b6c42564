//! Preemption through the extender's `preemptVerb` on the local cluster: kube-scheduler's
//! DefaultPreemption proposes victims, koord-scheduler's `/preempt` takes out the ones
//! Koordinator's rules keep.
//!
//! On a KWOK-simulated node of 2 cpus (`local-cluster.sh kwok node`, tainted so that only the
//! test's pods land there; kwok runs them), with two PriorityClasses of the test's own (100 and
//! 1000):
//! 1. **forbidden**: a low-priority gang of two (`gang.scheduling.koordinator.sh/name`,
//!    min-available 2) has one member filling the KWOK node and the other on a real node. A
//!    high-priority pod that fits only the KWOK node would need the first member evicted, which
//!    splits the gang: kube-scheduler proposes it, the extender drops the node, so the pod stays
//!    Pending without a nominated node and the member keeps running.
//! 2. **permitted**: the gang and the pending pod are deleted and a plain low-priority pod fills
//!    the KWOK node instead; a new high-priority pod makes kube-scheduler propose it, the extender
//!    keeps it, the plain pod is evicted and the high-priority pod runs on the KWOK node.
//!
//!
//! A second test, on its own KWOK node of 2 cpus with a Device of one GPU (created by the test):
//! a low-priority pod holds the GPU and another low-priority pod most of the cpu. A high-priority
//! pod asking for cpu and the whole GPU makes kube-scheduler propose the cpu pod only
//! (`koordinator.sh/gpu-memory-ratio` is `ignoredByScheduler`); the extender adds the GPU holder,
//! both are evicted and the high-priority pod runs there with the GPU.
//!
//! A third test, on its own KWOK node of 2 cpus with a Device of two GPUs: two low-priority pods
//! hold one GPU each — `holder-a-plain`, then `holder-b-guarded`, the less important one (later
//! start), covered by a PodDisruptionBudget with `minAvailable: 1` (so `disruptionsAllowed` 0) —
//! and a third most of the cpu. A high-priority pod asking for cpu and one GPU makes
//! kube-scheduler propose the cpu pod; the extender must add a GPU holder and, though it would
//! otherwise take the less important one, adds `holder-a-plain`, whose eviction violates no
//! budget. `holder-b-guarded` keeps running.
//!
//! Needs `KOORD_E2E_LOCAL_CLUSTER` (the local cluster's script, for `kwok up` and `kwok node`) and
//! the chart's default extender configuration, which includes `preemptVerb: preempt` and the
//! DeviceShare plugin (no extra helm flags). Everything the tests create (namespaces, nodes,
//! NodeMetrics, the Device, PriorityClasses) is deleted afterwards, also when they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::{Context, ensure};
use e2e::cluster::{
    EXTENDER_RETRY, KOORD_NAMESPACE, TestNamespace, delete_from_drop, eventually_within, pod,
    worker_nodes,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const NODE: &str = "koord-e2e-preempt";
/// The taint of KWOK's simulated nodes (hack/local-cluster/lib.sh).
const FAKE_TAINT: &str = "kwok.x-k8s.io/node";
const LOW: &str = "koord-e2e-preempt-low";
const HIGH: &str = "koord-e2e-preempt-high";
const GPU_NODE: &str = "koord-e2e-preempt-gpu";
const GPU_LOW: &str = "koord-e2e-preempt-gpu-low";
const GPU_HIGH: &str = "koord-e2e-preempt-gpu-high";
const PDB_NODE: &str = "koord-e2e-preempt-pdb";
const PDB_LOW: &str = "koord-e2e-preempt-pdb-low";
const PDB_HIGH: &str = "koord-e2e-preempt-pdb-high";

fn ignore_not_found(err: kube::Error) -> Result<(), kube::Error> {
    match err {
        kube::Error::Api(status) if status.code == 404 => Ok(()),
        err => Err(err),
    }
}

/// Deletes the cluster-scoped objects when the test ends, also when it fails: the simulated
/// node (with its NodeMetric and pods), its Device if the test made one, and the
/// PriorityClasses.
struct Cleanup {
    node: &'static str,
    classes: [&'static str; 2],
    device: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let name = self.node;
        let device = !self.device
            || delete_from_drop(move |client| async move {
                Api::<apis::scheduling::v1alpha1::Device>::all(client)
                    .delete(name, &DeleteParams::background())
                    .await
                    .map(|_| ())
                    .or_else(ignore_not_found)
            });
        let node = delete_from_drop(move |client| async move {
            e2e::cluster::delete_simulated_node(&client, name).await
        });
        let names = self.classes;
        let classes = delete_from_drop(move |client| async move {
            let api = Api::<PriorityClass>::all(client);
            for name in names {
                api.delete(name, &DeleteParams::background())
                    .await
                    .map(|_| ())
                    .or_else(ignore_not_found)?;
            }
            Ok::<(), kube::Error>(())
        });
        if !(node && classes && device) {
            eprintln!(
                "cleanup incomplete (node {node}, priority classes {classes}, device {device}): \
                 delete node, NodeMetric and Device {name} and PriorityClasses {names:?} by hand"
            );
        }
    }
}

/// Creates the PriorityClasses `(name, value)`, leaving existing ones.
async fn priority_classes(client: &kube::Client, classes: [(&str, i32); 2]) -> anyhow::Result<()> {
    let api = Api::<PriorityClass>::all(client.clone());
    for (name, value) in classes {
        let class: PriorityClass = serde_json::from_value(json!({
            "metadata": {"name": name}, "value": value,
            "preemptionPolicy": "PreemptLowerPriority"
        }))?;
        match api.create(&PostParams::default(), &class).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => return Err(err).context(format!("PriorityClass {name}")),
        }
    }
    Ok(())
}

/// Fails unless kube-scheduler's configuration calls the extender's `/preempt`.
async fn require_preempt_verb(client: &kube::Client) -> anyhow::Result<()> {
    let config = Api::<ConfigMap>::namespaced(client.clone(), KOORD_NAMESPACE)
        .get("koord-scheduler-config")
        .await
        .context("the koord-scheduler-config ConfigMap")?;
    let kube_config = config
        .data
        .as_ref()
        .and_then(|d| d.get("kube-scheduler-config"))
        .cloned()
        .unwrap_or_default();
    ensure!(
        kube_config.contains("preemptVerb: preempt"),
        "kube-scheduler's configuration has no preemptVerb; install the chart from this tree"
    );
    Ok(())
}

/// A koord-scheduler pod of `cpu` on `node`, tolerating the KWOK taint.
fn test_pod(
    namespace: &str,
    name: &str,
    node: &str,
    priority_class: &str,
    cpu: &str,
    annotations: Value,
) -> anyhow::Result<Pod> {
    resources_pod(
        namespace,
        name,
        node,
        priority_class,
        json!({"requests": {"cpu": cpu, "memory": "16Mi"}}),
        annotations,
    )
}

/// A koord-scheduler pod with `resources` on `node`, tolerating the KWOK taint.
fn resources_pod(
    namespace: &str,
    name: &str,
    node: &str,
    priority_class: &str,
    resources: Value,
    annotations: Value,
) -> anyhow::Result<Pod> {
    pod(
        namespace,
        name,
        json!({
            "metadata": {"annotations": annotations},
            "spec": {
                "schedulerName": "koord-scheduler",
                "priorityClassName": priority_class,
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [{"key": FAKE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": resources
                }]
            }
        }),
    )
}

/// A pod on `node` asking for `cpu` and a whole GPU's memory share, as requests and limits.
fn gpu_pod(
    namespace: &str,
    name: &str,
    node: &str,
    priority_class: &str,
    cpu: &str,
) -> anyhow::Result<Pod> {
    let amounts = json!({"cpu": cpu, "memory": "16Mi", "koordinator.sh/gpu-memory-ratio": "100"});
    resources_pod(
        namespace,
        name,
        node,
        priority_class,
        json!({"requests": amounts.clone(), "limits": amounts}),
        json!({}),
    )
}

async fn bound_node(pods: &Api<Pod>, name: &str) -> anyhow::Result<Option<String>> {
    Ok(pods
        .get(name)
        .await?
        .spec
        .and_then(|s| s.node_name)
        .filter(|n| !n.is_empty()))
}

/// Creates `pod` and waits until it is bound.
async fn create_bound(pods: &Api<Pod>, pod: &Pod) -> anyhow::Result<()> {
    let name = pod
        .metadata
        .name
        .clone()
        .context("test pod without a name")?;
    pods.create(&PostParams::default(), pod).await?;
    eventually_within(&format!("{name} bound"), EXTENDER_RETRY, || async {
        Ok(bound_node(pods, &name).await?.map(|_| ()))
    })
    .await
}

/// Fails unless the bound pod `name` carries a device allocation.
async fn ensure_gpu_allocated(pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let holder = pods.get(name).await?;
    ensure!(
        holder
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("scheduling.koordinator.sh/device-allocated")),
        "{name} was bound without a GPU allocation"
    );
    Ok(())
}

/// Fails if any of `names` still runs (exists without a deletion timestamp) on `node`.
async fn ensure_preempted(pods: &Api<Pod>, names: &[&str], node: &str) -> anyhow::Result<()> {
    for name in names {
        let pod = pods.get_opt(name).await?;
        ensure!(
            pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
            "{name} still runs on {node} next to the urgent pod"
        );
    }
    Ok(())
}

/// Creates the Device of `node` with `gpus`.
async fn create_gpu_device(
    devices: &Api<apis::scheduling::v1alpha1::Device>,
    node: &str,
    gpus: Vec<Value>,
) -> anyhow::Result<()> {
    let device: apis::scheduling::v1alpha1::Device = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
        "metadata": {"name": node},
        "spec": {"devices": gpus}
    }))?;
    devices
        .create(&PostParams::default(), &device)
        .await
        .context("creating the Device")?;
    Ok(())
}

/// One healthy whole GPU of a Device's spec, minor `minor`, its id prefixed by `id_prefix`.
fn whole_gpu(id_prefix: &str, minor: i32) -> Value {
    json!({"type": "gpu", "id": format!("{id_prefix}-{minor}"), "minor": minor,
           "health": true,
           "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi",
                         "koordinator.sh/gpu-memory-ratio": "100"}})
}

#[tokio::test]
async fn the_extender_keeps_gangs_whole_under_kube_scheduler_preemption() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("the_extender_keeps_gangs_whole_under_kube_scheduler_preemption")
            .await
    else {
        return Ok(());
    };
    require_preempt_verb(&client).await?;
    let real_node = worker_nodes(&client)
        .await?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .find(|n| n != NODE)
        .context("a real worker node")?;

    let _cleanup = Cleanup {
        node: NODE,
        classes: [LOW, HIGH],
        device: false,
    };
    priority_classes(&client, [(LOW, 100), (HIGH, 1000)]).await?;
    let beating =
        e2e::cluster::simulated_node_with_heartbeat(&client, NODE, "2", "4Gi", json!({})).await?;

    let namespace = TestNamespace::create(&client, "koord-e2e-preempt").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let create = PostParams::default();

    // 1. A gang across the KWOK node and a real node.
    let gang = json!({
        "gang.scheduling.koordinator.sh/name": "job",
        "gang.scheduling.koordinator.sh/min-available": "2"
    });
    pods.create(
        &create,
        &test_pod(ns, "gang-kwok", NODE, LOW, "1500m", gang.clone())?,
    )
    .await?;
    pods.create(
        &create,
        &test_pod(ns, "gang-real", &real_node, LOW, "10m", gang)?,
    )
    .await?;
    for name in ["gang-kwok", "gang-real"] {
        eventually_within(&format!("{name} bound"), EXTENDER_RETRY, || async {
            Ok(bound_node(&pods, name).await?.map(|_| ()))
        })
        .await?;
    }
    pods.create(
        &create,
        &test_pod(ns, "urgent", NODE, HIGH, "1", json!({}))?,
    )
    .await?;
    // kube-scheduler tries, proposes gang-kwok, the extender refuses: for a minute the member
    // keeps running and the urgent pod gets no node and no nomination.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let member = pods.get("gang-kwok").await?;
        ensure!(
            member.metadata.deletion_timestamp.is_none(),
            "the gang member on {NODE} was preempted although that splits its gang"
        );
        let urgent = pods.get("urgent").await?;
        let nominated = urgent
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .unwrap_or_default();
        ensure!(
            urgent
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none()
                && nominated.is_empty(),
            "the urgent pod was placed or nominated ({nominated:?}) on the gang's node"
        );
    }

    // 2. Everything goes; a plain low-priority pod fills the node, and a new urgent pod may
    //    preempt it.
    for name in ["urgent", "gang-kwok", "gang-real"] {
        pods.delete(name, &DeleteParams::background()).await?;
    }
    for name in ["urgent", "gang-kwok", "gang-real"] {
        eventually_within(&format!("{name} gone"), Duration::from_secs(60), || async {
            Ok(pods.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
    }
    pods.create(
        &create,
        &test_pod(ns, "plain", NODE, LOW, "1500m", json!({}))?,
    )
    .await?;
    eventually_within("plain bound", EXTENDER_RETRY, || async {
        Ok(bound_node(&pods, "plain").await?.map(|_| ()))
    })
    .await?;
    pods.create(
        &create,
        &test_pod(ns, "urgent-2", NODE, HIGH, "1", json!({}))?,
    )
    .await?;
    // The plain pod is no gang and in the urgent pod's (default) quota: the extender keeps
    // kube-scheduler's victim, the plain pod is evicted and the urgent pod takes the node.
    let urgent_node = eventually_within("urgent-2 placed", EXTENDER_RETRY, || async {
        bound_node(&pods, "urgent-2").await
    })
    .await?;
    ensure!(urgent_node == NODE, "urgent-2 went to {urgent_node}");
    let plain = pods.get_opt("plain").await?;
    ensure!(
        plain.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "the plain pod still runs on {NODE} next to urgent-2, beyond the node's 2 cpus"
    );
    beating.abort();
    drop(namespace);
    Ok(())
}

#[tokio::test]
async fn the_extender_adds_a_gpu_holder_kube_scheduler_cannot_see() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("the_extender_adds_a_gpu_holder_kube_scheduler_cannot_see").await
    else {
        return Ok(());
    };
    require_preempt_verb(&client).await?;
    let devices = Api::<apis::scheduling::v1alpha1::Device>::all(client.clone());
    // Checked before the cleanup guard exists: the guard deletes the node's Device.
    ensure!(
        devices.get_opt(GPU_NODE).await?.is_none(),
        "a Device {GPU_NODE} exists already; the test does not touch it"
    );
    let _cleanup = Cleanup {
        node: GPU_NODE,
        classes: [GPU_LOW, GPU_HIGH],
        device: true,
    };
    priority_classes(&client, [(GPU_LOW, 100), (GPU_HIGH, 1000)]).await?;
    let beating =
        e2e::cluster::simulated_node_with_heartbeat(&client, GPU_NODE, "2", "4Gi", json!({}))
            .await?;
    create_gpu_device(&devices, GPU_NODE, vec![whole_gpu("GPU-e2e-preempt", 0)]).await?;

    let namespace = TestNamespace::create(&client, "koord-e2e-preempt-gpu").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let create = PostParams::default();
    // The GPU holder first (placed only once the extender has the Device), then the cpu pod.
    create_bound(
        &pods,
        &gpu_pod(ns, "gpu-holder", GPU_NODE, GPU_LOW, "500m")?,
    )
    .await?;
    ensure_gpu_allocated(&pods, "gpu-holder").await?;
    create_bound(
        &pods,
        &test_pod(ns, "cpu-holder", GPU_NODE, GPU_LOW, "1200m", json!({}))?,
    )
    .await?;

    // 0.5 + 1.2 of 2 cpus are taken: kube-scheduler evicts cpu-holder for cpu and sees no need
    // for the GPU; the extender adds gpu-holder, so the urgent pod gets both.
    pods.create(&create, &gpu_pod(ns, "urgent", GPU_NODE, GPU_HIGH, "1")?)
        .await?;
    let urgent_node = eventually_within("urgent placed", EXTENDER_RETRY, || async {
        bound_node(&pods, "urgent").await
    })
    .await?;
    ensure!(urgent_node == GPU_NODE, "urgent went to {urgent_node}");
    ensure_preempted(&pods, &["gpu-holder", "cpu-holder"], GPU_NODE).await?;
    beating.abort();
    drop(namespace);
    Ok(())
}

#[tokio::test]
async fn the_extender_adds_the_victim_no_disruption_budget_protects() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("the_extender_adds_the_victim_no_disruption_budget_protects").await
    else {
        return Ok(());
    };
    require_preempt_verb(&client).await?;
    let devices = Api::<apis::scheduling::v1alpha1::Device>::all(client.clone());
    // Checked before the cleanup guard exists: the guard deletes the node's Device.
    ensure!(
        devices.get_opt(PDB_NODE).await?.is_none(),
        "a Device {PDB_NODE} exists already; the test does not touch it"
    );
    let _cleanup = Cleanup {
        node: PDB_NODE,
        classes: [PDB_LOW, PDB_HIGH],
        device: true,
    };
    priority_classes(&client, [(PDB_LOW, 100), (PDB_HIGH, 1000)]).await?;
    let beating =
        e2e::cluster::simulated_node_with_heartbeat(&client, PDB_NODE, "2", "4Gi", json!({}))
            .await?;
    let gpus = vec![
        whole_gpu("GPU-e2e-preempt-pdb", 0),
        whole_gpu("GPU-e2e-preempt-pdb", 1),
    ];
    create_gpu_device(&devices, PDB_NODE, gpus).await?;

    let namespace = TestNamespace::create(&client, "koord-e2e-preempt-pdb").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let create = PostParams::default();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }))?;
    budgets
        .create(&create, &budget)
        .await
        .context("creating the PodDisruptionBudget")?;
    // The plain holder first, then (a second later, so it is the less important by start time)
    // the guarded one.
    create_bound(
        &pods,
        &gpu_pod(ns, "holder-a-plain", PDB_NODE, PDB_LOW, "500m")?,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let mut guarded = gpu_pod(ns, "holder-b-guarded", PDB_NODE, PDB_LOW, "500m")?;
    guarded.metadata.labels = Some([("app".to_string(), "guarded".to_string())].into());
    create_bound(&pods, &guarded).await?;
    for name in ["holder-a-plain", "holder-b-guarded"] {
        ensure_gpu_allocated(&pods, name).await?;
    }
    create_bound(
        &pods,
        &test_pod(ns, "cpu-holder", PDB_NODE, PDB_LOW, "800m", json!({}))?,
    )
    .await?;
    // The disruption controller has counted the guarded pod: no disruption is allowed.
    eventually_within("the budget's status written", EXTENDER_RETRY, || async {
        let status = budgets.get("guarded").await?.status;
        Ok(status
            .filter(|s| s.expected_pods == 1 && s.disruptions_allowed == 0)
            .map(|_| ()))
    })
    .await?;

    // 0.5 + 0.5 + 0.8 of 2 cpus are taken: kube-scheduler evicts cpu-holder for cpu; the extender
    // adds a GPU holder, the one no budget protects.
    pods.create(&create, &gpu_pod(ns, "urgent", PDB_NODE, PDB_HIGH, "1")?)
        .await?;
    let urgent_node = eventually_within("urgent placed", EXTENDER_RETRY, || async {
        bound_node(&pods, "urgent").await
    })
    .await?;
    ensure!(urgent_node == PDB_NODE, "urgent went to {urgent_node}");
    ensure_preempted(&pods, &["holder-a-plain", "cpu-holder"], PDB_NODE).await?;
    let guarded = pods.get_opt("holder-b-guarded").await?;
    ensure!(
        guarded.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "holder-b-guarded, protected by its PodDisruptionBudget, was evicted"
    );
    beating.abort();
    drop(namespace);
    Ok(())
}

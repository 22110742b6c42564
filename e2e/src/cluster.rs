//! Helpers of the cluster suite (`tests/cluster_*.rs`): polling, per-test namespaces, pod
//! builders, and reads of what only the node or a pod can show (through the API server's proxy).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{ApiResource, DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

pub const KOORD_NAMESPACE: &str = "koordinator-system";
pub const WAIT: Duration = Duration::from_secs(180);

/// Polls `check` every second until it returns `Some` or `WAIT` passes.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    eventually_within(what, WAIT, check).await
}

/// Polls `check` every second until it returns `Some` or `limit` passes.
pub async fn eventually_within<T, F, Fut>(
    what: &str,
    limit: Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(error) => last_error = Some(error),
        }
        if tokio::time::Instant::now() > deadline {
            return Err(anyhow!(
                "{what}: not reached within {limit:?} (last error: {last_error:?})"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A namespace for one test, deleted when the guard drops.
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> anyhow::Result<Self> {
        let name = format!("{prefix}-{}", std::process::id());
        let api: Api<Namespace> = Api::all(client.clone());
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"koord-e2e": "true"}}
        }))?;
        api.create(&PostParams::default(), &namespace).await?;
        Ok(Self { name })
    }
}

impl Drop for TestNamespace {
    /// Deletes the namespace, and so every pod a test left running (burners included), even
    /// when the test failed.
    fn drop(&mut self) {
        let name = self.name.clone();
        let deleted = delete_from_drop(move |client| async move {
            Api::<Namespace>::all(client)
                .delete(&name, &DeleteParams::background())
                .await
        });
        if !deleted {
            eprintln!("could not delete test namespace {}", self.name);
        }
    }
}

/// Runs `delete` with a fresh client for a test's drop guard; returns whether it succeeded. A
/// test's runtime is single-threaded and about to stop, and the test's client lives on it, so
/// the call runs on a thread with its own runtime and client.
pub fn delete_from_drop<F, Fut, T>(delete: F) -> bool
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let done = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        runtime.block_on(async {
            let client = Client::try_default().await.ok()?;
            delete(client).await.ok().map(|_| ())
        })
    })
    .join();
    matches!(done, Ok(Some(())))
}

pub async fn worker_nodes(client: &Client) -> anyhow::Result<Vec<Node>> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|node| {
            let tainted = node
                .spec
                .as_ref()
                .and_then(|spec| spec.taints.as_ref())
                .is_some_and(|taints| taints.iter().any(|t| t.effect == "NoSchedule"));
            !tainted
        })
        .collect())
}

pub fn pod(namespace: &str, name: &str, body: Value) -> anyhow::Result<Pod> {
    let mut value = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
    });
    merge(&mut value, body);
    Ok(serde_json::from_value(value)?)
}

pub fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in b {
                merge(a.entry(key).or_insert(Value::Null), value);
            }
        }
        (slot, value) => *slot = value,
    }
}

pub async fn pod_logs_when_done(api: &Api<Pod>, name: &str) -> anyhow::Result<String> {
    eventually(&format!("pod {name} finished"), || async {
        let pod = api.get(name).await?;
        let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
        match phase.as_str() {
            "Succeeded" => Ok(Some(())),
            "Failed" => bail!("pod {name} failed"),
            _ => Ok(None),
        }
    })
    .await?;
    Ok(api.logs(name, &Default::default()).await?)
}

/// `key=value` lines printed by a test pod.
pub fn key_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Serializes the tests that load the node's CPUs or memory, so that one test's load does not
/// decide another's outcome (tests of one binary run in parallel).
pub static NODE_LOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The annotation (and taint key) of KWOK-simulated nodes (hack/local-cluster/lib.sh).
pub const KWOK_NODE_KEY: &str = "kwok.x-k8s.io/node";

/// The names of the nodes a kubelet runs: existing nodes that KWOK does not simulate.
pub async fn real_nodes(client: &Client) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(nodes
        .items
        .into_iter()
        .filter(|node| {
            node.metadata.deletion_timestamp.is_none()
                && !node
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(KWOK_NODE_KEY))
        })
        .filter_map(|node| node.metadata.name)
        .collect())
}

/// The running pods of the chart component labelled `koord-app=<app>` on real nodes. DaemonSet
/// pods that KWOK "runs" on a simulated node, and pods left behind by a node a test deleted (the
/// pod GC removes them only later), are not the component's and are left out.
pub async fn component_pods(client: &Client, app: &str) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let real = real_nodes(client).await?;
    let pods = api
        .list(&ListParams::default().labels(&format!("koord-app={app}")))
        .await?
        .items
        .into_iter()
        .filter(|pod| {
            pod.metadata.deletion_timestamp.is_none()
                && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && pod
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.node_name.as_ref())
                    .is_some_and(|node| real.contains(node))
        })
        .collect();
    Ok(pods)
}

/// The log of one container of a chart component's pod.
pub async fn container_log(client: &Client, pod: &str, container: &str) -> anyhow::Result<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let params = kube::api::LogParams {
        container: Some(container.to_string()),
        ..Default::default()
    };
    Ok(api.logs(pod, &params).await?)
}

/// A pod on `node` that prints `key=value` lines for each `(key, host path)` every second, so
/// a test can follow node files (cgroups of other pods, the QoS tiers) through the pod's log.
pub fn node_file_watcher(
    namespace: &str,
    name: &str,
    node: &str,
    files: &[(&str, &str)],
) -> anyhow::Result<Pod> {
    let mut script = String::from("while true; do ");
    for (key, path) in files {
        // The host's / is mounted at /host; a missing file prints an empty value.
        script.push_str(&format!("echo {key}=$(cat /host{path} 2>/dev/null); "));
    }
    script.push_str("echo end=1; sleep 1; done");
    pod(
        namespace,
        name,
        json!({
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "watch", "image": crate::busybox_image(), "command": ["sh", "-c", script],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    "volumeMounts": [{"name": "cgroup", "mountPath": "/host/sys/fs/cgroup", "readOnly": true}]
                }],
                "volumes": [{"name": "cgroup", "hostPath": {"path": "/sys/fs/cgroup"}}]
            }
        }),
    )
}

/// The values of the newest complete block a [`node_file_watcher`] printed.
pub async fn watched_values(
    api: &Api<Pod>,
    name: &str,
) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    let params = kube::api::LogParams {
        tail_lines: Some(200),
        ..Default::default()
    };
    let Ok(text) = api.logs(name, &params).await else {
        return Ok(None);
    };
    let blocks: Vec<&str> = text.split("end=1").collect();
    // The last element is the block still being printed.
    Ok(blocks
        .len()
        .checked_sub(2)
        .map(|complete| key_values(blocks[complete])))
}

/// Waits until the pod is Running and returns it.
pub async fn running_pod(api: &Api<Pod>, name: &str) -> anyhow::Result<Pod> {
    running_pod_within(api, name, WAIT).await
}

/// Waits up to `limit` until pod `name` is reported unschedulable and returns kube-scheduler's
/// message (its `PodScheduled=False` condition); a pod that is bound meanwhile is an error,
/// reported if it stays bound until `limit`.
pub async fn unschedulable_message(
    api: &Api<Pod>,
    name: &str,
    limit: Duration,
) -> anyhow::Result<String> {
    eventually_within(
        &format!("pod {name} reported unschedulable"),
        limit,
        || async {
            let pod = api.get(name).await?;
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()) {
                bail!("pod {name} was bound to {node}");
            }
            Ok(pod
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .and_then(|c| c.message))
        },
    )
    .await
}

/// kube-scheduler retries a pod that the extender rejected (for node load, say) on cluster events
/// it cannot tie to the extender's reasons, at the latest after five minutes in its
/// unschedulable queue: a pod of koord-scheduler may take that long to be placed.
pub const EXTENDER_RETRY: Duration = Duration::from_secs(330);

/// Waits up to `limit` until the pod is Running and returns it.
pub async fn running_pod_within(
    api: &Api<Pod>,
    name: &str,
    limit: Duration,
) -> anyhow::Result<Pod> {
    eventually_within(&format!("pod {name} running"), limit, || async {
        let pod = api.get(name).await?;
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => Ok(Some(pod)),
            Some("Failed") | Some("Succeeded") => bail!("pod {name} ended"),
            _ => Ok(None),
        }
    })
    .await
}

/// The node a pod was bound to.
pub fn node_of(pod: &Pod) -> anyhow::Result<String> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.clone())
        .context("pod is not bound")
}

/// The cgroup directory (below a hierarchy's root) of a pod under the kubelet's cgroupfs
/// layout: `/kubepods[/besteffort|/burstable]/pod<uid>`.
pub fn pod_cgroup_dir(pod: &Pod) -> anyhow::Result<String> {
    let uid = pod.metadata.uid.clone().context("pod has no uid")?;
    let tier = match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => "",
        Some("Burstable") => "/burstable",
        Some("BestEffort") => "/besteffort",
        other => return Err(anyhow!("pod has no QoS class yet ({other:?})")),
    };
    Ok(format!("/kubepods{tier}/pod{uid}"))
}

/// The `slo-controller-config` key of the CPU/memory threshold strategies.
pub const THRESHOLD_KEY: &str = "resource-threshold-config";

/// Sets (or with `None` removes) the threshold key of the cluster's `slo-controller-config`.
pub async fn set_threshold_config(
    configs: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    value: Option<&str>,
) -> anyhow::Result<()> {
    // A merge patch with null removes the key.
    let patch = json!({"data": {THRESHOLD_KEY: value}});
    configs
        .patch(
            "slo-controller-config",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// The gates a component's `--feature-gates` arguments set to `true`.
pub fn gates_set_true(args: &[String]) -> Vec<&str> {
    args.iter()
        .filter_map(|arg| arg.trim_start_matches('-').strip_prefix("feature-gates="))
        .flat_map(|list| list.split(','))
        .filter_map(|entry| entry.trim().strip_suffix("=true"))
        .collect()
}

/// Fails unless the koord-manager Deployment runs with every one of `gates` set to `true` in its
/// `--feature-gates` argument; the error names the helm flag that turns them on.
pub async fn require_manager_gates(client: &Client, gates: &[&str]) -> anyhow::Result<()> {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let deployment = deployments
        .get("koord-manager")
        .await
        .context("the koord-manager Deployment")?;
    let args: Vec<String> = deployment
        .spec
        .and_then(|spec| spec.template.spec)
        .map(|spec| spec.containers)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|container| container.args.unwrap_or_default())
        .collect();
    let enabled = gates_set_true(&args);
    let missing: Vec<&&str> = gates.iter().filter(|g| !enabled.contains(g)).collect();
    if !missing.is_empty() {
        let flag: Vec<String> = missing.iter().map(|g| format!("{g}=true")).collect();
        bail!(
            "koord-manager runs without {missing:?} (args {args:?}); install the chart with \
             --set-string featureGates={}",
            flag.join("\\,")
        );
    }
    Ok(())
}

/// Runs the local cluster's script (`KOORD_E2E_LOCAL_CLUSTER`) with `args`
/// (`kwok up`, `kwok node NAME CPU MEMORY`, …).
pub fn local_cluster(args: &[&str]) -> anyhow::Result<()> {
    let script = std::env::var("KOORD_E2E_LOCAL_CLUSTER").context(
        "KOORD_E2E_LOCAL_CLUSTER (the local cluster's local-cluster.sh) is needed for kwok",
    )?;
    let output = std::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .with_context(|| format!("running {script} {args:?}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{script} {args:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Writes a fresh, zero-usage NodeMetric status for a simulated node (no
/// koordlet reports for it), so LoadAware does not count its metric as expired.
pub async fn zero_usage_heartbeat(client: &Client, node: &str) -> anyhow::Result<()> {
    let zero = json!({"resources": {"cpu": "0", "memory": "0"}});
    let metric = json!({"status": {
        "updateTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "nodeMetric": {"nodeUsage": zero, "systemUsage": zero},
        "podsMetric": []
    }});
    Api::<apis::slo::v1alpha1::NodeMetric>::all(client.clone())
        .patch_status(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&metric),
        )
        .await
        .with_context(|| format!("the NodeMetric status of {node}"))?;
    Ok(())
}

/// Removes a simulated node a test added: the Node, its NodeMetric, and (with no grace, as no
/// kubelet will ever confirm them) the pods still bound to it, so the suites that run after the
/// test do not meet the node's DaemonSet pods before the pod GC gets to them.
/// Deletes a Reservation; one already gone is fine.
pub async fn delete_reservation(client: &Client, name: &str) -> Result<(), kube::Error> {
    match Api::<apis::scheduling::v1alpha1::Reservation>::all(client.clone())
        .delete(name, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

/// The pod's `scheduling.koordinator.sh/reservation-allocated` (empty when it has none).
pub fn reservation_allocated(pod: &Pod) -> String {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(apis::extension::reservation::ANNOTATION_RESERVATION_ALLOCATED))
        .cloned()
        .unwrap_or_default()
}

pub async fn delete_simulated_node(client: &Client, node: &str) -> Result<(), kube::Error> {
    fn absent_is_fine<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
        match result {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(err),
        }
    }
    absent_is_fine(
        Api::<Node>::all(client.clone())
            .delete(node, &DeleteParams::background())
            .await,
    )?;
    absent_is_fine(
        Api::<apis::slo::v1alpha1::NodeMetric>::all(client.clone())
            .delete(node, &DeleteParams::background())
            .await,
    )?;
    let bound = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    let no_grace = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    for pod in bound.items {
        let (Some(namespace), Some(name)) = (pod.metadata.namespace, pod.metadata.name) else {
            continue;
        };
        absent_is_fine(
            Api::<Pod>::namespaced(client.clone(), &namespace)
                .delete(&name, &no_grace)
                .await,
        )?;
    }
    Ok(())
}

/// Fails unless koord-manager can turn a node's Device into node resources: its
/// `GPUDeviceResource` plugin is selected (`--noderesource-plugins`, all by default) and
/// colocation is on in `slo-controller-config` (upstream's node-resource plugins do not run for
/// a node with colocation off). `selects_gpu` is the manager's own reading of that flag
/// (`NodeResourcePlugins::from_flag`). The error names the setting to change.
pub async fn require_gpu_device_resource(
    client: &Client,
    selects_gpu: impl Fn(Option<&[String]>) -> bool,
) -> anyhow::Result<()> {
    let manager =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), KOORD_NAMESPACE)
            .get("koord-manager")
            .await?;
    let args: Vec<String> = manager
        .spec
        .and_then(|spec| spec.template.spec)
        .map(|spec| {
            spec.containers
                .into_iter()
                .flat_map(|c| c.args.unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    let selected: Option<Vec<String>> = args.iter().find_map(|arg| {
        let value = arg
            .trim_start_matches('-')
            .strip_prefix("noderesource-plugins=")?;
        Some(value.split(',').map(str::to_owned).collect())
    });
    if !selects_gpu(selected.as_deref()) {
        bail!(
            "koord-manager runs with --noderesource-plugins={selected:?}, which leaves GPUDeviceResource out"
        );
    }
    let config =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), KOORD_NAMESPACE)
            .get("slo-controller-config")
            .await?;
    let colocation = config
        .data
        .as_ref()
        .and_then(|data| data.get("colocation-config"))
        .map(|text| serde_json::from_str::<Value>(text))
        .transpose()?;
    if !colocation.as_ref().is_some_and(|c| c["enable"] == true) {
        bail!(
            "colocation is off in slo-controller-config ({colocation:?}): the device plugins do not run"
        );
    }
    Ok(())
}

/// Whether any of the GPU resources koord-manager derives from a Device (upstream's
/// `koordinator.sh/gpu`, `gpu-core`, `gpu-memory`, `gpu-memory-ratio`) is on the node, in its
/// allocatable or its capacity.
pub fn carries_gpu_resources(node: &Node) -> bool {
    use apis::extension::{
        RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO,
    };
    let status = node.status.as_ref();
    [
        RESOURCE_GPU,
        RESOURCE_GPU_CORE,
        RESOURCE_GPU_MEMORY,
        RESOURCE_GPU_MEMORY_RATIO,
    ]
    .iter()
    .any(|name| {
        status.is_some_and(|status| {
            [&status.allocatable, &status.capacity]
                .iter()
                .any(|list| list.as_ref().is_some_and(|list| list.contains_key(*name)))
        })
    })
}

/// Deletes the node's Device (the test's), waits until the manager has taken the GPU resources
/// off the node, and removes the GPU model label the Device caused, when the guard drops, even
/// when the test failed.
pub struct DeviceCleanup {
    pub node: String,
}

impl Drop for DeviceCleanup {
    fn drop(&mut self) {
        let name = self.node.clone();
        let device_gone = delete_from_drop(move |client| async move {
            match Api::<apis::scheduling::v1alpha1::Device>::all(client)
                .delete(&name, &DeleteParams::default())
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                other => other.map(|_| ()),
            }
        });
        if !device_gone {
            eprintln!("could not delete the test's Device {}", self.node);
        }
        // The manager takes the GPU resources off the node a moment later; the suites after
        // this one expect a node without GPUs, so the guard waits for that (up to two minutes).
        let name = self.node.clone();
        let cleared = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = cleared.clone();
        delete_from_drop(move |client| async move {
            let nodes = Api::<Node>::all(client);
            for _ in 0..120 {
                if !carries_gpu_resources(&nodes.get(&name).await?) {
                    seen.store(true, std::sync::atomic::Ordering::Relaxed);
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok::<(), kube::Error>(())
        });
        if !cleared.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "node {} still carries GPU resources after its Device went",
                self.node
            );
        }
        let name = self.node.clone();
        let unlabelled = delete_from_drop(move |client| async move {
            let patch = json!({"metadata": {"labels": {apis::extension::LABEL_GPU_MODEL: null}}});
            Api::<Node>::all(client)
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
        });
        if !unlabelled {
            eprintln!(
                "could not remove {} from node {}",
                apis::extension::LABEL_GPU_MODEL,
                self.node
            );
        }
    }
}

/// Adds a KWOK-simulated node (`kwok node NAME CPU MEMORY`) for a test's pods: `metadata` (labels,
/// annotations) is merged into it, LoadAware's node thresholds leave CPU out (it would count the
/// estimates of the pods kwok "runs", the DaemonSets' among them, against the small node; a
/// memory threshold keeps the annotation in force), and a NodeMetric gets a zero-usage heartbeat
/// every 5 s. Abort the returned task to stop the heartbeat; remove the node with
/// [`delete_simulated_node`].
pub async fn simulated_node_with_heartbeat(
    client: &Client,
    name: &str,
    cpu: &str,
    memory: &str,
    metadata: Value,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    local_cluster(&["kwok", "up"])?;
    local_cluster(&["kwok", "node", name, cpu, memory])?;
    let mut patch = json!({"metadata": {"annotations": {
        "scheduling.koordinator.sh/usage-thresholds": r#"{"usageThresholds":{"memory":100}}"#
    }}});
    merge(&mut patch, json!({ "metadata": metadata }));
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .with_context(|| format!("the metadata of simulated node {name}"))?;
    let metric: apis::slo::v1alpha1::NodeMetric = serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": name}, "spec": {}
    }))?;
    match Api::<apis::slo::v1alpha1::NodeMetric>::all(client.clone())
        .create(&PostParams::default(), &metric)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => return Err(err).with_context(|| format!("the NodeMetric of {name}")),
    }
    zero_usage_heartbeat(client, name).await?;
    let client = client.clone();
    let name = name.to_string();
    Ok(tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if let Err(err) = zero_usage_heartbeat(&client, &name).await {
                eprintln!("heartbeat: {err:#}");
            }
        }
    }))
}

/// The koord-scheduler the installed chart configures (`koord-scheduler-config`), built as the
/// component builds it, so a test can read which optional behaviours are on.
pub async fn installed_scheduler(
    client: &Client,
) -> anyhow::Result<koord_scheduler::framework::Scheduler> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let map = maps
        .get("koord-scheduler-config")
        .await
        .context("reading the chart's koord-scheduler-config")?;
    let text = map
        .data
        .unwrap_or_default()
        .remove("koord-scheduler-config")
        .context("koord-scheduler-config has no koord-scheduler-config key")?;
    let config = koord_scheduler::config::SchedulerConfiguration::from_yaml(&text)?;
    koord_scheduler::build_scheduler(&config, Duration::from_secs(1))
}

/// A NodeResourceTopology for `node` as koordlet writes it: four CPUs, one core each, CPUs 0–1
/// on NUMA node 0 and 2–3 on node 1, each NUMA node with 2 CPUs and 4 GiB.
pub fn two_numa_node_topology(
    node: &str,
) -> anyhow::Result<apis::topology::v1alpha1::NodeResourceTopology> {
    let detail: Vec<Value> = (0..4)
        .map(|id| json!({"id": id, "core": id, "socket": 0, "node": id / 2}))
        .collect();
    let cpu_topology = json!({ "detail": detail }).to_string();
    let resource = |name: &str, amount: &str| json!({"name": name, "capacity": amount, "allocatable": amount, "available": amount});
    let zone = |id: i32| {
        json!({
            "name": format!("node-{id}"), "type": "Node",
            "resources": [resource("cpu", "2"), resource("memory", "4Gi")]
        })
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
        "metadata": {"name": node,
                     "annotations": {"node.koordinator.sh/cpu-topology": cpu_topology}},
        "topologyPolicies": ["None"],
        "zones": [zone(0), zone(1)]
    }))?)
}

/// Deletes `node`'s NodeResourceTopology; absent is fine.
pub async fn delete_node_resource_topology(client: &Client, node: &str) -> Result<(), kube::Error> {
    match Api::<apis::topology::v1alpha1::NodeResourceTopology>::all(client.clone())
        .delete(node, &DeleteParams::background())
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

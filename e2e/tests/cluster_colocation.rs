//! Cluster end-to-end checks of an installed chart (hack/local-cluster, or
//! `hack/kind-e2e.sh`):
//! each test queries the cluster in `KUBECONFIG` and compares with what the
//! components must have produced. Without a cluster each test prints one
//! SKIP line and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use e2e::cluster::{
    KOORD_NAMESPACE, TestNamespace, eventually, key_values, pod, pod_logs_when_done, resource,
    worker_nodes,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[tokio::test]
async fn crds_are_established() -> anyhow::Result<()> {
    let Some(client) = e2e::cluster_or_skip("crds_are_established").await else {
        return Ok(());
    };
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for crd in apis::crds::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let current = api
            .get(&name)
            .await
            .with_context(|| format!("CRD {name}"))?;
        let established = current
            .status
            .and_then(|status| status.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        ensure!(established, "CRD {name} is not Established");
    }
    Ok(())
}

#[tokio::test]
async fn every_node_gets_a_nodeslo_and_a_nodemetric() -> anyhow::Result<()> {
    let Some(client) = e2e::cluster_or_skip("every_node_gets_a_nodeslo_and_a_nodemetric").await
    else {
        return Ok(());
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    ensure!(!names.is_empty(), "the cluster has no nodes");
    let slos: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("slo.koordinator.sh", "v1alpha1", "NodeSLO", "nodeslos"),
    );
    let metrics: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "slo.koordinator.sh",
            "v1alpha1",
            "NodeMetric",
            "nodemetrics",
        ),
    );
    for name in &names {
        eventually(&format!("NodeSLO {name}"), || async {
            Ok(slos.get_opt(name).await?.map(|_| ()))
        })
        .await?;
        // koordlet reports usage into the status the manager created.
        eventually(&format!("NodeMetric {name} with node usage"), || async {
            let Some(metric) = metrics.get_opt(name).await? else {
                return Ok(None);
            };
            let cpu = metric.data["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"].clone();
            Ok((!cpu.is_null()).then_some(()))
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn batch_resources_appear_on_node_allocatable() -> anyhow::Result<()> {
    let Some(client) = e2e::cluster_or_skip("batch_resources_appear_on_node_allocatable").await
    else {
        return Ok(());
    };
    let nodes: Api<Node> = Api::all(client.clone());
    for node in worker_nodes(&client).await? {
        let name = node.metadata.name.clone().unwrap_or_default();
        eventually(&format!("batch resources on {name}"), || async {
            let node = nodes.get(&name).await?;
            let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
            let cpu = allocatable.get("kubernetes.io/batch-cpu");
            let memory = allocatable.get("kubernetes.io/batch-memory");
            Ok(match (cpu, memory) {
                (Some(cpu), Some(memory)) => {
                    let cpu: i64 = cpu.0.parse().context("batch-cpu is an integer")?;
                    ensure!(cpu >= 0, "negative batch-cpu {cpu}");
                    ensure!(!memory.0.is_empty(), "empty batch-memory");
                    Some(())
                }
                _ => None,
            })
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn colocation_profile_turns_a_pod_into_a_batch_pod() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("colocation_profile_turns_a_pod_into_a_batch_pod").await
    else {
        return Ok(());
    };
    let namespace = TestNamespace::create(&client, "koord-e2e-profile").await?;
    let profiles: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "config.koordinator.sh",
            "v1alpha1",
            "ClusterColocationProfile",
            "clustercolocationprofiles",
        ),
    );
    let profile_name = format!("koord-e2e-{}", std::process::id());
    let profile: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "config.koordinator.sh/v1alpha1",
        "kind": "ClusterColocationProfile",
        "metadata": {"name": profile_name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace.name}},
            "selector": {"matchLabels": {"koord-e2e/colocate": "true"}},
            "qosClass": "BE",
            "priorityClassName": "koord-batch",
            "koordinatorPriority": 1111,
            "schedulerName": "koord-scheduler",
        }
    }))?;
    profiles.create(&PostParams::default(), &profile).await?;
    let result = async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);
        let candidate = pod(
            &namespace.name,
            "batch-candidate",
            json!({
                "metadata": {"labels": {"koord-e2e/colocate": "true"}},
                "spec": {"containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                                  "limits": {"cpu": "1", "memory": "128Mi"}}
                }]}
            }),
        )?;
        // The profile cache of the webhook follows a watch: retry creation.
        let created = eventually("profile applied at admission", || async {
            let _ = pods
                .delete("batch-candidate", &DeleteParams::default())
                .await;
            let created = pods.create(&PostParams::default(), &candidate).await?;
            let labels = created.metadata.labels.clone().unwrap_or_default();
            Ok(
                (labels.get("koordinator.sh/qosClass").map(String::as_str) == Some("BE"))
                    .then_some(created),
            )
        })
        .await?;
        let spec = created.spec.clone().unwrap_or_default();
        ensure!(spec.scheduler_name.as_deref() == Some("koord-scheduler"));
        ensure!(spec.priority_class_name.as_deref() == Some("koord-batch"));
        ensure!(spec.priority == Some(5000), "priority {:?}", spec.priority);
        let resources = spec.containers[0].resources.clone().unwrap_or_default();
        let requests = resources.requests.unwrap_or_default();
        let limits = resources.limits.unwrap_or_default();
        ensure!(
            requests
                .get("kubernetes.io/batch-cpu")
                .map(|q| q.0.as_str())
                == Some("500"),
            "requests {requests:?}"
        );
        ensure!(
            limits.get("kubernetes.io/batch-cpu").map(|q| q.0.as_str()) == Some("1k")
                || limits.get("kubernetes.io/batch-cpu").map(|q| q.0.as_str()) == Some("1000"),
            "limits {limits:?}"
        );
        ensure!(requests.contains_key("kubernetes.io/batch-memory"));
        ensure!(
            !requests.contains_key("cpu"),
            "cpu request kept: {requests:?}"
        );
        Ok(())
    }
    .await;
    let _ = profiles
        .delete(&profile_name, &DeleteParams::default())
        .await;
    result
}

#[tokio::test]
async fn be_pod_cgroup_gets_batch_limits_and_reduced_weight() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("be_pod_cgroup_gets_batch_limits_and_reduced_weight").await
    else {
        return Ok(());
    };
    let namespace = TestNamespace::create(&client, "koord-e2e-be").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);
    // Prints the container's own cgroup values on v1 or v2.
    let script = "if [ -f /sys/fs/cgroup/cpu.max ]; then \
        echo weight=$(cat /sys/fs/cgroup/cpu.weight); echo cpumax=$(cat /sys/fs/cgroup/cpu.max); \
        echo memory=$(cat /sys/fs/cgroup/memory.max); \
        else echo shares=$(cat /sys/fs/cgroup/cpu/cpu.shares); \
        echo quota=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us); \
        echo memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes); fi";
    let be = pod(
        &namespace.name,
        "be-batch",
        json!({
            "metadata": {"labels": {"koordinator.sh/qosClass": "BE"}},
            "spec": {
                "schedulerName": "koord-scheduler",
                "priorityClassName": "koord-batch",
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sh", "-c", script],
                    "resources": {
                        "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"},
                        "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "256Mi"}
                    }
                }]
            }
        }),
    )?;
    pods.create(&PostParams::default(), &be).await?;
    let values = key_values(&pod_logs_when_done(&pods, "be-batch").await?);
    ensure!(
        values.get("memory").map(String::as_str) == Some("268435456"),
        "memory limit {values:?}"
    );
    if let Some(shares) = values.get("shares") {
        // batch-cpu 500 → 512 shares (v1), quota 1000m → 100000 per 100ms.
        ensure!(shares == "512", "cpu.shares {shares}");
        ensure!(
            values.get("quota").map(String::as_str) == Some("100000"),
            "{values:?}"
        );
    } else {
        let weight: u64 = values.get("weight").context("cpu.weight")?.parse()?;
        // 512 shares map to weight 20 on v2, far below a burstable pod's 100.
        ensure!(weight < 100, "cpu.weight {weight} is not reduced");
        ensure!(
            values.get("cpumax").map(String::as_str) == Some("100000 100000"),
            "cpu.max {values:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn lsr_pod_gets_an_exclusive_cpuset() -> anyhow::Result<()> {
    let Some(client) = e2e::cluster_or_skip("lsr_pod_gets_an_exclusive_cpuset").await else {
        return Ok(());
    };
    // The scheduler picks CPUs from the topology koordlet reports on each
    // node's NodeResourceTopology; a node without one rejects the pod, so
    // wait until every schedulable node has reported.
    let topologies: Api<apis::topology::v1alpha1::NodeResourceTopology> = Api::all(client.clone());
    let workers = worker_nodes(&client).await?;
    ensure!(!workers.is_empty(), "no schedulable nodes");
    let mut reported = BTreeMap::new();
    for node in &workers {
        let name = node.metadata.name.clone().unwrap_or_default();
        let detail = eventually(
            &format!("NodeResourceTopology {name} with a CPU topology"),
            || async {
                let Some(nrt) = topologies.get_opt(&name).await? else {
                    return Ok(None);
                };
                let annotations = nrt.metadata.annotations.unwrap_or_default();
                Ok(apis::extension::get_cpu_topology(&annotations)?
                    .map(|topology| topology.detail)
                    .filter(|detail| !detail.is_empty()))
            },
        )
        .await?;
        reported.insert(name, detail);
    }
    let namespace = TestNamespace::create(&client, "koord-e2e-lsr").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);
    let script = "if [ -f /sys/fs/cgroup/cpuset.cpus.effective ]; then \
        echo cpus=$(cat /sys/fs/cgroup/cpuset.cpus.effective); \
        else echo cpus=$(cat /sys/fs/cgroup/cpuset/cpuset.cpus); fi";
    let lsr = pod(
        &namespace.name,
        "lsr",
        json!({
            "metadata": {
                "labels": {"koordinator.sh/qosClass": "LSR"},
                "annotations": {"scheduling.koordinator.sh/resource-spec": "{\"preferredCPUBindPolicy\":\"FullPCPUs\"}"}
            },
            "spec": {
                "schedulerName": "koord-scheduler",
                "priorityClassName": "koord-prod",
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sh", "-c", script],
                    "resources": {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}
                }]
            }
        }),
    )?;
    pods.create(&PostParams::default(), &lsr).await?;
    let values = key_values(&pod_logs_when_done(&pods, "lsr").await?);
    let pod = pods.get("lsr").await?;
    let status = pod
        .metadata
        .annotations
        .unwrap_or_default()
        .get("scheduling.koordinator.sh/resource-status")
        .cloned()
        .context("no resource-status annotation")?;
    let status: Value = serde_json::from_str(&status)?;
    let cpuset = status["cpuset"]
        .as_str()
        .context("no cpuset in resource-status")?;
    ensure!(!cpuset.is_empty(), "empty cpuset");
    ensure!(
        values.get("cpus").map(String::as_str) == Some(cpuset),
        "container cpuset {values:?} != scheduled {cpuset}"
    );
    // The CPUs came from the topology reported for the pod's node.
    let node_name = pod
        .spec
        .and_then(|spec| spec.node_name)
        .context("lsr pod has no node")?;
    let detail = reported
        .get(&node_name)
        .with_context(|| format!("no reported topology for node {node_name}"))?;
    let mut scheduled = Vec::new();
    for part in cpuset.split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let first: i32 = first
            .trim()
            .parse()
            .with_context(|| format!("cpuset {cpuset}"))?;
        let last: i32 = last
            .trim()
            .parse()
            .with_context(|| format!("cpuset {cpuset}"))?;
        scheduled.extend(first..=last);
    }
    ensure!(!scheduled.is_empty(), "cpuset {cpuset} names no CPU");
    for cpu in scheduled {
        ensure!(
            detail.iter().any(|info| info.id == cpu),
            "scheduled CPU {cpu} is not in the topology reported for {node_name}"
        );
    }
    Ok(())
}

async fn bound_count(pods: &Api<Pod>, names: &[String]) -> anyhow::Result<usize> {
    let mut bound = 0;
    for name in names {
        let pod = pods.get(name).await?;
        if pod.spec.and_then(|s| s.node_name).is_some() {
            bound += 1;
        }
    }
    Ok(bound)
}

fn gang_pod(namespace: &str, name: &str, gang: &str, cpu_milli: i64) -> anyhow::Result<Pod> {
    pod(
        namespace,
        name,
        json!({
            "metadata": {"annotations": {
                "gang.scheduling.koordinator.sh/name": gang,
                "gang.scheduling.koordinator.sh/min-available": "3",
            }},
            "spec": {
                "schedulerName": "koord-scheduler",
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": format!("{cpu_milli}m"), "memory": "16Mi"}}
                }]
            }
        }),
    )
}

#[tokio::test]
async fn gang_of_three_schedules_all_or_nothing() -> anyhow::Result<()> {
    let Some(client) = e2e::cluster_or_skip("gang_of_three_schedules_all_or_nothing").await else {
        return Ok(());
    };
    let workers = worker_nodes(&client).await?;
    ensure!(!workers.is_empty(), "no schedulable nodes");
    let namespace = TestNamespace::create(&client, "koord-e2e-gang").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);

    // A small gang fits: all three members are bound.
    let small: Vec<String> = (0..3).map(|i| format!("small-{i}")).collect();
    for name in &small {
        pods.create(
            &PostParams::default(),
            &gang_pod(&namespace.name, name, "small", 10)?,
        )
        .await?;
    }
    eventually("small gang bound", || async {
        Ok((bound_count(&pods, &small).await? == 3).then_some(()))
    })
    .await?;

    // A gang whose members each need more than half of the largest node's
    // CPU: at most one per node fits, so with fewer than three schedulable
    // nodes none may be bound.
    if workers.len() >= 3 {
        eprintln!(
            "SKIP part of gang test: {} schedulable nodes can hold the big gang",
            workers.len()
        );
        return Ok(());
    }
    let largest_milli = workers
        .iter()
        .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get("cpu").cloned())
        .filter_map(|q| parse_cpu_milli(&q.0))
        .max()
        .context("no node reports allocatable cpu")?;
    let big: Vec<String> = (0..3).map(|i| format!("big-{i}")).collect();
    for name in &big {
        pods.create(
            &PostParams::default(),
            &gang_pod(&namespace.name, name, "big", largest_milli * 6 / 10)?,
        )
        .await?;
    }
    // Give the scheduler several rounds, then check nothing was bound.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let bound = bound_count(&pods, &big).await?;
    ensure!(
        bound == 0,
        "{bound} members of an incomplete gang were bound"
    );
    Ok(())
}

fn parse_cpu_milli(text: &str) -> Option<i64> {
    match text.strip_suffix('m') {
        Some(milli) => milli.parse().ok(),
        None => text.parse::<i64>().ok().map(|cores| cores * 1000),
    }
}

/// The webhook's denial of a dry-run merge patch of `slo-controller-config`
/// (retried until the webhook answers: it may still be starting).
async fn dry_run_denial(configs: &Api<ConfigMap>, patch: &Value) -> anyhow::Result<String> {
    let params = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    eventually("the webhook refuses the config", || async {
        match configs
            .patch("slo-controller-config", &params, &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(None),
            Err(error) => Ok(Some(error.to_string())),
        }
    })
    .await
}

#[tokio::test]
async fn invalid_slo_controller_config_is_rejected() -> anyhow::Result<()> {
    let Some(client) = e2e::cluster_or_skip("invalid_slo_controller_config_is_rejected").await
    else {
        return Ok(());
    };
    let api: Api<ConfigMap> = Api::namespaced(client, KOORD_NAMESPACE);
    let patch = json!({"data": {"resource-threshold-config":
        "{\"clusterStrategy\":{\"enable\":true,\"cpuSuppressThresholdPercent\":250}}"}});
    let error = dry_run_denial(&api, &patch).await?;
    ensure!(
        error.contains("cpuSuppressThresholdPercent"),
        "denial does not name the field: {error}"
    );
    // A valid change still passes (dry run: nothing is stored).
    let valid = json!({"data": {"resource-threshold-config":
        "{\"clusterStrategy\":{\"enable\":true,\"cpuSuppressThresholdPercent\":60}}"}});
    let params = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    api.patch("slo-controller-config", &params, &Patch::Merge(&valid))
        .await
        .context("a valid slo-controller-config was refused")?;
    Ok(())
}

/// (ours) `cpu-latency-protection-config` end to end: the ConfigMap webhook
/// refuses a bad value naming the field, and a valid one reaches every
/// node's NodeSLO as the `cpuLatencyProtection` extension. The strategy is
/// rendered disabled, so the koordlets do not start sizing BE by it while
/// the rest of the suite runs; the key is removed afterwards (the extension
/// then stays as rendered, as upstream leaves extensions without a key).
#[tokio::test]
async fn latency_protection_config_reaches_every_nodeslo() -> anyhow::Result<()> {
    let test = "latency_protection_config_reaches_every_nodeslo";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    const KEY: &str = "cpu-latency-protection-config";
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let bad = json!({"data": {KEY: "{\"clusterStrategy\":{\"enable\":true,\"targetWaitPercent\":5000}}"}});
    let denial = dry_run_denial(&configs, &bad).await?;
    ensure!(
        denial.contains("cpu-latency-protection-config.clusterStrategy")
            && denial.contains("targetWaitPercent"),
        "the denial does not name the field: {denial}"
    );

    let strategy = json!({"enable": false, "targetWaitPercent": 37, "minBECPUPercent": 7});
    let set_key = |value: Value| {
        let configs = configs.clone();
        async move {
            configs
                .patch(
                    "slo-controller-config",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"data": {KEY: value}})),
                )
                .await
        }
    };
    set_key(json!({"clusterStrategy": strategy}).to_string().into())
        .await
        .context("a valid latency key was refused")?;
    let slos: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("slo.koordinator.sh", "v1alpha1", "NodeSLO", "nodeslos"),
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let result = async {
        ensure!(!names.is_empty(), "the cluster has no nodes");
        for name in &names {
            eventually(
                &format!("NodeSLO {name} with cpuLatencyProtection"),
                || async {
                    let Some(slo) = slos.get_opt(name).await? else {
                        return Ok(None);
                    };
                    let rendered =
                        &slo.data["spec"]["extensions"]["Object"]["cpuLatencyProtection"];
                    Ok((*rendered == strategy).then_some(()))
                },
            )
            .await?;
        }
        Ok(())
    }
    .await;
    set_key(Value::Null)
        .await
        .context("removing the latency key")?;
    result
}

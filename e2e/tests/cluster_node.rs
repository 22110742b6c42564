//! Cluster end-to-end checks of koordlet on the node (hack/local-cluster in `.ci/run`): memory
//! eviction through the Eviction API under a PodDisruptionBudget, and restarts of koordlet and
//! containerd under running pods. They change koordlet's DaemonSet, the cluster's
//! slo-controller-config and the node's load, so they run one at a time and restore what they
//! changed. Without a cluster each prints a SKIP line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use e2e::cluster::{
    EXTENDER_RETRY, KOORD_NAMESPACE, NODE_LOAD, THRESHOLD_KEY, TestNamespace, component_pods,
    eventually, eventually_within, key_values, node_file_watcher, node_of, pod, pod_cgroup_dir,
    pod_logs_when_done, running_pod, running_pod_within, set_threshold_config, watched_values,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// koordlet's container args in its DaemonSet.
async fn koordlet_args(daemonsets: &Api<DaemonSet>) -> anyhow::Result<Vec<String>> {
    let daemonset = daemonsets.get("koordlet").await?;
    daemonset
        .spec
        .and_then(|spec| spec.template.spec)
        .and_then(|spec| spec.containers.into_iter().find(|c| c.name == "koordlet"))
        .and_then(|container| container.args)
        .context("koordlet DaemonSet has no koordlet container args")
}

/// Rolls koordlet out with `args` and waits until every node runs the new pod, Ready.
async fn roll_koordlet(
    client: &Client,
    daemonsets: &Api<DaemonSet>,
    args: &[String],
) -> anyhow::Result<()> {
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "koordlet", "args": args}
    ]}}}});
    daemonsets
        .patch(
            "koordlet",
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await?;
    eventually("koordlet rolled out", || async {
        let daemonset = daemonsets.get("koordlet").await?;
        let generation = daemonset.metadata.generation.unwrap_or(0);
        let status = daemonset.status.unwrap_or_default();
        let done = status.observed_generation.unwrap_or(0) >= generation
            && status.updated_number_scheduled.unwrap_or(0) == status.desired_number_scheduled
            && status.number_available.unwrap_or(0) == status.desired_number_scheduled;
        Ok(done.then_some(()))
    })
    .await?;
    ensure!(
        !component_pods(client, "koordlet").await?.is_empty(),
        "no koordlet pod after the rollout"
    );
    Ok(())
}

/// koordlet's args with one feature gate set.
fn with_gate(args: &[String], gate: &str, on: bool) -> anyhow::Result<Vec<String>> {
    let mut found = false;
    let args = args
        .iter()
        .map(|arg| match arg.strip_prefix("--feature-gates=") {
            Some(gates) => {
                found = true;
                let mut gates: Vec<String> = gates
                    .split(',')
                    .filter(|g| !g.is_empty() && !g.starts_with(&format!("{gate}=")))
                    .map(str::to_string)
                    .collect();
                gates.push(format!("{gate}={on}"));
                format!("--feature-gates={}", gates.join(","))
            }
            None => arg.clone(),
        })
        .collect();
    ensure!(found, "koordlet has no --feature-gates argument");
    Ok(args)
}

/// Node memory in use, as koordlet's memoryevict computes it: (MemTotal − MemAvailable), and
/// MemTotal, in bytes, read by a pod on `node` (/proc/meminfo is the host's in a container).
async fn node_memory(pods: &Api<Pod>, namespace: &str, node: &str) -> anyhow::Result<(u64, u64)> {
    let name = format!("meminfo-{}", std::process::id() % 100_000);
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
    eventually("old meminfo pod gone", || async {
        Ok(pods.get_opt(&name).await?.is_none().then_some(()))
    })
    .await?;
    let reader = pod(
        namespace,
        &name,
        json!({"spec": {
            "nodeName": node, "restartPolicy": "Never",
            "containers": [{"name": "cat", "image": e2e::busybox_image(),
                "command": ["sh", "-c", "awk '{print $1 \"=\" $2}' /proc/meminfo | tr -d :"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
        }}),
    )?;
    pods.create(&PostParams::default(), &reader).await?;
    let values = key_values(&pod_logs_when_done(pods, &name).await?);
    let kib = |key: &str| -> anyhow::Result<u64> {
        values
            .get(key)
            .with_context(|| format!("no {key} in /proc/meminfo"))?
            .parse::<u64>()
            .with_context(|| format!("{key} in /proc/meminfo"))
    };
    let total = kib("MemTotal")? * 1024;
    let available = kib("MemAvailable")? * 1024;
    Ok((total.saturating_sub(available), total))
}

fn percent(used: u64, total: u64) -> u64 {
    used * 100 / total.max(1)
}

fn be_memory_pod(namespace: &str, name: &str, fill_mib: u64) -> anyhow::Result<Pod> {
    let script = format!(
        "dd if=/dev/zero of=/fill/data bs=1M count={fill_mib} 2>/dev/null && echo filled=1 && \
         sleep 3600"
    );
    pod(
        namespace,
        name,
        json!({
            "metadata": {"labels": {"koordinator.sh/qosClass": "BE", "app": "be-mem"}},
            "spec": {
                "schedulerName": "koord-scheduler",
                "priorityClassName": "koord-batch",
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sh", "-c", script],
                    "resources": {
                        "requests": {"kubernetes.io/batch-cpu": "50",
                                     "kubernetes.io/batch-memory": format!("{}Mi", fill_mib + 64)},
                        "limits": {"kubernetes.io/batch-cpu": "500",
                                   "kubernetes.io/batch-memory": format!("{}Mi", fill_mib + 256)}
                    },
                    "volumeMounts": [{"name": "fill", "mountPath": "/fill"}]
                }],
                // tmpfs pages count as the pod's memory and as node memory in use.
                "volumes": [{"name": "fill", "emptyDir": {"medium": "Memory",
                                                         "sizeLimit": format!("{}Mi", fill_mib + 128)}}]
            }
        }),
    )
}

/// Whether the pod is gone or on its way out (the Eviction API deletes it).
async fn leaving(pods: &Api<Pod>, name: &str) -> anyhow::Result<bool> {
    Ok(match pods.get_opt(name).await? {
        None => true,
        Some(pod) => {
            pod.metadata.deletion_timestamp.is_some()
                || matches!(
                    pod.status.and_then(|s| s.phase).as_deref(),
                    Some("Failed") | Some("Succeeded")
                )
        }
    })
}

#[tokio::test]
async fn be_memory_eviction_uses_the_eviction_api_and_honours_a_pdb() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("be_memory_eviction_uses_the_eviction_api_and_honours_a_pdb").await
    else {
        return Ok(());
    };
    let _serial = NODE_LOAD.lock().await;
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let original_args = koordlet_args(&daemonsets).await?;
    let original_threshold = configs
        .get("slo-controller-config")
        .await?
        .data
        .unwrap_or_default()
        .get(THRESHOLD_KEY)
        .cloned();
    let namespace = TestNamespace::create(&client, "koord-e2e-evict").await?;
    let result = async {
        // The chart turns BEMemoryEvict on (as upstream's chart; koordlet's own default is off);
        // set it anyway, so the test does not depend on the values it was installed with.
        roll_koordlet(
            &client,
            &daemonsets,
            &with_gate(&original_args, "BEMemoryEvict", true)?,
        )
        .await?;
        memory_eviction(&client, &namespace.name, &configs).await
    }
    .await;
    let restored_config = set_threshold_config(&configs, original_threshold.as_deref()).await;
    let restored_koordlet = roll_koordlet(&client, &daemonsets, &original_args).await;
    result.and(restored_config).and(restored_koordlet)
}

async fn memory_eviction(
    client: &Client,
    namespace: &str,
    configs: &Api<ConfigMap>,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let node = component_pods(client, "koordlet")
        .await?
        .first()
        .map(node_of)
        .context("no koordlet pod")??;
    let (used_before, total) = node_memory(&pods, namespace, &node).await?;
    // Each pod fills 6 % of the node's memory: both together are far above the threshold set
    // below, one alone still above it.
    let fill_mib = total * 6 / 100 / (1 << 20);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), namespace);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "be-mem"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "be-mem"}}}
    }))?;
    pdbs.create(&PostParams::default(), &pdb).await?;
    let names = ["be-mem-0", "be-mem-1"];
    for name in names {
        pods.create(
            &PostParams::default(),
            &be_memory_pod(namespace, name, fill_mib)?,
        )
        .await?;
    }
    for name in names {
        running_pod_within(&pods, name, EXTENDER_RETRY).await?;
        eventually(&format!("{name} filled its memory"), || async {
            let log = pods.logs(name, &Default::default()).await?;
            Ok(log.contains("filled=1").then_some(()))
        })
        .await?;
    }
    let (used_after, _) = node_memory(&pods, namespace, &node).await?;
    let threshold = percent(used_before, total) + 3;
    eprintln!(
        "node memory in use: {}% before, {}% with both pods; memoryEvictThresholdPercent {threshold}",
        percent(used_before, total),
        percent(used_after, total)
    );
    ensure!(
        percent(used_after, total) >= threshold + 3,
        "the pods did not raise node memory enough ({}% → {}%)",
        percent(used_before, total),
        percent(used_after, total)
    );
    let config =
        json!({"clusterStrategy": {"enable": true, "memoryEvictThresholdPercent": threshold}});
    set_threshold_config(configs, Some(&config.to_string())).await?;

    // koordlet must release both pods' memory, but the budget allows one eviction only.
    let first = eventually("one BE pod evicted", || async {
        for name in names {
            if leaving(&pods, name).await? {
                return Ok(Some(name));
            }
        }
        Ok(None)
    })
    .await?;
    let second = names.iter().copied().find(|n| *n != first).unwrap_or(first);
    tokio::time::sleep(Duration::from_secs(20)).await;
    ensure!(
        !leaving(&pods, second).await?,
        "{second} was evicted although the PodDisruptionBudget allowed one eviction only"
    );
    // The refusal came from the budget: without it the second pod goes too.
    pdbs.delete("be-mem", &DeleteParams::default()).await?;
    eventually(
        &format!("{second} evicted once the budget is gone"),
        || async { Ok(leaving(&pods, second).await?.then_some(())) },
    )
    .await?;
    // Through the Eviction API: koordlet records the outcome of each call as an Event on the
    // pod, and the budget's refusal (429) of the second pod is one of them. koordlet posts the
    // Event after the Eviction call returns, so the pod can be seen leaving before its Event
    // exists: wait for the Events rather than reading them once.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace);
    let outcomes_of_be_pods = || async {
        let outcomes: Vec<(String, String)> = events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|e| Some((e.involved_object.name?, e.reason?)))
            .filter(|(name, _)| name.starts_with("be-mem"))
            .collect();
        anyhow::Ok(outcomes)
    };
    let has = |outcomes: &[(String, String)], pod: &str, reason: &str| {
        outcomes.iter().any(|(n, r)| n == pod && r == reason)
    };
    let complete = eventually_within(
        "evictPodSuccess events for both BE pods",
        Duration::from_secs(60),
        || async {
            let outcomes = outcomes_of_be_pods().await?;
            Ok((has(&outcomes, first, "evictPodSuccess")
                && has(&outcomes, second, "evictPodSuccess"))
            .then_some(outcomes))
        },
    )
    .await;
    let outcomes = match complete {
        Ok(outcomes) => outcomes,
        Err(_) => {
            let outcomes = outcomes_of_be_pods().await?;
            anyhow::bail!("no evictPodSuccess event for both pods: {outcomes:?}");
        }
    };
    eprintln!("eviction events of the BE pods: {outcomes:?}");
    ensure!(
        has(&outcomes, second, "evictPodFail"),
        "the PodDisruptionBudget's refusal of {second} was not seen by koordlet: {outcomes:?}"
    );
    Ok(())
}

/// The BE container's cgroup values as `shares`, `quota`, `memory`.
fn container_files(pod_dir: &str, container_id: &str) -> Vec<(String, String)> {
    vec![
        (
            "shares".into(),
            format!("/sys/fs/cgroup/cpu{pod_dir}/{container_id}/cpu.shares"),
        ),
        (
            "quota".into(),
            format!("/sys/fs/cgroup/cpu{pod_dir}/{container_id}/cpu.cfs_quota_us"),
        ),
        (
            "memory".into(),
            format!("/sys/fs/cgroup/memory{pod_dir}/{container_id}/memory.limit_in_bytes"),
        ),
    ]
}

fn container_id(pod: &Pod) -> anyhow::Result<(String, i32)> {
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|statuses| statuses.first())
        .context("no container status")?;
    let id = status
        .container_id
        .as_deref()
        .and_then(|id| id.split_once("://").map(|(_, id)| id.to_string()))
        .context("no container id")?;
    Ok((id, status.restart_count))
}

/// Writes `value` into a node file through a short-lived pod (what a stray process on the node
/// could do to a container's cgroup).
async fn write_node_file(
    pods: &Api<Pod>,
    namespace: &str,
    node: &str,
    path: &str,
    value: &str,
    attempt: u32,
) -> anyhow::Result<()> {
    let name = format!("writer-{attempt}");
    let writer = pod(
        namespace,
        &name,
        json!({"spec": {
            "nodeName": node, "restartPolicy": "Never",
            "containers": [{"name": "w", "image": e2e::busybox_image(),
                "command": ["sh", "-c", format!("echo {value} > /host{path} && echo written=1")],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "volumeMounts": [{"name": "cgroup", "mountPath": "/host/sys/fs/cgroup"}]}],
            "volumes": [{"name": "cgroup", "hostPath": {"path": "/sys/fs/cgroup"}}]
        }}),
    )?;
    pods.create(&PostParams::default(), &writer).await?;
    let log = pod_logs_when_done(pods, &name).await?;
    ensure!(log.contains("written=1"), "write to {path} failed: {log}");
    Ok(())
}

async fn wait_values(
    pods: &Api<Pod>,
    what: &str,
    expected: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    eventually(what, || async {
        let Some(values) = watched_values(pods, "cg-watch").await? else {
            return Ok(None);
        };
        let matches = expected.iter().all(|(k, v)| values.get(k) == Some(v));
        Ok(matches.then_some(()))
    })
    .await
}

#[tokio::test]
async fn koordlet_and_containerd_restarts_keep_pods_and_restore_cgroups() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("koordlet_and_containerd_restarts_keep_pods_and_restore_cgroups")
            .await
    else {
        return Ok(());
    };
    let _serial = NODE_LOAD.lock().await;
    let namespace = TestNamespace::create(&client, "koord-e2e-restart").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);
    let be = |name: &str| {
        pod(
            &namespace.name,
            name,
            json!({
                "metadata": {"labels": {"koordinator.sh/qosClass": "BE"}},
                "spec": {
                    "schedulerName": "koord-scheduler",
                    "priorityClassName": "koord-batch",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "main", "image": e2e::busybox_image(),
                        "command": ["sh", "-c", "echo shares=$(cat /sys/fs/cgroup/cpu/cpu.shares); echo end=1; sleep 3600"],
                        "resources": {
                            "requests": {"kubernetes.io/batch-cpu": "100", "kubernetes.io/batch-memory": "64Mi"},
                            "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "128Mi"}
                        }
                    }]
                }
            }),
        )
    };
    pods.create(&PostParams::default(), &be("be-steady")?)
        .await?;
    let steady = running_pod_within(&pods, "be-steady", EXTENDER_RETRY).await?;
    let node = node_of(&steady)?;
    let (id, restarts) = container_id(&steady)?;
    let pod_dir = pod_cgroup_dir(&steady)?;
    let files = container_files(&pod_dir, &id);
    let file_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(k, p)| (k.as_str(), p.as_str()))
        .collect();
    pods.create(
        &PostParams::default(),
        &node_file_watcher(&namespace.name, "cg-watch", &node, &file_refs)?,
    )
    .await?;
    running_pod(&pods, "cg-watch").await?;
    // What koordlet gave the BE container (batch-cpu 100 → 102 shares; the 1000 limit → 100000
    // per 100 ms unless BE is suppressed by quota; 128 MiB).
    let expected: BTreeMap<String, String> = [("shares", "102"), ("memory", "134217728")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    wait_values(&pods, "the BE container's batch values", &expected).await?;
    let shares_path = &files[0].1;

    // koordlet restarts: a drift made while it is away is repaired by the new instance.
    let daemon_pods: Api<Pod> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let old = component_pods(&client, "koordlet").await?;
    let old_name = old
        .iter()
        .find(|p| node_of(p).ok().as_deref() == Some(node.as_str()))
        .and_then(|p| p.metadata.name.clone())
        .context("no koordlet on the BE pod's node")?;
    daemon_pods
        .delete(&old_name, &DeleteParams::default())
        .await?;
    write_node_file(&pods, &namespace.name, &node, shares_path, "2", 1).await?;
    eventually("a new koordlet Ready on the node", || async {
        let new = component_pods(&client, "koordlet").await?;
        Ok(new
            .iter()
            .any(|p| {
                p.metadata.name.as_deref() != Some(old_name.as_str())
                    && node_of(p).ok().as_deref() == Some(node.as_str())
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .then_some(()))
    })
    .await?;
    wait_values(
        &pods,
        "cpu.shares repaired after the koordlet restart",
        &expected,
    )
    .await?;
    let after = pods.get("be-steady").await?;
    ensure!(
        container_id(&after)? == (id.clone(), restarts),
        "the BE container was replaced or restarted by the koordlet restart"
    );

    // containerd restarts (local cluster only: the test runs on the node).
    let Ok(script) = std::env::var("KOORD_E2E_LOCAL_CLUSTER") else {
        eprintln!(
            "SKIP containerd restart: KOORD_E2E_LOCAL_CLUSTER is not set (not hack/local-cluster)"
        );
        return Ok(());
    };
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .args([script.as_str(), "restart", "containerd"])
            .output()
    })
    .await?
    .context("running the local cluster's restart")?;
    if !output.status.success() {
        bail!(
            "restart containerd failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    wait_values(
        &pods,
        "cgroup values after the containerd restart",
        &expected,
    )
    .await?;
    let after = pods.get("be-steady").await?;
    ensure!(
        container_id(&after)? == (id, restarts),
        "the BE container was replaced or restarted by the containerd restart"
    );
    ensure!(
        after.status.and_then(|s| s.phase).as_deref() == Some("Running"),
        "the BE pod stopped"
    );
    // koordlet's NRI plugin found the new containerd: a new BE container is born with its values.
    pods.create(&PostParams::default(), &be("be-after")?)
        .await?;
    running_pod_within(&pods, "be-after", EXTENDER_RETRY).await?;
    let born = eventually("be-after printed its cpu.shares", || async {
        let log = pods.logs("be-after", &Default::default()).await?;
        Ok(log.contains("end=1").then(|| key_values(&log)))
    })
    .await?;
    ensure!(
        born.get("shares").map(String::as_str) == Some("102"),
        "a container created after the containerd restart was born with {born:?}: koordlet's \
         NRI plugin did not reconnect"
    );
    Ok(())
}

//! The scale benchmark's harness (run it through `hack/bench-cluster-scale.sh`): simulated
//! nodes on the local cluster (KWOK keeps them Ready and "runs" their pods), the objects
//! koordlet and the other controllers would write for them, and timed scheduling and manager
//! runs against the real API server.
//!
//! Parts (every option takes a value):
//! - `nodes --prefix P --count N [--ready-timeout S]`: Nodes (32 CPUs, 128 GiB, 110 pods,
//!   KWOK's annotation and taint), a NodeMetric per node, a NodeResourceTopology with a CPU
//!   topology on every 5th and a Device with 8 GPUs on every 10th; waits up to S seconds (by
//!   default 180 + N/10) until they are all Ready and rid of the not-ready taint, or not at all
//!   with 0.
//! - `converge --prefix P --count N [--manager-pid PID] [--manager-pod POD] [--timeout S]`:
//!   writes a fresh NodeMetric status for every node, then times how long until every Node
//!   carries `kubernetes.io/batch-cpu` allocatable; reports the node-status writes the API
//!   server counted meanwhile (every writer), with the leading manager's pod the writes it
//!   counted itself, and with its pid its CPU, RSS and transmitted bytes.
//! - `heartbeat --prefix P --count N [--interval S]`: rewrites every NodeMetric status each
//!   interval (koordlet's default report interval is 60 s), as the node agents would.
//! - `schedule --scheduler NAME --namespace NS --pods N [--rate R] [--timeout S]
//!   [--extender-pods a,b] [--reserve 1]`: creates the pods (a fixed mix, below) for scheduler
//!   NAME, as fast as the API server takes them (`--rate 0`) or paced at R pods/s, and reports
//!   pods/s from the first creation to the last binding, and per-pod latency (creation answered
//!   → binding seen on a watch) percentiles; with the extender's pods, its share of that time
//!   from its own `scheduler_framework_extension_point_duration_seconds`. With `--reserve 1`
//!   it first creates one Reservation per reservation-owner pod of the mix, for scheduler NAME,
//!   waits until the scheduler has placed them, and reports how many owner pods were bound into
//!   one. Deletes the pods and Reservations afterwards. With several schedulers
//!   (`--scheduler a,b`) the run interleaves them: every pod of the mix is created once for
//!   each, back to back, R being the rate of all creations together, and each gets its own
//!   row (the extender's figures go to `--extender-scheduler`, by default the first).
//! - `reporters [--seconds S]`: the NodeMetric and NodeResourceTopology writes the real
//!   koordlets make over S seconds, per 1,000 nodes.
//! - `cleanup --prefix P`: removes what `nodes` made.
//!
//! Output: one JSON object per run on stdout (the script makes the table); progress on stderr.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use koord_common::testing::Lcg;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::Mutex;

const USAGE: &str =
    "usage: koord-scale-bench nodes|converge|heartbeat|schedule|cleanup [--key value ...]
  nodes     --prefix P --count N [--ready-timeout S]
  converge  --prefix P --count N [--manager-pid PID] [--manager-pod POD] [--timeout S]
  heartbeat --prefix P --count N [--interval S]
  schedule  --scheduler NAME[,NAME...] --namespace NS --pods N [--rate PODS_PER_S] [--timeout S]
            [--extender-pods POD,POD] [--extender-scheduler NAME] [--label TEXT] [--reserve 0|1]
  reporters [--seconds S]
  cleanup   --prefix P";

/// The annotation and taint key KWOK manages nodes by (hack/local-cluster/lib.sh).
const KWOK_KEY: &str = "kwok.x-k8s.io/node";
/// Every object this harness makes carries this label, so `cleanup` finds leftovers.
const SCALE_LABEL: &str = "koord-scale-bench";
/// Requests in flight at once when creating objects.
const CONCURRENCY: usize = 32;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some(
            part @ ("nodes" | "converge" | "heartbeat" | "schedule" | "reporters" | "cleanup"),
        ) => match Options::parse(&args[1..]) {
            Ok(options) => run(part, &options).await,
            Err(err) => Err(err),
        },
        _ => Err(anyhow::anyhow!("{USAGE}")),
    };
    if let Err(err) = result {
        eprintln!("koord-scale-bench: {err:#}");
        std::process::exit(2);
    }
}

async fn run(part: &str, options: &Options) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("no cluster (KUBECONFIG)")?;
    let report = match part {
        "nodes" => make_nodes(&client, options).await?,
        "converge" => converge(&client, options).await?,
        "heartbeat" => heartbeat(&client, options).await?,
        "schedule" => schedule(&client, options).await?,
        "reporters" => reporters(&client, options).await?,
        "cleanup" => cleanup(&client, options).await?,
        _ => unreachable!("matched in main"),
    };
    // One line per run (interleaved schedulers make a row each).
    match report {
        Value::Array(rows) => rows.iter().for_each(|row| println!("{row}")),
        row => println!("{row}"),
    }
    Ok(())
}

/// `--key value` pairs.
struct Options(HashMap<String, String>);

impl Options {
    fn parse(args: &[String]) -> anyhow::Result<Self> {
        let mut map = HashMap::new();
        let mut iter = args.iter();
        while let Some(key) = iter.next() {
            let Some(name) = key.strip_prefix("--") else {
                bail!("unexpected argument {key:?}\n{USAGE}");
            };
            let value = iter
                .next()
                .with_context(|| format!("--{name} needs a value"))?;
            map.insert(name.to_string(), value.clone());
        }
        Ok(Self(map))
    }

    fn text(&self, key: &str) -> anyhow::Result<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("--{key} is required\n{USAGE}"))
    }

    fn number(&self, key: &str, default: Option<u64>, max: u64) -> anyhow::Result<u64> {
        let value = match (self.0.get(key), default) {
            (Some(text), _) => text
                .parse()
                .with_context(|| format!("--{key} {text:?} is not a number"))?,
            (None, Some(default)) => default,
            (None, None) => bail!("--{key} is required\n{USAGE}"),
        };
        ensure!(value <= max, "--{key} {value} is above {max}");
        Ok(value)
    }

    /// A name prefix for generated objects: a DNS label start.
    fn prefix(&self) -> anyhow::Result<String> {
        let prefix = self.text("prefix")?;
        ensure!(
            !prefix.is_empty()
                && prefix.len() <= 40
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && prefix.as_bytes()[0].is_ascii_lowercase()
                && !prefix.ends_with('-'),
            "--prefix {prefix:?}: lowercase letters, digits and '-', from a letter to a letter or digit, at most 40"
        );
        Ok(prefix.to_string())
    }
}

fn node_name(prefix: &str, index: u64) -> String {
    format!("{prefix}-{index:05}")
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    e2e::cluster::resource(group, version, kind, plural)
}

fn node_metrics(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource(
            "slo.koordinator.sh",
            "v1alpha1",
            "NodeMetric",
            "nodemetrics",
        ),
    )
}

fn topologies(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource(
            "topology.node.k8s.io",
            "v1alpha1",
            "NodeResourceTopology",
            "noderesourcetopologies",
        ),
    )
}

fn devices(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource("scheduling.koordinator.sh", "v1alpha1", "Device", "devices"),
    )
}

fn reservations(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource(
            "scheduling.koordinator.sh",
            "v1alpha1",
            "Reservation",
            "reservations",
        ),
    )
}

fn elastic_quotas(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &resource(
            "scheduling.sigs.k8s.io",
            "v1alpha1",
            "ElasticQuota",
            "elasticquotas",
        ),
    )
}

/// A creation's result, with "already exists" taken as done (a rerun after an interrupted one).
fn created<T>(result: Result<T, kube::Error>) -> anyhow::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

fn dynamic(value: Value) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(value)?)
}

/// A 32-CPU topology: 1 socket, 2 NUMA nodes, 2 threads per core.
fn cpu_topology() -> String {
    let detail: Vec<Value> = (0..32)
        .map(|id| {
            let core = id % 16;
            json!({"id": id, "core": core, "socket": 0, "node": core / 8})
        })
        .collect();
    json!({"detail": detail}).to_string()
}

async fn make_node(client: &Client, prefix: &str, index: u64) -> anyhow::Result<()> {
    let name = node_name(prefix, index);
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {KWOK_KEY: "fake"},
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "type": "kwok", SCALE_LABEL: prefix,
                "topology.kubernetes.io/zone": format!("zone-{}", index % 3)
            }
        },
        "spec": {"taints": [{"key": KWOK_KEY, "value": "fake", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}
        }
    }))?;
    created(
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await,
    )
    .with_context(|| format!("node {name}"))?;
    let labels = json!({SCALE_LABEL: prefix});
    created(
        node_metrics(client)
            .create(
                &PostParams::default(),
                &dynamic(json!({
                    "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"collectPolicy": {"reportIntervalSeconds": 60}}
                }))?,
            )
            .await,
    )
    .with_context(|| format!("NodeMetric {name}"))?;
    if index.is_multiple_of(5) {
        created(
            topologies(client)
                .create(&PostParams::default(), &dynamic(json!({
                "apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
                "metadata": {"name": name, "labels": labels,
                             "annotations": {"node.koordinator.sh/cpu-topology": cpu_topology()}},
                "topologyPolicies": ["None"],
                "zones": []
            }))?)
            .await,
        )
        .with_context(|| format!("NodeResourceTopology {name}"))?;
    }
    if index.is_multiple_of(10) {
        let gpus: Vec<Value> = (0..8)
            .map(|minor| {
                json!({"type": "gpu", "id": format!("GPU-{name}-{minor}"), "minor": minor,
                       "health": true,
                       "resources": {"koordinator.sh/gpu-core": "100",
                                     "koordinator.sh/gpu-memory": "80Gi",
                                     "koordinator.sh/gpu-memory-ratio": "100"}})
            })
            .collect();
        created(
            devices(client)
                .create(
                    &PostParams::default(),
                    &dynamic(json!({
                        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
                        "metadata": {"name": name, "labels": labels},
                        "spec": {"devices": gpus}
                    }))?,
                )
                .await,
        )
        .with_context(|| format!("Device {name}"))?;
    }
    Ok(())
}

/// Ready, and no longer carrying the taints the API server and the node lifecycle controller
/// put on a node that is not (yet) Ready: kube-controller-manager removes those one node at a
/// time under its client limit, minutes after KWOK reports 5,000 nodes Ready, and until then
/// no pod without a toleration fits there.
fn node_ready(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
    let tainted = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| {
            taints.iter().any(|t| {
                t.key == "node.kubernetes.io/not-ready" || t.key == "node.kubernetes.io/unreachable"
            })
        });
    ready && !tainted
}

/// The names of the objects `selector` finds (metadata only: the harness deletes by name).
async fn names_of<K>(api: &Api<K>, selector: &ListParams) -> kube::Result<Vec<String>>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list_metadata(selector)
        .await?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect())
}

fn scale_nodes(prefix: &str) -> ListParams {
    ListParams::default().labels(&format!("{SCALE_LABEL}={prefix}"))
}

async fn make_nodes(client: &Client, options: &Options) -> anyhow::Result<Value> {
    let prefix = options.prefix()?;
    let count = options.number("count", None, 20_000)?;
    let started = Instant::now();
    futures::stream::iter(0..count)
        .map(|index| make_node(client, &prefix, index))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let created = started.elapsed();
    eprintln!("{count} nodes and their objects created in {created:.1?}");
    // 0: do not wait for KWOK (the manager's convergence does not need Ready nodes).
    // The default leaves room for kube-controller-manager lifting the not-ready taints, which
    // took 270 s after creation at 5,000 nodes and over 60 s for 10 of 50 reused node names.
    let ready_timeout = options.number("ready-timeout", Some(180 + count / 10), 86_400)?;
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(ready_timeout);
    if ready_timeout > 0 {
        loop {
            let list = nodes.list(&scale_nodes(&prefix)).await?;
            let ready = list.items.iter().filter(|n| node_ready(n)).count() as u64;
            if ready >= count {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "only {ready} of {count} simulated nodes Ready and untainted (is kwok running?)"
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    Ok(json!({
        "part": "nodes", "nodes": count,
        "created_seconds": created.as_secs_f64(),
        "ready_seconds": (ready_timeout > 0).then(|| started.elapsed().as_secs_f64())
    }))
}

/// A NodeMetric status as koordlet reports it: node usage between 10 % and 40 % of the node,
/// no pods (the simulated nodes' pods use nothing).
fn metric_status(rng: &mut Lcg) -> Value {
    let usage = json!({"cpu": format!("{}m", 3200 + rng.below(9600)),
                       "memory": format!("{}Mi", 13_000 + rng.below(39_000))});
    json!({"status": {
        "updateTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "nodeMetric": {"nodeUsage": {"resources": usage},
                       "systemUsage": {"resources": {"cpu": "500m", "memory": "2Gi"}}},
        "podsMetric": []
    }})
}

/// Writes every node's NodeMetric status once; returns the seconds it took.
async fn write_metrics(
    client: &Client,
    prefix: &str,
    count: u64,
    seed: u64,
) -> anyhow::Result<f64> {
    let api = node_metrics(client);
    let started = Instant::now();
    let rng = Arc::new(Mutex::new(Lcg(seed)));
    futures::stream::iter(0..count)
        .map(|index| {
            let api = api.clone();
            let rng = rng.clone();
            let name = node_name(prefix, index);
            async move {
                let status = metric_status(&mut *rng.lock().await);
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .with_context(|| format!("NodeMetric status {name}"))
                    .map(drop)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(started.elapsed().as_secs_f64())
}

/// The labelled samples of metric `name` in Prometheus text: (labels, value) for each line
/// `name{labels} value`; lines whose value does not parse are skipped.
fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |line| {
        let (labels, value) = line
            .strip_prefix(name)?
            .strip_prefix('{')?
            .rsplit_once("} ")?;
        Some((labels, value.trim().parse().ok()?))
    })
}

/// The API server's count of writes (PATCH, PUT, APPLY, CREATE) to `resource` (and
/// `subresource`, "" for the object itself), from every writer.
async fn api_writes(client: &Client, resource: &str, subresource: &str) -> anyhow::Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let resource = format!("resource=\"{resource}\"");
    let subresource = format!("subresource=\"{subresource}\"");
    let mut total = 0.0;
    for (labels, value) in samples(&text, "apiserver_request_total") {
        let writes = ["PATCH", "PUT", "APPLY", "POST"]
            .iter()
            .any(|verb| labels.contains(&format!("verb=\"{verb}\"")));
        if writes && labels.contains(&resource) && labels.contains(&subresource) {
            total += value;
        }
    }
    Ok(total)
}

/// Node status writes from every writer: the manager, and kube-controller-manager's node
/// lifecycle controller for nodes without KWOK (KWOK renews Leases, not Node status, once a
/// node is Ready).
async fn node_status_writes(client: &Client) -> anyhow::Result<f64> {
    api_writes(client, "nodes", "status").await
}

/// The node-status writes one manager pod made (its
/// `slo_controller_node_resource_reconcile_count{reason="updateNodeStatus"}`), read through
/// the API server's pod proxy.
async fn manager_node_status_writes(client: &Client, pod: &str) -> anyhow::Result<f64> {
    let path = format!(
        "/api/v1/namespaces/{}/pods/http:{pod}:8080/proxy/metrics",
        e2e::cluster::KOORD_NAMESPACE
    );
    let text = client
        .request_text(http::Request::get(path).body(Vec::new())?)
        .await
        .with_context(|| format!("metrics of {pod}"))?;
    Ok(
        samples(&text, "slo_controller_node_resource_reconcile_count")
            .filter(|(labels, _)| labels.contains("reason=\"updateNodeStatus\""))
            .map(|(_, value)| value)
            .sum(),
    )
}

/// The writes the real koordlets make (NodeMetric status, NodeResourceTopology) over
/// `--seconds`, per 1,000 nodes. Run it while nothing else writes those objects.
async fn reporters(client: &Client, options: &Options) -> anyhow::Result<Value> {
    let seconds = options.number("seconds", Some(180), 3600)?.max(10);
    let real = e2e::cluster::real_nodes(client).await?.len().max(1) as f64;
    let kinds = [
        ("nodemetrics", "status"),
        ("nodemetrics", ""),
        ("noderesourcetopologies", ""),
    ];
    let mut before = Vec::new();
    for (resource, sub) in kinds {
        before.push(api_writes(client, resource, sub).await?);
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let mut report = json!({"part": "reporters", "seconds": seconds, "real_nodes": real});
    for ((resource, sub), before) in kinds.iter().zip(before) {
        let writes = api_writes(client, resource, sub).await? - before;
        let key = if sub.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}/{sub}")
        };
        report[format!("{key}_writes_per_second_per_1000_nodes")] =
            json!(writes / seconds as f64 / real * 1000.0);
    }
    Ok(report)
}

/// CPU seconds (user + system), RSS bytes and bytes the process's network namespace sent.
fn process_usage(pid: u32) -> anyhow::Result<(f64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (_, ticks) = parse_stat_cpu(&stat).context("malformed /proc/PID/stat")?;
    let cpu = ticks as f64 / CLOCK_TICKS_PER_SECOND;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let dev = std::fs::read_to_string(format!("/proc/{pid}/net/dev"))?;
    let sent: u64 = dev
        .lines()
        .skip(2)
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.trim() != "lo")
        .filter_map(|(_, counters)| counters.split_whitespace().nth(8)?.parse::<u64>().ok())
        .sum();
    Ok((cpu, rss_kib * 1024, sent))
}

/// Clock ticks are 100 per second on Linux builds of this kind (CONFIG_HZ does not change
/// USER_HZ).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// A process's name and CPU ticks (user + system) from its /proc/PID/stat.
fn parse_stat_cpu(stat: &str) -> Option<(String, u64)> {
    // The name may hold spaces and parentheses: it runs from the first '(' to the last ')'.
    let (head, tail) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let mut fields = tail.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((name, user + system))
}

/// Every process's name and CPU ticks, by pid. The cluster's processes are all host
/// processes (the control plane, KWOK, the kubelet's containers), so this is the machine.
fn cpu_sample() -> HashMap<u32, (String, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse_stat_cpu(&stat)?))
        })
        .collect()
}

/// CPU seconds per process name between two samples: a process in both by its growth, one
/// started in between by its whole count (one that started and exited in between is missed).
fn cpu_seconds_by_name(
    start: &HashMap<u32, (String, u64)>,
    end: &HashMap<u32, (String, u64)>,
) -> std::collections::BTreeMap<String, f64> {
    let mut by_name = std::collections::BTreeMap::new();
    for (pid, (name, ticks)) in end {
        let before = match start.get(pid) {
            Some((was, before)) if was == name => *before,
            _ => 0,
        };
        let grown = ticks.saturating_sub(before);
        if grown > 0 {
            *by_name.entry(name.clone()).or_insert(0.0) += grown as f64 / CLOCK_TICKS_PER_SECOND;
        }
    }
    by_name
}

/// Samples every process's CPU each second while a scheduling run lasts, keeping the first
/// sample and the last `KEPT` (enough to reach back past the minute without progress after
/// which a run gives up), so the run's CPU can be cut at its last binding.
struct CpuSampler {
    samples: Arc<std::sync::Mutex<CpuSamples>>,
    task: tokio::task::JoinHandle<()>,
}

type CpuStamp = (Instant, HashMap<u32, (String, u64)>);
/// The first sample, and the most recent ones.
type CpuSamples = (Option<CpuStamp>, std::collections::VecDeque<CpuStamp>);

impl CpuSampler {
    const KEPT: usize = 90;

    fn start() -> Self {
        let samples: Arc<std::sync::Mutex<CpuSamples>> = Arc::default();
        let task = tokio::spawn({
            let samples = samples.clone();
            async move {
                loop {
                    let Ok(sample) = tokio::task::spawn_blocking(cpu_sample).await else {
                        return;
                    };
                    let stamp = (Instant::now(), sample);
                    {
                        let mut samples = samples.lock().unwrap_or_else(|e| e.into_inner());
                        if samples.0.is_none() {
                            samples.0 = Some(stamp);
                        } else {
                            samples.1.push_back(stamp);
                            if samples.1.len() > Self::KEPT {
                                samples.1.pop_front();
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        });
        CpuSampler { samples, task }
    }

    /// Stops sampling; CPU seconds per process name from the first sample to the first one
    /// taken at or after `end` (a fresh one when none was), and the window's length.
    fn finish(self, end: Instant) -> (std::collections::BTreeMap<String, f64>, f64) {
        self.task.abort();
        let (first, kept) =
            std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()));
        let Some((started, start)) = first else {
            return (Default::default(), 0.0);
        };
        let fresh;
        let (ended, last) = match kept.iter().find(|(at, _)| *at >= end) {
            Some((at, sample)) => (*at, sample),
            None => {
                fresh = (Instant::now(), cpu_sample());
                (fresh.0, &fresh.1)
            }
        };
        (
            cpu_seconds_by_name(&start, last),
            ended.duration_since(started).as_secs_f64(),
        )
    }
}

fn has_batch_allocatable(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.allocatable.as_ref())
        .and_then(|allocatable| allocatable.get("kubernetes.io/batch-cpu"))
        .is_some_and(|quantity| quantity.0 != "0")
}

async fn converge(client: &Client, options: &Options) -> anyhow::Result<Value> {
    let prefix = options.prefix()?;
    let count = options.number("count", None, 20_000)?;
    let timeout = Duration::from_secs(options.number("timeout", Some(300), 3600)?);
    let manager_pid = match options.0.get("manager-pid") {
        Some(pid) => Some(pid.parse::<u32>().context("--manager-pid")?),
        None => None,
    };
    let manager_pod = options.0.get("manager-pod");
    let nodes: Api<Node> = Api::all(client.clone());
    let already = nodes
        .list(&scale_nodes(&prefix))
        .await?
        .items
        .iter()
        .filter(|n| has_batch_allocatable(n))
        .count();
    ensure!(
        already == 0,
        "{already} simulated nodes already carry batch allocatable: converge needs fresh nodes"
    );
    let writes_before = node_status_writes(client).await?;
    let manager_writes_before = match manager_pod {
        Some(pod) => Some(manager_node_status_writes(client, pod).await?),
        None => None,
    };
    let usage_before = manager_pid.map(process_usage).transpose()?;
    let started = Instant::now();
    let write_seconds = write_metrics(client, &prefix, count, 7).await?;
    eprintln!("{count} NodeMetrics written in {write_seconds:.1} s");
    let converged = loop {
        let list = nodes.list(&scale_nodes(&prefix)).await?;
        let converged = list
            .items
            .iter()
            .filter(|n| has_batch_allocatable(n))
            .count() as u64;
        if converged >= count || started.elapsed() > timeout {
            break converged;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let seconds = started.elapsed().as_secs_f64();
    let writes = node_status_writes(client).await? - writes_before;
    let mut report = json!({
        "part": "converge", "nodes": count, "converged": converged,
        "seconds": seconds, "metrics_write_seconds": write_seconds,
        "node_status_writes": writes, "node_status_writes_per_second": writes / seconds,
    });
    if let (Some(pod), Some(before)) = (manager_pod, manager_writes_before) {
        let writes = manager_node_status_writes(client, pod).await? - before;
        report["manager_node_status_writes"] = json!(writes);
    }
    if let (Some(pid), Some((cpu0, _, sent0))) = (manager_pid, usage_before) {
        let (cpu1, rss, sent1) = process_usage(pid)?;
        report["manager_cpu_seconds"] = json!(cpu1 - cpu0);
        report["manager_rss_bytes"] = json!(rss);
        report["manager_sent_bytes_per_second"] = json!((sent1 - sent0) as f64 / seconds);
    }
    ensure!(
        converged >= count,
        "{converged} of {count} nodes carry batch allocatable after {seconds:.0} s: {report}"
    );
    Ok(report)
}

async fn heartbeat(client: &Client, options: &Options) -> anyhow::Result<Value> {
    let prefix = options.prefix()?;
    let count = options.number("count", None, 20_000)?;
    let interval = Duration::from_secs(options.number("interval", Some(60), 3600)?.max(1));
    let mut round = 0u64;
    loop {
        let started = Instant::now();
        round += 1;
        match write_metrics(client, &prefix, count, round).await {
            Ok(seconds) => eprintln!("heartbeat {round}: {count} NodeMetrics in {seconds:.1} s"),
            Err(err) => eprintln!("heartbeat {round}: {err:#}"),
        }
        tokio::time::sleep(interval.saturating_sub(started.elapsed())).await;
    }
}

/// The label reservation-owner pods carry and the bench's Reservations select owners by.
const OWNER_LABEL: &str = "scale-bench/reservation-owner";

/// What a reservation-owner pod requests, and what each Reservation holds for one.
fn owner_requests() -> Value {
    json!({"cpu": "2", "memory": "4Gi"})
}

/// Pods of the mix that own a Reservation (1 %): pods 50, 150, 250, ...
fn is_reservation_owner(index: u64) -> bool {
    index % 100 == 50
}

/// Placement of a bench object: the simulated nodes only.
fn on_simulated_nodes() -> Value {
    json!({
        "nodeSelector": {"type": "kwok"},
        "tolerations": [{"key": KWOK_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    })
}

/// The benchmark's pod mix (by index): a third batch pods (batch resources, koord-batch
/// priority), LSR pods with whole CPUs (2 %), shared-GPU pods (2 %), reservation owners (1 %,
/// prod pods that any of the run's Reservations takes), the rest prod pods; each in one of ten
/// ElasticQuotas. Pods go only to the simulated nodes.
fn bench_pod(index: u64, scheduler: &str, rng: &mut Lcg) -> anyhow::Result<Pod> {
    let mut labels = json!({"quota.scheduling.koordinator.sh/name": format!("team-{}", index % 10),
                            "app": "scale-bench"});
    let mut limits = json!({});
    let (requests, priority) = match index % 100 {
        20 | 70 => {
            labels["koordinator.sh/qosClass"] = json!("LSR");
            limits = json!({"cpu": "4", "memory": "8Gi"});
            (json!({"cpu": "4", "memory": "8Gi"}), "koord-prod")
        }
        50 => {
            labels[OWNER_LABEL] = json!("true");
            (owner_requests(), "koord-prod")
        }
        30 | 80 => {
            let shared =
                json!({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"});
            limits = shared.clone();
            let mut requests = shared;
            requests["cpu"] = json!("1");
            (requests, "koord-prod")
        }
        _ if index.is_multiple_of(3) => {
            labels["koordinator.sh/qosClass"] = json!("BE");
            (
                json!({"kubernetes.io/batch-cpu": format!("{}", 500 + rng.below(1500)),
                       "kubernetes.io/batch-memory": "1Gi"}),
                "koord-batch",
            )
        }
        _ => (
            json!({"cpu": format!("{}m", 250 + rng.below(1750)),
                   "memory": format!("{}Mi", 256 + rng.below(3840))}),
            "koord-prod",
        ),
    };
    if let Some(batch) = requests.get("kubernetes.io/batch-cpu") {
        limits = json!({"kubernetes.io/batch-cpu": batch, "kubernetes.io/batch-memory": "1Gi"});
    }
    let mut spec = on_simulated_nodes();
    spec["schedulerName"] = json!(scheduler);
    spec["priorityClassName"] = json!(priority);
    spec["containers"] = json!([{"name": "main", "image": "scale-bench/none",
                                 "resources": {"requests": requests, "limits": limits}}]);
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("p-{index:06}"), "labels": labels},
        "spec": spec
    }))?)
}

/// The schedulers of a `schedule` run: one name, or several to interleave.
fn scheduler_list(text: &str) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = text.split(',').map(str::to_string).collect();
    ensure!(
        (1..=4).contains(&names.len()),
        "--scheduler {text:?}: one to four names"
    );
    for (index, name) in names.iter().enumerate() {
        ensure!(
            !name.is_empty()
                && name.len() <= 63
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "--scheduler {text:?}: {name:?} is not a scheduler name"
        );
        ensure!(
            !names[..index].contains(name),
            "--scheduler {text:?}: {name} twice"
        );
    }
    Ok(names)
}

/// The pods of a `schedule` run, each with the index of its scheduler in `schedulers`. With
/// one scheduler, the mix (`bench_pod`) as `p-NNNNNN`. With several, every pod of the mix once
/// per scheduler, back to back, as `p-NNNNNN-T` (T the scheduler's index); the scheduler that
/// goes first rotates from one pod of the mix to the next. So each scheduler meets the same
/// pods at the same moments of the run, and the machine's drift during it falls on all alike.
fn scheduling_bodies(count: u64, schedulers: &[String]) -> anyhow::Result<Vec<(usize, Pod)>> {
    let mut rng = Lcg(11);
    let mut bodies = Vec::with_capacity(count as usize * schedulers.len());
    for index in 0..count {
        let pod = bench_pod(index, &schedulers[0], &mut rng)?;
        if schedulers.len() == 1 {
            bodies.push((0, pod));
            continue;
        }
        for step in 0..schedulers.len() {
            let turn = (index as usize + step) % schedulers.len();
            let mut copy = pod.clone();
            copy.metadata.name = Some(format!("p-{index:06}-{turn}"));
            if let Some(spec) = copy.spec.as_mut() {
                spec.scheduler_name = Some(schedulers[turn].clone());
            }
            bodies.push((turn, copy));
        }
    }
    Ok(bodies)
}

/// The index in the mix of a pod named by `scheduling_bodies`.
fn mix_index(name: &str) -> Option<u64> {
    name.strip_prefix("p-")?.split('-').next()?.parse().ok()
}

/// A Reservation for scheduler `scheduler` that holds one owner pod's requests on a simulated
/// node for any pod with the owner label, once (upstream's default, allocateOnce).
fn bench_reservation(index: u64, scheduler: &str) -> anyhow::Result<DynamicObject> {
    let mut spec = on_simulated_nodes();
    spec["schedulerName"] = json!(scheduler);
    spec["priorityClassName"] = json!("koord-prod");
    spec["containers"] = json!([{"name": "main", "image": "scale-bench/none",
                                 "resources": {"requests": owner_requests()}}]);
    dynamic(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": format!("r-{index:05}"), "labels": {"app": "scale-bench"}},
        "spec": {
            "template": {"spec": spec},
            "owners": [{"labelSelector": {"matchLabels": {OWNER_LABEL: "true"}}}],
            "ttl": "1h"
        }
    }))
}

/// Creates `count` Reservations for `scheduler` and waits (up to `timeout`) until the
/// scheduler has placed them all; returns how many it placed and the seconds that took.
async fn make_reservations(
    client: &Client,
    scheduler: &str,
    count: u64,
    timeout: Duration,
) -> anyhow::Result<(u64, f64)> {
    let api = reservations(client);
    let started = Instant::now();
    let bodies: Vec<DynamicObject> = (0..count)
        .map(|index| bench_reservation(index, scheduler))
        .collect::<anyhow::Result<_>>()?;
    futures::stream::iter(bodies)
        .map(|body| {
            let api = api.clone();
            async move {
                let name = body.metadata.name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &body)
                    .await
                    .with_context(|| format!("Reservation {name}"))
                    .map(drop)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let selector = ListParams::default().labels("app=scale-bench");
    loop {
        let placed = api
            .list(&selector)
            .await?
            .items
            .iter()
            .filter(|r| reservation_available(r))
            .count() as u64;
        if placed >= count || started.elapsed() > timeout {
            return Ok((placed, started.elapsed().as_secs_f64()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Placed on a node and ready for its owners.
fn reservation_available(reservation: &DynamicObject) -> bool {
    let status = &reservation.data["status"];
    status["phase"] == "Available" && status["nodeName"].as_str().is_some_and(|n| !n.is_empty())
}

/// The extender's own time (seconds) over its pods, read through the API server's pod proxy:
/// in its scheduling-cycle points (Filter and Score, which kube-scheduler's algorithm waits
/// for) and in the rest (Bind, PostFilter).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct ExtenderSeconds {
    cycle: f64,
    other: f64,
}

/// Sums `scheduler_framework_extension_point_duration_seconds_sum` lines by extension point.
fn extender_seconds_in(text: &str) -> ExtenderSeconds {
    let mut seconds = ExtenderSeconds::default();
    for (labels, value) in samples(
        text,
        "scheduler_framework_extension_point_duration_seconds_sum",
    ) {
        if labels.contains("extension_point=\"Filter\"")
            || labels.contains("extension_point=\"Score\"")
        {
            seconds.cycle += value;
        } else {
            seconds.other += value;
        }
    }
    seconds
}

async fn extender_seconds(client: &Client, pods: &[String]) -> anyhow::Result<ExtenderSeconds> {
    let mut total = ExtenderSeconds::default();
    for pod in pods {
        let path = format!(
            "/api/v1/namespaces/{}/pods/http:{pod}:10261/proxy/metrics",
            e2e::cluster::KOORD_NAMESPACE
        );
        let text = client
            .request_text(http::Request::get(path).body(Vec::new())?)
            .await
            .with_context(|| format!("metrics of {pod}"))?;
        let seconds = extender_seconds_in(&text);
        total.cycle += seconds.cycle;
        total.other += seconds.other;
    }
    Ok(total)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn ensure_namespace(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let object: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
    created(
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &object)
            .await,
    )?;
    let quotas = elastic_quotas(client, namespace);
    for team in 0..10 {
        // The quota webhook refuses a second one of a name with 400, not 409.
        if quotas.get_opt(&format!("team-{team}")).await?.is_some() {
            continue;
        }
        created(
            elastic_quotas(client, namespace)
                .create(
                    &PostParams::default(),
                    &dynamic(json!({
                        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
                        "metadata": {"name": format!("team-{team}"), "namespace": namespace},
                        "spec": {"min": {"cpu": "20000", "memory": "80000Gi"},
                                 "max": {"cpu": "200000", "memory": "800000Gi",
                                         "kubernetes.io/batch-cpu": "100000000",
                                         "kubernetes.io/batch-memory": "800000Gi"}}
                    }))?,
                )
                .await,
        )
        .with_context(|| format!("ElasticQuota team-{team}"))?;
    }
    Ok(())
}

/// Deletes every object of `api` labelled `app=scale-bench` (pods, Reservations) and waits
/// until they are gone.
async fn delete_bench_objects<K>(api: &Api<K>, what: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let no_grace = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    let selector = ListParams::default().labels("app=scale-bench");
    let deadline = Instant::now() + Duration::from_secs(600);
    // One object per request, a few at a time: the API server works through a collection
    // delete one item after another (at 5,000 nodes, 4,600 pods were left after 600 s), and a
    // loaded API server drops some requests, so each round deletes what the last one left.
    loop {
        let names = match names_of(api, &selector).await {
            Ok(names) => Some(names),
            Err(err) => {
                eprintln!("listing bench {what}: {err}; retrying");
                None
            }
        };
        if names.as_ref().is_some_and(Vec::is_empty) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "bench {what} still there after 600 s (last count {:?})",
            names.as_ref().map(Vec::len)
        );
        let failed = futures::stream::iter(names.iter().flatten())
            .map(|name| api.delete(name, &no_grace))
            .buffer_unordered(CONCURRENCY)
            .filter(|result| {
                let done = match result {
                    Ok(_) => true,
                    Err(kube::Error::Api(status)) => status.code == 404,
                    Err(_) => false,
                };
                std::future::ready(!done)
            })
            .count()
            .await;
        if failed > 0 {
            eprintln!("deleting bench {what}: {failed} requests failed; retrying");
        }
        if failed > 0 || names.is_none() {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

async fn schedule(client: &Client, options: &Options) -> anyhow::Result<Value> {
    let schedulers = scheduler_list(options.text("scheduler")?)?;
    let interleaved = schedulers.len() > 1;
    let namespace = options.text("namespace")?.to_string();
    let count = options.number("pods", None, 100_000)?;
    let rate = options.number("rate", Some(0), 10_000)?;
    let timeout = Duration::from_secs(options.number("timeout", Some(900), 7200)?);
    let label = options
        .0
        .get("label")
        .cloned()
        .unwrap_or(schedulers.join(","));
    // The scheduler whose pods the extender serves: the one named, by default the first.
    let extender_scheduler = options
        .0
        .get("extender-scheduler")
        .cloned()
        .unwrap_or_else(|| schedulers[0].clone());
    let extender_pods: Vec<String> = options
        .0
        .get("extender-pods")
        .map(|list| {
            list.split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let reserve = options.number("reserve", Some(0), 1)? == 1;
    ensure!(
        !(reserve && interleaved),
        "--reserve 1 takes one scheduler: the Reservations are made for it"
    );
    let scheduler = schedulers[0].clone();
    ensure_namespace(client, &namespace).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    delete_bench_objects(&pods, "pods").await?;
    delete_bench_objects(&reservations(client), "Reservations").await?;
    let owners = (0..count).filter(|i| is_reservation_owner(*i)).count() as u64;
    let reserved = if reserve && owners > 0 {
        // Minutes at most: the schedulers place a Reservation as they place a pod.
        let (placed, seconds) =
            make_reservations(client, &scheduler, owners, Duration::from_secs(300)).await?;
        eprintln!("{label}: {placed} of {owners} Reservations placed in {seconds:.1} s");
        Some((placed, seconds))
    } else {
        None
    };

    // Bindings are seen on a watch started before the first creation.
    let list = pods.list(&ListParams::default().limit(1)).await?;
    let version = list.metadata.resource_version.unwrap_or_default();
    let created_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let bound_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    // Pods bound into a Reservation: the scheduler annotates them before the binding.
    let in_reservation: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let watcher = tokio::spawn({
        let pods = pods.clone();
        let bound_at = bound_at.clone();
        let in_reservation = in_reservation.clone();
        async move {
            let mut version = version;
            loop {
                let params = WatchParams::default()
                    .labels("app=scale-bench")
                    .timeout(290);
                let mut stream = match pods.watch(&params, &version).await {
                    Ok(stream) => stream.boxed(),
                    Err(err) => {
                        eprintln!("watch: {err}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                while let Some(event) = stream.next().await {
                    let pod = match event {
                        Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => pod,
                        Ok(WatchEvent::Bookmark(mark)) => {
                            version = mark.metadata.resource_version;
                            continue;
                        }
                        Ok(WatchEvent::Error(status)) => {
                            eprintln!("watch: {}", status.message);
                            break;
                        }
                        Ok(WatchEvent::Deleted(_)) => continue,
                        Err(err) => {
                            eprintln!("watch: {err}");
                            break;
                        }
                    };
                    if let Some(v) = pod.metadata.resource_version.clone() {
                        version = v;
                    }
                    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
                    let reserved = pod.metadata.annotations.as_ref().is_some_and(|a| {
                        a.contains_key(
                            apis::extension::reservation::ANNOTATION_RESERVATION_ALLOCATED,
                        )
                    });
                    if let (true, Some(name)) = (reserved, &pod.metadata.name) {
                        in_reservation.lock().await.insert(name.clone());
                    }
                    if let (Some(_), Some(name)) = (node, pod.metadata.name) {
                        bound_at
                            .lock()
                            .await
                            .entry(name)
                            .or_insert_with(Instant::now);
                    }
                }
            }
        }
    });

    let extender_before = extender_seconds(client, &extender_pods).await?;
    let cpu = CpuSampler::start();
    let started = Instant::now();
    let pace = (rate > 0).then(|| Duration::from_secs_f64(1.0 / rate as f64));
    let bodies = scheduling_bodies(count, &schedulers)?;
    // Which scheduler each pod is for.
    let scheduler_of: HashMap<String, usize> = bodies
        .iter()
        .map(|(turn, body)| (body.metadata.name.clone().unwrap_or_default(), *turn))
        .collect();
    let total = bodies.len() as u64;
    let concurrency = if pace.is_some() { 4 } else { CONCURRENCY };
    futures::stream::iter(bodies.into_iter().map(|(_, body)| body).enumerate())
        .map(|(index, body)| {
            let pods = pods.clone();
            let created_at = created_at.clone();
            async move {
                if let Some(pace) = pace {
                    tokio::time::sleep_until((started + pace * index as u32).into()).await;
                }
                let name = body.metadata.name.clone().unwrap_or_default();
                pods.create(&PostParams::default(), &body)
                    .await
                    .with_context(|| format!("pod {name}"))?;
                created_at.lock().await.insert(name, Instant::now());
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    let creation_seconds = started.elapsed().as_secs_f64();
    eprintln!("{label}: {total} pods created in {creation_seconds:.1} s");

    let deadline = started + timeout;
    let mut last_progress = (0, Instant::now());
    loop {
        let bound = bound_at.lock().await.len();
        if bound >= total as usize {
            break;
        }
        if bound != last_progress.0 {
            last_progress = (bound, Instant::now());
        }
        // Stop once nothing has been bound for a minute: the rest does not fit.
        if Instant::now() > deadline || last_progress.1.elapsed() > Duration::from_secs(60) {
            eprintln!("{label}: {bound} of {total} bound; giving up on the rest");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    watcher.abort();
    let last_bound = bound_at
        .lock()
        .await
        .values()
        .max()
        .copied()
        .unwrap_or(started);
    let (cpu_seconds, cpu_window) = cpu.finish(last_bound);
    let extender_after = extender_seconds(client, &extender_pods).await?;
    let extender = ExtenderSeconds {
        cycle: extender_after.cycle - extender_before.cycle,
        other: extender_after.other - extender_before.other,
    };

    let created_at = created_at.lock().await;
    let bound_at = bound_at.lock().await;
    let in_reservation = in_reservation.lock().await;
    let mut rows = Vec::new();
    for (turn, name) in schedulers.iter().enumerate() {
        let mine = |pod: &String| scheduler_of.get(pod) == Some(&turn);
        let mut latencies: Vec<f64> = bound_at
            .iter()
            .filter(|(pod, _)| mine(pod))
            .filter_map(|(pod, bound)| {
                let created = created_at.get(pod)?;
                Some(bound.saturating_duration_since(*created).as_secs_f64() * 1000.0)
            })
            .collect();
        latencies.sort_by(f64::total_cmp);
        let last_bound = bound_at
            .iter()
            .filter(|(pod, _)| mine(pod))
            .map(|(_, at)| *at)
            .max()
            .unwrap_or(started);
        let span = last_bound.duration_since(started).as_secs_f64();
        let bound = bound_at.keys().filter(|pod| mine(pod)).count();
        let row_label = if interleaved {
            format!("{name} {label}")
        } else {
            label.clone()
        };
        let mut report = json!({
            "part": "schedule", "label": row_label, "scheduler": name, "rate": rate,
            "pods": count, "bound": bound, "creation_seconds": creation_seconds,
            "span_seconds": span,
            "pods_per_second": if span > 0.0 { bound as f64 / span } else { 0.0 },
            "latency_ms": {"p50": percentile(&latencies, 50.0), "p90": percentile(&latencies, 90.0),
                            "p99": percentile(&latencies, 99.0), "max": percentile(&latencies, 100.0)},
        });
        if interleaved {
            // The rate is the creations of all of them together.
            report["interleaved_with"] = json!(schedulers);
        }
        // Owner pods bound, and those of them bound into a Reservation (a pod annotated as
        // allocated whose binding the watch saw).
        let owners_bound = bound_at
            .keys()
            .filter(|pod| mine(pod) && mix_index(pod).is_some_and(is_reservation_owner))
            .count();
        let owners_in_reservation = in_reservation
            .iter()
            .filter(|pod| mine(pod) && bound_at.contains_key(*pod))
            .count();
        report["owner_pods"] = json!(owners);
        report["owner_pods_bound"] = json!(owners_bound);
        report["owner_pods_in_reservation"] = json!(owners_in_reservation);
        if let Some((placed, seconds)) = reserved {
            report["reservations"] = json!(owners);
            report["reservations_placed"] = json!(placed);
            report["reservations_seconds"] = json!(seconds);
        }
        if !extender_pods.is_empty() && *name == extender_scheduler {
            // Per scheduling-algorithm run once the script adds kube-scheduler's own count.
            report["extender_cycle_seconds"] = json!(extender.cycle);
            report["extender_other_seconds"] = json!(extender.other);
        }
        // Where the machine's CPU went from the first creation to the last binding (to the
        // first per-second sample after it); interleaved schedulers share one window.
        report["cpu_seconds"] = json!(cpu_seconds);
        report["cpu_window_seconds"] = json!(cpu_window);
        rows.push(report);
    }
    drop((created_at, bound_at, in_reservation));
    let mut report = if interleaved {
        Value::Array(rows)
    } else {
        rows.pop().unwrap_or_default()
    };
    // The figures are kept even when the pods cannot be removed; the rows say so.
    let cleanup = match delete_bench_objects(&pods, "pods").await {
        Ok(()) => delete_bench_objects(&reservations(client), "Reservations").await,
        Err(err) => Err(err),
    };
    if let Err(err) = cleanup {
        let error = json!(format!("{err:#}"));
        match &mut report {
            Value::Array(rows) => rows
                .iter_mut()
                .for_each(|r| r["cleanup_error"] = error.clone()),
            row => row["cleanup_error"] = error,
        }
    }
    Ok(report)
}

/// Deletes one object, retrying a few times (a loaded API server drops requests), with
/// "not found" taken as done.
async fn delete_one(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    let mut attempt = 0;
    loop {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(err) if attempt >= 4 => return Err(err).context(format!("deleting {name}")),
            Err(_) => attempt += 1,
        }
        tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
    }
}

async fn cleanup(client: &Client, options: &Options) -> anyhow::Result<Value> {
    let prefix = options.prefix()?;
    let selector = scale_nodes(&prefix);
    let mut deleted = 0;
    // Nodes first: a Node whose NodeMetric is gone gets a "degraded" status write from the
    // manager (batch resources reset), wasted on a node about to be deleted.
    let names = names_of(&Api::<Node>::all(client.clone()), &selector).await?;
    futures::stream::iter(names.iter())
        .map(|name| e2e::cluster::delete_simulated_node(client, name))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    deleted += names.len();
    // One object per request, a few at a time: a collection delete of thousands of objects
    // outlives the API server's request timeout on a loaded machine.
    for api in [node_metrics(client), topologies(client), devices(client)] {
        let names = names_of(&api, &selector).await?;
        futures::stream::iter(names.iter())
            .map(|name| delete_one(&api, name))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        deleted += names.len();
    }
    Ok(json!({"part": "cleanup", "deleted": deleted}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_counted_per_process_name_with_new_and_reused_pids() {
        // A name with a space and a parenthesis; fields 14 and 15 are user and system ticks.
        let stat = "42 (kube (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 2 3";
        assert_eq!(parse_stat_cpu(stat), Some(("kube (x) y".to_string(), 300)));
        assert_eq!(parse_stat_cpu("42 (short) S 1 2"), None);

        let sample = |entries: &[(u32, &str, u64)]| -> HashMap<u32, (String, u64)> {
            entries
                .iter()
                .map(|(pid, name, ticks)| (*pid, (name.to_string(), *ticks)))
                .collect()
        };
        let start = sample(&[(1, "etcd", 1000), (2, "kwok", 500), (3, "old", 70)]);
        // pid 3 exited and was reused by another process; pid 4 started during the run.
        let end = sample(&[
            (1, "etcd", 1250),
            (2, "kwok", 500),
            (3, "etcd", 30),
            (4, "kwok", 20),
        ]);
        let by_name = cpu_seconds_by_name(&start, &end);
        assert_eq!(by_name.get("etcd"), Some(&2.8));
        assert_eq!(by_name.get("kwok"), Some(&0.2));
        assert_eq!(by_name.len(), 2);
    }

    #[test]
    fn extender_time_is_split_into_the_cycle_points_and_the_rest() {
        let text = "\
# HELP scheduler_framework_extension_point_duration_seconds Latency
scheduler_framework_extension_point_duration_seconds_sum{extension_point=\"Filter\",status=\"Success\",profile=\"koord-scheduler\"} 1.5
scheduler_framework_extension_point_duration_seconds_sum{extension_point=\"Filter\",status=\"Unschedulable\",profile=\"koord-scheduler\"} 0.25
scheduler_framework_extension_point_duration_seconds_sum{extension_point=\"Score\",status=\"Success\",profile=\"koord-scheduler\"} 0.75
scheduler_framework_extension_point_duration_seconds_sum{extension_point=\"Bind\",status=\"Success\",profile=\"koord-scheduler\"} 2
scheduler_framework_extension_point_duration_seconds_count{extension_point=\"Bind\",status=\"Success\",profile=\"koord-scheduler\"} 40
scheduler_framework_extension_point_duration_seconds_sum{extension_point=\"Score\",status=\"Success\",profile=\"koord-scheduler\"} not-a-number
";
        assert_eq!(
            extender_seconds_in(text),
            ExtenderSeconds {
                cycle: 2.5,
                other: 2.0
            }
        );
        assert_eq!(extender_seconds_in(""), ExtenderSeconds::default());
    }

    #[test]
    fn a_node_is_ready_for_the_bench_once_ready_and_rid_of_the_not_ready_taints() {
        let node = |ready: &str, taints: &[&str]| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n"},
                "spec": {"taints": taints.iter().map(|key| json!({"key": key, "effect": "NoSchedule"})).collect::<Vec<_>>()},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}
            }))
            .unwrap()
        };
        assert!(node_ready(&node("True", &["kwok.x-k8s.io/node"])));
        assert!(!node_ready(&node(
            "True",
            &["kwok.x-k8s.io/node", "node.kubernetes.io/not-ready"]
        )));
        assert!(!node_ready(&node(
            "True",
            &["node.kubernetes.io/unreachable"]
        )));
        assert!(!node_ready(&node("False", &[])));
        assert!(!node_ready(&Node::default()));
    }

    #[test]
    fn interleaved_schedulers_get_the_same_pods_in_rotating_order() {
        let single = scheduling_bodies(300, &["koord-scheduler".to_string()]).unwrap();
        assert_eq!(single.len(), 300);
        assert_eq!(single[7].1.metadata.name.as_deref(), Some("p-000007"));
        assert!(single.iter().all(|(turn, _)| *turn == 0));

        let names = scheduler_list("default-scheduler,koord-scheduler").unwrap();
        let bodies = scheduling_bodies(300, &names).unwrap();
        assert_eq!(bodies.len(), 600);
        let scheduler = |pod: &Pod| pod.spec.as_ref().unwrap().scheduler_name.clone().unwrap();
        let mut seen = std::collections::HashSet::new();
        for pair in bodies.chunks(2) {
            let ((first, a), (second, b)) = (&pair[0], &pair[1]);
            // The same pod of the mix, once for each scheduler, under its own name.
            let index = mix_index(a.metadata.name.as_deref().unwrap()).unwrap();
            assert_eq!(mix_index(b.metadata.name.as_deref().unwrap()), Some(index));
            assert_ne!(first, second);
            assert_eq!(*first, index as usize % 2, "the first rotates");
            assert_eq!(scheduler(a), names[*first]);
            assert_eq!(scheduler(b), names[*second]);
            let (mut a, mut b) = (a.clone(), b.clone());
            a.metadata.name = None;
            b.metadata.name = None;
            a.spec.as_mut().unwrap().scheduler_name = None;
            b.spec.as_mut().unwrap().scheduler_name = None;
            assert_eq!(a, b, "pod {index}");
            assert!(seen.insert(pair[0].1.metadata.name.clone()));
            assert!(seen.insert(pair[1].1.metadata.name.clone()));
        }
        // Each scheduler gets the mix a single run gets.
        for (index, (_, pod)) in single.iter().enumerate() {
            let copy = &bodies[2 * index].1;
            assert_eq!(
                pod.spec.as_ref().unwrap().containers,
                copy.spec.as_ref().unwrap().containers
            );
        }
        assert_eq!(mix_index("p-000150"), Some(150));
        assert_eq!(mix_index("p-000150-2"), Some(150));
        assert_eq!(mix_index("q-000150"), None);

        assert!(scheduler_list("a,a").is_err());
        assert!(scheduler_list("a,,b").is_err());
        assert!(scheduler_list("a,b,c,d,e").is_err());
        assert!(scheduler_list("Bad").is_err());
    }

    #[test]
    fn the_reservations_take_the_owner_pods_of_the_mix_and_no_other() {
        let object = bench_reservation(3, "koord-scheduler").unwrap();
        let reservation: apis::scheduling::v1alpha1::Reservation =
            serde_json::from_value(serde_json::to_value(&object).unwrap()).unwrap();
        let template = reservation.spec.template.spec.unwrap();
        assert_eq!(template.scheduler_name.as_deref(), Some("koord-scheduler"));
        let selector = reservation.spec.owners[0]
            .label_selector
            .clone()
            .unwrap()
            .match_labels
            .unwrap();
        let mut rng = Lcg(1);
        let selected = |pod: &Pod| {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        };
        let owner = bench_pod(150, "koord-scheduler", &mut rng).unwrap();
        assert!(selected(&owner));
        // An owner asks for what a reservation holds.
        let requests = |resources: &Option<k8s_openapi::api::core::v1::ResourceRequirements>| {
            resources.clone().unwrap().requests.unwrap()
        };
        assert_eq!(
            requests(&owner.spec.unwrap().containers[0].resources),
            requests(&template.containers[0].resources)
        );
        for index in (0..300).filter(|i| !is_reservation_owner(*i)) {
            assert!(
                !selected(&bench_pod(index, "s", &mut rng).unwrap()),
                "pod {index}"
            );
        }
        assert_eq!(
            (0..10_000).filter(|i| is_reservation_owner(*i)).count(),
            100
        );
        assert_eq!((0..300).filter(|i| is_reservation_owner(*i)).count(), 3);

        let with_status = |status: Value| -> DynamicObject {
            let mut object = object.clone();
            object.data["status"] = status;
            object
        };
        assert!(reservation_available(&with_status(
            json!({"phase": "Available", "nodeName": "scale-00001"})
        )));
        assert!(!reservation_available(&with_status(
            json!({"phase": "Pending"})
        )));
        assert!(!reservation_available(&with_status(
            json!({"phase": "Succeeded", "nodeName": "scale-00001"})
        )));
        assert!(!reservation_available(&object));
    }

    #[test]
    fn samples_are_the_labelled_lines_of_exactly_that_metric() {
        let text = "\
apiserver_request_total{verb=\"PATCH\",resource=\"nodes\"} 7
apiserver_request_total_other{verb=\"PATCH\"} 100
apiserver_request_total 3
apiserver_request_total{verb=\"PUT\"} broken
apiserver_request_total{verb=\"POST\",resource=\"pods\"} 2.5
";
        let found: Vec<(&str, f64)> = samples(text, "apiserver_request_total").collect();
        assert_eq!(
            found,
            vec![
                ("verb=\"PATCH\",resource=\"nodes\"", 7.0),
                ("verb=\"POST\",resource=\"pods\"", 2.5)
            ]
        );
    }
}

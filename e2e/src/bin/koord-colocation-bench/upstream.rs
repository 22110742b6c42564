//! What the upstream koordlet (Go) needs to run the benchmark's cpusuppress
//! on the same cgroups as ours: it reads pods only from a kubelet and the
//! Node, NodeSLO and NodeMetric only from an API server.
//!
//! - [`FakeKubelet`]: a loopback HTTP server that answers `GET /pods` with the
//!   benchmark's two pods in the kubelet's PodList format (upstream asks its
//!   read-only port for `/pods/` when started with `--kubelet-insecure-tls`);
//! - [`ClusterObjects`]: the Node (InternalIP 127.0.0.1, the fake kubelet's
//!   port, this machine's CPUs and memory), the NodeSLO with the run's policy
//!   and threshold, and an empty NodeMetric, written into the cluster in
//!   `KUBECONFIG` (the local cluster: hack/local-cluster);
//! - [`upstream_command`]: upstream's flags for this layout (host paths,
//!   cgroupfs, no runtime hooks, its data under the run's directory).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The node every agent of the benchmark acts for (ours takes it as `--node-name`).
pub const NODE_NAME: &str = "colocation-bench";
/// A request head larger than this is refused by the fake kubelet.
const MAX_HEAD: usize = 8 * 1024;
/// How long one connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The kubelet's read-only endpoint, as far as upstream's koordlet uses it.
pub struct FakeKubelet {
    pub port: u16,
    pod_requests: Arc<AtomicU64>,
}

impl FakeKubelet {
    /// Serves `pod_list` (a PodList in JSON) on 127.0.0.1 at a free port
    /// until the process ends; every request line goes to `log` with the
    /// seconds since the start, so what upstream asks for can be read after a run.
    pub fn start(pod_list: String, log: &Path) -> Result<Self, String> {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("fake kubelet: bind: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("fake kubelet: {e}"))?
            .port();
        let mut log = fs::File::create(log)
            .map_err(|e| format!("fake kubelet log {}: {e}", log.display()))?;
        let pod_requests = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&pod_requests);
        let body = Arc::new(pod_list);
        let started = Instant::now();
        thread::spawn(move || {
            // One request at a time: upstream asks every few seconds, and a
            // slow or stuck client is cut off by the read timeout.
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let path = answer(stream, &body).unwrap_or_else(|e| format!("(error: {e})"));
                if is_pods_path(&path) {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                let _ = writeln!(log, "{:.3} {path}", started.elapsed().as_secs_f64());
            }
        });
        Ok(Self { port, pod_requests })
    }

    /// How many `/pods` answers were served so far.
    pub fn pod_requests(&self) -> u64 {
        self.pod_requests.load(Ordering::Relaxed)
    }

    /// Waits until at least `more` further `/pods` requests than `since`
    /// were answered (an agent's first pod sync), or `within` passes.
    pub fn wait_for_pod_requests(&self, since: u64, more: u64, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.pod_requests() >= since + more {
                return true;
            }
            thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

fn is_pods_path(path: &str) -> bool {
    matches!(path, "/pods" | "/pods/")
}

/// Reads one request head, answers it and closes the connection (the
/// kubelet client opens a new one or reuses it; `Connection: close` makes
/// it open a new one). Returns the request's path.
fn answer(stream: TcpStream, pod_list: &str) -> std::io::Result<String> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    let mut line = String::new();
    let mut head = 0usize;
    loop {
        line.clear();
        // Bounded: a line longer than the whole head limit is refused below.
        let read = (&mut reader)
            .take(MAX_HEAD as u64 + 1)
            .read_line(&mut line)?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head += read;
        if head > MAX_HEAD {
            respond(
                &mut writer,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            )?;
            return Err(std::io::Error::other("request head too large"));
        }
        if request_line.is_empty() {
            request_line = line.trim_end().to_string();
            continue;
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    // The query (if any) does not choose the answer.
    let path = target.split('?').next().unwrap_or("").to_string();
    match (method, path.as_str()) {
        ("GET", p) if is_pods_path(p) => {
            respond(&mut writer, "200 OK", "application/json", pod_list)?
        }
        ("GET", "/healthz") => respond(&mut writer, "200 OK", "text/plain", "ok")?,
        ("GET", _) => respond(
            &mut writer,
            "404 Not Found",
            "text/plain",
            "not served by the benchmark's fake kubelet",
        )?,
        _ => respond(&mut writer, "405 Method Not Allowed", "text/plain", "")?,
    }
    Ok(if method == "GET" {
        path
    } else {
        format!("{method} {path}")
    })
}

fn respond(
    writer: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    write!(
        writer,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    writer.flush()
}

/// Upstream's Prometheus text from its `--addr` (`GET /metrics`), at most 4 MiB.
pub fn fetch_metrics(port: u16) -> Result<String, String> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    stream
        .take(4 << 20)
        .read_to_end(&mut raw)
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("no HTTP head in the answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "answer {}",
            head.lines().next().unwrap_or_default()
        ));
    }
    // Go's server sends a plain body for a small answer and chunks a large one.
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return dechunk(body);
    }
    Ok(body.to_string())
}

fn dechunk(mut body: &str) -> Result<String, String> {
    let mut out = String::new();
    loop {
        let (size_line, rest) = body.split_once("\r\n").ok_or("truncated chunk size")?;
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_line:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or("truncated chunk")?;
        out.push_str(chunk);
        body = rest.get(size..).unwrap_or("").trim_start_matches("\r\n");
    }
}

/// The values of upstream's cpusuppress gauges (`koordlet_be_suppress_*`:
/// the LS usage it last counted and the BE cores it last set), one
/// `name{labels} value` per series, or "none" when it never set them.
pub fn suppress_summary(metrics: &str) -> String {
    let series: Vec<String> = metrics
        .lines()
        .filter(|l| l.starts_with("koordlet_be_suppress"))
        .map(|l| {
            // The node label repeats on every series: drop the labels but the policy.
            let (name_labels, value) = l.rsplit_once(' ').unwrap_or((l, ""));
            let name = name_labels.split('{').next().unwrap_or(name_labels);
            let policy = name_labels
                .split("type=\"")
                .nth(1)
                .and_then(|t| t.split('"').next())
                .map(|t| format!("[{t}]"))
                .unwrap_or_default();
            format!(
                "{}{policy}={value}",
                name.trim_start_matches("koordlet_be_suppress_")
            )
        })
        .collect();
    if series.is_empty() {
        "none".to_string()
    } else {
        series.join(" ")
    }
}

/// The Node upstream's koordlet reads: its kubelet at 127.0.0.1:`kubelet_port`
/// (InternalIP, the address type upstream prefers by default), and this
/// machine's capacity, which its cpusuppress formula scales the threshold by.
pub fn node_object(kubelet_port: u16, ncpu: usize, memory_bytes: u64) -> Value {
    let resources = json!({
        "cpu": ncpu.to_string(),
        "memory": memory_bytes.to_string(),
        "pods": "110",
    });
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "koord-bench": "colocation",
            },
        },
        "spec": {
            // Nothing may be scheduled here: no kubelet runs pods for it.
            "unschedulable": true,
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": NODE_NAME},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "capacity": resources.clone(),
            "allocatable": resources,
        },
    })
}

/// The NodeSLO of a run: the same policy, threshold and BE CPU QoS our
/// koordlet gets in its `--node-slo-file`.
pub fn node_slo_object(policy: &str, threshold: u32, be_sched_idle: bool) -> Value {
    let mut slo = json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": NODE_NAME},
        "spec": {
            "resourceUsedThresholdWithBE": {
                "enable": true,
                "cpuSuppressThresholdPercent": threshold,
                "cpuSuppressPolicy": policy,
            },
        },
    });
    if be_sched_idle {
        slo["spec"]["resourceQOSStrategy"] = json!({
            "policies": {"cpuPolicy": "coreSched"},
            "beClass": {"cpuQOS": {"enable": true, "schedIdle": 1}},
        });
    }
    slo
}

fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The benchmark's objects in the cluster of `KUBECONFIG`.
pub struct ClusterObjects {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl ClusterObjects {
    /// Connects (the API server must answer within 10 s) and checks that
    /// the NodeSLO and NodeMetric CRDs are installed.
    pub fn connect() -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        let client = runtime
            .block_on(e2e::cluster(Duration::from_secs(10)))
            .map_err(|e| format!("upstream's koordlet needs an API server: {e}"))?;
        let objects = Self { runtime, client };
        for (kind, plural) in [("NodeSLO", "nodeslos"), ("NodeMetric", "nodemetrics")] {
            let api = objects.slo_api(kind, plural);
            objects
                .runtime
                .block_on(api.list(&Default::default()))
                .map_err(|e| {
                    format!(
                        "the {kind} CRD is not served ({e}): apply charts/koordinator/crds first"
                    )
                })?;
        }
        Ok(objects)
    }

    fn slo_api(&self, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::all_with(
            self.client.clone(),
            &api_resource("slo.koordinator.sh", "v1alpha1", kind, plural),
        )
    }

    /// Creates or replaces the Node (spec and status), the run's NodeSLO and
    /// an empty NodeMetric (koord-manager would create it; upstream reports into it).
    pub fn apply(&self, node: &Value, node_slo: &Value) -> Result<(), String> {
        self.runtime.block_on(async {
            // Merge patches without a resourceVersion: the node controllers
            // write this Node too (conditions, taints) and would make a
            // replace conflict.
            let nodes: Api<Node> = Api::all(self.client.clone());
            let wanted: Node =
                serde_json::from_value(node.clone()).map_err(|e| format!("node object: {e}"))?;
            let params = PatchParams::default();
            if nodes
                .get_opt(NODE_NAME)
                .await
                .map_err(|e| format!("get node: {e}"))?
                .is_none()
            {
                nodes
                    .create(&PostParams::default(), &wanted)
                    .await
                    .map_err(|e| format!("create node: {e}"))?;
            } else {
                let body = json!({"metadata": {"labels": node["metadata"]["labels"]}, "spec": node["spec"]});
                nodes
                    .patch(NODE_NAME, &params, &Patch::Merge(&body))
                    .await
                    .map_err(|e| format!("patch node: {e}"))?;
            }
            // The status is a subresource: written on its own, whatever the create kept.
            let status = json!({"status": node["status"]});
            nodes
                .patch_status(NODE_NAME, &params, &Patch::Merge(&status))
                .await
                .map_err(|e| format!("node status: {e}"))?;

            let slos = self.slo_api("NodeSLO", "nodeslos");
            let mut slo: DynamicObject = serde_json::from_value(node_slo.clone())
                .map_err(|e| format!("NodeSLO object: {e}"))?;
            match slos
                .get_opt(NODE_NAME)
                .await
                .map_err(|e| format!("get NodeSLO: {e}"))?
            {
                Some(existing) => {
                    slo.metadata.resource_version = existing.resource_version();
                    slos.replace(NODE_NAME, &PostParams::default(), &slo)
                        .await
                        .map_err(|e| format!("replace NodeSLO: {e}"))?;
                }
                None => {
                    slos.create(&PostParams::default(), &slo)
                        .await
                        .map_err(|e| format!("create NodeSLO: {e}"))?;
                }
            }

            let metrics = self.slo_api("NodeMetric", "nodemetrics");
            if metrics
                .get_opt(NODE_NAME)
                .await
                .map_err(|e| format!("get NodeMetric: {e}"))?
                .is_none()
            {
                let metric: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "slo.koordinator.sh/v1alpha1",
                    "kind": "NodeMetric",
                    "metadata": {"name": NODE_NAME},
                    "spec": {},
                }))
                .map_err(|e| e.to_string())?;
                metrics
                    .create(&PostParams::default(), &metric)
                    .await
                    .map_err(|e| format!("create NodeMetric: {e}"))?;
            }
            Ok(())
        })
    }

    /// Deletes what [`apply`](Self::apply) made and the topology upstream
    /// reported (best effort; reports the first failure).
    pub fn remove(&self) -> Result<(), String> {
        self.runtime.block_on(async {
            let mut first_error = None;
            let params = DeleteParams::default();
            for (kind, plural) in [("NodeSLO", "nodeslos"), ("NodeMetric", "nodemetrics")] {
                if let Err(e) = self.slo_api(kind, plural).delete(NODE_NAME, &params).await
                    && !is_not_found(&e)
                {
                    first_error.get_or_insert(format!("delete {kind}: {e}"));
                }
            }
            // Upstream's own report of the node's topology.
            let topologies: Api<DynamicObject> = Api::all_with(
                self.client.clone(),
                &api_resource(
                    "topology.node.k8s.io",
                    "v1alpha1",
                    "NodeResourceTopology",
                    "noderesourcetopologies",
                ),
            );
            if let Err(e) = topologies.delete(NODE_NAME, &params).await
                && !is_not_found(&e)
            {
                first_error.get_or_insert(format!("delete NodeResourceTopology: {e}"));
            }
            let nodes: Api<Node> = Api::all(self.client.clone());
            if let Err(e) = nodes.delete(NODE_NAME, &params).await
                && !is_not_found(&e)
            {
                first_error.get_or_insert(format!("delete node: {e}"));
            }
            first_error.map_or(Ok(()), Err)
        })
    }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Upstream's koordlet for one run, acting for [`NODE_NAME`] with the host's
/// paths (`agent_mode=hostMode`): the cgroupfs layout under /sys/fs/cgroup
/// (it guesses the driver from `kubepods`), pods from the fake kubelet over
/// plain HTTP, no kubelet configz, cpusuppress on and every other strategy
/// and runtime hook off (the benchmark has no runtime proxy or NRI), its
/// TSDB, prediction checkpoints, audit log and hook socket under `dir`.
/// It reports the NodeResourceTopology (its default; the cpuset policy reads
/// it, and without it the cfsQuota policy's cpuset recovery warns every second).
pub fn upstream_command(
    binary: &Path,
    dir: &Path,
    kubelet_port: u16,
    metrics_port: u16,
    be_sched_idle: bool,
) -> Command {
    let gates = [
        // The runtime hook that applies the coreSched CPU QoS (cookies and
        // the tiers' cpu.idle); off by default, as in ours.
        ("CoreSched", be_sched_idle),
        ("BECPUSuppress", true),
        ("NodeTopologyReport", true),
        ("CPUBurst", false),
        ("RdtResctrl", false),
        ("GroupIdentity", false),
        ("CPUSetAllocator", false),
        ("BatchResource", false),
    ]
    .iter()
    .map(|(gate, on)| format!("{gate}={on}"))
    .collect::<Vec<_>>()
    .join(",");
    let mut command = Command::new(binary);
    command
        .env("NODE_NAME", NODE_NAME)
        .env("agent_mode", "hostMode")
        .arg(format!("--addr=127.0.0.1:{metrics_port}"))
        .arg("--cgroup-root-dir=/sys/fs/cgroup/")
        .arg("--kubelet-insecure-tls=true")
        .arg(format!("--kubelet-read-only-port={kubelet_port}"))
        .arg("--kubelet-preferred-address-type=InternalIP")
        .arg("--disable-query-kubelet-config=true")
        .arg(format!("--feature-gates={gates}"))
        .arg("--enable-nri-runtime-hook=false")
        .arg(format!(
            "--runtime-hooks-addr={}",
            dir.join("koordlet.sock").display()
        ))
        .arg(format!(
            "--runtime-hooks-host-endpoint={}",
            dir.join("koordlet.sock").display()
        ))
        .arg(format!(
            "--runtime-hooks-config-path={}",
            dir.join("hookserver.d").display()
        ))
        .arg(format!("--tsdb-path={}/", dir.join("tsdb").display()))
        .arg(format!(
            "--prediction-checkpoint-filepath={}",
            dir.join("prediction").display()
        ))
        .arg(format!("--audit-log-dir={}", dir.join("audit").display()));
    command
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn get(port: u16, path: &str) -> (String, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    }

    #[test]
    fn fake_kubelet_serves_the_bench_pods_as_a_pod_list() {
        let dir =
            std::env::temp_dir().join(format!("koord-bench-fake-kubelet-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let kubelet =
            FakeKubelet::start(crate::pod_list_json(), &dir.join("requests.log")).unwrap();
        for path in ["/pods/", "/pods"] {
            let (status, body) = get(kubelet.port, path);
            assert_eq!(status, "HTTP/1.1 200 OK", "{path}");
            // The kubelet's format: a v1 PodList (kind and apiVersion are checked).
            let list: k8s_openapi::List<Pod> = serde_json::from_str(&body).unwrap();
            let pods: Vec<(String, String, String, String)> = list
                .items
                .iter()
                .map(|pod| {
                    let status = pod.status.as_ref().unwrap();
                    (
                        pod.metadata.uid.clone().unwrap(),
                        pod.metadata.labels.as_ref().unwrap()["koordinator.sh/qosClass"].clone(),
                        status.qos_class.clone().unwrap(),
                        status.container_statuses.as_ref().unwrap()[0]
                            .container_id
                            .clone()
                            .unwrap(),
                    )
                })
                .collect();
            assert_eq!(
                pods,
                vec![
                    (
                        crate::LS_UID.to_string(),
                        "LS".to_string(),
                        "Burstable".to_string(),
                        format!("containerd://{}", crate::LS_CONTAINER_ID)
                    ),
                    (
                        crate::BE_UID.to_string(),
                        "BE".to_string(),
                        "BestEffort".to_string(),
                        format!("containerd://{}", crate::BE_CONTAINER_ID)
                    ),
                ]
            );
            assert!(
                list.items
                    .iter()
                    .all(|p| p.status.as_ref().unwrap().phase.as_deref() == Some("Running"))
            );
        }
        assert_eq!(kubelet.pod_requests(), 2);
        let (status, _) = get(kubelet.port, "/configz");
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        assert_eq!(kubelet.pod_requests(), 2);
        assert!(kubelet.wait_for_pod_requests(0, 2, Duration::from_millis(10)));
        assert!(!kubelet.wait_for_pod_requests(2, 1, Duration::from_millis(100)));
        // A head beyond the limit is refused, and the server keeps serving.
        let mut stream = TcpStream::connect(("127.0.0.1", kubelet.port)).unwrap();
        let _ = write!(
            stream,
            "GET /pods HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(MAX_HEAD + 10)
        );
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        assert!(text.starts_with("HTTP/1.1 431"), "{text}");
        assert_eq!(get(kubelet.port, "/pods").0, "HTTP/1.1 200 OK");
        let log = fs::read_to_string(dir.join("requests.log")).unwrap();
        assert!(log.lines().any(|l| l.ends_with(" /configz")), "{log}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn suppress_gauges_are_summarised_and_chunks_joined() {
        let text = "# HELP x\nkoordlet_be_suppress_cpu_cores{node=\"n\",type=\"cfsQuota\"} 0.02\nkoordlet_be_suppress_ls_used_cpu_cores{node=\"n\"} 1.4\nother 1\n";
        assert_eq!(
            suppress_summary(text),
            "cpu_cores[cfsQuota]=0.02 ls_used_cpu_cores=1.4"
        );
        assert_eq!(suppress_summary("other 1\n"), "none");
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").unwrap(),
            "hello world"
        );
        assert!(dechunk("zz\r\nhello").is_err());
        assert!(dechunk("9\r\nhello").is_err());
    }

    #[test]
    fn node_points_upstream_at_the_fake_kubelet() {
        let node: Node = serde_json::from_value(node_object(41234, 2, 4 << 30)).unwrap();
        assert_eq!(node.metadata.name.as_deref(), Some(NODE_NAME));
        let status = node.status.unwrap();
        let addresses = status.addresses.unwrap();
        let internal: Vec<&str> = addresses
            .iter()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address.as_str())
            .collect();
        assert_eq!(internal, vec!["127.0.0.1"]);
        assert_eq!(
            status
                .daemon_endpoints
                .unwrap()
                .kubelet_endpoint
                .unwrap()
                .port,
            41234
        );
        let capacity = status.capacity.unwrap();
        assert_eq!(capacity["cpu"].0, "2");
        assert_eq!(capacity["memory"].0, (4u64 << 30).to_string());
        assert_eq!(status.allocatable.unwrap()["cpu"].0, "2");
        assert_eq!(node.spec.unwrap().unschedulable, Some(true));
    }

    #[test]
    fn node_slo_carries_the_run_policy() {
        let slo = node_slo_object("cfsQuota", 65, false);
        assert_eq!(slo["metadata"]["name"], NODE_NAME);
        let threshold = &slo["spec"]["resourceUsedThresholdWithBE"];
        assert_eq!(threshold["enable"], true);
        assert_eq!(threshold["cpuSuppressThresholdPercent"], 65);
        assert_eq!(threshold["cpuSuppressPolicy"], "cfsQuota");
        assert!(slo["spec"].get("resourceQOSStrategy").is_none());
        // It must parse as the object the client writes.
        let _: DynamicObject = serde_json::from_value(slo).unwrap();

        let idle = node_slo_object("cfsQuota", 65, true);
        let strategy = &idle["spec"]["resourceQOSStrategy"];
        assert_eq!(strategy["policies"]["cpuPolicy"], "coreSched");
        assert_eq!(strategy["beClass"]["cpuQOS"]["schedIdle"], 1);
        assert_eq!(strategy["beClass"]["cpuQOS"]["enable"], true);
        // Only BE is named: the other classes keep their defaults (not idle).
        assert!(strategy.get("lsClass").is_none());
    }

    #[test]
    fn upstream_flags_point_at_the_fake_kubelet_and_the_run_dir() {
        let command = upstream_command(
            Path::new("/bin/koordlet"),
            Path::new("/tmp/run"),
            4100,
            4200,
            true,
        );
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for wanted in [
            "--kubelet-read-only-port=4100",
            "--kubelet-insecure-tls=true",
            "--disable-query-kubelet-config=true",
            "--addr=127.0.0.1:4200",
            "--tsdb-path=/tmp/run/tsdb/",
            "--enable-nri-runtime-hook=false",
        ] {
            assert!(
                args.iter().any(|a| a == wanted),
                "{wanted} missing from {args:?}"
            );
        }
        let gates = args
            .iter()
            .find(|a| a.starts_with("--feature-gates="))
            .unwrap();
        assert!(gates.contains("BECPUSuppress=true") && gates.contains("NodeTopologyReport=true"));
        assert!(gates.contains("CoreSched=true"), "{gates}");
        let envs: Vec<(String, String)> = command
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.unwrap().to_string_lossy().into_owned(),
                )
            })
            .collect();
        assert!(envs.contains(&("NODE_NAME".into(), NODE_NAME.into())));
        assert!(envs.contains(&("agent_mode".into(), "hostMode".into())));
    }
}

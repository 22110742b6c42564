#![allow(clippy::unwrap_used)]
//! The NodeResourceTopology reporter against a fake API server (create on
//! 404, no write while unchanged, replace when a pod's cpuset changes, the
//! pod-change trigger of the run loop) and its standalone file output; the
//! hardware comes from a generated sysfs tree (and, for the CPU model and
//! vendor, this machine's /proc/cpuinfo).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use apis::extension::{
    CPUBasicInfo, get_cpu_basic_info, get_cpu_topology, get_node_cpu_shared_pools,
};
use apis::topology::v1alpha1::NodeResourceTopology;
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_common::testing::{FakeApiServer, RecordedRequest, TempDir};
use koord_common::{Shutdown, ShutdownReason};
use koordlet::statesinformer::nodetopo::{
    HardwareSource, NodeTopologyReporter, SyncOutcome, read_node_facts, read_node_hardware,
};
use koordlet::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs, StatesInformer};
use koordlet::system::SystemArgs;
use serde_json::{Value, json};

const NRT_PATH: &str = "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies";
const NODE_NRT_PATH: &str = "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies/node-a";
const TIMEOUT: Duration = Duration::from_secs(60);

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// 2 sockets = 2 NUMA nodes × 2 cores × 2 threads; CPU n and n+4 are siblings.
fn fake_sys(root: &Path) {
    let cpu_root = root.join("devices/system/cpu");
    write(&cpu_root.join("online"), "0-7\n");
    for cpu in 0..8u32 {
        let core = cpu % 4;
        let dir = cpu_root.join(format!("cpu{cpu}/topology"));
        write(&dir.join("core_id"), &format!("{core}\n"));
        write(&dir.join("physical_package_id"), &format!("{}\n", core / 2));
        let siblings = format!("{},{}\n", cpu % 4, cpu % 4 + 4);
        write(&dir.join("thread_siblings_list"), &siblings);
    }
    let node_root = root.join("devices/system/node");
    write(&node_root.join("node0/cpulist"), "0-1,4-5\n");
    write(&node_root.join("node1/cpulist"), "2-3,6-7\n");
    for node in 0..2 {
        write(
            &node_root.join(format!("node{node}/meminfo")),
            &format!(
                "Node {node} MemTotal:       4194304 kB\nNode {node} MemFree:        1048576 kB\n"
            ),
        );
    }
}

/// The fake sysfs of [`fake_sys`] with intel_pstate turbo on and a resctrl
/// L3 mask, and this machine's /proc: every input `read_node_facts` takes.
fn facts_of(sys_root: &Path) -> HardwareSource {
    write(
        &sys_root.join("devices/system/cpu/intel_pstate/no_turbo"),
        "0\n",
    );
    write(&sys_root.join("fs/resctrl/info/L3/cbm_mask"), "fff\n");
    let system = SystemArgs {
        proc_root_dir: "/proc".into(),
        sys_root_dir: sys_root.to_path_buf(),
        sys_fs_root_dir: sys_root.join("fs"),
        ..SystemArgs::default()
    };
    let kubelet_root = sys_root.join("no-kubelet");
    Arc::new(move || read_node_facts(&system, &kubelet_root, None))
}

/// `key : value` of the first processor block of this machine's
/// /proc/cpuinfo, read independently of koordlet.
fn real_cpuinfo_field(key: &str) -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let first_block = text.trim_start().split("\n\n").next().unwrap_or_default();
    first_block
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case(key))
        .map(|(_, value)| value.trim().to_string())
        .unwrap_or_default()
}

fn hardware_of(root: &Path) -> HardwareSource {
    let root = root.to_path_buf();
    Arc::new(move || read_node_hardware(&root))
}

fn client_for(api: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap()
}

fn node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "node-a", "uid": "node-uid-1"}
    }))
    .unwrap()
}

fn lsr_pod(cpuset: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": "lsr", "namespace": "default", "uid": "pod-1",
            "labels": {"koordinator.sh/qosClass": "LSR"},
            "annotations": {"scheduling.koordinator.sh/resource-status": format!("{{\"cpuset\":\"{cpuset}\"}}")}
        },
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

fn set_pods(states: &StatesInformer, pods: Vec<Pod>) {
    states.set_pods(PodsSnapshot {
        pods,
        origin: PodsOrigin::Kubelet,
        synced_at: SystemTime::now(),
    });
}

fn requests(api: &FakeApiServer, method: &str, path: &str) -> Vec<RecordedRequest> {
    api.recorded()
        .into_iter()
        .filter(|r| r.method == method && r.path() == path)
        .collect()
}

async fn wait_for(api: &FakeApiServer, method: &str, path: &str, count: usize) -> RecordedRequest {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let found = requests(api, method, path);
        if found.len() >= count {
            return found[count - 1].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {method} {path} #{count}; seen {:?}",
            api.requests()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Makes the fake's GET return `body` (a written object) as stored, with a
/// resourceVersion, the way the API server would.
fn store(api: &FakeApiServer, body: &str, version: &str) -> Value {
    let mut object: Value = serde_json::from_str(body).unwrap();
    object["metadata"]["resourceVersion"] = json!(version);
    let text = object.to_string();
    api.respond("GET", NODE_NRT_PATH, 200, &text);
    api.respond("PUT", NODE_NRT_PATH, 200, &text);
    object
}

fn ls_pools(object: &Value) -> Vec<String> {
    let annotations: std::collections::BTreeMap<String, String> =
        serde_json::from_value(object["metadata"]["annotations"].clone()).unwrap();
    get_node_cpu_shared_pools(&annotations)
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|pool| pool.cpuset)
        .collect()
}

/// A generated sysfs tree, a fake API server answering the create with
/// `code` and `body`, and an informer that knows the Node and no pods.
struct Cluster {
    sys: TempDir,
    api: FakeApiServer,
    states: StatesInformer,
}

impl Cluster {
    fn start(code: u16, body: &str) -> Self {
        let sys = TempDir::new("nodetopo-sys").unwrap();
        fake_sys(sys.path());
        let api = FakeApiServer::start().unwrap();
        api.respond("POST", NRT_PATH, code, body);
        let states = StatesInformer::new("node-a", RequiredSyncs::CLUSTER);
        states.set_node(Some(node()));
        set_pods(&states, vec![]);
        Self { sys, api, states }
    }

    /// A reporter writing through the fake API server.
    fn reporter(&self) -> NodeTopologyReporter {
        NodeTopologyReporter::new(
            self.states.clone(),
            hardware_of(self.sys.path()),
            Some(client_for(&self.api)),
            None,
        )
    }
}

#[tokio::test]
async fn creates_on_404_skips_unchanged_and_replaces_on_cpuset_change() {
    let sys = TempDir::new("nodetopo-sys").unwrap();
    fake_sys(sys.path());
    let api = FakeApiServer::start().unwrap();
    let created_body = r#"{"apiVersion":"topology.node.k8s.io/v1alpha1","kind":"NodeResourceTopology","metadata":{"name":"node-a","resourceVersion":"1"}}"#;
    api.respond("POST", NRT_PATH, 201, created_body);

    let states = StatesInformer::new("node-a", RequiredSyncs::CLUSTER);
    let mut reporter = NodeTopologyReporter::new(
        states.clone(),
        facts_of(sys.path()),
        Some(client_for(&api)),
        None,
    )
    .with_resync(Duration::ZERO);

    // Nothing is known yet: no request at all.
    assert_eq!(reporter.report_once().await.unwrap(), None);
    set_pods(&states, vec![]);
    assert_eq!(
        reporter.report_once().await.unwrap(),
        None,
        "waits for the Node"
    );
    assert!(api.recorded().is_empty(), "{:?}", api.requests());
    states.set_node(Some(node()));

    // 404 → create.
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Created)
    );
    let post = wait_for(&api, "POST", NRT_PATH, 1).await;
    let created: Value = serde_json::from_str(&post.body).unwrap();
    assert_eq!(created["kind"], "NodeResourceTopology");
    assert_eq!(created["metadata"]["name"], "node-a");
    assert_eq!(
        created["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Koordinator"
    );
    assert_eq!(created["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(
        created["metadata"]["ownerReferences"][0]["uid"],
        "node-uid-1"
    );
    assert_eq!(created["topologyPolicies"], json!(["None"]));
    let zones: Vec<&str> = created["zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|zone| zone["name"].as_str().unwrap())
        .collect();
    assert_eq!(zones, ["node-0", "node-1"]);
    let memory = created["zones"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "memory")
        .unwrap()
        .clone();
    assert_eq!(memory["capacity"], (4_194_304u64 * 1024).to_string());
    let annotations: std::collections::BTreeMap<String, String> =
        serde_json::from_value(created["metadata"]["annotations"].clone()).unwrap();
    let topology = get_cpu_topology(&annotations).unwrap().unwrap();
    assert_eq!(topology.detail.len(), 8);
    assert_eq!(topology.detail[6].node, 1);
    assert_eq!(topology.detail[6].core, 2);
    assert_eq!(ls_pools(&created), ["0-1,4-5", "2-3,6-7"]);
    // Model and vendor as this machine's /proc/cpuinfo says; SMT, turbo and
    // the L3 mask from the generated tree.
    let basic_info = get_cpu_basic_info(&annotations).unwrap().unwrap();
    assert_eq!(
        basic_info,
        CPUBasicInfo {
            cpu_model: real_cpuinfo_field("model name"),
            hyper_thread_enabled: true,
            turbo_enabled: true,
            cat_l3_cbm_mask: "fff".to_string(),
            vendor_id: real_cpuinfo_field("vendor_id"),
        }
    );

    // Stored as written: nothing to do, only a GET.
    store(&api, &post.body, "2");
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Unchanged)
    );
    assert_eq!(requests(&api, "GET", NODE_NRT_PATH).len(), 2);
    assert!(requests(&api, "PUT", NODE_NRT_PATH).is_empty());
    assert_eq!(requests(&api, "POST", NRT_PATH).len(), 1);

    // An LSR pod bound to CPUs 1 and 5 leaves the LS pool: replace, with
    // the resourceVersion that was read.
    set_pods(&states, vec![lsr_pod("1,5")]);
    let outcome = reporter.report_once().await.unwrap();
    assert!(
        matches!(&outcome, Some(SyncOutcome::Updated(reason)) if reason.contains("cpu-shared-pools")),
        "{outcome:?}"
    );
    let put = wait_for(&api, "PUT", NODE_NRT_PATH, 1).await;
    let replaced: Value = serde_json::from_str(&put.body).unwrap();
    assert_eq!(replaced["metadata"]["resourceVersion"], "2");
    assert_eq!(ls_pools(&replaced), ["0,4", "2-3,6-7"]);
}

#[tokio::test]
async fn unchanged_content_is_not_even_read_again_until_resync() {
    let cluster = Cluster::start(
        201,
        r#"{"metadata":{"name":"node-a"},"topologyPolicies":["None"],"zones":[]}"#,
    );
    let api = &cluster.api;
    let mut reporter = cluster.reporter().with_resync(Duration::from_secs(3600));
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Created)
    );
    let before = api.recorded().len();
    for _ in 0..3 {
        assert_eq!(
            reporter.report_once().await.unwrap(),
            Some(SyncOutcome::Unchanged)
        );
    }
    assert_eq!(api.recorded().len(), before, "{:?}", api.requests());
}

#[tokio::test]
async fn run_loop_reports_at_start_and_after_a_pod_change() {
    let cluster = Cluster::start(
        201,
        r#"{"metadata":{"name":"node-a","resourceVersion":"1"}}"#,
    );
    let api = &cluster.api;
    // A long interval: only the start and the pod change can trigger.
    let reporter = cluster
        .reporter()
        .with_interval(Duration::from_secs(3600))
        .with_debounce(Duration::from_millis(50));
    let shutdown = Shutdown::new();
    let task = tokio::spawn(reporter.run(shutdown.clone()));

    let post = wait_for(api, "POST", NRT_PATH, 1).await;
    store(api, &post.body, "5");
    set_pods(&cluster.states, vec![lsr_pod("2,6")]);
    let put = wait_for(api, "PUT", NODE_NRT_PATH, 1).await;
    let replaced: Value = serde_json::from_str(&put.body).unwrap();
    assert_eq!(ls_pools(&replaced), ["0-1,4-5", "3,7"]);

    shutdown.trigger(ShutdownReason::Requested("test".to_string()));
    tokio::time::timeout(TIMEOUT, task).await.unwrap().unwrap();
}

#[tokio::test]
async fn standalone_writes_the_object_to_a_file() {
    let sys = TempDir::new("nodetopo-sys").unwrap();
    fake_sys(sys.path());
    let out = TempDir::new("nodetopo-out").unwrap();
    let path = out.path().join("nrt.json");
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    set_pods(&states, vec![lsr_pod("0-1,4-5")]);
    let mut reporter =
        NodeTopologyReporter::new(states, hardware_of(sys.path()), None, Some(path.clone()));
    assert_eq!(reporter.report_once().await.unwrap(), None);
    let object: NodeResourceTopology =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(object.metadata.name.as_deref(), Some("node-a"));
    assert_eq!(object.zones.len(), 2);
    let pools = get_node_cpu_shared_pools(object.metadata.annotations.as_ref().unwrap())
        .unwrap()
        .unwrap();
    // NUMA node 0 is fully bound: only node 1 has a pool.
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].cpuset, "2-3,6-7");
    assert_eq!(pools[0].node, 1);
}

#[tokio::test]
async fn a_failed_write_is_an_error_and_retried_next_round() {
    let cluster = Cluster::start(
        500,
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd down","reason":"InternalError","code":500}"#,
    );
    let api = &cluster.api;
    let mut reporter = cluster.reporter().with_resync(Duration::from_secs(3600));
    let err = reporter.report_once().await.unwrap_err();
    assert!(err.to_string().contains("node-a"), "{err}");
    api.respond(
        "POST",
        NRT_PATH,
        201,
        r#"{"metadata":{"name":"node-a","resourceVersion":"1"}}"#,
    );
    // Same content, but nothing was reported yet: it is sent again.
    assert_eq!(
        reporter.report_once().await.unwrap(),
        Some(SyncOutcome::Created)
    );
    assert_eq!(requests(api, "POST", NRT_PATH).len(), 2);
}

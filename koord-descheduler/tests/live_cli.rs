#![allow(clippy::unwrap_used)]
//! The real binary against koord_common's fake API server serving the
//! `plan` fixture (NodeMetrics made fresh): it takes the leader Lease,
//! syncs its caches and turns ready, and once the hot node has been hot
//! for more than `consecutiveAbnormalities` rounds it creates upstream's
//! PodMigrationJobs; metrics count the rounds and victims.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use koord_common::testing::{
    FakeApiServer, HTTP_WAIT, TempDir, TestProcess, command_with_kubeconfig, http_get_blocking,
    write_kubeconfig,
};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_koord-descheduler");
const WAIT: Duration = Duration::from_secs(60);
const PMJ_PATH: &str = "/apis/scheduling.koordinator.sh/v1alpha1/podmigrationjobs";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/koordinator-system/leases";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The snapshot fixture's objects by kind (one JSON object per document).
fn fixture_objects() -> BTreeMap<String, Vec<Value>> {
    let text = std::fs::read_to_string(fixture("hot-and-cold.yaml")).unwrap();
    let mut by_kind: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('{') {
            let object: Value = serde_json::from_str(line).unwrap();
            let kind = object["kind"].as_str().unwrap().to_string();
            by_kind.entry(kind).or_default().push(object);
        }
    }
    by_kind
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> String {
    json!({"kind": format!("{kind}List"), "apiVersion": api_version,
           "metadata": {"resourceVersion": "1"}, "items": items})
    .to_string()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn leads_syncs_and_creates_pod_migration_jobs() {
    let api = FakeApiServer::start().unwrap();
    api.hold_watches_open();
    let now = k8s_openapi::jiff::Timestamp::try_from(SystemTime::now()).unwrap();
    let mut objects = fixture_objects();
    for metric in objects.get_mut("NodeMetric").unwrap() {
        metric["status"]["updateTime"] = json!(now.to_string());
    }
    let take = |objects: &mut BTreeMap<String, Vec<Value>>, kind: &str| {
        objects.remove(kind).unwrap_or_default()
    };
    let routes = [
        ("/api/v1/nodes", "Node", "v1"),
        ("/api/v1/pods", "Pod", "v1"),
        (
            "/apis/slo.koordinator.sh/v1alpha1/nodemetrics",
            "NodeMetric",
            "slo.koordinator.sh/v1alpha1",
        ),
        (
            "/apis/policy/v1/poddisruptionbudgets",
            "PodDisruptionBudget",
            "policy/v1",
        ),
        (
            PMJ_PATH,
            "PodMigrationJob",
            "scheduling.koordinator.sh/v1alpha1",
        ),
        (
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            "PriorityClass",
            "scheduling.k8s.io/v1",
        ),
        ("/apis/apps/v1/replicasets", "ReplicaSet", "apps/v1"),
        ("/apis/apps/v1/statefulsets", "StatefulSet", "apps/v1"),
        (
            "/api/v1/replicationcontrollers",
            "ReplicationController",
            "v1",
        ),
    ];
    for (path, kind, api_version) in routes {
        api.respond(
            "GET",
            path,
            200,
            &list(kind, api_version, take(&mut objects, kind)),
        );
    }
    // Creates are echoed back; the Lease GET stays 404, so every renewal creates it anew.
    api.respond_with(|request| {
        (request.method == "POST" && (request.path() == PMJ_PATH || request.path() == LEASES))
            .then(|| (201, request.body.clone()))
    });

    let dir = TempDir::new("descheduler-live").unwrap();
    let port = free_port();
    let config = dir.path().join("config.yaml");
    let base = std::fs::read_to_string(fixture("config.yaml")).unwrap();
    let base = base.replace("deschedulingInterval: 10s", "deschedulingInterval: 300ms");
    std::fs::write(
        &config,
        format!(
            "{base}\nhealthzBindAddress: 127.0.0.1:{port}\nmetricsBindAddress: 127.0.0.1:{port}\n"
        ),
    )
    .unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.arg(format!("--config={}", config.display()));
    let mut process = TestProcess::spawn(command).unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    let deadline = Instant::now() + WAIT;
    loop {
        let ready = http_get_blocking(addr, "/readyz?verbose", HTTP_WAIT)
            .map(|r| r.body.contains("[+]descheduler ok"))
            .unwrap_or(false);
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready:\n{}",
            process.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    api.wait_for_request("POST", LEASES, WAIT)
        .unwrap_or_else(|| panic!("no Lease created:\n{}", process.output()));
    let deadline = Instant::now() + WAIT;
    let jobs: Vec<Value> = loop {
        let jobs: Vec<Value> = api
            .recorded()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path() == PMJ_PATH)
            .map(|r| serde_json::from_str(&r.body).unwrap())
            .collect();
        if jobs.len() >= 2 {
            break jobs;
        }
        assert!(Instant::now() < deadline, "no jobs:\n{}", process.output());
        std::thread::sleep(Duration::from_millis(100));
    };
    let pods: Vec<&str> = jobs[..2]
        .iter()
        .map(|job| job["spec"]["podRef"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(pods, ["web-6", "web-5"]);
    assert_eq!(jobs[0]["spec"]["mode"], "ReservationFirst");
    assert_eq!(jobs[0]["spec"]["podRef"]["uid"], "uid-web-6");
    assert_eq!(
        jobs[0]["metadata"]["annotations"]["koordinator.sh/evict-trigger"],
        "LowNodeLoad"
    );

    let metrics = http_get_blocking(addr, "/metrics", HTTP_WAIT).unwrap().body;
    for needle in [
        "koord_descheduler_descheduling_rounds_total{result=\"ran\"}",
        "koord_descheduler_victims_total{profile=\"koord-descheduler\",outcome=\"created\"}",
        "koord_descheduler_nodes_classified{",
        "koord_descheduler_descheduling_round_duration_seconds_count",
        "leader_election_master_status{name=\"koord-descheduler\"} 1",
    ] {
        assert!(metrics.contains(needle), "{needle} missing:\n{metrics}");
    }

    process.signal("TERM").unwrap();
    let status = process.wait_exit(WAIT).unwrap().expect("stops on SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", process.output());
}

#[test]
fn readiness_names_the_cache_still_awaited() {
    let api = FakeApiServer::start().unwrap();
    api.hold_watches_open();
    // Everything lists, except PodMigrationJobs (no CRD: 404).
    for (path, kind, api_version) in [
        ("/api/v1/nodes", "Node", "v1"),
        ("/api/v1/pods", "Pod", "v1"),
        (
            "/apis/slo.koordinator.sh/v1alpha1/nodemetrics",
            "NodeMetric",
            "slo.koordinator.sh/v1alpha1",
        ),
        (
            "/apis/policy/v1/poddisruptionbudgets",
            "PodDisruptionBudget",
            "policy/v1",
        ),
    ] {
        api.respond("GET", path, 200, &list(kind, api_version, Vec::new()));
    }
    let dir = TempDir::new("descheduler-unready").unwrap();
    let port = free_port();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\nleaderElection:\n  leaderElect: false\nhealthzBindAddress: 127.0.0.1:{port}\nmetricsBindAddress: 127.0.0.1:{port}\n"
        ),
    )
    .unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.arg(format!("--config={}", config.display()));
    let mut process = TestProcess::spawn(command).unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let body = http_get_blocking(addr, "/readyz?verbose", HTTP_WAIT)
            .map(|r| r.body)
            .unwrap_or_default();
        if body.contains("podmigrationjobs.scheduling.koordinator.sh") {
            assert!(body.contains("[-]descheduler"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "{body}\n{}", process.output());
        std::thread::sleep(Duration::from_millis(100));
    }
    process.signal("TERM").unwrap();
    let status = process.wait_exit(WAIT).unwrap().expect("stops on SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", process.output());
}

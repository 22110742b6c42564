#![allow(clippy::unwrap_used)]
//! The "done when" check: a standalone koordlet, given a pods file
//! describing processes this test placed in kubelet-style cgroups, writes a
//! NodeMetric whose pod CPU usage matches what the processes used. The same
//! report carries a host application's usage (a NodeSLO file names its
//! cgroup), per-NUMA usage and the prod reclaimable / peak estimate.
//!
//! Needs root and the cgroup v1 cpu and cpuacct hierarchies (prints `SKIP:`
//! otherwise). The pods get unique UIDs and a private kubepods directory
//! (`--kubepods-cgroup-dir`), so their cgroups
//! (`kubepods-koord-test-<unique>/burstable/pod<uid>/<container>`) never
//! collide with another run's, and a kubelet on the machine, which removes
//! pod cgroups it does not know below its own `kubepods`, leaves them alone;
//! everything created is removed even when the test fails.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use koord_common::testing::{
    HTTP_WAIT, PROCESS_WAIT, TempDir, TestProcess, http_get_blocking, isolated_command,
    wait_for_http_status,
};

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");
/// The CFS quota of pod B: half a core.
const QUOTA_US: u64 = 50_000;
const PERIOD_US: u64 = 100_000;
/// The host application's quota: a fifth of a core.
const APP_QUOTA_US: u64 = 20_000;
/// Pod A's requests (the prod pod whose unused request is reclaimable).
const POD_A_CPU_REQUEST: &str = "4";
const POD_A_MEMORY_REQUEST_GIB: i64 = 8;

mod support;

use support::standalone::*;

#[test]
fn standalone_node_metric_matches_the_generated_load() {
    if let Some(reason) = skip_reason() {
        println!("SKIP: {reason}");
        return;
    }
    let unique = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let kubepods = format!("kubepods-koord-test-{unique}");
    let pod_a = TestPod {
        name: "busy-full-core",
        uid: format!("koord-test-{unique}-a"),
        container_id: format!("koordtest{unique}a").replace('-', ""),
        kubepods: kubepods.clone(),
    };
    let pod_b = TestPod {
        name: "busy-half-core",
        uid: format!("koord-test-{unique}-b"),
        container_id: format!("koordtest{unique}b").replace('-', ""),
        kubepods: kubepods.clone(),
    };

    let mut cleanup = Cleanup {
        processes: Vec::new(),
        dirs: Vec::new(),
    };
    for tier in [kubepods.clone(), format!("{kubepods}/burstable")] {
        create_cgroup(Path::new(&tier), &mut cleanup);
    }
    for pod in [&pod_a, &pod_b] {
        create_cgroup(&pod.relative_dir(), &mut cleanup);
        create_cgroup(&pod.container_dir(), &mut cleanup);
    }
    let quota_dir = Path::new(CGROUP_ROOT)
        .join("cpu")
        .join(pod_b.container_dir());
    fs::write(quota_dir.join("cpu.cfs_period_us"), PERIOD_US.to_string()).unwrap();
    fs::write(quota_dir.join("cpu.cfs_quota_us"), QUOTA_US.to_string()).unwrap();
    start_busy_process(&pod_a, &mut cleanup);
    start_busy_process(&pod_b, &mut cleanup);

    // A host application outside Kubernetes, in its own cgroup at the
    // hierarchy root (the NodeSLO names it), capped at a fifth of a core.
    let app_parent = format!("koord-test-{unique}-host");
    let app_dir = Path::new(&app_parent).join("app");
    create_cgroup(Path::new(&app_parent), &mut cleanup);
    create_cgroup(&app_dir, &mut cleanup);
    let app_cpu = Path::new(CGROUP_ROOT).join("cpu").join(&app_dir);
    fs::write(app_cpu.join("cpu.cfs_period_us"), PERIOD_US.to_string()).unwrap();
    fs::write(app_cpu.join("cpu.cfs_quota_us"), APP_QUOTA_US.to_string()).unwrap();
    start_busy_process_in(&app_dir, &mut cleanup);

    let dir = TempDir::new("standalone").unwrap();
    let pods_file = dir.path().join("pods.json");
    let pods = serde_json::json!({
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [
            pod_json(
                &pod_a,
                serde_json::json!({}),
                serde_json::json!({
                    "cpu": POD_A_CPU_REQUEST,
                    "memory": format!("{POD_A_MEMORY_REQUEST_GIB}Gi"),
                }),
            ),
            pod_json(
                &pod_b,
                serde_json::json!({"koordinator.sh/qosClass": "BE"}),
                serde_json::json!({}),
            ),
        ]
    });
    fs::write(&pods_file, pods.to_string()).unwrap();
    let slo_file = dir.path().join("nodeslo.json");
    let node_slo = serde_json::json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": "standalone-test-node"},
        "spec": {"hostApplications": [{
            "name": "test-app",
            "priority": "koord-prod",
            "qos": "LS",
            "cgroupPath": {"base": "CgroupRoot", "parentDir": app_parent, "relativePath": "app"},
        }]},
    });
    fs::write(&slo_file, node_slo.to_string()).unwrap();
    let output = dir.path().join("nodemetric.json");

    let mut command = isolated_command(BIN);
    command
        .args([
            "--addr=127.0.0.1:0",
            "--node-name=standalone-test-node",
            "--node-metric-report-interval=3s",
            "--collect-res-used-interval=1s",
            // The NodeMetric is the point; the node's runtime is someone else's.
            "--enable-nri-runtime-hook=false",
        ])
        .arg(format!("--kubepods-cgroup-dir={kubepods}"))
        .arg("--pods-file")
        .arg(&pods_file)
        .arg("--node-slo-file")
        .arg(&slo_file)
        .arg("--node-metric-output")
        .arg(&output);
    let started = Instant::now();
    let started_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let usage_at_start = [pod_a.cpuacct_usage_ns(), pod_b.cpuacct_usage_ns()];
    let app_usage_at_start = cpuacct_usage_ns(&app_dir);
    let mut koordlet = TestProcess::spawn(command).unwrap();

    // Wait for a report covering at least ~10 s of samples.
    let deadline = Instant::now() + Duration::from_secs(60);
    let report = loop {
        assert!(
            Instant::now() < deadline,
            "no NodeMetric with 10 s of samples; koordlet said:\n{}",
            koordlet.output()
        );
        std::thread::sleep(Duration::from_millis(500));
        let Ok(text) = fs::read_to_string(&output) else {
            continue;
        };
        let report: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("NodeMetric file is not JSON ({err}):\n{text}"));
        let updated = report["status"]["updateTime"]
            .as_str()
            .and_then(seconds_since_epoch)
            .unwrap_or(0);
        let pods_reported = report["status"]["podsMetric"]
            .as_array()
            .map_or(0, Vec::len);
        let apps_reported = report["status"]["hostApplicationMetric"]
            .as_array()
            .map_or(0, Vec::len);
        if updated >= started_epoch + 11 && pods_reported == 2 && apps_reported == 1 {
            break report;
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    let usage_at_end = [pod_a.cpuacct_usage_ns(), pod_b.cpuacct_usage_ns()];
    let measured: Vec<f64> = (0..2)
        .map(|i| (usage_at_end[i] - usage_at_start[i]) as f64 / 1e9 / elapsed)
        .collect();
    let app_measured = (cpuacct_usage_ns(&app_dir) - app_usage_at_start) as f64 / 1e9 / elapsed;

    assert_eq!(report["kind"], "NodeMetric");
    assert_eq!(report["metadata"]["name"], "standalone-test-node");
    let status = &report["status"];
    let pods_metric = status["podsMetric"].as_array().unwrap();
    let reported = |name: &str| {
        pods_metric
            .iter()
            .find(|pod| pod["name"] == name)
            .unwrap_or_else(|| panic!("pod {name} missing from {status}"))
    };
    let a = reported(pod_a.name);
    let b = reported(pod_b.name);
    assert_eq!(
        (&a["qos"], &a["priority"]),
        (&"LS".into(), &"koord-prod".into())
    );
    assert_eq!(
        (&b["qos"], &b["priority"]),
        (&"BE".into(), &"koord-batch".into())
    );
    let reported_cores = [
        cores(&a["podUsage"]["resources"]["cpu"]),
        cores(&b["podUsage"]["resources"]["cpu"]),
    ];
    println!(
        "pod CPU cores: reported {reported_cores:?}, measured by the test {measured:?} over {elapsed:.1} s"
    );

    // The processes really generated load: B is capped at half a core by its quota.
    // Low bars: other work may crowd this machine's CPUs.
    assert!(measured[0] > 0.05, "pod A barely ran: {measured:?}");
    assert!(measured[1] > 0.05, "pod B barely ran: {measured:?}");
    assert!(
        measured[1] <= QUOTA_US as f64 / PERIOD_US as f64 * 1.1,
        "the quota caps pod B: {measured:?}"
    );
    for (i, pod) in [&pod_a, &pod_b].iter().enumerate() {
        let relative_error = (reported_cores[i] - measured[i]).abs() / measured[i];
        assert!(
            relative_error <= 0.10,
            "pod {}: reported {} cores, generated {} cores ({:.1}% off)",
            pod.name,
            reported_cores[i],
            measured[i],
            relative_error * 100.0
        );
    }

    let node_cores = cores(&status["nodeMetric"]["nodeUsage"]["resources"]["cpu"]);
    let pods_cores: f64 = reported_cores.iter().sum();
    assert!(
        node_cores >= pods_cores * 0.95,
        "node usage {node_cores} < pods {pods_cores}"
    );

    // The host application: its usage as the test measured it, its class echoed.
    let app = &status["hostApplicationMetric"][0];
    assert_eq!(
        (&app["name"], &app["priority"], &app["qos"]),
        (&"test-app".into(), &"koord-prod".into(), &"LS".into())
    );
    let app_cores = cores(&app["usage"]["resources"]["cpu"]);
    println!("host application CPU cores: reported {app_cores}, measured {app_measured}");
    assert!(app_measured > 0.02, "the host application barely ran");
    assert!(
        (app_cores - app_measured).abs() <= app_measured * 0.15 + 0.01,
        "host application: reported {app_cores} cores, generated {app_measured}"
    );
    assert!(app["usage"]["resources"]["memory"].is_string(), "{app}");

    // NUMA: the nodes the kernel lists, together using what the node uses.
    if Path::new("/sys/devices/system/node/node0/meminfo").exists() {
        let numa = status["nodeMetric"]["numaUsages"].as_array().unwrap();
        assert!(!numa.is_empty(), "{status}");
        assert_eq!(numa[0]["numaNodeID"], 0);
        let numa_cores: f64 = numa
            .iter()
            .map(|node| cores(&node["nodeUsage"]["resources"]["cpu"]))
            .sum();
        assert!(
            (numa_cores - node_cores).abs() <= node_cores * 0.15 + 0.05,
            "NUMA nodes use {numa_cores} cores, the node {node_cores}"
        );
        assert!(bytes(&numa[0]["nodeUsage"]["resources"]["memory"]) > 0.0);
    }

    // Prod reclaimable and peak. Standalone, the machine's size stands in for
    // the Node's allocatable; pod A (prod, past its cold start) requests 4
    // cores and 8 GiB but uses about one core and next to no memory of its own.
    let machine_cores = fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|text| count_cpus(&text))
        .unwrap() as f64;
    let reclaimable = &status["prodReclaimableMetric"]["resource"]["resources"];
    let peak = &status["prodPeakMetric"]["resource"]["resources"];
    println!("prod reclaimable {reclaimable}, prod peak {peak}");
    let reclaimable_cores = cores(&reclaimable["cpu"]);
    let reclaimable_memory = bytes(&reclaimable["memory"]);
    let request_memory = (POD_A_MEMORY_REQUEST_GIB << 30) as f64;
    assert!(
        (0.0..=machine_cores).contains(&reclaimable_cores),
        "{reclaimable_cores} reclaimable cores on a {machine_cores}-core machine"
    );
    assert!(
        reclaimable_memory > 0.0 && reclaimable_memory < request_memory,
        "reclaimable memory {reclaimable_memory} of a {request_memory}-byte request"
    );
    // The peak covers pod A's predicted p95 plus the 10% margin.
    assert!(
        cores(&peak["cpu"]) >= reported_cores[0] * 0.9,
        "peak {} below pod A's usage {}",
        cores(&peak["cpu"]),
        reported_cores[0]
    );
    assert!(bytes(&peak["memory"]) > 0.0);

    koordlet.stop_cleanly("TERM", PROCESS_WAIT).unwrap();
    drop(cleanup);
}

/// The standalone shell without cgroups (runs without root): no cluster
/// needed, readiness follows the first good pods file, the NodeSLO file is
/// loaded, the NodeMetric is written as YAML, SIGTERM exits 0.
#[test]
fn standalone_mode_needs_no_cluster_and_gates_readiness_on_the_pods_file() {
    let dir = TempDir::new("standalone-shell").unwrap();
    let pods_file = dir.path().join("pods.yaml");
    fs::write(&pods_file, "{ this is not yaml").unwrap();
    let slo_file = dir.path().join("nodeslo.yaml");
    fs::write(
        &slo_file,
        "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeSLO\nspec:\n  hostApplications:\n  - name: nginx\n",
    )
    .unwrap();
    let output = dir.path().join("nodemetric.yaml");
    let mut command = isolated_command(BIN);
    command
        .env("NODE_NAME", "shell-node")
        .args(["--addr=127.0.0.1:0", "--node-metric-report-interval=1s"])
        .arg("--pods-file")
        .arg(&pods_file)
        .arg("--node-slo-file")
        .arg(&slo_file)
        .arg("--node-metric-output")
        .arg(&output);
    let mut koordlet = TestProcess::spawn(command).unwrap();
    let (wait, http) = (PROCESS_WAIT, HTTP_WAIT);
    let addr = koordlet.serving_addr("health and metrics", wait).unwrap();
    koordlet.expect_line("keeping the last pods", wait).unwrap();
    let readyz = http_get_blocking(addr, "/readyz", http).unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    assert!(
        readyz
            .body
            .contains("[-]states failed: waiting for the first sync of pods"),
        "{}",
        readyz.body
    );
    assert!(
        !readyz.body.contains("cluster"),
        "no cluster check in standalone mode"
    );
    assert!(
        !koordlet.output().contains("Kubernetes API server"),
        "{}",
        koordlet.output()
    );

    fs::write(
        &pods_file,
        "- metadata: {name: web, namespace: default, uid: shell-uid-1}\n  status: {qosClass: Burstable}\n",
    )
    .unwrap();
    if let Err(err) = wait_for_http_status(addr, "/readyz", 200, wait) {
        panic!(
            "never ready after the pods file was fixed: {err}\n{}",
            koordlet.output()
        );
    }
    let metrics = http_get_blocking(addr, "/metrics", http).unwrap();
    assert!(
        metrics
            .body
            .contains("koordlet_pods_sync_errors_total{source=\"file\"}"),
        "{}",
        metrics.body
    );

    let deadline = Instant::now() + wait;
    let report = loop {
        if let Ok(text) = fs::read_to_string(&output)
            && let Ok(report) =
                apis::yaml::from_str::<serde_json::Value>(&text, &apis::yaml::Limits::CONFIG)
            && report["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"].is_string()
        {
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "no NodeMetric with node usage written:\n{}",
            koordlet.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(report["kind"], "NodeMetric");
    assert_eq!(report["metadata"]["name"], "shell-node");
    assert_eq!(
        report["spec"]["metricCollectPolicy"]["reportIntervalSeconds"],
        60
    );

    koordlet.stop_cleanly("TERM", wait).unwrap();
}

#[test]
fn standalone_flags_are_validated_before_anything_starts() {
    let output = Command::new(BIN)
        .env_remove("NODE_NAME")
        .args(["--addr=127.0.0.1:0", "--standalone"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("standalone mode needs a pods source"),
        "{stderr}"
    );
    let output = Command::new(BIN)
        .args(["--pods-file", "/tmp/a", "--kubelet-url", "http://b"])
        .output()
        .unwrap();
    assert!(!output.status.success());
}

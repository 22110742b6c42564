//! Node e2e: koord-runtime-proxy between a CRI client and a real containerd 1.6,
//! with koordlet (NRI off) as its hook server. Each test starts its own
//! containerd (private `NR_ROOT`/`NR_KUBEPODS`); without root or a working
//! kit each test prints one `SKIP:` line and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use e2e::cri::{self, RuntimeClient, v1};
use e2e::node_runtime::{Containerd, Koordlet, Skip, read_cgroup, wait_for_value};
use e2e::proxy_harness::{
    HookRecorder, Pod, Proxy, WAIT, be_pods_file, cgroup_root_with_private_kubepods,
    container_config, create_container, first_lines, pod_config, run_pod, start_container,
    start_hook_server_with,
};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const BATCH_MEMORY: i64 = 256 << 20;

struct Node {
    containerd: Containerd,
    pods_file: PathBuf,
    hook_dir: PathBuf,
}

impl Node {
    fn root(&self) -> PathBuf {
        self.containerd.root().to_path_buf()
    }

    fn hook_server(&self, policy: &str) -> Koordlet {
        let kubepods = self.containerd.kubepods_flag();
        start_hook_server_with(
            &self.root(),
            &self.pods_file,
            &self.hook_dir,
            policy,
            &[&kubepods],
        )
        .unwrap()
    }

    fn proxy(&self) -> Proxy {
        Proxy::start(&self.root(), &self.containerd.cri_socket(), &self.hook_dir).unwrap()
    }

    fn image(&self) -> String {
        self.containerd.var("NR_BUSYBOX_IMAGE")
    }

    /// Creates a busybox container `name` in `pod` (shares, quota as the
    /// kubelet would send them) and returns its id.
    async fn container(
        &self,
        client: &mut RuntimeClient,
        pod: &Pod,
        name: &str,
        cpu_shares: i64,
        cpu_quota: i64,
    ) -> String {
        create_container(
            client,
            pod,
            container_config(&self.image(), name, cpu_shares, cpu_quota),
        )
        .await
        .unwrap()
    }

    async fn direct(&self) -> RuntimeClient {
        cri::connect(&self.containerd.cri_socket()).await.unwrap()
    }
}

fn node(test: &str) -> Result<Node, Skip> {
    // containerd 1.6: the runtime without NRI the proxy exists for.
    let containerd = Containerd::start_without_nri(test, "1.6")?;
    let pods_file = containerd.root().join("pods.json");
    std::fs::write(
        &pods_file,
        r#"{"kind":"PodList","apiVersion":"v1","items":[]}"#,
    )
    .map_err(|err| Skip(format!("cannot write the pods file: {err}")))?;
    let hook_dir = containerd.root().join("hookserver.d");
    std::fs::create_dir_all(&hook_dir)
        .map_err(|err| Skip(format!("cannot create the hook dir: {err}")))?;
    Ok(Node {
        containerd,
        pods_file,
        hook_dir,
    })
}

macro_rules! node_or_skip {
    ($test:expr) => {
        match node($test) {
            Ok(node) => node,
            Err(skip) => {
                skip.report($test);
                return;
            }
        }
    };
}

fn be_annotations() -> String {
    format!(
        r#"{{"containers":{{"main":{{"requests":{{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"{BATCH_MEMORY}"}},"limits":{{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"{BATCH_MEMORY}"}}}}}}}}"#
    )
}

async fn be_pod(node: &Node, client: &mut RuntimeClient) -> Pod {
    let spec = be_annotations();
    run_pod(
        client,
        pod_config(
            &node.root(),
            node.containerd.kubepods(),
            "be-batch",
            "besteffort",
            &[("koordinator.sh/qosClass", "BE")],
            &[("node.koordinator.sh/extended-resource-spec", spec.as_str())],
        ),
    )
    .await
    .unwrap()
}

fn cgroup(pod: &Pod, container: &str) -> String {
    format!("{}/{container}", pod.cgroup_parent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn be_pod_through_the_proxy_gets_batch_cgroups() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let node = node_or_skip!("proxy-be");
    let koordlet = node.hook_server("Ignore");
    let proxy = node.proxy();
    let mut client = proxy.client().await;

    let pod = be_pod(&node, &mut client).await;
    let id = node.container(&mut client, &pod, "main", 2, 0).await;
    start_container(&mut client, &id).await.unwrap();

    // 500m batch request → 512 shares; 1000m limit → one period; memory from batch-memory.
    let lines = first_lines(&pod, "main");
    assert_eq!(
        lines.len(),
        4,
        "container output {lines:?}\nproxy:\n{}",
        proxy.process.output()
    );
    assert_eq!(lines[0], "512", "cpu.shares seen by the container");
    assert_eq!(lines[1], "100000", "cpu.cfs_quota_us seen by the container");
    assert_eq!(lines[2], BATCH_MEMORY.to_string(), "memory limit");
    let dir = cgroup(&pod, &id);
    assert_eq!(read_cgroup("cpu", &dir, "cpu.shares").unwrap(), "512");
    assert_eq!(
        read_cgroup("memory", &dir, "memory.limit_in_bytes").unwrap(),
        BATCH_MEMORY.to_string()
    );
    // Pod level: koordlet writes it at PreRunPodSandbox.
    let pod_dir = pod.cgroup_parent.clone();
    let pod_shares = wait_for_value(WAIT, "512", || read_cgroup("cpu", &pod_dir, "cpu.shares"));
    assert_eq!(pod_shares, "512", "pod-level cpu.shares");
    // The hooks really went through the proxy.
    for stage in [
        "PreRunPodSandbox",
        "PreCreateContainer",
        "PreStartContainer",
        "PostStartContainer",
    ] {
        let calls = proxy.counter(
            "koord_runtime_proxy_hook_calls_total",
            &format!("stage=\"{stage}\",result=\"ok\""),
        );
        let registered = std::fs::read_to_string(node.hook_dir.join("koordlet.json")).unwrap();
        if registered.contains(stage) {
            assert_eq!(
                calls,
                1.0,
                "{stage} hook calls; metrics:\n{}",
                proxy.metrics()
            );
        }
    }
    proxy.stop();
    koordlet.stop();
    eprintln!("proxy-be: passed in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lsr_pod_through_the_proxy_gets_its_cpuset() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let node = node_or_skip!("proxy-lsr");
    let koordlet = node.hook_server("Ignore");
    let proxy = node.proxy();
    let mut client = proxy.client().await;
    let pod = run_pod(
        &mut client,
        pod_config(
            &node.root(),
            node.containerd.kubepods(),
            "lsr",
            "",
            &[("koordinator.sh/qosClass", "LSR")],
            &[(
                "scheduling.koordinator.sh/resource-status",
                r#"{"cpuset":"1"}"#,
            )],
        ),
    )
    .await
    .unwrap();
    let id = node
        .container(&mut client, &pod, "main", 1024, 100_000)
        .await;
    start_container(&mut client, &id).await.unwrap();
    let lines = first_lines(&pod, "main");
    assert_eq!(lines.len(), 4, "container output {lines:?}");
    assert_eq!(lines[3], "1", "cpuset.cpus seen by the container");
    assert_eq!(lines[1], "-1", "cpuset-bound containers run without quota");
    assert_eq!(
        read_cgroup("cpuset", &cgroup(&pod, &id), "cpuset.cpus").unwrap(),
        "1"
    );
    proxy.stop();
    koordlet.stop();
    eprintln!("proxy-lsr: passed in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_server_down_ignore_starts_with_defaults_and_fail_refuses() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let node = node_or_skip!("proxy-down");
    // Register with Ignore, then stop koordlet: its registration file stays.
    let koordlet = node.hook_server("Ignore");
    koordlet.stop();
    let proxy = node.proxy();
    let mut client = proxy.client().await;
    let pod = be_pod(&node, &mut client).await;
    let id = node.container(&mut client, &pod, "main", 2, 0).await;
    start_container(&mut client, &id).await.unwrap();
    let lines = first_lines(&pod, "main");
    assert_eq!(
        lines.first().map(String::as_str),
        Some("2"),
        "runtime default shares: {lines:?}"
    );
    assert!(
        proxy.counter("koord_runtime_proxy_hook_calls_total", "result=\"error\"") >= 1.0,
        "failed hook calls counted:\n{}",
        proxy.metrics()
    );

    // koordlet comes back, learns the pod from the kubelet (the pods file)
    // and its reconciler repairs the runtime defaults.
    let cgroup_root =
        cgroup_root_with_private_kubepods(&node.root(), node.containerd.kubepods()).unwrap();
    std::fs::write(
        &node.pods_file,
        be_pods_file(
            &pod,
            &id,
            &be_annotations(),
            ("500", "1000"),
            &BATCH_MEMORY.to_string(),
        ),
    )
    .unwrap();
    let root_flag = format!("--cgroup-root-dir={}", cgroup_root.display());
    let kubepods = node.containerd.kubepods_flag();
    let koordlet = start_hook_server_with(
        &node.root(),
        &node.pods_file,
        &node.hook_dir,
        "Ignore",
        &[
            &root_flag,
            &kubepods,
            "--runtime-hooks-reconcile-interval=1s",
            "--kubelet-sync-interval=1s",
        ],
    )
    .unwrap();
    let dir = cgroup(&pod, &id);
    let shares = wait_for_value(WAIT, "512", || read_cgroup("cpu", &dir, "cpu.shares"));
    assert_eq!(
        shares,
        "512",
        "reconciler repair; koordlet:\n{}",
        koordlet.process.output()
    );
    koordlet.stop();

    // The same registration with Fail: the proxy reloads it and refuses.
    let file = node.hook_dir.join("koordlet.json");
    let text = std::fs::read_to_string(&file).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["failure-policy"] = "Fail".into();
    std::fs::write(&file, json.to_string()).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let error = create_container(
        &mut client,
        &pod,
        container_config(&node.image(), "second", 2, 0),
    )
    .await
    .unwrap_err();
    assert!(
        error.message().contains("hook server err")
            && error.message().contains("PreCreateContainer"),
        "clear refusal: {error:?}"
    );
    // Nothing was created behind the refusal.
    let mut direct = node.direct().await;
    let names: Vec<String> = direct
        .list_containers(v1::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers
        .into_iter()
        .filter_map(|c| c.metadata.map(|m| m.name))
        .collect();
    assert_eq!(names, vec!["main".to_string()]);

    // A pod with the skip label (koordlet's own) still starts under Fail.
    let skipped = run_pod(
        &mut client,
        pod_config(
            &node.root(),
            node.containerd.kubepods(),
            "koordlet",
            "",
            &[("runtimeproxy.koordinator.sh/skip-hookserver", "true")],
            &[],
        ),
    )
    .await
    .unwrap();
    let id = node.container(&mut client, &skipped, "main", 2, 0).await;
    start_container(&mut client, &id).await.unwrap();
    proxy.stop();
    eprintln!("proxy-down: passed in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_proxy_keeps_pod_context_for_start_and_stop() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let node = node_or_skip!("proxy-restart");
    let koordlet = node.hook_server("Ignore");
    // A recorder serves the start/stop stages koordlet does not register.
    let recorder = HookRecorder::default();
    let recorder_socket = node.root().join("recorder.sock");
    recorder.serve(&recorder_socket).unwrap();
    std::fs::write(
        node.hook_dir.join("zz-recorder.json"),
        serde_json::json!({
            "remote-endpoint": recorder_socket.display().to_string(),
            "failure-policy": "Fail",
            "runtime-hooks": ["PreStartContainer", "PostStartContainer", "PostStopContainer"],
        })
        .to_string(),
    )
    .unwrap();
    let proxy = node.proxy();
    let mut client = proxy.client().await;
    let pod = be_pod(&node, &mut client).await;
    let id = node.container(&mut client, &pod, "main", 2, 0).await;
    proxy.stop();
    assert!(recorder.calls().is_empty(), "{:?}", recorder.calls());

    // A new proxy process knows the container only from the runtime.
    let proxy = node.proxy();
    assert!(
        proxy.process.output().contains("metadata store rebuilt")
            && proxy.process.output().contains("containers=1"),
        "{}",
        proxy.process.output()
    );
    let mut client = proxy.client().await;
    start_container(&mut client, &id).await.unwrap();
    client
        .stop_container(v1::StopContainerRequest {
            container_id: id.clone(),
            timeout: 1,
        })
        .await
        .unwrap();
    // Start and Stop after the restart reached the hooks with full pod context.
    let calls = recorder.calls();
    let stages: Vec<&str> = calls.iter().map(|(stage, _)| stage.as_str()).collect();
    assert_eq!(
        stages,
        [
            "PreStartContainer",
            "PostStartContainer",
            "PostStopContainer"
        ],
        "proxy:\n{}",
        proxy.process.output()
    );
    let meta = pod.config.metadata.clone().unwrap();
    for (stage, request) in &calls {
        let pod_meta = request.pod_meta.clone().unwrap_or_default();
        assert_eq!(
            (
                pod_meta.name.as_str(),
                pod_meta.uid.as_str(),
                pod_meta.namespace.as_str()
            ),
            (
                meta.name.as_str(),
                meta.uid.as_str(),
                meta.namespace.as_str()
            ),
            "{stage}"
        );
        assert_eq!(
            request
                .pod_labels
                .get("koordinator.sh/qosClass")
                .map(String::as_str),
            Some("BE"),
            "{stage}"
        );
        assert_eq!(
            request
                .pod_annotations
                .get("node.koordinator.sh/extended-resource-spec"),
            Some(&be_annotations()),
            "{stage}"
        );
        assert_eq!(request.pod_cgroup_parent, pod.cgroup_parent, "{stage}");
        let container_meta = request.container_meta.clone().unwrap_or_default();
        assert_eq!(
            (container_meta.name.as_str(), container_meta.id.as_str()),
            ("main", id.as_str()),
            "{stage}"
        );
    }
    // An update after the restart still carries the pod context: koordlet
    // recomputes the batch values from the pod annotations and overrides
    // the kubelet-style request.
    // The kubelet's restart of "main": same name, next attempt.
    let mut restarted = container_config(&node.image(), "main", 2, 0);
    restarted.metadata.as_mut().unwrap().attempt = 1;
    restarted.log_path = "main-1.log".into();
    let container = client
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(restarted),
            sandbox_config: Some(pod.config.clone()),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    proxy.stop();
    let proxy = node.proxy();
    let mut client = proxy.client().await;
    start_container(&mut client, &container).await.unwrap();
    client
        .update_container_resources(v1::UpdateContainerResourcesRequest {
            container_id: container.clone(),
            linux: Some(v1::LinuxContainerResources {
                cpu_shares: 2,
                cpu_period: 100_000,
                cpu_quota: 0,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        read_cgroup("cpu", &cgroup(&pod, &container), "cpu.shares").unwrap(),
        "512",
        "update after restart got batch shares from the pod context; proxy:\n{}",
        proxy.process.output()
    );
    proxy.stop();
    koordlet.stop();
    eprintln!("proxy-restart: passed in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_calls_pass_through_unchanged() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let node = node_or_skip!("proxy-pass");
    let proxy = node.proxy();
    let mut via = proxy.client().await;
    let mut direct = node.direct().await;
    let pod = run_pod(
        &mut via,
        pod_config(
            &node.root(),
            node.containerd.kubepods(),
            "plain",
            "",
            &[],
            &[],
        ),
    )
    .await
    .unwrap();
    let id = node.container(&mut via, &pod, "main", 2, 0).await;

    let listed_via = via
        .list_containers(v1::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let listed_direct = direct
        .list_containers(v1::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed_via, listed_direct);
    let status = |client: &mut RuntimeClient| {
        let mut client = client.clone();
        let id = id.clone();
        async move {
            client
                .container_status(v1::ContainerStatusRequest {
                    container_id: id,
                    verbose: true,
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    assert_eq!(status(&mut via).await, status(&mut direct).await);
    // Errors pass through with the runtime's code and message.
    let missing = |client: &mut RuntimeClient| {
        let mut client = client.clone();
        async move {
            client
                .container_status(v1::ContainerStatusRequest {
                    container_id: "no-such-container".into(),
                    verbose: false,
                })
                .await
                .unwrap_err()
        }
    };
    let (a, b) = (missing(&mut via).await, missing(&mut direct).await);
    assert_eq!((a.code(), a.message()), (b.code(), b.message()));

    // ImageService and an unknown method, over raw gRPC.
    let image = node.image();
    let image_status = |socket: PathBuf| {
        let image = image.clone();
        async move {
            e2e::proxy_harness::raw_unary(
                &socket,
                "/runtime.v1.ImageService/ImageStatus",
                &v1::ImageStatusRequest {
                    image: Some(v1::ImageSpec {
                        image,
                        ..Default::default()
                    }),
                    verbose: false,
                },
            )
            .await
        }
    };
    let via_image = image_status(proxy.socket.clone()).await.unwrap();
    let direct_image = image_status(node.containerd.cri_socket()).await.unwrap();
    assert_eq!(via_image, direct_image, "ImageStatus bytes");
    let unknown = |socket: PathBuf| async move {
        e2e::proxy_harness::raw_unary(
            &socket,
            "/runtime.v1.RuntimeService/NoSuchMethod",
            &v1::VersionRequest::default(),
        )
        .await
        .unwrap_err()
    };
    let (a, b) = (
        unknown(proxy.socket.clone()).await,
        unknown(node.containerd.cri_socket()).await,
    );
    assert_eq!(a.code(), tonic::Code::Unimplemented);
    assert_eq!((a.code(), a.message()), (b.code(), b.message()));
    proxy.stop();
    eprintln!("proxy-pass: passed in {:?}", started.elapsed());
}

//! Benchmark (prints, asserts no timings): proxy overhead per CRI call,
//! direct to containerd vs through koord-runtime-proxy in the same run, and
//! the hook round trip to koordlet's RuntimeHookService. Skips like the
//! other node tests without root or the kit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::{Duration, Instant};

use apis::runtime::v1alpha1 as hook;
use e2e::cri::{self, RuntimeClient, v1};
use e2e::node_runtime::Containerd;
use e2e::proxy_harness::{
    Proxy, container_config, create_container, pod_config, run_pod, start_hook_server_with,
};

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    let total: Duration = samples.iter().sum();
    Stats {
        p50: at(0.5),
        p99: at(0.99),
        mean: total / samples.len() as u32,
    }
}

async fn measure<F, Fut>(rounds: usize, mut call: F) -> Stats
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    // Warm-up: connections, lazy channels, page cache.
    for _ in 0..5 {
        call().await;
    }
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        call().await;
        samples.push(started.elapsed());
    }
    stats(samples)
}

fn row(name: &str, direct: &Stats, proxied: &Stats) {
    let overhead = proxied.p50.as_secs_f64() - direct.p50.as_secs_f64();
    println!(
        "{name:<28} direct p50 {:>8.3} ms p99 {:>8.3} ms | proxied p50 {:>8.3} ms p99 {:>8.3} ms | overhead p50 {:>7.3} ms (mean {:>7.3} ms)",
        direct.p50.as_secs_f64() * 1e3,
        direct.p99.as_secs_f64() * 1e3,
        proxied.p50.as_secs_f64() * 1e3,
        proxied.p99.as_secs_f64() * 1e3,
        overhead * 1e3,
        (proxied.mean.as_secs_f64() - direct.mean.as_secs_f64()) * 1e3,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_overhead_and_hook_round_trip() {
    let containerd = match Containerd::start_without_nri("proxy-bench", "1.6") {
        Ok(containerd) => containerd,
        Err(skip) => {
            skip.report("proxy-bench");
            return;
        }
    };
    let root = containerd.root().to_path_buf();
    let pods_file = root.join("pods.json");
    std::fs::write(
        &pods_file,
        r#"{"kind":"PodList","apiVersion":"v1","items":[]}"#,
    )
    .unwrap();
    let hook_dir = root.join("hookserver.d");
    std::fs::create_dir_all(&hook_dir).unwrap();
    let kubepods = containerd.kubepods_flag();
    let koordlet =
        start_hook_server_with(&root, &pods_file, &hook_dir, "Ignore", &[&kubepods]).unwrap();
    let proxy = Proxy::start(&root, &containerd.cri_socket(), &hook_dir).unwrap();
    let direct = cri::connect(&containerd.cri_socket()).await.unwrap();
    let mut proxied = proxy.client().await;

    let pod = run_pod(
        &mut proxied,
        pod_config(&root, containerd.kubepods(), "bench", "", &[], &[]),
    )
    .await
    .unwrap();
    let image = containerd.var("NR_BUSYBOX_IMAGE");
    let container = create_container(
        &mut proxied,
        &pod,
        container_config(&image, "main", 1024, 100_000),
    )
    .await
    .unwrap();
    e2e::proxy_harness::start_container(&mut proxied, &container)
        .await
        .unwrap();

    const ROUNDS: usize = 300;
    println!("proxy benchmark: {ROUNDS} sequential calls each, unix sockets, same run");
    async fn version(mut client: RuntimeClient) {
        client.version(v1::VersionRequest::default()).await.unwrap();
    }
    let d = measure(ROUNDS, || version(direct.clone())).await;
    let p = measure(ROUNDS, || version(proxied.clone())).await;
    row("Version (pass-through)", &d, &p);

    async fn list(mut client: RuntimeClient) {
        client
            .list_containers(v1::ListContainersRequest::default())
            .await
            .unwrap();
    }
    let d = measure(ROUNDS, || list(direct.clone())).await;
    let p = measure(ROUNDS, || list(proxied.clone())).await;
    row("ListContainers (pass-through)", &d, &p);

    async fn status(mut client: RuntimeClient, id: String) {
        client
            .container_status(v1::ContainerStatusRequest {
                container_id: id,
                verbose: false,
            })
            .await
            .unwrap();
    }
    let d = measure(ROUNDS, || status(direct.clone(), container.clone())).await;
    let p = measure(ROUNDS, || status(proxied.clone(), container.clone())).await;
    row("ContainerStatus (pass-through)", &d, &p);

    async fn update(mut client: RuntimeClient, id: String) {
        client
            .update_container_resources(v1::UpdateContainerResourcesRequest {
                container_id: id,
                linux: Some(v1::LinuxContainerResources {
                    cpu_shares: 1024,
                    cpu_period: 100_000,
                    cpu_quota: 100_000,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let rounds = ROUNDS / 3;
    let d = measure(rounds, || update(direct.clone(), container.clone())).await;
    let p = measure(rounds, || update(proxied.clone(), container.clone())).await;
    row("UpdateContainerResources (+hook)", &d, &p);

    // Hook round trip straight to koordlet's socket, as the proxy makes it.
    let socket = root.join("koordlet/koordlet.sock");
    let channel = tonic::transport::Endpoint::from_static("http://hook.local")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket = socket.clone();
            async move {
                tokio::net::UnixStream::connect(socket)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .unwrap();
    let client = hook::runtime_hook_service_client::RuntimeHookServiceClient::new(channel);
    let request = hook::ContainerResourceHookRequest {
        pod_meta: Some(hook::PodSandboxMetadata {
            name: "bench".into(),
            uid: "bench-uid".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        container_meta: Some(hook::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
            id: String::new(),
        }),
        container_resources: Some(hook::LinuxContainerResources {
            cpu_shares: 1024,
            cpu_period: 100_000,
            cpu_quota: 100_000,
            ..Default::default()
        }),
        pod_labels: [("koordinator.sh/qosClass".to_string(), "LS".to_string())].into(),
        pod_cgroup_parent: pod.cgroup_parent.clone(),
        ..Default::default()
    };
    let hook_rounds = ROUNDS * 3;
    let round_trip = measure(hook_rounds, || {
        let mut client = client.clone();
        let request = request.clone();
        async move {
            client.pre_create_container_hook(request).await.unwrap();
        }
    })
    .await;
    println!(
        "hook round trip PreCreateContainer ({hook_rounds} calls): p50 {:.3} ms p99 {:.3} ms (target p99 < 1 ms)",
        round_trip.p50.as_secs_f64() * 1e3,
        round_trip.p99.as_secs_f64() * 1e3,
    );
    let metrics = proxy.metrics();
    assert!(
        metrics.contains("koord_runtime_proxy_hook_calls_total{stage=\"PreUpdateContainerResources\",result=\"ok\"}"),
        "the proxied updates went through the hook:\n{metrics}"
    );
    proxy.stop();
    koordlet.stop();
}

#![allow(clippy::unwrap_used)]
//! The evictor's cluster path against fake API servers: the Eviction
//! request it sends, the Event and annotation that follow, 429 handling,
//! dry run, and the runner adapter.

use std::time::Duration;

use koord_common::testing::FakeApiServer;
use koordlet::evictor::qos::QosEvictor;
use koordlet::evictor::{
    EvictionBackend, EvictionOutcome, EvictionRequest, EvictorArgs, PodEvictor, PodRef,
};
use koordlet::qosmanager::framework::{self, Evictor as _};
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

const PODS: &str = "/api/v1/namespaces/batch/pods";

/// Answers evictions by pod name (`guarded` → 429, `slow` → 201 after 3s,
/// `victim` → 201), Event creation and pod patches; records every request.
fn scripted_api_server() -> FakeApiServer {
    let server = FakeApiServer::start().unwrap();
    let success = r#"{"kind":"Status","apiVersion":"v1","status":"Success","code":201}"#;
    server.respond("POST", &format!("{PODS}/victim/eviction"), 201, success);
    let refusal = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","code":429}"#;
    server.respond("POST", &format!("{PODS}/guarded/eviction"), 429, refusal);
    let slow = format!("{PODS}/slow/eviction");
    server.respond_delayed("POST", &slow, 201, success, Duration::from_secs(3));
    let event = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"batch"},"involvedObject":{}}"#;
    server.respond("POST", "/api/v1/namespaces/batch/events", 201, event);
    for name in ["victim", "slow"] {
        let pod = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"batch"}}}}"#
        );
        server.respond("PATCH", &format!("{PODS}/{name}"), 200, &pod);
    }
    server
}

/// The backend koordlet uses: a client without kube's own 429 retries.
fn backend(api: &FakeApiServer) -> EvictionBackend {
    let config = kube::Config::new(api.url().parse().unwrap());
    EvictionBackend::api_without_retries(config).unwrap()
}

fn request(name: &str, uid: &str) -> EvictionRequest {
    EvictionRequest {
        pod: PodRef {
            namespace: "batch".to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
        },
        trigger: "BEMemoryEvict".to_string(),
        message: "node memory usage 91% >= threshold 70%".to_string(),
        cgroup_dirs: Vec::new(),
        containers: Vec::new(),
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|err| panic!("not JSON ({err}): {body}"))
}

#[tokio::test]
async fn eviction_goes_through_the_policy_v1_subresource_then_event_and_annotation() {
    let api = scripted_api_server();
    let evictor = PodEvictor::new(backend(&api), "node-a", &EvictorArgs::default());
    let outcome = evictor.evict(&request("victim", "uid-victim")).await;
    assert_eq!(outcome, EvictionOutcome::Evicted);

    let seen = api.recorded();
    let eviction = seen
        .iter()
        .find(|s| s.target.contains("/eviction"))
        .expect("no eviction request");
    assert_eq!(eviction.method, "POST");
    assert!(
        eviction
            .target
            .starts_with("/api/v1/namespaces/batch/pods/victim/eviction"),
        "{}",
        eviction.target
    );
    let body = json(&eviction.body);
    assert_eq!(body["apiVersion"], "policy/v1");
    assert_eq!(body["kind"], "Eviction");
    assert_eq!(body["metadata"]["name"], "victim");
    assert_eq!(body["metadata"]["namespace"], "batch");
    assert_eq!(body["deleteOptions"]["preconditions"]["uid"], "uid-victim");

    let event = seen
        .iter()
        .find(|s| s.method == "POST" && s.target.starts_with("/api/v1/namespaces/batch/events"))
        .expect("no event recorded");
    let event = json(&event.body);
    assert_eq!(event["reason"], "evictPodSuccess");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["kind"], "Pod");
    assert_eq!(event["involvedObject"]["uid"], "uid-victim");
    assert_eq!(event["source"]["component"], "koordlet");
    assert_eq!(event["source"]["host"], "node-a");
    let message = event["message"].as_str().unwrap();
    assert!(
        message.contains("evict Pod:batch/victim, reason: evicted")
            && message.contains("trigger by koordlet feature BEMemoryEvict"),
        "{message}"
    );

    let patch = seen
        .iter()
        .find(|s| s.method == "PATCH")
        .expect("no annotation patch");
    assert!(
        patch
            .target
            .starts_with("/api/v1/namespaces/batch/pods/victim"),
        "{}",
        patch.target
    );
    let patch = json(&patch.body);
    assert_eq!(
        patch["metadata"]["annotations"]["koordinator.sh/evict-trigger"],
        "BEMemoryEvict"
    );
    assert_eq!(
        patch["metadata"]["annotations"]["koordinator.sh/evict-reason"],
        "node memory usage 91% >= threshold 70%"
    );

    // The same pod is not evicted twice while it terminates.
    let before = api.recorded().len();
    assert_eq!(
        evictor.evict(&request("victim", "uid-victim")).await,
        EvictionOutcome::AlreadyEvicted
    );
    assert_eq!(api.recorded().len(), before);
}

#[tokio::test]
async fn a_pod_disruption_budget_refusal_is_retried_later() {
    let api = scripted_api_server();
    let evictor = PodEvictor::new(backend(&api), "node-a", &EvictorArgs::default());
    let outcome = evictor.evict(&request("guarded", "uid-guarded")).await;
    let EvictionOutcome::Blocked { message } = &outcome else {
        panic!("expected Blocked, got {outcome:?}");
    };
    assert!(message.contains("disruption budget"), "{message}");
    assert!(!outcome.releases());
    let seen = api.recorded();
    assert!(
        seen.iter().all(|s| s.method != "PATCH"),
        "no annotation on refusal"
    );
    let event = seen
        .iter()
        .find(|s| s.target.contains("/events"))
        .expect("a failure event");
    assert_eq!(json(&event.body)["reason"], "evictPodFail");
    // Not remembered as evicted: the next round asks again.
    let evictions_before = seen
        .iter()
        .filter(|s| s.target.contains("/eviction"))
        .count();
    let again = evictor.evict(&request("guarded", "uid-guarded")).await;
    assert!(
        matches!(again, EvictionOutcome::Blocked { .. }),
        "{again:?}"
    );
    let evictions_after = api
        .recorded()
        .iter()
        .filter(|s| s.target.contains("/eviction"))
        .count();
    assert_eq!(evictions_after, evictions_before + 1);
}

#[tokio::test]
async fn dry_run_and_rate_limit_send_nothing() {
    let api = scripted_api_server();
    let dry = PodEvictor::new(
        backend(&api),
        "node-a",
        &EvictorArgs {
            dry_run: true,
            ..EvictorArgs::default()
        },
    );
    assert_eq!(
        dry.evict(&request("victim", "uid-1")).await,
        EvictionOutcome::DryRun
    );
    let limited = PodEvictor::new(
        backend(&api),
        "node-a",
        &EvictorArgs {
            qps: 0.0,
            burst: 1,
            ..EvictorArgs::default()
        },
    );
    assert_eq!(
        limited.evict(&request("victim", "uid-2")).await,
        EvictionOutcome::Evicted
    );
    let sent = api.recorded().len();
    assert_eq!(
        limited.evict(&request("victim", "uid-3")).await,
        EvictionOutcome::RateLimited
    );
    assert_eq!(
        api.recorded().len(),
        sent,
        "a rate-limited eviction sends nothing"
    );
    assert!(
        api.recorded()
            .iter()
            .filter(|s| s.target.contains("/eviction"))
            .all(|s| !s.body.contains("uid-1")),
        "the dry run sent its eviction"
    );
}

#[tokio::test]
async fn common_fake_api_server_sees_the_eviction_request_line() {
    let api = FakeApiServer::start().unwrap();
    let config = kube::Config::new(api.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let evictor = PodEvictor::new(
        EvictionBackend::Api(client),
        "node-a",
        &EvictorArgs::default(),
    );
    // That server knows only /version: the eviction fails with 404.
    let outcome = evictor.evict(&request("victim", "uid-victim")).await;
    assert!(
        matches!(outcome, EvictionOutcome::Failed { .. }),
        "{outcome:?}"
    );
    let requests = api.requests();
    assert!(
        requests
            .iter()
            .any(|line| line.starts_with("POST /api/v1/namespaces/batch/pods/victim/eviction")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|line| line.starts_with("POST /api/v1/namespaces/batch/events")),
        "the failure is recorded as an event: {requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_adapter_hands_requests_to_the_api() {
    let api = scripted_api_server();
    let evictor = PodEvictor::new(backend(&api), "node-a", &EvictorArgs::default());
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
    let adapter = QosEvictor::new(evictor, layout, tokio::runtime::Handle::current());
    let request = framework::EvictionRequest {
        uid: "uid-r".to_string(),
        namespace: "batch".to_string(),
        name: "victim".to_string(),
        reason: "BECPUEvict".to_string(),
        message: "BE CPU satisfaction below 40%".to_string(),
        strategy: "cpuevict",
        container_ids: Vec::new(),
    };
    // The runner calls from its own (blocking) thread.
    tokio::task::spawn_blocking(move || adapter.evict(request))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = api.recorded();
        if let Some(eviction) = seen.iter().find(|s| s.target.contains("/eviction")) {
            assert_eq!(
                json(&eviction.body)["deleteOptions"]["preconditions"]["uid"],
                "uid-r"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no eviction reached the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_evictor_reloads_the_kubeconfig_without_client_retries() {
    let api = scripted_api_server();
    let dir = koord_common::testing::TempDir::new("evict-kubeconfig").unwrap();
    let kubeconfig = koord_common::testing::write_kubeconfig(dir.path(), &api.url()).unwrap();
    let options = koord_common::ClusterOptions {
        kubeconfig: Some(kubeconfig),
        timeout: Duration::from_secs(10),
    };
    // The connected client retries 429s; the evictor must not use it.
    let retrying = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
    let metrics = koord_common::MetricsRegistry::new("koordlet");
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
    let evictor = koordlet::evictor::qos::runner_evictor(
        Some((options, retrying)),
        "node-a",
        &EvictorArgs {
            only_evict_by_api: true,
            ..EvictorArgs::default()
        },
        layout,
        &metrics,
    )
    .await;
    let request = framework::EvictionRequest {
        uid: "uid-g".to_string(),
        namespace: "batch".to_string(),
        name: "guarded".to_string(),
        reason: "BEMemoryEvict".to_string(),
        message: "test".to_string(),
        strategy: "memoryevict",
        container_ids: Vec::new(),
    };
    tokio::task::spawn_blocking(move || evictor.evict(request))
        .await
        .unwrap();
    // One refusal, answered by a failure event, and no client-side retry.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !api.recorded().iter().any(|s| s.target.contains("/events")) {
        assert!(tokio::time::Instant::now() < deadline, "no failure event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let evictions = api
        .recorded()
        .iter()
        .filter(|s| s.target.contains("/eviction"))
        .count();
    assert_eq!(evictions, 1);
    let body = metrics.encode().unwrap();
    assert!(
        body.contains(
            "koordlet_pod_eviction_requests_total{trigger=\"BEMemoryEvict\",outcome=\"blocked\"} 1"
        ),
        "{body}"
    );
}

#[tokio::test]
async fn for_mode_with_cluster_reload_answers_a_refusal_at_once() {
    let api = scripted_api_server();
    let dir = koord_common::testing::TempDir::new("evict-reload").unwrap();
    let kubeconfig = koord_common::testing::write_kubeconfig(dir.path(), &api.url()).unwrap();
    let retrying = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
    let only_api = EvictorArgs {
        only_evict_by_api: true,
        ..EvictorArgs::default()
    };
    let evictor = PodEvictor::for_mode(Some(retrying), "node-a", &only_api).with_cluster_reload(
        koord_common::ClusterOptions {
            kubeconfig: Some(kubeconfig),
            timeout: Duration::from_secs(10),
        },
    );
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        evictor.evict(&request("guarded", "uid-g")),
    )
    .await
    .expect("the refusal came back without client-side retries");
    assert!(
        matches!(outcome, EvictionOutcome::Blocked { .. }),
        "{outcome:?}"
    );
    let evictions = api
        .recorded()
        .iter()
        .filter(|s| s.target.contains("/eviction"))
        .count();
    assert_eq!(evictions, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_eviction_per_pod_at_a_time() {
    let api = scripted_api_server();
    let evictor = PodEvictor::new(backend(&api), "node-a", &EvictorArgs::default());
    let first = {
        let evictor = evictor.clone();
        tokio::spawn(async move { evictor.evict(&request("slow", "uid-slow")).await })
    };
    // Wait until the first request reached the server, then ask again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !api
        .recorded()
        .iter()
        .any(|s| s.target.contains("/slow/eviction"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "first eviction never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = evictor.evict(&request("slow", "uid-slow")).await;
    assert_eq!(second, EvictionOutcome::InProgress);
    assert_eq!(first.await.unwrap(), EvictionOutcome::Evicted);
    let evictions = api
        .recorded()
        .iter()
        .filter(|s| s.target.contains("/eviction"))
        .count();
    assert_eq!(evictions, 1);
}

/// Stops what it is asked to; ids containing `fail` fail.
#[derive(Debug, Default)]
struct RecordingStopper(std::sync::Mutex<Vec<String>>);

impl koordlet::evictor::runtime::ContainerStopper for RecordingStopper {
    fn stop<'a>(
        &'a self,
        container_id: &'a str,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<(), koordlet::evictor::runtime::StopError>>
                + Send
                + 'a,
        >,
    > {
        Box::pin(async move {
            if container_id.contains("fail") {
                return Err(koordlet::evictor::runtime::StopError::UnsupportedRuntime(
                    "docker".into(),
                ));
            }
            self.0.lock().unwrap().push(container_id.to_string());
            Ok(())
        })
    }
}

/// Upstream's default path: containers stopped through the runtime, no
/// Eviction request, the pod object left alone; the Event says what happened.
#[tokio::test]
async fn runtime_path_stops_containers_and_records_events_without_touching_the_pod() {
    let api = scripted_api_server();
    let stopper = std::sync::Arc::new(RecordingStopper::default());
    let client = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
    let evictor = PodEvictor::new(
        EvictionBackend::RuntimeKill {
            stopper: stopper.clone(),
            events: Some(client),
        },
        "node-a",
        &EvictorArgs::default(),
    );
    let mut victim = request("victim", "uid-victim");
    victim.containers = vec!["containerd://c1".to_string()];
    assert_eq!(
        evictor.evict(&victim).await,
        EvictionOutcome::Stopped { containers: 1 }
    );
    assert_eq!(stopper.0.lock().unwrap().clone(), ["containerd://c1"]);
    let mut failing = request("guarded", "uid-g");
    failing.containers = vec!["docker://fail".to_string()];
    assert!(matches!(
        evictor.evict(&failing).await,
        EvictionOutcome::Failed { .. }
    ));

    let seen = api.recorded();
    assert!(
        seen.iter()
            .all(|s| !s.target.contains("/eviction") && s.method != "PATCH"),
        "the pod object must be left alone: {:?}",
        seen.iter().map(|s| &s.target).collect::<Vec<_>>()
    );
    let events: Vec<serde_json::Value> = seen
        .iter()
        .filter(|s| s.method == "POST" && s.target.starts_with("/api/v1/namespaces/batch/events"))
        .map(|s| json(&s.body))
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["reason"], "evictPodSuccess");
    assert_eq!(events[0]["involvedObject"]["name"], "victim");
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .contains("evict Pod:batch/victim, reason: evicted, message: trigger by koordlet feature BEMemoryEvict, kill pod: victim")
    );
    assert_eq!(events[1]["reason"], "evictPodFail");
    assert!(
        events[1]["message"]
            .as_str()
            .unwrap()
            .contains("not reached through CRI")
    );
}

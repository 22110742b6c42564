#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The MigrationController against a stand-in API server that keeps
//! PodMigrationJobs, pods and Reservations (resourceVersions checked on
//! writes) and records every request: the ReservationFirst path, a
//! reservation that never becomes available, an eviction a
//! PodDisruptionBudget refuses, and EvictDirectly.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use koord_common::leader::Leadership;
use koord_common::metrics::MetricsRegistry;
use koord_common::shutdown::{Shutdown, ShutdownReason};
use koord_common::testing::{FakeApiServer, RecordedRequest};
use koord_descheduler::config::types::MigrationControllerArgs;
use koord_descheduler::migration::controller::ControllerOptions;
use koord_descheduler::migration::{MigrationHandle, run_migration_controller};
use serde_json::{Value, json};

const PMJ: &str = "/apis/scheduling.koordinator.sh/v1alpha1/podmigrationjobs";
const RESERVATIONS: &str = "/apis/scheduling.koordinator.sh/v1alpha1/reservations";

/// How the stand-in answers evictions.
#[derive(Clone, Copy, PartialEq)]
enum Evictions {
    /// 201, and the pod is gone.
    Allow,
    /// 429 as a PodDisruptionBudget makes the API answer.
    RefuseByBudget,
}

struct World {
    version: u64,
    jobs: BTreeMap<String, Value>,
    pods: BTreeMap<String, Value>,
    reservations: BTreeMap<String, Value>,
    evictions: Evictions,
}

impl World {
    fn bump(&mut self, object: &mut Value) {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
    }
}

fn list(kind: &str, items: Vec<Value>, version: u64) -> (u16, String) {
    let body = json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": version.to_string()}, "items": items});
    (200, body.to_string())
}

fn status(code: u16, reason: &str, message: &str) -> (u16, String) {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message, "code": code});
    (code, body.to_string())
}

fn answer(world: &Mutex<World>, request: &RecordedRequest) -> Option<(u16, String)> {
    let mut world = world.lock().unwrap();
    let path = request.path().to_string();
    let method = request.method.as_str();
    let body: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
    let version = world.version;
    match (method, path.as_str()) {
        ("GET", PMJ) => {
            return Some(list(
                "PodMigrationJobList",
                world.jobs.values().cloned().collect(),
                version,
            ));
        }
        ("GET", "/api/v1/pods") => {
            return Some(list(
                "PodList",
                world.pods.values().cloned().collect(),
                version,
            ));
        }
        ("GET", "/api/v1/nodes") => return Some(list("NodeList", vec![], version)),
        ("GET", "/apis/apps/v1/statefulsets") => {
            return Some(list("StatefulSetList", vec![], version));
        }
        ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses") => {
            return Some(list("PriorityClassList", vec![], version));
        }
        ("GET", "/apis/apps/v1/replicasets") => {
            let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "web", "namespace": "default", "uid": "rs-uid", "resourceVersion": "1"},
                "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}}});
            return Some(list("ReplicaSetList", vec![rs], version));
        }
        ("POST", RESERVATIONS) => {
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if world.reservations.contains_key(&name) {
                return Some(status(409, "AlreadyExists", "exists"));
            }
            let mut created = body.clone();
            created["metadata"]["uid"] = json!(format!("uid-{name}"));
            world.bump(&mut created);
            world.reservations.insert(name, created.clone());
            return Some((201, created.to_string()));
        }
        _ => {}
    }
    if let Some(rest) = path.strip_prefix(&format!("{PMJ}/")) {
        let (name, subresource) = rest.split_once('/').unwrap_or((rest, ""));
        let current = world.jobs.get(name).cloned()?;
        return Some(match method {
            "GET" => (200, current.to_string()),
            "PUT" => {
                if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                    return Some(status(409, "Conflict", "the object has been modified"));
                }
                let mut updated = current.clone();
                if subresource == "status" {
                    updated["status"] = body["status"].clone();
                } else {
                    updated["metadata"] = body["metadata"].clone();
                    updated["spec"] = body["spec"].clone();
                }
                world.bump(&mut updated);
                world.jobs.insert(name.to_string(), updated.clone());
                (200, updated.to_string())
            }
            _ => return None,
        });
    }
    if let Some(name) = path.strip_prefix(&format!("{RESERVATIONS}/")) {
        let current = world.reservations.get(name).cloned();
        return Some(match (method, current) {
            ("GET", Some(found)) => (200, found.to_string()),
            ("DELETE", Some(found)) => {
                world.reservations.remove(name);
                (200, found.to_string())
            }
            _ => status(404, "NotFound", "reservation not found"),
        });
    }
    if let Some(rest) = path.strip_prefix("/api/v1/namespaces/default/pods/") {
        let (name, subresource) = rest.split_once('/').unwrap_or((rest, ""));
        let key = format!("default/{name}");
        return Some(match (method, subresource) {
            ("GET", "") => match world.pods.get(&key) {
                Some(pod) => (200, pod.to_string()),
                None => status(404, "NotFound", "pod not found"),
            },
            ("POST", "eviction") => match world.evictions {
                Evictions::Allow => {
                    world.pods.remove(&key);
                    (201, json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}).to_string())
                }
                Evictions::RefuseByBudget => status(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                ),
            },
            _ => return None,
        });
    }
    None
}

fn pod(name: &str, node: &str, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": "1",
            "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": node, "schedulerName": "koord-scheduler", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

fn job(name: &str, mode: &str, ttl: &str) -> Value {
    json!({"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "PodMigrationJob",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "1",
            "creationTimestamp": k8s_openapi::jiff::Timestamp::now().to_string()},
        "spec": {"podRef": {"namespace": "default", "name": "victim"}, "mode": mode, "ttl": ttl},
        "status": {"phase": "Pending"}})
}

struct Harness {
    server: FakeApiServer,
    world: Arc<Mutex<World>>,
    shutdown: Shutdown,
    registry: MetricsRegistry,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Harness {
    fn start(job: Value, evictions: Evictions) -> Self {
        Self::start_with(job, evictions, Leadership::unconditional())
    }

    fn start_with(job: Value, evictions: Evictions, leadership: Leadership) -> Self {
        let server = FakeApiServer::start().unwrap();
        server.hold_watches_open();
        let world = Arc::new(Mutex::new(World {
            version: 10,
            jobs: BTreeMap::from([(job["metadata"]["name"].as_str().unwrap().to_string(), job)]),
            pods: BTreeMap::from([("default/victim".to_string(), pod("victim", "node-1", true))]),
            reservations: BTreeMap::new(),
            evictions,
        }));
        let shared = Arc::clone(&world);
        server.respond_with(move |request| answer(&shared, request));
        let mut config = kube::Config::new(server.url().parse().unwrap());
        // A 429 must reach the controller, not be retried inside the client.
        config.default_retry = false;
        let client = kube::Client::try_from(config).unwrap();
        let mut args: MigrationControllerArgs = koord_descheduler::migration::default_args();
        args.arbitration_args.as_mut().unwrap().interval = Some(
            apis::extension::duration::GoDuration::from_std(Duration::from_millis(100)),
        );
        let handle = MigrationHandle::new(args)
            .unwrap()
            .with_options(ControllerOptions {
                requeue_after: Duration::from_millis(100),
                base_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(300),
            });
        let shutdown = Shutdown::new();
        let registry = MetricsRegistry::new("koord_descheduler");
        let task = tokio::spawn({
            let shutdown = shutdown.clone();
            let registry = registry.clone();
            async move {
                run_migration_controller(client, handle, &registry, leadership, shutdown).await
            }
        });
        Harness {
            server,
            world,
            shutdown,
            registry,
            task,
        }
    }

    fn job(&self, name: &str) -> Value {
        self.world.lock().unwrap().jobs[name].clone()
    }

    async fn wait_for(&self, what: &str, timeout: Duration, check: impl Fn(&World) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if check(&self.world.lock().unwrap()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; requests: {:#?}",
                self.server
                    .recorded()
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.target))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn requests(&self, method: &str, path: &str) -> Vec<RecordedRequest> {
        self.server
            .recorded()
            .into_iter()
            .filter(|r| r.method == method && r.path() == path)
            .collect()
    }

    async fn stop(self) {
        self.shutdown
            .trigger(ShutdownReason::Requested("test".into()));
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

fn phase(job: &Value) -> &str {
    job["status"]["phase"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservation_first_reserves_evicts_and_succeeds_when_the_replacement_is_ready() {
    let harness = Harness::start(job("job-1", "ReservationFirst", "5m"), Evictions::Allow);
    // Arbitration passes it, it runs, and it creates the Reservation.
    harness
        .wait_for("the reservation", Duration::from_secs(10), |w| {
            w.reservations.contains_key("uid-job-1")
        })
        .await;
    let created = harness.world.lock().unwrap().reservations["uid-job-1"].clone();
    assert_eq!(created["spec"]["allocateOnce"], json!(true));
    assert_eq!(
        created["spec"]["owners"][0]["controller"]["name"],
        json!("web")
    );
    assert_eq!(
        created["metadata"]["labels"]["app.kubernetes.io/created-by"],
        json!("koord-descheduler")
    );
    assert_eq!(
        created["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0]["values"],
        json!(["node-1"])
    );
    let job1 = harness.job("job-1");
    assert_eq!(
        job1["metadata"]["annotations"]["descheduler.koordinator.sh/passed-arbitration"],
        json!("true")
    );
    assert_eq!(job1["spec"]["podRef"]["uid"], json!("uid-victim"));
    // Pending reservation: no eviction yet.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        harness
            .requests("POST", "/api/v1/namespaces/default/pods/victim/eviction")
            .is_empty()
    );
    assert_eq!(phase(&harness.job("job-1")), "Running");
    // The scheduler places it.
    {
        let mut world = harness.world.lock().unwrap();
        let reservation = world.reservations.get_mut("uid-job-1").unwrap();
        reservation["status"] = json!({"phase": "Available", "nodeName": "node-2",
            "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled"}]});
    }
    harness
        .wait_for("the eviction", Duration::from_secs(10), |w| {
            !w.pods.contains_key("default/victim")
        })
        .await;
    let evictions = harness.requests("POST", "/api/v1/namespaces/default/pods/victim/eviction");
    assert_eq!(evictions.len(), 1);
    let eviction: Value = serde_json::from_str(&evictions[0].body).unwrap();
    assert_eq!(eviction["kind"], json!("Eviction"));
    assert_eq!(eviction["apiVersion"], json!("policy/v1"));
    assert_eq!(
        eviction["deleteOptions"]["preconditions"]["uid"],
        json!("uid-victim")
    );
    // Waiting for a pod to take the reservation.
    harness
        .wait_for("WaitForPodBindReservation", Duration::from_secs(10), |w| {
            w.jobs["job-1"]["status"]["reason"] == json!("WaitForPodBindReservation")
        })
        .await;
    assert_eq!(harness.job("job-1")["status"]["nodeName"], json!("node-2"));
    // The replacement takes it and becomes ready.
    {
        let mut world = harness.world.lock().unwrap();
        world
            .pods
            .insert("default/victim-2".into(), pod("victim-2", "node-2", true));
        let reservation = world.reservations.get_mut("uid-job-1").unwrap();
        reservation["status"]["currentOwners"] =
            json!([{"namespace": "default", "name": "victim-2", "uid": "uid-victim-2"}]);
    }
    harness
        .wait_for("Succeeded", Duration::from_secs(10), |w| {
            w.jobs["job-1"]["status"]["phase"] == json!("Succeeded")
        })
        .await;
    let done = harness.job("job-1");
    assert_eq!(done["status"]["status"], json!("Complete"));
    assert_eq!(
        done["status"]["message"],
        json!("Bind Pod \"default/victim-2\" in Reservation \"uid-job-1\"")
    );
    assert_eq!(done["status"]["podRef"]["name"], json!("victim-2"));
    // Every write of the job carried the resourceVersion it read (none conflicted).
    let job_writes: Vec<_> = harness
        .server
        .recorded()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path().starts_with(&format!("{PMJ}/job-1")))
        .collect();
    assert!(job_writes.len() >= 5, "{}", job_writes.len());
    for write in &job_writes {
        let body: Value = serde_json::from_str(&write.body).unwrap();
        assert!(
            body["metadata"]["resourceVersion"].is_string(),
            "{}",
            write.body
        );
    }
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_that_never_becomes_available_times_the_job_out_and_is_deleted() {
    let harness = Harness::start(job("job-2", "ReservationFirst", "2s"), Evictions::Allow);
    harness
        .wait_for("the reservation", Duration::from_secs(10), |w| {
            w.reservations.contains_key("uid-job-2")
        })
        .await;
    harness
        .wait_for("Failed", Duration::from_secs(10), |w| {
            w.jobs["job-2"]["status"]["phase"] == json!("Failed")
        })
        .await;
    let failed = harness.job("job-2");
    assert_eq!(failed["status"]["reason"], json!("Timeout"));
    assert_eq!(
        failed["status"]["message"],
        json!("Abort job caused by timeout")
    );
    assert!(
        !harness
            .world
            .lock()
            .unwrap()
            .reservations
            .contains_key("uid-job-2")
    );
    assert_eq!(
        harness
            .requests("DELETE", &format!("{RESERVATIONS}/uid-job-2"))
            .len(),
        1
    );
    assert!(
        harness
            .requests("POST", "/api/v1/namespaces/default/pods/victim/eviction")
            .is_empty()
    );
    assert!(
        harness
            .world
            .lock()
            .unwrap()
            .pods
            .contains_key("default/victim")
    );
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_refused_by_a_disruption_budget_is_retried_and_fails_at_the_timeout() {
    let harness = Harness::start(
        job("job-3", "EvictDirectly", "3s"),
        Evictions::RefuseByBudget,
    );
    harness
        .wait_for("FailedEvict", Duration::from_secs(10), |w| {
            w.jobs["job-3"]["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == json!("FailedEvict")))
        })
        .await;
    let refused = harness.job("job-3");
    assert_eq!(phase(&refused), "Running");
    let message = refused["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("429") && message.contains("disruption budget"),
        "{message}"
    );
    harness
        .wait_for("Failed", Duration::from_secs(10), |w| {
            w.jobs["job-3"]["status"]["phase"] == json!("Failed")
        })
        .await;
    assert_eq!(harness.job("job-3")["status"]["reason"], json!("Timeout"));
    let attempts = harness
        .requests("POST", "/api/v1/namespaces/default/pods/victim/eviction")
        .len();
    assert!(
        attempts >= 2,
        "the eviction was retried: {attempts} attempts"
    );
    // Retries back off: far fewer than one per tick over three seconds.
    assert!(attempts <= 20, "{attempts} attempts");
    assert!(
        harness
            .world
            .lock()
            .unwrap()
            .pods
            .contains_key("default/victim")
    );
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evict_directly_evicts_at_once_and_succeeds() {
    let harness = Harness::start(job("job-4", "EvictDirectly", "5m"), Evictions::Allow);
    harness
        .wait_for("Succeeded", Duration::from_secs(10), |w| {
            w.jobs["job-4"]["status"]["phase"] == json!("Succeeded")
        })
        .await;
    let done = harness.job("job-4");
    assert_eq!(
        done["status"]["message"],
        json!("Pod \"default/victim\" has been evicted")
    );
    assert_eq!(done["status"]["status"], json!("Complete"));
    assert!(harness.requests("POST", RESERVATIONS).is_empty());
    let metrics = harness.registry.encode().unwrap();
    assert!(
        metrics.contains(
            r#"descheduler_pods_evicted{result="success",strategy="",namespace="default",node="node-1"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"koord_descheduler_migration_jobs_finished_total{phase="Succeeded",reason=""} 1"#
        ),
        "{metrics}"
    );
    assert_eq!(
        harness
            .requests("POST", "/api/v1/namespaces/default/pods/victim/eviction")
            .len(),
        1
    );
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_done_until_this_replica_leads() {
    let (lead, state) = tokio::sync::watch::channel(false);
    let harness = Harness::start_with(
        job("job-5", "EvictDirectly", "5m"),
        Evictions::Allow,
        Leadership::from_receiver(state),
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let writes = harness
        .server
        .recorded()
        .into_iter()
        .filter(|r| r.method != "GET")
        .count();
    assert_eq!(writes, 0, "a follower wrote to the API");
    assert_eq!(phase(&harness.job("job-5")), "Pending");
    lead.send_replace(true);
    harness
        .wait_for("Succeeded", Duration::from_secs(10), |w| {
            w.jobs["job-5"]["status"]["phase"] == json!("Succeeded")
        })
        .await;
    harness.stop().await;
}

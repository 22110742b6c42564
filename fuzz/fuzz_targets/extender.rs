//! koord-scheduler as kube-scheduler's extender, driven through its HTTP
//! router in memory (no socket) against a small cluster in its cache: the
//! objects of the scheduler's `simulate` test snapshots (nodes with
//! NodeMetrics, a quota, running and pending pods, a NUMA node with its
//! topology, a Reservation, devices).
//!
//! The input is up to eight steps separated by NUL bytes (JSON has none);
//! each step's first byte picks what it is:
//!
//! - `0` `/filter`, `1` `/prioritize`, `2` `/bind`: the rest is the body;
//! - `3`: an object as the watch delivers it (the second byte picks the
//!   kind, the rest is its JSON), admitted and applied to the cache;
//! - `4`: a `koord-scheduler simulate` snapshot (YAML) scheduled on a fresh
//!   scheduler.
//!
//! No request may get a 5xx answer; every answer must be JSON or text.
#![no_main]

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use koord_fuzz::select;
use koord_scheduler::cache::{Change, Object};
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::extender::{ExtenderMetrics, ExtenderState, router};
use koord_scheduler::framework::{RecordingBinder, Scheduler};
use koord_scheduler::simulator;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    // Timers on (`/bind` waits for the watch to deliver a filtered pod) and
    // paused, so such a wait passes at once instead of taking real seconds.
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
});

/// The objects of the scheduler's test snapshots, admitted once.
static CLUSTER: LazyLock<Vec<Object>> = LazyLock::new(|| {
    [
        include_str!("../../koord-scheduler/tests/data/snapshot.yaml"),
        include_str!("../../koord-scheduler/tests/data/scenarios/numa.yaml"),
        include_str!("../../koord-scheduler/tests/data/scenarios/reservation.yaml"),
        include_str!("../../koord-scheduler/tests/data/scenarios/deviceshare.yaml"),
        include_str!("../../koord-scheduler/tests/data/scenarios/gang.yaml"),
    ]
    .into_iter()
    .flat_map(|text| {
        simulator::Snapshot::from_yaml(text)
            .expect("the scheduler's test snapshots parse")
            .objects
    })
    .collect()
});

/// The snapshots' clock: NodeMetrics reported at 2026-01-01T00:00:00Z.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_660)
}

fn scheduler() -> Scheduler {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .expect("the default scheduler builds");
    for object in CLUSTER.iter().cloned() {
        scheduler.apply(Change::Upsert(object));
    }
    scheduler
}

const KINDS: [&str; 8] = [
    "Node",
    "Pod",
    "NodeMetric",
    "Reservation",
    "ElasticQuota",
    "PodGroup",
    "Device",
    "NodeResourceTopology",
];

fn object(kind: usize, json: &[u8]) -> Option<Object> {
    Some(match KINDS[kind % KINDS.len()] {
        "Node" => Object::Node(serde_json::from_slice(json).ok()?),
        "Pod" => Object::Pod(serde_json::from_slice(json).ok()?),
        "NodeMetric" => Object::NodeMetric(serde_json::from_slice(json).ok()?),
        "Reservation" => Object::Reservation(serde_json::from_slice(json).ok()?),
        "ElasticQuota" => Object::ElasticQuota(serde_json::from_slice(json).ok()?),
        "PodGroup" => Object::PodGroup(serde_json::from_slice(json).ok()?),
        "Device" => Object::Device(serde_json::from_slice(json).ok()?),
        _ => Object::NodeResourceTopology(serde_json::from_slice(json).ok()?),
    })
}

async fn post(state: &ExtenderState, path: &str, body: &[u8]) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("a request");
    let response = router(state.clone())
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("an in-memory body");
    assert!(
        !status.is_server_error(),
        "{path} answered {status}: {}",
        String::from_utf8_lossy(&body)
    );
    if status == StatusCode::OK {
        serde_json::from_slice::<serde_json::Value>(&body)
            .unwrap_or_else(|e| panic!("{path} answered 200 with a body that is not JSON: {e}"));
    }
}

fuzz_target!(|data: &[u8]| {
    let state = ExtenderState {
        scheduler: Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler())),
        binder: Arc::new(RecordingBinder::default()),
        metrics: ExtenderMetrics::new("koord-scheduler"),
    };
    for step in data.split(|b| *b == 0).take(8) {
        let Some((selector, rest)) = select(step, 5) else {
            continue;
        };
        match selector {
            0 => RUNTIME.block_on(post(&state, "/filter", rest)),
            1 => RUNTIME.block_on(post(&state, "/prioritize", rest)),
            2 => RUNTIME.block_on(post(&state, "/bind", rest)),
            3 => {
                let Some((kind, json)) = rest.split_first() else {
                    continue;
                };
                let Some(object) = object(usize::from(kind.wrapping_sub(b'0')), json) else {
                    continue;
                };
                if let Ok(admitted) = koord_scheduler::admission::admit(object) {
                    let mut scheduler = state.scheduler.write().expect("not poisoned");
                    scheduler.apply(Change::Upsert(admitted.object));
                    let _ = scheduler.expire_assumed(now());
                }
            }
            _ => {
                let Ok(text) = std::str::from_utf8(rest) else {
                    continue;
                };
                let Ok(snapshot) = simulator::Snapshot::from_yaml(text) else {
                    continue;
                };
                let mut fresh = koord_scheduler::build_scheduler(
                    &SchedulerConfiguration::default(),
                    Duration::from_secs(300),
                )
                .expect("the default scheduler builds");
                let report = simulator::simulate(
                    &mut fresh,
                    snapshot,
                    simulator::Snapshot::default(),
                    now(),
                );
                let _ = simulator::render_table(&report);
            }
        }
    }
});

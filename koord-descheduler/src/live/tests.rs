//! The live loop over the `plan` fixtures: rounds carry the anomaly
//! detectors, the limits and dry runs apply, the loop runs on its interval
//! only while leading, and the PodMigrationJob sink posts upstream's job to
//! an API server.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apis::extension::duration::GoDuration;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use koord_common::Shutdown;
use koord_common::leader::Leadership;
use koord_common::testing::FakeApiServer;
use serde_json::{Value, json};

use super::caches::CachedView;
use super::metrics::{LiveMetrics, VictimOutcome};
use super::round::{Descheduler, RoundOutcome, Victim};
use super::sink::{EvictorSink, JobNames, PodMigrationJobSink, SinkError, SinkFuture, build_job};
use super::{Clock, LiveLoop, RoundSummary, ViewSource};
use crate::config::{self, Configuration};
use crate::snapshot::Snapshot;

const PMJ_PATH: &str = "/apis/scheduling.koordinator.sh/v1alpha1/podmigrationjobs";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn configuration() -> Configuration {
    config::load_file(&fixture("config.yaml")).unwrap()
}

fn cached() -> CachedView {
    let snapshot = Snapshot::read_file(&fixture("hot-and-cold.yaml"), 1 << 20).unwrap();
    CachedView {
        view: snapshot.view,
        priority_classes: snapshot.priority_classes,
        problems: snapshot.problems,
    }
}

/// The fixtures' time (NodeMetrics are 30 s old) plus `rounds` intervals.
fn at(rounds: i64) -> Timestamp {
    let base: Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
    base.checked_add(SignedDuration::from_secs(10 * rounds))
        .unwrap()
}

fn victims(outcome: RoundOutcome) -> Vec<Victim> {
    match outcome {
        RoundOutcome::Ran { victims, .. } => victims,
        RoundOutcome::Skipped(reason) => panic!("skipped: {reason}"),
    }
}

fn names(victims: &[Victim]) -> Vec<&str> {
    victims.iter().map(|v| v.name.as_str()).collect()
}

#[test]
fn rounds_carry_the_anomaly_state_until_the_node_has_been_hot_long_enough() {
    let configuration = configuration();
    let cached = cached();
    let mut descheduler = Descheduler::new(&configuration).unwrap();
    let mut round = |n: i64| {
        victims(
            descheduler
                .round(
                    &configuration,
                    &cached.view,
                    &cached.priority_classes,
                    at(n),
                )
                .unwrap(),
        )
    };
    // consecutiveAbnormalities 2: hot in more than 2 rounds in a row.
    assert!(round(0).is_empty());
    assert!(round(1).is_empty());
    let third = round(2);
    assert_eq!(names(&third), ["web-6", "web-5"]);
    let web6 = &third[0];
    assert_eq!(web6.namespace, "default");
    assert_eq!(web6.uid, "uid-web-6");
    assert_eq!(web6.node, "hot-1");
    assert_eq!(web6.profile, "koord-descheduler");
    assert_eq!(web6.trigger, "LowNodeLoad");
    assert_eq!(web6.mode, "ReservationFirst");
    assert!(!web6.dry_run);
    assert_eq!(
        web6.reason,
        "node is overutilized, node cpu usage(100.00%)>threshold(70.00%)"
    );
    assert_eq!(descheduler.rounds(), 3);

    // The same three rounds with the state dropped in between never act.
    for n in 0..3 {
        let mut fresh = Descheduler::new(&configuration).unwrap();
        let outcome = fresh
            .round(
                &configuration,
                &cached.view,
                &cached.priority_classes,
                at(n),
            )
            .unwrap();
        assert!(victims(outcome).is_empty(), "round {n}");
    }
}

#[test]
fn the_live_round_agrees_with_the_offline_plan() {
    let configuration = configuration();
    let snapshot = Snapshot::read_file(&fixture("hot-and-cold.yaml"), 1 << 20).unwrap();
    let plan = crate::plan::plan(&configuration, &snapshot, at(0), 0).unwrap();
    let planned: Vec<(String, String, String)> = plan.profiles[0]
        .migrations
        .iter()
        .map(|m| (m.name.clone(), m.node.clone(), m.reason.clone()))
        .collect();
    let cached = cached();
    let mut descheduler = Descheduler::new(&configuration).unwrap();
    let mut last = Vec::new();
    for n in 0..i64::from(plan.profiles[0].round) {
        // plan judges every round's NodeMetrics at --now; so does this.
        let mut outcome = descheduler
            .round(
                &configuration,
                &cached.view,
                &cached.priority_classes,
                at(0).checked_add(SignedDuration::from_millis(n)).unwrap(),
            )
            .unwrap();
        if let RoundOutcome::Ran { victims, .. } = &mut outcome {
            last = victims
                .iter()
                .map(|v| (v.name.clone(), v.node.clone(), v.reason.clone()))
                .collect();
        }
    }
    assert!(!planned.is_empty());
    assert_eq!(last, planned);
}

#[test]
fn fewer_than_two_ready_nodes_skip_the_round() {
    let configuration = configuration();
    let mut cached = cached();
    cached.view.nodes.retain(|node| node.name == "hot-1");
    let mut descheduler = Descheduler::new(&configuration).unwrap();
    let outcome = descheduler
        .round(
            &configuration,
            &cached.view,
            &cached.priority_classes,
            at(0),
        )
        .unwrap();
    match outcome {
        RoundOutcome::Skipped(reason) => assert!(reason.starts_with("1 ready node(s)"), "{reason}"),
        RoundOutcome::Ran { .. } => panic!("ran on one node"),
    }
    // Not-ready nodes do not count either.
    let mut cached = self::cached();
    for node in &mut cached.view.nodes {
        node.ready = node.name == "hot-1";
    }
    let outcome = descheduler
        .round(
            &configuration,
            &cached.view,
            &cached.priority_classes,
            at(1),
        )
        .unwrap();
    assert!(matches!(outcome, RoundOutcome::Skipped(_)));
}

fn third_round(configuration: &Configuration) -> RoundOutcome {
    let cached = cached();
    let mut descheduler = Descheduler::new(configuration).unwrap();
    let mut outcome = None;
    for n in 0..3 {
        outcome = Some(
            descheduler
                .round(configuration, &cached.view, &cached.priority_classes, at(n))
                .unwrap(),
        );
    }
    outcome.unwrap()
}

#[test]
fn top_level_eviction_limits_cap_a_round() {
    let mut configuration = configuration();
    configuration.file.max_no_of_pods_to_evict_total = Some(1);
    assert_eq!(names(&victims(third_round(&configuration))), ["web-6"]);

    let mut configuration = self::configuration();
    configuration.file.max_no_of_pods_to_evict_per_node = Some(1);
    let RoundOutcome::Ran {
        victims: capped,
        profiles,
    } = third_round(&configuration)
    else {
        panic!("skipped");
    };
    assert_eq!(names(&capped), ["web-6"]);
    let skipped = &profiles[0].report.pools[0].sources[0].skipped;
    assert!(
        skipped
            .iter()
            .any(|s| s.name == "web-5" && s.reason.contains("maxNoOfPodsToEvictPerNode 1")),
        "{skipped:?}"
    );

    let mut configuration = self::configuration();
    configuration.file.max_no_of_pods_to_evict_per_namespace = Some(0);
    assert!(victims(third_round(&configuration)).is_empty());
}

#[test]
fn dry_runs_mark_victims_or_keep_them_back() {
    // The top-level dryRun and the MigrationController's: victims, marked.
    let mut configuration = configuration();
    configuration.file.dry_run = true;
    let marked = victims(third_round(&configuration));
    assert_eq!(names(&marked), ["web-6", "web-5"]);
    assert!(marked.iter().all(|v| v.dry_run));

    let mut configuration = self::configuration();
    configuration.profiles[0].migration_controller.dry_run = true;
    assert!(
        victims(third_round(&configuration))
            .iter()
            .all(|v| v.dry_run)
    );

    // LowNodeLoad's own dryRun: no victims, counted apart.
    let mut configuration = self::configuration();
    configuration.profiles[0]
        .low_node_load
        .as_mut()
        .unwrap()
        .dry_run = true;
    let RoundOutcome::Ran { victims, profiles } = third_round(&configuration) else {
        panic!("skipped");
    };
    assert!(victims.is_empty());
    // Never handed to the evictor, so maxMigratingPerNode (2) does not stop them.
    assert_eq!(profiles[0].low_node_load_dry_run, 3);
    assert_eq!(profiles[0].report.migrations().count(), 3);
}

#[test]
fn invalid_delete_options_are_refused_up_front() {
    let mut configuration = configuration();
    configuration.profiles[0]
        .migration_controller
        .default_delete_options = Some(json!({"gracePeriodSeconds": "soon"}));
    let err = Descheduler::new(&configuration).err().unwrap().to_string();
    assert!(
        err.starts_with("profile koord-descheduler: MigrationController defaultDeleteOptions:"),
        "{err}"
    );
}

fn victim(name: &str) -> Victim {
    Victim {
        profile: "koord-descheduler".into(),
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        node: "hot-1".into(),
        pool: "__default_node_pool__".into(),
        prod: false,
        reason: "node is overutilized, node cpu usage(100.00%)>threshold(70.00%)".into(),
        trigger: "LowNodeLoad".into(),
        mode: "ReservationFirst".into(),
        ttl: Some(GoDuration::from_std(Duration::from_secs(300))),
        delete_options: Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
                grace_period_seconds: Some(30),
                ..Default::default()
            },
        ),
        dry_run: false,
    }
}

#[test]
fn the_job_is_upstreams() {
    let job = build_job(&victim("web-6"), "job-1".into(), "descheduler-a").unwrap();
    let json = serde_json::to_value(&job).unwrap();
    assert_eq!(json["apiVersion"], "scheduling.koordinator.sh/v1alpha1");
    assert_eq!(json["kind"], "PodMigrationJob");
    assert_eq!(json["metadata"]["name"], "job-1");
    assert_eq!(
        json["metadata"]["annotations"],
        json!({
            "koordinator.sh/evict-reason": "node is overutilized, node cpu usage(100.00%)>threshold(70.00%)",
            "koordinator.sh/evict-trigger": "LowNodeLoad",
            "koordinator.sh/job-created-by": "descheduler-a",
        })
    );
    assert_eq!(
        json["spec"],
        json!({
            "podRef": {"namespace": "default", "name": "web-6", "uid": "uid-web-6"},
            "mode": "ReservationFirst",
            "ttl": "5m0s",
            "deleteOptions": {"gracePeriodSeconds": 30},
        })
    );
    assert_eq!(json["status"]["phase"], "Pending");

    let mut bad = victim("web-6");
    bad.mode = "Teleport".into();
    assert!(matches!(
        build_job(&bad, "job-2".into(), "a"),
        Err(SinkError::Mode { .. })
    ));
    let mut long = victim("web-6");
    long.reason = "é".repeat(5000);
    let job = build_job(&long, "job-3".into(), "a").unwrap();
    let reason = &job.metadata.annotations.unwrap()["koordinator.sh/evict-reason"];
    assert!(reason.len() <= super::sink::MAX_REASON_BYTES);
}

#[test]
fn job_names_are_distinct_uuids() {
    let names = JobNames::default();
    let all: std::collections::HashSet<String> = (0..1000).map(|_| names.next()).collect();
    assert_eq!(all.len(), 1000);
    for name in all.iter().take(20) {
        let parts: Vec<&str> = name.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{name}"
        );
        assert!(parts[2].starts_with('4'), "{name}");
        assert!(name.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()));
    }
}

fn client(api: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap()
}

/// Echoes a created object back, with its name, as the API server does.
fn accept_creates(api: &FakeApiServer) {
    api.respond_with(|request| {
        (request.method == "POST" && request.path() == PMJ_PATH)
            .then(|| (201, request.body.clone()))
    });
}

#[tokio::test]
async fn the_sink_posts_the_job() {
    let api = FakeApiServer::start().unwrap();
    accept_creates(&api);
    let sink = PodMigrationJobSink::new(client(&api), "descheduler-a");
    let name = sink.start(&victim("web-6")).await.unwrap();
    let posted: Vec<_> = api
        .recorded()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].path(), PMJ_PATH);
    let body: Value = serde_json::from_str(&posted[0].body).unwrap();
    assert_eq!(body["metadata"]["name"], name.as_str());
    assert_eq!(body["spec"]["podRef"]["name"], "web-6");
    assert_eq!(body["spec"]["mode"], "ReservationFirst");
    assert_eq!(
        body["metadata"]["annotations"]["koordinator.sh/job-created-by"],
        "descheduler-a"
    );

    // A refusal is an error naming the pod.
    let refusing = FakeApiServer::start().unwrap();
    refusing.respond(
        "POST",
        PMJ_PATH,
        403,
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","message":"forbidden","code":403}"#,
    );
    let sink = PodMigrationJobSink::new(client(&refusing), "descheduler-a");
    let err = sink.start(&victim("web-6")).await.unwrap_err().to_string();
    assert!(
        err.starts_with("creating the PodMigrationJob of pod default/web-6:"),
        "{err}"
    );
}

/// A round source counting its calls.
struct FixtureSource {
    cached: CachedView,
    calls: AtomicUsize,
}

impl ViewSource for FixtureSource {
    fn view(&self) -> CachedView {
        self.calls.fetch_add(1, Ordering::SeqCst);
        CachedView {
            view: self.cached.view.clone(),
            priority_classes: self.cached.priority_classes.clone(),
            problems: self.cached.problems.clone(),
        }
    }
}

/// A clock that moves one fixture interval per reading.
fn stepping_clock() -> Clock {
    let readings = Arc::new(AtomicUsize::new(0));
    Arc::new(move || at(i64::try_from(readings.fetch_add(1, Ordering::SeqCst)).unwrap()))
}

#[derive(Default)]
struct RecordingSink {
    started: Mutex<Vec<String>>,
}

impl EvictorSink for RecordingSink {
    fn start<'a>(&'a self, victim: &'a Victim) -> SinkFuture<'a> {
        Box::pin(async move {
            self.started.lock().unwrap().push(victim.name.clone());
            Ok(format!("job-{}", victim.name))
        })
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_loop_runs_on_its_interval_only_while_leading() {
    let mut configuration = configuration();
    configuration.file.descheduling_interval = GoDuration::from_std(Duration::from_millis(50));
    let descheduler = Descheduler::new(&configuration).unwrap();
    let sink = Arc::new(RecordingSink::default());
    let (leading, state) = tokio::sync::watch::channel(false);
    let live = LiveLoop::new(
        Arc::new(configuration),
        descheduler,
        sink.clone(),
        LiveMetrics::default(),
        Leadership::from_receiver(state),
        stepping_clock(),
    );
    let source = Arc::new(FixtureSource {
        cached: cached(),
        calls: AtomicUsize::new(0),
    });
    let summaries: Arc<Mutex<Vec<RoundSummary>>> = Arc::default();
    let shutdown = Shutdown::new();
    let task = tokio::spawn({
        let source: Arc<dyn ViewSource> = source.clone();
        let summaries = summaries.clone();
        let shutdown = shutdown.clone();
        async move {
            live.run(source, shutdown, move |summary| {
                summaries.lock().unwrap().push(summary.clone());
            })
            .await;
        }
    });

    // Standing by: no round.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(source.calls.load(Ordering::SeqCst), 0);

    leading.send_replace(true);
    wait_until("three rounds", || summaries.lock().unwrap().len() >= 3).await;
    {
        let summaries = summaries.lock().unwrap();
        assert_eq!(
            summaries
                .iter()
                .map(|s| s.round)
                .take(3)
                .collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(summaries[0].victims.is_empty());
        assert!(summaries[1].victims.is_empty());
        let third: Vec<(&str, VictimOutcome)> = summaries[2]
            .victims
            .iter()
            .map(|(v, o)| (v.name.as_str(), *o))
            .collect();
        assert_eq!(
            third,
            [
                ("web-6", VictimOutcome::Created),
                ("web-5", VictimOutcome::Created)
            ]
        );
    }
    assert_eq!(&sink.started.lock().unwrap()[..2], ["web-6", "web-5"]);

    // Losing leadership stops the rounds.
    leading.send_replace(false);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopped_at = source.calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(source.calls.load(Ordering::SeqCst), stopped_at);

    shutdown.trigger(koord_common::ShutdownReason::Requested("test over".into()));
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the loop ends on shutdown")
        .unwrap();
}

#[tokio::test]
async fn a_round_posts_jobs_and_dry_runs_post_nothing() {
    let api = FakeApiServer::start().unwrap();
    accept_creates(&api);
    let run = |dry_run: bool| {
        let mut configuration = configuration();
        configuration.file.dry_run = dry_run;
        LiveLoop::new(
            Arc::new(configuration.clone()),
            Descheduler::new(&configuration).unwrap(),
            Arc::new(PodMigrationJobSink::new(client(&api), "descheduler-a")),
            LiveMetrics::default(),
            Leadership::unconditional(),
            stepping_clock(),
        )
    };

    let mut dry = run(true);
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        outcomes = dry.run_round(cached()).await.victims;
    }
    assert_eq!(
        outcomes.iter().map(|(_, o)| *o).collect::<Vec<_>>(),
        [VictimOutcome::DryRun, VictimOutcome::DryRun]
    );
    assert!(api.recorded().iter().all(|r| r.method != "POST"));

    let mut live = run(false);
    for _ in 0..3 {
        outcomes = live.run_round(cached()).await.victims;
    }
    assert_eq!(
        outcomes.iter().map(|(_, o)| *o).collect::<Vec<_>>(),
        [VictimOutcome::Created, VictimOutcome::Created]
    );
    let posted: Vec<Value> = api
        .recorded()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path() == PMJ_PATH)
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let pods: Vec<&str> = posted
        .iter()
        .map(|job| job["spec"]["podRef"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(pods, ["web-6", "web-5"]);
    assert_eq!(
        posted[0]["metadata"]["annotations"]["koordinator.sh/evict-reason"],
        "node is overutilized, node cpu usage(100.00%)>threshold(70.00%)"
    );
    assert_eq!(posted[0]["spec"]["podRef"]["uid"], "uid-web-6");
}

use super::*;
use serde_json::{Value, json};

fn profile(body: Value) -> ClusterColocationProfile {
    let mut object = json!({
        "apiVersion": "config.koordinator.sh/v1alpha1",
        "kind": "ClusterColocationProfile",
        "metadata": {
            "name": "test-profile",
            "resourceVersion": "1",
            "labels": {"config.koordinator.sh/controller-managed": "true"}
        },
        "spec": {}
    });
    crate::webhook::pod_mutating::merge_patch(&mut object, &body);
    serde_json::from_value(object).unwrap()
}

/// Upstream's test profile (colocationprofile_controller_test.go).
fn upstream_profile() -> ClusterColocationProfile {
    profile(json!({"spec": {
        "selector": {"matchLabels": {"koordinator-colocation-pod": "true"}},
        "labels": {"testLabelA": "valueA"},
        "annotations": {"testAnnotationA": "valueA"},
        "qosClass": "BE",
        "koordinatorPriority": 1111,
        "patch": {"metadata": {
            "labels": {"test-patch-label": "patch-a"},
            "annotations": {"test-patch-annotation": "patch-b"}
        }}
    }}))
}

fn pod(name: &str, labels: Value, phase: &str, node: Option<&str>) -> Arc<Pod> {
    let mut spec = json!({"containers": [{
        "name": "test-container-a",
        "resources": {
            "limits": {"cpu": "1", "memory": "4Gi"},
            "requests": {"cpu": "1", "memory": "4Gi"}
        }
    }], "overhead": {"cpu": "1", "memory": "2Gi"}});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}"), "labels": labels},
            "spec": spec,
            "status": {"phase": phase}
        }))
        .unwrap(),
    )
}

struct Harness {
    memory: UpdateMemory,
    bucket: TokenBucket,
    now: Instant,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    reconcile_by_default: bool,
}

impl Harness {
    fn new() -> Self {
        let now = Instant::now();
        Harness {
            memory: UpdateMemory::new(Duration::from_secs(300), Duration::from_secs(600), now),
            bucket: TokenBucket::new(10.0, 100, now),
            now,
            namespaces: BTreeMap::from([(
                "default".to_owned(),
                BTreeMap::from([("team".to_owned(), "batch".to_owned())]),
            )]),
            reconcile_by_default: false,
        }
    }

    fn plan_with_roll(
        &mut self,
        profile: &ClusterColocationProfile,
        pods: &[Arc<Pod>],
        roll: i64,
    ) -> Result<ProfilePlan, PlanError> {
        let input = PlanInput {
            reconcile_by_default: self.reconcile_by_default,
            pods,
            namespace_labels: &self.namespaces,
        };
        plan_profile(
            profile,
            &input,
            &mut self.memory,
            &mut self.bucket,
            self.now,
            &mut || roll,
        )
    }

    fn plan(&mut self, profile: &ClusterColocationProfile, pods: &[Arc<Pod>]) -> ProfilePlan {
        self.plan_with_roll(profile, pods, 0).unwrap()
    }

    /// What the API server would hold after the patches, remembering them as the shell does.
    fn apply(&mut self, plan: &ProfilePlan, pods: &[Arc<Pod>]) -> BTreeMap<String, Value> {
        let mut result = BTreeMap::new();
        for planned in &plan.patches {
            let original = pods.iter().find(|p| p.name_any() == planned.name).unwrap();
            let mut value = serde_json::to_value(Pod::clone(original)).unwrap();
            json_patch::patch(&mut value, &planned.patch).unwrap();
            self.memory.remember(planned.update_key.clone(), self.now);
            result.insert(planned.name.clone(), value);
        }
        result
    }
}

fn upstream_pods() -> Vec<Arc<Pod>> {
    vec![
        pod(
            "test-pod-1",
            json!({"koordinator-colocation-pod": "true"}),
            "Pending",
            None,
        ),
        pod("test-pod-2", json!({"foo": "bar"}), "Pending", None),
        pod(
            "test-pod-3",
            json!({"koordinator-colocation-pod": "true"}),
            "Running",
            None,
        ),
    ]
}

#[test]
fn upstream_case_patches_only_the_matching_pending_pod_then_remembers_it() {
    let mut harness = Harness::new();
    let profile = upstream_profile();
    let pods = upstream_pods();
    let plan = harness.plan(&profile, &pods);
    assert_eq!(plan.patches.len(), 1, "{plan:?}");
    assert_eq!(plan.summary.desired, 1);
    let after = harness.apply(&plan, &pods);
    let patched = &after["test-pod-1"];
    assert_eq!(
        patched["metadata"]["labels"],
        json!({
            "koordinator-colocation-pod": "true",
            "testLabelA": "valueA",
            "test-patch-label": "patch-a",
            "koordinator.sh/qosClass": "BE",
            "koordinator.sh/priority": "1111"
        })
    );
    assert_eq!(
        patched["metadata"]["annotations"],
        json!({"testAnnotationA": "valueA", "test-patch-annotation": "patch-b"})
    );
    // Resources stay as created (the API server refuses changing them).
    assert_eq!(
        patched["spec"],
        serde_json::to_value(pods[0].spec.clone()).unwrap()
    );

    // Same profile version again: remembered, nothing to send.
    let again = harness.plan(&profile, &pods);
    assert!(again.patches.is_empty());
    assert_eq!(again.summary.cached, 1);

    // A new profile version applies again (upstream adds a scheduler-name label).
    let mut changed = profile.clone();
    changed.metadata.resource_version = Some("2".into());
    changed
        .spec
        .labels
        .get_or_insert_with(Default::default)
        .insert(
            "koordinator.sh/scheduler-name".into(),
            "koordinator-scheduler".into(),
        );
    let plan = harness.plan(&changed, &pods);
    assert_eq!(plan.patches.len(), 1);
    let after = harness.apply(&plan, &pods);
    assert_eq!(
        after["test-pod-1"]["metadata"]["labels"]["koordinator.sh/scheduler-name"],
        "koordinator-scheduler"
    );

    // Once the remembered entry expires, the pod is handled again.
    harness.now += Duration::from_secs(301);
    let expired = harness.plan(&changed, &pods);
    assert_eq!(expired.patches.len(), 1);
}

#[test]
fn a_pod_that_already_carries_the_profile_is_remembered_without_a_patch() {
    let mut harness = Harness::new();
    let profile = upstream_profile();
    let pods = upstream_pods();
    let plan = harness.plan(&profile, &pods);
    let after = harness.apply(&plan, &pods);
    let updated: Pod = serde_json::from_value(after["test-pod-1"].clone()).unwrap();
    let mut fresh = Harness::new();
    let plan = fresh.plan(&profile, &[Arc::new(updated)]);
    assert!(plan.patches.is_empty());
    assert_eq!(plan.summary.unchanged, 1);
    assert_eq!(fresh.memory.len(), 1);
}

#[test]
fn only_controller_managed_profiles_unless_reconcile_by_default() {
    let mut unmanaged = upstream_profile();
    unmanaged.metadata.labels = None;
    let pods = upstream_pods();
    let mut harness = Harness::new();
    assert!(harness.plan(&unmanaged, &pods).patches.is_empty());
    harness.reconcile_by_default = true;
    assert_eq!(harness.plan(&unmanaged, &pods).patches.len(), 1);

    let mut terminating = upstream_profile();
    terminating.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
    assert!(Harness::new().plan(&terminating, &pods).patches.is_empty());
}

#[test]
fn no_selector_matches_nothing_and_bound_pods_are_left_alone() {
    let mut no_selector = upstream_profile();
    no_selector.spec.selector = None;
    assert!(
        Harness::new()
            .plan(&no_selector, &upstream_pods())
            .patches
            .is_empty()
    );

    let bound = vec![pod(
        "bound",
        json!({"koordinator-colocation-pod": "true"}),
        "Pending",
        Some("node-a"),
    )];
    assert!(
        Harness::new()
            .plan(&upstream_profile(), &bound)
            .patches
            .is_empty()
    );
}

#[test]
fn namespace_selector_needs_a_known_matching_namespace() {
    let pods = upstream_pods();
    let with_ns = |selector: Value| {
        let mut p = upstream_profile();
        p.spec.namespace_selector = Some(serde_json::from_value(selector).unwrap());
        p
    };
    let mut harness = Harness::new();
    let matching = with_ns(json!({"matchLabels": {"team": "batch"}}));
    assert_eq!(harness.plan(&matching, &pods).patches.len(), 1);
    let other = with_ns(json!({"matchLabels": {"team": "web"}}));
    assert!(Harness::new().plan(&other, &pods).patches.is_empty());
    let mut unknown = Harness::new();
    unknown.namespaces.clear();
    assert!(unknown.plan(&matching, &pods).patches.is_empty());
    // An empty selector matches every namespace, even one the cache lacks.
    assert_eq!(unknown.plan(&with_ns(json!({})), &pods).patches.len(), 1);
}

#[test]
fn probability_skips_pods_per_roll() {
    let pods = upstream_pods();
    let with_probability = |value: Value| {
        let mut p = upstream_profile();
        p.spec.probability = Some(serde_json::from_value(value).unwrap());
        p
    };
    let never = with_probability(json!(0));
    let plan = Harness::new().plan(&never, &pods);
    assert_eq!((plan.patches.len(), plan.summary.skipped), (0, 1));

    let half = with_probability(json!("50%"));
    let plan = Harness::new().plan_with_roll(&half, &pods, 60).unwrap();
    assert_eq!((plan.patches.len(), plan.summary.skipped), (0, 1));
    let plan = Harness::new().plan_with_roll(&half, &pods, 10).unwrap();
    assert_eq!(plan.patches.len(), 1);

    let broken = with_probability(json!("half"));
    assert!(matches!(
        Harness::new().plan_with_roll(&broken, &pods, 0),
        Err(PlanError::Profile(ProfileError::Probability { .. }))
    ));
}

#[test]
fn rate_limit_leaves_the_rest_for_a_later_pass() {
    let pods: Vec<Arc<Pod>> = (0..3)
        .map(|i| {
            pod(
                &format!("p{i}"),
                json!({"koordinator-colocation-pod": "true"}),
                "Pending",
                None,
            )
        })
        .collect();
    let mut harness = Harness::new();
    harness.bucket = TokenBucket::new(1.0, 1, harness.now);
    let profile = upstream_profile();
    let plan = harness.plan(&profile, &pods);
    assert_eq!(plan.patches.len(), 1);
    assert_eq!(plan.summary.rate_limited, 2);
    harness.apply(&plan, &pods);
    harness.now += Duration::from_secs(1);
    let plan = harness.plan(&profile, &pods);
    assert_eq!((plan.patches.len(), plan.summary.rate_limited), (1, 1));
    assert_eq!(plan.summary.cached, 1);
}

#[test]
fn invalid_selector_is_an_error_naming_the_profile() {
    let mut broken = upstream_profile();
    broken.spec.selector = Some(
        serde_json::from_value(json!({"matchExpressions": [{"key": "a", "operator": "Sideways"}]}))
            .unwrap(),
    );
    let result = Harness::new().plan_with_roll(&broken, &upstream_pods(), 0);
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("test-profile") && message.contains("selector"),
        "{message}"
    );
}

#[test]
fn token_bucket_and_memory_follow_the_clock() {
    let start = Instant::now();
    let mut bucket = TokenBucket::new(2.0, 2, start);
    assert!(bucket.allow(start) && bucket.allow(start));
    assert!(!bucket.allow(start));
    assert!(bucket.allow(start + Duration::from_millis(500)));
    let mut none = TokenBucket::new(10.0, 0, start);
    assert!(!none.allow(start + Duration::from_secs(5)));

    let mut memory = UpdateMemory::new(Duration::from_secs(10), Duration::from_secs(60), start);
    memory.remember("a".into(), start);
    assert!(memory.contains("a", start + Duration::from_secs(9)));
    assert!(!memory.contains("a", start + Duration::from_secs(10)));
    memory.prune(start + Duration::from_secs(30));
    assert_eq!(memory.len(), 1, "pruned only every prune_every");
    memory.prune(start + Duration::from_secs(61));
    assert!(memory.is_empty());
}

#[test]
fn flags_take_upstream_names_defaults_and_refuse_nonsense() {
    let parse = |args: &[&str]| {
        let mut argv = vec!["koord-manager"];
        argv.extend_from_slice(args);
        crate::cli::parse_args(argv)
    };
    let defaults = parse(&[]).unwrap().args.colocation_profile;
    assert!(!defaults.reconcile_by_default);
    assert_eq!(defaults.reconcile_interval, Duration::from_secs(30));
    assert_eq!(defaults.force_update_pod_duration, Duration::from_secs(300));
    assert_eq!(defaults.expire_pod_cache_duration, Duration::from_secs(600));
    assert_eq!(defaults.update_pod_qps, 10.0);
    assert_eq!(defaults.update_pod_qps_burst, 100);

    let set = parse(&[
        "-colocation-profile-reconcile-by-default",
        "-colocation-profile-reconcile-interval",
        "1m",
        "--colocation-profile-update-pod-qps=2.5",
        "--colocation-profile-update-pod-qps-burst",
        "7",
    ])
    .unwrap()
    .args
    .colocation_profile;
    assert!(set.reconcile_by_default);
    assert_eq!(set.reconcile_interval, Duration::from_secs(60));
    assert_eq!((set.update_pod_qps, set.update_pod_qps_burst), (2.5, 7));

    assert!(parse(&["--colocation-profile-reconcile-interval=0"]).is_err());
    assert!(parse(&["--colocation-profile-update-pod-qps=-1"]).is_err());
    assert!(parse(&["--colocation-profile-update-pod-qps=NaN"]).is_err());
}

//! Table tests; the cases and expected messages are upstream's
//! (`quotaevaluate/evaluator_test.go`, `pod/validating/evaluate_quota_test.go`).

use super::*;
use serde_json::{Value, json};

fn pod(namespace: &str, labels: Value, requests: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "pod1", "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    }))
    .unwrap()
}

fn labelled(quota: &str, requests: Value) -> Pod {
    pod(
        "ns1",
        json!({"quota.scheduling.koordinator.sh/name": quota}),
        requests,
    )
}

/// A quota in `namespace` with max and optional child-request / admission.
fn quota(
    namespace: &str,
    name: &str,
    max: Value,
    child_request: Option<Value>,
    admission: Option<Value>,
) -> ElasticQuota {
    let mut annotations = serde_json::Map::new();
    if let Some(used) = child_request {
        annotations.insert(ANNOTATION_CHILD_REQUEST.into(), json!(used.to_string()));
    }
    if let Some(admission) = admission {
        annotations.insert(ANNOTATION_ADMISSION.into(), json!(admission.to_string()));
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"max": max}
    }))
    .unwrap()
}

fn amounts(list: Value) -> Amounts {
    let list: BTreeMap<String, Quantity> = serde_json::from_value(list).unwrap();
    amounts_of(&list).unwrap()
}

fn now() -> SystemTime {
    SystemTime::now()
}

fn attributes(operation: Operation, pod: Pod) -> Attributes {
    Attributes {
        quota_namespace: "ns".into(),
        quota_name: "test".into(),
        operation,
        pod,
    }
}

#[test]
fn check_request_table() {
    // name, used, admission, names, operation, pod requests, error part, used after, delta after
    struct Case {
        name: &'static str,
        used: Value,
        admission: Value,
        names: &'static [&'static str],
        operation: Operation,
        requests: Value,
        error: Option<&'static str>,
        used_after: Value,
        delta_after: Value,
    }
    let cases = [
        Case {
            name: "successful request updates used and delta",
            used: json!({}),
            admission: json!({"cpu": "20", "memory": "60Gi"}),
            names: &["cpu", "memory"],
            operation: Operation::Create,
            requests: json!({"cpu": "2", "memory": "4Gi"}),
            error: None,
            used_after: json!({"cpu": "2", "memory": "4Gi"}),
            delta_after: json!({"cpu": "2", "memory": "4Gi"}),
        },
        Case {
            name: "exceeded quota returns error",
            used: json!({"cpu": "3"}),
            admission: json!({"cpu": "4"}),
            names: &["cpu"],
            operation: Operation::Create,
            requests: json!({"cpu": "2"}),
            error: Some("exceeded quota"),
            used_after: json!({"cpu": "3"}),
            delta_after: json!({}),
        },
        Case {
            name: "update operation is handled and counts resources",
            used: json!({}),
            admission: json!({"cpu": "20"}),
            names: &["cpu"],
            operation: Operation::Update,
            requests: json!({"cpu": "2"}),
            error: None,
            used_after: json!({"cpu": "2"}),
            delta_after: json!({"cpu": "2"}),
        },
        Case {
            name: "update operation exceeds quota returns error",
            used: json!({"cpu": "3"}),
            admission: json!({"cpu": "4"}),
            names: &["cpu"],
            operation: Operation::Update,
            requests: json!({"cpu": "2"}),
            error: Some("exceeded quota"),
            used_after: json!({"cpu": "3"}),
            delta_after: json!({}),
        },
        Case {
            name: "delete operation is no-op",
            used: json!({}),
            admission: json!({"cpu": "20"}),
            names: &["cpu"],
            operation: Operation::Delete,
            requests: json!({"cpu": "2"}),
            error: None,
            used_after: json!({}),
            delta_after: json!({}),
        },
        Case {
            name: "only quota-managed resources are counted",
            used: json!({}),
            admission: json!({"nvidia.com/gpu": "4"}),
            names: &["nvidia.com/gpu"],
            operation: Operation::Create,
            requests: json!({"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}),
            error: None,
            used_after: json!({"nvidia.com/gpu": "1"}),
            delta_after: json!({"nvidia.com/gpu": "1"}),
        },
    ];
    for case in cases {
        let mut context = BatchContext {
            names: case.names.iter().map(|n| n.to_string()).collect(),
            used: amounts(case.used),
            admission: amounts(case.admission),
            ..BatchContext::default()
        };
        let pod = pod("ns", json!({}), case.requests);
        let result = context.check_request(&attributes(case.operation, pod), now());
        match case.error {
            Some(part) => {
                let err = result.unwrap_err();
                assert!(err.to_string().contains(part), "{}: {err}", case.name);
            }
            None => assert!(result.is_ok(), "{}: {result:?}", case.name),
        }
        assert_eq!(context.used, amounts(case.used_after), "{}", case.name);
        assert_eq!(context.delta, amounts(case.delta_after), "{}", case.name);
    }
}

/// Loads `quota`, checks one create of `pod` against it: the denial, or the
/// child-request the batch would write.
fn evaluate_one(quota: &ElasticQuota, pod: Pod) -> Result<String, String> {
    let mut context = BatchContext::default();
    context.load(quota);
    let attributes = Attributes {
        quota_namespace: quota.metadata.namespace.clone().unwrap(),
        quota_name: quota.metadata.name.clone().unwrap(),
        operation: Operation::Create,
        pod,
    };
    context
        .check_request(&attributes, now())
        .map_err(|e| e.to_string())?;
    Ok(context.used_json())
}

#[test]
fn evaluate_table() {
    let q = |max, used, admission| quota("ns1", "test1", max, used, admission);
    let cases: [(&str, ElasticQuota, Value, Result<Value, &str>); 5] = [
        (
            "normal case",
            q(json!({"cpu": "20", "memory": "60Gi"}), None, None),
            json!({"cpu": "2", "memory": "4Gi"}),
            Ok(json!({"cpu": "2", "memory": "4Gi"})),
        ),
        (
            "cpu exceed",
            q(
                json!({"cpu": "20", "memory": "60Gi"}),
                Some(json!({"cpu": "19", "memory": "50Gi"})),
                None,
            ),
            json!({"cpu": "2", "memory": "4Gi"}),
            Err("exceeded quota: ns1/test1, requested: cpu=2, used: cpu=19, limited: cpu=20"),
        ),
        (
            "admission allow",
            q(
                json!({"cpu": "20", "memory": "60Gi"}),
                Some(json!({"cpu": "19", "memory": "50Gi"})),
                Some(json!({"cpu": "30", "memory": "60Gi"})),
            ),
            json!({"cpu": "2", "memory": "4Gi"}),
            Ok(json!({"cpu": "21", "memory": "54Gi"})),
        ),
        (
            "gpu normal case",
            q(json!({"nvidia.com/gpu": "2"}), None, None),
            json!({"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "2"}),
            Ok(json!({"nvidia.com/gpu": "2"})),
        ),
        (
            "gpu exceed",
            q(
                json!({"nvidia.com/gpu": "2"}),
                Some(json!({"nvidia.com/gpu": "2"})),
                None,
            ),
            json!({"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "2"}),
            Err(
                "exceeded quota: ns1/test1, requested: nvidia.com/gpu=2, used: nvidia.com/gpu=2, limited: nvidia.com/gpu=2",
            ),
        ),
    ];
    for (name, quota, requests, expected) in cases {
        let got = evaluate_one(&quota, pod("ns1", json!({}), requests));
        match expected {
            Ok(used) => assert_eq!(
                serde_json::from_str::<Value>(&got.unwrap()).unwrap(),
                used,
                "{name}"
            ),
            Err(message) => assert_eq!(got.unwrap_err(), message, "{name}"),
        }
    }
}

#[test]
fn sequential_pods_accumulate() {
    // Upstream TestEvaluateSequential "multiple pods accumulate usage".
    let quota = quota(
        "ns1",
        "test1",
        json!({"cpu": "20", "memory": "60Gi"}),
        None,
        None,
    );
    let mut context = BatchContext::default();
    context.load(&quota);
    for _ in 0..2 {
        let attributes = Attributes {
            quota_namespace: "ns1".into(),
            quota_name: "test1".into(),
            operation: Operation::Create,
            pod: pod("ns1", json!({}), json!({"cpu": "5", "memory": "10Gi"})),
        };
        assert_eq!(context.check_request(&attributes, now()), Ok(true));
    }
    assert_eq!(context.used_json(), r#"{"cpu":"10","memory":"20Gi"}"#);
}

const ALL_ON: EvaluationGates = EvaluationGates {
    enabled: true,
    on_update: false,
    transform_pod: false,
    replace_resources_transformer: false,
    disable_default_quota: false,
};

/// The handler's whole decision for one request against `quotas`: skip
/// (`Ok(None)`), the child-request written (`Ok(Some)`), or the denial.
fn admission(
    operation: Operation,
    new_pod: &Pod,
    old_pod: Option<&Pod>,
    quotas: &[&ElasticQuota],
    gates: EvaluationGates,
) -> Result<Option<Value>, String> {
    let Some(attributes) = prepare_evaluation(operation, new_pod, old_pod, quotas, gates)
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let quota = find_quota(quotas, &attributes.quota_name).map_err(|e| e.to_string())?;
    let mut context = BatchContext::default();
    context.load(quota);
    let changed = context
        .check_request(&attributes, now())
        .map_err(|e| e.to_string())?;
    Ok(changed.then(|| serde_json::from_str(&context.used_json()).unwrap()))
}

#[test]
fn evaluate_quota_table() {
    let q = |name, max, used, admission| quota("kube-system", name, max, used, admission);
    let two_cpu = json!({"cpu": "2", "memory": "4Gi"});
    let four_eight = json!({"cpu": "4", "memory": "8Gi"});
    // name, quota, pod, expected: Ok(child-request written, None = unchanged) or Err(message)
    type Case = (
        &'static str,
        ElasticQuota,
        Pod,
        Result<Option<Value>, &'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "normal case 1",
            q("quota1", four_eight.clone(), None, None),
            labelled("quota1", two_cpu.clone()),
            Ok(Some(json!({"cpu": "2", "memory": "4Gi"}))),
        ),
        (
            "normal case 2",
            q(
                "quota1",
                four_eight.clone(),
                Some(json!({"cpu": "2", "memory": "2Gi"})),
                None,
            ),
            labelled("quota1", two_cpu.clone()),
            Ok(Some(json!({"cpu": "4", "memory": "6Gi"}))),
        ),
        (
            "cpu exceeded max",
            q(
                "quota1",
                four_eight.clone(),
                Some(json!({"cpu": "4", "memory": "2Gi"})),
                None,
            ),
            labelled("quota1", two_cpu.clone()),
            Err(
                "exceeded quota: kube-system/quota1, requested: cpu=2, used: cpu=4, limited: cpu=4",
            ),
        ),
        (
            "cpu and memory exceeded max",
            q("quota1", four_eight.clone(), Some(four_eight.clone()), None),
            labelled("quota1", two_cpu.clone()),
            Err(
                "exceeded quota: kube-system/quota1, requested: cpu=2,memory=4Gi, used: cpu=4,memory=8Gi, limited: cpu=4,memory=8Gi",
            ),
        ),
        (
            "cpu exceeded max, but not admission",
            q(
                "quota1",
                four_eight.clone(),
                Some(json!({"cpu": "4", "memory": "2Gi"})),
                Some(json!({"cpu": "8", "memory": "16Gi"})),
            ),
            labelled("quota1", two_cpu.clone()),
            Ok(Some(json!({"cpu": "6", "memory": "6Gi"}))),
        ),
        (
            "cpu and memory exceeded max, but not admission",
            q(
                "quota1",
                four_eight.clone(),
                Some(four_eight.clone()),
                Some(json!({"cpu": "8", "memory": "16Gi"})),
            ),
            labelled("quota1", two_cpu.clone()),
            Ok(Some(json!({"cpu": "6", "memory": "12Gi"}))),
        ),
        (
            "quota not found",
            q(
                "quota1",
                four_eight.clone(),
                Some(json!({"cpu": "2", "memory": "2Gi"})),
                None,
            ),
            labelled("quota2", two_cpu.clone()),
            Err("elastic quota quota2 not found"),
        ),
        (
            "quota has batch cpu, pod not",
            q(
                "quota1",
                json!({"kubernetes.io/batch-cpu": "4", "kubernetes.io/batch-memory": "8Gi"}),
                Some(json!({"kubernetes.io/batch-cpu": "4", "kubernetes.io/batch-memory": "8Gi"})),
                None,
            ),
            labelled("quota1", two_cpu.clone()),
            Ok(None),
        ),
        (
            "quota has batch cpu, pod has and exceeded",
            q(
                "quota1",
                json!({"kubernetes.io/batch-cpu": "4", "kubernetes.io/batch-memory": "8Gi"}),
                Some(json!({"kubernetes.io/batch-cpu": "4", "kubernetes.io/batch-memory": "8Gi"})),
                None,
            ),
            labelled(
                "quota1",
                json!({"kubernetes.io/batch-cpu": "1", "kubernetes.io/batch-memory": "2Gi"}),
            ),
            Err(
                "exceeded quota: kube-system/quota1, requested: kubernetes.io/batch-cpu=1,kubernetes.io/batch-memory=2Gi, used: kubernetes.io/batch-cpu=4,kubernetes.io/batch-memory=8Gi, limited: kubernetes.io/batch-cpu=4,kubernetes.io/batch-memory=8Gi",
            ),
        ),
        (
            "admission not set, use max by default",
            q("quota1", json!({"cpu": "1", "memory": "2Gi"}), None, None),
            labelled("quota1", two_cpu.clone()),
            Err(
                "exceeded quota: kube-system/quota1, requested: cpu=2,memory=4Gi, used: , limited: cpu=1,memory=2Gi",
            ),
        ),
        (
            "admission set empty, use max by default",
            q(
                "quota1",
                json!({"cpu": "1", "memory": "2Gi"}),
                None,
                Some(json!({})),
            ),
            labelled("quota1", two_cpu.clone()),
            Err(
                "exceeded quota: kube-system/quota1, requested: cpu=2,memory=4Gi, used: , limited: cpu=1,memory=2Gi",
            ),
        ),
        (
            "admission set zero explicitly",
            q(
                "quota1",
                four_eight.clone(),
                None,
                Some(json!({"cpu": "0", "memory": "0Gi"})),
            ),
            labelled("quota1", two_cpu.clone()),
            Err(
                "exceeded quota: kube-system/quota1, requested: cpu=2,memory=4Gi, used: , limited: cpu=0,memory=0",
            ),
        ),
        (
            "admission set zero for non-related resource",
            q(
                "quota1",
                four_eight.clone(),
                None,
                Some(json!({"kubernetes.io/batch-cpu": "0"})),
            ),
            labelled("quota1", two_cpu.clone()),
            Ok(Some(json!({"cpu": "2", "memory": "4Gi"}))),
        ),
    ];
    for (name, quota, pod, expected) in cases {
        let got = admission(Operation::Create, &pod, None, &[&quota], ALL_ON);
        match expected {
            Ok(used) => assert_eq!(got, Ok(used), "{name}"),
            Err(message) => assert_eq!(got, Err(message.to_owned()), "{name}"),
        }
    }
}

#[test]
fn updates_are_evaluated_only_with_the_gate_and_a_changed_quota() {
    let quota1 = quota(
        "kube-system",
        "quota1",
        json!({"cpu": "4", "memory": "8Gi"}),
        None,
        None,
    );
    let two_cpu = json!({"cpu": "2", "memory": "4Gi"});
    let old = labelled("quota1", two_cpu.clone());
    let moved = labelled("quota2", two_cpu.clone());
    // "update with feature gate disabled, skip"
    assert_eq!(
        admission(Operation::Update, &moved, Some(&old), &[&quota1], ALL_ON),
        Ok(None)
    );
    let on_update = EvaluationGates {
        on_update: true,
        ..ALL_ON
    };
    // "update with quota label unchanged, skip"
    assert_eq!(
        admission(Operation::Update, &old, Some(&old), &[&quota1], on_update),
        Ok(None)
    );
    // "update quota label to a quota with capacity, allowed"
    let quota2 = quota(
        "kube-system",
        "quota2",
        json!({"cpu": "4", "memory": "8Gi"}),
        None,
        None,
    );
    assert_eq!(
        admission(Operation::Update, &moved, Some(&old), &[&quota2], on_update),
        Ok(Some(json!({"cpu": "2", "memory": "4Gi"})))
    );
    // "update quota label to a full quota, denied"
    let full = quota(
        "kube-system",
        "quota2",
        json!({"cpu": "4", "memory": "8Gi"}),
        Some(json!({"cpu": "4", "memory": "8Gi"})),
        None,
    );
    assert_eq!(
        admission(Operation::Update, &moved, Some(&old), &[&full], on_update),
        Err("exceeded quota: kube-system/quota2, requested: cpu=2,memory=4Gi, used: cpu=4,memory=8Gi, limited: cpu=4,memory=8Gi".to_owned())
    );
    // Deletes are never evaluated; nothing is evaluated with the gate off.
    assert_eq!(
        admission(Operation::Delete, &moved, Some(&old), &[&full], on_update),
        Ok(None)
    );
    assert_eq!(
        admission(
            Operation::Create,
            &moved,
            None,
            &[&full],
            EvaluationGates::default()
        ),
        Ok(None)
    );
}

#[test]
fn replace_resources_apply_when_both_gates_are_on() {
    // "pod with replace-resources annotation, should replace or erase specified resources"
    let quota = quota(
        "kube-system",
        "quota1",
        json!({"memory": "0Gi", "example.io/cpu": "4k", "example.io/gpu": "3"}),
        None,
        None,
    );
    let mut pod = labelled(
        "quota1",
        json!({"cpu": "2", "memory": "4Gi", "example.io/gpu": "1"}),
    );
    pod.metadata.annotations = Some(
        [(
            "pod.koordinator.sh/replace-resources".to_owned(),
            "cpu:example.io/cpu,memory:".to_owned(),
        )]
        .into(),
    );
    let both = EvaluationGates {
        transform_pod: true,
        replace_resources_transformer: true,
        ..ALL_ON
    };
    assert_eq!(
        admission(Operation::Create, &pod, None, &[&quota], both),
        Ok(Some(json!({"example.io/cpu": "2k", "example.io/gpu": "1"})))
    );
    // One gate alone leaves the pod as it is: memory 4Gi against max 0.
    let one = EvaluationGates {
        transform_pod: true,
        ..ALL_ON
    };
    assert!(
        admission(Operation::Create, &pod, None, &[&quota], one)
            .unwrap_err()
            .starts_with("exceeded quota: kube-system/quota1, requested: memory=4Gi")
    );
}

#[test]
fn quota_names_follow_get_quota_name_and_skip_the_built_in_quotas() {
    let by_namespace = quota("team-a", "team-a", json!({"cpu": "1"}), None, None);
    let pod_a = pod("team-a", json!({}), json!({"cpu": "2"}));
    assert!(
        admission(Operation::Create, &pod_a, None, &[&by_namespace], ALL_ON)
            .unwrap_err()
            .starts_with("exceeded quota: team-a/team-a, requested: cpu=2")
    );
    // DisableDefaultQuota: only the label names the quota.
    let disabled = EvaluationGates {
        disable_default_quota: true,
        ..ALL_ON
    };
    assert_eq!(
        admission(Operation::Create, &pod_a, None, &[&by_namespace], disabled),
        Ok(None)
    );
    // Unlabelled and unclaimed: the default quota, not evaluated.
    let elsewhere = pod("other", json!({}), json!({"cpu": "2"}));
    assert_eq!(
        admission(
            Operation::Create,
            &elsewhere,
            None,
            &[&by_namespace],
            ALL_ON
        ),
        Ok(None)
    );
    for built_in in [DEFAULT_QUOTA_NAME, SYSTEM_QUOTA_NAME, ROOT_QUOTA_NAME] {
        assert_eq!(
            quota_to_evaluate(Operation::Create, built_in, None, false),
            None
        );
    }
    assert_eq!(quota_to_evaluate(Operation::Create, "", None, false), None);
    // Two quotas of one name in different namespaces.
    let twin = quota("team-b", "team-a", json!({"cpu": "1"}), None, None);
    assert_eq!(
        admission(
            Operation::Create,
            &labelled("team-a", json!({"cpu": "1"})),
            None,
            &[&by_namespace, &twin],
            ALL_ON
        ),
        Err("more than one elastic quota team-a found".to_owned())
    );
}

#[test]
fn unreadable_annotations_deny_every_pod_of_the_quota() {
    let mut broken = quota("ns", "q", json!({"cpu": "4"}), None, None);
    broken.metadata.annotations =
        Some([(ANNOTATION_CHILD_REQUEST.to_owned(), "{not json".to_owned())].into());
    let err = evaluate_one(&broken, pod("ns", json!({}), json!({"cpu": "1"}))).unwrap_err();
    assert!(
        err.starts_with("annotation quota.scheduling.koordinator.sh/child-request: "),
        "{err}"
    );
    broken.metadata.annotations = Some(
        [(
            ANNOTATION_ADMISSION.to_owned(),
            r#"{"cpu":"lots"}"#.to_owned(),
        )]
        .into(),
    );
    let err = evaluate_one(&broken, pod("ns", json!({}), json!({"cpu": "1"}))).unwrap_err();
    assert!(
        err.contains("quota.scheduling.koordinator.sh/admission"),
        "{err}"
    );
    // A quota whose max names no pod resource is not evaluated.
    let other = quota("ns", "q", json!({"example.com/widget": "1"}), None, None);
    let mut context = BatchContext::default();
    context.load(&other);
    let attributes = Attributes {
        quota_namespace: "ns".into(),
        quota_name: "q".into(),
        operation: Operation::Create,
        pod: pod("ns", json!({}), json!({"example.com/widget": "5"})),
    };
    assert_eq!(context.check_request(&attributes, now()), Ok(false));
}

#[test]
fn reapplying_the_delta_needs_it_to_fit_the_fresh_use() {
    let first = quota(
        "ns",
        "test",
        json!({"cpu": "20"}),
        Some(json!({"cpu": "10"})),
        None,
    );
    let mut context = BatchContext::default();
    context.load(&first);
    for cpu in ["2", "3"] {
        let attributes = attributes(Operation::Create, pod("ns", json!({}), json!({"cpu": cpu})));
        assert_eq!(context.check_request(&attributes, now()), Ok(true));
    }
    // Fresh read: 12 in use; 12 + 5 fits.
    context.load(&quota(
        "ns",
        "test",
        json!({"cpu": "20"}),
        Some(json!({"cpu": "12"})),
        None,
    ));
    assert!(context.reapply_delta());
    assert_eq!(context.used_json(), r#"{"cpu":"17"}"#);
    // Fresh read: 18 in use; 18 + 5 does not: the delta is dropped.
    context.load(&quota(
        "ns",
        "test",
        json!({"cpu": "20"}),
        Some(json!({"cpu": "18"})),
        None,
    ));
    assert!(!context.reapply_delta());
    assert!(context.delta.is_empty());
    // Max names changed: the delta is dropped at load.
    let mut context2 = BatchContext::default();
    context2.load(&first);
    let attributes = attributes(Operation::Create, pod("ns", json!({}), json!({"cpu": "1"})));
    context2.check_request(&attributes, now()).unwrap();
    context2.load(&quota(
        "ns",
        "test",
        json!({"cpu": "20", "memory": "1Gi"}),
        None,
        None,
    ));
    assert!(!context2.reapply_delta());
}

#[test]
fn retries_for_batch_table() {
    let settings = UpdateSettings {
        max_retries: 10,
        ..UpdateSettings::default()
    };
    for (name, changed, want) in [
        ("empty batch falls back to min", 0, MIN_UPDATE_RETRIES),
        (
            "single pod equals legacy hardcoded value",
            1,
            MIN_UPDATE_RETRIES,
        ),
        ("two pods earn one extra retry", 2, MIN_UPDATE_RETRIES + 1),
        (
            "three pods still in log2=1 bucket",
            3,
            MIN_UPDATE_RETRIES + 1,
        ),
        (
            "four pods earn two extra retries",
            4,
            MIN_UPDATE_RETRIES + 2,
        ),
        (
            "eight pods earn three extra retries",
            8,
            MIN_UPDATE_RETRIES + 3,
        ),
        ("capped at the maximum", 1 << 20, 10),
    ] {
        assert_eq!(settings.retries_for_batch(changed), want, "{name}");
    }
    // "respects QuotaUpdateMaxRetries override"
    let five = UpdateSettings {
        max_retries: 5,
        ..UpdateSettings::default()
    };
    assert_eq!(five.retries_for_batch(1 << 10), 5);
    assert_eq!(five.retries_for_batch(1), MIN_UPDATE_RETRIES);
    // "max lower than min collapses to min"
    let one = UpdateSettings {
        max_retries: 1,
        ..UpdateSettings::default()
    };
    assert_eq!(one.retries_for_batch(1 << 10), MIN_UPDATE_RETRIES);
    assert_eq!(one.start_retries(), MIN_UPDATE_RETRIES);
}

#[test]
fn jitter_for_next_update_table() {
    let ms = Duration::from_millis;
    let jitter = ms(50);
    let cap = Duration::from_secs(1);
    // name, retry jitter, max total, spent, remaining retries, want
    for (name, retry, total, spent, remaining, want) in [
        ("happy path", jitter, cap, Duration::ZERO, 1, jitter),
        (
            "last attempt",
            jitter,
            cap,
            Duration::ZERO,
            0,
            Duration::ZERO,
        ),
        (
            "budget exhausted",
            jitter,
            cap,
            cap - jitter + Duration::from_nanos(1),
            5,
            Duration::ZERO,
        ),
        (
            "retry knob zero disables",
            Duration::ZERO,
            cap,
            Duration::ZERO,
            5,
            Duration::ZERO,
        ),
        (
            "total knob zero disables",
            jitter,
            Duration::ZERO,
            Duration::ZERO,
            5,
            Duration::ZERO,
        ),
        ("custom fits", ms(50), ms(75), Duration::ZERO, 5, ms(50)),
        (
            "custom overshoot",
            ms(50),
            ms(75),
            ms(50),
            5,
            Duration::ZERO,
        ),
    ] {
        let settings = UpdateSettings {
            retry_jitter: retry,
            max_total_jitter: total,
            ..UpdateSettings::default()
        };
        assert_eq!(
            settings.jitter_for_next_update(spent, remaining),
            want,
            "{name}"
        );
    }
    // Negative durations ("retry knob negative disables", "total knob negative disables").
    assert_eq!(parse_jitter_duration("-1ms"), Ok(Duration::ZERO));
    assert_eq!(parse_jitter_duration("-1s"), Ok(Duration::ZERO));
    assert_eq!(parse_jitter_duration("50ms"), Ok(ms(50)));
    assert!(parse_jitter_duration("soon").is_err());
}

#[test]
fn amounts_keep_their_format_through_sums() {
    let sum_of = |a: &str, b: &str| {
        Amount::parse(a)
            .unwrap()
            .plus(Amount::parse(b).unwrap())
            .unwrap()
            .canonical()
    };
    assert_eq!(sum_of("50Gi", "4Gi"), "54Gi");
    assert_eq!(sum_of("19", "2"), "21");
    assert_eq!(sum_of("500m", "1"), "1500m");
    // A zero takes the other's format.
    assert_eq!(sum_of("0", "2Gi"), "2Gi");
    assert_eq!(Amount::parse("0Gi").unwrap().canonical(), "0");
    assert_eq!(Amount::parse("2000").unwrap().canonical(), "2k");
    assert_eq!(Amount::parse("1536Mi").unwrap().canonical(), "1536Mi");
    assert_eq!(Amount::parse("1e3").unwrap().canonical(), "1e3");
    assert_eq!(Amount::parse("1500e-3").unwrap().canonical(), "1500e-3");
    assert_eq!(Amount::parse("12E6").unwrap().canonical(), "12e6");
    // A lone E is exa, decimal.
    assert_eq!(Amount::parse("1E").unwrap().canonical(), "1E");
    assert_eq!(
        pretty_print(&amounts(json!({"memory": "8Gi", "cpu": "4"}))),
        "cpu=4,memory=8Gi"
    );
    assert_eq!(pretty_print(&Amounts::new()), "");
}

#[test]
fn pod_usage_follows_kubernetes_pod_requests() {
    let usage = |spec: Value| {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
        amounts_json(&pod_usage(&pod, now()).unwrap())
    };
    let container =
        |name: &str, cpu: &str| json!({"name": name, "resources": {"requests": {"cpu": cpu}}});
    // Containers add up; an init container raises the total; overhead adds.
    assert_eq!(
        usage(json!({
            "containers": [container("a", "1"), container("b", "500m")],
            "initContainers": [container("i", "2")],
            "overhead": {"cpu": "100m"}
        })),
        r#"{"cpu":"2100m"}"#
    );
    // A sidecar (restartPolicy Always) runs beside what follows it.
    assert_eq!(
        usage(json!({
            "containers": [container("a", "1")],
            "initContainers": [
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                container("i", "1500m")
            ]
        })),
        r#"{"cpu":"2500m"}"#
    );
    // Pod-level requests replace the containers' cpu and memory.
    assert_eq!(
        usage(json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}],
            "resources": {"requests": {"cpu": "3"}}
        })),
        r#"{"cpu":"3","nvidia.com/gpu":"1"}"#
    );
    // Finished pods and pods past their deletion grace period use nothing.
    let mut done: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [container("a", "1")]},
        "status": {"phase": "Succeeded"}
    }))
    .unwrap();
    assert!(pod_usage(&done, now()).unwrap().is_empty());
    done.status = None;
    done.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::try_from(SystemTime::now() - Duration::from_secs(60))
            .unwrap(),
    ));
    done.metadata.deletion_grace_period_seconds = Some(30);
    assert!(pod_usage(&done, now()).unwrap().is_empty());
    done.metadata.deletion_grace_period_seconds = Some(300);
    assert_eq!(
        amounts_json(&pod_usage(&done, now()).unwrap()),
        r#"{"cpu":"1"}"#
    );
    // A request that is not a quantity is an error naming the field.
    let bad: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [container("a", "lots")]}
    }))
    .unwrap();
    assert!(
        pod_usage(&bad, now())
            .unwrap_err()
            .to_string()
            .starts_with("pod.spec.containers[0].resources.requests: Invalid value: cpu: ")
    );
}

#[test]
fn replace_resources_rename_erase_and_keep_existing_targets() {
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "annotations": {"pod.koordinator.sh/replace-resources": "cpu:example.io/cpu,memory:,nvidia.com/gpu:example.io/gpu"}},
        "spec": {
            "containers": [{"name": "a", "resources": {
                "requests": {"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": "1", "example.io/gpu": "2"},
                "limits": {"cpu": "2"}
            }}],
            "overhead": {"memory": "10Mi"}
        }
    }))
    .unwrap();
    assert!(transform_replace_resources(&mut pod));
    let spec = pod.spec.as_ref().unwrap();
    let resources = spec.containers[0].resources.as_ref().unwrap();
    let requests = serde_json::to_value(&resources.requests).unwrap();
    assert_eq!(
        requests,
        json!({"example.io/cpu": "1500", "nvidia.com/gpu": "1", "example.io/gpu": "2"})
    );
    assert_eq!(
        serde_json::to_value(&resources.limits).unwrap(),
        json!({"example.io/cpu": "2000"})
    );
    assert_eq!(serde_json::to_value(&spec.overhead).unwrap(), json!({}));
    let mut plain = labelled("q", json!({"cpu": "1"}));
    assert!(!transform_replace_resources(&mut plain));
}

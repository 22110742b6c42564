//! Cases from upstream's device-resource webhook tests (as facts), plus
//! the edges its tables leave out.

use serde_json::{Value, json};

use super::*;

fn pod_with(resources: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": resources}]}
    }))
    .unwrap_or_else(|e| panic!("test pod: {e}"))
}

fn both(list: Value) -> Value {
    json!({"requests": list.clone(), "limits": list})
}

fn resources_of(pod: &Pod) -> Value {
    let container = &pod.spec.as_ref().map(|s| s.containers[0].clone());
    serde_json::to_value(container.as_ref().and_then(|c| c.resources.clone())).unwrap_or_default()
}

#[test]
fn gpu_requests_get_a_share_count_and_whole_gpus_become_core_and_ratio() {
    let cases = [
        (
            "gpu memory ratio under 100",
            json!({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "4000", "koordinator.sh/gpu-memory-ratio": "50"}),
            json!({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "4000", "koordinator.sh/gpu-memory-ratio": "50", "koordinator.sh/gpu.shared": "1"}),
        ),
        (
            "gpu memory ratio a multiple of 100",
            json!({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "8000", "koordinator.sh/gpu-memory-ratio": "200"}),
            json!({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "8000", "koordinator.sh/gpu-memory-ratio": "200", "koordinator.sh/gpu.shared": "2"}),
        ),
        (
            "koordinator.sh/gpu",
            json!({"koordinator.sh/gpu": "200"}),
            json!({"koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory-ratio": "200", "koordinator.sh/gpu.shared": "2"}),
        ),
        (
            "gpu core alone, 300",
            json!({"koordinator.sh/gpu-core": "300"}),
            json!({"koordinator.sh/gpu-core": "300", "koordinator.sh/gpu.shared": "3"}),
        ),
        (
            "gpu memory alone",
            json!({"koordinator.sh/gpu-memory": "8Gi"}),
            json!({"koordinator.sh/gpu-memory": "8Gi", "koordinator.sh/gpu.shared": "1"}),
        ),
    ];
    for (name, given, want) in cases {
        let mut pod = pod_with(both(given));
        assert!(mutate_device_resources(&mut pod), "{name}");
        assert_eq!(resources_of(&pod), both(want), "{name}");
        // A second pass changes nothing: the share count is set.
        assert!(!mutate_device_resources(&mut pod), "{name}: second pass");
    }
}

#[test]
fn pods_without_gpus_and_unreadable_gpu_requests_are_left_alone() {
    let mut plain = pod_with(both(
        json!({"cpu": "1", "kubernetes.io/batch-memory": "4Gi"}),
    ));
    assert!(!mutate_device_resources(&mut plain));
    let mut no_spec: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap_or_default();
    assert!(!mutate_device_resources(&mut no_spec));
    // An unreadable koordinator.sh/gpu stays for the API server to refuse;
    // the container still gets its share count.
    let mut bad = pod_with(both(json!({"koordinator.sh/gpu": "lots"})));
    assert!(mutate_device_resources(&mut bad));
    assert_eq!(
        resources_of(&bad),
        both(json!({"koordinator.sh/gpu": "lots", "koordinator.sh/gpu.shared": "1"}))
    );
}

#[test]
fn validation_follows_upstreams_cases() {
    let forbidden = |d: &str| format!("pod.spec.containers[*].resources.requests: Forbidden: {d}");
    let invalid = |v: &str, d: &str| {
        format!("pod.spec.containers[*].resources.requests: Invalid value: \"{v}\": {d}")
    };
    let cases: Vec<(&str, Value, Vec<String>)> = vec![
        (
            "gpu is a percentage",
            json!({"koordinator.sh/gpu": "200"}),
            vec![],
        ),
        ("gpu under 100", json!({"koordinator.sh/gpu": "70"}), vec![]),
        (
            "gpu over 100, not whole",
            json!({"koordinator.sh/gpu": "150"}),
            vec![invalid(
                "150",
                "the requested GPU must be percentage of 100",
            )],
        ),
        (
            "gpu zero",
            json!({"koordinator.sh/gpu": "0"}),
            vec![invalid("0", "the requested GPU must be greater than zero")],
        ),
        (
            "gpu and share together",
            json!({"koordinator.sh/gpu": "100", "koordinator.sh/gpu.shared": "1"}),
            vec![forbidden(
                "Forbidden declare GPU and GPU share at same time",
            )],
        ),
        (
            "memory and ratio together",
            json!({"koordinator.sh/gpu-memory": "4000", "koordinator.sh/gpu-memory-ratio": "100", "koordinator.sh/gpu.shared": "1"}),
            vec![forbidden(
                "declare GPU memory and GPU memory ratio at same time",
            )],
        ),
        (
            "neither memory nor ratio",
            json!({"koordinator.sh/gpu.shared": "2"}),
            vec![forbidden("GPU memory and GPU memory ratio all is zero")],
        ),
        (
            "core not a multiple of shared",
            json!({"koordinator.sh/gpu-core": "101", "koordinator.sh/gpu-memory-ratio": "100", "koordinator.sh/gpu.shared": "2"}),
            vec![invalid(
                "101",
                "the requested gpuCore must multiple of shared",
            )],
        ),
        (
            "ratio not a multiple of shared",
            json!({"koordinator.sh/gpu-memory-ratio": "101", "koordinator.sh/gpu.shared": "2"}),
            vec![invalid(
                "101",
                "the requested gpuMemoryRatio must multiple of shared",
            )],
        ),
        (
            "shared Huawei NPU",
            json!({"huawei.com/npu-core": "8", "koordinator.sh/gpu.shared": "1"}),
            vec![],
        ),
        (
            "unreadable share count",
            json!({"koordinator.sh/gpu-memory-ratio": "100", "koordinator.sh/gpu.shared": "x"}),
            vec![invalid(
                "x",
                "koordinator.sh/gpu.shared is not a valid quantity",
            )],
        ),
        ("no GPU", json!({"cpu": "2"}), vec![]),
    ];
    for (name, requests, want) in cases {
        let pod = pod_with(both(requests));
        assert_eq!(validate_device_resources(&pod), want, "{name}");
    }
}

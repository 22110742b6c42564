#![allow(clippy::unwrap_used)]
//! Stage computation, registration parsing, request merge and store rebuild.

use std::collections::BTreeMap;
use std::path::Path;

use apis::runtime::v1alpha1 as hook;
use koord_runtime_proxy::config::{
    ConfigError, CriMethod, FailurePolicy, HookPhase, HookType, Registry, load_dir,
    parse_registration,
};
use koord_runtime_proxy::cri::v1 as cri;
use koord_runtime_proxy::merge;
use koord_runtime_proxy::store::{
    ContainerEntry, MergeStats, MetaStore, Origin, RuntimeSnapshot, cgroup_parent_from_info,
};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn stages_follow_upstream() {
    use CriMethod::*;
    use HookPhase::*;
    let expected = [
        (RunPodSandbox, Pre, Some("PreRunPodSandbox")),
        (RunPodSandbox, Post, None),
        (StopPodSandbox, Pre, None),
        (StopPodSandbox, Post, Some("PostStopPodSandbox")),
        (CreateContainer, Pre, Some("PreCreateContainer")),
        (CreateContainer, Post, None),
        (StartContainer, Pre, Some("PreStartContainer")),
        (StartContainer, Post, Some("PostStartContainer")),
        (StopContainer, Pre, None),
        (StopContainer, Post, Some("PostStopContainer")),
        (
            UpdateContainerResources,
            Pre,
            Some("PreUpdateContainerResources"),
        ),
        (UpdateContainerResources, Post, None),
        (RemovePodSandbox, Pre, None),
        (RemovePodSandbox, Post, None),
        (RemoveContainer, Pre, None),
    ];
    for (method, phase, stage) in expected {
        assert_eq!(
            method.hook(phase).map(HookType::name),
            stage,
            "{method:?} {phase:?}"
        );
    }
    assert_eq!(
        CriMethod::from_path("/runtime.v1.RuntimeService/StartContainer"),
        Some(StartContainer)
    );
    assert_eq!(
        CriMethod::from_path("/runtime.v1.RuntimeService/ListContainers"),
        None
    );
    assert_eq!(
        CriMethod::from_path("/runtime.v1.ImageService/RunPodSandbox"),
        None
    );
    assert_eq!(
        HookType::parse("PreRemoveRunPodSandbox"),
        Some(HookType::PreRemoveRunPodSandbox)
    );
    assert_eq!(HookType::parse("PreSomething"), None);
}

#[test]
fn metric_labels_name_only_cri_methods() {
    use koord_runtime_proxy::proxy::method_label;
    for (path, label) in [
        (
            "/runtime.v1.RuntimeService/CreateContainer",
            "CreateContainer",
        ),
        (
            "/runtime.v1.RuntimeService/ListPodSandbox",
            "ListPodSandbox",
        ),
        ("/runtime.v1.ImageService/PullImage", "PullImage"),
        ("/runtime.v1.RuntimeService/MadeUp123", "unknown"),
        ("/evil.Service/CreateContainer", "unknown"),
        ("/", "unknown"),
        ("", "unknown"),
    ] {
        assert_eq!(method_label(path), label, "{path:?}");
    }
}

#[test]
fn registration_files_parse_like_upstream() {
    let path = Path::new("/x/koordlet.json");
    let config = parse_registration(
        path,
        r#"{"remote-endpoint":"/var/run/koordlet/koordlet.sock","failure-policy":"Fail",
            "runtime-hooks":["PreRunPodSandbox","PreCreateContainer","PreFuture"]}"#,
    )
    .unwrap();
    assert_eq!(config.remote_endpoint, "/var/run/koordlet/koordlet.sock");
    assert_eq!(config.failure_policy, FailurePolicy::Fail);
    assert!(config.serves(HookType::PreCreateContainer));
    assert!(!config.serves(HookType::PreStartContainer));

    assert_eq!(config.policy_warning(), None);

    let config = parse_registration(path, r#"{"remote-endpoint":"/s.sock"}"#).unwrap();
    assert_eq!(config.failure_policy, FailurePolicy::None);
    assert_eq!(config.policy_warning(), None);
    assert!(config.runtime_hooks.is_empty());

    // Go's decoder reads null as absent.
    let config = parse_registration(
        path,
        r#"{"remote-endpoint":"/s.sock","failure-policy":null,"runtime-hooks":null}"#,
    )
    .unwrap();
    assert_eq!(config.failure_policy, FailurePolicy::None);
    assert!(config.runtime_hooks.is_empty());

    for malformed in [
        "",
        "{",
        r#"{"remote-endpoint":"/s","failure-policy":1}"#,
        r#"{"remote-endpoint":"/s","runtime-hooks":"PreRunPodSandbox"}"#,
    ] {
        assert!(
            matches!(
                parse_registration(path, malformed),
                Err(ConfigError::Parse { .. })
            ),
            "{malformed:?}"
        );
    }
    // serde reads a struct from an empty array; it still has no endpoint.
    assert!(parse_registration(path, "[]").is_err());
    assert!(matches!(
        parse_registration(path, r#"{"failure-policy":"Fail"}"#),
        Err(ConfigError::NoEndpoint(_))
    ));
}

#[test]
fn any_policy_string_is_accepted_and_only_exact_fail_refuses() {
    // Upstream compares the string with "Fail" (case-sensitive); the rest ignore.
    let path = Path::new("/etc/runtime/hookserver.d/koordlet.json");
    for (written, policy, warned) in [
        ("Fail", FailurePolicy::Fail, false),
        ("Ignore", FailurePolicy::Ignore, false),
        ("", FailurePolicy::None, false),
        ("fail", FailurePolicy::Ignore, true),
        ("FAIL", FailurePolicy::Ignore, true),
        (" Fail", FailurePolicy::Ignore, true),
        ("ignore", FailurePolicy::Ignore, true),
        ("Sometimes", FailurePolicy::Ignore, true),
    ] {
        let text = serde_json::json!({
            "remote-endpoint": "/k.sock",
            "failure-policy": written,
            "runtime-hooks": ["PreCreateContainer"],
        })
        .to_string();
        let config = parse_registration(path, &text).unwrap();
        assert_eq!(config.failure_policy, policy, "{written:?}");
        assert_eq!(config.failure_policy_text, written);
        assert!(config.serves(HookType::PreCreateContainer), "{written:?}");
        match config.policy_warning() {
            Some(warning) => {
                assert!(warned, "unexpected warning for {written:?}: {warning}");
                assert!(warning.contains(&format!("{written:?}")), "{warning}");
                assert!(warning.contains("treated as Ignore"), "{warning}");
            }
            None => assert!(!warned, "no warning for {written:?}"),
        }
    }
}

#[test]
fn a_file_with_a_misspelt_policy_still_registers_its_hooks() {
    let dir = std::env::temp_dir().join(format!("koord-rp-policy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("koordlet.json"),
        r#"{"remote-endpoint":"/k.sock","failure-policy":"fail","runtime-hooks":["PreCreateContainer"]}"#,
    )
    .unwrap();
    let (registrations, errors) = load_dir(&dir);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(registrations.len(), 1);
    assert!(registrations[0].file.ends_with("koordlet.json"));
    assert_eq!(
        registrations[0].config.failure_policy,
        FailurePolicy::Ignore
    );
    assert!(registrations[0].config.policy_warning().is_some());
    let registry = Registry::new(registrations);
    assert_eq!(
        registry
            .server_for(HookType::PreCreateContainer)
            .map(|c| c.remote_endpoint.clone()),
        Some("/k.sock".to_string())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_bad_file_is_skipped_and_the_directory_is_reloaded() {
    let dir = std::env::temp_dir().join(format!("koord-rp-reg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a-broken.json"), "{not json").unwrap();
    std::fs::write(dir.join("ignored.txt"), "{}").unwrap();
    std::fs::write(
        dir.join("koordlet.json"),
        r#"{"remote-endpoint":"/k.sock","failure-policy":"Ignore","runtime-hooks":["PreCreateContainer"]}"#,
    )
    .unwrap();
    let (registrations, errors) = load_dir(&dir);
    assert_eq!(registrations.len(), 1);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].to_string().contains("a-broken.json"),
        "{}",
        errors[0]
    );

    let registry = Registry::watch(dir.clone(), std::time::Duration::from_millis(50)).await;
    assert_eq!(
        registry
            .server_for(HookType::PreCreateContainer)
            .map(|c| c.remote_endpoint.clone()),
        Some("/k.sock".to_string())
    );
    assert!(registry.server_for(HookType::PreRunPodSandbox).is_none());
    std::fs::write(
        dir.join("koordlet.json"),
        r#"{"remote-endpoint":"/k2.sock","failure-policy":"Fail","runtime-hooks":["PreRunPodSandbox"]}"#,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while registry.server_for(HookType::PreRunPodSandbox).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "registry did not reload"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let server = registry.server_for(HookType::PreRunPodSandbox).unwrap();
    assert_eq!(server.failure_policy, FailurePolicy::Fail);
    assert!(registry.server_for(HookType::PreCreateContainer).is_none());
    std::fs::remove_file(dir.join("koordlet.json")).unwrap();
    while registry.server_for(HookType::PreRunPodSandbox).is_some() {
        assert!(std::time::Instant::now() < deadline, "removal not seen");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_request() -> cri::RunPodSandboxRequest {
    cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 2,
            }),
            labels: map(&[("app", "web")]),
            annotations: map(&[("a", "1")]),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: "/kubepods/podu1".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: "runc".into(),
    }
}

#[test]
fn pod_answer_merges_labels_annotations_and_cgroup_parent() {
    let mut request = run_request();
    let mut context = merge::pod_hook_request(&request);
    assert_eq!(context.pod_meta.as_ref().unwrap().uid, "u1");
    assert_eq!(context.runtime_handler, "runc");
    assert_eq!(context.cgroup_parent, "/kubepods/podu1");
    let answer = hook::PodSandboxHookResponse {
        labels: map(&[("added", "yes")]),
        annotations: map(&[("a", "2")]),
        cgroup_parent: "/kubepods/besteffort/podu1".into(),
        resources: None,
    };
    merge::merge_pod_answer(&mut request, &mut context, &answer);
    let config = request.config.unwrap();
    assert_eq!(config.labels, map(&[("added", "yes"), ("app", "web")]));
    assert_eq!(config.annotations, map(&[("a", "2")]));
    assert_eq!(
        config.linux.unwrap().cgroup_parent,
        "/kubepods/besteffort/podu1"
    );
    assert_eq!(context.cgroup_parent, "/kubepods/besteffort/podu1");
    assert_eq!(context.labels.get("added").map(String::as_str), Some("yes"));

    // An empty answer changes nothing.
    let mut request = run_request();
    let mut context = merge::pod_hook_request(&request);
    merge::merge_pod_answer(&mut request, &mut context, &Default::default());
    assert_eq!(request, run_request());
}

fn create_request() -> cri::CreateContainerRequest {
    cri::CreateContainerRequest {
        pod_sandbox_id: "p1".into(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "main".into(),
                attempt: 0,
            }),
            envs: vec![
                cri::KeyValue {
                    key: "PATH".into(),
                    value: "/bin".into(),
                },
                cri::KeyValue {
                    key: "KEEP".into(),
                    value: "k".into(),
                },
            ],
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_period: 100_000,
                    cpu_quota: 50_000,
                    cpu_shares: 2,
                    memory_limit_in_bytes: 1 << 30,
                    cpuset_cpus: "0-3".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        sandbox_config: Some(run_request().config.unwrap()),
    }
}

#[test]
fn container_answer_merges_resources_envs_annotations() {
    let mut request = create_request();
    let pod = merge::pod_hook_request(&run_request());
    let mut context = merge::container_hook_request(&request, Some(&pod));
    assert_eq!(context.pod_labels, map(&[("app", "web")]));
    assert_eq!(context.pod_cgroup_parent, "/kubepods/podu1");
    assert_eq!(
        context.container_envs.get("PATH").map(String::as_str),
        Some("/bin")
    );
    assert_eq!(context.container_resources.as_ref().unwrap().cpu_shares, 2);

    let answer = hook::ContainerResourceHookResponse {
        container_annotations: map(&[("note", "x")]),
        container_resources: Some(hook::LinuxContainerResources {
            cpu_shares: 512,
            cpu_quota: -1,
            // zero / empty: keep what the kubelet asked for
            memory_limit_in_bytes: 0,
            cpuset_cpus: String::new(),
            unified: map(&[("cpu.idle", "1")]),
            ..Default::default()
        }),
        pod_cgroup_parent: String::new(),
        container_envs: map(&[("PATH", "/usr/bin"), ("NEW", "n")]),
    };
    merge::merge_create_answer(&mut request, &mut context, &answer);
    let config = request.config.clone().unwrap();
    let resources = config.linux.unwrap().resources.unwrap();
    assert_eq!(resources.cpu_shares, 512);
    assert_eq!(resources.cpu_quota, -1, "-1 is a real quota");
    assert_eq!(resources.cpu_period, 100_000);
    assert_eq!(resources.memory_limit_in_bytes, 1 << 30);
    assert_eq!(resources.cpuset_cpus, "0-3");
    assert_eq!(resources.unified, map(&[("cpu.idle", "1")]));
    let envs: Vec<(String, String)> = config
        .envs
        .into_iter()
        .map(|kv| (kv.key, kv.value))
        .collect();
    assert_eq!(
        envs,
        vec![
            ("PATH".to_string(), "/usr/bin".to_string()),
            ("KEEP".to_string(), "k".to_string()),
            ("NEW".to_string(), "n".to_string()),
        ]
    );
    assert_eq!(config.annotations, map(&[("note", "x")]));
    // The sandbox config keeps its parent when the answer has none.
    assert_eq!(
        request.sandbox_config.unwrap().linux.unwrap().cgroup_parent,
        "/kubepods/podu1"
    );

    // Without stored pod context the sandbox config in the request is used.
    let fallback = merge::container_hook_request(&create_request(), None);
    assert_eq!(fallback.pod_labels, map(&[("app", "web")]));
    assert_eq!(fallback.pod_meta.unwrap().uid, "u1");
}

#[test]
fn update_answer_overrides_the_kubelet_values() {
    let pod = merge::pod_hook_request(&run_request());
    let mut context = merge::container_hook_request(&create_request(), Some(&pod));
    let mut request = cri::UpdateContainerResourcesRequest {
        container_id: "c1".into(),
        linux: Some(cri::LinuxContainerResources {
            cpu_shares: 4,
            memory_limit_in_bytes: 2 << 30,
            ..Default::default()
        }),
        ..Default::default()
    };
    merge::update_context_from_request(&mut context, &request);
    let stored = context.container_resources.clone().unwrap();
    assert_eq!(stored.cpu_shares, 4);
    assert_eq!(stored.memory_limit_in_bytes, 2 << 30);
    assert_eq!(
        stored.cpu_quota, 50_000,
        "unset fields keep the stored value"
    );
    let answer = hook::ContainerResourceHookResponse {
        container_resources: Some(hook::LinuxContainerResources {
            cpu_shares: 256,
            ..Default::default()
        }),
        ..Default::default()
    };
    merge::merge_update_answer(&mut request, &mut context, &answer);
    let linux = request.linux.unwrap();
    assert_eq!(linux.cpu_shares, 256);
    assert_eq!(linux.memory_limit_in_bytes, 2 << 30);
    assert_eq!(linux.cpu_quota, 50_000);
}

#[test]
fn store_rebuild_restores_pod_context_of_containers() {
    let info = map(&[(
        "info",
        r#"{"pid":1,"config":{"linux":{"cgroup_parent":"/kubepods/besteffort/podu1"}}}"#,
    )]);
    assert_eq!(cgroup_parent_from_info(&info), "/kubepods/besteffort/podu1");
    assert_eq!(cgroup_parent_from_info(&map(&[("info", "{garbage")])), "");
    assert_eq!(cgroup_parent_from_info(&BTreeMap::new()), "");

    let sandbox = cri::PodSandbox {
        id: "p1".into(),
        metadata: Some(cri::PodSandboxMetadata {
            name: "web".into(),
            uid: "u1".into(),
            namespace: "ns".into(),
            attempt: 0,
        }),
        labels: map(&[("koordinator.sh/qosClass", "BE")]),
        annotations: map(&[("node.koordinator.sh/extended-resource-spec", "{}")]),
        runtime_handler: "runc".into(),
        ..Default::default()
    };
    let container = |id: &str, pod: &str| cri::Container {
        id: id.into(),
        pod_sandbox_id: pod.into(),
        metadata: Some(cri::ContainerMetadata {
            name: "main".into(),
            attempt: 1,
        }),
        annotations: map(&[("c", "1")]),
        ..Default::default()
    };
    let store = MetaStore::default();
    // An older listing saw a pod the runtime no longer has.
    let stale = cri::PodSandbox {
        id: "stale".into(),
        ..Default::default()
    };
    store.merge_listing(RuntimeSnapshot {
        sandboxes: vec![(stale, String::new())],
        containers: vec![],
    });
    assert!(store.pod("stale").is_some());
    store.merge_listing(RuntimeSnapshot {
        sandboxes: vec![(sandbox, "/kubepods/besteffort/podu1".into())],
        containers: vec![
            (
                container("c1", "p1"),
                Some(cri::LinuxContainerResources {
                    cpu_shares: 512,
                    ..Default::default()
                }),
            ),
            (container("orphan", "gone"), None),
        ],
    });
    assert_eq!(store.counts(), (1, 1));
    assert!(
        store.pod("stale").is_none(),
        "an older listing's entry is dropped"
    );
    let pod = store.pod("p1").unwrap();
    assert_eq!(pod.cgroup_parent, "/kubepods/besteffort/podu1");
    assert_eq!(pod.runtime_handler, "runc");
    let entry = store.container("c1").unwrap();
    assert_eq!(entry.pod_id, "p1");
    let request = entry.request;
    assert_eq!(request.pod_meta.unwrap().uid, "u1");
    assert_eq!(
        request.pod_labels,
        map(&[("koordinator.sh/qosClass", "BE")])
    );
    assert_eq!(request.pod_cgroup_parent, "/kubepods/besteffort/podu1");
    assert_eq!(request.container_meta.as_ref().unwrap().id, "c1");
    assert_eq!(request.container_meta.unwrap().attempt, 1);
    assert_eq!(request.container_resources.unwrap().cpu_shares, 512);
    assert_eq!(request.container_annotations, map(&[("c", "1")]));

    store.remove_pod("p1");
    assert_eq!(store.counts(), (0, 0), "a removed pod takes its containers");
}

#[test]
fn a_late_listing_is_merged_into_live_entries() {
    let sandbox = |id: &str| cri::PodSandbox {
        id: id.into(),
        metadata: Some(cri::PodSandboxMetadata {
            name: format!("name-{id}"),
            ..Default::default()
        }),
        ..Default::default()
    };
    let container = |id: &str, pod: &str| cri::Container {
        id: id.into(),
        pod_sandbox_id: pod.into(),
        ..Default::default()
    };
    let store = MetaStore::default();
    // From an older listing; the runtime no longer reports it.
    store.merge_listing(RuntimeSnapshot {
        sandboxes: vec![(sandbox("older-pod"), String::new())],
        containers: vec![(container("older-ctr", "older-pod"), None)],
    });
    assert_eq!(store.pod_origin("older-pod"), Some(Origin::Listed));

    // Recorded by live calls before the listing.
    store.put_pod(
        "live-pod",
        hook::PodSandboxHookRequest {
            cgroup_parent: "/from-hook".into(),
            ..Default::default()
        },
    );
    store.put_container(
        "live-ctr",
        ContainerEntry {
            pod_id: "live-pod".into(),
            request: hook::ContainerResourceHookRequest {
                container_envs: map(&[("FROM", "kubelet")]),
                ..Default::default()
            },
        },
    );

    store.begin_listing();
    // While the runtime takes its time to answer, live calls go on.
    store.put_pod("new-pod", Default::default());
    store.remove_container("removed-ctr");
    store.remove_pod("removed-pod");

    let stats = store.merge_listing(RuntimeSnapshot {
        sandboxes: vec![
            (sandbox("live-pod"), "/from-runtime".into()),
            (sandbox("removed-pod"), String::new()),
            (sandbox("listed-pod"), "/listed".into()),
        ],
        containers: vec![
            (container("live-ctr", "live-pod"), None),
            (container("listed-ctr", "live-pod"), None),
            (container("removed-ctr", "listed-pod"), None),
            (container("ctr-of-removed-pod", "removed-pod"), None),
        ],
    });

    // Live wins over listed.
    let pod = store.pod("live-pod").unwrap();
    assert_eq!(pod.cgroup_parent, "/from-hook");
    assert_eq!(store.pod_origin("live-pod"), Some(Origin::Live));
    let live = store.container("live-ctr").unwrap();
    assert_eq!(live.request.container_envs, map(&[("FROM", "kubelet")]));
    assert_eq!(store.container_origin("live-ctr"), Some(Origin::Live));
    // A listed container of a live pod gets the live pod's context.
    let listed = store.container("listed-ctr").unwrap();
    assert_eq!(store.container_origin("listed-ctr"), Some(Origin::Listed));
    assert_eq!(listed.request.pod_cgroup_parent, "/from-hook");
    assert_eq!(
        store.pod("listed-pod").unwrap().cgroup_parent,
        "/listed",
        "a pod only the runtime knows comes from the listing"
    );
    // Live entries the listing lacks stay; live removals are not undone.
    assert!(store.pod("new-pod").is_some());
    assert!(store.container("removed-ctr").is_none());
    assert!(store.pod("removed-pod").is_none());
    assert!(store.container("ctr-of-removed-pod").is_none());
    // The older listing's entries the runtime no longer reports are gone.
    assert!(store.pod("older-pod").is_none());
    assert!(store.container("older-ctr").is_none());
    assert_eq!(store.counts(), (3, 2));
    assert_eq!(
        stats,
        MergeStats {
            listed: (1, 1),
            live_kept: (1, 1),
            dropped: (1, 1),
            removed_meanwhile: (1, 1),
        }
    );

    // Removals are only remembered while a listing is in flight.
    store.remove_pod("listed-pod");
    store.merge_listing(RuntimeSnapshot {
        sandboxes: vec![(sandbox("listed-pod"), "/again".into())],
        containers: vec![],
    });
    assert_eq!(store.pod("listed-pod").unwrap().cgroup_parent, "/again");
}

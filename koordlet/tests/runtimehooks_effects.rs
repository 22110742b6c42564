//! Side effects of hook decisions on generated trees and real processes:
//! resctrl groups (creation with schemata, tasks, garbage collection) on a
//! generated resctrl tree, and `oom_score_adj` writes including the EPERM
//! a process without CAP_SYS_RESOURCE gets when lowering it.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::runtimehooks::apply::{EffectStatus, SideEffectApplier, same_schemata_line};
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::{HookOptions, gated_hooks, parse_feature_gates};
use koordlet::runtimehooks::protocol::*;
use koordlet::runtimehooks::reconciler::resctrl_gc;
use koordlet::runtimehooks::resctrlnode::ResctrlNodeInfo;
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "koordlet-rh-effects-{}-{label}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn applier(base: &Path) -> SideEffectApplier {
    let layout = CgroupLayout::new(
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        base.join("cgroup"),
    );
    SideEffectApplier::new(
        ResourceExecutor::new(layout, ExecutorConfig::default()),
        base.join("proc"),
        base.join("resctrl"),
    )
}

/// A resctrl root like the kernel's, with two L3 domains of 11 ways.
fn generated_resctrl(base: &Path) -> PathBuf {
    let root = base.join("resctrl");
    std::fs::create_dir_all(root.join("info/L3")).unwrap();
    std::fs::write(root.join("info/L3/cbm_mask"), "7ff\n").unwrap();
    std::fs::write(
        root.join("schemata"),
        "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n",
    )
    .unwrap();
    std::fs::write(root.join("tasks"), "").unwrap();
    root
}

fn resctrl_pod(uid: &str) -> PodContext {
    PodContext {
        meta: PodMeta {
            namespace: "default".into(),
            name: format!("pod-{uid}"),
            uid: uid.into(),
        },
        annotations: BTreeMap::from([(
            "node.koordinator.sh/resctrl".to_string(),
            r#"{"llc":{"schemata":{"range":[0,30]}},"mb":{"schemata":{"percent":50}}}"#.to_string(),
        )]),
        cgroup_parent: format!("/kubepods/pod{uid}"),
        ..PodContext::default()
    }
}

#[test]
fn resctrl_groups_are_created_filled_and_collected_on_a_generated_tree() {
    let base = temp_dir("resctrl");
    let root = generated_resctrl(&base);
    let mut caps = koordlet::capabilities::detect(&SystemArgs::under(&base.join("empty")));
    caps.resctrl.supported = true;
    let gates = parse_feature_gates("Resctrl=true").unwrap();
    let dispatcher = HookDispatcher::new(
        gated_hooks(&HookOptions::default(), &gates),
        &caps,
        CgroupLayout::new(
            CgroupVersion::V1,
            CgroupDriver::Cgroupfs,
            base.join("cgroup"),
        ),
        FailurePolicyConfig::default(),
    );
    let mut rules = (*dispatcher.rules()).clone();
    rules.resctrl_info = Some(ResctrlNodeInfo::read(&root).unwrap());
    dispatcher.set_rules(rules);
    let applier = applier(&base);

    // Sandbox creation: the group with its schemata.
    let pod = resctrl_pod("uid-a");
    let adjustment = dispatcher
        .run(HookStage::PreRunPodSandbox, &HookRequest::Pod(pod.clone()))
        .unwrap();
    let reports = applier.apply_blocking(&adjustment.side_effects);
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].status, EffectStatus::Applied);
    let group = root.join("koordlet-uid-a");
    let schemata = std::fs::read_to_string(group.join("schemata")).unwrap();
    // 30% of 11 ways → ways 0..4 → mask f; MB 50%.
    assert!(
        schemata
            .lines()
            .any(|l| same_schemata_line(l, "L3:0=f;1=f")),
        "{schemata}"
    );
    assert!(
        schemata
            .lines()
            .any(|l| same_schemata_line(l, "MB:0=50;1=50")),
        "{schemata}"
    );
    // Same decision again: nothing to write.
    let again = applier.apply_blocking(&adjustment.side_effects);
    assert_eq!(again[0].status, EffectStatus::Unchanged);

    // Container start: its tasks join the group.
    std::fs::write(group.join("tasks"), "").unwrap();
    let container = ContainerContext {
        pod: pod.clone(),
        container: ContainerMeta {
            name: "main".into(),
            id: "containerd://abc".into(),
            ..ContainerMeta::default()
        },
        pids: vec![4242],
        ..ContainerContext::default()
    };
    let adjustment = dispatcher
        .run(
            HookStage::PostStartContainer,
            &HookRequest::Container(container),
        )
        .unwrap();
    let reports = applier.apply_blocking(&adjustment.side_effects);
    assert_eq!(reports[0].status, EffectStatus::Applied, "{reports:?}");
    assert_eq!(
        std::fs::read_to_string(group.join("tasks")).unwrap().trim(),
        "4242"
    );

    // GC: a group whose pod is gone is removed; live and foreign groups stay.
    std::fs::create_dir_all(root.join("koordlet-gone")).unwrap();
    std::fs::create_dir_all(root.join("someone-else")).unwrap();
    let live = Pod {
        metadata: ObjectMeta {
            uid: Some("uid-a".into()),
            annotations: Some(pod.annotations.clone()),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    };
    assert_eq!(resctrl_gc(&dispatcher, &applier, &[live]), 1);
    assert!(!root.join("koordlet-gone").exists());
    assert!(group.is_dir());
    assert!(root.join("someone-else").is_dir());

    // Sandbox removal drops the pod's group.
    let adjustment = dispatcher
        .run(HookStage::PreRemoveRunPodSandbox, &HookRequest::Pod(pod))
        .unwrap();
    applier.apply_blocking(&adjustment.side_effects);
    assert!(!group.exists());

    // Without resctrl the hook is inactive and nothing happens.
    let bare = koordlet::capabilities::detect(&SystemArgs::under(&base.join("empty")));
    let inactive = HookDispatcher::new(
        gated_hooks(&HookOptions::default(), &gates),
        &bare,
        CgroupLayout::new(
            CgroupVersion::V1,
            CgroupDriver::Cgroupfs,
            base.join("cgroup"),
        ),
        FailurePolicyConfig::default(),
    );
    assert!(!inactive.is_active("Resctrl"));
    let adjustment = inactive
        .run(
            HookStage::PreRunPodSandbox,
            &HookRequest::Pod(resctrl_pod("uid-b")),
        )
        .unwrap();
    assert!(adjustment.side_effects.is_empty());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn oom_score_adj_writes_and_reports_eperm_when_lowering() {
    let base = temp_dir("oom");
    // Generated /proc: a missing process and a malformed file.
    std::fs::create_dir_all(base.join("proc/77")).unwrap();
    std::fs::write(base.join("proc/77/oom_score_adj"), "not a number").unwrap();
    let fake = applier(&base);
    let reports = fake.apply_blocking(&[
        SideEffect::OomScoreAdj { pid: 76, value: 10 },
        SideEffect::OomScoreAdj { pid: 77, value: 10 },
        SideEffect::OomScoreAdj {
            pid: 77,
            value: 5000,
        },
    ]);
    assert_eq!(reports[0].status, EffectStatus::NotFound);
    assert!(
        matches!(reports[1].status, EffectStatus::Failed(ref e) if e.contains("not an integer"))
    );
    assert!(matches!(reports[2].status, EffectStatus::Failed(ref e) if e.contains("outside")));

    // A real process: raising always works; lowering needs CAP_SYS_RESOURCE.
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    let real = SideEffectApplier::new(
        ResourceExecutor::new(
            CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
            ExecutorConfig::default(),
        ),
        "/proc",
        base.join("resctrl"),
    );
    let path = format!("/proc/{pid}/oom_score_adj");
    let read = || {
        std::fs::read_to_string(&path)
            .unwrap()
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let start = read();
    let raised = (start + 100).min(1000);
    let reports = real.apply_blocking(&[SideEffect::OomScoreAdj { pid, value: raised }]);
    assert!(
        matches!(
            reports[0].status,
            EffectStatus::Applied | EffectStatus::Unchanged
        ),
        "{reports:?}"
    );
    assert_eq!(read(), raised);
    let reports = real.apply_blocking(&[SideEffect::OomScoreAdj { pid, value: -500 }]);
    match &reports[0].status {
        EffectStatus::Applied => {
            println!("this process may lower oom_score_adj (CAP_SYS_RESOURCE)");
            assert_eq!(read(), -500);
        }
        EffectStatus::PermissionDenied { lowering, error } => {
            println!("lowering refused as expected without CAP_SYS_RESOURCE: {error}");
            assert!(lowering);
            assert!(error.contains("oom_score_adj"), "{error}");
            assert_eq!(read(), raised);
        }
        other => panic!("unexpected {other:?}"),
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn shared_dispatcher_is_safe_across_threads() {
    // Transports call one dispatcher concurrently while rules are swapped.
    let base = temp_dir("threads");
    let caps = {
        let mut caps = koordlet::capabilities::detect(&SystemArgs::under(&base.join("empty")));
        caps.cgroup.controllers = vec!["cpu".into(), "cpuset".into(), "memory".into()];
        caps
    };
    let dispatcher = Arc::new(HookDispatcher::new(
        gated_hooks(&HookOptions::default(), &BTreeMap::new()),
        &caps,
        CgroupLayout::new(
            CgroupVersion::V1,
            CgroupDriver::Cgroupfs,
            base.join("cgroup"),
        ),
        FailurePolicyConfig::default(),
    ));
    let mut pod = resctrl_pod("uid-t");
    pod.labels
        .insert("koordinator.sh/qosClass".into(), "LSR".into());
    pod.annotations.insert(
        "scheduling.koordinator.sh/resource-status".into(),
        r#"{"cpuset":"1"}"#.into(),
    );
    let request = HookRequest::Container(ContainerContext {
        pod,
        ..ContainerContext::default()
    });
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let dispatcher = Arc::clone(&dispatcher);
            let request = request.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    if i == 0 {
                        dispatcher.set_rules(Default::default());
                    }
                    let out = dispatcher
                        .run(HookStage::PreCreateContainer, &request)
                        .unwrap();
                    assert_eq!(out.resources.cpuset_cpus.as_deref(), Some("1"));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Core scheduling cookies through the applier, over the fake kernel: a
/// group's first container creates the cookie, the next shares it, a
/// cleared container gets the default cookie, and a node without core
/// scheduling (no cookie manager) fails the effect instead of faking it.
#[test]
fn core_sched_cookie_effects_go_through_the_cookie_manager() {
    use koordlet::runtimehooks::hooks::coresched::cookie::{
        CookieManager, FakeCoreSched, SharedFake,
    };
    let base = temp_dir("cookies");
    let fake = SharedFake::new(FakeCoreSched::new());
    let with_cookies =
        applier(&base).with_cookie_manager(CookieManager::new(Box::new(fake.clone())));
    let cookie = |container: &str, group: Option<&str>, pids: &[u32]| SideEffect::CoreSchedCookie {
        container: container.into(),
        group: group.map(str::to_string),
        pids: pids.to_vec(),
    };
    let statuses = |applier: &SideEffectApplier, effects: &[SideEffect]| -> Vec<EffectStatus> {
        applier
            .apply_blocking(effects)
            .into_iter()
            .map(|report| report.status)
            .collect()
    };
    assert_eq!(
        statuses(
            &with_cookies,
            &[
                cookie("a/1", Some("g"), &[10, 11]),
                cookie("b/1", Some("g"), &[20]),
                cookie("c/1", Some("h"), &[30]),
                cookie("d/1", Some("g"), &[]),
            ]
        ),
        vec![
            EffectStatus::Applied,
            EffectStatus::Applied,
            EffectStatus::Applied,
            EffectStatus::NotFound,
        ]
    );
    let (a, b, c) = fake.with(|f| (f.cookie(10), f.cookie(20), f.cookie(30)));
    assert_ne!(a, 0);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(fake.with(|f| f.cookie(11)), a);
    // The same decision again changes nothing.
    assert_eq!(
        statuses(&with_cookies, &[cookie("a/1", Some("g"), &[10, 11])]),
        vec![EffectStatus::Unchanged]
    );
    assert_eq!(
        statuses(&with_cookies, &[cookie("b/1", None, &[20])]),
        vec![EffectStatus::Applied]
    );
    assert_eq!(fake.with(|f| f.cookie(20)), 0);

    let without = applier(&base);
    assert!(matches!(
        statuses(&without, &[cookie("a/1", Some("g"), &[10])]).as_slice(),
        [EffectStatus::Failed(reason)] if reason.contains("core scheduling")
    ));
    let _ = std::fs::remove_dir_all(&base);
}

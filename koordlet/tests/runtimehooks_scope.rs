//! Issue 16, finding 3: koordlet writes only where a pod's own cgroup is.
//!
//! The runtime reports a pod's cgroup parent; a hostile or broken one names
//! the kubepods root, a QoS tier root, `/system.slice`, someone else's pod
//! or a pod directory that is a symlink. None of those may receive one pod's
//! limits, whether the request comes over the RuntimeHookService socket or
//! from NRI: the call is refused with a hook error (the failure policy
//! decides what the runtime does) and counted by reason.
//!
//! A generated v1 tree stands for the node (a symlink cannot be made inside
//! cgroupfs); one case runs on the real hierarchy with a throwaway cgroup
//! standing for `/system.slice`.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use apis::runtime::v1alpha1 as wire;
use apis::runtime::v1alpha1::runtime_hook_service_client::RuntimeHookServiceClient;
use hyper_util::rt::TokioIo;
use koord_common::{HealthRegistry, MetricsRegistry};
use koordlet::capabilities::NodeCapabilities;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::runtimehooks::apply::SideEffectApplier;
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::{HookOptions, all_hooks};
use koordlet::runtimehooks::metrics::HookMetrics;
use koordlet::runtimehooks::nri::proto::api;
use koordlet::runtimehooks::nri::{NriPlugin, NriState, NriStatus};
use koordlet::runtimehooks::protocol::{FailurePolicy, FailurePolicyConfig};
use koordlet::runtimehooks::server::{self, HookService, ServerConfig};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller};
use tonic::transport::{Channel, Endpoint, Uri};

/// The pod whose requests we send.
const UID: &str = "5d3c4a1e-0b0a-4908-8706-050403020100";
/// Another pod on the node.
const OTHER_UID: &str = "6e4d5b2f-1c1b-4a19-9817-161514131211";
/// A pod whose directory is a symlink to `victim`.
const LINKED_UID: &str = "7f5e6c3a-2d2c-4b2a-a928-272625242322";

const CONTROLLERS: [&str; 3] = ["cpu", "cpuset", "memory"];
/// The files the BE pod's decision would write, at their untouched values.
const FILES: [(&str, &str, &str); 4] = [
    ("cpu", "cpu.shares", "1024"),
    ("cpu", "cpu.cfs_quota_us", "-1"),
    ("cpu", "cpu.cfs_period_us", "100000"),
    ("memory", "memory.limit_in_bytes", "9223372036854771712"),
];

fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("koordlet-scope-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn caps(base: &Path) -> NodeCapabilities {
    let mut caps = koordlet::capabilities::detect(&SystemArgs::under(&base.join("empty")));
    caps.cgroup.controllers = ["cpu", "cpuacct", "cpuset", "memory"]
        .map(String::from)
        .to_vec();
    caps
}

/// Directories of the generated tree that must keep their values.
const GUARDED: [&str; 6] = [
    "kubepods",
    "kubepods/besteffort",
    "kubepods/burstable",
    "system.slice",
    "victim",
    "kubepods/besteffort/pod6e4d5b2f-1c1b-4a19-9817-161514131211",
];

/// kubepods, its tiers, `system.slice`, another pod, a `victim` directory
/// and a pod directory linked to it, plus this pod's own directory.
fn generated_tree(base: &Path) -> CgroupLayout {
    let root = base.join("cgroup");
    let own = format!("kubepods/besteffort/pod{UID}");
    for controller in CONTROLLERS {
        for dir in GUARDED.iter().copied().chain([own.as_str()]) {
            let path = root.join(controller).join(dir);
            std::fs::create_dir_all(&path).unwrap();
            for (_, file, value) in FILES.iter().filter(|(c, _, _)| *c == controller) {
                std::fs::write(path.join(file), value).unwrap();
            }
        }
        std::os::unix::fs::symlink(
            root.join(controller).join("victim"),
            root.join(controller)
                .join(format!("kubepods/besteffort/pod{LINKED_UID}")),
        )
        .unwrap();
    }
    CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root)
}

fn read(layout: &CgroupLayout, dir: &str, controller: &str, file: &str) -> String {
    std::fs::read_to_string(layout.root.join(controller).join(dir).join(file))
        .unwrap()
        .trim()
        .to_string()
}

fn assert_untouched(layout: &CgroupLayout, what: &str) {
    for dir in GUARDED {
        for (controller, file, value) in FILES {
            assert_eq!(
                read(layout, dir, controller, file),
                value,
                "{what}: {controller}/{dir}/{file} was written"
            );
        }
    }
}

struct Node {
    base: PathBuf,
    layout: CgroupLayout,
    dispatcher: Arc<HookDispatcher>,
    applier: SideEffectApplier,
    registry: MetricsRegistry,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn node_with(label: &str, layout: Option<CgroupLayout>, policy: FailurePolicyConfig) -> Node {
    let base = temp_dir(label);
    let layout = layout.unwrap_or_else(|| generated_tree(&base));
    let registry = MetricsRegistry::new("koordlet");
    let metrics = HookMetrics::register(&registry, "test-node");
    let dispatcher = HookDispatcher::new(
        all_hooks(&HookOptions::default()),
        &caps(&base),
        layout.clone(),
        policy,
    )
    .with_metrics(metrics);
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let applier = SideEffectApplier::new(executor, base.join("proc"), base.join("resctrl"));
    Node {
        base,
        layout,
        dispatcher: Arc::new(dispatcher),
        applier,
        registry,
    }
}

fn node(label: &str) -> Node {
    node_with(label, None, FailurePolicyConfig::default())
}

impl Node {
    /// `koordlet_runtime_hook_cgroup_scope_refused_total` by reason.
    fn refused(&self, reason: &str) -> f64 {
        let body = self.registry.encode().unwrap();
        let prefix = "koordlet_runtime_hook_cgroup_scope_refused_total{";
        body.lines()
            .filter(|line| line.starts_with(prefix))
            .filter(|line| line.contains(&format!("reason=\"{reason}\"")))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    async fn serve(&self) -> (RuntimeHookServiceClient<Channel>, koord_common::Shutdown) {
        let socket = self.base.join("run/koordlet.sock");
        let config = ServerConfig {
            socket: socket.clone(),
            registration_dir: self.base.join("hookserver.d"),
            host_endpoint: "/var/run/koordlet/koordlet.sock".into(),
            proxy_failure_policy: FailurePolicy::Ignore,
        };
        let health = HealthRegistry::new();
        let readiness = health.readiness_status("runtime-hooks-server", Err("starting".into()));
        let shutdown = koord_common::Shutdown::new();
        let service = HookService::new(Arc::clone(&self.dispatcher), self.applier.clone());
        server::start(&config, service, readiness, shutdown.clone()).unwrap();
        let channel = Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move {
                    tokio::net::UnixStream::connect(socket)
                        .await
                        .map(TokioIo::new)
                }
            }))
            .await
            .unwrap();
        (RuntimeHookServiceClient::new(channel), shutdown)
    }

    fn nri(&self) -> NriPlugin {
        NriPlugin::new(
            Arc::clone(&self.dispatcher),
            Some(self.applier.clone()),
            NriStatus::new(NriState::WaitingForSocket {
                socket: "/nonexistent".into(),
            }),
        )
    }
}

fn be_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("koordinator.sh/qosClass".to_string(), "BE".to_string())])
}

/// 500m + 250m batch-cpu requested, 1000m + 500m limit, 768Mi memory: the
/// pod level gets shares 768, quota 150000, memory 768Mi.
fn be_annotations() -> BTreeMap<String, String> {
    let spec = r#"{"containers":{
        "main":{"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"256Mi"},
                "limits":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"512Mi"}},
        "side":{"requests":{"kubernetes.io/batch-cpu":"250"},
                "limits":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"256Mi"}}}}"#;
    BTreeMap::from([(
        "node.koordinator.sh/extended-resource-spec".to_string(),
        spec.to_string(),
    )])
}

fn sandbox(uid: &str, cgroup_parent: &str) -> wire::PodSandboxHookRequest {
    wire::PodSandboxHookRequest {
        pod_meta: Some(wire::PodSandboxMetadata {
            name: "batch".into(),
            uid: uid.into(),
            namespace: "tenant".into(),
            attempt: 0,
        }),
        labels: be_labels(),
        annotations: be_annotations(),
        cgroup_parent: cgroup_parent.into(),
        ..Default::default()
    }
}

fn container(uid: &str, cgroup_parent: &str) -> wire::ContainerResourceHookRequest {
    wire::ContainerResourceHookRequest {
        pod_meta: sandbox(uid, cgroup_parent).pod_meta,
        container_meta: Some(wire::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
            id: "c0ffee".into(),
        }),
        container_resources: Some(wire::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: -1,
            cpu_shares: 2,
            ..Default::default()
        }),
        pod_annotations: be_annotations(),
        pod_labels: be_labels(),
        pod_cgroup_parent: cgroup_parent.into(),
        ..Default::default()
    }
}

/// (cgroup parent, the pod UID the request claims, refusal reason).
fn hostile_parents() -> Vec<(String, &'static str, &'static str)> {
    vec![
        ("/kubepods".into(), UID, "tier-root"),
        ("/kubepods/besteffort".into(), UID, "tier-root"),
        ("/kubepods/burstable/".into(), UID, "tier-root"),
        ("/system.slice".into(), UID, "outside-kubepods"),
        (
            format!("/kubepods/besteffort/pod{OTHER_UID}"),
            UID,
            "uid-mismatch",
        ),
        (
            format!("/kubepods/besteffort/pod{LINKED_UID}"),
            LINKED_UID,
            "symlink",
        ),
        (
            format!("/kubepods/besteffort/pod{UID}/../../../system.slice"),
            UID,
            "escape",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_server_writes_nothing_outside_the_pods_own_cgroup() {
    let node = node("server");
    let (mut client, shutdown) = node.serve().await;
    for (parent, uid, reason) in hostile_parents() {
        let before = node.refused(reason);
        let request = sandbox(uid, &parent);
        // Ignore (default): the call proceeds, unchanged.
        let response = client
            .pre_run_pod_sandbox_hook(request.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.resources, None, "{parent}: {response:?}");
        assert_eq!(response.cgroup_parent, parent);
        assert_untouched(&node.layout, &parent);
        assert_eq!(
            node.refused(reason),
            before + 1.0,
            "{parent} counted as {reason}:\n{}",
            node.registry.encode().unwrap()
        );

        // A container of that pod gets none of the pod's batch values.
        let request = container(uid, &parent);
        let response = client
            .pre_create_container_hook(request.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            response.container_resources, request.container_resources,
            "{parent}"
        );
        assert_untouched(&node.layout, &parent);
    }

    // The pod's own directory still gets its values.
    client
        .pre_run_pod_sandbox_hook(sandbox(UID, &format!("/kubepods/besteffort/pod{UID}")))
        .await
        .unwrap();
    let own = format!("kubepods/besteffort/pod{UID}");
    assert_eq!(read(&node.layout, &own, "cpu", "cpu.shares"), "768");
    assert_eq!(
        read(&node.layout, &own, "cpu", "cpu.cfs_quota_us"),
        "150000"
    );
    assert_untouched(&node.layout, "the valid pod");
    shutdown.trigger(koord_common::ShutdownReason::Requested("done".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_server_refuses_a_hostile_parent_under_the_fail_policy() {
    let policy: FailurePolicyConfig =
        serde_json::from_str(r#"{"hooks":{"CgroupScope":"Fail"}}"#).unwrap();
    let node = node_with("server-fail", None, policy);
    let (mut client, shutdown) = node.serve().await;
    let status = client
        .pre_run_pod_sandbox_hook(sandbox(UID, "/kubepods/besteffort"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert!(status.message().contains("CgroupScope"), "{status:?}");
    assert!(status.message().contains("tier root"), "{status:?}");
    assert_untouched(&node.layout, "Fail policy");
    shutdown.trigger(koord_common::ShutdownReason::Requested("done".into()));
}

fn nri_pod(id: &str, uid: &str, cgroup_parent: &str) -> api::PodSandbox {
    api::PodSandbox {
        id: id.into(),
        name: "batch".into(),
        uid: uid.into(),
        namespace: "tenant".into(),
        labels: be_labels(),
        annotations: be_annotations(),
        linux: Some(api::LinuxPodSandbox {
            cgroup_parent: cgroup_parent.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn nri_container(id: &str, pod_id: &str, cgroups_path: &str) -> api::Container {
    api::Container {
        id: id.into(),
        pod_sandbox_id: pod_id.into(),
        name: "main".into(),
        linux: Some(api::LinuxContainer {
            cgroups_path: cgroups_path.into(),
            resources: Some(api::LinuxResources {
                cpu: Some(api::LinuxCpu {
                    shares: Some(api::OptionalUInt64 { value: 2 }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn nri_plugin_writes_nothing_outside_the_pods_own_cgroup() {
    let node = node("nri");
    let plugin = node.nri();
    for (index, (parent, uid, reason)) in hostile_parents().into_iter().enumerate() {
        let before = node.refused(reason);
        let pod = nri_pod(&format!("sb{index}"), uid, &parent);
        let event = api::StateChangeEvent {
            event: api::Event::RunPodSandbox as i32,
            pod: Some(pod.clone()),
            container: None,
        };
        plugin.state_change(&event).unwrap();
        assert_untouched(&node.layout, &format!("RunPodSandbox {parent}"));
        assert_eq!(node.refused(reason), before + 1.0, "{parent}");

        // The runtime reconnects: Synchronize sees the same pod.
        let container = nri_container(&format!("c{index}"), &pod.id, &format!("{parent}/c{index}"));
        let response = plugin.synchronize(&api::SynchronizeRequest {
            pods: vec![pod.clone()],
            containers: vec![container.clone()],
        });
        assert!(response.update.is_empty(), "{parent}: {response:?}");
        assert_untouched(&node.layout, &format!("Synchronize {parent}"));

        // CreateContainer: no batch values for the container either.
        let created = plugin
            .create_container(&api::CreateContainerRequest {
                pod: Some(pod),
                container: Some(container),
            })
            .unwrap();
        let adjust = created.adjust.unwrap_or_default();
        assert_eq!(adjust.linux, None, "{parent}: {adjust:?}");
    }

    // A valid pod whose container cgroup is given as a tier root.
    let pod = nri_pod("own", UID, &format!("/kubepods/besteffort/pod{UID}"));
    let before = node.refused("bad-container-dir");
    let created = plugin
        .create_container(&api::CreateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(nri_container("c-own", "own", "/kubepods/besteffort")),
        })
        .unwrap();
    assert_eq!(created.adjust.unwrap_or_default().linux, None);
    assert_eq!(node.refused("bad-container-dir"), before + 1.0);

    // The same pod with its real container directory is served.
    let created = plugin
        .create_container(&api::CreateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(nri_container(
                "c-own",
                "own",
                &format!("/kubepods/besteffort/pod{UID}/c-own"),
            )),
        })
        .unwrap();
    let cpu = created
        .adjust
        .unwrap()
        .linux
        .unwrap()
        .resources
        .unwrap()
        .cpu;
    assert_eq!(
        cpu.unwrap().shares,
        Some(api::OptionalUInt64 { value: 512 }),
        "the valid container keeps its batch shares"
    );
    plugin
        .state_change(&api::StateChangeEvent {
            event: api::Event::RunPodSandbox as i32,
            pod: Some(pod),
            container: None,
        })
        .unwrap();
    let own = format!("kubepods/besteffort/pod{UID}");
    assert_eq!(read(&node.layout, &own, "cpu", "cpu.shares"), "768");
    assert_untouched(&node.layout, "the valid pod");
}

/// On the machine's real hierarchy: a throwaway cgroup at the hierarchy
/// root stands for `/system.slice`; a request naming it as the cgroup parent
/// leaves its CFS quota alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cgroup_outside_kubepods_keeps_its_values() {
    let Some(layout) =
        support::cgroup::real_v1_layout_or_skip(&[Controller::Cpu, Controller::Memory])
    else {
        return;
    };
    let victim = support::cgroup::ThrowawayCgroup::new(
        &layout,
        "system-slice",
        &[Controller::Cpu, Controller::Memory],
    )
    .unwrap();
    let cpu_dir = victim.path(victim.dir(), Controller::Cpu);
    let quota = cpu_dir.join("cpu.cfs_quota_us");
    let shares = cpu_dir.join("cpu.shares");
    let quota_before = std::fs::read_to_string(&quota).unwrap();
    let shares_before = std::fs::read_to_string(&shares).unwrap();
    let node = node_with("real", Some(layout), FailurePolicyConfig::default());
    let (mut client, shutdown) = node.serve().await;
    let parent = format!("/{}", victim.dir().display());
    let response = client
        .pre_run_pod_sandbox_hook(sandbox(UID, &parent))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.resources, None);
    assert_eq!(std::fs::read_to_string(&quota).unwrap(), quota_before);
    assert_eq!(std::fs::read_to_string(&shares).unwrap(), shares_before);
    assert_eq!(node.refused("outside-kubepods"), 1.0);
    shutdown.trigger(koord_common::ShutdownReason::Requested("done".into()));
}

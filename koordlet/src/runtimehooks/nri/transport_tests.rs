//! NRI transport tests: conversions, the Plugin service with a fake hook, and
//! the supervisor against a fake runtime on a real unix socket.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::connection::{PLUGIN_SERVICE, PluginService, RUNTIME_SERVICE, Registration, code};
use super::plugin::{
    DEFAULT_EVENTS, NriPlugin, container_adjustment, container_context, event_mask,
    parse_plugin_config, pod_context,
};
use super::proto::{api, ttrpc as envelope};
use super::status::{NriState, NriStatus};
use super::supervisor::{Backoff, NriSupervisor};
use super::ttrpc::{FrameDecoder, Message, MessageKind, PLUGIN_CONN, RUNTIME_CONN, encode_message};
use crate::runtimehooks::dispatcher::HookDispatcher;
use crate::runtimehooks::protocol::{
    Adjustment, ContainerContext, FailurePolicy, FailurePolicyConfig, Hook, HookEnv, HookError,
    HookStage, PodContext,
};
use crate::system::SystemArgs;
use crate::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

/// Sets resources from pod labels, so tests can see them come back.
struct LabelHook;

impl Hook for LabelHook {
    fn name(&self) -> &'static str {
        "LabelHook"
    }
    fn description(&self) -> &'static str {
        "test hook"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[
            HookStage::PreRunPodSandbox,
            HookStage::PreCreateContainer,
            HookStage::PreUpdateContainerResources,
        ]
    }
    fn pod(
        &self,
        _stage: HookStage,
        pod: &PodContext,
        _env: &HookEnv,
        _out: &mut Adjustment,
    ) -> Result<(), HookError> {
        if pod.labels.contains_key("test/fail") {
            return Err(HookError::Invalid("asked to fail".into()));
        }
        Ok(())
    }
    fn container(
        &self,
        _stage: HookStage,
        container: &ContainerContext,
        _env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        let labels = &container.pod.labels;
        if labels.contains_key("test/fail") {
            return Err(HookError::Invalid("asked to fail".into()));
        }
        if let Some(shares) = labels.get("test/shares") {
            out.resources.cpu_shares = shares.parse().ok();
            out.resources.cpu_quota = Some(-1);
            out.resources.memory_limit = Some(1 << 30);
            out.resources.cpuset_cpus = Some("0-1".into());
            out.env
                .insert("KOORD_TEST".into(), container.container.name.clone());
        }
        Ok(())
    }
}

fn temp_dir(label: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("koord-nri-{label}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn dispatcher(policy: FailurePolicy) -> Arc<HookDispatcher> {
    let tree = temp_dir("caps");
    let caps = crate::capabilities::detect(&SystemArgs::under(&tree));
    let _ = std::fs::remove_dir_all(&tree);
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
    Arc::new(HookDispatcher::new(
        vec![(Arc::new(LabelHook) as Arc<dyn Hook>, true)],
        &caps,
        layout,
        FailurePolicyConfig::uniform(policy),
    ))
}

fn plugin(policy: FailurePolicy) -> NriPlugin {
    NriPlugin::new(
        dispatcher(policy),
        None,
        NriStatus::new(NriState::WaitingForSocket {
            socket: "/nonexistent".into(),
        }),
    )
}

fn nri_pod(id: &str, labels: &[(&str, &str)]) -> api::PodSandbox {
    api::PodSandbox {
        id: id.into(),
        name: "web".into(),
        uid: "uid-1".into(),
        namespace: "default".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: BTreeMap::from([(
            "node.koordinator.sh/extended-resource-spec".to_string(),
            r#"{"containers":{"main":{"requests":{"kubernetes.io/batch-cpu":"500"},"limits":{"kubernetes.io/batch-cpu":"1000"}}}}"#.to_string(),
        )]),
        linux: Some(api::LinuxPodSandbox {
            cgroup_parent: "/kubepods/besteffort/poduid-1".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn nri_container(id: &str, pod_id: &str) -> api::Container {
    api::Container {
        id: id.into(),
        pod_sandbox_id: pod_id.into(),
        name: "main".into(),
        env: vec!["PATH=/bin".into(), "EMPTY=".into(), "garbage".into()],
        linux: Some(api::LinuxContainer {
            cgroups_path: format!("/kubepods/besteffort/poduid-1/{id}"),
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
fn nri_messages_convert_into_hook_contexts() {
    let pod = pod_context(&nri_pod("sb1", &[("koordinator.sh/qosClass", "BE")]));
    assert_eq!(pod.meta.uid, "uid-1");
    assert_eq!(pod.cgroup_parent, "/kubepods/besteffort/poduid-1");
    assert!(pod.extended_resources.is_some(), "annotation parsed");
    let container = container_context(&pod, &nri_container("c1", "sb1"));
    assert_eq!(container.container.id, "c1");
    assert_eq!(container.resources.cpu_shares, Some(2));
    assert_eq!(container.env.get("PATH").map(String::as_str), Some("/bin"));
    assert_eq!(container.env.get("EMPTY").map(String::as_str), Some(""));
    assert!(!container.env.contains_key("garbage"));
    assert_eq!(
        container.cgroup_dir,
        Some(PathBuf::from("kubepods/besteffort/poduid-1/c1"))
    );

    let mut malformed = nri_pod("sb2", &[]);
    malformed.annotations.insert(
        "node.koordinator.sh/extended-resource-spec".into(),
        "{not json".into(),
    );
    assert!(pod_context(&malformed).extended_resources.is_none());
    let mut systemd = nri_container("c2", "sb1");
    if let Some(linux) = systemd.linux.as_mut() {
        linux.cgroups_path = "kubepods-besteffort.slice:cri-containerd:c2".into();
    }
    assert_eq!(container_context(&pod, &systemd).cgroup_dir, None);
}

#[test]
fn adjustments_become_nri_adjustments_and_updates() {
    let mut adjustment = Adjustment::default();
    assert_eq!(
        container_adjustment(&adjustment),
        api::ContainerAdjustment::default()
    );
    assert!(super::plugin::container_update("c1", &adjustment).is_none());
    adjustment.resources.cpu_shares = Some(512);
    adjustment.resources.cpu_quota = Some(-1);
    adjustment.resources.memory_limit = Some(1024);
    let adjust = container_adjustment(&adjustment);
    let resources = adjust.linux.unwrap().resources.unwrap();
    let cpu = resources.cpu.unwrap();
    assert_eq!(cpu.shares, Some(api::OptionalUInt64 { value: 512 }));
    assert_eq!(cpu.quota, Some(api::OptionalInt64 { value: -1 }));
    assert!(cpu.cpus.is_empty());
    assert_eq!(
        resources.memory.unwrap().limit,
        Some(api::OptionalInt64 { value: 1024 })
    );
    let update = super::plugin::container_update("c1", &adjustment).unwrap();
    assert_eq!(update.container_id, "c1");
    assert!(update.ignore_failure);
}

#[test]
fn plugin_config_selects_events() {
    assert_eq!(parse_plugin_config("").unwrap(), None);
    assert_eq!(
        parse_plugin_config("events: [RunPodSandbox, create_container]").unwrap(),
        Some(0b1001)
    );
    assert!(parse_plugin_config("events: [Bogus]").is_err());
    assert!(parse_plugin_config("events: {").is_err());
    assert_eq!(event_mask(&DEFAULT_EVENTS), 1 | 4 | 8 | 128);
}

#[test]
fn create_container_runs_hooks_and_honours_the_failure_policy() {
    let plugin = plugin(FailurePolicy::Ignore);
    let request = api::CreateContainerRequest {
        pod: Some(nri_pod("sb1", &[("test/shares", "512")])),
        container: Some(nri_container("c1", "sb1")),
    };
    let response = api::CreateContainerResponse::decode(
        plugin
            .call("CreateContainer", &request.encode_to_vec())
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    let adjust = response.adjust.unwrap();
    let cpu = adjust.linux.unwrap().resources.unwrap().cpu.unwrap();
    assert_eq!(cpu.shares.unwrap().value, 512);
    assert_eq!(cpu.cpus, "0-1");
    assert_eq!(adjust.env[0].key, "KOORD_TEST");
    assert_eq!(adjust.env[0].value, "main");

    let failing = api::CreateContainerRequest {
        pod: Some(nri_pod("sb1", &[("test/fail", "")])),
        container: Some(nri_container("c1", "sb1")),
    };
    assert!(
        plugin
            .call("CreateContainer", &failing.encode_to_vec())
            .is_ok(),
        "fail-open"
    );
    let strict = self::plugin(FailurePolicy::Fail);
    let err = strict
        .call("CreateContainer", &failing.encode_to_vec())
        .unwrap_err();
    assert_eq!(err.code, code::INTERNAL);
    assert!(err.message.contains("asked to fail"), "{}", err.message);

    let err = plugin.call("CreateContainer", b"\xff\xff\xff").unwrap_err();
    assert_eq!(err.code, code::INVALID_ARGUMENT);
    assert_eq!(
        plugin.call("Nope", b"").unwrap_err().code,
        code::UNIMPLEMENTED
    );
    assert_eq!(plugin.status().snapshot().requests, 4);
}

#[test]
fn synchronize_updates_existing_containers_of_known_pods() {
    let plugin = plugin(FailurePolicy::Ignore);
    let request = api::SynchronizeRequest {
        pods: vec![
            nri_pod("sb1", &[("test/shares", "300")]),
            nri_pod("sb2", &[]),
        ],
        containers: vec![
            nri_container("c1", "sb1"),
            nri_container("c2", "sb2"),
            nri_container("orphan", "gone"),
        ],
    };
    let response = plugin.synchronize(&request);
    assert_eq!(response.update.len(), 1, "{response:?}");
    assert_eq!(response.update[0].container_id, "c1");
    let resources = response.update[0]
        .linux
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap();
    assert_eq!(resources.cpu.as_ref().unwrap().shares.unwrap().value, 300);
}

#[test]
fn update_container_uses_the_new_resources_and_must_succeed() {
    let plugin = plugin(FailurePolicy::Ignore);
    let request = api::UpdateContainerRequest {
        pod: Some(nri_pod("sb1", &[("test/shares", "700")])),
        container: Some(nri_container("c1", "sb1")),
        linux_resources: None,
    };
    let response = plugin.update_container(&request).unwrap();
    assert_eq!(response.update.len(), 1);
    assert!(!response.update[0].ignore_failure);
}

// ---- fake runtime ----

struct FakeRuntimeConn {
    stream: UnixStream,
    decoder: FrameDecoder,
    next_stream: u32,
}

impl FakeRuntimeConn {
    async fn next_message(&mut self) -> Option<Message> {
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(message) = self.decoder.next_message().unwrap() {
                return Some(message);
            }
            let read = self.stream.read(&mut buffer).await.ok()?;
            if read == 0 {
                return None;
            }
            self.decoder.feed(&buffer[..read]);
        }
    }

    /// Reads the RegisterPlugin request and acknowledges it.
    async fn accept_registration(&mut self) -> api::RegisterPluginRequest {
        let message = self.next_message().await.unwrap();
        assert_eq!(
            (message.conn, message.kind),
            (RUNTIME_CONN, MessageKind::Request)
        );
        let request = envelope::Request::decode(message.payload.as_slice()).unwrap();
        assert_eq!(request.service, RUNTIME_SERVICE);
        assert_eq!(request.method, "RegisterPlugin");
        let mut frame = Vec::new();
        let reply = envelope::Response::default().encode_to_vec();
        encode_message(
            RUNTIME_CONN,
            message.stream_id,
            MessageKind::Response,
            &reply,
            &mut frame,
        )
        .unwrap();
        self.stream.write_all(&frame).await.unwrap();
        api::RegisterPluginRequest::decode(request.payload.as_slice()).unwrap()
    }

    /// Calls a Plugin-service method and returns the response envelope.
    async fn call(&mut self, method: &str, payload: Vec<u8>) -> envelope::Response {
        let stream_id = self.next_stream;
        self.next_stream += 2;
        let request = envelope::Request {
            service: PLUGIN_SERVICE.into(),
            method: method.into(),
            payload,
            ..Default::default()
        };
        let mut frame = Vec::new();
        encode_message(
            PLUGIN_CONN,
            stream_id,
            MessageKind::Request,
            &request.encode_to_vec(),
            &mut frame,
        )
        .unwrap();
        // Send in two pieces to exercise reassembly on the plugin side.
        let (head, rest) = frame.split_at(frame.len() / 2);
        self.stream.write_all(head).await.unwrap();
        self.stream.flush().await.unwrap();
        self.stream.write_all(rest).await.unwrap();
        let message = self.next_message().await.unwrap();
        assert_eq!(
            (message.conn, message.kind, message.stream_id),
            (PLUGIN_CONN, MessageKind::Response, stream_id)
        );
        envelope::Response::decode(message.payload.as_slice()).unwrap()
    }
}

async fn accept(listener: &UnixListener, within: Duration) -> Option<FakeRuntimeConn> {
    let (stream, _) = tokio::time::timeout(within, listener.accept())
        .await
        .ok()?
        .ok()?;
    Some(FakeRuntimeConn {
        stream,
        decoder: FrameDecoder::new(),
        next_stream: 1,
    })
}

async fn wait_for(
    status: &NriStatus,
    done: impl Fn(&super::status::NriStatusSnapshot) -> bool,
) -> super::status::NriStatusSnapshot {
    for _ in 0..300 {
        let snapshot = status.snapshot();
        if done(&snapshot) {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    status.snapshot()
}

fn supervisor(socket: &Path, status: NriStatus) -> NriSupervisor<NriPlugin> {
    NriSupervisor {
        socket: socket.to_path_buf(),
        registration: Registration {
            plugin_name: "koordlet_nri".into(),
            plugin_index: "00".into(),
            timeout: Duration::from_secs(30),
        },
        backoff: Backoff {
            initial: Duration::from_millis(20),
            factor: 2.0,
            cap: Duration::from_millis(200),
        },
        service: Arc::new(NriPlugin::new(
            dispatcher(FailurePolicy::Ignore),
            None,
            status.clone(),
        )),
        status,
    }
}

#[tokio::test]
async fn plugin_registers_serves_and_reconnects_with_exactly_one_connection() {
    let dir = temp_dir("runtime");
    let socket = dir.join("nri.sock");
    let status = NriStatus::new(NriState::WaitingForSocket {
        socket: socket.clone(),
    });
    let shutdown = koord_common::Shutdown::new();
    let task = tokio::spawn(supervisor(&socket, status.clone()).run(shutdown.clone()));

    // No socket yet: the supervisor waits and says so.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(matches!(
        status.snapshot().state,
        NriState::WaitingForSocket { .. }
    ));
    let listener = UnixListener::bind(&socket).unwrap();

    let mut first = accept(&listener, Duration::from_secs(30))
        .await
        .expect("first connection");
    let registration = first.accept_registration().await;
    assert_eq!(registration.plugin_name, "koordlet_nri");
    assert_eq!(registration.plugin_idx, "00");
    let configure = api::ConfigureRequest {
        runtime_name: "fake".into(),
        runtime_version: "9.9".into(),
        ..Default::default()
    };
    let response = first.call("Configure", configure.encode_to_vec()).await;
    let events = api::ConfigureResponse::decode(response.payload.as_slice())
        .unwrap()
        .events;
    assert_eq!(events, event_mask(&DEFAULT_EVENTS));
    let sync = api::SynchronizeRequest {
        pods: vec![nri_pod("sb1", &[("test/shares", "256")])],
        containers: vec![nri_container("c1", "sb1")],
    };
    let response = first.call("Synchronize", sync.encode_to_vec()).await;
    let updates = api::SynchronizeResponse::decode(response.payload.as_slice())
        .unwrap()
        .update;
    assert_eq!(updates.len(), 1);
    let create = api::CreateContainerRequest {
        pod: Some(nri_pod("sb1", &[("test/shares", "512")])),
        container: Some(nri_container("c2", "sb1")),
    };
    let response = first.call("CreateContainer", create.encode_to_vec()).await;
    assert!(response.status.is_none());
    let adjust = api::CreateContainerResponse::decode(response.payload.as_slice())
        .unwrap()
        .adjust
        .unwrap();
    assert_eq!(
        adjust
            .linux
            .unwrap()
            .resources
            .unwrap()
            .cpu
            .unwrap()
            .shares
            .unwrap()
            .value,
        512
    );
    let response = first.call("Bogus", Vec::new()).await;
    assert_eq!(response.status.unwrap().code, code::UNIMPLEMENTED);

    let snapshot = status.snapshot();
    assert!(snapshot.is_connected(), "{:?}", snapshot.state);
    assert_eq!(
        snapshot.state.to_string(),
        format!("connected to fake 9.9 on {}", socket.display())
    );

    // While the first connection lives, no second one is opened.
    assert!(
        accept(&listener, Duration::from_millis(600))
            .await
            .is_none()
    );

    // The runtime goes away (restart): exactly one new connection follows.
    drop(first);
    let mut second = accept(&listener, Duration::from_secs(30))
        .await
        .expect("reconnect");
    second.accept_registration().await;
    assert!(
        accept(&listener, Duration::from_millis(600))
            .await
            .is_none(),
        "a duplicate connection"
    );
    let snapshot = wait_for(&status, |s| s.registrations == 2).await;
    assert_eq!(snapshot.connections, 2);
    assert_eq!(snapshot.registrations, 2);

    shutdown.trigger(koord_common::ShutdownReason::Requested("test".into()));
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    // The plugin closed its end.
    assert!(second.next_message().await.is_none());
    assert!(!status.snapshot().is_connected());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_refused_registration_is_retried() {
    let dir = temp_dir("refuse");
    let socket = dir.join("nri.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let status = NriStatus::new(NriState::WaitingForSocket {
        socket: socket.clone(),
    });
    let shutdown = koord_common::Shutdown::new();
    let task = tokio::spawn(supervisor(&socket, status.clone()).run(shutdown.clone()));

    let mut first = accept(&listener, Duration::from_secs(30)).await.unwrap();
    let message = first.next_message().await.unwrap();
    let refusal = envelope::Response {
        status: Some(envelope::Status {
            code: 6,
            message: "plugin already registered".into(),
        }),
        payload: Vec::new(),
    };
    let mut frame = Vec::new();
    encode_message(
        RUNTIME_CONN,
        message.stream_id,
        MessageKind::Response,
        &refusal.encode_to_vec(),
        &mut frame,
    )
    .unwrap();
    first.stream.write_all(&frame).await.unwrap();
    // The plugin hangs up, then tries again.
    assert!(first.next_message().await.is_none());
    let mut second = accept(&listener, Duration::from_secs(30)).await.unwrap();
    second.accept_registration().await;
    let snapshot = wait_for(&status, |s| s.registrations == 1).await;
    assert_eq!(snapshot.connections, 2);
    assert_eq!(snapshot.registrations, 1);

    shutdown.trigger(koord_common::ShutdownReason::Requested("test".into()));
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- real hooks: resctrl class, normalization idempotence, start order ----

use crate::runtimehooks::RuntimeHooks;
use crate::runtimehooks::apply::SideEffectApplier;
use crate::runtimehooks::hooks::testutil::bare_caps;
use crate::runtimehooks::hooks::{HookOptions, all_hooks, cpunormalization, resctrl};
use crate::runtimehooks::rules::NodeRules;
use crate::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs, StatesInformer};
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn caps_with(controllers: &[&str]) -> crate::capabilities::NodeCapabilities {
    let mut caps = bare_caps();
    caps.cgroup.controllers = controllers.iter().map(|c| c.to_string()).collect();
    caps
}

fn applier_under(base: &Path) -> SideEffectApplier {
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, base.join("cg"));
    let executor = crate::resourceexecutor::ResourceExecutor::new(
        layout,
        crate::resourceexecutor::ExecutorConfig::default(),
    );
    SideEffectApplier::new(executor, base.join("proc"), base.join("resctrl"))
}

#[test]
fn the_rdt_class_goes_into_the_creation_adjustment_only() {
    let mut adjustment = Adjustment {
        rdt_class: Some("koordlet-uid-1".into()),
        ..Adjustment::default()
    };
    // Alone, it still makes a Linux adjustment.
    let adjust = container_adjustment(&adjustment);
    let resources = adjust.linux.unwrap().resources.unwrap();
    assert_eq!(
        resources.rdt_class,
        Some(api::OptionalString {
            value: "koordlet-uid-1".into()
        })
    );
    assert!(resources.cpu.is_none() && resources.memory.is_none());
    // A running container keeps its class.
    assert!(super::plugin::container_update("c1", &adjustment).is_none());
    adjustment.resources.cpu_shares = Some(64);
    let update = super::plugin::container_update("c1", &adjustment).unwrap();
    let resources = update.linux.unwrap().resources.unwrap();
    assert_eq!(resources.rdt_class, None);
    assert_eq!(resources.cpu.unwrap().shares.unwrap().value, 64);
}

#[test]
fn create_container_sets_the_pods_resctrl_group_as_rdt_class() {
    let base = temp_dir("rdt");
    let mut caps = caps_with(&["cpu", "cpuset", "memory"]);
    caps.resctrl.supported = true;
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, base.join("cg"));
    let dispatcher = Arc::new(HookDispatcher::new(
        vec![(Arc::new(resctrl::ResctrlHook) as Arc<dyn Hook>, true)],
        &caps,
        layout,
        FailurePolicyConfig::default(),
    ));
    assert!(dispatcher.is_active("Resctrl"));
    let plugin = NriPlugin::new(
        dispatcher,
        Some(applier_under(&base)),
        NriStatus::new(NriState::Disabled),
    );
    let mut pod = nri_pod("sb1", &[("koordinator.sh/qosClass", "LS")]);
    pod.annotations.insert(
        apis::extension::ANNOTATION_RESCTRL.to_string(),
        r#"{"llc":{"schemata":{"range":[0,50]}}}"#.to_string(),
    );
    let request = api::CreateContainerRequest {
        pod: Some(pod.clone()),
        container: Some(nri_container("c1", "sb1")),
    };
    let rdt_class = |response: api::CreateContainerResponse| {
        response
            .adjust
            .and_then(|a| a.linux)
            .and_then(|l| l.resources)
            .and_then(|r| r.rdt_class)
            .map(|c| c.value)
    };

    // The group RunPodSandbox made exists: the container is created in it.
    std::fs::create_dir_all(base.join("resctrl/koordlet-uid-1")).unwrap();
    let response = plugin.create_container(&request).unwrap();
    assert_eq!(rdt_class(response).as_deref(), Some("koordlet-uid-1"));

    // No group (its creation failed): no class, so runc does not refuse the container.
    std::fs::remove_dir(base.join("resctrl/koordlet-uid-1")).unwrap();
    let response = plugin.create_container(&request).unwrap();
    assert_eq!(rdt_class(response), None);

    // A pod without the annotation: no class either.
    std::fs::create_dir_all(base.join("resctrl/koordlet-uid-1")).unwrap();
    let plain = api::CreateContainerRequest {
        pod: Some(nri_pod("sb1", &[("koordinator.sh/qosClass", "LS")])),
        container: Some(nri_container("c1", "sb1")),
    };
    assert_eq!(rdt_class(plugin.create_container(&plain).unwrap()), None);
    let _ = std::fs::remove_dir_all(&base);
}

/// A pod object as the states informer holds it: one container `main` with
/// a CPU limit of `cpu_limit`.
fn spec_pod(uid: &str, qos: &str, cpu_limit: &str) -> k8s::Pod {
    k8s::Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            labels: Some([("koordinator.sh/qosClass".to_string(), qos.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(k8s::PodSpec {
            containers: vec![k8s::Container {
                name: "main".into(),
                resources: Some(k8s::ResourceRequirements {
                    limits: Some([("cpu".to_string(), Quantity(cpu_limit.to_string()))].into()),
                    ..Default::default()
                }),
                ..k8s::Container::default()
            }],
            ..k8s::PodSpec::default()
        }),
        status: Some(k8s::PodStatus {
            qos_class: Some("Burstable".into()),
            ..k8s::PodStatus::default()
        }),
    }
}

fn states_with(pods: Vec<k8s::Pod>) -> StatesInformer {
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    states.set_pods(PodsSnapshot {
        pods,
        origin: PodsOrigin::File,
        synced_at: std::time::SystemTime::now(),
    });
    states
}

/// An LS container whose runtime CFS quota is `quota`.
fn ls_container(quota: i64) -> api::Container {
    let mut container = nri_container("c1", "sb1");
    if let Some(linux) = container.linux.as_mut() {
        linux.cgroups_path = "/kubepods/burstable/poduid-1/c1".into();
        linux.resources = Some(api::LinuxResources {
            cpu: Some(api::LinuxCpu {
                quota: Some(api::OptionalInt64 { value: quota }),
                period: Some(api::OptionalUInt64 { value: 100_000 }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    container
}

fn normalization_plugin(states: Option<StatesInformer>) -> NriPlugin {
    let dispatcher = Arc::new(HookDispatcher::new(
        vec![(
            Arc::new(cpunormalization::CpuNormalization) as Arc<dyn Hook>,
            true,
        )],
        &caps_with(&["cpu"]),
        CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
        FailurePolicyConfig::default(),
    ));
    dispatcher.set_rules(NodeRules {
        cpu_normalization_ratio: Some(1.25),
        ..NodeRules::default()
    });
    let plugin = NriPlugin::new(dispatcher, None, NriStatus::new(NriState::Disabled));
    match states {
        Some(states) => plugin.with_states(states),
        None => plugin,
    }
}

fn update_quota(update: &api::ContainerUpdate) -> Option<i64> {
    update
        .linux
        .as_ref()?
        .resources
        .as_ref()?
        .cpu
        .as_ref()?
        .quota
        .as_ref()
        .map(|q| q.value)
}

#[test]
fn synchronize_rounds_and_updates_do_not_scale_the_quota_again() {
    let mut pod = nri_pod("sb1", &[("koordinator.sh/qosClass", "LS")]);
    if let Some(linux) = pod.linux.as_mut() {
        linux.cgroup_parent = "/kubepods/burstable/poduid-1".into();
    }
    // The spec says 2 CPUs: 200000 µs per 100 ms, normalized to 160000.
    let plugin = normalization_plugin(Some(states_with(vec![spec_pod("uid-1", "LS", "2")])));

    // Created while koordlet was away: the kubelet's 200000 is in place.
    let mut current = 200_000;
    let mut decided = Vec::new();
    for _round in 0..3 {
        let response = plugin.synchronize(&api::SynchronizeRequest {
            pods: vec![pod.clone()],
            containers: vec![ls_container(current)],
        });
        assert_eq!(response.update.len(), 1, "{response:?}");
        let quota = update_quota(&response.update[0]).unwrap();
        decided.push(quota);
        // The runtime applies it; the next reconnect sees it as current.
        current = quota;
    }
    assert_eq!(decided, vec![160_000, 160_000, 160_000]);

    // UpdateContainer without new resources: the same, from the spec.
    let update = |resources: Option<api::LinuxResources>| {
        let response = plugin
            .update_container(&api::UpdateContainerRequest {
                pod: Some(pod.clone()),
                container: Some(ls_container(160_000)),
                linux_resources: resources,
            })
            .unwrap();
        update_quota(&response.update[0])
    };
    assert_eq!(update(None), Some(160_000));
    // With the kubelet's new values (a resize to 3 CPUs): those are scaled.
    let resized = api::LinuxResources {
        cpu: Some(api::LinuxCpu {
            quota: Some(api::OptionalInt64 { value: 300_000 }),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(update(Some(resized)), Some(240_000));

    // A pod the informer does not know: the current (maybe already scaled)
    // quota is not scaled again; nothing is decided for it.
    let unknown = normalization_plugin(Some(states_with(Vec::new())));
    for _round in 0..2 {
        let response = unknown.synchronize(&api::SynchronizeRequest {
            pods: vec![pod.clone()],
            containers: vec![ls_container(160_000)],
        });
        assert!(response.update.iter().all(|u| update_quota(u).is_none()));
    }
    let no_states = normalization_plugin(None);
    let response = no_states.synchronize(&api::SynchronizeRequest {
        pods: vec![pod.clone()],
        containers: vec![ls_container(160_000)],
    });
    assert!(response.update.iter().all(|u| update_quota(u).is_none()));
    // Creation still scales the kubelet's value, as before.
    let created = unknown
        .create_container(&api::CreateContainerRequest {
            pod: Some(pod),
            container: Some(ls_container(200_000)),
        })
        .unwrap();
    let quota = created
        .adjust
        .and_then(|a| a.linux)
        .and_then(|l| l.resources)
        .and_then(|r| r.cpu)
        .and_then(|c| c.quota)
        .map(|q| q.value);
    assert_eq!(quota, Some(160_000));
}

/// An LSR pod bound to CPU 1, running (what makes the LS share pool 0,2-3
/// on a 4-CPU node).
fn lsr_pod() -> k8s::Pod {
    k8s::Pod {
        metadata: ObjectMeta {
            name: Some("lsr".into()),
            namespace: Some("default".into()),
            uid: Some("lsr".into()),
            labels: Some([("koordinator.sh/qosClass".to_string(), "LSR".to_string())].into()),
            annotations: Some(
                [(
                    "scheduling.koordinator.sh/resource-status".to_string(),
                    r#"{"cpuset":"1"}"#.to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(k8s::PodSpec {
            containers: vec![k8s::Container {
                name: "main".into(),
                ..k8s::Container::default()
            }],
            ..k8s::PodSpec::default()
        }),
        status: Some(k8s::PodStatus {
            qos_class: Some("Guaranteed".into()),
            container_statuses: Some(vec![k8s::ContainerStatus {
                name: "main".into(),
                container_id: Some("containerd://app".into()),
                ..k8s::ContainerStatus::default()
            }]),
            ..k8s::PodStatus::default()
        }),
    }
}

struct StartedHooks {
    base: PathBuf,
    socket: PathBuf,
    listener: UnixListener,
    status: NriStatus,
    states: StatesInformer,
    shutdown: koord_common::Shutdown,
}

/// The daemon's wiring (`RuntimeHooks::start`) with the default hooks, a
/// fake runtime's socket and a states informer that has not synced.
fn start_hooks(label: &str, timeout: Duration) -> StartedHooks {
    let base = temp_dir(label);
    let socket = base.join("nri.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, base.join("cg"));
    let dispatcher = HookDispatcher::new(
        all_hooks(&HookOptions::default()),
        &caps_with(&["cpu", "cpuset", "memory"]),
        layout,
        FailurePolicyConfig::default(),
    );
    let hooks = RuntimeHooks {
        dispatcher: Arc::new(dispatcher),
        applier: applier_under(&base),
    };
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let args = crate::runtimehooks::RuntimeHooksArgs {
        states_sync_timeout: timeout,
        ..Default::default()
    };
    let nri = super::NriArgs {
        enable: true,
        socket_path: socket.clone(),
        var_run_root_dir: "/var/run/".into(),
        plugin_name: "koordlet_nri".into(),
        plugin_index: "00".into(),
        connect_timeout: Duration::from_secs(30),
        backoff_duration: Duration::from_millis(20),
        backoff_factor: 2.0,
        backoff_cap: Duration::from_millis(200),
        backoff_steps: super::DEFAULT_BACKOFF_STEPS,
    };
    let shutdown = koord_common::Shutdown::new();
    let status = hooks
        .start(
            &args,
            &nri,
            true,
            &states,
            Some("0-3".parse().unwrap()),
            None,
            &koord_common::MetricsRegistry::new("koordlet"),
            &koord_common::HealthRegistry::new(),
            &shutdown,
        )
        .unwrap();
    StartedHooks {
        base,
        socket,
        listener,
        status,
        states,
        shutdown,
    }
}

/// Registers, configures and synchronizes one LS pod's container; returns
/// the cpuset of its update (`None`: no cpuset decided).
async fn synchronize_ls_container(conn: &mut FakeRuntimeConn) -> Option<String> {
    conn.accept_registration().await;
    conn.call(
        "Configure",
        api::ConfigureRequest::default().encode_to_vec(),
    )
    .await;
    let sync = api::SynchronizeRequest {
        pods: vec![nri_pod("sb1", &[("koordinator.sh/qosClass", "LS")])],
        containers: vec![nri_container("c1", "sb1")],
    };
    let response = conn.call("Synchronize", sync.encode_to_vec()).await;
    assert!(response.status.is_none(), "{:?}", response.status);
    let updates = api::SynchronizeResponse::decode(response.payload.as_slice())
        .unwrap()
        .update;
    updates
        .iter()
        .filter_map(|u| u.linux.as_ref()?.resources.as_ref()?.cpu.as_ref())
        .map(|cpu| cpu.cpus.clone())
        .find(|cpus| !cpus.is_empty())
}

#[tokio::test]
async fn the_nri_plugin_waits_for_the_states_informer_so_synchronize_sees_its_rules() {
    let hooks = start_hooks("start-order", Duration::from_secs(120));
    // The informer has not synced: nobody connects to the runtime.
    assert!(
        accept(&hooks.listener, Duration::from_millis(700))
            .await
            .is_none(),
        "the plugin connected before the states informer synced"
    );
    assert_eq!(
        hooks.status.snapshot().state,
        NriState::WaitingForStates {
            socket: hooks.socket.clone()
        }
    );
    assert!(
        hooks.status.readiness().is_err(),
        "socket there, not registered"
    );

    // The pods arrive: the LSR pod holds CPU 1, so the LS pool is 0,2-3.
    hooks.states.set_pods(PodsSnapshot {
        pods: vec![lsr_pod()],
        origin: PodsOrigin::File,
        synced_at: std::time::SystemTime::now(),
    });
    let mut conn = accept(&hooks.listener, Duration::from_secs(30))
        .await
        .expect("the plugin connects once the informer synced");
    // The one Synchronize of this connection already uses the synced rules.
    assert_eq!(
        synchronize_ls_container(&mut conn).await.as_deref(),
        Some("0,2-3")
    );
    let snapshot = wait_for(&hooks.status, |s| s.registrations == 1).await;
    assert!(snapshot.is_connected(), "{:?}", snapshot.state);

    hooks
        .shutdown
        .trigger(koord_common::ShutdownReason::Requested("test".into()));
    let _ = std::fs::remove_dir_all(&hooks.base);
}

#[tokio::test]
async fn a_states_informer_that_never_syncs_delays_the_plugin_only_until_the_timeout() {
    let hooks = start_hooks("start-timeout", Duration::from_millis(400));
    let started = std::time::Instant::now();
    let mut conn = accept(&hooks.listener, Duration::from_secs(30))
        .await
        .expect("the plugin starts after the timeout");
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Started without the informer: no share pool is known, none is forced.
    assert_eq!(synchronize_ls_container(&mut conn).await, None);
    hooks
        .shutdown
        .trigger(koord_common::ShutdownReason::Requested("test".into()));
    let _ = std::fs::remove_dir_all(&hooks.base);
}

#[test]
fn create_container_adds_the_allocated_rdma_device_nodes() {
    use crate::runtimehooks::hooks::rdma::RdmaDeviceInject;
    let base = temp_dir("rdma");
    let sys = base.join("sys");
    let write = |path: PathBuf, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(sys.join("class/misc/rdma_cm/dev"), "10:58\n");
    write(
        sys.join("bus/pci/devices/0000:1f:00.2/infiniband_verbs/uverbs4/dev"),
        "231:196\n",
    );
    let caps = caps_with(&["cpu", "cpuset", "memory"]);
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, base.join("cg"));
    let dispatcher = Arc::new(HookDispatcher::new(
        vec![(
            Arc::new(RdmaDeviceInject::with_sys_root(&sys)) as Arc<dyn Hook>,
            true,
        )],
        &caps,
        layout,
        FailurePolicyConfig::default(),
    ));
    assert!(dispatcher.is_active("RDMADeviceInject"));
    let plugin = NriPlugin::new(dispatcher, None, NriStatus::new(NriState::Disabled));
    let request = |annotation: Option<&str>| {
        let mut pod = nri_pod("sb1", &[("koordinator.sh/qosClass", "LS")]);
        if let Some(value) = annotation {
            pod.annotations.insert(
                apis::extension::ANNOTATION_DEVICE_ALLOCATED.to_string(),
                value.to_string(),
            );
        }
        api::CreateContainerRequest {
            pod: Some(pod),
            container: Some(nri_container("c1", "sb1")),
        }
    };
    let devices = |response: api::CreateContainerResponse| {
        response
            .adjust
            .and_then(|a| a.linux)
            .map(|l| l.devices)
            .unwrap_or_default()
    };

    let response = plugin
        .create_container(&request(Some(
            r#"{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0","extension":{"vfs":[{"minor":2,"busID":"0000:1f:00.2"}]}}]}"#,
        )))
        .unwrap();
    let added = devices(response);
    let summary: Vec<(&str, &str, i64, i64, u32)> = added
        .iter()
        .map(|d| {
            (
                d.path.as_str(),
                d.r#type.as_str(),
                d.major,
                d.minor,
                d.file_mode.as_ref().map(|m| m.value).unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("/dev/infiniband/rdma_cm", "c", 10, 58, 0o666),
            ("/dev/infiniband/uverbs4", "c", 231, 196, 0o666),
        ]
    );

    // No allocation: no devices. A bad one under the default (Ignore)
    // policy: the container is created without devices.
    assert!(devices(plugin.create_container(&request(None)).unwrap()).is_empty());
    let bad = plugin
        .create_container(&request(Some(r#"{"rdma":[{"minor":0,"id":"../etc"}]}"#)))
        .unwrap();
    assert!(devices(bad).is_empty());
    let _ = std::fs::remove_dir_all(&base);
}

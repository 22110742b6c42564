#![allow(clippy::unwrap_used)]
//! Fields a newer kubelet sends that our CRI proto lacks: after a hook answer
//! is merged, the runtime still gets the top-level ones and those nested in
//! singular messages; ones inside list elements are dropped and counted.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apis::runtime::v1alpha1 as hook;
use common::{Behaviour, FakeHook, register};
use hyper_util::rt::{TokioExecutor, TokioIo};
use koord_common::testing::TempDir;
use koord_runtime_proxy::codec::{ForwardingCodec, Received, ReceivingCodec};
use koord_runtime_proxy::config::{CriMethod, Registry};
use koord_runtime_proxy::cri::v1 as cri;
use koord_runtime_proxy::dispatcher::Dispatcher;
use koord_runtime_proxy::metrics::ProxyMetrics;
use koord_runtime_proxy::proxy::{Backend, Proxy, SkipLabel, request_body};
use koord_runtime_proxy::store::MetaStore;
use koord_runtime_proxy::wire::{self, WireType, put_len_field, put_tag, put_varint};
use koord_runtime_proxy::{merge, unix_channel};
use prost::Message;
use prost::bytes::Bytes;
use tonic::{Request, Response, Status};

fn varint_field(number: u32, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_tag(&mut out, number, WireType::Varint);
    put_varint(&mut out, value);
    out
}

fn len_field(number: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_len_field(&mut out, number, payload);
    out
}

/// `message` encoded, then the raw `fields` after it (as a newer sender
/// would write fields this proto lacks).
fn with_fields(message: &impl Message, fields: &[&[u8]]) -> Vec<u8> {
    let mut out = message.encode_to_vec();
    for field in fields {
        out.extend_from_slice(field);
    }
    out
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// What a conforming parser sees as the message at `path`: every occurrence
/// of each singular message along the way, merged (concatenated).
fn merged_view(bytes: &[u8], path: &[u32]) -> Vec<u8> {
    let mut current = bytes.to_vec();
    for &number in path {
        let mut next = Vec::new();
        for field in wire::fields(&current) {
            let field = field.unwrap();
            if field.number == number && field.wire_type == WireType::Len {
                next.extend_from_slice(field.value);
            }
        }
        current = next;
    }
    current
}

/// The raw fields numbered `number` directly in `bytes`.
fn raw_fields(bytes: &[u8], number: u32) -> Vec<Vec<u8>> {
    wire::fields(bytes)
        .map(Result::unwrap)
        .filter(|field| field.number == number)
        .map(|field| field.raw.to_vec())
        .collect()
}

/// Each element of the repeated message field `number` in `bytes`.
fn elements(bytes: &[u8], number: u32) -> Vec<Vec<u8>> {
    wire::fields(bytes)
        .map(Result::unwrap)
        .filter(|field| field.number == number)
        .map(|field| field.value.to_vec())
        .collect()
}

// Field numbers that runtime.v1 (cri-api 0.32) does not use.
const TOP_UNKNOWN: u32 = 50;
const RESOURCES_UNKNOWN_A: u32 = 31;
const RESOURCES_UNKNOWN_B: u32 = 32;
const ELEMENT_UNKNOWN: u32 = 40;

/// A CreateContainerRequest with unknown fields at the top, in
/// config.linux.resources and in the first mount.
fn create_request_bytes() -> Vec<u8> {
    let resources = with_fields(
        &cri::LinuxContainerResources {
            cpu_shares: 2,
            memory_limit_in_bytes: 1 << 30,
            ..Default::default()
        },
        &[
            &varint_field(RESOURCES_UNKNOWN_A, 7),
            &len_field(RESOURCES_UNKNOWN_B, b"future"),
        ],
    );
    let linux = len_field(1, &resources);
    let mount = with_fields(
        &cri::Mount {
            container_path: "/data".into(),
            host_path: "/var/data".into(),
            ..Default::default()
        },
        &[&varint_field(ELEMENT_UNKNOWN, 1)],
    );
    let config = with_fields(
        &cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            envs: vec![cri::KeyValue {
                key: "A".into(),
                value: "1".into(),
            }],
            ..Default::default()
        },
        &[&len_field(7, &mount), &len_field(15, &linux)],
    );
    let sandbox = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "pod".into(),
            uid: "uid-1".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    }
    .encode_to_vec();
    with_fields(
        &cri::CreateContainerRequest {
            pod_sandbox_id: "sandbox-1".into(),
            ..Default::default()
        },
        &[
            &len_field(TOP_UNKNOWN, b"top"),
            &len_field(2, &config),
            &len_field(3, &sandbox),
        ],
    )
}

fn create_answer() -> hook::ContainerResourceHookResponse {
    hook::ContainerResourceHookResponse {
        container_annotations: [("from-hook".to_string(), "yes".to_string())].into(),
        container_resources: Some(hook::LinuxContainerResources {
            cpu_shares: 512,
            ..Default::default()
        }),
        container_envs: [("B".to_string(), "2".to_string())].into(),
        ..Default::default()
    }
}

/// Checks the body sent for the create request after the hook answer merged.
fn assert_create_body(body: &[u8], merged: &cri::CreateContainerRequest) {
    // prost still reads the merged message (the skeleton adds nothing it knows).
    assert_eq!(&cri::CreateContainerRequest::decode(body).unwrap(), merged);
    let resources =
        cri::LinuxContainerResources::decode(merged_view(body, &[2, 15, 1]).as_slice()).unwrap();
    assert_eq!(resources.cpu_shares, 512);
    assert_eq!(resources.memory_limit_in_bytes, 1 << 30);

    assert_eq!(
        raw_fields(body, TOP_UNKNOWN),
        [len_field(TOP_UNKNOWN, b"top")]
    );
    let resources = merged_view(body, &[2, 15, 1]);
    assert_eq!(
        raw_fields(&resources, RESOURCES_UNKNOWN_A),
        [varint_field(RESOURCES_UNKNOWN_A, 7)]
    );
    assert_eq!(
        raw_fields(&resources, RESOURCES_UNKNOWN_B),
        [len_field(RESOURCES_UNKNOWN_B, b"future")]
    );
    let mounts = elements(&merged_view(body, &[2]), 7);
    assert_eq!(mounts.len(), 1, "the skeleton must not add a mount");
    assert!(raw_fields(&mounts[0], ELEMENT_UNKNOWN).is_empty());
    assert_eq!(
        cri::Mount::decode(mounts[0].as_slice())
            .unwrap()
            .container_path,
        "/data"
    );
}

#[test]
fn create_container_keeps_top_level_and_nested_singular_unknowns() {
    let raw = create_request_bytes();
    let mut request = cri::CreateContainerRequest::decode(raw.as_slice()).unwrap();
    let mut context = merge::container_hook_request(&request, None);
    merge::merge_create_answer(&mut request, &mut context, &create_answer());
    assert_eq!(request.config.as_ref().unwrap().envs.len(), 2);

    let metrics = ProxyMetrics::default();
    let body = request_body(
        &metrics,
        CriMethod::CreateContainer,
        Bytes::from(raw.clone()),
        Some(&request),
    );
    assert_create_body(&body, &request);
    assert_eq!(metrics.unknown_fields_forwarded_count("CreateContainer"), 3);
    assert_eq!(metrics.unknown_fields_dropped_count("CreateContainer"), 1);

    // Nothing merged: the kubelet's bytes go on untouched, the mount's unknown included.
    let untouched = request_body::<cri::CreateContainerRequest>(
        &metrics,
        CriMethod::CreateContainer,
        Bytes::from(raw.clone()),
        None,
    );
    assert_eq!(untouched.as_ref(), raw.as_slice());
    assert_eq!(metrics.unknown_fields_dropped_count("CreateContainer"), 1);
}

#[test]
fn run_pod_sandbox_keeps_unknowns_in_linux_resources() {
    // config (1) { port_mappings (5) [ { <unknown> } ], linux (8) { resources (5) { <unknown> } } }
    let resources = with_fields(
        &cri::LinuxContainerResources {
            cpu_shares: 1024,
            ..Default::default()
        },
        &[&varint_field(RESOURCES_UNKNOWN_A, 3)],
    );
    let linux = with_fields(
        &cri::LinuxPodSandboxConfig {
            cgroup_parent: "/kubepods".into(),
            ..Default::default()
        },
        &[&len_field(5, &resources)],
    );
    let port = with_fields(
        &cri::PortMapping {
            container_port: 80,
            ..Default::default()
        },
        &[&varint_field(ELEMENT_UNKNOWN, 1)],
    );
    let config = with_fields(
        &cri::PodSandboxConfig {
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        },
        &[&len_field(5, &port), &len_field(8, &linux)],
    );
    let raw = concat(&[
        &len_field(1, &config),
        &len_field(TOP_UNKNOWN, b"top"),
        &len_field(2, b"runc"),
    ]);

    let mut request = cri::RunPodSandboxRequest::decode(raw.as_slice()).unwrap();
    let mut context = merge::pod_hook_request(&request);
    let answer = hook::PodSandboxHookResponse {
        cgroup_parent: "/kubepods/besteffort".into(),
        resources: Some(hook::LinuxContainerResources {
            cpu_shares: 2,
            ..Default::default()
        }),
        ..Default::default()
    };
    merge::merge_pod_answer(&mut request, &mut context, &answer);

    let metrics = ProxyMetrics::default();
    let body = request_body(
        &metrics,
        CriMethod::RunPodSandbox,
        Bytes::from(raw),
        Some(&request),
    );
    assert_eq!(
        cri::RunPodSandboxRequest::decode(body.as_ref()).unwrap(),
        request
    );
    let linux = request.config.unwrap().linux.unwrap();
    assert_eq!(linux.cgroup_parent, "/kubepods/besteffort");
    assert_eq!(linux.resources.unwrap().cpu_shares, 2);

    assert_eq!(
        raw_fields(&body, TOP_UNKNOWN),
        [len_field(TOP_UNKNOWN, b"top")]
    );
    assert_eq!(
        raw_fields(&merged_view(&body, &[1, 8, 5]), RESOURCES_UNKNOWN_A),
        [varint_field(RESOURCES_UNKNOWN_A, 3)]
    );
    let ports = elements(&merged_view(&body, &[1]), 5);
    assert_eq!(ports.len(), 1);
    assert!(raw_fields(&ports[0], ELEMENT_UNKNOWN).is_empty());
    assert_eq!(metrics.unknown_fields_forwarded_count("RunPodSandbox"), 2);
    assert_eq!(metrics.unknown_fields_dropped_count("RunPodSandbox"), 1);
}

#[test]
fn update_resources_drops_list_and_map_element_unknowns_only() {
    // linux (2) { <unknown>, hugepage_limits (8) [ { <unknown> } ], unified (9) { <unknown> } }
    let hugepage = with_fields(
        &cri::HugepageLimit {
            page_size: "2MB".into(),
            limit: 4 << 20,
        },
        &[&varint_field(ELEMENT_UNKNOWN, 1)],
    );
    let unified_entry = concat(&[
        &len_field(1, b"memory.high"),
        &len_field(2, b"max"),
        &varint_field(ELEMENT_UNKNOWN, 1),
    ]);
    let linux = concat(&[
        &varint_field(3, 256),
        &varint_field(RESOURCES_UNKNOWN_A, 9),
        &len_field(8, &hugepage),
        &len_field(9, &unified_entry),
    ]);
    let raw = concat(&[
        &len_field(1, b"container-1"),
        &len_field(2, &linux),
        &varint_field(TOP_UNKNOWN, 1),
    ]);

    let mut request = cri::UpdateContainerResourcesRequest::decode(raw.as_slice()).unwrap();
    // The stored context from CreateContainer holds the hugepage limit.
    let mut context = hook::ContainerResourceHookRequest {
        container_resources: Some(hook::LinuxContainerResources {
            hugepage_limits: vec![hook::HugepageLimit {
                page_size: "2MB".into(),
                limit: 4 << 20,
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    merge::update_context_from_request(&mut context, &request);
    merge::merge_update_answer(&mut request, &mut context, &create_answer());

    let metrics = ProxyMetrics::default();
    let body = request_body(
        &metrics,
        CriMethod::UpdateContainerResources,
        Bytes::from(raw),
        Some(&request),
    );
    let decoded = cri::UpdateContainerResourcesRequest::decode(body.as_ref()).unwrap();
    assert_eq!(decoded, request);
    let linux = decoded.linux.unwrap();
    assert_eq!(linux.cpu_shares, 512);
    assert_eq!(linux.hugepage_limits.len(), 1);
    assert_eq!(linux.unified["memory.high"], "max");

    assert_eq!(
        raw_fields(&body, TOP_UNKNOWN),
        [varint_field(TOP_UNKNOWN, 1)]
    );
    let linux_view = merged_view(&body, &[2]);
    assert_eq!(
        raw_fields(&linux_view, RESOURCES_UNKNOWN_A),
        [varint_field(RESOURCES_UNKNOWN_A, 9)]
    );
    for element in elements(&linux_view, 8)
        .into_iter()
        .chain(elements(&linux_view, 9))
    {
        assert!(raw_fields(&element, ELEMENT_UNKNOWN).is_empty());
    }
    assert_eq!(
        metrics.unknown_fields_forwarded_count("UpdateContainerResources"),
        2
    );
    assert_eq!(
        metrics.unknown_fields_dropped_count("UpdateContainerResources"),
        2
    );
}

#[test]
fn an_unwalkable_original_forwards_the_merged_message_alone() {
    // A group-encoded unknown field: prost skips it, the walk refuses it.
    let mut raw = len_field(1, b"container-1");
    put_varint(&mut raw, (u64::from(TOP_UNKNOWN) << 3) | 3); // start group
    raw.extend(varint_field(1, 5));
    put_varint(&mut raw, (u64::from(TOP_UNKNOWN) << 3) | 4); // end group
    let mut request = cri::UpdateContainerResourcesRequest::decode(raw.as_slice()).unwrap();
    assert_eq!(request.container_id, "container-1");
    request.linux = Some(cri::LinuxContainerResources {
        cpu_shares: 64,
        ..Default::default()
    });
    let metrics = ProxyMetrics::default();
    let body = request_body(
        &metrics,
        CriMethod::UpdateContainerResources,
        Bytes::from(raw),
        Some(&request),
    );
    assert_eq!(body.as_ref(), request.encode_to_vec().as_slice());
}

// ---- end to end: kubelet-side client -> proxy -> fake runtime, with a hook server ----

/// A hook server that answers container hooks with `create_answer()`.
fn serve_hook(socket: &Path) {
    common::serve_hook(
        socket,
        FakeHook {
            behaviour: Behaviour::Answer,
            pod_answer: Default::default(),
            container_answer: create_answer(),
        },
    );
}

type Recorded = Arc<Mutex<BTreeMap<String, Vec<u8>>>>;

/// A runtime that records each request body by method path and answers
/// every call with a message whose field 1 is the container id (a valid
/// CreateContainerResponse; other responses skip it as unknown).
fn serve_fake_runtime(socket: &Path) -> Recorded {
    let recorded = Recorded::default();
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let bodies = Arc::clone(&recorded);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let bodies = Arc::clone(&bodies);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: tonic::codegen::http::Request<hyper::body::Incoming>| {
                        let bodies = Arc::clone(&bodies);
                        let path = request.uri().path().to_string();
                        async move {
                            let handler =
                                tower::service_fn(move |request: Request<Received<()>>| {
                                    let bodies = Arc::clone(&bodies);
                                    let path = path.clone();
                                    async move {
                                        let raw = request.into_inner().raw.to_vec();
                                        bodies.lock().unwrap().insert(path, raw);
                                        Ok::<_, Status>(Response::new(
                                            cri::CreateContainerResponse {
                                                container_id: "container-1".into(),
                                            },
                                        ))
                                    }
                                });
                            let codec =
                                ReceivingCodec::<(), cri::CreateContainerResponse>::default();
                            Ok::<_, std::convert::Infallible>(
                                tonic::server::Grpc::new(codec)
                                    .unary(handler, request)
                                    .await,
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    recorded
}

/// Sends `body` as is to `method` on the proxy, the way a kubelet would.
async fn call<Resp>(socket: &Path, method: &str, body: Vec<u8>) -> Resp
where
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(unix_channel(socket.to_path_buf()));
    grpc.ready().await.unwrap();
    let path = format!("/runtime.v1.RuntimeService/{method}")
        .parse()
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(60),
        grpc.unary(
            Request::new(Bytes::from(body)),
            path,
            ForwardingCodec::<Resp>::default(),
        ),
    )
    .await
    .unwrap()
    .unwrap()
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_reach_the_runtime_through_the_proxy() {
    let dir = TempDir::new("koord-rp-unknown").unwrap();
    let (runtime_socket, hook_socket, proxy_socket) = (
        dir.path().join("runtime.sock"),
        dir.path().join("hook.sock"),
        dir.path().join("proxy.sock"),
    );
    let hooks = dir.path().join("hookserver.d");
    std::fs::create_dir_all(&hooks).unwrap();
    register(
        &hooks,
        "hook.json",
        &hook_socket,
        "Fail",
        &["PreCreateContainer"],
    );
    serve_hook(&hook_socket);
    let recorded = serve_fake_runtime(&runtime_socket);

    let metrics = ProxyMetrics::default();
    let runtime = unix_channel(runtime_socket.clone());
    let proxy = Arc::new(Proxy {
        backend: Backend {
            runtime: runtime.clone(),
            image: runtime,
        },
        dispatcher: Dispatcher::new(
            Registry::watch(hooks, Duration::from_secs(60)).await,
            Duration::from_secs(30),
            metrics.clone(),
        ),
        store: MetaStore::default(),
        metrics: metrics.clone(),
        skip: SkipLabel {
            key: "skip".into(),
            value: "true".into(),
        },
        max_message_size: koord_runtime_proxy::DEFAULT_MAX_MESSAGE_SIZE,
    });
    let listener = tokio::net::UnixListener::bind(&proxy_socket).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(Arc::clone(&proxy).serve(listener, async move {
        let _ = stopped.await;
    }));

    let raw = create_request_bytes();
    let created: cri::CreateContainerResponse =
        call(&proxy_socket, "CreateContainer", raw.clone()).await;
    assert_eq!(created.container_id, "container-1");

    // What the proxy should have sent: the request with the hook answer merged.
    let mut expected = cri::CreateContainerRequest::decode(raw.as_slice()).unwrap();
    let mut context = merge::container_hook_request(&expected, None);
    merge::merge_create_answer(&mut expected, &mut context, &create_answer());
    let body = recorded.lock().unwrap()["/runtime.v1.RuntimeService/CreateContainer"].clone();
    assert_create_body(&body, &expected);
    assert_eq!(metrics.unknown_fields_dropped_count("CreateContainer"), 1);

    // A call with nothing to merge reaches the runtime byte for byte.
    let stop_request = with_fields(
        &cri::StopContainerRequest {
            container_id: "container-1".into(),
            timeout: 10,
        },
        &[&len_field(TOP_UNKNOWN, b"grace")],
    );
    let _: cri::StopContainerResponse =
        call(&proxy_socket, "StopContainer", stop_request.clone()).await;
    let body = recorded.lock().unwrap()["/runtime.v1.RuntimeService/StopContainer"].clone();
    assert_eq!(body, stop_request);

    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
}

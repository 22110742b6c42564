//! The RuntimeHookService must stay byte-compatible with upstream Koordinator:
//! same package path, method paths and field numbers. These tests pin the
//! wire format and run a real gRPC server/client pair over loopback TCP.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use apis::runtime::v1alpha1::runtime_hook_service_client::RuntimeHookServiceClient;
use apis::runtime::v1alpha1::runtime_hook_service_server::{
    RuntimeHookService, RuntimeHookServiceServer,
};
use apis::runtime::v1alpha1::{
    ContainerMetadata, ContainerResourceHookRequest, ContainerResourceHookResponse, HugepageLimit,
    LinuxContainerResources, PodSandboxHookRequest, PodSandboxHookResponse, PodSandboxMetadata,
};
use prost::Message;
use tonic::{Request, Response, Status};

/// Protobuf tag byte for a field: (number << 3) | wire type.
fn tag(field_number: u8, wire_type: u8) -> u8 {
    (field_number << 3) | wire_type
}

const VARINT: u8 = 0;
const LEN: u8 = 2;

#[test]
fn linux_container_resources_field_numbers() {
    let checks: Vec<(LinuxContainerResources, u8, u8)> = vec![
        (
            LinuxContainerResources {
                cpu_period: 1,
                ..Default::default()
            },
            1,
            VARINT,
        ),
        (
            LinuxContainerResources {
                cpu_quota: 1,
                ..Default::default()
            },
            2,
            VARINT,
        ),
        (
            LinuxContainerResources {
                cpu_shares: 1,
                ..Default::default()
            },
            3,
            VARINT,
        ),
        (
            LinuxContainerResources {
                memory_limit_in_bytes: 1,
                ..Default::default()
            },
            4,
            VARINT,
        ),
        (
            LinuxContainerResources {
                oom_score_adj: 1,
                ..Default::default()
            },
            5,
            VARINT,
        ),
        (
            LinuxContainerResources {
                cpuset_cpus: "0".into(),
                ..Default::default()
            },
            6,
            LEN,
        ),
        (
            LinuxContainerResources {
                cpuset_mems: "0".into(),
                ..Default::default()
            },
            7,
            LEN,
        ),
        (
            LinuxContainerResources {
                hugepage_limits: vec![HugepageLimit {
                    page_size: "2MB".into(),
                    limit: 1,
                }],
                ..Default::default()
            },
            8,
            LEN,
        ),
        (
            LinuxContainerResources {
                unified: BTreeMap::from([("k".into(), "v".into())]),
                ..Default::default()
            },
            9,
            LEN,
        ),
        (
            LinuxContainerResources {
                memory_swap_limit_in_bytes: 1,
                ..Default::default()
            },
            10,
            VARINT,
        ),
    ];
    for (message, number, wire_type) in checks {
        let bytes = message.encode_to_vec();
        assert_eq!(
            bytes[0],
            tag(number, wire_type),
            "field {number} of {message:?}"
        );
    }
}

#[test]
fn hook_message_field_numbers() {
    let container = ContainerResourceHookRequest {
        container_envs: BTreeMap::from([("A".into(), "1".into())]),
        ..Default::default()
    };
    assert_eq!(container.encode_to_vec()[0], tag(9, LEN));
    let container = ContainerResourceHookRequest {
        pod_cgroup_parent: "/kubepods".into(),
        ..Default::default()
    };
    assert_eq!(container.encode_to_vec()[0], tag(8, LEN));
    let response = ContainerResourceHookResponse {
        container_envs: BTreeMap::from([("A".into(), "1".into())]),
        ..Default::default()
    };
    assert_eq!(response.encode_to_vec()[0], tag(4, LEN));
    let sandbox = PodSandboxHookRequest {
        resources: Some(LinuxContainerResources::default()),
        ..Default::default()
    };
    assert_eq!(sandbox.encode_to_vec()[0], tag(7, LEN));
    let sandbox_response = PodSandboxHookResponse {
        cgroup_parent: "/kubepods/besteffort".into(),
        ..Default::default()
    };
    assert_eq!(sandbox_response.encode_to_vec()[0], tag(3, LEN));
    let meta = PodSandboxMetadata {
        attempt: 3,
        ..Default::default()
    };
    assert_eq!(meta.encode_to_vec(), vec![tag(4, VARINT), 3]);
    let container_meta = ContainerMetadata {
        id: "c".into(),
        ..Default::default()
    };
    assert_eq!(container_meta.encode_to_vec(), vec![tag(3, LEN), 1, b'c']);
}

#[test]
fn method_paths_match_upstream() {
    // Upstream clients address methods as /runtime.v1alpha1.RuntimeHookService/<Method>.
    let generated = include_str!(concat!(env!("OUT_DIR"), "/runtime.v1alpha1.rs"));
    for method in [
        "PreRunPodSandboxHook",
        "PostStopPodSandboxHook",
        "PreCreateContainerHook",
        "PreStartContainerHook",
        "PostStartContainerHook",
        "PostStopContainerHook",
        "PreUpdateContainerResourcesHook",
    ] {
        let path = format!("/runtime.v1alpha1.RuntimeHookService/{method}");
        assert!(generated.contains(&path), "missing method path {path}");
    }
}

/// A hook server that echoes what it received into the response, so the
/// client can check that every field crossed the wire.
struct EchoHooks;

fn echo_container(request: ContainerResourceHookRequest) -> ContainerResourceHookResponse {
    let mut annotations = request.container_annotations;
    annotations.insert(
        "echo/container".into(),
        request
            .container_meta
            .map(|meta| meta.name)
            .unwrap_or_default(),
    );
    ContainerResourceHookResponse {
        container_annotations: annotations,
        container_resources: request.container_resources,
        pod_cgroup_parent: request.pod_cgroup_parent,
        container_envs: request.container_envs,
    }
}

fn echo_sandbox(request: PodSandboxHookRequest) -> PodSandboxHookResponse {
    PodSandboxHookResponse {
        labels: request.labels,
        annotations: request.annotations,
        cgroup_parent: request.cgroup_parent,
        resources: request.resources,
    }
}

#[tonic::async_trait]
impl RuntimeHookService for EchoHooks {
    async fn pre_run_pod_sandbox_hook(
        &self,
        request: Request<PodSandboxHookRequest>,
    ) -> Result<Response<PodSandboxHookResponse>, Status> {
        Ok(Response::new(echo_sandbox(request.into_inner())))
    }
    async fn post_stop_pod_sandbox_hook(
        &self,
        request: Request<PodSandboxHookRequest>,
    ) -> Result<Response<PodSandboxHookResponse>, Status> {
        Ok(Response::new(echo_sandbox(request.into_inner())))
    }
    async fn pre_create_container_hook(
        &self,
        request: Request<ContainerResourceHookRequest>,
    ) -> Result<Response<ContainerResourceHookResponse>, Status> {
        Ok(Response::new(echo_container(request.into_inner())))
    }
    async fn pre_start_container_hook(
        &self,
        request: Request<ContainerResourceHookRequest>,
    ) -> Result<Response<ContainerResourceHookResponse>, Status> {
        Ok(Response::new(echo_container(request.into_inner())))
    }
    async fn post_start_container_hook(
        &self,
        request: Request<ContainerResourceHookRequest>,
    ) -> Result<Response<ContainerResourceHookResponse>, Status> {
        Ok(Response::new(echo_container(request.into_inner())))
    }
    async fn post_stop_container_hook(
        &self,
        _request: Request<ContainerResourceHookRequest>,
    ) -> Result<Response<ContainerResourceHookResponse>, Status> {
        Err(Status::failed_precondition(
            "post-stop refused by test server",
        ))
    }
    async fn pre_update_container_resources_hook(
        &self,
        request: Request<ContainerResourceHookRequest>,
    ) -> Result<Response<ContainerResourceHookResponse>, Status> {
        Ok(Response::new(echo_container(request.into_inner())))
    }
}

#[tokio::test]
async fn grpc_round_trip_over_loopback() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RuntimeHookServiceServer::new(EchoHooks))
            .serve_with_incoming(incoming),
    );

    let mut client = RuntimeHookServiceClient::connect(format!("http://{address}"))
        .await
        .unwrap();

    let resources = LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 200_000,
        cpu_shares: 2048,
        memory_limit_in_bytes: 1 << 30,
        cpuset_cpus: "0-3".into(),
        ..Default::default()
    };
    let request = ContainerResourceHookRequest {
        pod_meta: Some(PodSandboxMetadata {
            name: "web".into(),
            uid: "uid-1".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        container_meta: Some(ContainerMetadata {
            name: "nginx".into(),
            attempt: 1,
            id: "abc".into(),
        }),
        container_resources: Some(resources.clone()),
        pod_cgroup_parent: "/kubepods/burstable/poduid-1".into(),
        container_envs: BTreeMap::from([("NVIDIA_VISIBLE_DEVICES".into(), "0".into())]),
        ..Default::default()
    };

    let response = client
        .pre_create_container_hook(request.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.container_resources, Some(resources));
    assert_eq!(response.pod_cgroup_parent, "/kubepods/burstable/poduid-1");
    assert_eq!(response.container_envs, request.container_envs);
    assert_eq!(
        response
            .container_annotations
            .get("echo/container")
            .map(String::as_str),
        Some("nginx")
    );

    let sandbox = PodSandboxHookRequest {
        labels: BTreeMap::from([("koordinator.sh/qosClass".into(), "BE".into())]),
        cgroup_parent: "/kubepods/besteffort".into(),
        ..Default::default()
    };
    let sandbox_response = client
        .pre_run_pod_sandbox_hook(sandbox.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(sandbox_response.labels, sandbox.labels);
    assert_eq!(sandbox_response.cgroup_parent, "/kubepods/besteffort");

    let refused = client.post_stop_container_hook(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);

    server.abort();
}

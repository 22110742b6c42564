//! NRI CreateContainer latency with koordlet's real hooks:
//! 1. the handler in-process (decode, hooks, encode), as containerd's call
//!    costs inside koordlet;
//! 2. the full NRI call over a unix socket: a fake runtime sends ttrpc
//!    CreateContainer requests to the running plugin (supervisor,
//!    connection task, blocking-pool handler) and waits for each answer.
//!
//! Run: `cargo bench -p koordlet --bench nri` (no containerd needed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::{HookOptions, all_hooks};
use koordlet::runtimehooks::nri::connection::{PLUGIN_SERVICE, Registration, answer};
use koordlet::runtimehooks::nri::proto::{api, ttrpc as envelope};
use koordlet::runtimehooks::nri::ttrpc::{
    FrameDecoder, MessageKind, PLUGIN_CONN, RUNTIME_CONN, encode_message,
};
use koordlet::runtimehooks::nri::{Backoff, NriPlugin, NriState, NriStatus, NriSupervisor};
use koordlet::runtimehooks::protocol::FailurePolicyConfig;
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const IN_PROCESS_CALLS: usize = 20_000;
const SOCKET_CALLS: usize = 5_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{what}: n={} p50={:.1}µs p99={:.1}µs max={:.1}µs",
        samples.len(),
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples[samples.len() - 1].as_secs_f64() * 1e6,
    );
}

fn be_request() -> api::CreateContainerRequest {
    let spec = r#"{"containers":{"main":{"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"268435456"},"limits":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"268435456"}}}}"#;
    api::CreateContainerRequest {
        pod: Some(api::PodSandbox {
            id: "sandbox-1".into(),
            name: "batch-job".into(),
            uid: "0f0e0d0c-0b0a-0908-0706-050403020100".into(),
            namespace: "default".into(),
            labels: BTreeMap::from([("koordinator.sh/qosClass".into(), "BE".into())]),
            annotations: BTreeMap::from([(
                "node.koordinator.sh/extended-resource-spec".into(),
                spec.into(),
            )]),
            linux: Some(api::LinuxPodSandbox {
                cgroup_parent: "/kubepods/besteffort/pod0f0e0d0c-0b0a-0908-0706-050403020100"
                    .into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        container: Some(api::Container {
            id: "c0ffee".into(),
            pod_sandbox_id: "sandbox-1".into(),
            name: "main".into(),
            env: vec!["PATH=/bin".into()],
            linux: Some(api::LinuxContainer {
                cgroups_path: "/kubepods/besteffort/pod0f0e0d0c-0b0a-0908-0706-050403020100/c0ffee"
                    .into(),
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
        }),
    }
}

fn plugin() -> Arc<NriPlugin> {
    let caps = koordlet::capabilities::detect(&SystemArgs::under(std::path::Path::new("/")));
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
    let dispatcher = HookDispatcher::new(
        all_hooks(&HookOptions::default()),
        &caps,
        layout,
        FailurePolicyConfig::default(),
    );
    Arc::new(NriPlugin::new(
        Arc::new(dispatcher),
        None,
        NriStatus::new(NriState::Disabled),
    ))
}

fn in_process(plugin: &NriPlugin, payload: &[u8]) {
    // Sanity: the hooks really adjust this container.
    let response = api::CreateContainerResponse::decode(
        plugin
            .handle("CreateContainer", payload)
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    let cpu = response
        .adjust
        .unwrap()
        .linux
        .unwrap()
        .resources
        .unwrap()
        .cpu
        .unwrap();
    assert_eq!(cpu.shares.unwrap().value, 512, "BatchResource ran");

    let request = envelope::Request {
        service: PLUGIN_SERVICE.into(),
        method: "CreateContainer".into(),
        payload: payload.to_vec(),
        ..Default::default()
    };
    let wire = request.encode_to_vec();
    for _ in 0..1_000 {
        let _ = plugin.handle("CreateContainer", payload);
    }
    let mut handler = Vec::with_capacity(IN_PROCESS_CALLS);
    for _ in 0..IN_PROCESS_CALLS {
        let started = Instant::now();
        let _ = std::hint::black_box(plugin.handle("CreateContainer", payload));
        handler.push(started.elapsed());
    }
    report(
        "NRI CreateContainer handler (decode + hooks + encode)",
        handler,
    );

    let mut framed = Vec::with_capacity(IN_PROCESS_CALLS);
    for _ in 0..IN_PROCESS_CALLS {
        let started = Instant::now();
        let request = envelope::Request::decode(wire.as_slice()).unwrap();
        let response = answer(plugin, &request);
        let mut frame = Vec::new();
        encode_message(
            PLUGIN_CONN,
            1,
            MessageKind::Response,
            &response.encode_to_vec(),
            &mut frame,
        )
        .unwrap();
        std::hint::black_box(frame);
        framed.push(started.elapsed());
    }
    report(
        "NRI CreateContainer with ttrpc envelope and framing",
        framed,
    );
}

async fn over_socket(plugin: Arc<NriPlugin>, payload: Vec<u8>) {
    let dir = std::env::temp_dir().join(format!("koord-nri-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("nri.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let status = NriStatus::new(NriState::Disabled);
    let shutdown = koord_common::Shutdown::new();
    let supervisor = NriSupervisor {
        socket: socket.clone(),
        registration: Registration {
            plugin_name: "koordlet_nri".into(),
            plugin_index: "00".into(),
            timeout: Duration::from_secs(30),
        },
        backoff: Backoff {
            initial: Duration::from_millis(50),
            factor: 2.0,
            cap: Duration::from_secs(1),
        },
        service: plugin,
        status,
    };
    let task = tokio::spawn(supervisor.run(shutdown.clone()));
    let (mut stream, _) = listener.accept().await.unwrap();
    let mut decoder = FrameDecoder::new();
    let mut buffer = vec![0u8; 64 * 1024];

    // Acknowledge RegisterPlugin.
    let register = loop {
        if let Some(message) = decoder.next_message().unwrap() {
            break message;
        }
        let read = stream.read(&mut buffer).await.unwrap();
        decoder.feed(&buffer[..read]);
    };
    let mut frame = Vec::new();
    encode_message(
        RUNTIME_CONN,
        register.stream_id,
        MessageKind::Response,
        &envelope::Response::default().encode_to_vec(),
        &mut frame,
    )
    .unwrap();
    stream.write_all(&frame).await.unwrap();

    let request = envelope::Request {
        service: PLUGIN_SERVICE.into(),
        method: "CreateContainer".into(),
        payload,
        ..Default::default()
    }
    .encode_to_vec();
    let mut samples = Vec::with_capacity(SOCKET_CALLS);
    for call in 0..(SOCKET_CALLS + 500) {
        let stream_id = 2 * call as u32 + 1;
        let mut frame = Vec::new();
        encode_message(
            PLUGIN_CONN,
            stream_id,
            MessageKind::Request,
            &request,
            &mut frame,
        )
        .unwrap();
        let started = Instant::now();
        stream.write_all(&frame).await.unwrap();
        let response = loop {
            if let Some(message) = decoder.next_message().unwrap() {
                break message;
            }
            let read = stream.read(&mut buffer).await.unwrap();
            assert!(read > 0, "plugin closed the connection");
            decoder.feed(&buffer[..read]);
        };
        let elapsed = started.elapsed();
        assert_eq!(response.stream_id, stream_id);
        if call >= 500 {
            samples.push(elapsed);
        }
    }
    report(
        "NRI CreateContainer round trip over the unix socket",
        samples,
    );
    shutdown.trigger(koord_common::ShutdownReason::Requested("bench done".into()));
    drop(stream);
    let _ = task.await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let plugin = plugin();
    let payload = be_request().encode_to_vec();
    in_process(&plugin, &payload);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(over_socket(plugin, payload));
}

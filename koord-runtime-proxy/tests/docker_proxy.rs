#![allow(clippy::unwrap_used)]
//! Docker mode against a fake engine on a unix socket that records every
//! request it receives and answers as dockerd does (a recorded conversation,
//! not a real engine: `docker_real` covers that where dockerd can run).
//! Covers what a real engine cannot show cheaply: failure policies, bodies
//! the proxy does not understand, the size limit, lookups after a restart.

mod common;

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use apis::runtime::v1alpha1 as hook;
use common::docker::{DOCKER_STAGES, ServedDockerProxy, StageHook, call, call_json};
use common::register;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// One request as the fake engine received it.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    path_and_query: String,
    body: Bytes,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A fake dockerd: `/info` says cgroupfs, creates answer `{"Id": "<name>-id"}`,
/// inspect answers from `inspects`, everything else 204 or a streamed body.
#[derive(Clone, Default)]
struct FakeEngine {
    received: Arc<Mutex<Vec<Received>>>,
    inspects: Arc<Mutex<Vec<(String, Value)>>>,
}

impl FakeEngine {
    fn serve(&self, socket: &Path) {
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let engine = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let engine = engine.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let engine = engine.clone();
                        async move { Ok::<_, Infallible>(engine.answer(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }

    async fn answer(&self, request: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
        let method = request.method().to_string();
        let path_and_query = request.uri().path_and_query().unwrap().to_string();
        let path = request.uri().path().to_string();
        let body = request.into_body().collect().await.unwrap().to_bytes();
        self.received.lock().unwrap().push(Received {
            method: method.clone(),
            path_and_query: path_and_query.clone(),
            body: body.clone(),
        });
        let reply = |status: u16, body: Value| {
            let mut response = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
            *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
            response
        };
        if path.ends_with("/info") {
            return reply(200, json!({"CgroupDriver": "cgroupfs"}));
        }
        if path.ends_with("/containers/json") {
            let listed: Vec<Value> = self
                .inspects
                .lock()
                .unwrap()
                .iter()
                .map(|(id, _)| json!({"Id": id}))
                .collect();
            return reply(200, Value::Array(listed));
        }
        if path.ends_with("/containers/create") {
            if serde_json::from_slice::<Value>(&body).is_err() {
                return reply(400, json!({"message": "invalid JSON: engine's own error"}));
            }
            let name = path_and_query.split("name=").nth(1).unwrap_or("anon");
            return reply(201, json!({"Id": format!("{name}-id"), "Warnings": []}));
        }
        if let Some(id) = path
            .strip_prefix("/containers/")
            .and_then(|rest| rest.strip_suffix("/json"))
        {
            let found = self
                .inspects
                .lock()
                .unwrap()
                .iter()
                .find(|(known, _)| known == id)
                .map(|(_, inspect)| inspect.clone());
            return match found {
                Some(inspect) => reply(200, inspect),
                None => reply(404, json!({"message": format!("No such container: {id}")})),
            };
        }
        if path.ends_with("/logs") {
            return reply(200, json!({"stream": "log line"}));
        }
        if path.ends_with("/update") {
            return reply(200, json!({"Warnings": null}));
        }
        let mut response = hyper::Response::new(Full::new(Bytes::new()));
        *response.status_mut() = hyper::StatusCode::NO_CONTENT;
        response
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Requests other than the proxy's own lookups.
    fn forwarded(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| !r.path_and_query.ends_with("/info") && r.method != "GET")
            .collect()
    }

    fn clear(&self) {
        self.received.lock().unwrap().clear();
    }
}

struct Setup {
    dir: PathBuf,
    engine: FakeEngine,
    hooks: StageHook,
    served: ServedDockerProxy,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn setup(name: &str, policy: &str, engine: FakeEngine) -> Setup {
    let dir = std::env::temp_dir().join(format!("koord-rp-docker-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    engine.serve(&dir.join("engine.sock"));
    let hooks = StageHook::default();
    hooks.serve(&dir.join("hook.sock"));
    register(
        &dir.join("hooks"),
        "koordlet.json",
        &dir.join("hook.sock"),
        policy,
        &DOCKER_STAGES,
    );
    let served = ServedDockerProxy::start(&dir, &dir.join("engine.sock"), &dir.join("hooks")).await;
    Setup {
        dir,
        engine,
        hooks,
        served,
    }
}

fn sandbox_body() -> Value {
    json!({
        "Image": "pause",
        "Labels": {"io.kubernetes.docker.type": "podsandbox", "io.kubernetes.pod.name": "web",
                   "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "uid-1"},
        "HostConfig": {"CgroupParent": "/kubepods/burstable/poduid-1", "NetworkMode": "none"},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_answers_reach_the_engine_and_other_calls_pass_unchanged() {
    let s = setup("answers", "Fail", FakeEngine::default()).await;
    s.hooks.answer_pod(
        "PreRunPodSandbox",
        hook::PodSandboxHookResponse {
            cgroup_parent: "/kubepods/besteffort/poduid-1".into(),
            ..Default::default()
        },
    );
    let proxy = &s.served.socket;
    let created = call_json(
        proxy,
        "POST",
        "/v1.41/containers/create?name=k8s_POD_web_default_uid-1_0",
        &sandbox_body(),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(
        created.json()["Id"],
        json!("k8s_POD_web_default_uid-1_0-id")
    );
    let sent = s.engine.forwarded();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].path_and_query,
        "/v1.41/containers/create?name=k8s_POD_web_default_uid-1_0"
    );
    assert_eq!(
        sent[0].json()["HostConfig"]["CgroupParent"],
        json!("/kubepods/besteffort/poduid-1")
    );
    assert_eq!(sent[0].json()["HostConfig"]["NetworkMode"], json!("none"));

    // Not intercepted: body and query reach the engine byte for byte, and the answer comes back.
    s.engine.clear();
    let raw = br#"{"odd":  "spacing" , "kept":[1,2]}"#;
    let answer = call(
        proxy,
        "POST",
        "/v1.41/networks/create?x=1",
        Some(raw),
        "application/json",
    )
    .await;
    assert_eq!(answer.status, 204);
    let logs = call(
        proxy,
        "GET",
        "/v1.41/containers/abc/logs?follow=0&stdout=1",
        None,
        "",
    )
    .await;
    assert_eq!(
        (logs.status, logs.json()),
        (200, json!({"stream": "log line"}))
    );
    let sent = s.engine.received();
    assert_eq!(sent[0].path_and_query, "/v1.41/networks/create?x=1");
    assert_eq!(&sent[0].body[..], raw);
    assert_eq!(
        sent[1].path_and_query,
        "/v1.41/containers/abc/logs?follow=0&stdout=1"
    );
    assert_eq!(s.hooks.stages(), ["PreRunPodSandbox"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hook_refuses_under_fail_and_forwards_the_original_under_ignore() {
    let fail = setup("fail", "Fail", FakeEngine::default()).await;
    fail.hooks.refuse(true);
    let refused = call_json(
        &fail.served.socket,
        "POST",
        "/v1.41/containers/create?name=k8s_POD_web_default_uid-1_0",
        &sandbox_body(),
    )
    .await;
    assert_eq!(refused.status, 500, "{refused:?}");
    let message = refused.json()["message"].as_str().unwrap().to_string();
    assert!(message.contains("failure-policy Fail"), "{message}");
    assert!(
        fail.engine.forwarded().is_empty(),
        "nothing may be created without the hook"
    );

    let ignore = setup("ignore", "Ignore", FakeEngine::default()).await;
    ignore.hooks.refuse(true);
    let body = sandbox_body();
    let created = call_json(
        &ignore.served.socket,
        "POST",
        "/v1.41/containers/create?name=k8s_POD_web_default_uid-1_0",
        &body,
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    let sent = ignore.engine.forwarded();
    assert_eq!(&sent[0].body[..], body.to_string().as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_the_proxy_cannot_use_are_passed_on_or_refused_by_size() {
    let s = setup("bodies", "Fail", FakeEngine::default()).await;
    let proxy = &s.served.socket;
    // Malformed JSON: the engine's own error comes back, no hook is called.
    let broken = call(
        proxy,
        "POST",
        "/v1.41/containers/create?name=k8s_POD_a_b_c_0",
        Some(b"{not json"),
        "application/json",
    )
    .await;
    assert_eq!(broken.status, 400);
    assert_eq!(
        broken.json()["message"],
        json!("invalid JSON: engine's own error")
    );
    assert_eq!(&s.engine.forwarded()[0].body[..], b"{not json");
    // A wrongly typed field: forwarded unchanged.
    let typed = br#"{"Image":"x","HostConfig":{"CpuShares":"lots"}}"#;
    let answer = call(
        proxy,
        "POST",
        "/v1.41/containers/create?name=k8s_POD_a_b_c_0",
        Some(typed),
        "application/json",
    )
    .await;
    assert_eq!(answer.status, 201);
    assert_eq!(&s.engine.forwarded()[1].body[..], typed);
    assert!(s.hooks.stages().is_empty());

    // Over the 4 MiB limit, declared or chunked: refused with a Docker-style
    // error, nothing forwarded.
    s.engine.clear();
    let limit = koord_runtime_proxy::docker::core::MAX_BODY_BYTES;
    for chunked in [false, true] {
        let answer = send_oversized(proxy, limit + 1, chunked).await;
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "chunked={chunked}: {answer}"
        );
        assert!(
            answer.contains(
                r#"{"message":"koord-runtime-proxy: request body is larger than 4194304 bytes"}"#
            ),
            "{answer}"
        );
    }
    assert!(s.engine.forwarded().is_empty());
}

/// Sends a create with a body of `size` bytes (the writer may be cut off
/// when the proxy answers early) and returns the raw answer.
async fn send_oversized(proxy: &Path, size: usize, chunked: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::UnixStream::connect(proxy).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_string()
    } else {
        format!("Content-Length: {size}")
    };
    tokio::spawn(async move {
        let head = format!(
            "POST /v1.41/containers/create HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
        );
        writer.write_all(head.as_bytes()).await?;
        let block = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < size {
            let n = block.len().min(size - sent);
            if chunked {
                writer.write_all(format!("{n:x}\r\n").as_bytes()).await?;
                writer.write_all(&block[..n]).await?;
                writer.write_all(b"\r\n").await?;
            } else {
                writer.write_all(&block[..n]).await?;
            }
            sent += n;
        }
        if chunked {
            writer.write_all(b"0\r\n\r\n").await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains('}') {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), reader.read(&mut buffer))
            .await
            .expect("no answer")
            .unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_created_before_the_proxy_started_get_their_context_from_the_engine() {
    let engine = FakeEngine::default();
    engine.inspects.lock().unwrap().extend([
        (
            "sb1".to_string(),
            json!({"Id": "sb1", "Name": "/k8s_POD_web_default_uid-1_0",
                   "Config": {"Labels": {"io.kubernetes.docker.type": "podsandbox", "qos": "be"}},
                   "HostConfig": {"CgroupParent": "/kubepods/besteffort/poduid-1"}}),
        ),
        (
            "c1".to_string(),
            json!({"Id": "c1", "Name": "/k8s_app_web_default_uid-1_0",
                   "Config": {"Labels": {"io.kubernetes.docker.type": "container", "io.kubernetes.sandbox.id": "sb1"}},
                   "HostConfig": {"CpuShares": 2, "CpuQuota": 50000}}),
        ),
    ]);
    let s = setup("restart", "Fail", engine).await;
    s.hooks.answer_container(
        "PreUpdateContainerResources",
        hook::ContainerResourceHookResponse {
            container_resources: Some(hook::LinuxContainerResources {
                cpu_quota: 20000,
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    // Before any rebuild the store is empty: the update looks the container up.
    let updated = call_json(
        &s.served.socket,
        "POST",
        "/v1.41/containers/c1/update",
        &json!({"CpuShares": 4, "RestartPolicy": {"Name": ""}}),
    )
    .await;
    assert_eq!(updated.status, 200, "{updated:?}");
    let call = s.hooks.last("PreUpdateContainerResources").unwrap();
    let request = call.container().unwrap();
    assert_eq!(request.pod_meta.as_ref().unwrap().name, "web");
    assert_eq!(
        request.pod_labels.get("qos").map(String::as_str),
        Some("be")
    );
    assert_eq!(request.pod_cgroup_parent, "/kubepods/besteffort/poduid-1");
    let resources = request.container_resources.as_ref().unwrap();
    assert_eq!((resources.cpu_shares, resources.cpu_quota), (4, 50000));
    let sent = s.engine.forwarded();
    assert_eq!(
        sent[0].json(),
        json!({"CpuShares": 4, "CpuQuota": 20000, "RestartPolicy": {"Name": ""}})
    );

    // A rebuild from the listing knows both; stop calls the post-stop hooks.
    s.served.proxy.rebuild_store().await;
    assert_eq!(s.served.proxy.store.counts(), (1, 1));
    s.hooks.clear();
    for id in ["c1", "sb1"] {
        let stopped = common::docker::call(
            &s.served.socket,
            "POST",
            &format!("/v1.41/containers/{id}/stop"),
            None,
            "",
        )
        .await;
        assert_eq!(stopped.status, 204);
    }
    assert_eq!(
        s.hooks.stages(),
        ["PostStopContainer", "PostStopPodSandbox"]
    );
    // An unknown id goes to the engine, which answers for itself.
    let unknown = common::docker::call(
        &s.served.socket,
        "POST",
        "/v1.41/containers/nope/start",
        None,
        "",
    )
    .await;
    assert_eq!(unknown.status, 204);
}

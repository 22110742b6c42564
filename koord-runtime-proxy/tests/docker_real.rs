#![allow(clippy::unwrap_used)]
//! Docker mode against a real dockerd: the test starts its own dockerd on a
//! private socket, data root and exec root (no bridge, no iptables, vfs
//! storage), imports a one-binary busybox image made from the host's static
//! busybox, and sends a dockershim-style pod (sandbox + container) through
//! the proxy. A hook server moves the pod to its own cgroup parent and sets
//! CPU shares; the test reads them back with `GET /containers/{id}/json`
//! through the proxy and from the real cgroup files. An exec with an
//! upgraded stream goes through the proxy untouched.
//!
//! Needs root, `dockerd` (Debian's `docker.io`), `/bin/busybox` (static),
//! `tar`, and cgroup v1 `cpu` at /sys/fs/cgroup/cpu; prints SKIP with the
//! reason when one is missing or dockerd does not start.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apis::runtime::v1alpha1 as hook;
use common::docker::{DOCKER_STAGES, ServedDockerProxy, StageHook, call, call_json};
use common::register;
use serde_json::json;

const DOCKERD_START_TIMEOUT: Duration = Duration::from_secs(60);
const IMAGE: &str = "koord-test/busybox:local";

fn find_binary(name: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    from_path.or_else(|| {
        fallbacks
            .iter()
            .map(PathBuf::from)
            .find(|candidate| candidate.is_file())
    })
}

/// Why the test cannot run here, if it cannot.
fn missing_prerequisite() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find(|line| line.starts_with("Uid:"))
        .and_then(|line| line.split_whitespace().nth(2))
        == Some("0");
    if !root {
        return Some("not root".into());
    }
    if find_binary("dockerd", &["/usr/sbin/dockerd", "/usr/bin/dockerd"]).is_none() {
        return Some("no dockerd (apt-get install docker.io)".into());
    }
    if find_binary("tar", &[]).is_none() {
        return Some("no tar".into());
    }
    if !Path::new("/bin/busybox").is_file() {
        return Some("no /bin/busybox (apt-get install busybox-static)".into());
    }
    if !Path::new("/sys/fs/cgroup/cpu/cpu.shares").is_file() {
        return Some("no cgroup v1 cpu controller at /sys/fs/cgroup/cpu".into());
    }
    None
}

/// A dockerd of the test's own; stopped (and its directories removed) on drop.
struct Dockerd {
    child: Child,
    root: PathBuf,
    socket: PathBuf,
}

impl Dockerd {
    fn start(root: &Path) -> Result<(Self, Duration), String> {
        let dockerd = find_binary("dockerd", &["/usr/sbin/dockerd", "/usr/bin/dockerd"]).unwrap();
        std::fs::create_dir_all(root).map_err(|e| e.to_string())?;
        let socket = root.join("docker.sock");
        let log = std::fs::File::create(root.join("dockerd.log")).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let child = Command::new(dockerd)
            .arg(format!("--host=unix://{}", socket.display()))
            .arg(format!("--data-root={}", root.join("data").display()))
            .arg(format!("--exec-root={}", root.join("exec").display()))
            .arg(format!("--pidfile={}", root.join("dockerd.pid").display()))
            .args([
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
                "--userland-proxy=false",
                "--storage-driver=vfs",
                "--exec-opt=native.cgroupdriver=cgroupfs",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run dockerd: {e}"))?;
        let mut daemon = Self {
            child,
            root: root.to_path_buf(),
            socket,
        };
        loop {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!("dockerd exited ({status}): {}", daemon.log_tail()));
            }
            if daemon.socket.exists() && pings(&daemon.socket) {
                return Ok((daemon, started.elapsed()));
            }
            if started.elapsed() > DOCKERD_START_TIMEOUT {
                return Err(format!(
                    "dockerd did not serve within {DOCKERD_START_TIMEOUT:?}: {}",
                    daemon.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.root.join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        // SIGTERM lets dockerd stop its containers and its containerd.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Whether the engine answers `GET /_ping` (the socket exists, and accepts
/// connections, before the daemon serves).
fn pings(socket: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Removes a directory tree on drop.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the test's cgroup parents in every v1 hierarchy, deepest first.
struct CgroupCleanup(String);

impl Drop for CgroupCleanup {
    fn drop(&mut self) {
        let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
            return;
        };
        for hierarchy in hierarchies.flatten() {
            remove_tree(&hierarchy.path().join(&self.0));
        }
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// A rootfs tar holding the static busybox and the applets the test runs.
fn busybox_rootfs_tar(dir: &Path) -> Vec<u8> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    for applet in ["sh", "sleep", "echo", "cat", "true"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    let tar = dir.join("rootfs.tar");
    let status = Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success(), "tar failed");
    std::fs::read(tar).unwrap()
}

fn cpu_shares_file(parent: &str, id: &str) -> u64 {
    let path = format!("/sys/fs/cgroup/cpu{parent}/{id}/cpu.shares");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// Sends an exec through the proxy with an upgraded stream (as the Docker
/// Go client, which cri-dockerd uses, does) and returns what it printed.
async fn exec_through(proxy: &Path, container: &str, cmd: &[&str]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let created = call_json(
        proxy,
        "POST",
        &format!("/v1.41/containers/{container}/exec"),
        &json!({"Cmd": cmd, "AttachStdout": true, "AttachStderr": true, "Tty": true}),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created);
    let exec = created.json()["Id"].as_str().unwrap().to_string();
    let body = json!({"Detach": false, "Tty": true}).to_string();
    let mut stream = tokio::net::UnixStream::connect(proxy).await.unwrap();
    let request = format!(
        "POST /v1.41/exec/{exec}/start HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut output = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut output))
        .await
        .expect("exec stream did not end")
        .unwrap();
    String::from_utf8_lossy(&output).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_change_a_real_dockerd_containers_cgroup_parent_and_cpu_shares() {
    if let Some(reason) = missing_prerequisite() {
        println!("SKIP docker_real: {reason}");
        return;
    }
    // Short: a unix socket path has at most 107 bytes.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let tag = format!("{}-{}", std::process::id(), nanos % 100_000);
    let root = PathBuf::from(format!("/tmp/koord-dockerd-{tag}"));
    // Guards drop in reverse order: dockerd (and its containers) first, then
    // the cgroups they used, then the directory, also when an assert fails.
    let _root_cleanup = RemoveDir(root.clone());
    let cgroup_root = format!("koord-docker-test-{tag}");
    let _cgroups = CgroupCleanup(cgroup_root.clone());
    let (dockerd, took) = match Dockerd::start(&root.join("d")) {
        Ok(started) => started,
        Err(reason) => {
            println!("SKIP docker_real: {reason}");
            return;
        }
    };
    println!("dockerd served after {took:?}");
    let kubelet_parent = format!("/{cgroup_root}/kubepods/burstable/poduid-1");
    let koord_parent = format!("/{cgroup_root}/kubepods/besteffort/poduid-1");

    let hooks_dir = root.join("hooks");
    std::fs::create_dir_all(&hooks_dir).unwrap();
    let hook_socket = root.join("hook.sock");
    let hooks = StageHook::default();
    hooks.serve(&hook_socket);
    hooks.answer_pod(
        "PreRunPodSandbox",
        hook::PodSandboxHookResponse {
            cgroup_parent: koord_parent.clone(),
            ..Default::default()
        },
    );
    hooks.answer_container(
        "PreCreateContainer",
        hook::ContainerResourceHookResponse {
            container_resources: Some(hook::LinuxContainerResources {
                cpu_shares: 64,
                ..Default::default()
            }),
            pod_cgroup_parent: koord_parent.clone(),
            container_envs: [("KOORD_HOOK".to_string(), "applied".to_string())].into(),
            ..Default::default()
        },
    );
    hooks.answer_container(
        "PreUpdateContainerResources",
        hook::ContainerResourceHookResponse {
            container_resources: Some(hook::LinuxContainerResources {
                cpu_shares: 128,
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    register(
        &hooks_dir,
        "koordlet.json",
        &hook_socket,
        "Fail",
        &DOCKER_STAGES,
    );
    let served = ServedDockerProxy::start(&root, &dockerd.socket, &hooks_dir).await;
    let proxy = served.socket.clone();

    // The image, straight to dockerd (image calls would pass through anyway).
    let imported = call(
        &dockerd.socket,
        "POST",
        "/v1.41/images/create?fromSrc=-&repo=koord-test/busybox&tag=local",
        Some(&busybox_rootfs_tar(&root)),
        "application/x-tar",
    )
    .await;
    assert_eq!(imported.status, 200, "{imported:?}");

    // The sandbox, as dockershim/cri-dockerd create it.
    let sandbox = call_json(
        &proxy,
        "POST",
        "/v1.41/containers/create?name=k8s_POD_web_default_uid-1_0",
        &json!({
            "Image": IMAGE,
            "Cmd": ["/bin/sleep", "600"],
            "Labels": {
                "io.kubernetes.docker.type": "podsandbox",
                "io.kubernetes.pod.name": "web",
                "io.kubernetes.pod.namespace": "default",
                "io.kubernetes.pod.uid": "uid-1",
                "app": "web",
                "annotation.kubernetes.io/config.source": "api",
            },
            "HostConfig": {"CgroupParent": kubelet_parent, "NetworkMode": "none"},
        }),
    )
    .await;
    assert_eq!(sandbox.status, 201, "{sandbox:?}");
    let sandbox_id = sandbox.json()["Id"].as_str().unwrap().to_string();
    let pod_call = hooks.last("PreRunPodSandbox").unwrap();
    let pod_request = pod_call.pod().unwrap();
    assert_eq!(pod_request.cgroup_parent, kubelet_parent);
    let pod_meta = pod_request.pod_meta.clone().unwrap();
    assert_eq!(
        (
            pod_meta.name.as_str(),
            pod_meta.namespace.as_str(),
            pod_meta.uid.as_str()
        ),
        ("web", "default", "uid-1")
    );
    assert_eq!(
        pod_request
            .annotations
            .get("kubernetes.io/config.source")
            .map(String::as_str),
        Some("api")
    );
    let started = call(
        &proxy,
        "POST",
        &format!("/v1.41/containers/{sandbox_id}/start"),
        None,
        "",
    )
    .await;
    assert_eq!(started.status, 204, "{started:?}");

    // The container, pointing at its sandbox.
    let container = call_json(
        &proxy,
        "POST",
        "/v1.41/containers/create?name=k8s_app_web_default_uid-1_0",
        &json!({
            "Image": IMAGE,
            "Cmd": ["/bin/sleep", "600"],
            "Env": ["A=1"],
            "Labels": {
                "io.kubernetes.docker.type": "container",
                "io.kubernetes.container.name": "app",
                "io.kubernetes.pod.name": "web",
                "io.kubernetes.pod.namespace": "default",
                "io.kubernetes.pod.uid": "uid-1",
                "io.kubernetes.sandbox.id": sandbox_id,
            },
            "HostConfig": {"CgroupParent": kubelet_parent, "CpuShares": 512, "NetworkMode": "none"},
        }),
    )
    .await;
    assert_eq!(container.status, 201, "{container:?}");
    let container_id = container.json()["Id"].as_str().unwrap().to_string();
    let create_call = hooks.last("PreCreateContainer").unwrap();
    let create_request = create_call.container().unwrap();
    assert_eq!(create_request.container_meta.as_ref().unwrap().name, "app");
    assert_eq!(create_request.pod_meta.as_ref().unwrap().name, "web");
    // The pod context carries the sandbox hook's cgroup parent.
    assert_eq!(create_request.pod_cgroup_parent, koord_parent);
    assert_eq!(
        create_request
            .container_resources
            .as_ref()
            .unwrap()
            .cpu_shares,
        512
    );
    assert_eq!(
        create_request.container_envs.get("A").map(String::as_str),
        Some("1")
    );
    let started = call(
        &proxy,
        "POST",
        &format!("/v1.41/containers/{container_id}/start"),
        None,
        "",
    )
    .await;
    assert_eq!(started.status, 204, "{started:?}");

    // What dockerd made of it, read through the proxy, and from the kernel.
    let inspected = call(
        &proxy,
        "GET",
        &format!("/v1.41/containers/{container_id}/json"),
        None,
        "",
    )
    .await
    .json();
    assert_eq!(inspected["HostConfig"]["CgroupParent"], json!(koord_parent));
    assert_eq!(inspected["HostConfig"]["CpuShares"], json!(64));
    let env: Vec<&str> = inspected["Config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(
        env.contains(&"KOORD_HOOK=applied") && env.contains(&"A=1"),
        "{env:?}"
    );
    let sandbox_inspected = call(
        &proxy,
        "GET",
        &format!("/containers/{sandbox_id}/json"),
        None,
        "",
    )
    .await
    .json();
    assert_eq!(
        sandbox_inspected["HostConfig"]["CgroupParent"],
        json!(koord_parent)
    );
    assert_eq!(cpu_shares_file(&koord_parent, &container_id), 64);
    assert!(
        !Path::new(&format!(
            "/sys/fs/cgroup/cpu{kubelet_parent}/{container_id}"
        ))
        .exists()
    );

    // An upgraded exec stream passes through unchanged.
    let output = exec_through(&proxy, &container_id, &["/bin/echo", "hello-through-proxy"]).await;
    assert!(output.contains("101"), "{output}");
    assert!(output.contains("hello-through-proxy"), "{output}");

    // Update: the hook sees the kubelet's value and its own wins.
    let updated = call_json(
        &proxy,
        "POST",
        &format!("/v1.41/containers/{container_id}/update"),
        &json!({"CpuShares": 700}),
    )
    .await;
    assert_eq!(updated.status, 200, "{updated:?}");
    let update_call = hooks.last("PreUpdateContainerResources").unwrap();
    assert_eq!(
        update_call
            .container()
            .unwrap()
            .container_resources
            .as_ref()
            .unwrap()
            .cpu_shares,
        700
    );
    let inspected = call(
        &proxy,
        "GET",
        &format!("/v1.41/containers/{container_id}/json"),
        None,
        "",
    )
    .await
    .json();
    assert_eq!(inspected["HostConfig"]["CpuShares"], json!(128));
    assert_eq!(cpu_shares_file(&koord_parent, &container_id), 128);

    // Stop: the post-stop hooks of the container and the pod.
    let stopped = call(
        &proxy,
        "POST",
        &format!("/v1.41/containers/{container_id}/stop?t=1"),
        None,
        "",
    )
    .await;
    assert_eq!(stopped.status, 204, "{stopped:?}");
    let stopped = call(
        &proxy,
        "POST",
        &format!("/v1.41/containers/{sandbox_id}/stop?t=1"),
        None,
        "",
    )
    .await;
    assert_eq!(stopped.status, 204, "{stopped:?}");
    let stages = hooks.stages();
    assert_eq!(
        stages,
        [
            "PreRunPodSandbox",
            "PreCreateContainer",
            "PreStartContainer",
            "PostStartContainer",
            "PreUpdateContainerResources",
            "PostStopContainer",
            "PostStopPodSandbox"
        ],
    );
    assert_eq!(
        hooks
            .last("PostStopPodSandbox")
            .unwrap()
            .pod()
            .unwrap()
            .cgroup_parent,
        koord_parent
    );

    // A container that is not Kubernetes' goes through without hooks.
    hooks.clear();
    let plain = call_json(
        &proxy,
        "POST",
        "/v1.41/containers/create?name=plain",
        &json!({"Image": IMAGE, "Cmd": ["/bin/true"], "HostConfig": {"NetworkMode": "none"}}),
    )
    .await;
    assert_eq!(plain.status, 201, "{plain:?}");
    let plain_id = plain.json()["Id"].as_str().unwrap().to_string();
    assert!(hooks.stages().is_empty(), "{:?}", hooks.stages());

    // Removal through the proxy empties the store.
    for id in [&container_id, &sandbox_id, &plain_id] {
        let removed = call(
            &proxy,
            "DELETE",
            &format!("/v1.41/containers/{id}?force=1"),
            None,
            "",
        )
        .await;
        assert_eq!(removed.status, 204, "{removed:?}");
    }
    assert_eq!(served.proxy.store.counts(), (0, 0));
    drop(served);
    drop(dockerd);
}

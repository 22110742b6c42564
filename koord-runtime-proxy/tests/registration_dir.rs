#![allow(clippy::unwrap_used)]
//! The real binary with hostile entries in its hook-server registration
//! directory: a FIFO (whose open and read block until a writer comes) and a
//! symlink to /dev/zero (endless input). The proxy must serve CRI at once,
//! keep the good file's registration, keep reloading the directory, and
//! report the bad entries. The binary runs under a 4 GiB address-space
//! limit so that reading /dev/zero without bound ends it instead of the
//! machine's memory, and every wait here is bounded.
//!
//! It also runs as the privilege notes of `docs/proxy.md` say it can: root
//! with no capabilities at all (empty bounding set, `no_new_privs`), so
//! these tests also show that serving CRI, reaching the runtime's and the
//! hook servers' root-owned sockets and reading the directory need none.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::register;
use common::runtime::{ALL_STAGES, FakeRuntime, RecordingHook};
use koord_common::testing::{
    HTTP_WAIT, PROCESS_WAIT, TempDir, TestProcess, http_get_blocking, isolated_command,
};
use koord_runtime_proxy::cri::v1 as cri;
use koord_runtime_proxy::cri::v1::runtime_service_client::RuntimeServiceClient;
use koord_runtime_proxy::unix_channel;

const BIN: &str = env!("CARGO_BIN_EXE_koord-runtime-proxy");
/// Longest wait for the proxy to serve a call or to take a change in.
const WAIT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy)]
enum Hostile {
    Fifo,
    DevZero,
}

impl Hostile {
    fn create(self, path: &Path) {
        match self {
            Hostile::Fifo => {
                let status = Command::new("mkfifo").arg(path).status().unwrap();
                assert!(status.success(), "mkfifo {}", path.display());
            }
            Hostile::DevZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        }
    }

    /// The reason label of the skipped entry in the proxy's metrics.
    fn reason(self) -> &'static str {
        match self {
            Hostile::Fifo => "not_regular_file",
            Hostile::DevZero => "symlink",
        }
    }
}

struct Node {
    dir: TempDir,
    hooks: PathBuf,
    runtime_socket: PathBuf,
    _runtime: FakeRuntime,
}

impl Node {
    fn new(label: &str) -> Self {
        let dir = TempDir::new(label).unwrap();
        let hooks = dir.path().join("hookserver.d");
        std::fs::create_dir_all(&hooks).unwrap();
        let runtime_socket = dir.path().join("runtime.sock");
        let runtime = FakeRuntime::serve(&runtime_socket);
        Self {
            dir,
            hooks,
            runtime_socket,
            _runtime: runtime,
        }
    }

    fn hook(&self, name: &str) -> (RecordingHook, PathBuf) {
        let hook = RecordingHook::default();
        let socket = self.dir.path().join(name);
        hook.serve(&socket);
        (hook, socket)
    }

    fn proxy_socket(&self) -> PathBuf {
        self.dir.path().join("runtimeproxy.sock")
    }

    /// The proxy binary, limited to 4 GiB of address space, as root without
    /// any capability.
    fn start_proxy(&self) -> TestProcess {
        let mut command = isolated_command("sh");
        command
            .arg("-c")
            .arg(
                r#"ulimit -v 4194304 && exec setpriv --bounding-set=-all --inh-caps=-all \
                   --ambient-caps=-all --no-new-privs -- "$0" "$@""#,
            )
            .arg(BIN)
            .args([
                "--metrics-addr",
                "127.0.0.1:0",
                "--koord-runtimeproxy-endpoint",
            ])
            .arg(self.proxy_socket())
            .arg("--remote-runtime-service-endpoint")
            .arg(&self.runtime_socket)
            .arg("--hook-server-config-dir")
            .arg(&self.hooks);
        TestProcess::spawn(command).unwrap()
    }
}

fn run_request(name: &str) -> cri::RunPodSandboxRequest {
    cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        runtime_handler: "runc".into(),
    }
}

/// Runs pods through the proxy until `done` holds, each call bounded; fails
/// when the proxy exits or `WAIT` passes.
async fn run_pods_until(
    process: &mut TestProcess,
    socket: &Path,
    what: &str,
    done: impl Fn() -> bool,
) {
    let deadline = Instant::now() + WAIT;
    let mut client = RuntimeServiceClient::new(unix_channel(socket.to_path_buf()));
    let mut attempt = 0;
    let mut last = String::from("no call made");
    loop {
        if let Some(status) = process.wait_exit(Duration::ZERO).unwrap() {
            panic!("{what}: the proxy exited ({status}):\n{}", process.output());
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {WAIT:?} (last call: {last}):\n{}",
            process.output()
        );
        attempt += 1;
        let call = client.run_pod_sandbox(run_request(&format!("pod-{attempt}")));
        last = match tokio::time::timeout(Duration::from_secs(2), call).await {
            Ok(Ok(_)) => "served".into(),
            Ok(Err(status)) => status.to_string(),
            Err(_) => "no answer within 2s".into(),
        };
        if last == "served" && done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Far above the proxy's usual ~20 MiB, far below what reading /dev/zero
/// without bound reaches before the 4 GiB address-space limit stops it.
const MAX_PEAK_RSS_KIB: u64 = 256 * 1024;

/// The process's peak resident set (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"))
}

/// The capability sets of a running process, once it is the proxy (after
/// the `sh` and `setpriv` execs; uid 0 throughout).
fn capabilities(pid: u32) -> Vec<(String, u64)> {
    let deadline = Instant::now() + PROCESS_WAIT;
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        if status
            .lines()
            .any(|line| line.starts_with("Name:\tkoord-runtime-"))
        {
            assert!(status.contains("\nUid:\t0\t"), "{status}");
            return status
                .lines()
                .filter_map(|line| line.split_once(":\t"))
                .filter(|(key, _)| key.starts_with("Cap"))
                .map(|(key, value)| (key.to_string(), u64::from_str_radix(value, 16).unwrap()))
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "the proxy did not start: {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn metrics(process: &TestProcess) -> String {
    let addr = process
        .serving_addr("health and metrics", PROCESS_WAIT)
        .unwrap();
    let response = http_get_blocking(addr, "/metrics", HTTP_WAIT).unwrap();
    assert_eq!(response.status, 200, "{}", response.body);
    response.body
}

/// `hostile` entries sort before the good registration, both at start and
/// added while the proxy runs; the good file is then rewritten.
async fn hostile_entries_are_skipped(label: &str, hostile: Hostile) {
    let node = Node::new(label);
    let (first, first_socket) = node.hook("first.sock");
    let (second, second_socket) = node.hook("second.sock");
    hostile.create(&node.hooks.join("a-hostile.json"));
    register(
        &node.hooks,
        "koordlet.json",
        &first_socket,
        "Ignore",
        &ALL_STAGES,
    );
    let mut process = node.start_proxy();
    let socket = node.proxy_socket();
    let capabilities = capabilities(process.pid());

    // Served, and the good file's hooks are called.
    run_pods_until(
        &mut process,
        &socket,
        "a pod through the proxy reaching the registered hook",
        || first.stages().contains(&"PreRunPodSandbox".to_string()),
    )
    .await;
    process.expect_line("a-hostile.json", PROCESS_WAIT).unwrap();

    // A second one while running, then a change to the good file: the
    // directory is still being reloaded, and nothing was lost meanwhile.
    hostile.create(&node.hooks.join("b-hostile.json"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    first.clear();
    run_pods_until(
        &mut process,
        &socket,
        "the good registration kept with a second hostile entry",
        || first.stages().contains(&"PreRunPodSandbox".to_string()),
    )
    .await;
    register(
        &node.hooks,
        "koordlet.json",
        &second_socket,
        "Ignore",
        &ALL_STAGES,
    );
    run_pods_until(
        &mut process,
        &socket,
        "the rewritten registration taken in",
        || second.stages().contains(&"PreRunPodSandbox".to_string()),
    )
    .await;
    process.expect_line("b-hostile.json", PROCESS_WAIT).unwrap();

    let none: Vec<(String, u64)> = ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
        .into_iter()
        .map(|set| (set.to_string(), 0))
        .collect();
    assert_eq!(capabilities, none, "the proxy ran without capabilities");
    // Nothing was read without bound: the proxy stays small.
    let peak = peak_rss_kib(process.pid());
    assert!(
        peak < MAX_PEAK_RSS_KIB,
        "the proxy's peak RSS was {peak} KiB (limit {MAX_PEAK_RSS_KIB} KiB): it read a hostile entry without bound"
    );
    let text = tokio::task::spawn_blocking(move || {
        let text = metrics(&process);
        drop(process);
        text
    })
    .await
    .unwrap();
    let counted = text.lines().any(|line| {
        line.starts_with("koord_runtime_proxy_hook_registration_errors_total")
            && line.contains(&format!("reason=\"{}\"", hostile.reason()))
    });
    assert!(counted, "skipped entries counted by reason:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_the_registration_directory_is_skipped() {
    hostile_entries_are_skipped("koord-rp-fifo", Hostile::Fifo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_to_dev_zero_in_the_registration_directory_is_skipped() {
    hostile_entries_are_skipped("koord-rp-devzero", Hostile::DevZero).await;
}

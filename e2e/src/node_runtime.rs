//! Node-level end-to-end support: a private containerd started with the
//! `hack/node-runtime` kit, koordlet as a real process, and a CRI client.
//!
//! Every test gets its own `NR_ROOT` and `NR_KUBEPODS`, so several can run
//! beside each other and beside other users of the kit. The slow, shared
//! part of the kit (packages, images, the containerd `.deb`) is prepared once
//! under `NR_SETUP_ROOT` (default `/tmp/node-runtime`, what `.ci/run`
//! prepares) and linked into each private root.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use koord_common::sync::MutexExt;
use koord_common::testing::{TestProcess, http_get_blocking};

/// Why a node test cannot run here; the test prints it and passes.
#[derive(Debug, Clone)]
pub struct Skip(pub String);

/// Set (to anything but empty or `0`) where the node runtime must be there,
/// as in `.ci/run` after the kit's setup succeeded: a skip then fails the
/// test, so CI cannot go green without node coverage.
pub const REQUIRE_NODE_ENV: &str = "KOORD_E2E_REQUIRE_NODE";

fn node_required() -> bool {
    std::env::var(REQUIRE_NODE_ENV).is_ok_and(|value| !value.is_empty() && value != "0")
}

impl Skip {
    /// Prints the one `SKIP:` line for `test`, or fails the test when
    /// [`REQUIRE_NODE_ENV`] says the node runtime must be available.
    pub fn report(&self, test: &str) {
        if node_required() {
            panic!(
                "{test}: the node runtime is required ({REQUIRE_NODE_ENV}) but: {}",
                self.0
            );
        }
        eprintln!("SKIP: {test}: {}", self.0);
    }
}

/// The kit folder in this repository.
pub fn kit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/node-runtime")
}

/// The workspace root.
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("Uid:"))
                .and_then(|line| line.split_whitespace().nth(2).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

fn run_kit_script(script: &str, args: &[&str], env: &[(&str, &Path)]) -> Result<String, String> {
    let mut command = Command::new("bash");
    command.arg(kit_dir().join(script)).args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("cannot run {script}: {err}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{script} {} failed ({}): {}",
            args.join(" "),
            output.status,
            tail(
                &format!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr)),
                6
            )
        ))
    }
}

static SETUP: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);

/// The prepared shared kit root (runs `setup.sh 1.7` once when needed).
pub fn prepared_kit() -> Result<PathBuf, Skip> {
    if !is_root() {
        return Err(Skip(
            "not root: containerd and cgroup writes need root".into(),
        ));
    }
    let mut guard = SETUP.lock_or_recover();
    if let Some(result) = guard.as_ref() {
        return result.clone().map_err(Skip);
    }
    let base = std::env::var_os("NR_SETUP_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/node-runtime"));
    let ready = base.join("images/busybox.tar").is_file()
        && base
            .join("cache/containerd-1.7/usr/bin/containerd")
            .is_file()
        && base.join("cni/net.d/10-koord-noop.conflist").is_file();
    let result = if ready {
        Ok(base)
    } else {
        run_kit_script("setup.sh", &["1.7"], &[("NR_ROOT", &base)])
            .map(|_| base)
            .map_err(|err| format!("kit setup failed: {err}"))
    };
    *guard = Some(result.clone());
    result.map_err(Skip)
}

static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// A private containerd 1.7 with NRI, stopped (`down.sh --purge`) on drop.
pub struct Containerd {
    root: PathBuf,
    kubepods: String,
    env: BTreeMap<String, String>,
    /// A containerd this harness restarted itself (up.sh's first one is not our child).
    restarted: Option<Child>,
}

impl Containerd {
    /// Starts containerd 1.7 with `--nri` in a fresh private root.
    pub fn start(label: &str) -> Result<Self, Skip> {
        let base = prepared_kit()?;
        let n = INSTANCE.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let root = PathBuf::from(format!("/tmp/koord-e2e/{label}-{pid}-{n}"));
        let kubepods = format!("/kubepods-{label}-{pid}-{n}");
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root)
            .map_err(|err| Skip(format!("cannot create {}: {err}", root.display())))?;
        for shared in ["images", "cni", "proto", "cache"] {
            std::os::unix::fs::symlink(base.join(shared), root.join(shared))
                .map_err(|err| Skip(format!("cannot link the kit's {shared}: {err}")))?;
        }
        let mut containerd = Containerd {
            root: root.clone(),
            kubepods: kubepods.clone(),
            env: BTreeMap::new(),
            restarted: None,
        };
        let stdout = run_kit_script(
            "up.sh",
            &["1.7", "--nri"],
            &[("NR_ROOT", &root), ("NR_KUBEPODS", Path::new(&kubepods))],
        )
        .map_err(|err| Skip(format!("containerd 1.7 did not start: {err}")))?;
        containerd.env = stdout
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        if containerd.var("NR_NRI_SOCK").is_empty() {
            return Err(Skip("up.sh reported no NRI socket".into()));
        }
        Ok(containerd)
    }

    /// Starts containerd `version` (`1.6`, `1.7`, `2.1`) without NRI in a
    /// fresh private root (e.g. 1.6 behind koord-runtime-proxy).
    pub fn start_without_nri(label: &str, version: &str) -> Result<Self, Skip> {
        let base = prepared_kit()?;
        let n = INSTANCE.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let root = PathBuf::from(format!("/tmp/koord-e2e/{label}-{pid}-{n}"));
        let kubepods = format!("/kubepods-{label}-{pid}-{n}");
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root)
            .map_err(|err| Skip(format!("cannot create {}: {err}", root.display())))?;
        for shared in ["images", "cni", "proto", "cache"] {
            std::os::unix::fs::symlink(base.join(shared), root.join(shared))
                .map_err(|err| Skip(format!("cannot link the kit's {shared}: {err}")))?;
        }
        let mut containerd = Containerd {
            root: root.clone(),
            kubepods: kubepods.clone(),
            env: BTreeMap::new(),
            restarted: None,
        };
        let stdout = run_kit_script(
            "up.sh",
            &[version],
            &[("NR_ROOT", &root), ("NR_KUBEPODS", Path::new(&kubepods))],
        )
        .map_err(|err| Skip(format!("containerd {version} did not start: {err}")))?;
        containerd.env = stdout
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        Ok(containerd)
    }

    pub fn var(&self, key: &str) -> String {
        self.env.get(key).cloned().unwrap_or_default()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn cri_socket(&self) -> PathBuf {
        PathBuf::from(self.var("NR_CRI_SOCK"))
    }

    pub fn nri_socket(&self) -> PathBuf {
        PathBuf::from(self.var("NR_NRI_SOCK"))
    }

    /// The cgroup subtree of this instance's pods (e.g. `/kubepods-x-1-0`).
    pub fn kubepods(&self) -> &str {
        &self.kubepods
    }

    /// koordlet's `--kubepods-cgroup-dir` for this instance: koordlet's
    /// runtime hooks only touch pod cgroups below it.
    pub fn kubepods_flag(&self) -> String {
        format!("--kubepods-cgroup-dir={}", self.kubepods)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.var("NR_LOG")).unwrap_or_default()
    }

    fn pid(&self) -> Option<u32> {
        fs::read_to_string(self.root.join("run/containerd.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Stops containerd (SIGTERM; containers and shims keep running) and
    /// starts it again on the same state; waits for both sockets.
    pub fn restart(&mut self) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("no containerd pid recorded"))?;
        Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while process_alive(pid) {
            if Instant::now() > deadline {
                return Err(io::Error::other(format!("containerd {pid} did not stop")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(mut child) = self.restarted.take() {
            let _ = child.wait();
        }
        let bin = PathBuf::from(self.var("NR_CONTAINERD_BIN"));
        let log = fs::OpenOptions::new()
            .append(true)
            .open(self.var("NR_LOG"))?;
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(bin.join("containerd"))
            .arg("--config")
            .arg(self.root.join("run/config.toml"))
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        fs::write(self.root.join("run/containerd.pid"), child.id().to_string())?;
        self.restarted = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(self.cri_socket().exists() && self.nri_socket().exists()) {
            if Instant::now() > deadline {
                return Err(io::Error::other("containerd sockets did not come back"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

/// The process exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let kubepods = PathBuf::from(&self.kubepods);
        if let Err(err) = run_kit_script(
            "down.sh",
            &["--purge"],
            &[("NR_ROOT", &self.root), ("NR_KUBEPODS", &kubepods)],
        ) {
            eprintln!("node-runtime cleanup: {err}");
        }
        if let Some(mut child) = self.restarted.take() {
            let _ = child.wait();
        }
    }
}

/// Builds the koordlet binary (a no-op when up to date) and returns its path.
pub fn koordlet_binary() -> Result<PathBuf, String> {
    static BUILT: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    workspace_binary(&BUILT, "koordlet", "koordlet")
}

/// Set to `release` to run the node tests and benchmarks against optimised
/// binaries (the default is the debug build `cargo test` already made).
pub const PROFILE_ENV: &str = "KOORD_E2E_PROFILE";

/// Builds `bin` of `package` once per test process (a no-op when up to
/// date; the first caller waits for cargo's build lock) and returns its path.
pub fn workspace_binary(
    built: &Mutex<Option<Result<PathBuf, String>>>,
    package: &str,
    bin: &str,
) -> Result<PathBuf, String> {
    let mut guard = built.lock_or_recover();
    if let Some(result) = guard.as_ref() {
        return result.clone();
    }
    let release = match std::env::var(PROFILE_ENV).as_deref() {
        Ok("release") => true,
        Ok("debug") | Err(_) => false,
        Ok(other) => {
            let err = format!("{PROFILE_ENV}={other}: expected release or debug");
            *guard = Some(Err(err.clone()));
            return Err(err);
        }
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let started = Instant::now();
    let mut args = vec!["build", "-p", package, "--bin", bin];
    if release {
        args.push("--release");
    }
    let output = Command::new(cargo)
        .args(&args)
        .current_dir(workspace_dir())
        .output();
    let result = match output {
        Ok(output) if output.status.success() => {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_dir().join("target"));
            let profile_dir = if release { "release" } else { "debug" };
            Ok(target.join(profile_dir).join(bin))
        }
        Ok(output) => Err(format!(
            "cargo {} failed: {}",
            args.join(" "),
            tail(&String::from_utf8_lossy(&output.stderr), 10)
        )),
        Err(err) => Err(format!("cannot run cargo: {err}")),
    };
    eprintln!(
        "{bin} binary: cargo {} took {:?} (waits for the build lock)",
        args.join(" "),
        started.elapsed()
    );
    *guard = Some(result.clone());
    result
}

/// koordlet running in standalone mode as this node's NRI plugin.
pub struct Koordlet {
    pub process: TestProcess,
    pub addr: SocketAddr,
}

impl Koordlet {
    /// Starts koordlet against `nri_socket`, with pods from `pods_file`.
    pub fn start(nri_socket: &Path, pods_file: &Path, extra: &[&str]) -> Result<Self, String> {
        let binary = koordlet_binary()?;
        let mut command = Command::new(binary);
        command
            .args([
                "--addr=127.0.0.1:0",
                "--node-name=node-e2e",
                "--runtime-hooks-nri-backoff-duration=100ms",
                "--runtime-hooks-nri-backoff-cap=1s",
                "--enable-node-metric-report=false",
            ])
            .arg(format!(
                "--runtime-hooks-nri-socket-path={}",
                nri_socket.display()
            ))
            .arg(format!("--pods-file={}", pods_file.display()))
            .args(extra)
            .env("RUST_LOG", "info");
        let process =
            TestProcess::spawn(command).map_err(|err| format!("cannot start koordlet: {err}"))?;
        let addr = process
            .wait_for_serving_addr("health and metrics", Duration::from_secs(60))
            .ok_or_else(|| format!("koordlet did not serve: {}", tail(&process.output(), 20)))?;
        Ok(Self { process, addr })
    }

    /// The `/metrics` body.
    pub fn metrics(&self) -> String {
        http_get_blocking(self.addr, "/metrics", Duration::from_secs(10))
            .map(|response| response.body)
            .unwrap_or_default()
    }

    /// The value of an unlabelled sample (`koordlet_nri_connected`, ...).
    pub fn metric(&self, name: &str) -> Option<f64> {
        metric_value(&self.metrics(), name)
    }

    /// Polls `metric` until `done` accepts its value.
    pub fn wait_metric(
        &self,
        name: &str,
        timeout: Duration,
        done: impl Fn(f64) -> bool,
    ) -> Option<f64> {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.metric(name);
            if value.is_some_and(&done) {
                return value;
            }
            if Instant::now() > deadline {
                return value;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM and wait.
    pub fn stop(mut self) {
        let _ = self.process.signal("TERM");
        let _ = self.process.wait_exit(Duration::from_secs(20));
    }
}

/// The value of the sample `name` (no labels) in an exposition body.
pub fn metric_value(body: &str, name: &str) -> Option<f64> {
    body.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let value = rest.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Reads a cgroup file of `controller` at `dir` (absolute cgroup path).
pub fn read_cgroup(controller: &str, dir: &str, file: &str) -> io::Result<String> {
    let path = format!("/sys/fs/cgroup/{controller}{dir}/{file}");
    fs::read_to_string(&path)
        .map(|text| text.trim().to_string())
        .map_err(|err| io::Error::new(err.kind(), format!("{path}: {err}")))
}

/// Writes a cgroup file (to simulate drift).
pub fn write_cgroup(controller: &str, dir: &str, file: &str, value: &str) -> io::Result<()> {
    let path = format!("/sys/fs/cgroup/{controller}{dir}/{file}");
    fs::write(&path, value).map_err(|err| io::Error::new(err.kind(), format!("{path}: {err}")))
}

/// Polls `read` until it returns `expected` or the timeout passes; returns the last value.
pub fn wait_for_value(
    timeout: Duration,
    expected: &str,
    mut read: impl FnMut() -> io::Result<String>,
) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let value = read().unwrap_or_else(|err| format!("<{err}>"));
        if value == expected || Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Messages of a CRI container log file (`<time> <stream> <tag> <message>`).
pub fn container_log_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.splitn(4, ' ').nth(3).map(str::to_string))
        .collect()
}

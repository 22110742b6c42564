//! Pods of a standalone koordlet made of real processes: kubelet-style
//! cgroups below a private kubepods directory, busy processes placed in them,
//! the pods file that describes them, and readers of the NodeMetric it writes.
//! Everything created is removed by [`Cleanup`], also when a test fails.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use apis::extension::QuantityValue;

pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Hierarchies the pods' cgroups are created in; the collector reads CPU from
/// cpuacct, throttling from cpu and memory from memory.
pub const CONTROLLERS: [&str; 3] = ["cpu", "cpuacct", "memory"];

/// One pod: its UID, its one container's ID, the busy process inside.
pub struct TestPod {
    pub name: &'static str,
    pub uid: String,
    pub container_id: String,
    /// This run's kubepods directory.
    pub kubepods: String,
}

impl TestPod {
    pub fn relative_dir(&self) -> PathBuf {
        PathBuf::from(format!("{}/burstable/pod{}", self.kubepods, self.uid))
    }

    pub fn container_dir(&self) -> PathBuf {
        self.relative_dir().join(&self.container_id)
    }

    pub fn cpuacct_usage_ns(&self) -> u64 {
        let path = Path::new(CGROUP_ROOT)
            .join("cpuacct")
            .join(self.relative_dir())
            .join("cpuacct.usage");
        fs::read_to_string(&path).unwrap().trim().parse().unwrap()
    }
}

/// Removes what the test created, even on panic: kills the busy processes
/// (which empties their cgroups) and removes the directories bottom-up.
#[derive(Default)]
pub struct Cleanup {
    pub processes: Vec<Child>,
    pub dirs: Vec<PathBuf>,
}

impl Cleanup {
    /// Kills one of the processes started by this test (its cgroup stays).
    pub fn stop_process(&mut self, pid: u32) {
        if let Some(index) = self.processes.iter().position(|p| p.id() == pid) {
            let mut process = self.processes.remove(index);
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for process in &mut self.processes {
            let _ = process.kill();
            let _ = process.wait();
        }
        for dir in self.dirs.iter().rev() {
            // A killed task may take a moment to leave its cgroup.
            for _ in 0..50 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Why the test cannot run here, if it cannot.
pub fn skip_reason() -> Option<String> {
    for controller in CONTROLLERS {
        let root = Path::new(CGROUP_ROOT).join(controller);
        if !root.join("cgroup.procs").exists() {
            return Some(format!("{} is not a cgroup v1 hierarchy", root.display()));
        }
    }
    let probe = Path::new(CGROUP_ROOT)
        .join("cpu")
        .join(format!("koord-test-{}-probe", std::process::id()));
    match fs::create_dir(&probe) {
        Ok(()) => {
            let _ = fs::remove_dir(&probe);
            None
        }
        Err(err) => Some(format!(
            "cannot create cgroups under {CGROUP_ROOT}/cpu ({err}); needs root"
        )),
    }
}

/// Creates `dir` below each controller, recording what was new.
pub fn create_cgroup(relative: &Path, cleanup: &mut Cleanup) {
    for controller in CONTROLLERS {
        let dir = Path::new(CGROUP_ROOT).join(controller).join(relative);
        if !dir.exists() {
            fs::create_dir(&dir).unwrap_or_else(|err| panic!("mkdir {}: {err}", dir.display()));
            cleanup.dirs.push(dir);
        }
    }
}

/// Starts a process spinning on one CPU and moves it into the container's
/// cpu and cpuacct cgroups (memory is left alone: the test's own memory
/// cgroup must keep accounting for it).
pub fn start_busy_process(pod: &TestPod, cleanup: &mut Cleanup) -> u32 {
    start_busy_process_in(&pod.container_dir(), cleanup)
}

pub fn cpuacct_usage_ns(relative: &Path) -> u64 {
    let path = Path::new(CGROUP_ROOT)
        .join("cpuacct")
        .join(relative)
        .join("cpuacct.usage");
    fs::read_to_string(&path).unwrap().trim().parse().unwrap()
}

/// Returns the process ID (see [`Cleanup::stop_process`]).
pub fn start_busy_process_in(relative: &Path, cleanup: &mut Cleanup) -> u32 {
    let child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    cleanup.processes.push(child);
    for controller in ["cpu", "cpuacct"] {
        let procs = Path::new(CGROUP_ROOT)
            .join(controller)
            .join(relative)
            .join("cgroup.procs");
        fs::write(&procs, pid.to_string())
            .unwrap_or_else(|err| panic!("attach {pid} to {}: {err}", procs.display()));
    }
    pid
}

/// Two days ago: past the predictor's 24 h cold start.
pub fn two_days_ago() -> String {
    let then = SystemTime::now() - Duration::from_secs(2 * 86_400);
    k8s_openapi::jiff::Timestamp::try_from(then)
        .unwrap()
        .to_string()
}

pub fn pod_json(
    pod: &TestPod,
    labels: serde_json::Value,
    requests: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name, "namespace": "koord-test", "uid": pod.uid, "labels": labels,
            "creationTimestamp": two_days_ago(),
        },
        "spec": {"containers": [{"name": "busy", "image": "busybox", "resources": {"requests": requests}}]},
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "containerStatuses": [{
                "name": "busy", "containerID": format!("containerd://{}", pod.container_id),
                "image": "busybox", "imageID": "", "ready": true, "restartCount": 0
            }]
        }
    })
}

pub fn cores(quantity: &serde_json::Value) -> f64 {
    let text = quantity.as_str().unwrap_or_default();
    QuantityValue::parse(text).unwrap().milli_value() as f64 / 1000.0
}

pub fn bytes(quantity: &serde_json::Value) -> f64 {
    let text = quantity.as_str().unwrap_or_default();
    QuantityValue::parse(text).unwrap().value() as f64
}

/// Seconds since the epoch of an RFC 3339 `updateTime`.
pub fn seconds_since_epoch(text: &str) -> Option<u64> {
    let timestamp: k8s_openapi::jiff::Timestamp = text.parse().ok()?;
    u64::try_from(timestamp.as_second()).ok()
}

/// Number of CPUs in a list such as `0-3,8`.
pub fn count_cpus(text: &str) -> usize {
    text.trim()
        .split(',')
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// Starts a process holding `mib` MiB of anonymous memory, charged to the
/// container's memory cgroup (and accounted in its cpu and cpuacct ones):
/// the shell moves itself into the cgroups, then becomes `dd`, which fills a
/// buffer of that size and blocks writing it to a pipe this test never
/// reads. Returns the process ID (see [`Cleanup::stop_process`]).
pub fn start_memory_hog_in(relative: &Path, mib: u64, cleanup: &mut Cleanup) -> u32 {
    let procs = |controller: &str| {
        Path::new(CGROUP_ROOT)
            .join(controller)
            .join(relative)
            .join("cgroup.procs")
            .display()
            .to_string()
    };
    let script = format!(
        "echo $$ > {} && echo $$ > {} && echo $$ > {} && exec dd if=/dev/zero bs={mib}M count=1 2>/dev/null",
        procs("memory"),
        procs("cpu"),
        procs("cpuacct"),
    );
    let child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    cleanup.processes.push(child);
    pid
}

/// Bytes charged to a cgroup's memory controller.
pub fn memory_usage_bytes(relative: &Path) -> u64 {
    let path = Path::new(CGROUP_ROOT)
        .join("memory")
        .join(relative)
        .join("memory.usage_in_bytes");
    fs::read_to_string(&path).unwrap().trim().parse().unwrap()
}

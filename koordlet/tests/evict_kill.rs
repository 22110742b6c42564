#![allow(clippy::unwrap_used)]
//! Standalone eviction on the real cgroup v1 hierarchy: SIGKILL reaches the
//! processes of a pod's cgroup tree only with `--evict-standalone-kill`.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use koordlet::evictor::qos::QosEvictor;
use koordlet::evictor::{EvictionOutcome, EvictionRequest, EvictorArgs, PodEvictor, PodRef};
use koordlet::qosmanager::framework::{self, Evictor as _};
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller};
use support::cgroup::{ThrowawayCgroup, real_v1_layout_or_skip};

/// A `sleep` child, killed on drop if still alive.
struct Sleeper(Child);

impl Sleeper {
    fn spawn() -> Self {
        let child = Command::new("sleep")
            .arg("1000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// The signal that ended it, waiting up to `timeout`; `None` if alive.
    fn killed_by(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.signal();
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn request(uid: &str, dirs: Vec<std::path::PathBuf>) -> EvictionRequest {
    EvictionRequest {
        pod: PodRef {
            namespace: "default".to_string(),
            name: "be-pod".to_string(),
            uid: uid.to_string(),
        },
        trigger: "BEMemoryEvict".to_string(),
        message: "test".to_string(),
        cgroup_dirs: dirs,
        containers: Vec::new(),
    }
}

#[tokio::test]
async fn kill_is_opt_in_and_reaches_every_process_of_the_pod_tree() {
    let Some(layout) = real_v1_layout_or_skip(&[Controller::Cpu]) else {
        return;
    };
    let mut cgroup = ThrowawayCgroup::new(&layout, "evict-kill", &[Controller::Cpu]).unwrap();
    let pod = cgroup.create_child("podx").unwrap();
    let container = cgroup.create_child("podx/container-a").unwrap();
    let mut in_pod = Sleeper::spawn();
    let mut in_container = Sleeper::spawn();
    let mut outside = Sleeper::spawn();
    cgroup.attach(&pod, in_pod.pid()).unwrap();
    cgroup.attach(&container, in_container.pid()).unwrap();
    let pod_dir = cgroup.path(&pod, Controller::Cpu);

    // Without the flag: logged only, nothing dies.
    let off = PodEvictor::for_mode(None, "node-a", &EvictorArgs::default());
    assert_eq!(
        off.evict(&request("x", vec![pod_dir.clone()])).await,
        EvictionOutcome::LoggedOnly
    );
    assert_eq!(in_pod.killed_by(Duration::from_millis(300)), None);

    let on = PodEvictor::for_mode(
        None,
        "node-a",
        &EvictorArgs {
            standalone_kill: true,
            ..EvictorArgs::default()
        },
    );
    let outcome = on.evict(&request("x", vec![pod_dir])).await;
    assert_eq!(outcome, EvictionOutcome::Killed { processes: 2 });
    assert_eq!(in_pod.killed_by(Duration::from_secs(20)), Some(9));
    assert_eq!(in_container.killed_by(Duration::from_secs(20)), Some(9));
    assert_eq!(
        outside.killed_by(Duration::from_millis(300)),
        None,
        "a process outside the pod survived"
    );
}

#[test]
fn runner_adapter_finds_the_pod_cgroup_by_uid() {
    let Some(layout) = real_v1_layout_or_skip(&[Controller::Cpu]) else {
        return;
    };
    let mut cgroup = ThrowawayCgroup::new(&layout, "evict-adapter", &[Controller::Cpu]).unwrap();
    let pod = cgroup
        .create_child("kubepods/besteffort/pod1234-abcd")
        .unwrap();
    let mut victim = Sleeper::spawn();
    cgroup.attach(&pod, victim.pid()).unwrap();
    // A cgroup root whose `cpu` hierarchy is the throwaway tree, so the
    // kubelet-style path resolves inside it.
    let root = koord_common::testing::TempDir::new("evict-adapter-root").unwrap();
    std::os::unix::fs::symlink(
        layout.root.join("cpu").join(cgroup.dir()),
        root.path().join("cpu"),
    )
    .unwrap();
    let fake_layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root.path());
    assert!(
        Path::new(
            &fake_layout
                .root
                .join("cpu/kubepods/besteffort/pod1234-abcd")
        )
        .is_dir()
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let evictor = PodEvictor::for_mode(
        None,
        "node-a",
        &EvictorArgs {
            standalone_kill: true,
            ..EvictorArgs::default()
        },
    );
    let adapter = QosEvictor::new(evictor, fake_layout, runtime.handle().clone());
    adapter.evict(framework::EvictionRequest {
        uid: "1234-abcd".to_string(),
        namespace: "default".to_string(),
        name: "be-pod".to_string(),
        reason: "BEMemoryEvict".to_string(),
        message: "test".to_string(),
        strategy: "memoryevict",
        container_ids: Vec::new(),
    });
    // Drive the spawned eviction to completion.
    let killed = runtime.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(signal) = victim.killed_by(Duration::ZERO) {
                return Some(signal);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert_eq!(killed, Some(9));
}

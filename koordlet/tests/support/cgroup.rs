//! Throwaway cgroups on the machine's real cgroup v1 hierarchy, and a busy
//! process to put in them.
//!
//! - [`real_v1_layout_or_skip`] returns the host layout, or prints
//!   `SKIP: <reason>` and returns `None` when not root or a hierarchy is not
//!   writable.
//! - [`ThrowawayCgroup`] creates `<root>/<controller>/koord-test-<pid>-<n>-<label>`
//!   (plus children) and, on drop — also when a test panics — moves any
//!   remaining tasks back to the root cgroup and removes the directories
//!   bottom-up. New cpuset cgroups get their parent's `cpuset.cpus`/`mems`,
//!   so tasks can be attached.
//! - [`BusyProcess`] spins a shell loop and kills it on drop.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller};

/// Where the host mounts its v1 hierarchies.
pub const HOST_CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The host's v1 layout (with the hybrid `unified` mount for PSI when present),
/// or `None` after printing why the real-cgroup test must be skipped.
pub fn real_v1_layout_or_skip(controllers: &[Controller]) -> Option<CgroupLayout> {
    match check_real_v1(controllers) {
        Ok(layout) => Some(layout),
        Err(reason) => {
            println!("SKIP: {reason}");
            None
        }
    }
}

fn check_real_v1(controllers: &[Controller]) -> Result<CgroupLayout, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let is_root = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        == Some("0");
    if !is_root {
        return Err("real cgroup tests need root".to_string());
    }
    let root = Path::new(HOST_CGROUP_ROOT);
    for controller in controllers {
        let dir = root.join(controller.as_str());
        // `tasks` only exists in v1 hierarchies.
        if !dir.join("tasks").is_file() {
            return Err(format!(
                "no cgroup v1 {controller} hierarchy at {}",
                dir.display()
            ));
        }
        let probe = dir.join(unique_name("probe"));
        std::fs::create_dir(&probe)
            .map_err(|e| format!("cgroup v1 {controller} hierarchy is not writable: {e}"))?;
        let _ = std::fs::remove_dir(&probe);
    }
    let mut layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root);
    let unified = root.join("unified");
    if unified.join("cgroup.procs").is_file() {
        layout = layout.with_unified_root(unified);
    }
    Ok(layout)
}

fn unique_name(label: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "koord-test-{}-{}-{label}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A cgroup tree created for one test in each given controller; removed on drop.
pub struct ThrowawayCgroup {
    layout: CgroupLayout,
    controllers: Vec<Controller>,
    base: PathBuf,
    /// Relative dirs in creation order (parents first).
    created: Vec<PathBuf>,
}

impl ThrowawayCgroup {
    pub fn new(layout: &CgroupLayout, label: &str, controllers: &[Controller]) -> io::Result<Self> {
        let mut cgroup = Self {
            layout: layout.clone(),
            controllers: controllers.to_vec(),
            base: PathBuf::from(unique_name(label)),
            created: Vec::new(),
        };
        let base = cgroup.base.clone();
        cgroup.create(&base)?;
        Ok(cgroup)
    }

    /// The tree's top directory, relative to the hierarchy root.
    pub fn dir(&self) -> &Path {
        &self.base
    }

    /// Creates `<base>/<child>` (nested paths allowed, parents first) and
    /// returns its relative dir.
    pub fn create_child(&mut self, child: &str) -> io::Result<PathBuf> {
        let mut dir = self.base.clone();
        for part in Path::new(child).components() {
            dir.push(part);
            if !self.created.contains(&dir) {
                self.create(&dir.clone())?;
            }
        }
        Ok(dir)
    }

    /// The absolute directory of `relative` in one controller.
    pub fn path(&self, relative: &Path, controller: Controller) -> PathBuf {
        self.layout.root.join(controller.as_str()).join(relative)
    }

    /// Moves `pid` into `relative` in every controller of the tree.
    pub fn attach(&self, relative: &Path, pid: u32) -> io::Result<()> {
        for controller in &self.controllers {
            std::fs::write(
                self.path(relative, *controller).join("cgroup.procs"),
                pid.to_string(),
            )?;
        }
        Ok(())
    }

    fn create(&mut self, relative: &Path) -> io::Result<()> {
        for controller in self.controllers.clone() {
            let dir = self.path(relative, controller);
            std::fs::create_dir(&dir)?;
            if !self.created.iter().any(|d| d == relative) {
                self.created.push(relative.to_path_buf());
            }
            if controller == Controller::Cpuset {
                // A new cpuset cgroup starts empty; inherit the parent's lists.
                let parent = dir.parent().unwrap_or(&dir).to_path_buf();
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let value = std::fs::read_to_string(parent.join(file))?;
                    std::fs::write(dir.join(file), value.trim())?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for ThrowawayCgroup {
    fn drop(&mut self) {
        for relative in self.created.iter().rev() {
            for controller in &self.controllers {
                let dir = self.path(relative, *controller);
                if !dir.exists() {
                    continue;
                }
                let root_procs = self
                    .layout
                    .root
                    .join(controller.as_str())
                    .join("cgroup.procs");
                let deadline = Instant::now() + Duration::from_secs(5);
                loop {
                    // Move leftovers out, then retry until the kernel lets go.
                    if let Ok(pids) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                        for pid in pids.split_whitespace() {
                            let _ = std::fs::write(&root_procs, pid);
                        }
                    }
                    match std::fs::remove_dir(&dir) {
                        Ok(()) => break,
                        Err(error) if Instant::now() >= deadline => {
                            eprintln!("cannot remove test cgroup {}: {error}", dir.display());
                            break;
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
        }
    }
}

/// A CPU-bound child process (`sh -c 'while :; do :; done'`), killed on drop.
pub struct BusyProcess {
    child: Child,
}

impl BusyProcess {
    pub fn spawn() -> io::Result<Self> {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for BusyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

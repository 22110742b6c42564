//! Where koordlet finds the host's kernel interfaces. Every root is
//! configurable (upstream's flag names) so tests can point them at a
//! generated tree, and a containerised koordlet at the host's mounts.

pub mod cgroup;
pub mod cgroupfs;
pub mod cputopology;
pub mod units;

use std::path::{Path, PathBuf};

/// Default `--var-run-root-dir` (upstream's host-mode value, like the other
/// roots' defaults), which relative socket paths (NRI, the container
/// runtimes' CRI sockets) are resolved against.
pub const VAR_RUN_ROOT: &str = "/var/run/";

/// Host filesystem roots, as upstream's `-cgroup-root-dir`, `-proc-root-dir`,
/// `-sys-root-dir` and `-sys-fs-root-dir` flags.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct SystemArgs {
    /// Root of the cgroup hierarchies (v1: one directory per controller below it).
    #[arg(
        long = "cgroup-root-dir",
        default_value = "/sys/fs/cgroup/",
        value_name = "DIR"
    )]
    pub cgroup_root_dir: PathBuf,
    /// The host's /proc.
    #[arg(long = "proc-root-dir", default_value = "/proc/", value_name = "DIR")]
    pub proc_root_dir: PathBuf,
    /// The host's /sys (CPU topology, NUMA nodes).
    #[arg(long = "sys-root-dir", default_value = "/sys/", value_name = "DIR")]
    pub sys_root_dir: PathBuf,
    /// The host's /sys/fs (resctrl lives at `<dir>/resctrl`).
    #[arg(
        long = "sys-fs-root-dir",
        default_value = "/sys/fs/",
        value_name = "DIR"
    )]
    pub sys_fs_root_dir: PathBuf,
    /// The kubelet's pod cgroup below each hierarchy root (ours; default
    /// `kubepods` for the cgroupfs driver, `kubepods.slice` for systemd). A
    /// kubelet started with `--cgroup-root=/custom` keeps its pods in
    /// `custom/kubepods`. The runtime hooks write only below it (see
    /// `docs/runtimehooks.md`, "Security").
    #[arg(long = "kubepods-cgroup-dir", value_name = "DIR")]
    pub kubepods_cgroup_dir: Option<PathBuf>,
}

impl Default for SystemArgs {
    fn default() -> Self {
        Self {
            cgroup_root_dir: "/sys/fs/cgroup/".into(),
            proc_root_dir: "/proc/".into(),
            sys_root_dir: "/sys/".into(),
            sys_fs_root_dir: "/sys/fs/".into(),
            kubepods_cgroup_dir: None,
        }
    }
}

impl SystemArgs {
    /// All roots below one directory, for tests over a generated tree:
    /// `<base>/sys/fs/cgroup`, `<base>/proc`, `<base>/sys`, `<base>/sys/fs`.
    pub fn under(base: &Path) -> Self {
        Self {
            cgroup_root_dir: base.join("sys/fs/cgroup"),
            proc_root_dir: base.join("proc"),
            sys_root_dir: base.join("sys"),
            sys_fs_root_dir: base.join("sys/fs"),
            kubepods_cgroup_dir: None,
        }
    }

    /// `<sys-fs-root>/resctrl`.
    pub fn resctrl_root(&self) -> PathBuf {
        self.sys_fs_root_dir.join("resctrl")
    }
}

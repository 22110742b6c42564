//! Host applications (NodeSLO `spec.hostApplications`): processes run
//! outside Kubernetes in cgroups of their own, which the runtime hooks
//! treat like pods of the application's QoS class (upstream's host
//! application reconciler): CPUSetAllocator gives LS applications the LS
//! share pool, GroupIdentity gives every application the bvt value of its
//! class ([`crate::runtimehooks::protocol::Hook::host_app`]).
//!
//! The cgroup directory (upstream's rule, relative to each hierarchy root):
//! without `cgroupPath`, `host-latency-sensitive/<name>` for LSE/LSR/LS,
//! `host-best-effort/<name>` for BE and `<name>` otherwise; with it,
//! `<base>/<parentDir>/<relativePath>` where base is the root
//! (`CgroupRoot` or unset), `Kubepods`, `KubepodsBurstable` or
//! `KubepodsBesteffort` in the kubelet's layout. A leading `/` in
//! `parentDir` / `relativePath` stays below the base, as Go's
//! `filepath.Join` does upstream.
//!
//! The NodeSLO is outside input, so unlike upstream (which joins and
//! cleans whatever it is given) a path is refused, and nothing written for
//! that application, when: a component is `..`; it holds a NUL or control
//! character, a component is longer than NAME_MAX or the whole is longer
//! than PATH_MAX; the name (without `cgroupPath`) is empty or more than one
//! component; the base is unknown; it resolves to a hierarchy root, the
//! kubepods directory or a QoS tier directory (the tier reconciler owns
//! those), or to a pod's cgroup or anything below one; and, on the node
//! ([`check_fs`]), a component of it is a symlink or not a directory.
//! [`resolve`] is pure; [`check_fs`] reads only metadata.

use std::path::{Path, PathBuf};

use apis::extension::QoSClass;
use apis::slo::v1alpha1::{CgroupBaseType, HostApplicationSpec};

use crate::bounds::for_log;
use crate::system::cgroup::{CgroupLayout, CgroupVersion, Controller, QosTier};

/// Upstream's default parents of applications without a cgroup path.
pub const HOST_LATENCY_SENSITIVE_DIR: &str = "host-latency-sensitive";
pub const HOST_BEST_EFFORT_DIR: &str = "host-best-effort";
/// The most host applications enforced from one NodeSLO.
pub const MAX_HOST_APPS: usize = 256;
/// Longest cgroup path accepted (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest directory name (Linux's NAME_MAX).
const MAX_NAME_BYTES: usize = 255;

/// A host application the hooks decide for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAppContext {
    pub name: String,
    pub qos: QoSClass,
    /// Validated, relative to each hierarchy root.
    pub cgroup_dir: PathBuf,
}

/// Why a host application's cgroup is not touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostAppRefusal {
    #[error("the name is empty")]
    EmptyName,
    #[error("the name {0:?} is not one directory name")]
    BadName(String),
    #[error("unknown cgroupPath.base {0:?}")]
    UnknownBase(String),
    #[error("{0:?} has a '..' component")]
    Escape(String),
    #[error("{0:?} holds a NUL or control character, or a component longer than 255 bytes")]
    Malformed(String),
    #[error("the cgroup path is longer than {MAX_PATH_BYTES} bytes")]
    TooLong,
    #[error("it resolves to the cgroup hierarchy root")]
    HierarchyRoot,
    #[error("it resolves to {0}, a directory the QoS tier reconciler owns")]
    TierDir(String),
    #[error("{0} is a pod's cgroup")]
    PodDir(String),
    #[error("{0} is a symlink; koordlet does not follow symlinks for host applications")]
    Symlink(String),
    #[error("{0} is not a directory")]
    NotADirectory(String),
}

impl HostAppRefusal {
    /// The `reason` label of the refusal.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::EmptyName => "empty_name",
            Self::BadName(_) => "bad_name",
            Self::UnknownBase(_) => "unknown_base",
            Self::Escape(_) => "escape",
            Self::Malformed(_) => "malformed",
            Self::TooLong => "too_long",
            Self::HierarchyRoot => "hierarchy_root",
            Self::TierDir(_) => "tier_dir",
            Self::PodDir(_) => "pod_dir",
            Self::Symlink(_) => "symlink",
            Self::NotADirectory(_) => "not_a_directory",
        }
    }
}

/// Key of the row in `koordlet capabilities`.
pub const HOST_APPLICATIONS_KEY: &str = "hostApplications";

/// What the hooks can enforce on host applications' cgroups on this node:
/// the two knobs upstream's host application reconciler writes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostAppsCapability {
    /// `cpuset.cpus` (CPUSetAllocator: LS applications get the LS share
    /// pool): the cpuset controller is mounted.
    pub cpuset: bool,
    /// `cpu.bvt_warp_ns` (GroupIdentity: each application its class's bvt):
    /// the kernel has Anolis group identity.
    pub group_identity: bool,
    /// What is enforced and, for each knob that is not, why.
    pub detail: String,
}

impl HostAppsCapability {
    /// The knobs enforceable here, comma separated, or `none`.
    pub fn knobs(&self) -> String {
        let knobs: Vec<&str> = [
            ("cpuset.cpus", self.cpuset),
            ("cpu.bvt_warp_ns", self.group_identity),
        ]
        .into_iter()
        .filter_map(|(knob, ok)| ok.then_some(knob))
        .collect();
        if knobs.is_empty() {
            "none".to_string()
        } else {
            knobs.join(",")
        }
    }

    /// Both knobs are enforceable.
    pub fn complete(&self) -> bool {
        self.cpuset && self.group_identity
    }
}

/// Derives the host application row from the node matrix (pure).
pub fn capability(node: &crate::capabilities::NodeCapabilities) -> HostAppsCapability {
    let cpuset = node.cgroup.controllers.iter().any(|c| c == "cpuset");
    let group_identity = node.group_identity;
    let mut parts = Vec::new();
    if cpuset {
        parts.push("cpuset.cpus for LS applications (CPUSetAllocator)".to_string());
    } else {
        parts.push(format!(
            "cpuset.cpus not enforced: no cpuset controller among the mounted ones ({})",
            if node.cgroup.controllers.is_empty() {
                "none".to_string()
            } else {
                node.cgroup.controllers.join(",")
            }
        ));
    }
    if group_identity {
        parts.push("cpu.bvt_warp_ns for every class (GroupIdentity)".to_string());
    } else {
        let why = node
            .reasons
            .get("groupIdentity")
            .cloned()
            .unwrap_or_else(|| "the kernel has no group identity".to_string());
        parts.push(format!("cpu.bvt_warp_ns not enforced: {why}"));
    }
    HostAppsCapability {
        cpuset,
        group_identity,
        detail: parts.join("; "),
    }
}

fn quoted(text: &str) -> String {
    for_log(text).into_owned()
}

/// Appends the components of `text` to `dir`: empty and `.` components are
/// skipped, `..`, control characters and over-long names refused.
fn push_components(dir: &mut PathBuf, text: &str) -> Result<(), HostAppRefusal> {
    if text.len() > MAX_PATH_BYTES {
        return Err(HostAppRefusal::TooLong);
    }
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(HostAppRefusal::Escape(quoted(text))),
            part if part.len() > MAX_NAME_BYTES || part.chars().any(char::is_control) => {
                return Err(HostAppRefusal::Malformed(quoted(text)));
            }
            part => dir.push(part),
        }
    }
    Ok(())
}

/// The validated context of `app` (see the module doc; pure).
pub fn resolve(
    layout: &CgroupLayout,
    app: &HostApplicationSpec,
) -> Result<HostAppContext, HostAppRefusal> {
    let mut dir = PathBuf::new();
    match &app.cgroup_path {
        None => {
            if app.name.is_empty() {
                return Err(HostAppRefusal::EmptyName);
            }
            if app.name.contains('/')
                || app.name == "."
                || app.name == ".."
                || app.name.len() > MAX_NAME_BYTES
                || app.name.chars().any(char::is_control)
            {
                return Err(HostAppRefusal::BadName(quoted(&app.name)));
            }
            match app.qos_class() {
                QoSClass::LSE | QoSClass::LSR | QoSClass::LS => {
                    dir.push(HOST_LATENCY_SENSITIVE_DIR)
                }
                QoSClass::BE => dir.push(HOST_BEST_EFFORT_DIR),
                QoSClass::System | QoSClass::None => {}
            }
            dir.push(&app.name);
        }
        Some(path) => {
            match &path.base {
                None | Some(CgroupBaseType::CgroupRoot) => {}
                // Upstream's switch falls back to the root for "" too.
                Some(CgroupBaseType::Other(empty)) if empty.is_empty() => {}
                Some(CgroupBaseType::Kubepods) => dir.push(layout.qos_dir(QosTier::Guaranteed)),
                Some(CgroupBaseType::KubepodsBurstable) => {
                    dir.push(layout.qos_dir(QosTier::Burstable))
                }
                Some(CgroupBaseType::KubepodsBesteffort) => {
                    dir.push(layout.qos_dir(QosTier::BestEffort))
                }
                Some(other) => return Err(HostAppRefusal::UnknownBase(quoted(other.as_str()))),
            }
            push_components(&mut dir, &path.parent_dir)?;
            push_components(&mut dir, &path.relative_path)?;
        }
    }
    if dir.as_os_str().len() > MAX_PATH_BYTES {
        return Err(HostAppRefusal::TooLong);
    }
    check_kubelet_dirs(layout, &dir)?;
    Ok(HostAppContext {
        name: app.name.clone(),
        qos: app.qos_class(),
        cgroup_dir: dir,
    })
}

/// Refuses the hierarchy root, the kubepods and tier directories and pod
/// cgroups (or below).
fn check_kubelet_dirs(layout: &CgroupLayout, dir: &Path) -> Result<(), HostAppRefusal> {
    if dir.as_os_str().is_empty() {
        return Err(HostAppRefusal::HierarchyRoot);
    }
    let tiers = [QosTier::Guaranteed, QosTier::Burstable, QosTier::BestEffort];
    if tiers.iter().any(|tier| layout.qos_dir(*tier) == dir) {
        return Err(HostAppRefusal::TierDir(format!("/{}", dir.display())));
    }
    // A pod directory sits right below kubepods (Guaranteed) or a tier.
    for tier in tiers {
        let Ok(below) = dir.strip_prefix(layout.qos_dir(tier)) else {
            continue;
        };
        let Some(first) = below.components().next() else {
            continue;
        };
        let name = first.as_os_str().to_string_lossy();
        if layout.pod_uid_from_dir_name(&name).is_some() {
            return Err(HostAppRefusal::PodDir(format!(
                "/{}",
                layout.qos_dir(tier).join(&*name).display()
            )));
        }
    }
    Ok(())
}

/// Checks on the node that no component of `dir` (below each hierarchy
/// root that exists) is a symlink or a non-directory. Missing components
/// end the walk: the application has not created its cgroup yet, and the
/// writes will find nothing to change.
pub fn check_fs(layout: &CgroupLayout, dir: &Path) -> Result<(), HostAppRefusal> {
    let roots: Vec<PathBuf> = match layout.version {
        CgroupVersion::V2 => vec![layout.root.clone()],
        CgroupVersion::V1 => Controller::ALL
            .iter()
            .map(|controller| layout.root.join(controller.as_str()))
            .filter(|root| root.is_dir())
            .collect(),
    };
    for root in roots {
        let mut path = root;
        for component in dir.components() {
            path.push(component);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(HostAppRefusal::Symlink(quoted(&path.to_string_lossy())));
                }
                Ok(meta) if !meta.is_dir() => {
                    return Err(HostAppRefusal::NotADirectory(quoted(
                        &path.to_string_lossy(),
                    )));
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    Ok(())
}

/// The applications to enforce from a NodeSLO list: one per name (the last
/// wins, as upstream's map by name), at most [`MAX_HOST_APPS`]; each
/// resolved or refused.
pub fn resolve_all(
    layout: &CgroupLayout,
    apps: &[HostApplicationSpec],
) -> Vec<(String, Result<HostAppContext, HostAppRefusal>)> {
    let mut by_name: std::collections::BTreeMap<&str, &HostApplicationSpec> =
        std::collections::BTreeMap::new();
    for app in apps {
        by_name.insert(app.name.as_str(), app);
    }
    by_name
        .into_values()
        .take(MAX_HOST_APPS)
        .map(|app| (quoted(&app.name), resolve(layout, app)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::slo::v1alpha1::CgroupPath;
    use koord_common::testing::TempDir;

    use crate::system::cgroup::CgroupDriver;

    fn app(
        name: &str,
        qos: &str,
        path: Option<(Option<CgroupBaseType>, &str, &str)>,
    ) -> HostApplicationSpec {
        HostApplicationSpec {
            name: name.into(),
            qos: qos.into(),
            priority: String::new(),
            cgroup_path: path.map(|(base, parent, relative)| CgroupPath {
                base,
                parent_dir: parent.into(),
                relative_path: relative.into(),
            }),
            strategy: None,
        }
    }

    fn cgroupfs() -> CgroupLayout {
        CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup")
    }

    /// Upstream's `Test_getHostCgroupRelativePath` cases, as facts.
    #[test]
    fn upstream_relative_path_cases() {
        let layout = cgroupfs();
        let dir = |spec: HostApplicationSpec| resolve(&layout, &spec).map(|c| c.cgroup_dir);
        assert_eq!(
            dir(app("ls-app", "LS", None)),
            Ok(PathBuf::from("host-latency-sensitive/ls-app"))
        );
        assert_eq!(
            dir(app("be-app", "BE", None)),
            Ok(PathBuf::from("host-best-effort/be-app"))
        );
        assert_eq!(
            dir(app(
                "test-app",
                "LS",
                Some((Some(CgroupBaseType::CgroupRoot), "host-ls-app", "test-app"))
            )),
            Ok(PathBuf::from("host-ls-app/test-app"))
        );
        assert_eq!(
            dir(app(
                "test-app",
                "LS",
                Some((Some(CgroupBaseType::Kubepods), "host-ls-app", "test-app"))
            )),
            Ok(PathBuf::from("kubepods/host-ls-app/test-app"))
        );
        assert_eq!(
            dir(app(
                "test-app",
                "LS",
                Some((
                    Some(CgroupBaseType::KubepodsBurstable),
                    "host-ls-app",
                    "test-app"
                ))
            )),
            Ok(PathBuf::from("kubepods/burstable/host-ls-app/test-app"))
        );
        assert_eq!(
            dir(app(
                "test-app",
                "BE",
                Some((
                    Some(CgroupBaseType::KubepodsBesteffort),
                    "host-be-app",
                    "test-app"
                ))
            )),
            Ok(PathBuf::from("kubepods/besteffort/host-be-app/test-app"))
        );
        // Upstream's "nil host app" → "" is the root here, and refused.
        assert_eq!(dir(app("", "", None)), Err(HostAppRefusal::EmptyName));
        // Systemd names of the tiers; a leading '/' stays below the base.
        let systemd = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Systemd, "/cg");
        assert_eq!(
            resolve(
                &systemd,
                &app(
                    "db",
                    "LS",
                    Some((Some(CgroupBaseType::KubepodsBurstable), "/apps", "db"))
                )
            )
            .map(|c| c.cgroup_dir),
            Ok(PathBuf::from(
                "kubepods.slice/kubepods-burstable.slice/apps/db"
            ))
        );
        assert_eq!(
            dir(app("x", "BE", Some((None, "/system.slice//./x", "")))),
            Ok(PathBuf::from("system.slice/x"))
        );
    }

    #[test]
    fn hostile_paths_are_refused() {
        let layout = cgroupfs();
        let refusal = |spec: HostApplicationSpec| resolve(&layout, &spec).unwrap_err().reason();
        let root = Some(CgroupBaseType::CgroupRoot);
        let cases: Vec<(&str, HostApplicationSpec, &str)> = vec![
            ("dotdot parent", app("a", "LS", Some((root.clone(), "../..", "etc"))), "escape"),
            ("dotdot inside", app("a", "LS", Some((None, "apps/../../x", "y"))), "escape"),
            ("dotdot relative", app("a", "LS", Some((Some(CgroupBaseType::KubepodsBesteffort), "x", "../../../y"))), "escape"),
            ("name with slash", app("../../etc", "LS", None), "bad_name"),
            ("name dotdot", app("..", "BE", None), "bad_name"),
            ("name nested", app("a/b", "", None), "bad_name"),
            ("NUL", app("a", "LS", Some((None, "ok\0bad", ""))), "malformed"),
            ("newline", app("a", "LS", Some((None, "ok\nbad", ""))), "malformed"),
            ("long name", app("a", "LS", Some((None, &"n".repeat(256), ""))), "malformed"),
            ("long path", app("a", "LS", Some((None, &"d/".repeat(2100), ""))), "too_long"),
            ("root", app("a", "LS", Some((root.clone(), "", ""))), "hierarchy_root"),
            ("root by slashes", app("a", "LS", Some((None, "/", "/./"))), "hierarchy_root"),
            ("kubepods", app("a", "LS", Some((Some(CgroupBaseType::Kubepods), "", ""))), "tier_dir"),
            ("tier by root", app("a", "LS", Some((root.clone(), "kubepods", "besteffort"))), "tier_dir"),
            ("pod dir", app("a", "LS", Some((Some(CgroupBaseType::KubepodsBurstable), "pod1234", ""))), "pod_dir"),
            ("container of a guaranteed pod", app("a", "LS", Some((Some(CgroupBaseType::Kubepods), "podabc", "ctr"))), "pod_dir"),
            ("unknown base", serde_json::from_value(serde_json::json!({"name": "a", "cgroupPath": {"base": "Elsewhere", "parentDir": "x"}})).unwrap(), "unknown_base"),
        ];
        for (case, spec, reason) in cases {
            assert_eq!(refusal(spec), reason, "{case}");
        }
    }

    #[test]
    fn duplicates_keep_the_last_and_the_list_is_bounded() {
        let layout = cgroupfs();
        let apps = vec![
            app("nginx", "LS", None),
            app("nginx", "BE", None),
            app("bad", "LS", Some((None, "..", ""))),
        ];
        let resolved = resolve_all(&layout, &apps);
        assert_eq!(resolved.len(), 2);
        assert_eq!(
            resolved[1].1.as_ref().unwrap().cgroup_dir,
            PathBuf::from("host-best-effort/nginx")
        );
        assert!(resolved[0].1.is_err());
        let many: Vec<HostApplicationSpec> = (0..MAX_HOST_APPS + 10)
            .map(|i| app(&format!("app{i}"), "LS", None))
            .collect();
        assert_eq!(resolve_all(&layout, &many).len(), MAX_HOST_APPS);
    }

    #[test]
    fn symlinks_and_files_on_the_way_are_refused() {
        let tmp = TempDir::new("hostapp-fs").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, tmp.path());
        std::fs::create_dir_all(tmp.path().join("cpu/apps/db")).unwrap();
        std::fs::create_dir_all(tmp.path().join("cpuset/apps")).unwrap();
        std::fs::create_dir_all(tmp.path().join("elsewhere/db")).unwrap();
        assert_eq!(check_fs(&layout, Path::new("apps/db")), Ok(()));
        // Not created yet: nothing to refuse.
        assert_eq!(check_fs(&layout, Path::new("apps/new")), Ok(()));
        std::os::unix::fs::symlink(
            tmp.path().join("elsewhere/db"),
            tmp.path().join("cpuset/apps/db"),
        )
        .unwrap();
        assert_eq!(
            check_fs(&layout, Path::new("apps/db"))
                .unwrap_err()
                .reason(),
            "symlink"
        );
        std::fs::write(tmp.path().join("cpu/apps/file"), "x").unwrap();
        assert_eq!(
            check_fs(&layout, Path::new("apps/file/x"))
                .unwrap_err()
                .reason(),
            "not_a_directory"
        );
    }
}

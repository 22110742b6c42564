//! Which cgroups the runtime hooks may touch (issue 16).
//!
//! The runtime reports a pod's cgroup parent (RuntimeHookService
//! `cgroup_parent`, NRI `linux.cgroup_parent`) and, over NRI, a container's
//! cgroups path. koordlet writes pod-level values into that directory and
//! reads container processes below it, so a hostile or broken value would
//! make it write one pod's limits into the kubepods root, a QoS tier root,
//! `/system.slice` or another pod. Only these are accepted:
//!
//! - a pod directory of the kubelet's layout below the kubepods directory
//!   (`--kubepods-cgroup-dir`): cgroupfs `<kubepods>[/burstable|/besteffort]/pod<uid>`,
//!   systemd `kubepods.slice[/kubepods-<tier>.slice]/kubepods[-<tier>]-pod<uid>.slice`
//!   (the bare slice name as the runtime reports it expands to that path);
//! - whose UID is the request's pod UID (when the request names one);
//! - a container directory exactly one plain component below it;
//! - and, on the node (the shell half, [`check_fs`]), no component below
//!   the kubepods directory is a symlink or anything but a directory.
//!
//! [`check_request`] is pure; [`check_fs`] reads only metadata. The
//! dispatcher refuses a request that fails either as the hook
//! [`SCOPE_HOOK`] would fail (its failure policy decides), counts the
//! refusal by [`RefusalReason`] and changes nothing.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use crate::bounds::Bounded;
use crate::system::cgroup::{CgroupDriver, CgroupLayout, Controller, QosTier};

/// The name a scope refusal carries in failure policies, errors and logs.
pub const SCOPE_HOOK: &str = "CgroupScope";

/// Longest cgroup parent considered (Linux's PATH_MAX).
pub const MAX_CGROUP_PARENT_BYTES: usize = 4096;

/// Longest pod UID accepted in a pod directory name.
pub const MAX_POD_UID_BYTES: usize = 128;

/// Longest directory name (Linux's NAME_MAX).
const MAX_NAME_BYTES: usize = 255;

/// Why a target was refused; the `reason` label of
/// `koordlet_runtime_hook_cgroup_scope_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusalReason {
    /// Longer than [`MAX_CGROUP_PARENT_BYTES`].
    TooLong,
    /// A `..` component.
    Escape,
    /// Empty components' content, NUL bytes, names longer than NAME_MAX.
    Malformed,
    /// Not below the kubepods directory.
    OutsideKubepods,
    /// The kubepods directory or a QoS tier directory itself.
    TierRoot,
    /// Below kubepods but not a pod directory of the kubelet's layout.
    NotAPodDir,
    /// Another pod's directory.
    UidMismatch,
    /// A container directory that is not one plain name below its pod's.
    BadContainerDir,
    /// A symlink below the kubepods directory.
    Symlink,
    /// Something other than a directory below the kubepods directory.
    NotADirectory,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 10] = [
        RefusalReason::TooLong,
        RefusalReason::Escape,
        RefusalReason::Malformed,
        RefusalReason::OutsideKubepods,
        RefusalReason::TierRoot,
        RefusalReason::NotAPodDir,
        RefusalReason::UidMismatch,
        RefusalReason::BadContainerDir,
        RefusalReason::Symlink,
        RefusalReason::NotADirectory,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::TooLong => "too-long",
            RefusalReason::Escape => "escape",
            RefusalReason::Malformed => "malformed",
            RefusalReason::OutsideKubepods => "outside-kubepods",
            RefusalReason::TierRoot => "tier-root",
            RefusalReason::NotAPodDir => "not-a-pod-dir",
            RefusalReason::UidMismatch => "uid-mismatch",
            RefusalReason::BadContainerDir => "bad-container-dir",
            RefusalReason::Symlink => "symlink",
            RefusalReason::NotADirectory => "not-a-directory",
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused target: the reason and a message naming the (cut) value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} ({reason})")]
pub struct ScopeRefusal {
    pub reason: RefusalReason,
    pub message: String,
}

impl ScopeRefusal {
    fn new(reason: RefusalReason, message: String) -> Self {
        Self { reason, message }
    }
}

/// A validated pod directory, relative to the hierarchy root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodScope {
    pub dir: PathBuf,
    pub tier: QosTier,
    pub uid: String,
}

/// The directories a request may touch, validated by [`check_request`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestScope {
    pub pod: Option<PodScope>,
    /// The container's explicit cgroup directory (NRI), below `pod`.
    pub container_dir: Option<PathBuf>,
}

impl RequestScope {
    /// Every directory of the scope, pod first.
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.pod
            .as_ref()
            .map(|pod| pod.dir.as_path())
            .into_iter()
            .chain(self.container_dir.as_deref())
    }
}

/// Plain components of `path`; `..`, prefixes, NUL bytes and over-long names
/// are refused.
fn plain_components(path: &Path, what: &str) -> Result<PathBuf, ScopeRefusal> {
    let mut relative = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => {
                let bytes = part.as_encoded_bytes();
                if bytes.len() > MAX_NAME_BYTES || bytes.contains(&0) {
                    return Err(ScopeRefusal::new(
                        RefusalReason::Malformed,
                        format!(
                            "{what} {} has a malformed component",
                            Bounded(&path.to_string_lossy())
                        ),
                    ));
                }
                relative.push(part);
            }
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(ScopeRefusal::new(
                    RefusalReason::Escape,
                    format!(
                        "{what} {} climbs out with '..'",
                        Bounded(&path.to_string_lossy())
                    ),
                ));
            }
        }
    }
    Ok(relative)
}

fn is_pod_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= MAX_POD_UID_BYTES
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The pod directory a runtime-reported cgroup parent names, when it is
/// one (see the module doc). `expected_uid` is the request's pod UID (empty:
/// not checked).
pub fn pod_scope(
    cgroup_parent: &str,
    expected_uid: &str,
    layout: &CgroupLayout,
) -> Result<PodScope, ScopeRefusal> {
    let what = "cgroup parent";
    if cgroup_parent.len() > MAX_CGROUP_PARENT_BYTES {
        return Err(ScopeRefusal::new(
            RefusalReason::TooLong,
            format!(
                "{what} {} is longer than {MAX_CGROUP_PARENT_BYTES} bytes",
                Bounded(cgroup_parent)
            ),
        ));
    }
    let is_bare_slice = !cgroup_parent.contains('/') && cgroup_parent.ends_with(".slice");
    let path = if layout.driver == CgroupDriver::Systemd && is_bare_slice {
        expand_slice(cgroup_parent).ok_or_else(|| {
            ScopeRefusal::new(
                RefusalReason::Malformed,
                format!("{what} {} is not a slice name", Bounded(cgroup_parent)),
            )
        })?
    } else {
        PathBuf::from(cgroup_parent)
    };
    let relative = plain_components(&path, what)?;
    let kubepods = layout.kubepods_dir();
    if relative.as_os_str().is_empty() || !relative.starts_with(&kubepods) {
        return Err(ScopeRefusal::new(
            RefusalReason::OutsideKubepods,
            format!(
                "{what} {} is not below the kubepods cgroup /{}",
                Bounded(cgroup_parent),
                kubepods.display()
            ),
        ));
    }
    if QosTier::ALL
        .iter()
        .any(|tier| relative == layout.qos_dir(*tier))
    {
        return Err(ScopeRefusal::new(
            RefusalReason::TierRoot,
            format!(
                "{what} {} is a QoS tier root, not a pod's cgroup",
                Bounded(cgroup_parent)
            ),
        ));
    }
    let uid = relative
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| layout.pod_uid_from_dir_name(name))
        .filter(|uid| is_pod_uid(uid));
    let scope = uid.and_then(|uid| {
        QosTier::ALL.into_iter().find_map(|tier| {
            (layout.pod_dir(tier, &uid).ok().as_ref() == Some(&relative)).then(|| PodScope {
                dir: relative.clone(),
                tier,
                uid: uid.clone(),
            })
        })
    });
    let Some(scope) = scope else {
        return Err(ScopeRefusal::new(
            RefusalReason::NotAPodDir,
            format!(
                "{what} {} is not a pod's cgroup of the kubelet's {} layout",
                Bounded(cgroup_parent),
                layout.driver
            ),
        ));
    };
    if !expected_uid.is_empty()
        && layout.pod_dir(scope.tier, expected_uid).ok().as_ref() != Some(&scope.dir)
    {
        return Err(ScopeRefusal::new(
            RefusalReason::UidMismatch,
            format!(
                "{what} {} is the cgroup of pod {}, not of pod {}",
                Bounded(cgroup_parent),
                scope.uid,
                Bounded(expected_uid)
            ),
        ));
    }
    Ok(scope)
}

/// A container directory (relative or absolute from the hierarchy root):
/// one plain name below a pod directory of the pod `expected_uid`.
pub fn container_scope(
    container_dir: &Path,
    expected_uid: &str,
    layout: &CgroupLayout,
) -> Result<(PodScope, PathBuf), ScopeRefusal> {
    let what = "container cgroup";
    let relative = plain_components(container_dir, what)?;
    let bad = |detail: String| {
        ScopeRefusal::new(
            RefusalReason::BadContainerDir,
            format!(
                "{what} {} {detail}",
                Bounded(&container_dir.to_string_lossy())
            ),
        )
    };
    let parent = relative
        .parent()
        .ok_or_else(|| bad("has no pod directory".into()))?;
    let name = relative.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.is_empty() {
        return Err(bad("has no name".into()));
    }
    let pod = pod_scope(&parent.to_string_lossy(), expected_uid, layout)
        .map_err(|refusal| bad(format!("is not below a pod's cgroup: {}", refusal.message)))?;
    Ok((pod, relative))
}

/// Validates what a request would touch: the pod's cgroup parent and, for a
/// container request, the container's cgroup directory. `Ok` with an empty
/// scope when the runtime named no cgroup (nothing is derived from it then).
pub fn check_request(
    cgroup_parent: &str,
    pod_uid: &str,
    container_dir: Option<&Path>,
    layout: &CgroupLayout,
) -> Result<RequestScope, ScopeRefusal> {
    let mut scope = RequestScope::default();
    if !cgroup_parent.is_empty() {
        scope.pod = Some(pod_scope(cgroup_parent, pod_uid, layout)?);
    }
    if let Some(dir) = container_dir {
        let (container_pod, dir) = container_scope(dir, pod_uid, layout)?;
        match &scope.pod {
            Some(pod) if pod.dir != container_pod.dir => {
                return Err(ScopeRefusal::new(
                    RefusalReason::BadContainerDir,
                    format!(
                        "container cgroup {} is not below the pod's cgroup /{}",
                        Bounded(&dir.to_string_lossy()),
                        pod.dir.display()
                    ),
                ));
            }
            Some(_) => {}
            None => scope.pod = Some(container_pod),
        }
        scope.container_dir = Some(dir);
    }
    Ok(scope)
}

/// `a-b-c.slice` → `a.slice/a-b.slice/a-b-c.slice` (systemd's nesting).
pub fn expand_slice(slice: &str) -> Option<PathBuf> {
    let stem = slice.strip_suffix(".slice")?;
    if stem.is_empty() || stem == "-" {
        return Some(PathBuf::from("/"));
    }
    let mut path = PathBuf::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if part.is_empty() {
            return None;
        }
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push(format!("{prefix}.slice"));
    }
    Some(path)
}

/// The node half: no component of `dir` below the kubepods directory is a
/// symlink or other than a directory, in any hierarchy koordlet uses (every
/// v1 controller mounted under the root, or the v2 root). Components that do
/// not exist (yet) end the walk: nothing is written there, and writes open
/// every component without following symlinks anyway. Reads metadata only.
pub fn check_fs(layout: &CgroupLayout, dir: &Path) -> Result<(), ScopeRefusal> {
    let kubepods = layout.kubepods_dir();
    let Ok(below) = dir.strip_prefix(&kubepods) else {
        // Not derived from kubepods: the pure check refused it already.
        return Ok(());
    };
    let bases: Vec<PathBuf> = match layout.version {
        crate::system::cgroup::CgroupVersion::V2 => vec![layout.root.join(&kubepods)],
        crate::system::cgroup::CgroupVersion::V1 => Controller::ALL
            .iter()
            .map(|controller| layout.root.join(controller.as_str()).join(&kubepods))
            .filter(|base| base.is_dir())
            .collect(),
    };
    for base in bases {
        let mut path = base;
        for component in below.components() {
            path.push(component);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(ScopeRefusal::new(
                        RefusalReason::Symlink,
                        format!(
                            "cgroup {} is a symlink; koordlet does not follow symlinks below /{}",
                            Bounded(&path.to_string_lossy()),
                            kubepods.display()
                        ),
                    ));
                }
                Ok(meta) if !meta.is_dir() => {
                    return Err(ScopeRefusal::new(
                        RefusalReason::NotADirectory,
                        format!(
                            "cgroup {} is not a directory",
                            Bounded(&path.to_string_lossy())
                        ),
                    ));
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::cgroup::CgroupVersion;

    const UID: &str = "0f0e0d0c-0b0a-0908-0706-050403020100";

    fn cgroupfs() -> CgroupLayout {
        CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/cg")
    }

    fn systemd() -> CgroupLayout {
        CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Systemd, "/cg")
    }

    fn reason(parent: &str, uid: &str, layout: &CgroupLayout) -> Option<RefusalReason> {
        pod_scope(parent, uid, layout).err().map(|r| r.reason)
    }

    #[test]
    fn only_pod_directories_below_kubepods_are_accepted() {
        let layout = cgroupfs();
        for (parent, tier) in [
            (format!("/kubepods/pod{UID}"), QosTier::Guaranteed),
            (format!("/kubepods/burstable/pod{UID}"), QosTier::Burstable),
            (
                format!("kubepods/besteffort/pod{UID}/"),
                QosTier::BestEffort,
            ),
        ] {
            let scope = pod_scope(&parent, UID, &layout).unwrap();
            assert_eq!(scope.tier, tier, "{parent}");
            assert_eq!(scope.uid, UID);
        }
        use RefusalReason::*;
        let cases: Vec<(String, &str, RefusalReason)> = vec![
            ("/kubepods".into(), UID, TierRoot),
            ("/kubepods/besteffort".into(), UID, TierRoot),
            ("/kubepods/burstable/".into(), UID, TierRoot),
            ("/system.slice".into(), UID, OutsideKubepods),
            ("/".into(), UID, OutsideKubepods),
            ("/kubepods-other/pod1".into(), UID, OutsideKubepods),
            (format!("/kubepods/../pod{UID}"), UID, Escape),
            (format!("/kubepods/besteffort/pod{UID}/c1"), UID, NotAPodDir),
            (format!("/kubepods/guaranteed/pod{UID}"), UID, NotAPodDir),
            (format!("/kubepods/besteffort/x/pod{UID}"), UID, NotAPodDir),
            ("/kubepods/besteffort/pod".into(), UID, NotAPodDir),
            ("/kubepods/besteffort/pod a".into(), "", NotAPodDir),
            ("/kubepods/besteffort/podother".into(), UID, UidMismatch),
            (format!("/kubepods/{}", "a".repeat(300)), UID, Malformed),
            ("/kubepods/x\0y".into(), UID, Malformed),
            (format!("/kubepods/{}", "a/".repeat(3000)), UID, TooLong),
        ];
        for (parent, uid, expected) in cases {
            assert_eq!(
                reason(&parent, uid, &layout),
                Some(expected),
                "{}",
                crate::bounds::for_log(&parent)
            );
        }
        // No UID in the request: any pod directory is its own.
        assert!(pod_scope("/kubepods/besteffort/podother", "", &layout).is_ok());
        // Messages stay short whatever the input.
        let huge = format!("/kubepods/{}", "b".repeat(1 << 20));
        let refusal = pod_scope(&huge, UID, &layout).unwrap_err();
        assert!(
            refusal.to_string().len() < 600,
            "{}",
            refusal.to_string().len()
        );
    }

    #[test]
    fn systemd_slices_and_a_custom_kubepods_dir() {
        let layout = systemd();
        let escaped = UID.replace('-', "_");
        let slice = format!("kubepods-besteffort-pod{escaped}.slice");
        let scope = pod_scope(&slice, UID, &layout).unwrap();
        assert_eq!(
            scope.dir,
            PathBuf::from(format!("kubepods.slice/kubepods-besteffort.slice/{slice}"))
        );
        assert_eq!(scope.tier, QosTier::BestEffort);
        assert_eq!(
            reason("kubepods-besteffort.slice", UID, &layout),
            Some(RefusalReason::TierRoot)
        );
        assert_eq!(
            reason("kubepods.slice", UID, &layout),
            Some(RefusalReason::TierRoot)
        );
        assert_eq!(
            reason("system.slice", UID, &layout),
            Some(RefusalReason::OutsideKubepods)
        );
        assert_eq!(
            reason("kubepods-besteffort-podother.slice", UID, &layout),
            Some(RefusalReason::UidMismatch)
        );

        let custom = cgroupfs().with_kubepods_dir("/kubepods-node-1");
        assert!(pod_scope(&format!("/kubepods-node-1/pod{UID}"), UID, &custom).is_ok());
        assert_eq!(
            reason(&format!("/kubepods/pod{UID}"), UID, &custom),
            Some(RefusalReason::OutsideKubepods)
        );
        assert_eq!(
            reason("/kubepods-node-1/burstable", UID, &custom),
            Some(RefusalReason::TierRoot)
        );
    }

    fn container(parent: &str, dir: Option<&str>) -> Result<RequestScope, ScopeRefusal> {
        check_request(parent, UID, dir.map(Path::new), &cgroupfs())
    }

    #[test]
    fn container_directories_sit_one_name_below_their_pod() {
        let pod = format!("/kubepods/besteffort/pod{UID}");
        let scope = container(&pod, Some(&format!("{pod}/c1"))).unwrap();
        assert_eq!(
            scope.container_dir,
            Some(PathBuf::from(format!("kubepods/besteffort/pod{UID}/c1")))
        );
        assert_eq!(scope.dirs().count(), 2);
        // Without a parent the container directory's own parent is checked.
        assert!(container("", Some(&format!("{pod}/c1"))).is_ok());
        for dir in [
            "/kubepods/besteffort".to_string(),
            "/kubepods/besteffort/c1".to_string(),
            format!("{pod}/c1/nested"),
            format!("{pod}/../c1"),
            format!("/kubepods/burstable/pod{UID}/c1"),
            pod.clone(),
        ] {
            let refusal = container(&pod, Some(&dir)).unwrap_err();
            assert!(
                matches!(
                    refusal.reason,
                    RefusalReason::BadContainerDir | RefusalReason::Escape
                ),
                "{dir}: {refusal}"
            );
        }
        // Nothing named: nothing to check.
        assert_eq!(container("", None).unwrap(), RequestScope::default());
    }

    #[test]
    fn symlinks_and_files_below_kubepods_are_refused_on_the_node() {
        let temp = koord_common::testing::TempDir::new("scope-fs").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, temp.path());
        let cpu = temp.path().join("cpu");
        std::fs::create_dir_all(cpu.join("kubepods/besteffort/podreal/c1")).unwrap();
        std::fs::create_dir_all(cpu.join("victim")).unwrap();
        std::os::unix::fs::symlink(cpu.join("victim"), cpu.join("kubepods/besteffort/podlink"))
            .unwrap();
        std::fs::write(cpu.join("kubepods/besteffort/podfile"), "").unwrap();
        let check = |dir: &str| check_fs(&layout, Path::new(dir)).map_err(|r| r.reason);
        assert_eq!(check("kubepods/besteffort/podreal"), Ok(()));
        assert_eq!(check("kubepods/besteffort/podreal/c1"), Ok(()));
        // Not created yet: nothing to follow.
        assert_eq!(check("kubepods/besteffort/podnew/c1"), Ok(()));
        assert_eq!(
            check("kubepods/besteffort/podlink"),
            Err(RefusalReason::Symlink)
        );
        assert_eq!(
            check("kubepods/besteffort/podlink/c1"),
            Err(RefusalReason::Symlink)
        );
        assert_eq!(
            check("kubepods/besteffort/podfile"),
            Err(RefusalReason::NotADirectory)
        );

        // The kubepods directory itself is configuration and may be a link
        // (test farms point it at a private subtree).
        let farm = koord_common::testing::TempDir::new("scope-farm").unwrap();
        std::fs::create_dir_all(farm.path().join("cpu")).unwrap();
        std::os::unix::fs::symlink(cpu.join("kubepods"), farm.path().join("cpu/kubepods")).unwrap();
        let linked = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, farm.path());
        assert!(check_fs(&linked, Path::new("kubepods/besteffort/podreal")).is_ok());
        assert!(check_fs(&linked, Path::new("kubepods/besteffort/podlink")).is_err());
    }
}

//! RDMADeviceInject: the RDMA device nodes of the NICs the scheduler
//! allocated (`scheduling.koordinator.sh/device-allocated`, key `rdma`) are
//! added to a container being created, as upstream's `rdma` hook does:
//!
//! - `/dev/infiniband/rdma_cm`, once, when the pod has any RDMA allocation;
//! - per allocated device: when its `extension.vfs` lists virtual
//!   functions, the uverbs node of each VF (by `busID`), else the uverbs
//!   node of the device itself (its `id`, the PF's PCI address);
//! - a PCI function's uverbs node is the first `uverbs<N>` entry of
//!   `<sys>/bus/pci/devices/<bdf>/infiniband_verbs/`, added as
//!   `/dev/infiniband/uverbs<N>`, character device, mode 0666.
//!
//! Differences from upstream: the major:minor numbers come from the sysfs
//! `dev` attribute of the same device (`.../infiniband_verbs/uverbs<N>/dev`,
//! `<sys>/class/misc/rdma_cm/dev`) instead of a `stat` of the `/dev` node,
//! so koordlet needs the host's /sys (`--sys-root-dir`) but not its /dev;
//! a bus ID that is not a PCI address (`dddd:bb:dd.f`) is refused before it
//! is joined into a path; reads are bounded; the same node listed twice is
//! added once. As upstream, a malformed annotation or a device that cannot
//! be resolved is a hook error: the hook's failure policy decides
//! (upstream's default `Ignore` creates the container without the
//! devices; `Fail` refuses it). Only the NRI transport carries devices; the
//! RuntimeHookService response has no field for them (upstream drops them
//! silently there; the server here logs it).

use std::path::PathBuf;
use std::sync::Arc;

use apis::extension::{
    ANNOTATION_DEVICE_ALLOCATED, DEVICE_TYPE_RDMA, DeviceAllocation, get_device_allocations,
};

use crate::runtimehooks::protocol::*;
use crate::statesinformer::device::sysfs::is_pci_address;
use crate::statesinformer::device::uverbs::{self, UverbsError};

pub use crate::statesinformer::device::uverbs::CharDevice;

/// Upstream's directory of RDMA device nodes (inside the container and on
/// the host).
pub const IB_DEV_DIR: &str = "/dev/infiniband";
/// Upstream's RDMA connection manager node.
pub const RDMA_CM_PATH: &str = "/dev/infiniband/rdma_cm";
/// Permission bits upstream gives the injected nodes.
pub const DEVICE_FILE_MODE: u32 = 0o666;
/// The most PCI functions (devices plus VFs) one pod may be given; a node
/// has a handful of NICs, each with at most a few hundred VFs.
pub const MAX_RDMA_FUNCTIONS: usize = 256;

/// Why the RDMA devices of an allocation cannot be resolved.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    #[error("rdma allocation {index} names no PCI address (neither id nor vfs[].busID)")]
    MissingBusId { index: usize },
    #[error("{0:?} is not a PCI address (dddd:bb:dd.f)")]
    NotABusId(String),
    #[error("the allocation names {count} PCI functions; at most {limit} are accepted")]
    TooMany { count: usize, limit: usize },
    #[error(transparent)]
    Node(#[from] UverbsError),
}

/// What the hook reads from the node (the sysfs adapter, or a table in tests).
pub trait RdmaNodeView: Send + Sync {
    /// The uverbs device of the PCI function `bdf` (already validated).
    fn uverbs_of(&self, bdf: &str) -> Result<CharDevice, RdmaError>;
    /// The RDMA connection manager device.
    fn rdma_cm(&self) -> Result<CharDevice, RdmaError>;
}

/// The PCI functions to expose for `allocations`, in order, without
/// repeats: each device's VFs when it lists some, else the device itself.
pub fn allocated_functions(allocations: &[DeviceAllocation]) -> Result<Vec<String>, RdmaError> {
    let mut functions: Vec<String> = Vec::new();
    for (index, allocation) in allocations.iter().enumerate() {
        let vfs = allocation
            .extension
            .as_ref()
            .map(|extension| extension.virtual_functions.as_slice())
            .unwrap_or_default();
        let bus_ids: Vec<&str> = if vfs.is_empty() {
            vec![allocation.id.as_str()]
        } else {
            vfs.iter().map(|vf| vf.bus_id.as_str()).collect()
        };
        for bus_id in bus_ids {
            if bus_id.is_empty() {
                return Err(RdmaError::MissingBusId { index });
            }
            // Sysfs names are lowercase; accept the uppercase spelling.
            let bdf = bus_id.to_ascii_lowercase();
            if !is_pci_address(&bdf) {
                return Err(RdmaError::NotABusId(crate::bounds::cut(bus_id.to_string())));
            }
            if !functions.contains(&bdf) {
                functions.push(bdf);
            }
            if functions.len() > MAX_RDMA_FUNCTIONS {
                return Err(RdmaError::TooMany {
                    count: functions.len(),
                    limit: MAX_RDMA_FUNCTIONS,
                });
            }
        }
    }
    Ok(functions)
}

fn node(device: &CharDevice) -> LinuxDevice {
    LinuxDevice {
        path: format!("{IB_DEV_DIR}/{}", device.name),
        kind: 'c',
        major: device.major,
        minor: device.minor,
        file_mode: DEVICE_FILE_MODE,
    }
}

/// The device nodes for `allocations` (the decision; `view` answers the
/// node questions). No allocation → no devices.
pub fn plan_rdma_devices(
    allocations: &[DeviceAllocation],
    view: &dyn RdmaNodeView,
) -> Result<Vec<LinuxDevice>, RdmaError> {
    if allocations.is_empty() {
        return Ok(Vec::new());
    }
    let functions = allocated_functions(allocations)?;
    let mut devices = vec![LinuxDevice {
        path: RDMA_CM_PATH.to_string(),
        ..node(&view.rdma_cm()?)
    }];
    for bdf in &functions {
        let device = node(&view.uverbs_of(bdf)?);
        if !devices.iter().any(|known| known.path == device.path) {
            devices.push(device);
        }
    }
    Ok(devices)
}

/// The sysfs adapter: `<sys>/bus/pci/devices/<bdf>/infiniband_verbs/` and
/// `<sys>/class/misc/rdma_cm/dev`, every read bounded.
#[derive(Debug, Clone)]
pub struct SysfsRdmaView {
    sys_root: PathBuf,
}

impl SysfsRdmaView {
    pub fn new(sys_root: impl Into<PathBuf>) -> Self {
        Self {
            sys_root: sys_root.into(),
        }
    }
}

impl RdmaNodeView for SysfsRdmaView {
    fn uverbs_of(&self, bdf: &str) -> Result<CharDevice, RdmaError> {
        Ok(uverbs::uverbs_of(&self.sys_root, bdf)?)
    }

    fn rdma_cm(&self) -> Result<CharDevice, RdmaError> {
        Ok(uverbs::rdma_cm(&self.sys_root)?)
    }
}

pub struct RdmaDeviceInject {
    view: Arc<dyn RdmaNodeView>,
}

impl RdmaDeviceInject {
    pub fn new(view: Arc<dyn RdmaNodeView>) -> Self {
        Self { view }
    }

    /// The hook reading the sysfs tree at `sys_root`.
    pub fn with_sys_root(sys_root: impl Into<PathBuf>) -> Self {
        Self::new(Arc::new(SysfsRdmaView::new(sys_root)))
    }
}

impl Hook for RdmaDeviceInject {
    fn name(&self) -> &'static str {
        "RDMADeviceInject"
    }
    fn description(&self) -> &'static str {
        "RDMA device nodes (rdma_cm, uverbs of the allocated PF or VFs) from the scheduler's allocation"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[HookStage::PreCreateContainer]
    }

    fn container(
        &self,
        _stage: HookStage,
        container: &ContainerContext,
        _env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        if container.container.sandbox {
            return Ok(());
        }
        let allocations = get_device_allocations(&container.pod.annotations).map_err(|error| {
            HookError::MalformedAnnotation {
                key: ANNOTATION_DEVICE_ALLOCATED.to_string(),
                error: error.to_string(),
            }
        })?;
        let Some(rdma) = allocations
            .as_ref()
            .and_then(|all| all.get(DEVICE_TYPE_RDMA))
        else {
            return Ok(());
        };
        let devices = plan_rdma_devices(rdma, self.view.as_ref())
            .map_err(|error| HookError::Invalid(format!("rdma devices: {error}")))?;
        out.devices.extend(devices);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::runtimehooks::rules::NodeRules;
    use koord_common::testing::TempDir;

    /// A node described by a table: bdf → (uverbs name, major, minor).
    struct TableView {
        uverbs: BTreeMap<&'static str, (&'static str, i64, i64)>,
        rdma_cm: Option<(i64, i64)>,
    }

    impl RdmaNodeView for TableView {
        fn uverbs_of(&self, bdf: &str) -> Result<CharDevice, RdmaError> {
            let (name, major, minor) =
                self.uverbs
                    .get(bdf)
                    .copied()
                    .ok_or_else(|| UverbsError::NoUverbs {
                        bdf: bdf.to_string(),
                        dir: PathBuf::from("table"),
                    })?;
            Ok(CharDevice {
                name: name.to_string(),
                major,
                minor,
            })
        }
        fn rdma_cm(&self) -> Result<CharDevice, RdmaError> {
            let (major, minor) = self.rdma_cm.ok_or_else(|| UverbsError::NoUverbs {
                bdf: "rdma_cm".into(),
                dir: PathBuf::from("table"),
            })?;
            Ok(CharDevice {
                name: "rdma_cm".into(),
                major,
                minor,
            })
        }
    }

    fn table() -> TableView {
        TableView {
            uverbs: [
                ("0000:1f:00.0", ("uverbs0", 231, 192)),
                ("0000:1f:00.2", ("uverbs2", 231, 194)),
                ("0000:1f:00.3", ("uverbs3", 231, 195)),
                ("0000:90:00.0", ("uverbs1", 231, 193)),
            ]
            .into(),
            rdma_cm: Some((10, 58)),
        }
    }

    fn decide(
        view: Arc<dyn RdmaNodeView>,
        annotation: Option<&str>,
    ) -> Result<Adjustment, HookError> {
        let annotations: Vec<(&str, &str)> = annotation
            .map(|value| vec![(ANNOTATION_DEVICE_ALLOCATED, value)])
            .unwrap_or_default();
        let hook = RdmaDeviceInject::new(view);
        let mut out = Adjustment::default();
        hook.container(
            HookStage::PreCreateContainer,
            &container(pod("LS", "burstable", &annotations), "main"),
            &env_with(NodeRules::default()),
            &mut out,
        )
        .map(|()| out)
    }

    fn paths(out: &Adjustment) -> Vec<(&str, i64, i64)> {
        out.devices
            .iter()
            .map(|d| (d.path.as_str(), d.major, d.minor))
            .collect()
    }

    #[test]
    fn allocation_cases() {
        let view: Arc<dyn RdmaNodeView> = Arc::new(table());
        // (case, annotation, expected nodes or None for an error)
        type Row = (
            &'static str,
            Option<&'static str>,
            Option<Vec<(&'static str, i64, i64)>>,
        );
        let rows: Vec<Row> = vec![
            ("no annotation", None, Some(vec![])),
            (
                "gpu only",
                Some(r#"{"gpu":[{"minor":0,"resources":{}}]}"#),
                Some(vec![]),
            ),
            ("empty rdma list", Some(r#"{"rdma":[]}"#), Some(vec![])),
            (
                "PF by id",
                Some(
                    r#"{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"100"},"id":"0000:90:00.0"}]}"#,
                ),
                Some(vec![
                    ("/dev/infiniband/rdma_cm", 10, 58),
                    ("/dev/infiniband/uverbs1", 231, 193),
                ]),
            ),
            (
                "VFs replace their PF",
                Some(
                    r#"{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0","extension":{"vfs":[{"minor":1,"busID":"0000:1f:00.2"},{"minor":2,"busID":"0000:1F:00.3"}]}}]}"#,
                ),
                Some(vec![
                    ("/dev/infiniband/rdma_cm", 10, 58),
                    ("/dev/infiniband/uverbs2", 231, 194),
                    ("/dev/infiniband/uverbs3", 231, 195),
                ]),
            ),
            (
                "two devices, a VF listed twice",
                Some(
                    r#"{"rdma":[{"minor":0,"resources":{},"id":"0000:1f:00.0","extension":{"vfs":[{"busID":"0000:1f:00.2"},{"busID":"0000:1f:00.2"}]}},{"minor":1,"resources":{},"id":"0000:90:00.0"}]}"#,
                ),
                Some(vec![
                    ("/dev/infiniband/rdma_cm", 10, 58),
                    ("/dev/infiniband/uverbs2", 231, 194),
                    ("/dev/infiniband/uverbs1", 231, 193),
                ]),
            ),
            ("malformed JSON", Some(r#"{"rdma":[{"minor":"#), None),
            (
                "no bus id",
                Some(r#"{"rdma":[{"minor":0,"resources":{}}]}"#),
                None,
            ),
            (
                "path traversal in a bus id",
                Some(
                    r#"{"rdma":[{"minor":0,"resources":{},"extension":{"vfs":[{"busID":"../../../etc"}]}}]}"#,
                ),
                None,
            ),
            (
                "a device the node does not have",
                Some(r#"{"rdma":[{"minor":0,"resources":{},"id":"0000:af:00.0"}]}"#),
                None,
            ),
        ];
        for (case, annotation, expected) in rows {
            let result = decide(Arc::clone(&view), annotation);
            match expected {
                Some(expected) => {
                    let out = result.unwrap_or_else(|e| panic!("{case}: {e}"));
                    assert_eq!(paths(&out), expected, "{case}");
                    assert!(
                        out.devices
                            .iter()
                            .all(|d| d.kind == 'c' && d.file_mode == 0o666),
                        "{case}"
                    );
                    assert!(out.env.is_empty() && out.side_effects.is_empty(), "{case}");
                }
                None => assert!(result.is_err(), "{case}: {result:?}"),
            }
        }
        assert!(matches!(
            decide(Arc::clone(&view), Some("[1,2")),
            Err(HookError::MalformedAnnotation { .. })
        ));
        // Without the rdma_cm device there is nothing usable to inject.
        let no_cm = Arc::new(TableView {
            rdma_cm: None,
            ..table()
        });
        assert!(
            decide(
                no_cm,
                Some(r#"{"rdma":[{"minor":1,"resources":{},"id":"0000:90:00.0"}]}"#)
            )
            .is_err()
        );
    }

    #[test]
    fn too_many_functions_are_refused() {
        let vfs: Vec<String> = (0..=MAX_RDMA_FUNCTIONS)
            .map(|i| {
                format!(
                    r#"{{"busID":"0000:{:02x}:{:02x}.{}"}}"#,
                    i / 256,
                    (i / 8) % 32,
                    i % 8
                )
            })
            .collect();
        let annotation = format!(
            r#"{{"rdma":[{{"minor":0,"resources":{{}},"id":"0000:1f:00.0","extension":{{"vfs":[{}]}}}}]}}"#,
            vfs.join(",")
        );
        let allocations =
            get_device_allocations(&[(ANNOTATION_DEVICE_ALLOCATED.to_string(), annotation)].into())
                .unwrap()
                .unwrap();
        assert!(matches!(
            allocated_functions(&allocations[DEVICE_TYPE_RDMA]),
            Err(RdmaError::TooMany { .. })
        ));
    }

    fn write(path: PathBuf, content: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// A sysfs tree as the kernel lays it out for a ConnectX PF with two VFs.
    fn sysfs_tree() -> TempDir {
        let tmp = TempDir::new("rdma-sysfs").unwrap();
        let sys = tmp.path();
        write(sys.join("class/misc/rdma_cm/dev"), "10:58\n");
        for (bdf, uverbs, minor) in [
            ("0000:1f:00.0", "uverbs0", 192),
            ("0000:1f:00.2", "uverbs4", 196),
            ("0000:1f:00.3", "uverbs5", 197),
        ] {
            let verbs = sys
                .join("bus/pci/devices")
                .join(bdf)
                .join("infiniband_verbs");
            write(verbs.join(uverbs).join("dev"), &format!("231:{minor}\n"));
            write(verbs.join(uverbs).join("ibdev"), "mlx5_0\n");
        }
        // A function whose verbs directory holds something else only.
        std::fs::create_dir_all(
            sys.join("bus/pci/devices/0000:3b:00.0/infiniband_verbs/abi_version"),
        )
        .unwrap();
        // A function with a corrupt dev attribute.
        write(
            sys.join("bus/pci/devices/0000:3c:00.0/infiniband_verbs/uverbs9/dev"),
            "garbage",
        );
        tmp
    }

    #[test]
    fn sysfs_view_resolves_uverbs_and_rdma_cm() {
        let tmp = sysfs_tree();
        let view = SysfsRdmaView::new(tmp.path());
        assert_eq!(
            view.uverbs_of("0000:1f:00.2").unwrap(),
            CharDevice {
                name: "uverbs4".into(),
                major: 231,
                minor: 196
            }
        );
        assert_eq!(view.rdma_cm().unwrap().major, 10);
        assert!(matches!(
            view.uverbs_of("0000:3b:00.0"),
            Err(RdmaError::Node(UverbsError::NoUverbs { .. }))
        ));
        assert!(matches!(
            view.uverbs_of("0000:77:00.0"),
            Err(RdmaError::Node(UverbsError::NoUverbs { .. }))
        ));
        assert!(matches!(
            view.uverbs_of("0000:3c:00.0"),
            Err(RdmaError::Node(UverbsError::BadDeviceNumbers { .. }))
        ));
        assert!(matches!(
            view.uverbs_of("../../etc"),
            Err(RdmaError::Node(UverbsError::NotABusId(_)))
        ));

        // The hook on this tree.
        let hook = RdmaDeviceInject::with_sys_root(tmp.path());
        let annotation = r#"{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0","extension":{"vfs":[{"minor":2,"busID":"0000:1f:00.3"}]}}]}"#;
        let mut out = Adjustment::default();
        hook.container(
            HookStage::PreCreateContainer,
            &container(
                pod(
                    "LS",
                    "burstable",
                    &[(ANNOTATION_DEVICE_ALLOCATED, annotation)],
                ),
                "main",
            ),
            &env_with(NodeRules::default()),
            &mut out,
        )
        .unwrap();
        assert_eq!(
            paths(&out),
            vec![
                ("/dev/infiniband/rdma_cm", 10, 58),
                ("/dev/infiniband/uverbs5", 231, 197)
            ]
        );

        // An oversized attribute is refused, not read whole.
        write(
            tmp.path().join("class/misc/rdma_cm/dev"),
            &"1".repeat(10_000),
        );
        assert!(matches!(
            view.rdma_cm(),
            Err(RdmaError::Node(UverbsError::Sysfs(_)))
        ));
    }
}

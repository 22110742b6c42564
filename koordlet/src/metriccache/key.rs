//! What a time series is about: the metric kind, the entity measured and an
//! optional label that splits one kind into several series (PSI resource,
//! BE allocation).

use std::fmt;
use std::sync::Arc;

/// The measured quantity. Names follow upstream's metric kinds
/// (`pkg/koordlet/metriccache/metric_types.go`) where upstream has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricKind {
    /// Node CPU in use, cores.
    NodeCpuUsage,
    /// Node memory in use without page cache (`MemTotal - MemAvailable`), bytes.
    NodeMemoryUsage,
    /// Node memory in use including page cache (`MemTotal - MemFree`), bytes.
    NodeMemoryUsageWithPageCache,
    /// Node pressure stall information; labelled with [`PsiLabel`], percent.
    NodePsi,
    /// Node CPU not accounted to any pod (`node - Σ pods`, floored at 0), cores.
    SysCpuUsage,
    /// Node memory not accounted to any pod, bytes.
    SysMemoryUsage,
    /// Best-effort pods' usage summed; labelled with [`BeLabel`] (cores or bytes).
    NodeBe,
    /// Pod CPU, cores.
    PodCpuUsage,
    /// Pod memory as upstream counts it (anon + unevictable), bytes.
    PodMemoryUsage,
    /// Pod memory working set as cadvisor counts it (usage - inactive file), bytes.
    PodMemoryWorkingSet,
    /// Fraction of CFS periods in which the pod was throttled, 0..=1.
    PodCpuThrottled,
    /// Pod pressure stall information; labelled with [`PsiLabel`], percent.
    PodPsi,
    /// Container CPU, cores.
    ContainerCpuUsage,
    /// Container memory as upstream counts it (anon + unevictable), bytes.
    ContainerMemoryUsage,
    /// Container memory working set (usage - inactive file), bytes.
    ContainerMemoryWorkingSet,
    /// Fraction of CFS periods in which the container was throttled, 0..=1.
    ContainerCpuThrottled,
    /// Container pressure stall information; labelled with [`PsiLabel`], percent.
    ContainerPsi,
    /// Host application CPU (entity [`Entity::HostApp`]), cores.
    HostAppCpuUsage,
    /// Host application memory as pods count it (anon + unevictable), bytes.
    HostAppMemoryUsage,
    /// Host application memory including page cache (`memory.usage_in_bytes`), bytes.
    HostAppMemoryUsageWithPageCache,
    /// Node `MemTotal`, bytes (stands in for allocatable without a Node object).
    NodeMemoryTotal,
    /// CPU in use on one NUMA node; labelled with [`SeriesLabel::Numa`], cores.
    NodeNumaCpuUsage,
    /// Memory in use on one NUMA node (`MemTotal - MemFree` of its meminfo);
    /// labelled with [`SeriesLabel::Numa`], bytes.
    NodeNumaMemoryUsage,
    /// Σ SM utilisation of the processes on one GPU; labelled with
    /// [`SeriesLabel::Gpu`], percent of one GPU (upstream `node_gpu_core_usage`).
    NodeGpuCoreUsage,
    /// Σ GPU memory of the processes on one GPU; labelled with
    /// [`SeriesLabel::Gpu`], bytes.
    NodeGpuMemoryUsage,
    /// One GPU's total memory; labelled with [`SeriesLabel::Gpu`], bytes.
    NodeGpuMemoryTotal,
    /// A pod's SM utilisation on one GPU; labelled with [`SeriesLabel::Gpu`], percent.
    PodGpuCoreUsage,
    /// A pod's GPU memory on one GPU; labelled with [`SeriesLabel::Gpu`], bytes.
    PodGpuMemoryUsage,
    /// A container's SM utilisation on one GPU; labelled with [`SeriesLabel::Gpu`], percent.
    ContainerGpuCoreUsage,
    /// A container's GPU memory on one GPU; labelled with [`SeriesLabel::Gpu`], bytes.
    ContainerGpuMemoryUsage,
}

impl MetricKind {
    pub const ALL: [MetricKind; 30] = [
        MetricKind::NodeCpuUsage,
        MetricKind::NodeMemoryUsage,
        MetricKind::NodeMemoryUsageWithPageCache,
        MetricKind::NodePsi,
        MetricKind::SysCpuUsage,
        MetricKind::SysMemoryUsage,
        MetricKind::NodeBe,
        MetricKind::PodCpuUsage,
        MetricKind::PodMemoryUsage,
        MetricKind::PodMemoryWorkingSet,
        MetricKind::PodCpuThrottled,
        MetricKind::PodPsi,
        MetricKind::ContainerCpuUsage,
        MetricKind::ContainerMemoryUsage,
        MetricKind::ContainerMemoryWorkingSet,
        MetricKind::ContainerCpuThrottled,
        MetricKind::ContainerPsi,
        MetricKind::HostAppCpuUsage,
        MetricKind::HostAppMemoryUsage,
        MetricKind::HostAppMemoryUsageWithPageCache,
        MetricKind::NodeMemoryTotal,
        MetricKind::NodeNumaCpuUsage,
        MetricKind::NodeNumaMemoryUsage,
        MetricKind::NodeGpuCoreUsage,
        MetricKind::NodeGpuMemoryUsage,
        MetricKind::NodeGpuMemoryTotal,
        MetricKind::PodGpuCoreUsage,
        MetricKind::PodGpuMemoryUsage,
        MetricKind::ContainerGpuCoreUsage,
        MetricKind::ContainerGpuMemoryUsage,
    ];

    /// Upstream's name for the kind (ours where upstream has none).
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::NodeCpuUsage => "node_cpu_usage",
            MetricKind::NodeMemoryUsage => "node_memory_usage",
            MetricKind::NodeMemoryUsageWithPageCache => "node_memory_usage_with_page_cache",
            MetricKind::NodePsi => "node_psi",
            MetricKind::SysCpuUsage => "sys_cpu_usage",
            MetricKind::SysMemoryUsage => "sys_memory_usage",
            MetricKind::NodeBe => "node_be",
            MetricKind::PodCpuUsage => "pod_cpu_usage",
            MetricKind::PodMemoryUsage => "pod_memory_usage",
            MetricKind::PodMemoryWorkingSet => "pod_memory_working_set",
            MetricKind::PodCpuThrottled => "pod_cpu_throttled",
            MetricKind::PodPsi => "pod_psi",
            MetricKind::ContainerCpuUsage => "container_cpu_usage",
            MetricKind::ContainerMemoryUsage => "container_memory_usage",
            MetricKind::ContainerMemoryWorkingSet => "container_memory_working_set",
            MetricKind::ContainerCpuThrottled => "container_cpu_throttled",
            MetricKind::ContainerPsi => "container_psi",
            MetricKind::HostAppCpuUsage => "host_application_cpu_usage",
            MetricKind::HostAppMemoryUsage => "host_application_memory_usage",
            MetricKind::HostAppMemoryUsageWithPageCache => {
                "host_application_memory_usage_with_page_cache"
            }
            MetricKind::NodeMemoryTotal => "node_memory_total",
            MetricKind::NodeNumaCpuUsage => "node_numa_cpu_usage",
            MetricKind::NodeNumaMemoryUsage => "node_numa_memory_usage",
            MetricKind::NodeGpuCoreUsage => "node_gpu_core_usage",
            MetricKind::NodeGpuMemoryUsage => "node_gpu_memory_usage",
            MetricKind::NodeGpuMemoryTotal => "node_gpu_memory_total",
            MetricKind::PodGpuCoreUsage => "pod_gpu_core_usage",
            MetricKind::PodGpuMemoryUsage => "pod_gpu_memory_usage",
            MetricKind::ContainerGpuCoreUsage => "container_gpu_core_usage",
            MetricKind::ContainerGpuMemoryUsage => "container_gpu_memory_usage",
        }
    }
}

impl fmt::Display for MetricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a series measures: the node, one pod (by UID) or one container (by
/// the container ID from the pod status, e.g. `containerd://<hex>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Entity {
    Node,
    Pod(Arc<str>),
    Container(Arc<str>),
    /// A host application of the NodeSLO, by name.
    HostApp(Arc<str>),
}

impl Entity {
    pub fn pod(uid: impl Into<Arc<str>>) -> Self {
        Entity::Pod(uid.into())
    }

    pub fn container(id: impl Into<Arc<str>>) -> Self {
        Entity::Container(id.into())
    }

    pub fn host_app(name: impl Into<Arc<str>>) -> Self {
        Entity::HostApp(name.into())
    }
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entity::Node => f.write_str("node"),
            Entity::Pod(uid) => write!(f, "pod {uid}"),
            Entity::Container(id) => write!(f, "container {id}"),
            Entity::HostApp(name) => write!(f, "host application {name}"),
        }
    }
}

/// The resource a PSI file describes (upstream property values `cpu`, `mem`, `io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PsiResource {
    Cpu,
    Memory,
    Io,
}

impl PsiResource {
    pub const ALL: [PsiResource; 3] = [PsiResource::Cpu, PsiResource::Memory, PsiResource::Io];

    pub fn as_str(self) -> &'static str {
        match self {
            PsiResource::Cpu => "cpu",
            PsiResource::Memory => "mem",
            PsiResource::Io => "io",
        }
    }

    /// The file name below `/proc/pressure/` and in a cgroup v2 directory.
    pub fn node_file_name(self) -> &'static str {
        match self {
            PsiResource::Cpu => "cpu",
            PsiResource::Memory => "memory",
            PsiResource::Io => "io",
        }
    }

    /// The per-cgroup file name (`cpu.pressure`, ...).
    pub fn cgroup_file_name(self) -> &'static str {
        match self {
            PsiResource::Cpu => "cpu.pressure",
            PsiResource::Memory => "memory.pressure",
            PsiResource::Io => "io.pressure",
        }
    }
}

/// `some`: at least one task stalled; `full`: all non-idle tasks stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PsiDegree {
    Some,
    Full,
}

impl PsiDegree {
    pub fn as_str(self) -> &'static str {
        match self {
            PsiDegree::Some => "some",
            PsiDegree::Full => "full",
        }
    }
}

/// The kernel's averaging window for a PSI ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PsiWindow {
    Avg10,
    Avg60,
    Avg300,
}

impl PsiWindow {
    pub const ALL: [PsiWindow; 3] = [PsiWindow::Avg10, PsiWindow::Avg60, PsiWindow::Avg300];

    /// Prometheus label value (`avg10`, ...), as upstream's `psi_precision`.
    pub fn as_str(self) -> &'static str {
        match self {
            PsiWindow::Avg10 => "avg10",
            PsiWindow::Avg60 => "avg60",
            PsiWindow::Avg300 => "avg300",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PsiLabel {
    pub resource: PsiResource,
    pub degree: PsiDegree,
    pub window: PsiWindow,
}

/// Which BE quantity a [`MetricKind::NodeBe`] series holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BeLabel {
    /// Σ CPU usage of BE pods, cores.
    CpuUsage,
    /// Σ memory usage of BE pods, bytes.
    MemoryUsage,
}

/// Which GPU a GPU series is about: upstream's `gpu_minor` and
/// `gpu_device_uuid` properties. The UUID keeps a GPU replaced at the same
/// minor from continuing its predecessor's series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GpuLabel {
    pub minor: i32,
    pub uuid: Arc<str>,
}

impl GpuLabel {
    pub fn new(minor: i32, uuid: impl Into<Arc<str>>) -> Self {
        Self {
            minor,
            uuid: uuid.into(),
        }
    }
}

/// Splits one kind into several series; `None` for kinds with one series per entity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum SeriesLabel {
    #[default]
    None,
    Psi(PsiLabel),
    Be(BeLabel),
    /// A NUMA node id.
    Numa(u32),
    /// One GPU.
    Gpu(GpuLabel),
}

/// Identifies one time series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    pub kind: MetricKind,
    pub entity: Entity,
    pub label: SeriesLabel,
}

impl SeriesKey {
    pub fn new(kind: MetricKind, entity: Entity) -> Self {
        Self {
            kind,
            entity,
            label: SeriesLabel::None,
        }
    }

    pub fn node(kind: MetricKind) -> Self {
        Self::new(kind, Entity::Node)
    }

    pub fn pod(kind: MetricKind, uid: impl Into<Arc<str>>) -> Self {
        Self::new(kind, Entity::pod(uid))
    }

    pub fn container(kind: MetricKind, id: impl Into<Arc<str>>) -> Self {
        Self::new(kind, Entity::container(id))
    }

    pub fn with_label(mut self, label: SeriesLabel) -> Self {
        self.label = label;
        self
    }
}

impl fmt::Display for SeriesKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {}", self.kind, self.entity)?;
        match &self.label {
            SeriesLabel::None => Ok(()),
            SeriesLabel::Psi(psi) => write!(
                f,
                " ({} {} {})",
                psi.resource.as_str(),
                psi.degree.as_str(),
                psi.window.as_str()
            ),
            SeriesLabel::Be(BeLabel::CpuUsage) => f.write_str(" (cpu usage)"),
            SeriesLabel::Be(BeLabel::MemoryUsage) => f.write_str(" (memory usage)"),
            SeriesLabel::Numa(node) => write!(f, " (NUMA node {node})"),
            SeriesLabel::Gpu(gpu) => write!(f, " (GPU {} {})", gpu.minor, gpu.uuid),
        }
    }
}

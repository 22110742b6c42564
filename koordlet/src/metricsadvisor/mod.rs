//! The metrics advisor: collectors that read node, pod and container usage
//! from /proc and cgroupfs and write it to the [`crate::metriccache`].
//!
//! - [`NodeResourceCollector`]: node CPU (`/proc/stat`) and memory (`/proc/meminfo`).
//! - [`PodResourceCollector`]: per pod and container CPU, memory (upstream's
//!   anon + unevictable, and cadvisor's working set) and CFS throttling.
//! - [`PsiCollector`]: pressure stall information of the node and of each
//!   pod and container cgroup, where the kernel provides it.
//! - [`HostAppCollector`]: CPU and memory of the NodeSLO's host applications.
//! - [`NumaResourceCollector`]: CPU and memory in use per NUMA node.
//! - [`CpuTopologyCollector`]: the CPU topology snapshot.
//! - [`derive_node_aggregates`]: BE usage (sum over BE pods) and system usage
//!   (node − Σ pods − Σ host applications, floored at 0), computed from one
//!   round's samples.
//!
//! Every parser is pure ([`parse`]); collectors take the time as an argument
//! and keep the previous counter per entity to turn counters into rates.
//! [`MetricsAdvisor::run`] drives them on a blocking thread each interval.

mod advisor;
mod derived;
mod gpu;
mod hostapp;
mod node;
mod numa;
pub mod parse;
mod pods;
mod prom;
mod psi;
mod rate;
mod topology;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use apis::extension::{PriorityClass, QoSClass};
use apis::slo::v1alpha1::HostApplicationSpec;

use crate::metriccache::Sample;
use crate::system::cgroup::{CgroupPathError, QosTier};

pub use advisor::{CollectorArgs, MetricsAdvisor};
pub use derived::derive_node_aggregates;
pub use gpu::{
    ContainerPids, GpuCollector, PodPids, gpu_devices_of, gpu_usage_samples, parse_pids,
};
pub use hostapp::{HostAppCollector, host_app_cgroup_dir};
pub use node::NodeResourceCollector;
pub use numa::NumaResourceCollector;
pub use parse::ParseError;
pub use parse::PsiByResource;
pub use pods::PodResourceCollector;
pub use prom::{AdvisorMetrics, PsiOwner, PsiRecorder};
pub use psi::{PsiCollector, node_psi_available, psi_samples};
pub use rate::Previous;
pub use topology::{
    CpuFacts, CpuTopologyCollector, TopologySurvey, parse_topology_id, read_cpu_topology,
    survey_cpu_topology,
};

/// What the collectors need to know about a pod on this node. The states
/// informer builds it from the kubelet's pod list.
#[derive(Debug, Clone, PartialEq)]
pub struct PodMeta {
    /// `metadata.uid`; keys the pod's series in the metric cache.
    pub uid: Arc<str>,
    pub namespace: String,
    pub name: String,
    /// Koordinator QoS class (label, else derived from the Kubernetes class).
    pub qos: QoSClass,
    /// Kubernetes QoS class: decides the tier directory of the pod's cgroup.
    pub kube_qos: QosTier,
    pub priority: PriorityClass,
    pub containers: Vec<ContainerMeta>,
}

/// One container of a [`PodMeta`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerMeta {
    pub name: String,
    /// `containerID` from the pod status (`containerd://<hex>`); `None`
    /// until the runtime has started the container.
    pub id: Option<Arc<str>>,
}

/// The pods of this node at one moment, and the NodeSLO's host
/// applications (processes outside Kubernetes measured like pods).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodsSnapshot {
    pub pods: Vec<PodMeta>,
    pub host_applications: Vec<HostApplicationSpec>,
}

impl PodsSnapshot {
    pub fn new(pods: Vec<PodMeta>) -> Self {
        Self {
            pods,
            host_applications: Vec::new(),
        }
    }

    pub fn with_host_applications(mut self, host_applications: Vec<HostApplicationSpec>) -> Self {
        self.host_applications = host_applications;
        self
    }

    pub fn pod(&self, uid: &str) -> Option<&PodMeta> {
        self.pods.iter().find(|pod| &*pod.uid == uid)
    }
}

/// A source of samples, called once per collection round.
///
/// `collect` does blocking file I/O; the advisor calls it on a blocking
/// thread. Failures are logged by the collector (missing cgroups at debug
/// level) and the affected samples left out: one pod's trouble must not
/// cost the others their samples.
pub trait Collector: Send {
    fn name(&self) -> &'static str;

    fn collect(&mut self, now: SystemTime, pods: &PodsSnapshot) -> Vec<Sample>;
}

/// A failed read of a kernel file.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: ParseError,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(transparent)]
    Path(#[from] CgroupPathError),
}

impl CollectError {
    /// The file or its cgroup does not exist (e.g. the pod just went away).
    pub fn is_not_found(&self) -> bool {
        matches!(self, CollectError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Reads a whole (small) kernel file with as few system calls as possible:
/// open, one read, close. Collection cost is dominated by system calls
/// (about 200 cgroups × 4 files every second), and `fs::read_to_string`
/// adds a `statx`, an `lseek` and a final empty read to each file. A short
/// read is taken as the end of the file: regular files only return short at
/// the end, and kernfs/procfs `seq_file`s fill the buffer when they can.
pub(crate) fn read_text(path: &Path) -> Result<String, CollectError> {
    use std::io::Read;
    let read_error = |source| CollectError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read_error)?;
    let mut buffer = vec![0u8; 4096];
    let mut filled = 0;
    loop {
        if filled == buffer.len() {
            buffer.resize(buffer.len() * 2, 0);
        }
        let read = match file.read(&mut buffer[filled..]) {
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(read_error(err)),
        };
        filled += read;
        if read == 0 || filled < buffer.len() {
            break;
        }
    }
    buffer.truncate(filled);
    String::from_utf8(buffer).map_err(|_| CollectError::Invalid {
        path: path.to_path_buf(),
        reason: "content is not UTF-8".to_string(),
    })
}

/// Reads and parses a kernel file, attaching the path to parse errors.
pub(crate) fn read_parsed<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, CollectError> {
    let content = read_text(path)?;
    parse(&content).map_err(|source| CollectError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

//! Pressure stall information of the node (`/proc/pressure/*`) and of each
//! pod and container cgroup (`cpu.pressure`, ... in the v2 hierarchy, or in
//! the unified mount of a v1 host), collected at its own interval.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::parse::{PsiByResource, parse_psi};
use super::prom::{PsiOwner, PsiRecorder};
use super::{CollectError, Collector, PodsSnapshot, read_parsed};
use crate::metriccache::{
    Entity, MetricKind, PsiDegree, PsiLabel, PsiResource, PsiWindow, Sample, SeriesKey, SeriesLabel,
};
use crate::system::cgroup::{CgroupLayout, CgroupResource};

fn cgroup_resource(resource: PsiResource) -> CgroupResource {
    match resource {
        PsiResource::Cpu => CgroupResource::CpuPressure,
        PsiResource::Memory => CgroupResource::MemoryPressure,
        PsiResource::Io => CgroupResource::IoPressure,
    }
}

fn read_psi(
    path_of: impl Fn(PsiResource) -> Result<PathBuf, CollectError>,
) -> Result<PsiByResource, CollectError> {
    let read = |resource| read_parsed(&path_of(resource)?, parse_psi);
    Ok(PsiByResource {
        cpu: read(PsiResource::Cpu)?,
        memory: read(PsiResource::Memory)?,
        io: read(PsiResource::Io)?,
    })
}

/// The cache series of one reading: `avg10` of `some` and, where the kernel
/// reports it, `full`, per resource (what upstream stores).
pub fn psi_samples(
    kind: MetricKind,
    entity: &Entity,
    now: SystemTime,
    psi: &PsiByResource,
) -> Vec<Sample> {
    let mut samples = Vec::with_capacity(6);
    for resource in PsiResource::ALL {
        let stats = psi.get(resource);
        let lines = [
            (PsiDegree::Some, Some(stats.some)),
            (PsiDegree::Full, stats.full),
        ];
        for (degree, line) in lines {
            let Some(line) = line else { continue };
            let label = SeriesLabel::Psi(PsiLabel {
                resource,
                degree,
                window: PsiWindow::Avg10,
            });
            let key = SeriesKey::new(kind, entity.clone()).with_label(label);
            samples.push(Sample::new(key, now, line.avg10));
        }
    }
    samples
}

/// Reads PSI every `interval` (upstream's `-psi-collector-interval`, 10 s);
/// rounds in between return nothing.
pub struct PsiCollector {
    proc_root: PathBuf,
    layout: CgroupLayout,
    interval: Duration,
    next_due: Option<SystemTime>,
    recorder: Option<PsiRecorder>,
    node_unavailable_logged: bool,
    warned: HashSet<Arc<str>>,
}

impl PsiCollector {
    pub fn new(proc_root: impl Into<PathBuf>, layout: CgroupLayout, interval: Duration) -> Self {
        Self {
            proc_root: proc_root.into(),
            layout,
            interval,
            next_due: None,
            recorder: None,
            node_unavailable_logged: false,
            warned: HashSet::new(),
        }
    }

    /// Also exports `koordlet_pod_psi` and `koordlet_container_psi`.
    pub fn with_recorder(mut self, recorder: PsiRecorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    fn node_psi(&mut self) -> Option<PsiByResource> {
        let root = self.proc_root.join("pressure");
        match read_psi(|r| Ok(root.join(r.node_file_name()))) {
            Ok(psi) => Some(psi),
            Err(err) => {
                if !self.node_unavailable_logged {
                    self.node_unavailable_logged = true;
                    if err.is_not_found() {
                        tracing::info!(error = %err, "node PSI is not available on this kernel: {err}");
                    } else {
                        tracing::warn!(error = %err, "cannot read node PSI: {err}");
                    }
                }
                None
            }
        }
    }

    fn cgroup_psi(
        &mut self,
        id: &Arc<str>,
        dir: Result<PathBuf, CollectError>,
    ) -> Option<PsiByResource> {
        let layout = &self.layout;
        let result =
            dir.and_then(|dir| read_psi(|r| Ok(layout.file_path(&dir, cgroup_resource(r))?)));
        match result {
            Ok(psi) => {
                self.warned.remove(id);
                Some(psi)
            }
            Err(err) if err.is_not_found() => {
                tracing::debug!(entity = %id, error = %err, "no PSI files for {id}; skipped");
                None
            }
            Err(err) => {
                if self.warned.insert(id.clone()) {
                    tracing::warn!(entity = %id, error = %err, "cannot read PSI of {id}: {err}");
                }
                None
            }
        }
    }
}

impl Collector for PsiCollector {
    fn name(&self) -> &'static str {
        "psi"
    }

    fn collect(&mut self, now: SystemTime, pods: &PodsSnapshot) -> Vec<Sample> {
        if self.next_due.is_some_and(|due| now < due) {
            return Vec::new();
        }
        self.next_due = Some(now + self.interval);
        let mut samples = Vec::new();
        if let Some(psi) = self.node_psi() {
            samples.extend(psi_samples(MetricKind::NodePsi, &Entity::Node, now, &psi));
        }
        let mut records = Vec::new();
        for pod in &pods.pods {
            let dir = self
                .layout
                .pod_dir(pod.kube_qos, &pod.uid)
                .map_err(CollectError::from);
            let Some(psi) = self.cgroup_psi(&pod.uid, dir) else {
                continue;
            };
            samples.extend(psi_samples(
                MetricKind::PodPsi,
                &Entity::Pod(pod.uid.clone()),
                now,
                &psi,
            ));
            records.push((PsiOwner::pod(pod), psi));
            for container in &pod.containers {
                let Some(id) = &container.id else { continue };
                let dir = self
                    .layout
                    .container_dir(pod.kube_qos, &pod.uid, id)
                    .map_err(CollectError::from);
                let Some(psi) = self.cgroup_psi(id, dir) else {
                    continue;
                };
                samples.extend(psi_samples(
                    MetricKind::ContainerPsi,
                    &Entity::Container(id.clone()),
                    now,
                    &psi,
                ));
                records.push((PsiOwner::container(pod, &container.name, id), psi));
            }
        }
        if let Some(recorder) = &self.recorder {
            recorder.replace_all(&records);
        }
        let present: HashSet<&str> = pods
            .pods
            .iter()
            .flat_map(|p| {
                std::iter::once(&*p.uid).chain(p.containers.iter().filter_map(|c| c.id.as_deref()))
            })
            .collect();
        self.warned.retain(|id| present.contains(&**id));
        samples
    }
}

/// Whether `root/pressure/cpu` exists: node-level PSI support.
pub fn node_psi_available(proc_root: &Path) -> bool {
    proc_root.join("pressure/cpu").exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metricsadvisor::{ContainerMeta, PodMeta};
    use crate::system::cgroup::{CgroupDriver, CgroupVersion, QosTier};
    use apis::extension::{PriorityClass, QoSClass};
    use koord_common::testing::TempDir;
    use std::fs;
    use std::time::UNIX_EPOCH;

    const UID: &str = "11111111-2222-3333-4444-555555555555";
    const CID: &str = "containerd://feed";

    fn psi_text(some10: f64, full10: Option<f64>) -> String {
        let mut text = format!("some avg10={some10:.2} avg60=0.00 avg300=0.00 total=10\n");
        if let Some(full) = full10 {
            text.push_str(&format!(
                "full avg10={full:.2} avg60=0.00 avg300=0.00 total=5\n"
            ));
        }
        text
    }

    fn snapshot() -> PodsSnapshot {
        PodsSnapshot::new(vec![PodMeta {
            uid: UID.into(),
            namespace: "ns".into(),
            name: "p".into(),
            qos: QoSClass::BE,
            kube_qos: QosTier::BestEffort,
            priority: PriorityClass::Batch,
            containers: vec![ContainerMeta {
                name: "c".into(),
                id: Some(CID.into()),
            }],
        }])
    }

    #[test]
    fn node_and_cgroup_psi_on_a_hybrid_host() {
        let tmp = TempDir::new("psi").unwrap();
        let proc_root = tmp.path().join("proc");
        fs::create_dir_all(proc_root.join("pressure")).unwrap();
        fs::write(proc_root.join("pressure/cpu"), psi_text(1.5, None)).unwrap();
        fs::write(proc_root.join("pressure/memory"), psi_text(2.0, Some(1.0))).unwrap();
        fs::write(proc_root.join("pressure/io"), psi_text(3.0, Some(0.5))).unwrap();

        let unified = tmp.path().join("cgroup/unified");
        let layout = CgroupLayout::new(
            CgroupVersion::V1,
            CgroupDriver::Cgroupfs,
            tmp.path().join("cgroup"),
        )
        .with_unified_root(&unified);
        // The pod has PSI files; the container does not (skipped quietly).
        let pod_dir = unified.join(layout.pod_dir(QosTier::BestEffort, UID).unwrap());
        fs::create_dir_all(&pod_dir).unwrap();
        for (file, value) in [
            ("cpu.pressure", 4.0),
            ("memory.pressure", 5.0),
            ("io.pressure", 6.0),
        ] {
            fs::write(pod_dir.join(file), psi_text(value, Some(value / 2.0))).unwrap();
        }

        let mut collector = PsiCollector::new(&proc_root, layout, Duration::from_secs(10));
        let t0 = UNIX_EPOCH + Duration::from_secs(100);
        let samples = collector.collect(t0, &snapshot());
        let node: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.key.kind == MetricKind::NodePsi)
            .collect();
        // cpu some, memory some+full, io some+full.
        assert_eq!(node.len(), 5);
        let cpu_some =
            SeriesKey::node(MetricKind::NodePsi).with_label(SeriesLabel::Psi(PsiLabel {
                resource: PsiResource::Cpu,
                degree: PsiDegree::Some,
                window: PsiWindow::Avg10,
            }));
        assert_eq!(
            node.iter().find(|s| s.key == cpu_some).map(|s| s.value),
            Some(1.5)
        );
        let pod: Vec<f64> = samples
            .iter()
            .filter(|s| s.key.kind == MetricKind::PodPsi)
            .map(|s| s.value)
            .collect();
        assert_eq!(pod, vec![4.0, 2.0, 5.0, 2.5, 6.0, 3.0]);
        assert!(
            samples
                .iter()
                .all(|s| s.key.kind != MetricKind::ContainerPsi)
        );
        assert!(collector.warned.is_empty());

        // Not due again until 10 s later.
        assert!(
            collector
                .collect(t0 + Duration::from_secs(5), &snapshot())
                .is_empty()
        );
        assert!(
            !collector
                .collect(t0 + Duration::from_secs(10), &snapshot())
                .is_empty()
        );
    }

    #[test]
    fn missing_node_psi_is_not_an_error() {
        let tmp = TempDir::new("psi-none").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd, tmp.path());
        let mut collector = PsiCollector::new(tmp.path(), layout, Duration::from_secs(10));
        assert!(collector.collect(UNIX_EPOCH, &snapshot()).is_empty());
        assert!(!node_psi_available(tmp.path()));
    }

    #[test]
    fn malformed_cgroup_psi_warns_once() {
        let tmp = TempDir::new("psi-bad").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Cgroupfs, tmp.path());
        let pod_dir = tmp
            .path()
            .join(layout.pod_dir(QosTier::BestEffort, UID).unwrap());
        fs::create_dir_all(&pod_dir).unwrap();
        fs::write(pod_dir.join("cpu.pressure"), "some avg10=x\n").unwrap();
        let mut collector = PsiCollector::new(tmp.path(), layout, Duration::from_secs(1));
        collector.collect(UNIX_EPOCH, &snapshot());
        assert!(collector.warned.contains(UID));
        collector.collect(
            UNIX_EPOCH + Duration::from_secs(1),
            &PodsSnapshot::default(),
        );
        assert!(collector.warned.is_empty());
    }
}

//! Pod and container CPU, memory and throttling from their cgroups.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use super::parse::{
    MemoryStat, Throttling, cpu_cores_between, parse_cpu_stat, parse_memory_stat, parse_single_u64,
    throttled_ratio,
};
use super::rate::Previous;
use super::{CollectError, Collector, PodMeta, PodsSnapshot, read_parsed};
use crate::metriccache::{Entity, MetricKind, Sample, SeriesKey};
use crate::system::cgroup::{CgroupLayout, CgroupResource, CgroupVersion};

/// One reading of a cgroup's counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CgroupUsage {
    pub cpu_ns: u64,
    pub throttling: Option<Throttling>,
    pub memory: MemoryStat,
    /// `memory.usage_in_bytes` / `memory.current`.
    pub memory_charged: u64,
}

/// Reads the counters of the cgroup at `dir` (relative to the hierarchy root).
pub(crate) fn read_cgroup_usage(
    layout: &CgroupLayout,
    dir: &Path,
) -> Result<CgroupUsage, CollectError> {
    let (cpu_ns, throttling) = match layout.version {
        CgroupVersion::V1 => {
            let cpu_ns = read_parsed(&layout.file_path(dir, CgroupResource::CpuacctUsage)?, |c| {
                parse_single_u64("cpuacct.usage", c)
            })?;
            // Throttling is secondary: a missing cpu hierarchy must not cost the usage.
            let throttling = match read_parsed(
                &layout.file_path(dir, CgroupResource::CpuStat)?,
                parse_cpu_stat,
            ) {
                Ok(stat) => stat.throttling,
                Err(err) if err.is_not_found() => None,
                Err(err) => return Err(err),
            };
            (cpu_ns, throttling)
        }
        CgroupVersion::V2 => {
            let path = layout.file_path(dir, CgroupResource::CpuStat)?;
            let stat = read_parsed(&path, parse_cpu_stat)?;
            let cpu_ns = stat.usage_ns.ok_or_else(|| CollectError::Parse {
                path: path.clone(),
                source: super::ParseError::MissingField {
                    file: "cpu.stat",
                    field: "usage_usec",
                },
            })?;
            (cpu_ns, stat.throttling)
        }
    };
    let memory = read_parsed(
        &layout.file_path(dir, CgroupResource::MemoryStat)?,
        parse_memory_stat,
    )?;
    let memory_charged = read_parsed(&layout.file_path(dir, CgroupResource::MemoryUsage)?, |c| {
        parse_single_u64("memory usage", c)
    })?;
    Ok(CgroupUsage {
        cpu_ns,
        throttling,
        memory,
        memory_charged,
    })
}

/// The metric kinds of one level (pod or container).
struct Kinds {
    cpu: MetricKind,
    memory: MetricKind,
    working_set: MetricKind,
    throttled: MetricKind,
}

const POD_KINDS: Kinds = Kinds {
    cpu: MetricKind::PodCpuUsage,
    memory: MetricKind::PodMemoryUsage,
    working_set: MetricKind::PodMemoryWorkingSet,
    throttled: MetricKind::PodCpuThrottled,
};

const CONTAINER_KINDS: Kinds = Kinds {
    cpu: MetricKind::ContainerCpuUsage,
    memory: MetricKind::ContainerMemoryUsage,
    working_set: MetricKind::ContainerMemoryWorkingSet,
    throttled: MetricKind::ContainerCpuThrottled,
};

/// Previous counters of one level.
#[derive(Default)]
struct Counters {
    cpu: Previous<u64>,
    throttling: Previous<Throttling>,
}

impl Counters {
    fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.cpu.retain(&keep);
        self.throttling.retain(&keep);
    }
}

/// Collects, per pod and per container: CPU usage (cores, from the
/// cumulative counter), memory usage (anon + unevictable, as upstream),
/// memory working set (as cadvisor) and the throttled-period ratio.
pub struct PodResourceCollector {
    layout: CgroupLayout,
    pods: Counters,
    containers: Counters,
    /// Entities already warned about, so a broken cgroup logs once, not every round.
    warned: HashSet<Arc<str>>,
}

impl PodResourceCollector {
    pub fn new(layout: CgroupLayout) -> Self {
        Self {
            layout,
            pods: Counters::default(),
            containers: Counters::default(),
            warned: HashSet::new(),
        }
    }

    fn report_failure(&mut self, what: &str, id: &Arc<str>, err: &CollectError) {
        if err.is_not_found() {
            tracing::debug!(entity = %id, error = %err, "{what} {id} has no cgroup (gone or not started yet); skipped");
        } else if self.warned.insert(id.clone()) {
            tracing::warn!(entity = %id, error = %err, "cannot collect {what} {id}: {err}");
        } else {
            tracing::debug!(entity = %id, error = %err, "cannot collect {what} {id}: {err}");
        }
    }

    fn collect_pod(&mut self, now: SystemTime, pod: &PodMeta, out: &mut Vec<Sample>) {
        let dir = match self.layout.pod_dir(pod.kube_qos, &pod.uid) {
            Ok(dir) => dir,
            Err(err) => return self.report_failure("pod", &pod.uid, &err.into()),
        };
        match read_cgroup_usage(&self.layout, &dir) {
            Ok(usage) => {
                self.warned.remove(&pod.uid);
                let entity = Entity::Pod(pod.uid.clone());
                push_samples(
                    &mut self.pods,
                    &POD_KINDS,
                    entity,
                    &pod.uid,
                    now,
                    &usage,
                    out,
                );
            }
            // Without the pod cgroup its containers' cgroups are gone too.
            Err(err) => return self.report_failure("pod", &pod.uid, &err),
        }
        for container in &pod.containers {
            let Some(id) = &container.id else {
                continue;
            };
            let usage = self
                .layout
                .container_dir(pod.kube_qos, &pod.uid, id)
                .map_err(CollectError::from)
                .and_then(|dir| read_cgroup_usage(&self.layout, &dir));
            match usage {
                Ok(usage) => {
                    self.warned.remove(id);
                    let entity = Entity::Container(id.clone());
                    push_samples(
                        &mut self.containers,
                        &CONTAINER_KINDS,
                        entity,
                        id,
                        now,
                        &usage,
                        out,
                    );
                }
                Err(err) => self.report_failure("container", id, &err),
            }
        }
    }
}

fn push_samples(
    counters: &mut Counters,
    kinds: &Kinds,
    entity: Entity,
    id: &Arc<str>,
    now: SystemTime,
    usage: &CgroupUsage,
    out: &mut Vec<Sample>,
) {
    let key = |kind| SeriesKey::new(kind, entity.clone());
    if let Some((elapsed, previous)) = counters.cpu.replace(id, now, usage.cpu_ns) {
        match cpu_cores_between(previous, usage.cpu_ns, elapsed.as_nanos()) {
            Some(cores) => out.push(Sample::new(key(kinds.cpu), now, cores)),
            None => {
                tracing::debug!(entity = %id, "CPU counter restarted or no time elapsed; rate skipped this round")
            }
        }
    }
    out.push(Sample::new(
        key(kinds.memory),
        now,
        usage.memory.usage() as f64,
    ));
    out.push(Sample::new(
        key(kinds.working_set),
        now,
        usage.memory.working_set(usage.memory_charged) as f64,
    ));
    if let Some(current) = usage.throttling
        && let Some((_, previous)) = counters.throttling.replace(id, now, current)
        && let Some(ratio) = throttled_ratio(&previous, &current)
    {
        out.push(Sample::new(key(kinds.throttled), now, ratio));
    }
}

impl Collector for PodResourceCollector {
    fn name(&self) -> &'static str {
        "pod-resource"
    }

    fn collect(&mut self, now: SystemTime, pods: &PodsSnapshot) -> Vec<Sample> {
        let mut out = Vec::with_capacity(pods.pods.len() * 8);
        for pod in &pods.pods {
            self.collect_pod(now, pod, &mut out);
        }
        // Forget counters and warnings of pods and containers no longer on the node.
        let pod_uids: HashSet<&str> = pods.pods.iter().map(|p| &*p.uid).collect();
        let container_ids: HashSet<&str> = pods
            .pods
            .iter()
            .flat_map(|p| p.containers.iter().filter_map(|c| c.id.as_deref()))
            .collect();
        self.pods.retain(|uid| pod_uids.contains(uid));
        self.containers.retain(|id| container_ids.contains(id));
        self.warned
            .retain(|id| pod_uids.contains(&**id) || container_ids.contains(&**id));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metricsadvisor::ContainerMeta;
    use crate::system::cgroup::{CgroupDriver, QosTier};
    use apis::extension::{PriorityClass, QoSClass};
    use koord_common::testing::TempDir;
    use std::fs;
    use std::time::{Duration, UNIX_EPOCH};

    const UID: &str = "0a1b2c3d-0000-4000-8000-000000000001";
    const CID: &str = "containerd://abc123";

    fn pod(uid: &str, containers: &[&str]) -> PodMeta {
        PodMeta {
            uid: uid.into(),
            namespace: "default".into(),
            name: "demo".into(),
            qos: QoSClass::LS,
            kube_qos: QosTier::Burstable,
            priority: PriorityClass::Prod,
            containers: containers
                .iter()
                .map(|id| ContainerMeta {
                    name: "main".into(),
                    id: Some((*id).into()),
                })
                .collect(),
        }
    }

    struct FakeV1 {
        _tmp: TempDir,
        layout: CgroupLayout,
    }

    impl FakeV1 {
        fn new() -> Self {
            let tmp = TempDir::new("pod-collector").unwrap();
            let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, tmp.path());
            Self { _tmp: tmp, layout }
        }

        fn write(&self, dir: &Path, resource: CgroupResource, content: &str) {
            let path = self.layout.file_path(dir, resource).unwrap();
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }

        /// Writes every file the collector reads for one cgroup.
        fn set(
            &self,
            dir: &Path,
            cpu_ns: u64,
            periods: u64,
            throttled: u64,
            anon: u64,
            inactive_file: u64,
        ) {
            self.write(dir, CgroupResource::CpuacctUsage, &format!("{cpu_ns}\n"));
            self.write(
                dir,
                CgroupResource::CpuStat,
                &format!("nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time 0\n"),
            );
            self.write(
                dir,
                CgroupResource::MemoryStat,
                &format!(
                    "total_inactive_anon 0\ntotal_active_anon {anon}\ntotal_unevictable 0\n\
                     total_inactive_file {inactive_file}\ntotal_active_file 0\n"
                ),
            );
            self.write(
                dir,
                CgroupResource::MemoryUsage,
                &format!("{}\n", anon + inactive_file + 4096),
            );
        }
    }

    fn find(samples: &[Sample], kind: MetricKind) -> Option<f64> {
        samples.iter().find(|s| s.key.kind == kind).map(|s| s.value)
    }

    #[test]
    fn pod_and_container_usage_over_two_rounds() {
        let fake = FakeV1::new();
        let pod_dir = fake.layout.pod_dir(QosTier::Burstable, UID).unwrap();
        let container_dir = fake
            .layout
            .container_dir(QosTier::Burstable, UID, CID)
            .unwrap();
        fake.set(&pod_dir, 1_000_000_000, 100, 0, 8192, 4096);
        fake.set(&container_dir, 900_000_000, 100, 0, 4096, 4096);

        let snapshot = PodsSnapshot::new(vec![pod(UID, &[CID])]);
        let mut collector = PodResourceCollector::new(fake.layout.clone());
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        let first = collector.collect(t0, &snapshot);
        // No rates yet; memory right away.
        assert_eq!(find(&first, MetricKind::PodCpuUsage), None);
        assert_eq!(find(&first, MetricKind::PodCpuThrottled), None);
        assert_eq!(find(&first, MetricKind::PodMemoryUsage), Some(8192.0));
        assert_eq!(
            find(&first, MetricKind::PodMemoryWorkingSet),
            Some(8192.0 + 4096.0)
        );
        assert_eq!(find(&first, MetricKind::ContainerMemoryUsage), Some(4096.0));

        // Two seconds later: pod used 3 s of CPU (1.5 cores), container 1 s (0.5).
        fake.set(&pod_dir, 4_000_000_000, 120, 5, 8192, 4096);
        fake.set(&container_dir, 1_900_000_000, 110, 11, 4096, 4096);
        let second = collector.collect(t0 + Duration::from_secs(2), &snapshot);
        assert_eq!(find(&second, MetricKind::PodCpuUsage), Some(1.5));
        assert_eq!(find(&second, MetricKind::ContainerCpuUsage), Some(0.5));
        assert_eq!(find(&second, MetricKind::PodCpuThrottled), Some(0.25));
        assert_eq!(find(&second, MetricKind::ContainerCpuThrottled), Some(1.0));
        let container_keys: Vec<&SeriesKey> = second
            .iter()
            .filter(|s| s.key.kind == MetricKind::ContainerCpuUsage)
            .map(|s| &s.key)
            .collect();
        assert_eq!(
            container_keys,
            vec![&SeriesKey::container(MetricKind::ContainerCpuUsage, CID)]
        );
    }

    #[test]
    fn counter_reset_skips_one_rate_then_recovers() {
        let fake = FakeV1::new();
        let dir = fake.layout.pod_dir(QosTier::Burstable, UID).unwrap();
        let snapshot = PodsSnapshot::new(vec![pod(UID, &[])]);
        let mut collector = PodResourceCollector::new(fake.layout.clone());
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        fake.set(&dir, 5_000_000_000, 10, 0, 0, 0);
        collector.collect(t0, &snapshot);
        // The cgroup was recreated: counters restart.
        fake.set(&dir, 100_000_000, 1, 0, 0, 0);
        let reset = collector.collect(t0 + Duration::from_secs(1), &snapshot);
        assert_eq!(find(&reset, MetricKind::PodCpuUsage), None);
        assert_eq!(find(&reset, MetricKind::PodCpuThrottled), None);
        assert_eq!(find(&reset, MetricKind::PodMemoryUsage), Some(0.0));
        fake.set(&dir, 600_000_000, 11, 2, 0, 0);
        let after = collector.collect(t0 + Duration::from_secs(2), &snapshot);
        assert_eq!(find(&after, MetricKind::PodCpuUsage), Some(0.5));
        assert_eq!(find(&after, MetricKind::PodCpuThrottled), Some(0.2));
    }

    #[test]
    fn vanished_cgroups_are_skipped_and_state_is_pruned() {
        let fake = FakeV1::new();
        let gone_uid = "0a1b2c3d-0000-4000-8000-0000000000ff";
        let dir = fake.layout.pod_dir(QosTier::Burstable, UID).unwrap();
        fake.set(&dir, 1, 1, 0, 1, 0);
        let snapshot = PodsSnapshot::new(vec![
            pod(UID, &["containerd://notstarted"]),
            pod(gone_uid, &[CID]),
        ]);
        let mut collector = PodResourceCollector::new(fake.layout.clone());
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        let samples = collector.collect(t0, &snapshot);
        // Only the existing pod produced samples; missing cgroups are not warnings.
        assert!(samples.iter().all(|s| s.key.entity == Entity::pod(UID)));
        assert!(collector.warned.is_empty());
        assert_eq!(collector.pods.cpu.len(), 1);

        // The pod leaves the node: its counters are forgotten.
        collector.collect(t0 + Duration::from_secs(1), &PodsSnapshot::default());
        assert!(collector.pods.cpu.is_empty());
    }

    #[test]
    fn malformed_files_warn_once_and_other_pods_continue() {
        let fake = FakeV1::new();
        let bad_uid = "0a1b2c3d-0000-4000-8000-0000000000bb";
        let good = fake.layout.pod_dir(QosTier::Burstable, UID).unwrap();
        let bad = fake.layout.pod_dir(QosTier::Burstable, bad_uid).unwrap();
        fake.set(&good, 1, 1, 0, 1, 0);
        fake.set(&bad, 1, 1, 0, 1, 0);
        fake.write(&bad, CgroupResource::MemoryStat, "total_active_anon lots\n");
        let snapshot = PodsSnapshot::new(vec![pod(bad_uid, &[]), pod(UID, &["docker//bad id"])]);
        let mut collector = PodResourceCollector::new(fake.layout.clone());
        let samples = collector.collect(UNIX_EPOCH, &snapshot);
        assert!(samples.iter().any(|s| s.key.entity == Entity::pod(UID)));
        assert!(samples.iter().all(|s| s.key.entity != Entity::pod(bad_uid)));
        assert!(collector.warned.contains(bad_uid));
        assert!(collector.warned.contains("docker//bad id"));
    }

    #[test]
    fn cgroup_v2_reads_usage_and_throttling_from_cpu_stat() {
        let tmp = TempDir::new("pod-collector-v2").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V2, CgroupDriver::Systemd, tmp.path());
        let dir = layout.pod_dir(QosTier::Burstable, UID).unwrap();
        let full = tmp.path().join(&dir);
        fs::create_dir_all(&full).unwrap();
        let write_round = |usage_usec: u64, periods: u64, throttled: u64| {
            fs::write(
                full.join("cpu.stat"),
                format!("usage_usec {usage_usec}\nuser_usec 0\nsystem_usec 0\nnr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec 0\n"),
            )
            .unwrap();
            fs::write(
                full.join("memory.stat"),
                "anon 100\nfile 50\ninactive_anon 10\nactive_anon 90\ninactive_file 30\nactive_file 20\nunevictable 0\n",
            )
            .unwrap();
            fs::write(full.join("memory.current"), "200\n").unwrap();
        };
        let snapshot = PodsSnapshot::new(vec![pod(UID, &[])]);
        let mut collector = PodResourceCollector::new(layout);
        let t0 = UNIX_EPOCH + Duration::from_secs(5);
        write_round(1_000_000, 10, 0);
        collector.collect(t0, &snapshot);
        write_round(1_250_000, 20, 5);
        let samples = collector.collect(t0 + Duration::from_secs(1), &snapshot);
        assert_eq!(find(&samples, MetricKind::PodCpuUsage), Some(0.25));
        assert_eq!(find(&samples, MetricKind::PodCpuThrottled), Some(0.5));
        assert_eq!(find(&samples, MetricKind::PodMemoryUsage), Some(100.0));
        assert_eq!(find(&samples, MetricKind::PodMemoryWorkingSet), Some(170.0));
    }
}

//! Series computed from one round's samples rather than read from a file.

use std::collections::HashSet;
use std::time::SystemTime;

use apis::extension::QoSClass;

use super::PodsSnapshot;
use crate::metriccache::{BeLabel, Entity, MetricKind, Sample, SeriesKey, SeriesLabel};

/// From the samples of one round:
///
/// - system usage: node usage minus the sums over pods and over host
///   applications, floored at 0, for
///   CPU (when the round has a node CPU sample) and memory (likewise), as
///   upstream's system resource collector. Pods still warming up (no CPU
///   rate yet) are not in the CPU sum, as upstream.
/// - BE usage: CPU and memory summed over pods whose QoS class is BE
///   (0 when there are none), as the BE suppression strategies read it.
pub fn derive_node_aggregates(
    now: SystemTime,
    pods: &PodsSnapshot,
    round: &[Sample],
) -> Vec<Sample> {
    let be_pods: HashSet<&str> = pods
        .pods
        .iter()
        .filter(|pod| pod.qos == QoSClass::BE)
        .map(|pod| &*pod.uid)
        .collect();

    let mut node_cpu = None;
    let mut node_memory = None;
    let (mut pods_cpu, mut pods_memory) = (0.0, 0.0);
    let (mut be_cpu, mut be_memory) = (0.0, 0.0);
    let mut any_pod_cpu = false;
    for sample in round {
        let is_be = match &sample.key.entity {
            Entity::Pod(uid) => be_pods.contains(&**uid),
            _ => false,
        };
        match sample.key.kind {
            MetricKind::NodeCpuUsage => node_cpu = Some(sample.value),
            MetricKind::NodeMemoryUsage => node_memory = Some(sample.value),
            MetricKind::PodCpuUsage => {
                any_pod_cpu = true;
                pods_cpu += sample.value;
                if is_be {
                    be_cpu += sample.value;
                }
            }
            MetricKind::PodMemoryUsage => {
                pods_memory += sample.value;
                if is_be {
                    be_memory += sample.value;
                }
            }
            // Host applications are not system usage either (upstream subtracts them too).
            MetricKind::HostAppCpuUsage => pods_cpu += sample.value,
            MetricKind::HostAppMemoryUsage => pods_memory += sample.value,
            _ => {}
        }
    }

    let mut derived = Vec::with_capacity(4);
    if let Some(node) = node_cpu {
        derived.push(Sample::new(
            SeriesKey::node(MetricKind::SysCpuUsage),
            now,
            (node - pods_cpu).max(0.0),
        ));
    }
    if let Some(node) = node_memory {
        derived.push(Sample::new(
            SeriesKey::node(MetricKind::SysMemoryUsage),
            now,
            (node - pods_memory).max(0.0),
        ));
    }
    // BE CPU is a rate: only meaningful once pod rates exist (or no pods at all).
    if any_pod_cpu || (node_cpu.is_some() && pods.pods.is_empty()) {
        derived.push(Sample::new(
            SeriesKey::node(MetricKind::NodeBe).with_label(SeriesLabel::Be(BeLabel::CpuUsage)),
            now,
            be_cpu,
        ));
    }
    derived.push(Sample::new(
        SeriesKey::node(MetricKind::NodeBe).with_label(SeriesLabel::Be(BeLabel::MemoryUsage)),
        now,
        be_memory,
    ));
    derived
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metricsadvisor::PodMeta;
    use crate::system::cgroup::QosTier;
    use apis::extension::PriorityClass;
    use std::time::UNIX_EPOCH;

    fn pod(uid: &str, qos: QoSClass) -> PodMeta {
        PodMeta {
            uid: uid.into(),
            namespace: "ns".into(),
            name: uid.into(),
            qos,
            kube_qos: QosTier::Burstable,
            priority: PriorityClass::None,
            containers: vec![],
        }
    }

    fn value(samples: &[Sample], key: &SeriesKey) -> Option<f64> {
        samples.iter().find(|s| &s.key == key).map(|s| s.value)
    }

    fn be(label: BeLabel) -> SeriesKey {
        SeriesKey::node(MetricKind::NodeBe).with_label(SeriesLabel::Be(label))
    }

    #[test]
    fn system_usage_is_node_minus_pods_and_be_sums_be_pods() {
        let pods = PodsSnapshot::new(vec![
            pod("ls", QoSClass::LS),
            pod("be1", QoSClass::BE),
            pod("be2", QoSClass::BE),
        ]);
        let round = vec![
            Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), UNIX_EPOCH, 3.0),
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                UNIX_EPOCH,
                1000.0,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, "ls"),
                UNIX_EPOCH,
                1.0,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, "be1"),
                UNIX_EPOCH,
                0.5,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, "be2"),
                UNIX_EPOCH,
                0.25,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, "ls"),
                UNIX_EPOCH,
                300.0,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, "be1"),
                UNIX_EPOCH,
                200.0,
            ),
            // Container samples must not be double counted.
            Sample::new(
                SeriesKey::container(MetricKind::ContainerCpuUsage, "c"),
                UNIX_EPOCH,
                9.0,
            ),
        ];
        let derived = derive_node_aggregates(UNIX_EPOCH, &pods, &round);
        assert_eq!(
            value(&derived, &SeriesKey::node(MetricKind::SysCpuUsage)),
            Some(1.25)
        );
        assert_eq!(
            value(&derived, &SeriesKey::node(MetricKind::SysMemoryUsage)),
            Some(500.0)
        );
        assert_eq!(value(&derived, &be(BeLabel::CpuUsage)), Some(0.75));
        assert_eq!(value(&derived, &be(BeLabel::MemoryUsage)), Some(200.0));
    }

    #[test]
    fn host_applications_are_not_system_usage() {
        let pods = PodsSnapshot::new(vec![pod("a", QoSClass::LS)]);
        let app = |kind| SeriesKey::new(kind, Entity::host_app("nginx"));
        let round = vec![
            Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), UNIX_EPOCH, 3.0),
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                UNIX_EPOCH,
                1000.0,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, "a"),
                UNIX_EPOCH,
                1.0,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, "a"),
                UNIX_EPOCH,
                300.0,
            ),
            Sample::new(app(MetricKind::HostAppCpuUsage), UNIX_EPOCH, 0.5),
            Sample::new(app(MetricKind::HostAppMemoryUsage), UNIX_EPOCH, 200.0),
            // The page-cache variant is not what system memory subtracts.
            Sample::new(
                app(MetricKind::HostAppMemoryUsageWithPageCache),
                UNIX_EPOCH,
                900.0,
            ),
        ];
        let derived = derive_node_aggregates(UNIX_EPOCH, &pods, &round);
        assert_eq!(
            value(&derived, &SeriesKey::node(MetricKind::SysCpuUsage)),
            Some(1.5)
        );
        assert_eq!(
            value(&derived, &SeriesKey::node(MetricKind::SysMemoryUsage)),
            Some(500.0)
        );
    }

    #[test]
    fn system_usage_is_floored_at_zero() {
        let pods = PodsSnapshot::new(vec![pod("a", QoSClass::LS)]);
        let round = vec![
            Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), UNIX_EPOCH, 1.0),
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                UNIX_EPOCH,
                100.0,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, "a"),
                UNIX_EPOCH,
                1.2,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, "a"),
                UNIX_EPOCH,
                150.0,
            ),
        ];
        let derived = derive_node_aggregates(UNIX_EPOCH, &pods, &round);
        assert_eq!(
            value(&derived, &SeriesKey::node(MetricKind::SysCpuUsage)),
            Some(0.0)
        );
        assert_eq!(
            value(&derived, &SeriesKey::node(MetricKind::SysMemoryUsage)),
            Some(0.0)
        );
        // No BE pods: BE usage is reported as zero.
        assert_eq!(value(&derived, &be(BeLabel::CpuUsage)), Some(0.0));
    }

    #[test]
    fn first_round_without_rates_has_no_cpu_aggregates() {
        let pods = PodsSnapshot::new(vec![pod("a", QoSClass::BE)]);
        let round = vec![
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                UNIX_EPOCH,
                100.0,
            ),
            Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, "a"),
                UNIX_EPOCH,
                40.0,
            ),
        ];
        let derived = derive_node_aggregates(UNIX_EPOCH, &pods, &round);
        assert_eq!(
            value(&derived, &SeriesKey::node(MetricKind::SysCpuUsage)),
            None
        );
        assert_eq!(value(&derived, &be(BeLabel::CpuUsage)), None);
        assert_eq!(
            value(&derived, &SeriesKey::node(MetricKind::SysMemoryUsage)),
            Some(60.0)
        );
        assert_eq!(value(&derived, &be(BeLabel::MemoryUsage)), Some(40.0));
    }
}

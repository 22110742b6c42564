//! Kubernetes Pod → the metrics advisor's pod description (pure).

use std::sync::Arc;

use apis::extension::{kube_qos_class_of_pod, priority_class_of_pod, qos_class_of_pod};
use k8s_openapi::api::core::v1::Pod;
use koord_common::Shutdown;
use tokio::sync::watch;

use super::StatesInformer;
use crate::metricsadvisor::{ContainerMeta, PodMeta, PodsSnapshot};
use crate::system::cgroup::QosTier;

/// A pod the collectors cannot place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodMetaError {
    #[error("pod {namespace}/{name} has no metadata.uid")]
    MissingUid { namespace: String, name: String },
    #[error(
        "pod {namespace}/{name} has status.qosClass {class:?}, which is not a Kubernetes QoS class"
    )]
    UnknownKubeQos {
        namespace: String,
        name: String,
        class: String,
    },
}

/// Describes one pod for the collectors: identity, Koordinator QoS and
/// priority classes, the Kubernetes QoS tier (which picks the cgroup
/// directory), and its containers with the runtime IDs from
/// `status.containerStatuses[].containerID` (`None` until started).
pub fn pod_meta_of(pod: &Pod) -> Result<PodMeta, PodMetaError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => Arc::<str>::from(uid),
        _ => return Err(PodMetaError::MissingUid { namespace, name }),
    };
    let kube_qos = kube_qos_class_of_pod(pod)
        .and_then(|class| QosTier::from_kubernetes_qos_class(class.as_str()).ok())
        .ok_or_else(|| PodMetaError::UnknownKubeQos {
            namespace: namespace.clone(),
            name: name.clone(),
            class: pod
                .status
                .as_ref()
                .and_then(|status| status.qos_class.clone())
                .unwrap_or_default(),
        })?;

    let statuses = pod
        .status
        .as_ref()
        .and_then(|status| status.container_statuses.as_deref())
        .unwrap_or_default();
    let id_of = |container: &str| {
        statuses
            .iter()
            .find(|status| status.name == container)
            .and_then(|status| status.container_id.as_deref())
            .filter(|id| !id.is_empty())
            .map(Arc::<str>::from)
    };
    let spec_names: Vec<&str> = pod
        .spec
        .as_ref()
        .map(|spec| spec.containers.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    // Containers named in the spec, then any the status lists beyond them
    // (a pods file may carry only the status).
    let mut containers: Vec<ContainerMeta> = spec_names
        .iter()
        .map(|container| ContainerMeta {
            name: container.to_string(),
            id: id_of(container),
        })
        .collect();
    for status in statuses {
        if !spec_names.contains(&status.name.as_str()) {
            containers.push(ContainerMeta {
                name: status.name.clone(),
                id: id_of(&status.name),
            });
        }
    }

    Ok(PodMeta {
        uid,
        namespace,
        name,
        qos: qos_class_of_pod(pod),
        kube_qos,
        priority: priority_class_of_pod(pod),
        containers,
    })
}

/// The collectors' snapshot of `pods`; pods that cannot be described are
/// returned beside it so the caller can log them.
pub fn advisor_snapshot_of(pods: &[Pod]) -> (PodsSnapshot, Vec<PodMetaError>) {
    let mut metas = Vec::with_capacity(pods.len());
    let mut errors = Vec::new();
    for pod in pods {
        match pod_meta_of(pod) {
            Ok(meta) => metas.push(meta),
            Err(err) => errors.push(err),
        }
    }
    (PodsSnapshot::new(metas), errors)
}

fn advisor_snapshot_logged(pods: Option<&super::PodsSnapshot>) -> PodsSnapshot {
    let pods = pods
        .map(|snapshot| snapshot.pods.as_slice())
        .unwrap_or_default();
    let (snapshot, errors) = advisor_snapshot_of(pods);
    if let Some(first) = errors.first() {
        tracing::warn!(
            skipped = errors.len(),
            first = %first,
            "some pods cannot be measured"
        );
    }
    snapshot
}

/// The NodeSLO's host applications, in the snapshot beside the pods.
fn host_applications_of(states: &StatesInformer) -> Vec<apis::slo::v1alpha1::HostApplicationSpec> {
    states
        .node_slo()
        .map(|slo| slo.spec.host_applications.clone())
        .unwrap_or_default()
}

/// The metrics advisor's view of the pods and host applications, kept in
/// step with `states` until shutdown.
pub fn spawn_advisor_pods_feed(
    states: &StatesInformer,
    shutdown: Shutdown,
) -> watch::Receiver<Arc<PodsSnapshot>> {
    let mut updates = states.subscribe_pods();
    let mut slo_updates = states.subscribe_node_slo();
    slo_updates.mark_unchanged();
    let initial = advisor_snapshot_logged(updates.borrow_and_update().as_deref())
        .with_host_applications(host_applications_of(states));
    let (sender, receiver) = watch::channel(Arc::new(initial));
    let states = states.clone();
    tokio::spawn(async move {
        let mut slo_open = true;
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                changed = updates.changed() => if changed.is_err() { return },
                changed = slo_updates.changed(), if slo_open => {
                    // A closed NodeSLO channel only stops host application updates.
                    slo_open = changed.is_ok();
                    slo_updates.mark_unchanged();
                }
            }
            let current = updates.borrow_and_update().clone();
            let snapshot = advisor_snapshot_logged(current.as_deref())
                .with_host_applications(host_applications_of(&states));
            sender.send_replace(Arc::new(snapshot));
        }
    });
    receiver
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::extension::{PriorityClass, QoSClass};

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    struct Case {
        name: &'static str,
        pod: serde_json::Value,
        qos: QoSClass,
        priority: PriorityClass,
        tier: QosTier,
        containers: &'static [(&'static str, Option<&'static str>)],
    }

    #[test]
    fn pods_map_to_advisor_metas() {
        let cases = [
            Case {
                name: "status class, label QoS, containers by name",
                pod: serde_json::json!({
                    "metadata": {"name": "web", "namespace": "prod", "uid": "u1",
                                 "labels": {"koordinator.sh/qosClass": "LS"}},
                    "spec": {"priority": 9100, "containers": [{"name": "app"}, {"name": "sidecar"}]},
                    "status": {"qosClass": "Burstable", "containerStatuses": [
                        {"name": "sidecar", "containerID": "containerd://bbb", "image": "", "imageID": "", "ready": true, "restartCount": 0},
                        {"name": "app", "containerID": "containerd://aaa", "image": "", "imageID": "", "ready": true, "restartCount": 0}
                    ]}
                }),
                qos: QoSClass::LS,
                priority: PriorityClass::Prod,
                tier: QosTier::Burstable,
                containers: &[
                    ("app", Some("containerd://aaa")),
                    ("sidecar", Some("containerd://bbb")),
                ],
            },
            Case {
                name: "guaranteed computed from resources, not started yet",
                pod: serde_json::json!({
                    "metadata": {"name": "db", "namespace": "prod", "uid": "u2"},
                    "spec": {"containers": [{"name": "db", "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "1Gi"}}}]}
                }),
                qos: QoSClass::LSR,
                priority: PriorityClass::Prod,
                tier: QosTier::Guaranteed,
                containers: &[("db", None)],
            },
            Case {
                name: "best effort batch pod, empty container id, status-only container",
                pod: serde_json::json!({
                    "metadata": {"name": "job", "namespace": "batch", "uid": "u3",
                                 "labels": {"koordinator.sh/priority-class": "koord-batch"}},
                    "status": {"qosClass": "BestEffort", "containerStatuses": [
                        {"name": "worker", "containerID": "", "image": "", "imageID": "", "ready": false, "restartCount": 0},
                        {"name": "extra", "containerID": "docker://ccc", "image": "", "imageID": "", "ready": true, "restartCount": 0}
                    ]}
                }),
                qos: QoSClass::BE,
                priority: PriorityClass::Batch,
                tier: QosTier::BestEffort,
                containers: &[("worker", None), ("extra", Some("docker://ccc"))],
            },
        ];
        for case in cases {
            let meta = pod_meta_of(&pod(case.pod)).unwrap();
            assert_eq!(meta.qos, case.qos, "{}", case.name);
            assert_eq!(meta.priority, case.priority, "{}", case.name);
            assert_eq!(meta.kube_qos, case.tier, "{}", case.name);
            let containers: Vec<(&str, Option<&str>)> = meta
                .containers
                .iter()
                .map(|c| (c.name.as_str(), c.id.as_deref()))
                .collect();
            assert_eq!(containers, case.containers, "{}", case.name);
        }
    }

    #[tokio::test]
    async fn the_feed_follows_the_states_pods() {
        use crate::statesinformer::{PodsOrigin, RequiredSyncs};
        let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
        let shutdown = Shutdown::new();
        let mut feed = spawn_advisor_pods_feed(&states, shutdown.clone());
        assert!(feed.borrow().pods.is_empty());
        states.set_pods(crate::statesinformer::PodsSnapshot {
            pods: vec![pod(
                serde_json::json!({"metadata": {"name": "a", "namespace": "n", "uid": "u-a"}}),
            )],
            origin: PodsOrigin::File,
            synced_at: std::time::SystemTime::UNIX_EPOCH,
        });
        let snapshot = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            feed.wait_for(|snapshot| !snapshot.pods.is_empty()),
        )
        .await
        .unwrap()
        .unwrap()
        .clone();
        assert_eq!(&*snapshot.pods[0].uid, "u-a");
        assert!(snapshot.host_applications.is_empty());

        // A NodeSLO with host applications reaches the collectors too.
        let slo: apis::slo::v1alpha1::NodeSLO = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-a"},
            "spec": {"hostApplications": [{"name": "nginx", "qos": "LS"}]}
        }))
        .unwrap();
        states.set_node_slo(Some(slo));
        let snapshot = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            feed.wait_for(|snapshot| !snapshot.host_applications.is_empty()),
        )
        .await
        .unwrap()
        .unwrap()
        .clone();
        assert_eq!(snapshot.host_applications[0].name, "nginx");
        assert_eq!(&*snapshot.pods[0].uid, "u-a", "pods are kept");
        shutdown.trigger(koord_common::ShutdownReason::Requested("test".into()));
    }

    #[test]
    fn unusable_pods_are_reported_not_dropped_silently() {
        let pods = vec![
            pod(serde_json::json!({"metadata": {"name": "ok", "namespace": "n", "uid": "u"}})),
            pod(serde_json::json!({"metadata": {"name": "no-uid", "namespace": "n"}})),
            pod(
                serde_json::json!({"metadata": {"name": "odd", "namespace": "n", "uid": "v"},
                                   "status": {"qosClass": "Platinum"}}),
            ),
        ];
        let (snapshot, errors) = advisor_snapshot_of(&pods);
        assert_eq!(snapshot.pods.len(), 1);
        assert_eq!(&*snapshot.pods[0].uid, "u");
        assert_eq!(snapshot.pods[0].kube_qos, QosTier::BestEffort);
        assert_eq!(
            errors,
            [
                PodMetaError::MissingUid {
                    namespace: "n".into(),
                    name: "no-uid".into()
                },
                PodMetaError::UnknownKubeQos {
                    namespace: "n".into(),
                    name: "odd".into(),
                    class: "Platinum".into()
                }
            ]
        );
    }
}

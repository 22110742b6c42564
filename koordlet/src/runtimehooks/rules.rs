//! Node-level inputs of the hook decisions ("rules"), rebuilt from the
//! states informer whenever the Node, NodeSLO or pod list changes (pure).

use std::collections::BTreeMap;

use apis::extension::{
    KUBELET_CPU_MANAGER_POLICY_STATIC, QoSClass, get_cpu_normalization_ratio,
    get_kubelet_cpu_manager_policy, get_system_qos_resource,
};
use apis::slo::v1alpha1::{
    CPUQOSPolicy, CPUSuppressPolicy, HostApplicationSpec, NodeSLO, ResourceQOS,
};
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::statesinformer::cpumanager::{CpuManagerCheckpoint, kubelet_cpu_state};
use crate::statesinformer::nodetopo::pools::{cpu_share_pools, node_reservation};
use koord_common::units::CpuSet;
use koord_common::units::{CpuInfo, CpuTopology};

/// Upstream's default CFS period (µs).
pub const DEFAULT_CFS_PERIOD_US: i64 = 100_000;

/// CPU QoS of a class from the NodeSLO (`resourceQOSStrategy.<class>.cpuQOS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuQosRule {
    pub enable: bool,
    /// Group identity (bvt) value; used under the `groupIdentity` policy.
    pub group_identity: i64,
    /// `cpu.idle` of the class's QoS tier (1 = SCHED_IDLE); used under the
    /// `coreSched` policy.
    pub sched_idle: i64,
    /// The class gets its own core-sched group (suffix `-expeller`) so its
    /// pods never share an SMT core with idle pods of the same group id;
    /// used under the `coreSched` policy.
    pub core_expeller: bool,
}

/// Upstream's default `coreExpeller` of a class (`DefaultCPUQOS`): LSR and
/// LS expel, BE and SYSTEM do not.
pub fn default_core_expeller(class: QoSClass) -> bool {
    matches!(class, QoSClass::LSR | QoSClass::LS)
}

/// Which mechanism enforces CPU QoS (`resourceQOSStrategy.policies.cpuPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuQosPolicy {
    /// `groupIdentity`, also when unset or empty (upstream's default).
    GroupIdentity,
    /// `coreSched`: core scheduling cookies plus cgroup idle.
    CoreSched,
    /// A value this version does not know: neither mechanism applies.
    Unknown,
}

/// LLC/MB share of a class from the NodeSLO.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResctrlRule {
    pub enable: bool,
    pub cat_start_percent: i64,
    pub cat_end_percent: i64,
    pub mba_percent: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeRules {
    pub cfs_period_us: i64,
    /// False when the NodeSLO suppresses BE CPU with the `cfsQuota` policy:
    /// BE pods then run without their own quota (the BE tier's quota must
    /// stay no smaller than its children's).
    pub be_cfs_quota_enabled: bool,
    /// CPUs of the LS share pool: online CPUs minus those bound to running
    /// LSE/LSR pods, node-reserved and exclusive SYSTEM CPUs and the CPUs
    /// the kubelet's static policy pinned (the pool the NodeResourceTopology
    /// reports, `nodetopo::cpu_share_pools`). `None` until the pods are known.
    pub ls_share_pool: Option<CpuSet>,
    /// The kubelet runs the static CPU manager policy: unlabelled pods keep
    /// the kubelet's cpuset. From its `cpu_manager_state` checkpoint (as the
    /// NodeResourceTopology's `kubelet.koordinator.sh/cpu-manager-policy`);
    /// without one, from that annotation on the Node.
    pub kubelet_static_cpu_policy: bool,
    /// CPUs reserved for SYSTEM pods (node annotation).
    pub system_qos_cpus: Option<CpuSet>,
    /// Node CPU normalization ratio (annotation), when enabled and valid.
    pub cpu_normalization_ratio: Option<f64>,
    pub cpu_qos: BTreeMap<QoSClass, CpuQosRule>,
    /// The CPU QoS policy of the NodeSLO; `None` until a NodeSLO is known
    /// (the hooks of CPU QoS then decide nothing, as upstream's rules are
    /// not initialized before the first NodeSLO).
    pub cpu_qos_policy: Option<CpuQosPolicy>,
    pub resctrl: BTreeMap<QoSClass, ResctrlRule>,
    /// The resctrl root's CBM mask and cache ids (read at start when
    /// resctrl is mounted).
    pub resctrl_info: Option<super::resctrlnode::ResctrlNodeInfo>,
    /// The node's online CPUs (capabilities), when known: a scheduler
    /// cpuset naming others is refused.
    pub online_cpus: Option<CpuSet>,
    /// The NodeSLO's `spec.hostApplications`, as given (the reconciler
    /// validates their cgroup paths against the layout).
    pub host_applications: Vec<HostApplicationSpec>,
}

impl Default for NodeRules {
    fn default() -> Self {
        Self {
            cfs_period_us: DEFAULT_CFS_PERIOD_US,
            be_cfs_quota_enabled: true,
            ls_share_pool: None,
            kubelet_static_cpu_policy: false,
            system_qos_cpus: None,
            cpu_normalization_ratio: None,
            cpu_qos: BTreeMap::new(),
            cpu_qos_policy: None,
            resctrl: BTreeMap::new(),
            resctrl_info: None,
            online_cpus: None,
            host_applications: Vec::new(),
        }
    }
}

/// Online CPUs as if each were its own core on socket 0.
fn flat_topology(online: &CpuSet) -> CpuTopology {
    CpuTopology {
        cpus: online
            .iter()
            .map(|cpu| CpuInfo {
                cpu,
                core: cpu,
                socket: 0,
                node: 0,
            })
            .collect(),
    }
}

impl NodeRules {
    /// Rules from what the states informer holds. `online_cpus` is the
    /// node's CPU list (capabilities), `kubelet_checkpoint` the kubelet's
    /// `cpu_manager_state` (`None`: no kubelet information); malformed
    /// annotations are skipped and returned as messages for logging.
    pub fn build(
        node: Option<&Node>,
        node_slo: Option<&NodeSLO>,
        pods: Option<&[Pod]>,
        online_cpus: Option<&CpuSet>,
        kubelet_checkpoint: Option<&CpuManagerCheckpoint>,
    ) -> (Self, Vec<String>) {
        let mut problems = Vec::new();
        let mut rules = NodeRules {
            online_cpus: online_cpus.cloned(),
            ..NodeRules::default()
        };
        let empty = BTreeMap::new();
        let node_annotations = node
            .and_then(|n| n.metadata.annotations.as_ref())
            .unwrap_or(&empty);

        let mut system_exclusive = CpuSet::new();
        match get_system_qos_resource(node_annotations) {
            Ok(Some(system)) if !system.cpuset.is_empty() => {
                match system.cpuset.parse::<CpuSet>() {
                    Ok(cpus) => {
                        if system.is_cpuset_exclusive() {
                            system_exclusive = cpus.clone();
                        }
                        rules.system_qos_cpus = Some(cpus);
                    }
                    Err(error) => {
                        problems.push(format!("node system-qos-resource cpuset: {error}"))
                    }
                }
            }
            Ok(_) => {}
            Err(error) => problems.push(error.to_string()),
        }

        // The checkpoint is what the kubelet does; the Node annotation is
        // only a statement for nodes whose checkpoint koordlet cannot see.
        let (kubelet, kubelet_problems) =
            kubelet_cpu_state(kubelet_checkpoint, pods.unwrap_or_default());
        problems.extend(kubelet_problems);
        if kubelet_checkpoint.is_some() {
            rules.kubelet_static_cpu_policy = kubelet.is_static();
        } else {
            match get_kubelet_cpu_manager_policy(node_annotations) {
                Ok(Some(policy)) => {
                    rules.kubelet_static_cpu_policy =
                        policy.policy == KUBELET_CPU_MANAGER_POLICY_STATIC
                }
                Ok(None) => {}
                Err(error) => problems.push(error.to_string()),
            }
        }

        match get_cpu_normalization_ratio(node_annotations) {
            Ok(Some(ratio)) if ratio.is_finite() && ratio > 0.0 => {
                rules.cpu_normalization_ratio = Some(ratio)
            }
            Ok(Some(ratio)) => {
                problems.push(format!("cpu normalization ratio {ratio} is not positive"))
            }
            Ok(None) => {}
            Err(error) => problems.push(error.to_string()),
        }

        if let (Some(pods), Some(online)) = (pods, online_cpus) {
            // The same computation as the NodeResourceTopology report. The
            // hook has no core layout: a reservation given as a CPU amount
            // is resolved over the online CPUs in id order.
            let flat = flat_topology(online);
            let (_, reserved, problem) = node_reservation(node_annotations, &flat);
            problems.extend(problem);
            let withheld = reserved.union(&system_exclusive).union(&kubelet.pinned);
            let (pools, pool_problems) = cpu_share_pools(online, pods, &withheld);
            problems.extend(pool_problems);
            // An empty pool would starve LS pods; keep all online CPUs instead.
            rules.ls_share_pool = Some(if pools.ls.is_empty() {
                online.clone()
            } else {
                pools.ls
            });
        }

        if let Some(threshold) =
            node_slo.and_then(|slo| slo.spec.resource_used_threshold_with_be.as_ref())
        {
            let suppress_by_quota = threshold.enable.unwrap_or(false)
                && threshold.cpu_suppress_policy == Some(CPUSuppressPolicy::CfsQuota);
            rules.be_cfs_quota_enabled = !suppress_by_quota;
        }

        if let Some(slo) = node_slo {
            rules
                .host_applications
                .clone_from(&slo.spec.host_applications);
        }

        if node_slo.is_some() {
            let policy = node_slo
                .and_then(|slo| slo.spec.resource_qos_strategy.as_ref())
                .and_then(|strategy| strategy.policies.as_ref())
                .and_then(|policies| policies.cpu_policy.as_ref());
            rules.cpu_qos_policy = Some(match policy {
                None => CpuQosPolicy::GroupIdentity,
                Some(CPUQOSPolicy::GroupIdentity) => CpuQosPolicy::GroupIdentity,
                Some(CPUQOSPolicy::CoreSched) => CpuQosPolicy::CoreSched,
                Some(CPUQOSPolicy::Other(text)) if text.is_empty() => CpuQosPolicy::GroupIdentity,
                Some(CPUQOSPolicy::Other(text)) => {
                    problems.push(format!(
                        "unknown CPU QoS policy {:?}: neither group identity nor core scheduling applies",
                        crate::bounds::cut(text.clone())
                    ));
                    CpuQosPolicy::Unknown
                }
            });
        }

        if let Some(strategy) = node_slo.and_then(|slo| slo.spec.resource_qos_strategy.as_ref()) {
            let classes: [(QoSClass, &Option<ResourceQOS>); 4] = [
                (QoSClass::LSR, &strategy.lsr_class),
                (QoSClass::LS, &strategy.ls_class),
                (QoSClass::BE, &strategy.be_class),
                (QoSClass::System, &strategy.system_class),
            ];
            for (class, qos) in classes {
                let Some(qos) = qos else { continue };
                if let Some(cpu) = &qos.cpu_qos {
                    rules.cpu_qos.insert(
                        class,
                        CpuQosRule {
                            enable: cpu.enable.unwrap_or(false),
                            group_identity: cpu.cpu_qos.group_identity.unwrap_or(0),
                            sched_idle: cpu.cpu_qos.sched_idle.unwrap_or(0),
                            core_expeller: cpu
                                .cpu_qos
                                .core_expeller
                                .unwrap_or_else(|| default_core_expeller(class)),
                        },
                    );
                }
                if let Some(resctrl) = &qos.resctrl_qos {
                    rules.resctrl.insert(
                        class,
                        ResctrlRule {
                            enable: resctrl.enable.unwrap_or(false),
                            cat_start_percent: resctrl
                                .resctrl_qos
                                .cat_range_start_percent
                                .unwrap_or(0),
                            cat_end_percent: resctrl
                                .resctrl_qos
                                .cat_range_end_percent
                                .unwrap_or(100),
                            mba_percent: resctrl.resctrl_qos.mba_percent.unwrap_or(100),
                        },
                    );
                }
            }
        }
        (rules, problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statesinformer::nodetopo;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(qos: &str, cpuset: Option<&str>) -> Pod {
        let mut annotations = BTreeMap::new();
        if let Some(cpuset) = cpuset {
            annotations.insert(
                "scheduling.koordinator.sh/resource-status".to_string(),
                format!(r#"{{"cpuset":"{cpuset}"}}"#),
            );
        }
        Pod {
            metadata: ObjectMeta {
                labels: Some([("koordinator.sh/qosClass".to_string(), qos.to_string())].into()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn node(annotations: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn share_pool_excludes_bound_and_exclusive_system_cpus() {
        let online: CpuSet = "0-7".parse().unwrap();
        let pods = [
            pod("LSR", Some("0-1")),
            pod("LSE", Some("2")),
            pod("LS", Some("7")),
            pod("BE", None),
        ];
        let node = node(&[
            (
                "node.koordinator.sh/system-qos-resource",
                r#"{"cpuset":"3"}"#,
            ),
            (
                "kubelet.koordinator.sh/cpu-manager-policy",
                r#"{"policy":"static"}"#,
            ),
            ("node.koordinator.sh/cpu-normalization-ratio", "1.5"),
        ]);
        let (rules, problems) =
            NodeRules::build(Some(&node), None, Some(&pods), Some(&online), None);
        assert!(problems.is_empty(), "{problems:?}");
        // LS pods' own cpusets do not shrink the pool.
        assert_eq!(rules.ls_share_pool.unwrap().to_string(), "4-7");
        assert_eq!(rules.system_qos_cpus.unwrap().to_string(), "3");
        assert!(rules.kubelet_static_cpu_policy);
        assert_eq!(rules.cpu_normalization_ratio, Some(1.5));
        assert!(rules.be_cfs_quota_enabled);
    }

    #[test]
    fn share_pool_matches_the_reported_pool_and_skips_reserved_cpus() {
        let online: CpuSet = "0-7".parse().unwrap();
        let pods = [pod("LSR", Some("0-1")), pod("LSE", Some("4"))];
        let node = node(&[
            (
                "node.koordinator.sh/system-qos-resource",
                r#"{"cpuset":"3"}"#,
            ),
            ("node.koordinator.sh/reservation", r#"{"reservedCPUs":"7"}"#),
        ]);
        let (rules, problems) =
            NodeRules::build(Some(&node), None, Some(&pods), Some(&online), None);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(rules.ls_share_pool.clone().unwrap().to_string(), "2,5-6");
        let hardware = nodetopo::NodeHardware {
            cpus: flat_topology(&online),
            ..nodetopo::NodeHardware::default()
        };
        let (desired, _) = nodetopo::build_desired_topology(&hardware, Some(&node), &pods).unwrap();
        assert_eq!(rules.ls_share_pool, Some(desired.pools.ls));
    }

    fn with_uid(mut pod: Pod, uid: &str) -> Pod {
        pod.metadata.uid = Some(uid.to_string());
        pod
    }

    fn checkpoint(policy: &str) -> CpuManagerCheckpoint {
        serde_json::from_value(serde_json::json!({
            "policyName": policy,
            "defaultCpuSet": "0-1,4-7",
            "entries": {
                "u-guaranteed": {"main": "2", "sidecar": "3"},
                "u-ls": {"main": "5"}
            }
        }))
        .unwrap()
    }

    #[test]
    fn kubelet_pinned_cpus_leave_the_hook_pool_as_they_leave_the_reported_pool() {
        let online: CpuSet = "0-7".parse().unwrap();
        // The kubelet pinned an unlabelled Guaranteed pod to 2-3 and an LS
        // pod to 5; koordinator manages the LS pod, so 5 stays shared.
        let pods = [
            with_uid(pod("", None), "u-guaranteed"),
            with_uid(pod("LS", None), "u-ls"),
            with_uid(pod("LSR", Some("0")), "u-lsr"),
        ];
        let node = node(&[("node.koordinator.sh/reservation", r#"{"reservedCPUs":"7"}"#)]);
        let static_policy = checkpoint("static");
        let (rules, problems) = NodeRules::build(
            Some(&node),
            None,
            Some(&pods),
            Some(&online),
            Some(&static_policy),
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(rules.ls_share_pool.clone().unwrap().to_string(), "1,4-6");
        assert!(rules.kubelet_static_cpu_policy);
        let hardware = nodetopo::NodeHardware {
            cpus: flat_topology(&online),
            kubelet_cpu_manager: Some(static_policy.clone()),
            ..nodetopo::NodeHardware::default()
        };
        let (desired, _) = nodetopo::build_desired_topology(&hardware, Some(&node), &pods).unwrap();
        assert_eq!(rules.ls_share_pool, Some(desired.pools.ls));

        // The none policy pins nothing, and its checkpoint outranks a Node
        // annotation claiming static.
        let claims_static = node_with_reservation_and_policy("static");
        let none_policy = CpuManagerCheckpoint {
            policy_name: "none".to_string(),
            ..static_policy
        };
        let (rules, _) = NodeRules::build(
            Some(&claims_static),
            None,
            Some(&pods),
            Some(&online),
            Some(&none_policy),
        );
        assert_eq!(rules.ls_share_pool.unwrap().to_string(), "1-6");
        assert!(!rules.kubelet_static_cpu_policy);

        // Without a checkpoint nothing is pinned; the Node annotation alone
        // still marks the policy.
        let (rules, _) =
            NodeRules::build(Some(&claims_static), None, Some(&pods), Some(&online), None);
        assert_eq!(rules.ls_share_pool.unwrap().to_string(), "1-6");
        assert!(rules.kubelet_static_cpu_policy);
    }

    fn node_with_reservation_and_policy(policy: &str) -> Node {
        node(&[
            ("node.koordinator.sh/reservation", r#"{"reservedCPUs":"7"}"#),
            (
                "kubelet.koordinator.sh/cpu-manager-policy",
                &format!(r#"{{"policy":"{policy}"}}"#),
            ),
        ])
    }

    #[test]
    fn malformed_inputs_are_reported_and_skipped() {
        let online: CpuSet = "0-1".parse().unwrap();
        let pods = [pod("LSR", Some("x-y")), pod("LSR", Some("0-1"))];
        let node = node(&[
            ("node.koordinator.sh/system-qos-resource", "{"),
            ("node.koordinator.sh/cpu-normalization-ratio", "fast"),
        ]);
        let (rules, problems) =
            NodeRules::build(Some(&node), None, Some(&pods), Some(&online), None);
        assert_eq!(problems.len(), 3, "{problems:?}");
        // Every CPU is bound: the pool falls back to all online CPUs.
        assert_eq!(rules.ls_share_pool.unwrap().to_string(), "0-1");
        assert_eq!(rules.system_qos_cpus, None);
        assert_eq!(rules.cpu_normalization_ratio, None);
    }

    #[test]
    fn cfs_quota_suppress_policy_disables_be_quota_and_cpu_qos_is_read() {
        let slo: NodeSLO = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {
                "resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressPolicy": "cfsQuota"},
                "resourceQOSStrategy": {
                    "beClass": {"cpuQOS": {"enable": true, "groupIdentity": -1}},
                    "lsClass": {"cpuQOS": {"enable": false, "groupIdentity": 2}}
                }
            }
        }))
        .unwrap();
        let (rules, _) = NodeRules::build(None, Some(&slo), None, None, None);
        assert!(!rules.be_cfs_quota_enabled);
        assert_eq!(
            rules.cpu_qos.get(&QoSClass::BE),
            Some(&CpuQosRule {
                enable: true,
                group_identity: -1,
                sched_idle: 0,
                core_expeller: false,
            })
        );
        assert_eq!(
            rules.cpu_qos.get(&QoSClass::LS).map(|r| r.enable),
            Some(false)
        );
        assert_eq!(rules.ls_share_pool, None);
        // A NodeSLO without policies: group identity, and LS expels by default.
        assert_eq!(rules.cpu_qos_policy, Some(CpuQosPolicy::GroupIdentity));
        assert!(rules.cpu_qos[&QoSClass::LS].core_expeller);
    }

    #[test]
    fn cpu_qos_policy_and_core_sched_fields_are_read() {
        let slo = |policy: serde_json::Value| -> NodeSLO {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n"},
                "spec": {"resourceQOSStrategy": {
                    "policies": {"cpuPolicy": policy},
                    "beClass": {"cpuQOS": {"enable": true, "schedIdle": 1, "coreExpeller": true}}
                }}
            }))
            .unwrap()
        };
        let (rules, problems) =
            NodeRules::build(None, Some(&slo("coreSched".into())), None, None, None);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(rules.cpu_qos_policy, Some(CpuQosPolicy::CoreSched));
        let be = rules.cpu_qos[&QoSClass::BE];
        assert_eq!((be.sched_idle, be.core_expeller), (1, true));
        let (rules, _) = NodeRules::build(None, Some(&slo("".into())), None, None, None);
        assert_eq!(rules.cpu_qos_policy, Some(CpuQosPolicy::GroupIdentity));
        let (rules, problems) =
            NodeRules::build(None, Some(&slo("tomorrow".into())), None, None, None);
        assert_eq!(rules.cpu_qos_policy, Some(CpuQosPolicy::Unknown));
        assert_eq!(problems.len(), 1, "{problems:?}");
        // No NodeSLO: unknown policy, the CPU QoS hooks wait.
        let (rules, _) = NodeRules::build(None, None, None, None, None);
        assert_eq!(rules.cpu_qos_policy, None);
    }
}

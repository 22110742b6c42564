//! OOMScoreAdj: a container's `oom_score_adj` from the pod annotations
//! `koordinator.sh/oom-score-adj-spec` (per container, JSON map) or
//! `koordinator.sh/oom-score-adj` (pod default). At creation the value goes
//! into the runtime's reply; after start (and from the reconciler) it is
//! written to every process of the container. The sandbox container is
//! never touched (the runtime manages it). No annotation → nothing; a
//! malformed or out-of-range value → hook error, nothing written.
//!
//! A pod sets these annotations itself, so a value may not go below what
//! the kubelet gives the pod's tier (issue 16): a tenant must not become the
//! last process the OOM killer picks, or an unkillable one (-1000). The
//! floor ([`floor`]) is the kubelet's own policy
//! (`pkg/kubelet/qos/policy.go`): BestEffort 1000, Burstable at least 2,
//! Guaranteed -997; a Koordinator BE pod (batch, first to be reclaimed) gets
//! the BestEffort floor 1000 whatever its tier; an unknown tier counts as
//! BestEffort. Raising is always allowed (a container may volunteer to die
//! first). A value below the floor is a hook error: nothing is written.
//!
//! Lowering `oom_score_adj` below a process's current value needs
//! CAP_SYS_RESOURCE; without it the write fails with EPERM, which the
//! applier reports as `PermissionDenied { lowering: true }` (logged and
//! counted, never retried in a tight loop).

use apis::extension::{ANNOTATION_OOM_SCORE_ADJ_SPEC, QoSClass, oom_score_adj_for_container};

use crate::runtimehooks::protocol::*;
use crate::system::cgroup::QosTier;

/// The kubelet's `oom_score_adj` for BestEffort pods (and the highest).
pub const KUBELET_BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// The lowest the kubelet gives a Burstable pod.
pub const KUBELET_BURSTABLE_MIN_OOM_SCORE_ADJ: i64 = 2;
/// The kubelet's value for Guaranteed pods.
pub const KUBELET_GUARANTEED_OOM_SCORE_ADJ: i64 = -997;

/// The lowest `oom_score_adj` the pod's annotations may ask for (see the
/// module doc).
pub fn floor(pod: &PodContext) -> i64 {
    if pod.qos_class() == QoSClass::BE {
        return KUBELET_BEST_EFFORT_OOM_SCORE_ADJ;
    }
    match pod.kube_qos_tier() {
        Some(QosTier::Guaranteed) => KUBELET_GUARANTEED_OOM_SCORE_ADJ,
        Some(QosTier::Burstable) => KUBELET_BURSTABLE_MIN_OOM_SCORE_ADJ,
        Some(QosTier::BestEffort) | None => KUBELET_BEST_EFFORT_OOM_SCORE_ADJ,
    }
}

pub struct OomScoreAdj;

/// The container's target value, if any.
pub fn target(container: &ContainerContext) -> Result<Option<i64>, HookError> {
    if container.container.sandbox {
        return Ok(None);
    }
    let value = oom_score_adj_for_container(&container.pod.annotations, &container.container.name)
        .map_err(|error| HookError::MalformedAnnotation {
            key: ANNOTATION_OOM_SCORE_ADJ_SPEC.to_string(),
            error: error.to_string(),
        })?;
    let floor = floor(&container.pod);
    match value {
        Some(value) if value < floor => Err(HookError::Invalid(format!(
            "oom_score_adj {value} is below {floor}, the lowest a {} pod in the {} tier may ask for (the kubelet's value for that tier); it is not applied",
            match container.pod.qos_class() {
                QoSClass::None => "non-Koordinator".to_string(),
                class => format!("{class:?}"),
            },
            container
                .pod
                .kube_qos_tier()
                .map_or("unknown", QosTier::as_str)
        ))),
        other => Ok(other),
    }
}

impl Hook for OomScoreAdj {
    fn name(&self) -> &'static str {
        "OOMScoreAdj"
    }
    fn description(&self) -> &'static str {
        "oom_score_adj of container processes from pod annotations"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[HookStage::PreCreateContainer, HookStage::PostStartContainer]
    }

    fn container(
        &self,
        stage: HookStage,
        container: &ContainerContext,
        _env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        let Some(value) = target(container)? else {
            return Ok(());
        };
        if stage == HookStage::PreCreateContainer {
            out.resources.oom_score_adj = Some(value);
        }
        for pid in &container.pids {
            out.side_effects
                .push(SideEffect::OomScoreAdj { pid: *pid, value });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::runtimehooks::rules::NodeRules;

    fn decide(
        stage: HookStage,
        annotations: &[(&str, &str)],
        pids: Vec<u32>,
        sandbox: bool,
    ) -> Result<Adjustment, HookError> {
        // A Guaranteed LS pod: the kubelet's floor is -997.
        let mut c = container(pod("LS", "", annotations), "main");
        c.pids = pids;
        c.container.sandbox = sandbox;
        let mut out = Adjustment::default();
        OomScoreAdj
            .container(stage, &c, &env_with(NodeRules::default()), &mut out)
            .map(|()| out)
    }

    #[test]
    fn spec_beats_pod_default_and_pids_get_writes() {
        let annotations = [
            ("koordinator.sh/oom-score-adj", "100"),
            ("koordinator.sh/oom-score-adj-spec", r#"{"main":-500}"#),
        ];
        let out = decide(HookStage::PreCreateContainer, &annotations, vec![], false).unwrap();
        assert_eq!(out.resources.oom_score_adj, Some(-500));
        let out = decide(
            HookStage::PostStartContainer,
            &annotations[..1],
            vec![10, 11],
            false,
        )
        .unwrap();
        assert_eq!(out.resources.oom_score_adj, None);
        assert_eq!(
            out.side_effects,
            vec![
                SideEffect::OomScoreAdj {
                    pid: 10,
                    value: 100
                },
                SideEffect::OomScoreAdj {
                    pid: 11,
                    value: 100
                }
            ]
        );
    }

    #[test]
    fn never_below_the_kubelets_value_for_the_tier() {
        let ask = |qos: &str, tier: &str, value: &str| {
            let annotations = [("koordinator.sh/oom-score-adj", value)];
            let c = container(pod(qos, tier, &annotations), "main");
            target(&c)
        };
        assert!(ask("BE", "besteffort", "-1000").is_err());
        assert!(ask("BE", "besteffort", "999").is_err());
        assert_eq!(ask("BE", "besteffort", "1000"), Ok(Some(1000)));
        assert!(ask("BE", "burstable", "500").is_err());
        assert!(ask("", "besteffort", "0").is_err());
        assert!(ask("LS", "burstable", "1").is_err());
        assert_eq!(ask("LS", "burstable", "2"), Ok(Some(2)));
        assert!(ask("LSR", "", "-998").is_err());
        assert_eq!(ask("LSR", "", "-997"), Ok(Some(-997)));
        let error = ask("BE", "besteffort", "-1000").unwrap_err().to_string();
        assert!(error.contains("below 1000"), "{error}");
        // No tier known: treated as BestEffort.
        let mut unknown = container(
            pod("LS", "", &[("koordinator.sh/oom-score-adj", "500")]),
            "main",
        );
        unknown.pod.cgroup_parent.clear();
        assert!(target(&unknown).is_err());
    }

    #[test]
    fn sandbox_missing_and_malformed() {
        let annotations = [("koordinator.sh/oom-score-adj", "100")];
        assert!(
            decide(HookStage::PostStartContainer, &annotations, vec![1], true)
                .unwrap()
                .is_empty()
        );
        assert!(
            decide(HookStage::PostStartContainer, &[], vec![1], false)
                .unwrap()
                .is_empty()
        );
        assert!(
            decide(
                HookStage::PreCreateContainer,
                &[("koordinator.sh/oom-score-adj", "2000")],
                vec![],
                false
            )
            .is_err()
        );
        assert!(
            decide(
                HookStage::PreCreateContainer,
                &[("koordinator.sh/oom-score-adj-spec", "{")],
                vec![],
                false
            )
            .is_err()
        );
    }
}

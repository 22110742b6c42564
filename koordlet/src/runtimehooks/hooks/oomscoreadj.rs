//! OOMScoreAdj: a container's `oom_score_adj` from the pod annotations
//! `koordinator.sh/oom-score-adj-spec` (per container, JSON map) or
//! `koordinator.sh/oom-score-adj` (pod default). At creation the value goes
//! into the runtime's reply; after start (and from the reconciler) it is
//! written to every process of the container. The sandbox container is
//! never touched (the runtime manages it). No annotation → nothing; a
//! malformed or out-of-range value → hook error, nothing written.
//!
//! Lowering `oom_score_adj` below a process's current value needs
//! CAP_SYS_RESOURCE; without it the write fails with EPERM, which the
//! applier reports as `PermissionDenied { lowering: true }` (logged and
//! counted, never retried in a tight loop).

use apis::extension::{ANNOTATION_OOM_SCORE_ADJ_SPEC, oom_score_adj_for_container};

use crate::runtimehooks::protocol::*;

pub struct OomScoreAdj;

/// The container's target value, if any.
pub fn target(container: &ContainerContext) -> Result<Option<i64>, HookError> {
    if container.container.sandbox {
        return Ok(None);
    }
    oom_score_adj_for_container(&container.pod.annotations, &container.container.name).map_err(
        |error| HookError::MalformedAnnotation {
            key: ANNOTATION_OOM_SCORE_ADJ_SPEC.to_string(),
            error: error.to_string(),
        },
    )
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
        let mut c = container(pod("LS", "burstable", annotations), "main");
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

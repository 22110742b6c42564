//! Resctrl: a resctrl group `koordlet-<pod uid>` for each pod carrying the
//! `node.koordinator.sh/resctrl` annotation, with the LLC ways and memory
//! bandwidth it asks for. Containers are created in it (the RDT class of
//! the creation decision, which the NRI plugin passes to the runtime, as
//! upstream does); their tasks are also moved into it after start and by
//! the reconciler (the runtime proxy's CRI messages carry no RDT class), and
//! groups of pods that are gone are removed (sandbox removal, and the
//! reconciler's garbage collection).
//!
//! Schemata: `llc.schemata.range: [start%, end%]` becomes a contiguous mask
//! over the root's CBM ways (`ceil(ways*start/100)` ..
//! `ceil(ways*end/100)`), per cache id; `schemataPerCache` overrides one
//! cache id. `mb.schemata.percent` is rounded up to a multiple of 10 (Intel
//! MBA). Nodes without resctrl keep the hook inactive. A malformed
//! annotation is a hook error; an invalid range leaves that resource out.

use apis::extension::{ANNOTATION_RESCTRL, ResctrlConfig, get_resctrl_info};

use crate::runtimehooks::protocol::*;
use crate::runtimehooks::resctrlnode::{GROUP_PREFIX, group_of, is_group_name, schemata_lines};

pub struct ResctrlHook;

fn config_of(pod: &PodContext) -> Result<Option<ResctrlConfig>, HookError> {
    get_resctrl_info(&pod.annotations).map_err(|error| HookError::MalformedAnnotation {
        key: ANNOTATION_RESCTRL.to_string(),
        error: error.to_string(),
    })
}

/// The group-creation effect for a pod, if it asks for one.
pub fn pod_group(pod: &PodContext, env: &HookEnv) -> Result<Option<SideEffect>, HookError> {
    if pod.meta.uid.is_empty() {
        return Ok(None);
    }
    let Some(config) = config_of(pod)? else {
        return Ok(None);
    };
    let schemata = env
        .rules
        .resctrl_info
        .as_ref()
        .map(|info| schemata_lines(&config, info))
        .unwrap_or_default();
    Ok(Some(SideEffect::ResctrlGroup {
        group: group_of(&pod.meta.uid),
        schemata,
    }))
}

/// Groups under the root that belong to no pod in `live_uids` (GC).
pub fn stale_groups<'a>(
    existing: impl IntoIterator<Item = &'a str>,
    live_uids: &[&str],
) -> Vec<SideEffect> {
    existing
        .into_iter()
        .filter_map(|name| name.strip_prefix(GROUP_PREFIX).map(|uid| (name, uid)))
        .filter(|(_, uid)| !live_uids.contains(uid))
        .map(|(name, _)| SideEffect::ResctrlRemoveGroup {
            group: name.to_string(),
        })
        .collect()
}

impl Hook for ResctrlHook {
    fn name(&self) -> &'static str {
        "Resctrl"
    }
    fn description(&self) -> &'static str {
        "per-pod resctrl group (LLC/MB) from the pod annotation"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[
            HookStage::PreRunPodSandbox,
            HookStage::PreCreateContainer,
            HookStage::PostStartContainer,
            HookStage::PreRemoveRunPodSandbox,
            HookStage::PostStopPodSandbox,
        ]
    }
    fn required_capabilities(&self) -> &'static [RequiredCapability] {
        &[RequiredCapability::Resctrl]
    }

    fn pod(
        &self,
        stage: HookStage,
        pod: &PodContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        match stage {
            HookStage::PreRunPodSandbox => {
                if let Some(effect) = pod_group(pod, env)? {
                    out.side_effects.push(effect);
                }
            }
            // Removal does not need a well-formed annotation.
            HookStage::PreRemoveRunPodSandbox | HookStage::PostStopPodSandbox
                if !pod.meta.uid.is_empty() && pod.annotations.contains_key(ANNOTATION_RESCTRL) =>
            {
                out.side_effects.push(SideEffect::ResctrlRemoveGroup {
                    group: group_of(&pod.meta.uid),
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn container(
        &self,
        stage: HookStage,
        container: &ContainerContext,
        _env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        let pod = &container.pod;
        if pod.meta.uid.is_empty() || config_of(pod)?.is_none() {
            return Ok(());
        }
        let group = group_of(&pod.meta.uid);
        match stage {
            // As upstream: the container is created in the pod's group (the
            // NRI adjustment's RDT class), so its first task is already in
            // it. A pod UID that is not a plain name is not passed on.
            HookStage::PreCreateContainer if is_group_name(&group) => {
                out.rdt_class = Some(group);
            }
            HookStage::PostStartContainer if !container.pids.is_empty() => {
                out.side_effects.push(SideEffect::ResctrlTasks {
                    group,
                    pids: container.pids.clone(),
                });
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::runtimehooks::resctrlnode::*;
    use crate::runtimehooks::rules::NodeRules;

    #[test]
    fn masks_follow_upstream_examples() {
        assert_eq!(l3_mask(0x3ff, 10, 80).as_deref(), Some("fe"));
        assert_eq!(l3_mask(0x7ff, 10, 50).as_deref(), Some("3c"));
        assert_eq!(l3_mask(0x7ff, 0, 30).as_deref(), Some("f"));
        assert_eq!(l3_mask(0x7f0, 0, 30), None);
        assert_eq!(l3_mask(0x7ff, 50, 50), None);
    }

    #[test]
    fn a_64_way_cbm_mask_does_not_overflow() {
        // A full 64-bit mask read from info/L3/cbm_mask.
        let info = ResctrlNodeInfo::parse("L3:0=ffffffffffffffff", "ffffffffffffffff\n").unwrap();
        assert_eq!(info.cbm_mask, u64::MAX);
        assert_eq!(
            l3_mask(u64::MAX, 0, 100).as_deref(),
            Some("ffffffffffffffff")
        );
        assert_eq!(
            l3_mask(u64::MAX, 50, 100).as_deref(),
            Some("ffffffff00000000")
        );
        assert_eq!(l3_mask(u64::MAX, 0, 50).as_deref(), Some("ffffffff"));
        // Not contiguous from bit 0 / wider than 64 bits: rejected, no panic.
        assert_eq!(l3_mask(u64::MAX - 1, 0, 100), None);
        assert_eq!(l3_mask(1 << 63, 0, 100), None);
        assert!(ResctrlNodeInfo::parse("L3:0=f", "1ffffffffffffffff").is_err());
        // Out-of-range percents from the annotation.
        assert_eq!(l3_mask(u64::MAX, -1, 100), None);
        assert_eq!(l3_mask(u64::MAX, 0, 101), None);
        assert_eq!(l3_mask(u64::MAX, i64::MIN, i64::MAX), None);
    }

    #[test]
    fn info_parses_and_rejects_garbage() {
        let info =
            ResctrlNodeInfo::parse("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n", "7ff\n").unwrap();
        assert_eq!(
            info,
            ResctrlNodeInfo {
                cbm_mask: 0x7ff,
                l3_ids: vec![0, 1],
                mb_ids: vec![0, 1]
            }
        );
        assert!(ResctrlNodeInfo::parse("L3:0=7ff", "zz").is_err());
        assert!(ResctrlNodeInfo::parse("L3 0=7ff", "7ff").is_err());
        assert!(ResctrlNodeInfo::parse("L3:x=7ff", "7ff").is_err());
    }

    #[test]
    fn pod_annotation_becomes_group_and_schemata() {
        let rules = NodeRules {
            resctrl_info: Some(ResctrlNodeInfo {
                cbm_mask: 0x7ff,
                l3_ids: vec![0, 1],
                mb_ids: vec![0, 1],
            }),
            ..NodeRules::default()
        };
        let env = env_with(rules);
        let annotation = r#"{"llc":{"schemata":{"range":[0,30]},"schemataPerCache":[{"cacheID":1,"range":[10,50]}]},"mb":{"schemata":{"percent":55}}}"#;
        let p = pod("LS", "burstable", &[(ANNOTATION_RESCTRL, annotation)]);
        let mut out = Adjustment::default();
        ResctrlHook
            .pod(HookStage::PreRunPodSandbox, &p, &env, &mut out)
            .unwrap();
        assert_eq!(
            out.side_effects,
            vec![SideEffect::ResctrlGroup {
                group: "koordlet-uid-1".into(),
                schemata: vec!["L3:0=f;1=3c".into(), "MB:0=60;1=60".into()],
            }]
        );
        // Creation: the container starts in the pod's group.
        let mut out = Adjustment::default();
        ResctrlHook
            .container(
                HookStage::PreCreateContainer,
                &container(p.clone(), "main"),
                &env,
                &mut out,
            )
            .unwrap();
        assert_eq!(out.rdt_class.as_deref(), Some("koordlet-uid-1"));
        assert!(out.side_effects.is_empty());
        let mut other = p.clone();
        other.meta.uid = "uid-2".into();
        let mut out = Adjustment::default();
        ResctrlHook
            .container(
                HookStage::PreCreateContainer,
                &container(other, "main"),
                &env,
                &mut out,
            )
            .unwrap();
        assert_eq!(out.rdt_class.as_deref(), Some("koordlet-uid-2"));
        // A UID that is no plain name never becomes a class (or a path).
        let mut escaping = p.clone();
        escaping.meta.uid = "../x".into();
        let mut out = Adjustment::default();
        ResctrlHook
            .container(
                HookStage::PreCreateContainer,
                &container(escaping, "main"),
                &env,
                &mut out,
            )
            .unwrap();
        assert!(out.is_empty());
        // Pods without the annotation keep the runtime's (default) class.
        let mut out = Adjustment::default();
        ResctrlHook
            .container(
                HookStage::PreCreateContainer,
                &container(pod("LS", "burstable", &[]), "main"),
                &env,
                &mut out,
            )
            .unwrap();
        assert!(out.is_empty());

        let mut c = container(p.clone(), "main");
        c.pids = vec![7];
        let mut out = Adjustment::default();
        ResctrlHook
            .container(HookStage::PostStartContainer, &c, &env, &mut out)
            .unwrap();
        assert_eq!(
            out.side_effects,
            vec![SideEffect::ResctrlTasks {
                group: "koordlet-uid-1".into(),
                pids: vec![7]
            }]
        );
        let mut out = Adjustment::default();
        ResctrlHook
            .pod(HookStage::PreRemoveRunPodSandbox, &p, &env, &mut out)
            .unwrap();
        assert_eq!(
            out.side_effects,
            vec![SideEffect::ResctrlRemoveGroup {
                group: "koordlet-uid-1".into()
            }]
        );

        let bad = pod("LS", "burstable", &[(ANNOTATION_RESCTRL, "{")]);
        assert!(
            ResctrlHook
                .pod(
                    HookStage::PreRunPodSandbox,
                    &bad,
                    &env,
                    &mut Adjustment::default()
                )
                .is_err()
        );
        let none = pod("LS", "burstable", &[]);
        let mut out = Adjustment::default();
        ResctrlHook
            .pod(HookStage::PreRunPodSandbox, &none, &env, &mut out)
            .unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn gc_removes_groups_of_gone_pods_only() {
        let removed = stale_groups(["koordlet-a", "koordlet-b", "other", "info"], &["a"]);
        assert_eq!(
            removed,
            vec![SideEffect::ResctrlRemoveGroup {
                group: "koordlet-b".into()
            }]
        );
    }
}

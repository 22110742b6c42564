//! Coscheduling (gang scheduling) for the extender, which has no Permit
//! phase to park members in: a gang member passes only once the whole gang
//! can be placed. Until then every node rejects it with a "waiting for gang"
//! reason and nothing is bound, so a gang is placed all together or not at
//! all (up to races with pods bound between its members; see docs).
//!
//! Gangs come from PodGroup CRs (label `pod-group.scheduling.sigs.k8s.io`)
//! or the gang annotations (`gang.scheduling.koordinator.sh/name`,
//! `min-available`, `total-number`).

use std::collections::BTreeMap;

use apis::extension::coscheduling::{
    LABEL_POD_GROUP, gang_name, get_gang_min_num, get_gang_total_num,
};
use serde::Deserialize;

use crate::cache::{ClusterCache, ClusterEvent, PodInfo, object_key};
use crate::config::{ConfigError, parse_args};
use crate::framework::{CycleState, Plugin, Rejection};
use crate::resources::Resources;

/// Node allocatable pod count.
const RESOURCE_PODS: &str = "pods";

pub const NAME: &str = "Coscheduling";

/// Prefix of every hold reason.
pub const REASON_WAITING_FOR_GANG: &str = "waiting for gang";

/// `CoschedulingArgs` (only the fields this extender uses).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingArgs {
    /// Accepted for compatibility; the extender holds members in filter.
    #[serde(default)]
    pub default_timeout: Option<String>,
}

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let _raw: CoschedulingArgs = parse_args(NAME, args)?;
    Ok(Box::new(Coscheduling::default()))
}

/// See the module docs.
#[derive(Default)]
pub struct Coscheduling {
    /// Gang key → keys of its pods in the cache.
    gangs: std::collections::HashMap<String, std::collections::BTreeSet<String>>,
}

fn gang_key_of(pod: &PodInfo) -> Option<String> {
    gang_name(pod.labels(), pod.annotations()).map(|name| object_key(Some(&pod.namespace), name))
}

/// A gang's identity and how many members must be placed together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gang {
    /// `namespace/name`.
    pub key: String,
    pub min_member: usize,
}

/// The gang a pod belongs to; `Err` for malformed gang settings.
pub fn gang_of(pod: &PodInfo, cache: &ClusterCache) -> Result<Option<Gang>, Rejection> {
    let Some(name) = gang_name(pod.labels(), pod.annotations()) else {
        return Ok(None);
    };
    let key = object_key(Some(&pod.namespace), name);
    let from_pod_group = pod.labels().contains_key(LABEL_POD_GROUP);
    let min_member = match cache.pod_groups.get(&key) {
        Some(group) => group.spec.min_member.unwrap_or(1),
        None if from_pod_group => {
            return Err(Rejection::unschedulable(format!(
                "{REASON_WAITING_FOR_GANG}: can't find gang, gangName: {key}, podName: {}",
                pod.key
            )));
        }
        None => {
            let invalid =
                |e: String| Rejection::unresolvable(format!("invalid gang settings: {e}"));
            let min = get_gang_min_num(pod.labels(), pod.annotations())
                .map_err(|e| invalid(e.to_string()))?
                .unwrap_or(1);
            // total-number only bounds min-available; it must not be smaller.
            if let Some(total) =
                get_gang_total_num(pod.annotations()).map_err(|e| invalid(e.to_string()))?
                && total < min
            {
                return Err(Rejection::unresolvable(format!(
                    "invalid gang settings: total-number {total} is less than min-available {min}"
                )));
            }
            min
        }
    };
    Ok(Some(Gang {
        key,
        min_member: usize::try_from(min_member.max(1)).unwrap_or(1),
    }))
}

/// The gang's members in the cache: (placed, pending), pending sorted by key.
fn members<'a>(
    index: &std::collections::HashMap<String, std::collections::BTreeSet<String>>,
    gang: &Gang,
    cache: &'a ClusterCache,
) -> (usize, Vec<&'a std::sync::Arc<PodInfo>>) {
    let mut placed = 0;
    let mut pending = Vec::new();
    for pod in index
        .get(&gang.key)
        .into_iter()
        .flatten()
        .filter_map(|key| cache.pod(key))
    {
        if pod.node.is_some() {
            placed += 1;
        } else {
            pending.push(pod);
        }
    }
    (placed, pending)
}

fn fits(request: &Resources, free: &Resources) -> bool {
    request
        .iter()
        .all(|(name, amount)| amount <= free.get(name))
}

/// How many of `pods` fit at once, first fit on the nodes' free resources
/// (a node without a pod-count allocatable is not limited by it).
fn trial_pack(pods: &[&std::sync::Arc<PodInfo>], cache: &ClusterCache) -> usize {
    let mut free: Vec<(Resources, bool)> = cache
        .node_names_sorted()
        .iter()
        .filter_map(|name| cache.node(name))
        .map(|node| {
            let mut free = node.allocatable.clone();
            free.sub(&node.requested);
            let limits_pods = node.allocatable.get(RESOURCE_PODS) > 0;
            if limits_pods {
                free.add_amount(RESOURCE_PODS, -(node.pods.len() as i64));
            }
            (free, limits_pods)
        })
        .collect();
    let mut placed = 0;
    for pod in pods {
        let slot = free.iter_mut().find_map(|(free, limits_pods)| {
            let mut request = pod.requests.clone();
            if *limits_pods {
                request.add_amount(RESOURCE_PODS, 1);
            }
            fits(&request, free).then_some((free, request))
        });
        if let Some((free, request)) = slot {
            free.sub(&request);
            placed += 1;
        }
    }
    placed
}

impl Plugin for Coscheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_event(&mut self, event: &ClusterEvent, _cache: &ClusterCache) {
        let ClusterEvent::Pod { old, new } = event else {
            return;
        };
        if let Some(old) = old
            && let Some(gang) = gang_key_of(old)
            && let Some(members) = self.gangs.get_mut(&gang)
        {
            members.remove(&old.key);
            if members.is_empty() {
                self.gangs.remove(&gang);
            }
        }
        if let Some(new) = new
            && let Some(gang) = gang_key_of(new)
        {
            self.gangs.entry(gang).or_default().insert(new.key.clone());
        }
    }

    fn pre_filter(
        &self,
        pod: &PodInfo,
        cache: &ClusterCache,
        _state: &mut CycleState,
    ) -> Result<(), Rejection> {
        let Some(gang) = gang_of(pod, cache)? else {
            return Ok(());
        };
        let (placed, mut pending) = members(&self.gangs, &gang, cache);
        if placed >= gang.min_member {
            // The gang is satisfied once; later members schedule freely.
            return Ok(());
        }
        // This pod may be an extender request not (yet) in the cache.
        if !pending.iter().any(|p| p.key == pod.key) {
            return Err(Rejection::unschedulable(format!(
                "{REASON_WAITING_FOR_GANG} {}: pod {} is not in the scheduler cache yet",
                gang.key, pod.key
            )));
        }
        let needed = gang.min_member - placed;
        if pending.len() < needed {
            return Err(Rejection::unschedulable(format!(
                "{REASON_WAITING_FOR_GANG} {}: {} of {} members exist",
                gang.key,
                placed + pending.len(),
                gang.min_member
            )));
        }
        // This pod first, then the others in key order.
        pending.sort_by_key(|p| p.key != pod.key);
        let fit = trial_pack(&pending, cache);
        if fit < needed {
            return Err(Rejection::unschedulable(format!(
                "{REASON_WAITING_FOR_GANG} {}: only {} of {} members can be placed together",
                gang.key,
                placed + fit,
                gang.min_member
            )));
        }
        Ok(())
    }

    fn pre_bind(
        &self,
        _pod: &PodInfo,
        _node: &str,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<BTreeMap<String, String>, Rejection> {
        Ok(BTreeMap::new())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use crate::cache::Object;
    use crate::framework::Scheduler;
    use crate::simulator::schedule_one;
    use crate::testutil::{self, PodSpec, t0};

    fn member(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Object {
        testutil::pod(PodSpec {
            name,
            requests: &[("cpu", "2")],
            labels,
            annotations,
            ..Default::default()
        })
    }

    fn gang_member(name: &str, min: &str) -> Object {
        member(
            name,
            &[
                ("gang.scheduling.koordinator.sh/name", "job"),
                ("gang.scheduling.koordinator.sh/min-available", min),
            ],
            &[],
        )
    }

    fn cluster(nodes: usize) -> Scheduler {
        let mut s = testutil::scheduler("");
        for i in 0..nodes {
            testutil::load(
                &mut s,
                vec![testutil::node(
                    &format!("n{i}"),
                    &[("cpu", "2"), ("memory", "8Gi")],
                )],
            );
        }
        s
    }

    fn schedule_all(s: &mut Scheduler, keys: &[&str]) -> Vec<Option<String>> {
        keys.iter()
            .map(|k| schedule_one(s, k, t0(), true).node)
            .collect()
    }

    #[test]
    fn a_gang_of_three_on_room_for_two_binds_nobody() {
        let mut s = cluster(2);
        testutil::load(
            &mut s,
            vec![
                gang_member("a", "3"),
                gang_member("b", "3"),
                gang_member("c", "3"),
            ],
        );
        let keys = ["default/a", "default/b", "default/c"];
        for key in keys {
            let placement = schedule_one(&mut s, key, t0(), true);
            assert_eq!(placement.node, None);
            let reason = &placement.reasons["n0"];
            assert!(
                reason.starts_with("waiting for gang default/job: only 2 of 3 members"),
                "{reason}"
            );
        }
        assert!(s.cache.pods().all(|p| p.node.is_none()));
    }

    #[test]
    fn a_gang_that_fits_binds_every_member() {
        let mut s = cluster(3);
        testutil::load(
            &mut s,
            vec![
                gang_member("a", "3"),
                gang_member("b", "3"),
                gang_member("c", "3"),
            ],
        );
        let nodes = schedule_all(&mut s, &["default/a", "default/b", "default/c"]);
        assert!(nodes.iter().all(Option::is_some), "{nodes:?}");
    }

    #[test]
    fn members_wait_until_enough_exist_and_pod_groups_set_min_member() {
        let mut s = cluster(4);
        testutil::load(&mut s, vec![gang_member("a", "2")]);
        let first = schedule_one(&mut s, "default/a", t0(), true);
        assert_eq!(first.node, None);
        assert_eq!(
            first.reasons["n0"],
            "waiting for gang default/job: 1 of 2 members exist"
        );
        testutil::load(&mut s, vec![gang_member("b", "2")]);
        assert!(
            schedule_all(&mut s, &["default/a", "default/b"])
                .iter()
                .all(Option::is_some)
        );

        // A PodGroup gang: min-member from the CR; a missing CR holds the pod.
        let pg = [("pod-group.scheduling.sigs.k8s.io", "pg")];
        testutil::load(&mut s, vec![member("x", &[], &pg), member("y", &[], &pg)]);
        let held = schedule_one(&mut s, "default/x", t0(), true);
        assert!(
            held.reasons["n0"].contains("can't find gang"),
            "{:?}",
            held.reasons
        );
        testutil::load(
            &mut s,
            vec![Object::PodGroup(
                serde_json::from_value(json!({
                    "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": "pg", "namespace": "default"},
                    "spec": {"minMember": 2}
                }))
                .unwrap(),
            )],
        );
        assert!(
            schedule_all(&mut s, &["default/x", "default/y"])
                .iter()
                .all(Option::is_some)
        );
    }

    #[test]
    fn malformed_gang_settings_are_unresolvable() {
        let mut s = cluster(1);
        testutil::load(
            &mut s,
            vec![member(
                "bad",
                &[
                    ("gang.scheduling.koordinator.sh/name", "job"),
                    ("gang.scheduling.koordinator.sh/min-available", "two"),
                ],
                &[],
            )],
        );
        let outcome = testutil::filter(&s, "default/bad", t0());
        assert!(outcome.failed_unresolvable["n0"].starts_with("invalid gang settings"));
    }
}

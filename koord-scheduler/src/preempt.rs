//! Preemption through kube-scheduler's extender `preemptVerb`.
//!
//! kube-scheduler's DefaultPreemption picks victims per candidate node by
//! priority and its own filters only, then sends them here
//! (`ExtenderPreemptionArgs`) and evicts what comes back
//! (`ExtenderPreemptionResult`). The extender takes out the victims that
//! Koordinator's rules keep — ElasticQuota (the `preemptible` label, the
//! default quota, another quota only above its min), Reservation (only
//! owners evict pods on a reservation), non-preemptible pods, and
//! Coscheduling (a gang goes whole or not at all) — and drops a node whose
//! remaining victims no longer make room for the preemptor by
//! kube-scheduler's resource fit and every plugin's filter. Victims are
//! never added (see `docs/extender.md`, Preemption).
//!
//! [`decide_node`] is the pure core; [`run_preemption`] gathers the facts
//! from the scheduler and evaluates the fit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::admission;
use crate::cache::{Object, PodInfo};
use crate::framework::Scheduler;

/// `MetaPod`: a victim named by UID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaPod {
    #[serde(rename = "UID", default)]
    pub uid: String,
}

/// `MetaVictims` (sent with `nodeCacheCapable: true`, and always answered).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaVictims {
    /// Go's `[]*MetaPod`: may be `null`, and so may an entry.
    #[serde(rename = "Pods", default)]
    pub pods: Option<Vec<Option<MetaPod>>>,
    #[serde(rename = "NumPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// `Victims` (sent with `nodeCacheCapable: false`): whole pods.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Victims {
    #[serde(rename = "Pods", default)]
    pub pods: Option<Vec<Option<Pod>>>,
    #[serde(rename = "NumPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// Request body of `/preempt`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderPreemptionArgs {
    #[serde(rename = "Pod", default)]
    pub pod: Option<Pod>,
    #[serde(rename = "NodeNameToVictims", default)]
    pub node_name_to_victims: Option<BTreeMap<String, Option<Victims>>>,
    #[serde(rename = "NodeNameToMetaVictims", default)]
    pub node_name_to_meta_victims: Option<BTreeMap<String, Option<MetaVictims>>>,
}

/// Response of `/preempt`. A node absent here is not preempted on; every
/// node present has at least one victim (kube-scheduler refuses an empty
/// list from an extender that is not ignorable).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtenderPreemptionResult {
    #[serde(rename = "NodeNameToMetaVictims", default)]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

/// The most victims one node may list (kubelet's `maxPods` is far below).
pub const MAX_VICTIMS_PER_NODE: usize = 5_000;
/// The most victims one request may list over all nodes.
pub const MAX_VICTIMS_TOTAL: usize = 100_000;
/// Longest UID accepted (Kubernetes UIDs are 36 bytes).
pub const MAX_UID_BYTES: usize = 128;

/// kube-scheduler's proposal for one node, parsed and bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeProposal {
    pub node: String,
    pub victim_uids: Vec<String>,
    pub num_pdb_violations: i64,
}

/// Parses a `/preempt` body; `Err` is the 400 message. The preemptor goes
/// through [`admission::admit`] as `/filter`'s pod does.
pub fn parse_preemption_args(body: &[u8]) -> Result<(Pod, Vec<NodeProposal>), String> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err("malformed ExtenderPreemptionArgs: expected a JSON object".into());
    }
    let args: ExtenderPreemptionArgs = serde_json::from_slice(body)
        .map_err(|e| format!("malformed ExtenderPreemptionArgs: {e}"))?;
    let pod = args
        .pod
        .ok_or_else(|| "ExtenderPreemptionArgs.Pod is missing".to_string())?;
    let admitted = admission::admit(Object::Pod(pod))
        .map_err(|e| format!("ExtenderPreemptionArgs.Pod: {e}"))?;
    let Object::Pod(pod) = admitted.object else {
        return Err("ExtenderPreemptionArgs.Pod is not a pod".into());
    };
    let mut raw: Vec<(String, Vec<Option<String>>, i64)> = Vec::new();
    let field = if let Some(map) = args.node_name_to_meta_victims {
        for (node, victims) in map {
            let victims = victims.unwrap_or_default();
            let uids = victims
                .pods
                .unwrap_or_default()
                .into_iter()
                .map(|p| p.map(|p| p.uid))
                .collect();
            raw.push((node, uids, victims.num_pdb_violations));
        }
        "NodeNameToMetaVictims"
    } else if let Some(map) = args.node_name_to_victims {
        for (node, victims) in map {
            let victims = victims.unwrap_or_default();
            let uids = victims
                .pods
                .unwrap_or_default()
                .into_iter()
                .map(|p| p.and_then(|p| p.metadata.uid))
                .collect();
            raw.push((node, uids, victims.num_pdb_violations));
        }
        "NodeNameToVictims"
    } else {
        return Err(
            "ExtenderPreemptionArgs has neither NodeNameToMetaVictims nor NodeNameToVictims".into(),
        );
    };
    if raw.len() > crate::extender::MAX_CANDIDATE_NODES {
        return Err(format!(
            "ExtenderPreemptionArgs.{field} lists {} nodes, more than the {} allowed",
            raw.len(),
            crate::extender::MAX_CANDIDATE_NODES
        ));
    }
    let mut total = 0usize;
    let mut proposals = Vec::with_capacity(raw.len());
    for (node, uids, num_pdb_violations) in raw {
        if node.is_empty() || node.len() > admission::MAX_NAME_BYTES {
            return Err(format!(
                "ExtenderPreemptionArgs.{field} has a node name of {} bytes (1 to {} allowed)",
                node.len(),
                admission::MAX_NAME_BYTES
            ));
        }
        if uids.len() > MAX_VICTIMS_PER_NODE {
            return Err(format!(
                "ExtenderPreemptionArgs.{field}[{node}] lists {} victims, more than the {MAX_VICTIMS_PER_NODE} allowed",
                uids.len()
            ));
        }
        total += uids.len();
        if total > MAX_VICTIMS_TOTAL {
            return Err(format!(
                "ExtenderPreemptionArgs.{field} lists more than the {MAX_VICTIMS_TOTAL} victims allowed"
            ));
        }
        let mut seen = BTreeSet::new();
        let mut victim_uids = Vec::with_capacity(uids.len());
        for (index, uid) in uids.into_iter().enumerate() {
            let uid = uid.filter(|u| !u.is_empty()).ok_or_else(|| {
                format!("ExtenderPreemptionArgs.{field}[{node}].Pods[{index}] has no UID")
            })?;
            if uid.len() > MAX_UID_BYTES {
                return Err(format!(
                    "ExtenderPreemptionArgs.{field}[{node}].Pods[{index}] has a UID of {} bytes, more than the {MAX_UID_BYTES} allowed",
                    uid.len()
                ));
            }
            if !seen.insert(uid.clone()) {
                return Err(format!(
                    "ExtenderPreemptionArgs.{field}[{node}] lists victim {uid} twice"
                ));
            }
            victim_uids.push(uid);
        }
        proposals.push(NodeProposal {
            node,
            victim_uids,
            num_pdb_violations,
        });
    }
    Ok((pod, proposals))
}

/// What the extender knows about one proposed victim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VictimFacts {
    pub uid: String,
    /// The cache key, when the cache has the pod on the proposed node.
    pub key: Option<String>,
    /// Why a rule keeps the pod (`None`: evictable).
    pub protected: Option<String>,
    /// The gang the pod is evicted with, if any.
    pub unit: Option<String>,
}

/// The verdict for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDecision {
    /// Preempt these victims (UIDs, in kube-scheduler's order); `dropped`
    /// are the proposed victims kept alive, with the reason.
    Preempt {
        victims: Vec<String>,
        dropped: Vec<(String, String)>,
    },
    /// Not a preemption candidate any more.
    Drop { reason: String },
}

/// The pure decision for one node. `unit_members` names the cache keys of
/// every bound member of a gang (on any node); `fits` says whether the
/// preemptor fits the node once the given cache keys are gone.
pub fn decide_node(
    victims: &[VictimFacts],
    unit_members: &HashMap<String, BTreeSet<String>>,
    fits: impl FnOnce(&[String]) -> Result<(), String>,
) -> NodeDecision {
    let mut dropped: Vec<(String, String)> = Vec::new();
    let mut kept: Vec<&VictimFacts> = Vec::new();
    for victim in victims {
        match &victim.protected {
            Some(reason) => dropped.push((victim.uid.clone(), reason.clone())),
            None => kept.push(victim),
        }
    }
    // A gang goes whole: every bound member must be among the victims left
    // on this node, else none of its members here is evicted.
    let kept_keys: BTreeSet<&str> = kept.iter().filter_map(|v| v.key.as_deref()).collect();
    let mut broken_units: BTreeMap<&str, String> = BTreeMap::new();
    for victim in &kept {
        let Some(unit) = victim.unit.as_deref() else {
            continue;
        };
        if broken_units.contains_key(unit) {
            continue;
        }
        let missing: Vec<&str> = unit_members
            .get(unit)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .filter(|member| !kept_keys.contains(member))
            .collect();
        if !missing.is_empty() {
            let shown: Vec<&str> = missing.iter().take(3).copied().collect();
            let more = if missing.len() > shown.len() {
                format!(" and {} more", missing.len() - shown.len())
            } else {
                String::new()
            };
            broken_units.insert(
                unit,
                format!(
                    "gang {unit} would be split: member(s) {}{more} would stay",
                    shown.join(", ")
                ),
            );
        }
    }
    kept.retain(|victim| {
        match victim
            .unit
            .as_deref()
            .and_then(|unit| broken_units.get(unit))
        {
            Some(reason) => {
                dropped.push((victim.uid.clone(), reason.clone()));
                false
            }
            None => true,
        }
    });
    if kept.is_empty() {
        return NodeDecision::Drop {
            reason: "no victim is left once Koordinator's rules are applied".into(),
        };
    }
    let keys: Vec<String> = kept.iter().filter_map(|v| v.key.clone()).collect();
    if let Err(reason) = fits(&keys) {
        return NodeDecision::Drop {
            reason: format!(
                "the preemptor does not fit once the remaining victims are gone: {reason}"
            ),
        };
    }
    NodeDecision::Preempt {
        victims: kept.iter().map(|v| v.uid.clone()).collect(),
        dropped,
    }
}

/// A pod's priority (`spec.priority`, 0 when unset).
pub fn pod_priority(pod: &PodInfo) -> i32 {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.priority)
        .unwrap_or_default()
}

/// Rules that hold whatever the plugins: kube-scheduler's own (only lower
/// priority) and the `scheduling.koordinator.sh/disable-preemptible` label
/// upstream's Reservation and Coscheduling preemption honour.
fn generic_protection(preemptor: &PodInfo, victim: &PodInfo) -> Option<String> {
    if !apis::extension::preemption::is_pod_preemptible(victim.labels()) {
        return Some(format!(
            "pod is labelled {}=true",
            apis::extension::preemption::LABEL_DISABLE_PREEMPTIBLE
        ));
    }
    let (victim_priority, preemptor_priority) = (pod_priority(victim), pod_priority(preemptor));
    if victim_priority >= preemptor_priority {
        return Some(format!(
            "pod's priority {victim_priority} is not below the preemptor's {preemptor_priority}"
        ));
    }
    None
}

/// One node's outcome, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    pub node: String,
    pub decision: NodeDecision,
}

/// `/preempt` outside HTTP: screens every node's victims and checks the
/// fit; needs the write lock (see [`Scheduler::fits_without`]). A victim
/// the cache does not know on that node is passed through unchanged: it is
/// kube-scheduler's to judge, and the fit is checked with it still there.
pub fn run_preemption(
    scheduler: &mut Scheduler,
    preemptor: &PodInfo,
    proposals: Vec<NodeProposal>,
    now: SystemTime,
) -> (ExtenderPreemptionResult, Vec<NodeReport>) {
    let mut facts_by_node = Vec::with_capacity(proposals.len());
    let mut units = BTreeSet::new();
    for proposal in proposals {
        let known: Vec<Option<std::sync::Arc<PodInfo>>> = proposal
            .victim_uids
            .iter()
            .map(|uid| {
                scheduler
                    .cache
                    .pod_by_uid(uid)
                    .filter(|p| p.node.as_deref() == Some(proposal.node.as_str()))
                    .cloned()
            })
            .collect();
        // The generic rules first; the plugins judge the rest together.
        let generic: Vec<Option<String>> = known
            .iter()
            .map(|pod| {
                pod.as_deref()
                    .and_then(|v| generic_protection(preemptor, v))
            })
            .collect();
        let judged: Vec<&PodInfo> = known
            .iter()
            .zip(&generic)
            .filter(|(_, reason)| reason.is_none())
            .filter_map(|(pod, _)| pod.as_deref())
            .collect();
        let mut plugin_reasons = scheduler.victim_protections(preemptor, &judged).into_iter();
        let facts: Vec<VictimFacts> = proposal
            .victim_uids
            .iter()
            .zip(known.iter().zip(generic))
            .map(|(uid, (pod, generic))| match pod {
                None => VictimFacts {
                    uid: uid.clone(),
                    key: None,
                    protected: None,
                    unit: None,
                },
                Some(victim) => VictimFacts {
                    uid: uid.clone(),
                    key: Some(victim.key.clone()),
                    protected: match generic {
                        Some(reason) => Some(reason),
                        None => plugin_reasons.next().flatten(),
                    },
                    unit: scheduler.preemption_unit(victim),
                },
            })
            .collect();
        units.extend(facts.iter().filter_map(|f| f.unit.clone()));
        facts_by_node.push((proposal, facts));
    }
    let mut unit_members: HashMap<String, BTreeSet<String>> = HashMap::new();
    if !units.is_empty() {
        for pod in scheduler.cache.pods().filter(|p| p.node.is_some()) {
            if let Some(unit) = scheduler.preemption_unit(pod).filter(|u| units.contains(u)) {
                unit_members
                    .entry(unit)
                    .or_default()
                    .insert(pod.key.clone());
            }
        }
    }
    let mut result = ExtenderPreemptionResult::default();
    let mut reports = Vec::with_capacity(facts_by_node.len());
    for (proposal, facts) in facts_by_node {
        let node = proposal.node.clone();
        let decision = decide_node(&facts, &unit_members, |keys| {
            scheduler.fits_without(preemptor, &node, keys, now)
        });
        if let NodeDecision::Preempt { victims, .. } = &decision {
            result.node_name_to_meta_victims.insert(
                node.clone(),
                MetaVictims {
                    pods: Some(
                        victims
                            .iter()
                            .map(|uid| Some(MetaPod { uid: uid.clone() }))
                            .collect(),
                    ),
                    // Only victims are taken out, so the count can only fall;
                    // which PDBs the kept ones matched is kube-scheduler's.
                    num_pdb_violations: proposal.num_pdb_violations.min(victims.len() as i64),
                },
            );
        }
        reports.push(NodeReport { node, decision });
    }
    (result, reports)
}

#[cfg(test)]
#[path = "preempt_tests.rs"]
mod tests;

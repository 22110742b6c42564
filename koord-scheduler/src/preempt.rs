//! Preemption through kube-scheduler's extender `preemptVerb`.
//!
//! kube-scheduler's DefaultPreemption picks victims per candidate node by
//! priority and its own filters only, then sends them here
//! (`ExtenderPreemptionArgs`) and evicts what comes back
//! (`ExtenderPreemptionResult`). The extender takes out the victims that
//! Koordinator's rules keep — ElasticQuota (the `preemptible` label, the
//! default quota, another quota only above its min), Reservation (only
//! owners evict pods on a reservation), non-preemptible pods, and
//! Coscheduling (a gang goes whole or not at all) — and, where the victims
//! left do not make room by kube-scheduler's resource fit and every
//! plugin's filter (kube-scheduler does not see batch/mid resources, quota
//! runtime, cpusets, devices, reservations), adds the fewest, least
//! important other pods of that node the same rules let go, or drops the
//! node. Added victims are weighed against PodDisruptionBudgets as
//! kube-scheduler weighs its own (see [`crate::disruption`]): those whose
//! eviction violates no budget are preferred, and the ones that do add to
//! the node's `NumPDBViolations`. A gang preemptor is judged for its whole
//! gang. See
//! `docs/extender.md`, Preemption, for what kube-scheduler's protocol
//! allows and what it does not.
//!
//! [`decide_node`] is the pure core; [`run_preemption`] gathers the facts
//! from the scheduler and evaluates the fit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::admission;
use crate::cache::{ClusterCache, Object, PodInfo};
use crate::disruption::{DisruptionBudget, Ledger, charged_budgets};
use crate::framework::Scheduler;

/// Re-exported: preemption ranks by it, and this was its first home.
pub use crate::cache::pod_priority;

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
    if raw.len() > admission::MAX_CANDIDATE_NODES {
        return Err(format!(
            "ExtenderPreemptionArgs.{field} lists {} nodes, more than the {} allowed",
            raw.len(),
            admission::MAX_CANDIDATE_NODES
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
    /// The PodDisruptionBudgets (indexes into the request's list) its
    /// eviction takes a disruption from; filled only when victims are
    /// added on its node.
    pub budgets: Vec<usize>,
}

/// A pod on the node that kube-scheduler did not propose but Koordinator's
/// rules let go: kube-scheduler cannot see what it holds of the resources
/// only Koordinator models (batch/mid, quota runtime, exclusive cpusets,
/// devices), so the extender may add it to the node's victims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraCandidate {
    pub uid: String,
    /// The cache key.
    pub key: String,
    pub priority: i32,
    /// When the pod started (seconds since the epoch, `i64::MAX` when
    /// unknown): among equal priorities the earlier one is more important,
    /// as kube-scheduler's `MoreImportantPod` has it.
    pub started: i64,
    /// The gang the pod is evicted with, if any.
    pub unit: Option<String>,
    /// The PodDisruptionBudgets (indexes into the request's list) its
    /// eviction takes a disruption from.
    pub budgets: Vec<usize>,
}

/// How many extra fit checks one `/preempt` request may spend choosing
/// added victims (each takes the victims out of the cache and the plugins'
/// indexes under the write lock, so the request stays bounded).
pub const MAX_EXTRA_FIT_CHECKS: usize = 1_000;

/// The most pods of one node considered as added victims (kubelet's
/// `maxPods` defaults to 110); beyond it the least important are taken.
pub const MAX_EXTRA_CANDIDATES_PER_NODE: usize = 512;

/// Fit checks left for choosing added victims in one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitBudget {
    pub left: usize,
}

impl FitBudget {
    pub fn new(left: usize) -> Self {
        Self { left }
    }

    fn take(&mut self) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }
}

/// The verdict for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDecision {
    /// Preempt these victims (UIDs): kube-scheduler's kept ones in its
    /// order, then `added`; `dropped` are the proposed victims kept alive,
    /// with the reason. `added_pdb_violations` counts the added victims
    /// whose eviction violates a PodDisruptionBudget (kube-scheduler's
    /// victims take from the budgets first).
    Preempt {
        victims: Vec<String>,
        added: Vec<String>,
        added_pdb_violations: usize,
        dropped: Vec<(String, String)>,
    },
    /// Not a preemption candidate any more.
    Drop { reason: String },
}

/// Names at most three of `items`, then how many more.
fn name_some(items: &[&str]) -> String {
    let shown: Vec<&str> = items.iter().take(3).copied().collect();
    if items.len() > shown.len() {
        format!(
            "{} and {} more",
            shown.join(", "),
            items.len() - shown.len()
        )
    } else {
        shown.join(", ")
    }
}

/// The pure decision for one node. `unit_members` names the cache keys of
/// every bound member of a gang (on any node); `extras` are the node's
/// other pods the rules let go (see [`ExtraCandidate`]); `fits` says
/// whether the preemptor fits the node once the given cache keys are gone;
/// `budgets_allowed` is `status.disruptionsAllowed` of each
/// PodDisruptionBudget the victims' and extras' `budgets` index.
///
/// kube-scheduler's victims (less the protected ones and split gangs) are
/// kept as they are. Only when they do not make room are extras added,
/// the way kube-scheduler picks its own: all of them out, then each unit
/// (a pod, or a gang whose every bound member is among the extras) put
/// back while the preemptor still fits: first the units whose eviction
/// would violate a PodDisruptionBudget, then the others, each group most
/// important first (kube-scheduler's `SelectVictimsOnNode`). The fit
/// checks of that search come out of `budget`; a node whose search runs
/// out of it is dropped rather than answered with more victims than
/// needed.
pub fn decide_node(
    victims: &[VictimFacts],
    extras: &[ExtraCandidate],
    unit_members: &HashMap<String, BTreeSet<String>>,
    budgets_allowed: &[i32],
    mut fits: impl FnMut(&[String]) -> Result<(), String>,
    budget: &mut FitBudget,
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
            broken_units.insert(
                unit,
                format!(
                    "gang {unit} would be split: member(s) {} would stay",
                    name_some(&missing)
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
    if kept.is_empty() && extras.is_empty() {
        return NodeDecision::Drop {
            reason: "no victim is left once Koordinator's rules are applied".into(),
        };
    }
    let keys: Vec<String> = kept.iter().filter_map(|v| v.key.clone()).collect();
    let kept_uids: Vec<String> = kept.iter().map(|v| v.uid.clone()).collect();
    let shortfall = if kept.is_empty() {
        "no victim is left once Koordinator's rules are applied".to_string()
    } else {
        match fits(&keys) {
            Ok(()) => {
                return NodeDecision::Preempt {
                    victims: kept_uids,
                    added: Vec::new(),
                    added_pdb_violations: 0,
                    dropped,
                };
            }
            Err(reason) => reason,
        }
    };
    if extras.is_empty() {
        return NodeDecision::Drop {
            reason: format!(
                "the preemptor does not fit once the remaining victims are gone: {shortfall}"
            ),
        };
    }
    // kube-scheduler's victims go whatever is added: they take from the
    // budgets first.
    let mut ledger = Ledger::new(budgets_allowed);
    for victim in &kept {
        ledger.charge(&victim.budgets);
    }
    match add_victims(&keys, extras, unit_members, &ledger, &mut fits, budget) {
        Ok((added, added_pdb_violations)) => {
            let mut victims = kept_uids;
            let added: Vec<String> = added.into_iter().map(|i| extras[i].uid.clone()).collect();
            victims.extend(added.iter().cloned());
            if victims.is_empty() {
                // kube-scheduler refuses an empty list; nothing needs to go.
                return NodeDecision::Drop {
                    reason: "the preemptor fits the node without evicting anything".into(),
                };
            }
            NodeDecision::Preempt {
                victims,
                added,
                added_pdb_violations,
                dropped,
            }
        }
        Err(reason) => NodeDecision::Drop {
            reason: format!(
                "the preemptor does not fit once the remaining victims are gone ({shortfall}), \
                 and {reason}"
            ),
        },
    }
}

/// The extras (indexes) to evict beside `base` (see [`decide_node`]), and
/// how many of them violate a PodDisruptionBudget once `ledger` (what
/// `base` took) is charged with them, most important first.
fn add_victims(
    base: &[String],
    extras: &[ExtraCandidate],
    unit_members: &HashMap<String, BTreeSet<String>>,
    ledger: &Ledger<'_>,
    fits: &mut impl FnMut(&[String]) -> Result<(), String>,
    budget: &mut FitBudget,
) -> Result<(Vec<usize>, usize), String> {
    // Units: a pod alone, or a gang whose every bound member is an extra
    // here (a gang with a member elsewhere, or among kube-scheduler's
    // victims, cannot be added whole).
    let extra_keys: BTreeSet<&str> = extras.iter().map(|e| e.key.as_str()).collect();
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut by_unit: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, extra) in extras.iter().enumerate() {
        match extra.unit.as_deref() {
            None => units.push(vec![index]),
            Some(unit) => {
                let whole = unit_members
                    .get(unit)
                    .is_none_or(|members| members.iter().all(|m| extra_keys.contains(m.as_str())));
                if !whole {
                    continue;
                }
                match by_unit.get(unit) {
                    Some(&slot) => units[slot].push(index),
                    None => {
                        by_unit.insert(unit, units.len());
                        units.push(vec![index]);
                    }
                }
            }
        }
    }
    if units.is_empty() {
        return Err(
            "no other pod on the node may go (every one is protected, or of a gang \
                    that cannot go whole)"
                .into(),
        );
    }
    // Most important first: the highest priority of the unit, then the
    // earliest start, then the key (a stable answer).
    let importance = |unit: &Vec<usize>| {
        let top = unit
            .iter()
            .map(|&i| &extras[i])
            .max_by_key(|e| (e.priority, std::cmp::Reverse(e.started)))
            .map(|e| (e.priority, e.started, e.key.as_str()));
        top.unwrap_or((i32::MIN, i64::MAX, ""))
    };
    units.sort_by(|a, b| {
        let (pa, sa, ka) = importance(a);
        let (pb, sb, kb) = importance(b);
        pb.cmp(&pa).then(sa.cmp(&sb)).then(ka.cmp(kb))
    });
    // As kube-scheduler's `filterPodsWithPDBViolation`: every unit, most
    // important first, takes from the budgets; one that finds a budget
    // exhausted violates it. Those are tried for a reprieve first.
    let mut classifying = ledger.clone();
    let violating: Vec<bool> = units
        .iter()
        .map(|unit| {
            unit.iter().fold(false, |any, &i| {
                classifying.charge(&extras[i].budgets) | any
            })
        })
        .collect();
    let reprieve_order: Vec<usize> = (0..units.len())
        .filter(|&slot| violating[slot])
        .chain((0..units.len()).filter(|&slot| !violating[slot]))
        .collect();
    let mut evicted = vec![true; units.len()];
    let gone = |evicted: &[bool]| -> Vec<String> {
        let mut keys = base.to_vec();
        for (unit, out) in units.iter().zip(evicted) {
            if *out {
                keys.extend(unit.iter().map(|&i| extras[i].key.clone()));
            }
        }
        keys
    };
    if !budget.take() {
        return Err("the request's budget of fit checks for added victims is spent".into());
    }
    fits(&gone(&evicted)).map_err(|reason| {
        format!("it does not fit even with every other pod the rules let go gone: {reason}")
    })?;
    for slot in reprieve_order {
        if !budget.take() {
            return Err("the request's budget of fit checks for added victims is spent".into());
        }
        evicted[slot] = false;
        if fits(&gone(&evicted)).is_err() {
            evicted[slot] = true;
        }
    }
    // The units stay most important first: the victims that stay out are
    // counted in that order against what the budgets have left after `base`.
    let mut chosen: Vec<usize> = units
        .iter()
        .zip(&evicted)
        .filter(|(_, out)| **out)
        .flat_map(|(unit, _)| unit.iter().copied())
        .collect();
    let mut counting = ledger.clone();
    let violations = chosen
        .iter()
        .filter(|&&i| counting.charge(&extras[i].budgets))
        .count();
    chosen.sort_unstable();
    Ok((chosen, violations))
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

/// The most victims a gang preemptor's check releases on the other
/// proposed nodes (see [`run_preemption`]); beyond it none is released and
/// the gang must fit with the one node's victims alone.
pub const MAX_GANG_RELEASED_VICTIMS: usize = 10_000;

/// What one proposed node brings to the decision.
struct NodeWork {
    proposal: NodeProposal,
    facts: Vec<VictimFacts>,
    /// kube-scheduler's victims the generic rules let go (the plugins
    /// judge extras together with them).
    judged: Vec<Arc<PodInfo>>,
    /// Every cached pod named by `facts` (and later the extras), by UID.
    pods: HashMap<String, Arc<PodInfo>>,
}

/// When a pod started, for [`ExtraCandidate::started`].
fn started_at(pod: &PodInfo) -> i64 {
    pod.pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(i64::MAX, |t| t.0.as_second())
}

/// Gathers one node's facts: kube-scheduler's victims judged by the rules.
fn gather_node(scheduler: &Scheduler, preemptor: &PodInfo, proposal: NodeProposal) -> NodeWork {
    let known: Vec<Option<Arc<PodInfo>>> = proposal
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
    let judged: Vec<Arc<PodInfo>> = known
        .iter()
        .zip(&generic)
        .filter(|(_, reason)| reason.is_none())
        .filter_map(|(pod, _)| pod.clone())
        .collect();
    let judged_refs: Vec<&PodInfo> = judged.iter().map(|p| p.as_ref()).collect();
    let mut plugin_reasons = scheduler
        .victim_protections(preemptor, &judged_refs)
        .into_iter();
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
                budgets: Vec::new(),
            },
            Some(victim) => VictimFacts {
                uid: uid.clone(),
                key: Some(victim.key.clone()),
                protected: match generic {
                    Some(reason) => Some(reason),
                    None => plugin_reasons.next().flatten(),
                },
                unit: scheduler.preemption_unit(victim),
                budgets: Vec::new(),
            },
        })
        .collect();
    let pods = known
        .into_iter()
        .flatten()
        .map(|pod| (pod.uid.clone(), pod))
        .collect();
    NodeWork {
        proposal,
        facts,
        judged,
        pods,
    }
}

/// The node's other pods kube-scheduler could evict that the rules let
/// go (see [`ExtraCandidate`]); they join `work.pods`. Only pods bound
/// through the API: an assumed pod may not be in kube-scheduler's snapshot,
/// and a UID it cannot find fails its whole preemption attempt.
fn gather_extras(
    scheduler: &Scheduler,
    preemptor: &PodInfo,
    work: &mut NodeWork,
) -> Vec<ExtraCandidate> {
    let proposed: BTreeSet<&str> = work
        .proposal
        .victim_uids
        .iter()
        .map(String::as_str)
        .collect();
    let mut pool: Vec<Arc<PodInfo>> = scheduler
        .cache
        .pods_on_node(&work.proposal.node)
        .filter(|p| {
            !p.is_assumed()
                && !p.uid.is_empty()
                && p.key != preemptor.key
                && !proposed.contains(p.uid.as_str())
                && generic_protection(preemptor, p).is_none()
        })
        .cloned()
        .collect();
    if pool.is_empty() {
        return Vec::new();
    }
    // The least important first, should the node have more than allowed.
    pool.sort_by(|a, b| {
        (
            pod_priority(a),
            std::cmp::Reverse(started_at(a)),
            a.key.as_str(),
        )
            .cmp(&(
                pod_priority(b),
                std::cmp::Reverse(started_at(b)),
                b.key.as_str(),
            ))
    });
    pool.truncate(MAX_EXTRA_CANDIDATES_PER_NODE);
    // Judged together with kube-scheduler's remaining victims: the quota
    // rule counts victims lowest priority first.
    let together: Vec<&PodInfo> = work
        .judged
        .iter()
        .chain(pool.iter())
        .map(|p| p.as_ref())
        .collect();
    let verdicts = scheduler.victim_protections(preemptor, &together);
    let mut extras = Vec::new();
    for (pod, verdict) in pool
        .iter()
        .zip(verdicts.into_iter().skip(work.judged.len()))
    {
        if verdict.is_none() {
            extras.push(ExtraCandidate {
                uid: pod.uid.clone(),
                key: pod.key.clone(),
                priority: pod_priority(pod),
                started: started_at(pod),
                unit: scheduler.preemption_unit(pod),
                budgets: Vec::new(),
            });
            work.pods.insert(pod.uid.clone(), Arc::clone(pod));
        }
    }
    extras
}

/// The PodDisruptionBudgets one request weighs, each namespace's loaded
/// from the cache when a pod of it is first weighed. Budgets that select
/// nothing (see [`crate::disruption`]) are left out.
#[derive(Debug, Default)]
struct RequestBudgets {
    list: Vec<DisruptionBudget>,
    /// `status.disruptionsAllowed` of each in `list`.
    allowed: Vec<i32>,
    by_namespace: HashMap<String, Vec<usize>>,
}

impl RequestBudgets {
    /// The budgets evicting `pod` takes a disruption from.
    fn charged_by(&mut self, cache: &ClusterCache, pod: &PodInfo) -> Vec<usize> {
        if pod.labels().is_empty() {
            return Vec::new();
        }
        if !self.by_namespace.contains_key(&pod.namespace) {
            let mut indexes = Vec::new();
            for budget in cache.disruption_budgets_in(&pod.namespace) {
                let budget = DisruptionBudget::new(budget);
                if let Some(reason) = budget.unusable() {
                    tracing::debug!(budget = %budget.key, %reason, "PodDisruptionBudget selects no pod");
                    continue;
                }
                indexes.push(self.list.len());
                self.allowed.push(budget.disruptions_allowed);
                self.list.push(budget);
            }
            self.by_namespace.insert(pod.namespace.clone(), indexes);
        }
        let indexes = self
            .by_namespace
            .get(&pod.namespace)
            .map_or(&[][..], Vec::as_slice);
        charged_budgets(&self.list, indexes, &pod.namespace, &pod.name, pod.labels())
    }

    /// Fills `budgets` of the node's evictable victims and of `extras`.
    fn attach(&mut self, cache: &ClusterCache, work: &mut NodeWork, extras: &mut [ExtraCandidate]) {
        for fact in work.facts.iter_mut().filter(|f| f.protected.is_none()) {
            if let Some(pod) = work.pods.get(&fact.uid) {
                fact.budgets = self.charged_by(cache, pod);
            }
        }
        for extra in extras.iter_mut() {
            if let Some(pod) = work.pods.get(&extra.uid) {
                extra.budgets = self.charged_by(cache, pod);
            }
        }
    }
}

/// The cache keys of every bound member of `units`, added to `members`.
fn add_unit_members(
    scheduler: &Scheduler,
    units: &BTreeSet<String>,
    members: &mut HashMap<String, BTreeSet<String>>,
) {
    if units.is_empty() {
        return;
    }
    for pod in scheduler.cache.pods().filter(|p| p.node.is_some()) {
        if let Some(unit) = scheduler.preemption_unit(pod).filter(|u| units.contains(u)) {
            members.entry(unit).or_default().insert(pod.key.clone());
        }
    }
}

/// A gang preemptor whose gang still has other members waiting to be
/// placed: the cache keys of the victims on the proposed nodes that its
/// check may count as gone (see [`run_preemption`]). Empty otherwise.
fn gang_released_victims(
    scheduler: &Scheduler,
    preemptor: &PodInfo,
    works: &[NodeWork],
) -> Vec<(String, String)> {
    let Some(unit) = scheduler.preemption_unit(preemptor) else {
        return Vec::new();
    };
    let others_pending = scheduler.cache.pods().any(|p| {
        p.node.is_none()
            && p.key != preemptor.key
            && scheduler.preemption_unit(p).as_ref() == Some(&unit)
    });
    if !others_pending {
        return Vec::new();
    }
    let released: Vec<(String, String)> = works
        .iter()
        .flat_map(|work| {
            work.facts
                .iter()
                .filter(|f| f.protected.is_none() && f.unit.is_none())
                .filter_map(|f| f.key.clone())
                .map(|key| (work.proposal.node.clone(), key))
        })
        .collect();
    if released.len() > MAX_GANG_RELEASED_VICTIMS {
        tracing::info!(pod = %preemptor.key, victims = released.len(), "gang preemption: too many victims to release for the whole-gang check; each node is judged with its own victims only");
        return Vec::new();
    }
    released
}

/// kube-scheduler's order of a node's victims: most important first (its
/// node choice reads the first one's priority); unknown pods last.
fn order_victims(victims: &mut [String], pods: &HashMap<String, Arc<PodInfo>>) {
    victims.sort_by_key(|uid| {
        std::cmp::Reverse(
            pods.get(uid)
                .map_or(i64::MIN, |p| i64::from(pod_priority(p))),
        )
    });
}

/// `/preempt` outside HTTP: screens every node's victims, adds victims
/// where the remaining ones do not make room (see [`decide_node`]) and
/// checks the fit; needs the write lock (see [`Scheduler::fits_without`]).
/// A victim the cache does not know on that node is passed through
/// unchanged: it is kube-scheduler's to judge, and the fit is checked with
/// it still there.
///
/// A gang preemptor whose gang has other members still pending is judged
/// for the whole gang, as upstream's job-level preemption: Coscheduling's
/// pre-filter (run by the fit check) packs the members still needed, and
/// while one node is judged the victims kube-scheduler proposed on the
/// *other* nodes count as gone (each member preempts its own node in its
/// own cycle). A node where the gang cannot be placed whole is dropped, so
/// nothing is evicted for one member when the others cannot follow.
pub fn run_preemption(
    scheduler: &mut Scheduler,
    preemptor: &PodInfo,
    proposals: Vec<NodeProposal>,
    now: SystemTime,
) -> (ExtenderPreemptionResult, Vec<NodeReport>) {
    let works: Vec<NodeWork> = proposals
        .into_iter()
        .map(|proposal| gather_node(scheduler, preemptor, proposal))
        .collect();
    let units: BTreeSet<String> = works
        .iter()
        .flat_map(|w| w.facts.iter().filter_map(|f| f.unit.clone()))
        .collect();
    let mut unit_members: HashMap<String, BTreeSet<String>> = HashMap::new();
    add_unit_members(scheduler, &units, &mut unit_members);
    let released = gang_released_victims(scheduler, preemptor, &works);
    let mut released_by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (node, key) in released {
        released_by_node.entry(node).or_default().push(key);
    }
    let mut detached: BTreeMap<String, Vec<Arc<PodInfo>>> = released_by_node
        .iter()
        .map(|(node, keys)| (node.clone(), scheduler.detach_pods(keys)))
        .collect();

    let mut budget = FitBudget::new(MAX_EXTRA_FIT_CHECKS);
    let mut disruption_budgets = RequestBudgets::default();
    let mut decided = Vec::with_capacity(works.len());
    for mut work in works {
        let node = work.proposal.node.clone();
        // This node's own victims are judged by its own decision.
        if let Some(own) = detached.remove(&node) {
            scheduler.reattach_pods(&own);
        }
        let mut decision = decide_node(
            &work.facts,
            &[],
            &unit_members,
            &[],
            |keys| scheduler.fits_without(preemptor, &node, keys, now),
            &mut budget,
        );
        if matches!(decision, NodeDecision::Drop { .. }) {
            // kube-scheduler's victims are not enough: the node's other
            // pods the rules let go are looked at only now.
            let mut extras = gather_extras(scheduler, preemptor, &mut work);
            if !extras.is_empty() {
                let new_units: BTreeSet<String> = extras
                    .iter()
                    .filter_map(|e| e.unit.clone())
                    .filter(|u| !unit_members.contains_key(u))
                    .collect();
                add_unit_members(scheduler, &new_units, &mut unit_members);
                disruption_budgets.attach(&scheduler.cache, &mut work, &mut extras);
                decision = decide_node(
                    &work.facts,
                    &extras,
                    &unit_members,
                    &disruption_budgets.allowed,
                    |keys| scheduler.fits_without(preemptor, &node, keys, now),
                    &mut budget,
                );
            }
        }
        if let Some(keys) = released_by_node.get(&node) {
            detached.insert(node.clone(), scheduler.detach_pods(keys));
        }
        decided.push((work, decision));
    }
    for own in detached.into_values() {
        scheduler.reattach_pods(&own);
    }
    // With the cache whole again.
    let mut result = ExtenderPreemptionResult::default();
    let mut reports = Vec::with_capacity(decided.len());
    for (work, mut decision) in decided {
        if let NodeDecision::Preempt { victims, added, .. } = &mut decision
            && !added.is_empty()
        {
            match recheck_together(scheduler, preemptor, victims, &work.pods) {
                Some(reason) => decision = NodeDecision::Drop { reason },
                None => order_victims(victims, &work.pods),
            }
        }
        if let NodeDecision::Preempt {
            victims,
            added,
            added_pdb_violations,
            ..
        } = &decision
        {
            let from_kube = victims.len() - added.len();
            // kube-scheduler counted its own victims against the budgets;
            // fewer of them (some kept alive here) can only violate fewer.
            // The added ones were counted after them.
            let kube_violations = work
                .proposal
                .num_pdb_violations
                .clamp(0, i64::try_from(from_kube).unwrap_or(i64::MAX));
            let added_violations = i64::try_from(*added_pdb_violations).unwrap_or(i64::MAX);
            result.node_name_to_meta_victims.insert(
                work.proposal.node.clone(),
                MetaVictims {
                    pods: Some(
                        victims
                            .iter()
                            .map(|uid| Some(MetaPod { uid: uid.clone() }))
                            .collect(),
                    ),
                    num_pdb_violations: kube_violations.saturating_add(added_violations),
                },
            );
        }
        reports.push(NodeReport {
            node: work.proposal.node,
            decision,
        });
    }
    (result, reports)
}

/// The plugins judge a node's final victims together once more (the quota
/// rule counts victims lowest priority first, so added ones may change the
/// verdict on others); a protected one drops the node.
fn recheck_together(
    scheduler: &Scheduler,
    preemptor: &PodInfo,
    victims: &[String],
    pods: &HashMap<String, Arc<PodInfo>>,
) -> Option<String> {
    let known: Vec<&PodInfo> = victims
        .iter()
        .filter_map(|uid| pods.get(uid).map(|p| p.as_ref()))
        .collect();
    let verdicts = scheduler.victim_protections(preemptor, &known);
    known
        .iter()
        .zip(verdicts)
        .find_map(|(pod, verdict)| verdict.map(|reason| (pod.key.clone(), reason)))
        .map(|(key, reason)| {
            format!("with the added victims, {key} would be protected after all: {reason}")
        })
}

#[cfg(test)]
#[path = "preempt_tests.rs"]
mod tests;

//! The NUMA topology manager as upstream's scheduler runs it (its
//! `frameworkext/topologymanager`, after kubelet's): every hint provider
//! lists, per resource, the sets of NUMA nodes the pod could be placed on;
//! the node's policy merges them into one best set and admits or rejects
//! the pod with upstream's reasons.
//!
//! - `None`: no alignment, always admitted.
//! - `BestEffort`: the best merged set, admitted even when unaligned.
//! - `Restricted`: admitted only when the best set is preferred by every
//!   resource.
//! - `SingleNUMANode`: only one-NUMA-node sets are considered; admitted when
//!   one is preferred by every resource.
//!
//! Pure functions; `topologymanager_tests.rs` holds upstream's tables.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use apis::extension::numa_aware::{NUMATopologyPolicy, NumaNodeStatus, NumaTopologyExclusive};

/// Upstream's reason when a resource fits on no set of NUMA nodes.
pub fn unsatisfied_numa_resource(resource: &str) -> String {
    format!("Unsatisfied NUMA {resource}")
}

/// Upstream's reason when the resources' sets cannot be aligned.
pub fn unaligned_numa_hint(summary: &str) -> String {
    format!("Unaligned NUMA Hint cause {summary}")
}

/// A set of NUMA node ids 0..=63 (upstream's bitmask has 64 bits too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NumaMask(u64);

impl NumaMask {
    pub const MAX_NODE: i32 = 63;

    /// None when an id is outside 0..=63.
    pub fn of(nodes: &[i32]) -> Option<Self> {
        let mut bits = 0u64;
        for node in nodes {
            if !(0..=Self::MAX_NODE).contains(node) {
                return None;
            }
            bits |= 1 << node;
        }
        Some(Self(bits))
    }

    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    pub fn contains(self, node: i32) -> bool {
        (0..=Self::MAX_NODE).contains(&node) && self.0 & (1 << node) != 0
    }

    pub fn nodes(self) -> Vec<i32> {
        (0..=Self::MAX_NODE).filter(|n| self.contains(*n)).collect()
    }

    fn and(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// Fewer nodes; among equal counts, the lower-numbered nodes.
    pub fn is_narrower_than(self, other: Self) -> bool {
        if self.count() == other.count() {
            self.0 < other.0
        } else {
            self.count() < other.count()
        }
    }

    /// Every non-empty subset of `nodes`: all single nodes first, then all
    /// pairs, and so on, each size in the order of `nodes` (upstream's order).
    pub fn subsets(nodes: &[i32]) -> Vec<NumaMask> {
        fn walk(rest: &[i32], picked: &mut Vec<i32>, size: usize, out: &mut Vec<NumaMask>) {
            if picked.len() == size {
                if let Some(mask) = NumaMask::of(picked) {
                    out.push(mask);
                }
                return;
            }
            for (i, node) in rest.iter().enumerate() {
                picked.push(*node);
                walk(&rest[i + 1..], picked, size, out);
                picked.pop();
            }
        }
        let mut out = Vec::new();
        for size in 1..=nodes.len() {
            walk(nodes, &mut Vec::new(), size, &mut out);
        }
        out
    }
}

/// Upstream prints a mask in binary, highest node first, at least two digits
/// and padded to an even width (`{0}` → `01`, `{0,1}` → `11`).
impl fmt::Display for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shift = 62;
        while shift > 0 {
            if self.0 > (1u64 << shift) {
                return write!(f, "{:0width$b}", self.0, width = shift + 2);
            }
            shift -= 2;
        }
        write!(f, "{:02b}", self.0)
    }
}

/// One candidate placement: the NUMA nodes (None: no preference), whether
/// it is the narrowest possible (`preferred`), and a NUMA score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NumaHint {
    pub affinity: Option<NumaMask>,
    pub unsatisfied: bool,
    pub preferred: bool,
    pub score: i64,
}

impl NumaHint {
    pub fn on(mask: NumaMask, preferred: bool) -> Self {
        Self {
            affinity: Some(mask),
            preferred,
            ..Self::default()
        }
    }

    fn affinity_text(&self) -> String {
        self.affinity
            .map_or_else(|| "<nil>".to_string(), |m| m.to_string())
    }
}

/// One provider's hints per resource. `None` for a resource: no preference;
/// `Some(empty)`: the resource fits on no set of NUMA nodes.
pub type ProviderHints = BTreeMap<String, Option<Vec<NumaHint>>>;

/// The merged decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    pub hint: NumaHint,
    pub admit: bool,
    pub reasons: Vec<String>,
}

/// Whether a set honours `Required` single-NUMA exclusivity: a multi-node
/// set must not touch a node a single-NUMA pod holds, and a one-node set
/// must not be a node multi-NUMA pods share. A node without a status
/// counts as idle.
pub fn check_exclusive_policy(
    hint: &NumaHint,
    exclusive: NumaTopologyExclusive,
    statuses: &[NumaNodeStatus],
) -> bool {
    let Some(mask) = hint.affinity else {
        return false;
    };
    if exclusive != NumaTopologyExclusive::Required {
        return true;
    }
    let status = |node: i32| {
        usize::try_from(node)
            .ok()
            .and_then(|i| statuses.get(i).copied())
    };
    let nodes = mask.nodes();
    if nodes.len() > 1 {
        !nodes
            .iter()
            .any(|n| status(*n) == Some(NumaNodeStatus::Single))
    } else {
        nodes
            .first()
            .is_none_or(|n| status(*n) != Some(NumaNodeStatus::Shared))
    }
}

/// Every resource's candidate list (no preference and no possible
/// placement turned into one-element lists), the reasons for resources that
/// fit nowhere, and a sorted `<resource> prefer [..] among [..]` summary.
pub fn filter_providers_hints(
    providers: &[ProviderHints],
) -> (Vec<Vec<NumaHint>>, Vec<String>, Vec<String>) {
    let no_preference = NumaHint {
        preferred: true,
        ..NumaHint::default()
    };
    let mut all = Vec::new();
    let mut reasons = Vec::new();
    let mut summary = Vec::new();
    for provider in providers {
        if provider.is_empty() {
            all.push(vec![no_preference]);
            continue;
        }
        for (resource, hints) in provider {
            match hints {
                None => all.push(vec![no_preference]),
                Some(hints) if hints.is_empty() => {
                    all.push(vec![NumaHint {
                        unsatisfied: true,
                        ..NumaHint::default()
                    }]);
                    reasons.push(unsatisfied_numa_resource(resource));
                }
                Some(hints) => {
                    summary.push(summary_for(resource, hints));
                    all.push(hints.clone());
                }
            }
        }
    }
    summary.sort();
    (all, reasons, summary)
}

fn summary_for(resource: &str, hints: &[NumaHint]) -> String {
    let satisfied = hints.iter().filter(|h| !h.unsatisfied);
    let preferred: Vec<String> = satisfied
        .clone()
        .filter(|h| h.preferred)
        .map(NumaHint::affinity_text)
        .collect();
    let possible: Vec<String> = satisfied.map(NumaHint::affinity_text).collect();
    format!(
        "{resource} prefer [{}] among [{}]",
        preferred.join(" "),
        possible.join(" ")
    )
}

/// One hint per resource merged: the nodes every hint allows; preferred
/// only when all are preferred and name the same nodes; unsatisfied when a
/// hint is, or when the common nodes are fewer than the widest hint needs.
fn merge_permutation(all_nodes: NumaMask, permutation: &[NumaHint]) -> NumaHint {
    let mut preferred = true;
    let mut satisfied = true;
    let mut widest = 0;
    let mut first: Option<NumaMask> = None;
    let mut merged = all_nodes;
    let mut any_affinity = false;
    for hint in permutation {
        if let Some(mask) = hint.affinity {
            any_affinity = true;
            let first = *first.get_or_insert(mask);
            if mask != first {
                preferred = false;
            }
            widest = widest.max(mask.count());
            merged = merged.and(mask);
        }
        if !hint.preferred {
            preferred = false;
        }
        if hint.unsatisfied {
            satisfied = false;
        }
    }
    let satisfied = (!any_affinity || widest == merged.count()) && satisfied;
    NumaHint {
        affinity: Some(merged),
        unsatisfied: !satisfied,
        preferred,
        score: 0,
    }
}

/// Calls `visit` with every combination of one hint per resource.
fn for_each_permutation(all: &[Vec<NumaHint>], visit: &mut impl FnMut(&[NumaHint])) {
    fn walk(
        all: &[Vec<NumaHint>],
        picked: &mut Vec<NumaHint>,
        visit: &mut impl FnMut(&[NumaHint]),
    ) {
        let Some((first, rest)) = all.split_first() else {
            visit(picked);
            return;
        };
        for hint in first {
            picked.push(*hint);
            walk(rest, picked, visit);
            picked.pop();
        }
    }
    walk(all, &mut Vec::new(), visit);
}

/// The best merged hint: preferred over not preferred, then the narrowest,
/// then (same width) the highest summed score of the hints naming exactly
/// that set. Starts from all nodes, not preferred.
pub fn merge_filtered_hints(
    numa_nodes: &[i32],
    filtered: &[Vec<NumaHint>],
    exclusive: NumaTopologyExclusive,
    statuses: &[NumaNodeStatus],
) -> NumaHint {
    let all_nodes = NumaMask::of(numa_nodes).unwrap_or_default();
    let mut best = NumaHint {
        affinity: Some(all_nodes),
        ..NumaHint::default()
    };
    for_each_permutation(filtered, &mut |permutation| {
        let mut merged = merge_permutation(all_nodes, permutation);
        let mask = merged.affinity.unwrap_or_default();
        if mask.count() == 0 {
            return;
        }
        if !check_exclusive_policy(&merged, exclusive, statuses) {
            merged.preferred = false;
        }
        merged.score = permutation
            .iter()
            .filter(|h| h.affinity == Some(mask))
            .map(|h| h.score)
            .sum();
        if merged.preferred && !best.preferred {
            best = merged;
            return;
        }
        if !merged.preferred && best.preferred {
            return;
        }
        let best_mask = best.affinity.unwrap_or_default();
        if !mask.is_narrower_than(best_mask) {
            if mask.count() == best_mask.count() && merged.score > best.score {
                best = merged;
            }
            return;
        }
        best = merged;
    });
    best
}

/// Keeps, per resource, the preferred hints on one NUMA node (or none).
pub fn filter_single_numa_hints(all: &[Vec<NumaHint>]) -> Vec<Vec<NumaHint>> {
    all.iter()
        .map(|hints| {
            hints
                .iter()
                .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1))
                .copied()
                .collect()
        })
        .collect()
}

/// Merges the providers' hints under `policy` for a node with `numa_nodes`.
pub fn merge(
    policy: NUMATopologyPolicy,
    numa_nodes: &[i32],
    providers: &[ProviderHints],
    exclusive: NumaTopologyExclusive,
    statuses: &[NumaNodeStatus],
) -> Merged {
    let all_nodes = NumaMask::of(numa_nodes).unwrap_or_default();
    let every_node = NumaHint {
        affinity: Some(all_nodes),
        ..NumaHint::default()
    };
    match policy {
        NUMATopologyPolicy::None => Merged {
            hint: NumaHint::default(),
            admit: true,
            reasons: Vec::new(),
        },
        NUMATopologyPolicy::BestEffort => {
            let (filtered, _, _) = filter_providers_hints(providers);
            let mut hint = merge_filtered_hints(numa_nodes, &filtered, exclusive, statuses);
            if hint.unsatisfied {
                hint = every_node;
            }
            Merged {
                hint,
                admit: true,
                reasons: Vec::new(),
            }
        }
        NUMATopologyPolicy::Restricted => {
            let (filtered, reasons, summary) = filter_providers_hints(providers);
            if !reasons.is_empty() {
                return Merged {
                    hint: every_node,
                    admit: false,
                    reasons,
                };
            }
            let hint = merge_filtered_hints(numa_nodes, &filtered, exclusive, statuses);
            rejected_unless_preferred(hint, &summary.join(" & "))
        }
        NUMATopologyPolicy::SingleNUMANode => {
            let (filtered, reasons, summary) = filter_providers_hints(providers);
            if !reasons.is_empty() {
                return Merged {
                    hint: NumaHint::default(),
                    admit: false,
                    reasons,
                };
            }
            let single = filter_single_numa_hints(&filtered);
            let mut hint = merge_filtered_hints(numa_nodes, &single, exclusive, statuses);
            if hint.affinity == Some(all_nodes) {
                hint = NumaHint {
                    preferred: hint.preferred,
                    ..NumaHint::default()
                };
            }
            rejected_unless_preferred(hint, &summary.join(","))
        }
    }
}

fn rejected_unless_preferred(hint: NumaHint, summary: &str) -> Merged {
    if hint.preferred {
        Merged {
            hint,
            admit: true,
            reasons: Vec::new(),
        }
    } else {
        Merged {
            hint,
            admit: false,
            reasons: vec![unaligned_numa_hint(summary)],
        }
    }
}

/// Upstream's hint generation for one provider. `resources`: what the pod
/// requests that the NUMA nodes report; `lacking`: per resource the NUMA
/// nodes with none of it free (a set touching one is skipped for every
/// resource); `fits(mask)`: whether the pod can be placed on exactly those
/// nodes, with that set's NUMA score. Hints are preferred when as narrow as
/// the narrowest fitting set, or always under `Restricted`. A resource
/// without any fitting set gets an empty list (it fits nowhere).
pub fn generate_hints(
    numa_nodes: &[i32],
    resources: &BTreeSet<String>,
    lacking: &BTreeMap<String, Vec<i32>>,
    policy: NUMATopologyPolicy,
    mut fits: impl FnMut(NumaMask) -> Option<i64>,
) -> ProviderHints {
    let mut hints: ProviderHints = resources
        .iter()
        .map(|r| (r.clone(), Some(Vec::new())))
        .collect();
    let mut narrowest = u32::try_from(numa_nodes.len()).unwrap_or(u32::MAX);
    for mask in NumaMask::subsets(numa_nodes) {
        let Some(score) = fits(mask) else {
            continue;
        };
        let touches_lacking = resources.iter().any(|r| {
            lacking
                .get(r)
                .is_some_and(|nodes| nodes.iter().any(|n| mask.contains(*n)))
        });
        if touches_lacking {
            continue;
        }
        narrowest = narrowest.min(mask.count());
        for list in hints.values_mut().flatten() {
            list.push(NumaHint {
                affinity: Some(mask),
                score,
                ..NumaHint::default()
            });
        }
    }
    for list in hints.values_mut().flatten() {
        for hint in list.iter_mut() {
            hint.preferred = hint.affinity.is_some_and(|m| m.count() == narrowest)
                || policy == NUMATopologyPolicy::Restricted;
        }
    }
    hints
}

#[cfg(test)]
#[path = "topologymanager_tests.rs"]
mod tests;

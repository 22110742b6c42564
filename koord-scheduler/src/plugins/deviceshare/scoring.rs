//! DeviceShare's node score and its `scoringStrategy` args, with upstream's
//! defaults (LeastAllocated over gpu-memory-ratio, gpu-memory, rdma and
//! fpga, each weight 1) and formulas: per device type the pod requests,
//! every weighted resource the node's devices of that type offer counts
//! `requested = total − free + per-device request` against `total`;
//! LeastAllocated scores `(total − requested) × 100 / total` (0 when over),
//! MostAllocated `min(requested, total) × 100 / total`; the weighted mean
//! per type, summed over types, then scaled so the best node gets 100.

use apis::extension::device_share::{
    RESOURCE_FPGA, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO, RESOURCE_RDMA,
};
use serde::Deserialize;

use crate::framework::MAX_NODE_SCORE;

pub const LEAST_ALLOCATED: &str = "LeastAllocated";
pub const MOST_ALLOCATED: &str = "MostAllocated";

/// `DeviceShareArgs.scoringStrategy.resources[]` as written.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ResourceSpecArgs {
    pub name: String,
    pub weight: i64,
}

/// `DeviceShareArgs.scoringStrategy` as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ScoringStrategyArgs {
    #[serde(rename = "type", default)]
    pub scoring_type: String,
    #[serde(default)]
    pub resources: Vec<ResourceSpecArgs>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoringType {
    LeastAllocated,
    MostAllocated,
}

/// A validated scoring strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoringStrategy {
    pub scoring_type: ScoringType,
    /// (resource, weight in 1..=100).
    pub resources: Vec<(String, i64)>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        Self {
            scoring_type: ScoringType::LeastAllocated,
            resources: [
                RESOURCE_GPU_MEMORY_RATIO,
                RESOURCE_GPU_MEMORY,
                RESOURCE_RDMA,
                RESOURCE_FPGA,
            ]
            .into_iter()
            .map(|name| (name.to_string(), 1))
            .collect(),
        }
    }
}

impl ScoringStrategy {
    /// Upstream's checks: weights in (0, 100], a known type. A given
    /// strategy replaces the default whole (resources included), as upstream.
    pub fn from_args(args: Option<&ScoringStrategyArgs>) -> Result<Self, String> {
        let Some(args) = args else {
            return Ok(Self::default());
        };
        for resource in &args.resources {
            if resource.weight <= 0 || resource.weight > 100 {
                return Err(format!(
                    "scoringStrategy.resources: resource weight of {} not in valid range (0, 100]",
                    resource.name
                ));
            }
        }
        let scoring_type = match args.scoring_type.as_str() {
            LEAST_ALLOCATED => ScoringType::LeastAllocated,
            MOST_ALLOCATED => ScoringType::MostAllocated,
            other => return Err(format!("scoring strategy {other} is not supported")),
        };
        Ok(Self {
            scoring_type,
            resources: args
                .resources
                .iter()
                .map(|r| (r.name.clone(), r.weight))
                .collect(),
        })
    }

    /// Whether devices within a node are taken fullest first.
    pub fn packs(&self) -> bool {
        self.scoring_type == ScoringType::MostAllocated
    }

    /// The score of one device type on a node. `amounts(resource)` gives
    /// (total over the type's devices, free over them, the pod's request
    /// per device), or None when the resource is not of this type.
    pub fn score_type(&self, amounts: impl Fn(&str) -> Option<(i64, i64, i64)>) -> i64 {
        let mut weighted: i128 = 0;
        let mut weight_sum: i128 = 0;
        for (name, weight) in &self.resources {
            let Some((total, free, request)) = amounts(name) else {
                continue;
            };
            if total <= 0 {
                continue;
            }
            let (total, free, request) = (i128::from(total), i128::from(free), i128::from(request));
            let requested = if total >= free {
                total - free + request
            } else {
                total
            };
            let score = match self.scoring_type {
                ScoringType::LeastAllocated if requested > total => 0,
                ScoringType::LeastAllocated => (total - requested) * 100 / total,
                ScoringType::MostAllocated => requested.min(total) * 100 / total,
            };
            weighted += score * i128::from(*weight);
            weight_sum += i128::from(*weight);
        }
        if weight_sum == 0 {
            return 0;
        }
        i64::try_from(weighted / weight_sum).unwrap_or(0)
    }
}

/// Kubernetes' default normalization: the best node gets 100, the others
/// in proportion; all zero stays zero.
pub fn normalize(scores: &mut [i64]) {
    let top = scores.iter().copied().max().unwrap_or(0);
    if top <= 0 {
        for score in scores {
            *score = 0;
        }
        return;
    }
    for score in scores {
        *score = (*score).max(0) * MAX_NODE_SCORE / top;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(json: &str) -> Result<ScoringStrategy, String> {
        let raw: ScoringStrategyArgs = serde_json::from_str(json).unwrap();
        ScoringStrategy::from_args(Some(&raw))
    }

    #[test]
    fn defaults_and_validation_follow_upstream() {
        let strategy = ScoringStrategy::from_args(None).unwrap();
        assert_eq!(strategy.scoring_type, ScoringType::LeastAllocated);
        assert_eq!(strategy.resources.len(), 4);
        assert!(strategy.resources.iter().all(|(_, w)| *w == 1));
        assert_eq!(
            args(r#"{"type":"Balanced","resources":[]}"#).err().unwrap(),
            "scoring strategy Balanced is not supported"
        );
        assert!(
            args(r#"{"type":"MostAllocated","resources":[{"name":"koordinator.sh/rdma","weight":0}]}"#)
                .err()
                .unwrap()
                .contains("not in valid range (0, 100]")
        );
        let most = args(r#"{"type":"MostAllocated","resources":[{"name":"koordinator.sh/gpu-memory-ratio","weight":3}]}"#)
            .unwrap();
        assert!(most.packs());
        assert_eq!(
            most.resources,
            vec![(RESOURCE_GPU_MEMORY_RATIO.to_string(), 3)]
        );
    }

    /// Upstream's scoring_test facts: 8 GPUs of 100 % each, 4 × 100 % free,
    /// a pod asking 100 % of one: requested 500 of 800.
    #[test]
    fn least_and_most_allocated_formulas() {
        let amounts = |name: &str| (name == RESOURCE_GPU_MEMORY_RATIO).then_some((800, 400, 100));
        let least = ScoringStrategy::default();
        assert_eq!(least.score_type(amounts), 37); // (800 − 500) × 100 / 800
        let most = ScoringStrategy {
            scoring_type: ScoringType::MostAllocated,
            ..Default::default()
        };
        assert_eq!(most.score_type(amounts), 62); // 500 × 100 / 800
        // Over capacity: LeastAllocated 0, MostAllocated capped at 100.
        let over = |name: &str| (name == RESOURCE_RDMA).then_some((100, 20, 50));
        assert_eq!(least.score_type(over), 0);
        assert_eq!(most.score_type(over), 100);
        // Nothing weighted offered: 0.
        assert_eq!(least.score_type(|_: &str| None), 0);
    }

    #[test]
    fn weights_average_the_resources() {
        let strategy = ScoringStrategy {
            scoring_type: ScoringType::LeastAllocated,
            resources: vec![
                (RESOURCE_GPU_MEMORY_RATIO.to_string(), 3),
                (RESOURCE_RDMA.to_string(), 1),
            ],
        };
        let amounts = |name: &str| match name {
            RESOURCE_GPU_MEMORY_RATIO => Some((200, 200, 100)), // 50
            RESOURCE_RDMA => Some((100, 100, 0)),               // 100
            _ => None,
        };
        assert_eq!(strategy.score_type(amounts), (50 * 3 + 100) / 4);
    }

    #[test]
    fn normalization_scales_the_best_to_100() {
        let mut scores = [0, 25, 50];
        normalize(&mut scores);
        assert_eq!(scores, [0, 50, 100]);
        let mut zeros = [0, 0];
        normalize(&mut zeros);
        assert_eq!(zeros, [0, 0]);
    }
}
